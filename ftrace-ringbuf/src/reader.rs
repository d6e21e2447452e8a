//! Readers of a [`CpuBuffer`]: the consuming [`Consumer`] (events one by one, `trace_pipe`, or
//! whole pages, `trace_pipe_raw`), the non-consuming [`Iter`] (`trace`), and
//! [`merge_next`], which interleaves several CPUs by timestamp.
//!
//! Readers of one buffer are serialised by its reader lock (a [`Consumer`] or [`Iter`] holds
//! it for its lifetime); they never block writers. A consumer only reads below the reader
//! page's published commit index, bytes no writer rewrites. The iterator reads pages that an
//! overwriting writer may recycle under it, so it copies each event and then checks the
//! page's update counter did not move (the seqlock pattern), restarting from the head and
//! reporting `missed` if it did.

use core::fmt;

use crate::cpu::{CpuBuffer, GEN_MASK, ReadPage, read_u32, record_length};
use crate::page::{
    EVENT_HEADER_SIZE, MISSED_EVENTS, MISSED_STORED, PAGE_HEADER_SIZE, TYPE_PADDING,
    TYPE_TIME_EXTEND, TYPE_TIME_STAMP, fix_abs_ts,
};
use crate::provider::PageProvider;
use crate::sync::{Ordering, fence};

/// One event as the consuming reader ([`Consumer`]) sees it (the non-consuming [`Iter`]
/// yields [`IterEvent`]s; ftrace-tracers' `EventRef` is the decoded event of the trace).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConsumedEvent<'a> {
    /// Absolute timestamp.
    pub ts: u64,
    /// The payload (padded to 4 bytes, as the kernel reports its length).
    pub payload: &'a [u8],
    /// Events lost (overwritten) just before this one; 0 if none.
    pub lost: u64,
}

/// Payload bytes of the data record at `p` of total length `len`.
fn payload_of(p: *const u8, len: usize) -> (*const u8, usize) {
    if read_u32(p) & 0x1f == 0 {
        (p.wrapping_add(8), len - 8)
    } else {
        (p.wrapping_add(EVENT_HEADER_SIZE), len - EVENT_HEADER_SIZE)
    }
}

/// The consuming reader of one CPU buffer (holds its reader lock).
pub struct Consumer<'a, P: PageProvider> {
    buf: &'a CpuBuffer<P>,
}

impl<P: PageProvider> CpuBuffer<P> {
    /// Takes the reader lock (spinning while another reader holds it) and returns the
    /// consuming reader. A thread must not ask for a second reader of a buffer while it holds
    /// one (it would wait for itself); see [`CpuBuffer::try_consumer`].
    pub fn consumer(&self) -> Consumer<'_, P> {
        self.lock_reader();
        Consumer { buf: self }
    }

    /// The consuming reader, if no other reader holds the lock.
    pub fn try_consumer(&self) -> Option<Consumer<'_, P>> {
        self.try_lock_reader().then_some(Consumer { buf: self })
    }

    /// A non-consuming iterator over the buffer's events, oldest first (holds the reader lock).
    /// `scratch` receives each event's copy; it must hold the largest event (a page's data
    /// size is always enough).
    pub fn iter<'b>(&'b self, scratch: &'b mut [u8]) -> Iter<'b, P> {
        self.lock_reader();
        let reader = self.reader_page.load(Ordering::Relaxed);
        let read = self.reader_read.load(Ordering::Relaxed);
        let stamp = if read == 0 {
            self.desc(reader).time_stamp()
        } else {
            self.read_stamp.load(Ordering::Relaxed)
        };
        let gen_ = self.desc(reader).write.get() & GEN_MASK;
        Iter {
            buf: self,
            scratch,
            page: reader,
            pos: read,
            stamp,
            page_stamp: self.desc(reader).time_stamp(),
            gen_,
            on_reader_page: true,
            missed: false,
        }
    }
}

impl<P: PageProvider> Consumer<'_, P> {
    /// The next event without consuming it (padding and time records before it are consumed).
    pub fn peek(&mut self) -> Option<ConsumedEvent<'_>> {
        let (reader, ts, at, len) = self.next_data()?;
        let (p, n) = payload_of(self.buf.desc(reader).page_ptr().wrapping_add(at), len);
        Some(ConsumedEvent {
            ts,
            // SAFETY: the record lies below the reader page's commit index: final bytes that
            // no writer rewrites while the page is the reader's, which it stays while `self`
            // is borrowed.
            payload: unsafe { core::slice::from_raw_parts(p, n) },
            lost: self.buf.lost_events.load(Ordering::Relaxed) as u64,
        })
    }

    /// The timestamp of the next event, if any (for [`merge_next`]).
    pub fn peek_ts(&mut self) -> Option<u64> {
        self.next_data().map(|(_, ts, _, _)| ts)
    }

    /// Consumes and returns the next event (`ring_buffer_consume`).
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<ConsumedEvent<'_>> {
        let (reader, ts, at, len) = self.next_data()?;
        let lost = self.buf.lost_events.swap(0, Ordering::Relaxed) as u64;
        self.buf.advance_reader(reader);
        let (p, n) = payload_of(self.buf.desc(reader).page_ptr().wrapping_add(at), len);
        Some(ConsumedEvent {
            ts,
            // SAFETY: as in `peek`: committed bytes of the page the reader owns; it is not
            // swapped before the next call, which needs `&mut self`.
            payload: unsafe { core::slice::from_raw_parts(p, n) },
            lost,
        })
    }

    /// Positions the reader on the next data record: (page, timestamp, offset in the page,
    /// record length).
    fn next_data(&mut self) -> Option<(usize, u64, usize, usize)> {
        loop {
            let reader = self.buf.get_reader_page()?;
            let d = self.buf.desc(reader);
            let read = self.buf.reader_read.load(Ordering::Relaxed);
            let p = d.page_ptr().wrapping_add(PAGE_HEADER_SIZE + read);
            let w = read_u32(p);
            if w & 0x1f <= 28 {
                let len = record_length(p).expect("data records have a length");
                let ts = self
                    .buf
                    .read_stamp
                    .load(Ordering::Relaxed)
                    .wrapping_add((w >> 5) as u64);
                return Some((reader, ts, PAGE_HEADER_SIZE + read, len));
            }
            // Padding, time extend or time stamp: internal, consume it.
            self.buf.advance_reader(reader);
        }
    }

    /// Reads one page of events in the kernel's format into `out` (`ring_buffer_read_page`,
    /// the basis of `trace_pipe_raw`). A fully committed, unread page is swapped with `out`'s
    /// (zero copy); otherwise the available events are copied. The page's commit word carries
    /// the missed-events flags, and the count of lost events is stored after the data when it
    /// fits. Returns the number of events now in `out`, `None` if there was nothing to read.
    pub fn read_page(&mut self, out: &mut ReadPage<'_, P>) -> Option<usize> {
        let buf = self.buf;
        let reader = buf.get_reader_page()?;
        let missed = buf.lost_events.load(Ordering::Relaxed);
        let rd = buf.desc(reader);
        let read = buf.reader_read.load(Ordering::Relaxed);
        // Commit page before commit index (see `get_reader_page`).
        let on_commit_page = reader == buf.commit_page.load(Ordering::Acquire);
        let commit = rd.commit.load(Ordering::Acquire);
        let subbuf = buf.subbuf_size();
        let dst = out.ptr.as_ptr();
        let (mut size, events);
        if read != 0 || on_commit_page {
            // Copy the events one at a time (a time extend travels with its event).
            let save_ts = buf.read_stamp.load(Ordering::Relaxed);
            let mut pos = 0;
            let mut n = 0;
            while buf.reader_read.load(Ordering::Relaxed) < commit {
                let r = buf.reader_read.load(Ordering::Relaxed);
                let src = rd.page_ptr().wrapping_add(PAGE_HEADER_SIZE + r);
                if read_u32(src) & 0x1f <= 28 {
                    n += 1;
                }
                let len = buf.advance_reader(reader);
                // SAFETY: `src..src+len` is committed data of the reader page; `dst` is our
                // page of the same size and `pos + len <= commit - read <= subbuf`.
                unsafe {
                    core::ptr::copy_nonoverlapping(src, dst.add(PAGE_HEADER_SIZE + pos), len)
                };
                pos += len;
            }
            // SAFETY: `dst` is our page, 8-aligned and at least a header long.
            unsafe { dst.cast::<u64>().write(save_ts.to_le()) };
            size = pos;
            events = n;
        } else {
            // Swap the whole page out of the ring.
            events = rd.entries_count();
            buf.read.fetch_add(events, Ordering::Relaxed);
            buf.read_bytes.fetch_add(commit, Ordering::Relaxed);
            let theirs = rd.page.swap(dst as usize, Ordering::Relaxed) as *mut u8;
            out.ptr = core::ptr::NonNull::new(theirs).expect("pages are non-null");
            rd.write.set(0);
            rd.commit.store(0, Ordering::Relaxed);
            buf.reader_read.store(0, Ordering::Relaxed);
            let real_end = rd.real_end.load(Ordering::Relaxed);
            size = if real_end != 0 { real_end } else { commit };
        }
        buf.lost_events.store(0, Ordering::Relaxed);
        let dst = out.ptr.as_ptr();
        let mut word = size as u64;
        if missed != 0 {
            if subbuf - size >= 8 {
                // SAFETY: `size + 8 <= subbuf`: inside our page's data area.
                unsafe {
                    dst.add(PAGE_HEADER_SIZE + size)
                        .cast::<u64>()
                        .write_unaligned((missed as u64).to_le())
                };
                word += MISSED_STORED;
                size += 8;
            }
            // The kernel adds `(int)(1 << 31)` to a `long`: sign-extended.
            word = word.wrapping_add(MISSED_EVENTS | 0xffff_ffff_0000_0000);
        }
        // SAFETY: our page: header word at 8, zeroing `size..subbuf` of the data area.
        unsafe {
            dst.add(8).cast::<u64>().write(word.to_le());
            core::ptr::write_bytes(dst.add(PAGE_HEADER_SIZE + size), 0, subbuf - size);
        }
        Some(events)
    }

    /// The buffer's counters (`per_cpu/cpuN/stats`), computed under this reader's lock.
    pub fn stats(&self, now: u64) -> crate::Stats {
        self.buf.stats_locked(now)
    }

    /// Events lost (overwritten) since the last event or page this reader returned.
    pub fn lost_events(&self) -> u64 {
        self.buf.lost_events.load(Ordering::Relaxed) as u64
    }
}

impl<P: PageProvider> Drop for Consumer<'_, P> {
    fn drop(&mut self) {
        self.buf.unlock_reader();
    }
}

impl<P: PageProvider> fmt::Debug for Consumer<'_, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer").finish_non_exhaustive()
    }
}

/// An event copied out by [`Iter`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IterEvent<'a> {
    /// Absolute timestamp.
    pub ts: u64,
    /// The payload (padded to 4 bytes).
    pub payload: &'a [u8],
    /// The writer overwrote pages under the iterator before this event (events are missing).
    pub missed: bool,
}

/// A non-consuming iterator over one CPU buffer (the `trace` file); see [`CpuBuffer::iter`].
pub struct Iter<'a, P: PageProvider> {
    buf: &'a CpuBuffer<P>,
    scratch: &'a mut [u8],
    page: usize,
    pos: usize,
    /// The time of the next record.
    stamp: u64,
    /// The page's stamp the times on this page were counted from: a writer that recycles the
    /// page stamps it anew (see `step`).
    page_stamp: u64,
    gen_: usize,
    on_reader_page: bool,
    missed: bool,
}

impl<P: PageProvider> Iter<'_, P> {
    /// Restarts at the oldest page of the ring after the writer recycled ours.
    fn restart_at_head(&mut self) {
        let head = self.buf.find_head();
        self.enter(head);
        self.missed = true;
    }

    fn enter(&mut self, page: usize) {
        let d = self.buf.desc(page);
        self.gen_ = d.write.get() & GEN_MASK;
        fence(Ordering::Acquire);
        self.page = page;
        self.pos = 0;
        self.stamp = d.time_stamp();
        self.page_stamp = self.stamp;
        self.on_reader_page = page == self.buf.reader_page.load(Ordering::Relaxed);
        crate::sync::inject::point("iter_entered");
    }

    /// Whether the page we are on was recycled since we entered it.
    fn page_moved(&self) -> bool {
        fence(Ordering::Acquire);
        self.buf.desc(self.page).write.get() & GEN_MASK != self.gen_
    }

    /// The timestamp of the next event, if any, without moving (for [`merge_next`]).
    pub fn peek_ts(&mut self) -> Option<u64> {
        let save = (
            self.page,
            self.pos,
            self.stamp,
            self.page_stamp,
            self.gen_,
            self.on_reader_page,
        );
        let missed = self.missed;
        let ts = self.step().map(|(ts, _)| ts);
        (
            self.page,
            self.pos,
            self.stamp,
            self.page_stamp,
            self.gen_,
            self.on_reader_page,
        ) = save;
        self.missed = missed;
        ts
    }

    /// Advances to the next data event, copying it into the scratch buffer: (ts, payload
    /// length).
    fn step(&mut self) -> Option<(u64, usize)> {
        let mut guard = 0usize;
        loop {
            guard += 1;
            if guard > 1 << 24 {
                return None;
            }
            let d = self.buf.desc(self.page);
            // Commit page before commit index (see `CpuBuffer::get_reader_page`).
            let on_commit_page = self.page == self.buf.commit_page.load(Ordering::Acquire);
            let commit = d.commit.load(Ordering::Acquire);
            if self.pos >= commit {
                // End of this page: stop at the commit page, else go on.
                if on_commit_page {
                    return None;
                }
                let next = if self.on_reader_page {
                    self.buf.find_head()
                } else {
                    self.buf.next_of(self.page)
                };
                crate::sync::inject::point("iter_found_next");
                if self.page_moved() {
                    self.restart_at_head();
                    continue;
                }
                self.enter(next);
                continue;
            }
            if self.pos == 0 {
                // Time the page's first record from the page stamp as it is now that the
                // commit covers that record: the one read on entering the page may predate
                // the writer stamping it (the page's time from a lap ago). A recycled page
                // is caught by `page_moved` below.
                self.stamp = d.time_stamp();
                self.page_stamp = self.stamp;
            }
            let p = d.page_ptr().wrapping_add(PAGE_HEADER_SIZE + self.pos);
            let w = read_u32(p);
            let type_len = w & 0x1f;
            let len = record_length(p).unwrap_or(commit - self.pos);
            if len < EVENT_HEADER_SIZE || self.pos + len > commit {
                if self.page_moved() {
                    self.restart_at_head();
                    continue;
                }
                return None;
            }
            let word1 = read_u32(p.wrapping_add(4));
            let mut out = None;
            if type_len <= 28 {
                let (src, n) = payload_of(p, len);
                if n > self.scratch.len() {
                    self.restart_at_head();
                    continue;
                }
                for (i, b) in self.scratch[..n].iter_mut().enumerate() {
                    // SAFETY: `src..src+n` lies inside the page (below its commit); the bytes
                    // may be rewritten concurrently by an overwriting writer, so they are
                    // copied with volatile reads and validated below before use.
                    *b = unsafe { src.add(i).read_volatile() };
                }
                out = Some((self.stamp.wrapping_add((w >> 5) as u64), n));
            }
            // A writer recycling the page bumps its update counter before it empties it: an
            // iterator that entered in between holds the new counter with the old stamp and
            // old records, and would time the writer's new records from that stamp. The
            // writer stamps the page when it reserves its first record, before committing
            // it: a record read past the old ones shows the new stamp here.
            if self.page_moved() || d.time_stamp() != self.page_stamp {
                self.restart_at_head();
                continue;
            }
            self.pos += len;
            match type_len {
                0..=28 => self.stamp = self.stamp.wrapping_add((w >> 5) as u64),
                TYPE_TIME_EXTEND => {
                    self.stamp = self
                        .stamp
                        .wrapping_add(((word1 as u64) << 27) | (w >> 5) as u64)
                }
                TYPE_TIME_STAMP => {
                    self.stamp = fix_abs_ts(((word1 as u64) << 27) | (w >> 5) as u64, self.stamp)
                }
                TYPE_PADDING => self.stamp = self.stamp.wrapping_add((w >> 5) as u64),
                _ => {}
            }
            if let Some(r) = out {
                return Some(r);
            }
        }
    }

    /// The next event, oldest first.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<IterEvent<'_>> {
        let (ts, n) = self.step()?;
        let missed = core::mem::take(&mut self.missed);
        Some(IterEvent {
            ts,
            payload: &self.scratch[..n],
            missed,
        })
    }
}

impl<P: PageProvider> Drop for Iter<'_, P> {
    fn drop(&mut self) {
        self.buf.unlock_reader();
    }
}

impl<P: PageProvider> fmt::Debug for Iter<'_, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Iter")
            .field("page", &self.page)
            .field("pos", &self.pos)
            .finish_non_exhaustive()
    }
}

/// A per-CPU event source that can tell the timestamp of its next event.
pub trait PeekTs {
    /// The next event's timestamp, if there is one.
    fn peek_ts(&mut self) -> Option<u64>;
}

impl<P: PageProvider> PeekTs for Consumer<'_, P> {
    fn peek_ts(&mut self) -> Option<u64> {
        Consumer::peek_ts(self)
    }
}

impl<P: PageProvider> PeekTs for Iter<'_, P> {
    fn peek_ts(&mut self) -> Option<u64> {
        Iter::peek_ts(self)
    }
}

/// Which of `sources` (one per CPU) holds the oldest next event, and its timestamp: the merge
/// step of the `trace` / `trace_pipe` files (`__find_next_entry`; ties go to the lowest index).
pub fn merge_next<S: PeekTs>(sources: &mut [S]) -> Option<(usize, u64)> {
    let mut best: Option<(usize, u64)> = None;
    for (i, s) in sources.iter_mut().enumerate() {
        if let Some(ts) = s.peek_ts() {
            if best.is_none_or(|(_, b)| ts < b) {
                best = Some((i, ts));
            }
        }
    }
    best
}
