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
