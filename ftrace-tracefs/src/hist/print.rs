//! The `hist` file (`hist_show`), byte for byte as Linux 6.12 prints it.
//!
//! Per hist trigger of the event, in trigger order: a blank-line pair between triggers, the
//! `# event histogram` header with the trigger's own line, one line per entry (the keys in
//! braces, `hitcount`, the values) in [`sorted_entries`] order, then `Totals:` with the map's
//! hits, entries and drops.

use alloc::string::String;
use core::fmt::{self, Write};

use ftrace_core::symbols::SymbolTable;
use ftrace_tracers::output::write_sym;

use super::def::{HistDef, KeyDisplay, ValDisplay};
use super::map::HistMap;
use super::sort::sorted_entries;
use crate::triggers::Trigger;

/// What printing needs from the host: symbols for `.sym`/`.sym-offset` and system call names
/// for `.syscall`.
pub struct HistNames<'a> {
    /// The kernel's (or program's) text symbols.
    pub symbols: &'a dyn SymbolTable,
    /// The name of system call `nr` (`sys_read`), if there is one.
    pub syscall: &'a dyn Fn(u64) -> Option<&'a str>,
}

/// `%pS` (`sprint_symbol`): `name+0xoff/0xsize`, ` [module]` for a module's symbol, or the
/// address in hex when no symbol covers it.
fn write_sym_offset(w: &mut dyn Write, syms: &dyn SymbolTable, addr: u64) -> fmt::Result {
    match syms.lookup(addr) {
        Some(sym) => {
            write!(w, "{}+{:#x}/{:#x}", sym.name, addr - sym.addr, sym.size)?;
            if let Some(m) = sym.module {
                write!(w, " [{m}]")?;
            }
            Ok(())
        }
        None => write!(w, "{addr:#x}"),
    }
}

/// `%-Ns`: `s` left-aligned in `width` columns.
fn pad(w: &mut dyn Write, s: &str, width: usize) -> fmt::Result {
    write!(w, "{s:<width$}")
}

/// `hist_trigger_print_key`.
fn write_key(
    w: &mut dyn Write,
    def: &HistDef,
    map: &HistMap,
    e: usize,
    names: &HistNames<'_>,
) -> fmt::Result {
    w.write_str("{ ")?;
    let key = map.key(e);
    for (i, k) in def.keys.iter().enumerate() {
        if i > 0 {
            w.write_str(", ")?;
        }
        let slot = &key[k.offset..k.offset + k.size];
        let v = u64::from_le_bytes(slot[..8].try_into().unwrap_or([0; 8]));
        let name = &k.name;
        match k.display {
            KeyDisplay::Hex => write!(w, "{name}: {v:x}")?,
            KeyDisplay::Sym | KeyDisplay::SymOffset => {
                let mut s = String::new();
                let width = if k.display == KeyDisplay::Sym {
                    write_sym(&mut s, names.symbols, v)?;
                    45
                } else {
                    write_sym_offset(&mut s, names.symbols, v)?;
                    55
                };
                write!(w, "{name}: [{v:x}] ")?;
                pad(w, &s, width)?;
            }
            KeyDisplay::Execname => {
                let comm = String::from_utf8_lossy(map.comm(e));
                write!(w, "{name}: ")?;
                pad(w, &comm, 16)?;
                write!(w, "[{v:10}]")?;
            }
            KeyDisplay::Syscall => {
                let sc = (names.syscall)(v).unwrap_or("unknown_syscall");
                write!(w, "{name}: ")?;
                pad(w, sc, 30)?;
                write!(w, "[{v:3}]")?;
            }
            KeyDisplay::Log2 => write!(w, "{name}: ~ 2^{v:<2}")?,
            KeyDisplay::Buckets(n) => {
                write!(w, "{name}: ~ {v}-{}", v.wrapping_add(n).wrapping_sub(1))?
            }
            KeyDisplay::String => {
                let end = slot.iter().position(|&c| c == 0).unwrap_or(slot.len());
                write!(w, "{name}: ")?;
                pad(w, &String::from_utf8_lossy(&slot[..end]), 50)?;
            }
            KeyDisplay::Plain => write!(w, "{name}: {v:10}")?,
        }
    }
    w.write_str(" }")
}

/// `__get_percentage`: 100 times the percentage of `val` in `total` (`None` for the
/// kernel's `UINT_MAX`, a nonzero share of nothing).
fn percentage(val: u64, total: u64) -> Option<u32> {
    if total == 0 {
        return (val == 0).then_some(0);
    }
    if val < u64::MAX / 10000 {
        return Some((val * 10000 / total) as u32);
    }
    let total = total / 10000;
    if total == 0 {
        return (val == 0).then_some(0);
    }
    Some((val / total) as u32)
}

/// `hist_trigger_print_val`.
fn write_val(
    w: &mut dyn Write,
    name: &str,
    display: ValDisplay,
    val: u64,
    (max, total): (u64, u64),
) -> fmt::Result {
    match display {
        ValDisplay::Percent => match percentage(val, total) {
            Some(pc) => write!(w, " {name} (%): {:3}.{:02}", pc / 100, pc % 100),
            None => write!(w, " {name} (%):[ERROR]"),
        },
        ValDisplay::Graph => {
            write!(w, " {name}: ")?;
            match percentage(val, max) {
                None => write!(w, "{:>20}", "[ERROR]"),
                Some(pc) => {
                    let len = (pc as usize * 20 / 10000).min(20);
                    for _ in 0..len {
                        w.write_char('#')?;
                    }
                    for _ in len..20 {
                        w.write_char(' ')?;
                    }
                    Ok(())
                }
            }
        }
        ValDisplay::Hex => write!(w, " {name}: {val:10x}"),
        ValDisplay::Plain => write!(w, " {name}: {val:10}"),
    }
}

/// One trigger's part of the `hist` file (`hist_trigger_show`); `n` is its index among the
/// event's hist triggers.
pub fn write_hist(
    w: &mut dyn Write,
    n: usize,
    trigger: &Trigger,
    def: &HistDef,
    map: &HistMap,
    names: &HistNames<'_>,
) -> fmt::Result {
    if n > 0 {
        w.write_str("\n\n")?;
    }
    write!(w, "# event histogram\n#\n# trigger info: {trigger}#\n\n")?;
    let entries = sorted_entries(def, map);
    // The column maximum and total of every `.percent`/`.graph` value.
    let stats = |i: usize| {
        entries.iter().fold((0u64, 0u64), |(max, total), &e| {
            let v = map.sums(e)[i];
            (max.max(v), total.wrapping_add(v))
        })
    };
    for &e in &entries {
        write_key(w, def, map, e, names)?;
        let sums = map.sums(e);
        if !def.no_hitcount {
            write_val(w, "hitcount", ValDisplay::Plain, sums[0], (0, 0))?;
        }
        for (i, v) in def.vals.iter().enumerate() {
            w.write_char(' ')?;
            let st = match v.display {
                ValDisplay::Percent | ValDisplay::Graph => stats(i + 1),
                _ => (0, 0),
            };
            write_val(w, &v.name, v.display, sums[i + 1], st)?;
        }
        w.write_char('\n')?;
    }
    write!(
        w,
        "\nTotals:\n    Hits: {}\n    Entries: {}\n    Dropped: {}\n",
        map.hits(),
        entries.len(),
        map.drops()
    )
}
