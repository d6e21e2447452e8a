//! `function`: one `ftrace_entry` per traced call, and the `trace_marker` /
//! `trace_marker_raw` writers.
//!
//! The dispatcher calls [`FunctionTracer::trace_call`] for every call site that fires; the
//! tracer records an entry only if it is enabled and the filter admits the function. Invariant:
//! exactly one entry per admitted call while enabled, none otherwise; nothing here allocates or
//! blocks (it runs at every traced function's entry).

use ftrace_core::entry::{
    FtraceEntry, FuncRepeatsEntry, Pod, PrintEntry, RawDataEntry, TraceEntry,
};
use ftrace_core::platform::TaskContext;
use ftrace_core::{Errno, EventId};

use crate::options::{TraceOptions, TracerOpt};
use crate::tracer::{EntrySink, FunctionFilter, Tracer};
use ftrace_core::sync::{AtomicBool, AtomicU64, Ordering};

/// `func_stack_trace`: record a stack trace after each call.
pub const FUNC_OPT_STACK_TRACE: u32 = 0x1;
/// `func-no-repeats`: fold repeated calls into `func_repeats` records.
pub const FUNC_OPT_NO_REPEATS: u32 = 0x2;

/// The function tracer.
#[derive(Debug, Default)]
pub struct FunctionTracer {
    enabled: AtomicBool,
    recorded: AtomicU64,
}

impl FunctionTracer {
    /// A disabled function tracer.
    pub const fn new() -> Self {
        FunctionTracer {
            enabled: AtomicBool::new(false),
            recorded: AtomicU64::new(0),
        }
    }

    /// Whether calls are being recorded.
    pub fn is_enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// How many entries it has recorded (entries the sink dropped not counted).
    pub fn recorded(&self) -> u64 {
        self.recorded.load(Ordering::Relaxed)
    }

    /// `function_trace_call`: records `ip <- parent_ip` if enabled and admitted. Returns whether
    /// an entry was written.
    #[inline]
    pub fn trace_call(
        &self,
        ip: u64,
        parent_ip: u64,
        filter: &(impl FunctionFilter + ?Sized),
        task: &(impl TaskContext + ?Sized),
        sink: &(impl EntrySink + ?Sized),
    ) -> bool {
        if !self.enabled.load(Ordering::Relaxed) || !filter.admits(ip) {
            return false;
        }
        self.record(ip, parent_ip, task, sink)
    }

    #[cold]
    fn record(
        &self,
        ip: u64,
        parent_ip: u64,
        task: &(impl TaskContext + ?Sized),
        sink: &(impl EntrySink + ?Sized),
    ) -> bool {
        let entry = FtraceEntry {
            ent: TraceEntry::new(EventId::Function, task.trace_ctx(), task.current_pid()),
            ip,
            parent_ip,
        };
        let ok = sink.write_entry(size_of::<FtraceEntry>(), &mut |buf| {
            buf[..size_of::<FtraceEntry>()].copy_from_slice(entry.as_bytes())
        });
        if ok {
            self.recorded.fetch_add(1, Ordering::Relaxed);
        }
        ok
    }
}

/// One CPU's `func-no-repeats` state (`struct trace_func_repeats`): the last call recorded
/// and how many identical calls followed it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RepeatState {
    ip: u64,
    parent_ip: u64,
    count: u16,
    ts_last_call: u64,
}

impl FunctionTracer {
    /// `function_no_repeats_trace_call`: like [`FunctionTracer::trace_call`], but a call
    /// identical to the previous one on this CPU (same `ip` and `parent_ip`) only bumps a
    /// counter; the next different call first writes a `func_repeats` record (count and the
    /// time since the last repeat, from `now`, the trace clock). `last` is the current CPU's
    /// state. Returns whether anything was written.
    #[allow(clippy::too_many_arguments)]
    pub fn trace_call_no_repeats(
        &self,
        ip: u64,
        parent_ip: u64,
        now: u64,
        last: &mut RepeatState,
        filter: &(impl FunctionFilter + ?Sized),
        task: &(impl TaskContext + ?Sized),
        sink: &(impl EntrySink + ?Sized),
    ) -> bool {
        if !self.enabled.load(Ordering::Relaxed) || !filter.admits(ip) {
            return false;
        }
        if last.ip == ip && last.parent_ip == parent_ip && last.count < u16::MAX {
            last.ts_last_call = now;
            last.count += 1;
            return false;
        }
        if last.count != 0 {
            let delta = now.wrapping_sub(last.ts_last_call);
            let r = FuncRepeatsEntry {
                ent: TraceEntry::new(EventId::FuncRepeats, task.trace_ctx(), task.current_pid()),
                ip: last.ip,
                parent_ip: last.parent_ip,
                count: last.count,
                top_delta_ts: (delta >> 32) as u16,
                bottom_delta_ts: delta as u32,
            };
            sink.write_entry(size_of::<FuncRepeatsEntry>(), &mut |b| {
                b[..size_of::<FuncRepeatsEntry>()].copy_from_slice(r.as_bytes())
            });
            last.count = 0;
        }
        last.ip = ip;
        last.parent_ip = parent_ip;
        self.record(ip, parent_ip, task, sink)
    }
}

impl Tracer for FunctionTracer {
    fn name(&self) -> &'static str {
        "function"
    }
    fn options(&self) -> &'static [TracerOpt] {
        const OPTS: [TracerOpt; 2] = [
            TracerOpt {
                name: "func_stack_trace",
                bit: FUNC_OPT_STACK_TRACE,
            },
            TracerOpt {
                name: "func-no-repeats",
                bit: FUNC_OPT_NO_REPEATS,
            },
        ];
        &OPTS
    }
    fn init(&self) -> Result<(), Errno> {
        self.enabled.store(true, Ordering::Relaxed);
        Ok(())
    }
    fn reset(&self) {
        self.enabled.store(false, Ordering::Relaxed);
    }
    fn start(&self) {
        self.enabled.store(true, Ordering::Relaxed);
    }
    fn stop(&self) {
        self.enabled.store(false, Ordering::Relaxed);
    }
    fn allow_instances(&self) -> bool {
        true
    }
}

/// What a function tracer's ops reaches through `FtraceOps::private`: the tracer bound to its
/// buffer, task context and (optional) extra filter. The dispatcher has already applied the ops'
/// filter and notrace hashes when it calls [`FunctionTraceTarget::trace`].
pub trait FunctionTraceTarget: Sync {
    /// One traced call.
    fn trace(&self, ip: u64, parent_ip: u64);
}

/// The ops callback (`function_trace_call`) for a [`FunctionTraceTarget`] of type `T`: use it
/// only in ops made by [`function_ops`] (whose `private` is a `&'static T`).
pub fn function_trace_call<T: FunctionTraceTarget>(
    ip: u64,
    parent_ip: u64,
    op: &ftrace_core::ops::FtraceOps,
    _regs: Option<&mut ftrace_core::ops::FtraceRegs>,
) {
    // SAFETY: `function_ops::<T>` is the only constructor pairing this callback with a private
    // pointer, and it stores a `&'static T` there.
    let target = unsafe { &*op.private().cast::<T>() };
    target.trace(ip, parent_ip);
}

/// An ops that calls `target` for every admitted function (register it with the dispatcher;
/// set its filter with `Dispatcher::set_filter`).
pub fn function_ops<T: FunctionTraceTarget>(
    target: &'static T,
    flags: ftrace_core::ops::OpsFlags,
) -> ftrace_core::ops::FtraceOps {
    ftrace_core::ops::FtraceOps::with_private(
        function_trace_call::<T>,
        flags,
        (target as *const T).cast(),
        None,
    )
}

/// The most text one `trace_marker` write records (`TRACE_MARKER_MAX_SIZE`); longer writes are
/// cut.
pub const TRACE_MARKER_MAX_SIZE: usize = 4096;

/// `"<faulted>"`'s length: the least payload a marker entry reserves.
const FAULTED_SIZE: usize = 9;

/// `tracing_mark_write`: records `text` as a `print` entry from `ip` (the marker write
/// function's address), adding the newline the kernel adds when the text lacks one. With the
/// `markers` option off the write is refused with `EINVAL` and nothing is recorded (Linux 6.12
/// `tracing_mark_write`). Returns the number of bytes consumed.
pub fn trace_marker_write(
    text: &[u8],
    ip: u64,
    options: TraceOptions,
    task: &(impl TaskContext + ?Sized),
    sink: &(impl EntrySink + ?Sized),
) -> Result<usize, Errno> {
    if !options.contains(TraceOptions::MARKERS) {
        return Err(Errno::EINVAL);
    }
    let cnt = text.len().min(TRACE_MARKER_MAX_SIZE);
    if cnt == 0 {
        return Ok(0);
    }
    let text = &text[..cnt];
    let mut size = size_of::<PrintEntry>() + cnt + 2;
    if cnt < FAULTED_SIZE {
        size += FAULTED_SIZE - cnt;
    }
    let head = PrintEntry {
        ent: TraceEntry::new(EventId::Print, task.trace_ctx(), task.current_pid()),
        ip,
    };
    let hs = size_of::<PrintEntry>();
    sink.write_entry(size, &mut |buf| {
        buf[..hs].copy_from_slice(head.as_bytes());
        buf[hs..hs + cnt].copy_from_slice(text);
        if text[cnt - 1] != b'\n' {
            buf[hs + cnt] = b'\n';
        }
    });
    Ok(cnt)
}

/// `"<faulted>"` plus the id: the least payload a raw marker entry reserves.
const FAULT_SIZE_ID: usize = FAULTED_SIZE + 4;

/// `tracing_mark_raw_write`: the first four bytes are the id (native endian), the rest the
/// payload, recorded as a `raw_data` entry. Fewer than four bytes is `EINVAL`, and so is any
/// write while the `markers` option is off (nothing is recorded).
pub fn trace_marker_raw_write(
    data: &[u8],
    options: TraceOptions,
    task: &(impl TaskContext + ?Sized),
    sink: &(impl EntrySink + ?Sized),
) -> Result<usize, Errno> {
    if !options.contains(TraceOptions::MARKERS) || data.len() < 4 {
        return Err(Errno::EINVAL);
    }
    let cnt = data.len().min(TRACE_MARKER_MAX_SIZE);
    // The id lands at offset 8; the kernel sizes the entry as the whole struct plus every
    // byte written (the id counted twice), so the payload reads back 4 bytes longer.
    let base = size_of::<RawDataEntry>() - 4;
    let mut size = size_of::<RawDataEntry>() + cnt;
    if cnt < FAULT_SIZE_ID {
        size += FAULT_SIZE_ID - cnt;
    }
    // The ring buffer stores lengths in 4-byte units; the padding reads back as zeros.
    let size = size.next_multiple_of(4);
    let ent = TraceEntry::new(EventId::RawData, task.trace_ctx(), task.current_pid());
    sink.write_entry(size, &mut |buf| {
        buf[..8].copy_from_slice(ent.as_bytes());
        buf[base..base + cnt].copy_from_slice(&data[..cnt]);
    });
    Ok(cnt)
}
