//! Property tests of the event filter language and the trigger parser on their own: arbitrary
//! text never panics and errors point inside the text; filters built from the grammar parse,
//! and evaluate records exactly as a direct evaluation of the same expression does.

use ftrace_core::format::sched::SCHED_SWITCH;
use ftrace_tracefs::event_filter::{self, RecordCtx};
use ftrace_tracefs::triggers::{self, TriggerCtx};
use proptest::prelude::*;

/// A numeric field of `sched_switch` and how to read it from a record.
#[derive(Clone, Copy, Debug)]
enum F {
    PrevPid,
    NextPid,
    PrevState,
    NextPrio,
    CommonPid,
}

impl F {
    fn name(self) -> &'static str {
        match self {
            F::PrevPid => "prev_pid",
            F::NextPid => "next_pid",
            F::PrevState => "prev_state",
            F::NextPrio => "next_prio",
            F::CommonPid => "common_pid",
        }
    }
    fn value(self, r: &Rec) -> i64 {
        match self {
            F::PrevPid => r.prev_pid.into(),
            F::NextPid => r.next_pid.into(),
            F::PrevState => r.prev_state,
            F::NextPrio => r.next_prio.into(),
            F::CommonPid => r.common_pid.into(),
        }
    }
}

#[derive(Clone, Debug)]
struct Rec {
    prev_pid: i32,
    next_pid: i32,
    prev_state: i64,
    next_prio: i32,
    common_pid: i32,
}

impl Rec {
    fn bytes(&self) -> Vec<u8> {
        let mut d = vec![0u8; 64];
        d[4..8].copy_from_slice(&self.common_pid.to_le_bytes());
        d[24..28].copy_from_slice(&self.prev_pid.to_le_bytes());
        d[32..40].copy_from_slice(&self.prev_state.to_le_bytes());
        d[56..60].copy_from_slice(&self.next_pid.to_le_bytes());
        d[60..64].copy_from_slice(&self.next_prio.to_le_bytes());
        d
    }
}

#[derive(Clone, Debug)]
enum E {
    P(F, &'static str, i64),
    Not(Box<E>),
    And(Box<E>, Box<E>),
    Or(Box<E>, Box<E>),
}

impl E {
    fn text(&self) -> String {
        match self {
            E::P(f, op, v) => format!("{} {op} {v}", f.name()),
            E::Not(e) => format!("!({})", e.text()),
            // `&&` binds tighter than `||`: only an `||` operand of `&&` needs parentheses.
            E::And(a, b) => format!("{} && {}", a.and_operand(), b.and_operand()),
            E::Or(a, b) => format!("{} || {}", a.text(), b.text()),
        }
    }
    fn and_operand(&self) -> String {
        match self {
            E::Or(..) => format!("({})", self.text()),
            _ => self.text(),
        }
    }
    fn eval(&self, r: &Rec) -> bool {
        match self {
            E::P(f, op, v) => {
                let x = f.value(r);
                match *op {
                    "==" => x == *v,
                    "!=" => x != *v,
                    "<" => x < *v,
                    "<=" => x <= *v,
                    ">" => x > *v,
                    ">=" => x >= *v,
                    _ => x & *v != 0,
                }
            }
            E::Not(e) => !e.eval(r),
            E::And(a, b) => a.eval(r) && b.eval(r),
            E::Or(a, b) => a.eval(r) || b.eval(r),
        }
    }
}

fn field() -> impl Strategy<Value = F> {
    prop_oneof![
        Just(F::PrevPid),
        Just(F::NextPid),
        Just(F::PrevState),
        Just(F::NextPrio),
        Just(F::CommonPid),
    ]
}

fn expr() -> impl Strategy<Value = E> {
    let leaf = (
        field(),
        proptest::sample::select(&["==", "!=", "<", "<=", ">", ">=", "&"][..]),
        -3i64..4,
    )
        .prop_map(|(f, op, v)| E::P(f, op, v));
    leaf.prop_recursive(4, 16, 2, |inner| {
        prop_oneof![
            inner.clone().prop_map(|e| E::Not(Box::new(e))),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| E::And(Box::new(a), Box::new(b))),
            (inner.clone(), inner).prop_map(|(a, b)| E::Or(Box::new(a), Box::new(b))),
        ]
    })
}

fn rec() -> impl Strategy<Value = Rec> {
    (-3i32..4, -3i32..4, -3i64..4, -3i32..4, -3i32..4).prop_map(
        |(prev_pid, next_pid, prev_state, next_prio, common_pid)| Rec {
            prev_pid,
            next_pid,
            prev_state,
            next_prio,
            common_pid,
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn filters_evaluate_like_a_reference(e in expr(), records in proptest::collection::vec(rec(), 1..8)) {
        let text = e.text();
        let f = event_filter::parse(&SCHED_SWITCH, &text)
            .unwrap_or_else(|err| panic!("{text}: {err:?}"));
        prop_assert_eq!(f.text(), text.as_str());
        for r in &records {
            prop_assert_eq!(
                f.matches(&r.bytes(), &RecordCtx::default()),
                e.eval(r),
                "{} on {:?}", text, r
            );
        }
    }

    #[test]
    fn arbitrary_filter_text_never_panics(s in "[ -~]{0,60}") {
        if let Err(e) = event_filter::parse(&SCHED_SWITCH, &s) {
            prop_assert!(e.pos <= s.len() + 1, "{s:?}: {e:?}");
            let shown = e.annotate(&s);
            prop_assert!(shown.starts_with(s.as_str()));
        }
    }

    #[test]
    fn arbitrary_trigger_text_never_panics(s in prop_oneof![
        "[ -~]{0,60}",
        "(!?)(hist|traceon|enable_event)[:a-z_=,.0-9 ]{0,50}",
    ]) {
        let find = |_: &str, _: &str| None;
        let cx = TriggerCtx {
            event: &SCHED_SWITCH,
            find_event: &find,
            existing: &[],
            var_defined: &|_| false,
            clocks: &["local"],
        };
        let mut entries = Vec::new();
        let r = triggers::parse(s.as_bytes(), &cx, &mut |loc: &str, _m, cmd: &str, pos| {
            entries.push((loc.to_owned(), cmd.to_owned(), pos));
        });
        for (loc, cmd, pos) in &entries {
            prop_assert!(usize::from(*pos) <= cmd.len() + 1, "{s:?}: {loc} {cmd} {pos}");
        }
        if r.is_ok() {
            prop_assert!(entries.is_empty(), "{s:?} succeeded but logged {entries:?}");
        }
    }
}
