//! Our writer, fed the kernel's events with the kernel's timestamps, produces the kernel's
//! pages byte for byte (Linux 6.12.117 `trace_pipe_raw` captures).

use ftrace_ringbuf::{At, CpuBuffer, HeapPages, Page};

const REF: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/reference/ftrace-6.12.117"
);

fn kernel_page(cpu: u32) -> Vec<u8> {
    std::fs::read(format!("{REF}/06-raw-function/raw_cpu{cpu}.bin")).unwrap()
}

/// Re-records the events of a kernel page and returns the page our reader hands out.
fn rewrite(kernel: &[u8]) -> (Vec<u8>, usize) {
    let page = Page::new(kernel).unwrap();
    let buf = CpuBuffer::new(HeapPages, 8, kernel.len()).unwrap();
    let mut n = 0;
    for ev in page.events() {
        let ev = ev.unwrap();
        assert!(buf.write(ev.payload, &At(ev.ts)));
        n += 1;
    }
    let mut out = buf.alloc_read_page().unwrap();
    let got = buf.consumer().read_page(&mut out).unwrap();
    assert_eq!(got, n);
    (out.as_bytes().to_vec(), n)
}

fn show_diff(ours: &[u8], theirs: &[u8]) -> String {
    match ours.iter().zip(theirs).position(|(a, b)| a != b) {
        None => "identical".into(),
        Some(i) => format!(
            "first difference at byte {i}: ours {:02x?} kernel {:02x?}",
            &ours[i..(i + 16).min(ours.len())],
            &theirs[i..(i + 16).min(theirs.len())]
        ),
    }
}

fn check(cpu: u32) {
    let kernel = kernel_page(cpu);
    let (ours, n) = rewrite(&kernel);
    assert!(n > 20, "the capture holds the events");
    assert_eq!(ours.len(), kernel.len());
    assert!(ours == kernel, "cpu{cpu}: {}", show_diff(&ours, &kernel));
}

#[test]
fn writer_reproduces_kernel_page_cpu0() {
    check(0);
}

#[test]
fn writer_reproduces_kernel_page_cpu1() {
    check(1);
}

/// Whole-page swap path: after the writer moved on, the page handed out is the ring's own
/// page (zero copy), still identical to the kernel's.
#[test]
fn swapped_out_page_is_identical_too() {
    let kernel = kernel_page(0);
    let page = Page::new(&kernel).unwrap();
    let buf = CpuBuffer::new(HeapPages, 8, kernel.len()).unwrap();
    let mut last = 0;
    for ev in page.events() {
        let ev = ev.unwrap();
        assert!(buf.write(ev.payload, &At(ev.ts)));
        last = ev.ts;
    }
    // Fill the rest of the page with one big event that cannot fit, moving the writer on.
    let big = vec![0u8; buf.max_payload()];
    assert!(buf.write(&big, &At(last + 1)));
    let mut out = buf.alloc_read_page().unwrap();
    buf.consumer().read_page(&mut out).unwrap();
    // The kernel page ends where ours had its end-of-page padding: real_end is the commit.
    assert!(
        out.as_bytes() == &kernel[..],
        "{}",
        show_diff(out.as_bytes(), &kernel)
    );
}

/// Both CPUs' captured events, written to two buffers and merged by timestamp, come out in
/// the order (and with the CPU numbers) of the kernel's global `trace` file.
#[test]
fn merged_cpus_follow_the_kernels_trace_order() {
    let text = std::fs::read_to_string(format!("{REF}/06-raw-function/trace.txt")).unwrap();
    let want: Vec<(usize, String)> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let cpu = l[l.find('[').unwrap() + 1..l.find(']').unwrap()]
                .parse()
                .unwrap();
            let ts = l[l.find(']').unwrap() + 1..]
                .split_whitespace()
                .nth(1)
                .unwrap()
                .trim_end_matches(':')
                .to_string();
            (cpu, ts)
        })
        .collect();
    let bufs: Vec<_> = (0..2)
        .map(|cpu| {
            let kernel = kernel_page(cpu);
            let buf = CpuBuffer::new(HeapPages, 8, 4096).unwrap();
            for ev in Page::new(&kernel).unwrap().events() {
                let ev = ev.unwrap();
                assert!(buf.write(ev.payload, &At(ev.ts)));
            }
            buf
        })
        .collect();
    let mut readers: Vec<_> = bufs.iter().map(|b| b.consumer()).collect();
    let mut got = Vec::new();
    while let Some((cpu, ts)) = ftrace_ringbuf::merge_next(&mut readers) {
        assert_eq!(readers[cpu].next().unwrap().ts, ts);
        let (s, us) = ftrace_ringbuf::ns_to_secs_usecs(ts);
        got.push((cpu, format!("{s}.{us:06}")));
    }
    assert_eq!(got.len(), 56);
    assert_eq!(got, want);
}
