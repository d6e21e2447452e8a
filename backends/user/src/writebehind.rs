//! Writing a long file through the page cache without keeping it there: the drainer's events
//! files ([`crate::drain`]), hundreds of megabytes a recording, written at the rate a traced
//! program makes calls.
//!
//! A plain `write` puts every byte in a new page-cache page, and the pages stay until memory
//! runs short. New pages are the expensive part of the write: on a virtual machine whose free
//! memory is handed back to its host (free page reporting, as on the machines this project runs
//! on), each first touch of such a page is a fault in the host as well; a cold 500 MB write
//! there took 0.39 s of CPU against 0.08 s when the same pages were reused. [`WriteBehind`]
//! starts the write-back of each [`WINDOW`] as soon as it is written
//! (`sync_file_range(SYNC_FILE_RANGE_WRITE)`, which does not wait for it) and drops the
//! pages of the windows before the last one once they are clean (`POSIX_FADV_DONTNEED`,
//! which leaves a page still dirty or being written where it is): the file's page cache stays
//! at a few windows, and the pages dropped are the ones the next windows reuse.
//!
//! Invariant: the bytes written are exactly those given, in order; nothing here waits for the
//! disk (a disk slower than the writer leaves its pages dirty, as a plain `write` would), and
//! both calls are advice whose failure (a file system without write-back, as tmpfs) changes
//! nothing but the memory kept.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsRawFd as _;

/// Bytes written between two starts of write-back: 8 MiB.
pub const WINDOW: u64 = 8 << 20;

/// A file written through the page cache, its pages let go of behind the writer (see the
/// module docs).
#[derive(Debug)]
pub struct WriteBehind {
    file: File,
    /// Bytes written so far.
    written: u64,
    /// Bytes whose write-back has been started: a multiple of [`WINDOW`].
    started: u64,
}

impl WriteBehind {
    /// Writes to `file` from its current length on (a new, empty file: the offsets the advice
    /// is given for are counted from 0).
    pub fn new(file: File) -> WriteBehind {
        WriteBehind {
            file,
            written: 0,
            started: 0,
        }
    }

    /// Starts the write-back of the windows written since the last start, and drops the
    /// clean pages of everything before the window before them.
    fn let_go(&mut self) {
        let end = self.written - self.written % WINDOW;
        let fd = self.file.as_raw_fd();
        // SAFETY: plain syscalls on our own descriptor; neither touches memory of ours.
        unsafe {
            libc::sync_file_range(
                fd,
                self.started as libc::off64_t,
                (end - self.started) as libc::off64_t,
                libc::SYNC_FILE_RANGE_WRITE,
            );
            // From 0: a page that was still being written last time is dropped now. The
            // ranges dropped before are holes, which the page cache skips whole.
            if let Some(clean) = self.started.checked_sub(WINDOW).filter(|c| *c > 0) {
                libc::posix_fadvise(fd, 0, clean as libc::off_t, libc::POSIX_FADV_DONTNEED);
            }
        }
        self.started = end;
    }

    /// The file.
    pub fn get_ref(&self) -> &File {
        &self.file
    }
}

impl Write for WriteBehind {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.write(buf)?;
        self.written += n as u64;
        if self.written - self.started >= WINDOW {
            self.let_go();
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;

    /// Whether each page of the first `len` bytes of `file` is in the page cache.
    fn resident(file: &File, len: usize) -> Vec<bool> {
        // SAFETY: a read-only shared mapping of our own file, unmapped below; `mincore`
        // writes one byte per page into a vector of that many.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            let mut v = vec![0u8; len.div_ceil(4096)];
            assert_eq!(libc::mincore(p, len, v.as_mut_ptr()), 0);
            libc::munmap(p, len);
            v.into_iter().map(|b| b & 1 == 1).collect()
        }
    }

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

    /// Once written back, the windows before the last are out of the page cache: the file's
    /// pages stay at a few windows however long it gets. (The version that only wrote kept
    /// every page: this fails on it.)
    #[test]
    fn pages_written_back_are_let_go() {
        let (path, f) = disk_file("pages");
        let mut w = WriteBehind::new(f);
        let chunk = vec![0x5au8; 256 << 10];
        let windows = 4;
        for _ in 0..windows * (WINDOW as usize / chunk.len()) {
            w.write_all(&chunk).unwrap();
        }
        // Wait for the write-back started so far, then one more window: its advice drops
        // every clean page before the window before it.
        w.get_ref().sync_data().unwrap();
        for _ in 0..WINDOW as usize / chunk.len() {
            w.write_all(&chunk).unwrap();
        }
        let len = (windows + 1) * WINDOW as usize;
        let pages = resident(w.get_ref(), len);
        std::fs::remove_file(&path).unwrap();
        let per_window = WINDOW as usize / 4096;
        let kept_early = pages[..(windows - 1) * per_window]
            .iter()
            .filter(|r| **r)
            .count();
        assert_eq!(
            kept_early,
            0,
            "pages of the first {} windows still cached",
            windows - 1
        );
        assert!(
            pages[windows * per_window..].iter().any(|r| *r),
            "the last window's pages should still be cached (the test reads residency right)"
        );
    }
}
