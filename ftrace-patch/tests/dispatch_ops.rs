//! The dispatcher's `FtraceOps` driving the record table: ops registered with filters of
//! patterns resolved against the sites' symbols, `ops_enable` / `replace_code` over a simulated
//! text, then a simulated CPU calling the dispatcher from every live site. (The filter-file
//! language itself is ftrace-tracefs's, tested there.)

mod common;

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{BASE, STRIDE, TARGETS, segment};
use ftrace_core::event::TraceCtx;
use ftrace_core::filter::{FtraceHash, Glob, tokens};
use ftrace_core::platform::{ExecContext, RecursionState, TaskContext};
use ftrace_core::reclaim::{Published, ReaderCount};
use ftrace_core::recursion::TraceRecursion;
use ftrace_core::symbols::{SortedSymbols, SymbolTable};
use ftrace_core::{Dispatcher, FtraceOps, FtraceRegs, OpsFlags};
use ftrace_patch::sim::SimText;
use ftrace_patch::{
    FtraceOpsView, OpsRecFlags, Protocol, RecordOps, RecordTable, SiteForm, UpdatePass,
};

#[derive(Clone, Copy, Debug, Default)]
struct Platform;

static RECURSION: TraceRecursion = TraceRecursion::new();

impl TaskContext for Platform {
    fn current_pid(&self) -> i32 {
        1
    }
    fn trace_ctx(&self) -> TraceCtx {
        TraceCtx(0)
    }
    fn exec_context(&self) -> ExecContext {
        ExecContext::Normal
    }
}

impl RecursionState for Platform {
    fn trace_recursion(&self) -> &TraceRecursion {
        &RECURSION
    }
}

const NAMES: [&str; 6] = ["f_one", "f_two", "g_three", "f_four", "h_five", "ff_six"];

/// What each ops' callback saw: (ops index, ip).
static SEEN: Mutex<Vec<(usize, u64)>> = Mutex::new(Vec::new());
static CALLS: AtomicUsize = AtomicUsize::new(0);

fn record(ip: u64, _parent: u64, op: &FtraceOps, _regs: Option<&mut FtraceRegs>) {
    CALLS.fetch_add(1, Ordering::Relaxed);
    SEEN.lock().unwrap().push((op.private() as usize, ip));
}

fn symbols() -> SortedSymbols {
    let mut s = SortedSymbols::new();
    for (i, n) in NAMES.iter().enumerate() {
        s.push(n, BASE + i as u64 * STRIDE, STRIDE, None);
    }
    s.finish();
    s
}

/// The hash of the functions `text`'s patterns (globs or 1-based indexes into the sites'
/// listing) select, as `echo '<text>' > set_ftrace_filter` would fill it.
fn filter(text: &str, sites: &SortedSymbols) -> FtraceHash {
    let mut ips = Vec::new();
    for token in tokens(text) {
        let glob = Glob::parse(token);
        let mut index = 0;
        sites.for_each(&mut |s| {
            if glob.matches(s.name) || glob.index() == Some(index) {
                ips.push(s.addr);
            }
            index += 1;
        });
        assert!(!ips.is_empty(), "{token} selects a function");
    }
    FtraceHash::from_ips(ips)
}

/// A simulated CPU: runs every function of the text once; a function whose site holds a call
/// enters the dispatcher with the site's address (what the trampoline passes), with registers
/// when the site calls the regs trampoline (an ops wanting them is skipped otherwise).
fn run_all(text: &SimText, table: &RecordTable<Vec<ftrace_patch::DynFtrace>>, d: &Disp) {
    for r in table.records() {
        let bytes = text.bytes(r.ip, 5);
        if bytes == r.form().nop().as_slice() {
            continue;
        }
        let target = r.form().call_target(r.ip, bytes).expect("a call");
        // the regs trampoline saves registers; the plain one does not
        let mut regs = FtraceRegs {
            ip: r.ip,
            ..FtraceRegs::default()
        };
        let regs = match target {
            t if t == TARGETS.regs_caller => Some(&mut regs),
            t if t == TARGETS.caller => None,
            t => panic!("unexpected call target {t:#x}"),
        };
        d.call(r.ip, r.ip - 0x10 + 0x1000, regs);
    }
}

type Disp = Dispatcher<ReaderCount, Platform>;

fn calls_at(table: &RecordTable<Vec<ftrace_patch::DynFtrace>>, text: &SimText) -> Vec<u64> {
    table
        .records()
        .iter()
        .filter(|r| text.bytes(r.ip, 5) != r.form().nop().as_slice())
        .map(|r| r.ip)
        .collect()
}

fn site(name: &str) -> u64 {
    let i = NAMES.iter().position(|n| *n == name).unwrap() as u64;
    BASE + i * STRIDE + 0x10
}

#[test]
fn filtered_ops_patch_exactly_their_sites() {
    let syms = symbols();
    let (mut text, recs) = segment(SiteForm::X86Nop5, NAMES.len());
    let mut table = RecordTable::new(recs).unwrap();
    let sites = table.site_symbols(&syms);
    let d: &'static Disp = Box::leak(Box::new(Dispatcher::new(ReaderCount::new(), Platform)));

    // ops 0: the function tracer's shape: `f*` minus `f_two`
    let a: &'static FtraceOps = Box::leak(Box::new(FtraceOps::with_private(
        record,
        OpsFlags::empty(),
        core::ptr::null(),
        None,
    )));
    let fa = filter("f*\n", &sites);
    let na = filter("f_two\n", &sites);
    d.set_filter(a, Published::Owned(Box::new(fa)));
    d.set_notrace(a, Published::Owned(Box::new(na)));
    d.register(a).unwrap();
    // SAFETY: this test is the only writer of the ops' hashes, and it does not change them
    // while the view is in use.
    let va = unsafe { FtraceOpsView::new(a) };
    assert_eq!(va.flags(), OpsRecFlags::CALL_OPS_OK);
    let ops: Vec<&dyn RecordOps> = vec![&va];
    assert!(table.ops_enable(&va, &ops).unwrap());
    let st = table.replace_code_all(&mut text, &pass(&ops, true), &mut |b| {
        panic!("bug at {:#x}", b.ip)
    });
    assert_eq!(st.failed, 0);
    let want: Vec<u64> = ["f_one", "f_four", "ff_six"].map(site).to_vec();
    assert_eq!(calls_at(&table, &text), want);
    let mut en = String::new();
    table.write_enabled(&mut en, &syms, &ops, false).unwrap();
    assert_eq!(
        en,
        "f_one (1)           \nf_four (1)           \nff_six (1)           \n"
    );

    // the CPU runs everything: the dispatcher sees exactly the filtered sites
    SEEN.lock().unwrap().clear();
    run_all(&text, &table, d);
    let seen: Vec<u64> = SEEN.lock().unwrap().iter().map(|s| s.1).collect();
    assert_eq!(seen, want);

    // ops 1 wants registers, on `g_three` and `f_one`: the shared site counts 2 and goes to the
    // regs trampoline; its own site too.
    let b: &'static FtraceOps = Box::leak(Box::new(FtraceOps::with_private(
        record,
        OpsFlags::SAVE_REGS,
        std::ptr::without_provenance(1),
        None,
    )));
    let fb = filter("g_three f_one\n", &sites);
    d.set_filter(b, Published::Owned(Box::new(fb)));
    d.register(b).unwrap();
    // SAFETY: as for `va`.
    let vb = unsafe { FtraceOpsView::new(b) };
    let ops2: Vec<&dyn RecordOps> = vec![&vb, &va];
    assert!(table.ops_enable(&vb, &ops2).unwrap());
    table.replace_code_all(&mut text, &pass(&ops2, true), &mut |b| {
        panic!("bug at {:#x}", b.ip)
    });
    let mut en = String::new();
    table.write_enabled(&mut en, &syms, &ops2, false).unwrap();
    assert_eq!(
        en,
        "f_one (2) R         \ng_three (1) R         \nf_four (1)           \nff_six (1)           \n"
    );
    for (name, target) in [
        ("f_one", TARGETS.regs_caller),
        ("g_three", TARGETS.regs_caller),
        ("f_four", TARGETS.caller),
    ] {
        let ip = site(name);
        let r = &table.records()[table.find(ip).unwrap()];
        assert_eq!(r.form().call_target(ip, text.bytes(ip, 5)), Some(target));
    }
    SEEN.lock().unwrap().clear();
    run_all(&text, &table, d);
    let mut seen = SEEN.lock().unwrap().clone();
    seen.sort();
    let mut expect = vec![
        (0, site("f_one")),
        (0, site("f_four")),
        (0, site("ff_six")),
        (1, site("f_one")),
        (1, site("g_three")),
    ];
    expect.sort();
    assert_eq!(seen, expect);

    // both go away: every site is a NOP again, nothing enabled, the touched ones remembered
    d.unregister(b).unwrap();
    let ops1: Vec<&dyn RecordOps> = vec![&va];
    assert!(table.ops_disable(&vb, &ops1));
    d.unregister(a).unwrap();
    assert!(table.ops_disable(&va, &[]));
    table.replace_code_all(&mut text, &pass(&[], true), &mut |b| {
        panic!("bug at {:#x}", b.ip)
    });
    assert!(calls_at(&table, &text).is_empty());
    let mut en = String::new();
    table.write_enabled(&mut en, &syms, &[], false).unwrap();
    assert_eq!(en, "");
    let mut touched = String::new();
    table.write_enabled(&mut touched, &syms, &[], true).unwrap();
    assert_eq!(
        touched,
        "f_one (0)           \ng_three (0)           \nf_four (0)           \nff_six (0)           \n"
    );
    let before = CALLS.load(Ordering::Relaxed);
    run_all(&text, &table, d);
    assert_eq!(CALLS.load(Ordering::Relaxed), before);
}

/// The filter's view of the functions is the sites, in record order.
#[test]
fn site_symbols_are_the_records() {
    let syms = symbols();
    let (_, recs) = segment(SiteForm::X86Nop5, NAMES.len());
    let table = RecordTable::new(recs).unwrap();
    let sites = table.site_symbols(&syms);
    let mut got = Vec::new();
    sites.for_each(&mut |s| got.push((s.name.to_owned(), s.addr)));
    let want: Vec<(String, u64)> = NAMES.iter().map(|n| (n.to_string(), site(n))).collect();
    assert_eq!(got, want);
    // the index form selects by that order
    let set = filter("3\n", &sites);
    assert_eq!(set.iter().collect::<Vec<_>>(), vec![site("g_three")]);
}

fn pass<'a>(ops: &'a [&'a dyn RecordOps], enable: bool) -> UpdatePass<'a> {
    UpdatePass {
        targets: &TARGETS,
        ops,
        enable,
        protocol: Protocol::Breakpoint,
    }
}

/// The kernel flags reach the records: two `IPMODIFY` ops on one function conflict (`EBUSY`,
/// nothing changed); a `RECURSION` ops is not `CALL_OPS_OK`; `SAVE_REGS_IF_SUPPORTED` asks for
/// the regs trampoline where the platform has one.
#[test]
fn kernel_flags_reach_the_records() {
    let syms = symbols();
    let (_, recs) = segment(SiteForm::X86Nop5, NAMES.len());
    let mut table = RecordTable::new(recs).unwrap();
    let sites = table.site_symbols(&syms);
    let d: &'static Disp = Box::leak(Box::new(Dispatcher::new(ReaderCount::new(), Platform)));
    let mk = |flags: OpsFlags, pattern: &str| -> &'static FtraceOps {
        let op: &'static FtraceOps = Box::leak(Box::new(FtraceOps::new(record, flags)));
        let set = filter(pattern, &sites);
        d.set_filter(op, Published::Owned(Box::new(set)));
        op
    };
    let live = mk(OpsFlags::IPMODIFY | OpsFlags::RECURSION, "f_one g_three\n");
    let other = mk(OpsFlags::IPMODIFY, "g_three\n");
    let regs = mk(OpsFlags::SAVE_REGS_IF_SUPPORTED, "h_five\n");
    // SAFETY: the hashes were set above and are not changed while the views exist.
    let (vl, vo, vr) = unsafe {
        (
            FtraceOpsView::new(live),
            FtraceOpsView::new(other),
            FtraceOpsView::new(regs),
        )
    };
    assert_eq!(vl.flags(), OpsRecFlags::IPMODIFY);
    assert_eq!(vo.flags(), OpsRecFlags::IPMODIFY | OpsRecFlags::CALL_OPS_OK);
    assert_eq!(
        vr.flags(),
        OpsRecFlags::SAVE_REGS | OpsRecFlags::CALL_OPS_OK
    );
    assert_eq!(vr.regs_supported(false).flags(), OpsRecFlags::CALL_OPS_OK);

    let one: Vec<&dyn RecordOps> = vec![&vl];
    table.ops_enable(&vl, &one).unwrap();
    let before: Vec<_> = table.records().to_vec();
    let two: Vec<&dyn RecordOps> = vec![&vo, &vl];
    assert_eq!(table.ops_enable(&vo, &two), Err(ftrace_core::Errno::EBUSY));
    assert_eq!(table.records(), &before[..]);
    let both: Vec<&dyn RecordOps> = vec![&vr, &vl];
    table.ops_enable(&vr, &both).unwrap();
    let mut en = String::new();
    table.write_enabled(&mut en, &syms, &both, false).unwrap();
    // not yet patched: nothing is ENABLED; the wanted flags are in the records
    assert_eq!(en, "");
    let flags = |name| table.records()[table.find(site(name)).unwrap()].flags;
    assert!(flags("f_one").contains(ftrace_patch::RecFlags::IPMODIFY));
    assert!(flags("h_five").contains(ftrace_patch::RecFlags::REGS));
    assert_eq!(flags("f_two").count(), 0);
}
