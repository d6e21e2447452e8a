//! The per-line context prefix (`trace_print_context`, `trace_print_lat_context`) and the five
//! flag characters (`trace_print_lat_fmt`).
//!
//! Invariant: the prefix depends only on the event's header, its CPU and timestamp, the options
//! and, in latency format, the next event's timestamp; it never looks at the event's body.

use core::fmt::{self, Write};

use ftrace_core::TraceFlags;
use ftrace_core::entry::TraceEntry;

use super::{OutputEnv, comm_of, ns2usecs, trace_find_mark, write_time};
use crate::clock::ClockUnit;
use crate::event::EventRef;
use crate::options::TraceOptions;

/// `trace_print_lat_fmt`: irqs-off, need-resched, hard/softirq, preempt depth and
/// migrate-disable depth, one character each (Linux 6.12 flag layout).
pub fn write_lat_fmt(out: &mut dyn Write, ent: &TraceEntry) -> fmt::Result {
    let f = TraceFlags::from_bits_retain(ent.flags);
    let bh_off = f.contains(TraceFlags::BH_OFF);
    let irqs_off = if f.contains(TraceFlags::IRQS_OFF) && bh_off {
        'D'
    } else if f.contains(TraceFlags::IRQS_OFF) {
        'd'
    } else if bh_off {
        'b'
    } else if f.contains(TraceFlags::IRQS_NOSUPPORT) {
        'X'
    } else {
        '.'
    };
    let need_resched = match (
        f.contains(TraceFlags::NEED_RESCHED),
        f.contains(TraceFlags::PREEMPT_RESCHED),
    ) {
        (true, true) => 'N',
        (true, false) => 'n',
        (false, true) => 'p',
        (false, false) => '.',
    };
    let nmi = f.contains(TraceFlags::NMI);
    let hard = f.contains(TraceFlags::HARDIRQ);
    let soft = f.contains(TraceFlags::SOFTIRQ);
    let hardsoft = match (nmi, hard, soft) {
        (true, true, _) => 'Z',
        (true, false, _) => 'z',
        (false, true, true) => 'H',
        (false, true, false) => 'h',
        (false, false, true) => 's',
        _ => '.',
    };
    out.write_char(irqs_off)?;
    out.write_char(need_resched)?;
    out.write_char(hardsoft)?;
    let pc = ent.preempt_count;
    if pc & 0xf != 0 {
        write!(out, "{:x}", pc & 0xf)?;
    } else {
        out.write_char('.')?;
    }
    if pc & 0xf0 != 0 {
        write!(out, "{:x}", pc >> 4)
    } else {
        out.write_char('.')
    }
}

/// `trace_print_context`: `"%16s-%-7d "`, the tgid column with `record-tgid`, `"[%03d] "`, the
/// flag characters with `irq-info`, the time and `": "`.
pub fn write_context(out: &mut dyn Write, env: &OutputEnv<'_>, ev: &EventRef<'_>) -> fmt::Result {
    let ent = ev.header().unwrap_or_default();
    let comm = comm_of(env.tasks, ent.pid);
    write!(out, "{comm:>16}-{:<7} ", ent.pid)?;
    if env.options.contains(TraceOptions::RECORD_TGID) {
        match env.tasks.tgid(ent.pid) {
            Some(tgid) if tgid != 0 => write!(out, "({tgid:7}) ")?,
            _ => out.write_str("(-------) ")?,
        }
    }
    write!(out, "[{:03}] ", ev.cpu)?;
    if env.options.contains(TraceOptions::IRQ_INFO) {
        write_lat_fmt(out, &ent)?;
    }
    write_time(out, ev.ts, env.clock_unit)?;
    out.write_str(": ")
}

/// `trace_print_lat_context`: the latency-format prefix. `next_ts` is the timestamp of the next
/// event in reading order (the event's own if it is the last); `idx` is the event's index in
/// the output (printed by `verbose`).
pub fn write_lat_context(
    out: &mut dyn Write,
    env: &OutputEnv<'_>,
    ev: &EventRef<'_>,
    next_ts: u64,
    idx: u64,
) -> fmt::Result {
    let ent = ev.header().unwrap_or_default();
    let verbose = env.options.contains(TraceOptions::VERBOSE);
    let comm = comm_of(env.tasks, ent.pid);
    if verbose {
        write!(
            out,
            "{comm:>16} {:7} {:3} {} {:08x} {idx:08x} ",
            ent.pid,
            ev.cpu,
            ent.flags,
            ent.preempt_count & 0xf
        )?;
    } else {
        write!(out, "{comm:>8.8}-{:<7} {:3}", ent.pid, ev.cpu)?;
        write_lat_fmt(out, &ent)?;
    }
    let in_ns = env.clock_unit == ClockUnit::Nanoseconds;
    let mut abs = ev.ts.wrapping_sub(env.time_start);
    let mut rel = next_ts.wrapping_sub(ev.ts);
    if in_ns {
        abs = ns2usecs(abs);
        rel = ns2usecs(rel);
    }
    match (verbose, in_ns) {
        (true, true) => write!(
            out,
            "[{:08x}] {}.{:03}ms (+{}.{:03}ms): ",
            ns2usecs(ev.ts),
            abs / 1000,
            abs % 1000,
            rel / 1000,
            rel % 1000
        ),
        (true, false) => write!(out, "[{:016x}] {} (+{}): ", ev.ts, abs as i64, rel as i64),
        (false, true) => write!(
            out,
            " {:4}us{}: ",
            abs as i64,
            trace_find_mark(rel.wrapping_mul(1000))
        ),
        (false, false) => write!(out, " {:4}: ", abs as i64),
    }
}

/// The `raw` option's prefix: `"%d %d %llu "` (pid, CPU, timestamp).
pub fn write_raw_context(out: &mut dyn Write, ev: &EventRef<'_>) -> fmt::Result {
    write!(out, "{} {} {} ", ev.pid(), ev.cpu, ev.ts)
}

/// `SEQ_PUT_HEX_FIELD`: a field as big-endian hex digits (two per byte) and a space.
pub fn write_hex_field(out: &mut dyn Write, value: u64, size: usize) -> fmt::Result {
    let width = size * 2;
    let v = if size >= 8 {
        value
    } else {
        value & ((1u64 << (size * 8)) - 1)
    };
    write!(out, "{v:0width$x} ")
}

/// The `hex` option's prefix: pid (4 bytes), CPU (4), timestamp (8).
pub fn write_hex_context(out: &mut dyn Write, ev: &EventRef<'_>) -> fmt::Result {
    write_hex_field(out, ev.pid() as u32 as u64, 4)?;
    write_hex_field(out, ev.cpu as u64, 4)?;
    write_hex_field(out, ev.ts, 8)
}
