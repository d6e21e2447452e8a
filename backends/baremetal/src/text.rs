//! Writing kernel text: the backend's [`TextPoke`] for ftrace-patch's protocols, and the int3
//! side of the breakpoint protocol.
//!
//! The boot page tables map the kernel's text and read-only data read-only and CR0.WP is set,
//! so a stray write to code faults. [`write_text`] is the one sanctioned writer: with interrupts
//! off on this CPU it clears CR0.WP, stores the bytes, restores CR0 and serialises.
//! [`KernelText`] gives ftrace-patch what it asks of a platform: reads and writes of text,
//! `sync_cores` (a serialising instruction here and an IPI that every other online CPU
//! acknowledges, [`crate::smp::sync_others`]), stop-machine ([`crate::smp::stop_others`]), and
//! the [`BreakpointSlot`] the `#BP` handler finds a breakpoint batch in.
//!
//! The `#BP` handler (`handle_int3`) resolves a trap with [`BreakpointSlot::trap`] and
//! emulates what it says: a `call` by pushing the return address on the interrupted stack and
//! jumping, a NOP by skipping it, a late trap by re-running the site. Invariant (the slot's):
//! a batch is armed before it writes its first int3 and drained after its last, so a handler
//! never reads a batch that is gone.

use ftrace_patch::protocol::BatchStats;
use ftrace_patch::{Arch, BreakpointSlot, Emulation, PokeSite, Protocol, StopFixup, TrapAction};
use ftrace_patch::{TextFault, TextPoke};

use crate::idt::InterruptFrame;
use crate::port::{irq_restore, irq_save, read_cr0, serialize, write_cr0};
use crate::sync::{AtomicU64, Ordering};

const CR0_WP: u64 = 1 << 16;

/// The `int3` opcode.
pub const INT3: u8 = 0xCC;

/// Lowest and highest+1 address text operations accept: the identity-mapped first GiB, minus
/// the unmapped page 0.
#[cfg(not(test))]
const TEXT_LIMITS: (u64, u64) = (0x1000, 1 << 30);
/// Host tests use the host's (high) addresses.
#[cfg(test)]
const TEXT_LIMITS: (u64, u64) = (0x1000, 1 << 62);

/// Writes `bytes` at `addr` in (read-only mapped) kernel text, then serialises this CPU.
///
/// # Safety
/// `addr..addr + bytes.len()` must be mapped kernel memory, and no CPU may be executing an
/// instruction the write changes other than as a patch protocol allows.
pub unsafe fn write_text(addr: usize, bytes: &[u8]) {
    let flags = irq_save();
    let cr0 = read_cr0();
    // SAFETY: clearing WP only lets ring 0 write read-only pages; interrupts are off, so
    // nothing else runs on this CPU until it is restored.
    unsafe { write_cr0(cr0 & !CR0_WP) };
    for (i, b) in bytes.iter().enumerate() {
        // SAFETY: the caller guarantees the range is mapped kernel memory.
        unsafe { core::ptr::write_volatile((addr + i) as *mut u8, *b) };
    }
    // SAFETY: restores the CR0 read above.
    unsafe { write_cr0(cr0) };
    serialize();
    irq_restore(flags);
}

/// Makes every CPU refetch instructions after a text write: a serialising instruction here,
/// a serialising interrupt return on every other online CPU.
pub fn sync_cores() {
    serialize();
    crate::smp::sync_others();
}

/// Reads `N` bytes of text.
///
/// # Safety
/// `addr..addr + N` must be mapped.
pub unsafe fn read_text<const N: usize>(addr: usize) -> [u8; N] {
    let mut out = [0u8; N];
    for (i, b) in out.iter_mut().enumerate() {
        // SAFETY: the caller guarantees the range is mapped.
        *b = unsafe { core::ptr::read_volatile((addr + i) as *const u8) };
    }
    out
}

fn check_range(addr: u64, len: usize) -> Result<(), TextFault> {
    let end = addr.checked_add(len as u64).ok_or(TextFault { addr })?;
    if addr < TEXT_LIMITS.0 || end > TEXT_LIMITS.1 {
        return Err(TextFault { addr });
    }
    Ok(())
}

/// The bare-metal platform for ftrace-patch's protocols.
#[derive(Debug, Default)]
pub struct KernelText;

impl TextPoke for KernelText {
    fn read_text(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), TextFault> {
        check_range(addr, buf.len())?;
        for (i, b) in buf.iter_mut().enumerate() {
            // SAFETY: inside the identity-mapped first GiB (checked above).
            *b = unsafe { core::ptr::read_volatile((addr as usize + i) as *const u8) };
        }
        Ok(())
    }

    fn write_text(&mut self, addr: u64, bytes: &[u8]) -> Result<(), TextFault> {
        check_range(addr, bytes.len())?;
        // SAFETY: mapped (checked above); the protocol decides what is safe to write when.
        unsafe { write_text(addr as usize, bytes) };
        Ok(())
    }

    fn sync_cores(&mut self) {
        sync_cores();
    }

    fn stop_others(&mut self, fixup: &StopFixup<'_>, patch: &mut dyn FnMut(&mut Self)) {
        crate::smp::stop_others(fixup, &mut || patch(&mut KernelText));
    }

    fn breakpoint_slot(&self) -> Option<&'static BreakpointSlot> {
        Some(&BREAKPOINTS)
    }
}

/// Applies a batch of site rewrites with ftrace-patch's protocols on this platform.
pub fn patch_batch(sites: &mut [PokeSite], protocol: Protocol) -> BatchStats {
    ftrace_patch::protocol::apply(&mut KernelText, Arch::X86_64, sites, protocol)
}

/// Where the `#BP` handler finds the breakpoint batch in flight.
static BREAKPOINTS: BreakpointSlot = BreakpointSlot::new();
static INT3_HITS: AtomicU64 = AtomicU64::new(0);
static STALE_RETRIES: AtomicU64 = AtomicU64::new(0);

/// How many breakpoint traps have been emulated since boot.
pub fn int3_hits() -> u64 {
    INT3_HITS.load(Ordering::Relaxed)
}

/// How many int3 traps found their int3 already gone and re-ran the instruction.
pub fn stale_int3_retries() -> u64 {
    STALE_RETRIES.load(Ordering::Relaxed)
}

/// Whether a breakpoint batch is published (for fatal reports).
pub fn batch_in_progress() -> bool {
    BREAKPOINTS.is_armed()
}

/// Rewrites the byte at `addr` with itself, atomically (a `lock cmpxchg` that changes nothing
/// if another CPU wrote the byte meanwhile). Architecturally a no-op. QEMU's TCG can keep
/// running a translation of a code page another vCPU changed (seen here: a vCPU trapping on
/// an int3 that memory no longer held, forever); a write from the trapping CPU itself, with
/// the CR0 write's TLB flush, makes it drop the stale translation, so the retried instruction
/// is fetched afresh.
#[cfg(not(test))]
fn refresh_text_byte(addr: usize, value: u8) {
    let flags = irq_save();
    let cr0 = read_cr0();
    // SAFETY: clearing WP with interrupts off, restored below; the cmpxchg stores the value it
    // found (or nothing), so no byte of text changes.
    unsafe {
        write_cr0(cr0 & !CR0_WP);
        let cell = &*(addr as *const crate::sync::AtomicU8);
        let _ = cell.compare_exchange(value, value, Ordering::SeqCst, Ordering::SeqCst);
        write_cr0(cr0);
    }
    serialize();
    irq_restore(flags);
}

/// Host unit tests cannot touch CR0: the refresh is counted instead.
#[cfg(test)]
fn refresh_text_byte(_addr: usize, _value: u8) {
    REFRESHES.fetch_add(1, Ordering::Relaxed);
}

#[cfg(test)]
static REFRESHES: AtomicU64 = AtomicU64::new(0);

/// The `#BP` handler. Returns false for an int3 that is not ours (the caller reports it as
/// fatal).
///
/// A trap no batch claims, at a site that no longer holds an int3, was raised by an instruction
/// fetched before the final sync reached this CPU (the batch is over); the bytes there now form
/// a complete instruction, so it is re-run from the site ([`BreakpointSlot::resolve`]).
pub(crate) fn handle_int3(frame: &mut InterruptFrame) -> bool {
    let site = frame.rip.wrapping_sub(1);
    if check_range(site, 1).is_err() {
        return false;
    }
    // SAFETY: the CPU just executed an instruction at `site`, and it is in range.
    let read = || unsafe { core::ptr::read_volatile(site as *const u8) };
    match BREAKPOINTS.resolve(Arch::X86_64, site, |b| b[0] = read()) {
        TrapAction::Emulate(Emulation::Call { target, ret }) => {
            let rsp = frame.rsp - 8;
            // SAFETY: the trap is at a function-entry site, where the interrupted stack is
            // exactly what a `call` would push onto (no live red zone); #BP runs on its own
            // IST stack, so this slot is not part of our frame.
            unsafe { core::ptr::write_volatile(rsp as *mut u64, ret) };
            frame.rsp = rsp;
            frame.rip = target;
        }
        TrapAction::Emulate(Emulation::Jump { target }) => frame.rip = target,
        TrapAction::Emulate(Emulation::Skip { next }) => frame.rip = next,
        TrapAction::Emulate(_) => return false,
        TrapAction::Restart { pc } => {
            let head = read();
            refresh_text_byte(pc as usize, head);
            frame.rip = pc;
            let n = STALE_RETRIES.fetch_add(1, Ordering::Relaxed) + 1;
            if n > 1_000_000 {
                use core::fmt::Write;
                let _ = writeln!(
                    crate::serial::Com1::force(),
                    "int3: {n} late traps at {site:#x}: the CPU keeps executing an int3 that \
                     memory no longer holds (byte now {head:#04x})"
                );
                crate::qemu::exit(crate::qemu::Verdict::Fail, "stale int3 never refetched");
            }
            return true;
        }
        // A breakpoint nobody published: fatal.
        TrapAction::NotOurs => return false,
    }
    INT3_HITS.fetch_add(1, Ordering::Relaxed);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert!(check_range(0, 1).is_err());
        assert!(check_range(0xfff, 1).is_err());
        assert!(check_range(0x1000, 5).is_ok());
        let top = TEXT_LIMITS.1;
        assert!(check_range(top - 5, 5).is_ok());
        assert!(check_range(top - 4, 5).is_err());
        assert!(check_range(u64::MAX, 2).is_err());
    }

    #[test]
    fn traps_resolve_against_the_published_batch_only() {
        // A host test cannot run a batch; it checks the handler's decisions on static bytes.
        static INT3_BYTE: u8 = INT3;
        let mut unknown = InterruptFrame {
            rip: &INT3_BYTE as *const u8 as u64 + 1,
            ..Default::default()
        };
        assert!(
            !handle_int3(&mut unknown),
            "an int3 nobody published is not ours"
        );
        static NOP_BYTE: u8 = 0x0F;
        let mut late = InterruptFrame {
            rip: &NOP_BYTE as *const u8 as u64 + 1,
            ..Default::default()
        };
        assert!(
            handle_int3(&mut late),
            "a late trap whose int3 is gone is retried"
        );
        assert_eq!(late.rip, &NOP_BYTE as *const u8 as u64);
        assert_eq!(REFRESHES.load(Ordering::Relaxed), 1);
        assert_eq!(stale_int3_retries(), 1);
        assert!(!batch_in_progress());
    }
}
