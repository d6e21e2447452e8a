//! Trace events: the registry a host fills and the per-instance state of each event.
//!
//! A host registers events ([`crate::Tracefs::register_event`], e.g. the `sched` set of
//! [`ftrace_core::format::sched`]); every instance then serves `events/<sys>/<event>/{enable,
//! filter,format,hist,id,trigger}`, `events/<sys>/{enable,filter}`, `events/enable`, `set_event`
//! and (top level) `available_events`. Each instance keeps, per event, the kernel's
//! `trace_event_file` flags (`ENABLED`, `SOFT_MODE`, `SOFT_DISABLED`, `TRIGGER_MODE` with the
//! `sm_ref`/`tm_ref` counts), its filter and its triggers. Invariant: the flags only change
//! through [`EventFile::enable_disable`], the kernel's `__ftrace_event_enable_disable` state
//! machine, so `enable` reads `0`, `1`, `0*` or `1*` exactly when Linux would.

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use ftrace_core::format::TraceEventFormat;

use crate::backend::EventState;
use crate::event_filter::EventFilter;
use crate::readme::SnapshotFiles;
use crate::triggers::{COMMANDS, Trigger};

/// The kernel's `trace_event_file` flags that tracefs shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventFlags {
    /// `EVENT_FILE_FL_ENABLED`: the tracepoint is armed.
    pub enabled: bool,
    /// `EVENT_FILE_FL_SOFT_MODE`: a trigger keeps it armed (`sm_ref > 0`).
    pub soft_mode: bool,
    /// `EVENT_FILE_FL_SOFT_DISABLED`: armed, but records are discarded.
    pub soft_disabled: bool,
    /// `EVENT_FILE_FL_TRIGGER_MODE`: it has triggers (`tm_ref > 0`).
    pub trigger_mode: bool,
    /// Soft-mode references (enable triggers on other events, its own triggers).
    pub sm_ref: u32,
    /// Trigger references.
    pub tm_ref: u32,
}

/// An event's filter slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FilterSlot {
    /// A filter in force.
    Active(EventFilter),
    /// A rejected filter: the text the `filter` file shows (the filter, a caret, the
    /// parse error), with filtering disabled, as Linux keeps it.
    Failed(String),
}

/// One event's state in one instance.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventFile {
    /// The flags.
    pub flags: EventFlags,
    /// The filter, if one was written.
    pub filter: Option<FilterSlot>,
    /// The triggers, in the order `trigger` lists them.
    pub triggers: Vec<Trigger>,
}

/// Who enables or disables an event (`__ftrace_event_enable_disable`'s `soft_disable`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EnableMode {
    /// The event's `enable` file (or the subsystem's, or `set_event`): the event itself.
    Hard,
    /// A trigger or an `enable_event`/`disable_event` command: a reference that keeps the
    /// event in soft mode (recorded only while soft-enabled).
    Soft,
}

impl EventFile {
    /// `__ftrace_event_enable_disable(file, enable, soft_disable)`.
    pub fn enable_disable(&mut self, enable: bool, mode: EnableMode) {
        let soft = mode == EnableMode::Soft;
        let f = &mut self.flags;
        if !enable {
            let disable = if soft {
                if f.sm_ref == 0 {
                    return;
                }
                f.sm_ref -= 1;
                if f.sm_ref > 0 {
                    return;
                }
                f.soft_mode = false;
                f.soft_disabled
            } else {
                !f.soft_mode
            };
            if disable {
                f.enabled = false;
            }
            f.soft_disabled = f.soft_mode;
        } else {
            if !soft {
                f.soft_disabled = false;
            } else {
                f.sm_ref += 1;
                if f.sm_ref > 1 {
                    return;
                }
                f.soft_mode = true;
            }
            if !f.enabled {
                if soft {
                    f.soft_disabled = true;
                }
                f.enabled = true;
            }
        }
    }

    /// `trace_event_trigger_enable_disable`: a trigger added to (or removed from) the event.
    pub fn trigger_enable_disable(&mut self, enable: bool) {
        if enable {
            self.flags.tm_ref += 1;
            if self.flags.tm_ref > 1 {
                return;
            }
            self.flags.trigger_mode = true;
            self.enable_disable(true, EnableMode::Soft);
        } else {
            if self.flags.tm_ref == 0 {
                return;
            }
            self.flags.tm_ref -= 1;
            if self.flags.tm_ref > 0 {
                return;
            }
            self.flags.trigger_mode = false;
            self.enable_disable(false, EnableMode::Soft);
        }
    }

    /// What the backend is told.
    pub fn state(&self) -> EventState {
        EventState {
            enabled: self.flags.enabled,
            soft_disabled: self.flags.soft_disabled,
            triggers: self.flags.trigger_mode,
        }
    }

    /// The filter in force (`None` when none is set or the last one was rejected).
    pub fn active_filter(&self) -> Option<&EventFilter> {
        match &self.filter {
            Some(FilterSlot::Active(f)) => Some(f),
            _ => None,
        }
    }

    /// `event_enable_read`.
    pub fn write_enable(&self, w: &mut dyn fmt::Write) -> fmt::Result {
        let f = &self.flags;
        w.write_char(if f.enabled && !f.soft_disabled {
            '1'
        } else {
            '0'
        })?;
        if f.soft_disabled || f.soft_mode {
            w.write_char('*')?;
        }
        w.write_char('\n')
    }

    /// `event_filter_read`.
    pub fn write_filter(&self, w: &mut dyn fmt::Write) -> fmt::Result {
        match &self.filter {
            Some(FilterSlot::Active(f)) => writeln!(w, "{}", f.text()),
            Some(FilterSlot::Failed(t)) => writeln!(w, "{t}"),
            None => w.write_str("none\n"),
        }
    }

    /// The `trigger` file: the triggers, or the list of commands when there are none
    /// (`snapshot` only where there is a snapshot buffer: the kernel registers that command
    /// only with `CONFIG_TRACER_SNAPSHOT`).
    pub fn write_triggers(&self, w: &mut dyn fmt::Write, snapshot: SnapshotFiles) -> fmt::Result {
        if self.triggers.is_empty() {
            w.write_str("# Available triggers:\n#")?;
            for c in COMMANDS
                .iter()
                .filter(|&&c| c != "snapshot" || snapshot == SnapshotFiles::Present)
            {
                write!(w, " {c}")?;
            }
            return w.write_char('\n');
        }
        for t in &self.triggers {
            write!(w, "{t}")?;
        }
        Ok(())
    }
}

/// `DEFAULT_SYS_FILTER_MESSAGE`: what a subsystem's `filter` shows without an error.
pub const DEFAULT_SYS_FILTER_MESSAGE: &str = "### global filter ###\n\
# Use this to set filters for multiple events.\n\
# Only events with the given fields will be affected.\n\
# If no events are modified, an error message will be displayed here\n";

/// The trace events of one instance.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventSet {
    /// Per event id.
    pub files: BTreeMap<u16, EventFile>,
    /// Per subsystem index: the text of its last rejected filter.
    pub system_filters: BTreeMap<u16, String>,
}

/// `system_enable_read`'s answer over a set of events: `0`, `1`, `X` (mixed) or `?` (none).
pub fn enable_summary<'a>(files: impl Iterator<Item = &'a EventFile>) -> char {
    let mut set = 0u8;
    for f in files {
        set |= 1 << u8::from(f.flags.enabled);
        if set == 3 {
            break;
        }
    }
    ['?', '0', '1', 'X'][usize::from(set)]
}

/// `ftrace_set_clr_event`'s matcher for a `set_event` token (`sys:event`, `sys:`, `sys:*`,
/// `:event`, `*:event`, or a bare name matching an event or a subsystem). Exact names only:
/// the kernel compares with `strcmp`.
pub fn set_event_matcher(token: &str) -> impl Fn(&TraceEventFormat) -> bool + '_ {
    let (m, sub, event) = match token.split_once(':') {
        Some((sub, ev)) => {
            let sub = (!sub.is_empty() && sub != "*").then_some(sub);
            let ev = (!ev.is_empty() && ev != "*").then_some(ev);
            (None, sub, ev)
        }
        None => (Some(token), None, None),
    };
    move |e: &TraceEventFormat| {
        m.is_none_or(|m| m == e.name || m == e.system)
            && sub.is_none_or(|s| s == e.system)
            && event.is_none_or(|n| n == e.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ftrace_core::format::sched::{SCHED_SWITCH, SCHED_WAKEUP};

    fn enable_text(f: &EventFile) -> String {
        let mut s = String::new();
        f.write_enable(&mut s).unwrap();
        s
    }

    #[test]
    fn soft_mode_reads_like_the_kernel() {
        let mut f = EventFile::default();
        assert_eq!(enable_text(&f), "0\n");
        f.enable_disable(true, EnableMode::Hard);
        assert_eq!(enable_text(&f), "1\n");
        f.enable_disable(true, EnableMode::Soft);
        assert_eq!(enable_text(&f), "1*\n");
        // A hard disable in soft mode only soft-disables.
        f.enable_disable(false, EnableMode::Hard);
        assert_eq!(enable_text(&f), "0*\n");
        assert!(f.flags.enabled);
        f.enable_disable(false, EnableMode::Soft);
        assert_eq!(enable_text(&f), "0\n");
        assert!(!f.flags.enabled);
        // Soft enable of a disabled event arms it soft-disabled.
        f.trigger_enable_disable(true);
        f.trigger_enable_disable(true);
        assert_eq!(enable_text(&f), "0*\n");
        f.trigger_enable_disable(false);
        assert_eq!(enable_text(&f), "0*\n");
        f.trigger_enable_disable(false);
        assert_eq!(f, EventFile::default());
    }

    #[test]
    fn set_event_tokens_match_as_strcmp() {
        let t = |tok: &str, e: &TraceEventFormat| set_event_matcher(tok)(e);
        assert!(t("sched:sched_switch", &SCHED_SWITCH));
        assert!(!t("sched:sched_switch", &SCHED_WAKEUP));
        assert!(t("sched:*", &SCHED_WAKEUP));
        assert!(t("sched:", &SCHED_WAKEUP));
        assert!(t("*:sched_wakeup", &SCHED_WAKEUP));
        assert!(t(":sched_wakeup", &SCHED_WAKEUP));
        assert!(t("sched", &SCHED_WAKEUP));
        assert!(t("sched_switch", &SCHED_SWITCH));
        assert!(!t("sched_*", &SCHED_SWITCH));
        assert!(!t("sched:sched_*", &SCHED_SWITCH));
        assert!(t("*:*", &SCHED_SWITCH));
        let all = [EventFile::default(), EventFile::default()];
        assert_eq!(enable_summary(all.iter()), '0');
        assert_eq!(enable_summary([].iter()), '?');
    }
}
