//! The instance's snapshot buffer (Linux's `max_buffer` under `CONFIG_TRACER_SNAPSHOT`): the
//! `snapshot` file's commands, the events' `snapshot` trigger, and the snapshot's text.
//!
//! `echo 1 > snapshot` allocates a ring of the main buffer's geometry if there is none and
//! swaps the two whole rings, as `update_max_tr` swaps `array_buffer` and `max_buffer`: the
//! new main ring inherits the recording state (`tracing_on`) and the ring mode, and tracing
//! goes on in it while the old main ring is the snapshot. As in the kernel, a second swap puts
//! the previous snapshot's events back into the main buffer. `echo 0` frees the snapshot, any
//! other number empties it. Resizing the main buffer resizes the snapshot with it
//! (`resize_buffer_duplicate_size`), and `tracing_cpumask` applies to both, so the two rings
//! can always trade places.
//!
//! An event's `snapshot` trigger makes the same swap from the tracepoint, on any CPU. Adding
//! the trigger allocates the snapshot (`tracing_arm_snapshot`; `ENOMEM` refuses the trigger).
//! The swap never waits: it publishes the snapshot ring and keeps the old main ring as
//! retired but alive ([`RcuCell::swap_retired`] republishes a ring swapped out before), and
//! the grace period that lets the writers which loaded the old ring finish is waited for by
//! the next control path that reads, empties or frees the snapshot. The swap and those paths
//! take the snapshot's lock; the trigger only tries it, and when it is busy writes that into
//! the trace instead of waiting. Without a snapshot buffer (freed by `echo 0` after the
//! trigger was added) the trigger writes the kernel's `*** SNAPSHOT NOT ALLOCATED ***` lines
//! and stops tracing, as the kernel does.
//!
//! Per CPU, the kernel swaps one CPU's buffers only with `CONFIG_RING_BUFFER_ALLOW_SWAP`,
//! which the 6.12 reference kernel lacks (no latency tracer selects it): `echo 1` and `echo 0`
//! into `per_cpu/cpuN/snapshot` are `EINVAL`, any other number empties that CPU's part, and
//! the help text says so. No tracer here uses the max buffer, so the kernel's `EBUSY` for one
//! never arises.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::sync::atomic::Ordering;

use ftrace_core::Errno;
use ftrace_core::platform::Reclaim;
use ftrace_core::reclaim::{Published, RcuCell, ReaderCount, Retired};
use ftrace_ringbuf::RingBuffer;
use ftrace_tracers::TraceOptions;
use ftrace_tracers::function::trace_marker_write;

use super::render::{self, Copied, TextKind};
use super::{Control, Platform, TraceArray};
use crate::backend::SnapshotCommand;

/// The snapshot ring (always of the main ring's geometry: `rebuild_buffer` rebuilds both).
pub(super) struct SnapshotBuffer<Pg: ftrace_ringbuf::PageProvider + Clone> {
    /// `None` only inside [`SnapshotBuffer::swap_into`] and [`SnapshotBuffer::settled`].
    held: Option<Held<Pg>>,
}

/// How the instance holds its snapshot ring.
enum Held<Pg: ftrace_ringbuf::PageProvider + Clone> {
    /// Out of every writer's reach: a control path may empty, read or free it.
    Kept(Box<RingBuffer<Pg>>),
    /// Swapped out of the main buffer without waiting (by a `snapshot` trigger, or
    /// `echo 1 > snapshot`): writers that loaded it as the main ring may still be writing
    /// into it until a grace period has passed. A later swap may publish it again at once.
    Swapped(Retired<RingBuffer<Pg>>),
}

impl<Pg: ftrace_ringbuf::PageProvider + Clone + 'static> SnapshotBuffer<Pg> {
    fn new(ring: RingBuffer<Pg>) -> Self {
        SnapshotBuffer {
            held: Some(Held::Kept(Box::new(ring))),
        }
    }

    /// The ring, shared (writers may still be in it: only `&self` methods).
    fn ring(&self) -> &RingBuffer<Pg> {
        match self.held.as_ref().expect("a snapshot holds a ring") {
            Held::Kept(b) => b,
            Held::Swapped(r) => r.get().expect("only owned rings are swapped out"),
        }
    }

    /// The ring, to the control path alone: after a grace period if a swap left writers
    /// possibly in it. Control paths only: it may wait.
    fn settled(&mut self, reclaim: &ReaderCount) -> &mut RingBuffer<Pg> {
        if let Some(Held::Swapped(r)) = self.held.take_if(|h| matches!(h, Held::Swapped(_))) {
            let ring = r
                .into_owned(reclaim)
                .expect("only owned rings are swapped out");
            self.held = Some(Held::Kept(ring));
        }
        match self.held.as_mut() {
            Some(Held::Kept(b)) => b,
            _ => unreachable!("settled above"),
        }
    }

    /// Publishes the ring as `main` and keeps the ring it replaces, without waiting.
    fn swap_into(&mut self, main: &RcuCell<RingBuffer<Pg>>) {
        let old = match self.held.take().expect("a snapshot holds a ring") {
            Held::Kept(b) => main.swap(Published::Owned(b)),
            Held::Swapped(r) => main.swap_retired(r),
        };
        self.held = Some(Held::Swapped(old));
    }

    /// Frees the ring after the grace period its last swap needs.
    fn free(mut self, reclaim: &ReaderCount) {
        self.settled(reclaim);
    }
}

impl<Pg: ftrace_ringbuf::PageProvider + Clone> Drop for SnapshotBuffer<Pg> {
    fn drop(&mut self) {
        if let Some(Held::Swapped(r)) = self.held.take() {
            // SAFETY: control paths drop a snapshot through `free` (settled, so `Kept`); a
            // `Swapped` one is dropped only with its instance, which is freed after the grace
            // period that ends every writer's section (`InstanceBackend`'s drop).
            drop(unsafe { r.into_owned_unshared() });
        }
    }
}

macro_rules! main_help {
    () => {
        "# echo 0 > snapshot : Clears and frees snapshot buffer\n\
         # echo 1 > snapshot : Allocates snapshot buffer, if not already allocated.\n\
         #                      Takes a snapshot of the main buffer.\n\
         # echo 2 > snapshot : Clears snapshot buffer (but does not allocate or free)\n\
         #                      (Doesn't have to be '2' works with any number that\n\
         #                       is not a '0' or '1')\n"
    };
}

macro_rules! percpu_help {
    () => {
        "# echo 0 > snapshot : Invalid for per_cpu snapshot file.\n\
         # echo 1 > snapshot : Not supported with this kernel.\n\
         #                     Must use main snapshot file to allocate.\n\
         # echo 2 > snapshot : Clears this cpu's snapshot buffer (but does not allocate)\n\
         #                      (Doesn't have to be '2' works with any number that\n\
         #                       is not a '0' or '1')\n"
    };
}

/// What the `snapshot` help tells first: whether the snapshot buffer exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Allocation {
    /// `# * Snapshot is allocated *`.
    Allocated,
    /// `# * Snapshot is freed *`.
    Freed,
}

/// The help the kernel's `print_snapshot_help` prints for an empty snapshot: the allocation
/// line and the commands of the main file or of a per-CPU one (this kernel configuration has
/// no per-CPU swap).
pub(super) fn help(allocation: Allocation, cpu: Option<u32>) -> &'static str {
    match (allocation, cpu) {
        (Allocation::Allocated, None) => concat!(
            "#\n# * Snapshot is allocated *\n#\n",
            "# Snapshot commands:\n",
            main_help!()
        ),
        (Allocation::Freed, None) => concat!(
            "#\n# * Snapshot is freed *\n#\n",
            "# Snapshot commands:\n",
            main_help!()
        ),
        (Allocation::Allocated, Some(_)) => concat!(
            "#\n# * Snapshot is allocated *\n#\n",
            "# Snapshot commands:\n",
            percpu_help!()
        ),
        (Allocation::Freed, Some(_)) => concat!(
            "#\n# * Snapshot is freed *\n#\n",
            "# Snapshot commands:\n",
            percpu_help!()
        ),
    }
}

/// What a `snapshot` trigger writes into the trace when there is no snapshot buffer
/// (`tracing_snapshot_instance_cond`'s words); tracing then stops.
const NOT_ALLOCATED: [&str; 2] = [
    "*** SNAPSHOT NOT ALLOCATED ***\n",
    "*** stopping trace here!   ***\n",
];

/// What a `snapshot` trigger writes into the trace when the snapshot is busy: another CPU's
/// trigger is swapping it, or a control path is reading, emptying or resizing it. A
/// tracepoint may not wait for either, so the snapshot is not taken (the kernel, whose
/// control paths hold its lock with interrupts off, only says this much from an NMI).
const BUSY: [&str; 2] = [
    "*** SNAPSHOT BUSY: being swapped or read ***\n",
    "*** snapshot is being ignored            ***\n",
];

impl<P: Platform, const CPUS: usize> TraceArray<P, CPUS> {
    /// A write to `snapshot` (`cpu`: `per_cpu/cpuN/snapshot`); an error changes nothing.
    pub(super) fn snapshot_command(
        &'static self,
        c: &mut Control,
        cpu: Option<u32>,
        cmd: SnapshotCommand,
    ) -> Result<(), Errno> {
        if cpu.is_some_and(|n| n as usize >= self.nr_cpus()) {
            return Err(Errno::ENODEV);
        }
        match (cmd, cpu) {
            (SnapshotCommand::Free | SnapshotCommand::Take, Some(_)) => Err(Errno::EINVAL),
            (SnapshotCommand::Free, None) => {
                let old = self.snapshot.lock().take();
                if let Some(s) = old {
                    s.free(self.reclaim());
                }
                Ok(())
            }
            (SnapshotCommand::Take, None) => {
                self.alloc_snapshot(c)?;
                if let Some(s) = self.snapshot.lock().as_mut() {
                    self.swap_snapshot(s);
                }
                Ok(())
            }
            (SnapshotCommand::Clear, cpu) => {
                self.clear_snapshot(cpu);
                Ok(())
            }
        }
    }

    /// `tracing_alloc_snapshot_instance`: a snapshot ring of the main ring's geometry, if
    /// there is none (`echo 1 > snapshot`, and a `snapshot` trigger when it is added).
    /// `ENOMEM` changes nothing.
    pub(super) fn alloc_snapshot(&self, c: &mut Control) -> Result<(), Errno> {
        self.ensure_buffer(c)?;
        if self.snapshot.lock().is_none() {
            let ring = self.build_buffer(c, &c.pages, c.subbuf)?;
            let mut slot = self.snapshot.lock();
            if slot.is_none() {
                *slot = Some(SnapshotBuffer::new(ring));
            }
        }
        Ok(())
    }

    /// Makes the snapshot of `c`'s new geometry when the main ring gets it
    /// (`resize_buffer_duplicate_size`): a swap exchanges rings of one geometry. Called by
    /// `rebuild_buffer` with the snapshot's lock held across the main ring's replacement.
    /// `ENOMEM` changes nothing.
    pub(super) fn resize_snapshot(
        &self,
        slot: &mut Option<SnapshotBuffer<P::Pages>>,
        c: &Control,
        pages: &[usize],
        subbuf: usize,
    ) -> Result<(), Errno> {
        if slot.is_some() && (pages != c.pages.as_slice() || subbuf != c.subbuf) {
            let ring = self.build_buffer(c, pages, subbuf)?;
            if let Some(old) = slot.replace(SnapshotBuffer::new(ring)) {
                old.free(self.reclaim());
            }
        }
        Ok(())
    }

    /// `update_max_tr`: the snapshot ring becomes the main one and the main one the
    /// snapshot, without waiting. The ring about to record inherits what the main one does
    /// (`tracing_on`, the ring mode; `tracing_cpumask` is kept on both rings).
    fn swap_snapshot(&self, s: &mut SnapshotBuffer<P::Pages>) {
        let on = || self.tracing_on.load(Ordering::Relaxed);
        let spare = s.ring();
        spare.set_mode(self.buffer_mode());
        spare.set_record_on(on());
        s.swap_into(&self.buffer);
        // A `tracing_on` flip or an `overwrite` change racing the swap may have reached the
        // old ring only.
        self.with_buffer(|rb| {
            rb.set_record_on(on());
            rb.set_mode(self.buffer_mode());
        });
    }

    /// `tracing_snapshot_instance`, for an event's `snapshot` trigger: on any CPU, inside a
    /// tracepoint, so it never waits. Without a snapshot buffer it writes the kernel's two
    /// lines into the trace and stops tracing; with the snapshot busy (see [`BUSY`]) it
    /// writes that instead and takes no snapshot.
    pub(super) fn trigger_snapshot(&self) {
        let Some(mut slot) = self.snapshot.try_lock() else {
            return BUSY.iter().for_each(|l| self.puts(l));
        };
        match slot.as_mut() {
            // (A snapshot is allocated only after the main ring: there is one to swap.)
            Some(s) => self.swap_snapshot(s),
            None => {
                drop(slot);
                NOT_ALLOCATED.iter().for_each(|l| self.puts(l));
                self.set_tracing_on(false);
            }
        }
    }

    /// `trace_array_puts`: `text` as a `print` entry of the current CPU (at the marker's ip),
    /// while the `trace_printk` option is on.
    fn puts(&self, text: &str) {
        let options = TraceOptions::from_bits_retain(self.options.load(Ordering::Relaxed));
        if !options.contains(TraceOptions::TRACE_PRINTK) {
            return;
        }
        let _guard = self.reclaim().pin();
        let sink = self.sink(self.cpu());
        let ip = self.platform().marker_ip();
        let task = self.dispatcher.platform();
        // A full or stopped buffer refuses it, as it refuses the kernel's.
        let _ = trace_marker_write(
            text.as_bytes(),
            ip,
            options | TraceOptions::MARKERS,
            task,
            &sink,
        );
    }

    /// Applies `tracing_cpumask` (bit n: CPU n records) to the main ring and the snapshot,
    /// so that either can become the main one.
    pub(super) fn set_cpumask(&self, mask: u64) {
        let slot = self.snapshot.lock();
        let apply = |rb: &RingBuffer<P::Pages>| {
            (0..rb.nr_cpus()).for_each(|cpu| rb.set_cpu_enabled(cpu, mask & (1 << cpu) != 0))
        };
        self.with_buffer(apply);
        if let Some(s) = slot.as_ref() {
            apply(s.ring());
        }
    }

    /// Empties the snapshot ring (one CPU's part or all), if there is one.
    pub(super) fn clear_snapshot(&self, cpu: Option<u32>) {
        if let Some(s) = self.snapshot.lock().as_mut() {
            let ring = s.settled(self.reclaim());
            match cpu {
                None => ring.reset(),
                Some(n) => {
                    if let Some(b) = ring.cpu_mut(n as usize) {
                        b.reset();
                    }
                }
            }
        }
    }

    /// The `snapshot` file of one CPU (or all): the snapshot ring as `trace` prints the main
    /// one, or the help when that part of it holds nothing.
    pub(super) fn snapshot_text(&'static self, c: &Control, cpu: Option<u32>) -> Vec<u8> {
        // Copied without the lock, so that triggers swap meanwhile rather than find the
        // snapshot busy for a whole copy.
        let ring = self
            .snapshot
            .lock()
            .as_ref()
            .map(|s| core::ptr::from_ref(s.ring()));
        let (copied, allocation) = match ring {
            // SAFETY: rings are freed only by control paths (`echo 0 > snapshot`,
            // `rebuild_buffer`), which hold the control state `c` borrows, so the ring
            // outlives this copy; a trigger may swap it into the main buffer meanwhile, which
            // frees nothing, and a ring that writers are in is read as `trace` reads one.
            Some(r) => (Copied::of(unsafe { &*r }), Allocation::Allocated),
            None => (Copied::default(), Allocation::Freed),
        };
        render::text(self, c, copied, cpu, TextKind::Snapshot(allocation))
    }
}
