//! Event triggers (`events/<sys>/<event>/trigger`): the kernel's commands, parsed and checked
//! as `kernel/trace/trace_events_trigger.c` and `trace_events_hist.c` do.
//!
//! Commands: `traceon`, `traceoff`, `snapshot`, `stacktrace` (each with an optional `:count`
//! and `if <filter>`), `enable_event`/`disable_event`/`enable_hist`/`disable_hist` with
//! `:<system>:<event>[:count]`, and `hist:keys=...[:vals=...][:sort=...][:size=...]...`; a
//! leading `!` removes. A hist command that names a field the event lacks fails with `EINVAL`
//! and an `error_log` entry exactly as the kernel writes it: location `hist:<sys>:<event>`,
//! the command as `hist:` plus what followed the command word, and the caret where the
//! kernel's `errpos()` puts it (the first occurrence of the offending text in that command).
//! Invariant: [`parse`] only parses and checks; it returns what to add or remove, and the
//! caller applies it (duplicates, soft mode, registration) so a failed write changes nothing.

use alloc::borrow::ToOwned;
use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::{self, Write as _};

use ftrace_core::Errno;
use ftrace_core::format::TraceEventFormat;

use crate::event_filter::{self, FieldRef, is_string_field};
use crate::parse::{is_space, kstrtoull};

/// The `error_log` callback: location, message, command, caret position.
pub type LogFn<'a> = dyn FnMut(&str, &'static str, &str, u16) + 'a;

/// The command names, in the order `# Available triggers:` lists them.
pub const COMMANDS: [&str; 9] = [
    "traceon",
    "traceoff",
    "snapshot",
    "stacktrace",
    "enable_event",
    "disable_event",
    "enable_hist",
    "disable_hist",
    "hist",
];

/// `TRACING_MAP_BITS_DEFAULT`, `_MIN`, `_MAX`.
pub const MAP_BITS_DEFAULT: u32 = 11;
const MAP_BITS_MIN: u32 = 7;
const MAP_BITS_MAX: u32 = 17;
/// `TRACING_MAP_KEYS_MAX`, `TRACING_MAP_VALS_MAX`, `TRACING_MAP_SORT_KEYS_MAX`,
/// `TRACING_MAP_VARS_MAX`.
const KEYS_MAX: usize = 3;
const VALS_MAX: usize = 3;
const SORT_KEYS_MAX: usize = 2;
const VARS_MAX: usize = 16;
/// `HIST_KEY_SIZE_MAX`: `MAX_FILTER_STR_VAL` plus a 16-deep stack trace.
const KEY_SIZE_MAX: u32 = 256 + 16 * 8;

/// The `HIST_ERR_*` messages [`parse`] can log.
pub mod hist_msg {
    /// `HIST_ERR_TOO_MANY_VARS`.
    pub const TOO_MANY_VARS: &str = "Too many variables defined";
    /// `HIST_ERR_MALFORMED_ASSIGNMENT`.
    pub const MALFORMED_ASSIGNMENT: &str = "Malformed assignment";
    /// `HIST_ERR_DUPLICATE_VAR`.
    pub const DUPLICATE_VAR: &str = "Variable already defined";
    /// `HIST_ERR_TRIGGER_EEXIST`.
    pub const TRIGGER_EEXIST: &str = "Hist trigger already exists";
    /// `HIST_ERR_TRIGGER_ENOENT_CLEAR`.
    pub const TRIGGER_ENOENT_CLEAR: &str = "Can't clear or continue a nonexistent hist trigger";
    /// `HIST_ERR_SET_CLOCK_FAIL`.
    pub const SET_CLOCK_FAIL: &str = "Couldn't set trace_clock";
    /// `HIST_ERR_BAD_FIELD_MODIFIER`.
    pub const BAD_FIELD_MODIFIER: &str = "Invalid field modifier";
    /// `HIST_ERR_TOO_MANY_SUBEXPR`.
    pub const TOO_MANY_SUBEXPR: &str = "Too many subexpressions (3 max)";
    /// `HIST_ERR_TIMESTAMP_MISMATCH`.
    pub const TIMESTAMP_MISMATCH: &str = "Timestamp units in expression don't match";
    /// `HIST_ERR_INVALID_REF_KEY`.
    pub const INVALID_REF_KEY: &str = "Using variable references in keys not supported";
    /// `HIST_ERR_VAR_NOT_FOUND`.
    pub const VAR_NOT_FOUND: &str = "Couldn't find variable";
    /// `HIST_ERR_FIELD_NOT_FOUND`.
    pub const FIELD_NOT_FOUND: &str = "Couldn't find field";
    /// `HIST_ERR_EMPTY_ASSIGNMENT`.
    pub const EMPTY_ASSIGNMENT: &str = "Empty assignment";
    /// `HIST_ERR_INVALID_SORT_MODIFIER`.
    pub const INVALID_SORT_MODIFIER: &str = "Invalid sort modifier";
    /// `HIST_ERR_EMPTY_SORT_FIELD`.
    pub const EMPTY_SORT_FIELD: &str = "Empty sort field";
    /// `HIST_ERR_TOO_MANY_SORT_FIELDS`.
    pub const TOO_MANY_SORT_FIELDS: &str = "Too many sort fields (Max = 2)";
    /// `HIST_ERR_INVALID_SORT_FIELD`.
    pub const INVALID_SORT_FIELD: &str = "Sort field must be a key or a val";
    /// `HIST_ERR_INVALID_STR_OPERAND`.
    pub const INVALID_STR_OPERAND: &str = "String type can not be an operand in expression";
    /// `HIST_ERR_EXPECT_NUMBER`.
    pub const EXPECT_NUMBER: &str = "Expecting numeric literal";
    /// `HIST_ERR_UNARY_MINUS_SUBEXPR`.
    pub const UNARY_MINUS_SUBEXPR: &str = "Unary minus not supported in sub-expressions";
    /// `HIST_ERR_DIVISION_BY_ZERO`.
    pub const DIVISION_BY_ZERO: &str = "Division by zero";
    /// `HIST_ERR_NEED_NOHC_VAL`.
    pub const NEED_NOHC_VAL: &str = "Non-hitcount value is required for 'nohitcount'";
}

/// The kernel's `event_trigger_type`: two triggers of one type (and, for the enable
/// commands, one target) cannot coexist on an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TriggerType {
    /// `traceon`, `traceoff` (`ETT_TRACE_ONOFF`).
    TraceOnOff,
    /// `snapshot`.
    Snapshot,
    /// `stacktrace`.
    Stacktrace,
    /// `enable_event`, `disable_event`.
    EventEnable,
    /// `enable_hist`, `disable_hist`.
    HistEnable,
    /// `hist`.
    Hist,
}

/// What a trigger does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TriggerKind {
    /// `traceon`: turn tracing on.
    TraceOn,
    /// `traceoff`: turn tracing off.
    TraceOff,
    /// `snapshot`: take a snapshot of the buffer.
    Snapshot,
    /// `stacktrace`: record a stack trace.
    Stacktrace,
    /// `enable_event`/`disable_event` (`hist`: `enable_hist`/`disable_hist`) of another event.
    Enable {
        /// Its subsystem.
        system: &'static str,
        /// Its name.
        event: &'static str,
        /// Its id.
        id: u16,
        /// Enable (`true`) or disable.
        enable: bool,
        /// The hist variant (pauses/continues the target's hist triggers).
        hist: bool,
    },
    /// `hist:...`: a histogram.
    Hist(Box<HistSpec>),
}

/// One trigger attached to an event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trigger {
    /// What it does.
    pub kind: TriggerKind,
    /// How many more times it fires; `-1` = unlimited.
    pub count: i64,
    /// The `if` filter's text, if any.
    pub filter: Option<String>,
    /// A paused hist trigger (`:pause`).
    pub paused: bool,
}

impl Trigger {
    /// The kernel's trigger type.
    pub fn trigger_type(&self) -> TriggerType {
        match &self.kind {
            TriggerKind::TraceOn | TriggerKind::TraceOff => TriggerType::TraceOnOff,
            TriggerKind::Snapshot => TriggerType::Snapshot,
            TriggerKind::Stacktrace => TriggerType::Stacktrace,
            TriggerKind::Enable { hist: false, .. } => TriggerType::EventEnable,
            TriggerKind::Enable { hist: true, .. } => TriggerType::HistEnable,
            TriggerKind::Hist(_) => TriggerType::Hist,
        }
    }

    /// The event an enable trigger acts on.
    pub fn target(&self) -> Option<u16> {
        match self.kind {
            TriggerKind::Enable { id, .. } => Some(id),
            _ => None,
        }
    }

    /// Whether `other` is the same trigger for removal or duplicate checks
    /// (`register_trigger`, `event_enable_register_trigger`, `hist_trigger_match`).
    pub fn same_as(&self, other: &Trigger) -> bool {
        if self.trigger_type() != other.trigger_type() {
            return false;
        }
        match (&self.kind, &other.kind) {
            (TriggerKind::Hist(a), TriggerKind::Hist(b)) => {
                a.match_key() == b.match_key() && self.filter == other.filter
            }
            _ => self.target() == other.target(),
        }
    }
}

impl fmt::Display for Trigger {
    /// The trigger's line in the `trigger` file.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match &self.kind {
            TriggerKind::TraceOn => "traceon",
            TriggerKind::TraceOff => "traceoff",
            TriggerKind::Snapshot => "snapshot",
            TriggerKind::Stacktrace => "stacktrace",
            TriggerKind::Enable {
                system,
                event,
                enable,
                hist,
                ..
            } => {
                let cmd = match (hist, enable) {
                    (false, true) => "enable_event",
                    (false, false) => "disable_event",
                    (true, true) => "enable_hist",
                    (true, false) => "disable_hist",
                };
                write!(f, "{cmd}:{system}:{event}")?;
                ""
            }
            TriggerKind::Hist(h) => {
                h.write_spec(f)?;
                if let Some(flt) = &self.filter {
                    write!(f, " if {flt}")?;
                }
                let state = if self.paused { "paused" } else { "active" };
                return writeln!(f, " [{state}]");
            }
        };
        f.write_str(name)?;
        if self.count == -1 {
            f.write_str(":unlimited")?;
        } else {
            write!(f, ":count={}", self.count)?;
        }
        match &self.filter {
            Some(flt) => writeln!(f, " if {flt}"),
            None => writeln!(f),
        }
    }
}

/// A parsed `hist` trigger: what its read-back line shows and what identifies it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistSpec {
    /// `name=...` (printed as written, `name=foo`).
    pub name: Option<String>,
    /// The keys, as printed.
    pub keys: Vec<String>,
    /// The values after `hitcount`, as printed.
    pub vals: Vec<String>,
    /// The variables (`name=expr`), as printed.
    pub vars: Vec<String>,
    /// The variable names.
    pub var_names: Vec<String>,
    /// The sort keys, as printed (`hitcount`, `next_pid.descending`).
    pub sort: Vec<String>,
    /// `log2` of the table size.
    pub map_bits: u32,
    /// The clock of `common_timestamp` (printed only when a timestamp is used).
    pub clock: Option<String>,
    /// `nohitcount`.
    pub no_hitcount: bool,
    /// `pause`, `cont`, `clear`.
    pub pause: bool,
    /// `cont` / `continue`.
    pub cont: bool,
    /// `clear`.
    pub clear: bool,
}

impl HistSpec {
    fn write_spec(&self, f: &mut dyn fmt::Write) -> fmt::Result {
        f.write_str("hist:")?;
        if let Some(n) = &self.name {
            write!(f, "{n}:")?;
        }
        write!(f, "keys={}:vals=", self.keys.join(","))?;
        let mut first = true;
        if !self.no_hitcount {
            f.write_str("hitcount")?;
            first = false;
        }
        for v in &self.vals {
            if !first {
                f.write_char(',')?;
            }
            f.write_str(v)?;
            first = false;
        }
        if !self.vars.is_empty() {
            write!(f, ":{}", self.vars.join(","))?;
        }
        write!(
            f,
            ":sort={}:size={}",
            self.sort.join(","),
            1u32 << self.map_bits
        )?;
        if let Some(c) = &self.clock {
            write!(f, ":clock={c}")?;
        }
        if self.no_hitcount {
            f.write_str(":nohitcount")?;
        }
        Ok(())
    }

    /// What `hist_trigger_match` compares (name, fields, variables, sort keys; not the
    /// size): a named trigger only matches one of the same name, an unnamed one only an
    /// unnamed one.
    #[allow(clippy::type_complexity)]
    fn match_key(
        &self,
    ) -> (
        Option<&str>,
        &[String],
        &[String],
        &[String],
        &[String],
        bool,
    ) {
        (
            self.name.as_deref(),
            &self.keys,
            &self.vals,
            &self.vars,
            &self.sort,
            self.no_hitcount,
        )
    }
}

/// What a `trigger` write asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TriggerCmd {
    /// Attach this trigger.
    Add(Trigger),
    /// Detach the trigger that [`Trigger::same_as`] this one (nothing if none).
    Remove(Trigger),
    /// `hist:...:pause|cont|clear` of an existing hist trigger: set its paused state
    /// (`None` for `clear`, which only empties the table).
    Update(Trigger, Option<bool>),
}

/// What the parser may ask about the instance.
pub struct TriggerCtx<'a> {
    /// The event whose `trigger` file is written.
    pub event: &'a TraceEventFormat,
    /// Looks up an event by system and name (enable triggers, `system.event.field`).
    pub find_event: &'a dyn Fn(&str, &str) -> Option<TraceEventFormat>,
    /// The triggers already on the event (for `hist` variables, pause/cont/clear).
    pub existing: &'a [Trigger],
    /// Whether a hist trigger anywhere in the instance defines this variable.
    pub var_defined: &'a dyn Fn(&str) -> bool,
    /// The instance's trace clocks (`clock=`).
    pub clocks: &'a [&'static str],
}

/// `strsep(s, delims)`: the part before the first delimiter and the rest after it.
fn strsep<'a>(s: &'a str, delims: &[char]) -> (&'a str, Option<&'a str>) {
    match s.find(|c| delims.contains(&c)) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    }
}

fn skip_spaces(s: &str) -> &str {
    s.trim_start_matches(|c: char| c.is_ascii() && is_space(c as u8))
}

fn strim(s: &str) -> &str {
    s.trim_matches(|c: char| c.is_ascii() && is_space(c as u8))
}

/// Parses one write to a `trigger` file (`event_trigger_regex_write`): the text up to a NUL,
/// stripped, as one command.
pub fn parse(data: &[u8], cx: &TriggerCtx<'_>, log: &mut LogFn<'_>) -> Result<TriggerCmd, Errno> {
    if data.len() >= 4096 {
        return Err(Errno::EINVAL);
    }
    let text = core::str::from_utf8(crate::parse::c_str(data)).map_err(|_| Errno::EINVAL)?;
    let (command, next) = split_command(text);
    let next = next.map(skip_spaces).filter(|n| !n.is_empty());
    let remove = command.starts_with('!');
    let cmd = command.strip_prefix('!').unwrap_or(command);
    match cmd {
        "traceon" | "traceoff" | "snapshot" | "stacktrace" => {
            simple_trigger(cmd, remove, next, cx, log)
        }
        "enable_event" | "disable_event" | "enable_hist" | "disable_hist" => {
            enable_trigger(cmd, remove, next, cx, log)
        }
        "hist" => hist::parse(remove, next, cx, log),
        _ => Err(Errno::EINVAL),
    }
}

/// `trigger_process_regex`'s first step: the command word (`!` kept) and what follows it.
fn split_command(text: &str) -> (&str, Option<&str>) {
    strsep(skip_spaces(strim(text)), &[':', ' ', '\t'])
}

/// The command a write to a `trigger` file names (`snapshot` for `!snapshot:2 if x > 1`),
/// without the `!`; `None` if the text is not UTF-8.
pub fn command_name(data: &[u8]) -> Option<&str> {
    let text = core::str::from_utf8(crate::parse::c_str(data)).ok()?;
    let (command, _) = split_command(text);
    Some(command.strip_prefix('!').unwrap_or(command))
}

/// `set_trigger_filter`: `if <filter>`, parsed against the triggering event.
fn trigger_filter(
    filter: Option<&str>,
    cx: &TriggerCtx<'_>,
    log: &mut LogFn<'_>,
) -> Result<Option<String>, Errno> {
    let Some(filter) = filter else {
        return Ok(None);
    };
    let (s, rest) = strsep(filter, &[' ', '\t']);
    if s != "if" {
        return Err(Errno::EINVAL);
    }
    let Some(rest) = rest else {
        return Err(Errno::EINVAL);
    };
    match event_filter::parse(cx.event, rest) {
        Ok(_) => Ok(Some(rest.to_owned())),
        Err(e) => {
            let (m, pos) = e.log_entry();
            log(event_filter::ERROR_LOCATION, m, rest, pos as u16);
            Err(e.errno)
        }
    }
}

/// `event_trigger_separate_filter`.
fn separate_filter(
    param_and_filter: Option<&str>,
    required: bool,
) -> Result<(Option<&str>, Option<&str>), Errno> {
    let Some(pf) = param_and_filter else {
        return if required {
            Err(Errno::EINVAL)
        } else {
            Ok((None, None))
        };
    };
    if !required && !pf.as_bytes()[0].is_ascii_digit() {
        return Ok((None, Some(pf)));
    }
    let (param, rest) = strsep(pf, &[' ', '\t']);
    let filter = rest.map(skip_spaces).filter(|f| !f.is_empty());
    Ok((Some(param), filter))
}

/// `event_trigger_parse_num`: the count before any further `:`, base 0.
fn parse_num(param: Option<&str>) -> Result<i64, Errno> {
    let Some(param) = param else {
        return Ok(-1);
    };
    let (number, _) = strsep(param, &[':']);
    if number.is_empty() {
        return Err(Errno::EINVAL);
    }
    kstrtoull(number.as_bytes(), 0).map(|v| v as i64)
}

fn simple_trigger(
    cmd: &str,
    remove: bool,
    next: Option<&str>,
    cx: &TriggerCtx<'_>,
    log: &mut LogFn<'_>,
) -> Result<TriggerCmd, Errno> {
    let (param, filter) = separate_filter(next, false)?;
    let kind = match cmd {
        "traceon" => TriggerKind::TraceOn,
        "traceoff" => TriggerKind::TraceOff,
        "snapshot" => TriggerKind::Snapshot,
        _ => TriggerKind::Stacktrace,
    };
    let mut t = Trigger {
        kind,
        count: -1,
        filter: None,
        paused: false,
    };
    if remove {
        return Ok(TriggerCmd::Remove(t));
    }
    t.count = parse_num(param)?;
    t.filter = trigger_filter(filter, cx, log)?;
    Ok(TriggerCmd::Add(t))
}

fn enable_trigger(
    cmd: &str,
    remove: bool,
    next: Option<&str>,
    cx: &TriggerCtx<'_>,
    log: &mut LogFn<'_>,
) -> Result<TriggerCmd, Errno> {
    let next = next.ok_or(Errno::EINVAL)?;
    let (param, filter) = separate_filter(Some(next), true)?;
    let (system, rest) = strsep(param.unwrap_or(""), &[':']);
    let rest = rest.ok_or(Errno::EINVAL)?;
    let (event, count) = strsep(rest, &[':']);
    let target = (cx.find_event)(system, event).ok_or(Errno::EINVAL)?;
    let hist = cmd.ends_with("_hist");
    let mut t = Trigger {
        kind: TriggerKind::Enable {
            system: target.system,
            event: target.name,
            id: target.id,
            enable: cmd.starts_with("enable"),
            hist,
        },
        count: -1,
        filter: None,
        paused: false,
    };
    if remove {
        return Ok(TriggerCmd::Remove(t));
    }
    t.count = parse_num(count)?;
    t.filter = trigger_filter(filter, cx, log)?;
    Ok(TriggerCmd::Add(t))
}

mod hist {
    //! The `hist` command (`event_hist_trigger_parse` and what it calls).

    use super::*;

    /// A hist field's properties the checks need.
    #[derive(Clone, Debug, Default)]
    struct HField {
        /// `hist_field_print` text.
        print: String,
        /// `hist_field_name` (for sort keys).
        name: String,
        string: bool,
        var_ref: bool,
        constant: Option<u64>,
        expr: bool,
        timestamp: bool,
        usecs: bool,
        size: u32,
        /// Modifier flags that some positions forbid.
        graph_percent: bool,
        bucket_log2: bool,
        sym_syscall_stack: bool,
    }

    struct Cx<'a, 'b> {
        cx: &'a TriggerCtx<'a>,
        log: &'a mut LogFn<'b>,
        last_cmd: String,
        loc: String,
        var_defs: Vec<(String, String)>,
        timestamps: bool,
        ts_in_usecs: bool,
        remove: bool,
    }

    impl Cx<'_, '_> {
        /// `hist_err(tr, err, errpos(str))`.
        fn err(&mut self, m: &'static str, at: &str) {
            let pos = self.last_cmd.find(at).unwrap_or(0);
            (self.log)(&self.loc, m, &self.last_cmd, pos as u16);
        }
        fn err0(&mut self, m: &'static str) {
            (self.log)(&self.loc, m, &self.last_cmd, 0);
        }
    }

    /// `contains_operator`: the root operator and its byte index.
    fn contains_operator(s: &str) -> Option<(u8, usize)> {
        let minus = s.rfind('-');
        if minus == Some(0) {
            return Some((b'u', 0));
        }
        let plus = s.rfind('+');
        if plus.is_some() || minus.is_some() {
            return match (plus, minus) {
                (Some(p), Some(m)) if p > m => Some((b'+', p)),
                (Some(p), None) => Some((b'+', p)),
                (_, Some(m)) => Some((b'-', m)),
                _ => None,
            };
        }
        let div = s.rfind('/');
        let mult = s.rfind('*');
        match (div, mult) {
            (Some(d), Some(m)) if m > d => Some((b'*', m)),
            (None, Some(m)) => Some((b'*', m)),
            (Some(d), _) => Some((b'/', d)),
            _ => None,
        }
    }

    /// `parse_expr`.
    fn parse_expr(
        c: &mut Cx<'_, '_>,
        s: &str,
        key: bool,
        var: bool,
        n_subexprs: &mut u32,
    ) -> Result<HField, Errno> {
        if *n_subexprs > 3 {
            c.err(hist_msg::TOO_MANY_SUBEXPR, s);
            return Err(Errno::EINVAL);
        }
        let Some((op, sep)) = contains_operator(s) else {
            return parse_atom(c, s, key, var);
        };
        if op == b'u' {
            return parse_unary(c, s, n_subexprs);
        }
        *n_subexprs += 1;
        let (lhs, rhs) = (&s[..sep], &s[sep + 1..]);
        if lhs.is_empty() || rhs.is_empty() {
            return Err(Errno::EINVAL);
        }
        let a = parse_expr(c, lhs, false, false, n_subexprs)?;
        if a.string {
            c.err(hist_msg::INVALID_STR_OPERAND, lhs);
            return Err(Errno::EINVAL);
        }
        let b = parse_expr(c, rhs, false, false, n_subexprs)?;
        if b.string {
            c.err(hist_msg::INVALID_STR_OPERAND, rhs);
            return Err(Errno::EINVAL);
        }
        if a.usecs != b.usecs {
            c.err0(hist_msg::TIMESTAMP_MISMATCH);
            return Err(Errno::EINVAL);
        }
        if op == b'/' && b.constant == Some(0) {
            c.err(hist_msg::DIVISION_BY_ZERO, rhs);
            return Err(Errno::EDOM);
        }
        let opch = op as char;
        let mut e = HField {
            timestamp: a.timestamp,
            usecs: a.usecs,
            size: a.size,
            var_ref: a.var_ref || b.var_ref,
            ..HField::default()
        };
        if let (Some(x), Some(y)) = (a.constant, b.constant) {
            let v = match op {
                b'+' => x.wrapping_add(y),
                b'-' => x.wrapping_sub(y),
                b'*' => x.wrapping_mul(y),
                _ => x / y,
            };
            e.constant = Some(v);
            e.print = format!("{v}");
            e.name = String::new();
        } else {
            e.expr = true;
            e.name = format!("{}{opch}{}", expr_operand(&a), expr_operand(&b));
            e.print = e.name.clone();
        }
        Ok(e)
    }

    /// `expr_field_str` of an operand.
    fn expr_operand(f: &HField) -> String {
        if f.expr {
            f.name.clone()
        } else {
            f.print.clone()
        }
    }

    /// `parse_unary`: `-(expr)`.
    fn parse_unary(c: &mut Cx<'_, '_>, s: &str, n_subexprs: &mut u32) -> Result<HField, Errno> {
        *n_subexprs += 1;
        if *n_subexprs > 3 {
            c.err(hist_msg::TOO_MANY_SUBEXPR, s);
            return Err(Errno::EINVAL);
        }
        let s = &s[1..];
        if !s.contains('(') {
            return Err(Errno::EINVAL);
        }
        let s = &s[1..];
        let Some(close) = s.rfind(')') else {
            return Err(Errno::EINVAL);
        };
        if close + 1 != s.len() {
            c.err(hist_msg::UNARY_MINUS_SUBEXPR, s);
            return Err(Errno::EINVAL);
        }
        let inner = &s[..close];
        let o = parse_expr(c, inner, false, false, n_subexprs)?;
        if o.string {
            c.err(hist_msg::INVALID_STR_OPERAND, inner);
            return Err(Errno::EINVAL);
        }
        let name = format!("-({})", expr_operand(&o));
        Ok(HField {
            print: name.clone(),
            name,
            expr: true,
            timestamp: o.timestamp,
            usecs: o.usecs,
            size: o.size,
            var_ref: o.var_ref,
            ..HField::default()
        })
    }

    /// `parse_atom`.
    fn parse_atom(c: &mut Cx<'_, '_>, s: &str, key: bool, var: bool) -> Result<HField, Errno> {
        if s.as_bytes().first().is_some_and(u8::is_ascii_digit) {
            let Ok(v) = kstrtoull(s.as_bytes(), 0) else {
                c.err(hist_msg::EXPECT_NUMBER, s);
                return Err(Errno::EINVAL);
            };
            return Ok(HField {
                print: format!("{v}"),
                constant: Some(v),
                size: 8,
                ..HField::default()
            });
        }
        let mut s = s;
        // `system.event.var`: a qualified reference; only the last part names the field.
        let mut qualified = None;
        if s.find('.').is_some_and(|d| s[d + 1..].contains('.')) {
            let (sys, rest) = strsep(s, &['.']);
            let (ev, rest) = strsep(rest.unwrap_or(""), &['.']);
            let Some(rest) = rest else {
                return Err(Errno::EINVAL);
            };
            qualified = Some((sys, ev));
            s = rest;
        }
        if let Some(name) = s.strip_prefix('$').filter(|n| !n.is_empty()) {
            // A variable defined in this trigger as a plain field stands for that field.
            let local = if qualified
                .is_none_or(|(sys, ev)| sys == c.cx.event.system && ev == c.cx.event.name)
            {
                c.var_defs
                    .iter()
                    .find(|(n, e)| {
                        n == name && contains_operator(e).is_none() && !e.starts_with('$')
                    })
                    .map(|(_, e)| e.clone())
            } else {
                None
            };
            match local {
                Some(field) => return parse_field(c, &field, key, var),
                None => {
                    if (c.cx.var_defined)(name) {
                        return Ok(HField {
                            print: format!("${name}"),
                            name: String::from(name),
                            var_ref: true,
                            size: 8,
                            ..HField::default()
                        });
                    }
                    c.err(hist_msg::VAR_NOT_FOUND, name);
                }
            }
        }
        parse_field(c, s, key, var)
    }

    /// `parse_field` and `create_hist_field`.
    fn parse_field(c: &mut Cx<'_, '_>, s: &str, key: bool, var: bool) -> Result<HField, Errno> {
        let (field_name, modifier) = strsep(s, &['.']);
        let mut f = HField::default();
        let mut modname = "";
        let mut buckets = 0u64;
        if let Some(m) = modifier {
            let bad = |c: &mut Cx<'_, '_>, at: &str| {
                c.err(hist_msg::BAD_FIELD_MODIFIER, at);
                Err(Errno::EINVAL)
            };
            match m {
                "hex" | "sym" | "syscall" | "stacktrace" | "log2" | "usecs" => modname = m,
                "symXoffset" => modname = "sym-offset",
                "execname" if field_name == "common_pid" => modname = m,
                _ if m.starts_with("bucket") => {
                    let mut r = &m[6..];
                    if let Some(x) = r.strip_prefix('s') {
                        r = x;
                    }
                    let Some(num) = r.strip_prefix('=') else {
                        return bad(c, r);
                    };
                    match kstrtoull(num.as_bytes(), 0) {
                        Ok(v) if v != 0 => {
                            buckets = v;
                            modname = "buckets";
                        }
                        _ => return bad(c, num),
                    }
                }
                _ if m.starts_with("percent") || m.starts_with("graph") => {
                    if key || var {
                        return bad(c, m);
                    }
                    modname = if m.starts_with("percent") {
                        "percent"
                    } else {
                        "graph"
                    };
                }
                _ => return bad(c, m),
            }
        }
        f.usecs = modname == "usecs";
        f.graph_percent = matches!(modname, "graph" | "percent");
        f.bucket_log2 = matches!(modname, "buckets" | "log2");
        f.sym_syscall_stack = matches!(modname, "sym" | "sym-offset" | "syscall" | "stacktrace");
        let base: String;
        let mut cpu = false;
        let mut stack_field = false;
        match field_name {
            "common_timestamp" => {
                c.timestamps = true;
                if f.usecs {
                    c.ts_in_usecs = true;
                }
                f.timestamp = true;
                f.size = 8;
                base = String::from("common_timestamp");
            }
            "common_stacktrace" => {
                f.size = 16 * 8;
                f.sym_syscall_stack = true;
                base = String::from("common_stacktrace");
            }
            "common_cpu" => {
                f.size = 4;
                cpu = true;
                base = String::from("common_cpu");
            }
            "hitcount" => {
                f.size = 8;
                base = String::from("hitcount");
            }
            _ => match event_filter::find_field(c.cx.event, field_name) {
                Some(FieldRef::Event(fd)) if fd.size > 0 => {
                    f.string = is_string_field(FieldRef::Event(fd))
                        && fd.c_type != "char *"
                        && fd.c_type != "const char *";
                    f.size = if f.string && fd.array == ftrace_core::format::FieldArray::Dynamic {
                        256
                    } else {
                        fd.size
                    };
                    if !f.string && !matches!(fd.size, 1 | 2 | 4 | 8) {
                        return Err(Errno::ENOMEM);
                    }
                    base = String::from(fd.name);
                }
                // The generic fields keep their own name (`hist_field_name` reads the
                // field's), but print as `common_cpu` / `<name>.stacktrace`.
                Some(FieldRef::Cpu) => {
                    f.size = 4;
                    cpu = true;
                    base = String::from(field_name);
                }
                Some(FieldRef::Stacktrace) => {
                    f.size = 16 * 8;
                    f.sym_syscall_stack = true;
                    stack_field = true;
                    base = String::from(field_name);
                }
                _ => {
                    c.err(hist_msg::FIELD_NOT_FOUND, field_name);
                    return Err(Errno::EINVAL);
                }
            },
        }
        let stack = stack_field || modname == "stacktrace" || base == "common_stacktrace";
        f.name = base.clone();
        f.print = if cpu {
            String::from("common_cpu")
        } else if stack && (stack_field || modname == "stacktrace") {
            format!("{base}.stacktrace")
        } else {
            base
        };
        if !modname.is_empty() && !stack {
            f.print.push('.');
            f.print.push_str(modname);
            if buckets != 0 {
                let _ = write!(f.print, "={buckets}");
            }
        }
        Ok(f)
    }

    /// `parse_hist_trigger_attrs` + `create_hist_data` + the checks of registration.
    pub(super) fn parse(
        remove: bool,
        param_and_filter: Option<&str>,
        cx: &TriggerCtx<'_>,
        log: &mut LogFn<'_>,
    ) -> Result<TriggerCmd, Errno> {
        let loc = format!("hist:{}:{}", cx.event.system, cx.event.name);
        let Some(pf) = param_and_filter else {
            return Err(Errno::EINVAL);
        };
        let mut c = Cx {
            cx,
            log,
            last_cmd: format!("hist:{pf}"),
            loc,
            var_defs: Vec::new(),
            timestamps: false,
            ts_in_usecs: false,
            remove,
        };
        // Separate `k:v [if filter]`: an "if" that starts a word and is followed by a blank.
        let b = pf.as_bytes();
        let mut p = 0;
        let mut split = None;
        while let Some(off) = pf[p..].find("if") {
            let at = p + off;
            if at == 0 {
                return Err(Errno::EINVAL);
            }
            if b[at - 1] != b' ' && b[at - 1] != b'\t' {
                p = at + 1;
                continue;
            }
            if at + 3 >= b.len() {
                return Err(Errno::EINVAL);
            }
            if b[at + 2] != b' ' && b[at + 2] != b'\t' {
                p = at + 1;
                continue;
            }
            split = Some(at);
            break;
        }
        let (param, filter) = match split {
            Some(at) => (strim(&pf[..at - 1]), Some(strim(&pf[at..]))),
            None => (pf, None),
        };
        let param = param.replace(".sym-offset", ".symXoffset");

        // parse_hist_trigger_attrs
        let mut keys_str = None;
        let mut vals_str = None;
        let mut sort_str = None;
        let mut name = None;
        let mut clock = None;
        let mut map_bits = 0;
        let mut assignments: Vec<&str> = Vec::new();
        let mut spec = HistSpec {
            name: None,
            keys: Vec::new(),
            vals: Vec::new(),
            vars: Vec::new(),
            var_names: Vec::new(),
            sort: Vec::new(),
            map_bits: MAP_BITS_DEFAULT,
            clock: None,
            no_hitcount: false,
            pause: false,
            cont: false,
            clear: false,
        };
        for s in param.split(':') {
            if let Some(eq) = s.find('=') {
                if s[eq + 1..].is_empty() {
                    c.err(hist_msg::EMPTY_ASSIGNMENT, s);
                    return Err(Errno::EINVAL);
                }
                if let Some(v) = s.strip_prefix("keys=").or_else(|| s.strip_prefix("key=")) {
                    keys_str = Some(v);
                } else if let Some(v) = s
                    .strip_prefix("vals=")
                    .or_else(|| s.strip_prefix("val="))
                    .or_else(|| s.strip_prefix("values="))
                {
                    vals_str = Some(v);
                } else if let Some(v) = s.strip_prefix("sort=") {
                    sort_str = Some(v);
                } else if s.starts_with("name=") {
                    name = Some(s);
                } else if let Some(v) = s.strip_prefix("clock=") {
                    clock = Some(strim(v));
                } else if let Some(v) = s.strip_prefix("size=") {
                    let size = kstrtoull(v.as_bytes(), 0)?;
                    let bits = if size <= 1 {
                        0
                    } else {
                        64 - (size - 1).leading_zeros()
                    };
                    if !(MAP_BITS_MIN..=MAP_BITS_MAX).contains(&bits) {
                        return Err(Errno::EINVAL);
                    }
                    map_bits = bits;
                } else {
                    if assignments.len() == VARS_MAX {
                        c.err(hist_msg::TOO_MANY_VARS, s);
                        return Err(Errno::EINVAL);
                    }
                    assignments.push(s);
                }
            } else {
                match s {
                    "nohitcount" | "NOHC" => spec.no_hitcount = true,
                    "pause" => spec.pause = true,
                    "cont" | "continue" => spec.cont = true,
                    "clear" => spec.clear = true,
                    // Actions (onmatch/onmax/onchange) need synthetic events and variables
                    // across events, which ftrace-rs does not have.
                    _ => return Err(Errno::EINVAL),
                }
            }
        }
        let Some(keys_str) = keys_str else {
            return Err(Errno::EINVAL);
        };
        spec.name = name.map(String::from);
        if map_bits != 0 {
            spec.map_bits = map_bits;
        }

        // parse_var_defs
        for a in &assignments {
            for field_str in a.split(',') {
                let (var_name, expr) = strsep(field_str, &['=']);
                let Some(expr) = expr else {
                    c.err(hist_msg::MALFORMED_ASSIGNMENT, var_name);
                    return Err(Errno::EINVAL);
                };
                if c.var_defs.len() == VARS_MAX {
                    c.err(hist_msg::TOO_MANY_VARS, var_name);
                    return Err(Errno::EINVAL);
                }
                c.var_defs
                    .push((String::from(var_name), String::from(expr)));
            }
        }

        // create_val_fields
        let mut sortable: Vec<HField> = Vec::new();
        let mut n_vals = 1;
        if let Some(vals) = vals_str {
            let mut rest = Some(vals);
            let mut n_hitcount = 0;
            let mut i = 0;
            while i < VALS_MAX && n_vals < VALS_MAX {
                let Some(r) = rest else { break };
                let (field_str, more) = strsep(r, &[',']);
                rest = more;
                i += 1;
                if field_str == "hitcount" {
                    n_hitcount += 1;
                    if n_hitcount == 1 {
                        continue;
                    }
                }
                let mut n = 0;
                let f = parse_expr(&mut c, field_str, false, false, &mut n)?;
                // `__create_val_field`: `.percent` and `.graph` are for values only.
                if f.bucket_log2 || f.sym_syscall_stack {
                    c.err(hist_msg::BAD_FIELD_MODIFIER, field_str);
                    return Err(Errno::EINVAL);
                }
                spec.vals.push(f.print.clone());
                sortable.push(f);
                n_vals += 1;
            }
            if rest.is_some_and(|r| r != "hitcount") {
                return Err(Errno::EINVAL);
            }
        }
        if n_vals == 1 && spec.no_hitcount {
            c.err0(hist_msg::NEED_NOHC_VAL);
            return Err(Errno::ENOENT);
        }

        // create_var_fields
        let defs = c.var_defs.clone();
        for (var_name, expr) in &defs {
            let dup = spec.var_names.iter().any(|n| n == var_name)
                || cx.existing.iter().any(|t| match &t.kind {
                    TriggerKind::Hist(h) => h.var_names.iter().any(|n| n == var_name),
                    _ => false,
                });
            if dup && !c.remove {
                c.err(hist_msg::DUPLICATE_VAR, var_name);
                return Err(Errno::EINVAL);
            }
            let mut n = 0;
            let f = parse_expr(&mut c, expr, false, true, &mut n)?;
            if f.graph_percent || f.bucket_log2 {
                c.err(hist_msg::BAD_FIELD_MODIFIER, expr);
                return Err(Errno::EINVAL);
            }
            spec.vars.push(format!("{var_name}={}", f.print));
            spec.var_names.push(var_name.clone());
        }

        // create_key_fields
        let mut rest = Some(keys_str);
        let mut key_size = 0;
        let mut n_keys = 0;
        while n_keys < KEYS_MAX {
            let Some(r) = rest else { break };
            let (field_str, more) = strsep(r, &[',']);
            rest = more;
            n_keys += 1;
            let f = if field_str == "stacktrace" {
                HField {
                    print: String::from("common_stacktrace"),
                    name: String::from("common_stacktrace"),
                    size: 16 * 8,
                    ..HField::default()
                }
            } else {
                let mut n = 0;
                let f = parse_expr(&mut c, field_str, true, false, &mut n)?;
                if f.var_ref {
                    c.err(hist_msg::INVALID_REF_KEY, field_str);
                    return Err(Errno::EINVAL);
                }
                f
            };
            key_size += f.size.next_multiple_of(8);
            if key_size > KEY_SIZE_MAX {
                return Err(Errno::EINVAL);
            }
            spec.keys.push(f.print.clone());
            sortable.push(f);
        }
        if rest.is_some() {
            return Err(Errno::EINVAL);
        }

        // create_sort_keys
        match sort_str {
            None => spec.sort.push(String::from("hitcount")),
            Some(sorts) => {
                let mut rest = Some(sorts);
                let mut i = 0;
                while i < SORT_KEYS_MAX {
                    let Some(r) = rest else { break };
                    let (field_str, more) = strsep(r, &[',']);
                    rest = more;
                    if field_str.is_empty() {
                        c.err(hist_msg::EMPTY_SORT_FIELD, "sort=");
                        return Err(Errno::EINVAL);
                    }
                    if i == SORT_KEYS_MAX - 1 && rest.is_some() {
                        c.err(hist_msg::TOO_MANY_SORT_FIELDS, "sort=");
                        return Err(Errno::EINVAL);
                    }
                    let (field_name, modifier) = strsep(field_str, &['.']);
                    if field_name.is_empty() {
                        c.err(hist_msg::EMPTY_SORT_FIELD, "sort=");
                        return Err(Errno::EINVAL);
                    }
                    let descending = match modifier {
                        None | Some("ascending") => false,
                        Some("descending") => true,
                        Some(m) => {
                            c.err(hist_msg::INVALID_SORT_MODIFIER, m);
                            return Err(Errno::EINVAL);
                        }
                    };
                    let printed = if field_name == "hitcount" {
                        String::from("hitcount")
                    } else {
                        match sortable.iter().find(|f| f.name == field_name) {
                            Some(f) => f.print.clone(),
                            None => {
                                c.err(hist_msg::INVALID_SORT_FIELD, field_name);
                                return Err(Errno::EINVAL);
                            }
                        }
                    };
                    spec.sort.push(if descending {
                        format!("{printed}.descending")
                    } else {
                        printed
                    });
                    i += 1;
                }
            }
        }

        let clock = clock.unwrap_or("global");
        if c.timestamps {
            spec.clock = Some(String::from(clock));
        }
        let filter = trigger_filter(filter, cx, c.log)?;
        let t = Trigger {
            paused: spec.pause,
            kind: TriggerKind::Hist(Box::new(spec)),
            count: -1,
            filter,
        };
        if remove {
            return Ok(TriggerCmd::Remove(t));
        }
        let TriggerKind::Hist(spec) = &t.kind else {
            unreachable!()
        };
        // existing_hist_update_only
        if (spec.pause || spec.cont || spec.clear) && cx.existing.iter().any(|e| e.same_as(&t)) {
            let state = if spec.pause {
                Some(true)
            } else if spec.cont {
                Some(false)
            } else {
                None
            };
            return Ok(TriggerCmd::Update(t, state));
        }
        // hist_register_trigger
        if cx.existing.iter().any(|e| e.same_as(&t)) {
            c.err0(hist_msg::TRIGGER_EEXIST);
            return Err(Errno::EEXIST);
        }
        if spec.cont || spec.clear {
            c.err0(hist_msg::TRIGGER_ENOENT_CLEAR);
            return Err(Errno::ENOENT);
        }
        if c.timestamps && !cx.clocks.contains(&clock) {
            c.err(hist_msg::SET_CLOCK_FAIL, clock);
            return Err(Errno::EINVAL);
        }
        Ok(TriggerCmd::Add(t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;
    use alloc::vec;
    use ftrace_core::format::sched::{SCHED_SWITCH, SCHED_WAKEUP};

    fn find(sys: &str, name: &str) -> Option<TraceEventFormat> {
        [SCHED_SWITCH, SCHED_WAKEUP]
            .into_iter()
            .find(|e| e.system == sys && e.name == name)
    }

    fn run(text: &str, existing: &[Trigger]) -> (Result<TriggerCmd, Errno>, Vec<String>) {
        let cx = TriggerCtx {
            event: &SCHED_SWITCH,
            find_event: &find,
            existing,
            var_defined: &|_| false,
            clocks: &["local", "global"],
        };
        let mut logs = Vec::new();
        let r = parse(
            text.as_bytes(),
            &cx,
            &mut |loc: &str, m: &'static str, cmd: &str, pos: u16| {
                logs.push(format!("{loc}|{m}|{cmd}|{pos}"));
            },
        );
        (r, logs)
    }

    fn line(text: &str) -> String {
        match run(text, &[]).0 {
            Ok(TriggerCmd::Add(t)) => t.to_string(),
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn read_back_lines_are_the_kernels() {
        assert_eq!(line("traceon"), "traceon:unlimited\n");
        assert_eq!(line("traceoff:5"), "traceoff:count=5\n");
        assert_eq!(line("snapshot:0x10"), "snapshot:count=16\n");
        assert_eq!(
            line("stacktrace if prev_pid == 1"),
            "stacktrace:unlimited if prev_pid == 1\n"
        );
        assert_eq!(
            line("traceon:3 if next_pid > 0"),
            "traceon:count=3 if next_pid > 0\n"
        );
        assert_eq!(
            line("enable_event:sched:sched_wakeup:2"),
            "enable_event:sched:sched_wakeup:count=2\n"
        );
        assert_eq!(
            line("disable_hist:sched:sched_switch"),
            "disable_hist:sched:sched_switch:unlimited\n"
        );
        assert_eq!(
            line("hist:keys=next_pid"),
            "hist:keys=next_pid:vals=hitcount:sort=hitcount:size=2048 [active]\n"
        );
        assert_eq!(
            line(
                "hist:key=prev_comm,next_pid.hex:vals=prev_prio:sort=next_pid.descending:size=100 if prev_pid != 0"
            ),
            "hist:keys=prev_comm,next_pid.hex:vals=hitcount,prev_prio:sort=next_pid.hex.descending:size=128 if prev_pid != 0 [active]\n"
        );
        assert_eq!(
            line("hist:keys=common_pid.execname,cpu:vals=prev_prio+next_prio:pause"),
            "hist:keys=common_pid.execname,common_cpu:vals=hitcount,prev_prio+next_prio:sort=hitcount:size=2048 [paused]\n"
        );
        assert_eq!(
            line(
                "hist:keys=next_prio.buckets=10:ts0=common_timestamp.usecs:nohitcount:vals=prev_prio"
            ),
            "hist:keys=next_prio.buckets=10:vals=prev_prio:ts0=common_timestamp.usecs:sort=hitcount:size=2048:clock=global:nohitcount [active]\n"
        );
        assert_eq!(
            line("hist:keys=cpu,STACKTRACE:sort=cpu"),
            "hist:keys=common_cpu,STACKTRACE.stacktrace:vals=hitcount:sort=common_cpu:size=2048 [active]\n"
        );
        assert_eq!(
            run("hist:keys=cpu:sort=common_cpu", &[]).0,
            Err(Errno::EINVAL)
        );
        assert_eq!(run("hist:keys=common_comm", &[]).0, Err(Errno::EINVAL));
        assert_eq!(
            line("hist:keys=stacktrace:vals=2*3"),
            "hist:keys=common_stacktrace:vals=hitcount,6:sort=hitcount:size=2048 [active]\n"
        );
    }

    #[test]
    fn hist_errors_log_where_the_kernel_does() {
        let (r, logs) = run("hist:keys=bogus_field", &[]);
        assert_eq!(r, Err(Errno::EINVAL));
        assert_eq!(
            logs,
            vec!["hist:sched:sched_switch|Couldn't find field|hist:keys=bogus_field|10"]
        );
        // errpos() finds the first occurrence: "s" is inside "hist".
        let (_, logs) = run("hist:keys=s", &[]);
        assert_eq!(
            logs,
            vec!["hist:sched:sched_switch|Couldn't find field|hist:keys=s|2"]
        );
        let (r, logs) = run("hist:keys=next_pid:vals=nope", &[]);
        assert_eq!(r, Err(Errno::EINVAL));
        assert!(logs[0].ends_with("|Couldn't find field|hist:keys=next_pid:vals=nope|24"));
        let (r, logs) = run("hist:keys=next_pid:sort=prev_pid", &[]);
        assert_eq!(r, Err(Errno::EINVAL));
        assert!(logs[0].contains("Sort field must be a key or a val"));
        let (_, logs) = run("hist:keys=next_pid.bogus", &[]);
        assert!(logs[0].contains("Invalid field modifier|hist:keys=next_pid.bogus|19"));
        let (r, logs) = run("hist:keys=", &[]);
        assert_eq!(r, Err(Errno::EINVAL));
        assert!(logs[0].contains("Empty assignment|hist:keys=|5"));
        let (r, logs) = run("hist:keys=next_pid:vals=prev_prio/0", &[]);
        assert_eq!(r, Err(Errno::EDOM));
        assert!(logs[0].contains("Division by zero"));
        let (r, logs) = run("hist:keys=next_pid:vals=prev_comm+1", &[]);
        assert_eq!(r, Err(Errno::EINVAL));
        assert!(logs[0].contains("String type can not be an operand"));
        let (r, logs) = run("hist:keys=$x", &[]);
        assert_eq!(r, Err(Errno::EINVAL));
        assert_eq!(logs.len(), 2);
        assert!(logs[0].contains("Couldn't find variable"));
        // Filters of hist triggers log as event filters.
        let (r, logs) = run("hist:keys=next_pid if nope == 1", &[]);
        assert_eq!(r, Err(Errno::EINVAL));
        assert_eq!(
            logs,
            vec!["event filter parse error|Field not found|nope == 1|5"]
        );
        // No keys, bad size, unknown words: EINVAL without a log entry.
        for bad in [
            "hist:vals=next_pid",
            "hist:keys=next_pid:size=1",
            "hist:keys=next_pid:size=x",
            "hist:keys=next_pid:bogus",
            "hist",
            "hist:iff=1",
        ] {
            let (r, logs) = run(bad, &[]);
            assert_eq!(r, Err(Errno::EINVAL), "{bad}");
            assert!(logs.is_empty(), "{bad}: {logs:?}");
        }
    }

    #[test]
    fn duplicates_updates_and_removal() {
        let Ok(TriggerCmd::Add(h)) = run("hist:keys=next_pid", &[]).0 else {
            panic!()
        };
        let existing = vec![h.clone()];
        let (r, logs) = run("hist:keys=next_pid:size=4096", &existing);
        assert_eq!(r, Err(Errno::EEXIST));
        assert!(logs[0].contains("Hist trigger already exists"));
        assert!(matches!(
            run("hist:keys=next_pid:pause", &existing).0,
            Ok(TriggerCmd::Update(_, Some(true)))
        ));
        let (r, logs) = run("hist:keys=prev_pid:cont", &existing);
        assert_eq!(r, Err(Errno::ENOENT));
        assert!(logs[0].contains("Can't clear or continue"));
        assert!(matches!(
            run("!hist:keys=next_pid", &existing).0,
            Ok(TriggerCmd::Remove(t)) if t.same_as(&h)
        ));
        assert!(matches!(run("!traceon", &[]).0, Ok(TriggerCmd::Remove(_))));
        // A named hist matches only the same name.
        let Ok(TriggerCmd::Add(named)) = run("hist:name=foo:keys=next_pid", &[]).0 else {
            panic!()
        };
        assert_eq!(
            named.to_string(),
            "hist:name=foo:keys=next_pid:vals=hitcount:sort=hitcount:size=2048 [active]\n"
        );
        assert!(!named.same_as(&h));
        let existing = vec![h.clone(), named];
        assert_eq!(
            run("hist:name=foo:keys=next_pid", &existing).0,
            Err(Errno::EEXIST)
        );
        assert!(matches!(
            run("hist:name=bar:keys=next_pid", &existing).0,
            Ok(TriggerCmd::Add(_))
        ));
        // Same type, different command: traceon and traceoff share a type.
        let Ok(TriggerCmd::Add(on)) = run("traceon", &[]).0 else {
            panic!()
        };
        let Ok(TriggerCmd::Add(off)) = run("traceoff:1", &[]).0 else {
            panic!()
        };
        assert!(on.same_as(&off));
    }

    #[test]
    fn command_errors() {
        for bad in [
            "",
            "bogus",
            "!",
            "traceon:abc",
            "traceon:5 iff x",
            "traceon if",
            "enable_event",
            "enable_event:sched",
            "enable_event:sched:nope",
            "enable_event:sched:sched_wakeup:x",
            "traceon:99999999999999999999",
        ] {
            assert!(run(bad, &[]).0.is_err(), "{bad}");
        }
        // Removing never needs the rest to parse.
        assert!(run("!traceon:abc", &[]).0.is_ok());
    }
}
