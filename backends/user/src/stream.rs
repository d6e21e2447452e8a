//! The compact on-disk form of a streamed recording: one `events-<tid>` file per thread, the
//! agent's slot records as the drainer ([`crate::drain`]) took them from the thread's ring,
//! delta- and varint-encoded, with the lost counts where the holes are.
//!
//! A file is a 40-byte header (`"FTRACEEV"`, version, pid, tid, 4 reserved bytes, the
//! thread's name NUL-padded to 16 bytes) followed by records. Every record starts with a tag
//! byte whose bits 0..2 say what it is:
//!
//! | tag & 3 | record | what follows |
//! |---|---|---|
//! | 0 | an event | (tag bit 2: the CPU changed: varint cpu), (tag bits 6..7 zero: varint kind word), varint of `ts - previous ts` (tag bit 5: of `previous ts - ts`), zigzag varint of `ip - previous ip`, the `arg` word as tag bits 3..4 say |
//! | 1 | events lost here | varint count (they precede the next event) |
//! | 2 | the end | varint: events lost in total (the file is complete) |
//!
//! The `arg` word is stored as a zigzag varint of `arg - ip` (tag bits 3..4 = 0: a parent ip is
//! near the function's), of `ts - arg` (1: a call time is shortly before the exit), or plain
//! (2). Which one is the encoder's guess from the kind (an exit's call time, any other kind's
//! parent ip); every form decodes to the same 32-byte slot, so the format keeps whatever the
//! agent puts in a slot. The kind word is stored without the ring's lap bit (bit 7), shifted
//! down over it, and only when tag bits 6..7 (`KindCode`) cannot say it: 1, the previous
//! event's (the function tracer's events all have one); 2 and 3, the entry or the exit that
//! follows the previous function_graph event in a call tree. A thread's times only grow (tag
//! bit 5 is there for a clock that steps back), so the time delta is a plain varint: one byte
//! up to 127 ticks, where a zigzag one would take two past 63.
//!
//! Version 2 (version 1 stored every kind word and a zigzag time delta): a byte or two fewer
//! per event, which the drainer both encodes and writes, the two costs that keep it at parity
//! with a call-dense writer.
//!
//! Invariant: decoding a file gives back, in order, exactly the events that were encoded and
//! the lost counts between them; a damaged file is an error naming the byte offset, and no
//! record makes the decoder allocate.

use std::io::{self, BufRead, Write};

use ftrace_agent::buffer::{
    KIND_GRAPH_ENT, KIND_GRAPH_RET, KIND_LAP_BIT, KIND_MASK, SlotEvent, depth,
};
use ftrace_agent::handler::SHADOW_FRAMES;

/// `"FTRACEEV"`: the first bytes of every events file.
pub const MAGIC: [u8; 8] = *b"FTRACEEV";
/// The events-file format version.
pub const VERSION: u32 = 2;
/// Bytes of the header.
pub const HEADER_SIZE: usize = 40;
/// The name prefix of an events file in a process directory (`events-<tid>[.<n>]`, named
/// after the buffer file `buf-<tid>[.<n>]` it was drained from).
pub const FILE_PREFIX: &str = "events-";

const TAG_EVENT: u8 = 0;
const TAG_LOST: u8 = 1;
const TAG_END: u8 = 2;
const TAG_CPU: u8 = 1 << 2;
const ARG_FROM_IP: u8 = 0;
const ARG_BEFORE_TS: u8 = 1;
const ARG_PLAIN: u8 = 2;
/// Tag bit 5: the time delta is `previous ts - ts`.
const TAG_TS_BACK: u8 = 1 << 5;
/// Tag bits 6..7: where the kind word comes from ([`KindCode`]).
const KIND_SHIFT: u8 = 6;

/// Where an event's kind word comes from (tag bits 6..7): stored, or the previous event's,
/// or one of the two steps of a call tree that can follow the previous function_graph event
/// ([`next_kinds`]). A thread's function_graph events follow its calls: after an entry at
/// depth d comes an entry at d + 1 or the exit at d; after an exit at d, an entry at d or an
/// exit at d - 1. So no function_graph event but the first stores its kind word (two bytes
/// past depth 0), nor any function event but the first.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum KindCode {
    /// A varint kind word follows.
    Stored = 0,
    /// The previous event's kind word.
    Same = 1,
    /// [`next_kinds`]`[0]`: an entry one level down (after an entry) or beside (after an exit).
    Enter = 2,
    /// [`next_kinds`]`[1]`: the exit of the entry before, or of the caller after an exit.
    Exit = 3,
}

/// The two kinds (depth included, lap bit clear) a function_graph event `prev` is followed by
/// when the calls nest as they should: [`KindCode::Enter`]'s and [`KindCode::Exit`]'s. After
/// an entry at depth d: an entry at d + 1, or the exit at d; after anything else (an exit at
/// d): an entry at d, or an exit at d - 1. Plain arithmetic, wrapping, no branch: the encoder
/// uses a code only when it gives the event's kind, and the decoder computes the same, so
/// every kind word round-trips whatever `prev` is (after a function event, or at the deepest
/// depth, the steps are only kinds no event will have).
#[inline(always)]
fn next_kinds(prev: u32) -> [u32; 2] {
    let d = prev >> 8;
    let after_entry = u32::from(prev & KIND_MASK == KIND_GRAPH_ENT);
    [
        KIND_GRAPH_ENT | d.wrapping_add(after_entry) << 8,
        KIND_GRAPH_RET | d.wrapping_sub(1 - after_entry) << 8,
    ]
}

/// What is wrong with a function_graph event deeper than the agent's shadow stack, if `ev`
/// is one: the agent never writes one (its shadow stack ends there), and a reader that
/// indents by depth would print megabytes a line. Every reader of a thread file (events file
/// or ring) rejects it as damage.
pub(crate) fn past_the_shadow_stack(ev: &SlotEvent) -> Option<String> {
    let depth = u64::from(depth(ev));
    (matches!(ev.kind & KIND_MASK, KIND_GRAPH_ENT | KIND_GRAPH_RET) && depth >= SHADOW_FRAMES).then(
        || {
            format!(
                "function_graph depth {depth} past the agent's shadow stack \
                 ({SHADOW_FRAMES} frames)"
            )
        },
    )
}

/// Who wrote an events file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamHeader {
    /// The process id.
    pub pid: u32,
    /// The thread id.
    pub tid: u32,
    /// The thread's name.
    pub comm: String,
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn kind_word(kind: u32) -> u64 {
    u64::from(kind & KIND_MASK) | (u64::from(kind >> 8) << 7)
}

fn kind_from_word(w: u64) -> Option<u32> {
    let hi = u32::try_from(w >> 7).ok().filter(|h| *h < 1 << 24)?;
    Some((w as u32 & KIND_MASK) | (hi << 8))
}

/// The buffered bytes at which a writer writes them through (one `write` per this much).
const FLUSH_AT: usize = 256 * 1024;
/// The longest event record: the tag, a cpu (5 bytes), a kind word (5) and three 64-bit
/// varints (10 each).
const MAX_EVENT_RECORD: usize = 1 + 5 + 5 + 3 * 10;
/// The longest lost record: the tag and a 64-bit varint.
const MAX_LOST_RECORD: usize = 1 + 10;
/// What one event may add to a batch: its lost record and its record.
const MAX_EVENT_BYTES: usize = MAX_LOST_RECORD + MAX_EVENT_RECORD;

/// Appends `v` as a varint at `p`; the bytes taken. Values below 2^21 (most deltas: those of
/// a large program's ips too) take a branch or three and one store; the rest the plain loop.
///
/// # Safety
/// `p` must be valid for writes of 10 bytes.
#[inline(always)]
unsafe fn write_varint(p: *mut u8, v: u64) -> usize {
    if v < 0x80 {
        // SAFETY: caller's contract.
        unsafe { p.write(v as u8) };
        return 1;
    }
    if v < 0x4000 {
        let w = (v as u16 & 0x7f) | 0x80 | ((v as u16 >> 7) << 8);
        // SAFETY: caller's contract (2 of the 10 bytes).
        unsafe { p.cast::<[u8; 2]>().write_unaligned(w.to_le_bytes()) };
        return 2;
    }
    if v < 0x20_0000 {
        // Three bytes: a large program's ip deltas (functions tens of KiB apart). The fourth
        // byte stored is overwritten next (or lies past the record, unused).
        let w = (v as u32 & 0x7f)
            | 0x80
            | ((v as u32 >> 7 & 0x7f) | 0x80) << 8
            | (v as u32 >> 14) << 16;
        // SAFETY: caller's contract (4 of the 10 bytes).
        unsafe { p.cast::<[u8; 4]>().write_unaligned(w.to_le_bytes()) };
        return 3;
    }
    write_varint_long(p, v)
}

/// [`write_varint`] for values of 2^14 and more.
#[inline(never)]
fn write_varint_long(p: *mut u8, mut v: u64) -> usize {
    let mut n = 0;
    while v >= 0x80 {
        // SAFETY: at most 10 bytes for a u64 (`write_varint`'s contract).
        unsafe { p.add(n).write(v as u8 | 0x80) };
        v >>= 7;
        n += 1;
    }
    // SAFETY: as above.
    unsafe { p.add(n).write(v as u8) };
    n + 1
}

/// Encodes one thread's events into an events file.
#[derive(Debug)]
pub struct StreamWriter<W: Write> {
    out: W,
    buf: Vec<u8>,
    prev: SlotEvent,
    lost: u64,
    written: u64,
}

impl<W: Write> StreamWriter<W> {
    /// Starts an events file on `out` with its header.
    pub fn new(mut out: W, header: &StreamHeader) -> io::Result<Self> {
        let mut h = [0u8; HEADER_SIZE];
        h[..8].copy_from_slice(&MAGIC);
        h[8..12].copy_from_slice(&VERSION.to_le_bytes());
        h[12..16].copy_from_slice(&header.pid.to_le_bytes());
        h[16..20].copy_from_slice(&header.tid.to_le_bytes());
        let c = header.comm.as_bytes();
        let n = c.len().min(15);
        h[24..24 + n].copy_from_slice(&c[..n]);
        out.write_all(&h)?;
        Ok(StreamWriter {
            out,
            buf: Vec::new(),
            prev: SlotEvent::default(),
            lost: 0,
            written: HEADER_SIZE as u64,
        })
    }

    /// Appends `missed` lost events (if any) then `ev`.
    #[inline]
    pub fn event(&mut self, ev: &SlotEvent, missed: u64) -> io::Result<()> {
        self.batch(1).event(ev, missed);
        self.flush_if_full()
    }

    /// A batch of at most `max` events, appended with one capacity check for all of them
    /// (the drainer's inner loop: [`Batch::event`] is a few stores per event). Call
    /// [`flush_if_full`](Self::flush_if_full) after it.
    pub fn batch(&mut self, max: usize) -> Batch<'_, W> {
        self.buf.reserve(max.saturating_mul(MAX_EVENT_BYTES));
        Batch {
            ptr: self.buf.as_mut_ptr(),
            len: self.buf.len(),
            left: max,
            prev: self.prev,
            lost: 0,
            w: self,
        }
    }

    /// Writes the buffered records through when they are `bytes` or more (a drainer that has
    /// caught up with its writer, [`crate::drain`]).
    #[inline]
    pub fn flush_if_at_least(&mut self, bytes: usize) -> io::Result<()> {
        if self.buf.len() >= bytes {
            self.flush_buf()?;
        }
        Ok(())
    }

    /// Writes the buffered records through once they reach the flush size (256 KiB).
    #[inline]
    pub fn flush_if_full(&mut self) -> io::Result<()> {
        self.flush_if_at_least(FLUSH_AT)
    }

    /// Records `n` events lost at this point of the stream (before the next event).
    pub fn lost_here(&mut self, n: u64) {
        if n > 0 {
            self.buf.push(TAG_LOST);
            put_varint(&mut self.buf, n);
            self.lost = self.lost.saturating_add(n);
        }
    }

    fn flush_buf(&mut self) -> io::Result<()> {
        self.out.write_all(&self.buf)?;
        self.written += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }

    /// Writes what is buffered through to the underlying writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.flush_buf()?;
        self.out.flush()
    }

    /// Events lost so far (the sum of the lost records).
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Bytes written so far (the header and every flushed record).
    pub fn bytes_written(&self) -> u64 {
        self.written
    }

    /// Ends the file (the end record, then a flush) and returns the writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.buf.push(TAG_END);
        put_varint(&mut self.buf, self.lost);
        self.flush()?;
        Ok(self.out)
    }
}

/// Events being appended to a [`StreamWriter`]'s buffer, whose room for all of them was
/// reserved when the batch began: each event is written with raw stores, no capacity check
/// per byte or per event. The buffer's length and the writer's state are brought up to date
/// when the batch is dropped.
#[derive(Debug)]
pub struct Batch<'a, W: Write> {
    w: &'a mut StreamWriter<W>,
    /// The buffer's start (read once: the stores below cannot then be taken to change it).
    ptr: *mut u8,
    len: usize,
    /// Events the reservation still has room for.
    left: usize,
    prev: SlotEvent,
    lost: u64,
}

impl<W: Write> Batch<'_, W> {
    /// Appends `missed` lost events (if any) then `ev`.
    ///
    /// # Panics
    /// When the batch already holds the `max` events it was made for.
    #[inline(always)]
    pub fn event(&mut self, ev: &SlotEvent, missed: u64) {
        assert!(self.left > 0, "a batch of events overran its reservation");
        self.left -= 1;
        // Copied before the byte stores below, which the compiler must otherwise assume may
        // change them (a `*mut u8` may point anywhere).
        let prev = self.prev;
        let ev = *ev;
        // SAFETY: `batch` reserved MAX_EVENT_BYTES per event for `left` more events past
        // `len`: a lost record and an event record fit in it.
        unsafe {
            let mut p = self.ptr.add(self.len);
            if missed > 0 {
                p.write(TAG_LOST);
                p = p.add(1 + write_varint(p.add(1), missed));
                self.lost = self.lost.saturating_add(missed);
            }
            let arg_mode = if ev.kind & KIND_MASK == KIND_GRAPH_RET && ev.arg <= ev.ts {
                ARG_BEFORE_TS
            } else {
                ARG_FROM_IP
            };
            let cpu_changed = ev.cpu != prev.cpu;
            let kind = ev.kind & !KIND_LAP_BIT;
            let prev_kind = prev.kind & !KIND_LAP_BIT;
            // The function tracer's events all take the first branch. A function_graph
            // thread's entries and exits follow its call tree, which a branch predictor cannot:
            // which step it is comes without a branch (at most one of the two holds). The
            // first event's predecessor is the default event, kind 0: no event's kind, and the
            // decoder starts from the same.
            let code = if kind == prev_kind {
                KindCode::Same as u8
            } else {
                let [enter, exit] = next_kinds(prev_kind);
                (u8::from(kind == enter) * KindCode::Enter as u8)
                    | (u8::from(kind == exit) * KindCode::Exit as u8)
            };
            let dt = ev.ts.wrapping_sub(prev.ts);
            let back = (dt as i64) < 0;
            let tag = TAG_EVENT
                | if cpu_changed { TAG_CPU } else { 0 }
                | arg_mode << 3
                | code << KIND_SHIFT
                | if back { TAG_TS_BACK } else { 0 };
            p.write(tag);
            p = p.add(1);
            if cpu_changed {
                p = p.add(write_varint(p, u64::from(ev.cpu)));
            }
            if code == KindCode::Stored as u8 {
                p = p.add(write_varint(p, kind_word(kind)));
            }
            p = p.add(write_varint(p, if back { dt.wrapping_neg() } else { dt }));
            p = p.add(write_varint(p, zigzag(ev.ip.wrapping_sub(prev.ip) as i64)));
            let arg = match arg_mode {
                ARG_BEFORE_TS => ev.ts - ev.arg,
                _ => zigzag(ev.arg.wrapping_sub(ev.ip) as i64),
            };
            p = p.add(write_varint(p, arg));
            self.len = p.offset_from(self.ptr) as usize;
        }
        self.prev = ev;
    }
}

impl<W: Write> Drop for Batch<'_, W> {
    fn drop(&mut self) {
        debug_assert!(self.len <= self.w.buf.capacity());
        // SAFETY: every byte up to `len` was written by `event`, within the reservation.
        unsafe { self.w.buf.set_len(self.len) };
        self.w.prev = self.prev;
        self.w.lost = self.w.lost.saturating_add(self.lost);
    }
}

/// A damaged events file: where, and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamError {
    /// Byte offset in the file.
    pub offset: u64,
    /// What is wrong there.
    pub message: String,
}

impl std::fmt::Display for StreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "offset {} ({:#x}): {}",
            self.offset, self.offset, self.message
        )
    }
}

impl std::error::Error for StreamError {}

/// What [`StreamReader::next_record`] returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record {
    /// An event, and the events lost just before it.
    Event(SlotEvent, u64),
    /// The file ended; events lost after the last event, and whether the end record was
    /// there (a file without one was cut short: the tool was killed while recording).
    End {
        /// Events lost after the last event.
        trailing_lost: u64,
        /// The end record was present.
        complete: bool,
    },
}

/// Decodes an events file record by record, reading through a buffer (memory does not grow
/// with the file).
#[derive(Debug)]
pub struct StreamReader<R: BufRead> {
    input: R,
    offset: u64,
    prev: SlotEvent,
    header: StreamHeader,
    lost: u64,
    done: bool,
}

impl<R: BufRead> StreamReader<R> {
    /// Reads and checks the header.
    pub fn new(mut input: R) -> Result<Self, StreamError> {
        let mut h = [0u8; HEADER_SIZE];
        input.read_exact(&mut h).map_err(|e| StreamError {
            offset: 0,
            message: format!("no header: {e}"),
        })?;
        let bad = |offset: u64, m: &str| StreamError {
            offset,
            message: m.into(),
        };
        if h[..8] != MAGIC {
            return Err(bad(0, "not an events file (magic)"));
        }
        let word = |at: usize| u32::from_le_bytes(h[at..at + 4].try_into().expect("4 bytes"));
        if word(8) != VERSION {
            return Err(bad(
                8,
                &format!("version {} (this tool reads {VERSION})", word(8)),
            ));
        }
        let comm = &h[24..40];
        let n = comm.iter().position(|&b| b == 0).unwrap_or(16);
        let header = StreamHeader {
            pid: word(12),
            tid: word(16),
            comm: String::from_utf8_lossy(&comm[..n]).into_owned(),
        };
        Ok(StreamReader {
            input,
            offset: HEADER_SIZE as u64,
            prev: SlotEvent::default(),
            header,
            lost: 0,
            done: false,
        })
    }

    /// The header.
    pub fn header(&self) -> &StreamHeader {
        &self.header
    }

    /// The byte offset of the next record.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    fn err(&self, at: u64, message: impl Into<String>) -> StreamError {
        StreamError {
            offset: at,
            message: message.into(),
        }
    }

    /// One byte, or `None` at the end of the file.
    fn byte(&mut self) -> Result<Option<u8>, StreamError> {
        let (b, n) = match self.input.fill_buf() {
            Ok([]) => return Ok(None),
            Ok(buf) => (buf[0], 1),
            Err(e) => return Err(self.err(self.offset, e.to_string())),
        };
        self.input.consume(n);
        self.offset += 1;
        Ok(Some(b))
    }

    fn varint(&mut self, start: u64) -> Result<u64, StreamError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let Some(b) = self.byte()? else {
                return Err(self.err(start, "record cut short"));
            };
            if shift == 63 && b > 1 {
                return Err(self.err(self.offset - 1, "varint overflows 64 bits"));
            }
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(self.err(self.offset - 1, "varint longer than 10 bytes"))
    }

    /// The next event (with the events lost just before it), or the end.
    pub fn next_record(&mut self) -> Result<Record, StreamError> {
        let mut missed = 0u64;
        loop {
            if self.done {
                return Ok(Record::End {
                    trailing_lost: missed,
                    complete: true,
                });
            }
            let at = self.offset;
            let Some(tag) = self.byte()? else {
                return Ok(Record::End {
                    trailing_lost: missed,
                    complete: false,
                });
            };
            match tag & 3 {
                TAG_LOST => {
                    let n = self.varint(at)?;
                    missed = missed.saturating_add(n);
                    self.lost = self.lost.saturating_add(n);
                }
                TAG_END => {
                    let total = self.varint(at)?;
                    if total != self.lost {
                        return Err(self.err(
                            at,
                            format!("end record counts {total} lost, the file {}", self.lost),
                        ));
                    }
                    self.done = true;
                }
                TAG_EVENT => {
                    let mut ev = self.prev;
                    if tag & TAG_CPU != 0 {
                        ev.cpu = u32::try_from(self.varint(at)?)
                            .map_err(|_| self.err(at, "cpu out of range"))?;
                    }
                    let code = tag >> KIND_SHIFT;
                    if code == KindCode::Stored as u8 {
                        ev.kind = kind_from_word(self.varint(at)?)
                            .ok_or_else(|| self.err(at, "kind word out of range"))?;
                    } else if code != KindCode::Same as u8 {
                        ev.kind = next_kinds(self.prev.kind)[usize::from(code) - 2];
                    } else if ev.kind & KIND_MASK == 0 {
                        // The encoder's first predecessor is the default event, kind 0.
                        return Err(self.err(at, "the previous event's kind, before any event"));
                    }
                    if let Some(what) = past_the_shadow_stack(&ev) {
                        return Err(self.err(at, what));
                    }
                    let dt = self.varint(at)?;
                    ev.ts = if tag & TAG_TS_BACK == 0 {
                        self.prev.ts.wrapping_add(dt)
                    } else {
                        self.prev.ts.wrapping_sub(dt)
                    };
                    ev.ip = self.prev.ip.wrapping_add(unzigzag(self.varint(at)?) as u64);
                    let a = self.varint(at)?;
                    ev.arg = match (tag >> 3) & 3 {
                        ARG_FROM_IP => ev.ip.wrapping_add(unzigzag(a) as u64),
                        ARG_BEFORE_TS => ev.ts.wrapping_sub(a),
                        ARG_PLAIN => a,
                        m => return Err(self.err(at, format!("unknown arg form {m}"))),
                    };
                    self.prev = ev;
                    return Ok(Record::Event(ev, missed));
                }
                _ => return Err(self.err(at, format!("unknown record tag {tag:#04x}"))),
            }
        }
    }
}

/// Opens an events file for reading through a buffer of `cap` bytes.
pub fn open(
    path: &std::path::Path,
    cap: usize,
) -> Result<StreamReader<io::BufReader<std::fs::File>>, String> {
    let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    StreamReader::new(io::BufReader::with_capacity(cap, f))
        .map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ftrace_agent::buffer::{KIND_FUNC, KIND_GRAPH_ENT};

    fn ev(ts: u64, ip: u64, arg: u64, kind: u32, cpu: u32) -> SlotEvent {
        SlotEvent {
            ts,
            ip,
            arg,
            kind,
            cpu,
        }
    }

    fn sample() -> Vec<(SlotEvent, u64)> {
        let mut v = Vec::new();
        let mut ts = 1_000_000u64;
        for i in 0..500u64 {
            ts += 17 + i % 13;
            let ip = 0x40_1000 + (i % 7) * 0x40;
            v.push((
                ev(ts, ip, 0x40_2000, KIND_GRAPH_ENT | (i as u32 % 9) << 8, 1),
                0,
            ));
            ts += 40;
            v.push((
                ev(ts, ip, ts - 40, KIND_GRAPH_RET | (i as u32 % 9) << 8, 1),
                0,
            ));
        }
        v[300].1 = 12;
        v[301].0.cpu = 3;
        // Odd payloads round-trip too: a call time after the exit, huge words, a new kind.
        v.push((ev(5, u64::MAX, 9, KIND_GRAPH_RET, u32::MAX), 1));
        v.push((ev(u64::MAX, 0, u64::MAX, KIND_FUNC | 0xff_ffff << 8, 0), 0));
        v.push((ev(0, 1, 2, 0x7e, 0), u64::MAX / 2));
        // The function tracer's events: one kind word for all.
        for i in 0..4 {
            v.push((
                ev(100 + i, 0x40_1000 + i * 0x40, 0x40_2000, KIND_FUNC, 0),
                0,
            ));
        }
        v
    }

    fn encode(evs: &[(SlotEvent, u64)], trailing: u64) -> Vec<u8> {
        let h = StreamHeader {
            pid: 7,
            tid: 8,
            comm: "worker".into(),
        };
        let mut w = StreamWriter::new(Vec::new(), &h).unwrap();
        for (e, m) in evs {
            w.event(e, *m).unwrap();
        }
        w.lost_here(trailing);
        w.finish().unwrap()
    }

    fn decode(bytes: &[u8]) -> Result<(Vec<(SlotEvent, u64)>, Record), StreamError> {
        let mut r = StreamReader::new(bytes)?;
        let mut out = Vec::new();
        loop {
            match r.next_record()? {
                Record::Event(e, m) => out.push((e, m)),
                end => return Ok((out, end)),
            }
        }
    }

    #[test]
    fn the_encoders_varint_is_the_plain_one() {
        let mut values = vec![
            0,
            1,
            0x7f,
            0x80,
            0x3fff,
            0x4000,
            u64::MAX,
            (1 << 56) - 1,
            1 << 56,
        ];
        values.extend((0..64).map(|b| 1u64 << b));
        values.extend((1..64).map(|b| (1u64 << b) - 1));
        for v in values {
            let mut plain = Vec::new();
            put_varint(&mut plain, v);
            let mut fast = [0xaau8; 11];
            // SAFETY: 10 bytes from index 1 are writable.
            let n = unsafe { write_varint(fast.as_mut_ptr().add(1), v) };
            assert_eq!(fast[1..1 + n], plain[..], "{v:#x}");
            assert_eq!(fast[0], 0xaa);
        }
    }

    /// Events appended in batches of any size make the same bytes as one at a time.
    #[test]
    fn batches_encode_as_single_events_do() {
        let evs = sample();
        let one = encode(&evs, 2);
        for size in [1, 2, 3, 7, 100, 5000] {
            let h = StreamHeader {
                pid: 7,
                tid: 8,
                comm: "worker".into(),
            };
            let mut w = StreamWriter::new(Vec::new(), &h).unwrap();
            for chunk in evs.chunks(size) {
                let mut b = w.batch(size);
                for (e, m) in chunk {
                    b.event(e, *m);
                }
                drop(b);
                w.flush_if_full().unwrap();
            }
            w.lost_here(2);
            assert_eq!(w.finish().unwrap(), one, "batches of {size}");
        }
    }

    #[test]
    #[should_panic(expected = "overran its reservation")]
    fn a_batch_refuses_more_events_than_it_was_made_for() {
        let mut w = StreamWriter::new(Vec::new(), &StreamHeader::default()).unwrap();
        let mut b = w.batch(1);
        b.event(&SlotEvent::default(), 0);
        b.event(&SlotEvent::default(), 0);
    }

    #[test]
    fn events_round_trip_compactly() {
        let evs = sample();
        let bytes = encode(&evs, 5);
        let (got, end) = decode(&bytes).unwrap();
        assert_eq!(got, evs);
        assert_eq!(
            end,
            Record::End {
                trailing_lost: 5,
                complete: true
            }
        );
        let r = StreamReader::new(&bytes[..]).unwrap();
        assert_eq!(r.header().comm, "worker");
        assert_eq!((r.header().pid, r.header().tid), (7, 8));
        // The 1000 ordinary events take far less than their 32-byte slots.
        let ordinary = encode(&evs[..1000], 0);
        assert!(ordinary.len() < 1000 * 10, "{} bytes", ordinary.len());
    }

    /// An event repeats its predecessor's kind word, or takes the next step of a call tree,
    /// with tag bits 6..7 (no kind word stored), and stores a time that went back with tag bit
    /// 5; a first event that claims a predecessor's kind is an error at its offset.
    #[test]
    fn kinds_that_follow_and_times_that_go_back_take_tag_bits() {
        // ip and arg 0: every varint but a stored kind word is one byte.
        let f = |ts, kind| (ev(ts, 0, 0, kind, 0), 0);
        let (ent, ret) = (
            |d: u32| KIND_GRAPH_ENT | d << 8,
            |d: u32| KIND_GRAPH_RET | d << 8,
        );
        let evs = [
            f(1, KIND_FUNC),
            f(11, KIND_FUNC),
            f(6, KIND_FUNC),
            f(20, ent(0)),
            f(21, ent(1)),
            f(22, ret(1)),
            f(23, ent(1)),
            f(24, ret(1)),
            f(25, ret(0)),
            f(26, ret(0) | 9 << 8),
        ];
        let bytes = encode(&evs, 0);
        // (kind code, time back) of each event after the first, whose records are 5 bytes
        // (tag, kind, ts, ip, arg) when the kind is stored (one byte here but the last's), 4
        // when it is not.
        let mut at = HEADER_SIZE + 5;
        let mut got = Vec::new();
        for _ in 1..evs.len() {
            let tag = bytes[at];
            got.push((tag >> KIND_SHIFT, tag & TAG_TS_BACK != 0));
            at += if tag >> KIND_SHIFT == 0 { 5 } else { 4 };
        }
        // (An entry at depth 0 after a function event is the step "an entry beside".)
        let want = [
            (1, false),
            (1, true),
            (2, false),
            (2, false),
            (3, false),
            (2, false),
        ];
        assert_eq!(got[..6], want);
        assert_eq!(got[6..8], [(3, false), (3, false)]);
        assert_eq!(got[8].0, 0, "an exit below depth 0 is stored");
        assert_eq!(decode(&bytes).unwrap().0, evs);
        let mut bad = bytes.clone();
        bad[HEADER_SIZE] |= 1 << KIND_SHIFT;
        let e = decode(&bad).unwrap_err();
        assert_eq!(e.offset, HEADER_SIZE as u64);
        assert!(e.message.contains("before any event"), "{e}");
    }

    /// A function_graph event deeper than the agent's shadow stack is damage, stored or
    /// reached by a step (an exit after an exit at depth 0 wraps to depth 2^24 - 1): an error
    /// at its record, never a depth a report would indent by.
    #[test]
    fn a_function_graph_depth_past_the_shadow_stack_is_damage() {
        let f = |kind| (ev(1, 0, 0, kind, 0), 0);
        let deep = KIND_GRAPH_RET | (SHADOW_FRAMES as u32) << 8;
        let wrapped = KIND_GRAPH_RET | 0xff_ffff << 8;
        for evs in [
            [f(KIND_GRAPH_RET), f(deep)],
            [f(KIND_GRAPH_RET), f(wrapped)],
        ] {
            let bytes = encode(&evs, 0);
            let e = decode(&bytes).unwrap_err();
            // The first record: tag, kind, ts, ip, arg (one byte each).
            assert_eq!(e.offset, HEADER_SIZE as u64 + 5, "{e}");
            assert!(e.message.contains("shadow stack"), "{e}");
        }
        let ok = [f(KIND_GRAPH_RET | (SHADOW_FRAMES as u32 - 1) << 8)];
        assert_eq!(decode(&encode(&ok, 0)).unwrap().0, ok);
    }

    #[test]
    fn a_file_cut_short_is_incomplete_or_an_error() {
        let bytes = encode(&sample(), 0);
        for cut in HEADER_SIZE..bytes.len() {
            match decode(&bytes[..cut]) {
                Ok((got, end)) => {
                    assert!(matches!(
                        end,
                        Record::End {
                            complete: false,
                            ..
                        }
                    ));
                    assert_eq!(got[..], sample()[..got.len()]);
                }
                Err(e) => assert!(e.offset <= cut as u64 && e.message.contains("cut short")),
            }
        }
        assert!(
            decode(&bytes[..10])
                .unwrap_err()
                .message
                .contains("no header")
        );
    }

    /// Flipped bytes never panic or loop: an error naming an offset inside the file, or a
    /// decode with no more events than the file has bytes.
    #[test]
    fn mutated_files_never_panic() {
        let good = encode(&sample(), 3);
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..3000 {
            let mut b = good.clone();
            for _ in 0..1 + rnd() % 6 {
                let at = rnd() as usize % b.len();
                b[at] ^= 1 << (rnd() % 8);
            }
            match decode(&b) {
                Ok((got, _)) => assert!(got.len() <= b.len() / 5),
                Err(e) => assert!(e.offset <= b.len() as u64, "{e}"),
            }
        }
    }
}
