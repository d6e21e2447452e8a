//! function_graph output: the C-like call graph (`trace_functions_graph.c`).
//!
//! The printer keeps, per CPU, what the kernel keeps per open file: the last pid seen (for the
//! context-switch banner), the current depth (for comment indentation), the depth of an
//! interrupt being hidden (`funcgraph-irqs` off), and the function entered at each depth (so a
//! return whose entry was lost prints its name). An entry immediately followed, on the same
//! CPU, by its own return (same pid, same function) is a leaf and prints as `func();`.
//!
//! Invariant: every line starts with the same prologue (abstime, CPU, proc, latency flags) and
//! the duration column is either a duration, a fill of the same width, or absent, so columns
//! line up exactly as in the kernel's output.

use core::fmt::{self, Write};

use bitflags::bitflags;

use super::context::write_lat_fmt;
use super::{OutputEnv, StripNewline, comm_of, digits, trace_find_mark, write_graph_duration};
use crate::event::{Entry, EventRef, GraphReturnRecord};
use crate::iter::TraceIter;
use crate::options::{TraceOptions, TracerOpt};
use crate::output::entries::write_trace_body;

bitflags! {
    /// function_graph's own options (`TRACE_GRAPH_PRINT_*`), Linux 6.12 values.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct GraphFlags: u32 {
        /// `funcgraph-overrun`: print the overrun count after each return.
        const OVERRUN = 0x1;
        /// `funcgraph-cpu`: the CPU column.
        const CPU = 0x2;
        /// `funcgraph-overhead`: duration marks.
        const OVERHEAD = 0x4;
        /// `funcgraph-proc`: the task column.
        const PROC = 0x8;
        /// `funcgraph-duration`: the duration column.
        const DURATION = 0x10;
        /// `funcgraph-abstime`: the absolute time column.
        const ABS_TIME = 0x20;
        /// Relative time (latency tracers' graphs; no option file).
        const REL_TIME = 0x40;
        /// `funcgraph-irqs`: show functions run in interrupts.
        const IRQS = 0x80;
        /// `funcgraph-tail`: name the function at its closing brace.
        const TAIL = 0x100;
        /// `sleep-time`: count time scheduled out in durations.
        const SLEEP_TIME = 0x200;
        /// `graph-time`: the profiler counts time in children.
        const GRAPH_TIME = 0x400;
        /// `funcgraph-retval`: print each function's return value.
        const RETVAL = 0x800;
        /// `funcgraph-retval-hex`: print return values in hexadecimal only.
        const RETVAL_HEX = 0x1000;
    }
}

impl GraphFlags {
    /// The defaults: cpu, overhead, duration, irqs, sleep-time, graph-time.
    pub const DEFAULT: GraphFlags = GraphFlags::CPU
        .union(GraphFlags::OVERHEAD)
        .union(GraphFlags::DURATION)
        .union(GraphFlags::IRQS)
        .union(GraphFlags::SLEEP_TIME)
        .union(GraphFlags::GRAPH_TIME);

    /// The option files, in the order `trace_options` lists them (a kernel without the
    /// function profiler, as Debian's 6.12, has no `graph-time`).
    pub const OPTS: [TracerOpt; 9] = [
        TracerOpt {
            name: "funcgraph-overrun",
            bit: 0x1,
        },
        TracerOpt {
            name: "funcgraph-cpu",
            bit: 0x2,
        },
        TracerOpt {
            name: "funcgraph-overhead",
            bit: 0x4,
        },
        TracerOpt {
            name: "funcgraph-proc",
            bit: 0x8,
        },
        TracerOpt {
            name: "funcgraph-duration",
            bit: 0x10,
        },
        TracerOpt {
            name: "funcgraph-abstime",
            bit: 0x20,
        },
        TracerOpt {
            name: "funcgraph-irqs",
            bit: 0x80,
        },
        TracerOpt {
            name: "funcgraph-tail",
            bit: 0x100,
        },
        TracerOpt {
            name: "sleep-time",
            bit: 0x200,
        },
    ];

    /// [`GraphFlags::OPTS`] plus `graph-time`, for builds with the function profiler.
    pub const OPTS_WITH_PROFILER: [TracerOpt; 10] = Self::opts_with(&Self::OPTS, &[]);

    /// [`GraphFlags::OPTS`] with `funcgraph-retval` and `funcgraph-retval-hex` after
    /// `funcgraph-tail`, as a kernel with `CONFIG_FUNCTION_GRAPH_RETVAL` lists them.
    pub const OPTS_WITH_RETVAL: [TracerOpt; 11] = Self::opts_with(&Self::OPTS, &Self::RETVAL_OPTS);

    /// [`GraphFlags::OPTS_WITH_RETVAL`] plus `graph-time`.
    pub const OPTS_WITH_RETVAL_AND_PROFILER: [TracerOpt; 12] =
        Self::opts_with(&Self::OPTS_WITH_RETVAL, &[]);

    const RETVAL_OPTS: [TracerOpt; 2] = [
        TracerOpt {
            name: "funcgraph-retval",
            bit: 0x800,
        },
        TracerOpt {
            name: "funcgraph-retval-hex",
            bit: 0x1000,
        },
    ];

    /// `base` with `insert` placed before `sleep-time` (the last entry of `base` without the
    /// profiler) and, when `M` leaves room, `graph-time` at the end.
    const fn opts_with<const M: usize>(base: &[TracerOpt], insert: &[TracerOpt]) -> [TracerOpt; M] {
        let mut all = [TracerOpt {
            name: "graph-time",
            bit: 0x400,
        }; M];
        let mut i = 0;
        let mut o = 0;
        while i < base.len() {
            if base[i].bit == 0x200 {
                let mut j = 0;
                while j < insert.len() {
                    all[o] = insert[j];
                    o += 1;
                    j += 1;
                }
            }
            all[o] = base[i];
            o += 1;
            i += 1;
        }
        all
    }
}

/// `FTRACE_RETFUNC_DEPTH`: the deepest call a shadow stack holds.
pub const FTRACE_RETFUNC_DEPTH: usize = 50;

/// `TRACE_GRAPH_PROCINFO_LENGTH`: the task column's width.
const PROCINFO_LENGTH: usize = 14;

/// What the graph printer remembers about one CPU between lines.
#[derive(Clone, Copy, Debug)]
pub struct GraphCpuState {
    last_pid: i32,
    depth: i32,
    depth_irq: i32,
    enter_funcs: [u64; FTRACE_RETFUNC_DEPTH],
}

impl GraphCpuState {
    /// The state of a freshly opened file.
    pub const INIT: GraphCpuState = GraphCpuState {
        last_pid: -1,
        depth: 0,
        depth_irq: -1,
        enter_funcs: [0; FTRACE_RETFUNC_DEPTH],
    };
}

impl Default for GraphCpuState {
    fn default() -> Self {
        Self::INIT
    }
}

/// Whether a printer handled an event or leaves it to the default printer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineResult {
    /// Printed (possibly as nothing).
    Handled,
    /// Not this printer's event (function and stack events under function_graph).
    Unhandled,
}

/// The function_graph printer over caller-provided per-CPU state (no allocation).
pub struct GraphPrinter<'s> {
    cpus: &'s mut [GraphCpuState],
    flags: GraphFlags,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Fill {
    None,
    Full,
    Start,
    End,
}

/// Which line a return value goes on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Brace {
    /// A leaf: `func(); /* = v */`.
    Leaf,
    /// A closing brace: `} /* func = v */`.
    Closing,
}

/// `MAX_ERRNO`: the largest errno a negative return value encodes.
const MAX_ERRNO: u64 = 4095;

/// The value as a negative errno (`IS_ERR_VALUE`), taking a set bit 31 with a clear upper half
/// as a sign-extended `int`; `None` if it is no errno.
fn errno_value(retval: u64) -> Option<i64> {
    let v = if retval & (1 << 31) != 0 && retval >> 32 == 0 {
        retval as u32 as i32 as i64
    } else {
        retval as i64
    };
    (v as u64 >= MAX_ERRNO.wrapping_neg()).then_some(v)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum IrqMark {
    Entry,
    Return,
}

impl<'s> GraphPrinter<'s> {
    /// A printer with `flags`, using `cpus[n]` for CPU `n` (reset to [`GraphCpuState::INIT`]).
    pub fn new(cpus: &'s mut [GraphCpuState], flags: GraphFlags) -> Self {
        cpus.iter_mut().for_each(|c| *c = GraphCpuState::INIT);
        GraphPrinter { cpus, flags }
    }

    /// The flags this printer uses.
    pub fn flags(&self) -> GraphFlags {
        self.flags
    }

    fn state(&mut self, cpu: u32) -> Option<&mut GraphCpuState> {
        self.cpus.get_mut(cpu as usize)
    }

    /// `print_graph_function_flags`: prints `ev` (already consumed from `iter`); a leaf's
    /// return is consumed from `iter` too.
    pub fn print_line(
        &mut self,
        out: &mut dyn Write,
        env: &OutputEnv<'_>,
        iter: &mut TraceIter<'_, '_>,
        ev: &EventRef<'_>,
    ) -> Result<LineResult, fmt::Error> {
        match ev.entry() {
            Entry::GraphEntry(g) => {
                self.print_entry(out, env, iter, ev, g.func, g.depth)?;
                Ok(LineResult::Handled)
            }
            Entry::GraphReturn(r) => {
                self.print_return(out, env, ev, &r)?;
                Ok(LineResult::Handled)
            }
            // Function and stack events are not shown as comments.
            Entry::Function(_) | Entry::KernelStack(_) => Ok(LineResult::Unhandled),
            Entry::Other(_) | Entry::Truncated => Ok(LineResult::Unhandled),
            _ => {
                self.print_comment(out, env, ev)?;
                Ok(LineResult::Handled)
            }
        }
    }

    fn in_irq_text(env: &OutputEnv<'_>, addr: u64) -> bool {
        env.irq_text.is_some_and(|(s, e)| addr >= s && addr < e)
    }

    fn write_cpu(out: &mut dyn Write, env: &OutputEnv<'_>, cpu: u32) -> fmt::Result {
        let width = digits(env.nr_cpu_ids.saturating_sub(1) as u64);
        write!(out, " {cpu:width$}) ")
    }

    fn write_proc(out: &mut dyn Write, env: &OutputEnv<'_>, pid: i32) -> fmt::Result {
        let comm = comm_of(env.tasks, pid);
        // comm[7] = '\0': at most 7 bytes (on a char boundary).
        let mut cut = comm.len().min(7);
        while !comm.is_char_boundary(cut) {
            cut -= 1;
        }
        let comm = &comm[..cut];
        let len = comm.len() + 1 + digits(pid.unsigned_abs() as u64) + usize::from(pid < 0);
        let spaces = PROCINFO_LENGTH.saturating_sub(len);
        for _ in 0..spaces / 2 {
            out.write_char(' ')?;
        }
        write!(out, "{comm}-{pid}")?;
        for _ in 0..spaces - spaces / 2 {
            out.write_char(' ')?;
        }
        Ok(())
    }

    fn write_abs_time(out: &mut dyn Write, ts: u64) -> fmt::Result {
        write!(
            out,
            "{:5}.{:06} |  ",
            ts / 1_000_000_000,
            (ts % 1_000_000_000) / 1000
        )
    }

    fn write_rel_time(out: &mut dyn Write, env: &OutputEnv<'_>, ts: u64) -> fmt::Result {
        write!(out, "{:9} us |  ", ts.wrapping_sub(env.time_start) / 1000)
    }

    /// The columns before the duration: abstime, reltime, CPU, proc, latency flags.
    fn write_columns(
        &self,
        out: &mut dyn Write,
        env: &OutputEnv<'_>,
        ev: &EventRef<'_>,
    ) -> fmt::Result {
        if self.flags.contains(GraphFlags::ABS_TIME) {
            Self::write_abs_time(out, ev.ts)?;
        }
        if self.flags.contains(GraphFlags::REL_TIME) {
            Self::write_rel_time(out, env, ev.ts)?;
        }
        if self.flags.contains(GraphFlags::CPU) {
            Self::write_cpu(out, env, ev.cpu)?;
        }
        if self.flags.contains(GraphFlags::PROC) {
            Self::write_proc(out, env, ev.pid())?;
            out.write_str(" | ")?;
        }
        if env.options.contains(TraceOptions::LATENCY_FORMAT) {
            out.write_char(' ')?;
            write_lat_fmt(out, &ev.header().unwrap_or_default())?;
            out.write_str(" | ")?;
        }
        Ok(())
    }

    fn write_duration(
        &self,
        out: &mut dyn Write,
        env: &OutputEnv<'_>,
        duration: u64,
        fill: Fill,
    ) -> fmt::Result {
        if !self.flags.contains(GraphFlags::DURATION)
            || !env.options.contains(TraceOptions::CONTEXT_INFO)
        {
            return Ok(());
        }
        match fill {
            Fill::Full => return out.write_str("              |  "),
            Fill::Start => return out.write_str("  "),
            Fill::End => return out.write_str(" |"),
            Fill::None => {}
        }
        if self.flags.contains(GraphFlags::OVERHEAD) {
            out.write_char(trace_find_mark(duration))?;
            out.write_char(' ')?;
        } else {
            out.write_str("  ")?;
        }
        write_graph_duration(out, duration)?;
        out.write_str("|  ")
    }

    /// `verif_pid`: the context-switch banner when this CPU's pid changes.
    fn verif_pid(
        &mut self,
        out: &mut dyn Write,
        env: &OutputEnv<'_>,
        ev: &EventRef<'_>,
    ) -> fmt::Result {
        let pid = ev.pid();
        let Some(st) = self.state(ev.cpu) else {
            return Ok(());
        };
        if st.last_pid == pid {
            return Ok(());
        }
        let prev = st.last_pid;
        st.last_pid = pid;
        if prev == -1 {
            return Ok(());
        }
        out.write_str(" ------------------------------------------\n")?;
        Self::write_cpu(out, env, ev.cpu)?;
        Self::write_proc(out, env, prev)?;
        out.write_str(" => ")?;
        Self::write_proc(out, env, pid)?;
        out.write_str("\n ------------------------------------------\n\n")
    }

    /// `print_graph_irq`: the `==========>` / `<==========` marker line.
    fn print_irq_mark(
        &self,
        out: &mut dyn Write,
        env: &OutputEnv<'_>,
        ev: &EventRef<'_>,
        addr: u64,
        mark: IrqMark,
    ) -> fmt::Result {
        if !Self::in_irq_text(env, addr) {
            return Ok(());
        }
        if env.options.contains(TraceOptions::CONTEXT_INFO) {
            self.write_columns(out, env, ev)?;
        }
        self.write_duration(out, env, 0, Fill::Start)?;
        out.write_str(match mark {
            IrqMark::Entry => "==========>",
            IrqMark::Return => "<==========",
        })?;
        self.write_duration(out, env, 0, Fill::End)?;
        out.write_char('\n')
    }

    fn prologue(
        &mut self,
        out: &mut dyn Write,
        env: &OutputEnv<'_>,
        ev: &EventRef<'_>,
        irq: Option<u64>,
    ) -> fmt::Result {
        self.verif_pid(out, env, ev)?;
        if let Some(addr) = irq {
            self.print_irq_mark(out, env, ev, addr, IrqMark::Entry)?;
        }
        if !env.options.contains(TraceOptions::CONTEXT_INFO) {
            return Ok(());
        }
        self.write_columns(out, env, ev)
    }

    fn indent(out: &mut dyn Write, depth: i32) -> fmt::Result {
        for _ in 0..depth.max(0) * 2 {
            out.write_char(' ')?;
        }
        Ok(())
    }

    fn print_entry(
        &mut self,
        out: &mut dyn Write,
        env: &OutputEnv<'_>,
        iter: &mut TraceIter<'_, '_>,
        ev: &EventRef<'_>,
        func: u64,
        depth: i32,
    ) -> fmt::Result {
        // check_irq_entry: hide interrupts when funcgraph-irqs is off.
        if !self.flags.contains(GraphFlags::IRQS) {
            let in_irq = Self::in_irq_text(env, func);
            if let Some(st) = self.state(ev.cpu) {
                if st.depth_irq >= 0 {
                    return Ok(());
                }
                if in_irq {
                    st.depth_irq = depth;
                    return Ok(());
                }
            }
        }
        self.prologue(out, env, ev, Some(func))?;

        // get_return_for_leaf: the next event of this CPU is this call's return.
        let leaf = match iter.peek_cpu(ev.cpu) {
            Some(next) => match next.entry() {
                Entry::GraphReturn(r) if next.pid() == ev.pid() && r.func == func => Some(r),
                _ => None,
            },
            None => None,
        };
        let valid_depth = depth >= 0 && (depth as usize) < FTRACE_RETFUNC_DEPTH;
        if let Some(r) = leaf {
            iter.advance_cpu(ev.cpu);
            if let Some(st) = self.state(ev.cpu) {
                st.depth = depth - 1;
                if valid_depth {
                    st.enter_funcs[depth as usize] = 0;
                }
            }
            let duration = r.rettime.wrapping_sub(r.calltime);
            self.write_duration(out, env, duration, Fill::None)?;
            Self::indent(out, depth)?;
            match self.shown_retval(&r) {
                Some(retval) => self.write_retval(out, env, func, retval, Brace::Leaf)?,
                None => {
                    super::write_sym(out, env.symbols, func)?;
                    out.write_str("();\n")?;
                }
            }
            self.print_irq_mark(out, env, ev, r.func, IrqMark::Return)
        } else {
            if let Some(st) = self.state(ev.cpu) {
                st.depth = depth;
                if valid_depth {
                    st.enter_funcs[depth as usize] = func;
                }
            }
            self.write_duration(out, env, 0, Fill::Full)?;
            Self::indent(out, depth)?;
            super::write_sym(out, env.symbols, func)?;
            out.write_str("() {\n")
        }
    }

    /// The return value to print: `funcgraph-retval` is set and the record has one.
    fn shown_retval(&self, r: &GraphReturnRecord) -> Option<u64> {
        r.retval.filter(|_| self.flags.contains(GraphFlags::RETVAL))
    }

    /// `print_graph_retval`: `func(); /* = 0x3 */` or `} /* func = -2 */`. A value that is a
    /// negative errno (as `unsigned long`, or as a sign-extended 32-bit `int`) prints in
    /// decimal; anything else, and everything under `funcgraph-retval-hex`, as `0x%lx`.
    fn write_retval(
        &self,
        out: &mut dyn Write,
        env: &OutputEnv<'_>,
        func: u64,
        retval: u64,
        brace: Brace,
    ) -> fmt::Result {
        let hex = self.flags.contains(GraphFlags::RETVAL_HEX);
        let err_code = if retval == 0 || hex {
            None
        } else {
            errno_value(retval)
        };
        match brace {
            Brace::Leaf => {
                super::write_sym(out, env.symbols, func)?;
                out.write_str("(); /* = ")?;
            }
            Brace::Closing => {
                out.write_str("} /* ")?;
                super::write_sym(out, env.symbols, func)?;
                out.write_str(" = ")?;
            }
        }
        match err_code {
            Some(e) => writeln!(out, "{e} */"),
            None => writeln!(out, "{retval:#x} */"),
        }
    }

    fn print_return(
        &mut self,
        out: &mut dyn Write,
        env: &OutputEnv<'_>,
        ev: &EventRef<'_>,
        r: &GraphReturnRecord,
    ) -> fmt::Result {
        let (func, depth, overrun) = (r.func, r.depth, r.overrun);
        let duration = r.rettime.wrapping_sub(r.calltime);
        // check_irq_return.
        if !self.flags.contains(GraphFlags::IRQS) {
            if let Some(st) = self.state(ev.cpu) {
                if st.depth_irq != -1 {
                    if st.depth_irq >= depth {
                        st.depth_irq = -1;
                    }
                    return Ok(());
                }
            }
        }
        let mut func_match = true;
        if let Some(st) = self.state(ev.cpu) {
            st.depth = depth - 1;
            if depth >= 0 && (depth as usize) < FTRACE_RETFUNC_DEPTH {
                func_match = st.enter_funcs[depth as usize] == func;
                st.enter_funcs[depth as usize] = 0;
            }
        }
        self.prologue(out, env, ev, None)?;
        self.write_duration(out, env, duration, Fill::None)?;
        Self::indent(out, depth)?;
        if let Some(retval) = self.shown_retval(r) {
            self.write_retval(out, env, func, retval, Brace::Closing)?;
        } else if func_match && !self.flags.contains(GraphFlags::TAIL) {
            out.write_str("}\n")?;
        } else {
            out.write_str("} /* ")?;
            super::write_sym(out, env.symbols, func)?;
            out.write_str(" */\n")?;
        }
        if self.flags.contains(GraphFlags::OVERRUN) {
            writeln!(out, " (Overruns: {overrun})")?;
        }
        self.print_irq_mark(out, env, ev, func, IrqMark::Return)
    }

    /// `print_graph_comment`: other events as `/* message */` at the current depth.
    fn print_comment(
        &mut self,
        out: &mut dyn Write,
        env: &OutputEnv<'_>,
        ev: &EventRef<'_>,
    ) -> fmt::Result {
        let depth = self.state(ev.cpu).map_or(0, |s| s.depth);
        self.prologue(out, env, ev, None)?;
        self.write_duration(out, env, 0, Fill::Full)?;
        if depth > 0 {
            for _ in 0..(depth + 1) * 2 {
                out.write_char(' ')?;
            }
        }
        out.write_str("/* ")?;
        {
            let mut w = StripNewline::new(out);
            match ev.entry() {
                Entry::Print { text, .. } => super::write_bytes_lossy(&mut w, text)?,
                _ => write_trace_body(&mut w, env, ev)?,
            }
        }
        out.write_str(" */\n")
    }
}
