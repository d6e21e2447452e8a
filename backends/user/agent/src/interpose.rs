//! Calling the function the agent interposes: the next definition of a name after the
//! agent's, looked up once.
//!
//! Preloaded, the agent defines some of the program's library functions (the unwinder's entry
//! points, [`crate::unwind`]; the signal-mask calls, [`crate::sigmask`]); each does its part and
//! then calls the library's own definition, which [`next`] finds.
//!
//! Invariant: a name is looked up outside the event path (at start, or from the control thread
//! when an option that needs it is set), or on a path that has already left it (an unwinder
//! running): looking up may load libgcc_s.

use core::sync::atomic::{AtomicUsize, Ordering};

/// The next definition of `name` after the agent's (libc's, libgcc_s's, libstdc++'s), cached
/// in `cache`; aborts with a message naming it when there is none (the program called a
/// function no library of it defines).
pub fn next(name: &core::ffi::CStr, cache: &AtomicUsize) -> usize {
    match find(name, cache) {
        0 => missing(name),
        p => p,
    }
}

/// [`next`], or 0 when no library defines `name`. The unwinder's functions are found even in a
/// program that does not link libgcc_s (a C program): the agent does not link it either
/// ([`crate::unwinder`]), and loads it the first time one of them is looked for, as glibc does
/// for `pthread_cancel`.
pub fn find(name: &core::ffi::CStr, cache: &AtomicUsize) -> usize {
    let p = cache.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    // SAFETY: a NUL-terminated name; RTLD_NEXT is valid in a shared object.
    let mut p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
    if p == 0 {
        // Attached (`dlopen`ed, not preloaded: [`crate::got`]), the agent's own dependencies
        // lack libstdc++: the program's global scope has it, and not the agent.
        // SAFETY: as above.
        let d = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) } as usize;
        if d != 0 && !crate::in_own_text(d as u64) {
            p = d;
        }
    }
    if p == 0 && name.to_bytes().starts_with(b"_Unwind_") {
        // libc's `dlopen`, not the agent's (which scans and patches the new objects under
        // the agent's lock, which a caller on the control thread holds).
        // SAFETY: NUL-terminated names; `real` is libc's dlopen; the handle is checked.
        unsafe {
            let real = libc::dlsym(libc::RTLD_NEXT, c"dlopen".as_ptr());
            if !real.is_null() {
                let real: crate::DlopenFn = core::mem::transmute(real);
                let h = real(c"libgcc_s.so.1".as_ptr(), libc::RTLD_NOW);
                if !h.is_null() {
                    p = libc::dlsym(h, name.as_ptr()) as usize;
                }
            }
        }
    }
    cache.store(p, Ordering::Relaxed);
    p
}

#[cold]
fn missing(name: &core::ffi::CStr) -> ! {
    let parts: [&[u8]; 3] = [
        b"ftrace-agent: ",
        name.to_bytes(),
        b" is missing from the program's libraries\n",
    ];
    // SAFETY: writing our own buffers to stderr, then aborting.
    unsafe {
        for p in parts {
            libc::write(2, p.as_ptr().cast(), p.len());
        }
        libc::abort()
    }
}
