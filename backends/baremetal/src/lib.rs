//! ftrace-rs on x86_64 bare metal: the platform a freestanding kernel gives the core crates,
//! and the pieces only a kernel can provide.
//!
//! - [`cpu`]: per-CPU data through the GS base; [`BareMetal`] implements ftrace-core's
//!   [`CpuId`](ftrace_core::platform::CpuId) and [`TaskContext`](ftrace_core::platform::TaskContext);
//! - [`clock`]: the TSC calibrated against the PIT, as [`TraceClock`](ftrace_core::platform::TraceClock);
//! - [`idt`]: GDT/TSS/IDT, IST stacks, and a fatal-exception report on COM1 (a fault never looks
//!   like a pass);
//! - [`text`]: text writes through CR0.WP and the int3 side of the breakpoint patch protocol;
//! - [`trampoline`]: the entry and return trampolines patched sites call;
//! - [`events`]: the kernel's trace events (interrupts, timer ticks, shell commands);
//! - [`apic`], [`smp`]: starting the other CPUs, running work on them, and the IPI that makes
//!   every CPU serialise after a text write;
//! - [`timer`]: the local APIC timer tick, run while the shell waits for it;
//! - [`sites`]: `__patchable_function_entries` discovery;
//! - [`serial`], [`shell`]: COM1 and a command shell serving a tracefs tree;
//! - [`qemu`]: the pass/fail exit protocol (`isa-debug-exit`: 33 pass, 35 fail);
//! - [`platform`]: the binding of ftrace-tracefs's `TraceArray` ([`platform::TRACE`]), the
//!   trampolines' hooks and the tree the shell serves;
//! - `rt` (feature `rt`): `mem*` and the global allocator for a freestanding image.
//!
//! The crate is `#![no_std]` and x86_64-only. It compiles on the (x86_64) host so that its unit
//! tests run there; everything that touches privileged state is only ever *called* inside the
//! test kernel (`backends/baremetal/kernel`, booted by `cargo xtask qemu-test`).
#![no_std]
#![cfg(target_arch = "x86_64")]

extern crate alloc;
#[cfg(test)]
extern crate std;

pub mod apic;
pub mod clock;
pub mod cpu;
pub mod events;
pub mod idt;
pub mod platform;
pub mod port;
pub mod qemu;
#[cfg(feature = "rt")]
pub mod rt;
pub mod serial;
pub mod shell;
pub mod sites;
pub mod smp;
pub mod sync;
pub mod text;
pub mod timer;
pub mod trampoline;

pub use cpu::BareMetal;
