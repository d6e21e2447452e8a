//! Descriptor tables and exceptions: a GDT with one TSS per CPU, a 256-entry IDT, and the
//! handlers behind it.
//!
//! Every vector enters through a 16-byte stub that pushes a uniform frame (error code or 0, the
//! vector, 15 GPRs) and saves the FPU/SSE state with `fxsave`, so a handler written in Rust may
//! use SSE without corrupting the interrupted code. `#BP` (int3) runs on IST1, `#DF` on IST2,
//! everything else on IST3: the interrupted stack is never written below its `rsp` by the
//! CPU, which keeps a leaf function's red zone intact and lets the int3 handler emulate a
//! `call` by pushing onto it.
//!
//! Invariant: an exception either is the breakpoint of a text poke in progress (handled by
//! [`crate::text`], execution resumes), or one of the backend's IPIs ([`crate::smp`]), or is
//! fatal: a report goes out on COM1 (vector name, error
//! code, CR2, registers, the faulting symbol) followed by `RESULT: FAIL` and QEMU exits with 35.
//! A fault can never look like a pass.

use core::cell::UnsafeCell;
use core::fmt::{self, Write};

use crate::cpu::{MAX_CPUS, this_cpu};
use crate::port::read_cr2;
use crate::sync::{AtomicUsize, Ordering};

/// The registers an exception stub saves, lowest address first.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct InterruptFrame {
    /// r15.
    pub r15: u64,
    /// r14.
    pub r14: u64,
    /// r13.
    pub r13: u64,
    /// r12.
    pub r12: u64,
    /// r11.
    pub r11: u64,
    /// r10.
    pub r10: u64,
    /// r9.
    pub r9: u64,
    /// r8.
    pub r8: u64,
    /// rbp.
    pub rbp: u64,
    /// rdi.
    pub rdi: u64,
    /// rsi.
    pub rsi: u64,
    /// rdx.
    pub rdx: u64,
    /// rcx.
    pub rcx: u64,
    /// rbx.
    pub rbx: u64,
    /// rax.
    pub rax: u64,
    /// The vector number.
    pub vector: u64,
    /// The CPU's error code, or 0 for vectors without one.
    pub error_code: u64,
    /// Where the exception happened (for traps: the next instruction).
    pub rip: u64,
    /// Code segment.
    pub cs: u64,
    /// RFLAGS at the exception.
    pub rflags: u64,
    /// The interrupted stack pointer.
    pub rsp: u64,
    /// Stack segment.
    pub ss: u64,
}

/// `#BP`, the breakpoint vector.
pub const VECTOR_BREAKPOINT: u64 = 3;

/// The name of an exception vector (`#PF page fault`...).
pub fn vector_name(vector: u64) -> &'static str {
    match vector {
        0 => "#DE divide error",
        1 => "#DB debug",
        2 => "NMI",
        3 => "#BP breakpoint",
        4 => "#OF overflow",
        5 => "#BR bound range",
        6 => "#UD invalid opcode",
        7 => "#NM device not available",
        8 => "#DF double fault",
        10 => "#TS invalid TSS",
        11 => "#NP segment not present",
        12 => "#SS stack fault",
        13 => "#GP general protection",
        14 => "#PF page fault",
        16 => "#MF x87 floating point",
        17 => "#AC alignment check",
        18 => "#MC machine check",
        19 => "#XM SIMD floating point",
        20 => "#VE virtualization",
        21 => "#CP control protection",
        32..=255 => "external interrupt",
        _ => "reserved vector",
    }
}

const GDT_CODE: u16 = 0x08;
const GDT_ENTRIES: usize = 3 + 2 * MAX_CPUS;
const IST_SIZE: usize = 16 * 1024;
const IST_PER_CPU: usize = 3;

#[derive(Clone, Copy)]
#[repr(C, packed(4))]
struct Tss {
    reserved0: u32,
    rsp: [u64; 3],
    reserved1: u64,
    ist: [u64; 7],
    reserved2: u64,
    reserved3: u16,
    iomap_base: u16,
}

#[derive(Clone, Copy)]
#[repr(C)]
struct IdtEntry {
    offset_lo: u16,
    selector: u16,
    ist: u8,
    type_attr: u8,
    offset_mid: u16,
    offset_hi: u32,
    zero: u32,
}

#[repr(C, align(16))]
struct Tables {
    gdt: [u64; GDT_ENTRIES],
    tss: [Tss; MAX_CPUS],
    idt: [IdtEntry; 256],
}

#[repr(C, align(16))]
struct IstStacks([[u8; IST_SIZE]; IST_PER_CPU * MAX_CPUS]);

struct Racy<T>(UnsafeCell<T>);
// SAFETY: written only by `init_this_cpu` on each CPU for its own TSS/IST (and the shared GDT
// code/data entries and IDT, written identically by every CPU before it loads them); afterwards
// only the CPU reads them.
unsafe impl<T> Sync for Racy<T> {}

const EMPTY_TSS: Tss = Tss {
    reserved0: 0,
    rsp: [0; 3],
    reserved1: 0,
    ist: [0; 7],
    reserved2: 0,
    reserved3: 0,
    iomap_base: 104,
};
const EMPTY_GATE: IdtEntry = IdtEntry {
    offset_lo: 0,
    selector: 0,
    ist: 0,
    type_attr: 0,
    offset_mid: 0,
    offset_hi: 0,
    zero: 0,
};

static TABLES: Racy<Tables> = Racy(UnsafeCell::new(Tables {
    gdt: [0; GDT_ENTRIES],
    tss: [EMPTY_TSS; MAX_CPUS],
    idt: [EMPTY_GATE; 256],
}));
static IST: Racy<IstStacks> = Racy(UnsafeCell::new(IstStacks(
    [[0; IST_SIZE]; IST_PER_CPU * MAX_CPUS],
)));

unsafe extern "C" {
    /// The first of 256 16-byte entry stubs (see the `global_asm!` below).
    static ftrace_bm_isr_stubs: u8;
}

// Vectors with a CPU-pushed error code: 8, 10-14, 17, 21, 29, 30.
core::arch::global_asm!(
    r#"
    .section .text.ftrace_bm_isr, "ax"
    .balign 16
    .global ftrace_bm_isr_stubs
ftrace_bm_isr_stubs:
    .set vec, 0
    .rept 256
    .balign 16
    .if (vec == 8) || (vec == 10) || (vec == 11) || (vec == 12) || (vec == 13) || (vec == 14) || (vec == 17) || (vec == 21) || (vec == 29) || (vec == 30)
    .else
    pushq $0
    .endif
    pushq $vec
    jmp ftrace_bm_isr_common
    .set vec, vec + 1
    .endr

ftrace_bm_isr_common:
    pushq %rax
    pushq %rbx
    pushq %rcx
    pushq %rdx
    pushq %rsi
    pushq %rdi
    pushq %rbp
    pushq %r8
    pushq %r9
    pushq %r10
    pushq %r11
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, %rdi
    subq $512, %rsp
    fxsave (%rsp)
    cld
    call {dispatch}
    fxrstor (%rsp)
    addq $512, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %r11
    popq %r10
    popq %r9
    popq %r8
    popq %rbp
    popq %rdi
    popq %rsi
    popq %rdx
    popq %rcx
    popq %rbx
    popq %rax
    addq $16, %rsp
    iretq
    .text
    "#,
    dispatch = sym isr_dispatch,
    options(att_syntax)
);

/// Loads the GDT (with this CPU's TSS), the TSS and the IDT on the calling CPU.
///
/// # Safety
/// Ring 0, once per CPU, after [`crate::cpu::init_this_cpu`], with interrupts off.
pub unsafe fn init_this_cpu() {
    let cpu = this_cpu().index() as usize;
    let t = TABLES.0.get();
    // SAFETY: this CPU is the only writer of its TSS and IST stacks; the shared entries are
    // written with the same values by every CPU before it loads them (see `Racy`).
    unsafe {
        let ist_base = IST.0.get() as *mut u8;
        for k in 0..IST_PER_CPU {
            let top = ist_base.add((cpu * IST_PER_CPU + k + 1) * IST_SIZE) as u64;
            (*t).tss[cpu].ist[k] = top;
        }
        (*t).gdt[1] = 0x00AF_9A00_0000_FFFF; // 64-bit code, ring 0
        (*t).gdt[2] = 0x00CF_9200_0000_FFFF; // data
        let tss = core::ptr::addr_of!((*t).tss[cpu]) as u64;
        let limit = (size_of::<Tss>() - 1) as u64;
        let lo = (limit & 0xffff)
            | ((tss & 0xff_ffff) << 16)
            | (0x89 << 40) // present, available 64-bit TSS
            | (((limit >> 16) & 0xf) << 48)
            | (((tss >> 24) & 0xff) << 56);
        (*t).gdt[3 + 2 * cpu] = lo;
        (*t).gdt[4 + 2 * cpu] = tss >> 32;

        let stubs = core::ptr::addr_of!(ftrace_bm_isr_stubs) as u64;
        for (v, gate) in (*t).idt.iter_mut().enumerate() {
            let handler = stubs + 16 * v as u64;
            let ist = match v as u64 {
                VECTOR_BREAKPOINT => 1,
                8 => 2,
                _ => 3,
            };
            *gate = IdtEntry {
                offset_lo: handler as u16,
                selector: GDT_CODE,
                ist,
                type_attr: 0x8E, // present, ring 0, 64-bit interrupt gate (clears IF)
                offset_mid: (handler >> 16) as u16,
                offset_hi: (handler >> 32) as u32,
                zero: 0,
            };
        }

        let gdtr = DescriptorPointer {
            limit: (size_of::<[u64; GDT_ENTRIES]>() - 1) as u16,
            base: core::ptr::addr_of!((*t).gdt) as u64,
        };
        let idtr = DescriptorPointer {
            limit: (size_of::<[IdtEntry; 256]>() - 1) as u16,
            base: core::ptr::addr_of!((*t).idt) as u64,
        };
        let tss_sel = ((3 + 2 * cpu) * 8) as u16;
        core::arch::asm!(
            "lgdt [{gdtr}]",
            "push 0x08",
            "lea {tmp}, [rip + 2f]",
            "push {tmp}",
            "retfq",
            "2:",
            "mov {tmp:e}, 0x10",
            "mov ds, {tmp:e}",
            "mov es, {tmp:e}",
            "mov ss, {tmp:e}",
            "ltr {sel:x}",
            "lidt [{idtr}]",
            gdtr = in(reg) &gdtr,
            idtr = in(reg) &idtr,
            sel = in(reg) tss_sel,
            tmp = out(reg) _,
        );
    }
}

#[repr(C, packed)]
struct DescriptorPointer {
    limit: u16,
    base: u64,
}

/// Names the code at an address in fatal reports (`sym+0xoff/0xsize`).
pub type Symbolizer = fn(u64, &mut dyn Write) -> fmt::Result;

static SYMBOLIZER: AtomicUsize = AtomicUsize::new(0);

/// Registers how fatal reports name addresses (the kernel's symbol table).
pub fn set_symbolizer(f: Symbolizer) {
    SYMBOLIZER.store(f as usize, Ordering::Release);
}

fn symbolize(addr: u64, w: &mut dyn Write) -> fmt::Result {
    let f = SYMBOLIZER.load(Ordering::Acquire);
    if f == 0 {
        return write!(w, "?");
    }
    // SAFETY: the only non-zero value ever stored is a `Symbolizer` (set_symbolizer).
    let f: Symbolizer = unsafe { core::mem::transmute::<usize, Symbolizer>(f) };
    f(addr, w)
}

extern "C" fn isr_dispatch(frame: &mut InterruptFrame) {
    let cpu = this_cpu();
    if cpu.enter_exception() > 2 {
        // A fault while reporting a fault: say the least that can still be said.
        crate::qemu::exit(crate::qemu::Verdict::Fail, "nested fatal exceptions");
    }
    if frame.vector == VECTOR_BREAKPOINT && crate::text::handle_int3(frame) {
        cpu.leave_exception();
        return;
    }
    if frame.vector == u64::from(crate::timer::VECTOR_TIMER) {
        crate::timer::handle_tick();
        cpu.leave_exception();
        return;
    }
    if frame.vector >= 32 && handle_irq(frame) {
        cpu.leave_exception();
        return;
    }
    fatal(frame)
}

/// An interrupt (vector 32 and up) other than the tick: the IPI handlers, each between
/// `irq:irq_handler_entry` and `irq:irq_handler_exit` (the vector stands for the IRQ number).
fn handle_irq(frame: &mut InterruptFrame) -> bool {
    let vector = frame.vector as u8;
    let Some(name) = crate::smp::ipi_name(vector) else {
        return crate::smp::handle_ipi(frame);
    };
    crate::events::trace_irq_handler_entry(i32::from(vector), name);
    let handled = crate::smp::handle_ipi(frame);
    crate::events::trace_irq_handler_exit(i32::from(vector), i32::from(handled));
    handled
}

fn fatal(frame: &InterruptFrame) -> ! {
    let mut c = crate::serial::Com1::force();
    let _ = report(frame, &mut c);
    crate::qemu::exit(crate::qemu::Verdict::Fail, "fatal exception")
}

/// Writes the fatal-exception report for `frame`.
pub fn report(frame: &InterruptFrame, w: &mut dyn Write) -> fmt::Result {
    let f = frame;
    writeln!(w)?;
    writeln!(
        w,
        "EXCEPTION: {} (vector {}) on CPU {}",
        vector_name(f.vector),
        f.vector,
        this_cpu().index()
    )?;
    write!(w, "  rip {:#018x} <", f.rip)?;
    symbolize(f.rip, w)?;
    writeln!(w, ">  error code {:#x}", f.error_code)?;
    if f.vector == VECTOR_BREAKPOINT {
        // SAFETY: the CPU just executed the int3 at rip - 1, so it is mapped.
        let now = unsafe { core::ptr::read_volatile((f.rip - 1) as *const u8) };
        writeln!(
            w,
            "  int3 at {:#x} (byte there now {now:#04x}) claimed by no patch batch ({})",
            f.rip - 1,
            if crate::text::batch_in_progress() {
                "a batch is in progress"
            } else {
                "none in progress"
            }
        )?;
    }
    if f.vector == 14 {
        let cr2 = read_cr2();
        let e = f.error_code;
        writeln!(
            w,
            "  cr2 {:#018x} ({} {} of a {} page)",
            cr2,
            if e & 0x10 != 0 {
                "instruction fetch"
            } else {
                "data"
            },
            if e & 0x2 != 0 { "write" } else { "read" },
            if e & 0x1 != 0 {
                "present, protected"
            } else {
                "not-present"
            },
        )?;
    }
    writeln!(
        w,
        "  cs {:#x} ss {:#x} rflags {:#x} rsp {:#018x}",
        f.cs, f.ss, f.rflags, f.rsp
    )?;
    writeln!(
        w,
        "  rax {:#018x} rbx {:#018x} rcx {:#018x} rdx {:#018x}",
        f.rax, f.rbx, f.rcx, f.rdx
    )?;
    writeln!(
        w,
        "  rsi {:#018x} rdi {:#018x} rbp {:#018x} r8  {:#018x}",
        f.rsi, f.rdi, f.rbp, f.r8
    )?;
    writeln!(
        w,
        "  r9  {:#018x} r10 {:#018x} r11 {:#018x} r12 {:#018x}",
        f.r9, f.r10, f.r11, f.r12
    )?;
    writeln!(
        w,
        "  r13 {:#018x} r14 {:#018x} r15 {:#018x}",
        f.r13, f.r14, f.r15
    )
}
