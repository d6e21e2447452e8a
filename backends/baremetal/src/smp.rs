//! Application processors: starting them (INIT-SIPI-SIPI through a real-mode trampoline),
//! running work on them, and making every CPU serialise after a text write.
//!
//! The trampoline is assembled here, copied to [`AP_TRAMPOLINE`] (0x8000, below 1 MiB as a SIPI
//! requires) and patched with the page-table root, a stack, the entry point and the CPU index
//! before each start. An AP goes real mode -> protected mode -> long mode on the boot CPU's page
//! tables, then `ap_entry` sets up its per-CPU area, descriptor tables and APIC, and waits
//! for work with interrupts enabled (`sti; hlt`), so it always takes the IPIs below.
//!
//! [`stop_others`] is stop-machine: every other CPU parks in an IPI handler until released.
//! [`sync_others`] is the cross-CPU half of `sync_cores`: it sends [`VECTOR_SYNC`] to every
//! other CPU and returns when each has acknowledged it; taking an interrupt and returning with
//! `iretq` serialises that CPU's instruction stream. Invariant: a CPU counts as online only
//! once it can take these IPIs, so the wait always ends (a CPU that does not answer within ten
//! seconds is reported as a fatal error).

use core::cell::UnsafeCell;

use crate::apic::{self, Dest};
use crate::cpu::{MAX_CPUS, cpu_slot, online_cpus, this_cpu};
use crate::port::{rdtsc, read_cr3, serialize};
use crate::sync::{AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use ftrace_patch::StopFixup;

/// Where the AP trampoline runs (a SIPI starts the AP at `page << 12`).
pub const AP_TRAMPOLINE: usize = 0x8000;
/// The "serialise now" IPI.
pub const VECTOR_SYNC: u8 = 0xF0;
/// The "work is waiting" IPI.
pub const VECTOR_WAKE: u8 = 0xF1;
/// The "park until released" IPI of stop-machine.
pub const VECTOR_STOP: u8 = 0xF2;

const AP_STACK_SIZE: usize = 64 * 1024;

unsafe extern "C" {
    static ftrace_bm_ap_start: u8;
    static ftrace_bm_ap_end: u8;
    static ftrace_bm_ap_cr3: u8;
    static ftrace_bm_ap_stack: u8;
    static ftrace_bm_ap_entry: u8;
    static ftrace_bm_ap_index: u8;
}

core::arch::global_asm!(
    r#"
    .section .rodata.ftrace_bm_ap, "a"
    .balign 16
    .set AP_BASE, 0x8000
    .global ftrace_bm_ap_start
ftrace_bm_ap_start:
    .code16
    cli
    cld
    xorw %ax, %ax
    movw %ax, %ds
    lgdtl (AP_BASE + (ftrace_bm_ap_gdtr - ftrace_bm_ap_start))
    movl %cr0, %eax
    orl $1, %eax
    movl %eax, %cr0
    ljmpl $0x08, $(AP_BASE + (ftrace_bm_ap_pm32 - ftrace_bm_ap_start))
    .code32
ftrace_bm_ap_pm32:
    movw $0x10, %ax
    movw %ax, %ds
    movw %ax, %es
    movw %ax, %ss
    movl %cr4, %eax
    orl $0x620, %eax
    movl %eax, %cr4
    movl (AP_BASE + (ftrace_bm_ap_cr3 - ftrace_bm_ap_start)), %eax
    movl %eax, %cr3
    movl $0xC0000080, %ecx
    rdmsr
    orl $0x100, %eax
    wrmsr
    movl %cr0, %eax
    andl $0xFFFFFFFB, %eax
    orl $0x80010003, %eax
    movl %eax, %cr0
    ljmpl $0x18, $(AP_BASE + (ftrace_bm_ap_lm64 - ftrace_bm_ap_start))
    .code64
ftrace_bm_ap_lm64:
    movw $0x10, %ax
    movw %ax, %ds
    movw %ax, %es
    movw %ax, %ss
    xorw %ax, %ax
    movw %ax, %fs
    movw %ax, %gs
    movq (AP_BASE + (ftrace_bm_ap_stack - ftrace_bm_ap_start)), %rsp
    movl (AP_BASE + (ftrace_bm_ap_index - ftrace_bm_ap_start)), %edi
    fninit
    movq (AP_BASE + (ftrace_bm_ap_entry - ftrace_bm_ap_start)), %rax
    callq *%rax
1:  cli
    hlt
    jmp 1b
    .balign 16
ftrace_bm_ap_gdt:
    .quad 0
    .quad 0x00CF9A000000FFFF
    .quad 0x00CF92000000FFFF
    .quad 0x00AF9A000000FFFF
ftrace_bm_ap_gdtr:
    .word 31
    .long AP_BASE + (ftrace_bm_ap_gdt - ftrace_bm_ap_start)
    .balign 8
    .global ftrace_bm_ap_cr3
ftrace_bm_ap_cr3:
    .quad 0
    .global ftrace_bm_ap_stack
ftrace_bm_ap_stack:
    .quad 0
    .global ftrace_bm_ap_entry
ftrace_bm_ap_entry:
    .quad 0
    .global ftrace_bm_ap_index
ftrace_bm_ap_index:
    .quad 0
    .global ftrace_bm_ap_end
ftrace_bm_ap_end:
    .text
    "#,
    options(att_syntax)
);

#[repr(C, align(16))]
struct Stacks([[u8; AP_STACK_SIZE]; MAX_CPUS]);
struct Racy<T>(UnsafeCell<T>);
// SAFETY: each stack is handed to exactly one AP, before it starts.
unsafe impl<T> Sync for Racy<T> {}
static AP_STACKS: Racy<Stacks> = Racy(UnsafeCell::new(Stacks([[0; AP_STACK_SIZE]; MAX_CPUS])));

/// A job for an AP: a function and its argument.
pub type Job = fn(u64) -> u64;

const IDLE: u32 = 0;
const POSTED: u32 = 1;
const DONE: u32 = 2;

struct Mailbox {
    state: AtomicU32,
    job: AtomicUsize,
    arg: AtomicU64,
    result: AtomicU64,
}

static MAILBOX: [Mailbox; MAX_CPUS] = [const {
    Mailbox {
        state: AtomicU32::new(IDLE),
        job: AtomicUsize::new(0),
        arg: AtomicU64::new(0),
        result: AtomicU64::new(0),
    }
}; MAX_CPUS];
static APIC_IDS: [AtomicU32; MAX_CPUS] = [const { AtomicU32::new(u32::MAX) }; MAX_CPUS];
static SYNC_GEN: AtomicU64 = AtomicU64::new(0);
static SYNC_ACK: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];

fn delay_us(us: u64) {
    let hz = crate::clock::tsc_hz().max(1_000_000);
    let end = rdtsc() + hz / 1_000_000 * us;
    while rdtsc() < end {
        core::hint::spin_loop();
    }
}

fn offset(sym: *const u8) -> usize {
    sym as usize - &raw const ftrace_bm_ap_start as usize
}

/// Starts the application processors (APIC ids 1..`MAX_CPUS`, as QEMU numbers them) and returns
/// how many CPUs are online. Call once, on the boot CPU, after the clock is calibrated.
///
/// # Safety
/// Physical page 0x8000 must be identity-mapped, writable and unused; the boot CPU's page
/// tables must map the kernel for the APs too.
pub unsafe fn start_aps() -> u32 {
    apic::enable();
    APIC_IDS[0].store(apic::id(), Ordering::Relaxed);
    // SAFETY: the trampoline is a byte range of this image; the caller guarantees the target.
    unsafe {
        let start = &raw const ftrace_bm_ap_start;
        let len = &raw const ftrace_bm_ap_end as usize - start as usize;
        core::ptr::copy_nonoverlapping(start, AP_TRAMPOLINE as *mut u8, len);
    }
    let slot = |sym: *const u8| (AP_TRAMPOLINE + offset(sym)) as *mut u64;
    // SAFETY: the slots are 8-byte fields of the copied trampoline (written before each SIPI).
    unsafe {
        slot(&raw const ftrace_bm_ap_cr3).write_volatile(read_cr3());
        slot(&raw const ftrace_bm_ap_entry).write_volatile(ap_entry as *const () as u64);
    }
    for apic_id in 1..MAX_CPUS as u32 {
        let index = online_cpus();
        if index as usize >= MAX_CPUS {
            break;
        }
        // SAFETY: as above; stack `index` belongs to this AP alone.
        unsafe {
            let top = (AP_STACKS.0.get() as *mut u8).add((index as usize + 1) * AP_STACK_SIZE);
            slot(&raw const ftrace_bm_ap_stack).write_volatile(top as u64);
            slot(&raw const ftrace_bm_ap_index).write_volatile(index as u64);
        }
        serialize();
        apic::send_init(apic_id);
        delay_us(10_000);
        let page = (AP_TRAMPOLINE >> 12) as u8;
        let mut up = false;
        for _ in 0..2 {
            apic::send_sipi(apic_id, page);
            for _ in 0..1000 {
                if online_cpus() > index {
                    up = true;
                    break;
                }
                delay_us(100);
            }
            if up {
                break;
            }
        }
        if !up {
            break; // no CPU with that APIC id
        }
    }
    online_cpus()
}

extern "C" fn ap_entry(index: u32) -> ! {
    // SAFETY: first thing on this AP, ring 0, interrupts off; `index` is its own slot.
    unsafe {
        crate::cpu::init_this_cpu(index);
        crate::idt::init_this_cpu();
    }
    apic::enable();
    APIC_IDS[index as usize].store(apic::id(), Ordering::Release);
    SYNC_ACK[index as usize].store(SYNC_GEN.load(Ordering::Acquire), Ordering::Release);
    // SAFETY: the per-CPU area and descriptor tables are set up just above.
    unsafe { crate::cpu::mark_online() };
    let mb = &MAILBOX[index as usize];
    loop {
        crate::port::irq_disable();
        if mb.state.load(Ordering::Acquire) == POSTED {
            // SAFETY: the only value posted is a `Job` (post()).
            let job: Job =
                unsafe { core::mem::transmute::<usize, Job>(mb.job.load(Ordering::Relaxed)) };
            let r = job(mb.arg.load(Ordering::Relaxed));
            mb.result.store(r, Ordering::Relaxed);
            mb.state.store(DONE, Ordering::Release);
            continue;
        }
        // `sti; hlt` is atomic with respect to interrupts: a wake IPI sent after the check
        // above ends the hlt.
        // SAFETY: the IDT and APIC are set up; only IPIs are unmasked.
        unsafe { core::arch::asm!("sti", "hlt", options(nomem, nostack)) };
    }
}

/// Posts `job(arg)` to CPU `cpu` (an AP, idle) and wakes it.
pub fn post(cpu: u32, job: Job, arg: u64) -> Result<(), &'static str> {
    let mb = MAILBOX.get(cpu as usize).ok_or("no such CPU")?;
    if cpu == 0 || cpu >= online_cpus() {
        return Err("not an online application processor");
    }
    if mb.state.load(Ordering::Acquire) == POSTED {
        return Err("CPU busy");
    }
    mb.job.store(job as usize, Ordering::Relaxed);
    mb.arg.store(arg, Ordering::Relaxed);
    mb.state.store(POSTED, Ordering::Release);
    apic::send_ipi(
        Dest::Apic(APIC_IDS[cpu as usize].load(Ordering::Acquire)),
        VECTOR_WAKE,
    );
    Ok(())
}

/// Waits for the job posted to `cpu` and returns its result.
pub fn wait(cpu: u32) -> u64 {
    let mb = &MAILBOX[cpu as usize];
    while mb.state.load(Ordering::Acquire) != DONE {
        core::hint::spin_loop();
    }
    mb.state.store(IDLE, Ordering::Relaxed);
    mb.result.load(Ordering::Relaxed)
}

/// Makes every other online CPU execute a serialising instruction (an interrupt return) and
/// waits until all have.
pub fn sync_others() {
    let online = online_cpus();
    if online <= 1 {
        return;
    }
    let me = this_cpu().index();
    let generation = SYNC_GEN.fetch_add(1, Ordering::AcqRel) + 1;
    apic::send_ipi(Dest::AllButSelf, VECTOR_SYNC);
    // Under an emulator a busy CPU can take tens of milliseconds to take an IPI; ten seconds
    // only guards against a CPU that is gone.
    let hz = crate::clock::tsc_hz().max(1_000_000);
    let deadline = rdtsc() + 10 * hz;
    for cpu in 0..online {
        if cpu == me {
            continue;
        }
        while SYNC_ACK[cpu as usize].load(Ordering::Acquire) < generation {
            if rdtsc() > deadline {
                use core::fmt::Write;
                let _ = writeln!(
                    crate::serial::Com1::force(),
                    "smp: CPU {cpu} did not answer the sync IPI within ten seconds"
                );
                crate::qemu::exit(crate::qemu::Verdict::Fail, "sync_cores timeout");
            }
            core::hint::spin_loop();
        }
    }
}

static STOP_FIXUP: AtomicPtr<StopFixup<'static>> = AtomicPtr::new(core::ptr::null_mut());
static STOP_PARKED: AtomicU32 = AtomicU32::new(0);
static STOP_RELEASE: AtomicU32 = AtomicU32::new(0);

/// Stop-machine: parks every other online CPU in an IPI handler (interrupts off, outside any
/// text), runs `patch`, then releases them; a CPU whose saved PC lies inside a rewritten window
/// resumes where `fixup` says. The release is an `iretq`, which serialises.
pub fn stop_others(fixup: &StopFixup<'_>, patch: &mut dyn FnMut()) {
    let others = online_cpus().saturating_sub(1);
    if others == 0 {
        patch();
        return;
    }
    STOP_FIXUP.store(
        fixup as *const StopFixup<'_> as *mut StopFixup<'static>,
        Ordering::SeqCst,
    );
    STOP_RELEASE.store(0, Ordering::SeqCst);
    apic::send_ipi(Dest::AllButSelf, VECTOR_STOP);
    let hz = crate::clock::tsc_hz().max(1_000_000);
    let deadline = rdtsc() + 10 * hz;
    while STOP_PARKED.load(Ordering::Acquire) < others {
        if rdtsc() > deadline {
            use core::fmt::Write;
            let _ = writeln!(
                crate::serial::Com1::force(),
                "smp: stop-machine: only {} of {others} CPUs parked within ten seconds",
                STOP_PARKED.load(Ordering::Relaxed)
            );
            crate::qemu::exit(crate::qemu::Verdict::Fail, "stop-machine timeout");
        }
        core::hint::spin_loop();
    }
    patch();
    STOP_RUNS.fetch_add(1, Ordering::Relaxed);
    STOP_RELEASE.store(1, Ordering::SeqCst);
    while STOP_PARKED.load(Ordering::Acquire) != 0 {
        core::hint::spin_loop();
    }
    STOP_FIXUP.store(core::ptr::null_mut(), Ordering::SeqCst);
}

/// How many times this boot parked CPUs for stop-machine.
pub fn stop_machine_runs() -> u64 {
    STOP_RUNS.load(Ordering::Relaxed)
}

static STOP_RUNS: AtomicU64 = AtomicU64::new(0);

/// The name of the handler of IPI `vector` (what `irq:irq_handler_entry` calls it); `None`
/// for a vector that is not one of the kernel's IPIs.
pub fn ipi_name(vector: u8) -> Option<&'static str> {
    match vector {
        VECTOR_SYNC => Some("sync_cores"),
        VECTOR_WAKE => Some("wake"),
        VECTOR_STOP => Some("stop_machine"),
        _ => None,
    }
}

/// The IPI side: returns true if the frame's vector was one of ours (and acknowledges it).
pub(crate) fn handle_ipi(frame: &mut crate::idt::InterruptFrame) -> bool {
    match frame.vector as u8 {
        VECTOR_STOP => {
            apic::eoi();
            STOP_PARKED.fetch_add(1, Ordering::AcqRel);
            while STOP_RELEASE.load(Ordering::Acquire) == 0 {
                core::hint::spin_loop();
            }
            // SAFETY: the fixup stays published until every parked CPU has left (the
            // initiator waits for STOP_PARKED to drop to zero before retiring it).
            if let Some(f) = unsafe { STOP_FIXUP.load(Ordering::SeqCst).as_ref() } {
                if let Some(pc) = f.resume_pc(frame.rip) {
                    frame.rip = pc;
                }
            }
            STOP_PARKED.fetch_sub(1, Ordering::AcqRel);
            true
        }
        VECTOR_SYNC => {
            let cpu = this_cpu().index() as usize;
            serialize();
            SYNC_ACK[cpu].store(SYNC_GEN.load(Ordering::Acquire), Ordering::Release);
            apic::eoi();
            true
        }
        VECTOR_WAKE => {
            apic::eoi();
            true
        }
        apic::VECTOR_SPURIOUS => true,
        _ => false,
    }
}

/// Whether CPU `cpu` has started.
pub fn is_online(cpu: u32) -> bool {
    cpu < online_cpus() && cpu_slot(cpu as usize).is_some()
}
