// SPDX-License-Identifier: GPL-2.0
//! The pid -> comm table the trace file's `TASK-PID` column is printed from: the module's
//! `saved_cmdlines`.
//!
//! The kernel fills its table from the sched_switch tracepoint, and prints the comm a pid has
//! in the table at read time (so a task's events before its exec() show its later name). This
//! module records the comm of the task that wrote an event, on every event, in the table of
//! the CPU it ran on, from the ftrace callback: the latest name wins, as in the kernel.
//!
//! A table is set-associative: a pid lives in one of the [`WAYS`] slots of set `pid % SETS`,
//! and a new pid takes a free slot of its set or the one recorded longest ago, so a pid's name
//! is only forgotten after `WAYS` other pids of its set wrote events since (the kernel forgets
//! names the same way once its 128 `saved_cmdlines` are used up). A direct-mapped table (slot
//! `pid % SLOTS`) lost names as soon as two live pids met in a slot: `sh` (pid 1) reading its
//! script overwrote pid 129's `dd`, which then printed as `<...>`.
//! Invariant: a CPU's table is written only by that CPU with preemption disabled, and a writer
//! that interrupts another writer on the same CPU skips its update (the `busy` flag), so a slot
//! is never half-written; readers only read while recording is stopped and every writer has
//! left (see `Tracing::stop`), so they never race a writer.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, Ordering};

use crate::shim;

/// Slots per CPU, as the kernel's default `saved_cmdlines_size`.
const SLOTS: usize = 128;
/// Slots per set.
const WAYS: usize = 8;
/// Sets per CPU: the set of `pid` is `pid % SETS`.
const SETS: usize = SLOTS / WAYS;
/// `TASK_COMM_LEN`.
pub(crate) const COMM_LEN: usize = 16;

#[derive(Clone, Copy)]
struct Slot {
    pid: i32,
    /// When it was recorded (trace clock): a task that ran on several CPUs has an entry in
    /// each CPU's table, and the newest one is its current name.
    stamp: u64,
    comm: [u8; COMM_LEN],
}

/// One CPU's table.
pub(crate) struct CommTable {
    busy: AtomicBool,
    slots: UnsafeCell<[Slot; SLOTS]>,
}

// SAFETY: `slots` is written only by the owning CPU under `busy` (preemption disabled), and read
// only while no writer can run (module invariant above).
unsafe impl Sync for CommTable {}

impl CommTable {
    /// An empty table.
    pub(crate) const fn new() -> Self {
        CommTable {
            busy: AtomicBool::new(false),
            slots: UnsafeCell::new(
                [Slot {
                    pid: -1,
                    stamp: 0,
                    comm: [0; COMM_LEN],
                }; SLOTS],
            ),
        }
    }

    /// Records `current`'s comm under `pid` at time `stamp`. Called on the owning CPU with
    /// preemption off.
    #[inline]
    pub(crate) fn record(&self, pid: i32, stamp: u64) {
        if pid <= 0 {
            return;
        }
        if self.busy.swap(true, Ordering::Acquire) {
            return; // we interrupted this CPU's writer: let it finish, skip ours
        }
        // SAFETY: exclusive: owning CPU, preemption off, `busy` held (module invariant).
        let slots = unsafe { &mut *self.slots.get() };
        let set = &mut slots[set_range(pid)];
        // The pid's own slot, else the one recorded longest ago (a free slot has stamp 0).
        let victim = set.iter().position(|s| s.pid == pid).unwrap_or_else(|| {
            set.iter()
                .enumerate()
                .min_by_key(|(_, s)| s.stamp)
                .map_or(0, |(i, _)| i)
        });
        let slot = &mut set[victim];
        slot.pid = pid;
        slot.stamp = stamp;
        // SAFETY: writes TASK_COMM_LEN bytes into the slot's array of that size.
        unsafe { shim::rfl_shim_current_comm(slot.comm.as_mut_ptr()) };
        self.busy.store(false, Ordering::Release);
    }

    /// The comm recorded for `pid`, if any, and when it was recorded.
    ///
    /// # Safety
    /// No writer may run on this table while the returned string is alive (recording stopped).
    pub(crate) unsafe fn lookup(&self, pid: i32) -> Option<(u64, &str)> {
        if pid <= 0 {
            return None;
        }
        // SAFETY: the caller guarantees no concurrent writer.
        let slots = unsafe { &*self.slots.get() };
        let slot = slots[set_range(pid)].iter().find(|s| s.pid == pid)?;
        let len = slot.comm.iter().position(|&b| b == 0).unwrap_or(COMM_LEN);
        Some((slot.stamp, core::str::from_utf8(&slot.comm[..len]).ok()?))
    }
}

/// The slots of `pid`'s set (`pid` > 0).
#[inline]
fn set_range(pid: i32) -> core::ops::Range<usize> {
    let set = pid as usize % SETS;
    set * WAYS..(set + 1) * WAYS
}
