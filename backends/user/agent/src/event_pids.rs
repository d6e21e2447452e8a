//! The event pid filters (`set_event_pid`, `set_event_notrace_pid`) in the traced program:
//! whose trace events are recorded ([`crate::event_record`]).
//!
//! As with [`crate::pids`] (the function tracer's lists, which do not filter events, as on
//! Linux), a pid here is a thread id: `set_event_pid` records the events of the listed threads
//! only, `set_event_notrace_pid` never records theirs, a thread in both is left out (ftrace-
//! core's [`PidFilter`]). With `event-fork`, a child process forked by a listed thread joins
//! each list that names the forking thread, in the child's own copy of the lists (the
//! kernel's `event_filter_pid_sched_process_fork`).
//!
//! Invariant: the `FILTERED` switch is true whenever either list is set, so an event with no list set
//! pays one relaxed load for them.

use core::sync::atomic::{AtomicBool, Ordering};

use ftrace_core::pid::{PidFilter, PidList};
use ftrace_core::reclaim::{EpochReclaim, Published};

/// The lists.
static PIDS: PidFilter = PidFilter::new();

/// Either list is set (kept by [`set_lists`]).
static FILTERED: AtomicBool = AtomicBool::new(false);

/// `event-fork`: forked children of listed threads join the lists.
static FOLLOW_FORK: AtomicBool = AtomicBool::new(false);

fn publish(pids: &[u32]) -> Published<PidList> {
    if pids.is_empty() {
        Published::None
    } else {
        Published::Owned(Box::new(PidList::from_pids(pids.iter().copied())))
    }
}

/// Replaces both lists (an empty slice clears a list) and the `event-fork` option.
pub fn set_lists(pids: &[u32], no_pids: &[u32], follow_fork: bool) {
    PIDS.set_pids(publish(pids), &EpochReclaim);
    PIDS.set_no_pids(publish(no_pids), &EpochReclaim);
    FILTERED.store(PIDS.is_active(), Ordering::Relaxed);
    FOLLOW_FORK.store(follow_fork, Ordering::Relaxed);
}

/// The current lists: (`set_event_pid`, `set_event_notrace_pid`).
pub fn lists() -> (Vec<u32>, Vec<u32>) {
    PIDS.with_lists(&EpochReclaim, |p, n| (p.to_vec(), n.to_vec()))
}

/// Whether the events of thread `tid` are recorded.
#[inline]
pub fn admits(tid: u32) -> bool {
    !FILTERED.load(Ordering::Relaxed) || admits_listed(tid)
}

#[cold]
#[inline(never)]
fn admits_listed(tid: u32) -> bool {
    PIDS.admits(tid, &EpochReclaim)
}

/// In a forked child, before its thread state is reset: `parent_tid` is the thread that
/// forked. With `event-fork`, each list naming it gains the child's pid.
pub fn follow_fork(parent_tid: u32) {
    if !FILTERED.load(Ordering::Relaxed) || !FOLLOW_FORK.load(Ordering::Relaxed) {
        return;
    }
    // SAFETY: no preconditions.
    let child = unsafe { libc::getpid() } as u32;
    let (mut pids, mut no_pids) = lists();
    for l in [&mut pids, &mut no_pids] {
        if l.binary_search(&parent_tid).is_ok() {
            l.push(child);
            l.sort_unstable();
        }
    }
    set_lists(&pids, &no_pids, true);
}

/// The `EVENT_PIDS` request's arguments: `pids\tno pids\tfork`, each list comma-separated
/// decimal thread ids (`-` for none), `fork` 0/1.
pub fn to_args(pids: &[u32], no_pids: &[u32], follow_fork: bool) -> String {
    let list = |l: &[u32]| match l.is_empty() {
        true => "-".to_string(),
        false => l.iter().map(u32::to_string).collect::<Vec<_>>().join(","),
    };
    format!(
        "{}\t{}\t{}",
        list(pids),
        list(no_pids),
        u8::from(follow_fork)
    )
}

/// Parses [`to_args`]'s form: (pids, no pids, fork).
pub fn parse_args(s: &str) -> Option<(Vec<u32>, Vec<u32>, bool)> {
    let list = |t: &str| -> Option<Vec<u32>> {
        match t {
            "-" => Some(Vec::new()),
            _ => t.split(',').map(|p| p.parse().ok()).collect(),
        }
    };
    let mut p = s.split('\t');
    let pids = list(p.next()?)?;
    let no_pids = list(p.next()?)?;
    let fork = match p.next()? {
        "0" => false,
        "1" => true,
        _ => return None,
    };
    p.next().is_none().then_some((pids, no_pids, fork))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_filter_by_thread_and_follow_forks_with_event_fork() {
        set_lists(&[], &[], false);
        assert!(admits(7));
        set_lists(&[5, 7], &[], false);
        assert!(admits(7) && !admits(6));
        set_lists(&[], &[7], false);
        assert!(!admits(7) && admits(6));
        set_lists(&[7], &[7], false);
        assert!(!admits(7));
        // The function tracer's lists are another thing.
        assert!(crate::pids::admits(6));

        // SAFETY: no preconditions.
        let me = unsafe { libc::getpid() } as u32;
        set_lists(&[7], &[3], false);
        follow_fork(7);
        assert_eq!(lists(), (vec![7], vec![3]));
        set_lists(&[7], &[3], true);
        follow_fork(8);
        assert_eq!(lists(), (vec![7], vec![3]));
        follow_fork(7);
        let mut want = vec![7, me];
        want.sort_unstable();
        assert_eq!(lists(), (want, vec![3]));
        set_lists(&[], &[], false);
        assert!(admits(6));
    }

    #[test]
    fn requests_round_trip() {
        let a = to_args(&[3, 10], &[], true);
        assert_eq!(a, "3,10\t-\t1");
        assert_eq!(parse_args(&a), Some((vec![3, 10], vec![], true)));
        assert_eq!(parse_args("-\t-\t0"), Some((vec![], vec![], false)));
        assert_eq!(parse_args("-\t-\t2"), None);
        assert_eq!(parse_args("x\t-\t0"), None);
        assert_eq!(parse_args("-\t-\t0\t1"), None);
    }
}
