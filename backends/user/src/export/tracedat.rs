//! trace-cmd's `trace.dat`, version 6 (`man 5 trace-cmd.dat.v6`, [`write()`]) or 7
//! (`man 5 trace-cmd.dat.v7`, [`write_v7`]), little endian, 8-byte longs, uncompressed.
//!
//! Version 6 layout written: the magic and version, the page size, `header_page` and `header_event`, the
//! ftrace event formats of the capture, no other event systems, `kallsyms`, an empty
//! `printk_formats`, `saved_cmdlines`, the CPU count, an options block (`TRACECLOCK` of size 0,
//! which tells the reader a `trace_clock` listing follows the CPU table, and `UNAME`), then
//! `flyrecord`: one (offset, size) pair per CPU, the clock listing, padding to a page boundary
//! and each CPU's raw pages one after another.
//!
//! Version 7 writes the same content as sections (each with the header `u16 id, u16 flags,
//! u32 description string id, u64 size`), in the order trace-cmd's own writer uses: header
//! info, ftrace formats, (empty) event systems, kallsyms, printk formats, cmdlines; an options
//! section pointing at them (plus `TRACECLOCK`, `UNAME`, `CPUCOUNT`); the flyrecord buffer
//! section (page-aligned CPU data); an options section with its `BUFFER` option; and the
//! strings section holding the descriptions.
//!
//! Invariant: the CPU data is the capture's pages byte for byte, so every timestamp, lost-event
//! flag and payload a reader decodes is the one the capture holds; the embedded formats carry
//! the ids those pages use.

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

fn uname(cap: &Capture) -> String {
    format!(
        "Linux ftrace-rs {} {}\0",
        env!("CARGO_PKG_VERSION"),
        cap.tracer
    )
}

/// A v7 file being built: sections appended, descriptions collected for the strings section.
struct V7 {
    out: Vec<u8>,
    strings: Vec<u8>,
}

impl V7 {
    /// Appends a section; returns the offset of its header.
    fn section(&mut self, id: u16, desc: &str, body: &[u8]) -> u64 {
        let at = self.out.len() as u64;
        let sid = self.strings.len() as u32;
        self.strings.extend_from_slice(desc.as_bytes());
        self.strings.push(0);
        put_u16(&mut self.out, id);
        put_u16(&mut self.out, 0);
        put_u32(&mut self.out, sid);
        put_u64(&mut self.out, body.len() as u64);
        self.out.extend_from_slice(body);
        at
    }
}

fn option(out: &mut Vec<u8>, id: u16, data: &[u8]) -> Result<(), ExportError> {
    put_u16(out, id);
    put_u32(out, len32("option", data.len())?);
    out.extend_from_slice(data);
    Ok(())
}

/// The `trace.dat` version 7 bytes of `cap` (uncompressed).
pub fn write_v7(cap: &Capture) -> Result<Vec<u8>, ExportError> {
    let mut out = initial(cap, b"7\0")?;
    out.extend_from_slice(b"none\0\0"); // compression name and (empty) version
    let first_options_at = out.len();
    put_u64(&mut out, 0); // patched below
    let mut f = V7 {
        out,
        strings: Vec::new(),
    };
    let mut body = Vec::new();
    header_info(&mut body, cap);
    let headers = f.section(SECTION_HEADER_INFO, "headers", &body);
    body.clear();
    ftrace_formats(&mut body, cap)?;
    let ftrace = f.section(SECTION_FTRACE_EVENTS, "ftrace events", &body);
    let systems = f.section(SECTION_EVENT_FORMATS, "events format", &0u32.to_le_bytes());
    body.clear();
    put_u32(&mut body, len32("kallsyms", cap.kallsyms.len())?);
    body.extend_from_slice(cap.kallsyms.as_bytes());
    let kallsyms = f.section(SECTION_KALLSYMS, "kallsyms", &body);
    let printk = f.section(SECTION_PRINTK, "printk", &0u32.to_le_bytes());
    body.clear();
    put_u64(&mut body, cap.cmdlines.len() as u64);
    body.extend_from_slice(cap.cmdlines.as_bytes());
    let cmdlines = f.section(SECTION_CMDLINES, "command lines", &body);

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
    let nr_cpus = len32("cpus", cap.cpus.len())?;
    option(&mut body, OPTION_CPUCOUNT, &nr_cpus.to_le_bytes())?;
    let done_at = body.len() + 6;
    option(&mut body, OPTION_DONE, &0u64.to_le_bytes())?;
    let options1 = f.section(SECTION_OPTIONS, "options", &body);
    let options1_done = options1 as usize + 16 + done_at;

    // The flyrecord buffer: header, padding, page-aligned CPU data.
    let buffer = f.out.len() as u64;
    let sid = f.strings.len() as u32;
    f.strings.extend_from_slice(b"buffer flyrecord\0");
    put_u16(&mut f.out, OPTION_BUFFER);
    put_u16(&mut f.out, 0);
    put_u32(&mut f.out, sid);
    let size_at = f.out.len();
    put_u64(&mut f.out, 0);
    let mut table = Vec::new();
    for (cpu, pages) in cap.cpus.iter().enumerate() {
        let pad = f.out.len().next_multiple_of(cap.page_size);
        f.out.resize(pad, 0);
        put_u32(&mut table, cpu as u32);
        put_u64(&mut table, f.out.len() as u64);
        put_u64(&mut table, pages.len() as u64);
        f.out.extend_from_slice(pages);
    }
    let size = (f.out.len() - size_at - 8) as u64;
    f.out[size_at..size_at + 8].copy_from_slice(&size.to_le_bytes());

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
    let options2 = f.section(SECTION_OPTIONS, "options", &body);
    f.out[options1_done..options1_done + 8].copy_from_slice(&options2.to_le_bytes());
    f.out[first_options_at..first_options_at + 8].copy_from_slice(&options1.to_le_bytes());

    // The strings section (its own description included).
    let sid = f.strings.len() as u32;
    f.strings.extend_from_slice(b"strings\0");
    let strings = std::mem::take(&mut f.strings);
    put_u16(&mut f.out, SECTION_STRINGS);
    put_u16(&mut f.out, 0);
    put_u32(&mut f.out, sid);
    put_u64(&mut f.out, strings.len() as u64);
    f.out.extend_from_slice(&strings);
    Ok(f.out)
}

/// The `trace.dat` (version 6) bytes of `cap`.
pub fn write(cap: &Capture) -> Result<Vec<u8>, ExportError> {
    let mut out = initial(cap, b"6\0")?;
    header_info(&mut out, cap);
    ftrace_formats(&mut out, cap)?;
    put_u32(&mut out, 0); // no event systems besides ftrace

    put_u32(&mut out, len32("kallsyms", cap.kallsyms.len())?);
    out.extend_from_slice(cap.kallsyms.as_bytes());
    put_u32(&mut out, 0); // printk_formats
    put_u64(&mut out, cap.cmdlines.len() as u64);
    out.extend_from_slice(cap.cmdlines.as_bytes());

    let nr_cpus = len32("cpus", cap.cpus.len())?;
    put_u32(&mut out, nr_cpus);

    out.extend_from_slice(b"options  \0");
    put_u16(&mut out, OPTION_TRACECLOCK);
    put_u32(&mut out, 0);
    let uname = uname(cap);
    put_u16(&mut out, OPTION_UNAME);
    put_u32(&mut out, len32("uname", uname.len())?);
    out.extend_from_slice(uname.as_bytes());
    put_u16(&mut out, OPTION_DONE);

    out.extend_from_slice(b"flyrecord\0");
    let table_at = out.len();
    out.resize(table_at + 16 * cap.cpus.len(), 0);
    put_u64(&mut out, cap.trace_clock.len() as u64);
    out.extend_from_slice(cap.trace_clock.as_bytes());

    let mut table = Vec::with_capacity(16 * cap.cpus.len());
    for pages in &cap.cpus {
        let pad = out.len().next_multiple_of(cap.page_size);
        out.resize(pad, 0);
        put_u64(&mut table, out.len() as u64);
        put_u64(&mut table, pages.len() as u64);
        out.extend_from_slice(pages);
    }
    out[table_at..table_at + table.len()].copy_from_slice(&table);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cap(cpus: Vec<Vec<u8>>) -> Capture {
        Capture {
            dir: "x".into(),
            page_size: 4096,
            header_page: "hp".into(),
            header_event: "he".into(),
            formats: vec![super::super::FormatFile {
                name: "function".into(),
                id: 1,
                text: "name: function\nID: 1\n".into(),
            }],
            kallsyms: "ffffffff81000000 T f\n".into(),
            cmdlines: "1 init\n".into(),
            trace_clock: "[local] global\n".into(),
            tracer: "function".into(),
            cpus,
            tgids: Default::default(),
            exes: Default::default(),
            tsc: None,
        }
    }

    fn u64_at(b: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
    }

    #[test]
    fn cpu_table_points_at_page_aligned_copies() {
        let c = cap(vec![vec![1u8; 4096], Vec::new(), vec![3u8; 8192]]);
        let b = write(&c).unwrap();
        assert_eq!(&b[..12], b"\x17\x08\x44tracing6\0");
        let fly = b.windows(10).position(|w| w == b"flyrecord\0").unwrap() + 10;
        let mut seen = Vec::new();
        for cpu in 0..3 {
            let (off, size) = (u64_at(&b, fly + 16 * cpu), u64_at(&b, fly + 16 * cpu + 8));
            assert_eq!(off % 4096, 0);
            assert_eq!(&b[off as usize..(off + size) as usize], &c.cpus[cpu][..]);
            seen.push(size);
        }
        assert_eq!(seen, vec![4096, 0, 8192]);
        let clock_len = u64_at(&b, fly + 48) as usize;
        assert_eq!(&b[fly + 56..fly + 56 + clock_len], b"[local] global\n");
    }
}
