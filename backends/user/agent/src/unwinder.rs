//! The unwinder's functions the Rust runtime calls, defined here and forwarded to libgcc_s,
//! so that neither the agent nor the `ftrace` tool (which links this crate) needs libgcc_s
//! loaded to start.
//!
//! Rust's standard library refers to libgcc_s's unwinder: the six entry points the agent
//! interposes anyway ([`crate::unwind`]) and the eight below, which only a panic's personality
//! routine and a backtrace call. Each would make libgcc_s a dependency of the agent, loaded
//! into every traced program, and of the tool: its constructor probes the CPU's features with
//! `cpuid`, which a virtual machine traps (6-7 us each here): 0.1 ms of every process start
//! (`LD_PRELOAD=libgcc_s.so.1` takes a C program's run from 0.99 to 1.10 ms). Defined here
//! (hidden: the program's own calls still reach its libgcc_s, never these), they leave the
//! linker no reason to record it (`--as-needed`); each looks up libgcc_s's definition the
//! first time it runs ([`crate::interpose::find`], which loads libgcc_s when no object has it
//! yet). They run only while an unwinder runs, which has found libgcc_s already.
//!
//! Invariant: every unwinder function the agent or the tool refers to is one of these or an
//! interposed entry point; none comes from libgcc_s at link time (a test reads the dynamic
//! section of both).

use core::ffi::{c_int, c_void};
use core::sync::atomic::AtomicUsize;

use crate::interpose::next;

/// Defines each `$name` as a hidden symbol jumping to `$fwd`, a Rust function of the same
/// signature that calls libgcc_s's `$name`.
macro_rules! forward {
    ($($name:ident => $fwd:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)?;)*) => {
        $(
            unsafe extern "C" fn $fwd($($arg: $ty),*) $(-> $ret)? {
                static REAL: AtomicUsize = AtomicUsize::new(0);
                const NAME: &core::ffi::CStr = match core::ffi::CStr::from_bytes_with_nul(
                    concat!(stringify!($name), "\0").as_bytes(),
                ) {
                    Ok(n) => n,
                    Err(_) => panic!("a symbol name holds no NUL"),
                };
                type Real = unsafe extern "C" fn($($ty),*) $(-> $ret)?;
                // SAFETY: libgcc_s's definition of the name, of this type (its ABI).
                let real: Real = unsafe { core::mem::transmute(next(NAME, &REAL)) };
                // SAFETY: the caller's arguments, as the unwinder takes them.
                unsafe { real($($arg),*) }
            }
            core::arch::global_asm!(
                concat!(".globl ", stringify!($name)),
                concat!(".hidden ", stringify!($name)),
                concat!(".type ", stringify!($name), ",@function"),
                concat!(stringify!($name), ":"),
                "jmp {fwd}",
                concat!(".size ", stringify!($name), ", .-", stringify!($name)),
                fwd = sym $fwd,
            );
        )*
    };
}

forward! {
    _Unwind_GetIP => get_ip(context: *mut c_void) -> usize;
    _Unwind_GetIPInfo => get_ip_info(context: *mut c_void, before: *mut c_int) -> usize;
    _Unwind_GetLanguageSpecificData => get_lsda(context: *mut c_void) -> *mut c_void;
    _Unwind_GetRegionStart => get_region_start(context: *mut c_void) -> usize;
    _Unwind_GetDataRelBase => get_data_rel_base(context: *mut c_void) -> usize;
    _Unwind_GetTextRelBase => get_text_rel_base(context: *mut c_void) -> usize;
    _Unwind_SetGR => set_gr(context: *mut c_void, index: c_int, value: usize);
    _Unwind_DeleteException => delete_exception(exception: *mut c_void);
}

#[cfg(test)]
mod tests {
    /// This test binary links the forwarders instead of libgcc_s, as the agent and the tool
    /// do: a panic unwinds through them (its landing pads run `Drop`) to `catch_unwind`.
    #[test]
    fn a_panic_unwinds_through_the_forwarders() {
        struct Dropped<'a>(&'a mut bool);
        impl Drop for Dropped<'_> {
            fn drop(&mut self) {
                *self.0 = true;
            }
        }
        let mut dropped = false;
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _d = Dropped(&mut dropped);
            std::panic::panic_any(42u32);
        }));
        assert_eq!(caught.unwrap_err().downcast_ref::<u32>(), Some(&42));
        assert!(dropped, "the landing pad ran");
    }
}
