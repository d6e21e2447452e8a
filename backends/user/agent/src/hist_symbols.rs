//! Names for the `.sym` / `.sym-offset` keys of hist tables: the kernel prints them through
//! kallsyms; here each traced process names the addresses of its own tables' keys (only it
//! knows its address space), and the tool prints the merged tables with every process's names.
//!
//! A process resolves its keys when it dumps its tables (`EVENT_HIST`), never while recording:
//! [`key_symbols`] asks the dynamic linker (`dladdr1` with the symbol entry) for the dynamic
//! symbol containing each address, else reads the function symbols of the object's file (its
//! static functions, a program's own); a symbol names an address only if the address lies
//! inside its `[value, value + size)` (the kernel prints the bare address where no symbol
//! covers it, and so do we). Invariant: a name is only
//! ever one the loaded objects' symbol tables give for that address.

use std::collections::BTreeMap;

use ftrace_core::symbols::{Symbol, SymbolTable};
use ftrace_tracefs::hist::{HistDef, KeyDisplay};

use crate::elf::{self, LoadedObject, Scanned};

/// The symbol containing one key address, as a process resolved it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeySymbol {
    /// The key's value: the address named.
    pub addr: u64,
    /// The symbol's (demangled) name.
    pub name: String,
    /// The symbol's start address.
    pub start: u64,
    /// The symbol's size in bytes.
    pub size: u64,
}

/// The dynamic symbol of a loaded object that contains `addr`, if one does.
pub fn resolve_dynamic(addr: u64) -> Option<KeySymbol> {
    const RTLD_DL_SYMENT: libc::c_int = 1;
    let mut sym: *mut libc::c_void = core::ptr::null_mut();
    // SAFETY: dladdr1 only reads the loader's tables for `addr` (any value is fine: it is not
    // dereferenced) and fills `info` and `sym`; the name and the symbol entry it points to
    // belong to a loaded object and are read before this returns.
    unsafe {
        let mut info: libc::Dl_info = core::mem::zeroed();
        if libc::dladdr1(
            addr as *const libc::c_void,
            &mut info,
            &mut sym,
            RTLD_DL_SYMENT,
        ) == 0
            || info.dli_sname.is_null()
            || info.dli_saddr.is_null()
            || sym.is_null()
        {
            return None;
        }
        let size = (*sym.cast::<libc::Elf64_Sym>()).st_size;
        let start = info.dli_saddr as u64;
        if addr.wrapping_sub(start) >= size {
            return None;
        }
        let name = core::ffi::CStr::from_ptr(info.dli_sname).to_str().ok()?;
        Some(KeySymbol {
            addr,
            name: elf::demangle(name),
            start,
            size,
        })
    }
}

/// The symbols of the `.sym` / `.sym-offset` key values of a table of `def` holding `keys`
/// (compound keys), each address once, in address order.
pub fn key_symbols<'a>(def: &HistDef, keys: impl IntoIterator<Item = &'a [u8]>) -> Vec<KeySymbol> {
    let slots: Vec<(usize, usize)> = def
        .keys
        .iter()
        .filter(|k| matches!(k.display, KeyDisplay::Sym | KeyDisplay::SymOffset))
        .map(|k| (k.offset, k.size))
        .collect();
    if slots.is_empty() {
        return Vec::new();
    }
    let mut addrs: Vec<u64> = keys
        .into_iter()
        .flat_map(|key| {
            slots.iter().filter_map(|&(off, size)| {
                let slot = key.get(off..off + size.min(8))?;
                Some(u64::from_le_bytes(slot.try_into().ok()?))
            })
        })
        .collect();
    addrs.sort_unstable();
    addrs.dedup();
    let mut files = ObjectSymbols::default();
    addrs
        .into_iter()
        .filter_map(|a| resolve_dynamic(a).or_else(|| files.resolve(a)))
        .collect()
}

/// The function symbols (`.symtab` and `.dynsym`) of the loaded objects' files, read the
/// first time an address of the object needs a name no dynamic symbol gives (a static
/// function, a program's own function).
#[derive(Default)]
struct ObjectSymbols {
    objects: Option<Vec<(LoadedObject, Option<Scanned>)>>,
}

impl ObjectSymbols {
    fn resolve(&mut self, addr: u64) -> Option<KeySymbol> {
        let objects = self.objects.get_or_insert_with(|| {
            elf::loaded_objects()
                .into_iter()
                .map(|o| (o, None))
                .collect()
        });
        let (obj, scanned) = objects.iter_mut().find(|(o, _)| o.is_exec(addr))?;
        let scanned = scanned.get_or_insert_with(|| match elf::MappedFile::open(&obj.path) {
            Ok(file) => elf::scan(obj, &file, elf::read_own_memory, elf::Symbols::All),
            Err(_) => Scanned::default(),
        });
        let f = scanned.func_at(addr)?;
        (f.size > 0).then(|| KeySymbol {
            addr,
            name: elf::demangle(&f.name),
            start: f.addr,
            size: f.size,
        })
    }
}

/// The names the processes of a tree gave their key addresses, for printing their merged
/// tables: looked up by exact address (two processes may map different objects at one
/// address: each named only the addresses its own keys hold). The first name given for an
/// address wins.
#[derive(Clone, Debug, Default)]
pub struct KeySymbols(BTreeMap<u64, KeySymbol>);

impl KeySymbols {
    /// Adds the names one process gave (an address already named keeps its name).
    pub fn extend(&mut self, syms: &[KeySymbol]) {
        for s in syms {
            self.0.entry(s.addr).or_insert_with(|| s.clone());
        }
    }
}

impl SymbolTable for KeySymbols {
    fn lookup(&self, addr: u64) -> Option<Symbol<'_>> {
        self.0
            .get(&addr)
            .map(|s| Symbol::new(&s.name, s.start, s.size))
    }
    fn for_each(&self, f: &mut dyn FnMut(Symbol<'_>)) {
        for s in self.0.values() {
            f(Symbol::new(&s.name, s.start, s.size));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_an_address_inside_a_function_and_not_past_it() {
        // Dynamic symbols only: the test binary exports none of its own, libc does.
        let malloc = libc::malloc as *const () as usize as u64;
        let s = resolve_dynamic(malloc + 1).expect("malloc is a dynamic symbol of libc");
        assert_eq!(
            (s.name.as_str(), s.start, s.addr),
            ("malloc", malloc, malloc + 1)
        );
        assert!(s.size > 1);
        assert_eq!(resolve_dynamic(0), None);
    }

    #[test]
    fn first_name_wins_and_lookup_is_by_exact_address() {
        let mut t = KeySymbols::default();
        let a = KeySymbol {
            addr: 0x1010,
            name: "a".into(),
            start: 0x1000,
            size: 0x40,
        };
        let b = KeySymbol {
            name: "b".into(),
            ..a.clone()
        };
        t.extend(&[a]);
        t.extend(&[b]);
        assert_eq!(t.lookup(0x1010).map(|s| s.name), Some("a"));
        assert_eq!(t.lookup(0x1011), None);
    }
}
