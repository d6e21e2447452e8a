//! The filter files and function commands as the instance applies them: the hashes published
//! to the tracer's ops and the graph filter, the probe ops that runs `traceon`/`traceoff`.

use alloc::boxed::Box;

use core::sync::atomic::Ordering;

use crate::filter_edit::CommandEnv;
use ftrace_core::Errno;
use ftrace_core::filter::{FtraceHash, ProbeActions, ProbeCommand};
use ftrace_core::ops::{FtraceOps, FtraceRegs, OpsFlags};
use ftrace_core::reclaim::Published;
use ftrace_tracers::function_graph::GraphFilter;

use super::{Control, Platform, TraceArray};
use crate::backend::FilterFile;

/// The graph filter (`set_graph_function`, `set_graph_notrace`) as the entry hook reads it.
pub(super) struct GraphHashes {
    functions: FtraceHash,
    notrace: FtraceHash,
}

impl GraphFilter for GraphHashes {
    fn all_functions(&self) -> bool {
        self.functions.is_empty()
    }
    fn is_graph_function(&self, ip: u64) -> bool {
        self.functions.contains(ip)
    }
    fn is_notrace(&self, ip: u64) -> bool {
        self.notrace.contains(ip)
    }
}

/// The platform's `&'static` symbol table as the filter files hold it.
pub(super) struct StaticSymbols(pub(super) &'static (dyn ftrace_core::symbols::SymbolTable + Sync));

impl ftrace_core::symbols::SymbolTable for StaticSymbols {
    fn lookup(&self, addr: u64) -> Option<ftrace_core::symbols::Symbol<'_>> {
        self.0.lookup(addr)
    }
    fn for_each(&self, f: &mut dyn FnMut(ftrace_core::symbols::Symbol<'_>)) {
        self.0.for_each(f)
    }
}

/// The filter files' command environment: the functions they resolve against (the call
/// sites, named after their functions, or the platform's symbols where it has no call-site
/// records), no trace events, no snapshot, and only the commands the probe ops runs
/// (`traceon`, `traceoff`); the others are refused with `EINVAL` at write time rather than
/// accepted and ignored.
pub(super) struct Commands(pub(super) Box<dyn ftrace_core::symbols::SymbolTable + Send + Sync>);

impl CommandEnv for Commands {
    fn symbols(&self) -> &dyn ftrace_core::symbols::SymbolTable {
        &*self.0
    }
    fn has_snapshot(&self) -> bool {
        false
    }
    fn supports(&self, cmd: ProbeCommand) -> bool {
        matches!(cmd, ProbeCommand::Traceon | ProbeCommand::Traceoff)
    }
}

/// What the function commands do to the instance.
struct Actions<'a, P: Platform, const CPUS: usize>(&'a TraceArray<P, CPUS>);

impl<P: Platform, const CPUS: usize> ProbeActions for Actions<'_, P, CPUS> {
    fn tracing_is_on(&self) -> bool {
        self.0.tracing_on.load(Ordering::Relaxed)
    }
    fn set_tracing_on(&self, on: bool) {
        self.0.set_tracing_on(on);
    }
}

fn probe_op<P: Platform, const CPUS: usize>(
    ip: u64,
    parent_ip: u64,
    op: &FtraceOps,
    _regs: Option<&mut FtraceRegs>,
) {
    // SAFETY: as in `function_op`.
    let array = unsafe { &*op.private().cast::<TraceArray<P, CPUS>>() };
    // SAFETY: inside the dispatcher's read-side section (see `on_entry`).
    if let Some(runner) = unsafe { array.probes.load() } {
        runner.run(ip, parent_ip, &Actions(array));
    }
}

impl<P: Platform, const CPUS: usize> TraceArray<P, CPUS> {
    /// `tracing_on`: the switch the tracers check and the buffers' record switch.
    pub(super) fn set_tracing_on(&self, on: bool) {
        self.tracing_on.store(on, Ordering::Relaxed);
        self.with_buffer(|rb| rb.set_record_on(on));
    }

    /// The function commands changed: the runner is published and the probe ops registered
    /// (filtered to the commands' functions) while there is any, unregistered when the last
    /// one goes (an empty filter would admit every function). A change for
    /// [`TraceArray::update_sites`].
    pub(super) fn publish_probes(&'static self, c: &mut Control) -> Result<(), Errno> {
        let runner = c.filters.probes().runner();
        if let Some(op) = c.probe_ops.take() {
            self.dispatcher.unregister(&op)?;
        }
        if runner.is_empty() {
            self.probes.replace(Published::None, self.reclaim());
            return Ok(());
        }
        let op = Box::new(FtraceOps::with_private(
            probe_op::<P, CPUS>,
            OpsFlags::empty(),
            core::ptr::from_ref(self).cast(),
            None,
        ));
        let hash = runner.hash().clone();
        self.probes
            .replace(Published::Owned(Box::new(runner)), self.reclaim());
        self.dispatcher
            .set_filter(&op, Published::Owned(Box::new(hash)));
        // SAFETY: the ops lives in `c.probe_ops` until `unregister` has returned.
        unsafe { self.dispatcher.register_dynamic(&op)? };
        c.probe_ops = Some(op);
        Ok(())
    }

    /// Publishes the filter files' hashes to `op` and the graph filter cell.
    pub(super) fn publish_filters(&self, c: &Control, op: &FtraceOps) {
        let set = |f| c.filters.set(f).to_hash();
        self.dispatcher
            .set_filter(op, Published::Owned(Box::new(set(FilterFile::Filter))));
        self.dispatcher
            .set_notrace(op, Published::Owned(Box::new(set(FilterFile::Notrace))));
        let graph = GraphHashes {
            functions: set(FilterFile::GraphFunction),
            notrace: set(FilterFile::GraphNotrace),
        };
        let graph = if graph.functions.is_empty() && graph.notrace.is_empty() {
            Published::None
        } else {
            Published::Owned(Box::new(graph))
        };
        self.graph_filter.replace(graph, self.reclaim());
    }
}
