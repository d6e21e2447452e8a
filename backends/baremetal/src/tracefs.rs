//! The tracefs tree (ftrace-tracefs's [`Tracefs`]) bound to this backend (feature `tracefs`).
//!
//! [`BmHost`] is the server side (CPUs, the clock, the call-site records), [`BmBackend`] the
//! tracing machinery of the top-level instance, both thin adapters over the backend's tracing
//! instance ([`TRACING`]); [`SerialTracefs`] lets the serial shell serve the tree.
//!
//! What the tree asks and this backend cannot do yet is refused with an errno, never
//! pretended: instances (`mkdir instances/x`: `ENODEV`), resizing the buffers (`ENOMEM`),
//! another sub-buffer size or trace clock (`EINVAL`), tracer options, `trace_marker`
//! (`ENOSYS`), the notrace and graph filter files (`ENODEV`); `trace_pipe` and
//! `trace_pipe_raw` read as empty. Invariant: every refusal changes nothing.

use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::{self, Write};

use ftrace_core::Errno;
use ftrace_core::platform::{CpuId, TraceClock};
use ftrace_core::symbols::SymbolTable;
use ftrace_tracefs::{
    FilterEdit, FilterFile, FunctionRecords, Host, Param, Reader, TraceBackend, Tracefs,
    TracerOption,
};

use crate::cpu::BareMetal;
use crate::interim::{TRACING, glob_match};
use crate::shell::FileTree;
use crate::sync::SpinLock;

/// The clocks `trace_clock` offers.
const CLOCKS: &[&str] = &["local"];

/// What only the server knows.
#[derive(Debug, Default)]
pub struct BmHost {
    functions: BmFunctions,
}

impl Host for BmHost {
    fn nr_cpus(&self) -> u32 {
        BareMetal.possible_cpus()
    }

    fn local_clock_ns(&self) -> u64 {
        BareMetal.now_ns()
    }

    fn trace_clocks(&self) -> &[&'static str] {
        CLOCKS
    }

    /// The buffers are fixed at boot (a static page arena): their size is the expanded size.
    fn trace_buf_size(&self) -> u64 {
        TRACING.buffer_bytes()
    }

    fn create_backend(
        &mut self,
        instance: Option<&str>,
        _bytes_per_cpu: u64,
    ) -> Result<Box<dyn TraceBackend>, Errno> {
        match instance {
            None => Ok(Box::new(BmBackend)),
            Some(_) => Err(Errno::ENODEV),
        }
    }

    fn symbols(&self) -> Option<&dyn SymbolTable> {
        TRACING.symbols().map(|s| s as &dyn SymbolTable)
    }

    fn functions(&self) -> Option<&dyn FunctionRecords> {
        Some(&self.functions)
    }
}

/// The call-site records (`available_filter_functions` & co).
#[derive(Debug, Default)]
pub struct BmFunctions;

impl FunctionRecords for BmFunctions {
    fn write_available(&self, w: &mut dyn fmt::Write, addrs: bool) -> fmt::Result {
        TRACING.read_available(w, addrs)
    }

    fn write_enabled(&self, w: &mut dyn fmt::Write, _touched: bool) -> fmt::Result {
        TRACING.write_enabled(w)
    }

    fn write_total_info(&self, w: &mut dyn fmt::Write) -> fmt::Result {
        TRACING.write_total_info(w)
    }
}

/// The top-level instance's tracing machinery.
#[derive(Debug, Default)]
pub struct BmBackend;

/// A reader that hands out one prepared text, then ends.
struct TextReader(Option<Vec<u8>>);

impl Reader for TextReader {
    fn next_chunk(&mut self, out: &mut Vec<u8>) -> bool {
        match self.0.take() {
            Some(t) => {
                out.extend_from_slice(&t);
                true
            }
            None => false,
        }
    }
}

/// `fmt::Write` into a byte vector.
struct VecText<'a>(&'a mut Vec<u8>);

impl fmt::Write for VecText<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// An open `set_ftrace_filter`: tokens are checked as they are written and applied at close.
struct FilterSession {
    pending: String,
    append: bool,
}

impl FilterEdit for FilterSession {
    fn write(&mut self, data: &[u8]) -> Result<usize, Errno> {
        let text = core::str::from_utf8(data).map_err(|_| Errno::EINVAL)?;
        for pat in text.split_whitespace() {
            let mut hit = false;
            if let Some(syms) = TRACING.symbols() {
                syms.for_each(&mut |s| hit |= glob_match(pat, s.name));
            }
            if !hit {
                return Err(Errno::EINVAL);
            }
            self.pending.push_str(pat);
            self.pending.push(' ');
        }
        Ok(data.len())
    }

    fn release(self: Box<Self>) -> Result<(), Errno> {
        TRACING.write_filter(&self.pending, self.append)
    }
}

impl TraceBackend for BmBackend {
    fn tracers(&self) -> Vec<&'static str> {
        TRACING.tracer_names().to_vec()
    }

    fn current_tracer(&self) -> &'static str {
        TRACING.tracer().name()
    }

    fn set_tracer(&mut self, name: &str) -> Result<(), Errno> {
        TRACING.set_tracer_by_name(name)
    }

    fn tracer_options(&self) -> Vec<TracerOption> {
        Vec::new()
    }

    fn set_tracer_option(&mut self, _name: &str, _on: bool) -> Result<(), Errno> {
        Err(Errno::EINVAL)
    }

    fn set_param(&mut self, param: Param<'_>) -> Result<(), Errno> {
        match param {
            Param::TracingOn(on) => {
                TRACING.set_tracing_on(on);
                Ok(())
            }
            Param::Clock(c) if CLOCKS.contains(&c) => Ok(()),
            // Values that change nothing the backend does.
            Param::MaxGraphDepth(0) | Param::TracingThresh(0) | Param::ProfileEnabled(false) => {
                Ok(())
            }
            // The tree hands its flag word over when it is built; the formatter here prints
            // with the defaults, so only the defaults are accepted.
            Param::Flags(f) if f == ftrace_tracefs::options::TraceFlags::top_level_default() => {
                Ok(())
            }
            _ => Err(Errno::EINVAL),
        }
    }

    fn resize(&mut self, _cpu: Option<u32>, bytes: u64) -> Result<(), Errno> {
        if bytes == TRACING.buffer_bytes() {
            Ok(())
        } else {
            Err(Errno::ENOMEM)
        }
    }

    fn buffer_bytes(&self, _cpu: u32) -> u64 {
        TRACING.buffer_bytes()
    }

    fn subbuf_size(&self) -> u32 {
        crate::interim::PAGE_SIZE as u32
    }

    fn set_subbuf_size(&mut self, bytes: u32) -> Result<(), Errno> {
        if bytes == self.subbuf_size() {
            Ok(())
        } else {
            Err(Errno::EINVAL)
        }
    }

    fn clear(&mut self, _cpu: Option<u32>) {
        TRACING.reset_buffers();
    }

    fn write_stats(&self, cpu: u32, w: &mut dyn fmt::Write) -> fmt::Result {
        TRACING.write_stats(cpu, w)
    }

    fn open_trace(&mut self, cpu: Option<u32>) -> Box<dyn Reader> {
        let mut text = Vec::new();
        let _ = TRACING.format_trace(cpu, &mut VecText(&mut text));
        Box::new(TextReader(Some(text)))
    }

    fn open_pipe(&mut self, _cpu: Option<u32>) -> Box<dyn Reader> {
        Box::new(TextReader(None))
    }

    fn open_pipe_raw(&mut self, _cpu: u32) -> Box<dyn Reader> {
        Box::new(TextReader(None))
    }

    fn write_marker(&mut self, _text: &[u8]) -> Result<(), Errno> {
        Err(Errno::ENOSYS)
    }

    fn write_marker_raw(&mut self, _id: u32, _data: &[u8]) -> Result<(), Errno> {
        Err(Errno::ENOSYS)
    }

    fn open_filter(
        &mut self,
        which: FilterFile,
        truncate: bool,
    ) -> Result<Box<dyn FilterEdit>, Errno> {
        match which {
            FilterFile::Filter => Ok(Box::new(FilterSession {
                pending: String::new(),
                append: !truncate,
            })),
            _ => Err(Errno::ENODEV),
        }
    }

    fn write_filter(&self, which: FilterFile, w: &mut dyn fmt::Write) -> fmt::Result {
        match which {
            FilterFile::Filter => TRACING.read_filter(w),
            _ => Ok(()),
        }
    }

    fn write_saved_cmdlines(&self, _w: &mut dyn fmt::Write) -> fmt::Result {
        Ok(())
    }

    fn write_saved_tgids(&self, _w: &mut dyn fmt::Write) -> fmt::Result {
        Ok(())
    }
}

/// The tree, served by the serial shell.
pub struct SerialTracefs {
    tree: SpinLock<Tracefs<BmHost>>,
}

impl SerialTracefs {
    /// Builds the tree over [`TRACING`] (call after `TRACING.install`).
    pub fn new() -> Result<Self, Errno> {
        Ok(Self {
            tree: SpinLock::new(Tracefs::new(BmHost::default())?),
        })
    }
}

impl FileTree for SerialTracefs {
    fn list(&self, dir: &str, out: &mut dyn Write) -> Result<(), Errno> {
        let entries = self.tree.lock().read_dir(dir)?;
        for e in entries {
            writeln!(out, "{}", e.name).map_err(|_| Errno::EIO)?;
        }
        Ok(())
    }

    fn read(&self, path: &str, out: &mut dyn Write) -> Result<(), Errno> {
        let bytes = self.tree.lock().read_to_end(path)?;
        out.write_str(&String::from_utf8_lossy(&bytes))
            .map_err(|_| Errno::EIO)
    }

    fn write(&self, path: &str, data: &str, append: bool) -> Result<(), Errno> {
        self.tree.lock().write_all(path, data.as_bytes(), append)
    }
}
