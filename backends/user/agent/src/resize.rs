//! Resizing the threads' rings while the program runs (`buffer_size_kb` on the live mount,
//! the control request `RESIZE <bytes>`).
//!
//! A request ([`request`]) installs an [`Instance`] with the new size and bumps
//! [`RING_GEN`]. Every thread then moves to a new ring of that size the next time one of the
//! agent's Rust handlers runs on it (`take`, called with the thread's guard held): its
//! events up to the switch stay in the old ring file, which the tool drains as any other
//! (nothing is lost, the readers merge a thread's files by time), and the new ones go to a
//! new `buf-<tid>.<n>` file. The assembly fast paths never call Rust, so while a request is
//! [`PENDING`] they are off ([`crate::handler::update_fast_path`]): every event of every
//! thread goes through the handlers, and [`settle`] turns them back on once every registered
//! thread still alive has switched. A thread that never runs a handler again keeps its old
//! ring, and keeps the fast paths off for all, until it exits. A forked child inherits its
//! parent's state and has no control thread: a request pending at the fork keeps its fast
//! paths off.
//!
//! The old ring stays mapped in the program: an assembly fast path interrupted by a signal
//! handler that switches the thread may still be writing its event into it, and the agent
//! has no safe point after that. The cost is the old ring's size once per thread and resize
//! (the tool may delete the file; the pages stay until the process exits).

use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Mutex;

use crate::handler::{self, FAILED_THREADS, INSTANCE, Instance, ThreadState};

/// The ring generation: bumped by every [`request`]; a thread whose
/// [`ThreadState::ring_gen`] differs moves to a new ring the next time a handler runs on it.
pub static RING_GEN: AtomicU32 = AtomicU32::new(0);

/// A [`request`] not yet taken by every registered thread still alive: the assembly fast paths
/// stay off ([`handler::update_fast_path`]).
pub static PENDING: AtomicBool = AtomicBool::new(false);

/// The registered threads and the generation each writes: what [`settle`] checks. A thread
/// takes it in a handler (guard held: a signal handler nesting there records nothing, so never
/// takes it again); [`request`] and [`settle`] take it with signals blocked
/// ([`SignalsBlocked`]), so that no signal handler running traced code on their thread
/// waits for it.
static THREADS: Mutex<Vec<(u32, u32)>> = Mutex::new(Vec::new());

/// Every signal blocked on the calling thread while it lives.
struct SignalsBlocked(libc::sigset_t);

impl SignalsBlocked {
    fn new() -> Self {
        // SAFETY: plain sigset_t values, filled by the calls.
        unsafe {
            let mut all: libc::sigset_t = core::mem::zeroed();
            let mut old: libc::sigset_t = core::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
            SignalsBlocked(old)
        }
    }
}

impl Drop for SignalsBlocked {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved by `new`.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.0, core::ptr::null_mut()) };
    }
}

/// A request the agent cannot take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The agent records nowhere (not armed, or detached).
    NoInstance,
    /// Fewer bytes than the header and one slot.
    TooSmall,
}

/// Asks every thread to move to a ring of `bytes` bytes (file size, header included).
pub fn request(bytes: usize) -> Result<(), Refused> {
    if bytes < crate::buffer::HEADER_SIZE + crate::buffer::SLOT_SIZE {
        return Err(Refused::TooSmall);
    }
    let cur = INSTANCE.load(Ordering::Acquire);
    if cur.is_null() {
        return Err(Refused::NoInstance);
    }
    // SAFETY: instances are leaked, never freed.
    let cur = unsafe { &*cur };
    let next = Instance {
        ring_dir: cur.ring_dir.clone(),
        // (The tool's spare has the size the recording started with.)
        spare: None,
        buffer_bytes: bytes,
        overwrite: cur.overwrite,
        rseq_offset: cur.rseq_offset,
        // Rings of the new size: the tool offers theirs.
        grow_max: 0,
    };
    // Under the threads' lock, so that a [`settle`] cannot turn the fast paths back on
    // between the new generation and `PENDING`.
    let _blocked = SignalsBlocked::new();
    let _t = THREADS.lock().unwrap_or_else(|e| e.into_inner());
    INSTANCE.store(Box::into_raw(Box::new(next)), Ordering::Release);
    PENDING.store(true, Ordering::Relaxed);
    handler::update_fast_path();
    // Release: a thread that sees the new generation sees the new instance.
    RING_GEN.fetch_add(1, Ordering::Release);
    Ok(())
}

/// The threads' lock, held.
pub(crate) type ThreadsGuard = std::sync::MutexGuard<'static, Vec<(u32, u32)>>;

/// Takes the threads' lock for a `fork` ([`crate::before_fork`], after the agent's lock):
/// the settler takes it on its own, and a child forked while it held it would have it held
/// by a thread it does not have, so that its next [`request`] waited forever (a live mount's
/// shell hung so in ftracetest's buffer-size tests). Released in the parent and in the child
/// when the guard is dropped. Signals stay as they are: a handler on the forking thread that
/// registers (`note`) gives up waiting for the lock.
pub(crate) fn lock_for_fork() -> ThreadsGuard {
    THREADS.lock().unwrap_or_else(|e| e.into_inner())
}

/// The generation a thread registering now writes: read before the instance (acquire), so
/// that the instance is at least that new.
pub(crate) fn current_gen() -> u32 {
    RING_GEN.load(Ordering::Acquire)
}

/// Notes that thread `tid` writes generation `generation` now. Gives up after a bounded wait
/// for the lock: in a child forked while another thread held it, it is never released (a
/// thread not noted only makes [`settle`] not wait for it; it still switches at its next
/// handler).
pub(crate) fn note(tid: u32, generation: u32) {
    for _ in 0..1000 {
        let mut t = match THREADS.try_lock() {
            Ok(t) => t,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => {
                std::thread::yield_now();
                continue;
            }
        };
        match t.iter_mut().find(|e| e.0 == tid) {
            Some(e) => e.1 = generation,
            None => t.push((tid, generation)),
        }
        return;
    }
}

/// Whether the calling thread's ring is older than the last request.
#[inline(always)]
pub(crate) fn stale(st: &ThreadState) -> bool {
    st.ring_gen != RING_GEN.load(Ordering::Relaxed)
}

/// Moves the calling (registered) thread to a ring of the newest size. Called by the
/// handlers with the thread's guard held; on failure (no file, no memory) the thread keeps
/// its ring and is counted in [`FAILED_THREADS`].
#[cold]
#[inline(never)]
pub(crate) fn take(st: &mut ThreadState) {
    let generation = current_gen();
    let inst = INSTANCE.load(Ordering::Acquire);
    st.ring_gen = generation;
    note(st.tid, generation);
    if inst.is_null() {
        return;
    }
    // SAFETY: instances are leaked, never freed.
    match handler::create_buffer(unsafe { &*inst }) {
        Some(w) => st.writer = w,
        None => {
            FAILED_THREADS.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Turns the fast paths back on when every registered thread still alive writes the newest
/// generation (a thread gone from `/proc/self/task` never writes again). Returns whether a
/// request is still pending. Called every 10 ms after a request by a thread the control
/// thread starts, until it returns `false`.
pub fn settle() -> bool {
    if !PENDING.load(Ordering::Relaxed) {
        return false;
    }
    let _blocked = SignalsBlocked::new();
    let generation = RING_GEN.load(Ordering::Acquire);
    let mut t = THREADS.lock().unwrap_or_else(|e| e.into_inner());
    t.retain(|&(tid, _)| std::path::Path::new(&format!("/proc/self/task/{tid}")).exists());
    if t.iter().all(|&(_, g)| g == generation) {
        PENDING.store(false, Ordering::Relaxed);
        handler::update_fast_path();
        return false;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffer::{self, HEADER_SIZE, KIND_FUNC, SLOT_SIZE};

    fn read_ring(path: &std::path::Path) -> buffer::Contents {
        buffer::read(&std::fs::read(path).unwrap()).unwrap()
    }

    /// A thread registered before a request keeps writing its ring until a handler runs
    /// on it, then writes a new ring of the new size; the old one keeps what was written
    /// before. The fast paths are off from the request until every live thread has switched.
    #[test]
    fn a_thread_switches_to_a_ring_of_the_new_size_and_the_old_keeps_its_events() {
        // The tracer switches are process-wide (see handler::PROCESS_SWITCHES).
        let _switches = handler::PROCESS_SWITCHES
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let dir = handler::install_test_instance("resize", 8, 0);
        handler::TRACER.store(1, Ordering::Relaxed);
        handler::TRACING_ON.store(true, Ordering::Relaxed);
        handler::CLOCK_TSC.store(true, Ordering::Relaxed);
        handler::update_fast_path();
        assert_eq!(handler::FAST_OK.load(Ordering::Relaxed), 1);

        // SAFETY: every field of a thread state is valid zeroed (integers, null pointers, an
        // atomic): what a thread's TLS block holds before it registers.
        let mut st: ThreadState = unsafe { core::mem::MaybeUninit::zeroed().assume_init() };
        assert!(handler::register(&mut st));
        assert!(!stale(&st));
        for i in 0..10 {
            // SAFETY: registered: the writer maps its ring.
            unsafe { st.writer.write(i, 0x1000 + i, 0, KIND_FUNC, 0, 0) };
        }

        assert_eq!(request(100), Err(Refused::TooSmall));
        request(HEADER_SIZE + 32 * SLOT_SIZE).unwrap();
        assert_eq!(handler::FAST_OK.load(Ordering::Relaxed), 0);
        assert!(stale(&st));
        assert!(settle(), "this thread has not switched yet");
        take(&mut st);
        assert!(!stale(&st));
        for i in 10..50 {
            // SAFETY: as above.
            unsafe { st.writer.write(i, 0x1000 + i, 0, KIND_FUNC, 0, 0) };
        }
        assert!(!settle());
        assert_eq!(handler::FAST_OK.load(Ordering::Relaxed), 1);

        let tid = st.tid;
        let old = read_ring(&dir.join(format!("buf-{tid}")));
        let new = read_ring(&dir.join(format!("buf-{tid}.1")));
        let ts = |c: &buffer::Contents| c.events.iter().map(|e| e.ts).collect::<Vec<_>>();
        // Eight slots before the request (two dropped, counted), 32 after (8 dropped).
        assert_eq!(ts(&old), (0..8).collect::<Vec<_>>());
        assert_eq!(old.dropped, 2);
        assert_eq!(ts(&new), (10..42).collect::<Vec<_>>());
        assert_eq!(new.dropped, 8);
        assert_eq!((new.tid, new.pid), (old.tid, old.pid));

        INSTANCE.store(core::ptr::null_mut(), Ordering::Release);
        assert_eq!(
            request(HEADER_SIZE + 32 * SLOT_SIZE),
            Err(Refused::NoInstance)
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A fork while another thread (the settler) holds the threads' lock waits for it, so
    /// the child gets the lock free: its next request would otherwise wait forever.
    #[test]
    fn a_child_forked_while_the_settler_holds_the_lock_gets_it_free() {
        // The threads' lock is process-wide: the other tests that take it wait.
        let _switches = handler::PROCESS_SWITCHES
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let settler = std::thread::spawn(move || {
            let _t = THREADS.lock().unwrap_or_else(|e| e.into_inner());
            held_tx.send(()).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(200));
        });
        held_rx.recv().unwrap();
        crate::before_fork();
        // SAFETY: the child only tries a lock and leaves with `_exit`.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            crate::after_fork_child();
            let free = THREADS.try_lock().is_ok();
            // SAFETY: leaving the child at once, no destructors.
            unsafe { libc::_exit(if free { 0 } else { 1 }) };
        }
        crate::after_fork_parent();
        let mut status = 0;
        // SAFETY: waiting for our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the child found the threads' lock held ({status:#x})"
        );
        settler.join().unwrap();
    }
}
