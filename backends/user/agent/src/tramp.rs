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


    .p2align 4
    .globl ftrace_agent_func_tramp
    .hidden ftrace_agent_func_tramp
    .type ftrace_agent_func_tramp,@function
ftrace_agent_func_tramp:
    pushq %rax
    pushq %rcx
    pushq %rdx
    pushq %rsi
    pushq %r8
    cmpb $0, {fast_ok}(%rip)
    je 8f
    movq ftrace_agent_tls@GOTTPOFF(%rip), %rsi
    addq %fs:0, %rsi
    cmpl $0, {off_guard}(%rsi)
    jne 8f
    cmpl $1, {off_state}(%rsi)
    jne 8f
    rdtsc
    shlq $32, %rdx
    orq %rdx, %rax
    movq %rax, %r8
    movq {off_header}(%rsi), %rcx
    movl $1, %eax
    xaddq %rax, {off_head}(%rcx)
    cmpl $0, {off_overwrite}(%rsi)
    jne 1f
    cmpq {off_mask}(%rsi), %rax
    ja 9f
1:
    movq %rax, %rdx
    movl {off_shift}(%rsi), %ecx
    shrq %cl, %rdx
    andl $1, %edx
    shll $7, %edx
    orl ${kind_func}, %edx
    andq {off_mask}(%rsi), %rax
    shlq $5, %rax
    addq {off_slots}(%rsi), %rax
    movq %r8, 0(%rax)
    movq 40(%rsp), %rcx
    subq $5, %rcx
    movq %rcx, 8(%rax)
    movq 48(%rsp), %rcx
    movq %rcx, 16(%rax)
    movq {off_cpu}(%rsi), %rcx
    movl (%rcx), %ecx
    movl %ecx, 28(%rax)
    movl %edx, 24(%rax)
9:
    popq %r8
    popq %rsi
    popq %rdx
    popq %rcx
    popq %rax
    ret
8:
    popq %r8
    popq %rsi
    popq %rdx
    popq %rcx
    popq %rax
    jmp ftrace_agent_entry_tramp
    .size ftrace_agent_func_tramp, .-ftrace_agent_func_tramp


    .p2align 4
    .globl ftrace_agent_graph_tramp
    .hidden ftrace_agent_graph_tramp
    .type ftrace_agent_graph_tramp,@function
ftrace_agent_graph_tramp:
    pushq %rax
    pushq %rcx
    pushq %rdx
    pushq %rsi
    pushq %rdi
    pushq %r8
    pushq %r9
    cmpb $0, {graph_ok}(%rip)
    je 8f
    movq ftrace_agent_tls@GOTTPOFF(%rip), %rsi
    addq %fs:0, %rsi
    cmpl $0, {off_guard}(%rsi)
    jne 8f
    cmpl $1, {off_state}(%rsi)
    jne 8f
    movq {off_shadow}(%rsi), %rdi
    testq %rdi, %rdi
    jz 8f
    movq {off_depth}(%rsi), %r8
    cmpq ${shadow_frames}, %r8
    jae 8f
    rdtsc
    shlq $32, %rdx
    orq %rax, %rdx
    movq {off_header}(%rsi), %rcx
    movl $1, %eax
    xaddq %rax, {off_head}(%rcx)
    cmpl $0, {off_overwrite}(%rsi)
    jne 1f
    cmpq {off_mask}(%rsi), %rax
    ja 2f
1:
    movq %rax, %r9
    andq {off_mask}(%rsi), %rax
    shlq $5, %rax
    addq {off_slots}(%rsi), %rax
    movq %rdx, 0(%rax)
    movq 56(%rsp), %rcx
    subq $5, %rcx
    movq %rcx, 8(%rax)
    movq 64(%rsp), %rcx
    movq %rcx, 16(%rax)
    movq {off_cpu}(%rsi), %rcx
    movl (%rcx), %ecx
    movl %ecx, 28(%rax)
    movl {off_shift}(%rsi), %ecx
    shrq %cl, %r9
    andl $1, %r9d
    shll $7, %r9d
    orl ${kind_ent}, %r9d
    movl %r8d, %ecx
    shll $8, %ecx
    orl %ecx, %r9d
    movl %r9d, 24(%rax)
2:
    leaq 1(%r8), %rcx
    movq %rcx, {off_depth}(%rsi)
    shlq $5, %r8
    addq %r8, %rdi
    movq 64(%rsp), %rcx
    movq %rcx, 0(%rdi)
    movq 56(%rsp), %rcx
    subq $5, %rcx
    movq %rcx, 8(%rdi)
    movq %rdx, 16(%rdi)
    leaq 64(%rsp), %rcx
    movq %rcx, 24(%rdi)
    leaq ftrace_agent_return_tramp(%rip), %rcx
    movq %rcx, 64(%rsp)
    popq %r9
    popq %r8
    popq %rdi
    popq %rsi
    popq %rdx
    popq %rcx
    popq %rax
    ret
8:
    popq %r9
    popq %r8
    popq %rdi
    popq %rsi
    popq %rdx
    popq %rcx
    popq %rax
    jmp ftrace_agent_entry_tramp
    .size ftrace_agent_graph_tramp, .-ftrace_agent_graph_tramp

    .p2align 4
    .globl ftrace_agent_return_tramp
    .hidden ftrace_agent_return_tramp
    .type ftrace_agent_return_tramp,@function
ftrace_agent_return_tramp:
    subq $8, %rsp
    pushq %rax
    pushq %rcx
    pushq %rdx
    pushq %rsi
    pushq %rdi
    pushq %r8
    pushq %r9
    cmpb $0, {graph_ok}(%rip)
    je 8f
    movq ftrace_agent_tls@GOTTPOFF(%rip), %rsi
    addq %fs:0, %rsi
    movq {off_depth}(%rsi), %r8
    testq %r8, %r8
    jz 8f
    movq %r8, %rcx
    shlq $5, %rcx
    movq {off_shadow}(%rsi), %rdi
    leaq -32(%rdi,%rcx), %rdi
    leaq 56(%rsp), %rcx
    cmpq 24(%rdi), %rcx
    jne 8f
    movq 0(%rdi), %r9
    movq 16(%rdi), %rcx
    movq 8(%rdi), %rdi
    subq $1, %r8
    movq %r8, {off_depth}(%rsi)
    movq %r9, 56(%rsp)
    rdtsc
    shlq $32, %rdx
    orq %rax, %rdx
    movq {off_header}(%rsi), %r9
    movl $1, %eax
    xaddq %rax, {off_head}(%r9)
    cmpl $0, {off_overwrite}(%rsi)
    jne 1f
    cmpq {off_mask}(%rsi), %rax
    ja 9f
1:
    movq %rax, %r9
    andq {off_mask}(%rsi), %rax
    shlq $5, %rax
    addq {off_slots}(%rsi), %rax
    movq %rdx, 0(%rax)
    movq %rdi, 8(%rax)
    movq %rcx, 16(%rax)
    movq {off_cpu}(%rsi), %rcx
    movl (%rcx), %ecx
    movl %ecx, 28(%rax)
    movl {off_shift}(%rsi), %ecx
    shrq %cl, %r9
    andl $1, %r9d
    shll $7, %r9d
    orl ${kind_ret}, %r9d
    shll $8, %r8d
    orl %r8d, %r9d
    movl %r9d, 24(%rax)
9:
    popq %r9
    popq %r8
    popq %rdi
    popq %rsi
    popq %rdx
    popq %rcx
    popq %rax
    ret
8:
    popq %r9
    popq %r8
    popq %rdi
    popq %rsi
    popq %rdx
    popq %rcx
    popq %rax
    addq $8, %rsp
    jmp ftrace_agent_return_slow
    .size ftrace_agent_return_tramp, .-ftrace_agent_return_tramp

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
    off_guard = const core::mem::offset_of!(crate::handler::ThreadState, guard),
    off_state = const core::mem::offset_of!(crate::handler::ThreadState, state),
    off_header = const core::mem::offset_of!(crate::handler::ThreadState, writer),
    off_slots = const core::mem::offset_of!(crate::handler::ThreadState, writer) + core::mem::offset_of!(crate::buffer::Writer, slots),
    off_mask = const core::mem::offset_of!(crate::handler::ThreadState, writer) + core::mem::offset_of!(crate::buffer::Writer, mask),
    off_shift = const core::mem::offset_of!(crate::handler::ThreadState, writer) + core::mem::offset_of!(crate::buffer::Writer, shift),
    off_overwrite = const core::mem::offset_of!(crate::handler::ThreadState, writer) + core::mem::offset_of!(crate::buffer::Writer, overwrite),
    off_cpu = const core::mem::offset_of!(crate::handler::ThreadState, cpu),
    off_head = const core::mem::offset_of!(crate::buffer::BufHeader, head),
    kind_func = const crate::buffer::KIND_FUNC,
    options(att_syntax)
);

unsafe extern "C" {
    fn ftrace_agent_graph_tramp();
    fn ftrace_agent_func_tramp();
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
    ftrace_agent_func_tramp as *const () as u64
}

/// The function_graph entry trampoline: pushes the shadow frame and records in assembly when
/// the thread is registered, the clock is the TSC, no `-G`/`--max-depth` applies and nothing
/// nests; else it continues in [`entry_trampoline`]. Its return counterpart falls back to the
/// full-save return path for frames it cannot pop (roots, frames skipped by `longjmp`).
pub fn graph_trampoline() -> u64 {
    ftrace_agent_graph_tramp as *const () as u64
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
