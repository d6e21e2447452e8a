//! Chrome trace-event JSON (`{"traceEvents":[...]}`), the legacy format Perfetto UI and
//! `chrome://tracing` load.
//!
//! Mapping: `funcgraph_entry` → `"ph":"B"`, `funcgraph_exit` → `"ph":"E"`, `function` → an
//! instant event (`"ph":"i"`, thread scope), `print` → an instant named `print` with the text in
//! `args.msg`, a trace event of another system (a program's, `ftrace/tracepoint.h`) → an
//! instant named after the event, its system as `cat` and its fields in `args`
//! ([`event_args`]); `"M"` metadata names every process and thread (at the end: the JSON is
//! written as the capture is read). Events lost before an event (a page's missed-events
//! flags, a thread file's counted drops) are an instant named `lost events` right before it,
//! with the CPU and the count (`null` when the page does not store it) as `args`. `ts` is in microseconds with three
//! decimals (nanosecond precision; an `x86-tsc` recording's cycles are converted with its
//! calibration, another raw counter is written as if it counted nanoseconds). `pid` is the thread's process when the capture knows it (a recording), else the
//! thread itself.
//!
//! Invariant: the B/E events of every thread nest perfectly, as Perfetto requires: an exit whose
//! entry is not in the trace (the buffer started mid-call) is left out, an exit that skips
//! unfinished calls (lost events) ends those first at its own time, and calls still open at the
//! end of the trace end at the thread's last timestamp.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::Write;

use ftrace_core::format::{Field, FieldArray, TraceEventFormat};

use ftrace_tracers::Missed;

use super::{Call, Capture, ExportError, LeftOut, What, sym_name};

/// Appends `s` as a JSON string literal.
pub fn json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn ts_us(out: &mut String, ts: u64) {
    let _ = write!(out, "{}.{:03}", ts / 1000, ts % 1000);
}

/// The JSON being written: each event made in `line`, then written out.
struct Writer<'w> {
    out: &'w mut dyn Write,
    line: String,
    first: bool,
}

impl Writer<'_> {
    fn put(&mut self, s: &str) -> Result<(), ExportError> {
        self.out
            .write_all(s.as_bytes())
            .map_err(|e| ExportError(format!("writing: {e}")))
    }

    /// Starts the next array element in `line`.
    fn next(&mut self) {
        self.line.clear();
        if !self.first {
            self.line.push_str(",\n");
        }
        self.first = false;
    }

    fn flush_line(&mut self) -> Result<(), ExportError> {
        let line = std::mem::take(&mut self.line);
        let r = self.put(&line);
        self.line = line;
        r
    }

    /// One event; `extra` (`,"key":...` text) is added by `args`.
    #[allow(clippy::too_many_arguments)]
    fn event(
        &mut self,
        ph: char,
        name: &str,
        cat: &str,
        ts: u64,
        pid: i32,
        tid: i32,
        args: impl FnOnce(&mut String),
    ) -> Result<(), ExportError> {
        self.next();
        let o = &mut self.line;
        let _ = write!(o, "{{\"ph\":\"{ph}\",\"name\":");
        json_str(o, name);
        o.push_str(",\"cat\":");
        json_str(o, cat);
        o.push_str(",\"ts\":");
        ts_us(o, ts);
        let _ = write!(o, ",\"pid\":{pid},\"tid\":{tid}");
        args(o);
        o.push('}');
        self.flush_line()
    }

    fn meta(&mut self, what: &str, pid: i32, tid: i32, name: &str) -> Result<(), ExportError> {
        self.next();
        let o = &mut self.line;
        let _ = write!(
            o,
            "{{\"ph\":\"M\",\"name\":\"{what}\",\"pid\":{pid},\"tid\":{tid},\"args\":{{\"name\":"
        );
        json_str(o, name);
        o.push_str("}}");
        self.flush_line()
    }
}

/// `"args"` of a trace event: each of its fields (after the common ones) by name, integers as
/// numbers (signed as the format says), `char` arrays and `__data_loc char[]` as strings,
/// other fixed arrays as arrays of numbers; a field the record is too short for is `null`.
pub fn event_args(out: &mut String, format: &TraceEventFormat, data: &[u8]) {
    out.push_str(",\"s\":\"t\",\"args\":{");
    for (n, f) in format.fields.iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        json_str(out, f.name);
        out.push(':');
        field_value(out, f, data);
    }
    out.push('}');
}

/// An integer of `size` bytes (1 to 8) at `at`, sign-extended when `signed`.
fn int_at(data: &[u8], at: usize, size: usize, signed: bool) -> Option<i128> {
    let b = data.get(at..at.checked_add(size)?)?;
    let mut v = [0u8; 8];
    v.get_mut(..size)?.copy_from_slice(b);
    let raw = u64::from_le_bytes(v);
    Some(if signed && size < 8 {
        let shift = 64 - 8 * size as u32;
        i128::from(((raw << shift) as i64) >> shift)
    } else if signed {
        i128::from(raw as i64)
    } else {
        i128::from(raw)
    })
}

fn field_value(out: &mut String, f: &Field, data: &[u8]) {
    let off = f.offset as usize;
    let size = f.size as usize;
    let text = |b: &[u8]| {
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        String::from_utf8_lossy(&b[..end]).into_owned()
    };
    if f.c_type.starts_with("__data_loc") && size == 4 {
        let loc = int_at(data, off, 4, false).unwrap_or(0) as u32;
        let (at, len) = ((loc & 0xffff) as usize, (loc >> 16) as usize);
        match data.get(at..at + len) {
            Some(b) => json_str(out, &text(b)),
            None => out.push_str("null"),
        }
        return;
    }
    match f.array {
        FieldArray::Fixed(_) if f.c_type.contains("char") => {
            match data.get(off..off.saturating_add(size)) {
                Some(b) => json_str(out, &text(b)),
                None => out.push_str("null"),
            }
        }
        FieldArray::Fixed(n) if n > 0 && size % n as usize == 0 && size / (n as usize) <= 8 => {
            let each = size / n as usize;
            out.push('[');
            for i in 0..n as usize {
                if i > 0 {
                    out.push(',');
                }
                match int_at(data, off + i * each, each, f.signed) {
                    Some(v) => {
                        let _ = write!(out, "{v}");
                    }
                    None => out.push_str("null"),
                }
            }
            out.push(']');
        }
        FieldArray::Scalar if (1..=8).contains(&size) => match int_at(data, off, size, f.signed) {
            Some(v) => {
                let _ = write!(out, "{v}");
            }
            None => out.push_str("null"),
        },
        _ => out.push_str("null"),
    }
}

/// Writes `cap` as Chrome JSON into `out`, event by event as the capture is read (memory holds
/// each thread's open calls, not the events); the `"M"` names of the processes and threads
/// come last. Returns the records Chrome JSON has no place for (a stack trace, a raw
/// marker...), left out.
pub fn write(cap: &mut Capture, out: &mut dyn Write) -> Result<LeftOut, ExportError> {
    let syms = cap.symbols()?;
    let mut w = Writer {
        out,
        line: String::new(),
        first: true,
    };
    w.put("{\"traceEvents\":[\n")?;
    // Per thread: its process, open calls (function address) and the last timestamp seen.
    let mut open: BTreeMap<i32, (i32, Vec<u64>, u64)> = BTreeMap::new();
    let mut left_out = LeftOut::default();
    cap.for_each_event(&mut |cap, e| {
        let (tid, pid) = (e.pid, cap.tgid(e.pid));
        let st = open.entry(tid).or_insert((pid, Vec::new(), 0));
        st.2 = st.2.max(e.ts);
        let ts = cap.ns(e.ts);
        if e.missed != Missed::None {
            // The hole before this event, where the reader sees it.
            w.event('i', "lost events", "ftrace", ts, pid, tid, |o| {
                let _ = write!(o, ",\"s\":\"t\",\"args\":{{\"cpu\":{},\"count\":", e.cpu);
                match e.missed {
                    Missed::Count(n) => {
                        let _ = write!(o, "{n}}}");
                    }
                    _ => o.push_str("null}"),
                }
            })?;
        }
        match &e.what {
            What::Call(Call::Entry { func, .. }) => {
                st.1.push(*func);
                w.event('B', &sym_name(&syms, *func), "ftrace", ts, pid, tid, |_| {})
            }
            What::Call(Call::Exit { func, .. }) => {
                let Some(pos) = st.1.iter().rposition(|f| f == func) else {
                    return Ok(()); // entered before the trace starts
                };
                while st.1.len() > pos {
                    let f = st.1.pop().expect("non-empty");
                    w.event('E', &sym_name(&syms, f), "ftrace", ts, pid, tid, |_| {})?;
                }
                Ok(())
            }
            What::Call(Call::Function { func, parent }) => {
                w.event('i', &sym_name(&syms, *func), "ftrace", ts, pid, tid, |o| {
                    o.push_str(",\"s\":\"t\",\"args\":{\"parent\":");
                    json_str(o, &sym_name(&syms, *parent));
                    o.push('}');
                })
            }
            What::Print(msg) => w.event('i', "print", "ftrace", ts, pid, tid, |o| {
                o.push_str(",\"s\":\"t\",\"args\":{\"msg\":");
                json_str(o, msg);
                o.push('}');
            }),
            What::Event { format, data } => {
                let f = &cap.event_formats[*format];
                w.event('i', f.name, f.system, ts, pid, tid, |o| {
                    event_args(o, f, data)
                })
            }
            What::Other => {
                left_out.add(e.id);
                Ok(())
            }
        }
    })?;
    let comms = cap.comms();
    let comm = |t: i32| comms.get(&t).cloned().unwrap_or_else(|| "<...>".into());
    let mut named = BTreeSet::new();
    for (&tid, (pid, stack, last)) in &open {
        for &f in stack.iter().rev() {
            w.event(
                'E',
                &sym_name(&syms, f),
                "ftrace",
                cap.ns(*last),
                *pid,
                tid,
                |_| {},
            )?;
        }
    }
    let tasks: BTreeSet<(i32, i32)> = open.iter().map(|(&tid, st)| (st.0, tid)).collect();
    for (pid, tid) in tasks {
        if named.insert(pid) {
            let pname = cap.exes.get(&pid).map_or_else(
                || comm(pid),
                |e| e.rsplit('/').next().unwrap_or(e).to_string(),
            );
            w.meta("process_name", pid, pid, &pname)?;
        }
        w.meta("thread_name", pid, tid, &format!("{} ({tid})", comm(tid)))?;
    }
    let mut tail = String::from("\n],\"displayTimeUnit\":\"ns\",\"otherData\":{\"tracer\":");
    json_str(&mut tail, &cap.tracer);
    tail.push_str(",\"clock\":");
    json_str(&mut tail, cap.clock_name());
    tail.push_str("}}\n");
    w.put(&tail)?;
    Ok(left_out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped() {
        let mut s = String::new();
        json_str(&mut s, "a\"b\\c\n\u{1}é");
        assert_eq!(s, "\"a\\\"b\\\\c\\n\\u0001é\"");
    }

    #[test]
    fn microseconds_keep_nanoseconds() {
        let mut s = String::new();
        ts_us(&mut s, 1_234_567);
        assert_eq!(s, "1234.567");
        s.clear();
        ts_us(&mut s, 5);
        assert_eq!(s, "0.005");
    }

    #[test]
    fn event_fields_become_args() {
        const FIELDS: &[Field] = &[
            Field {
                c_type: "unsigned long",
                name: "value",
                array: FieldArray::Scalar,
                offset: 8,
                size: 8,
                signed: false,
            },
            Field {
                c_type: "int",
                name: "delta",
                array: FieldArray::Scalar,
                offset: 16,
                size: 4,
                signed: true,
            },
            Field {
                c_type: "char",
                name: "label",
                array: FieldArray::Fixed(4),
                offset: 20,
                size: 4,
                signed: false,
            },
            Field {
                c_type: "u16",
                name: "pair",
                array: FieldArray::Fixed(2),
                offset: 24,
                size: 4,
                signed: false,
            },
            Field {
                c_type: "int",
                name: "past_the_end",
                array: FieldArray::Scalar,
                offset: 28,
                size: 4,
                signed: true,
            },
        ];
        let f = TraceEventFormat {
            system: "demo",
            name: "demo_value",
            id: 1024,
            fields: FIELDS,
            print_fmt: "\"\"",
        };
        let mut data = vec![0u8; 8];
        data.extend_from_slice(&7u64.to_le_bytes());
        data.extend_from_slice(&(-9i32).to_le_bytes());
        data.extend_from_slice(b"v7\0x");
        data.extend_from_slice(&[1, 0, 2, 0]);
        let mut s = String::new();
        event_args(&mut s, &f, &data);
        assert_eq!(
            s,
            ",\"s\":\"t\",\"args\":{\"value\":7,\"delta\":-9,\"label\":\"v7\",\"pair\":[1,2],\
             \"past_the_end\":null}"
        );
    }
}
