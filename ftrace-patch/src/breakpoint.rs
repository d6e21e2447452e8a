//! Publishing a breakpoint batch to the platform's trap handler: [`BreakpointSlot`].
//!
//! The breakpoint protocol ([`crate::protocol::apply`]) writes `int3` (x86) or `brk`
//! (AArch64) over the heads of the sites it rewrites; a CPU that reaches one traps, and the
//! platform's handler must find the site in the batch to emulate the new instruction. A
//! platform keeps one `BreakpointSlot` in a `static` and returns it from
//! [`TextPoke::breakpoint_slot`](crate::text::TextPoke::breakpoint_slot); then:
//!
//! - `apply` **arms** the slot with the batch's [`BreakpointTable`] before it writes the first
//!   breakpoint, and **disarms and drains** it after the last breakpoint is gone, before the
//!   batch's sites can be freed or reused and before the slot is armed again;
//! - the trap handler calls [`BreakpointSlot::trap`] (the kernel's `poke_int3_handler`): no
//!   lock, no allocation, a counter increment and a fence, then a binary search.
//!
//! The platform primitives (how the trap is delivered, how the interrupted context is changed
//! to emulate the answer) stay the backend's.
//!
//! Invariants: a handler is counted in the slot's [`ReaderCount`] before it loads the armed
//! flag and until it is done with the table; `disarm` clears the flag and then waits until
//! every such handler has left ([`Reclaim::synchronize`]) before it forgets the table, so no
//! handler reads a table (or its sites) after `apply` returned. A handler whose trap was on a
//! breakpoint of the batch either finds the site ([`TrapAction::Emulate`]) or, if the batch
//! finished meanwhile, sees the flag cleared and (the clearing store being a release the
//! handler's load acquires) every final head written: the site holds its new instruction and
//! the handler re-runs it (see [`BreakpointSlot::resolve`]). `apply` marks the sites armed
//! before it arms the slot, so a handler that finds a batch finds its sites armed.
//! `tests/loom.rs` model-checks these, for one batch and for two in a row.

use core::fmt;

use ftrace_core::platform::Reclaim;
use ftrace_core::reclaim::ReaderCount;

use crate::protocol::{BreakpointTable, TrapAction, late_trap};
use crate::site::Arch;
use ftrace_core::sync::{AtomicBool, AtomicUsize, Ordering, UnsafeCell, loom_const_fn, spin_loop};

/// Where a platform's trap handler finds the armed breakpoint batch (one per platform, in a
/// `static`; see the [module docs](self)).
pub struct BreakpointSlot {
    /// Whether `table` holds the armed batch.
    armed: AtomicBool,
    /// Batches armed so far (bumped after `armed` is set, before the first breakpoint).
    generation: AtomicUsize,
    /// Taken by `arm`, released by `disarm`: one batch at a time per slot (two patchers on one
    /// platform wait for each other).
    busy: AtomicBool,
    /// The armed batch's table; written only by `arm` and `disarm`, while no handler can be
    /// reading it.
    table: UnsafeCell<Option<BreakpointTable<'static>>>,
    /// Handlers between their pin and the end of their lookup.
    handlers: ReaderCount,
}

// SAFETY: `table` is written only by `arm` (holding `busy`, before `armed` is released, after
// the previous `disarm` drained every handler) and by `disarm` (after clearing `armed` and draining), and
// read only by handlers that acquired `armed == true` inside a `handlers` guard; the table's
// sites are `Sync` (their status is atomic).
unsafe impl Sync for BreakpointSlot {}

impl fmt::Debug for BreakpointSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BreakpointSlot")
            .field("armed", &self.is_armed())
            .finish_non_exhaustive()
    }
}

impl Default for BreakpointSlot {
    fn default() -> Self {
        Self::new()
    }
}

impl BreakpointSlot {
    loom_const_fn! {
        /// A slot with nothing armed.
        pub fn new() -> BreakpointSlot {
            BreakpointSlot {
                armed: AtomicBool::new(false),
                generation: AtomicUsize::new(0),
                busy: AtomicBool::new(false),
                table: UnsafeCell::new(None),
                handlers: ReaderCount::new(),
            }
        }
    }

    /// Publishes `table` to handlers.
    ///
    /// # Safety
    /// The sites `table` borrows stay valid and unmoved until [`disarm`] returns, which the
    /// caller calls (`apply` arms and disarms in pairs).
    ///
    /// [`disarm`]: BreakpointSlot::disarm
    pub(crate) unsafe fn arm(&self, table: &BreakpointTable<'_>) {
        while self
            .busy
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spin_loop();
        }
        let copy = BreakpointTable::new(table.arch(), {
            let sites = table.sites();
            // SAFETY: the lifetime is erased here and only here: handlers reach the sites
            // through `with_table`, for the length of a guard `disarm` waits for, and
            // `disarm` forgets them before the caller's borrow ends.
            unsafe { core::slice::from_raw_parts(sites.as_ptr(), sites.len()) }
        });
        // SAFETY: no handler reads `table` while `armed` is clear (the last `disarm` drained
        // those that saw it set), and `busy` keeps other patchers out.
        self.table.with_mut(|t| unsafe { *t = Some(copy) });
        self.armed.store(true, Ordering::Release);
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Unpublishes the table and waits until no handler can still be reading it (drain), then
    /// forgets it. Must not be called from a trap handler.
    pub(crate) fn disarm(&self) {
        self.armed.store(false, Ordering::Release);
        self.handlers.synchronize();
        // SAFETY: every handler that saw `armed` set has left (drained above).
        self.table.with_mut(|t| unsafe { *t = None });
        self.busy.store(false, Ordering::Release);
    }

    /// Whether a batch is armed now (for fatal-trap reports).
    pub fn is_armed(&self) -> bool {
        self.armed.load(Ordering::Relaxed)
    }

    /// Runs `f` on the armed table (`None`: nothing armed), which stays valid while `f` runs.
    /// Safe from a signal or exception handler: no lock, no allocation.
    pub fn with_table<R>(&self, f: impl FnOnce(Option<&BreakpointTable<'_>>) -> R) -> R {
        let _in_handler = self.handlers.pin();
        if !self.armed.load(Ordering::Acquire) {
            return f(None);
        }
        // SAFETY: `armed` was set (acquired) after `arm` wrote the table, and `disarm` does
        // not touch it until this guard, taken before the load, is dropped.
        self.table.with(|t| f(unsafe { (*t).as_ref() }))
    }

    /// Resolves a trap at `bp_addr` against the armed batch ([`BreakpointTable::trap`]);
    /// `head` is what the handler read at `bp_addr` (1 byte on x86, the 4-byte word on
    /// AArch64). [`TrapAction::NotOurs`] when nothing is armed or the site is not in the batch.
    /// A handler that can run late (after its batch ended) uses [`BreakpointSlot::resolve`].
    pub fn trap(&self, bp_addr: u64, head: &[u8]) -> TrapAction {
        self.with_table(|t| t.map_or(TrapAction::NotOurs, |t| t.trap(bp_addr, head)))
    }

    /// Resolves a trap at `bp_addr`, a site the platform patches, from a handler that may run
    /// late: a userspace `SIGTRAP` can be handled after the batch whose breakpoint raised it
    /// ended, and after another batch began. `read_head` reads the bytes at `bp_addr` now (the
    /// breakpoint's length).
    ///
    /// A trap the armed batch claims is answered by it. Otherwise the site is read again: if
    /// the breakpoint is gone, the batch that wrote it is over and its final bytes are in place
    /// (the disarm's release, acquired by the lookup, orders them before the re-read), so the
    /// answer is [`TrapAction::Restart`]; if a breakpoint is there and another batch was armed
    /// meanwhile, it is looked up again; if none was, the breakpoint is not ours
    /// ([`TrapAction::NotOurs`]: a debugger's, say).
    pub fn resolve(&self, arch: Arch, bp_addr: u64, read_head: impl Fn(&mut [u8])) -> TrapAction {
        let n = arch.breakpoint().len();
        let mut head = [0u8; 4];
        read_head(&mut head[..n]);
        loop {
            let generation = self.generation.load(Ordering::Acquire);
            let action = self.trap(bp_addr, &head[..n]);
            if action != TrapAction::NotOurs {
                return action;
            }
            read_head(&mut head[..n]);
            let late = late_trap(arch, &[bp_addr], bp_addr, &head[..n]);
            if late != TrapAction::NotOurs || self.generation.load(Ordering::Acquire) == generation
            {
                return late;
            }
        }
    }
}
