//! The function profiler in the program (`function_profile_enabled`): every call of a
//! profiled site is counted here, in the full-save entry handler, per CPU and per site,
//! whatever the tracer and `tracing_on` (as the kernel's `function_profile_call`), and
//! under function_graph each return adds its duration and squared duration
//! (`profile_graph_return`, `graph-time` on). The counts come from the calls themselves, not
//! from the ring, so they are exact when the ring drops events.
//!
//! The counters live in a shared file mapping, `DIR/<pid>.<n>/profile` ([`FILE`]), so the
//! tool reads them while the program runs and after it exited, as it reads the rings. Layout
//! (native-endian `u64`s): [`MAGIC`], the profile's generation (the tool's number for one
//! `echo 1 > function_profile_enabled`), the number of sites `n`, the number of CPUs `c`,
//! the `n` site addresses (sorted), then `n * c` cells of three counters (hits, total ns,
//! sum of squared ns), site-major.
//!
//! Invariant: a counters table is never unmapped (a thread may be counting into it when a new
//! one is published), and counting touches only atomics: no lock, no allocation, no
//! instrumented code. While profiling is on the assembly fast paths are off
//! ([`crate::handler::update_fast_path`]): every call reaches the Rust handlers.

use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::ffi::CString;
use std::path::Path;

/// The counters file's name in the instance directory.
pub const FILE: &str = "profile";

/// The counters file's first word.
pub const MAGIC: u64 = u64::from_le_bytes(*b"FTPROF01");

/// Words before the site addresses.
pub const HEADER_WORDS: usize = 4;

/// Profiling is on: the handlers count.
pub static PROFILING: AtomicBool = AtomicBool::new(false);

/// Nanoseconds per trace-clock tick as 32.32 fixed point (0: the clock is in ns already).
static TICK_MULT: AtomicU64 = AtomicU64::new(0);

/// One site's counters on one CPU (`struct ftrace_profile`).
#[repr(C)]
struct Cell {
    hits: AtomicU64,
    time: AtomicU64,
    time_squared: AtomicU64,
}

/// The program's sites (sorted), whether each is profiled (the global filter), and their
/// counters, `cpus` cells per site, in the mapping.
struct Counters {
    generation: u64,
    addrs: Box<[u64]>,
    profiled: Box<[AtomicBool]>,
    cpus: usize,
    cells: &'static [Cell],
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

/// Maps `len` zeroed bytes: `DIR/profile` (written under a temporary name, then renamed, so
/// the tool never reads half a header), or anonymous memory when `dir` is `None` or the file
/// cannot be made (the counts then die with the process).
fn map_counters(dir: Option<&Path>, len: usize, header: &[u64]) -> *mut u64 {
    let file = dir.and_then(|d| {
        let tmp = CString::new(d.join(".profile.new").as_os_str().as_encoded_bytes()).ok()?;
        let dst = CString::new(d.join(FILE).as_os_str().as_encoded_bytes()).ok()?;
        Some((tmp, dst))
    });
    if let Some((tmp, dst)) = file {
        // SAFETY: valid paths; the descriptor is ours and closed after mapping.
        unsafe {
            let fd = libc::open(
                tmp.as_ptr(),
                libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC,
                0o644,
            );
            if fd >= 0 {
                let ok = libc::ftruncate(fd, len as libc::off_t) == 0;
                let p = if ok {
                    libc::mmap(
                        core::ptr::null_mut(),
                        len,
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_SHARED,
                        fd,
                        0,
                    )
                } else {
                    libc::MAP_FAILED
                };
                libc::close(fd);
                if p != libc::MAP_FAILED {
                    let w = p.cast::<u64>();
                    core::ptr::copy_nonoverlapping(header.as_ptr(), w, header.len());
                    libc::rename(tmp.as_ptr(), dst.as_ptr());
                    return w;
                }
                libc::unlink(tmp.as_ptr());
            }
        }
    }
    // SAFETY: an anonymous private mapping.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return core::ptr::null_mut();
    }
    let w = p.cast::<u64>();
    // SAFETY: the mapping holds at least the header.
    unsafe { core::ptr::copy_nonoverlapping(header.as_ptr(), w, header.len()) };
    w
}

/// Publishes a fresh, zeroed table for `addrs` (sorted) in `dir`, every site profiled as the
/// old table said (a forked child) or not yet.
fn publish(dir: Option<&Path>, generation: u64, addrs: Vec<u64>, like: Option<&Counters>) {
    let cpus = possible_cpus();
    let mut header = vec![MAGIC, generation, addrs.len() as u64, cpus as u64];
    header.extend_from_slice(&addrs);
    let ncells = addrs.len() * cpus;
    let len = (header.len() + 3 * ncells) * 8;
    let w = map_counters(dir, len.max(8), &header);
    if w.is_null() {
        return;
    }
    // SAFETY: the mapping holds the header then `ncells` zeroed cells of three u64s, and is
    // never unmapped; `Cell` is three `AtomicU64`s (`repr(C)`).
    let cells = unsafe { core::slice::from_raw_parts(w.add(header.len()).cast::<Cell>(), ncells) };
    let profiled = addrs
        .iter()
        .map(|a| {
            AtomicBool::new(like.is_some_and(|t| {
                t.addrs
                    .binary_search(a)
                    .is_ok_and(|i| t.profiled[i].load(Ordering::Relaxed))
            }))
        })
        .collect();
    let t = Box::new(Counters {
        generation,
        addrs: addrs.into(),
        profiled,
        cpus,
        cells,
    });
    // The old table is leaked: a thread may still be counting into it.
    TABLE.store(Box::into_raw(t), Ordering::Release);
}

/// Sets the profile: `generation` 0 turns it off (the counts stay readable), another
/// number turns it on; a number other than the table's starts a fresh profile over the
/// program's `sites` in `dir` (writing 1 to `function_profile_enabled` restarts it). While on,
/// a site is counted when `selected` says so (the filter files can change under a running
/// profile, as the kernel's global filter). `tsc`: the trace clock counts TSC ticks (its rate
/// is measured here, off the hot paths, the first time). Sites found after the profile
/// started are counted from the next start.
pub fn set(
    generation: u64,
    dir: Option<&Path>,
    sites: &[u64],
    selected: impl Fn(u64) -> bool,
    tsc: bool,
) {
    let on = generation != 0;
    if on && table().is_none_or(|t| t.generation != generation) {
        TICK_MULT.store(
            if tsc { crate::thresh::rate().mult } else { 0 },
            Ordering::Relaxed,
        );
        let mut addrs = sites.to_vec();
        addrs.sort_unstable();
        addrs.dedup();
        publish(dir, generation, addrs, None);
    }
    if on && let Some(t) = table() {
        for (a, p) in t.addrs.iter().zip(&t.profiled) {
            p.store(selected(*a), Ordering::Relaxed);
        }
    }
    PROFILING.store(on, Ordering::Release);
}

/// Stops counting for now; returns whether profiling was on (for [`after_fork`]).
pub fn suspend() -> bool {
    PROFILING.swap(false, Ordering::Relaxed)
}

/// In a forked child (one thread, before it runs on), whose instance directory is `dir`: its
/// parent's table is the parent's (a shared mapping), so the child counts from zero in a
/// table of its own, and the tree's sum counts each call once; then counting goes on if
/// `profiling` (what [`suspend`] returned at the fork).
pub fn after_fork(dir: Option<&Path>, profiling: bool) {
    if let Some(t) = table() {
        publish(dir, t.generation, t.addrs.to_vec(), Some(t));
    }
    PROFILING.store(profiling, Ordering::Release);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn words(dir: &Path) -> Vec<u64> {
        std::fs::read(dir.join(FILE))
            .unwrap()
            .chunks(8)
            .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
            .collect()
    }

    #[test]
    fn counts_per_site_and_cpu_in_the_file() {
        // PROFILING is process-wide and turns the fast paths off (handler::PROCESS_SWITCHES).
        let _switches = crate::handler::PROCESS_SWITCHES
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let dir = std::env::temp_dir().join(format!("ftrace-profile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        set(
            7,
            Some(&dir),
            &[0x2000, 0x1000, 0x3000],
            |ip| ip != 0x3000,
            false,
        );
        hit(0x1000, 0);
        hit(0x1000, 0);
        hit(0x2000, 0);
        hit(0x3000, 0); // not selected
        hit(0x4000, 0); // not a site
        add_time(0x2000, 0, 5);
        add_time(0x2000, 0, 7);
        set(0, None, &[], |_| false, false);
        let w = words(&dir);
        let cpus = w[3] as usize;
        assert_eq!(w[..3], [MAGIC, 7, 3]);
        assert_eq!(w[4..7], [0x1000, 0x2000, 0x3000]);
        let cell = |site: usize| &w[7 + 3 * site * cpus..][..3];
        assert_eq!(cell(0), [2, 0, 0]);
        assert_eq!(cell(1), [1, 12, 74]);
        assert_eq!(cell(2), [0, 0, 0]);
        // The same generation again: the same profile goes on.
        set(7, Some(&dir), &[0x1000], |_| true, false);
        hit(0x1000, 0);
        assert_eq!(words(&dir)[7], 3);
        // A forked child counts from zero in a file of its own.
        let child = dir.join("child");
        std::fs::create_dir_all(&child).unwrap();
        let was = suspend();
        assert!(was);
        assert_eq!(words(&dir)[7], 3);
        after_fork(Some(&child), was);
        assert!(PROFILING.load(Ordering::Relaxed));
        hit(0x1000, 0);
        assert_eq!(words(&dir)[7], 3);
        assert_eq!(words(&child)[7], 1);
        // A new generation: a fresh profile.
        set(8, Some(&dir), &[0x1000], |_| true, false);
        assert_eq!(words(&dir)[..2], [MAGIC, 8]);
        assert_eq!(words(&dir)[5], 0);
        set(0, None, &[], |_| false, false);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
