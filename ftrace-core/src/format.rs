//! Event format descriptors and the text of tracefs' `format`, `header_page` and `header_event`.
//!
//! Each internal event has one [`EventFormat`]: its name, id, field table and print format. The
//! field offsets and sizes in the tables are taken from the [`entry`](crate::entry) structs by
//! `offset_of!`/`size_of`, so the text a reader parses can never drift from the bytes a writer
//! stores. [`EventFormat::write_to`] prints the table exactly as the kernel's `f_show` does.

use core::fmt;

use crate::entry::*;
use crate::event::EventId;

/// The C view of a Rust field type: whether the kernel calls it signed.
pub trait CType {
    /// `signed:` in the format file.
    const SIGNED: bool;
}
macro_rules! ctype {
    ($($t:ty => $s:expr),*) => { $(impl CType for $t { const SIGNED: bool = $s; })* };
}
ctype!(u8 => false, u16 => false, u32 => false, u64 => false, i32 => true, i64 => true);
impl<T: CType, const N: usize> CType for [T; N] {
    const SIGNED: bool = T::SIGNED;
}

/// Whether a field is a scalar, a fixed array or a trailing dynamic array.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldArray {
    /// A scalar: `field:unsigned long ip;`.
    Scalar,
    /// A fixed array of this many elements: `field:unsigned long caller[8];`.
    Fixed(u32),
    /// A trailing variable-length array with size 0 in the format: `field:char buf[];`.
    Dynamic,
}

/// One field of an event, as the `format` file states it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    /// The C type (`"unsigned long"`, `"const char *"`).
    pub c_type: &'static str,
    /// The field name (`"parent_ip"`).
    pub name: &'static str,
    /// Scalar, fixed or dynamic array.
    pub array: FieldArray,
    /// Byte offset from the start of the entry.
    pub offset: u32,
    /// Size in bytes (0 for a dynamic array).
    pub size: u32,
    /// Whether the C type is signed.
    pub signed: bool,
}

impl fmt::Display for Field {
    /// One `\tfield:...;\toffset:...;\tsize:...;\tsigned:...;\n` line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\tfield:{} {}", self.c_type, self.name)?;
        match self.array {
            FieldArray::Scalar => {}
            FieldArray::Fixed(n) => write!(f, "[{n}]")?,
            FieldArray::Dynamic => f.write_str("[]")?,
        }
        writeln!(
            f,
            ";\toffset:{};\tsize:{};\tsigned:{};",
            self.offset, self.size, self.signed as u8
        )
    }
}

/// An ftrace-internal event: what `events/ftrace/<name>/{format,id}` describe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventFormat {
    /// Event name (`"function"`).
    pub name: &'static str,
    /// Event id (`common_type`).
    pub id: EventId,
    /// The event's own fields, after the common ones.
    pub fields: &'static [Field],
    /// The `print fmt:` line's text.
    pub print_fmt: &'static str,
}

impl EventFormat {
    /// Writes the whole `format` file.
    pub fn write_to(&self, w: &mut impl fmt::Write) -> fmt::Result {
        write!(w, "{self}")
    }

    /// The field called `name`, common fields included.
    pub fn field(&self, name: &str) -> Option<&'static Field> {
        COMMON_FIELDS
            .iter()
            .chain(self.fields.iter())
            .find(|f| f.name == name)
    }
}

impl fmt::Display for EventFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_format(f, self.name, self.id.as_u16(), self.fields, self.print_fmt)
    }
}

/// Writes a whole `format` file (`f_show`): name, id, the common fields, a blank line, the
/// event's own fields, a blank line and the print format.
pub fn write_format(
    w: &mut dyn fmt::Write,
    name: &str,
    id: u16,
    fields: &[Field],
    print_fmt: &str,
) -> fmt::Result {
    writeln!(w, "name: {name}")?;
    writeln!(w, "ID: {id}")?;
    writeln!(w, "format:")?;
    for field in COMMON_FIELDS {
        write!(w, "{field}")?;
    }
    writeln!(w)?;
    for field in fields {
        write!(w, "{field}")?;
    }
    writeln!(w)?;
    writeln!(w, "print fmt: {print_fmt}")
}

/// A trace event of a subsystem (`events/<system>/<name>/`), as a host registers it: the
/// kernel's `TRACE_EVENT()` descriptors (`sched:sched_switch`) rather than ftrace's internal
/// entries. Unlike [`EventFormat`], its id is any `u16` the host assigns (Linux numbers them
/// after the internal ids, `EventId::LAST_INTERNAL`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceEventFormat {
    /// The subsystem (`"sched"`).
    pub system: &'static str,
    /// The event name (`"sched_switch"`).
    pub name: &'static str,
    /// The event id (`common_type` of its records).
    pub id: u16,
    /// The event's own fields, after the common ones.
    pub fields: &'static [Field],
    /// The `print fmt:` line's text.
    pub print_fmt: &'static str,
}

impl TraceEventFormat {
    /// Writes the whole `format` file.
    pub fn write_to(&self, w: &mut impl fmt::Write) -> fmt::Result {
        write!(w, "{self}")
    }

    /// The field called `name`: the event's own fields first, then the common ones (the
    /// kernel's `trace_find_event_field` order).
    pub fn field(&self, name: &str) -> Option<&'static Field> {
        self.fields
            .iter()
            .chain(COMMON_FIELDS.iter())
            .find(|f| f.name == name)
    }

    /// The record size: the end of the last fixed field.
    pub fn record_size(&self) -> u32 {
        self.fields
            .iter()
            .chain(COMMON_FIELDS.iter())
            .map(|f| f.offset + f.size)
            .max()
            .unwrap_or(0)
    }
}

impl fmt::Display for TraceEventFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_format(f, self.name, self.id, self.fields, self.print_fmt)
    }
}

pub mod sched;

/// A field of `$t` with the given C type and name; its offset, size and signedness come from the
/// Rust struct, and the Rust type is checked to be the field's type.
macro_rules! field {
    ($t:ty, $f:ident: [$rty:ty; $n:literal], $cty:literal, $name:literal) => {
        field!(@ $t, $f: [$rty; $n], $cty, $name, FieldArray::Fixed($n))
    };
    ($t:ty, $f:ident: $rty:ty, $cty:literal, $name:literal) => {
        field!(@ $t, $f: $rty, $cty, $name, FieldArray::Scalar)
    };
    (@ $t:ty, $f:ident: $rty:ty, $cty:literal, $name:literal, $array:expr) => {{
        #[allow(dead_code)]
        fn check(e: &$t) -> $rty {
            e.$f
        }
        Field {
            c_type: $cty,
            name: $name,
            array: $array,
            offset: core::mem::offset_of!($t, $f) as u32,
            size: size_of::<$rty>() as u32,
            signed: <$rty as CType>::SIGNED,
        }
    }};
}

/// The trailing dynamic array of `$t`, starting where the struct ends.
macro_rules! dynamic {
    ($t:ty, $elem:ty, $cty:literal, $name:literal) => {
        Field {
            c_type: $cty,
            name: $name,
            array: FieldArray::Dynamic,
            offset: size_of::<$t>() as u32,
            size: 0,
            signed: <$elem as CType>::SIGNED,
        }
    };
}

/// The four `common_*` fields every event starts with.
pub const COMMON_FIELDS: &[Field] = &[
    field!(TraceEntry, type_: u16, "unsigned short", "common_type"),
    field!(TraceEntry, flags: u8, "unsigned char", "common_flags"),
    field!(TraceEntry, preempt_count: u8, "unsigned char", "common_preempt_count"),
    field!(TraceEntry, pid: i32, "int", "common_pid"),
];

const STACK_PRINT: &str = "\"\\t=> %ps\\n\\t=> %ps\\n\\t=> %ps\\n\" \"\\t=> %ps\\n\\t=> %ps\\n\\t=> %ps\\n\" \"\\t=> %ps\\n\\t=> %ps\\n\", (void *)REC->caller[0], (void *)REC->caller[1], (void *)REC->caller[2], (void *)REC->caller[3], (void *)REC->caller[4], (void *)REC->caller[5], (void *)REC->caller[6], (void *)REC->caller[7]";

const CTX_FIELDS: &[Field] = &[
    field!(CtxSwitchEntry, prev_pid: u32, "unsigned int", "prev_pid"),
    field!(CtxSwitchEntry, next_pid: u32, "unsigned int", "next_pid"),
    field!(CtxSwitchEntry, next_cpu: u32, "unsigned int", "next_cpu"),
    field!(CtxSwitchEntry, prev_prio: u8, "unsigned char", "prev_prio"),
    field!(CtxSwitchEntry, prev_state: u8, "unsigned char", "prev_state"),
    field!(CtxSwitchEntry, next_prio: u8, "unsigned char", "next_prio"),
    field!(CtxSwitchEntry, next_state: u8, "unsigned char", "next_state"),
];

/// `function` (id 1).
pub const FUNCTION: EventFormat = EventFormat {
    name: "function",
    id: EventId::Function,
    fields: &[
        field!(FtraceEntry, ip: u64, "unsigned long", "ip"),
        field!(FtraceEntry, parent_ip: u64, "unsigned long", "parent_ip"),
    ],
    print_fmt: "\" %ps <-- %ps\", (void *)REC->ip, (void *)REC->parent_ip",
};

/// `context_switch` (id 2).
pub const CONTEXT_SWITCH: EventFormat = EventFormat {
    name: "context_switch",
    id: EventId::ContextSwitch,
    fields: CTX_FIELDS,
    print_fmt: "\"%u:%u:%u  ==> %u:%u:%u [%03u]\", REC->prev_pid, REC->prev_prio, REC->prev_state, REC->next_pid, REC->next_prio, REC->next_state, REC->next_cpu",
};

/// `wakeup` (id 3).
pub const WAKEUP: EventFormat = EventFormat {
    name: "wakeup",
    id: EventId::Wakeup,
    fields: CTX_FIELDS,
    print_fmt: "\"%u:%u:%u  ==+ %u:%u:%u [%03u]\", REC->prev_pid, REC->prev_prio, REC->prev_state, REC->next_pid, REC->next_prio, REC->next_state, REC->next_cpu",
};

/// `kernel_stack` (id 4).
pub const KERNEL_STACK: EventFormat = EventFormat {
    name: "kernel_stack",
    id: EventId::KernelStack,
    fields: &[
        field!(StackEntry, size: i32, "int", "size"),
        field!(StackEntry, caller: [u64; 8], "unsigned long", "caller"),
    ],
    print_fmt: STACK_PRINT,
};

/// `print` (id 5).
pub const PRINT: EventFormat = EventFormat {
    name: "print",
    id: EventId::Print,
    fields: &[
        field!(PrintEntry, ip: u64, "unsigned long", "ip"),
        dynamic!(PrintEntry, u8, "char", "buf"),
    ],
    print_fmt: "\"%ps: %s\", (void *)REC->ip, REC->buf",
};

/// `bprint` (id 6).
pub const BPRINT: EventFormat = EventFormat {
    name: "bprint",
    id: EventId::Bprint,
    fields: &[
        field!(BprintEntry, ip: u64, "unsigned long", "ip"),
        field!(BprintEntry, fmt: u64, "const char *", "fmt"),
        dynamic!(BprintEntry, u32, "u32", "buf"),
    ],
    print_fmt: "\"%ps: %s\", (void *)REC->ip, REC->fmt",
};

/// `mmiotrace_rw` (id 7).
pub const MMIOTRACE_RW: EventFormat = EventFormat {
    name: "mmiotrace_rw",
    id: EventId::MmiotraceRw,
    fields: &[
        field!(MmiotraceRwEntry, phys: u64, "resource_size_t", "phys"),
        field!(MmiotraceRwEntry, value: u64, "unsigned long", "value"),
        field!(MmiotraceRwEntry, pc: u64, "unsigned long", "pc"),
        field!(MmiotraceRwEntry, map_id: i32, "int", "map_id"),
        field!(MmiotraceRwEntry, opcode: u8, "unsigned char", "opcode"),
        field!(MmiotraceRwEntry, width: u8, "unsigned char", "width"),
    ],
    print_fmt: "\"%lx %lx %lx %d %x %x\", (unsigned long)REC->phys, REC->value, REC->pc, REC->map_id, REC->opcode, REC->width",
};

/// `mmiotrace_map` (id 8).
pub const MMIOTRACE_MAP: EventFormat = EventFormat {
    name: "mmiotrace_map",
    id: EventId::MmiotraceMap,
    fields: &[
        field!(MmiotraceMapEntry, phys: u64, "resource_size_t", "phys"),
        field!(MmiotraceMapEntry, virt: u64, "unsigned long", "virt"),
        field!(MmiotraceMapEntry, len: u64, "unsigned long", "len"),
        field!(MmiotraceMapEntry, map_id: i32, "int", "map_id"),
        field!(MmiotraceMapEntry, opcode: u8, "unsigned char", "opcode"),
    ],
    print_fmt: "\"%lx %lx %lx %d %x\", (unsigned long)REC->phys, REC->virt, REC->len, REC->map_id, REC->opcode",
};

/// `branch` (id 9).
pub const BRANCH: EventFormat = EventFormat {
    name: "branch",
    id: EventId::Branch,
    fields: &[
        field!(BranchEntry, line: u32, "unsigned int", "line"),
        field!(BranchEntry, func: [u8; 31], "char", "func"),
        field!(BranchEntry, file: [u8; 21], "char", "file"),
        field!(BranchEntry, correct: u8, "char", "correct"),
        field!(BranchEntry, constant: u8, "char", "constant"),
    ],
    print_fmt: "\"%u:%s:%s (%u)%s\", REC->line, REC->func, REC->file, REC->correct, REC->constant ? \" CONSTANT\" : \"\"",
};

/// `funcgraph_exit` (id 10). Describes the first 40 bytes of the 56-byte
/// [`FtraceGraphRetEntry`], as that kernel does.
pub const FUNCGRAPH_EXIT: EventFormat = EventFormat {
    name: "funcgraph_exit",
    id: EventId::FuncgraphExit,
    fields: &[
        field!(FtraceGraphRetEntry, func: u64, "unsigned long", "func"),
        field!(FtraceGraphRetEntry, depth: i32, "int", "depth"),
        field!(FtraceGraphRetEntry, overrun: u32, "unsigned int", "overrun"),
        field!(FtraceGraphRetEntry, calltime: u64, "unsigned long long", "calltime"),
        field!(FtraceGraphRetEntry, rettime: u64, "unsigned long long", "rettime"),
    ],
    print_fmt: "\"<-- %ps (%d) (start: %llx  end: %llx) over: %d\", (void *)REC->func, REC->depth, REC->calltime, REC->rettime, REC->depth",
};

/// `funcgraph_entry` (id 11).
pub const FUNCGRAPH_ENTRY: EventFormat = EventFormat {
    name: "funcgraph_entry",
    id: EventId::FuncgraphEntry,
    fields: &[
        field!(FtraceGraphEntEntry, func: u64, "unsigned long", "func"),
        field!(FtraceGraphEntEntry, depth: i32, "int", "depth"),
    ],
    print_fmt: "\"--> %ps (%d)\", (void *)REC->func, REC->depth",
};

/// `user_stack` (id 12).
pub const USER_STACK: EventFormat = EventFormat {
    name: "user_stack",
    id: EventId::UserStack,
    fields: &[
        field!(UserStackEntry, tgid: u32, "unsigned int", "tgid"),
        field!(UserStackEntry, caller: [u64; 8], "unsigned long", "caller"),
    ],
    print_fmt: STACK_PRINT,
};

/// `bputs` (id 14).
pub const BPUTS: EventFormat = EventFormat {
    name: "bputs",
    id: EventId::Bputs,
    fields: &[
        field!(BputsEntry, ip: u64, "unsigned long", "ip"),
        field!(BputsEntry, str_: u64, "const char *", "str"),
    ],
    print_fmt: "\"%ps: %s\", (void *)REC->ip, REC->str",
};

/// `hwlat` (id 15).
pub const HWLAT: EventFormat = EventFormat {
    name: "hwlat",
    id: EventId::Hwlat,
    fields: &[
        field!(HwlatEntry, duration: u64, "u64", "duration"),
        field!(HwlatEntry, outer_duration: u64, "u64", "outer_duration"),
        field!(HwlatEntry, nmi_total_ts: u64, "u64", "nmi_total_ts"),
        field!(HwlatEntry, tv_sec: i64, "s64", "tv_sec"),
        field!(HwlatEntry, tv_nsec: i64, "long", "tv_nsec"),
        field!(HwlatEntry, nmi_count: u32, "unsigned int", "nmi_count"),
        field!(HwlatEntry, seqnum: u32, "unsigned int", "seqnum"),
        field!(HwlatEntry, count: u32, "unsigned int", "count"),
    ],
    print_fmt: "\"cnt:%u\\tts:%010llu.%010lu\\tinner:%llu\\touter:%llu\\tcount:%d\\tnmi-ts:%llu\\tnmi-count:%u\\n\", REC->seqnum, REC->tv_sec, REC->tv_nsec, REC->duration, REC->outer_duration, REC->count, REC->nmi_total_ts, REC->nmi_count",
};

/// `osnoise` (id 16).
pub const OSNOISE: EventFormat = EventFormat {
    name: "osnoise",
    id: EventId::Osnoise,
    fields: &[
        field!(OsnoiseEntry, noise: u64, "u64", "noise"),
        field!(OsnoiseEntry, runtime: u64, "u64", "runtime"),
        field!(OsnoiseEntry, max_sample: u64, "u64", "max_sample"),
        field!(OsnoiseEntry, hw_count: u32, "unsigned int", "hw_count"),
        field!(OsnoiseEntry, nmi_count: u32, "unsigned int", "nmi_count"),
        field!(OsnoiseEntry, irq_count: u32, "unsigned int", "irq_count"),
        field!(OsnoiseEntry, softirq_count: u32, "unsigned int", "softirq_count"),
        field!(OsnoiseEntry, thread_count: u32, "unsigned int", "thread_count"),
    ],
    print_fmt: "\"noise:%llu\\tmax_sample:%llu\\thw:%u\\tnmi:%u\\tirq:%u\\tsoftirq:%u\\tthread:%u\\n\", REC->noise, REC->max_sample, REC->hw_count, REC->nmi_count, REC->irq_count, REC->softirq_count, REC->thread_count",
};

/// `timerlat` (id 17).
pub const TIMERLAT: EventFormat = EventFormat {
    name: "timerlat",
    id: EventId::Timerlat,
    fields: &[
        field!(TimerlatEntry, seqnum: u32, "unsigned int", "seqnum"),
        field!(TimerlatEntry, context: i32, "int", "context"),
        field!(TimerlatEntry, timer_latency: u64, "u64", "timer_latency"),
    ],
    print_fmt: "\"seq:%u\\tcontext:%d\\ttimer_latency:%llu\\n\", REC->seqnum, REC->context, REC->timer_latency",
};

/// `raw_data` (id 18).
pub const RAW_DATA: EventFormat = EventFormat {
    name: "raw_data",
    id: EventId::RawData,
    fields: &[
        field!(RawDataEntry, id: u32, "unsigned int", "id"),
        dynamic!(RawDataEntry, u8, "char", "buf"),
    ],
    print_fmt: "\"id:%04x %08x\", REC->id, (int)REC->buf[0]",
};

/// `func_repeats` (id 19).
pub const FUNC_REPEATS: EventFormat = EventFormat {
    name: "func_repeats",
    id: EventId::FuncRepeats,
    fields: &[
        field!(FuncRepeatsEntry, ip: u64, "unsigned long", "ip"),
        field!(FuncRepeatsEntry, parent_ip: u64, "unsigned long", "parent_ip"),
        field!(FuncRepeatsEntry, count: u16, "u16", "count"),
        field!(FuncRepeatsEntry, top_delta_ts: u16, "u16", "top_delta_ts"),
        field!(FuncRepeatsEntry, bottom_delta_ts: u32, "u32", "bottom_delta_ts"),
    ],
    print_fmt: "\" %ps <-%ps\\t(repeats:%u  delta: -%llu)\", (void *)REC->ip, (void *)REC->parent_ip, REC->count, (((u64)(REC)->top_delta_ts << 32) | (REC)->bottom_delta_ts)",
};

/// Every internal event that has a `format` file (all but `TRACE_BLK`), in id order.
pub const FORMATS: &[EventFormat] = &[
    FUNCTION,
    CONTEXT_SWITCH,
    WAKEUP,
    KERNEL_STACK,
    PRINT,
    BPRINT,
    MMIOTRACE_RW,
    MMIOTRACE_MAP,
    BRANCH,
    FUNCGRAPH_EXIT,
    FUNCGRAPH_ENTRY,
    USER_STACK,
    BPUTS,
    HWLAT,
    OSNOISE,
    TIMERLAT,
    RAW_DATA,
    FUNC_REPEATS,
];

/// The format of event `name` (`"function"`), if it is an internal event.
pub fn by_name(name: &str) -> Option<&'static EventFormat> {
    FORMATS.iter().find(|f| f.name == name)
}

/// The format of the event with id `id`, if it has one.
pub fn by_id(id: EventId) -> Option<&'static EventFormat> {
    FORMATS.iter().find(|f| f.id == id)
}

/// Size of a sub-buffer page header (`u64 timestamp` + `local_t commit`): `BUF_PAGE_HDR_SIZE`.
pub const BUF_PAGE_HDR_SIZE: usize = 16;

/// Writes `events/header_page` for sub-buffers of `subbuf_size` bytes (4096 by default).
pub fn write_header_page(w: &mut impl fmt::Write, subbuf_size: usize) -> fmt::Result {
    w.write_str("\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n")?;
    w.write_str("\tfield: local_t commit;\toffset:8;\tsize:8;\tsigned:1;\n")?;
    w.write_str("\tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;\n")?;
    writeln!(
        w,
        "\tfield: char data;\toffset:{};\tsize:{};\tsigned:0;",
        BUF_PAGE_HDR_SIZE,
        subbuf_size.saturating_sub(BUF_PAGE_HDR_SIZE)
    )
}

/// The ring-buffer event-header constants `events/header_event` states.
pub mod header {
    /// Bits of the `type_len` field.
    pub const TYPE_LEN_BITS: u32 = 5;
    /// Bits of the `time_delta` field.
    pub const TIME_DELTA_BITS: u32 = 27;
    /// `type_len` of a padding record.
    pub const TYPE_PADDING: u32 = 29;
    /// `type_len` of a time-extend record.
    pub const TYPE_TIME_EXTEND: u32 = 30;
    /// `type_len` of an absolute time-stamp record.
    pub const TYPE_TIME_STAMP: u32 = 31;
    /// The largest `type_len` that encodes a data length (`RB_MAX_SMALL_DATA` / 4).
    pub const TYPE_DATA_MAX: u32 = 28;
}

/// Writes `events/header_event`.
pub fn write_header_event(w: &mut impl fmt::Write) -> fmt::Result {
    use header::*;
    w.write_str("# compressed entry header\n")?;
    writeln!(w, "\ttype_len    :    {TYPE_LEN_BITS} bits")?;
    writeln!(w, "\ttime_delta  :   {TIME_DELTA_BITS} bits")?;
    w.write_str("\tarray       :   32 bits\n\n")?;
    writeln!(w, "\tpadding     : type == {TYPE_PADDING}")?;
    writeln!(w, "\ttime_extend : type == {TYPE_TIME_EXTEND}")?;
    writeln!(w, "\ttime_stamp : type == {TYPE_TIME_STAMP}")?;
    writeln!(w, "\tdata max type_len  == {TYPE_DATA_MAX}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_id_with_a_format_is_listed_once() {
        for id in EventId::ALL {
            let n = FORMATS.iter().filter(|f| f.id == id).count();
            assert_eq!(n, usize::from(id != EventId::Blk), "{id:?}");
        }
        assert_eq!(
            by_name("funcgraph_entry").map(|f| f.id),
            Some(EventId::FuncgraphEntry)
        );
        assert_eq!(by_id(EventId::RawData).map(|f| f.name), Some("raw_data"));
    }

    #[test]
    fn fields_stay_inside_their_structs() {
        for f in FORMATS {
            let mut end = 8;
            for field in f.fields {
                assert!(field.offset >= end, "{}.{} overlaps", f.name, field.name);
                end = field.offset + field.size;
            }
        }
        assert_eq!(
            FUNCGRAPH_EXIT.fields.last().map(|f| f.offset + f.size),
            Some(40)
        );
    }
}
