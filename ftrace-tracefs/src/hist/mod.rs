//! hist triggers that aggregate: the kernel's `tracing_map` and the `hist` file.
//!
//! A `hist:` trigger the [`triggers`](crate::triggers) parser accepted is compiled against its
//! event ([`HistDef::compile`]); each record the trigger sees updates a bounded [`HistMap`]
//! (keys with the `.hex`, `.sym`, `.sym-offset`, `.execname`, `.syscall`, `.log2` and
//! `.buckets` modifiers, summed values, `hitcount`, `size` entries with drops counted), and
//! [`write_hist`] prints the `hist` file as Linux 6.12 does, entries in the kernel's sort
//! order. Not yet aggregated: expressions, variables, `common_timestamp`, stack-trace keys
//! (compiling such a trigger fails with [`HistError::Unsupported`]).
//!
//! ```
//! use ftrace_core::format::sched::SCHED_WAKEUP;
//! use ftrace_core::symbols::SymbolSlice;
//! use ftrace_tracefs::hist::{HistDef, HistMap, HistNames, write_hist};
//! use ftrace_tracefs::triggers::{TriggerCmd, TriggerCtx, parse};
//!
//! let cx = TriggerCtx {
//!     event: &SCHED_WAKEUP,
//!     find_event: &|_, _| None,
//!     existing: &[],
//!     var_defined: &|_| false,
//!     clocks: &["global"],
//! };
//! let Ok(TriggerCmd::Add(trigger)) =
//!     parse(b"hist:keys=target_cpu:vals=prio", &cx, &mut |_, _, _, _| {})
//! else {
//!     panic!("rejected")
//! };
//! let ftrace_tracefs::triggers::TriggerKind::Hist(spec) = &trigger.kind else { unreachable!() };
//! let def = HistDef::compile(spec, &SCHED_WAKEUP).unwrap();
//! let mut map = HistMap::new(&def);
//! // A sched_wakeup record: common fields, comm, pid, prio 120, target_cpu 1.
//! let mut rec = [0u8; 36];
//! rec[28..32].copy_from_slice(&120i32.to_le_bytes());
//! rec[32..36].copy_from_slice(&1i32.to_le_bytes());
//! map.update(&def, &rec, 0, &|| [0; 16]);
//! map.update(&def, &rec, 0, &|| [0; 16]);
//!
//! let mut out = String::new();
//! let names = HistNames { symbols: &SymbolSlice(&[]), syscall: &|_| None };
//! write_hist(&mut out, 0, &trigger, &def, &map, &names).unwrap();
//! assert!(out.contains("{ target_cpu:          1 } hitcount:          2  prio:        240\n"));
//! assert!(out.ends_with("Totals:\n    Hits: 2\n    Entries: 1\n    Dropped: 0\n"));
//! ```

mod def;
mod map;
mod print;
mod sort;
mod table;

pub use def::{
    FieldSource, HistDef, HistError, KeyCmp, KeyDisplay, KeyField, SortField, SortKey, ValDisplay,
    ValField, order_base_2,
};
pub use map::{Comm, HistMap};
pub use print::{HistNames, write_hist};
pub use sort::{heapsort, sorted_entries};
pub use table::{HistTable, HistTableError};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::triggers::{Trigger, TriggerCmd, TriggerCtx, TriggerKind, parse};
    use alloc::string::String;
    use alloc::vec::Vec;
    use ftrace_core::format::TraceEventFormat;
    use ftrace_core::format::sched::SCHED_SWITCH;
    use ftrace_core::symbols::{Symbol, SymbolSlice};

    fn trigger(ev: &TraceEventFormat, cmd: &str) -> (Trigger, HistDef) {
        let cx = TriggerCtx {
            event: ev,
            find_event: &|_, _| None,
            existing: &[],
            var_defined: &|_| false,
            clocks: &["global"],
        };
        let Ok(TriggerCmd::Add(t)) = parse(cmd.as_bytes(), &cx, &mut |_, _, _, _| {}) else {
            panic!("{cmd} rejected")
        };
        let TriggerKind::Hist(spec) = &t.kind else {
            unreachable!()
        };
        let def = HistDef::compile(spec, ev).unwrap();
        (t, def)
    }

    /// A sched_switch record (64 bytes): prev_comm, prev_pid, prev_state, next_comm, next_pid.
    fn switch(prev_pid: i32, prev_state: i64, next_comm: &str, next_pid: i32) -> Vec<u8> {
        let mut r = alloc::vec![0u8; 64];
        r[4..8].copy_from_slice(&prev_pid.to_le_bytes());
        r[24..28].copy_from_slice(&prev_pid.to_le_bytes());
        r[32..40].copy_from_slice(&prev_state.to_le_bytes());
        r[40..40 + next_comm.len()].copy_from_slice(next_comm.as_bytes());
        r[56..60].copy_from_slice(&next_pid.to_le_bytes());
        r
    }

    fn show(t: &Trigger, def: &HistDef, map: &HistMap, syms: &[Symbol<'_>]) -> String {
        let mut s = String::new();
        let names = HistNames {
            symbols: &SymbolSlice(syms),
            syscall: &|nr| (nr == 0).then_some("sys_read"),
        };
        write_hist(&mut s, 0, t, def, map, &names).unwrap();
        s
    }

    #[test]
    fn a_full_map_drops_and_counts() {
        let (t, def) = trigger(&SCHED_SWITCH, "hist:keys=next_pid:size=128");
        let mut map = HistMap::new(&def);
        for pid in 0..200 {
            map.update(&def, &switch(1, 0, "a", pid), 0, &|| [0; 16]);
        }
        map.update(&def, &switch(1, 0, "a", 5), 0, &|| [0; 16]);
        assert_eq!((map.len(), map.hits(), map.drops()), (128, 129, 72));
        let out = show(&t, &def, &map, &[]);
        assert!(out.ends_with("Totals:\n    Hits: 129\n    Entries: 128\n    Dropped: 72\n"));
        // hitcount ascending: the one key hit twice is last.
        assert!(out.contains("{ next_pid:          5 } hitcount:          2\n\nTotals"));
        map.clear();
        assert_eq!((map.len(), map.hits(), map.drops()), (0, 0, 0));
    }

    #[test]
    fn maps_merged_print_as_one_map_of_every_record() {
        let (t, def) = trigger(
            &SCHED_SWITCH,
            "hist:keys=common_pid.execname,next_pid:vals=prev_pid",
        );
        let recs: Vec<_> = (0..30)
            .map(|i| switch(i % 4, 0, ["a", "b"][i as usize % 2], i % 5))
            .collect();
        let mut whole = HistMap::new(&def);
        let (mut one, mut two) = (HistMap::new(&def), HistMap::new(&def));
        for (i, r) in recs.iter().enumerate() {
            let comm = || *b"worker\0\0\0\0\0\0\0\0\0\0";
            whole.update(&def, r, 0, &comm);
            match i % 3 {
                0 => one.update(&def, r, 0, &comm),
                _ => two.update(&def, r, 0, &comm),
            }
        }
        let mut merged = HistMap::new(&def);
        for m in [&one, &two] {
            let elements: Vec<_> = (0..m.len())
                .map(|e| (m.key(e), m.sums(e), m.comm(e)))
                .collect();
            merged.merge(m.hits(), m.drops(), elements).unwrap();
        }
        assert_eq!(show(&t, &def, &merged, &[]), show(&t, &def, &whole, &[]));
        assert_eq!(
            (merged.hits(), merged.drops()),
            (whole.hits(), whole.drops())
        );
        // Sizes of another definition are refused, and change nothing.
        assert!(
            merged
                .merge(1, 0, [(&[0u8][..], &[1u64][..], &[][..])])
                .is_none()
        );
        assert_eq!(merged.hits(), whole.hits());
    }

    #[test]
    fn modifiers_print_as_the_kernel_does() {
        let (t, def) = trigger(
            &SCHED_SWITCH,
            "hist:keys=prev_state.log2,next_pid.buckets=10,next_comm:vals=prev_pid.hex:sort=prev_state",
        );
        let mut map = HistMap::new(&def);
        map.update(&def, &switch(255, 5, "kworker/0:1", 23), 0, &|| [0; 16]);
        map.update(&def, &switch(1, 1, "sh", 7), 0, &|| [0; 16]);
        let out = show(&t, &def, &map, &[]);
        let want = "# event histogram\n#\n# trigger info: hist:keys=prev_state.log2,next_pid.buckets=10,next_comm:vals=hitcount,prev_pid.hex:sort=prev_state.log2:size=2048 [active]\n#\n\n\
{ prev_state: ~ 2^0 , next_pid: ~ 0-9, next_comm: sh                                                 } hitcount:          1  prev_pid:          1\n\
{ prev_state: ~ 2^3 , next_pid: ~ 20-29, next_comm: kworker/0:1                                        } hitcount:          1  prev_pid:         ff\n\
\nTotals:\n    Hits: 2\n    Entries: 2\n    Dropped: 0\n";
        assert_eq!(out, want);
    }

    #[test]
    fn sym_execname_and_syscall_keys() {
        let (t, def) = trigger(
            &SCHED_SWITCH,
            "hist:keys=common_pid.execname,prev_state.sym,next_pid.syscall",
        );
        let mut map = HistMap::new(&def);
        let mut comm = [0u8; 16];
        comm[..4].copy_from_slice(b"bash");
        map.update(&def, &switch(42, 0x1010, "x", 0), 0, &|| comm);
        let syms = [Symbol::new("vfs_read", 0x1000, 0x40)];
        let out = show(&t, &def, &map, &syms);
        let line = out.lines().nth(5).unwrap();
        assert_eq!(
            line,
            "{ common_pid: bash            [        42], prev_state: [1010] vfs_read                                     , next_pid: sys_read                      [  0] } hitcount:          1"
        );
        let (t, def) = trigger(
            &SCHED_SWITCH,
            "hist:keys=prev_state.sym-offset,prev_pid.sym",
        );
        let mut map = HistMap::new(&def);
        map.update(&def, &switch(42, 0x1010, "x", 0), 0, &|| comm);
        let out = show(&t, &def, &map, &syms);
        assert_eq!(
            out.lines().nth(5).unwrap(),
            "{ prev_state: [1010] vfs_read+0x10/0x40                                     , prev_pid: [2a] 0x2a                                          } hitcount:          1"
        );
    }
}
