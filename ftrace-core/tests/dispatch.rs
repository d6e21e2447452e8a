//! The ops dispatcher end to end: direct and list paths, filters, recursion, pid filter,
//! registration errors, and hash replacement under concurrent dispatch.

mod common;

use common::Platform;
use ftrace_core::dispatch::Dispatcher;
use ftrace_core::errno::Errno;
use ftrace_core::filter::FtraceHash;
use ftrace_core::ops::{FtraceOps, FtraceRegs, OpsFlags};
use ftrace_core::pid::{PidFilter, PidList};
use ftrace_core::platform::ExecContext;
use ftrace_core::reclaim::{EpochReclaim, Published, ReaderCount};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

type Disp = Dispatcher<EpochReclaim, Platform>;

/// Per-ops record of calls: `private` points to one.
#[derive(Default)]
struct Log {
    calls: Mutex<Vec<(u64, u64)>>,
}

impl Log {
    fn leak() -> &'static Log {
        Box::leak(Box::default())
    }
    fn take(&self) -> Vec<(u64, u64)> {
        std::mem::take(&mut self.calls.lock().unwrap())
    }
}

fn log_cb(ip: u64, parent_ip: u64, op: &FtraceOps, _regs: Option<&mut FtraceRegs>) {
    // SAFETY: every ops using this callback has a leaked `Log` as private.
    let log = unsafe { &*(op.private() as *const Log) };
    log.calls.lock().unwrap().push((ip, parent_ip));
}

fn ops(flags: OpsFlags, log: &'static Log) -> &'static FtraceOps {
    Box::leak(Box::new(FtraceOps::with_private(
        log_cb,
        flags,
        (log as *const Log).cast(),
        None,
    )))
}

fn disp() -> &'static Disp {
    Box::leak(Box::new(Dispatcher::new(EpochReclaim, Platform)))
}

#[test]
fn static_dispatcher_is_const() {
    static D: Dispatcher<ReaderCount, Platform> = Dispatcher::new(ReaderCount::new(), Platform);
    static LOG: Log = Log {
        calls: Mutex::new(Vec::new()),
    };
    static OPS: FtraceOps = FtraceOps::with_private(
        log_cb,
        OpsFlags::empty(),
        &LOG as *const Log as *const (),
        None,
    );
    D.call(1, 2, None); // nothing registered: a no-op
    D.register(&OPS).unwrap();
    assert!(D.is_direct());
    D.call(0x10, 0x20, None);
    assert_eq!(LOG.take(), [(0x10, 0x20)]);
    D.unregister(&OPS).unwrap();
    D.call(0x10, 0x20, None);
    assert!(LOG.take().is_empty());
}

#[test]
fn single_static_ops_takes_the_direct_path() {
    let d = disp();
    let log = Log::leak();
    let a = ops(OpsFlags::empty(), log);
    d.register(a).unwrap();
    assert!(d.is_direct());
    assert!(a.flags().contains(OpsFlags::ENABLED));
    d.call(0x1000, 0x2000, None);
    assert_eq!(log.take(), [(0x1000, 0x2000)]);
    // Flags that need the list walk keep it off the direct path.
    let b = ops(OpsFlags::RECURSION, Log::leak());
    d.unregister(a).unwrap();
    d.register(b).unwrap();
    assert!(!d.is_direct());
    d.unregister(b).unwrap();
    assert!(d.is_empty());
}

#[test]
fn several_ops_are_all_called_newest_first() {
    let d = disp();
    let logs: Vec<&'static Log> = (0..4).map(|_| Log::leak()).collect();
    let all: Vec<_> = logs.iter().map(|l| ops(OpsFlags::empty(), l)).collect();
    for o in &all {
        d.register(o).unwrap();
    }
    assert!(!d.is_direct());
    assert_eq!(d.len(), 4);
    d.call(0x1000, 0x2000, None);
    for l in &logs {
        assert_eq!(l.take(), [(0x1000, 0x2000)]);
    }
    let mut order = Vec::new();
    d.for_each_ops(|o| order.push(o.ops() as *const FtraceOps));
    let expect: Vec<_> = all.iter().rev().map(|o| *o as *const FtraceOps).collect();
    assert_eq!(order, expect);
    // Back to one: direct again.
    for o in &all[1..] {
        d.unregister(o).unwrap();
    }
    assert!(d.is_direct());
}

#[test]
fn filter_and_notrace_hashes() {
    let d = disp();
    let log = Log::leak();
    let a = ops(OpsFlags::empty(), log);
    d.register(a).unwrap();
    d.set_filter(
        a,
        Published::Owned(Box::new(FtraceHash::from_ips([0x10, 0x20, 0x30]))),
    );
    d.set_notrace(a, Published::Owned(Box::new(FtraceHash::from_ips([0x20]))));
    assert!(!d.is_direct(), "a filtered ops goes through the list walk");
    for ip in [0x10, 0x20, 0x30, 0x40] {
        d.call(ip, 0, None);
    }
    assert_eq!(log.take(), [(0x10, 0), (0x30, 0)]);
    d.for_each_ops(|o| {
        assert!(o.admits(0x10) && !o.admits(0x20) && !o.admits(0x40));
        assert_eq!(o.filter().map(FtraceHash::len), Some(3));
        assert_eq!(o.notrace().map(FtraceHash::len), Some(1));
    });
    // Empty filter: everything but notrace.
    d.set_filter(a, Published::None);
    for ip in [0x10, 0x20, 0x40] {
        d.call(ip, 0, None);
    }
    assert_eq!(log.take(), [(0x10, 0), (0x40, 0)]);
    d.set_notrace(a, Published::Static(FtraceHash::empty_static()));
    assert!(d.is_direct(), "no hash left: direct again");
    d.call(0x20, 0, None);
    assert_eq!(log.take(), [(0x20, 0)]);
}

#[test]
fn borrowed_hash_without_alloc_path() {
    let d = disp();
    let log = Log::leak();
    let a = ops(OpsFlags::empty(), log);
    let storage: &'static mut [u64] = Box::leak(vec![0u64; 16].into_boxed_slice());
    let mut h = FtraceHash::with_storage(storage).unwrap();
    h.insert(0x123).unwrap();
    let h: &'static FtraceHash = Box::leak(Box::new(h));
    d.register(a).unwrap();
    d.set_filter(a, Published::Static(h));
    d.call(0x123, 1, None);
    d.call(0x124, 1, None);
    assert_eq!(log.take(), [(0x123, 1)]);
}

#[test]
fn stub_and_save_regs_are_skipped() {
    let d = disp();
    let (l1, l2, l3) = (Log::leak(), Log::leak(), Log::leak());
    d.register(ops(OpsFlags::STUB, l1)).unwrap();
    d.register(ops(OpsFlags::SAVE_REGS, l2)).unwrap();
    d.register(ops(OpsFlags::empty(), l3)).unwrap();
    d.call(1, 2, None);
    let mut regs = FtraceRegs::default();
    d.call(3, 4, Some(&mut regs));
    assert!(l1.take().is_empty());
    assert_eq!(l2.take(), [(3, 4)]);
    assert_eq!(l3.take(), [(1, 2), (3, 4)]);
}

#[test]
fn registration_errors_match_the_kernel() {
    let d = disp();
    let a = ops(OpsFlags::empty(), Log::leak());
    assert_eq!(d.unregister(a), Err(Errno::EBUSY));
    d.register(a).unwrap();
    assert_eq!(d.register(a), Err(Errno::EBUSY));
    d.unregister(a).unwrap();
    assert!(a.flags().contains(OpsFlags::INITIALIZED));
    a.mark_deleted();
    assert_eq!(d.register(a), Err(Errno::EINVAL));
    // State flags cannot be forged at construction.
    let b = ops(OpsFlags::ENABLED | OpsFlags::DYNAMIC, Log::leak());
    assert!(!b.flags().intersects(OpsFlags::STATE));
}

static REENTRY_DISPATCHER: Dispatcher<ReaderCount, Platform> =
    Dispatcher::new(ReaderCount::new(), Platform);
static DEPTH: AtomicUsize = AtomicUsize::new(0);
static MAX_DEPTH: AtomicUsize = AtomicUsize::new(0);
static ENTRIES: AtomicUsize = AtomicUsize::new(0);

/// A callback that calls a traced function (re-enters the dispatcher) every time.
fn reentering_cb(ip: u64, parent_ip: u64, _op: &FtraceOps, _regs: Option<&mut FtraceRegs>) {
    ENTRIES.fetch_add(1, Ordering::SeqCst);
    let depth = DEPTH.fetch_add(1, Ordering::SeqCst) + 1;
    MAX_DEPTH.fetch_max(depth, Ordering::SeqCst);
    REENTRY_DISPATCHER.call(ip + 1, parent_ip, None);
    DEPTH.fetch_sub(1, Ordering::SeqCst);
}

#[test]
fn a_traced_function_called_from_a_callback_does_not_recurse() {
    static OPS: FtraceOps = FtraceOps::new(reentering_cb, OpsFlags::RECURSION);
    REENTRY_DISPATCHER.register(&OPS).unwrap();
    REENTRY_DISPATCHER.call(0x100, 0x200, None);
    // Linux's rule: the context bit, then one transition level, then refusal.
    assert_eq!(MAX_DEPTH.load(Ordering::SeqCst), 2);
    assert_eq!(ENTRIES.load(Ordering::SeqCst), 2);
    // The bits were all released: a new call enters again.
    REENTRY_DISPATCHER.call(0x100, 0x200, None);
    assert_eq!(ENTRIES.load(Ordering::SeqCst), 4);
    // An interrupt context nests inside a normal one (its own bit).
    Platform::set_context(ExecContext::Irq);
    REENTRY_DISPATCHER.call(0x100, 0x200, None);
    Platform::set_context(ExecContext::Normal);
    assert_eq!(ENTRIES.load(Ordering::SeqCst), 6);
    REENTRY_DISPATCHER.unregister(&OPS).unwrap();
}

#[test]
fn pid_filter_selects_tasks() {
    static PIDS: PidFilter = PidFilter::new();
    let d = disp();
    let log = Log::leak();
    let a: &'static FtraceOps = Box::leak(Box::new(FtraceOps::with_private(
        log_cb,
        OpsFlags::empty(),
        (log as *const Log).cast(),
        Some(&PIDS),
    )));
    assert!(a.flags().contains(OpsFlags::PID));
    d.register(a).unwrap();
    assert!(!d.is_direct());
    Platform::set_pid(7);
    d.call(1, 0, None);
    PIDS.set_pids(
        Published::Owned(Box::new(PidList::from_pids([5, 6]))),
        d.reclaim(),
    );
    d.call(2, 0, None);
    Platform::set_pid(6);
    d.call(3, 0, None);
    PIDS.set_no_pids(
        Published::Owned(Box::new(PidList::from_pids([6]))),
        d.reclaim(),
    );
    d.call(4, 0, None);
    assert_eq!(log.take(), [(1, 0), (3, 0)]);
    PIDS.set_pids(Published::None, d.reclaim());
    PIDS.set_no_pids(Published::None, d.reclaim());
    Platform::set_pid(1);
}

static HITS: AtomicUsize = AtomicUsize::new(0);

fn count_cb(_ip: u64, _pip: u64, _op: &FtraceOps, _regs: Option<&mut FtraceRegs>) {
    HITS.fetch_add(1, Ordering::Relaxed);
}

/// Hashes and ops replaced while other threads dispatch (real threads, crossbeam-epoch).
#[test]
fn concurrent_updates_with_epoch_reclaim() {
    let d = disp();
    let stop = &*Box::leak(Box::new(std::sync::atomic::AtomicBool::new(false)));
    let a: &'static FtraceOps = Box::leak(Box::new(FtraceOps::new(count_cb, OpsFlags::empty())));
    d.register(a).unwrap();
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                // At least one full pass, however the threads get scheduled.
                loop {
                    for ip in 1..64 {
                        d.call(ip, 0, None);
                    }
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                }
            });
        }
        for round in 0..200u64 {
            d.set_filter(
                a,
                Published::Owned(Box::new(FtraceHash::from_ips(
                    (1..64).filter(|ip| ip % (round % 7 + 2) == 0),
                ))),
            );
            let b = Box::new(FtraceOps::new(count_cb, OpsFlags::empty()));
            // SAFETY: `b` is dropped only after `unregister` returned.
            unsafe { d.register_dynamic(&b).unwrap() };
            d.unregister(&b).unwrap();
            drop(b);
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert!(HITS.load(Ordering::Relaxed) > 0);
    d.unregister(a).unwrap();
}
