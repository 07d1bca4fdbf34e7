//! The keys of one node's pods ([`PodKeys`]): a sorted vector rather than a B-tree set. A
//! node holds a handful of pods, so finding a key is a bisection of a few strings and adding
//! or removing one moves a few pointers, with no tree node allocated per node; it answers
//! as the `BTreeSet<String>` it replaced (iteration in key order, each key once).

/// The keys (`namespace/name`) of the pods bound to one node, each once, in order (see the
/// module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodKeys {
    /// Strictly ascending.
    keys: Vec<String>,
}

impl PodKeys {
    /// No keys.
    pub fn new() -> Self {
        Self::default()
    }

    /// The one key `key`.
    pub fn of(key: String) -> Self {
        Self { keys: vec![key] }
    }

    /// How many keys.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Whether `key` is one of them.
    pub fn contains(&self, key: &str) -> bool {
        self.keys.binary_search_by(|k| k.as_str().cmp(key)).is_ok()
    }

    /// Adds `key` unless it is there already; whether it was new.
    pub fn insert(&mut self, key: String) -> bool {
        match self.keys.binary_search(&key) {
            Ok(_) => false,
            Err(at) => {
                self.keys.insert(at, key);
                true
            }
        }
    }

    /// Removes `key`; whether it was there.
    pub fn remove(&mut self, key: &str) -> bool {
        match self.keys.binary_search_by(|k| k.as_str().cmp(key)) {
            Ok(at) => {
                self.keys.remove(at);
                true
            }
            Err(_) => false,
        }
    }

    /// The keys, in order.
    pub fn iter(&self) -> std::slice::Iter<'_, String> {
        self.keys.iter()
    }
}

impl IntoIterator for PodKeys {
    type Item = String;
    type IntoIter = std::vec::IntoIter<String>;

    fn into_iter(self) -> Self::IntoIter {
        self.keys.into_iter()
    }
}

impl<'a> IntoIterator for &'a PodKeys {
    type Item = &'a String;
    type IntoIter = std::slice::Iter<'a, String>;

    fn into_iter(self) -> Self::IntoIter {
        self.keys.iter()
    }
}

#[cfg(test)]
mod tests {
    //! The keys against the ordered set they replaced.

    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    proptest! {
        /// Keys added, removed (present or not) and looked up: the same answers, count and
        /// order as a `BTreeSet` of the same keys.
        #[test]
        fn pod_keys_are_an_ordered_set(
            ops in prop::collection::vec((0u8..4, "ns[ab]/p[0-9]{1,2}"), 0..120),
        ) {
            let mut keys = PodKeys::new();
            let mut set: BTreeSet<String> = BTreeSet::new();
            for (op, key) in ops {
                match op {
                    0 | 1 => prop_assert_eq!(keys.insert(key.clone()), set.insert(key)),
                    2 => prop_assert_eq!(keys.remove(&key), set.remove(&key)),
                    _ => prop_assert_eq!(keys.contains(&key), set.contains(&key)),
                }
                prop_assert_eq!(keys.len(), set.len());
                prop_assert_eq!(keys.is_empty(), set.is_empty());
                prop_assert!(keys.iter().eq(set.iter()));
            }
            let last: Vec<String> = keys.into_iter().collect();
            let expected: Vec<String> = set.into_iter().collect();
            prop_assert_eq!(last, expected);
            let one = PodKeys::of("ns/p".to_owned());
            prop_assert_eq!(one.iter().collect::<Vec<_>>(), vec!["ns/p"]);
        }
    }
}
