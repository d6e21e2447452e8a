//! Symbol tables: address to name (`%ps`, `sym-offset`) and name patterns to addresses
//! (`set_ftrace_filter`).
//!
//! A backend knows its symbols (ELF symbol tables, kallsyms, a linker-generated table); the core
//! crates only see this trait. [`SymbolTable::lookup`] must be callable while formatting, and
//! [`SymbolTable::for_each`] lists the traceable functions in the order
//! `available_filter_functions` prints them.

/// One function symbol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Symbol<'a> {
    /// The (demangled) name.
    pub name: &'a str,
    /// Start address.
    pub addr: u64,
    /// Size in bytes (what `sym-offset` prints after the `/`).
    pub size: u64,
    /// The module (shared object) it belongs to, if not the main image.
    pub module: Option<&'a str>,
}

impl<'a> Symbol<'a> {
    /// A symbol of the main image (`module: None`).
    pub const fn new(name: &'a str, addr: u64, size: u64) -> Symbol<'a> {
        Symbol {
            name,
            addr,
            size,
            module: None,
        }
    }

    /// Whether `addr` lies inside this symbol.
    #[inline]
    pub fn contains(&self, addr: u64) -> bool {
        addr.wrapping_sub(self.addr) < self.size.max(1)
    }
}

/// A table of function symbols.
pub trait SymbolTable {
    /// The symbol whose range contains `addr`.
    fn lookup(&self, addr: u64) -> Option<Symbol<'_>>;

    /// Calls `f` for every traceable function, in the table's listing order.
    fn for_each(&self, f: &mut dyn FnMut(Symbol<'_>));
}

impl<T: SymbolTable + ?Sized> SymbolTable for &T {
    fn lookup(&self, addr: u64) -> Option<Symbol<'_>> {
        (**self).lookup(addr)
    }
    fn for_each(&self, f: &mut dyn FnMut(Symbol<'_>)) {
        (**self).for_each(f)
    }
}

/// A table over a slice of symbols sorted by address: `const`-constructible, so a `static`
/// (a linker-generated table, a test's handful of functions) can be the symbol table.
#[derive(Clone, Copy, Debug)]
pub struct SymbolSlice<'a>(pub &'a [Symbol<'a>]);

impl SymbolTable for SymbolSlice<'_> {
    fn lookup(&self, addr: u64) -> Option<Symbol<'_>> {
        let i = self.0.partition_point(|s| s.addr <= addr).checked_sub(1)?;
        Some(self.0[i]).filter(|s| s.contains(addr))
    }
    fn for_each(&self, f: &mut dyn FnMut(Symbol<'_>)) {
        self.0.iter().for_each(|s| f(*s))
    }
}

#[cfg(test)]
mod slice_tests {
    use super::*;

    #[test]
    fn a_symbol_slice_finds_the_symbol_containing_an_address() {
        let t = SymbolSlice(&[Symbol::new("a", 0x100, 0x10), Symbol::new("b", 0x200, 0x10)]);
        assert_eq!(t.lookup(0x100).map(|s| s.name), Some("a"));
        assert_eq!(t.lookup(0x10f).map(|s| s.name), Some("a"));
        assert_eq!(t.lookup(0x110), None);
        assert_eq!(t.lookup(0xff), None);
        assert_eq!(t.lookup(0x205).map(|s| s.name), Some("b"));
        let mut seen = 0;
        t.for_each(&mut |s| seen += s.addr);
        assert_eq!(seen, 0x300);
    }
}

#[cfg(feature = "alloc")]
pub use owned::{KallsymsError, SortedSymbols};

#[cfg(feature = "alloc")]
mod owned {
    use alloc::string::String;
    use alloc::vec::Vec;
    use core::fmt;

    use super::{Symbol, SymbolTable};

    #[derive(Clone, Debug, PartialEq, Eq)]
    struct Entry {
        addr: u64,
        size: u64,
        name: String,
        module: Option<String>,
    }

    /// A heap-backed symbol table sorted by address.
    #[derive(Clone, Debug, Default, PartialEq, Eq)]
    pub struct SortedSymbols {
        entries: Vec<Entry>,
    }

    /// A line of `/proc/kallsyms` text that could not be parsed.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct KallsymsError {
        /// 1-based line number.
        pub line: usize,
        /// What was wrong.
        pub reason: &'static str,
    }

    impl fmt::Display for KallsymsError {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "kallsyms line {}: {}", self.line, self.reason)
        }
    }

    impl core::error::Error for KallsymsError {}

    impl SortedSymbols {
        /// An empty table.
        pub fn new() -> Self {
            Self::default()
        }

        /// Adds a symbol. Call [`SortedSymbols::finish`] after the last one.
        pub fn push(&mut self, name: &str, addr: u64, size: u64, module: Option<&str>) {
            self.entries.push(Entry {
                addr,
                size,
                name: name.into(),
                module: module.map(Into::into),
            });
        }

        /// Sorts by address and gives every symbol of size 0 the distance to the next symbol
        /// (how kallsyms sizes are derived).
        pub fn finish(&mut self) {
            self.entries
                .sort_by(|a, b| a.addr.cmp(&b.addr).then_with(|| a.name.cmp(&b.name)));
            for i in 0..self.entries.len() {
                if self.entries[i].size == 0 {
                    let next = self.entries[i + 1..]
                        .iter()
                        .find(|e| e.addr > self.entries[i].addr)
                        .map(|e| e.addr);
                    if let Some(next) = next {
                        self.entries[i].size = next - self.entries[i].addr;
                    }
                }
            }
        }

        /// Parses `/proc/kallsyms` text (`ffffffff81457c10 T vfs_write [module]`), keeping text
        /// symbols (`t`/`T`/`w`/`W`). Sizes are the distance to the next listed symbol.
        pub fn from_kallsyms(text: &str) -> Result<Self, KallsymsError> {
            let mut table = Self::new();
            for (i, line) in text.lines().enumerate() {
                let line_no = i + 1;
                if line.trim().is_empty() {
                    continue;
                }
                // `%px %c %s\t[%s]`: the name runs to the tab before the module, so a
                // demangled name with spaces (`<Vec<T> as Drop>::drop`) stays whole.
                let err = |reason| KallsymsError {
                    line: line_no,
                    reason,
                };
                let (addr, rest) = line
                    .trim_start()
                    .split_once(' ')
                    .ok_or(err("missing symbol type"))?;
                let addr = u64::from_str_radix(addr, 16).map_err(|_| err("bad address"))?;
                let (kind, rest) = rest
                    .trim_start()
                    .split_once(' ')
                    .ok_or(err("missing symbol name"))?;
                let (name, module) = match rest.split_once('\t') {
                    Some((name, module)) => {
                        let module = module.trim().trim_start_matches('[').trim_end_matches(']');
                        (name.trim(), (!module.is_empty()).then_some(module))
                    }
                    None => {
                        // No tab: `name [module]` separated by a space, as some tools print it.
                        let rest = rest.trim();
                        match rest.rsplit_once(' ') {
                            Some((name, m)) if m.starts_with('[') && m.ends_with(']') => {
                                (name.trim_end(), Some(&m[1..m.len() - 1]))
                            }
                            _ => (rest, None),
                        }
                    }
                };
                if name.is_empty() {
                    return Err(err("missing symbol name"));
                }
                if matches!(kind, "t" | "T" | "w" | "W") {
                    table.push(name, addr, 0, module);
                }
            }
            table.finish();
            Ok(table)
        }

        /// Number of symbols.
        pub fn len(&self) -> usize {
            self.entries.len()
        }

        /// Whether the table is empty.
        pub fn is_empty(&self) -> bool {
            self.entries.is_empty()
        }

        /// The symbol called `name`, if any.
        pub fn by_name(&self, name: &str) -> Option<Symbol<'_>> {
            self.entries.iter().find(|e| e.name == name).map(Self::view)
        }

        fn view(e: &Entry) -> Symbol<'_> {
            Symbol {
                name: &e.name,
                addr: e.addr,
                size: e.size,
                module: e.module.as_deref(),
            }
        }
    }

    impl SymbolTable for SortedSymbols {
        fn lookup(&self, addr: u64) -> Option<Symbol<'_>> {
            let idx = self.entries.partition_point(|e| e.addr <= addr);
            let e = self.entries.get(idx.checked_sub(1)?)?;
            let sym = Self::view(e);
            sym.contains(addr).then_some(sym)
        }

        fn for_each(&self, f: &mut dyn FnMut(Symbol<'_>)) {
            for e in &self.entries {
                f(Self::view(e));
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn kallsyms_lookup_and_sizes() {
            let t = SortedSymbols::from_kallsyms(
                "ffffffff81000010 T b\nffffffff81000000 t a\nffffffff81000100 D data\n\
                 ffffffff81000040 T m [mymod]\n",
            )
            .unwrap();
            assert_eq!(t.len(), 3);
            let a = t.lookup(0xffffffff81000004).unwrap();
            assert_eq!((a.name, a.addr, a.size), ("a", 0xffffffff81000000, 0x10));
            assert_eq!(t.lookup(0xffffffff81000010).unwrap().name, "b");
            assert_eq!(t.lookup(0xffffffff8100003f).unwrap().size, 0x30);
            assert_eq!(t.lookup(0xffffffff81000040).unwrap().module, Some("mymod"));
            assert_eq!(t.lookup(0xffffffff80000000), None);
            assert!(SortedSymbols::from_kallsyms("zz T x").is_err());
            assert!(SortedSymbols::from_kallsyms("ffffffff81000000 T").is_err());
        }

        #[test]
        fn kallsyms_names_with_spaces() {
            let t = SortedSymbols::from_kallsyms(
                "1000 t <alloc::vec::Vec<T> as core::ops::drop::Drop>::drop\t[prog]\n\
                 2000 T f(int, char)\n3000 T g [libc.so.6]\n4000 T end\n",
            )
            .unwrap();
            let a = t.lookup(0x1000).unwrap();
            assert_eq!(
                a.name,
                "<alloc::vec::Vec<T> as core::ops::drop::Drop>::drop"
            );
            assert_eq!(a.module, Some("prog"));
            assert_eq!(t.lookup(0x2004).unwrap().name, "f(int, char)");
            assert_eq!(t.lookup(0x2004).unwrap().module, None);
            assert_eq!(t.lookup(0x3000).unwrap().module, Some("libc.so.6"));
        }
    }
}
