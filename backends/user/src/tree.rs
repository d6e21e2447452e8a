//! The processes of a traced tree beyond the first, for the live mount: every process the
//! program starts (a forked child, an exec'd image) registers with the tool over the control
//! socket ([`ftrace_agent::control`]), and every control write applies to each of them.
//!
//! The tree's filter files resolve against the first process's call sites; a write is sent to
//! every other process with each selected site named by its function: a process gets the
//! addresses of its own sites of the same names (the same library is mapped elsewhere in an
//! exec'd image; a forked child has its parent's). Invariant: a process whose link broke (it
//! exited, or exec'd: the new image registers anew) is dropped, never retried.

use std::collections::{HashMap, HashSet};
use std::os::unix::net::UnixListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ftrace_agent::control::Wanted;
use ftrace_core::Errno;

use crate::agentctl::{AgentLink, SiteLine};

/// One registered process besides the first.
pub struct Member {
    link: AgentLink,
    by_name: HashMap<String, Vec<u64>>,
}

/// The registered processes besides the first.
#[derive(Default)]
pub struct Members(Vec<Member>);

impl Members {
    /// Adds the process behind `link`, whose call sites are `sites`.
    pub fn add(&mut self, link: AgentLink, sites: &[SiteLine]) {
        let mut by_name: HashMap<String, Vec<u64>> = HashMap::new();
        for s in sites {
            by_name.entry(s.name.clone()).or_default().push(s.addr);
        }
        self.0.push(Member { link, by_name });
    }

    /// The call sites of the first process still linked, as it lists them now (enabled
    /// states change), dropping those whose link broke.
    pub fn live_sites(&mut self) -> Option<Vec<SiteLine>> {
        while let Some(m) = self.0.first_mut() {
            if let Ok(s) = m.link.sites() {
                return Some(s);
            }
            self.0.remove(0);
        }
        None
    }

    /// The processes' pids.
    pub fn pids(&self) -> Vec<u32> {
        self.0.iter().map(|m| m.link.pid).collect()
    }

    /// Sends `w` (resolved against `primary`, the first process's sites) to every process,
    /// or, with `only`, to the process of that pid. A process whose link is broken is
    /// dropped; the first refusal of a live one is returned (the others still get it).
    pub fn send(
        &mut self,
        w: &Wanted,
        primary: &[SiteLine],
        only: Option<u32>,
    ) -> Result<(), Errno> {
        let names: HashMap<u64, &str> = primary.iter().map(|s| (s.addr, s.name.as_str())).collect();
        let mut first_err = None;
        self.0.retain_mut(|m| {
            if only.is_some_and(|p| p != m.link.pid) {
                return true;
            }
            let r = m.link.set_state(&resolve(w, &names, &m.by_name));
            if m.link.is_broken() {
                return false;
            }
            if let Err(e) = r {
                first_err.get_or_insert(e);
            }
            true
        });
        first_err.map_or(Ok(()), Err)
    }
}

/// `w` with its site addresses (the first process's) turned into those of the sites of the
/// same names in `by_name` (another process's).
fn resolve(w: &Wanted, names: &HashMap<u64, &str>, by_name: &HashMap<String, Vec<u64>>) -> Wanted {
    let map = |set: &HashSet<u64>| -> HashSet<u64> {
        set.iter()
            .filter_map(|a| by_name.get(*names.get(a)?))
            .flatten()
            .copied()
            .collect()
    };
    let mut out = w.clone();
    out.sel = map(&w.sel);
    out.roots = map(&w.roots);
    out.probes = w
        .probes
        .iter()
        .flat_map(|p| {
            let addrs = names
                .get(&p.addr)
                .and_then(|n| by_name.get(*n))
                .cloned()
                .unwrap_or_default();
            addrs.into_iter().map(move |addr| {
                let mut q = *p;
                q.addr = addr;
                q
            })
        })
        .collect();
    out
}

/// The parent of process `pid` (`/proc/<pid>/stat`).
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Whether `pid` is `root` or a descendant of it.
pub fn is_in_tree(pid: u32, root: u32) -> bool {
    let mut p = pid;
    for _ in 0..4096 {
        if p == root {
            return true;
        }
        match parent_of(p) {
            Some(q) if q > 1 && q != p => p = q,
            _ => return false,
        }
    }
    false
}

/// Whether process `pid` has exited (no `/proc/<pid>`, or a zombie).
pub fn has_exited(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_none_or(|state| state == "Z" || state == "X"),
        Err(_) => true,
    }
}

/// What the acceptor of a tree saw: connections refused because the process was not of the
/// tree, and greetings that failed (a process that exited or exec'd before it said hello).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AcceptCounts {
    /// Processes outside the tree.
    pub refused: u64,
    /// Connections closed before the greeting.
    pub ungreeted: u64,
}

/// Makes the tool the reaper of the tree's orphans (`PR_SET_CHILD_SUBREAPER`): a process
/// whose parent exited (a shell's background job) stays in the tool's tree, so it can still
/// register. Those the tool does not wait for stay zombies until the tool exits.
pub fn adopt_orphans() {
    // SAFETY: a plain prctl on this process.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
}

/// Accepts the agents of the tree of `root` (or of this tool, the reaper of its orphans,
/// [`adopt_orphans`]) on `listener` until `stop` is set, handing each link to `register`; a
/// process outside the tree is refused. Returns what was refused.
pub fn accept_members(
    listener: UnixListener,
    root: u32,
    stop: Arc<AtomicBool>,
    mut register: impl FnMut(AgentLink) + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<AcceptCounts>> {
    listener.set_nonblocking(true)?;
    let tool = std::process::id();
    std::thread::Builder::new()
        .name("ftrace-tree".into())
        .spawn(move || {
            let mut counts = AcceptCounts::default();
            while !stop.load(Ordering::Relaxed) {
                let sock = match listener.accept() {
                    Ok((s, _)) => s,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(2));
                        continue;
                    }
                    Err(_) => {
                        counts.ungreeted += 1;
                        continue;
                    }
                };
                match crate::agentctl::peer_pid(&sock) {
                    Ok(pid) if is_in_tree(pid, root) || is_in_tree(pid, tool) => {}
                    _ => {
                        counts.refused += 1;
                        continue;
                    }
                }
                match AgentLink::greeted(sock) {
                    Ok(link) => register(link),
                    Err(_) => counts.ungreeted += 1,
                }
            }
            counts
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ftrace_agent::probe::WantedProbe;
    use ftrace_core::filter::ProbeCommand;

    #[test]
    fn sites_are_resolved_by_name() {
        let names: HashMap<u64, &str> = [(0x10, "f"), (0x20, "g"), (0x30, "h")].into();
        let by_name: HashMap<String, Vec<u64>> = [
            ("f".to_string(), vec![0x110]),
            ("g".to_string(), vec![0x120, 0x121]),
        ]
        .into();
        let w = Wanted {
            sel: [0x10, 0x20, 0x30].into(),
            roots: [0x20].into(),
            probes: vec![WantedProbe {
                addr: 0x10,
                cmd: ProbeCommand::Traceoff,
                count: Some(3),
                event: None,
            }],
            pids: vec![5],
            ..Wanted::default()
        };
        let r = resolve(&w, &names, &by_name);
        assert_eq!(r.sel, [0x110, 0x120, 0x121].into());
        assert_eq!(r.roots, [0x120, 0x121].into());
        assert_eq!(r.probes.len(), 1);
        assert_eq!(r.probes[0].addr, 0x110);
        assert_eq!(r.pids, vec![5]);
    }

    #[test]
    fn this_process_is_in_its_parents_tree() {
        let me = std::process::id();
        assert!(is_in_tree(me, me));
        let parent = parent_of(me).unwrap();
        assert!(is_in_tree(me, parent));
        assert!(!is_in_tree(parent, me));
        assert!(!has_exited(me));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        while !has_exited(pid) {
            std::thread::sleep(Duration::from_millis(1));
        }
        child.wait().unwrap();
        assert!(has_exited(pid));
    }
}
