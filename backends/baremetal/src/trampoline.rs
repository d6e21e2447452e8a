//! The trampolines a patched call site reaches: `ftrace_bm_caller` (function entry) and
//! `ftrace_bm_return_to_handler` (function exit, for the graph tracer).
//!
//! A site is `call ftrace_bm_caller` in place of the function's first 5 bytes. The trampoline
//! saves every argument register (rdi, rsi, rdx, rcx, r8, r9, rax for varargs, r10, r11,
//! xmm0-7), keeps rsp 16-byte aligned and calls the registered entry hook with
//! `(ip, parent_ip, parent_slot)`: `ip` is the site, `parent_ip` the traced function's return
//! address and `parent_slot` where that address lives on the stack, which the graph tracer
//! overwrites with [`return_to_handler_addr`]. That return trampoline saves the return values
//! (rax, rdx, xmm0, xmm1), asks the return hook for the original address and jumps there.
//!
//! Invariant: a hook is registered before any site is patched to reach it and stays callable
//! until every patched site is restored (and, for the return hook, until every redirected
//! return has happened); hooks are uninstrumented code.

use crate::sync::{AtomicUsize, Ordering};

/// The entry hook: `(ip, parent_ip, parent_slot)`.
pub type EntryHook = extern "C" fn(u64, u64, *mut u64);

/// The return hook: gives the original return address of the function returning now.
pub type ReturnHook = extern "C" fn() -> u64;

#[unsafe(no_mangle)]
static FTRACE_BM_ENTRY_HOOK: AtomicUsize = AtomicUsize::new(0);
#[unsafe(no_mangle)]
static FTRACE_BM_RETURN_HOOK: AtomicUsize = AtomicUsize::new(0);

/// Sets (or, with `None`, clears) the entry hook.
pub fn set_entry_hook(hook: Option<EntryHook>) {
    FTRACE_BM_ENTRY_HOOK.store(hook.map_or(0, |h| h as usize), Ordering::Release);
}

/// Sets the return hook (it must stay set while any return may still be redirected).
pub fn set_return_hook(hook: ReturnHook) {
    FTRACE_BM_RETURN_HOOK.store(hook as usize, Ordering::Release);
}

unsafe extern "C" {
    fn ftrace_bm_caller();
    fn ftrace_bm_return_to_handler();
}

/// Address of the entry trampoline (the target of a patched site's `call`).
pub fn caller_addr() -> u64 {
    ftrace_bm_caller as *const () as u64
}

/// Address of the return trampoline (what the graph tracer puts in a return slot).
pub fn return_to_handler_addr() -> u64 {
    ftrace_bm_return_to_handler as *const () as u64
}

core::arch::global_asm!(
    r#"
    .section .text.ftrace_bm_trampolines, "ax"
    .balign 16
    .global ftrace_bm_caller
ftrace_bm_caller:
    /* [rsp] = site + 5, [rsp+8] = the traced function's return address; rsp % 16 == 0 */
    push rax
    push rdi
    push rsi
    push rdx
    push rcx
    push r8
    push r9
    push r10
    push r11
    sub rsp, 136
    movdqu [rsp + 0], xmm0
    movdqu [rsp + 16], xmm1
    movdqu [rsp + 32], xmm2
    movdqu [rsp + 48], xmm3
    movdqu [rsp + 64], xmm4
    movdqu [rsp + 80], xmm5
    movdqu [rsp + 96], xmm6
    movdqu [rsp + 112], xmm7
    mov rax, qword ptr [rip + FTRACE_BM_ENTRY_HOOK]
    test rax, rax
    jz 2f
    mov rdi, [rsp + 208]
    sub rdi, 5
    mov rsi, [rsp + 216]
    lea rdx, [rsp + 216]
    call rax
2:
    movdqu xmm0, [rsp + 0]
    movdqu xmm1, [rsp + 16]
    movdqu xmm2, [rsp + 32]
    movdqu xmm3, [rsp + 48]
    movdqu xmm4, [rsp + 64]
    movdqu xmm5, [rsp + 80]
    movdqu xmm6, [rsp + 96]
    movdqu xmm7, [rsp + 112]
    add rsp, 136
    pop r11
    pop r10
    pop r9
    pop r8
    pop rcx
    pop rdx
    pop rsi
    pop rdi
    pop rax
    ret

    .balign 16
    .global ftrace_bm_return_to_handler
ftrace_bm_return_to_handler:
    /* entered by the traced function's `ret`: rsp % 16 == 0, results in rax/rdx/xmm0/xmm1 */
    push rax
    push rdx
    sub rsp, 32
    movdqu [rsp + 0], xmm0
    movdqu [rsp + 16], xmm1
    call qword ptr [rip + FTRACE_BM_RETURN_HOOK]
    mov r11, rax
    movdqu xmm0, [rsp + 0]
    movdqu xmm1, [rsp + 16]
    add rsp, 32
    pop rdx
    pop rax
    jmp r11
    .text
    "#
);
