//! The kernel's sub-buffer page format (`struct buffer_data_page`) and its event records:
//! constants, length rules, header encoding, and a decoder for raw pages.
//!
//! A page is `u64 time_stamp` (absolute time of its first event), a `local_t commit` word (the
//! number of committed data bytes in its low bits, the missed-events flags in bits 31 and 30),
//! then the data: a sequence of records, each led by a 4-byte header word
//! `(time_delta << 5) | type_len`. The invariant every reader relies on: walking records from
//! offset 16 up to `16 + commit`, adding each delta to a running stamp that starts at the page
//! time stamp, yields each data event's absolute time. Nothing here allocates; the decoder
//! validates every length against the page and reports the offset of the first bad byte.
//!
//! This is the format of `per_cpu/cpuN/trace_pipe_raw`, of trace-cmd's `trace.dat` pages, and
//! of the pages this crate's writer fills.

use core::fmt;

/// Size of the page header (`time_stamp` + `commit`): `BUF_PAGE_HDR_SIZE`.
pub const PAGE_HEADER_SIZE: usize = ftrace_core::format::BUF_PAGE_HDR_SIZE;

/// Size of an event header word (`RB_EVNT_HDR_SIZE`).
pub const EVENT_HEADER_SIZE: usize = 4;

/// Event alignment on x86_64 and arm64 (`RB_ARCH_ALIGNMENT`).
pub const EVENT_ALIGNMENT: usize = 4;

/// The largest payload encoded with `type_len` (`RB_MAX_SMALL_DATA`); larger ones use
/// `type_len == 0` and a length word.
pub const MAX_SMALL_DATA: usize = 4 * TYPE_DATA_MAX as usize;

/// Length of a time-extend or absolute time-stamp record (`RB_LEN_TIME_EXTEND`).
pub const TIME_EXTEND_LEN: usize = 8;

/// `type_len` of a padding record (`RINGBUF_TYPE_PADDING`).
pub const TYPE_PADDING: u32 = 29;
/// `type_len` of a time-extend record (`RINGBUF_TYPE_TIME_EXTEND`).
pub const TYPE_TIME_EXTEND: u32 = 30;
/// `type_len` of an absolute time-stamp record (`RINGBUF_TYPE_TIME_STAMP`).
pub const TYPE_TIME_STAMP: u32 = 31;
/// The largest `type_len` that encodes a data length (`RINGBUF_TYPE_DATA_TYPE_LEN_MAX`).
pub const TYPE_DATA_MAX: u32 = 28;

/// Bits of the `time_delta` field (`TS_SHIFT`).
pub const TS_SHIFT: u32 = 27;
/// Mask of a delta that fits the header (`TS_MASK`).
pub const TS_MASK: u64 = (1 << TS_SHIFT) - 1;
/// The top 5 bits of a timestamp an absolute record cannot hold (`TS_MSB`).
pub const TS_MSB: u64 = 0xf8 << 56;
/// The 59 bits an absolute time-stamp record keeps (`ABS_TS_MASK`).
pub const ABS_TS_MASK: u64 = !TS_MSB;

/// `commit` flag: events were lost before this page (`RB_MISSED_EVENTS`).
pub const MISSED_EVENTS: u64 = 1 << 31;
/// `commit` flag: the lost-event count is stored after the data (`RB_MISSED_STORED`).
pub const MISSED_STORED: u64 = 1 << 30;
/// Both missed-events flags (`RB_MISSED_MASK`).
pub const MISSED_MASK: u64 = MISSED_EVENTS | MISSED_STORED;

/// The default sub-buffer size: one 4 KiB page.
pub const DEFAULT_PAGE_SIZE: usize = 4096;

/// Total record length (header included) of an event with `payload` bytes of data
/// (`rb_calculate_event_length`, 4-byte alignment): zero becomes one, payloads above
/// [`MAX_SMALL_DATA`] get a length word, the result is 4-aligned, and 12 becomes 16 (so a
/// discarded event can always become a time extend or a padding record).
#[inline]
pub const fn event_length(payload: usize) -> usize {
    let mut len = if payload == 0 { 1 } else { payload };
    if len > MAX_SMALL_DATA {
        len += 4;
    }
    len += EVENT_HEADER_SIZE;
    len = (len + EVENT_ALIGNMENT - 1) & !(EVENT_ALIGNMENT - 1);
    if len == TIME_EXTEND_LEN + EVENT_ALIGNMENT {
        len += EVENT_ALIGNMENT;
    }
    len
}

/// The header word of a record: `(time_delta << 5) | type_len`.
#[inline]
pub const fn header_word(type_len: u32, time_delta: u32) -> u32 {
    (time_delta << 5) | (type_len & 0x1f)
}

/// The largest timestamp change a header's `time_delta` holds without a time extend.
pub const MAX_DELTA: u64 = TS_MASK;

/// Restores the 5 top bits an absolute record dropped, from a previously known full stamp
/// (`rb_fix_abs_ts`).
#[inline]
pub const fn fix_abs_ts(abs: u64, save_ts: u64) -> u64 {
    if save_ts & TS_MSB != 0 {
        let fixed = abs | (save_ts & TS_MSB);
        if fixed < save_ts {
            return fixed.wrapping_add(1 << 59);
        }
        return fixed;
    }
    abs
}

/// Why a page could not be decoded. Every variant names the byte offset (from the start of the
/// page, header included) where decoding stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageError {
    /// The byte slice is shorter than the page header.
    TooShort {
        /// The slice length.
        len: usize,
    },
    /// The commit size exceeds the page's data area.
    CommitTooLarge {
        /// The commit size (flags masked).
        commit: usize,
        /// The data area's size (slice length minus the header).
        capacity: usize,
    },
    /// A record runs past the committed data.
    Truncated {
        /// Offset of the record's header word.
        offset: usize,
        /// Bytes the record needs.
        needed: usize,
        /// Bytes left before the commit end.
        available: usize,
    },
    /// A record's header or length word is impossible.
    Corrupt {
        /// Offset of the record's header word.
        offset: usize,
        /// What is wrong.
        reason: &'static str,
    },
}

impl fmt::Display for PageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            PageError::TooShort { len } => write!(
                f,
                "page of {len} bytes is shorter than its {PAGE_HEADER_SIZE}-byte header"
            ),
            PageError::CommitTooLarge { commit, capacity } => write!(
                f,
                "commit size {commit} at offset 8 exceeds the {capacity}-byte data area"
            ),
            PageError::Truncated {
                offset,
                needed,
                available,
            } => write!(
                f,
                "record at offset {offset} needs {needed} bytes, only {available} committed"
            ),
            PageError::Corrupt { offset, reason } => {
                write!(f, "corrupt record at offset {offset}: {reason}")
            }
        }
    }
}

impl core::error::Error for PageError {}

/// A read-only view of one raw sub-buffer page (`buffer_data_page`), e.g. one
/// `trace_pipe_raw` read.
#[derive(Clone, Copy, Debug)]
pub struct Page<'a> {
    bytes: &'a [u8],
    commit: usize,
    flags: u64,
}

#[inline]
fn read_u32(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(w)
}

#[inline]
fn read_u64(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

impl<'a> Page<'a> {
    /// Views `bytes` (a whole sub-buffer, header included) as a page. Checks the header and that
    /// the commit size fits; records are checked as they are iterated.
    pub fn new(bytes: &'a [u8]) -> Result<Self, PageError> {
        if bytes.len() < PAGE_HEADER_SIZE {
            return Err(PageError::TooShort { len: bytes.len() });
        }
        let word = read_u64(bytes, 8);
        // The kernel adds the flags to a `long` as (sign-extended) ints, so only the low 32
        // bits are meaningful: size below bit 30, flags in bits 31 and 30.
        let low = word & 0xffff_ffff;
        let commit = (low & !MISSED_MASK) as usize;
        let capacity = bytes.len() - PAGE_HEADER_SIZE;
        if commit > capacity {
            return Err(PageError::CommitTooLarge { commit, capacity });
        }
        Ok(Page {
            bytes,
            commit,
            flags: low & MISSED_MASK,
        })
    }

    /// The page's time stamp: the absolute time of its first event.
    #[inline]
    pub fn time_stamp(&self) -> u64 {
        read_u64(self.bytes, 0)
    }

    /// Committed data bytes (flags masked off).
    #[inline]
    pub fn commit(&self) -> usize {
        self.commit
    }

    /// The size of the data area (the sub-buffer size minus the header).
    #[inline]
    pub fn capacity(&self) -> usize {
        self.bytes.len() - PAGE_HEADER_SIZE
    }

    /// Whether events were lost before this page (`RB_MISSED_EVENTS`).
    #[inline]
    pub fn missed_events(&self) -> bool {
        self.flags & MISSED_EVENTS != 0
    }

    /// Whether the number of lost events is stored after the data (`RB_MISSED_STORED`).
    #[inline]
    pub fn missed_stored(&self) -> bool {
        self.flags & MISSED_STORED != 0
    }

    /// The number of events lost before this page, if the page stores it (an `unsigned long`
    /// right after the committed data).
    pub fn missed_count(&self) -> Option<u64> {
        if !self.missed_stored() {
            return None;
        }
        let at = PAGE_HEADER_SIZE + self.commit;
        if at + 8 > self.bytes.len() {
            return None;
        }
        Some(read_u64(self.bytes, at))
    }

    /// The committed data bytes.
    #[inline]
    pub fn data(&self) -> &'a [u8] {
        &self.bytes[PAGE_HEADER_SIZE..PAGE_HEADER_SIZE + self.commit]
    }

    /// The whole page, as given.
    #[inline]
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Every record of the committed data, in order (data, padding, time extends, stamps).
    pub fn records(&self) -> Records<'a> {
        Records {
            bytes: self.bytes,
            pos: PAGE_HEADER_SIZE,
            end: PAGE_HEADER_SIZE + self.commit,
            done: false,
        }
    }

    /// The data events of the page with their absolute timestamps, in order. Padding, time
    /// extends and time stamps are applied and skipped. Stops after the first error.
    pub fn events(&self) -> Events<'a> {
        Events {
            records: self.records(),
            stamp: self.time_stamp(),
        }
    }
}

/// What a record is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordKind<'a> {
    /// A data event; `payload` is its padded data (what `ring_buffer_event_data` points at, of
    /// `ring_buffer_event_length` bytes).
    Data {
        /// The event's data.
        payload: &'a [u8],
    },
    /// A discarded event or an end-of-page fill (`type_len` 29 with a non-zero delta and a
    /// length word).
    Padding,
    /// Null padding (`type_len` 29, delta 0): the rest of the page is unused.
    NullPadding,
    /// A time extend: add `delta` to the running stamp.
    TimeExtend {
        /// The full delta (`array[0] << 27 | time_delta`).
        delta: u64,
    },
    /// An absolute time stamp (59 bits; fix the top bits with [`fix_abs_ts`]).
    TimeStamp {
        /// The stored 59-bit stamp.
        stamp: u64,
    },
}

/// One record of a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// Offset of the header word from the start of the page.
    pub offset: usize,
    /// The `type_len` field.
    pub type_len: u32,
    /// The `time_delta` field.
    pub time_delta: u32,
    /// The record's total length in bytes, header included (for null padding: the rest of the
    /// committed data).
    pub len: usize,
    /// What the record is.
    pub kind: RecordKind<'a>,
}

/// Iterator over the records of a page; see [`Page::records`].
#[derive(Clone, Debug)]
pub struct Records<'a> {
    bytes: &'a [u8],
    pos: usize,
    end: usize,
    done: bool,
}

impl<'a> Records<'a> {
    fn decode(&mut self) -> Result<Option<Record<'a>>, PageError> {
        let offset = self.pos;
        let available = self.end - offset;
        if available == 0 {
            return Ok(None);
        }
        if available < EVENT_HEADER_SIZE {
            return Err(PageError::Truncated {
                offset,
                needed: EVENT_HEADER_SIZE,
                available,
            });
        }
        let word = read_u32(self.bytes, offset);
        let type_len = word & 0x1f;
        let time_delta = word >> 5;
        let truncated = |needed| PageError::Truncated {
            offset,
            needed,
            available,
        };
        let (len, kind) = match type_len {
            0 => {
                if available < 8 {
                    return Err(truncated(8));
                }
                let array0 = read_u32(self.bytes, offset + 4) as usize;
                // `array[0]` counts itself and the data: at least the length word plus one
                // word of data beyond the small-event limit, and 4-aligned.
                if array0 < 8 || array0 % EVENT_ALIGNMENT != 0 {
                    return Err(PageError::Corrupt {
                        offset,
                        reason: "bad length word of a type_len 0 event",
                    });
                }
                let len = array0 + EVENT_HEADER_SIZE;
                if len > available {
                    return Err(truncated(len));
                }
                let payload = &self.bytes[offset + 8..offset + len];
                (len, RecordKind::Data { payload })
            }
            1..=TYPE_DATA_MAX => {
                let len = EVENT_HEADER_SIZE + 4 * type_len as usize;
                if len > available {
                    return Err(truncated(len));
                }
                let payload = &self.bytes[offset + 4..offset + len];
                (len, RecordKind::Data { payload })
            }
            TYPE_PADDING if time_delta == 0 => (available, RecordKind::NullPadding),
            TYPE_PADDING => {
                if available < 8 {
                    return Err(truncated(8));
                }
                let array0 = read_u32(self.bytes, offset + 4) as usize;
                if array0 < 4 || array0 % EVENT_ALIGNMENT != 0 {
                    return Err(PageError::Corrupt {
                        offset,
                        reason: "bad length word of a padding record",
                    });
                }
                let len = array0 + EVENT_HEADER_SIZE;
                if len > available {
                    return Err(truncated(len));
                }
                (len, RecordKind::Padding)
            }
            _ => {
                if available < TIME_EXTEND_LEN {
                    return Err(truncated(TIME_EXTEND_LEN));
                }
                let array0 = read_u32(self.bytes, offset + 4) as u64;
                let value = (array0 << TS_SHIFT) | time_delta as u64;
                let kind = if type_len == TYPE_TIME_EXTEND {
                    RecordKind::TimeExtend { delta: value }
                } else {
                    RecordKind::TimeStamp { stamp: value }
                };
                (TIME_EXTEND_LEN, kind)
            }
        };
        self.pos += len;
        Ok(Some(Record {
            offset,
            type_len,
            time_delta,
            len,
            kind,
        }))
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<Record<'a>, PageError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.decode() {
            Ok(Some(r)) => Some(Ok(r)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// One data event of a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event<'a> {
    /// Absolute timestamp (ns for ns clocks).
    pub ts: u64,
    /// Offset of the event's header word from the start of the page.
    pub offset: usize,
    /// The event's data (padded to 4 bytes, as the kernel reports it).
    pub payload: &'a [u8],
}

/// Iterator over the data events of a page; see [`Page::events`].
#[derive(Clone, Debug)]
pub struct Events<'a> {
    records: Records<'a>,
    stamp: u64,
}

impl<'a> Events<'a> {
    /// The running timestamp: that of the last event returned (or the page's time stamp).
    pub fn stamp(&self) -> u64 {
        self.stamp
    }
}

impl<'a> Iterator for Events<'a> {
    type Item = Result<Event<'a>, PageError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let rec = match self.records.next()? {
                Ok(r) => r,
                Err(e) => return Some(Err(e)),
            };
            match rec.kind {
                RecordKind::Data { payload } => {
                    self.stamp = self.stamp.wrapping_add(rec.time_delta as u64);
                    return Some(Ok(Event {
                        ts: self.stamp,
                        offset: rec.offset,
                        payload,
                    }));
                }
                // A discarded event keeps its delta, which later events build on (the
                // kernel's own reader ignores it; trace-cmd adds it, which is what keeps the
                // following timestamps right).
                RecordKind::Padding => self.stamp = self.stamp.wrapping_add(rec.time_delta as u64),
                RecordKind::NullPadding => {}
                RecordKind::TimeExtend { delta } => self.stamp = self.stamp.wrapping_add(delta),
                RecordKind::TimeStamp { stamp } => self.stamp = fix_abs_ts(stamp, self.stamp),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::format;
    use std::vec::Vec;

    #[test]
    fn event_lengths_follow_the_kernel_table() {
        let table = [
            (0, 8),
            (1, 8),
            (4, 8),
            (5, 16),
            (8, 16),
            (10, 16),
            (20, 24),
            (24, 28),
            (40, 44),
            (48, 52),
            (112, 116),
            (113, 124),
        ];
        for (payload, len) in table {
            assert_eq!(event_length(payload), len, "payload {payload}");
        }
    }

    fn page_with(data: &[u8], ts: u64, commit_word: u64) -> [u8; 256] {
        let mut p = [0u8; 256];
        p[..8].copy_from_slice(&ts.to_le_bytes());
        p[8..16].copy_from_slice(&commit_word.to_le_bytes());
        p[16..16 + data.len()].copy_from_slice(data);
        p
    }

    fn push(v: &mut [u8], at: &mut usize, w: u32) {
        v[*at..*at + 4].copy_from_slice(&w.to_le_bytes());
        *at += 4;
    }

    #[test]
    fn decodes_every_record_kind() {
        let mut d = [0u8; 200];
        let mut n = 0;
        // small event, delta 0, 8 bytes of data
        push(&mut d, &mut n, header_word(2, 0));
        push(&mut d, &mut n, 0x1111_1111);
        push(&mut d, &mut n, 0x2222_2222);
        // time extend of (3 << 27) + 5, then an event with delta 0
        push(&mut d, &mut n, header_word(TYPE_TIME_EXTEND, 5));
        push(&mut d, &mut n, 3);
        push(&mut d, &mut n, header_word(1, 0));
        push(&mut d, &mut n, 0x3333_3333);
        // discarded event (padding, 8 bytes) whose delta counts
        push(&mut d, &mut n, header_word(TYPE_PADDING, 7));
        push(&mut d, &mut n, 4);
        // large event: 116 bytes of data
        push(&mut d, &mut n, header_word(0, 9));
        push(&mut d, &mut n, 120);
        for i in 0..29 {
            push(&mut d, &mut n, i);
        }
        // absolute stamp 1000, then an event
        push(&mut d, &mut n, header_word(TYPE_TIME_STAMP, 1000));
        push(&mut d, &mut n, 0);
        push(&mut d, &mut n, header_word(1, 2));
        push(&mut d, &mut n, 0x4444_4444);
        let page = page_with(&d[..n], 100, n as u64);
        let page = Page::new(&page).unwrap();
        assert_eq!(page.commit(), n);
        assert!(!page.missed_events());
        let evs: Vec<_> = page.events().map(Result::unwrap).collect();
        let ts: Vec<u64> = evs.iter().map(|e| e.ts).collect();
        let ext = 100 + (3 << 27) + 5;
        assert_eq!(ts, [100, ext, ext + 7 + 9, 1002]);
        assert_eq!(evs[0].payload.len(), 8);
        assert_eq!(evs[1].payload, 0x3333_3333u32.to_le_bytes());
        assert_eq!(evs[2].payload.len(), 116);
        assert_eq!(evs[2].offset, 16 + 36);
        assert_eq!(&evs[2].payload[4..8], 1u32.to_le_bytes());
        let kinds: Vec<_> = page.records().map(|r| r.unwrap().type_len).collect();
        assert_eq!(kinds, [2, 30, 1, 29, 0, 31, 1]);
    }

    #[test]
    fn missed_events_flags_and_count() {
        let mut d = [0u8; 16];
        let mut n = 0;
        push(&mut d, &mut n, header_word(1, 0));
        push(&mut d, &mut n, 7);
        d[8..16].copy_from_slice(&42u64.to_le_bytes());
        // The kernel's local_add of (int)(1 << 31) sign-extends into the upper word.
        let word = (8u64 + MISSED_STORED).wrapping_add(0xffff_ffff_8000_0000);
        let page = page_with(&d, 5, word);
        let page = Page::new(&page).unwrap();
        assert_eq!(page.commit(), 8);
        assert!(page.missed_events() && page.missed_stored());
        assert_eq!(page.missed_count(), Some(42));
        assert_eq!(page.events().count(), 1);
    }

    #[test]
    fn errors_name_the_offset() {
        assert_eq!(
            Page::new(&[0; 10]).unwrap_err(),
            PageError::TooShort { len: 10 }
        );
        let p = page_with(&[], 0, 300);
        assert_eq!(
            Page::new(&p).unwrap_err(),
            PageError::CommitTooLarge {
                commit: 300,
                capacity: 240
            }
        );
        // a 28-byte event announced in a 16-byte commit
        let mut d = [0u8; 16];
        d[0..4].copy_from_slice(&header_word(6, 0).to_le_bytes());
        let p = page_with(&d, 0, 16);
        let page = Page::new(&p).unwrap();
        let errs: Vec<_> = page.events().collect();
        assert_eq!(errs.len(), 1);
        let e = errs[0].unwrap_err();
        assert_eq!(
            e,
            PageError::Truncated {
                offset: 16,
                needed: 28,
                available: 16
            }
        );
        // second record (at offset 24) is the truncated one
        let mut d = [0u8; 16];
        d[0..4].copy_from_slice(&header_word(1, 0).to_le_bytes());
        d[8..12].copy_from_slice(&header_word(6, 0).to_le_bytes());
        let p = page_with(&d, 0, 16);
        let got: Vec<_> = Page::new(&p).unwrap().events().collect();
        assert!(got[0].is_ok());
        assert_eq!(
            got[1],
            Err(PageError::Truncated {
                offset: 24,
                needed: 28,
                available: 8
            })
        );
        let text = format!("{}", got[1].unwrap_err());
        assert!(text.contains("offset 24"), "{text}");
        // bad length word of a big event
        let mut d = [0u8; 16];
        d[4..8].copy_from_slice(&3u32.to_le_bytes());
        let p = page_with(&d, 0, 16);
        assert_eq!(
            Page::new(&p).unwrap().events().next(),
            Some(Err(PageError::Corrupt {
                offset: 16,
                reason: "bad length word of a type_len 0 event"
            }))
        );
    }

    #[test]
    fn null_padding_ends_the_page() {
        let mut d = [0u8; 16];
        d[0..4].copy_from_slice(&header_word(1, 3).to_le_bytes());
        d[8..12].copy_from_slice(&header_word(TYPE_PADDING, 0).to_le_bytes());
        let p = page_with(&d, 10, 16);
        let evs: Vec<_> = Page::new(&p).unwrap().events().collect();
        assert_eq!(evs.len(), 1);
        assert_eq!(evs[0].unwrap().ts, 13);
    }

    #[test]
    fn abs_ts_fix_restores_top_bits() {
        let full = (3u64 << 59) | 12345;
        assert_eq!(fix_abs_ts(full & ABS_TS_MASK, full - 10), full);
        // wrapped past the 59-bit boundary
        let before = (3u64 << 59) | ((1 << 59) - 5);
        let after = (4u64 << 59) | 3;
        assert_eq!(fix_abs_ts(after & ABS_TS_MASK, before), after);
        assert_eq!(fix_abs_ts(77, 0), 77);
    }
}
