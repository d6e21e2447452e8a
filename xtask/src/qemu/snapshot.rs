//! The session's snapshot part: the shared instance's `snapshot` file on bare metal (freed at
//! boot with the kernel's help text, `echo 1` swaps in a fresh ring and keeps what `trace`
//! held, the per-CPU swap refused as on the 6.12 reference kernel, `echo 0` frees it).

use super::{Vm, check, echo_ok, function_header, run_workload};

/// The first lines of an empty snapshot's text (Linux 6.12's `print_snapshot_help`).
fn help_head(tracer: &str, state: &str) -> String {
    format!("# tracer: {tracer}\n#\n#\n# * Snapshot is {state} *\n#\n# Snapshot commands:\n")
}

/// Starts and ends under `nop` with the `bm_*` filter and the snapshot freed; returns the
/// writes meant to fail.
pub(super) fn snapshot_files(vm: &mut Vm) -> Result<u32, String> {
    let freed = vm.command("cat snapshot")?;
    check(freed.starts_with(&help_head("nop", "freed")), || {
        format!("snapshot at boot:\n{freed}")
    })?;
    echo_ok(vm, "echo function > current_tracer")?;
    echo_ok(vm, "echo > trace")?;
    run_workload(vm, 1, "")?;
    let trace = vm.command("cat trace")?;
    let (_, events) = function_header(&trace, "function")?;
    check(!events.is_empty(), || format!("nothing traced:\n{trace}"))?;
    echo_ok(vm, "echo 1 > snapshot")?;
    let snap = vm.command("cat snapshot")?;
    check(snap == trace, || {
        format!("snapshot is not what trace held:\n{snap}\nwas:\n{trace}")
    })?;
    let after = vm.command("cat trace")?;
    let (counts, _) = function_header(&after, "function")?;
    check(counts == (0, 0), || {
        format!("trace after the swap:\n{after}")
    })?;
    run_workload(vm, 1, "")?;
    let again = vm.command("cat trace")?;
    let (_, more) = function_header(&again, "function")?;
    check(more.len() == events.len(), || {
        format!("tracing did not go on in the new ring:\n{again}")
    })?;
    check(vm.command("cat snapshot")? == snap, || {
        "the snapshot changed while tracing went on".into()
    })?;
    // no per-CPU swap (CONFIG_RING_BUFFER_ALLOW_SWAP), as on the reference kernel
    let bad = vm.command("echo 1 > per_cpu/cpu0/snapshot")?;
    check(bad == "sh: write error: Invalid argument\n", || {
        format!("echo 1 > per_cpu/cpu0/snapshot: {bad:?}")
    })?;
    echo_ok(vm, "echo 2 > snapshot")?;
    let cleared = vm.command("cat snapshot")?;
    check(
        cleared.starts_with(&help_head("function", "allocated")),
        || format!("snapshot after echo 2:\n{cleared}"),
    )?;
    echo_ok(vm, "echo 0 > snapshot")?;
    echo_ok(vm, "echo nop > current_tracer")?;
    let freed = vm.command("cat snapshot")?;
    check(freed.starts_with(&help_head("nop", "freed")), || {
        format!("snapshot after echo 0:\n{freed}")
    })?;
    Ok(1)
}
