//! Calling the function the agent interposes: the next definition of a name after the
//! agent's, looked up once.
//!
//! Preloaded, the agent defines some of the program's library functions (the unwinder's entry
//! points, [`crate::unwind`]; the signal-mask calls, [`crate::sigmask`]); each does its part and
//! then calls the library's own definition, which [`next`] finds.

use core::sync::atomic::{AtomicUsize, Ordering};

/// The next definition of `name` after the agent's (libc's, libgcc_s's, libstdc++'s), cached
/// in `cache`; aborts with a message naming it when there is none (the program called a
/// function no library of it defines).
pub fn next(name: &core::ffi::CStr, cache: &AtomicUsize) -> usize {
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
    if p == 0 {
        missing(name);
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
