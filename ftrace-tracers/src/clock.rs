//! `trace_clock`: the clocks an instance can stamp events with, and how their values print.
//!
//! Invariant: only clocks counting nanoseconds ([`ClockId::in_ns`]) print as `secs.usecs`;
//! the others (`counter`, `uptime`, `x86-tsc`) print their raw value, as the kernel does.

use core::fmt;

// What a clock counts; re-exported for `OutputEnv::clock_unit`.
pub use ftrace_ringbuf::ClockUnit;

/// A trace clock, as listed by `trace_clock` on Linux 6.12 x86_64.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum ClockId {
    /// `local`: per-CPU `sched_clock` (the default).
    #[default]
    Local,
    /// `global`: a clock coherent across CPUs.
    Global,
    /// `counter`: an atomic counter, not a time.
    Counter,
    /// `uptime`: jiffies.
    Uptime,
    /// `perf`: the clock perf uses.
    Perf,
    /// `mono`: `CLOCK_MONOTONIC`.
    Mono,
    /// `mono_raw`: `CLOCK_MONOTONIC_RAW`.
    MonoRaw,
    /// `boot`: `CLOCK_BOOTTIME`.
    Boot,
    /// `tai`: `CLOCK_TAI`.
    Tai,
    /// `x86-tsc`: raw TSC cycles.
    X86Tsc,
}

impl ClockId {
    /// Every clock, in the order `trace_clock` lists them.
    pub const ALL: [ClockId; 10] = [
        ClockId::Local,
        ClockId::Global,
        ClockId::Counter,
        ClockId::Uptime,
        ClockId::Perf,
        ClockId::Mono,
        ClockId::MonoRaw,
        ClockId::Boot,
        ClockId::Tai,
        ClockId::X86Tsc,
    ];

    /// The name `trace_clock` uses.
    pub const fn name(self) -> &'static str {
        match self {
            ClockId::Local => "local",
            ClockId::Global => "global",
            ClockId::Counter => "counter",
            ClockId::Uptime => "uptime",
            ClockId::Perf => "perf",
            ClockId::Mono => "mono",
            ClockId::MonoRaw => "mono_raw",
            ClockId::Boot => "boot",
            ClockId::Tai => "tai",
            ClockId::X86Tsc => "x86-tsc",
        }
    }

    /// Whether the clock counts nanoseconds (`trace_clocks[].in_ns`).
    pub const fn in_ns(self) -> bool {
        !matches!(self, ClockId::Counter | ClockId::Uptime | ClockId::X86Tsc)
    }

    /// What the clock counts, as [`Stats::write_to`](ftrace_ringbuf::Stats::write_to) takes it.
    pub const fn unit(self) -> ClockUnit {
        if self.in_ns() {
            ClockUnit::Nanoseconds
        } else {
            ClockUnit::Ticks
        }
    }

    /// The clock called `name`.
    pub fn by_name(name: &str) -> Option<ClockId> {
        Self::ALL.iter().copied().find(|c| c.name() == name.trim())
    }

    /// Parses a `trace_clock` file's content (`[local] global counter ...`): the bracketed
    /// name, or a bare single name.
    pub fn parse_listing(text: &str) -> Option<ClockId> {
        let text = text.trim();
        if let Some(start) = text.find('[') {
            let end = text[start..].find(']')? + start;
            return Self::by_name(&text[start + 1..end]);
        }
        Self::by_name(text)
    }

    /// Writes the `trace_clock` file with `self` selected.
    pub fn write_listing(self, out: &mut dyn fmt::Write) -> fmt::Result {
        for (i, c) in Self::ALL.iter().enumerate() {
            if i > 0 {
                out.write_char(' ')?;
            }
            if *c == self {
                write!(out, "[{}]", c.name())?;
            } else {
                out.write_str(c.name())?;
            }
        }
        out.write_char('\n')
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listing_round_trips() {
        let mut s = heapless_string();
        ClockId::Local.write_listing(&mut s).unwrap();
        assert_eq!(
            s.as_str(),
            "[local] global counter uptime perf mono mono_raw boot tai x86-tsc\n"
        );
        assert_eq!(ClockId::parse_listing(s.as_str()), Some(ClockId::Local));
        assert_eq!(ClockId::parse_listing("counter\n"), Some(ClockId::Counter));
        assert_eq!(
            ClockId::parse_listing("local [x86-tsc]"),
            Some(ClockId::X86Tsc)
        );
        assert!(!ClockId::X86Tsc.in_ns() && ClockId::Mono.in_ns());
    }

    struct Buf {
        b: [u8; 128],
        n: usize,
    }
    impl Buf {
        fn as_str(&self) -> &str {
            core::str::from_utf8(&self.b[..self.n]).unwrap()
        }
    }
    impl fmt::Write for Buf {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            self.b[self.n..self.n + s.len()].copy_from_slice(s.as_bytes());
            self.n += s.len();
            Ok(())
        }
    }
    fn heapless_string() -> Buf {
        Buf { b: [0; 128], n: 0 }
    }
}
