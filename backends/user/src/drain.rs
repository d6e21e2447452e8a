//! Draining a recording while the program runs: the tool's consumer of the agent's
//! per-thread rings in producer/consumer mode ([`ftrace_agent::buffer`]).
//!
//! A [`Drainer`] thread finds every `buf-<tid>` file the agent creates under the ring
//! directory (all process images, `<pid>.<n>/`; a [`RingDir`] on tmpfs, so that the pages the
//! program writes never go to disk), maps it, and consumes its ring from a cursor: each
//! committed event is appended to the thread's `events-<tid>` file in the recording
//! directory's `<pid>.<n>/` in the compact form of
//! [`crate::stream`], with the ring's drop counts where the holes are, and the slots read are
//! given back to the writer (the ring's `limit`). A full ring drops and counts, the program
//! never waits for the tool. A thread that has exited is drained to its end, its events file
//! closed and its ring file removed while the program goes on (so short-lived threads cost no
//! memory later); at the end every ring left is drained the same way.
//! The tool's pages of a ring larger than the default are given back every MiB it consumes
//! (`RingMapping::release_slots`): the tool's memory is a window of such a ring, not the
//! ring. Likewise the events files' pages in the page cache, once written back
//! ([`crate::writebehind`]): new pages are what writing them costs on a VM whose free memory
//! goes back to its host, and the pages let go are the ones the next writes reuse. Measured
//! (one machine, one session, 15 interleaved recordings each of the stream-check program's
//! 100 M calls, while its two threads still shared a cache line): events lost in 15 of 15
//! recordings without (1.3-25 M each), in none with; over 30 more, in 5 (0.06-1.7 M each).
//! With the advice given by a thread of its own (the drainers only write): 30 interleaved
//! each, 0 lost against 1; the drainers' waits in the kernel (state D) over 20 recordings
//! 21 ms in all against 219.
//!
//! There is a drainer thread per CPU (at most [`MAX_THREADS`]); each drains, pass after pass,
//! the rings no other thread is draining at the moment (`Rings`). A call-dense
//! thread writes an event every 10-15 ns and a drainer reads, encodes and writes one in about
//! 11: with as many busy program threads as CPUs, a single drainer would get a CPU share of
//! one thread among them and fall behind the writers (a two-thread program on two CPUs lost
//! 13 % of its events so); a drainer per CPU gets half the machine and keeps up. Only the
//! first (the leader) polls: the others (helpers) sleep until the leader finds more than one
//! ring with a backlog, and go back to sleep once `HELPER_EMPTY_PASSES` passes in a row (a
//! millisecond) find nothing to take. A helper that polled all along would wake every few
//! hundred microseconds on the CPU of a single busy program thread, to find the one ring
//! taken, and preempt it (a one-thread program ran 10-30 % slower so). Each thread drains a
//! ring a `TURN` at a time, so that every ring with a backlog is visited about every
//! millisecond, whatever their sizes. A drainer that a pass leaves a quarter of a ring behind
//! on a ring that cannot grow any more moves to the CPU of that ring's writer until it has caught
//! up ([`crate::placement`]): the scheduler can leave both drainers beside one writer while
//! the other writer has a CPU to itself. One that keeps up keeps off its busy writers' CPUs
//! while it has another (`BUSY_WRITER_EVENTS` in a pass make a writer busy): a kernel that
//! packs threads woke it beside the writer.
//!
//! A thread whose drainer falls behind gets a larger ring ([`Growth`]): for every ring, at its
//! first pass, the tool makes a ring file four times the size (up to the recording's maximum)
//! beside it, `grow-<tid>.<bytes>`, and offers it in the ring's header; the agent moves the
//! thread to it when the thread finds less than a quarter of its ring left ahead of it
//! ([`ftrace_ringbuf::slot::SlotRing::behind`], [`ftrace_agent::grow`]), which it checks every
//! eighth of a ring. The writer decides, not the drainer: a drainer falls behind when it does
//! not run (its CPU taken by the program or the kernel for a millisecond or two, a page
//! fault, a slow write), and cannot then notice anything; deciding from the drainer's passes
//! (a quarter of the ring to read at a pass: the previous rule) came after the ring had
//! filled, and a function_graph fib(27) lost events in 3 of 5 recordings so, none of 10 with
//! the writer deciding. The old ring is drained as any other (its events file is a file of
//! the thread's, as after a resize) and finished once the thread has moved
//! ([`ftrace_ringbuf::slot::GROWN`]) and `RETIRE_AFTER` (10 ms) has passed with nothing new in
//! it: its pages are freed (the program keeps the mapping) and its file removed; an offer
//! never taken goes with its ring. So a short program pays for the default ring only, and a
//! thread whose drainer falls behind for the ring it needs; all the rings and the files offered
//! to them together grow to at most four times the largest ring (an offer counts from when it
//! is made: all the threads may take theirs at once; a thread's own offer, below, from when
//! the drainer finds it, and is not held back).
//!
//! A larger ring's file is sized but not reserved: reserving 32 MiB takes 14 ms on a VM, during
//! which the full ring drops events (a million of fib(30)'s, tried); its pages are allocated as
//! the thread first writes them (about 2.5-3.5 us a page on a VM: the first lap of a 32 MiB
//! ring costs the thread some 20-28 ms), which slows the thread while the tool catches up.
//!
//! So the first ring is small (2 MiB, [`crate::record::STREAM_BUFFER_KB`]): each of its pages
//! costs every recording a fault on the first lap (3.5-4 us a page on a VM) and its freeing,
//! and a thread whose drainer keeps up needs no more. (The first thread's ring, the tool's
//! spare, has its pages made by the tool while the program starts, on another CPU:
//! [`RingDir::make_spare`].) But a drainer that shares its CPU with
//! the program's other threads may reach a new ring only after the thread has filled it: the
//! offer made at the first pass comes too late. So every ring a thread makes, takes or moves
//! to comes with the next offer made by the thread itself
//! (`ftrace_agent::handler::offer_itself`, up to the maximum the tool passes in
//! `ftrace_agent::config::ENV_GROW_MAX_BYTES`), and a writer looks at the consumer's limit
//! from the first eighth of its first lap on (`ftrace_ringbuf::slot::RingHeader::new`). The
//! drainer finds such an offer at its first pass and counts it as its own. Measured (one
//! machine, one session): the two-thread program of `cargo xtask stream-check` (10 M calls)
//! with a 2 MiB first ring lost 1-321 K events in 8 of 10 runs, each time in a first ring
//! filled before its first pass (8 MiB: 0 in 6 of 6); with the thread's own offers 0 in 8 of 8.
//! fib(27) end to end, 10 interleaved runs each, against an 8 MiB first ring: function
//! 16.2-36.2 ms (median 23.1) against 23.4-57.1 (26.2), function_graph 22.5-33.9 (31.3)
//! against 28.8-48.2 (31.6). A page that cannot be allocated
//! would kill the thread (`SIGBUS`), so the tool offers a ring only while its file system has
//! four times the new file's size free.
//!
//! Invariant: every event a thread committed is in its events file exactly once, in the
//! thread's order, or counted in a lost record at the place it was lost; a ring file is removed
//! only after its events file is complete (end record written and flushed); a ring is drained
//! by one drainer thread only.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ftrace_agent::buffer::{SPARE_FILE, SPARE_IN_PROGRESS, grow_file_name, reserve_ahead};
use ftrace_ringbuf::slot::{Cursor, Drain};

use crate::placement::{Placement, Race};
use crate::precedence::Yield;
use crate::prefault::PageMaker;
use crate::recording::is_event_of_its_own;
use crate::ringmap::{Access, RingMapping, SLOTS_PER_PAGE};
use crate::stream::{FILE_PREFIX, StreamHeader, StreamWriter};
use crate::writebehind::WriteBehind;

/// Offers a ring is made again after its thread answered it had not moved (see
/// `Drained::offer`): a cause that lasts costs a file and a failed move a few times only.
const MAX_REOFFERS: u8 = 4;
/// How long a thread's answer "not moved" lasts before the ring is offered again: 2 ms (a
/// move answers 0, then "moved", within microseconds).
const REOFFER_AFTER: Duration = Duration::from_millis(2);
/// How long the drainer sleeps when a pass found nothing to read.
const IDLE_SLEEP: Duration = Duration::from_micros(500);
/// How long it sleeps instead while it has found no ring yet, for at most
/// [`FIRST_RING_WITHIN`] after it started: a call-dense thread fills three quarters of its
/// first ring in half a millisecond (fib's, 2 MiB) and moves to a larger one (whose first
/// lap's page faults cost it 5-10 ms) if the drainer has not read it by then. With the idle
/// sleep the leader found fib(27)'s first ring 0.4-2.5 ms after it started (4 recordings; 2
/// after the move); polling (and the spare's page writer, as it then was, yielding as it went
/// to idle priority), 1.0-1.5 ms after (5 recordings, its looks 0.13 ms apart: the program's
/// loading and the agent's start take the rest).
const FIRST_RING_POLL: Duration = Duration::from_micros(50);
/// How long after its start the drainer looks for the first ring every [`FIRST_RING_POLL`].
const FIRST_RING_WITHIN: Duration = Duration::from_millis(50);
/// A pass that leaves a ring at its largest size at least this-th full has its drainer
/// losing the race ([`crate::placement`]): a quarter. With half (tried first), the two-thread
/// program of stream-check lost events in 6 of 30 recordings (19 M in all), with a quarter
/// in 4 of 30 (0.7 M), interleaved.
const LOSING_FILL: u64 = 4;
/// A drainer held to a writer's CPU lets go once its passes leave every ring less than this-th
/// full: an eighth.
const CAUGHT_UP_FILL: u64 = 8;
/// How long it sleeps after a pass that found every ring less than [`BUSY_FILL`] full: it
/// reads in batches instead of chasing the writers slot by slot (a slot read just after it
/// was written is a cache line taken from the writer's core, which the writer then takes
/// back for the slot next to it).
const BATCH_SLEEP: Duration = Duration::from_micros(200);
/// The fraction of a ring (1 / this) that, found filled in one pass, makes the drainer go on
/// at once.
const BUSY_FILL: u64 = 4;
/// Events a pass takes from a ring for its writer to count as busy, one whose CPU the
/// drainer keeps off ([`crate::placement`]): a thousand in the few hundred microseconds
/// between two passes, a writer that can outrun a drainer it shares its CPU with.
const BUSY_WRITER_EVENTS: u64 = 1024;
/// How often it looks for new ring files while events keep coming (and on every pass that
/// found nothing to read).
const SCAN_EVERY: Duration = Duration::from_millis(1);
/// Events encoded per batch (what one reservation of the output buffer holds).
const BATCH: u64 = 4096;
/// The encoded bytes a drainer that has caught up with a ring's writer writes through at once
/// (else at 256 KiB, the events file's own flush size): what is left when the program exits
/// is written then, on the way to the tool's exit (fib(27), 16 interleaved recordings: the
/// last write 53 us against 92, median; the drainer's finish 758 against 832).
const CAUGHT_UP_FLUSH: usize = 64 << 10;
/// The most slots one drainer thread consumes from one ring before it turns to the other
/// rings (and, the leader, wakes helpers for them): 2 MiB of slots, about a millisecond.
/// A ring's worth was the rule: a 64 MiB ring's backlog (2 M events) took the leader 40 to
/// 90 ms, through which the other thread's ring went undrained when the helper had parked on
/// an empty pass, and filled: a two-thread program of 100 M calls lost 145 K events so in a
/// ring of the maximum size (a poll of the rings' headers saw it, the drainer's own timings
/// the long drains).
const TURN: u64 = 1 << 16;
/// Passes in a row that find nothing to take (each followed by [`BATCH_SLEEP`]) before a
/// helper parks until the leader wakes it again. Parking on the first was the rule: a helper
/// woken for two busy rings found both taken or just drained and parked, while the leader
/// drained both rings in turn, each at half its pace; a two-thread program's helper spent 0.7
/// of its 1.8 s run parked so (the drainers' own counts), the program losing events.
const HELPER_EMPTY_PASSES: u32 = 5;
/// Slots the drainer consumes between two returns of the pages it has read
/// ([`RingMapping::release_slots`]) in a ring larger than [`RELEASE_ABOVE`]: 1 MiB of slots,
/// so that the tool maps about that much of such a ring rather than all of it (a ring of
/// 64 MiB would otherwise cost the tool 64 MiB of memory once read through).
const RELEASE_EVERY: u64 = 1 << 15;
/// The ring size (slots: 8 MiB, the default) up to which the tool keeps a ring mapped whole.
/// Pages given back are mapped again on the next lap (a fault per few pages), and the unmaps
/// interrupt the tool's other threads to flush their TLBs: with the default rings, which a
/// call-dense thread laps every few milliseconds, that cost the drainer enough to lose more
/// events (two threads, 10 M calls, 6 runs each: 0.5-3.0 M lost against 0-2.3 M), for memory
/// the ring's size bounds anyway.
const RELEASE_ABOVE: u64 = 1 << 18;
/// How long a ring whose thread has moved to a larger one must stay without a new event
/// before it is finished (a write the move interrupted commits there within microseconds;
/// one still open then is counted as lost).
const RETIRE_AFTER: Duration = Duration::from_millis(10);
/// Bytes of a ring file's header and of a slot.
const HEADER_BYTES: u64 = ftrace_agent::buffer::HEADER_SIZE as u64;
const SLOT_BYTES: u64 = ftrace_agent::buffer::SLOT_SIZE as u64;
/// How often it checks whether the threads of idle rings have exited.
const EXIT_CHECK_EVERY: Duration = Duration::from_millis(50);
/// The most drainer threads (one per CPU up to this).
pub const MAX_THREADS: usize = 8;

/// One ring being drained into its events file.
struct Drained {
    ring_file: PathBuf,
    events_file: PathBuf,
    map: RingMapping,
    cursor: Cursor,
    out: StreamWriter<WriteBehind>,
    /// Events moved, each counted once: the slots that continue another record (a return
    /// value, a stack record's frames, a trace event's data) and stack records (not carried
    /// into recordings) are no events of their own (`recording::is_event_of_its_own`).
    events: u64,
    /// The ring index below which the tool's pages of the ring have been given back.
    released: u64,
    /// Whether a larger ring was offered.
    offered: OfferState,
    /// Offers made again after the thread answered it had not moved ([`MAX_REOFFERS`]).
    reoffers: u8,
    /// Since when the thread's answer to the offer has been "not moved".
    declined: Option<Instant>,
    /// Since when the ring's thread has been seen moved to a larger ring with nothing new
    /// here.
    retired: Option<Instant>,
    /// Slots in the ring, as its header said when draining began.
    capacity: u64,
    pid: u32,
    tid: u32,
}

/// Where a ring is in offering a larger one ([`Growth`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OfferState {
    /// Not yet (no file could be made so far, or the rings' total forbade it).
    NotYet,
    /// A ring file of this many bytes offered: counted in the rings' total (`Found::offered`)
    /// until it is taken (then it is a ring, counted as one once found) or this ring is
    /// finished.
    Made(u64),
    /// Taken: the thread has moved to the ring offered.
    Taken,
    /// Never: the ring is at the maximum already.
    Never,
}

/// Whether the tool offers threads larger rings (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Growth {
    /// Every ring keeps the size it was made with (`--buffer-size`, or rings the tool cannot
    /// make files beside).
    Fixed,
    /// Rings grow four times at a time, up to this many bytes of ring file.
    UpTo(u64),
}

impl Growth {
    /// Bytes of the ring file offered to a ring of `capacity` slots
    /// ([`ftrace_agent::grow::offer_bytes`]); `None` when rings keep their size or this one
    /// is at the maximum already.
    pub fn offer_bytes(self, capacity: u64) -> Option<u64> {
        match self {
            Growth::Fixed => None,
            Growth::UpTo(max) => ftrace_agent::grow::offer_bytes(capacity, max),
        }
    }

    /// The largest ring file a thread may offer itself (0: rings keep their size;
    /// `ftrace_agent::config::ENV_GROW_MAX_BYTES`).
    pub fn max_bytes(self) -> u64 {
        match self {
            Growth::Fixed => 0,
            Growth::UpTo(max) => max,
        }
    }
}

impl Drained {
    /// Starts draining `ring_file` into the namesake directory of its own under `out`.
    fn start(ring_file: &Path, out: &Path) -> Result<Option<Drained>, String> {
        let Some(map) = RingMapping::open(ring_file, Access::ReadWrite) else {
            return Ok(None);
        };
        // (Overwritten since `open` checked it: no ring yet, as a file without its header.)
        let Some(view) = map.view() else {
            return Ok(None);
        };
        let capacity = view.ring().capacity();
        let header = StreamHeader {
            pid: view.pid(),
            tid: view.tid(),
            comm: view.comm(),
        };
        let name = ring_file
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("buf-"))
            .unwrap_or_default();
        let instance = ring_file
            .parent()
            .and_then(|p| p.file_name())
            .ok_or_else(|| format!("{}: not in an instance directory", ring_file.display()))?;
        let events_dir = out.join(instance);
        // A ring file removed early may be followed by one of the same name (a new thread
        // with the same tid): its events go to a new file, never over the old one.
        let mut k = 0;
        let (path, f) = loop {
            let path = match k {
                0 => events_dir.join(format!("{FILE_PREFIX}{name}")),
                _ => events_dir.join(format!("{FILE_PREFIX}{name}-{k}")),
            };
            match File::create_new(&path) {
                Ok(f) => break (path, f),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && k < 10_000 => k += 1,
                Err(e) => return Err(format!("{}: {e}", path.display())),
            }
        };
        let out = StreamWriter::new(WriteBehind::new(f), &header)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Some(Drained {
            ring_file: ring_file.to_path_buf(),
            events_file: path,
            cursor: Cursor::default(),
            out,
            events: 0,
            released: 0,
            offered: OfferState::NotYet,
            reoffers: 0,
            declined: None,
            retired: None,
            capacity,
            pid: header.pid,
            tid: header.tid,
            map,
        }))
    }

    /// Moves what the ring holds into the events file; the number of events moved. Events go
    /// in batches of [`BATCH`]: one capacity check per batch, then a few stores per event,
    /// and a `write` per 256 KiB of records.
    fn drain(&mut self, drain: Drain) -> Result<u64, String> {
        let Some(view) = self.map.view() else {
            return Err(self.damaged());
        };
        let ring = view.ring();
        // Live, at most a turn's worth per call: the other rings' turn comes first. At the end,
        // everything there is (at most a ring's worth).
        let most = match drain {
            Drain::Live => self.capacity.min(TURN),
            Drain::Final => self.capacity,
        };
        let mut moved = 0;
        loop {
            let mut batch = self.out.batch(BATCH as usize);
            let mut events = 0;
            let n = ring.consume_at_most(&mut self.cursor, drain, BATCH, |ev, missed| {
                events += u64::from(is_event_of_its_own(&ev));
                batch.event(&ev, missed);
            });
            drop(batch);
            self.events += events;
            moved += n;
            self.out
                .flush_if_full()
                .map_err(|e| format!("{}: {e}", self.events_file.display()))?;
            let next = self.cursor.next;
            if ring.capacity() > RELEASE_ABOVE && next - self.released >= RELEASE_EVERY {
                let to = next - next % SLOTS_PER_PAGE;
                self.map.release_slots(self.released, to, ring.capacity());
                self.released = to;
            }
            if n < BATCH && drain == Drain::Live {
                // Caught up: what it holds goes out now, not at the end.
                self.out
                    .flush_if_at_least(CAUGHT_UP_FLUSH)
                    .map_err(|e| format!("{}: {e}", self.events_file.display()))?;
            }
            if n < BATCH || moved >= most {
                return Ok(moved);
            }
        }
    }

    /// The ring, while its header holds: the program shares the file, and one that writes
    /// over its own buffer can overwrite the header too ([`Drained::damaged`]).
    fn ring(&self) -> Option<ftrace_ringbuf::slot::SlotRing<'_>> {
        self.map.view().map(|v| v.ring())
    }

    /// The error of a ring whose header no longer holds.
    fn damaged(&self) -> String {
        format!(
            "{}: the ring's header was overwritten while it was drained (the program wrote \
             over its own trace buffer): thread {}'s events end where it was, in {}",
            self.ring_file.display(),
            self.tid,
            self.events_file.display()
        )
    }

    /// Bytes of the ring file.
    fn file_bytes(&self) -> u64 {
        HEADER_BYTES + self.capacity() * SLOT_BYTES
    }

    /// After a pass that moved `moved` events: whether the ring's thread has moved to a
    /// larger ring and nothing has come here for [`RETIRE_AFTER`] (then it is to be
    /// finished).
    fn retired(&mut self, moved: u64) -> bool {
        let Some(ring) = self.ring() else {
            return false;
        };
        if ring.growth_offered() != ftrace_ringbuf::slot::GROWN || moved > 0 {
            self.retired = None;
            return false;
        }
        let since = *self.retired.get_or_insert_with(Instant::now);
        since.elapsed() >= RETIRE_AFTER
    }

    /// Slots in the ring.
    fn capacity(&self) -> u64 {
        self.capacity
    }

    /// At each pass, where the ring is in offering a larger one ([`OfferState`]): when `growth`
    /// allows it, makes the thread a ring file four times the size (at most the maximum) and
    /// offers it, for the thread to take if this drainer falls behind (see the module docs),
    /// once per ring (while the rings' total or the file system's room forbids it, at a later
    /// pass); once the thread has taken it (the agent's answer), the rings' total forgets the
    /// offer, the new ring counting there once found.
    fn offer(&mut self, growth: Growth, rings: &Rings) {
        match self.offered {
            OfferState::NotYet => self.make_offer(growth, rings),
            OfferState::Made(bytes)
                if self
                    .ring()
                    .is_some_and(|r| r.growth_offered() == ftrace_ringbuf::slot::GROWN) =>
            {
                self.offered = OfferState::Taken;
                rings.forget_offer(bytes);
                // The thread took a file of this name: one still there is an offer of the
                // tool's made as the thread moved (`make_offer`), which nothing will take.
                let _ = std::fs::remove_file(self.offer_file(bytes));
            }
            // The thread's answer "not moved" (it found no file of the size offered): offered
            // again, a file made anew, a few times at most. Without it the thread stayed in
            // its ring for good: a two-thread recording of 100 M calls kept one thread in its
            // 8 MiB ring to the end and lost 5.5 M events in 28 holes. Only an answer that
            // lasts (`REOFFER_AFTER`): a thread that is moving answers 0 first and "moved" a
            // few microseconds later, and an offer made in between would replace the file it
            // offers itself for its next ring.
            OfferState::Made(bytes)
                if self.reoffers < MAX_REOFFERS
                    && self.ring().is_some_and(|r| r.growth_offered() == 0) =>
            {
                let since = *self.declined.get_or_insert_with(Instant::now);
                if since.elapsed() >= REOFFER_AFTER {
                    self.declined = None;
                    self.reoffers += 1;
                    self.offered = OfferState::NotYet;
                    rings.forget_offer(bytes);
                }
            }
            OfferState::Made(_) | OfferState::Taken | OfferState::Never => {}
        }
    }

    /// [`Drained::offer`]'s first step: makes and offers the larger ring file.
    fn make_offer(&mut self, growth: Growth, rings: &Rings) {
        let Growth::UpTo(max) = growth else {
            return;
        };
        let (Some(dir), Some(ring)) = (self.ring_file.parent(), self.ring()) else {
            return;
        };
        match ring.growth_offered() {
            0 => {}
            // The thread offered itself a ring when it made its own
            // (`ftrace_agent::config::ENV_GROW_MAX_BYTES`): counted from now on as the
            // tool's offers are; or it has moved there already.
            ftrace_ringbuf::slot::GROWN => {
                self.offered = OfferState::Taken;
                return;
            }
            bytes => {
                let mut found = lock(&rings.found);
                found.offered = found.offered.saturating_add(bytes);
                self.offered = OfferState::Made(bytes);
                return;
            }
        }
        let Some(bytes) = growth.offer_bytes(self.capacity()) else {
            self.offered = OfferState::Never;
            return;
        };
        if reserve_ahead(free_bytes(dir), bytes) {
            return;
        }
        {
            // Every offer counts, taken or not: all the threads may take theirs at once.
            let mut found = lock(&rings.found);
            let total = found.bytes.saturating_add(found.offered);
            if total.saturating_add(bytes) > max.saturating_mul(4) {
                return;
            }
            found.offered += bytes;
        }
        let path = self.offer_file(bytes);
        // Made as `grow-<tid>.new`, renamed when whole.
        if make_ring_file(
            &path.with_extension("new"),
            &path,
            bytes,
            Pages::OnFirstWrite,
        )
        .is_err()
        {
            rings.forget_offer(bytes);
            return;
        }
        // Only where the word is still 0: the thread may have answered an earlier offer
        // (moved, or offered itself a ring) while the file was made.
        match ring.offer_to_grow_if_none(bytes) {
            Ok(()) => self.offered = OfferState::Made(bytes),
            // Its own offer of this size, whose file the tool's replaced: the same offer.
            Err(word) if word == bytes => self.offered = OfferState::Made(bytes),
            // Moved, or another offer: seen as at the start (above) at the next pass.
            Err(_) => {
                rings.forget_offer(bytes);
                let _ = std::fs::remove_file(&path);
            }
        }
    }

    /// Bytes of the ring file offered (0: none), counted in the rings' total until this ring
    /// is finished.
    fn offered_bytes(&self) -> u64 {
        match self.offered {
            OfferState::Made(bytes) => bytes,
            OfferState::NotYet | OfferState::Taken | OfferState::Never => 0,
        }
    }

    /// The file of the larger ring of `bytes` bytes offered to the ring's thread.
    fn offer_file(&self, bytes: u64) -> PathBuf {
        self.ring_file
            .with_file_name(grow_file_name(self.tid, bytes))
    }

    /// Whether the thread writing the ring is gone.
    fn writer_exited(&self) -> bool {
        !Path::new(&format!("/proc/{}/task/{}", self.pid, self.tid)).exists()
    }

    /// Drains the rest (the writer is gone, or writes elsewhere) and completes the events
    /// file: what the thread recorded here. A ring that can no longer be read
    /// ([`Drained::damaged`]) still gets its events file completed with what it gave, and
    /// its count, besides the error.
    fn finish(mut self) -> Finish {
        let drained = self.drain(Drain::Final);
        // (A damaged ring's words went with its header.)
        let (word, dropped) = self
            .ring()
            .map_or((0, 0), |ring| (ring.growth_offered(), ring.dropped()));
        // An offer its thread never took (it has exited, or the program has): its file goes.
        let offered = self.offered_bytes();
        if offered != 0 && word != 0 && word != ftrace_ringbuf::slot::GROWN {
            let _ = std::fs::remove_file(self.offer_file(offered));
        }
        let events = &self.events_file;
        let io = |e: std::io::Error| format!("{}: {e}", events.display());
        // Drops counted after the last event have no event to precede: they end the file.
        let counted = self.out.lost();
        let all = dropped.saturating_add(self.cursor.overrun);
        self.out.lost_here(all.saturating_sub(counted));
        let count = ThreadCount {
            tid: self.tid,
            events: self.events,
            lost: self.out.lost(),
        };
        match self.out.finish().map_err(io) {
            Ok(_) => Finish {
                count: Some(count),
                error: drained.err(),
            },
            Err(e) => Finish {
                count: None,
                error: Some(e),
            },
        }
    }
}

/// The ring files under `dir` (`<pid>.<n>/buf-*`) not yet in `known`.
fn new_ring_files(dir: &Path, known: &HashSet<PathBuf>) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(procs) = std::fs::read_dir(dir) else {
        return found;
    };
    for p in procs.flatten() {
        let Ok(files) = std::fs::read_dir(p.path()) else {
            continue;
        };
        for f in files.flatten() {
            let path = f.path();
            let is_ring = f
                .file_name()
                .to_str()
                .is_some_and(|n| n.starts_with("buf-"));
            if is_ring && !known.contains(&path) {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// Where the tmpfs ring directories go.
const TMPFS: &str = "/dev/shm";

/// The directory a streamed recording's ring files live in while the program runs: a private
/// directory on tmpfs (`/dev/shm`) when the machine has one, so that the ring pages the program
/// keeps rewriting are never written back to disk (on a disk file system the kernel writes
/// dirty shared pages back and write-protects them again, a page fault per page per pass);
/// else the recording directory itself. A private directory is removed, with what is left in
/// it, when this is dropped.
#[derive(Debug)]
pub struct RingDir {
    path: PathBuf,
    private: bool,
}

impl RingDir {
    /// A new private ring directory on tmpfs, or `out` if none can be made there.
    pub fn create(out: &Path) -> RingDir {
        use std::os::unix::fs::DirBuilderExt;
        let pid = std::process::id();
        for n in 0..1000 {
            let path = Path::new(TMPFS).join(format!("ftrace-rings.{pid}.{n}"));
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => {
                    return RingDir {
                        path,
                        private: true,
                    };
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(_) => break,
            }
        }
        RingDir {
            path: out.to_path_buf(),
            private: false,
        }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether rings may grow here ([`Growth`]): the files the tool makes for them are
    /// removed with a private directory, whatever the program took.
    pub fn growth(&self, wanted: Growth) -> Growth {
        if self.private { wanted } else { Growth::Fixed }
    }

    /// Puts a spare ring file of `bytes` here ([`SPARE_FILE`]), when this is a private tmpfs
    /// directory: sized (its space reserved only on a file system short of room,
    /// [`reserve_ahead`]: the program's first thread waited the 3 ms that reserving 8 MiB
    /// takes on a VM, to write a few pages of it in a short program), then
    /// renamed into place whole, for the program's first thread to take instead of making
    /// its ring itself. Made while the program starts (exec, loading, the agent's start-up),
    /// so that this cost leaves the program's path. Best effort: a thread that finds no spare
    /// makes its file itself. (The drainer looks for rings only in the process directories:
    /// a spare is never drained.) Then its pages are made (`Pages::Made`) by `pages` until
    /// it is stopped (the program has exited): the program's first thread, which goes
    /// through its ring's first lap within milliseconds in a call-dense program, maps them
    /// instead of having each made by a fault ([`crate::prefault`] for the figures).
    pub fn make_spare(&self, bytes: usize, pages: &PageMaker) {
        if !self.private {
            return;
        }
        let tmp = self.path.join(SPARE_IN_PROGRESS);
        let spare = self.path.join(SPARE_FILE);
        let _ = make_ring_file(&tmp, &spare, bytes as u64, Pages::Made(pages));
    }
}

/// What [`make_ring_file`] does with a ring file's pages.
#[derive(Clone, Copy, Debug)]
enum Pages<'a> {
    /// Nothing: each is made when the thread first writes it (reserved ahead only on a file
    /// system short of room, [`reserve_ahead`]).
    OnFirstWrite,
    /// Made by this maker ([`crate::prefault`]) once the file is in place: the thread that
    /// takes it meanwhile does not wait, and finds made the pages the maker reached before it.
    /// Best effort: a page left out is made at its first write. Until the maker is stopped.
    Made(&'a PageMaker),
}

/// Makes the ring file `path` of `bytes` (zero-filled) for a thread to take whole: made as
/// `tmp`, its space reserved ahead only on a file system short of room ([`reserve_ahead`]),
/// its pages as `pages` says, then renamed into place; nothing is left on failure.
fn make_ring_file(tmp: &Path, path: &Path, bytes: u64, pages: Pages<'_>) -> std::io::Result<()> {
    use std::os::fd::AsRawFd as _;
    let reserve = reserve_ahead(tmp.parent().and_then(free_bytes), bytes);
    let made = File::create_new(tmp)
        .and_then(|f| {
            f.set_len(bytes)?;
            // SAFETY: a plain syscall on a file of ours.
            if reserve && unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, bytes as libc::off_t) } != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(f)
        })
        .and_then(|f| std::fs::rename(tmp, path).map(|()| f))
        .map(|f| {
            if let Pages::Made(maker) = pages {
                maker.make(&f, bytes);
            }
        });
    if made.is_err() {
        let _ = std::fs::remove_file(tmp);
    }
    made
}

/// A finished ring's file being removed ([`Rings::remove`]).
enum Removal {
    /// By this thread.
    Running(std::thread::JoinHandle<Result<(), String>>),
    /// Already.
    Done(Result<(), String>),
}

/// Frees the pages of the ring file `path` ([`free_pages`]) and removes it.
fn remove_ring_file(path: &Path) -> Result<(), String> {
    free_pages(path);
    std::fs::remove_file(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// Frees the pages of the ring file `path` (a hole punched over all of it; best effort: a
/// file system without holes keeps them until the file is gone and unmapped).
fn free_pages(path: &Path) {
    use std::os::fd::AsRawFd as _;
    if let Ok(f) = std::fs::OpenOptions::new().write(true).open(path) {
        if let Ok(m) = f.metadata() {
            // SAFETY: a plain syscall on a file of ours.
            unsafe {
                libc::fallocate(
                    f.as_raw_fd(),
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    0,
                    m.len() as libc::off_t,
                )
            };
        }
    }
}

/// The bytes an unprivileged user may still write to the file system of `dir`.
fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt as _;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: a zeroed statvfs is a valid out-parameter; `c` is a valid path.
    unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        (libc::statvfs(c.as_ptr(), &mut st) == 0).then(|| st.f_bavail.saturating_mul(st.f_frsize))
    }
}

impl Drop for RingDir {
    fn drop(&mut self) {
        if self.private {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// What was recorded of one thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadCount {
    /// The thread id.
    pub tid: u32,
    /// Events recorded.
    pub events: u64,
    /// Events lost (the ring was full, or a write never finished).
    pub lost: u64,
}

/// What finishing a ring gave ([`Drained::finish`]).
struct Finish {
    /// What its thread recorded there, when its events file was completed.
    count: Option<ThreadCount>,
    /// Why it ended early, if it did.
    error: Option<String>,
}

/// What the drainers recorded ([`Drainer::finish`]).
#[derive(Debug, Default)]
pub struct Finished {
    /// What each thread recorded, by thread id (a thread that moved to larger rings has a
    /// count per ring).
    pub counts: Vec<ThreadCount>,
    /// Every error met, in the order met: rings ended early (damaged, or their events files
    /// could not be written), ring files not removed. Empty: every ring was recorded whole.
    pub errors: Vec<String>,
    /// The program's threads that outran their drainers and ran at a lower priority from then
    /// on ([`crate::precedence`]): thread id and new nice value, by thread id.
    pub yielded: Vec<(u32, i32)>,
}

/// What one pass over the rings did.
struct Pass {
    /// Events moved.
    moved: u64,
    /// A ring was found at least [`BUSY_FILL`]-th full, or had more than a [`TURN`].
    busy: bool,
    /// Rings with work for a thread of their own: events found in them, or being drained by
    /// another thread.
    wanted: usize,
    /// What the rings finished in the pass recorded (rings whose threads moved to larger
    /// ones).
    finished: Vec<ThreadCount>,
    /// How far behind its writers the pass left this thread ([`Placement::follow`]).
    race: Race,
}

/// One ring found, drained by one drainer thread at a time (`None` once finished).
type SharedRing = Arc<Mutex<Option<Drained>>>;

/// The rings found, shared by the drainer threads: a thread drains whichever rings no other
/// thread is draining at the moment (their locks free), so that two busy rings get a thread
/// each whatever the order they were found in.
struct Rings {
    found: Mutex<Found>,
    growth: Growth,
    /// The finished rings' files being removed, or removed ([`Rings::remove`]).
    removing: Mutex<Vec<Removal>>,
    /// The helper threads (all but the leader), woken when rings want them.
    helpers: std::sync::OnceLock<Vec<std::thread::Thread>>,
    /// Why rings were finished early, while the others went on (told at the end).
    errors: Mutex<Vec<String>>,
    /// What the rings a helper finished recorded, handed over before it parks: a helper
    /// parked at the end is not waited for ([`Drainer::finish`]).
    handed_over: Mutex<Vec<ThreadCount>>,
    /// Whether the recording is ending ([`Drainer::finish`]): the drainer threads finish
    /// every ring left and stop, and a finished ring's file is removed by the thread that
    /// finished it ([`Rings::remove`]).
    ending: AtomicBool,
    /// Whether threads that outrun their drainers are made to yield to them.
    yielding: Yield,
    /// The threads that outran their drainers and were made to yield to them
    /// ([`crate::precedence`]), with their new nice values (`None`: it could not be changed),
    /// by thread id: each once.
    yielded: Mutex<BTreeMap<u32, Option<i32>>>,
}

#[derive(Default)]
struct Found {
    /// The ring files being drained (a removed ring's path leaves with it: a new file of
    /// the same name is a new ring).
    paths: HashSet<PathBuf>,
    rings: Vec<SharedRing>,
    /// Bytes of the ring files being drained.
    bytes: u64,
    /// Bytes of the ring files offered to them (`OfferState::Made`), taken or not.
    offered: u64,
    /// The ring files whose events files could not be made, with why: tried again at each
    /// scan, told at the end if never started ([`Rings::tell_unstarted`]).
    unstarted: HashMap<PathBuf, String>,
}

/// `m` locked, whatever a panicking holder left (the drainer's state stays consistent: a
/// ring is finished or not, its file removed last).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Rings {
    /// No rings yet; they will grow as `growth` allows.
    fn new(growth: Growth) -> Rings {
        Rings {
            found: Mutex::default(),
            growth,
            removing: Mutex::default(),
            helpers: std::sync::OnceLock::new(),
            errors: Mutex::default(),
            handed_over: Mutex::default(),
            ending: AtomicBool::new(false),
            yielding: Yield::WhenBehind,
            yielded: Mutex::default(),
        }
    }

    /// Makes thread `tid`, which outran its drainer, yield to the drainers
    /// ([`crate::precedence`]), once (unless they never do, [`Yield::Never`]).
    fn yield_writer(&self, tid: u32) {
        if self.yielding == Yield::Never {
            return;
        }
        lock(&self.yielded)
            .entry(tid)
            .or_insert_with(|| crate::precedence::yield_to_drainer(tid).ok());
    }

    /// Takes `bytes` of offered ring files out of the rings' total (`Found::offered`).
    fn forget_offer(&self, bytes: u64) {
        let mut found = lock(&self.found);
        found.offered = found.offered.saturating_sub(bytes);
    }

    /// Keeps `error` to be told at the end (once: finishing a ring that ended in an error
    /// may meet it again).
    fn tell(&self, error: String) {
        let mut errors = lock(&self.errors);
        if !errors.contains(&error) {
            errors.push(error);
        }
    }

    /// Waits for every finished ring's file to be removed ([`Rings::remove`]), keeping the
    /// errors ([`Rings::tell`]).
    fn wait_removals(&self) {
        let removals = std::mem::take(&mut *lock(&self.removing));
        for r in removals {
            let r = match r {
                Removal::Running(t) => t
                    .join()
                    .unwrap_or_else(|_| Err("a ring remover panicked".to_string())),
                Removal::Done(r) => r,
            };
            if let Err(e) = r {
                self.tell(e);
            }
        }
    }
    /// Starts draining the ring files under `dir` not yet found ([`Drained::start`]); a ring
    /// without its header yet is left for a later pass, and so is one whose events file
    /// cannot be made (its error kept, [`Found::unstarted`]), while the others go on.
    fn scan(&self, dir: &Path, out: &Path) {
        let mut found = lock(&self.found);
        for path in new_ring_files(dir, &found.paths) {
            match Drained::start(&path, out) {
                Ok(Some(d)) => {
                    found.unstarted.remove(&path);
                    found.bytes += d.file_bytes();
                    found.paths.insert(path);
                    found.rings.push(Arc::new(Mutex::new(Some(d))));
                }
                Ok(None) => {}
                Err(e) => {
                    found.unstarted.insert(path, e);
                }
            }
        }
    }

    /// Keeps the errors of the rings never started ([`Found::unstarted`]) to be told.
    fn tell_unstarted(&self) {
        let unstarted = std::mem::take(&mut lock(&self.found).unstarted);
        let mut errors: Vec<(PathBuf, String)> = unstarted.into_iter().collect();
        errors.sort();
        for (_, e) in errors {
            self.tell(e);
        }
    }

    /// The rings, the `me`th first (threads start their passes at different rings).
    fn list(&self, me: usize) -> Vec<SharedRing> {
        let mut rings = lock(&self.found).rings.clone();
        if !rings.is_empty() {
            let k = me % rings.len();
            rings.rotate_left(k);
        }
        rings
    }

    /// One pass of drainer thread `me`: moves what every ring no other thread is draining
    /// holds into its events file.
    fn pass(&self, me: usize) -> Pass {
        let mut pass = Pass {
            moved: 0,
            busy: false,
            wanted: 0,
            finished: Vec::new(),
            race: Race::default(),
        };
        let mut losing = 0;
        let mut losing_writer = None;
        for ring in self.list(me) {
            let Ok(mut slot) = ring.try_lock() else {
                pass.wanted += 1;
                continue;
            };
            let Some(d) = slot.as_mut() else {
                continue;
            };
            d.offer(self.growth, self);
            let n = match d.drain(Drain::Live) {
                Ok(n) => n,
                Err(e) => {
                    // This ring is done for (damaged, or its events file cannot be written):
                    // finished with what it gave, the error told at the end; the other rings
                    // go on.
                    self.tell(e);
                    pass.finished.extend(self.finish(&ring, &mut slot));
                    continue;
                }
            };
            // A ring left at the end of its turn has more: the next pass comes at once.
            pass.busy |= n >= d.capacity() / BUSY_FILL || n >= TURN;
            if let Some(r) = d.ring() {
                let left = r.head().saturating_sub(d.cursor.next).min(d.capacity());
                pass.race.behind |= left >= d.capacity() / CAUGHT_UP_FILL;
                let losing_here = left >= d.capacity() / LOSING_FILL
                    && left > losing
                    && self.growth.offer_bytes(d.capacity()).is_none();
                // Read once: the newest slots are the lines the writer is writing.
                let newest = (losing_here || n >= BUSY_WRITER_EVENTS)
                    .then(|| newest_cpu(&r))
                    .flatten();
                if n >= BUSY_WRITER_EVENTS {
                    pass.race.writing_on.extend(newest);
                }
                if losing_here {
                    losing = left;
                    pass.race.losing_on = newest;
                    losing_writer = Some(d.tid);
                }
            }
            pass.wanted += usize::from(n > 0);
            pass.moved += n;
            if d.retired(n) {
                pass.finished.extend(self.finish(&ring, &mut slot));
            }
        }
        if let Some(tid) = losing_writer {
            self.yield_writer(tid);
        }
        pass.race.writing_on.sort_unstable();
        pass.race.writing_on.dedup();
        pass
    }

    /// Wakes as many helpers as the rings want threads besides the leader.
    fn wake_helpers(&self, wanted: usize) {
        for h in self
            .helpers
            .get()
            .into_iter()
            .flatten()
            .take(wanted.saturating_sub(1))
        {
            h.unpark();
        }
    }

    /// Removes the ring file `path` of a finished ring, on a thread of its own (freeing a
    /// large ring's pages takes milliseconds, which the drainers spend draining); the program
    /// may still map it (a thread that moved to a larger ring, or alive at the end): its pages
    /// are freed now, not when it exits. [`Drainer::finish`] waits for it. At the end
    /// ([`Rings::ending`]) there is nothing left to drain: the file is removed here, without
    /// a thread to start (50-200 us at the end of every recording on a VM, whose idle CPU
    /// the new thread had to wake).
    fn remove(&self, path: PathBuf) {
        // Out of the scan's sight first (it looks for `buf-*`): a file still there when the
        // ring is forgotten would be found again as a new ring.
        let gone = path.with_file_name(
            path.file_name()
                .and_then(|n| n.to_str())
                .map_or_else(|| "gone".into(), |n| n.replacen("buf-", "gone-", 1)),
        );
        let path = match std::fs::rename(&path, &gone) {
            Ok(()) => gone,
            Err(_) => path,
        };
        if self.ending.load(Ordering::Acquire) {
            lock(&self.removing).push(Removal::Done(remove_ring_file(&path)));
            return;
        }
        let theirs = path.clone();
        let spawned = std::thread::Builder::new()
            .name("ftrace-free".into())
            .spawn(move || remove_ring_file(&theirs));
        let removal = match spawned {
            Ok(t) => Removal::Running(t),
            Err(_) => Removal::Done(remove_ring_file(&path)),
        };
        lock(&self.removing).push(removal);
    }

    /// Finishes the rings no other thread is draining whose writers have exited.
    fn finish_exited(&self, me: usize) -> Vec<ThreadCount> {
        let mut done = Vec::new();
        for ring in self.list(me) {
            let Ok(mut slot) = ring.try_lock() else {
                continue;
            };
            if slot.as_ref().is_some_and(Drained::writer_exited) {
                done.extend(self.finish(&ring, &mut slot));
            }
        }
        done
    }

    /// Finishes the ring `slot` holds ([`Drained::finish`]) and forgets it: what its thread
    /// recorded there, unless its events file could not be completed (the error kept,
    /// [`Rings::tell`]).
    fn finish(&self, ring: &SharedRing, slot: &mut Option<Drained>) -> Option<ThreadCount> {
        let d = slot.take()?;
        let path = d.ring_file.clone();
        let bytes = d.file_bytes();
        let offered = d.offered_bytes();
        let damaged = d.ring().is_none();
        let Finish { count, error } = d.finish();
        // A finished ring's file goes, and a damaged one's (no ring to find again); one whose
        // events file could not be completed stays, the rest of its events in it.
        if count.is_some() || damaged {
            self.remove(path.clone());
        }
        if let Some(e) = error {
            self.tell(e);
        }
        let mut found = lock(&self.found);
        found.bytes = found.bytes.saturating_sub(bytes);
        found.offered = found.offered.saturating_sub(offered);
        found.paths.remove(&path);
        found.rings.retain(|r| !Arc::ptr_eq(r, ring));
        count
    }
}

/// The drainer threads of one recording directory.
pub struct Drainer {
    rings: Arc<Rings>,
    threads: Vec<std::thread::JoinHandle<Vec<ThreadCount>>>,
    /// Per thread, whether it is parked ([`HelperState`]; the leader's stays `Running`).
    states: Arc<[AtomicU8]>,
}

/// Where a helper is, for [`Drainer::finish`]: a helper parked at the end has nothing to do
/// and is not waited for (waking a parked thread took 85-220 us at the end of a recording on
/// a VM, whose idle CPU it had to wake first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum HelperState {
    /// Draining, or about to look at the rings.
    Running = 0,
    /// Parked, or about to park, its counts handed over ([`Rings::handed_over`]).
    Parked = 1,
    /// Parked at the end: it returns as soon as it wakes, touching nothing.
    Abandoned = 2,
}

impl std::fmt::Debug for Drainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Drainer")
            .field("threads", &self.threads.len())
            .finish_non_exhaustive()
    }
}

impl Drainer {
    /// Starts draining the rings the agent creates under `rings` into events files under the
    /// recording directory `out` (`rings` may be `out` itself): a thread per CPU, at most
    /// [`MAX_THREADS`]; rings grow as `growth` allows; a program thread that outruns its
    /// drainer yields to it as `yielding` says ([`crate::precedence`]).
    pub fn start(rings: &Path, out: &Path, growth: Growth, yielding: Yield) -> Drainer {
        let n = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, MAX_THREADS);
        let shared = Arc::new(Rings {
            yielding,
            ..Rings::new(growth)
        });
        let states: Arc<[AtomicU8]> = (0..n)
            .map(|_| AtomicU8::new(HelperState::Running as u8))
            .collect();
        let threads: Vec<_> = (0..n)
            .map(|me| {
                let (rings, out) = (rings.to_path_buf(), out.to_path_buf());
                let (shared, states) = (shared.clone(), states.clone());
                std::thread::Builder::new()
                    .name("ftrace-drain".into())
                    .spawn(move || run(me, &shared, &rings, &out, &states[me]))
                    .expect("spawning a drain thread")
            })
            .collect();
        let helpers = threads[1..].iter().map(|t| t.thread().clone()).collect();
        let _ = shared.helpers.set(helpers);
        Drainer {
            rings: shared,
            threads,
            states,
        }
    }

    /// Ends the recording (call it once the traced program has exited): drains every ring to
    /// its end, completes the events files and removes the ring files; what each thread
    /// recorded, by thread id, and every error met.
    pub fn finish(self) -> Finished {
        self.rings.ending.store(true, Ordering::SeqCst);
        // Wakes them if they wait for events: the program is gone, nothing more will come. A
        // parked helper holds no ring (the leader finishes them all) and has handed its counts
        // over: woken, but not waited for.
        let mut waited = Vec::new();
        for (t, state) in self.threads.into_iter().zip(self.states.iter()) {
            let parked = state.compare_exchange(
                HelperState::Parked as u8,
                HelperState::Abandoned as u8,
                Ordering::SeqCst,
                Ordering::SeqCst,
            );
            t.thread().unpark();
            if parked.is_err() {
                waited.push(t);
            }
        }
        let mut counts = Vec::new();
        for t in waited {
            match t.join() {
                Ok(c) => counts.extend(c),
                Err(_) => self.rings.tell("a drain thread panicked".to_string()),
            }
        }
        counts.append(&mut lock(&self.rings.handed_over));
        self.rings.tell_unstarted();
        self.rings.wait_removals();
        counts.sort_by_key(|c| c.tid);
        let yielded = lock(&self.rings.yielded)
            .iter()
            .filter_map(|(tid, nice)| Some((*tid, (*nice)?)))
            .collect();
        Finished {
            counts,
            errors: std::mem::take(&mut *lock(&self.rings.errors)),
            yielded,
        }
    }
}

/// Drainer thread `me` (0: the leader, the others helpers): drains the rings no other thread
/// is draining until the recording ends ([`Rings::ending`]), then finishes every ring left.
fn run(me: usize, shared: &Rings, dir: &Path, out: &Path, state: &AtomicU8) -> Vec<ThreadCount> {
    let stop = &shared.ending;
    let mut done = Vec::new();
    let mut last_scan: Option<Instant> = None;
    let mut last_exit_check = Instant::now();
    let mut idle = true;
    let leader = me == 0;
    let mut placement = Placement::of_this_thread();
    let started = Instant::now();
    let mut found_ring = false;
    // A helper starts parked.
    let mut empty_passes = HELPER_EMPTY_PASSES;
    loop {
        let stopping = stop.load(Ordering::Acquire);
        if !leader && !stopping {
            let Pass {
                moved,
                busy,
                finished,
                race,
                ..
            } = shared.pass(me);
            done.extend(finished);
            placement.follow(&race);
            let wait;
            (wait, empty_passes) = helper_wait(empty_passes, moved, busy);
            match wait {
                // Nothing it may take for a while: until the leader (or the end) wakes it.
                HelperWait::Park => {
                    lock(&shared.handed_over).append(&mut done);
                    state.store(HelperState::Parked as u8, Ordering::SeqCst);
                    if !stop.load(Ordering::SeqCst) {
                        std::thread::park();
                    }
                    let was = state.swap(HelperState::Running as u8, Ordering::SeqCst);
                    if was == HelperState::Abandoned as u8 {
                        return done;
                    }
                    empty_passes = 0;
                }
                HelperWait::Sleep => pause(BATCH_SLEEP, stop),
                HelperWait::No => {}
            }
            continue;
        }
        if stopping || idle || last_scan.is_none_or(|t| t.elapsed() >= SCAN_EVERY) {
            shared.scan(dir, out);
            last_scan = Some(Instant::now());
        }
        if stopping {
            for ring in shared.list(me) {
                // Waits for a thread draining it: then it is finished, or this one does it.
                let mut slot = lock(&ring);
                done.extend(shared.finish(&ring, &mut slot));
            }
            return done;
        }
        let Pass {
            moved,
            busy,
            wanted,
            finished,
            race,
        } = shared.pass(me);
        done.extend(finished);
        placement.follow(&race);
        shared.wake_helpers(wanted);
        idle = moved == 0;
        if !found_ring {
            found_ring = !lock(&shared.found).rings.is_empty();
        }
        if !idle && !busy {
            pause(BATCH_SLEEP, stop);
        }
        if idle {
            if last_exit_check.elapsed() >= EXIT_CHECK_EVERY {
                last_exit_check = Instant::now();
                done.extend(shared.finish_exited(me));
            }
            let first = !found_ring && started.elapsed() < FIRST_RING_WITHIN;
            pause(if first { FIRST_RING_POLL } else { IDLE_SLEEP }, stop);
        }
    }
}

/// What a helper does after a pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum HelperWait {
    /// Parks until the leader (or the end) wakes it.
    Park,
    /// Sleeps [`BATCH_SLEEP`].
    Sleep,
    /// Goes on at once.
    No,
}

/// After a helper's pass that moved `moved` events (`busy`: [`Pass::busy`]), with
/// `empty_passes` passes in a row before it that found nothing: what it does, and the count
/// of empty passes from then on ([`HELPER_EMPTY_PASSES`]).
fn helper_wait(empty_passes: u32, moved: u64, busy: bool) -> (HelperWait, u32) {
    let empty = match moved {
        0 => empty_passes.saturating_add(1),
        _ => 0,
    };
    let wait = match (empty > HELPER_EMPTY_PASSES, busy) {
        (true, _) => HelperWait::Park,
        (false, false) => HelperWait::Sleep,
        (false, true) => HelperWait::No,
    };
    (wait, empty)
}

/// The CPU of the newest event committed in `ring` (of the last few reserved), if any.
fn newest_cpu(ring: &ftrace_ringbuf::slot::SlotRing<'_>) -> Option<u32> {
    let head = ring.head();
    (head.saturating_sub(4)..head)
        .rev()
        .find_map(|i| match ring.read(i) {
            ftrace_ringbuf::slot::SlotRead::Event(ev) => Some(ev.cpu),
            _ => None,
        })
}

/// Waits `d` between two passes, or less when [`Drainer::finish`] asks the drainer to end (it
/// unparks the thread after setting `stop`, [`Rings::ending`]: the wait is cut short, not slept out).
fn pause(d: Duration, stop: &AtomicBool) {
    if !stop.load(Ordering::Acquire) {
        std::thread::park_timeout(d);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ftrace_agent::buffer::{self, GROW_FILE_PREFIX, SlotMode};
    use ftrace_agent::event::{KIND_EVENT, KIND_EVENT_DATA};

    /// A private ring directory gets a spare ring file of the size asked, its pages made
    /// while the program runs (none once it has exited; then its space reserved only when its
    /// file system is short of room), and nothing half-made left beside it; a recording
    /// directory used for rings gets none.
    #[test]
    fn a_private_ring_dir_is_stocked_with_a_whole_spare() {
        use std::os::unix::fs::MetadataExt as _;
        let out = tempfile::tempdir().unwrap();
        let rings = RingDir::create(out.path());
        let len = buffer::HEADER_SIZE + (256 << 10);
        rings.make_spare(len, &PageMaker::new());
        if rings.private {
            let spare = rings.path().join(SPARE_FILE);
            let meta = std::fs::metadata(&spare).unwrap();
            assert_eq!(meta.len(), len as u64);
            // Its pages made, the program running.
            assert!(meta.blocks() * 512 >= len as u64, "{meta:?}");
            assert!(!rings.path().join(SPARE_IN_PROGRESS).exists());
            // The program gone: none made. Reserved only on a file system short of room.
            std::fs::remove_file(&spare).unwrap();
            let stopped = PageMaker::new();
            stopped.stop();
            rings.make_spare(len, &stopped);
            let meta = std::fs::metadata(&spare).unwrap();
            assert_eq!(meta.len(), len as u64);
            let reserved = meta.blocks() * 512 >= len as u64;
            let free = free_bytes(rings.path());
            assert_eq!(
                reserved,
                reserve_ahead(free, len as u64),
                "{meta:?}, {free:?} free"
            );
            assert!(!rings.path().join(SPARE_IN_PROGRESS).exists());
        }
        let len = len as u64;
        assert!(reserve_ahead(None, len));
        assert!(reserve_ahead(Some(4 * len - 1), len));
        assert!(!reserve_ahead(Some(4 * len), len));
        let fallback = RingDir {
            path: out.path().to_path_buf(),
            private: false,
        };
        fallback.make_spare(len as usize, &PageMaker::new());
        assert!(!out.path().join(SPARE_FILE).exists());
    }

    /// Writes the ring file of thread `tid` under `dir` holding `slots` (kind, depth), after
    /// checking that the drainer takes a file without its header for no ring.
    fn write_ring(dir: &Path, tid: u32, slots: &[(u32, u32)]) -> PathBuf {
        write_ring_of(dir, tid, 64, slots)
    }

    /// [`write_ring`] with a ring of `capacity` slots.
    fn write_ring_of(dir: &Path, tid: u32, capacity: usize, slots: &[(u32, u32)]) -> PathBuf {
        write_ring_on(dir, tid, capacity, slots.len(), |i| {
            (slots[i].0, slots[i].1, 0)
        })
    }
    /// A ring of `n` events, the `i`th of kind, depth and CPU `slot(i)`.
    fn write_ring_on(
        dir: &Path,
        tid: u32,
        capacity: usize,
        n: usize,
        slot: impl Fn(usize) -> (u32, u32, u32),
    ) -> PathBuf {
        let ring_file = dir.join(format!("buf-{tid}"));
        let len = buffer::HEADER_SIZE + capacity * buffer::SLOT_SIZE;
        let f = File::create_new(&ring_file).unwrap();
        f.set_len(len as u64).unwrap();
        let map = RingMapping::open(&ring_file, Access::ReadWrite);
        assert!(map.is_none(), "a file without a header is no ring yet");
        let mut mem = vec![0u64; len / 8];
        // SAFETY: `mem` is zeroed, 8-aligned and `len` bytes long.
        let w = unsafe {
            buffer::init(
                mem.as_mut_ptr().cast(),
                len,
                SlotMode::ProducerConsumer,
                std::process::id(),
                tid,
                b"t",
            )
        };
        for i in 0..n {
            let (kind, depth, cpu) = slot(i);
            // SAFETY: `w` describes `mem`, alive here.
            unsafe { w.write(100 + i as u64, 0x1000, 7, kind, depth, cpu) };
        }
        let bytes: Vec<u8> = mem.iter().flat_map(|w| w.to_ne_bytes()).collect();
        std::fs::write(&ring_file, &bytes).unwrap();
        ring_file
    }

    /// The resident size, in KiB, of this process's mapping that starts at `addr`
    /// (`/proc/self/smaps`).
    fn mapping_rss_kb(addr: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let start = format!("{addr:x}-");
        let mut lines = smaps.lines().skip_while(|l| !l.starts_with(&start));
        assert!(lines.next().is_some(), "no mapping at {addr:#x}");
        lines
            .find_map(|l| l.strip_prefix("Rss:"))
            .and_then(|v| v.trim().strip_suffix("kB")?.trim().parse().ok())
            .expect("an Rss line")
    }

    /// This process's first instance directory (`<pid>.0`), made in the ring directory
    /// `rings` and in the recording directory `out`: the ring side returned, where its ring
    /// files go.
    fn first_instance(rings: &Path, out: &Path) -> PathBuf {
        let instance = format!("{}.0", std::process::id());
        std::fs::create_dir(out.join(&instance)).unwrap();
        let dir = rings.join(instance);
        std::fs::create_dir(&dir).unwrap();
        dir
    }

    /// A ring's last drain takes everything it holds, not a turn's worth: the events past
    /// the first turn are in the events file, none lost.
    #[test]
    fn a_finished_ring_is_drained_to_its_end_past_a_turn() {
        let out = tempfile::tempdir().unwrap();
        let rings = RingDir::create(out.path());
        let dir = first_instance(rings.path(), out.path());
        let capacity = 4 * TURN as usize;
        let n = 3 * TURN as usize;
        let events = vec![(buffer::KIND_FUNC, 0); n];
        let path = write_ring_of(&dir, 4, capacity, &events);
        let mut d = Drained::start(&path, out.path()).unwrap().unwrap();
        assert_eq!(d.drain(Drain::Live).unwrap(), TURN);
        let Finish { count, error } = d.finish();
        assert_eq!(error, None);
        let c = count.unwrap();
        assert_eq!((c.events, c.lost), (n as u64, 0));
    }

    /// A pass that catches up with the ring's writer writes what it has encoded through once
    /// that is [`CAUGHT_UP_FLUSH`] or more; less stays buffered.
    #[test]
    fn a_caught_up_pass_writes_its_events_through() {
        let out = tempfile::tempdir().unwrap();
        let rings = RingDir::create(out.path());
        let dir = first_instance(rings.path(), out.path());
        let on_disk = |d: &Drained| std::fs::metadata(&d.events_file).unwrap().len();
        // A few events: buffered.
        let few = vec![(buffer::KIND_FUNC, 0); 16];
        let path = write_ring_of(&dir, 5, 1 << 16, &few);
        let mut d = Drained::start(&path, out.path()).unwrap().unwrap();
        let header = on_disk(&d);
        assert_eq!(d.drain(Drain::Live).unwrap(), 16);
        assert_eq!(on_disk(&d), header);
        // A caught-up pass over more than CAUGHT_UP_FLUSH of them (4 bytes or more each):
        // written through.
        let many = vec![(buffer::KIND_FUNC, 0); CAUGHT_UP_FLUSH / 4 + 1];
        let path = write_ring_of(&dir, 6, 1 << 16, &many);
        let mut d = Drained::start(&path, out.path()).unwrap().unwrap();
        assert_eq!(d.drain(Drain::Live).unwrap(), many.len() as u64);
        assert!(
            on_disk(&d) >= header + CAUGHT_UP_FLUSH as u64,
            "{} bytes on disk",
            on_disk(&d)
        );
    }

    /// A helper parks after its first empty pass; woken, it looks again for a millisecond
    /// (HELPER_EMPTY_PASSES passes, a batch sleep after each) before it parks again, and any
    /// pass with events starts the count again; a busy pass goes on at once.
    #[test]
    fn a_woken_helper_looks_again_a_while_before_it_parks() {
        // Started: parked after one empty pass.
        assert_eq!(
            helper_wait(HELPER_EMPTY_PASSES, 0, false).0,
            HelperWait::Park
        );
        // Woken (the count is 0): the first empty pass does not park (parking there left a
        // ring undrained while the leader drained another: the old rule), nor do the next
        // ones up to HELPER_EMPTY_PASSES; the one after parks.
        assert_eq!(helper_wait(0, 0, false).0, HelperWait::Sleep);
        let mut empty = 0;
        for _ in 0..HELPER_EMPTY_PASSES {
            let wait;
            (wait, empty) = helper_wait(empty, 0, false);
            assert_eq!(wait, HelperWait::Sleep);
        }
        assert_eq!(helper_wait(empty, 0, false).0, HelperWait::Park);
        // Events in between start the count again.
        assert_eq!(helper_wait(empty, 10, false), (HelperWait::Sleep, 0));
        assert_eq!(helper_wait(empty, TURN, true), (HelperWait::No, 0));
    }

    /// A helper parked at the end is not waited for (on a machine with two CPUs or more: a
    /// helper to park), and what it handed over before parking is in the counts.
    #[test]
    fn a_helper_parked_at_the_end_is_not_waited_for_and_its_counts_are_kept() {
        let out = tempfile::tempdir().unwrap();
        let rings = RingDir::create(out.path());
        let drainer = Drainer::start(rings.path(), out.path(), Growth::Fixed, Yield::WhenBehind);
        if drainer.threads.len() < 2 {
            return;
        }
        let parked = |d: &Drainer| d.states[1].load(Ordering::SeqCst) == HelperState::Parked as u8;
        let since = Instant::now();
        while !parked(&drainer) {
            assert!(
                since.elapsed() < Duration::from_secs(10),
                "the helper never parked"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        let helper = drainer.threads[1].thread().clone();
        let states = drainer.states.clone();
        let handed = ThreadCount {
            tid: 7,
            events: 3,
            lost: 1,
        };
        lock(&drainer.rings.handed_over).push(handed);
        let finished = drainer.finish();
        assert_eq!(finished.counts, [handed]);
        assert!(finished.errors.is_empty(), "{:?}", finished.errors);
        // Abandoned, then woken (it returns without a pass).
        let since = Instant::now();
        while states[1].load(Ordering::SeqCst) != HelperState::Running as u8 {
            assert!(
                since.elapsed() < Duration::from_secs(10),
                "{helper:?} never woke"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// The tool keeps a window of a large ring mapped, not the whole ring: the pages it has
    /// consumed are given back as it goes, so a 16 MiB ring read through costs it at most
    /// [`RELEASE_EVERY`] slots (1 MiB) and the header's page. The ring is where the tool puts
    /// rings, on tmpfs (whose pages are 4 KiB unless the machine enables huge pages for it,
    /// which this kind of machine does not: a file system that caches a file in 2 MiB folios
    /// maps them whole).
    #[test]
    fn the_tool_maps_a_window_of_a_ring_not_the_whole_ring() {
        let out = tempfile::tempdir().unwrap();
        let rings = RingDir::create(out.path());
        assert!(rings.private, "no tmpfs for rings here");
        let dir = first_instance(rings.path(), out.path());
        let capacity = 2 * RELEASE_ABOVE as usize;
        let events = vec![(buffer::KIND_FUNC, 0); capacity - 1];
        let path = write_ring_of(&dir, 3, capacity, &events);
        let mut d = Drained::start(&path, out.path()).unwrap().unwrap();
        // A turn at a time (the other rings' turn comes in between), to the end.
        let mut moved = d.drain(Drain::Live).unwrap();
        assert_eq!(moved, TURN);
        loop {
            match d.drain(Drain::Live).unwrap() {
                0 => break,
                n => moved += n,
            }
        }
        assert_eq!(moved, capacity as u64 - 1);
        let rss = mapping_rss_kb(d.map.addr());
        let window_kb = RELEASE_EVERY * buffer::SLOT_SIZE as u64 / 1024;
        assert!(
            rss <= window_kb + 4,
            "{rss} KiB of a 16 MiB ring still mapped"
        );
        // Read again, the ring maps again: what was given back was the mapping, not the
        // slots (the events file has every event once).
        let Finish { count, error } = d.finish();
        assert_eq!(error, None);
        let c = count.unwrap();
        assert_eq!((c.events, c.lost), (capacity as u64 - 1, 0));
    }

    /// A ring gets a file four times its size beside it (within the maximum), offered in its
    /// header at its first pass, once; once its thread has moved (the agent's answer, GROWN)
    /// and nothing new came for a while, the ring is finished: its events file complete and
    /// its file gone while the thread lives on. A fixed size, or a ring at the maximum, offers
    /// nothing; an offer never taken goes with its ring.
    #[test]
    fn a_ring_offered_a_larger_one_is_finished_once_its_thread_moved() {
        let out = tempfile::tempdir().unwrap();
        let rings = RingDir::create(out.path());
        assert!(rings.private, "no tmpfs for rings here");
        // SAFETY: no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        let dir = first_instance(rings.path(), out.path());
        let func = (buffer::KIND_FUNC, 0);
        let path = write_ring_of(&dir, tid, 64, &[func; 40]);
        let file = |slots: u64| HEADER_BYTES + slots * SLOT_BYTES;
        let grow_file = dir.join(grow_file_name(tid, file(256)));
        // The files offered: (name, bytes).
        let offers = || {
            let mut found = Vec::new();
            for f in std::fs::read_dir(&dir).unwrap().flatten() {
                let name = f.file_name().into_string().unwrap();
                if name.starts_with(GROW_FILE_PREFIX) {
                    found.push((name, f.metadata().unwrap().len()));
                }
            }
            found.sort();
            found
        };
        for growth in [
            Growth::Fixed,
            Growth::UpTo(file(64)),
            Growth::UpTo(file(100)),
        ] {
            let shared = Rings::new(growth);
            shared.scan(rings.path(), out.path());
            let d = shared.list(0).pop().unwrap();
            let mut d = d.lock().unwrap();
            let d = d.as_mut().unwrap();
            d.cursor = Cursor::default();
            d.offer(growth, &shared);
            assert_eq!(offers(), [], "{growth:?}");
            let ring = d.map.view().unwrap().ring();
            assert_eq!(ring.growth_offered(), 0, "{growth:?}");
        }
        // Room for four times: offered, once, at the first pass.
        let growth = Growth::UpTo(file(1024));
        let shared = Rings::new(growth);
        shared.scan(rings.path(), out.path());
        let ring_of = |shared: &Rings| shared.list(0).pop().unwrap();
        let events = ring_of(&shared)
            .lock()
            .unwrap()
            .as_ref()
            .unwrap()
            .events_file
            .clone();
        // Beside it, the thread's own offer for a later ring (the one it will move to next,
        // four times larger): another name, which the tool's offer leaves alone.
        let own_next = dir.join(grow_file_name(tid, file(1024)));
        std::fs::write(&own_next, vec![0; file(1024) as usize]).unwrap();
        let first = shared.pass(0);
        assert_eq!(first.moved, 40);
        assert_eq!(
            offers(),
            [
                (grow_file_name(tid, file(256)), file(256)),
                (grow_file_name(tid, file(1024)), file(1024))
            ]
        );
        std::fs::remove_file(&own_next).unwrap();
        let r = ring_of(&shared);
        let view = |r: &SharedRing| {
            let d = r.lock().unwrap();
            d.as_ref()
                .unwrap()
                .map
                .view()
                .unwrap()
                .ring()
                .growth_offered()
        };
        assert_eq!(view(&r), file(256));
        std::fs::remove_file(&grow_file).unwrap();
        assert_eq!(shared.pass(0).moved, 0);
        assert!(!grow_file.exists(), "offered once");
        // The agent's answer: not moved (no file of the size offered). Offered again, a file
        // made anew, at the next passes, a few times at most.
        for again in 1..=MAX_REOFFERS + 1 {
            {
                let d = r.lock().unwrap();
                let ring = d.as_ref().unwrap().map.view().unwrap().ring();
                ring.offer_to_grow(0);
            }
            shared.pass(0);
            assert!(
                !grow_file.exists(),
                "not at once: a moving thread answers 0 first"
            );
            std::thread::sleep(REOFFER_AFTER);
            shared.pass(0);
            shared.pass(0);
            let offered = again <= MAX_REOFFERS;
            assert_eq!(grow_file.exists(), offered, "answer {again}");
            assert_eq!(
                view(&r),
                if offered { file(256) } else { 0 },
                "answer {again}"
            );
            if offered {
                std::fs::remove_file(&grow_file).unwrap();
            }
        }
        // (Offered again for the rest of the test.)
        {
            let mut d = r.lock().unwrap();
            let d = d.as_mut().unwrap();
            d.reoffers = 0;
            d.map.view().unwrap().ring().offer_to_grow(0);
        }
        shared.pass(0);
        std::thread::sleep(REOFFER_AFTER);
        shared.pass(0);
        shared.pass(0);
        assert_eq!(view(&r), file(256));
        assert!(grow_file.exists());
        // The agent's answer: moved. The ring is finished once nothing came for a while,
        // though its thread (this one) lives.
        {
            let d = r.lock().unwrap();
            let ring = d.as_ref().unwrap().map.view().unwrap().ring();
            ring.offer_to_grow(ftrace_ringbuf::slot::GROWN);
        }
        let start = Instant::now();
        assert_eq!(lock(&shared.found).offered, file(256));
        assert!(shared.pass(0).finished.is_empty());
        assert_eq!(
            lock(&shared.found).offered,
            0,
            "taken: a ring now (counted once found), no longer an offer"
        );
        assert_eq!(
            offers(),
            [],
            "a file still offered was made as the thread moved: removed"
        );
        let finished = loop {
            let p = shared.pass(0);
            if !p.finished.is_empty() {
                break p.finished;
            }
            assert!(start.elapsed() < Duration::from_secs(5), "never finished");
            std::thread::sleep(Duration::from_millis(1));
        };
        assert!(start.elapsed() >= RETIRE_AFTER);
        assert_eq!(finished.len(), 1);
        assert_eq!(
            (finished[0].tid, finished[0].events, finished[0].lost),
            (tid, 40, 0)
        );
        assert!(shared.list(0).is_empty());
        removed_cleanly(&shared);
        assert!(!path.exists());
        assert!(new_ring_files(rings.path(), &HashSet::new()).is_empty());
        let mut r = crate::stream::open(&events, 4096).unwrap();
        let mut n = 0;
        while let crate::stream::Record::Event(..) = r.next_record().unwrap() {
            n += 1;
        }
        assert_eq!(n, 40, "the events file is complete");
        // A ring whose thread never took the offer: the file offered goes with the ring.
        let other = 999_999;
        write_ring_of(&dir, other, 64, &[func; 3]);
        let offered = dir.join(grow_file_name(other, file(256)));
        shared.scan(rings.path(), out.path());
        shared.pass(0);
        assert_eq!(std::fs::metadata(&offered).unwrap().len(), file(256));
        let r = ring_of(&shared);
        let c = shared.finish(&r, &mut r.lock().unwrap()).unwrap();
        assert_eq!((c.tid, c.events), (other, 3));
        removed_cleanly(&shared);
        assert!(!offered.exists());
        assert!(new_ring_files(rings.path(), &HashSet::new()).is_empty());
    }

    /// Every offer counts in the rings' total, taken or not (all the threads may take theirs
    /// at once): with room for two offers besides three rings, the third ring gets none until
    /// a ring with an offer is finished.
    #[test]
    fn offers_count_in_the_rings_total() {
        let out = tempfile::tempdir().unwrap();
        let rings = RingDir::create(out.path());
        assert!(rings.private, "no tmpfs for rings here");
        let dir = first_instance(rings.path(), out.path());
        for tid in 1..=3 {
            write_ring_of(&dir, tid, 64, &[(buffer::KIND_FUNC, 0); 2]);
        }
        let file = |slots: u64| HEADER_BYTES + slots * SLOT_BYTES;
        // Four times the maximum: the three rings (64 slots) and two offers (256 slots).
        let shared = Rings::new(Growth::UpTo(file(256)));
        shared.scan(rings.path(), out.path());
        let offers = || {
            std::fs::read_dir(&dir)
                .unwrap()
                .flatten()
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with(GROW_FILE_PREFIX)
                })
                .count()
        };
        assert_eq!(shared.pass(0).moved, 6);
        assert_eq!(offers(), 2);
        let with_offer = shared
            .list(0)
            .into_iter()
            .find(|r| r.lock().unwrap().as_ref().unwrap().offered_bytes() != 0)
            .unwrap();
        shared
            .finish(&with_offer, &mut with_offer.lock().unwrap())
            .unwrap();
        assert_eq!(offers(), 1, "an offer never taken goes with its ring");
        shared.pass(0);
        assert_eq!(offers(), 2, "the third ring's, now that there is room");
    }

    /// Waits for `shared`'s ring files to be removed, and checks that no error was met.
    fn removed_cleanly(shared: &Rings) {
        shared.wait_removals();
        let errors = lock(&shared.errors);
        assert!(errors.is_empty(), "{errors:?}");
    }

    /// A ring directory and a recording directory with this process's first instance in
    /// each, and two rings: thread 1's of 3 function events (its file returned) and thread
    /// 2's of 5.
    fn two_rings() -> (tempfile::TempDir, tempfile::TempDir, PathBuf) {
        let rings = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        let dir = first_instance(rings.path(), out.path());
        let func = (buffer::KIND_FUNC, 0);
        let first = write_ring(&dir, 1, &[func; 3]);
        write_ring(&dir, 2, &[func; 5]);
        (rings, out, first)
    }

    /// A ring whose events file cannot be made is left for a later pass, and the other rings
    /// are drained (a scan's error once ended its drain thread, and with it the counts of the
    /// rings that thread had finished); it is taken once it can be, and its error is told at
    /// the end only if it never was.
    #[test]
    fn a_ring_whose_events_file_cannot_be_made_is_told_and_the_others_drained() {
        let (rings, out, _) = two_rings();
        let instance = format!("{}.1", std::process::id());
        std::fs::create_dir(rings.path().join(&instance)).unwrap();
        write_ring(
            &rings.path().join(&instance),
            3,
            &[(buffer::KIND_FUNC, 0); 2],
        );
        let shared = Rings::new(Growth::Fixed);
        shared.scan(rings.path(), out.path());
        assert_eq!(shared.list(0).len(), 2);
        assert_eq!(shared.pass(0).moved, 8);
        shared.scan(rings.path(), out.path());
        let unstarted: Vec<String> = lock(&shared.found).unstarted.values().cloned().collect();
        assert_eq!(unstarted.len(), 1, "{unstarted:?}");
        let events = out.path().join(&instance).join(format!("{FILE_PREFIX}3"));
        assert!(
            unstarted[0].starts_with(&format!("{}: ", events.display())),
            "{unstarted:?}"
        );
        // Never started, it is told.
        let never = Rings::new(Growth::Fixed);
        never.scan(rings.path(), out.path());
        never.tell_unstarted();
        assert_eq!(*lock(&never.errors), unstarted);
        // Its directory made, the next scan takes it, and nothing is told.
        std::fs::create_dir(out.path().join(&instance)).unwrap();
        shared.scan(rings.path(), out.path());
        assert_eq!(shared.list(0).len(), 3);
        assert_eq!(shared.pass(0).moved, 2);
        shared.tell_unstarted();
        assert!(lock(&shared.errors).is_empty());
    }

    /// A pass that leaves a ring at its largest size a quarter full says on which CPU the
    /// ring's newest event was written (its drainer is losing the race:
    /// [`Placement::follow`]) and makes the ring's thread yield to the drainers (its nice
    /// value up by [`crate::precedence::NICE_STEP`], once; not with [`Yield::Never`]); one
    /// whose ring may still grow, or is less full, does neither; and a pass says the rings
    /// are behind until they are less than an eighth full.
    #[test]
    fn a_pass_that_leaves_a_ring_that_cannot_grow_behind_says_where_its_writer_runs() {
        use crate::precedence::{NICE_STEP, nice_of};
        let capacity = 8 * TURN as usize;
        let events = 3 * TURN as usize;
        for (growth, losing, yielding) in [
            (Growth::Fixed, Some(1), Yield::WhenBehind),
            (Growth::Fixed, Some(1), Yield::Never),
            (
                Growth::UpTo(64 * (capacity as u64) * SLOT_BYTES),
                None,
                Yield::WhenBehind,
            ),
        ] {
            let rings = tempfile::tempdir().unwrap();
            let out = tempfile::tempdir().unwrap();
            let dir = first_instance(rings.path(), out.path());
            // The ring's writer: a thread of this process, which waits.
            let writer = crate::precedence::WaitingThread::start();
            let tid = writer.tid;
            let nice = nice_of(tid).unwrap();
            write_ring_on(&dir, tid, capacity, events, |i| {
                (buffer::KIND_FUNC, 0, u32::from(i == events - 1))
            });
            let shared = Rings {
                yielding,
                ..Rings::new(growth)
            };
            shared.scan(rings.path(), out.path());
            // 3 turns' worth in a ring of 8: a quarter full after the first turn, an eighth
            // after the second, empty after the third.
            let first = shared.pass(0);
            assert_eq!(first.moved, TURN);
            // Each turn takes more than a busy writer's events: its newest event's CPU is
            // one the drainer keeps off.
            let writing_on = vec![1];
            assert_eq!(
                first.race,
                Race {
                    losing_on: losing,
                    behind: true,
                    writing_on: writing_on.clone(),
                },
                "{growth:?}"
            );
            let second = shared.pass(0);
            assert_eq!(
                second.race,
                Race {
                    losing_on: None,
                    behind: true,
                    writing_on: writing_on.clone(),
                }
            );
            let third = shared.pass(0);
            assert_eq!(
                third.race,
                Race {
                    writing_on,
                    ..Race::default()
                }
            );
            assert_eq!(first.moved + second.moved + third.moved, events as u64);
            let yielded = (nice + NICE_STEP).min(19);
            match losing.filter(|_| yielding == Yield::WhenBehind) {
                Some(_) => {
                    assert_eq!(
                        *lock(&shared.yielded),
                        BTreeMap::from([(tid, Some(yielded))])
                    );
                    assert_eq!(nice_of(tid).unwrap(), yielded);
                }
                None => {
                    assert!(lock(&shared.yielded).is_empty());
                    assert_eq!(nice_of(tid).unwrap(), nice);
                }
            }
            drop(writer);
        }
    }

    /// A drainer thread skips the ring another one is draining and drains the others: two
    /// busy rings get a thread each, whichever was found first.
    #[test]
    fn a_ring_being_drained_is_left_to_its_thread() {
        let (rings, out, _) = two_rings();
        let shared = Rings::new(Growth::Fixed);
        shared.scan(rings.path(), out.path());
        let list = shared.list(0);
        assert_eq!(list.len(), 2);
        let held = list[0].lock().unwrap();
        let held_events = if held.as_ref().unwrap().tid == 1 {
            3
        } else {
            5
        };
        // Thread 0 starts at the held ring, skips it and drains the other; thread 1 (which
        // starts at the other one) then finds nothing it may take.
        // Both rings want a thread: one has events, the other is being drained.
        let first = shared.pass(0);
        assert_eq!((first.moved, first.wanted), (8 - held_events, 2));
        assert_eq!(shared.pass(1).moved, 0);
        // Drained, the free ring wants none: a helper would not be woken for it.
        let again = shared.pass(0);
        assert_eq!((again.moved, again.wanted), (0, 1));
        drop(held);
        assert_eq!(shared.pass(1).moved, held_events);
        // At the end every ring is finished once, its file removed.
        shared.scan(rings.path(), out.path());
        let mut counts: Vec<ThreadCount> = shared
            .list(0)
            .iter()
            .filter_map(|r| shared.finish(r, &mut r.lock().unwrap()))
            .collect();
        counts.sort_by_key(|c| c.tid);
        let events: Vec<(u32, u64)> = counts.iter().map(|c| (c.tid, c.events)).collect();
        assert_eq!(events, [(1, 3), (2, 5)]);
        assert!(shared.list(0).is_empty());
        removed_cleanly(&shared);
        assert!(new_ring_files(rings.path(), &HashSet::new()).is_empty());
    }

    /// Writes over the magic of the ring file `path`'s header, as a program may (the file is
    /// shared, as the mapping).
    fn overwrite_header(path: &Path) {
        use std::os::unix::fs::FileExt as _;
        std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .unwrap()
            .write_all_at(&[0xff; 8], 0)
            .unwrap();
    }

    /// A program shares its ring file with the tool and may write over the ring's header: that
    /// ring's recording ends with an error naming the file (told at the end), its events file
    /// complete with the events read before; the drainer goes on with the other rings and
    /// panics never.
    #[test]
    fn a_ring_whose_header_is_overwritten_ends_in_an_error_and_the_others_go_on() {
        let (rings, out, bad) = two_rings();
        let shared = Rings::new(Growth::Fixed);
        shared.scan(rings.path(), out.path());
        assert_eq!(shared.pass(0).moved, 8);
        let events_of = |tid: u32| {
            shared
                .list(0)
                .iter()
                .find_map(|r| {
                    let d = r.lock().unwrap();
                    let d = d.as_ref()?;
                    (d.tid == tid).then(|| d.events_file.clone())
                })
                .unwrap()
        };
        let bad_events = events_of(1);
        overwrite_header(&bad);
        let pass = shared.pass(0);
        assert_eq!(pass.moved, 0);
        assert_eq!(shared.list(0).len(), 1, "the damaged ring is finished");
        assert_eq!(
            pass.finished,
            [ThreadCount {
                tid: 1,
                events: 3,
                lost: 0
            }],
            "with its count"
        );
        let errors = lock(&shared.errors).clone();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with(&format!(
                "{}: the ring's header was overwritten",
                bad.display()
            )),
            "{}",
            errors[0]
        );
        let mut r = crate::stream::open(&bad_events, 4096).unwrap();
        let mut n = 0;
        let complete = loop {
            match r.next_record().unwrap() {
                crate::stream::Record::Event(..) => n += 1,
                crate::stream::Record::End { complete, .. } => break complete,
            }
        };
        assert_eq!((n, complete), (3, true), "its events file is complete");
        // The other ring is finished at the end as ever; the damaged one's file is gone.
        let counts: Vec<ThreadCount> = shared
            .list(0)
            .iter()
            .filter_map(|r| shared.finish(r, &mut r.lock().unwrap()))
            .collect();
        assert_eq!((counts[0].tid, counts[0].events), (2, 5));
        shared.wait_removals();
        assert!(new_ring_files(rings.path(), &HashSet::new()).is_empty());
    }

    /// Every ring that ends early is told, each error once, and what each recorded is
    /// counted: the end of the recording names every damaged ring file, then the summary
    /// counts their events.
    #[test]
    fn every_ring_ended_early_is_told_and_counted() {
        let (rings, out, _) = two_rings();
        let shared = Rings::new(Growth::Fixed);
        shared.scan(rings.path(), out.path());
        assert_eq!(shared.pass(0).moved, 8);
        let files = new_ring_files(rings.path(), &HashSet::new());
        assert_eq!(files.len(), 2);
        files.iter().for_each(|f| overwrite_header(f));
        let mut counts = shared.pass(0).finished;
        counts.sort_by_key(|c| c.tid);
        let events: Vec<(u32, u64)> = counts.iter().map(|c| (c.tid, c.events)).collect();
        assert_eq!(events, [(1, 3), (2, 5)]);
        assert!(shared.list(0).is_empty());
        shared.wait_removals();
        let errors = std::mem::take(&mut *lock(&shared.errors));
        assert_eq!(errors.len(), 2, "{errors:?}");
        for f in &files {
            let told = format!("{}: the ring's header was overwritten", f.display());
            assert!(errors.iter().any(|e| e.starts_with(&told)), "{errors:?}");
        }
        let said = crate::record::summary_of_drained(
            &Finished {
                counts,
                errors,
                yielded: vec![],
            },
            out.path(),
        )
        .unwrap_err();
        let lines: Vec<&str> = said.lines().collect();
        assert_eq!(lines.len(), 3, "{said}");
        assert!(lines[1].starts_with("ftrace: "), "{said}");
        assert!(
            lines[2].starts_with("ftrace: 8 events recorded, 0 lost, "),
            "{said}"
        );
    }

    /// The end-of-record count is one per event: a return value, a trace event's data slots
    /// and a stack record's frame slots are parts of other records (their exit's, event's,
    /// stack record's), never events of their own.
    #[test]
    fn the_printed_count_counts_records_not_slots() {
        let rings = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        // SAFETY: no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        let dir = first_instance(rings.path(), out.path());
        let slots: [(u32, u32); 11] = [
            (buffer::KIND_GRAPH_ENT, 0),
            (buffer::KIND_GRAPH_RETVAL, 0),
            (buffer::KIND_GRAPH_RET, 0),
            // A trace event with two data slots.
            (KIND_EVENT, 16),
            (KIND_EVENT_DATA, 0),
            (KIND_EVENT_DATA, 1),
            // A stack record of five frames: two more-frames slots, then its head.
            (buffer::KIND_STACK_MORE, 1),
            (buffer::KIND_STACK_MORE, 2),
            (buffer::KIND_STACK, 5),
            (buffer::KIND_FUNC, 0),
            (buffer::KIND_FUNC, 0),
        ];
        let ring_file = write_ring(&dir, tid, &slots);
        let Finished { counts, errors, .. } =
            Drainer::start(rings.path(), out.path(), Growth::Fixed, Yield::WhenBehind).finish();
        assert!(errors.is_empty(), "{errors:?}");
        // The exit (its value), the event (its data), the stack record (its frames), two
        // function entries and the graph entry: six events of eleven slots.
        assert_eq!(
            counts,
            [ThreadCount {
                tid,
                events: 6,
                lost: 0
            }]
        );
        let said = crate::record::summary_of(&counts, out.path());
        assert!(
            said.starts_with("ftrace: 6 events recorded, 0 lost, "),
            "{said}"
        );
        assert!(!ring_file.exists(), "a drained ring is removed");
    }
}
