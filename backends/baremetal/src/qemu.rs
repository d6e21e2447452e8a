//! Leaving QEMU with a status: the `isa-debug-exit` device.
//!
//! Run QEMU with `-device isa-debug-exit,iobase=0xf4,iosize=0x04`. Writing `v` to port 0xf4
//! makes QEMU exit with status `(v << 1) | 1`, so [`Verdict::Pass`] gives 33 and
//! [`Verdict::Fail`] gives 35. A triple fault (with `-no-reboot`) exits with 0, and a runner
//! must therefore require exactly 33 *and* a `RESULT: PASS` line: nothing else is a pass.

use crate::port::outl;

/// The `iobase` the runner gives `isa-debug-exit`.
pub const DEBUG_EXIT_PORT: u16 = 0xf4;

/// QEMU's exit status for a pass.
pub const EXIT_PASS: i32 = 33;

/// QEMU's exit status for a failure.
pub const EXIT_FAIL: i32 = 35;

/// How the run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Everything checked out: QEMU exits with [`EXIT_PASS`].
    Pass,
    /// Something failed: QEMU exits with [`EXIT_FAIL`].
    Fail,
}

/// Prints the `RESULT:` line and leaves QEMU with the verdict's status.
pub fn exit(verdict: Verdict, why: &str) -> ! {
    use core::fmt::Write;
    let mut c = crate::serial::Com1::force();
    let word = match verdict {
        Verdict::Pass => "PASS",
        Verdict::Fail => "FAIL",
    };
    let _ = writeln!(c, "RESULT: {word} ({why})");
    let code = match verdict {
        Verdict::Pass => 0x10,
        Verdict::Fail => 0x11,
    };
    // SAFETY: port 0xf4 is QEMU's isa-debug-exit, which terminates the VM. Without the device
    // the write is ignored and we halt below.
    unsafe { outl(DEBUG_EXIT_PORT, code) };
    halt_forever()
}

/// Disables interrupts and halts this CPU for good.
pub fn halt_forever() -> ! {
    loop {
        // SAFETY: cli; hlt only stops this CPU.
        unsafe { core::arch::asm!("cli", "hlt", options(nomem, nostack)) };
    }
}
