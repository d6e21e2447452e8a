//! Trace events in the instance: the tracepoints the program declares with ftrace-core's
//! [`tracepoint!`](ftrace_core::tracepoint!), recorded into the instance's ring buffer.
//!
//! A program registers each of its tracepoints once, before it builds the tree, with
//! [`TraceArray::register_tracepoint`]: an explicit list rather than a linker section, so
//! that the same code works on a host, in a `no_std` kernel without a linker script of ours,
//! and in tests that build several instances. The instance gives each tracepoint an
//! [`EventSlot`] (bound as the tracepoint's owner, the kernel's `tracepoint_func.data`) and
//! every tree it serves registers the event's format, so `events/<sys>/<ev>/{enable,filter,
//! format,id,trigger}`, `events/<sys>/enable`, `events/enable`, `set_event` and
//! `available_events` exist for it.
//!
//! While the tree says the event is enabled, the tracepoint is connected to the instance's
//! probe: it fills the common fields (flags, preempt count, pid), runs the event's triggers
//! before the record (or after it, when some trigger needs the record, as the kernel's
//! `event_triggers_call`), and writes the record into the current CPU's buffer unless it is
//! soft-disabled, filtered out or tracing is off. Records interleave with the tracers' entries
//! by time stamp; `trace` prints them through their formats. A full buffer drops the record
//! and counts it with every other dropped entry (the buffer's overrun, `trace`'s header).
//!
//! Hist triggers aggregate each record that passes their filter into their
//! [`HistMap`](crate::hist::HistMap) (a table busy with a reader or another CPU counts the
//! record as dropped rather than wait), and the event's `hist` file prints them.
//!
//! Each instance under `instances/` gets a slot of its own for every tracepoint (its own
//! enable, filter, triggers and hist tables, records in its own buffer), reached through the
//! top level's slot: the tracepoint has one probe, connected while the top level or any
//! instance has the event enabled, and the probe hands each record to every slot that wants
//! it. `rmdir` takes the instance's slots out and frees them after a grace period.
//!
//! Not yet: a hist trigger the
//! aggregation cannot compile (expressions, variables, `common_timestamp`, stack keys:
//! [`HistError::Unsupported`](crate::hist::HistError::Unsupported)) has no table and is
//! missing from `hist`.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, Ordering};

use ftrace_core::Errno;
use ftrace_core::format::TraceEventFormat;
use ftrace_core::platform::{Reclaim, TaskContext};
use ftrace_core::reclaim::{Published, RcuCell};
use ftrace_core::tracepoint::Tracepoint;
use ftrace_tracers::tracer::EntrySink;

use super::{ArrayKind, Platform, TraceArray};
use crate::backend::EventState;
use crate::event_filter::{EventFilter, RecordCtx};
use crate::hist::{HistNames, HistTable};
use crate::trigger_run::{TriggerActions, TriggerRunner};
use crate::triggers::Trigger;

/// One registered tracepoint's state in its instance (the kernel's `trace_event_file`).
pub(super) struct EventSlot<P: Platform, const CPUS: usize> {
    array: &'static TraceArray<P, CPUS>,
    tp: &'static Tracepoint,
    /// `EVENT_FILE_FL_ENABLED`: this instance's tree has the event on (soft mode included).
    enabled: AtomicBool,
    /// `EVENT_FILE_FL_SOFT_DISABLED`: armed, records discarded (triggers flip it).
    soft_disabled: AtomicBool,
    /// The same event's slots in the top level's `instances/` (the top level's slot only):
    /// the probe hands them each record.
    instances: RcuCell<Vec<&'static dyn InstanceSlot>>,
    filter: RcuCell<EventFilter>,
    runner: RcuCell<TriggerRunner>,
    /// The hist triggers' tables, in `trigger` file order.
    hists: RcuCell<Vec<HistTable>>,
}

/// The registered tracepoints of an instance, published for the probes.
pub(super) type EventSlots<P, const CPUS: usize> = Vec<&'static EventSlot<P, CPUS>>;

impl<P: Platform, const CPUS: usize> TraceArray<P, CPUS> {
    /// Registers a tracepoint the program declared (`tracepoint!`): every tree built after
    /// this ([`TraceArray::tracefs`]) serves its event, and enabling it there connects the
    /// tracepoint to this instance. `EEXIST` if an event of the same id or name is registered,
    /// `EBUSY` if another instance owns the tracepoint, `ENODEV` for an instance under
    /// `instances/` (they get the top level's tracepoints when they are made). Slots live as long as the instance (a `static`): registration is meant to
    /// happen once per tracepoint.
    pub fn register_tracepoint(&'static self, tp: &'static Tracepoint) -> Result<(), Errno> {
        if self.kind != ArrayKind::Top {
            return Err(Errno::ENODEV);
        }
        // The control lock orders registrations (the slots are published for the probes).
        let _lock = self.control.lock();
        let f = tp.format();
        let taken = self.with_events(|slots| {
            slots.iter().any(|s| {
                let g = s.tp.format();
                g.id == f.id || (g.system == f.system && g.name == f.name)
            })
        });
        if taken {
            return Err(Errno::EEXIST);
        }
        let slot = Box::into_raw(Box::new(EventSlot::new(self, tp)));
        if let Err(e) = tp.set_owner(slot.cast_const().cast()) {
            // SAFETY: `slot` came from `Box::into_raw` above and was never shared.
            drop(unsafe { Box::from_raw(slot) });
            return Err(e);
        }
        // SAFETY: bound as the tracepoint's owner, the slot lives as long as the program.
        let slot: &'static EventSlot<P, CPUS> = unsafe { &*slot };
        let mut slots = self.with_events(|s| s.to_vec());
        slots.push(slot);
        self.events
            .replace(Published::Owned(Box::new(slots)), self.reclaim());
        Ok(())
    }

    /// Runs `f` on the registered slots inside a read-side section.
    pub(super) fn with_events<T>(&self, f: impl FnOnce(&[&'static EventSlot<P, CPUS>]) -> T) -> T {
        let _guard = self.reclaim().pin();
        // SAFETY: inside the guard; the slots themselves are never freed.
        let slots = unsafe { self.events.load() };
        f(slots.map_or(&[], |s| s.as_slice()))
    }

    /// The formats of the registered tracepoints (what `trace` prints their records with).
    pub(super) fn event_formats(&self) -> Vec<TraceEventFormat> {
        self.with_events(|s| s.iter().map(|s| *s.tp.format()).collect())
    }

    fn event_slot(&self, id: u16) -> Option<&'static EventSlot<P, CPUS>> {
        self.with_events(|s| s.iter().copied().find(|s| s.tp.format().id == id))
    }

    /// The tree changed the event's state. Enabling an event that is not one of this
    /// instance's tracepoints is `ENODEV` (nothing could record it). The top level connects
    /// the tracepoint exactly while it or one of its instances has the event enabled; an
    /// instance asks the top level to ([`TraceArray::sync_event_connection`]).
    pub(super) fn set_event_state(
        &'static self,
        event: &TraceEventFormat,
        state: EventState,
    ) -> Result<(), Errno> {
        let Some(slot) = self.event_slot(event.id) else {
            return match state.enabled {
                true => Err(Errno::ENODEV),
                false => Ok(()),
            };
        };
        if state.enabled {
            // Records need a buffer even while no tracer has asked for one.
            self.ensure_buffer(&mut self.control())?;
        }
        let was = slot.enabled.swap(state.enabled, Ordering::Relaxed);
        slot.soft_disabled
            .store(state.soft_disabled, Ordering::Relaxed);
        if self.kind == ArrayKind::Top {
            if let Err(e) = self.sync_event_connection(event.id) {
                slot.enabled.store(was, Ordering::Relaxed);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Connects the tracepoint of event `id` while the top level or an instance has it
    /// enabled, disconnects it otherwise (top level only).
    pub(super) fn sync_event_connection(&'static self, id: u16) -> Result<(), Errno> {
        let Some(slot) = self.event_slot(id) else {
            return Ok(());
        };
        let _guard = self.reclaim().pin();
        // SAFETY: inside the guard.
        let subs = unsafe { slot.instances.load() }.map_or(&[][..], |v| v.as_slice());
        let wanted = slot.enabled.load(Ordering::Relaxed) || subs.iter().any(|s| s.is_enabled());
        match (wanted, slot.tp.is_enabled()) {
            (true, false) => slot.tp.connect(event_probe::<P, CPUS>)?,
            (false, true) => slot.tp.disconnect(),
            _ => {}
        }
        Ok(())
    }

    /// `mkdir instances/<name>`: gives `sub` a slot of its own for each of the top level's
    /// tracepoints, reached through the top level's slot (the tracepoint has one probe and
    /// one owner: the top level's).
    pub(super) fn adopt_instance_events<Q: Platform>(
        &'static self,
        sub: &'static TraceArray<Q, CPUS>,
    ) {
        let _lock = self.control.lock();
        let tops = self.with_events(|s| s.to_vec());
        let mut mine = Vec::with_capacity(tops.len());
        for top in tops {
            let slot: &'static EventSlot<Q, CPUS> =
                Box::leak(Box::new(EventSlot::new(sub, top.tp)));
            mine.push(slot);
            let mut subs = top.instance_slots();
            subs.push(slot);
            top.instances
                .replace(Published::Owned(Box::new(subs)), self.reclaim());
        }
        sub.events
            .replace(Published::Owned(Box::new(mine)), sub.reclaim());
    }

    /// `rmdir instances/<name>`: takes `sub`'s slots out of the top level's, disconnects the
    /// tracepoints nobody wants any more, waits until no probe can be in `sub`'s slots, and
    /// frees them.
    pub(super) fn release_instance_events<Q: Platform>(
        &'static self,
        sub: &'static TraceArray<Q, CPUS>,
    ) {
        let _lock = self.control.lock();
        let owner: *const () = core::ptr::from_ref(sub).cast();
        for top in self.with_events(|s| s.to_vec()) {
            let subs: Vec<&'static dyn InstanceSlot> = top
                .instance_slots()
                .into_iter()
                .filter(|s| s.array() != owner)
                .collect();
            let new = match subs.is_empty() {
                true => Published::None,
                false => Published::Owned(Box::new(subs)),
            };
            top.instances.replace(new, self.reclaim());
            // Disconnecting can only fail when connecting: never here.
            let _ = self.sync_event_connection(top.tp.format().id);
        }
        // The top level's probes read the lists inside its read-side sections.
        self.reclaim().synchronize();
        let mine = sub.with_events(|s| s.to_vec());
        sub.events.replace(Published::None, sub.reclaim());
        sub.reclaim().synchronize();
        for slot in mine {
            // SAFETY: made by `Box::leak` in `adopt_instance_events`; no list holds it any
            // more and both grace periods are over, so no probe or reader can still see it.
            drop(unsafe { Box::from_raw(core::ptr::from_ref(slot).cast_mut()) });
        }
    }

    pub(super) fn set_event_filter(&self, event: &TraceEventFormat, filter: Option<&EventFilter>) {
        if let Some(slot) = self.event_slot(event.id) {
            let new = filter.map_or(Published::None, |f| Published::Owned(Box::new(f.clone())));
            slot.filter.replace(new, self.reclaim());
        }
    }

    pub(super) fn set_event_triggers(&self, event: &TraceEventFormat, triggers: &[Trigger]) {
        if let Some(slot) = self.event_slot(event.id) {
            let new = match triggers.is_empty() {
                true => Published::None,
                false => Published::Owned(Box::new(TriggerRunner::new(event, triggers))),
            };
            slot.runner.replace(new, self.reclaim());
            let _guard = self.reclaim().pin();
            // SAFETY: inside the guard; the old tables are only read here.
            let old = unsafe { slot.hists.load() }.map_or(&[][..], |h| h.as_slice());
            let hists = hist_tables(event, triggers, old);
            drop(_guard);
            let new = match hists.is_empty() {
                true => Published::None,
                false => Published::Owned(Box::new(hists)),
            };
            slot.hists.replace(new, self.reclaim());
        }
    }

    /// `hist:...:clear`: empties the table of the hist trigger that is `trigger`.
    pub(super) fn clear_event_hist(&self, event: &TraceEventFormat, trigger: &Trigger) {
        let Some(slot) = self.event_slot(event.id) else {
            return;
        };
        let _guard = self.reclaim().pin();
        // SAFETY: inside the guard.
        let hists = unsafe { slot.hists.load() };
        if let Some(t) = hists.and_then(|h| h.iter().find(|t| t.trigger().same_as(trigger))) {
            t.clear();
        }
    }

    /// The event's `hist` file: every hist trigger's table, as Linux prints them.
    pub(super) fn write_event_hist(
        &self,
        event: &TraceEventFormat,
        w: &mut dyn core::fmt::Write,
    ) -> core::fmt::Result {
        let Some(slot) = self.event_slot(event.id) else {
            return Ok(());
        };
        let names = HistNames {
            symbols: self.platform().symbols(),
            syscall: &|_| None,
        };
        let _guard = self.reclaim().pin();
        // SAFETY: inside the guard.
        let Some(hists) = (unsafe { slot.hists.load() }) else {
            return Ok(());
        };
        for (n, t) in hists.iter().enumerate() {
            t.write(w, n, &names)?;
        }
        Ok(())
    }

    pub(super) fn event_soft_disabled(&self, event: &TraceEventFormat) -> Option<bool> {
        let slot = self.event_slot(event.id)?;
        Some(slot.soft_disabled.load(Ordering::Relaxed))
    }

    pub(super) fn event_trigger_counts(&self, event: &TraceEventFormat) -> Option<Vec<i64>> {
        let slot = self.event_slot(event.id)?;
        let _guard = self.reclaim().pin();
        // SAFETY: inside the guard.
        let runner = unsafe { slot.runner.load() };
        Some(runner.map(TriggerRunner::counts).unwrap_or_default())
    }
}

/// The probe every tracepoint of an instance is connected to.
fn event_probe<P: Platform, const CPUS: usize>(tp: &Tracepoint, rec: &mut [u8]) {
    // SAFETY: `register_tracepoint` binds the owner to a `'static EventSlot<P, CPUS>` before
    // `set_event_state` connects this very monomorphization, and an owner is never rebound.
    let slot = unsafe { &*tp.owner().cast::<EventSlot<P, CPUS>>() };
    slot.fire(rec);
}

/// An instance's slot as the top level's slot sees it (type-erased: an instance's platform
/// is another type).
pub(super) trait InstanceSlot: Sync {
    /// Whether the instance's tree has the event enabled.
    fn is_enabled(&self) -> bool;
    /// Records `rec` into the instance, as its own tree says (filter, triggers...).
    fn fire(&self, rec: &mut [u8]);
    /// The instance the slot belongs to.
    fn array(&self) -> *const ();
}

impl<P: Platform, const CPUS: usize> InstanceSlot for EventSlot<P, CPUS> {
    fn is_enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }
    fn fire(&self, rec: &mut [u8]) {
        self.fire_here(rec)
    }
    fn array(&self) -> *const () {
        core::ptr::from_ref(self.array).cast()
    }
}

impl<P: Platform, const CPUS: usize> EventSlot<P, CPUS> {
    fn new(array: &'static TraceArray<P, CPUS>, tp: &'static Tracepoint) -> Self {
        EventSlot {
            array,
            tp,
            enabled: AtomicBool::new(false),
            soft_disabled: AtomicBool::new(false),
            instances: RcuCell::empty(),
            filter: RcuCell::empty(),
            runner: RcuCell::empty(),
            hists: RcuCell::empty(),
        }
    }

    /// The instances' slots (a copy, for a replacement list).
    fn instance_slots(&self) -> Vec<&'static dyn InstanceSlot> {
        let _guard = self.array.reclaim().pin();
        // SAFETY: inside the guard; the slots themselves outlive the lists holding them.
        unsafe { self.instances.load() }.map_or_else(Vec::new, |v| v.to_vec())
    }

    /// The probe's work: this instance's record if it has the event enabled, then each
    /// instance's that has.
    fn fire(&self, rec: &mut [u8]) {
        if self.enabled.load(Ordering::Relaxed) {
            self.fire_here(rec);
        }
        let _guard = self.array.reclaim().pin();
        // SAFETY: inside the guard, for the whole loop.
        if let Some(subs) = unsafe { self.instances.load() } {
            for s in subs.iter().filter(|s| s.is_enabled()) {
                s.fire(rec);
            }
        }
    }

    /// `trace_event_raw_event_<call>`: triggers, soft-disable, filter, then the record.
    fn fire_here(&self, rec: &mut [u8]) {
        let a = self.array;
        if rec.len() < 8 {
            return;
        }
        let task = a.dispatcher.platform();
        let ctx = task.trace_ctx();
        let pid = task.current_pid();
        rec[2] = ctx.flags().bits();
        rec[3] = ctx.preempt_count();
        rec[4..8].copy_from_slice(&pid.to_ne_bytes());
        let cpu = a.cpu();
        let _guard = a.reclaim().pin();
        // SAFETY: inside the guard, for its whole use.
        let (runner, filter) = unsafe { (self.runner.load(), self.filter.load()) };
        let actions = Actions(a);
        if let Some(r) = runner {
            r.before_record(&actions);
        }
        let cx = RecordCtx {
            cpu: cpu as u32,
            comm: a.platform().comm(pid).unwrap_or("").as_bytes(),
        };
        // The kernel's `trace_event_ignore_this_pid`: the triggers that need no record have
        // run; the events of a task `set_event_pid` leaves out are not recorded, and nothing
        // that needs their record runs.
        // SAFETY: inside the guard pinned above.
        if !unsafe { a.event_pids.admits_pinned(pid as u32) } {
            return;
        }
        let record = !self.soft_disabled.load(Ordering::Relaxed)
            && a.tracing_on.load(Ordering::Relaxed)
            && filter.is_none_or(|f| f.matches(rec, &cx));
        if record {
            a.sink(cpu)
                .write_entry(rec.len(), &mut |b| b.copy_from_slice(rec));
        }
        if let Some(r) = runner {
            r.after_record(rec, &cx, &actions);
        }
        // SAFETY: inside the guard.
        if let Some(hists) = unsafe { self.hists.load() } {
            hists.iter().for_each(|t| t.update(rec, &cx));
        }
    }
}

/// The tables of `triggers`' hist triggers that compile against `event`; a trigger already
/// in `old` keeps its table (adding or removing another trigger clears nothing).
fn hist_tables(
    event: &TraceEventFormat,
    triggers: &[Trigger],
    old: &[HistTable],
) -> Vec<HistTable> {
    triggers
        .iter()
        .filter_map(|t| HistTable::compile(t, event, old).ok())
        .collect()
}

/// What the triggers of an instance's events act on.
struct Actions<P: Platform, const CPUS: usize>(&'static TraceArray<P, CPUS>);

impl<P: Platform, const CPUS: usize> TriggerActions for Actions<P, CPUS> {
    fn tracing_is_on(&self) -> bool {
        self.0.tracing_on.load(Ordering::Relaxed)
    }
    fn set_tracing_on(&self, on: bool) {
        self.0.set_tracing_on(on);
    }
    fn snapshot(&self) {
        self.0.trigger_snapshot();
    }
    fn event_soft_disabled(&self, id: u16) -> Option<bool> {
        let slot = self.0.event_slot(id)?;
        Some(slot.soft_disabled.load(Ordering::Relaxed))
    }
    fn set_event_soft_disabled(&self, id: u16, disabled: bool) {
        if let Some(slot) = self.0.event_slot(id) {
            slot.soft_disabled.store(disabled, Ordering::Relaxed);
        }
    }
}
