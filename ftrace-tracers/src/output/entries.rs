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
            write_time(out, ev.ts.wrapping_sub(delta), env.time_in_ns)?;
            out.write_str(")\n")
        }
        Entry::Print { ip, text } => {
            write_ip_sym(out, env.symbols, ip, off, addr)?;
            out.write_str(": ")?;
            write_bytes_lossy(out, text)
        }
        Entry::RawData { id, buf } => write_raw_data(out, id, buf),
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
        Entry::Bputs(b) => writeln!(out, ": {:x} : (string at {:#x})", { b.ip }, { b.str_ }),
        Entry::Bprint { entry, .. } => {
            writeln!(out, ": {:x} : (format at {:#x})", { entry.ip }, {
                entry.fmt
            })
        }
        Entry::GraphEntry(_) | Entry::GraphReturn(_) => writeln!(out, "type: {}", ev.type_id()),
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
        Entry::Other(_) | Entry::Truncated => Ok(()),
        _ => {
            let mut w = super::TextToBytes(out);
            writeln!(w, "type: {}", ev.type_id())
        }
    }
}
