//! Static keys: the on/off switch behind a call site that costs almost nothing while off.
//!
//! A [`StaticKey`] is the kernel's `struct static_key`: a reference count of users that want
//! the branch on (`static_key_slow_inc` / `static_key_slow_dec`). The call site tests it with
//! [`StaticKey::is_enabled`], one relaxed load (the portable form; a jump-label backend turns
//! the same key into a patched NOP). Whoever turns the key on or off may have call sites to
//! update first: [`StaticKey::inc`] and [`StaticKey::dec`] call `update` exactly on the 0 -> 1
//! and 1 -> 0 transitions, serialised, with the key reading "on" only once the update is done.
//!
//! Invariant (the loom model in `tests/loom.rs`): when `inc` returns, the 0 -> 1 `update`
//! has completed and its effects are visible to the caller, even when this `inc` took the fast
//! path behind another thread's enable (the release store of the count after `update`, paired
//! with the fast path's acquire).

use crate::sync::{AtomicBool, AtomicU32, Ordering, loom_const_fn, spin_loop};

/// The count while the first enable is updating the call sites (the kernel's `-1`).
const UPDATING: u32 = u32::MAX;

/// What an update makes of the key's call sites.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Branch {
    /// The key went from off to on: call sites take the branch.
    Enable,
    /// The key went from on to off: call sites skip it.
    Disable,
}

/// A reference-counted switch read with one relaxed load.
#[derive(Debug)]
pub struct StaticKey {
    /// Users that want the branch on; [`UPDATING`] during the first enable's update.
    enabled: AtomicU32,
    /// Serialises the slow paths (the kernel's `jump_label_mutex`).
    lock: AtomicBool,
}

impl Default for StaticKey {
    fn default() -> Self {
        Self::new()
    }
}

impl StaticKey {
    loom_const_fn! {
        /// A key that is off (`STATIC_KEY_INIT_FALSE`).
        pub fn new() -> StaticKey {
            StaticKey {
                enabled: AtomicU32::new(0),
                lock: AtomicBool::new(false),
            }
        }
    }

    /// Whether the branch is on: the call site's test, one relaxed load.
    #[inline(always)]
    pub fn is_enabled(&self) -> bool {
        let n = self.enabled.load(Ordering::Relaxed);
        n != 0 && n != UPDATING
    }

    /// The number of users (`static_key_count`); 0 while the first enable is updating.
    pub fn count(&self) -> u32 {
        match self.enabled.load(Ordering::Acquire) {
            UPDATING => 0,
            n => n,
        }
    }

    fn lock(&self) {
        while self
            .lock
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spin_loop();
        }
    }

    fn unlock(&self) {
        self.lock.store(false, Ordering::Release);
    }

    /// `static_key_slow_inc`: one more user. On the 0 -> 1 transition `update(Enable)` runs
    /// (under the key's lock) before the key reads on.
    pub fn inc(&self, update: impl FnOnce(Branch)) {
        // Fast path (`static_key_fast_inc_not_disabled`): already on, count one more.
        let mut v = self.enabled.load(Ordering::Relaxed);
        while v != 0 && v != UPDATING {
            match self
                .enabled
                .compare_exchange_weak(v, v + 1, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(now) => v = now,
            }
        }
        self.lock();
        match self.enabled.load(Ordering::Relaxed) {
            0 => {
                self.enabled.store(UPDATING, Ordering::Relaxed);
                update(Branch::Enable);
                self.enabled.store(1, Ordering::Release);
            }
            n => self.enabled.store(n + 1, Ordering::Relaxed),
        }
        self.unlock();
    }

    /// `static_key_slow_dec`: one user less. On the 1 -> 0 transition `update(Disable)` runs
    /// (under the key's lock) after the key reads off. A key that is already off stays off.
    pub fn dec(&self, update: impl FnOnce(Branch)) {
        // Fast path (`atomic_dec_unless_one`).
        let mut v = self.enabled.load(Ordering::Relaxed);
        while v > 1 && v != UPDATING {
            match self
                .enabled
                .compare_exchange_weak(v, v - 1, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(now) => v = now,
            }
        }
        self.lock();
        match self.enabled.load(Ordering::Relaxed) {
            0 => {}
            1 => {
                self.enabled.store(0, Ordering::Relaxed);
                update(Branch::Disable);
            }
            n => self.enabled.store(n - 1, Ordering::Relaxed),
        }
        self.unlock();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use core::cell::Cell;

    #[test]
    fn updates_run_on_the_transitions_only() {
        let k = StaticKey::new();
        let updates = Cell::new(0);
        let up = |b: Branch| {
            updates.set(updates.get() + 1);
            b
        };
        assert!(!k.is_enabled());
        k.inc(|b| assert_eq!(up(b), Branch::Enable));
        assert!(k.is_enabled());
        k.inc(|_| panic!("second inc updates nothing"));
        assert_eq!(k.count(), 2);
        k.dec(|_| panic!("dec to 1 updates nothing"));
        assert!(k.is_enabled());
        k.dec(|b| assert_eq!(up(b), Branch::Disable));
        assert!(!k.is_enabled());
        k.dec(|_| panic!("an off key stays off"));
        assert_eq!((k.count(), updates.get()), (0, 2));
    }
}
