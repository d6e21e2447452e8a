//! The `sched` trace events of Linux 6.12 on x86_64, ready for a host to register.
//!
//! `sched_switch` and `sched_wakeup` as `include/trace/events/sched.h` lays them out (the
//! `TRACE_EVENT` field tables, offsets and print formats of a 64-bit kernel) and with the ids
//! the 6.12.117 reference capture shows (310 and 312). Invariant: every table matches the
//! kernel's `format` file byte for byte, so a reader that parses the format file decodes the
//! records a writer stores with these offsets.

use super::{Field, FieldArray, TraceEventFormat};

const fn scalar(
    c_type: &'static str,
    name: &'static str,
    offset: u32,
    size: u32,
    signed: bool,
) -> Field {
    Field {
        c_type,
        name,
        array: FieldArray::Scalar,
        offset,
        size,
        signed,
    }
}

const fn comm(name: &'static str, offset: u32) -> Field {
    Field {
        c_type: "char",
        name,
        array: FieldArray::Fixed(TASK_COMM_LEN),
        offset,
        size: TASK_COMM_LEN,
        signed: false,
    }
}

/// `TASK_COMM_LEN`: the size of a task name field.
pub const TASK_COMM_LEN: u32 = 16;

/// The `prev_state` letters of `sched_switch` (`__print_flags` of `TASK_REPORT` bits, bit 0
/// first); a state with none of these bits prints `R`, and the preemption bit
/// [`TASK_REPORT_MAX`] appends `+`.
pub const PREV_STATE_LETTERS: [(u64, &str); 8] = [
    (0x01, "S"),
    (0x02, "D"),
    (0x04, "T"),
    (0x08, "t"),
    (0x10, "X"),
    (0x20, "Z"),
    (0x40, "P"),
    (0x80, "I"),
];

/// `TASK_REPORT_MAX` in 6.12: the bit above the reportable states, set when the task was
/// preempted while runnable (`prev_state` prints a `+`).
pub const TASK_REPORT_MAX: u64 = 0x100;

/// `sched:sched_switch` (id 310 in the reference capture).
pub const SCHED_SWITCH: TraceEventFormat = TraceEventFormat {
    system: "sched",
    name: "sched_switch",
    id: 310,
    fields: &[
        comm("prev_comm", 8),
        scalar("pid_t", "prev_pid", 24, 4, true),
        scalar("int", "prev_prio", 28, 4, true),
        scalar("long", "prev_state", 32, 8, true),
        comm("next_comm", 40),
        scalar("pid_t", "next_pid", 56, 4, true),
        scalar("int", "next_prio", 60, 4, true),
    ],
    print_fmt: SWITCH_FMT,
};

/// `sched:sched_wakeup` (id 312 in the reference capture).
pub const SCHED_WAKEUP: TraceEventFormat = TraceEventFormat {
    system: "sched",
    name: "sched_wakeup",
    id: 312,
    fields: &[
        comm("comm", 8),
        scalar("pid_t", "pid", 24, 4, true),
        scalar("int", "prio", 28, 4, true),
        scalar("int", "target_cpu", 32, 4, true),
    ],
    print_fmt: WAKEUP_FMT,
};

/// Both events, in the order the 6.12 kernel lists them (`available_events`, `set_event`).
pub const SCHED_EVENTS: &[TraceEventFormat] = &[SCHED_SWITCH, SCHED_WAKEUP];

const SWITCH_FMT: &str = "\"prev_comm=%s prev_pid=%d prev_prio=%d prev_state=%s%s ==> next_comm=%s next_pid=%d next_prio=%d\", REC->prev_comm, REC->prev_pid, REC->prev_prio, (REC->prev_state & ((((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) - 1)) ? __print_flags(REC->prev_state & ((((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) - 1), \"|\", { 0x00000001, \"S\" }, { 0x00000002, \"D\" }, { 0x00000004, \"T\" }, { 0x00000008, \"t\" }, { 0x00000010, \"X\" }, { 0x00000020, \"Z\" }, { 0x00000040, \"P\" }, { 0x00000080, \"I\" }) : \"R\", REC->prev_state & (((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) ? \"+\" : \"\", REC->next_comm, REC->next_pid, REC->next_prio";

const WAKEUP_FMT: &str =
    "\"comm=%s pid=%d prio=%d target_cpu=%03d\", REC->comm, REC->pid, REC->prio, REC->target_cpu";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_are_contiguous_and_sized_as_on_x86_64() {
        assert_eq!(SCHED_SWITCH.record_size(), 64);
        assert_eq!(SCHED_WAKEUP.record_size(), 36);
        for ev in SCHED_EVENTS {
            let mut end = 8;
            for f in ev.fields {
                assert_eq!(f.offset, end, "{}.{}", ev.name, f.name);
                end = f.offset + f.size;
            }
        }
        assert_eq!(SCHED_SWITCH.field("next_pid").map(|f| f.offset), Some(56));
        assert_eq!(SCHED_SWITCH.field("common_pid").map(|f| f.offset), Some(4));
        assert!(SCHED_WAKEUP.field("prev_pid").is_none());
    }
}
