//! TEMPORARY glue, to be replaced piece by piece as the core crates land: the ftrace_ops
//! dispatch (ftrace-core's dispatcher), the function and function_graph tracers and their
//! Linux-identical text output (ftrace-tracers), the site state machine (ftrace-patch) and the
//! file tree (ftrace-tracefs).
//!
//! What is real already: events are ftrace-core's entry layouts ([`FtraceEntry`],
//! [`FtraceGraphEntEntry`], [`FtraceGraphRetEntry`]) written into ftrace-ringbuf's per-CPU
//! [`RingBuffer`] (pages from [`StaticPages`]), stamped by the backend's clock, and read back
//! with its non-consuming iterators, merged across CPUs by timestamp.
//!
//! Invariant: a CPU's shadow stack is touched only by that CPU with interrupts off (the hooks
//! disable them around their work), and each CPU writes only its own ring buffer, so writers
//! nest strictly as the ring buffer requires.

use core::cell::UnsafeCell;
use core::fmt::{self, Write};

use ftrace_core::Errno;
use ftrace_core::entry::Pod;
use ftrace_core::entry::{FtraceEntry, FtraceGraphEntEntry, FtraceGraphRetEntry, TraceEntry};
use ftrace_core::event::EventId;
use ftrace_core::platform::{CpuId, TaskContext, TraceClock};
use ftrace_core::symbols::SymbolTable;
use ftrace_ringbuf::{Iter, RingBuffer};

use crate::cpu::{BareMetal, MAX_CPUS, this_cpu};
use crate::pages::StaticPages;
use crate::port::{irq_restore, irq_save};
use crate::shell::FileTree;
use crate::sites::{SiteTable, is_nop5};
use crate::sync::{AtomicBool, AtomicU8, Ordering, SpinLock};
use crate::text::{poke5_bp, read_text};
use crate::trampoline;

/// The most call sites the glue tracks.
pub const MAX_SITES: usize = 4096;
/// Ring-buffer pages per CPU (4 KiB each; overwrite mode, as Linux's default).
pub const PAGES_PER_CPU: usize = 32;
/// The ring buffer's page size.
pub const PAGE_SIZE: usize = 4096;
/// Deepest function_graph nesting followed per CPU.
pub const GRAPH_DEPTH: usize = 64;

/// The tracers the glue offers, in `available_tracers` order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Tracer {
    /// `function_graph`.
    FunctionGraph = 2,
    /// `function`.
    Function = 1,
    /// `nop`.
    Nop = 0,
}

impl Tracer {
    const ALL: [Tracer; 3] = [Tracer::FunctionGraph, Tracer::Function, Tracer::Nop];

    /// The name `current_tracer` shows.
    pub const fn name(self) -> &'static str {
        match self {
            Tracer::FunctionGraph => "function_graph",
            Tracer::Function => "function",
            Tracer::Nop => "nop",
        }
    }

    fn from_u8(v: u8) -> Tracer {
        match v {
            1 => Tracer::Function,
            2 => Tracer::FunctionGraph,
            _ => Tracer::Nop,
        }
    }
}

#[derive(Clone, Copy)]
enum Record {
    Function(FtraceEntry),
    GraphEnt(FtraceGraphEntEntry),
    GraphRet(FtraceGraphRetEntry),
}

#[derive(Clone, Copy)]
struct Stamped {
    ts: u64,
    cpu: u32,
    rec: Record,
}

#[derive(Clone, Copy)]
struct ShadowFrame {
    ret: u64,
    func: u64,
    calltime: u64,
}

struct CpuTrace {
    shadow: [ShadowFrame; GRAPH_DEPTH],
    depth: usize,
}

struct PerCpuTraces(UnsafeCell<[CpuTrace; MAX_CPUS]>);
// SAFETY: the module invariant: each CPU's slot is used by that CPU with interrupts off, or by
// the reader while no traced code runs.
unsafe impl Sync for PerCpuTraces {}

const EMPTY_FRAME: ShadowFrame = ShadowFrame {
    ret: 0,
    func: 0,
    calltime: 0,
};

struct Control {
    sites: Option<&'static SiteTable>,
    symbols: Option<&'static (dyn SymbolTable + Sync)>,
    /// `set_ftrace_filter` (empty: every function).
    filter: [u64; MAX_SITES / 64],
    /// Sites currently patched to call the trampoline.
    patched: [u64; MAX_SITES / 64],
    /// Each site's NOP, to restore it.
    nops: [[u8; 5]; MAX_SITES],
}

fn bit(set: &[u64], i: usize) -> bool {
    set[i / 64] & (1 << (i % 64)) != 0
}

fn set_bit(set: &mut [u64], i: usize, on: bool) {
    if on {
        set[i / 64] |= 1 << (i % 64);
    } else {
        set[i / 64] &= !(1 << (i % 64));
    }
}

/// The one tracing instance of the glue.
pub struct Interim {
    tracer: AtomicU8,
    tracing_on: AtomicBool,
    control: SpinLock<Control>,
    cpus: PerCpuTraces,
    /// Set once by `install`; read-only afterwards except `reset`, which runs with recording
    /// off and every CPU synced (no writer inside).
    buffer: UnsafeCell<Option<RingBuffer<&'static StaticPages>>>,
    buffer_ready: AtomicBool,
}

// SAFETY: `buffer` is written once before `buffer_ready` is published and afterwards only
// under the quiescence described on the field; everything else is atomics, a lock, or per-CPU
// state under the module invariant.
unsafe impl Sync for Interim {}

static PAGES: StaticPages = StaticPages::new();

/// The backend's tracing instance (TEMPORARY glue, see the module docs).
pub static TRACING: Interim = Interim {
    tracer: AtomicU8::new(Tracer::Nop as u8),
    tracing_on: AtomicBool::new(true),
    control: SpinLock::new(Control {
        sites: None,
        symbols: None,
        filter: [0; MAX_SITES / 64],
        patched: [0; MAX_SITES / 64],
        nops: [[0; 5]; MAX_SITES],
    }),
    cpus: PerCpuTraces(UnsafeCell::new(
        [const {
            CpuTrace {
                shadow: [EMPTY_FRAME; GRAPH_DEPTH],
                depth: 0,
            }
        }; MAX_CPUS],
    )),
    buffer: UnsafeCell::new(None),
    buffer_ready: AtomicBool::new(false),
};

/// The ring buffer, once installed.
#[inline]
fn ring() -> Option<&'static RingBuffer<&'static StaticPages>> {
    if !TRACING.buffer_ready.load(Ordering::Acquire) {
        return None;
    }
    // SAFETY: published by install; see the field's invariant.
    unsafe { (*TRACING.buffer.get()).as_ref() }
}

/// Writes one entry into this CPU's buffer (dropped, and counted by the buffer, if it cannot).
#[inline]
fn write_entry<E: Pod>(cpu: u32, e: &E) {
    if let Some(b) = ring().and_then(|r| r.cpu(cpu as usize)) {
        b.write(e.as_bytes(), &BareMetal);
    }
}

/// Recursion bit of the entry hook.
const RECURSION_ENTRY: u32 = 0;

fn cpu_trace(cpu: u32) -> *mut CpuTrace {
    // SAFETY: only the address is taken; the module invariant governs its use.
    unsafe { (*TRACING.cpus.0.get()).as_mut_ptr().add(cpu as usize) }
}

extern "C" fn entry_hook(ip: u64, parent_ip: u64, parent_slot: *mut u64) {
    let me = this_cpu();
    if !me.try_enter(RECURSION_ENTRY) {
        return;
    }
    // The context is sampled before interrupts are disabled for the write.
    let ctx = BareMetal.trace_ctx();
    let irq = irq_save();
    let tracer = Tracer::from_u8(TRACING.tracer.load(Ordering::Relaxed));
    if TRACING.tracing_on.load(Ordering::Relaxed) && tracer != Tracer::Nop {
        let p = BareMetal;
        let cpu = me.index();
        let ent = |id| TraceEntry::new(id, ctx, p.current_pid());
        // SAFETY: this CPU's slot, interrupts off (module invariant).
        let t = unsafe { &mut *cpu_trace(cpu) };
        match tracer {
            Tracer::Function => write_entry(
                cpu,
                &FtraceEntry {
                    ent: ent(EventId::Function),
                    ip,
                    parent_ip,
                },
            ),
            Tracer::FunctionGraph if t.depth < GRAPH_DEPTH => {
                t.shadow[t.depth] = ShadowFrame {
                    ret: parent_ip,
                    func: ip,
                    calltime: p.now_ns(),
                };
                write_entry(
                    cpu,
                    &FtraceGraphEntEntry {
                        ent: ent(EventId::FuncgraphEntry),
                        func: ip,
                        depth: t.depth as i32,
                    },
                );
                t.depth += 1;
                // SAFETY: the trampoline passes the slot of the traced function's return
                // address; the return hook gives `parent_ip` back when it returns.
                unsafe { *parent_slot = trampoline::return_to_handler_addr() };
            }
            _ => {}
        }
    }
    irq_restore(irq);
    me.leave(RECURSION_ENTRY);
}

extern "C" fn return_hook() -> u64 {
    let p = BareMetal;
    let ctx = p.trace_ctx();
    let irq = irq_save();
    let me = this_cpu();
    let cpu = me.index();
    // SAFETY: this CPU's slot, interrupts off (module invariant).
    let t = unsafe { &mut *cpu_trace(cpu) };
    let Some(depth) = t.depth.checked_sub(1) else {
        // A redirected return with no frame cannot be resumed: report it loudly.
        // (Unlocked: the shell may hold the console lock around the traced call.)
        let _ = writeln!(
            crate::serial::Com1::force(),
            "ftrace: return_to_handler with an empty shadow stack"
        );
        crate::qemu::exit(crate::qemu::Verdict::Fail, "graph shadow stack underflow");
    };
    t.depth = depth;
    let f = t.shadow[depth];
    if TRACING.tracing_on.load(Ordering::Relaxed) {
        write_entry(
            cpu,
            &FtraceGraphRetEntry {
                ent: TraceEntry::new(EventId::FuncgraphExit, ctx, p.current_pid()),
                func: f.func,
                depth: depth as i32,
                overrun: 0,
                calltime: f.calltime,
                rettime: p.now_ns(),
                backport_calltime: 0,
                backport_rettime: 0,
            },
        );
    }
    irq_restore(irq);
    f.ret
}

/// Whether `name` matches a `set_ftrace_filter` glob (`*` anywhere, any number of times).
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let (p, n) = (pattern.as_bytes(), name.as_bytes());
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ni));
            pi += 1;
        } else if pi < p.len() && p[pi] == n[ni] {
            pi += 1;
            ni += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

impl Interim {
    /// Hands the glue its sites and symbols and registers the trampolines' hooks. Sites are
    /// left as NOPs until a tracer is set.
    pub fn install(
        &'static self,
        sites: &'static SiteTable,
        symbols: &'static (dyn SymbolTable + Sync),
    ) -> Result<(), Errno> {
        let mut c = self.control.lock();
        if sites.sites().len() > MAX_SITES {
            return Err(Errno::ENOSPC);
        }
        for (i, &s) in sites.sites().iter().enumerate() {
            // SAFETY: SiteTable only lists mapped text.
            c.nops[i] = unsafe { read_text::<5>(s as usize) };
        }
        c.sites = Some(sites);
        c.symbols = Some(symbols);
        if !self.buffer_ready.load(Ordering::Acquire) {
            let rb = RingBuffer::new(&PAGES, MAX_CPUS, PAGES_PER_CPU, PAGE_SIZE)
                .map_err(|e| e.errno())?;
            // SAFETY: not yet published: nobody else can see the field.
            unsafe { *self.buffer.get() = Some(rb) };
            self.buffer_ready.store(true, Ordering::Release);
        }
        trampoline::set_return_hook(return_hook);
        trampoline::set_entry_hook(Some(entry_hook));
        Ok(())
    }

    /// The current tracer.
    pub fn tracer(&self) -> Tracer {
        Tracer::from_u8(self.tracer.load(Ordering::Relaxed))
    }

    /// Switches tracers: clears the buffers and patches or restores sites.
    pub fn set_tracer(&self, t: Tracer) -> Result<(), Errno> {
        let mut c = self.control.lock();
        if t == self.tracer() {
            return Ok(());
        }
        self.tracer.store(t as u8, Ordering::Relaxed);
        self.reset_buffers();
        Self::sync_sites(&mut c, t != Tracer::Nop)
    }

    /// Patches (when `active`) the filtered sites and restores the others.
    fn sync_sites(c: &mut Control, active: bool) -> Result<(), Errno> {
        let Some(sites) = c.sites else {
            return Ok(());
        };
        let all = c.filter.iter().all(|w| *w == 0);
        let target = trampoline::caller_addr();
        for (i, &s) in sites.sites().iter().enumerate() {
            let want = active && (all || bit(&c.filter, i));
            if want == bit(&c.patched, i) {
                continue;
            }
            let rel = target as i64 - (s as i64 + 5);
            let rel = i32::try_from(rel).map_err(|_| Errno::ERANGE)?.to_le_bytes();
            let call = [0xE8, rel[0], rel[1], rel[2], rel[3]];
            let (expect, new) = if want {
                (c.nops[i], call)
            } else {
                (call, c.nops[i])
            };
            // SAFETY: the site is listed by SiteTable (mapped text).
            let found = unsafe { read_text::<5>(s as usize) };
            if found != expect {
                // ftrace_bug(): never write over bytes we did not put there.
                // (Unlocked: the shell holds the console lock while it runs a write.)
                let _ = writeln!(
                    crate::serial::Com1::force(),
                    "ftrace failed to modify [<{s:#x}>] actual: {:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
                    found[0],
                    found[1],
                    found[2],
                    found[3],
                    found[4]
                );
                return Err(Errno::EIO);
            }
            debug_assert!(is_nop5(c.nops[i]));
            // SAFETY: a verified site with a decodable instruction; control is locked.
            unsafe { poke5_bp(s as usize, new) };
            set_bit(&mut c.patched, i, want);
        }
        Ok(())
    }

    /// Empties the ring buffer (`tracing_reset_online_cpus`): recording off, every CPU synced
    /// (an IPI cannot land inside a writer, which runs with interrupts off), reset, recording
    /// back as `tracing_on` says.
    fn reset_buffers(&self) {
        let Some(rb) = ring() else {
            return;
        };
        rb.set_record_on(false);
        crate::text::sync_cores();
        // SAFETY: recording is off and every CPU has passed a sync point after that, so no
        // writer is inside the buffer; readers only run from the shell, which is us.
        unsafe {
            if let Some(rb) = (*self.buffer.get()).as_mut() {
                rb.reset();
            }
        }
        rb.set_record_on(self.tracing_on.load(Ordering::Relaxed));
    }

    fn site_name(c: &Control, addr: u64) -> Option<&str> {
        c.symbols?
            .lookup(addr)
            .filter(|s| s.addr == addr)
            .map(|s| s.name)
    }

    fn write_filter(&self, data: &str, append: bool) -> Result<(), Errno> {
        let mut c = self.control.lock();
        let Some(sites) = c.sites else {
            return Err(Errno::ENODEV);
        };
        let mut new = if append {
            c.filter
        } else {
            [0; MAX_SITES / 64]
        };
        for pat in data.split_whitespace() {
            let mut hit = false;
            for (i, &s) in sites.sites().iter().enumerate() {
                if Self::site_name(&c, s).is_some_and(|n| glob_match(pat, n)) {
                    set_bit(&mut new, i, true);
                    hit = true;
                }
            }
            if !hit {
                return Err(Errno::EINVAL);
            }
        }
        c.filter = new;
        let active = self.tracer() != Tracer::Nop;
        Self::sync_sites(&mut c, active)
    }

    fn read_filter(&self, out: &mut dyn Write) -> fmt::Result {
        let c = self.control.lock();
        if c.filter.iter().all(|w| *w == 0) {
            return out.write_str("#### all functions enabled ####\n");
        }
        if let Some(sites) = c.sites {
            for (i, &s) in sites.sites().iter().enumerate() {
                if bit(&c.filter, i) {
                    write_sym(&c, out, s)?;
                    out.write_str("\n")?;
                }
            }
        }
        Ok(())
    }

    fn read_available(&self, out: &mut dyn Write) -> fmt::Result {
        let c = self.control.lock();
        if let Some(sites) = c.sites {
            for &s in sites.sites() {
                if let Some(n) = Self::site_name(&c, s) {
                    writeln!(out, "{n}")?;
                }
            }
        }
        Ok(())
    }

    /// Visits every held record of every CPU in timestamp order.
    fn for_each_record(
        &self,
        mut f: impl FnMut(&Stamped, Option<&Stamped>) -> fmt::Result,
    ) -> fmt::Result {
        let Some(rb) = ring() else {
            return Ok(());
        };
        let mut scratch = [[0u8; PAGE_SIZE]; MAX_CPUS];
        let mut scratch = scratch.iter_mut();
        // One cursor per CPU, with one record of lookahead (function_graph folds a leaf's
        // entry and return into one line).
        let mut cursors: [Option<Cursor<'_>>; MAX_CPUS] = core::array::from_fn(|cpu| {
            let buf = rb.cpu(cpu)?;
            let mut iter = buf.iter(scratch.next()?);
            let head = next_record(&mut iter, cpu as u32);
            let ahead = next_record(&mut iter, cpu as u32);
            Some(Cursor { iter, head, ahead })
        });
        loop {
            let mut best: Option<(usize, u64)> = None;
            for (i, c) in cursors.iter().enumerate() {
                if let Some(r) = c.as_ref().and_then(|c| c.head.as_ref()) {
                    if best.is_none_or(|(_, ts)| r.ts < ts) {
                        best = Some((i, r.ts));
                    }
                }
            }
            let Some((i, _)) = best else {
                return Ok(());
            };
            let Some(c) = cursors[i].as_mut() else {
                return Ok(());
            };
            if let Some(head) = c.head {
                f(&head, c.ahead.as_ref())?;
            }
            c.head = c.ahead.take();
            c.ahead = next_record(&mut c.iter, i as u32);
        }
    }

    fn read_trace(&self, out: &mut dyn Write) -> fmt::Result {
        let c = self.control.lock();
        let tracer = self.tracer();
        writeln!(out, "# tracer: {}\n#", tracer.name())?;
        if tracer == Tracer::FunctionGraph {
            out.write_str(
                "# CPU  DURATION                  FUNCTION CALLS\n\
                 # |     |   |                     |   |   |   |\n",
            )?;
            let mut skip_ret = false;
            return self.for_each_record(|r, next| {
                if core::mem::take(&mut skip_ret) {
                    return Ok(());
                }
                skip_ret = print_graph(&c, out, r, next)?;
                Ok(())
            });
        }
        let (held, written) = ring().map_or((0, 0), RingBuffer::entries_and_written);
        writeln!(
            out,
            "# entries-in-buffer/entries-written: {held}/{written}   #P:{}\n#",
            BareMetal.possible_cpus()
        )?;
        out.write_str(
            "#                                _-----=> irqs-off/BH-disabled\n\
             #                               / _----=> need-resched\n\
             #                              | / _---=> hardirq/softirq\n\
             #                              || / _--=> preempt-depth\n\
             #                              ||| / _-=> migrate-disable\n\
             #                              |||| /     delay\n\
             #           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION\n\
             #              | |         |   |||||     |         |\n",
        )?;
        self.for_each_record(|r, _| {
            let Record::Function(e) = r.rec else {
                return Ok(());
            };
            print_context(out, &e.ent, r.cpu, r.ts)?;
            write_sym(&c, out, e.ip)?;
            out.write_str(" <-")?;
            write_sym(&c, out, e.parent_ip)?;
            out.write_str("\n")
        })
    }
}

struct Cursor<'a> {
    iter: Iter<'a, &'static StaticPages>,
    head: Option<Stamped>,
    ahead: Option<Stamped>,
}

/// The next event of a CPU's iterator that the glue's tracers wrote, decoded.
fn next_record(iter: &mut Iter<'_, &'static StaticPages>, cpu: u32) -> Option<Stamped> {
    loop {
        let ev = iter.next()?;
        let ts = ev.ts;
        let p = ev.payload;
        let rec = match TraceEntry::read_from(p).and_then(|e| EventId::from_u16(e.type_)) {
            Some(EventId::Function) => FtraceEntry::read_from(p).map(Record::Function),
            Some(EventId::FuncgraphEntry) => {
                FtraceGraphEntEntry::read_from(p).map(Record::GraphEnt)
            }
            Some(EventId::FuncgraphExit) => FtraceGraphRetEntry::read_from(p).map(Record::GraphRet),
            _ => None,
        };
        if let Some(rec) = rec {
            return Some(Stamped { ts, cpu, rec });
        }
    }
}

/// `%ps`: the symbol's name, or the address in hex.
fn write_sym(c: &Control, out: &mut dyn Write, addr: u64) -> fmt::Result {
    match c.symbols.and_then(|s| s.lookup(addr)) {
        Some(s) => out.write_str(s.name),
        None => write!(out, "{addr:#x}"),
    }
}

/// The default context columns: `comm-pid [cpu] flags timestamp: `.
fn print_context(out: &mut dyn Write, ent: &TraceEntry, cpu: u32, ts: u64) -> fmt::Result {
    let pid = ent.pid;
    let comm = if pid == 0 { "<idle>" } else { "<...>" };
    let flags = ftrace_core::TraceFlags::from_bits_retain(ent.flags);
    let irq = if flags.contains(ftrace_core::TraceFlags::IRQS_OFF) {
        'd'
    } else {
        '.'
    };
    let hard = flags.contains(ftrace_core::TraceFlags::HARDIRQ);
    let soft = flags.contains(ftrace_core::TraceFlags::SOFTIRQ);
    let hs = match (hard, soft) {
        (true, true) => 'H',
        (true, false) => 'h',
        (false, true) => 's',
        _ => '.',
    };
    let pc = ent.preempt_count & 0xf;
    let md = ent.preempt_count >> 4;
    let digit = |n: u8| {
        if n == 0 {
            '.'
        } else {
            char::from_digit(n.min(15) as u32, 16).unwrap_or('.')
        }
    };
    write!(
        out,
        "{comm:>16}-{pid:<7} [{cpu:03}] {irq}.{hs}{}{} {:>5}.{:06}: ",
        digit(pc),
        digit(md),
        ts / 1_000_000_000,
        ts % 1_000_000_000 / 1000
    )
}

/// The overhead mark of a duration (`+` over 10 us ... `$` over 1 s).
fn duration_mark(ns: u64) -> char {
    match ns {
        d if d > 1_000_000_000 => '$',
        d if d > 100_000_000 => '@',
        d if d > 10_000_000 => '*',
        d if d > 1_000_000 => '#',
        d if d > 100_000 => '!',
        d if d > 10_000 => '+',
        _ => ' ',
    }
}

/// The duration column: `usecs.nsecs us ` padded to the column's width (at most 7 digits).
fn write_duration(out: &mut dyn Write, ns: u64) -> fmt::Result {
    let mut digits = Buf::<24>::new();
    write!(digits, "{}", ns / 1000)?;
    let mut len = digits.len;
    out.write_str(digits.as_str())?;
    if len < 7 {
        let mut frac = Buf::<8>::new();
        write!(frac, "{:03}", ns % 1000)?;
        let keep = frac.len.min(7 - len);
        write!(out, ".{}", &frac.as_str()[..keep])?;
        len += keep + 1;
    }
    out.write_str(" us ")?;
    for _ in len..8 {
        out.write_str(" ")?;
    }
    Ok(())
}

/// One function_graph line; returns true when `next` (the matching return of a leaf) was
/// folded into it.
fn print_graph(
    c: &Control,
    out: &mut dyn Write,
    r: &Stamped,
    next: Option<&Stamped>,
) -> Result<bool, fmt::Error> {
    let cpu = r.cpu;
    match r.rec {
        Record::GraphEnt(e) => {
            let (func, depth) = (e.func, e.depth);
            let leaf = match next.map(|n| n.rec) {
                Some(Record::GraphRet(ret)) if ret.func == func && ret.depth == depth => Some(ret),
                _ => None,
            };
            write!(out, " {cpu}) ")?;
            match leaf {
                Some(ret) => {
                    let d = ret.rettime.saturating_sub(ret.calltime);
                    write!(out, "{} ", duration_mark(d))?;
                    write_duration(out, d)?;
                }
                None => out.write_str("              ")?,
            }
            out.write_str("|  ")?;
            for _ in 0..depth {
                out.write_str("  ")?;
            }
            write_sym(c, out, func)?;
            out.write_str(if leaf.is_some() { "();\n" } else { "() {\n" })?;
            Ok(leaf.is_some())
        }
        Record::GraphRet(ret) => {
            let d = ret.rettime.saturating_sub(ret.calltime);
            write!(out, " {cpu}) {} ", duration_mark(d))?;
            write_duration(out, d)?;
            out.write_str("|  ")?;
            for _ in 0..ret.depth {
                out.write_str("  ")?;
            }
            out.write_str("}\n")?;
            Ok(false)
        }
        Record::Function(_) => Ok(false),
    }
}

/// A small stack buffer implementing `fmt::Write`.
struct Buf<const N: usize> {
    b: [u8; N],
    len: usize,
}

impl<const N: usize> Buf<N> {
    fn new() -> Self {
        Self { b: [0; N], len: 0 }
    }
    fn as_str(&self) -> &str {
        core::str::from_utf8(&self.b[..self.len]).unwrap_or("")
    }
}

impl<const N: usize> Write for Buf<N> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len + s.len();
        if end > N {
            return Err(fmt::Error);
        }
        self.b[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// The files the glue serves, `ls` order.
const FILES: &[&str] = &[
    "available_filter_functions",
    "available_tracers",
    "current_tracer",
    "set_ftrace_filter",
    "trace",
    "trace_clock",
    "tracing_on",
];

impl FileTree for Interim {
    fn list(&self, dir: &str, out: &mut dyn Write) -> Result<(), Errno> {
        if !dir.is_empty() {
            return Err(if FILES.contains(&dir) {
                Errno::ENOTDIR
            } else {
                Errno::ENOENT
            });
        }
        for f in FILES {
            writeln!(out, "{f}").map_err(|_| Errno::EIO)?;
        }
        Ok(())
    }

    fn read(&self, path: &str, out: &mut dyn Write) -> Result<(), Errno> {
        let r = match path {
            "available_tracers" => {
                let mut first = true;
                for t in Tracer::ALL {
                    if !first {
                        out.write_str(" ").map_err(|_| Errno::EIO)?;
                    }
                    first = false;
                    out.write_str(t.name()).map_err(|_| Errno::EIO)?;
                }
                out.write_str("\n")
            }
            "current_tracer" => writeln!(out, "{}", self.tracer().name()),
            "tracing_on" => writeln!(out, "{}", u8::from(self.tracing_on.load(Ordering::Relaxed))),
            "trace_clock" => writeln!(out, "[{}]", <BareMetal as TraceClock>::NAME),
            "set_ftrace_filter" => self.read_filter(out),
            "available_filter_functions" => self.read_available(out),
            "trace" => self.read_trace(out),
            "" => return Err(Errno::EISDIR),
            _ => return Err(Errno::ENOENT),
        };
        r.map_err(|_| Errno::EIO)
    }

    fn write(&self, path: &str, data: &str, append: bool) -> Result<(), Errno> {
        match path {
            "current_tracer" => {
                let name = data.trim();
                let t = Tracer::ALL
                    .into_iter()
                    .find(|t| t.name() == name)
                    .ok_or(Errno::EINVAL)?;
                self.set_tracer(t)
            }
            "tracing_on" => {
                let v: u64 = data.trim().parse().map_err(|_| Errno::EINVAL)?;
                self.tracing_on.store(v != 0, Ordering::Relaxed);
                if let Some(rb) = ring() {
                    rb.set_record_on(v != 0);
                }
                Ok(())
            }
            "trace_clock" => match data.trim() {
                n if n == <BareMetal as TraceClock>::NAME => Ok(()),
                _ => Err(Errno::EINVAL),
            },
            "set_ftrace_filter" => self.write_filter(data, append),
            "trace" => {
                if !append {
                    let _c = self.control.lock();
                    self.reset_buffers();
                }
                Ok(())
            }
            "available_tracers" | "available_filter_functions" => Err(Errno::EACCES),
            _ => Err(Errno::ENOENT),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::String;

    #[test]
    fn globs() {
        assert!(glob_match("bm_*", "bm_leaf"));
        assert!(glob_match("*leaf", "bm_leaf"));
        assert!(glob_match("*_m*e", "bm_middle"));
        assert!(glob_match("bm_leaf", "bm_leaf"));
        assert!(!glob_match("bm_leaf", "bm_leaf2"));
        assert!(!glob_match("bm_*", "other_work"));
        assert!(glob_match("*", ""));
    }

    #[test]
    fn durations_like_linux() {
        let mut s = String::new();
        write_duration(&mut s, 3_787).unwrap();
        assert_eq!(s, "3.787 us    ");
        s.clear();
        write_duration(&mut s, 176_171).unwrap();
        assert_eq!(s, "176.171 us  ");
        s.clear();
        write_duration(&mut s, 12_345_678_901).unwrap();
        assert_eq!(s, "12345678 us ");
        assert_eq!(duration_mark(11_361), '+');
        assert_eq!(duration_mark(176_171), '!');
        assert_eq!(duration_mark(3_787), ' ');
    }

    #[test]
    fn context_columns_like_linux() {
        let mut s = String::new();
        let ent = TraceEntry {
            type_: 1,
            flags: 0x01,
            preempt_count: 0,
            pid: 0,
        };
        print_context(&mut s, &ent, 0, 25_053_149_123).unwrap();
        assert_eq!(s, "          <idle>-0       [000] d....    25.053149: ");
    }
}
