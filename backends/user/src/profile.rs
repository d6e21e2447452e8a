//! The function profiler of a traced process tree, as the live mount's
//! `trace_stat/function<cpu>` shows it: the agents count calls per CPU and per site
//! ([`ftrace_agent::profile`]), and one CPU's counters of every process are summed here per
//! function name (the tree's processes map the same functions at different addresses, as its
//! filter files resolve them by name), then printed by ftrace-tracers' profile printer.
//!
//! Invariant: a function's row is the sum of its counters in every linked process on that CPU
//! (the CPU a call ran on, as the live mount files events by the CPU they were recorded on).

use std::collections::BTreeMap;
use std::fmt;

use ftrace_core::symbols::SortedSymbols;
use ftrace_tracers::profiler::{ProfileMode, ProfileRecord, ProfileTable};

use crate::agentctl::ProfileLine;

/// Where the merged rows' stand-in addresses start (a row is keyed by its name: any address
/// that names it in [`TreeProfile`]'s own symbol table will do).
const ROW_BASE: u64 = 0x1000;

/// One CPU's profile of the tree, keyed by function name.
#[derive(Debug, Default)]
pub struct TreeProfile {
    rows: BTreeMap<String, ProfileRecord>,
}

impl TreeProfile {
    /// Sums the counters of `lines` (each with its function's name) that ran on `cpu`.
    pub fn of_cpu(lines: impl IntoIterator<Item = (String, ProfileLine)>, cpu: u32) -> Self {
        let mut rows: BTreeMap<String, ProfileRecord> = BTreeMap::new();
        for (name, l) in lines.into_iter().filter(|(_, l)| l.cpu == cpu) {
            let r = rows.entry(name).or_default();
            r.hits += l.hits;
            r.time = r.time.wrapping_add(l.time);
            r.time_squared = r.time_squared.wrapping_add(l.time_squared);
        }
        TreeProfile { rows }
    }

    /// The calls counted for `name`.
    pub fn hits(&self, name: &str) -> u64 {
        self.rows.get(name).map_or(0, |r| r.hits)
    }

    /// `trace_stat/function<cpu>`: the kernel's header and rows (`mode`: with function_graph,
    /// the time columns; `thresh_ns`: `tracing_thresh`).
    pub fn write_stat(
        &self,
        w: &mut dyn fmt::Write,
        mode: ProfileMode,
        thresh_ns: u64,
    ) -> fmt::Result {
        let mut syms = SortedSymbols::new();
        let mut table = ProfileTable::with_capacity(self.rows.len());
        for (i, (name, r)) in self.rows.iter().enumerate() {
            let ip = ROW_BASE + 16 * i as u64;
            syms.push(name, ip, 16, None);
            table.add(&ProfileRecord { ip, ..*r });
        }
        syms.finish();
        table.write_stat(w, &syms, mode, thresh_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(cpu: u32, addr: u64, hits: u64, time: u64) -> ProfileLine {
        ProfileLine {
            cpu,
            addr,
            hits,
            time,
            time_squared: time * time,
        }
    }

    #[test]
    fn one_cpu_summed_by_name() {
        let lines = vec![
            ("schedule".to_string(), line(0, 0x401000, 3, 0)),
            ("schedule".to_string(), line(0, 0x555000, 2, 0)),
            ("schedule".to_string(), line(1, 0x401000, 7, 0)),
            ("mutex_lock".to_string(), line(0, 0x401100, 9, 0)),
        ];
        let p = TreeProfile::of_cpu(lines, 0);
        assert_eq!(p.hits("schedule"), 5);
        assert_eq!(p.hits("mutex_lock"), 9);
        let mut s = String::new();
        p.write_stat(&mut s, ProfileMode::Hits, 0).unwrap();
        assert_eq!(
            s,
            "  Function                               Hit\n  \
             --------                               ---\n  \
             mutex_lock                               9\n  \
             schedule                                 5\n"
        );
    }

    #[test]
    fn graph_mode_prints_times() {
        let p = TreeProfile::of_cpu([("f".to_string(), line(2, 1, 2, 3000))], 2);
        let mut s = String::new();
        p.write_stat(&mut s, ProfileMode::Graph, 0).unwrap();
        let row = s.lines().nth(2).unwrap();
        assert!(row.starts_with("  f    "), "{s}");
        assert!(row.contains("3.000 us") && row.contains("1.500 us"), "{s}");
    }
}
