//! `ftrace_bug()`: the report of a call site that could not be rewritten, printed with the
//! kernel's exact strings.
//!
//! Invariant: a reported site was left exactly as it was found (or, for a failed write, as the
//! platform left it) and its record is `DISABLED`; nothing writes to it again.

use core::fmt;

use ftrace_core::symbols::SymbolTable;

use crate::record::{RecFlags, Update};
use crate::site::SiteBytes;

/// Why a rewrite failed (the kernel's `failed` errno).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BugReason {
    /// `-EFAULT`: reading the site faulted.
    ReadFault,
    /// `-EINVAL`: the site does not hold the expected bytes.
    Mismatch,
    /// `-EPERM`: the write failed.
    WriteFault,
    /// Any other error: here, a branch target out of the instruction's reach.
    OutOfRange,
}

impl BugReason {
    /// The Linux errno value.
    pub const fn errno(self) -> ftrace_core::Errno {
        match self {
            BugReason::ReadFault => ftrace_core::Errno::EFAULT,
            BugReason::Mismatch => ftrace_core::Errno::EINVAL,
            BugReason::WriteFault => ftrace_core::Errno::EPERM,
            BugReason::OutOfRange => ftrace_core::Errno::ERANGE,
        }
    }
}

/// `ftrace_bug_type`: which operation was attempted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BugType {
    /// `FTRACE_BUG_UNKNOWN`.
    Unknown,
    /// `FTRACE_BUG_INIT`.
    Init,
    /// `FTRACE_BUG_NOP`.
    Nop,
    /// `FTRACE_BUG_CALL`.
    Call,
    /// `FTRACE_BUG_UPDATE`.
    Update,
}

impl BugType {
    /// The line `print_bug_type()` prints, if any.
    pub const fn text(self) -> Option<&'static str> {
        match self {
            BugType::Unknown => None,
            BugType::Init => Some("Initializing ftrace call sites"),
            BugType::Nop => Some("Setting ftrace call site to NOP"),
            BugType::Call => Some("Setting ftrace call site to call ftrace function"),
            BugType::Update => {
                Some("Updating ftrace call site to call a different ftrace function")
            }
        }
    }

    /// The bug type of an update kind.
    pub const fn of(update: Update) -> BugType {
        match update {
            Update::Ignore => BugType::Unknown,
            Update::MakeCall => BugType::Call,
            Update::ModifyCall => BugType::Update,
            Update::MakeNop => BugType::Nop,
        }
    }
}

/// One failed call site.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FtraceBug {
    /// The site.
    pub ip: u64,
    /// Why.
    pub reason: BugReason,
    /// What was being done.
    pub bug_type: BugType,
    /// The bytes found (`MCOUNT_INSN_SIZE` of them; `None` if reading faulted).
    pub actual: Option<SiteBytes>,
    /// The bytes expected there (the kernel's `ftrace_expected`).
    pub expected: Option<SiteBytes>,
    /// The record's flags when it failed (`None` for a site that never got a record).
    pub flags: Option<RecFlags>,
    /// `ftrace_get_addr_curr()`: what the site was believed to call (0 if a NOP).
    pub expected_tramp: u64,
    /// The trampoline and callback of the ops whose trampoline the site called, if any.
    pub tramp: Option<(u64, u64)>,
}

/// `%ps`: `name [module]`, or the raw address when unknown.
pub fn fmt_sym_name(f: &mut dyn fmt::Write, syms: &dyn SymbolTable, addr: u64) -> fmt::Result {
    match syms.lookup(addr) {
        Some(s) => {
            f.write_str(s.name)?;
            if let Some(m) = s.module {
                write!(f, " [{m}]")?;
            }
            Ok(())
        }
        None => write!(f, "{addr:#x}"),
    }
}

/// `%pS`: `name+0xoff/0xsize [module]`, or the raw address when unknown.
pub fn fmt_sym(f: &mut dyn fmt::Write, syms: &dyn SymbolTable, addr: u64) -> fmt::Result {
    match syms.lookup(addr) {
        Some(s) => {
            write!(f, "{}+{:#x}/{:#x}", s.name, addr - s.addr, s.size)?;
            if let Some(m) = s.module {
                write!(f, " [{m}]")?;
            }
            Ok(())
        }
        None => write!(f, "{addr:#x}"),
    }
}

impl FtraceBug {
    /// Writes the report exactly as the kernel's `ftrace_bug()` prints it (one `pr_info` per
    /// line, without log prefixes), resolving `%pS` with `syms`.
    pub fn write_report(&self, out: &mut dyn fmt::Write, syms: &dyn SymbolTable) -> fmt::Result {
        out.write_str("------------[ ftrace bug ]------------\n")?;
        let what = match self.reason {
            BugReason::ReadFault => "ftrace faulted on modifying ",
            BugReason::Mismatch => "ftrace failed to modify ",
            BugReason::WriteFault => "ftrace faulted on writing ",
            BugReason::OutOfRange => "ftrace faulted on unknown error ",
        };
        out.write_str(what)?;
        // print_ip_sym: "[<%px>] %pS\n"
        write!(out, "\n[<{:016x}>] ", self.ip)?;
        fmt_sym(out, syms, self.ip)?;
        out.write_str("\n")?;
        if self.reason == BugReason::Mismatch {
            match &self.actual {
                Some(a) => writeln!(out, " actual:   {a}")?,
                None => writeln!(out, " actual:   [FAULT] {:016x}", self.ip)?,
            }
            if let Some(e) = &self.expected {
                writeln!(out, " expected: {e}")?;
            }
        }
        if let Some(t) = self.bug_type.text() {
            writeln!(out, "{t}")?;
        }
        if let Some(fl) = self.flags {
            writeln!(out, "ftrace record flags: {:x}", fl.0)?;
            write!(
                out,
                " ({}){}{}",
                fl.count(),
                if fl.contains(RecFlags::REGS) {
                    " R"
                } else {
                    "  "
                },
                if fl.contains(RecFlags::CALL_OPS) {
                    " O"
                } else {
                    "  "
                },
            )?;
            if fl.contains(RecFlags::TRAMP_EN) {
                match self.tramp {
                    Some((tramp, func)) => {
                        out.write_str("\ttramp: ")?;
                        fmt_sym(out, syms, tramp)?;
                        out.write_str(" (")?;
                        fmt_sym(out, syms, func)?;
                        out.write_str(")")?;
                    }
                    None => out.write_str("\ttramp: ERROR!")?,
                }
            }
            write!(out, "\n expected tramp: {:x}\n", self.expected_tramp)?;
        }
        Ok(())
    }
}

/// `Display` without symbols (addresses print raw).
impl fmt::Display for FtraceBug {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct NoSyms;
        impl SymbolTable for NoSyms {
            fn lookup(&self, _: u64) -> Option<ftrace_core::symbols::Symbol<'_>> {
                None
            }
            fn for_each(&self, _: &mut dyn FnMut(ftrace_core::symbols::Symbol<'_>)) {}
        }
        self.write_report(f, &NoSyms)
    }
}
