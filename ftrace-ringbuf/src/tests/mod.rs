//! Unit tests that need the crate internals (fault injection).
