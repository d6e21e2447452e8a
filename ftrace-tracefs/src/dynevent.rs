//! `kprobe_events` and `dynamic_events`: rejected exactly as Linux rejects them.
//!
//! ftrace-rs has no kprobes, uprobes, synthetic or eprobe events (they need the kernel's
//! instruction probing and event subsystem). These files exist so that tools probing for them
//! get the kernel's answers: the same errno for malformed commands, the same `error_log` entry
//! for a probe on an unknown symbol (`trace_kprobe: error: Invalid probed address or symbol`),
//! and `EOPNOTSUPP` for a well-formed command the kernel would accept. Invariant: nothing is
//! ever created, so both files always read back empty.

use alloc::string::String;
use alloc::vec::Vec;

use ftrace_core::Errno;
use ftrace_core::symbols::SymbolTable;

use crate::parse::is_space;

/// The error-log callback: location, message, command, caret position.
pub type LogFn<'a> = dyn FnMut(&str, &'static str, &str, u16) + 'a;

/// Processes one write (`trace_parse_run_command`): one command per line, `#` starts a comment.
pub fn write(
    data: &[u8],
    kprobe_only: bool,
    syms: Option<&dyn SymbolTable>,
    log: &mut LogFn<'_>,
) -> Result<(), Errno> {
    let text = core::str::from_utf8(crate::parse::c_str(data)).map_err(|_| Errno::EINVAL)?;
    for line in text.split('\n') {
        let line = line.split('#').next().unwrap_or("");
        let argv: Vec<&str> = line
            .split(|c: char| c.is_ascii() && is_space(c as u8))
            .filter(|a| !a.is_empty())
            .collect();
        if argv.is_empty() {
            continue;
        }
        command(&argv, kprobe_only, syms, log)?;
    }
    Ok(())
}

fn command(
    argv: &[&str],
    kprobe_only: bool,
    syms: Option<&dyn SymbolTable>,
    log: &mut LogFn<'_>,
) -> Result<(), Errno> {
    let first = argv[0].as_bytes()[0];
    if first == b'-' || (!kprobe_only && first == b'!') {
        // Deleting an event: none exists.
        return Err(Errno::ENOENT);
    }
    match first {
        b'p' | b'r' if argv.len() >= 2 => kprobe(argv, syms, log),
        // Other dynamic-event kinds (synthetic, eprobe, fprobe): parsed by the kernel, absent
        // here.
        b's' | b'e' | b'f' | b't' if !kprobe_only && argv[0].len() > 1 && argv.len() >= 2 => {
            Err(Errno::EOPNOTSUPP)
        }
        // Every parser answered ECANCELED ("not mine"): EINVAL, no error_log entry.
        _ => Err(Errno::EINVAL),
    }
}

fn kprobe(argv: &[&str], syms: Option<&dyn SymbolTable>, log: &mut LogFn<'_>) -> Result<(), Errno> {
    let target = argv[1];
    if target.as_bytes()[0].is_ascii_digit() {
        // A raw address: well-formed, but ftrace-rs cannot place a kprobe.
        return Err(Errno::EOPNOTSUPP);
    }
    let sym = target.split('+').next().unwrap_or(target);
    let sym = sym.rsplit(':').next().unwrap_or(sym);
    let mut found = false;
    if let Some(t) = syms {
        t.for_each(&mut |s| found |= s.name == sym);
    }
    if !found {
        let cmd: String = argv.join(" ");
        let pos = argv[0].len() + 1;
        log(
            "trace_kprobe",
            "Invalid probed address or symbol",
            &cmd,
            pos as u16,
        );
        return Err(Errno::EINVAL);
    }
    Err(Errno::EOPNOTSUPP)
}
