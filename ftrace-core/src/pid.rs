//! The function tracer's pid filter: `set_ftrace_pid` and `set_ftrace_notrace_pid`.
//!
//! A [`PidFilter`] holds two published [`PidList`]s. An ops flagged
//! [`OpsFlags::PID`](crate::ops::OpsFlags::PID) with a filter attached is called only for tasks
//! the filter admits (`trace_ignore_this_task`): a pid in the notrace list is never traced;
//! otherwise, if the trace list is non-empty, only the pids it holds are. With both lists empty
//! every task is traced.
//!
//! Invariant: the lists are replaced by pointer swap and read under a read-side guard; a
//! replaced owned list is freed after a grace period.
//!
//! With `alloc`, `write_pids` and `show_pids` give the files' write and read semantics
//! (`trace_pid_write`, `fpid_show`).

use crate::platform::Reclaim;
use crate::reclaim::{Published, RcuCell};
use crate::sync::loom_const_fn;

#[cfg(feature = "alloc")]
use crate::errno::Errno;
#[cfg(feature = "alloc")]
use alloc::{boxed::Box, string::String, vec::Vec};

/// `MAX_PID` of the kernel's `trace_pid_list` (`kernel/trace/pid_list.h`): pids are below
/// `1 << 30`.
pub const MAX_PID: u32 = 1 << 30;

/// A sorted, duplicate-free set of pids.
#[derive(Debug)]
pub struct PidList {
    pids: PidStorage,
}

#[derive(Debug)]
enum PidStorage {
    Static(&'static [u32]),
    #[cfg(feature = "alloc")]
    Owned(Box<[u32]>),
}

impl PidList {
    /// A list over sorted, duplicate-free `'static` storage; `None` if `pids` is not strictly
    /// ascending.
    pub const fn from_sorted(pids: &'static [u32]) -> Option<PidList> {
        let mut i = 1;
        while i < pids.len() {
            if pids[i - 1] >= pids[i] {
                return None;
            }
            i += 1;
        }
        Some(PidList {
            pids: PidStorage::Static(pids),
        })
    }

    /// An owned list of `pids` (sorted and deduplicated here).
    #[cfg(feature = "alloc")]
    pub fn from_pids<I: IntoIterator<Item = u32>>(pids: I) -> PidList {
        let mut v: Vec<u32> = pids.into_iter().collect();
        v.sort_unstable();
        v.dedup();
        PidList {
            pids: PidStorage::Owned(v.into_boxed_slice()),
        }
    }

    /// The pids, ascending.
    #[inline]
    pub fn as_slice(&self) -> &[u32] {
        match &self.pids {
            PidStorage::Static(s) => s,
            #[cfg(feature = "alloc")]
            PidStorage::Owned(b) => b,
        }
    }

    /// Whether `pid` is in the list.
    #[inline]
    pub fn contains(&self, pid: u32) -> bool {
        self.as_slice().binary_search(&pid).is_ok()
    }
}

/// The pid lists of one trace instance (`tr->function_pids`, `tr->function_no_pids`).
pub struct PidFilter {
    pids: RcuCell<PidList>,
    no_pids: RcuCell<PidList>,
}

impl core::fmt::Debug for PidFilter {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PidFilter")
            .field("active", &self.is_active())
            .finish()
    }
}

impl Default for PidFilter {
    fn default() -> Self {
        Self::new()
    }
}

impl PidFilter {
    loom_const_fn! {
        /// A filter that admits every task.
        pub fn new() -> PidFilter {
            PidFilter {
                pids: RcuCell::empty(),
                no_pids: RcuCell::empty(),
            }
        }
    }

    /// Whether either list is set (no dereference: safe without a guard).
    #[inline]
    pub fn is_active(&self) -> bool {
        !(self.pids.is_empty() && self.no_pids.is_empty())
    }

    /// Replaces the `set_ftrace_pid` list (`Published::None` clears it).
    pub fn set_pids<R: Reclaim + ?Sized>(&self, list: Published<PidList>, reclaim: &R) {
        self.pids.replace(list, reclaim);
    }

    /// Replaces the `set_ftrace_notrace_pid` list.
    pub fn set_no_pids<R: Reclaim + ?Sized>(&self, list: Published<PidList>, reclaim: &R) {
        self.no_pids.replace(list, reclaim);
    }

    /// Whether a task with `pid` is traced (`!trace_ignore_this_task`).
    ///
    /// # Safety
    /// The caller is inside a read-side critical section of the `Reclaim` that replaces the
    /// lists.
    #[inline]
    pub unsafe fn admits_pinned(&self, pid: u32) -> bool {
        if !self.is_active() {
            return true;
        }
        // SAFETY: forwarded contract.
        let (pids, no_pids) = unsafe { (self.pids.load(), self.no_pids.load()) };
        !(pids.is_some_and(|l| !l.contains(pid)) || no_pids.is_some_and(|l| l.contains(pid)))
    }

    /// Whether a task with `pid` is traced, pinning `reclaim` for the check.
    pub fn admits<R: Reclaim + ?Sized>(&self, pid: u32, reclaim: &R) -> bool {
        let _guard = reclaim.pin();
        // SAFETY: `_guard` is live for the whole check.
        unsafe { self.admits_pinned(pid) }
    }

    /// Calls `f` with the current trace list and notrace list (empty slices when unset).
    pub fn with_lists<R: Reclaim + ?Sized, T>(
        &self,
        reclaim: &R,
        f: impl FnOnce(&[u32], &[u32]) -> T,
    ) -> T {
        let _guard = reclaim.pin();
        // SAFETY: `_guard` is live while the slices are used.
        let (pids, no_pids) = unsafe { (self.pids.load(), self.no_pids.load()) };
        f(
            pids.map_or(&[][..], PidList::as_slice),
            no_pids.map_or(&[][..], PidList::as_slice),
        )
    }
}

/// `trace_pid_write`: the pid list after writing `text` to a pid file whose list is `current`.
///
/// Tokens are whitespace-separated numbers (`kstrtoul(.., 0)`: decimal, `0x` hex, `0` octal,
/// optional `+`). The write is all or nothing: a token that is not a number (or overflows)
/// fails with `EINVAL`, a pid at or above [`MAX_PID`] (after truncation to
/// `pid_t`, as the kernel casts) with `EPERM` (the kernel returns `-1` there). A write with no
/// token and an empty `current` gives the empty list. The file's `O_TRUNC` open clears the
/// list before any write (pass an empty `current`).
#[cfg(feature = "alloc")]
pub fn write_pids(current: &[u32], text: &str) -> Result<Vec<u32>, Errno> {
    let mut pids: Vec<u32> = current.to_vec();
    for token in crate::filter::tokens(text) {
        if token.len() > PID_BUF_SIZE {
            return Err(Errno::EINVAL);
        }
        // Any kstrtoul failure (overflow included) is EINVAL here.
        let val = crate::filter::kstrtoul(token).map_err(|_| Errno::EINVAL)?;
        let pid = val as u32; // (pid_t)val, then the unsigned `trace_pid_list_set` argument
        if pid >= MAX_PID {
            return Err(Errno::EPERM);
        }
        pids.push(pid);
    }
    pids.sort_unstable();
    pids.dedup();
    Ok(pids)
}

/// `PID_BUF_SIZE`: the longest token a pid file accepts.
#[cfg(feature = "alloc")]
const PID_BUF_SIZE: usize = 127;

/// The text of reading a pid file: one pid per line, ascending, or `no pid` when empty.
#[cfg(feature = "alloc")]
pub fn show_pids(pids: &[u32]) -> String {
    use core::fmt::Write;
    let mut s = String::new();
    if pids.is_empty() {
        s.push_str("no pid\n");
    }
    for p in pids {
        let _ = writeln!(s, "{p}");
    }
    s
}

#[cfg(all(test, feature = "alloc", not(loom)))]
mod tests {
    use super::*;
    use crate::reclaim::ReaderCount;

    #[test]
    fn filter_semantics() {
        let r = ReaderCount::new();
        let f = PidFilter::new();
        assert!(f.admits(5, &r));
        f.set_pids(Published::Owned(Box::new(PidList::from_pids([5, 7]))), &r);
        assert!(f.admits(5, &r) && !f.admits(6, &r));
        f.set_no_pids(Published::Owned(Box::new(PidList::from_pids([7]))), &r);
        assert!(f.admits(5, &r) && !f.admits(7, &r));
        f.set_pids(Published::None, &r);
        assert!(f.admits(6, &r) && !f.admits(7, &r));
        static STATIC: [u32; 2] = [1, 2];
        let l = PidList::from_sorted(&STATIC).unwrap();
        assert!(l.contains(2) && !l.contains(3));
        assert!(PidList::from_sorted(&[2, 2]).is_none());
    }

    #[test]
    fn write_and_show() {
        assert_eq!(show_pids(&[]), "no pid\n");
        let l = write_pids(&[], "12 0x10  010\n").unwrap();
        assert_eq!(l, [8, 12, 16]);
        assert_eq!(show_pids(&l), "8\n12\n16\n");
        assert_eq!(write_pids(&l, "3").unwrap(), [3, 8, 12, 16]);
        assert_eq!(write_pids(&l, "abc"), Err(Errno::EINVAL));
        assert_eq!(write_pids(&l, "-1"), Err(Errno::EINVAL));
        assert_eq!(write_pids(&l, "1073741824"), Err(Errno::EPERM));
        assert_eq!(write_pids(&[], "4294967296").unwrap(), [0]);
        assert_eq!(write_pids(&[], "99999999999999999999"), Err(Errno::EINVAL));
        assert_eq!(write_pids(&[], "\n").unwrap(), Vec::<u32>::new());
    }
}
