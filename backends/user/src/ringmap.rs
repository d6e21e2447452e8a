//! A shared mapping of one agent ring file and its checked view: what the drain thread
//! (a consumer, which writes the ring's `limit`, so it maps read-write) and `live` (a reader
//! of flight-recorder rings, read-only) both open.

use std::os::fd::AsRawFd;
use std::path::Path;

use ftrace_agent::buffer::{BufferView, HEADER_SIZE, SLOT_SIZE};

/// How a ring file is mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// Read only: the tool reads what the agent wrote.
    ReadOnly,
    /// Read and write: the tool consumes (it advances the ring's `limit`).
    ReadWrite,
}

/// Slots in a page of a ring file (the unit [`RingMapping::release_slots`] gives back).
pub(crate) const SLOTS_PER_PAGE: u64 = (4096 / SLOT_SIZE) as u64;

/// A shared mapping of one ring file, unmapped on drop.
pub(crate) struct RingMapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain shared memory, accessed with the ring's atomics and volatile
// loads; nothing in it is tied to the thread that mapped it.
unsafe impl Send for RingMapping {}

impl RingMapping {
    /// Maps `path` if it holds an initialised ring (`None`: not (yet) a ring this tool reads).
    pub(crate) fn open(path: &Path, access: Access) -> Option<RingMapping> {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(access == Access::ReadWrite)
            .open(path)
            .ok()?;
        let len = usize::try_from(f.metadata().ok()?.len()).ok()?;
        if len < HEADER_SIZE + SLOT_SIZE {
            return None;
        }
        let prot = match access {
            Access::ReadOnly => libc::PROT_READ,
            Access::ReadWrite => libc::PROT_READ | libc::PROT_WRITE,
        };
        // SAFETY: a fresh shared mapping of a file we opened; its contents are checked by
        // `view` before any use.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        let m = RingMapping { ptr: p.cast(), len };
        m.view().is_some().then_some(m)
    }

    /// Gives back the tool's pages of the ring's slots `[from, to)` (ring indices, which wrap
    /// at `capacity`; both multiples of [`SLOTS_PER_PAGE`]): what the tool has consumed. The
    /// slots stay in the file, where the program goes on writing them; the tool maps them
    /// again, one fault per few pages, when it reads them on the next lap. So the tool's
    /// memory stays a window behind its cursor, whatever the ring's size, instead of growing
    /// to every ring's whole size.
    pub(crate) fn release_slots(&self, from: u64, to: u64, capacity: u64) {
        if to <= from || capacity % SLOTS_PER_PAGE != 0 || from % SLOTS_PER_PAGE != 0 {
            return;
        }
        let byte = |slot: u64| HEADER_SIZE + (slot % capacity) as usize * SLOT_SIZE;
        let end = HEADER_SIZE + capacity as usize * SLOT_SIZE;
        let ranges = if to - from >= capacity {
            [(HEADER_SIZE, end), (0, 0)]
        } else if byte(from) < byte(to) {
            [(byte(from), byte(to)), (0, 0)]
        } else {
            [(byte(from), end), (HEADER_SIZE, byte(to))]
        };
        for (a, b) in ranges {
            if a < b && b <= self.len {
                // SAFETY: a page-aligned range of our own mapping (`HEADER_SIZE` is a page,
                // slots come a page at a time); dropping the tool's page-table entries of a
                // shared file mapping loses nothing: the pages stay in the file.
                unsafe {
                    libc::madvise(self.ptr.add(a).cast(), b - a, libc::MADV_DONTNEED);
                }
            }
        }
    }

    /// Where the mapping starts (tests find it in `/proc/self/smaps` with it).
    #[cfg(test)]
    pub(crate) fn addr(&self) -> usize {
        self.ptr as usize
    }

    /// The ring file's view (`None`: not a buffer this tool reads).
    pub(crate) fn view(&self) -> Option<BufferView<'_>> {
        // SAFETY: our live, page-aligned mapping of `len` bytes, alive as long as the view;
        // the agent writes it only as the slot ring's writer contract says.
        unsafe { BufferView::from_raw(self.ptr, self.len) }.ok()
    }
}

impl Drop for RingMapping {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once; no view outlives `self`.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}
