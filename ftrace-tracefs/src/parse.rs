//! The kernel's parsers for what users write into control files.
//!
//! Every control file parses its write exactly as Linux does, because the accepted set *is* the
//! interface: `echo 2 > tracing_on` is accepted, `echo ' 1' > tracing_on` is not, and a number
//! longer than 22 characters is cut before it is parsed. Invariant: a parser never has side
//! effects; callers change state only after a parse succeeded.

use ftrace_core::Errno;

/// `kstrtoul_from_user` copies at most this many bytes (`sizeof(buf) - 1` for a 64-bit `long`).
pub const KSTRTOUL_MAX: usize = 22;

/// Parses an unsigned number the way `kstrtoull(s, base)` does.
///
/// Rules: an optional leading `+`; with base 16 an optional `0x`/`0X`; with base 0 the radix
/// comes from the prefix (`0x` hex, `0` octal, else decimal); at least one digit; then at most
/// one `\n` and nothing else. Overflow is `ERANGE`, anything else `EINVAL`.
pub fn kstrtoull(s: &[u8], base: u32) -> Result<u64, Errno> {
    let mut s = s;
    if let [b'+', rest @ ..] = s {
        s = rest;
    }
    let mut base = base;
    let has_hex_prefix =
        s.len() >= 3 && s[0] == b'0' && (s[1] | 0x20) == b'x' && s[2].is_ascii_hexdigit();
    if base == 0 {
        if has_hex_prefix {
            base = 16;
            s = &s[2..];
        } else if s.first() == Some(&b'0') {
            base = 8;
        } else {
            base = 10;
        }
    } else if base == 16 && has_hex_prefix {
        s = &s[2..];
    }
    let mut val: u64 = 0;
    let mut digits = 0;
    let mut overflow = false;
    while let Some(&c) = s.first() {
        let d = match c {
            b'0'..=b'9' => u32::from(c - b'0'),
            b'a'..=b'f' => u32::from(c - b'a') + 10,
            b'A'..=b'F' => u32::from(c - b'A') + 10,
            _ => break,
        };
        if d >= base {
            break;
        }
        match val
            .checked_mul(u64::from(base))
            .and_then(|v| v.checked_add(u64::from(d)))
        {
            Some(v) => val = v,
            None => overflow = true,
        }
        digits += 1;
        s = &s[1..];
    }
    if digits == 0 {
        return Err(Errno::EINVAL);
    }
    if overflow {
        return Err(Errno::ERANGE);
    }
    if let [b'\n', rest @ ..] = s {
        s = rest;
    }
    if !s.is_empty() {
        return Err(Errno::EINVAL);
    }
    Ok(val)
}

/// `kstrtoul_from_user(buf, count, base)`: the write is cut to [`KSTRTOUL_MAX`] bytes (and at a
/// NUL, as the kernel's C string would be) and parsed with [`kstrtoull`].
pub fn kstrtoul_from_user(data: &[u8], base: u32) -> Result<u64, Errno> {
    let cut = &data[..data.len().min(KSTRTOUL_MAX)];
    let end = cut.iter().position(|&b| b == 0).unwrap_or(cut.len());
    kstrtoull(&cut[..end], base)
}

/// `isspace()` of the kernel's `ctype` (space, `\t`, `\n`, `\v`, `\f`, `\r`).
pub const fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// `strstrip()`: the slice without leading and trailing whitespace.
pub fn strstrip(s: &[u8]) -> &[u8] {
    let start = s.iter().position(|&b| !is_space(b)).unwrap_or(s.len());
    let end = s
        .iter()
        .rposition(|&b| !is_space(b))
        .map_or(start, |e| e + 1);
    &s[start..end]
}

/// The C-string view of a write: everything before the first NUL.
pub fn c_str(s: &[u8]) -> &[u8] {
    &s[..s.iter().position(|&b| b == 0).unwrap_or(s.len())]
}

/// The text of a short "name" write (`current_tracer`, `trace_clock`, `trace_options`): the kernel
/// copies it into a `max`-byte buffer (`cnt >= max` → `EINVAL`) and strips whitespace.
pub fn short_name(data: &[u8], max: usize) -> Result<&[u8], Errno> {
    if data.len() >= max {
        return Err(Errno::EINVAL);
    }
    Ok(strstrip(c_str(data)))
}

/// `trace_get_user()` for a parser of `size` bytes that is fresh for every `write` (as
/// `set_event` uses it): skips leading whitespace, takes one token that ends at whitespace, a
/// NUL or the end of the data, and returns how many bytes it used and the token (empty if
/// there was only whitespace). A token longer than `size - 1` bytes is `EINVAL`.
pub fn trace_get_user(data: &[u8], size: usize) -> Result<(usize, &[u8]), Errno> {
    let Some(&first) = data.first() else {
        return Ok((0, &[]));
    };
    let mut ch = first;
    let mut read = 1;
    while read < data.len() && is_space(ch) {
        ch = data[read];
        read += 1;
    }
    if is_space(ch) || ch == 0 {
        return Ok((read, &[]));
    }
    let start = read - 1;
    let mut idx = 0;
    while read < data.len() && !is_space(ch) && ch != 0 {
        if idx + 1 < size {
            idx += 1;
        } else {
            return Err(Errno::EINVAL);
        }
        ch = data[read];
        read += 1;
    }
    if is_space(ch) || ch == 0 {
        Ok((read, &data[start..start + idx]))
    } else if idx + 1 < size {
        Ok((read, &data[start..=start + idx]))
    } else {
        Err(Errno::EINVAL)
    }
}

/// Parses a cpumask the way `bitmap_parse_user()` does: comma-separated groups of at most 8 hex
/// digits, least significant group last, ending at the first `\n`. Sets bits in `words`
/// (64-bit words, bit `n` = CPU `n`); a bit at or above `nbits` is `EOVERFLOW`.
#[cfg(feature = "alloc")]
pub fn parse_cpumask(data: &[u8], nbits: u32) -> Result<alloc::vec::Vec<u64>, Errno> {
    let text = c_str(data);
    let text = &text[..text.iter().position(|&b| b == b'\n').unwrap_or(text.len())];
    let nwords = (nbits as usize).div_ceil(64).max(1);
    let mut words = alloc::vec![0u64; nwords];
    if text.is_empty() {
        return Ok(words);
    }
    for (chunk_idx, group) in text.rsplit(|&b| b == b',').enumerate() {
        if group.is_empty() || group.len() > 8 {
            return Err(if group.is_empty() {
                Errno::EINVAL
            } else {
                Errno::EOVERFLOW
            });
        }
        let mut v: u32 = 0;
        for &c in group {
            let d = match c {
                b'0'..=b'9' => c - b'0',
                b'a'..=b'f' => c - b'a' + 10,
                b'A'..=b'F' => c - b'A' + 10,
                _ => return Err(Errno::EINVAL),
            };
            v = (v << 4) | u32::from(d);
        }
        for bit in 0..32 {
            if v & (1 << bit) != 0 {
                let n = chunk_idx as u64 * 32 + bit;
                if n >= u64::from(nbits) {
                    return Err(Errno::EOVERFLOW);
                }
                words[(n / 64) as usize] |= 1 << (n % 64);
            }
        }
    }
    Ok(words)
}

/// Writes a cpumask as `%*pb` does: 32-bit hex groups, most significant first, separated by
/// commas; the first group is as wide as the bits it holds, the others 8 digits.
pub fn write_cpumask(w: &mut dyn core::fmt::Write, words: &[u64], nbits: u32) -> core::fmt::Result {
    let nbits = nbits.max(1);
    let groups = nbits.div_ceil(32);
    for g in (0..groups).rev() {
        let word = words.get((g / 2) as usize).copied().unwrap_or(0);
        let mut v = (word >> ((g % 2) * 32)) as u32;
        let width = if g == groups - 1 {
            let rem = nbits - g * 32;
            if rem < 32 {
                v &= (1u32 << rem) - 1;
            }
            rem.div_ceil(4) as usize
        } else {
            8
        };
        if g != groups - 1 {
            w.write_char(',')?;
        }
        write!(w, "{v:0width$x}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kstrtoull_follows_the_kernel() {
        assert_eq!(kstrtoull(b"2\n", 10), Ok(2));
        assert_eq!(kstrtoull(b"+7", 10), Ok(7));
        assert_eq!(kstrtoull(b" 1", 10), Err(Errno::EINVAL));
        assert_eq!(kstrtoull(b"1\n\n", 10), Err(Errno::EINVAL));
        assert_eq!(kstrtoull(b"-1\n", 10), Err(Errno::EINVAL));
        assert_eq!(kstrtoull(b"\n", 10), Err(Errno::EINVAL));
        assert_eq!(kstrtoull(b"0x10", 10), Err(Errno::EINVAL));
        assert_eq!(kstrtoull(b"0x10", 0), Ok(16));
        assert_eq!(kstrtoull(b"010", 0), Ok(8));
        assert_eq!(kstrtoull(b"99999999999999999999", 10), Err(Errno::ERANGE));
        assert_eq!(kstrtoull(b"18446744073709551615", 10), Ok(u64::MAX));
    }

    #[test]
    fn from_user_cuts_at_22_bytes() {
        assert_eq!(
            kstrtoul_from_user(b"1                       ", 10),
            Err(Errno::EINVAL)
        );
        assert_eq!(kstrtoul_from_user(b"0000000000000000000001xyz", 10), Ok(1));
        assert_eq!(kstrtoul_from_user(b"1\0garbage", 10), Ok(1));
    }

    #[test]
    fn get_user_takes_one_token_per_write() {
        assert_eq!(trace_get_user(b"a:b c\n", 128), Ok((4, &b"a:b"[..])));
        assert_eq!(trace_get_user(b"c\n", 128), Ok((2, &b"c"[..])));
        assert_eq!(trace_get_user(b"  \n", 128), Ok((3, &b""[..])));
        assert_eq!(trace_get_user(b"  xy", 128), Ok((4, &b"xy"[..])));
        assert_eq!(trace_get_user(b"x\0y", 128), Ok((2, &b"x"[..])));
        assert_eq!(
            trace_get_user(&[b'a'; 127], 128),
            Ok((127, &[b'a'; 127][..]))
        );
        assert_eq!(trace_get_user(&[b'a'; 128], 128), Err(Errno::EINVAL));
        assert_eq!(trace_get_user(b"", 128), Ok((0, &b""[..])));
    }

    #[test]
    fn cpumask_round_trip() {
        let mut s = alloc::string::String::new();
        write_cpumask(&mut s, &[3], 2).unwrap();
        assert_eq!(s, "3");
        s.clear();
        write_cpumask(&mut s, &[u64::MAX], 36).unwrap();
        assert_eq!(s, "f,ffffffff");
        s.clear();
        write_cpumask(&mut s, &[1], 64).unwrap();
        assert_eq!(s, "00000000,00000001");
        assert_eq!(parse_cpumask(b"x\n", 2), Err(Errno::EINVAL));
        assert_eq!(parse_cpumask(b"2\n", 2), Ok(alloc::vec![2]));
        assert_eq!(parse_cpumask(b"4\n", 2), Err(Errno::EOVERFLOW));
        assert_eq!(parse_cpumask(b"1,00000000\n", 64), Ok(alloc::vec![1 << 32]));
        assert_eq!(parse_cpumask(b"1,,0", 64), Err(Errno::EINVAL));
    }
}
