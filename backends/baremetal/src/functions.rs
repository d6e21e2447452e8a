//! The call-site records and the function filters of the tracing instance, wired as the
//! kernel wires them: ftrace-patch's [`RecordTable`] (one `dyn_ftrace` record per call site,
//! with its reference count and flags), the four filter files in ftrace-tracefs's
//! [`FilterState`] (ftrace-core's filter language: globs, `!`, `:mod:`, function commands),
//! the dispatcher ops those filters apply to, and the graph filter ([`GraphFilterCell`]).
//!
//! [`FunctionSites`] is what the kernel keeps under `ftrace_lock`. Enabling or disabling a
//! tracer's ops ([`FunctionSites::enable`], [`FunctionSites::disable`]) and writing a filter
//! file ([`FunctionSites::republish`]) go the kernel's way: the filter and notrace hashes are
//! published to every ops of the instance (`set_ftrace_filter` / `set_ftrace_notrace` are the
//! global filter every tracer uses), `set_graph_function` / `set_graph_notrace` to the graph
//! filter, every record's reference count is recomputed from the enabled ops' hashes
//! (`ftrace_hash_rec_update`), and one `ftrace_replace_code` pass brings the text to match,
//! in one batch through ftrace-patch's protocols. Which sites are patched is never decided
//! here: it follows from the hashes.
//!
//! Function commands (`bm_leaf:traceoff:3`...) are parsed, kept and listed in
//! `set_ftrace_filter` as the kernel lists them, and run by the probe ops (`trace_probe_ops`)
//! the instance keeps enabled while it has any ([`FunctionSites::set_ops_filter`] gives that
//! ops the probes' functions as its filter). Only `traceon` and `traceoff` run here; the
//! other commands are refused at write time with `EINVAL` (no snapshot buffer, no events, no
//! stack unwinder, no console dump from inside a traced function).
//!
//! Generic over the text ([`TextPoke`]) and the dispatcher's platform, so the logic runs on
//! the host in unit tests (ftrace-patch's `SimText`) exactly as in the kernel (`KernelText`).
//!
//! Invariant: the ops' hashes are replaced only through `&mut FunctionSites` (its owner's
//! lock), so the record views ([`FtraceOpsView`]) built under that lock read stable hashes;
//! after every method returns, a record not `DISABLED` is enabled (its site calls the
//! trampoline) exactly when some enabled ops admits its address.

use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;

use ftrace_core::Errno;
use ftrace_core::dispatch::Dispatcher;
use ftrace_core::filter::{FtraceHash, ProbeActions, ProbeCommand, ProbeRunner};
use ftrace_core::ops::FtraceOps;
use ftrace_core::platform::{Reclaim, RecursionState};
use ftrace_core::reclaim::{Published, ReaderCount};
use ftrace_core::symbols::{SortedSymbols, SymbolTable};
use ftrace_patch::{
    DynFtrace, FixedTargets, FtraceBug, FtraceOpsView, InitKind, PageStats, PokeSite, Protocol,
    RecordOps, RecordTable, TextPoke, UpdatePass, UpdateStats, init_records,
};
use ftrace_tracefs::FilterFile;
use ftrace_tracefs::filter_edit::CommandEnv;
use ftrace_tracefs::filters::FilterState;
use ftrace_tracefs::records::CallSites;
use ftrace_tracers::function_graph::GraphFunctions;

use crate::sync::{AtomicPtr, Ordering};

/// `set_graph_function` and `set_graph_notrace` as one published value.
#[derive(Debug, Default, PartialEq, Eq)]
struct GraphLists {
    functions: Vec<u64>,
    notrace: Vec<u64>,
}

/// No graph filter: every function is a graph root, none is excluded.
const ALL_GRAPH: GraphFunctions<'static> = GraphFunctions {
    functions: &[],
    notrace: &[],
};

/// A `Box<T>` that readers on any CPU use while a serialised writer replaces it: published by
/// pointer swap, the old one freed after a grace period of the cell's own reader count (the
/// dispatcher's hashes are published the same way).
///
/// Invariant: a non-null pointer is a live `Box<T>`; a replaced one is freed only after every
/// reader that pinned before the swap has finished.
struct PublishedBox<T> {
    ptr: AtomicPtr<T>,
    readers: ReaderCount,
}

impl<T> PublishedBox<T> {
    const fn new() -> Self {
        Self {
            ptr: AtomicPtr::new(core::ptr::null_mut()),
            readers: ReaderCount::new(),
        }
    }

    fn is_set(&self) -> bool {
        !self.ptr.load(Ordering::Relaxed).is_null()
    }

    /// Runs `f` with the current value (the hot path: one load when none is set, otherwise a
    /// read-side section of the reader count).
    #[inline]
    fn with<R>(&self, f: impl FnOnce(Option<&T>) -> R) -> R {
        if self.ptr.load(Ordering::Acquire).is_null() {
            return f(None);
        }
        let _guard = self.readers.pin();
        // SAFETY: pinned before this load, so a value swapped out after it is not freed before
        // the guard is dropped (`publish` synchronizes first); non-null pointers come from
        // `Box::into_raw`.
        f(unsafe { self.ptr.load(Ordering::Acquire).as_ref() })
    }

    /// Publishes `value` (`None`: nothing) and frees the old one after a grace period.
    /// Writers are serialised by the caller (the owner's lock).
    fn publish(&self, value: Option<T>) {
        let new = value.map_or(core::ptr::null_mut(), |v| Box::into_raw(Box::new(v)));
        let old = self.ptr.swap(new, Ordering::AcqRel);
        if !old.is_null() {
            self.readers.synchronize();
            // SAFETY: `old` came from `Box::into_raw`, is unreachable for new readers (swapped
            // out), and every reader that could hold it has finished (synchronize).
            drop(unsafe { Box::from_raw(old) });
        }
    }
}

impl<T> Drop for PublishedBox<T> {
    fn drop(&mut self) {
        let p = *self.ptr.get_mut();
        if !p.is_null() {
            // SAFETY: `&mut self`: no reader is left; the pointer came from `Box::into_raw`.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

/// The graph filter the function_graph entry hook reads on any CPU (a `PublishedBox`).
pub struct GraphFilterCell(PublishedBox<GraphLists>);

impl core::fmt::Debug for GraphFilterCell {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("GraphFilterCell")
            .field("set", &self.0.is_set())
            .finish_non_exhaustive()
    }
}

impl Default for GraphFilterCell {
    fn default() -> Self {
        Self::new()
    }
}

impl GraphFilterCell {
    /// No graph filter.
    pub const fn new() -> Self {
        Self(PublishedBox::new())
    }

    /// Runs `f` with the current graph filter (the hot path: one load when no filter is set,
    /// otherwise a read-side section of the cell's reader count).
    #[inline]
    pub fn with<T>(&self, f: impl FnOnce(&GraphFunctions<'_>) -> T) -> T {
        self.0.with(|lists| match lists {
            Some(l) => f(&GraphFunctions {
                functions: &l.functions,
                notrace: &l.notrace,
            }),
            None => f(&ALL_GRAPH),
        })
    }

    /// Publishes new lists (both empty: no filter) and frees the old ones after a grace
    /// period. Writers are serialised by the caller (the owner's lock).
    pub fn publish(&self, functions: Vec<u64>, notrace: Vec<u64>) {
        let set = !(functions.is_empty() && notrace.is_empty());
        self.0
            .publish(set.then_some(GraphLists { functions, notrace }));
    }
}

/// The function commands the probe ops runs (`trace_probe_ops`' probe hash), a
/// `PublishedBox` like [`GraphFilterCell`]. The runner shares its counts with the filter
/// state's probe table, so what the probe ops spends reads back in `set_ftrace_filter`.
pub struct ProbeCell(PublishedBox<ProbeRunner>);

impl core::fmt::Debug for ProbeCell {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ProbeCell")
            .field("set", &self.0.is_set())
            .finish_non_exhaustive()
    }
}

impl Default for ProbeCell {
    fn default() -> Self {
        Self::new()
    }
}

impl ProbeCell {
    /// No probes.
    pub const fn new() -> Self {
        Self(PublishedBox::new())
    }

    /// The probe ops' callback body: runs the probes attached at `ip`; how many acted.
    #[inline]
    pub fn run(&self, ip: u64, parent_ip: u64, actions: &dyn ProbeActions) -> usize {
        self.0
            .with(|r| r.map_or(0, |r| r.run(ip, parent_ip, actions)))
    }

    /// Publishes `runner` (empty: none) and frees the old one after a grace period. Writers
    /// are serialised by the caller (the owner's lock).
    pub fn publish(&self, runner: ProbeRunner) {
        self.0.publish((!runner.is_empty()).then_some(runner));
    }
}

/// The filter language's environment here: the call sites as symbols (named after the
/// functions holding them, at the site addresses the dispatcher is called with), no trace
/// events (`enable_event` / `disable_event` are refused), no snapshot buffer (`snapshot` is
/// refused, as by a kernel without `CONFIG_TRACER_SNAPSHOT`), and only the commands the
/// probe ops can run (`traceon`, `traceoff`).
struct SiteCommands(SortedSymbols);

impl CommandEnv for SiteCommands {
    fn symbols(&self) -> &dyn SymbolTable {
        &self.0
    }

    fn has_snapshot(&self) -> bool {
        false
    }

    fn supports(&self, cmd: ProbeCommand) -> bool {
        matches!(cmd, ProbeCommand::Traceon | ProbeCommand::Traceoff)
    }
}

/// A record view of `op`.
///
/// # Safety
/// `op`'s hashes are not replaced while the view is used (they are replaced only through
/// `&mut FunctionSites`, and views live within one method call of it).
unsafe fn view(op: &'static FtraceOps) -> FtraceOpsView<'static> {
    // SAFETY: the caller's contract is the view's.
    unsafe { FtraceOpsView::new(op) }
}

/// Views of `ops`, for the record table.
fn views(ops: &[&'static FtraceOps]) -> Vec<FtraceOpsView<'static>> {
    // SAFETY: called only inside `FunctionSites` methods (see `view`).
    ops.iter().map(|o| unsafe { view(o) }).collect()
}

/// The records, the filter files and the enabled ops of one tracing instance (the kernel's
/// state under `ftrace_lock`). See the module docs.
pub struct FunctionSites {
    table: RecordTable<Vec<DynFtrace>>,
    pages: PageStats,
    filters: FilterState,
    /// Every ops the global filter files apply to (each tracer's ops).
    ops: &'static [&'static FtraceOps],
    /// The enabled ops, in enabling order.
    enabled: Vec<&'static FtraceOps>,
    targets: FixedTargets,
    protocol: Protocol,
}

impl core::fmt::Debug for FunctionSites {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("FunctionSites")
            .field("records", &self.table.len())
            .field("enabled", &self.enabled.len())
            .finish_non_exhaustive()
    }
}

impl FunctionSites {
    /// `ftrace_process_locs`: builds one record per call site of `entries` (recognised with
    /// ftrace-patch's x86 classifier; a site holding unexpected bytes is reported through
    /// `on_bug` and its record `DISABLED`), and filter files whose patterns resolve against
    /// the sites, named after the functions of `syms` that hold them.
    ///
    /// `ops` are the ops the filters apply to; `targets` the trampoline every enabled site
    /// calls; `protocol` how live text is rewritten.
    pub fn new<T: TextPoke>(
        text: &mut T,
        entries: &[u64],
        syms: &dyn SymbolTable,
        ops: &'static [&'static FtraceOps],
        targets: FixedTargets,
        protocol: Protocol,
        on_bug: &mut dyn FnMut(&FtraceBug),
    ) -> Result<Self, Errno> {
        let mut entries = entries.to_vec();
        let mut recs = alloc::vec![DynFtrace::default(); entries.len()];
        let mut scratch: Vec<PokeSite> = (0..16).map(|_| PokeSite::empty()).collect();
        let (n, _) = init_records(
            text,
            InitKind::X86,
            &mut entries,
            &mut recs,
            protocol,
            &mut scratch,
            on_bug,
        );
        recs.truncate(n);
        let table = RecordTable::new(recs)?;
        // every entry is a record (one that failed to initialise is kept, `DISABLED`)
        let mut pages = PageStats::kernel();
        pages.add_text(n, 0);
        let env = SiteCommands(table.site_symbols(syms));
        Ok(Self {
            table,
            pages,
            filters: FilterState::new(Arc::new(env)),
            ops,
            enabled: Vec::new(),
            targets,
            protocol,
        })
    }

    /// The records.
    pub fn table(&self) -> &RecordTable<Vec<DynFtrace>> {
        &self.table
    }

    /// The filter files (for ftrace-tracefs's `FilterWriter` and the read-back text).
    pub fn filters(&self) -> &FilterState {
        &self.filters
    }

    /// The filter files, to edit. Call [`FunctionSites::republish`] after a change.
    pub fn filters_mut(&mut self) -> &mut FilterState {
        &mut self.filters
    }

    /// Whether `op` is enabled on the records.
    pub fn is_enabled(&self, op: &FtraceOps) -> bool {
        self.enabled.iter().any(|o| core::ptr::eq(*o, op))
    }

    /// What the call-site files read (ftrace-tracefs's `PatchRecords`): the records, the
    /// enabled ops, the page accounting.
    pub fn with_call_sites(&self, f: &mut dyn FnMut(CallSites<'_>)) {
        let v = views(&self.enabled);
        let list: Vec<&dyn RecordOps> = v.iter().map(|v| v as &dyn RecordOps).collect();
        f(CallSites {
            table: &self.table,
            ops: &list,
            pages: &self.pages,
        })
    }

    /// `ftrace_replace_code`: one pass over the records, every site whose flags changed
    /// rewritten in one batch.
    fn update_calls<T: TextPoke>(
        &mut self,
        text: &mut T,
        on_bug: &mut dyn FnMut(&FtraceBug),
    ) -> UpdateStats {
        let v = views(&self.enabled);
        let list: Vec<&dyn RecordOps> = v.iter().map(|v| v as &dyn RecordOps).collect();
        let pass = UpdatePass {
            targets: &self.targets,
            ops: &list,
            enable: true,
            protocol: self.protocol,
        };
        self.table.replace_code_all(text, &pass, on_bug)
    }

    /// `ftrace_startup`: registers `op` with the dispatcher, counts it into every record it
    /// admits and patches those sites. `EBUSY` if it is enabled already.
    pub fn enable<T: TextPoke, R: Reclaim, P: RecursionState>(
        &mut self,
        dispatcher: &Dispatcher<R, P>,
        op: &'static FtraceOps,
        text: &mut T,
        on_bug: &mut dyn FnMut(&FtraceBug),
    ) -> Result<UpdateStats, Errno> {
        if self.is_enabled(op) {
            return Err(Errno::EBUSY);
        }
        dispatcher.register(op)?;
        self.enabled.push(op);
        let v = views(&self.enabled);
        let list: Vec<&dyn RecordOps> = v.iter().map(|v| v as &dyn RecordOps).collect();
        // SAFETY: inside a `&mut self` method (see `view`).
        let r = self.table.ops_enable(&unsafe { view(op) }, &list);
        drop(list);
        if let Err(e) = r {
            self.enabled.pop();
            dispatcher.unregister(op)?;
            return Err(e);
        }
        Ok(self.update_calls(text, on_bug))
    }

    /// `ftrace_shutdown`: counts `op` out of its records, returns the sites nothing else wants
    /// to their NOPs, then unregisters it from the dispatcher (no site calls it any more).
    /// Does nothing if `op` is not enabled.
    pub fn disable<T: TextPoke, R: Reclaim, P: RecursionState>(
        &mut self,
        dispatcher: &Dispatcher<R, P>,
        op: &'static FtraceOps,
        text: &mut T,
        on_bug: &mut dyn FnMut(&FtraceBug),
    ) -> Result<UpdateStats, Errno> {
        let Some(i) = self.enabled.iter().position(|o| core::ptr::eq(*o, op)) else {
            return Ok(UpdateStats::default());
        };
        self.enabled.remove(i);
        let v = views(&self.enabled);
        let list: Vec<&dyn RecordOps> = v.iter().map(|v| v as &dyn RecordOps).collect();
        // SAFETY: inside a `&mut self` method (see `view`).
        self.table.ops_disable(&unsafe { view(op) }, &list);
        drop(list);
        let st = self.update_calls(text, on_bug);
        dispatcher.unregister(op)?;
        Ok(st)
    }

    /// Gives `op` (an ops the global filter files do not apply to, such as the probe ops) the
    /// filter hash `filter` (`ftrace_hash_move_and_update_ops` for one ops): if it is enabled
    /// it is counted out of the records, its hash replaced, counted back in, and one update
    /// pass patches and unpatches what changed.
    pub fn set_ops_filter<T: TextPoke, R: Reclaim, P: RecursionState>(
        &mut self,
        dispatcher: &Dispatcher<R, P>,
        op: &'static FtraceOps,
        filter: FtraceHash,
        text: &mut T,
        on_bug: &mut dyn FnMut(&FtraceBug),
    ) -> Result<UpdateStats, Errno> {
        let Some(i) = self.enabled.iter().position(|o| core::ptr::eq(*o, op)) else {
            dispatcher.set_filter(op, Published::Owned(Box::new(filter)));
            return Ok(UpdateStats::default());
        };
        let others: Vec<&'static FtraceOps> = self
            .enabled
            .iter()
            .enumerate()
            .filter(|&(k, _)| k != i)
            .map(|(_, o)| *o)
            .collect();
        let rest = views(&others);
        let list: Vec<&dyn RecordOps> = rest.iter().map(|v| v as &dyn RecordOps).collect();
        // SAFETY: inside a `&mut self` method (see `view`).
        self.table.ops_disable(&unsafe { view(op) }, &list);
        drop(list);
        dispatcher.set_filter(op, Published::Owned(Box::new(filter)));
        let all = views(&self.enabled);
        let list: Vec<&dyn RecordOps> = all.iter().map(|v| v as &dyn RecordOps).collect();
        // SAFETY: inside a `&mut self` method (see `view`).
        let r = self.table.ops_enable(&unsafe { view(op) }, &list);
        drop(list);
        let st = self.update_calls(text, on_bug);
        r.map(|_| st)
    }

    /// The function commands changed (`register_ftrace_function_probe` /
    /// `unregister_ftrace_function_probe_func`): `cell` gets the new runner and `probe_op`
    /// (the probe ops, whose callback runs `cell`) the probes' functions as its filter hash.
    /// It is enabled while there is any probe (sites patched even under `nop`) and disabled
    /// when the last one goes: an empty filter hash would admit every function.
    pub fn republish_probes<T: TextPoke, R: Reclaim, P: RecursionState>(
        &mut self,
        dispatcher: &Dispatcher<R, P>,
        probe_op: &'static FtraceOps,
        cell: &ProbeCell,
        text: &mut T,
        on_bug: &mut dyn FnMut(&FtraceBug),
    ) -> Result<UpdateStats, Errno> {
        let runner = self.filters.probes().runner();
        if runner.is_empty() {
            let st = self.disable(dispatcher, probe_op, text, on_bug)?;
            cell.publish(runner);
            return Ok(st);
        }
        let hash = runner.hash().clone();
        cell.publish(runner);
        if self.is_enabled(probe_op) {
            self.set_ops_filter(dispatcher, probe_op, hash, text, on_bug)
        } else {
            dispatcher.set_filter(probe_op, Published::Owned(Box::new(hash)));
            self.enable(dispatcher, probe_op, text, on_bug)
        }
    }

    /// A filter file changed (`ftrace_hash_move_and_update_ops`): the enabled ops are counted
    /// out of the records, the filter and notrace hashes are published to every ops of the
    /// instance and the graph lists to `graph`, the ops are counted back in under their new
    /// hashes, and one update pass patches and unpatches what changed.
    pub fn republish<T: TextPoke, R: Reclaim, P: RecursionState>(
        &mut self,
        dispatcher: &Dispatcher<R, P>,
        graph: &GraphFilterCell,
        text: &mut T,
        on_bug: &mut dyn FnMut(&FtraceBug),
    ) -> Result<UpdateStats, Errno> {
        let enabled = self.enabled.clone();
        for i in (0..enabled.len()).rev() {
            let rest = views(&enabled[..i]);
            let list: Vec<&dyn RecordOps> = rest.iter().map(|v| v as &dyn RecordOps).collect();
            // SAFETY: inside a `&mut self` method (see `view`).
            self.table.ops_disable(&unsafe { view(enabled[i]) }, &list);
        }
        let filter = self.filters.set(FilterFile::Filter).to_hash();
        let notrace = self.filters.set(FilterFile::Notrace).to_hash();
        for op in self.ops {
            dispatcher.set_filter(op, Published::Owned(Box::new(filter.clone())));
            dispatcher.set_notrace(op, Published::Owned(Box::new(notrace.clone())));
        }
        graph.publish(
            self.filters.set(FilterFile::GraphFunction).ips().collect(),
            self.filters.set(FilterFile::GraphNotrace).ips().collect(),
        );
        let mut r = Ok(());
        for i in 0..enabled.len() {
            let upto = views(&enabled[..=i]);
            let list: Vec<&dyn RecordOps> = upto.iter().map(|v| v as &dyn RecordOps).collect();
            // SAFETY: inside a `&mut self` method (see `view`).
            let e = self.table.ops_enable(&unsafe { view(enabled[i]) }, &list);
            r = r.and(e.map(|_| ()));
        }
        let st = self.update_calls(text, on_bug);
        r.map(|()| st)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::String;
    use ftrace_core::event::{TraceCtx, TraceFlags};
    use ftrace_core::ops::{FtraceRegs, OpsFlags};
    use ftrace_core::platform::{ExecContext, TaskContext};
    use ftrace_core::recursion::TraceRecursion;
    use ftrace_core::symbols::SortedSymbols;
    use ftrace_patch::SiteForm;
    use ftrace_patch::sim::SimText;
    use ftrace_patch::x86::NOP5_DISP8;
    use ftrace_tracefs::WriteMode;
    use ftrace_tracefs::filters::{FilterStore, FilterWriter};
    use std::sync::{Mutex, MutexGuard};

    const BASE: u64 = 0x10_0000;
    const FUNC: u64 = 0x40;
    const TRAMP: u64 = BASE + 0x8000;
    /// The test text's functions, one site at each entry (rustc's `0f 1f 44 00 08`), except
    /// `corrupt`, whose site holds a jump.
    const NAMES: [&str; 6] = [
        "bm_workload",
        "bm_outer",
        "bm_middle",
        "bm_leaf",
        "other_work",
        "corrupt",
    ];
    const LIVE: [&str; 5] = [
        "bm_workload",
        "bm_outer",
        "bm_middle",
        "bm_leaf",
        "other_work",
    ];

    fn addr(name: &str) -> u64 {
        BASE + NAMES.iter().position(|n| *n == name).unwrap() as u64 * FUNC
    }

    fn syms() -> SortedSymbols {
        let mut syms = SortedSymbols::new();
        for n in NAMES {
            syms.push(n, addr(n), FUNC, None);
        }
        syms.finish();
        syms
    }

    struct Task;
    static RECURSION: TraceRecursion = TraceRecursion::new();
    impl TaskContext for Task {
        fn current_pid(&self) -> i32 {
            0
        }
        fn trace_ctx(&self) -> TraceCtx {
            TraceCtx::new(TraceFlags::empty(), 0, 0)
        }
        fn exec_context(&self) -> ExecContext {
            ExecContext::Normal
        }
    }
    impl RecursionState for Task {
        fn trace_recursion(&self) -> &TraceRecursion {
            &RECURSION
        }
    }

    /// Every callback: (ops private tag, ip). Tests tell their ops apart by fresh tags.
    static CALLS: Mutex<Vec<(usize, u64)>> = Mutex::new(Vec::new());

    fn record(ip: u64, _parent: u64, op: &FtraceOps, _regs: Option<&mut FtraceRegs>) {
        CALLS.lock().unwrap().push((op.private() as usize, ip));
    }

    /// The sites behind a lock, as the backend keeps them; the filter writer's store.
    #[derive(Clone)]
    struct Shared(Arc<Mutex<FunctionSites>>);

    impl FilterStore for Shared {
        fn with_state(&self, f: &mut dyn FnMut(&mut FilterState)) {
            f(self.0.lock().unwrap().filters_mut())
        }
    }

    /// One test's world: its own dispatcher, two ops ("a" = function, "b" = graph), text.
    struct World {
        dispatcher: &'static Dispatcher<ReaderCount, Task>,
        a: &'static FtraceOps,
        b: &'static FtraceOps,
        tag: usize,
        text: SimText,
        sites: Shared,
        graph: GraphFilterCell,
        bugs: Vec<String>,
    }

    fn world() -> World {
        let dispatcher = Box::leak(Box::new(Dispatcher::new(ReaderCount::new(), Task)));
        let tag = Box::leak(Box::new([0u8; 2])).as_ptr() as usize;
        let a: &'static FtraceOps = Box::leak(Box::new(FtraceOps::with_private(
            record,
            OpsFlags::empty(),
            tag as *const (),
            None,
        )));
        let b: &'static FtraceOps = Box::leak(Box::new(FtraceOps::with_private(
            record,
            OpsFlags::GRAPH,
            (tag + 1) as *const (),
            None,
        )));
        let ops: &'static [&'static FtraceOps] = Box::leak(Box::new([a, b]));
        let mut text = SimText::new(BASE, 0x9000);
        for n in NAMES {
            text.poke(addr(n), &NOP5_DISP8);
        }
        text.poke(addr("corrupt"), &[0xe9, 1, 2, 3, 4]);
        let entries: Vec<u64> = NAMES.iter().map(|n| addr(n)).collect();
        let mut bugs = Vec::new();
        let targets = FixedTargets {
            caller: TRAMP,
            regs_caller: TRAMP,
            list_ops: 0,
            nop_ops: 0,
        };
        let sites = FunctionSites::new(
            &mut text,
            &entries,
            &syms(),
            ops,
            targets,
            Protocol::Breakpoint,
            &mut |b| bugs.push(std::format!("{b}")),
        )
        .unwrap();
        World {
            dispatcher,
            a,
            b,
            tag,
            text,
            sites: Shared(Arc::new(Mutex::new(sites))),
            graph: GraphFilterCell::new(),
            bugs,
        }
    }

    impl World {
        fn sites(&self) -> MutexGuard<'_, FunctionSites> {
            self.sites.0.lock().unwrap()
        }

        /// The functions whose site calls the trampoline.
        fn patched(&self) -> Vec<&'static str> {
            NAMES
                .iter()
                .copied()
                .filter(|n| {
                    let b = self.text.bytes(addr(n), 5);
                    SiteForm::X86Nop5Disp8.call_target(addr(n), b) == Some(TRAMP)
                })
                .collect()
        }

        /// Runs every function once, as the CPU would (a patched site enters the
        /// dispatcher); returns which ops (0 = a, 1 = b) saw which function.
        fn run(&self) -> Vec<(usize, &'static str)> {
            let mut calls = CALLS.lock().unwrap();
            calls.retain(|(t, _)| *t != self.tag && *t != self.tag + 1);
            drop(calls);
            for n in self.patched() {
                self.dispatcher.call(addr(n), 0, None);
            }
            let calls = CALLS.lock().unwrap();
            let mut v: Vec<(usize, &'static str)> = calls
                .iter()
                .filter(|(t, _)| *t == self.tag || *t == self.tag + 1)
                .map(|(t, ip)| {
                    let name = NAMES.iter().copied().find(|n| addr(n) == *ip).unwrap();
                    (t - self.tag, name)
                })
                .collect();
            v.sort_unstable_by_key(|(t, n)| (*t, addr(n)));
            v
        }

        /// `echo text > file` (or `>>`, as `mode` says) through ftrace-tracefs's writer, then
        /// the republish its release asks the backend for.
        fn echo(&mut self, text: &str, which: FilterFile, mode: WriteMode) -> Result<(), Errno> {
            let mut w = FilterWriter::open(self.sites.clone(), which, mode);
            // as write(2) does: the writer may take part of the data per call
            let mut data = text.as_bytes();
            let mut r = Ok(());
            while !data.is_empty() && r.is_ok() {
                r = w
                    .write(data)
                    .map(|n| data = &data[n.max(1).min(data.len())..]);
            }
            r.and(w.release())?;
            let bugs = &mut self.bugs;
            self.sites
                .0
                .lock()
                .unwrap()
                .republish(self.dispatcher, &self.graph, &mut self.text, &mut |b| {
                    bugs.push(std::format!("{b}"))
                })
                .map(|_| ())
        }

        fn enable(&mut self, op: &'static FtraceOps) -> UpdateStats {
            let bugs = &mut self.bugs;
            self.sites
                .0
                .lock()
                .unwrap()
                .enable(self.dispatcher, op, &mut self.text, &mut |b| {
                    bugs.push(std::format!("{b}"))
                })
                .unwrap()
        }

        fn disable(&mut self, op: &'static FtraceOps) {
            let bugs = &mut self.bugs;
            self.sites
                .0
                .lock()
                .unwrap()
                .disable(self.dispatcher, op, &mut self.text, &mut |b| {
                    bugs.push(std::format!("{b}"))
                })
                .unwrap();
        }

        fn enabled_functions(&self, touched: bool) -> String {
            let syms = syms();
            let mut out = String::new();
            self.sites().with_call_sites(&mut |cs| {
                cs.table
                    .write_enabled(&mut out, &syms, cs.ops, touched)
                    .unwrap();
            });
            out
        }

        /// The probe ops' republish, as the backend's filter release runs it after
        /// [`FunctionSites::republish`].
        fn probes(&mut self, op: &'static FtraceOps, cell: &ProbeCell) -> UpdateStats {
            let bugs = &mut self.bugs;
            self.sites
                .0
                .lock()
                .unwrap()
                .republish_probes(self.dispatcher, op, cell, &mut self.text, &mut |b| {
                    bugs.push(std::format!("{b}"))
                })
                .unwrap()
        }

        fn filter_text(&self, which: FilterFile) -> String {
            let mut s = String::new();
            self.sites().filters().write_filter(which, &mut s).unwrap();
            s
        }
    }

    fn lines(names: &[&str], count: u32) -> String {
        names
            .iter()
            .map(|n| std::format!("{n} ({count})           \n"))
            .collect()
    }

    #[test]
    fn records_come_from_the_sites_and_a_bad_site_is_disabled_and_reported() {
        let mut w = world();
        assert_eq!(w.sites().table().len(), NAMES.len());
        assert_eq!(w.bugs.len(), 1, "{:?}", w.bugs);
        assert!(
            w.bugs[0].contains("Initializing ftrace call sites"),
            "{}",
            w.bugs[0]
        );
        let mut total = String::new();
        w.sites()
            .with_call_sites(&mut |cs| cs.pages.write_total_info(&mut total).unwrap());
        assert_eq!(total, "6 pages:1 groups: 1\n");
        let mut avail = String::new();
        w.sites().with_call_sites(&mut |cs| {
            cs.table
                .write_available(&mut avail, &syms(), false)
                .unwrap()
        });
        // (whether the disabled record is listed is ftrace-patch's `write_available` to say)
        assert!(
            avail.starts_with("bm_workload\nbm_outer\nbm_middle\nbm_leaf\nother_work\n"),
            "{avail}"
        );
        // the disabled site is never patched
        let st = w.enable(w.a);
        assert_eq!(st.failed, 0);
        assert_eq!(w.text.bytes(addr("corrupt"), 5), [0xe9, 1, 2, 3, 4]);
        assert_eq!(w.patched(), LIVE);
        assert_eq!(w.bugs.len(), 1);
    }

    #[test]
    fn the_hashes_decide_which_sites_are_patched() {
        let mut w = world();
        assert_eq!(
            w.echo("no_such_function", FilterFile::Filter, WriteMode::Truncate),
            Err(Errno::EINVAL)
        );
        w.echo("bm_*", FilterFile::Filter, WriteMode::Truncate)
            .unwrap();
        assert!(w.patched().is_empty(), "no ops enabled: nothing patched");
        w.enable(w.a);
        let bm = ["bm_workload", "bm_outer", "bm_middle", "bm_leaf"];
        assert_eq!(w.patched(), bm);
        assert_eq!(w.enabled_functions(false), lines(&bm, 1));
        // notrace wins over the filter: bm_leaf's site goes back to its NOP
        w.echo("bm_leaf", FilterFile::Notrace, WriteMode::Truncate)
            .unwrap();
        assert_eq!(w.patched(), ["bm_workload", "bm_outer", "bm_middle"]);
        assert_eq!(w.text.bytes(addr("bm_leaf"), 5), NOP5_DISP8);
        assert_eq!(
            w.run(),
            [(0, "bm_workload"), (0, "bm_outer"), (0, "bm_middle")]
        );
        // `!` removes from the filter; `>>` keeps the rest
        w.echo("!bm_outer", FilterFile::Filter, WriteMode::Append)
            .unwrap();
        assert_eq!(
            w.filter_text(FilterFile::Filter),
            "bm_workload\nbm_middle\nbm_leaf\n"
        );
        assert_eq!(w.patched(), ["bm_workload", "bm_middle"]);
        w.echo("", FilterFile::Notrace, WriteMode::Truncate)
            .unwrap();
        w.echo("*_work", FilterFile::Filter, WriteMode::Truncate)
            .unwrap();
        assert_eq!(w.patched(), ["other_work"]);
        assert_eq!(w.run(), [(0, "other_work")]);
        assert!(
            !w.dispatcher.is_direct(),
            "a filtered ops is called through the list"
        );
        // an empty filter is every function, and the single ops is called directly
        w.echo("", FilterFile::Filter, WriteMode::Truncate).unwrap();
        assert_eq!(w.patched(), LIVE);
        assert!(w.dispatcher.is_direct());
        // disabling the ops restores every site and leaves the touched ones listed
        w.disable(w.a);
        assert!(w.patched().is_empty());
        assert!(w.dispatcher.is_empty());
        assert_eq!(w.enabled_functions(false), "");
        assert_eq!(w.enabled_functions(true), lines(&LIVE, 0));
        assert_eq!(w.bugs.len(), 1, "only the init report: {:?}", w.bugs);
    }

    #[test]
    fn the_dispatcher_refuses_what_the_hash_refuses_on_a_site_patched_for_another_ops() {
        let mut w = world();
        w.enable(w.a);
        w.enable(w.b);
        assert_eq!(w.enabled_functions(false), lines(&LIVE, 2));
        w.echo("bm_leaf", FilterFile::Notrace, WriteMode::Truncate)
            .unwrap();
        assert_eq!(
            w.patched(),
            ["bm_workload", "bm_outer", "bm_middle", "other_work"]
        );
        // bm_leaf is reached once more (as if patched for an ops with no hashes): neither
        // ops of the instance takes it
        CALLS.lock().unwrap().clear();
        w.dispatcher.call(addr("bm_leaf"), 0, None);
        assert!(
            !CALLS
                .lock()
                .unwrap()
                .iter()
                .any(|(t, _)| *t == w.tag || *t == w.tag + 1)
        );
        w.disable(w.a);
        assert_eq!(
            w.enabled_functions(false),
            lines(&["bm_workload", "bm_outer", "bm_middle", "other_work"], 1)
        );
        assert_eq!(
            w.run(),
            [
                (1, "bm_workload"),
                (1, "bm_outer"),
                (1, "bm_middle"),
                (1, "other_work")
            ]
        );
        w.disable(w.b);
        assert!(w.patched().is_empty());
        // enabling twice is refused
        w.enable(w.a);
        let again = w
            .sites()
            .enable(
                w.dispatcher,
                w.a,
                &mut SimText::new(BASE, 0x9000),
                &mut |_| {},
            )
            .map(|_| ());
        assert_eq!(again, Err(Errno::EBUSY));
    }

    #[test]
    fn function_commands_are_listed_and_leave_the_sites_alone() {
        let mut w = world();
        w.echo("bm_*", FilterFile::Filter, WriteMode::Truncate)
            .unwrap();
        w.enable(w.a);
        let bm = ["bm_workload", "bm_outer", "bm_middle", "bm_leaf"];
        // no snapshot buffer, no events: refused, nothing changes
        for bad in [
            "bm_leaf:snapshot",
            "bm_leaf:enable_event:sched:sched_switch",
        ] {
            assert_eq!(
                w.echo(bad, FilterFile::Filter, WriteMode::Append),
                Err(Errno::EINVAL),
                "{bad}"
            );
        }
        w.echo("bm_leaf:traceoff:3", FilterFile::Filter, WriteMode::Append)
            .unwrap();
        assert_eq!(
            w.filter_text(FilterFile::Filter),
            "bm_workload\nbm_outer\nbm_middle\nbm_leaf\nbm_leaf:traceoff:count=3\n"
        );
        assert_eq!(w.patched(), bm);
        assert_eq!(w.enabled_functions(false), lines(&bm, 1));
    }

    /// The tracing switch the probe test's commands act on.
    struct Switch(std::sync::atomic::AtomicBool);

    impl ProbeActions for Switch {
        fn tracing_is_on(&self) -> bool {
            self.0.load(Ordering::SeqCst)
        }
        fn set_tracing_on(&self, on: bool) {
            self.0.store(on, Ordering::SeqCst);
        }
    }

    static SWITCH: Switch = Switch(std::sync::atomic::AtomicBool::new(true));

    /// The test probe ops' callback: its private value is its `&'static ProbeCell`.
    fn probe_call(ip: u64, parent: u64, op: &FtraceOps, _regs: Option<&mut FtraceRegs>) {
        // SAFETY: the only ops with this callback carry a leaked `ProbeCell` as private.
        let cell = unsafe { &*(op.private() as *const ProbeCell) };
        cell.run(ip, parent, &SWITCH);
    }

    #[test]
    fn function_commands_run_from_the_probe_ops() {
        let mut w = world();
        let cell: &'static ProbeCell = Box::leak(Box::new(ProbeCell::new()));
        let op: &'static FtraceOps = Box::leak(Box::new(FtraceOps::with_private(
            probe_call,
            OpsFlags::empty(),
            cell as *const ProbeCell as *const (),
            None,
        )));
        // commands the probe ops cannot run are refused, nothing changes
        for bad in ["bm_leaf:stacktrace", "bm_leaf:dump", "bm_leaf:cpudump:2"] {
            assert_eq!(
                w.echo(bad, FilterFile::Filter, WriteMode::Append),
                Err(Errno::EINVAL),
                "{bad}"
            );
        }
        assert!(w.sites().filters().probes().is_empty());
        w.echo("bm_leaf:traceoff:1", FilterFile::Filter, WriteMode::Append)
            .unwrap();
        w.probes(op, cell);
        // no tracer: only the probe's site calls the trampoline
        assert_eq!(w.patched(), ["bm_leaf"]);
        assert!(w.sites().is_enabled(op));
        SWITCH.0.store(true, Ordering::SeqCst);
        w.dispatcher.call(addr("bm_middle"), 0, None);
        assert!(SWITCH.0.load(Ordering::SeqCst));
        w.dispatcher.call(addr("bm_leaf"), addr("bm_middle"), None);
        assert!(!SWITCH.0.load(Ordering::SeqCst));
        assert_eq!(
            w.filter_text(FilterFile::Filter),
            "#### all functions enabled ####\nbm_leaf:traceoff:count=0\n"
        );
        // spent: turning tracing back on sticks
        SWITCH.0.store(true, Ordering::SeqCst);
        w.dispatcher.call(addr("bm_leaf"), 0, None);
        assert!(SWITCH.0.load(Ordering::SeqCst));

        // a tracer beside the probes; a second command moves the probe ops' hash
        w.echo("bm_*", FilterFile::Filter, WriteMode::Append)
            .unwrap();
        w.enable(w.a);
        w.echo("bm_middle:traceon", FilterFile::Filter, WriteMode::Append)
            .unwrap();
        w.probes(op, cell);
        let bm = ["bm_workload", "bm_outer", "bm_middle", "bm_leaf"];
        assert_eq!(w.patched(), bm);
        SWITCH.0.store(false, Ordering::SeqCst);
        assert_eq!(
            w.run(),
            bm.iter().map(|n| (0, *n)).collect::<Vec<_>>(),
            "the tracer sees every call"
        );
        assert!(SWITCH.0.load(Ordering::SeqCst), "bm_middle:traceon ran");
        assert!(
            w.filter_text(FilterFile::Filter)
                .ends_with("bm_middle:traceon:unlimited\nbm_leaf:traceoff:count=0\n")
        );

        // the last command removed: the probe ops goes, its sites with it
        w.echo("!bm_leaf:traceoff:0", FilterFile::Filter, WriteMode::Append)
            .unwrap();
        w.echo("!bm_middle:traceon", FilterFile::Filter, WriteMode::Append)
            .unwrap();
        w.probes(op, cell);
        assert!(!w.sites().is_enabled(op));
        w.disable(w.a);
        assert!(w.patched().is_empty());
        // only the `corrupt` site's report from initialisation
        assert_eq!(w.bugs.len(), 1, "{:?}", w.bugs);
    }

    #[test]
    fn the_graph_files_are_published_to_the_graph_filter() {
        let mut w = world();
        w.graph
            .with(|g| assert!(g.functions.is_empty() && g.notrace.is_empty()));
        w.echo("bm_middle", FilterFile::GraphFunction, WriteMode::Truncate)
            .unwrap();
        w.echo("bm_l*", FilterFile::GraphNotrace, WriteMode::Truncate)
            .unwrap();
        w.graph.with(|g| {
            assert_eq!(g.functions, [addr("bm_middle")]);
            assert_eq!(g.notrace, [addr("bm_leaf")]);
        });
        assert_eq!(w.filter_text(FilterFile::GraphFunction), "bm_middle\n");
        // the graph files do not decide which sites are patched (the kernel's
        // set_graph_function is checked in the graph entry callback)
        w.enable(w.b);
        assert_eq!(w.patched(), LIVE);
        w.echo("", FilterFile::GraphFunction, WriteMode::Truncate)
            .unwrap();
        w.echo("", FilterFile::GraphNotrace, WriteMode::Truncate)
            .unwrap();
        w.graph
            .with(|g| assert!(g.functions.is_empty() && g.notrace.is_empty()));
        assert!(!w.graph.0.is_set());
    }

    #[test]
    fn graph_filter_readers_see_whole_publications_while_it_changes() {
        use std::sync::atomic::{AtomicBool, AtomicU64};
        // Readers on other threads (CPUs) take the filter while one writer replaces it and
        // frees the old lists: every read is one publication (its two lists agree) or none.
        // (Without the grace period, freed blocks get reused under the readers: this fails.)
        let cell: &'static GraphFilterCell = Box::leak(Box::new(GraphFilterCell::new()));
        let stop: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
        let reads: &'static AtomicU64 = Box::leak(Box::new(AtomicU64::new(0)));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        cell.with(|g| {
                            if let Some(&v) = g.notrace.first() {
                                // hold the lists a while: a freed and reused block shows
                                for _ in 0..64 {
                                    std::hint::spin_loop();
                                }
                                assert_eq!(g.notrace, [v]);
                                assert_eq!(g.functions.len(), (v % 7) as usize + 1);
                                assert!(g.functions.iter().all(|f| *f == v));
                            } else {
                                assert!(g.functions.is_empty());
                            }
                        });
                        reads.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        // publish until the readers have read a good many times during the changes
        let mut v = 0u64;
        while v < 2_000 || (reads.load(Ordering::Relaxed) < 400_000 && v < 1_000_000) {
            v += 1;
            if v % 100 == 0 {
                cell.publish(Vec::new(), Vec::new());
            } else {
                cell.publish(std::vec![v; (v % 7) as usize + 1], std::vec![v]);
            }
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            r.join().expect("a reader saw a torn or freed filter");
        }
        if v % 100 != 0 {
            cell.with(|g| assert_eq!(g.notrace, [v]));
        }
    }

    #[test]
    fn a_site_changed_behind_the_tables_back_is_reported_not_overwritten() {
        let mut w = world();
        w.echo("bm_leaf bm_middle", FilterFile::Filter, WriteMode::Truncate)
            .unwrap();
        w.text.poke(addr("bm_leaf"), &[0x90; 5]);
        let st = w.enable(w.a);
        assert_eq!(st.failed, 1);
        assert_eq!(w.bugs.len(), 2, "{:?}", w.bugs);
        assert!(
            w.bugs[1].contains("ftrace failed to modify"),
            "{}",
            w.bugs[1]
        );
        assert_eq!(w.text.bytes(addr("bm_leaf"), 5), [0x90; 5]);
        assert_eq!(w.patched(), ["bm_middle"]);
    }
}
