//! Starting a program with the agent preloaded.
//!
//! The agent shared object is found through [`ENV_AGENT_SO`], else next to the running `ftrace`
//! binary (`libftrace_agent.so` in its directory or its `deps/` sub-directory, where cargo puts
//! it; the newest of those present). Invariant: the program gets the agent first in `LD_PRELOAD` (before anything the user
//! already preloads) and the agent's configuration in its environment; nothing else changes.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};

use ftrace_agent::config::Config;

/// Overrides where the agent shared object is.
pub const ENV_AGENT_SO: &str = "FTRACE_AGENT_SO";

/// The agent's file name.
pub const AGENT_FILE: &str = "libftrace_agent.so";

/// Finds the agent shared object.
pub fn find_agent() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os(ENV_AGENT_SO) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("{ENV_AGENT_SO}={}: no such file", p.display()))
        };
    }
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    let candidates = [
        dir.join(AGENT_FILE),
        dir.join("deps").join(AGENT_FILE),
        dir.join("..").join(AGENT_FILE),
        dir.join("../lib/ftrace").join(AGENT_FILE),
    ];
    // The newest of those present: in a build tree cargo refreshes `deps/` on every build of
    // the tool while the copy beside it is only refreshed by `cargo build -p ftrace-agent`, and
    // a stale agent there would be loaded silently.
    candidates
        .iter()
        .filter_map(|p| Some((std::fs::metadata(p).ok()?.modified().ok()?, p)))
        .filter(|(_, p)| p.is_file())
        .max_by_key(|(t, _)| *t)
        .map(|(_, p)| p.clone())
        .ok_or_else(|| {
            format!(
                "{AGENT_FILE} not found next to {} (build it with `cargo build -p ftrace-agent`, or set {ENV_AGENT_SO})",
                exe.display()
            )
        })
}

/// The command that runs `prog args...` traced by `agent` with `config`.
pub fn traced_command(agent: &Path, config: &Config, prog: &str, args: &[String]) -> Command {
    let mut cmd = Command::new(prog);
    cmd.args(args);
    let mut preload = agent.as_os_str().to_owned();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|o| !o.is_empty()) {
        preload.push(" ");
        preload.push(old);
    }
    cmd.env("LD_PRELOAD", preload);
    for (k, v) in config.to_env() {
        cmd.env(k, v);
    }
    cmd
}

/// Runs the traced program to completion.
pub fn run(config: &Config, prog: &str, args: &[String]) -> Result<ExitStatus, String> {
    let mut child = spawn(config, prog, args)?;
    child.wait().map_err(|e| format!("{prog}: {e}"))
}

/// Starts the traced program (returns once it has been executed).
pub fn spawn(config: &Config, prog: &str, args: &[String]) -> Result<std::process::Child, String> {
    let agent = find_agent()?;
    std::fs::create_dir_all(&config.output)
        .map_err(|e| format!("{}: {e}", config.output.display()))?;
    traced_command(&agent, config, prog, args)
        .spawn()
        .map_err(|e| format!("{prog}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ftrace_agent::config::TracerKind;

    #[test]
    fn preload_and_config_reach_the_program() {
        let cfg = Config::new("/tmp/nowhere", TracerKind::FunctionGraph);
        let cmd = traced_command(Path::new("/x/libftrace_agent.so"), &cfg, "true", &[]);
        let envs: Vec<(String, String)> = cmd
            .get_envs()
            .filter_map(|(k, v)| Some((k.to_str()?.to_string(), v?.to_str()?.to_string())))
            .collect();
        let get = |k: &str| envs.iter().find(|e| e.0 == k).map(|e| e.1.clone());
        assert!(
            get("LD_PRELOAD")
                .unwrap()
                .starts_with("/x/libftrace_agent.so")
        );
        assert_eq!(Config::from_env_vars(get).unwrap(), Some(cfg));
    }
}
