//! `nop`: the tracer that traces nothing. Events (markers, trace events) are still recorded
//! and printed with the default header.
//!
//! Like the kernel's, it owns two options used by the tracer selftests: `test_nop_accept`
//! (changes are accepted) and `test_nop_refuse` (changes are refused with `EINVAL`).

use ftrace_core::Errno;

use crate::options::TracerOpt;
use crate::tracer::Tracer;

/// `test_nop_accept`.
pub const NOP_OPT_ACCEPT: u32 = 0x1;
/// `test_nop_refuse`.
pub const NOP_OPT_REFUSE: u32 = 0x2;

/// The `nop` tracer.
#[derive(Clone, Copy, Debug, Default)]
pub struct NopTracer;

impl Tracer for NopTracer {
    fn name(&self) -> &'static str {
        "nop"
    }
    fn options(&self) -> &'static [TracerOpt] {
        const OPTS: [TracerOpt; 2] = [
            TracerOpt {
                name: "test_nop_accept",
                bit: NOP_OPT_ACCEPT,
            },
            TracerOpt {
                name: "test_nop_refuse",
                bit: NOP_OPT_REFUSE,
            },
        ];
        &OPTS
    }
    fn set_flag(&self, _flags: u32, bit: u32, _on: bool) -> Result<(), Errno> {
        if bit == NOP_OPT_REFUSE {
            Err(Errno::EINVAL)
        } else {
            Ok(())
        }
    }
    fn allow_instances(&self) -> bool {
        true
    }
}
