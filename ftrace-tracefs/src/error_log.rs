//! `error_log`: the last [`ERROR_LOG_MAX`] extended errors of an instance, in the kernel's format.
//!
//! ```text
//! [  125.746853] trace_kprobe: error: Invalid probed address or symbol
//!   Command: p:myprobe nonexistent_sym_xyz
//!                      ^
//! ```
//! Invariant: the log never holds more than [`ERROR_LOG_MAX`] entries; a new one evicts the oldest.

use alloc::collections::VecDeque;
use alloc::string::String;
use core::fmt;

/// `TRACING_LOG_ERRS_MAX`.
pub const ERROR_LOG_MAX: usize = 8;
/// `TRACING_LOG_LOC_MAX`: the location string is cut to this many bytes.
pub const ERROR_LOG_LOC_MAX: usize = 128;
/// `MAX_FILTER_STR_VAL`: the command is cut to this many bytes (`error_log` keeps it in a
/// 256-byte buffer in older kernels; 6.12 allocates it, we keep the same generous bound).
pub const ERROR_LOG_CMD_MAX: usize = 4096;

/// One logged error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorEntry {
    /// Local clock at the time of the error, ns.
    pub ts_ns: u64,
    /// Where (`"trace_kprobe"`, `"hist:sched:sched_switch"`).
    pub location: String,
    /// What went wrong (`"Invalid probed address or symbol"`).
    pub message: &'static str,
    /// The command that was written.
    pub command: String,
    /// The byte position in `command` the caret points at.
    pub pos: u16,
}

/// An instance's error log.
#[derive(Clone, Debug, Default)]
pub struct ErrorLog {
    entries: VecDeque<ErrorEntry>,
}

fn cut(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    String::from(&s[..end])
}

impl ErrorLog {
    /// Adds an entry (`tracing_log_err()`), evicting the oldest when full.
    pub fn log(
        &mut self,
        ts_ns: u64,
        location: &str,
        message: &'static str,
        command: &str,
        pos: u16,
    ) {
        if self.entries.len() == ERROR_LOG_MAX {
            self.entries.pop_front();
        }
        self.entries.push_back(ErrorEntry {
            ts_ns,
            location: cut(location, ERROR_LOG_LOC_MAX),
            message,
            command: cut(command, ERROR_LOG_CMD_MAX),
            pos,
        });
    }

    /// Empties the log (`echo > error_log`).
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// The entries, oldest first.
    pub fn entries(&self) -> impl Iterator<Item = &ErrorEntry> {
        self.entries.iter()
    }

    /// Writes the file's text.
    pub fn write_to(&self, w: &mut dyn fmt::Write) -> fmt::Result {
        for e in &self.entries {
            let sec = e.ts_ns / 1_000_000_000;
            let usec = (e.ts_ns % 1_000_000_000) / 1000;
            writeln!(
                w,
                "[{sec:5}.{usec:06}] {}: error: {}",
                e.location, e.message
            )?;
            writeln!(w, "  Command: {}", e.command)?;
            writeln!(w, "{:width$}^", "", width = 11 + usize::from(e.pos))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_the_kernel_and_keeps_eight() {
        let mut log = ErrorLog::default();
        log.log(
            125_746_853_123,
            "trace_kprobe",
            "Invalid probed address or symbol",
            "p:myprobe nonexistent_sym_xyz",
            10,
        );
        let mut s = String::new();
        log.write_to(&mut s).unwrap();
        assert_eq!(
            s,
            "[  125.746853] trace_kprobe: error: Invalid probed address or symbol\n  Command: p:myprobe nonexistent_sym_xyz\n                     ^\n"
        );
        for i in 0..10 {
            log.log(i, "x", "y", "z", 0);
        }
        assert_eq!(log.entries().count(), ERROR_LOG_MAX);
        assert_eq!(log.entries().next().map(|e| e.ts_ns), Some(2));
        log.clear();
        assert_eq!(log.entries().count(), 0);
    }
}
