//! The function profiler: `function_profile_enabled` and `trace_stat/function<cpu>`.
//!
//! One [`ProfileTable`] per CPU counts hits per function and, in graph mode, the total time
//! and the sum of squared times, from which `trace_stat` prints the average and the variance
//! (`s^2`) with integer arithmetic only. Invariant: a row's `Avg` is `time / hits` and its
//! `s^2` is `(n·Σx² − (Σx)²) / (n·(n−1)·1000)` in wrapping 64-bit arithmetic, exactly as the
//! kernel computes them, so the printed numbers match its output.

use alloc::vec::Vec;
use core::fmt::{self, Write};

use ftrace_core::Errno;
use ftrace_core::symbols::SymbolTable;

use crate::output::write_graph_duration;
use ftrace_core::sync::{AtomicBool, Ordering};

/// What the profiler measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProfileMode {
    /// Hits only (`function` mode: the kernel without function_graph).
    Hits,
    /// Hits and time per call, from function_graph's entries and returns.
    Graph,
}

/// The `graph-time` trace option: whether a function's time includes the time of the
/// functions it calls (on, the default) or only its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GraphTime {
    /// `graph-time` on: a function's whole duration.
    Included,
    /// `graph-time` off: the duration minus the hooked children's.
    Excluded,
}

/// One function's counters (`struct ftrace_profile`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProfileRecord {
    /// The function's address.
    pub ip: u64,
    /// Calls.
    pub hits: u64,
    /// Total time, ns.
    pub time: u64,
    /// Sum of squared times, ns² (wrapping).
    pub time_squared: u64,
}

/// One CPU's profile: an open-addressing hash of [`ProfileRecord`]s.
#[derive(Clone, Debug)]
pub struct ProfileTable {
    slots: Vec<ProfileRecord>,
    used: usize,
}

impl Default for ProfileTable {
    fn default() -> Self {
        Self::with_capacity(1024)
    }
}

impl ProfileTable {
    /// A table for about `n` functions (grown as needed).
    pub fn with_capacity(n: usize) -> Self {
        let cap = (n.max(8) * 2).next_power_of_two();
        ProfileTable {
            slots: alloc::vec![ProfileRecord::default(); cap],
            used: 0,
        }
    }

    fn slot(&mut self, ip: u64) -> &mut ProfileRecord {
        if (self.used + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let mask = self.slots.len() - 1;
        // Fibonacci hashing of the address.
        let mut i = (ip.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize & mask;
        loop {
            let ip_at = self.slots[i].ip;
            if ip_at == ip {
                return &mut self.slots[i];
            }
            if ip_at == 0 {
                self.used += 1;
                self.slots[i].ip = ip;
                return &mut self.slots[i];
            }
            i = (i + 1) & mask;
        }
    }

    fn grow(&mut self) {
        let bigger = alloc::vec![ProfileRecord::default(); self.slots.len() * 2];
        let old = core::mem::replace(&mut self.slots, bigger);
        self.used = 0;
        for r in old.into_iter().filter(|r| r.ip != 0) {
            *self.slot(r.ip) = r;
        }
    }

    /// A call to `ip` (`function_profile_call`).
    pub fn hit(&mut self, ip: u64) {
        if ip != 0 {
            self.slot(ip).hits += 1;
        }
    }

    /// A return from `ip` that took `ns` (`profile_graph_return`).
    pub fn add_time(&mut self, ip: u64, ns: u64) {
        if ip != 0 {
            let r = self.slot(ip);
            r.time = r.time.wrapping_add(ns);
            r.time_squared = r.time_squared.wrapping_add(ns.wrapping_mul(ns));
        }
    }

    /// A function_graph return (`profile_graph_return`): adds its duration, with hooked
    /// children's time included or excluded as the `graph-time` option says.
    pub fn graph_return(&mut self, exit: &crate::function_graph::GraphExit, graph_time: GraphTime) {
        let ns = match graph_time {
            GraphTime::Included => exit.duration,
            GraphTime::Excluded => exit.self_time,
        };
        self.add_time(exit.func, ns);
    }

    /// Adds counters taken elsewhere (another process's or thread's) to `r.ip`'s record.
    pub fn add(&mut self, r: &ProfileRecord) {
        if r.ip != 0 {
            let s = self.slot(r.ip);
            s.hits += r.hits;
            s.time = s.time.wrapping_add(r.time);
            s.time_squared = s.time_squared.wrapping_add(r.time_squared);
        }
    }

    /// The record of `ip`, if it was hit.
    pub fn get(&self, ip: u64) -> Option<ProfileRecord> {
        self.slots.iter().find(|r| r.ip == ip && ip != 0).copied()
    }

    /// Forgets everything (writing `function_profile_enabled` resets the counters).
    pub fn clear(&mut self) {
        self.slots
            .iter_mut()
            .for_each(|r| *r = ProfileRecord::default());
        self.used = 0;
    }

    /// The records with at least one hit, sorted as `trace_stat` shows them: by total time
    /// (graph mode) or hits, largest first.
    pub fn sorted(&self, mode: ProfileMode) -> Vec<ProfileRecord> {
        let mut v: Vec<ProfileRecord> = self
            .slots
            .iter()
            .filter(|r| r.ip != 0 && r.hits != 0)
            .copied()
            .collect();
        match mode {
            ProfileMode::Graph => v.sort_by(|a, b| b.time.cmp(&a.time).then(a.ip.cmp(&b.ip))),
            ProfileMode::Hits => v.sort_by(|a, b| b.hits.cmp(&a.hits).then(a.ip.cmp(&b.ip))),
        }
        v
    }

    /// `trace_stat/function<cpu>`: the header and one row per function. `thresh_ns` is
    /// `tracing_thresh` (graph mode skips rows whose average is below it).
    pub fn write_stat(
        &self,
        out: &mut dyn Write,
        syms: &dyn SymbolTable,
        mode: ProfileMode,
        thresh_ns: u64,
    ) -> fmt::Result {
        match mode {
            ProfileMode::Graph => out.write_str(
                "  Function                               Hit    Time            Avg             s^2\n  \
                 --------                               ---    ----            ---             ---\n",
            )?,
            ProfileMode::Hits => out.write_str(
                "  Function                               Hit\n  \
                 --------                               ---\n",
            )?,
        }
        for r in self.sorted(mode) {
            write_stat_row(out, syms, &r, mode, thresh_ns)?;
        }
        Ok(())
    }
}

/// One `trace_stat` row (`function_stat_show`).
pub fn write_stat_row(
    out: &mut dyn Write,
    syms: &dyn SymbolTable,
    r: &ProfileRecord,
    mode: ProfileMode,
    thresh_ns: u64,
) -> fmt::Result {
    let avg = r.time / r.hits.max(1);
    if mode == ProfileMode::Graph && thresh_ns != 0 && avg < thresh_ns {
        return Ok(());
    }
    let name = syms.lookup(r.ip).map_or("", |s| s.name);
    write!(out, "  {name:<30.30}  {:10}", r.hits)?;
    if mode == ProfileMode::Graph {
        out.write_str("    ")?;
        let n = r.hits;
        let denom = n.wrapping_mul(n.wrapping_sub(1)).wrapping_mul(1000);
        let s2 = n
            .wrapping_mul(r.time_squared)
            .wrapping_sub(r.time.wrapping_mul(r.time))
            .checked_div(denom)
            .unwrap_or(0);
        write_graph_duration(out, r.time)?;
        out.write_str("    ")?;
        write_graph_duration(out, avg)?;
        out.write_str("    ")?;
        write_graph_duration(out, s2)?;
    }
    out.write_char('\n')
}

/// `function_profile_enabled`.
#[derive(Debug, Default)]
pub struct ProfilerSwitch {
    enabled: AtomicBool,
}

impl ProfilerSwitch {
    /// Off.
    pub const fn new() -> Self {
        ProfilerSwitch {
            enabled: AtomicBool::new(false),
        }
    }

    /// Whether profiling is on.
    pub fn is_enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// A write to the file: a decimal number, non-zero turns it on. Returns whether the state
    /// changed (the caller then resets the tables when turning on).
    pub fn write(&self, text: &str) -> Result<bool, Errno> {
        let v: u64 = text.trim().parse().map_err(|_| Errno::EINVAL)?;
        let on = v != 0;
        Ok(self.enabled.swap(on, Ordering::Relaxed) != on)
    }

    /// The file's content: `0\n` or `1\n`.
    pub fn read(&self) -> &'static str {
        if self.is_enabled() { "1\n" } else { "0\n" }
    }
}
