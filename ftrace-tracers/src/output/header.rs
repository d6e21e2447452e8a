//! The headers of the `trace` file: the tracer line, the entry counts, the column legends,
//! the latency-trace block and function_graph's column titles.
//!
//! Invariant: headers are printed from [`HeaderInfo`] and the options alone; the strings,
//! trailing spaces included, are Linux 6.12's (`print_func_help_header_irq`,
//! `print_lat_help_header`, `print_trace_header`, `__print_graph_headers_flags`).

use core::fmt::{self, Write};

use super::OutputEnv;
use super::write_ip_sym;
use crate::options::TraceOptions;
use crate::output::graph::GraphFlags;

/// What the headers print besides options: counts and the latency block's fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeaderInfo<'a> {
    /// The current tracer's name.
    pub tracer: &'a str,
    /// Events now in the buffers (all CPUs: the per-CPU files repeat the global totals).
    pub entries: u64,
    /// Events written: `entries` + overruns.
    pub written: u64,
    /// `num_online_cpus()` (`#P:`).
    pub online_cpus: u32,
    /// The fields only the latency header prints.
    pub latency: LatencyInfo<'a>,
}

/// The latency header's fields (`print_trace_header`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LatencyInfo<'a> {
    /// `UTS_RELEASE` (`6.12.117+deb12-amd64`).
    pub uts_release: &'a str,
    /// The preemption model word after `M:` (`desktop`, `server`, `preempt`).
    pub preempt_model: &'a str,
    /// The buffer's `cpu` field (`CPU#`).
    pub cpu: u32,
    /// The recorded maximum latency, ns (0 outside latency tracers).
    pub saved_latency_ns: u64,
    /// The task the maximum was recorded for (empty outside latency tracers).
    pub comm: &'a str,
    /// Its pid.
    pub pid: i32,
    /// Its uid.
    pub uid: u32,
    /// Its nice value.
    pub nice: i64,
    /// Its policy.
    pub policy: i64,
    /// Its RT priority.
    pub rt_priority: i64,
    /// Where the critical section started and ended, if recorded.
    pub critical: Option<(u64, u64)>,
    /// Whether the kernel is SMP (prints ` #P:N`).
    pub smp: bool,
}

impl Default for LatencyInfo<'_> {
    fn default() -> Self {
        LatencyInfo {
            uts_release: "",
            preempt_model: "desktop",
            cpu: 0,
            saved_latency_ns: 0,
            comm: "",
            pid: 0,
            uid: 0,
            nice: 0,
            policy: 0,
            rt_priority: 0,
            critical: None,
            smp: true,
        }
    }
}

/// `"# tracer: %s\n#\n"`, printed before any header.
pub fn write_tracer_line(out: &mut dyn Write, tracer: &str) -> fmt::Result {
    write!(out, "# tracer: {tracer}\n#\n")
}

/// `print_event_info`: the entries line and an empty comment line.
pub fn write_event_info(out: &mut dyn Write, info: &HeaderInfo<'_>) -> fmt::Result {
    write!(
        out,
        "# entries-in-buffer/entries-written: {}/{}   #P:{}\n#\n",
        info.entries, info.written, info.online_cpus
    )
}

/// `print_func_help_header_irq` (the default legend, with the five flag columns).
pub fn write_func_help_header_irq(
    out: &mut dyn Write,
    info: &HeaderInfo<'_>,
    tgid: bool,
) -> fmt::Result {
    const SPACE: &str = "            ";
    let prec = if tgid { 12 } else { 2 };
    let sp = &SPACE[..prec];
    write_event_info(out, info)?;
    writeln!(
        out,
        "#                            {sp}  _-----=> irqs-off/BH-disabled"
    )?;
    writeln!(
        out,
        "#                            {sp} / _----=> need-resched"
    )?;
    writeln!(
        out,
        "#                            {sp}| / _---=> hardirq/softirq"
    )?;
    writeln!(
        out,
        "#                            {sp}|| / _--=> preempt-depth"
    )?;
    writeln!(
        out,
        "#                            {sp}||| / _-=> migrate-disable"
    )?;
    writeln!(out, "#                            {sp}|||| /     delay")?;
    let (t1, t2) = if tgid {
        ("     TGID   ", "       |    ")
    } else {
        ("  ", "  ")
    };
    writeln!(
        out,
        "#           TASK-PID  {t1} CPU#  |||||  TIMESTAMP  FUNCTION"
    )?;
    writeln!(
        out,
        "#              | |    {t2}   |   |||||     |         |"
    )
}

/// `print_func_help_header` (`irq-info` off).
pub fn write_func_help_header(
    out: &mut dyn Write,
    info: &HeaderInfo<'_>,
    tgid: bool,
) -> fmt::Result {
    write_event_info(out, info)?;
    let (t1, t2) = if tgid {
        ("   TGID   ", "     |    ")
    } else {
        ("", "")
    };
    writeln!(
        out,
        "#           TASK-PID    {t1} CPU#     TIMESTAMP  FUNCTION"
    )?;
    writeln!(out, "#              | |      {t2}   |         |         |")
}

/// `print_trace_header`: the latency-trace block.
pub fn write_latency_trace_header(
    out: &mut dyn Write,
    env: &OutputEnv<'_>,
    info: &HeaderInfo<'_>,
) -> fmt::Result {
    let l = &info.latency;
    writeln!(
        out,
        "# {} latency trace v1.1.5 on {}",
        info.tracer, l.uts_release
    )?;
    writeln!(
        out,
        "# --------------------------------------------------------------------"
    )?;
    write!(
        out,
        "# latency: {} us, #{}/{}, CPU#{} | (M:{} VP:0, KP:0, SP:0 HP:0",
        l.saved_latency_ns / 1000,
        info.entries,
        info.written,
        l.cpu,
        l.preempt_model
    )?;
    if l.smp {
        writeln!(out, " #P:{})", info.online_cpus)?;
    } else {
        writeln!(out, ")")?;
    }
    writeln!(out, "#    -----------------")?;
    writeln!(
        out,
        "#    | task: {:.16}-{} (uid:{} nice:{} policy:{} rt_prio:{})",
        l.comm, l.pid, l.uid, l.nice, l.policy, l.rt_priority
    )?;
    writeln!(out, "#    -----------------")?;
    if let Some((start, end)) = l.critical {
        let o = env.options;
        let off = o.contains(TraceOptions::SYM_OFFSET);
        let addr = o.contains(TraceOptions::SYM_ADDR);
        out.write_str("#  => started at: ")?;
        write_ip_sym(out, env.symbols, start, off, addr)?;
        out.write_str("\n#  => ended at:   ")?;
        write_ip_sym(out, env.symbols, end, off, addr)?;
        out.write_str("\n#\n")?;
    }
    writeln!(out, "#")
}

/// `print_lat_help_header` (6.12: six flag columns, trailing spaces kept).
pub fn write_lat_help_header(out: &mut dyn Write) -> fmt::Result {
    out.write_str(
        "#                    _------=> CPU#            \n\
         #                   / _-----=> irqs-off/BH-disabled\n\
         #                  | / _----=> need-resched    \n\
         #                  || / _---=> hardirq/softirq \n\
         #                  ||| / _--=> preempt-depth   \n\
         #                  |||| / _-=> migrate-disable \n\
         #                  ||||| /     delay           \n\
         #  cmd     pid     |||||| time  |   caller     \n\
         #     \\   /        ||||||  \\    |    /       \n",
    )
}

/// `trace_default_header`: what the function and nop tracers print after the tracer line.
/// `empty` says whether the buffers hold no event (the latency block is then left out).
pub fn write_default_header(
    out: &mut dyn Write,
    env: &OutputEnv<'_>,
    info: &HeaderInfo<'_>,
    empty: bool,
) -> fmt::Result {
    let o = env.options;
    if !o.contains(TraceOptions::CONTEXT_INFO) {
        return Ok(());
    }
    if o.contains(TraceOptions::LATENCY_FORMAT) {
        if empty {
            return Ok(());
        }
        write_latency_trace_header(out, env, info)?;
        if !o.contains(TraceOptions::VERBOSE) {
            write_lat_help_header(out)?;
        }
        return Ok(());
    }
    if o.contains(TraceOptions::VERBOSE) {
        return Ok(());
    }
    let tgid = o.contains(TraceOptions::RECORD_TGID);
    if o.contains(TraceOptions::IRQ_INFO) {
        write_func_help_header_irq(out, info, tgid)
    } else {
        write_func_help_header(out, info, tgid)
    }
}

/// `print_graph_headers_flags`: function_graph's header.
pub fn write_graph_header(
    out: &mut dyn Write,
    env: &OutputEnv<'_>,
    info: &HeaderInfo<'_>,
    flags: GraphFlags,
    empty: bool,
) -> fmt::Result {
    let o = env.options;
    if !o.contains(TraceOptions::CONTEXT_INFO) {
        return Ok(());
    }
    let lat = o.contains(TraceOptions::LATENCY_FORMAT);
    if lat {
        if empty {
            return Ok(());
        }
        write_latency_trace_header(out, env, info)?;
        let mut size = 0;
        if flags.contains(GraphFlags::ABS_TIME) {
            size += 16;
        }
        if flags.contains(GraphFlags::REL_TIME) {
            size += 16;
        }
        if flags.contains(GraphFlags::CPU) {
            size += 4;
        }
        if flags.contains(GraphFlags::PROC) {
            size += 17;
        }
        const SPACES: &str = "                                     ";
        let sp = &SPACES[..size];
        writeln!(out, "#{sp}  _-----=> irqs-off        ")?;
        writeln!(out, "#{sp} / _----=> need-resched    ")?;
        writeln!(out, "#{sp}| / _---=> hardirq/softirq ")?;
        writeln!(out, "#{sp}|| / _--=> preempt-depth   ")?;
        writeln!(out, "#{sp}||| /                      ")?;
    }
    out.write_char('#')?;
    if flags.contains(GraphFlags::ABS_TIME) {
        out.write_str("     TIME       ")?;
    }
    if flags.contains(GraphFlags::REL_TIME) {
        out.write_str("   REL TIME     ")?;
    }
    if flags.contains(GraphFlags::CPU) {
        out.write_str(" CPU")?;
    }
    if flags.contains(GraphFlags::PROC) {
        out.write_str("  TASK/PID       ")?;
    }
    if lat {
        out.write_str("||||   ")?;
    }
    if flags.contains(GraphFlags::DURATION) {
        out.write_str("  DURATION   ")?;
    }
    out.write_str("               FUNCTION CALLS\n#")?;
    if flags.contains(GraphFlags::ABS_TIME) {
        out.write_str("      |         ")?;
    }
    if flags.contains(GraphFlags::REL_TIME) {
        out.write_str("      |         ")?;
    }
    if flags.contains(GraphFlags::CPU) {
        out.write_str(" |  ")?;
    }
    if flags.contains(GraphFlags::PROC) {
        out.write_str("   |    |        ")?;
    }
    if lat {
        out.write_str("||||   ")?;
    }
    if flags.contains(GraphFlags::DURATION) {
        out.write_str("   |   |      ")?;
    }
    out.write_str("               |   |   |   |\n")
}
