#!/usr/bin/env python3
"""Checks the rfl guest's output: the console log (status lines, dmesg) and the module's files
as the guest copied them to its second serial port. Prints one `ok - NAME` or
`FAIL - NAME: why` line per check (scripts/rfl-integration.sh counts them).

The trace text must be the kernel's function-tracer `trace` format, byte for byte in layout:
header, then `%16s-%-7d [%03d] <5 flags> %5lu.%06lu: func <-parent` lines.
"""
import argparse
import re
import sys

LINE = re.compile(
    r"^(?P<comm>.{16})-(?P<pid>\d+ *) \[(?P<cpu>\d{3})\] "
    r"(?P<flags>[.dDXb][.nNpP][.hHsSzZ][.0-9a-f][.0-9a-f]) "
    r"(?P<secs>[ \d]{5,})\.(?P<usecs>\d{6}): (?P<func>\S+) <-(?P<parent>\S+)$")
LOST = re.compile(r"^CPU:(\d+) \[LOST (\d+) EVENTS\]$")
# print_trace_fmt's annotation when the buffers had overruns (TRACE_FILE_ANNOTATE).
ANNOTATE = re.compile(r"^##### CPU (\d+) buffer started ####$")
ENTRIES = re.compile(r"^# entries-in-buffer/entries-written: (\d+)/(\d+)   #P:(\d+)$")
# The column legend of the function tracer with irq-info (print_func_help_header_irq).
LEGEND = """#                                _-----=> irqs-off/BH-disabled
#                               / _----=> need-resched
#                              | / _---=> hardirq/softirq
#                              || / _--=> preempt-depth
#                              ||| / _-=> migrate-disable
#                              |||| /     delay
#           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION
#              | |         |   |||||     |         |""".split("\n")


class Checks:
    def __init__(self):
        self.failed = 0

    def check(self, name, cond, why=""):
        if cond:
            print(f"ok - {name}")
        else:
            self.failed += 1
            print(f"FAIL - {name}: {why}")
        return cond


def sections(text):
    out, cur, buf = {}, None, []
    for line in text.split("\n"):
        if cur is None and line.startswith("RFL-FILE "):
            cur, buf = line[len("RFL-FILE "):].strip(), []
        elif cur is not None and line == "RFL-END":
            out[cur] = buf
            cur = None
        elif cur is not None:
            buf.append(line)
    return out


def parse_trace(lines):
    """(header lines, events as dicts, lost-event lines, lines that parse as nothing)"""
    header, events, lost, bad = [], [], [], []
    for ln in lines:
        if ANNOTATE.match(ln):
            continue
        if ln.startswith("#") and not events:
            header.append(ln)
            continue
        if not ln:
            continue
        m = LINE.match(ln)
        if m:
            d = m.groupdict()
            d["comm"] = d["comm"].strip()
            d["pidfield"] = d["pid"]
            d["pid"] = int(d["pid"])
            d["cpu"] = int(d["cpu"])
            d["ts"] = int(d["secs"]) * 1000000 + int(d["usecs"])
            d["line"] = ln
            events.append(d)
        elif LOST.match(ln):
            lost.append(ln)
        else:
            bad.append(ln)
    return header, events, lost, bad


def parse_stats(lines):
    """{cpu: {key: value}} from `cpu: N` blocks of `key: value` lines."""
    stats, cur = {}, None
    for ln in lines:
        if ":" not in ln:
            continue
        k, v = ln.split(":", 1)
        k, v = k.strip(), v.strip()
        if k == "cpu":
            cur = int(v)
            stats[cur] = {}
        elif cur is not None:
            stats[cur][k] = v
    return stats


def check_buffers(c, tag, files, trace_name, stats_name, filt):
    """The checks every pass shares: the trace text's format and header, and the per-CPU stats
    against the text. Returns (events, per_cpu, stats)."""
    header, events, lost, bad = parse_trace(files.get(trace_name, []))
    c.check(f"{tag}trace header: tracer line", header[:1] == ["# tracer: function"],
            repr(header[:1]))
    ent = [ENTRIES.match(h) for h in header]
    ent = [e for e in ent if e]
    c.check(f"{tag}trace header: entries line", len(ent) == 1, repr(header[:4]))
    c.check(f"{tag}trace header: column legend", header[-len(LEGEND):] == LEGEND,
            "legend differs:\n" + "\n".join(header[-len(LEGEND):]))
    c.check(f"{tag}trace lines parse as the kernel's function-trace format", events and not bad,
            f"{len(events)} events; unparsed: {bad[:5]}")
    c.check(f"{tag}no lost-events lines", not lost, repr(lost[:3]))
    if ent:
        e = ent[0]
        c.check(f"{tag}entries-in-buffer equals the events printed",
                int(e.group(1)) == len(events), f"header {e.group(1)}, printed {len(events)}")
        c.check(f"{tag}#P is the CPU count", e.group(3) == "2", e.group(3))
    widths = [ev for ev in events if len(ev["pidfield"]) < 7]
    c.check(f"{tag}pid column is %-7d", not widths, widths[:1] and widths[0]["line"])
    names = filt.split(",")
    if all(re.fullmatch(r"[A-Za-z0-9_.]+", n) for n in names):
        other = [ev["line"] for ev in events if ev["func"] not in names]
        c.check(f"{tag}only {filt} recorded (the filter)", not other, repr(other[:3]))
    # Every task that wrote an event still has its name in the module's comm table (a
    # direct-mapped table once lost pid 129's name to pid 1, the init shell: 129 % 128 == 1).
    nameless = [ev["line"] for ev in events if ev["comm"] == "<...>"]
    c.check(f"{tag}every line names its task (no '<...>')", not nameless, repr(nameless[:3]))
    hexparents = [ev["line"] for ev in events if ev["parent"].startswith("0x")]
    c.check(f"{tag}parents resolve to symbols", not hexparents, repr(hexparents[:3]))

    per_cpu = {}
    for ev in events:
        per_cpu.setdefault(ev["cpu"], []).append(ev)
    c.check(f"{tag}hits on CPU 0 and CPU 1",
            len(per_cpu.get(0, [])) > 0 and len(per_cpu.get(1, [])) > 0,
            {k: len(v) for k, v in per_cpu.items()})
    # Timestamps: each CPU's are non-decreasing and the merged text is in time order.
    for cpu, evs in sorted(per_cpu.items()):
        ts = [ev["ts"] for ev in evs]
        c.check(f"{tag}CPU {cpu} timestamps monotonic", ts == sorted(ts), "out of order")
    allts = [ev["ts"] for ev in events]
    c.check(f"{tag}trace merged in timestamp order", allts == sorted(allts), "not sorted")

    # Stats: per CPU, entries equal the lines printed for that CPU; the header's totals are
    # their sums; every callback hit is accounted for.
    stats = parse_stats(files.get(stats_name, []))
    c.check(f"{tag}stats for both CPUs", sorted(stats) == [0, 1], repr(sorted(stats)))
    tot_entries = tot_written = 0
    for cpu in sorted(stats):
        s = stats[cpu]
        try:
            entries = int(s["entries"])
            overrun = int(s["overrun"])
            commit_overrun = int(s["commit overrun"])
            dropped = int(s["dropped events"])
            read = int(s["read events"])
            calls = int(s["calls"])
            hits = int(s["hits"])
            recursion = int(s["recursion"])
            stopped = int(s["stopped"])
            refused = int(s["refused"])
        except (KeyError, ValueError) as e:
            c.check(f"{tag}CPU {cpu} stats fields", False, f"{e}: {s}")
            continue
        s["_int"] = dict(entries=entries, overrun=overrun, hits=hits)
        tot_entries += entries
        tot_written += entries + overrun
        c.check(f"{tag}CPU {cpu} stats entries == its trace lines",
                entries == len(per_cpu.get(cpu, [])),
                f"stats {entries}, lines {len(per_cpu.get(cpu, []))}")
        # Every call the dispatcher delivered is accounted for: recorded (still there,
        # overwritten or read), or not recorded because of the tracer's recursion bit, because
        # a reader had stopped recording, or because the ring buffer refused it. Nothing here
        # recurses, so the dispatcher delivered every kernel callback.
        c.check(f"{tag}CPU {cpu} dispatcher delivered every call (calls == hits)",
                calls == hits, f"calls {calls}, hits {hits}")
        c.check(f"{tag}CPU {cpu} hits == entries + overrun + read + recursion + stopped + refused",
                hits == entries + overrun + read + recursion + stopped + refused,
                f"hits {hits} vs {entries}+{overrun}+{read}+{recursion}+{stopped}+{refused}")
        c.check(f"{tag}CPU {cpu} refused == dropped + commit overrun",
                refused == dropped + commit_overrun,
                f"refused {refused}, dropped {dropped}, commit overrun {commit_overrun}")
        c.check(f"{tag}CPU {cpu} bytes > 0 when entries > 0",
                entries == 0 or int(s.get("bytes", 0)) > 0, repr(s))
    if ent and stats:
        c.check(f"{tag}header entries == sum of per-CPU entries",
                int(ent[0].group(1)) == tot_entries, f"{ent[0].group(1)} vs {tot_entries}")
        c.check(f"{tag}header written == sum of per-CPU entries + overrun",
                int(ent[0].group(2)) == tot_written, f"{ent[0].group(2)} vs {tot_written}")
    return header, events, per_cpu, stats


def tasks(status, what):
    out = []
    for s in status:
        w = re.match(what + r" cpu=(\d+) pid=(\d+)$", s)
        if w:
            out.append((int(w.group(1)), int(w.group(2))))
    return out


C_DEFAULT = "vfs_read,update_process_times,run_timer_softirq"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--console", required=True)
    ap.add_argument("--files", required=True)
    ap.add_argument("--filter", default="vfs_read")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--flood", type=int, default=3000)
    ap.add_argument("--cfilter", default=C_DEFAULT)
    ap.add_argument("--stats-reads", type=int, default=100)
    ap.add_argument("--expect-wrong", action="store_true",
                    help="expect the workload's events under a wrong comm: must fail")
    a = ap.parse_args()
    c = Checks()
    console = open(a.console, errors="replace").read()
    files = sections(open(a.files, errors="replace").read())
    status = [ln[len("RFL: "):] for ln in console.split("\n") if ln.startswith("RFL: ")]

    m = [s for s in status if s.startswith("kernel ")]
    c.check("guest runs with 2 CPUs", m and m[0].endswith("cpus 2"), str(m))

    c.check("a filter matching no function makes insmod fail", "bad-filter insmod refused" in status,
            repr([s for s in status if s.startswith("bad-filter insmod")]))
    c.check("the failed insmod leaves nothing patched and no debugfs dir",
            "bad-filter leftovers: 0 patched, 0 dirs" in status,
            repr([s for s in status if s.startswith("bad-filter leftovers")]))

    # Pass 1: the workload in a roomy buffer.
    c.check("insmod ftrace_rs", "insmod ok" in status, "no 'insmod ok'")
    c.check("trace file read", "read ok" in status and "trace" in files, "no trace output")
    workloads = tasks(status, "workload")
    c.check("workload ran on both CPUs", len(workloads) == 2 * a.rounds,
            f"{len(workloads)} workload lines, want {2 * a.rounds}")
    up = {}
    for s in status:
        u = re.match(r"uptime-(before|after) ([\d.]+)$", s)
        if u:
            up[u.group(1)] = float(u.group(2))
    header, events, per_cpu, stats = check_buffers(c, "", files, "trace", "stats", a.filter)
    for cpu in sorted(stats):
        st = stats[cpu].get("_int")
        if st:
            c.check(f"CPU {cpu} nothing overwritten in the roomy buffer", st["overrun"] == 0,
                    repr(st))

    # The workload's reads: every dd (known pid, pinned CPU) has its vfs_read lines, under its
    # own comm, on its CPU, in plain syscall context (no irq/softirq/preempt flags).
    want_comm = "cat" if a.expect_wrong else "dd"
    if a.expect_wrong:
        print("# RFL_EXPECT_WRONG: expecting the workload under comm 'cat' (wrong on purpose)")
    missing, wrong_cpu, flags = [], [], []
    for cpu, pid in workloads:
        mine = [ev for ev in events if ev["pid"] == pid]
        if not [ev for ev in mine if ev["comm"] == want_comm and ev["func"] == a.filter]:
            missing.append((cpu, pid, [ev["line"] for ev in mine][:2]))
        wrong_cpu += [ev["line"] for ev in mine if ev["cpu"] != cpu]
        # (need-resched, the second column, may be set: a tick may mark dd for preemption.)
        flags += [ev["line"] for ev in mine if ev["flags"][0] + ev["flags"][2:] != "...."]
    if a.filter == "vfs_read" or a.expect_wrong:
        c.check(f"every workload pid has {a.filter} lines as '{want_comm}-<pid>'", not missing,
                f"{len(missing)} of {len(workloads)}: {missing[:2]}")
    c.check("workload events on the CPU the task was pinned to", not wrong_cpu, wrong_cpu[:2])
    c.check("workload events in task context, irqs and preemption on ('.?...')", not flags,
            flags[:2])
    if a.filter == "vfs_read":
        p = [ev["line"] for ev in events if ev["pid"] in {w[1] for w in workloads}
             and ev["parent"] != "ksys_read"]
        c.check("dd's vfs_read is called from ksys_read", not p, p[:2])
    # The workload's stamps span no more than the guest's uptime around it (the trace clock
    # is sched_clock, which also counts the firmware's time: compare spans, not values).
    wl = [ev["ts"] for ev in events if ev["pid"] in {w[1] for w in workloads}]
    if "before" in up and "after" in up and wl:
        span, window = max(wl) - min(wl), (up["after"] - up["before"] + 0.02) * 1e6
        c.check("workload timestamps span at most the guest's uptime around it",
                0 < span <= window, f"span {span} us, uptime window {window:.0f} us")

    # The trace file does not consume: a second read starts with the same events.
    _, events2, _, _ = parse_trace(files.get("trace2", []))
    c.check("re-reading trace shows the same events first",
            bool(events) and [e["line"] for e in events2[:len(events)]] == [e["line"] for e in events],
            f"{len(events2)} events on re-read vs {len(events)}")
    c.check("rmmod ftrace_rs", "rmmod ok" in status, "no 'rmmod ok'")
    c.check("debugfs files removed on unload", "debugfs dir removed" in status, "still present")
    ef = [x for x in status if x.startswith("enabled_functions loaded: ")]
    # "vfs_read (1) tramp: ... (rfl_rs_ftrace_callback+0x0/0x.. [ftrace_rs])
    # ->rfl_rs_ftrace_callback+...": patched to a trampoline that calls our callback directly
    # (no ftrace_ops_assist_func: the ops has no FTRACE_OPS_FL_RECURSION).
    cb = r"rfl_rs_ftrace_callback\+0x0/0x[0-9a-f]+ \[ftrace_rs\]"
    c.check("while loaded, the kernel calls our callback directly from the filtered function",
            bool(ef) and re.search(r"\b" + re.escape(a.filter.split(",")[0]) + r" \(1\) .*\("
                                   + cb + r"\) ->" + cb, ef[0]) is not None, repr(ef[:1]))
    c.check("after unload, no function is patched any more (enabled_functions empty)",
            "enabled_functions unloaded: 0 lines" in status,
            repr([x for x in status if x.startswith("enabled_functions unloaded")]))

    # Pass 2: 2 pages per CPU, overwritten many times by a flood of 1-byte reads.
    c.check("flood: insmod with pages_per_cpu=2", "flood insmod ok" in status, "no 'flood insmod ok'")
    c.check("flood: trace file read", "flood read ok" in status and "flood-trace" in files,
            "no flood trace")
    _, fevents, fper_cpu, fstats = check_buffers(c, "flood: ", files, "flood-trace", "flood-stats",
                                              a.filter)
    floods = tasks(status, "flood")
    for cpu in sorted(fstats):
        st = fstats[cpu].get("_int")
        if not st:
            continue
        c.check(f"flood: CPU {cpu} buffer overwritten (overrun > 0)", st["overrun"] > 0, repr(st))
        c.check(f"flood: CPU {cpu} hits cover its two floods", st["hits"] >= 2 * a.flood, repr(st))
        mine = [pid for fc, pid in floods if fc == cpu]
        kept = [ev for ev in fper_cpu.get(cpu, []) if ev["pid"] in mine]
        c.check(f"flood: CPU {cpu} keeps the newest events (its flood task's, as 'dd')",
                len(kept) > len(fper_cpu.get(cpu, [])) // 2
                and all(ev["comm"] == "dd" for ev in kept),
                f"{len(kept)} of {len(fper_cpu.get(cpu, []))}")
    c.check("flood: trace read three times while the floods ran",
            "flood concurrent read FAILED" not in status, "a concurrent read failed")
    stopped = {cpu: fstats[cpu].get("stopped") for cpu in sorted(fstats)}
    print(f"# flood: calls dropped while a reader had trace open, per CPU: {stopped}")
    c.check("flood: rmmod ftrace_rs", "flood rmmod ok" in status, "no 'flood rmmod ok'")

    # Pass 3: the kernel's own function tracer recorded alongside the module, with the same
    # filter (the workload's vfs_read, plus functions of the periodic tick in hard-irq and
    # softirq context). Its trace file has the same header, and every one of its lines is in
    # ours: same task, pid, CPU, flags, function and caller, a timestamp a few microseconds
    # away (two reads of the same clock). The preempt-depth column differs by exactly one:
    # with two ftrace_ops the kernel calls both through its list walk, which holds one
    # preemption level that both tracers count as the traced code's; the kernel's tracer also
    # counts its own recursion lock's level, because tracing_gen_ctx_dec() only subtracts it
    # under CONFIG_PREEMPTION, which this PREEMPT_NONE kernel lacks. (The traced code's real
    # depth, ours alone, is what pass 1 shows.)
    c.check("compare: insmod", "compare insmod ok" in status, "no 'compare insmod ok'")
    c.check("compare: kernel function tracer enabled alongside",
            "kernel function tracer on" in status, "could not enable it")
    c.check("compare: both trace files read", "compare read ok" in status, "no 'compare read ok'")
    cheader, cevents, _, cstats = check_buffers(c, "compare: ", files, "compare-trace",
                                                "compare-stats", a.cfilter)
    kheader, kevents, _, kbad = parse_trace(files.get("kernel-trace", []))
    c.check("compare: the kernel's trace parses with the same parser", kevents and not kbad,
            f"{len(kevents)} events; unparsed: {kbad[:3]}")
    strip = [h for h in cheader if not ENTRIES.match(h)]
    kstrip = [h for h in kheader if not ENTRIES.match(h)]
    c.check("compare: header identical to the kernel's (entry counts aside)", strip == kstrip,
            f"ours {strip!r} kernel {kstrip!r}")
    # The key leaves out two flag columns: the preempt depth (see above) and need-resched,
    # which another CPU may set between the two callbacks' reads (a remote wakeup); and the
    # comm, checked apart below.
    key = lambda e: (e["pid"], e["cpu"], e["flags"][0] + e["flags"][2] + e["flags"][4],
                     e["func"], e["parent"])
    # Match each kernel line to the nearest-in-time unmatched line of ours with the same key
    # on the same CPU, at most 500 ms away (the gap is the time between the two callbacks;
    # more if the host deschedules a TCG vCPU between them, hence a median check below).
    unmatched, gaps, depths, resched_diff, comm_diff = [], [], set(), 0, []
    used = set()
    for k in kevents:
        best = None
        for i, e in enumerate(cevents):
            if i in used or e["cpu"] != k["cpu"] or key(e) != key(k):
                continue
            d = abs(e["ts"] - k["ts"])
            if d <= 500000 and (best is None or d < best[0]):
                best = (d, i)
        if best is None:
            unmatched.append(k["line"])
            continue
        used.add(best[1])
        gaps.append(best[0])
        depths.add((cevents[best[1]]["flags"][3], k["flags"][3]))
        if cevents[best[1]]["flags"][1] != k["flags"][1]:
            resched_diff += 1
        if cevents[best[1]]["comm"] != k["comm"]:
            comm_diff.append((cevents[best[1]], k))
    c.check("compare: every line of the kernel's trace is in ours (timestamp, depth, "
            "need-resched, comm aside)",
            kevents and not unmatched, f"{len(unmatched)} of {len(kevents)} unmatched: {unmatched[:3]}")
    funcs = {e["func"] for e in kevents}
    c.check("compare: the kernel traced the workload and the tick's hard-irq and softirq code",
            {"update_process_times", "run_timer_softirq"} <= funcs or a.cfilter != C_DEFAULT,
            repr(sorted(funcs)))
    # Comms: the kernel prints the name its saved_cmdlines recorded at some sched_switch; a
    # workload task that exec'd dd and exited before its next switch still shows the shell's
    # pre-exec name there. Ours records the name with every event: the newest, 'dd'.
    cpids = {w[1] for w in tasks(status, "compare")}
    bad_comm = [(o["line"], k["line"]) for o, k in comm_diff
                if not (o["pid"] in cpids and o["comm"] == "dd")]
    c.check("compare: same comm as the kernel's (but its stale pre-exec names of dd tasks)",
            not bad_comm, bad_comm[:2])
    dep = lambda ch: 0 if ch == "." else int(ch, 16)
    # Lines are paired nearest-in-time with the same key, so under load a line can pair with
    # another call of the same function by the same task at another nesting depth: require the
    # kernel's depth above ours on every pair, and exactly ours + 1 on some.
    c.check("compare: the kernel's preempt depth is above ours on every line (ours + 1 as a rule)",
            bool(depths) and all(dep(k) > dep(o) for o, k in depths)
            and any(dep(k) == dep(o) + 1 for o, k in depths), sorted(depths))
    if gaps:
        gaps.sort()
        med, gap = gaps[len(gaps) // 2], gaps[-1]
        c.check("compare: timestamps agree with the kernel's (median gap <= 200 us)", med <= 200,
                f"median {med} us, max {gap} us")
        print(f"# {len(gaps)} lines matched the kernel's; timestamp gap median {med} us, "
              f"max {gap} us; preempt-depth column (ours, kernel's): {sorted(depths)}; "
              f"need-resched column differs on {resched_diff}; the kernel shows a stale "
              f"pre-exec comm on {len(comm_diff)}")
    # Context flags on our side: the tick's functions in hard-irq context with irqs off ('h',
    # or 'H' when the tick interrupted a softirq; 'D' when it interrupted a bh-disabled
    # section), the timer softirq in softirq context.
    hard = [e["line"] for e in cevents if e["func"] == "update_process_times"
            and not (e["flags"][0] in "dD" and e["flags"][2] in "hH")]
    soft = [e["line"] for e in cevents if e["func"] == "run_timer_softirq"
            and e["flags"][2] != "s"]
    c.check("compare: update_process_times lines in hard-irq context, irqs off ('[dD].[hH]')",
            not hard, hard[:2])
    c.check("compare: run_timer_softirq lines in softirq context ('..s')", not soft, soft[:2])
    wl = [e for e in cevents if e["pid"] in cpids]
    c.check("compare: the workload's lines are there too", len(wl) >= len(cpids),
            f"{len(wl)} lines for {len(cpids)} tasks")
    c.check("compare: rmmod", "compare rmmod ok" in status, "no 'compare rmmod ok'")

    # Pass 4: `stats` read many times while the tick and two read loops kept calling the
    # traced functions on both CPUs. Each CPU's block is a snapshot at a moment with no
    # callback in flight: its numbers add up exactly in every read, and they only grow.
    c.check("stress: insmod", "stress insmod ok" in status, "no 'stress insmod ok'")
    reads = [parse_stats(files[f"stress-stats-{i}"]) for i in range(a.stats_reads)
             if f"stress-stats-{i}" in files]
    c.check(f"stress: stats read {a.stats_reads} times", len(reads) == a.stats_reads,
            f"{len(reads)} reads")
    bad_calls, bad_sum, bad_refused, incons, shrank = [], [], [], [], []
    last = {}
    for i, st in enumerate(reads):
        for cpu, s in sorted(st.items()):
            try:
                v = {k: int(s[k]) for k in ("calls", "hits", "entries", "overrun", "read events",
                                            "recursion", "stopped", "refused",
                                            "dropped events", "commit overrun")}
            except (KeyError, ValueError) as e:
                bad_sum.append((i, cpu, f"fields: {e}"))
                continue
            if "inconsistent" in s:
                incons.append((i, cpu))
            if v["calls"] != v["hits"]:
                bad_calls.append((i, cpu, v["calls"], v["hits"]))
            total = (v["entries"] + v["overrun"] + v["read events"] + v["recursion"]
                     + v["stopped"] + v["refused"])
            if v["hits"] != total:
                bad_sum.append((i, cpu, v["hits"], total))
            if v["refused"] != v["dropped events"] + v["commit overrun"]:
                bad_refused.append((i, cpu, v))
            if cpu in last and (v["calls"] < last[cpu]["calls"]
                                or v["entries"] + v["overrun"]
                                < last[cpu]["entries"] + last[cpu]["overrun"]):
                shrank.append((i, cpu))
            last.setdefault(f"first{cpu}", v)
            last[cpu] = v
    c.check("stress: both CPUs in every read", all(sorted(st) == [0, 1] for st in reads),
            repr([sorted(st) for st in reads if sorted(st) != [0, 1]][:3]))
    c.check("stress: every read has calls == hits on each CPU", not bad_calls,
            f"{len(bad_calls)} mismatches: {bad_calls[:3]}")
    c.check("stress: every read has hits == entries + overrun + read + recursion + stopped "
            "+ refused on each CPU", not bad_sum, f"{len(bad_sum)} mismatches: {bad_sum[:3]}")
    c.check("stress: every read has refused == dropped + commit overrun", not bad_refused,
            repr(bad_refused[:2]))
    c.check("stress: every read found a moment with no callback in flight", not incons,
            repr(incons[:3]))
    c.check("stress: counters never go back between reads", not shrank, repr(shrank[:3]))
    # The reads raced with callbacks: calls grew on both CPUs while they ran.
    grew = {cpu: last[cpu]["calls"] - last[f"first{cpu}"]["calls"]
            for cpu in (0, 1) if cpu in last}
    c.check("stress: the traced functions kept running on both CPUs during the reads",
            len(grew) == 2 and all(g > 0 for g in grew.values()), repr(grew))
    print(f"# stress: calls during the {len(reads)} reads, per CPU: {grew}")
    c.check("stress: rmmod", "stress rmmod ok" in status, "no 'stress rmmod ok'")

    c.check("unregister_ftrace_function returned 0 (all four loads)",
            len(re.findall(r"ftrace_rs: unregister=0 ", console)) == 4,
            repr(re.findall(r"ftrace_rs: unregister=.*", console)))
    splat = [ln for ln in console.split("\n")
             if re.search(r"BUG|Oops|WARNING|Call Trace|general protection|panic", ln)]
    c.check("no Oops/WARNING/BUG in the guest", not splat, repr(splat[:5]))
    c.check("guest finished", "DONE" in status, "no 'RFL: DONE'")
    return 1 if c.failed else 0


if __name__ == "__main__":
    sys.exit(main())
