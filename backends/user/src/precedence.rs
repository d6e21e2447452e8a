//! A program thread that outruns its drainer yields the CPU to it: its nice value goes up.
//!
//! The scheduler shares a CPU between runnable threads by weight, the same for the same nice
//! value. A call-dense program with as many busy threads as CPUs shares each CPU between a
//! writer and a drainer, and each gets half of it; a drainer that needs more CPU time for an
//! event than its writer takes to make one then falls behind for good, whatever the ring's
//! size (its memory buys time, not throughput), and the ring loses events once full. On one
//! machine (AMD EPYC, 2 vCPUs, a VM) the stream-check program's writers make an event in
//! about 14 ns and a drainer sharing their CPU takes 21 (perf samples; 12 with a CPU of its
//! own): recordings of its 100 M calls lost 14 to 40 % of their events, every one. The
//! whole program run at nice 3 (weight 526 against the drainer's 1024) lost none (3 of 3,
//! 1.6-1.7 s a recording against 1.4).
//!
//! So a drainer that finds a ring at its largest size a quarter full after its turn (the
//! drainer losing the race, as [`crate::placement`] says) raises that ring's thread's nice
//! value by [`NICE_STEP`], once per thread. Only such a thread: a program whose drainers
//! keep up (a single busy thread and an idle CPU, fib, an interpreter) never has a thread
//! reniced. The priority stays lowered for the rest of the thread's life (an unprivileged
//! process may raise a nice value, not lower it again: `RLIMIT_NICE`), but it only counts
//! while the thread competes for a CPU. The recording's summary names the threads and their
//! new nice values. Measured (same machine, 100 M calls a recording): with a step of 3,
//! events lost in 7 of 24 recordings (0.1-5.8 M each); with 5, in none of 40 counted exactly
//! (1.35-1.68 s a recording), nor in 3 of function_graph's (200 M events each).
//!
//! Why not raise the drainer's priority instead: a negative nice value needs privileges
//! most users do not have, and a mechanism that works for some users and not others would
//! make the same recording complete for root and lossy for everyone else.

use std::io;

/// Whether a program thread that outruns its drainer is made to yield to it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Yield {
    /// Its nice value goes up by [`NICE_STEP`], once (the default).
    #[default]
    WhenBehind,
    /// Its priority is left alone (`--keep-priority`): the events the tool cannot keep up
    /// with are lost, and counted.
    Never,
}

/// How much a thread's nice value goes up when it outruns its drainer: 5, for a weight of
/// 335 against the drainer's 1024 at nice 0, three quarters of a shared CPU to the drainer
/// (the kernel's weights grow about 1.25 times a step). With 3 (two thirds; the drainer
/// above needs three fifths) recordings still lost events now and then (module docs).
pub const NICE_STEP: i32 = 5;

/// The largest nice value.
const NICE_MAX: i32 = 19;

/// Raises thread `tid`'s nice value by [`NICE_STEP`] (at most 19): its new nice value, or
/// why not (the thread is gone, or another user's).
pub fn yield_to_drainer(tid: u32) -> io::Result<i32> {
    let now = nice_of(tid)?;
    let new = (now + NICE_STEP).min(NICE_MAX);
    // SAFETY: a plain syscall on a thread id.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, new) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(new)
}

/// Thread `tid`'s nice value.
pub fn nice_of(tid: u32) -> io::Result<i32> {
    // SAFETY: errno is thread-local; `getpriority` may return -1 as a value, so errno is
    // cleared first and read after.
    unsafe {
        *libc::__errno_location() = 0;
        let nice = libc::getpriority(libc::PRIO_PROCESS, tid);
        if nice == -1 && *libc::__errno_location() != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(nice)
    }
}

/// A thread of the test process that waits until dropped: tests renice it, not themselves
/// (nor a thread id that may be another process's).
#[cfg(test)]
pub(crate) struct WaitingThread {
    /// Its thread id.
    pub(crate) tid: u32,
    go: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[cfg(test)]
impl WaitingThread {
    /// Starts it.
    pub(crate) fn start() -> WaitingThread {
        let (tx, rx) = std::sync::mpsc::channel();
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            // SAFETY: no preconditions.
            tx.send(unsafe { libc::gettid() } as u32).unwrap();
            let _ = wait.recv();
        });
        WaitingThread {
            tid: rx.recv().unwrap(),
            go: Some(go),
            thread: Some(thread),
        }
    }
}

#[cfg(test)]
impl Drop for WaitingThread {
    fn drop(&mut self) {
        drop(self.go.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread's nice value goes up by the step, to 19 at most; a thread that does not exist
    /// is an error.
    #[test]
    fn a_thread_yields_by_the_step_up_to_the_largest_nice_value() {
        let thread = WaitingThread::start();
        let tid = thread.tid;
        let start = nice_of(tid).unwrap();
        let first = yield_to_drainer(tid).unwrap();
        assert_eq!(first, (start + NICE_STEP).min(NICE_MAX));
        assert_eq!(nice_of(tid).unwrap(), first);
        for _ in 0..10 {
            yield_to_drainer(tid).unwrap();
        }
        assert_eq!(nice_of(tid).unwrap(), NICE_MAX);
        // This thread's own nice value is untouched.
        // SAFETY: no preconditions.
        let me = unsafe { libc::gettid() } as u32;
        assert_eq!(nice_of(me).unwrap(), start);
        drop(thread);
        assert!(yield_to_drainer(u32::MAX >> 1).is_err());
    }
}
