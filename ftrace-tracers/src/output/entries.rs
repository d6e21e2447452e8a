//! The body of each event's line in the `trace`, `raw`, `hex` and `bin` modes
//! (`trace_output.c`'s `trace_event_functions`).
//!
//! Invariant: bodies end with the newline the kernel prints (the `print` event's text carries
//! its own), except in `hex` mode where the caller appends it and `bin` mode which has none.

use core::fmt::{self, Write};

use super::{ByteSink, OutputEnv, write_bytes_lossy, write_ip_sym, write_time};
use crate::event::{Entry, EventRef};
use crate::options::TraceOptions;
use crate::output::context::write_hex_field;

/// `print_fn_trace`: `ip` and, with `print-parent` and a non-zero parent, ` <-parent`.
pub fn write_fn_trace(
    out: &mut dyn Write,
    env: &OutputEnv<'_>,
    ip: u64,
    parent_ip: u64,
) -> fmt::Result {
    let o = env.options;
    let off = o.contains(TraceOptions::SYM_OFFSET);
    let addr = o.contains(TraceOptions::SYM_ADDR);
    write_ip_sym(out, env.symbols, ip, off, addr)?;
    if o.contains(TraceOptions::PRINT_PARENT) && parent_ip != 0 {
        out.write_str(" <-")?;
        write_ip_sym(out, env.symbols, parent_ip, off, addr)?;
    }
    Ok(())
}

/// The function tracer's whole line body (`trace_fn_trace`): the call and a newline. This is
/// the kernel module's hot formatting path: no allocation, no floats.
pub fn write_function_line(
    out: &mut dyn Write,
    env: &OutputEnv<'_>,
    ip: u64,
    parent_ip: u64,
) -> fmt::Result {
    write_fn_trace(out, env, ip, parent_ip)?;
    out.write_char('\n')
}

/// The body in the default (`trace`) mode.
pub fn write_trace_body(
    out: &mut dyn Write,
    env: &OutputEnv<'_>,
    ev: &EventRef<'_>,
) -> fmt::Result {
    let o = env.options;
    let off = o.contains(TraceOptions::SYM_OFFSET);
    let addr = o.contains(TraceOptions::SYM_ADDR);
    match ev.entry() {
        Entry::Function(f) => write_function_line(out, env, f.ip, f.parent_ip),
        Entry::FuncRepeats(r) => {
            write_fn_trace(out, env, r.ip, r.parent_ip)?;
            write!(out, " (repeats: {}, last_ts:", { r.count })?;
            let delta = ((r.top_delta_ts as u64) << 32) | r.bottom_delta_ts as u64;
            write_time(out, ev.ts.wrapping_sub(delta), env.clock_unit)?;
            out.write_str(")\n")
        }
        Entry::Print { ip, text } => {
            write_ip_sym(out, env.symbols, ip, off, addr)?;
            out.write_str(": ")?;
            write_bytes_lossy(out, text)
        }
        Entry::RawData { id, buf } => write_raw_data(out, id, buf),
        Entry::ContextSwitch { entry: c, wakeup } => {
            let next_comm = super::comm_of(env.tasks, c.next_pid as i32);
            writeln!(
                out,
                " {:7}:{:3}:{} {} [{:03}] {:7}:{:3}:{} {}",
                c.prev_pid as i32,
                c.prev_prio,
                task_state_char(c.prev_state),
                if wakeup { "  +" } else { "==>" },
                c.next_cpu as i32,
                c.next_pid as i32,
                c.next_prio,
                task_state_char(c.next_state),
                next_comm
            )
        }
        Entry::KernelStack(callers) => {
            out.write_str("<stack trace>\n")?;
            for ip in words(callers).take_while(|&ip| ip != u64::MAX) {
                out.write_str(" => ")?;
                write_ip_sym(out, env.symbols, ip, off, addr)?;
                out.write_char('\n')?;
            }
            Ok(())
        }
        Entry::UserStack(callers) => {
            out.write_str("<user stack trace>\n")?;
            for ip in words(callers).take(8).take_while(|&ip| ip != 0) {
                writeln!(out, " =>  <{ip:016x}>")?;
            }
            Ok(())
        }
        Entry::Bputs(b) => {
            write_ip_sym(out, env.symbols, b.ip, off, addr)?;
            writeln!(out, ": (string at {:#x})", { b.str_ })
        }
        Entry::Bprint { entry, .. } => {
            write_ip_sym(out, env.symbols, entry.ip, off, addr)?;
            writeln!(out, ": (format at {:#x})", { entry.fmt })
        }
        Entry::GraphEntry(g) => {
            // Outside the graph printer (which the trace loop normally uses): the format's text.
            out.write_str("--> ")?;
            super::write_sym(out, env.symbols, g.func)?;
            writeln!(out, " ({})", { g.depth })
        }
        Entry::GraphReturn(r) => {
            out.write_str("<-- ")?;
            super::write_sym(out, env.symbols, r.func)?;
            writeln!(out, " ({})", { r.depth })
        }
        Entry::Other(t) => writeln!(out, "Unknown type {t}"),
        Entry::Truncated => writeln!(out, "Unknown type {}", ev.type_id()),
    }
}

/// `task_index_to_char`: a task state index as `ps` shows it.
pub fn task_state_char(state: u8) -> char {
    const STATES: &[u8; 9] = b"RSDTtXZPI";
    STATES.get(state as usize).map_or('?', |&c| c as char)
}

fn words(b: &[u8]) -> impl Iterator<Item = u64> + '_ {
    b.chunks_exact(8)
        .map(|w| u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]))
}

/// `trace_raw_data`: `"# %x buf:"` then `" %02x"` for every byte left in the event.
pub fn write_raw_data(out: &mut dyn Write, id: u32, buf: &[u8]) -> fmt::Result {
    write!(out, "# {id:x} buf:")?;
    for b in buf {
        write!(out, " {b:02x}")?;
    }
    out.write_char('\n')
}

/// The body in `raw` mode.
pub fn write_raw_body(out: &mut dyn Write, ev: &EventRef<'_>) -> fmt::Result {
    match ev.entry() {
        Entry::Function(f) => writeln!(out, "{:x} {:x}", { f.ip }, { f.parent_ip }),
        Entry::FuncRepeats(r) => {
            let delta = ((r.top_delta_ts as u64) << 32) | r.bottom_delta_ts as u64;
            writeln!(out, "{} {} {} {delta}", { r.ip }, { r.parent_ip }, {
                r.count
            })
        }
        Entry::Print { ip, text } => {
            write!(out, "# {ip:x} ")?;
            write_bytes_lossy(out, text)
        }
        Entry::RawData { id, buf } => write_raw_data(out, id, buf),
        Entry::ContextSwitch { entry: c, wakeup } => writeln!(
            out,
            "{} {} {} {} {} {} {}",
            c.prev_pid as i32,
            c.prev_prio,
            if wakeup {
                '+'
            } else {
                task_state_char(c.prev_state)
            },
            c.next_cpu as i32,
            c.next_pid as i32,
            c.next_prio,
            task_state_char(c.next_state)
        ),
        Entry::Bputs(b) => writeln!(out, ": {:x} : (string at {:#x})", { b.ip }, { b.str_ }),
        Entry::Bprint { entry, .. } => {
            writeln!(out, ": {:x} : (format at {:#x})", { entry.ip }, {
                entry.fmt
            })
        }
        Entry::GraphEntry(_)
        | Entry::GraphReturn(_)
        | Entry::KernelStack(_)
        | Entry::UserStack(_) => writeln!(out, "type: {}", ev.type_id()),
        Entry::Other(t) => writeln!(out, "{t} ?"),
        Entry::Truncated => writeln!(out, "{} ?", ev.type_id()),
    }
}

/// The body in `hex` mode (the caller adds the final newline).
pub fn write_hex_body(out: &mut dyn Write, ev: &EventRef<'_>) -> fmt::Result {
    match ev.entry() {
        Entry::Function(f) => {
            write_hex_field(out, f.ip, 8)?;
            write_hex_field(out, f.parent_ip, 8)
        }
        Entry::ContextSwitch { entry: c, wakeup } => {
            let s = if wakeup {
                '+'
            } else {
                task_state_char(c.prev_state)
            };
            write_hex_field(out, c.prev_pid as u64, 4)?;
            write_hex_field(out, c.prev_prio as u64, 4)?;
            write_hex_field(out, s as u64, 4)?;
            write_hex_field(out, c.next_cpu as u64, 4)?;
            write_hex_field(out, c.next_pid as u64, 4)?;
            write_hex_field(out, c.next_prio as u64, 4)?;
            write_hex_field(out, task_state_char(c.next_state) as u64, 4)
        }
        Entry::Other(_) | Entry::Truncated => Ok(()),
        _ => writeln!(out, "type: {}", ev.type_id()),
    }
}

/// The body in `bin` mode: the function event's `ip` and `parent_ip` as native (little-endian)
/// words; events without a binary printer print `type: N\n` as the kernel's fallback does.
pub fn write_bin_body(out: &mut dyn ByteSink, ev: &EventRef<'_>) -> fmt::Result {
    match ev.entry() {
        Entry::Function(f) => {
            out.put(&{ f.ip }.to_le_bytes())?;
            out.put(&{ f.parent_ip }.to_le_bytes())
        }
        Entry::ContextSwitch { entry: c, .. } => {
            out.put(&{ c.prev_pid }.to_le_bytes())?;
            out.put(&[c.prev_prio, c.prev_state])?;
            out.put(&{ c.next_cpu }.to_le_bytes())?;
            out.put(&{ c.next_pid }.to_le_bytes())?;
            out.put(&[c.next_prio, c.next_state])
        }
        Entry::Other(_) | Entry::Truncated => Ok(()),
        _ => {
            let mut w = super::TextToBytes(out);
            writeln!(w, "type: {}", ev.type_id())
        }
    }
}
