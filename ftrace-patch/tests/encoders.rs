//! Encoders round-trip under proptest, and refuse what they cannot encode.

use ftrace_patch::{SiteForm, aarch64, x86};
use proptest::prelude::*;

fn in_rel32(ip: u64, len: u64, target: u64) -> bool {
    let d = target.wrapping_sub(ip.wrapping_add(len)) as i64;
    i32::try_from(d).is_ok()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4096, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn x86_call_and_jmp_round_trip(ip in any::<u64>(), rel in any::<i32>()) {
        let target = ip.wrapping_add(5).wrapping_add(rel as i64 as u64);
        let c = x86::encode_call(ip, target).unwrap();
        prop_assert_eq!(c[0], x86::CALL_REL32);
        prop_assert_eq!(&c[1..], &rel.to_le_bytes()[..]);
        prop_assert_eq!(x86::decode(ip, &c), Some(x86::Decoded { insn: x86::Insn::Call { target }, len: 5 }));
        let j = x86::encode_jmp(ip, target).unwrap();
        prop_assert_eq!(x86::decode(ip, &j), Some(x86::Decoded { insn: x86::Insn::Jmp { target }, len: 5 }));
    }

    #[test]
    fn x86_six_byte_calls_round_trip(ip in any::<u64>(), rel in any::<i32>(), which in any::<bool>()) {
        let t = ip.wrapping_add(6).wrapping_add(rel as i64 as u64);
        let insn = if which { x86::Insn::CallAddr32 { target: t } } else { x86::Insn::CallRipIndirect { slot: t } };
        let (b, len) = x86::encode(ip, insn).unwrap();
        prop_assert_eq!(len, 6);
        prop_assert_eq!(x86::decode(ip, &b[..len]), Some(x86::Decoded { insn, len }));
    }

    #[test]
    fn x86_range_is_checked(ip in any::<u64>(), target in any::<u64>()) {
        let r = x86::encode_call(ip, target);
        prop_assert_eq!(r.is_ok(), in_rel32(ip, 5, target));
        if let Ok(c) = r {
            prop_assert_eq!(SiteForm::X86Nop5.call_target(ip, &c), Some(target));
        }
    }

    #[test]
    fn a64_bl_round_trips_within_range(pc in any::<u64>(), words in -(1i64 << 25)..(1i64 << 25)) {
        let pc = pc & !3;
        let target = pc.wrapping_add((words * 4) as u64);
        let w = aarch64::encode_bl(pc, target).unwrap();
        prop_assert_eq!(aarch64::decode(pc, w), Some(aarch64::Insn::Bl { target }));
        let b = aarch64::encode_b(pc, target).unwrap();
        prop_assert_eq!(aarch64::decode(pc, b), Some(aarch64::Insn::B { target }));
        prop_assert!(aarch64::reachable_by_bl(pc, target));
    }

    #[test]
    fn a64_bl_refuses_out_of_range_or_misaligned(pc in any::<u64>(), off in any::<i64>()) {
        let pc = pc & !3;
        let target = pc.wrapping_add(off as u64);
        let ok = (-(128i64 << 20)..(128i64 << 20)).contains(&off) && off % 4 == 0;
        prop_assert_eq!(aarch64::encode_bl(pc, target).is_ok(), ok);
    }

    #[test]
    fn a64_every_encodable_insn_round_trips(pc in any::<u64>(), imm in any::<u16>(), words in -(1i64 << 25)..(1i64 << 25), k in 0u8..6) {
        let pc = pc & !3;
        let target = pc.wrapping_add((words * 4) as u64);
        let insn = match k {
            0 => aarch64::Insn::Nop,
            1 => aarch64::Insn::MovX9X30,
            2 => aarch64::Insn::BtiC,
            3 => aarch64::Insn::Brk { imm },
            4 => aarch64::Insn::Bl { target },
            _ => aarch64::Insn::B { target },
        };
        let w = aarch64::encode(pc, insn).unwrap();
        prop_assert_eq!(aarch64::decode(pc, w), Some(insn));
        prop_assert_eq!(aarch64::from_bytes(&aarch64::to_bytes(w)), Some(w));
    }

    #[test]
    fn every_form_call_round_trips(ip in 0x1000u64..(1 << 40), d in -(1i64 << 20)..(1i64 << 20)) {
        for form in [SiteForm::X86Nop5, SiteForm::X86Nop5Disp8, SiteForm::X86Nop1x5, SiteForm::A64Entry, SiteForm::A64CallOps] {
            let ip = if form.arch() == ftrace_patch::Arch::Aarch64 { ip & !3 } else { ip };
            let target = ip.wrapping_add((d * 4) as u64);
            let c = form.call(ip, target).unwrap();
            prop_assert_eq!(c.len(), form.window_len());
            prop_assert_eq!(form.call_target(ip, &c), Some(target));
            prop_assert_eq!(form.call_target(ip, &form.nop()), None);
            prop_assert_eq!(form.arch().insn_count(ip, &c), Some(1));
        }
    }
}

#[test]
fn nop_forms_decode_as_the_compilers_emit_them() {
    // one instruction each, except gcc's five 90
    for (b, n) in [
        (&x86::NOP5[..], 1),
        (&x86::NOP5_DISP8[..], 1),
        (&x86::NOP6[..], 1),
        (&x86::NOP1X5[..], 5),
        (&[0x0f, 0x1f, 0x44, 0x00, 0x00, 0x90][..], 2),
    ] {
        assert_eq!(
            ftrace_patch::Arch::X86_64.insn_count(0, b),
            Some(n),
            "{b:02x?}"
        );
    }
    // e8 rel32 / 67 e8 / ff 15 forms
    let call = [0xe8, 0x00, 0x01, 0x00, 0x00];
    assert_eq!(
        x86::decode(0x1000, &call).unwrap().insn,
        x86::Insn::Call { target: 0x1105 }
    );
}
