//! The agent's `ftrace_ops` dispatcher (ftrace-core's [`Dispatcher`]) and the function tracer's
//! ops.
//!
//! The full-save entry path calls [`DISPATCHER`]: with the function tracer's ops as the only
//! one registered, the dispatcher takes its direct path (one load and a call), as the kernel's
//! `ftrace_ops_list_func` does; the assembly fast path is the equivalent of the kernel's
//! per-ops trampoline for that same single ops. Invariant: the platform's recursion word is the
//! calling thread's own (in its TLS block), so the dispatcher's recursion protection is per
//! thread, nesting with signal handlers.

use ftrace_core::dispatch::Dispatcher;
use ftrace_core::event::{TraceCtx, TraceFlags};
use ftrace_core::ops::{FtraceOps, FtraceRegs, OpsFlags};
use ftrace_core::platform::{ExecContext, RecursionState, TaskContext};
use ftrace_core::reclaim::EpochReclaim;
use ftrace_core::recursion::TraceRecursion;

use crate::buffer::KIND_FUNC;
use crate::handler;

/// This process as the dispatcher's platform: thread ids, a per-thread recursion word.
#[derive(Clone, Copy, Debug, Default)]
pub struct UserPlatform;

impl TaskContext for UserPlatform {
    fn current_pid(&self) -> i32 {
        // SAFETY: no preconditions.
        unsafe { libc::gettid() }
    }

    fn trace_ctx(&self) -> TraceCtx {
        TraceCtx::new(TraceFlags::empty(), 0, 0)
    }

    fn exec_context(&self) -> ExecContext {
        ExecContext::Normal
    }
}

impl RecursionState for UserPlatform {
    fn trace_recursion(&self) -> &TraceRecursion {
        // SAFETY: the calling thread's TLS block lives as long as the thread, longer than any
        // dispatch it makes.
        unsafe { &(*handler::current()).recursion }
    }
}

/// The agent's dispatcher.
pub static DISPATCHER: Dispatcher<EpochReclaim, UserPlatform> =
    Dispatcher::new(EpochReclaim, UserPlatform);

/// The function tracer's ops: one `function` event per call, into the thread's buffer.
pub static FUNCTION_OPS: FtraceOps = FtraceOps::new(function_trace, OpsFlags::empty());

fn function_trace(ip: u64, parent_ip: u64, _op: &FtraceOps, _regs: Option<&mut FtraceRegs>) {
    // SAFETY: called from the entry handler, on this thread, after its buffer was registered.
    let st = unsafe { &*handler::current() };
    if !matches!(st.state, 1 | crate::grow::GROW) {
        return;
    }
    // SAFETY: registered buffer, live cpu pointer.
    unsafe {
        st.writer
            .write(handler::now(), ip, parent_ip, KIND_FUNC, 0, *st.cpu)
    };
}
