//! Function-name globs as `set_ftrace_filter` accepts them: `*` (any run), `?` (one character),
//! `[...]` (a class, `!` or `^` negates, `a-z` ranges) and `\` escapes.
//!
//! Invariant: matching never allocates and runs in O(pattern × name) time (backtracking only to
//! the last `*`), so a filter over tens of thousands of symbols stays fast.

/// Whether `name` matches `pattern` as a whole.
pub fn matches(pattern: &str, name: &str) -> bool {
    let p = pattern.as_bytes();
    let n = name.as_bytes();
    let (mut pi, mut ni) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() {
            match p[pi] {
                b'*' => {
                    star = Some((pi, ni));
                    pi += 1;
                    continue;
                }
                b'?' => {
                    pi += 1;
                    ni += 1;
                    continue;
                }
                b'[' => {
                    if let Some((ok, next)) = class(p, pi, n[ni]) {
                        if ok {
                            pi = next;
                            ni += 1;
                            continue;
                        }
                    } else if n[ni] == b'[' {
                        pi += 1;
                        ni += 1;
                        continue;
                    }
                }
                b'\\' if pi + 1 < p.len() => {
                    if p[pi + 1] == n[ni] {
                        pi += 2;
                        ni += 1;
                        continue;
                    }
                }
                c => {
                    if c == n[ni] {
                        pi += 1;
                        ni += 1;
                        continue;
                    }
                }
            }
        }
        match star {
            Some((sp, sn)) => {
                pi = sp + 1;
                ni = sn + 1;
                star = Some((sp, sn + 1));
            }
            None => return false,
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// Matches `c` against the class starting at `p[start] == b'['`: `(matched, index after ])`,
/// or `None` if the class is not closed.
fn class(p: &[u8], start: usize, c: u8) -> Option<(bool, usize)> {
    let mut i = start + 1;
    let negate = matches!(p.get(i), Some(b'!' | b'^'));
    if negate {
        i += 1;
    }
    let mut hit = false;
    let mut first = true;
    while i < p.len() {
        if p[i] == b']' && !first {
            return Some((hit != negate, i + 1));
        }
        first = false;
        let lo = p[i];
        if i + 2 < p.len() && p[i + 1] == b'-' && p[i + 2] != b']' {
            if (lo..=p[i + 2]).contains(&c) {
                hit = true;
            }
            i += 3;
        } else {
            if lo == c {
                hit = true;
            }
            i += 1;
        }
    }
    None
}

/// Whether `name` matches any of `patterns`.
pub fn any_matches(patterns: &[String], name: &str) -> bool {
    patterns.iter().any(|p| matches(p, name))
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn literal_and_wildcards() {
        assert!(matches("fib", "fib"));
        assert!(!matches("fib", "fibo"));
        assert!(matches("fib*", "fibonacci"));
        assert!(matches("*fib", "my_fib"));
        assert!(matches("*fib*", "a_fib_b"));
        assert!(!matches("*fib*", "a_fob_b"));
        assert!(matches("f?b", "fab"));
        assert!(!matches("f?b", "fb"));
        assert!(matches("*", ""));
        assert!(matches("a*b*c", "aXbYbZc"));
        assert!(!matches("a*b*c", "aXbYbZ"));
    }

    #[test]
    fn classes_and_escapes() {
        assert!(matches("f[aeiou]b", "fib"));
        assert!(!matches("f[!aeiou]b", "fib"));
        assert!(matches("f[a-c]x", "fbx"));
        assert!(!matches("f[a-c]x", "fdx"));
        assert!(matches("a\\*b", "a*b"));
        assert!(!matches("a\\*b", "axb"));
        assert!(matches("ex::f<*>", "ex::f<u32>"));
    }
}
