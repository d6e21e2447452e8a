//! Call-site discovery: the 5-byte NOPs the compiler put at function entries.
//!
//! rustc's `-Zpatchable-function-entry=5` (clang's `-fpatchable-function-entry=5`) starts each
//! function of the instrumented crate with a 5-byte NOP and records its address, one 8-byte
//! word per function, in the `__patchable_function_entries` section; the kernel's linker script
//! keeps that section and brackets it with start/stop symbols, and hands the slice to
//! [`SiteTable::new`]. Invariant: a site is only ever listed if its bytes are a recognised
//! 5-byte NOP at discovery time, so nothing else is ever patched.

use crate::text::read_text;

/// The NOP forms a patchable entry may hold: `nopl 0x0(%rax,%rax,1)` with any 8-bit
/// displacement (LLVM writes `0f 1f 44 00 08`, GNU as `0f 1f 44 00 00`).
pub fn is_nop5(b: [u8; 5]) -> bool {
    b[..4] == [0x0F, 0x1F, 0x44, 0x00]
}

/// The discovered, verified sites, sorted by address.
pub struct SiteTable {
    sites: &'static [u64],
    /// How many raw records did not hold a NOP (reported, not used).
    pub rejected: usize,
}

impl SiteTable {
    /// Takes the raw `__patchable_function_entries` records, sorts them and keeps the NOPs.
    ///
    /// # Safety
    /// `records` must be writable memory owned by the caller for `'static` (the table sorts it
    /// in place), and every record must be the address of mapped text or 0.
    pub unsafe fn new(records: &'static mut [u64]) -> Self {
        records.sort_unstable();
        let mut kept = 0;
        let mut rejected = 0;
        for i in 0..records.len() {
            let a = records[i];
            if a == 0 || (kept > 0 && records[kept - 1] == a) {
                continue;
            }
            // SAFETY: the caller guarantees records point into mapped text.
            let bytes = unsafe { read_text::<5>(a as usize) };
            if is_nop5(bytes) {
                records[kept] = a;
                kept += 1;
            } else {
                rejected += 1;
            }
        }
        let (sites, _) = records.split_at(kept);
        // SAFETY: re-borrowing the kept prefix immutably for 'static; nobody else holds it.
        let sites: &'static [u64] =
            unsafe { core::slice::from_raw_parts(sites.as_ptr(), sites.len()) };
        Self { sites, rejected }
    }

    /// The verified site addresses, ascending.
    pub fn sites(&self) -> &'static [u64] {
        self.sites
    }

    /// The index of the site at `addr`.
    pub fn index_of(&self, addr: u64) -> Option<usize> {
        self.sites.binary_search(&addr).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::boxed::Box;

    #[test]
    fn nop_forms() {
        assert!(is_nop5([0x0F, 0x1F, 0x44, 0x00, 0x00]));
        assert!(is_nop5([0x0F, 0x1F, 0x44, 0x00, 0x08]));
        assert!(!is_nop5([0xE8, 0, 0, 0, 0]));
        assert!(!is_nop5([0xCC, 0x1F, 0x44, 0x00, 0x00]));
    }

    #[test]
    fn table_sorts_dedups_and_rejects() {
        static NOPS: [u8; 10] = [0x0F, 0x1F, 0x44, 0x00, 0x08, 0x0F, 0x1F, 0x44, 0x00, 0x00];
        static CALL: [u8; 5] = [0xE8, 1, 2, 3, 4];
        let a = NOPS.as_ptr() as u64;
        let records = Box::leak(Box::new([a + 5, a, 0, a + 5, CALL.as_ptr() as u64]));
        // SAFETY: every non-zero record points at a readable static.
        let t = unsafe { SiteTable::new(records) };
        assert_eq!(t.sites(), &[a, a + 5]);
        assert_eq!(t.rejected, 1);
        assert_eq!(t.index_of(a + 5), Some(1));
        assert_eq!(t.index_of(a + 1), None);
    }
}
