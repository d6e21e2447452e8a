//! Trace events through the tree, with the `sched` events registered as a Linux-like host
//! registers them: `set_event`, the `enable` files, triggers and filters, what each reads back
//! (the kernel's texts), what the backend is told, and instances keeping their own state.

mod common;

use common::{cat, echo, echo_append, golden, tracefs_with_sched};
use ftrace_core::format::sched::{SCHED_SWITCH, SCHED_WAKEUP};
use ftrace_tracefs::{Errno, EventState, OpenFlags};

const SWITCH: &str = "events/sched/sched_switch";
const WAKEUP: &str = "events/sched/sched_wakeup";

fn enables(fs: &mut ftrace_tracefs::Tracefs<common::ModelHost>) -> (String, String, String) {
    (
        cat(fs, &format!("{SWITCH}/enable")).unwrap(),
        cat(fs, &format!("{WAKEUP}/enable")).unwrap(),
        cat(fs, "events/sched/enable").unwrap(),
    )
}

fn s(a: &str, b: &str, c: &str) -> (String, String, String) {
    (a.to_owned(), b.to_owned(), c.to_owned())
}

#[test]
fn set_event_and_enable_files() {
    let mut fs = tracefs_with_sched();
    echo(&mut fs, "sched:sched_switch", "set_event").unwrap();
    assert_eq!(cat(&mut fs, "set_event").unwrap(), "sched:sched_switch\n");
    assert_eq!(enables(&mut fs), s("1\n", "0\n", "X\n"));
    assert_eq!(cat(&mut fs, "events/enable").unwrap(), "X\n");
    // `>>` adds; the listing is in event order, as the capture of 10-events shows it.
    echo_append(&mut fs, "sched:sched_wakeup", "set_event").unwrap();
    assert_eq!(
        cat(&mut fs, "set_event").unwrap(),
        golden("10-events/set_event.txt")
    );
    assert_eq!(cat(&mut fs, "events/enable").unwrap(), "1\n");
    // `!` removes; `>` (O_TRUNC) clears everything first.
    echo_append(&mut fs, "!sched:sched_switch", "set_event").unwrap();
    assert_eq!(cat(&mut fs, "set_event").unwrap(), "sched:sched_wakeup\n");
    echo(&mut fs, "", "set_event").unwrap();
    assert_eq!(cat(&mut fs, "set_event").unwrap(), "");
    assert_eq!(enables(&mut fs), s("0\n", "0\n", "0\n"));
    // The kernel's match forms: `sys:*`, `sys:`, `:event`, `*:event`, a bare system or event
    // name; several tokens in one write.
    for (tok, on) in [
        ("sched:*", "sched:sched_switch\nsched:sched_wakeup\n"),
        ("sched:", "sched:sched_switch\nsched:sched_wakeup\n"),
        ("sched", "sched:sched_switch\nsched:sched_wakeup\n"),
        (":sched_wakeup", "sched:sched_wakeup\n"),
        ("*:sched_switch", "sched:sched_switch\n"),
        ("sched_switch", "sched:sched_switch\n"),
        (
            "sched:sched_wakeup sched:sched_switch",
            "sched:sched_switch\nsched:sched_wakeup\n",
        ),
    ] {
        echo(&mut fs, tok, "set_event").unwrap();
        assert_eq!(cat(&mut fs, "set_event").unwrap(), on, "{tok}");
    }
    // Unknown names and globs (the kernel compares names exactly): EINVAL, nothing changes.
    echo(&mut fs, "sched:sched_switch", "set_event").unwrap();
    for bad in [
        "sched:nope",
        "nope",
        "sched:sched_*",
        "sched_*:sched_switch",
    ] {
        assert_eq!(
            echo_append(&mut fs, bad, "set_event"),
            Err(Errno::EINVAL),
            "{bad}"
        );
        assert_eq!(cat(&mut fs, "set_event").unwrap(), "sched:sched_switch\n");
    }
    assert_eq!(
        echo_append(&mut fs, &"x".repeat(128), "set_event"),
        Err(Errno::EINVAL)
    );
    // `enable` files take 0 or 1.
    for bad in ["2", "-1", "x", ""] {
        assert_eq!(
            echo(&mut fs, bad, &format!("{WAKEUP}/enable")),
            Err(Errno::EINVAL)
        );
        assert_eq!(
            echo(&mut fs, bad, "events/sched/enable"),
            Err(Errno::EINVAL)
        );
    }
    echo(&mut fs, "1", &format!("{WAKEUP}/enable")).unwrap();
    assert_eq!(enables(&mut fs), s("1\n", "1\n", "1\n"));
    echo(&mut fs, "0", "events/sched/enable").unwrap();
    assert_eq!(enables(&mut fs), s("0\n", "0\n", "0\n"));
    echo(&mut fs, "1", "events/enable").unwrap();
    assert_eq!(enables(&mut fs), s("1\n", "1\n", "1\n"));
    // The backend was told each state.
    let st = fs.host().state(None);
    let st = st.borrow();
    for ev in [SCHED_SWITCH, SCHED_WAKEUP] {
        assert_eq!(
            st.event_states.get(&ev.id),
            Some(&EventState {
                enabled: true,
                soft_disabled: false,
                triggers: false
            })
        );
    }
}

#[test]
fn first_event_use_expands_the_buffers() {
    let mut fs = tracefs_with_sched();
    assert_eq!(
        cat(&mut fs, "buffer_size_kb").unwrap(),
        "7 (expanded: 1408)\n"
    );
    echo(&mut fs, "sched:sched_switch", "set_event").unwrap();
    assert_eq!(cat(&mut fs, "buffer_size_kb").unwrap(), "1410\n");
}

#[test]
fn triggers_add_list_and_remove() {
    let mut fs = tracefs_with_sched();
    let trig = format!("{SWITCH}/trigger");
    echo(&mut fs, "traceoff:3 if prev_pid == 1", &trig).unwrap();
    assert_eq!(
        cat(&mut fs, &trig).unwrap(),
        "traceoff:count=3 if prev_pid == 1\n"
    );
    // A trigger keeps its event armed but soft-disabled.
    assert_eq!(enables(&mut fs), s("0*\n", "0\n", "X\n"));
    // traceon and traceoff share a type: one of them per event.
    assert_eq!(echo_append(&mut fs, "traceon", &trig), Err(Errno::EEXIST));
    echo_append(&mut fs, "enable_event:sched:sched_wakeup:2", &trig).unwrap();
    assert_eq!(cat(&mut fs, &format!("{WAKEUP}/enable")).unwrap(), "0*\n");
    echo_append(
        &mut fs,
        "hist:keys=next_pid:vals=prev_prio:sort=prev_prio.descending:size=256",
        &trig,
    )
    .unwrap();
    echo_append(&mut fs, "stacktrace", &trig).unwrap();
    // Newest first, hist triggers last (as the kernel's lists are built).
    let expected = "stacktrace:unlimited\n\
                    enable_event:sched:sched_wakeup:count=2\n\
                    traceoff:count=3 if prev_pid == 1\n\
                    hist:keys=next_pid:vals=hitcount,prev_prio:sort=prev_prio.descending:size=256 [active]\n";
    assert_eq!(cat(&mut fs, &trig).unwrap(), expected);
    // The same hist again: EEXIST and the kernel's error_log entry.
    fs.host_mut().now_ns = 200_000_001_000;
    assert_eq!(
        echo_append(
            &mut fs,
            "hist:keys=next_pid:vals=prev_prio:sort=prev_prio.descending",
            &trig
        ),
        Err(Errno::EEXIST)
    );
    assert_eq!(
        cat(&mut fs, "error_log").unwrap(),
        "[  200.000001] hist:sched:sched_switch: error: Hist trigger already exists\n  \
         Command: hist:keys=next_pid:vals=prev_prio:sort=prev_prio.descending\n           ^\n"
    );
    // pause / cont act on the existing hist.
    echo_append(
        &mut fs,
        "hist:keys=next_pid:vals=prev_prio:sort=prev_prio.descending:pause",
        &trig,
    )
    .unwrap();
    assert!(
        cat(&mut fs, &trig)
            .unwrap()
            .ends_with("size=256 [paused]\n")
    );
    echo_append(
        &mut fs,
        "hist:keys=next_pid:vals=prev_prio:sort=prev_prio.descending:cont",
        &trig,
    )
    .unwrap();
    assert!(
        cat(&mut fs, &trig)
            .unwrap()
            .ends_with("size=256 [active]\n")
    );
    // The backend saw the list.
    {
        let st = fs.host().state(None);
        let st = st.borrow();
        assert_eq!(
            st.event_triggers.get(&SCHED_SWITCH.id).unwrap().concat(),
            expected
        );
        assert_eq!(
            st.event_states.get(&SCHED_SWITCH.id),
            Some(&EventState {
                enabled: true,
                soft_disabled: true,
                triggers: true
            })
        );
    }
    // Removal: `!cmd` (count and filter need not match); the enable trigger's target leaves
    // soft mode.
    echo_append(&mut fs, "!enable_event:sched:sched_wakeup", &trig).unwrap();
    assert_eq!(cat(&mut fs, &format!("{WAKEUP}/enable")).unwrap(), "0\n");
    echo_append(&mut fs, "!stacktrace:5", &trig).unwrap();
    // Removing what is not there succeeds.
    echo_append(&mut fs, "!stacktrace", &trig).unwrap();
    // Opening with O_TRUNC drops the hist triggers only (the commands with `unreg_all`).
    let fh = fs.open(&trig, OpenFlags::TRUNCATE).unwrap();
    fs.release(fh).unwrap();
    assert_eq!(
        cat(&mut fs, &trig).unwrap(),
        "traceoff:count=3 if prev_pid == 1\n"
    );
    // ... and `echo > trigger` itself is an empty command: EINVAL.
    assert_eq!(echo(&mut fs, "", &trig), Err(Errno::EINVAL));
    echo_append(&mut fs, "!traceon", &trig).unwrap();
    assert_eq!(
        cat(&mut fs, &trig).unwrap(),
        "# Available triggers:\n# traceon traceoff stacktrace enable_event disable_event enable_hist disable_hist hist\n"
    );
    assert_eq!(enables(&mut fs), s("0\n", "0\n", "0\n"));
}

#[test]
fn trigger_errors_change_nothing() {
    let mut fs = tracefs_with_sched();
    let trig = format!("{SWITCH}/trigger");
    echo(&mut fs, "traceon", &trig).unwrap();
    let before = cat(&mut fs, &trig).unwrap();
    fs.host_mut().now_ns = 300_000_000_000;
    for (bad, errno) in [
        ("bogus", Errno::EINVAL),
        ("traceon:x", Errno::EINVAL),
        ("stacktrace if nope == 1", Errno::EINVAL),
        // This backend has no snapshot buffer: no `snapshot` command (as the kernel
        // without CONFIG_TRACER_SNAPSHOT).
        ("snapshot", Errno::EINVAL),
        ("enable_event:sched:nope", Errno::EINVAL),
        ("hist:keys=next_pid:vals=bogus", Errno::EINVAL),
        ("hist:keys=next_pid:sort=bogus", Errno::EINVAL),
        ("hist:keys=next_pid.nomod", Errno::EINVAL),
        ("hist:keys=next_pid:cont", Errno::ENOENT),
    ] {
        assert_eq!(echo_append(&mut fs, bad, &trig), Err(errno), "{bad}");
        assert_eq!(cat(&mut fs, &trig).unwrap(), before, "{bad}");
    }
    let log = cat(&mut fs, "error_log").unwrap();
    let headers: Vec<&str> = log.lines().step_by(3).collect();
    assert_eq!(
        headers,
        [
            "[  300.000000] event filter parse error: error: Field not found",
            "[  300.000000] hist:sched:sched_switch: error: Couldn't find field",
            "[  300.000000] hist:sched:sched_switch: error: Sort field must be a key or a val",
            "[  300.000000] hist:sched:sched_switch: error: Invalid field modifier",
            "[  300.000000] hist:sched:sched_switch: error: Can't clear or continue a nonexistent hist trigger",
        ]
    );
    // A backend that cannot arm the event refuses the trigger; nothing changes.
    fs.host().state(None).borrow_mut().refuse_events = true;
    assert_eq!(
        echo_append(&mut fs, "stacktrace", &format!("{WAKEUP}/trigger")),
        Err(Errno::ENODEV)
    );
    assert_eq!(
        echo(&mut fs, "1", &format!("{WAKEUP}/enable")),
        Err(Errno::ENODEV)
    );
    assert!(
        cat(&mut fs, &format!("{WAKEUP}/trigger"))
            .unwrap()
            .starts_with("# Available")
    );
    assert_eq!(cat(&mut fs, &format!("{WAKEUP}/enable")).unwrap(), "0\n");
}

#[test]
fn filters_read_back_and_reject_as_linux() {
    let mut fs = tracefs_with_sched();
    let flt = format!("{SWITCH}/filter");
    echo(&mut fs, "prev_pid == 1 && next_comm ~ \"sh*\"", &flt).unwrap();
    assert_eq!(
        cat(&mut fs, &flt).unwrap(),
        "prev_pid == 1 && next_comm ~ \"sh*\"\n"
    );
    assert_eq!(
        fs.host()
            .state(None)
            .borrow()
            .event_filters
            .get(&SCHED_SWITCH.id),
        Some(&Some("prev_pid == 1 && next_comm ~ \"sh*\"".to_owned()))
    );
    // A rejected filter: EINVAL, the file shows where and why (Linux keeps it, filtering
    // off), error_log gains the entry.
    fs.host_mut().now_ns = 400_000_000_000;
    assert_eq!(echo(&mut fs, "bogus == 1", &flt), Err(Errno::EINVAL));
    assert_eq!(
        cat(&mut fs, &flt).unwrap(),
        "bogus == 1\n      ^\nparse_error: Field not found\n\n"
    );
    assert_eq!(
        cat(&mut fs, "error_log").unwrap(),
        "[  400.000000] event filter parse error: error: Field not found\n  \
         Command: bogus == 1\n                 ^\n"
    );
    assert_eq!(
        fs.host()
            .state(None)
            .borrow()
            .event_filters
            .get(&SCHED_SWITCH.id),
        Some(&None)
    );
    echo(&mut fs, "0", &flt).unwrap();
    assert_eq!(cat(&mut fs, &flt).unwrap(), "none\n");
    // The subsystem filter applies to each event that has the fields; the others show why.
    echo(&mut fs, "prev_pid == 1", "events/sched/filter").unwrap();
    assert_eq!(cat(&mut fs, &flt).unwrap(), "prev_pid == 1\n");
    assert_eq!(
        cat(&mut fs, &format!("{WAKEUP}/filter")).unwrap(),
        "prev_pid == 1\n^\nparse_error: Couldn't find or set field in one of a subsystem's events\n\n"
    );
    assert!(
        cat(&mut fs, "events/sched/filter")
            .unwrap()
            .starts_with("### global filter ###\n")
    );
    echo(&mut fs, "0", "events/sched/filter").unwrap();
    assert_eq!(cat(&mut fs, &format!("{WAKEUP}/filter")).unwrap(), "none\n");
}

#[test]
fn instances_keep_their_own_event_state() {
    let mut fs = tracefs_with_sched();
    fs.mkdir("instances/foo").unwrap();
    echo(&mut fs, "sched:*", "set_event").unwrap();
    echo(&mut fs, "traceon", &format!("{SWITCH}/trigger")).unwrap();
    assert_eq!(cat(&mut fs, "instances/foo/set_event").unwrap(), "");
    assert_eq!(
        cat(&mut fs, &format!("instances/foo/{SWITCH}/enable")).unwrap(),
        "0\n"
    );
    assert!(
        cat(&mut fs, &format!("instances/foo/{SWITCH}/trigger"))
            .unwrap()
            .starts_with("# Available")
    );
    echo(&mut fs, "sched:sched_wakeup", "instances/foo/set_event").unwrap();
    assert_eq!(
        cat(&mut fs, "instances/foo/set_event").unwrap(),
        "sched:sched_wakeup\n"
    );
    assert_eq!(
        cat(&mut fs, "set_event").unwrap(),
        "sched:sched_switch\nsched:sched_wakeup\n"
    );
    // available_events is top level only.
    assert_eq!(
        fs.read_to_end("instances/foo/available_events")
            .unwrap_err(),
        Errno::ENOENT
    );
    // An instance made after registration has the events too.
    fs.mkdir("instances/bar").unwrap();
    assert!(fs.stat(&format!("instances/bar/{WAKEUP}/format")).is_ok());
}

#[test]
fn registry_rules() {
    let mut fs = tracefs_with_sched();
    assert_eq!(fs.register_event(SCHED_SWITCH), Err(Errno::EEXIST));
    let mut other = SCHED_WAKEUP;
    other.name = "sched_wakeup_new";
    assert_eq!(fs.register_event(other), Err(Errno::EEXIST)); // id 312 taken
    other.id = 311;
    fs.register_event(other).unwrap();
    assert_eq!(
        cat(&mut fs, "available_events").unwrap(),
        "sched:sched_switch\nsched:sched_wakeup\nsched:sched_wakeup_new\n"
    );
    for (sys, name, id) in [
        ("ftrace", "x", 400),
        ("a/b", "x", 401),
        ("a", "x y", 402),
        ("", "x", 403),
        ("a", "x", 5),
    ] {
        let mut e = SCHED_WAKEUP;
        e.system = sys;
        e.name = name;
        e.id = id;
        assert_eq!(fs.register_event(e), Err(Errno::EINVAL), "{sys}:{name}");
    }
    // An enabled (or open) event cannot go.
    echo(&mut fs, "sched:sched_wakeup_new", "set_event").unwrap();
    assert_eq!(
        fs.unregister_event("sched", "sched_wakeup_new"),
        Err(Errno::EBUSY)
    );
    echo(&mut fs, "!sched:sched_wakeup_new", "set_event").unwrap();
    let fh = fs
        .open("events/sched/sched_wakeup_new/id", OpenFlags::READ)
        .unwrap();
    assert_eq!(
        fs.unregister_event("sched", "sched_wakeup_new"),
        Err(Errno::EBUSY)
    );
    fs.release(fh).unwrap();
    fs.unregister_event("sched", "sched_wakeup_new").unwrap();
    assert_eq!(
        fs.stat("events/sched/sched_wakeup_new").unwrap_err(),
        Errno::ENOENT
    );
    assert_eq!(
        fs.unregister_event("sched", "sched_wakeup_new"),
        Err(Errno::ENOENT)
    );
}

/// One line of the capture's `trace` turned back into the entry the kernel recorded: the
/// context gives pid, CPU, flags, preempt count and time; the body gives the fields.
fn entry_from_line(line: &str) -> (u32, u64, i32, String, Vec<u8>) {
    use ftrace_core::event::TraceFlags;
    let (task, rest) = line.split_once(" [").unwrap();
    let (comm, pid) = task.trim().rsplit_once('-').unwrap();
    let pid: i32 = pid.parse().unwrap();
    let (cpu, rest) = rest.split_once("] ").unwrap();
    let cpu: u32 = cpu.parse().unwrap();
    let (flags, rest) = rest.split_once(' ').unwrap();
    let (ts, rest) = rest.trim_start().split_once(": ").unwrap();
    let (secs, usecs) = ts.split_once('.').unwrap();
    let ts = secs.parse::<u64>().unwrap() * 1_000_000_000 + usecs.parse::<u64>().unwrap() * 1000;
    let f: Vec<char> = flags.chars().collect();
    let mut tf = TraceFlags::empty();
    if f[0] == 'd' {
        tf |= TraceFlags::IRQS_OFF;
    }
    match f[1] {
        'N' => tf |= TraceFlags::NEED_RESCHED | TraceFlags::PREEMPT_RESCHED,
        'n' => tf |= TraceFlags::NEED_RESCHED,
        'p' => tf |= TraceFlags::PREEMPT_RESCHED,
        _ => {}
    }
    match f[2] {
        'H' => tf |= TraceFlags::HARDIRQ | TraceFlags::SOFTIRQ,
        'h' => tf |= TraceFlags::HARDIRQ,
        's' => tf |= TraceFlags::SOFTIRQ,
        _ => {}
    }
    let nib = |c: char| c.to_digit(16).unwrap_or(0) as u8;
    let pc = nib(f[3]) | (nib(f[4]) << 4);
    let (name, body) = rest.split_once(": ").unwrap();
    let format = [SCHED_SWITCH, SCHED_WAKEUP]
        .into_iter()
        .find(|e| e.name == name)
        .unwrap();
    let mut d = vec![0u8; format.record_size() as usize];
    d[0..2].copy_from_slice(&format.id.to_le_bytes());
    d[2] = tf.bits();
    d[3] = pc;
    d[4..8].copy_from_slice(&pid.to_le_bytes());
    // `prev_comm=swapper/1 ... ==> next_comm=...`: key=value pairs (values have no blanks).
    for kv in body.split(' ').filter(|w| *w != "==>") {
        let (k, v) = kv.split_once('=').unwrap();
        let field = format.field(k).unwrap();
        let off = field.offset as usize;
        let bytes: Vec<u8> = if k.ends_with("comm") {
            v.as_bytes().to_vec()
        } else if k == "prev_state" {
            let mut state = 0i64;
            for letter in v.trim_end_matches('+').split('|') {
                if let Some((mask, _)) = ftrace_core::format::sched::PREV_STATE_LETTERS
                    .iter()
                    .find(|(_, l)| *l == letter)
                {
                    state |= *mask as i64;
                }
            }
            if v.ends_with('+') {
                state |= ftrace_core::format::sched::TASK_REPORT_MAX as i64;
            }
            state.to_le_bytes().to_vec()
        } else {
            v.parse::<i32>().unwrap().to_le_bytes().to_vec()
        };
        d[off..off + bytes.len()].copy_from_slice(&bytes);
    }
    (cpu, ts, pid, comm.to_owned(), d)
}

/// `10-events`: with `sched_switch` and `sched_wakeup` enabled through `set_event`, the
/// events the capture shows, recorded into the real ring buffers, read back through `trace`
/// (the real formatter, `ftrace_tracers::trace_event` for the event bodies) byte for byte.
#[test]
fn sched_events_trace_matches_linux() {
    let mut fs = tracefs_with_sched();
    echo(
        &mut fs,
        "sched:sched_switch sched:sched_wakeup",
        "set_event",
    )
    .unwrap();
    assert_eq!(
        cat(&mut fs, "set_event").unwrap(),
        golden("10-events/set_event.txt")
    );
    let linux = golden("10-events/trace.txt");
    let shared = fs.host().state(None);
    {
        let mut st = shared.borrow_mut();
        for line in linux.lines().filter(|l| !l.starts_with('#')) {
            let (cpu, ts, pid, comm, entry) = entry_from_line(line);
            if pid != 0 {
                st.comms.insert(pid, comm);
            }
            assert!(st.tracepoint(cpu, ts, &entry), "{line}");
        }
    }
    assert_eq!(cat(&mut fs, "trace").unwrap(), linux);
    // trace_pipe consumes the same lines.
    let body: String = linux
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(cat(&mut fs, "trace_pipe").unwrap(), body);

    // The backend records what the tree enabled, through the filter the tree passed it.
    echo(&mut fs, "0", "events/sched/sched_wakeup/enable").unwrap();
    echo(
        &mut fs,
        "next_pid == 18",
        "events/sched/sched_switch/filter",
    )
    .unwrap();
    let lines: Vec<&str> = linux.lines().filter(|l| !l.starts_with('#')).collect();
    let mut st = shared.borrow_mut();
    let (cpu, ts, _, _, wakeup) = entry_from_line(lines[2]);
    assert!(!st.tracepoint(cpu, ts + 1_000_000_000, &wakeup));
    let (cpu, ts, _, _, to_swapper) = entry_from_line(lines[0]);
    assert!(!st.tracepoint(cpu, ts + 1_000_000_000, &to_swapper));
    let (cpu, ts, _, _, to_rcu) = entry_from_line(lines[3]);
    assert!(to_rcu.len() == 64 && st.tracepoint(cpu, ts + 1_000_000_000, &to_rcu));
}

#[test]
fn hist_on_timestamps_sets_the_trace_clock() {
    let mut fs = tracefs_with_sched();
    assert!(cat(&mut fs, "trace_clock").unwrap().starts_with("[local]"));
    echo(
        &mut fs,
        "hist:keys=next_pid:ts=common_timestamp.usecs:clock=mono",
        &format!("{SWITCH}/trigger"),
    )
    .unwrap();
    assert!(cat(&mut fs, "trace_clock").unwrap().contains("[mono]"));
    assert_eq!(
        cat(&mut fs, &format!("{SWITCH}/trigger")).unwrap(),
        "hist:keys=next_pid:vals=hitcount:ts=common_timestamp.usecs:sort=hitcount:size=2048:clock=mono [active]\n"
    );
    // An unknown clock: the kernel's SET_CLOCK_FAIL, at the clock's name.
    fs.host_mut().now_ns = 1_000_000;
    assert_eq!(
        echo(
            &mut fs,
            "hist:keys=pid:vals=common_timestamp:clock=nosuch",
            &format!("{WAKEUP}/trigger"),
        ),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        cat(&mut fs, "error_log").unwrap(),
        format!(
            "[    0.001000] hist:sched:sched_wakeup: error: Couldn't set trace_clock\n  \
             Command: hist:keys=pid:vals=common_timestamp:clock=nosuch\n{}^\n",
            " ".repeat(11 + 42)
        )
    );
    assert!(cat(&mut fs, "trace_clock").unwrap().contains("[mono]"));
}

/// Soft mode is visible the kernel's way: a triggered event is armed (listed by `set_event`)
/// while its `enable` reads `0*`; an `enable_event` target cannot be unregistered.
#[test]
fn soft_mode_shows_in_set_event_and_pins_the_target() {
    let mut fs = tracefs_with_sched();
    echo(&mut fs, "traceon", &format!("{SWITCH}/trigger")).unwrap();
    assert_eq!(cat(&mut fs, "set_event").unwrap(), "sched:sched_switch\n");
    assert_eq!(cat(&mut fs, &format!("{SWITCH}/enable")).unwrap(), "0*\n");
    // A hard enable in soft mode shows `1*`; a hard disable only soft-disables it again.
    echo(&mut fs, "1", &format!("{SWITCH}/enable")).unwrap();
    assert_eq!(cat(&mut fs, &format!("{SWITCH}/enable")).unwrap(), "1*\n");
    echo(&mut fs, "", "set_event").unwrap();
    assert_eq!(cat(&mut fs, &format!("{SWITCH}/enable")).unwrap(), "0*\n");
    assert_eq!(cat(&mut fs, "set_event").unwrap(), "sched:sched_switch\n");
    echo(
        &mut fs,
        "enable_event:sched:sched_wakeup",
        &format!("{SWITCH}/trigger"),
    )
    .unwrap();
    assert_eq!(
        fs.unregister_event("sched", "sched_wakeup"),
        Err(Errno::EBUSY)
    );
    echo(
        &mut fs,
        "!enable_event:sched:sched_wakeup",
        &format!("{SWITCH}/trigger"),
    )
    .unwrap();
    fs.unregister_event("sched", "sched_wakeup").unwrap();
    assert_eq!(
        cat(&mut fs, "available_events").unwrap(),
        "sched:sched_switch\n"
    );
    // Its trigger is refused now that the target is gone.
    assert_eq!(
        echo(
            &mut fs,
            "enable_event:sched:sched_wakeup",
            &format!("{SWITCH}/trigger"),
        ),
        Err(Errno::EINVAL)
    );
}

/// A subsystem filter that fits none of its events still succeeds (Linux 6.12's
/// `process_system_preds`), and every event shows and logs why.
#[test]
fn subsystem_filter_that_fits_no_event() {
    let mut fs = tracefs_with_sched();
    fs.host_mut().now_ns = 5_000_000_000;
    echo(&mut fs, "nosuch == 1", "events/sched/filter").unwrap();
    let why = "nosuch == 1\n^\nparse_error: Couldn't find or set field in one of a subsystem's events\n\n";
    assert_eq!(cat(&mut fs, &format!("{SWITCH}/filter")).unwrap(), why);
    assert_eq!(cat(&mut fs, &format!("{WAKEUP}/filter")).unwrap(), why);
    let entry = "[    5.000000] event filter parse error: error: Couldn't find or set field in one of a subsystem's events\n  Command: nosuch == 1\n           ^\n";
    assert_eq!(cat(&mut fs, "error_log").unwrap(), entry.repeat(2));
}

/// The capture's sched events, as entries: `(cpu, ts, entry)`.
fn capture_entries() -> Vec<(u32, u64, Vec<u8>)> {
    golden("10-events/trace.txt")
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let (cpu, ts, _, _, e) = entry_from_line(l);
            (cpu, ts, e)
        })
        .collect()
}

/// How many events `trace` shows.
fn trace_events(fs: &mut ftrace_tracefs::Tracefs<common::ModelHost>) -> usize {
    cat(fs, "trace")
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .count()
}

/// `traceoff:1` on sched_switch, run by the backend through ftrace-tracefs's trigger runner:
/// the first sched_switch is recorded and stops the buffer (`traceoff` is a post trigger: it
/// runs after its event was written, as in Linux), `tracing_on` reads 0 (the backend's record
/// switch), the `trigger` file reads `traceoff:count=0`; after `echo 1 > tracing_on` the spent
/// trigger does nothing.
#[test]
fn traceoff_trigger_stops_the_buffer_and_reads_back_its_count() {
    let mut fs = tracefs_with_sched();
    echo(
        &mut fs,
        "sched:sched_switch sched:sched_wakeup",
        "set_event",
    )
    .unwrap();
    echo(&mut fs, "traceoff:1", &format!("{SWITCH}/trigger")).unwrap();
    assert_eq!(
        cat(&mut fs, &format!("{SWITCH}/trigger")).unwrap(),
        "traceoff:count=1\n"
    );
    let ev = capture_entries();
    let (wakeup, switches): (Vec<_>, Vec<_>) = ev
        .iter()
        .partition(|e| e.2[0..2] == SCHED_WAKEUP.id.to_le_bytes());
    let shared = fs.host().state(None);
    assert!(
        shared
            .borrow_mut()
            .tracepoint(wakeup[0].0, wakeup[0].1, &wakeup[0].2)
    );
    assert_eq!(cat(&mut fs, "tracing_on").unwrap(), "1\n");
    {
        let mut st = shared.borrow_mut();
        let (cpu, ts, e) = switches[0];
        assert!(st.tracepoint(*cpu, *ts, e), "the first switch is recorded");
        for (cpu, ts, e) in &switches[1..] {
            assert!(!st.tracepoint(*cpu, *ts, e));
        }
        assert!(!st.tracepoint(wakeup[0].0, wakeup[0].1 + 1, &wakeup[0].2));
    }
    assert_eq!(cat(&mut fs, "tracing_on").unwrap(), "0\n");
    assert_eq!(trace_events(&mut fs), 2);
    assert_eq!(
        cat(&mut fs, &format!("{SWITCH}/trigger")).unwrap(),
        "traceoff:count=0\n"
    );
    // writing 0 now changes nothing (already off); 1 turns the buffer back on for good
    echo(&mut fs, "0", "tracing_on").unwrap();
    echo(&mut fs, "1", "tracing_on").unwrap();
    {
        let mut st = shared.borrow_mut();
        for (cpu, ts, e) in &switches {
            assert!(st.tracepoint(*cpu, *ts + 1_000_000_000, e));
        }
    }
    assert_eq!(cat(&mut fs, "tracing_on").unwrap(), "1\n");
    assert_eq!(trace_events(&mut fs), 2 + switches.len());
    // an edit keeps the spent count: adding a trigger lists both, traceoff still at 0
    echo_append(&mut fs, "stacktrace:3", &format!("{SWITCH}/trigger")).unwrap();
    let t = cat(&mut fs, &format!("{SWITCH}/trigger")).unwrap();
    let mut lines: Vec<&str> = t.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines, ["stacktrace:count=3", "traceoff:count=0"]);
}

/// A conditional `traceoff` (`if next_pid == 18`) runs after its event is recorded, only for
/// the events its filter passes; an unlimited `traceon` on sched_wakeup turns it back on.
#[test]
fn filtered_triggers_run_after_the_record() {
    let mut fs = tracefs_with_sched();
    echo(
        &mut fs,
        "sched:sched_switch sched:sched_wakeup",
        "set_event",
    )
    .unwrap();
    echo(
        &mut fs,
        "traceoff if next_pid == 18",
        &format!("{SWITCH}/trigger"),
    )
    .unwrap();
    echo(&mut fs, "traceon", &format!("{WAKEUP}/trigger")).unwrap();
    let ev = capture_entries();
    let shared = fs.host().state(None);
    let mut st = shared.borrow_mut();
    // switch, switch, wakeup (pid 18), then the switch to 18: recorded, then tracing stops
    for (c, t, e) in &ev[..4] {
        assert!(st.tracepoint(*c, *t, e));
    }
    let (c, t, e) = &ev[0];
    assert!(!st.tracepoint(*c, *t + 1, e));
    drop(st);
    assert_eq!(trace_events(&mut fs), 4);
    assert_eq!(cat(&mut fs, "tracing_on").unwrap(), "0\n");
    // the wakeup's traceon is unconditional: it runs before the wakeup is reserved
    let wakeup = &ev[2];
    assert!(
        shared
            .borrow_mut()
            .tracepoint(wakeup.0, wakeup.1 + 1, &wakeup.2)
    );
    assert_eq!(cat(&mut fs, "tracing_on").unwrap(), "1\n");
    assert_eq!(
        cat(&mut fs, &format!("{SWITCH}/trigger")).unwrap(),
        "traceoff:unlimited if next_pid == 18\n"
    );
}

/// `enable_event:sched:sched_wakeup:1` on sched_switch: the wakeup is soft-disabled (not
/// recorded) until the first switch enables it; the count reads back spent.
#[test]
fn enable_event_trigger_turns_its_target_on_once() {
    let mut fs = tracefs_with_sched();
    echo(&mut fs, "1", &format!("{SWITCH}/enable")).unwrap();
    echo(
        &mut fs,
        "enable_event:sched:sched_wakeup:1",
        &format!("{SWITCH}/trigger"),
    )
    .unwrap();
    let ev = capture_entries();
    let wakeup = &ev[2];
    let switch = &ev[0];
    let shared = fs.host().state(None);
    assert_eq!(cat(&mut fs, &format!("{WAKEUP}/enable")).unwrap(), "0*\n");
    let mut st = shared.borrow_mut();
    assert!(!st.tracepoint(wakeup.0, wakeup.1, &wakeup.2));
    assert!(st.tracepoint(switch.0, switch.1, &switch.2));
    assert!(st.tracepoint(wakeup.0, wakeup.1 + 1, &wakeup.2));
    drop(st);
    assert_eq!(
        cat(&mut fs, &format!("{SWITCH}/trigger")).unwrap(),
        "enable_event:sched:sched_wakeup:count=0\n"
    );
    // the target reads as the trigger left it: armed, recording, still in soft mode
    assert_eq!(cat(&mut fs, &format!("{WAKEUP}/enable")).unwrap(), "1*\n");
    // removing the trigger leaves it enabled (`__ftrace_event_enable_disable` only disarms
    // a soft-mode event that is soft-disabled), as Linux does
    echo(
        &mut fs,
        "!enable_event:sched:sched_wakeup",
        &format!("{SWITCH}/trigger"),
    )
    .unwrap();
    assert_eq!(cat(&mut fs, &format!("{WAKEUP}/enable")).unwrap(), "1\n");
    assert!(
        shared
            .borrow_mut()
            .tracepoint(wakeup.0, wakeup.1 + 2, &wakeup.2)
    );
}

/// `f:enable_event:SYS:EV` in `set_ftrace_filter` holds the event in soft mode while the
/// command exists (`0*`: armed, soft-disabled), and lets it go when the last command naming it
/// is removed, as the kernel's `event_enable_func` / `event_enable_free` do.
#[test]
fn enable_event_function_command_holds_its_event_in_soft_mode() {
    let mut fs = tracefs_with_sched();
    let enable = "events/sched/sched_switch/enable";
    let told = |fs: &mut ftrace_tracefs::Tracefs<common::ModelHost>| {
        fs.host()
            .state(None)
            .borrow()
            .event_states
            .get(&SCHED_SWITCH.id)
            .copied()
    };
    echo(
        &mut fs,
        "vfs_read:enable_event:sched:sched_switch",
        "set_ftrace_filter",
    )
    .unwrap();
    assert_eq!(cat(&mut fs, enable).unwrap(), "0*\n");
    assert_eq!(
        told(&mut fs),
        Some(EventState {
            enabled: true,
            soft_disabled: true,
            triggers: false
        })
    );
    // A second command on the same event, then the first removed: still held.
    echo_append(
        &mut fs,
        "vfs_read:disable_event:sched:sched_switch:2",
        "set_ftrace_filter",
    )
    .unwrap();
    echo_append(
        &mut fs,
        "!vfs_read:enable_event:sched:sched_switch",
        "set_ftrace_filter",
    )
    .unwrap();
    assert_eq!(cat(&mut fs, enable).unwrap(), "0*\n");
    // The hard switch inside soft mode, then the last command gone: the event is left as
    // the hard switch says (on).
    echo(&mut fs, "1", enable).unwrap();
    assert_eq!(cat(&mut fs, enable).unwrap(), "1*\n");
    echo_append(
        &mut fs,
        "!vfs_read:disable_event:sched:sched_switch:2",
        "set_ftrace_filter",
    )
    .unwrap();
    assert_eq!(cat(&mut fs, enable).unwrap(), "1\n");
    echo(&mut fs, "0", enable).unwrap();
    assert_eq!(cat(&mut fs, enable).unwrap(), "0\n");
    assert_eq!(told(&mut fs).map(|s| s.enabled), Some(false));
    // An event that does not exist is refused and holds nothing.
    assert_eq!(
        echo(
            &mut fs,
            "vfs_read:enable_event:sched:nope",
            "set_ftrace_filter"
        ),
        Err(Errno::EINVAL)
    );
    assert_eq!(cat(&mut fs, enable).unwrap(), "0\n");
}
