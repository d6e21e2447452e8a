//! ftrace for userspace programs: the `ftrace` command-line tool's library, on top of the
//! in-process agent (crate `ftrace-agent`).
//!
//! - [`cli`]: the `ftrace` tool's command line;
//! - [`report`]: `ftrace report`, the offline reader of raw captures (a recording's capture
//!   files, or pages taken from a kernel);
//! - [`view`]: `report`'s views (`-F`, `-N`, `-G`, `--max-depth`, `--tid`, `--cpu`,
//!   `--time-range`), chosen when reading;
//! - [`launch`]: starting a program with the agent preloaded;
//! - [`sitecheck`]: before it starts, the program's call sites and the `-F`/`-N`/`-G` globs
//!   checked against them (refused, or a warning with `--force`);
//! - [`record`]: `ftrace record` / `ftrace live` (run and record into a directory);
//! - [`cargo_build`]: `--cargo`, a Rust crate built with the instrumentation flags;
//! - [`attach`]: `ftrace record -p PID` (load the agent into a running process, detach after);
//! - [`drain`]: the tool's consumer of the agent's rings while the program runs, writing
//!   [`stream`]'s compact per-thread events files;
//! - [`recording`]: reading a recording back as the kernel's trace entries, per CPU;
//! - [`capture`]: writing a recording as per-CPU kernel pages plus symbols, what `report` reads;
//! - [`live`], [`livefs`], [`agentctl`]: a running program's tracefs (`--mount`): its buffers
//!   read live, the tree's backend, the agent's control channel;
//! - [`export`]: a capture as trace-cmd's `trace.dat`, a `uftrace.data` directory or Chrome JSON.

pub mod agentctl;
pub mod attach;
pub mod capture;
pub mod capture_formats;
pub mod cargo_build;
pub mod cli;
pub mod drain;
pub mod export;
pub mod fuse;
pub mod launch;
pub mod live;
pub mod livefs;
pub mod placement;
pub mod precedence;
pub mod prefault;
pub mod profile;
pub mod progevents;
pub mod record;
pub mod recording;
pub mod report;
mod ringmap;
pub mod sitecheck;
pub mod stream;
pub mod syscall_names;
pub mod tree;
pub mod view;
pub mod writebehind;
