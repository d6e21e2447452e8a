//! trace-cmd's `trace.dat` ([`write()`]), version 6 (`man 5 trace-cmd.dat.v6`) or 7
//! (`man 5 trace-cmd.dat.v7`), little endian, 8-byte longs, uncompressed.
//!
//! Version 6 layout written: the magic and version, the page size, `header_page` and `header_event`, the
//! ftrace event formats of the capture, the other event systems' formats (a program's trace
//! events: `trace-cmd report` prints them with their fields), `kallsyms`, an empty
//! `printk_formats`, `saved_cmdlines`, the CPU count, an options block (`TRACECLOCK` of size 0,
//! which tells the reader a `trace_clock` listing follows the CPU table, and `UNAME`), then
//! `flyrecord`: one (offset, size) pair per CPU, the clock listing, padding to a page boundary
//! and each CPU's raw pages one after another.
//!
//! Version 7 writes the same content as sections (each with the header `u16 id, u16 flags,
//! u32 description string id, u64 size`), in the order trace-cmd's own writer uses: header
//! info, ftrace formats, event systems, kallsyms, printk formats, cmdlines; an options
//! section pointing at them (plus `TRACECLOCK`, `UNAME`, `CPUCOUNT`); the flyrecord buffer
//! section (page-aligned CPU data); an options section with its `BUFFER` option; and the
//! strings section holding the descriptions.
//!
//! The CPU data is streamed into the file (a capture's pages copied, a recording's events
//! turned into pages as they are read) and the table pointing at it filled in afterwards: memory
//! does not grow with the capture.
//!
//! Invariant: the CPU data is the capture's pages byte for byte, so every timestamp, lost-event
//! flag and payload a reader decodes is the one the capture holds; the embedded formats carry
//! the ids those pages use.

use std::collections::BTreeMap;
use std::io::{Seek, SeekFrom, Write};

use super::{Capture, ExportError};

/// The file's magic: `0x17 0x08 0x44 "tracing"`.
pub const MAGIC: &[u8; 10] = b"\x17\x08\x44tracing";
/// Option id: end of options.
pub const OPTION_DONE: u16 = 0;
/// Option id: a `trace_clock` listing follows the CPU table (size 0 in the option).
pub const OPTION_TRACECLOCK: u16 = 4;
/// Option id: the recording system's `uname -a`-like text.
pub const OPTION_UNAME: u16 = 5;
/// Option id (v7): a flyrecord buffer (offset, instance, clock, page size, CPU table).
pub const OPTION_BUFFER: u16 = 3;
/// Option id (v7): the number of CPUs.
pub const OPTION_CPUCOUNT: u16 = 8;
/// Section / option id (v7): header info.
pub const SECTION_HEADER_INFO: u16 = 16;
/// Section / option id (v7): ftrace event formats.
pub const SECTION_FTRACE_EVENTS: u16 = 17;
/// Section / option id (v7): event systems' formats.
pub const SECTION_EVENT_FORMATS: u16 = 18;
/// Section / option id (v7): kallsyms.
pub const SECTION_KALLSYMS: u16 = 19;
/// Section / option id (v7): printk formats.
pub const SECTION_PRINTK: u16 = 20;
/// Section / option id (v7): saved cmdlines.
pub const SECTION_CMDLINES: u16 = 21;
/// Section id (v7): options.
pub const SECTION_OPTIONS: u16 = 0;
/// Section id (v7): strings.
pub const SECTION_STRINGS: u16 = 15;

fn put_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_le_bytes());
}
fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}
fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn len32(what: &str, n: usize) -> Result<u32, ExportError> {
    u32::try_from(n).map_err(|_| ExportError(format!("{what}: {n} bytes do not fit trace.dat")))
}

fn initial(cap: &Capture, version: &[u8]) -> Result<Vec<u8>, ExportError> {
    let mut out = Vec::new();
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(version);
    out.push(0); // little endian
    out.push(8); // long size
    put_u32(&mut out, len32("page size", cap.page_size)?);
    Ok(out)
}

fn header_info(out: &mut Vec<u8>, cap: &Capture) {
    out.extend_from_slice(b"header_page\0");
    put_u64(out, cap.header_page.len() as u64);
    out.extend_from_slice(cap.header_page.as_bytes());
    out.extend_from_slice(b"header_event\0");
    put_u64(out, cap.header_event.len() as u64);
    out.extend_from_slice(cap.header_event.as_bytes());
}

fn ftrace_formats(out: &mut Vec<u8>, cap: &Capture) -> Result<(), ExportError> {
    put_u32(out, len32("formats", cap.formats.len())?);
    for f in &cap.formats {
        put_u64(out, f.text.len() as u64);
        out.extend_from_slice(f.text.as_bytes());
    }
    Ok(())
}

/// The event systems' formats (`u32` systems, then per system its NUL-terminated name, `u32`
/// events and each `u64` size and `format` text): the capture's trace events beside
/// ftrace's, which `trace-cmd report` prints through their print formats.
fn event_systems(out: &mut Vec<u8>, cap: &Capture) -> Result<(), ExportError> {
    let mut systems: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for f in &cap.event_formats {
        systems.entry(f.system).or_default().push(f.to_string());
    }
    put_u32(out, len32("event systems", systems.len())?);
    for (system, formats) in systems {
        out.extend_from_slice(system.as_bytes());
        out.push(0);
        put_u32(out, len32("event formats", formats.len())?);
        for text in formats {
            put_u64(out, text.len() as u64);
            out.extend_from_slice(text.as_bytes());
        }
    }
    Ok(())
}

fn uname(cap: &Capture) -> String {
    format!(
        "Linux ftrace-rs {} {}\0",
        env!("CARGO_PKG_VERSION"),
        cap.tracer
    )
}

/// The file being written: what has gone out so far, and the fields filled in afterwards
/// (offsets and sizes known only once the pages are written).
struct Out<'w, W: Write + Seek> {
    w: &'w mut W,
    pos: u64,
}

impl<W: Write + Seek> Out<'_, W> {
    fn put(&mut self, b: &[u8]) -> Result<(), ExportError> {
        self.write_all(b).map_err(werr)
    }

    /// Zeros up to the next multiple of `align`.
    fn pad(&mut self, align: usize) -> Result<(), ExportError> {
        let to = self.pos.next_multiple_of(align as u64);
        let zeros = [0u8; 4096];
        while self.pos < to {
            let n = (to - self.pos).min(zeros.len() as u64) as usize;
            self.put(&zeros[..n])?;
        }
        Ok(())
    }

    /// Overwrites the bytes at `at` (already written) with `b`.
    fn patch(&mut self, at: u64, b: &[u8]) -> Result<(), ExportError> {
        self.w.seek(SeekFrom::Start(at)).map_err(werr)?;
        self.w.write_all(b).map_err(werr)?;
        self.w.seek(SeekFrom::Start(self.pos)).map_err(werr)?;
        Ok(())
    }

    /// CPU `cpu`'s pages, page-aligned: returns their (offset, size).
    fn cpu_pages(&mut self, cap: &mut Capture, cpu: u32) -> Result<(u64, u64), ExportError> {
        self.pad(cap.page_size)?;
        let at = self.pos;
        let size = cap.write_cpu_pages(cpu, self)?;
        debug_assert_eq!(self.pos, at + size);
        Ok((at, size))
    }
}

impl<W: Write + Seek> Write for Out<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.w.write(buf)?;
        self.pos += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.w.flush()
    }
}

fn werr(e: std::io::Error) -> ExportError {
    ExportError(format!("writing trace.dat: {e}"))
}

/// Writes `cap` as `trace.dat` version `version` (6, or 7 with sections) into `out`, the CPU
/// data streamed from the capture ([`Capture::write_cpu_pages`]) and the tables that point at
/// it filled in afterwards.
pub fn write<W: Write + Seek>(
    cap: &mut Capture,
    version: u32,
    out: &mut W,
) -> Result<(), ExportError> {
    let pos = out.stream_position().map_err(werr)?;
    let mut out = Out { w: out, pos };
    match version {
        7 => write_v7(cap, &mut out),
        _ => write_v6(cap, &mut out),
    }
}

/// A v7 file's sections appended, descriptions collected for the strings section.
struct Sections {
    strings: Vec<u8>,
}

impl Sections {
    /// Appends a section; returns the offset of its header.
    fn section<W: Write + Seek>(
        &mut self,
        out: &mut Out<'_, W>,
        id: u16,
        desc: &str,
        body: &[u8],
    ) -> Result<u64, ExportError> {
        let at = out.pos;
        let sid = self.desc(desc);
        let mut h = Vec::with_capacity(16);
        put_u16(&mut h, id);
        put_u16(&mut h, 0);
        put_u32(&mut h, sid);
        put_u64(&mut h, body.len() as u64);
        out.put(&h)?;
        out.put(body)?;
        Ok(at)
    }

    /// Adds a description; returns its id (offset in the strings section).
    fn desc(&mut self, desc: &str) -> u32 {
        let sid = self.strings.len() as u32;
        self.strings.extend_from_slice(desc.as_bytes());
        self.strings.push(0);
        sid
    }
}

fn option(out: &mut Vec<u8>, id: u16, data: &[u8]) -> Result<(), ExportError> {
    put_u16(out, id);
    put_u32(out, len32("option", data.len())?);
    out.extend_from_slice(data);
    Ok(())
}

/// `trace.dat` version 7 (uncompressed).
fn write_v7<W: Write + Seek>(cap: &mut Capture, out: &mut Out<'_, W>) -> Result<(), ExportError> {
    let mut head = initial(cap, b"7\0")?;
    head.extend_from_slice(b"none\0\0"); // compression name and (empty) version
    out.put(&head)?;
    let first_options_at = out.pos;
    out.put(&0u64.to_le_bytes())?; // patched below
    let mut f = Sections {
        strings: Vec::new(),
    };
    let mut body = Vec::new();
    header_info(&mut body, cap);
    let headers = f.section(out, SECTION_HEADER_INFO, "headers", &body)?;
    body.clear();
    ftrace_formats(&mut body, cap)?;
    let ftrace = f.section(out, SECTION_FTRACE_EVENTS, "ftrace events", &body)?;
    body.clear();
    event_systems(&mut body, cap)?;
    let systems = f.section(out, SECTION_EVENT_FORMATS, "events format", &body)?;
    body.clear();
    put_u32(&mut body, len32("kallsyms", cap.kallsyms.len())?);
    body.extend_from_slice(cap.kallsyms.as_bytes());
    let kallsyms = f.section(out, SECTION_KALLSYMS, "kallsyms", &body)?;
    let printk = f.section(out, SECTION_PRINTK, "printk", &0u32.to_le_bytes())?;
    body.clear();
    put_u64(&mut body, cap.cmdlines.len() as u64);
    body.extend_from_slice(cap.cmdlines.as_bytes());
    let cmdlines = f.section(out, SECTION_CMDLINES, "command lines", &body)?;

    // Options pointing at the sections; DONE points at the second options section.
    body.clear();
    let mut clock = cap.trace_clock.clone().into_bytes();
    clock.push(0);
    option(&mut body, OPTION_TRACECLOCK, &clock)?;
    option(&mut body, OPTION_UNAME, uname(cap).as_bytes())?;
    for (id, at) in [
        (SECTION_HEADER_INFO, headers),
        (SECTION_FTRACE_EVENTS, ftrace),
        (SECTION_EVENT_FORMATS, systems),
        (SECTION_KALLSYMS, kallsyms),
        (SECTION_PRINTK, printk),
        (SECTION_CMDLINES, cmdlines),
    ] {
        option(&mut body, id, &at.to_le_bytes())?;
    }
    let nr_cpus = cap.cpu_count()?;
    option(&mut body, OPTION_CPUCOUNT, &nr_cpus.to_le_bytes())?;
    let done_at = body.len() + 6;
    option(&mut body, OPTION_DONE, &0u64.to_le_bytes())?;
    let options1 = f.section(out, SECTION_OPTIONS, "options", &body)?;
    let options1_done = options1 + 16 + done_at as u64;

    // The flyrecord buffer: header, padding, page-aligned CPU data.
    let buffer = out.pos;
    let sid = f.desc("buffer flyrecord");
    let mut h = Vec::new();
    put_u16(&mut h, OPTION_BUFFER);
    put_u16(&mut h, 0);
    put_u32(&mut h, sid);
    out.put(&h)?;
    let size_at = out.pos;
    out.put(&0u64.to_le_bytes())?;
    let mut table = Vec::new();
    for cpu in 0..nr_cpus {
        let (at, size) = out.cpu_pages(cap, cpu)?;
        put_u32(&mut table, cpu);
        put_u64(&mut table, at);
        put_u64(&mut table, size);
    }
    let size = out.pos - size_at - 8;
    out.patch(size_at, &size.to_le_bytes())?;

    // The options section describing the buffer; the last one (DONE 0).
    body.clear();
    let mut data = Vec::new();
    put_u64(&mut data, buffer);
    data.push(0); // top instance: ""
    data.extend_from_slice(cap.clock_name().as_bytes());
    data.push(0);
    put_u32(&mut data, len32("page size", cap.page_size)?);
    put_u32(&mut data, nr_cpus);
    data.extend_from_slice(&table);
    option(&mut body, OPTION_BUFFER, &data)?;
    option(&mut body, OPTION_DONE, &0u64.to_le_bytes())?;
    let options2 = f.section(out, SECTION_OPTIONS, "options", &body)?;
    out.patch(options1_done, &options2.to_le_bytes())?;
    out.patch(first_options_at, &options1.to_le_bytes())?;

    // The strings section (its own description included).
    let sid = f.desc("strings");
    let strings = std::mem::take(&mut f.strings);
    let mut h = Vec::new();
    put_u16(&mut h, SECTION_STRINGS);
    put_u16(&mut h, 0);
    put_u32(&mut h, sid);
    put_u64(&mut h, strings.len() as u64);
    out.put(&h)?;
    out.put(&strings)
}

/// `trace.dat` version 6.
fn write_v6<W: Write + Seek>(cap: &mut Capture, out: &mut Out<'_, W>) -> Result<(), ExportError> {
    let mut head = initial(cap, b"6\0")?;
    header_info(&mut head, cap);
    ftrace_formats(&mut head, cap)?;
    event_systems(&mut head, cap)?;

    put_u32(&mut head, len32("kallsyms", cap.kallsyms.len())?);
    head.extend_from_slice(cap.kallsyms.as_bytes());
    put_u32(&mut head, 0); // printk_formats
    put_u64(&mut head, cap.cmdlines.len() as u64);
    head.extend_from_slice(cap.cmdlines.as_bytes());

    let nr_cpus = cap.cpu_count()?;
    put_u32(&mut head, nr_cpus);

    head.extend_from_slice(b"options  \0");
    put_u16(&mut head, OPTION_TRACECLOCK);
    put_u32(&mut head, 0);
    let uname = uname(cap);
    put_u16(&mut head, OPTION_UNAME);
    put_u32(&mut head, len32("uname", uname.len())?);
    head.extend_from_slice(uname.as_bytes());
    put_u16(&mut head, OPTION_DONE);

    head.extend_from_slice(b"flyrecord\0");
    out.put(&head)?;
    let table_at = out.pos;
    out.put(&vec![0u8; 16 * nr_cpus as usize])?;
    let mut clock = Vec::new();
    put_u64(&mut clock, cap.trace_clock.len() as u64);
    clock.extend_from_slice(cap.trace_clock.as_bytes());
    out.put(&clock)?;

    let mut table = Vec::with_capacity(16 * nr_cpus as usize);
    for cpu in 0..nr_cpus {
        let (at, size) = out.cpu_pages(cap, cpu)?;
        put_u64(&mut table, at);
        put_u64(&mut table, size);
    }
    out.patch(table_at, &table)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u64_at(b: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
    }

    #[test]
    fn cpu_table_points_at_page_aligned_copies() {
        let dir = std::env::temp_dir().join(format!("ftrace-tracedat-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let function = |i: u64| {
            let e = ftrace_core::entry::FtraceEntry {
                ent: ftrace_core::entry::TraceEntry {
                    type_: ftrace_core::EventId::Function.as_u16(),
                    flags: 0,
                    preempt_count: 0,
                    pid: 1,
                },
                ip: 0xffff_ffff_8100_0000,
                parent_ip: 0,
            };
            crate::recording::Event {
                cpu: 0,
                ts: 1000 + i,
                pid: 1,
                tid: 1,
                data: ftrace_core::entry::Pod::as_bytes(&e).to_vec(),
                missed: 0,
                seq: i,
                process: 0,
            }
        };
        let events = |n: u64| (0..n).map(function).collect::<Vec<_>>();
        let pages = [
            crate::capture::cpu_pages(&events(10)).unwrap(),
            Vec::new(),
            crate::capture::cpu_pages(&events(200)).unwrap(),
        ];
        for (cpu, p) in pages.iter().enumerate() {
            let d = dir.join(format!("per_cpu/cpu{cpu}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("trace_pipe_raw"), p).unwrap();
        }
        std::fs::write(dir.join("kallsyms"), "ffffffff81000000 T f\n").unwrap();
        std::fs::write(dir.join("trace_clock"), "[local] global\n").unwrap();
        let mut c = Capture::read(&dir).unwrap();
        let mut out = std::io::Cursor::new(Vec::new());
        write(&mut c, 6, &mut out).unwrap();
        let b = out.into_inner();
        assert_eq!(&b[..12], b"\x17\x08\x44tracing6\0");
        let fly = b.windows(10).position(|w| w == b"flyrecord\0").unwrap() + 10;
        let mut seen = Vec::new();
        for (cpu, want) in pages.iter().enumerate() {
            let (off, size) = (u64_at(&b, fly + 16 * cpu), u64_at(&b, fly + 16 * cpu + 8));
            assert_eq!(off % 4096, 0);
            assert_eq!(&b[off as usize..(off + size) as usize], &want[..]);
            seen.push(size);
        }
        assert_eq!(seen, vec![4096, 0, 8192]);
        let clock_len = u64_at(&b, fly + 48) as usize;
        assert_eq!(&b[fly + 56..fly + 56 + clock_len], b"[local] global\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
