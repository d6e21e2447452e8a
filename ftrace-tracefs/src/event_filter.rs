//! Trace-event filter expressions (`events/<sys>/<event>/filter`, `trigger ... if <filter>`).
//!
//! The kernel's grammar (`kernel/trace/trace_events_filter.c`): predicates `field op value`
//! joined by `&&`, `||`, `!` and parentheses; `op` is one of `~ != == <= < >= > &`; a value is
//! a number (base 0, `-` allowed for signed fields) or a quoted string (string fields only,
//! with `==`, `!=` and the glob operator `~`). Parsing follows the kernel's passes so that a
//! bad filter fails with the same errno, message and caret position: the unbalanced-quote and
//! parenthesis pre-pass (`calc_stack`, whose failures surface as `EPERM`, `ENOENT` or `ESRCH`,
//! the kernel's raw return values), the predicate loop, and `parse_pred`'s field, operator and
//! value checks. Invariant: [`parse`] never has side effects; a successful parse yields an
//! [`EventFilter`] whose [`EventFilter::matches`] evaluates a record as the kernel's program
//! would.

use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write as _;

use ftrace_core::Errno;
use ftrace_core::format::{Field, FieldArray, TraceEventFormat};

use crate::parse::{is_space, kstrtoull};

/// `MAX_FILTER_STR_VAL`: the longest string operand.
pub const MAX_FILTER_STR_VAL: usize = 256;

/// The messages of the kernel's `FILT_ERR_*` codes that [`parse`] can produce.
pub mod msg {
    /// `FILT_ERR_INVALID_OP`.
    pub const INVALID_OP: &str = "Invalid operator";
    /// `FILT_ERR_TOO_MANY_OPEN`.
    pub const TOO_MANY_OPEN: &str = "Too many '('";
    /// `FILT_ERR_TOO_MANY_CLOSE`.
    pub const TOO_MANY_CLOSE: &str = "Too few '('";
    /// `FILT_ERR_MISSING_QUOTE`.
    pub const MISSING_QUOTE: &str = "Missing matching quote";
    /// `FILT_ERR_OPERAND_TOO_LONG`.
    pub const OPERAND_TOO_LONG: &str = "Operand too long";
    /// `FILT_ERR_EXPECT_STRING`.
    pub const EXPECT_STRING: &str = "Expecting string field";
    /// `FILT_ERR_EXPECT_DIGIT`.
    pub const EXPECT_DIGIT: &str = "Expecting numeric field";
    /// `FILT_ERR_ILLEGAL_FIELD_OP`.
    pub const ILLEGAL_FIELD_OP: &str = "Illegal operation for field type";
    /// `FILT_ERR_FIELD_NOT_FOUND`.
    pub const FIELD_NOT_FOUND: &str = "Field not found";
    /// `FILT_ERR_ILLEGAL_INTVAL`.
    pub const ILLEGAL_INTVAL: &str = "Illegal integer value";
    /// `FILT_ERR_BAD_SUBSYS_FILTER`.
    pub const BAD_SUBSYS_FILTER: &str = "Couldn't find or set field in one of a subsystem's events";
    /// `FILT_ERR_TOO_MANY_PREDS`.
    pub const TOO_MANY_PREDS: &str = "Too many terms in predicate expression";
    /// `FILT_ERR_INVALID_VALUE`.
    pub const INVALID_VALUE: &str = "Invalid value (did you forget quotes)?";
    /// `FILT_ERR_NO_FILTER`.
    pub const NO_FILTER: &str = "No filter found";
    /// `FILT_ERR_ERRNO`: the message of a failure without a parse error.
    pub const ERRNO: &str = "Error";
}

/// The `error_log` location of every filter error.
pub const ERROR_LOCATION: &str = "event filter parse error";

/// Why a filter was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FilterError {
    /// What the write returns.
    pub errno: Errno,
    /// The parse error's message, or `None` when the kernel fails without one (an empty
    /// filter, a predicate without a field name): it then shows `Error: (0)`.
    pub msg: Option<&'static str>,
    /// The parse error's position (`lasterr_pos`).
    pub pos: usize,
}

impl FilterError {
    fn at(errno: Errno, msg: &'static str, pos: usize) -> Self {
        FilterError {
            errno,
            msg: Some(msg),
            pos,
        }
    }

    /// The `error_log` message and caret position (`tracing_log_err` as `append_filter_err`
    /// calls it).
    pub fn log_entry(&self) -> (&'static str, usize) {
        match self.msg {
            Some(m) => (m, self.pos),
            None => (msg::ERRNO, 0),
        }
    }

    /// The text a `filter` file shows after this error (`append_filter_err`): the filter, a
    /// caret line and `parse_error: <msg>`, or `Error: (0)` without a parse error.
    pub fn annotate(&self, filter: &str) -> String {
        let mut s = String::from(filter);
        match self.msg {
            Some(m) => {
                let mut pos = self.pos.min(filter.len());
                if pos > 0 {
                    pos += 1;
                }
                let _ = write!(s, "\n{:>pos$}\nparse_error: {m}\n", "^");
            }
            None => s.push_str("\nError: (0)\n"),
        }
        s
    }
}

/// A comparison operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `~` (glob match, strings only).
    Glob,
    /// `!=`.
    Ne,
    /// `==`.
    Eq,
    /// `<=`.
    Le,
    /// `<`.
    Lt,
    /// `>=`.
    Ge,
    /// `>`.
    Gt,
    /// `&` (any bit in common).
    Band,
}

/// The kernel's `ops[]`, in matching order (`<=` before `<`).
const OPS: [(&str, Op); 8] = [
    ("~", Op::Glob),
    ("!=", Op::Ne),
    ("==", Op::Eq),
    ("<=", Op::Le),
    ("<", Op::Lt),
    (">=", Op::Ge),
    (">", Op::Gt),
    ("&", Op::Band),
];

/// What a filter (or hist) field name resolves to (`trace_find_event_field`: the event's own
/// fields, then the generic ones, then the common ones).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldRef {
    /// A field of the record.
    Event(&'static Field),
    /// `CPU`, `cpu` (and `common_cpu`): the CPU the event happened on.
    Cpu,
    /// `COMM`, `comm`: the current task's name.
    Comm,
    /// `stacktrace`, `STACKTRACE`.
    Stacktrace,
}

/// Resolves a field name of `event` the way the kernel does.
pub fn find_field(event: &TraceEventFormat, name: &str) -> Option<FieldRef> {
    if let Some(f) = event.fields.iter().find(|f| f.name == name) {
        return Some(FieldRef::Event(f));
    }
    match name {
        "CPU" | "cpu" | "common_cpu" => return Some(FieldRef::Cpu),
        "COMM" | "comm" => return Some(FieldRef::Comm),
        "stacktrace" | "STACKTRACE" => return Some(FieldRef::Stacktrace),
        _ => {}
    }
    ftrace_core::format::COMMON_FIELDS
        .iter()
        .find(|f| f.name == name)
        .map(FieldRef::Event)
}

/// Whether a field holds a string (`is_string_field`: static and dynamic `char` arrays,
/// `char *`, the generic `COMM`).
pub fn is_string_field(f: FieldRef) -> bool {
    match f {
        FieldRef::Comm => true,
        FieldRef::Cpu | FieldRef::Stacktrace => false,
        FieldRef::Event(f) => {
            (f.c_type.contains("char")
                && (f.array != FieldArray::Scalar || f.c_type.contains("__data_loc")))
                || f.c_type == "char *"
                || f.c_type == "const char *"
        }
    }
}

/// A string pattern (`filter_build_regex`).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Pattern {
    Full(Vec<u8>),
    Front(Vec<u8>),
    Middle(Vec<u8>),
    End(Vec<u8>),
    Glob(Vec<u8>),
}

/// The value side of a predicate.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Value {
    Num(u64),
    Str(Pattern),
}

/// One predicate.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Pred {
    field: FieldRef,
    op: Op,
    value: Value,
}

/// A parsed expression.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Expr {
    Pred(Pred),
    Not(Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
}

/// A parsed, valid filter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventFilter {
    text: String,
    expr: Expr,
}

/// What a record offers besides its bytes: the CPU and task name of the generic fields.
#[derive(Clone, Copy, Debug, Default)]
pub struct RecordCtx<'a> {
    /// The CPU the record was written on.
    pub cpu: u32,
    /// The writing task's name.
    pub comm: &'a [u8],
}

impl EventFilter {
    /// The filter text as written (what `filter` reads back).
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Whether `record` (the whole entry, common fields first) passes the filter.
    pub fn matches(&self, record: &[u8], cx: &RecordCtx<'_>) -> bool {
        eval(&self.expr, record, cx)
    }
}

fn eval(e: &Expr, rec: &[u8], cx: &RecordCtx<'_>) -> bool {
    match e {
        Expr::Not(e) => !eval(e, rec, cx),
        Expr::And(a, b) => eval(a, rec, cx) && eval(b, rec, cx),
        Expr::Or(a, b) => eval(a, rec, cx) || eval(b, rec, cx),
        Expr::Pred(p) => eval_pred(p, rec, cx),
    }
}

fn read_num(f: &Field, rec: &[u8]) -> Option<u64> {
    let off = f.offset as usize;
    let b = rec.get(off..off + f.size as usize)?;
    let mut v = [0u8; 8];
    v[..b.len().min(8)].copy_from_slice(&b[..b.len().min(8)]);
    let raw = u64::from_le_bytes(v);
    Some(if f.signed && f.size < 8 {
        let shift = 64 - 8 * f.size;
        (((raw << shift) as i64) >> shift) as u64
    } else {
        raw
    })
}

/// A string field's bytes: in place for a `char[N]`, where its `__data_loc` (`len << 16 |
/// offset`) points for a dynamic string; empty if that lies outside the record.
fn field_bytes<'r>(f: &Field, rec: &'r [u8]) -> &'r [u8] {
    let off = f.offset as usize;
    let raw = rec.get(off..off + f.size as usize).unwrap_or(&[]);
    if !f.c_type.contains("__data_loc") {
        return raw;
    }
    let Ok(loc) = <[u8; 4]>::try_from(raw).map(u32::from_le_bytes) else {
        return &[];
    };
    let (at, len) = ((loc & 0xffff) as usize, (loc >> 16) as usize);
    rec.get(at..at + len).unwrap_or(&[])
}

fn eval_pred(p: &Pred, rec: &[u8], cx: &RecordCtx<'_>) -> bool {
    match (&p.value, p.field) {
        (Value::Str(pat), field) => {
            let s: &[u8] = match field {
                FieldRef::Comm => cx.comm,
                FieldRef::Event(f) => field_bytes(f, rec),
                _ => &[],
            };
            let s = &s[..s.iter().position(|&b| b == 0).unwrap_or(s.len())];
            let m = match pat {
                Pattern::Full(p) => s == p.as_slice(),
                Pattern::Front(p) => s.starts_with(p),
                Pattern::Middle(p) => s.windows(p.len().max(1)).any(|w| w == p.as_slice()),
                Pattern::End(p) => s.ends_with(p),
                Pattern::Glob(p) => glob_match(p, s),
            };
            m != (p.op == Op::Ne)
        }
        (Value::Num(v), field) => {
            let (x, signed) = match field {
                FieldRef::Cpu => (u64::from(cx.cpu), true),
                FieldRef::Event(f) => match read_num(f, rec) {
                    Some(x) => (x, f.signed),
                    None => return false,
                },
                _ => return false,
            };
            let v = *v;
            let ord = if signed {
                (x as i64).cmp(&(v as i64))
            } else {
                x.cmp(&v)
            };
            match p.op {
                Op::Eq => x == v,
                Op::Ne => x != v,
                Op::Lt => ord.is_lt(),
                Op::Le => ord.is_le(),
                Op::Gt => ord.is_gt(),
                Op::Ge => ord.is_ge(),
                Op::Band => x & v != 0,
                Op::Glob => false,
            }
        }
    }
}

/// `glob_match()`: `*`, `?`, `[...]` and `\` escapes.
pub fn glob_match(pat: &[u8], s: &[u8]) -> bool {
    let (mut p, mut i) = (0, 0);
    let (mut star_p, mut star_i) = (usize::MAX, 0);
    while i < s.len() {
        if p < pat.len() {
            match pat[p] {
                b'*' => {
                    star_p = p;
                    star_i = i;
                    p += 1;
                    continue;
                }
                b'?' => {
                    p += 1;
                    i += 1;
                    continue;
                }
                b'[' => {
                    if let Some((ok, next)) = class_match(pat, p, s[i]) {
                        if ok {
                            p = next;
                            i += 1;
                            continue;
                        }
                    } else if s[i] == b'[' {
                        p += 1;
                        i += 1;
                        continue;
                    }
                }
                b'\\' if p + 1 < pat.len() && pat[p + 1] == s[i] => {
                    p += 2;
                    i += 1;
                    continue;
                }
                b'\\' if p + 1 < pat.len() => {}
                c if c == s[i] => {
                    p += 1;
                    i += 1;
                    continue;
                }
                _ => {}
            }
        }
        if star_p == usize::MAX {
            return false;
        }
        p = star_p + 1;
        star_i += 1;
        i = star_i;
    }
    pat[p..].iter().all(|&c| c == b'*')
}

/// Matches `c` against the class starting at `pat[p] == '['`; `None` if it is unterminated.
fn class_match(pat: &[u8], p: usize, c: u8) -> Option<(bool, usize)> {
    let mut j = p + 1;
    let inv = matches!(pat.get(j), Some(b'!') | Some(b'^'));
    if inv {
        j += 1;
    }
    let mut ok = false;
    let mut first = true;
    while j < pat.len() && (first || pat[j] != b']') {
        first = false;
        let lo = pat[j];
        if pat.get(j + 1) == Some(&b'-') && j + 2 < pat.len() && pat[j + 2] != b']' {
            ok |= (lo..=pat[j + 2]).contains(&c);
            j += 3;
        } else {
            ok |= lo == c;
            j += 1;
        }
    }
    (j < pat.len()).then_some((ok != inv, j + 1))
}

/// `filter_parse_regex`: the pattern type of a `~` operand (and `!` negation).
fn build_pattern(op: Op, text: &[u8]) -> (Pattern, bool) {
    if op != Op::Glob {
        return (Pattern::Full(text.to_vec()), false);
    }
    let (not, buf) = match text.split_first() {
        Some((b'!', rest)) => (true, rest),
        _ => (false, text),
    };
    if buf.first().is_some_and(u8::is_ascii_digit) {
        return (Pattern::Full(buf.to_vec()), not);
    }
    let len = buf.len();
    let mut kind = 0; // 0 full, 1 end only, 2 front only, 3 middle
    let mut cut = len;
    for (i, &b) in buf.iter().enumerate() {
        if b == b'*' {
            if i == 0 {
                kind = 1;
            } else if i == len - 1 {
                kind = if kind == 1 { 3 } else { 2 };
                cut = i;
                break;
            } else {
                return (Pattern::Glob(buf.to_vec()), not);
            }
        } else if b"[?\\".contains(&b) {
            return (Pattern::Glob(buf.to_vec()), not);
        }
    }
    let start = usize::from(buf.first() == Some(&b'*')).min(cut);
    let body = buf[start..cut].to_vec();
    let pat = match kind {
        1 => Pattern::End(body),
        2 => Pattern::Front(body),
        3 => Pattern::Middle(body),
        _ => Pattern::Full(body),
    };
    (pat, not)
}

/// `calc_stack`: quotes and parentheses; the number of predicates.
fn calc_stack(s: &[u8]) -> Result<usize, FilterError> {
    let mut is_pred = false;
    let mut nr_preds = 0;
    let mut open = 1;
    let mut quote = 0u8;
    let mut last_quote = 0;
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        i += 1;
        if is_space(c) {
            continue;
        }
        if quote != 0 {
            if c == quote {
                quote = 0;
            }
            continue;
        }
        match c {
            b'\'' | b'"' => {
                quote = c;
                last_quote = i - 1;
            }
            b'|' | b'&' if s.get(i) == Some(&c) => {
                is_pred = false;
                continue;
            }
            b'(' => {
                is_pred = false;
                open += 1;
                continue;
            }
            b')' => {
                is_pred = false;
                if open == 1 {
                    return Err(FilterError::at(Errno::EPERM, msg::TOO_MANY_CLOSE, i - 1));
                }
                open -= 1;
                continue;
            }
            _ => {}
        }
        if !is_pred {
            nr_preds += 1;
            is_pred = true;
        }
    }
    if quote != 0 {
        return Err(FilterError::at(
            Errno::ESRCH,
            msg::MISSING_QUOTE,
            last_quote,
        ));
    }
    if open != 1 {
        // Find the '(' left open, scanning back (the kernel stops before index 0).
        let mut level = open;
        let mut q = 0u8;
        let mut j = s.len();
        while j > 1 {
            j -= 1;
            let c = s[j];
            if q != 0 {
                if c == q {
                    q = 0;
                }
                continue;
            }
            match c {
                b'(' => {
                    if level == open {
                        return Err(FilterError::at(Errno::ENOENT, msg::TOO_MANY_OPEN, j));
                    }
                    level -= 1;
                }
                b')' => level += 1,
                b'\'' | b'"' => q = c,
                _ => {}
            }
        }
        return Err(FilterError::at(Errno::ENOENT, msg::TOO_MANY_OPEN, 0));
    }
    Ok(nr_preds)
}

/// A token of the predicate loop.
#[derive(Debug)]
enum Tok {
    Open,
    Not,
    Pred(Pred),
    And,
    Or,
    Close,
}

/// `parse_pred`: one predicate at `s[start..]`; `pos` is the kernel's position base
/// (`start + 1`). Returns the predicate and the bytes it used.
fn parse_pred(
    event: &TraceEventFormat,
    s: &[u8],
    start: usize,
    pos: usize,
) -> Result<(Pred, usize), FilterError> {
    let str_ = &s[start..];
    let at = |i: usize| str_.get(i).copied().unwrap_or(0);
    let mut i = 0;
    while is_space(at(i)) {
        i += 1;
    }
    let name_start = i;
    while at(i).is_ascii_alphanumeric() || at(i) == b'_' {
        i += 1;
    }
    if i == name_start {
        return Err(FilterError {
            errno: Errno::EPERM,
            msg: None,
            pos: 0,
        });
    }
    let name = core::str::from_utf8(&str_[name_start..i]).unwrap_or("");
    let Some(field) = find_field(event, name) else {
        return Err(FilterError::at(
            Errno::EINVAL,
            msg::FIELD_NOT_FOUND,
            pos + i,
        ));
    };
    if str_[i..].starts_with(b".ustring") {
        i += 8;
    }
    while is_space(at(i)) {
        i += 1;
    }
    let Some(&(op_text, op)) = OPS
        .iter()
        .find(|(t, _)| str_[i..].starts_with(t.as_bytes()))
    else {
        return Err(FilterError::at(Errno::EINVAL, msg::INVALID_OP, pos + i));
    };
    i += op_text.len();
    while is_space(at(i)) {
        i += 1;
    }
    let s0 = i;
    let c = at(i);
    let value = if c == b'\'' || c == b'"' {
        if !matches!(op, Op::Ne | Op::Glob | Op::Eq) {
            return Err(FilterError::at(
                Errno::EINVAL,
                msg::ILLEGAL_FIELD_OP,
                pos + i,
            ));
        }
        if !is_string_field(field) {
            return Err(FilterError::at(Errno::EINVAL, msg::EXPECT_DIGIT, pos + i));
        }
        i += 1;
        while at(i) != 0 && at(i) != c {
            i += 1;
        }
        if at(i) == 0 {
            return Err(FilterError::at(Errno::EINVAL, msg::MISSING_QUOTE, pos + i));
        }
        let body = &str_[s0 + 1..i];
        if body.len() >= MAX_FILTER_STR_VAL {
            return Err(FilterError::at(
                Errno::EINVAL,
                msg::OPERAND_TOO_LONG,
                pos + i,
            ));
        }
        i += 1;
        let (pat, not) = build_pattern(op, body);
        let negated = not || op == Op::Ne;
        return Ok((
            Pred {
                field,
                op: if negated { Op::Ne } else { Op::Eq },
                value: Value::Str(pat),
            },
            i,
        ));
    } else if c.is_ascii_digit() || c == b'-' {
        if is_string_field(field) {
            return Err(FilterError::at(Errno::EINVAL, msg::EXPECT_STRING, pos + i));
        }
        if op == Op::Glob {
            return Err(FilterError::at(
                Errno::EINVAL,
                msg::ILLEGAL_FIELD_OP,
                pos + i,
            ));
        }
        if c == b'-' {
            i += 1;
        }
        while at(i).is_ascii_alphanumeric() {
            i += 1;
        }
        let num = &str_[s0..i];
        if num.len() >= 24 {
            return Err(FilterError::at(
                Errno::EINVAL,
                msg::OPERAND_TOO_LONG,
                pos + i,
            ));
        }
        let signed = match field {
            FieldRef::Event(f) => f.signed,
            FieldRef::Cpu => true,
            _ => false,
        };
        let v = if signed {
            kstrtoll(num)
        } else {
            kstrtoull(num, 0)
        };
        let Ok(v) = v else {
            return Err(FilterError::at(
                Errno::EINVAL,
                msg::ILLEGAL_INTVAL,
                pos + s0,
            ));
        };
        Value::Num(v)
    } else {
        return Err(FilterError::at(Errno::EINVAL, msg::INVALID_VALUE, pos + i));
    };
    Ok((Pred { field, op, value }, i))
}

/// `kstrtoll(s, 0)`: a signed number, returned as its two's-complement bits.
fn kstrtoll(s: &[u8]) -> Result<u64, Errno> {
    if let [b'-', rest @ ..] = s {
        let v = kstrtoull(rest, 0)?;
        if v > 1 << 63 {
            return Err(Errno::ERANGE);
        }
        Ok(v.wrapping_neg())
    } else {
        let v = kstrtoull(s, 0)?;
        if v > i64::MAX as u64 {
            return Err(Errno::ERANGE);
        }
        Ok(v)
    }
}

/// Parses `text` as a filter for `event` (`create_filter` / `process_preds`).
pub fn parse(event: &TraceEventFormat, text: &str) -> Result<EventFilter, FilterError> {
    let s = text.as_bytes();
    let nr_preds = calc_stack(s)?;
    if nr_preds == 0 {
        return Err(FilterError {
            errno: Errno::EINVAL,
            msg: None,
            pos: 0,
        });
    }
    let nr_preds = nr_preds + 2;
    let mut toks = Vec::new();
    let mut depth = 0usize;
    let mut ptr = 0usize;
    let mut n = 0;
    let at = |i: usize| s.get(i).copied().unwrap_or(0);
    // `ret` of the kernel's loop: -ENOMEM before the first predicate, -1 after.
    let mut after_pred = false;
    let fail = |after_pred: bool, m: &'static str, pos: usize| {
        FilterError::at(
            if after_pred {
                Errno::EPERM
            } else {
                Errno::ENOMEM
            },
            m,
            pos,
        )
    };
    'outer: while at(ptr) != 0 {
        let next = ptr;
        ptr += 1;
        let c = s[next];
        if is_space(c) {
            continue;
        }
        match c {
            b'(' => {
                depth += 1;
                toks.push(Tok::Open);
                continue;
            }
            b'!' if !matches!(at(next + 1), b'=' | b'~') => {
                toks.push(Tok::Not);
                continue;
            }
            _ => {}
        }
        if n >= nr_preds {
            return Err(fail(after_pred, msg::TOO_MANY_PREDS, next));
        }
        let (pred, len) = parse_pred(event, s, next, ptr)?;
        toks.push(Tok::Pred(pred));
        ptr = next + len;
        n += 1;
        after_pred = true;
        loop {
            let next = ptr;
            ptr += 1;
            let c = at(next);
            if c != 0 && is_space(c) {
                continue;
            }
            match c {
                b')' | 0 => {}
                b'&' | b'|' if at(next + 1) == c => ptr += 1,
                _ => return Err(fail(true, msg::TOO_MANY_PREDS, next)),
            }
            match c {
                b'&' => {
                    toks.push(Tok::And);
                    break;
                }
                b'|' => {
                    toks.push(Tok::Or);
                    break;
                }
                0 => break 'outer,
                _ => {
                    if depth == 0 {
                        return Err(fail(true, msg::TOO_MANY_CLOSE, ptr));
                    }
                    depth -= 1;
                    toks.push(Tok::Close);
                }
            }
        }
    }
    if depth != 0 {
        return Err(fail(after_pred, msg::TOO_MANY_OPEN, ptr));
    }
    if n == 0 {
        return Err(FilterError::at(
            Errno::EINVAL,
            msg::NO_FILTER,
            ptr.min(s.len()),
        ));
    }
    let mut it = toks.into_iter().peekable();
    let expr = parse_or(&mut it).ok_or(FilterError::at(Errno::EINVAL, msg::INVALID_VALUE, 0))?;
    Ok(EventFilter {
        text: String::from(text),
        expr,
    })
}

type Toks = core::iter::Peekable<alloc::vec::IntoIter<Tok>>;

fn parse_or(it: &mut Toks) -> Option<Expr> {
    let mut e = parse_and(it)?;
    while matches!(it.peek(), Some(Tok::Or)) {
        it.next();
        e = Expr::Or(Box::new(e), Box::new(parse_and(it)?));
    }
    Some(e)
}

fn parse_and(it: &mut Toks) -> Option<Expr> {
    let mut e = parse_unary(it)?;
    while matches!(it.peek(), Some(Tok::And)) {
        it.next();
        e = Expr::And(Box::new(e), Box::new(parse_unary(it)?));
    }
    Some(e)
}

fn parse_unary(it: &mut Toks) -> Option<Expr> {
    match it.next()? {
        Tok::Not => Some(Expr::Not(Box::new(parse_unary(it)?))),
        Tok::Open => {
            let e = parse_or(it)?;
            // A missing ')' at the end of the text is implied (the kernel closes at '\0').
            if matches!(it.peek(), Some(Tok::Close)) {
                it.next();
            }
            Some(e)
        }
        Tok::Pred(p) => Some(Expr::Pred(p)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ftrace_core::format::sched::{SCHED_SWITCH, SCHED_WAKEUP};

    fn err(text: &str) -> FilterError {
        parse(&SCHED_SWITCH, text).unwrap_err()
    }

    #[test]
    fn data_loc_strings_are_followed() {
        use ftrace_core::format::{Field, TraceEventFormat};
        static FIELDS: [Field; 1] = [Field {
            c_type: "__data_loc char[]",
            name: "name",
            array: FieldArray::Scalar,
            offset: 8,
            size: 4,
            signed: false,
        }];
        static NAMED: TraceEventFormat = TraceEventFormat {
            system: "t",
            name: "named",
            id: 900,
            fields: &FIELDS,
            print_fmt: "\"%s\", __get_str(name)",
        };
        let mut rec = alloc::vec![0u8; 12];
        rec[8..12].copy_from_slice(&((6u32 << 16) | 12).to_le_bytes());
        rec.extend_from_slice(b"timer\0");
        let cx = RecordCtx { cpu: 0, comm: b"" };
        let yes = |f: &str| parse(&NAMED, f).unwrap().matches(&rec, &cx);
        assert!(yes("name == \"timer\""));
        assert!(yes("name ~ \"tim*\""));
        assert!(!yes("name == \"time\""));
        assert!(yes("name != \"sync\""));
    }

    #[test]
    fn accepts_the_kernel_grammar() {
        for f in [
            "prev_pid == 1",
            "prev_pid != 1 && (next_prio < 100 || next_comm ~ \"kwork*\")",
            "!(prev_state & 2)",
            "common_pid >= 0x10",
            "prev_comm == 'sh'",
            "next_prio <= -1",
            "cpu == 1 || comm != \"swapper/0\"",
            "prev_pid==1&&next_pid==2",
        ] {
            assert!(parse(&SCHED_SWITCH, f).is_ok(), "{f}");
        }
    }

    #[test]
    fn errors_carry_the_kernel_position_and_errno() {
        let e = err("bogus == 1");
        assert_eq!(
            (e.errno, e.msg, e.pos),
            (Errno::EINVAL, Some(msg::FIELD_NOT_FOUND), 6)
        );
        assert_eq!(
            e.annotate("bogus == 1"),
            "bogus == 1\n      ^\nparse_error: Field not found\n"
        );
        assert_eq!(err("prev_pid = 1").msg, Some(msg::INVALID_OP));
        assert_eq!(err("prev_pid == abc").msg, Some(msg::INVALID_VALUE));
        assert_eq!(err("prev_comm == 1").msg, Some(msg::EXPECT_STRING));
        assert_eq!(err("prev_pid == \"x\"").msg, Some(msg::EXPECT_DIGIT));
        assert_eq!(err("prev_comm < \"x\"").msg, Some(msg::ILLEGAL_FIELD_OP));
        assert_eq!(err("prev_pid ~ 1").msg, Some(msg::ILLEGAL_FIELD_OP));
        assert_eq!(err("prev_pid == 1x").msg, Some(msg::ILLEGAL_INTVAL));
        // The pre-pass answers with its raw return values.
        assert_eq!(err("(prev_pid == 1").errno, Errno::ENOENT);
        assert_eq!(err("prev_pid == 1)").errno, Errno::EPERM);
        assert_eq!(err("prev_comm == \"x").errno, Errno::ESRCH);
        // Two predicates without an operator between them.
        let e = err("prev_pid == 1 next_pid == 2");
        assert_eq!((e.errno, e.msg), (Errno::EPERM, Some(msg::TOO_MANY_PREDS)));
        // Nothing to parse: no parse error, `Error: (0)`.
        let e = err("");
        assert_eq!((e.errno, e.msg), (Errno::EINVAL, None));
        assert_eq!(e.annotate(""), "\nError: (0)\n");
        assert_eq!(err("== 1").errno, Errno::EPERM);
        // An unsigned field refuses a negative number.
        assert!(parse(&SCHED_WAKEUP, "common_type == -1").is_err());
    }

    #[test]
    fn evaluates_records() {
        let mut rec = [0u8; 64];
        rec[8..10].copy_from_slice(b"sh");
        rec[24..28].copy_from_slice(&144i32.to_le_bytes());
        rec[32..40].copy_from_slice(&1i64.to_le_bytes());
        rec[40..49].copy_from_slice(b"swapper/1");
        rec[60..64].copy_from_slice(&(-1i32).to_le_bytes());
        let cx = RecordCtx {
            cpu: 1,
            comm: b"sh",
        };
        let t = |f: &str| parse(&SCHED_SWITCH, f).unwrap().matches(&rec, &cx);
        assert!(t("prev_pid == 144"));
        assert!(!t("prev_pid != 144"));
        assert!(t("next_prio < 0"));
        assert!(t("prev_state & 1 && next_comm ~ \"swapper*\""));
        assert!(t("next_comm ~ \"*/1\" || prev_pid == 0"));
        assert!(t("!(prev_pid == 1) && cpu == 1"));
        assert!(t("prev_comm == \"sh\""));
        assert!(!t("prev_comm ~ \"!sh\""));
        assert!(t("next_comm ~ \"sw?pper/[0-9]\""));
        assert!(!t("(prev_pid == 1 || prev_pid == 2) && next_prio < 0"));
    }
}
