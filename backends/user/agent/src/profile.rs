//! The function profiler in the program (`function_profile_enabled`): every call of a
//! profiled site is counted here, in the full-save entry handler, per CPU and per site,
//! whatever the tracer and `tracing_on` (as the kernel's `function_profile_call`), and
//! under function_graph each return adds its duration and squared duration
//! (`profile_graph_return`, `graph-time` on). The counts come from the calls themselves, not
//! from the ring, so they are exact when the ring drops events.
//!
//! Invariant: a counters table is never freed (a thread may be counting into it when a
//! new one is published), and counting touches only atomics: no lock, no allocation, no
//! instrumented code. While profiling is on the assembly fast paths are off
//! ([`crate::handler::update_fast_path`]): every call reaches the Rust handlers.

use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::fmt::Write as _;

/// Profiling is on: the handlers count.
pub static PROFILING: AtomicBool = AtomicBool::new(false);

/// Nanoseconds per trace-clock tick as 32.32 fixed point (0: the clock is in ns already).
static TICK_MULT: AtomicU64 = AtomicU64::new(0);

/// One site's counters on one CPU (`struct ftrace_profile`).
#[derive(Default)]
struct Cell {
    hits: AtomicU64,
    time: AtomicU64,
    time_squared: AtomicU64,
}

/// The program's sites (sorted), whether each is profiled (the global filter), and their
/// counters, `cpus` cells per site.
struct Counters {
    addrs: Box<[u64]>,
    profiled: Box<[AtomicBool]>,
    cpus: usize,
    cells: Box<[Cell]>,
}

impl Counters {
    fn cell(&self, ip: u64, cpu: u32) -> Option<&Cell> {
        let i = self.addrs.binary_search(&ip).ok()?;
        if !self.profiled[i].load(Ordering::Relaxed) {
            return None;
        }
        let cpu = (cpu as usize).min(self.cpus - 1);
        self.cells.get(i * self.cpus + cpu)
    }
}

/// The table in force (null: never profiled).
static TABLE: AtomicPtr<Counters> = AtomicPtr::new(core::ptr::null_mut());

fn table() -> Option<&'static Counters> {
    // SAFETY: tables are leaked, never freed.
    unsafe { TABLE.load(Ordering::Acquire).as_ref() }
}

/// The CPUs a table has cells for.
fn possible_cpus() -> usize {
    // SAFETY: no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
    usize::try_from(n).unwrap_or(1).max(1)
}

/// Turns profiling on over the program's `sites` (zeroed counters: writing 1 restarts the
/// profile) or off (the counts stay readable); while on, a site is counted when `selected`
/// says so (the filter files can change under a running profile, as the kernel's global
/// filter). `tsc`: the trace clock counts TSC ticks (its rate is measured here, off the hot
/// paths, the first time). Sites found after profiling started are counted from the next
/// start.
pub fn set(on: bool, sites: &[u64], selected: impl Fn(u64) -> bool, tsc: bool) {
    let was = PROFILING.load(Ordering::Relaxed);
    if on && !was {
        TICK_MULT.store(
            if tsc { crate::thresh::rate().mult } else { 0 },
            Ordering::Relaxed,
        );
        let mut addrs: Vec<u64> = sites.to_vec();
        addrs.sort_unstable();
        addrs.dedup();
        let cpus = possible_cpus();
        let cells = (0..addrs.len() * cpus).map(|_| Cell::default()).collect();
        let profiled = addrs.iter().map(|_| AtomicBool::new(false)).collect();
        let t = Box::new(Counters {
            addrs: addrs.into(),
            profiled,
            cpus,
            cells,
        });
        // The old table is leaked: a thread may still be counting into it.
        TABLE.store(Box::into_raw(t), Ordering::Release);
    }
    if on && let Some(t) = table() {
        for (a, p) in t.addrs.iter().zip(&t.profiled) {
            p.store(selected(*a), Ordering::Relaxed);
        }
    }
    PROFILING.store(on, Ordering::Release);
}

/// A call of the site at `ip` on `cpu`.
#[inline]
pub fn hit(ip: u64, cpu: u32) {
    if let Some(c) = table().and_then(|t| t.cell(ip, cpu)) {
        c.hits.fetch_add(1, Ordering::Relaxed);
    }
}

/// A return from the site at `ip` on `cpu` after `ticks` trace-clock units.
#[inline]
pub fn add_time(ip: u64, cpu: u32, ticks: u64) {
    let Some(c) = table().and_then(|t| t.cell(ip, cpu)) else {
        return;
    };
    let mult = TICK_MULT.load(Ordering::Relaxed);
    let ns = if mult == 0 {
        ticks
    } else {
        ((u128::from(ticks) * u128::from(mult)) >> 32) as u64
    };
    c.time.fetch_add(ns, Ordering::Relaxed);
    c.time_squared
        .fetch_add(ns.wrapping_mul(ns), Ordering::Relaxed);
}

/// The `PROFILE` answer: `cpu\taddr\thits\ttime\ttime_squared` (hex address, times in ns) for
/// every counter with a hit, then `.`.
pub fn report() -> String {
    let mut out = String::new();
    if let Some(t) = table() {
        for (i, &addr) in t.addrs.iter().enumerate() {
            for cpu in 0..t.cpus {
                let c = &t.cells[i * t.cpus + cpu];
                let hits = c.hits.load(Ordering::Relaxed);
                if hits != 0 {
                    let _ = writeln!(
                        out,
                        "{cpu}\t{addr:x}\t{hits}\t{}\t{}",
                        c.time.load(Ordering::Relaxed),
                        c.time_squared.load(Ordering::Relaxed)
                    );
                }
            }
        }
    }
    out.push_str(".\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_per_site_and_cpu() {
        set(true, &[0x2000, 0x1000, 0x3000], |ip| ip != 0x3000, false);
        hit(0x1000, 0);
        hit(0x1000, 0);
        hit(0x2000, 0);
        hit(0x3000, 0); // not selected
        hit(0x4000, 0); // not a site
        add_time(0x2000, 0, 5);
        add_time(0x2000, 0, 7);
        set(false, &[], |_| false, false);
        let r = report();
        assert!(r.contains("0\t1000\t2\t0\t0\n"), "{r}");
        assert!(r.contains("0\t2000\t1\t12\t74\n"), "{r}");
        assert!(r.ends_with(".\n"));
        assert!(!r.contains("3000"));
        // On again: a fresh profile.
        set(true, &[0x1000], |_| true, false);
        assert_eq!(report(), ".\n");
        set(false, &[], |_| false, false);
    }
}
