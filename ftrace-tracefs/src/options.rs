//! The global trace flags behind `trace_options` and `options/<name>` (Linux 6.12 `TRACE_FLAGS`).
//!
//! Bit `n` of a [`TraceFlags`] word is the `n`-th entry of [`FLAGS`], which is the order
//! `trace_options` lists them in and the bit numbering ftrace-tracers uses
//! (`TraceOptions::from_bits_retain(word)`). Invariant: [`FLAGS`] names each bit once, so the
//! listing, the name parser and the `options/` directory never disagree.

/// A word of global trace flags, in the kernel's bit order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TraceFlags(pub u64);

/// One global flag: its name, whether it is on by default, and where it exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlagInfo {
    /// The option name (`"print-parent"`).
    pub name: &'static str,
    /// On at boot in the top-level instance (`TRACE_DEFAULT_FLAGS`).
    pub default: bool,
    /// Only the top level has an `options/` file for it (`TOP_LEVEL_TRACE_FLAGS`).
    pub top_level_only: bool,
    /// Cleared when an instance is created (`ZEROED_TRACE_FLAGS`).
    pub zeroed_in_instances: bool,
}

const fn flag(name: &'static str, default: bool) -> FlagInfo {
    FlagInfo {
        name,
        default,
        top_level_only: false,
        zeroed_in_instances: false,
    }
}

const fn top(name: &'static str, default: bool) -> FlagInfo {
    FlagInfo {
        top_level_only: true,
        ..flag(name, default)
    }
}

const fn zeroed(name: &'static str, default: bool) -> FlagInfo {
    FlagInfo {
        zeroed_in_instances: true,
        ..flag(name, default)
    }
}

/// Every global flag, in bit order (Linux 6.12 with function tracing and stack traces built in).
pub const FLAGS: [FlagInfo; 30] = [
    flag("print-parent", true),
    flag("sym-offset", false),
    flag("sym-addr", false),
    flag("verbose", false),
    flag("raw", false),
    flag("hex", false),
    flag("bin", false),
    flag("block", false),
    flag("fields", false),
    top("trace_printk", true),
    flag("annotate", true),
    flag("userstacktrace", false),
    flag("sym-userobj", false),
    top("printk-msg-only", false),
    flag("context-info", true),
    flag("latency-format", false),
    top("record-cmd", true),
    flag("record-tgid", false),
    flag("overwrite", true),
    flag("disable_on_free", false),
    flag("irq-info", true),
    flag("markers", true),
    zeroed("event-fork", false),
    zeroed("trace_printk_dest", true),
    flag("pause-on-trace", false),
    flag("hash-ptr", true),
    flag("function-trace", true),
    zeroed("function-fork", false),
    flag("display-graph", false),
    flag("stacktrace", false),
];

impl TraceFlags {
    /// The top-level defaults (`TRACE_DEFAULT_FLAGS`).
    pub fn top_level_default() -> Self {
        let mut w = 0;
        for (i, f) in FLAGS.iter().enumerate() {
            if f.default {
                w |= 1 << i;
            }
        }
        TraceFlags(w)
    }

    /// The flags a new instance starts with: the top level's current flags minus the zeroed ones.
    pub fn for_new_instance(top: TraceFlags) -> Self {
        let mut w = top.0;
        for (i, f) in FLAGS.iter().enumerate() {
            if f.zeroed_in_instances {
                w &= !(1 << i);
            }
        }
        TraceFlags(w)
    }

    /// Whether flag number `bit` is set.
    pub const fn get(self, bit: usize) -> bool {
        self.0 & (1 << bit) != 0
    }

    /// This word with flag `bit` set to `on`.
    pub const fn with(self, bit: usize, on: bool) -> Self {
        if on {
            TraceFlags(self.0 | 1 << bit)
        } else {
            TraceFlags(self.0 & !(1 << bit))
        }
    }

    /// The bit number of flag `name`.
    pub fn bit_of(name: &[u8]) -> Option<usize> {
        FLAGS.iter().position(|f| f.name.as_bytes() == name)
    }

    /// The bit number of the `overwrite` flag (ring-buffer overwrite mode).
    pub const OVERWRITE: usize = 18;
    /// The bit number of the `markers` flag (`trace_marker` writes fail with `EINVAL` when off).
    pub const MARKERS: usize = 21;
    /// The bit number of the `pause-on-trace` flag.
    pub const PAUSE_ON_TRACE: usize = 24;
    /// The bit number of the `disable_on_free` flag.
    pub const DISABLE_ON_FREE: usize = 19;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_bits_match_the_table() {
        assert_eq!(FLAGS[TraceFlags::OVERWRITE].name, "overwrite");
        assert_eq!(FLAGS[TraceFlags::MARKERS].name, "markers");
        assert_eq!(FLAGS[TraceFlags::PAUSE_ON_TRACE].name, "pause-on-trace");
        assert_eq!(FLAGS[TraceFlags::DISABLE_ON_FREE].name, "disable_on_free");
        let d = TraceFlags::top_level_default();
        let i = TraceFlags::for_new_instance(d);
        assert!(d.get(23) && !i.get(23) && i.get(0));
    }
}
