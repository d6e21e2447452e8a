//! `trace_options`: the global output and behaviour flags, and the per-tracer option bits.
//!
//! The global flags are Linux 6.12's `TRACE_FLAGS`, in the kernel's bit order, which is the order
//! `trace_options` lists them. A tracer's own options ([`TracerOpt`]) follow them in that file.
//! This is the one table of them: ftrace-tracefs's `trace_options` and `options/` files list,
//! parse and store exactly these ([`TraceOptions::NAMES`], [`TraceOptions::DEFAULT`],
//! [`TraceOptions::TOP_LEVEL`], [`TraceOptions::ZEROED`]).
//! Invariant: [`TraceOptions::NAMES`] lists every flag exactly once, in bit order, so the listing
//! and the name parser can never disagree.

use core::fmt;

use bitflags::bitflags;
use ftrace_core::Errno;

bitflags! {
    /// The global trace options (`trace_options`, `options/<name>`), Linux 6.12 bit order.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct TraceOptions: u64 {
        /// `print-parent`: print the caller after `<-`.
        const PRINT_PARENT = 1 << 0;
        /// `sym-offset`: print `name+0xoff/0xsize`.
        const SYM_OFFSET = 1 << 1;
        /// `sym-addr`: append ` <address>` to every symbol.
        const SYM_ADDR = 1 << 2;
        /// `verbose`: the verbose latency format.
        const VERBOSE = 1 << 3;
        /// `raw`: numbers only.
        const RAW = 1 << 4;
        /// `hex`: fixed-width hexadecimal fields.
        const HEX = 1 << 5;
        /// `bin`: binary fields.
        const BIN = 1 << 6;
        /// `block`: `trace_pipe` blocks (no effect on formatting).
        const BLOCK = 1 << 7;
        /// `fields`: print every field of the event's format.
        const FIELDS = 1 << 8;
        /// `trace_printk`: record `trace_printk()`.
        const TRACE_PRINTK = 1 << 9;
        /// `annotate`: mark where each CPU's buffer starts after overruns.
        const ANNOTATE = 1 << 10;
        /// `userstacktrace`.
        const USERSTACKTRACE = 1 << 11;
        /// `sym-userobj`.
        const SYM_USEROBJ = 1 << 12;
        /// `printk-msg-only`: print only the message of printk-style events.
        const PRINTK_MSG_ONLY = 1 << 13;
        /// `context-info`: print the task/CPU/flags/time prefix.
        const CONTEXT_INFO = 1 << 14;
        /// `latency-format`: the latency tracers' line format and header.
        const LATENCY_FORMAT = 1 << 15;
        /// `record-cmd`: save task names.
        const RECORD_CMD = 1 << 16;
        /// `record-tgid`: save and print thread-group ids.
        const RECORD_TGID = 1 << 17;
        /// `overwrite`: overwrite the oldest events when the buffer is full.
        const OVERWRITE = 1 << 18;
        /// `disable_on_free`.
        const DISABLE_ON_FREE = 1 << 19;
        /// `irq-info`: print the five flag characters.
        const IRQ_INFO = 1 << 20;
        /// `markers`: accept `trace_marker` writes.
        const MARKERS = 1 << 21;
        /// `event-fork`.
        const EVENT_FORK = 1 << 22;
        /// `trace_printk_dest`.
        const TRACE_PRINTK_DEST = 1 << 23;
        /// `pause-on-trace`.
        const PAUSE_ON_TRACE = 1 << 24;
        /// `hash-ptr`.
        const HASH_PTR = 1 << 25;
        /// `function-trace`: the latency tracers also trace functions.
        const FUNCTION_TRACE = 1 << 26;
        /// `function-fork`.
        const FUNCTION_FORK = 1 << 27;
        /// `display-graph`.
        const DISPLAY_GRAPH = 1 << 28;
        /// `stacktrace`.
        const STACKTRACE = 1 << 29;
    }
}

impl TraceOptions {
    /// Every option with its name, in bit (and `trace_options` listing) order.
    pub const NAMES: [(&'static str, TraceOptions); 30] = [
        ("print-parent", Self::PRINT_PARENT),
        ("sym-offset", Self::SYM_OFFSET),
        ("sym-addr", Self::SYM_ADDR),
        ("verbose", Self::VERBOSE),
        ("raw", Self::RAW),
        ("hex", Self::HEX),
        ("bin", Self::BIN),
        ("block", Self::BLOCK),
        ("fields", Self::FIELDS),
        ("trace_printk", Self::TRACE_PRINTK),
        ("annotate", Self::ANNOTATE),
        ("userstacktrace", Self::USERSTACKTRACE),
        ("sym-userobj", Self::SYM_USEROBJ),
        ("printk-msg-only", Self::PRINTK_MSG_ONLY),
        ("context-info", Self::CONTEXT_INFO),
        ("latency-format", Self::LATENCY_FORMAT),
        ("record-cmd", Self::RECORD_CMD),
        ("record-tgid", Self::RECORD_TGID),
        ("overwrite", Self::OVERWRITE),
        ("disable_on_free", Self::DISABLE_ON_FREE),
        ("irq-info", Self::IRQ_INFO),
        ("markers", Self::MARKERS),
        ("event-fork", Self::EVENT_FORK),
        ("trace_printk_dest", Self::TRACE_PRINTK_DEST),
        ("pause-on-trace", Self::PAUSE_ON_TRACE),
        ("hash-ptr", Self::HASH_PTR),
        ("function-trace", Self::FUNCTION_TRACE),
        ("function-fork", Self::FUNCTION_FORK),
        ("display-graph", Self::DISPLAY_GRAPH),
        ("stacktrace", Self::STACKTRACE),
    ];

    /// The boot defaults of the top-level instance (`TRACE_DEFAULT_FLAGS` on 6.12).
    pub const DEFAULT: TraceOptions = TraceOptions::PRINT_PARENT
        .union(TraceOptions::TRACE_PRINTK)
        .union(TraceOptions::ANNOTATE)
        .union(TraceOptions::CONTEXT_INFO)
        .union(TraceOptions::RECORD_CMD)
        .union(TraceOptions::OVERWRITE)
        .union(TraceOptions::IRQ_INFO)
        .union(TraceOptions::MARKERS)
        .union(TraceOptions::TRACE_PRINTK_DEST)
        .union(TraceOptions::HASH_PTR)
        .union(TraceOptions::FUNCTION_TRACE);

    /// The flags only the top-level instance has an `options/` file for
    /// (`TOP_LEVEL_TRACE_FLAGS`).
    pub const TOP_LEVEL: TraceOptions = TraceOptions::TRACE_PRINTK
        .union(TraceOptions::PRINTK_MSG_ONLY)
        .union(TraceOptions::RECORD_CMD);

    /// The flags cleared when an instance is created (`ZEROED_TRACE_FLAGS`).
    pub const ZEROED: TraceOptions = TraceOptions::EVENT_FORK
        .union(TraceOptions::FUNCTION_FORK)
        .union(TraceOptions::TRACE_PRINTK_DEST);

    /// The flags a new instance starts with: `self` (the top level's current flags) minus
    /// [`TraceOptions::ZEROED`].
    pub const fn for_new_instance(self) -> TraceOptions {
        self.difference(TraceOptions::ZEROED)
    }

    /// The flag called `name`, if any.
    pub fn by_name(name: &str) -> Option<TraceOptions> {
        Self::by_name_bytes(name.as_bytes())
    }

    /// The flag called `name` (bytes as written to `trace_options`), if any.
    pub fn by_name_bytes(name: &[u8]) -> Option<TraceOptions> {
        Self::NAMES
            .iter()
            .find(|(n, _)| n.as_bytes() == name)
            .map(|&(_, flag)| flag)
    }

    /// The symbol-printing subset (`TRACE_ITER_SYM_MASK`).
    pub const SYM_MASK: TraceOptions = TraceOptions::PRINT_PARENT
        .union(TraceOptions::SYM_OFFSET)
        .union(TraceOptions::SYM_ADDR);
}

impl Default for TraceOptions {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// One option a tracer owns (`struct tracer_opt`): its name and its bit in the tracer's flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TracerOpt {
    /// The option's name (`funcgraph-cpu`).
    pub name: &'static str,
    /// Its bit in the tracer's flag word.
    pub bit: u32,
}

/// The full option state of one trace instance: the global flags and the current tracer's
/// flag word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// Global flags.
    pub trace: TraceOptions,
    /// The current tracer's flags (meaning given by its [`TracerOpt`] list).
    pub tracer: u32,
}

impl Options {
    /// Applies one `trace_options` write: `name` sets, `noname` clears. Global options are
    /// tried first, then the tracer's. Unknown names give `EINVAL` and change nothing, as do
    /// names of 64 bytes or more.
    pub fn apply(&mut self, word: &str, tracer_opts: &[TracerOpt]) -> Result<(), Errno> {
        let word = word.trim();
        if word.len() >= 64 || word.is_empty() {
            return Err(Errno::EINVAL);
        }
        let (set, name) = match word.strip_prefix("no") {
            Some(rest) => (false, rest),
            None => (true, word),
        };
        if let Some(flag) = TraceOptions::by_name(name) {
            self.trace.set(flag, set);
            return Ok(());
        }
        if let Some(opt) = tracer_opts.iter().find(|o| o.name == name) {
            if set {
                self.tracer |= opt.bit;
            } else {
                self.tracer &= !opt.bit;
            }
            return Ok(());
        }
        Err(Errno::EINVAL)
    }

    /// [`Options::apply`] for the current tracer, asking it first (`set_flag`) when one of its
    /// options changes; a refusal leaves everything unchanged.
    pub fn apply_for(
        &mut self,
        word: &str,
        tracer: &dyn crate::tracer::Tracer,
    ) -> Result<(), Errno> {
        let mut next = *self;
        next.apply(word, tracer.options())?;
        let changed = next.tracer ^ self.tracer;
        if changed != 0 {
            tracer.set_flag(self.tracer, changed, next.tracer & changed != 0)?;
        }
        *self = next;
        Ok(())
    }

    /// Writes the `trace_options` file: one option a line, disabled ones prefixed `no`,
    /// the global options first, then the tracer's.
    pub fn write_listing(
        &self,
        out: &mut dyn fmt::Write,
        tracer_opts: &[TracerOpt],
    ) -> fmt::Result {
        for (name, flag) in TraceOptions::NAMES {
            let no = if self.trace.contains(flag) { "" } else { "no" };
            writeln!(out, "{no}{name}")?;
        }
        for opt in tracer_opts {
            let no = if self.tracer & opt.bit != 0 { "" } else { "no" };
            writeln!(out, "{no}{}", opt.name)?;
        }
        Ok(())
    }
}
