//! The trampolines (assembly) and the stub pages that put them within reach of every site.
//!
//! A patched site is `call rel32` (or `jmp rel32`), which reaches ±2 GiB; the agent's own text
//! may be anywhere. So each object gets a stub page mapped within reach (shared by objects close
//! to each other), holding `jmp *abs64` thunks to the full-save trampolines and copies of the
//! fast paths (position-independent templates with a data block: TLS offset, switch,
//! fallbacks), so that the hot path takes no extra jump.
//!
//! Entry trampoline (the full-save path): entered from the site's `call` with `(%rsp)` = the
//! address after the site and `8(%rsp)` = the traced function's return address; rsp is 16-byte
//! aligned. It saves every caller-saved register (rax, rcx, rdx, rsi, rdi, r8–r11 and xmm0–15:
//! argument registers, the varargs count, the static chain, and whatever a caller compiled with
//! inter-procedural register allocation keeps live across the call), passes the thread's state
//! block (initial-exec TLS, no `__tls_get_addr`), calls the handler and restores everything:
//! the traced function computes exactly what it would untraced.
//!
//! Fast paths (assembly only, no call into Rust, no vector register touched, every general
//! register restored): the function tracer's, and function_graph's in two forms. Whenever they
//! cannot record (thread not registered yet, nesting, clock not the TSC, `-G`, `--max-depth`,
//! shadow stack full, frames skipped by `longjmp`) they continue in the full-save path.
//! function_graph's entry pushes the shadow frame, records, then *calls* the body from the
//! return-address slot, so the body's `ret` into the return trampoline is predicted by the
//! CPU's return stack buffer; an ordinary function_graph site is patched to `jmp` to a thunk
//! of its own ([`site_bytes`]) rather than to `call`, so that no return-stack entry is left
//! unpopped and every `ret` of the traced program stays predicted (a `call`-form site costs
//! one mispredicted return per traced call, which the return trampoline limits by leaving with
//! `jmp`).
//!
//! Return trampoline (function_graph): pops the shadow frame whose return-address slot is the
//! one it was entered through, records the exit and returns to the original return address;
//! anything else (roots, frames skipped by `longjmp`, and every return while
//! `funcgraph-retval` is set) goes to the full-save return path, which asks the handler and
//! hands it the function's `rax`.

use core::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use ftrace_patch::site::{Arch, SiteBytes, SiteForm};

use crate::handler;
use ftrace_patch::x86::{self, OutOfRange};

/// Bytes of per-thread state reserved in the TLS block (see `ThreadState`).
pub const TLS_BYTES: usize = 256;

core::arch::global_asm!(
    r#"
    .section .tbss,"awT",@nobits
    .p2align 6
    .globl ftrace_agent_tls
    .hidden ftrace_agent_tls
    .type ftrace_agent_tls,@object
    .size ftrace_agent_tls, 256
ftrace_agent_tls:
    .zero 256

    // The full-save paths keep all sixteen xmm registers (caller-saved in the SysV ABI, so
    // the Rust handler may clobber them) in the 256 bytes at rsp, which is 16-aligned.
    .macro FTRACE_AGENT_SAVE_XMM
    movaps %xmm0, 0(%rsp)
    movaps %xmm1, 16(%rsp)
    movaps %xmm2, 32(%rsp)
    movaps %xmm3, 48(%rsp)
    movaps %xmm4, 64(%rsp)
    movaps %xmm5, 80(%rsp)
    movaps %xmm6, 96(%rsp)
    movaps %xmm7, 112(%rsp)
    movaps %xmm8, 128(%rsp)
    movaps %xmm9, 144(%rsp)
    movaps %xmm10, 160(%rsp)
    movaps %xmm11, 176(%rsp)
    movaps %xmm12, 192(%rsp)
    movaps %xmm13, 208(%rsp)
    movaps %xmm14, 224(%rsp)
    movaps %xmm15, 240(%rsp)
    .endm
    .macro FTRACE_AGENT_RESTORE_XMM
    movaps 0(%rsp), %xmm0
    movaps 16(%rsp), %xmm1
    movaps 32(%rsp), %xmm2
    movaps 48(%rsp), %xmm3
    movaps 64(%rsp), %xmm4
    movaps 80(%rsp), %xmm5
    movaps 96(%rsp), %xmm6
    movaps 112(%rsp), %xmm7
    movaps 128(%rsp), %xmm8
    movaps 144(%rsp), %xmm9
    movaps 160(%rsp), %xmm10
    movaps 176(%rsp), %xmm11
    movaps 192(%rsp), %xmm12
    movaps 208(%rsp), %xmm13
    movaps 224(%rsp), %xmm14
    movaps 240(%rsp), %xmm15
    .endm

    .text
    .p2align 4
    .globl ftrace_agent_entry_tramp
    .hidden ftrace_agent_entry_tramp
    .type ftrace_agent_entry_tramp,@function
ftrace_agent_entry_tramp:
    pushq %r11
    xorl %r11d, %r11d
    jmp 1f
    .p2align 4
    .globl ftrace_agent_root_tramp
    .hidden ftrace_agent_root_tramp
    .type ftrace_agent_root_tramp,@function
ftrace_agent_root_tramp:
    pushq %r11
    movl $1, %r11d
1:
    pushq %rbp
    movq %rsp, %rbp
    // gcc may call a function that needs no aligned stack with rsp 8 off (-fipa-stack-alignment):
    // align for the movaps saves and the Rust call; everything above is addressed from rbp.
    andq $-16, %rsp
    pushq %rax
    pushq %rdi
    pushq %rsi
    pushq %rdx
    pushq %rcx
    pushq %r8
    pushq %r9
    pushq %r10
    subq $256, %rsp
    FTRACE_AGENT_SAVE_XMM
    movq 16(%rbp), %rdi
    leaq 24(%rbp), %rdx
    movq (%rdx), %rsi
    movq ftrace_agent_tls@GOTTPOFF(%rip), %rcx
    addq %fs:0, %rcx
    movl %r11d, %r8d
    call {on_entry}
    FTRACE_AGENT_RESTORE_XMM
    addq $256, %rsp
    popq %r10
    popq %r9
    popq %r8
    popq %rcx
    popq %rdx
    popq %rsi
    popq %rdi
    popq %rax
    movq %rbp, %rsp
    popq %rbp
    popq %r11
    ret
    .size ftrace_agent_entry_tramp, .-ftrace_agent_entry_tramp


    // The fast paths, generated twice: with the clock (what sites use) and, for measuring
    // the cost of everything but the clock only, with the TSC read replaced by zero
    // (`FTRACE_AGENT_BENCH_NOCLOCK=1`; never the default).

    // rdx = the timestamp; clobbers rax.
    .macro FTRACE_AGENT_CLOCK noclock
    .if \noclock
    xorl %eax, %eax
    xorl %edx, %edx
    .else
    rdtsc
    .endif
    shlq $32, %rdx
    orq %rax, %rdx
    .endm

    // Reserves the thread's next slot (rsi = its state): rax = the slot index, `kind` (the
    // 32-bit name of `hdr`) = the index's lap-parity bit; jumps to `full` when the index is
    // past the limit the writers last saw (`limit_seen`, on the writers' own cache line: the
    // consumer's `limit` is read only there, out of line), which comes back to the local
    // label `back` defined here when there is room after all. Non-locked xadd: the writers of
    // one buffer are one thread and its signal handlers, strictly nested.
    .macro FTRACE_AGENT_RESERVE hdr, kind, full, back
    movq {off_header}(%rsi), \hdr
    movl $1, %eax
    xaddq %rax, {off_head}(\hdr)
    cmpq {off_limit_seen}(\hdr), %rax
    ja \full
\back\():
    movl {off_shift}(%rsi), \kind
    btq \hdr, %rax
    sbbl \kind, \kind
    andl ${lap_bit}, \kind
    .endm

    // The index reserved (rax; `hdr` = the header, rsi = the thread's state) is past
    // `limit_seen`: read the consumer's `limit` (a plain load, acquire on x86), store it in
    // `limit_seen` or, when lower, rax + an eighth of the ring (the writer contract:
    // `ftrace_ringbuf::slot`, LOOK_AGAIN_EVERY), take the tool's offer of a larger ring when
    // the tool is behind, and compare again; with room, go on at `back` (RESERVE's label) with
    // `scratch` restored (it is spilled to the red zone, 64 bytes below rsp, where no signal
    // frame goes and no path keeps data while it reserves). Else the ring is full (clobbers
    // `scratch`): count the drop, give the reservation back (head: rax + 1 -> rax,
    // non-locked cmpxchg), or, when a nested writer reserved past it meanwhile, commit the
    // slot as a pad; then continue at `done`. Out of line: never on the fast path.
    .macro FTRACE_AGENT_GIVE_BACK hdr, kind, scratch, done, back
    movq \scratch, -64(%rsp)
    movq {off_mask}(%rsi), \scratch
    incq \scratch
    shrq ${look_again_shift}, \scratch
    addq %rax, \scratch
    cmpq {off_limit}(\hdr), \scratch
    jb 76f
    movq {off_limit}(\hdr), \scratch
76:
    movq \scratch, {off_limit_seen}(\hdr)
    // The tool offers a larger ring (its `grow` word, on the line just read; neither 0 nor
    // GROWN, the agent's answer) and is behind (less than a quarter of the ring left ahead: the
    // `behind` of `ftrace_ringbuf::slot`, BEHIND_BELOW): from the plain registered state, the
    // thread's next event takes the handlers' path, which moves it ([`crate::grow`]). This
    // event goes on here.
    cmpq $0, {off_grow}(\hdr)
    je 77f
    cmpq $-1, {off_grow}(\hdr)
    je 77f
    cmpq $1, {off_state}(%rsi)
    jne 77f
    movq {off_limit}(\hdr), \scratch
    subq %rax, \scratch
    js 78f
    shlq ${behind_shift}, \scratch
    cmpq {off_mask}(%rsi), \scratch
    ja 77f
78:
    movl ${state_grow}, {off_state}(%rsi)
77:
    movq {off_limit}(\hdr), \scratch
    cmpq \scratch, %rax
    movq -64(%rsp), \scratch
    jbe \back
    incq {off_dropped}(\hdr)
    movq %rax, \scratch
    incq %rax
    cmpxchgq \scratch, {off_head}(\hdr)
    je \done
    movq \scratch, %rax
    movl {off_shift}(%rsi), \kind
    btq \hdr, %rax
    sbbl \kind, \kind
    andl ${lap_bit}, \kind
    orl ${kind_pad}, \kind
    andq {off_mask}(%rsi), %rax
    shlq $5, %rax
    addq {off_slots}(%rsi), %rax
    movl \kind, 24(%rax)
    jmp \done
    .endm

    // The function tracer's and function_graph's `jmp`-form fast paths are TEMPLATES: never
    // run where they are assembled, copied into each stub page (no `jmp *abs64` on the way)
    // with the data block at their end filled in: +0 the TLS block's offset from the thread
    // pointer (the GOTTPOFF value), +8 the address of the fast-path switch, +16 the full-save
    // entry trampoline, +24 the full-save return path. Everything else they reference is
    // inside the template.
    .macro FTRACE_AGENT_TEMPLATE_DATA name
    .p2align 3
\name\()_data:
    .quad 0, 0, 0, 0
    .globl \name\()_end
    .hidden \name\()_end
\name\()_end:
    .size \name, .-\name
    .endm

    // The function tracer's event (rsi = the thread's registered state; rax, rcx, rdx, rsi
    // pushed, so 32(%rsp) is the address after the call that entered): reserves a slot (out
    // of line at `6:`, which its invoker defines with GIVE_BACK, back at `10:`), writes the
    // timestamp, the call's address, the parent read from `parent` and the CPU, and commits.
    .macro FTRACE_AGENT_FUNC_WRITE noclock, parent
    FTRACE_AGENT_CLOCK \noclock
    FTRACE_AGENT_RESERVE %rcx, %ecx, 6f, 10
    orl ${kind_func}, %ecx
    andq {off_mask}(%rsi), %rax
    shlq $5, %rax
    addq {off_slots}(%rsi), %rax
    movq %rdx, 0(%rax)
    movq 32(%rsp), %rdx
    subq $5, %rdx
    movq %rdx, 8(%rax)
    movq \parent, %rdx
    movq %rdx, 16(%rax)
    movq {off_cpu}(%rsi), %rdx
    movl (%rdx), %edx
    movl %edx, 28(%rax)
    movl %ecx, 24(%rax)
    .endm

    // Function tracer: entered from the site's call; touches rax, rcx, rdx, rsi (restored).
    .macro FTRACE_AGENT_FUNC name, noclock
    .p2align 5
    .globl \name
    .hidden \name
    .type \name,@function
\name:
    pushq %rax
    pushq %rcx
    pushq %rdx
    pushq %rsi
    // 0: rsi, 8: rdx, 16: rcx, 24: rax, 32: the address after the site, 40: parent
    movq \name\()_data+8(%rip), %rsi
    cmpb $0, (%rsi)
    je 8f
    movq \name\()_data(%rip), %rsi
    addq %fs:0, %rsi
    cmpq $1, {off_state}(%rsi)
    jne 8f
    FTRACE_AGENT_FUNC_WRITE \noclock, 40(%rsp)
9:
    popq %rsi
    popq %rdx
    popq %rcx
    popq %rax
    ret
8:
    popq %rsi
    popq %rdx
    popq %rcx
    popq %rax
    jmp *\name\()_data+16(%rip)
6:
    FTRACE_AGENT_GIVE_BACK %rcx, %ecx, %rdx, 9b, 10b
    FTRACE_AGENT_TEMPLATE_DATA \name
    .endm

    // function_graph entry's shared middle, for the call form, the jmp form and `mcount`. On
    // entry rsi = this thread's TLS block, the parent in its return-address slot \parent
    // (48(%rsp) for the sites: the saved registers below it) and the address after the site
    // at \site(%rsp). Pushes the shadow frame (ret, ip, calltime, slot) and writes the entry
    // event; jumps to the invoker's `8:` when the thread is not tracing or the shadow stack is
    // full, falls (or jumps to its `2:`, when the ring is full) through to the invoker's exit
    // with rax, rcx, rdx, rdi clobbered.
    .macro FTRACE_AGENT_GRAPH_ENTER site, noclock, parent=48(%rsp)
    cmpq $1, {off_state}(%rsi)
    jne 8f
    movq {off_depth}(%rsi), %rdi
    cmpq ${shadow_frames}, %rdi
    jae 8f
    leaq 1(%rdi), %rcx
    movq %rcx, {off_depth}(%rsi)
    FTRACE_AGENT_CLOCK \noclock
    movq %rdi, %rax
    shlq $5, %rax
    addq {off_shadow}(%rsi), %rax
    movq \parent, %rcx
    movq %rcx, 0(%rax)
    movq \site(%rsp), %rcx
    subq $5, %rcx
    movq %rcx, 8(%rax)
    movq %rdx, 16(%rax)
    leaq \parent, %rcx
    movq %rcx, 24(%rax)
    FTRACE_AGENT_RESERVE %rcx, %ecx, 6f, 10
    shll $8, %edi
    orl %edi, %ecx
    orl ${kind_ent}, %ecx
    andq {off_mask}(%rsi), %rax
    shlq $5, %rax
    addq {off_slots}(%rsi), %rax
    movq %rdx, 0(%rax)
    movq \site(%rsp), %rdx
    subq $5, %rdx
    movq %rdx, 8(%rax)
    movq \parent, %rdx
    movq %rdx, 16(%rax)
    movq {off_cpu}(%rsi), %rdx
    movl (%rdx), %edx
    movl %edx, 28(%rax)
    movl %ecx, 24(%rax)
    .endm

    // function_graph entry, then (at \ret_name) its return trampoline. The entry pushes the
    // shadow frame and records, then CALLS the function body (the site's address + 5) from
    // the return-address slot: the traced function sees the same stack as untraced with
    // \ret_name as its return address, and the return stack buffer predicts its `ret`.
    // The return path pops the frame, records, and jumps (not `ret`) to the original return
    // address, which keeps the return stack buffer's other entries in step.
    .macro FTRACE_AGENT_GRAPH name, ret_name, noclock
    .p2align 5
    .globl \name
    .hidden \name
    .type \name,@function
\name:
    cmpb $0, {graph_ok}(%rip)
    je ftrace_agent_entry_tramp
    pushq %rax
    pushq %rcx
    pushq %rdx
    pushq %rsi
    pushq %rdi
    // 0: rdi, 8: rsi, 16: rdx, 24: rcx, 32: rax, 40: the address after the site, 48: parent
    movq ftrace_agent_tls@GOTTPOFF(%rip), %rsi
    addq %fs:0, %rsi
    FTRACE_AGENT_GRAPH_ENTER 40, \noclock
2:
    popq %rdi
    popq %rsi
    popq %rdx
    popq %rcx
    popq %rax
    // rsp at the parent slot + 8; the body's address sits 16 below (red zone: a signal frame
    // starts 128 bytes below rsp). `call` reads it, then pushes \ret_name into the slot.
    leaq 16(%rsp), %rsp
    call *-16(%rsp)
    .globl \ret_name
    .hidden \ret_name
\ret_name:
    pushq %rax
    pushq %rcx
    pushq %rdx
    pushq %rsi
    pushq %rdi
    pushq %r8
    pushq %r9
    // 0: r9, 8: r8, 16: rdi, 24: rsi, 32: rdx, 40: rcx, 48: rax (in the return-address slot)
    cmpb $0, {graph_ok}(%rip)
    je 7f
    movq ftrace_agent_tls@GOTTPOFF(%rip), %rsi
    addq %fs:0, %rsi
    movq {off_depth}(%rsi), %rdi
    testq %rdi, %rdi
    jz 7f
    leaq -1(%rdi), %r9
    shlq $5, %rdi
    addq {off_shadow}(%rsi), %rdi
    leaq 48(%rsp), %rcx
    cmpq -8(%rdi), %rcx
    jne 7f
    // The original return address goes 8 below our saves, where the final jmp reads it.
    movq -32(%rdi), %rax
    movq %rax, -8(%rsp)
    movq -24(%rdi), %rcx
    movq -16(%rdi), %r8
    // Popped only once read: a signal handler nesting from here on may reuse the frame.
    movq %r9, {off_depth}(%rsi)
    FTRACE_AGENT_CLOCK \noclock
    FTRACE_AGENT_RESERVE %rdi, %edi, 4f, 11
    shll $8, %r9d
    orl %r9d, %edi
    orl ${kind_ret}, %edi
    andq {off_mask}(%rsi), %rax
    shlq $5, %rax
    addq {off_slots}(%rsi), %rax
    movq %rdx, 0(%rax)
    movq %rcx, 8(%rax)
    movq %r8, 16(%rax)
    movq {off_cpu}(%rsi), %rcx
    movl (%rcx), %ecx
    movl %ecx, 28(%rax)
    movl %edi, 24(%rax)
9:
    popq %r9
    popq %r8
    popq %rdi
    popq %rsi
    popq %rdx
    popq %rcx
    popq %rax
    // rsp at the slot + 8: the target is 64 below, inside the red zone.
    jmp *-64(%rsp)
7:
    popq %r9
    popq %r8
    popq %rdi
    popq %rsi
    popq %rdx
    popq %rcx
    popq %rax
    jmp ftrace_agent_return_slow
8:
    popq %rdi
    popq %rsi
    popq %rdx
    popq %rcx
    popq %rax
    jmp ftrace_agent_entry_tramp
6:
    FTRACE_AGENT_GIVE_BACK %rcx, %ecx, %rdx, 2b, 10b
4:
    FTRACE_AGENT_GIVE_BACK %rdi, %edi, %rdx, 9b, 11b
    .size \name, .-\name
    .endm

    // function_graph entry for sites patched to `jmp` to their own thunk (`push %rax;
    // lea body(%rip), %rax; jmp here`): rax = the body (the site's address + 5), (%rsp) =
    // the caller's rax, 8(%rsp) = parent. No return-stack-buffer entry was pushed for the
    // site, so after the body is CALLED from the return-address slot the buffer holds exactly
    // the caller's entry and \ret_name's: the body's `ret` and \ret_name's `ret` are both
    // predicted.
    .macro FTRACE_AGENT_GRAPHJ name, ret_name, noclock
    .p2align 5
    .globl \name
    .hidden \name
    .type \name,@function
\name:
    pushq %rcx
    movq \name\()_data+8(%rip), %rcx
    cmpb $0, (%rcx)
    je 5f
    pushq %rdx
    pushq %rsi
    pushq %rdi
    pushq %rax
    // 0: body, 8: rdi, 16: rsi, 24: rdx, 32: rcx, 40: rax, 48: parent
    movq \name\()_data(%rip), %rsi
    addq %fs:0, %rsi
    FTRACE_AGENT_GRAPH_ENTER 0, \noclock
2:
    leaq 8(%rsp), %rsp
    popq %rdi
    popq %rsi
    popq %rdx
    popq %rcx
    popq %rax
    // rsp at the parent slot; the body's address sits 48 below (red zone: a signal frame
    // starts 128 bytes below rsp). `call` reads it, then pushes \ret_name into the slot.
    leaq 8(%rsp), %rsp
    call *-56(%rsp)
\ret_name:
    leaq -8(%rsp), %rsp
    pushq %rax
    pushq %rcx
    pushq %rdx
    pushq %rsi
    pushq %rdi
    // 0: rdi, 8: rsi, 16: rdx, 24: rcx, 32: rax, 40: the return-address slot
    movq \name\()_data+8(%rip), %rsi
    cmpb $0, (%rsi)
    je 7f
    movq \name\()_data(%rip), %rsi
    addq %fs:0, %rsi
    movq {off_depth}(%rsi), %rdi
    testq %rdi, %rdi
    jz 7f
    shlq $5, %rdi
    addq {off_shadow}(%rsi), %rdi
    // rdi: one past the top frame (ret -32, ip -24, calltime -16, slot -8)
    leaq 40(%rsp), %rcx
    cmpq -8(%rdi), %rcx
    jne 7f
    movq -32(%rdi), %rax
    movq %rax, 40(%rsp)
    FTRACE_AGENT_CLOCK \noclock
    // The frame stays pushed until its fields are in the event: a signal handler nesting
    // meanwhile pushes and pops above it.
    FTRACE_AGENT_RESERVE %rcx, %ecx, 4f, 11
    orl ${kind_ret}, %ecx
    andq {off_mask}(%rsi), %rax
    shlq $5, %rax
    addq {off_slots}(%rsi), %rax
    movq %rdx, 0(%rax)
    // depth << 8 of the popped frame: (rdi - shadow - 32) << 3
    movq %rdi, %rdx
    subq {off_shadow}(%rsi), %rdx
    shll $3, %edx
    subl $256, %edx
    orl %edx, %ecx
    movq -24(%rdi), %rdx
    movq %rdx, 8(%rax)
    movq -16(%rdi), %rdx
    movq %rdx, 16(%rax)
    movq {off_cpu}(%rsi), %rdx
    movl (%rdx), %edx
    movl %edx, 28(%rax)
    movl %ecx, 24(%rax)
9:
    subq $1, {off_depth}(%rsi)
    popq %rdi
    popq %rsi
    popq %rdx
    popq %rcx
    popq %rax
    ret
7:
    popq %rdi
    popq %rsi
    popq %rdx
    popq %rcx
    popq %rax
    leaq 8(%rsp), %rsp
    jmp *\name\()_data+24(%rip)
8:
    popq %rax
    popq %rdi
    popq %rsi
    popq %rdx
5:
    popq %rcx
    // Not recorded here: continue as a call-form site would, in the full-save path
    // (stack: the body, then parent; rax restored).
    pushq %rax
    movq 8(%rsp), %rax
    popq (%rsp)
    jmp *\name\()_data+16(%rip)
6:
    FTRACE_AGENT_GIVE_BACK %rcx, %ecx, %rdx, 2b, 10b
4:
    FTRACE_AGENT_GIVE_BACK %rcx, %ecx, %rdx, 9b, 11b
    FTRACE_AGENT_TEMPLATE_DATA \name
    .endm

    FTRACE_AGENT_FUNC ftrace_agent_func_tramp, 0
    FTRACE_AGENT_FUNC ftrace_agent_func_tramp_noclock, 1

    // The function tracer's fast path for gcc's plain `-pg` (and rustc's
    // `-Zinstrument-mcount`) calls: the agent's `mcount` jumps here while the function
    // tracer's fast path is on (crate::mcount). It records as the sites' fast path does, with
    // the parent read from the traced function's frame (its frame pointer is set up before
    // `call mcount`: 8(%rbp) is its return address); else (the thread not registered) it
    // continues in the full-save `mcount` path. Static code: it reaches its statics directly.
    .p2align 5
    .globl ftrace_agent_mcount_fast
    .hidden ftrace_agent_mcount_fast
    .type ftrace_agent_mcount_fast,@function
ftrace_agent_mcount_fast:
    pushq %rax
    pushq %rcx
    pushq %rdx
    pushq %rsi
    // 0: rsi, 8: rdx, 16: rcx, 24: rax, 32: the address after `call mcount`
    movq ftrace_agent_tls@GOTTPOFF(%rip), %rsi
    addq %fs:0, %rsi
    cmpq $1, {off_state}(%rsi)
    jne 8f
    FTRACE_AGENT_FUNC_WRITE 0, 8(%rbp)
9:
    popq %rsi
    popq %rdx
    popq %rcx
    popq %rax
    ret
8:
    popq %rsi
    popq %rdx
    popq %rcx
    popq %rax
    jmp {mcount_full}
6:
    FTRACE_AGENT_GIVE_BACK %rcx, %ecx, %rdx, 9b, 10b
    .size ftrace_agent_mcount_fast, .-ftrace_agent_mcount_fast

    // function_graph's fast path for `mcount` calls: the agent's `mcount` jumps here while
    // function_graph's fast path is on (crate::mcount). The entry pushes the shadow frame and
    // records as the sites' does, with the traced function's return-address slot at 8(%rbp);
    // then that slot is pointed at the return trampoline (the full-save path's hook), through
    // which the function returns (the full path's `on_entry` does the same). Else (the thread
    // not tracing or its shadow stack full) it continues in the full-save `mcount` path.
    .p2align 5
    .globl ftrace_agent_mcount_graph_fast
    .hidden ftrace_agent_mcount_graph_fast
    .type ftrace_agent_mcount_graph_fast,@function
ftrace_agent_mcount_graph_fast:
    pushq %rax
    pushq %rcx
    pushq %rdx
    pushq %rsi
    pushq %rdi
    // 0: rdi, 8: rsi, 16: rdx, 24: rcx, 32: rax, 40: the address after `call mcount`
    movq ftrace_agent_tls@GOTTPOFF(%rip), %rsi
    addq %fs:0, %rsi
    FTRACE_AGENT_GRAPH_ENTER 40, 0, 8(%rbp)
2:
    // The frame is pushed (its entry recorded or, the ring full, counted): the function
    // returns through the trampoline, which pops it.
    leaq ftrace_agent_return_tramp(%rip), %rcx
    movq %rcx, 8(%rbp)
    popq %rdi
    popq %rsi
    popq %rdx
    popq %rcx
    popq %rax
    ret
8:
    popq %rdi
    popq %rsi
    popq %rdx
    popq %rcx
    popq %rax
    jmp {mcount_full}
6:
    FTRACE_AGENT_GIVE_BACK %rcx, %ecx, %rdx, 2b, 10b
    .size ftrace_agent_mcount_graph_fast, .-ftrace_agent_mcount_graph_fast
    FTRACE_AGENT_GRAPH ftrace_agent_graph_tramp, ftrace_agent_return_tramp, 0
    FTRACE_AGENT_GRAPH ftrace_agent_graph_tramp_noclock, ftrace_agent_return_tramp_noclock, 1
    FTRACE_AGENT_GRAPHJ ftrace_agent_graphj_tramp, ftrace_agent_returnj_tramp, 0
    FTRACE_AGENT_GRAPHJ ftrace_agent_graphj_tramp_noclock, ftrace_agent_returnj_tramp_noclock, 1

    .p2align 4
    .globl ftrace_agent_return_slow
    .hidden ftrace_agent_return_slow
    .type ftrace_agent_return_slow,@function
ftrace_agent_return_slow:
    // rbp+16: the caller's stack as the body's ret left it; rbp+8: the slot the final ret reads.
    subq $8, %rsp
    pushq %rbp
    movq %rsp, %rbp
    andq $-16, %rsp
    pushq %rax
    pushq %rdx
    pushq %rcx
    pushq %rsi
    pushq %rdi
    pushq %r8
    pushq %r9
    pushq %r10
    pushq %r11
    subq $264, %rsp
    FTRACE_AGENT_SAVE_XMM
    movq ftrace_agent_tls@GOTTPOFF(%rip), %rdi
    addq %fs:0, %rdi
    leaq 16(%rbp), %rsi
    // The traced function's return value (rax is untouched since the function returned).
    movq %rax, %rdx
    call {on_return}
    movq %rax, 8(%rbp)
    FTRACE_AGENT_RESTORE_XMM
    addq $264, %rsp
    popq %r11
    popq %r10
    popq %r9
    popq %r8
    popq %rdi
    popq %rsi
    popq %rcx
    popq %rdx
    popq %rax
    movq %rbp, %rsp
    popq %rbp
    ret
    .size ftrace_agent_return_slow, .-ftrace_agent_return_slow
    .text
"#,
    on_entry = sym crate::handler::on_entry,
    on_return = sym crate::handler::on_return,
    graph_ok = sym crate::handler::GRAPH_OK,
    off_shadow = const core::mem::offset_of!(crate::handler::ThreadState, shadow),
    off_depth = const core::mem::offset_of!(crate::handler::ThreadState, depth),
    shadow_frames = const crate::handler::SHADOW_FRAMES,
    kind_ent = const crate::buffer::KIND_GRAPH_ENT,
    kind_ret = const crate::buffer::KIND_GRAPH_RET,
    off_state = const core::mem::offset_of!(crate::handler::ThreadState, state),
    off_header = const core::mem::offset_of!(crate::handler::ThreadState, writer),
    off_slots = const core::mem::offset_of!(crate::handler::ThreadState, writer) + core::mem::offset_of!(crate::buffer::Writer, slots),
    off_mask = const core::mem::offset_of!(crate::handler::ThreadState, writer) + core::mem::offset_of!(crate::buffer::Writer, mask),
    off_shift = const core::mem::offset_of!(crate::handler::ThreadState, writer) + core::mem::offset_of!(crate::buffer::Writer, shift),
    off_limit = const crate::buffer::LIMIT_OFFSET,
    off_limit_seen = const crate::buffer::LIMIT_SEEN_OFFSET,
    off_grow = const crate::buffer::GROW_OFFSET,
    state_grow = const crate::grow::GROW,
    look_again_shift = const ftrace_ringbuf::slot::LOOK_AGAIN_EVERY.trailing_zeros(),
    behind_shift = const ftrace_ringbuf::slot::BEHIND_BELOW.trailing_zeros(),
    off_dropped = const crate::buffer::DROPPED_OFFSET,
    kind_pad = const ftrace_ringbuf::slot::KIND_PAD,
    lap_bit = const crate::buffer::KIND_LAP_BIT,
    off_cpu = const core::mem::offset_of!(crate::handler::ThreadState, cpu),
    off_head = const crate::buffer::HEAD_OFFSET,
    kind_func = const crate::buffer::KIND_FUNC,
    mcount_full = sym crate::mcount::mcount_full,
    options(att_syntax)
);

// GIVE_BACK tells the agent's answer in a ring's `grow` word by comparing with -1, and divides
// and multiplies by the writer contract's fractions with shifts.
const _: () = assert!(
    ftrace_ringbuf::slot::GROWN == u64::MAX
        && ftrace_ringbuf::slot::LOOK_AGAIN_EVERY.is_power_of_two()
        && ftrace_ringbuf::slot::BEHIND_BELOW.is_power_of_two()
);

// The fast paths test `state == 1 && guard == 0` as one 64-bit compare with 1.
const _: () = assert!(
    core::mem::offset_of!(crate::handler::ThreadState, guard)
        == core::mem::offset_of!(crate::handler::ThreadState, state) + 4
        && core::mem::offset_of!(crate::handler::ThreadState, state) % 8 == 0
);

unsafe extern "C" {
    /// The function tracer's fast path for `mcount` calls (see the assembly above).
    pub(crate) fn ftrace_agent_mcount_fast();
    /// function_graph's fast path for `mcount` calls (see the assembly above).
    pub(crate) fn ftrace_agent_mcount_graph_fast();
    fn ftrace_agent_graph_tramp();
    fn ftrace_agent_graph_tramp_noclock();
    fn ftrace_agent_graphj_tramp();
    fn ftrace_agent_graphj_tramp_end();
    fn ftrace_agent_graphj_tramp_noclock();
    fn ftrace_agent_graphj_tramp_noclock_end();
    fn ftrace_agent_func_tramp();
    fn ftrace_agent_func_tramp_end();
    fn ftrace_agent_func_tramp_noclock();
    fn ftrace_agent_func_tramp_noclock_end();
    fn ftrace_agent_return_slow();
    fn ftrace_agent_entry_tramp();
    fn ftrace_agent_root_tramp();
    fn ftrace_agent_return_tramp();
}

/// The entry trampoline for ordinary sites.
pub fn entry_trampoline() -> u64 {
    ftrace_agent_entry_tramp as *const () as u64
}

/// The function_graph entry trampoline for `call`-form sites (see [`site_bytes`] for the
/// faster `jmp` form): pushes the shadow frame and records in assembly when the thread is
/// registered, the clock is the TSC, no `-G`/`--max-depth` applies and nothing nests; else it
/// continues in [`entry_trampoline`]. Its return counterpart falls back to the full-save return
/// path for frames it cannot pop (roots, frames skipped by `longjmp`).
pub fn graph_trampoline() -> u64 {
    if bench_noclock() {
        ftrace_agent_graph_tramp_noclock as *const () as u64
    } else {
        ftrace_agent_graph_tramp as *const () as u64
    }
}

/// A fast-path template: its bytes (code, then the 32-byte data block) as assembled.
fn template(start: unsafe extern "C" fn(), end: unsafe extern "C" fn()) -> &'static [u8] {
    let (a, b) = (start as *const () as usize, end as *const () as usize);
    assert!(b > a + TEMPLATE_DATA && b - a < 2048, "template bounds");
    // SAFETY: both labels are in the agent's text, `start` before `end`.
    unsafe { core::slice::from_raw_parts(a as *const u8, b - a) }
}

/// Bytes of a template's data block.
const TEMPLATE_DATA: usize = 32;

/// The function tracer's fast path (template): records in assembly (no register beyond rax,
/// rcx, rdx and rsi is touched, all restored) when the thread is registered, the clock is the
/// TSC and nothing nests; else it continues in [`entry_trampoline`].
fn func_template() -> &'static [u8] {
    if bench_noclock() {
        template(
            ftrace_agent_func_tramp_noclock,
            ftrace_agent_func_tramp_noclock_end,
        )
    } else {
        template(ftrace_agent_func_tramp, ftrace_agent_func_tramp_end)
    }
}

/// function_graph's fast path for `jmp`-form sites (template), with its return trampoline.
fn graph_jmp_template() -> &'static [u8] {
    if bench_noclock() {
        template(
            ftrace_agent_graphj_tramp_noclock,
            ftrace_agent_graphj_tramp_noclock_end,
        )
    } else {
        template(ftrace_agent_graphj_tramp, ftrace_agent_graphj_tramp_end)
    }
}

/// The TLS block's offset from the thread pointer (what `ftrace_agent_tls@GOTTPOFF` holds).
fn tls_offset() -> u64 {
    let off: u64;
    // SAFETY: reads our GOT entry.
    unsafe {
        core::arch::asm!(
            "mov {o}, qword ptr [rip + ftrace_agent_tls@GOTTPOFF]",
            o = out(reg) off,
            options(nostack, readonly, preserves_flags)
        );
    }
    off
}

/// Environment variable that makes the fast paths record a zero timestamp instead of reading
/// the TSC: for measuring what the trampolines cost beyond the clock (`cargo xtask
/// bench-vs-uftrace` reports it). Never set by the `ftrace` tool; the recording's timestamps
/// are meaningless with it.
pub const ENV_BENCH_NOCLOCK: &str = "FTRACE_AGENT_BENCH_NOCLOCK";

fn bench_noclock() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os(ENV_BENCH_NOCLOCK).is_some_and(|v| v == "1"))
}

/// The entry trampoline for `set_graph_function` roots.
pub fn root_trampoline() -> u64 {
    ftrace_agent_root_tramp as *const () as u64
}

/// The function_graph return trampoline.
pub fn return_trampoline() -> u64 {
    ftrace_agent_return_tramp as *const () as u64
}

/// The calling thread's TLS block (`TLS_BYTES` bytes, zero at thread start).
#[inline(always)]
pub fn tls_block() -> *mut u8 {
    let p: *mut u8;
    // SAFETY: reads the thread pointer and the static TLS offset of our block.
    unsafe {
        core::arch::asm!(
            "mov {p}, qword ptr [rip + ftrace_agent_tls@GOTTPOFF]",
            "add {p}, qword ptr fs:[0]",
            p = out(reg) p,
            options(nostack, readonly, preserves_flags)
        );
    }
    p
}

/// A stub page: `jmp *abs64` thunks at offset 0 (entry), 16 (root) and 48 (function_graph
/// fast path, `call` form), then copies of the function tracer's fast path (at 128) and of
/// function_graph's `jmp`-form fast path (at 1024, where the per-site thunks of
/// [`site_bytes`] jump).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stubs {
    /// Page address.
    pub page: u64,
}

impl Stubs {
    /// Where ordinary sites call.
    pub fn entry(&self) -> u64 {
        self.page
    }

    /// Where `-G` root sites call.
    pub fn root(&self) -> u64 {
        self.page + 16
    }

    /// Where sites call under the function tracer.
    pub fn func(&self) -> u64 {
        self.page + FUNC_OFF
    }

    /// Where ordinary sites call under the function_graph tracer (see [`site_bytes`] for the
    /// faster `jmp` form).
    pub fn graph(&self) -> u64 {
        self.page + 48
    }

    /// Where the function_graph site thunks jump.
    fn graph_jmp(&self) -> u64 {
        self.page + GRAPH_JMP_OFF
    }
}

/// The enabled bytes of the site at `ip` whose trampoline is `target` (one of `stubs`'
/// addresses): `call target`, except for ordinary function_graph sites on x86_64, which get
/// `jmp` to a thunk of their own (`push %rax; lea ip+5(%rip), %rax; jmp` to the stub page's
/// function_graph `jmp`-form entry) when one can be made. A site that calls pushes an entry
/// on the CPU's return stack buffer that no `ret` ever pops (the trampoline calls the body
/// itself, so that the body's `ret` is predicted); a site that jumps pushes nothing, and
/// every `ret` of the traced program stays predicted.
pub fn site_bytes(
    stubs: &Stubs,
    form: SiteForm,
    ip: u64,
    target: u64,
) -> Result<SiteBytes, OutOfRange> {
    if target == stubs.graph() && form.arch() == Arch::X86_64 && !THUNKS_OFF.load(Ordering::Relaxed)
    {
        if let Some(thunk) = graph_thunk(stubs, ip) {
            return Ok(SiteBytes::new(&x86::encode_jmp(ip, thunk)?));
        }
    }
    form.call(ip, target)
}

/// Bytes per function_graph site thunk.
const THUNK: u64 = 16;
/// Bytes per thunk region (a memfd mapped twice: R-X near the sites, RW anywhere).
const THUNK_REGION: u64 = 64 * 1024;

/// A region of site thunks: executed through `exec` (never writable), written through `write`
/// (never executable), so no mapping is ever writable and executable at once.
struct ThunkRegion {
    exec: u64,
    write: u64,
    used: u64,
}

/// The thunk regions, and the thunk made for each `(site, stub page)` (a site encoded again,
/// e.g. when the tracer is switched back to function_graph, gets the same thunk).
struct Thunks {
    regions: Vec<ThunkRegion>,
    made: std::collections::BTreeMap<(u64, u64), u64>,
}

static THUNKS: Mutex<Thunks> = Mutex::new(Thunks {
    regions: Vec::new(),
    made: std::collections::BTreeMap::new(),
});

/// The thunk of the function_graph site at `ip`: the one made before, or a new one in a
/// region within `rel32` reach of both the site and the stub page.
fn graph_thunk(stubs: &Stubs, ip: u64) -> Option<u64> {
    let (lo, hi) = (ip.min(stubs.page), (ip + 5).max(stubs.page + PAGE));
    let mut thunks = THUNKS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(&t) = thunks.made.get(&(ip, stubs.page)) {
        return Some(t);
    }
    let regions = &mut thunks.regions;
    let i = match regions.iter().position(|r| {
        r.used + THUNK <= THUNK_REGION && span_reaches(r.exec, r.exec + THUNK_REGION, lo, hi)
    }) {
        Some(i) => i,
        None => match new_thunk_region(lo, hi) {
            Some(r) => {
                regions.push(r);
                regions.len() - 1
            }
            None => {
                // Not again for every site: from now on sites use the `call` form.
                THUNKS_OFF.store(true, Ordering::Relaxed);
                return None;
            }
        },
    };
    let r = &mut regions[i];
    let thunk = r.exec + r.used;
    let mut code = [0xccu8; THUNK as usize];
    code[0] = 0x50; // push %rax
    code[1..4].copy_from_slice(&[0x48, 0x8d, 0x05]); // lea rel32(%rip), %rax
    code[4..8].copy_from_slice(&rel32(thunk + 8, ip + 5)?.to_le_bytes());
    code[8] = 0xe9; // jmp rel32
    code[9..13].copy_from_slice(&rel32(thunk + 13, stubs.graph_jmp())?.to_le_bytes());
    // SAFETY: `write + used` is inside the region's writable view, THUNK bytes free.
    unsafe {
        core::ptr::copy_nonoverlapping(code.as_ptr(), (r.write + r.used) as *mut u8, code.len())
    };
    r.used += THUNK;
    thunks.made.insert((ip, stubs.page), thunk);
    Some(thunk)
}

fn rel32(next: u64, target: u64) -> Option<i32> {
    i32::try_from(target.wrapping_sub(next) as i64).ok()
}

/// Whether every address of `[a_lo, a_hi)` is within `rel32` reach of every address of
/// `[b_lo, b_hi)`.
fn span_reaches(a_lo: u64, a_hi: u64, b_lo: u64, b_hi: u64) -> bool {
    a_hi.max(b_hi) - a_lo.min(b_lo) < REACH
}

fn new_thunk_region(lo: u64, hi: u64) -> Option<ThunkRegion> {
    static ATFORK: std::sync::Once = std::sync::Once::new();
    ATFORK.call_once(|| {
        // SAFETY: registers a plain function; no preconditions.
        unsafe { libc::pthread_atfork(None, None, Some(thunks_after_fork)) };
    });
    // SAFETY: plain syscalls on a descriptor we own; every failure path closes it.
    unsafe {
        let fd = libc::memfd_create(c"ftrace-agent-thunks".as_ptr(), libc::MFD_CLOEXEC);
        if fd < 0 {
            return None;
        }
        let len = THUNK_REGION as usize;
        if libc::ftruncate(fd, len as libc::off_t) != 0 {
            libc::close(fd);
            return None;
        }
        let write = libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        );
        if write == libc::MAP_FAILED {
            libc::close(fd);
            return None;
        }
        // Executable memfd mappings may be forbidden (`vm.memfd_noexec`): find out once,
        // rather than at every candidate address.
        let probe = libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_EXEC,
            libc::MAP_SHARED,
            fd,
            0,
        );
        if probe == libc::MAP_FAILED {
            libc::munmap(write, len);
            libc::close(fd);
            return None;
        }
        libc::munmap(probe, len);
        let exec = map_near(lo, hi, THUNK_REGION, |cand| {
            libc::mmap(
                cand as *mut _,
                len,
                libc::PROT_READ | libc::PROT_EXEC,
                libc::MAP_SHARED | libc::MAP_FIXED_NOREPLACE,
                fd,
                0,
            )
        });
        libc::close(fd);
        let Some(exec) = exec else {
            libc::munmap(write, len);
            return None;
        };
        Some(ThunkRegion {
            exec,
            write: write as u64,
            used: 0,
        })
    }
}

/// In a forked child: the thunk regions are shared with the parent (`MAP_SHARED`), which may
/// go on filling them; the child only uses the thunks it inherited and makes new ones in new
/// regions of its own.
extern "C" fn thunks_after_fork() {
    // The forking thread held no lock of ours across fork unless it was inside
    // `graph_thunk`; then the child makes no thunks (try_lock fails) rather than deadlock.
    if let Ok(mut thunks) = THUNKS.try_lock() {
        for r in thunks.regions.iter_mut() {
            r.used = THUNK_REGION;
        }
    } else {
        THUNKS_OFF.store(true, Ordering::Relaxed);
    }
}

/// No more thunks are made (a region could not be mapped, or a forked child could not take
/// the regions' lock): new function_graph sites use the `call` form.
static THUNKS_OFF: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

const PAGE: u64 = 4096;
/// Offset of the function tracer's fast path in a stub page.
const FUNC_OFF: u64 = 128;
/// Offset of function_graph's `jmp`-form fast path in a stub page.
const GRAPH_JMP_OFF: u64 = 1024;
const REACH: u64 = (1 << 31) - 2 * PAGE;

static STUB_PAGES: Mutex<Vec<u64>> = Mutex::new(Vec::new());
static STUBS_MADE: AtomicU64 = AtomicU64::new(0);

fn reaches(page: u64, lo: u64, hi: u64) -> bool {
    span_reaches(page, page + PAGE, lo, hi)
}

/// Stubs within `call rel32` reach of every address in `[lo, hi)`: an existing page if one is
/// close enough, else a new page mapped near the range.
pub fn stubs_near(lo: u64, hi: u64) -> Option<Stubs> {
    let mut pages = STUB_PAGES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(&p) = pages.iter().find(|&&p| reaches(p, lo, hi)) {
        return Some(Stubs { page: p });
    }
    // SAFETY: an anonymous private mapping at a free address (MAP_FIXED_NOREPLACE).
    let page = map_near(lo, hi, PAGE, |cand| unsafe {
        libc::mmap(
            cand as *mut _,
            PAGE as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    })?;
    let mut code = vec![0xccu8; PAGE as usize];
    for (off, target) in [
        (0, entry_trampoline()),
        (16, root_trampoline()),
        (48, graph_trampoline()),
    ] {
        code[off..off + 6].copy_from_slice(&[0xff, 0x25, 0, 0, 0, 0]);
        code[off + 6..off + 14].copy_from_slice(&target.to_le_bytes());
    }
    let slow_return = ftrace_agent_return_slow as *const () as u64;
    for (off, tpl, switch, next) in [
        (FUNC_OFF, func_template(), &handler::FAST_OK, GRAPH_JMP_OFF),
        (
            GRAPH_JMP_OFF,
            graph_jmp_template(),
            &handler::GRAPH_OK,
            PAGE,
        ),
    ] {
        let (off, end) = (off as usize, off as usize + tpl.len());
        assert!(end <= next as usize, "fast-path templates overlap");
        code[off..end].copy_from_slice(tpl);
        let data = &mut code[end - TEMPLATE_DATA..end];
        for (i, v) in [
            tls_offset(),
            switch.as_ptr() as u64,
            entry_trampoline(),
            slow_return,
        ]
        .into_iter()
        .enumerate()
        {
            data[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
    }
    // SAFETY: `page` is our fresh RW mapping.
    unsafe {
        core::ptr::copy_nonoverlapping(code.as_ptr(), page as *mut u8, code.len());
        libc::mprotect(
            page as *mut _,
            PAGE as usize,
            libc::PROT_READ | libc::PROT_EXEC,
        );
    }
    pages.push(page);
    STUBS_MADE.fetch_add(1, Ordering::Relaxed);
    Some(Stubs { page })
}

/// Maps `len` bytes within reach of `[lo, hi)` with `map(candidate)` (an `mmap` at that
/// address with `MAP_FIXED_NOREPLACE`), trying addresses ever further below and above.
fn map_near(lo: u64, hi: u64, len: u64, map: impl Fn(u64) -> *mut libc::c_void) -> Option<u64> {
    let lo_page = lo & !(PAGE - 1);
    let hi_page = hi.div_ceil(PAGE) * PAGE;
    for step in 0..2048u64 {
        let off = (step << 20) + PAGE * 16;
        let below = lo_page.checked_sub(off + len - PAGE);
        let above = hi_page.checked_add(off - PAGE);
        for cand in [below, above].into_iter().flatten() {
            let cand = cand & !(PAGE - 1);
            if cand < 0x10000 || !span_reaches(cand, cand + len, lo, hi) {
                continue;
            }
            let p = map(cand);
            if p == libc::MAP_FAILED {
                continue;
            }
            if p as u64 == cand {
                return Some(cand);
            }
            // SAFETY: an old kernel ignored the flag and mapped elsewhere: undo it.
            unsafe { libc::munmap(p, len as usize) };
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stubs_are_within_reach_and_jump_to_the_trampolines() {
        let here = stubs_are_within_reach_and_jump_to_the_trampolines as *const () as u64;
        let s = stubs_near(here, here + 100).unwrap();
        assert!(s.page.abs_diff(here) < 1 << 31);
        // SAFETY: the stub page is readable.
        let code = unsafe { core::slice::from_raw_parts(s.page as *const u8, 32) };
        assert_eq!(&code[..2], &[0xff, 0x25]);
        assert_eq!(
            u64::from_le_bytes(code[6..14].try_into().unwrap()),
            entry_trampoline()
        );
        assert_eq!(
            u64::from_le_bytes(code[22..30].try_into().unwrap()),
            root_trampoline()
        );
        assert_eq!(
            stubs_near(here + 4096, here + 8192),
            Some(s),
            "a close page is shared"
        );
    }

    /// Zeroed memory for a ring of `slots` slots in `mode`, and its writer (for `pid` 1,
    /// thread 2); the writer describes the memory returned, which must outlive its use.
    fn test_ring(slots: usize, mode: crate::buffer::SlotMode) -> (Vec<u64>, crate::buffer::Writer) {
        use crate::buffer::{self, HEADER_SIZE};
        let len = HEADER_SIZE + slots * buffer::SLOT_SIZE;
        let mut mem = vec![0u64; len / 8];
        // SAFETY: zeroed, 8-aligned, `len` bytes; a Vec's buffer stays where it is when the
        // Vec moves.
        let w = unsafe { buffer::init(mem.as_mut_ptr().cast(), len, mode, 1, 2, b"t") };
        (mem, w)
    }

    /// Sets the calling thread up as the agent registers a thread, for the fast paths to
    /// record: its state block writing to a new 64-slot overwrite ring (returned with the
    /// block: the memory must outlive every traced call), CPU 3, a shadow stack, tracing.
    fn register_test_thread() -> (&'static mut crate::handler::ThreadState, Vec<u64>) {
        use crate::handler;
        // SAFETY: this thread's own block, used by this thread only.
        let st = unsafe { &mut *handler::current() };
        let (mem, w) = test_ring(64, crate::buffer::SlotMode::Overwrite);
        st.writer = w;
        st.fallback_cpu = 3;
        st.cpu = &st.fallback_cpu;
        assert!(handler::alloc_shadow(st));
        st.state = 1;
        (st, mem)
    }

    fn thread_pointer() -> u64 {
        let p: u64;
        // SAFETY: reads the TCB self-pointer at %fs:0.
        unsafe {
            core::arch::asm!("mov {}, qword ptr fs:[0]", out(reg) p, options(nostack, readonly))
        };
        p
    }

    /// A traced function made at run time in a page near the stubs: the 5-byte window holds
    /// `window(site)`, the body returns rax + rdi + rsi + rdx + rcx + r8 + r9.
    fn make_function(stubs_for: impl Fn(&Stubs, u64) -> [u8; 5]) -> (u64, Stubs) {
        make_caller(stubs_for, None)
    }

    /// As [`make_function`], or with a body that only calls `callee` (`call callee; ret`).
    fn make_caller(
        stubs_for: impl Fn(&Stubs, u64) -> [u8; 5],
        callee: Option<u64>,
    ) -> (u64, Stubs) {
        let here = call_checked as *const () as u64;
        // SAFETY: an anonymous private mapping at a free address.
        let page = map_near(here, here + 100, PAGE, |cand| unsafe {
            libc::mmap(
                cand as *mut _,
                PAGE as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        })
        .unwrap();
        let stubs = stubs_near(page, page + PAGE).unwrap();
        let mut code = stubs_for(&stubs, page).to_vec();
        if let Some(callee) = callee {
            code.extend_from_slice(&x86::encode_call(page + 5, callee).unwrap());
            code.push(0xc3);
        }
        code.extend_from_slice(&[
            0x48, 0x01, 0xf8, // add %rdi, %rax
            0x48, 0x01, 0xf0, // add %rsi, %rax
            0x48, 0x01, 0xd0, // add %rdx, %rax
            0x48, 0x01, 0xc8, // add %rcx, %rax
            0x4c, 0x01, 0xc0, // add %r8, %rax
            0x4c, 0x01, 0xc8, // add %r9, %rax
            0xc3, // ret
        ]);
        // SAFETY: our fresh RW page, made R-X after the write.
        unsafe {
            core::ptr::copy_nonoverlapping(code.as_ptr(), page as *mut u8, code.len());
            libc::mprotect(
                page as *mut _,
                PAGE as usize,
                libc::PROT_READ | libc::PROT_EXEC,
            );
        }
        (page, stubs)
    }

    /// Calls `f` with distinct values in every caller-saved register; checks the result and
    /// that every register but rax comes back unchanged; returns the address `f` returned to.
    fn call_checked(f: u64) -> u64 {
        let (rax, rdi, rsi, rdx, rcx, r8, r9, r10, r11): (
            u64,
            u64,
            u64,
            u64,
            u64,
            u64,
            u64,
            u64,
            u64,
        );
        let (x0, x15): (f64, f64);
        let ret: u64;
        // SAFETY: `f` is a function of the shape `make_function` builds; every register it
        // may touch is declared.
        unsafe {
            core::arch::asm!(
                "call {f}",
                "2:",
                "lea {ret}, [rip + 2b]",
                f = in(reg) f,
                ret = out(reg) ret,
                inout("rax") 1u64 => rax,
                inout("rdi") 2u64 => rdi,
                inout("rsi") 4u64 => rsi,
                inout("rdx") 8u64 => rdx,
                inout("rcx") 16u64 => rcx,
                inout("r8") 32u64 => r8,
                inout("r9") 64u64 => r9,
                inout("r10") 128u64 => r10,
                inout("r11") 256u64 => r11,
                inout("xmm0") 0.5f64 => x0,
                inout("xmm15") 1.5f64 => x15,
            );
        }
        assert_eq!(rax, 127, "the body saw every argument register and rax");
        assert_eq!(
            (rdi, rsi, rdx, rcx, r8, r9, r10, r11),
            (2, 4, 8, 16, 32, 64, 128, 256),
            "caller-saved registers come back as the body left them"
        );
        assert_eq!((x0, x15), (0.5, 1.5));
        ret
    }

    #[test]
    fn fast_paths_record_and_preserve_registers() {
        // The fast-path switches are process-wide: one test at a time sets them. On a thread
        // of its own (its state block is set up by hand).
        let _switches = crate::handler::PROCESS_SWITCHES
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        std::thread::spawn(|| {
            use crate::buffer::{self, KIND_FUNC, KIND_GRAPH_ENT, KIND_GRAPH_RET, SlotMode, depth};
            use crate::handler::{FAST_OK, GRAPH_OK};
            // (`mem` outlives every traced call below.)
            let (st, mem) = register_test_thread();
            FAST_OK.store(1, Ordering::Relaxed);
            GRAPH_OK.store(1, Ordering::Relaxed);
            type Window = fn(&Stubs, u64) -> [u8; 5];
            let forms: [(&str, Window); 3] = [
                ("function", |s, ip| x86::encode_call(ip, s.func()).unwrap()),
                ("graph call", |s, ip| {
                    x86::encode_call(ip, s.graph()).unwrap()
                }),
                ("graph jmp", |s, ip| {
                    let b = site_bytes(s, SiteForm::X86Nop5, ip, s.graph()).unwrap();
                    b.as_slice().try_into().unwrap()
                }),
            ];
            for (name, window) in forms {
                let (f, _) = make_function(window);
                // SAFETY: the header lives in `mem`.
                let before = unsafe { st.writer.ring() }.head();
                let parent = call_checked(f);
                let bytes: Vec<u8> = mem.iter().flat_map(|w| w.to_ne_bytes()).collect();
                let ev = buffer::read(&bytes).unwrap().events;
                let ev = &ev[before as usize..];
                if name == "function" {
                    assert_eq!(ev.len(), 1, "{name}");
                    assert_eq!((ev[0].kind(), ev[0].ip, ev[0].arg), (KIND_FUNC, f, parent));
                } else {
                    assert_eq!(ev.len(), 2, "{name}");
                    assert_eq!(
                        (ev[0].kind(), ev[0].ip, ev[0].arg),
                        (KIND_GRAPH_ENT, f, parent)
                    );
                    assert_eq!(
                        (ev[1].kind(), ev[1].ip, ev[1].arg),
                        (KIND_GRAPH_RET, f, ev[0].ts)
                    );
                    assert!(ev[1].ts >= ev[0].ts, "{name}");
                    assert_eq!((depth(&ev[0]), depth(&ev[1])), (0, 0), "{name}");
                    assert_eq!(st.depth, 0, "{name}: the shadow frame is popped");
                }
                assert!(ev.iter().all(|e| e.cpu == 3 && e.ts != 0), "{name}");
                // Switched off: the sites go through the full-save path, which records nothing
                // while tracing is off, and the function still computes the same.
                FAST_OK.store(0, Ordering::Relaxed);
                GRAPH_OK.store(0, Ordering::Relaxed);
                call_checked(f);
                // SAFETY: as above.
                let head = unsafe { st.writer.ring() }.head();
                assert_eq!(
                    head,
                    before + ev.len() as u64,
                    "{name}: nothing recorded when off"
                );
                FAST_OK.store(1, Ordering::Relaxed);
                GRAPH_OK.store(1, Ordering::Relaxed);
            }
            // Nested: a traced function calling a traced function, both forms.
            for (name, window) in &forms[1..] {
                let (inner, _) = make_function(window);
                let (outer, _) = make_caller(window, Some(inner));
                // SAFETY: the header lives in `mem`.
                let before = unsafe { st.writer.ring() }.head();
                let parent = call_checked(outer);
                let bytes: Vec<u8> = mem.iter().flat_map(|w| w.to_ne_bytes()).collect();
                let ev = buffer::read(&bytes).unwrap().events;
                let ev = &ev[before as usize..];
                let got: Vec<_> = ev.iter().map(|e| (e.kind(), e.ip, depth(e))).collect();
                assert_eq!(
                    got,
                    [
                        (KIND_GRAPH_ENT, outer, 0),
                        (KIND_GRAPH_ENT, inner, 1),
                        (KIND_GRAPH_RET, inner, 1),
                        (KIND_GRAPH_RET, outer, 0)
                    ],
                    "{name}"
                );
                assert_eq!(
                    (ev[0].arg, ev[1].arg),
                    (parent, outer + 10),
                    "{name}: parents"
                );
                assert_eq!(
                    (ev[2].arg, ev[3].arg),
                    (ev[1].ts, ev[0].ts),
                    "{name}: call times"
                );
                assert_eq!(st.depth, 0, "{name}");
            }
            // A full producer/consumer ring: the fast paths drop, count and give the
            // reservation back (head stays at the capacity), and the program runs on.
            for (name, window) in forms {
                // (`small` outlives the calls below; the writer is reset after.)
                let (small, w) = test_ring(2, SlotMode::ProducerConsumer);
                st.writer = w;
                let (f, _) = make_function(window);
                for _ in 0..3 {
                    call_checked(f);
                }
                // SAFETY: the header lives in `small`.
                let ring = unsafe { st.writer.ring() };
                let per_call = if name == "function" { 1 } else { 2 };
                assert_eq!(ring.head(), 2, "{name}: reservations given back");
                assert_eq!(ring.dropped(), 3 * per_call - 2, "{name}: drops counted");
                assert_eq!(st.depth, 0, "{name}");
                let bytes: Vec<u8> = small.iter().flat_map(|w| w.to_ne_bytes()).collect();
                let c = buffer::read(&bytes).unwrap();
                assert_eq!(c.events.len(), 2, "{name}");
                assert!(c.events.iter().all(|e| e.ip == f), "{name}");
                // `small` goes now; nothing traced runs until the next `init` or the end.
                drop(small);
            }
            // The tool offers a larger ring and is behind (here: the ring is full): a fast
            // path that finds its copy of the limit passed sets the thread's state to GROW
            // (its next event takes the handlers' path); the agent's answer (GROWN) and no
            // offer leave it registered.
            for (name, window) in forms {
                for (word, moves) in [
                    (0, false),
                    (ftrace_ringbuf::slot::GROWN, false),
                    (4096, true),
                ] {
                    // (`small` outlives the calls below; the writer is reset after.)
                    let (small, w) = test_ring(2, SlotMode::ProducerConsumer);
                    st.writer = w;
                    // SAFETY: the header lives in `small`.
                    unsafe { st.writer.ring() }.offer_to_grow(word);
                    let (f, _) = make_function(window);
                    // Up to the ring's second slot, the first event that looks at the limit (a
                    // two-slot ring's writer looks at every event from its first lap on) and
                    // finds less than a quarter of the ring left, no further: the next would
                    // take the handlers' path, which moves the thread (or not) as the
                    // process-wide switches other tests left say.
                    let calls = if name == "function" { 2 } else { 1 };
                    for _ in 0..calls {
                        call_checked(f);
                    }
                    let want = if moves { crate::grow::GROW } else { 1 };
                    assert_eq!(st.state, want, "{name}, grow word {word:#x}");
                    assert_eq!(st.depth, 0, "{name}");
                    st.state = 1;
                    drop(small);
                }
            }
            // An offer is taken only when the tool is behind: a fast path looks at the
            // consumer's limit again an eighth of the ring on (8 slots of 64), and moves
            // once less than a quarter of the ring is left ahead of it.
            assert_eq!(
                (
                    ftrace_ringbuf::slot::LOOK_AGAIN_EVERY,
                    ftrace_ringbuf::slot::BEHIND_BELOW
                ),
                (8, 4)
            );
            for (name, window) in forms {
                // (`mem` outlives the calls below; the writer is reset after.)
                let (mem, w) = test_ring(64, SlotMode::ProducerConsumer);
                st.writer = w;
                // SAFETY: the header lives in `mem`.
                let ring = unsafe { st.writer.ring() };
                ring.offer_to_grow(1 << 20);
                let (f, _) = make_function(window);
                while ring.head() < 40 {
                    call_checked(f);
                }
                // (On the first lap it looked at 9, 18, 27 and 36, and then had 44 to go to.)
                // The tool reads them all: its limit is 40 + 63.
                let mut cursor = ftrace_ringbuf::slot::Cursor::default();
                ring.consume(&mut cursor, ftrace_ringbuf::slot::Drain::Live, |_, _| {});
                // Index 45 looks (58 slots left ahead: not behind), then 54, 63, 72 and 81
                // (22); index 90 finds 13 left, and the thread is to move: the function
                // tracer's next event, or function_graph's entry after this exit.
                let mut heads = Vec::new();
                // (A volatile read: the fast paths write the state behind this reference.)
                // SAFETY: the thread's own state block, live.
                while unsafe { core::ptr::read_volatile(&st.state) } == 1 {
                    call_checked(f);
                    heads.push(ring.head());
                    assert!(ring.head() < 100, "{name}: never moved");
                }
                assert_eq!(st.state, crate::grow::GROW, "{name}");
                let head = if name == "function" { 91 } else { 92 };
                assert_eq!(ring.head(), head, "{name}: moved at index 90, {heads:?}");
                assert_eq!(ring.dropped(), 0, "{name}");
                st.state = 1;
                drop(mem);
            }
            FAST_OK.store(0, Ordering::Relaxed);
            GRAPH_OK.store(0, Ordering::Relaxed);
            st.state = 0;
        })
        .join()
        .unwrap();
    }

    /// A plain `-pg` function: its frame set up, `call mcount` (the agent's) at +4, then the
    /// body [`make_function`] builds (rax + rdi + rsi + rdx + rcx + r8 + r9).
    #[unsafe(naked)]
    extern "C" fn pg_function() {
        core::arch::naked_asm!(
            "push rbp",
            "mov rbp, rsp",
            "call {mcount}",
            "add rax, rdi",
            "add rax, rsi",
            "add rax, rdx",
            "add rax, rcx",
            "add rax, r8",
            "add rax, r9",
            "pop rbp",
            "ret",
            mcount = sym crate::mcount::mcount,
        )
    }

    /// An `mcount` fast-path test, on a thread of its own (the switches are process-wide: one
    /// test at a time sets them) that [`register_test_thread`] sets up: with `switch` and
    /// `MCOUNT_ON` on, one call of [`pg_function`] records what `check` asserts (given the
    /// events, the function, the address it returned to and the thread's state); every event
    /// on CPU 3 with a timestamp; then three calls into a full 2-slot producer/consumer ring
    /// drop `dropped` events, counted, each returning where it should with the shadow stack
    /// empty; then, `switch` off, `mcount` takes the full-save path, which records nothing
    /// while tracing is off.
    fn mcount_fast_path_test(
        switch: &'static core::sync::atomic::AtomicU8,
        dropped: u64,
        check: fn(&[crate::buffer::SlotEvent], u64, u64, &crate::handler::ThreadState),
    ) {
        let _switches = crate::handler::PROCESS_SWITCHES
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        std::thread::spawn(move || {
            use crate::buffer::{self, SlotMode};
            use crate::mcount::MCOUNT_ON;
            // (`mem` outlives every traced call below.)
            let (st, mem) = register_test_thread();
            switch.store(1, Ordering::Relaxed);
            MCOUNT_ON.store(1, Ordering::Relaxed);
            let f = pg_function as *const () as u64;
            let parent = call_checked(f);
            let bytes: Vec<u8> = mem.iter().flat_map(|w| w.to_ne_bytes()).collect();
            let ev = buffer::read(&bytes).unwrap().events;
            check(&ev, f, parent, st);
            assert!(ev.iter().all(|e| e.cpu == 3 && e.ts != 0));
            let (small, w) = test_ring(2, SlotMode::ProducerConsumer);
            st.writer = w;
            for _ in 0..3 {
                assert_eq!(call_checked(f), parent);
                assert_eq!(st.depth, 0);
            }
            // SAFETY: the header lives in `small`.
            let ring = unsafe { st.writer.ring() };
            assert_eq!((ring.head(), ring.dropped()), (2, dropped));
            drop(small);
            let (mem, w) = test_ring(64, SlotMode::Overwrite);
            st.writer = w;
            switch.store(0, Ordering::Relaxed);
            call_checked(f);
            // SAFETY: the header lives in `mem`.
            assert_eq!(unsafe { st.writer.ring() }.head(), 0);
            drop(mem);
            MCOUNT_ON.store(0, Ordering::Relaxed);
            st.state = 0;
        })
        .join()
        .unwrap();
    }

    /// While the function tracer's fast path is on, `mcount` records in assembly: the `call
    /// mcount` as the function's address and the traced function's caller as its parent,
    /// every register preserved; a full ring drops and counts; off, it takes the full-save
    /// path, which records nothing while tracing is off.
    #[test]
    fn the_mcount_fast_path_records_and_preserves_registers() {
        // The second call's event fills the ring, the third is dropped.
        mcount_fast_path_test(&crate::handler::FAST_OK, 1, |ev, f, parent, _| {
            assert_eq!(ev.len(), 1);
            assert_eq!(
                (ev[0].kind(), ev[0].ip, ev[0].arg),
                (crate::buffer::KIND_FUNC, f + 4, parent)
            );
        });
    }

    /// While function_graph's fast path is on, `mcount` records the entry in assembly (the
    /// `call mcount` as the function's address, its caller as the parent) and hooks the
    /// function's return, whose exit the return trampoline records; every register
    /// preserved, the shadow frame popped; a full ring drops and counts both; off, the
    /// full-save path, which records nothing while tracing is off.
    #[test]
    fn the_mcount_graph_fast_path_records_and_preserves_registers() {
        // The first call's two events fill the ring, the next two calls' four are dropped.
        mcount_fast_path_test(&crate::handler::GRAPH_OK, 4, |ev, f, parent, st| {
            use crate::buffer::{KIND_GRAPH_ENT, KIND_GRAPH_RET, depth};
            assert_eq!(ev.len(), 2);
            assert_eq!(
                (ev[0].kind(), ev[0].ip, ev[0].arg),
                (KIND_GRAPH_ENT, f + 4, parent)
            );
            assert_eq!(
                (ev[1].kind(), ev[1].ip, ev[1].arg),
                (KIND_GRAPH_RET, f + 4, ev[0].ts)
            );
            assert!(ev[1].ts >= ev[0].ts);
            assert_eq!((depth(&ev[0]), depth(&ev[1])), (0, 0));
            assert_eq!(st.depth, 0, "the shadow frame is popped");
        });
    }

    #[test]
    fn graph_sites_jump_to_a_thunk_of_their_own() {
        let here = graph_sites_jump_to_a_thunk_of_their_own as *const () as u64;
        let s = stubs_near(here, here + 100).unwrap();
        let decode = |ip: u64, b: &[u8]| x86::decode(ip, b).unwrap().insn;
        let b = site_bytes(&s, SiteForm::X86Nop5, here, s.func()).unwrap();
        assert_eq!(decode(here, &b), x86::Insn::Call { target: s.func() });
        let mut thunks = Vec::new();
        for ip in [here, here + 64] {
            let b = site_bytes(&s, SiteForm::X86Nop5Disp8, ip, s.graph()).unwrap();
            let x86::Insn::Jmp { target: thunk } = decode(ip, &b) else {
                panic!("not a jmp: {b:?}");
            };
            // SAFETY: thunks are readable.
            let t = unsafe { core::slice::from_raw_parts(thunk as *const u8, THUNK as usize) };
            assert_eq!(
                &t[..4],
                &[0x50, 0x48, 0x8d, 0x05],
                "push %rax; lea ...(%rip), %rax"
            );
            let lea = i32::from_le_bytes(t[4..8].try_into().unwrap()) as i64;
            assert_eq!(
                (thunk + 8).wrapping_add(lea as u64),
                ip + 5,
                "rax = the body"
            );
            assert_eq!(
                decode(thunk + 8, &t[8..13]),
                x86::Insn::Jmp {
                    target: s.graph_jmp()
                }
            );
            thunks.push(thunk);
        }
        assert_ne!(thunks[0], thunks[1]);
        let again = site_bytes(&s, SiteForm::X86Nop5Disp8, here, s.graph()).unwrap();
        assert_eq!(
            decode(here, &again),
            x86::Insn::Jmp { target: thunks[0] },
            "a site encoded again keeps its thunk"
        );
        // The thunks' target: a copy of the template, its data block filled in.
        let tpl = graph_jmp_template();
        // SAFETY: the stub page is readable.
        let copy = unsafe { core::slice::from_raw_parts(s.graph_jmp() as *const u8, tpl.len()) };
        let code = tpl.len() - TEMPLATE_DATA;
        assert_eq!(copy[..code], tpl[..code]);
        let data: Vec<u64> = copy[code..]
            .chunks(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(
            data,
            [
                tls_offset(),
                handler::GRAPH_OK.as_ptr() as u64,
                entry_trampoline(),
                ftrace_agent_return_slow as *const () as u64
            ]
        );
        assert_eq!(
            tls_offset().wrapping_add(thread_pointer()),
            tls_block() as u64
        );
        // No mapping of ours is ever writable and executable.
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let line = maps
            .lines()
            .find(|l| {
                let (a, b) = l.split_once(' ').unwrap().0.split_once('-').unwrap();
                let (a, b) = (
                    u64::from_str_radix(a, 16).unwrap(),
                    u64::from_str_radix(b, 16).unwrap(),
                );
                (a..b).contains(&thunks[0])
            })
            .unwrap();
        assert!(line.contains(" r-xs "), "{line}");
    }

    #[test]
    fn tls_block_is_per_thread_and_zeroed() {
        let a = tls_block();
        // SAFETY: the block is TLS_BYTES long.
        unsafe { *a.add(TLS_BYTES - 1) = 7 };
        let (b, zero) = std::thread::spawn(|| {
            let b = tls_block();
            // SAFETY: as above.
            (b as usize, unsafe { *b.add(TLS_BYTES - 1) })
        })
        .join()
        .unwrap();
        assert_ne!(a as usize, b);
        assert_eq!(zero, 0);
        // SAFETY: as above.
        assert_eq!(unsafe { *a.add(TLS_BYTES - 1) }, 7);
    }
}
