//! Per-thread event buffers: one file-backed [`ftrace_ringbuf::slot`] ring per thread, the
//! format the `ftrace` tool reads.
//!
//! Why a slot ring and not `ftrace-ringbuf` pages here: every event a userspace thread writes
//! is one of three fixed-size kinds, and the assembly fast paths (`tramp.rs`) must reserve and
//! commit with a couple of instructions and no call: one non-locked `xadd` on the ring's
//! `head`, one compare with its writers' copy of the `limit`, and the kind word stored last (the slot module's
//! writer contract, which the asm follows to the letter, including giving a full reservation
//! back). The kernel's page format is written by the `ftrace` tool when it turns a recording
//! into `trace_pipe_raw` pages or a trace.dat.
//!
//! A buffer file is [`BufHeader`] (one page: who wrote it, then the ring's
//! [`RingHeader`] at [`RING_OFFSET`]) followed by the ring's slots. It is a `MAP_SHARED`
//! mapping, so committed events survive `_exit()`, a fatal signal or SIGKILL with no flush,
//! and the tool can consume it while the program runs (producer/consumer mode: the tool's
//! reads raise `limit`; a full ring drops and counts, never blocks the program).

use core::sync::atomic::{Ordering, compiler_fence};

use ftrace_ringbuf::slot::{Cursor, Drain, RingHeader, Slot, SlotRing};
pub use ftrace_ringbuf::slot::{KIND_LAP_BIT, KIND_MASK, SLOT_SIZE, SlotEvent, SlotMode};

/// `"FTRACEUB"`: the first bytes of every buffer file.
pub const MAGIC: [u8; 8] = *b"FTRACEUB";
/// The buffer-file format version (3: the slot ring of `ftrace-ringbuf` with its writers' and
/// consumer's words on separate cache lines).
pub const VERSION: u32 = 3;
/// Bytes before the first slot (one page: the header).
pub const HEADER_SIZE: usize = 4096;
/// Where the ring's [`RingHeader`] sits in the file (its own two cache lines).
pub const RING_OFFSET: usize = 64;
/// The name of a spare buffer file in a configuration's ring directory
/// ([`Config::ring_dir`](crate::config::Config::ring_dir)): made by the tool before the
/// program starts (sized, its space reserved, zero-filled: what a fresh buffer file is), and
/// taken (renamed to `buf-<tid>`) by the first thread of a streamed recording that needs a
/// buffer, which then skips reserving its ring itself, the tool having done it on another CPU
/// while the program was starting.
pub const SPARE_FILE: &str = "spare";
/// The name of the spare while the tool is still making it ([`SPARE_FILE`] once whole): a
/// thread that needs a buffer then waits for it (at most [`spare_wait_ms`]) rather than
/// reserve a ring of its own on the program's path.
pub const SPARE_IN_PROGRESS: &str = "spare.new";

/// How long a thread waits for a spare of `len` bytes in progress ([`SPARE_IN_PROGRESS`]):
/// 10 ms and 1 ms per MiB, about three times what reserving it takes on a slow VM (0.33 ms
/// per MiB), so that a tool that stopped making it costs a bounded wait.
pub fn spare_wait_ms(len: usize) -> u64 {
    10 + (len >> 20) as u64
}

/// A `function` event: `arg` is the parent ip.
pub const KIND_FUNC: u32 = 1;
/// A `funcgraph_entry` event: `arg` is the parent ip.
pub const KIND_GRAPH_ENT: u32 = 2;
/// A `funcgraph_exit` event: `arg` is the call time.
pub const KIND_GRAPH_RET: u32 = 3;
/// The return value of the `funcgraph_exit` that follows (`funcgraph-retval`): `arg` is the
/// value, `ts`, `ip` and the depth are the exit's. Written just before its exit, in the same
/// handler run (no other event of the thread between them); a reader pairs the two with
/// [`retval_of`] and prints no event for this slot.
pub const KIND_GRAPH_RETVAL: u32 = 4;
// Kinds 5 and 6 are a trace event's head and data slots (`crate::event::KIND_EVENT`,
// `KIND_EVENT_DATA`).

/// Two more frames of the [`KIND_STACK`] record that follows (`ip`, `arg`; `arg` 0 past the
/// last frame), `depth` its index from 1; `ts` is the head's. Written before the head, in the
/// same handler run; a reader pairs them with [`crate::stack::frames_of`] and prints no event
/// for this slot.
pub const KIND_STACK_MORE: u32 = 7;
/// A `kernel_stack` record (the `stacktrace` function command, [`crate::stack`]): `ip` and
/// `arg` are its first two frames, `depth` the number of frames.
pub const KIND_STACK: u32 = 8;

/// Whether a slot of kind `kind` is part of the record written next to it rather than an
/// event of its own: a return value (its exit's, which follows), a stack record's frames (its
/// head's, which follows) or a trace event's data slot (its head's, which precedes). Every
/// reader of the rings passes over these as it passes over padding.
pub fn continues_a_record(kind: u32) -> bool {
    matches!(
        kind,
        KIND_GRAPH_RETVAL | KIND_STACK_MORE | crate::event::KIND_EVENT_DATA
    )
}

/// The return value recorded for `exit` (a [`KIND_GRAPH_RET`] event), given the slot written
/// just before it: `Some` only when that slot is its [`KIND_GRAPH_RETVAL`] (same time, function
/// and depth), so a value whose exit was lost, or an exit whose value was lost, pairs with
/// nothing.
pub fn retval_of(exit: &SlotEvent, before: Option<&SlotEvent>) -> Option<u64> {
    let b = before?;
    (exit.kind() == KIND_GRAPH_RET
        && b.kind() == KIND_GRAPH_RETVAL
        && b.ts == exit.ts
        && b.ip == exit.ip
        && depth(b) == depth(exit))
    .then_some(b.arg)
}

/// The header at the start of every buffer file.
#[derive(Debug)]
#[repr(C)]
pub struct BufHeader {
    /// [`MAGIC`].
    pub magic: [u8; 8],
    /// [`VERSION`].
    pub version: u32,
    /// [`SLOT_SIZE`].
    pub slot_size: u32,
    /// The process id.
    pub pid: u32,
    /// The thread id.
    pub tid: u32,
    /// The thread's name when its buffer was created (NUL-padded).
    pub comm: [u8; 16],
    /// Reserved (0).
    pub reserved: [u8; 24],
    /// The ring's control words.
    pub ring: RingHeader,
}

const _: () = assert!(core::mem::offset_of!(BufHeader, ring) == RING_OFFSET);
const _: () = assert!(RING_OFFSET % 64 == 0);
const _: () = assert!(core::mem::size_of::<BufHeader>() <= HEADER_SIZE);

/// Offset of the ring's `head` in a buffer file (for the asm fast paths).
pub const HEAD_OFFSET: usize = RING_OFFSET + ftrace_ringbuf::slot::HEAD_OFFSET;
/// Offset of the ring's `limit` (the consumer's word) in a buffer file.
pub const LIMIT_OFFSET: usize = RING_OFFSET + ftrace_ringbuf::slot::LIMIT_OFFSET;
/// Offset of the ring's `limit_seen` (the writers' copy of `limit`, which the asm fast paths
/// compare with) in a buffer file.
pub const LIMIT_SEEN_OFFSET: usize = RING_OFFSET + ftrace_ringbuf::slot::LIMIT_SEEN_OFFSET;
/// Offset of the ring's `dropped` counter in a buffer file.
pub const DROPPED_OFFSET: usize = RING_OFFSET + ftrace_ringbuf::slot::DROPPED_OFFSET;
/// Offset of the ring's `grow` word (the tool's request for a larger ring, [`crate::grow`]) in
/// a buffer file.
pub const GROW_OFFSET: usize = RING_OFFSET + ftrace_ringbuf::slot::GROW_OFFSET;
/// Whether a drained ring file of `len` bytes is to be reserved whole ahead (`fallocate`) on a
/// file system with `free` bytes free (`None`: unknown): when it has less than four times
/// that. With more, the ring's pages are allocated as its thread first writes them (reserving
/// 8 MiB takes 3 ms on a VM, on the thread's path or the program's start, of which a short
/// program writes a few pages); a page the file system cannot give then would be a `SIGBUS`,
/// which ample room makes as unlikely as the disk filling under any program.
pub fn reserve_ahead(free: Option<u64>, len: u64) -> bool {
    free.is_none_or(|free| free / 4 < len)
}

/// The name prefix of a larger ring file offered to a thread ([`grow_file_name`]), which the
/// thread takes when asked ([`crate::grow`]).
pub const GROW_FILE_PREFIX: &str = "grow-";

/// The name of the ring file of `bytes` bytes offered to thread `tid` (by the tool or by the
/// thread itself, [`crate::grow`]): `grow-<tid>.<bytes>`. The size is in the name because a
/// thread's offers overlap: the tool may still be offering the ring a thread is leaving (it
/// read the offer word while the thread answered) when the thread offers itself the next,
/// four times larger. Under one name for both, the tool's file could replace the thread's,
/// and the thread would later find a file of another size than its ring's offer said and
/// stay where it was (the likely cause of the failed moves the nineteenth session found).
pub fn grow_file_name(tid: u32, bytes: u64) -> String {
    format!("{GROW_FILE_PREFIX}{tid}.{bytes}")
}

/// The call depth the agent keeps in a slot's kind word (bits 8..32).
pub fn depth(e: &SlotEvent) -> u32 {
    e.kind >> 8
}

/// A writer's view of one buffer (what a thread's state caches for the fast paths).
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct Writer {
    /// The header.
    pub header: *mut BufHeader,
    /// The first slot.
    pub slots: *mut Slot,
    /// `capacity - 1`.
    pub mask: u64,
    /// `log2(capacity)`.
    pub shift: u32,
    /// Reserved (0).
    pub pad: u32,
}

impl Writer {
    /// The ring this writer writes.
    ///
    /// # Safety
    /// `self` must describe a live mapping laid out as this module says.
    pub unsafe fn ring<'a>(&self) -> SlotRing<'a> {
        // SAFETY: the header and `mask + 1` slots are live (caller's contract).
        let (h, s) = unsafe {
            (
                &(*self.header).ring,
                core::slice::from_raw_parts(self.slots, (self.mask + 1) as usize),
            )
        };
        SlotRing::new(h, s).expect("a ring set up by init")
    }

    /// Records one event (dropped and counted when the ring is full). Signal-safe: may be
    /// interrupted by, and nest, another `write` on the same buffer.
    ///
    /// # Safety
    /// `self` must describe a live mapping laid out as this module says, written only by the
    /// current thread (and signal handlers running on it).
    #[inline(always)]
    pub unsafe fn write(&self, ts: u64, ip: u64, arg: u64, kind: u32, depth: u32, cpu: u32) {
        // SAFETY: caller's contract.
        let ring = unsafe { self.ring() };
        let _ = ring.write(SlotEvent {
            ts,
            ip,
            arg,
            kind: kind | (depth << 8),
            cpu,
        });
    }
}

/// What a reader gets from one buffer file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Contents {
    /// The process id.
    pub pid: u32,
    /// The thread id.
    pub tid: u32,
    /// The thread name.
    pub comm: String,
    /// Committed events, oldest first.
    pub events: Vec<SlotEvent>,
    /// Events lost to overwriting (overwrite mode).
    pub overrun: u64,
    /// Events dropped because the buffer was full (producer/consumer mode), or found
    /// uncommitted.
    pub dropped: u64,
    /// Events reserved in total.
    pub entries_written: u64,
}

/// A malformed buffer file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FormatError(pub &'static str);

impl core::fmt::Display for FormatError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "bad buffer file: {}", self.0)
    }
}

impl std::error::Error for FormatError {}

/// A reader's view of one mapped buffer file.
#[derive(Clone, Copy, Debug)]
pub struct BufferView<'a> {
    header: &'a BufHeader,
    ring: SlotRing<'a>,
}

impl<'a> BufferView<'a> {
    /// Checks the buffer file mapped at `base` (`len` bytes) and returns its view.
    ///
    /// # Safety
    /// `base` must be 8-aligned and valid for reads of `len` bytes for `'a`; other processes
    /// may write it only as the writer contract says.
    pub unsafe fn from_raw(base: *const u8, len: usize) -> Result<BufferView<'a>, FormatError> {
        if len < HEADER_SIZE || base.align_offset(8) != 0 {
            return Err(FormatError("no header"));
        }
        // SAFETY: `len >= HEADER_SIZE` bytes are readable and aligned (checked above); every
        // field of the header is valid for any bit pattern (integers, atomics).
        let header = unsafe { &*base.cast::<BufHeader>() };
        // SAFETY: as above, a plain byte array.
        if unsafe { core::ptr::read_volatile(&raw const header.magic) } != MAGIC {
            return Err(FormatError("no header"));
        }
        compiler_fence(Ordering::Acquire);
        if header.version != VERSION || header.slot_size as usize != SLOT_SIZE {
            return Err(FormatError("version"));
        }
        let slots = (len - HEADER_SIZE) / SLOT_SIZE;
        // SAFETY: `slots` whole slots follow the header inside the mapping; slots are atomics.
        let s = unsafe { core::slice::from_raw_parts(base.add(HEADER_SIZE).cast::<Slot>(), slots) };
        let ring = SlotRing::new(&header.ring, s).map_err(|_| FormatError("capacity"))?;
        Ok(BufferView { header, ring })
    }

    /// The ring.
    pub fn ring(&self) -> SlotRing<'a> {
        self.ring
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.header.pid
    }

    /// The thread id.
    pub fn tid(&self) -> u32 {
        self.header.tid
    }

    /// The thread name.
    pub fn comm(&self) -> String {
        let raw = &self.header.comm;
        let n = raw.iter().position(|&b| b == 0).unwrap_or(16);
        String::from_utf8_lossy(&raw[..n]).into_owned()
    }

    /// Everything the buffer holds, once its writers are gone.
    pub fn contents(&self) -> Contents {
        let ring = self.ring;
        let mut c = Contents {
            pid: self.pid(),
            tid: self.tid(),
            comm: self.comm(),
            entries_written: ring.head(),
            ..Contents::default()
        };
        let mut cursor = Cursor::default();
        // The flight recorder's oldest events are the lapped ones; the rest are read.
        let lapped = match ring.mode() {
            SlotMode::Overwrite => ring.head().saturating_sub(ring.capacity()),
            SlotMode::ProducerConsumer => 0,
        };
        ring.consume(&mut cursor, Drain::Final, |e, _| c.events.push(e));
        c.overrun = lapped;
        c.dropped = ring
            .dropped()
            .saturating_add(cursor.overrun - lapped.min(cursor.overrun));
        c
    }
}

/// Decodes a buffer file's bytes (a copy: the writers are gone).
pub fn read(bytes: &[u8]) -> Result<Contents, FormatError> {
    let mut words = vec![0u64; bytes.len().div_ceil(8)];
    for (w, b) in words.iter_mut().zip(bytes.chunks(8)) {
        let mut a = [0u8; 8];
        a[..b.len()].copy_from_slice(b);
        *w = u64::from_ne_bytes(a);
    }
    // SAFETY: `words` is 8-aligned, `bytes.len()` bytes long, and lives past the view.
    let view = unsafe { BufferView::from_raw(words.as_ptr().cast(), bytes.len()) }?;
    Ok(view.contents())
}

/// Initialises a freshly mapped buffer of `len` bytes and returns its writer. The ring holds
/// the largest power of two of slots that fits.
///
/// # Safety
/// `base` must point to `len` writable, zero-filled, page-aligned bytes,
/// `len >= HEADER_SIZE + SLOT_SIZE`.
pub unsafe fn init(
    base: *mut u8,
    len: usize,
    mode: SlotMode,
    pid: u32,
    tid: u32,
    comm: &[u8],
) -> Writer {
    let slots = (len - HEADER_SIZE) / SLOT_SIZE;
    let cap = if slots.is_power_of_two() {
        slots
    } else {
        slots.next_power_of_two() / 2
    } as u64;
    let h = base.cast::<BufHeader>();
    // SAFETY: `base` is valid for the header (caller's contract) and suitably aligned (page).
    unsafe {
        (*h).version = VERSION;
        (*h).slot_size = SLOT_SIZE as u32;
        (*h).pid = pid;
        (*h).tid = tid;
        let n = comm.len().min(15);
        (&mut (*h).comm)[..n].copy_from_slice(&comm[..n]);
        core::ptr::write(&raw mut (*h).ring, RingHeader::new(cap, mode));
        compiler_fence(Ordering::Release);
        core::ptr::write_volatile(&raw mut (*h).magic, MAGIC);
    }
    Writer {
        header: h,
        // SAFETY: HEADER_SIZE < len.
        slots: unsafe { base.add(HEADER_SIZE) }.cast(),
        mask: cap - 1,
        shift: cap.trailing_zeros(),
        pad: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(slots: usize, mode: SlotMode) -> (Vec<u64>, Writer) {
        let len = HEADER_SIZE + slots * SLOT_SIZE;
        let mut mem = vec![0u64; len / 8];
        // SAFETY: `mem` is zeroed, 8-aligned and `len` bytes long (page alignment is only
        // needed for mapping files).
        let w = unsafe { init(mem.as_mut_ptr().cast(), len, mode, 7, 8, b"worker") };
        (mem, w)
    }

    fn bytes(mem: &[u64]) -> Vec<u8> {
        mem.iter().flat_map(|w| w.to_ne_bytes()).collect()
    }

    #[test]
    fn overwrite_keeps_newest_and_counts_overrun() {
        let (mem, w) = ring(8, SlotMode::Overwrite);
        for i in 0..21u64 {
            // SAFETY: `w` describes `mem`, alive for the loop.
            unsafe { w.write(100 + i, i, 0, KIND_FUNC, 0, 1) };
        }
        let c = read(&bytes(&mem)).unwrap();
        assert_eq!(c.pid, 7);
        assert_eq!(c.tid, 8);
        assert_eq!(c.comm, "worker");
        assert_eq!(c.overrun, 13);
        assert_eq!(c.dropped, 0);
        let ips: Vec<u64> = c.events.iter().map(|s| s.ip).collect();
        assert_eq!(ips, (13..21).collect::<Vec<_>>());
    }

    #[test]
    fn producer_consumer_drops_newest() {
        let (mem, w) = ring(8, SlotMode::ProducerConsumer);
        for i in 0..11u64 {
            // SAFETY: as above.
            unsafe { w.write(i, i, 0, KIND_GRAPH_ENT, 3, 0) };
        }
        let c = read(&bytes(&mem)).unwrap();
        assert_eq!(c.dropped, 3);
        assert_eq!(c.events.len(), 8);
        assert_eq!(depth(&c.events[0]), 3);
        assert_eq!(c.events[0].kind(), KIND_GRAPH_ENT);
        assert_eq!(c.events[7].ip, 7);
    }

    #[test]
    fn uncommitted_slot_is_counted_not_read() {
        let (mut mem, w) = ring(8, SlotMode::Overwrite);
        for i in 0..10u64 {
            // SAFETY: as above.
            unsafe { w.write(i, i, 0, KIND_FUNC, 0, 0) };
        }
        // A writer killed after reserving slot 10 (lap 1): its slot still holds lap 0's event.
        let mut b = bytes(&mem);
        b[HEAD_OFFSET..HEAD_OFFSET + 8].copy_from_slice(&11u64.to_ne_bytes());
        let c = read(&b).unwrap();
        assert_eq!(c.overrun, 3);
        assert_eq!(c.dropped, 1);
        assert_eq!(c.events.len(), 7);
        mem[0] = 0;
        assert!(read(&bytes(&mem)).is_err());
    }

    /// Mutated buffer files (flipped bytes, hostile header words): `read` answers with an
    /// error or with at most `capacity` events, never panics, never loops.
    #[test]
    fn mutated_files_never_panic_or_loop() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for mode in [SlotMode::Overwrite, SlotMode::ProducerConsumer] {
            let (mem, w) = ring(16, mode);
            for i in 0..40u64 {
                // SAFETY: `w` describes `mem`.
                unsafe { w.write(i, i, i, KIND_GRAPH_RET, (i % 5) as u32, 0) };
            }
            let good = bytes(&mem);
            for round in 0..3000 {
                let mut b = good.clone();
                match round % 3 {
                    0 => {
                        for _ in 0..1 + rnd() % 8 {
                            let at = (rnd() as usize) % b.len();
                            b[at] ^= 1 << (rnd() % 8);
                        }
                    }
                    1 => {
                        // A hostile header word (capacity, head, limit_seen, dropped, mode,
                        // limit).
                        let at = RING_OFFSET + [0, 8, 16, 24, 32, 64][rnd() as usize % 6];
                        let v = [u64::MAX, u64::MAX - 1, 1 << 40, rnd(), 0][rnd() as usize % 5];
                        b[at..at + 8].copy_from_slice(&v.to_ne_bytes());
                    }
                    _ => b.truncate((rnd() as usize) % good.len()),
                }
                if let Ok(c) = read(&b) {
                    assert!(
                        c.events.len() <= 16,
                        "round {round}: {} events",
                        c.events.len()
                    );
                }
            }
        }
    }

    #[test]
    fn bad_files_are_refused() {
        let (mem, _) = ring(8, SlotMode::Overwrite);
        let b = bytes(&mem);
        assert_eq!(read(&b[..100]), Err(FormatError("no header")));
        assert_eq!(
            read(&b[..HEADER_SIZE + 7 * SLOT_SIZE]),
            Err(FormatError("capacity"))
        );
        let mut v = b.clone();
        v[8] = 1;
        assert_eq!(read(&v), Err(FormatError("version")));
    }

    #[test]
    fn a_return_value_pairs_only_with_its_own_exit() {
        let ev = |ts, ip, arg, kind, depth: u32| SlotEvent {
            ts,
            ip,
            arg,
            kind: kind | depth << 8,
            cpu: 0,
        };
        let exit = ev(50, 0x1000, 10, KIND_GRAPH_RET, 2);
        let value = ev(50, 0x1000, (-5i64) as u64, KIND_GRAPH_RETVAL, 2);
        assert_eq!(retval_of(&exit, Some(&value)), Some((-5i64) as u64));
        assert_eq!(retval_of(&exit, None), None);
        // Another exit's value (time, function or depth differ), or no value at all.
        for other in [
            ev(49, 0x1000, 1, KIND_GRAPH_RETVAL, 2),
            ev(50, 0x2000, 1, KIND_GRAPH_RETVAL, 2),
            ev(50, 0x1000, 1, KIND_GRAPH_RETVAL, 1),
            ev(50, 0x1000, 1, KIND_GRAPH_ENT, 2),
        ] {
            assert_eq!(retval_of(&exit, Some(&other)), None, "{other:?}");
        }
        // A value is no exit: nothing pairs with it.
        assert_eq!(retval_of(&value, Some(&value)), None);
    }
}
