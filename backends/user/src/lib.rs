//! ftrace for userspace programs: the in-process agent, the `ftrace` command-line tool, a FUSE
//! tracefs and exporters (trace.dat, uftrace, Chrome JSON).
//!
//! This backend is being built (see the project's userspace issues).
