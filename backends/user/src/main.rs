//! The `ftrace` command-line tool. See [`ftrace_user::cli`].

use std::process::ExitCode;

fn main() -> ExitCode {
    ftrace_user::cli::main(std::env::args_os())
}
