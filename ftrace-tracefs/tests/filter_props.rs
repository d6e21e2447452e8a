//! Property tests of the filter language against independent reference models: a
//! backtracking wildcard matcher, a set model of `set_ftrace_filter` edits, a `BTreeSet` model
//! of the ip hash, and `u64::from_str_radix` for the kernel's number parser.

use ftrace_core::errno::Errno;
use ftrace_core::filter::{FtraceHash, Glob, MatchType, glob_match, kstrtoul};
use ftrace_core::symbols::SortedSymbols;
use ftrace_tracefs::filter_edit::{FilterDraft, FilterSet, NoEvents, ProbeTable};
use ftrace_tracefs::{FilterFile, WriteMode};
use proptest::prelude::*;
use std::collections::BTreeSet;

#[derive(Clone, Debug)]
enum Tok {
    Lit(u8),
    Any,
    Star,
    Class(Vec<(u8, u8)>, bool),
}

/// Reference matcher: tokens matched by plain recursion (exponential, fine for short input).
fn ref_match(toks: &[Tok], s: &[u8]) -> bool {
    match toks.split_first() {
        None => s.is_empty(),
        Some((Tok::Star, rest)) => (0..=s.len()).any(|k| ref_match(rest, &s[k..])),
        Some((t, rest)) => {
            let Some((&c, tail)) = s.split_first() else {
                return false;
            };
            let ok = match t {
                Tok::Lit(l) => *l == c,
                Tok::Any => true,
                Tok::Class(ranges, inv) => ranges.iter().any(|&(a, b)| a <= c && c <= b) != *inv,
                Tok::Star => unreachable!(),
            };
            ok && ref_match(rest, tail)
        }
    }
}

fn render(toks: &[Tok]) -> String {
    let mut s = String::new();
    for t in toks {
        match t {
            Tok::Lit(c) => s.push(*c as char),
            Tok::Any => s.push('?'),
            Tok::Star => s.push('*'),
            Tok::Class(ranges, inv) => {
                s.push('[');
                if *inv {
                    s.push('!');
                }
                for &(a, b) in ranges {
                    s.push(a as char);
                    if a != b {
                        s.push('-');
                        s.push(b as char);
                    }
                }
                s.push(']');
            }
        }
    }
    s
}

fn lit() -> impl Strategy<Value = u8> {
    prop::sample::select(b"abcx_".to_vec())
}

fn tok(classes: bool) -> impl Strategy<Value = Tok> {
    let class = (
        prop::collection::vec((lit(), lit()).prop_map(|(a, b)| (a.min(b), a.max(b))), 1..3),
        any::<bool>(),
    )
        .prop_map(|(r, inv)| Tok::Class(r, inv));
    let w = if classes { 1 } else { 0 };
    prop_oneof![
        6 => lit().prop_map(Tok::Lit),
        2 => Just(Tok::Star),
        1 => Just(Tok::Any),
        w => class,
    ]
}

fn name() -> impl Strategy<Value = String> {
    prop::collection::vec(lit(), 0..8).prop_map(|v| String::from_utf8(v).unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// `filter_parse_regex` + `ftrace_match` agree with a plain wildcard matcher for every
    /// pattern made of names, `*` and `?` (whatever kind the parser picks).
    #[test]
    fn parsed_patterns_match_like_wildcards(
        toks in prop::collection::vec(tok(false), 0..6),
        s in name(),
    ) {
        let pat = render(&toks);
        let g = Glob::parse(&pat);
        prop_assert_ne!(g.kind, MatchType::Index);
        prop_assert!(!g.not);
        prop_assert_eq!(g.matches(&s), ref_match(&toks, s.as_bytes()), "{} vs {}", pat, s);
        let neg = format!("!{pat}");
        let g = Glob::parse(&neg);
        prop_assert!(g.not);
        prop_assert_eq!(g.matches(&s), ref_match(&toks, s.as_bytes()));
    }

    /// `glob_match` with character classes agrees with the reference.
    #[test]
    fn glob_match_with_classes(
        toks in prop::collection::vec(tok(true), 0..6),
        s in name(),
    ) {
        let pat = render(&toks);
        prop_assert_eq!(glob_match(pat.as_bytes(), s.as_bytes()), ref_match(&toks, s.as_bytes()),
            "{} vs {}", pat, s);
    }

    /// The parser's kind follows the position of `*`.
    #[test]
    fn kinds_follow_star_position(core in "[abc_]{1,6}") {
        prop_assert_eq!(Glob::parse(&core).kind, MatchType::Full);
        prop_assert_eq!(Glob::parse(&format!("{core}*")).kind, MatchType::FrontOnly);
        prop_assert_eq!(Glob::parse(&format!("*{core}")).kind, MatchType::EndOnly);
        prop_assert_eq!(Glob::parse(&format!("*{core}*")).kind, MatchType::MiddleOnly);
        let mid = format!("*{core}*");
        prop_assert_eq!(Glob::parse(&mid).search, core.as_str());
    }

    /// Editing `set_ftrace_filter` token by token equals a set model: a token that matches
    /// nothing fails with EINVAL and changes nothing; `!pat` removes every match; `>`
    /// clears first.
    #[test]
    fn filter_edits_follow_the_set_model(
        names in prop::collection::btree_set("[abc_]{1,5}", 1..12),
        writes in prop::collection::vec(
            (any::<bool>(), prop::collection::vec((any::<bool>(), prop::collection::vec(tok(false), 1..4)), 1..4)),
            1..6,
        ),
    ) {
        let names: Vec<String> = names.into_iter().collect();
        let mut syms = SortedSymbols::new();
        for (i, n) in names.iter().enumerate() {
            syms.push(n, 0x1000 + 0x10 * i as u64, 0x10, None);
        }
        syms.finish();
        let addr = |n: &str| 0x1000 + 0x10 * names.iter().position(|x| x == n).unwrap() as u64;
        let env = NoEvents(&syms);
        let mut probes = ProbeTable::new();
        let mut set = FilterSet::new();
        let mut model: BTreeSet<u64> = BTreeSet::new();
        for (truncate, tokens) in writes {
            if truncate {
                model.clear();
            }
            let mode = if truncate { WriteMode::Truncate } else { WriteMode::Append };
            let mut edit = FilterDraft::open(FilterFile::Filter, &set, mode);
            for (not, toks) in tokens {
                let pat = render(&toks);
                let text = if not { format!("!{pat} ") } else { format!("{pat} ") };
                let hits: Vec<u64> = names
                    .iter()
                    .filter(|n| ref_match(&toks, n.as_bytes()))
                    .map(|n| addr(n))
                    .collect();
                let res = edit.write_all(&text, &env, &mut probes);
                if hits.is_empty() {
                    prop_assert_eq!(res, Err(Errno::EINVAL), "{}", text);
                } else {
                    prop_assert_eq!(res, Ok(()), "{}", text);
                    for h in hits {
                        if not { model.remove(&h); } else { model.insert(h); }
                    }
                }
            }
            let (new_set, res) = edit.close(&env, &mut probes);
            prop_assert_eq!(res, Ok(()));
            set = new_set;
            let got: BTreeSet<u64> = set.ips().collect();
            prop_assert_eq!(&got, &model);
            let hash = set.to_hash();
            for i in 0..names.len() as u64 {
                let ip = 0x1000 + 0x10 * i;
                prop_assert_eq!(hash.contains(ip), model.contains(&ip));
            }
        }
        prop_assert!(probes.is_empty());
    }

    /// `FtraceHash` behaves as a set under inserts and removes.
    #[test]
    fn hash_is_a_set(ops in prop::collection::vec((any::<bool>(), 1u64..200), 0..400)) {
        let mut h = FtraceHash::EMPTY;
        let mut m = BTreeSet::new();
        for (insert, ip) in ops {
            let ip = ip.wrapping_mul(0x1_0000_0010);
            if insert {
                prop_assert_eq!(h.insert(ip).unwrap(), m.insert(ip));
            } else {
                prop_assert_eq!(h.remove(ip), m.remove(&ip));
            }
            prop_assert_eq!(h.len(), m.len());
        }
        for ip in 1u64..200 {
            let ip = ip.wrapping_mul(0x1_0000_0010);
            prop_assert_eq!(h.contains(ip), m.contains(&ip));
        }
        let mut all: Vec<u64> = h.iter().collect();
        all.sort();
        prop_assert_eq!(all, m.into_iter().collect::<Vec<_>>());
    }

    /// `kstrtoul` agrees with `from_str_radix` on decimal and hex.
    #[test]
    fn kstrtoul_numbers(v in any::<u64>()) {
        prop_assert_eq!(kstrtoul(&v.to_string()), Ok(v));
        prop_assert_eq!(kstrtoul(&format!("{v:#x}")), Ok(v));
        prop_assert_eq!(kstrtoul(&format!("{v}\n")), Ok(v));
        prop_assert_eq!(kstrtoul(&format!("{v}9999999999999999999")), Err(Errno::ERANGE));
        prop_assert_eq!(kstrtoul(&format!("{v}z")), Err(Errno::EINVAL));
    }
}
