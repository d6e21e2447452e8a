//! gcc's plain `-pg` builds: `call mcount` in every function's prologue (after the frame
//! pointer is set up), with no list of the call sites and nothing to patch.
//!
//! The agent defines `mcount` (it is preloaded, so the program's calls reach it before
//! glibc's gprof hook): while no tracer records ([`MCOUNT_ON`] clear) it costs the call, one
//! load and a return. While the function tracer's fast path is on
//! ([`crate::handler::FAST_OK`]) it records in assembly, as the sites' fast path does
//! (`ftrace_agent_mcount_fast` in `tramp.rs`: four registers saved, the parent read from the
//! traced function's frame); while function_graph's is ([`crate::handler::GRAPH_OK`]), so
//! does the entry (`ftrace_agent_mcount_graph_fast`: the shadow frame pushed and the entry
//! recorded in assembly, the function's return address pointed at the return trampoline, as
//! the full path's handler does). Otherwise ([`mcount_full`]) it saves every caller-saved register
//! (the traced function is in its prologue: its arguments are live) and enters the full-save
//! entry handler
//! ([`crate::handler::on_entry`]) as a site would, with the function's return-address slot
//! found from its frame pointer (`-pg` keeps one on x86_64: the slot is `8(%rbp)`), so the
//! function and function_graph tracers record such a program as any other. The recorded
//! address is the `call mcount` inside the function, which symbol lookup names as the
//! function. Filters (`-F`, `-N`, `-G`) have no sites to select and are refused by the tool.

use core::sync::atomic::AtomicU8;

/// Non-zero while a tracer records (kept by [`crate::handler::update_fast_path`]): `mcount`
/// enters the handler.
pub static MCOUNT_ON: AtomicU8 = AtomicU8::new(0);

/// gcc's `-pg` hook, called at the end of every instrumented function's prologue.
///
/// # Safety
/// Only as gcc's `call mcount` calls it: in a function's prologue, with `rbp` its frame
/// pointer.
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mcount() {
    core::arch::naked_asm!(
        "cmp byte ptr [rip + {on}], 0",
        "jne 2f",
        "ret",
        "2:",
        "cmp byte ptr [rip + {fast}], 0",
        "jne {fast_path}",
        "cmp byte ptr [rip + {graph}], 0",
        "jne {graph_path}",
        "jmp {full}",
        on = sym MCOUNT_ON,
        fast = sym crate::handler::FAST_OK,
        graph = sym crate::handler::GRAPH_OK,
        full = sym mcount_full,
        fast_path = sym crate::tramp::ftrace_agent_mcount_fast,
        graph_path = sym crate::tramp::ftrace_agent_mcount_graph_fast,
    )
}

/// `mcount`'s full-save path: every caller-saved register saved, then the entry handler.
///
/// # Safety
/// Only as [`mcount`] enters it: in a function's prologue, with `rbp` its frame pointer and
/// `mcount`'s return address on top of the stack.
#[unsafe(naked)]
pub unsafe extern "C" fn mcount_full() {
    core::arch::naked_asm!(
        // rbp still the traced function's: 8(%rbp) is its return-address slot.
        "push rbp",
        "mov rbp, rsp",
        "and rsp, -16",
        "push rax",
        "push rdi",
        "push rsi",
        "push rdx",
        "push rcx",
        "push r8",
        "push r9",
        "push r10",
        "push r11",
        "sub rsp, 264",
        "movaps [rsp], xmm0",
        "movaps [rsp + 16], xmm1",
        "movaps [rsp + 32], xmm2",
        "movaps [rsp + 48], xmm3",
        "movaps [rsp + 64], xmm4",
        "movaps [rsp + 80], xmm5",
        "movaps [rsp + 96], xmm6",
        "movaps [rsp + 112], xmm7",
        "movaps [rsp + 128], xmm8",
        "movaps [rsp + 144], xmm9",
        "movaps [rsp + 160], xmm10",
        "movaps [rsp + 176], xmm11",
        "movaps [rsp + 192], xmm12",
        "movaps [rsp + 208], xmm13",
        "movaps [rsp + 224], xmm14",
        "movaps [rsp + 240], xmm15",
        // on_entry(ret = after the call, parent, slot, state, root = 0)
        "mov rdi, [rbp + 8]",
        "mov rax, [rbp]",
        "lea rdx, [rax + 8]",
        "mov rsi, [rdx]",
        "mov rcx, qword ptr [rip + ftrace_agent_tls@GOTTPOFF]",
        "add rcx, qword ptr fs:[0]",
        "xor r8d, r8d",
        "call {on_entry}",
        "movaps xmm0, [rsp]",
        "movaps xmm1, [rsp + 16]",
        "movaps xmm2, [rsp + 32]",
        "movaps xmm3, [rsp + 48]",
        "movaps xmm4, [rsp + 64]",
        "movaps xmm5, [rsp + 80]",
        "movaps xmm6, [rsp + 96]",
        "movaps xmm7, [rsp + 112]",
        "movaps xmm8, [rsp + 128]",
        "movaps xmm9, [rsp + 144]",
        "movaps xmm10, [rsp + 160]",
        "movaps xmm11, [rsp + 176]",
        "movaps xmm12, [rsp + 192]",
        "movaps xmm13, [rsp + 208]",
        "movaps xmm14, [rsp + 224]",
        "movaps xmm15, [rsp + 240]",
        "add rsp, 264",
        "pop r11",
        "pop r10",
        "pop r9",
        "pop r8",
        "pop rcx",
        "pop rdx",
        "pop rsi",
        "pop rdi",
        "pop rax",
        "mov rsp, rbp",
        "pop rbp",
        "ret",
        on_entry = sym crate::handler::on_entry,
    )
}
