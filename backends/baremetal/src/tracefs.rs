//! The tracefs tree (ftrace-tracefs's [`Tracefs`]) bound to this backend (feature `tracefs`).
//!
//! [`BmHost`] is the server side (CPUs, the clock, the call-site records), [`BmBackend`] the
//! tracing machinery of the top-level instance, both thin adapters over the backend's tracing
//! instance ([`TRACING`]); [`SerialTracefs`] lets the serial shell serve the tree.
//!
//! The four filter files are ftrace-tracefs's [`FilterWriter`] over the instance's
//! `FilterState` ([`BmFilters`]: its release republishes the hashes and re-patches), the
//! call-site files ftrace-tracefs's [`PatchRecords`] over the instance's record table
//! ([`BmRecords`]); `trace_marker` and `trace_marker_raw` write `print` / `raw_data` entries.
//! `saved_cmdlines` and `saved_tgids` read empty, as Linux's do when only pid 0 ran: every
//! event here is pid 0 (`<idle>`), which the kernel never saves.
//!
//! What the tree asks and this backend cannot do yet is refused with an errno, never
//! pretended: instances (`mkdir instances/x`: `ENODEV`), resizing the buffers (`ENOMEM`),
//! another sub-buffer size or trace clock (`EINVAL`), tracer options, trace options other than
//! the defaults (`EINVAL`); `trace_pipe` and `trace_pipe_raw` read as empty. Invariant: every
//! refusal changes nothing.

use alloc::boxed::Box;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt::{self, Write};

use ftrace_core::Errno;
use ftrace_core::platform::{CpuId, TraceClock};
use ftrace_core::symbols::{Symbol, SymbolTable};
use ftrace_tracefs::filters::{FilterState, FilterStore, FilterWriter};
use ftrace_tracefs::records::{CallSites, PatchRecords, RecordSource};
use ftrace_tracefs::{
    FilterEdit, FilterFile, FunctionRecords, Host, Param, Reader, TextReader, TraceBackend,
    Tracefs, TracerOption, WriteMode,
};
use ftrace_tracers::TraceOptions;

use crate::cpu::BareMetal;
use crate::shell::FileTree;
use crate::sync::SpinLock;
use crate::tracing::TRACING;

/// The clocks `trace_clock` offers.
const CLOCKS: &[&str] = &["local"];

/// What only the server knows.
#[derive(Debug)]
pub struct BmHost {
    functions: PatchRecords<BmRecords>,
}

impl BmHost {
    /// The host over [`TRACING`] (call after `TRACING.install`: the call-site files name the
    /// sites with its symbols).
    pub fn new() -> Self {
        let symbols: Arc<dyn SymbolTable + Send + Sync> = Arc::new(KernelSymbols);
        Self {
            functions: PatchRecords::new(BmRecords, symbols),
        }
    }
}

impl Default for BmHost {
    fn default() -> Self {
        Self::new()
    }
}

/// The kernel's symbol table as handed to `TRACING.install` (none before).
#[derive(Clone, Copy, Debug, Default)]
struct KernelSymbols;

impl SymbolTable for KernelSymbols {
    fn lookup(&self, addr: u64) -> Option<Symbol<'_>> {
        TRACING.symbols()?.lookup(addr)
    }

    fn for_each(&self, f: &mut dyn FnMut(Symbol<'_>)) {
        if let Some(s) = TRACING.symbols() {
            s.for_each(f);
        }
    }
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

/// The instance's call-site records, for ftrace-tracefs's [`PatchRecords`]
/// (`available_filter_functions`, `enabled_functions`, `touched_functions`,
/// `dyn_ftrace_total_info`...).
#[derive(Clone, Copy, Debug, Default)]
pub struct BmRecords;

impl RecordSource for BmRecords {
    fn with_records(&self, f: &mut dyn FnMut(CallSites<'_>)) {
        TRACING.with_call_sites(f);
    }
}

/// The instance's filter files, for ftrace-tracefs's [`FilterWriter`].
#[derive(Clone, Copy, Debug, Default)]
pub struct BmFilters;

impl FilterStore for BmFilters {
    fn with_state(&self, f: &mut dyn FnMut(&mut FilterState)) {
        // Writers are only opened after `install` (`open_filter` checks), so this runs `f`.
        let _ = TRACING.with_filters(f);
    }

    fn publish(&self, _which: FilterFile) -> Result<(), Errno> {
        TRACING.republish_filters()
    }
}

/// The top-level instance's tracing machinery.
#[derive(Debug, Default)]
pub struct BmBackend;

/// `fmt::Write` into a byte vector.
struct VecText<'a>(&'a mut Vec<u8>);

impl fmt::Write for VecText<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
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
            Param::Flags(f) if f == TraceOptions::DEFAULT => {
                TRACING.set_options(f);
                Ok(())
            }
            _ => Err(Errno::EINVAL),
        }
    }

    /// The ring buffer's record switch owns `tracing_on`: a `traceoff` function command
    /// turns it off behind the tree.
    fn tracing_on(&self) -> Option<bool> {
        Some(TRACING.tracing_on())
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
        crate::tracing::PAGE_SIZE as u32
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
        Box::new(TextReader::new(text))
    }

    fn open_pipe(&mut self, _cpu: Option<u32>) -> Box<dyn Reader> {
        Box::new(TextReader::empty())
    }

    fn open_pipe_raw(&mut self, _cpu: u32) -> Box<dyn Reader> {
        Box::new(TextReader::empty())
    }

    fn write_marker(&mut self, text: &[u8]) -> Result<(), Errno> {
        TRACING.write_marker(text)
    }

    fn write_marker_raw(&mut self, id: u32, data: &[u8]) -> Result<(), Errno> {
        TRACING.write_marker_raw(id, data)
    }

    fn open_filter(
        &mut self,
        which: FilterFile,
        mode: ftrace_tracefs::WriteMode,
    ) -> Result<Box<dyn FilterEdit>, Errno> {
        // No records before `install`: nothing to filter.
        TRACING.with_filters(&mut |_| {})?;
        Ok(FilterWriter::open(BmFilters, which, mode))
    }

    fn write_filter(&self, which: FilterFile, w: &mut dyn fmt::Write) -> fmt::Result {
        TRACING.read_filter(which, w)
    }

    /// Every event is pid 0 (`<idle>`), which Linux never saves: empty, as the kernel's.
    fn write_saved_cmdlines(&self, _w: &mut dyn fmt::Write) -> fmt::Result {
        Ok(())
    }

    /// As `saved_cmdlines`.
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
            tree: SpinLock::new(Tracefs::new(BmHost::new())?),
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

    fn write(&self, path: &str, data: &str, mode: WriteMode) -> Result<(), Errno> {
        self.tree.lock().write_all(path, data.as_bytes(), mode)
    }
}

#[cfg(test)]
mod tests {
    //! The tree over the real tracing instance on the host: install on a static "text" of
    //! three functions, then the call-site and filter files as the shell uses them. (What
    //! patches text or masks interrupts only runs in the kernel: these paths stay under `nop`.)

    use super::*;
    use crate::sites::SiteTable;
    use crate::tracing::GRAPH_FILTER;
    use ftrace_core::symbols::SortedSymbols;
    use ftrace_patch::x86::NOP5_DISP8;
    use std::format;

    const FUNC: usize = 16;
    /// Three functions of 16 bytes, each starting with rustc's patchable-entry NOP.
    static TEXT: [u8; 3 * FUNC] = {
        let mut t = [0xcc; 3 * FUNC];
        let mut f = 0;
        while f < 3 {
            let mut i = 0;
            while i < 5 {
                t[f * FUNC + i] = NOP5_DISP8[i];
                i += 1;
            }
            f += 1;
        }
        t
    };
    const NAMES: [&str; 3] = ["alpha", "beta", "gamma"];

    fn read(fs: &SerialTracefs, path: &str) -> Result<String, Errno> {
        let mut s = String::new();
        fs.read(path, &mut s).map(|()| s)
    }

    #[test]
    fn the_files_run_on_the_record_table_and_the_filter_state() {
        let base = TEXT.as_ptr() as u64;
        let addr = |i: usize| base + (i * FUNC) as u64;
        let mut syms = SortedSymbols::new();
        for (i, n) in NAMES.iter().enumerate() {
            syms.push(n, addr(i), FUNC as u64, None);
        }
        syms.finish();
        let syms: &'static SortedSymbols = Box::leak(Box::new(syms));
        let records = Box::leak(Box::new([addr(2), addr(0), addr(1)]));
        // SAFETY: the records point into a readable static.
        let sites: &'static SiteTable = Box::leak(Box::new(unsafe { SiteTable::new(records) }));
        TRACING.install(sites, syms).unwrap();
        let fs = SerialTracefs::new().unwrap();

        assert_eq!(
            read(&fs, "available_filter_functions").unwrap(),
            "alpha\nbeta\ngamma\n"
        );
        let addrs: String = (0..3)
            .map(|i| format!("{:x} {}\n", addr(i), NAMES[i]))
            .collect();
        assert_eq!(
            read(&fs, "available_filter_functions_addrs").unwrap(),
            addrs
        );
        assert_eq!(
            read(&fs, "dyn_ftrace_total_info").unwrap(),
            "3 pages:1 groups: 1\n"
        );
        assert_eq!(read(&fs, "enabled_functions").unwrap(), "");

        // the filter language: globs, append, `!`; a rejected token adds nothing (with `>`
        // the truncating open still empties the file at close, as in Linux: 07-errors/03)
        fs.write("set_ftrace_filter", "b*\n", WriteMode::Truncate)
            .unwrap();
        assert_eq!(read(&fs, "set_ftrace_filter").unwrap(), "beta\n");
        assert_eq!(
            fs.write("set_ftrace_filter", "nothing_here\n", WriteMode::Append),
            Err(Errno::EINVAL)
        );
        assert_eq!(read(&fs, "set_ftrace_filter").unwrap(), "beta\n");
        assert_eq!(
            fs.write("set_ftrace_filter", "nothing_here\n", WriteMode::Truncate),
            Err(Errno::EINVAL)
        );
        assert_eq!(
            read(&fs, "set_ftrace_filter").unwrap(),
            "#### all functions enabled ####\n"
        );
        fs.write("set_ftrace_filter", "beta\n", WriteMode::Truncate)
            .unwrap();
        fs.write("set_ftrace_filter", "*a\n", WriteMode::Append)
            .unwrap();
        assert_eq!(
            read(&fs, "set_ftrace_filter").unwrap(),
            "alpha\nbeta\ngamma\n"
        );
        fs.write("set_ftrace_filter", "!gamma\n", WriteMode::Append)
            .unwrap();
        assert_eq!(read(&fs, "set_ftrace_filter").unwrap(), "alpha\nbeta\n");
        fs.write("set_ftrace_notrace", "gamma\n", WriteMode::Truncate)
            .unwrap();
        assert_eq!(read(&fs, "set_ftrace_notrace").unwrap(), "gamma\n");

        // the graph files reach the graph filter the entry hook reads
        fs.write("set_graph_function", "alpha\n", WriteMode::Truncate)
            .unwrap();
        fs.write("set_graph_notrace", "beta\n", WriteMode::Truncate)
            .unwrap();
        assert_eq!(read(&fs, "set_graph_function").unwrap(), "alpha\n");
        GRAPH_FILTER.with(|g| {
            assert_eq!(g.functions, [addr(0)]);
            assert_eq!(g.notrace, [addr(1)]);
        });
        fs.write("set_graph_function", "", WriteMode::Truncate)
            .unwrap();
        fs.write("set_graph_notrace", "", WriteMode::Truncate)
            .unwrap();
        GRAPH_FILTER.with(|g| assert!(g.functions.is_empty() && g.notrace.is_empty()));

        // under nop no ops is enabled: nothing patched, nothing touched, text unchanged
        assert_eq!(read(&fs, "enabled_functions").unwrap(), "");
        assert_eq!(read(&fs, "touched_functions").unwrap(), "");
        for i in 0..3 {
            assert_eq!(TEXT[i * FUNC..i * FUNC + 5], NOP5_DISP8);
        }
        assert_eq!(read(&fs, "saved_cmdlines").unwrap(), "");
    }
}
