//! Dynamic ftrace's patching engine: call-site records, the NOP/CALL state machine, x86_64 and
//! aarch64 encoders, and SMP-safe live patch protocols.
//!
//! - [`x86`], [`aarch64`]: instruction encoders and decoders for every call-site form compilers
//!   emit, with branch range checks.
//! - [`site`]: site forms (NOP bytes, call encoding) and recognising a freshly loaded site.
//! - [`record`]: [`DynFtrace`], the kernel's flag word and `ftrace_check_record()`.
//! - [`ops`]: [`RecordOps`], an `ftrace_ops` as the records see it, and [`CallTargets`];
//!   [`ftrace_ops`]: [`FtraceOpsView`], the dispatcher's `FtraceOps` as a [`RecordOps`].
//! - [`table`]: [`RecordTable`]: reference counting (`__ftrace_hash_rec_update`), the update
//!   pass (`ftrace_replace_code`) and initialisation (`ftrace_process_locs`).
//! - [`pages`]: [`PageStats`], the record memory `dyn_ftrace_total_info` reports.
//! - [`protocol`]: the breakpoint, stop-machine and atomic protocols, with the breakpoint
//!   handler's lookup; [`text::TextPoke`] is what a platform provides.
//! - [`breakpoint`]: [`BreakpointSlot`], where a platform's trap handler finds the armed
//!   batch (arm, lookup, disarm and drain).
//! - [`bug`]: `ftrace_bug()` reports.
//! - [`jump_label`]: a static key's NOP sites to `jmp` and back, through the protocols.
//! - `sim` (feature `alloc`): an in-memory text segment and an executor model that checks every
//!   intermediate state of a batch.
//!
//! The crate is `#![no_std]`; nothing but `sim` and a few conveniences needs `alloc`. No floating
//! point, no 128-bit arithmetic.
#![no_std]
#![warn(missing_docs)]

#[cfg(feature = "alloc")]
extern crate alloc;
#[cfg(test)]
extern crate std;

pub mod aarch64;
pub mod breakpoint;
pub mod bug;
pub mod ftrace_ops;
pub mod jump_label;
pub mod ops;
pub mod pages;
pub mod protocol;
pub mod record;
#[cfg(feature = "alloc")]
pub mod sim;
pub mod site;
pub mod table;
pub mod text;
pub mod x86;

/// The README's example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

pub use breakpoint::BreakpointSlot;
pub use bug::{BugReason, BugType, FtraceBug};
pub use ftrace_ops::FtraceOpsView;
pub use ops::{CallTargets, FixedTargets, OpsRecFlags, RecordOps};
pub use pages::PageStats;
pub use protocol::{BreakpointTable, Emulation, PokeSite, Protocol, StopFixup, TrapAction};
pub use record::{DynFtrace, RecFlags, Update};
pub use site::{Arch, SiteBytes, SiteForm};
pub use table::{InitKind, RecordTable, UpdatePass, UpdateStats, init_records};
pub use text::{TextFault, TextPoke};
