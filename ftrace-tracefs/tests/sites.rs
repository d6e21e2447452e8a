//! The instance's call sites over a host platform whose text is ftrace-patch's `SimText`: the
//! sites are patched exactly as the hashes say (tracer switches, the filter files, function
//! commands), through the platform's text poke, and the call-site files read the records.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use ftrace_patch::sim::SimText;
use ftrace_patch::x86::NOP5_DISP8;
use ftrace_patch::{FixedTargets, FtraceBug, SiteForm, StopFixup, TextFault, TextPoke};
use ftrace_tracefs::array::{
    ArrayHost, CallSiteText, HeapPages, Platform, Symbol, SymbolSlice, SymbolTable, TraceArray,
};
use ftrace_tracefs::{Errno, Tracefs, WriteMode};

/// The simulated kernel: one site at each function's entry (rustc's `0f 1f 44 00 08`), except
/// `corrupt`, whose site holds a jump.
static SYMS: SymbolSlice = SymbolSlice(&[
    Symbol::new("schedule", 0x1000, 0x100),
    Symbol::new("do_work", 0x2000, 0x100),
    Symbol::new("helper", 0x3000, 0x100),
    Symbol::new("corrupt", 0x4000, 0x100),
    Symbol::new("leaf", 0x5000, 0x100),
]);
const SCHEDULE: usize = 0x1000;
const DO_WORK: usize = 0x2000;
const HELPER: usize = 0x3000;
const CORRUPT: usize = 0x4000;
const LEAF: usize = 0x5000;
const SITES: [u64; 5] = [0x5000, 0x1000, 0x3000, 0x2000, 0x4000];
const LIVE: [usize; 4] = [SCHEDULE, DO_WORK, HELPER, LEAF];
const TRAMP: u64 = 0x9000;
const RETURN_HANDLER: usize = 0xffff_0000;

/// Each test's own kernel text (`ID`), as the platform's `Default` finds it.
static TEXTS: [Mutex<Option<SimText>>; 8] = [const { Mutex::new(None) }; 8];
/// `ftrace_bug()` reports per test.
static BUGS: [AtomicUsize; 8] = [const { AtomicUsize::new(0) }; 8];

fn text<const ID: usize>() -> std::sync::MutexGuard<'static, Option<SimText>> {
    let mut t = TEXTS[ID].lock().unwrap();
    t.get_or_insert_with(|| {
        let mut t = SimText::new(0x1000, 0x8000);
        for s in SITES {
            t.poke(s, &NOP5_DISP8);
        }
        t.poke(CORRUPT as u64, &[0xe9, 1, 2, 3, 4]);
        t
    });
    t
}

/// The platform's text: test `ID`'s `SimText`.
#[derive(Default)]
struct Text<const ID: usize>;

impl<const ID: usize> TextPoke for Text<ID> {
    fn read_text(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), TextFault> {
        text::<ID>().as_mut().unwrap().read_text(addr, buf)
    }
    fn write_text(&mut self, addr: u64, bytes: &[u8]) -> Result<(), TextFault> {
        text::<ID>().as_mut().unwrap().write_text(addr, bytes)
    }
    fn sync_cores(&mut self) {}
    fn stop_others(&mut self, _fixup: &StopFixup<'_>, patch: &mut dyn FnMut(&mut Self)) {
        // One thread: nobody else to stop.
        patch(self)
    }
}

impl<const ID: usize> CallSiteText for Text<ID> {
    fn call_sites(&self) -> Option<&[u64]> {
        Some(&SITES)
    }
    fn targets(&self) -> FixedTargets {
        FixedTargets {
            caller: TRAMP,
            regs_caller: TRAMP,
            list_ops: 0,
            nop_ops: 0,
        }
    }
}

struct Host<const ID: usize>;

// SAFETY: each test runs its instance on its own thread, CPU 0.
unsafe impl<const ID: usize> Platform for Host<ID> {
    type Pages = HeapPages;
    type Text = Text<ID>;
    fn now_ns(&self) -> u64 {
        static CLOCK: AtomicUsize = AtomicUsize::new(1_000_000);
        CLOCK.fetch_add(1000, Ordering::Relaxed) as u64
    }
    fn current_cpu(&self) -> u32 {
        0
    }
    fn current_pid(&self) -> i32 {
        1
    }
    fn symbols(&self) -> &'static (dyn SymbolTable + Sync) {
        &SYMS
    }
    fn return_handler(&self) -> usize {
        RETURN_HANDLER
    }
    fn ftrace_bug(&self, _bug: &FtraceBug) {
        BUGS[ID].fetch_add(1, Ordering::Relaxed);
    }
}

/// The functions whose site calls the trampoline.
fn patched<const ID: usize>() -> Vec<usize> {
    let t = text::<ID>();
    let t = t.as_ref().unwrap();
    SITES
        .iter()
        .map(|&s| s as usize)
        .filter(|&s| {
            SiteForm::X86Nop5Disp8.call_target(s as u64, t.bytes(s as u64, 5)) == Some(TRAMP)
        })
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// A call of `ip` as the CPU makes it: through the trampolines only if its site is patched.
fn call<const ID: usize>(a: &TraceArray<Host<ID>, 1>, ip: usize, parent_ip: usize) {
    if !patched::<ID>().contains(&ip) {
        return;
    }
    let mut slot = parent_ip;
    a.on_entry(ip, parent_ip, &mut slot);
    if slot == RETURN_HANDLER {
        assert_eq!(a.on_return(), parent_ip);
    }
}

/// Every function once.
fn run_all<const ID: usize>(a: &TraceArray<Host<ID>, 1>) {
    for f in [SCHEDULE, DO_WORK, HELPER, CORRUPT, LEAF] {
        call(a, f, 0x9999);
    }
}

type Fs<const ID: usize> = Tracefs<ArrayHost<Host<ID>, 1>>;

fn cat<const ID: usize>(fs: &mut Fs<ID>, path: &str) -> String {
    String::from_utf8(fs.read_to_end(path).unwrap()).unwrap()
}

fn echo<const ID: usize>(fs: &mut Fs<ID>, data: &str, path: &str) -> Result<(), Errno> {
    fs.write_all(path, format!("{data}\n").as_bytes(), WriteMode::Truncate)
}

/// The functions named in `trace`'s event lines.
fn traced<const ID: usize>(fs: &mut Fs<ID>) -> Vec<String> {
    cat(fs, "trace")
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let call = l.split(": ").nth(1).unwrap();
            call.split(" <-").next().unwrap().to_owned()
        })
        .collect()
}

macro_rules! instance {
    ($id:literal) => {{
        static A: TraceArray<Host<$id>, 1> = TraceArray::new(Host);
        (&A, A.tracefs().unwrap())
    }};
}

#[test]
fn the_records_are_the_sites_and_a_corrupt_one_is_reported_and_left_alone() {
    let (_a, mut fs) = instance!(0);
    assert_eq!(
        BUGS[0].load(Ordering::Relaxed),
        1,
        "one ftrace_bug for `corrupt`"
    );
    let avail = cat(&mut fs, "available_filter_functions");
    for f in ["schedule", "do_work", "helper", "leaf"] {
        assert!(avail.lines().any(|l| l == f), "{f} in {avail}");
    }
    let addrs = cat(&mut fs, "available_filter_functions_addrs");
    assert!(addrs.lines().any(|l| l == "1000 schedule"), "{addrs}");
    assert_eq!(cat(&mut fs, "enabled_functions"), "");
    assert!(cat(&mut fs, "dyn_ftrace_total_info").contains("pages:"));
    echo(&mut fs, "function", "current_tracer").unwrap();
    assert_eq!(patched::<0>(), LIVE);
    let t = text::<0>();
    assert_eq!(
        t.as_ref().unwrap().bytes(CORRUPT as u64, 5),
        [0xe9, 1, 2, 3, 4]
    );
}

#[test]
fn a_tracer_patches_every_site_and_nop_restores_the_nops() {
    let (a, mut fs) = instance!(1);
    assert!(patched::<1>().is_empty(), "sites start as NOPs");
    echo(&mut fs, "function", "current_tracer").unwrap();
    assert_eq!(patched::<1>(), LIVE);
    run_all(a);
    assert_eq!(traced(&mut fs), ["schedule", "do_work", "helper", "leaf"]);
    let enabled = cat(&mut fs, "enabled_functions");
    assert_eq!(enabled.lines().count(), 4, "{enabled}");
    assert!(enabled.starts_with("schedule (1)"), "{enabled}");
    echo(&mut fs, "function_graph", "current_tracer").unwrap();
    assert_eq!(patched::<1>(), LIVE);
    echo(&mut fs, "nop", "current_tracer").unwrap();
    assert!(patched::<1>().is_empty());
    assert_eq!(cat(&mut fs, "enabled_functions"), "");
    assert_eq!(cat(&mut fs, "touched_functions").lines().count(), 4);
    for s in LIVE {
        let t = text::<1>();
        assert_eq!(t.as_ref().unwrap().bytes(s as u64, 5), NOP5_DISP8);
    }
}

#[test]
fn the_filter_files_choose_the_patched_sites() {
    let (a, mut fs) = instance!(2);
    echo(&mut fs, "do_work helper", "set_ftrace_filter").unwrap();
    assert!(
        patched::<2>().is_empty(),
        "no tracer, no ops: nothing patched"
    );
    echo(&mut fs, "function", "current_tracer").unwrap();
    assert_eq!(patched::<2>(), [DO_WORK, HELPER]);
    echo(&mut fs, "helper", "set_ftrace_notrace").unwrap();
    assert_eq!(patched::<2>(), [DO_WORK]);
    run_all(a);
    assert_eq!(traced(&mut fs), ["do_work"]);
    // `>>` adds to the filter; a bad name is EINVAL and adds nothing.
    let append =
        |fs: &mut Fs<2>, data: &[u8]| fs.write_all("set_ftrace_filter", data, WriteMode::Append);
    append(&mut fs, b"leaf\n").unwrap();
    assert_eq!(patched::<2>(), [DO_WORK, LEAF]);
    assert_eq!(append(&mut fs, b"no_such_fn\n"), Err(Errno::EINVAL));
    assert_eq!(patched::<2>(), [DO_WORK, LEAF]);
    // Emptied: every site but the notrace one.
    echo(&mut fs, "", "set_ftrace_filter").unwrap();
    echo(&mut fs, "", "set_ftrace_notrace").unwrap();
    assert_eq!(patched::<2>(), LIVE);
}

#[test]
fn the_graph_filter_leaves_the_sites_alone_and_chooses_the_subtrees() {
    let (a, mut fs) = instance!(3);
    echo(&mut fs, "function_graph", "current_tracer").unwrap();
    echo(&mut fs, "helper", "set_graph_function").unwrap();
    assert_eq!(patched::<3>(), LIVE);
    run_all(a);
    let t = cat(&mut fs, "trace");
    assert!(t.contains("helper();"), "{t}");
    assert!(!t.contains("schedule"), "{t}");
}

#[test]
fn function_commands_patch_their_sites_even_under_nop() {
    let (a, mut fs) = instance!(4);
    echo(&mut fs, "leaf:traceoff:1", "set_ftrace_filter").unwrap();
    assert_eq!(patched::<4>(), [LEAF], "the probe ops alone");
    assert_eq!(cat(&mut fs, "tracing_on"), "1\n");
    run_all(a);
    assert_eq!(cat(&mut fs, "tracing_on"), "0\n");
    assert_eq!(
        cat(&mut fs, "set_ftrace_filter"),
        "#### all functions enabled ####\nleaf:traceoff:count=0\n"
    );
    echo(&mut fs, "1", "tracing_on").unwrap();
    echo(&mut fs, "function", "current_tracer").unwrap();
    assert_eq!(patched::<4>(), LIVE);
    // A counted command is removed with a count (its own probe ops, as in the kernel).
    fs.write_all(
        "set_ftrace_filter",
        b"!leaf:traceoff:0\n",
        WriteMode::Append,
    )
    .unwrap();
    assert_eq!(patched::<4>(), LIVE, "the tracer still wants every site");
    echo(&mut fs, "nop", "current_tracer").unwrap();
    assert!(patched::<4>().is_empty(), "no command, no tracer");
}

#[test]
fn a_site_that_cannot_be_written_is_reported_and_the_write_is_eio() {
    let (_a, mut fs) = instance!(5);
    let before = BUGS[5].load(Ordering::Relaxed);
    text::<5>().as_mut().unwrap().fail_writes(HELPER as u64, 5);
    assert_eq!(echo(&mut fs, "function", "current_tracer"), Err(Errno::EIO));
    assert_eq!(BUGS[5].load(Ordering::Relaxed), before + 1);
    assert_eq!(patched::<5>(), [SCHEDULE, DO_WORK, LEAF]);
}

#[test]
fn an_instance_patches_the_sites_its_filter_wants() {
    let (a, mut fs) = instance!(6);
    fs.mkdir("instances/foo").unwrap();
    echo(&mut fs, "leaf", "instances/foo/set_ftrace_filter").unwrap();
    assert!(
        patched::<6>().is_empty(),
        "an instance under nop wants nothing"
    );
    echo(&mut fs, "function", "instances/foo/current_tracer").unwrap();
    assert_eq!(
        patched::<6>(),
        [LEAF],
        "the instance's filter, through its forwarding ops"
    );
    assert_eq!(cat(&mut fs, "enabled_functions").lines().count(), 1);
    run_all(a);
    let foo = cat(&mut fs, "instances/foo/trace");
    assert_eq!(
        foo.lines().filter(|l| l.contains(": leaf <-")).count(),
        1,
        "{foo}"
    );
    // the top level's tracer adds its own ops: leaf serves two
    echo(&mut fs, "function", "current_tracer").unwrap();
    assert_eq!(patched::<6>(), LIVE);
    assert!(cat(&mut fs, "enabled_functions").contains("leaf (2)"));
    echo(&mut fs, "helper", "instances/foo/set_ftrace_filter").unwrap();
    assert!(cat(&mut fs, "enabled_functions").contains("helper (2)"));
    echo(&mut fs, "nop", "current_tracer").unwrap();
    assert_eq!(patched::<6>(), [HELPER]);
    fs.rmdir("instances/foo").unwrap();
    assert!(patched::<6>().is_empty(), "removed with its instance");
    run_all(a);
}

/// `trace_stat/function0` as (function, hits), in its order.
fn profile<const ID: usize>(fs: &mut Fs<ID>) -> Vec<(String, u64)> {
    let text = cat(fs, "trace_stat/function0");
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("  Function                               Hit"),
        "{text}"
    );
    assert_eq!(
        lines.next(),
        Some("  --------                               ---"),
        "{text}"
    );
    lines
        .map(|l| {
            let mut w = l.split_whitespace();
            let name = w.next().unwrap().to_owned();
            (name, w.next().unwrap().parse().unwrap())
        })
        .collect()
}

#[test]
fn the_function_profiler_counts_calls_per_cpu_whatever_the_tracer() {
    let (a, mut fs) = instance!(7);
    assert_eq!(cat(&mut fs, "function_profile_enabled"), "0\n");
    echo(&mut fs, "1", "function_profile_enabled").unwrap();
    assert_eq!(patched::<7>(), LIVE, "the profile ops wants every site");
    run_all(a);
    call(a, LEAF, 0x9999);
    let p = profile(&mut fs);
    assert_eq!(p[0], ("leaf".to_owned(), 2), "most hits first: {p:?}");
    assert_eq!(p.len(), 4, "{p:?}");
    assert!(p[1..].iter().all(|(_, hits)| *hits == 1), "{p:?}");
    assert!(
        lines_of(&cat(&mut fs, "trace")).is_empty(),
        "nop records nothing"
    );
    // off: unpatched, the counts stay; on again: from zero
    echo(&mut fs, "0", "function_profile_enabled").unwrap();
    assert!(patched::<7>().is_empty());
    assert_eq!(profile(&mut fs).len(), 4);
    echo(&mut fs, "1", "function_profile_enabled").unwrap();
    assert!(profile(&mut fs).is_empty());
    call(a, HELPER, 0x9999);
    assert_eq!(profile(&mut fs), [("helper".to_owned(), 1)]);
    assert_eq!(a.profile_missed(), 0);
    echo(&mut fs, "0", "function_profile_enabled").unwrap();
}

fn lines_of(trace: &str) -> Vec<&str> {
    trace.lines().filter(|l| !l.starts_with('#')).collect()
}
