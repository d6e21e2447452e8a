//! Call-site forms: which bytes a site holds when it is a NOP, how a call to a trampoline is
//! encoded there, and how a freshly loaded site is recognised and normalised (the
//! `ftrace_init_nop()` step).
//!
//! Invariant: after initialisation every x86_64 patch window is 5 bytes that are one instruction
//! in both states (a NOP5 and `call rel32`), except gcc's five `90`, which is five instructions and
//! may only be rewritten while every other CPU is stopped; every AArch64 window is one aligned
//! 32-bit instruction.

use core::fmt;
use core::ops::Deref;

use crate::aarch64;
use crate::x86::{self, OutOfRange};

/// The instruction set of a text segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arch {
    /// x86_64: variable-length instructions, `int3` breakpoint.
    X86_64,
    /// AArch64: 4-byte instructions, `brk` breakpoint.
    Aarch64,
}

impl Arch {
    /// `MCOUNT_INSN_SIZE`: the bytes `ftrace_bug()` prints for a site.
    pub const fn insn_size(self) -> usize {
        match self {
            Arch::X86_64 => x86::MCOUNT_INSN_SIZE,
            Arch::Aarch64 => aarch64::MCOUNT_INSN_SIZE,
        }
    }

    /// The breakpoint the breakpoint protocol writes at the start of a window.
    pub fn breakpoint(self) -> SiteBytes {
        match self {
            Arch::X86_64 => SiteBytes::new(&[x86::INT3]),
            Arch::Aarch64 => SiteBytes::new(&aarch64::to_bytes(aarch64::PATCH_BRK)),
        }
    }

    /// How many instructions `bytes` at `ip` is, or `None` if it does not decode as call-site
    /// instructions that exactly fill it.
    pub fn insn_count(self, ip: u64, bytes: &[u8]) -> Option<usize> {
        match self {
            Arch::X86_64 => x86::for_each_boundary(ip, bytes, |_| {}),
            Arch::Aarch64 => {
                if bytes.len() % 4 != 0 {
                    return None;
                }
                for (i, w) in bytes.chunks(4).enumerate() {
                    aarch64::decode(ip + 4 * i as u64, aarch64::from_bytes(w)?)?;
                }
                Some(bytes.len() / 4)
            }
        }
    }
}

/// Up to 8 bytes of instruction text (a patch window's contents).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SiteBytes {
    len: u8,
    bytes: [u8; 8],
}

impl SiteBytes {
    /// No bytes.
    pub const EMPTY: SiteBytes = SiteBytes {
        len: 0,
        bytes: [0; 8],
    };

    /// Copies `b` (at most 8 bytes; longer input is a caller bug and panics). The unused tail
    /// is zero, so two values compare equal exactly when their bytes do.
    #[inline]
    pub fn new(b: &[u8]) -> Self {
        assert!(b.len() <= 8, "a patch window is at most 8 bytes");
        let mut bytes = [0; 8];
        // a short fixed loop: no memcpy call for a handful of bytes
        for (d, s) in bytes.iter_mut().zip(b) {
            *d = *s;
        }
        SiteBytes {
            len: b.len() as u8,
            bytes,
        }
    }

    /// The bytes.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

impl Deref for SiteBytes {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl fmt::Debug for SiteBytes {
    /// The kernel's `%*phC`: lowercase hex bytes joined by `:`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for SiteBytes {
    /// The kernel's `%*phC`: lowercase hex bytes joined by `:`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, b) in self.as_slice().iter().enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// The form of an initialised call site; it decides the NOP bytes, the call encoding and the
/// protocol that can rewrite it live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum SiteForm {
    /// x86_64 `0f 1f 44 00 00` (gcc `-mnop-mcount`, objtool, and 6-byte sites normalised to
    /// `NOP5` + `90`).
    #[default]
    X86Nop5 = 0,
    /// x86_64 `0f 1f 44 00 08` (clang/rustc `-fpatchable-function-entry=5`).
    X86Nop5Disp8 = 1,
    /// x86_64 five `90` (gcc `-fpatchable-function-entry=5`): five instructions.
    X86Nop1x5 = 2,
    /// AArch64 two-instruction entry: `mov x9, x30` at `ip - 4`, `nop`/`bl` at `ip`.
    A64Entry = 3,
    /// AArch64 `CALL_OPS`: as [`SiteForm::A64Entry`] plus the ops literal at
    /// [`aarch64::call_ops_literal`].
    A64CallOps = 4,
}

impl SiteForm {
    /// The instruction set.
    pub const fn arch(self) -> Arch {
        match self {
            SiteForm::X86Nop5 | SiteForm::X86Nop5Disp8 | SiteForm::X86Nop1x5 => Arch::X86_64,
            SiteForm::A64Entry | SiteForm::A64CallOps => Arch::Aarch64,
        }
    }

    /// Bytes in the patch window.
    pub const fn window_len(self) -> usize {
        self.arch().insn_size()
    }

    /// The disabled contents of the window.
    pub fn nop(self) -> SiteBytes {
        match self {
            SiteForm::X86Nop5 => SiteBytes::new(&x86::NOP5),
            SiteForm::X86Nop5Disp8 => SiteBytes::new(&x86::NOP5_DISP8),
            SiteForm::X86Nop1x5 => SiteBytes::new(&x86::NOP1X5),
            SiteForm::A64Entry | SiteForm::A64CallOps => {
                SiteBytes::new(&aarch64::to_bytes(aarch64::NOP))
            }
        }
    }

    /// The enabled contents of the window: a call from `ip` to `target`.
    pub fn call(self, ip: u64, target: u64) -> Result<SiteBytes, OutOfRange> {
        match self.arch() {
            Arch::X86_64 => Ok(SiteBytes::new(&x86::encode_call(ip, target)?)),
            Arch::Aarch64 => Ok(SiteBytes::new(&aarch64::to_bytes(aarch64::encode_bl(
                ip, target,
            )?))),
        }
    }

    /// The call target encoded in `bytes` (a window read from `ip`), if it is a call.
    pub fn call_target(self, ip: u64, bytes: &[u8]) -> Option<u64> {
        match self.arch() {
            Arch::X86_64 => match x86::decode(ip, bytes)? {
                x86::Decoded {
                    insn: x86::Insn::Call { target },
                    len: 5,
                } => Some(target),
                _ => None,
            },
            Arch::Aarch64 => match aarch64::decode(ip, aarch64::from_bytes(bytes)?)? {
                aarch64::Insn::Bl { target } => Some(target),
                _ => None,
            },
        }
    }

    /// Whether the site has a `CALL_OPS` literal.
    pub const fn has_call_ops(self) -> bool {
        matches!(self, SiteForm::A64CallOps)
    }

    /// Whether the NOP is a single instruction (so the breakpoint protocol may rewrite it).
    pub const fn nop_is_one_insn(self) -> bool {
        !matches!(self, SiteForm::X86Nop1x5)
    }

    /// Decodes a stored form byte.
    pub const fn from_u8(v: u8) -> Option<SiteForm> {
        Some(match v {
            0 => SiteForm::X86Nop5,
            1 => SiteForm::X86Nop5Disp8,
            2 => SiteForm::X86Nop1x5,
            3 => SiteForm::A64Entry,
            4 => SiteForm::A64CallOps,
            _ => return None,
        })
    }
}

/// One write that initialisation must make (old bytes are verified first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InitWrite {
    /// Where.
    pub addr: u64,
    /// What must be there now.
    pub old: SiteBytes,
    /// What to put there.
    pub new: SiteBytes,
    /// Data (the `CALL_OPS` literal), not instructions.
    pub data: bool,
}

/// A recognised call site: where its patch window starts, its form, and the writes that turn it
/// into the form's NOP (at most two: AArch64 `CALL_OPS` writes a literal and a `mov`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SiteInit {
    /// The record's address (the patch window; after `ftrace_call_adjust()`).
    pub ip: u64,
    /// The form.
    pub form: SiteForm,
    /// Writes to make, in address order.
    pub writes: [Option<InitWrite>; 2],
}

/// Bytes [`classify_x86`] needs at a site (an `endbr64` plus a 6-byte call).
pub const X86_PROBE_LEN: usize = 10;

/// Recognises an x86_64 call site from the bytes at its recorded address (`__mcount_loc` or
/// `__patchable_function_entries`): every NOP form, gcc's `call __fentry__` (`e8`), and gcc's PIE
/// calls (`ff 15`, `67 e8`), optionally after `endbr64`. Calls become NOPs: `e8 rel32` becomes
/// [`x86::NOP5`]; the 6-byte forms become [`x86::NOP5`] + `90`, so the patch window is 5 bytes
/// and the trailing `90` never changes. `Err` carries the unrecognised bytes.
pub fn classify_x86(addr: u64, probe: &[u8; X86_PROBE_LEN]) -> Result<SiteInit, SiteBytes> {
    let (ip, b) = if probe[..4] == x86::ENDBR64 {
        (addr + 4, &probe[4..])
    } else {
        (addr, &probe[..])
    };
    let done = |form| SiteInit {
        ip,
        form,
        writes: [None, None],
    };
    let six_to_nop = |old: &[u8]| {
        let mut new = [x86::NOP1; 6];
        new[..5].copy_from_slice(&x86::NOP5);
        SiteInit {
            ip,
            form: SiteForm::X86Nop5,
            writes: [
                Some(InitWrite {
                    addr: ip,
                    old: SiteBytes::new(old),
                    new: SiteBytes::new(&new),
                    data: false,
                }),
                None,
            ],
        }
    };
    match b {
        [0x0f, 0x1f, 0x44, 0x00, 0x00, ..] => Ok(done(SiteForm::X86Nop5)),
        [0x0f, 0x1f, 0x44, 0x00, 0x08, ..] => Ok(done(SiteForm::X86Nop5Disp8)),
        [0x90, 0x90, 0x90, 0x90, 0x90, ..] => Ok(done(SiteForm::X86Nop1x5)),
        [0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00, ..]
        | [0xff, 0x15, _, _, _, _, ..]
        | [0x67, x86::CALL_REL32, _, _, _, _, ..] => Ok(six_to_nop(&b[..6])),
        [x86::CALL_REL32, _, _, _, _, ..] => Ok(SiteInit {
            ip,
            form: SiteForm::X86Nop5,
            writes: [
                Some(InitWrite {
                    addr: ip,
                    old: SiteBytes::new(&b[..5]),
                    new: SiteBytes::new(&x86::NOP5),
                    data: false,
                }),
                None,
            ],
        }),
        _ => Err(SiteBytes::new(&b[..6])),
    }
}

/// Recognises an AArch64 patchable entry at `entry` (a `__patchable_function_entries` address):
/// `call_ops` for `-fpatchable-function-entry=4,2`, else `=2`. The `mov` slot must hold `nop`
/// (becomes `mov x9, x30`) or already `mov x9, x30`; the `bl` slot must hold `nop`; a
/// `CALL_OPS` literal must hold two `nop`s (becomes `nop_ops`) or already `nop_ops`.
/// `read(addr, buf)` reads text; `Err` carries the first unexpected bytes.
pub fn classify_a64(
    entry: u64,
    call_ops: bool,
    nop_ops: u64,
    mut read: impl FnMut(u64, &mut [u8]) -> bool,
) -> Result<SiteInit, SiteBytes> {
    let word = |read: &mut dyn FnMut(u64, &mut [u8]) -> bool, a: u64| {
        let mut b = [0; 4];
        read(a, &mut b).then(|| u32::from_le_bytes(b))
    };
    let ip = aarch64::call_adjust(entry, call_ops, |a| word(&mut read, a))
        .ok_or_else(|| SiteBytes::new(&[]))?;
    let bl = word(&mut read, ip).ok_or_else(|| SiteBytes::new(&[]))?;
    if bl != aarch64::NOP {
        return Err(SiteBytes::new(&aarch64::to_bytes(bl)));
    }
    let mut writes = [None, None];
    let mut n = 0;
    if call_ops {
        let lit = aarch64::call_ops_literal(ip);
        let mut b = [0u8; 8];
        if !read(lit, &mut b) {
            return Err(SiteBytes::new(&[]));
        }
        let nops = [
            aarch64::to_bytes(aarch64::NOP),
            aarch64::to_bytes(aarch64::NOP),
        ];
        if b != *nops.as_flattened() && u64::from_le_bytes(b) != nop_ops {
            return Err(SiteBytes::new(&b));
        }
        if u64::from_le_bytes(b) != nop_ops {
            writes[n] = Some(InitWrite {
                addr: lit,
                old: SiteBytes::new(&b),
                new: SiteBytes::new(&nop_ops.to_le_bytes()),
                data: true,
            });
            n += 1;
        }
    }
    let mov_at = ip - 4;
    match word(&mut read, mov_at) {
        Some(aarch64::NOP) => {
            writes[n] = Some(InitWrite {
                addr: mov_at,
                old: SiteBytes::new(&aarch64::to_bytes(aarch64::NOP)),
                new: SiteBytes::new(&aarch64::to_bytes(aarch64::MOV_X9_X30)),
                data: false,
            });
        }
        Some(aarch64::MOV_X9_X30) => {}
        Some(w) => return Err(SiteBytes::new(&aarch64::to_bytes(w))),
        None => return Err(SiteBytes::new(&[])),
    }
    Ok(SiteInit {
        ip,
        form: if call_ops {
            SiteForm::A64CallOps
        } else {
            SiteForm::A64Entry
        },
        writes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::format;

    fn probe(b: &[u8]) -> [u8; X86_PROBE_LEN] {
        let mut p = [0xcc; X86_PROBE_LEN];
        p[..b.len()].copy_from_slice(b);
        p
    }

    #[test]
    fn x86_forms() {
        let s = classify_x86(0x100, &probe(&x86::NOP5)).unwrap();
        assert_eq!(
            (s.ip, s.form, s.writes),
            (0x100, SiteForm::X86Nop5, [None, None])
        );
        let s = classify_x86(0x100, &probe(&x86::NOP5_DISP8)).unwrap();
        assert_eq!(s.form, SiteForm::X86Nop5Disp8);
        let s = classify_x86(0x100, &probe(&x86::NOP1X5)).unwrap();
        assert_eq!(s.form, SiteForm::X86Nop1x5);
        let mut eb = x86::ENDBR64.to_vec();
        eb.extend_from_slice(&x86::NOP5_DISP8);
        let s = classify_x86(0x100, &probe(&eb)).unwrap();
        assert_eq!((s.ip, s.form), (0x104, SiteForm::X86Nop5Disp8));
        for six in [
            &x86::NOP6[..],
            &[0xff, 0x15, 1, 2, 3, 4][..],
            &[0x67, 0xe8, 1, 2, 3, 4][..],
        ] {
            let s = classify_x86(0x100, &probe(six)).unwrap();
            let w = s.writes[0].unwrap();
            assert_eq!(s.form, SiteForm::X86Nop5);
            assert_eq!(w.old.as_slice(), six);
            assert_eq!(w.new.as_slice(), &[0x0f, 0x1f, 0x44, 0x00, 0x00, 0x90]);
        }
        let s = classify_x86(0x100, &probe(&[0xe8, 1, 2, 3, 4])).unwrap();
        assert_eq!(s.writes[0].unwrap().new.as_slice(), &x86::NOP5);
        let e = classify_x86(0x100, &probe(&[0x55, 0x48, 0x89, 0xe5, 0x90, 0x90])).unwrap_err();
        assert_eq!(format!("{e}"), "55:48:89:e5:90:90");
    }

    #[test]
    fn nop_and_call_per_form() {
        assert_eq!(SiteForm::X86Nop1x5.nop().as_slice(), &[0x90; 5]);
        let c = SiteForm::X86Nop5Disp8.call(0x1000, 0x2000).unwrap();
        assert_eq!(SiteForm::X86Nop5.call_target(0x1000, &c), Some(0x2000));
        let c = SiteForm::A64Entry.call(0x1000, 0x2000).unwrap();
        assert_eq!(SiteForm::A64Entry.call_target(0x1000, &c), Some(0x2000));
        assert!(
            SiteForm::A64Entry
                .call(0x1000, 0x1000 + (200 << 20))
                .is_err()
        );
        assert_eq!(
            SiteForm::from_u8(SiteForm::A64CallOps as u8),
            Some(SiteForm::A64CallOps)
        );
    }

    #[test]
    fn a64_entries() {
        use crate::aarch64::{BTI_C, MOV_X9_X30, NOP, to_bytes};
        let mem = |words: &[(u64, u32)]| {
            let words = words.to_vec();
            move |a: u64, b: &mut [u8]| {
                for (i, chunk) in b.chunks_mut(4).enumerate() {
                    let at = a + 4 * i as u64;
                    let w = words
                        .iter()
                        .find(|(x, _)| *x == at)
                        .map_or(NOP, |(_, w)| *w);
                    chunk.copy_from_slice(&to_bytes(w)[..chunk.len()]);
                }
                true
            }
        };
        // -fpatchable-function-entry=2 with BTI: bti c; nop; nop
        let s = classify_a64(0x1000, false, 0, mem(&[(0x1000, BTI_C)])).unwrap();
        assert_eq!((s.ip, s.form), (0x1008, SiteForm::A64Entry));
        let w = s.writes[0].unwrap();
        assert_eq!((w.addr, w.data), (0x1004, false));
        assert_eq!(w.new.as_slice(), &to_bytes(MOV_X9_X30));
        // already initialised: nothing to write
        let s = classify_a64(0x1000, false, 0, mem(&[(0x1000, MOV_X9_X30)])).unwrap();
        assert_eq!(s.writes, [None, None]);
        // a `bl` already in the slot, or junk in the mov slot: refused with the bytes found
        let bl = crate::aarch64::encode_bl(0x1004, 0x2000).unwrap();
        let e = classify_a64(0x1000, false, 0, mem(&[(0x1004, bl)])).unwrap_err();
        assert_eq!(e.as_slice(), &to_bytes(bl));
        let e = classify_a64(0x1000, false, 0, mem(&[(0x1000, 0xdead_beef)])).unwrap_err();
        assert_eq!(e.as_slice(), &to_bytes(0xdead_beef));
        // CALL_OPS: literal (two NOPs) becomes nop_ops, then the mov
        let s = classify_a64(0x2000, true, 0x1234_5678_9abc_def0, mem(&[])).unwrap();
        assert_eq!((s.ip, s.form), (0x200c, SiteForm::A64CallOps));
        let lit = s.writes[0].unwrap();
        assert_eq!((lit.addr, lit.data), (0x2000, true));
        assert_eq!(lit.new.as_slice(), &0x1234_5678_9abc_def0u64.to_le_bytes());
        assert_eq!(s.writes[1].unwrap().addr, 0x2008);
        // misaligned entry
        assert!(classify_a64(0x2002, true, 0, mem(&[])).is_err());
    }
}
