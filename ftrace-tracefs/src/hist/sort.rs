//! The order the `hist` file lists entries in (`tracing_map_sort_entries`).
//!
//! The kernel sorts with its heapsort (`lib/sort.c`, not stable), first by the whole key's
//! bytes (`detect_dups`), then by the first sort key, then each run of entries equal under it
//! by the second. Entries that compare equal therefore come out in the order that heapsort
//! leaves them, so [`heapsort`] follows the same algorithm step for step (bottom-up sift-down,
//! two extractions per round): the same input and comparisons give the same permutation.
//! Invariant: with distinct keys the first pass has one result, so the printed order depends
//! only on the entries, never on the map's insertion or hash order.

use alloc::vec::Vec;
use core::cmp::Ordering;

use super::def::{HistDef, KeyCmp, SortField, SortKey};
use super::map::HistMap;

/// Sorts `v` in place exactly as the kernel's `sort()` does for comparison `cmp`.
pub fn heapsort<T>(v: &mut [T], mut cmp: impl FnMut(&T, &T) -> Ordering) {
    let num = v.len();
    let mut n = num;
    let mut a = num / 2;
    if a == 0 {
        return;
    }
    let parent = |i: usize| (i - 1) / 2;
    let mut shift = 0;
    loop {
        if a != 0 {
            // Building the heap: sift `a` down.
            a -= 1 << shift;
        } else if n > 3 {
            // Extract the two largest elements.
            n -= 1;
            v.swap(0, n);
            shift = usize::from(cmp(&v[1], &v[2]) != Ordering::Greater);
            a = 1 << shift;
            n -= 1;
            v.swap(a, n);
        } else {
            break;
        }
        // Bottom-up sift-down: find the path to a leaf, then backtrack to where `a` belongs.
        let mut b = a;
        let (mut c, mut d);
        loop {
            c = 2 * b + 1;
            d = c + 1;
            if d >= n {
                break;
            }
            b = if cmp(&v[c], &v[d]) == Ordering::Greater {
                c
            } else {
                d
            };
        }
        if d == n {
            b = c;
        }
        while b != a && cmp(&v[a], &v[b]) != Ordering::Less {
            b = parent(b);
        }
        let c = b;
        while b != a {
            b = parent(b);
            v.swap(b, c);
        }
    }
    n -= 1;
    v.swap(0, n);
    if n == 2 && cmp(&v[0], &v[1]) == Ordering::Greater {
        v.swap(0, 1);
    }
}

/// One key slot compared as the kernel's `tracing_map_cmp_*` does.
fn cmp_slot(a: &[u8], b: &[u8], cmp: KeyCmp) -> Ordering {
    let word = |s: &[u8]| u64::from_le_bytes(s[..8].try_into().unwrap_or([0; 8]));
    match cmp {
        KeyCmp::String => {
            let end = |s: &[u8]| s.iter().position(|&c| c == 0).unwrap_or(s.len());
            a[..end(a)].cmp(&b[..end(b)])
        }
        KeyCmp::Unsigned(size) => {
            let m = if size >= 8 {
                u64::MAX
            } else {
                (1 << (8 * size)) - 1
            };
            (word(a) & m).cmp(&(word(b) & m))
        }
        KeyCmp::Signed(size) => {
            let shift = 64 - 8 * size.min(8);
            (((word(a) << shift) as i64) >> shift).cmp(&(((word(b) << shift) as i64) >> shift))
        }
    }
}

fn cmp_by(def: &HistDef, map: &HistMap, key: SortKey, a: usize, b: usize) -> Ordering {
    let o = match key.field {
        SortField::Sum(i) => map.sums(a)[i].cmp(&map.sums(b)[i]),
        SortField::Key(k) => {
            let k = &def.keys[k];
            let r = k.offset..k.offset + k.size;
            cmp_slot(&map.key(a)[r.clone()], &map.key(b)[r], k.cmp)
        }
    };
    if key.descending { o.reverse() } else { o }
}

/// The map's elements in the order the `hist` file prints them.
pub fn sorted_entries(def: &HistDef, map: &HistMap) -> Vec<usize> {
    let mut v: Vec<usize> = (0..map.len()).collect();
    if v.len() < 2 {
        return v;
    }
    heapsort(&mut v, |&a, &b| map.key(a).cmp(map.key(b)));
    let Some(&primary) = def.sort.first() else {
        return v;
    };
    heapsort(&mut v, |&a, &b| cmp_by(def, map, primary, a, b));
    if let Some(&secondary) = def.sort.get(1) {
        // `sort_secondary`: each run of two or more entries equal under the primary key,
        // closed at the first unequal pair or at the end of the array.
        let n = v.len();
        let (mut start, mut n_sub) = (0, 1);
        for i in 0..n - 1 {
            if cmp_by(def, map, primary, v[i], v[i + 1]) == Ordering::Equal {
                n_sub += 1;
                if i < n - 2 {
                    continue;
                }
            }
            if n_sub < 2 {
                start = i + 1;
                n_sub = 1;
                continue;
            }
            heapsort(&mut v[start..start + n_sub], |&a, &b| {
                cmp_by(def, map, secondary, a, b)
            });
            start = i + 1;
            n_sub = 1;
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn heapsort_sorts() {
        for n in 0..40u32 {
            let mut v: Vec<u32> = (0..n).map(|i| i.wrapping_mul(2_654_435_761) % 97).collect();
            let mut w = v.clone();
            heapsort(&mut v, |a, b| a.cmp(b));
            w.sort();
            assert_eq!(v, w, "n={n}");
        }
    }

    #[test]
    fn heapsort_is_the_kernels_unstable_order() {
        // Equal keys (the first tuple field) come out in heapsort's order, not the input's:
        // worked by hand from lib/sort.c's algorithm for this input.
        let mut v = vec![(1, 'a'), (1, 'b'), (1, 'c'), (1, 'd')];
        heapsort(&mut v, |a, b| a.0.cmp(&b.0));
        let order: Vec<char> = v.iter().map(|x| x.1).collect();
        assert_ne!(order, vec!['a', 'b', 'c', 'd']);
    }
}
