//! The call-site files (`available_filter_functions[_addrs]`, `enabled_functions`,
//! `touched_functions`, `dyn_ftrace_total_info`) read through the tree from ftrace-patch's
//! record table, byte for byte against the capture: the records and symbols are the ones the
//! capture shows (its sites, the kallsyms subset, `function_trace_call`'s size), the state is
//! reached by registering an ops and running the update pass over a simulated text.

mod common;

use std::sync::{Arc, Mutex};

use common::{ModelHost, cat, golden};
use ftrace_core::symbols::{SortedSymbols, SymbolTable};
use ftrace_patch::sim::SimText;
use ftrace_patch::{
    DynFtrace, FixedTargets, OpsRecFlags, PageStats, Protocol, RecordOps, RecordTable, SiteForm,
    UpdatePass,
};
use ftrace_tracefs::Tracefs;
use ftrace_tracefs::records::{CallSites, PatchRecords, RecordSource};

/// `function_trace_call`'s size in the captured kernel (`%pS` prints `+0x0/0x110`); the subset
/// has addresses only.
const FUNCTION_TRACE_CALL_SIZE: u64 = 0x110;
/// The function tracer's allocated trampoline in the capture (outside every symbol).
const TRAMP: u64 = 0xffff_ffff_c020_1000;

fn kernel_symbols() -> Arc<SortedSymbols> {
    let subset = SortedSymbols::from_kallsyms(&golden("11-kallsyms/kallsyms_subset.txt")).unwrap();
    let mut s = SortedSymbols::new();
    subset.for_each(&mut |sym| {
        let size = if sym.name == "function_trace_call" {
            FUNCTION_TRACE_CALL_SIZE
        } else {
            sym.size
        };
        s.push(sym.name, sym.addr, size, sym.module);
    });
    s.finish();
    Arc::new(s)
}

fn addr_of(syms: &SortedSymbols, name: &str) -> u64 {
    let mut a = None;
    syms.for_each(&mut |s| {
        if s.name == name {
            a = Some(s.addr);
        }
    });
    a.unwrap_or_else(|| panic!("{name} not in the subset"))
}

/// The function tracer's ops as the records see it: one filter, its own trampoline.
struct TracerOps {
    filter: Vec<u64>,
    func: u64,
}

impl RecordOps for TracerOps {
    fn flags(&self) -> OpsRecFlags {
        OpsRecFlags::CALL_OPS_OK
    }
    fn admits(&self, ip: u64) -> bool {
        self.filter.contains(&ip)
    }
    fn trampoline(&self) -> Option<u64> {
        Some(TRAMP)
    }
    fn ops_addr(&self) -> u64 {
        0xffff_ffff_8300_0000
    }
    fn func(&self) -> u64 {
        self.func
    }
}

struct Sites {
    table: RecordTable<Vec<DynFtrace>>,
    ops: Vec<TracerOps>,
    pages: PageStats,
}

#[derive(Clone)]
struct Shared(Arc<Mutex<Sites>>);

impl RecordSource for Shared {
    fn with_records(&self, f: &mut dyn FnMut(CallSites<'_>)) {
        let s = self.0.lock().unwrap();
        let ops: Vec<&dyn RecordOps> = s.ops.iter().map(|o| o as &dyn RecordOps).collect();
        f(CallSites {
            table: &s.table,
            ops: &ops,
            pages: &s.pages,
        })
    }
}

fn tree(sites: &Shared, syms: Arc<SortedSymbols>) -> Tracefs<ModelHost> {
    let mut host = ModelHost::new(2);
    host.functions = Some(Box::new(PatchRecords::new(sites.clone(), syms)));
    Tracefs::new(host).unwrap()
}

#[test]
fn available_filter_functions_match_the_capture() {
    let syms = kernel_symbols();
    // The capture's first 50 sites (after `endbr64` or at the entry, as the compiler placed
    // them); the names come from the kallsyms subset.
    let addrs = golden("03-filter-functions/available_filter_functions_addrs_head50.txt");
    let recs: Vec<DynFtrace> = addrs
        .lines()
        .map(|l| {
            let a = u64::from_str_radix(l.split_once(' ').unwrap().0, 16).unwrap();
            DynFtrace::new(a, SiteForm::X86Nop5)
        })
        .collect();
    let sites = Shared(Arc::new(Mutex::new(Sites {
        table: RecordTable::new(recs).unwrap(),
        ops: Vec::new(),
        pages: PageStats::kernel(),
    })));
    let mut fs = tree(&sites, syms);
    assert_eq!(
        cat(&mut fs, "available_filter_functions").unwrap(),
        golden("03-filter-functions/available_filter_functions_head50.txt")
    );
    assert_eq!(
        cat(&mut fs, "available_filter_functions_addrs").unwrap(),
        addrs
    );
    assert_eq!(cat(&mut fs, "enabled_functions").unwrap(), "");
}

#[test]
fn enabled_and_touched_functions_match_the_capture() {
    let syms = kernel_symbols();
    let funcs = [
        "do_sys_openat2",
        "vfs_read",
        "vfs_write",
        "ksys_read",
        "ksys_write",
    ];
    let lo = addr_of(&syms, "do_sys_openat2");
    let mut text = SimText::new(lo, 0x8000);
    let mut recs = Vec::new();
    for f in funcs {
        let ip = addr_of(&syms, f) + 4;
        text.poke(ip, &SiteForm::X86Nop5.nop());
        recs.push(DynFtrace::new(ip, SiteForm::X86Nop5));
    }
    // the capture's filter: `vfs_read vfs_write do_sys_openat2 ksys_read`
    let filter: Vec<u64> = funcs[..4].iter().map(|f| addr_of(&syms, f) + 4).collect();
    let ops = TracerOps {
        filter,
        func: addr_of(&syms, "function_trace_call"),
    };
    let mut table = RecordTable::new(recs).unwrap();
    let targets = FixedTargets {
        caller: lo + 0x7000,
        regs_caller: lo + 0x7100,
        ..FixedTargets::default()
    };
    {
        let list: [&dyn RecordOps; 1] = [&ops];
        assert!(table.ops_enable(&ops, &list).unwrap());
        let pass = UpdatePass {
            targets: &targets,
            ops: &list,
            enable: true,
            protocol: Protocol::Breakpoint,
        };
        let st = table.replace_code_all(&mut text, &pass, &mut |b| panic!("{b:?}"));
        assert_eq!(st.updated, 4);
    }
    // the four sites call the tracer's trampoline; ksys_write stays a NOP
    for r in table.records() {
        let want = if ops.filter.contains(&r.ip) {
            Some(TRAMP)
        } else {
            None
        };
        assert_eq!(r.form().call_target(r.ip, text.bytes(r.ip, 5)), want);
    }
    let sites = Shared(Arc::new(Mutex::new(Sites {
        table,
        ops: vec![ops],
        pages: PageStats::kernel(),
    })));
    let mut fs = tree(&sites, syms.clone());
    assert_eq!(
        cat(&mut fs, "enabled_functions").unwrap(),
        golden("04-function/enabled_functions.txt")
    );
    assert_eq!(
        cat(&mut fs, "touched_functions").unwrap(),
        golden("04-function/touched_functions.txt")
    );

    // `echo nop > current_tracer`: the ops goes, every site is a NOP, nothing is enabled
    {
        let mut s = sites.0.lock().unwrap();
        let ops = s.ops.pop().unwrap();
        assert!(s.table.ops_disable(&ops, &[]));
        let pass = UpdatePass {
            targets: &targets,
            ops: &[],
            enable: true,
            protocol: Protocol::Breakpoint,
        };
        s.table
            .replace_code_all(&mut text, &pass, &mut |b| panic!("{b:?}"));
        for r in s.table.records() {
            assert_eq!(text.bytes(r.ip, 5), SiteForm::X86Nop5.nop().as_slice());
        }
    }
    assert_eq!(
        cat(&mut fs, "enabled_functions").unwrap(),
        golden("04-function/enabled_functions_after_nop.txt")
    );
    let touched = cat(&mut fs, "touched_functions").unwrap();
    let names: Vec<&str> = touched
        .lines()
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    assert_eq!(names, funcs[..4]);
    assert!(
        touched.lines().all(|l| l.ends_with(" (0)           ")),
        "{touched}"
    );
}

#[test]
fn dyn_ftrace_total_info_matches_the_capture() {
    let syms = kernel_symbols();
    // The captured vmlinux: 42862 functions from between 44801 and 45056 `__mcount_loc`
    // entries (the rest were discarded weak functions); any such count gives the same groups.
    let mut pages = PageStats::kernel();
    pages.add_text(45_000, 45_000 - 42_862);
    let sites = Shared(Arc::new(Mutex::new(Sites {
        table: RecordTable::new(Vec::new()).unwrap(),
        ops: Vec::new(),
        pages,
    })));
    let mut fs = tree(&sites, syms);
    assert_eq!(
        cat(&mut fs, "dyn_ftrace_total_info").unwrap(),
        golden("02-files/dyn_ftrace_total_info.txt")
    );
}
