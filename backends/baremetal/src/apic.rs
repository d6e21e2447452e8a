//! The local APIC: enabling it, inter-processor interrupts, end of interrupt.
//!
//! The APIC's registers are memory-mapped at the address in `IA32_APIC_BASE` (0xFEE00000 on
//! every PC and in QEMU); the kernel's page tables map 3..4 GiB uncached for it. Invariant:
//! only the owning CPU touches its APIC (the registers are per-CPU at the same address).

use crate::port::rdmsr;

const IA32_APIC_BASE: u32 = 0x1B;
const REG_ID: usize = 0x20;
const REG_EOI: usize = 0xB0;
const REG_SVR: usize = 0xF0;
const REG_ICR_LO: usize = 0x300;
const REG_ICR_HI: usize = 0x310;
const ICR_PENDING: u32 = 1 << 12;
const ICR_ASSERT: u32 = 1 << 14;
const REG_LVT_TIMER: usize = 0x320;
const REG_TIMER_INITIAL: usize = 0x380;
const REG_TIMER_DIVIDE: usize = 0x3E0;
const LVT_MASKED: u32 = 1 << 16;
const LVT_PERIODIC: u32 = 1 << 17;
/// Divide configuration 0b1011: the bus clock undivided.
const DIVIDE_BY_1: u32 = 0xB;

/// The spurious-interrupt vector (no EOI is owed for it).
pub const VECTOR_SPURIOUS: u8 = 0xFF;

fn base() -> usize {
    // SAFETY: IA32_APIC_BASE exists on every x86_64 CPU.
    (unsafe { rdmsr(IA32_APIC_BASE) } & 0xFFFF_F000) as usize
}

fn read(reg: usize) -> u32 {
    // SAFETY: an APIC register inside the mapped, uncached APIC page.
    unsafe { core::ptr::read_volatile((base() + reg) as *const u32) }
}

fn write(reg: usize, v: u32) {
    // SAFETY: an APIC register inside the mapped, uncached APIC page.
    unsafe { core::ptr::write_volatile((base() + reg) as *mut u32, v) }
}

/// Software-enables this CPU's APIC (spurious vector [`VECTOR_SPURIOUS`]).
pub fn enable() {
    write(REG_SVR, 0x100 | VECTOR_SPURIOUS as u32);
}

/// This CPU's APIC id.
pub fn id() -> u32 {
    read(REG_ID) >> 24
}

/// Signals the end of the interrupt being handled.
pub fn eoi() {
    write(REG_EOI, 0);
}

/// Starts this CPU's APIC timer: `vector` every `count` bus clocks, periodically.
pub fn timer_start_periodic(vector: u8, count: u32) {
    write(REG_TIMER_DIVIDE, DIVIDE_BY_1);
    write(REG_LVT_TIMER, LVT_PERIODIC | vector as u32);
    write(REG_TIMER_INITIAL, count);
}

/// Stops this CPU's APIC timer (masked, count zero).
pub fn timer_stop() {
    write(REG_LVT_TIMER, LVT_MASKED);
    write(REG_TIMER_INITIAL, 0);
}

/// Where an IPI goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dest {
    /// One CPU, by APIC id.
    Apic(u32),
    /// Every CPU but the sender.
    AllButSelf,
}

fn send(dest: Dest, low: u32) {
    let (hi, shorthand) = match dest {
        Dest::Apic(id) => (id << 24, 0),
        Dest::AllButSelf => (0, 0b11 << 18),
    };
    write(REG_ICR_HI, hi);
    write(REG_ICR_LO, low | shorthand);
    while read(REG_ICR_LO) & ICR_PENDING != 0 {
        core::hint::spin_loop();
    }
}

/// Sends a fixed interrupt with `vector`.
pub fn send_ipi(dest: Dest, vector: u8) {
    send(dest, ICR_ASSERT | vector as u32);
}

/// Sends INIT (resets the target into wait-for-SIPI).
pub fn send_init(apic_id: u32) {
    send(Dest::Apic(apic_id), ICR_ASSERT | (0b101 << 8));
}

/// Sends a startup IPI: the target starts in real mode at `page << 12`.
pub fn send_sipi(apic_id: u32, page: u8) {
    send(Dest::Apic(apic_id), ICR_ASSERT | (0b110 << 8) | page as u32);
}
