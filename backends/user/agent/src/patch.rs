//! Call sites and live patching, through `ftrace-patch`: its site recognition
//! ([`classify_x86`]), encodings ([`SiteForm`]) and protocols ([`protocol::apply`]: breakpoint
//! for single-instruction windows, stop-machine otherwise), over this process's platform
//! primitives ([`Platform`], a [`TextPoke`]: W^X text writes, `membarrier(SYNC_CORE)`, threads
//! parked by a signal, and the SIGTRAP handler that resolves breakpoints).
//!
//! Invariants: a site is written only if it holds the bytes its state says it holds (else it
//! is reported and left alone, like `ftrace_bug()`); every thread sees the old instruction, an
//! `int3` (emulated by the handler as the *new* instruction, or re-run when the trap arrives
//! after the batch), or the new instruction; multi-instruction windows (gcc's five `90`) are
//! written only while every other thread is parked outside them; text is R-X after every batch.
//!
//! Publication: the breakpoint batch in flight is in ftrace-patch's [`BreakpointSlot`]
//! (`BREAKPOINTS`); the known sites and the last stop-the-world's windows are
//! [`RcuCell`]s whose replaced values are freed after a grace period of a [`ReaderCount`]
//! domain. Their readers are signal handlers (`SIGTRAP`, the stop signal), which must not take
//! locks or allocate: crossbeam-epoch's `EpochReclaim` is out there (its pin may register a
//! thread-local on first use, which allocates, and every so many pins runs deferred frees,
//! which take the allocator's lock the interrupted thread may hold); a `ReaderCount` pin is
//! an atomic increment and a fence. Each domain's grace period is waited for by the control
//! thread in place, never while a reader of that domain can be parked: `TRAP_READERS`
//! readers pin only around a lookup and drop the guard before chaining to another handler;
//! `STOP_READERS` readers pin in the stop handler after their release, and the windows
//! are replaced while every thread is parked before that point.

use core::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::time::Duration;

use ftrace_core::platform::Reclaim;
use ftrace_core::reclaim::{Published, RcuCell, ReaderCount};
use ftrace_patch::BreakpointSlot;
use ftrace_patch::protocol::{self, Emulation, PokeSite, Protocol, StopFixup, TrapAction};
use ftrace_patch::site::{Arch, SiteBytes, SiteForm, SiteInit, X86_PROBE_LEN, classify_x86};
use ftrace_patch::text::{TextFault, TextPoke};

use crate::signal_line::SignalLine;
use crate::text;

/// One call site.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Site {
    /// Address of the patch window (after an `endbr64`, if any).
    pub addr: u64,
    /// Its form.
    pub form: SiteForm,
    /// The disabled bytes.
    pub nop: SiteBytes,
    /// The enabled bytes (`call` to the site's stub).
    pub call: SiteBytes,
    /// Whether it is enabled now.
    pub enabled: bool,
}

/// Recognises the site recorded at `addr` (reads the bytes there).
pub fn classify(addr: u64) -> Result<SiteInit, SiteBytes> {
    let mut probe = [0u8; X86_PROBE_LEN];
    // SAFETY: a recorded site lies in mapped text, with a function body after it.
    unsafe { core::ptr::copy_nonoverlapping(addr as *const u8, probe.as_mut_ptr(), probe.len()) };
    classify_x86(addr, &probe)
}

/// How long a stop-the-world waits for every thread to park before giving the batch up.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the SIGTRAP handler finds the breakpoint batch in flight.
static BREAKPOINTS: BreakpointSlot = BreakpointSlot::new();
/// The grace-period domain of what the SIGTRAP handler reads besides `BREAKPOINTS`.
static TRAP_READERS: ReaderCount = ReaderCount::new();
/// Every known site address, sorted (for late traps); read under `TRAP_READERS`.
static KNOWN: RcuCell<Vec<u64>> = RcuCell::empty();
/// The grace-period domain of the stop handler's reads of [`STOPPED_WINDOWS`].
static STOP_READERS: ReaderCount = ReaderCount::new();
/// `(start, end)` of the multi-byte windows the last stop-the-world rewrote.
static STOPPED_WINDOWS: RcuCell<Vec<(u64, u64)>> = RcuCell::empty();

/// Whether `bp` is a known site (from a signal handler: no lock, no allocation).
fn known_site(bp: u64) -> bool {
    let _g = TRAP_READERS.pin();
    // SAFETY: inside a guard of the domain `KNOWN` is replaced through; the reference does
    // not leave this function.
    unsafe { KNOWN.load() }.is_some_and(|k| k.binary_search(&bp).is_ok())
}

/// Moves a parked thread's rip out of the inside of a rewritten multi-byte window (to its end,
/// as [`StopFixup::resume_pc`] says).
fn fixup_rip(rip: u64) -> u64 {
    let _g = STOP_READERS.pin();
    // SAFETY: inside a guard of the domain `STOPPED_WINDOWS` is replaced through; the
    // reference does not leave this function.
    let Some(w) = (unsafe { STOPPED_WINDOWS.load() }) else {
        return rip;
    };
    let i = w.partition_point(|&(a, _)| a <= rip);
    match i.checked_sub(1).map(|j| w[j]) {
        Some((a, end)) if rip > a && rip < end => end,
        _ => rip,
    }
}

/// This process as a patch platform.
#[derive(Default)]
pub struct Platform {
    /// Stop-the-world rounds abandoned because a thread never parked.
    pub unstopped: usize,
}

impl TextPoke for Platform {
    fn read_text(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), TextFault> {
        // SAFETY: callers pass windows of recorded sites, inside mapped text.
        unsafe { core::ptr::copy_nonoverlapping(addr as *const u8, buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }

    fn write_text(&mut self, addr: u64, bytes: &[u8]) -> Result<(), TextFault> {
        // SAFETY: `Patcher` opens a `TextWindow` over every window of the batch first; the
        // protocol decides when each byte may be written.
        unsafe { text::write_text(addr, bytes) };
        Ok(())
    }

    fn sync_cores(&mut self) {
        text::sync_cores();
    }

    fn stop_others(&mut self, fixup: &StopFixup<'_>, patch: &mut dyn FnMut(&mut Self)) {
        let r = text::stop_the_world(fixup_rip, STOP_TIMEOUT, || {
            patch(self);
            // Publish where parked threads must not resume, now that the windows are written.
            let windows: Vec<(u64, u64)> = fixup
                .sites()
                .iter()
                .filter(|s| fixup.resume_pc(s.addr() + 1).is_some())
                .map(|s| (s.addr(), s.addr() + s.len() as u64))
                .collect();
            // No thread has pinned `STOP_READERS` yet (they do after their release), so
            // the grace period of the windows this replaces does not wait for them.
            STOPPED_WINDOWS.replace(Published::Owned(Box::new(windows)), &STOP_READERS);
        });
        if r.is_err() {
            self.unstopped += 1;
        }
    }

    fn breakpoint_slot(&self) -> Option<&'static BreakpointSlot> {
        Some(&BREAKPOINTS)
    }
}

/// The sites of the process and their states.
#[derive(Default)]
pub struct Patcher {
    sites: Vec<Site>,
    platform: Platform,
    /// Sites whose bytes were not what their state said: `(addr, bytes found)`.
    pub bugs: Vec<(u64, SiteBytes)>,
}

fn batch_protocol() -> Protocol {
    if text::can_sync_cores() {
        Protocol::Auto
    } else {
        Protocol::StopMachine
    }
}

impl Patcher {
    /// The sites, sorted by address.
    pub fn sites(&self) -> &[Site] {
        &self.sites
    }

    /// Adds sites (disabled), making the initialisation writes their recognition asked for
    /// (gcc's PIE calls become `NOP5` + `90`). Sites already known are ignored.
    pub fn add(&mut self, new: Vec<(SiteInit, SiteBytes)>) -> std::io::Result<()> {
        let mut writes: Vec<PokeSite> = Vec::new();
        for (init, _) in &new {
            for w in init.writes.iter().flatten() {
                writes.push(PokeSite::insn(Arch::X86_64, w.addr, &w.old, &w.new, 0));
            }
        }
        writes.sort_by_key(|w| w.addr());
        if !writes.is_empty() {
            // The SIGTRAP handler must know the sites the initialisation batch traps at.
            let mut known: Vec<u64> = self.sites.iter().map(|s| s.addr).collect();
            known.extend(writes.iter().map(|w| w.addr()));
            known.sort_unstable();
            known.dedup();
            KNOWN.replace(Published::Owned(Box::new(known)), &TRAP_READERS);
            let _w = text::TextWindow::open(writes.iter().map(|w| (w.addr(), w.len())))?;
            protocol::apply(
                &mut self.platform,
                Arch::X86_64,
                &mut writes,
                batch_protocol(),
            );
        }
        for (init, call) in new {
            let failed = writes
                .iter()
                .any(|w| w.addr() == init.ip && w.status() != protocol::SiteStatus::Done);
            if failed {
                self.bugs.push((init.ip, SiteBytes::new(&[])));
                continue;
            }
            if let Err(i) = self.sites.binary_search_by_key(&init.ip, |x| x.addr) {
                self.sites.insert(
                    i,
                    Site {
                        addr: init.ip,
                        form: init.form,
                        nop: init.form.nop(),
                        call,
                        enabled: false,
                    },
                );
            }
        }
        let known: Vec<u64> = self.sites.iter().map(|s| s.addr).collect();
        KNOWN.replace(Published::Owned(Box::new(known)), &TRAP_READERS);
        Ok(())
    }

    /// Forgets the sites in `[lo, hi)` (an object that was unloaded).
    pub fn remove_range(&mut self, lo: u64, hi: u64) {
        self.sites.retain(|s| s.addr < lo || s.addr >= hi);
    }

    /// Gives disabled sites new enabled bytes (another trampoline: a tracer switch, a
    /// `set_graph_function` root): `call_of` answers the new bytes, or `None` to keep them.
    /// Enabled sites are never touched (disable them first); returns how many changed.
    pub fn retarget(&mut self, call_of: impl Fn(&Site) -> Option<SiteBytes>) -> usize {
        let mut n = 0;
        for s in self.sites.iter_mut().filter(|s| !s.enabled) {
            if let Some(c) = call_of(s) {
                if c != s.call {
                    s.call = c;
                    n += 1;
                }
            }
        }
        n
    }

    /// Enables or disables the sites `pick` selects; returns how many changed.
    pub fn set(&mut self, enable: bool, pick: impl Fn(&Site) -> bool) -> std::io::Result<usize> {
        let mut batch: Vec<PokeSite> = self
            .sites
            .iter()
            .enumerate()
            .filter(|(_, s)| s.enabled != enable && pick(s))
            .map(|(i, s)| {
                let (old, new) = if enable {
                    (&s.nop, &s.call)
                } else {
                    (&s.call, &s.nop)
                };
                PokeSite::insn(Arch::X86_64, s.addr, old, new, i as u32)
            })
            .collect();
        if batch.is_empty() {
            return Ok(0);
        }
        let unstopped = self.platform.unstopped;
        {
            let _w = text::TextWindow::open(batch.iter().map(|p| (p.addr(), p.len())))?;
            protocol::apply(
                &mut self.platform,
                Arch::X86_64,
                &mut batch,
                batch_protocol(),
            );
        }
        let mut done = 0;
        let mut failed = 0;
        for p in &batch {
            match p.status() {
                protocol::SiteStatus::Done => {
                    self.sites[p.tag() as usize].enabled = enable;
                    done += 1;
                }
                protocol::SiteStatus::Mismatch => self.bugs.push((p.addr(), *p.actual())),
                _ => failed += 1,
            }
        }
        if self.platform.unstopped != unstopped {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "a thread did not stop; multi-byte sites left unchanged",
            ));
        }
        if failed > 0 {
            return Err(std::io::Error::other(format!(
                "{failed} site(s) could not be written"
            )));
        }
        Ok(done)
    }
}

/// The program's own SIGTRAP action, which the agent's handler chains to for a trap that is
/// not a breakpoint of ours: the action in place when the agent's was installed, then what
/// the program set with `sigaction` ([`program_trap_action`]). The handler's address, with
/// [`SIGINFO_BIT`] set for an `SA_SIGINFO` handler, in one word, so that a trap never sees
/// one handler with another's calling convention (user addresses leave bit 63 clear).
static PROGRAM_TRAP: AtomicU64 = AtomicU64::new(0);
/// The bit of [`PROGRAM_TRAP`] that says the handler takes `siginfo`.
const SIGINFO_BIT: u64 = 1 << 63;
/// The program's SIGTRAP flags and mask (its first 64 signals), read back by its `sigaction`.
static PROGRAM_TRAP_FLAGS: AtomicI32 = AtomicI32::new(0);
static PROGRAM_TRAP_MASK: AtomicU64 = AtomicU64::new(0);
/// Whether the agent's SIGTRAP handler is installed.
static TRAP_HANDLER_INSTALLED: AtomicBool = AtomicBool::new(false);

/// Whether the agent's SIGTRAP handler is installed (then the program's SIGTRAP action is
/// [`program_trap_action`]'s).
pub fn trap_handler_installed() -> bool {
    TRAP_HANDLER_INSTALLED.load(Ordering::Acquire)
}

/// Records `sa` as the program's SIGTRAP action.
fn set_program_trap(sa: &libc::sigaction) {
    let mut mask = 0u64;
    for sig in 1..=64 {
        // SAFETY: `sa_mask` is an initialised sigset_t; the signal number is in range.
        if unsafe { libc::sigismember(&sa.sa_mask, sig) } == 1 {
            mask |= 1 << (sig - 1);
        }
    }
    PROGRAM_TRAP_FLAGS.store(sa.sa_flags, Ordering::Relaxed);
    PROGRAM_TRAP_MASK.store(mask, Ordering::Relaxed);
    let siginfo = if sa.sa_flags & libc::SA_SIGINFO != 0 {
        SIGINFO_BIT
    } else {
        0
    };
    PROGRAM_TRAP.store(sa.sa_sigaction as u64 | siginfo, Ordering::Release);
}

/// The program's SIGTRAP action, as `sigaction` would return it.
fn program_trap() -> libc::sigaction {
    // SAFETY: a zeroed sigaction is valid; sigemptyset/sigaddset initialise its mask.
    let mut sa: libc::sigaction = unsafe { core::mem::zeroed() };
    sa.sa_sigaction = (PROGRAM_TRAP.load(Ordering::Acquire) & !SIGINFO_BIT) as usize;
    sa.sa_flags = PROGRAM_TRAP_FLAGS.load(Ordering::Relaxed);
    let mask = PROGRAM_TRAP_MASK.load(Ordering::Relaxed);
    // SAFETY: as above.
    unsafe { libc::sigemptyset(&mut sa.sa_mask) };
    for sig in (1..=64).filter(|s| mask & (1 << (s - 1)) != 0) {
        // SAFETY: as above.
        unsafe { libc::sigaddset(&mut sa.sa_mask, sig) };
    }
    sa
}

/// The program's `sigaction(SIGTRAP, act, old)` while the agent's handler is installed: the
/// agent's handler stays, `act` becomes the action it chains to, and `old` receives the
/// program's previous one. Returns 0 (`sigaction`'s success).
///
/// # Safety
/// `act` and `old` are null or valid, as for `sigaction`.
pub unsafe fn program_trap_action(act: *const libc::sigaction, old: *mut libc::sigaction) -> i32 {
    let previous = program_trap();
    // SAFETY: the caller passes a valid `act` when it is not null.
    if let Some(act) = unsafe { act.as_ref() } {
        set_program_trap(act);
    }
    // SAFETY: the caller passes a valid `old` when it is not null.
    if let Some(old) = unsafe { old.as_mut() } {
        *old = previous;
    }
    0
}

/// What to do with a trap at `bp`; `read` reads its first byte now (called only at a known
/// site). A signal can be handled late, after its batch (and the next) moved on:
/// [`BreakpointSlot::resolve`] re-reads the site and restarts it when the breakpoint is gone.
fn resolve(bp: u64, read: impl Fn() -> u8) -> TrapAction {
    if !known_site(bp) {
        return TrapAction::NotOurs;
    }
    BREAKPOINTS.resolve(Arch::X86_64, bp, |b| b[0] = read())
}

extern "C" fn on_trap(sig: libc::c_int, si: *mut libc::siginfo_t, ucv: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid ucontext to an SA_SIGINFO handler.
    let gregs = unsafe { &mut (*ucv.cast::<libc::ucontext_t>()).uc_mcontext.gregs };
    let rip = gregs[libc::REG_RIP as usize] as u64;
    let bp = rip.wrapping_sub(1);
    // SAFETY: `resolve` reads only at a known site, in mapped text.
    let action = resolve(bp, || unsafe { core::ptr::read_volatile(bp as *const u8) });
    match action {
        TrapAction::Restart { pc } => gregs[libc::REG_RIP as usize] = pc as i64,
        TrapAction::Emulate(Emulation::Call { target, ret }) => {
            let sp = gregs[libc::REG_RSP as usize] as u64 - 8;
            // SAFETY: at a function's first instruction the slot below rsp is free (the kernel
            // put the signal frame below the red zone).
            unsafe { *(sp as *mut u64) = ret };
            gregs[libc::REG_RSP as usize] = sp as i64;
            gregs[libc::REG_RIP as usize] = target as i64;
        }
        TrapAction::Emulate(Emulation::Jump { target }) => {
            gregs[libc::REG_RIP as usize] = target as i64
        }
        TrapAction::Emulate(Emulation::Skip { next } | Emulation::MovX9Lr { next }) => {
            gregs[libc::REG_RIP as usize] = next as i64
        }
        TrapAction::Emulate(Emulation::None) | TrapAction::NotOurs => chain(sig, si, ucv, rip),
    }
}

/// Says on stderr why the process is about to die of a `SIGTRAP` that is not a breakpoint of
/// ours (from a signal handler: no lock, no allocation, one `write`): where it trapped, how
/// it was raised (`si_code`: 128 for an `int3`, 0 or -6 for a `kill`/`tgkill` by the pid
/// named), whether the byte before rip is a site we patch, what it holds, and whether a
/// batch is armed.
fn report_fatal_trap(rip: u64, si: *const libc::siginfo_t) {
    let bp = rip.wrapping_sub(1);
    let known = known_site(bp);
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler; `si_pid` is the
    // sender's for a signal sent by a process and 0 (or garbage, ignored) otherwise.
    let (code, pid) = unsafe { ((*si).si_code, (*si).si_pid()) };
    let mut line = SignalLine::new();
    line.push(b"ftrace-agent: SIGTRAP at rip ");
    line.hex(rip);
    line.push(b" in pid ");
    // SAFETY: no preconditions.
    line.dec(i64::from(unsafe { libc::getpid() }));
    line.push(b" (si_code ");
    line.dec(i64::from(code));
    line.push(b", sender ");
    line.dec(i64::from(pid));
    line.push(b"): ");
    if known {
        line.push(b"a patched site holding ");
        // SAFETY: a known site lies in mapped text.
        line.hex(u64::from(unsafe {
            core::ptr::read_volatile(bp as *const u8)
        }));
    } else {
        line.push(b"not a site of ours");
    }
    line.push(if BREAKPOINTS.is_armed() {
        b", a batch armed".as_slice()
    } else {
        b", no batch armed".as_slice()
    });
    line.push(b"; taking the default action\n");
    line.write_stderr();
}

/// Hands a trap that is not ours (taken at `rip`) to the program's action (the kernel's, for
/// the default or for a breakpoint the program ignores: an ignored `int3` would trap again
/// forever).
fn chain(sig: libc::c_int, si: *mut libc::siginfo_t, ucv: *mut libc::c_void, rip: u64) {
    let action = PROGRAM_TRAP.load(Ordering::Acquire);
    let h = (action & !SIGINFO_BIT) as usize;
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let from_kernel = unsafe { (*si).si_code } == libc::SI_KERNEL;
    if h == libc::SIG_IGN && !from_kernel {
        return;
    }
    if h == libc::SIG_DFL || h == libc::SIG_IGN {
        report_fatal_trap(rip, si);
        // SAFETY: restoring the default action and re-raising: the default action (core dump)
        // happens when this handler returns and the signal is unblocked.
        unsafe {
            let mut dfl: libc::sigaction = core::mem::zeroed();
            dfl.sa_sigaction = libc::SIG_DFL;
            crate::sigmask::real_sigaction(sig, &dfl, core::ptr::null_mut());
            libc::raise(sig);
        }
        return;
    }
    if PROGRAM_TRAP_FLAGS.load(Ordering::Relaxed) & libc::SA_RESETHAND != 0 {
        let _ = PROGRAM_TRAP.compare_exchange(
            action,
            libc::SIG_DFL as u64,
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
    }
    if action & SIGINFO_BIT != 0 {
        // SAFETY: the program installed this handler as an SA_SIGINFO handler.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { core::mem::transmute(h) };
        f(sig, si, ucv);
    } else {
        // SAFETY: the program installed this handler as a plain handler.
        let f: extern "C" fn(libc::c_int) = unsafe { core::mem::transmute(h) };
        f(sig);
    }
}

/// Installs the SIGTRAP handler (chaining to the one in place).
pub fn install_trap_handler() -> std::io::Result<()> {
    // SAFETY: zeroed sigactions are valid; `old` receives the previous action.
    unsafe {
        let mut old: libc::sigaction = core::mem::zeroed();
        if crate::sigmask::real_sigaction(libc::SIGTRAP, core::ptr::null(), &mut old) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if old.sa_sigaction == on_trap as *const () as usize {
            // Already ours: a forked child, or an agent attached again.
            TRAP_HANDLER_INSTALLED.store(true, Ordering::Release);
            return Ok(());
        }
        set_program_trap(&old);
        let mut sa: libc::sigaction = core::mem::zeroed();
        sa.sa_sigaction = on_trap as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        if crate::sigmask::real_sigaction(libc::SIGTRAP, &sa, core::ptr::null_mut()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    TRAP_HANDLER_INSTALLED.store(true, Ordering::Release);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixup_moves_only_pcs_inside_a_window() {
        let w = vec![(0x1000u64, 0x1005u64), (0x2000, 0x2005)];
        STOPPED_WINDOWS.replace(Published::Owned(Box::new(w)), &STOP_READERS);
        assert_eq!(fixup_rip(0x1000), 0x1000);
        assert_eq!(fixup_rip(0x1003), 0x1005);
        assert_eq!(fixup_rip(0x1005), 0x1005);
        assert_eq!(fixup_rip(0x2004), 0x2005);
        assert_eq!(fixup_rip(0x1fff), 0x1fff);
        STOPPED_WINDOWS.replace(Published::None, &STOP_READERS);
    }

    #[test]
    fn late_trap_restarts_only_at_known_sites() {
        KNOWN.replace(Published::Owned(Box::new(vec![0x4000u64])), &TRAP_READERS);
        assert_eq!(resolve(0x4000, || 0x0f), TrapAction::Restart { pc: 0x4000 });
        assert_eq!(resolve(0x4000, || 0xcc), TrapAction::NotOurs);
        assert_eq!(
            resolve(0x4001, || panic!("read at an unknown site")),
            TrapAction::NotOurs
        );
        // The int3 was there when the handler started, and the batch removed it (and its
        // table) before the handler looked: a late trap, not someone else's breakpoint.
        let reads = core::cell::Cell::new(0);
        let first_int3 = || {
            reads.set(reads.get() + 1);
            if reads.get() == 1 { 0xcc } else { 0x0f }
        };
        assert_eq!(
            resolve(0x4000, first_int3),
            TrapAction::Restart { pc: 0x4000 }
        );
        assert_eq!(reads.get(), 2);
    }
}
