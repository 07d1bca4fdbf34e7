//! The free-room search tree: a max-tree over bins whose inner nodes bound the per-resource
//! maxima of the bins below, so that the first bin at or after a cursor with room for a demand
//! is found in O(log bins) instead of by a scan.

use crate::scaling::bound_tree::{BoundTree, first_match};

/// A max-tree over bins: each leaf holds a bin's free (including preemptible) cpu, memory and
/// pods, each inner node an upper bound of the per-dimension maxima of the leaves below (at
/// least every child's value), so a first-fit search skips whole ranges that cannot hold a
/// demand. Bounds are raised at once and lowered lazily: a placement only lowers its leaf,
/// and a search that descends into a node none of whose children covers the need recomputes
/// that node and the ancestors it lowers. Answers are exact either way (a search checks
/// leaves); only the work to find them changes.
#[derive(Debug, Clone)]
pub(super) struct MaxTree {
    pub(super) cap: usize,
    pub(super) len: usize,
    pub(super) vals: Vec<[i64; 3]>,
}

pub(super) const EMPTY: [i64; 3] = [i64::MIN; 3];

impl MaxTree {
    pub(super) fn new() -> Self {
        Self {
            cap: 1,
            len: 0,
            vals: vec![EMPTY; 2],
        }
    }

    pub(super) fn push(&mut self, v: [i64; 3]) {
        if self.len == self.cap {
            let leaves: Vec<[i64; 3]> = self.vals[self.cap..self.cap + self.len].to_vec();
            self.cap *= 2;
            self.vals = vec![EMPTY; 2 * self.cap];
            self.vals[self.cap..self.cap + leaves.len()].copy_from_slice(&leaves);
            for i in (1..self.cap).rev() {
                self.vals[i] = max3(self.vals[2 * i], self.vals[2 * i + 1]);
            }
        }
        let i = self.len;
        self.len += 1;
        self.set(i, v);
    }

    /// Removes the last bin.
    ///
    /// The leaf keeps its value: the tree stays a consistent max-tree over all its leaves,
    /// and [`MaxTree::find`] never answers a leaf at or past `len` (every leaf left of such a
    /// leaf's match failed, and every leaf right of it is past `len` too), so the stale leaf is
    /// never seen; the next push overwrites it.
    pub(super) fn pop(&mut self) {
        self.len = self.len.saturating_sub(1);
    }

    /// Sets bin `i`'s vector. Inner nodes are upper bounds of the leaves below (see the
    /// type's docs): a raise lifts the ancestors it exceeds, a lowering leaves them as they
    /// are, to be tightened by the first search that finds them stale.
    pub(super) fn set(&mut self, i: usize, v: [i64; 3]) {
        let mut n = self.cap + i;
        let old = self.vals[n];
        self.vals[n] = v;
        if covers(&old, &v) {
            // No dimension rose: every ancestor still bounds the leaves below it.
            return;
        }
        while n > 1 {
            n /= 2;
            let m = max3(self.vals[n], v);
            if self.vals[n] == m {
                // Already bounds `v` here, so above too (a node bounds its children).
                break;
            }
            self.vals[n] = m;
        }
    }

    /// The first bin at or after `start` whose vector covers `need` in every dimension
    /// ([`first_match`]: bounds found stale on the way are tightened).
    pub(super) fn find(&mut self, start: usize, need: &[i64; 3]) -> Option<usize> {
        first_match(self, start, |t, n| covers(&t.vals[n], need))
    }
}

impl BoundTree for MaxTree {
    fn leaves(&self) -> usize {
        self.cap
    }

    fn used(&self) -> usize {
        self.len
    }

    fn recompute(&mut self, n: usize) -> bool {
        let m = max3(self.vals[2 * n], self.vals[2 * n + 1]);
        if self.vals[n] == m {
            return false;
        }
        self.vals[n] = m;
        true
    }
}

fn max3(a: [i64; 3], b: [i64; 3]) -> [i64; 3] {
    [a[0].max(b[0]), a[1].max(b[1]), a[2].max(b[2])]
}

pub(super) fn covers(have: &[i64; 3], need: &[i64; 3]) -> bool {
    have[0] >= need[0] && have[1] >= need[1] && have[2] >= need[2]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn max_tree_finds_first_fit() {
        let mut t = MaxTree::new();
        for v in [[1, 1, 1], [5, 1, 1], [5, 5, 1], [9, 9, 9]] {
            t.push(v);
        }
        assert_eq!(t.find(0, &[5, 5, 1]), Some(2));
        assert_eq!(t.find(3, &[5, 5, 1]), Some(3));
        assert_eq!(t.find(0, &[10, 0, 0]), None);
        t.set(2, EMPTY);
        assert_eq!(t.find(0, &[5, 5, 1]), Some(3));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// The max-tree's first fit is the first bin at or after `start` covering the need,
        /// as a linear scan finds it, after any updates.
        #[test]
        fn max_tree_find_is_a_linear_scan(
            vals in prop::collection::vec(prop::array::uniform3(0i64..6), 1..40),
            updates in prop::collection::vec((0usize..40, prop::array::uniform3(-1i64..6)), 0..10),
            need in prop::array::uniform3(0i64..6),
            start in 0usize..45,
        ) {
            let mut t = MaxTree::new();
            let mut v = vals.clone();
            for x in &vals {
                t.push(*x);
            }
            for (i, x) in updates {
                if i < v.len() {
                    let x = if x[0] < 0 { EMPTY } else { x };
                    t.set(i, x);
                    v[i] = x;
                }
            }
            let expected = (start..v.len()).find(|&i| covers(&v[i], &need));
            prop_assert_eq!(t.find(start, &need), expected);
        }

        /// Interleaved sets (raising and lowering), pushes, pops and searches: every search
        /// answers what a linear scan does, and every inner node bounds its children, however
        /// stale the lazily lowered bounds are.
        #[test]
        fn lazily_lowered_bounds_keep_searches_exact(
            vals in prop::collection::vec(prop::array::uniform3(0i64..6), 1..30),
            ops in prop::collection::vec(
                (0u8..4, 0usize..40, prop::array::uniform3(-1i64..6)),
                0..60,
            ),
        ) {
            let mut t = MaxTree::new();
            let mut v = vals.clone();
            for x in &vals {
                t.push(*x);
            }
            for (op, i, x) in ops {
                let x = if x[0] < 0 { EMPTY } else { x };
                match op {
                    0 if i < v.len() => {
                        t.set(i, x);
                        v[i] = x;
                    }
                    1 => {
                        t.push(x);
                        v.push(x);
                    }
                    2 => {
                        t.pop();
                        v.pop();
                    }
                    _ => {
                        let need = [x[0].max(0), x[1].max(0), x[2].max(0)];
                        let expected = (i..v.len()).find(|&b| covers(&v[b], &need));
                        prop_assert_eq!(t.find(i, &need), expected);
                    }
                }
                for n in 1..t.cap {
                    prop_assert!(covers(&t.vals[n], &t.vals[2 * n]));
                    prop_assert!(covers(&t.vals[n], &t.vals[2 * n + 1]));
                }
            }
        }
    }
}
