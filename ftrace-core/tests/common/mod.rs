//! Shared test platform: a thread-local recursion word, a settable pid and context.
#![allow(dead_code)]

use ftrace_core::event::TraceCtx;
use ftrace_core::platform::{ExecContext, RecursionState, TaskContext};
use ftrace_core::recursion::TraceRecursion;
use std::cell::Cell;

thread_local! {
    static RECURSION: TraceRecursion = const { TraceRecursion::new() };
    static PID: Cell<i32> = const { Cell::new(1) };
    static CTX: Cell<ExecContext> = const { Cell::new(ExecContext::Normal) };
}

/// Userspace-style platform: everything per thread.
#[derive(Clone, Copy, Debug, Default)]
pub struct Platform;

impl Platform {
    pub fn set_pid(pid: i32) {
        PID.with(|p| p.set(pid));
    }
    pub fn set_context(ctx: ExecContext) {
        CTX.with(|c| c.set(ctx));
    }
}

impl TaskContext for Platform {
    fn current_pid(&self) -> i32 {
        PID.with(Cell::get)
    }
    fn trace_ctx(&self) -> TraceCtx {
        TraceCtx(0)
    }
    fn exec_context(&self) -> ExecContext {
        CTX.with(Cell::get)
    }
}

impl RecursionState for Platform {
    #[inline]
    fn trace_recursion(&self) -> &TraceRecursion {
        // SAFETY: the word lives as long as the calling thread, and the dispatcher uses the
        // reference only during the call that asked for it, on that thread.
        RECURSION.with(|r| unsafe { &*(r as *const TraceRecursion) })
    }
}
