//! The function commands the live mount attaches (`f:traceon[:N]`, `f:traceoff[:N]`,
//! `f:stacktrace[:N]`, `f:enable_event:SYS:EV[:N]`, `f:disable_event:SYS:EV[:N]`): the agent's
//! probe ops, run by the full-save entry path ([`crate::handler::on_entry`]) before anything
//! is recorded, flipping the agent's `tracing_on` ([`handler::TRACING_ON`]), recording the
//! thread's stack (`stack::record`) or flipping a program event's soft-disabled bit
//! ([`crate::event_record`]).
//!
//! The control thread publishes a [`Probes`] in an [`RcuCell`]; the counts live here, in the
//! program (the tool reads them back with the `PROBES` request). Invariant: a handler reads
//! the published [`Probes`] inside a guard of `PROBE_READERS`, and a replaced one is freed
//! only after that domain's grace period (waited for in place by the control thread), so no
//! handler runs a freed one; it is replaced only when the set of probes changes. The counts are
//! the program's: a probe the tool asks for again keeps its live count (shared with the
//! replacement), whatever count the request carries, so a request built from a read-back that
//! a probe hit has since overtaken cannot give that hit back.
//!
//! The domain is a [`ReaderCount`], not crossbeam-epoch's `EpochReclaim`: the entry handler
//! runs in traced code, which may be the program's own signal handler, where an epoch pin (it
//! may allocate a thread's registration, or run deferred frees) must not run. Its pin is an
//! atomic increment and a fence on a shared counter, taken only when probes are published.

use core::sync::atomic::Ordering;
use std::sync::Arc;

use ftrace_core::filter::{ProbeActions, ProbeCommand, ProbeCount, ProbeRunner, RunProbe};
use ftrace_core::platform::Reclaim;
use ftrace_core::reclaim::{Published, RcuCell, ReaderCount};

use crate::handler::{self, ThreadState};

/// One probe as the tool asks for it: the site, the command, its count (`None`: unlimited).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WantedProbe {
    /// The site address.
    pub addr: u64,
    /// `traceon`, `traceoff`, `stacktrace`, `enable_event` or `disable_event`.
    pub cmd: ProbeCommand,
    /// The remaining count (`None`: unlimited).
    pub count: Option<i64>,
    /// The id of the program event `enable_event` / `disable_event` act on (`None` for the
    /// other commands).
    pub event: Option<u16>,
}

impl WantedProbe {
    /// `addr:cmd:count`, or `addr:cmd=event id:count` for the event commands (`count` is
    /// `u` for unlimited).
    pub fn to_field(&self) -> String {
        let count = self.count.map_or("u".to_string(), |n| n.to_string());
        match self.event {
            Some(id) => format!("{:x}:{}={id}:{count}", self.addr, self.cmd.name()),
            None => format!("{:x}:{}:{count}", self.addr, self.cmd.name()),
        }
    }

    /// Parses [`WantedProbe::to_field`]'s text; only `traceon`, `traceoff`, `stacktrace`
    /// and (with an event id) `enable_event` and `disable_event` are known.
    pub fn parse(s: &str) -> Option<WantedProbe> {
        let mut it = s.split(':');
        let addr = u64::from_str_radix(it.next()?, 16).ok()?;
        let cmd = it.next()?;
        let (cmd, event) = match cmd.split_once('=') {
            None => (plain_command(cmd)?, None),
            Some((c, id)) => (event_command(c)?, Some(id.parse().ok()?)),
        };
        let count = match it.next()? {
            "u" => None,
            n => Some(n.parse().ok()?),
        };
        if it.next().is_some() {
            return None;
        }
        Some(WantedProbe {
            addr,
            cmd,
            count,
            event,
        })
    }
}

/// A command without an event.
fn plain_command(name: &str) -> Option<ProbeCommand> {
    Some(match name {
        "traceon" => ProbeCommand::Traceon,
        "traceoff" => ProbeCommand::Traceoff,
        "stacktrace" => ProbeCommand::Stacktrace,
        _ => return None,
    })
}

/// A command that acts on an event.
fn event_command(name: &str) -> Option<ProbeCommand> {
    Some(match name {
        "enable_event" => ProbeCommand::EnableEvent,
        "disable_event" => ProbeCommand::DisableEvent,
        _ => return None,
    })
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

/// The published probes.
static PROBES: RcuCell<Probes> = RcuCell::empty();
/// The grace-period domain [`PROBES`] is replaced through.
static PROBE_READERS: ReaderCount = ReaderCount::new();

/// Runs `f` on the published probes, inside a guard of `PROBE_READERS` (`f` must not
/// publish: the grace period would wait for this guard).
fn with_current<R>(f: impl FnOnce(Option<&Probes>) -> R) -> R {
    let _g = PROBE_READERS.pin();
    // SAFETY: inside a guard of the domain `PROBES` is replaced through; `f` cannot keep the
    // reference.
    f(unsafe { PROBES.load() })
}

/// The agent's `tracing_on` as the probes see and change it, and the traced call a
/// `stacktrace` probe records the stack of.
struct Actions {
    /// The call's return-address slot.
    slot: *mut u64,
    /// The calling thread's state (its guard held).
    st: *mut ThreadState,
}

impl ProbeActions for Actions {
    fn tracing_is_on(&self) -> bool {
        handler::TRACING_ON.load(Ordering::SeqCst)
    }

    fn set_tracing_on(&self, on: bool) {
        handler::TRACING_ON.store(on, Ordering::SeqCst);
        handler::update_fast_path();
    }

    fn stacktrace(&self, ip: u64, _parent_ip: u64) {
        // As the kernel's: nothing is recorded while the buffer is off.
        if !self.tracing_is_on() {
            return;
        }
        // SAFETY: the calling thread's own state, which [`run`]'s caller holds the guard of;
        // nothing else refers to it during the probe run.
        let st = unsafe { &mut *self.st };
        if st.state != 1 && st.state != crate::unwind::UNWOUND && !handler::register(st) {
            return;
        }
        crate::stack::record(st, ip + 5, self.slot);
    }

    fn event_soft_disabled(&self, system: &str, event: &str) -> Option<bool> {
        crate::event_record::soft_disabled_by_name(system, event)
    }

    fn set_event_soft_disabled(&self, system: &str, event: &str, disabled: bool) {
        crate::event_record::set_soft_disabled_by_name(system, event, disabled);
    }
}

/// Runs the probes at `ip` (called from `parent`, its return address in `slot`); whether the
/// site is probed only (no tracer wants its event). Called by the entry handler with the
/// thread's guard held.
#[inline]
pub fn run(ip: u64, parent: u64, slot: *mut u64, st: &mut ThreadState) -> bool {
    if PROBES.is_empty() {
        return false;
    }
    let actions = Actions { slot, st };
    with_current(|p| {
        p.is_some_and(|p| {
            p.runner.run(ip, parent, &actions);
            p.untraced.binary_search(&ip).is_ok()
        })
    })
}

/// Publishes `wanted` (`traced`: the sites a tracer selected). A probe already published
/// (the same site, command and counted form) keeps its live count: the count a request
/// carries is only the starting count of a new probe, since the probes spend theirs here
/// while the tool's copy, read back a moment ago, may already be stale. The same probes as
/// now (in order, with the same probed-only sites) publish nothing. Serialised by the agent
/// lock (the control thread).
pub fn publish(wanted: &[WantedProbe], traced: &dyn Fn(u64) -> bool) {
    let mut untraced: Vec<u64> = wanted
        .iter()
        .map(|p| p.addr)
        .filter(|&a| !traced(a))
        .collect();
    untraced.sort_unstable();
    untraced.dedup();
    let same_probe = |a: &WantedProbe, b: &WantedProbe| {
        a.addr == b.addr
            && a.cmd == b.cmd
            && a.event == b.event
            && a.count.is_some() == b.count.is_some()
    };
    // Per wanted probe: the live count of the published one it continues, if any.
    let (same, live) = with_current(|p| {
        let Some(p) = p else {
            return (wanted.is_empty(), vec![None; wanted.len()]);
        };
        let same = p.wanted.len() == wanted.len()
            && p.wanted.iter().zip(wanted).all(|(a, b)| same_probe(a, b))
            && p.untraced == untraced;
        let live = wanted
            .iter()
            .map(|w| {
                p.wanted
                    .iter()
                    .position(|q| same_probe(q, w))
                    .and_then(|i| p.counts[i].clone())
            })
            .collect::<Vec<_>>();
        (same, live)
    });
    if same {
        return;
    }
    let counts: Vec<Option<Arc<ProbeCount>>> = wanted
        .iter()
        .zip(live)
        .map(|(w, live)| {
            let n = w.count?;
            Some(live.unwrap_or_else(|| Arc::new(ProbeCount::new(n))))
        })
        .collect();
    let runner = ProbeRunner::new(
        wanted
            .iter()
            .zip(&counts)
            .map(|(w, c)| RunProbe {
                ip: w.addr,
                cmd: w.cmd,
                count: c.clone(),
                event: w
                    .event
                    .and_then(crate::event_record::names_of)
                    .map(|(sys, name)| (sys.to_string(), name.to_string())),
            })
            .collect(),
    );
    // The events the probes flip must take the path that reads their soft bits.
    crate::event_record::set_probe_targets(wanted.iter().filter_map(|w| w.event).collect());
    let new = if wanted.is_empty() {
        Published::None
    } else {
        Published::Owned(Box::new(Probes {
            wanted: wanted.to_vec(),
            counts,
            runner,
            untraced,
        }))
    };
    // The old one is freed once no handler can still be running it.
    PROBES.replace(new, &PROBE_READERS);
}

/// The probes' remaining counts, in the order they were asked for (`None`: unlimited).
pub fn counts() -> Vec<(WantedProbe, Option<i64>)> {
    with_current(|p| {
        p.map_or_else(Vec::new, |p| {
            p.wanted
                .iter()
                .zip(&p.counts)
                .map(|(w, c)| (*w, c.as_ref().map(|c| c.get())))
                .collect()
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The count of the published probe at `i` (set by hand, as a hit would spend it).
    fn set_live(i: usize, n: i64) {
        with_current(|p| p.unwrap().counts[i].as_ref().unwrap().set(n));
    }

    #[test]
    fn a_probe_asked_for_again_keeps_its_live_count() {
        let off = |count| WantedProbe {
            addr: 0x401000,
            cmd: ProbeCommand::Traceoff,
            count,
            event: None,
        };
        let on = WantedProbe {
            addr: 0x402000,
            cmd: ProbeCommand::Traceon,
            count: Some(5),
            event: None,
        };
        let live = || counts().iter().map(|(_, c)| *c).collect::<Vec<_>>();
        publish(&[off(Some(3))], &|_| false);
        assert_eq!(live(), [Some(3)]);
        // A hit spends one; the tool's next request still says 3 (its read-back was older).
        set_live(0, 2);
        publish(&[off(Some(3))], &|_| false);
        assert_eq!(live(), [Some(2)], "the stale count must not be restored");
        // Republished (another probe joins, the site becomes traced): the count goes along.
        publish(&[off(Some(3)), on], &|a| a == 0x401000);
        assert_eq!(live(), [Some(2), Some(5)]);
        // Removed, then asked for anew: a new probe, with the request's count.
        publish(&[on], &|_| false);
        publish(&[off(Some(3)), on], &|_| false);
        assert_eq!(live(), [Some(3), Some(5)]);
        // The unlimited form is another probe.
        publish(&[off(None)], &|_| false);
        assert_eq!(live(), [None]);
        publish(&[], &|_| false);
        assert!(live().is_empty());
    }

    #[test]
    fn probe_field_round_trip() {
        let p = WantedProbe {
            addr: 0x401000,
            cmd: ProbeCommand::Traceoff,
            count: Some(-1),
            event: None,
        };
        assert_eq!(p.to_field(), "401000:traceoff:-1");
        assert_eq!(WantedProbe::parse(&p.to_field()), Some(p));
        let u = WantedProbe {
            addr: 0x10,
            cmd: ProbeCommand::Traceon,
            count: None,
            event: None,
        };
        assert_eq!(WantedProbe::parse(&u.to_field()), Some(u));
        let st = WantedProbe {
            addr: 0x10,
            cmd: ProbeCommand::Stacktrace,
            count: Some(3),
            event: None,
        };
        assert_eq!(WantedProbe::parse("10:stacktrace:3"), Some(st));
        let ev = WantedProbe {
            addr: 0x10,
            cmd: ProbeCommand::EnableEvent,
            count: None,
            event: Some(1025),
        };
        assert_eq!(ev.to_field(), "10:enable_event=1025:u");
        assert_eq!(WantedProbe::parse(&ev.to_field()), Some(ev));
        assert_eq!(WantedProbe::parse("10:enable_event:u"), None);
        assert_eq!(WantedProbe::parse("10:traceon=5:u"), None);
        assert_eq!(WantedProbe::parse("10:snapshot:u"), None);
        assert_eq!(WantedProbe::parse("10:traceon"), None);
        assert_eq!(WantedProbe::parse("zz:traceon:1"), None);
    }
}
