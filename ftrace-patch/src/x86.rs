//! x86_64 call-site instructions: the NOP forms compilers emit at function entry, `call rel32` /
//! `jmp rel32` with range checks, and a decoder for exactly the instructions that can appear in a
//! patch window.
//!
//! Invariant: every encoder either returns bytes that decode back to the same instruction and
//! target, or refuses (a `rel32` that does not fit is an [`OutOfRange`] error, never truncated).

/// Bytes in an x86_64 call site (`MCOUNT_INSN_SIZE`).
pub const MCOUNT_INSN_SIZE: usize = 5;
/// The kernel's 5-byte NOP `nopl 0x0(%rax,%rax,1)` (`BYTES_NOP5`, gcc `-mnop-mcount`, objtool).
pub const NOP5: [u8; 5] = [0x0f, 0x1f, 0x44, 0x00, 0x00];
/// `nopl 0x8(%rax,%rax,1)`: what clang and rustc emit for `-fpatchable-function-entry=5`.
pub const NOP5_DISP8: [u8; 5] = [0x0f, 0x1f, 0x44, 0x00, 0x08];
/// The 6-byte NOP `nopw 0x0(%rax,%rax,1)`.
pub const NOP6: [u8; 6] = [0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00];
/// gcc `-fpatchable-function-entry=5`: five one-byte NOPs (five instructions, not one).
pub const NOP1X5: [u8; 5] = [0x90; 5];
/// The one-byte NOP.
pub const NOP1: u8 = 0x90;
/// `int3` (`INT3_INSN_OPCODE`).
pub const INT3: u8 = 0xcc;
/// `call rel32` opcode (`CALL_INSN_OPCODE`).
pub const CALL_REL32: u8 = 0xe8;
/// `jmp rel32` opcode (`JMP32_INSN_OPCODE`).
pub const JMP_REL32: u8 = 0xe9;
/// `endbr64`, which `-fcf-protection` puts before the patchable NOP.
pub const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];

/// A branch whose displacement does not fit the instruction's immediate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutOfRange {
    /// Address of the branch instruction.
    pub ip: u64,
    /// The target that could not be reached.
    pub target: u64,
}

impl core::fmt::Display for OutOfRange {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:#x} cannot reach {:#x}", self.ip, self.target)
    }
}

/// The `rel32` of a `len`-byte branch at `ip` to `target` (relative to the next instruction).
pub fn rel32(ip: u64, len: u64, target: u64) -> Result<i32, OutOfRange> {
    let disp = target.wrapping_sub(ip.wrapping_add(len)) as i64;
    i32::try_from(disp).map_err(|_| OutOfRange { ip, target })
}

/// The target of a `len`-byte branch at `ip` with displacement `rel`.
#[inline]
pub fn rel_target(ip: u64, len: u64, rel: i32) -> u64 {
    ip.wrapping_add(len).wrapping_add(rel as i64 as u64)
}

fn encode_rel32(opcode: u8, ip: u64, target: u64) -> Result<[u8; 5], OutOfRange> {
    let rel = rel32(ip, 5, target)?.to_le_bytes();
    Ok([opcode, rel[0], rel[1], rel[2], rel[3]])
}

/// `call rel32` at `ip` to `target` (the kernel's `text_gen_insn(CALL_INSN_OPCODE, ip, target)`).
pub fn encode_call(ip: u64, target: u64) -> Result<[u8; 5], OutOfRange> {
    encode_rel32(CALL_REL32, ip, target)
}

/// `jmp rel32` at `ip` to `target`.
pub fn encode_jmp(ip: u64, target: u64) -> Result<[u8; 5], OutOfRange> {
    encode_rel32(JMP_REL32, ip, target)
}

/// One decoded instruction of a patch window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Insn {
    /// A NOP of the decoded length (`90`, `66 90`, `0f 1f /0` forms, up to 8 bytes).
    Nop,
    /// `e8 rel32`.
    Call {
        /// Absolute target.
        target: u64,
    },
    /// `e9 rel32`.
    Jmp {
        /// Absolute target.
        target: u64,
    },
    /// `67 e8 rel32`: the `addr32 call` the linker relaxes gcc's PIE `call *__fentry__@GOTPCREL`
    /// into (6 bytes).
    CallAddr32 {
        /// Absolute target.
        target: u64,
    },
    /// `ff 15 disp32`: `call *disp32(%rip)`, gcc's PIE `-pg -mfentry` call (6 bytes).
    CallRipIndirect {
        /// Address of the pointer the call loads.
        slot: u64,
    },
    /// `int3`.
    Int3,
}

/// An instruction and its length in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decoded {
    /// The instruction.
    pub insn: Insn,
    /// Its length.
    pub len: usize,
}

fn rd32(b: &[u8], at: usize) -> Option<i32> {
    let s = b.get(at..at + 4)?;
    Some(i32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

/// Decodes the instruction at `ip` whose bytes start `bytes`, if it is one a call site can hold.
///
/// Recognised: the multi-byte NOPs of Intel's recommended set (`90`, `66 90`, `0f 1f 00`,
/// `0f 1f 40 d8`, `0f 1f 44 00 d8`, `66 0f 1f 44 00 d8`, `0f 1f 80 d32`, `0f 1f 84 00 d32`),
/// `e8`/`e9 rel32`, `67 e8 rel32`, `ff 15 disp32` and `int3`. Anything else is `None`.
pub fn decode(ip: u64, bytes: &[u8]) -> Option<Decoded> {
    let d = |insn, len| Some(Decoded { insn, len });
    match *bytes {
        [0x90, ..] => d(Insn::Nop, 1),
        [INT3, ..] => d(Insn::Int3, 1),
        [0x66, 0x90, ..] => d(Insn::Nop, 2),
        [0x0f, 0x1f, 0x00, ..] => d(Insn::Nop, 3),
        [0x0f, 0x1f, 0x40, _, ..] => d(Insn::Nop, 4),
        [0x0f, 0x1f, 0x44, 0x00, _, ..] => d(Insn::Nop, 5),
        [0x66, 0x0f, 0x1f, 0x44, 0x00, _, ..] => d(Insn::Nop, 6),
        [0x0f, 0x1f, 0x80, _, _, _, _, ..] => d(Insn::Nop, 7),
        [0x0f, 0x1f, 0x84, 0x00, _, _, _, _, ..] => d(Insn::Nop, 8),
        [CALL_REL32, ..] => d(
            Insn::Call {
                target: rel_target(ip, 5, rd32(bytes, 1)?),
            },
            5,
        ),
        [JMP_REL32, ..] => d(
            Insn::Jmp {
                target: rel_target(ip, 5, rd32(bytes, 1)?),
            },
            5,
        ),
        [0x67, CALL_REL32, ..] => d(
            Insn::CallAddr32 {
                target: rel_target(ip, 6, rd32(bytes, 2)?),
            },
            6,
        ),
        [0xff, 0x15, ..] => d(
            Insn::CallRipIndirect {
                slot: rel_target(ip, 6, rd32(bytes, 2)?),
            },
            6,
        ),
        _ => None,
    }
}

/// Encodes `insn` at `ip` (the inverse of [`decode`] for the branch forms and `int3`; a `Nop`
/// encodes as [`NOP5`]). Returns the bytes and their length.
pub fn encode(ip: u64, insn: Insn) -> Result<([u8; 6], usize), OutOfRange> {
    let mut out = [0u8; 6];
    let len = match insn {
        Insn::Nop => {
            out[..5].copy_from_slice(&NOP5);
            5
        }
        Insn::Int3 => {
            out[0] = INT3;
            1
        }
        Insn::Call { target } => {
            out[..5].copy_from_slice(&encode_call(ip, target)?);
            5
        }
        Insn::Jmp { target } => {
            out[..5].copy_from_slice(&encode_jmp(ip, target)?);
            5
        }
        Insn::CallAddr32 { target } => {
            out[0] = 0x67;
            out[1] = CALL_REL32;
            out[2..6].copy_from_slice(&rel32(ip, 6, target)?.to_le_bytes());
            6
        }
        Insn::CallRipIndirect { slot } => {
            out[0] = 0xff;
            out[1] = 0x15;
            out[2..6].copy_from_slice(&rel32(ip, 6, slot)?.to_le_bytes());
            6
        }
    };
    Ok((out, len))
}

/// The instruction boundaries (offsets from the window start) of `bytes` read as a straight-line
/// sequence, or `None` if some part does not decode or the last instruction overruns the window.
///
/// Calls `f` with each boundary offset (including 0, excluding the window's end).
pub fn for_each_boundary(ip: u64, bytes: &[u8], mut f: impl FnMut(usize)) -> Option<usize> {
    let mut at = 0;
    let mut n = 0;
    while at < bytes.len() {
        let d = decode(ip.wrapping_add(at as u64), &bytes[at..])?;
        if at + d.len > bytes.len() {
            return None;
        }
        f(at);
        n += 1;
        at += d.len;
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_encoding_matches_the_kernel_example() {
        // e8 + s32(target - (ip + 5)), little-endian.
        assert_eq!(
            encode_call(0x1000, 0x2000).unwrap(),
            [0xe8, 0xfb, 0x0f, 0x00, 0x00]
        );
        assert_eq!(
            encode_call(0x2000, 0x1000).unwrap(),
            [0xe8, 0xfb, 0xef, 0xff, 0xff]
        );
        assert_eq!(encode_jmp(0x1000, 0x1005).unwrap(), [0xe9, 0, 0, 0, 0]);
    }

    #[test]
    fn rel32_range_edges() {
        let ip = 0x1_0000_0000u64;
        let max = ip + 5 + i32::MAX as u64;
        assert!(encode_call(ip, max).is_ok());
        assert_eq!(
            encode_call(ip, max + 1),
            Err(OutOfRange {
                ip,
                target: max + 1
            })
        );
        let min = ip + 5 - (1u64 << 31);
        assert!(encode_call(ip, min).is_ok());
        assert!(encode_call(ip, min - 1).is_err());
    }

    #[test]
    fn every_site_form_decodes() {
        for nop in [&NOP5[..], &NOP5_DISP8[..], &NOP6[..]] {
            let d = decode(0, nop).unwrap();
            assert_eq!((d.insn, d.len), (Insn::Nop, nop.len()));
        }
        assert_eq!(for_each_boundary(0, &NOP1X5, |_| {}), Some(5));
        assert_eq!(for_each_boundary(0, &NOP5, |_| {}), Some(1));
        // gcc PIE: ff 15 disp32 -> slot relative to the next instruction.
        let d = decode(0x1000, &[0xff, 0x15, 0x10, 0, 0, 0]).unwrap();
        assert_eq!(d.insn, Insn::CallRipIndirect { slot: 0x1016 });
        let d = decode(0x1000, &[0x67, 0xe8, 0xfa, 0xff, 0xff, 0xff]).unwrap();
        assert_eq!(d.insn, Insn::CallAddr32 { target: 0x1000 });
        assert_eq!(decode(0, &[0xcc]).unwrap().insn, Insn::Int3);
        assert_eq!(decode(0, &[0x0f, 0x0b]), None);
        // a truncated call does not decode
        assert_eq!(decode(0, &[0xe8, 0, 0]), None);
    }
}
