//! Shared test fixtures: a plain ops, a segment of sites of every form.
#![allow(dead_code)]

use std::collections::BTreeSet;

use ftrace_patch::sim::SimText;
use ftrace_patch::{DynFtrace, FixedTargets, OpsRecFlags, RecordOps, SiteForm, aarch64};

/// An ops with explicit filter and notrace sets (empty filter = all).
#[derive(Clone, Debug, Default)]
pub struct TestOps {
    pub addr: u64,
    pub flags: OpsRecFlags,
    pub filter: BTreeSet<u64>,
    pub notrace: BTreeSet<u64>,
    pub tramp: Option<u64>,
    pub direct: Option<u64>,
}

impl RecordOps for TestOps {
    fn flags(&self) -> OpsRecFlags {
        self.flags
    }
    fn admits(&self, ip: u64) -> bool {
        (self.filter.is_empty() || self.filter.contains(&ip)) && !self.notrace.contains(&ip)
    }
    fn trampoline(&self) -> Option<u64> {
        self.tramp
    }
    fn direct_call(&self, _ip: u64) -> Option<u64> {
        self.direct
    }
    fn ops_addr(&self) -> u64 {
        self.addr
    }
    fn func(&self) -> u64 {
        self.addr + 0x10
    }
}

pub const BASE: u64 = 0x40_0000;
pub const STRIDE: u64 = 0x40;
pub const TARGETS: FixedTargets = FixedTargets {
    caller: BASE - 0x1000,
    regs_caller: BASE - 0x2000,
    list_ops: 0x9000_0000,
    nop_ops: 0x9000_1000,
};

/// `n` initialised sites of `form`, one every STRIDE bytes from BASE + 0x10, in a text with
/// room before BASE for trampolines.
pub fn segment(form: SiteForm, n: usize) -> (SimText, Vec<DynFtrace>) {
    let mut text = SimText::new(BASE - 0x4000, 0x4000 + STRIDE as usize * n + 0x100);
    let mut recs = Vec::new();
    for i in 0..n as u64 {
        let f = BASE + i * STRIDE;
        let ip = match form {
            SiteForm::A64Entry => f + 4,
            SiteForm::A64CallOps => f + 12,
            _ => f + 0x10,
        };
        match form {
            SiteForm::A64Entry => {
                text.poke(ip - 4, &aarch64::to_bytes(aarch64::MOV_X9_X30));
            }
            SiteForm::A64CallOps => {
                text.poke(
                    aarch64::call_ops_literal(ip),
                    &TARGETS.nop_ops.to_le_bytes(),
                );
                text.poke(ip - 4, &aarch64::to_bytes(aarch64::MOV_X9_X30));
            }
            _ => {}
        }
        text.poke(ip, &form.nop());
        recs.push(DynFtrace::new(ip, form));
    }
    (text, recs)
}

pub const ALL_FORMS: [SiteForm; 5] = [
    SiteForm::X86Nop5,
    SiteForm::X86Nop5Disp8,
    SiteForm::X86Nop1x5,
    SiteForm::A64Entry,
    SiteForm::A64CallOps,
];
