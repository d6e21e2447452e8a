//! The reader loop of the `trace`, `trace_pipe` and `per_cpu/cpuN/trace` files
//! (`s_show` / `print_trace_line`).
//!
//! [`TraceWriter`] owns the state one open file keeps between lines (the graph printer's
//! per-CPU state, the CPUs already announced by `annotate`) and prints each event in the mode
//! the options select: the tracer's own printer first (function_graph), then `bin`, `hex`,
//! `raw`, or the default context prefix and body.
//!
//! Invariant: the loop consumes every event exactly once (a function_graph leaf consumes its
//! return too), and lost-event notices come before the first event after the loss.

use core::fmt::{self, Write};

use super::context::{write_context, write_hex_context, write_lat_context, write_raw_context};
use super::entries::{write_bin_body, write_hex_body, write_raw_body, write_trace_body};
use super::graph::{GraphCpuState, GraphFlags, GraphPrinter, LineResult};
use super::header::{HeaderInfo, write_default_header, write_graph_header, write_tracer_line};
use super::{ByteSink, LineBuf, OutputEnv, TextToBytes, write_bytes_lossy};
use crate::event::{Entry, EventRef, Missed};
use crate::iter::TraceIter;
use crate::options::TraceOptions;

/// How the current tracer prints its lines and header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputStyle {
    /// The default header and printers (nop, function).
    Default,
    /// function_graph's header and call-graph printer, with its flags.
    Graph(GraphFlags),
}

/// The CPUs `annotate` has announced (`iter->started`), for up to 256 CPUs.
#[derive(Clone, Copy, Debug, Default)]
struct CpuSet([u64; 4]);

impl CpuSet {
    fn test_and_set(&mut self, cpu: u32) -> bool {
        let (w, b) = ((cpu / 64) as usize, cpu % 64);
        match self.0.get_mut(w) {
            Some(word) => {
                let was = *word & (1 << b) != 0;
                *word |= 1 << b;
                was
            }
            None => true,
        }
    }
}

/// Whether a buffer lost events before the `trace` file was opened: the kernel then sets
/// `TRACE_FILE_ANNOTATE` (`ring_buffer_overruns()` is non-zero), so that the `annotate` option
/// marks where each CPU's surviving events start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overruns {
    /// No event was lost: no marks.
    None,
    /// Events were overwritten: with `annotate` set, each CPU's first event after the first two
    /// lines is preceded by `##### CPU N buffer started ####`.
    Lost,
}

impl Overruns {
    /// [`Overruns::Lost`] when `lost` (events overwritten) is non-zero.
    pub const fn of(lost: u64) -> Overruns {
        if lost > 0 {
            Overruns::Lost
        } else {
            Overruns::None
        }
    }
}

/// One open trace file: prints headers and lines.
pub struct TraceWriter<'s> {
    style: OutputStyle,
    graph: GraphPrinter<'s>,
    annotate: bool,
    started: CpuSet,
}

impl<'s> TraceWriter<'s> {
    /// A writer for `style`. `graph_state` needs one slot per CPU (function_graph only; may be
    /// empty otherwise). `overruns` says whether any buffer lost events (see [`Overruns`]).
    pub fn new(
        style: OutputStyle,
        graph_state: &'s mut [GraphCpuState],
        overruns: Overruns,
    ) -> Self {
        let flags = match style {
            OutputStyle::Graph(f) => f,
            OutputStyle::Default => GraphFlags::DEFAULT,
        };
        TraceWriter {
            style,
            graph: GraphPrinter::new(graph_state, flags),
            annotate: overruns == Overruns::Lost,
            started: CpuSet::default(),
        }
    }

    /// The `trace` file's header: `# tracer:` then the tracer's header. `empty` says whether
    /// there is no event to read.
    pub fn write_header(
        &self,
        out: &mut dyn Write,
        env: &OutputEnv<'_>,
        info: &HeaderInfo<'_>,
        empty: bool,
    ) -> fmt::Result {
        write_tracer_line(out, info.tracer)?;
        match self.style {
            OutputStyle::Default => write_default_header(out, env, info, empty),
            OutputStyle::Graph(flags) => write_graph_header(out, env, info, flags, empty),
        }
    }

    /// Prints every remaining event of `iter` (the body of `trace` / `trace_pipe`).
    pub fn write_events(
        &mut self,
        out: &mut dyn ByteSink,
        env: &OutputEnv<'_>,
        iter: &mut TraceIter<'_, '_>,
    ) -> fmt::Result {
        let mut buf = LineBuf::new(out);
        while let Some(ev) = iter.next_event() {
            self.write_line_buffered(&mut buf, env, iter, &ev)?;
        }
        buf.flush()
    }

    /// The whole `trace` file: header (when `info` is given) and every event.
    pub fn write_trace(
        &mut self,
        out: &mut dyn ByteSink,
        env: &OutputEnv<'_>,
        info: Option<&HeaderInfo<'_>>,
        iter: &mut TraceIter<'_, '_>,
    ) -> fmt::Result {
        if let Some(info) = info {
            let empty = iter.is_empty();
            self.write_header(&mut TextToBytes(out), env, info, empty)?;
        }
        self.write_events(out, env, iter)
    }

    /// `print_trace_line` for one event already taken from `iter`.
    pub fn write_line(
        &mut self,
        out: &mut dyn ByteSink,
        env: &OutputEnv<'_>,
        iter: &mut TraceIter<'_, '_>,
        ev: &EventRef<'_>,
    ) -> fmt::Result {
        let mut buf = LineBuf::new(out);
        self.write_line_buffered(&mut buf, env, iter, ev)?;
        buf.flush()
    }

    fn write_line_buffered(
        &mut self,
        text: &mut LineBuf<'_>,
        env: &OutputEnv<'_>,
        iter: &mut TraceIter<'_, '_>,
        ev: &EventRef<'_>,
    ) -> fmt::Result {
        let o = env.options;
        match ev.missed {
            Missed::None => {}
            Missed::Unknown => writeln!(text, "CPU:{} [LOST EVENTS]", ev.cpu)?,
            Missed::Count(n) => writeln!(text, "CPU:{} [LOST {n} EVENTS]", ev.cpu)?,
        }
        let entry = ev.entry();
        let is_graph_event = matches!(entry, Entry::GraphEntry(_) | Entry::GraphReturn(_));
        if matches!(self.style, OutputStyle::Graph(_)) || is_graph_event {
            let r = self.graph.print_line(text, env, iter, ev)?;
            if r == LineResult::Handled {
                return Ok(());
            }
        }
        if let Entry::Print { text: msg, .. } = entry {
            if o.contains(TraceOptions::TRACE_PRINTK) && o.contains(TraceOptions::PRINTK_MSG_ONLY) {
                return write_bytes_lossy(text, msg);
            }
        }
        let ctx = o.contains(TraceOptions::CONTEXT_INFO);
        if o.contains(TraceOptions::BIN) {
            let out = text.sink()?;
            if ctx {
                out.put(&ev.pid().to_le_bytes())?;
                out.put(&(ev.cpu as i32).to_le_bytes())?;
                out.put(&ev.ts.to_le_bytes())?;
            }
            return write_bin_body(out, ev);
        }
        if o.contains(TraceOptions::HEX) {
            if ctx {
                write_hex_context(text, ev)?;
            }
            write_hex_body(text, ev)?;
            return text.write_char('\n');
        }
        if o.contains(TraceOptions::RAW) {
            if ctx {
                write_raw_context(text, ev)?;
            }
            return write_raw_body(text, ev);
        }
        // print_trace_fmt
        let idx = iter.index().saturating_sub(1);
        if o.contains(TraceOptions::ANNOTATE)
            && self.annotate
            && !self.started.test_and_set(ev.cpu)
            && idx > 1
        {
            writeln!(text, "##### CPU {} buffer started ####", ev.cpu)?;
        }
        if ctx {
            if o.contains(TraceOptions::LATENCY_FORMAT) {
                let next_ts = iter.peek_next().map_or(ev.ts, |n| n.ts);
                write_lat_context(text, env, ev, next_ts, idx)?;
            } else {
                write_context(text, env, ev)?;
            }
        }
        write_trace_body(text, env, ev)
    }
}
