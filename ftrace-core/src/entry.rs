//! Trace entries, laid out exactly as Linux 6.12 lays them out on x86_64.
//!
//! Each struct here is the payload of one ring-buffer event: a [`TraceEntry`] header followed by
//! the event's fields. Sizes and field offsets are checked at compile time against the numbers in
//! the kernel's `events/ftrace/<name>/format` files, so a page written by ftrace-rs is read by
//! trace-cmd and libtraceevent as the kernel's own.
//!
//! Kernel `unsigned long` and pointer fields are `u64` here: the ABI is the 64-bit one whatever the
//! host, so that captures move between machines unchanged.

use static_assertions::const_assert_eq;

use crate::event::{EventId, TraceCtx};

/// `struct trace_entry`: the 8-byte header at the start of every entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct TraceEntry {
    /// `common_type`: the event id ([`EventId`] for ftrace's own events).
    pub type_: u16,
    /// `common_flags`: the [`TraceFlags`](crate::TraceFlags) bits.
    pub flags: u8,
    /// `common_preempt_count`: preempt depth (low nibble), migrate-disable depth (high nibble).
    pub preempt_count: u8,
    /// `common_pid`: the thread id of the task that wrote the entry.
    pub pid: i32,
}

impl TraceEntry {
    /// The header a tracer writes for event `id` in context `ctx` by task `pid`
    /// (`tracing_generic_entry_update`).
    #[inline]
    pub const fn new(id: EventId, ctx: TraceCtx, pid: i32) -> Self {
        TraceEntry {
            type_: id.as_u16(),
            flags: ctx.flags().bits(),
            preempt_count: ctx.preempt_count(),
            pid,
        }
    }
}

/// `struct ftrace_entry` (`function`, id 1): one traced function call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct FtraceEntry {
    /// The common header.
    pub ent: TraceEntry,
    /// Address of the traced function (its call site, for a patched site).
    pub ip: u64,
    /// Address the function was called from.
    pub parent_ip: u64,
}

/// `struct ftrace_graph_ent_entry` (`funcgraph_entry`, id 11): a function-graph entry.
/// Packed, 20 bytes, as the kernel's `FTRACE_ENTRY_PACKED`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C, packed)]
pub struct FtraceGraphEntEntry {
    /// The common header.
    pub ent: TraceEntry,
    /// Address of the entered function.
    pub func: u64,
    /// Call depth below the first traced function (0 for the outermost).
    pub depth: i32,
}

/// `struct ftrace_graph_ret_entry` (`funcgraph_exit`, id 10) as it sits in the ring buffer of
/// Debian's 6.12.117: 56 bytes.
///
/// Its `format` file describes only the first 40 bytes: that kernel's `struct ftrace_graph_ret`
/// still carries `calltime`/`rettime`, and a partial backport added entry-level copies after
/// it that stay zero. The format offsets (24, 32) point at the real times. Readers must take the
/// length from the ring-buffer event header; writers that want pages identical to that kernel's
/// write all 56 bytes (see [`FTRACE_GRAPH_RET_FORMAT_SIZE`] for the described size).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct FtraceGraphRetEntry {
    /// The common header.
    pub ent: TraceEntry,
    /// Address of the returning function.
    pub func: u64,
    /// Call depth, as in the matching entry.
    pub depth: i32,
    /// Shadow-stack overruns seen so far by this task.
    pub overrun: u32,
    /// Timestamp of the call (trace clock).
    pub calltime: u64,
    /// Timestamp of the return (trace clock).
    pub rettime: u64,
    /// Entry-level `calltime` of the backport; always zero in that kernel's pages.
    pub backport_calltime: u64,
    /// Entry-level `rettime` of the backport; always zero in that kernel's pages.
    pub backport_rettime: u64,
}

/// `struct ftrace_graph_ret_entry` (`funcgraph_exit`, id 10) of a 6.12 kernel built with
/// `CONFIG_FUNCTION_GRAPH_RETVAL`: 64 bytes, [`FtraceGraphRetEntry`] with the function's return
/// value (the integer return register) after `func`.
///
/// Readers tell the two layouts apart by the record's length (56 or 64 bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct FtraceGraphRetvalEntry {
    /// The common header.
    pub ent: TraceEntry,
    /// Address of the returning function.
    pub func: u64,
    /// The return value (`regs_return_value`: `rax` on x86_64).
    pub retval: u64,
    /// Call depth, as in the matching entry.
    pub depth: i32,
    /// Shadow-stack overruns seen so far by this task.
    pub overrun: u32,
    /// Timestamp of the call (trace clock).
    pub calltime: u64,
    /// Timestamp of the return (trace clock).
    pub rettime: u64,
    /// Entry-level `calltime` of the backport; always zero in that kernel's pages.
    pub backport_calltime: u64,
    /// Entry-level `rettime` of the backport; always zero in that kernel's pages.
    pub backport_rettime: u64,
}

impl FtraceGraphRetvalEntry {
    /// The record without its return value, in the 56-byte layout.
    pub fn without_retval(&self) -> FtraceGraphRetEntry {
        FtraceGraphRetEntry {
            ent: self.ent,
            func: self.func,
            depth: self.depth,
            overrun: self.overrun,
            calltime: self.calltime,
            rettime: self.rettime,
            backport_calltime: self.backport_calltime,
            backport_rettime: self.backport_rettime,
        }
    }
}

/// The size `events/ftrace/funcgraph_exit/format` describes (40) for the 56-byte
/// [`FtraceGraphRetEntry`].
pub const FTRACE_GRAPH_RET_FORMAT_SIZE: usize = 40;

/// `struct print_entry` (`print`, id 5): `trace_marker` text. A NUL-terminated string follows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct PrintEntry {
    /// The common header.
    pub ent: TraceEntry,
    /// Address of the writer (`tracing_mark_write` for marker writes).
    pub ip: u64,
    // buf[]: char, NUL-terminated, follows at offset 16.
}

/// `struct bprint_entry` (`bprint`, id 6): binary `trace_printk`; packed u32 arguments follow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct BprintEntry {
    /// The common header.
    pub ent: TraceEntry,
    /// Address of the caller.
    pub ip: u64,
    /// Address of the format string (resolved through `printk_formats`).
    pub fmt: u64,
    // buf[]: u32 words, `vbin_printf` encoding, follows at offset 24.
}

/// `struct bputs_entry` (`bputs`, id 14): a constant string by address.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct BputsEntry {
    /// The common header.
    pub ent: TraceEntry,
    /// Address of the caller.
    pub ip: u64,
    /// Address of the string.
    pub str_: u64,
}

/// `struct raw_data_entry` (`raw_data`, id 18): `trace_marker_raw`; the raw bytes follow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct RawDataEntry {
    /// The common header.
    pub ent: TraceEntry,
    /// The id the writer put in the first four bytes of its write.
    pub id: u32,
    // buf[]: bytes, follows at offset 12.
}

/// `struct ctx_switch_entry` (`context_switch`, id 2, and `wakeup`, id 3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct CtxSwitchEntry {
    /// The common header.
    pub ent: TraceEntry,
    /// Pid of the task switched out (or the waker).
    pub prev_pid: u32,
    /// Pid of the task switched in (or woken).
    pub next_pid: u32,
    /// CPU of the next task.
    pub next_cpu: u32,
    /// Priority of the previous task.
    pub prev_prio: u8,
    /// State of the previous task.
    pub prev_state: u8,
    /// Priority of the next task.
    pub next_prio: u8,
    /// State of the next task.
    pub next_state: u8,
}

/// Number of frames in a stack entry (`FTRACE_STACK_ENTRIES`).
pub const FTRACE_STACK_ENTRIES: usize = 8;

/// `struct stack_entry` (`kernel_stack`, id 4) as its format describes it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct StackEntry {
    /// The common header.
    pub ent: TraceEntry,
    /// Number of valid frames.
    pub size: i32,
    /// Return addresses, innermost first.
    pub caller: [u64; FTRACE_STACK_ENTRIES],
}

/// `struct userstack_entry` (`user_stack`, id 12).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct UserStackEntry {
    /// The common header.
    pub ent: TraceEntry,
    /// Thread-group id of the task.
    pub tgid: u32,
    /// Return addresses, innermost first.
    pub caller: [u64; FTRACE_STACK_ENTRIES],
}

/// `struct trace_branch` (`branch`, id 9).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct BranchEntry {
    /// The common header.
    pub ent: TraceEntry,
    /// Source line.
    pub line: u32,
    /// Function name, NUL-padded.
    pub func: [u8; 31],
    /// File name, NUL-padded.
    pub file: [u8; 21],
    /// Whether the prediction was correct.
    pub correct: u8,
    /// Whether the condition was constant.
    pub constant: u8,
}

/// `struct hwlat_entry` (`hwlat`, id 15).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct HwlatEntry {
    /// The common header.
    pub ent: TraceEntry,
    /// Inner-loop latency.
    pub duration: u64,
    /// Outer-loop latency.
    pub outer_duration: u64,
    /// Time spent in NMIs.
    pub nmi_total_ts: u64,
    /// Wall-clock seconds.
    pub tv_sec: i64,
    /// Wall-clock nanoseconds.
    pub tv_nsec: i64,
    /// NMIs seen.
    pub nmi_count: u32,
    /// Sample sequence number.
    pub seqnum: u32,
    /// Samples above threshold in this window.
    pub count: u32,
}

/// `struct osnoise_entry` (`osnoise`, id 16).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct OsnoiseEntry {
    /// The common header.
    pub ent: TraceEntry,
    /// Total noise.
    pub noise: u64,
    /// Sampled runtime.
    pub runtime: u64,
    /// Largest single noise.
    pub max_sample: u64,
    /// Hardware noise count.
    pub hw_count: u32,
    /// NMI count.
    pub nmi_count: u32,
    /// IRQ count.
    pub irq_count: u32,
    /// Softirq count.
    pub softirq_count: u32,
    /// Thread count.
    pub thread_count: u32,
}

/// `struct timerlat_entry` (`timerlat`, id 17).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct TimerlatEntry {
    /// The common header.
    pub ent: TraceEntry,
    /// Sample sequence number.
    pub seqnum: u32,
    /// Context (IRQ or thread).
    pub context: i32,
    /// Measured latency.
    pub timer_latency: u64,
}

/// `struct func_repeats_entry` (`func_repeats`, id 19).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct FuncRepeatsEntry {
    /// The common header.
    pub ent: TraceEntry,
    /// Address of the repeated function.
    pub ip: u64,
    /// Address it was called from.
    pub parent_ip: u64,
    /// How many times it repeated.
    pub count: u16,
    /// High 16 bits of the time since the last repeat.
    pub top_delta_ts: u16,
    /// Low 32 bits of the time since the last repeat.
    pub bottom_delta_ts: u32,
}

/// `struct trace_mmiotrace_rw` (`mmiotrace_rw`, id 7).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct MmiotraceRwEntry {
    /// The common header.
    pub ent: TraceEntry,
    /// Physical address.
    pub phys: u64,
    /// Value read or written.
    pub value: u64,
    /// Program counter.
    pub pc: u64,
    /// Mapping id.
    pub map_id: i32,
    /// Operation.
    pub opcode: u8,
    /// Access width.
    pub width: u8,
}

/// `struct trace_mmiotrace_map` (`mmiotrace_map`, id 8).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct MmiotraceMapEntry {
    /// The common header.
    pub ent: TraceEntry,
    /// Physical address.
    pub phys: u64,
    /// Virtual address.
    pub virt: u64,
    /// Length of the mapping.
    pub len: u64,
    /// Mapping id.
    pub map_id: i32,
    /// Operation.
    pub opcode: u8,
}

/// A fixed-layout entry that can be written into a ring buffer as plain bytes.
///
/// # Safety
/// The implementor is `#[repr(C)]` (or packed), has no padding bytes that would be written
/// uninitialised, and every bit pattern of its size is a valid value.
pub unsafe trait Pod: Copy + 'static {
    /// The entry's bytes.
    #[inline]
    fn as_bytes(&self) -> &[u8] {
        // SAFETY: the trait's contract: plain data, no uninitialised padding.
        unsafe {
            core::slice::from_raw_parts((self as *const Self).cast::<u8>(), size_of::<Self>())
        }
    }

    /// Reads a value from the start of `bytes` (unaligned), or `None` if it is too short.
    #[inline]
    fn read_from(bytes: &[u8]) -> Option<Self> {
        if bytes.len() < size_of::<Self>() {
            return None;
        }
        // SAFETY: length checked above; every bit pattern is valid (trait contract).
        Some(unsafe { core::ptr::read_unaligned(bytes.as_ptr().cast::<Self>()) })
    }
}

macro_rules! pod {
    ($($t:ty),* $(,)?) => { $(
        // SAFETY: repr(C)/packed structs of integers whose fields tile the struct with no
        // padding (checked by the size assertions below).
        unsafe impl Pod for $t {}
    )* };
}
pod!(
    TraceEntry,
    FtraceEntry,
    FtraceGraphEntEntry,
    FtraceGraphRetEntry,
    FtraceGraphRetvalEntry,
    PrintEntry,
    BprintEntry,
    BputsEntry,
    RawDataEntry,
    CtxSwitchEntry,
    HwlatEntry,
    OsnoiseEntry,
    TimerlatEntry,
    FuncRepeatsEntry,
);

// Sizes (x86_64, Linux 6.12). Structs marked Pod above have no padding: the sum of their
// fields is their size.
const_assert_eq!(size_of::<TraceEntry>(), 8);
const_assert_eq!(size_of::<FtraceEntry>(), 24);
const_assert_eq!(size_of::<FtraceGraphEntEntry>(), 20);
const_assert_eq!(size_of::<FtraceGraphRetEntry>(), 56);
const_assert_eq!(size_of::<FtraceGraphRetvalEntry>(), 64);
const_assert_eq!(size_of::<PrintEntry>(), 16);
const_assert_eq!(size_of::<BprintEntry>(), 24);
const_assert_eq!(size_of::<BputsEntry>(), 24);
const_assert_eq!(size_of::<RawDataEntry>(), 12);
const_assert_eq!(size_of::<CtxSwitchEntry>(), 24);
const_assert_eq!(size_of::<StackEntry>(), 80);
const_assert_eq!(size_of::<UserStackEntry>(), 80);
const_assert_eq!(size_of::<BranchEntry>(), 68);
const_assert_eq!(size_of::<HwlatEntry>(), 64);
const_assert_eq!(size_of::<OsnoiseEntry>(), 56);
const_assert_eq!(size_of::<TimerlatEntry>(), 24);
const_assert_eq!(size_of::<FuncRepeatsEntry>(), 32);
const_assert_eq!(size_of::<MmiotraceRwEntry>(), 40);
const_assert_eq!(size_of::<MmiotraceMapEntry>(), 40);

// Offsets the format files state (the format table in `format` is built from these same
// offsets, and the golden test compares the generated text with the kernel's).
macro_rules! offsets {
    ($t:ty { $($f:ident : $off:expr),* $(,)? }) => {
        $( const_assert_eq!(memoffset::offset_of!($t, $f), $off); )*
    };
}
offsets!(TraceEntry {
    type_: 0,
    flags: 2,
    preempt_count: 3,
    pid: 4
});
offsets!(FtraceEntry {
    ip: 8,
    parent_ip: 16
});
offsets!(FtraceGraphEntEntry { func: 8, depth: 16 });
offsets!(FtraceGraphRetEntry {
    func: 8,
    depth: 16,
    overrun: 20,
    calltime: 24,
    rettime: 32,
    backport_calltime: 40,
    backport_rettime: 48,
});
offsets!(FtraceGraphRetvalEntry {
    func: 8,
    retval: 16,
    depth: 24,
    overrun: 28,
    calltime: 32,
    rettime: 40,
    backport_calltime: 48,
    backport_rettime: 56,
});
offsets!(PrintEntry { ip: 8 });
offsets!(BprintEntry { ip: 8, fmt: 16 });
offsets!(BputsEntry { ip: 8, str_: 16 });
offsets!(RawDataEntry { id: 8 });
offsets!(CtxSwitchEntry {
    prev_pid: 8,
    next_pid: 12,
    next_cpu: 16,
    prev_prio: 20,
    prev_state: 21,
    next_prio: 22,
    next_state: 23,
});
offsets!(StackEntry {
    size: 8,
    caller: 16
});
offsets!(UserStackEntry {
    tgid: 8,
    caller: 16
});
offsets!(BranchEntry {
    line: 8,
    func: 12,
    file: 43,
    correct: 64,
    constant: 65
});
offsets!(HwlatEntry {
    duration: 8,
    outer_duration: 16,
    nmi_total_ts: 24,
    tv_sec: 32,
    tv_nsec: 40,
    nmi_count: 48,
    seqnum: 52,
    count: 56,
});
offsets!(OsnoiseEntry {
    noise: 8,
    runtime: 16,
    max_sample: 24,
    hw_count: 32,
    nmi_count: 36,
    irq_count: 40,
    softirq_count: 44,
    thread_count: 48,
});
offsets!(TimerlatEntry {
    seqnum: 8,
    context: 12,
    timer_latency: 16
});
offsets!(FuncRepeatsEntry {
    ip: 8,
    parent_ip: 16,
    count: 24,
    top_delta_ts: 26,
    bottom_delta_ts: 28
});
offsets!(MmiotraceRwEntry {
    phys: 8,
    value: 16,
    pc: 24,
    map_id: 32,
    opcode: 36,
    width: 37
});
offsets!(MmiotraceMapEntry {
    phys: 8,
    virt: 16,
    len: 24,
    map_id: 32,
    opcode: 36
});

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::TraceFlags;

    #[test]
    fn header_from_ctx() {
        let ctx = TraceCtx::new(TraceFlags::IRQS_OFF | TraceFlags::NEED_RESCHED, 1, 0);
        let e = TraceEntry::new(EventId::Function, ctx, 1234);
        assert_eq!(e.as_bytes(), &[1, 0, 0x05, 0x01, 0xd2, 0x04, 0, 0]);
    }

    #[test]
    fn pod_round_trip() {
        let e = FtraceEntry {
            ent: TraceEntry {
                type_: 1,
                flags: 0,
                preempt_count: 0,
                pid: 7,
            },
            ip: 0xffff_ffff_8123_4567,
            parent_ip: 0xffff_ffff_8100_0000,
        };
        let bytes = e.as_bytes();
        assert_eq!(bytes.len(), 24);
        assert_eq!(FtraceEntry::read_from(bytes), Some(e));
        assert_eq!(FtraceEntry::read_from(&bytes[..23]), None);
    }
}
