//! The call-site files from ftrace-patch's record table: [`PatchRecords`], a
//! [`FunctionRecords`] for `available_filter_functions`, `available_filter_functions_addrs`,
//! `enabled_functions`, `touched_functions` and `dyn_ftrace_total_info`.
//!
//! The server keeps its [`RecordTable`] (and the ops enabled on it) behind its own lock and lends
//! them through [`RecordSource`]; the text is the kernel's (Linux 6.12 `t_show`,
//! `ftrace_debug`): one line per record in address order, `%ps` of the site, the flag columns,
//! trampolines and ops, and `"%ld pages:%ld groups: %ld"`.
//!
//! Invariant: every file is produced from one consistent view of the table (one
//! [`RecordSource::with_records`] call per read).

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;

use ftrace_core::symbols::SymbolTable;
use ftrace_patch::{DynFtrace, PageStats, RecordOps, RecordTable};

use crate::backend::FunctionRecords;

/// What a read of a call-site file sees: the records, the enabled ops, the page accounting.
#[derive(Clone, Copy)]
pub struct CallSites<'a> {
    /// The records.
    pub table: &'a RecordTable<Vec<DynFtrace>>,
    /// The enabled ops (for the `tramp:` / `ops:` / `direct-->` parts).
    pub ops: &'a [&'a dyn RecordOps],
    /// `dyn_ftrace_total_info`'s counters.
    pub pages: &'a PageStats,
}

impl fmt::Debug for CallSites<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallSites")
            .field("records", &self.table.len())
            .field("ops", &self.ops.len())
            .field("pages", self.pages)
            .finish()
    }
}

/// How [`PatchRecords`] reaches the server's records: under its lock.
pub trait RecordSource {
    /// Runs `f` on the current records.
    fn with_records(&self, f: &mut dyn FnMut(CallSites<'_>));
}

/// A record table no ops is enabled on (a server that lists call sites but has not patched
/// them, or a test).
#[derive(Debug)]
pub struct StaticRecords {
    /// The records.
    pub table: RecordTable<Vec<DynFtrace>>,
    /// The page accounting.
    pub pages: PageStats,
}

impl RecordSource for StaticRecords {
    fn with_records(&self, f: &mut dyn FnMut(CallSites<'_>)) {
        f(CallSites {
            table: &self.table,
            ops: &[],
            pages: &self.pages,
        })
    }
}

/// The call-site files, from a [`RecordSource`] and the kernel symbols (for `%ps` / `%pS`).
pub struct PatchRecords<R> {
    source: R,
    symbols: Arc<dyn SymbolTable + Send + Sync>,
}

impl<R: fmt::Debug> fmt::Debug for PatchRecords<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PatchRecords")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl<R: RecordSource> PatchRecords<R> {
    /// The files of `source`'s records, names resolved with `symbols`.
    pub fn new(source: R, symbols: Arc<dyn SymbolTable + Send + Sync>) -> Self {
        PatchRecords { source, symbols }
    }

    /// The source.
    pub fn source(&self) -> &R {
        &self.source
    }

    fn with(
        &self,
        f: &mut dyn FnMut(CallSites<'_>, &dyn SymbolTable) -> fmt::Result,
    ) -> fmt::Result {
        let mut r = Ok(());
        self.source
            .with_records(&mut |cs| r = f(cs, &*self.symbols));
        r
    }
}

impl<R: RecordSource> FunctionRecords for PatchRecords<R> {
    fn write_available(&self, w: &mut dyn fmt::Write, addrs: bool) -> fmt::Result {
        self.with(&mut |cs, syms| cs.table.write_available(w, syms, addrs))
    }

    fn write_enabled(&self, w: &mut dyn fmt::Write, touched: bool) -> fmt::Result {
        self.with(&mut |cs, syms| cs.table.write_enabled(w, syms, cs.ops, touched))
    }

    fn write_total_info(&self, w: &mut dyn fmt::Write) -> fmt::Result {
        self.with(&mut |cs, _| cs.pages.write_total_info(w))
    }
}
