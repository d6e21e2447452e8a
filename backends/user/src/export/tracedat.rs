//! trace-cmd's `trace.dat`, version 6 (`man 5 trace-cmd.dat.v6`), little endian, 8-byte longs.
//!
//! Layout written: the magic and version, the page size, `header_page` and `header_event`, the
//! ftrace event formats of the capture, no other event systems, `kallsyms`, an empty
//! `printk_formats`, `saved_cmdlines`, the CPU count, an options block (`TRACECLOCK` of size 0,
//! which tells the reader a `trace_clock` listing follows the CPU table, and `UNAME`), then
//! `flyrecord`: one (offset, size) pair per CPU, the clock listing, padding to a page boundary
//! and each CPU's raw pages one after another.
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

/// The `trace.dat` (version 6) bytes of `cap`.
pub fn write(cap: &Capture) -> Result<Vec<u8>, ExportError> {
    let mut out = Vec::new();
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(b"6\0");
    out.push(0); // little endian
    out.push(8); // long size
    put_u32(&mut out, len32("page size", cap.page_size)?);

    out.extend_from_slice(b"header_page\0");
    put_u64(&mut out, cap.header_page.len() as u64);
    out.extend_from_slice(cap.header_page.as_bytes());
    out.extend_from_slice(b"header_event\0");
    put_u64(&mut out, cap.header_event.len() as u64);
    out.extend_from_slice(cap.header_event.as_bytes());

    put_u32(&mut out, len32("formats", cap.formats.len())?);
    for f in &cap.formats {
        put_u64(&mut out, f.text.len() as u64);
        out.extend_from_slice(f.text.as_bytes());
    }
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
    let uname = format!(
        "Linux ftrace-rs {} {}\0",
        env!("CARGO_PKG_VERSION"),
        cap.tracer
    );
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
