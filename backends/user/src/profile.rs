//! The function profiler of a traced process tree, as the live mount's
//! `trace_stat/function<cpu>` shows it: the agents count calls per CPU and per site into a
//! counters file in each image's directory ([`ftrace_agent::profile`]), and one CPU's
//! counters of every image are summed here per function name (the tree's processes map the
//! same functions at different addresses, as its filter files resolve them by name), then
//! printed by ftrace-tracers' profile printer.
//!
//! Invariant: a function's row is the sum of its counters on that CPU (the CPU a call ran on,
//! as the live mount files events by the CPU they were recorded on) in every image of the
//! tree, running or gone, whose file is of the profile's generation (an earlier
//! `function_profile_enabled` left older files behind).

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use ftrace_core::symbols::SortedSymbols;
use ftrace_tracers::profiler::{ProfileMode, ProfileRecord, ProfileTable};

use ftrace_agent::profile::{FILE, HEADER_WORDS, MAGIC};
use ftrace_core::symbols::SymbolTable;

/// One counter of an image's counters file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProfileLine {
    /// The CPU the calls ran on.
    pub cpu: u32,
    /// The site.
    pub addr: u64,
    /// Calls.
    pub hits: u64,
    /// Total time in ns (function_graph returns; 0 otherwise).
    pub time: u64,
    /// Sum of squared times, ns² (wrapping).
    pub time_squared: u64,
}

/// The counters with a hit in image directory `dir`'s counters file of profile
/// `generation`, each named by the image's `symbols` text (none: no file, another
/// generation, or a file cut short).
pub fn read_counters(dir: &Path, symbols: &str, generation: u64) -> Vec<(String, ProfileLine)> {
    let Ok(bytes) = std::fs::read(dir.join(FILE)) else {
        return Vec::new();
    };
    let w: Vec<u64> = bytes
        .chunks_exact(8)
        .map(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes")))
        .collect();
    let (Some(&magic), Some(&gen_), Some(&n), Some(&cpus)) =
        (w.first(), w.get(1), w.get(2), w.get(3))
    else {
        return Vec::new();
    };
    let (n, cpus) = (n as usize, cpus as usize);
    let cells = HEADER_WORDS + n;
    if magic != MAGIC || gen_ != generation || w.len() < cells + 3 * n * cpus {
        return Vec::new();
    }
    let syms = crate::recording::parse_symbols(symbols);
    let mut out = Vec::new();
    for (i, &addr) in w[HEADER_WORDS..cells].iter().enumerate() {
        for cpu in 0..cpus {
            let c = &w[cells + 3 * (i * cpus + cpu)..][..3];
            if c[0] == 0 {
                continue;
            }
            let Some(s) = syms.lookup(addr) else {
                continue;
            };
            out.push((
                s.name.to_string(),
                ProfileLine {
                    cpu: cpu as u32,
                    addr,
                    hits: c[0],
                    time: c[1],
                    time_squared: c[2],
                },
            ));
        }
    }
    out
}

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
