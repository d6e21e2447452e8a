//! The agent's own threads (the control thread, the resize settler), started so that they never
//! take a signal meant for the program.
//!
//! A signal sent to a process (`kill(pid, sig)`) goes to any one of its threads that does not
//! block it. A thread the agent adds to the program must therefore block every signal the
//! program may use, or the program's handler runs on the agent's thread, at a moment the
//! program never expected. dash, for one, ignores a trapped signal whose handler runs while the
//! shell is in `vfork` (it blocks every signal on its own thread and sets a flag for the child
//! only): ftracetest's `exit_unsupported` signal to its parent shell was lost that way, and a
//! test that had said UNSUPPORTED passed.
//!
//! The mask is set on the spawning thread around `spawn` (a new thread inherits its creator's
//! mask, so no signal can reach the new thread before it is in place) and restored after. The
//! agent's threads still take what they must:
//! - the stop-the-world signal ([`crate::text::stop_signal`]), sent to each thread by `tgkill`,
//!   which parks every other thread while code is patched;
//! - the synchronous fault signals, which the kernel delivers to the faulting thread whatever
//!   its mask (left unblocked so that a fault is reported as itself, not as a forced kill).

use std::thread::JoinHandle;

/// The signals an agent thread leaves unblocked.
fn taken_signals() -> [libc::c_int; 6] {
    [
        crate::text::stop_signal(),
        libc::SIGSEGV,
        libc::SIGBUS,
        libc::SIGILL,
        libc::SIGFPE,
        libc::SIGTRAP,
    ]
}

/// The calling thread's signal mask, restored when dropped.
struct MaskSaved(libc::sigset_t);

impl MaskSaved {
    /// Blocks every signal but [`taken_signals`] on the calling thread.
    fn block_the_programs() -> Self {
        // SAFETY: plain sigset_t values, initialised by sigfillset / pthread_sigmask before use;
        // pthread_sigmask only changes the calling thread's mask.
        unsafe {
            let mut block: libc::sigset_t = core::mem::zeroed();
            let mut old: libc::sigset_t = core::mem::zeroed();
            libc::sigfillset(&mut block);
            for s in taken_signals() {
                libc::sigdelset(&mut block, s);
            }
            libc::pthread_sigmask(libc::SIG_BLOCK, &block, &mut old);
            MaskSaved(old)
        }
    }
}

impl Drop for MaskSaved {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved by `block_the_programs` on the same thread.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.0, core::ptr::null_mut()) };
    }
}

/// Starts an agent thread named `name` running `f`, with the program's signals blocked on it
/// and its handler guard held for good: nothing it does is recorded, not even a trace event
/// fired by a library the program preloads around a call the agent makes (a `nanosleep`
/// interposed to fire `sched_switch`).
pub fn spawn<F, T>(name: &str, f: F) -> std::io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let _saved = MaskSaved::block_the_programs();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            // SAFETY: the new thread's own state block, before anything of it runs.
            unsafe { (*crate::handler::current()).guard = 1 };
            f()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The blocked-signal mask of thread `tid` of this process, from /proc.
    fn blocked_mask(tid: libc::pid_t) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap();
        let hex = status
            .lines()
            .find_map(|l| l.strip_prefix("SigBlk:"))
            .unwrap()
            .trim();
        u64::from_str_radix(hex, 16).unwrap()
    }

    fn bit(sig: libc::c_int) -> u64 {
        1 << (sig - 1)
    }

    #[test]
    fn an_agent_thread_blocks_the_programs_signals_and_takes_the_stop_signal() {
        // SAFETY: gettid has no preconditions.
        let before = blocked_mask(unsafe { libc::gettid() });
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let t = spawn("mask-test", move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() }).unwrap();
            done_rx.recv().unwrap();
        })
        .unwrap();
        let tid = rx.recv().unwrap();
        let mask = blocked_mask(tid);
        done_tx.send(()).unwrap();
        t.join().unwrap();
        for s in [
            libc::SIGUSR1,
            libc::SIGCHLD,
            libc::SIGINT,
            libc::SIGTERM,
            40,
        ] {
            assert_ne!(
                mask & bit(s),
                0,
                "signal {s} reaches the agent thread: {mask:x}"
            );
        }
        for s in taken_signals() {
            assert_eq!(mask & bit(s), 0, "signal {s} is blocked: {mask:x}");
        }
        // The spawning thread's own mask is as it was.
        // SAFETY: gettid has no preconditions.
        assert_eq!(blocked_mask(unsafe { libc::gettid() }), before);
    }
}
