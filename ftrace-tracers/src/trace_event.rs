//! Lines of registered trace events (`sched:sched_switch`, `sched:sched_wakeup`, ...) as the
//! kernel's `trace_raw_output_<event>()` prints them: the usual context prefix, `<name>: `,
//! then the event's `print fmt` applied to the record.
//!
//! The print format is interpreted from the event's [`TraceEventFormat`]: a C format string
//! whose arguments are `REC->field` (optionally cast), `__get_str(field)` (a `__data_loc
//! char[]`) or `REC->field ? "a" : "b"` is applied generically (`%d %i %u %x %X %o %c %s %%`
//! with flags, width, precision and `h`/`l`/`ll`/`z` lengths); `sched_switch`,
//! whose `prev_state` argument is a `__print_flags` expression, has its own printer built on
//! the `TASK_REPORT` letters of [`ftrace_core::format::sched`]. A format this module cannot
//! apply prints the fields as `name=value` pairs instead. Invariant: nothing here allocates,
//! so a kernel module can use it.

use core::fmt::{self, Write};

use ftrace_core::format::sched::{PREV_STATE_LETTERS, TASK_REPORT_MAX};
use ftrace_core::format::{Field, FieldArray, TraceEventFormat};

use crate::event::EventRef;
use crate::output::OutputEnv;
use crate::output::context::write_context;

/// The registered event `ev` is an instance of, if any.
pub fn find<'f>(
    formats: &'f [TraceEventFormat],
    ev: &EventRef<'_>,
) -> Option<&'f TraceEventFormat> {
    let id = ev.type_id();
    formats.iter().find(|f| f.id == id)
}

/// One whole `trace` line of a registered event: context, `name: `, body, newline.
pub fn write_event_line(
    out: &mut dyn Write,
    env: &OutputEnv<'_>,
    ev: &EventRef<'_>,
    format: &TraceEventFormat,
) -> fmt::Result {
    write_context(out, env, ev)?;
    write_event_body(out, format, ev.data)
}

/// `<name>: <print fmt applied to data>\n` (`data`: the whole entry, common fields first).
pub fn write_event_body(
    out: &mut dyn Write,
    format: &TraceEventFormat,
    data: &[u8],
) -> fmt::Result {
    write!(out, "{}: ", format.name)?;
    let rec = Rec { format, data };
    if format.system == "sched"
        && format.name == "sched_switch"
        && write_sched_switch(out, &rec).is_some()
    {
        return out.write_char('\n');
    }
    let mut probe = Counter;
    if apply_print_fmt(&mut probe, &rec).is_some() {
        let _ = apply_print_fmt(out, &rec);
    } else {
        write_fields(out, &rec)?;
    }
    out.write_char('\n')
}

/// A sink that only checks that formatting succeeds.
struct Counter;

impl Write for Counter {
    fn write_str(&mut self, _s: &str) -> fmt::Result {
        Ok(())
    }
}

/// A record and its field table.
struct Rec<'a> {
    format: &'a TraceEventFormat,
    data: &'a [u8],
}

impl Rec<'_> {
    fn field(&self, name: &str) -> Option<&'static Field> {
        self.format.field(name)
    }

    /// An integer field, sign-extended when the field is signed.
    fn int(&self, f: &Field) -> Option<u64> {
        let off = f.offset as usize;
        let size = f.size as usize;
        if !(1..=8).contains(&size) || f.array != FieldArray::Scalar {
            return None;
        }
        let b = self.data.get(off..off + size)?;
        let mut v = [0u8; 8];
        v[..size].copy_from_slice(b);
        let raw = u64::from_le_bytes(v);
        Some(if f.signed && size < 8 {
            let shift = 64 - 8 * size as u32;
            (((raw << shift) as i64) >> shift) as u64
        } else {
            raw
        })
    }

    /// A `char[N]` field, or the string a `__data_loc char[]` field locates, up to its NUL.
    fn str(&self, f: &Field) -> Option<&[u8]> {
        let off = f.offset as usize;
        let b = if f.c_type.starts_with("__data_loc") && f.size == 4 {
            let loc = u32::from_le_bytes(self.data.get(off..off + 4)?.try_into().ok()?);
            let (at, len) = ((loc & 0xffff) as usize, (loc >> 16) as usize);
            self.data.get(at..at + len)?
        } else if matches!(f.array, FieldArray::Fixed(_)) && f.c_type.contains("char") {
            self.data.get(off..off + f.size as usize)?
        } else {
            return None;
        };
        Some(&b[..b.iter().position(|&c| c == 0).unwrap_or(b.len())])
    }
}

fn write_bytes(out: &mut dyn Write, b: &[u8]) -> fmt::Result {
    for chunk in b.utf8_chunks() {
        out.write_str(chunk.valid())?;
        for _ in chunk.invalid() {
            out.write_char(char::REPLACEMENT_CHARACTER)?;
        }
    }
    Ok(())
}

/// `sched_switch`'s `TP_printk`.
fn write_sched_switch(out: &mut dyn Write, rec: &Rec<'_>) -> Option<()> {
    let s = |n: &str| rec.field(n).and_then(|f| rec.str(f));
    let i = |n: &str| rec.field(n).and_then(|f| rec.int(f)).map(|v| v as i64);
    let (prev_comm, prev_pid, prev_prio, state) = (
        s("prev_comm")?,
        i("prev_pid")?,
        i("prev_prio")?,
        i("prev_state")? as u64,
    );
    let (next_comm, next_pid, next_prio) = (s("next_comm")?, i("next_pid")?, i("next_prio")?);
    let mut w = || -> fmt::Result {
        out.write_str("prev_comm=")?;
        write_bytes(out, prev_comm)?;
        write!(
            out,
            " prev_pid={} prev_prio={} prev_state=",
            prev_pid as i32, prev_prio as i32
        )?;
        let mut flags = state & (TASK_REPORT_MAX - 1);
        if flags == 0 {
            out.write_char('R')?;
        } else {
            // `__print_flags(..., "|", ...)`: each matching letter, then what is left in hex.
            let mut first = true;
            for (mask, name) in PREV_STATE_LETTERS {
                if flags == 0 {
                    break;
                }
                if flags & mask != mask {
                    continue;
                }
                flags &= !mask;
                if !first {
                    out.write_char('|')?;
                }
                first = false;
                out.write_str(name)?;
            }
            if flags != 0 {
                if !first {
                    out.write_char('|')?;
                }
                write!(out, "0x{flags:x}")?;
            }
        }
        if state & TASK_REPORT_MAX != 0 {
            out.write_char('+')?;
        }
        out.write_str(" ==> next_comm=")?;
        write_bytes(out, next_comm)?;
        write!(
            out,
            " next_pid={} next_prio={}",
            next_pid as i32, next_prio as i32
        )
    };
    w().ok()
}

/// `name=value` for every field (the fallback for print formats this module cannot apply).
fn write_fields(out: &mut dyn Write, rec: &Rec<'_>) -> fmt::Result {
    for (n, f) in rec.format.fields.iter().enumerate() {
        if n > 0 {
            out.write_char(' ')?;
        }
        write!(out, "{}=", f.name)?;
        if let Some(s) = rec.str(f) {
            write_bytes(out, s)?;
        } else if f.c_type.starts_with("__data_loc") {
            // A location outside the record: no string to print.
        } else if let Some(v) = rec.int(f) {
            if f.signed {
                write!(out, "{}", v as i64)?;
            } else {
                write!(out, "{v}")?;
            }
        }
    }
    Ok(())
}

/// Splits `"fmt" "more", ARG, ARG` into the (still escaped) format text parts and the
/// argument list.
fn split_print_fmt(pf: &str) -> Option<(&str, &str)> {
    let b = pf.as_bytes();
    if b.first() != Some(&b'"') {
        return None;
    }
    // Find the end of the last string literal before the first top-level comma.
    let mut i = 0;
    let mut last_end = 0;
    loop {
        while i < b.len() && b[i] == b' ' {
            i += 1;
        }
        if b.get(i) != Some(&b'"') {
            break;
        }
        i += 1;
        while i < b.len() && b[i] != b'"' {
            if b[i] == b'\\' {
                i += 1;
            }
            i += 1;
        }
        if i >= b.len() {
            return None;
        }
        i += 1;
        last_end = i;
    }
    let rest = pf[last_end..].trim_start();
    let args = match rest.strip_prefix(',') {
        Some(a) => a,
        None if rest.is_empty() => "",
        None => return None,
    };
    Some((&pf[..last_end], args))
}

/// The next unescaped character of the format literals (`"a" "b"` joined, C escapes
/// decoded).
struct FmtChars<'a> {
    b: &'a [u8],
    i: usize,
    in_str: bool,
}

impl Iterator for FmtChars<'_> {
    type Item = Option<u8>;

    /// `Some(Some(c))` a character, `Some(None)` an escape this module cannot decode.
    fn next(&mut self) -> Option<Option<u8>> {
        loop {
            let c = *self.b.get(self.i)?;
            self.i += 1;
            if !self.in_str {
                if c == b'"' {
                    self.in_str = true;
                }
                continue;
            }
            return Some(match c {
                b'"' => {
                    self.in_str = false;
                    continue;
                }
                b'\\' => {
                    let e = *self.b.get(self.i)?;
                    self.i += 1;
                    match e {
                        b'n' => Some(b'\n'),
                        b't' => Some(b'\t'),
                        b'\\' => Some(b'\\'),
                        b'"' => Some(b'"'),
                        b'\'' => Some(b'\''),
                        _ => None,
                    }
                }
                c => Some(c),
            });
        }
    }
}

/// One argument of a print format.
enum Arg<'a> {
    /// `REC->field` (optionally behind casts) or `__get_str(field)`.
    Field(&'static Field),
    /// `REC->field ? "yes" : "no"`: one of two strings by whether the field is non-zero.
    Choice(&'static Field, &'a str, &'a str),
}

/// Parses one argument: a field, `__get_str(field)`, or a choice of two string literals.
fn parse_arg<'a>(rec: &Rec<'_>, arg: &'a str) -> Option<Arg<'a>> {
    let a = arg.trim();
    if let Some(name) = a
        .strip_prefix("__get_str(")
        .and_then(|r| r.strip_suffix(')'))
    {
        return rec.field(name.trim()).map(Arg::Field);
    }
    if let Some((cond, rest)) = a.split_once('?') {
        let (yes, no) = rest.split_once(':')?;
        let lit = |s: &'a str| {
            let t = s.trim().strip_prefix('"')?.strip_suffix('"')?;
            (!t.contains(['"', '\\'])).then_some(t)
        };
        return Some(Arg::Choice(arg_field(rec, cond)?, lit(yes)?, lit(no)?));
    }
    arg_field(rec, a).map(Arg::Field)
}

/// One argument: `REC->field`, optionally behind casts.
fn arg_field(rec: &Rec<'_>, arg: &str) -> Option<&'static Field> {
    let mut a = arg.trim();
    while let Some(rest) = a.strip_prefix('(') {
        let close = rest.find(')')?;
        a = rest[close + 1..].trim_start();
    }
    let name = a.strip_prefix("REC->")?;
    if !name.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_') {
        return None;
    }
    rec.field(name)
}

/// Applies the event's print format; `None` if it uses something this module cannot apply.
fn apply_print_fmt(out: &mut dyn Write, rec: &Rec<'_>) -> Option<()> {
    let (lits, args) = split_print_fmt(rec.format.print_fmt)?;
    let mut args = args.split(',').filter(|a| !a.trim().is_empty());
    let mut chars = FmtChars {
        b: lits.as_bytes(),
        i: 0,
        in_str: false,
    };
    let mut lit = [0u8; 4];
    while let Some(c) = chars.next() {
        let c = c?;
        if c != b'%' {
            // Format literal text byte by byte (ASCII in kernel formats).
            lit[0] = c;
            out.write_str(core::str::from_utf8(&lit[..1]).ok()?).ok()?;
            continue;
        }
        let mut spec = Spec::default();
        let mut conv = 0u8;
        for c in chars.by_ref() {
            let c = c?;
            match c {
                b'%' if !spec.started() => {
                    conv = b'%';
                    break;
                }
                b'-' if !spec.has_width => spec.left = true,
                b'0' if !spec.has_width && !spec.in_prec => spec.zero = true,
                b'+' => spec.plus = true,
                b' ' => spec.space = true,
                b'#' => spec.alt = true,
                b'0'..=b'9' => {
                    let d = usize::from(c - b'0');
                    if spec.in_prec {
                        spec.prec = Some(spec.prec.unwrap_or(0) * 10 + d);
                    } else {
                        spec.has_width = true;
                        spec.width = spec.width * 10 + d;
                    }
                }
                b'.' => {
                    spec.in_prec = true;
                    spec.prec = Some(0);
                }
                b'h' => spec.len -= 1,
                b'l' | b'z' | b'j' | b't' => spec.len += 1,
                b'd' | b'i' | b'u' | b'x' | b'X' | b'o' | b'c' | b's' => {
                    conv = c;
                    break;
                }
                _ => return None,
            }
        }
        match conv {
            0 => return None,
            b'%' => out.write_char('%').ok()?,
            _ => match parse_arg(rec, args.next()?)? {
                Arg::Field(f) => write_conv(out, rec, f, conv, &spec)?,
                Arg::Choice(f, yes, no) if conv == b's' => {
                    let pick = if rec.int(f)? != 0 { yes } else { no };
                    pad(out, &spec, pick).ok()?;
                }
                Arg::Choice(..) => return None,
            },
        }
    }
    if args.next().is_some() {
        return None;
    }
    Some(())
}

/// A parsed conversion specification.
#[derive(Default)]
struct Spec {
    left: bool,
    zero: bool,
    plus: bool,
    space: bool,
    alt: bool,
    has_width: bool,
    width: usize,
    in_prec: bool,
    prec: Option<usize>,
    /// -2 `hh`, -1 `h`, 0 none, 1 `l`, 2 `ll`.
    len: i32,
}

impl Spec {
    fn started(&self) -> bool {
        self.left
            || self.zero
            || self.plus
            || self.space
            || self.alt
            || self.has_width
            || self.in_prec
            || self.len != 0
    }
}

/// Writes `s` padded to the spec's width.
fn pad(out: &mut dyn Write, spec: &Spec, s: &str) -> fmt::Result {
    let w = spec.width;
    if spec.left {
        write!(out, "{s:<w$}")
    } else {
        write!(out, "{s:>w$}")
    }
}

/// A small stack buffer for one formatted number.
struct NumBuf {
    b: [u8; 72],
    n: usize,
}

impl Write for NumBuf {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.n + s.len();
        if end > self.b.len() {
            return Err(fmt::Error);
        }
        self.b[self.n..end].copy_from_slice(s.as_bytes());
        self.n = end;
        Ok(())
    }
}

impl NumBuf {
    fn as_str(&self) -> &str {
        core::str::from_utf8(&self.b[..self.n]).unwrap_or("")
    }
}

fn write_conv(out: &mut dyn Write, rec: &Rec<'_>, f: &Field, conv: u8, spec: &Spec) -> Option<()> {
    if conv == b's' {
        let s = rec.str(f)?;
        let s = match spec.prec {
            Some(p) => &s[..s.len().min(p)],
            None => s,
        };
        let mut buf = NumBuf { b: [0; 72], n: 0 };
        let text = match core::str::from_utf8(s) {
            Ok(t) => t,
            Err(_) => {
                for chunk in s.utf8_chunks() {
                    buf.write_str(chunk.valid()).ok()?;
                }
                buf.as_str()
            }
        };
        return pad(out, spec, text).ok();
    }
    let raw = rec.int(f)?;
    // The C argument is converted to the conversion's type (`int` unless a length says).
    let bits = match spec.len {
        ..=-2 => 8,
        -1 => 16,
        0 => 32,
        _ => 64,
    };
    let mask = if bits == 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    let u = raw & mask;
    let s = if bits == 64 {
        u as i64
    } else {
        ((u << (64 - bits)) as i64) >> (64 - bits)
    };
    if conv == b'c' {
        let mut b = [0u8; 4];
        let c = char::from(u as u8).encode_utf8(&mut b);
        return pad(out, spec, c).ok();
    }
    let mut digits = NumBuf { b: [0; 72], n: 0 };
    let neg = matches!(conv, b'd' | b'i') && s < 0;
    let mag = if matches!(conv, b'd' | b'i') {
        s.unsigned_abs()
    } else {
        u
    };
    match conv {
        b'x' => write!(digits, "{mag:x}"),
        b'X' => write!(digits, "{mag:X}"),
        b'o' => write!(digits, "{mag:o}"),
        _ => write!(digits, "{mag}"),
    }
    .ok()?;
    let prefix = match conv {
        b'd' | b'i' if neg => "-",
        b'd' | b'i' if spec.plus => "+",
        b'd' | b'i' if spec.space => " ",
        b'x' if spec.alt && mag != 0 => "0x",
        b'X' if spec.alt && mag != 0 => "0X",
        b'o' if spec.alt => "0",
        _ => "",
    };
    let prec_zeros = spec.prec.map_or(0, |p| p.saturating_sub(digits.n));
    let body_len = prefix.len() + prec_zeros + digits.n;
    let pad_len = spec.width.saturating_sub(body_len);
    let zero_pad = spec.zero && !spec.left && spec.prec.is_none();
    let mut w = || -> fmt::Result {
        if !spec.left && !zero_pad {
            write!(out, "{:pad_len$}", "")?;
        }
        out.write_str(prefix)?;
        if zero_pad {
            write!(out, "{:0>pad_len$}", "")?;
        }
        write!(out, "{:0>prec_zeros$}", "")?;
        out.write_str(digits.as_str())?;
        if spec.left {
            write!(out, "{:pad_len$}", "")?;
        }
        Ok(())
    };
    w().ok()
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use ftrace_core::format::sched::{SCHED_SWITCH, SCHED_WAKEUP};
    use std::string::String;

    fn rec(format: &TraceEventFormat, set: &[(&str, &[u8])]) -> std::vec::Vec<u8> {
        let mut d = std::vec![0u8; format.record_size() as usize];
        d[..2].copy_from_slice(&format.id.to_le_bytes());
        for (name, bytes) in set {
            let f = format.field(name).unwrap();
            d[f.offset as usize..f.offset as usize + bytes.len()].copy_from_slice(bytes);
        }
        d
    }

    fn body(format: &TraceEventFormat, d: &[u8]) -> String {
        let mut s = String::new();
        write_event_body(&mut s, format, d).unwrap();
        s
    }

    #[test]
    fn sched_switch_states() {
        let mk = |state: i64| {
            rec(
                &SCHED_SWITCH,
                &[
                    ("prev_comm", b"sh"),
                    ("prev_pid", &144i32.to_le_bytes()),
                    ("prev_prio", &120i32.to_le_bytes()),
                    ("prev_state", &state.to_le_bytes()),
                    ("next_comm", b"swapper/1"),
                    ("next_prio", &120i32.to_le_bytes()),
                ],
            )
        };
        assert_eq!(
            body(&SCHED_SWITCH, &mk(1)),
            "sched_switch: prev_comm=sh prev_pid=144 prev_prio=120 prev_state=S ==> next_comm=swapper/1 next_pid=0 next_prio=120\n"
        );
        let state = |v: i64| {
            let b = body(&SCHED_SWITCH, &mk(v));
            let s = b.split("prev_state=").nth(1).unwrap();
            String::from(s.split(' ').next().unwrap())
        };
        assert_eq!(state(0), "R");
        assert_eq!(state(0x100), "R+");
        assert_eq!(state(0x80), "I");
        assert_eq!(state(0x20), "Z");
        assert_eq!(state(0x3), "S|D");
        assert_eq!(state(0x102), "D+");
    }

    #[test]
    fn generic_print_fmt_applies_sched_wakeup() {
        let d = rec(
            &SCHED_WAKEUP,
            &[
                ("comm", b"rcu_preempt"),
                ("pid", &18i32.to_le_bytes()),
                ("prio", &120i32.to_le_bytes()),
                ("target_cpu", &1i32.to_le_bytes()),
            ],
        );
        assert_eq!(
            body(&SCHED_WAKEUP, &d),
            "sched_wakeup: comm=rcu_preempt pid=18 prio=120 target_cpu=001\n"
        );
    }

    #[test]
    fn data_loc_strings_and_choices() {
        use ftrace_core::format::{Field, FieldArray};
        let int = |name, offset| Field {
            c_type: "int",
            name,
            array: FieldArray::Scalar,
            offset,
            size: 4,
            signed: true,
        };
        // Linux 6.12's irq:irq_handler_entry and irq:irq_handler_exit.
        let entry_fields: &'static [Field] = std::vec![
            int("irq", 8),
            Field {
                c_type: "__data_loc char[]",
                name: "name",
                array: FieldArray::Scalar,
                offset: 12,
                size: 4,
                signed: false,
            },
        ]
        .leak();
        let entry = TraceEventFormat {
            system: "irq",
            name: "irq_handler_entry",
            id: 900,
            fields: entry_fields,
            print_fmt: "\"irq=%d name=%s\", REC->irq, __get_str(name)",
        };
        let mut d = std::vec![0u8; 16];
        d[8..12].copy_from_slice(&4i32.to_le_bytes());
        d[12..16].copy_from_slice(&((6u32 << 16) | 16).to_le_bytes());
        d.extend_from_slice(b"timer\0");
        assert_eq!(body(&entry, &d), "irq_handler_entry: irq=4 name=timer\n");
        // A location outside the record cannot be printed: the fields are.
        d[12..16].copy_from_slice(&((6u32 << 16) | 40).to_le_bytes());
        assert_eq!(body(&entry, &d), "irq_handler_entry: irq=4 name=\n");

        let exit_fields: &'static [Field] = std::vec![int("irq", 8), int("ret", 12)].leak();
        let exit = TraceEventFormat {
            system: "irq",
            name: "irq_handler_exit",
            id: 901,
            fields: exit_fields,
            print_fmt: "\"irq=%d ret=%s\", REC->irq, REC->ret ? \"handled\" : \"unhandled\"",
        };
        let mut d = std::vec![0u8; 16];
        d[8..12].copy_from_slice(&4i32.to_le_bytes());
        assert_eq!(body(&exit, &d), "irq_handler_exit: irq=4 ret=unhandled\n");
        d[12..16].copy_from_slice(&1i32.to_le_bytes());
        assert_eq!(body(&exit, &d), "irq_handler_exit: irq=4 ret=handled\n");
        // A choice under a numeric conversion is not C: the fields are printed.
        let mut bad = exit;
        bad.print_fmt = "\"irq=%d ret=%d\", REC->irq, REC->ret ? \"a\" : \"b\"";
        assert_eq!(body(&bad, &d), "irq_handler_exit: irq=4 ret=1\n");
    }

    #[test]
    fn conversions_follow_c() {
        let mut f = SCHED_WAKEUP;
        let d = rec(
            &f,
            &[
                ("comm", b"ab"),
                ("pid", &(-5i32).to_le_bytes()),
                ("prio", &255i32.to_le_bytes()),
                ("target_cpu", &7i32.to_le_bytes()),
            ],
        );
        let cases = [
            (
                "\"%05d|%-4d|%+d\", REC->pid, REC->pid, REC->prio",
                "-0005|-5  |+255",
            ),
            (
                "\"%x %#X %o %u\", REC->prio, REC->prio, REC->target_cpu, REC->pid",
                "ff 0XFF 7 4294967291",
            ),
            (
                "\"%.3d %5s|%-4s| %.1s %c%%\", REC->target_cpu, REC->comm, REC->comm, REC->comm, REC->prio",
                "007    ab|ab  | a \u{ff}%",
            ),
            ("\"%ld %hhd\", REC->pid, REC->prio", "-5 -1"),
            ("\"a\" \"b\\tc=%d\", (int)REC->target_cpu", "ab\tc=7"),
        ];
        for (pf, want) in cases {
            f.print_fmt = pf;
            assert_eq!(body(&f, &d), std::format!("sched_wakeup: {want}\n"), "{pf}");
        }
        // What cannot be applied prints the fields.
        f.print_fmt = "\"%ps\", (void *)REC->pid";
        assert_eq!(
            body(&f, &d),
            "sched_wakeup: comm=ab pid=-5 prio=255 target_cpu=7\n"
        );
        f.print_fmt = "\"%d\", REC->nosuch";
        assert!(body(&f, &d).starts_with("sched_wakeup: comm=ab"));
    }
}
