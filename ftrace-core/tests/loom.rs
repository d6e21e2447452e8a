//! loom models of the ops-list protocol: registering and unregistering ops while another
//! thread dispatches never calls a freed ops and never misses an ops registered before the
//! dispatch began; and of the publication cell, [`RcuCell`]: a reader never sees a value
//! freed, nor a value before its contents, and no replaced value leaks.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p ftrace-core --test loom --release`. Under
//! `cfg(loom)` every atomic of the dispatcher, the ops, the recursion word and the
//! [`ReaderCount`] grace period is loom's (ftrace-core's `sync` module), so the protocol is
//! checked as written.
#![cfg(loom)]

use ftrace_core::dispatch::Dispatcher;
use ftrace_core::event::TraceCtx;
use ftrace_core::ops::{FtraceOps, FtraceRegs, OpsFlags};
use ftrace_core::platform::{ExecContext, RecursionState, TaskContext};
use ftrace_core::reclaim::{Published, RcuCell, ReaderCount};
use ftrace_core::recursion::TraceRecursion;
use loom::sync::Arc;
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::thread;

loom::thread_local! {
    static RECURSION: TraceRecursion = TraceRecursion::new();
}

/// The model's platform: one task context per loom thread.
struct Platform;

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
        // SAFETY: the word lives as long as the calling thread, and the dispatcher uses the
        // reference only during the call that asked for it, on that thread.
        RECURSION.with(|r| unsafe { &*(r as *const TraceRecursion) })
    }
}

type Disp = Dispatcher<ReaderCount, Platform>;

/// What an ops's callback checks and counts.
struct Probe {
    /// Cleared by the owner once it considers the ops freed (after `unregister` returned).
    alive: AtomicBool,
    calls: AtomicUsize,
}

impl Probe {
    fn new() -> Probe {
        Probe {
            alive: AtomicBool::new(true),
            calls: AtomicUsize::new(0),
        }
    }
}

fn callback(_ip: u64, _parent_ip: u64, op: &FtraceOps, _regs: Option<&mut FtraceRegs>) {
    // SAFETY: `private` points to a `Probe` kept alive (in an `Arc`) by the model.
    let probe = unsafe { &*(op.private() as *const Probe) };
    assert!(probe.alive.load(Ordering::Relaxed), "called a freed ops");
    probe.calls.fetch_add(1, Ordering::Relaxed);
}

struct Owned {
    probe: Arc<Probe>,
    ops: Box<FtraceOps>,
}

impl Owned {
    fn new() -> Owned {
        let probe = Arc::new(Probe::new());
        let ops = Box::new(FtraceOps::with_private(
            callback,
            OpsFlags::empty(),
            Arc::as_ptr(&probe).cast(),
            None,
        ));
        Owned { probe, ops }
    }
}

fn builder() -> loom::model::Builder {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b
}

/// A dynamic ops unregistered (then "freed") while another thread dispatches: the callback
/// never runs after `unregister` returned.
#[test]
fn unregister_never_calls_a_freed_ops() {
    builder().check(|| {
        let d: Arc<Disp> = Arc::new(Dispatcher::new(ReaderCount::new(), Platform));
        let a = Arc::new(Owned::new());
        // SAFETY: `a` (and so the ops) outlives its unregistration below.
        unsafe { d.register_dynamic(&a.ops).unwrap() };

        let reader = {
            let d = d.clone();
            thread::spawn(move || d.call(0x1000, 0x2000, None))
        };
        d.unregister(&a.ops).unwrap();
        a.probe.alive.store(false, Ordering::Relaxed);
        reader.join().unwrap();
    });
}

/// An ops registered before a dispatch began (the dispatching thread saw the flag the
/// registering thread set afterwards) is called by it, also when the previous single static
/// ops was on the direct path and is being unregistered concurrently.
#[test]
fn registered_before_dispatch_is_called() {
    builder().check(|| {
        let d: Arc<Disp> = Arc::new(Dispatcher::new(ReaderCount::new(), Platform));
        let a_probe = Box::leak(Box::new(Probe::new()));
        let a: &'static FtraceOps = Box::leak(Box::new(FtraceOps::with_private(
            callback,
            OpsFlags::empty(),
            (a_probe as *const Probe).cast(),
            None,
        )));
        d.register(a).unwrap();
        assert!(d.is_direct());
        let b = Arc::new(Owned::new());
        let registered = Arc::new(AtomicBool::new(false));

        let reader = {
            let (d, b, registered) = (d.clone(), b.clone(), registered.clone());
            thread::spawn(move || {
                let seen = registered.load(Ordering::Acquire);
                d.call(0x1000, 0x2000, None);
                if seen {
                    assert_eq!(b.probe.calls.load(Ordering::Relaxed), 1, "missed an ops");
                }
            })
        };
        // SAFETY: `b` outlives its unregistration below.
        unsafe { d.register_dynamic(&b.ops).unwrap() };
        registered.store(true, Ordering::Release);
        d.unregister(a).unwrap();
        reader.join().unwrap();
        d.unregister(&b.ops).unwrap();
        b.probe.alive.store(false, Ordering::Relaxed);
        assert!(d.is_empty());
    });
}

/// Two ops; one is unregistered while a dispatch walks the list: the other, registered all
/// along, is always called, and the removed one is never called once freed.
#[test]
fn walk_survives_concurrent_unlink() {
    builder().check(|| {
        let d: Arc<Disp> = Arc::new(Dispatcher::new(ReaderCount::new(), Platform));
        let a = Arc::new(Owned::new());
        let b = Arc::new(Owned::new());
        // SAFETY: both outlive their unregistration.
        unsafe {
            d.register_dynamic(&a.ops).unwrap();
            d.register_dynamic(&b.ops).unwrap();
        }
        let reader = {
            let (d, a) = (d.clone(), a.clone());
            thread::spawn(move || {
                d.call(0x1000, 0x2000, None);
                assert_eq!(a.probe.calls.load(Ordering::Relaxed), 1, "missed an ops");
            })
        };
        d.unregister(&b.ops).unwrap();
        b.probe.alive.store(false, Ordering::Relaxed);
        reader.join().unwrap();
        d.unregister(&a.ops).unwrap();
    });
}

/// A filter set on the single (direct-path) ops before a dispatch began is honoured by it:
/// the direct slot is republished, so the call goes through the list walk and the hash.
#[test]
fn filter_set_before_dispatch_is_honoured() {
    use ftrace_core::filter::FtraceHash;
    use ftrace_core::reclaim::Published;
    builder().check(|| {
        let d: Arc<Disp> = Arc::new(Dispatcher::new(ReaderCount::new(), Platform));
        let probe: &'static Probe = Box::leak(Box::new(Probe::new()));
        let a: &'static FtraceOps = Box::leak(Box::new(FtraceOps::with_private(
            callback,
            OpsFlags::empty(),
            (probe as *const Probe).cast(),
            None,
        )));
        d.register(a).unwrap();
        let hash: &'static FtraceHash = Box::leak(Box::new(FtraceHash::from_ips([0x1000])));
        let set = Arc::new(AtomicBool::new(false));
        let reader = {
            let (d, set) = (d.clone(), set.clone());
            thread::spawn(move || {
                let seen = set.load(Ordering::Acquire);
                d.call(0x2000, 0x3000, None);
                if seen {
                    assert_eq!(probe.calls.load(Ordering::Relaxed), 0, "filter ignored");
                }
            })
        };
        d.set_filter(a, Published::Static(hash));
        set.store(true, Ordering::Release);
        reader.join().unwrap();
        assert!(!d.is_direct());
        d.call(0x1000, 0x3000, None);
        assert!(probe.calls.load(Ordering::Relaxed) >= 1);
        d.unregister(a).unwrap();
    });
}

/// The reader-count grace period on its own: readers that load a published slot inside a
/// guard never see it freed, with two readers straddling the phase flips of `synchronize`.
#[test]
fn reader_count_grace_period() {
    use ftrace_core::platform::Reclaim;
    builder().check(|| {
        let rc = Arc::new(ReaderCount::new());
        // Which object is published (0 or 1), and whether each was freed.
        let slot = Arc::new(AtomicUsize::new(0));
        let freed = Arc::new([AtomicBool::new(false), AtomicBool::new(false)]);
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (rc, slot, freed) = (rc.clone(), slot.clone(), freed.clone());
                thread::spawn(move || {
                    let _g = rc.pin();
                    let s = slot.load(Ordering::Acquire);
                    assert!(!freed[s].load(Ordering::Relaxed), "read a freed object");
                })
            })
            .collect();
        slot.store(1, Ordering::Release);
        rc.synchronize();
        freed[0].store(true, Ordering::Relaxed);
        for r in readers {
            r.join().unwrap();
        }
    });
}

/// The probe actions of the count model: a tracing switch and a count of stack traces.
struct ProbeBackend {
    on: AtomicBool,
    acted: AtomicUsize,
}

impl ftrace_core::filter::ProbeActions for ProbeBackend {
    fn tracing_is_on(&self) -> bool {
        self.on.load(Ordering::SeqCst)
    }
    fn set_tracing_on(&self, on: bool) {
        self.on.store(on, Ordering::SeqCst);
    }
    fn stacktrace(&self, _ip: u64, _parent_ip: u64) {
        self.acted.fetch_add(1, Ordering::SeqCst);
    }
    fn dump(&self, _this_cpu_only: bool) {
        self.acted.fetch_add(1, Ordering::SeqCst);
    }
}

/// Two CPUs hit a function with a counted command at once: the command acts exactly `count`
/// times in total (never more), and the count ends at zero.
#[test]
fn probe_count_is_never_overspent() {
    use ftrace_core::filter::{ProbeCommand, ProbeCount, run_probe};
    for cmd in [ProbeCommand::Stacktrace, ProbeCommand::Dump] {
        builder().check(move || {
            let count = Arc::new(ProbeCount::new(1));
            let b = Arc::new(ProbeBackend {
                on: AtomicBool::new(true),
                acted: AtomicUsize::new(0),
            });
            let t = {
                let (count, b) = (count.clone(), b.clone());
                thread::spawn(move || run_probe(cmd, Some(&count), None, 1, 0, &*b))
            };
            let mine = run_probe(cmd, Some(&count), None, 1, 0, &*b);
            let theirs = t.join().unwrap();
            assert!(mine != theirs, "exactly one acts");
            assert_eq!(b.acted.load(Ordering::SeqCst), 1);
            assert_eq!(count.get(), 0);
        });
    }
}

/// `traceoff:1` hit on two CPUs while a third turns tracing back on: the count is spent at
/// most once, and only by a call that really switched tracing off.
#[test]
fn traceoff_count_is_spent_once() {
    use ftrace_core::filter::{ProbeCommand, ProbeCount, run_probe};
    builder().check(|| {
        let count = Arc::new(ProbeCount::new(1));
        let b = Arc::new(ProbeBackend {
            on: AtomicBool::new(true),
            acted: AtomicUsize::new(0),
        });
        let t = {
            let (count, b) = (count.clone(), b.clone());
            thread::spawn(move || run_probe(ProbeCommand::Traceoff, Some(&count), None, 1, 0, &*b))
        };
        let mine = run_probe(ProbeCommand::Traceoff, Some(&count), None, 1, 0, &*b);
        let theirs = t.join().unwrap();
        assert!(!(mine && theirs));
        assert!(mine || theirs);
        assert_eq!(count.get(), 0);
        assert!(!b.on.load(Ordering::SeqCst));
    });
}

/// The event-command / event-trigger rule (`if (!count) return; if (count != -1) count--`)
/// on two CPUs: a count of 1 is spent by exactly one of them, an unlimited one by neither.
#[test]
fn try_spend_is_never_overspent() {
    use ftrace_core::filter::ProbeCount;
    builder().check(|| {
        let one = Arc::new(ProbeCount::new(1));
        let unlimited = Arc::new(ProbeCount::new(-1));
        let t = {
            let (one, unlimited) = (one.clone(), unlimited.clone());
            thread::spawn(move || (one.try_spend(), unlimited.try_spend()))
        };
        let mine = (one.try_spend(), unlimited.try_spend());
        let theirs = t.join().unwrap();
        assert!(mine.0 != theirs.0, "exactly one spends the unit");
        assert!(mine.1 && theirs.1);
        assert_eq!((one.get(), unlimited.get()), (0, -1));
    });
}

/// A published value: its payload is a loom cell (so a read not ordered after the write that
/// filled it is a data race loom reports), and dropping it marks it freed.
struct Tracked {
    id: usize,
    payload: loom::cell::UnsafeCell<usize>,
    freed: Arc<[AtomicBool; 3]>,
}

impl Tracked {
    fn boxed(id: usize, freed: &Arc<[AtomicBool; 3]>) -> Box<Tracked> {
        let t = Box::new(Tracked {
            id,
            payload: loom::cell::UnsafeCell::new(0),
            freed: freed.clone(),
        });
        // Filled after construction, as a writer fills a value before publishing it.
        // SAFETY: nobody else can reach `t` yet.
        t.payload.with_mut(|p| unsafe { *p = 100 + id });
        t
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.freed[self.id].store(true, Ordering::Relaxed);
    }
}

/// [`RcuCell`] under [`ReaderCount`]: a writer replaces the published value twice (value 0 →
/// 1 → 2, each old one retired) while two readers load it inside a guard. No reader sees a
/// freed value or a value whose payload write is not visible to it; once the cell is dropped
/// every value has been freed exactly once (none leaks).
///
/// Each of these weakenings makes the model fail (tried, one at a time): the swap in
/// `RcuCell::swap` as `Relaxed` instead of `AcqRel`, or the load in `RcuCell::load` as
/// `Relaxed` instead of `Acquire` → loom reports the reader's payload read racing the
/// writer's fill ("Causality violation"); `ReaderCount::defer` freeing without its
/// `synchronize` (no grace period) → the reader's payload read races the value's drop.
#[test]
fn rcu_cell_replace_under_readers() {
    builder().check(|| {
        let rc = Arc::new(ReaderCount::new());
        let freed = Arc::new([(); 3].map(|()| AtomicBool::new(false)));
        let cell = Arc::new(RcuCell::<Tracked>::empty());
        cell.replace(Published::Owned(Tracked::boxed(0, &freed)), &*rc);
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (rc, cell) = (rc.clone(), cell.clone());
                thread::spawn(move || {
                    use ftrace_core::platform::Reclaim;
                    let _g = rc.pin();
                    // SAFETY: inside a guard of the domain the writer retires through.
                    let v = unsafe { cell.load() }.expect("a value is always published");
                    let id = v.id;
                    assert!(!v.freed[id].load(Ordering::Relaxed), "read a freed value");
                    // SAFETY: only read here; written once before publication.
                    let p = v.payload.with(|p| unsafe { *p });
                    assert_eq!(p, 100 + id, "saw a value before its contents");
                    assert!(!v.freed[id].load(Ordering::Relaxed), "read a freed value");
                })
            })
            .collect();
        cell.replace(Published::Owned(Tracked::boxed(1, &freed)), &*rc);
        cell.replace(Published::Owned(Tracked::boxed(2, &freed)), &*rc);
        assert!(freed[0].load(Ordering::Relaxed) && freed[1].load(Ordering::Relaxed));
        for r in readers {
            r.join().unwrap();
        }
        assert!(
            !freed[2].load(Ordering::Relaxed),
            "the published value is live"
        );
        drop(Arc::try_unwrap(cell).ok().expect("readers joined"));
        assert!(
            freed.iter().all(|f| f.load(Ordering::Relaxed)),
            "a value leaked"
        );
    });
}

/// A thread that loads `cell` inside a guard of `rc` and reads the payload of what it got,
/// which must not be freed, nor refilled or emptied, under it (the writer does either only
/// after a grace period that began once the value was out of the cell).
fn spawn_payload_reader(
    rc: &Arc<ReaderCount>,
    cell: &Arc<RcuCell<Tracked>>,
) -> thread::JoinHandle<()> {
    let (rc, cell) = (rc.clone(), cell.clone());
    thread::spawn(move || {
        use ftrace_core::platform::Reclaim;
        let _g = rc.pin();
        // SAFETY: inside a guard of the domain the writer swaps through.
        let v = unsafe { cell.load() }.expect("a value is always published");
        assert!(!v.freed[v.id].load(Ordering::Relaxed), "read a freed value");
        // SAFETY: only read here (see above).
        let p = v.payload.with(|p| unsafe { *p });
        assert_eq!(p, 100 + v.id, "saw a value changed under a reader");
    })
}

/// [`Retired::into_owned`](ftrace_core::reclaim::Retired::into_owned) under [`ReaderCount`]:
/// the writer swaps value 0 out for value 1 and takes 0 back to write into it again (as the
/// snapshot buffer's swap keeps the old main buffer) while a reader loads the cell inside a
/// guard. The reader never sees 0's payload change under it.
///
/// Fails (tried) with `into_owned` returning the box without its `synchronize` (loom reports
/// the writer's refill racing the reader's read of the payload).
#[test]
fn rcu_cell_swap_and_keep_under_a_reader() {
    builder().check(|| {
        let rc = Arc::new(ReaderCount::new());
        let freed = Arc::new([(); 3].map(|()| AtomicBool::new(false)));
        let cell = Arc::new(RcuCell::<Tracked>::empty());
        cell.replace(Published::Owned(Tracked::boxed(0, &freed)), &*rc);
        let reader = spawn_payload_reader(&rc, &cell);
        let kept = cell
            .swap(Published::Owned(Tracked::boxed(1, &freed)))
            .into_owned(&*rc)
            .expect("value 0 was owned");
        // SAFETY: `into_owned` returned: no reader reaches `kept`.
        kept.payload.with_mut(|p| unsafe { *p = 0 });
        reader.join().unwrap();
        assert!(!freed[0].load(Ordering::Relaxed), "a kept value was freed");
        drop(kept);
    });
}

/// [`RcuCell::swap_retired`] under [`ReaderCount`], as a `snapshot` trigger swaps the main
/// and the snapshot buffer from a tracepoint that may not wait: value 1 (the snapshot) is
/// swapped in for value 0 (the main buffer), then a second trigger swaps 0 back in, keeping
/// 1 retired, neither waiting; a control path then takes 1 back (`into_owned`, after a grace
/// period) and empties it, swaps 2 in for 0 and empties 0 the same way. A reader loading the
/// cell at any point never sees a payload emptied under it, and nothing is freed while held.
///
/// Fails (tried): with `swap_retired` giving back the value it was handed instead of the one
/// it replaced (0 is then taken back and freed while still published, and freed again with
/// the cell: the model crashes), and with `into_owned` without its `synchronize` (loom
/// reports the emptying racing the reader's read: "Causality violation"). With the swap in
/// `swap_retired` `Relaxed` it passes: the value it republishes was made visible by the
/// release that first published it.
#[test]
fn rcu_cell_swap_retired_under_a_reader() {
    builder().check(|| {
        let rc = Arc::new(ReaderCount::new());
        let freed = Arc::new([(); 3].map(|()| AtomicBool::new(false)));
        let cell = Arc::new(RcuCell::<Tracked>::empty());
        cell.replace(Published::Owned(Tracked::boxed(0, &freed)), &*rc);
        let reader = spawn_payload_reader(&rc, &cell);
        // Two triggers: 1 in, then 0 back in; neither waits.
        let out0 = cell.swap(Published::Owned(Tracked::boxed(1, &freed)));
        let out1 = cell.swap_retired(out0);
        assert_eq!(out1.get().map(|v| v.id), Some(1));
        // The control path: 1 settled and emptied, then 2 in and 0 settled and emptied.
        let one = out1.into_owned(&*rc).expect("value 1 was owned");
        // SAFETY: `into_owned` returned: no reader reaches `one`.
        one.payload.with_mut(|p| unsafe { *p = 0 });
        let zero = cell
            .swap(Published::Owned(Tracked::boxed(2, &freed)))
            .into_owned(&*rc)
            .expect("value 0 was owned");
        // SAFETY: as above.
        zero.payload.with_mut(|p| unsafe { *p = 0 });
        reader.join().unwrap();
        assert!(
            !freed.iter().any(|f| f.load(Ordering::Relaxed)),
            "freed early"
        );
        drop((one, zero));
        drop(Arc::try_unwrap(cell).ok().expect("reader joined"));
        assert!(
            freed.iter().all(|f| f.load(Ordering::Relaxed)),
            "a value leaked"
        );
    });
}

/// Static keys: an `inc` that returns, fast path or slow, sees the call sites updated by the
/// 0 -> 1 transition (modelled as a relaxed flag the update sets). Fails when the count's
/// release store after the update (or the fast path's acquire) is weakened to relaxed.
#[test]
fn static_key_inc_returns_after_the_sites_are_enabled() {
    use ftrace_core::static_key::{Branch, StaticKey};
    loom::model(|| {
        let key = Arc::new(StaticKey::new());
        let sites = Arc::new(AtomicBool::new(false));
        let enable = |key: &StaticKey, sites: &AtomicBool| {
            key.inc(|b| {
                assert_eq!(b, Branch::Enable);
                sites.store(true, Ordering::Relaxed);
            });
            assert!(
                sites.load(Ordering::Relaxed),
                "on before its sites were enabled"
            );
        };
        let t = {
            let (key, sites) = (key.clone(), sites.clone());
            thread::spawn(move || enable(&key, &sites))
        };
        enable(&key, &sites);
        t.join().unwrap();
        assert_eq!(key.count(), 2);
        key.dec(|_| panic!("2 -> 1 updates nothing"));
        key.dec(|b| assert_eq!(b, Branch::Disable));
        assert!(!key.is_enabled());
    });
}

/// Tracepoints: a probe that runs sees the owner bound before the probe was connected (the
/// array it records into). Fails when `connect`'s release (or `deliver`'s acquire) on the
/// probe pointer is weakened to relaxed.
#[test]
fn tracepoint_probe_sees_its_owner() {
    use ftrace_core::format::TraceEventFormat;
    use ftrace_core::tracepoint::Tracepoint;
    static FORMAT: TraceEventFormat = TraceEventFormat {
        system: "demo",
        name: "demo",
        id: 900,
        fields: &[],
        print_fmt: "\"\"",
    };
    static OWNER: u8 = 7;
    fn probe(tp: &Tracepoint, _rec: &mut [u8]) {
        let owner = tp.owner();
        assert!(!owner.is_null(), "a probe ran before its owner was bound");
        // SAFETY: the only owner bound is `OWNER`.
        assert_eq!(unsafe { *owner.cast::<u8>() }, 7);
    }
    loom::model(|| {
        let tp = Arc::new(Tracepoint::new(&FORMAT));
        let t = {
            let tp = tp.clone();
            thread::spawn(move || {
                tp.set_owner(core::ptr::from_ref(&OWNER).cast()).unwrap();
                tp.connect(probe).unwrap();
            })
        };
        let mut rec = [0u8; 8];
        tp.deliver(&mut rec);
        t.join().unwrap();
        tp.deliver(&mut rec);
        tp.disconnect();
    });
}
