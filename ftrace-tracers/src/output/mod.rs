//! Linux-identical text output: the `trace`, `trace_pipe` and `per_cpu/cpuN/trace` files.
//!
//! Everything here writes through [`core::fmt::Write`] (the `bin` option through
//! [`ByteSink`]), allocates nothing, and uses only integer arithmetic (no floats, no 128-bit
//! numbers), so a kernel module can format lines with it. The pieces follow the kernel's
//! `trace_output.c` / `trace.c` / `trace_functions_graph.c` split:
//!
//! - this module: what every printer shares ([`OutputEnv`], symbols, times, duration marks);
//! - [`context`]: the per-line prefix (task, CPU, flags, time) and the latency variants;
//! - [`entries`]: each event's printers in the `trace`, `raw`, `hex` and `bin` modes;
//! - [`header`]: the file headers;
//! - [`graph`]: the function_graph state machine;
//! - [`trace_file`]: the reader loop that ties them together.
//!
//! Invariant: a printer reads only the event, the options and the [`OutputEnv`]; the only state
//! carried between lines is the graph printer's per-CPU state and the annotate bookkeeping,
//! exactly the state the kernel keeps per open file.

pub mod context;
pub mod entries;
pub mod graph;
pub mod header;
pub mod trace_file;

use core::fmt::{self, Write};

use ftrace_core::symbols::SymbolTable;

use crate::clock::ClockUnit;
use crate::options::TraceOptions;

/// Task names and thread-group ids (the kernel's saved-cmdlines and saved-tgids caches).
pub trait TaskNames {
    /// The command name recorded for `pid`, if any.
    fn comm(&self, pid: i32) -> Option<&str>;
    /// The thread-group id recorded for `pid` (0 or `None` if unknown).
    fn tgid(&self, pid: i32) -> Option<u32> {
        let _ = pid;
        None
    }
}

/// No task names: every pid but 0 prints as `<...>`.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoTaskNames;

impl TaskNames for NoTaskNames {
    fn comm(&self, _pid: i32) -> Option<&str> {
        None
    }
}

/// The name a line shows for `pid`: `<idle>` for 0, the saved name, or `<...>`.
pub fn comm_of(tasks: &dyn TaskNames, pid: i32) -> &str {
    if pid == 0 {
        return "<idle>";
    }
    tasks.comm(pid).unwrap_or("<...>")
}

/// What every printer needs besides the event itself.
#[derive(Clone, Copy)]
pub struct OutputEnv<'e> {
    /// Address to name (`%ps`).
    pub symbols: &'e dyn SymbolTable,
    /// pid to name / tgid.
    pub tasks: &'e dyn TaskNames,
    /// The global trace options.
    pub options: TraceOptions,
    /// What the timestamps count (`TRACE_FILE_TIME_IN_NS` when nanoseconds).
    pub clock_unit: ClockUnit,
    /// When the buffer was last reset (`time_start`): latency times are relative to it.
    pub time_start: u64,
    /// `nr_cpu_ids` (the width of function_graph's CPU column).
    pub nr_cpu_ids: u32,
    /// The `__irqentry_text` range, for function_graph's interrupt markers.
    pub irq_text: Option<(u64, u64)>,
}

impl<'e> OutputEnv<'e> {
    /// An environment with default options, ns timestamps and no irq text.
    pub fn new(symbols: &'e dyn SymbolTable, tasks: &'e dyn TaskNames, nr_cpu_ids: u32) -> Self {
        OutputEnv {
            symbols,
            tasks,
            options: TraceOptions::DEFAULT,
            clock_unit: ClockUnit::Nanoseconds,
            time_start: 0,
            nr_cpu_ids,
            irq_text: None,
        }
    }
}

/// A sink for the `bin` option's binary output.
pub trait ByteSink {
    /// Appends bytes.
    fn put(&mut self, bytes: &[u8]) -> fmt::Result;
}

#[cfg(feature = "alloc")]
impl ByteSink for alloc::vec::Vec<u8> {
    fn put(&mut self, bytes: &[u8]) -> fmt::Result {
        self.extend_from_slice(bytes);
        Ok(())
    }
}

/// A line buffer in front of a [`ByteSink`] (the kernel's `trace_seq`): text is formatted into
/// a fixed array and handed on in large pieces, so per-character writes (padding, flag
/// characters) cost a store, not a call into the sink.
pub struct LineBuf<'b> {
    sink: &'b mut dyn ByteSink,
    buf: [u8; 512],
    len: usize,
}

impl<'b> LineBuf<'b> {
    /// An empty buffer in front of `sink`.
    pub fn new(sink: &'b mut dyn ByteSink) -> Self {
        LineBuf {
            sink,
            buf: [0; 512],
            len: 0,
        }
    }

    /// Hands the buffered bytes to the sink.
    pub fn flush(&mut self) -> fmt::Result {
        if self.len > 0 {
            let n = core::mem::take(&mut self.len);
            self.sink.put(&self.buf[..n])?;
        }
        Ok(())
    }

    /// Flushes, then gives direct access to the sink (binary output).
    pub fn sink(&mut self) -> Result<&mut dyn ByteSink, fmt::Error> {
        self.flush()?;
        Ok(&mut *self.sink)
    }
}

impl Write for LineBuf<'_> {
    #[inline]
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let b = s.as_bytes();
        if self.len + b.len() > self.buf.len() {
            self.flush()?;
            if b.len() > self.buf.len() {
                return self.sink.put(b);
            }
        }
        self.buf[self.len..self.len + b.len()].copy_from_slice(b);
        self.len += b.len();
        Ok(())
    }

    #[inline]
    fn write_char(&mut self, c: char) -> fmt::Result {
        if c.is_ascii() && self.len < self.buf.len() {
            self.buf[self.len] = c as u8;
            self.len += 1;
            Ok(())
        } else {
            self.write_str(c.encode_utf8(&mut [0; 4]))
        }
    }
}

impl Drop for LineBuf<'_> {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

/// Text written through `fmt::Write` also reaches a [`ByteSink`].
pub struct TextToBytes<'b>(pub &'b mut dyn ByteSink);

impl Write for TextToBytes<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0.put(s.as_bytes())
    }
}

/// `seq_print_ip_sym`: `0` for a null address, else the symbol name (with `+0xoff/0xsize` if
/// `offset`, and ` [module]` for module symbols), or `0x%08lx` when no symbol covers it; then
/// ` <%016lx>` if `addr`.
pub fn write_ip_sym(
    out: &mut dyn Write,
    syms: &dyn SymbolTable,
    ip: u64,
    offset: bool,
    addr: bool,
) -> fmt::Result {
    if ip == 0 {
        return out.write_char('0');
    }
    match syms.lookup(ip) {
        Some(sym) => {
            out.write_str(sym.name)?;
            if offset {
                write!(out, "+{:#x}/{:#x}", ip - sym.addr, sym.size)?;
            }
            if let Some(m) = sym.module {
                write!(out, " [{m}]")?;
            }
        }
        None if offset => write!(out, "{ip:#x}")?,
        None => write!(out, "0x{ip:08x}")?,
    }
    if addr {
        write!(out, " <{ip:016x}>")?;
    }
    Ok(())
}

/// `%ps`: the symbol name only.
pub fn write_sym(out: &mut dyn Write, syms: &dyn SymbolTable, ip: u64) -> fmt::Result {
    match syms.lookup(ip) {
        Some(sym) => {
            out.write_str(sym.name)?;
            if let Some(m) = sym.module {
                write!(out, " [{m}]")?;
            }
            Ok(())
        }
        None => write!(out, "0x{ip:x}"),
    }
}

/// The duration marks of `trace_find_mark`: the first whose threshold `d` (ns) strictly
/// exceeds, else a space.
pub fn trace_find_mark(d: u64) -> char {
    const MARKS: [(u64, char); 6] = [
        (1_000_000_000, '$'),
        (100_000_000, '@'),
        (10_000_000, '*'),
        (1_000_000, '#'),
        (100_000, '!'),
        (10_000, '+'),
    ];
    MARKS.iter().find(|(v, _)| d > *v).map_or(' ', |&(_, c)| c)
}

/// `ns2usecs`: nanoseconds to microseconds, rounded to nearest.
pub const fn ns2usecs(ns: u64) -> u64 {
    ns.wrapping_add(500) / 1000
}

/// `trace_print_time`: `" %5lu.%06lu"` (rounded µs) for ns clocks, else `" %12llu"`.
pub fn write_time(out: &mut dyn Write, ts: u64, unit: ClockUnit) -> fmt::Result {
    if unit == ClockUnit::Nanoseconds {
        let us = ns2usecs(ts);
        write!(out, " {:5}.{:06}", us / 1_000_000, us % 1_000_000)
    } else {
        write!(out, " {ts:12}")
    }
}

/// `trace_print_graph_duration`: integer µs, then (if fewer than 7 digits) `.` and the ns
/// remainder cut so the number stays within 8 characters, then `" us "` and padding to 8.
pub fn write_graph_duration(out: &mut dyn Write, duration_ns: u64) -> fmt::Result {
    let us = duration_ns / 1000;
    let ns_rem = duration_ns % 1000;
    let mut len = digits(us);
    write!(out, "{us}")?;
    if len < 7 {
        // snprintf(nsecs_str, min(5, 8 - len), "%03lu") keeps at most min(4, 7 - len) chars.
        let keep = (7 - len).min(4);
        let mut buf = [0u8; 8];
        let n = fmt_u64(&mut buf, ns_rem, 3);
        let keep = keep.min(n);
        out.write_char('.')?;
        out.write_str(core::str::from_utf8(&buf[..keep]).unwrap_or(""))?;
        len += keep + 1;
    }
    out.write_str(" us ")?;
    for _ in len..8 {
        out.write_char(' ')?;
    }
    Ok(())
}

/// Decimal digits of `v` (1 for 0).
pub(crate) fn digits(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 10 {
        v /= 10;
        n += 1;
    }
    n
}

/// Writes `v` zero-padded to at least `min_width` digits into `buf`; returns the length.
fn fmt_u64(buf: &mut [u8; 8], v: u64, min_width: usize) -> usize {
    let n = digits(v).max(min_width).min(8);
    let mut x = v;
    for i in (0..n).rev() {
        buf[i] = b'0' + (x % 10) as u8;
        x /= 10;
    }
    n
}

/// Writes bytes as text, replacing invalid UTF-8 the way a terminal would see it (lossy).
pub(crate) fn write_bytes_lossy(out: &mut dyn Write, mut b: &[u8]) -> fmt::Result {
    loop {
        match core::str::from_utf8(b) {
            Ok(s) => return out.write_str(s),
            Err(e) => {
                let (good, rest) = b.split_at(e.valid_up_to());
                // `good` is valid UTF-8: it ends where `valid_up_to` says.
                out.write_str(core::str::from_utf8(good).unwrap_or(""))?;
                out.write_char('\u{fffd}')?;
                let skip = e.error_len().unwrap_or(rest.len()).max(1);
                b = &rest[skip.min(rest.len())..];
                if b.is_empty() {
                    return Ok(());
                }
            }
        }
    }
}

/// A writer that holds back one trailing newline, so a message can be closed on the same line
/// (function_graph comments strip the message's final `\n`).
pub(crate) struct StripNewline<'w> {
    inner: &'w mut dyn Write,
    pending: bool,
}

impl<'w> StripNewline<'w> {
    pub(crate) fn new(inner: &'w mut dyn Write) -> Self {
        StripNewline {
            inner,
            pending: false,
        }
    }
}

impl Write for StripNewline<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if s.is_empty() {
            return Ok(());
        }
        if self.pending {
            self.inner.write_char('\n')?;
            self.pending = false;
        }
        match s.strip_suffix('\n') {
            Some(head) => {
                self.inner.write_str(head)?;
                self.pending = true;
                Ok(())
            }
            None => self.inner.write_str(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct S(heapless::Buf);
    mod heapless {
        pub struct Buf(pub [u8; 256], pub usize);
    }
    impl Write for S {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            let b = &mut self.0;
            b.0[b.1..b.1 + s.len()].copy_from_slice(s.as_bytes());
            b.1 += s.len();
            Ok(())
        }
    }
    fn run(f: impl FnOnce(&mut dyn Write) -> fmt::Result) -> S {
        let mut s = S(heapless::Buf([0; 256], 0));
        f(&mut s).unwrap();
        s
    }
    impl S {
        fn s(&self) -> &str {
            core::str::from_utf8(&self.0.0[..self.0.1]).unwrap()
        }
    }

    #[test]
    fn graph_durations_match_the_kernel_examples() {
        for (ns, want) in [
            (544, "0.544 us    "),
            (317_132, "317.132 us  "),
            (1_234_567, "1234.567 us "),
            (12_345_678, "12345.67 us "),
            (123_456_789, "123456.7 us "),
            (1_234_567_000, "1234567 us  "),
            (0, "0.000 us    "),
        ] {
            assert_eq!(run(|o| write_graph_duration(o, ns)).s(), want, "{ns}");
        }
    }

    #[test]
    fn marks_are_strict() {
        assert_eq!(trace_find_mark(10_000), ' ');
        assert_eq!(trace_find_mark(10_001), '+');
        assert_eq!(trace_find_mark(100_001), '!');
        assert_eq!(trace_find_mark(1_000_001), '#');
        assert_eq!(trace_find_mark(10_000_001), '*');
        assert_eq!(trace_find_mark(100_000_001), '@');
        assert_eq!(trace_find_mark(1_000_000_001), '$');
    }

    #[test]
    fn times_round_to_microseconds() {
        assert_eq!(
            run(|o| write_time(o, 25_053_148_816, ClockUnit::Nanoseconds)).s(),
            "    25.053149"
        );
        assert_eq!(
            run(|o| write_time(o, 5, ClockUnit::Ticks)).s(),
            "            5"
        );
    }

    #[test]
    fn strip_newline_holds_back_only_the_last() {
        let s = run(|o| {
            let mut w = StripNewline::new(o);
            w.write_str("a\n")?;
            w.write_str("b\n")?;
            w.write_str("")
        });
        assert_eq!(s.s(), "a\nb");
    }
}
