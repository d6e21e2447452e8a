//! The platform primitives the patch protocols are built from: [`TextPoke`].
//!
//! A backend implements it once: userspace with `mprotect` + `membarrier(SYNC_CORE)` + signals,
//! bare metal with `CR0.WP` + IPIs, a Linux module with `text_poke` + `text_poke_sync`.
//!
//! A userspace implementation, step by step (what the C prototype proved):
//!
//! - `write_text`: `mprotect` the page(s) RWX (or keep them so for the batch), `memcpy`.
//! - `sync_cores`: `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE)` (registered once).
//! - `breakpoints_armed`: store the table's slice pointer where the `SIGTRAP` handler finds it.
//!   The handler calls `BreakpointTable::trap(rip - 1, &[*(rip - 1)])` and acts on the answer:
//!   `Emulate(Call { target, ret })` → push `ret` below the interrupted stack pointer, `rip =
//!   target`; `Emulate(Skip { next })` → `rip = next`; `Restart { pc }` → `rip = pc`;
//!   `NotOurs` → the previous handler. With no table published (a late signal), it asks
//!   [`crate::protocol::late_trap`] with a sorted array of every site address.
//! - `breakpoints_disarmed`: clear the pointer, then wait until no handler is inside (a counter).
//! - `stop_others`: `tgkill(SIGUSR2)` every other thread; each parks in its handler; run `patch`;
//!   before releasing, each parked thread replaces its saved `rip` with
//!   `fixup.resume_pc(rip)` when that is `Some`; the `sigreturn` serialises.
//!
//! Invariant (the contract every implementation keeps): `write_text` is all-or-nothing for one
//! call and never reorders against earlier calls on the patching CPU; a write of one byte, or of
//! one aligned 4- or 8-byte word, is a single store other CPUs observe atomically.

use core::fmt;

use crate::protocol::{BreakpointTable, StopFixup};

/// Reading or writing text failed (an unmapped page, a protection the platform could not lift).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TextFault {
    /// The address that failed.
    pub addr: u64,
}

impl fmt::Display for TextFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "text access fault at {:#x}", self.addr)
    }
}

/// Writing and synchronising instruction memory on one platform.
pub trait TextPoke {
    /// Reads `buf.len()` bytes at `addr` (the kernel's `copy_from_kernel_nofault`).
    fn read_text(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), TextFault>;

    /// Writes `bytes` at `addr`, making the text writable as needed. All or nothing: on `Err`
    /// nothing was written.
    fn write_text(&mut self, addr: u64, bytes: &[u8]) -> Result<(), TextFault>;

    /// Returns once every other CPU/thread has executed a core-serialising instruction after
    /// this call began, so none can still execute stale bytes (`text_poke_sync()`: IPI +
    /// `sync_core`; userspace: `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE)`).
    fn sync_cores(&mut self);

    /// Runs `patch` while every other CPU/thread is stopped outside the text being patched
    /// (`stop_machine`; userspace: signal every thread and park it in the handler). Before
    /// releasing them, a stopped thread whose PC lies inside a rewritten site must be moved by
    /// [`StopFixup::resume_pc`]; the release itself must be core-serialising (an interrupt or
    /// signal return).
    fn stop_others(&mut self, fixup: &StopFixup<'_>, patch: &mut dyn FnMut(&mut Self))
    where
        Self: Sized;

    /// A breakpoint batch is about to be written: from now until
    /// [`TextPoke::breakpoints_disarmed`] returns, the platform's breakpoint handler resolves
    /// traps with [`BreakpointTable::trap`]. An implementation publishes `table` (a pointer is
    /// enough; it stays valid and unmoved until disarmed).
    fn breakpoints_armed(&mut self, table: &BreakpointTable<'_>) {
        let _ = table;
    }

    /// The batch is finished: after this returns no handler may use the table any more (wait
    /// for handlers in flight, like the kernel's descriptor refcount). Traps that arrive later
    /// (a userspace signal can be delivered after the batch) are resolved with
    /// [`crate::protocol::late_trap`].
    fn breakpoints_disarmed(&mut self) {}
}
