//! The instance's call sites: ftrace-patch's [`RecordTable`] over the platform's
//! [`CallSiteText`], kept as the kernel keeps it under `ftrace_lock`.
//!
//! Every change of what the instance's ops admit (a tracer's ops registered or unregistered,
//! a filter file written, the function commands' probe ops added, retargeted or removed) goes
//! through [`TraceArray::update_sites`]: the enabled ops are counted out of the records under
//! their old hashes (`ftrace_hash_rec_disable`), the change is made, they are counted back in
//! under the new ones (`ftrace_hash_rec_enable`), and one `ftrace_replace_code` pass rewrites
//! every site whose state changed, in one batch through ftrace-patch's protocols. Which sites
//! are patched is never decided here: it follows from the hashes.
//!
//! Invariant: the ops' hashes are only replaced inside `update_sites`, under the instance's
//! lock, so the record views ([`FtraceOpsView`]) built there read stable hashes; after it
//! returns, a record not `DISABLED` calls the trampoline exactly when some registered ops of
//! the instance admits its address.

use alloc::boxed::Box;
use alloc::vec::Vec;

use ftrace_core::Errno;
use ftrace_core::ops::FtraceOps;
use ftrace_core::symbols::{SortedSymbols, SymbolTable};
use ftrace_patch::{
    DynFtrace, FixedTargets, FtraceBug, FtraceOpsView, PageStats, PokeSite, Protocol, RecordOps,
    RecordTable, UpdatePass, UpdateStats, init_records,
};

use super::{CallSiteText, Control, Platform, TraceArray};
use crate::records::{CallSites, RecordSource};

/// The call-site records of an instance and the text they describe.
pub(super) struct Sites<T> {
    table: RecordTable<Vec<DynFtrace>>,
    pages: PageStats,
    text: T,
    targets: FixedTargets,
    protocol: Protocol,
}

/// Views of `ops` for the record table.
///
/// # Safety
/// The ops' hashes are not replaced while the views live (they are only replaced inside
/// [`TraceArray::update_sites`], between the counting out and the counting in).
unsafe fn views<'a>(ops: &[&'a FtraceOps]) -> Vec<FtraceOpsView<'a>> {
    // SAFETY: the caller's contract is the view's.
    ops.iter()
        .map(|o| unsafe { FtraceOpsView::new(o) })
        .collect()
}

fn as_record_ops<'v>(views: &'v [FtraceOpsView<'_>]) -> Vec<&'v dyn RecordOps> {
    views.iter().map(|v| v as &dyn RecordOps).collect()
}

/// What the instance asks of its [`Sites`], whatever the platform's text (so that the
/// control state is not generic over it).
pub(super) trait SiteRecords: Send {
    /// `ftrace_hash_rec_disable` for every enabled ops, the last enabled first.
    fn count_out(&mut self, enabled: &[&FtraceOps]);
    fn count_in(&mut self, enabled: &[&FtraceOps]) -> Result<(), Errno>;
    /// `ftrace_replace_code`: one pass over the records, every site whose state changed
    /// rewritten in one batch.
    fn replace_code(
        &mut self,
        enabled: &[&FtraceOps],
        on_bug: &mut dyn FnMut(&FtraceBug),
    ) -> UpdateStats;
    /// The records and their page accounting.
    fn records(&self) -> (&RecordTable<Vec<DynFtrace>>, &PageStats);
}

impl<T: CallSiteText> Sites<T> {
    /// `ftrace_process_locs`: one record per call site of `text` (a site holding unexpected
    /// bytes is reported through `on_bug` and its record `DISABLED`), and the symbols the
    /// filter files resolve against: the sites, named after the functions of `syms` holding
    /// them. `None` if the platform has no call sites.
    pub(super) fn new(
        mut text: T,
        syms: &dyn SymbolTable,
        on_bug: &mut dyn FnMut(&FtraceBug),
    ) -> Result<Option<(Self, SortedSymbols)>, Errno> {
        let Some(entries) = text.call_sites() else {
            return Ok(None);
        };
        let mut entries = entries.to_vec();
        let (kind, protocol, targets) = (text.init_kind(), text.protocol(), text.targets());
        let mut recs = alloc::vec![DynFtrace::default(); entries.len()];
        let mut scratch: Vec<PokeSite> = (0..16).map(|_| PokeSite::empty()).collect();
        let (n, _) = init_records(
            &mut text,
            kind,
            &mut entries,
            &mut recs,
            protocol,
            &mut scratch,
            on_bug,
        );
        recs.truncate(n);
        let table = RecordTable::new(recs)?;
        let mut pages = PageStats::kernel();
        pages.add_text(n, 0);
        let symbols = table.site_symbols(syms);
        let sites = Sites {
            table,
            pages,
            text,
            targets,
            protocol,
        };
        Ok(Some((sites, symbols)))
    }
}

impl<T: CallSiteText> SiteRecords for Sites<T> {
    fn count_out(&mut self, enabled: &[&FtraceOps]) {
        // SAFETY: inside `update_sites`, before the change (see `views`).
        let v = unsafe { views(enabled) };
        for i in (0..v.len()).rev() {
            self.table.ops_disable(&v[i], &as_record_ops(&v[..i]));
        }
    }

    fn count_in(&mut self, enabled: &[&FtraceOps]) -> Result<(), Errno> {
        // SAFETY: inside `update_sites`, after the change (see `views`).
        let v = unsafe { views(enabled) };
        let mut r = Ok(());
        for i in 0..v.len() {
            let e = self.table.ops_enable(&v[i], &as_record_ops(&v[..=i]));
            r = r.and(e.map(drop));
        }
        r
    }

    fn replace_code(
        &mut self,
        enabled: &[&FtraceOps],
        on_bug: &mut dyn FnMut(&FtraceBug),
    ) -> UpdateStats {
        // SAFETY: inside `update_sites`, after the change (see `views`).
        let v = unsafe { views(enabled) };
        let ops = as_record_ops(&v);
        let pass = UpdatePass {
            targets: &self.targets,
            ops: &ops,
            enable: true,
            protocol: self.protocol,
        };
        self.table.replace_code_all(&mut self.text, &pass, on_bug)
    }

    fn records(&self) -> (&RecordTable<Vec<DynFtrace>>, &PageStats) {
        (&self.table, &self.pages)
    }
}

/// The ops the instance has registered, in registering order (the tracer's, the probes',
/// the instances' forwarding ops, the profiler's).
fn enabled<'a>(
    tracer: &'a Option<Box<FtraceOps>>,
    probes: &'a Option<Box<FtraceOps>>,
    instances: &'a [Box<FtraceOps>],
    profile: &'a Option<Box<FtraceOps>>,
) -> Vec<&'a FtraceOps> {
    tracer
        .iter()
        .chain(probes)
        .chain(instances)
        .chain(profile)
        .map(|b| &**b)
        .collect()
}

impl<P: Platform, const CPUS: usize> TraceArray<P, CPUS> {
    /// Makes `change` (registering or unregistering the instance's ops, replacing their
    /// hashes) and brings the call sites to match, as the module docs say. A site that could
    /// not be rewritten (reported through [`Platform::ftrace_bug`] and disabled) makes it
    /// `EIO`; an error of `change` is returned after the sites match what it left.
    pub(super) fn update_sites<R>(
        &'static self,
        c: &mut Control,
        change: impl FnOnce(&mut Control) -> Result<R, Errno>,
    ) -> Result<R, Errno> {
        if let Some(s) = c.sites.as_mut() {
            s.count_out(&enabled(&c.ops, &c.probe_ops, &c.instances, &c.profile_ops));
        }
        let r = change(c);
        if let Some(s) = c.sites.as_mut() {
            let ops = enabled(&c.ops, &c.probe_ops, &c.instances, &c.profile_ops);
            let counted = s.count_in(&ops);
            let st = s.replace_code(&ops, &mut |b| self.platform().ftrace_bug(b));
            counted?;
            if st.failed > 0 {
                return Err(Errno::EIO);
            }
        }
        r
    }
}

/// The instance's records as the call-site files read them (ftrace-tracefs's
/// `PatchRecords`).
pub(super) struct ArraySites<P: Platform, const CPUS: usize>(
    pub(super) &'static TraceArray<P, CPUS>,
);

impl<P: Platform, const CPUS: usize> RecordSource for ArraySites<P, CPUS> {
    fn with_records(&self, f: &mut dyn FnMut(CallSites<'_>)) {
        let c = self.0.control();
        let Some(s) = c.sites.as_deref() else { return };
        let (table, pages) = s.records();
        let ops = enabled(&c.ops, &c.probe_ops, &c.instances, &c.profile_ops);
        // SAFETY: the control lock is held: no hash is replaced while the views live.
        let v = unsafe { views(&ops) };
        f(CallSites {
            table,
            ops: &as_record_ops(&v),
            pages,
        })
    }
}
