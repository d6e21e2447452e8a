//! Making a ring file's pages ahead of the thread that will write them ([`PageMaker`]), on
//! another CPU, so that the thread's first lap maps pages the file has instead of having each
//! made by its own fault.
//!
//! Each page is made with `fallocate` (16 pages a call): on tmpfs it allocates the pages and
//! leaves their clearing to the first fault, and says `ENOSPC` when there is no room (a
//! fault on a page of a shared mapping that cannot be allocated kills the process with
//! `SIGBUS`; `fallocate` holds the file's own lock, which the program's faults on the ring do
//! not take). Measured on the machine of the twenty-second session (a VM whose page tables
//! the host shadows, free memory reported to the host; C probes, a 2 MiB tmpfs file, best of
//! 7): a write fault on a page the file lacks 2.2 us; on a page `fallocate` made 0.9 us, and
//! the same on a page already cleared (the clearing the fault does is ~0.04 us of it);
//! `fallocate` 1.0 us a page. The previous version also read each page through a mapping of
//! its own, to have it cleared: 1.7 us more a page (512 faults of the tool per recording) for
//! nothing the program's fault saved, so it made the spare too slowly to be ahead of the
//! program (0-278 of its 448 pages past the first 256 KiB made when the program took it).
//! `fallocate` alone: fib(27) recordings 0.2-0.7 ms faster (fewest), 0.4-1.0 ms (median),
//! interleaved; fib(1) within the noise.
//!
//! The calling thread runs at `SCHED_IDLE` meanwhile. (Read through a mapping, the pages
//! made at the normal priority made a fib(1) recording's median 0.35-0.5 ms slower: they took
//! the CPU the program's start wanted. With `fallocate` alone the priority made no difference,
//! fib(27) or fib(1), 16 interleaved runs each; idle it stays, or a large spare
//! (`--buffer-size`) would hold a CPU the program wants for longer.)
//!
//! Invariant: no byte of the file changes (a page the program wrote first keeps what it
//! wrote); the making ends within 16 pages after [`PageMaker::stop`]; a full file system ends
//! it, never the tool.

use std::fs::File;
use std::sync::atomic::{AtomicBool, Ordering};

/// The bytes of a page.
const PAGE: usize = 4096;
/// The bytes it makes at a time (16 pages), and between two looks at whether to go on.
const CHUNK: usize = 16 * PAGE;

/// Makes a ring file's pages until they are all made or [`stop`](Self::stop) is called,
/// whichever comes first (see the module docs).
#[derive(Debug, Default)]
pub struct PageMaker {
    stopped: AtomicBool,
}

impl PageMaker {
    /// A maker that has made nothing yet.
    pub fn new() -> PageMaker {
        PageMaker::default()
    }

    /// Makes the pages of `f` (`bytes` long) from the calling thread at idle priority, best
    /// effort, until all are made or [`stop`](Self::stop) is called. Nothing happens after
    /// `stop`.
    pub fn make(&self, f: &File, bytes: u64) {
        use std::os::fd::AsRawFd as _;
        let Ok(len) = usize::try_from(bytes) else {
            return;
        };
        if len == 0 || self.stopped.load(Ordering::Relaxed) {
            return;
        }
        let _idle = IdlePriority::new();
        let mut at = 0;
        while at < len && !self.stopped.load(Ordering::Relaxed) {
            let n = (len - at).min(CHUNK);
            // SAFETY: a plain syscall on the caller's file.
            if unsafe { libc::fallocate(f.as_raw_fd(), 0, at as libc::off_t, n as libc::off_t) }
                != 0
            {
                break;
            }
            at += n;
        }
    }

    /// Ends the making: a [`make`](Self::make) under way returns within 16 pages; none
    /// starts from now on.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
    }
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

/// Whether each page of `f`'s first `len` bytes is in memory (`mincore` of a fresh mapping:
/// the file's page cache). For the tests of the modules that make or drop a file's pages.
#[cfg(test)]
pub(crate) fn resident(f: &File, len: usize) -> Vec<bool> {
    use std::os::fd::AsRawFd as _;
    // SAFETY: a fresh read-only mapping of the caller's file, unmapped below; `vec` holds a
    // byte per page of it.
    unsafe {
        let p = libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        );
        assert_ne!(p, libc::MAP_FAILED, "the file maps");
        let mut vec = vec![0u8; len.div_ceil(PAGE)];
        let r = libc::mincore(p, len, vec.as_mut_ptr());
        libc::munmap(p, len);
        assert_eq!(r, 0);
        vec.into_iter().map(|b| b & 1 != 0).collect()
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

    /// Bytes of `f` the file system holds (its allocated blocks).
    fn made_bytes(f: &File) -> u64 {
        use std::os::unix::fs::MetadataExt as _;
        f.metadata().unwrap().blocks() * 512
    }

    #[test]
    fn makes_every_page_and_changes_no_byte() {
        let len = 1 << 20;
        let (_d, mut f) = file(len as u64);
        f.write_all_at(b"written first", 4096 * 7).unwrap();
        let before = made_bytes(&f);
        assert!(before <= 2 * PAGE as u64, "{before}");
        PageMaker::new().make(&f, len as u64);
        assert!(made_bytes(&f) >= len as u64, "{} of {len}", made_bytes(&f));
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
        let w = PageMaker::new();
        w.stop();
        w.make(&f, len as u64);
        assert_eq!(made_bytes(&f), 0);
    }

    /// Where the file system grants no room (here: `fallocate` on a descriptor opened for
    /// reading only, `EBADF`; `ENOSPC` on a full one), nothing is made and the maker returns.
    #[test]
    fn no_room_nothing_made() {
        let len = 1 << 20;
        let (d, _f) = file(len as u64);
        let read_only = File::open(d.path().join("ring")).unwrap();
        PageMaker::new().make(&read_only, len as u64);
        assert_eq!(made_bytes(&read_only), 0);
    }

    /// A maker stopped while it works returns (a file far larger than it can make before
    /// `stop`: sparse, a page is made only when the maker reaches it), having made some at
    /// `SCHED_IDLE` (`policy`, the 41st field of the thread's stat: 5); the thread gets its
    /// policy back (allowed here: the tests run as root).
    #[test]
    fn stop_ends_a_make_under_way_which_ran_at_idle_priority() {
        let len: u64 = 1 << 34;
        let (_d, f) = file(len);
        let f = std::sync::Arc::new(f);
        let w = std::sync::Arc::new(PageMaker::new());
        let (w2, f2, tid) = (w.clone(), f.clone(), std::sync::mpsc::channel());
        let policy = |tid: i32| -> Option<u32> {
            let st = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
            st[st.rfind(')')? + 2..].split(' ').nth(38)?.parse().ok()
        };
        let t = std::thread::spawn(move || {
            // SAFETY: no preconditions.
            let me = unsafe { libc::gettid() };
            tid.0.send(me).unwrap();
            w2.make(&f2, len);
            policy(me)
        });
        let maker = tid.1.recv().unwrap();
        let since = std::time::Instant::now();
        while made_bytes(&f) == 0 || policy(maker) != Some(libc::SCHED_IDLE as u32) {
            assert!(since.elapsed() < std::time::Duration::from_secs(10));
            std::thread::yield_now();
        }
        w.stop();
        let after = t.join().unwrap();
        // SAFETY: no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            assert_eq!(after, Some(libc::SCHED_OTHER as u32));
        }
        let made = made_bytes(&f);
        assert!(made > 0 && made < len, "{made} of {len} bytes made");
    }
}
