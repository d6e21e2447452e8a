//! ftrace for userspace programs: the `ftrace` command-line tool's library, on top of the
//! in-process agent (crate `ftrace-agent`).
//!
//! - [`launch`]: starting a program with the agent preloaded;
//! - [`record`]: `ftrace record` (run and record into a directory);
//! - [`recording`]: reading a recording back as the kernel's trace entries, per CPU.
pub mod capture;
pub mod launch;
pub mod record;
pub mod recording;
