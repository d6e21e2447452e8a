//! What an enabled trace event does when its call site fires: the kernel's
//! `trace_event_raw_event_<call>` over ftrace-tracefs's filter and trigger machinery, in the
//! program, at record time.
//!
//! The tool sends each event's state (`EVENT_SET`: armed, soft-disabled, the filter text, the
//! triggers); the control thread compiles it against the event's format
//! ([`EventInfo::format`](crate::event::EventInfo::format)) and publishes the whole set in an
//! [`RcuCell`] read by [`record_event`] inside a [`ReaderCount`] guard (a handler may run in
//! a signal handler: no epoch pin, no allocation, no lock). A fired event runs its triggers before the record
//! (or after it, when a trigger needs the record: `traceoff`, a trigger with a filter), then
//! is written unless soft-disabled, filtered out or tracing is off, exactly the order of the
//! kernel's `trace_trigger_soft_disabled` / `event_triggers_call`. A thread that
//! `set_event_pid` / `set_event_notrace_pid` ([`crate::event_pids`]) or `tracing_cpumask`
//! leave out runs only the triggers that need no record (the kernel's
//! `trace_event_ignore_this_pid` in `trace_event_buffer_reserve`); `set_ftrace_pid` does not
//! filter events. `enable_event` and
//! `disable_event` flip the target's soft-disabled bit here; the tool reads the bits and the
//! trigger counts back (`EVENT_GET`). An event nothing acts on (no filter, trigger or soft
//! mode) is pointed at [`record_plain_event`] instead, which reads no shared state.
//! A `hist` trigger's table lives here too: each record that passes its filter is aggregated
//! into it (ftrace-tracefs's `HistMap`; a table busy with the control thread's print counts
//! the record as dropped), and `EVENT_HIST` prints the tables as the event's `hist` file
//! ([`hist`]). Invariant:
//! an event's call site points at one of the two exactly while its state says armed (hard-
//! or soft-enabled), at [`record_event`] whenever a filter, a trigger or a soft bit could
//! act on it.

use core::sync::atomic::{AtomicBool, Ordering};
use std::collections::BTreeMap;
use std::sync::Mutex;

use ftrace_core::format::TraceEventFormat;
use ftrace_core::platform::Reclaim;
use ftrace_core::reclaim::{Published, RcuCell, ReaderCount};
use ftrace_ringbuf::slot::SlotEvent;
use ftrace_tracefs::event_filter::{self, EventFilter, RecordCtx};
use ftrace_tracefs::hist::{HistNames, HistTable, HistTableError};
use ftrace_tracefs::trigger_run::{TriggerActions, TriggerRunner};
use ftrace_tracefs::triggers::{Trigger, TriggerCmd, TriggerCtx, TriggerKind};

use crate::event::{self, EventDesc, ProbeFn};
use crate::handler::{self, ThreadState};
use crate::hist_symbols::{KeySymbol, KeySymbols, key_symbols};

/// One event's state as the tool sends it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventConfig {
    /// Armed (the tree's `enabled`: hard- or soft-enabled).
    pub armed: bool,
    /// Records discarded (`soft_disabled`).
    pub soft_disabled: bool,
    /// The filter text (empty: none).
    pub filter: String,
    /// The triggers that run here, in `trigger` file order.
    pub triggers: Vec<WireTrigger>,
}

/// A trigger as the control channel carries it: `traceon|traceoff|enable=<id>|disable=<id>`,
/// its count (`-1`: unlimited) and its `if` filter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireTrigger {
    /// What it does.
    pub action: WireAction,
    /// Remaining count (`-1`: unlimited).
    pub count: i64,
    /// The `if` filter's text (empty: none).
    pub filter: String,
}

/// The trigger commands run on program events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WireAction {
    /// `traceon`.
    TraceOn,
    /// `traceoff`.
    TraceOff,
    /// `enable_event` of the event with this id.
    Enable(u16),
    /// `disable_event` of the event with this id.
    Disable(u16),
    /// `stacktrace`: the thread's stack after the record (walked by [`crate::stack`]).
    Stacktrace,
    /// `hist`: its definition as the `trigger` file shows it (`hist:keys=...:size=2048`,
    /// without filter and state) and whether it is paused; its table lives in the program.
    Hist {
        /// The definition.
        spec: String,
        /// `:pause`d.
        paused: bool,
    },
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<String> {
    if s.len() % 2 != 0 {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

impl EventConfig {
    /// The `EVENT_SET` request's arguments: `armed\tsoft\tfilter|-\ttriggers|-`, triggers
    /// `action,count,filter|-` joined by `;` (a hist trigger's action `hist=<hex>` or
    /// `hist-paused=<hex>`: its definition's bytes in hex).
    pub fn to_args(&self) -> String {
        let dash = |s: &str| {
            if s.is_empty() {
                "-".to_string()
            } else {
                s.to_string()
            }
        };
        let t: Vec<String> = self
            .triggers
            .iter()
            .map(|t| {
                let a = match &t.action {
                    WireAction::TraceOn => "traceon".to_string(),
                    WireAction::TraceOff => "traceoff".to_string(),
                    WireAction::Enable(id) => format!("enable={id}"),
                    WireAction::Disable(id) => format!("disable={id}"),
                    WireAction::Stacktrace => "stacktrace".to_string(),
                    WireAction::Hist { spec, paused } => {
                        let state = if *paused { "hist-paused" } else { "hist" };
                        format!("{state}={}", hex(spec))
                    }
                };
                format!("{a},{},{}", t.count, dash(&t.filter))
            })
            .collect();
        format!(
            "{}\t{}\t{}\t{}",
            u8::from(self.armed),
            u8::from(self.soft_disabled),
            dash(&self.filter),
            dash(&t.join(";"))
        )
    }

    /// Parses [`EventConfig::to_args`]'s form.
    pub fn parse_args(s: &str) -> Option<EventConfig> {
        let undash = |s: &str| {
            if s == "-" {
                String::new()
            } else {
                s.to_string()
            }
        };
        let mut p = s.split('\t');
        let flag = |v: &str| match v {
            "0" => Some(false),
            "1" => Some(true),
            _ => None,
        };
        let armed = flag(p.next()?)?;
        let soft_disabled = flag(p.next()?)?;
        let filter = undash(p.next()?);
        let mut triggers = Vec::new();
        let t = p.next()?;
        if p.next().is_some() {
            return None;
        }
        if t != "-" {
            for one in t.split(';') {
                let mut q = one.splitn(3, ',');
                let a = q.next()?;
                let action = match a {
                    "traceon" => WireAction::TraceOn,
                    "traceoff" => WireAction::TraceOff,
                    "stacktrace" => WireAction::Stacktrace,
                    _ => match a.split_once('=')? {
                        ("enable", id) => WireAction::Enable(id.parse().ok()?),
                        ("disable", id) => WireAction::Disable(id.parse().ok()?),
                        (state @ ("hist" | "hist-paused"), spec) => WireAction::Hist {
                            spec: unhex(spec)?,
                            paused: state == "hist-paused",
                        },
                        _ => return None,
                    },
                };
                triggers.push(WireTrigger {
                    action,
                    count: q.next()?.parse().ok()?,
                    filter: undash(q.next()?),
                });
            }
        }
        Some(EventConfig {
            armed,
            soft_disabled,
            filter,
            triggers,
        })
    }
}

/// One armed event, compiled.
struct Live {
    id: u16,
    /// Its system and name (the function commands name their target so).
    system: &'static str,
    name: &'static str,
    soft_disabled: AtomicBool,
    filter: Option<EventFilter>,
    runner: Option<TriggerRunner>,
    /// The hist triggers' tables, in `trigger` file order.
    hists: Vec<HistTable>,
}

static LIVE: RcuCell<Vec<Live>> = RcuCell::empty();
static LIVE_READERS: ReaderCount = ReaderCount::new();
/// The configurations, by id (control thread only).
static CONFIGS: Mutex<BTreeMap<u16, EventConfig>> = Mutex::new(BTreeMap::new());
/// The events the function commands `enable_event` / `disable_event` flip ([`crate::probe`]).
static PROBE_TARGETS: Mutex<Vec<u16>> = Mutex::new(Vec::new());

/// The hist trigger a wire definition names, parsed against `format` as the tree parsed it.
pub fn hist_trigger(
    format: &TraceEventFormat,
    spec: &str,
    paused: bool,
    filter: &str,
) -> Result<Trigger, &'static str> {
    let cx = TriggerCtx {
        event: format,
        find_event: &|_, _| None,
        existing: &[],
        var_defined: &|_| false,
        clocks: &[],
    };
    match ftrace_tracefs::triggers::parse(spec.as_bytes(), &cx, &mut |_, _, _, _| {}) {
        Ok(TriggerCmd::Add(mut t)) => {
            t.paused = paused;
            t.filter = (!filter.is_empty()).then(|| filter.to_string());
            Ok(t)
        }
        _ => Err("bad hist trigger"),
    }
}

/// The tables of `c`'s hist triggers; one that `old` has already keeps its table (adding,
/// removing, pausing another trigger clears nothing).
fn hist_tables(
    format: &TraceEventFormat,
    c: &EventConfig,
    old: &[HistTable],
) -> Result<Vec<HistTable>, &'static str> {
    let mut v = Vec::new();
    for t in &c.triggers {
        let WireAction::Hist { spec, paused } = &t.action else {
            continue;
        };
        let trigger = hist_trigger(format, spec, *paused, &t.filter)?;
        v.push(
            HistTable::compile(&trigger, format, old).map_err(|e| match e {
                HistTableError::BadFilter => "bad filter",
                HistTableError::NotHist | HistTableError::Unsupported => {
                    "hist trigger not supported"
                }
            })?,
        );
    }
    Ok(v)
}

fn compile(
    format: &TraceEventFormat,
    c: &EventConfig,
    old: &[HistTable],
) -> Result<Live, &'static str> {
    let filter = match c.filter.is_empty() {
        true => None,
        false => Some(event_filter::parse(format, &c.filter).map_err(|_| "bad filter")?),
    };
    let mut triggers: Vec<Trigger> = Vec::new();
    for t in &c.triggers {
        let kind = match &t.action {
            WireAction::TraceOn => TriggerKind::TraceOn,
            WireAction::TraceOff => TriggerKind::TraceOff,
            WireAction::Stacktrace => TriggerKind::Stacktrace,
            WireAction::Enable(id) | WireAction::Disable(id) => TriggerKind::Enable {
                system: "",
                event: "",
                id: *id,
                enable: matches!(t.action, WireAction::Enable(_)),
                hist: false,
            },
            // Run by its table ([`hist_tables`]); in the runner (which leaves it alone) for
            // its place in the counts.
            WireAction::Hist { spec, paused } => {
                hist_trigger(format, spec, *paused, &t.filter)?.kind
            }
        };
        triggers.push(Trigger {
            kind,
            count: t.count,
            filter: (!t.filter.is_empty()).then(|| t.filter.clone()),
            paused: false,
        });
    }
    Ok(Live {
        id: format.id,
        system: format.system,
        name: format.name,
        soft_disabled: AtomicBool::new(c.soft_disabled),
        filter,
        runner: (!triggers.is_empty()).then(|| TriggerRunner::new(format, &triggers)),
        hists: hist_tables(format, c, old)?,
    })
}

/// `EVENT_SET`: event `id` takes `config`; the set is republished and the call sites
/// re-pointed. `Err` (nothing changed) for an unknown event or a filter that does not parse.
pub fn set(id: u16, config: EventConfig) -> Result<(), &'static str> {
    event::find(id).ok_or("no such event")?;
    if config
        .triggers
        .iter()
        .any(|t| t.action == WireAction::Stacktrace)
    {
        crate::stack::prepare_caller_walk();
    }
    republish(|next| {
        next.insert(id, config);
    })
}

/// The function commands now flip the soft bits of `ids`: those events are re-pointed at
/// [`record_event`] (or back at the plain path). Called by the control thread.
pub fn set_probe_targets(mut ids: Vec<u16>) {
    ids.sort_unstable();
    ids.dedup();
    {
        let mut t = PROBE_TARGETS.lock().unwrap_or_else(|e| e.into_inner());
        if *t == ids {
            return;
        }
        *t = ids;
    }
    // The configurations compiled before; nothing new to refuse.
    let _ = republish(|_| {});
}

/// Publishes the configurations `edit` makes of the current ones, with the soft bits and
/// counts the triggers and function commands changed here.
fn republish(edit: impl FnOnce(&mut BTreeMap<u16, EventConfig>)) -> Result<(), &'static str> {
    let mut configs = CONFIGS.lock().unwrap_or_else(|e| e.into_inner());
    let mut next = configs.clone();
    // The soft bits and counts the triggers changed here are the tool's to send back; a
    // config without this event keeps the live bits of the others.
    with_live(|live| {
        for (i, c) in next.iter_mut() {
            if let Some(l) = live.iter().find(|l| l.id == *i) {
                c.soft_disabled = l.soft_disabled.load(Ordering::Relaxed);
                if let Some(r) = &l.runner {
                    for (t, n) in c.triggers.iter_mut().zip(r.counts()) {
                        t.count = n;
                    }
                }
            }
        }
    });
    edit(&mut next);
    let live = with_live(|old| {
        let mut live = Vec::new();
        for (i, c) in next.iter().filter(|(_, c)| c.armed) {
            let old_hists = old
                .iter()
                .find(|l| l.id == *i)
                .map_or(&[][..], |l| &l.hists[..]);
            live.push(compile(
                format_of(*i).ok_or("no such event")?,
                c,
                old_hists,
            )?);
        }
        Ok::<_, &'static str>(live)
    })?;
    // An event nothing acts on (no filter, no trigger, not soft-disabled, no other event's
    // trigger flips it) records on the plain path, which reads no shared state.
    let mut targets: Vec<u16> = next
        .values()
        .flat_map(|c| c.triggers.iter())
        .filter_map(|t| match t.action {
            WireAction::Enable(id) | WireAction::Disable(id) => Some(id),
            _ => None,
        })
        .collect();
    targets.extend(
        PROBE_TARGETS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter(),
    );
    let probes: BTreeMap<u16, ProbeFn> = next
        .iter()
        .filter(|(_, c)| c.armed)
        .map(|(i, c)| {
            let plain = c.filter.is_empty()
                && c.triggers.is_empty()
                && !c.soft_disabled
                && !targets.contains(i);
            let probe: ProbeFn = match plain {
                true => record_plain_event,
                false => record_event,
            };
            (*i, probe)
        })
        .collect();
    LIVE.replace(
        match live.is_empty() {
            true => Published::None,
            false => Published::Owned(Box::new(live)),
        },
        &LIVE_READERS,
    );
    event::arm(|id| probes.get(&id).copied());
    *configs = next;
    Ok(())
}

/// `ftrace record -e`: arms every listed event one of the `set_event` tokens matches
/// ([`ftrace_tracefs::events::set_event_matcher`]) and that has no state yet (no filter, no
/// trigger: recorded as it fires). Called after each scan of new objects, so an event of a
/// library loaded later is armed too. Returns how many were armed.
pub fn arm_matching(tokens: &[String]) -> usize {
    if tokens.is_empty() {
        return 0;
    }
    let known: Vec<u16> = CONFIGS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .keys()
        .copied()
        .collect();
    let mut armed = 0;
    for e in event::list() {
        if known.contains(&e.id) {
            continue;
        }
        let Some(format) = format_of(e.id) else {
            continue;
        };
        if !tokens
            .iter()
            .any(|t| ftrace_tracefs::events::set_event_matcher(t)(format))
        {
            continue;
        }
        let config = EventConfig {
            armed: true,
            ..EventConfig::default()
        };
        if set(e.id, config).is_ok() {
            armed += 1;
        }
    }
    armed
}

/// The format of event `id`, built once (leaked) and kept.
fn format_of(id: u16) -> Option<&'static TraceEventFormat> {
    static FORMATS: Mutex<BTreeMap<u16, &'static TraceEventFormat>> = Mutex::new(BTreeMap::new());
    let mut f = FORMATS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(v) = f.get(&id) {
        return Some(*v);
    }
    let v: &'static TraceEventFormat = Box::leak(Box::new(event::find(id)?.format()));
    f.insert(id, v);
    Some(v)
}

/// The system and name of program event `id`.
pub fn names_of(id: u16) -> Option<(&'static str, &'static str)> {
    format_of(id).map(|f| (f.system, f.name))
}

/// The soft-disabled bit of the armed event `system:name` (a function command's check);
/// `None` if it is not armed. Takes no lock and allocates nothing (runs in traced code).
pub fn soft_disabled_by_name(system: &str, name: &str) -> Option<bool> {
    with_live(|live| {
        let l = live.iter().find(|l| l.system == system && l.name == name)?;
        Some(l.soft_disabled.load(Ordering::Relaxed))
    })
}

/// Sets the soft-disabled bit of the armed event `system:name` (`enable_event` /
/// `disable_event` run as function commands); nothing if it is not armed.
pub fn set_soft_disabled_by_name(system: &str, name: &str, disabled: bool) {
    with_live(|live| {
        if let Some(l) = live.iter().find(|l| l.system == system && l.name == name) {
            l.soft_disabled.store(disabled, Ordering::Relaxed);
        }
    });
}

/// `EVENT_GET`: event `id`'s soft-disabled bit and its triggers' remaining counts now.
pub fn get(id: u16) -> Option<(bool, Vec<i64>)> {
    with_live(|live| {
        let l = live.iter().find(|l| l.id == id)?;
        let counts = l
            .runner
            .as_ref()
            .map(TriggerRunner::counts)
            .unwrap_or_default();
        Some((l.soft_disabled.load(Ordering::Relaxed), counts))
    })
}

/// One hist table's aggregation as `EVENT_HIST` carries it to the tool, which merges the
/// tables of every process of a tree into the event's `hist` file ([`write_hists`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HistDump {
    /// Records that found or created their element.
    pub hits: u64,
    /// Records dropped (a full table, or one busy when they came).
    pub drops: u64,
    /// Each element: its compound key, its sums (`hitcount` first), its task name.
    pub elements: Vec<(Vec<u8>, Vec<u64>, Vec<u8>)>,
    /// The symbols of the `.sym` / `.sym-offset` key values, as the process named them.
    pub symbols: Vec<KeySymbol>,
}

fn unhex_bytes(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

impl HistDump {
    /// The table's lines: `T\t<hits>\t<drops>`, then `E\t<key hex>\t<sums,>\t<comm hex|->`
    /// per element, then `S\t<addr>\t<name hex>\t<start>\t<size>` (numbers in hex) per
    /// named key address.
    pub fn to_lines(&self) -> String {
        let hexb = |b: &[u8]| b.iter().map(|b| format!("{b:02x}")).collect::<String>();
        let mut out = format!("T\t{}\t{}\n", self.hits, self.drops);
        for (k, sums, comm) in &self.elements {
            let sums: Vec<String> = sums.iter().map(u64::to_string).collect();
            let comm = match comm.is_empty() {
                true => "-".to_string(),
                false => hexb(comm),
            };
            out.push_str(&format!("E\t{}\t{}\t{comm}\n", hexb(k), sums.join(",")));
        }
        for s in &self.symbols {
            let name = hexb(s.name.as_bytes());
            out.push_str(&format!(
                "S\t{:x}\t{name}\t{:x}\t{:x}\n",
                s.addr, s.start, s.size
            ));
        }
        out
    }

    /// Parses the tables of [`HistDump::to_lines`] lines.
    pub fn parse_lines<'a>(lines: impl IntoIterator<Item = &'a str>) -> Option<Vec<HistDump>> {
        let mut out: Vec<HistDump> = Vec::new();
        for l in lines {
            let mut p = l.split('\t');
            match p.next()? {
                "T" => out.push(HistDump {
                    hits: p.next()?.parse().ok()?,
                    drops: p.next()?.parse().ok()?,
                    elements: Vec::new(),
                    symbols: Vec::new(),
                }),
                "E" => {
                    let key = unhex_bytes(p.next()?)?;
                    let sums = p
                        .next()?
                        .split(',')
                        .map(|n| n.parse().ok())
                        .collect::<Option<Vec<u64>>>()?;
                    let comm = match p.next()? {
                        "-" => Vec::new(),
                        c => unhex_bytes(c)?,
                    };
                    out.last_mut()?.elements.push((key, sums, comm));
                }
                "S" => {
                    let hex = |s: &str| u64::from_str_radix(s, 16).ok();
                    let addr = hex(p.next()?)?;
                    let name = String::from_utf8(unhex_bytes(p.next()?)?).ok()?;
                    let (start, size) = (hex(p.next()?)?, hex(p.next()?)?);
                    let sym = KeySymbol {
                        addr,
                        name,
                        start,
                        size,
                    };
                    out.last_mut()?.symbols.push(sym);
                }
                _ => return None,
            }
        }
        Some(out)
    }
}

/// `EVENT_HIST`: event `id`'s hist tables as aggregated here, in `trigger` file order, their
/// `.sym` key addresses named ([`key_symbols`], after the table is copied: records are not
/// held up by the lookups). `None` for an event not armed.
pub fn hist(id: u16) -> Option<Vec<HistDump>> {
    with_live(|live| {
        let l = live.iter().find(|l| l.id == id)?;
        let dumps = l
            .hists
            .iter()
            .map(|t| {
                let mut d = t.with_map(|m| HistDump {
                    hits: m.hits(),
                    drops: m.drops(),
                    elements: (0..m.len())
                        .map(|e| (m.key(e).to_vec(), m.sums(e).to_vec(), m.comm(e).to_vec()))
                        .collect(),
                    symbols: Vec::new(),
                });
                d.symbols = key_symbols(t.def(), d.elements.iter().map(|e| &e.0[..]));
                d
            })
            .collect();
        Some(dumps)
    })
}

/// An event's `hist` file: its hist triggers' tables as Linux prints them, `.sym` keys named
/// from `symbols` (the names the processes gave, [`KeySymbols`]), `.syscall` keys by `syscall`
/// (`None`: `unknown_syscall`, as the kernel prints a number it has no name for).
pub fn write_hists(
    tables: &[HistTable],
    symbols: &KeySymbols,
    syscall: &dyn Fn(u64) -> Option<&'static str>,
) -> String {
    let names = HistNames {
        symbols,
        syscall: &|nr| syscall(nr),
    };
    let mut out = String::new();
    for (n, t) in tables.iter().enumerate() {
        let _ = t.write(&mut out, n, &names);
    }
    out
}

/// The tables of event `format`'s hist triggers in `config`, empty: what [`HistDump`]s of the
/// processes are merged into. `None` if one does not compile.
pub fn empty_hist_tables(
    format: &TraceEventFormat,
    config: &EventConfig,
) -> Option<Vec<HistTable>> {
    hist_tables(format, config, &[]).ok()
}

/// `hist:...:clear`: empties hist table `n` (among the event's hist triggers) of event `id`.
pub fn clear_hist(id: u16, n: usize) -> Result<(), &'static str> {
    with_live(|live| {
        let t = live
            .iter()
            .find(|l| l.id == id)
            .and_then(|l| l.hists.get(n))
            .ok_or("no such hist trigger")?;
        t.clear();
        Ok(())
    })
}

fn with_live<R>(f: impl FnOnce(&[Live]) -> R) -> R {
    let _g = LIVE_READERS.pin();
    // SAFETY: inside a guard of the domain `LIVE` is replaced through; `f` cannot keep the
    // reference.
    f(unsafe { LIVE.load() }.map_or(&[][..], |v| v.as_slice()))
}

/// What the triggers act on: the agent's `tracing_on`, the events' soft bits (of `.0`) and
/// the firing thread's buffer (`.1`, for `stacktrace`).
struct Actions<'a>(&'a [Live], *mut ThreadState);

impl TriggerActions for Actions<'_> {
    fn tracing_is_on(&self) -> bool {
        handler::TRACING_ON.load(Ordering::SeqCst)
    }
    fn set_tracing_on(&self, on: bool) {
        handler::TRACING_ON.store(on, Ordering::SeqCst);
        handler::update_fast_path();
    }
    fn stacktrace(&self) {
        // SAFETY: the firing thread's registered state, its guard held by [`record_event`],
        // which does not touch it while the triggers run.
        crate::stack::record_caller(unsafe { &mut *self.1 });
    }
    fn event_soft_disabled(&self, id: u16) -> Option<bool> {
        let l = self.0.iter().find(|l| l.id == id)?;
        Some(l.soft_disabled.load(Ordering::Relaxed))
    }
    fn set_event_soft_disabled(&self, id: u16, disabled: bool) {
        if let Some(l) = self.0.iter().find(|l| l.id == id) {
            l.soft_disabled.store(disabled, Ordering::Relaxed);
        }
    }
}

/// The `stacktrace` trace option: each recorded event is followed by the stack of the
/// function that fired it (before the event's own triggers run, as the kernel commits the
/// option's stack with the record).
pub static EVENT_STACK: AtomicBool = AtomicBool::new(false);

/// What an armed call site calls: runs the event's triggers and records `len` bytes at `rec`
/// (a record of `desc`'s layout, common header first) into the calling thread's ring unless
/// soft-disabled, filtered out or tracing is off. Nothing runs while a handler already runs
/// on the thread (a signal handler's event inside one), as a function entry would not be
/// recorded. A full ring drops and counts it.
///
/// # Safety
/// Called by the header's call sites only: `desc` a live descriptor, `rec` valid for `len`
/// bytes.
pub unsafe extern "C" fn record_event(desc: *const EventDesc, rec: *const u8, len: u32) {
    // SAFETY: the thread's own state block.
    let st = unsafe { &mut *handler::current() };
    if st.guard != 0 {
        return;
    }
    st.guard = 1;
    let registered = st.state == 1 || st.state == crate::unwind::UNWOUND || handler::register(st);
    if registered {
        // SAFETY: caller's contract.
        let (desc, rec) = unsafe { (&*desc, core::slice::from_raw_parts(rec, len as usize)) };
        // SAFETY: registered: the cpu pointer and the buffer header are live.
        let (cpu, comm) = unsafe { (*st.cpu, (*st.writer.header).comm) };
        let admitted = admits(st.tid, cpu);
        let id = desc.id.load(Ordering::Relaxed) as u16;
        let n = rec.len().clamp(8, 8 + event::MAX_PAYLOAD);
        // The record with its common fields filled (type, pid), copied without zeroing the
        // rest of the buffer: only `n` bytes are written and read.
        let mut buf = core::mem::MaybeUninit::<[u8; 8 + event::MAX_PAYLOAD]>::uninit();
        let dst = buf.as_mut_ptr().cast::<u8>();
        // SAFETY: `rec` has `len >= n` bytes when `len >= 8` (a shorter record is padded
        // with zeros below); `buf` has room for `n`.
        unsafe {
            let have = rec.len().min(n);
            core::ptr::copy_nonoverlapping(rec.as_ptr(), dst, have);
            core::ptr::write_bytes(dst.add(have), 0, n - have);
        }
        // SAFETY: the first `n` bytes were written just above.
        let full = unsafe { core::slice::from_raw_parts_mut(dst, n) };
        full[..2].copy_from_slice(&id.to_ne_bytes());
        full[4..8].copy_from_slice(&st.tid.to_ne_bytes());
        let full = &*full;
        let comm_len = comm.iter().position(|&b| b == 0).unwrap_or(16);
        let cx = RecordCtx {
            cpu,
            comm: &comm[..comm_len],
        };
        with_live(|live| {
            let Some(l) = live.iter().find(|l| l.id == id) else {
                return;
            };
            let actions = Actions(live, &raw mut *st);
            if let Some(r) = &l.runner {
                r.before_record(&actions);
            }
            // The kernel's `trace_event_ignore_this_pid`: the triggers that need no record
            // have run; nothing else runs for a thread the event pid lists or the cpumask
            // leave out.
            if !admitted {
                return;
            }
            let record = !l.soft_disabled.load(Ordering::Relaxed)
                && handler::TRACING_ON.load(Ordering::Relaxed)
                && l.filter.as_ref().is_none_or(|f| f.matches(full, &cx));
            if record {
                // SAFETY: registered: the writer describes this thread's live buffer.
                let ring = unsafe { st.writer.ring() };
                write_record(&ring, handler::now(), cpu, id, &full[8..]);
                if EVENT_STACK.load(Ordering::Relaxed) {
                    actions.stacktrace();
                }
            }
            if let Some(r) = &l.runner {
                r.after_record(full, &cx, &actions);
            }
            l.hists.iter().for_each(|t| t.update(full, &cx));
        });
    }
    st.guard = 0;
}

/// What an armed call site calls when nothing acts on its event (no filter, trigger or soft
/// mode): the record, unless tracing is off, with no read of the published set. The same
/// thread rules as [`record_event`].
///
/// # Safety
/// As [`record_event`].
pub unsafe extern "C" fn record_plain_event(desc: *const EventDesc, rec: *const u8, len: u32) {
    if !handler::TRACING_ON.load(Ordering::Relaxed) {
        return;
    }
    // SAFETY: the thread's own state block.
    let st = unsafe { &mut *handler::current() };
    if st.guard != 0 {
        return;
    }
    st.guard = 1;
    let registered = st.state == 1 || st.state == crate::unwind::UNWOUND || handler::register(st);
    // SAFETY: registered: the cpu pointer is live.
    if registered && admits(st.tid, unsafe { *st.cpu }) {
        // SAFETY: caller's contract.
        let (desc, rec) = unsafe { (&*desc, core::slice::from_raw_parts(rec, len as usize)) };
        // SAFETY: registered: the cpu pointer is live.
        let cpu = unsafe { *st.cpu };
        let id = desc.id.load(Ordering::Relaxed) as u16;
        let payload = rec.get(8..).unwrap_or(&[]);
        // SAFETY: registered: the writer describes this thread's live buffer.
        let ring = unsafe { st.writer.ring() };
        write_record(&ring, handler::now(), cpu, id, payload);
        if EVENT_STACK.load(Ordering::Relaxed) {
            crate::stack::record_caller(st);
        }
    }
    st.guard = 0;
}

/// Whether thread `tid`, running on `cpu`, records events: the event pid lists
/// ([`crate::event_pids`]) and `tracing_cpumask` ([`crate::cpumask`]) let it. The function
/// tracer's pid lists do not filter events (Linux's `set_ftrace_pid` neither).
#[inline(always)]
fn admits(tid: u32, cpu: u32) -> bool {
    crate::event_pids::admits(tid) && crate::cpumask::admits(cpu)
}

/// Data slots a record on the short path may take (payloads up to 232 bytes): the tail
/// array on the stack stays small, so the common record does not clear 2 KiB per event.
const SHORT_TAIL: usize = 8;

/// Writes the record of `payload` into `ring`: one slot when the head holds it all (a
/// record of up to 8 bytes of fields: no tail to build or clear), else one span through a
/// tail on the stack ([`SHORT_TAIL`] slots, longer records on a cold path).
#[inline(always)]
fn write_record(
    ring: &ftrace_ringbuf::slot::SlotRing<'_>,
    ts: u64,
    cpu: u32,
    id: u16,
    payload: &[u8],
) {
    match event::data_slots_for(payload.len()) {
        0 => {
            let _ = ring.write(event::head(ts, cpu, id, payload));
        }
        n if n <= SHORT_TAIL => {
            let mut tail = [SlotEvent::default(); SHORT_TAIL];
            write_span(ring, ts, cpu, id, payload, &mut tail);
        }
        _ => write_long_record(ring, ts, cpu, id, payload),
    }
}

#[inline(always)]
fn write_span(
    ring: &ftrace_ringbuf::slot::SlotRing<'_>,
    ts: u64,
    cpu: u32,
    id: u16,
    payload: &[u8],
    tail: &mut [SlotEvent],
) {
    match event::encode(ts, cpu, id, payload, tail) {
        Some((head, k)) => {
            let _ = ring.write_span(head, &tail[..k]);
        }
        // Too big for any ring (refused at discovery; kept for safety): dropped, counted
        // with the ring's drops.
        None => {
            let _ = ring.reserve_span(0);
        }
    }
}

#[cold]
#[inline(never)]
fn write_long_record(
    ring: &ftrace_ringbuf::slot::SlotRing<'_>,
    ts: u64,
    cpu: u32,
    id: u16,
    payload: &[u8],
) {
    let mut tail = [SlotEvent::default(); 63];
    write_span(ring, ts, cpu, id, payload, &mut tail);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hist_dumps_round_trip_with_their_key_symbols() {
        let d = HistDump {
            hits: 3,
            drops: 1,
            elements: vec![(vec![0x10, 0x20, 0, 0, 0, 0, 0, 0], vec![3], b"sh".to_vec())],
            symbols: vec![KeySymbol {
                addr: 0x2010,
                name: "a b\tc".into(),
                start: 0x2000,
                size: 0x40,
            }],
        };
        let text = d.to_lines();
        assert_eq!(HistDump::parse_lines(text.lines()), Some(vec![d]));
    }

    #[test]
    fn configs_round_trip() {
        let c = EventConfig {
            armed: true,
            soft_disabled: false,
            filter: "value > 15".into(),
            triggers: vec![
                WireTrigger {
                    action: WireAction::TraceOff,
                    count: 1,
                    filter: "value == 18".into(),
                },
                WireTrigger {
                    action: WireAction::Stacktrace,
                    count: 2,
                    filter: String::new(),
                },
                WireTrigger {
                    action: WireAction::Enable(1025),
                    count: -1,
                    filter: String::new(),
                },
                WireTrigger {
                    action: WireAction::Hist {
                        spec: "hist:keys=value,delta:vals=hitcount:sort=value:size=2048".into(),
                        paused: true,
                    },
                    count: -1,
                    filter: "value > 3".into(),
                },
            ],
        };
        assert_eq!(EventConfig::parse_args(&c.to_args()), Some(c));
        let off = EventConfig::default();
        assert_eq!(off.to_args(), "0\t0\t-\t-");
        assert_eq!(EventConfig::parse_args("0\t0\t-\t-"), Some(off));
        assert_eq!(EventConfig::parse_args("2\t0\t-\t-"), None);
        assert_eq!(EventConfig::parse_args("1\t0\t-\tbogus,1,-"), None);
        assert_eq!(EventConfig::parse_args("1\t0\t-\thist=6,-1,-"), None);
    }
}
