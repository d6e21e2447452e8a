//! Tracepoints declared with ftrace-core's `tracepoint!` through the tree: registered with
//! their generated formats, enabled through `events/<sys>/<ev>/enable` (the host arms the
//! call sites' key when the tree says the event is enabled), filtered (`value > N`), triggered
//! (`traceoff`), and read back from `trace` with the right lines only.

mod common;

use std::cell::RefCell;

use common::{cat, echo, tracefs};
use ftrace_core::tracepoint;
use ftrace_core::tracepoint::Tracepoint;

tracepoint! {
    /// `demo:demo_value`.
    pub fn trace_demo_value(value: u64 => "u64", cpu: u32 => "unsigned int");
    record DemoValue;
    static DEMO_VALUE = ("demo", "demo_value", 400,
        "\"value=%llu cpu=%u\", REC->value, REC->cpu");
}

tracepoint! {
    /// `demo:demo_pair`.
    pub fn trace_demo_pair(a: i32 => "int", b: i32 => "int");
    record DemoPair;
    static DEMO_PAIR = ("demo", "demo_pair", 401, "\"a=%d b=%d\", REC->a, REC->b");
}

const TRACEPOINTS: [&Tracepoint; 2] = [&DEMO_VALUE, &DEMO_PAIR];

thread_local! {
    /// The records the probe received, for the host to write.
    static FIRED: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// The host's probe: fills `common_pid` and queues the record.
fn probe(_tp: &Tracepoint, rec: &mut [u8]) {
    rec[4..8].copy_from_slice(&7i32.to_le_bytes());
    FIRED.with(|f| f.borrow_mut().push(rec.to_vec()));
}

/// Connects or disconnects each tracepoint as the tree has enabled its event.
fn arm(fs: &ftrace_tracefs::Tracefs<common::ModelHost>) {
    let st = fs.host().state(None);
    let st = st.borrow();
    for tp in TRACEPOINTS {
        let on = st
            .event_states
            .get(&tp.format().id)
            .is_some_and(|s| s.enabled);
        match (on, tp.is_enabled()) {
            (true, false) => tp.connect(probe).unwrap(),
            (false, true) => tp.disconnect(),
            _ => {}
        }
    }
}

/// Writes what the probe received through the instance's tracepoint path.
fn flush(fs: &ftrace_tracefs::Tracefs<common::ModelHost>, ts: &mut u64) {
    let st = fs.host().state(None);
    let mut st = st.borrow_mut();
    for rec in FIRED.with(|f| std::mem::take(&mut *f.borrow_mut())) {
        *ts += 1000;
        st.tracepoint(1, *ts, &rec);
    }
}

fn bodies(trace: &str) -> Vec<String> {
    trace
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split_once(": ").unwrap().1.to_owned())
        .collect()
}

#[test]
fn declared_events_enable_filter_trigger_and_read_back() {
    let mut fs = tracefs();
    for tp in TRACEPOINTS {
        fs.register_event(*tp.format()).unwrap();
    }
    let mut ts = 5_000_000_000;
    // The generated format and id files.
    let format = cat(&mut fs, "events/demo/demo_value/format").unwrap();
    assert!(format.starts_with("name: demo_value\nID: 400\nformat:\n"));
    assert!(format.contains("\tfield:u64 value;\toffset:8;\tsize:8;\tsigned:0;\n"));
    assert!(format.contains("\tfield:unsigned int cpu;\toffset:16;\tsize:4;\tsigned:0;\n"));
    assert!(format.ends_with("print fmt: \"value=%llu cpu=%u\", REC->value, REC->cpu\n"));
    assert_eq!(cat(&mut fs, "events/demo/demo_pair/id").unwrap(), "401\n");

    // Off: the call sites do nothing.
    trace_demo_value(1, 0);
    assert!(!DEMO_VALUE.is_enabled());
    assert!(FIRED.with(|f| f.borrow().is_empty()));

    echo(&mut fs, "1", "events/demo/demo_value/enable").unwrap();
    arm(&fs);
    assert!(DEMO_VALUE.is_enabled() && !DEMO_PAIR.is_enabled());
    for v in [5, 50, 500] {
        trace_demo_value(v, 1);
        trace_demo_pair(v as i32, -1);
    }
    flush(&fs, &mut ts);

    echo(&mut fs, "value > 10", "events/demo/demo_value/filter").unwrap();
    for v in [6, 60, 600] {
        trace_demo_value(v, 2);
    }
    flush(&fs, &mut ts);

    echo(
        &mut fs,
        "traceoff if value > 100",
        "events/demo/demo_value/trigger",
    )
    .unwrap();
    for v in [7, 70, 700, 7000] {
        trace_demo_value(v, 3);
    }
    flush(&fs, &mut ts);
    assert_eq!(cat(&mut fs, "tracing_on").unwrap(), "0\n");

    // The pair event was never enabled; the filter dropped 6 and 7; traceoff fired on 700,
    // which is itself recorded (a post trigger), and nothing after it is.
    assert_eq!(
        bodies(&cat(&mut fs, "trace").unwrap()),
        [
            "demo_value: value=5 cpu=1",
            "demo_value: value=50 cpu=1",
            "demo_value: value=500 cpu=1",
            "demo_value: value=60 cpu=2",
            "demo_value: value=600 cpu=2",
            "demo_value: value=70 cpu=3",
            "demo_value: value=700 cpu=3",
        ]
    );

    echo(&mut fs, "0", "events/demo/demo_value/enable").unwrap();
    arm(&fs);
    // The traceoff trigger keeps the event soft-enabled (`0*`), so the key stays on.
    assert_eq!(
        cat(&mut fs, "events/demo/demo_value/enable").unwrap(),
        "0*\n"
    );
    echo(
        &mut fs,
        "!traceoff if value > 100",
        "events/demo/demo_value/trigger",
    )
    .unwrap();
    arm(&fs);
    assert!(!DEMO_VALUE.is_enabled());
}
