//! The executor model over every protocol and every site form: no CPU ever fetches a torn
//! instruction, and the negative controls (no protocol, a missing sync, the breakpoint protocol
//! on five `90`) are caught.

mod common;

use common::{ALL_FORMS, TARGETS, TestOps, segment};
use ftrace_patch::sim::ExecutorModel;
use ftrace_patch::{
    Arch, DynFtrace, FtraceBug, InitKind, OpsRecFlags, PokeSite, Protocol, RecordOps, RecordTable,
    SiteForm, TextPoke, UpdatePass, init_records, x86,
};

const N: usize = 6;

/// Runs enable -> switch to regs trampoline -> disable on N sites of `form` with `protocol`,
/// checking every intermediate state. Returns (bugs, model).
fn run(form: SiteForm, protocol: Protocol) -> (Vec<FtraceBug>, ExecutorModel) {
    let (text, recs) = segment(form, N);
    let mut model = ExecutorModel::new(text, form.arch());
    let mut table = RecordTable::new(recs).unwrap();
    let mut bugs = Vec::new();
    let plain = TestOps {
        addr: 0x9000_2000,
        flags: OpsRecFlags::CALL_OPS_OK,
        ..Default::default()
    };
    let regs = TestOps {
        addr: 0x9000_3000,
        flags: OpsRecFlags::SAVE_REGS,
        ..Default::default()
    };
    let steps: [(&str, Vec<&dyn RecordOps>, bool); 4] = [
        ("enable", vec![&plain], true),
        ("regs", vec![&plain, &regs], true),
        ("unregs", vec![&plain], true),
        ("disable", vec![], true),
    ];
    let mut prev: Vec<&dyn RecordOps> = Vec::new();
    for (what, ops, enable) in steps {
        // reference counts: drop what left, add what came
        for o in &prev {
            if !ops.iter().any(|n| std::ptr::addr_eq(*n, *o)) {
                let rest: Vec<&dyn RecordOps> = ops.clone();
                table.ops_disable(*o, &rest);
            }
        }
        for o in &ops {
            if !prev.iter().any(|p| std::ptr::addr_eq(*p, *o)) {
                table.ops_enable(*o, &ops).unwrap();
            }
        }
        prev = ops.clone();
        // expectations, computed here from first principles
        model.clear_expectations();
        let mut failed = Vec::new();
        for r in table.records() {
            if r.flags.contains(ftrace_patch::RecFlags::DISABLED) {
                continue;
            }
            let old = model.text.bytes(r.ip, form.window_len()).to_vec();
            let want = if ops.is_empty() {
                form.nop()
            } else {
                let regs_wanted = ops
                    .iter()
                    .any(|o| o.flags().contains(OpsRecFlags::SAVE_REGS));
                let t = if regs_wanted {
                    TARGETS.regs_caller
                } else {
                    TARGETS.caller
                };
                form.call(r.ip, t).unwrap()
            };
            if old != *want {
                model.expect(r.ip, &old, &want);
                failed.push(r.ip);
            }
        }
        let mut scratch: Vec<PokeSite> = (0..2 * N).map(|_| PokeSite::empty()).collect();
        let pass = UpdatePass {
            targets: &TARGETS,
            ops: &ops,
            enable,
            protocol,
        };
        table.replace_code(&mut model, &pass, &mut scratch, &mut |b| bugs.push(*b));
        // a site that failed must be untouched
        let bad: Vec<u64> = bugs.iter().map(|b| b.ip).collect();
        failed.retain(|ip| bad.contains(ip));
        model.check_final(&failed);
        assert!(
            model.violations.is_empty(),
            "{form:?} {protocol:?} {what}: {:#?}",
            model.violations
        );
    }
    (bugs, model)
}

#[test]
fn auto_protocol_never_tears_any_form() {
    for form in ALL_FORMS {
        let (bugs, model) = run(form, Protocol::Auto);
        assert!(bugs.is_empty(), "{form:?}: {bugs:?}");
        assert!(model.observed.states > 0 && model.observed.old > 0);
        match form {
            SiteForm::X86Nop1x5 => {
                // enabling stops the machine (threads parked inside the NOPs are moved);
                // disabling a `call` is one instruction, so it uses breakpoints
                assert!(model.text.stops >= 1);
                assert!(model.observed.fixups > 0);
                assert!(model.observed.breakpoints > 0);
            }
            SiteForm::X86Nop5 | SiteForm::X86Nop5Disp8 => {
                assert_eq!(model.text.stops, 0);
                assert!(model.observed.breakpoints > 0 && model.observed.new > 0);
            }
            SiteForm::A64Entry | SiteForm::A64CallOps => {
                assert_eq!(model.text.stops, 0);
                assert_eq!(model.observed.breakpoints, 0);
                assert!(model.observed.new > 0);
            }
        }
    }
}

#[test]
fn breakpoint_protocol_on_every_single_insn_form_and_refusal_on_five_nops() {
    for form in ALL_FORMS {
        let (bugs, model) = run(form, Protocol::Breakpoint);
        if form == SiteForm::X86Nop1x5 {
            // enabling five 90s with breakpoints would tear: every site refused, untouched
            assert_eq!(bugs.len(), N, "{bugs:?}");
            assert_eq!(model.observed.breakpoints, 0);
        } else {
            assert!(bugs.is_empty(), "{form:?}: {bugs:?}");
            assert!(model.observed.breakpoints > 0, "{form:?}");
        }
    }
}

#[test]
fn stop_machine_on_every_form() {
    for form in ALL_FORMS {
        let (bugs, model) = run(form, Protocol::StopMachine);
        assert!(bugs.is_empty(), "{form:?}: {bugs:?}");
        assert_eq!(model.text.stops, 4, "{form:?}: one stop per batch");
        assert_eq!(model.observed.breakpoints, 0);
        if form == SiteForm::X86Nop1x5 {
            assert!(model.observed.fixups > 0);
        }
    }
}

#[test]
fn atomic_protocol_is_aarch64_only() {
    for form in [SiteForm::A64Entry, SiteForm::A64CallOps] {
        let (bugs, _) = run(form, Protocol::Atomic);
        assert!(bugs.is_empty());
    }
    let (bugs, _) = run(SiteForm::X86Nop5, Protocol::Atomic);
    assert_eq!(bugs.len(), N);
}

#[test]
fn init_of_every_x86_form_never_tears() {
    // one site of each recorded form, gcc PIE calls included
    let forms: [&[u8]; 7] = [
        &x86::NOP5,
        &x86::NOP5_DISP8,
        &x86::NOP6,
        &x86::NOP1X5,
        &[0xe8, 0x10, 0x20, 0x00, 0x00],
        &[0xff, 0x15, 0x10, 0x20, 0x00, 0x00],
        &[0x67, 0xe8, 0x10, 0x20, 0x00, 0x00],
    ];
    let (mut text, _) = segment(SiteForm::X86Nop5, 0);
    text = ftrace_patch::sim::SimText::new(text.base(), 0x8000);
    let base = text.base() + 0x100;
    let mut model = ExecutorModel::new(text, Arch::X86_64);
    let mut entries = Vec::new();
    for (i, b) in forms.iter().enumerate() {
        let a = base + 0x40 * i as u64;
        model.text.poke(a, b);
        model.text.poke(a + b.len() as u64, &[0xc3]); // ret
        entries.push(a);
        if b.len() == 6 {
            model.expect(a, b, &[0x0f, 0x1f, 0x44, 0x00, 0x00, 0x90]);
        } else if b[0] == 0xe8 {
            model.expect(a, b, &x86::NOP5);
        }
    }
    let mut out = vec![DynFtrace::default(); entries.len()];
    let mut scratch: Vec<PokeSite> = (0..4).map(|_| PokeSite::empty()).collect();
    let mut bugs = Vec::new();
    let (n, st) = init_records(
        &mut model,
        InitKind::X86,
        &mut entries,
        &mut out,
        Protocol::Auto,
        &mut scratch,
        &mut |b| bugs.push(*b),
    );
    assert_eq!((n, st.failed), (7, 0), "{bugs:?}");
    model.check_final(&[]);
    assert!(model.violations.is_empty(), "{:#?}", model.violations);
    assert!(model.observed.breakpoints > 0);
    let forms: Vec<SiteForm> = out.iter().map(|r| r.form()).collect();
    assert_eq!(
        forms,
        [
            SiteForm::X86Nop5,
            SiteForm::X86Nop5Disp8,
            SiteForm::X86Nop5,
            SiteForm::X86Nop1x5,
            SiteForm::X86Nop5,
            SiteForm::X86Nop5,
            SiteForm::X86Nop5
        ]
    );
    // and the table built from them patches cleanly
    let mut table = RecordTable::new(out).unwrap();
    let op = TestOps {
        addr: 1,
        ..Default::default()
    };
    let ops: [&dyn RecordOps; 1] = [&op];
    table.ops_enable(&op, &ops).unwrap();
    model.clear_expectations();
    let pass = UpdatePass {
        targets: &TARGETS,
        ops: &ops,
        enable: true,
        protocol: Protocol::Auto,
    };
    let st = table.replace_code_all(&mut model, &pass, &mut |b| panic!("{b}"));
    assert_eq!(st.updated, 7);
    assert!(model.violations.is_empty());
}

// ---- negative controls: the model does catch unsafe patching ----

fn one_site(form: SiteForm) -> (ExecutorModel, u64, Vec<u8>, Vec<u8>) {
    let (text, recs) = segment(form, 1);
    let ip = recs[0].ip;
    let mut model = ExecutorModel::new(text, form.arch());
    let old = form.nop().to_vec();
    let new = form.call(ip, TARGETS.caller).unwrap().to_vec();
    model.expect(ip, &old, &new);
    (model, ip, old, new)
}

#[test]
fn model_catches_a_plain_multi_byte_store() {
    let (mut m, ip, _, new) = one_site(SiteForm::X86Nop5);
    m.write_text(ip, &new).unwrap();
    assert!(!m.violations.is_empty());
    assert!(m.violations[0].contains("torn"), "{}", m.violations[0]);
}

#[test]
fn model_catches_a_missing_sync_between_head_and_tail() {
    let (mut m, ip, _, new) = one_site(SiteForm::X86Nop5);
    m.write_text(ip, &[x86::INT3]).unwrap();
    // no sync here: a CPU may still see the old head with the new tail
    m.write_text(ip + 1, &new[1..]).unwrap();
    assert!(
        m.violations.iter().any(|v| v.contains("torn")),
        "{:?}",
        m.violations
    );
}

#[test]
fn model_catches_breakpoints_on_five_nops() {
    let (mut m, ip, _, new) = one_site(SiteForm::X86Nop1x5);
    m.write_text(ip, &[x86::INT3]).unwrap();
    m.sync_cores();
    m.write_text(ip + 1, &new[1..]).unwrap();
    m.sync_cores();
    // a thread that was inside the NOP sled now fetches the middle of the call
    assert!(
        m.violations.iter().any(|v| v.contains("at +1")),
        "{:?}",
        m.violations
    );
}

#[test]
fn model_catches_a_breakpoint_nobody_resolves() {
    let (mut m, ip, _, _) = one_site(SiteForm::X86Nop5);
    m.write_text(ip, &[x86::INT3]).unwrap();
    assert!(
        m.violations
            .iter()
            .any(|v| v.contains("breakpoint resolved as None"))
    );
}

#[test]
fn a64_word_store_is_atomic_in_the_model() {
    let (mut m, ip, _, new) = one_site(SiteForm::A64Entry);
    m.write_text(ip, &new).unwrap();
    m.sync_cores();
    assert!(m.violations.is_empty(), "{:?}", m.violations);
    // but half a word is not
    let (mut m, ip, _, new) = one_site(SiteForm::A64Entry);
    m.write_text(ip, &new[..2]).unwrap();
    m.sync_cores();
    assert!(!m.violations.is_empty());
}

// ---- random sequences under the model ----

use proptest::prelude::*;

#[derive(Clone, Copy, Debug)]
enum Want {
    Nop,
    Plain,
    Regs,
    Tramp,
}

fn ops_for(w: Want) -> Option<TestOps> {
    let mut o = TestOps {
        addr: 0x9000_4000,
        flags: OpsRecFlags::CALL_OPS_OK,
        ..Default::default()
    };
    match w {
        Want::Nop => return None,
        Want::Plain => {}
        Want::Regs => o.flags |= OpsRecFlags::SAVE_REGS,
        Want::Tramp => o.tramp = Some(TARGETS.caller - 0x400),
    }
    Some(o)
}

fn random_run(form: SiteForm, n: usize, steps: Vec<(Want, u8)>) -> Result<(), TestCaseError> {
    let (text, recs) = segment(form, n);
    let mut model = ExecutorModel::new(text, form.arch());
    let mut table = RecordTable::new(recs).unwrap();
    let mut failed: Vec<u64> = Vec::new();
    let mut cur: Option<TestOps> = None;
    for (want, p) in steps {
        let protocol = [
            Protocol::Auto,
            Protocol::Breakpoint,
            Protocol::StopMachine,
            Protocol::Atomic,
        ][p as usize % 4];
        if let Some(old) = cur.take() {
            table.ops_disable(&old, &[]);
        }
        cur = ops_for(want);
        let list: Vec<&dyn RecordOps> = cur.iter().map(|o| o as &dyn RecordOps).collect();
        if let Some(o) = &cur {
            table.ops_enable(o, &list).unwrap();
        }
        model.clear_expectations();
        let mut expect_fail = Vec::new();
        for r in table.records() {
            if failed.contains(&r.ip) {
                continue;
            }
            let old = model.text.bytes(r.ip, form.window_len()).to_vec();
            let new = match want {
                Want::Nop => form.nop(),
                Want::Plain => form.call(r.ip, TARGETS.caller).unwrap(),
                Want::Regs => form.call(r.ip, TARGETS.regs_caller).unwrap(),
                Want::Tramp => form.call(r.ip, TARGETS.caller - 0x400).unwrap(),
            };
            if old == *new {
                continue;
            }
            let refused = match protocol {
                Protocol::Breakpoint => form.arch().insn_count(r.ip, &old) != Some(1),
                Protocol::Atomic => form.arch() == Arch::X86_64,
                _ => false,
            };
            if refused {
                expect_fail.push(r.ip);
            }
            model.expect(r.ip, &old, &new);
        }
        let mut bugs = Vec::new();
        let mut scratch: Vec<PokeSite> = (0..4).map(|_| PokeSite::empty()).collect();
        let pass = UpdatePass {
            targets: &TARGETS,
            ops: &list,
            enable: true,
            protocol,
        };
        table.replace_code(&mut model, &pass, &mut scratch, &mut |b| bugs.push(b.ip));
        prop_assert_eq!(&bugs, &expect_fail);
        model.check_final(&expect_fail);
        prop_assert!(
            model.violations.is_empty(),
            "{:?} {:?}: {:#?}",
            form,
            protocol,
            model.violations
        );
        failed.extend(expect_fail);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4096, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_batches_never_tear(
        form in proptest::sample::select(ALL_FORMS.to_vec()),
        n in 1usize..5,
        steps in proptest::collection::vec(
            (prop_oneof![Just(Want::Nop), Just(Want::Plain), Just(Want::Regs), Just(Want::Tramp)], 0u8..4),
            1..8,
        ),
    ) {
        random_run(form, n, steps)?;
    }
}

#[test]
fn poke_single_retargets_a_trampoline_call() {
    let mut text = ftrace_patch::sim::SimText::new(0x10_0000, 0x1000);
    let label = 0x10_0040u64; // `ftrace_call:` inside a trampoline
    let stub = x86::encode_call(label, 0x10_0800).unwrap();
    let func = x86::encode_call(label, 0x10_0900).unwrap();
    text.poke(label, &stub);
    let mut model = ExecutorModel::new(text, Arch::X86_64);
    model.expect(label, &stub, &func);
    ftrace_patch::protocol::poke_single(
        &mut model,
        Arch::X86_64,
        label,
        &stub,
        &func,
        Protocol::Auto,
    )
    .unwrap();
    model.check_final(&[]);
    assert!(model.violations.is_empty(), "{:?}", model.violations);
    assert!(model.observed.breakpoints > 0);
    // the old bytes are checked: a second identical request no longer matches
    let r = ftrace_patch::protocol::poke_single(
        &mut model,
        Arch::X86_64,
        label,
        &stub,
        &func,
        Protocol::Auto,
    );
    assert_eq!(r, Err(ftrace_patch::protocol::SiteStatus::Mismatch));
    assert_eq!(model.text.bytes(label, 5), &func);
}

#[test]
fn init_of_aarch64_entries_never_tears() {
    use ftrace_patch::aarch64::{MOV_X9_X30, NOP, to_bytes};
    for (call_ops, protocol) in [
        (false, Protocol::Auto),
        (true, Protocol::Auto),
        (false, Protocol::Breakpoint),
        (true, Protocol::StopMachine),
    ] {
        let mut text = ftrace_patch::sim::SimText::new(0x20_0000, 0x1000);
        let mut entries = Vec::new();
        for k in 0..4u64 {
            let e = 0x20_0100 + 0x40 * k;
            for w in 0..4 {
                text.poke(e + 4 * w, &to_bytes(NOP));
            }
            entries.push(e);
        }
        let mut model = ExecutorModel::new(text, Arch::Aarch64);
        for &e in &entries {
            let mov = if call_ops { e + 8 } else { e };
            model.expect(mov, &to_bytes(NOP), &to_bytes(MOV_X9_X30));
        }
        let mut out = vec![DynFtrace::default(); entries.len()];
        let mut scratch: Vec<PokeSite> = (0..4).map(|_| PokeSite::empty()).collect();
        let kind = InitKind::A64 {
            call_ops,
            nop_ops: TARGETS.nop_ops,
        };
        let (_, st) = init_records(
            &mut model,
            kind,
            &mut entries,
            &mut out,
            protocol,
            &mut scratch,
            &mut |b| panic!("{b}"),
        );
        assert_eq!(st.failed, 0);
        model.check_final(&[]);
        assert!(
            model.violations.is_empty(),
            "{call_ops} {protocol:?}: {:?}",
            model.violations
        );
        assert!(model.observed.new > 0);
    }
}
