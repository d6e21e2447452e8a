// SPDX-License-Identifier: GPL-2.0
//! kallsyms as an ftrace-core [`SymbolTable`]: address to name for the trace file.
//!
//! 6.12 exports no name-returning kallsyms lookup to modules but `sprint_symbol()`, which prints
//! `name+0xoff/0xsize [module]` into a buffer. [`KallsymsCache`] parses that and keeps each
//! symbol it resolved in a fixed arena, so the `&str` it hands out stays valid for as long as
//! the cache is borrowed. Invariant: entries are only ever appended (never moved or
//! overwritten) while the cache is shared; [`KallsymsCache::reset`] needs `&mut self`.
//! When the arena is full, lookups answer `None` and the formatter prints the raw address.

use core::cell::{Cell, UnsafeCell};

use ftrace_core::symbols::{Symbol, SymbolTable};

use crate::shim;

const MAX_SYMS: usize = 128;
const ARENA: usize = 16 * 1024;
/// Room for `sprint_symbol()`'s output: at least KSYM_SYMBOL_LEN (666 on 6.12 x86_64; checked
/// against the shim at init).
pub(crate) const KSYM_SYMBOL_LEN: usize = 1024;

#[derive(Clone, Copy)]
struct Sym {
    addr: u64,
    size: u64,
    name: (u32, u32),           // arena range
    module: Option<(u32, u32)>, // arena range
}

/// A kallsyms lookup cache (one per reader).
pub(crate) struct KallsymsCache {
    syms: UnsafeCell<[Sym; MAX_SYMS]>,
    nsyms: Cell<usize>,
    arena: UnsafeCell<[u8; ARENA]>,
    used: Cell<usize>,
    scratch: UnsafeCell<[u8; KSYM_SYMBOL_LEN]>,
}

// SAFETY: the cache is used by one reader at a time (the module's single-reader lock); Sync is
// needed only to keep it in a static.
unsafe impl Sync for KallsymsCache {}

fn parse_hex(s: &[u8]) -> Option<u64> {
    let s = s.strip_prefix(b"0x")?;
    let mut v: u64 = 0;
    for &c in s {
        let d = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            _ => return None,
        };
        v = v.checked_mul(16)?.checked_add(d as u64)?;
    }
    Some(v)
}

impl KallsymsCache {
    /// An empty cache.
    pub(crate) const fn new() -> Self {
        KallsymsCache {
            syms: UnsafeCell::new(
                [Sym {
                    addr: 0,
                    size: 0,
                    name: (0, 0),
                    module: None,
                }; MAX_SYMS],
            ),
            nsyms: Cell::new(0),
            arena: UnsafeCell::new([0; ARENA]),
            used: Cell::new(0),
            scratch: UnsafeCell::new([0; KSYM_SYMBOL_LEN]),
        }
    }

    /// Forgets every entry (no borrow can be alive: `&mut self`).
    pub(crate) fn reset(&mut self) {
        self.nsyms.set(0);
        self.used.set(0);
    }

    fn str_at(&self, (start, end): (u32, u32)) -> &str {
        let (start, end) = (start as usize, end as usize);
        // SAFETY: start..end lies below `used` (it was handed out by push_str), and bytes below
        // `used` are never written again while `self` is shared. Only that range is borrowed.
        let bytes = unsafe {
            core::slice::from_raw_parts(self.arena.get().cast::<u8>().add(start), end - start)
        };
        // The bytes were copied from a validated &str.
        core::str::from_utf8(bytes).unwrap_or("?")
    }

    fn push_str(&self, s: &[u8]) -> Option<(u32, u32)> {
        let start = self.used.get();
        let end = start.checked_add(s.len())?;
        if end > ARENA {
            return None;
        }
        // SAFETY: writes only start..end, in the unused tail of the arena, which no handed-out
        // &str covers (through a raw pointer: no reference to the whole arena is made).
        unsafe {
            core::ptr::copy_nonoverlapping(
                s.as_ptr(),
                self.arena.get().cast::<u8>().add(start),
                s.len(),
            )
        };
        self.used.set(end);
        Some((start as u32, end as u32))
    }

    fn sym(&self, s: &Sym) -> Symbol<'_> {
        Symbol {
            name: self.str_at(s.name),
            addr: s.addr,
            size: s.size,
            module: s.module.map(|m| self.str_at(m)),
        }
    }

    /// Resolves `addr` through `sprint_symbol` and appends it; `None` when kallsyms does not know
    /// it or the cache is full.
    fn resolve(&self, addr: u64) -> Option<Sym> {
        if self.nsyms.get() == MAX_SYMS {
            return None;
        }
        // SAFETY: the scratch buffer is only used inside this call (no borrow escapes it) and
        // the reader is single-threaded; it is KSYM_SYMBOL_LEN bytes as sprint_symbol requires.
        let buf = unsafe { &mut *self.scratch.get() };
        // SAFETY: buf is KSYM_SYMBOL_LEN bytes (checked against the shim at module init).
        let n = unsafe { shim::rfl_shim_sprint_symbol(buf.as_mut_ptr().cast(), addr as usize) };
        let text = &buf[..(n.max(0) as usize).min(buf.len())];
        core::str::from_utf8(text).ok()?;
        // "name+0xoff/0xsize" or "name+0xoff/0xsize [module]"; a bare "0x..." when unknown.
        let plus = text.iter().rposition(|&c| c == b'+')?;
        let (name, rest) = (&text[..plus], &text[plus + 1..]);
        let slash = rest.iter().position(|&c| c == b'/')?;
        let off = parse_hex(&rest[..slash])?;
        let rest = &rest[slash + 1..];
        let (size, module) = match rest.iter().position(|&c| c == b' ') {
            Some(sp) => {
                let m = &rest[sp + 1..];
                let m = m.strip_prefix(b"[")?.strip_suffix(b"]")?;
                (parse_hex(&rest[..sp])?, Some(m))
            }
            None => (parse_hex(rest)?, None),
        };
        let save = self.used.get();
        let name = self.push_str(name);
        let module = match module {
            Some(m) => Some(self.push_str(m)),
            None => None,
        };
        let (Some(name), Some(module)) = (name, module.map_or(Some(None), |m| m.map(Some))) else {
            self.used.set(save);
            return None;
        };
        let s = Sym {
            addr: addr.wrapping_sub(off),
            size,
            name,
            module,
        };
        let i = self.nsyms.get();
        // SAFETY: i < MAX_SYMS; slot i is past every entry a reader may be looking at (they
        // borrow only 0..i), and it is written through a raw pointer to that slot alone.
        unsafe { self.syms.get().cast::<Sym>().add(i).write(s) };
        self.nsyms.set(i + 1);
        Some(s)
    }
}

impl SymbolTable for KallsymsCache {
    fn lookup(&self, addr: u64) -> Option<Symbol<'_>> {
        let n = self.nsyms.get();
        // SAFETY: entries below nsyms are never written again while `self` is shared; only
        // that prefix is borrowed.
        let syms = unsafe { core::slice::from_raw_parts(self.syms.get().cast::<Sym>(), n) };
        if let Some(s) = syms
            .iter()
            .find(|s| addr.wrapping_sub(s.addr) < s.size.max(1))
        {
            return Some(self.sym(s));
        }
        let s = self.resolve(addr)?;
        Some(self.sym(&s))
    }

    /// kallsyms cannot be listed from a module on 6.12 (`kallsyms_on_each_symbol` is not
    /// exported); this table lists what it has resolved so far. Filtering by name is done by
    /// the kernel's own `ftrace_set_filter()` in this backend.
    fn for_each(&self, f: &mut dyn FnMut(Symbol<'_>)) {
        let n = self.nsyms.get();
        // SAFETY: as in lookup.
        let syms = unsafe { core::slice::from_raw_parts(self.syms.get().cast::<Sym>(), n) };
        for s in syms {
            f(self.sym(s));
        }
    }
}
