//! The instance's snapshot buffer (Linux's `max_buffer` under `CONFIG_TRACER_SNAPSHOT`): the
//! `snapshot` file's commands and its text.
//!
//! `echo 1 > snapshot` allocates a ring of the main buffer's geometry if there is none (or
//! the main buffer was resized since) and swaps the two whole rings, as `update_max_tr` swaps
//! `array_buffer` and `max_buffer`: the new main ring inherits the recording state
//! (`tracing_on`), the ring mode and `tracing_cpumask`, and tracing goes on in it while the old
//! main ring, once a grace period has let the writers that loaded it finish, is the snapshot.
//! As in the kernel, a second swap puts the previous snapshot's events back into the main
//! buffer. `echo 0` frees the snapshot, any other number empties it.
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
use ftrace_core::reclaim::Published;
use ftrace_ringbuf::RingBuffer;

use super::render::{self, Copied, TextKind};
use super::{Control, Platform, TraceArray};
use crate::backend::SnapshotCommand;

/// The snapshot ring and the geometry it was built with (pages per CPU, sub-buffer size).
pub(super) struct SnapshotBuffer<Pg: ftrace_ringbuf::PageProvider + Clone> {
    ring: Box<RingBuffer<Pg>>,
    pages: Vec<usize>,
    subbuf: usize,
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
                // Nothing writes into the snapshot ring (writers only reach the published
                // one): it is dropped at once.
                *self.snapshot.lock() = None;
                Ok(())
            }
            (SnapshotCommand::Take, None) => self.take_snapshot(c),
            (SnapshotCommand::Clear, cpu) => {
                self.clear_snapshot(cpu);
                Ok(())
            }
        }
    }

    /// Empties the snapshot ring (one CPU's part or all), if there is one.
    pub(super) fn clear_snapshot(&self, cpu: Option<u32>) {
        if let Some(s) = self.snapshot.lock().as_mut() {
            match cpu {
                None => s.ring.reset(),
                Some(n) => {
                    if let Some(b) = s.ring.cpu_mut(n as usize) {
                        b.reset();
                    }
                }
            }
        }
    }

    /// `echo 1 > snapshot`: swaps the main ring with the snapshot ring (built first if
    /// missing or of another geometry than the main one). `ENOMEM` changes nothing.
    fn take_snapshot(&'static self, c: &mut Control) -> Result<(), Errno> {
        self.ensure_buffer(c)?;
        let mut slot = self.snapshot.lock();
        let spare = match slot.take() {
            Some(s) if s.pages == c.pages && s.subbuf == c.subbuf => s.ring,
            kept => match self.build_buffer(c, &c.pages, c.subbuf) {
                Ok(rb) => Box::new(rb),
                Err(e) => {
                    *slot = kept;
                    return Err(e);
                }
            },
        };
        // The ring about to record inherits what the main one does (`update_max_tr`).
        spare.set_mode(self.buffer_mode());
        for n in 0..spare.nr_cpus() {
            spare.set_cpu_enabled(n, c.cpumask & (1 << n) != 0);
        }
        spare.set_record_on(self.tracing_on.load(Ordering::Relaxed));
        let old = self.buffer.swap(Published::Owned(spare));
        // A `tracing_on` flip racing the swap may have reached the old ring only.
        self.with_buffer(|rb| rb.set_record_on(self.tracing_on.load(Ordering::Relaxed)));
        // `ensure_buffer` published an owned ring, so there is one to keep.
        *slot = old.into_owned(self.reclaim()).map(|ring| SnapshotBuffer {
            ring,
            pages: c.pages.clone(),
            subbuf: c.subbuf,
        });
        Ok(())
    }

    /// The `snapshot` file of one CPU (or all): the snapshot ring as `trace` prints the main
    /// one, or the help when that part of it holds nothing.
    pub(super) fn snapshot_text(&'static self, c: &Control, cpu: Option<u32>) -> Vec<u8> {
        let slot = self.snapshot.lock();
        let (copied, allocation) = match slot.as_ref() {
            Some(s) => (Copied::of(&s.ring), Allocation::Allocated),
            None => (Copied::default(), Allocation::Freed),
        };
        drop(slot);
        render::text(self, c, copied, cpu, TextKind::Snapshot(allocation))
    }
}
