//! Chrome trace-event JSON (`{"traceEvents":[...]}`), the legacy format Perfetto UI and
//! `chrome://tracing` load.
//!
//! Mapping: `funcgraph_entry` → `"ph":"B"`, `funcgraph_exit` → `"ph":"E"`, `function` → an
//! instant event (`"ph":"i"`, thread scope), `print` → an instant named `print` with the text in
//! `args.msg`; `"M"` metadata names every process and thread. `ts` is in microseconds with three
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

use super::{Call, Capture, ExportError, sym_name};

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

struct Writer {
    out: String,
    first: bool,
}

impl Writer {
    fn event(&mut self, ph: char, name: &str, ts: u64, pid: i32, tid: i32, extra: &str) {
        if !self.first {
            self.out.push_str(",\n");
        }
        self.first = false;
        let o = &mut self.out;
        let _ = write!(o, "{{\"ph\":\"{ph}\",\"name\":");
        json_str(o, name);
        o.push_str(",\"cat\":\"ftrace\",\"ts\":");
        ts_us(o, ts);
        let _ = write!(o, ",\"pid\":{pid},\"tid\":{tid}{extra}}}");
    }

    fn meta(&mut self, what: &str, pid: i32, tid: i32, name: &str) {
        if !self.first {
            self.out.push_str(",\n");
        }
        self.first = false;
        let o = &mut self.out;
        let _ = write!(
            o,
            "{{\"ph\":\"M\",\"name\":\"{what}\",\"pid\":{pid},\"tid\":{tid},\"args\":{{\"name\":"
        );
        json_str(o, name);
        o.push_str("}}");
    }
}

/// The JSON bytes of `cap`.
pub fn write(cap: &Capture) -> Result<Vec<u8>, ExportError> {
    let syms = cap.symbols()?;
    let comms = cap.comms();
    let events = cap.events()?;
    let mut w = Writer {
        out: String::from("{\"traceEvents\":[\n"),
        first: true,
    };
    let mut tasks = BTreeSet::new();
    for e in &events {
        tasks.insert((cap.tgid(e.pid), e.pid));
    }
    let mut named = BTreeSet::new();
    for &(pid, tid) in &tasks {
        let comm = |t: i32| comms.get(&t).cloned().unwrap_or_else(|| "<...>".into());
        if named.insert(pid) {
            let pname = cap.exes.get(&pid).map_or_else(
                || comm(pid),
                |e| e.rsplit('/').next().unwrap_or(e).to_string(),
            );
            w.meta("process_name", pid, pid, &pname);
        }
        w.meta("thread_name", pid, tid, &format!("{} ({tid})", comm(tid)));
    }
    // Per thread: open calls (function address) and the last timestamp seen.
    let mut open: BTreeMap<i32, (Vec<u64>, u64)> = BTreeMap::new();
    for e in &events {
        let (tid, pid) = (e.pid, cap.tgid(e.pid));
        let st = open.entry(tid).or_default();
        st.1 = st.1.max(e.ts);
        match e.call() {
            Some(Call::Entry { func, .. }) => {
                st.0.push(func);
                w.event('B', &sym_name(&syms, func), cap.ns(e.ts), pid, tid, "");
            }
            Some(Call::Exit { func, .. }) => {
                let Some(pos) = st.0.iter().rposition(|&f| f == func) else {
                    continue; // entered before the trace starts
                };
                while st.0.len() > pos {
                    let f = st.0.pop().expect("non-empty");
                    w.event('E', &sym_name(&syms, f), cap.ns(e.ts), pid, tid, "");
                }
            }
            Some(Call::Function { func, parent }) => {
                let mut args = String::from(",\"s\":\"t\",\"args\":{\"parent\":");
                json_str(&mut args, &sym_name(&syms, parent));
                args.push('}');
                w.event('i', &sym_name(&syms, func), cap.ns(e.ts), pid, tid, &args);
            }
            None => {
                if let super::What::Print(msg) = &e.what {
                    let mut args = String::from(",\"s\":\"t\",\"args\":{\"msg\":");
                    json_str(&mut args, msg);
                    args.push('}');
                    w.event('i', "print", cap.ns(e.ts), pid, tid, &args);
                }
            }
        }
    }
    for (tid, (mut stack, last)) in open {
        let pid = cap.tgid(tid);
        while let Some(f) = stack.pop() {
            w.event('E', &sym_name(&syms, f), cap.ns(last), pid, tid, "");
        }
    }
    w.out
        .push_str("\n],\"displayTimeUnit\":\"ns\",\"otherData\":{\"tracer\":");
    json_str(&mut w.out, &cap.tracer);
    w.out.push_str(",\"clock\":");
    json_str(&mut w.out, cap.clock_name());
    w.out.push_str("}}\n");
    Ok(w.out.into_bytes())
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
}
