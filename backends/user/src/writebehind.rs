//! Writing a long file through the page cache without keeping it there: the drainer's events
//! files ([`crate::drain`]), hundreds of megabytes a recording, written at the rate a traced
//! program makes calls.
//!
//! A plain `write` puts every byte in a new page-cache page, and the pages stay until memory
//! runs short. New pages are the expensive part of the write: on a virtual machine whose free
//! memory is handed back to its host (free page reporting, as on the machines this project runs
//! on), each first touch of such a page is a fault in the host as well; a cold 500 MB write
//! there took 0.39 s of CPU against 0.08 s when the same pages were reused. So each
//! [`WINDOW`] written, a [`WriteBehind`] has the write-back thread (one per process, started
//! with the first file) start the window's write-back (`sync_file_range`), wait for what
//! lies before the window before it to be on disk, and drop its pages
//! (`POSIX_FADV_DONTNEED`): the file's page cache stays at a few windows, and the pages dropped
//! are the ones the next windows reuse.
//!
//! Not from the writing thread: starting write-back allocates the file's blocks there and then
//! (ext4 read a block bitmap from disk for 27 ms in one drainer), and dropping pages not yet
//! clean makes the kernel drain every CPU's page lists through a worker on each, which waits
//! for CPUs the program keeps busy (71 ms in another). The scheduler's switch events of 20
//! recordings of 100 M calls showed both in the drainers; the write-back thread waits instead,
//! and the drainers only write.
//!
//! Invariant: the bytes written are exactly those given, in order; the writing thread never
//! waits for the disk or for the write-back thread (a disk slower than the writer leaves the
//! pages dirty, as a plain `write` would); the advice changes nothing but the memory kept (a
//! file on tmpfs, whose pages are the file, gets none).

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsRawFd as _;
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, OnceLock};

/// Bytes written between two starts of write-back: 8 MiB.
pub const WINDOW: u64 = 8 << 20;

/// A file written through the page cache, its pages let go of behind the writer (see the
/// module docs).
#[derive(Debug)]
pub struct WriteBehind {
    file: Arc<File>,
    /// Whether the file's pages are let go of at all: not on tmpfs, where the pages are the
    /// file and cannot be dropped (trying would cost the write-back thread a walk over them
    /// each time, for nothing).
    advise: bool,
    /// Bytes written so far.
    written: u64,
    /// Bytes handed to the write-back thread: a multiple of [`WINDOW`].
    handed: u64,
}

/// What the write-back thread is asked to do.
enum Work {
    /// Start the write-back of `file`'s bytes `from..to`, then drop the pages of those below
    /// `from - WINDOW` once they are on disk.
    Window { file: Arc<File>, from: u64, to: u64 },
    /// Answer once everything asked before is done.
    #[cfg(test)]
    Settle(std::sync::mpsc::SyncSender<()>),
}

/// The write-back thread's queue (the thread is started by the first call).
fn worker() -> &'static Sender<Work> {
    static WORKER: OnceLock<Sender<Work>> = OnceLock::new();
    WORKER.get_or_init(|| {
        let (tx, rx) = channel::<Work>();
        // Without the thread (none could be started) the work is never done: the pages stay,
        // as a plain `write` would leave them.
        let _ = std::thread::Builder::new()
            .name("ftrace-wb".into())
            .spawn(move || {
                for work in rx {
                    match work {
                        Work::Window { file, from, to } => let_go(&file, from, to),
                        #[cfg(test)]
                        Work::Settle(done) => {
                            let _ = done.send(());
                        }
                    }
                }
            });
        tx
    })
}

/// [`Work::Window`]: both calls are advice, their failure changes nothing but the pages kept.
fn let_go(file: &File, from: u64, to: u64) {
    let fd = file.as_raw_fd();
    // SAFETY: plain syscalls on a descriptor the `Arc` keeps open; neither touches memory of
    // ours.
    unsafe {
        libc::sync_file_range(
            fd,
            from as libc::off64_t,
            (to - from) as libc::off64_t,
            libc::SYNC_FILE_RANGE_WRITE,
        );
        let Some(done) = from.checked_sub(WINDOW).filter(|d| *d > 0) else {
            return;
        };
        // From 0, each time: a range dropped before is a hole, which the page cache skips
        // whole. Waiting first: a page still dirty or being written is not dropped, and
        // makes the kernel drain every CPU's page lists before it tries again.
        libc::sync_file_range(
            fd,
            0,
            done as libc::off64_t,
            libc::SYNC_FILE_RANGE_WAIT_BEFORE
                | libc::SYNC_FILE_RANGE_WRITE
                | libc::SYNC_FILE_RANGE_WAIT_AFTER,
        );
        libc::posix_fadvise(fd, 0, done as libc::off_t, libc::POSIX_FADV_DONTNEED);
    }
}

impl WriteBehind {
    /// Writes to `file`, new and empty (the offsets advised are counted from 0).
    pub fn new(file: File) -> WriteBehind {
        WriteBehind {
            advise: !on_tmpfs(&file),
            file: Arc::new(file),
            written: 0,
            handed: 0,
        }
    }

    /// The file.
    pub fn get_ref(&self) -> &File {
        &self.file
    }
}

/// Whether `file` is on tmpfs (`false` when that cannot be told).
fn on_tmpfs(file: &File) -> bool {
    // SAFETY: `statfs` is plain data the call fills in.
    unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        libc::fstatfs(file.as_raw_fd(), &mut st) == 0 && st.f_type == libc::TMPFS_MAGIC
    }
}

impl Write for WriteBehind {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = (&*self.file).write(buf)?;
        self.written += n as u64;
        if self.advise && self.written - self.handed >= WINDOW {
            let to = self.written - self.written % WINDOW;
            let work = Work::Window {
                file: Arc::clone(&self.file),
                from: self.handed,
                to,
            };
            // A thread that is gone leaves the pages (see `worker`).
            let _ = worker().send(work);
            self.handed = to;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        (&*self.file).flush()
    }
}

/// Returns once the write-back thread has done everything asked of it so far.
#[cfg(test)]
fn settle() {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    worker().send(Work::Settle(tx)).unwrap();
    rx.recv().unwrap();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;

    /// A file on a disk, in the workspace's build directory (not `/tmp`, which may be a
    /// tmpfs, whose page cache is the file itself: nothing to drop there).
    fn disk_file(name: &str) -> (std::path::PathBuf, File) {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/writebehind");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{name}.{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let f = File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .unwrap();
        (path, f)
    }

    /// A file on tmpfs is given no advice; one on a disk is.
    #[test]
    fn tmpfs_files_are_left_alone() {
        let (path, f) = disk_file("advise");
        assert!(WriteBehind::new(f).advise);
        std::fs::remove_file(&path).unwrap();
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let f = File::create_new(dir.path().join("events")).unwrap();
        assert!(!WriteBehind::new(f).advise);
    }

    /// Every byte arrives, in order, whatever the sizes of the writes (across window
    /// boundaries too).
    #[test]
    fn the_bytes_written_are_the_bytes_given() {
        let (path, f) = disk_file("bytes");
        let mut w = WriteBehind::new(f);
        let total = 3 * WINDOW as usize + 12_345;
        let data: Vec<u8> = (0..total).map(|i| (i * 7 + i / 4099) as u8).collect();
        let mut at = 0;
        let mut size = 1;
        while at < total {
            let n = size.min(total - at);
            w.write_all(&data[at..at + n]).unwrap();
            at += n;
            size = size * 3 % 1_000_003 + 1;
        }
        w.flush().unwrap();
        let mut back = Vec::new();
        File::open(&path).unwrap().read_to_end(&mut back).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(back == data, "the file differs from what was written");
    }

    /// Once written back, the windows before the last two are out of the page cache: the
    /// file's pages stay at a few windows however long it gets. (The version that only wrote
    /// kept every page: this fails on it.)
    #[test]
    fn pages_written_back_are_let_go() {
        let (path, f) = disk_file("pages");
        let mut w = WriteBehind::new(f);
        let chunk = vec![0x5au8; 256 << 10];
        let windows = 5;
        for _ in 0..windows * (WINDOW as usize / chunk.len()) {
            w.write_all(&chunk).unwrap();
        }
        settle();
        let len = windows * WINDOW as usize;
        let pages = crate::prefault::resident(w.get_ref(), len);
        std::fs::remove_file(&path).unwrap();
        let per_window = WINDOW as usize / 4096;
        // The last window handed over was the fifth: its write-back started, the first three
        // dropped once on disk.
        let kept_early = pages[..(windows - 2) * per_window]
            .iter()
            .filter(|r| **r)
            .count();
        assert_eq!(
            kept_early,
            0,
            "pages of the first {} windows still cached",
            windows - 2
        );
        assert!(
            pages[(windows - 1) * per_window..].iter().any(|r| *r),
            "the last window's pages should still be cached (the test reads residency right)"
        );
    }
}
