//! The [`Tracer`] trait, the small traits tracers record through, and the registry
//! (`available_tracers` / `current_tracer`).
//!
//! A tracer is a policy: what it records when the dispatcher calls it, which options it owns,
//! and how its entries print. Where entries go ([`EntrySink`], a per-CPU ring buffer in
//! practice) and which functions are admitted ([`FunctionFilter`], the dispatcher's filter
//! hash) are small traits the backends bind. Invariant: switching tracers always resets the
//! old one before initialising the new one, and a failed switch leaves the old one current.

use core::fmt;

use ftrace_core::Errno;

use crate::options::TracerOpt;
use crate::output::trace_file::OutputStyle;

/// Where a tracer's entries go: the current CPU's ring buffer.
pub trait EntrySink {
    /// Reserves `len` bytes on the current CPU's buffer, lets `fill` write the entry (the
    /// bytes start zeroed), and commits it. Returns `false` if the entry was dropped.
    fn write_entry(&self, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> bool;
}

impl<T: EntrySink + ?Sized> EntrySink for &T {
    fn write_entry(&self, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> bool {
        (**self).write_entry(len, fill)
    }
}

/// No sink (no buffer yet): nothing is written.
impl<T: EntrySink> EntrySink for Option<T> {
    #[inline]
    fn write_entry(&self, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> bool {
        self.as_ref().is_some_and(|s| s.write_entry(len, fill))
    }
}

/// What the function filter admits (`set_ftrace_filter` / `set_ftrace_notrace`).
pub trait FunctionFilter {
    /// Whether a call to `ip` is traced.
    fn admits(&self, ip: u64) -> bool;
}

/// A filter that admits every function.
#[derive(Clone, Copy, Debug, Default)]
pub struct AdmitAll;

impl FunctionFilter for AdmitAll {
    fn admits(&self, _ip: u64) -> bool {
        true
    }
}

impl<F: Fn(u64) -> bool> FunctionFilter for F {
    fn admits(&self, ip: u64) -> bool {
        self(ip)
    }
}

/// A tracer (`struct tracer`).
///
/// Methods take `&self`: a tracer is shared with the traced contexts and keeps its state in
/// atomics.
pub trait Tracer: Sync {
    /// The name `available_tracers` and `current_tracer` use.
    fn name(&self) -> &'static str;

    /// The options it owns, in `trace_options` order.
    fn options(&self) -> &'static [TracerOpt] {
        &[]
    }

    /// Its option flags at boot.
    fn default_flags(&self) -> u32 {
        0
    }

    /// Called when it becomes the current tracer (`init`).
    fn init(&self) -> Result<(), Errno> {
        Ok(())
    }

    /// Called when another tracer replaces it (`reset`).
    fn reset(&self) {}

    /// Tracing turned on (`tracing_on` = 1).
    fn start(&self) {}

    /// Tracing turned off (`tracing_on` = 0).
    fn stop(&self) {}

    /// Whether an option change is accepted (`set_flag`); `bit` is being set to `on`.
    fn set_flag(&self, flags: u32, bit: u32, on: bool) -> Result<(), Errno> {
        let _ = (flags, bit, on);
        Ok(())
    }

    /// How its header and lines print, given its current option flags.
    fn output_style(&self, flags: u32) -> OutputStyle {
        let _ = flags;
        OutputStyle::Default
    }

    /// Prints the `trace` file's header for this tracer (`# tracer:` line, then its own
    /// header or the default one), given its option flags; `empty` says whether no event is
    /// left to read.
    fn print_header(
        &self,
        out: &mut dyn fmt::Write,
        env: &crate::output::OutputEnv<'_>,
        info: &crate::output::header::HeaderInfo<'_>,
        flags: u32,
        empty: bool,
    ) -> fmt::Result {
        use crate::output::header::{write_default_header, write_graph_header, write_tracer_line};
        write_tracer_line(out, info.tracer)?;
        match self.output_style(flags) {
            OutputStyle::Default => write_default_header(out, env, info, empty),
            OutputStyle::Graph(g) => write_graph_header(out, env, info, g, empty),
        }
    }

    /// Whether instances (`instances/<name>`) may use it.
    fn allow_instances(&self) -> bool {
        false
    }
}

impl fmt::Debug for dyn Tracer + '_ {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tracer")
            .field("name", &self.name())
            .finish()
    }
}

#[cfg(feature = "alloc")]
pub use registry::Registry;

#[cfg(feature = "alloc")]
mod registry {
    use alloc::vec::Vec;
    use core::fmt;

    use ftrace_core::Errno;

    use super::Tracer;

    /// The registered tracers and the current one.
    #[derive(Debug)]
    pub struct Registry<'t> {
        tracers: Vec<&'t dyn Tracer>,
        current: usize,
    }

    impl<'t> Registry<'t> {
        /// A registry holding only `nop`, which is current.
        pub fn new(nop: &'t dyn Tracer) -> Self {
            Registry {
                tracers: alloc::vec![nop],
                current: 0,
            }
        }

        /// Registers a tracer (`register_tracer`); a second one with the same name is
        /// `EBUSY`.
        pub fn register(&mut self, t: &'t dyn Tracer) -> Result<(), Errno> {
            if self.by_name(t.name()).is_some() {
                return Err(Errno::EBUSY);
            }
            self.tracers.push(t);
            Ok(())
        }

        fn by_name(&self, name: &str) -> Option<usize> {
            self.tracers.iter().position(|t| t.name() == name)
        }

        /// The current tracer.
        pub fn current(&self) -> &'t dyn Tracer {
            self.tracers[self.current]
        }

        /// `echo NAME > current_tracer`: trailing whitespace is ignored; an unknown name is
        /// `EINVAL`; the same name is a no-op. The old tracer is reset before the new one's
        /// `init`; if `init` fails, `nop` becomes current and the error is returned.
        pub fn set_current(&mut self, name: &str) -> Result<(), Errno> {
            let name = name.trim_end();
            let idx = self.by_name(name).ok_or(Errno::EINVAL)?;
            if idx == self.current {
                return Ok(());
            }
            self.tracers[self.current].reset();
            match self.tracers[idx].init() {
                Ok(()) => {
                    self.current = idx;
                    Ok(())
                }
                Err(e) => {
                    self.current = 0;
                    Err(e)
                }
            }
        }

        /// `available_tracers`: names separated by spaces, newest registration first.
        pub fn write_available(&self, out: &mut dyn fmt::Write) -> fmt::Result {
            for (i, t) in self.tracers.iter().rev().enumerate() {
                if i > 0 {
                    out.write_char(' ')?;
                }
                out.write_str(t.name())?;
            }
            out.write_char('\n')
        }
    }
}
