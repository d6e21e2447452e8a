//! The record table (the kernel's `ftrace_pages` of `dyn_ftrace`): every call site, sorted by
//! address, with the per-site reference counts kept by `__ftrace_hash_rec_update()` and the
//! update pass `ftrace_replace_code()` that brings the text to the wanted state.
//!
//! Invariant: after [`RecordTable::replace_code`] every record that is not `DISABLED` has its
//! `_EN` flags equal to what its bytes are, and its bytes are the form's NOP or a call to the
//! address `ftrace_get_addr_new()` chooses; a record whose site held unexpected bytes is
//! `DISABLED`, reported, and never written again.

use ftrace_core::Errno;

use crate::aarch64;
use ftrace_core::symbols::SymbolTable;

use crate::bug::{BugReason, BugType, FtraceBug, fmt_sym, fmt_sym_name};
use crate::ops::{CallTargets, OpsRecFlags, RecordOps};
use crate::protocol::{self, Method, PokeSite, Protocol, SiteStatus, TrapAction};
use crate::record::{DynFtrace, RecFlags, Update};
use crate::site::{self, Arch, SiteBytes, SiteForm};
use crate::text::TextPoke;

/// Counts of one update or initialisation pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UpdateStats {
    /// Records whose state changed.
    pub updated: usize,
    /// Records that failed (reported and disabled).
    pub failed: usize,
    /// Batches applied.
    pub batches: usize,
    /// `sync_cores` calls.
    pub syncs: usize,
    /// Batches that stopped the machine.
    pub stops: usize,
}

/// What one update pass does (the arguments of `ftrace_replace_code()` and what it reads from
/// globals in the kernel).
#[derive(Clone, Copy)]
pub struct UpdatePass<'a> {
    /// The common trampolines.
    pub targets: &'a dyn CallTargets,
    /// The enabled ops list.
    pub ops: &'a [&'a dyn RecordOps],
    /// `FTRACE_UPDATE_CALLS` (true) or `FTRACE_DISABLE_CALLS` (false: every site to NOP).
    pub enable: bool,
    /// The protocol.
    pub protocol: Protocol,
}

/// Which call sites [`init_records`] expects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InitKind {
    /// x86_64 `__mcount_loc` / `__patchable_function_entries` (all forms).
    X86,
    /// AArch64 `-fpatchable-function-entry=2` (`call_ops: false`) or `=4,2` (`true`).
    A64 {
        /// The `CALL_OPS` layout.
        call_ops: bool,
        /// `&ftrace_nop_ops`, stored in every literal.
        nop_ops: u64,
    },
}

/// All call sites of one text, sorted by address. `S` is the record storage: a caller-provided
/// `&mut [DynFtrace]`, or (with `alloc`) a `Vec<DynFtrace>`.
#[derive(Debug)]
pub struct RecordTable<S> {
    recs: S,
    arch: Arch,
}

/// The op in `ops` that admits `ip` and matches `pred`.
fn find_op<'o>(
    ops: &[&'o dyn RecordOps],
    ip: u64,
    pred: impl Fn(&dyn RecordOps) -> bool,
) -> Option<&'o dyn RecordOps> {
    ops.iter().copied().find(|o| pred(*o) && o.admits(ip))
}

impl<S: AsRef<[DynFtrace]> + AsMut<[DynFtrace]>> RecordTable<S> {
    /// Takes the records (sorting them by address). `EINVAL` if two windows overlap, or the
    /// forms mix instruction sets.
    pub fn new(mut recs: S) -> Result<Self, Errno> {
        let r = recs.as_mut();
        r.sort_unstable_by_key(|r| r.ip);
        let arch = r.first().map_or(Arch::X86_64, |r| r.form().arch());
        let ok = r
            .windows(2)
            .all(|w| w[0].ip + w[0].form().window_len() as u64 <= w[1].ip)
            && r.iter().all(|x| x.form().arch() == arch);
        if !ok {
            return Err(Errno::EINVAL);
        }
        Ok(RecordTable { recs, arch })
    }

    /// The records, sorted by address.
    #[inline]
    pub fn records(&self) -> &[DynFtrace] {
        self.recs.as_ref()
    }

    /// The instruction set.
    #[inline]
    pub fn arch(&self) -> Arch {
        self.arch
    }

    /// Number of records.
    #[inline]
    pub fn len(&self) -> usize {
        self.records().len()
    }

    /// Whether there are none.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.records().is_empty()
    }

    /// The index of the record at `ip` (`ftrace_location()`; binary search).
    pub fn find(&self, ip: u64) -> Option<usize> {
        self.records().binary_search_by_key(&ip, |r| r.ip).ok()
    }

    /// Resolves a breakpoint trap that arrives after its batch was disarmed (a userspace signal
    /// delivered late): if `bp_addr` is a site and `head` (what is there now) is no longer the
    /// breakpoint, restart at the site; otherwise it is not ours.
    pub fn late_trap(&self, bp_addr: u64, head: &[u8]) -> TrapAction {
        let bp = self.arch.breakpoint();
        match self.find(bp_addr) {
            Some(_) if !(head.len() >= bp.len() && head[..bp.len()] == *bp) => {
                TrapAction::Restart { pc: bp_addr }
            }
            _ => TrapAction::NotOurs,
        }
    }

    /// Whether any record's flags ask for a rewrite for `enable` (`ftrace_test_record() !=
    /// IGNORE`). [`RecordTable::replace_code`] also retargets enabled sites whose trampoline
    /// changed without a flag change, which this does not see.
    pub fn needs_update(&self, enable: bool) -> bool {
        self.records()
            .iter()
            .any(|r| r.check(enable) != Update::Ignore)
    }

    /// An ops was registered and enabled (`ftrace_hash_rec_enable`): every record it admits
    /// gains a reference. `ops` is the list of enabled ops *including* `op`. Returns whether some
    /// site may now need rewriting (its flags changed, or it is enabled and its users changed). `EBUSY` (and no change) if `op` is `IPMODIFY` (`DIRECT`) and a
    /// function it admits already has an `IPMODIFY` (`DIRECT`) ops.
    pub fn ops_enable(
        &mut self,
        op: &dyn RecordOps,
        ops: &[&dyn RecordOps],
    ) -> Result<bool, Errno> {
        self.rec_delta(None, Some(op), ops)
    }

    /// An ops was disabled (`ftrace_hash_rec_disable`): every record it admitted loses a
    /// reference. `ops` is the list of enabled ops *without* `op`.
    pub fn ops_disable(&mut self, op: &dyn RecordOps, ops: &[&dyn RecordOps]) -> bool {
        // removing never conflicts
        self.rec_delta(Some(op), None, ops).unwrap_or(false)
    }

    /// An enabled ops' filter or notrace hash changed (`ftrace_hash_rec_disable_modify` +
    /// `ftrace_hash_rec_enable_modify`): `old` views it with the old hashes, `new` with the new;
    /// `ops` is the enabled list holding `new`. Records only `old` admits lose a reference,
    /// records only `new` admits gain one. `EBUSY` (and no change) on an `IPMODIFY` or `DIRECT` conflict.
    pub fn ops_modify(
        &mut self,
        old: &dyn RecordOps,
        new: &dyn RecordOps,
        ops: &[&dyn RecordOps],
    ) -> Result<bool, Errno> {
        self.rec_delta(Some(old), Some(new), ops)
    }

    fn rec_delta(
        &mut self,
        old: Option<&dyn RecordOps>,
        new: Option<&dyn RecordOps>,
        ops: &[&dyn RecordOps],
    ) -> Result<bool, Errno> {
        let flags_of = |o: Option<&dyn RecordOps>| o.map_or(OpsRecFlags::empty(), |o| o.flags());
        let (oflags, nflags) = (flags_of(old), flags_of(new));
        let admits = |o: Option<&dyn RecordOps>, ip| o.is_some_and(|o| o.admits(ip));
        // Conflicts first, so a refusal changes nothing (`__ftrace_hash_update_ipmodify`).
        for r in self.records() {
            if r.skip() {
                continue;
            }
            let (a, b) = (admits(old, r.ip), admits(new, r.ip));
            if b && !a {
                // one IPMODIFY ops per function; one direct trampoline per function (the
                // kernel's `direct_functions` hash refuses a second with EBUSY)
                if (nflags.contains(OpsRecFlags::IPMODIFY) && r.flags.contains(RecFlags::IPMODIFY))
                    || (nflags.contains(OpsRecFlags::DIRECT) && r.flags.contains(RecFlags::DIRECT))
                {
                    return Err(Errno::EBUSY);
                }
                if r.count() >= RecFlags::REF_MAX - 1 {
                    return Err(Errno::EBUSY);
                }
            }
        }
        let mut update = false;
        for r in self.recs.as_mut() {
            if r.skip() {
                continue;
            }
            let (a, b) = (admits(old, r.ip), admits(new, r.ip));
            let (op, inc) = match (a, b) {
                (false, true) => (new.unwrap(), true),
                (true, false) => (old.unwrap(), false),
                _ => continue,
            };
            let fl = op.flags();
            if inc {
                r.flags.0 += 1;
                if fl.contains(OpsRecFlags::IPMODIFY) {
                    r.flags.set(RecFlags::IPMODIFY, true);
                }
                if fl.contains(OpsRecFlags::DIRECT) {
                    r.flags.set(RecFlags::DIRECT, true);
                }
                if fl.contains(OpsRecFlags::SAVE_REGS) {
                    r.flags.set(RecFlags::REGS, true);
                }
            } else {
                debug_assert!(r.count() > 0, "reference count underflow at {:#x}", r.ip);
                if r.count() == 0 {
                    continue;
                }
                r.flags.0 -= 1;
                // IPMODIFY / DIRECT stay while a remaining ops has them (two can meet on a
                // module record counted in by `set_disabled`)
                let (ip, left) = (r.ip, r.count());
                let remaining = |flag: OpsRecFlags| {
                    left > 0 && find_op(ops, ip, |o| o.flags().contains(flag)).is_some()
                };
                if oflags.contains(OpsRecFlags::IPMODIFY) {
                    r.flags
                        .set(RecFlags::IPMODIFY, remaining(OpsRecFlags::IPMODIFY));
                }
                if fl.contains(OpsRecFlags::DIRECT) {
                    r.flags
                        .set(RecFlags::DIRECT, remaining(OpsRecFlags::DIRECT));
                }
                // REGS only while some remaining ops wants it (`test_rec_ops_needs_regs`).
                if r.flags.contains(RecFlags::REGS) && fl.contains(OpsRecFlags::SAVE_REGS) {
                    let keep = r.count() > 0
                        && find_op(ops, r.ip, |o| o.flags().contains(OpsRecFlags::SAVE_REGS))
                            .is_some();
                    r.flags.set(RecFlags::REGS, keep);
                }
            }
            // TRAMP and CALL_OPS describe the single remaining ops, if there is one.
            let single = if r.count() == 1 {
                if inc && r.count() == 1 {
                    Some(op)
                } else {
                    find_op(ops, r.ip, |_| true)
                }
            } else {
                None
            };
            r.flags.set(
                RecFlags::TRAMP,
                single.is_some_and(|o| o.trampoline().is_some()),
            );
            r.flags.set(
                RecFlags::CALL_OPS,
                r.form().has_call_ops()
                    && single.is_some_and(|o| o.flags().contains(OpsRecFlags::CALL_OPS_OK)),
            );
            if r.count() == 0 {
                // nothing is wanted any more; the _EN bits go when the site becomes a NOP
                r.flags.set(
                    RecFlags(
                        RecFlags::REGS.0
                            | RecFlags::TRAMP.0
                            | RecFlags::DIRECT.0
                            | RecFlags::CALL_OPS.0
                            | RecFlags::IPMODIFY.0,
                    ),
                    false,
                );
            }
            // an enabled site whose users changed may need another trampoline even when its
            // flags do not say so
            update |= r.check(true) != Update::Ignore || r.flags.contains(RecFlags::ENABLED);
        }
        Ok(update)
    }

    /// `available_filter_functions` (or, with `addrs`, `available_filter_functions_addrs`): one
    /// line per record in address order, `%ps` of the site (`name` or `name [module]`), preceded
    /// by `"%lx "` of the site address with `addrs`. A site without a symbol prints its address.
    pub fn write_available(
        &self,
        out: &mut dyn core::fmt::Write,
        syms: &dyn SymbolTable,
        addrs: bool,
    ) -> core::fmt::Result {
        for r in self.records() {
            if addrs {
                write!(out, "{:x} ", r.ip)?;
            }
            fmt_sym_name(out, syms, r.ip)?;
            out.write_str("\n")?;
        }
        Ok(())
    }

    /// `enabled_functions` (or, with `touched`, `touched_functions`) as Linux 6.12 prints it:
    /// for each record that is `ENABLED` (`TOUCHED`), `%ps`, the flag columns
    /// ([`DynFtrace::write_enabled_columns`]), then with `TRAMP_EN` one
    /// `"\ttramp: %pS (%pS) ->%pS"` per trampoline ops admitting it (trampoline, callback, and
    /// the callback the trampoline calls), with `CALL_OPS_EN` `"\tops: %pS (%pS)"`, with
    /// `DIRECT` `"\n\tdirect-->%pS"`, and a newline. `ops` is the enabled list.
    pub fn write_enabled(
        &self,
        out: &mut dyn core::fmt::Write,
        syms: &dyn SymbolTable,
        ops: &[&dyn RecordOps],
        touched: bool,
    ) -> core::fmt::Result {
        let shown = if touched {
            RecFlags::TOUCHED
        } else {
            RecFlags::ENABLED
        };
        for r in self.records().iter().filter(|r| r.flags.contains(shown)) {
            fmt_sym_name(out, syms, r.ip)?;
            r.write_enabled_columns(out)?;
            if r.flags.contains(RecFlags::TRAMP_EN) {
                let mut any = false;
                for o in ops.iter().filter(|o| o.admits(r.ip)) {
                    if let Some(t) = o.trampoline() {
                        out.write_str("\ttramp: ")?;
                        fmt_sym(out, syms, t)?;
                        out.write_str(" (")?;
                        fmt_sym(out, syms, o.func())?;
                        out.write_str(") ->")?;
                        fmt_sym(out, syms, o.func())?;
                        any = true;
                    }
                }
                if !any {
                    out.write_str("\ttramp: ERROR!")?;
                }
            }
            if r.flags.contains(RecFlags::CALL_OPS_EN) {
                match find_op(ops, r.ip, |_| true).filter(|_| r.count() == 1) {
                    Some(o) => {
                        out.write_str("\tops: ")?;
                        fmt_sym(out, syms, o.ops_addr())?;
                        out.write_str(" (")?;
                        fmt_sym(out, syms, o.func())?;
                        out.write_str(")")?;
                    }
                    None => out.write_str("\tops: ERROR!")?,
                }
            }
            if r.flags.contains(RecFlags::DIRECT) {
                let d = find_op(ops, r.ip, |o| o.flags().contains(OpsRecFlags::DIRECT))
                    .and_then(|o| o.direct_call(r.ip));
                if let Some(d) = d {
                    out.write_str("\n\tdirect-->")?;
                    fmt_sym(out, syms, d)?;
                }
            }
            out.write_str("\n")?;
        }
        Ok(())
    }

    /// Marks record `i` disabled (module init text going away) or enables it again
    /// (`ftrace_module_enable`: its reference count is recomputed from `ops`, the enabled list).
    /// Disabling leaves the bytes alone; run [`RecordTable::replace_code`] first if it is live.
    pub fn set_disabled(&mut self, i: usize, disabled: bool, ops: &[&dyn RecordOps]) {
        let r = &mut self.recs.as_mut()[i];
        if disabled {
            r.flags.set(RecFlags::DISABLED, true);
            return;
        }
        if !r.flags.contains(RecFlags::DISABLED) {
            return;
        }
        let keep = r.flags.0 & (RecFlags::TOUCHED.0 | RecFlags::MODIFIED.0 | RecFlags::ENABLED.0);
        let mut f = RecFlags(keep);
        let mut n = 0;
        let mut single = None;
        for o in ops.iter().filter(|o| o.admits(r.ip)) {
            n += 1;
            single = Some(*o);
            let fl = o.flags();
            f.set(
                RecFlags::REGS,
                f.contains(RecFlags::REGS) || fl.contains(OpsRecFlags::SAVE_REGS),
            );
            f.set(
                RecFlags::IPMODIFY,
                f.contains(RecFlags::IPMODIFY) || fl.contains(OpsRecFlags::IPMODIFY),
            );
            f.set(
                RecFlags::DIRECT,
                f.contains(RecFlags::DIRECT) || fl.contains(OpsRecFlags::DIRECT),
            );
        }
        let single = if n == 1 { single } else { None };
        f.set(
            RecFlags::TRAMP,
            single.is_some_and(|o| o.trampoline().is_some()),
        );
        f.set(
            RecFlags::CALL_OPS,
            r.form().has_call_ops()
                && single.is_some_and(|o| o.flags().contains(OpsRecFlags::CALL_OPS_OK)),
        );
        f.0 |= n.min(RecFlags::REF_MAX);
        r.flags = f;
    }

    /// `ftrace_get_addr_new()` for a record whose `_EN` flags are already the new state, made
    /// callable from the site (an unreachable per-ops or direct trampoline falls back to the
    /// common one, as `ftrace_find_callable_addr()` does).
    fn addr_new(rec: &DynFtrace, ops: &[&dyn RecordOps], targets: &dyn CallTargets) -> u64 {
        let ip = rec.ip;
        let f = rec.flags;
        let mut addr = None;
        if f.contains(RecFlags::DIRECT_EN) {
            addr = find_op(ops, ip, |o| o.flags().contains(OpsRecFlags::DIRECT))
                .and_then(|o| o.direct_call(ip));
        }
        if addr.is_none() && f.contains(RecFlags::TRAMP_EN) {
            addr = find_op(ops, ip, |o| o.trampoline().is_some()).and_then(|o| o.trampoline());
        }
        let common = if f.contains(RecFlags::REGS_EN) {
            targets.regs_caller(ip)
        } else {
            targets.caller(ip)
        };
        match addr {
            Some(a) if rec.form().call(ip, a).is_ok() => a,
            _ => common,
        }
    }

    /// `ftrace_replace_code(enable)`: rewrites every record whose code differs from what its
    /// flags want, in batches of `scratch.len()` sites (at least 2), as `pass` says.
    ///
    /// A site whose bytes are not the expected ones, that faults, or whose target is out of
    /// reach is reported through `on_bug` (an [`FtraceBug`] with the kernel's fields), its record
    /// becomes `DISABLED` (count and wanted flags dropped) and the rest continue.
    pub fn replace_code<P: TextPoke>(
        &mut self,
        text: &mut P,
        pass: &UpdatePass<'_>,
        scratch: &mut [PokeSite],
        on_bug: &mut dyn FnMut(&FtraceBug),
    ) -> UpdateStats {
        let UpdatePass {
            targets,
            ops,
            enable,
            protocol,
        } = *pass;
        assert!(scratch.len() >= 2, "replace_code needs room for 2 sites");
        let arch = self.arch;
        let mut st = UpdateStats::default();
        let mut used = 0;
        let n = self.len();
        for i in 0..n {
            let rec = self.records()[i];
            if rec.skip() {
                continue;
            }
            let mut u = rec.check(enable);
            let form = rec.form();
            let mut next = rec;
            if u != Update::Ignore {
                next.update(enable);
            }
            let enabled = next.flags.contains(RecFlags::ENABLED);
            let target = enabled.then(|| Self::addr_new(&next, ops, targets));
            // The flags cannot tell one ops' trampoline from another's (two updates folded into
            // one, or the common trampoline moved): compare with what is installed.
            if u == Update::Ignore && enabled && target != rec.current_target() {
                u = Update::ModifyCall;
            }
            let lit = form.has_call_ops().then(|| {
                if !enabled {
                    targets.nop_ops()
                } else if next.flags.contains(RecFlags::CALL_OPS_EN) {
                    find_op(ops, rec.ip, |_| true).map_or(targets.list_ops(), |o| o.ops_addr())
                } else {
                    targets.list_ops()
                }
            });
            let lit_stale = match lit {
                Some(want) if u == Update::Ignore && enabled => {
                    let mut cur = [0u8; 8];
                    let at = aarch64::call_ops_literal(rec.ip);
                    text.read_text(at, &mut cur).is_err() || u64::from_le_bytes(cur) != want
                }
                Some(_) => u != Update::Ignore,
                None => false,
            };
            if u == Update::Ignore && !lit_stale {
                continue;
            }
            let old = match rec.current_target() {
                Some(t) => form.call(rec.ip, t).unwrap_or_else(|_| form.nop()),
                None => form.nop(),
            };
            let new = match target {
                Some(t) => match form.call(rec.ip, t) {
                    Ok(b) => b,
                    Err(_) => {
                        self.fail(
                            i,
                            BugReason::OutOfRange,
                            BugType::of(u),
                            None,
                            None,
                            ops,
                            targets,
                            on_bug,
                        );
                        st.failed += 1;
                        continue;
                    }
                },
                None => form.nop(),
            };
            if used + 2 > scratch.len() {
                self.flush(
                    text,
                    arch,
                    &mut scratch[..used],
                    protocol,
                    enable,
                    ops,
                    targets,
                    &mut st,
                    on_bug,
                );
                used = 0;
            }
            let tag = i as u32;
            if let Some(lit) = lit.filter(|_| lit_stale) {
                scratch[used] = PokeSite::data(aarch64::call_ops_literal(rec.ip), None, lit, tag);
                used += 1;
            }
            if old != new {
                scratch[used] = PokeSite::insn(arch, rec.ip, &old, &new, tag);
                used += 1;
            } else if !lit_stale {
                // the bytes stay (e.g. REGS changed but both trampolines are one): flags only
                let r = &mut self.recs.as_mut()[i];
                r.update(enable);
                st.updated += 1;
            }
        }
        if used > 0 {
            self.flush(
                text,
                arch,
                &mut scratch[..used],
                protocol,
                enable,
                ops,
                targets,
                &mut st,
                on_bug,
            );
        }
        st
    }

    #[allow(clippy::too_many_arguments)]
    fn flush<P: TextPoke>(
        &mut self,
        text: &mut P,
        arch: Arch,
        sites: &mut [PokeSite],
        protocol: Protocol,
        enable: bool,
        ops: &[&dyn RecordOps],
        targets: &dyn CallTargets,
        st: &mut UpdateStats,
        on_bug: &mut dyn FnMut(&FtraceBug),
    ) {
        let b = protocol::apply(text, arch, sites, protocol);
        st.batches += 1;
        st.syncs += b.syncs;
        st.stops += b.stopped as usize;
        let mut k = 0;
        while k < sites.len() {
            let tag = sites[k].tag();
            let mut end = k;
            while end < sites.len() && sites[end].tag() == tag {
                end += 1;
            }
            let group = &sites[k..end];
            let i = tag as usize;
            // the site that failed first (not one skipped because of it)
            let failed = group
                .iter()
                .find(|s| s.status().failed() && s.status() != SiteStatus::Skipped)
                .or_else(|| group.iter().find(|s| s.status() != SiteStatus::Done));
            match failed {
                None => {
                    let r = &mut self.recs.as_mut()[i];
                    r.update(enable);
                    let insn = group.iter().find(|s| s.method() != Method::Data);
                    let cur = match insn {
                        Some(s) => r.form().call_target(r.ip, s.new_bytes()).unwrap_or(0),
                        None => r.cur,
                    };
                    r.set_cur(if r.flags.contains(RecFlags::ENABLED) {
                        cur
                    } else {
                        0
                    });
                    st.updated += 1;
                }
                Some(s) => {
                    let reason = match s.status() {
                        SiteStatus::Mismatch => BugReason::Mismatch,
                        SiteStatus::ReadFault => BugReason::ReadFault,
                        SiteStatus::WriteFault | SiteStatus::Stuck | SiteStatus::StuckOld => {
                            BugReason::WriteFault
                        }
                        _ => BugReason::OutOfRange,
                    };
                    let clip = |b: &SiteBytes| {
                        SiteBytes::new(b.get(..arch.insn_size()).unwrap_or(b.as_slice()))
                    };
                    let actual = (s.status() == SiteStatus::Mismatch).then(|| clip(s.actual()));
                    let expected = (!s.old().is_empty()).then(|| clip(s.old()));
                    let rec = self.records()[i];
                    let bt = match BugType::of(rec.check(enable)) {
                        // a retarget the flags do not show
                        BugType::Unknown if rec.current_target().is_some() => BugType::Update,
                        bt => bt,
                    };
                    self.fail(i, reason, bt, actual, expected, ops, targets, on_bug);
                    st.failed += 1;
                }
            }
            k = end;
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn fail(
        &mut self,
        i: usize,
        reason: BugReason,
        bug_type: BugType,
        actual: Option<SiteBytes>,
        expected: Option<SiteBytes>,
        ops: &[&dyn RecordOps],
        targets: &dyn CallTargets,
        on_bug: &mut dyn FnMut(&FtraceBug),
    ) {
        let r = self.records()[i];
        let tramp = if r.flags.contains(RecFlags::TRAMP_EN) {
            find_op(ops, r.ip, |o| o.trampoline().is_some())
                .map(|o| (o.trampoline().unwrap_or(0), o.func()))
        } else {
            None
        };
        on_bug(&FtraceBug {
            ip: r.ip,
            reason,
            bug_type,
            actual,
            expected,
            flags: Some(r.flags),
            // ftrace_get_addr_curr(): what the _EN flags say, even for a NOP record
            expected_tramp: r.current_target().unwrap_or_else(|| {
                if r.flags.contains(RecFlags::REGS_EN) {
                    targets.regs_caller(r.ip)
                } else {
                    targets.caller(r.ip)
                }
            }),
            tramp,
        });
        let rec = &mut self.recs.as_mut()[i];
        rec.flags = RecFlags(
            RecFlags::DISABLED.0 | (rec.flags.0 & (RecFlags::TOUCHED.0 | RecFlags::MODIFIED.0)),
        );
    }
}

#[cfg(feature = "alloc")]
impl<S: AsRef<[DynFtrace]> + AsMut<[DynFtrace]>> RecordTable<S> {
    /// The traceable functions as the filter files see them: one symbol per record, named
    /// (and moduled) like the function of `syms` that holds the site, at the site's address,
    /// 1 byte long, in record (`available_filter_functions`) order. The filter hashes hold
    /// these addresses (`rec->ip`), which are what a trampoline passes the dispatcher. A site
    /// outside every symbol is left out.
    pub fn site_symbols(&self, syms: &dyn SymbolTable) -> ftrace_core::symbols::SortedSymbols {
        let mut out = ftrace_core::symbols::SortedSymbols::new();
        for r in self.records() {
            if let Some(s) = syms.lookup(r.ip) {
                out.push(s.name, r.ip, 1, s.module);
            }
        }
        out.finish();
        out
    }
}

#[cfg(feature = "alloc")]
impl RecordTable<alloc::vec::Vec<DynFtrace>> {
    /// [`RecordTable::replace_code`] with one batch sized to the work (heap scratch).
    pub fn replace_code_all<P: TextPoke>(
        &mut self,
        text: &mut P,
        pass: &UpdatePass<'_>,
        on_bug: &mut dyn FnMut(&FtraceBug),
    ) -> UpdateStats {
        let need = 2 * self
            .records()
            .iter()
            .filter(|r| r.check(pass.enable) != Update::Ignore)
            .count();
        let mut scratch: alloc::vec::Vec<PokeSite> =
            (0..need.max(2)).map(|_| PokeSite::empty()).collect();
        self.replace_code(text, pass, &mut scratch, on_bug)
    }
}

/// `ftrace_process_locs()` + `ftrace_init_nop()`: recognises the call site at each address of
/// `entries` (sorted in place), turns call forms into the form's NOP with `protocol`, and writes
/// one record per entry into `out` (which must be at least as long). Unrecognised sites are
/// reported (`Initializing ftrace call sites`) and their records are `DISABLED`. Returns the
/// number of records written and the counts.
pub fn init_records<P: TextPoke>(
    text: &mut P,
    kind: InitKind,
    entries: &mut [u64],
    out: &mut [DynFtrace],
    protocol: Protocol,
    scratch: &mut [PokeSite],
    on_bug: &mut dyn FnMut(&FtraceBug),
) -> (usize, UpdateStats) {
    assert!(out.len() >= entries.len() && scratch.len() >= 2);
    entries.sort_unstable();
    let arch = match kind {
        InitKind::X86 => Arch::X86_64,
        InitKind::A64 { .. } => Arch::Aarch64,
    };
    let mut st = UpdateStats::default();
    let mut used = 0;
    let report =
        |ip: u64, reason, actual: Option<SiteBytes>, on_bug: &mut dyn FnMut(&FtraceBug)| {
            on_bug(&FtraceBug {
                ip,
                reason,
                bug_type: BugType::Init,
                actual,
                expected: None,
                flags: None,
                expected_tramp: 0,
                tramp: None,
            })
        };
    let finish = |text: &mut P,
                  sites: &mut [PokeSite],
                  out: &mut [DynFtrace],
                  st: &mut UpdateStats,
                  on_bug: &mut dyn FnMut(&FtraceBug)| {
        let b = protocol::apply(text, arch, sites, protocol);
        st.batches += 1;
        st.syncs += b.syncs;
        st.stops += b.stopped as usize;
        for s in sites.iter() {
            let r = &mut out[s.tag() as usize];
            if s.status() != SiteStatus::Done && !r.flags.contains(RecFlags::DISABLED) {
                r.flags = RecFlags::DISABLED;
                st.failed += 1;
                let n = arch.insn_size().min(s.len());
                let actual = match s.status() {
                    SiteStatus::Mismatch => Some(SiteBytes::new(&s.actual()[..n])),
                    _ => None,
                };
                let reason = match s.status() {
                    SiteStatus::Mismatch => BugReason::Mismatch,
                    SiteStatus::ReadFault => BugReason::ReadFault,
                    SiteStatus::WriteFault | SiteStatus::Stuck | SiteStatus::StuckOld => {
                        BugReason::WriteFault
                    }
                    _ => BugReason::OutOfRange,
                };
                report(r.ip, reason, actual, on_bug);
            }
        }
    };
    for (i, &entry) in entries.iter().enumerate() {
        let init = match kind {
            InitKind::X86 => {
                let mut probe = [0u8; site::X86_PROBE_LEN];
                if text.read_text(entry, &mut probe).is_err() {
                    Err(None)
                } else {
                    site::classify_x86(entry, &probe).map_err(Some)
                }
            }
            InitKind::A64 { call_ops, nop_ops } => {
                site::classify_a64(entry, call_ops, nop_ops, |a, b| {
                    text.read_text(a, b).is_ok()
                })
                .map_err(|b| (!b.is_empty()).then_some(b))
            }
        };
        match init {
            Ok(s) => {
                out[i] = DynFtrace::new(s.ip, s.form);
                let k = s.writes.iter().flatten().count();
                if used + k > scratch.len() {
                    finish(text, &mut scratch[..used], out, &mut st, on_bug);
                    used = 0;
                }
                for w in s.writes.iter().flatten() {
                    scratch[used] = if w.data {
                        PokeSite::data(
                            w.addr,
                            Some(u64::from_le_bytes(
                                w.old.as_slice().try_into().unwrap_or([0; 8]),
                            )),
                            u64::from_le_bytes(w.new.as_slice().try_into().unwrap_or([0; 8])),
                            i as u32,
                        )
                    } else {
                        PokeSite::insn(arch, w.addr, &w.old, &w.new, i as u32)
                    };
                    used += 1;
                }
            }
            Err(actual) => {
                let form = match arch {
                    Arch::X86_64 => SiteForm::X86Nop5,
                    Arch::Aarch64 => SiteForm::A64Entry,
                };
                out[i] = DynFtrace::new(entry, form);
                out[i].flags = RecFlags::DISABLED;
                st.failed += 1;
                let reason = if actual.is_some() {
                    BugReason::Mismatch
                } else {
                    BugReason::ReadFault
                };
                report(entry, reason, actual, on_bug);
            }
        }
    }
    if used > 0 {
        finish(text, &mut scratch[..used], out, &mut st, on_bug);
    }
    st.updated = entries.len() - st.failed;
    (entries.len(), st)
}
