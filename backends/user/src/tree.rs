//! The processes of a traced tree beyond the first, for the live mount: every process the
//! program starts (a forked child, an exec'd image) registers with the tool over the control
//! socket ([`ftrace_agent::control`]), and every control write applies to each of them.
//!
//! The tree's filter files resolve against the first process's call sites; a write is sent to
//! every other process with each selected site named by its function: a process gets the
//! addresses of its own sites of the same names (the same library is mapped elsewhere in an
//! exec'd image; a forked child has its parent's). With `set_ftrace_filter` empty (every
//! function, as in the kernel), a process gets every site of its own but those of the
//! functions `set_ftrace_notrace` names ([`Selection::AllBut`]): an exec'd image's own
//! functions, which the first process lacks, are traced too. Invariant: a process whose link
//! broke (it exited, or exec'd: the new image registers anew) is dropped, never retried.

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
    events: EventIds,
}

/// Whether a process's trace events carry the tree's ids (the first process's), so that the
/// tree's event state can be sent to it by id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventIds {
    /// Every event it declares has the id the first process gives the same event (the same
    /// library declares them in both, or it declares none).
    Tree,
    /// It declares events under other ids: none of the tree's event state is sent to it.
    Own,
}

/// Which of a process's own call sites the tree's filter files select.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selection {
    /// `set_ftrace_filter` is empty: every site but those of the functions named here (the
    /// names of `set_ftrace_notrace`'s sites in the first process).
    AllBut(HashSet<String>),
    /// `set_ftrace_filter` lists functions: the sites of the functions the wanted state's
    /// `sel` names.
    Named,
}

/// The registered processes besides the first.
#[derive(Default)]
pub struct Members(Vec<Member>);

impl Members {
    /// Adds the process behind `link`, whose call sites are `sites` and whose trace events are
    /// numbered as `events` says, once it has taken `w` (the tree's state, resolved against
    /// `primary`, the first process's sites, its sites selected as `sel` says; `None`:
    /// nothing to send).
    /// [`Registration::Gone`] when its link broke first (it exited or exec'd): it is not
    /// added.
    pub fn register(
        &mut self,
        mut link: AgentLink,
        sites: &[SiteLine],
        events: EventIds,
        w: Option<(&Wanted, &Selection)>,
        primary: &[SiteLine],
    ) -> Registration {
        let mut by_name: HashMap<String, Vec<u64>> = HashMap::new();
        for s in sites {
            by_name.entry(s.name.clone()).or_default().push(s.addr);
        }
        if let Some((w, sel)) = w {
            let names = names_of(primary);
            // A refusal by a live agent leaves it registered, as [`Members::send`] does.
            let _ = link.set_state(&resolve(w, sel, &names, &by_name));
            if link.is_broken() {
                return Registration::Gone;
            }
        }
        self.0.push(Member {
            link,
            by_name,
            events,
        });
        Registration::Registered
    }

    /// Runs `f` on the link of every process whose events carry the tree's ids, dropping
    /// those whose link broke; returns the first refusal of a live one (the others still
    /// get theirs).
    pub fn each_with_tree_events(
        &mut self,
        mut f: impl FnMut(&mut AgentLink) -> Result<(), Errno>,
    ) -> Result<(), Errno> {
        self.each_where(|m| m.events == EventIds::Tree, |m| f(&mut m.link))
    }

    /// [`Members::each_with_tree_events`] over every process.
    pub fn each(
        &mut self,
        mut f: impl FnMut(&mut AgentLink) -> Result<(), Errno>,
    ) -> Result<(), Errno> {
        self.each_where(|_| true, |m| f(&mut m.link))
    }

    /// Runs `f` on every process `which` selects, dropping those whose link broke; returns
    /// the first refusal of a live one (the others still get theirs).
    fn each_where(
        &mut self,
        which: impl Fn(&Member) -> bool,
        mut f: impl FnMut(&mut Member) -> Result<(), Errno>,
    ) -> Result<(), Errno> {
        let mut first_err = None;
        self.0.retain_mut(|m| {
            if !which(m) {
                return true;
            }
            let r = f(m);
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

    /// Sends `w` (resolved against `primary`, the first process's sites; each process's own
    /// sites selected as `sel` says) to every process. A process whose link is broken is
    /// dropped; the first refusal of a live one is returned (the others still get it).
    pub fn send(&mut self, w: &Wanted, sel: &Selection, primary: &[SiteLine]) -> Result<(), Errno> {
        let names = names_of(primary);
        self.each_where(
            |_| true,
            |m| {
                m.link
                    .set_state(&resolve(w, sel, &names, &m.by_name))
                    .map(|_| ())
            },
        )
    }
}

/// The function name of each of `sites`' addresses.
fn names_of(sites: &[SiteLine]) -> HashMap<u64, &str> {
    sites.iter().map(|s| (s.addr, s.name.as_str())).collect()
}

/// `w` with its site addresses (the first process's) turned into those of the sites of the
/// same names in `by_name` (another process's); the sites enabled are those `sel` selects of
/// `by_name`'s.
fn resolve(
    w: &Wanted,
    sel: &Selection,
    names: &HashMap<u64, &str>,
    by_name: &HashMap<String, Vec<u64>>,
) -> Wanted {
    let map = |set: &HashSet<u64>| -> HashSet<u64> {
        set.iter()
            .filter_map(|a| by_name.get(*names.get(a)?))
            .flatten()
            .copied()
            .collect()
    };
    let mut out = w.clone();
    out.sel = match sel {
        Selection::AllBut(except) => by_name
            .iter()
            .filter(|(name, _)| !except.contains(*name))
            .flat_map(|(_, addrs)| addrs.iter().copied())
            .collect(),
        Selection::Named => map(&w.sel),
    };
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

/// Where a process stands relative to a traced tree ([`lineage`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lineage {
    /// One of the tree's roots or a descendant of one.
    InTree,
    /// Alive, and none of its ancestors is a root.
    Outside,
    /// Exited (gone, or a zombie) before it could be checked: nothing says where it stood.
    Gone,
}

/// Where process `pid` stands relative to the tree of `roots` (each root and its
/// descendants), from the parent links in `/proc`. An ancestor that exits during the walk
/// breaks the chain for a moment (its children pass to the reaper of the tree, a root): the
/// walk is taken again; a process that is itself gone is [`Lineage::Gone`], never
/// [`Lineage::Outside`].
pub fn lineage(pid: u32, roots: &[u32]) -> Lineage {
    for _ in 0..8 {
        let mut p = pid;
        let mut complete = true;
        for _ in 0..4096 {
            if roots.contains(&p) {
                return Lineage::InTree;
            }
            match parent_of(p) {
                Some(q) if q > 1 && q != p => p = q,
                Some(_) => break,
                None => {
                    complete = false;
                    break;
                }
            }
        }
        if has_exited(pid) {
            return Lineage::Gone;
        }
        if complete {
            return Lineage::Outside;
        }
    }
    Lineage::Outside
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

/// What became of one connection to a tree's control socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Registration {
    /// A process of the tree, registered: every control write reaches it.
    Registered,
    /// The process was gone before it could be registered: it exited (its events are in
    /// the recording all the same), or it exec'd (the new image registers by itself).
    Gone,
    /// A live process outside the tree: refused (its agent keeps the state it has).
    Refused,
}

/// What the acceptor of a tree saw, one count per connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AcceptCounts {
    /// Processes registered.
    pub registered: u64,
    /// Processes gone (exited or exec'd) before they could be registered.
    pub gone: u64,
    /// Live processes outside the tree, refused.
    pub refused: u64,
}

impl AcceptCounts {
    fn count(&mut self, r: Registration) {
        *match r {
            Registration::Registered => &mut self.registered,
            Registration::Gone => &mut self.gone,
            Registration::Refused => &mut self.refused,
        } += 1;
    }
}

/// Makes the tool the reaper of the tree's orphans (`PR_SET_CHILD_SUBREAPER`): a process
/// whose parent exited (a shell's background job) stays in the tool's tree, so it can still
/// register. Those the tool does not wait for stay zombies until the tool exits.
pub fn adopt_orphans() {
    // SAFETY: a plain prctl on this process.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
}

/// Accepts the agents of the tree of `root` (or of this tool, the reaper of its orphans,
/// [`adopt_orphans`]) on `listener` until `stop` is set, handing each link to `register`,
/// which says whether the process could be registered; a live process outside the tree is
/// refused. The connections still queued when `stop` is set are taken too, so that every
/// process that connected is counted once. Returns the counts.
pub fn accept_members(
    listener: UnixListener,
    root: u32,
    stop: Arc<AtomicBool>,
    mut register: impl FnMut(AgentLink) -> Registration + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<AcceptCounts>> {
    listener.set_nonblocking(true)?;
    let roots = [root, std::process::id()];
    std::thread::Builder::new()
        .name("ftrace-tree".into())
        .spawn(move || {
            let mut counts = AcceptCounts::default();
            loop {
                // Read before the accept: once set, the queue is drained to its end.
                let stopping = stop.load(Ordering::Relaxed);
                let sock = match listener.accept() {
                    Ok((s, _)) => s,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        if stopping {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(2));
                        continue;
                    }
                    // A connection reset before it was accepted: its process is gone.
                    Err(_) => {
                        counts.count(Registration::Gone);
                        continue;
                    }
                };
                let lineage = match crate::agentctl::peer_pid(&sock) {
                    Ok(pid) => lineage(pid, &roots),
                    Err(_) => Lineage::Gone,
                };
                counts.count(match lineage {
                    Lineage::Outside => Registration::Refused,
                    Lineage::Gone => Registration::Gone,
                    Lineage::InTree => match AgentLink::greeted(sock) {
                        Ok(link) => register(link),
                        Err(_) => Registration::Gone,
                    },
                });
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
        let r = resolve(&w, &Selection::Named, &names, &by_name);
        assert_eq!(r.sel, [0x110, 0x120, 0x121].into());
        assert_eq!(r.roots, [0x120, 0x121].into());
        assert_eq!(r.probes.len(), 1);
        assert_eq!(r.probes[0].addr, 0x110);
        assert_eq!(r.pids, vec![5]);
    }

    /// With every function selected, a process gets its own sites, those the first process
    /// lacks too, but never those of a function `set_ftrace_notrace` names; with a filter,
    /// only the sites of the names it selects.
    #[test]
    fn every_function_selects_a_processs_own_sites_but_the_notrace_ones() {
        let names: HashMap<u64, &str> = [(0x10, "f"), (0x20, "g")].into();
        let by_name: HashMap<String, Vec<u64>> = [
            ("f".to_string(), vec![0x110]),
            ("g".to_string(), vec![0x120]),
            ("own".to_string(), vec![0x130, 0x131]),
        ]
        .into();
        let w = Wanted {
            sel: [0x10].into(),
            ..Wanted::default()
        };
        let all_but_g = Selection::AllBut(["g".to_string()].into());
        let r = resolve(&w, &all_but_g, &names, &by_name);
        assert_eq!(r.sel, [0x110, 0x130, 0x131].into());
        let r = resolve(&w, &Selection::AllBut(HashSet::new()), &names, &by_name);
        assert_eq!(r.sel, [0x110, 0x120, 0x130, 0x131].into());
        let r = resolve(&w, &Selection::Named, &names, &by_name);
        assert_eq!(r.sel, [0x110].into());
    }

    #[test]
    fn a_process_is_in_its_ancestors_tree_and_an_exited_one_is_gone() {
        let me = std::process::id();
        assert_eq!(lineage(me, &[me]), Lineage::InTree);
        let parent = parent_of(me).unwrap();
        assert_eq!(lineage(me, &[parent]), Lineage::InTree);
        assert_eq!(lineage(me, &[0, parent]), Lineage::InTree);
        assert_eq!(lineage(parent, &[me]), Lineage::Outside);
        assert!(!has_exited(me));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        while !has_exited(pid) {
            std::thread::sleep(Duration::from_millis(1));
        }
        // A zombie still names its parent.
        assert_eq!(lineage(pid, &[me]), Lineage::InTree);
        child.wait().unwrap();
        assert!(has_exited(pid));
        // Reaped: where it stood cannot be known, and it is not called outside.
        assert_eq!(lineage(pid, &[me]), Lineage::Gone);
        assert_eq!(lineage(pid, &[parent]), Lineage::Gone);
    }
}
