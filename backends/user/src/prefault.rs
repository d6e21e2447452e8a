//! Making a ring file's pages ahead of the thread that will write them ([`PageWriter`]), on a
//! CPU nothing else wants, so that the thread finds them made and cleared instead of faulting
//! on each (2.5-4 us a page on a VM) in its first lap.
//!
//! The calling thread runs at `SCHED_IDLE` meanwhile (at the normal priority a fib(1)
//! recording's median was 0.35-0.5 ms slower: the pages took the CPU the program's start
//! wanted), and makes each page with a page fault of its own: a read of the page's first
//! byte through a shared mapping of the file, which on tmpfs clears the page (allocating it
//! if need be) and changes no byte. Not with `MADV_POPULATE_WRITE` over the mapping: it
//! holds the process's `mmap_lock` across pages and gives the CPU up between them
//! (`cond_resched`) with the lock held; at idle priority, on CPUs the program's threads kept
//! busy, the thread then did not run again for hundreds of milliseconds, and the drainers,
//! which take the lock to map each ring, waited for it: 300 ms in one recording of a
//! two-thread program of 100 M calls (the scheduler's switch events: both drainers in state
//! D from the program's start, the thread preempted), the rings full meanwhile, 9.5 M events
//! lost. A fault takes only the mapping's own lock (the VMA's, Linux 6.4+; the process's on
//! older kernels, but then too only for the one fault) and releases it before the thread can
//! be preempted on its way back to user space.
//!
//! Each page's room on the file system is taken first (`fallocate` of 16 pages at a time: on
//! tmpfs it allocates them, leaving their clearing to the first fault, and says `ENOSPC` when
//! there is no room): a fault on a page of a shared mapping that cannot be allocated kills the
//! process with `SIGBUS`. (`fallocate` holds the file's own lock, which the program's faults
//! on the ring do not take.)
//!
//! Invariant: no byte of the file changes (a page the program wrote first keeps what it
//! wrote); the writing ends within 16 pages after [`PageWriter::stop`]; a full file system
//! ends it, never the tool.

use std::fs::File;
use std::sync::atomic::{AtomicBool, Ordering};

/// The bytes between two pages the writer touches.
const PAGE: usize = 4096;
/// The bytes it makes room for at a time (16 pages), and between two looks at whether to go
/// on.
const CHUNK: usize = 16 * PAGE;

/// Makes a ring file's pages until they are all made or [`stop`](Self::stop) is called,
/// whichever comes first (see the module docs).
#[derive(Debug, Default)]
pub struct PageWriter {
    stopped: AtomicBool,
}

impl PageWriter {
    /// A writer that has made nothing yet.
    pub fn new() -> PageWriter {
        PageWriter::default()
    }

    /// Makes the pages of `f` (`bytes` long) from the calling thread at idle priority, best
    /// effort, until all are made or [`stop`](Self::stop) is called. Nothing happens after
    /// `stop`, or when the file cannot be mapped.
    pub fn write(&self, f: &File, bytes: u64) {
        use std::os::fd::AsRawFd as _;
        let Ok(len) = usize::try_from(bytes) else {
            return;
        };
        if len == 0 || self.stopped.load(Ordering::Relaxed) {
            return;
        }
        // Mapped and unmapped at the thread's own priority, only the faults at idle priority:
        // `munmap` holds the process's `mmap_lock` while it clears the page tables, and gives
        // the CPU up midway (`cond_resched`); at idle priority a drainer waited 52 ms for the
        // lock to map a ring (the scheduler's switch events, 20 recordings of 100 M calls).
        let Some(map) = ReadMapping::new(f, len) else {
            return;
        };
        let idle = IdlePriority::new();
        let mut at = 0;
        while at < len && !self.stopped.load(Ordering::Relaxed) {
            let n = (len - at).min(CHUNK);
            // Room first: a fault on a page the file system has no room for would kill the
            // tool (`SIGBUS`); `fallocate` says `ENOSPC` instead (and leaves what the program
            // wrote as it is).
            // SAFETY: a plain syscall on the caller's file.
            if unsafe { libc::fallocate(f.as_raw_fd(), 0, at as libc::off_t, n as libc::off_t) }
                != 0
            {
                break;
            }
            for page in (at..at + n).step_by(PAGE) {
                // SAFETY: `page` is within the mapping's `len` bytes.
                unsafe { map.ptr.add(page).read_volatile() };
            }
            at += n;
        }
        drop(idle);
        drop(map);
    }

    /// Ends the writing: a [`write`](Self::write) under way returns within 16 pages; none
    /// starts from now on.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
    }
}

/// A read-only shared mapping of a file's first `len` bytes, unmapped when dropped.
struct ReadMapping {
    ptr: *mut u8,
    len: usize,
}

impl ReadMapping {
    /// Maps `f`'s first `len` bytes (`len` > 0); `None` when they cannot be mapped.
    fn new(f: &File, len: usize) -> Option<ReadMapping> {
        use std::os::fd::AsRawFd as _;
        // SAFETY: a fresh mapping of the caller's file, owned by the value returned.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        (p != libc::MAP_FAILED).then_some(ReadMapping { ptr: p.cast(), len })
    }
}

impl Drop for ReadMapping {
    fn drop(&mut self) {
        // SAFETY: the mapping `new` made, unmapped once.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// Whether each page of `f`'s first `len` bytes is in memory (`mincore` of a fresh mapping:
/// the file's page cache). For the tests of the modules that make or drop a file's pages.
#[cfg(test)]
pub(crate) fn resident(f: &File, len: usize) -> Vec<bool> {
    let map = ReadMapping::new(f, len).expect("the file maps");
    let mut vec = vec![0u8; len.div_ceil(PAGE)];
    // SAFETY: the mapping is `len` bytes; `vec` holds a byte per page.
    let r = unsafe { libc::mincore(map.ptr.cast(), len, vec.as_mut_ptr()) };
    assert_eq!(r, 0);
    vec.into_iter().map(|b| b & 1 != 0).collect()
}

/// The calling thread at `SCHED_IDLE` until dropped, then at its scheduling policy again
/// where that is allowed (an unprivileged thread leaves `SCHED_IDLE` only as far as its
/// `RLIMIT_NICE` lets it).
struct IdlePriority {
    /// The policy and parameter it had (`None`: unknown, left as is).
    was: Option<(libc::c_int, libc::sched_param)>,
}

impl IdlePriority {
    fn new() -> IdlePriority {
        // SAFETY: plain syscalls on the calling thread; a zeroed sched_param is a valid
        // out-parameter and a valid SCHED_IDLE parameter.
        let was = unsafe {
            let mut param: libc::sched_param = core::mem::zeroed();
            let policy = libc::sched_getscheduler(0);
            let got = policy >= 0 && libc::sched_getparam(0, &mut param) == 0;
            let idle: libc::sched_param = core::mem::zeroed();
            let set = libc::sched_setscheduler(0, libc::SCHED_IDLE, &idle) == 0;
            // The change does not end the thread's turn on its CPU (the kernel reschedules
            // at the next tick): a drainer started beside it waited there 1.1-1.6 ms before
            // its first look for the program's ring (fib(27), 2 of 3 recordings), by which time
            // the program had filled three quarters of it and moved to a larger one.
            libc::sched_yield();
            (got && set).then_some((policy, param))
        };
        IdlePriority { was }
    }
}

impl Drop for IdlePriority {
    fn drop(&mut self) {
        if let Some((policy, param)) = self.was {
            // SAFETY: a plain syscall on the calling thread with the parameter it had.
            unsafe { libc::sched_setscheduler(0, policy, &param) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek};
    use std::os::unix::fs::FileExt;

    /// A sparse file of `bytes` on tmpfs (where the tool makes its rings) when there is one.
    fn file(bytes: u64) -> (tempfile::TempDir, File) {
        let dir = tempfile::tempdir_in("/dev/shm")
            .or_else(|_| tempfile::tempdir())
            .unwrap();
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(dir.path().join("ring"))
            .unwrap();
        f.set_len(bytes).unwrap();
        (dir, f)
    }

    /// Pages of `f`'s first `len` bytes in memory.
    fn resident_pages(f: &File, len: usize) -> usize {
        resident(f, len).iter().filter(|r| **r).count()
    }

    #[test]
    fn makes_every_page_and_changes_no_byte() {
        let len = 1 << 20;
        let (_d, mut f) = file(len as u64);
        f.write_all_at(b"written first", 4096 * 7).unwrap();
        let before = resident_pages(&f, len);
        assert!(before <= 2, "{before}");
        PageWriter::new().write(&f, len as u64);
        assert_eq!(resident_pages(&f, len), len / PAGE);
        let mut all = Vec::new();
        f.rewind().unwrap();
        f.read_to_end(&mut all).unwrap();
        assert_eq!(all.len(), len);
        assert_eq!(&all[4096 * 7..4096 * 7 + 13], b"written first");
        assert!(
            all[..4096 * 7]
                .iter()
                .chain(&all[4096 * 7 + 13..])
                .all(|b| *b == 0)
        );
    }

    #[test]
    fn stopped_it_makes_nothing() {
        let len = 1 << 20;
        let (_d, f) = file(len as u64);
        let w = PageWriter::new();
        w.stop();
        w.write(&f, len as u64);
        assert_eq!(resident_pages(&f, len), 0);
    }

    /// Where the file system grants no room (here: `fallocate` on a descriptor opened for
    /// reading only, `EBADF`; `ENOSPC` on a full one), no page is touched: a fault there would
    /// be a `SIGBUS`.
    #[test]
    fn no_room_no_page_touched() {
        let len = 1 << 20;
        let (d, _f) = file(len as u64);
        let read_only = File::open(d.path().join("ring")).unwrap();
        PageWriter::new().write(&read_only, len as u64);
        assert_eq!(resident_pages(&read_only, len), 0);
    }

    /// A writer stopped while it works returns (a file far larger than it can make before
    /// `stop`: sparse, a page is made only when the writer reaches it), having run at
    /// `SCHED_IDLE` (`policy`, the 41st field of the thread's stat: 5); the thread gets its
    /// policy back (allowed here: the tests run as root).
    #[test]
    fn stop_ends_a_write_under_way_which_ran_at_idle_priority() {
        let len: u64 = 1 << 34;
        let (_d, f) = file(len);
        let w = std::sync::Arc::new(PageWriter::new());
        let (w2, tid) = (w.clone(), std::sync::mpsc::channel());
        let policy = |tid: i32| -> Option<u32> {
            let st = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
            st[st.rfind(')')? + 2..].split(' ').nth(38)?.parse().ok()
        };
        let t = std::thread::spawn(move || {
            // SAFETY: no preconditions.
            let me = unsafe { libc::gettid() };
            tid.0.send(me).unwrap();
            w2.write(&f, len);
            (me, policy(me))
        });
        let writer = tid.1.recv().unwrap();
        let since = std::time::Instant::now();
        while policy(writer) != Some(libc::SCHED_IDLE as u32) {
            assert!(since.elapsed() < std::time::Duration::from_secs(10));
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        w.stop();
        let (_, after) = t.join().unwrap();
        // SAFETY: no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            assert_eq!(after, Some(libc::SCHED_OTHER as u32));
        }
    }
}
