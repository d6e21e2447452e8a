//! Running the function commands (`trace_probe_ops`'s callback): what happens when a function
//! that has `traceon`, `traceoff`, `snapshot`, `stacktrace`, `enable_event`, `disable_event`,
//! `dump` or `cpudump` attached is hit.
//!
//! The kernel registers one extra `ftrace_ops` for an instance's probes; its filter hash is the
//! union of the probes' functions and its callback looks the ip up and runs each probe's action
//! with that function's count (`kernel/trace/trace_functions.c`,
//! `trace_events.c:event_enable_probe`). Here: [`ProbeCount`] is one such count (a `long`,
//! shared between the ftrace-tracefs `ProbeTable` that lists it and the runner that
//! decrements it), [`run_probe`] one probe's action with the kernel's count rules (no
//! allocation), [`ProbeActions`] what the backend does for an action, and, with `alloc`,
//! [`ProbeRunner`] the ip-indexed snapshot of a table a backend publishes to its probe ops.
//!
//! Invariant: a count is only ever decremented by a successful compare-and-swap from a
//! positive (or, for `stacktrace`, non-zero; for the event commands, not `-1`) value, so
//! under any interleaving a command with `:N` acts at most `N` times; `:0` never acts, a
//! command without a count has no [`ProbeCount`] and is unlimited.

use crate::sync::{AtomicUsize, Ordering};

/// A function command (`struct ftrace_func_command` + its probe ops).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProbeCommand {
    /// `traceon`: turn the ring buffer on.
    Traceon,
    /// `traceoff`: turn the ring buffer off.
    Traceoff,
    /// `stacktrace`: record a stack trace.
    Stacktrace,
    /// `snapshot`: take a snapshot.
    Snapshot,
    /// `enable_event:<system>:<event>`.
    EnableEvent,
    /// `disable_event:<system>:<event>`.
    DisableEvent,
    /// `dump`: dump the ring buffer to the console.
    Dump,
    /// `cpudump`: dump this CPU's ring buffer to the console.
    Cpudump,
}

impl ProbeCommand {
    /// The command's name as written and printed.
    pub const fn name(self) -> &'static str {
        match self {
            ProbeCommand::Traceon => "traceon",
            ProbeCommand::Traceoff => "traceoff",
            ProbeCommand::Stacktrace => "stacktrace",
            ProbeCommand::Snapshot => "snapshot",
            ProbeCommand::EnableEvent => "enable_event",
            ProbeCommand::DisableEvent => "disable_event",
            ProbeCommand::Dump => "dump",
            ProbeCommand::Cpudump => "cpudump",
        }
    }
}

/// One probe's remaining count at one function (the kernel's `long` in the probe's
/// `ftrace_func_mapper`). `-1` is a counted probe written without a number (`func:traceoff:`).
#[derive(Debug)]
pub struct ProbeCount(AtomicUsize);

impl ProbeCount {
    /// A count of `n`.
    pub fn new(n: i64) -> ProbeCount {
        ProbeCount(AtomicUsize::new(n as isize as usize))
    }

    /// The current value.
    pub fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed) as isize as i64
    }

    /// Sets the value (a backend resetting a count; a concurrent [`run_probe`] decrement of
    /// the old value then fails its compare-and-swap and retries on the new one).
    pub fn set(&self, n: i64) {
        self.0.store(n as isize as usize, Ordering::Relaxed);
    }

    /// Decrements from `old` to `old - 1` if the count still holds `old`.
    fn take(&self, old: isize) -> bool {
        self.0
            .compare_exchange(
                old as usize,
                old.wrapping_sub(1) as usize,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
    }

    fn load(&self) -> isize {
        self.0.load(Ordering::Acquire) as isize
    }

    /// The rule of the event commands and event triggers (`if (!count) return; if (count !=
    /// -1) count--;`): `false` at zero; `-1` is unlimited (`true`, unchanged); any other
    /// value is decremented by one (atomically: concurrent callers never spend more units
    /// than the count held).
    pub fn try_spend(&self) -> bool {
        loop {
            let old = self.load();
            if old == 0 {
                return false;
            }
            if old == -1 || self.take(old) {
                return true;
            }
        }
    }

    /// `update_count()` (dump, cpudump, snapshot): one unit if positive.
    fn take_positive(&self) -> bool {
        loop {
            let old = self.load();
            if old <= 0 {
                return false;
            }
            if self.take(old) {
                return true;
            }
        }
    }
}

impl PartialEq for ProbeCount {
    fn eq(&self, other: &ProbeCount) -> bool {
        self.get() == other.get()
    }
}

impl Eq for ProbeCount {}

/// What a backend does for the function commands. Every method may run on any CPU, inside a
/// traced function, with the probe ops' recursion protection held: none may block.
pub trait ProbeActions {
    /// `tracer_tracing_is_on(tr)`: whether the instance's ring buffer records.
    fn tracing_is_on(&self) -> bool;
    /// `tracer_tracing_on(tr)` / `tracer_tracing_off(tr)`.
    fn set_tracing_on(&self, on: bool);
    /// `tracing_snapshot_instance(tr)`.
    fn snapshot(&self) {}
    /// `trace_dump_stack()`: a `kernel_stack` entry for the call at `ip` from `parent_ip`.
    fn stacktrace(&self, ip: u64, parent_ip: u64) {
        let _ = (ip, parent_ip);
    }
    /// `ftrace_dump()`: every CPU's buffer (`this_cpu_only`: `cpudump`) to the console.
    fn dump(&self, this_cpu_only: bool) {
        let _ = this_cpu_only;
    }
    /// Whether `events/<system>/<event>` is soft-disabled (`EVENT_FILE_FL_SOFT_DISABLED`);
    /// `None` if there is no such event.
    fn event_soft_disabled(&self, system: &str, event: &str) -> Option<bool> {
        let _ = (system, event);
        None
    }
    /// Sets or clears the event's soft-disabled bit (`update_event_probe`).
    fn set_event_soft_disabled(&self, system: &str, event: &str, disabled: bool) {
        let _ = (system, event, disabled);
    }
}

/// Runs one probe (`cmd` attached at `ip`, called from `parent_ip`) the way its kernel
/// callback does; `count` is its [`ProbeCount`] (`None`: the uncounted variant) and `event`
/// the target of `enable_event` / `disable_event`. Returns whether the action ran.
///
/// The kernel's rules, per command:
/// - `traceon` / `traceoff`: nothing if the buffer is already in that state; counted, only
///   while the count is positive, and the count drops only when the state changed;
/// - `snapshot`, `dump`, `cpudump`: counted, only while the count is positive;
/// - `stacktrace`: counted, only while tracing is on and the count is not zero (a count
///   written empty, `-1`, keeps counting down and never stops, as the kernel's does);
/// - `enable_event` / `disable_event`: nothing if the event is in that state already; a
///   count of `-1` never drops (`:unlimited`), `0` never acts.
pub fn run_probe(
    cmd: ProbeCommand,
    count: Option<&ProbeCount>,
    event: Option<(&str, &str)>,
    ip: u64,
    parent_ip: u64,
    actions: &dyn ProbeActions,
) -> bool {
    match cmd {
        ProbeCommand::Traceon | ProbeCommand::Traceoff => {
            let on = cmd == ProbeCommand::Traceon;
            let Some(c) = count else {
                if actions.tracing_is_on() == on {
                    return false;
                }
                actions.set_tracing_on(on);
                return true;
            };
            loop {
                let old = c.load();
                if old <= 0 || actions.tracing_is_on() == on {
                    return false;
                }
                if c.take(old) {
                    actions.set_tracing_on(on);
                    return true;
                }
            }
        }
        ProbeCommand::Snapshot | ProbeCommand::Dump | ProbeCommand::Cpudump => {
            if count.is_some_and(|c| !c.take_positive()) {
                return false;
            }
            match cmd {
                ProbeCommand::Snapshot => actions.snapshot(),
                ProbeCommand::Dump => actions.dump(false),
                _ => actions.dump(true),
            }
            true
        }
        ProbeCommand::Stacktrace => {
            let Some(c) = count else {
                actions.stacktrace(ip, parent_ip);
                return true;
            };
            loop {
                if !actions.tracing_is_on() {
                    return false;
                }
                let old = c.load();
                if old == 0 {
                    return false;
                }
                if c.take(old) {
                    actions.stacktrace(ip, parent_ip);
                    return true;
                }
            }
        }
        ProbeCommand::EnableEvent | ProbeCommand::DisableEvent => {
            let Some((system, name)) = event else {
                return false;
            };
            let enable = cmd == ProbeCommand::EnableEvent;
            let Some(c) = count else {
                actions.set_event_soft_disabled(system, name, !enable);
                return true;
            };
            match actions.event_soft_disabled(system, name) {
                Some(disabled) if disabled == enable && c.try_spend() => {
                    actions.set_event_soft_disabled(system, name, !enable);
                    true
                }
                _ => false,
            }
        }
    }
}

#[cfg(feature = "alloc")]
pub use runner::{ProbeRunner, RunProbe};

#[cfg(feature = "alloc")]
mod runner {
    use alloc::string::String;
    use alloc::sync::Arc;
    use alloc::vec::Vec;

    use super::{ProbeActions, ProbeCommand, ProbeCount, run_probe};
    use crate::filter::FtraceHash;

    /// One probe at one function, as the runner holds it.
    #[derive(Clone, Debug)]
    pub struct RunProbe {
        /// The function.
        pub ip: u64,
        /// The command.
        pub cmd: ProbeCommand,
        /// Its count, shared with the table that lists it (`None`: unlimited).
        pub count: Option<Arc<ProbeCount>>,
        /// `(system, event)` of `enable_event` / `disable_event`.
        pub event: Option<(String, String)>,
    }

    /// A probe table's probes indexed by function: what a backend publishes to its probe ops
    /// (`trace_probe_ops`). Built with ftrace-tracefs's `ProbeTable::runner`; running it
    /// never allocates.
    /// The counts are the table's own, so the table's read-back shows what the runner used.
    #[derive(Clone, Debug)]
    pub struct ProbeRunner {
        hash: FtraceHash,
        /// Sorted by ip (stable: the table's order within one ip).
        probes: Vec<RunProbe>,
    }

    impl Default for ProbeRunner {
        fn default() -> ProbeRunner {
            ProbeRunner::new(Vec::new())
        }
    }

    impl ProbeRunner {
        /// A runner over `probes` (any order).
        pub fn new(mut probes: Vec<RunProbe>) -> ProbeRunner {
            probes.sort_by_key(|p| p.ip);
            ProbeRunner {
                hash: FtraceHash::from_ips(probes.iter().map(|p| p.ip)),
                probes,
            }
        }

        /// The functions that have a probe: the probe ops' filter hash. Empty when the
        /// runner is (and an empty filter hash means "every function": do not register the
        /// ops then).
        pub fn hash(&self) -> &FtraceHash {
            &self.hash
        }

        /// Whether no probe is attached.
        pub fn is_empty(&self) -> bool {
            self.probes.is_empty()
        }

        /// The probes attached at `ip`.
        pub fn at(&self, ip: u64) -> &[RunProbe] {
            let start = self.probes.partition_point(|p| p.ip < ip);
            let end = start + self.probes[start..].partition_point(|p| p.ip == ip);
            &self.probes[start..end]
        }

        /// The probe ops' callback (`function_trace_probe_call`): runs every probe attached
        /// at `ip`; returns how many acted.
        pub fn run(&self, ip: u64, parent_ip: u64, actions: &dyn ProbeActions) -> usize {
            self.at(ip)
                .iter()
                .filter(|p| {
                    run_probe(
                        p.cmd,
                        p.count.as_deref(),
                        p.event.as_ref().map(|(s, e)| (s.as_str(), e.as_str())),
                        ip,
                        parent_ip,
                        actions,
                    )
                })
                .count()
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use core::cell::Cell;

    #[derive(Default)]
    struct Acts {
        on: Cell<bool>,
        switched: Cell<u32>,
        stacks: Cell<u32>,
        dumps: Cell<u32>,
        snaps: Cell<u32>,
        soft_disabled: Cell<bool>,
    }

    impl ProbeActions for Acts {
        fn tracing_is_on(&self) -> bool {
            self.on.get()
        }
        fn set_tracing_on(&self, on: bool) {
            self.on.set(on);
            self.switched.set(self.switched.get() + 1);
        }
        fn snapshot(&self) {
            self.snaps.set(self.snaps.get() + 1);
        }
        fn stacktrace(&self, _ip: u64, _parent_ip: u64) {
            self.stacks.set(self.stacks.get() + 1);
        }
        fn dump(&self, _this_cpu_only: bool) {
            self.dumps.set(self.dumps.get() + 1);
        }
        fn event_soft_disabled(&self, system: &str, event: &str) -> Option<bool> {
            ((system, event) == ("sched", "sched_switch")).then(|| self.soft_disabled.get())
        }
        fn set_event_soft_disabled(&self, _system: &str, _event: &str, disabled: bool) {
            self.soft_disabled.set(disabled);
        }
    }

    #[test]
    fn traceoff_counts_only_real_switches() {
        let a = Acts::default();
        a.on.set(true);
        let c = ProbeCount::new(2);
        assert!(run_probe(ProbeCommand::Traceoff, Some(&c), None, 1, 0, &a));
        assert_eq!((a.on.get(), c.get()), (false, 1));
        // already off: no switch, no decrement
        assert!(!run_probe(ProbeCommand::Traceoff, Some(&c), None, 1, 0, &a));
        assert_eq!(c.get(), 1);
        a.on.set(true);
        assert!(run_probe(ProbeCommand::Traceoff, Some(&c), None, 1, 0, &a));
        a.on.set(true);
        assert!(!run_probe(ProbeCommand::Traceoff, Some(&c), None, 1, 0, &a));
        assert_eq!((a.on.get(), c.get()), (true, 0));
        // `:0` and an empty count (-1) never act
        for n in [0, -1] {
            let c = ProbeCount::new(n);
            assert!(!run_probe(ProbeCommand::Traceoff, Some(&c), None, 1, 0, &a));
            assert_eq!(c.get(), n);
        }
        // uncounted: every time the state differs
        assert!(run_probe(ProbeCommand::Traceoff, None, None, 1, 0, &a));
        assert!(!run_probe(ProbeCommand::Traceoff, None, None, 1, 0, &a));
        assert!(run_probe(ProbeCommand::Traceon, None, None, 1, 0, &a));
        assert!(a.on.get());
    }

    #[test]
    fn stacktrace_dump_snapshot_counts() {
        let a = Acts::default();
        a.on.set(true);
        let c = ProbeCount::new(2);
        for _ in 0..5 {
            run_probe(ProbeCommand::Stacktrace, Some(&c), None, 1, 0, &a);
        }
        assert_eq!((a.stacks.get(), c.get()), (2, 0));
        // with tracing off the counted stacktrace does nothing
        a.on.set(false);
        let c = ProbeCount::new(3);
        assert!(!run_probe(
            ProbeCommand::Stacktrace,
            Some(&c),
            None,
            1,
            0,
            &a
        ));
        assert_eq!(c.get(), 3);
        // the kernel's empty count: -1 counts down and keeps going
        a.on.set(true);
        let c = ProbeCount::new(-1);
        assert!(run_probe(
            ProbeCommand::Stacktrace,
            Some(&c),
            None,
            1,
            0,
            &a
        ));
        assert_eq!(c.get(), -2);
        // dump: only positive counts
        let c = ProbeCount::new(1);
        run_probe(ProbeCommand::Dump, Some(&c), None, 1, 0, &a);
        run_probe(ProbeCommand::Cpudump, Some(&c), None, 1, 0, &a);
        assert_eq!((a.dumps.get(), c.get()), (1, 0));
        let c = ProbeCount::new(-1);
        assert!(!run_probe(ProbeCommand::Snapshot, Some(&c), None, 1, 0, &a));
        assert!(run_probe(ProbeCommand::Snapshot, None, None, 1, 0, &a));
        assert_eq!(a.snaps.get(), 1);
    }

    #[test]
    fn event_commands() {
        let a = Acts::default();
        let ev = Some(("sched", "sched_switch"));
        let c = ProbeCount::new(1);
        // already enabled: nothing
        assert!(!run_probe(
            ProbeCommand::EnableEvent,
            Some(&c),
            ev,
            1,
            0,
            &a
        ));
        assert!(run_probe(
            ProbeCommand::DisableEvent,
            Some(&c),
            ev,
            1,
            0,
            &a
        ));
        assert_eq!((a.soft_disabled.get(), c.get()), (true, 0));
        let c = ProbeCount::new(-1);
        assert!(run_probe(ProbeCommand::EnableEvent, Some(&c), ev, 1, 0, &a));
        assert_eq!((a.soft_disabled.get(), c.get()), (false, -1));
        // an unknown event never acts
        let c = ProbeCount::new(3);
        let other = Some(("sched", "nope"));
        assert!(!run_probe(
            ProbeCommand::DisableEvent,
            Some(&c),
            other,
            1,
            0,
            &a
        ));
        assert_eq!(c.get(), 3);
    }

    #[test]
    fn runner_finds_probes_by_ip() {
        use alloc::sync::Arc;
        use alloc::vec;
        let count = Arc::new(ProbeCount::new(1));
        let r = ProbeRunner::new(vec![
            RunProbe {
                ip: 30,
                cmd: ProbeCommand::Dump,
                count: None,
                event: None,
            },
            RunProbe {
                ip: 10,
                cmd: ProbeCommand::Traceoff,
                count: Some(count.clone()),
                event: None,
            },
            RunProbe {
                ip: 10,
                cmd: ProbeCommand::Cpudump,
                count: None,
                event: None,
            },
        ]);
        assert!(r.hash().contains(10) && r.hash().contains(30) && !r.hash().contains(20));
        assert_eq!(r.at(10).len(), 2);
        assert!(r.at(20).is_empty());
        let a = Acts::default();
        a.on.set(true);
        assert_eq!(r.run(10, 0, &a), 2);
        assert_eq!(count.get(), 0);
        assert_eq!(r.run(10, 0, &a), 1);
        assert_eq!(r.run(30, 0, &a), 1);
        assert_eq!(r.run(20, 0, &a), 0);
        assert_eq!(a.dumps.get(), 3);
    }
}
