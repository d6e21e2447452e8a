//! The instance's `trace`, `trace_pipe` and `trace_pipe_raw` readers: its ring buffer
//! through ftrace-tracers' iterator and writer.

use alloc::vec;
use alloc::vec::Vec;
use core::sync::atomic::Ordering;

use ftrace_core::format::TraceEventFormat;
use ftrace_core::platform::Reclaim;
use ftrace_tracers::output::graph::GraphCpuState;
use ftrace_tracers::output::header::{HeaderInfo, LatencyInfo};
use ftrace_tracers::output::trace_file::{OutputStyle, Overruns, TraceWriter};
use ftrace_tracers::output::{OutputEnv, TaskNames, TextToBytes};
use ftrace_tracers::ringbuf::BufferedEvents;
use ftrace_tracers::{TraceIter, TraceOptions, trace_event};

use super::snapshot::Allocation;
use super::{Control, Platform, TraceArray};
use crate::backend::Reader;

/// Task names as the platform knows them.
struct Names<'a, P>(&'a P);

impl<P: Platform> TaskNames for Names<'_, P> {
    fn comm(&self, pid: i32) -> Option<&str> {
        self.0.comm(pid)
    }
}

/// Every event of the buffers, copied out (no buffer: none).
fn snapshot<P: Platform, const CPUS: usize>(a: &TraceArray<P, CPUS>) -> BufferedEvents {
    a.with_buffer(BufferedEvents::snapshot).unwrap_or_default()
}

/// Adds the pids of the events in the buffers to `saved_cmdlines` (up to its size; idle,
/// pid 0, is never saved).
pub(super) fn save_cmdlines<P: Platform, const CPUS: usize>(
    a: &TraceArray<P, CPUS>,
    c: &mut Control,
) {
    let events = snapshot(a);
    let mut lists = events.lists();
    let mut iter = TraceIter::new(&mut lists, None);
    while let Some(ev) = iter.next_event() {
        let pid = ev.pid();
        if pid != 0 && c.cmdlines.len() < c.cmdlines_max {
            c.cmdlines.insert(pid);
        }
    }
}

fn style<P: Platform, const CPUS: usize>(c: &Control) -> OutputStyle {
    let t = c.registry.current();
    t.output_style(c.tracer_flags[TraceArray::<P, CPUS>::kind(t.name()) as usize])
}

fn env<'a, P: Platform, const CPUS: usize>(
    a: &'a TraceArray<P, CPUS>,
    names: &'a Names<'a, P>,
) -> OutputEnv<'a> {
    let mut env = OutputEnv::new(a.platform().symbols(), names, a.nr_cpus() as u32);
    env.options = TraceOptions::from_bits_retain(a.options.load(Ordering::Relaxed));
    env.clock_unit = a.clock_unit();
    env
}

/// A ring's events copied out with its `entries-in-buffer/entries-written` pair (no ring:
/// none).
#[derive(Default)]
pub(super) struct Copied {
    events: BufferedEvents,
    entries: u64,
    written: u64,
}

impl Copied {
    /// Copies `rb` without consuming it.
    pub(super) fn of<Pg: ftrace_ringbuf::PageProvider + Clone>(
        rb: &ftrace_ringbuf::RingBuffer<Pg>,
    ) -> Self {
        let (entries, written) = rb.entries_and_written();
        Copied {
            events: BufferedEvents::snapshot(rb),
            entries,
            written,
        }
    }
}

/// Which file a text is for: `trace` (the main ring) or `snapshot` (the snapshot ring, whose
/// header is the snapshot help when it holds nothing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TextKind {
    Trace,
    Snapshot(Allocation),
}

/// The `trace` file of one CPU or all: header and every event, as the kernel prints them.
pub(super) fn trace_text<P: Platform, const CPUS: usize>(
    a: &'static TraceArray<P, CPUS>,
    c: &Control,
    cpu: Option<u32>,
) -> Vec<u8> {
    let copied = a.with_buffer(Copied::of).unwrap_or_default();
    text(a, c, copied, cpu, TextKind::Trace)
}

/// The text of `copied` as `trace` (or `snapshot`) prints it for one CPU or all.
pub(super) fn text<P: Platform, const CPUS: usize>(
    a: &'static TraceArray<P, CPUS>,
    c: &Control,
    copied: Copied,
    cpu: Option<u32>,
    kind: TextKind,
) -> Vec<u8> {
    let Copied {
        events,
        entries,
        written,
    } = copied;
    let nr = a.nr_cpus() as u32;
    let mut lists = events.lists();
    let info = HeaderInfo {
        tracer: c.registry.current().name(),
        entries,
        written,
        online_cpus: nr,
        latency: LatencyInfo::default(),
    };
    let mut state = vec![GraphCpuState::INIT; nr as usize];
    // Lost events turn on the buffer-started notices (`TRACE_FILE_ANNOTATE`).
    let mut w = TraceWriter::new(
        style::<P, CPUS>(c),
        &mut state,
        Overruns::of(written.saturating_sub(entries)),
    );
    let mut iter = TraceIter::new(&mut lists, cpu);
    let names = Names(a.platform());
    let env = env(a, &names);
    let mut out = Vec::new();
    let empty = iter.is_empty();
    match kind {
        // `s_show`: an empty snapshot prints the tracer line and the help, not the header.
        TextKind::Snapshot(allocation) if empty => {
            out.extend_from_slice(b"# tracer: ");
            out.extend_from_slice(info.tracer.as_bytes());
            out.extend_from_slice(b"\n#\n");
            out.extend_from_slice(super::snapshot::help(allocation, cpu).as_bytes());
        }
        _ => {
            // Writing into a Vec cannot fail; a formatter error would only truncate the text.
            let _ = w.write_header(&mut TextToBytes(&mut out), &env, &info, empty);
        }
    }
    let _ = write_events(&mut w, &mut out, &env, &mut iter, &a.event_formats());
    out
}

/// Every event of `iter`: a registered tracepoint's through its format, the rest as the
/// tracers print them.
fn write_events(
    w: &mut TraceWriter<'_>,
    out: &mut Vec<u8>,
    env: &OutputEnv<'_>,
    iter: &mut TraceIter<'_, '_>,
    formats: &[TraceEventFormat],
) -> core::fmt::Result {
    if formats.is_empty() {
        return w.write_events(out, env, iter);
    }
    while let Some(ev) = iter.next_event() {
        match trace_event::find(formats, &ev) {
            Some(f) => trace_event::write_event_line(&mut TextToBytes(out), env, &ev, f)?,
            None => w.write_line(out, env, iter, &ev)?,
        }
    }
    Ok(())
}

/// `trace_pipe`: each read consumes what the buffers (of one CPU or all) hold and prints it,
/// merged by time stamp, with the lost-events notices; the graph printer's state carries
/// over from read to read.
pub(super) struct PipeReader<P: Platform, const CPUS: usize> {
    array: &'static TraceArray<P, CPUS>,
    cpu: Option<u32>,
    graph: Vec<GraphCpuState>,
}

impl<P: Platform, const CPUS: usize> PipeReader<P, CPUS> {
    pub(super) fn new(array: &'static TraceArray<P, CPUS>, cpu: Option<u32>) -> Self {
        let graph = vec![GraphCpuState::INIT; array.nr_cpus()];
        PipeReader { array, cpu, graph }
    }
}

impl<P: Platform, const CPUS: usize> Reader for PipeReader<P, CPUS> {
    fn next_chunk(&mut self, out: &mut Vec<u8>) -> bool {
        let a = self.array;
        let cpu = self.cpu.map(|c| c as usize);
        let events = a
            .with_buffer(|rb| BufferedEvents::drain_cpu(rb, cpu))
            .unwrap_or_default();
        if events.is_empty() {
            return false;
        }
        let style = style::<P, CPUS>(&a.control());
        let mut lists = events.lists();
        let mut w = TraceWriter::new(style, &mut self.graph, Overruns::None);
        let mut iter = TraceIter::new(&mut lists, None);
        let names = Names(a.platform());
        let _ = write_events(&mut w, out, &env(a, &names), &mut iter, &a.event_formats());
        true
    }
}

/// `trace_pipe_raw`: one kernel-format sub-buffer page per chunk, consumed.
pub(super) struct RawReader<P: Platform, const CPUS: usize> {
    array: &'static TraceArray<P, CPUS>,
    cpu: usize,
}

impl<P: Platform, const CPUS: usize> RawReader<P, CPUS> {
    pub(super) fn new(array: &'static TraceArray<P, CPUS>, cpu: usize) -> Self {
        RawReader { array, cpu }
    }
}

impl<P: Platform, const CPUS: usize> Reader for RawReader<P, CPUS> {
    fn next_chunk(&mut self, out: &mut Vec<u8>) -> bool {
        let _guard = self.array.reclaim().pin();
        self.array
            .with_buffer(|rb| {
                let buf = rb.cpu(self.cpu)?;
                let mut page = buf.alloc_read_page().ok()?;
                buf.consumer().read_page(&mut page)?;
                out.extend_from_slice(page.as_bytes());
                Some(())
            })
            .flatten()
            .is_some()
    }
}
