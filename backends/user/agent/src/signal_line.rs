//! Text from a signal handler: [`SignalLine`], built in a fixed buffer (no allocation, no
//! lock) and written with one `write(2)`.

/// A line built in a signal handler: a fixed buffer, truncated when full.
pub struct SignalLine {
    buf: [u8; 256],
    len: usize,
}

impl Default for SignalLine {
    fn default() -> Self {
        Self::new()
    }
}

impl SignalLine {
    /// An empty line.
    pub fn new() -> Self {
        Self {
            buf: [0; 256],
            len: 0,
        }
    }

    /// Appends bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        let n = bytes.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&bytes[..n]);
        self.len += n;
    }

    /// Appends `v` in hexadecimal, `0x`-prefixed.
    pub fn hex(&mut self, v: u64) {
        let mut digits = [0u8; 16];
        self.push(b"0x");
        self.push(hex_digits(v, &mut digits));
    }

    /// Appends `v` in decimal.
    pub fn dec(&mut self, v: i64) {
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        let mut u = v.unsigned_abs();
        loop {
            i -= 1;
            digits[i] = b'0' + (u % 10) as u8;
            u /= 10;
            if u == 0 {
                break;
            }
        }
        if v < 0 {
            self.push(b"-");
        }
        self.push(&digits[i..]);
    }

    /// Writes the line to stderr with one `write`.
    pub fn write_stderr(&self) {
        // SAFETY: writing our own buffer to stderr (async-signal-safe).
        unsafe { libc::write(2, self.buf.as_ptr().cast(), self.len) };
    }
}

/// `v`'s lowercase hexadecimal digits, as `{:x}` writes them: the end of `digits`, written
/// there (no allocation: a signal handler's line uses it too).
pub(crate) fn hex_digits(mut v: u64, digits: &mut [u8; 16]) -> &[u8] {
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b"0123456789abcdef"[(v & 15) as usize];
        v >>= 4;
        if v == 0 {
            break;
        }
    }
    &digits[i..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_line_formats_numbers_and_truncates() {
        let mut l = SignalLine::new();
        l.hex(0);
        l.push(b" ");
        l.hex(0x7f00_dead_beef);
        l.push(b" ");
        l.dec(-6);
        l.push(b" ");
        l.dec(128);
        assert_eq!(&l.buf[..l.len], b"0x0 0x7f00deadbeef -6 128");
        for _ in 0..100 {
            l.push(b"xxxxx");
        }
        assert_eq!(l.len, 256);
    }
}
