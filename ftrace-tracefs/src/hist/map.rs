//! The bounded map a hist trigger aggregates into (the kernel's `tracing_map`).
//!
//! Everything is allocated when the trigger is created: `max_entries` elements (a compound key,
//! the sums, the creator's task name) and an open-addressed index of twice as many slots, so an
//! update never allocates. Invariant: an element is created only while fewer than
//! `max_entries` exist; a record whose key is new once the map is full changes nothing but
//! the drop count (the `Dropped:` line), and every record that found or created its element
//! counts as a hit (the `Hits:` line).
//!
//! The map is updated through `&mut self`: the instance serialises the updates of one
//! trigger (the kernel's lock-free insertion is not needed behind that lock).

use alloc::vec;
use alloc::vec::Vec;

use super::def::HistDef;

/// A task name as the kernel stores it (`TASK_COMM_LEN` bytes, NUL-padded).
pub type Comm = [u8; 16];

/// The aggregation state of one hist trigger.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistMap {
    key_size: usize,
    n_sums: usize,
    max_entries: usize,
    /// Index slots: 0 = free, else element index + 1.
    slots: Vec<u32>,
    /// `max_entries * key_size` bytes of keys.
    keys: Vec<u8>,
    /// `max_entries * n_sums` sums; sum 0 is `hitcount`.
    sums: Vec<u64>,
    /// The task name saved when each element was created (`.execname`).
    comms: Vec<Comm>,
    len: usize,
    hits: u64,
    drops: u64,
    /// Scratch space for the key being built.
    scratch: Vec<u8>,
}

impl HistMap {
    /// Counts `n` records that could not be aggregated (the table was busy when they came):
    /// the `Dropped:` total shows them.
    pub fn add_drops(&mut self, n: u64) {
        self.drops += n;
    }

    /// An empty map for `def`.
    pub fn new(def: &HistDef) -> HistMap {
        let max = def.max_entries;
        HistMap {
            key_size: def.key_size,
            n_sums: 1 + def.vals.len(),
            max_entries: max,
            slots: vec![0; 2 * max],
            keys: vec![0; max * def.key_size],
            sums: vec![0; max * (1 + def.vals.len())],
            comms: if def.saves_comm() {
                vec![[0; 16]; max]
            } else {
                Vec::new()
            },
            len: 0,
            hits: 0,
            drops: 0,
            scratch: vec![0; def.key_size],
        }
    }

    /// Aggregates one record of the event (`event_hist_trigger`): builds its key, finds or
    /// creates its element and adds its values. `cpu` is the CPU it happened on; `comm` gives
    /// the current task's name (asked only when an `.execname` element is created).
    pub fn update(&mut self, def: &HistDef, rec: &[u8], cpu: u32, comm: &dyn Fn() -> Comm) {
        let mut key = core::mem::take(&mut self.scratch);
        def.build_key(rec, cpu, &mut key);
        if let Some(e) = self.insert(&key, comm) {
            let sums = &mut self.sums[e * self.n_sums..(e + 1) * self.n_sums];
            sums[0] = sums[0].wrapping_add(1);
            for (sum, v) in sums[1..].iter_mut().zip(&def.vals) {
                *sum = sum.wrapping_add(v.source.number(rec, cpu));
            }
        }
        self.scratch = key;
    }

    /// `tracing_map_insert`: the element of `key`, created if there is room.
    fn insert(&mut self, key: &[u8], comm: &dyn Fn() -> Comm) -> Option<usize> {
        match self.element(key, comm) {
            Some(e) => {
                self.hits += 1;
                Some(e)
            }
            None => {
                self.drops += 1;
                None
            }
        }
    }

    /// The element of `key`, created (with `comm`'s name) if there is room; counts nothing.
    fn element(&mut self, key: &[u8], comm: &dyn Fn() -> Comm) -> Option<usize> {
        let mask = self.slots.len() - 1;
        let mut i = hash(key) as usize & mask;
        loop {
            match self.slots[i] {
                0 => break,
                s => {
                    let e = s as usize - 1;
                    if self.key(e) == key {
                        return Some(e);
                    }
                }
            }
            i = (i + 1) & mask;
        }
        if self.len == self.max_entries {
            return None;
        }
        let e = self.len;
        self.len += 1;
        self.slots[i] = e as u32 + 1;
        self.keys[e * self.key_size..(e + 1) * self.key_size].copy_from_slice(key);
        if !self.comms.is_empty() {
            self.comms[e] = comm();
        }
        Some(e)
    }

    /// Adds what a map of the same definition aggregated elsewhere (another process's, in a
    /// backend whose events fire in several): its `hits` and `drops`, and each of its
    /// elements' sums to the element of the same key here (created with its task name if
    /// there is room; else its records count as dropped). `None` (nothing changed) when a
    /// key or sums do not have this map's sizes.
    pub fn merge<'a>(
        &mut self,
        hits: u64,
        drops: u64,
        elements: impl IntoIterator<Item = (&'a [u8], &'a [u64], &'a [u8])> + Clone,
    ) -> Option<()> {
        if elements
            .clone()
            .into_iter()
            .any(|(k, s, _)| k.len() != self.key_size || s.len() != self.n_sums)
        {
            return None;
        }
        self.hits += hits;
        self.drops += drops;
        for (key, sums, name) in elements {
            let comm = || {
                let mut c: Comm = [0; 16];
                let n = name.len().min(15);
                c[..n].copy_from_slice(&name[..n]);
                c
            };
            match self.element(key, &comm) {
                Some(e) => {
                    let mine = &mut self.sums[e * self.n_sums..(e + 1) * self.n_sums];
                    for (m, s) in mine.iter_mut().zip(sums) {
                        *m = m.wrapping_add(*s);
                    }
                }
                None => {
                    self.hits -= sums[0].min(self.hits);
                    self.drops += sums[0];
                }
            }
        }
        Some(())
    }

    /// `tracing_map_clear` (`:clear`): no elements, hits and drops back to 0.
    pub fn clear(&mut self) {
        self.slots.fill(0);
        self.sums.fill(0);
        self.len = 0;
        self.hits = 0;
        self.drops = 0;
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Records that found or created their element.
    pub fn hits(&self) -> u64 {
        self.hits
    }

    /// Records dropped because the map was full.
    pub fn drops(&self) -> u64 {
        self.drops
    }

    /// Element `e`'s compound key.
    pub fn key(&self, e: usize) -> &[u8] {
        &self.keys[e * self.key_size..(e + 1) * self.key_size]
    }

    /// Element `e`'s sums: `hitcount`, then each value.
    pub fn sums(&self, e: usize) -> &[u64] {
        &self.sums[e * self.n_sums..(e + 1) * self.n_sums]
    }

    /// The task name element `e` saved (empty without an `.execname` key).
    pub fn comm(&self, e: usize) -> &[u8] {
        match self.comms.get(e) {
            Some(c) => &c[..c.iter().position(|&b| b == 0).unwrap_or(c.len())],
            None => &[],
        }
    }
}

/// FNV-1a over the key bytes: the index order never shows (entries are printed sorted).
fn hash(key: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in key {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}
