//! Unwinding through hooked frames: C++ exceptions (Itanium ABI), Rust panics that unwind,
//! `pthread_cancel`/`pthread_exit`, and backtraces, under function_graph.
//!
//! function_graph replaces each traced frame's return address with a return trampoline, which
//! has no unwind information: an unwinder walking such a stack stops there (a C++ exception
//! ends in `std::terminate`). The agent interposes the unwinder's entry points (it is
//! preloaded, so the program's calls into libgcc_s reach these first; attached to a running
//! process, it rewrites the objects' GOT entries instead, [`crate::got`]):
//! `_Unwind_RaiseException`, `_Unwind_Resume`, `_Unwind_Resume_or_Rethrow`,
//! `_Unwind_ForcedUnwind`, `_Unwind_Backtrace` and `_Unwind_SetIP`, and glibc's
//! `backtrace(3)`. Before the real one runs, every live frame of the thread's shadow stack
//! gets its original return address back ([`restore`]): the unwinder sees the stack exactly
//! as untraced. Frames the unwinder then skips are closed
//! in the trace (their exits recorded), and the survivors are hooked again ([`reconcile`]):
//!
//! - at each landing pad (a cleanup running destructors / `Drop`, or the catch), C++ and Rust
//!   alike: the personality routine calls `_Unwind_SetIP` (interposed, through the PLT of
//!   libstdc++ or of the program's statically linked libstd) just before the unwinder jumps
//!   there; every frame whose return slot lies below that frame's stack pointer is closed
//!   then, so the exits of the skipped frames are stamped at the catch;
//! - at the catch, for C++, again: `__cxa_begin_catch` (interposed; it learns the catching
//!   frame's stack pointer from its own return-address slot) closes every frame whose return
//!   slot lies below it (a personality that reached `_Unwind_SetIP` without the PLT);
//! - otherwise at the thread's next traced call (a personality routine that is not
//!   interposable, e.g. libgcc_s's own for C cleanups): the stack-pointer rule, a frame whose
//!   return slot is at or below the new call's is dead; the exits of the skipped frames are
//!   then stamped at that call;
//! - `_Unwind_Backtrace` and `backtrace(3)` hook every frame again as soon as the walk is
//!   done (nothing died).
//!
//! Invariant: the return slots of live frames hold either all the trampoline (state 1) or all
//! their original return addresses (state [`UNWOUND`]), never a mix, and a slot is written
//! only when the shadow stack's order (return slots strictly rising from the innermost frame)
//! and the caller's stack pointer say the frame is live: a dead frame's slot may by now be
//! someone else's stack.

use core::ffi::{c_int, c_void};
use core::sync::atomic::AtomicUsize;

use crate::buffer::KIND_GRAPH_RET;
use crate::handler::{self, ThreadState};
use crate::interpose::next;
use crate::tramp;

/// `ThreadState::state` while the shadow stack's return addresses are restored for an
/// unwinder: the next traced call (or the catch) reconciles first.
pub const UNWOUND: u32 = 3;

/// The calling thread's state when it has a shadow stack to work on.
fn thread() -> Option<&'static mut ThreadState> {
    // SAFETY: this thread's own block.
    let st = unsafe { &mut *handler::current() };
    (matches!(st.state, 1 | UNWOUND | crate::grow::GROW) && st.guard == 0 && !st.shadow.is_null())
        .then_some(st)
}

/// Closes frame `i`: records its exit now (under `tracing_thresh`, if it lasted) and marks it
/// closed (slot 0). A closed frame is never written through again.
pub(crate) fn close(st: &mut ThreadState, i: u64) {
    // SAFETY: `i < depth <= SHADOW_FRAMES`.
    let f = unsafe { &mut *st.shadow.add(i as usize) };
    if f.slot & !1 == 0 {
        return;
    }
    let ts = handler::now();
    if crate::thresh::lasted(f.calltime, ts) {
        // SAFETY: the thread is registered (state 1 or UNWOUND).
        unsafe {
            st.writer
                .write(ts, f.ip, f.calltime, KIND_GRAPH_RET, i as u32, *st.cpu)
        };
    }
    if f.slot & 1 != 0 {
        st.graph_active = st.graph_active.saturating_sub(1);
    }
    f.slot = 0;
}

/// Gives every live frame its original return address back (`sp`: the caller's stack
/// pointer, below every live frame's slot) and closes the frames the shadow stack's order
/// shows dead (left by `longjmp`). The thread is then [`UNWOUND`], with `sp` as its
/// `unwinder_sp`: traced calls below it run inside the unwinder (a backtrace callback) and
/// leave the restored frames alone; the first above it reconciles.
pub fn restore(st: &mut ThreadState, sp: u64) {
    st.guard = 1;
    st.unwinder_sp = sp;
    let mut floor = sp;
    for i in (0..st.depth).rev() {
        // SAFETY: `i < depth`.
        let f = unsafe { *st.shadow.add(i as usize) };
        let slot = f.slot & !1;
        if slot == 0 {
            continue;
        }
        if slot <= floor {
            close(st, i);
            continue;
        }
        floor = slot;
        // SAFETY: a live frame's return-address slot, on this thread's stack.
        unsafe { *(slot as *mut u64) = f.ret };
    }
    if st.depth > 0 {
        st.state = UNWOUND;
    }
    st.guard = 0;
}

/// Closes the innermost frames whose return slots lie below `boundary` (a live stack
/// pointer) and hooks the others again. The thread is then back in state 1.
pub fn reconcile(st: &mut ThreadState, boundary: u64) {
    let guard = st.guard;
    st.guard = 1;
    while st.depth > 0 {
        let i = st.depth - 1;
        // SAFETY: `i < depth`.
        let slot = unsafe { (*st.shadow.add(i as usize)).slot } & !1;
        if slot >= boundary {
            break;
        }
        close(st, i);
        st.depth = i;
    }
    let hook = tramp::return_trampoline();
    for i in 0..st.depth {
        // SAFETY: `i < depth`.
        let f = unsafe { *st.shadow.add(i as usize) };
        let slot = f.slot & !1;
        // SAFETY: a live frame's slot (restored by `restore`, so it holds the original
        // return address); anything else there is not ours to write.
        unsafe {
            if slot != 0 && *(slot as *const u64) == f.ret {
                *(slot as *mut u64) = hook;
            }
        }
    }
    st.state = 1;
    st.guard = guard;
}

/// Restores the thread for an unwinder called with the caller's stack pointer `sp`.
fn before_unwinding(sp: u64) {
    if let Some(st) = thread() {
        restore(st, sp);
    }
}

/// The unwinder came back (no handler, or a walk done): frames below the caller's stack
/// pointer `sp` are closed, the others hooked again.
fn after_unwinding(sp: u64) {
    if let Some(st) = thread() {
        if st.state == UNWOUND {
            reconcile(st, sp);
        }
    }
}

static RAISE: AtomicUsize = AtomicUsize::new(0);
static RESUME: AtomicUsize = AtomicUsize::new(0);
static RESUME_OR_RETHROW: AtomicUsize = AtomicUsize::new(0);
static FORCED: AtomicUsize = AtomicUsize::new(0);
static BACKTRACE: AtomicUsize = AtomicUsize::new(0);
static BEGIN_CATCH: AtomicUsize = AtomicUsize::new(0);
static GLIBC_BACKTRACE: AtomicUsize = AtomicUsize::new(0);

type Raise = unsafe extern "C" fn(*mut c_void) -> c_int;
type Resume = unsafe extern "C" fn(*mut c_void) -> !;
type Forced = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_void) -> c_int;
type Backtrace = unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int;
type BeginCatch = unsafe extern "C" fn(*mut c_void) -> *mut c_void;
type GlibcBacktrace = unsafe extern "C" fn(*mut *mut c_void, c_int) -> c_int;

// The interposed entry points are naked functions (exported like any `no_mangle` item):
// each passes its caller's stack pointer (the address just above its return-address slot)
// as one more argument and jumps to its Rust half, which so knows exactly where the
// unwinder's own frames begin: traced calls below that point run inside the unwinder
// (personality routines, backtrace callbacks), whatever the compiler made of the Rust half
// (a noreturn call may be a jump).
macro_rules! interpose {
    ($(#[$doc:meta])* $name:ident => $imp:ident, $spreg:literal) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// As the real function: the program's unwinder contract.
        #[unsafe(naked)]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name() {
            core::arch::naked_asm!(
                concat!("lea ", $spreg, ", [rsp + 8]"),
                "jmp {imp}",
                imp = sym $imp,
            )
        }
    };
}

interpose!(
    /// Interposes libgcc_s's `_Unwind_RaiseException` (C++ `throw`, Rust `panic!`).
    _Unwind_RaiseException => raise_exception, "rsi"
);
interpose!(
    /// Interposes libgcc_s's `_Unwind_Resume` (the end of a cleanup landing pad).
    _Unwind_Resume => resume, "rsi"
);
interpose!(
    /// Interposes libgcc_s's `_Unwind_Resume_or_Rethrow` (C++ `throw;`).
    _Unwind_Resume_or_Rethrow => resume_or_rethrow, "rsi"
);
interpose!(
    /// Interposes libgcc_s's `_Unwind_ForcedUnwind` (`pthread_exit`, `pthread_cancel`).
    _Unwind_ForcedUnwind => forced_unwind, "rcx"
);
interpose!(
    /// Interposes libgcc_s's `_Unwind_Backtrace` (Rust's `std::backtrace`).
    _Unwind_Backtrace => unwind_backtrace, "rdx"
);
interpose!(
    /// Interposes glibc's `backtrace(3)`, which calls libgcc_s's `_Unwind_Backtrace` through
    /// a pointer of its own, past the interposition above.
    backtrace => glibc_backtrace, "rdx"
);
interpose!(
    /// Interposes libstdc++'s `__cxa_begin_catch` (the start of a C++ `catch` block).
    __cxa_begin_catch => begin_catch, "rsi"
);

/// libgcc_s's `_Unwind_RaiseException` (C++ `throw`, Rust `panic!`), interposed.
unsafe extern "C" fn raise_exception(exc: *mut c_void, sp: u64) -> c_int {
    before_unwinding(sp);
    // SAFETY: the real function of this signature.
    let real: Raise = unsafe { core::mem::transmute(next(c"_Unwind_RaiseException", &RAISE)) };
    // SAFETY: the caller's contract.
    let r = unsafe { real(exc) };
    // Returned: no handler (the caller terminates) or an error: every frame is hooked again.
    after_unwinding(sp);
    r
}

/// libgcc_s's `_Unwind_Resume` (the end of a cleanup landing pad), interposed.
unsafe extern "C" fn resume(exc: *mut c_void, sp: u64) -> ! {
    before_unwinding(sp);
    // SAFETY: the real function of this signature.
    let real: Resume = unsafe { core::mem::transmute(next(c"_Unwind_Resume", &RESUME)) };
    // SAFETY: the caller's contract.
    unsafe { real(exc) }
}

/// libgcc_s's `_Unwind_Resume_or_Rethrow` (C++ `throw;`), interposed.
unsafe extern "C" fn resume_or_rethrow(exc: *mut c_void, sp: u64) -> c_int {
    before_unwinding(sp);
    // SAFETY: the real function of this signature.
    let real: Raise =
        unsafe { core::mem::transmute(next(c"_Unwind_Resume_or_Rethrow", &RESUME_OR_RETHROW)) };
    // SAFETY: the caller's contract.
    let r = unsafe { real(exc) };
    after_unwinding(sp);
    r
}

/// libgcc_s's `_Unwind_ForcedUnwind` (`pthread_exit`, `pthread_cancel`), interposed.
unsafe extern "C" fn forced_unwind(
    exc: *mut c_void,
    stop: *mut c_void,
    arg: *mut c_void,
    sp: u64,
) -> c_int {
    before_unwinding(sp);
    // SAFETY: the real function of this signature.
    let real: Forced = unsafe { core::mem::transmute(next(c"_Unwind_ForcedUnwind", &FORCED)) };
    // SAFETY: the caller's contract.
    let r = unsafe { real(exc, stop, arg) };
    after_unwinding(sp);
    r
}

/// libgcc_s's `_Unwind_Backtrace` (Rust's `std::backtrace`, the panic message's backtrace),
/// interposed: the walk sees the real return addresses; every frame is hooked again after it.
unsafe extern "C" fn unwind_backtrace(trace: *mut c_void, arg: *mut c_void, sp: u64) -> c_int {
    before_unwinding(sp);
    // SAFETY: the real function of this signature.
    let real: Backtrace = unsafe { core::mem::transmute(next(c"_Unwind_Backtrace", &BACKTRACE)) };
    // SAFETY: the caller's contract.
    let r = unsafe { real(trace, arg) };
    after_unwinding(sp);
    r
}

/// glibc's `backtrace(3)`, interposed: as [`unwind_backtrace`].
unsafe extern "C" fn glibc_backtrace(buf: *mut *mut c_void, size: c_int, sp: u64) -> c_int {
    before_unwinding(sp);
    // SAFETY: the real function of this signature.
    let real: GlibcBacktrace =
        unsafe { core::mem::transmute(next(c"backtrace", &GLIBC_BACKTRACE)) };
    // The walk starts in this function: its frame is dropped from the answer, which is then
    // the untraced program's (walked one frame deeper into a buffer of our own, so that a
    // full answer is full; past 255 frames the deepest is lost instead).
    let mut own = [core::ptr::null_mut::<c_void>(); 256];
    let r = if size >= 0 && (size as usize) < own.len() {
        // SAFETY: `own` holds `size + 1` entries.
        let n = unsafe { real(own.as_mut_ptr(), size + 1) };
        let n = (n.max(1) - 1) as usize;
        // SAFETY: `buf` holds `size >= n` entries (the caller's contract).
        unsafe { core::ptr::copy_nonoverlapping(own.as_ptr().add(1), buf, n) };
        n as c_int
    } else {
        // SAFETY: the caller's contract.
        let n = unsafe { real(buf, size) };
        if n > 0 {
            // SAFETY: `n` entries of `buf` were written.
            unsafe { core::ptr::copy(buf.add(1), buf, n as usize - 1) };
        }
        (n - 1).max(0)
    };
    after_unwinding(sp);
    r
}

static SET_IP: AtomicUsize = AtomicUsize::new(0);
static GET_CFA: AtomicUsize = AtomicUsize::new(0);

type SetIp = unsafe extern "C" fn(*mut c_void, usize);
type GetCfa = unsafe extern "C" fn(*mut c_void) -> usize;

/// Interposes libgcc_s's `_Unwind_SetIP`: a personality routine (libstdc++'s
/// `__gxx_personality_v0`, Rust's `rust_eh_personality`) calls it in the cleanup phase for
/// each frame where it installs a landing pad (a cleanup or the catch), just before the
/// unwinder jumps there. `_Unwind_GetCFA` on the context it is given answers libgcc's
/// `context->cfa`: the canonical frame address of the frame unwound last (the callee), which
/// is the landing pad frame's own stack pointer at its call (measured: the value equals the
/// callee's return slot + 8, for Rust and for C++). Every frame of the shadow stack whose
/// return slot lies below it is dead and is closed now, before the landing pad runs; the
/// others are hooked again (`landing_pad`).
///
/// # Safety
/// As the real function: `context` is the unwinder's context passed to the personality.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn _Unwind_SetIP(context: *mut c_void, ip: usize) {
    if let Some(st) = thread() {
        if st.state == UNWOUND {
            // SAFETY: the real function of this signature, on the caller's context.
            let cfa = unsafe {
                let get_cfa: GetCfa = core::mem::transmute(next(c"_Unwind_GetCFA", &GET_CFA));
                get_cfa(context)
            };
            landing_pad(st, cfa as u64);
        }
    }
    // SAFETY: the real function of this signature.
    let real: SetIp = unsafe { core::mem::transmute(next(c"_Unwind_SetIP", &SET_IP)) };
    // SAFETY: the caller's contract.
    unsafe { real(context, ip) }
}

/// The unwinder is about to run a landing pad in the frame whose stack pointer (at the call
/// the unwinder came through) is `sp`: the frames it called are closed (their return slots
/// lie below `sp`, as for [`begin_catch`]), the others hooked again. Nothing is done
/// while a traced frame of the unwinder itself is live (its return slot below the
/// unwinder's stack pointer, e.g. a traced personality routine): popping the shadow stack
/// down to the landing pad's frame would close it too; the next traced call above the
/// unwinder (or `__cxa_begin_catch`) reconciles instead.
fn landing_pad(st: &mut ThreadState, sp: u64) {
    if sp < st.unwinder_sp {
        return;
    }
    for i in (0..st.depth).rev() {
        // SAFETY: `i < depth`.
        let innermost = unsafe { (*st.shadow.add(i as usize)).slot } & !1;
        if innermost != 0 {
            if innermost < st.unwinder_sp {
                return;
            }
            break;
        }
    }
    reconcile(st, sp);
}

/// The catch of a C++ exception in the frame whose stack pointer is `sp`: the frames below it
/// are closed now, the others hooked again; then libstdc++'s `__cxa_begin_catch`.
unsafe extern "C" fn begin_catch(exc: *mut c_void, sp: u64) -> *mut c_void {
    if let Some(st) = thread() {
        if st.state == UNWOUND {
            reconcile(st, sp);
        }
    }
    // SAFETY: the real function of this signature.
    let real: BeginCatch =
        unsafe { core::mem::transmute(next(c"__cxa_begin_catch", &BEGIN_CATCH)) };
    // SAFETY: the caller's contract.
    unsafe { real(exc) }
}
