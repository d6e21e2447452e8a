//! The traced program's own trace events (declared with `ftrace/tracepoint.h`, listed by the
//! agent's `EVENTS`) on the live tree: their formats, which are on, and their filters.
//!
//! Each event the agent lists becomes a [`TraceEventFormat`] (its strings and field table
//! leaked: a program's events are listed once per mount and live as long as it), registered
//! with the tree beside the kernel's `sched` formats, so `events/<sys>/<ev>/{enable,filter,
//! format,id,trigger}`, `events/<sys>/enable`, `events/enable`, `set_event` and
//! `available_events` serve them through ftrace-tracefs's events machinery. The tree's state
//! changes arrive here ([`ProgramEvents::set_state`]): the agent is asked to arm exactly the
//! enabled events (`EVENTS_ON`). Invariant: an event is armed in the agent only while the
//! tree says it is enabled and not soft-disabled; a refused request changes nothing here.
//!
//! Every process of the tree gets the same state ([`crate::tree::Members`]): a process whose
//! events carry the tree's ids (the first process's: the same library declares them) gets
//! each change as the first does, and all of it when it registers ([`ProgramEvents::send_all`],
//! before it runs: an exec'd image waits for its first state), so a shell's fork fires the
//! tree's `sched_process_fork` triggers in that shell. One declaring its events under other
//! ids gets none (its events stay off). The soft bits, trigger counts and `hist` tables are
//! read back from every process: one event of the tree, as the kernel's.
//!
//! Filters and triggers run in the program, when the event fires, as the kernel runs them
//! ([`ftrace_agent::event_record`]): the tree's filter text and the triggers `traceon`,
//! `traceoff`, `enable_event`, `disable_event` and `stacktrace` (with counts and `if`
//! filters) go to the agent with the event's state (`EVENT_SET`), and the soft-disabled
//! bits and counts they change are read back (`EVENT_GET`). `hist` triggers go as their definitions: the program
//! keeps their tables and aggregates each record into them, and the event's `hist` file is
//! every process's tables (`EVENT_HIST`) merged and printed here. `stacktrace` records the thread's stack after
//! the event, walked in the program (the function command's `kernel_stack` records, printed
//! as `<stack trace>` and ` => func` lines). The live mount has no snapshot buffer, so
//! its tree has no `snapshot` trigger (`EINVAL`, as the kernel without
//! `CONFIG_TRACER_SNAPSHOT`).

use std::collections::HashMap;

use ftrace_agent::event::EventInfo;
use ftrace_agent::event_record::{self, EventConfig, WireAction, WireTrigger};
use ftrace_agent::hist_symbols::KeySymbols;
use ftrace_core::Errno;
use ftrace_core::format::TraceEventFormat;
use ftrace_tracefs::EventState;
use ftrace_tracefs::event_filter::EventFilter;
use ftrace_tracefs::triggers::{Trigger, TriggerKind};

use crate::agentctl::AgentLink;
use crate::tree::{EventIds, Members};

/// The program's events and their state in the top-level instance.
#[derive(Default)]
pub struct ProgramEvents {
    formats: Vec<TraceEventFormat>,
    sent: HashMap<u16, Sent>,
}

/// What was sent for one event, and where each of the tree's triggers went.
#[derive(Clone, Debug, Default)]
struct Sent {
    config: EventConfig,
    /// Per tree trigger: its index among the sent ones, or its count when not sent.
    triggers: Vec<Result<usize, i64>>,
}

impl ProgramEvents {
    /// The events the agent behind `link` lists.
    pub fn list(link: &mut AgentLink) -> Result<ProgramEvents, Errno> {
        let formats = link.events()?.iter().map(EventInfo::format).collect();
        Ok(ProgramEvents {
            formats,
            sent: HashMap::new(),
        })
    }

    /// Their formats.
    pub fn formats(&self) -> &[TraceEventFormat] {
        &self.formats
    }

    /// Whether `id` is one of the program's events.
    pub fn has(&self, id: u16) -> bool {
        self.formats.iter().any(|f| f.id == id)
    }

    /// How the events of a process that lists `events` are numbered against the tree's.
    pub fn ids_of(&self, events: &[EventInfo]) -> EventIds {
        let agrees = |e: &EventInfo| {
            self.formats
                .iter()
                .any(|f| f.id == e.id && f.system == e.system && f.name == e.name)
        };
        match events.iter().all(agrees) {
            true => EventIds::Tree,
            false => EventIds::Own,
        }
    }

    /// Sends the state sent so far of every event of `declared` (what the process behind
    /// `link`, which just registered, lists) to it.
    pub fn send_all(&self, link: &mut AgentLink, declared: &[EventInfo]) -> Result<(), Errno> {
        for e in declared {
            if let Some(s) = self.sent.get(&e.id) {
                link.set_event(e.id, &s.config)?;
            }
        }
        Ok(())
    }

    /// Sends event `id`'s state changed by `edit` to the first process and the tree's others;
    /// nothing changes here if the first process refuses it (one that is gone refuses
    /// nothing).
    fn update(
        &mut self,
        link: &mut AgentLink,
        others: &mut Members,
        id: u16,
        edit: impl FnOnce(&mut Sent),
    ) -> Result<(), Errno> {
        let mut next = self.sent.get(&id).cloned().unwrap_or_default();
        edit(&mut next);
        // Sent even when it equals the last one sent: the program's triggers and function
        // commands may have flipped its soft bit since (`1*` back to `0*` is such a write).
        match link.set_event(id, &next.config) {
            Err(_) if link.is_broken() => {}
            r => r?,
        }
        let _ = others.each_with_tree_events(|l| l.set_event(id, &next.config));
        self.sent.insert(id, next);
        Ok(())
    }

    /// The tree changed event `id`'s state: armed while enabled, records discarded while
    /// soft-disabled.
    pub fn set_state(
        &mut self,
        link: &mut AgentLink,
        others: &mut Members,
        id: u16,
        state: EventState,
    ) -> Result<(), Errno> {
        self.update(link, others, id, |s| {
            s.config.armed = state.enabled;
            s.config.soft_disabled = state.soft_disabled;
        })
    }

    /// The event's filter changed (`None`: none).
    pub fn set_filter(
        &mut self,
        link: &mut AgentLink,
        others: &mut Members,
        id: u16,
        filter: Option<&EventFilter>,
    ) -> Result<(), Errno> {
        let text = filter.map_or(String::new(), |f| f.text().to_string());
        self.update(link, others, id, |s| s.config.filter = text)
    }

    /// The event's triggers changed (the tree's whole list).
    pub fn set_triggers(
        &mut self,
        link: &mut AgentLink,
        others: &mut Members,
        id: u16,
        triggers: &[Trigger],
    ) -> Result<(), Errno> {
        let mut wire = Vec::new();
        let mut map = Vec::new();
        for t in triggers {
            let action = match t.kind {
                TriggerKind::Hist(_) => Some(WireAction::Hist {
                    spec: hist_spec(t),
                    paused: t.paused,
                }),
                TriggerKind::TraceOn => Some(WireAction::TraceOn),
                TriggerKind::TraceOff => Some(WireAction::TraceOff),
                TriggerKind::Stacktrace => Some(WireAction::Stacktrace),
                TriggerKind::Enable {
                    id,
                    enable,
                    hist: false,
                    ..
                } => Some(match enable {
                    true => WireAction::Enable(id),
                    false => WireAction::Disable(id),
                }),
                _ => None,
            };
            match action {
                Some(action) => {
                    map.push(Ok(wire.len()));
                    wire.push(WireTrigger {
                        action,
                        count: t.count,
                        filter: t.filter.clone().unwrap_or_default(),
                    });
                }
                None => map.push(Err(t.count)),
            }
        }
        self.update(link, others, id, |s| {
            s.config.triggers = wire;
            s.triggers = map;
        })
    }

    /// The event's `hist` file: the tables every process of the tree fills, merged (empty
    /// for an event not armed: no table). A named hist (`name=`) is one table shared by
    /// every event that has a hist trigger of that name, as the kernel's: the tables of the
    /// same name of the other events are merged in too.
    pub fn hist(&self, link: &mut AgentLink, others: &mut Members, id: u16) -> String {
        let Some(sent) = self.sent.get(&id).filter(|s| s.config.armed) else {
            return String::new();
        };
        let Some(format) = self.formats.iter().find(|f| f.id == id) else {
            return String::new();
        };
        let Some(tables) = event_record::empty_hist_tables(format, &sent.config) else {
            return String::new();
        };
        // Where each source table goes: (event, its table index) -> this event's table.
        let names = self.hist_names(id);
        let mut sources: Vec<(u16, usize, usize)> = (0..tables.len()).map(|n| (id, n, n)).collect();
        for other in self.sent.keys().filter(|&&o| o != id) {
            for (m, name) in self.hist_names(*other).into_iter().enumerate() {
                let target = names.iter().position(|n| n.is_some() && *n == name);
                if let Some(n) = target {
                    sources.push((*other, m, n));
                }
            }
        }
        let mut events: Vec<u16> = sources.iter().map(|s| s.0).collect();
        events.dedup();
        let mut symbols = KeySymbols::default();
        let mut merge = |l: &mut AgentLink| {
            for ev in &events {
                // A process that has not armed it (a new image) has no table yet.
                let Ok(dumps) = l.event_hist(*ev) else {
                    continue;
                };
                for &(_, m, n) in sources.iter().filter(|s| s.0 == *ev) {
                    let Some(d) = dumps.get(m) else { continue };
                    symbols.extend(&d.symbols);
                    let elements = d.elements.iter().map(|(k, s, c)| (&k[..], &s[..], &c[..]));
                    // A table of other sizes (not the same definition) is left out.
                    let _ = tables[n].with_map(|t| t.merge(d.hits, d.drops, elements));
                }
            }
        };
        merge(link);
        let _ = others.each_with_tree_events(|l| {
            merge(l);
            Ok(())
        });
        event_record::write_hists(&tables, &symbols, &crate::syscall_names::name)
    }

    /// The names (`name=`) of event `id`'s armed hist triggers, in their tables' order.
    fn hist_names(&self, id: u16) -> Vec<Option<String>> {
        let (Some(sent), Some(format)) = (
            self.sent.get(&id).filter(|s| s.config.armed),
            self.formats.iter().find(|f| f.id == id),
        ) else {
            return Vec::new();
        };
        sent.config
            .triggers
            .iter()
            .filter_map(|t| match &t.action {
                WireAction::Hist { spec, paused } => Some(
                    match event_record::hist_trigger(format, spec, *paused, &t.filter) {
                        Ok(Trigger {
                            kind: TriggerKind::Hist(h),
                            ..
                        }) => h.name.clone(),
                        _ => None,
                    },
                ),
                _ => None,
            })
            .collect()
    }

    /// `hist:...:clear` of the event's hist trigger that is `trigger`: its table in every
    /// process is emptied.
    pub fn clear_hist(
        &self,
        link: &mut AgentLink,
        others: &mut Members,
        id: u16,
        trigger: &Trigger,
    ) {
        let Some(sent) = self.sent.get(&id).filter(|s| s.config.armed) else {
            return;
        };
        let spec = hist_spec(trigger);
        let filter = trigger.filter.clone().unwrap_or_default();
        let n = sent
            .config
            .triggers
            .iter()
            .filter(|t| matches!(t.action, WireAction::Hist { .. }))
            .position(|t| {
                matches!(&t.action, WireAction::Hist { spec: s, .. } if *s == spec)
                    && t.filter == filter
            });
        if let Some(n) = n {
            let _ = link.clear_event_hist(id, n);
            let _ = others.each_with_tree_events(|l| {
                let _ = l.clear_event_hist(id, n);
                Ok(())
            });
        }
    }

    /// The event's soft-disabled bit and its triggers' counts (tree order) as the tree's
    /// processes have them now; `None` for an event not armed. One event of the tree: a
    /// process whose triggers or function commands flipped its soft bit flipped the tree's
    /// (every process is then sent it), and a count is what was sent less what every
    /// process's firings took from it.
    pub fn current(
        &mut self,
        link: &mut AgentLink,
        others: &mut Members,
        id: u16,
    ) -> Option<(bool, Vec<i64>)> {
        let sent = self.sent.get(&id).filter(|s| s.config.armed)?.clone();
        let mut states = Vec::new();
        if let Ok(s) = link.event_state(id) {
            states.push(s);
        }
        let _ = others.each_with_tree_events(|l| {
            // A process that has not armed it yet (a new image) has nothing to add.
            if let Ok(s) = l.event_state(id) {
                states.push(s);
            }
            Ok(())
        });
        if states.is_empty() {
            return None;
        }
        let was = sent.config.soft_disabled;
        let soft = match states.iter().any(|(s, _)| *s != was) {
            true => !was,
            false => was,
        };
        let counts: Vec<i64> = sent
            .config
            .triggers
            .iter()
            .enumerate()
            .map(|(i, t)| match t.count {
                c if c < 0 => c,
                c => {
                    let used: i64 = states
                        .iter()
                        .map(|(_, n)| n.get(i).map_or(0, |n| (c - n).max(0)))
                        .sum();
                    (c - used).max(0)
                }
            })
            .collect();
        if soft != was
            || counts
                .iter()
                .zip(&sent.config.triggers)
                .any(|(n, t)| *n != t.count)
        {
            // The tree's state now: every process gets it (the counts as the new start).
            let _ = self.update(link, others, id, |s| {
                s.config.soft_disabled = soft;
                for (t, n) in s.config.triggers.iter_mut().zip(&counts) {
                    t.count = *n;
                }
            });
        }
        let tree = sent
            .triggers
            .iter()
            .map(|t| match t {
                Ok(i) => counts.get(*i).copied().unwrap_or(-1),
                Err(c) => *c,
            })
            .collect();
        Some((soft, tree))
    }
}

/// A hist trigger's definition as the `trigger` file shows it, without its filter and state
/// (`hist:keys=...:size=2048`): what the agent parses again.
fn hist_spec(t: &Trigger) -> String {
    let bare = Trigger {
        filter: None,
        paused: false,
        ..t.clone()
    };
    let line = bare.to_string();
    let line = line.trim_end();
    line.strip_suffix(" [active]").unwrap_or(line).to_string()
}

#[cfg(test)]
mod tests {
    use ftrace_agent::event::EventInfo;

    #[test]
    fn a_listed_event_has_the_kernels_format_file() {
        let e = EventInfo::demo_value();
        let text = e.format().to_string();
        assert!(
            text.starts_with("name: demo_value\nID: 1024\nformat:\n"),
            "{text}"
        );
        assert!(text.contains("\tfield:unsigned long value;\toffset:8;\tsize:8;\tsigned:0;\n"));
        assert!(text.contains("\tfield:char label[16];\toffset:16;\tsize:16;\tsigned:0;\n"));
        assert!(text.ends_with("print fmt: \"value=%lu label=%s\", REC->value, REC->label\n"));
    }
}
