//! `nop`: the tracer that traces nothing. Events (markers, trace events) are still recorded
//! and printed with the default header.

use crate::tracer::Tracer;

/// The `nop` tracer.
#[derive(Clone, Copy, Debug, Default)]
pub struct NopTracer;

impl Tracer for NopTracer {
    fn name(&self) -> &'static str {
        "nop"
    }
    fn allow_instances(&self) -> bool {
        true
    }
}
