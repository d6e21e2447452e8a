//! Trace clocks: the TSC (`local`, `x86-tsc`) and CLOCK_MONOTONIC (`mono`).
//!
//! Events store the raw TSC for `local` and `x86-tsc` (one `rdtsc`, ~12 ns cheaper than the vDSO
//! clock); the conversion to nanoseconds is calibrated from `(tsc, CLOCK_MONOTONIC)` pairs taken
//! as far apart as possible (agent start and the reader's own time, the TSC being invariant and
//! system-wide on the machines we support). Invariant: a pair is taken with the TSC read on both
//! sides of `clock_gettime` so its error is bounded by one `clock_gettime` call.

/// Reads the TSC.
#[inline(always)]
pub fn rdtsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc has no preconditions in user mode on Linux.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        mono_ns()
    }
}

/// CLOCK_MONOTONIC in nanoseconds.
#[inline]
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A simultaneous reading of the TSC and CLOCK_MONOTONIC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TscPair {
    /// The TSC.
    pub tsc: u64,
    /// CLOCK_MONOTONIC, ns.
    pub mono_ns: u64,
}

impl TscPair {
    /// Takes a pair now (the best of a few tries: the one with the shortest TSC window).
    pub fn now() -> Self {
        let mut best = (u64::MAX, TscPair { tsc: 0, mono_ns: 0 });
        for _ in 0..5 {
            let a = rdtsc();
            let m = mono_ns();
            let b = rdtsc();
            if b.wrapping_sub(a) < best.0 {
                best = (
                    b.wrapping_sub(a),
                    TscPair {
                        tsc: a + (b - a) / 2,
                        mono_ns: m,
                    },
                );
            }
        }
        best.1
    }
}

/// TSC to nanoseconds, calibrated from two pairs: `ns = base.mono_ns + (tsc - base.tsc) * mult
/// >> 32`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TscConversion {
    /// The reference pair.
    pub base: TscPair,
    /// Nanoseconds per tick, as a 32.32 fixed-point number.
    pub mult: u64,
}

impl TscConversion {
    /// Calibrates from two pairs (`a` earlier than `b`); `None` if they are too close.
    pub fn calibrate(a: TscPair, b: TscPair) -> Option<Self> {
        Self::spanning(a, b, 1_000_000)
    }

    /// The conversion for the events a run recorded between its start pair `a` and its exit
    /// pair `b`, however short the run: every event lies between the two, where the pairs'
    /// own error (tens of nanoseconds) bounds the conversion's; `None` when `b` is not after
    /// `a`. (With [`calibrate`](Self::calibrate)'s millisecond, a run shorter than that fell
    /// back to the reader's clock: each read of its recording gave times a nanosecond or so
    /// apart.)
    pub fn over_run(a: TscPair, b: TscPair) -> Option<Self> {
        Self::spanning(a, b, 1)
    }

    /// From `a` and `b` at least `min_ns` apart.
    fn spanning(a: TscPair, b: TscPair, min_ns: u64) -> Option<Self> {
        let dt = b.tsc.checked_sub(a.tsc)?;
        let dn = b.mono_ns.checked_sub(a.mono_ns)?;
        if dt == 0 || dn < min_ns {
            return None;
        }
        let mult = ((dn as u128) << 32) / dt as u128;
        Some(TscConversion {
            base: a,
            mult: u64::try_from(mult).ok()?,
        })
    }

    /// The rate in kHz (ticks per millisecond).
    pub fn khz(&self) -> u64 {
        ((1u128 << 32) * 1_000_000 / self.mult.max(1) as u128) as u64
    }

    /// Converts a TSC reading to CLOCK_MONOTONIC nanoseconds.
    pub fn to_ns(&self, tsc: u64) -> u64 {
        let d = tsc as i128 - self.base.tsc as i128;
        let ns = (d * self.mult as i128) >> 32;
        (self.base.mono_ns as i128 + ns).max(0) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversion_is_linear() {
        let a = TscPair {
            tsc: 1_000,
            mono_ns: 5_000_000_000,
        };
        let b = TscPair {
            tsc: 2_445_400_000 + 1_000,
            mono_ns: 6_000_000_000,
        };
        let c = TscConversion::calibrate(a, b).unwrap();
        assert_eq!(c.khz() / 100, 24_454);
        assert_eq!(c.to_ns(1_000), 5_000_000_000);
        assert!(c.to_ns(2_445_400_000 + 1_000).abs_diff(6_000_000_000) <= 1);
        assert!(c.to_ns(1_000 + 2_445_400).abs_diff(5_001_000_000) <= 1);
        assert!(TscConversion::calibrate(b, a).is_none());
    }

    /// A run's pairs convert exactly at both ends however close they are; `calibrate`
    /// wants a millisecond.
    #[test]
    fn a_short_run_converts_from_its_own_pairs() {
        let a = TscPair {
            tsc: 79_392_691_172_693,
            mono_ns: 30_535_573_732_220,
        };
        let b = TscPair {
            tsc: 79_392_693_761_678,
            mono_ns: 30_535_574_727_983,
        };
        assert!(TscConversion::calibrate(a, b).is_none(), "0.996 ms apart");
        let c = TscConversion::over_run(a, b).unwrap();
        assert_eq!(c.to_ns(a.tsc), a.mono_ns);
        assert!(c.to_ns(b.tsc).abs_diff(b.mono_ns) <= 1);
        assert!(TscConversion::over_run(b, a).is_none());
        assert!(TscConversion::over_run(a, a).is_none());
    }

    #[test]
    fn calibrates_against_the_real_clock() {
        let a = TscPair::now();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let b = TscPair::now();
        let c = TscConversion::calibrate(a, b).expect("20 ms apart");
        // Any machine we run on has a TSC between 100 MHz and 10 GHz.
        assert!((100_000..10_000_000).contains(&c.khz()), "{} kHz", c.khz());
        let m = TscPair::now();
        assert!(c.to_ns(m.tsc).abs_diff(m.mono_ns) < 1_000_000);
    }
}
