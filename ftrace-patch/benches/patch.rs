//! Patching 20 000 call sites in a simulated text segment, per protocol (platform costs — sync,
//! stop — are counters here, so the figures are the engine's own cost). Throughput is in sites:
//! ns per site = time / 20 000.
//!
//! Each benchmark is measured twice: wall time (criterion's default) and the benchmark thread's
//! CPU time (`CLOCK_THREAD_CPUTIME_ID`, the `_cpu` variants), which stays meaningful on a shared,
//! overloaded machine where wall time mostly measures waiting for a core.

use criterion::{Criterion, Throughput, criterion_main};
use ftrace_patch::sim::SimText;
use ftrace_patch::{
    DynFtrace, FixedTargets, OpsRecFlags, PokeSite, Protocol, RecordOps, RecordTable, SiteForm,
    UpdatePass, aarch64,
};
use std::hint::black_box;
use std::time::Duration;

fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant the kernel knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0);
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

const SITES: usize = 20_000;
const STRIDE: u64 = 0x40;
const BASE: u64 = 0x40_0000;
const TARGETS: FixedTargets = FixedTargets {
    caller: BASE - 0x1000,
    regs_caller: BASE - 0x2000,
    list_ops: 0x9000_0000,
    nop_ops: 0x9000_1000,
};

struct AllOps;
impl RecordOps for AllOps {
    fn flags(&self) -> OpsRecFlags {
        OpsRecFlags::empty()
    }
    fn admits(&self, _ip: u64) -> bool {
        true
    }
    fn ops_addr(&self) -> u64 {
        0x9000_2000
    }
}

fn segment(form: SiteForm) -> (SimText, RecordTable<Vec<DynFtrace>>) {
    let mut text = SimText::new(BASE - 0x4000, 0x4000 + STRIDE as usize * SITES);
    let mut recs = Vec::with_capacity(SITES);
    for i in 0..SITES as u64 {
        let ip = BASE + i * STRIDE + 0x10;
        if form.arch() == ftrace_patch::Arch::Aarch64 {
            text.poke(ip - 4, &aarch64::to_bytes(aarch64::MOV_X9_X30));
        }
        text.poke(ip, &form.nop());
        recs.push(DynFtrace::new(ip, form));
    }
    (text, RecordTable::new(recs).unwrap())
}

fn toggle(c: &mut Criterion, name: &str, form: SiteForm, protocol: Protocol) {
    let (mut text, mut table) = segment(form);
    let ops: [&dyn RecordOps; 1] = [&AllOps];
    table.ops_enable(&AllOps, &ops).unwrap();
    // a caller-provided batch of 256 sites, the kernel's TEXT_POKE_ARRAY_MAX
    let mut scratch: Vec<PokeSite> = (0..256).map(|_| PokeSite::empty()).collect();
    let mut enable = false;
    let mut g = c.benchmark_group("replace_code_20000_sites");
    g.throughput(Throughput::Elements(SITES as u64));
    let mut one_pass = move || {
        enable = !enable;
        let pass = UpdatePass {
            targets: &TARGETS,
            ops: &ops,
            enable,
            protocol,
        };
        let st = table.replace_code(&mut text, &pass, &mut scratch, &mut |bug| panic!("{bug}"));
        assert_eq!(st.updated, SITES);
        black_box(st);
    };
    g.bench_function(name, |b| b.iter(&mut one_pass));
    g.bench_function(format!("{name}_cpu"), |b| {
        b.iter_custom(|iters| {
            let start = thread_cpu_time();
            for _ in 0..iters {
                one_pass();
            }
            thread_cpu_time() - start
        })
    });
    g.finish();
}

fn accounting(c: &mut Criterion) {
    let (_, mut table) = segment(SiteForm::X86Nop5);
    let ops: [&dyn RecordOps; 1] = [&AllOps];
    let mut g = c.benchmark_group("ops_enable_disable_20000_records");
    g.throughput(Throughput::Elements(SITES as u64));
    g.bench_function("hash_rec_update", |b| {
        b.iter(|| {
            table.ops_enable(&AllOps, &ops).unwrap();
            black_box(table.ops_disable(&AllOps, &[]))
        })
    });
    g.finish();
}

fn benches(c: &mut Criterion) {
    toggle(
        c,
        "breakpoint_x86_nop5",
        SiteForm::X86Nop5,
        Protocol::Breakpoint,
    );
    toggle(
        c,
        "stop_machine_x86_nop1x5",
        SiteForm::X86Nop1x5,
        Protocol::StopMachine,
    );
    toggle(c, "atomic_a64", SiteForm::A64Entry, Protocol::Atomic);
    accounting(c);
}

#[allow(missing_docs)]
mod group {
    criterion::criterion_group!(patch, super::benches);
}
use group::patch;
criterion_main!(patch);
