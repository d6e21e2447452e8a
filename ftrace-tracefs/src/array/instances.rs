//! `instances/`: `mkdir instances/foo` makes a [`TraceArray`] of its own (its buffer, tracer,
//! options, filter files, markers, pid filters), as the kernel's `trace_array_create` does.
//!
//! The trampolines call the top level only, so an instance that traces is reached through a
//! forwarding ops in the top level's dispatcher ([`InstanceBackend`] keeps it in step): it is
//! registered while the instance has ops of its own, filtered by the instance's
//! `set_ftrace_filter` / `set_ftrace_notrace` (admitting all while the instance has function
//! commands), and it calls the instance's `on_entry`, whose own dispatcher does the rest. Its
//! records count into the top level's call sites like any ops, so the sites an instance wants
//! are patched. An instance offers `nop` and `function`: the return trampoline serves the top
//! level's shadow stacks, so `function_graph` is the top level's only.
//!
//! Invariant: the forwarding ops is unregistered (and its grace period over) before the
//! instance is freed, so the top level's dispatcher never calls into a freed instance.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::fmt;

use ftrace_core::Errno;
use ftrace_core::event::TraceCtx;
use ftrace_core::filter::FtraceHash;
use ftrace_core::ops::{FtraceOps, FtraceRegs, OpsFlags};
use ftrace_core::platform::ExecContext;
use ftrace_core::reclaim::Published;
use ftrace_core::symbols::SymbolTable;
use ftrace_patch::FtraceBug;

use super::{ArrayBackend, ArrayKind, NoCallSites, Platform, TraceArray};
use crate::backend::{
    EventState, FilterEdit, FilterFile, Param, Reader, SnapshotCommand, TraceBackend, TracerOption,
};
use crate::event_filter::EventFilter;
use crate::triggers::Trigger;
use ftrace_core::format::TraceEventFormat;

/// An instance's platform: the top level's, with the instance's buffer size.
pub struct InstancePlatform<P: 'static> {
    top: &'static P,
    trace_buf_size: u64,
}

// SAFETY: every answer is the top level's platform's, which keeps the contract.
unsafe impl<P: Platform> Platform for InstancePlatform<P> {
    type Pages = P::Pages;
    type Text = NoCallSites;
    fn now_ns(&self) -> u64 {
        self.top.now_ns()
    }
    fn current_cpu(&self) -> u32 {
        self.top.current_cpu()
    }
    fn current_pid(&self) -> i32 {
        self.top.current_pid()
    }
    fn symbols(&self) -> &'static (dyn SymbolTable + Sync) {
        self.top.symbols()
    }
    fn return_handler(&self) -> usize {
        self.top.return_handler()
    }
    fn possible_cpus(&self) -> u32 {
        self.top.possible_cpus()
    }
    fn trace_buf_size(&self) -> u64 {
        self.trace_buf_size
    }
    fn exec_context(&self) -> ExecContext {
        self.top.exec_context()
    }
    fn trace_ctx(&self) -> TraceCtx {
        self.top.trace_ctx()
    }
    fn marker_ip(&self) -> u64 {
        self.top.marker_ip()
    }
    fn ftrace_bug(&self, bug: &FtraceBug) {
        self.top.ftrace_bug(bug)
    }
    fn comm(&self, pid: i32) -> Option<&str> {
        self.top.comm(pid)
    }
}

/// One instance of the top level `TraceArray<P, CPUS>`.
type Sub<P, const CPUS: usize> = TraceArray<InstancePlatform<P>, CPUS>;

/// The forwarding ops' callback: the traced call, handed to the instance.
fn forward_op<P: Platform, const CPUS: usize>(
    ip: u64,
    parent_ip: u64,
    op: &FtraceOps,
    _regs: Option<&mut FtraceRegs>,
) {
    // SAFETY: the top level registered this ops with `private` = the instance, which lives
    // until the ops is unregistered (module invariant).
    let sub = unsafe { &*op.private().cast::<Sub<P, CPUS>>() };
    // An instance has no function_graph: nothing writes the return slot.
    let mut slot = parent_ip as usize;
    sub.on_entry(ip as usize, parent_ip as usize, &mut slot);
}

impl<P: Platform, const CPUS: usize> TraceArray<P, CPUS> {
    /// `mkdir instances/<name>`: a new instance with `bytes_per_cpu` buffers.
    pub(super) fn create_instance(
        &'static self,
        bytes_per_cpu: u64,
    ) -> Result<InstanceBackend<P, CPUS>, Errno> {
        if self.kind != ArrayKind::Top {
            return Err(Errno::ENODEV);
        }
        let platform = InstancePlatform {
            top: self.platform(),
            trace_buf_size: bytes_per_cpu,
        };
        let sub = Box::new(Sub::<P, CPUS>::with_kind(platform, ArrayKind::Instance));
        let sub: &'static Sub<P, CPUS> = Box::leak(sub);
        let backend = InstanceBackend {
            top: self,
            sub: ArrayBackend(sub),
        };
        // On error the backend's drop frees the instance.
        sub.build_control()?;
        self.adopt_instance_events(sub);
        Ok(backend)
    }

    /// Brings the forwarding ops of `sub` in step with its ops and filter files (and the call
    /// sites with it); `gone`: the instance is being removed.
    fn sync_instance(&'static self, sub: &'static Sub<P, CPUS>, gone: bool) -> Result<(), Errno> {
        let wanted = (!gone).then(|| {
            let c = sub.control();
            let has_probes = c.probe_ops.is_some();
            let hash = |f| match has_probes {
                // Function commands need their functions too: the instance filters.
                true => FtraceHash::from_ips(core::iter::empty()),
                false => c.filters.set(f).to_hash(),
            };
            (c.ops.is_some() || has_probes)
                .then(|| (hash(FilterFile::Filter), hash(FilterFile::Notrace)))
        });
        let private: *const () = core::ptr::from_ref(sub).cast();
        let mut c = self.control();
        self.update_sites(&mut c, |c| {
            let at = c.instances.iter().position(|o| o.private() == private);
            match (wanted.flatten(), at) {
                (None, None) => {}
                (None, Some(i)) => {
                    let op = c.instances.remove(i);
                    // Waits for the dispatcher's readers: no call is left in the instance.
                    self.dispatcher.unregister(&op)?;
                }
                (Some((filter, notrace)), at) => {
                    let fresh = at.is_none();
                    let op: &FtraceOps = match at {
                        Some(i) => &c.instances[i],
                        None => {
                            let op = Box::new(FtraceOps::with_private(
                                forward_op::<P, CPUS>,
                                OpsFlags::empty(),
                                private,
                                None,
                            ));
                            c.instances.push(op);
                            c.instances.last().expect("just pushed")
                        }
                    };
                    let some = |h: FtraceHash| {
                        if h.is_empty() {
                            Published::None
                        } else {
                            Published::Owned(Box::new(h))
                        }
                    };
                    self.dispatcher.set_filter(op, some(filter));
                    self.dispatcher.set_notrace(op, some(notrace));
                    if fresh {
                        // SAFETY: the ops lives in `c.instances` until `unregister` returned.
                        if let Err(e) = unsafe { self.dispatcher.register_dynamic(op) } {
                            c.instances.pop();
                            return Err(e);
                        }
                    }
                }
            }
            Ok(())
        })
    }
}

impl<P: Platform, const CPUS: usize> TraceArray<P, CPUS> {
    /// Unregisters the instance's own ops from its dispatcher (before it is freed).
    fn unregister_all(&'static self) -> Result<(), Errno> {
        let mut c = self.control.lock();
        let Some(c) = c.as_mut() else {
            return Ok(()); // never built: nothing registered
        };
        for op in [c.ops.take(), c.probe_ops.take()].into_iter().flatten() {
            self.dispatcher.unregister(&op)?;
        }
        Ok(())
    }
}

/// The tree's backend of one instance: the instance's own [`ArrayBackend`], and after each
/// change of its ops or filters the top level's forwarding ops brought in step. Dropping it
/// (`rmdir`) unregisters the forwarding ops and frees the instance.
pub(super) struct InstanceBackend<P: Platform, const CPUS: usize> {
    top: &'static TraceArray<P, CPUS>,
    sub: ArrayBackend<InstancePlatform<P>, CPUS>,
}

impl<P: Platform, const CPUS: usize> InstanceBackend<P, CPUS> {
    fn sync(&self) -> Result<(), Errno> {
        self.top.sync_instance(self.sub.0, false)
    }
}

impl<P: Platform, const CPUS: usize> Drop for InstanceBackend<P, CPUS> {
    fn drop(&mut self) {
        let sub = self.sub.0;
        self.top.release_instance_events(sub);
        // Nothing to report to: `rmdir` has already succeeded. A failed unregister would
        // leave the ops calling the instance, so it is then kept (leaked) rather than freed.
        if self.top.sync_instance(sub, true).is_ok() && sub.unregister_all().is_ok() {
            // SAFETY: made by `Box::leak` in `create_instance`; the forwarding ops is gone
            // and its readers are done, and the tree holds no reader of the instance (`rmdir`
            // is `EBUSY` while any of its files is open), so nothing refers to it any more.
            drop(unsafe { Box::from_raw(core::ptr::from_ref(sub).cast_mut()) });
        }
    }
}

/// A filter file of an instance: at release, the instance publishes and the forwarding ops
/// follows.
struct InstanceFilterEdit<P: Platform, const CPUS: usize> {
    edit: Box<dyn FilterEdit>,
    top: &'static TraceArray<P, CPUS>,
    sub: &'static Sub<P, CPUS>,
}

impl<P: Platform, const CPUS: usize> FilterEdit for InstanceFilterEdit<P, CPUS> {
    fn write(&mut self, data: &[u8]) -> Result<usize, Errno> {
        self.edit.write(data)
    }
    fn release(self: Box<Self>) -> Result<(), Errno> {
        let r = self.edit.release();
        r.and(self.top.sync_instance(self.sub, false))
    }
}

impl<P: Platform, const CPUS: usize> TraceBackend for InstanceBackend<P, CPUS> {
    fn tracers(&self) -> Vec<&'static str> {
        self.sub.tracers()
    }
    fn current_tracer(&self) -> &'static str {
        self.sub.current_tracer()
    }
    fn set_tracer(&mut self, name: &str) -> Result<(), Errno> {
        let r = self.sub.set_tracer(name);
        r.and(self.sync())
    }
    fn tracer_options(&self) -> Vec<TracerOption> {
        self.sub.tracer_options()
    }
    fn set_tracer_option(&mut self, name: &str, on: bool) -> Result<(), Errno> {
        self.sub.set_tracer_option(name, on)
    }
    fn set_param(&mut self, param: Param<'_>) -> Result<(), Errno> {
        self.sub.set_param(param)
    }
    fn tracing_on(&self) -> Option<bool> {
        self.sub.tracing_on()
    }
    fn resize(&mut self, cpu: Option<u32>, bytes: u64) -> Result<(), Errno> {
        self.sub.resize(cpu, bytes)
    }
    fn buffer_bytes(&self, cpu: u32) -> u64 {
        self.sub.buffer_bytes(cpu)
    }
    fn subbuf_size(&self) -> u32 {
        self.sub.subbuf_size()
    }
    fn set_subbuf_size(&mut self, bytes: u32) -> Result<(), Errno> {
        self.sub.set_subbuf_size(bytes)
    }
    fn clear(&mut self, cpu: Option<u32>) {
        self.sub.clear(cpu)
    }
    fn write_stats(&self, cpu: u32, w: &mut dyn fmt::Write) -> fmt::Result {
        self.sub.write_stats(cpu, w)
    }
    fn open_trace(&mut self, cpu: Option<u32>) -> Box<dyn Reader> {
        self.sub.open_trace(cpu)
    }
    fn has_snapshot(&self) -> bool {
        self.sub.has_snapshot()
    }
    fn snapshot(&mut self, cpu: Option<u32>, cmd: SnapshotCommand) -> Result<(), Errno> {
        self.sub.snapshot(cpu, cmd)
    }
    fn open_snapshot(&mut self, cpu: Option<u32>) -> Box<dyn Reader> {
        self.sub.open_snapshot(cpu)
    }
    fn open_pipe(&mut self, cpu: Option<u32>) -> Box<dyn Reader> {
        self.sub.open_pipe(cpu)
    }
    fn open_pipe_raw(&mut self, cpu: u32) -> Box<dyn Reader> {
        self.sub.open_pipe_raw(cpu)
    }
    fn write_marker(&mut self, text: &[u8]) -> Result<(), Errno> {
        self.sub.write_marker(text)
    }
    fn write_marker_raw(&mut self, id: u32, data: &[u8]) -> Result<(), Errno> {
        self.sub.write_marker_raw(id, data)
    }
    fn open_filter(
        &mut self,
        which: FilterFile,
        mode: crate::WriteMode,
    ) -> Result<Box<dyn FilterEdit>, Errno> {
        let edit = self.sub.open_filter(which, mode)?;
        Ok(Box::new(InstanceFilterEdit {
            edit,
            top: self.top,
            sub: self.sub.0,
        }))
    }
    fn write_filter(&self, which: FilterFile, w: &mut dyn fmt::Write) -> fmt::Result {
        self.sub.write_filter(which, w)
    }
    fn write_saved_cmdlines(&self, w: &mut dyn fmt::Write) -> fmt::Result {
        self.sub.write_saved_cmdlines(w)
    }
    fn write_saved_tgids(&self, w: &mut dyn fmt::Write) -> fmt::Result {
        self.sub.write_saved_tgids(w)
    }
    /// The instance's own slot takes the state; the top level connects the tracepoint while
    /// anyone has it enabled (a refused connection leaves the instance's event off).
    fn set_event_state(
        &mut self,
        event: &TraceEventFormat,
        state: EventState,
    ) -> Result<(), Errno> {
        self.sub.set_event_state(event, state)?;
        let r = self.top.sync_event_connection(event.id);
        if r.is_err() {
            let off = EventState {
                enabled: false,
                soft_disabled: false,
                triggers: false,
            };
            let _ = self.sub.set_event_state(event, off);
        }
        r
    }
    fn set_event_filter(&mut self, event: &TraceEventFormat, filter: Option<&EventFilter>) {
        self.sub.set_event_filter(event, filter)
    }
    fn set_event_triggers(
        &mut self,
        event: &TraceEventFormat,
        triggers: &[Trigger],
    ) -> Result<(), Errno> {
        self.sub.set_event_triggers(event, triggers)
    }
    fn event_soft_disabled(&self, event: &TraceEventFormat) -> Option<bool> {
        self.sub.event_soft_disabled(event)
    }
    fn event_trigger_counts(&self, event: &TraceEventFormat) -> Option<Vec<i64>> {
        self.sub.event_trigger_counts(event)
    }
    fn write_event_hist(&self, event: &TraceEventFormat, w: &mut dyn fmt::Write) -> fmt::Result {
        self.sub.write_event_hist(event, w)
    }
    fn clear_event_hist(&mut self, event: &TraceEventFormat, trigger: &Trigger) {
        self.sub.clear_event_hist(event, trigger)
    }
}
