//! One call-site record (the kernel's `struct dyn_ftrace`): its address, the kernel's flag word
//! (wanted state `X`, code state `X_EN`, and a reference count in the low 19 bits), and the
//! decision function `ftrace_check_record()`.
//!
//! Invariant: `X_EN` flags describe the bytes at the site, `X` flags what the registered ops
//! want; [`DynFtrace::check`] compares the two and says which single rewrite (if any) brings the
//! code to the wanted state, and [`DynFtrace::update`] records that the rewrite happened.

use core::fmt;

use crate::site::SiteForm;

/// The flag word of a record, with the kernel's bit values (Linux 6.6+ layout).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(transparent)]
pub struct RecFlags(pub u32);

impl RecFlags {
    /// `FTRACE_FL_ENABLED`: the site calls a trampoline.
    pub const ENABLED: RecFlags = RecFlags(1 << 31);
    /// `FTRACE_FL_REGS`: some ops wants full registers (use the regs trampoline).
    pub const REGS: RecFlags = RecFlags(1 << 30);
    /// `FTRACE_FL_REGS_EN`: the site calls the regs trampoline.
    pub const REGS_EN: RecFlags = RecFlags(1 << 29);
    /// `FTRACE_FL_TRAMP`: exactly one ops, and it has its own trampoline.
    pub const TRAMP: RecFlags = RecFlags(1 << 28);
    /// `FTRACE_FL_TRAMP_EN`: the site calls that ops' trampoline.
    pub const TRAMP_EN: RecFlags = RecFlags(1 << 27);
    /// `FTRACE_FL_IPMODIFY`: an ops that may change the IP (livepatch) is attached; at most one.
    pub const IPMODIFY: RecFlags = RecFlags(1 << 26);
    /// `FTRACE_FL_DISABLED`: not to be touched (module init text, or a site that failed).
    pub const DISABLED: RecFlags = RecFlags(1 << 25);
    /// `FTRACE_FL_DIRECT`: a direct trampoline is attached.
    pub const DIRECT: RecFlags = RecFlags(1 << 24);
    /// `FTRACE_FL_DIRECT_EN`: the site calls the direct trampoline.
    pub const DIRECT_EN: RecFlags = RecFlags(1 << 23);
    /// `FTRACE_FL_CALL_OPS`: the single ops can be passed through the site's literal.
    pub const CALL_OPS: RecFlags = RecFlags(1 << 22);
    /// `FTRACE_FL_CALL_OPS_EN`: the literal holds that ops.
    pub const CALL_OPS_EN: RecFlags = RecFlags(1 << 21);
    /// `FTRACE_FL_TOUCHED`: ever had a callback attached.
    pub const TOUCHED: RecFlags = RecFlags(1 << 20);
    /// `FTRACE_FL_MODIFIED`: ever had an IPMODIFY or DIRECT ops attached.
    pub const MODIFIED: RecFlags = RecFlags(1 << 19);
    /// `FTRACE_NOCLEAR_FLAGS`: what survives the last ops leaving.
    pub const NOCLEAR: RecFlags = RecFlags(Self::DISABLED.0 | Self::TOUCHED.0 | Self::MODIFIED.0);
    /// `FTRACE_REF_MAX_SHIFT`.
    pub const REF_MAX_SHIFT: u32 = 19;
    /// `FTRACE_REF_MAX`: the count mask and its ceiling.
    pub const REF_MAX: u32 = (1 << Self::REF_MAX_SHIFT) - 1;

    /// Whether every bit of `other` is set.
    #[inline]
    pub const fn contains(self, other: RecFlags) -> bool {
        self.0 & other.0 == other.0
    }
    /// Whether any bit of `other` is set.
    #[inline]
    pub const fn intersects(self, other: RecFlags) -> bool {
        self.0 & other.0 != 0
    }
    /// `ftrace_rec_count()`.
    #[inline]
    pub const fn count(self) -> u32 {
        self.0 & Self::REF_MAX
    }
    /// Sets or clears `bits`.
    #[inline]
    pub fn set(&mut self, bits: RecFlags, on: bool) {
        if on {
            self.0 |= bits.0;
        } else {
            self.0 &= !bits.0;
        }
    }
    /// The union.
    #[inline]
    pub const fn union(self, other: RecFlags) -> RecFlags {
        RecFlags(self.0 | other.0)
    }
}

impl fmt::Debug for RecFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [(RecFlags, &str); 13] = [
            (RecFlags::ENABLED, "ENABLED"),
            (RecFlags::REGS, "REGS"),
            (RecFlags::REGS_EN, "REGS_EN"),
            (RecFlags::TRAMP, "TRAMP"),
            (RecFlags::TRAMP_EN, "TRAMP_EN"),
            (RecFlags::IPMODIFY, "IPMODIFY"),
            (RecFlags::DISABLED, "DISABLED"),
            (RecFlags::DIRECT, "DIRECT"),
            (RecFlags::DIRECT_EN, "DIRECT_EN"),
            (RecFlags::CALL_OPS, "CALL_OPS"),
            (RecFlags::CALL_OPS_EN, "CALL_OPS_EN"),
            (RecFlags::TOUCHED, "TOUCHED"),
            (RecFlags::MODIFIED, "MODIFIED"),
        ];
        write!(f, "{:#x}(count {}", self.0, self.count())?;
        for (b, n) in NAMES {
            if self.contains(b) {
                write!(f, " {n}")?;
            }
        }
        f.write_str(")")
    }
}

/// What a record needs (`FTRACE_UPDATE_*`, same values).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Update {
    /// `FTRACE_UPDATE_IGNORE`: the code already matches.
    Ignore = 0,
    /// `FTRACE_UPDATE_MAKE_CALL`: NOP to call.
    MakeCall = 1,
    /// `FTRACE_UPDATE_MODIFY_CALL`: call to a different call (trampoline, regs, direct, ops).
    ModifyCall = 2,
    /// `FTRACE_UPDATE_MAKE_NOP`: call to NOP.
    MakeNop = 3,
}

/// One call site.
///
/// 24 bytes: the kernel's 16-byte `{ ip, flags }` (flags are `unsigned long` there; every bit
/// fits 32) plus the site form and the target the site currently calls. Keeping the installed
/// target lets every rewrite verify the exact old bytes without reconstructing which ops a
/// trampoline belonged to (the kernel's `ftrace_get_addr_curr()`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
#[repr(C)]
pub struct DynFtrace {
    /// Address of the patch window (after `ftrace_call_adjust()`).
    pub ip: u64,
    /// The flag word.
    pub flags: RecFlags,
    form: u8,
    _reserved: [u8; 3],
    /// The target the site calls while `ENABLED` (0 while it is a NOP).
    pub(crate) cur: u64,
}

static_assertions::const_assert_eq!(core::mem::size_of::<DynFtrace>(), 24);

impl DynFtrace {
    /// A NOP record for the initialised site `ip` of `form`.
    pub const fn new(ip: u64, form: SiteForm) -> Self {
        DynFtrace {
            ip,
            flags: RecFlags(0),
            form: form as u8,
            _reserved: [0; 3],
            cur: 0,
        }
    }

    /// The site's form.
    #[inline]
    pub fn form(&self) -> SiteForm {
        SiteForm::from_u8(self.form).unwrap_or_default()
    }

    /// The target the site calls now, if enabled.
    #[inline]
    pub fn current_target(&self) -> Option<u64> {
        self.flags.contains(RecFlags::ENABLED).then_some(self.cur)
    }

    /// `ftrace_rec_count()`.
    #[inline]
    pub fn count(&self) -> u32 {
        self.flags.count()
    }

    /// `skip_record()`: disabled and not enabled; the accounting and the patcher leave it alone.
    #[inline]
    pub fn skip(&self) -> bool {
        self.flags.contains(RecFlags::DISABLED) && !self.flags.contains(RecFlags::ENABLED)
    }

    /// `ftrace_test_record(rec, enable)`: what the site needs, without changing the record.
    /// `enable` is `FTRACE_UPDATE_CALLS` (true) or `FTRACE_DISABLE_CALLS` (false).
    pub fn check(&self, enable: bool) -> Update {
        let mut r = *self;
        r.check_record(enable, false)
    }

    /// `ftrace_update_record(rec, enable)`: as [`DynFtrace::check`], and moves the `_EN` flags to
    /// the state the rewrite produces. Call it once the site has been rewritten.
    pub fn update(&mut self, enable: bool) -> Update {
        self.check_record(enable, true)
    }

    /// The flags the patched site will have: `check_record` with `update`.
    fn check_record(&mut self, enable: bool, update: bool) -> Update {
        use RecFlags as F;
        if self.skip() {
            return Update::Ignore;
        }
        let fl = self.flags;
        let count = fl.count();
        let differs = |a: F, b: F| fl.intersects(a) != fl.intersects(b);
        let mut flag = 0u32;
        if enable && count > 0 {
            flag = F::ENABLED.0;
        }
        if flag != 0 {
            if differs(F::REGS, F::REGS_EN) {
                flag |= F::REGS.0;
            }
            if differs(F::TRAMP, F::TRAMP_EN) {
                flag |= F::TRAMP.0;
            }
            // Direct and ops calls only when exactly one ops; otherwise the _EN must go.
            if count == 1 {
                if differs(F::DIRECT, F::DIRECT_EN) {
                    flag |= F::DIRECT.0;
                }
                if differs(F::CALL_OPS, F::CALL_OPS_EN) {
                    flag |= F::CALL_OPS.0;
                }
            } else {
                if fl.contains(F::DIRECT_EN) {
                    flag |= F::DIRECT.0;
                }
                if fl.contains(F::CALL_OPS_EN) {
                    flag |= F::CALL_OPS.0;
                }
            }
        }
        if fl.0 & F::ENABLED.0 == flag {
            return Update::Ignore;
        }
        if flag != 0 {
            // which bits change; ENABLED stays in `flag` only if it is being turned on
            flag ^= fl.0 & F::ENABLED.0;
            if update {
                let f = &mut self.flags;
                f.set(F::ENABLED.union(F::TOUCHED), true);
                if flag & F::REGS.0 != 0 {
                    let on = f.contains(F::REGS);
                    f.set(F::REGS_EN, on);
                }
                if flag & F::TRAMP.0 != 0 {
                    let on = f.contains(F::TRAMP);
                    f.set(F::TRAMP_EN, on);
                }
                if f.intersects(F::DIRECT.union(F::IPMODIFY)) {
                    f.set(F::MODIFIED, true);
                }
                if flag & F::DIRECT.0 != 0 {
                    let on = count == 1 && f.contains(F::DIRECT);
                    f.set(F::DIRECT_EN, on);
                }
                if flag & F::CALL_OPS.0 != 0 {
                    let on = count == 1 && f.contains(F::CALL_OPS);
                    f.set(F::CALL_OPS_EN, on);
                }
            }
            return if flag & F::ENABLED.0 != 0 {
                Update::MakeCall
            } else {
                Update::ModifyCall
            };
        }
        if update {
            if count == 0 {
                self.flags.0 &= F::NOCLEAR.0;
            } else {
                self.flags.set(
                    RecFlags(
                        F::ENABLED.0
                            | F::TRAMP_EN.0
                            | F::REGS_EN.0
                            | F::DIRECT_EN.0
                            | F::CALL_OPS_EN.0,
                    ),
                    false,
                );
            }
        }
        Update::MakeNop
    }

    /// What `ftrace_bug()` calls the failed operation for this record's pending update.
    pub fn bug_type(&self, enable: bool) -> crate::bug::BugType {
        use crate::bug::BugType;
        match self.check(enable) {
            Update::Ignore => BugType::Unknown,
            Update::MakeCall => BugType::Call,
            Update::ModifyCall => BugType::Update,
            Update::MakeNop => BugType::Nop,
        }
    }

    /// The columns `enabled_functions` and `touched_functions` print after the function name
    /// (Linux 6.12 `t_show`: `" (%ld)%s%s%s%s%s"` with `" R"`, `" I"`, `" D"`, `" O"` or two
    /// spaces each, then `" M "` or three spaces). The `\ttramp: …`, `\tops: …` and
    /// `direct-->` parts that may follow need symbols and ops, and are the caller's.
    pub fn write_enabled_columns(&self, out: &mut dyn fmt::Write) -> fmt::Result {
        let f = self.flags;
        let col = |b: RecFlags, s: &'static str, blank: &'static str| {
            if f.contains(b) { s } else { blank }
        };
        write!(
            out,
            " ({}){}{}{}{}{}",
            f.count(),
            col(RecFlags::REGS, " R", "  "),
            col(RecFlags::IPMODIFY, " I", "  "),
            col(RecFlags::DIRECT, " D", "  "),
            col(RecFlags::CALL_OPS, " O", "  "),
            col(RecFlags::MODIFIED, " M ", "   "),
        )
    }

    pub(crate) fn set_cur(&mut self, cur: u64) {
        self.cur = cur;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use RecFlags as F;

    fn rec(flags: u32) -> DynFtrace {
        let mut r = DynFtrace::new(0x1000, SiteForm::X86Nop5);
        r.flags = RecFlags(flags);
        r
    }

    #[test]
    fn flag_values_are_the_kernels() {
        assert_eq!(F::ENABLED.0, 0x8000_0000);
        assert_eq!(F::MODIFIED.0, 0x0008_0000);
        assert_eq!(F::REF_MAX, 0x7_ffff);
        assert_eq!(F::NOCLEAR.0, (1 << 25) | (1 << 20) | (1 << 19));
    }

    #[test]
    fn nop_with_users_becomes_call() {
        let mut r = rec(1);
        assert_eq!(r.check(true), Update::MakeCall);
        assert_eq!(r.check(false), Update::Ignore);
        assert_eq!(r.update(true), Update::MakeCall);
        assert_eq!(r.flags, RecFlags(1 | F::ENABLED.0 | F::TOUCHED.0));
        assert_eq!(r.check(true), Update::Ignore);
        // disabling calls (ftrace_enabled = 0) makes it a NOP but keeps the count
        assert_eq!(r.update(false), Update::MakeNop);
        assert_eq!(r.flags, RecFlags(1 | F::TOUCHED.0));
    }

    #[test]
    fn regs_and_tramp_changes_are_modify_call() {
        let mut r = rec(1 | F::ENABLED.0 | F::TRAMP.0);
        assert_eq!(r.update(true), Update::ModifyCall);
        assert!(r.flags.contains(F::TRAMP_EN));
        r.flags.set(F::TRAMP, false);
        r.flags.0 += 1;
        r.flags.set(F::REGS, true);
        assert_eq!(r.update(true), Update::ModifyCall);
        assert!(r.flags.contains(F::REGS_EN) && !r.flags.contains(F::TRAMP_EN));
    }

    #[test]
    fn direct_and_call_ops_only_with_one_user() {
        let mut r = rec(2 | F::DIRECT.0 | F::CALL_OPS.0);
        assert_eq!(r.update(true), Update::MakeCall);
        assert!(!r.flags.intersects(F::DIRECT_EN.union(F::CALL_OPS_EN)));
        assert!(r.flags.contains(F::MODIFIED));
        r.flags.0 -= 1;
        assert_eq!(r.update(true), Update::ModifyCall);
        assert!(r.flags.contains(F::DIRECT_EN.union(F::CALL_OPS_EN)));
        r.flags.0 += 1; // a second user: the _EN bits must be dropped
        assert_eq!(r.update(true), Update::ModifyCall);
        assert!(!r.flags.intersects(F::DIRECT_EN.union(F::CALL_OPS_EN)));
    }

    #[test]
    fn last_user_gone_clears_all_but_noclear() {
        let mut r = rec(F::ENABLED.0 | F::REGS.0 | F::REGS_EN.0 | F::TOUCHED.0 | F::MODIFIED.0);
        assert_eq!(r.update(true), Update::MakeNop);
        assert_eq!(r.flags, RecFlags(F::TOUCHED.0 | F::MODIFIED.0));
    }

    #[test]
    fn disabled_records_are_skipped_unless_enabled() {
        let r = rec(1 | F::DISABLED.0);
        assert_eq!(r.check(true), Update::Ignore);
        let r = rec(F::DISABLED.0 | F::ENABLED.0);
        assert_eq!(r.check(true), Update::MakeNop);
    }
}
