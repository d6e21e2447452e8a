//! Running an event's triggers when the event fires (`event_triggers_call` and
//! `event_triggers_post_call` of `kernel/trace/trace_events_trigger.c`).
//!
//! A backend gets an event's trigger list through
//! [`TraceBackend::set_event_triggers`](crate::TraceBackend::set_event_triggers), builds a
//! [`TriggerRunner`] from it and, each time the event fires, calls
//! [`TriggerRunner::before_record`] (before it reserves the entry: the kernel's
//! `trace_trigger_soft_disabled`) and, when the runner [needs the record](TriggerRunner::needs_record),
//! [`TriggerRunner::after_record`] with the entry's bytes (even if the ring buffer refused the
//! entry, as the kernel's temporary buffer lets it). The actions go to [`TriggerActions`].
//! `traceoff` and `stacktrace` are post triggers (`EVENT_CMD_FL_POST_TRIGGER`): they make the
//! runner need the record and run after it was written, so the event that turns tracing off is
//! itself recorded.
//! `traceon`, `traceoff`, `snapshot`, `stacktrace`, `enable_event` and `disable_event` run;
//! `hist` and the hist enables are kept by the tree but not run here.
//!
//! The counts are atomic (ftrace-core's [`ProbeCount`], the kernel's `long`), so the runner can
//! be shared by every CPU; [`TriggerRunner::counts`] reads them for the `trigger` file
//! ([`TraceBackend::event_trigger_counts`](crate::TraceBackend::event_trigger_counts)).
//!
//! Invariant: a trigger with `:N` acts at most `N` times whatever the interleaving; `:0`
//! never acts; unlimited (`-1`) never counts down. `traceon`, `traceoff` and the enables spend
//! a unit only when they change something, as the kernel's do.

use alloc::vec::Vec;

use ftrace_core::filter::ProbeCount;
use ftrace_core::format::TraceEventFormat;

use crate::event_filter::{self, EventFilter, RecordCtx};
use crate::triggers::{Trigger, TriggerKind};

/// What a backend does for the event triggers. Called from the event's tracepoint, on any
/// CPU: no method may block.
pub trait TriggerActions {
    /// `tracer_tracing_is_on(tr)`.
    fn tracing_is_on(&self) -> bool;
    /// `tracer_tracing_on(tr)` / `tracer_tracing_off(tr)`.
    fn set_tracing_on(&self, on: bool);
    /// `tracing_snapshot_instance(tr)`.
    fn snapshot(&self) {}
    /// `__trace_stack()`: a `kernel_stack` entry for the current call chain.
    fn stacktrace(&self) {}
    /// Whether the event with id `id` is soft-disabled in this instance
    /// (`EVENT_FILE_FL_SOFT_DISABLED`); `None` if there is no such event.
    fn event_soft_disabled(&self, id: u16) -> Option<bool> {
        let _ = id;
        None
    }
    /// Sets or clears the event's soft-disabled bit.
    fn set_event_soft_disabled(&self, id: u16, disabled: bool) {
        let _ = (id, disabled);
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    TraceOn,
    TraceOff,
    Snapshot,
    Stacktrace,
    Enable {
        id: u16,
        enable: bool,
    },
    /// Kept for its place in the list (and its count), not run here.
    Other,
}

impl Action {
    /// `EVENT_CMD_FL_POST_TRIGGER`: runs after the event is written (`traceoff`, so the
    /// event that stops the buffer is still recorded; `stacktrace`, after its event).
    fn is_post(self) -> bool {
        matches!(self, Action::TraceOff | Action::Stacktrace)
    }
}

#[derive(Debug)]
struct Armed {
    action: Action,
    count: ProbeCount,
    filter: Option<EventFilter>,
    paused: bool,
}

/// One event's triggers, ready to run. See the module docs.
#[derive(Debug, Default)]
pub struct TriggerRunner {
    triggers: Vec<Armed>,
    /// `EVENT_FILE_FL_TRIGGER_COND`: some trigger needs the record (a filter, or a trigger
    /// that runs after the record is written).
    cond: bool,
}

impl TriggerRunner {
    /// The runner for `event`'s `triggers` (the `trigger` file's order). A filter that does
    /// not parse against `event` (the tree never passes one) makes its trigger never fire.
    pub fn new(event: &TraceEventFormat, triggers: &[Trigger]) -> TriggerRunner {
        let mut cond = false;
        let triggers: Vec<Armed> = triggers
            .iter()
            .map(|t| {
                let action = match &t.kind {
                    TriggerKind::TraceOn => Action::TraceOn,
                    TriggerKind::TraceOff => Action::TraceOff,
                    TriggerKind::Snapshot => Action::Snapshot,
                    TriggerKind::Stacktrace => Action::Stacktrace,
                    TriggerKind::Enable {
                        id,
                        enable,
                        hist: false,
                        ..
                    } => Action::Enable {
                        id: *id,
                        enable: *enable,
                    },
                    _ => Action::Other,
                };
                let filter = t
                    .filter
                    .as_deref()
                    .map(|f| event_filter::parse(event, f).ok());
                // a filter, a post trigger (`traceoff`, `stacktrace`:
                // `EVENT_CMD_FL_POST_TRIGGER`) or a hist (`event_command_needs_rec`) sets the
                // cond flag (`update_cond_flag`).
                cond |= filter.is_some() || action.is_post() || action == Action::Other;
                Armed {
                    action,
                    count: ProbeCount::new(t.count),
                    // an unparsable filter: a filter that never matches
                    paused: t.paused || filter.as_ref().is_some_and(Option::is_none),
                    filter: filter.flatten(),
                }
            })
            .collect();
        TriggerRunner { triggers, cond }
    }

    /// Whether the event has no trigger.
    pub fn is_empty(&self) -> bool {
        self.triggers.is_empty()
    }

    /// Whether [`TriggerRunner::after_record`] must be called with the record
    /// (`EVENT_FILE_FL_TRIGGER_COND`); if not, [`TriggerRunner::before_record`] runs them all.
    pub fn needs_record(&self) -> bool {
        self.cond
    }

    /// The remaining counts, in list order (`-1`: unlimited): what the `trigger` file shows.
    pub fn counts(&self) -> Vec<i64> {
        self.triggers.iter().map(|t| t.count.get()).collect()
    }

    /// `__trace_trigger_soft_disabled`'s part: when no trigger needs the record, every
    /// (unpaused) trigger runs now, before the entry is reserved (a `traceon` here lets this
    /// very event be recorded). Returns how many acted.
    pub fn before_record(&self, actions: &dyn TriggerActions) -> usize {
        if self.cond {
            return 0;
        }
        self.triggers
            .iter()
            .filter(|t| !t.paused && fire(t, actions))
            .count()
    }

    /// `event_triggers_call(file, rec)` then `event_triggers_post_call`: when some trigger
    /// needs the record, the triggers whose filter passes `record` run, those that run after
    /// the write (`traceoff`, `stacktrace`) last. Call it after the entry was written, or
    /// refused (tracing off, soft-disabled, filtered out: the kernel evaluates the triggers on
    /// a temporary record then). Returns how many acted.
    pub fn after_record(
        &self,
        record: &[u8],
        cx: &RecordCtx<'_>,
        actions: &dyn TriggerActions,
    ) -> usize {
        if !self.cond {
            return 0;
        }
        let passes =
            |t: &&Armed| !t.paused && t.filter.as_ref().is_none_or(|f| f.matches(record, cx));
        let post = |t: &&Armed| t.action.is_post();
        let now = self
            .triggers
            .iter()
            .filter(passes)
            .filter(|t| !post(t))
            .filter(|t| fire(t, actions))
            .count();
        now + self
            .triggers
            .iter()
            .filter(passes)
            .filter(post)
            .filter(|t| fire(t, actions))
            .count()
    }
}

/// One trigger's callback with its count rule.
fn fire(t: &Armed, actions: &dyn TriggerActions) -> bool {
    match t.action {
        Action::TraceOn | Action::TraceOff => {
            let on = t.action == Action::TraceOn;
            // already in that state: nothing, the count is kept
            if actions.tracing_is_on() == on || !t.count.try_spend() {
                return false;
            }
            actions.set_tracing_on(on);
            true
        }
        Action::Snapshot | Action::Stacktrace => {
            if !t.count.try_spend() {
                return false;
            }
            if t.action == Action::Snapshot {
                actions.snapshot();
            } else {
                actions.stacktrace();
            }
            true
        }
        Action::Enable { id, enable } => match actions.event_soft_disabled(id) {
            // "Skip if the event is in a state we want to switch to"
            Some(disabled) if disabled == enable && t.count.try_spend() => {
                actions.set_event_soft_disabled(id, !enable);
                true
            }
            _ => false,
        },
        Action::Other => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::triggers::Trigger;
    use alloc::vec;
    use core::cell::Cell;
    use ftrace_core::format::sched::SCHED_SWITCH;

    #[derive(Default)]
    struct Acts {
        on: Cell<bool>,
        stacks: Cell<u32>,
        snaps: Cell<u32>,
        wakeup_disabled: Cell<bool>,
    }

    impl TriggerActions for Acts {
        fn tracing_is_on(&self) -> bool {
            self.on.get()
        }
        fn set_tracing_on(&self, on: bool) {
            self.on.set(on);
        }
        fn snapshot(&self) {
            self.snaps.set(self.snaps.get() + 1);
        }
        fn stacktrace(&self) {
            self.stacks.set(self.stacks.get() + 1);
        }
        fn event_soft_disabled(&self, id: u16) -> Option<bool> {
            (id == 7).then(|| self.wakeup_disabled.get())
        }
        fn set_event_soft_disabled(&self, _id: u16, disabled: bool) {
            self.wakeup_disabled.set(disabled);
        }
    }

    fn t(kind: TriggerKind, count: i64, filter: Option<&str>) -> Trigger {
        Trigger {
            kind,
            count,
            filter: filter.map(Into::into),
            paused: false,
        }
    }

    #[test]
    fn unconditional_triggers_run_before_the_record() {
        let r = TriggerRunner::new(
            &SCHED_SWITCH,
            &[
                t(TriggerKind::TraceOn, 1, None),
                t(TriggerKind::Snapshot, 2, None),
            ],
        );
        assert!(!r.needs_record());
        let a = Acts::default();
        assert_eq!(r.before_record(&a), 2);
        assert!(a.on.get());
        assert_eq!(r.counts(), [0, 1]);
        a.on.set(false);
        assert_eq!(r.before_record(&a), 1);
        assert_eq!(r.before_record(&a), 0);
        assert_eq!(
            (a.on.get(), a.snaps.get(), r.counts()),
            (false, 2, vec![0, 0])
        );
        assert_eq!(r.after_record(&[], &RecordCtx::default(), &a), 0);
    }

    /// `traceoff` is a post trigger: it needs the record and runs after it.
    #[test]
    fn traceoff_runs_after_the_record() {
        let r = TriggerRunner::new(&SCHED_SWITCH, &[t(TriggerKind::TraceOff, 1, None)]);
        assert!(r.needs_record());
        let a = Acts::default();
        a.on.set(true);
        assert_eq!(r.before_record(&a), 0);
        assert!(a.on.get());
        assert_eq!(r.after_record(&[], &RecordCtx::default(), &a), 1);
        assert!(!a.on.get());
        assert_eq!(r.counts(), [0]);
    }

    /// Four CPUs fire an event with `snapshot:100` at once: exactly 100 snapshots.
    #[test]
    fn concurrent_events_spend_a_count_once() {
        extern crate std;
        use core::sync::atomic::{AtomicU32, Ordering};
        struct Snaps(AtomicU32);
        impl TriggerActions for Snaps {
            fn tracing_is_on(&self) -> bool {
                true
            }
            fn set_tracing_on(&self, _on: bool) {}
            fn snapshot(&self) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let r = TriggerRunner::new(&SCHED_SWITCH, &[t(TriggerKind::Snapshot, 100, None)]);
        let a = Snaps(AtomicU32::new(0));
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..60 {
                        r.before_record(&a);
                    }
                });
            }
        });
        assert_eq!(a.0.load(Ordering::SeqCst), 100);
        assert_eq!(r.counts(), [0]);
    }

    #[test]
    fn filtered_and_post_triggers_run_after_the_record() {
        let r = TriggerRunner::new(
            &SCHED_SWITCH,
            &[
                t(TriggerKind::Stacktrace, -1, None),
                t(TriggerKind::TraceOn, -1, Some("next_pid == 18")),
                t(
                    TriggerKind::Enable {
                        system: "sched",
                        event: "sched_wakeup",
                        id: 7,
                        enable: false,
                        hist: false,
                    },
                    1,
                    None,
                ),
            ],
        );
        assert!(r.needs_record());
        let a = Acts::default();
        assert_eq!(r.before_record(&a), 0);
        let mut rec = vec![0u8; SCHED_SWITCH.record_size() as usize];
        let next_pid = SCHED_SWITCH.field("next_pid").unwrap().offset as usize;
        rec[next_pid..next_pid + 4].copy_from_slice(&17i32.to_le_bytes());
        let cx = RecordCtx::default();
        // next_pid 17: the filter refuses traceon; the enable spends its unit, the stack runs
        assert_eq!(r.after_record(&rec, &cx, &a), 2);
        assert!(!a.on.get() && a.wakeup_disabled.get());
        rec[next_pid..next_pid + 4].copy_from_slice(&18i32.to_le_bytes());
        assert_eq!(r.after_record(&rec, &cx, &a), 2);
        assert!(a.on.get());
        assert_eq!(a.stacks.get(), 2);
        assert_eq!(r.counts(), [-1, -1, 0]);
    }
}
