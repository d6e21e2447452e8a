//! x86_64 jump labels: a [`StaticKey`] test compiled to a 5-byte NOP (feature `jump-label`).
//!
//! [`static_branch_unlikely!`](crate::static_branch_unlikely) emits, with `asm goto`, a
//! `nopl 0(%rax,%rax,1)` (`0f 1f 44 00 00`) that falls through to the "off" path, and records
//! a [`JumpEntry`] (the NOP's address, the "on" path's address, the key's address) in the
//! `__ftrace_jump_table` section of the final image (retained, `SHF_GNU_RETAIN`). Turning the
//! key on rewrites each of its NOPs to `jmp <on path>`, off back to the NOP: ftrace-patch's
//! `jump_label` module builds those rewrites and applies them through its patch protocols
//! (from the key's update callback, [`StaticKey::inc`] / [`StaticKey::dec`]). The key's count
//! stays the truth: the portable [`StaticKey::is_enabled`] reads the same key.
//!
//! Invariant: an entry's NOP is rewritten only by the transitions of its own key, so a site
//! reads `jmp` exactly while its key is on (once the update has run).
//!
//! Needs an ELF linker that defines `__start_`/`__stop_` symbols for the section (GNU ld, lld,
//! gold), which is why it is a feature: a kernel module or a custom linker script may drop the
//! section.

use crate::static_key::{Branch, StaticKey};
use crate::sync::{AtomicPtr, Ordering};

/// One jump-label site (the kernel's `struct jump_entry`, with absolute addresses).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JumpEntry {
    /// The 5-byte NOP.
    pub code: u64,
    /// Where the "on" path starts (the `jmp` target).
    pub target: u64,
    /// The address of the [`StaticKey`] the site tests.
    pub key: u64,
}

// An all-zero entry, so the section (and its bounds) exist in every image that links this
// module; `entries` skips it.
core::arch::global_asm!(
    ".pushsection __ftrace_jump_table, \"awR\"",
    ".balign 8",
    ".quad 0, 0, 0",
    ".popsection",
);

unsafe extern "C" {
    static __start___ftrace_jump_table: JumpEntry;
    static __stop___ftrace_jump_table: JumpEntry;
}

/// Every jump-label site of the image, in link order.
pub fn entries() -> impl Iterator<Item = &'static JumpEntry> {
    // SAFETY: the linker defines both bounds around the section, which holds only
    // `JumpEntry` records (24 bytes, 8-aligned) written by `static_branch_unlikely!` and the
    // zero entry above; it is never written at run time.
    let table = unsafe {
        let start = &raw const __start___ftrace_jump_table;
        let stop = &raw const __stop___ftrace_jump_table;
        core::slice::from_raw_parts(start, stop.offset_from(start) as usize)
    };
    table.iter().filter(|e| e.code != 0)
}

/// The sites that test `key`.
pub fn entries_of(key: &StaticKey) -> impl Iterator<Item = &'static JumpEntry> + use<> {
    let addr = key as *const StaticKey as u64;
    entries().filter(move |e| e.key == addr)
}

/// What rewrites a key's sites on its transitions (the platform's `arch_jump_label_transform`:
/// ftrace-patch's `jump_label::update_sites` over the platform's text), called from the key's
/// update with the key and the transition.
pub type Patcher = fn(&StaticKey, Branch);

static PATCHER: AtomicPtr<()> = AtomicPtr::new(core::ptr::null_mut());

/// Installs the patcher the keys that need one use (`tracepoint!` sites under the feature
/// `tracepoint-jump-label`). Install it before any such key is turned on; a later call replaces
/// it for the transitions that follow.
pub fn set_patcher(patcher: Patcher) {
    PATCHER.store(patcher as *mut (), Ordering::Release);
}

/// The installed patcher, if any.
pub fn patcher() -> Option<Patcher> {
    let p = PATCHER.load(Ordering::Acquire);
    // SAFETY: only `set_patcher` stores a non-null pointer, and it stores a `Patcher`.
    (!p.is_null()).then(|| unsafe { core::mem::transmute::<*mut (), Patcher>(p) })
}

/// `static_branch_unlikely(&KEY)`: `true` when the key's sites have been patched on. Off, it
/// costs a 5-byte NOP; `$key` must be a `static` [`StaticKey`].
#[macro_export]
macro_rules! static_branch_unlikely {
    ($key:path) => {{
        let mut on = false;
        // SAFETY: the asm is a NOP and a data record in a section of its own; it touches no
        // register or memory the compiler knows of, and may jump to the label, which only sets
        // a local.
        unsafe {
            ::core::arch::asm!(
                "2: .byte 0x0f, 0x1f, 0x44, 0x00, 0x00",
                ".pushsection __ftrace_jump_table, \"awR\"",
                ".balign 8",
                ".quad 2b, {on}, {key}",
                ".popsection",
                key = sym $key,
                on = label { on = true; },
                options(nostack, preserves_flags),
            );
        }
        on
    }};
}
