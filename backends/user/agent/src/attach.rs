//! Attaching to a running process: the entry points the `ftrace` tool calls inside a process
//! it did not start, after loading the agent there with the process's own `dlopen` (see the
//! tool's `attach` module).
//!
//! An attached agent finds no configuration in its environment (its constructor stays inert);
//! [`ftrace_agent_attach`] reads it from a file instead, written by the tool: `KEY=VALUE`
//! entries separated by NUL bytes, the variables of [`crate::config`] (as
//! `/proc/PID/environ`). [`ftrace_agent_detach`] puts every site back as its NOP and retires
//! every thread's buffer, so that the process runs untraced and a later attach starts afresh.
//!
//! Invariant: between a detach and the next attach no site calls the agent and no thread holds
//! a buffer of the old recording; threads that exist before an attach get their state on
//! their first traced call, as threads started later do.

use core::sync::atomic::Ordering;
use std::ffi::CStr;
use std::fmt::Write as _;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use crate::config::{Config, TracerKind};
use crate::{Arrival, agent, clock, dispatch, handler, start, text};

/// Parses the NUL-separated `KEY=VALUE` entries of an attach configuration file.
pub fn parse_config(bytes: &[u8]) -> Result<Option<Config>, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))?;
    let vars: Vec<(&str, &str)> = text
        .split('\0')
        .filter(|e| !e.is_empty())
        .filter_map(|e| e.split_once('='))
        .collect();
    Config::from_env_vars(|k| {
        vars.iter()
            .find(|(key, _)| *key == k)
            .map(|(_, v)| v.to_string())
    })
    .map_err(|e| e.to_string())
}

/// Writes `config` as an attach configuration file's contents.
pub fn format_config(config: &Config) -> Vec<u8> {
    let mut out = Vec::new();
    for (k, v) in config.to_env() {
        out.extend_from_slice(k.as_bytes());
        out.push(b'=');
        out.extend_from_slice(v.as_bytes());
        out.push(0);
    }
    out
}

/// Where the agent explains a failed [`ftrace_agent_attach`]: the configuration file's path
/// with `.err` appended.
pub fn error_path(config_path: &Path) -> PathBuf {
    let mut p = config_path.as_os_str().to_owned();
    p.push(".err");
    PathBuf::from(p)
}

fn attach(config_path: &Path) -> Result<usize, String> {
    let bytes =
        std::fs::read(config_path).map_err(|e| format!("{}: {e}", config_path.display()))?;
    let cfg = parse_config(&bytes)?
        .ok_or_else(|| format!("{}: no output directory", config_path.display()))?;
    // Checked first: a thread stopped inside the starting agent may hold its lock.
    if crate::preload_starting() || agent().is_some() {
        return Err("the process is already traced by ftrace".into());
    }
    // Threads that recorded for an earlier attach registered with its instance: they register
    // again, with the new one, at their next traced call.
    handler::reset_current_thread();
    start(cfg, Arrival::Attached).map_err(|e| e.to_string())?;
    // The unwinder interpositions: not preloaded, the agent must rewrite the objects' GOTs.
    crate::got::hook_loaded_objects();
    Ok(agent().as_ref().map_or(0, |a| a.sites.len()))
}

/// Starts tracing in a process the tool attached to, with the configuration in the file at
/// `config_path` (a NUL-terminated path; contents as [`format_config`] writes them). Returns
/// the number of call sites found, or -1 with the reason written to [`error_path`].
///
/// # Safety
/// `config_path` is a valid NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ftrace_agent_attach(config_path: *const libc::c_char) -> libc::c_long {
    // SAFETY: the caller passes a NUL-terminated string.
    let path = unsafe { CStr::from_ptr(config_path) };
    let path = Path::new(std::ffi::OsStr::from_bytes(path.to_bytes()));
    match attach(path) {
        Ok(n) => n as libc::c_long,
        Err(e) => {
            let _ = std::fs::write(error_path(path), e);
            -1
        }
    }
}

/// A parked thread's fixup (it runs on that thread): forget its buffer, keep its rip.
fn retire_parked_thread(rip: u64) -> u64 {
    retire_current_thread();
    rip
}

/// Forgets the calling thread's buffer if it has one; its shadow stack and the frames on it
/// stay (calls in flight still return through the return stub).
fn retire_current_thread() {
    // SAFETY: this thread's own block; a handler running on this thread was interrupted at
    // most (it keeps its writer, and reads `state` only on entry).
    let st = unsafe { &mut *handler::current() };
    if matches!(st.state, 1 | crate::grow::GROW) {
        st.state = 0;
    }
}

fn detach() -> Result<usize, String> {
    let mut g = agent();
    let Some(a) = g.as_mut() else {
        return Err("the agent is not tracing".into());
    };
    a.on = false;
    crate::got::unhook();
    // Every enabled site, whatever enabled it (a tracer's selection, a function command).
    let n = a
        .patcher
        .set(false, |_| true)
        .map_err(|e| format!("restoring the sites: {e}"))?;
    handler::TRACING_ON.store(false, Ordering::Relaxed);
    handler::TRACER.store(0, Ordering::Relaxed);
    handler::update_fast_path();
    if a.config.tracer == TracerKind::Function {
        let _ = dispatch::DISPATCHER.unregister(&dispatch::FUNCTION_OPS);
    }
    let pair = clock::TscPair::now();
    let mut exit = String::new();
    let _ = writeln!(exit, "tsc={} mono_ns={}", pair.tsc, pair.mono_ns);
    let _ = writeln!(
        exit,
        "failed_threads={}",
        handler::FAILED_THREADS.load(Ordering::Relaxed)
    );
    let _ = writeln!(
        exit,
        "shadow_overruns={}",
        handler::SHADOW_OVERRUNS.load(Ordering::Relaxed)
    );
    let _ = std::fs::write(a.dir.join("meta.exit"), exit);
    handler::INSTANCE.store(core::ptr::null_mut(), Ordering::Release);
    text::stop_the_world(
        retire_parked_thread,
        std::time::Duration::from_secs(10),
        || {},
    )
    .map_err(|missing| format!("{missing} threads did not stop to retire their buffers"))?;
    retire_current_thread();
    *g = None;
    Ok(n)
}

/// Stops tracing in an attached process: every site back as its NOP, every thread's buffer
/// retired, the recording's `meta.exit` written. Returns the number of sites restored, or -1
/// if the agent was not tracing or a step failed (the reason is printed on the process's
/// stderr).
#[unsafe(no_mangle)]
pub extern "C" fn ftrace_agent_detach() -> libc::c_long {
    match detach() {
        Ok(n) => n as libc::c_long,
        Err(e) => {
            crate::warn(&format!("detach: {e}"));
            -1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ClockKind;

    #[test]
    fn config_file_round_trip() {
        let mut c = Config::new("/tmp/out", TracerKind::FunctionGraph);
        c.filter = vec!["a*".into(), "b".into()];
        c.clock = ClockKind::Mono;
        c.thresh_ns = 5;
        assert_eq!(parse_config(&format_config(&c)).unwrap(), Some(c));
    }

    #[test]
    fn bad_config_is_refused() {
        assert!(parse_config(b"FTRACE_AGENT_OUTPUT=/x\0FTRACE_AGENT_TRACER=nop\0").is_err());
        assert_eq!(parse_config(b"").unwrap(), None);
        assert_eq!(error_path(Path::new("/tmp/c")), PathBuf::from("/tmp/c.err"));
    }
}
