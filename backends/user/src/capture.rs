//! Writing a recording as a tracefs-like capture: what `ftrace report` (and any reader of the
//! kernel's raw pages) reads.
//!
//! Layout written into the recording directory:
//!
//! | path | content |
//! |---|---|
//! | `per_cpu/cpu<N>/trace_pipe_raw` | the CPU's events in the kernel's sub-buffer pages, written by `ftrace-ringbuf` |
//! | `kallsyms` | `addr t name\t[module]` lines (runtime addresses; the name may contain spaces) |
//! | `saved_cmdlines` | `tid comm` lines |
//! | `trace_clock` | the clock listing with the recording's clock in brackets |
//! | `tracer` | `function` or `function_graph` |
//! | `events/<system>/<name>/format` | the program's trace events the pages hold ([`crate::capture_formats`]) |
//!
//! Invariant: every event of the recording is in exactly one page, in timestamp order per CPU,
//! and a page that starts after a hole in some thread's buffer carries the kernel's
//! missed-events flags with the exact count (`RB_MISSED_EVENTS | RB_MISSED_STORED`).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use ftrace_agent::config::ClockKind;
use ftrace_core::symbols::SymbolTable;
use ftrace_ringbuf::page::{MISSED_EVENTS, MISSED_STORED, PAGE_HEADER_SIZE};
use ftrace_ringbuf::{At, CpuBuffer, HeapPages, Mode};

use crate::recording::{Census, Event, Recording, RecordingReader};

/// The clocks `trace_clock` lists, with `clock` selected.
pub fn trace_clock_listing(clock: ClockKind) -> String {
    let all = [
        "local", "global", "counter", "uptime", "perf", "mono", "mono_raw", "boot", "tai",
        "x86-tsc",
    ];
    let mut s = String::new();
    for (i, c) in all.iter().enumerate() {
        if i > 0 {
            s.push(' ');
        }
        if *c == clock.name() {
            let _ = write!(s, "[{c}]");
        } else {
            s.push_str(c);
        }
    }
    s.push('\n');
    s
}

fn mark_missed(page: &mut [u8], missed: u64) {
    let commit = u64::from_le_bytes(page[8..16].try_into().unwrap());
    let size = (commit & !(MISSED_EVENTS | MISSED_STORED)) as usize;
    let mut flags = MISSED_EVENTS;
    let at = PAGE_HEADER_SIZE + size;
    if at + 8 <= page.len() {
        page[at..at + 8].copy_from_slice(&missed.to_le_bytes());
        flags |= MISSED_STORED;
    }
    page[8..16].copy_from_slice(&(commit | flags).to_le_bytes());
}

/// Turns one CPU's events (in timestamp order) into raw pages, written out page by page.
pub struct PageWriter<W: std::io::Write> {
    buf: CpuBuffer<HeapPages>,
    pending_missed: u64,
    out: W,
}

impl<W: std::io::Write> PageWriter<W> {
    /// A writer of 4 KiB pages to `out`.
    pub fn new(out: W) -> Result<Self, String> {
        Self::with_page_size(out, 4096)
    }

    /// A writer of `page_size`-byte pages (the sub-buffer size, `buffer_subbuf_size_kb`) to
    /// `out`.
    pub fn with_page_size(out: W, page_size: usize) -> Result<Self, String> {
        let buf =
            CpuBuffer::new(HeapPages, 16, page_size).map_err(|e| format!("ring buffer: {e:?}"))?;
        buf.set_mode(Mode::ProducerConsumer);
        Ok(PageWriter {
            buf,
            pending_missed: 0,
            out,
        })
    }

    fn drain(&mut self) -> Result<(), String> {
        let mut page = self
            .buf
            .alloc_read_page()
            .map_err(|e| format!("read page: {e:?}"))?;
        let mut c = self.buf.consumer();
        while c.read_page(&mut page).is_some() {
            let mut bytes = page.as_bytes().to_vec();
            if self.pending_missed > 0 {
                mark_missed(&mut bytes, self.pending_missed);
                self.pending_missed = 0;
            }
            self.out
                .write_all(&bytes)
                .map_err(|e| format!("writing pages: {e}"))?;
        }
        Ok(())
    }

    /// Appends `e` (after the events it says were lost before it).
    pub fn push(&mut self, e: &Event) -> Result<(), String> {
        if e.missed > 0 {
            self.drain()?;
            self.pending_missed += e.missed;
        }
        if !self.buf.write(&e.data, &At(e.ts)) {
            self.drain()?;
            if !self.buf.write(&e.data, &At(e.ts)) {
                return Err(format!(
                    "event of {} bytes does not fit a page",
                    e.data.len()
                ));
            }
        }
        Ok(())
    }

    /// Writes the last page and returns the output.
    pub fn finish(mut self) -> Result<W, String> {
        self.drain()?;
        self.out
            .flush()
            .map_err(|e| format!("writing pages: {e}"))?;
        Ok(self.out)
    }
}

/// Encodes one CPU's events (sorted by timestamp) as raw 4 KiB pages.
pub fn cpu_pages(events: &[Event]) -> Result<Vec<u8>, String> {
    cpu_pages_sized(events, 4096)
}

/// Encodes one CPU's events (sorted by timestamp) as raw pages of `page_size` bytes.
pub fn cpu_pages_sized(events: &[Event], page_size: usize) -> Result<Vec<u8>, String> {
    let mut w = PageWriter::with_page_size(Vec::new(), page_size)?;
    for e in events {
        w.push(e)?;
    }
    w.finish()
}

/// Writes the capture files of `rec` into `dir`, in 4 KiB pages.
pub fn write_capture(rec: &Recording, dir: &Path) -> Result<(), String> {
    write_capture_sized(rec, dir, ftrace_ringbuf::page::DEFAULT_PAGE_SIZE)
}

/// [`write_capture`] in pages of `page_size` bytes (a tree's `buffer_subbuf_size_kb`, which
/// bounds its events: a `trace_marker` write fills up to one sub-buffer). Another size than
/// 4 KiB is said in `events/header_page`, as the kernel's tree says it, where the capture's
/// reader takes it from.
pub fn write_capture_sized(rec: &Recording, dir: &Path, page_size: usize) -> Result<(), String> {
    let io = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    if page_size != ftrace_ringbuf::page::DEFAULT_PAGE_SIZE {
        let mut text = String::new();
        ftrace_core::format::write_header_page(&mut text, page_size)
            .map_err(|_| "formatting events/header_page".to_string())?;
        let d = dir.join("events");
        std::fs::create_dir_all(&d).map_err(|e| io(&d, e))?;
        let f = d.join("header_page");
        std::fs::write(&f, text).map_err(|e| io(&f, e))?;
    }
    let nr = rec
        .nr_cpus
        .max(rec.per_cpu.keys().max().map_or(0, |m| m + 1));
    for cpu in 0..nr {
        let d = dir.join("per_cpu").join(format!("cpu{cpu}"));
        std::fs::create_dir_all(&d).map_err(|e| io(&d, e))?;
        let pages = match rec.per_cpu.get(&cpu) {
            Some(evs) => cpu_pages_sized(evs, page_size)?,
            None => Vec::new(),
        };
        let f = d.join("trace_pipe_raw");
        std::fs::write(&f, pages).map_err(|e| io(&f, e))?;
    }
    write_info(rec, dir)
}

pub use crate::recording::MAX_CPUS;

/// Writes the capture files of the recording in `dir` into `dir`, streaming: events are read
/// thread file by thread file as the merge needs them and pages written out as they fill, so
/// memory does not grow with the recording.
pub fn write_capture_streamed(dir: &Path) -> Result<(), String> {
    let io = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    let mut reader = RecordingReader::open(dir).map_err(|e| e.to_string())?;
    let nr_cpus = reader.rec.nr_cpus;
    let mut cpus: std::collections::BTreeMap<u32, PageWriter<std::io::BufWriter<std::fs::File>>> =
        std::collections::BTreeMap::new();
    let open_cpu = |cpu: u32| -> Result<PageWriter<_>, String> {
        let d = dir.join("per_cpu").join(format!("cpu{cpu}"));
        std::fs::create_dir_all(&d).map_err(|e| io(&d, e))?;
        let f = d.join("trace_pipe_raw");
        let file = std::fs::File::create(&f).map_err(|e| io(&f, e))?;
        PageWriter::new(std::io::BufWriter::with_capacity(64 * 1024, file))
    };
    {
        let mut stream = reader.stream().map_err(|e| e.to_string())?;
        while let Some(e) = stream.next().map_err(|e| e.to_string())? {
            if e.cpu >= MAX_CPUS {
                return Err(format!(
                    "{}: tid {}: CPU {} out of range (the kernel's NR_CPUS is at most {MAX_CPUS})",
                    dir.display(),
                    e.tid,
                    e.cpu
                ));
            }
            let w = match cpus.entry(e.cpu) {
                std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
                std::collections::btree_map::Entry::Vacant(v) => v.insert(open_cpu(e.cpu)?),
            };
            w.push(&e)?;
        }
    }
    let nr = nr_cpus.max(cpus.keys().max().map_or(0, |m| m + 1));
    for cpu in 0..nr {
        match cpus.remove(&cpu) {
            Some(w) => drop(w.finish()?),
            None => drop(open_cpu(cpu)?.finish()?),
        }
    }
    crate::capture_formats::write(dir, &reader.event_formats())?;
    write_info(&reader.rec, dir)
}

/// Writes one CPU's events of a recording as the kernel's raw pages into `out` as they are
/// read (the bytes [`write_capture_streamed`] puts in `per_cpu/cpu<cpu>/trace_pipe_raw`),
/// without writing anything into the recording: what an exporter that embeds pages
/// (trace.dat) can read instead of a capture. Memory holds the CPU's merge, not its events.
pub fn write_cpu_pages<W: std::io::Write>(
    reader: &RecordingReader,
    census: &Census,
    cpu: u32,
    out: W,
) -> Result<W, String> {
    let mut w = PageWriter::new(out)?;
    let mut stream = reader.stream_cpu(cpu, census).map_err(|e| e.to_string())?;
    while let Some(e) = stream.next().map_err(|e| e.to_string())? {
        w.push(&e)?;
    }
    w.finish()
}

/// Makes sure `dir` has its capture files: a recording whose events have not been turned into
/// pages yet gets them now ([`write_capture_streamed`]); a capture (or a recording already
/// turned) is left as it is.
pub fn ensure_capture(dir: &Path) -> Result<(), String> {
    if dir.join("per_cpu").is_dir() || !crate::record::is_recording(dir) {
        return Ok(());
    }
    write_capture_streamed(dir)
}

/// The text files of a recording's capture (kallsyms, saved_cmdlines, trace_clock, tracer),
/// in memory: what [`write_capture`] writes beside the pages, and what `ftrace report` reads
/// of a recording without writing anything.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaptureText {
    /// `kallsyms`: `addr t name\t[module]` lines, sorted, one per distinct symbol.
    pub kallsyms: String,
    /// `saved_cmdlines`: `tid comm` lines.
    pub saved_cmdlines: String,
    /// `trace_clock`: the clock listing with the recording's clock selected.
    pub trace_clock: String,
    /// `tracer`: the tracer of the first process image, with a newline.
    pub tracer: String,
}

impl CaptureText {
    /// The text files of `rec` (its processes and threads; the events are not read).
    pub fn of(rec: &Recording) -> Self {
        let mut lines = BTreeSet::new();
        for p in &rec.processes {
            let exe = Path::new(&p.exe)
                .file_name()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            p.symbols.for_each(&mut |s| {
                let module = s.module.filter(|m| *m != exe);
                let line = match module {
                    Some(m) => format!("{:016x} t {}\t[{m}]", s.addr, s.name),
                    None => format!("{:016x} t {}", s.addr, s.name),
                };
                lines.insert((s.addr, line));
            });
        }
        let mut kallsyms = String::new();
        for (_, l) in lines {
            kallsyms.push_str(&l);
            kallsyms.push('\n');
        }
        let mut saved_cmdlines = String::new();
        for t in rec.processes.iter().flat_map(|p| &p.threads) {
            let _ = writeln!(saved_cmdlines, "{} {}", t.tid, t.comm);
        }
        let tracer = rec
            .processes
            .first()
            .map_or("function", |p| p.tracer.as_str());
        CaptureText {
            kallsyms,
            saved_cmdlines,
            trace_clock: trace_clock_listing(rec.clock),
            tracer: format!("{tracer}\n"),
        }
    }
}

/// The capture's text files: kallsyms, saved_cmdlines, trace_clock, tracer.
fn write_info(rec: &Recording, dir: &Path) -> Result<(), String> {
    let io = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    let text = CaptureText::of(rec);
    for (name, body) in [
        ("kallsyms", &text.kallsyms),
        ("saved_cmdlines", &text.saved_cmdlines),
        ("trace_clock", &text.trace_clock),
        ("tracer", &text.tracer),
    ] {
        let f = dir.join(name);
        std::fs::write(&f, body).map_err(|e| io(&f, e))?;
    }
    Ok(())
}

/// The CPUs of a capture in `dir` (its `per_cpu/cpu<N>` directories), sorted; each below
/// [`crate::recording::MAX_CPUS`], at least one. An error names the path it is about and what
/// is wrong with it.
pub fn capture_cpus(dir: &Path) -> Result<Vec<u32>, (PathBuf, String)> {
    use crate::recording::MAX_CPUS;
    let pdir = dir.join("per_cpu");
    let rd = std::fs::read_dir(&pdir).map_err(|e| (pdir.clone(), e.to_string()))?;
    let mut cpus: Vec<u32> = rd
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("cpu")?.parse().ok())
        .collect();
    cpus.sort_unstable();
    if let Some(&big) = cpus.iter().find(|&&c| c >= MAX_CPUS) {
        return Err((
            pdir.join(format!("cpu{big}")),
            format!("CPU number out of range (the kernel's NR_CPUS is at most {MAX_CPUS})"),
        ));
    }
    if cpus.is_empty() {
        return Err((pdir, "no cpu<N> directories".into()));
    }
    Ok(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ftrace_core::EventId;
    use ftrace_core::entry::{FtraceEntry, Pod, TraceEntry};
    use ftrace_ringbuf::Page;

    fn ev(ts: u64, ip: u64, missed: u64) -> Event {
        let e = FtraceEntry {
            ent: TraceEntry {
                type_: EventId::Function.as_u16(),
                flags: 0,
                preempt_count: 0,
                pid: 9,
            },
            ip,
            parent_ip: 1,
        };
        Event {
            cpu: 0,
            ts,
            pid: 9,
            tid: 9,
            data: e.as_bytes().to_vec(),
            missed,
            seq: 0,
            process: 0,
        }
    }

    #[test]
    fn pages_round_trip_with_holes() {
        let mut evs: Vec<Event> = (0..1000).map(|i| ev(1_000 + i * 7, i, 0)).collect();
        evs[600].missed = 42;
        let raw = cpu_pages(&evs).unwrap();
        assert_eq!(raw.len() % 4096, 0);
        let mut got = Vec::new();
        let mut missed_seen = Vec::new();
        for chunk in raw.chunks(4096) {
            let p = Page::new(chunk).unwrap();
            if p.missed_events() {
                missed_seen.push((got.len(), p.missed_count()));
            }
            for e in p.events() {
                let e = e.unwrap();
                let f = FtraceEntry::read_from(e.payload).unwrap();
                got.push((e.ts, f.ip));
            }
        }
        let want: Vec<(u64, u64)> = evs.iter().map(|e| (e.ts, e.func().unwrap())).collect();
        assert_eq!(got, want);
        assert_eq!(missed_seen, vec![(600, Some(42))]);
    }

    #[test]
    fn clock_listing_selects_one() {
        assert!(trace_clock_listing(ClockKind::Local).starts_with("[local] global"));
        assert!(trace_clock_listing(ClockKind::X86Tsc).ends_with(" [x86-tsc]\n"));
    }
}
