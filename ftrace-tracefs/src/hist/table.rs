//! One hist trigger's table, the kernel's `hist_trigger_data`: the trigger, its compiled
//! definition and filter, and the aggregation the event's probe adds every record to.
//!
//! Every backend that runs hist triggers keeps one per trigger (TraceArray in its event slots,
//! the userspace agent in the traced program). Invariant: a probe never waits for the table: a
//! record that finds it locked (a reader printing it, another CPU, a nested handler) is counted
//! as dropped and the count is added to the table's drops when it is printed.

use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering};

use ftrace_core::format::TraceEventFormat;

use super::{Comm, HistDef, HistMap, HistNames, write_hist};
use crate::array::lock::SpinLock;
use crate::event_filter::{self, EventFilter, RecordCtx};
use crate::triggers::{Trigger, TriggerKind};

/// One hist trigger's table.
pub struct HistTable {
    trigger: Trigger,
    def: HistDef,
    filter: Option<EventFilter>,
    map: SpinLock<HistMap>,
    /// Records that found the table busy: added to its drops when printed.
    missed: AtomicU64,
}

/// Why [`HistTable::compile`] refused a trigger.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HistTableError {
    /// The trigger is not a `hist` trigger.
    NotHist,
    /// Its keys or values do not compile against the event.
    Unsupported,
    /// Its `if` filter does not parse against the event.
    BadFilter,
}

impl HistTable {
    /// The table of hist trigger `trigger` on `event`. A table of the same trigger in `old`
    /// (the tables before the event's triggers changed) is carried over: adding, removing or
    /// pausing another trigger clears nothing.
    pub fn compile(
        trigger: &Trigger,
        event: &TraceEventFormat,
        old: &[HistTable],
    ) -> Result<HistTable, HistTableError> {
        let TriggerKind::Hist(spec) = &trigger.kind else {
            return Err(HistTableError::NotHist);
        };
        let def = HistDef::compile(spec, event).map_err(|_| HistTableError::Unsupported)?;
        let map = match old.iter().find(|o| o.trigger.same_as(trigger)) {
            Some(o) => o.map.lock().clone(),
            None => HistMap::new(&def),
        };
        let filter = match trigger.filter.as_deref() {
            Some(f) => Some(event_filter::parse(event, f).map_err(|_| HistTableError::BadFilter)?),
            None => None,
        };
        Ok(HistTable {
            trigger: trigger.clone(),
            def,
            filter,
            map: SpinLock::new(map),
            missed: AtomicU64::new(0),
        })
    }

    /// The trigger this table belongs to.
    pub fn trigger(&self) -> &Trigger {
        &self.trigger
    }

    /// The trigger's compiled definition: its keys' slots and displays, its values.
    pub fn def(&self) -> &HistDef {
        &self.def
    }

    /// `event_hist_trigger`: aggregates `rec` unless the trigger is paused or its filter
    /// leaves the record out; a busy table counts the record as dropped rather than wait.
    pub fn update(&self, rec: &[u8], cx: &RecordCtx<'_>) {
        if self.trigger.paused || !self.filter.as_ref().is_none_or(|f| f.matches(rec, cx)) {
            return;
        }
        let comm = || {
            let mut c: Comm = [0; 16];
            let n = cx.comm.len().min(15);
            c[..n].copy_from_slice(&cx.comm[..n]);
            c
        };
        match self.map.try_lock() {
            Some(mut m) => m.update(&self.def, rec, cx.cpu, &comm),
            None => {
                self.missed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Prints the table as the `hist` file's `n`th (0-based) table, the records dropped since
    /// the last print added to its drops.
    pub fn write(&self, w: &mut dyn fmt::Write, n: usize, names: &HistNames<'_>) -> fmt::Result {
        let mut map = self.map.lock();
        map.add_drops(self.missed.swap(0, Ordering::Relaxed));
        write_hist(w, n, &self.trigger, &self.def, &map, names)
    }

    /// Runs `f` on the table's map (the records dropped since the last print added to its
    /// drops first, as [`HistTable::write`] does).
    pub fn with_map<R>(&self, f: impl FnOnce(&mut HistMap) -> R) -> R {
        let mut map = self.map.lock();
        map.add_drops(self.missed.swap(0, Ordering::Relaxed));
        f(&mut map)
    }

    /// `hist:...:clear`: empties the table.
    pub fn clear(&self) {
        self.map.lock().clear();
        self.missed.store(0, Ordering::Relaxed);
    }
}
