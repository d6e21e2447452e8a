//! AArch64 call-site instructions: `nop`, `bl` (±128 MiB), the two-instruction patchable entry
//! (`mov x9, x30; bl <caller>`), the `CALL_OPS` layout (an 8-byte ops literal before the
//! function), `brk` for the breakpoint protocol, and `ftrace_call_adjust()`.
//!
//! Invariant: an instruction is one little-endian 32-bit word at a 4-byte-aligned address; `bl`
//! encodes only targets it reaches (`-128 MiB <= offset < 128 MiB`, multiple of 4).

/// Bytes in an AArch64 call site (one instruction).
pub const MCOUNT_INSN_SIZE: usize = 4;
/// `nop` (`hint #0`).
pub const NOP: u32 = 0xd503_201f;
/// `mov x9, x30` (`orr x9, xzr, x30`): saves the link register before the `bl`.
pub const MOV_X9_X30: u32 = 0xaa1e_03e9;
/// `bti c`, which `-mbranch-protection` puts at a function's entry, before the patch NOPs.
pub const BTI_C: u32 = 0xd503_245f;
/// The `brk` immediate the breakpoint protocol uses (Linux's `FAULT_BRK_IMM`-style numbers are
/// reserved for the kernel; this one is ours: 0xf7f).
pub const PATCH_BRK_IMM: u16 = 0xf7f;
/// `brk #PATCH_BRK_IMM`.
pub const PATCH_BRK: u32 = brk(PATCH_BRK_IMM);
/// `bl` reaches `-BL_RANGE <= offset < BL_RANGE` (128 MiB).
pub const BL_RANGE: i64 = 128 << 20;

const BL_OPCODE: u32 = 0x9400_0000;
const B_OPCODE: u32 = 0x1400_0000;
const IMM26: u32 = 0x03ff_ffff;

pub use crate::x86::OutOfRange;

/// `brk #imm`.
pub const fn brk(imm: u16) -> u32 {
    0xd420_0000 | ((imm as u32) << 5)
}

/// Whether `bl` at `pc` reaches `target` (the kernel's `reachable_by_bl`).
pub fn reachable_by_bl(pc: u64, target: u64) -> bool {
    let off = target.wrapping_sub(pc) as i64;
    (-BL_RANGE..BL_RANGE).contains(&off) && off & 3 == 0
}

fn branch(opcode: u32, pc: u64, target: u64) -> Result<u32, OutOfRange> {
    if pc & 3 != 0 || !reachable_by_bl(pc, target) {
        return Err(OutOfRange { ip: pc, target });
    }
    let off = target.wrapping_sub(pc) as i64;
    Ok(opcode | ((off >> 2) as u32 & IMM26))
}

/// `bl target` at `pc`.
pub fn encode_bl(pc: u64, target: u64) -> Result<u32, OutOfRange> {
    branch(BL_OPCODE, pc, target)
}

/// `b target` at `pc`.
pub fn encode_b(pc: u64, target: u64) -> Result<u32, OutOfRange> {
    branch(B_OPCODE, pc, target)
}

/// One decoded call-site instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Insn {
    /// `nop`.
    Nop,
    /// `bl target`.
    Bl {
        /// Absolute target.
        target: u64,
    },
    /// `b target`.
    B {
        /// Absolute target.
        target: u64,
    },
    /// `mov x9, x30`.
    MovX9X30,
    /// `bti c`.
    BtiC,
    /// `brk #imm`.
    Brk {
        /// The immediate.
        imm: u16,
    },
}

fn imm26_target(pc: u64, word: u32) -> u64 {
    // sign-extend the 26-bit immediate, scale by 4
    let imm = (((word & IMM26) << 6) as i32 >> 6) as i64;
    pc.wrapping_add((imm << 2) as u64)
}

/// Decodes `word` at `pc`, if it is one of the call-site instructions.
pub fn decode(pc: u64, word: u32) -> Option<Insn> {
    match word {
        NOP => Some(Insn::Nop),
        MOV_X9_X30 => Some(Insn::MovX9X30),
        BTI_C => Some(Insn::BtiC),
        w if w & 0xfc00_0000 == BL_OPCODE => Some(Insn::Bl {
            target: imm26_target(pc, w),
        }),
        w if w & 0xfc00_0000 == B_OPCODE => Some(Insn::B {
            target: imm26_target(pc, w),
        }),
        w if w & 0xffe0_001f == 0xd420_0000 => Some(Insn::Brk {
            imm: ((w >> 5) & 0xffff) as u16,
        }),
        _ => None,
    }
}

/// Encodes `insn` at `pc` (inverse of [`decode`]).
pub fn encode(pc: u64, insn: Insn) -> Result<u32, OutOfRange> {
    match insn {
        Insn::Nop => Ok(NOP),
        Insn::MovX9X30 => Ok(MOV_X9_X30),
        Insn::BtiC => Ok(BTI_C),
        Insn::Brk { imm } => Ok(brk(imm)),
        Insn::Bl { target } => encode_bl(pc, target),
        Insn::B { target } => encode_b(pc, target),
    }
}

/// The word's bytes in memory order (A64 instructions are little-endian).
#[inline]
pub const fn to_bytes(word: u32) -> [u8; 4] {
    word.to_le_bytes()
}

/// The word stored in `bytes[..4]`.
#[inline]
pub fn from_bytes(bytes: &[u8]) -> Option<u32> {
    let b = bytes.get(..4)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// Where the `CALL_OPS` ops literal of the call site `ip` lives: `ALIGN_DOWN(ip - 12, 8)`.
///
/// Layout (`-fpatchable-function-entry=4,2`, function 8-byte aligned):
///
/// ```text
/// addr+00:        NOP   // literal, low 32 bits  -> &ops (8-byte data word)
/// addr+04:        NOP   // literal, high 32 bits
/// addr+08: func: [BTI C]
/// addr+08/12:     NOP   // -> mov x9, x30
/// addr+12/16:     NOP   // -> bl ftrace_caller   (= ip, the record's address)
/// ```
#[inline]
pub const fn call_ops_literal(ip: u64) -> u64 {
    ip.wrapping_sub(12) & !7
}

/// `ftrace_call_adjust()`: from a `__patchable_function_entries` address to the `bl` slot.
///
/// With `call_ops`, skip the two literal NOPs; then an optional `bti c`; then the `mov x9, x30`
/// slot. `word_at(addr)` reads one instruction. Returns `None` for a misaligned entry (the
/// kernel drops such a record with a warning).
pub fn call_adjust(
    entry: u64,
    call_ops: bool,
    mut word_at: impl FnMut(u64) -> Option<u32>,
) -> Option<u64> {
    if entry & 3 != 0 {
        return None;
    }
    let mut a = entry;
    if call_ops {
        a = a.wrapping_add(8);
    }
    if word_at(a)? == BTI_C {
        a = a.wrapping_add(4);
    }
    Some(a.wrapping_add(4))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_encodings() {
        // bl . (offset 0) and bl .+4 / .-4
        assert_eq!(encode_bl(0x1000, 0x1000).unwrap(), 0x9400_0000);
        assert_eq!(encode_bl(0x1000, 0x1004).unwrap(), 0x9400_0001);
        assert_eq!(encode_bl(0x1000, 0x0ffc).unwrap(), 0x97ff_ffff);
        assert_eq!(encode_b(0x1000, 0x1008).unwrap(), 0x1400_0002);
        assert_eq!(brk(0), 0xd420_0000);
        assert_eq!(decode(0, PATCH_BRK), Some(Insn::Brk { imm: PATCH_BRK_IMM }));
        assert_eq!(decode(0, MOV_X9_X30), Some(Insn::MovX9X30));
    }

    #[test]
    fn bl_range_edges() {
        let pc = 0x4000_0000u64;
        assert!(encode_bl(pc, pc + (128 << 20) - 4).is_ok());
        assert!(encode_bl(pc, pc + (128 << 20)).is_err());
        assert!(encode_bl(pc, pc - (128 << 20)).is_ok());
        assert!(encode_bl(pc, pc - (128 << 20) - 4).is_err());
        assert!(encode_bl(pc, pc + 2).is_err());
        assert!(encode_bl(pc + 2, pc + 8).is_err());
    }

    #[test]
    fn call_ops_layout() {
        // no BTI: entry (pre-NOPs) at 0x1000, func at 0x1008, mov slot 0x1008, bl slot 0x100c
        let no_bti = |_a: u64| Some(NOP);
        let ip = call_adjust(0x1000, true, no_bti).unwrap();
        assert_eq!(ip, 0x100c);
        assert_eq!(call_ops_literal(ip), 0x1000);
        // with BTI: func 0x1008 holds bti c, mov slot 0x100c, bl slot 0x1010
        let bti = |a: u64| Some(if a == 0x1008 { BTI_C } else { NOP });
        let ip = call_adjust(0x1000, true, bti).unwrap();
        assert_eq!(ip, 0x1010);
        assert_eq!(call_ops_literal(ip), 0x1000);
        // two-NOP entry without literal
        assert_eq!(call_adjust(0x2000, false, no_bti), Some(0x2004));
        assert_eq!(call_adjust(0x2002, false, no_bti), None);
    }
}
