//! The session's trace-event part: the kernel's own tracepoints, jump labels (NOPs while off,
//! `jmp` exactly while their event is enabled: the `jump_labels` builtin reads the sites),
//! (`irq:irq_handler_entry` /
//! `irq_handler_exit` around its IPI handlers, `irq_vectors:local_timer_entry` / `_exit`
//! around its timer tick, `bm_shell:shell_command` / `_exit`, `bm_workload:workload_round`)
//! through `events/`: listed, their `format` files as Linux 6.12 prints the same events,
//! enabled by `enable` and `set_event`, filtered (`irq > 240`, `round > 0`), triggered
//! (`traceoff if ...`, `snapshot:1 if ...` swapping the buffers from the tracepoint,
//! `enable_event:...`), a refused filter (EINVAL, the file and
//! `error_log` as Linux show it), `trace` read back line by line, interleaved with function
//! entries when `function` traces, and an event enabled in an instance only.

use super::{Vm, check, echo_ok, function_header, run_workload};

/// Every event the kernel registers, as `available_events` lists them (`system:name`).
const EVENTS: [&str; 7] = [
    "irq:irq_handler_entry",
    "irq:irq_handler_exit",
    "irq_vectors:local_timer_entry",
    "irq_vectors:local_timer_exit",
    "bm_shell:shell_command",
    "bm_shell:shell_command_exit",
    "bm_workload:workload_round",
];

/// The common fields of every event's `format` file (Linux 6.12).
const COMMON: &str = "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
    \tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
    \tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
    \tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n";

/// The `format` files of the events Linux also has: its field layouts and print formats
/// (`include/trace/events/irq.h`, `arch/x86/include/asm/trace/irq_vectors.h`), our ids.
fn linux_format(name: &str, id: u16) -> Option<String> {
    let (fields, print) = match name {
        "irq_handler_entry" => (
            "\tfield:int irq;\toffset:8;\tsize:4;\tsigned:1;\n\
             \tfield:__data_loc char[] name;\toffset:12;\tsize:4;\tsigned:0;\n",
            "\"irq=%d name=%s\", REC->irq, __get_str(name)",
        ),
        "irq_handler_exit" => (
            "\tfield:int irq;\toffset:8;\tsize:4;\tsigned:1;\n\
             \tfield:int ret;\toffset:12;\tsize:4;\tsigned:1;\n",
            "\"irq=%d ret=%s\", REC->irq, REC->ret ? \"handled\" : \"unhandled\"",
        ),
        "local_timer_entry" | "local_timer_exit" => (
            "\tfield:int vector;\toffset:8;\tsize:4;\tsigned:1;\n",
            "\"vector=%d\", REC->vector",
        ),
        _ => return None,
    };
    Some(format!(
        "name: {name}\nID: {id}\nformat:\n{COMMON}{fields}\nprint fmt: {print}\n"
    ))
}

/// A trace's lines after the header, as (CPU, what follows the time stamp), checking the
/// header against Linux's and the time stamps' order.
fn lines(trace: &str, tracer: &str) -> Result<Vec<(u32, String)>, String> {
    let (_, events) = function_header(trace, tracer)?;
    let mut out = Vec::new();
    let mut last = 0.0f64;
    for line in events {
        // "          <idle>-0       [000] d.... 12.345678: local_timer_entry: vector=236"
        let bad = || format!("malformed trace line {line:?}");
        let rest = line
            .strip_prefix("          <idle>-0       [")
            .ok_or_else(bad)?;
        let (cpu, rest) = rest.split_once("] ").ok_or_else(bad)?;
        let (_flags, rest) = rest.split_once(' ').ok_or_else(bad)?;
        let (ts, what) = rest.trim_start().split_once(": ").ok_or_else(bad)?;
        let ts: f64 = ts.parse().map_err(|_| bad())?;
        check(ts >= last, || {
            format!("time stamps go backwards at {line:?}")
        })?;
        last = ts;
        out.push((cpu.parse().map_err(|_| bad())?, what.to_string()));
    }
    Ok(out)
}

/// What `bm_outer(i)` returns (the kernel's workload, computed here).
fn outer(i: u64) -> u64 {
    let middle = |x: u64| (x ^ 0x5a).wrapping_mul(3);
    middle(i)
        .wrapping_add(middle(i + 1))
        .wrapping_add(i.wrapping_add(7))
}

fn round_line(i: u64) -> String {
    format!("workload_round: round={i} value={}", outer(i))
}

/// The kernel's `jump_labels` builtin: its tracepoint sites and how many read `jmp`; every
/// site must hold a NOP or a `jmp`.
fn jump_labels(vm: &mut Vm) -> Result<(u32, u32), String> {
    let out = vm.command("jump_labels")?;
    let parsed = out
        .strip_prefix("jump_labels: ")
        .and_then(|r| r.strip_suffix(" neither\n"))
        .and_then(|r| {
            let (total, r) = r.split_once(" sites, ")?;
            let (on, other) = r.split_once(" jmp, ")?;
            Some((
                total.parse().ok()?,
                on.parse().ok()?,
                other.parse::<u32>().ok()?,
            ))
        });
    match parsed {
        Some((total, on, 0)) => Ok((total, on)),
        _ => Err(format!("jump_labels: {out:?}")),
    }
}

/// Checks that exactly `on` tracepoint sites are patched to `jmp`.
fn expect_jmp_sites(vm: &mut Vm, on: u32, when: &str) -> Result<(), String> {
    let (total, got) = jump_labels(vm)?;
    check(got == on, || {
        format!("{when}: {got} of {total} tracepoint sites read jmp, want {on}")
    })
}

/// Runs the event checks; starts and ends with tracer `nop`, no event enabled and the `bm_*`
/// filter. Returns the writes meant to fail.
pub(super) fn event_files(vm: &mut Vm) -> Result<u32, String> {
    let avail = vm.command("cat available_events")?;
    for e in EVENTS {
        check(avail.lines().any(|l| l == e), || {
            format!("available_events lacks {e}: {avail:?}")
        })?;
    }
    for e in EVENTS {
        let (sys, name) = e.split_once(':').expect("system:name");
        let dir = format!("events/{sys}/{name}");
        let id: u16 = vm
            .command(&format!("cat {dir}/id"))?
            .trim()
            .parse()
            .map_err(|_| format!("{dir}/id is not a number"))?;
        let format = vm.command(&format!("cat {dir}/format"))?;
        let head = format!("name: {name}\nID: {id}\nformat:\n{COMMON}");
        check(format.starts_with(&head), || {
            format!("{dir}/format:\n{format}")
        })?;
        if let Some(want) = linux_format(name, id) {
            check(format == want, || {
                format!("{dir}/format differs from Linux's layout:\n{format}want:\n{want}")
            })?;
        }
        let enable = vm.command(&format!("cat {dir}/enable"))?;
        check(enable == "0\n", || {
            format!("{dir}/enable at boot: {enable:?}")
        })?;
    }

    // Every call site is a jump label: one per `trace_*` call in the kernel, all NOPs while
    // their events are off.
    let (total, on) = jump_labels(vm)?;
    check(total >= EVENTS.len() as u32 && on == 0, || {
        format!("jump labels at boot: {total} sites, {on} jmp")
    })?;

    // The timer tick: `ticks 5` takes five local timer interrupts on CPU 0, and only the
    // enabled entry event records them; its one site reads jmp while it is enabled.
    echo_ok(vm, "echo 1 > events/irq_vectors/local_timer_entry/enable")?;
    expect_jmp_sites(vm, 1, "local_timer_entry enabled")?;
    echo_ok(vm, "echo > trace")?;
    let ticks = vm.command("ticks 5")?;
    check(ticks == "ticks: 5 timer ticks\n", || {
        format!("ticks: {ticks:?}")
    })?;
    let trace = vm.command("cat trace")?;
    let want: Vec<(u32, String)> = (0..5)
        .map(|_| (0, "local_timer_entry: vector=236".to_string()))
        .collect();
    let got = lines(&trace, "nop")?;
    check(got == want, || format!("timer ticks:\n{trace}"))?;
    echo_ok(vm, "echo 0 > events/irq_vectors/local_timer_entry/enable")?;
    expect_jmp_sites(vm, 0, "local_timer_entry disabled")?;
    echo_ok(vm, "echo > trace")?;
    vm.command("ticks 2")?;
    let trace = vm.command("cat trace")?;
    check(lines(&trace, "nop")?.is_empty(), || {
        format!("a disabled event recorded:\n{trace}")
    })?;

    // set_event with a glob: both irq events; a job posted to CPU 1 wakes it with an IPI,
    // whose handler is traced there.
    echo_ok(vm, "echo 'irq:*' > set_event")?;
    let set = vm.command("cat set_event")?;
    check(
        set == "irq:irq_handler_entry\nirq:irq_handler_exit\n",
        || format!("set_event: {set:?}"),
    )?;
    let sys = vm.command("cat events/irq/enable")?;
    check(sys == "1\n", || format!("events/irq/enable: {sys:?}"))?;
    expect_jmp_sites(vm, 2, "irq:* enabled")?;
    echo_ok(vm, "echo > trace")?;
    run_workload(vm, 1, " cpu=1")?;
    let trace = vm.command("cat trace")?;
    let wake = [
        (1, "irq_handler_entry: irq=241 name=wake".to_string()),
        (1, "irq_handler_exit: irq=241 ret=handled".to_string()),
    ];
    let got = lines(&trace, "nop")?;
    check(got == wake, || format!("the wake IPI on CPU 1:\n{trace}"))?;

    // A filter on one of them: `irq > 240` keeps the wake IPI's entry and drops the
    // sync_cores IPIs (vector 240) that patching sends; their exits stay (unfiltered).
    echo_ok(vm, "echo 'irq > 240' > events/irq/irq_handler_entry/filter")?;
    let flt = vm.command("cat events/irq/irq_handler_entry/filter")?;
    check(flt == "irq > 240\n", || format!("filter: {flt:?}"))?;
    echo_ok(vm, "echo > trace")?;
    echo_ok(vm, "echo function > current_tracer")?;
    echo_ok(vm, "echo nop > current_tracer")?;
    run_workload(vm, 1, " cpu=1")?;
    let trace = vm.command("cat trace")?;
    let got = lines(&trace, "nop")?;
    let entries: Vec<&str> = got
        .iter()
        .filter(|(_, l)| l.starts_with("irq_handler_entry"))
        .map(|(_, l)| l.as_str())
        .collect();
    let sync_exits = got
        .iter()
        .filter(|(c, l)| *c == 1 && l == "irq_handler_exit: irq=240 ret=handled")
        .count();
    check(
        entries == ["irq_handler_entry: irq=241 name=wake"]
            && sync_exits > 0
            && got.ends_with(&wake[1..]),
        || format!("filtered irq_handler_entry:\n{trace}"),
    )?;
    // A refused filter: EINVAL, the file shows where and why, error_log gains the kernel's
    // entry, and the event is unfiltered (Linux drops the old filter).
    let bad = vm.command("echo 'nosuch > 1' > events/irq/irq_handler_entry/filter")?;
    check(bad == "sh: write error: Invalid argument\n", || {
        format!("bad filter: {bad:?}")
    })?;
    let flt = vm.command("cat events/irq/irq_handler_entry/filter")?;
    // The field is found missing at the operator (column 7), as Linux points at it.
    check(
        flt == "nosuch > 1\n       ^\nparse_error: Field not found\n\n",
        || format!("filter after the refused write: {flt:?}"),
    )?;
    let log = vm.command("cat error_log")?;
    let tail: Vec<&str> = log.lines().rev().take(3).collect();
    check(
        tail.len() == 3
            && tail[2].ends_with("] event filter parse error: error: Field not found")
            && tail[1] == "  Command: nosuch > 1"
            && tail[0] == format!("{}^", " ".repeat(11 + 7)),
        || format!("error_log: {log:?}"),
    )?;
    echo_ok(vm, "echo 0 > events/irq/irq_handler_entry/filter")?;
    echo_ok(vm, "echo > set_event")?;
    let sys = vm.command("cat events/irq/enable")?;
    check(sys == "0\n", || format!("events/irq/enable after: {sys:?}"))?;

    // Events interleave with function entries in one trace: each round's calls, then its
    // workload_round event.
    echo_ok(vm, "echo 1 > events/bm_workload/workload_round/enable")?;
    echo_ok(vm, "echo function > current_tracer")?;
    echo_ok(vm, "echo > trace")?;
    run_workload(vm, 2, "")?;
    let trace = vm.command("cat trace")?;
    let mut want = vec![(0, "bm_workload <-".to_string())];
    for i in 0..2 {
        for call in [
            "bm_outer <-bm_workload",
            "bm_middle <-bm_outer",
            "bm_leaf <-bm_middle",
            "bm_middle <-bm_outer",
            "bm_leaf <-bm_middle",
        ] {
            want.push((0, call.to_string()));
        }
        want.push((0, round_line(i)));
    }
    let got = lines(&trace, "function")?;
    let same = got.len() == want.len()
        && got
            .iter()
            .zip(&want)
            .all(|((c, l), (wc, wl))| c == wc && l.starts_with(wl.as_str()));
    check(same, || format!("function entries and events:\n{trace}"))?;
    echo_ok(vm, "echo nop > current_tracer")?;

    // A filter on a field of the kernel's own event.
    echo_ok(
        vm,
        "echo 'round > 0' > events/bm_workload/workload_round/filter",
    )?;
    echo_ok(vm, "echo > trace")?;
    run_workload(vm, 3, "")?;
    let trace = vm.command("cat trace")?;
    let want: Vec<(u32, String)> = (1..3).map(|i| (0, round_line(i))).collect();
    check(lines(&trace, "nop")? == want, || {
        format!("round > 0:\n{trace}")
    })?;
    echo_ok(vm, "echo 0 > events/bm_workload/workload_round/filter")?;
    echo_ok(vm, "echo 0 > events/bm_workload/workload_round/enable")?;

    // traceoff with a filter: the record that matches is the last one written.
    let trig = "events/bm_workload/workload_round/trigger";
    echo_ok(vm, &format!("echo 'traceoff if round == 1' > {trig}"))?;
    let t = vm.command(&format!("cat {trig}"))?;
    check(t == "traceoff:unlimited if round == 1\n", || {
        format!("trigger: {t:?}")
    })?;
    // The trigger keeps the event armed, soft-disabled.
    let en = vm.command("cat events/bm_workload/workload_round/enable")?;
    check(en == "0*\n", || format!("enable with a trigger: {en:?}"))?;
    echo_ok(vm, "echo 1 > events/bm_workload/workload_round/enable")?;
    echo_ok(vm, "echo > trace")?;
    run_workload(vm, 3, "")?;
    let on = vm.command("cat tracing_on")?;
    check(on == "0\n", || format!("tracing_on after traceoff: {on:?}"))?;
    let trace = vm.command("cat trace")?;
    let want: Vec<(u32, String)> = (0..2).map(|i| (0, round_line(i))).collect();
    check(lines(&trace, "nop")? == want, || {
        format!("traceoff if round == 1:\n{trace}")
    })?;
    echo_ok(vm, &format!("echo '!traceoff if round == 1' >> {trig}"))?;
    echo_ok(vm, "echo 0 > events/bm_workload/workload_round/enable")?;
    echo_ok(vm, "echo 1 > tracing_on")?;

    // snapshot with a filter, from the tracepoint: adding it allocates the snapshot; the
    // record that matches goes into the buffer that becomes the snapshot, later rounds into
    // the one that takes its place.
    echo_ok(vm, &format!("echo 'snapshot:1 if round == 1' > {trig}"))?;
    let snap = vm.command("cat snapshot")?;
    check(snap.contains("# * Snapshot is allocated *\n"), || {
        format!("snapshot after adding the trigger:\n{snap}")
    })?;
    echo_ok(vm, "echo 1 > events/bm_workload/workload_round/enable")?;
    echo_ok(vm, "echo > trace")?;
    run_workload(vm, 3, "")?;
    let snap = vm.command("cat snapshot")?;
    let want: Vec<(u32, String)> = (0..2).map(|i| (0, round_line(i))).collect();
    check(lines(&snap, "nop")? == want, || {
        format!("snapshot if round == 1, the snapshot:\n{snap}")
    })?;
    let trace = vm.command("cat trace")?;
    check(lines(&trace, "nop")? == [(0, round_line(2))], || {
        format!("snapshot if round == 1, the trace:\n{trace}")
    })?;
    let t = vm.command(&format!("cat {trig}"))?;
    check(t == "snapshot:count=0 if round == 1\n", || {
        format!("trigger: {t:?}")
    })?;
    echo_ok(vm, &format!("echo '!snapshot' >> {trig}"))?;
    echo_ok(vm, "echo 0 > events/bm_workload/workload_round/enable")?;
    echo_ok(vm, "echo 0 > snapshot")?;

    // enable_event from the shell's own event: the next command line turns the tick's entry
    // event on; the shell's event itself records nothing (armed by its trigger only).
    let trig = "events/bm_shell/shell_command/trigger";
    echo_ok(
        vm,
        &format!("echo 'enable_event:irq_vectors:local_timer_entry:1' > {trig}"),
    )?;
    // This very command line fired the trigger: the target is on, still in soft mode.
    let en = vm.command("cat events/irq_vectors/local_timer_entry/enable")?;
    check(en == "1*\n", || format!("target after the trigger: {en:?}"))?;
    echo_ok(vm, "echo > trace")?;
    vm.command("ticks 3")?;
    let trace = vm.command("cat trace")?;
    let want: Vec<(u32, String)> = (0..3)
        .map(|_| (0, "local_timer_entry: vector=236".to_string()))
        .collect();
    check(lines(&trace, "nop")? == want, || {
        format!("enable_event from shell_command:\n{trace}")
    })?;
    let t = vm.command(&format!("cat {trig}"))?;
    check(
        t == "enable_event:irq_vectors:local_timer_entry:count=0\n",
        || format!("spent enable_event: {t:?}"),
    )?;
    echo_ok(
        vm,
        &format!("echo '!enable_event:irq_vectors:local_timer_entry' >> {trig}"),
    )?;
    echo_ok(vm, "echo 0 > events/irq_vectors/local_timer_entry/enable")?;

    // The shell's own events: the command line before it runs, its status after.
    echo_ok(vm, "echo 'bm_shell:*' > set_event")?;
    echo_ok(vm, "echo > trace")?;
    let bad = vm.command("cat no_such_file")?;
    check(!bad.is_empty(), || {
        "cat no_such_file printed nothing".into()
    })?;
    let trace = vm.command("cat trace")?;
    let want = [
        (0, "shell_command_exit: status=0".to_string()),
        (0, "shell_command: line=cat no_such_file".to_string()),
        (0, "shell_command_exit: status=1".to_string()),
        (0, "shell_command: line=cat trace".to_string()),
    ];
    check(lines(&trace, "nop")? == want, || {
        format!("bm_shell events:\n{trace}")
    })?;
    echo_ok(vm, "echo > set_event")?;
    echo_ok(vm, "echo > trace")?;
    expect_jmp_sites(vm, 0, "every event off again")?;

    // An instance has the events too: the tick recorded in its buffer only; the site is on
    // while the instance has the event and off again once it is removed.
    echo_ok(vm, "mkdir instances/ev")?;
    echo_ok(
        vm,
        "echo 1 > instances/ev/events/irq_vectors/local_timer_entry/enable",
    )?;
    expect_jmp_sites(vm, 1, "local_timer_entry enabled in an instance")?;
    vm.command("ticks 2")?;
    let mine = vm.command("cat instances/ev/trace")?;
    let want: Vec<(u32, String)> = (0..2)
        .map(|_| (0, "local_timer_entry: vector=236".to_string()))
        .collect();
    check(lines(&mine, "nop")? == want, || {
        format!("the instance's trace:\n{mine}")
    })?;
    let top = vm.command("cat trace")?;
    check(lines(&top, "nop")?.is_empty(), || {
        format!("the top level recorded the instance's event:\n{top}")
    })?;
    echo_ok(vm, "rmdir instances/ev")?;
    expect_jmp_sites(vm, 0, "the instance removed")?;
    // the refused filter and the missing file
    Ok(2)
}
