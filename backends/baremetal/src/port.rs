//! x86 port I/O and the few privileged instructions the backend uses (MSRs, control registers,
//! `rdtsc`, `cpuid`, RFLAGS).
//!
//! Invariant: these are thin wrappers; every caller states why its port or register access is
//! sound in a `// SAFETY:` comment.

use core::arch::asm;

/// Writes a byte to an I/O port.
///
/// # Safety
/// Port writes talk to devices: the caller must know what the device does with the byte.
#[inline(always)]
pub unsafe fn outb(port: u16, val: u8) {
    // SAFETY: the caller vouches for the device side; `out` touches no memory.
    unsafe {
        asm!("out dx, al", in("dx") port, in("al") val, options(nomem, nostack, preserves_flags))
    };
}

/// Writes a 32-bit word to an I/O port.
///
/// # Safety
/// As [`outb`].
#[inline(always)]
pub unsafe fn outl(port: u16, val: u32) {
    // SAFETY: the caller vouches for the device side; `out` touches no memory.
    unsafe {
        asm!("out dx, eax", in("dx") port, in("eax") val, options(nomem, nostack, preserves_flags))
    };
}

/// Reads a byte from an I/O port.
///
/// # Safety
/// Port reads can have device side effects (e.g. popping a FIFO).
#[inline(always)]
pub unsafe fn inb(port: u16) -> u8 {
    let v: u8;
    // SAFETY: the caller vouches for the device side; `in` touches no memory.
    unsafe {
        asm!("in al, dx", out("al") v, in("dx") port, options(nomem, nostack, preserves_flags))
    };
    v
}

/// The time-stamp counter.
#[inline(always)]
pub fn rdtsc() -> u64 {
    let lo: u32;
    let hi: u32;
    // SAFETY: rdtsc reads a counter; CR4.TSD is clear, so it is legal at any privilege level.
    unsafe {
        asm!("rdtsc", out("eax") lo, out("edx") hi, options(nomem, nostack, preserves_flags))
    };
    ((hi as u64) << 32) | lo as u64
}

/// Writes a model-specific register.
///
/// # Safety
/// Ring 0 only; the MSR and value must be valid for this CPU.
#[inline(always)]
pub unsafe fn wrmsr(msr: u32, value: u64) {
    // SAFETY: the caller guarantees ring 0 and a valid MSR/value pair.
    unsafe {
        asm!("wrmsr", in("ecx") msr, in("eax") value as u32, in("edx") (value >> 32) as u32,
             options(nostack, preserves_flags))
    };
}

/// Reads a model-specific register.
///
/// # Safety
/// Ring 0; the MSR must exist on this CPU.
#[inline(always)]
pub unsafe fn rdmsr(msr: u32) -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: the caller guarantees ring 0 and an existing MSR.
    unsafe {
        asm!("rdmsr", in("ecx") msr, out("eax") lo, out("edx") hi,
             options(nomem, nostack, preserves_flags))
    };
    ((hi as u64) << 32) | lo as u64
}

/// Reads CR3 (the page-table root).
#[inline(always)]
pub fn read_cr3() -> u64 {
    let v: u64;
    // SAFETY: reading CR3 has no side effect.
    unsafe { asm!("mov {}, cr3", out(reg) v, options(nomem, nostack, preserves_flags)) };
    v
}

/// Reads CR0.
#[inline(always)]
pub fn read_cr0() -> u64 {
    let v: u64;
    // SAFETY: reading CR0 has no side effect (the backend runs in ring 0).
    unsafe { asm!("mov {}, cr0", out(reg) v, options(nomem, nostack, preserves_flags)) };
    v
}

/// Writes CR0.
///
/// # Safety
/// Ring 0; the value must keep paging and protected mode on.
#[inline(always)]
pub unsafe fn write_cr0(v: u64) {
    // SAFETY: the caller keeps PG/PE set; the memory clobber orders surrounding accesses.
    unsafe { asm!("mov cr0, {}", in(reg) v, options(nostack, preserves_flags)) };
}

/// Reads CR2 (the faulting address of the last page fault).
#[inline(always)]
pub fn read_cr2() -> u64 {
    let v: u64;
    // SAFETY: reading CR2 has no side effect.
    unsafe { asm!("mov {}, cr2", out(reg) v, options(nomem, nostack, preserves_flags)) };
    v
}

/// RFLAGS.
#[inline(always)]
pub fn read_rflags() -> u64 {
    let v: u64;
    // SAFETY: pushfq/pop only use the stack slot they allocate.
    unsafe { asm!("pushfq", "pop {}", out(reg) v, options(nomem, preserves_flags)) };
    v
}

/// RFLAGS.IF: whether maskable interrupts are enabled.
pub const RFLAGS_IF: u64 = 1 << 9;

/// Disables interrupts and returns the previous RFLAGS (for [`irq_restore`]).
#[inline(always)]
pub fn irq_save() -> u64 {
    let flags = read_rflags();
    // SAFETY: cli only masks interrupts; ring 0.
    unsafe { asm!("cli", options(nomem, nostack)) };
    flags
}

/// Re-enables interrupts if `flags` (from [`irq_save`]) had them enabled.
#[inline(always)]
pub fn irq_restore(flags: u64) {
    if flags & RFLAGS_IF != 0 {
        // SAFETY: sti restores the state irq_save found; ring 0.
        unsafe { asm!("sti", options(nomem, nostack)) };
    }
}

/// Enables maskable interrupts.
///
/// # Safety
/// An IDT must be loaded and every unmasked interrupt source must have a handler.
#[inline(always)]
pub unsafe fn irq_enable() {
    // SAFETY: the caller guarantees the IDT and interrupt sources are ready.
    unsafe { asm!("sti", options(nomem, nostack)) };
}

/// Disables maskable interrupts.
#[inline(always)]
pub fn irq_disable() {
    // SAFETY: cli only masks interrupts; ring 0.
    unsafe { asm!("cli", options(nomem, nostack)) };
}

/// Masks every line of the two legacy 8259 PICs. The BIOS leaves them programmed with vectors
/// that overlap CPU exceptions (IRQ0, the PIT tick, arrives as vector 8), so this must happen
/// before interrupts are ever enabled.
pub fn mask_legacy_pic() {
    // SAFETY: writing the interrupt-mask registers (OCW1) of the master (0x21) and slave (0xA1)
    // PICs only masks their inputs.
    unsafe {
        outb(0x21, 0xff);
        outb(0xA1, 0xff);
    }
}

/// A serializing instruction (`cpuid`): after it, this CPU fetches instructions afresh, which is
/// what cross-modifying code needs after a text write (Intel SDM 8.1.3).
#[inline(always)]
pub fn serialize() {
    // cpuid leaf 0 only reads identification registers (the intrinsic saves rbx).
    let _ = core::arch::x86_64::__cpuid(0);
}
