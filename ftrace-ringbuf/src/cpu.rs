//! One CPU's ring buffer ([`CpuBuffer`]): a lock-free ring of sub-buffer pages written by the
//! strictly nested writers of one CPU (or thread) and consumed by readers on any CPU.
//!
//! This is the kernel's algorithm (`kernel/trace/ring_buffer.c`), re-expressed with page
//! indices instead of list pointers:
//!
//! - The pages form a circular list; each page's `next` word holds the successor's index and,
//!   in its two low bits, the HEAD / UPDATE flags: the link *into* the oldest page (the head)
//!   is flagged HEAD. Writers only ever change flags; the single reader (under the reader lock)
//!   is the only one who changes the list's shape, by splicing its spare "reader page" in place
//!   of the head with one compare-and-swap of the flagged link. A writer in overwrite mode
//!   pushes the head forward with HEAD → UPDATE → (flag the next link HEAD) → NORMAL, and
//!   the reader's swap fails, and retries, while a link says UPDATE.
//! - A writer reserves by adding its length to the tail page's `write` index (a single
//!   interrupt-atomic add), so an interrupting writer simply lands after it. Only the outermost
//!   writer (`committing == 1`) publishes the commit index, which therefore covers every
//!   nested event too. Timestamps follow the kernel's before/after-stamp protocol, so the page
//!   bytes are the kernel's byte for byte.
//!
//! The invariant everything rests on: bytes below a page's published `commit` are final and
//! never rewritten while that page is the reader's; a page in the ring is rewritten only after
//! a writer moved the head past it (counted in `overrun`).

use core::alloc::Layout;
use core::fmt;
use core::ptr::NonNull;

use ftrace_core::platform::TraceClock;

use crate::page::{
    self, EVENT_HEADER_SIZE, MAX_SMALL_DATA, PAGE_HEADER_SIZE, TIME_EXTEND_LEN, TS_MASK, TS_MSB,
    TS_SHIFT, TYPE_PADDING, TYPE_TIME_EXTEND, TYPE_TIME_STAMP,
};
use crate::provider::PageProvider;
use crate::sync::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Local, Ordering, fence, inject};

/// Bits 0..20 of a page's `write` word: the write index (`RB_WRITE_MASK`).
pub(crate) const WRITE_MASK: usize = 0xfffff;
/// Bits 20..40 of a page's `write` word: the events reserved on the page (the kernel's
/// separate `entries` word; in one word, reserving is one add).
const ENTRIES_SHIFT: u32 = 20;
const ENTRIES_MASK: usize = 0xfffff << ENTRIES_SHIFT;
/// One event in a page's `write` word.
const ENTRY_ONE: usize = 1 << ENTRIES_SHIFT;
/// The update counter a writer adds to a page's `write` word when it enters the page
/// (`RB_WRITE_INTCNT`): bits 40.. .
pub(crate) const WRITE_INTCNT: usize = 1 << 40;
/// The update counter bits of a page's `write` word.
pub(crate) const GEN_MASK: usize = !(WRITE_MASK | ENTRIES_MASK);

// The packed page word needs 64 bits.
const _: () = assert!(usize::BITS >= 64, "ftrace-ringbuf needs a 64-bit target");

const PAGE_NORMAL: usize = 0;
const PAGE_HEAD: usize = 1;
const PAGE_UPDATE: usize = 2;
const FLAG_MASK: usize = 3;

/// `committing` (writers inside reserve..commit, at most 255 deep) is the low part of the
/// nesting word.
const COMMITTING_MASK: usize = 0xff;
/// `commits` (commits started, modulo 2^56) is the high part of the nesting word. It is also
/// the count of events written: minus the reservations discarded or lost (their own
/// counters), it is the kernel's `entries` (which the kernel counts with one more add per
/// commit).
const COMMITS_SHIFT: u32 = 8;
const COMMITS_ONE: usize = 1 << COMMITS_SHIFT;
const COMMITS_MASK: usize = usize::MAX >> COMMITS_SHIFT;

/// Sticky "recording off" bit of `record_disabled` (`RB_BUFFER_OFF`).
const RECORD_OFF: u32 = 1 << 20;
/// "This CPU is not in the buffer's CPU mask" bit of `record_disabled`.
const CPU_OFF: u32 = 1 << 21;

/// The largest page (header included) a buffer accepts: the write index must stay below
/// 2^20 even while an event overshoots the page end.
pub const MAX_PAGE_SIZE: usize = 512 * 1024;
/// The smallest page a buffer accepts.
pub const MIN_PAGE_SIZE: usize = 64;

/// What a full buffer does with a new event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Mode {
    /// Overwrite the oldest page (the kernel default, `RB_FL_OVERWRITE`); its events are
    /// counted in `overrun`.
    #[default]
    Overwrite,
    /// Producer/consumer: drop the new event, counted in `dropped events`.
    ProducerConsumer,
}

/// Why a buffer could not be created or resized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BufferError {
    /// The page size is not a power of two in [`MIN_PAGE_SIZE`]..=[`MAX_PAGE_SIZE`].
    BadPageSize,
    /// Fewer than two pages were asked for.
    TooFewPages,
    /// The provider ran out of memory.
    NoMemory,
}

impl BufferError {
    /// The Linux errno a tracefs write reports for this error.
    pub fn errno(self) -> ftrace_core::Errno {
        match self {
            BufferError::NoMemory => ftrace_core::Errno::ENOMEM,
            _ => ftrace_core::Errno::EINVAL,
        }
    }
}

impl fmt::Display for BufferError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BufferError::BadPageSize => "page size must be a power of two from 64 B to 512 KiB",
            BufferError::TooFewPages => "a ring buffer needs at least two pages",
            BufferError::NoMemory => "out of memory for ring-buffer pages",
        })
    }
}

/// Bookkeeping of one sub-buffer page (`struct buffer_page`). One cache line each, so finding
/// a page's descriptor is a shift, and pages do not share lines.
#[repr(C, align(64))]
pub(crate) struct PageDesc {
    /// Next write index (bits 0..20), events reserved on the page (bits 20..40) and update
    /// counter (bits 40..). First, so its address is the descriptor's.
    pub(crate) write: Local,
    /// Successor index << 2 | HEAD/UPDATE flags.
    pub(crate) next: AtomicUsize,
    /// Predecessor index (maintained by the reader).
    pub(crate) prev: AtomicUsize,
    /// Committed bytes (what the page header's `commit` says once handed out).
    pub(crate) commit: AtomicUsize,
    /// Where the end-of-page padding starts (0: none).
    pub(crate) real_end: AtomicUsize,
    /// The page memory (header + data).
    pub(crate) page: AtomicUsize,
}

impl PageDesc {
    fn new(page: NonNull<u8>) -> Self {
        PageDesc {
            next: AtomicUsize::new(0),
            prev: AtomicUsize::new(0),
            write: Local::new(0),
            commit: AtomicUsize::new(0),
            real_end: AtomicUsize::new(0),
            page: AtomicUsize::new(page.as_ptr() as usize),
        }
    }

    #[inline(always)]
    pub(crate) fn page_ptr(&self) -> *mut u8 {
        self.page.load(Ordering::Relaxed) as *mut u8
    }

    #[inline(always)]
    fn write_index(&self) -> usize {
        self.write.get() & WRITE_MASK
    }

    #[inline(always)]
    pub(crate) fn entries_count(&self) -> usize {
        (self.write.get() & ENTRIES_MASK) >> ENTRIES_SHIFT
    }

    /// Pointer to the data area at `offset`.
    #[inline(always)]
    fn data(&self, offset: usize) -> *mut u8 {
        // SAFETY (of the arithmetic): callers keep `offset` within the data area.
        self.page_ptr().wrapping_add(PAGE_HEADER_SIZE + offset)
    }

    /// Writes the page header's time stamp.
    #[inline(always)]
    fn set_time_stamp(&self, ts: u64) {
        // SAFETY: the page is at least a header long and 8-aligned; only the writer that
        // reserved offset 0 of this page writes its stamp.
        unsafe { self.page_ptr().cast::<u64>().write_volatile(ts.to_le()) }
    }

    /// Reads the page header's time stamp (volatile: a writer may be rewriting it).
    #[inline(always)]
    pub(crate) fn time_stamp(&self) -> u64 {
        // SAFETY: see `set_time_stamp`; a torn value is caught by the callers' validation.
        u64::from_le(unsafe { self.page_ptr().cast::<u64>().read_volatile() })
    }
}

#[inline(always)]
fn write_u32(p: *mut u8, v: u32) {
    // SAFETY: callers pass a 4-aligned pointer inside a page region they reserved.
    unsafe { p.cast::<u32>().write(v.to_le()) }
}

/// Reads a 32-bit word of page data (volatile: the iterator may race a writer; its result is
/// validated afterwards, the seqlock pattern).
#[inline(always)]
pub(crate) fn read_u32(p: *const u8) -> u32 {
    // SAFETY: callers pass a 4-aligned pointer inside a live page.
    u32::from_le(unsafe { p.cast::<u32>().read_volatile() })
}

/// Length of the record at `p` (`rb_event_length`), `None` for null padding.
#[inline]
pub(crate) fn record_length(p: *const u8) -> Option<usize> {
    let w = read_u32(p);
    let type_len = w & 0x1f;
    match type_len {
        0 => Some(read_u32(p.wrapping_add(4)) as usize + EVENT_HEADER_SIZE),
        1..=28 => Some(EVENT_HEADER_SIZE + 4 * type_len as usize),
        TYPE_PADDING if w >> 5 == 0 => None,
        TYPE_PADDING => Some(read_u32(p.wrapping_add(4)) as usize + EVENT_HEADER_SIZE),
        _ => Some(TIME_EXTEND_LEN),
    }
}

/// What a trace clock counts, which decides how its timestamps print (the kernel's
/// `trace_clocks[].in_ns`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClockUnit {
    /// Nanoseconds (`local`, `global`, `mono`, ...): printed as `secs.usecs`.
    Nanoseconds,
    /// Ticks of a counter clock (`counter`'s increments, `uptime`'s jiffies, `x86-tsc`'s
    /// cycles): printed as the raw value.
    Ticks,
}

/// Counters of one CPU buffer; what `per_cpu/cpuN/stats` prints.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Events in the buffer (written - overrun - read).
    pub entries: u64,
    /// Events lost to overwriting.
    pub overrun: u64,
    /// Events dropped because nested writers filled the whole buffer ("should be zero").
    pub commit_overrun: u64,
    /// Bytes in the buffer.
    pub bytes: u64,
    /// Time stamp of the oldest page in the buffer.
    pub oldest_event_ts: u64,
    /// The clock's current time.
    pub now_ts: u64,
    /// Events dropped because the buffer was full in producer/consumer mode.
    pub dropped_events: u64,
    /// Events consumed by readers.
    pub read_events: u64,
    /// Events written in total (the kernel's `entries` counter). While writers are active it
    /// includes their open reservations (it is counted when a reservation starts, and taken
    /// back if the reservation is discarded or loses its event).
    pub written: u64,
    /// Reservations refused because the payload exceeded the page (not in the stats file).
    pub too_big: u64,
    /// Pages the writer moved onto.
    pub pages_touched: u64,
    /// Pages lost to overwriting.
    pub pages_lost: u64,
    /// Pages the reader swapped out of the ring.
    pub pages_read: u64,
}

impl Stats {
    /// Writes the stats in the kernel's exact format, the two timestamps in the clock's `unit`.
    pub fn write_to(&self, w: &mut impl fmt::Write, unit: ClockUnit) -> fmt::Result {
        writeln!(w, "entries: {}", self.entries)?;
        writeln!(w, "overrun: {}", self.overrun)?;
        writeln!(w, "commit overrun: {}", self.commit_overrun)?;
        writeln!(w, "bytes: {}", self.bytes)?;
        if unit == ClockUnit::Nanoseconds {
            let (s, us) = ns_to_secs_usecs(self.oldest_event_ts);
            writeln!(w, "oldest event ts: {s:5}.{us:06}")?;
            let (s, us) = ns_to_secs_usecs(self.now_ts);
            writeln!(w, "now ts: {s:5}.{us:06}")?;
        } else {
            writeln!(w, "oldest event ts: {}", self.oldest_event_ts)?;
            writeln!(w, "now ts: {}", self.now_ts)?;
        }
        writeln!(w, "dropped events: {}", self.dropped_events)?;
        writeln!(w, "read events: {}", self.read_events)
    }
}

impl fmt::Display for Stats {
    /// The stats file of a nanosecond clock.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_to(f, ClockUnit::Nanoseconds)
    }
}

/// Splits nanoseconds into seconds and rounded microseconds (the kernel's `ns2usecs` then
/// `do_div` by a million).
pub fn ns_to_secs_usecs(ns: u64) -> (u64, u64) {
    let us = ns.saturating_add(500) / 1000;
    (us / 1_000_000, us % 1_000_000)
}

/// A clock that always answers one explicit timestamp: lets a writer record events at given
/// times (replaying a trace, writing pages identical to a captured kernel's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct At(pub u64);

impl TraceClock for At {
    const NAME: &'static str = "explicit";
    #[inline(always)]
    fn now_ns(&self) -> u64 {
        self.0
    }
}

/// One CPU's ring buffer.
///
/// Writers: [`CpuBuffer::reserve`] then [`Reservation::commit`]; all writers of one buffer must
/// be strictly nested (one CPU with preemption off, or one thread and its signal handlers), at
/// most 255 deep.
/// Readers: [`CpuBuffer::consumer`] (consuming, any CPU) and [`CpuBuffer::iter`]
/// (non-consuming).
#[repr(C)]
pub struct CpuBuffer<P: PageProvider> {
    // --- writer side (modified only by this buffer's nested writers) ---
    /// `commits << COMMITS_SHIFT | committing`: the kernel's two nesting counters in one
    /// word, so starting a commit is one interrupt-atomic add. First, so its address is the
    /// buffer's.
    nesting: Local,
    pub(crate) tail_page: AtomicUsize,
    pub(crate) commit_page: AtomicUsize,
    before_stamp: AtomicU64,
    write_stamp: AtomicU64,
    /// Commits started that write no event: reservations discarded, or that lost their event
    /// (dropped, commit overrun).
    unwritten: Local,
    /// The kernel's `entries_bytes`, folded per page: the final size of every page the commit
    /// has moved past (events, time records, padding), minus the pages overwritten. The pages
    /// from the commit page to the tail page are added when the stats are read, so a write
    /// does not add to it.
    pub(crate) entries_bytes: Local,
    /// The kernel's `entries_bytes` counted per write, as before it was folded (debug builds:
    /// [`CpuBuffer::debug_check_bytes`] compares the two).
    #[cfg(debug_assertions)]
    bytes_shadow: Local,
    pub(crate) overrun: Local,
    commit_overrun: Local,
    dropped_events: Local,
    too_big: Local,
    pages_touched: Local,
    pages_lost: Local,
    record_disabled: AtomicU32,
    overwrite: AtomicBool,
    // --- geometry ---
    descs: NonNull<PageDesc>,
    nr_descs: usize,
    page_size: usize,
    /// `page_size - PAGE_HEADER_SIZE`.
    subbuf: usize,
    // --- reader side (modified under the reader lock) ---
    reader_lock: AtomicBool,
    pub(crate) reader_page: AtomicUsize,
    pub(crate) head_page: AtomicUsize,
    pub(crate) reader_read: AtomicUsize,
    pub(crate) read_stamp: AtomicU64,
    pub(crate) lost_events: AtomicUsize,
    last_overrun: AtomicUsize,
    pub(crate) read: AtomicUsize,
    pub(crate) read_bytes: AtomicUsize,
    pages_read: AtomicUsize,
    oldest_ts: AtomicU64,
    provider: P,
}

// SAFETY: the raw page pointers are owned by the buffer; all shared state is atomic and the
// non-atomic page bytes follow the publish/consume protocol described in the module docs.
unsafe impl<P: PageProvider + Send> Send for CpuBuffer<P> {}
// SAFETY: as above; `&CpuBuffer` is shared by writers (nested on one CPU) and readers.
unsafe impl<P: PageProvider + Sync> Sync for CpuBuffer<P> {}

/// Where a reservation landed: the address of its payload, one word the slow paths return in
/// a register (a reservation is found again by its address, as the kernel's is). Two values
/// that are no address say why an attempt did not succeed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Loc(usize);

impl Loc {
    /// Event lost (dropped, commit overrun) or buffer broken.
    const FAIL: Loc = Loc(0);
    /// Moved to a new page: try again.
    const AGAIN: Loc = Loc(1);

    #[inline(always)]
    fn new(data: *mut u8) -> Loc {
        Loc(data as usize)
    }

    #[inline(always)]
    fn is_retry(self) -> bool {
        self.0 <= Loc::AGAIN.0
    }

    #[inline(always)]
    fn ptr(self) -> *mut u8 {
        self.0 as *mut u8
    }
}

impl<P: PageProvider> CpuBuffer<P> {
    /// Creates a buffer of `nr_pages` sub-buffers of `page_size` bytes each (header included;
    /// 4096 is the kernel default), plus the reader's spare page, in `mode`.
    pub fn new(provider: P, nr_pages: usize, page_size: usize) -> Result<Self, BufferError> {
        if !page_size.is_power_of_two() || !(MIN_PAGE_SIZE..=MAX_PAGE_SIZE).contains(&page_size) {
            return Err(BufferError::BadPageSize);
        }
        if nr_pages < 2 {
            return Err(BufferError::TooFewPages);
        }
        let (descs, nr_descs) = Self::alloc_pages(&provider, nr_pages, page_size)?;
        let b = CpuBuffer {
            tail_page: AtomicUsize::new(0),
            commit_page: AtomicUsize::new(0),
            nesting: Local::new(0),
            before_stamp: AtomicU64::new(0),
            write_stamp: AtomicU64::new(0),
            unwritten: Local::new(0),
            entries_bytes: Local::new(0),
            #[cfg(debug_assertions)]
            bytes_shadow: Local::new(0),
            overrun: Local::new(0),
            commit_overrun: Local::new(0),
            dropped_events: Local::new(0),
            too_big: Local::new(0),
            pages_touched: Local::new(0),
            pages_lost: Local::new(0),
            record_disabled: AtomicU32::new(0),
            overwrite: AtomicBool::new(true),
            descs,
            nr_descs,
            page_size,
            subbuf: page_size - PAGE_HEADER_SIZE,
            reader_lock: AtomicBool::new(false),
            reader_page: AtomicUsize::new(0),
            head_page: AtomicUsize::new(0),
            reader_read: AtomicUsize::new(0),
            read_stamp: AtomicU64::new(0),
            lost_events: AtomicUsize::new(0),
            last_overrun: AtomicUsize::new(0),
            read: AtomicUsize::new(0),
            read_bytes: AtomicUsize::new(0),
            pages_read: AtomicUsize::new(0),
            oldest_ts: AtomicU64::new(0),
            provider,
        };
        b.link_pages();
        Ok(b)
    }

    fn page_layout(page_size: usize) -> Layout {
        // Power of two between 64 B and 512 KiB: a valid layout; align to the page (at most
        // 4 KiB), so flag-free 8-byte header words are aligned.
        Layout::from_size_align(page_size, page_size.min(4096)).expect("valid page layout")
    }

    fn alloc_pages(
        provider: &P,
        nr_pages: usize,
        page_size: usize,
    ) -> Result<(NonNull<PageDesc>, usize), BufferError> {
        let nr_descs = nr_pages + 1;
        let layout = Layout::array::<PageDesc>(nr_descs).map_err(|_| BufferError::NoMemory)?;
        let descs = provider
            .alloc(layout)
            .ok_or(BufferError::NoMemory)?
            .cast::<PageDesc>();
        let page_layout = Self::page_layout(page_size);
        for i in 0..nr_descs {
            let Some(page) = provider.alloc(page_layout) else {
                for j in 0..i {
                    // SAFETY: descriptors 0..i were initialised below with pages from
                    // `provider` of `page_layout`.
                    unsafe {
                        let d = descs.as_ptr().add(j);
                        let p = NonNull::new_unchecked((*d).page_ptr());
                        provider.dealloc(p, page_layout);
                        core::ptr::drop_in_place(d);
                    }
                }
                // SAFETY: `descs` came from `provider` with `layout`.
                unsafe { provider.dealloc(descs.cast(), layout) };
                return Err(BufferError::NoMemory);
            };
            // SAFETY: `i < nr_descs`, inside the block allocated for `nr_descs` descriptors.
            unsafe { descs.as_ptr().add(i).write(PageDesc::new(page)) };
        }
        Ok((descs, nr_descs))
    }

    /// Puts the pages in their initial state: ring 0 → 1 → … → n-1 → 0, head = tail = commit
    /// = page 0 (the link n-1 → 0 flagged HEAD), the reader's spare page is the last one.
    fn link_pages(&self) {
        let n = self.nr_descs - 1;
        for i in 0..n {
            let d = self.desc(i);
            let next = (i + 1) % n;
            let flag = if next == 0 { PAGE_HEAD } else { PAGE_NORMAL };
            d.next.store(next << 2 | flag, Ordering::Relaxed);
            d.prev.store((i + n - 1) % n, Ordering::Relaxed);
        }
        let spare = self.desc(n);
        spare.next.store(0, Ordering::Relaxed);
        spare.prev.store(0, Ordering::Relaxed);
        for i in 0..self.nr_descs {
            let d = self.desc(i);
            d.set_time_stamp(0);
            d.write.set(0);
            d.commit.store(0, Ordering::Relaxed);
            d.real_end.store(0, Ordering::Relaxed);
        }
        self.tail_page.store(0, Ordering::Relaxed);
        self.commit_page.store(0, Ordering::Relaxed);
        self.head_page.store(0, Ordering::Relaxed);
        self.reader_page.store(n, Ordering::Relaxed);
        self.reader_read.store(0, Ordering::Relaxed);
        self.read_stamp.store(0, Ordering::Relaxed);
        self.lost_events.store(0, Ordering::Relaxed);
        self.last_overrun.store(0, Ordering::Relaxed);
        self.read.store(0, Ordering::Relaxed);
        self.read_bytes.store(0, Ordering::Relaxed);
        self.pages_read.store(0, Ordering::Relaxed);
        self.oldest_ts.store(0, Ordering::Relaxed);
        for c in [
            &self.nesting,
            &self.unwritten,
            &self.entries_bytes,
            #[cfg(debug_assertions)]
            &self.bytes_shadow,
            &self.overrun,
            &self.commit_overrun,
            &self.dropped_events,
            &self.too_big,
            &self.pages_touched,
            &self.pages_lost,
        ] {
            c.set(0);
        }
        self.before_stamp.store(0, Ordering::Relaxed);
        self.write_stamp.store(0, Ordering::Relaxed);
        fence(Ordering::SeqCst);
    }

    fn free_pages(&mut self) {
        let page_layout = Self::page_layout(self.page_size);
        for i in 0..self.nr_descs {
            // SAFETY: every descriptor holds a page from `provider` of `page_layout`; `&mut
            // self` means nobody else uses them; each is dropped exactly once.
            unsafe {
                let d = self.descs.as_ptr().add(i);
                let p = NonNull::new_unchecked((*d).page_ptr());
                self.provider.dealloc(p, page_layout);
                core::ptr::drop_in_place(d);
            }
        }
        let layout = Layout::array::<PageDesc>(self.nr_descs).expect("layout was valid");
        // SAFETY: the descriptor array came from `provider` with this layout.
        unsafe { self.provider.dealloc(self.descs.cast(), layout) };
    }

    #[inline(always)]
    pub(crate) fn desc(&self, i: usize) -> &PageDesc {
        debug_assert!(i < self.nr_descs);
        // SAFETY: `i` is a page index (< nr_descs, all initialised) and the array lives as
        // long as `self`.
        unsafe { &*self.descs.as_ptr().add(i) }
    }

    /// The sub-buffer size in bytes, header included.
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// The data bytes of one sub-buffer (`subbuf_size`: page size minus the 16-byte header).
    #[inline(always)]
    pub fn subbuf_size(&self) -> usize {
        self.subbuf
    }

    /// The largest payload a reservation accepts (`BUF_MAX_DATA_SIZE`: 4072 for 4 KiB pages).
    #[inline(always)]
    pub fn max_payload(&self) -> usize {
        self.subbuf_size() - 8
    }

    /// The number of pages in the ring (not counting the reader's page).
    pub fn nr_pages(&self) -> usize {
        self.nr_descs - 1
    }

    /// The full/overwrite policy.
    pub fn mode(&self) -> Mode {
        if self.overwrite.load(Ordering::Relaxed) {
            Mode::Overwrite
        } else {
            Mode::ProducerConsumer
        }
    }

    /// Sets the full/overwrite policy (takes effect for the next page change).
    pub fn set_mode(&self, mode: Mode) {
        self.overwrite
            .store(mode == Mode::Overwrite, Ordering::Relaxed);
    }

    /// Disables recording, counted (`ring_buffer_record_disable_cpu`): each call needs a
    /// matching [`CpuBuffer::record_enable`].
    pub fn record_disable(&self) {
        self.record_disabled.fetch_add(1, Ordering::SeqCst);
    }

    /// Undoes one [`CpuBuffer::record_disable`].
    pub fn record_enable(&self) {
        self.record_disabled.fetch_sub(1, Ordering::SeqCst);
    }

    /// Turns recording off or on, sticky (`tracing_on`, `ring_buffer_record_off/on`).
    pub fn set_record_on(&self, on: bool) {
        if on {
            self.record_disabled
                .fetch_and(!RECORD_OFF, Ordering::SeqCst);
        } else {
            self.record_disabled.fetch_or(RECORD_OFF, Ordering::SeqCst);
        }
    }

    /// Includes or excludes this CPU from recording (`tracing_cpumask`).
    pub fn set_cpu_enabled(&self, enabled: bool) {
        if enabled {
            self.record_disabled.fetch_and(!CPU_OFF, Ordering::SeqCst);
        } else {
            self.record_disabled.fetch_or(CPU_OFF, Ordering::SeqCst);
        }
    }

    /// Whether writers currently record into this buffer.
    pub fn is_recording(&self) -> bool {
        self.record_disabled.load(Ordering::Relaxed) == 0
    }

    // ------------------------------------------------------------------------------------
    // Writer
    // ------------------------------------------------------------------------------------

    /// Reserves room for an event of `len` payload bytes stamped with `clock`.
    ///
    /// Returns `None` when recording is disabled, the payload is larger than
    /// [`CpuBuffer::max_payload`], or the event is lost (producer/consumer mode with a full
    /// buffer, or nested writers filled the whole ring); losses are counted. Never blocks,
    /// never allocates. The reservation must be committed (or discarded) before an
    /// interrupted writer of the same buffer resumes.
    ///
    /// Always inlined: the fast path is a few dozen instructions, and a reservation returned
    /// from an out-of-line call would travel through memory (three times slower).
    #[inline(always)]
    pub fn reserve<C: TraceClock + ?Sized>(
        &self,
        len: usize,
        clock: &C,
    ) -> Option<Reservation<'_, P>> {
        if self.record_disabled.load(Ordering::Relaxed) != 0 {
            return None;
        }
        // (Decided at compile time for a constant `len` that fits the smallest page.)
        if len > MIN_PAGE_SIZE - PAGE_HEADER_SIZE - 8 && len > self.max_payload() {
            self.too_big.inc();
            return None;
        }
        // rb_start_commit
        self.nesting.add(COMMITS_ONE | 1);
        inject::point("start_commit");
        let length = page::event_length(len);
        self.reserve_next(len, length, clock)
    }

    /// A reservation of a `len`-byte payload at `data`, stamped `ts`.
    #[inline(always)]
    fn reservation(&self, len: usize, (data, ts): (NonNull<u8>, u64)) -> Reservation<'_, P> {
        Reservation {
            buf: self,
            data: data.as_ptr(),
            len,
            ts,
        }
    }

    /// The end of a reservation that left the fast path: the event's place, or a retry.
    #[inline(always)]
    fn settle<C: TraceClock + ?Sized>(
        &self,
        (at, ts): (Loc, u64),
        length: usize,
        clock: &C,
    ) -> Option<(NonNull<u8>, u64)> {
        if at.is_retry() {
            return self.reserve_retry(at, length, clock);
        }
        Some((NonNull::new(at.ptr())?, ts))
    }

    /// The rest of `rb_reserve_next_event`'s loop, after an attempt that moved the tail (try
    /// again, up to 1000 times) or lost the event. `None` when it gives up (the commit has
    /// ended then).
    #[inline(never)]
    fn reserve_retry<C: TraceClock + ?Sized>(
        &self,
        mut retry: Loc,
        length: usize,
        clock: &C,
    ) -> Option<(NonNull<u8>, u64)> {
        let mut loops = 0;
        loop {
            if retry == Loc::AGAIN {
                loops += 1;
                if loops > 1000 {
                    self.unwritten.inc();
                    self.end_commit();
                    return None;
                }
            } else {
                self.unwritten.inc();
                self.end_commit();
                return None;
            }
            // A whole attempt through the general path.
            let tail_page = self.tail_page.load(Ordering::Acquire);
            let w = self.desc(tail_page).write_index();
            let before = self.before_stamp.load(Ordering::Relaxed);
            let after = self.write_stamp.load(Ordering::Relaxed);
            let ts = clock.now_ns();
            let (at, ts) = self.reserve_general(tail_page, w, before, after, ts, length, clock);
            if !at.is_retry() {
                return Some((NonNull::new(at.ptr())?, ts));
            }
            retry = at;
        }
    }

    /// Reserves, copies `payload` in and commits: a whole event in one call.
    #[inline]
    pub fn write<C: TraceClock + ?Sized>(&self, payload: &[u8], clock: &C) -> bool {
        match self.reserve(payload.len(), clock) {
            Some(mut r) => {
                r.data().copy_from_slice(payload);
                r.commit();
                true
            }
            None => false,
        }
    }

    /// `__rb_reserve_next`: one attempt at the tail page (labels A–F as in the kernel).
    ///
    /// Inline, this is only the common case: a small event (`type_len` 1..=28) on a page that
    /// already has events, nothing interrupted between the previous writer's B and D, the
    /// delta fits the header, nothing interrupts us between A and C and the event fits the
    /// page. Anything else continues out of line in [`Self::reserve_general`] (decided before
    /// B) or [`Self::reserve_after_c`] (decided after C), which run the kernel's general
    /// protocol from that point.
    #[inline(always)]
    fn reserve_next<C: TraceClock + ?Sized>(
        &self,
        len: usize,
        length: usize,
        clock: &C,
    ) -> Option<Reservation<'_, P>> {
        let tail_page = self.tail_page.load(Ordering::Acquire);
        let d = self.desc(tail_page);
        // A
        let word = d.write.get();
        let w = word & WRITE_MASK;
        let before = self.before_stamp.load(Ordering::Relaxed);
        let after = self.write_stamp.load(Ordering::Relaxed);
        let ts = clock.now_ns();
        let delta = ts.wrapping_sub(after);
        if length - EVENT_HEADER_SIZE > MAX_SMALL_DATA
            || w == 0
            || w + length > self.subbuf_size()
            || before != after
            || delta & !TS_MASK != 0
        {
            return self
                .reserve_from_a(tail_page, w, before, after, ts, length, clock)
                .map(|r| self.reservation(len, r));
        }
        inject::point("A");
        // B
        self.before_stamp.store(ts, Ordering::Relaxed);
        inject::point("B");
        // C
        let old = d.write.fetch_add(length + ENTRY_ONE);
        inject::point("C");
        if old != word {
            // Interrupted between A and C (the whole word differs if the index does): the
            // slow path E-F, or the event no longer fits.
            let write = old.wrapping_add(length) & WRITE_MASK;
            return self
                .reserve_from_c(tail_page, w, write, length, ts, after, clock)
                .map(|r| self.reservation(len, r));
        }
        let tail = w;
        // D: nothing interrupted us between A and C.
        self.write_stamp.store(ts, Ordering::Relaxed);
        inject::point("D");
        // rb_update_event: a small event (`tail != 0`, so the delta is the header's).
        let p = d.data(tail);
        write_u32(
            p,
            page::header_word(((length - EVENT_HEADER_SIZE) / 4) as u32, delta as u32),
        );
        #[cfg(debug_assertions)]
        self.bytes_shadow.add(length);
        inject::point("reserved");
        Some(Reservation {
            buf: self,
            data: p.wrapping_add(EVENT_HEADER_SIZE),
            len,
            ts,
        })
    }

    /// The fast path's exit before B: continue with the general protocol.
    #[cold]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn reserve_from_a<C: TraceClock + ?Sized>(
        &self,
        tail_page: usize,
        w: usize,
        before: u64,
        after: u64,
        ts: u64,
        length: usize,
        clock: &C,
    ) -> Option<(NonNull<u8>, u64)> {
        let r = self.reserve_general(tail_page, w, before, after, ts, length, clock);
        self.settle(r, length, clock)
    }

    /// The fast path's exit after C: continue with the general protocol.
    #[cold]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn reserve_from_c<C: TraceClock + ?Sized>(
        &self,
        tail_page: usize,
        w: usize,
        write: usize,
        length: usize,
        ts: u64,
        after: u64,
        clock: &C,
    ) -> Option<(NonNull<u8>, u64)> {
        let r = self.reserve_after_c(tail_page, w, write, length, ts, after, false, false, clock);
        self.settle(r, length, clock)
    }

    /// `__rb_reserve_next` from the decision after A on, in general: the first event of a
    /// page, an absolute stamp after an interrupted writer, a time extend, a large event.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn reserve_general<C: TraceClock + ?Sized>(
        &self,
        tail_page: usize,
        w: usize,
        before: u64,
        after: u64,
        ts: u64,
        base_len: usize,
        clock: &C,
    ) -> (Loc, u64) {
        let d = self.desc(tail_page);
        let mut length = base_len;
        let mut extend = false;
        let mut force = false;
        if w == 0 {
            // Use the sub-buffer time stamp.
        } else if before != after {
            // We interrupted a writer between its B and D: use an absolute stamp.
            force = true;
            extend = true;
            length += TIME_EXTEND_LEN;
        } else if ts.wrapping_sub(after) & !TS_MASK != 0 {
            extend = true;
            length += TIME_EXTEND_LEN;
        }
        inject::point("A");
        // B
        self.before_stamp.store(ts, Ordering::Relaxed);
        inject::point("B");
        // C
        let write = d.write.add_return(length + ENTRY_ONE) & WRITE_MASK;
        inject::point("C");
        self.reserve_after_c(tail_page, w, write, length, ts, after, extend, force, clock)
    }

    /// `__rb_reserve_next` from C on, in general: the event does not fit (move the tail), or
    /// an interrupt came in between A and C (the slow path E–F), or the event needs the page
    /// stamp, a time record or a length word.
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn reserve_after_c<C: TraceClock + ?Sized>(
        &self,
        tail_page: usize,
        w: usize,
        write: usize,
        mut length: usize,
        mut ts: u64,
        after: u64,
        extend: bool,
        mut force: bool,
        clock: &C,
    ) -> (Loc, u64) {
        let d = self.desc(tail_page);
        let mut delta;
        let tail = write.wrapping_sub(length);
        if write > self.subbuf_size() {
            return (self.move_tail(tail_page, tail, length), 0);
        }
        if tail == w {
            // Nothing interrupted us between A and C.
            // D
            self.write_stamp.store(ts, Ordering::Relaxed);
            inject::point("D");
            delta = if force { ts } else { ts.wrapping_sub(after) };
        } else {
            // Slow path: interrupted between A and C.
            let before = self.before_stamp.load(Ordering::Relaxed);
            let now = clock.now_ns();
            self.before_stamp.store(now, Ordering::Relaxed);
            inject::point("E");
            // E
            let after = self.write_stamp.load(Ordering::Relaxed);
            // F (the kernel compares the masked index with the whole word: index and update
            // counter, the event count is ours)
            delta = if write == d.write.get() & !ENTRIES_MASK && after == before && after < now {
                now - after
            } else {
                0
            };
            ts = now;
            force = false;
        }
        if tail == 0 && !force {
            delta = 0;
        }
        let mut at = tail;
        if extend {
            // rb_add_timestamp
            if delta > 1 << 59 {
                delta = if force && ts & TS_MSB != 0 {
                    delta & page::ABS_TS_MASK
                } else {
                    0
                };
            }
            let type_len = if force {
                TYPE_TIME_STAMP
            } else {
                TYPE_TIME_EXTEND
            };
            let p = d.data(at);
            if force || at != 0 {
                write_u32(p, page::header_word(type_len, (delta & TS_MASK) as u32));
                write_u32(p.wrapping_add(4), (delta >> TS_SHIFT) as u32);
            } else {
                write_u32(p, page::header_word(type_len, 0));
                write_u32(p.wrapping_add(4), 0);
            }
            at += TIME_EXTEND_LEN;
            length -= TIME_EXTEND_LEN;
            delta = 0;
        }
        // rb_update_event
        let p = d.data(at);
        let data_len = length - EVENT_HEADER_SIZE;
        let data = if data_len > MAX_SMALL_DATA {
            write_u32(p, page::header_word(0, delta as u32));
            write_u32(p.wrapping_add(4), data_len as u32);
            p.wrapping_add(8)
        } else {
            write_u32(
                p,
                page::header_word(data_len.div_ceil(4) as u32, delta as u32),
            );
            p.wrapping_add(4)
        };
        if tail == 0 {
            d.set_time_stamp(ts);
        }
        #[cfg(debug_assertions)]
        self.bytes_shadow.add(length + if extend { 8 } else { 0 });
        inject::point("reserved");
        (Loc::new(data), ts)
    }

    /// `rb_move_tail`: the event did not fit; move to the next page (slow path).
    #[cold]
    #[inline(never)]
    fn move_tail(&self, tail_page: usize, tail: usize, length: usize) -> Loc {
        // One load of our link gives both the next page and whether it is the head: the
        // reader may swap the head out (rewriting this link) at any time, and a second load
        // could pair a stale `next_page` with a fresh, unflagged link and walk us into the
        // reader's page (the kernel re-checks and treats "moved" as head for this reason).
        let link = self.desc(tail_page).next.load(Ordering::Acquire);
        let next_page = link >> 2;
        let commit_page = self.commit_page.load(Ordering::Acquire);
        if next_page == commit_page {
            // An interrupt storm made it all the way around the buffer.
            self.commit_overrun.inc();
            self.reset_tail(tail_page, tail, length);
            return Loc::FAIL;
        }
        let mut skip_update = false;
        if link & FLAG_MASK != PAGE_NORMAL {
            // Whether the commit is on the reader page is a question for the links, not for
            // `reader_page` (see `is_reader_page`).
            let commit_on_reader = self.is_reader_page(commit_page);
            if !commit_on_reader {
                if !self.overwrite.load(Ordering::Relaxed) {
                    self.dropped_events.inc();
                    self.reset_tail(tail_page, tail, length);
                    return Loc::FAIL;
                }
                match self.handle_head_page(tail_page, next_page) {
                    Err(()) => {
                        self.reset_tail(tail_page, tail, length);
                        return Loc::FAIL;
                    }
                    Ok(true) => skip_update = true,
                    Ok(false) => {}
                }
            } else if commit_page != self.tail_page.load(Ordering::Acquire) {
                // Interrupts filled the ring while the interrupted commit is still on the
                // reader page: moving on would overwrite it.
                self.commit_overrun.inc();
                self.reset_tail(tail_page, tail, length);
                return Loc::FAIL;
            }
        }
        if !skip_update {
            self.tail_page_update(tail_page, next_page);
        }
        self.reset_tail(tail_page, tail, length);
        // Commit what we have for now, and let the caller try again.
        self.end_commit();
        self.nesting.inc();
        inject::point("moved_tail");
        Loc::AGAIN
    }

    #[inline(always)]
    pub(crate) fn next_of(&self, i: usize) -> usize {
        self.desc(i).next.load(Ordering::Acquire) >> 2
    }

    /// `rb_is_reader_page`: whether `page` is out of the ring, i.e. its predecessor's link no
    /// longer points at it.
    ///
    /// The writer must ask the links, not `reader_page`: the reader splices its old page into
    /// the ring (the CAS on the head's predecessor) before it publishes the new
    /// `reader_page`, and a writer running in between may fill the spliced-in page and find
    /// it still named `reader_page` although it is a ring page in front of the head. Taking
    /// it for the reader page there moves the tail onto the head page and wipes unread,
    /// already counted events. The links change in one CAS, so they are never stale this way:
    /// the page's `prev` is set before the CAS that links it in (and the CAS that unlinks it
    /// leaves it pointing at a predecessor that no longer links to it).
    fn is_reader_page(&self, page: usize) -> bool {
        let prev = self.desc(page).prev.load(Ordering::Acquire);
        self.desc(prev).next.load(Ordering::Acquire) >> 2 != page
    }

    /// Whether `prev`'s link points at `page` with the HEAD or UPDATE flag
    /// (`rb_is_head_page` being non-zero: a head page, possibly being moved).
    fn is_head_link(&self, prev: usize, page: usize) -> bool {
        let link = self.desc(prev).next.load(Ordering::Acquire);
        link >> 2 == page && link & FLAG_MASK != PAGE_NORMAL
    }

    /// `rb_head_page_set`: CAS `prev`'s link to `head` from `old` flag to `new` flag. Returns
    /// the flag found, or `None` ("moved") if the link no longer points at `head`.
    fn head_page_set(&self, head: usize, prev: usize, old: usize, new: usize) -> Option<usize> {
        let val = head << 2;
        match self.desc(prev).next.compare_exchange(
            val | old,
            val | new,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => Some(old),
            Err(cur) if cur >> 2 != head => None,
            Err(cur) => Some(cur & FLAG_MASK),
        }
    }

    /// `rb_handle_head_page`: push the head page forward (overwrite mode). `Ok(true)`: someone
    /// else did it, retry without moving the tail.
    fn handle_head_page(&self, tail_page: usize, next_page: usize) -> Result<bool, ()> {
        let nd = self.desc(next_page);
        // Snapshot the page's counts before claiming it: once claimed, a nested writer may
        // move onto the page and reset them before we account them. (Until the claim the
        // page is stable; if a nested writer claims it first, our claim fails and we do not
        // account.)
        let entries = nd.entries_count();
        let bytes = nd.commit.load(Ordering::Relaxed);
        let kind = self.head_page_set(next_page, tail_page, PAGE_HEAD, PAGE_UPDATE);
        inject::point("head_update");
        match kind {
            Some(PAGE_HEAD) => {
                // First to get here: account the lost page.
                self.overrun.add(entries);
                self.entries_bytes.sub(bytes);
                #[cfg(debug_assertions)]
                self.bytes_shadow.sub(bytes);
                self.pages_lost.inc();
            }
            // An interrupt came in before the update and is processing it: nothing to do.
            Some(PAGE_UPDATE) => {}
            // An interrupt moved the head, or the reader swapped the page: retry.
            Some(PAGE_NORMAL) | None => return Ok(true),
            Some(_) => return Err(()),
        }
        let new_head = self.next_of(next_page);
        let ret = self.head_page_set(new_head, next_page, PAGE_NORMAL, PAGE_HEAD);
        inject::point("head_set");
        match ret {
            Some(PAGE_HEAD) | Some(PAGE_NORMAL) => {}
            _ => return Err(()),
        }
        if ret == Some(PAGE_NORMAL) {
            // An interrupt may have set the head up and then moved the tail past it.
            let cur = self.tail_page.load(Ordering::Acquire);
            if cur != tail_page && cur != next_page {
                self.head_page_set(new_head, next_page, PAGE_HEAD, PAGE_NORMAL);
            }
        }
        if kind == Some(PAGE_HEAD) {
            let r = self.head_page_set(next_page, tail_page, PAGE_UPDATE, PAGE_NORMAL);
            if r != Some(PAGE_UPDATE) {
                return Err(());
            }
        }
        Ok(false)
    }

    /// `rb_tail_page_update`.
    fn tail_page_update(&self, tail_page: usize, next_page: usize) {
        let nd = self.desc(next_page);
        let old_write = nd.write.add_return(WRITE_INTCNT);
        inject::point("tail_update");
        if tail_page == self.tail_page.load(Ordering::Acquire) {
            nd.write.cmpxchg(old_write, old_write & GEN_MASK);
            nd.commit.store(0, Ordering::Relaxed);
            if self
                .tail_page
                .compare_exchange(tail_page, next_page, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                self.pages_touched.inc();
            }
        }
    }

    /// `rb_reset_tail`: fill the end of the page we left with padding, and take our event (its
    /// length and its count) back out of the page's `write` word.
    fn reset_tail(&self, tail_page: usize, tail: usize, length: usize) {
        let d = self.desc(tail_page);
        let bsize = self.subbuf_size();
        if tail >= bsize {
            // Only the event that crossed the end fills the page.
            if tail == bsize {
                d.real_end.store(0, Ordering::Relaxed);
            }
            d.write.sub(length + ENTRY_ONE);
            return;
        }
        let p = d.data(tail);
        d.real_end.store(tail, Ordering::Relaxed);
        if tail > bsize - 8 {
            // No room for any event: null padding.
            write_u32(p, page::header_word(TYPE_PADDING, 0));
            fence(Ordering::Release);
            d.write.sub(length + ENTRY_ONE);
            return;
        }
        write_u32(p.wrapping_add(4), (bsize - tail - EVENT_HEADER_SIZE) as u32);
        write_u32(p, page::header_word(TYPE_PADDING, 1));
        // (The padding is in the page's size: counted in `entries_bytes` when it is folded.)
        #[cfg(debug_assertions)]
        self.bytes_shadow.add(bsize - tail);
        fence(Ordering::Release);
        d.write.sub(tail + length - bsize + ENTRY_ONE);
    }

    /// `rb_set_commit_to_write`: publish everything written so far (outermost writer only).
    /// Fast path: the commit page is the tail page; publish its write index.
    ///
    /// It does not re-check the write index or the tail page after publishing (the kernel's
    /// loops do): a writer that interrupts us anywhere in here is nested (`committing` >= 2,
    /// so it does not publish) and counts itself in `commits`, so `end_commit` sees the
    /// change after its decrement and publishes again.
    #[inline(always)]
    fn set_commit_to_write(&self) {
        let commit_page = self.commit_page.load(Ordering::Relaxed);
        if commit_page == self.tail_page.load(Ordering::Acquire) {
            let cd = self.desc(commit_page);
            let w = cd.write_index();
            inject::point("commit_read");
            cd.commit.store(w, Ordering::Release);
            inject::point("commit_index");
        } else {
            self.set_commit_to_write_slow();
        }
    }

    /// The general `rb_set_commit_to_write`: walk the commit page up to the tail page.
    #[cold]
    #[inline(never)]
    fn set_commit_to_write_slow(&self) {
        loop {
            let mut max = self.nr_descs * 100;
            let mut commit_page = self.commit_page.load(Ordering::Relaxed);
            while commit_page != self.tail_page.load(Ordering::Acquire) {
                max -= 1;
                if max == 0 {
                    return;
                }
                let cd = self.desc(commit_page);
                // The tail has left this page and no writer is on it (the others are nested
                // in us and done): its size is final. Fold it into `entries_bytes`.
                let size = cd.write_index();
                cd.commit.store(size, Ordering::Release);
                self.entries_bytes.add(size);
                commit_page = self.next_of(commit_page);
                self.commit_page.store(commit_page, Ordering::Release);
                inject::point("commit_page");
            }
            let cd = self.desc(commit_page);
            loop {
                let w = cd.write_index();
                if cd.commit.load(Ordering::Relaxed) == w {
                    break;
                }
                cd.commit.store(w, Ordering::Release);
                inject::point("commit_index");
            }
            if self.commit_page.load(Ordering::Relaxed) == self.tail_page.load(Ordering::Acquire) {
                return;
            }
        }
    }

    /// `rb_end_commit`: the outermost writer publishes; every writer leaves. If a writer
    /// interrupted us after we published and before we left (`commits` moved, nobody is
    /// committing any more), publish again.
    #[inline(always)]
    fn end_commit(&self) {
        let nesting = self.nesting.get();
        if nesting & COMMITTING_MASK == 1 {
            self.set_commit_to_write();
        }
        // The decrement and the read of the result are one instruction.
        let now = self.nesting.add_return(usize::MAX);
        inject::point("end_commit");
        if now != nesting.wrapping_sub(1) {
            // Someone came in since we read `nesting`.
            self.end_commit_check(nesting, now);
        }
    }

    /// The end of `rb_end_commit` after an interrupt: if it committed between our commit
    /// update and our decrement and nobody is committing now, come back in and publish again
    /// (the kernel's `goto again`).
    #[cold]
    #[inline(never)]
    fn end_commit_check(&self, mut nesting: usize, mut now: usize) {
        while (now ^ nesting) >> COMMITS_SHIFT != 0 && now & COMMITTING_MASK == 0 {
            self.nesting.inc();
            nesting = self.nesting.get();
            if nesting & COMMITTING_MASK == 1 {
                self.set_commit_to_write();
            }
            now = self.nesting.add_return(usize::MAX);
            inject::point("end_commit");
        }
    }

    /// `rb_commit`: the event was counted when its commit started.
    #[inline(always)]
    fn commit_reservation(&self) {
        inject::point("entries");
        self.end_commit();
    }

    /// The page holding `addr`, an uncommitted reservation's payload (`rb_decrement_entry`'s
    /// search): nearly always the tail page; if interrupts moved the tail on since, any page.
    fn page_of(&self, addr: *mut u8) -> usize {
        let holds = |i: usize| {
            let start = self.desc(i).page_ptr() as usize;
            (start..start + self.page_size).contains(&(addr as usize))
        };
        let tail = self.tail_page.load(Ordering::Acquire);
        if holds(tail) {
            return tail;
        }
        (0..self.nr_descs)
            .find(|&i| holds(i))
            .expect("a reservation lies in one of the buffer's pages")
    }

    /// `ring_buffer_discard_commit` of the reservation whose `len`-byte payload is at `data`.
    fn discard_reservation(&self, data: *mut u8, len: usize) {
        self.unwritten.inc();
        let desc = self.page_of(data);
        let d = self.desc(desc);
        let large = page::event_length(len) - EVENT_HEADER_SIZE > MAX_SMALL_DATA;
        let event = data as usize - d.data(0) as usize - if large { 8 } else { 4 };
        let p = d.data(event);
        // rb_event_discard: turn the event into padding that keeps its delta.
        let len = record_length(p).unwrap_or(EVENT_HEADER_SIZE + 4);
        let hdr = read_u32(p);
        let mut delta = hdr >> 5;
        if delta == 0 {
            delta = 1;
        }
        write_u32(p.wrapping_add(4), (len - EVENT_HEADER_SIZE) as u32);
        write_u32(p, page::header_word(TYPE_PADDING, delta));
        // rb_decrement_entry
        d.write.sub(ENTRY_ONE);
        inject::point("discard");
        // rb_try_to_discard: give the space back if the event is the last one.
        let new_index = event;
        let old_index = event + len;
        if self.tail_page.load(Ordering::Acquire) == desc {
            let word = d.write.get();
            if word & WRITE_MASK == old_index {
                self.before_stamp.store(0, Ordering::Relaxed);
                let mask = word & !WRITE_MASK;
                let given_back =
                    d.write.cmpxchg(old_index + mask, new_index + mask) == old_index + mask;
                // (The page's size shrank: `entries_bytes` has not counted the tail page yet.)
                #[cfg(debug_assertions)]
                if given_back {
                    self.bytes_shadow.sub(len);
                }
                let _ = given_back;
            }
        }
        self.end_commit();
    }

    // ------------------------------------------------------------------------------------
    // Reader
    // ------------------------------------------------------------------------------------

    pub(crate) fn lock_reader(&self) {
        while self
            .reader_lock
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            while self.reader_lock.load(Ordering::Relaxed) {
                crate::sync::spin_loop();
            }
        }
    }

    pub(crate) fn try_lock_reader(&self) -> bool {
        self.reader_lock
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    pub(crate) fn unlock_reader(&self) {
        self.reader_lock.store(false, Ordering::Release);
    }

    /// Events written (the kernel's `entries`): commits started, minus the reservations
    /// discarded or lost. While writers are active it counts their reservations in flight.
    pub(crate) fn written(&self) -> usize {
        // Read the losses first: a loss is counted after its commit started.
        let lost = self.unwritten.get();
        ((self.nesting.get() >> COMMITS_SHIFT).wrapping_sub(lost)) & COMMITS_MASK
    }

    /// Events in the buffer: written - (overrun + read).
    pub(crate) fn num_entries(&self) -> usize {
        self.written()
            .wrapping_sub(self.overrun.get())
            .wrapping_sub(self.read.load(Ordering::Relaxed))
    }

    /// `rb_set_head_page`: find the page whose incoming link carries HEAD. Spins while a
    /// writer has the head in UPDATE state.
    pub(crate) fn find_head(&self) -> usize {
        let start = self.head_page.load(Ordering::Relaxed);
        loop {
            let mut page = start;
            loop {
                let prev = self.desc(page).prev.load(Ordering::Relaxed);
                if self.is_head_link(prev, page) {
                    self.head_page.store(page, Ordering::Relaxed);
                    return page;
                }
                page = self.next_of(page);
                if page == start {
                    break;
                }
            }
            crate::sync::spin_loop();
        }
    }

    /// `rb_get_reader_page` (reader lock held): the reader page if it has unread data,
    /// swapping in the head page when the current one is used up.
    pub(crate) fn get_reader_page(&self) -> Option<usize> {
        let mut result = None;
        for _ in 0..3 {
            let reader = self.reader_page.load(Ordering::Relaxed);
            let rd = self.desc(reader);
            let read = self.reader_read.load(Ordering::Relaxed);
            // The commit page first: if it has moved past our page, the page's commit index
            // (stored before the move) is final. Read the other way round, a stale index and
            // a fresh commit page would make us drop a page with unread events.
            let commit_page = self.commit_page.load(Ordering::Acquire);
            let size = rd.commit.load(Ordering::Acquire);
            if read < size {
                result = Some(reader);
                break;
            }
            if commit_page == reader {
                break;
            }
            if self.num_entries() == 0 {
                break;
            }
            // Reset the spare page and splice it in place of the head.
            rd.write.set(0);
            rd.commit.store(0, Ordering::Relaxed);
            rd.real_end.store(0, Ordering::Relaxed);
            let (head, overrun) = loop {
                let head = self.find_head();
                let hd = self.desc(head);
                let head_next = hd.next.load(Ordering::Acquire) >> 2;
                let prev = hd.prev.load(Ordering::Relaxed);
                rd.next.store(head_next << 2 | PAGE_HEAD, Ordering::Relaxed);
                rd.prev.store(prev, Ordering::Relaxed);
                fence(Ordering::SeqCst);
                let overrun = self.overrun.get();
                inject::point("reader_swap");
                if self
                    .desc(prev)
                    .next
                    .compare_exchange(
                        head << 2 | PAGE_HEAD,
                        reader << 2,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    )
                    .is_ok()
                {
                    break (head, overrun);
                }
                crate::sync::spin_loop();
            };
            // The old reader page is in the ring now, the old head out of it, but
            // `reader_page` still names the former until the store below: a writer may run
            // here (on another CPU) for as long as the reader is preempted.
            inject::point("reader_spliced");
            let head_next = self.next_of(reader);
            self.desc(head_next).prev.store(reader, Ordering::Relaxed);
            self.head_page.store(head_next, Ordering::Relaxed);
            self.pages_read.fetch_add(1, Ordering::Relaxed);
            self.reader_page.store(head, Ordering::Release);
            self.reader_read.store(0, Ordering::Relaxed);
            let last = self.last_overrun.load(Ordering::Relaxed);
            if overrun != last {
                self.lost_events
                    .store(overrun.wrapping_sub(last), Ordering::Relaxed);
                self.last_overrun.store(overrun, Ordering::Relaxed);
            }
        }
        if let Some(r) = result {
            if self.reader_read.load(Ordering::Relaxed) == 0 {
                self.read_stamp
                    .store(self.desc(r).time_stamp(), Ordering::Relaxed);
            }
        }
        result
    }

    /// `rb_advance_reader` (reader lock held): step over the record at the read position,
    /// updating the read stamp and counters. Returns its length.
    pub(crate) fn advance_reader(&self, reader: usize) -> usize {
        let rd = self.desc(reader);
        let read = self.reader_read.load(Ordering::Relaxed);
        let commit = rd.commit.load(Ordering::Acquire);
        let p = rd.data(read);
        let w = read_u32(p);
        let type_len = w & 0x1f;
        let len = match record_length(p) {
            Some(l) => l,
            None => commit - read,
        };
        let stamp = self.read_stamp.load(Ordering::Relaxed);
        match type_len {
            0..=28 => {
                self.read.fetch_add(1, Ordering::Relaxed);
                self.read_stamp
                    .store(stamp.wrapping_add((w >> 5) as u64), Ordering::Relaxed);
            }
            TYPE_TIME_EXTEND => {
                let v = ((read_u32(p.wrapping_add(4)) as u64) << TS_SHIFT) | (w >> 5) as u64;
                self.read_stamp
                    .store(stamp.wrapping_add(v), Ordering::Relaxed);
            }
            TYPE_TIME_STAMP => {
                let v = ((read_u32(p.wrapping_add(4)) as u64) << TS_SHIFT) | (w >> 5) as u64;
                self.read_stamp
                    .store(page::fix_abs_ts(v, stamp), Ordering::Relaxed);
            }
            // A discarded event's delta counts (see `page::Events`).
            _ => self
                .read_stamp
                .store(stamp.wrapping_add((w >> 5) as u64), Ordering::Relaxed),
        }
        self.reader_read.store(read + len, Ordering::Relaxed);
        self.read_bytes.fetch_add(len, Ordering::Relaxed);
        len
    }

    /// The counters, with `now` as the current time (`per_cpu/cpuN/stats`).
    ///
    /// The oldest event's time needs the reader lock; if another reader holds it (or this
    /// thread does, through a [`Consumer`](crate::Consumer)), the value last computed is used
    /// ([`Consumer::stats`](crate::Consumer::stats) computes it under the lock it holds).
    pub fn stats(&self, now: u64) -> Stats {
        if self.try_lock_reader() {
            let s = self.stats_locked(now);
            self.unlock_reader();
            s
        } else {
            self.stats_with_oldest(now, self.oldest_ts.load(Ordering::Relaxed))
        }
    }

    /// [`CpuBuffer::stats`] with the reader lock held.
    pub(crate) fn stats_locked(&self, now: u64) -> Stats {
        let reader = self.reader_page.load(Ordering::Relaxed);
        let oldest_page = if self.tail_page.load(Ordering::Acquire) == reader {
            reader
        } else {
            self.find_head()
        };
        let oldest = self.desc(oldest_page).time_stamp();
        self.oldest_ts.store(oldest, Ordering::Relaxed);
        self.stats_with_oldest(now, oldest)
    }

    fn stats_with_oldest(&self, now: u64, oldest: u64) -> Stats {
        let entries = self.written();
        let overrun = self.overrun.get();
        let read = self.read.load(Ordering::Relaxed);
        Stats {
            entries: entries.wrapping_sub(overrun).wrapping_sub(read) as u64,
            overrun: overrun as u64,
            commit_overrun: self.commit_overrun.get() as u64,
            bytes: self
                .entries_bytes()
                .wrapping_sub(self.read_bytes.load(Ordering::Relaxed)) as u64,
            oldest_event_ts: oldest,
            now_ts: now,
            dropped_events: self.dropped_events.get() as u64,
            read_events: read as u64,
            written: entries as u64,
            too_big: self.too_big.get() as u64,
            pages_touched: self.pages_touched.get() as u64,
            pages_lost: self.pages_lost.get() as u64,
            pages_read: self.pages_read.load(Ordering::Relaxed) as u64,
        }
    }

    /// The kernel's `entries_bytes`: the folded pages plus the pages from the commit page to
    /// the tail page (one page when no writer is active).
    fn entries_bytes(&self) -> usize {
        let tail = self.tail_page.load(Ordering::Acquire);
        let mut page = self.commit_page.load(Ordering::Acquire);
        let mut bytes = self.entries_bytes.get();
        for _ in 0..self.nr_descs {
            bytes = bytes.wrapping_add(self.desc(page).write_index());
            if page == tail {
                break;
            }
            page = self.next_of(page);
        }
        bytes
    }

    /// Debug builds: checks that the byte count folded per page equals the count kept per
    /// write (call it with no writer active). Release builds: does nothing.
    #[doc(hidden)]
    pub fn debug_check_bytes(&self) {
        #[cfg(debug_assertions)]
        assert_eq!(
            self.entries_bytes(),
            self.bytes_shadow.get(),
            "bytes folded per page != bytes counted per write"
        );
    }

    /// Writes the page ring's internal state (links, flags, indices, counts): a debugging aid.
    #[doc(hidden)]
    pub fn dump_state(&self, w: &mut impl fmt::Write) -> fmt::Result {
        writeln!(
            w,
            "tail {} commit {} reader {} (read {}) head hint {}",
            self.tail_page.load(Ordering::Relaxed),
            self.commit_page.load(Ordering::Relaxed),
            self.reader_page.load(Ordering::Relaxed),
            self.reader_read.load(Ordering::Relaxed),
            self.head_page.load(Ordering::Relaxed),
        )?;
        for i in 0..self.nr_descs {
            let d = self.desc(i);
            let next = d.next.load(Ordering::Relaxed);
            writeln!(
                w,
                "page {i}: next {} flag {} prev {} write {:#x} entries {} gen {} commit {} real_end {}",
                next >> 2,
                next & FLAG_MASK,
                d.prev.load(Ordering::Relaxed),
                d.write_index(),
                d.entries_count(),
                d.write.get() >> 40,
                d.commit.load(Ordering::Relaxed),
                d.real_end.load(Ordering::Relaxed),
            )?;
        }
        Ok(())
    }

    /// Empties the buffer and zeroes its counters (`ring_buffer_reset_cpu`).
    pub fn reset(&mut self) {
        self.link_pages();
    }

    /// [`CpuBuffer::reset`] through a shared reference.
    ///
    /// # Safety
    /// No writer may be inside `reserve`..`commit` on this buffer and none may start until this
    /// returns (disable recording and wait for a grace period first, as the kernel does), and
    /// no reader may use it concurrently.
    pub unsafe fn reset_shared(&self) {
        self.link_pages();
    }

    /// Changes the number of pages (`buffer_size_kb`): frees the old pages and allocates new
    /// ones, emptying the buffer. On error the buffer keeps its old pages and content.
    pub fn resize(&mut self, nr_pages: usize) -> Result<(), BufferError> {
        if nr_pages < 2 {
            return Err(BufferError::TooFewPages);
        }
        let (descs, nr_descs) = Self::alloc_pages(&self.provider, nr_pages, self.page_size)?;
        let disabled = self.record_disabled.load(Ordering::Relaxed);
        let mode = self.mode();
        self.free_pages();
        self.descs = descs;
        self.nr_descs = nr_descs;
        self.link_pages();
        self.record_disabled.store(disabled, Ordering::Relaxed);
        self.set_mode(mode);
        Ok(())
    }

    /// Allocates a page for [`Consumer::read_page`](crate::Consumer::read_page) from this buffer's provider
    /// (`ring_buffer_alloc_read_page`).
    pub fn alloc_read_page(&self) -> Result<ReadPage<'_, P>, BufferError> {
        let layout = Self::page_layout(self.page_size);
        let ptr = self.provider.alloc(layout).ok_or(BufferError::NoMemory)?;
        Ok(ReadPage {
            provider: &self.provider,
            ptr,
            layout,
        })
    }
}

impl<P: PageProvider> Drop for CpuBuffer<P> {
    fn drop(&mut self) {
        self.free_pages();
    }
}

impl<P: PageProvider> fmt::Debug for CpuBuffer<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CpuBuffer")
            .field("nr_pages", &self.nr_pages())
            .field("page_size", &self.page_size)
            .field("mode", &self.mode())
            .finish_non_exhaustive()
    }
}

/// Room reserved for one event; fill it with [`Reservation::data`], then
/// [`Reservation::commit`]. Dropping it discards the event.
#[must_use = "an event is recorded only when committed"]
pub struct Reservation<'a, P: PageProvider> {
    buf: &'a CpuBuffer<P>,
    data: *mut u8,
    len: usize,
    ts: u64,
}

impl<P: PageProvider> Reservation<'_, P> {
    /// The event's payload area (`len` bytes as reserved).
    #[inline(always)]
    pub fn data(&mut self) -> &mut [u8] {
        // SAFETY: the reservation owns these `len` bytes of the page exclusively until it is
        // committed or discarded: no other writer reserves them, no reader reads beyond the
        // commit index, which cannot cover them before our commit.
        unsafe { core::slice::from_raw_parts_mut(self.data, self.len) }
    }

    /// The timestamp the event was recorded with.
    #[inline(always)]
    pub fn timestamp(&self) -> u64 {
        self.ts
    }

    /// Publishes the event (`ring_buffer_unlock_commit`).
    #[inline(always)]
    pub fn commit(self) {
        let buf = self.buf;
        core::mem::forget(self);
        buf.commit_reservation();
    }

    /// Throws the event away (`ring_buffer_discard_commit`): its space becomes padding, or is
    /// given back if nothing was written after it.
    pub fn discard(self) {
        let (buf, data, len) = (self.buf, self.data, self.len);
        core::mem::forget(self);
        buf.discard_reservation(data, len);
    }
}

impl<P: PageProvider> Drop for Reservation<'_, P> {
    fn drop(&mut self) {
        self.buf.discard_reservation(self.data, self.len);
    }
}

impl<P: PageProvider> fmt::Debug for Reservation<'_, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reservation")
            .field("len", &self.len)
            .field("ts", &self.ts)
            .finish_non_exhaustive()
    }
}

/// A page owned by a reader, for [`Consumer::read_page`](crate::Consumer::read_page) (`trace_pipe_raw`): after a read it
/// holds a complete `buffer_data_page`, flags and lost-event count included.
pub struct ReadPage<'a, P: PageProvider> {
    provider: &'a P,
    pub(crate) ptr: NonNull<u8>,
    layout: Layout,
}

impl<P: PageProvider> ReadPage<'_, P> {
    /// The page bytes (header included).
    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: we own this block of `layout.size()` bytes (from the provider, zeroed, so
        // initialised); writers never touch a page once it left the ring.
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.layout.size()) }
    }

    /// The page, decoded.
    pub fn page(&self) -> page::Page<'_> {
        page::Page::new(self.as_bytes()).expect("read pages are well formed")
    }
}

impl<P: PageProvider> Drop for ReadPage<'_, P> {
    fn drop(&mut self) {
        // SAFETY: the block came from this provider with this layout and is ours.
        unsafe { self.provider.dealloc(self.ptr, self.layout) }
    }
}

impl<P: PageProvider> fmt::Debug for ReadPage<'_, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadPage")
            .field("size", &self.layout.size())
            .finish()
    }
}
