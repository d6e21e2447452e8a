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
//! Filters and triggers run in the program, when the event fires, as the kernel runs them
//! ([`ftrace_agent::event_record`]): the tree's filter text and the triggers `traceon`,
//! `traceoff`, `enable_event`, `disable_event` and `stacktrace` (with counts and `if`
//! filters) go to the agent with the event's state (`EVENT_SET`), and the soft-disabled
//! bits and counts they change are read back (`EVENT_GET`). `hist` triggers go as their definitions: the program
//! keeps their tables and aggregates each record into them, and the event's `hist` file is
//! the program's print of them (`EVENT_HIST`). `stacktrace` records the thread's stack after
//! the event, walked in the program (the function command's `kernel_stack` records, printed
//! as `<stack trace>` and ` => func` lines). `snapshot` is kept by the tree but not run on
//! program events (the live mount has no snapshot buffer).

use std::collections::HashMap;

use ftrace_agent::event::EventInfo;
use ftrace_agent::event_record::{EventConfig, WireAction, WireTrigger};
use ftrace_core::Errno;
use ftrace_core::format::TraceEventFormat;
use ftrace_tracefs::EventState;
use ftrace_tracefs::event_filter::EventFilter;
use ftrace_tracefs::triggers::{Trigger, TriggerKind};

use crate::agentctl::AgentLink;

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

    /// Sends event `id`'s state changed by `edit`; nothing changes here if the agent
    /// refuses it.
    fn update(
        &mut self,
        link: &mut AgentLink,
        id: u16,
        edit: impl FnOnce(&mut Sent),
    ) -> Result<(), Errno> {
        let mut next = self.sent.get(&id).cloned().unwrap_or_default();
        edit(&mut next);
        // Sent even when it equals the last one sent: the program's triggers and function
        // commands may have flipped its soft bit since (`1*` back to `0*` is such a write).
        link.set_event(id, &next.config)?;
        self.sent.insert(id, next);
        Ok(())
    }

    /// The tree changed event `id`'s state: armed while enabled, records discarded while
    /// soft-disabled.
    pub fn set_state(
        &mut self,
        link: &mut AgentLink,
        id: u16,
        state: EventState,
    ) -> Result<(), Errno> {
        self.update(link, id, |s| {
            s.config.armed = state.enabled;
            s.config.soft_disabled = state.soft_disabled;
        })
    }

    /// The event's filter changed (`None`: none).
    pub fn set_filter(
        &mut self,
        link: &mut AgentLink,
        id: u16,
        filter: Option<&EventFilter>,
    ) -> Result<(), Errno> {
        let text = filter.map_or(String::new(), |f| f.text().to_string());
        self.update(link, id, |s| s.config.filter = text)
    }

    /// The event's triggers changed (the tree's whole list).
    pub fn set_triggers(
        &mut self,
        link: &mut AgentLink,
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
        self.update(link, id, |s| {
            s.config.triggers = wire;
            s.triggers = map;
        })
    }

    /// The event's `hist` file, from the tables the program fills (empty for an event not
    /// armed: no table).
    pub fn hist(&self, link: &mut AgentLink, id: u16) -> String {
        match self.sent.get(&id).is_some_and(|s| s.config.armed) {
            true => link.event_hist(id).unwrap_or_default(),
            false => String::new(),
        }
    }

    /// `hist:...:clear` of the event's hist trigger that is `trigger`: its table in the
    /// program is emptied.
    pub fn clear_hist(&self, link: &mut AgentLink, id: u16, trigger: &Trigger) {
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
        }
    }

    /// The event's soft-disabled bit and its triggers' counts (tree order) as the program
    /// has them now; `None` for an event not armed.
    pub fn current(&self, link: &mut AgentLink, id: u16) -> Option<(bool, Vec<i64>)> {
        let sent = self.sent.get(&id).filter(|s| s.config.armed)?;
        let (soft, counts) = link.event_state(id).ok()?;
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
    use ftrace_agent::event::{EventInfo, FieldInfo};

    #[test]
    fn a_listed_event_has_the_kernels_format_file() {
        let e = EventInfo {
            id: 1024,
            system: "demo".into(),
            name: "demo_value".into(),
            print_fmt: "\"value=%lu label=%s\", REC->value, REC->label".into(),
            fields: vec![
                FieldInfo {
                    c_type: "unsigned long".into(),
                    name: "value".into(),
                    offset: 8,
                    size: 8,
                    signed: false,
                    array_len: 0,
                },
                FieldInfo {
                    c_type: "char".into(),
                    name: "label".into(),
                    offset: 16,
                    size: 16,
                    signed: false,
                    array_len: 16,
                },
            ],
            rec_size: 32,
        };
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
