//! A fixed-slot ring: every event is one 32-byte slot, reserved with one non-locked `xadd` and
//! committed with one store, for writers whose events are all small and fixed-size (the
//! userspace agent's function and function_graph events) and whose fast path is a few
//! instructions of assembly with no call.
//!
//! Invariant: a slot is read only when its kind word carries the lap parity of the index being
//! read, and (in overwrite mode) the head, read again after the copy, shows that no writer has
//! reserved the slot for a later lap meanwhile.
//!
//! # The writer contract
//!
//! The writers of one ring are strictly nested (one ring per thread; a signal handler nests
//! inside the thread it interrupts and finishes before it resumes); a writer never locks,
//! allocates or blocks. A write is:
//!
//! 1. **Reserve**: `index = head++`, one read-modify-write that needs to be atomic only against
//!    nested writers (a non-locked `xadd` on x86_64), then compare `index` with the writer's
//!    copy of the limit, `limit_seen`: `u64::MAX` in [`SlotMode::Overwrite`], in
//!    [`SlotMode::ProducerConsumer`] the last index the consumer had made room for when a
//!    writer last looked (at first, an eighth of the ring). Only when `index > limit_seen` does the writer read the consumer's
//!    `limit` word (acquire), store it in `limit_seen` and compare again: the consumer's word
//!    is read once per eighth of a ring's worth of events, not once per event (the cached
//!    index of rtrb and crossbeam's bounded queues): the writer stores `limit` or, when lower,
//!    `index + capacity / 8` ([`LOOK_AGAIN_EVERY`]), so that it sees a consumer falling
//!    behind (below) while it still has room. `limit` only grows, so any value a writer saw
//!    is at most the current one: an outer writer that stores a value older than a nested
//!    writer's only makes a later writer look again.
//! 2. **Fill** the slot `index & (capacity - 1)`: `ts`, `ip`, `arg`, `cpu`.
//! 3. **Commit**: store the kind word last (release), with bit 7 set to the lap parity of
//!    `index` (`(index >> log2(capacity)) & 1`). Kind `0` never appears in a committed slot,
//!    so a zero-filled ring reads as empty.
//!
//! When `index > limit` (freshly read) the ring is full (producer/consumer mode only) and the event is
//! dropped: `dropped` is incremented, and the reservation is given back (`head: index + 1 ->
//! index` with a compare-exchange). That compare-exchange can only fail if a nested writer
//! reserved after us and found room (the consumer raised `limit` in between); then slot
//! `index` is free too, and the writer commits it as a [`KIND_PAD`] slot that readers skip.
//! So every index below `head` is eventually committed exactly once (event or pad), unless the
//! writer dies mid-write, and every dropped event is counted.
//!
//! The memory layout (`#[repr(C)]`, [`RingHeader`] then `capacity` [`Slot`]s, all fields
//! native-endian) is a contract too: assembly writers use [`HEAD_OFFSET`],
//! [`LIMIT_SEEN_OFFSET`], [`LIMIT_OFFSET`], [`DROPPED_OFFSET`] and [`SLOT_SIZE`], and a
//! reader in another process may map the same memory. The header is two cache lines: the
//! writers' words (`head`, `limit_seen`, `dropped`) in the first, the consumer's `limit` alone
//! in the second, so that neither side's stores take the other's line away.
//!
//! Beside `limit`, the consumer's line holds `grow` ([`GROW_OFFSET`]): an offer, from the
//! consumer to the writers' owner, of a larger ring of that many bytes (0: none), for when the
//! consumer falls behind: a writer that looks at `limit` and finds less than a quarter of the
//! ring ahead of it ([`SlotRing::behind`], [`BEHIND_BELOW`]) takes it, and the owner answers
//! with [`GROWN`] once its writers have moved. The writer decides, not the consumer: a consumer
//! that falls behind is one that does not run, and a writer that found the ring full could
//! only drop. The offer guards no data (a hint, read with a plain load whenever a writer
//! looks at `limit`); what a writer does about it is its owner's business (the userspace
//! agent moves the thread to a new ring the tool has made, [`SlotRing::offer_to_grow`]).
//! The answer is a release store that the consumer's load acquires ([`SlotRing::grown`]):
//! having seen it, the consumer finishes the ring with everything committed before.
//!
//! # Readers
//!
//! A reader may run concurrently on any CPU (or in another process over shared memory).
//! [`SlotRing::read`] checks one index; [`SlotRing::consume`] is the producer/consumer
//! reader: it reads in order from a [`Cursor`], stops at the first slot still being written,
//! then publishes the new `limit` (release), which is what lets writers reuse the slots it has
//! read. In overwrite mode the same reader skips what the writers lapped and counts it as
//! overrun.
//!
//! Memory ordering: the commit store (release) pairs with the reader's kind load (acquire), so
//! a committed slot's fields are seen whole; the reader's `limit` store (release) pairs with
//! the writer's `limit` load (acquire; a `limit_seen` value came from such a load earlier in
//! the same thread), so a slot is reused only after it has been read; in
//! overwrite mode the writer's release fence after the reservation pairs with the reader's
//! acquire fence before re-reading `head`, so a copy the writer may have overwritten is
//! discarded.
//!
//! ```
//! use ftrace_ringbuf::slot::{Cursor, Drain, RingHeader, Slot, SlotEvent, SlotMode, SlotRing};
//!
//! let header = RingHeader::new(4, SlotMode::ProducerConsumer);
//! let slots: Vec<Slot> = (0..4).map(|_| Slot::default()).collect();
//! let ring = SlotRing::new(&header, &slots).unwrap();
//! for ts in 0..6 {
//!     let _ = ring.write(SlotEvent { ts, ip: 0x1000, arg: 0, kind: 1, cpu: 0 });
//! }
//! let mut cursor = Cursor::default();
//! let mut got = Vec::new();
//! ring.consume(&mut cursor, Drain::Live, |ev, missed| got.push((ev.ts, missed)));
//! assert_eq!(got, [(0, 0), (1, 0), (2, 0), (3, 0)]);
//! assert_eq!(ring.dropped(), 2); // the ring was full: counted, never blocked
//! ```

use crate::sync::{AtomicU32, AtomicU64, Local, Ordering, fence};

/// Bytes per slot.
pub const SLOT_SIZE: usize = 32;
/// Bit of the kind word holding the lap parity.
pub const KIND_LAP_BIT: u32 = 1 << 7;
/// Mask of the kind in the kind word (bits 8.. are the writer's own, e.g. a call depth).
pub const KIND_MASK: u32 = 0x7f;
/// The kind of a slot whose writer found the ring full after a nested writer had already
/// written past it: no event, skipped by readers (the drop is counted in `dropped`).
pub const KIND_PAD: u32 = KIND_MASK;

/// Offset of `head` (u64: slots reserved so far) in [`RingHeader`].
pub const HEAD_OFFSET: usize = 8;
/// Offset of `limit_seen` (u64: the writers' copy of `limit`, compared on every reserve) in
/// [`RingHeader`].
pub const LIMIT_SEEN_OFFSET: usize = 16;
/// Offset of `limit` (u64: the highest index a writer may fill, the consumer's word, on a
/// cache line of its own) in [`RingHeader`].
pub const LIMIT_OFFSET: usize = 64;
/// Offset of `grow` (u64: the consumer's offer of a larger ring, in bytes; 0: none;
/// [`GROWN`]: the writers' owner has moved them to it) in [`RingHeader`], on the consumer's
/// cache line.
pub const GROW_OFFSET: usize = 72;
/// The `grow` word of a ring whose writers have moved to the larger ring offered: they
/// write here no more (but a write begun before the move may still commit).
pub const GROWN: u64 = u64::MAX;
/// A writer looks at the consumer's `limit` again at the latest this fraction (1 / this) of
/// the ring after it last did (the writer contract, step 1).
pub const LOOK_AGAIN_EVERY: u64 = 8;
/// The consumer is behind the writers when less than this fraction (1 / this) of the ring is
/// left ahead of them ([`SlotRing::behind`]).
pub const BEHIND_BELOW: u64 = 4;
/// Bytes of [`RingHeader`] (two cache lines).
pub const RING_HEADER_SIZE: usize = 128;
/// Offset of `dropped` (u64: events dropped because the ring was full) in [`RingHeader`].
pub const DROPPED_OFFSET: usize = 24;

/// What a writer does when the ring is full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotMode {
    /// The oldest events are overwritten (the kernel's `overwrite` option; a flight recorder).
    Overwrite,
    /// New events are dropped and counted until a consumer makes room; writers never wait.
    ProducerConsumer,
}

impl SlotMode {
    fn word(self) -> u32 {
        match self {
            SlotMode::Overwrite => 1,
            SlotMode::ProducerConsumer => 0,
        }
    }
}

/// The ring's control words, shared by its writers and readers: the writers' cache line,
/// then the consumer's (two whole lines when the header is placed at a 64-byte boundary, as
/// the agent's buffer files place it).
#[derive(Debug)]
#[repr(C)]
pub struct RingHeader {
    capacity: AtomicU64,
    head: Local,
    limit_seen: Local,
    dropped: Local,
    mode: AtomicU32,
    reserved: AtomicU32,
    pad_writers: [u64; 3],
    limit: AtomicU64,
    grow: AtomicU64,
    pad_consumer: [u64; 6],
}

#[cfg(not(loom))]
const _: () = {
    assert!(core::mem::offset_of!(RingHeader, head) == HEAD_OFFSET);
    assert!(core::mem::offset_of!(RingHeader, limit_seen) == LIMIT_SEEN_OFFSET);
    assert!(core::mem::offset_of!(RingHeader, limit) == LIMIT_OFFSET);
    assert!(core::mem::offset_of!(RingHeader, grow) == GROW_OFFSET);
    assert!(core::mem::offset_of!(RingHeader, dropped) == DROPPED_OFFSET);
    assert!(core::mem::size_of::<RingHeader>() == RING_HEADER_SIZE);
    assert!(core::mem::size_of::<Slot>() == SLOT_SIZE);
    assert!(core::mem::offset_of!(Slot, kind) == 24);
};

impl RingHeader {
    /// The header of an empty ring of `capacity` slots (a power of two).
    pub fn new(capacity: u64, mode: SlotMode) -> RingHeader {
        let limit = match mode {
            SlotMode::Overwrite => u64::MAX,
            SlotMode::ProducerConsumer => capacity.wrapping_sub(1),
        };
        RingHeader {
            capacity: AtomicU64::new(capacity),
            head: Local::new(0),
            // A producer/consumer writer looks at the consumer's `limit` from the first eighth
            // of the ring on, as it does on every later lap: a consumer that has not started
            // yet is a consumer falling behind.
            limit_seen: Local::new(limit.min(capacity / LOOK_AGAIN_EVERY) as usize),
            dropped: Local::new(0),
            mode: AtomicU32::new(mode.word()),
            reserved: AtomicU32::new(0),
            pad_writers: [0; 3],
            limit: AtomicU64::new(limit),
            grow: AtomicU64::new(0),
            pad_consumer: [0; 6],
        }
    }

    /// The capacity recorded in the header (not validated: see [`SlotRing::new`]).
    #[inline]
    pub fn capacity(&self) -> u64 {
        self.capacity.load(Ordering::Relaxed)
    }

    /// The larger ring the consumer offers, in bytes (0: none; [`GROWN`]: the writers have
    /// moved; [`SlotRing::offer_to_grow`]). Acquire: see [`SlotRing::grown`].
    #[inline]
    pub fn growth_offered(&self) -> u64 {
        self.grow.load(Ordering::Acquire)
    }

    /// [`SlotRing::behind`], with the capacity the header records (a hint: a header another
    /// process damaged gives a wrong answer, never a fault).
    #[inline]
    pub fn behind(&self) -> bool {
        let limit = self.limit.load(Ordering::Relaxed);
        let head = self.head.get() as u64;
        head > limit || (limit - head).saturating_mul(BEHIND_BELOW) < self.capacity()
    }
}

/// One slot: a fixed-size event.
#[derive(Debug, Default)]
#[repr(C)]
pub struct Slot {
    ts: AtomicU64,
    ip: AtomicU64,
    arg: AtomicU64,
    kind: AtomicU32,
    cpu: AtomicU32,
    /// Under loom only: who owns the slot's fields. The writer's fill is a mutable access and
    /// a producer/consumer reader's copy of a committed slot an immutable one, so loom reports
    /// any fill that the copy does not happen before or after: a slot reused before the
    /// consumer gave it back (the `limit` protocol's orderings), which the atomics alone
    /// cannot show.
    #[cfg(loom)]
    owner: LoomOwner,
}

/// The loom-only ownership token of a [`Slot`].
#[cfg(loom)]
#[derive(Debug)]
struct LoomOwner(ftrace_core::sync::UnsafeCell<()>);

#[cfg(loom)]
impl Default for LoomOwner {
    fn default() -> Self {
        LoomOwner(ftrace_core::sync::UnsafeCell::new(()))
    }
}

/// One event as written and read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlotEvent {
    /// Timestamp.
    pub ts: u64,
    /// The traced function (or the writer's first payload word).
    pub ip: u64,
    /// The writer's second payload word (parent ip, call time...).
    pub arg: u64,
    /// Kind in bits 0..7 (1..=126), the writer's own bits from bit 8 up; bit 7 (the lap
    /// parity) is the ring's and ignored on write, clear on read.
    pub kind: u32,
    /// The CPU the writer ran on.
    pub cpu: u32,
}

impl SlotEvent {
    /// The kind (bits 0..7 of the kind word).
    pub fn kind(&self) -> u32 {
        self.kind & KIND_MASK
    }
}

/// The ring was full (producer/consumer mode): the event was dropped and counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Full;

/// A ring whose header or slots do not fit together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotError {
    /// The capacity is zero or not a power of two.
    Capacity,
    /// Fewer slots than the capacity says.
    TooFewSlots,
}

impl core::fmt::Display for SlotError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            SlotError::Capacity => "the slot ring's capacity is not a power of two",
            SlotError::TooFewSlots => "the slot ring has fewer slots than its capacity",
        })
    }
}

/// What one index of the ring holds, as a reader sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotRead {
    /// A committed event, copied whole.
    Event(SlotEvent),
    /// A pad slot (a dropped reservation): nothing to read.
    Pad,
    /// Not committed (yet): a writer is filling it, or died doing so.
    Uncommitted,
    /// Overwritten by a later lap (overwrite mode), or being overwritten while read.
    Overwritten,
}

/// How [`SlotRing::consume`] treats a slot that is reserved but not committed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drain {
    /// The writers may still run: stop there and come back later.
    Live,
    /// The writers are gone (the process exited or was killed): count it as lost and go on.
    Final,
}

/// A consumer's position in one ring, and what it has seen lost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cursor {
    /// The next index to read.
    pub next: u64,
    /// Events dropped because the ring was full, already reported as `missed`.
    pub dropped: u64,
    /// Events the consumer lost: overwritten before they were read, or never committed.
    pub overrun: u64,
    /// Events delivered.
    pub read: u64,
    /// Drops counted but not yet reported (they precede index `hole_at`).
    pending: u64,
    hole_at: u64,
}

impl Cursor {
    /// Every event lost so far, however.
    pub fn lost(&self) -> u64 {
        self.dropped
            .saturating_add(self.pending)
            .saturating_add(self.overrun)
    }

    /// Drops counted whose place in the stream has not been reached yet.
    pub fn pending_drops(&self) -> u64 {
        self.pending
    }
}

/// A view of one ring: its header and its slots.
#[derive(Clone, Copy, Debug)]
pub struct SlotRing<'a> {
    header: &'a RingHeader,
    slots: &'a [Slot],
    shift: u32,
    mode: SlotMode,
}

impl<'a> SlotRing<'a> {
    /// The ring of `header` over `slots` (which may be longer than the capacity). Inlined: a
    /// writer that keeps only the header and slot pointers (the agent's per-thread state)
    /// builds the view on every write, and an out-of-line call there cost more than the
    /// write itself.
    #[inline]
    pub fn new(header: &'a RingHeader, slots: &'a [Slot]) -> Result<SlotRing<'a>, SlotError> {
        let cap = header.capacity();
        if cap == 0 || !cap.is_power_of_two() {
            return Err(SlotError::Capacity);
        }
        if (slots.len() as u64) < cap {
            return Err(SlotError::TooFewSlots);
        }
        Ok(SlotRing {
            header,
            slots: &slots[..cap as usize],
            shift: cap.trailing_zeros(),
            mode: if header.mode.load(Ordering::Relaxed) != 0 {
                SlotMode::Overwrite
            } else {
                SlotMode::ProducerConsumer
            },
        })
    }

    /// Slots in the ring.
    pub fn capacity(&self) -> u64 {
        self.slots.len() as u64
    }

    /// The mode the ring was created in.
    pub fn mode(&self) -> SlotMode {
        self.mode
    }

    /// Slots reserved so far (every event written, overwritten or pending).
    pub fn head(&self) -> u64 {
        self.header.head.get() as u64
    }

    /// Events dropped because the ring was full.
    pub fn dropped(&self) -> u64 {
        self.header.dropped.get() as u64
    }

    /// Offers the writers' owner a larger ring of `bytes` bytes, for when this one's consumer
    /// falls behind (the consumer's side of `grow`, see the module docs): a hint, stored
    /// without ordering; 0 withdraws it (and the owner answers with 0, not moved, or
    /// [`GROWN`], moved).
    pub fn offer_to_grow(&self, bytes: u64) {
        self.header.grow.store(bytes, Ordering::Relaxed);
    }

    /// Offers a larger ring as [`offer_to_grow`](Self::offer_to_grow) does, only where no
    /// offer stands and none was taken (the word is 0): `Err` with the word found otherwise,
    /// another offer or [`GROWN`] (acquired, as [`growth_offered`](Self::growth_offered)
    /// does). A consumer that read 0 and then made the ring it offers may find that the owner
    /// has moved since, answering an earlier offer: a plain store would replace the answer,
    /// and the consumer would wait for a move already made. (No loom model: loom 0.7 lets a
    /// plain store fall between a read-modify-write's read and its write, tokio-rs/loom#254,
    /// so it finds this "replacing" the answer; the compare-exchange is one `lock cmpxchg`.)
    pub fn offer_to_grow_if_none(&self, bytes: u64) -> Result<(), u64> {
        self.header
            .grow
            .compare_exchange(0, bytes, Ordering::Relaxed, Ordering::Acquire)
            .map(|_| ())
    }

    /// The larger ring the consumer offers, in bytes (0: none; [`GROWN`]: the writers have
    /// moved to it). Acquire: see [`grown`](Self::grown).
    pub fn growth_offered(&self) -> u64 {
        self.header.growth_offered()
    }

    /// Whether the consumer is behind the writers: less than 1 / [`BEHIND_BELOW`] of the ring
    /// is left between the next reservation and the consumer's `limit` (or none at all). A
    /// writer's owner moves its writers to the larger ring offered then
    /// ([`growth_offered`](Self::growth_offered)), before the ring is full.
    pub fn behind(&self) -> bool {
        self.header.behind()
    }

    /// The writers' owner's answer to [`offer_to_grow`](Self::offer_to_grow): its writers have
    /// moved to the larger ring, and none reserves here any more (a write begun before may
    /// still commit). Release, paired with the consumer's acquire in
    /// [`growth_offered`](Self::growth_offered): a consumer that sees [`GROWN`] sees the head and
    /// every event committed here before, so a [`Drain::Final`] from then on has them all
    /// (and counts an unfinished write as lost).
    pub fn grown(&self) {
        self.header.grow.store(GROWN, Ordering::Release);
    }

    fn lap_bit(&self, index: u64) -> u32 {
        (((index >> self.shift) & 1) as u32) << 7
    }

    fn slot(&self, index: u64) -> &Slot {
        &self.slots[(index & (self.capacity() - 1)) as usize]
    }

    /// Asks the CPU to bring slot `index`'s cache line in ahead of its read: a consumer's
    /// slots were written on another CPU, and a line read only when reached is a miss the
    /// consumer waits for (a fifth of a drainer's time so); several in flight overlap.
    #[inline(always)]
    fn prefetch(&self, index: u64) {
        #[cfg(all(target_arch = "x86_64", not(loom)))]
        {
            let p: *const Slot = self.slot(index);
            // SAFETY: a prefetch is a hint: it reads nothing the program sees, faults never.
            unsafe {
                core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast())
            };
        }
        #[cfg(not(all(target_arch = "x86_64", not(loom))))]
        let _ = index;
    }

    /// Reserves the next slot (step 1 of the writer contract). On a full ring the reservation
    /// is given back (or padded) and counted as dropped.
    #[inline(always)]
    pub fn reserve(&self) -> Result<Reserved<'a>, Full> {
        let index = self.header.head.fetch_add(1) as u64;
        // Orders the reservation before the slot's stores, for readers that check `head`
        // after copying (overwrite mode).
        fence(Ordering::Release);
        crate::sync::inject::point("slot_reserved");
        if index > self.header.limit_seen.get() as u64 {
            return self.reserve_past_limit_seen(index);
        }
        Ok(Reserved { ring: *self, index })
    }

    /// `index` is past the limit the writers last saw: read the consumer's (acquire: the
    /// slots it has given back were read before it raised the limit), keep it for the next
    /// reserves, and give the reservation back if the ring is really full.
    #[cold]
    #[inline(never)]
    fn reserve_past_limit_seen(&self, index: u64) -> Result<Reserved<'a>, Full> {
        let limit = self.header.limit.load(Ordering::Acquire);
        crate::sync::inject::point("slot_limit_read");
        let look_again = index.saturating_add(self.capacity() / LOOK_AGAIN_EVERY);
        self.header.limit_seen.set(limit.min(look_again) as usize);
        if index > limit {
            self.give_back(index);
            return Err(Full);
        }
        Ok(Reserved { ring: *self, index })
    }

    #[cold]
    #[inline(never)]
    fn give_back(&self, index: u64) {
        self.header.dropped.inc();
        crate::sync::inject::point("slot_dropped");
        let next = (index + 1) as usize;
        if self.header.head.cmpxchg(next, index as usize) != next {
            // A nested writer reserved after us and found room: our slot is free as well.
            let s = self.slot(index);
            s.kind
                .store(KIND_PAD | self.lap_bit(index), Ordering::Release);
        }
    }

    /// Writes one event: [`reserve`](Self::reserve), fill, commit.
    #[inline(always)]
    pub fn write(&self, ev: SlotEvent) -> Result<(), Full> {
        self.reserve().map(|r| r.commit(ev))
    }

    /// Reserves `len` consecutive slots for one event that spans them (a record longer than
    /// one slot), with one read-modify-write of `head`, so no nested writer's slot falls
    /// between them. A span that cannot fit (`len` zero or above the capacity, or past the
    /// limit) is dropped and counted as one event, its reservation given back or padded as in
    /// [`reserve`](Self::reserve).
    #[inline]
    pub fn reserve_span(&self, len: u64) -> Result<Span<'a>, Full> {
        if len == 0 || len > self.capacity() {
            self.header.dropped.inc();
            return Err(Full);
        }
        let index = self.header.head.fetch_add(len as usize) as u64;
        fence(Ordering::Release);
        crate::sync::inject::point("slot_reserved");
        if index + (len - 1) > self.header.limit.load(Ordering::Acquire) {
            self.give_back_span(index, len);
            return Err(Full);
        }
        Ok(Span {
            ring: *self,
            index,
            len,
        })
    }

    #[cold]
    #[inline(never)]
    fn give_back_span(&self, index: u64, len: u64) {
        self.header.dropped.inc();
        crate::sync::inject::point("slot_dropped");
        let next = (index + len) as usize;
        if self.header.head.cmpxchg(next, index as usize) != next {
            // A nested writer reserved after us and found room: the limit is past the whole
            // span, so every slot of it is free, and becomes padding.
            for i in index..index + len {
                self.slot(i)
                    .kind
                    .store(KIND_PAD | self.lap_bit(i), Ordering::Release);
            }
        }
    }

    /// Writes one event over `1 + tail.len()` slots: [`reserve_span`](Self::reserve_span),
    /// then [`Span::commit`].
    #[inline]
    pub fn write_span(&self, head: SlotEvent, tail: &[SlotEvent]) -> Result<(), Full> {
        self.reserve_span(1 + tail.len() as u64)
            .map(|s| s.commit(head, tail))
    }

    /// What index `index` holds now.
    #[inline]
    pub fn read(&self, index: u64) -> SlotRead {
        let s = self.slot(index);
        let kind = s.kind.load(Ordering::Acquire);
        let committed = kind & KIND_MASK != 0 && (kind & KIND_LAP_BIT) == self.lap_bit(index);
        let ev = SlotEvent {
            ts: s.ts.load(Ordering::Relaxed),
            ip: s.ip.load(Ordering::Relaxed),
            arg: s.arg.load(Ordering::Relaxed),
            kind: kind & !KIND_LAP_BIT,
            cpu: s.cpu.load(Ordering::Relaxed),
        };
        // Pairs with the writer's fence after its reservation: if any field above came from
        // a writer of a later lap, the head below shows that writer's reservation.
        fence(Ordering::Acquire);
        // (In producer/consumer mode a reservation past the limit never writes, and the
        // limit stays below `index + capacity` until `index` is consumed.)
        if self.mode == SlotMode::Overwrite && self.head() > index.saturating_add(self.capacity()) {
            return SlotRead::Overwritten;
        }
        match (committed, kind & KIND_MASK) {
            (false, _) => SlotRead::Uncommitted,
            (true, KIND_PAD) => SlotRead::Pad,
            (true, _) => {
                #[cfg(loom)]
                if self.mode == SlotMode::ProducerConsumer {
                    s.owner.0.with(|_| ());
                }
                SlotRead::Event(ev)
            }
        }
    }

    /// Reads every event from `cursor` on, in order, calling `f(event, missed)` (`missed`:
    /// events lost just before this one); then, in producer/consumer mode, gives the slots
    /// read back to the writers. Stops at the head or, with [`Drain::Live`], at the first
    /// slot still being written. Returns the events delivered. Reads at most `capacity`
    /// slots whatever the header says (a damaged or hostile header cannot make it loop).
    /// Producer/consumer mode writes the header's `limit`: the ring must be writable.
    #[inline]
    pub fn consume(&self, cursor: &mut Cursor, drain: Drain, f: impl FnMut(SlotEvent, u64)) -> u64 {
        self.consume_at_most(cursor, drain, u64::MAX, f)
    }

    /// [`consume`](Self::consume), stopping after `max` events delivered (a consumer that
    /// encodes in batches bounds a batch's output with it); the slots read are given back
    /// all the same.
    #[inline]
    pub fn consume_at_most(
        &self,
        cursor: &mut Cursor,
        drain: Drain,
        max: u64,
        mut f: impl FnMut(SlotEvent, u64),
    ) -> u64 {
        let cap = self.capacity();
        // A writer counts a drop after comparing with the limit it saw, which is at most the
        // current one: the hole it leaves is at or before index `limit + 1` (the reservation
        // given back is reused by the next event), so the drops go on the first event there.
        let limit = self.header.limit.load(Ordering::Acquire);
        let dropped = self.dropped();
        let new = dropped.saturating_sub(cursor.dropped.saturating_add(cursor.pending));
        if new > 0 {
            if cursor.pending == 0 {
                cursor.hole_at = limit.saturating_add(1);
            }
            cursor.pending = cursor.pending.saturating_add(new);
        }
        let mut missed = 0u64;
        // A producer/consumer writer never fills more than `capacity` slots ahead of the
        // consumer: reservations beyond are drops in flight (or a damaged header), not events.
        let head = match self.mode {
            SlotMode::Overwrite => self.head(),
            SlotMode::ProducerConsumer => self.head().min(cursor.next.saturating_add(cap)),
        };
        let mut delivered = 0;
        while cursor.next < head && delivered < max {
            if self.mode == SlotMode::Overwrite && cursor.next.saturating_add(cap) < head {
                // Lapped (overwrite mode): those are gone.
                let skip = head - cap - cursor.next;
                cursor.overrun = cursor.overrun.saturating_add(skip);
                missed = missed.saturating_add(skip);
                cursor.next += skip;
                continue;
            }
            let ahead = cursor.next.saturating_add(PREFETCH_AHEAD);
            if ahead < head {
                self.prefetch(ahead);
            }
            match self.read(cursor.next) {
                SlotRead::Event(ev) => {
                    if cursor.pending > 0 && cursor.next >= cursor.hole_at {
                        missed = missed.saturating_add(cursor.pending);
                        cursor.dropped = cursor.dropped.saturating_add(cursor.pending);
                        cursor.pending = 0;
                    }
                    f(ev, missed);
                    missed = 0;
                    delivered += 1;
                }
                SlotRead::Pad => {}
                SlotRead::Uncommitted if drain == Drain::Live => break,
                SlotRead::Uncommitted | SlotRead::Overwritten => {
                    cursor.overrun = cursor.overrun.saturating_add(1);
                    missed = missed.saturating_add(1);
                }
            }
            cursor.next += 1;
        }
        cursor.read += delivered;
        if self.mode == SlotMode::ProducerConsumer {
            // Release: every slot below `next` has been copied before a writer may reuse it.
            self.header
                .limit
                .store(cursor.next.saturating_add(cap - 1), Ordering::Release);
        }
        delivered
    }
}

/// How far ahead of its read a consumer prefetches a slot: 128 slots, 4 KiB. A consumer on
/// another CPU than the writer takes each line from the writer's cache; 16 slots ahead (8
/// lines) left the drainer of a two-thread program waiting on the slot's first load for a
/// sixth of its time, 12-15 ns an event against 10.5-13.5 at 64 and 10.3-10.6 at 128 (live,
/// 100 M events, perf samples of the drainer threads, 3 runs each).
const PREFETCH_AHEAD: u64 = 128;

/// A reserved slot: fill and commit it with [`commit`](Self::commit).
#[derive(Debug)]
#[must_use = "a reserved slot must be committed"]
pub struct Reserved<'a> {
    ring: SlotRing<'a>,
    index: u64,
}

impl Reserved<'_> {
    /// The slot's index (recording order within the ring).
    pub fn index(&self) -> u64 {
        self.index
    }

    /// Fills the slot and commits it (steps 2 and 3 of the writer contract).
    #[inline(always)]
    pub fn commit(self, ev: SlotEvent) {
        debug_assert!(ev.kind & KIND_MASK != 0 && ev.kind & KIND_MASK != KIND_PAD);
        let s = self.ring.slot(self.index);
        #[cfg(loom)]
        s.owner.0.with_mut(|_| ());
        s.ts.store(ev.ts, Ordering::Relaxed);
        s.ip.store(ev.ip, Ordering::Relaxed);
        s.arg.store(ev.arg, Ordering::Relaxed);
        s.cpu.store(ev.cpu, Ordering::Relaxed);
        crate::sync::inject::point("slot_filled");
        let kind = (ev.kind & !KIND_LAP_BIT) | self.ring.lap_bit(self.index);
        s.kind.store(kind, Ordering::Release);
    }
}

/// Consecutive reserved slots for one event: commit them with [`commit`](Self::commit).
#[derive(Debug)]
#[must_use = "a reserved span must be committed"]
pub struct Span<'a> {
    ring: SlotRing<'a>,
    index: u64,
    len: u64,
}

impl Span<'_> {
    /// The index of the span's first slot.
    pub fn index(&self) -> u64 {
        self.index
    }

    /// Fills and commits the span: the `tail` slots first, in order, then the `head` slot
    /// (the first index) last, so a reader that finds the head committed finds the whole
    /// tail committed too (the head's release store orders the tail's before it). A reader
    /// that stops at the first uncommitted slot therefore never delivers part of a span.
    /// `tail` must hold `len - 1` events.
    #[inline]
    pub fn commit(self, head: SlotEvent, tail: &[SlotEvent]) {
        debug_assert_eq!(tail.len() as u64 + 1, self.len);
        for (i, ev) in tail.iter().enumerate().take((self.len - 1) as usize) {
            Reserved {
                ring: self.ring,
                index: self.index + 1 + i as u64,
            }
            .commit(*ev);
        }
        Reserved {
            ring: self.ring,
            index: self.index,
        }
        .commit(head);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sync::inject;
    use std::vec::Vec;

    fn ring(cap: u64, mode: SlotMode) -> (RingHeader, Vec<Slot>) {
        (
            RingHeader::new(cap, mode),
            (0..cap).map(|_| Slot::default()).collect(),
        )
    }

    fn ev(n: u64) -> SlotEvent {
        SlotEvent {
            ts: n,
            ip: n * 3,
            arg: n * 7,
            kind: 1 | ((n as u32 & 0xff) << 8),
            cpu: n as u32 & 3,
        }
    }

    fn drain(r: &SlotRing, c: &mut Cursor, d: Drain) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        r.consume(c, d, |e, m| {
            assert_eq!(e, ev(e.ts), "event intact");
            out.push((e.ts, m));
        });
        out
    }

    #[test]
    fn overwrite_keeps_newest_and_counts_overrun() {
        let (h, s) = ring(8, SlotMode::Overwrite);
        let r = SlotRing::new(&h, &s).unwrap();
        for n in 0..21 {
            r.write(ev(n)).unwrap();
        }
        let mut c = Cursor::default();
        let got = drain(&r, &mut c, Drain::Final);
        assert_eq!(got.first(), Some(&(13, 13)));
        assert_eq!(
            got.iter().map(|g| g.0).collect::<Vec<_>>(),
            (13..21).collect::<Vec<_>>()
        );
        assert_eq!((c.overrun, c.dropped), (13, 0));
    }

    #[test]
    fn producer_consumer_drops_counts_and_resumes() {
        let (h, s) = ring(4, SlotMode::ProducerConsumer);
        let r = SlotRing::new(&h, &s).unwrap();
        let mut c = Cursor::default();
        let mut all = Vec::new();
        for n in 0..6 {
            let _ = r.write(ev(n));
        }
        all.extend(drain(&r, &mut c, Drain::Live));
        for n in 6..9 {
            r.write(ev(n)).unwrap();
        }
        all.extend(drain(&r, &mut c, Drain::Live));
        // 4 and 5 were dropped: the head gave them back, 6 took index 4.
        assert_eq!(
            all,
            [(0, 0), (1, 0), (2, 0), (3, 0), (6, 2), (7, 0), (8, 0)]
        );
        assert_eq!((c.dropped, c.overrun, c.read, r.head()), (2, 0, 7, 7));
    }

    #[test]
    fn an_offer_to_grow_is_read_back_and_changes_nothing_else() {
        let (h, s) = ring(4, SlotMode::ProducerConsumer);
        let r = SlotRing::new(&h, &s).unwrap();
        assert_eq!(r.growth_offered(), 0);
        r.write(ev(0)).unwrap();
        r.offer_to_grow(1 << 20);
        assert_eq!(r.growth_offered(), 1 << 20);
        // The writer goes on in this ring, and the consumer reads it as before.
        r.write(ev(1)).unwrap();
        let mut c = Cursor::default();
        assert_eq!(drain(&r, &mut c, Drain::Live), [(0, 0), (1, 0)]);
        r.offer_to_grow(0);
        assert_eq!(r.growth_offered(), 0);
    }

    /// An offer made only where none stands replaces neither another offer nor the owner's
    /// answer that it has moved.
    #[test]
    fn an_offer_if_none_leaves_another_offer_and_a_move_alone() {
        let (h, s) = ring(4, SlotMode::ProducerConsumer);
        let r = SlotRing::new(&h, &s).unwrap();
        assert_eq!(r.offer_to_grow_if_none(1 << 20), Ok(()));
        assert_eq!(r.offer_to_grow_if_none(1 << 22), Err(1 << 20));
        assert_eq!(r.growth_offered(), 1 << 20);
        r.grown();
        assert_eq!(r.offer_to_grow_if_none(1 << 20), Err(GROWN));
        assert_eq!(r.growth_offered(), GROWN);
        r.offer_to_grow(0);
        assert_eq!(r.offer_to_grow_if_none(1 << 22), Ok(()));
        assert_eq!(r.growth_offered(), 1 << 22);
    }

    /// A writer past its copy of the limit keeps at most an eighth of the ring of it, so that
    /// it looks again while a consumer that stopped still leaves it room; the consumer is
    /// behind once less than a quarter of the ring is left ahead of the writers.
    /// On the first lap too a writer looks at the consumer's limit every eighth of the ring,
    /// so that a consumer that has not started yet is seen behind before the ring is full.
    #[test]
    fn a_writer_looks_at_the_limit_from_its_first_lap_on() {
        let (h, s) = ring(32, SlotMode::ProducerConsumer);
        let r = SlotRing::new(&h, &s).unwrap();
        assert_eq!(h.limit_seen.get(), 4, "an eighth of the ring");
        for n in 0..6 {
            r.write(ev(n)).unwrap();
        }
        assert_eq!(h.limit_seen.get(), 5 + 4, "looked at 5");
        for n in 6..23 {
            r.write(ev(n)).unwrap();
        }
        // Nothing consumed: a quarter of the ring left ahead (limit 31, head 23); one more
        // and the writer sees the consumer behind, with room left to move.
        assert!(!r.behind());
        r.write(ev(23)).unwrap();
        assert!(r.behind());
        assert_eq!(h.limit_seen.get(), 20 + 4, "looked at 10, 15 and 20");
        assert_eq!(r.dropped(), 0);
    }

    #[test]
    fn a_writer_looks_again_every_eighth_of_the_ring_and_sees_the_consumer_behind() {
        // The numbers below are for these.
        assert_eq!((LOOK_AGAIN_EVERY, BEHIND_BELOW), (8, 4));
        let (h, s) = ring(32, SlotMode::ProducerConsumer);
        let r = SlotRing::new(&h, &s).unwrap();
        for n in 0..32 {
            r.write(ev(n)).unwrap();
        }
        assert!(r.behind(), "a full ring");
        let mut c = Cursor::default();
        assert_eq!(drain(&r, &mut c, Drain::Live).len(), 32);
        assert!(!r.behind(), "all of it read: the consumer's limit is 63");
        r.write(ev(32)).unwrap();
        assert_eq!(h.limit_seen.get(), 32 + 4);
        for n in 33..56 {
            assert!(!r.behind(), "{} slots ahead", 63 - n + 1);
            r.write(ev(n)).unwrap();
        }
        // From index 56 on, less than a quarter of the ring (8 slots) is left.
        assert!(r.behind());
        assert_eq!(
            h.limit_seen.get(),
            52 + 4,
            "looked again at 37, 42, 47 and 52"
        );
        for n in 56..64 {
            r.write(ev(n)).unwrap();
        }
        assert_eq!(
            h.limit_seen.get(),
            63,
            "the consumer's limit, nearer than 62 + 4"
        );
        assert_eq!(r.write(ev(64)), Err(Full));
        assert_eq!(
            drain(&r, &mut c, Drain::Live).len(),
            32,
            "nothing lost by looking"
        );
    }

    #[test]
    fn consume_at_most_stops_after_max_events_and_gives_back_what_it_read() {
        let (h, s) = ring(4, SlotMode::ProducerConsumer);
        let r = SlotRing::new(&h, &s).unwrap();
        for n in 0..4 {
            r.write(ev(n)).unwrap();
        }
        assert_eq!(r.write(ev(4)), Err(Full));
        let mut c = Cursor::default();
        let mut got = Vec::new();
        let n = r.consume_at_most(&mut c, Drain::Live, 3, |e, m| got.push((e.ts, m)));
        assert_eq!((n, c.next), (3, 3));
        // Three slots given back: three more events fit, the fourth does not.
        for n in 5..8 {
            r.write(ev(n)).unwrap();
        }
        assert_eq!(r.write(ev(8)), Err(Full));
        got.extend(drain(&r, &mut c, Drain::Live));
        assert_eq!(got[..4], [(0, 0), (1, 0), (2, 0), (3, 0)]);
        assert_eq!(got[4..].iter().map(|g| g.0).collect::<Vec<_>>(), [5, 6, 7]);
        assert_eq!(r.dropped(), 2);
    }

    #[test]
    fn live_drain_stops_at_an_unfinished_slot_final_counts_it() {
        let (h, s) = ring(8, SlotMode::ProducerConsumer);
        let r = SlotRing::new(&h, &s).unwrap();
        r.write(ev(0)).unwrap();
        let pending = r.reserve().unwrap();
        r.write(ev(2)).unwrap();
        let mut c = Cursor::default();
        assert_eq!(drain(&r, &mut c, Drain::Live), [(0, 0)]);
        assert_eq!(c.next, 1);
        let idx = pending.index();
        drop(pending); // the writer died here, never committing
        assert_eq!(idx, 1);
        assert_eq!(drain(&r, &mut c, Drain::Final), [(2, 1)]);
        assert_eq!(c.overrun, 1);
    }

    #[test]
    fn a_span_reads_whole_or_not_at_all_and_a_full_one_is_one_drop() {
        let (h, s) = ring(8, SlotMode::ProducerConsumer);
        let r = SlotRing::new(&h, &s).unwrap();
        r.write(ev(0)).unwrap();
        let span = r.reserve_span(3).unwrap();
        assert_eq!(span.index(), 1);
        r.write(ev(4)).unwrap(); // a nested writer lands after the whole span
        let mut c = Cursor::default();
        assert_eq!(drain(&r, &mut c, Drain::Live), [(0, 0)]);
        span.commit(ev(1), &[ev(2), ev(3)]);
        assert_eq!(
            drain(&r, &mut c, Drain::Live),
            [(1, 0), (2, 0), (3, 0), (4, 0)]
        );
        // 5 slots written unread, 3 free: a span of 4 is dropped (one event), 3 fit.
        for n in 20..25 {
            r.write(ev(n)).unwrap();
        }
        assert_eq!(r.write_span(ev(5), &[ev(6), ev(7), ev(8)]), Err(Full));
        assert_eq!(r.dropped(), 1);
        assert_eq!(r.head(), 10, "the reservation was given back");
        r.write_span(ev(9), &[ev(10), ev(11)]).unwrap();
        assert_eq!(r.reserve_span(9).unwrap_err(), Full); // larger than the ring
        assert_eq!(r.reserve_span(0).unwrap_err(), Full);
        assert_eq!(r.dropped(), 3);
        let got = drain(&r, &mut c, Drain::Live);
        let ts: Vec<u64> = got.iter().map(|g| g.0).collect();
        assert_eq!(ts, [20, 21, 22, 23, 24, 9, 10, 11]);
        assert_eq!(c.dropped + c.pending_drops(), 3, "every drop counted");
    }

    #[test]
    fn a_span_wraps_around_the_ring_in_overwrite_mode() {
        let (h, s) = ring(4, SlotMode::Overwrite);
        let r = SlotRing::new(&h, &s).unwrap();
        for n in 0..3 {
            r.write(ev(n)).unwrap();
        }
        r.write_span(ev(3), &[ev(4), ev(5)]).unwrap();
        let mut c = Cursor::default();
        let got = drain(&r, &mut c, Drain::Final);
        assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), [2, 3, 4, 5]);
        assert_eq!(c.overrun, 2);
    }

    /// A nested writer between the span's reservation (found full) and its give-back, after
    /// a consumer made room: the span becomes padding, read by no one.
    #[test]
    fn a_full_span_overtaken_by_a_nested_writer_is_padding() {
        let (h, s) = ring(4, SlotMode::ProducerConsumer);
        let r = SlotRing::new(&h, &s).unwrap();
        for n in 0..3 {
            r.write(ev(n)).unwrap();
        }
        let hp: *const RingHeader = &h;
        let sp: *const [Slot] = &s[..];
        let fired = std::rc::Rc::new(core::cell::Cell::new(false));
        let f2 = fired.clone();
        inject::set(Some(std::boxed::Box::new(move |at| {
            if at != "slot_dropped" || f2.get() {
                return;
            }
            f2.set(true);
            // SAFETY: `h` and `s` outlive the hook (removed before they drop).
            let r = SlotRing::new(unsafe { &*hp }, unsafe { &*sp }).unwrap();
            let mut c = Cursor::default();
            r.consume(&mut c, Drain::Live, |_, _| {});
            r.write(ev(9)).unwrap();
        })));
        assert_eq!(r.write_span(ev(3), &[ev(4)]), Err(Full));
        inject::set(None);
        assert!(fired.get());
        assert_eq!((r.head(), r.dropped()), (6, 1));
        let mut c = Cursor {
            next: 3,
            ..Cursor::default()
        };
        let got = drain(&r, &mut c, Drain::Final);
        assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), [9]);
        assert_eq!((c.overrun, c.dropped + c.pending_drops()), (0, 1));
    }

    #[test]
    fn zeroed_memory_is_empty_and_bad_capacity_refused() {
        let (h, s) = ring(8, SlotMode::Overwrite);
        let r = SlotRing::new(&h, &s).unwrap();
        assert_eq!(r.read(0), SlotRead::Uncommitted);
        let h3 = RingHeader::new(3, SlotMode::Overwrite);
        assert_eq!(SlotRing::new(&h3, &s).unwrap_err(), SlotError::Capacity);
        let h16 = RingHeader::new(16, SlotMode::Overwrite);
        assert_eq!(SlotRing::new(&h16, &s).unwrap_err(), SlotError::TooFewSlots);
    }

    /// Runs `outer` events with a whole nested write injected at `step` of the `nth` one
    /// (at `slot_dropped` and `slot_limit_read`, a consumer drains first, making room), then
    /// drains; every event
    /// must read back intact, in order, and every drop be counted.
    fn inject_at(mode: SlotMode, cap: u64, outer: u64, nth: u64, step: &'static str) {
        use std::cell::RefCell;
        use std::rc::Rc;
        let (h, s) = ring(cap, mode);
        let hp: *const RingHeader = &h;
        let sp: *const [Slot] = &s[..];
        let mut count = 0u64;
        let shared = Rc::new(RefCell::new((Cursor::default(), Vec::new(), false)));
        let hook_shared = shared.clone();
        inject::set(Some(std::boxed::Box::new(move |at| {
            if at != step {
                return;
            }
            count += 1;
            if count != nth + 1 {
                return;
            }
            // SAFETY: `h` and `s` outlive the hook (removed before they drop).
            let r = SlotRing::new(unsafe { &*hp }, unsafe { &*sp }).unwrap();
            let mut st = hook_shared.borrow_mut();
            if at == "slot_dropped" || at == "slot_limit_read" {
                let (c, got, _) = &mut *st;
                got.extend(drain(&r, c, Drain::Live));
            }
            let _ = r.write(ev(1000));
            st.2 = true;
        })));
        let r = SlotRing::new(&h, &s).unwrap();
        let mut written = Vec::new();
        let mut full = 0;
        for n in 0..outer {
            match r.write(ev(n)) {
                Ok(()) => written.push(n),
                Err(Full) => full += 1,
            }
        }
        inject::set(None);
        let (mut c, mut got, fired) = shared.take();
        assert!(fired, "{step} #{nth} never reached");
        got.extend(drain(&r, &mut c, Drain::Final));
        let mut seen: Vec<u64> = got.iter().map(|g| g.0).collect();
        seen.retain(|&t| t != 1000);
        assert_eq!(
            c.overrun + c.read + pads(&r),
            r.head(),
            "{step} #{nth}: every index accounted"
        );
        if mode == SlotMode::ProducerConsumer {
            assert_eq!(seen, written, "{step} #{nth}");
            assert_eq!(c.overrun, 0, "{step} #{nth}: nothing unfinished");
            let told = c.dropped + c.pending_drops();
            assert!(
                told >= full && told == r.dropped(),
                "{step} #{nth}: drops counted"
            );
        } else {
            assert_eq!(
                &written[written.len() - seen.len()..],
                &seen[..],
                "{step} #{nth}"
            );
        }
    }

    fn pads(r: &SlotRing) -> u64 {
        (r.head().saturating_sub(r.capacity())..r.head())
            .filter(|&i| r.read(i) == SlotRead::Pad)
            .count() as u64
    }

    #[test]
    fn nested_write_at_every_step_of_an_outer_write() {
        for mode in [SlotMode::Overwrite, SlotMode::ProducerConsumer] {
            for nth in 0..6 {
                // Reservations happen full or not; fills only with room.
                inject_at(mode, 4, 6, nth, "slot_reserved");
                inject_at(mode, 8, 6, nth, "slot_filled");
            }
        }
        // A nested writer between a full outer reservation and its give-back, after the
        // consumer made room: the outer slot becomes a pad, nothing is read twice or lost
        // uncounted.
        for nth in 0..2 {
            inject_at(SlotMode::ProducerConsumer, 4, 6, nth, "slot_dropped");
        }
        // A nested writer between a writer's read of the consumer's limit (full) and its
        // store into `limit_seen`, after the consumer made room: the nested writer sees the
        // new limit and writes; the outer one stores the older limit (a later writer only looks
        // again), finds itself full and pads.
        for nth in 0..2 {
            inject_at(SlotMode::ProducerConsumer, 4, 6, nth, "slot_limit_read");
        }
    }
}
