//! Call sites and the live patch protocols.
//!
//! TEMPORARY GLUE: the site forms, the expected-bytes check and the two protocols below stand
//! in for `ftrace-patch`'s record table, encoders and breakpoint/stop-machine protocols until
//! that crate lands; this module then keeps only the platform half (it already calls
//! [`crate::text`] for writing text, syncing cores and stopping threads).
//!
//! Invariants: a site is written only if it holds the bytes its current state says it holds
//! (else it is reported and left alone, like `ftrace_bug()`); every thread sees either the old
//! instruction, an `int3`, or the new instruction (single-instruction sites: `int3` first, sync,
//! tail, sync, head, sync; a SIGTRAP landing on a site emulates the *new* instruction, or
//! re-runs the site when the trap arrives after the batch), or runs nothing at all while a
//! multi-instruction site is written (stop-the-world, with parked threads moved to the start
//! of any site they were stopped inside). Text is R-X again after every batch.

use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::time::Duration;

use crate::text;

/// The forms a site can take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// One 5-byte NOP (`0f 1f 44 00 00`: gcc `-mnop-mcount`; `0f 1f 44 00 08`: clang/rustc
    /// patchable entry). Patched to `call rel32` with the breakpoint protocol.
    Nop5,
    /// Five 1-byte NOPs (gcc `-fpatchable-function-entry=5`). Patched to `call rel32` with the
    /// world stopped.
    Nop1x5,
    /// The 6-byte NOP `66 0f 1f 44 00 00` (gcc PIE `-pg -mrecord-mcount` call sites, converted
    /// at start). Patched to `nop; call rel32` (the call ends where the site ends, so a return
    /// address never points inside it) with the world stopped.
    Nop6,
}

impl Form {
    /// Bytes the site occupies.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(self) -> usize {
        match self {
            Form::Nop6 => 6,
            _ => 5,
        }
    }

    /// Whether the breakpoint protocol can patch it (one instruction in both states).
    pub fn single_instruction(self) -> bool {
        self == Form::Nop5
    }
}

/// What a site's bytes say about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Classified {
    /// A disabled site of this form, with these NOP bytes.
    Site(Form, [u8; 8]),
    /// gcc's PIE `call *__fentry__@GOTPCREL(%rip)` (`ff 15`) or relaxed `addr32 call` (`67 e8`):
    /// becomes [`Form::Nop6`] at start.
    CallToNop6,
    /// Unknown bytes: never touched.
    Unknown,
}

/// The 6-byte NOP.
pub const NOP6: [u8; 6] = [0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00];

/// Classifies the bytes at a site.
pub fn classify(b: &[u8; 8]) -> Classified {
    let mut nop = [0u8; 8];
    match b {
        [0x0f, 0x1f, 0x44, 0x00, 0x00 | 0x08, ..] => {
            nop[..5].copy_from_slice(&b[..5]);
            Classified::Site(Form::Nop5, nop)
        }
        [0x90, 0x90, 0x90, 0x90, 0x90, ..] => {
            nop[..5].copy_from_slice(&b[..5]);
            Classified::Site(Form::Nop1x5, nop)
        }
        [0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00, ..] => {
            nop[..6].copy_from_slice(&NOP6);
            Classified::Site(Form::Nop6, nop)
        }
        [0xff, 0x15, ..] | [0x67, 0xe8, ..] => Classified::CallToNop6,
        _ => Classified::Unknown,
    }
}

/// The enabled bytes of a site of `form` at `addr` calling `target`, or `None` if out of reach.
pub fn call_bytes(form: Form, addr: u64, target: u64) -> Option<[u8; 8]> {
    let mut b = [0u8; 8];
    let (at, end) = match form {
        Form::Nop6 => {
            b[0] = 0x90;
            (1, addr + 6)
        }
        _ => (0, addr + 5),
    };
    let rel = i32::try_from(target as i64 - end as i64).ok()?;
    b[at] = 0xe8;
    b[at + 1..at + 5].copy_from_slice(&rel.to_le_bytes());
    Some(b)
}

/// One call site.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Site {
    /// Address of its first byte.
    pub addr: u64,
    /// Its form.
    pub form: Form,
    /// The disabled bytes.
    pub nop: [u8; 8],
    /// The enabled bytes.
    pub call: [u8; 8],
    /// Whether it is enabled now.
    pub enabled: bool,
}

impl Site {
    fn expected(&self) -> &[u8] {
        let b = if self.enabled { &self.call } else { &self.nop };
        &b[..self.form.len()]
    }

    fn wanted(&self, enable: bool) -> &[u8] {
        let b = if enable { &self.call } else { &self.nop };
        &b[..self.form.len()]
    }
}

/// What signal handlers read: site addresses (sorted), lengths, and the bytes a batch is writing.
struct TrapTable {
    addrs: Vec<u64>,
    lens: Vec<u8>,
    pending: Vec<AtomicU64>,
}

/// The table in force; old tables are leaked (a handler may still be reading one).
static TRAPS: AtomicPtr<TrapTable> = AtomicPtr::new(core::ptr::null_mut());

fn traps() -> Option<&'static TrapTable> {
    let p = TRAPS.load(Ordering::Acquire);
    // SAFETY: tables are leaked, never freed.
    (!p.is_null()).then(|| unsafe { &*p })
}

fn lookup(t: &TrapTable, addr: u64) -> Option<usize> {
    t.addrs.binary_search(&addr).ok()
}

/// Moves a stopped thread's rip out of the inside of a multi-byte site (to its start, so it runs
/// the whole new instruction sequence).
pub fn fixup_rip(rip: u64) -> u64 {
    if let Some(t) = traps() {
        let i = t.addrs.partition_point(|&a| a < rip);
        if let Some(j) = i.checked_sub(1) {
            let a = t.addrs[j];
            if rip > a && rip < a + u64::from(t.lens[j]) {
                return a;
            }
        }
    }
    rip
}

/// The sites of the process and their protocols.
#[derive(Default)]
pub struct Patcher {
    sites: Vec<Site>,
    /// Sites whose bytes did not match what their state said (reported, left alone).
    pub bugs: Vec<(u64, [u8; 8])>,
    /// Stop-the-world batches abandoned because some thread never parked.
    pub unstopped: usize,
}

/// How long a stop-the-world waits for every thread to park before giving up the batch.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

fn read8(addr: u64) -> [u8; 8] {
    let mut b = [0u8; 8];
    // SAFETY: sites lie in mapped text with at least 8 readable bytes after them (a function).
    unsafe { core::ptr::copy_nonoverlapping(addr as *const u8, b.as_mut_ptr(), 8) };
    b
}

impl Patcher {
    fn unstopped_error(&mut self, missing: usize) -> std::io::Error {
        self.unstopped += 1;
        std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("{missing} thread(s) did not stop; multi-byte sites left unchanged"),
        )
    }

    /// The sites, sorted by address.
    pub fn sites(&self) -> &[Site] {
        &self.sites
    }

    /// Adds disabled sites (`(addr, form, nop bytes, call bytes)`), converting gcc's PIE call
    /// forms to the 6-byte NOP first. Sites already known are ignored.
    pub fn add(&mut self, new: Vec<Site>, convert: &[u64]) -> std::io::Result<()> {
        if !convert.is_empty() {
            let _w = text::TextWindow::open(convert.iter().map(|&a| (a, 6)))?;
            text::stop_the_world(fixup_rip, STOP_TIMEOUT, || {
                for &a in convert {
                    // SAFETY: the window is open and every other thread is parked.
                    unsafe { text::write_text(a, &NOP6) };
                }
            })
            .map_err(|missing| self.unstopped_error(missing))?;
        }
        for s in new {
            if let Err(i) = self.sites.binary_search_by_key(&s.addr, |x| x.addr) {
                self.sites.insert(i, s);
            }
        }
        let table = TrapTable {
            addrs: self.sites.iter().map(|s| s.addr).collect(),
            lens: self.sites.iter().map(|s| s.form.len() as u8).collect(),
            pending: self.sites.iter().map(|_| AtomicU64::new(0)).collect(),
        };
        TRAPS.store(Box::into_raw(Box::new(table)), Ordering::Release);
        Ok(())
    }

    /// Forgets the sites in `[lo, hi)` (an object that was unloaded).
    pub fn remove_range(&mut self, lo: u64, hi: u64) {
        self.sites.retain(|s| s.addr < lo || s.addr >= hi);
    }

    /// Enables or disables the sites `pick` selects; returns how many changed.
    pub fn set(&mut self, enable: bool, pick: impl Fn(&Site) -> bool) -> std::io::Result<usize> {
        let mut int3 = Vec::new();
        let mut stw = Vec::new();
        for (i, s) in self.sites.iter().enumerate() {
            if s.enabled == enable || !pick(s) {
                continue;
            }
            let now = read8(s.addr);
            if &now[..s.form.len()] != s.expected() {
                if !self.bugs.iter().any(|b| b.0 == s.addr) {
                    self.bugs.push((s.addr, now));
                }
                continue;
            }
            if s.form.single_instruction() && text::can_sync_cores() {
                int3.push(i);
            } else {
                stw.push(i);
            }
        }
        if int3.is_empty() && stw.is_empty() {
            return Ok(0);
        }
        let table = traps().expect("sites were added");
        let _w = text::TextWindow::open(
            int3.iter()
                .chain(&stw)
                .map(|&i| (self.sites[i].addr, self.sites[i].form.len())),
        )?;
        if !int3.is_empty() {
            for &i in &int3 {
                let s = &self.sites[i];
                let mut b = [0u8; 8];
                b.copy_from_slice(if enable { &s.call } else { &s.nop });
                if let Some(j) = lookup(table, s.addr) {
                    table.pending[j].store(u64::from_le_bytes(b), Ordering::Release);
                }
            }
            for &i in &int3 {
                // SAFETY: the window is open; int3 is one byte, atomic for every reader.
                unsafe { text::write_text(self.sites[i].addr, &[0xcc]) };
            }
            text::sync_cores();
            for &i in &int3 {
                let s = &self.sites[i];
                // SAFETY: the head is int3: no thread executes the tail now.
                unsafe { text::write_text(s.addr + 1, &s.wanted(enable)[1..]) };
            }
            text::sync_cores();
            for &i in &int3 {
                let s = &self.sites[i];
                // SAFETY: the tail is in place everywhere; the head byte completes the site.
                unsafe { text::write_text(s.addr, &s.wanted(enable)[..1]) };
            }
            text::sync_cores();
        }
        if !stw.is_empty() {
            let sites = &self.sites;
            let done = text::stop_the_world(fixup_rip, STOP_TIMEOUT, || {
                for &i in &stw {
                    // SAFETY: the window is open and every other thread is parked outside it.
                    unsafe { text::write_text(sites[i].addr, sites[i].wanted(enable)) };
                }
            });
            if let Err(missing) = done {
                // The breakpoint batch (if any) went through; the others stay as they were.
                for i in int3 {
                    self.sites[i].enabled = enable;
                }
                return Err(self.unstopped_error(missing));
            }
        }
        let n = int3.len() + stw.len();
        for i in int3.into_iter().chain(stw) {
            self.sites[i].enabled = enable;
        }
        Ok(n)
    }
}

/// The SIGTRAP handler we replaced (`sa_sigaction`) and its flags.
static OLD_TRAP_HANDLER: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);
static OLD_TRAP_FLAGS: core::sync::atomic::AtomicI32 = core::sync::atomic::AtomicI32::new(0);

extern "C" fn on_trap(sig: libc::c_int, si: *mut libc::siginfo_t, ucv: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid ucontext to an SA_SIGINFO handler.
    let gregs = unsafe { &mut (*ucv.cast::<libc::ucontext_t>()).uc_mcontext.gregs };
    let rip = gregs[libc::REG_RIP as usize] as u64;
    if let Some(t) = traps() {
        if let Some(i) = lookup(t, rip.wrapping_sub(1)) {
            let site = t.addrs[i];
            // SAFETY: the site is mapped text.
            let head = unsafe { core::ptr::read_volatile(site as *const u8) };
            if head != 0xcc {
                // The batch finished after this trap was raised: run the site as it is now.
                gregs[libc::REG_RIP as usize] = site as i64;
                return;
            }
            let b = t.pending[i].load(Ordering::Acquire).to_le_bytes();
            if b[0] == 0xe8 {
                let rel = i32::from_le_bytes(b[1..5].try_into().unwrap());
                let ret = site + 5;
                let sp = gregs[libc::REG_RSP as usize] as u64 - 8;
                // SAFETY: at a function's first instruction the slot below rsp is free (the
                // kernel put the signal frame below the red zone).
                unsafe { *(sp as *mut u64) = ret };
                gregs[libc::REG_RSP as usize] = sp as i64;
                gregs[libc::REG_RIP as usize] = (ret as i64).wrapping_add(i64::from(rel));
            } else {
                gregs[libc::REG_RIP as usize] = (site + u64::from(t.lens[i])) as i64;
            }
            return;
        }
    }
    // Not ours: chain to the previous handler.
    let h = OLD_TRAP_HANDLER.load(Ordering::Acquire);
    if h == libc::SIG_IGN {
        return;
    }
    if h == libc::SIG_DFL {
        // SAFETY: restoring the default action and re-raising: the default action (core dump)
        // happens when this handler returns and the signal is unblocked.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
        return;
    }
    if OLD_TRAP_FLAGS.load(Ordering::Acquire) & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous handler was installed as an SA_SIGINFO handler.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { core::mem::transmute(h) };
        f(sig, si, ucv);
    } else {
        // SAFETY: the previous handler was installed as a plain handler.
        let f: extern "C" fn(libc::c_int) = unsafe { core::mem::transmute(h) };
        f(sig);
    }
}

/// Installs the SIGTRAP handler (chaining to the one in place).
pub fn install_trap_handler() -> std::io::Result<()> {
    // SAFETY: zeroed sigactions are valid; `old` receives the previous action.
    unsafe {
        let mut old: libc::sigaction = core::mem::zeroed();
        if libc::sigaction(libc::SIGTRAP, core::ptr::null(), &mut old) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if old.sa_sigaction == on_trap as *const () as usize {
            return Ok(()); // already ours (a forked child re-installing)
        }
        OLD_TRAP_HANDLER.store(old.sa_sigaction, Ordering::Release);
        OLD_TRAP_FLAGS.store(old.sa_flags, Ordering::Release);
        let mut sa: libc::sigaction = core::mem::zeroed();
        sa.sa_sigaction = on_trap as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        if libc::sigaction(libc::SIGTRAP, &sa, core::ptr::null_mut()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_every_site_form() {
        let f = |b: &[u8]| {
            let mut x = [0xccu8; 8];
            x[..b.len()].copy_from_slice(b);
            classify(&x)
        };
        assert!(matches!(
            f(&[0x0f, 0x1f, 0x44, 0, 0]),
            Classified::Site(Form::Nop5, _)
        ));
        assert!(matches!(
            f(&[0x0f, 0x1f, 0x44, 0, 8]),
            Classified::Site(Form::Nop5, _)
        ));
        assert!(matches!(f(&[0x90; 5]), Classified::Site(Form::Nop1x5, _)));
        assert!(matches!(f(&NOP6), Classified::Site(Form::Nop6, _)));
        assert_eq!(f(&[0xff, 0x15, 1, 2, 3, 4]), Classified::CallToNop6);
        assert_eq!(f(&[0x67, 0xe8, 1, 2, 3, 4]), Classified::CallToNop6);
        assert_eq!(f(&[0x55, 0x48, 0x89, 0xe5]), Classified::Unknown);
        assert_eq!(f(&[0x90, 0x90, 0x90, 0x90, 0x55]), Classified::Unknown);
    }

    #[test]
    fn call_encodings_end_where_the_site_ends() {
        let b = call_bytes(Form::Nop5, 0x1000, 0x2000).unwrap();
        assert_eq!(&b[..5], &[0xe8, 0xfb, 0x0f, 0, 0]);
        let b = call_bytes(Form::Nop6, 0x1000, 0x2000).unwrap();
        assert_eq!(&b[..6], &[0x90, 0xe8, 0xfa, 0x0f, 0, 0]);
        let b = call_bytes(Form::Nop1x5, 0x2000, 0x1000).unwrap();
        assert_eq!(
            i32::from_le_bytes(b[1..5].try_into().unwrap()),
            0x1000 - 0x2005
        );
        assert_eq!(call_bytes(Form::Nop5, 0, 1 << 32), None);
    }
}
