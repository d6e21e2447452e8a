//! Keeping the agent's two signals deliverable on every thread of the program: `SIGTRAP` (the
//! breakpoints of a patch batch) and the stop-the-world signal ([`crate::text::stop_signal`]).
//!
//! A thread that reaches a site while a batch rewrites it traps on the batch's `int3`, and the
//! agent's handler emulates the new instruction. But the kernel delivers that `SIGTRAP` even to
//! a thread that blocks it, by unblocking it and resetting its action to the default first:
//! the process dies of it. A program that blocks every signal for a moment and calls a traced
//! function meanwhile died so whenever a batch was in flight (dash blocks every signal around
//! each fork, `sigblockall`, and its fork was traced: ftracetest's shell died of SIGTRAP now
//! and then). A thread that blocks the stop signal cannot be parked, and a batch of multi-byte
//! sites waits for it in vain.
//!
//! So, while the agent's trap handler is installed, the calls that set a mask leave these two
//! signals out of it: the agent defines `sigprocmask`, `pthread_sigmask` and `sigaction` (its
//! `sa_mask`), each removing them from the set before calling libc's (attached to a running
//! process, the agent points the objects' GOT entries at them, [`crate::got`]). And the
//! program's `sigaction(SIGTRAP)` or `signal(SIGTRAP)` does not replace the agent's handler:
//! it sets the action the agent's handler hands the traps that are not its own to
//! ([`crate::patch::program_trap_action`]), and reads back the program's own. A program image
//! that starts with them blocked (a mask survives `exec`) has them unblocked by
//! [`unblock_on_this_thread`] when the agent starts.
//!
//! What the program sees differently: its mask never shows the two signals blocked, so a
//! `SIGTRAP` another process sends it arrives at once. Limits: masks set without these calls
//! (a raw `rt_sigprocmask`, glibc's own inside `posix_spawn` and `pthread_create`, the mask
//! `sigsuspend`, `ppoll` or `pselect` hold for the length of the call) are left as they are,
//! and so is a `SIGTRAP` action set by `sigset` or `sysv_signal`; the program's `SIGTRAP`
//! handler runs inside the agent's (with the agent's flags and mask).

use core::ffi::c_int;
use core::sync::atomic::AtomicUsize;

use crate::interpose::next;

/// The signals no mask of the program holds while the agent's trap handler is installed.
pub fn kept() -> [c_int; 2] {
    [libc::SIGTRAP, crate::text::stop_signal()]
}

/// `set` without the [`kept`] signals, or `set` itself when nothing is to be filtered.
///
/// # Safety
/// `set` is null or a valid sigset_t.
unsafe fn filtered(set: *const libc::sigset_t) -> Option<libc::sigset_t> {
    if !crate::patch::trap_handler_installed() {
        return None;
    }
    // SAFETY: the caller passes a valid set when it is not null.
    let mut copy = unsafe { set.as_ref() }.copied()?;
    for sig in kept() {
        // SAFETY: an initialised set and a valid signal number.
        unsafe { libc::sigdelset(&mut copy, sig) };
    }
    Some(copy)
}

type MaskFn = unsafe extern "C" fn(c_int, *const libc::sigset_t, *mut libc::sigset_t) -> c_int;
type ActionFn = unsafe extern "C" fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int;

static SIGPROCMASK: AtomicUsize = AtomicUsize::new(0);
static PTHREAD_SIGMASK: AtomicUsize = AtomicUsize::new(0);
static SIGACTION: AtomicUsize = AtomicUsize::new(0);
static SIGNAL: AtomicUsize = AtomicUsize::new(0);

/// Looks libc's definitions up now, so that no later call (one from a signal handler, say)
/// runs the dynamic linker's lookup.
pub fn resolve_now() {
    next(c"sigprocmask", &SIGPROCMASK);
    next(c"pthread_sigmask", &PTHREAD_SIGMASK);
    next(c"sigaction", &SIGACTION);
    next(c"signal", &SIGNAL);
}

/// libc's `sigaction`, for the agent's own handlers.
///
/// # Safety
/// As `sigaction(2)`: `act` and `old` are null or valid.
pub unsafe fn real_sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    // SAFETY: `next` returns libc's `sigaction`, of this type.
    let real: ActionFn = unsafe { core::mem::transmute(next(c"sigaction", &SIGACTION)) };
    // SAFETY: the caller's pointers, as `sigaction` takes them.
    unsafe { real(sig, act, old) }
}

/// Unblocks the [`kept`] signals on the calling thread.
pub fn unblock_on_this_thread() {
    // SAFETY: an initialised set; `pthread_sigmask` changes the calling thread's mask only.
    unsafe {
        let mut set: libc::sigset_t = core::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in kept() {
            libc::sigaddset(&mut set, sig);
        }
        let real: MaskFn = core::mem::transmute(next(c"pthread_sigmask", &PTHREAD_SIGMASK));
        real(libc::SIG_UNBLOCK, &set, core::ptr::null_mut());
    }
}

/// Calls libc's mask function `name` (cached in `cache`) with `set` filtered: what both mask
/// interposers do.
///
/// # Safety
/// As the mask functions: `set` and `old` are null or valid.
unsafe fn call_mask(
    name: &core::ffi::CStr,
    cache: &AtomicUsize,
    how: c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> c_int {
    // SAFETY: `next` returns libc's `name`, a mask function of this type.
    let real: MaskFn = unsafe { core::mem::transmute(next(name, cache)) };
    // SAFETY: the caller's pointers.
    match unsafe { filtered(set) } {
        // SAFETY: a valid set of ours, the caller's `old`.
        Some(copy) => unsafe { real(how, &copy, old) },
        // SAFETY: the caller's pointers, as the function takes them.
        None => unsafe { real(how, set, old) },
    }
}

/// `sigprocmask(2)`, interposed: the [`kept`] signals are never blocked.
///
/// # Safety
/// As `sigprocmask(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigprocmask(
    how: c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> c_int {
    // SAFETY: the caller's pointers.
    unsafe { call_mask(c"sigprocmask", &SIGPROCMASK, how, set, old) }
}

/// `pthread_sigmask(3)`, interposed: the [`kept`] signals are never blocked.
///
/// # Safety
/// As `pthread_sigmask(3)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_sigmask(
    how: c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> c_int {
    // SAFETY: the caller's pointers.
    unsafe { call_mask(c"pthread_sigmask", &PTHREAD_SIGMASK, how, set, old) }
}

/// `sigaction(2)`, interposed: a handler's mask never blocks the [`kept`] signals, and
/// `SIGTRAP`'s action is the program's own behind the agent's handler.
///
/// # Safety
/// As `sigaction(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    if sig == libc::SIGTRAP && crate::patch::trap_handler_installed() {
        // SAFETY: the caller's pointers, as `sigaction` takes them.
        return unsafe { crate::patch::program_trap_action(act, old) };
    }
    // SAFETY: the caller passes a valid `act` when it is not null.
    let copy = unsafe { act.as_ref() }.map(|a| {
        let mut a = *a;
        // SAFETY: `a.sa_mask` is the caller's initialised set.
        if let Some(mask) = unsafe { filtered(&a.sa_mask) } {
            a.sa_mask = mask;
        }
        a
    });
    let act = copy.as_ref().map_or(core::ptr::null(), |a| a as *const _);
    // SAFETY: a valid `act` of ours or null, the caller's `old`.
    unsafe { real_sigaction(sig, act, old) }
}

/// `signal(3)`, interposed: `SIGTRAP`'s action is the program's own behind the agent's
/// handler (as glibc's `signal` sets it: the signal itself masked, `SA_RESTART`); every other
/// signal is libc's.
///
/// # Safety
/// As `signal(3)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    if sig == libc::SIGTRAP && crate::patch::trap_handler_installed() {
        // SAFETY: a zeroed sigaction is valid; its mask is initialised below.
        let mut act: libc::sigaction = unsafe { core::mem::zeroed() };
        act.sa_sigaction = handler;
        act.sa_flags = libc::SA_RESTART;
        // SAFETY: an initialised set, a valid signal number.
        unsafe {
            libc::sigemptyset(&mut act.sa_mask);
            libc::sigaddset(&mut act.sa_mask, sig);
        }
        // SAFETY: as above.
        let mut old: libc::sigaction = unsafe { core::mem::zeroed() };
        // SAFETY: valid pointers of ours.
        unsafe { crate::patch::program_trap_action(&act, &mut old) };
        return old.sa_sigaction;
    }
    type SignalFn = unsafe extern "C" fn(c_int, libc::sighandler_t) -> libc::sighandler_t;
    // SAFETY: `next` returns libc's `signal`, of this type; the caller's arguments.
    unsafe {
        let real: SignalFn = core::mem::transmute(next(c"signal", &SIGNAL));
        real(sig, handler)
    }
}
