//! Writing kernel text, and the int3 side of live patching.
//!
//! The boot page tables map the kernel's text and read-only data read-only and CR0.WP is set,
//! so a stray write to code faults. [`write_text`] is the one sanctioned writer: with interrupts
//! off on this CPU it clears CR0.WP, stores the bytes, restores CR0 and serialises.
//!
//! The breakpoint protocol (Linux's `text_poke_bp`) keeps every CPU seeing the old instruction,
//! an `int3`, or the new instruction while a 5-byte site changes: (1) publish the site and its
//! new instruction, write `int3` over the first byte, sync cores; (2) write bytes 1..5, sync;
//! (3) write the new first byte, sync; (4) retire the descriptor. A CPU that executes the site
//! meanwhile traps to the `#BP` handler (`handle_int3`), which *emulates the new instruction*: a `call rel32` is
//! emulated by pushing the return address on the interrupted stack and jumping to the target,
//! a NOP by skipping the 5 bytes. Invariant: the descriptor is published before the int3 byte
//! is visible and retired only after the final byte is, so every trap at the site finds it.
//!
//! "Sync cores" ([`sync_cores`]) serialises this CPU and has every other online CPU take an IPI
//! and acknowledge it ([`crate::smp::sync_others`]).

use crate::idt::InterruptFrame;
use crate::port::{irq_restore, irq_save, read_cr0, serialize, write_cr0};
use crate::sync::{AtomicU64, AtomicUsize, Ordering};

const CR0_WP: u64 = 1 << 16;

/// The `int3` opcode.
pub const INT3: u8 = 0xCC;

/// Writes `bytes` at `addr` in (read-only mapped) kernel text, then serialises this CPU.
///
/// # Safety
/// `addr..addr + bytes.len()` must be mapped kernel memory, and no CPU may be executing an
/// instruction the write changes other than as the breakpoint protocol allows.
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

/// The site being poked (0: none) and the instruction a trap there must emulate.
static POKE_ADDR: AtomicUsize = AtomicUsize::new(0);
static POKE_INSN: AtomicU64 = AtomicU64::new(0);
static INT3_HITS: AtomicU64 = AtomicU64::new(0);

/// What the int3 handler does for a trap at the site being poked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Emulation {
    /// Emulate `call target` (push the return address, jump).
    Call(u64),
    /// Skip the 5-byte instruction (the new instruction is a NOP).
    Skip,
}

/// Decodes what the new 5-byte instruction at `addr` does, for emulation.
pub fn decode5(addr: u64, insn: [u8; 5]) -> Option<Emulation> {
    match insn {
        [0xE8, a, b, c, d] => {
            let rel = i32::from_le_bytes([a, b, c, d]) as i64;
            Some(Emulation::Call(
                addr.wrapping_add(5).wrapping_add(rel as u64),
            ))
        }
        [0x0F, 0x1F, 0x44, 0x00, _] => Some(Emulation::Skip),
        _ => None,
    }
}

/// Publishes the breakpoint descriptor: traps at `addr` now emulate `insn`.
///
/// # Safety
/// `insn` must be decodable by [`decode5`]; only one poke may be in progress at a time.
pub unsafe fn set_breakpoint(addr: usize, insn: [u8; 5]) {
    let mut word = [0u8; 8];
    word[..5].copy_from_slice(&insn);
    POKE_INSN.store(u64::from_le_bytes(word), Ordering::Relaxed);
    POKE_ADDR.store(addr, Ordering::Release);
}

/// Retires the breakpoint descriptor (after the int3 byte is gone from every CPU's view).
pub fn clear_breakpoint() {
    POKE_ADDR.store(0, Ordering::Release);
}

/// How many breakpoint traps have been emulated since boot.
pub fn int3_hits() -> u64 {
    INT3_HITS.load(Ordering::Relaxed)
}

/// For fatal reports: the poke in progress (0: none) and the instruction it publishes.
pub fn published_poke() -> (usize, u64) {
    (
        POKE_ADDR.load(Ordering::Acquire),
        POKE_INSN.load(Ordering::Relaxed),
    )
}

/// How many int3 traps found their int3 already gone and re-ran the instruction.
pub fn stale_int3_retries() -> u64 {
    STALE_RETRIES.load(Ordering::Relaxed)
}

static STALE_RETRIES: AtomicU64 = AtomicU64::new(0);

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

/// The `#BP` handler: emulates the new instruction of the site being poked. Returns false for
/// an int3 that is not ours (the caller reports it as fatal).
///
/// A trap whose site no longer holds an int3 (the poke finished, the descriptor is retired)
/// was raised by an instruction fetched before the final sync reached this CPU; the bytes there
/// now form a complete instruction, so the trap is resolved by running it again from the site
/// (an emulator's cross-CPU code cache can deliver such a late trap even after the sync IPI).
pub(crate) fn handle_int3(frame: &mut InterruptFrame) -> bool {
    let site = frame.rip.wrapping_sub(1);
    if site == 0 {
        return false;
    }
    if POKE_ADDR.load(Ordering::Acquire) as u64 != site {
        // SAFETY: the CPU just executed an instruction at `site`, so it is mapped.
        let now = unsafe { core::ptr::read_volatile(site as *const u8) };
        if now != INT3 {
            refresh_text_byte(site as usize, now);
            frame.rip = site;
            let n = STALE_RETRIES.fetch_add(1, Ordering::Relaxed) + 1;
            if n > 100_000 {
                use core::fmt::Write;
                let _ = writeln!(
                    crate::serial::Com1::force(),
                    "int3: {n} late traps at {site:#x}: the CPU keeps executing an int3 that \
                     memory no longer holds (byte now {now:#04x})"
                );
                crate::qemu::exit(crate::qemu::Verdict::Fail, "stale int3 never refetched");
            }
            return true;
        }
        // An int3 is there: a poke publishes its descriptor before writing the int3, so if it
        // is a poke's, the descriptor is visible now (the first load may have raced with it).
        if POKE_ADDR.load(Ordering::Acquire) as u64 != site {
            return false; // a breakpoint nobody published: fatal
        }
    }
    let word = POKE_INSN.load(Ordering::Relaxed).to_le_bytes();
    let insn = [word[0], word[1], word[2], word[3], word[4]];
    match decode5(site, insn) {
        Some(Emulation::Call(target)) => {
            let rsp = frame.rsp - 8;
            // SAFETY: the trap is at a function-entry site, where the interrupted stack is
            // exactly what a `call` would push onto (no live red zone); #BP runs on its own
            // IST stack, so this slot is not part of our frame.
            unsafe { core::ptr::write_volatile(rsp as *mut u64, site + 5) };
            frame.rsp = rsp;
            frame.rip = target;
        }
        Some(Emulation::Skip) => frame.rip = site + 5,
        None => return false,
    }
    INT3_HITS.fetch_add(1, Ordering::Relaxed);
    true
}

/// TEMPORARY glue until ftrace-patch's breakpoint protocol lands: replaces the 5-byte
/// instruction at `addr` with `new` using the int3 sequence described in the module docs.
///
/// # Safety
/// `addr` must be a 5-byte patch site in kernel text and `new` decodable by [`decode5`].
pub unsafe fn poke5_bp(addr: usize, new: [u8; 5]) {
    // SAFETY: the caller guarantees a valid site and instruction; the steps are the protocol's.
    unsafe {
        set_breakpoint(addr, new);
        write_text(addr, &[INT3]);
        sync_cores();
        write_text(addr + 1, &new[1..]);
        sync_cores();
        write_text(addr, &new[..1]);
        sync_cores();
    }
    clear_breakpoint();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_call_and_nops() {
        let site = 0x10_0000u64;
        let rel = (0x10_2000i64 - (site as i64 + 5)) as i32;
        let r = rel.to_le_bytes();
        assert_eq!(
            decode5(site, [0xE8, r[0], r[1], r[2], r[3]]),
            Some(Emulation::Call(0x10_2000))
        );
        let back = (-0x100i32).to_le_bytes();
        assert_eq!(
            decode5(site, [0xE8, back[0], back[1], back[2], back[3]]),
            Some(Emulation::Call(site + 5 - 0x100))
        );
        assert_eq!(
            decode5(site, [0x0F, 0x1F, 0x44, 0x00, 0x00]),
            Some(Emulation::Skip)
        );
        assert_eq!(
            decode5(site, [0x0F, 0x1F, 0x44, 0x00, 0x08]),
            Some(Emulation::Skip)
        );
        assert_eq!(decode5(site, [0x90; 5]), None);
    }

    #[test]
    fn only_the_published_site_is_emulated() {
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
        // SAFETY: a NOP is decodable; the host test never executes the address.
        unsafe { set_breakpoint(0x5000, [0x0F, 0x1F, 0x44, 0x00, 0x00]) };
        let mut f = InterruptFrame {
            rip: 0x5001,
            rsp: 0x9000,
            ..Default::default()
        };
        assert!(handle_int3(&mut f));
        assert_eq!(f.rip, 0x5005);
        clear_breakpoint();
    }
}
