//! The record state machine against a reference model: random sequences of ops registration,
//! unregistration, filter and notrace changes, update passes (enable / disable calls) with
//! random protocols, and deliberate corruption of sites. After every step the records' counts
//! and flags, and after every update pass the bytes of every site, must equal what the model
//! computes from scratch.

#![allow(clippy::needless_range_loop)]

mod common;

use std::collections::BTreeSet;

use common::{TARGETS, TestOps, segment};
use ftrace_core::Errno;
use ftrace_patch::{
    DynFtrace, OpsRecFlags, PokeSite, Protocol, RecFlags, RecordOps, RecordTable, SiteForm,
    UpdatePass, aarch64, sim::SimText,
};
use proptest::prelude::*;

const NREC: usize = 6;
const SLOTS: usize = 4;

#[derive(Clone, Debug)]
enum Action {
    Register {
        slot: usize,
        flags: OpsRecFlags,
        tramp: bool,
        filter: Vec<usize>,
        notrace: Vec<usize>,
    },
    Unregister(usize),
    SetFilter(usize, Vec<usize>),
    SetNotrace(usize, Vec<usize>),
    Update {
        enable: bool,
        protocol: Protocol,
    },
    Corrupt(usize),
    /// module text going away (`true`: DISABLED) or coming back (`ftrace_module_enable`)
    Module(usize, bool),
}

fn action() -> impl Strategy<Value = Action> {
    let set = || proptest::collection::vec(0..NREC, 0..3);
    prop_oneof![
        3 => (0..SLOTS, 0u32..16, any::<bool>(), set(), set()).prop_map(
            |(slot, bits, tramp, filter, notrace)| {
                let mut flags = OpsRecFlags::empty();
                flags.set(OpsRecFlags::SAVE_REGS, bits & 1 != 0);
                flags.set(OpsRecFlags::IPMODIFY, bits & 2 != 0 && bits & 8 != 0);
                flags.set(OpsRecFlags::DIRECT, bits & 4 != 0 && bits & 8 != 0);
                flags.set(OpsRecFlags::CALL_OPS_OK, bits & 8 == 0);
                Action::Register { slot, flags, tramp, filter, notrace }
            }
        ),
        2 => (0..SLOTS).prop_map(Action::Unregister),
        2 => (0..SLOTS, set()).prop_map(|(s, f)| Action::SetFilter(s, f)),
        1 => (0..SLOTS, set()).prop_map(|(s, f)| Action::SetNotrace(s, f)),
        3 => (any::<bool>(), 0u8..4).prop_map(|(enable, p)| Action::Update {
            enable: enable || p == 0,
            protocol: [Protocol::Auto, Protocol::Breakpoint, Protocol::StopMachine, Protocol::Atomic]
                [p as usize],
        }),
        1 => (0..NREC).prop_map(Action::Corrupt),
        1 => (0..NREC, any::<bool>()).prop_map(|(r, off)| Action::Module(r, off)),
    ]
}

fn forms() -> impl Strategy<Value = Vec<SiteForm>> {
    prop_oneof![
        proptest::collection::vec(
            prop_oneof![
                Just(SiteForm::X86Nop5),
                Just(SiteForm::X86Nop5Disp8),
                Just(SiteForm::X86Nop1x5)
            ],
            NREC
        ),
        proptest::collection::vec(
            prop_oneof![Just(SiteForm::A64Entry), Just(SiteForm::A64CallOps)],
            NREC
        ),
    ]
}

/// The reference model: everything recomputed from the registered ops.
struct Model {
    ips: Vec<u64>,
    forms: Vec<SiteForm>,
    /// slots in registration order (the ops list order)
    order: Vec<usize>,
    ops: [Option<TestOps>; SLOTS],
    failed: [bool; NREC],
    /// module records switched off
    off: [bool; NREC],
    corrupted: [Option<Vec<u8>>; NREC],
    touched: [bool; NREC],
    /// what each site calls (None = NOP)
    installed: [Option<u64>; NREC],
    /// the code-state flags (REGS_EN, TRAMP_EN, DIRECT_EN, CALL_OPS_EN) as of the last pass
    en: [[bool; 4]; NREC],
}

impl Model {
    /// The `_EN` flags a site enabled now would get.
    fn en_for(&self, r: usize) -> [bool; 4] {
        let u = self.users(r);
        let single = (u.len() == 1).then(|| u[0]);
        [
            u.iter().any(|o| o.flags.contains(OpsRecFlags::SAVE_REGS)),
            single.is_some_and(|o| o.tramp.is_some()),
            single.is_some_and(|o| o.flags.contains(OpsRecFlags::DIRECT)),
            self.forms[r].has_call_ops()
                && single.is_some_and(|o| o.flags.contains(OpsRecFlags::CALL_OPS_OK)),
        ]
    }
    fn list(&self) -> Vec<&TestOps> {
        self.order
            .iter()
            .map(|&s| self.ops[s].as_ref().unwrap())
            .collect()
    }
    fn users(&self, r: usize) -> Vec<&TestOps> {
        self.list()
            .into_iter()
            .filter(|o| o.admits(self.ips[r]))
            .collect()
    }
    /// the call target the record wants when calls are enabled
    fn target(&self, r: usize) -> Option<u64> {
        let u = self.users(r);
        if u.is_empty() {
            return None;
        }
        let ip = self.ips[r];
        let form = self.forms[r];
        let regs = u.iter().any(|o| o.flags.contains(OpsRecFlags::SAVE_REGS));
        let common = if regs {
            TARGETS.regs_caller
        } else {
            TARGETS.caller
        };
        if u.len() == 1 {
            let o = u[0];
            let special = if o.flags.contains(OpsRecFlags::DIRECT) {
                o.direct.or(o.tramp)
            } else {
                o.tramp
            };
            if let Some(t) = special {
                if form.call(ip, t).is_ok() {
                    return Some(t);
                }
            }
        }
        Some(common)
    }
    fn literal(&self, r: usize, enabled: bool) -> u64 {
        if !enabled {
            return TARGETS.nop_ops;
        }
        let u = self.users(r);
        if u.len() == 1 && u[0].flags.contains(OpsRecFlags::CALL_OPS_OK) {
            u[0].addr
        } else {
            TARGETS.list_ops
        }
    }
    /// IPMODIFY conflict if `new` (replacing `old` view of the same slot) is enabled
    fn conflict(&self, slot: usize, old: Option<&TestOps>, new: &TestOps) -> bool {
        self.conflict_on(slot, old, new, OpsRecFlags::IPMODIFY)
            || self.conflict_on(slot, old, new, OpsRecFlags::DIRECT)
    }
    fn conflict_on(
        &self,
        slot: usize,
        old: Option<&TestOps>,
        new: &TestOps,
        flag: OpsRecFlags,
    ) -> bool {
        if !new.flags.contains(flag) {
            return false;
        }
        (0..NREC).any(|r| {
            let ip = self.ips[r];
            !self.failed[r]
                && !self.off[r]
                && new.admits(ip)
                && !old.is_some_and(|o| o.admits(ip))
                && self.order.iter().any(|&s| {
                    s != slot
                        && self.ops[s]
                            .as_ref()
                            .is_some_and(|o| o.flags.contains(flag) && o.admits(ip))
                })
        })
    }
}

fn check_flags(m: &Model, table: &RecordTable<Vec<DynFtrace>>) -> Result<(), TestCaseError> {
    for r in 0..NREC {
        let rec = table.records()[r];
        let f = rec.flags;
        prop_assert_eq!(
            f.contains(RecFlags::DISABLED),
            m.failed[r] || m.off[r],
            "record {}",
            r
        );
        if m.failed[r] || m.off[r] {
            continue;
        }
        let u = m.users(r);
        prop_assert_eq!(f.count() as usize, u.len(), "count of {}: {:?}", r, f);
        let single = (u.len() == 1).then(|| u[0]);
        prop_assert_eq!(
            f.contains(RecFlags::REGS),
            u.iter().any(|o| o.flags.contains(OpsRecFlags::SAVE_REGS)),
            "REGS of {}: {:?}",
            r,
            f
        );
        prop_assert_eq!(
            f.contains(RecFlags::TRAMP),
            single.is_some_and(|o| o.tramp.is_some()),
            "TRAMP of {}: {:?}",
            r,
            f
        );
        prop_assert_eq!(
            f.contains(RecFlags::CALL_OPS),
            m.forms[r].has_call_ops()
                && single.is_some_and(|o| o.flags.contains(OpsRecFlags::CALL_OPS_OK)),
            "CALL_OPS of {}: {:?}",
            r,
            f
        );
        prop_assert_eq!(
            f.contains(RecFlags::IPMODIFY),
            u.iter().any(|o| o.flags.contains(OpsRecFlags::IPMODIFY)),
            "IPMODIFY of {}: {:?}",
            r,
            f
        );
        prop_assert_eq!(
            f.contains(RecFlags::DIRECT),
            u.iter().any(|o| o.flags.contains(OpsRecFlags::DIRECT)),
            "DIRECT of {}: {:?}",
            r,
            f
        );
        prop_assert_eq!(f.contains(RecFlags::ENABLED), m.installed[r].is_some());
        prop_assert_eq!(f.contains(RecFlags::TOUCHED), m.touched[r]);
        let en = [
            f.contains(RecFlags::REGS_EN),
            f.contains(RecFlags::TRAMP_EN),
            f.contains(RecFlags::DIRECT_EN),
            f.contains(RecFlags::CALL_OPS_EN),
        ];
        prop_assert_eq!(en, m.en[r], "_EN flags of {}: {:?}", r, f);
        prop_assert_eq!(rec.current_target(), m.installed[r]);
    }
    Ok(())
}

fn check_bytes(m: &Model, text: &SimText) -> Result<(), TestCaseError> {
    for r in 0..NREC {
        let (ip, form) = (m.ips[r], m.forms[r]);
        let now = text.bytes(ip, form.window_len());
        if let Some(c) = &m.corrupted[r] {
            // corrupted bytes are never overwritten
            prop_assert_eq!(now, &c[..], "corrupted site {} was written", r);
            continue;
        }
        if m.failed[r] {
            continue;
        }
        let want = match m.installed[r] {
            Some(t) => form.call(ip, t).unwrap(),
            None => form.nop(),
        };
        prop_assert_eq!(now, &*want, "bytes of record {}", r);
        if form.has_call_ops() {
            let lit = text.bytes(aarch64::call_ops_literal(ip), 8);
            let want = m.literal(r, m.installed[r].is_some());
            prop_assert_eq!(
                u64::from_le_bytes(lit.try_into().unwrap()),
                want,
                "literal of {}",
                r
            );
        }
    }
    Ok(())
}

/// The bytes of each site (window and literal) in `text`.
fn site_bytes(table: &RecordTable<Vec<DynFtrace>>, text: &SimText) -> Vec<Vec<u8>> {
    table
        .records()
        .iter()
        .map(|r| {
            let mut out = text.bytes(r.ip, r.form().window_len()).to_vec();
            if r.form().has_call_ops() {
                out.extend_from_slice(text.bytes(aarch64::call_ops_literal(r.ip), 8));
            }
            out
        })
        .collect()
}

/// The site bytes an enabling pass would produce now (on copies).
fn dry_run(
    table: &RecordTable<Vec<DynFtrace>>,
    text: &SimText,
    ops: &[&dyn RecordOps],
) -> Vec<Vec<u8>> {
    let mut t = RecordTable::new(table.records().to_vec()).unwrap();
    let mut text = text.clone();
    let pass = UpdatePass {
        targets: &TARGETS,
        ops,
        enable: true,
        protocol: Protocol::StopMachine,
    };
    t.replace_code_all(&mut text, &pass, &mut |_| {});
    site_bytes(&t, &text)
}

fn run(forms: Vec<SiteForm>, actions: Vec<Action>) -> Result<(), TestCaseError> {
    // one segment per form: build the text by hand so each record has its own form
    let arch = forms[0].arch();
    let (mut text, _) = segment(forms[0], NREC);
    let mut recs = Vec::new();
    for (i, &form) in forms.iter().enumerate() {
        let (t1, r1) = segment(form, NREC);
        let ip = r1[i].ip;
        let start = if form.has_call_ops() {
            aarch64::call_ops_literal(ip)
        } else {
            ip - 4
        };
        text.poke(
            start,
            t1.bytes(start, (ip - start) as usize + form.window_len()),
        );
        recs.push(r1[i]);
    }
    let mut table = RecordTable::new(recs).unwrap();
    let ips: Vec<u64> = table.records().iter().map(|r| r.ip).collect();
    let mut m = Model {
        ips: ips.clone(),
        forms: forms.clone(),
        order: Vec::new(),
        ops: Default::default(),
        failed: [false; NREC],
        off: [false; NREC],
        corrupted: Default::default(),
        touched: [false; NREC],
        installed: [None; NREC],
        en: [[false; 4]; NREC],
    };
    let set = |v: &[usize]| -> BTreeSet<u64> { v.iter().map(|&i| ips[i]).collect() };
    for a in actions {
        // what an enabling pass would do before this action
        let before = {
            let list = m.list();
            let dl: Vec<&dyn RecordOps> = list.iter().map(|o| *o as &dyn RecordOps).collect();
            dry_run(&table, &text, &dl)
        };
        let mut said_no_change = false;
        match a {
            Action::Register {
                slot,
                flags,
                tramp,
                filter,
                notrace,
            } => {
                if m.ops[slot].is_some() {
                    continue;
                }
                let near = ips[0] - 0x3000 + slot as u64 * 0x100;
                let op = TestOps {
                    addr: 0x9100_0000 + slot as u64 * 0x100,
                    flags,
                    filter: set(&filter),
                    notrace: set(&notrace),
                    // a far trampoline (out of reach on aarch64 for odd slots) tests the fallback
                    tramp: tramp.then_some(if slot % 2 == 1 {
                        near + (1 << 30)
                    } else {
                        near
                    }),
                    direct: flags.contains(OpsRecFlags::DIRECT).then_some(near + 0x80),
                };
                let conflict = m.conflict(slot, None, &op);
                m.ops[slot] = Some(op);
                m.order.push(slot);
                let list = m.list();
                let dl: Vec<&dyn RecordOps> = list.iter().map(|o| *o as &dyn RecordOps).collect();
                let op = m.ops[slot].as_ref().unwrap();
                let r = table.ops_enable(op, &dl);
                said_no_change = r == Ok(false);
                if conflict {
                    prop_assert_eq!(r, Err(Errno::EBUSY));
                    m.ops[slot] = None;
                    m.order.pop();
                } else {
                    prop_assert!(r.is_ok());
                }
            }
            Action::Unregister(slot) => {
                let Some(op) = m.ops[slot].take() else {
                    continue;
                };
                m.order.retain(|&s| s != slot);
                let list = m.list();
                let dl: Vec<&dyn RecordOps> = list.iter().map(|o| *o as &dyn RecordOps).collect();
                said_no_change = !table.ops_disable(&op, &dl);
            }
            Action::SetFilter(slot, ref v) | Action::SetNotrace(slot, ref v) => {
                let Some(old) = m.ops[slot].clone() else {
                    continue;
                };
                let mut new = old.clone();
                if matches!(a, Action::SetFilter(..)) {
                    new.filter = set(v);
                } else {
                    new.notrace = set(v);
                }
                let conflict = m.conflict(slot, Some(&old), &new);
                m.ops[slot] = Some(new);
                let list = m.list();
                let dl: Vec<&dyn RecordOps> = list.iter().map(|o| *o as &dyn RecordOps).collect();
                let r = table.ops_modify(&old, m.ops[slot].as_ref().unwrap(), &dl);
                said_no_change = r == Ok(false);
                if conflict {
                    prop_assert_eq!(r, Err(Errno::EBUSY));
                    m.ops[slot] = Some(old);
                } else {
                    prop_assert!(r.is_ok());
                }
            }
            Action::Module(r, off) => {
                let list = m.list();
                let dl: Vec<&dyn RecordOps> = list.iter().map(|o| *o as &dyn RecordOps).collect();
                if off && !m.off[r] && !m.failed[r] && m.installed[r].is_none() {
                    table.set_disabled(r, true, &dl);
                    m.off[r] = true;
                } else if !off && m.off[r] {
                    table.set_disabled(r, false, &dl);
                    m.off[r] = false;
                }
            }
            Action::Corrupt(r) => {
                if m.failed[r] || m.corrupted[r].is_some() {
                    continue;
                }
                let junk: Vec<u8> = (0..m.forms[r].window_len())
                    .map(|i| 0x0b + i as u8)
                    .collect();
                text.poke(ips[r], &junk);
                m.corrupted[r] = Some(junk);
            }
            Action::Update { enable, protocol } => {
                let protocol = match (protocol, arch) {
                    (Protocol::Atomic, ftrace_patch::Arch::X86_64) => Protocol::Auto,
                    (p, _) => p,
                };
                let list = m.list();
                let dl: Vec<&dyn RecordOps> = list.iter().map(|o| *o as &dyn RecordOps).collect();
                let mut bugs = Vec::new();
                let mut scratch: Vec<PokeSite> = (0..3).map(|_| PokeSite::empty()).collect();
                let pass = UpdatePass {
                    targets: &TARGETS,
                    ops: &dl,
                    enable,
                    protocol,
                };
                table.replace_code(&mut text, &pass, &mut scratch, &mut |b| bugs.push(*b));
                // expected outcome per record
                let mut expect_bugs = BTreeSet::new();
                for r in 0..NREC {
                    if m.failed[r] || m.off[r] {
                        continue;
                    }
                    let want = if enable { m.target(r) } else { None };
                    let code_changes = want != m.installed[r];
                    if !code_changes {
                        // flags-only changes (e.g. a CALL_OPS literal) still count as touched
                        if want.is_some() {
                            m.touched[r] = true;
                        }
                        m.en[r] = if want.is_some() {
                            m.en_for(r)
                        } else {
                            [false; 4]
                        };
                        continue;
                    }
                    let refused = (protocol == Protocol::Breakpoint
                        && m.forms[r] == SiteForm::X86Nop1x5
                        && m.installed[r].is_none())
                        || m.corrupted[r].is_some();
                    if refused {
                        expect_bugs.insert(ips[r]);
                        m.failed[r] = true;
                        m.installed[r] = None;
                        continue;
                    }
                    m.installed[r] = want;
                    if want.is_some() {
                        m.touched[r] = true;
                    }
                    m.en[r] = if want.is_some() {
                        m.en_for(r)
                    } else {
                        [false; 4]
                    };
                }
                let got: BTreeSet<u64> = bugs.iter().map(|b| b.ip).collect();
                prop_assert_eq!(got, expect_bugs, "bugs: {:?}", bugs);
                check_bytes(&m, &text)?;
            }
        }
        check_flags(&m, &table)?;
        if said_no_change {
            // "no rewrite needed" means the change created no new work: a site a pass would
            // have left alone before is still left alone
            let list = m.list();
            let dl: Vec<&dyn RecordOps> = list.iter().map(|o| *o as &dyn RecordOps).collect();
            let after = dry_run(&table, &text, &dl);
            let now = site_bytes(&table, &text);
            for i in 0..NREC {
                if before[i] == now[i] {
                    prop_assert_eq!(
                        &after[i],
                        &now[i],
                        "record {} needs a rewrite nobody announced",
                        i
                    );
                }
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 10_000,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn records_follow_the_reference_model(
        forms in forms(),
        actions in proptest::collection::vec(action(), 1..24),
    ) {
        run(forms, actions)?;
    }
}
