//! The instance as the tree's backend: [`ArrayBackend`] ([`TraceBackend`]) and [`ArrayHost`]
//! ([`Host`]).

use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use core::sync::atomic::Ordering;

use ftrace_core::Errno;
use ftrace_core::pid::PidList;
use ftrace_core::platform::Reclaim;
use ftrace_core::reclaim::Published;
use ftrace_core::symbols::SymbolTable;
use ftrace_tracers::TraceOptions;
use ftrace_tracers::function::{trace_marker_raw_write, trace_marker_write};

use super::commands::StaticSymbols;
use super::profile::ArrayRecords;
use super::sites::ArraySites;
use super::{Platform, TRACE_CLOCKS, TraceArray, TracerKind, render};
use crate::backend::{
    EventState, FilterEdit, FilterFile, FunctionRecords, Host, Param, PidFile, Reader,
    SnapshotCommand, TextReader, TraceBackend, TracerOption, ring_buffer_pages,
};
use crate::event_filter::EventFilter;
use crate::filters::{FilterState, FilterStore, FilterWriter};
use crate::fs::Tracefs;
use crate::records::PatchRecords;
use crate::triggers::{Trigger, TriggerKind};
use alloc::sync::Arc;
use ftrace_core::format::TraceEventFormat;

/// The tree's handle on a `static` [`TraceArray`].
pub struct ArrayBackend<P: Platform, const CPUS: usize>(pub(super) &'static TraceArray<P, CPUS>);

impl<P: Platform, const CPUS: usize> Clone for ArrayBackend<P, CPUS> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<P: Platform, const CPUS: usize> Copy for ArrayBackend<P, CPUS> {}

/// The tree's [`Host`] for a `static` [`TraceArray`]: CPUs, clocks and symbols come from its
/// platform, the call-site files from its records; `mkdir instances/x` makes an instance of
/// its own (see [`TraceArray`]'s module docs).
pub struct ArrayHost<P: Platform, const CPUS: usize> {
    array: &'static TraceArray<P, CPUS>,
    /// The call-site files and the profiler (`None`: the platform has no call-site records).
    records: Option<ArrayRecords<P, CPUS>>,
}

impl<P: Platform, const CPUS: usize> TraceArray<P, CPUS> {
    /// The tracefs tree served by this instance.
    pub fn tracefs(&'static self) -> Result<Tracefs<ArrayHost<P, CPUS>>, Errno> {
        self.build_control()?;
        let formats = self.event_formats();
        let records = self.control().sites.is_some().then(|| {
            let symbols = Arc::new(StaticSymbols(self.platform().symbols()));
            ArrayRecords {
                array: self,
                records: PatchRecords::new(ArraySites(self), symbols),
            }
        });
        let mut fs = Tracefs::new(ArrayHost {
            array: self,
            records,
        })?;
        for f in formats {
            fs.register_event(f)?;
        }
        Ok(fs)
    }

    /// The events lost so far on all CPUs (overwritten or refused by a full buffer).
    pub fn lost_events(&'static self) -> u64 {
        let _guard = self.reclaim().pin();
        // SAFETY: inside the guard.
        unsafe { self.buffer.load() }.map_or(0, |rb| {
            let (entries, written) = rb.entries_and_written();
            written - entries
        })
    }
}

impl<P: Platform, const CPUS: usize> Host for ArrayHost<P, CPUS> {
    fn nr_cpus(&self) -> u32 {
        self.array.nr_cpus() as u32
    }
    fn local_clock_ns(&self) -> u64 {
        self.array.platform().now_ns()
    }
    fn trace_clocks(&self) -> &[&'static str] {
        TRACE_CLOCKS
    }
    fn trace_buf_size(&self) -> u64 {
        self.array.platform().trace_buf_size()
    }
    fn create_backend(
        &mut self,
        instance: Option<&str>,
        bytes_per_cpu: u64,
    ) -> Result<Box<dyn TraceBackend>, Errno> {
        if instance.is_some() {
            return Ok(Box::new(self.array.create_instance(bytes_per_cpu)?));
        }
        self.array.build_control()?;
        Ok(Box::new(ArrayBackend(self.array)))
    }
    fn symbols(&self) -> Option<&dyn SymbolTable> {
        Some(self.array.platform().symbols())
    }
    fn functions(&self) -> Option<&dyn FunctionRecords> {
        self.records.as_ref().map(|r| r as &dyn FunctionRecords)
    }
}

impl<P: Platform, const CPUS: usize> FilterStore for ArrayBackend<P, CPUS> {
    fn with_state(&self, f: &mut dyn FnMut(&mut FilterState)) {
        f(&mut self.ctl().filters)
    }
    fn publish(&self, which: FilterFile) -> Result<(), Errno> {
        let a = self.0;
        a.update_sites(&mut self.ctl(), |c| {
            if let Some(op) = c.ops.as_deref() {
                a.publish_filters(c, op);
            }
            if which == FilterFile::Filter {
                a.publish_probes(c)?;
            }
            Ok(())
        })
    }
}

impl<P: Platform, const CPUS: usize> ArrayBackend<P, CPUS> {
    fn ctl(&self) -> super::Ctl {
        self.0.control()
    }

    fn tracer_option(&self, name: &str) -> Option<(TracerKind, u32)> {
        TracerKind::ALL.into_iter().find_map(|k| {
            let opts = self.0.tracer_of(k).options();
            opts.iter().find(|o| o.name == name).map(|o| (k, o.bit))
        })
    }

    fn marker(
        &self,
        write: impl FnOnce(TraceOptions, &dyn WriteTo) -> Result<usize, Errno>,
    ) -> Result<(), Errno> {
        let a = self.0;
        a.ensure_buffer(&mut self.ctl())?;
        if !a.tracing_on.load(Ordering::Relaxed) {
            // The ring buffer refuses the entry: Linux answers EBADF.
            return Err(Errno::EBADF);
        }
        let _guard = a.reclaim().pin();
        let options = TraceOptions::from_bits_retain(a.options.load(Ordering::Relaxed));
        let sink = a.sink(a.cpu());
        write(
            options,
            &Target {
                task: a.dispatcher.platform(),
                sink: &sink,
            },
        )
        .map(drop)
    }
}

/// A marker's task and sink, passed to the marker writers.
trait WriteTo {
    fn text(&self, text: &[u8], ip: u64, options: TraceOptions) -> Result<usize, Errno>;
    fn raw(&self, data: &[u8], options: TraceOptions) -> Result<usize, Errno>;
}

struct Target<'a, T, S> {
    task: &'a T,
    sink: &'a S,
}

impl<T, S> WriteTo for Target<'_, T, S>
where
    T: ftrace_core::platform::TaskContext,
    S: ftrace_tracers::tracer::EntrySink,
{
    fn text(&self, text: &[u8], ip: u64, options: TraceOptions) -> Result<usize, Errno> {
        trace_marker_write(text, ip, options, self.task, self.sink)
    }
    fn raw(&self, data: &[u8], options: TraceOptions) -> Result<usize, Errno> {
        trace_marker_raw_write(data, options, self.task, self.sink)
    }
}

impl<P: Platform, const CPUS: usize> TraceBackend for ArrayBackend<P, CPUS> {
    fn tracers(&self) -> Vec<&'static str> {
        let mut avail = String::new();
        let _ = self.ctl().registry.write_available(&mut avail);
        avail
            .split_whitespace()
            .map(|n| self.0.tracer_of(TraceArray::<P, CPUS>::kind(n)).name())
            .collect()
    }
    fn current_tracer(&self) -> &'static str {
        self.ctl().registry.current().name()
    }
    fn set_tracer(&mut self, name: &str) -> Result<(), Errno> {
        let mut c = self.ctl();
        self.0.ensure_buffer(&mut c)?;
        self.0.set_tracer(&mut c, name)
    }
    fn tracer_options(&self) -> Vec<TracerOption> {
        let c = self.ctl();
        let mut v = Vec::new();
        for k in TracerKind::ALL {
            let t = self.0.tracer_of(k);
            for o in t.options() {
                v.push(TracerOption {
                    name: o.name,
                    tracer: t.name(),
                    value: c.tracer_flags[k as usize] & o.bit != 0,
                });
            }
        }
        v
    }
    fn set_tracer_option(&mut self, name: &str, on: bool) -> Result<(), Errno> {
        let mut c = self.ctl();
        let (k, bit) = self.tracer_option(name).ok_or(Errno::EINVAL)?;
        // The function tracer's options change what it records (stack traces, repeats),
        // which the instance does not do: refuse rather than ignore.
        let flags = c.tracer_flags[k as usize];
        if k == TracerKind::Function && on != (flags & bit != 0) {
            return Err(Errno::EINVAL);
        }
        self.0.tracer_of(k).set_flag(flags, bit, on)?;
        c.tracer_flags[k as usize] = if on { flags | bit } else { flags & !bit };
        Ok(())
    }
    fn set_param(&mut self, param: Param<'_>) -> Result<(), Errno> {
        let a = self.0;
        let mut c = self.ctl();
        match param {
            Param::TracingOn(on) => a.set_tracing_on(on),
            Param::Flags(f) => {
                a.options.store(f.bits(), Ordering::Relaxed);
                // `overwrite` is the ring's mode; the other flags are read where they act
                // (the markers, the output).
                let mode = a.buffer_mode();
                a.with_buffer(|rb| rb.set_mode(mode));
            }
            Param::BufferPercent(_) | Param::MaxLatency(_) => {}
            Param::SavedCmdlines(n) => {
                // A new cache, as `saved_cmdlines_size` allocates one.
                c.cmdlines.clear();
                c.cmdlines_max = n as usize;
            }
            Param::CpuMask(words) => {
                let mask = words.first().copied().unwrap_or(0);
                c.cpumask = mask;
                a.set_cpumask(mask);
            }
            Param::Clock(name) => {
                let idx = TRACE_CLOCKS
                    .iter()
                    .position(|c| *c == name)
                    .ok_or(Errno::EINVAL)?;
                if !a.buffer.is_empty() {
                    a.rebuild_buffer(&mut c, None)?;
                }
                // The snapshot's timestamps are of the old clock (`tracing_set_clock` resets
                // the max buffer too).
                a.clear_snapshot(None);
                a.clock.store(idx as u8, Ordering::Relaxed);
            }
            Param::Pids(which, pids) => {
                let list = if pids.is_empty() {
                    Published::None
                } else {
                    Published::Owned(Box::new(PidList::from_pids(pids.iter().copied())))
                };
                match which {
                    PidFile::Ftrace => a.pids.set_pids(list, a.reclaim()),
                    PidFile::FtraceNotrace => a.pids.set_no_pids(list, a.reclaim()),
                    PidFile::Event => a.event_pids.set_pids(list, a.reclaim()),
                    PidFile::EventNotrace => a.event_pids.set_no_pids(list, a.reclaim()),
                }
            }
            Param::TracingThresh(ns) => a.graph.set_thresh_ns(ns),
            Param::MaxGraphDepth(d) => a.graph.set_max_depth(d),
            Param::ProfileEnabled(on) => a.set_profiling(&mut c, on)?,
        }
        Ok(())
    }
    fn tracing_on(&self) -> Option<bool> {
        Some(self.0.tracing_on.load(Ordering::Relaxed))
    }
    fn resize(&mut self, cpu: Option<u32>, bytes: u64) -> Result<(), Errno> {
        let a = self.0;
        let mut c = self.ctl();
        let n = ring_buffer_pages(bytes, c.subbuf as u64 - 16) as usize;
        let mut pages = c.pages.clone();
        match cpu {
            Some(cpu) => *pages.get_mut(cpu as usize).ok_or(Errno::EINVAL)? = n,
            None => pages.iter_mut().for_each(|p| *p = n),
        }
        let subbuf = c.subbuf;
        a.rebuild_buffer(&mut c, Some((pages, subbuf)))
    }
    fn buffer_bytes(&self, cpu: u32) -> u64 {
        let c = self.ctl();
        let pages = c.pages.get(cpu as usize).copied().unwrap_or(0);
        (pages * (c.subbuf - 16)) as u64
    }
    fn subbuf_size(&self) -> u32 {
        self.ctl().subbuf as u32
    }
    fn set_subbuf_size(&mut self, bytes: u32) -> Result<(), Errno> {
        let a = self.0;
        let mut c = self.ctl();
        let old = c.subbuf as u64 - 16;
        let pages = c
            .pages
            .iter()
            .map(|&p| ring_buffer_pages(p as u64 * old, u64::from(bytes) - 16) as usize)
            .collect();
        a.rebuild_buffer(&mut c, Some((pages, bytes as usize)))
    }
    fn clear(&mut self, cpu: Option<u32>) {
        let a = self.0;
        let mut c = self.ctl();
        if cpu.is_none() && a.rebuild_buffer(&mut c, None).is_ok() {
            return;
        }
        // One CPU (or no memory for a new ring): consume what the buffer holds.
        a.with_buffer(|rb| {
            for (i, b) in rb.cpus().iter().enumerate() {
                if cpu.is_none_or(|c| c as usize == i) {
                    let mut r = b.consumer();
                    while r.next().is_some() {}
                }
            }
        });
    }
    fn write_stats(&self, cpu: u32, w: &mut dyn fmt::Write) -> fmt::Result {
        let a = self.0;
        let now = a.now();
        let mut s = String::new();
        a.with_buffer(|rb| {
            rb.cpu(cpu as usize)
                .map(|b| b.stats(now).write_to(&mut s, a.clock_unit()))
        })
        .flatten()
        .unwrap_or(Ok(()))?;
        w.write_str(&s)
    }
    fn open_trace(&mut self, cpu: Option<u32>) -> Box<dyn Reader> {
        let mut c = self.ctl();
        render::save_cmdlines(self.0, &mut c);
        Box::new(TextReader::new(render::trace_text(self.0, &c, cpu)))
    }
    fn has_snapshot(&self) -> bool {
        true
    }
    fn snapshot(&mut self, cpu: Option<u32>, cmd: SnapshotCommand) -> Result<(), Errno> {
        let mut c = self.ctl();
        self.0.snapshot_command(&mut c, cpu, cmd)
    }
    fn open_snapshot(&mut self, cpu: Option<u32>) -> Box<dyn Reader> {
        let c = self.ctl();
        Box::new(TextReader::new(self.0.snapshot_text(&c, cpu)))
    }
    fn open_pipe(&mut self, cpu: Option<u32>) -> Box<dyn Reader> {
        Box::new(render::PipeReader::new(self.0, cpu))
    }
    fn open_pipe_raw(&mut self, cpu: u32) -> Box<dyn Reader> {
        Box::new(render::RawReader::new(self.0, cpu as usize))
    }
    fn write_marker(&mut self, text: &[u8]) -> Result<(), Errno> {
        let ip = self.0.platform().marker_ip();
        self.marker(|o, t| t.text(text, ip, o))
    }
    fn write_marker_raw(&mut self, id: u32, data: &[u8]) -> Result<(), Errno> {
        let mut all = id.to_ne_bytes().to_vec();
        all.extend_from_slice(data);
        self.marker(|o, t| t.raw(&all, o))
    }
    fn open_filter(
        &mut self,
        which: FilterFile,
        mode: crate::WriteMode,
    ) -> Result<Box<dyn FilterEdit>, Errno> {
        Ok(FilterWriter::open(*self, which, mode))
    }
    fn write_filter(&self, which: FilterFile, w: &mut dyn fmt::Write) -> fmt::Result {
        self.ctl().filters.write_filter(which, w)
    }
    fn write_saved_cmdlines(&self, w: &mut dyn fmt::Write) -> fmt::Result {
        let mut c = self.ctl();
        render::save_cmdlines(self.0, &mut c);
        for &pid in &c.cmdlines {
            if let Some(comm) = self.0.platform().comm(pid) {
                writeln!(w, "{pid} {comm}")?;
            }
        }
        Ok(())
    }
    fn write_saved_tgids(&self, _w: &mut dyn fmt::Write) -> fmt::Result {
        Ok(())
    }
    fn set_event_state(
        &mut self,
        event: &TraceEventFormat,
        state: EventState,
    ) -> Result<(), Errno> {
        self.0.set_event_state(event, state)
    }
    fn set_event_filter(&mut self, event: &TraceEventFormat, filter: Option<&EventFilter>) {
        self.0.set_event_filter(event, filter)
    }
    fn set_event_triggers(
        &mut self,
        event: &TraceEventFormat,
        triggers: &[Trigger],
    ) -> Result<(), Errno> {
        // `register_snapshot_trigger` → `tracing_arm_snapshot`: the snapshot buffer exists
        // before the trigger can fire (`ENOMEM` refuses the trigger).
        if triggers
            .iter()
            .any(|t| matches!(t.kind, TriggerKind::Snapshot))
        {
            self.0.alloc_snapshot(&mut self.ctl())?;
        }
        self.0.set_event_triggers(event, triggers);
        Ok(())
    }
    fn event_soft_disabled(&self, event: &TraceEventFormat) -> Option<bool> {
        self.0.event_soft_disabled(event)
    }
    fn event_trigger_counts(&self, event: &TraceEventFormat) -> Option<Vec<i64>> {
        self.0.event_trigger_counts(event)
    }
    fn write_event_hist(&self, event: &TraceEventFormat, w: &mut dyn fmt::Write) -> fmt::Result {
        self.0.write_event_hist(event, w)
    }
    fn clear_event_hist(&mut self, event: &TraceEventFormat, trigger: &Trigger) {
        self.0.clear_event_hist(event, trigger)
    }
}

impl<P: Platform, const CPUS: usize> TraceArray<P, CPUS> {
    /// Runs `f` on the published buffer, if any, inside a read-side section.
    pub(super) fn with_buffer<T>(
        &self,
        f: impl FnOnce(&ftrace_ringbuf::RingBuffer<P::Pages>) -> T,
    ) -> Option<T> {
        let _guard = self.reclaim().pin();
        // SAFETY: inside the guard.
        unsafe { self.buffer.load() }.map(f)
    }
}
