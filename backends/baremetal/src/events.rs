//! The kernel's own trace events, declared with ftrace-core's `tracepoint!` and registered
//! with the instance by [`platform::install`](crate::platform::install).
//!
//! Where Linux 6.12 has an event of the same name, the layout and print format are its own
//! (`include/trace/events/irq.h`, `arch/x86/include/asm/trace/irq_vectors.h`), so a reader of
//! Linux's `format` files reads these unchanged:
//! - `irq:irq_handler_entry` / `irq:irq_handler_exit` around every interrupt handler the
//!   kernel has (its IPIs; the vector stands for the IRQ number, there is no IRQ layer);
//! - `irq_vectors:local_timer_entry` / `local_timer_exit` around the local APIC timer tick.
//!
//! The shell's events are a system of their own, `bm_shell`: `shell_command` before a command
//! line runs, `shell_command_exit` after it (`status` 0 for success, 1 for failure).
//!
//! Invariant: the ids are fixed and unique among the kernel's events (500..); each call site is
//! one relaxed load while its event is off.

use ftrace_core::tracepoint;
use ftrace_core::tracepoint::Tracepoint;

tracepoint! {
    /// `irq:irq_handler_entry`: a handler is about to run for interrupt `irq`.
    pub fn trace_irq_handler_entry(irq: i32 => "int", name: str => "__data_loc char[]");
    record IrqHandlerEntry;
    static IRQ_HANDLER_ENTRY = ("irq", "irq_handler_entry", 500,
        "\"irq=%d name=%s\", REC->irq, __get_str(name)");
}

tracepoint! {
    /// `irq:irq_handler_exit`: the handler for `irq` returned (`ret` non-zero: handled).
    pub fn trace_irq_handler_exit(irq: i32 => "int", ret: i32 => "int");
    record IrqHandlerExit;
    static IRQ_HANDLER_EXIT = ("irq", "irq_handler_exit", 501,
        "\"irq=%d ret=%s\", REC->irq, REC->ret ? \"handled\" : \"unhandled\"");
}

tracepoint! {
    /// `irq_vectors:local_timer_entry`: the local APIC timer interrupt starts.
    pub fn trace_local_timer_entry(vector: i32 => "int");
    record LocalTimerEntry;
    static LOCAL_TIMER_ENTRY = ("irq_vectors", "local_timer_entry", 502,
        "\"vector=%d\", REC->vector");
}

tracepoint! {
    /// `irq_vectors:local_timer_exit`: the local APIC timer interrupt ends.
    pub fn trace_local_timer_exit(vector: i32 => "int");
    record LocalTimerExit;
    static LOCAL_TIMER_EXIT = ("irq_vectors", "local_timer_exit", 503,
        "\"vector=%d\", REC->vector");
}

tracepoint! {
    /// `bm_shell:shell_command`: the shell is about to run `line`.
    pub fn trace_shell_command(line: str => "__data_loc char[]");
    record ShellCommand;
    static SHELL_COMMAND = ("bm_shell", "shell_command", 504,
        "\"line=%s\", __get_str(line)");
}

tracepoint! {
    /// `bm_shell:shell_command_exit`: the command line ran (`status` 0: success, 1: failure).
    pub fn trace_shell_command_exit(status: i32 => "int");
    record ShellCommandExit;
    static SHELL_COMMAND_EXIT = ("bm_shell", "shell_command_exit", 505,
        "\"status=%d\", REC->status");
}

/// Every event this crate declares, in registration order.
pub static EVENTS: [&Tracepoint; 6] = [
    &IRQ_HANDLER_ENTRY,
    &IRQ_HANDLER_EXIT,
    &LOCAL_TIMER_ENTRY,
    &LOCAL_TIMER_EXIT,
    &SHELL_COMMAND,
    &SHELL_COMMAND_EXIT,
];

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::String;

    /// The `format` files' field lines, as Linux 6.12 prints them for the same events.
    #[test]
    fn layouts_are_linux_6_12s() {
        let body = |tp: &Tracepoint| {
            let mut s = String::new();
            tp.format().write_to(&mut s).unwrap();
            s
        };
        let entry = body(&IRQ_HANDLER_ENTRY);
        assert!(entry.contains(
            "\tfield:int irq;\toffset:8;\tsize:4;\tsigned:1;\n\
             \tfield:__data_loc char[] name;\toffset:12;\tsize:4;\tsigned:0;\n\n\
             print fmt: \"irq=%d name=%s\", REC->irq, __get_str(name)\n"
        ));
        let exit = body(&IRQ_HANDLER_EXIT);
        assert!(exit.contains(
            "\tfield:int irq;\toffset:8;\tsize:4;\tsigned:1;\n\
             \tfield:int ret;\toffset:12;\tsize:4;\tsigned:1;\n\n\
             print fmt: \"irq=%d ret=%s\", REC->irq, REC->ret ? \"handled\" : \"unhandled\"\n"
        ));
        let timer = body(&LOCAL_TIMER_ENTRY);
        assert!(timer.contains(
            "\tfield:int vector;\toffset:8;\tsize:4;\tsigned:1;\n\n\
             print fmt: \"vector=%d\", REC->vector\n"
        ));
        let mut ids: std::vec::Vec<u16> = EVENTS.iter().map(|t| t.format().id).collect();
        ids.dedup();
        assert_eq!(ids.len(), EVENTS.len());
    }
}
