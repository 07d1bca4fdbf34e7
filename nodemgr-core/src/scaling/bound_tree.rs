//! The search the planner's two segment trees share — the free-room tree
//! (`placement::max_tree`) and the topology count trees (`topology`): the first leaf at or
//! after a start that matches, over inner nodes that hold bounds of the leaves below, with the
//! bounds found stale on the way tightened (docs/scheduling.md §2, "Lazy bounds").

/// A segment tree whose inner nodes bound the leaves below them: node 1 is the root, node
/// `n`'s children are `2n` and `2n + 1`, and leaf `i` is node `leaves() + i`.
pub(crate) trait BoundTree {
    /// The node index of leaf 0 (a power of two).
    fn leaves(&self) -> usize;
    /// How many leaves are in use; leaves past them are never answered.
    fn used(&self) -> usize;
    /// Recomputes inner node `n` from its children; whether that changed it.
    fn recompute(&mut self, n: usize) -> bool;

    /// Recomputes inner node `n` and, while that changes them, its ancestors: called on a
    /// node none of whose children matches a search its bounds seemed to match.
    fn tighten(&mut self, mut n: usize) {
        while n >= 1 && n < self.leaves() && self.recompute(n) {
            n /= 2;
        }
    }
}

/// The first leaf at or after `start` for which `ok` holds, where `ok` of an inner node holds
/// whenever it holds for some leaf below (the bounds allow it): a depth-first walk in leaf
/// order without recursion, from leaf `start` up to the nearest right sibling that may hold
/// one, then down to its leftmost such child, climbing on from a node none of whose children
/// holds (after tightening it). Exact however loose the bounds: only leaves are answered.
#[inline]
pub(crate) fn first_match<T: BoundTree>(
    tree: &mut T,
    start: usize,
    ok: impl Fn(&T, usize) -> bool,
) -> Option<usize> {
    if start >= tree.used() {
        return None;
    }
    let leaves = tree.leaves();
    let mut node = leaves + start;
    if ok(tree, node) {
        return Some(start);
    }
    loop {
        // Up: to the nearest right sibling (of `node` or an ancestor) that may hold one.
        loop {
            if node <= 1 {
                return None;
            }
            if node.is_multiple_of(2) && ok(tree, node + 1) {
                node += 1;
                break;
            }
            node /= 2;
        }
        // Down: the leftmost child that may hold one, until a leaf or a stale bound.
        while node < leaves {
            if ok(tree, 2 * node) {
                node *= 2;
            } else if ok(tree, 2 * node + 1) {
                node = 2 * node + 1;
            } else {
                tree.tighten(node);
                break;
            }
        }
        if node >= leaves {
            // A match at or past `used` means none before it, as leaves go in order.
            let i = node - leaves;
            return (i < tree.used()).then_some(i);
        }
    }
}
