//! The filter-file language: editing and reading `set_ftrace_filter`, `set_ftrace_notrace`,
//! `set_graph_function` and `set_graph_notrace`. The patterns ([`Glob`]), the hash the
//! dispatcher reads ([`FtraceHash`]) and the probe runner are ftrace-core's.
//!
//! A [`FilterDraft`] is one open of a filter file for writing: `>` (`O_TRUNC`) starts from an
//! empty set, `>>` from a copy of the current one. Like the kernel's `ftrace_regex_write`, each
//! [`FilterDraft::write`] call consumes at most one whitespace-separated token (a token cut at
//! the end of a write continues in the next) and applies it, or fails with the kernel's errno
//! and changes nothing; [`FilterDraft::close`] applies a pending token and yields the new
//! [`FilterSet`]. Function commands go to the instance's [`ProbeTable`] at write time.
//!
//! The sets keep the kernel's hash-bucket order (`hash_64` buckets, `hlist_add_head` chains,
//! the resize of `__ftrace_hash_move`), because `set_graph_function` and the command lines of
//! `set_ftrace_filter` read back in that order; plain functions of `set_ftrace_filter` and
//! `set_ftrace_notrace` read back in listing order.

use crate::WriteMode;
use crate::backend::FilterFile;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use core::fmt::Write;
use ftrace_core::errno::Errno;
use ftrace_core::filter::{Glob, MatchType, kstrtoul};
use ftrace_core::symbols::SymbolTable;

use ftrace_core::filter::FtraceHash;
use ftrace_core::filter::probe::{ProbeCommand, ProbeCount, ProbeRunner, RunProbe};

/// `FTRACE_HASH_DEFAULT_BITS`.
const HASH_DEFAULT_BITS: u32 = 10;
/// `FTRACE_HASH_MAX_BITS`.
const HASH_MAX_BITS: u32 = 12;
/// Longest token the filter files accept: `FTRACE_BUFF_MAX - 1` (`KSYM_SYMBOL_LEN + 4` on
/// x86_64 6.12, minus the NUL).
pub const MAX_TOKEN: usize = 669;

/// The kernel's `struct ftrace_hash` as far as iteration order goes.
#[derive(Clone, Debug, PartialEq, Eq)]
struct KHash {
    bits: u32,
    /// Each chain in list order (head first).
    buckets: Vec<Vec<u64>>,
    count: usize,
}

impl KHash {
    fn new(bits: u32) -> KHash {
        KHash {
            bits,
            buckets: vec![Vec::new(); 1 << bits],
            count: 0,
        }
    }

    fn key(&self, ip: u64) -> usize {
        if self.bits == 0 {
            0
        } else {
            (ip.wrapping_mul(0x61C8_8646_80B5_83EB) >> (64 - self.bits)) as usize
        }
    }

    fn contains(&self, ip: u64) -> bool {
        self.buckets[self.key(ip)].contains(&ip)
    }

    /// `add_hash_entry`: at the head of its chain.
    fn add(&mut self, ip: u64) {
        let k = self.key(ip);
        self.buckets[k].insert(0, ip);
        self.count += 1;
    }

    fn remove(&mut self, ip: u64) -> bool {
        let k = self.key(ip);
        match self.buckets[k].iter().position(|&x| x == ip) {
            Some(pos) => {
                self.buckets[k].remove(pos);
                self.count -= 1;
                true
            }
            None => false,
        }
    }

    fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.buckets.iter().flat_map(|b| b.iter().copied())
    }

    /// `alloc_and_copy_ftrace_hash(bits, self)`.
    fn copy(&self, bits: u32) -> KHash {
        let mut h = KHash::new(bits);
        for ip in self.iter() {
            h.add(ip);
        }
        h
    }

    /// `__ftrace_hash_move`: resized to `fls(count / 2)` bits (at most 12).
    fn moved(&self) -> KHash {
        let half = self.count / 2;
        let bits = (usize::BITS - half.leading_zeros()).min(HASH_MAX_BITS);
        self.copy(bits)
    }
}

impl Default for KHash {
    fn default() -> Self {
        KHash::new(0)
    }
}

/// A cached `:mod:` request for a module that is not loaded (`struct ftrace_mod_load`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModEntry {
    /// The function pattern as written (may be empty).
    pub func: String,
    /// The module name (or glob) as written.
    pub module: String,
}

/// What one filter file holds: the ip set and the cached `:mod:` requests (newest first).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FilterSet {
    hash: KHash,
    mods: Vec<ModEntry>,
}

impl FilterSet {
    /// An empty set.
    pub fn new() -> FilterSet {
        FilterSet::default()
    }

    /// Whether the ip set is empty (`ftrace_hash_empty`).
    pub fn is_empty(&self) -> bool {
        self.hash.count == 0
    }

    /// Number of ips.
    pub fn len(&self) -> usize {
        self.hash.count
    }

    /// Whether `ip` is in the set.
    pub fn contains(&self, ip: u64) -> bool {
        self.hash.contains(ip)
    }

    /// The ips in the kernel's hash order.
    pub fn ips(&self) -> impl Iterator<Item = u64> + '_ {
        self.hash.iter()
    }

    /// The cached `:mod:` requests, newest first.
    pub fn mods(&self) -> &[ModEntry] {
        &self.mods
    }

    /// Applies the cached `:mod:` requests for `module`, which has just been loaded
    /// (`process_cached_mods`): each adds the module's functions its pattern matches (an empty
    /// pattern: all of them) and leaves the cache. Returns how many requests were applied.
    pub fn load_module(&mut self, module: &str, symbols: &dyn SymbolTable) -> usize {
        let (due, keep): (Vec<ModEntry>, Vec<ModEntry>) =
            self.mods.drain(..).partition(|m| m.module == module);
        self.mods = keep;
        if due.is_empty() {
            return 0;
        }
        let mut hash = self.hash.copy(HASH_DEFAULT_BITS);
        for m in &due {
            let func = if m.func.is_empty() { "*" } else { &m.func };
            // A request that matches nothing (or fails) is dropped, as the kernel does.
            let _ = match_records(&mut hash, func, Some(module), symbols);
        }
        self.hash = hash.moved();
        due.len()
    }

    /// The dispatch-time hash of this set.
    pub fn to_hash(&self) -> FtraceHash {
        FtraceHash::from_ips(self.hash.iter())
    }

    /// The text of reading `file` when it holds this set. `probes` are the instance's function
    /// commands, listed after the functions of `set_ftrace_filter` (pass `None` for others).
    pub fn show(
        &self,
        file: FilterFile,
        symbols: &dyn SymbolTable,
        probes: Option<&ProbeTable>,
    ) -> String {
        let mut out = String::new();
        if self.is_empty() {
            out.push_str(file.empty_text());
        } else if file.is_graph() {
            for ip in self.hash.iter() {
                push_ps(&mut out, symbols, ip);
                out.push('\n');
            }
        } else {
            symbols.for_each(&mut |s| {
                if self.hash.contains(s.addr) {
                    push_sym(&mut out, s.name, s.module);
                    out.push('\n');
                }
            });
        }
        if !file.is_graph() {
            for m in &self.mods {
                let _ = writeln!(out, "{}:mod:{}", m.func, m.module);
            }
        }
        if file == FilterFile::Filter {
            if let Some(p) = probes {
                p.show_into(&mut out, symbols);
            }
        }
        out
    }
}

fn push_sym(out: &mut String, name: &str, module: Option<&str>) {
    out.push_str(name);
    if let Some(m) = module {
        let _ = write!(out, " [{m}]");
    }
}

/// `%ps`: the symbol name (with ` [module]`), or the address in hex if unknown.
fn push_ps(out: &mut String, symbols: &dyn SymbolTable, ip: u64) {
    match symbols.lookup(ip) {
        Some(s) => push_sym(out, s.name, s.module),
        None => {
            let _ = write!(out, "{ip:#x}");
        }
    }
}

/// What the function commands need to know besides the symbols.
pub trait CommandEnv {
    /// The traceable functions.
    fn symbols(&self) -> &dyn SymbolTable;

    /// Whether `events/<system>/<event>` exists (`enable_event` / `disable_event`).
    fn event_exists(&self, system: &str, event: &str) -> bool {
        let _ = (system, event);
        false
    }

    /// Whether the `snapshot` command exists (`CONFIG_TRACER_SNAPSHOT`).
    fn has_snapshot(&self) -> bool {
        true
    }

    /// Whether the backend can run `cmd` (a command it cannot run is refused at write time
    /// with `EINVAL`, as an unknown command is). `snapshot` also needs
    /// [`CommandEnv::has_snapshot`]. The default accepts every command.
    fn supports(&self, cmd: ProbeCommand) -> bool {
        let _ = cmd;
        true
    }
}

/// A [`CommandEnv`] with symbols only: no events, snapshot supported.
#[derive(Clone, Copy, Debug)]
pub struct NoEvents<S>(pub S);

impl<S: SymbolTable> CommandEnv for NoEvents<S> {
    fn symbols(&self) -> &dyn SymbolTable {
        &self.0
    }
}

/// The command a function-command name selects, if `env` offers it.
fn probe_command(name: &str, env: &dyn CommandEnv) -> Option<ProbeCommand> {
    Some(match name {
        "traceon" => ProbeCommand::Traceon,
        "traceoff" => ProbeCommand::Traceoff,
        "stacktrace" => ProbeCommand::Stacktrace,
        "snapshot" if env.has_snapshot() => ProbeCommand::Snapshot,
        "enable_event" => ProbeCommand::EnableEvent,
        "disable_event" => ProbeCommand::DisableEvent,
        "dump" => ProbeCommand::Dump,
        "cpudump" => ProbeCommand::Cpudump,
        _ => return None,
    })
    .filter(|&c| env.supports(c))
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct ProbeData {
    ip: u64,
    /// `None`: the uncounted probe ops (`:unlimited`); `Some(-1)` is a counted probe with no
    /// limit (an empty count), printed as `count=-1` like the kernel does.
    count: Option<Arc<ProbeCount>>,
    event: Option<(String, String)>,
}

/// One probe ops: a command, counted or not, and the functions it is attached to.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Probe {
    cmd: ProbeCommand,
    counted: bool,
    hash: KHash,
    data: Vec<ProbeData>,
}

/// One function command attached to one function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeEntry<'a> {
    /// The function.
    pub ip: u64,
    /// The command.
    pub cmd: ProbeCommand,
    /// Remaining count (`None`: unlimited; `Some(-1)`: counted without limit).
    pub count: Option<i64>,
    /// `(system, event)` for `enable_event` / `disable_event`.
    pub event: Option<(&'a str, &'a str)>,
}

/// An instance's function commands (`tr->func_probes`), newest probe ops first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProbeTable {
    probes: Vec<Probe>,
}

impl ProbeTable {
    /// No commands.
    pub fn new() -> ProbeTable {
        ProbeTable::default()
    }

    /// Whether no command is attached.
    pub fn is_empty(&self) -> bool {
        self.probes.is_empty()
    }

    /// Every attached command, in read-back order.
    pub fn entries(&self) -> impl Iterator<Item = ProbeEntry<'_>> + '_ {
        self.probes.iter().flat_map(|p| {
            p.hash.iter().filter_map(move |ip| {
                let d = p.data.iter().find(|d| d.ip == ip)?;
                Some(ProbeEntry {
                    ip,
                    cmd: p.cmd,
                    count: d.count.as_ref().map(|c| c.get()),
                    event: d.event.as_ref().map(|(s, e)| (s.as_str(), e.as_str())),
                })
            })
        })
    }

    /// The commands attached to `ip`.
    pub fn at(&self, ip: u64) -> impl Iterator<Item = ProbeEntry<'_>> + '_ {
        self.entries().filter(move |e| e.ip == ip)
    }

    /// The ips that have `cmd` attached (the hash of its probe ops).
    pub fn hash_of(&self, cmd: ProbeCommand) -> FtraceHash {
        FtraceHash::from_ips(
            self.probes
                .iter()
                .filter(|p| p.cmd == cmd)
                .flat_map(|p| p.hash.iter()),
        )
    }

    /// The probes indexed by function, for a backend's probe ops. The runner shares this
    /// table's counts: what it decrements reads back in `set_ftrace_filter`.
    pub fn runner(&self) -> ProbeRunner {
        ProbeRunner::new(
            self.probes
                .iter()
                .flat_map(|p| {
                    p.hash.iter().filter_map(move |ip| {
                        let d = p.data.iter().find(|d| d.ip == ip)?;
                        Some(RunProbe {
                            ip,
                            cmd: p.cmd,
                            count: d.count.clone(),
                            event: d.event.clone(),
                        })
                    })
                })
                .collect(),
        )
    }

    /// Sets the remaining count of a counted `cmd` at `ip` (what a tracer does when the
    /// command fired); whether such a probe exists.
    pub fn set_count(&mut self, ip: u64, cmd: ProbeCommand, count: i64) -> bool {
        for p in self.probes.iter_mut().filter(|p| p.cmd == cmd && p.counted) {
            if let Some(c) = p
                .data
                .iter()
                .find(|d| d.ip == ip)
                .and_then(|d| d.count.as_ref())
            {
                c.set(count);
                return true;
            }
        }
        false
    }

    fn show_into(&self, out: &mut String, symbols: &dyn SymbolTable) {
        for e in self.entries() {
            push_ps(out, symbols, e.ip);
            out.push(':');
            out.push_str(e.cmd.name());
            if let Some((sys, ev)) = e.event {
                let _ = write!(out, ":{sys}:{ev}");
                match e.count {
                    Some(-1) | None => out.push_str(":unlimited\n"),
                    Some(c) => {
                        let _ = writeln!(out, ":count={c}");
                    }
                }
            } else {
                match e.count {
                    None => out.push_str(":unlimited\n"),
                    Some(c) => {
                        let _ = writeln!(out, ":count={c}");
                    }
                }
            }
        }
    }

    /// `register_ftrace_function_probe`: attaches to every function `glob` matches; returns
    /// how many were newly attached. `EINVAL` if nothing matches or nothing is new ("Nothing
    /// was added?").
    fn register(
        &mut self,
        glob: &str,
        cmd: ProbeCommand,
        counted: bool,
        count: i64,
        event: Option<(&str, &str)>,
        symbols: &dyn SymbolTable,
    ) -> Result<usize, Errno> {
        let idx = self
            .probes
            .iter()
            .position(|p| p.cmd == cmd && p.counted == counted);
        let old = idx.map(|i| &self.probes[i]);
        let mut hash = old.map_or_else(
            || KHash::new(HASH_DEFAULT_BITS),
            |p| p.hash.copy(HASH_DEFAULT_BITS),
        );
        if match_records(&mut hash, glob, None, symbols)? == 0 {
            return Err(Errno::EINVAL);
        }
        let mut data = old.map(|p| p.data.clone()).unwrap_or_default();
        let mut added = 0;
        for ip in hash.iter() {
            if old.is_some_and(|p| p.hash.contains(ip)) {
                continue;
            }
            data.push(ProbeData {
                ip,
                count: counted.then(|| Arc::new(ProbeCount::new(count))),
                event: event.map(|(s, e)| (s.to_string(), e.to_string())),
            });
            added += 1;
        }
        if added == 0 {
            return Err(Errno::EINVAL);
        }
        let probe = Probe {
            cmd,
            counted,
            hash: hash.moved(),
            data,
        };
        match idx {
            Some(i) => self.probes[i] = probe,
            None => self.probes.insert(0, probe),
        }
        Ok(added)
    }

    /// `unregister_ftrace_function_probe_func`.
    fn unregister(
        &mut self,
        glob: &str,
        cmd: ProbeCommand,
        counted: bool,
        symbols: &dyn SymbolTable,
    ) -> Result<(), Errno> {
        let Some(i) = self
            .probes
            .iter()
            .position(|p| p.cmd == cmd && p.counted == counted)
        else {
            return Err(Errno::ENODEV);
        };
        let all = glob.is_empty() || glob == "*";
        let g = Glob::parse(glob);
        if !all && g.not {
            return Err(Errno::EINVAL);
        }
        let mut hash = self.probes[i].hash.copy(HASH_DEFAULT_BITS);
        let doomed: Vec<u64> = hash
            .iter()
            .filter(|&ip| {
                all || symbols
                    .lookup(ip)
                    .is_some_and(|s| glob_matches_kernel(&g, s.name))
            })
            .collect();
        if doomed.is_empty() {
            return Err(Errno::EINVAL);
        }
        for ip in &doomed {
            hash.remove(*ip);
        }
        let p = &mut self.probes[i];
        p.data.retain(|d| !doomed.contains(&d.ip));
        if hash.count == 0 {
            self.probes.remove(i);
        } else {
            p.hash = hash.moved();
        }
        Ok(())
    }
}

/// `ftrace_match` (an index pattern matches no name).
fn glob_matches_kernel(g: &Glob<'_>, name: &str) -> bool {
    g.matches(name)
}

/// `match_records(hash, func, mod)`: adds (or, for `!func`, removes) every listed function
/// matching; returns 1 if something matched, 0 if not.
fn match_records(
    hash: &mut KHash,
    func: &str,
    module: Option<&str>,
    symbols: &dyn SymbolTable,
) -> Result<usize, Errno> {
    let func_g = Glob::parse(func);
    let clear = func_g.not;
    let mod_g = module.map(Glob::parse);
    let mut found = 0;
    if func_g.kind == MatchType::Index {
        let Some(mut index) = func_g.index() else {
            return Ok(0);
        };
        let mut hit = None;
        symbols.for_each(&mut |s| {
            if hit.is_none() {
                if index == 0 {
                    hit = Some(s.addr);
                } else {
                    index -= 1;
                }
            }
        });
        return Ok(match hit {
            Some(ip) => {
                enter_record(hash, ip, clear);
                1
            }
            None => 0,
        });
    }
    symbols.for_each(&mut |s| {
        let matched = match &mod_g {
            None => func_g.matches(s.name),
            Some(mg) => {
                let exclude_mod = mg.not;
                let func_all = func_g.search.is_empty();
                let pass_mod = if mg.search.is_empty() {
                    // Blank module: module-ness xor exclude.
                    exclude_mod != s.module.is_some()
                } else {
                    let mod_matches = s.module.is_some_and(|m| mg.matches(m));
                    mod_matches != exclude_mod
                };
                pass_mod && (func_all || func_g.matches(s.name))
            }
        };
        if matched {
            enter_record(hash, s.addr, clear);
            found = 1;
        }
    });
    Ok(found)
}

/// `enter_record`.
fn enter_record(hash: &mut KHash, ip: u64, clear: bool) {
    if clear {
        hash.remove(ip);
    } else if !hash.contains(ip) {
        hash.add(ip);
    }
}

fn module_exists(symbols: &dyn SymbolTable, module: &str) -> bool {
    let mut found = false;
    symbols.for_each(&mut |s| found |= s.module == Some(module));
    found
}

/// One open of a filter file for writing: the new content, built token by token, that
/// becomes the file's only at [`FilterDraft::close`].
#[derive(Clone, Debug)]
pub struct FilterDraft {
    file: FilterFile,
    hash: KHash,
    mods: Vec<ModEntry>,
    parser: String,
    cont: bool,
}

impl FilterDraft {
    /// Opens `file`, whose current content is `current`, for writing: [`WriteMode::Truncate`]
    /// (the shell's `>`) starts from an empty set and drops cached `:mod:` requests,
    /// [`WriteMode::Append`] from a copy of `current`.
    pub fn open(file: FilterFile, current: &FilterSet, mode: WriteMode) -> FilterDraft {
        let (hash, mods) = match mode {
            WriteMode::Truncate => (KHash::new(HASH_DEFAULT_BITS), Vec::new()),
            WriteMode::Append => (current.hash.copy(HASH_DEFAULT_BITS), current.mods.clone()),
        };
        FilterDraft {
            file,
            hash,
            mods,
            parser: String::new(),
            cont: false,
        }
    }

    /// The file being edited.
    pub fn file(&self) -> FilterFile {
        self.file
    }

    /// Consumes whitespace and at most one token of `buf` and applies the token
    /// (`trace_get_user` + `ftrace_process_regex` / `ftrace_graph_set_hash`); returns the
    /// number of bytes consumed. A token that reaches the end of `buf` is kept until the next
    /// write or [`FilterDraft::close`]. On error nothing changes except that the token is
    /// dropped, and the caller should stop writing (as `write(2)` returning -1 does).
    pub fn write(
        &mut self,
        buf: &str,
        env: &dyn CommandEnv,
        probes: &mut ProbeTable,
    ) -> Result<usize, Errno> {
        let b = buf.as_bytes();
        let mut i = 0;
        if b.is_empty() {
            return Ok(0);
        }
        if !self.cont {
            while i < b.len() && is_sep(b[i]) {
                i += 1;
            }
            self.parser.clear();
            if i == b.len() {
                return Ok(i);
            }
        }
        let start = i;
        while i < b.len() && !is_sep(b[i]) {
            i += 1;
        }
        if self.parser.len() + (i - start) > MAX_TOKEN {
            self.parser.clear();
            self.cont = false;
            return Err(Errno::EINVAL);
        }
        // `is_sep` only stops at ASCII bytes, so `start..i` is on char boundaries.
        self.parser.push_str(&buf[start..i]);
        if i < b.len() {
            // Consumed the separator: the token is complete.
            i += 1;
            self.cont = false;
            let token = core::mem::take(&mut self.parser);
            self.apply(&token, env, probes)?;
        } else {
            self.cont = true;
        }
        Ok(i)
    }

    /// Writes all of `text`, token by token, stopping at the first error (earlier tokens stay
    /// applied, as with a shell's `echo` looping over short writes).
    pub fn write_all(
        &mut self,
        text: &str,
        env: &dyn CommandEnv,
        probes: &mut ProbeTable,
    ) -> Result<(), Errno> {
        let mut rest = text;
        while !rest.is_empty() {
            let n = self.write(rest, env, probes)?;
            rest = &rest[n..];
        }
        Ok(())
    }

    /// Closes the file (`ftrace_regex_release` / `ftrace_graph_release`): applies a pending
    /// token (its error, like the kernel's, is only reported, the rest still commits) and
    /// returns the new content.
    pub fn close(
        mut self,
        env: &dyn CommandEnv,
        probes: &mut ProbeTable,
    ) -> (FilterSet, Result<(), Errno>) {
        let mut res = Ok(());
        if !self.parser.is_empty() {
            let token = core::mem::take(&mut self.parser);
            res = self.apply(&token, env, probes);
        }
        (
            FilterSet {
                hash: self.hash.moved(),
                mods: self.mods,
            },
            res,
        )
    }

    /// Applies one token, all or nothing.
    fn apply(
        &mut self,
        token: &str,
        env: &dyn CommandEnv,
        probes: &mut ProbeTable,
    ) -> Result<(), Errno> {
        let symbols = env.symbols();
        if self.file.is_graph() {
            return self.graph_set(token, symbols);
        }
        let enable = self.file == FilterFile::Filter;
        let Some((func, rest)) = token.split_once(':') else {
            let mut hash = self.hash.clone();
            if match_records(&mut hash, token, None, symbols)? == 0 {
                return Err(Errno::EINVAL);
            }
            self.hash = hash;
            return Ok(());
        };
        let (command, param) = match rest.split_once(':') {
            Some((c, p)) => (c, Some(p)),
            None => (rest, None),
        };
        if command == "mod" {
            let Some(module) = param else {
                return Err(Errno::EINVAL);
            };
            return self.mod_command(func, module, symbols);
        }
        let Some(cmd) = probe_command(command, env) else {
            return Err(Errno::EINVAL);
        };
        // "hash funcs only work with set_ftrace_filter"
        if !enable {
            return Err(Errno::EINVAL);
        }
        match cmd {
            ProbeCommand::EnableEvent | ProbeCommand::DisableEvent => {
                event_command(func, cmd, param, env, probes)
            }
            _ => {
                // `dump` and `cpudump` run "only once": the kernel registers them with the
                // parameter "1" whatever was written; `dump`'s probe ops keeps that count,
                // `cpudump`'s has no count map at all (it reads back `:unlimited` and runs
                // on every hit).
                let (counted, param) = match cmd {
                    ProbeCommand::Dump => (true, Some("1")),
                    ProbeCommand::Cpudump => (false, None),
                    _ => (param.is_some(), param),
                };
                if let Some(glob) = func.strip_prefix('!') {
                    return probes.unregister(glob, cmd, counted, symbols);
                }
                let mut count: i64 = -1;
                if let Some(p) = param {
                    let number = p.split(':').next().unwrap_or("");
                    if !number.is_empty() {
                        count = kstrtoul(number)? as i64;
                    }
                }
                probes.register(func, cmd, counted, count, None, symbols)?;
                Ok(())
            }
        }
    }

    /// `ftrace_mod_callback` + `cache_mod`.
    fn mod_command(
        &mut self,
        func: &str,
        module: &str,
        symbols: &dyn SymbolTable,
    ) -> Result<(), Errno> {
        let mut hash = self.hash.clone();
        if match_records(&mut hash, func, Some(module), symbols)? != 0 {
            self.hash = hash;
            return Ok(());
        }
        if let Some(f) = func.strip_prefix('!') {
            // "We do not cache inverse filters": remove matching cached requests.
            let before = self.mods.len();
            self.mods
                .retain(|m| !(m.module == module && (f == "*" || m.func == f)));
            return if self.mods.len() < before {
                Ok(())
            } else {
                Err(Errno::EINVAL)
            };
        }
        if module_exists(symbols, module) {
            return Err(Errno::EINVAL);
        }
        self.mods.insert(
            0,
            ModEntry {
                func: func.to_string(),
                module: module.to_string(),
            },
        );
        Ok(())
    }

    /// `ftrace_graph_set_hash`: no commands, no index; `!name` must remove something.
    fn graph_set(&mut self, token: &str, symbols: &dyn SymbolTable) -> Result<(), Errno> {
        let g = Glob::parse(token);
        let mut hash = self.hash.clone();
        let mut fail = true;
        symbols.for_each(&mut |s| {
            if g.matches(s.name) {
                if !g.not {
                    fail = false;
                    if !hash.contains(s.addr) {
                        hash.add(s.addr);
                    }
                } else if hash.remove(s.addr) {
                    fail = false;
                }
            }
        });
        if fail {
            return Err(Errno::EINVAL);
        }
        self.hash = hash;
        Ok(())
    }
}

/// `event_enable_func`.
fn event_command(
    func: &str,
    cmd: ProbeCommand,
    param: Option<&str>,
    env: &dyn CommandEnv,
    probes: &mut ProbeTable,
) -> Result<(), Errno> {
    let param = param.ok_or(Errno::EINVAL)?;
    let (system, rest) = param.split_once(':').ok_or(Errno::EINVAL)?;
    let (event, count) = match rest.split_once(':') {
        Some((e, c)) => (e, Some(c)),
        None => (rest, None),
    };
    if !env.event_exists(system, event) {
        return Err(Errno::EINVAL);
    }
    if let Some(glob) = func.strip_prefix('!') {
        return probes.unregister(glob, cmd, count.is_some(), env.symbols());
    }
    let mut n: i64 = -1;
    if let Some(c) = count {
        let number = c.split(':').next().unwrap_or("");
        if number.is_empty() {
            return Err(Errno::EINVAL);
        }
        n = kstrtoul(number)? as i64;
    }
    probes.register(
        func,
        cmd,
        count.is_some(),
        n,
        Some((system, event)),
        env.symbols(),
    )?;
    Ok(())
}

fn is_sep(c: u8) -> bool {
    ftrace_core::filter::is_kernel_space(c) || c == 0
}
