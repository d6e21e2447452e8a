//! The trace clock: the TSC, calibrated once against the PIT and converted to nanoseconds.
//!
//! Calibration ([`calibrate_pit`]) gates PIT channel 2 (1.193182 MHz, mode 0) for
//! [`CALIBRATION_PIT_TICKS`] ticks (about 10 ms) and counts TSC cycles until its output goes high
//! (port 0x61 bit 5); the shortest of three runs wins, as an interrupted or descheduled run only
//! lengthens. Under QEMU TCG the TSC runs at the host's TSC rate and the PIT follows the host's
//! clock, so the result is the real rate; if it is outside 100 MHz..20 GHz (no PIT),
//! [`FALLBACK_TSC_HZ`] (1 GHz) is used and said so.
//!
//! Conversion: `ns = cycles * mult >> shift` with `mult < 2^32`, evaluated in two 32-bit halves
//! so it needs no 128-bit arithmetic ([`TscScale`]). Invariant: the clock is monotonic on a CPU
//! because the TSC is (invariant TSC) and the conversion is monotonic in `cycles`.

use ftrace_core::platform::TraceClock;

use crate::cpu::BareMetal;
use crate::port::{inb, outb, rdtsc};
use crate::sync::{AtomicU32, AtomicU64, Ordering};

/// The PIT's input clock.
pub const PIT_HZ: u64 = 1_193_182;

/// PIT ticks per calibration run (10 ms).
pub const CALIBRATION_PIT_TICKS: u16 = 11_932;

/// The rate assumed when the PIT gives no usable answer.
pub const FALLBACK_TSC_HZ: u64 = 1_000_000_000;

/// A cycles-to-nanoseconds conversion: `ns = cycles * mult >> shift`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TscScale {
    /// Multiplier, below 2^32.
    pub mult: u32,
    /// Right shift, at most 32.
    pub shift: u32,
}

impl TscScale {
    /// The most precise scale for a counter running at `hz` (≥ 1 Hz): the largest shift whose
    /// multiplier still fits in 32 bits.
    pub const fn for_hz(hz: u64) -> Self {
        let mut shift = 32;
        loop {
            let mult = (1_000_000_000u64 << shift) / hz;
            if mult <= u32::MAX as u64 || shift == 0 {
                return TscScale {
                    mult: mult as u32,
                    shift,
                };
            }
            shift -= 1;
        }
    }

    /// Converts a cycle count to nanoseconds without 128-bit arithmetic.
    #[inline]
    pub const fn cycles_to_ns(self, cycles: u64) -> u64 {
        let mult = self.mult as u64;
        let hi = (cycles >> 32) * mult; // < 2^64: both factors < 2^32
        let lo = ((cycles & 0xffff_ffff) * mult) >> self.shift;
        (hi << (32 - self.shift)).wrapping_add(lo)
    }
}

/// What calibration found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Calibration {
    /// TSC cycles per second in use.
    pub tsc_hz: u64,
    /// Whether that rate was measured (false: [`FALLBACK_TSC_HZ`]).
    pub measured: bool,
}

static BASE_CYCLES: AtomicU64 = AtomicU64::new(0);
static MULT: AtomicU32 = AtomicU32::new(1);
static SHIFT: AtomicU32 = AtomicU32::new(0);
static TSC_HZ: AtomicU64 = AtomicU64::new(0);

/// Measures the TSC rate against PIT channel 2 and makes it the trace clock's; time 0 is now.
///
/// Call once at boot, on the boot CPU, before tracing starts.
pub fn calibrate_pit() -> Calibration {
    let mut best = u64::MAX;
    for _ in 0..3 {
        best = best.min(pit_run(CALIBRATION_PIT_TICKS));
    }
    let hz = best.saturating_mul(PIT_HZ) / CALIBRATION_PIT_TICKS as u64;
    let cal = if (100_000_000..=20_000_000_000).contains(&hz) {
        Calibration {
            tsc_hz: hz,
            measured: true,
        }
    } else {
        Calibration {
            tsc_hz: FALLBACK_TSC_HZ,
            measured: false,
        }
    };
    set_rate(cal.tsc_hz);
    cal
}

/// Uses `hz` as the TSC rate and restarts time 0 at now.
pub fn set_rate(hz: u64) {
    let s = TscScale::for_hz(hz.max(1));
    MULT.store(s.mult, Ordering::Relaxed);
    SHIFT.store(s.shift, Ordering::Relaxed);
    TSC_HZ.store(hz, Ordering::Relaxed);
    BASE_CYCLES.store(rdtsc(), Ordering::Release);
}

/// The TSC rate in use (0 before calibration).
pub fn tsc_hz() -> u64 {
    TSC_HZ.load(Ordering::Relaxed)
}

/// One gated PIT channel-2 countdown of `ticks`; returns the TSC cycles it took.
fn pit_run(ticks: u16) -> u64 {
    // SAFETY: ports 0x61 (gate/speaker control), 0x43 (PIT mode) and 0x42 (channel 2 count)
    // drive only PIT channel 2, which nothing else here uses; the speaker stays off (bit 1 = 0).
    unsafe {
        let ctl = inb(0x61);
        outb(0x61, (ctl & !0x02) | 0x01); // gate high, speaker off
        outb(0x43, 0xB0); // channel 2, lobyte/hibyte, mode 0, binary
        outb(0x42, ticks as u8);
        outb(0x42, (ticks >> 8) as u8);
        let t0 = rdtsc();
        let mut spins = 0u64;
        while inb(0x61) & 0x20 == 0 {
            spins += 1;
            if spins > 50_000_000 {
                break; // no PIT: the caller falls back
            }
        }
        let t1 = rdtsc();
        outb(0x61, ctl);
        t1.wrapping_sub(t0)
    }
}

impl TraceClock for BareMetal {
    /// Nanoseconds since calibration, like Linux's `local` clock (a per-CPU TSC-based clock).
    const NAME: &'static str = "local";

    #[inline]
    fn now_ns(&self) -> u64 {
        let scale = TscScale {
            mult: MULT.load(Ordering::Relaxed),
            shift: SHIFT.load(Ordering::Relaxed),
        };
        scale.cycles_to_ns(rdtsc().saturating_sub(BASE_CYCLES.load(Ordering::Relaxed)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_matches_exact_division() {
        for hz in [
            1_000_000u64,
            100_000_000,
            999_999_937,
            1_000_000_000,
            2_400_000_000,
            3_417_000_000,
            20_000_000_000,
        ] {
            let s = TscScale::for_hz(hz);
            assert!(s.shift <= 32);
            for cycles in [
                0u64,
                1,
                12_345,
                hz,
                hz * 3 + 17,
                hz * 3_600,
                hz * 86_400 * 30,
            ] {
                let exact = (cycles as u128 * 1_000_000_000 / hz as u128) as u64;
                let got = s.cycles_to_ns(cycles);
                // Error: truncation of mult (relative 1/mult) plus rounding of the two halves.
                let tol = exact / s.mult as u64 + 2;
                assert!(s.mult >= 1 << 27, "hz {hz}: mult {} too coarse", s.mult);
                assert!(
                    got.abs_diff(exact) <= tol,
                    "hz {hz} cycles {cycles}: {got} vs {exact}"
                );
            }
        }
    }

    #[test]
    fn scale_is_monotonic() {
        let s = TscScale::for_hz(2_900_000_123);
        let mut last = 0;
        for c in (0u64..1 << 40).step_by((1 << 40) / 5000 + 7) {
            let ns = s.cycles_to_ns(c);
            assert!(ns >= last);
            last = ns;
        }
    }
}
