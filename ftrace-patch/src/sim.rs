//! Simulated text for tests and benchmarks: [`SimText`], an in-memory text segment that
//! implements [`TextPoke`], and [`ExecutorModel`], which wraps it and checks, at every write of
//! a batch, what a CPU fetching each watched site could execute.
//!
//! The model's CPU: between two `sync_cores` calls, a CPU may see any mix of the values each
//! single-copy-atomic unit (a byte on x86, an aligned 32-bit word on AArch64) has held since the
//! last sync. A CPU can be at any instruction boundary of the old contents of a window (it was
//! executing them when the batch began) and runs on through the window: at each step it must
//! fetch the old instruction at that offset, the new one, or (at the window's start) a breakpoint
//! whose handler (reading memory as it is when it runs) emulates the new instruction or, if the
//! breakpoint is already gone, restarts the site — never a torn mix. While other CPUs are stopped nothing is fetched; on release
//! each stopped PC goes through [`StopFixup::resume_pc`] and must land on a boundary of the new
//! contents.
//!
//! Invariant: every violation is recorded in [`ExecutorModel::violations`], with the site, the
//! bytes seen and the PC, so a test can print exactly what tore.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use crate::aarch64;
use crate::protocol::{BreakpointTable, Emulation, PokeSite, StopFixup, TrapAction};
use crate::site::Arch;
use crate::text::{TextFault, TextPoke};
use crate::x86;

/// An in-memory text segment at a base address.
#[derive(Clone, Debug)]
pub struct SimText {
    base: u64,
    mem: Vec<u8>,
    write_faults: Vec<(u64, u64)>,
    read_faults: Vec<(u64, u64)>,
    /// `write_text` calls that succeeded.
    pub writes: usize,
    /// `sync_cores` calls.
    pub syncs: usize,
    /// `stop_others` calls.
    pub stops: usize,
}

impl SimText {
    /// `size` bytes of `int3`-like filler (`0xcc`) at `base`.
    pub fn new(base: u64, size: usize) -> Self {
        SimText {
            base,
            mem: vec![0xcc; size],
            write_faults: Vec::new(),
            read_faults: Vec::new(),
            writes: 0,
            syncs: 0,
            stops: 0,
        }
    }

    /// The segment's base address.
    pub fn base(&self) -> u64 {
        self.base
    }

    fn range(&self, addr: u64, len: usize) -> Option<core::ops::Range<usize>> {
        let off = usize::try_from(addr.checked_sub(self.base)?).ok()?;
        let end = off.checked_add(len)?;
        (end <= self.mem.len()).then_some(off..end)
    }

    /// The bytes at `addr` (panics outside the segment).
    pub fn bytes(&self, addr: u64, len: usize) -> &[u8] {
        let r = self.range(addr, len).expect("outside the simulated text");
        &self.mem[r]
    }

    /// Stores bytes directly, bypassing every protocol (test set-up, or corrupting a site).
    pub fn poke(&mut self, addr: u64, bytes: &[u8]) {
        let r = self
            .range(addr, bytes.len())
            .expect("outside the simulated text");
        self.mem[r].copy_from_slice(bytes);
    }

    /// Makes writes touching `[addr, addr + len)` fail from now on.
    pub fn fail_writes(&mut self, addr: u64, len: u64) {
        self.write_faults.push((addr, addr + len));
    }

    /// Makes reads touching `[addr, addr + len)` fault from now on.
    pub fn fail_reads(&mut self, addr: u64, len: u64) {
        self.read_faults.push((addr, addr + len));
    }

    fn hits(list: &[(u64, u64)], addr: u64, len: usize) -> bool {
        list.iter()
            .any(|&(a, b)| addr < b && addr.wrapping_add(len as u64) > a)
    }
}

impl TextPoke for SimText {
    fn read_text(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), TextFault> {
        match self.range(addr, buf.len()) {
            Some(r) if !Self::hits(&self.read_faults, addr, buf.len()) => {
                buf.copy_from_slice(&self.mem[r]);
                Ok(())
            }
            _ => Err(TextFault { addr }),
        }
    }

    fn write_text(&mut self, addr: u64, bytes: &[u8]) -> Result<(), TextFault> {
        match self.range(addr, bytes.len()) {
            Some(r) if !Self::hits(&self.write_faults, addr, bytes.len()) => {
                self.mem[r].copy_from_slice(bytes);
                self.writes += 1;
                Ok(())
            }
            _ => Err(TextFault { addr }),
        }
    }

    fn sync_cores(&mut self) {
        self.syncs += 1;
    }

    fn stop_others(&mut self, _fixup: &StopFixup<'_>, patch: &mut dyn FnMut(&mut Self)) {
        self.stops += 1;
        patch(self);
    }
}

/// A window the model watches, and the transition it expects.
#[derive(Clone, Debug)]
struct Watched {
    addr: u64,
    old: Vec<u8>,
    new: Vec<u8>,
    /// instruction length at each boundary offset of old / new (0 = not a boundary)
    old_at: Vec<usize>,
    new_at: Vec<usize>,
    /// released from a stop with its new contents: threads are at new boundaries only
    settled: bool,
}

/// What the model saw (to show a test was not vacuous).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    /// Intermediate states checked (one per write or sync, while others ran).
    pub states: usize,
    /// Fetches that saw the old instruction.
    pub old: usize,
    /// Fetches that saw the new instruction.
    pub new: usize,
    /// Fetches that hit a breakpoint (and were resolved by the handler table).
    pub breakpoints: usize,
    /// Stopped PCs moved by the stop-machine fixup.
    pub fixups: usize,
}

/// [`SimText`] with a CPU model checking every intermediate state (see the module docs).
#[derive(Debug)]
pub struct ExecutorModel {
    /// The text.
    pub text: SimText,
    arch: Arch,
    watched: Vec<Watched>,
    /// unit address -> values the unit held since the last sync
    pending: BTreeMap<u64, Vec<[u8; 4]>>,
    table: Option<*const [PokeSite]>,
    stopped: bool,
    /// What went wrong, one line each.
    pub violations: Vec<String>,
    /// What was seen.
    pub observed: Observed,
}

fn boundaries(arch: Arch, addr: u64, bytes: &[u8]) -> Vec<usize> {
    let mut at = vec![0; bytes.len()];
    match arch {
        Arch::X86_64 => {
            let mut p = 0;
            while p < bytes.len() {
                match x86::decode(addr + p as u64, &bytes[p..]) {
                    Some(d) if p + d.len <= bytes.len() => {
                        at[p] = d.len;
                        p += d.len;
                    }
                    _ => break,
                }
            }
        }
        Arch::Aarch64 => {
            for p in (0..bytes.len()).step_by(4) {
                at[p] = 4;
            }
        }
    }
    at
}

/// The emulation a handler must perform for `new` at `addr` (computed independently of the
/// protocol module).
fn expected_emulation(arch: Arch, addr: u64, new: &[u8]) -> Emulation {
    let next = addr + new.len() as u64;
    match arch {
        Arch::X86_64 => match x86::decode(addr, new) {
            Some(x86::Decoded {
                insn: x86::Insn::Call { target },
                len,
            }) => Emulation::Call {
                target,
                ret: addr + len as u64,
            },
            Some(x86::Decoded {
                insn: x86::Insn::Jmp { target },
                ..
            }) => Emulation::Jump { target },
            _ => Emulation::Skip { next },
        },
        Arch::Aarch64 => match aarch64::from_bytes(new).and_then(|w| aarch64::decode(addr, w)) {
            Some(aarch64::Insn::Bl { target }) => Emulation::Call { target, ret: next },
            Some(aarch64::Insn::B { target }) => Emulation::Jump { target },
            Some(aarch64::Insn::MovX9X30) => Emulation::MovX9Lr { next },
            _ => Emulation::Skip { next },
        },
    }
}

impl ExecutorModel {
    /// A model over `text` for `arch`.
    pub fn new(text: SimText, arch: Arch) -> Self {
        ExecutorModel {
            text,
            arch,
            watched: Vec::new(),
            pending: BTreeMap::new(),
            table: None,
            stopped: false,
            violations: Vec::new(),
            observed: Observed::default(),
        }
    }

    /// Watch the window at `addr`, expected to go from `old` to `new` (the test's own
    /// expectation, independent of what the protocol is told).
    pub fn expect(&mut self, addr: u64, old: &[u8], new: &[u8]) {
        assert_eq!(old.len(), new.len());
        self.watched.push(Watched {
            addr,
            old: old.to_vec(),
            new: new.to_vec(),
            old_at: boundaries(self.arch, addr, old),
            new_at: boundaries(self.arch, addr, new),
            settled: false,
        });
    }

    /// Forget the watched windows (before the next batch).
    pub fn clear_expectations(&mut self) {
        self.watched.clear();
    }

    fn unit(&self) -> u64 {
        match self.arch {
            Arch::X86_64 => 1,
            Arch::Aarch64 => 4,
        }
    }

    fn unit_value(&self, ua: u64) -> [u8; 4] {
        let u = self.unit() as usize;
        let mut v = [0; 4];
        v[..u].copy_from_slice(self.text.bytes(ua, u));
        v
    }

    /// Checks every watched window in the current state.
    fn check(&mut self, when: &str) {
        if self.stopped {
            return;
        }
        self.observed.states += 1;
        let unit = self.unit();
        let bp = self.arch.breakpoint();
        for wi in 0..self.watched.len() {
            let w = &self.watched[wi];
            let len = w.old.len();
            let units: Vec<u64> = (0..len as u64)
                .step_by(unit as usize)
                .map(|o| w.addr + o)
                .collect();
            let cands: Vec<Vec<[u8; 4]>> = units
                .iter()
                .map(|&ua| match self.pending.get(&ua) {
                    Some(v) => v.clone(),
                    None => vec![self.unit_value(ua)],
                })
                .collect();
            let total: usize = cands.iter().map(Vec::len).product();
            let mut idx = vec![0usize; cands.len()];
            for _ in 0..total {
                let mut seen = vec![0u8; len];
                for (k, c) in cands.iter().enumerate() {
                    let o = k * unit as usize;
                    seen[o..o + unit as usize].copy_from_slice(&c[idx[k]][..unit as usize]);
                }
                for p0 in 0..len {
                    let start = if w.settled {
                        w.new_at[p0]
                    } else {
                        w.old_at[p0]
                    };
                    if start == 0 {
                        continue;
                    }
                    // a CPU at an old boundary runs on through the window in this state
                    let mut p = p0;
                    while p < len {
                        if p == 0 && seen[..bp.len()] == *bp {
                            self.observed.breakpoints += 1;
                            let expect = expected_emulation(self.arch, w.addr, &w.new);
                            // the handler runs after the (serialising) trap and reads memory
                            // as it is now, which may already be past the breakpoint
                            let mem = self.text.bytes(w.addr, bp.len()).to_vec();
                            let want = if mem == *bp {
                                TrapAction::Emulate(expect)
                            } else {
                                TrapAction::Restart { pc: w.addr }
                            };
                            let got = self.table.map(|t| {
                                // SAFETY: the pointer was published by `breakpoints_armed` and
                                // is cleared by `breakpoints_disarmed`; in between, `apply`
                                // keeps the slice alive and only reads it (statuses are
                                // atomics), so a shared view is sound.
                                let sites = unsafe { &*t };
                                BreakpointTable::new(self.arch, sites).trap(w.addr, &mem)
                            });
                            if got != Some(want) {
                                self.violations.push(format!(
                                    "{when}: site {:#x}: breakpoint resolved as {got:?}, expected {want:?}",
                                    w.addr
                                ));
                            }
                            break;
                        }
                        let (lo, ln) = (w.old_at[p], w.new_at[p]);
                        if lo != 0 && seen[p..p + lo] == w.old[p..p + lo] {
                            self.observed.old += 1;
                            p += lo;
                        } else if ln != 0 && seen[p..p + ln] == w.new[p..p + ln] {
                            self.observed.new += 1;
                            p += ln;
                        } else {
                            self.violations.push(format!(
                                "{when}: site {:#x}: a CPU at +{p} fetches {:02x?} (old {:02x?}, new {:02x?}): torn",
                                w.addr, &seen[p..], w.old, w.new
                            ));
                            break;
                        }
                    }
                }
                // next combination
                for k in 0..idx.len() {
                    idx[k] += 1;
                    if idx[k] < cands[k].len() {
                        break;
                    }
                    idx[k] = 0;
                }
            }
        }
    }

    /// Checks that every watched window now holds its new contents (or, for those in
    /// `failed`, its old ones), and records a violation otherwise.
    pub fn check_final(&mut self, failed: &[u64]) {
        for w in &self.watched {
            let now = self.text.bytes(w.addr, w.old.len());
            let want = if failed.contains(&w.addr) {
                &w.old
            } else {
                &w.new
            };
            if now != &want[..] {
                self.violations.push(format!(
                    "final: site {:#x} holds {:02x?}, expected {:02x?}",
                    w.addr, now, want
                ));
            }
        }
    }
}

impl TextPoke for ExecutorModel {
    fn read_text(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), TextFault> {
        self.text.read_text(addr, buf)
    }

    fn write_text(&mut self, addr: u64, bytes: &[u8]) -> Result<(), TextFault> {
        let unit = self.unit();
        // remember what each touched unit held before, then write
        let first = addr & !(unit - 1);
        let last = (addr + bytes.len() as u64).div_ceil(unit) * unit;
        let mut before = Vec::new();
        let mut ua = first;
        while ua < last {
            if self.text.range(ua, unit as usize).is_some() {
                before.push((ua, self.unit_value(ua)));
            }
            ua += unit;
        }
        self.text.write_text(addr, bytes)?;
        if !self.stopped {
            for (ua, v) in before {
                let now = self.unit_value(ua);
                let e = self.pending.entry(ua).or_insert_with(|| vec![v]);
                if !e.contains(&now) {
                    e.push(now);
                }
            }
        }
        self.check("after a write");
        Ok(())
    }

    fn sync_cores(&mut self) {
        self.text.sync_cores();
        self.pending.clear();
        self.check("after a sync");
    }

    fn stop_others(&mut self, fixup: &StopFixup<'_>, patch: &mut dyn FnMut(&mut Self)) {
        self.text.stops += 1;
        self.stopped = true;
        patch(self);
        self.stopped = false;
        // release: every parked PC at a boundary of the old contents resumes through the fixup
        self.pending.clear();
        for w in &mut self.watched {
            let now = self.text.bytes(w.addr, w.new.len());
            let landing = if now == &w.new[..] {
                &w.new_at
            } else if now == &w.old[..] {
                &w.old_at
            } else {
                self.violations.push(format!(
                    "release: site {:#x} holds {now:02x?}, neither old nor new",
                    w.addr
                ));
                continue;
            };
            // threads are parked at boundaries of what the window held before this stop
            let parked = if w.settled { &w.new_at } else { &w.old_at };
            for (p, _) in parked.iter().enumerate().filter(|(_, l)| **l != 0) {
                let pc = w.addr + p as u64;
                let resume = fixup.resume_pc(pc).unwrap_or(pc);
                if resume != pc {
                    self.observed.fixups += 1;
                }
                let off = resume.wrapping_sub(w.addr);
                if off < w.new.len() as u64 && landing[off as usize] == 0 {
                    self.violations.push(format!(
                        "release: site {:#x}: a thread stopped at +{p} resumes at +{off}, inside an instruction of {now:02x?}",
                        w.addr
                    ));
                }
            }
            w.settled = now == &w.new[..];
        }
        self.check("after release");
    }

    fn breakpoints_armed(&mut self, table: &BreakpointTable<'_>) {
        self.table = Some(table.sites() as *const [PokeSite]);
    }

    fn breakpoints_disarmed(&mut self) {
        self.table = None;
    }
}
