//! The platform primitives live patching needs: writable text for the length of a batch (W^X),
//! core serialisation (`membarrier(PRIVATE_EXPEDITED_SYNC_CORE)`), and stopping every other
//! thread (a real-time signal whose handler parks the thread).
//!
//! Invariant: text pages are writable only between [`TextWindow::open`] and its drop, which puts
//! them back to `PROT_READ | PROT_EXEC`; a parked thread resumes only after the patcher has
//! finished writing, and never at an address inside a multi-byte site.

use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};

const PAGE: u64 = 4096;

/// Text pages made writable for one batch; restored to R-X on drop.
pub struct TextWindow {
    ranges: Vec<(u64, u64)>,
}

impl TextWindow {
    /// Makes the pages holding `[addr, addr + len)` for every `(addr, len)` writable (and still
    /// executable: other threads run there).
    pub fn open(spans: impl IntoIterator<Item = (u64, usize)>) -> std::io::Result<Self> {
        let mut pages: Vec<(u64, u64)> = spans
            .into_iter()
            .map(|(a, n)| (a & !(PAGE - 1), (a + n as u64).div_ceil(PAGE) * PAGE))
            .collect();
        pages.sort_unstable();
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        for (lo, hi) in pages {
            match ranges.last_mut() {
                Some(last) if lo <= last.1 => last.1 = last.1.max(hi),
                _ => ranges.push((lo, hi)),
            }
        }
        let w = TextWindow { ranges };
        for &(lo, hi) in &w.ranges {
            // SAFETY: the range covers mapped text pages of a loaded object.
            let r = unsafe {
                libc::mprotect(
                    lo as *mut _,
                    (hi - lo) as usize,
                    libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC,
                )
            };
            if r != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(w)
    }
}

impl Drop for TextWindow {
    fn drop(&mut self) {
        for &(lo, hi) in &self.ranges {
            // SAFETY: as in `open`.
            unsafe {
                libc::mprotect(
                    lo as *mut _,
                    (hi - lo) as usize,
                    libc::PROT_READ | libc::PROT_EXEC,
                )
            };
        }
    }
}

/// Writes `bytes` at `addr` (inside an open [`TextWindow`]).
///
/// # Safety
/// `addr..addr + bytes.len()` must be writable text that no thread is executing in a way the
/// calling protocol does not allow for.
pub unsafe fn write_text(addr: u64, bytes: &[u8]) {
    for (i, &b) in bytes.iter().enumerate() {
        // SAFETY: the caller's contract; volatile so every byte store happens, in order.
        unsafe { core::ptr::write_volatile((addr + i as u64) as *mut u8, b) };
    }
}

const MEMBARRIER_CMD_QUERY: libc::c_int = 0;
const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;
const MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE: libc::c_int = 1 << 5;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE: libc::c_int = 1 << 6;

/// 0: unknown/unavailable, 1: PRIVATE_EXPEDITED, 2: SYNC_CORE.
static SYNC_MODE: AtomicU32 = AtomicU32::new(0);

fn membarrier(cmd: libc::c_int) -> libc::c_long {
    // SAFETY: membarrier takes two integer arguments and touches no user memory.
    unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0, 0) }
}

/// Registers this process for core-serialising membarriers (again after `fork`: registration
/// belongs to the address space). Returns whether SYNC_CORE is available.
pub fn register_sync_core() -> bool {
    let q = membarrier(MEMBARRIER_CMD_QUERY);
    if q > 0
        && q as libc::c_int & MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE != 0
        && membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE) == 0
    {
        SYNC_MODE.store(2, Ordering::Relaxed);
        return true;
    }
    if q > 0
        && q as libc::c_int & MEMBARRIER_CMD_PRIVATE_EXPEDITED != 0
        && membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0
    {
        SYNC_MODE.store(1, Ordering::Relaxed);
    }
    false
}

/// Whether [`sync_cores`] serialises every core's instruction stream.
pub fn can_sync_cores() -> bool {
    SYNC_MODE.load(Ordering::Relaxed) != 0
}

/// Makes every thread of the process execute a serialising instruction before returning.
/// (Without SYNC_CORE, the expedited membarrier's IPI + return to user mode serialises.)
pub fn sync_cores() {
    match SYNC_MODE.load(Ordering::Relaxed) {
        2 => {
            membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE);
        }
        1 => {
            membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED);
        }
        _ => {}
    }
}

/// The signal that parks threads for stop-the-world (`SIGRTMAX - 3`; glibc reserves the lowest
/// real-time signals, programs rarely use the highest).
pub fn stop_signal() -> libc::c_int {
    libc::SIGRTMAX() - 3
}

static STOP_ARRIVED: AtomicU32 = AtomicU32::new(0);
static STOP_DEPARTED: AtomicU32 = AtomicU32::new(0);
static STOP_RELEASE: AtomicU64 = AtomicU64::new(0);
static STOP_ACTIVE: AtomicBool = AtomicBool::new(false);
/// `fn(rip) -> new rip`: moves a parked thread out of a multi-byte site.
static STOP_FIXUP: AtomicPtr<()> = AtomicPtr::new(core::ptr::null_mut());

extern "C" fn on_stop(_sig: libc::c_int, _si: *mut libc::siginfo_t, uc: *mut libc::c_void) {
    // The generation is read before the active flag: the patcher clears the flag before it
    // bumps the generation, so a thread that sees the flag set waits for a bump still to come.
    let generation = STOP_RELEASE.load(Ordering::SeqCst);
    if !STOP_ACTIVE.load(Ordering::SeqCst) {
        return;
    }
    STOP_ARRIVED.fetch_add(1, Ordering::SeqCst);
    while STOP_RELEASE.load(Ordering::Acquire) == generation {
        // SAFETY: sched_yield has no preconditions.
        unsafe { libc::sched_yield() };
    }
    let f = STOP_FIXUP.load(Ordering::Acquire);
    if !f.is_null() {
        // SAFETY: `f` was stored from a `fn(u64) -> u64` below.
        let fixup: fn(u64) -> u64 = unsafe { core::mem::transmute(f) };
        // SAFETY: the kernel passes a valid ucontext to an SA_SIGINFO handler.
        let gregs = unsafe { &mut (*uc.cast::<libc::ucontext_t>()).uc_mcontext.gregs };
        let rip = gregs[libc::REG_RIP as usize] as u64;
        gregs[libc::REG_RIP as usize] = fixup(rip) as i64;
    }
    STOP_DEPARTED.fetch_add(1, Ordering::AcqRel);
}

/// Installs the stop-the-world handler.
pub fn install_stop_handler() -> std::io::Result<()> {
    // SAFETY: a zeroed sigaction is valid; we fill the handler and flags.
    let mut sa: libc::sigaction = unsafe { core::mem::zeroed() };
    sa.sa_sigaction = on_stop as *const () as usize;
    sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
    // SAFETY: `sa` is initialised; the old action is not needed.
    if unsafe { libc::sigaction(stop_signal(), &sa, core::ptr::null_mut()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn gettid() -> libc::pid_t {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

/// Whether thread `t` of this process can still run a signal handler (it exists and is not a
/// zombie: a main thread that called `pthread_exit` stays one until the process ends).
fn is_live_thread(t: libc::pid_t) -> bool {
    std::fs::read_to_string(format!("/proc/self/task/{t}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

fn other_threads() -> Vec<libc::pid_t> {
    let me = gettid();
    std::fs::read_dir("/proc/self/task")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .filter(|&t| t != me && is_live_thread(t))
                .collect()
        })
        .unwrap_or_default()
}

/// Parks every other thread, runs `f`, then releases them; each parked thread's rip is passed
/// through `fixup` before it resumes. If some threads do not arrive within `timeout` (all
/// signals blocked, or starved), `f` does not run: the parked threads are released and the
/// number of missing threads is returned as the error.
pub fn stop_the_world<R>(
    fixup: fn(u64) -> u64,
    timeout: std::time::Duration,
    f: impl FnOnce() -> R,
) -> Result<R, usize> {
    STOP_FIXUP.store(fixup as *mut (), Ordering::Release);
    STOP_ARRIVED.store(0, Ordering::Release);
    STOP_DEPARTED.store(0, Ordering::Release);
    STOP_ACTIVE.store(true, Ordering::Release);
    let pid = std::process::id() as libc::pid_t;
    let mut signalled: Vec<libc::pid_t> = Vec::new();
    let start = std::time::Instant::now();
    let mut missing = 0;
    loop {
        // Threads created since the last look (by a thread not yet parked) are signalled too.
        let mut fresh = false;
        for t in other_threads() {
            if !signalled.contains(&t) {
                // SAFETY: tgkill with our own pid; a thread that exited meanwhile gives ESRCH.
                let r = unsafe { libc::syscall(libc::SYS_tgkill, pid, t, stop_signal()) };
                if r == 0 {
                    signalled.push(t);
                    fresh = true;
                }
            }
        }
        let arrived = STOP_ARRIVED.load(Ordering::Acquire) as usize;
        let alive = signalled.iter().filter(|&&t| is_live_thread(t)).count();
        if !fresh && arrived >= alive {
            break;
        }
        if start.elapsed() > timeout {
            missing = alive.saturating_sub(arrived);
            break;
        }
        // SAFETY: no preconditions.
        unsafe { libc::sched_yield() };
    }
    let r = (missing == 0).then(f);
    STOP_ACTIVE.store(false, Ordering::SeqCst);
    STOP_RELEASE.fetch_add(1, Ordering::SeqCst);
    // Whatever `fixup` reads must outlive every parked thread's use of it.
    let arrived = STOP_ARRIVED.load(Ordering::Acquire);
    while STOP_DEPARTED.load(Ordering::Acquire) < arrived {
        // SAFETY: no preconditions.
        unsafe { libc::sched_yield() };
    }
    r.ok_or(missing)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn stop_the_world_parks_every_thread() {
        install_stop_handler().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let counters: Vec<Arc<AtomicUsize>> =
            (0..3).map(|_| Arc::new(AtomicUsize::new(0))).collect();
        let handles: Vec<_> = counters
            .iter()
            .map(|c| {
                let (c, stop) = (c.clone(), stop.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        c.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        while counters.iter().any(|c| c.load(Ordering::Relaxed) == 0) {
            std::thread::yield_now();
        }
        fn keep(rip: u64) -> u64 {
            rip
        }
        let frozen = stop_the_world(keep, std::time::Duration::from_secs(10), || {
            let a: Vec<usize> = counters.iter().map(|c| c.load(Ordering::Relaxed)).collect();
            std::thread::sleep(std::time::Duration::from_millis(20));
            let b: Vec<usize> = counters.iter().map(|c| c.load(Ordering::Relaxed)).collect();
            a == b
        })
        .expect("every thread parks");
        assert!(frozen, "a thread ran while the world was stopped");
        stop.store(true, Ordering::Relaxed);
        for h in handles {
            h.join().unwrap();
        }
    }

    #[test]
    fn text_window_restores_rx() {
        // An anonymous RX page stands in for text.
        // SAFETY: plain anonymous mapping.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_EXEC,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        } as u64;
        {
            let _w = TextWindow::open([(p + 10, 5)]).unwrap();
            // SAFETY: the window made the page writable.
            unsafe { write_text(p + 10, &[0x0f, 0x1f, 0x44, 0, 0]) };
        }
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let line = maps
            .lines()
            .find(|l| l.starts_with(&format!("{p:x}-")))
            .unwrap();
        assert!(line.contains(" r-xp "), "{line}");
        // SAFETY: the page is readable.
        assert_eq!(unsafe { *((p + 12) as *const u8) }, 0x44);
        // On a kernel with SYNC_CORE (every kernel we support), registration succeeds.
        assert!(register_sync_core());
        assert!(can_sync_cores());
        sync_cores();
    }
}
