//! Checks a program's call sites, and the `-F`/`-N`/`-G` globs against them, before it starts.
//!
//! The executable's ELF file (found on `PATH` as `exec` would), the libraries it needs
//! (`DT_NEEDED`, searched as the dynamic linker does: `DT_RPATH`, `LD_LIBRARY_PATH`,
//! `DT_RUNPATH`, `/etc/ld.so.conf.d`, the default directories) and what `LD_PRELOAD` adds are
//! scanned with the agent's own ELF code ([`ftrace_agent::elf::scan_file`]) for the sites it
//! will patch and their function names. Refused (or, with [`Force::Warn`], told as a
//! warning):
//!
//! - no site anywhere: the build instructions (or, for `-pg -mfentry` without
//!   `-mrecord-mcount`, whose `call __fentry__` leaves no site list, that it is not
//!   supported). gcc's plain `-pg` (`call mcount`) has no sites either but is traced through
//!   the agent's `mcount`: only a filter (`-F`, `-N`, `-G`) is refused, there being no sites
//!   to select;
//! - a glob that matches no site's function, checked with ftrace-core's glob as the agent and
//!   the mount's filter files match it: the mount's `set_ftrace_filter` answers `EINVAL`
//!   ("Invalid argument") for the same text, and the message says so and names what was
//!   checked (a library `dlopen`ed later cannot be: `--force`).
//!
//! Invariant: a program that is not an ELF file (a script) or cannot be found is not checked
//! here (the run says what is wrong with it); nothing is started or changed by a check.

use std::path::{Path, PathBuf};

use ftrace_agent::elf::FileScan;
use ftrace_core::filter::{Glob, MatchType};

/// What a failed check does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Force {
    /// Refuse to start the program (the default).
    #[default]
    Refuse,
    /// Start it anyway, with the refusal as a warning (`--force`).
    Warn,
}

/// One scanned object with sites.
#[derive(Clone, Debug)]
pub struct ObjectSites {
    /// Its file.
    pub path: PathBuf,
    /// The function name of each site (`0x...` where no symbol covers it), as the object
    /// spells it (mangled: [`ProgramSites::matches`] demangles, as the agent does).
    pub names: Vec<String>,
}

/// What a program will bring: its objects with sites.
#[derive(Clone, Debug)]
pub struct ProgramSites {
    /// The executable's file.
    pub exe: PathBuf,
    /// The executable first (even without sites), then every library with sites.
    pub objects: Vec<ObjectSites>,
    /// How many libraries were scanned.
    pub libraries: usize,
    /// Whether the executable calls gcc's plain `-pg` hook (`mcount`), which the agent
    /// traces without sites.
    pub calls_mcount: bool,
    /// Whether the executable calls `__fentry__` (`-pg -mfentry`).
    pub calls_fentry: bool,
    /// Whether the executable starts other programs (imports `execve` and the like,
    /// [`ftrace_agent::elf::PROGRAM_STARTERS`]): a shell or a `make`, whose children inherit
    /// the agent and are traced when they have sites ([`problems`] does not refuse it).
    pub starts_programs: bool,
}

/// The flags that give a program sites (the README's).
pub const BUILD_FLAGS: &str = "build it with -fpatchable-function-entry=5 (gcc, clang), \
     -pg -mfentry -mrecord-mcount [-mnop-mcount] (gcc) or -Zpatchable-function-entry=5 (rustc)";

/// Finds `prog` as `execvp` would: a name with a `/` as is, else the first executable file of
/// that name in `PATH`.
pub fn find_program(prog: &str) -> Option<PathBuf> {
    if prog.contains('/') {
        return Some(PathBuf::from(prog));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(prog))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn scan(path: &Path) -> Option<FileScan> {
    let file = ftrace_agent::elf::MappedFile::open(path).ok()?;
    ftrace_agent::elf::scan_file(path, &file)
}

fn object_sites(path: &Path, scan: &FileScan) -> ObjectSites {
    let s = &scan.scanned;
    ObjectSites {
        path: path.to_path_buf(),
        names: s
            .sites
            .iter()
            .map(|&(a, _)| {
                s.func_at(a)
                    .map_or_else(|| format!("0x{a:x}"), |f| f.name.clone())
            })
            .collect(),
    }
}

/// The directories the dynamic linker searches after an object's own paths.
fn system_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/etc/ld.so.conf.d") {
        let mut confs: Vec<PathBuf> = rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "conf"))
            .collect();
        confs.sort();
        for c in confs {
            let text = std::fs::read_to_string(c).unwrap_or_default();
            dirs.extend(
                text.lines()
                    .map(str::trim)
                    .filter(|l| l.starts_with('/'))
                    .map(PathBuf::from),
            );
        }
    }
    for d in [
        "/lib/x86_64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu",
        "/lib64",
        "/usr/lib64",
        "/lib",
        "/usr/lib",
    ] {
        dirs.push(PathBuf::from(d));
    }
    dirs
}

/// Expands `$ORIGIN` (and `${ORIGIN}`) in a `DT_RPATH`/`DT_RUNPATH` entry.
fn expand_origin(dir: &str, origin: &Path) -> PathBuf {
    let o = origin.to_string_lossy();
    PathBuf::from(dir.replace("${ORIGIN}", &o).replace("$ORIGIN", &o))
}

/// Which of a program's libraries [`scan_program`] scans.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Libraries {
    /// Every one (globs are checked against their sites too).
    All,
    /// None when the executable has sites: a check without globs needs no more (the program
    /// has sites), and reading libc and the dynamic linker took a fifth of a millisecond of
    /// every recording's start.
    UnlessTheExecutableHasSites,
}

/// Scans `prog` and, as `libraries` says, the libraries it will load. `None`: not found, or
/// not an ELF file.
pub fn scan_program(prog: &str, libraries: Libraries) -> Option<ProgramSites> {
    let exe = find_program(prog)?;
    let exe_scan = scan(&exe)?;
    let mut out = ProgramSites {
        exe: exe.clone(),
        objects: vec![object_sites(&exe, &exe_scan)],
        libraries: 0,
        calls_mcount: exe_scan.calls_mcount,
        calls_fentry: exe_scan.calls_fentry,
        starts_programs: exe_scan.starts_programs,
    };
    if libraries == Libraries::UnlessTheExecutableHasSites && !exe_scan.scanned.sites.is_empty() {
        return Some(out);
    }
    let ld_library_path: Vec<PathBuf> = std::env::var_os("LD_LIBRARY_PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    let system = system_dirs();
    let mut seen: Vec<PathBuf> = vec![std::fs::canonicalize(&exe).unwrap_or(exe.clone())];
    // (object, what it needs) pairs still to resolve, breadth first as the linker loads.
    let mut queue: Vec<(PathBuf, FileScan)> = vec![(exe, exe_scan)];
    let preload: Vec<PathBuf> = std::env::var("LD_PRELOAD")
        .unwrap_or_default()
        .split([' ', ':'])
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .collect();
    let mut pending: Vec<PathBuf> = preload;
    while !queue.is_empty() || !pending.is_empty() {
        for lib in std::mem::take(&mut pending) {
            let canon = std::fs::canonicalize(&lib).unwrap_or(lib.clone());
            if seen.contains(&canon) {
                continue;
            }
            seen.push(canon);
            let Some(s) = scan(&lib) else { continue };
            out.libraries += 1;
            if !s.scanned.sites.is_empty() {
                out.objects.push(object_sites(&lib, &s));
            }
            queue.push((lib, s));
        }
        let Some((path, s)) = (!queue.is_empty()).then(|| queue.remove(0)) else {
            continue;
        };
        let origin = path.parent().unwrap_or(Path::new("/")).to_path_buf();
        let own = |dirs: &[String]| -> Vec<PathBuf> {
            dirs.iter().map(|d| expand_origin(d, &origin)).collect()
        };
        let mut dirs = Vec::new();
        if s.runpath.is_empty() {
            dirs.extend(own(&s.rpath));
        }
        dirs.extend(ld_library_path.iter().cloned());
        dirs.extend(own(&s.runpath));
        dirs.extend(system.iter().cloned());
        for name in &s.needed {
            let found = if name.contains('/') {
                Some(PathBuf::from(name))
            } else {
                dirs.iter()
                    .map(|d| d.join(name))
                    .find(|p| p.is_file() && scan_is_64(p))
            };
            pending.extend(found);
        }
    }
    Some(out)
}

/// Whether `p` is a 64-bit ELF file (the linker skips other classes in a search directory).
fn scan_is_64(p: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 5];
    std::fs::File::open(p)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok_and(|()| head[..4] == *b"\x7fELF" && head[4] == 2)
}

impl ProgramSites {
    /// The number of sites in all objects.
    pub fn site_count(&self) -> usize {
        self.objects.iter().map(|o| o.names.len()).sum()
    }

    /// Whether any site's function matches `pattern` (as the agent selects sites).
    pub fn matches(&self, pattern: &str) -> bool {
        let g = Glob::parse(pattern);
        self.objects.iter().any(|o| {
            o.names
                .iter()
                .any(|n| g.matches(&ftrace_agent::elf::demangle(n)))
        })
    }

    /// What was checked, for a message: "the 12 call sites of ./calls (and 3 of libplugin.so)".
    fn checked(&self) -> String {
        let mut s = format!(
            "the {} call sites of {}",
            self.objects[0].names.len(),
            self.exe.display()
        );
        let libs: Vec<String> = self.objects[1..]
            .iter()
            .map(|o| {
                let name = o.path.file_name().unwrap_or(o.path.as_os_str());
                format!("{} of {}", o.names.len(), name.to_string_lossy())
            })
            .collect();
        if !libs.is_empty() {
            s += &format!(" and {}", libs.join(", "));
        }
        s += &format!(
            " ({} libraries scanned; one loaded later by dlopen is not)",
            self.libraries
        );
        s
    }
}

/// What a pattern is, when that explains why it matches nothing.
pub(crate) fn pattern_hint(pattern: &str) -> &'static str {
    let g = Glob::parse(pattern);
    if g.kind == MatchType::Index {
        return " (an index into available_filter_functions: give a name)";
    }
    if g.kind == MatchType::Glob && unclosed_class(g.search) {
        return " (a '[' without its ']' matches a '[')";
    }
    ""
}

/// Whether a glob has a `[` class with no closing `]` (which `glob_match` takes literally).
fn unclosed_class(glob: &str) -> bool {
    let b = glob.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 1,
            b'[' => {
                // A class holds at least one character: `[]]` is the class of `]`.
                let from = i + 1 + usize::from(b.get(i + 1) == Some(&b'!')) + 1;
                match b
                    .get(from..)
                    .and_then(|r| r.iter().position(|&c| c == b']'))
                {
                    Some(k) => i = from + k,
                    None => return true,
                }
            }
            _ => {}
        }
        i += 1;
    }
    false
}

/// The filter options and the file of the mount each one writes.
pub struct Filters<'a> {
    /// `-F` (`set_ftrace_filter`).
    pub filter: &'a [String],
    /// `-N` (`set_ftrace_notrace`).
    pub notrace: &'a [String],
    /// `-G` (`set_graph_function`).
    pub graph: &'a [String],
}

/// Checks `sites` against `filters`: the problems found, each one line without the `ftrace: `
/// prefix, the worst first (no sites at all makes every glob moot).
pub fn problems(sites: &ProgramSites, filters: &Filters<'_>) -> Vec<String> {
    if sites.site_count() == 0 {
        let exe = sites.exe.display();
        if sites.calls_mcount && !sites.calls_fentry {
            // Plain -pg: the agent's mcount traces every function; nothing to select.
            let mut out = Vec::new();
            for (opt, file, patterns) in [
                ("-F", "set_ftrace_filter", filters.filter),
                ("-N", "set_ftrace_notrace", filters.notrace),
                ("-G", "set_graph_function", filters.graph),
            ] {
                for p in patterns {
                    out.push(format!(
                        "{opt} '{p}': {file}: Invalid argument: {exe} is a plain -pg build \
                         (every function calls mcount, traced without call sites to select); \
                         trace it without {opt}, or {BUILD_FLAGS}"
                    ));
                }
            }
            return out;
        }
        if sites.starts_programs && !sites.calls_fentry {
            // A shell or a `make`: what it starts is traced, and its own filters are resolved
            // in each traced process (nothing here to check them against).
            return Vec::new();
        }
        let why = if sites.calls_fentry {
            format!(
                "{exe} calls __fentry__ but has no list of its call sites: -pg -mfentry \
                 without -mrecord-mcount is not supported; add -mrecord-mcount -mnop-mcount, \
                 or {BUILD_FLAGS}"
            )
        } else {
            format!(
                "{exe} has no call sites (no __mcount_loc or __patchable_function_entries \
                 section in it or its {} libraries): {BUILD_FLAGS}",
                sites.libraries
            )
        };
        return vec![why];
    }
    let mut out = Vec::new();
    for (opt, file, patterns) in [
        ("-F", "set_ftrace_filter", filters.filter),
        ("-N", "set_ftrace_notrace", filters.notrace),
        ("-G", "set_graph_function", filters.graph),
    ] {
        for p in patterns {
            if !sites.matches(p) {
                out.push(format!(
                    "{opt} '{p}': {file}: Invalid argument: no function of {} matches{}",
                    sites.checked(),
                    pattern_hint(p)
                ));
            }
        }
    }
    out
}

/// Runs the checks for `prog` with `filters`: `Err` with the first problem (and how to run
/// anyway) when refusing, else the warnings to print before the program starts.
pub fn check(prog: &str, filters: &Filters<'_>, force: Force) -> Result<Vec<String>, String> {
    let no_globs = [filters.filter, filters.notrace, filters.graph]
        .iter()
        .all(|g| g.is_empty());
    let libraries = match no_globs {
        true => Libraries::UnlessTheExecutableHasSites,
        false => Libraries::All,
    };
    let Some(sites) = scan_program(prog, libraries) else {
        return Ok(Vec::new());
    };
    let found = problems(&sites, filters);
    match (force, found.first()) {
        (_, None) => Ok(Vec::new()),
        (Force::Refuse, Some(first)) => Err(format!("{first}; --force runs it anyway")),
        (Force::Warn, Some(_)) => Ok(found
            .into_iter()
            .map(|p| format!("ftrace: warning: {p}"))
            .collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn program(names: &[&str]) -> ProgramSites {
        ProgramSites {
            exe: PathBuf::from("./prog"),
            objects: vec![ObjectSites {
                path: PathBuf::from("./prog"),
                names: names.iter().map(|s| s.to_string()).collect(),
            }],
            libraries: 2,
            calls_mcount: false,
            calls_fentry: false,
            starts_programs: false,
        }
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn globs_match_the_demangled_names_of_mangled_sites() {
        let p = program(&[
            "_ZN13grep_searcher8searcher8Searcher11search_path17h0123456789abcdefE",
            "_ZN3foo3barEv",
        ]);
        assert!(p.matches("grep_searcher::*"));
        assert!(p.matches("foo::bar()"));
        assert!(!p.matches("_ZN*"), "a glob reads the name a user reads");
    }

    #[test]
    fn globs_are_checked_as_the_kernel_matches_them() {
        let p = program(&["fib", "leaf", "calls::worker"]);
        let (f, n, g) = (
            strings(&["fi*", "[", "3"]),
            strings(&["*work*"]),
            strings(&[]),
        );
        let found = problems(
            &p,
            &Filters {
                filter: &f,
                notrace: &n,
                graph: &g,
            },
        );
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(
            found[0],
            "-F '[': set_ftrace_filter: Invalid argument: no function of the 3 call sites of \
             ./prog (2 libraries scanned; one loaded later by dlopen is not) matches (a '[' \
             without its ']' matches a '[')"
        );
        assert!(found[1].starts_with("-F '3': ") && found[1].ends_with("give a name)"));
        // The kernel's `[^x]` is a class of `^` and `x`, not a negation.
        assert!(!p.matches("[^f]eaf"));
        assert!(p.matches("[!f]eaf"));
    }

    #[test]
    fn no_sites_say_how_to_build() {
        let mut p = program(&[]);
        let none = Filters {
            filter: &[],
            notrace: &[],
            graph: &[],
        };
        let found = problems(&p, &none);
        assert!(found[0].contains("no call sites") && found[0].contains("-fpatchable"));
        // A program that starts programs (a shell): its children may have sites.
        p.starts_programs = true;
        assert_eq!(problems(&p, &none), Vec::<String>::new());
        p.starts_programs = false;
        p.calls_fentry = true;
        let found = problems(&p, &none);
        assert!(found[0].contains("-pg -mfentry without -mrecord-mcount is not supported"));
        // Plain -pg: traced through mcount; only a filter is refused.
        p.calls_fentry = false;
        p.calls_mcount = true;
        assert_eq!(problems(&p, &none), Vec::<String>::new());
        let f = ["fib".to_string()];
        let found = problems(
            &p,
            &Filters {
                filter: &f,
                notrace: &[],
                graph: &[],
            },
        );
        assert!(
            found.len() == 1 && found[0].contains("-F 'fib'") && found[0].contains("plain -pg"),
            "{found:?}"
        );
    }

    #[test]
    fn unclosed_classes() {
        assert!(unclosed_class("["));
        assert!(unclosed_class("a[b"));
        assert!(unclosed_class("[]"));
        assert!(!unclosed_class("[]]"));
        assert!(!unclosed_class("[a-z]*"));
        assert!(!unclosed_class("\\["));
        assert!(!unclosed_class("[!x]"));
    }

    #[test]
    fn origin_expands() {
        assert_eq!(
            expand_origin("$ORIGIN/../lib", Path::new("/opt/x/bin")),
            PathBuf::from("/opt/x/bin/../lib")
        );
    }
}
