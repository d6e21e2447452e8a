//! The ftrace-rs bare-metal test kernel.
//!
//! Boots in QEMU via PVH (`boot.S`), sets up COM1, the per-CPU area, GDT/TSS/IDT and the TSC
//! clock, discovers its own patchable call sites, loads its symbol table (kallsyms text passed
//! as the PVH module, i.e. QEMU's `-initrd`), self-tests the breakpoint patch protocol, then
//! serves the tracefs tree on a serial shell until `poweroff`.
//!
//! This crate is the only instrumented one: everything tracing-related runs in
//! `ftrace-baremetal` and the core crates, built without `-Zpatchable-function-entry`.
#![no_std]
#![no_main]

extern crate alloc;

mod workload;

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::fmt::{self, Write};

use ftrace_baremetal::qemu::{self, Verdict};
use ftrace_baremetal::rt::KernelHeap;
use ftrace_baremetal::serial::{self, Com1};
use ftrace_baremetal::shell::{self, Builtins, Outcome, Shell};
use ftrace_baremetal::sites::SiteTable;
use ftrace_baremetal::sync::{AtomicPtr, AtomicU64, Ordering};
use ftrace_baremetal::text::KernelText;
use ftrace_baremetal::platform::{self, SerialTracefs};
use ftrace_baremetal::{clock, cpu, idt, port, println, smp, text, trampoline};
use ftrace_core::symbols::{SortedSymbols, SymbolTable};
use ftrace_patch::{Arch, BreakpointSlot, PokeSite, Protocol, StopFixup, TextFault, TextPoke};

core::arch::global_asm!(include_str!("boot.S"), options(att_syntax));

#[global_allocator]
static HEAP: KernelHeap = KernelHeap::new();

unsafe extern "C" {
    static __start_pfe: u64;
    static __stop_pfe: u64;
}

static SYMBOLS: AtomicPtr<SortedSymbols> = AtomicPtr::new(core::ptr::null_mut());

fn symbols() -> Option<&'static SortedSymbols> {
    // SAFETY: the only non-null value stored is a leaked, never-freed table.
    unsafe { SYMBOLS.load(Ordering::Acquire).as_ref() }
}

fn symbolize(addr: u64, w: &mut dyn Write) -> fmt::Result {
    match symbols().and_then(|s| s.lookup(addr)) {
        Some(s) => write!(w, "{}+{:#x}/{:#x}", s.name, addr - s.addr, s.size),
        None => write!(w, "?"),
    }
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    let _ = writeln!(Com1::force(), "PANIC: {info}");
    qemu::exit(Verdict::Fail, "panic")
}

/// The precompiled libcore of the host target is built with panic=unwind and its unwind
/// tables name this symbol; with panic=abort it is never called.
#[unsafe(no_mangle)]
pub extern "C" fn rust_eh_personality() {}

/// `struct hvm_start_info` magic.
const HVM_START_MAGIC: u32 = 0x336e_c578;

/// The first PVH module (QEMU's `-initrd`), as text.
fn pvh_module(info: u64) -> Option<&'static str> {
    if info == 0 {
        return None;
    }
    // SAFETY: PVH passes a pointer to struct hvm_start_info (magic u32, version u32, flags u32,
    // nr_modules u32, modlist_paddr u64, ...) in identity-mapped low memory; the magic is
    // checked before anything else is trusted.
    unsafe {
        let p = info as *const u32;
        if p.read_volatile() != HVM_START_MAGIC || p.add(3).read_volatile() == 0 {
            return None;
        }
        let modlist = (info as *const u64).add(2).read_volatile();
        // struct hvm_modlist_entry { paddr u64, size u64, cmdline_paddr u64, reserved u64 }
        let m = modlist as *const u64;
        let (paddr, size) = (m.read_volatile(), m.add(1).read_volatile());
        if paddr == 0 || size == 0 || paddr + size > 1 << 30 {
            return None;
        }
        let bytes = core::slice::from_raw_parts(paddr as *const u8, size as usize);
        core::str::from_utf8(bytes).ok()
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn kmain(boot_info: u64) -> ! {
    serial::init();
    // SAFETY: first thing on the boot CPU, ring 0, interrupts off.
    unsafe {
        cpu::init_this_cpu(0);
        idt::init_this_cpu();
        cpu::mark_online();
    }
    idt::set_symbolizer(symbolize);
    port::mask_legacy_pic();
    println!("ftrace-rs bare-metal test kernel");
    let wp = port::read_cr0() & (1 << 16) != 0;
    println!(
        "boot: PVH start info at {boot_info:#x}, CR0.WP={}",
        u8::from(wp)
    );

    let cal = clock::calibrate_pit();
    println!(
        "clock: TSC {} kHz ({}), trace_clock local",
        cal.tsc_hz / 1000,
        if cal.measured {
            "calibrated against the PIT"
        } else {
            "PIT unusable: assumed"
        }
    );

    // SAFETY: page 0x8000 is identity-mapped RW and unused; APs share these page tables.
    let cpus = unsafe { smp::start_aps() };
    println!("smp: {cpus} CPU(s) online");

    let syms = match pvh_module(boot_info).map(SortedSymbols::from_kallsyms) {
        Some(Ok(t)) => t,
        Some(Err(e)) => {
            println!("symbols: bad kallsyms module: {e}");
            SortedSymbols::new()
        }
        None => {
            println!("symbols: none (no -initrd kallsyms module): names print as addresses");
            SortedSymbols::new()
        }
    };
    let syms: &'static SortedSymbols = Box::leak(Box::new(syms));
    SYMBOLS.store(syms as *const _ as *mut _, Ordering::Release);
    println!("symbols: {} functions", syms.len());

    // SAFETY: the linker script brackets the records with these symbols.
    let raw = unsafe {
        let start = &raw const __start_pfe;
        let stop = &raw const __stop_pfe;
        core::slice::from_raw_parts(start, stop.offset_from(start) as usize)
    };
    let records: &'static mut [u64] = Vec::from(raw).leak();
    // SAFETY: a private copy of the records, which point into this kernel's text.
    let sites: &'static SiteTable = Box::leak(Box::new(unsafe { SiteTable::new(records) }));
    println!(
        "sites: {} patchable function entries ({} rejected)",
        sites.sites().len(),
        sites.rejected
    );

    let mut ok = check_uninstrumented(sites, syms);
    ok &= selftest_breakpoint_protocol(sites);
    if cpus > 1 {
        ok &= selftest_cross_cpu_patching(sites);
    }
    if !ok {
        qemu::exit(Verdict::Fail, "boot self-test");
    }

    let tree = match platform::install(sites, syms, &[&workload::WORKLOAD_ROUND]) {
        Ok(t) => t,
        Err(e) => {
            println!("tracing: install failed: {e}");
            qemu::exit(Verdict::Fail, "install");
        }
    };
    println!(
        "tracing: {} call-site records, heap {} KiB used",
        sites.sites().len(),
        HEAP.used() / 1024
    );
    println!(
        "tracefs: serving on COM1 (ls, cat, echo ... > file; workload N; heap; poweroff pass [N]|fail)"
    );
    run_shell(tree)
}

/// The tracer's own code must carry no call site: only this crate is instrumented.
fn check_uninstrumented(sites: &SiteTable, syms: &SortedSymbols) -> bool {
    let hot = [
        "ftrace_baremetal::platform",
        "ftrace_baremetal::trampoline",
        "ftrace_baremetal::clock",
        "ftrace_baremetal::cpu",
        "ftrace_baremetal::text",
        "ftrace_core::",
        "ftrace_ringbuf::",
        "ftrace_tracers::",
        "ftrace_tracefs::array",
    ];
    let mut bad = 0;
    for &s in sites.sites() {
        if let Some(sym) = syms.lookup(s) {
            // The tracer's own functions (generic code merely instantiated here, such as
            // `drop_in_place::<ftrace_core::...>`, is this crate's and may carry a site).
            let own = sym.name.trim_start_matches('<');
            if hot.iter().any(|h| own.starts_with(h)) {
                println!("selftest: tracer code is instrumented: {}", sym.name);
                bad += 1;
            }
        }
    }
    let named = |n: &str| {
        syms.by_name(n)
            .is_some_and(|s| sites.index_of(s.addr).is_some())
    };
    let workload_ok = [
        "bm_workload",
        "bm_outer",
        "bm_middle",
        "bm_leaf",
        "other_work",
    ]
    .iter()
    .all(|n| named(n))
        || syms.is_empty();
    let ok = bad == 0 && workload_ok;
    println!(
        "selftest: tracer code uninstrumented, workload sites present: {}",
        if ok { "ok" } else { "FAILED" }
    );
    ok
}

static SELFTEST_HITS: AtomicU64 = AtomicU64::new(0);

extern "C" fn selftest_hook(_ip: u64, _parent: u64, _slot: *mut u64) {
    SELFTEST_HITS.fetch_add(1, Ordering::Relaxed);
}

/// `selftest_target`'s site: its NOP and the `call` to the entry trampoline.
fn selftest_site(sites: &SiteTable) -> Option<(u64, [u8; 5], [u8; 5])> {
    let site = workload::selftest_target as *const () as u64;
    sites.index_of(site)?;
    // SAFETY: a verified site.
    let nop: [u8; 5] = unsafe { text::read_text(site as usize) };
    let call = ftrace_patch::x86::encode_call(site, trampoline::caller_addr()).ok()?;
    Some((site, nop, call))
}

/// Rewrites one site from `old` to `new` with ftrace-patch's `protocol`.
fn flip(site: u64, old: &[u8; 5], new: &[u8; 5], protocol: Protocol) -> bool {
    let mut batch = [PokeSite::insn(Arch::X86_64, site, old, new, 0)];
    text::patch_batch(&mut batch, protocol).done == 1
}

/// A `TextPoke` that calls `selftest_target` after every text write of a batch, so every
/// intermediate state of the protocol is executed, and records (hook calls, int3 emulations)
/// per call.
struct Probe {
    calls: [(u64, u64); 8],
    n: usize,
    wrong: bool,
}

impl Probe {
    fn call(&mut self) {
        let f: extern "C" fn(u64, u64) -> u64 = core::hint::black_box(workload::selftest_target);
        let (h0, t0) = (SELFTEST_HITS.load(Ordering::Relaxed), text::int3_hits());
        self.wrong |= f(40, 2) != 122;
        if self.n < self.calls.len() {
            self.calls[self.n] = (
                SELFTEST_HITS.load(Ordering::Relaxed) - h0,
                text::int3_hits() - t0,
            );
            self.n += 1;
        }
    }
}

impl TextPoke for Probe {
    fn read_text(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), TextFault> {
        KernelText.read_text(addr, buf)
    }
    fn write_text(&mut self, addr: u64, bytes: &[u8]) -> Result<(), TextFault> {
        KernelText.write_text(addr, bytes)?;
        self.call();
        Ok(())
    }
    fn sync_cores(&mut self) {
        KernelText.sync_cores();
    }
    fn stop_others(&mut self, fixup: &StopFixup<'_>, patch: &mut dyn FnMut(&mut Self)) {
        smp::stop_others(fixup, &mut || patch(self));
    }
    fn breakpoint_slot(&self) -> Option<&'static BreakpointSlot> {
        KernelText.breakpoint_slot()
    }
}

/// Runs ftrace-patch's breakpoint protocol on `selftest_target`'s site with [`Probe`], both
/// ways, and checks that the function runs correctly in every intermediate state, through the
/// int3 handler's emulation of the new instruction while the int3 is there, and as the new
/// instruction once it is written.
fn selftest_breakpoint_protocol(sites: &SiteTable) -> bool {
    let Some((site, nop, call)) = selftest_site(sites) else {
        println!("selftest: selftest_target has no patchable entry");
        return false;
    };
    trampoline::set_entry_hook(Some(selftest_hook));
    let mut ok = true;
    // (hook calls, int3 emulations) after: the int3, the new tail, the new head.
    for (old, new, want) in [
        (nop, call, [(1, 1), (1, 1), (1, 0)]),
        (call, nop, [(0, 1), (0, 1), (0, 0)]),
    ] {
        let mut probe = Probe {
            calls: [(0, 0); 8],
            n: 0,
            wrong: false,
        };
        let mut batch = [PokeSite::insn(Arch::X86_64, site, &old, &new, 0)];
        let st = ftrace_patch::protocol::apply(
            &mut probe,
            Arch::X86_64,
            &mut batch,
            Protocol::Breakpoint,
        );
        let good = st.done == 1 && !probe.wrong && probe.calls[..probe.n] == want[..];
        if !good {
            println!(
                "selftest: breakpoint protocol {:02x?} -> {:02x?}: done {}, wrong result {}, \
                 (hook calls, int3 emulations) per state {:?}, want {:?}",
                old,
                new,
                st.done,
                probe.wrong,
                &probe.calls[..probe.n],
                want
            );
        }
        ok &= good;
    }
    // stop-machine, both ways (with one CPU the others are trivially stopped)
    ok &= flip(site, &nop, &call, Protocol::StopMachine);
    let (h0, t0) = (SELFTEST_HITS.load(Ordering::Relaxed), text::int3_hits());
    let f: extern "C" fn(u64, u64) -> u64 = core::hint::black_box(workload::selftest_target);
    ok &= f(40, 2) == 122;
    ok &= SELFTEST_HITS.load(Ordering::Relaxed) - h0 == 1 && text::int3_hits() == t0;
    ok &= flip(site, &call, &nop, Protocol::StopMachine);
    trampoline::set_entry_hook(None);
    // SAFETY: a verified site.
    ok &= unsafe { text::read_text::<5>(site as usize) } == nop;
    println!(
        "selftest: int3 breakpoint protocol ({} traps emulated): {}",
        text::int3_hits(),
        if ok { "ok" } else { "FAILED" }
    );
    ok
}

static STRESS_STOP: AtomicU64 = AtomicU64::new(0);
static STRESS_WRONG: AtomicU64 = AtomicU64::new(0);
static STRESS_CALLS: AtomicU64 = AtomicU64::new(0);

/// Runs on CPU 1 during the cross-CPU test: calls the site being flipped until told to stop,
/// with interrupts enabled (so it answers the sync IPIs), checking every result.
fn stress_job(_: u64) -> u64 {
    let f: extern "C" fn(u64, u64) -> u64 = core::hint::black_box(workload::selftest_target);
    // SAFETY: the IDT is loaded and only IPIs are unmasked.
    unsafe { port::irq_enable() };
    let mut i = 0u64;
    while STRESS_STOP.load(Ordering::Acquire) == 0 {
        if f(i, 1) != i.wrapping_mul(3).wrapping_add(1) {
            STRESS_WRONG.fetch_add(1, Ordering::Relaxed);
        }
        i += 1;
        STRESS_CALLS.store(i, Ordering::Release);
    }
    port::irq_disable();
    i
}

/// Flips `selftest_target`'s site between NOP and CALL with the breakpoint protocol while
/// CPU 1 calls it in a loop: every call must compute the right result, no CPU may fault, and
/// the site must end as the NOP it was.
fn selftest_cross_cpu_patching(sites: &SiteTable) -> bool {
    const FLIPS: u64 = 6;
    let Some((site, nop, call)) = selftest_site(sites) else {
        return false;
    };
    trampoline::set_entry_hook(Some(selftest_hook));
    let (hits0, traps0, stale0, stops0) = (
        SELFTEST_HITS.load(Ordering::Relaxed),
        text::int3_hits(),
        text::stale_int3_retries(),
        smp::stop_machine_runs(),
    );
    STRESS_STOP.store(0, Ordering::Release);
    if smp::post(1, stress_job, 0).is_err() {
        println!("selftest: cannot post to CPU 1");
        return false;
    }
    while STRESS_CALLS.load(Ordering::Acquire) == 0 {
        core::hint::spin_loop();
    }
    let t0 = port::rdtsc();
    let mut flipped = true;
    for k in 0..FLIPS {
        // Mostly the breakpoint protocol; every third round under stop-machine.
        let protocol = if k % 3 == 2 {
            Protocol::StopMachine
        } else {
            Protocol::Breakpoint
        };
        flipped &= flip(site, &nop, &call, protocol);
        flipped &= flip(site, &call, &nop, protocol);
    }
    let ms = (port::rdtsc() - t0) / (clock::tsc_hz() / 1000).max(1);
    STRESS_STOP.store(1, Ordering::Release);
    let calls = smp::wait(1);
    trampoline::set_entry_hook(None);
    let hits = SELFTEST_HITS.load(Ordering::Relaxed) - hits0;
    let traps = text::int3_hits() - traps0;
    let stale = text::stale_int3_retries() - stale0;
    let stops = smp::stop_machine_runs() - stops0;
    let wrong = STRESS_WRONG.load(Ordering::Relaxed);
    // SAFETY: a verified site.
    let restored = unsafe { text::read_text::<5>(site as usize) } == nop;
    let ok = flipped && wrong == 0 && calls > 0 && hits <= calls && restored && stops > 0;
    println!(
        "selftest: cross-CPU patching ({FLIPS} NOP/CALL flips in {ms} ms while CPU 1 made \
         {calls} calls: {hits} through the trampoline, {traps} int3 traps emulated, {stops} \
         stop-machine parkings, {stale} late traps retried, {wrong} wrong results): {}",
        if ok { "ok" } else { "FAILED" }
    );
    ok
}

/// The workload as task code runs it: interrupts enabled (nothing but IPIs is unmasked).
fn workload_irqson(n: u64) -> u64 {
    // SAFETY: the IDT is loaded and the PICs are masked (kmain).
    unsafe { port::irq_enable() };
    let v = workload::bm_workload(n);
    port::irq_disable();
    v
}

/// The workload with interrupts disabled, which the trace's irqs-off flag shows.
fn workload_irqsoff(n: u64) -> u64 {
    workload::bm_workload(n)
}

/// The kernel's builtins.
struct Kernel {
    /// Set by `poweroff`: the verdict asked for and how many failed commands it allows.
    poweroff: Option<(Verdict, u32)>,
}

impl Kernel {
    fn poweroff(&mut self, v: Verdict, expected_failures: u32) -> Outcome {
        self.poweroff = Some((v, expected_failures));
        Outcome::Ok
    }
}

impl Builtins for Kernel {
    fn run(&mut self, argv: &[&str], out: &mut dyn Write) -> Option<Outcome> {
        let fail = |out: &mut dyn Write, msg: &str| {
            let _ = writeln!(out, "{msg}");
            Outcome::Failed
        };
        Some(match argv {
            ["workload", n, opts @ ..] => {
                let irqsoff = opts.contains(&"irqsoff");
                let cpu = opts.iter().find_map(|o| o.strip_prefix("cpu="));
                let known = opts
                    .iter()
                    .all(|o| *o == "irqsoff" || o.starts_with("cpu="));
                match (n.parse::<u64>(), cpu.map(str::parse::<u32>)) {
                    (Ok(n), None | Some(Ok(_))) if n <= 1000 && known => {
                        let job = if irqsoff {
                            workload_irqsoff
                        } else {
                            workload_irqson
                        };
                        let v = match cpu.and_then(|c| c.parse::<u32>().ok()) {
                            None | Some(0) => job(n),
                            Some(c) => match smp::post(c, job, n) {
                                Ok(()) => smp::wait(c),
                                Err(e) => return Some(fail(out, e)),
                            },
                        };
                        let want = workload::expected_checksum(n);
                        let _ = writeln!(out, "workload: bm_workload({n}) = {v}");
                        if v == want {
                            Outcome::Ok
                        } else {
                            fail(out, "workload: wrong result under tracing")
                        }
                    }
                    _ => fail(out, "usage: workload N [irqsoff] [cpu=C] (N <= 1000)"),
                }
            }
            ["poweroff", "pass", rest @ ..] => match rest {
                [] => self.poweroff(Verdict::Pass, 0),
                [n] => match n.parse() {
                    Ok(n) => self.poweroff(Verdict::Pass, n),
                    Err(_) => fail(out, "usage: poweroff pass [EXPECTED_FAILURES]"),
                },
                _ => fail(out, "usage: poweroff pass [EXPECTED_FAILURES]"),
            },
            ["poweroff", "fail"] => self.poweroff(Verdict::Fail, 0),
            ["fault"] => {
                // A plain store into read-only text: must end in a page-fault report.
                let target = kmain as *const () as *mut u8;
                // SAFETY: deliberately unsound for the fault test; never returns.
                unsafe { core::ptr::write_volatile(target, 0xCC) };
                fail(out, "fault: the write to text did not fault")
            }
            ["ticks", n] => match n.parse::<u64>() {
                Ok(n) if (1..=100).contains(&n) => {
                    let got = ftrace_baremetal::timer::wait_ticks(n);
                    let _ = writeln!(out, "ticks: {got} timer ticks");
                    Outcome::Ok
                }
                _ => fail(out, "usage: ticks N (1 <= N <= 100)"),
            },
            ["jump_labels"] => {
                // Every tracepoint site: a NOP while its event is off, a jmp while on.
                let (mut total, mut on, mut other) = (0, 0, 0);
                for e in ftrace_core::jump_label::entries() {
                    total += 1;
                    // SAFETY: each entry's code is a 5-byte site in this kernel's text,
                    // mapped readable.
                    match unsafe { core::ptr::read_volatile(e.code as *const u8) } {
                        0x0f => {}
                        0xe9 => on += 1,
                        _ => other += 1,
                    }
                }
                let _ = writeln!(
                    out,
                    "jump_labels: {total} sites, {on} jmp, {other} neither"
                );
                Outcome::Ok
            }
            ["heap"] => {
                let _ = writeln!(
                    out,
                    "heap: {} of {} bytes used, {} allocations in trace hooks or interrupts",
                    HEAP.used(),
                    ftrace_baremetal::rt::HEAP_SIZE,
                    HEAP.hook_allocs()
                );
                Outcome::Ok
            }
            ["help"] => {
                let _ = writeln!(
                    out,
                    "ls [DIR] | cat FILE... | echo [-n] WORDS [>|>> FILE] | workload N | \
                     workload N [irqsoff] [cpu=C] | ticks N | jump_labels | heap | poweroff pass [N]|fail | fault"
                );
                Outcome::Ok
            }
            _ => return None,
        })
    }
}

fn run_shell(tree: SerialTracefs) -> ! {
    let mut sh = Shell::new();
    let mut k = Kernel { poweroff: None };
    let mut line = [0u8; 512];
    Com1::with(|c| c.write_str(shell::PROMPT)).ok();
    loop {
        let b = serial::read_byte();
        if !Com1::with(|c| sh.feed(b, c)) {
            continue;
        }
        let n = sh.take_line(&mut line);
        let text = core::str::from_utf8(&line[..n]).unwrap_or("");
        Com1::with(|c| {
            sh.execute(text, &tree, &mut k, c);
        });
        if let Some((v, expected)) = k.poweroff {
            // What the session left allocated is worth seeing (freed blocks are reused).
            println!(
                "heap: {} KiB of {} KiB used, {} allocations in trace hooks or interrupts",
                HEAP.used() / 1024,
                ftrace_baremetal::rt::HEAP_SIZE / 1024,
                HEAP.hook_allocs()
            );
            let why = alloc::format!(
                "{} commands, {} failed, {} expected to",
                sh.commands,
                sh.failures,
                expected
            );
            let v = if sh.failures == expected {
                v
            } else {
                Verdict::Fail
            };
            qemu::exit(v, &why);
        }
        Com1::with(|c| c.write_str(shell::PROMPT)).ok();
    }
}
