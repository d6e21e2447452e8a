// SPDX-License-Identifier: GPL-2.0
//! ftrace_rs: Linux's function tracer rebuilt from the ftrace-rs crates, as a kernel module.
//!
//! The C shim (ftrace_rs_shim.c) registers one kernel `ftrace_ops` whose callback is
//! [`rfl_rs_ftrace_callback`]. The callback disables preemption and runs the ftrace-core
//! dispatcher, on which the module registered two ops of its own: a per-CPU hit counter, and
//! the ftrace-tracers function tracer, which writes a `struct ftrace_entry` into this CPU's
//! ftrace-ringbuf buffer (pages from the kernel's page allocator, stamped with
//! `trace_clock_local()`). Two ops make every call take the dispatcher's list walk, with its
//! recursion guard and RCU read-side section. Then preemption is re-enabled. `<debugfs>/ftrace_rs/trace` prints the buffers with ftrace-tracers' formatter in
//! the kernel's `trace` format; `<debugfs>/ftrace_rs/stats` prints the per-CPU counters.
//!
//! Invariant: a CPU's buffer is written only on that CPU with preemption disabled (writers
//! nest, never interleave), and read only while recording is stopped and no callback is in
//! flight (opening `trace` stops recording and waits for a grace period, as the kernel's
//! `trace` file does).

use core::cell::UnsafeCell;
use core::ffi::{c_int, c_ulong, c_void};
use core::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};

use kernel::prelude::*;

#[path = "rs/comms.rs"]
mod comms;
#[path = "rs/platform.rs"]
mod platform;
#[path = "rs/shim.rs"]
mod shim;
#[path = "rs/symbols.rs"]
mod symbols;
#[path = "rs/tracing.rs"]
mod tracing;

use ftrace_core::dispatch::Dispatcher;
use ftrace_core::event::TraceCtx;
use ftrace_core::ops::{FtraceOps, FtraceRegs, OpsFlags};
use ftrace_core::platform::{CpuId, ExecContext, TaskContext, TraceClock};
use ftrace_core::recursion::TraceRecursion;
use ftrace_tracers::function::FunctionTracer;
use ftrace_tracers::iter::TraceIter;
use ftrace_tracers::output::header::{HeaderInfo, LatencyInfo};
use ftrace_tracers::output::trace_file::{OutputStyle, Overruns, TraceWriter};
use ftrace_tracers::output::{OutputEnv, TaskNames};
use ftrace_tracers::ringbuf::CpuBufferSink;
use ftrace_tracers::tracer::{AdmitAll, Tracer};

module! {
    type: FtraceRs,
    name: "ftrace_rs",
    author: "The ftrace-rs developers",
    description: "Linux's function tracer, from the ftrace-rs no_std crates",
    license: "GPL",
}

/// CPU slots the module supports (nr_cpu_ids must not exceed it).
pub(crate) const MAX_CPUS: usize = 64;
/// Ring-buffer page size: the kernel's sub-buffer size on x86_64.
const PAGE_SIZE: usize = 4096;
/// [`PerCpu::snapshot`]: attempts in all, and how many of them spin before it sleeps.
const SNAPSHOT_TRIES: u32 = 20_000;
const SNAPSHOT_SPINS: u32 = 100;

/// What one CPU owns besides its ring buffer.
///
/// The counters are written only by callbacks running on this CPU (interrupts may nest one
/// callback inside another) and read from any CPU by `stats` while callbacks keep running
/// (the tick's functions are traced). `calls` counts callbacks begun, `done` callbacks
/// finished; [`PerCpu::snapshot`] uses the pair as a sequence count, so that it returns the
/// counters and ring-buffer stats of a moment when no callback was in flight on this CPU, and
/// the identities between them (`calls == hits`, `hits == entries + ...`) hold exactly.
struct PerCpu {
    /// Calls of the kernel ftrace_ops callback on this CPU (bumped first, on entry).
    calls: AtomicU64,
    /// Callbacks on this CPU that have finished (bumped last, on exit).
    done: AtomicU64,
    /// Calls the dispatcher delivered to the module's counter ops.
    hits: AtomicU64,
    /// Calls the function tracer's own recursion guard refused.
    recursion: AtomicU64,
    /// The dispatcher's recursion word for this CPU.
    recursion_word: TraceRecursion,
    /// The traced code's context word, captured by the callback on entry, one slot per
    /// execution context (an interrupt nesting on this CPU has its own slot).
    ctx: [AtomicU32; 4],
    /// Callbacks that found recording stopped (a reader had `trace` open).
    stopped: AtomicU64,
    /// Callbacks whose entry the tracer did not record (the ring buffer refused it).
    refused: AtomicU64,
    /// pid -> comm of the tasks that wrote events here.
    comms: comms::CommTable,
}

/// One CPU's counters and ring-buffer stats at one moment (see [`PerCpu::snapshot`]).
struct CpuSnapshot {
    calls: u64,
    hits: u64,
    recursion: u64,
    stopped: u64,
    refused: u64,
    ring: Option<ftrace_ringbuf::Stats>,
    /// False if no quiet moment was found within the retry budget (the values are then a
    /// best effort and may not add up).
    consistent: bool,
}

impl PerCpu {
    /// Marks a callback as begun on this CPU. Everything the callback writes afterwards (its
    /// counters, the ring buffer) is ordered after this increment (the release fence), so a
    /// reader that sees any of those writes and then re-reads `calls` sees the increment.
    #[inline]
    fn begin(&self) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::Release);
    }

    /// Marks a callback as finished: a reader whose acquire load sees this count also sees
    /// every write the callback made.
    #[inline]
    fn end(&self) {
        self.done.fetch_add(1, Ordering::Release);
    }

    /// The counters and `buf`'s stats at a moment when no callback was in flight on this CPU:
    /// `calls == done` before the reads, and neither changed across them (a seqcount whose
    /// "writer active" test is `calls != done`, which also works when callbacks nest). Retries
    /// while callbacks run; process context (it may sleep between retries).
    fn snapshot(&self, buf: Option<&tracing::CpuBuf>, now: u64) -> CpuSnapshot {
        let mut snap = CpuSnapshot {
            calls: 0,
            hits: 0,
            recursion: 0,
            stopped: 0,
            refused: 0,
            ring: None,
            consistent: false,
        };
        for attempt in 0..SNAPSHOT_TRIES {
            if attempt >= SNAPSHOT_SPINS {
                // A callback was preempted by the host mid-way (or the tick keeps landing):
                // let the CPU that runs it make progress.
                // SAFETY: process context (a read of the stats file).
                unsafe { shim::rfl_shim_sleep_us(50) };
            } else if attempt > 0 {
                core::hint::spin_loop();
            }
            let calls = self.calls.load(Ordering::Acquire);
            let done = self.done.load(Ordering::Acquire);
            snap.calls = calls;
            snap.hits = self.hits.load(Ordering::Relaxed);
            snap.recursion = self.recursion.load(Ordering::Relaxed);
            snap.stopped = self.stopped.load(Ordering::Relaxed);
            snap.refused = self.refused.load(Ordering::Relaxed);
            snap.ring = buf.map(|b| b.stats(now));
            // Pairs with the release fence in `begin`: if a read above saw a write of a
            // callback begun after the first load of `calls`, the load below sees it begun.
            fence(Ordering::Acquire);
            if calls == done
                && self.done.load(Ordering::Relaxed) == done
                && self.calls.load(Ordering::Relaxed) == calls
            {
                snap.consistent = true;
                break;
            }
        }
        snap
    }

    const fn new() -> Self {
        PerCpu {
            calls: AtomicU64::new(0),
            done: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            recursion: AtomicU64::new(0),
            recursion_word: TraceRecursion::new(),
            ctx: [const { AtomicU32::new(0) }; 4],
            stopped: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            comms: comms::CommTable::new(),
        }
    }
}

/// The tracing instance: created in `init` before the ftrace_ops is registered, dropped in
/// `drop` after it is unregistered (which waits for every callback in flight).
struct Tracing {
    buffer: tracing::Buffer,
    tracer: FunctionTracer,
}

struct Instance(UnsafeCell<Option<Tracing>>);
// SAFETY: written only in init (before registration) and drop (after unregistration), when no
// callback or reader can run; shared reads otherwise.
unsafe impl Sync for Instance {}

static INSTANCE: Instance = Instance(UnsafeCell::new(None));
static CPUS: [PerCpu; MAX_CPUS] = [const { PerCpu::new() }; MAX_CPUS];
/// Events are recorded only while this is set.
static RECORDING: AtomicBool = AtomicBool::new(false);
/// Held by the one open `trace` reader.
static READER: AtomicBool = AtomicBool::new(false);

/// What only the `READER` holder touches.
struct ReaderState(UnsafeCell<symbols::KallsymsCache>);
// SAFETY: accessed only by the holder of READER.
unsafe impl Sync for ReaderState {}
static READER_STATE: ReaderState = ReaderState(UnsafeCell::new(symbols::KallsymsCache::new()));

fn instance() -> Option<&'static Tracing> {
    // SAFETY: see `Instance`: no writer while callbacks, readers or init/drop's own code look.
    unsafe { (*INSTANCE.0.get()).as_ref() }
}

fn nr_cpus() -> usize {
    platform::KernelCpu.possible_cpus() as usize
}

/// CPU `cpu`'s dispatcher recursion word.
pub(crate) fn recursion_word(cpu: usize) -> &'static TraceRecursion {
    &CPUS[cpu.min(MAX_CPUS - 1)].recursion_word
}

/// The context word the callback captured on CPU `cpu` for execution context `ec`.
pub(crate) fn captured_ctx(cpu: usize, ec: ExecContext) -> TraceCtx {
    TraceCtx(CPUS[cpu.min(MAX_CPUS - 1)].ctx[ec as usize].load(Ordering::Relaxed))
}

/// The module's ops list: RCU for reclamation, the kernel task for context and recursion.
static DISPATCHER: Dispatcher<platform::KernelRcu, platform::KernelTask> =
    Dispatcher::new(platform::KernelRcu, platform::KernelTask);
/// Counts the calls the dispatcher delivers, per CPU.
static COUNTER_OPS: FtraceOps = FtraceOps::new(count_call, OpsFlags::empty());
/// The function tracer.
static FUNCTION_OPS: FtraceOps = FtraceOps::new(function_trace_call, OpsFlags::empty());

/// The ftrace callback (`ftrace_func_t`), called by ftrace for every function the kernel-side
/// filter admits: hands the call to the ftrace-core dispatcher with preemption disabled.
///
/// # Safety
/// Called by ftrace only, with the arguments of `ftrace_func_t`.
#[no_mangle]
pub unsafe extern "C" fn rfl_rs_ftrace_callback(
    ip: c_ulong,
    parent_ip: c_ulong,
    _op: *mut c_void,
    _fregs: *mut c_void,
) {
    // The traced code's own context, before we add a preemption level: the task's preempt
    // count and irq state do not change if it migrates before the next line.
    let raw = platform::KernelTask.raw();
    // SAFETY: paired with the enable below; notrace.
    unsafe { shim::rfl_shim_preempt_disable() };
    let cpu = platform::KernelCpu.current_cpu() as usize;
    if let Some(pc) = CPUS.get(cpu) {
        pc.begin();
        let ec = platform::exec_context_from(&raw);
        pc.ctx[ec as usize].store(platform::trace_ctx_from(&raw).0, Ordering::Relaxed);
        DISPATCHER.call(ip as u64, parent_ip as u64, None);
        pc.end();
    }
    // SAFETY: paired with the disable above.
    unsafe { shim::rfl_shim_preempt_enable() };
}

/// COUNTER_OPS' callback.
fn count_call(_ip: u64, _parent_ip: u64, _op: &FtraceOps, _regs: Option<&mut FtraceRegs>) {
    let cpu = platform::KernelCpu.current_cpu() as usize;
    if let Some(pc) = CPUS.get(cpu) {
        pc.hits.fetch_add(1, Ordering::Relaxed);
    }
}

/// FUNCTION_OPS' callback (`function_trace_call`): under the function tracer's recursion bit,
/// records `ip <- parent_ip` into this CPU's buffer unless a reader stopped recording.
fn function_trace_call(ip: u64, parent_ip: u64, _op: &FtraceOps, _regs: Option<&mut FtraceRegs>) {
    let task = platform::KernelTask;
    let cpu = platform::KernelCpu.current_cpu() as usize;
    let (Some(pc), Some(t)) = (CPUS.get(cpu), instance()) else {
        return;
    };
    let Some(_bit) = recursion_word(cpu).try_lock_ftrace(task.exec_context()) else {
        pc.recursion.fetch_add(1, Ordering::Relaxed);
        return;
    };
    if !RECORDING.load(Ordering::Acquire) {
        pc.stopped.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let Some(buf) = t.buffer.cpu(cpu) else {
        return;
    };
    let sink = CpuBufferSink::new(buf, &platform::LocalClock);
    // The kernel's ftrace_set_filter() already filtered the call sites: admit every ip.
    if t.tracer.trace_call(ip, parent_ip, &AdmitAll, &task, &sink) {
        pc.comms
            .record(task.current_pid(), platform::LocalClock.now_ns());
    } else {
        pc.refused.fetch_add(1, Ordering::Relaxed);
    }
}

/// pid -> comm over every CPU's table.
struct Comms;

impl TaskNames for Comms {
    fn comm(&self, pid: i32) -> Option<&str> {
        // The newest of the CPUs' records: a task that migrated has one per CPU.
        CPUS.iter()
            .take(nr_cpus())
            // SAFETY: only called while printing `trace`, with recording stopped and no
            // callback in flight (rfl_rs_trace_open).
            .filter_map(|c| unsafe { c.comms.lookup(pid) })
            .max_by_key(|&(stamp, _)| stamp)
            .map(|(_, comm)| comm)
    }
}

/// Opening `trace`: one reader at a time; stops recording and waits until no callback is
/// writing, so the buffers hold still while they are printed (as the kernel's `trace` file
/// stops tracing while it is open).
#[no_mangle]
pub extern "C" fn rfl_rs_trace_open() -> c_int {
    if READER.swap(true, Ordering::Acquire) {
        return -(kernel::bindings::EBUSY as c_int);
    }
    RECORDING.store(false, Ordering::Release);
    // SAFETY: process context (open); waits for every preempt-disabled callback in flight.
    unsafe { shim::rfl_shim_synchronize() };
    // SAFETY: we hold READER.
    unsafe { (*READER_STATE.0.get()).reset() };
    0
}

/// Closing `trace`: recording resumes.
#[no_mangle]
pub extern "C" fn rfl_rs_trace_release() {
    RECORDING.store(true, Ordering::Release);
    READER.store(false, Ordering::Release);
}

/// The seq_file buffer size to start with for `trace`: about one line per 24-byte entry.
#[no_mangle]
pub extern "C" fn rfl_rs_trace_size_hint() -> usize {
    let entries = instance().map_or(0, |t| t.buffer.entries_and_written().0 as usize);
    4096 + entries * 96
}

/// `<debugfs>/ftrace_rs/trace`: the kernel's `trace` file for the function tracer.
///
/// # Safety
/// `m` is the seq_file of the show callback; the caller holds READER (opened through
/// rfl_rs_trace_open).
#[no_mangle]
pub unsafe extern "C" fn rfl_rs_show_trace(m: *mut shim::SeqFile) {
    use core::fmt::Write;
    let mut w = shim::SeqWriter(m);
    let Some(t) = instance() else { return };
    let Some(snap) = tracing::Snapshot::take(&t.buffer) else {
        let _ = writeln!(w, "# ftrace_rs: out of memory for the snapshot");
        return;
    };
    // SAFETY: we hold READER (trace_open), the only user of the symbol cache.
    let syms = unsafe { &*READER_STATE.0.get() };
    let env = OutputEnv::new(syms, &Comms, nr_cpus() as u32);
    let (entries, written) = t.buffer.entries_and_written();
    let info = HeaderInfo {
        tracer: t.tracer.name(),
        entries,
        written,
        online_cpus: nr_cpus() as u32,
        latency: LatencyInfo::default(),
    };
    let mut src = snap.source();
    let mut iter = TraceIter::new(&mut src, None);
    let mut writer = TraceWriter::new(
        OutputStyle::Default,
        &mut [],
        Overruns::of(written.saturating_sub(entries)),
    );
    let _ = writer.write_trace(&mut w, &env, Some(&info), &mut iter);
    if snap.truncated != 0 {
        let _ = writeln!(
            w,
            "# ftrace_rs: {} events did not fit the snapshot",
            snap.truncated
        );
    }
}

/// `<debugfs>/ftrace_rs/stats`: per CPU, `cpu: N`, the ring buffer's `per_cpu/cpuN/stats`
/// lines, then the module's counters: `calls` (kernel callback), `hits` (delivered by the
/// dispatcher), `recursion` (refused by the tracer's recursion bit), `stopped` (recording
/// stopped by a reader), `refused` (refused by the ring buffer). Each CPU's block is one
/// [`PerCpu::snapshot`]: taken while no callback was in flight there, so its numbers add up
/// even while the traced functions keep running (an `inconsistent:` line says when no such
/// moment was found).
///
/// # Safety
/// `m` is the seq_file of the show callback.
#[no_mangle]
pub unsafe extern "C" fn rfl_rs_show_stats(m: *mut shim::SeqFile) {
    use core::fmt::Write;
    let mut w = shim::SeqWriter(m);
    let Some(t) = instance() else { return };
    let now = platform::LocalClock.now_ns();
    for (cpu, pc) in CPUS.iter().enumerate().take(nr_cpus()) {
        let s = pc.snapshot(t.buffer.cpu(cpu), now);
        let _ = writeln!(w, "cpu: {cpu}");
        if let Some(ring) = &s.ring {
            let _ = ring.write_to(&mut w, ftrace_ringbuf::ClockUnit::Nanoseconds);
        }
        let _ = writeln!(w, "calls: {}", s.calls);
        let _ = writeln!(w, "hits: {}", s.hits);
        let _ = writeln!(w, "recursion: {}", s.recursion);
        let _ = writeln!(w, "stopped: {}", s.stopped);
        let _ = writeln!(w, "refused: {}", s.refused);
        if !s.consistent {
            let _ = writeln!(w, "inconsistent: callbacks kept running on this CPU");
        }
    }
}

struct FtraceRs;

impl kernel::Module for FtraceRs {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let n = nr_cpus();
        if n > MAX_CPUS {
            pr_err!("nr_cpu_ids {} > {}\n", n, MAX_CPUS);
            return Err(EINVAL);
        }
        // SAFETY: reads a compile-time constant of the shim.
        let ksym_len = unsafe { shim::rfl_shim_ksym_symbol_len() } as usize;
        if ksym_len > symbols::KSYM_SYMBOL_LEN {
            pr_err!(
                "KSYM_SYMBOL_LEN {} > {}\n",
                ksym_len,
                symbols::KSYM_SYMBOL_LEN
            );
            return Err(EINVAL);
        }
        // SAFETY: reads a module parameter.
        let pages = unsafe { shim::rfl_shim_pages_per_cpu() } as usize;
        let buffer = tracing::Buffer::new(tracing::KernelPages, n, pages.max(2), PAGE_SIZE)
            .map_err(|e| {
                pr_err!("ring buffer: {}\n", e);
                ENOMEM
            })?;
        let tracer = FunctionTracer::new();
        if tracer.init().is_err() {
            return Err(EINVAL);
        }
        // SAFETY: nothing else runs yet (the ops is not registered, the files do not exist).
        unsafe { *INSTANCE.0.get() = Some(Tracing { buffer, tracer }) };
        // SAFETY: process context; creates the debugfs files served by the functions above.
        let r = unsafe { shim::rfl_shim_debugfs_create() };
        if r != 0 {
            // SAFETY: as above.
            unsafe { *INSTANCE.0.get() = None };
            return Err(Error::from_errno(r));
        }
        let fail = |r: c_int| {
            let _ = DISPATCHER.unregister(&FUNCTION_OPS);
            let _ = DISPATCHER.unregister(&COUNTER_OPS);
            RECORDING.store(false, Ordering::Release);
            // SAFETY: created above; no callback runs (the kernel ops is not registered).
            unsafe {
                shim::rfl_shim_debugfs_remove();
                *INSTANCE.0.get() = None;
            }
            Error::from_errno(r)
        };
        for op in [&COUNTER_OPS, &FUNCTION_OPS] {
            if let Err(e) = DISPATCHER.register(op) {
                pr_err!("dispatcher register: {:?}\n", e);
                return Err(fail(e.to_kernel_return()));
            }
        }
        RECORDING.store(true, Ordering::Release);
        // SAFETY: process context; the callback and everything it touches are statics.
        let r = unsafe { shim::rfl_shim_register() };
        if r != 0 {
            pr_err!("register failed: {}\n", r);
            return Err(fail(r));
        }
        // SAFETY: the filter parameter is a NUL-terminated string owned by the module.
        let filter = unsafe { core::ffi::CStr::from_ptr(shim::rfl_shim_filter()) };
        pr_info!(
            "tracing {:?} on {} CPUs, {} pages per CPU\n",
            filter,
            n,
            pages.max(2)
        );
        Ok(FtraceRs)
    }
}

impl Drop for FtraceRs {
    fn drop(&mut self) {
        // SAFETY: registered in init; unregistering waits for every callback in flight.
        let r = unsafe { shim::rfl_shim_unregister() };
        RECORDING.store(false, Ordering::Release);
        let d = (
            DISPATCHER.unregister(&FUNCTION_OPS),
            DISPATCHER.unregister(&COUNTER_OPS),
        );
        if d.0.is_err() || d.1.is_err() {
            pr_err!("dispatcher unregister: {:?}\n", d);
        }
        // SAFETY: created in init; debugfs waits for open files' operations to finish.
        unsafe { shim::rfl_shim_debugfs_remove() };
        let calls: u64 = CPUS.iter().map(|c| c.calls.load(Ordering::Relaxed)).sum();
        let hits: u64 = CPUS.iter().map(|c| c.hits.load(Ordering::Relaxed)).sum();
        let recorded = instance().map_or(0, |t| t.tracer.recorded());
        pr_info!(
            "unregister={} calls={} hits={} recorded={}\n",
            r,
            calls,
            hits,
            recorded
        );
        // SAFETY: no callback (unregistered) and no reader (files removed) can run any more.
        unsafe { *INSTANCE.0.get() = None };
    }
}
