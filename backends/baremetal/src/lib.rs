//! ftrace-rs on x86_64 bare metal: TSC clock, CPU ids, text writes, int3 patching and a serial
//! tracefs shell, exercised by a test kernel booted in QEMU.
//!
//! This backend is being built (see the project's bare-metal issue).
#![no_std]
