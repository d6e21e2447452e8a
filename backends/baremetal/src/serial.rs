//! COM1: a polled 16550 UART at I/O port 0x3f8, the kernel's console and the shell's input.
//!
//! Invariant: output never depends on interrupts (everything polls the line-status register),
//! so it works from an exception handler with interrupts off. Writers on several CPUs take
//! `SERIAL_LOCK`; the fatal-exception path writes without it ([`Com1::force`]) so that a
//! fault while the lock is held still reports.

use core::fmt;

use crate::port::{inb, outb};
use crate::sync::{AtomicBool, Ordering};

const COM1: u16 = 0x3f8;
const LSR_DATA_READY: u8 = 0x01;
const LSR_THR_EMPTY: u8 = 0x20;

/// Serialises whole `print!` calls between CPUs.
static SERIAL_LOCK: AtomicBool = AtomicBool::new(false);

/// Initialises COM1: 115200 baud, 8N1, no FIFOs, no UART interrupts. Input received before
/// (typed ahead of boot) is kept.
pub fn init() {
    // SAFETY: the standard 16550 programming sequence on the COM1 ports, which QEMU's
    // `-serial` device (and every PC) decodes.
    unsafe {
        outb(COM1 + 1, 0x00); // no interrupts
        outb(COM1 + 3, 0x80); // DLAB on
        outb(COM1, 0x01); // divisor 1: 115200 baud
        outb(COM1 + 1, 0x00);
        outb(COM1 + 3, 0x03); // 8N1, DLAB off
        // FIFOs stay off: enabling them flushes the receiver, losing input typed ahead of
        // boot; polled byte-at-a-time I/O needs no FIFO (the host side buffers).
        outb(COM1 + 4, 0x03); // DTR | RTS
    }
}

/// Sends one byte (polls until the transmitter has room).
pub fn write_byte(b: u8) {
    // SAFETY: reading LSR and writing THR of COM1 only moves a byte out of the UART.
    unsafe {
        while inb(COM1 + 5) & LSR_THR_EMPTY == 0 {
            core::hint::spin_loop();
        }
        outb(COM1, b);
    }
}

/// A received byte, if one is waiting.
pub fn try_read_byte() -> Option<u8> {
    // SAFETY: reading LSR, then RBR when data is ready, pops one byte from the receive FIFO.
    unsafe { (inb(COM1 + 5) & LSR_DATA_READY != 0).then(|| inb(COM1)) }
}

/// Waits for a received byte.
pub fn read_byte() -> u8 {
    loop {
        if let Some(b) = try_read_byte() {
            return b;
        }
        core::hint::spin_loop();
    }
}

/// The console as a [`fmt::Write`]: `\n` goes out as `\r\n`.
pub struct Com1;

impl Com1 {
    /// Runs `f` with the console, holding the cross-CPU lock.
    pub fn with<R>(f: impl FnOnce(&mut Com1) -> R) -> R {
        while SERIAL_LOCK
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            core::hint::spin_loop();
        }
        let r = f(&mut Com1);
        SERIAL_LOCK.store(false, Ordering::Release);
        r
    }

    /// The console without the lock: for the fatal-exception report only (the faulting code may
    /// hold the lock and will never release it).
    pub fn force() -> Com1 {
        Com1
    }
}

impl fmt::Write for Com1 {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for b in s.bytes() {
            if b == b'\n' {
                write_byte(b'\r');
            }
            write_byte(b);
        }
        Ok(())
    }
}

/// Prints to COM1 (`format_args!` syntax).
#[macro_export]
macro_rules! print {
    ($($arg:tt)*) => {
        $crate::serial::Com1::with(|c| {
            let _ = core::fmt::Write::write_fmt(c, format_args!($($arg)*));
        })
    };
}

/// Prints a line to COM1 (`format_args!` syntax).
#[macro_export]
macro_rules! println {
    () => { $crate::print!("\n") };
    ($($arg:tt)*) => {
        $crate::serial::Com1::with(|c| {
            let _ = core::fmt::Write::write_fmt(c, format_args!($($arg)*));
            let _ = core::fmt::Write::write_str(c, "\n");
        })
    };
}
