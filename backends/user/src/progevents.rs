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
//! Filters: the tree's compiled filter is applied to each record when it is read
//! ([`ProgramEvents::keeps`]); the kernel applies it when the record is written, so here a
//! filtered-out record still takes ring space. Triggers are not run yet (a trigger on a
//! program event is refused with `ENODEV`).

use std::collections::{BTreeSet, HashMap};

use ftrace_agent::event::EventInfo;
use ftrace_core::Errno;
use ftrace_core::format::{Field, FieldArray, TraceEventFormat};
use ftrace_tracefs::EventState;
use ftrace_tracefs::event_filter::{EventFilter, RecordCtx};

use crate::agentctl::AgentLink;
use crate::live::LiveEvent;

/// The program's events and their state in the top-level instance.
#[derive(Default)]
pub struct ProgramEvents {
    formats: Vec<TraceEventFormat>,
    armed: BTreeSet<u16>,
    filters: HashMap<u16, EventFilter>,
}

fn leak(s: &str) -> &'static str {
    Box::leak(s.to_string().into_boxed_str())
}

/// The format of one listed event (strings and fields leaked).
pub fn format_of(e: &EventInfo) -> TraceEventFormat {
    let fields: Vec<Field> = e
        .fields
        .iter()
        .map(|f| Field {
            c_type: leak(&f.c_type),
            name: leak(&f.name),
            array: match f.array_len {
                0 => FieldArray::Scalar,
                n => FieldArray::Fixed(n),
            },
            offset: f.offset,
            size: f.size,
            signed: f.signed,
        })
        .collect();
    TraceEventFormat {
        system: leak(&e.system),
        name: leak(&e.name),
        id: e.id,
        fields: Box::leak(fields.into_boxed_slice()),
        print_fmt: leak(&e.print_fmt),
    }
}

impl ProgramEvents {
    /// The events the agent behind `link` lists.
    pub fn list(link: &mut AgentLink) -> Result<ProgramEvents, Errno> {
        let formats = link.events()?.iter().map(format_of).collect();
        Ok(ProgramEvents {
            formats,
            ..ProgramEvents::default()
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

    /// The tree changed event `id`'s state: arms or disarms it in the agent. `ENODEV` for
    /// triggers (not run on program events yet), the agent's error if it refuses.
    pub fn set_state(
        &mut self,
        link: &mut AgentLink,
        id: u16,
        state: EventState,
    ) -> Result<(), Errno> {
        if state.triggers {
            return Err(Errno::ENODEV);
        }
        let mut armed = self.armed.clone();
        match state.enabled && !state.soft_disabled {
            true => armed.insert(id),
            false => armed.remove(&id),
        };
        if armed != self.armed {
            let ids: Vec<u16> = armed.iter().copied().collect();
            link.set_events(&ids)?;
            self.armed = armed;
        }
        Ok(())
    }

    /// The event's filter changed (`None`: none).
    pub fn set_filter(&mut self, id: u16, filter: Option<&EventFilter>) {
        match filter {
            Some(f) => self.filters.insert(id, f.clone()),
            None => self.filters.remove(&id),
        };
    }

    /// Splits `evs` into the shown and the filtered out ([`ProgramEvents::keeps`]);
    /// `threads` gives the `comm` filters match (`(tid, pid, comm)`).
    pub fn filter(
        &self,
        evs: Vec<LiveEvent>,
        threads: &[(u32, u32, String)],
    ) -> (Vec<LiveEvent>, Vec<LiveEvent>) {
        if self.filters.is_empty() {
            return (evs, Vec::new());
        }
        evs.into_iter().partition(|e| {
            let comm = threads
                .iter()
                .find(|t| t.0 == e.tid)
                .map_or("", |t| t.2.as_str());
            self.keeps(&e.data, e.cpu, comm)
        })
    }

    /// Whether the record `data` (any entry, `struct trace_entry` first) is shown: entries
    /// that are not program events always are; a program event when its filter admits it.
    pub fn keeps(&self, data: &[u8], cpu: u32, comm: &str) -> bool {
        let Some(id) = data.get(..2).map(|b| u16::from_ne_bytes([b[0], b[1]])) else {
            return true;
        };
        match self.filters.get(&id) {
            Some(f) => f.matches(
                data,
                &RecordCtx {
                    cpu,
                    comm: comm.as_bytes(),
                },
            ),
            None => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ftrace_agent::event::FieldInfo;

    fn info() -> EventInfo {
        EventInfo {
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
        }
    }

    #[test]
    fn a_listed_event_has_the_kernels_format_file_and_filters_its_records() {
        let f = format_of(&info());
        let text = f.to_string();
        assert!(
            text.starts_with("name: demo_value\nID: 1024\nformat:\n"),
            "{text}"
        );
        assert!(text.contains("\tfield:unsigned long value;\toffset:8;\tsize:8;\tsigned:0;\n"));
        assert!(text.contains("\tfield:char label[16];\toffset:16;\tsize:16;\tsigned:0;\n"));
        assert!(text.ends_with("print fmt: \"value=%lu label=%s\", REC->value, REC->label\n"));
        let mut ev = ProgramEvents {
            formats: vec![f],
            ..ProgramEvents::default()
        };
        let filter = ftrace_tracefs::event_filter::parse(&ev.formats[0], "value > 10").unwrap();
        ev.set_filter(1024, Some(&filter));
        let rec = |v: u64| {
            let mut r = vec![0u8; 32];
            r[..2].copy_from_slice(&1024u16.to_ne_bytes());
            r[8..16].copy_from_slice(&v.to_ne_bytes());
            r
        };
        assert!(!ev.keeps(&rec(10), 0, "prog"));
        assert!(ev.keeps(&rec(11), 0, "prog"));
        ev.set_filter(1024, None);
        assert!(ev.keeps(&rec(10), 0, "prog"));
    }
}
