//! The memory accounting of the record table that `dyn_ftrace_total_info` prints
//! (`ftrace_number_of_pages`, `ftrace_number_of_groups`, `ftrace_update_tot_cnt`).
//!
//! The kernel keeps records in groups of `2^order` pages (`struct ftrace_page`): for a text with
//! `n` `__mcount_loc` entries, `ftrace_allocate_pages()` allocates groups of
//! `order = fls(DIV_ROUND_UP(n, ENTRIES_PER_PAGE)) - 1` until every entry has room ("fill as much
//! as possible, with no empty pages"), then `ftrace_process_locs()` fills them with the entries
//! that are real sites (address 0, a discarded weak function, is skipped) and frees the groups
//! left unused.
//!
//! Invariant: [`PageStats`] counts exactly the groups and pages that are still allocated after
//! each text's records were placed, and the records converted at load time.

use core::fmt;

/// `sizeof(struct dyn_ftrace)` on 64-bit Linux: 16 bytes (this crate's records are 24).
pub const KERNEL_ENTRY_SIZE: usize = 16;

/// The counters behind `dyn_ftrace_total_info`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageStats {
    /// Bytes per page.
    pub page_size: usize,
    /// Bytes per record.
    pub entry_size: usize,
    /// `ftrace_update_tot_cnt`: records converted (initialised) so far.
    pub records: u64,
    /// `ftrace_number_of_pages`.
    pub pages: u64,
    /// `ftrace_number_of_groups`.
    pub groups: u64,
}

impl PageStats {
    /// No text yet; records of `entry_size` bytes in pages of `page_size` bytes.
    pub const fn new(page_size: usize, entry_size: usize) -> PageStats {
        PageStats {
            page_size,
            entry_size,
            records: 0,
            pages: 0,
            groups: 0,
        }
    }

    /// The kernel's numbers: 4 KiB pages, 16-byte records (256 per page).
    pub const fn kernel() -> PageStats {
        PageStats::new(4096, KERNEL_ENTRY_SIZE)
    }

    /// Records per page (`ENTRIES_PER_PAGE`).
    pub const fn entries_per_page(&self) -> usize {
        self.page_size / self.entry_size
    }

    /// Accounts one text (vmlinux or a module) with `entries` `__mcount_loc` entries of which
    /// `skipped` were not sites: allocates its groups, places `entries - skipped` records, frees
    /// the groups left empty. Returns the number of groups kept.
    pub fn add_text(&mut self, entries: usize, skipped: usize) -> usize {
        let per_page = self.entries_per_page().max(1);
        let mut left = entries;
        let mut to_place = entries.saturating_sub(skipped);
        let mut kept = 0;
        while left > 0 {
            let pages = left.div_ceil(per_page);
            let order = usize::BITS - 1 - pages.leading_zeros();
            let cap = (self.page_size << order) / self.entry_size;
            let cnt = cap.min(left);
            left -= cnt;
            if to_place > 0 {
                to_place -= to_place.min(cap);
                self.pages += 1 << order;
                self.groups += 1;
                kept += 1;
            }
        }
        self.records += entries.saturating_sub(skipped) as u64;
        kept
    }

    /// `dyn_ftrace_total_info` as Linux 6.12 prints it: `"%ld pages:%ld groups: %ld\n"`.
    pub fn write_total_info(&self, out: &mut dyn fmt::Write) -> fmt::Result {
        writeln!(
            out,
            "{} pages:{} groups: {}",
            self.records, self.pages, self.groups
        )
    }
}

impl Default for PageStats {
    fn default() -> Self {
        PageStats::kernel()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::String;

    fn info(p: &PageStats) -> String {
        let mut s = String::new();
        p.write_total_info(&mut s).unwrap();
        s
    }

    #[test]
    fn groups_fill_without_empty_pages() {
        let mut p = PageStats::kernel();
        assert_eq!(p.add_text(1, 0), 1);
        assert_eq!(info(&p), "1 pages:1 groups: 1\n");
        // 3 pages' worth: an order-1 group (512) then nothing left
        let mut p = PageStats::kernel();
        assert_eq!(p.add_text(513, 0), 2);
        assert_eq!((p.pages, p.groups), (3, 2));
        // one skipped entry leaves the second group empty: freed
        let mut p = PageStats::kernel();
        assert_eq!(p.add_text(513, 1), 1);
        assert_eq!(info(&p), "512 pages:2 groups: 1\n");
    }

    #[test]
    fn the_captured_kernel() {
        // Any vmlinux with 44801..=45056 `__mcount_loc` entries allocates groups of 128, 32 and
        // 16 pages; 42862 of them were functions in the capture.
        for entries in [44_801, 45_000, 45_056] {
            let mut p = PageStats::kernel();
            assert_eq!(p.add_text(entries, entries - 42_862), 3);
            assert_eq!(info(&p), "42862 pages:176 groups: 3\n");
        }
        // one entry fewer: the third group is half the size
        let mut p = PageStats::kernel();
        p.add_text(44_800, 44_800 - 42_862);
        assert_eq!(info(&p), "42862 pages:168 groups: 3\n");
        // more: a fourth group is allocated, and freed unused
        let mut p = PageStats::kernel();
        assert_eq!(p.add_text(45_057, 45_057 - 42_862), 3);
        assert_eq!(info(&p), "42862 pages:176 groups: 3\n");
    }
}
