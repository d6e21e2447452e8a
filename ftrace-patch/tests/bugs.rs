//! Sites that are not what the records say: reported the way `ftrace_bug()` does, skipped,
//! never overwritten; faults and unreachable targets; breakpoint handler lookups; the
//! `enabled_functions` columns against a real 6.12 capture.

mod common;

use common::{TARGETS, TestOps, segment};
use ftrace_core::symbols::SortedSymbols;
use ftrace_patch::sim::{ExecutorModel, SimText};
use ftrace_patch::{
    Arch, BugReason, BugType, DynFtrace, Emulation, FixedTargets, FtraceBug, InitKind, OpsRecFlags,
    PokeSite, Protocol, RecFlags, RecordOps, RecordTable, SiteForm, TrapAction, UpdatePass,
    init_records, x86,
};

fn pass<'a>(ops: &'a [&'a dyn RecordOps], enable: bool) -> UpdatePass<'a> {
    UpdatePass {
        targets: &TARGETS,
        ops,
        enable,
        protocol: Protocol::Auto,
    }
}

fn syms(recs: &[DynFtrace]) -> SortedSymbols {
    let mut s = SortedSymbols::new();
    for (i, r) in recs.iter().enumerate() {
        s.push(&format!("func{i}"), r.ip - 0x10, 0x40, None);
    }
    s.finish();
    s
}

#[test]
fn corrupted_site_is_reported_skipped_and_never_written() {
    let (mut text, recs) = segment(SiteForm::X86Nop5, 4);
    let symbols = syms(&recs);
    let victim = recs[2].ip;
    let junk = [0x55, 0x48, 0x89, 0xe5, 0x41];
    text.poke(victim, &junk);
    let mut table = RecordTable::new(recs).unwrap();
    let op = TestOps {
        addr: 0x9000_2000,
        ..Default::default()
    };
    let ops: [&dyn RecordOps; 1] = [&op];
    table.ops_enable(&op, &ops).unwrap();
    let mut bugs: Vec<FtraceBug> = Vec::new();
    let st = table.replace_code_all(&mut text, &pass(&ops, true), &mut |b| bugs.push(*b));
    assert_eq!((st.updated, st.failed), (3, 1));
    assert_eq!(bugs.len(), 1);
    let b = bugs[0];
    assert_eq!(
        (b.ip, b.reason, b.bug_type),
        (victim, BugReason::Mismatch, BugType::Call)
    );
    assert_eq!(b.actual.unwrap().as_slice(), &junk);
    assert_eq!(b.expected.unwrap().as_slice(), &x86::NOP5);
    // the other sites call the trampoline; the victim is untouched and disabled
    for r in table.records() {
        let now = text.bytes(r.ip, 5);
        if r.ip == victim {
            assert_eq!(now, &junk);
            assert!(r.flags.contains(RecFlags::DISABLED));
            assert_eq!(r.flags.count(), 0);
        } else {
            assert_eq!(now, &x86::encode_call(r.ip, TARGETS.caller).unwrap());
        }
    }
    // the report, exactly as ftrace_bug() prints it
    let mut out = String::new();
    b.write_report(&mut out, &symbols).unwrap();
    assert_eq!(
        out,
        format!(
            "------------[ ftrace bug ]------------\n\
             ftrace failed to modify \n\
             [<{victim:016x}>] func2+0x10/0x40\n \
             actual:   55:48:89:e5:41\n \
             expected: 0f:1f:44:00:00\n\
             Setting ftrace call site to call ftrace function\n\
             ftrace record flags: 1\n \
             (1)    \n \
             expected tramp: {:x}\n",
            TARGETS.caller
        )
    );
    // later passes leave it alone: disabling everything never touches it
    table.ops_disable(&op, &[]);
    let st = table.replace_code_all(&mut text, &pass(&[], true), &mut |b| panic!("{b}"));
    assert_eq!((st.updated, st.failed), (3, 0));
    assert_eq!(text.bytes(victim, 5), &junk);
    for r in table.records().iter().filter(|r| r.ip != victim) {
        assert_eq!(text.bytes(r.ip, 5), &x86::NOP5);
    }
}

#[test]
fn corruption_of_an_enabled_site_is_caught_when_disabling() {
    let (mut text, recs) = segment(SiteForm::X86Nop5Disp8, 3);
    let mut table = RecordTable::new(recs).unwrap();
    let op = TestOps {
        addr: 1,
        tramp: Some(TARGETS.caller - 0x100),
        ..Default::default()
    };
    let ops: [&dyn RecordOps; 1] = [&op];
    table.ops_enable(&op, &ops).unwrap();
    table.replace_code_all(&mut text, &pass(&ops, true), &mut |b| panic!("{b}"));
    let victim = table.records()[0].ip;
    // someone else re-pointed the call
    let other = x86::encode_call(victim, 0x1234_5678).unwrap();
    text.poke(victim, &other);
    let mut bugs = Vec::new();
    table.replace_code_all(&mut text, &pass(&ops, false), &mut |b| bugs.push(*b));
    assert_eq!(bugs.len(), 1);
    let b = bugs[0];
    assert_eq!(b.bug_type, BugType::Nop);
    assert_eq!(b.expected_tramp, TARGETS.caller - 0x100);
    assert_eq!(b.tramp, Some((TARGETS.caller - 0x100, 0x11)));
    assert_eq!(text.bytes(victim, 5), &other);
    let report = b.to_string();
    assert!(
        report.contains("Setting ftrace call site to NOP\n"),
        "{report}"
    );
    assert!(
        report.contains(&format!(
            " expected: {}\n",
            ftrace_patch::SiteBytes::new(
                &x86::encode_call(victim, TARGETS.caller - 0x100).unwrap()
            )
        )),
        "{report}"
    );
    assert!(report.contains("\ttramp: "), "{report}");
    // and the other two went back to clang's NOP, not gcc's
    for r in &table.records()[1..] {
        assert_eq!(text.bytes(r.ip, 5), &x86::NOP5_DISP8);
    }
}

#[test]
fn read_and_write_faults_are_reported_without_tearing() {
    for (kind, reason, head) in [
        ("read", BugReason::ReadFault, "ftrace faulted on modifying "),
        (
            "write-head",
            BugReason::WriteFault,
            "ftrace faulted on writing ",
        ),
        (
            "write-tail",
            BugReason::WriteFault,
            "ftrace faulted on writing ",
        ),
    ] {
        let (mut text, recs) = segment(SiteForm::X86Nop5, 3);
        let victim = recs[1].ip;
        match kind {
            "read" => text.fail_reads(victim, 5),
            "write-head" => text.fail_writes(victim, 1),
            _ => text.fail_writes(victim + 1, 4),
        }
        let mut model = ExecutorModel::new(text, Arch::X86_64);
        for r in &recs {
            model.expect(
                r.ip,
                &x86::NOP5,
                &x86::encode_call(r.ip, TARGETS.caller).unwrap(),
            );
        }
        let mut table = RecordTable::new(recs).unwrap();
        let op = TestOps::default();
        let ops: [&dyn RecordOps; 1] = [&op];
        table.ops_enable(&op, &ops).unwrap();
        let mut bugs = Vec::new();
        table.replace_code_all(&mut model, &pass(&ops, true), &mut |b| bugs.push(*b));
        assert_eq!(bugs.len(), 1, "{kind}");
        assert_eq!((bugs[0].ip, bugs[0].reason), (victim, reason), "{kind}");
        assert!(bugs[0].to_string().contains(head), "{kind}");
        model.check_final(&[victim]);
        assert!(
            model.violations.is_empty(),
            "{kind}: {:?}",
            model.violations
        );
        assert!(table.records()[1].flags.contains(RecFlags::DISABLED));
    }
}

#[test]
fn unreachable_trampoline_falls_back_and_unreachable_caller_is_reported() {
    let (mut text, recs) = segment(SiteForm::X86Nop5, 2);
    let mut table = RecordTable::new(recs).unwrap();
    // the ops' own trampoline is 8 GiB away: the common one is used instead
    let op = TestOps {
        tramp: Some(1 << 33),
        ..Default::default()
    };
    let ops: [&dyn RecordOps; 1] = [&op];
    table.ops_enable(&op, &ops).unwrap();
    table.replace_code_all(&mut text, &pass(&ops, true), &mut |b| panic!("{b}"));
    for r in table.records() {
        assert_eq!(r.current_target(), Some(TARGETS.caller));
    }
    // now the common trampoline itself moves out of reach: every site reports
    let far = FixedTargets {
        caller: 1 << 34,
        regs_caller: 1 << 34,
        ..TARGETS
    };
    let mut bugs = Vec::new();
    let p = UpdatePass {
        targets: &far,
        ops: &ops,
        enable: true,
        protocol: Protocol::Auto,
    };
    table.replace_code_all(&mut text, &p, &mut |b| bugs.push(*b));
    assert_eq!(bugs.len(), 2);
    assert!(bugs.iter().all(|b| b.reason == BugReason::OutOfRange));
    assert!(
        bugs[0]
            .to_string()
            .contains("ftrace faulted on unknown error ")
    );
    assert!(
        bugs[0]
            .to_string()
            .contains("Updating ftrace call site to call a different ftrace function")
    );
}

#[test]
fn unrecognised_sites_at_init_are_reported_and_disabled() {
    let mut text = SimText::new(0x1000, 0x1000);
    text.poke(0x1100, &x86::NOP5);
    text.poke(0x1200, &[0x55, 0x48, 0x89, 0xe5, 0x90, 0x90]);
    let mut entries = [0x1200, 0x1100, 0x1ffe];
    let mut out = [DynFtrace::default(); 3];
    let mut scratch = [const { PokeSite::empty() }; 4];
    let mut bugs = Vec::new();
    let (n, st) = init_records(
        &mut text,
        InitKind::X86,
        &mut entries,
        &mut out,
        Protocol::Auto,
        &mut scratch,
        &mut |b| bugs.push(*b),
    );
    assert_eq!((n, st.failed), (3, 2));
    assert_eq!(out[0].flags, RecFlags(0));
    assert!(out[1].flags.contains(RecFlags::DISABLED) && out[2].flags.contains(RecFlags::DISABLED));
    assert_eq!(bugs[0].reason, BugReason::Mismatch);
    assert_eq!(
        bugs[0].actual.unwrap().as_slice(),
        &[0x55, 0x48, 0x89, 0xe5, 0x90, 0x90]
    );
    assert!(
        bugs[0]
            .to_string()
            .contains("Initializing ftrace call sites\n")
    );
    assert_eq!(bugs[1].reason, BugReason::ReadFault);
    // a disabled record is never counted or patched
    let mut table = RecordTable::new(&mut out[..]).unwrap();
    let op = TestOps::default();
    let ops: [&dyn RecordOps; 1] = [&op];
    table.ops_enable(&op, &ops).unwrap();
    assert_eq!(table.records()[1].count(), 0);
    let mut scratch = [const { PokeSite::empty() }; 2];
    let st = table.replace_code(&mut text, &pass(&ops, true), &mut scratch, &mut |b| {
        panic!("{b}")
    });
    assert_eq!(st.updated, 1);
}

#[test]
fn aarch64_init_writes_mov_and_literal() {
    let mut text = SimText::new(0x10_0000, 0x1000);
    let nop = ftrace_patch::aarch64::to_bytes(ftrace_patch::aarch64::NOP);
    let entry = 0x10_0100u64;
    for k in 0..4 {
        text.poke(entry + 4 * k, &nop);
    }
    let mut entries = [entry];
    let mut out = [DynFtrace::default(); 1];
    let mut scratch = [const { PokeSite::empty() }; 4];
    let kind = InitKind::A64 {
        call_ops: true,
        nop_ops: TARGETS.nop_ops,
    };
    let (_, st) = init_records(
        &mut text,
        kind,
        &mut entries,
        &mut out,
        Protocol::Auto,
        &mut scratch,
        &mut |b| panic!("{b}"),
    );
    assert_eq!(st.failed, 0);
    let ip = out[0].ip;
    assert_eq!((ip, out[0].form()), (entry + 12, SiteForm::A64CallOps));
    assert_eq!(text.bytes(entry, 8), &TARGETS.nop_ops.to_le_bytes());
    assert_eq!(
        text.bytes(ip - 4, 4),
        &ftrace_patch::aarch64::to_bytes(ftrace_patch::aarch64::MOV_X9_X30)
    );
    assert_eq!(text.bytes(ip, 4), &nop);
    // enable with one CALL_OPS-capable ops: the literal holds it; two ops: the list ops
    let mut table = RecordTable::new(&mut out[..]).unwrap();
    let a = TestOps {
        addr: 0xaaaa_0000,
        flags: OpsRecFlags::CALL_OPS_OK,
        ..Default::default()
    };
    let b = TestOps {
        addr: 0xbbbb_0000,
        flags: OpsRecFlags::CALL_OPS_OK,
        ..Default::default()
    };
    let one: [&dyn RecordOps; 1] = [&a];
    table.ops_enable(&a, &one).unwrap();
    let mut scratch = [const { PokeSite::empty() }; 2];
    table.replace_code(&mut text, &pass(&one, true), &mut scratch, &mut |b| {
        panic!("{b}")
    });
    assert_eq!(text.bytes(entry, 8), &0xaaaa_0000u64.to_le_bytes());
    assert!(table.records()[0].flags.contains(RecFlags::CALL_OPS_EN));
    let two: [&dyn RecordOps; 2] = [&a, &b];
    table.ops_enable(&b, &two).unwrap();
    table.replace_code(&mut text, &pass(&two, true), &mut scratch, &mut |b| {
        panic!("{b}")
    });
    assert_eq!(text.bytes(entry, 8), &TARGETS.list_ops.to_le_bytes());
    // the bl did not change (same ftrace_caller)
    assert_eq!(table.records()[0].current_target(), Some(TARGETS.caller));
    table.ops_disable(&a, &[&b]);
    table.replace_code(&mut text, &pass(&[&b], true), &mut scratch, &mut |b| {
        panic!("{b}")
    });
    assert_eq!(text.bytes(entry, 8), &0xbbbb_0000u64.to_le_bytes());
    table.ops_disable(&b, &[]);
    table.replace_code(&mut text, &pass(&[], true), &mut scratch, &mut |b| {
        panic!("{b}")
    });
    assert_eq!(text.bytes(entry, 8), &TARGETS.nop_ops.to_le_bytes());
    assert_eq!(text.bytes(ip, 4), &nop);
}

#[test]
fn handler_lookups() {
    let (text, recs) = segment(SiteForm::X86Nop5, 3);
    let table = RecordTable::new(recs).unwrap();
    let ip = table.records()[1].ip;
    // late trap: the breakpoint is gone, restart at the site; still there or unknown: not ours
    assert_eq!(
        table.late_trap(ip, &x86::NOP5[..1]),
        TrapAction::Restart { pc: ip }
    );
    assert_eq!(table.late_trap(ip, &[x86::INT3]), TrapAction::NotOurs);
    assert_eq!(table.late_trap(ip + 1, &[0x1f]), TrapAction::NotOurs);
    // the lock-free variant over a plain address array agrees
    let addrs: Vec<u64> = table.records().iter().map(|r| r.ip).collect();
    for (a, h) in [(ip, x86::NOP5[0]), (ip, x86::INT3), (ip + 1, 0x1f)] {
        assert_eq!(
            ftrace_patch::protocol::late_trap(Arch::X86_64, &addrs, a, &[h]),
            table.late_trap(a, &[h])
        );
    }
    // a table whose sites were never armed resolves nothing
    let sites = [PokeSite::insn(
        Arch::X86_64,
        ip,
        &x86::NOP5,
        &x86::encode_call(ip, 0x1000).unwrap(),
        0,
    )];
    let bt = ftrace_patch::BreakpointTable::new(Arch::X86_64, &sites);
    assert_eq!(bt.trap(ip, &[x86::INT3]), TrapAction::NotOurs);
    assert_eq!(
        sites[0].emulation(),
        Emulation::Call {
            target: 0x1000,
            ret: ip + 5
        }
    );
    drop(text);
}

/// A platform whose breakpoint handler runs "on another CPU" at every step of the protocol, as
/// the userspace backend's SIGTRAP handler would.
struct TrappingCpu {
    text: SimText,
    site: u64,
    seen: Vec<TrapAction>,
}

impl ftrace_patch::TextPoke for TrappingCpu {
    fn read_text(&mut self, a: u64, b: &mut [u8]) -> Result<(), ftrace_patch::TextFault> {
        self.text.read_text(a, b)
    }
    fn write_text(&mut self, a: u64, b: &[u8]) -> Result<(), ftrace_patch::TextFault> {
        self.text.write_text(a, b)?;
        let head = self.text.bytes(self.site, 1).to_vec();
        if head[0] == x86::INT3 {
            assert!(TRAPPING_CPU_SLOT.is_armed(), "breakpoint with no table");
            self.seen.push(TRAPPING_CPU_SLOT.trap(self.site, &head));
        }
        Ok(())
    }
    fn sync_cores(&mut self) {}
    fn stop_others(&mut self, _: &ftrace_patch::StopFixup<'_>, f: &mut dyn FnMut(&mut Self)) {
        f(self)
    }
    fn breakpoint_slot(&self) -> Option<&'static ftrace_patch::BreakpointSlot> {
        Some(&TRAPPING_CPU_SLOT)
    }
}

/// Where [`TrappingCpu`]'s handler finds the batch.
static TRAPPING_CPU_SLOT: ftrace_patch::BreakpointSlot = ftrace_patch::BreakpointSlot::new();

#[test]
fn breakpoint_handler_emulates_the_new_instruction_throughout() {
    let (text, recs) = segment(SiteForm::X86Nop5, 1);
    let site = recs[0].ip;
    let mut cpu = TrappingCpu {
        text,
        site,
        seen: Vec::new(),
    };
    let mut table = RecordTable::new(recs).unwrap();
    let op = TestOps::default();
    let ops: [&dyn RecordOps; 1] = [&op];
    table.ops_enable(&op, &ops).unwrap();
    table.replace_code_all(&mut cpu, &pass(&ops, true), &mut |b| panic!("{b}"));
    let call = Emulation::Call {
        target: TARGETS.caller,
        ret: site + 5,
    };
    // int3 written, tail written: both times the handler emulates the call
    assert_eq!(
        cpu.seen,
        [TrapAction::Emulate(call), TrapAction::Emulate(call)]
    );
    assert!(!TRAPPING_CPU_SLOT.is_armed(), "disarmed after the batch");
    assert_eq!(
        TRAPPING_CPU_SLOT.trap(site, &[x86::INT3]),
        TrapAction::NotOurs
    );
    cpu.seen.clear();
    table.replace_code_all(&mut cpu, &pass(&ops, false), &mut |b| panic!("{b}"));
    assert_eq!(
        cpu.seen,
        [TrapAction::Emulate(Emulation::Skip { next: site + 5 }); 2]
    );
}

#[test]
fn enabled_functions_columns_match_linux_6_12() {
    // 04-function/enabled_functions.txt: "vfs_read (1)           \ttramp: ..."
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/reference/ftrace-6.12.117/04-function/enabled_functions.txt"
    );
    let golden = std::fs::read_to_string(path).expect("reference capture");
    let (mut text, recs) = segment(SiteForm::X86Nop5, 4);
    let mut table = RecordTable::new(recs).unwrap();
    // the function tracer's ops with its own trampoline, filtered to the four functions
    let op = TestOps {
        tramp: Some(TARGETS.caller - 0x800),
        ..Default::default()
    };
    let ops: [&dyn RecordOps; 1] = [&op];
    table.ops_enable(&op, &ops).unwrap();
    table.replace_code_all(&mut text, &pass(&ops, true), &mut |b| panic!("{b}"));
    for (line, rec) in golden.lines().zip(table.records()) {
        let name = line.split(' ').next().unwrap();
        let mut ours = String::from(name);
        rec.write_enabled_columns(&mut ours).unwrap();
        assert!(rec.flags.contains(RecFlags::TRAMP_EN));
        assert_eq!(&line[..line.find('\t').unwrap()], ours);
    }
    assert_eq!(golden.lines().count(), 4);
    // a regs + ipmodify + direct + modified record shows every column
    let mut r = DynFtrace::new(0, SiteForm::X86Nop5);
    r.flags = RecFlags(
        2 | RecFlags::REGS.0
            | RecFlags::IPMODIFY.0
            | RecFlags::DIRECT.0
            | RecFlags::CALL_OPS.0
            | RecFlags::MODIFIED.0,
    );
    let mut s = String::new();
    r.write_enabled_columns(&mut s).unwrap();
    assert_eq!(s, " (2) R I D O M ");
}

#[test]
fn corrupted_bl_slot_leaves_the_literal_alone_too() {
    let (mut text, recs) = segment(SiteForm::A64CallOps, 2);
    let victim = recs[0].ip;
    let lit = ftrace_patch::aarch64::call_ops_literal(victim);
    text.poke(victim, &[0xde, 0xad, 0xbe, 0xef]);
    let mut table = RecordTable::new(recs).unwrap();
    let op = TestOps {
        addr: 0xaaaa_0000,
        flags: OpsRecFlags::CALL_OPS_OK,
        ..Default::default()
    };
    let ops: [&dyn RecordOps; 1] = [&op];
    table.ops_enable(&op, &ops).unwrap();
    let mut bugs = Vec::new();
    table.replace_code_all(&mut text, &pass(&ops, true), &mut |b| bugs.push(*b));
    assert_eq!(bugs.len(), 1);
    assert_eq!(
        bugs[0].actual.unwrap().as_slice(),
        &[0xde, 0xad, 0xbe, 0xef]
    );
    assert_eq!(text.bytes(lit, 8), &TARGETS.nop_ops.to_le_bytes());
    assert_eq!(text.bytes(victim, 4), &[0xde, 0xad, 0xbe, 0xef]);
    // the healthy one got its ops
    let ok = table.records()[1].ip;
    assert_eq!(
        text.bytes(ftrace_patch::aarch64::call_ops_literal(ok), 8),
        &0xaaaa_0000u64.to_le_bytes()
    );
}

#[test]
fn module_records_start_disabled_and_are_recounted_when_enabled() {
    let (mut text, mut recs) = segment(SiteForm::X86Nop5, 3);
    for r in &mut recs {
        r.flags = RecFlags::DISABLED; // module init text not ready yet
    }
    let mut table = RecordTable::new(recs).unwrap();
    let op = TestOps {
        flags: OpsRecFlags::SAVE_REGS,
        ..Default::default()
    };
    let ops: [&dyn RecordOps; 1] = [&op];
    table.ops_enable(&op, &ops).unwrap();
    assert!(table.records().iter().all(|r| r.count() == 0));
    let st = table.replace_code_all(&mut text, &pass(&ops, true), &mut |b| panic!("{b}"));
    assert_eq!(st.updated, 0);
    // ftrace_module_enable: the ops already registered are counted in
    table.set_disabled(1, false, &ops);
    let r = table.records()[1];
    assert_eq!((r.count(), r.flags.contains(RecFlags::REGS)), (1, true));
    let st = table.replace_code_all(&mut text, &pass(&ops, true), &mut |b| panic!("{b}"));
    assert_eq!(st.updated, 1);
    assert_eq!(
        text.bytes(r.ip, 5),
        &x86::encode_call(r.ip, TARGETS.regs_caller).unwrap()
    );
    assert_eq!(text.bytes(table.records()[0].ip, 5), &x86::NOP5);
}

/// Writes to `site` succeed `allow` times, then fail.
struct Flaky {
    text: SimText,
    site: u64,
    allow: usize,
}

impl ftrace_patch::TextPoke for Flaky {
    fn read_text(&mut self, a: u64, b: &mut [u8]) -> Result<(), ftrace_patch::TextFault> {
        self.text.read_text(a, b)
    }
    fn write_text(&mut self, a: u64, b: &[u8]) -> Result<(), ftrace_patch::TextFault> {
        if a < self.site + 5 && a + b.len() as u64 > self.site {
            if self.allow == 0 {
                return Err(ftrace_patch::TextFault { addr: a });
            }
            self.allow -= 1;
        }
        self.text.write_text(a, b)
    }
    fn sync_cores(&mut self) {}
    fn stop_others(&mut self, _: &ftrace_patch::StopFixup<'_>, f: &mut dyn FnMut(&mut Self)) {
        f(self)
    }
}

#[test]
fn a_breakpoint_that_cannot_be_removed_is_reported() {
    use ftrace_patch::protocol::{self, SiteStatus};
    for (allow, status, head) in [
        // int3 lands, the tail write fails, and so does putting the old head back
        (1, SiteStatus::StuckOld, x86::INT3),
        // int3 and tail land, the new head does not
        (2, SiteStatus::Stuck, x86::INT3),
        // the int3 itself fails: nothing was written
        (0, SiteStatus::WriteFault, x86::NOP5[0]),
    ] {
        let (text, recs) = segment(SiteForm::X86Nop5, 1);
        let ip = recs[0].ip;
        let mut t = Flaky {
            text,
            site: ip,
            allow,
        };
        let new = x86::encode_call(ip, TARGETS.caller).unwrap();
        let mut sites = [PokeSite::insn(Arch::X86_64, ip, &x86::NOP5, &new, 0)];
        let st = protocol::apply(&mut t, Arch::X86_64, &mut sites, Protocol::Auto);
        assert_eq!((st.done, st.failed), (0, 1));
        assert_eq!(sites[0].status(), status, "allow {allow}");
        assert_eq!(t.text.bytes(ip, 1), &[head]);
        // what a late trap there would be told: emulate what the rest of the window holds
        let bt = ftrace_patch::BreakpointTable::new(Arch::X86_64, &sites);
        let want = match status {
            SiteStatus::StuckOld => TrapAction::Emulate(Emulation::Skip { next: ip + 5 }),
            SiteStatus::Stuck => TrapAction::Emulate(Emulation::Call {
                target: TARGETS.caller,
                ret: ip + 5,
            }),
            _ => TrapAction::NotOurs,
        };
        assert_eq!(bt.trap(ip, &[x86::INT3]), want, "allow {allow}");
    }
}

#[test]
fn enabled_and_touched_functions_match_linux_6_12_byte_for_byte() {
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/reference/ftrace-6.12.117/04-function/"
    );
    let enabled = std::fs::read_to_string(format!("{dir}enabled_functions.txt")).unwrap();
    let touched = std::fs::read_to_string(format!("{dir}touched_functions.txt")).unwrap();
    // the functions of the capture, at their kallsyms addresses (11-kallsyms), sizes made up
    // except function_trace_call's, which the capture prints (0x110)
    let funcs = [
        ("do_sys_openat2", 0xffff_ffff_8145_3d90u64),
        ("vfs_read", 0xffff_ffff_8145_7340),
        ("vfs_write", 0xffff_ffff_8145_7c10),
        ("ksys_read", 0xffff_ffff_8145_8070),
    ];
    let tracer_func = 0xffff_ffff_8124_5db0u64;
    let mut syms = SortedSymbols::new();
    for (n, a) in funcs {
        syms.push(n, a, 0x100, None);
    }
    syms.push("function_trace_call", tracer_func, 0x110, None);
    syms.finish();
    // the function tracer's ops: filtered to the four, with its own allocated trampoline
    struct FunctionOps(Vec<u64>);
    impl RecordOps for FunctionOps {
        fn flags(&self) -> OpsRecFlags {
            OpsRecFlags::empty()
        }
        fn admits(&self, ip: u64) -> bool {
            self.0.contains(&ip)
        }
        fn trampoline(&self) -> Option<u64> {
            Some(0xffff_ffff_c020_1000)
        }
        fn ops_addr(&self) -> u64 {
            0xffff_ffff_8300_0000
        }
        fn func(&self) -> u64 {
            0xffff_ffff_8124_5db0
        }
    }
    let base = 0xffff_ffff_8145_3000u64;
    let mut text = SimText::new(base, 0x6000);
    let mut recs = Vec::new();
    for (_, a) in funcs {
        text.poke(a, &x86::NOP5);
        recs.push(DynFtrace::new(a, SiteForm::X86Nop5));
    }
    // a few untraced functions in between
    for k in 0..3u64 {
        let a = base + 0x100 + 0x40 * k;
        text.poke(a, &x86::NOP5);
        recs.push(DynFtrace::new(a, SiteForm::X86Nop5));
    }
    let mut table = RecordTable::new(recs).unwrap();
    let op = FunctionOps(funcs.iter().map(|f| f.1).collect());
    let ops: [&dyn RecordOps; 1] = [&op];
    table.ops_enable(&op, &ops).unwrap();
    let targets = FixedTargets {
        caller: base + 0x5000,
        regs_caller: base + 0x5100,
        ..TARGETS
    };
    let p = UpdatePass {
        targets: &targets,
        ops: &ops,
        enable: true,
        protocol: Protocol::Auto,
    };
    table.replace_code_all(&mut text, &p, &mut |b| panic!("{b}"));
    let mut ours = String::new();
    table.write_enabled(&mut ours, &syms, &ops, false).unwrap();
    assert_eq!(ours, enabled);
    let mut ours = String::new();
    table.write_enabled(&mut ours, &syms, &ops, true).unwrap();
    assert_eq!(ours, touched);
    // after `echo nop > current_tracer`: the sites are NOPs again, touched_functions remembers
    table.ops_disable(&op, &[]);
    let p = UpdatePass { ops: &[], ..p };
    table.replace_code_all(&mut text, &p, &mut |b| panic!("{b}"));
    let mut ours = String::new();
    table.write_enabled(&mut ours, &syms, &[], false).unwrap();
    let after_nop =
        std::fs::read_to_string(format!("{dir}enabled_functions_after_nop.txt")).unwrap();
    assert_eq!(ours, after_nop);
    assert_eq!(ours, "");
    let mut ours = String::new();
    table.write_enabled(&mut ours, &syms, &[], true).unwrap();
    assert_eq!(ours.lines().count(), 4);
    assert!(
        ours.starts_with("do_sys_openat2 (0)           \n"),
        "{ours}"
    );
}

#[test]
fn available_filter_functions_format_matches_linux_6_12() {
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/reference/ftrace-6.12.117/03-filter-functions/"
    );
    let with_addrs =
        std::fs::read_to_string(format!("{dir}available_filter_functions_addrs_head50.txt"))
            .unwrap();
    let names =
        std::fs::read_to_string(format!("{dir}available_filter_functions_head50.txt")).unwrap();
    // the sites and names the capture lists (each site is 4 bytes into its function: endbr64)
    let mut syms = SortedSymbols::new();
    let mut recs = Vec::new();
    for line in with_addrs.lines() {
        let (a, n) = line.split_once(' ').unwrap();
        let ip = u64::from_str_radix(a, 16).unwrap();
        syms.push(n, ip - 4, 0x20, None);
        recs.push(DynFtrace::new(ip, SiteForm::X86Nop5));
    }
    syms.finish();
    recs.reverse(); // the table sorts
    let table = RecordTable::new(recs).unwrap();
    let mut ours = String::new();
    table.write_available(&mut ours, &syms, true).unwrap();
    assert_eq!(ours, with_addrs);
    let mut ours = String::new();
    table.write_available(&mut ours, &syms, false).unwrap();
    assert_eq!(ours, names);
}
