//! Live patch protocols: rewrite a sorted batch of call sites while other CPUs/threads keep
//! executing them.
//!
//! - **Breakpoint** (x86 `text_poke_bp_batch`, here for x86 and AArch64): write the breakpoint
//!   over the head of every window, sync, write every tail, sync, write every head, sync. A CPU
//!   that reaches a site meanwhile traps; its handler finds the site in the [`BreakpointTable`]
//!   and emulates the new instruction. Valid only when the old contents are one instruction (no
//!   CPU can be inside the window).
//! - **Stop-machine**: stop every other CPU, write, move any stopped PC that is inside a rewritten
//!   window to its end, release. The only way to rewrite gcc's five `90` live.
//! - **Atomic** (AArch64 `aarch64_insn_patch_text_nosync`): one aligned 32-bit store per site,
//!   then one sync; `nop`/`b`/`bl` may be swapped under concurrent execution.
//!
//! Invariant: before any byte of a site is written its whole window is read and compared with
//! the expected old bytes; a site that does not match is never written and is reported.

use crate::aarch64;
use crate::breakpoint::BreakpointSlot;
use crate::site::{Arch, SiteBytes};
use crate::text::TextPoke;
use crate::x86;
use ftrace_core::sync::{AtomicU8, Ordering, fence, loom_const_fn};

/// Which protocol to use for a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Protocol {
    /// Per site: x86 single-instruction old bytes → breakpoint, other x86 → stop-machine;
    /// AArch64 → atomic (what Linux does).
    #[default]
    Auto,
    /// The breakpoint protocol for every site; a site whose old bytes are not one instruction is
    /// refused ([`SiteStatus::Refused`]).
    Breakpoint,
    /// Stop-machine for every site.
    StopMachine,
    /// Single atomic stores (AArch64 only; x86 sites are refused).
    Atomic,
}

/// How a site was (or will be) written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Method {
    /// Not decided yet.
    Undecided = 0,
    /// Breakpoint protocol.
    Breakpoint = 1,
    /// Under stop-machine.
    StopMachine = 2,
    /// One atomic store.
    Atomic = 3,
    /// Data (a `CALL_OPS` literal): one aligned 8-byte store before the instruction phases.
    Data = 4,
}

/// Where a site is in its batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum SiteStatus {
    /// Not written yet.
    Pending = 0,
    /// Verified; the breakpoint is (or was) in place.
    Armed = 1,
    /// Rewritten.
    Done = 2,
    /// The old bytes were not as expected; untouched ([`PokeSite::actual`] has what was there).
    Mismatch = 3,
    /// Reading the window faulted; untouched.
    ReadFault = 4,
    /// A write failed; the old bytes are back.
    WriteFault = 5,
    /// Writing the new head failed: the breakpoint stays over the new tail, and the handler
    /// emulates the new instruction forever.
    Stuck = 6,
    /// Not attempted because an earlier site of the same record failed.
    Skipped = 7,
    /// The requested protocol cannot rewrite this site safely; untouched.
    Refused = 8,
    /// Writing the tail failed and the old head could not be put back: the breakpoint stays
    /// over the old tail, and the handler emulates the old instruction forever.
    StuckOld = 9,
}

impl SiteStatus {
    fn from_u8(v: u8) -> SiteStatus {
        match v {
            1 => SiteStatus::Armed,
            2 => SiteStatus::Done,
            3 => SiteStatus::Mismatch,
            4 => SiteStatus::ReadFault,
            5 => SiteStatus::WriteFault,
            6 => SiteStatus::Stuck,
            7 => SiteStatus::Skipped,
            8 => SiteStatus::Refused,
            9 => SiteStatus::StuckOld,
            _ => SiteStatus::Pending,
        }
    }

    /// Whether the site ended in a failure.
    pub fn failed(self) -> bool {
        !matches!(
            self,
            SiteStatus::Pending | SiteStatus::Armed | SiteStatus::Done
        )
    }
}

/// What a CPU that reaches a site mid-update must do instead of executing it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Emulation {
    /// A call: push/link `ret`, continue at `target`.
    Call {
        /// Callee.
        target: u64,
        /// Return address (end of the call instruction).
        ret: u64,
    },
    /// A jump to `target`.
    Jump {
        /// Destination.
        target: u64,
    },
    /// NOPs: continue at `next`.
    Skip {
        /// The first address after the window.
        next: u64,
    },
    /// AArch64 `mov x9, x30`, then continue at `next`.
    MovX9Lr {
        /// The next instruction.
        next: u64,
    },
    /// Not an instruction (data).
    None,
}

/// What a breakpoint handler does with a trap (see [`BreakpointTable::trap`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TrapAction {
    /// Not a site being patched: pass the trap on (debugger, `BUG()`, another user).
    NotOurs,
    /// The breakpoint is already gone (a late trap): resume at `pc`, the start of the site,
    /// and execute whatever is there now.
    Restart {
        /// The site.
        pc: u64,
    },
    /// Emulate the site's new instruction.
    Emulate(Emulation),
}

/// One write of a batch: a window, its expected old and its new contents.
#[derive(Debug)]
pub struct PokeSite {
    addr: u64,
    old: SiteBytes,
    new: SiteBytes,
    actual: SiteBytes,
    emulate: Emulation,
    method: Method,
    tag: u32,
    status: AtomicU8,
}

impl PokeSite {
    loom_const_fn! {
        /// An unused slot (to fill a caller-provided batch buffer:
        /// `[const { PokeSite::empty() }; N]`).
        pub fn empty() -> PokeSite {
            PokeSite {
                addr: 0,
                old: SiteBytes::EMPTY,
                new: SiteBytes::EMPTY,
                actual: SiteBytes::EMPTY,
                emulate: Emulation::None,
                method: Method::Undecided,
                tag: 0,
                status: AtomicU8::new(SiteStatus::Pending as u8),
            }
        }
    }

    /// A site rewriting instructions at `addr` from `old` to `new` (same length, ≤ 8 bytes).
    /// `tag` is the caller's cookie (the record index), reported back with the result.
    pub fn insn(arch: Arch, addr: u64, old: &[u8], new: &[u8], tag: u32) -> Self {
        debug_assert_eq!(old.len(), new.len());
        PokeSite {
            addr,
            old: SiteBytes::new(old),
            new: SiteBytes::new(new),
            actual: SiteBytes::new(old),
            emulate: emulation(arch, addr, new),
            method: Method::Undecided,
            tag,
            status: AtomicU8::new(SiteStatus::Pending as u8),
        }
    }

    /// A data write (an aligned 8-byte `CALL_OPS` literal); written before the batch's
    /// instruction phases. With `old`, the current value is verified first.
    pub fn data(addr: u64, old: Option<u64>, new: u64, tag: u32) -> Self {
        PokeSite {
            addr,
            old: old.map_or_else(SiteBytes::default, |o| SiteBytes::new(&o.to_le_bytes())),
            new: SiteBytes::new(&new.to_le_bytes()),
            actual: SiteBytes::default(),
            emulate: Emulation::None,
            method: Method::Data,
            tag,
            status: AtomicU8::new(SiteStatus::Pending as u8),
        }
    }

    /// The window's address.
    #[inline]
    pub fn addr(&self) -> u64 {
        self.addr
    }
    /// The window's length.
    #[inline]
    pub fn len(&self) -> usize {
        self.new.len()
    }
    /// Whether the window is empty (never, for a real site).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.new.is_empty()
    }
    /// The expected old contents.
    #[inline]
    pub fn old(&self) -> &SiteBytes {
        &self.old
    }
    /// The new contents.
    #[inline]
    pub fn new_bytes(&self) -> &SiteBytes {
        &self.new
    }
    /// What was found instead of [`PokeSite::old`] (after [`SiteStatus::Mismatch`]).
    #[inline]
    pub fn actual(&self) -> &SiteBytes {
        &self.actual
    }
    /// What a trapping CPU emulates.
    #[inline]
    pub fn emulation(&self) -> Emulation {
        self.emulate
    }
    /// The protocol chosen for it.
    #[inline]
    pub fn method(&self) -> Method {
        self.method
    }
    /// The caller's cookie.
    #[inline]
    pub fn tag(&self) -> u32 {
        self.tag
    }
    /// Its status.
    #[inline]
    pub fn status(&self) -> SiteStatus {
        SiteStatus::from_u8(self.status.load(Ordering::Acquire))
    }
    fn set_status(&self, s: SiteStatus) {
        self.status.store(s as u8, Ordering::Release);
    }
}

fn emulation(arch: Arch, addr: u64, new: &[u8]) -> Emulation {
    let next = addr.wrapping_add(new.len() as u64);
    match arch {
        Arch::X86_64 => match x86::decode(addr, new) {
            Some(x86::Decoded {
                insn: x86::Insn::Call { target },
                len,
            }) => Emulation::Call {
                target,
                ret: addr.wrapping_add(len as u64),
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

/// The handler-side view of a breakpoint batch: sorted sites and what to emulate at each.
#[derive(Clone, Copy, Debug)]
pub struct BreakpointTable<'a> {
    arch: Arch,
    sites: &'a [PokeSite],
}

impl<'a> BreakpointTable<'a> {
    /// A table over `sites` (sorted by address), as [`apply`] publishes it.
    pub fn new(arch: Arch, sites: &'a [PokeSite]) -> Self {
        BreakpointTable { arch, sites }
    }

    /// The sites (sorted by address).
    pub fn sites(&self) -> &'a [PokeSite] {
        self.sites
    }

    /// The instruction set.
    pub fn arch(&self) -> Arch {
        self.arch
    }

    /// Resolves a breakpoint trap at `bp_addr` (x86: the trapping `rip - 1`; AArch64: the
    /// faulting `pc`). `head` is what the handler reads at `bp_addr` now (1 byte on x86, the
    /// 4-byte word on AArch64). A binary search; safe to call from a signal or exception handler.
    pub fn trap(&self, bp_addr: u64, head: &[u8]) -> TrapAction {
        let Ok(i) = self.sites.binary_search_by_key(&bp_addr, |s| s.addr) else {
            return TrapAction::NotOurs;
        };
        let s = &self.sites[i];
        if s.method != Method::Breakpoint {
            return TrapAction::NotOurs;
        }
        let bp = self.arch.breakpoint();
        let is_bp = head.len() >= bp.len() && head[..bp.len()] == *bp;
        match (s.status(), is_bp) {
            (SiteStatus::Armed | SiteStatus::Done | SiteStatus::Stuck, true) => {
                TrapAction::Emulate(s.emulate)
            }
            (SiteStatus::StuckOld, true) => {
                TrapAction::Emulate(emulation(self.arch, s.addr, &s.old))
            }
            // late: the breakpoint is gone (finished, or the old head is back)
            (SiteStatus::Armed | SiteStatus::Done | SiteStatus::WriteFault, false) => {
                TrapAction::Restart { pc: s.addr }
            }
            _ => TrapAction::NotOurs,
        }
    }
}

/// The stop-machine view of a batch: where a stopped thread must resume.
#[derive(Clone, Copy, Debug)]
pub struct StopFixup<'a> {
    sites: &'a [PokeSite],
}

impl<'a> StopFixup<'a> {
    /// The sites (sorted by address).
    pub fn sites(&self) -> &'a [PokeSite] {
        self.sites
    }

    /// If `pc` (a stopped thread's saved PC) lies strictly inside a rewritten window, the PC to
    /// resume at instead: the end of the window (the thread was in the middle of NOPs; it skips
    /// the rest, and the new instruction, once). `None`: resume at `pc`.
    pub fn resume_pc(&self, pc: u64) -> Option<u64> {
        // the last site starting at or before pc
        let i = self.sites.partition_point(|s| s.addr <= pc);
        let s = self.sites.get(i.checked_sub(1)?)?;
        let end = s.addr.wrapping_add(s.len() as u64);
        (s.method == Method::StopMachine
            && s.status() == SiteStatus::Done
            && pc > s.addr
            && pc < end)
            .then_some(end)
    }
}

/// Counts of one batch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchStats {
    /// Sites rewritten.
    pub done: usize,
    /// Sites that failed (any failing status).
    pub failed: usize,
    /// `sync_cores` calls made.
    pub syncs: usize,
    /// Whether the batch stopped the machine.
    pub stopped: bool,
}

fn choose(arch: Arch, s: &PokeSite, protocol: Protocol) -> Method {
    if s.method == Method::Data {
        return Method::Data;
    }
    let one_insn = arch.insn_count(s.addr, &s.old) == Some(1);
    let aligned_word = s.len() == 4 && s.addr & 3 == 0;
    match (protocol, arch) {
        (Protocol::Auto, Arch::X86_64) if one_insn => Method::Breakpoint,
        (Protocol::Auto, Arch::X86_64) => Method::StopMachine,
        (Protocol::Auto, Arch::Aarch64) if aligned_word => Method::Atomic,
        (Protocol::Auto, Arch::Aarch64) => Method::StopMachine,
        (Protocol::Breakpoint, _) if one_insn => Method::Breakpoint,
        (Protocol::StopMachine, _) => Method::StopMachine,
        (Protocol::Atomic, Arch::Aarch64) if aligned_word => Method::Atomic,
        _ => Method::Undecided,
    }
}

/// Applies a batch. `sites` must be sorted by address with non-overlapping windows (else every
/// site is refused). Adjacent sites with the same `tag` form one record's group: every window
/// of the batch is verified before anything is written; a group with a failed site is skipped
/// as a whole; a group's data sites are written before its instructions. Results are in each
/// site's [`PokeSite::status`].
pub fn apply<P: TextPoke>(
    text: &mut P,
    arch: Arch,
    sites: &mut [PokeSite],
    protocol: Protocol,
) -> BatchStats {
    let mut st = BatchStats::default();
    let sorted = sites
        .windows(2)
        .all(|w| w[0].addr.wrapping_add(w[0].len() as u64) <= w[1].addr);

    // 1. Choose each site's method and verify every window, data included (nothing written).
    for s in sites.iter_mut() {
        s.method = if sorted {
            choose(arch, s, protocol)
        } else {
            Method::Undecided
        };
        if s.method == Method::Undecided {
            s.set_status(SiteStatus::Refused);
            continue;
        }
        if s.method == Method::Data && s.old.is_empty() {
            continue; // an unverified literal
        }
        let mut cur = [0u8; 8];
        let n = s.len();
        if text.read_text(s.addr, &mut cur[..n]).is_err() {
            s.set_status(SiteStatus::ReadFault);
        } else {
            let found = SiteBytes::new(&cur[..n]);
            if found != s.old {
                s.actual = found;
                s.set_status(SiteStatus::Mismatch);
            }
        }
    }
    // 2. Per record group: if any site failed, skip the rest; else write its data (literals
    //    go first, so the ops is in place before the call that loads it).
    let mut k = 0;
    while k < sites.len() {
        let tag = sites[k].tag;
        let mut end = k;
        while end < sites.len() && sites[end].tag == tag {
            end += 1;
        }
        let group = &mut sites[k..end];
        let mut failed = group.iter().any(|s| s.status().failed());
        for s in group.iter_mut() {
            if s.status() != SiteStatus::Pending {
                continue;
            }
            if failed {
                s.set_status(SiteStatus::Skipped);
            } else if s.method == Method::Data {
                if text.write_text(s.addr, &s.new).is_ok() {
                    s.set_status(SiteStatus::Done);
                } else {
                    s.set_status(SiteStatus::WriteFault);
                    failed = true;
                }
            }
        }
        k = end;
    }
    let sites: &[PokeSite] = sites;
    let pending = |m: Method| {
        sites
            .iter()
            .filter(move |s| s.method == m && s.status() == SiteStatus::Pending)
    };

    // Atomic single-word stores.
    if pending(Method::Atomic).next().is_some() {
        for s in pending(Method::Atomic) {
            match text.write_text(s.addr, &s.new) {
                Ok(()) => s.set_status(SiteStatus::Done),
                Err(_) => s.set_status(SiteStatus::WriteFault),
            }
        }
        text.sync_cores();
        st.syncs += 1;
    }

    // Breakpoint protocol.
    if pending(Method::Breakpoint).next().is_some() {
        let bp = arch.breakpoint();
        let head = bp.len();
        let table = BreakpointTable { arch, sites };
        let armed = || {
            sites
                .iter()
                .filter(|s| s.method == Method::Breakpoint && s.status() == SiteStatus::Armed)
        };
        // Step 1: breakpoint over every head. Every status is published, then the table (a
        // handler that finds the table armed finds its sites armed), and fenced (the kernel's
        // smp_wmb), before any breakpoint can be hit.
        for s in pending(Method::Breakpoint) {
            s.set_status(SiteStatus::Armed);
        }
        let slot: Option<&'static BreakpointSlot> = text.breakpoint_slot();
        if let Some(slot) = slot {
            // SAFETY: `table` and `sites` outlive this block, and the slot is disarmed (and
            // drained) at its end.
            unsafe { slot.arm(&table) };
        }
        text.breakpoints_armed(&table);
        fence(Ordering::SeqCst);
        for s in armed() {
            if text.write_text(s.addr, &bp).is_err() {
                s.set_status(SiteStatus::WriteFault);
            }
        }
        text.sync_cores();
        st.syncs += 1;
        // Step 2: every tail that changes.
        let mut wrote = false;
        for s in armed() {
            if s.len() > head && s.new[head..] != s.old[head..] {
                if text
                    .write_text(s.addr + head as u64, &s.new[head..])
                    .is_ok()
                {
                    wrote = true;
                } else {
                    // tail untouched (all-or-nothing): put the old head back
                    let back = text.write_text(s.addr, &s.old[..head]);
                    s.set_status(if back.is_ok() {
                        SiteStatus::WriteFault
                    } else {
                        SiteStatus::StuckOld
                    });
                    wrote |= back.is_ok();
                }
            }
        }
        if wrote {
            text.sync_cores();
            st.syncs += 1;
        }
        // Step 3: the new heads.
        for s in armed() {
            match text.write_text(s.addr, &s.new[..head]) {
                Ok(()) => s.set_status(SiteStatus::Done),
                Err(_) => s.set_status(SiteStatus::Stuck),
            }
        }
        text.sync_cores();
        st.syncs += 1;
        if let Some(slot) = slot {
            slot.disarm();
        }
        text.breakpoints_disarmed();
    }

    // Stop-machine.
    if pending(Method::StopMachine).next().is_some() {
        st.stopped = true;
        let fixup = StopFixup { sites };
        text.stop_others(&fixup, &mut |t: &mut P| {
            for s in pending(Method::StopMachine) {
                match t.write_text(s.addr, &s.new) {
                    Ok(()) => s.set_status(SiteStatus::Done),
                    Err(_) => s.set_status(SiteStatus::WriteFault),
                }
            }
        });
    }

    for s in sites {
        match s.status() {
            SiteStatus::Done => st.done += 1,
            SiteStatus::Pending => {}
            _ => st.failed += 1,
        }
    }
    st
}

/// Resolves a breakpoint trap that arrives after its batch was disarmed (a userspace `SIGTRAP`
/// delivered late), from a sorted array of every site address (which a signal handler can
/// read without locks): at a site whose `head` (read now) is no longer the breakpoint, restart;
/// otherwise not ours.
pub fn late_trap(arch: Arch, sites: &[u64], bp_addr: u64, head: &[u8]) -> TrapAction {
    let bp = arch.breakpoint();
    let is_bp = head.len() >= bp.len() && head[..bp.len()] == *bp;
    if !is_bp && sites.binary_search(&bp_addr).is_ok() {
        TrapAction::Restart { pc: bp_addr }
    } else {
        TrapAction::NotOurs
    }
}

/// Rewrites one instruction with `protocol` (the kernel's `smp_text_poke_single()`, formerly
/// `text_poke_bp()`): e.g. the `call ftrace_stub` at a trampoline's `ftrace_call` label
/// (`ftrace_update_ftrace_func()`). `old` is verified first; on failure the status says why and
/// nothing was written (or, for a failed write, the old bytes are back).
pub fn poke_single<P: TextPoke>(
    text: &mut P,
    arch: Arch,
    addr: u64,
    old: &[u8],
    new: &[u8],
    protocol: Protocol,
) -> Result<(), SiteStatus> {
    let mut site = [PokeSite::insn(arch, addr, old, new, 0)];
    apply(text, arch, &mut site, protocol);
    match site[0].status() {
        SiteStatus::Done => Ok(()),
        s => Err(s),
    }
}
