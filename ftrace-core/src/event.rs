//! Event ids (`common_type`) and the per-entry context flags.
//!
//! The ids are those of Linux 6.12.117 as Debian builds it (`enum trace_type` in
//! `kernel/trace/trace.h`, without `TRACE_GRAPH_RETADDR_ENT`): they are what a reader finds in
//! the first two bytes of every entry and what each `events/ftrace/<name>/id` file prints.

use bitflags::bitflags;

/// The id of an ftrace-internal event, stored in [`TraceEntry::type_`](crate::entry::TraceEntry).
///
/// Dynamically registered events (tracepoints, kprobes...) get ids above
/// [`EventId::LAST_INTERNAL`]; ftrace-rs only writes the internal ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u16)]
pub enum EventId {
    /// `TRACE_FN`: a function entry (`struct ftrace_entry`, event `function`).
    Function = 1,
    /// `TRACE_CTX`: a context switch seen by the latency tracers (`context_switch`).
    ContextSwitch = 2,
    /// `TRACE_WAKE`: a wakeup seen by the latency tracers (`wakeup`).
    Wakeup = 3,
    /// `TRACE_STACK`: a kernel stack trace (`kernel_stack`).
    KernelStack = 4,
    /// `TRACE_PRINT`: a text record: `trace_marker` writes, `trace_printk("%s")` (`print`).
    Print = 5,
    /// `TRACE_BPRINT`: a binary `trace_printk` record (`bprint`).
    Bprint = 6,
    /// `TRACE_MMIO_RW`: an MMIO access (`mmiotrace_rw`).
    MmiotraceRw = 7,
    /// `TRACE_MMIO_MAP`: an MMIO mapping (`mmiotrace_map`).
    MmiotraceMap = 8,
    /// `TRACE_BRANCH`: a branch-profiler record (`branch`).
    Branch = 9,
    /// `TRACE_GRAPH_RET`: a function-graph return (`funcgraph_exit`).
    FuncgraphExit = 10,
    /// `TRACE_GRAPH_ENT`: a function-graph entry (`funcgraph_entry`).
    FuncgraphEntry = 11,
    /// `TRACE_USER_STACK`: a user stack trace (`user_stack`).
    UserStack = 12,
    /// `TRACE_BLK`: a block-layer record (no format file; unused by ftrace-rs).
    Blk = 13,
    /// `TRACE_BPUTS`: a constant-string `trace_puts` record (`bputs`).
    Bputs = 14,
    /// `TRACE_HWLAT`: a hardware-latency sample (`hwlat`).
    Hwlat = 15,
    /// `TRACE_OSNOISE`: an OS-noise sample (`osnoise`).
    Osnoise = 16,
    /// `TRACE_TIMERLAT`: a timer-latency sample (`timerlat`).
    Timerlat = 17,
    /// `TRACE_RAW_DATA`: a `trace_marker_raw` write (`raw_data`).
    RawData = 18,
    /// `TRACE_FUNC_REPEATS`: repeated calls folded into one record (`func_repeats`).
    FuncRepeats = 19,
}

impl EventId {
    /// The last id ftrace reserves for its internal events (`__TRACE_LAST_TYPE - 1`).
    pub const LAST_INTERNAL: u16 = 19;

    /// Every internal event id, in id order.
    pub const ALL: [EventId; 19] = [
        EventId::Function,
        EventId::ContextSwitch,
        EventId::Wakeup,
        EventId::KernelStack,
        EventId::Print,
        EventId::Bprint,
        EventId::MmiotraceRw,
        EventId::MmiotraceMap,
        EventId::Branch,
        EventId::FuncgraphExit,
        EventId::FuncgraphEntry,
        EventId::UserStack,
        EventId::Blk,
        EventId::Bputs,
        EventId::Hwlat,
        EventId::Osnoise,
        EventId::Timerlat,
        EventId::RawData,
        EventId::FuncRepeats,
    ];

    /// The id as stored in `common_type`.
    #[inline]
    pub const fn as_u16(self) -> u16 {
        self as u16
    }

    /// The internal event with this `common_type`, if there is one.
    pub const fn from_u16(id: u16) -> Option<EventId> {
        if id >= 1 && id <= Self::LAST_INTERNAL {
            Some(Self::ALL[id as usize - 1])
        } else {
            None
        }
    }
}

bitflags! {
    /// The `TRACE_FLAG_*` bits of `trace_entry.flags` (`enum trace_flag_type`, Linux ≤ 6.12).
    ///
    /// Linux 6.13 reused bit 0x02 for `NEED_RESCHED_LAZY`; ftrace-rs follows 6.12, whose
    /// captures it is checked against.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct TraceFlags: u8 {
        /// Interrupts were disabled (`d` in the latency column).
        const IRQS_OFF = 0x01;
        /// The architecture cannot tell whether interrupts were off (`X`).
        const IRQS_NOSUPPORT = 0x02;
        /// The task's `TIF_NEED_RESCHED` was set (`N`).
        const NEED_RESCHED = 0x04;
        /// Inside a hard interrupt (`h`).
        const HARDIRQ = 0x08;
        /// Serving a softirq (`s`).
        const SOFTIRQ = 0x10;
        /// The preempt-count's need-resched bit was set (`p`).
        const PREEMPT_RESCHED = 0x20;
        /// Inside a non-maskable interrupt (`z`/`Z`).
        const NMI = 0x40;
        /// Bottom halves were disabled (`b`).
        const BH_OFF = 0x80;
    }
}

/// The context word a tracer computes once per event (`trace_ctx` in the kernel): the flags in
/// bits 16..24, the preempt depth in bits 0..4 and the migrate-disable depth in bits 4..8.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct TraceCtx(pub u32);

impl TraceCtx {
    /// Builds the word from its parts; both depths saturate at 15 as the kernel's do.
    #[inline]
    pub const fn new(flags: TraceFlags, preempt_depth: u32, migrate_disable: u32) -> Self {
        let pc = if preempt_depth > 0xf {
            0xf
        } else {
            preempt_depth
        };
        let md = if migrate_disable > 0xf {
            0xf
        } else {
            migrate_disable
        };
        TraceCtx(((flags.bits() as u32) << 16) | pc | (md << 4))
    }

    /// The `TRACE_FLAG_*` bits.
    #[inline]
    pub const fn flags(self) -> TraceFlags {
        TraceFlags::from_bits_retain((self.0 >> 16) as u8)
    }

    /// The byte stored in `trace_entry.preempt_count`.
    #[inline]
    pub const fn preempt_count(self) -> u8 {
        (self.0 & 0xff) as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip() {
        for (i, id) in EventId::ALL.iter().enumerate() {
            assert_eq!(id.as_u16() as usize, i + 1);
            assert_eq!(EventId::from_u16(id.as_u16()), Some(*id));
        }
        assert_eq!(EventId::from_u16(0), None);
        assert_eq!(EventId::from_u16(20), None);
    }

    #[test]
    fn trace_ctx_packs_like_the_kernel() {
        let ctx = TraceCtx::new(TraceFlags::IRQS_OFF | TraceFlags::HARDIRQ, 2, 1);
        assert_eq!(ctx.0, 0x0009_0012);
        assert_eq!(ctx.preempt_count(), 0x12);
        assert_eq!(ctx.flags(), TraceFlags::IRQS_OFF | TraceFlags::HARDIRQ);
        assert_eq!(
            TraceCtx::new(TraceFlags::empty(), 99, 99).preempt_count(),
            0xff
        );
    }
}
