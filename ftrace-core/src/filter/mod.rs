//! What the filter files of `set_ftrace_filter`, `set_ftrace_notrace`, `set_graph_function`
//! and `set_graph_notrace` are made of, and the hash they fill. The language itself (one open
//! of a file, `>` or `>>`, token by token, commands, `:mod:`, read-back) is ftrace-tracefs's
//! `filter_edit`, next to the files it parses.
//!
//! - [`FtraceHash`]: the ip set an ops filters on (no allocation needed).
//! - [`Glob`]: one parsed pattern (`filter_parse_regex`): `name`, `foo*`, `*foo`, `*foo*`, a
//!   full glob (`f*o`, `?`, `[a-z]`, `\`), or a 1-based index into
//!   `available_filter_functions`; matching as `ftrace_match` / `glob_match` do.
//! - [`kstrtoul`], [`simple_strtoul`], [`tokens`]: the kernel's number and token rules.
//! - [`probe`]: running the function commands (`traceon`, `traceoff`, `stacktrace`,
//!   `snapshot`, `enable_event`, `disable_event`, `dump`, `cpudump`) when their function is
//!   hit (`trace_probe_ops`), with the kernel's count rules on atomic counts the table that
//!   lists them reads back.
//!
//! Invariant: patterns resolve against a [`SymbolTable`](crate::symbols::SymbolTable) in its
//! listing order.

mod hash;
pub use hash::FtraceHash;

pub mod probe;
pub use probe::{ProbeActions, ProbeCommand, ProbeCount, run_probe};
#[cfg(feature = "alloc")]
pub use probe::{ProbeRunner, RunProbe};

use crate::errno::Errno;

/// How a pattern matches (`enum regex_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MatchType {
    /// `name`: the whole name (`MATCH_FULL`).
    Full,
    /// `foo*`: a prefix (`MATCH_FRONT_ONLY`).
    FrontOnly,
    /// `*foo*`: a substring (`MATCH_MIDDLE_ONLY`).
    MiddleOnly,
    /// `*foo`: a suffix (`MATCH_END_ONLY`).
    EndOnly,
    /// Anything else with `*`, `?`, `[` or `\`: `glob_match()` (`MATCH_GLOB`).
    Glob,
    /// Starts with a digit: a 1-based index into the function list (`MATCH_INDEX`).
    Index,
}

/// One parsed pattern (`struct ftrace_glob` plus the `not` flag).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Glob<'a> {
    /// How it matches.
    pub kind: MatchType,
    /// The search string: the pattern without its leading `!`, and without the `*`s that
    /// `kind` implies (whole pattern for [`MatchType::Glob`]).
    pub search: &'a str,
    /// Whether the pattern began with `!` (remove instead of add).
    pub not: bool,
}

impl<'a> Glob<'a> {
    /// `filter_parse_regex()`.
    pub fn parse(pattern: &'a str) -> Glob<'a> {
        let (not, buff) = match pattern.strip_prefix('!') {
            Some(rest) => (true, rest),
            None => (false, pattern),
        };
        let b = buff.as_bytes();
        if b.first().is_some_and(u8::is_ascii_digit) {
            return Glob {
                kind: MatchType::Index,
                search: buff,
                not,
            };
        }
        let mut kind = MatchType::Full;
        let mut end = b.len();
        for (i, &c) in b.iter().enumerate() {
            if c == b'*' {
                if i == 0 {
                    kind = MatchType::EndOnly;
                } else if i == b.len() - 1 {
                    kind = if kind == MatchType::EndOnly {
                        MatchType::MiddleOnly
                    } else {
                        MatchType::FrontOnly
                    };
                    end = i;
                    break;
                } else {
                    return Glob {
                        kind: MatchType::Glob,
                        search: buff,
                        not,
                    };
                }
            } else if matches!(c, b'[' | b'?' | b'\\') {
                return Glob {
                    kind: MatchType::Glob,
                    search: buff,
                    not,
                };
            }
        }
        let start = usize::from(b.first() == Some(&b'*')).min(end);
        Glob {
            kind,
            search: &buff[start..end],
            not,
        }
    }

    /// `ftrace_match()`: whether a function called `name` matches. An index pattern matches
    /// no name (it selects by position, see [`Glob::index`]).
    pub fn matches(&self, name: &str) -> bool {
        let s = self.search;
        match self.kind {
            MatchType::Full => name == s,
            MatchType::FrontOnly => name.starts_with(s),
            MatchType::MiddleOnly => name.contains(s),
            MatchType::EndOnly => name.ends_with(s),
            MatchType::Glob => glob_match(s.as_bytes(), name.as_bytes()),
            MatchType::Index => false,
        }
    }

    /// For an index pattern, the 0-based position it selects (`simple_strtoul(.., 0) - 1`);
    /// `None` for index 0 or another kind.
    pub fn index(&self) -> Option<u64> {
        match self.kind {
            MatchType::Index => simple_strtoul(self.search).checked_sub(1),
            _ => None,
        }
    }
}

/// `glob_match()` (`lib/glob.c`): `*` any run, `?` any one character, `[...]` a class with
/// ranges and a leading `!` for negation (a malformed class matches `[` literally), `\` quotes
/// the next character. Bytes, not characters; the whole string must match.
pub fn glob_match(pat: &[u8], s: &[u8]) -> bool {
    let (mut p, mut i) = (0usize, 0usize);
    let mut back: Option<(usize, usize)> = None;
    let at = |v: &[u8], k: usize| v.get(k).copied().unwrap_or(0);
    loop {
        let c = at(s, i);
        i += 1;
        let d = at(pat, p);
        p += 1;
        let mut literal = d;
        let matched = match d {
            b'?' => {
                if c == 0 {
                    return false;
                }
                true
            }
            b'*' => {
                if at(pat, p) == 0 {
                    return true;
                }
                i -= 1;
                back = Some((p, i));
                true
            }
            b'[' => {
                if c == 0 {
                    return false;
                }
                match glob_class(pat, p, c) {
                    Some((true, next)) => {
                        p = next;
                        true
                    }
                    Some((false, _)) => false,
                    None => {
                        literal = b'[';
                        c == literal
                    }
                }
            }
            _ => {
                if d == b'\\' {
                    literal = at(pat, p);
                    p += 1;
                }
                if c == literal {
                    if literal == 0 {
                        return true;
                    }
                    true
                } else {
                    false
                }
            }
        };
        if !matched {
            // backtrack
            match back {
                Some((bp, bs)) if c != 0 => {
                    p = bp;
                    i = bs + 1;
                    back = Some((bp, bs + 1));
                }
                _ => return false,
            }
        }
    }
}

/// Matches `c` against the class starting at `pat[p]` (just past `[`): `Some((matched, index
/// past the closing bracket))`, or `None` if the class is malformed (no closing `]`).
fn glob_class(pat: &[u8], p: usize, c: u8) -> Option<(bool, usize)> {
    let at = |k: usize| pat.get(k).copied().unwrap_or(0);
    let inverted = at(p) == b'!';
    let mut k = p + usize::from(inverted);
    let mut a = at(k);
    k += 1;
    let mut matched = false;
    loop {
        let mut b = a;
        if a == 0 {
            return None;
        }
        if at(k) == b'-' && at(k + 1) != b']' {
            b = at(k + 1);
            if b == 0 {
                return None;
            }
            k += 2;
        }
        matched |= a <= c && c <= b;
        a = at(k);
        k += 1;
        if a == b']' {
            break;
        }
    }
    Some((matched != inverted, k))
}

/// `isspace()` of the kernel's `ctype`: space, `\t`, `\n`, `\v`, `\f`, `\r`.
#[inline]
pub fn is_kernel_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// The whitespace-separated tokens of `text`, as `trace_get_user` splits them (a NUL also
/// ends a token).
pub fn tokens(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| c.is_ascii() && (is_kernel_space(c as u8) || c == '\0'))
        .filter(|t| !t.is_empty())
}

/// Splits a number's radix prefix as `_parse_integer_fixup_radix(s, 0)` does.
fn radix_of(s: &[u8]) -> (u32, usize) {
    if s.first() == Some(&b'0') {
        if s.get(1).is_some_and(|c| c.eq_ignore_ascii_case(&b'x'))
            && s.get(2).is_some_and(u8::is_ascii_hexdigit)
        {
            (16, 2)
        } else {
            (8, 0)
        }
    } else {
        (10, 0)
    }
}

/// `kstrtoul(s, 0)`: the whole string must be a number (decimal, `0x` hex, leading-`0` octal,
/// optional leading `+`, one trailing newline allowed). `EINVAL` if not, `ERANGE` on overflow.
pub fn kstrtoul(s: &str) -> Result<u64, Errno> {
    let mut b = s.as_bytes();
    if let Some(rest) = b.strip_prefix(b"+") {
        b = rest;
    }
    let (radix, skip) = radix_of(b);
    let b = &b[skip..];
    let mut val: u64 = 0;
    let mut n = 0;
    let mut overflow = false;
    for &c in b {
        let Some(d) = (c as char).to_digit(16).filter(|&d| d < radix) else {
            break;
        };
        match val
            .checked_mul(u64::from(radix))
            .and_then(|v| v.checked_add(u64::from(d)))
        {
            Some(v) => val = v,
            None => overflow = true,
        }
        n += 1;
    }
    if n == 0 {
        return Err(Errno::EINVAL);
    }
    if overflow {
        return Err(Errno::ERANGE);
    }
    match &b[n..] {
        [] | [b'\n'] => Ok(val),
        _ => Err(Errno::EINVAL),
    }
}

/// `simple_strtoul(s, NULL, 0)`: the longest numeric prefix (radix as [`kstrtoul`]), 0 if none;
/// overflow wraps as the kernel's does.
pub fn simple_strtoul(s: &str) -> u64 {
    let b = s.as_bytes();
    let (radix, skip) = radix_of(b);
    let mut val: u64 = 0;
    for &c in &b[skip..] {
        let Some(d) = (c as char).to_digit(16).filter(|&d| d < radix) else {
            break;
        };
        val = val
            .wrapping_mul(u64::from(radix))
            .wrapping_add(u64::from(d));
    }
    val
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn parse_kinds() {
        let g = Glob::parse("vfs_read");
        assert_eq!(
            (g.kind, g.search, g.not),
            (MatchType::Full, "vfs_read", false)
        );
        let g = Glob::parse("!vfs_*");
        assert_eq!(
            (g.kind, g.search, g.not),
            (MatchType::FrontOnly, "vfs_", true)
        );
        let g = Glob::parse("*_read");
        assert_eq!((g.kind, g.search), (MatchType::EndOnly, "_read"));
        let g = Glob::parse("*sys*");
        assert_eq!((g.kind, g.search), (MatchType::MiddleOnly, "sys"));
        let g = Glob::parse("v*d");
        assert_eq!((g.kind, g.search), (MatchType::Glob, "v*d"));
        let g = Glob::parse("*a*b");
        assert_eq!((g.kind, g.search), (MatchType::Glob, "*a*b"));
        assert_eq!(Glob::parse("*").search, "");
        assert_eq!(Glob::parse("*").kind, MatchType::EndOnly);
        assert_eq!(Glob::parse("**").kind, MatchType::MiddleOnly);
        assert_eq!(Glob::parse("12").index(), Some(11));
        assert_eq!(Glob::parse("0").index(), None);
        assert_eq!(Glob::parse("vfs_rea?").kind, MatchType::Glob);
    }

    #[test]
    fn matching() {
        assert!(Glob::parse("vfs_*").matches("vfs_read"));
        assert!(!Glob::parse("vfs_*").matches("ksys_read"));
        assert!(Glob::parse("*read").matches("ksys_read"));
        assert!(Glob::parse("*sys*").matches("do_sys_openat2"));
        assert!(Glob::parse("*").matches("anything"));
        assert!(Glob::parse("v*_r?ad").matches("vfs_read"));
        assert!(Glob::parse("[a-v]fs_read").matches("vfs_read"));
        assert!(!Glob::parse("[!v]fs_read").matches("vfs_read"));
        assert!(Glob::parse("a\\*b").matches("a*b"));
        assert!(!Glob::parse("a\\*b").matches("axb"));
        assert!(glob_match(b"[abc", b"[abc"));
        assert!(glob_match(b"*a*b*c", b"xxaxxbxxc"));
        assert!(!glob_match(b"*a*b*c", b"xxaxxbxx"));
        assert!(glob_match(b"[]]", b"]"));
        assert!(glob_match(b"[a-]", b"-"));
    }

    #[test]
    fn numbers() {
        assert_eq!(kstrtoul("10"), Ok(10));
        assert_eq!(kstrtoul("0x1f"), Ok(31));
        assert_eq!(kstrtoul("010"), Ok(8));
        assert_eq!(kstrtoul("+5\n"), Ok(5));
        assert_eq!(kstrtoul("0"), Ok(0));
        assert_eq!(kstrtoul(""), Err(Errno::EINVAL));
        assert_eq!(kstrtoul("5x"), Err(Errno::EINVAL));
        assert_eq!(kstrtoul("-1"), Err(Errno::EINVAL));
        assert_eq!(kstrtoul("09"), Err(Errno::EINVAL));
        assert_eq!(kstrtoul("18446744073709551616"), Err(Errno::ERANGE));
        assert_eq!(simple_strtoul("12abc"), 12);
        assert_eq!(simple_strtoul("0x10"), 16);
        assert_eq!(simple_strtoul("abc"), 0);
        let t: alloc::vec::Vec<&str> = tokens("  a\tb\n\nc ").collect();
        assert_eq!(t, ["a", "b", "c"]);
    }
}
