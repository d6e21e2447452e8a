//! One recorded event as a reader sees it, and its typed decoding.
//!
//! An [`EventRef`] is what the ring buffer hands a reader: the CPU it was recorded on, its
//! absolute timestamp, and the entry's bytes (starting with `struct trace_entry`). Invariant:
//! `data.len()` is the length the ring-buffer event header gives (`iter->ent_size`), never the
//! length a format file describes; printers that print "the rest of the entry" (raw_data) use it.

use ftrace_core::EventId;
use ftrace_core::entry::{
    BprintEntry, BputsEntry, CtxSwitchEntry, FtraceEntry, FtraceGraphEntEntry, FtraceGraphRetEntry,
    FtraceGraphRetvalEntry, FuncRepeatsEntry, Pod, PrintEntry, RawDataEntry, TraceEntry,
};

/// Events lost before an event (the ring buffer's missed-events information).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Missed {
    /// Nothing was lost.
    #[default]
    None,
    /// Events were lost; how many is unknown (`[LOST EVENTS]`).
    Unknown,
    /// This many events were lost.
    Count(u64),
}

/// One event read from a per-CPU buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventRef<'a> {
    /// The CPU whose buffer held it.
    pub cpu: u32,
    /// Absolute timestamp in trace-clock units.
    pub ts: u64,
    /// The entry: `struct trace_entry` followed by the event's fields.
    pub data: &'a [u8],
    /// Events lost just before this one on this CPU.
    pub missed: Missed,
}

impl<'a> EventRef<'a> {
    /// An event with nothing missed before it.
    pub const fn new(cpu: u32, ts: u64, data: &'a [u8]) -> Self {
        EventRef {
            cpu,
            ts,
            data,
            missed: Missed::None,
        }
    }

    /// The common header, or `None` if the entry is shorter than 8 bytes.
    pub fn header(&self) -> Option<TraceEntry> {
        TraceEntry::read_from(self.data)
    }

    /// `common_type` (0 if the entry is too short to have one).
    pub fn type_id(&self) -> u16 {
        self.header().map_or(0, |h| h.type_)
    }

    /// `common_pid` (0 if too short).
    pub fn pid(&self) -> i32 {
        self.header().map_or(0, |h| h.pid)
    }

    /// Decodes the entry by its type.
    pub fn entry(&self) -> Entry<'a> {
        let d = self.data;
        let Some(h) = TraceEntry::read_from(d) else {
            return Entry::Truncated;
        };
        match EventId::from_u16(h.type_) {
            Some(EventId::Function) => {
                FtraceEntry::read_from(d).map_or(Entry::Truncated, Entry::Function)
            }
            Some(EventId::FuncgraphEntry) => {
                FtraceGraphEntEntry::read_from(d).map_or(Entry::Truncated, Entry::GraphEntry)
            }
            Some(EventId::FuncgraphExit) => {
                read_graph_return(d).map_or(Entry::Truncated, Entry::GraphReturn)
            }
            Some(EventId::Print) => match PrintEntry::read_from(d) {
                Some(p) => Entry::Print {
                    ip: p.ip,
                    text: cstr(&d[size_of::<PrintEntry>()..]),
                },
                None => Entry::Truncated,
            },
            Some(EventId::RawData) => match RawDataEntry::read_from(d) {
                Some(r) => Entry::RawData {
                    id: r.id,
                    buf: &d[size_of::<RawDataEntry>()..],
                },
                None => Entry::Truncated,
            },
            Some(EventId::Bputs) => BputsEntry::read_from(d).map_or(Entry::Truncated, Entry::Bputs),
            Some(EventId::Bprint) => match BprintEntry::read_from(d) {
                Some(b) => Entry::Bprint {
                    entry: b,
                    args: &d[size_of::<BprintEntry>()..],
                },
                None => Entry::Truncated,
            },
            Some(id @ (EventId::ContextSwitch | EventId::Wakeup)) => {
                match CtxSwitchEntry::read_from(d) {
                    Some(c) => Entry::ContextSwitch {
                        entry: c,
                        wakeup: id == EventId::Wakeup,
                    },
                    None => Entry::Truncated,
                }
            }
            Some(EventId::KernelStack) if d.len() >= 16 => Entry::KernelStack(&d[16..]),
            Some(EventId::UserStack) if d.len() >= 16 => Entry::UserStack(&d[16..]),
            Some(EventId::FuncRepeats) => {
                FuncRepeatsEntry::read_from(d).map_or(Entry::Truncated, Entry::FuncRepeats)
            }
            _ => Entry::Other(h.type_),
        }
    }
}

/// Reads a `funcgraph_exit` record of either in-buffer size: 56 bytes (Debian 6.12.117) or the
/// 40 bytes its format file describes (the times sit at the same offsets in both). A 64-byte
/// record (`CONFIG_FUNCTION_GRAPH_RETVAL`) is read too, without its return value.
pub fn read_graph_ret(d: &[u8]) -> Option<FtraceGraphRetEntry> {
    read_graph_return(d).map(|r| r.ret)
}

/// Reads a `funcgraph_exit` record of any layout this crate knows: the 64-byte one of a
/// `CONFIG_FUNCTION_GRAPH_RETVAL` kernel (with its return value), the 56-byte one of Debian
/// 6.12.117, or the 40 bytes that kernel's format file describes (both without).
pub fn read_graph_return(d: &[u8]) -> Option<GraphReturnRecord> {
    if d.len() >= size_of::<FtraceGraphRetvalEntry>() {
        let r = FtraceGraphRetvalEntry::read_from(d)?;
        return Some(GraphReturnRecord {
            ret: r.without_retval(),
            retval: Some(r.retval),
        });
    }
    let ret = match FtraceGraphRetEntry::read_from(d) {
        Some(r) => r,
        None => {
            if d.len() < ftrace_core::entry::FTRACE_GRAPH_RET_FORMAT_SIZE {
                return None;
            }
            let mut full = [0u8; size_of::<FtraceGraphRetEntry>()];
            full[..d.len()].copy_from_slice(d);
            FtraceGraphRetEntry::read_from(&full)?
        }
    };
    Some(GraphReturnRecord { ret, retval: None })
}

/// A decoded `funcgraph_exit`: the record and, when its layout carries one, the function's
/// return value. Dereferences to the record's fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GraphReturnRecord {
    /// The record's fields, in the 56-byte layout.
    pub ret: FtraceGraphRetEntry,
    /// The return value, if the record has one (a 64-byte record).
    pub retval: Option<u64>,
}

impl core::ops::Deref for GraphReturnRecord {
    type Target = FtraceGraphRetEntry;
    fn deref(&self) -> &FtraceGraphRetEntry {
        &self.ret
    }
}

/// The bytes of `b` up to its first NUL.
fn cstr(b: &[u8]) -> &[u8] {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    &b[..end]
}

/// A decoded entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry<'a> {
    /// `function`.
    Function(FtraceEntry),
    /// `funcgraph_entry`.
    GraphEntry(FtraceGraphEntEntry),
    /// `funcgraph_exit`.
    GraphReturn(GraphReturnRecord),
    /// `print` (`trace_marker`): the caller and the text up to its NUL.
    Print {
        /// Where it was recorded (`tracing_mark_write`).
        ip: u64,
        /// The text, usually ending in a newline.
        text: &'a [u8],
    },
    /// `raw_data` (`trace_marker_raw`): the id and every byte after it in the event.
    RawData {
        /// The id the writer gave.
        id: u32,
        /// The payload, padding included.
        buf: &'a [u8],
    },
    /// `bputs`: a string by kernel address (not resolvable offline).
    Bputs(BputsEntry),
    /// `bprint`: binary printk arguments.
    Bprint {
        /// The fixed part.
        entry: BprintEntry,
        /// The packed arguments.
        args: &'a [u8],
    },
    /// `func_repeats`.
    FuncRepeats(FuncRepeatsEntry),
    /// `context_switch` or `wakeup` (the latency tracers' scheduler records).
    ContextSwitch {
        /// The record.
        entry: CtxSwitchEntry,
        /// `wakeup` rather than `context_switch`.
        wakeup: bool,
    },
    /// `kernel_stack`: the `caller[]` words (ended by `ULONG_MAX` or the event's end).
    KernelStack(&'a [u8]),
    /// `user_stack`: the `caller[]` words (ended by 0).
    UserStack(&'a [u8]),
    /// Any other id (printed as `Unknown type`).
    Other(u16),
    /// Shorter than its type's fixed fields.
    Truncated,
}
