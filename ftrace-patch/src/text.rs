//! The platform primitives the patch protocols are built from: [`TextPoke`].
//!
//! A backend implements it once: userspace with `mprotect` + `membarrier(SYNC_CORE)` + signals,
//! bare metal with `CR0.WP` + IPIs, a Linux module with `text_poke` + `text_poke_sync`.
//!
//! A userspace implementation, step by step (what the C prototype proved):
//!
//! - `write_text`: `mprotect` the page(s) RWX (or keep them so for the batch), `memcpy`.
//! - `sync_cores`: `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE)` (registered once).
//! - `breakpoint_slot`: a `static` [`BreakpointSlot`] the `SIGTRAP` handler looks in.
//!   The handler calls `SLOT.trap(rip - 1, &[*(rip - 1)])` and acts on the answer:
//!   `Emulate(Call { target, ret })` → push `ret` below the interrupted stack pointer, `rip =
//!   target`; `Emulate(Skip { next })` → `rip = next`; `Restart { pc }` → `rip = pc`;
//!   `NotOurs` → the previous handler. With no table published (a late signal), it asks
//!   [`crate::protocol::late_trap`] with a sorted array of every site address.
//! - `stop_others`: `tgkill(SIGUSR2)` every other thread; each parks in its handler; run `patch`;
//!   before releasing, each parked thread replaces its saved `rip` with
//!   `fixup.resume_pc(rip)` when that is `Some`; the `sigreturn` serialises.
//!
//! Invariant (the contract every implementation keeps): `write_text` is all-or-nothing for one
//! call and never reorders against earlier calls on the patching CPU; a write of one byte, or of
//! one aligned 4- or 8-byte word, is a single store other CPUs observe atomically.

use core::fmt;

use crate::breakpoint::BreakpointSlot;
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

    /// Where this platform's breakpoint handler finds the batch being patched: a `static`
    /// [`BreakpointSlot`] its handler resolves traps with ([`BreakpointSlot::trap`]).
    /// [`crate::protocol::apply`] arms it before the first breakpoint is written and disarms
    /// and drains it after the last one is gone. `None` (the default): no handler reads the
    /// batch (a platform that never runs the breakpoint protocol concurrently, a test).
    fn breakpoint_slot(&self) -> Option<&'static BreakpointSlot> {
        None
    }

    /// A breakpoint batch is about to be written (after [`TextPoke::breakpoint_slot`] was
    /// armed): a notification for models and tests that look at `table` from inside
    /// [`TextPoke::write_text`], on the patching thread. It is valid until
    /// [`TextPoke::breakpoints_disarmed`].
    fn breakpoints_armed(&mut self, table: &BreakpointTable<'_>) {
        let _ = table;
    }

    /// The batch is finished and [`TextPoke::breakpoint_slot`] drained. Traps that arrive
    /// later (a userspace signal can be delivered after the batch) are resolved with
    /// [`crate::protocol::late_trap`].
    fn breakpoints_disarmed(&mut self) {}
}
