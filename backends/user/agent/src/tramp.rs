//! The trampolines (assembly) and the stub pages that put them within reach of every site.
//!
//! A patched site is `call rel32`, which reaches ±2 GiB; the agent's own text may be anywhere.
//! So each object gets a stub page mapped within reach (shared by objects close to each other),
//! holding `jmp *abs64` thunks to [`entry_trampoline`] (normal sites) and its `-G` root variant.
//!
//! Entry trampoline: entered from the site's `call` with `(%rsp)` = the address after the site
//! and `8(%rsp)` = the traced function's return address; rsp is 16-byte aligned. It saves every
//! caller-saved register (rax, rcx, rdx, rsi, rdi, r8–r11 and xmm0–15: argument registers, the
//! varargs count, the static chain, and whatever a caller compiled with inter-procedural
//! register allocation keeps live across the call), passes the thread's state block
//! (initial-exec TLS, no `__tls_get_addr`), calls the handler and restores everything: the
//! traced function computes exactly what it would untraced.
//!
//! Return trampoline (function_graph): the traced function `ret`s into it; it saves the return
//! registers (rax, rdx, xmm0, xmm1) and every other caller-saved register, asks the handler for the original return address (popped
//! from the per-thread shadow stack) and `ret`s there.

use core::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

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
    pushq %rax
    pushq %rdi
    pushq %rsi
    pushq %rdx
    pushq %rcx
    pushq %r8
    pushq %r9
    pushq %r10
    subq $256, %rsp
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
    movq 16(%rbp), %rdi
    leaq 24(%rbp), %rdx
    movq (%rdx), %rsi
    movq ftrace_agent_tls@GOTTPOFF(%rip), %rcx
    addq %fs:0, %rcx
    movl %r11d, %r8d
    call {on_entry}
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
    addq $256, %rsp
    popq %r10
    popq %r9
    popq %r8
    popq %rcx
    popq %rdx
    popq %rsi
    popq %rdi
    popq %rax
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

    // Function tracer: entered from the site's call; touches rax, rcx, rdx, rsi (restored).
    .macro FTRACE_AGENT_FUNC name, noclock
    .p2align 5
    .globl \name
    .hidden \name
    .type \name,@function
\name:
    cmpb $0, {fast_ok}(%rip)
    je ftrace_agent_entry_tramp
    pushq %rax
    pushq %rcx
    pushq %rdx
    pushq %rsi
    // 0: rsi, 8: rdx, 16: rcx, 24: rax, 32: the address after the site, 40: parent
    movq ftrace_agent_tls@GOTTPOFF(%rip), %rsi
    addq %fs:0, %rsi
    cmpq $1, {off_state}(%rsi)
    jne 8f
    FTRACE_AGENT_CLOCK \noclock
    movq {off_header}(%rsi), %rcx
    movl $1, %eax
    xaddq %rax, {off_head}(%rcx)
    cmpq {off_limit}(%rsi), %rax
    ja 9f
    movl {off_shift}(%rsi), %ecx
    btq %rcx, %rax
    sbbl %ecx, %ecx
    andl ${lap_bit}, %ecx
    orl ${kind_func}, %ecx
    andq {off_mask}(%rsi), %rax
    shlq $5, %rax
    addq {off_slots}(%rsi), %rax
    movq %rdx, 0(%rax)
    movq 32(%rsp), %rdx
    subq $5, %rdx
    movq %rdx, 8(%rax)
    movq 40(%rsp), %rdx
    movq %rdx, 16(%rax)
    movq {off_cpu}(%rsi), %rdx
    movl (%rdx), %edx
    movl %edx, 28(%rax)
    movl %ecx, 24(%rax)
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
    jmp ftrace_agent_entry_tramp
    .size \name, .-\name
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
    movq 48(%rsp), %rcx
    movq %rcx, 0(%rax)
    movq 40(%rsp), %rcx
    subq $5, %rcx
    movq %rcx, 8(%rax)
    movq %rdx, 16(%rax)
    leaq 48(%rsp), %rcx
    movq %rcx, 24(%rax)
    movq {off_header}(%rsi), %rcx
    movl $1, %eax
    xaddq %rax, {off_head}(%rcx)
    cmpq {off_limit}(%rsi), %rax
    ja 2f
    movl {off_shift}(%rsi), %ecx
    btq %rcx, %rax
    sbbl %ecx, %ecx
    andl ${lap_bit}, %ecx
    shll $8, %edi
    orl %edi, %ecx
    orl ${kind_ent}, %ecx
    andq {off_mask}(%rsi), %rax
    shlq $5, %rax
    addq {off_slots}(%rsi), %rax
    movq %rdx, 0(%rax)
    movq 40(%rsp), %rdx
    subq $5, %rdx
    movq %rdx, 8(%rax)
    movq 48(%rsp), %rdx
    movq %rdx, 16(%rax)
    movq {off_cpu}(%rsi), %rdx
    movl (%rdx), %edx
    movl %edx, 28(%rax)
    movl %ecx, 24(%rax)
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
    movq {off_header}(%rsi), %rdi
    movl $1, %eax
    xaddq %rax, {off_head}(%rdi)
    cmpq {off_limit}(%rsi), %rax
    ja 9f
    movl {off_shift}(%rsi), %edi
    btq %rdi, %rax
    sbbl %edi, %edi
    andl ${lap_bit}, %edi
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
    .size \name, .-\name
    .endm

    FTRACE_AGENT_FUNC ftrace_agent_func_tramp, 0
    FTRACE_AGENT_FUNC ftrace_agent_func_tramp_noclock, 1
    FTRACE_AGENT_GRAPH ftrace_agent_graph_tramp, ftrace_agent_return_tramp, 0
    FTRACE_AGENT_GRAPH ftrace_agent_graph_tramp_noclock, ftrace_agent_return_tramp_noclock, 1

    .p2align 4
    .hidden ftrace_agent_return_slow
    .type ftrace_agent_return_slow,@function
ftrace_agent_return_slow:
    subq $8, %rsp
    pushq %rax
    pushq %rdx
    pushq %rcx
    pushq %rsi
    pushq %rdi
    pushq %r8
    pushq %r9
    pushq %r10
    pushq %r11
    subq $256, %rsp
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
    movq ftrace_agent_tls@GOTTPOFF(%rip), %rdi
    addq %fs:0, %rdi
    leaq 336(%rsp), %rsi
    call {on_return}
    movq %rax, 328(%rsp)
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
    addq $256, %rsp
    popq %r11
    popq %r10
    popq %r9
    popq %r8
    popq %rdi
    popq %rsi
    popq %rcx
    popq %rdx
    popq %rax
    ret
    .size ftrace_agent_return_slow, .-ftrace_agent_return_slow
    .text
"#,
    on_entry = sym crate::handler::on_entry,
    on_return = sym crate::handler::on_return,
    fast_ok = sym crate::handler::FAST_OK,
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
    off_limit = const core::mem::offset_of!(crate::handler::ThreadState, writer) + core::mem::offset_of!(crate::buffer::Writer, limit),
    lap_bit = const crate::buffer::KIND_LAP_BIT,
    off_cpu = const core::mem::offset_of!(crate::handler::ThreadState, cpu),
    off_head = const core::mem::offset_of!(crate::buffer::BufHeader, head),
    kind_func = const crate::buffer::KIND_FUNC,
    options(att_syntax)
);

// The fast paths test `state == 1 && guard == 0` as one 64-bit compare with 1.
const _: () = assert!(
    core::mem::offset_of!(crate::handler::ThreadState, guard)
        == core::mem::offset_of!(crate::handler::ThreadState, state) + 4
        && core::mem::offset_of!(crate::handler::ThreadState, state) % 8 == 0
);

unsafe extern "C" {
    fn ftrace_agent_graph_tramp();
    fn ftrace_agent_graph_tramp_noclock();
    fn ftrace_agent_func_tramp();
    fn ftrace_agent_func_tramp_noclock();
    fn ftrace_agent_entry_tramp();
    fn ftrace_agent_root_tramp();
    fn ftrace_agent_return_tramp();
}

/// The entry trampoline for ordinary sites.
pub fn entry_trampoline() -> u64 {
    ftrace_agent_entry_tramp as *const () as u64
}

/// The function tracer's entry trampoline: records in assembly (no register beyond rax, rcx,
/// rdx, rsi and r8 is touched, all restored) when the thread is registered, the clock is the
/// TSC and nothing nests; else it continues in [`entry_trampoline`].
pub fn func_trampoline() -> u64 {
    if bench_noclock() {
        ftrace_agent_func_tramp_noclock as *const () as u64
    } else {
        ftrace_agent_func_tramp as *const () as u64
    }
}

/// The function_graph entry trampoline: pushes the shadow frame and records in assembly when
/// the thread is registered, the clock is the TSC, no `-G`/`--max-depth` applies and nothing
/// nests; else it continues in [`entry_trampoline`]. Its return counterpart falls back to the
/// full-save return path for frames it cannot pop (roots, frames skipped by `longjmp`).
pub fn graph_trampoline() -> u64 {
    if bench_noclock() {
        ftrace_agent_graph_tramp_noclock as *const () as u64
    } else {
        ftrace_agent_graph_tramp as *const () as u64
    }
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

/// A stub page: `jmp *abs64` thunks at offset 0 (entry), 16 (root), 32 (function fast path)
/// and 48 (function_graph fast path).
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
        self.page + 32
    }

    /// Where ordinary sites call under the function_graph tracer.
    pub fn graph(&self) -> u64 {
        self.page + 48
    }
}

const PAGE: u64 = 4096;
const REACH: u64 = (1 << 31) - 2 * PAGE;

static STUB_PAGES: Mutex<Vec<u64>> = Mutex::new(Vec::new());
static STUBS_MADE: AtomicU64 = AtomicU64::new(0);

fn reaches(page: u64, lo: u64, hi: u64) -> bool {
    page.abs_diff(lo) < REACH && (page + PAGE).abs_diff(hi) < REACH
}

/// Stubs within `call rel32` reach of every address in `[lo, hi)`: an existing page if one is
/// close enough, else a new page mapped near the range.
pub fn stubs_near(lo: u64, hi: u64) -> Option<Stubs> {
    let mut pages = STUB_PAGES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(&p) = pages.iter().find(|&&p| reaches(p, lo, hi)) {
        return Some(Stubs { page: p });
    }
    let page = map_near(lo, hi)?;
    let mut code = [0xccu8; 64];
    for (off, target) in [
        (0, entry_trampoline()),
        (16, root_trampoline()),
        (32, func_trampoline()),
        (48, graph_trampoline()),
    ] {
        code[off..off + 6].copy_from_slice(&[0xff, 0x25, 0, 0, 0, 0]);
        code[off + 6..off + 14].copy_from_slice(&target.to_le_bytes());
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

fn map_near(lo: u64, hi: u64) -> Option<u64> {
    let lo_page = lo & !(PAGE - 1);
    let hi_page = hi.div_ceil(PAGE) * PAGE;
    for step in 0..2048u64 {
        let off = (step << 20) + PAGE * 16;
        let below = lo_page.checked_sub(off);
        let above = hi_page.checked_add(off - PAGE);
        for cand in [below, above].into_iter().flatten() {
            let cand = cand & !(PAGE - 1);
            if cand < 0x10000 || !reaches(cand, lo, hi) {
                continue;
            }
            // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping.
            let p = unsafe {
                libc::mmap(
                    cand as *mut _,
                    PAGE as usize,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                    -1,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                continue;
            }
            if p as u64 == cand {
                return Some(cand);
            }
            // SAFETY: an old kernel ignored the flag and mapped elsewhere: undo it.
            unsafe { libc::munmap(p, PAGE as usize) };
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
