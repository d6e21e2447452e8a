//! The function-filter files bound to ftrace-core's filter language: [`FilterState`] (what the
//! four files of one instance hold, plus its function commands) and [`FilterWriter`] (one open
//! for writing, the tree's [`FilterEdit`] over a [`FilterDraft`]).
//!
//! A backend keeps a [`FilterState`] behind its own lock and lets the writer reach it through
//! [`FilterStore`]; it answers `open_filter` with [`FilterWriter::open`] and `write_filter` with
//! [`FilterState::write_filter`]. Patterns resolve against the [`CommandEnv`]'s symbol table:
//! for a backend with call-site records, the record table's
//! [`site_symbols`](ftrace_patch::RecordTable::site_symbols), so the hashes hold the addresses
//! the dispatcher is called with.
//!
//! Invariant: like the kernel's `ftrace_regex_write`, a rejected token changes nothing, and the
//! new set becomes visible (and [`FilterStore::publish`] is asked to apply it) only at release.

use alloc::boxed::Box;
use alloc::sync::Arc;
use core::fmt;

use crate::WriteMode;
use crate::filter_edit::{CommandEnv, FilterDraft, FilterSet, ProbeTable};
use ftrace_core::Errno;
use ftrace_core::symbols::SymbolTable;

use crate::backend::{FilterEdit, FilterFile};

fn slot(which: FilterFile) -> usize {
    match which {
        FilterFile::Filter => 0,
        FilterFile::Notrace => 1,
        FilterFile::GraphFunction => 2,
        FilterFile::GraphNotrace => 3,
    }
}

/// A [`CommandEnv`] with a shared symbol table, no events, snapshot supported.
#[derive(Clone)]
pub struct SymbolsEnv(pub Arc<dyn SymbolTable + Send + Sync>);

impl CommandEnv for SymbolsEnv {
    fn symbols(&self) -> &dyn SymbolTable {
        &*self.0
    }
}

impl fmt::Debug for SymbolsEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SymbolsEnv")
    }
}

/// What the four filter files of one instance hold, and its function commands.
pub struct FilterState {
    env: Arc<dyn CommandEnv + Send + Sync>,
    sets: [FilterSet; 4],
    probes: ProbeTable,
}

impl fmt::Debug for FilterState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FilterState")
            .field("sets", &self.sets)
            .finish_non_exhaustive()
    }
}

impl FilterState {
    /// Empty files whose patterns resolve in `env`.
    pub fn new(env: Arc<dyn CommandEnv + Send + Sync>) -> FilterState {
        FilterState {
            env,
            sets: Default::default(),
            probes: ProbeTable::new(),
        }
    }

    /// Empty files whose patterns resolve against `symbols` (no events).
    pub fn with_symbols(symbols: Arc<dyn SymbolTable + Send + Sync>) -> FilterState {
        FilterState::new(Arc::new(SymbolsEnv(symbols)))
    }

    /// What `which` holds.
    pub fn set(&self, which: FilterFile) -> &FilterSet {
        &self.sets[slot(which)]
    }

    /// The function commands (`vfs_read:traceoff` ...).
    pub fn probes(&self) -> &ProbeTable {
        &self.probes
    }

    /// The read-back text of `which` (functions, cached `:mod:` requests, and for
    /// `set_ftrace_filter` the function commands).
    pub fn write_filter(&self, which: FilterFile, w: &mut dyn fmt::Write) -> fmt::Result {
        let probes = (which == FilterFile::Filter).then_some(&self.probes);
        w.write_str(&self.set(which).show(which, self.env.symbols(), probes))
    }
}

/// How a [`FilterWriter`] reaches the [`FilterState`] it edits: the backend's lock.
pub trait FilterStore: Send {
    /// Runs `f` on the state, under the backend's lock.
    fn with_state(&self, f: &mut dyn FnMut(&mut FilterState));

    /// Called by the writer's release after `which` got its new content, outside
    /// [`FilterStore::with_state`]: the backend republishes the hashes to the dispatcher and
    /// updates the call sites (an `EBUSY` from the record table is the write's error). The
    /// default does nothing.
    fn publish(&self, which: FilterFile) -> Result<(), Errno> {
        let _ = which;
        Ok(())
    }
}

/// One open of a filter file for writing, on the real filter language.
pub struct FilterWriter<S: FilterStore> {
    store: S,
    which: FilterFile,
    edit: FilterDraft,
}

impl<S: FilterStore> fmt::Debug for FilterWriter<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FilterWriter")
            .field("which", &self.which)
            .finish_non_exhaustive()
    }
}

impl<S: FilterStore + 'static> FilterWriter<S> {
    /// Opens `which` (`mode`: the shell's `>` or `>>`).
    pub fn open(store: S, which: FilterFile, mode: WriteMode) -> Box<dyn FilterEdit> {
        let mut edit = None;
        store.with_state(&mut |st| {
            edit = Some(FilterDraft::open(which, st.set(which), mode));
        });
        Box::new(FilterWriter {
            store,
            which,
            edit: edit.expect("with_state runs its closure"),
        })
    }
}

impl<S: FilterStore> FilterEdit for FilterWriter<S> {
    fn write(&mut self, data: &[u8]) -> Result<usize, Errno> {
        // A token is ASCII in practice; anything else must at least be whole UTF-8.
        let text = match core::str::from_utf8(data) {
            Ok(t) => t,
            Err(e) if e.valid_up_to() > 0 => {
                // the valid prefix; the rest is written again by the caller
                core::str::from_utf8(&data[..e.valid_up_to()]).map_err(|_| Errno::EINVAL)?
            }
            Err(_) => return Err(Errno::EINVAL),
        };
        let mut r = Ok(0);
        let edit = &mut self.edit;
        self.store.with_state(&mut |st| {
            let env = st.env.clone();
            r = edit.write(text, &*env, &mut st.probes);
        });
        r
    }

    fn release(self: Box<Self>) -> Result<(), Errno> {
        let FilterWriter { store, which, edit } = *self;
        let mut edit = Some(edit);
        let mut r = Ok(());
        store.with_state(&mut |st| {
            let Some(e) = edit.take() else { return };
            let env = st.env.clone();
            let (set, res) = e.close(&*env, &mut st.probes);
            st.sets[slot(which)] = set;
            r = res;
        });
        r.and(store.publish(which))
    }
}
