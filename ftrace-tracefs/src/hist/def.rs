//! A `hist` trigger compiled against its event: where each key and value comes from in a
//! record, how it is shown, where it sits in the map's key, and the sort order.
//!
//! Compiled from the [`HistSpec`] the trigger parser accepted (its printed field texts, the
//! canonical form `hist_field_print` gives: `next_pid.hex`, `bytes_req.buckets=32`) and the
//! event's field table. Invariant: every key slot is 8-byte aligned and as wide as the kernel
//! makes it (`ALIGN(size, sizeof(u64))`; 256 bytes for a dynamic string), so two keys compare
//! and print as the kernel's `tracing_map` compares and prints them.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use ftrace_core::format::{Field, FieldArray, TraceEventFormat};

use crate::event_filter::{self, FieldRef};
use crate::parse::kstrtoull;
use crate::triggers::HistSpec;

/// `MAX_FILTER_STR_VAL`: the key width of a dynamic string.
const MAX_FILTER_STR_VAL: u32 = 256;

/// Where a hist field's value comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldSource {
    /// A numeric field of the record (`hist_field_u8` ... `hist_field_s64`): loaded with its
    /// size and signedness, widened to `u64` (signed fields sign-extended).
    Number {
        /// Byte offset in the record.
        offset: u32,
        /// 1, 2, 4 or 8.
        size: u32,
        /// Sign-extend when widening.
        signed: bool,
    },
    /// A fixed `char` array of the record (`hist_field_string`).
    FixedString {
        /// Byte offset in the record.
        offset: u32,
        /// The array size.
        size: u32,
    },
    /// A `__data_loc char[]` of the record (`hist_field_dynstring`): a `u32` whose low half is
    /// the string's offset and high half its length.
    DynString {
        /// Offset of the `u32` locator.
        offset: u32,
    },
    /// `common_cpu`: the CPU the event happened on.
    Cpu,
}

impl FieldSource {
    fn of(f: FieldRef) -> Result<Self, HistError> {
        match f {
            FieldRef::Cpu => Ok(FieldSource::Cpu),
            FieldRef::Event(fd) if event_filter::is_string_field(f) => {
                if fd.c_type.contains("__data_loc") {
                    Ok(FieldSource::DynString { offset: fd.offset })
                } else if fd.array != FieldArray::Scalar {
                    Ok(FieldSource::FixedString {
                        offset: fd.offset,
                        size: fd.size,
                    })
                } else {
                    Err(HistError::Unsupported("a string pointer field"))
                }
            }
            FieldRef::Event(Field {
                offset,
                size: size @ (1 | 2 | 4 | 8),
                signed,
                ..
            }) => Ok(FieldSource::Number {
                offset: *offset,
                size: *size,
                signed: *signed,
            }),
            FieldRef::Event(_) => Err(HistError::Unsupported("a field of this size")),
            FieldRef::Comm => Err(HistError::Unsupported("the comm field")),
            FieldRef::Stacktrace => Err(HistError::Unsupported("stacktrace keys")),
        }
    }

    /// Whether it is a string.
    pub fn is_string(self) -> bool {
        matches!(
            self,
            FieldSource::FixedString { .. } | FieldSource::DynString { .. }
        )
    }

    /// The numeric value of the field in `rec` (0 where the record is too short).
    pub fn number(self, rec: &[u8], cpu: u32) -> u64 {
        let FieldSource::Number {
            offset,
            size,
            signed,
        } = self
        else {
            return if self == FieldSource::Cpu {
                u64::from(cpu)
            } else {
                0
            };
        };
        let (o, n) = (offset as usize, size as usize);
        let Some(bytes) = rec.get(o..o + n) else {
            return 0;
        };
        let mut b = [0u8; 8];
        b[..n].copy_from_slice(bytes);
        let v = u64::from_le_bytes(b);
        if signed && n < 8 {
            let shift = 64 - 8 * n as u32;
            (((v << shift) as i64) >> shift) as u64
        } else {
            v
        }
    }

    /// The string bytes of the field in `rec`, up to its first NUL, at most `max` bytes (the
    /// length `add_to_key` copies).
    pub fn string(self, rec: &[u8], max: usize) -> &[u8] {
        let (start, len) = match self {
            FieldSource::FixedString { offset, size } => (offset as usize, size as usize),
            FieldSource::DynString { offset } => {
                let o = offset as usize;
                let Some(loc) = rec.get(o..o + 4) else {
                    return &[];
                };
                let loc = u32::from_le_bytes([loc[0], loc[1], loc[2], loc[3]]);
                ((loc & 0xffff) as usize, (loc >> 16) as usize)
            }
            _ => return &[],
        };
        let end = start.saturating_add(len.min(max)).min(rec.len());
        let s = rec.get(start..end).unwrap_or(&[]);
        let nul = s.iter().position(|&c| c == 0).unwrap_or(s.len());
        &s[..nul]
    }
}

/// How a key is turned into its map value and printed (`hist_trigger_print_key`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyDisplay {
    /// `%10llu`.
    Plain,
    /// `.hex`: `%llx`.
    Hex,
    /// `.sym`: `[%llx] %-45ps`.
    Sym,
    /// `.sym-offset`: `[%llx] %-55pS`.
    SymOffset,
    /// `.execname` of `common_pid`: `%-16s[%10llu]` with the task name saved when the entry
    /// was created.
    Execname,
    /// `.syscall`: `%-30s[%3llu]` with the system call's name.
    Syscall,
    /// `.log2`: the key is `order_base_2(value)`, printed `~ 2^%-2llu`.
    Log2,
    /// `.buckets=N`: the key is the value rounded down to a multiple of N, printed
    /// `~ %llu-%llu`.
    Buckets(u64),
    /// A string key: `%-50s`.
    String,
}

/// A key of the map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyField {
    /// `hist_field_name`: the field's name without its modifier.
    pub name: String,
    /// Where its value comes from.
    pub source: FieldSource,
    /// How it is transformed and printed.
    pub display: KeyDisplay,
    /// Its slot in the compound key: byte offset and width (a multiple of 8).
    pub offset: usize,
    /// The slot width.
    pub size: usize,
    /// How the slot compares when sorting (`tracing_map_cmp_num` of the field's size and
    /// signedness, or `strcmp`).
    pub cmp: KeyCmp,
}

/// A key slot's comparison (`tracing_map_cmp_*`): the slot's `u64` cast to the field's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyCmp {
    /// Compare as an unsigned integer of this many bytes.
    Unsigned(u32),
    /// Compare as a signed integer of this many bytes.
    Signed(u32),
    /// `strcmp`.
    String,
}

/// How a value (a sum) is printed (`hist_trigger_print_val`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValDisplay {
    /// `%10llu`.
    Plain,
    /// `.hex`: `%10llx`.
    Hex,
    /// `.percent`: the share of the column's total, `%3u.%02u`.
    Percent,
    /// `.graph`: a 20-character bar scaled to the column's maximum.
    Graph,
}

/// A summed value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValField {
    /// `hist_field_name`.
    pub name: String,
    /// Where its value comes from.
    pub source: FieldSource,
    /// How it is printed.
    pub display: ValDisplay,
}

/// What a sort key orders by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortField {
    /// A sum: 0 is `hitcount`, `i` the `i`th value after it.
    Sum(usize),
    /// A key slot (index into [`HistDef::keys`]).
    Key(usize),
}

/// One sort key (`tracing_map_sort_key`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SortKey {
    /// What it orders by.
    pub field: SortField,
    /// `.descending`.
    pub descending: bool,
}

/// A hist trigger's definition, ready to aggregate records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistDef {
    /// The keys, in the order they print.
    pub keys: Vec<KeyField>,
    /// The values after `hitcount`.
    pub vals: Vec<ValField>,
    /// The sort keys: the first orders, the second breaks its ties.
    pub sort: Vec<SortKey>,
    /// The compound key's size in bytes.
    pub key_size: usize,
    /// How many entries the map holds (`size=`, `1 << map_bits`).
    pub max_entries: usize,
    /// `nohitcount`: `hitcount` is neither printed nor a sort default.
    pub no_hitcount: bool,
}

/// Why a hist trigger cannot be aggregated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HistError {
    /// A feature of the trigger language the aggregation does not implement yet.
    Unsupported(&'static str),
    /// A field text the parser printed that the event does not have.
    NoField(String),
}

impl fmt::Display for HistError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HistError::Unsupported(what) => {
                write!(f, "hist aggregation of {what} is not supported")
            }
            HistError::NoField(name) => write!(f, "hist field {name}: no such field"),
        }
    }
}

/// A field text split into its field and modifier (`next_pid.hex` -> `next_pid`, `hex`).
fn split_modifier(text: &str) -> (&str, Option<&str>) {
    match text.split_once('.') {
        Some((f, m)) => (f, Some(m)),
        None => (text, None),
    }
}

fn resolve(event: &TraceEventFormat, name: &str) -> Result<FieldSource, HistError> {
    if name.contains(['+', '-', '*', '/', '$', '(']) || name.as_bytes()[0].is_ascii_digit() {
        return Err(HistError::Unsupported(
            "expressions, constants and variables",
        ));
    }
    if name == "common_timestamp" {
        return Err(HistError::Unsupported("common_timestamp"));
    }
    let f = event_filter::find_field(event, name).ok_or_else(|| HistError::NoField(name.into()))?;
    FieldSource::of(f)
}

impl HistDef {
    /// Compiles `spec` (as the trigger parser accepted it) for `event`.
    pub fn compile(spec: &HistSpec, event: &TraceEventFormat) -> Result<HistDef, HistError> {
        if !spec.vars.is_empty() {
            return Err(HistError::Unsupported("variables"));
        }
        let mut keys = Vec::new();
        let mut offset = 0;
        for text in &spec.keys {
            let (name, modifier) = split_modifier(text);
            if name == "common_stacktrace" || modifier == Some("stacktrace") {
                return Err(HistError::Unsupported("stacktrace keys"));
            }
            let source = resolve(event, name)?;
            let display = match modifier {
                None if source.is_string() => KeyDisplay::String,
                None => KeyDisplay::Plain,
                Some("hex") => KeyDisplay::Hex,
                Some("sym") => KeyDisplay::Sym,
                Some("sym-offset") => KeyDisplay::SymOffset,
                Some("execname") => KeyDisplay::Execname,
                Some("syscall") => KeyDisplay::Syscall,
                Some("log2") => KeyDisplay::Log2,
                Some(m) => match m.strip_prefix("buckets=") {
                    Some(n) => KeyDisplay::Buckets(
                        kstrtoull(n.as_bytes(), 0)
                            .ok()
                            .filter(|&n| n != 0)
                            .ok_or(HistError::Unsupported("this bucket size"))?,
                    ),
                    None => return Err(HistError::Unsupported("this key modifier")),
                },
            };
            let (width, cmp) = match source {
                FieldSource::FixedString { size, .. } => (size, KeyCmp::String),
                FieldSource::DynString { .. } => (MAX_FILTER_STR_VAL, KeyCmp::String),
                FieldSource::Number { size, signed, .. } if signed => (size, KeyCmp::Signed(size)),
                FieldSource::Number { size, .. } => (size, KeyCmp::Unsigned(size)),
                FieldSource::Cpu => (4, KeyCmp::Unsigned(8)),
            };
            let size = (width as usize).next_multiple_of(8);
            keys.push(KeyField {
                name: String::from(name),
                source,
                display,
                offset,
                size,
                cmp,
            });
            offset += size;
        }
        let mut vals = Vec::new();
        for text in &spec.vals {
            let (name, modifier) = split_modifier(text);
            let source = resolve(event, name)?;
            if source.is_string() {
                return Err(HistError::Unsupported("string values"));
            }
            let display = match modifier {
                None => ValDisplay::Plain,
                Some("hex") => ValDisplay::Hex,
                Some(m) if m.starts_with("percent") => ValDisplay::Percent,
                Some(m) if m.starts_with("graph") => ValDisplay::Graph,
                Some(_) => return Err(HistError::Unsupported("this value modifier")),
            };
            vals.push(ValField {
                name: String::from(name),
                source,
                display,
            });
        }
        let mut sort = Vec::new();
        for text in &spec.sort {
            let (text, descending) = match text.strip_suffix(".descending") {
                Some(t) => (t, true),
                None => (text.as_str(), false),
            };
            // `create_sort_keys` finds the first field of that name, values before keys.
            let field = if text == "hitcount" {
                SortField::Sum(0)
            } else if let Some(i) = spec.vals.iter().position(|v| v == text) {
                SortField::Sum(i + 1)
            } else if let Some(i) = spec.keys.iter().position(|k| k == text) {
                SortField::Key(i)
            } else {
                return Err(HistError::NoField(String::from(text)));
            };
            sort.push(SortKey { field, descending });
        }
        Ok(HistDef {
            keys,
            vals,
            sort,
            key_size: offset,
            max_entries: 1 << spec.map_bits,
            no_hitcount: spec.no_hitcount,
        })
    }

    /// Whether an entry saves the task name of its creator (an `.execname` key).
    pub fn saves_comm(&self) -> bool {
        self.keys.iter().any(|k| k.display == KeyDisplay::Execname)
    }

    /// Writes `rec`'s compound key into `key` (`key_size` bytes, zeroed first), as
    /// `event_hist_trigger` builds it.
    pub fn build_key(&self, rec: &[u8], cpu: u32, key: &mut [u8]) {
        key.fill(0);
        for k in &self.keys {
            let slot = &mut key[k.offset..k.offset + k.size];
            if k.source.is_string() {
                let s = k.source.string(rec, k.size - 1);
                slot[..s.len()].copy_from_slice(s);
                continue;
            }
            let v = k.source.number(rec, cpu);
            let v = match k.display {
                KeyDisplay::Log2 => order_base_2(v),
                KeyDisplay::Buckets(n) => v / n * n,
                _ => v,
            };
            slot[..8].copy_from_slice(&v.to_le_bytes());
        }
    }
}

/// `order_base_2`: the exponent of the smallest power of two >= `v` (0 for 0 and 1).
pub fn order_base_2(v: u64) -> u64 {
    if v <= 1 {
        0
    } else {
        u64::from(64 - (v - 1).leading_zeros())
    }
}
