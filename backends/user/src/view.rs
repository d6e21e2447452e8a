//! Report-time views: which events of a capture or recording `ftrace report` (and
//! `report --stat`) shows, chosen when reading, so that changing the view needs no new
//! recording.
//!
//! The function filters mean what the same flags of `ftrace record` mean, which are the
//! mount's filter files, so that a view of a complete recording is what a recording made with
//! those filters would hold:
//!
//! - `-F GLOB` (`set_ftrace_filter`): only matching functions. Under function_graph a call
//!   that is not shown hides only itself: its children that match still print, one level
//!   less deep (the kernel never puts an untraced function on the return stack, so the depth
//!   it records counts traced functions only); a shown call whose children are all hidden
//!   folds into a leaf `f();` with its whole duration.
//! - `-N GLOB` (`set_ftrace_notrace`): never these functions (their children print, as above).
//! - `-G GLOB` (`set_graph_function`, function_graph only): only the calls inside a matching
//!   function, itself included, at depth 0 for the outermost.
//! - `--max-depth N` (`max_graph_depth`, function_graph only): only calls less than N deep,
//!   counted in shown calls.
//!
//! uftrace's `replay -F` is our `-G` (a function and everything under it), and its `-N` (a
//! function and everything under it hidden) is the kernel's `set_graph_notrace`, which is not
//! offered here: the kernel's meaning was chosen so that one flag has one meaning in `record`,
//! `report` and the mount's files.
//!
//! The other views are stateless: `--tid T[,T]` (the threads shown), `--cpu C[,C]` (several
//! CPUs' events, merged; one CPU alone prints that CPU's file, `per_cpu/cpuN/trace`) and
//! `--time-range START~END` (uftrace's `-r` syntax: either end may be left out; a plain
//! number is a timestamp in seconds as the trace prints it, `1234.567890`, standing for the
//! events printed with it (the trace rounds to the microsecond), and one with a unit, `ns`,
//! `us`, `ms` or `s`, the time elapsed since the first event). A call is shown
//! when its entry is: an exit follows its entry into the view or out of it, so a call entered
//! in the range prints its exit even after END.
//!
//! Invariant: a view is applied to events in their merged time order (each thread's calls
//! nest in that order), one event at a time; it holds one frame per open call of each thread
//! and one class per function address, never the events themselves. A dropped event's count
//! of events lost before it passes to the next event shown on its CPU.

use std::collections::HashMap;

use ftrace_core::filter::Glob;
use ftrace_core::symbols::SymbolTable;
use ftrace_tracers::{Entry, EventRef, Missed};

/// The views asked for; the default shows everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ViewArgs {
    /// `-F`: only functions matching these globs (`set_ftrace_filter`).
    pub filter: Vec<String>,
    /// `-N`: never functions matching these globs (`set_ftrace_notrace`).
    pub notrace: Vec<String>,
    /// `-G`: only calls under functions matching these globs (`set_graph_function`).
    pub graph: Vec<String>,
    /// `--max-depth`: only calls less deep than this (0: every depth).
    pub max_depth: u32,
    /// `--tid`: only these threads (empty: every thread).
    pub tids: Vec<i32>,
    /// `--cpu` with several CPUs: only these CPUs' events, merged (empty: every CPU).
    pub cpus: Vec<u32>,
    /// `--time-range`.
    pub time_range: Option<TimeRange>,
}

impl ViewArgs {
    /// Whether a function filter (`-F`, `-N`, `-G`, `--max-depth`) is asked for: then calls
    /// may be hidden inside a thread's nesting, and depths are recounted.
    pub fn filters_functions(&self) -> bool {
        !self.filter.is_empty()
            || !self.notrace.is_empty()
            || !self.graph.is_empty()
            || self.max_depth > 0
    }

    /// Whether this view shows every event.
    pub fn is_everything(&self) -> bool {
        !self.filters_functions()
            && self.tids.is_empty()
            && self.cpus.is_empty()
            && self.time_range.is_none()
    }
}

/// One end of a `--time-range`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimePoint {
    /// A timestamp in the trace clock's nanoseconds (`1234.567890` as the trace prints it).
    At(u64),
    /// Nanoseconds elapsed since the first event (`100us`).
    Elapsed(u64),
}

/// `--time-range START~END`: either end may be missing (`START~`, `~END`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeRange {
    /// The first time shown.
    pub start: Option<TimePoint>,
    /// The last time shown.
    pub end: Option<TimePoint>,
}

impl TimeRange {
    /// Parses `START~END`; the error says what is wrong, in the words a tracefs file would
    /// use for a bad number (`Invalid argument`).
    pub fn parse(text: &str) -> Result<TimeRange, String> {
        let bad = |why: &str| format!("--time-range '{text}': Invalid argument: {why}");
        let (start, end) = text
            .split_once('~')
            .ok_or_else(|| bad("expected START~END (either may be left out)"))?;
        let point = |s: &str| -> Result<Option<TimePoint>, String> {
            let s = s.trim();
            if s.is_empty() {
                return Ok(None);
            }
            parse_point(s).map(Some).ok_or_else(|| {
                bad(&format!(
                    "'{s}' is neither seconds (1234.567890) nor a time with a unit \
                     (ns, us, ms, s)"
                ))
            })
        };
        let range = TimeRange {
            start: point(start)?,
            end: point(end)?,
        };
        if range.start.is_none() && range.end.is_none() {
            return Err(bad("give START, END or both"));
        }
        if let (Some(a), Some(b)) = (range.start, range.end) {
            let same_kind = matches!(
                (a, b),
                (TimePoint::At(_), TimePoint::At(_))
                    | (TimePoint::Elapsed(_), TimePoint::Elapsed(_))
            );
            if same_kind && value(a) > value(b) {
                return Err(bad("START is after END"));
            }
        }
        Ok(range)
    }

    /// The range in timestamps, the first event being at `first`.
    fn bounds(&self, first: u64) -> (u64, u64) {
        // The trace prints a timestamp rounded to the microsecond (`ns2usecs` adds 500 ns):
        // a whole microsecond stands for the events printed with it.
        let at = |p: TimePoint, printed: fn(u64) -> u64| match p {
            TimePoint::At(t) if t % 1000 == 0 => printed(t),
            TimePoint::At(t) => t,
            TimePoint::Elapsed(d) => first.saturating_add(d),
        };
        (
            self.start.map_or(0, |p| at(p, |t| t.saturating_sub(500))),
            self.end
                .map_or(u64::MAX, |p| at(p, |t| t.saturating_add(499))),
        )
    }
}

fn value(p: TimePoint) -> u64 {
    match p {
        TimePoint::At(t) | TimePoint::Elapsed(t) => t,
    }
}

/// `12.5us`, `3ms`, `2s`, `100ns` (elapsed) or `1234.567890` (seconds, a timestamp).
fn parse_point(s: &str) -> Option<TimePoint> {
    let units: [(&str, u64); 4] = [
        ("ns", 1),
        ("us", 1_000),
        ("ms", 1_000_000),
        ("s", 1_000_000_000),
    ];
    for (unit, scale) in units {
        if let Some(num) = s.strip_suffix(unit) {
            return decimal_scaled(num, scale).map(TimePoint::Elapsed);
        }
    }
    decimal_scaled(s, 1_000_000_000).map(TimePoint::At)
}

/// `int[.frac]` times `scale`, exactly (fraction digits below one unit of `scale` refused).
fn decimal_scaled(s: &str, scale: u64) -> Option<u64> {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    let digits = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
    if !digits(int) || !digits(frac) {
        return None;
    }
    let int: u64 = if int.is_empty() { 0 } else { int.parse().ok()? };
    let mut total = int.checked_mul(scale)?;
    let mut unit = scale;
    for b in frac.bytes() {
        unit /= 10;
        let d = u64::from(b - b'0');
        if unit == 0 {
            if d != 0 {
                return None;
            }
            continue;
        }
        total = total.checked_add(d * unit)?;
    }
    Some(total)
}

/// Checks every glob of `args` against the functions of `symbols`: the first that matches
/// none is an error in the mount's words (its `set_ftrace_filter` says `EINVAL` for the same
/// text), as are `-G` and `--max-depth` on a recording without nesting.
pub fn check(
    args: &ViewArgs,
    symbols: &dyn SymbolTable,
    graph_recording: bool,
) -> Result<(), String> {
    let mut count = 0usize;
    symbols.for_each(&mut |_| count += 1);
    for (opt, file, patterns) in [
        ("-F", "set_ftrace_filter", &args.filter),
        ("-N", "set_ftrace_notrace", &args.notrace),
        ("-G", "set_graph_function", &args.graph),
    ] {
        for p in patterns {
            let g = Glob::parse(p);
            let mut hit = false;
            symbols.for_each(&mut |s| hit |= g.matches(s.name));
            if !hit {
                return Err(format!(
                    "{opt} '{p}': {file}: Invalid argument: no function of the {count} \
                     symbols of the recording matches{}",
                    crate::sitecheck::pattern_hint(p)
                ));
            }
        }
    }
    if !graph_recording {
        if let Some(p) = args.graph.first() {
            return Err(format!(
                "-G '{p}': set_graph_function: Invalid argument: the recording was made by \
                 the function tracer, which records no nesting (record with -t function_graph)"
            ));
        }
        if args.max_depth > 0 {
            return Err(format!(
                "--max-depth {}: max_graph_depth: Invalid argument: the recording was made by \
                 the function tracer, which records no nesting (record with -t function_graph)",
                args.max_depth
            ));
        }
    }
    Ok(())
}

/// What the function globs say about one function.
#[derive(Clone, Copy, Debug)]
struct Class {
    /// Passes `-F` and `-N`.
    traced: bool,
    /// Matches `-G`.
    graph: bool,
}

/// One open call of a thread.
#[derive(Clone, Copy, Debug)]
struct Frame {
    func: u64,
    /// The depth recorded.
    depth: i32,
    /// Inside a `-G` function (or no `-G`).
    in_graph: bool,
    /// Shown.
    shown: bool,
    /// Hidden calls among this one and its ancestors: the shown depth is the recorded one
    /// less the hidden ancestors'.
    hidden: i32,
}

/// A view being applied: [`View::admit`] says, event by event in merged time order, whether
/// each is shown (and rewrites a shown call's depth).
pub struct View<'s> {
    args: ViewArgs,
    symbols: &'s dyn SymbolTable,
    range: (u64, u64),
    classes: HashMap<u64, Class>,
    threads: HashMap<i32, Vec<Frame>>,
    /// Per CPU: events lost before dropped events, owed to the next event shown.
    owed: Vec<Missed>,
}

impl<'s> View<'s> {
    /// A view of `args` over a recording whose first event is at `first_ts`.
    pub fn new(args: &ViewArgs, symbols: &'s dyn SymbolTable, first_ts: u64) -> Self {
        View {
            range: args
                .time_range
                .map_or((0, u64::MAX), |r| r.bounds(first_ts)),
            args: args.clone(),
            symbols,
            classes: HashMap::new(),
            threads: HashMap::new(),
            owed: Vec::new(),
        }
    }

    fn class(&mut self, func: u64) -> Class {
        if let Some(c) = self.classes.get(&func) {
            return *c;
        }
        let name = self.symbols.lookup(func).map(|s| s.name);
        // As the filter files take a list: in order, a match adds, a `!` match removes.
        let listed = |globs: &[String]| {
            let mut in_list = None;
            for g in globs.iter().map(|g| Glob::parse(g)) {
                if name.is_some_and(|n| g.matches(n)) {
                    in_list = Some(!g.not);
                }
            }
            in_list
        };
        let adds = |globs: &[String]| globs.iter().any(|g| !Glob::parse(g).not);
        let filtered = if adds(&self.args.filter) {
            listed(&self.args.filter) == Some(true)
        } else {
            listed(&self.args.filter) != Some(false)
        };
        let c = Class {
            traced: filtered && listed(&self.args.notrace) != Some(true),
            graph: listed(&self.args.graph) == Some(true),
        };
        self.classes.insert(func, c);
        c
    }

    /// A frame for a call at `depth` of `func` under `parent`, entered at `ts`.
    fn frame(&mut self, parent: Option<Frame>, func: u64, depth: i32, ts: u64) -> Frame {
        let class = self.class(func);
        let in_graph =
            self.args.graph.is_empty() || class.graph || parent.is_some_and(|p| p.in_graph);
        let hidden_above = parent.map_or(0, |p| p.hidden);
        let shown_depth = depth.saturating_sub(hidden_above);
        let deep_enough = self.args.max_depth == 0
            || u32::try_from(shown_depth).is_ok_and(|d| d < self.args.max_depth);
        let in_time = (self.range.0..=self.range.1).contains(&ts);
        let shown = in_graph && class.traced && deep_enough && in_time;
        Frame {
            func,
            depth,
            in_graph,
            shown,
            hidden: hidden_above + i32::from(!shown),
        }
    }

    /// Whether the event at `ts` on `cpu` (its bytes `data`, what was lost before it
    /// `missed`) is shown: a shown function_graph call has its depth rewritten when calls
    /// above it are hidden, and carries the losses of the dropped events before it.
    pub fn admit(&mut self, cpu: u32, ts: u64, data: &mut [u8], missed: &mut Missed) -> bool {
        let shown = self.decide(cpu, ts, data);
        let slot = cpu as usize;
        if self.owed.len() <= slot {
            self.owed.resize(slot + 1, Missed::None);
        }
        if shown {
            *missed = combine(
                std::mem::replace(&mut self.owed[slot], Missed::None),
                *missed,
            );
        } else {
            self.owed[slot] = combine(self.owed[slot], *missed);
        }
        shown
    }

    fn decide(&mut self, cpu: u32, ts: u64, data: &mut [u8]) -> bool {
        let ev = EventRef {
            cpu,
            ts,
            data,
            missed: Missed::None,
        };
        let pid = ev.pid();
        if !self.args.tids.is_empty() && !self.args.tids.contains(&pid) {
            return false;
        }
        let on_cpu = self.args.cpus.is_empty() || self.args.cpus.contains(&cpu);
        let in_time = (self.range.0..=self.range.1).contains(&ts);
        match ev.entry() {
            Entry::Function(f) => on_cpu && in_time && self.class(f.ip).traced,
            Entry::GraphEntry(e)
                if self.args.filters_functions() || self.args.time_range.is_some() =>
            {
                let stack = self.threads.entry(pid).or_default();
                while stack.last().is_some_and(|f| f.depth >= e.depth) {
                    stack.pop();
                }
                let parent = stack.last().copied();
                let frame = self.frame(parent, e.func, e.depth, ts);
                self.threads.entry(pid).or_default().push(frame);
                if frame.shown {
                    set_depth(data, frame.depth - parent.map_or(0, |p| p.hidden));
                }
                on_cpu && frame.shown
            }
            Entry::GraphReturn(r)
                if self.args.filters_functions() || self.args.time_range.is_some() =>
            {
                let stack = self.threads.entry(pid).or_default();
                while stack.last().is_some_and(|f| f.depth > r.depth) {
                    stack.pop();
                }
                let frame = match stack.last() {
                    Some(f) if f.depth == r.depth && f.func == r.func => stack.pop(),
                    _ => None,
                };
                // An exit whose entry is not in the recording (lost, or before it began):
                // judged as its entry would have been.
                let (frame, parent_hidden) = match frame {
                    Some(f) => (f, f.hidden - i32::from(!f.shown)),
                    None => {
                        let parent = self.threads.get(&pid).and_then(|s| s.last().copied());
                        let f = self.frame(parent, r.func, r.depth, r.calltime);
                        (f, parent.map_or(0, |p| p.hidden))
                    }
                };
                if frame.shown {
                    set_depth(data, frame.depth - parent_hidden);
                }
                on_cpu && frame.shown
            }
            _ => on_cpu && in_time,
        }
    }
}

/// Losses before two events, as one.
fn combine(a: Missed, b: Missed) -> Missed {
    match (a, b) {
        (Missed::None, x) | (x, Missed::None) => x,
        (Missed::Count(x), Missed::Count(y)) => Missed::Count(x.saturating_add(y)),
        _ => Missed::Unknown,
    }
}

/// Writes `depth` into a function_graph entry or exit record (the exit's layout with or
/// without its return value).
fn set_depth(data: &mut [u8], depth: i32) {
    use ftrace_core::EventId;
    use ftrace_core::entry::{FtraceGraphEntEntry, FtraceGraphRetvalEntry};
    let id = u16::from_le_bytes([data[0], data[1]]);
    let at = if id == EventId::FuncgraphEntry.as_u16() {
        core::mem::offset_of!(FtraceGraphEntEntry, depth)
    } else if data.len() >= size_of::<FtraceGraphRetvalEntry>() {
        core::mem::offset_of!(FtraceGraphRetvalEntry, depth)
    } else {
        core::mem::offset_of!(ftrace_core::entry::FtraceGraphRetEntry, depth)
    };
    if let Some(field) = data.get_mut(at..at + 4) {
        field.copy_from_slice(&depth.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_ranges_parse_as_uftrace_writes_them() {
        let r = TimeRange::parse("1.5ms~2s").unwrap();
        assert_eq!(r.start, Some(TimePoint::Elapsed(1_500_000)));
        assert_eq!(r.end, Some(TimePoint::Elapsed(2_000_000_000)));
        let r = TimeRange::parse("1234.567890~").unwrap();
        assert_eq!(r.start, Some(TimePoint::At(1_234_567_890_000)));
        assert_eq!(r.end, None);
        assert_eq!(
            TimeRange::parse("~100ns").unwrap().end,
            Some(TimePoint::Elapsed(100))
        );
        for bad in [
            "", "~", "5", "1ms-2ms", "x~", "1.5ns~", "3s~1s", "-1~", "1e3~",
        ] {
            let e = TimeRange::parse(bad).unwrap_err();
            assert!(e.contains("Invalid argument"), "{bad}: {e}");
        }
        assert_eq!(
            TimeRange::parse("~1ms").unwrap().bounds(500),
            (0, 1_000_500)
        );
    }
}
