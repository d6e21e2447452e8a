//! The pid filters (`set_ftrace_pid`, `set_ftrace_notrace_pid`) in the traced program.
//!
//! In userspace a kernel task is a thread: the pid the lists hold is a thread id (`gettid`),
//! so `set_ftrace_pid` traces only the listed threads and `set_ftrace_notrace_pid` never
//! traces them, with the kernel's `trace_ignore_this_task` semantics (ftrace-core's
//! [`PidFilter`]). With `function-fork` set, a child process forked by a listed thread is
//! added to each list that names the forking thread (the kernel's
//! `ftrace_pid_follow_sched_process_fork`), in the child's own copy of the lists.
//!
//! Invariant: [`PID_FILTERED`] is true whenever either list is set; it turns the assembly
//! fast paths off ([`crate::handler::update_fast_path`]), so pid-filtered tracing always goes
//! through the full-save entry path, where [`admits`] decides (on the thread id cached in
//! [`crate::handler::ThreadState::tid`]). With no list set the
//! hot paths are unchanged (the full-save path pays one relaxed load).

use core::sync::atomic::{AtomicBool, Ordering};

use ftrace_core::pid::{PidFilter, PidList};
use ftrace_core::reclaim::{EpochReclaim, Published};

/// The agent's pid lists.
pub static PIDS: PidFilter = PidFilter::new();

/// Either pid list is set (kept by [`set_lists`]).
pub static PID_FILTERED: AtomicBool = AtomicBool::new(false);

/// `function-fork`: forked children of listed threads join the lists.
pub static FOLLOW_FORK: AtomicBool = AtomicBool::new(false);

fn publish(pids: &[u32]) -> Published<PidList> {
    if pids.is_empty() {
        Published::None
    } else {
        Published::Owned(Box::new(PidList::from_pids(pids.iter().copied())))
    }
}

/// Replaces both lists (an empty slice clears a list).
pub fn set_lists(pids: &[u32], no_pids: &[u32]) {
    PIDS.set_pids(publish(pids), &EpochReclaim);
    PIDS.set_no_pids(publish(no_pids), &EpochReclaim);
    PID_FILTERED.store(PIDS.is_active(), Ordering::Relaxed);
}

/// The current lists: (`set_ftrace_pid`, `set_ftrace_notrace_pid`).
pub fn lists() -> (Vec<u32>, Vec<u32>) {
    PIDS.with_lists(&EpochReclaim, |p, n| (p.to_vec(), n.to_vec()))
}

/// Whether the thread `tid` is traced.
#[inline]
pub fn admits(tid: u32) -> bool {
    !PID_FILTERED.load(Ordering::Relaxed) || PIDS.admits(tid, &EpochReclaim)
}

/// In a forked child, before its thread state is reset: `parent_tid` is the thread that
/// forked. With `function-fork`, each list naming it gains the child's pid.
pub fn follow_fork(parent_tid: u32) {
    if !PID_FILTERED.load(Ordering::Relaxed) || !FOLLOW_FORK.load(Ordering::Relaxed) {
        return;
    }
    // SAFETY: no preconditions.
    let child = unsafe { libc::getpid() } as u32;
    let (mut pids, mut no_pids) = lists();
    for l in [&mut pids, &mut no_pids] {
        if l.binary_search(&parent_tid).is_ok() {
            l.push(child);
        }
    }
    set_lists(&pids, &no_pids);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_follow_the_kernels_semantics() {
        set_lists(&[], &[]);
        assert!(!PID_FILTERED.load(Ordering::Relaxed));
        assert!(admits(7));
        set_lists(&[5, 7], &[]);
        assert!(PID_FILTERED.load(Ordering::Relaxed));
        assert!(admits(7) && !admits(6));
        set_lists(&[], &[7]);
        assert!(!admits(7) && admits(6));
        // In both lists: not traced.
        set_lists(&[7], &[7]);
        assert!(!admits(7));
        assert_eq!(lists(), (vec![7], vec![7]));
        set_lists(&[], &[]);
        assert!(!PID_FILTERED.load(Ordering::Relaxed));

        // A fork of thread 7 (this process stands for the child): joins only with
        // `function-fork`, and only the lists that name 7.
        // SAFETY: no preconditions.
        let me = unsafe { libc::getpid() } as u32;
        set_lists(&[7], &[3]);
        follow_fork(7);
        assert_eq!(lists(), (vec![7], vec![3]));
        FOLLOW_FORK.store(true, Ordering::Relaxed);
        follow_fork(8);
        assert_eq!(lists(), (vec![7], vec![3]));
        follow_fork(7);
        let mut want = vec![7, me];
        want.sort_unstable();
        assert_eq!(lists(), (want, vec![3]));
        assert!(admits(me));
        FOLLOW_FORK.store(false, Ordering::Relaxed);
        set_lists(&[], &[]);
    }
}
