//! The function commands the live mount attaches (`f:traceon[:N]`, `f:traceoff[:N]`): the
//! agent's probe ops, run by the full-save entry path ([`crate::handler::on_entry`]) before
//! anything is recorded, flipping the agent's `tracing_on` ([`handler::TRACING_ON`]).
//!
//! The control thread publishes a [`Probes`] by pointer swap; the counts live here, in the
//! program (the tool reads them back with the `PROBES` request). Invariant: a published
//! [`Probes`] is never freed (a replaced one is leaked, as [`handler::INSTANCE`]s are), so a
//! handler that loaded the pointer may use it for as long as it runs; it is replaced only
//! when the set of probes changes (a count-only change is stored into the live counts).

use core::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Arc;

use ftrace_core::filter::{ProbeActions, ProbeCommand, ProbeCount, ProbeRunner, RunProbe};

use crate::handler;

/// One probe as the tool asks for it: the site, the command, its count (`None`: unlimited).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WantedProbe {
    /// The site address.
    pub addr: u64,
    /// `traceon` or `traceoff`.
    pub cmd: ProbeCommand,
    /// The remaining count (`None`: unlimited).
    pub count: Option<i64>,
}

impl WantedProbe {
    /// `addr:cmd:count` (`count` is `u` for unlimited).
    pub fn to_field(&self) -> String {
        match self.count {
            Some(n) => format!("{:x}:{}:{n}", self.addr, self.cmd.name()),
            None => format!("{:x}:{}:u", self.addr, self.cmd.name()),
        }
    }

    /// Parses [`WantedProbe::to_field`]'s text; only `traceon` / `traceoff` are known.
    pub fn parse(s: &str) -> Option<WantedProbe> {
        let mut it = s.split(':');
        let addr = u64::from_str_radix(it.next()?, 16).ok()?;
        let cmd = match it.next()? {
            "traceon" => ProbeCommand::Traceon,
            "traceoff" => ProbeCommand::Traceoff,
            _ => return None,
        };
        let count = match it.next()? {
            "u" => None,
            n => Some(n.parse().ok()?),
        };
        if it.next().is_some() {
            return None;
        }
        Some(WantedProbe { addr, cmd, count })
    }
}

/// The published probes.
#[derive(Debug)]
pub struct Probes {
    /// What was asked for, in order (the counts as they were then).
    wanted: Vec<WantedProbe>,
    /// The live counts, in the order of `wanted` (`None`: unlimited).
    counts: Vec<Option<Arc<ProbeCount>>>,
    runner: ProbeRunner,
    /// The probed sites no tracer selected (sorted): their hits run the probes only.
    untraced: Vec<u64>,
}

static PROBES: AtomicPtr<Probes> = AtomicPtr::new(core::ptr::null_mut());

fn current() -> Option<&'static Probes> {
    // SAFETY: a non-null pointer is a leaked `Box<Probes>`, never freed (module invariant).
    unsafe { PROBES.load(Ordering::Acquire).as_ref() }
}

/// The agent's `tracing_on` as the probes see and change it.
struct Actions;

impl ProbeActions for Actions {
    fn tracing_is_on(&self) -> bool {
        handler::TRACING_ON.load(Ordering::SeqCst)
    }

    fn set_tracing_on(&self, on: bool) {
        handler::TRACING_ON.store(on, Ordering::SeqCst);
        handler::update_fast_path();
    }
}

/// Runs the probes at `ip`; whether the site is probed only (no tracer wants its event).
/// Called by the entry handler with the thread's guard held.
#[inline]
pub fn run(ip: u64, parent: u64) -> bool {
    let Some(p) = current() else {
        return false;
    };
    p.runner.run(ip, parent, &Actions);
    p.untraced.binary_search(&ip).is_ok()
}

/// Publishes `wanted` (`traced`: the sites a tracer selected). The same probes as now (site
/// and command, in order) only get their counts stored; anything else publishes new ones.
/// Serialised by the agent lock (the control thread).
pub fn publish(wanted: &[WantedProbe], traced: &dyn Fn(u64) -> bool) {
    let mut untraced: Vec<u64> = wanted
        .iter()
        .map(|p| p.addr)
        .filter(|&a| !traced(a))
        .collect();
    untraced.sort_unstable();
    untraced.dedup();
    if let Some(p) = current() {
        let same = p.wanted.len() == wanted.len()
            && p.wanted.iter().zip(wanted).all(|(a, b)| {
                a.addr == b.addr && a.cmd == b.cmd && a.count.is_some() == b.count.is_some()
            })
            && p.untraced == untraced;
        if same {
            for (c, w) in p.counts.iter().zip(wanted) {
                if let (Some(c), Some(n)) = (c, w.count) {
                    c.set(n);
                }
            }
            return;
        }
    }
    if wanted.is_empty() && current().is_none() {
        return;
    }
    let counts: Vec<Option<Arc<ProbeCount>>> = wanted
        .iter()
        .map(|w| w.count.map(|n| Arc::new(ProbeCount::new(n))))
        .collect();
    let runner = ProbeRunner::new(
        wanted
            .iter()
            .zip(&counts)
            .map(|(w, c)| RunProbe {
                ip: w.addr,
                cmd: w.cmd,
                count: c.clone(),
                event: None,
            })
            .collect(),
    );
    let new = if wanted.is_empty() {
        core::ptr::null_mut()
    } else {
        Box::into_raw(Box::new(Probes {
            wanted: wanted.to_vec(),
            counts,
            runner,
            untraced,
        }))
    };
    // The old one is leaked: a handler may still be running it.
    PROBES.store(new, Ordering::Release);
}

/// The probes' remaining counts, in the order they were asked for (`None`: unlimited).
pub fn counts() -> Vec<(WantedProbe, Option<i64>)> {
    current().map_or_else(Vec::new, |p| {
        p.wanted
            .iter()
            .zip(&p.counts)
            .map(|(w, c)| (*w, c.as_ref().map(|c| c.get())))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_field_round_trip() {
        let p = WantedProbe {
            addr: 0x401000,
            cmd: ProbeCommand::Traceoff,
            count: Some(-1),
        };
        assert_eq!(p.to_field(), "401000:traceoff:-1");
        assert_eq!(WantedProbe::parse(&p.to_field()), Some(p));
        let u = WantedProbe {
            addr: 0x10,
            cmd: ProbeCommand::Traceon,
            count: None,
        };
        assert_eq!(WantedProbe::parse(&u.to_field()), Some(u));
        assert_eq!(WantedProbe::parse("10:stacktrace:u"), None);
        assert_eq!(WantedProbe::parse("10:traceon"), None);
        assert_eq!(WantedProbe::parse("zz:traceon:1"), None);
    }
}
