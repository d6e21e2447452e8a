//! Patching jump-label sites: a static key's 5-byte NOPs to `jmp` and back.
//!
//! A site (ftrace-core's `jump_label::JumpEntry`: the NOP's address and the "on" path's
//! address) is rewritten from [`NOP5`] to `jmp rel32` when its key turns on, and back when it
//! turns off, as the kernel's `arch_jump_label_transform` does. The rewrites go through
//! [`protocol::apply`] like call sites do: each site's current bytes are verified first (a
//! site that holds neither form is a mismatch and nothing is written over it), and a live
//! site is rewritten with the breakpoint protocol (the `jmp` is emulated while the `int3` is
//! in place). Call [`update_sites`] from the key's update callback
//! (`StaticKey::inc`/`dec`), which runs it exactly on the 0 <-> 1 transitions.

use crate::protocol::{self, BatchStats, PokeSite, Protocol};
use crate::site::Arch;
use crate::text::TextPoke;
use crate::x86::{NOP5, OutOfRange, encode_jmp};

/// One jump-label site.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JumpSite {
    /// The 5-byte NOP / `jmp`.
    pub code: u64,
    /// The `jmp` target (the branch's "on" path).
    pub target: u64,
}

/// What the sites become.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JumpTo {
    /// `jmp target`: the key is on.
    Target,
    /// The NOP: the key is off.
    Nop,
}

/// Fills `out` with one rewrite per site (old form -> new form), in address order, and
/// returns how many it wrote. `OutOfRange` if a target is beyond a `rel32`.
pub fn poke_sites(
    sites: &[JumpSite],
    to: JumpTo,
    out: &mut [PokeSite],
) -> Result<usize, OutOfRange> {
    let n = sites.len().min(out.len());
    for (i, s) in sites[..n].iter().enumerate() {
        let jmp = encode_jmp(s.code, s.target)?;
        let (old, new) = match to {
            JumpTo::Target => (NOP5, jmp),
            JumpTo::Nop => (jmp, NOP5),
        };
        out[i] = PokeSite::insn(Arch::X86_64, s.code, &old, &new, i as u32);
    }
    out[..n].sort_unstable_by_key(PokeSite::addr);
    Ok(n)
}

/// Rewrites `sites` to `to` through the patch protocols (breakpoint for each live site), using
/// `buf` as the batch (at most `buf.len()` sites per call). Sites that did not hold the
/// expected old form are counted in [`BatchStats::failed`] and left as they were.
pub fn update_sites<P: TextPoke>(
    text: &mut P,
    sites: &[JumpSite],
    to: JumpTo,
    buf: &mut [PokeSite],
) -> Result<BatchStats, OutOfRange> {
    let n = poke_sites(sites, to, buf)?;
    Ok(protocol::apply(
        text,
        Arch::X86_64,
        &mut buf[..n],
        Protocol::Auto,
    ))
}

/// What [`update_key`] did to a key's sites.
#[cfg(all(feature = "jump-label", target_arch = "x86_64", not(loom)))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyUpdate {
    /// Sites rewritten.
    pub done: usize,
    /// Sites that held neither form (left as they were).
    pub failed: usize,
    /// Sites not rewritten because their target is beyond a `rel32` (left as they were).
    pub out_of_range: usize,
}

/// Rewrites every site of `key` (ftrace-core's `jump_label::entries_of`) to the form `branch`
/// asks for, in batches of 16 through [`update_sites`]: the platform's patcher
/// (`jump_label::set_patcher`) is this over its own text.
#[cfg(all(feature = "jump-label", target_arch = "x86_64", not(loom)))]
pub fn update_key<P: TextPoke>(
    text: &mut P,
    key: &ftrace_core::static_key::StaticKey,
    branch: ftrace_core::static_key::Branch,
) -> KeyUpdate {
    use ftrace_core::static_key::Branch;
    const BATCH: usize = 16;
    let to = match branch {
        Branch::Enable => JumpTo::Target,
        Branch::Disable => JumpTo::Nop,
    };
    let mut sites = [JumpSite { code: 0, target: 0 }; BATCH];
    let mut buf = [const { PokeSite::empty() }; BATCH];
    let mut all = ftrace_core::jump_label::entries_of(key).peekable();
    let mut update = KeyUpdate::default();
    while all.peek().is_some() {
        let mut n = 0;
        for e in all.by_ref().take(BATCH) {
            sites[n] = JumpSite {
                code: e.code,
                target: e.target,
            };
            n += 1;
        }
        match update_sites(text, &sites[..n], to, &mut buf) {
            Ok(st) => {
                update.done += st.done;
                update.failed += st.failed;
            }
            Err(OutOfRange { .. }) => update.out_of_range += n,
        }
    }
    update
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::SiteStatus;

    #[test]
    fn sites_become_jumps_and_nops() {
        let sites = [
            JumpSite {
                code: 0x2000,
                target: 0x2010,
            },
            JumpSite {
                code: 0x1000,
                target: 0x1100,
            },
        ];
        let mut buf = [const { PokeSite::empty() }; 4];
        assert_eq!(poke_sites(&sites, JumpTo::Target, &mut buf), Ok(2));
        assert_eq!(buf[0].addr(), 0x1000);
        assert_eq!(buf[0].old().as_slice(), NOP5);
        assert_eq!(
            buf[0].new_bytes().as_slice(),
            [0xe9, 0xfb, 0x00, 0x00, 0x00]
        );
        assert_eq!(buf[1].status(), SiteStatus::Pending);
        poke_sites(&sites, JumpTo::Nop, &mut buf).unwrap();
        assert_eq!(buf[1].new_bytes().as_slice(), NOP5);
        let far = [JumpSite {
            code: 0,
            target: 1 << 40,
        }];
        assert!(poke_sites(&far, JumpTo::Target, &mut buf).is_err());
    }
}
