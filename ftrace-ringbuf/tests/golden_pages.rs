//! Golden test: decode the kernel's own `trace_pipe_raw` pages (Linux 6.12.117, x86_64) and
//! compare every event with the text the kernel printed for the same buffer.

use ftrace_core::EventId;
use ftrace_core::entry::{FtraceEntry, Pod, PrintEntry, TraceEntry};
use ftrace_core::symbols::{SortedSymbols, SymbolTable};
use ftrace_ringbuf::page::{Page, RecordKind};

const REF: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/reference/ftrace-6.12.117"
);

fn read(rel: &str) -> Vec<u8> {
    std::fs::read(format!("{REF}/{rel}")).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn text(rel: &str) -> String {
    String::from_utf8(read(rel)).unwrap()
}

/// One line of `per_cpu/cpuN/trace`: (pid, "secs.usecs", function, parent or print text).
fn parse_trace(t: &str) -> Vec<(i32, String, String, String)> {
    t.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let (head, tail) = l.split_once("]").unwrap();
            let comm_pid = head.rsplit_once('[').unwrap().0.trim();
            let pid = comm_pid.rsplit_once('-').unwrap().1.parse().unwrap();
            let mut rest = tail.split_whitespace();
            let _flags = rest.next().unwrap();
            let ts = rest.next().unwrap().trim_end_matches(':').to_string();
            let func = rest.next().unwrap().trim_end_matches(':').to_string();
            let parent = rest.next().unwrap().trim_start_matches("<-").to_string();
            (pid, ts, func, parent)
        })
        .collect()
}

/// `trace` with the `raw` option: "pid cpu ts_ns ip parent_ip" per function event,
/// "pid cpu ts_ns # ip text" per print event (the text is returned as parent 0).
fn parse_rawopt(t: &str, cpu: u32) -> Vec<(i32, u64, u64, u64)> {
    t.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (ip, parent) = if f[3] == "#" {
                (f[4], "0")
            } else {
                (f[3], f[4])
            };
            (f[1].parse::<u32>().unwrap() == cpu).then(|| {
                (
                    f[0].parse().unwrap(),
                    f[2].parse().unwrap(),
                    u64::from_str_radix(ip, 16).unwrap(),
                    u64::from_str_radix(parent, 16).unwrap(),
                )
            })
        })
        .collect()
}

fn name(syms: &SortedSymbols, addr: u64) -> String {
    syms.lookup(addr)
        .unwrap_or_else(|| panic!("no symbol for {addr:#x}"))
        .name
        .to_string()
}

fn check_cpu(cpu: u32) {
    let raw = read(&format!("06-raw-function/raw_cpu{cpu}.bin"));
    let page = Page::new(&raw).unwrap();
    assert_eq!(page.capacity(), 4080);
    assert!(!page.missed_events());
    let syms = SortedSymbols::from_kallsyms(&text("11-kallsyms/kallsyms_subset.txt")).unwrap();
    let expected = parse_trace(&text(&format!(
        "06-raw-function/per_cpu_cpu{cpu}_trace.txt"
    )));
    let exact = parse_rawopt(&text("06-raw-function/trace_rawopt.txt"), cpu);
    let events: Vec<_> = page.events().collect::<Result<_, _>>().unwrap();
    assert_eq!(events.len(), expected.len());
    assert_eq!(events.len(), exact.len());
    assert!(!events.is_empty());
    assert_eq!(events[0].ts, page.time_stamp());
    let mut prints = 0;
    for (i, ev) in events.iter().enumerate() {
        let (pid, ts, func, parent) = &expected[i];
        // ns2usecs: the kernel rounds to the nearest microsecond.
        let us = (ev.ts + 500) / 1000;
        let shown = format!("{}.{:06}", us / 1_000_000, us % 1_000_000);
        assert_eq!(&shown, ts, "timestamp of event {i}");
        let ent = TraceEntry::read_from(ev.payload).unwrap();
        assert_eq!(ent.pid, *pid, "pid of event {i}");
        const FUNCTION: u16 = EventId::Function as u16;
        const PRINT: u16 = EventId::Print as u16;
        match ent.type_ {
            FUNCTION => {
                assert_eq!(ev.payload.len(), 24, "event {i}");
                let e = FtraceEntry::read_from(ev.payload).unwrap();
                assert_eq!(&name(&syms, e.ip), func, "ip of event {i}");
                assert_eq!(&name(&syms, e.parent_ip), parent, "parent ip of event {i}");
                assert_eq!(
                    (e.ent.pid, ev.ts, e.ip, e.parent_ip),
                    exact[i],
                    "raw-option line of event {i}"
                );
            }
            PRINT => {
                prints += 1;
                let e = PrintEntry::read_from(ev.payload).unwrap();
                assert_eq!(&name(&syms, e.ip), func, "ip of print {i}");
                let text = &ev.payload[size_of::<PrintEntry>()..];
                let text = &text[..text.iter().position(|&b| b == 0).unwrap()];
                let text = std::str::from_utf8(text).unwrap().trim_end();
                assert_eq!(text, parent, "text of print {i}");
                assert_eq!((e.ent.pid, ev.ts, e.ip, 0), exact[i], "raw line {i}");
            }
            other => panic!("unexpected event type {other:?} at {i}"),
        }
    }
    assert_eq!(prints, usize::from(cpu == 1));
    // The records fill exactly the committed bytes.
    let used: usize = page.records().map(|r| r.unwrap().len).sum();
    assert_eq!(used, page.commit());
    assert!(
        page.records()
            .all(|r| matches!(r.unwrap().kind, RecordKind::Data { .. }))
    );
}

#[test]
fn kernel_page_cpu0_decodes_to_the_kernels_text() {
    check_cpu(0);
}

#[test]
fn kernel_page_cpu1_decodes_to_the_kernels_text() {
    check_cpu(1);
}
