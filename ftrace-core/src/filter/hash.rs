//! [`FtraceHash`]: the set of call-site addresses an ops filters on, queried by ip on every
//! traced call.
//!
//! Open addressing with linear probing over a power-of-two table of `u64` slots, `0` marking an
//! empty slot (no function lives at address 0), the slot index taken from the top bits of
//! `ip * 0x61C8864680B583EB` (the kernel's `hash_64` multiplier). The table is never more than
//! half full, so a probe sequence always ends at an empty slot: a hit or miss costs one
//! multiply and, almost always, one or two loads.
//!
//! The slots are either owned (feature `alloc`, the table grows as needed) or borrowed from
//! `'static` storage the backend provides (a Linux kernel module has no `alloc`): then an
//! insert that would pass half full fails with `ENOMEM`.

use crate::errno::Errno;
use core::fmt;

#[cfg(feature = "alloc")]
use alloc::{boxed::Box, vec};

/// `GOLDEN_RATIO_64` from `include/linux/hash.h`.
const GOLDEN_RATIO_64: u64 = 0x61C8_8646_80B5_83EB;

/// A set of instruction pointers (`struct ftrace_hash`).
pub struct FtraceHash {
    slots: *mut u64,
    /// `64 - log2(capacity)`; capacity is at least 2.
    shift: u32,
    len: usize,
    #[cfg_attr(not(feature = "alloc"), allow(dead_code))]
    owned: bool,
}

// SAFETY: the slots are only written through `&mut self` (or before publication) and only
// read through `&self`; the raw pointer is an owned box or exclusive `'static` storage.
unsafe impl Send for FtraceHash {}
// SAFETY: see above: shared access only reads.
unsafe impl Sync for FtraceHash {}

static EMPTY_SLOTS: [u64; 2] = [0; 2];
static EMPTY_HASH: FtraceHash = FtraceHash::EMPTY;

impl FtraceHash {
    /// The empty hash (`EMPTY_HASH`): as an ops filter it admits every function, as a notrace
    /// hash it excludes none.
    pub const EMPTY: FtraceHash = FtraceHash {
        slots: EMPTY_SLOTS.as_ptr().cast_mut(),
        shift: 63,
        len: 0,
        owned: false,
    };

    /// A `'static` empty hash (to publish with `Published::Static`).
    pub fn empty_static() -> &'static FtraceHash {
        &EMPTY_HASH
    }

    /// An empty hash whose slots live in `storage` (no allocation: for kernels and firmware).
    ///
    /// `storage.len()` must be a power of two, at least 2; it holds up to `len / 2` ips. The
    /// storage is zeroed.
    pub fn with_storage(storage: &'static mut [u64]) -> Result<FtraceHash, Errno> {
        let cap = storage.len();
        if cap < 2 || !cap.is_power_of_two() {
            return Err(Errno::EINVAL);
        }
        storage.fill(0);
        Ok(FtraceHash {
            slots: storage.as_mut_ptr(),
            shift: 64 - cap.trailing_zeros(),
            len: 0,
            owned: false,
        })
    }

    /// An owned hash holding `ips` (zeros are skipped).
    #[cfg(feature = "alloc")]
    pub fn from_ips<I: IntoIterator<Item = u64>>(ips: I) -> FtraceHash {
        let ips = ips.into_iter();
        let mut h = FtraceHash::owned_with_capacity(ips.size_hint().0);
        for ip in ips {
            let _ = h.insert(ip);
        }
        h
    }

    #[cfg(feature = "alloc")]
    fn owned_with_capacity(n: usize) -> FtraceHash {
        let cap = (n.max(1) * 2).next_power_of_two();
        let slots: Box<[u64]> = vec![0u64; cap].into_boxed_slice();
        FtraceHash {
            slots: Box::into_raw(slots).cast::<u64>(),
            shift: 64 - cap.trailing_zeros(),
            len: 0,
            owned: true,
        }
    }

    #[inline]
    fn capacity(&self) -> usize {
        1usize << (64 - self.shift)
    }

    #[inline]
    fn slots(&self) -> &[u64] {
        // SAFETY: `slots` points to `capacity()` initialised `u64`s for as long as `self`
        // lives (owned box, `'static` storage, or the static empty table).
        unsafe { core::slice::from_raw_parts(self.slots, self.capacity()) }
    }

    /// Number of ips.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the hash is empty (`ftrace_hash_empty`).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `ip` is in the set (`__ftrace_lookup_ip`).
    #[inline]
    pub fn contains(&self, ip: u64) -> bool {
        if ip == 0 {
            return false;
        }
        let mask = self.capacity() - 1;
        let mut i = (ip.wrapping_mul(GOLDEN_RATIO_64) >> self.shift) as usize;
        loop {
            // SAFETY: `i <= mask < capacity()`.
            let s = unsafe { *self.slots.add(i) };
            if s == ip {
                return true;
            }
            if s == 0 {
                return false;
            }
            i = (i + 1) & mask;
        }
    }

    /// Adds `ip`; `Ok(false)` if it was already there. `EINVAL` for ip 0; `ENOMEM` if borrowed
    /// storage is half full.
    pub fn insert(&mut self, ip: u64) -> Result<bool, Errno> {
        if ip == 0 {
            return Err(Errno::EINVAL);
        }
        if self.contains(ip) {
            return Ok(false);
        }
        if (self.len + 1) * 2 > self.capacity() || self.is_static_empty() {
            self.grow()?;
        }
        self.put(ip);
        self.len += 1;
        Ok(true)
    }

    fn put(&mut self, ip: u64) {
        let mask = self.capacity() - 1;
        let mut i = (ip.wrapping_mul(GOLDEN_RATIO_64) >> self.shift) as usize;
        loop {
            // SAFETY: `i < capacity()`; `&mut self` gives exclusive access, and the static
            // empty table is never written (`grow` replaces it before the first `put`).
            let s = unsafe { &mut *self.slots.add(i) };
            if *s == 0 {
                *s = ip;
                return;
            }
            i = (i + 1) & mask;
        }
    }

    /// Whether the slots are the shared read-only table of [`FtraceHash::EMPTY`].
    fn is_static_empty(&self) -> bool {
        core::ptr::eq(self.slots.cast_const(), EMPTY_SLOTS.as_ptr())
    }

    fn grow(&mut self) -> Result<(), Errno> {
        #[cfg(feature = "alloc")]
        if self.owned || self.is_static_empty() {
            let mut bigger = FtraceHash::owned_with_capacity(self.capacity());
            for &ip in self.slots().iter().filter(|&&s| s != 0) {
                bigger.put(ip);
            }
            bigger.len = self.len;
            core::mem::swap(self, &mut bigger);
            return Ok(());
        }
        Err(Errno::ENOMEM)
    }

    /// Removes `ip`; whether it was there.
    pub fn remove(&mut self, ip: u64) -> bool {
        if !self.contains(ip) {
            return false;
        }
        let mask = self.capacity() - 1;
        let mut i = (ip.wrapping_mul(GOLDEN_RATIO_64) >> self.shift) as usize;
        // SAFETY: every index is masked below `capacity()`, and `ip` is present, so the
        // table is owned or exclusively borrowed (not the static empty one): writable.
        unsafe {
            while *self.slots.add(i) != ip {
                i = (i + 1) & mask;
            }
            // Backward-shift deletion keeps every probe chain unbroken.
            let mut hole = i;
            let mut j = i;
            loop {
                j = (j + 1) & mask;
                let s = *self.slots.add(j);
                if s == 0 {
                    break;
                }
                let home = (s.wrapping_mul(GOLDEN_RATIO_64) >> self.shift) as usize;
                // Move `s` into the hole unless its home lies cyclically in (hole, j].
                let dist_home = j.wrapping_sub(home) & mask;
                let dist_hole = j.wrapping_sub(hole) & mask;
                if dist_home >= dist_hole {
                    *self.slots.add(hole) = s;
                    hole = j;
                }
            }
            *self.slots.add(hole) = 0;
        }
        self.len -= 1;
        true
    }

    /// Removes every ip (keeps the storage).
    pub fn clear(&mut self) {
        if self.len != 0 {
            // SAFETY: a non-empty table is owned or borrowed exclusively, never the static one.
            unsafe { core::ptr::write_bytes(self.slots, 0, self.capacity()) };
            self.len = 0;
        }
    }

    /// The ips, in table order (unspecified).
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.slots().iter().copied().filter(|&s| s != 0)
    }
}

impl Drop for FtraceHash {
    fn drop(&mut self) {
        #[cfg(feature = "alloc")]
        if self.owned {
            let cap = self.capacity();
            // SAFETY: owned slots came from `Box<[u64]>` of exactly `cap` entries.
            drop(unsafe { Box::from_raw(core::ptr::slice_from_raw_parts_mut(self.slots, cap)) });
        }
    }
}

#[cfg(feature = "alloc")]
impl Clone for FtraceHash {
    fn clone(&self) -> Self {
        FtraceHash::from_ips(self.iter())
    }
}

#[cfg(feature = "alloc")]
impl FromIterator<u64> for FtraceHash {
    fn from_iter<I: IntoIterator<Item = u64>>(iter: I) -> Self {
        FtraceHash::from_ips(iter)
    }
}

impl fmt::Debug for FtraceHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn empty_hash() {
        let h = FtraceHash::EMPTY;
        assert!(h.is_empty());
        assert!(!h.contains(0x1234));
        assert!(!h.contains(0));
    }

    #[test]
    fn borrowed_storage_fills_to_half() {
        let storage: &'static mut [u64] = alloc::boxed::Box::leak(alloc::vec![7u64; 8].into());
        let mut h = FtraceHash::with_storage(storage).unwrap();
        for ip in 1..=4u64 {
            assert_eq!(h.insert(ip * 0x10), Ok(true));
        }
        assert_eq!(h.insert(0x50), Err(Errno::ENOMEM));
        assert_eq!(h.insert(0x10), Ok(false));
        assert!(h.contains(0x30) && !h.contains(0x50));
        assert!(h.remove(0x30));
        assert!(!h.contains(0x30) && h.contains(0x40));
        assert_eq!(h.len(), 3);
        let bad: &'static mut [u64] = alloc::boxed::Box::leak(alloc::vec![0u64; 6].into());
        assert_eq!(FtraceHash::with_storage(bad).err(), Some(Errno::EINVAL));
    }

    #[test]
    fn owned_grows_and_removes() {
        let mut h = FtraceHash::EMPTY;
        for ip in 1..2000u64 {
            h.insert(ip.wrapping_mul(0x9e37_79b9) | 1).unwrap();
        }
        assert_eq!(h.len(), 1999);
        for ip in (1..2000u64).step_by(2) {
            assert!(h.remove(ip.wrapping_mul(0x9e37_79b9) | 1));
        }
        for ip in 1..2000u64 {
            assert_eq!(h.contains(ip.wrapping_mul(0x9e37_79b9) | 1), ip % 2 == 0);
        }
        assert_eq!(h.iter().count(), h.len());
    }
}
