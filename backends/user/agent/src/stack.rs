//! The `stacktrace` function command's and event trigger's stack walk: the return addresses
//! of the thread's stack at a traced call (`record`) or at a program event's call site
//! (`record_caller`), recorded as one `kernel_stack` record ([`KIND_STACK`] and its
//! [`KIND_STACK_MORE`] slots).
//!
//! The walk is libgcc_s's `_Unwind_Backtrace` (the functions' CFI, as a debugger reads it),
//! started from a thunk (`ftrace_agent_walk_from`) whose own CFI describes it as the traced
//! function at its entry: its canonical frame address is the traced function's (8 above the
//! return-address slot), its return address the one in that slot, and `rbp` the caller's.
//! The agent's own frames (the handler, the entry trampoline, which has no CFI) are so never
//! walked. Under function_graph the older traced frames' return addresses are the return trampoline:
//! they get their original addresses back for the walk and are hooked again after it
//! ([`crate::unwind::restore`] / [`crate::unwind::reconcile`]).
//!
//! Invariant: a record's [`KIND_STACK_MORE`] slots are written before its [`KIND_STACK`]
//! slot, in one handler run (no other event of the thread between them), with the head's
//! timestamp: a reader that finds the head committed finds them committed too, and pairs
//! them by time and index ([`frames_of`]).

use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::buffer::{KIND_STACK, KIND_STACK_MORE, SlotEvent};
use crate::handler::{self, ThreadState};

/// Frames in one record (`FTRACE_STACK_ENTRIES`, the kernel's `kernel_stack` format).
pub const MAX_FRAMES: usize = ftrace_core::entry::FTRACE_STACK_ENTRIES;

/// Frames collected by the walk's callback.
struct Walk {
    frames: [u64; MAX_FRAMES],
    n: usize,
    /// The frames to pass over first.
    skip: Skip,
}

/// The frames a walk passes over before it collects.
enum Skip {
    /// This many (the thunk's own frame).
    Frames(usize),
    /// Those in the agent's own text (a walk started inside the agent).
    OwnFrames,
}

const URC_NO_REASON: c_int = 0;
const URC_END_OF_STACK: c_int = 5;

type GetIp = unsafe extern "C" fn(*mut c_void) -> usize;
type TraceFn = unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int;

static GET_IP: AtomicUsize = AtomicUsize::new(0);
static BACKTRACE: AtomicUsize = AtomicUsize::new(0);
/// The agent's own text, `[lo, hi)` (`hi` 0: not known yet), set by [`prepare_caller_walk`].
static OWN_TEXT: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

/// Readies [`walk`] and [`record_caller`] outside the event path (the control thread, when a
/// `stacktrace` trigger or command or the `func_stack_trace` or `stacktrace` option is set):
/// resolves the unwinder (which loads libgcc_s into a program without it) and finds the
/// agent's own text, so the walk neither loads nor allocates.
pub(crate) fn prepare_caller_walk() {
    real(c"_Unwind_GetIP", &GET_IP);
    real(c"_Unwind_Backtrace", &BACKTRACE);
    if OWN_TEXT[1].load(Ordering::Relaxed) != 0 {
        return;
    }
    let me = prepare_caller_walk as *const () as u64;
    if let Some((lo, hi)) = crate::elf::loaded_objects()
        .into_iter()
        .find(|o| o.is_exec(me))
        .map(|o| o.text_span())
    {
        OWN_TEXT[0].store(lo, Ordering::Relaxed);
        OWN_TEXT[1].store(hi, Ordering::Relaxed);
    }
}

/// libgcc_s's `name`, cached in `cache`; 0 when there is no libgcc_s to load
/// ([`crate::interpose::find`]).
fn real(name: &core::ffi::CStr, cache: &AtomicUsize) -> usize {
    crate::interpose::find(name, cache)
}

/// The walk's callback: one frame (its instruction pointer) per call.
unsafe extern "C" fn one_frame(ctx: *mut c_void, arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the `Walk` [`walk`] passes; `GET_IP` was resolved before the walk.
    let w = unsafe { &mut *arg.cast::<Walk>() };
    if let Skip::Frames(n @ 1..) = w.skip {
        w.skip = Skip::Frames(n - 1);
        return URC_NO_REASON;
    }
    // SAFETY: resolved (non-zero) before the walk started; `ctx` is the unwinder's.
    let ip = unsafe {
        let get_ip: GetIp = core::mem::transmute(GET_IP.load(Ordering::Relaxed));
        get_ip(ctx)
    } as u64;
    if let Skip::OwnFrames = w.skip {
        let (lo, hi) = (
            OWN_TEXT[0].load(Ordering::Relaxed),
            OWN_TEXT[1].load(Ordering::Relaxed),
        );
        if (lo..hi).contains(&ip) {
            return URC_NO_REASON;
        }
        w.skip = Skip::Frames(0);
    }
    if ip == 0 || w.n == MAX_FRAMES {
        return URC_END_OF_STACK;
    }
    w.frames[w.n] = ip;
    w.n += 1;
    URC_NO_REASON
}

unsafe extern "C" {
    /// Calls `backtrace(trace, arg)` with a frame of its own whose CFI says: the canonical
    /// frame address is `cfa`, the return address is at `cfa - 8`, `rbp` is `rbp`. Returns
    /// what `backtrace` returned.
    fn ftrace_agent_walk_from(
        cfa: u64,
        rbp: u64,
        trace: TraceFn,
        arg: *mut c_void,
        backtrace: usize,
    ) -> c_int;
}

core::arch::global_asm!(
    r#"
    .text
    .p2align 4
    .globl ftrace_agent_walk_from
    .hidden ftrace_agent_walk_from
    .type ftrace_agent_walk_from,@function
ftrace_agent_walk_from:
    .cfi_startproc
    pushq %r12
    .cfi_adjust_cfa_offset 8
    .cfi_offset %r12, -16
    pushq %rbp
    .cfi_adjust_cfa_offset 8
    .cfi_offset %rbp, -24
    subq $8, %rsp
    .cfi_adjust_cfa_offset 8
    movq %rdi, %r12
    movq %rsi, %rbp
    // From here the unwinder sees the traced function at its entry: CFA in r12, the return
    // address below it, rbp (live) the caller's.
    .cfi_def_cfa %r12, 0
    .cfi_offset %rip, -8
    .cfi_same_value %rbp
    .cfi_undefined %r12
    movq %rdx, %rdi
    movq %rcx, %rsi
    call *%r8
    addq $8, %rsp
    popq %rbp
    popq %r12
    ret
    .cfi_endproc
    .size ftrace_agent_walk_from, .-ftrace_agent_walk_from
"#,
    options(att_syntax)
);

/// Walks the stack of the traced call whose return-address slot is `slot` (entered at `ret`,
/// the address after its call site): `ret` first, then the return addresses the unwinder
/// finds from the slot on, at most [`MAX_FRAMES`]. Called by the entry handler with the
/// thread's guard held.
pub(crate) fn walk(st: &mut ThreadState, ret: u64, slot: *mut u64) -> ([u64; MAX_FRAMES], usize) {
    let mut w = Walk {
        frames: [0; MAX_FRAMES],
        n: 1,
        skip: Skip::Frames(1),
    };
    w.frames[0] = ret;
    let (get_ip, bt) = (
        real(c"_Unwind_GetIP", &GET_IP),
        real(c"_Unwind_Backtrace", &BACKTRACE),
    );
    if get_ip == 0 || bt == 0 {
        // No unwinder in reach: the call and its caller.
        // SAFETY: the live return-address slot of the traced call.
        w.frames[1] = unsafe { *slot };
        return (w.frames, 2);
    }
    let graph = matches!(st.state, 1 | crate::grow::GROW) && st.depth > 0;
    if graph {
        crate::unwind::restore(st, slot as u64);
        st.guard = 1;
    }
    // SAFETY: `slot` is the traced call's return-address slot, and the word pushed by the
    // entry trampoline (or the mcount prologue) below it holds the caller's rbp
    // ([`caller_rbp`]); `bt` is libgcc_s's `_Unwind_Backtrace`; `w` outlives the walk.
    unsafe {
        ftrace_agent_walk_from(
            slot as u64 + 8,
            caller_rbp(slot, ret),
            one_frame,
            (&mut w as *mut Walk).cast(),
            bt,
        )
    };
    if graph {
        crate::unwind::reconcile(st, slot as u64);
    }
    (w.frames, w.n)
}

/// The caller's `rbp` at the traced call: the entry trampoline pushes it two words below
/// the return address into the traced function (which sits right below the slot); an mcount
/// call comes after the function's own `push rbp`, right below the slot.
///
/// # Safety
/// `slot` is the live return-address slot of a call the entry handler runs for.
unsafe fn caller_rbp(slot: *mut u64, ret: u64) -> u64 {
    // SAFETY: the words below the slot are the trampoline's (or the prologue's) frame.
    unsafe {
        if *slot.sub(1) == ret {
            *slot.sub(3)
        } else {
            *slot.sub(1)
        }
    }
}

/// Records the stack of the traced call (`ret`, `slot`: as for [`walk`]) into the thread's
/// buffer as one record ([`write`]).
pub(crate) fn record(st: &mut ThreadState, ret: u64, slot: *mut u64) {
    let (frames, n) = walk(st, ret, slot);
    write(st, &frames[..n]);
}

/// Records the stack of the agent's caller (a program event's `stacktrace` trigger: the
/// function that holds the event's call site first, then its callers) into the thread's
/// buffer as one record ([`write`]). The walk starts here, in the unwinder's own frame, and
/// passes over the agent's frames (all of which have CFI); under function_graph the traced
/// frames get their original return addresses for the walk, as in [`walk`]. Nothing is
/// recorded when the program has no unwinder in reach. Called with the thread's guard held,
/// after [`prepare_caller_walk`] (else it prepares here, loading and allocating once).
pub(crate) fn record_caller(st: &mut ThreadState) {
    if OWN_TEXT[1].load(Ordering::Relaxed) == 0 {
        prepare_caller_walk();
    }
    let (get_ip, bt) = (
        real(c"_Unwind_GetIP", &GET_IP),
        real(c"_Unwind_Backtrace", &BACKTRACE),
    );
    if get_ip == 0 || bt == 0 {
        return;
    }
    let mut w = Walk {
        frames: [0; MAX_FRAMES],
        n: 0,
        skip: Skip::OwnFrames,
    };
    let sp: u64;
    // SAFETY: reads the stack pointer; no memory is touched.
    unsafe { core::arch::asm!("mov {}, rsp", out(reg) sp, options(nomem, nostack)) };
    let graph = matches!(st.state, 1 | crate::grow::GROW) && st.depth > 0;
    if graph {
        // Every traced frame of the program lies above this frame's stack pointer.
        crate::unwind::restore(st, sp);
        st.guard = 1;
    }
    // SAFETY: `bt` is libgcc_s's `_Unwind_Backtrace`; `w` outlives the walk.
    unsafe {
        let backtrace: unsafe extern "C" fn(TraceFn, *mut c_void) -> c_int =
            core::mem::transmute(bt);
        backtrace(one_frame, (&mut w as *mut Walk).cast());
    }
    if graph {
        crate::unwind::reconcile(st, sp);
    }
    if w.n > 0 {
        write(st, &w.frames[..w.n]);
    }
}

/// Writes `frames` (at least one) into the thread's buffer as one record: the
/// [`KIND_STACK_MORE`] slots (two frames each, `depth` their index from 1), then the
/// [`KIND_STACK`] head (the first two frames, `depth` the frame count).
fn write(st: &mut ThreadState, frames: &[u64]) {
    let n = frames.len();
    let at = |k: usize| frames.get(k).copied().unwrap_or(0);
    let ts = handler::now();
    // SAFETY: the caller registered the thread (state 1 or UNWOUND).
    let cpu = unsafe { *st.cpu };
    let more = n.saturating_sub(1) / 2;
    for k in 1..=more {
        // SAFETY: as above.
        unsafe {
            st.writer
                .write(ts, at(2 * k), at(2 * k + 1), KIND_STACK_MORE, k as u32, cpu)
        };
    }
    // SAFETY: as above.
    unsafe { st.writer.write(ts, at(0), at(1), KIND_STACK, n as u32, cpu) };
}

/// The frames of the record whose head is `head` ([`KIND_STACK`]), given `before(k)`: the
/// slot written `k` slots before the head. Only frames whose slots pair with the head (same
/// time, kind and index) are given: a record whose slots were lost is cut where they were.
pub fn frames_of(head: &SlotEvent, before: &dyn Fn(usize) -> Option<SlotEvent>) -> Vec<u64> {
    let n = (crate::buffer::depth(head) as usize).min(MAX_FRAMES);
    let mut out = vec![head.ip, head.arg];
    out.truncate(n);
    let more = n.saturating_sub(1) / 2;
    for k in 1..=more {
        // The slot of index k was written `more - k + 1` slots before the head.
        match before(more - k + 1) {
            Some(s)
                if s.kind() == KIND_STACK_MORE
                    && s.ts == head.ts
                    && crate::buffer::depth(&s) == k as u32 =>
            {
                out.push(s.ip);
                if out.len() < n {
                    out.push(s.arg);
                }
            }
            _ => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(ts: u64, ip: u64, arg: u64, kind: u32, depth: u32) -> SlotEvent {
        SlotEvent {
            ts,
            ip,
            arg,
            kind: kind | depth << 8,
            cpu: 0,
        }
    }

    #[test]
    fn frames_pair_with_their_head() {
        // Seven frames: the head's two, then 3 slots of two (the last one's second word 0).
        let ring = [
            slot(9, 0xa, 0xb, KIND_STACK_MORE, 1),
            slot(9, 0xc, 0xd, KIND_STACK_MORE, 2),
            slot(9, 0xe, 0, KIND_STACK_MORE, 3),
            slot(9, 0x1, 0x2, KIND_STACK, 7),
        ];
        let before = |k: usize| 3usize.checked_sub(k).map(|i| ring[i]);
        assert_eq!(
            frames_of(&ring[3], &before),
            [0x1, 0x2, 0xa, 0xb, 0xc, 0xd, 0xe]
        );
        // One or two frames: the head alone.
        let one = slot(5, 0x1, 0, KIND_STACK, 1);
        assert_eq!(frames_of(&one, &|_| None), [0x1]);
        let two = slot(5, 0x1, 0x2, KIND_STACK, 2);
        assert_eq!(frames_of(&two, &|_| None), [0x1, 0x2]);
    }

    #[test]
    fn a_lost_or_foreign_slot_cuts_the_record() {
        // The slot just before the head is another record's (other time): only the head's
        // frames, not someone else's.
        let ring = [
            slot(8, 0xa, 0xb, KIND_STACK_MORE, 1),
            slot(9, 0x1, 0x2, KIND_STACK, 4),
        ];
        let before = |k: usize| 1usize.checked_sub(k).map(|i| ring[i]);
        assert_eq!(frames_of(&ring[1], &before), [0x1, 0x2]);
        // Index 1 lost (overwritten, or dropped when the ring was full): cut at it.
        let ring = [
            slot(9, 0xc, 0xd, KIND_STACK_MORE, 2),
            slot(9, 0x1, 0x2, KIND_STACK, 6),
        ];
        let before = |k: usize| match k {
            1 => Some(ring[0]),
            _ => None,
        };
        assert_eq!(frames_of(&ring[1], &before), [0x1, 0x2]);
    }
}
