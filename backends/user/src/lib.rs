//! ftrace for userspace programs: the in-process agent, the `ftrace` command-line tool, a FUSE
//! tracefs and exporters (trace.dat, uftrace, Chrome JSON).
//!
//! - [`cli`]: the `ftrace` tool's command line;
//! - [`report`]: `ftrace report`, the offline reader of raw kernel captures.

pub mod cli;
pub mod report;
