//! A map keyed by name whose copies share one allocation until one of them is changed: a
//! node's or pod's labels and annotations ([`StringMap`]) and a node's allocatable resources
//! ([`SharedResources`]).
//!
//! Node and pod views are copied often: a watch cache hands out a view, an executor keeps one
//! between passes, the simulator versions every state of a node. These maps are most of a
//! view's size and almost never change together with the rest of it, so [`SharedMap`] keeps
//! them behind an `Arc`: a clone costs one reference count, a change (through
//! [`std::ops::DerefMut`]) copies the map only when another view still shares it, and two views
//! that share a map compare equal without looking at its entries.
//!
//! Reading is a `BTreeMap<String, V>` read (the map derefs to one), so callers use `get`,
//! `contains_key`, `iter` and friends as before. An empty map allocates nothing (most pods
//! carry no annotation nodemgr keeps).

use std::collections::BTreeMap;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use super::quantity::Quantity;

/// A `BTreeMap<String, V>` shared between copies (see the module docs).
pub struct SharedMap<V>(Option<Arc<BTreeMap<String, V>>>);

/// Labels or annotations.
pub type StringMap = SharedMap<String>;

/// Resource amounts by resource name, as [`super::Resources`], shared between copies.
pub type SharedResources = SharedMap<Quantity>;

/// What an empty [`SharedMap`] derefs to (a `static` cannot be generic, so one per value type).
pub trait EmptyMap: Sized + 'static {
    /// The empty map.
    fn empty() -> &'static BTreeMap<String, Self>;
}

impl EmptyMap for String {
    fn empty() -> &'static BTreeMap<String, Self> {
        static EMPTY: BTreeMap<String, String> = BTreeMap::new();
        &EMPTY
    }
}

impl EmptyMap for Quantity {
    fn empty() -> &'static BTreeMap<String, Self> {
        static EMPTY: BTreeMap<String, Quantity> = BTreeMap::new();
        &EMPTY
    }
}

impl<V> Clone for SharedMap<V> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<V> Default for SharedMap<V> {
    fn default() -> Self {
        Self(None)
    }
}

impl<V> SharedMap<V> {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether `self` and `other` share their storage (then they are equal).
    pub fn shares_with(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (a, b) => a.is_none() && b.is_none(),
        }
    }
}

impl<V: EmptyMap + Clone> SharedMap<V> {
    /// The map, copied only when another view still shares it.
    pub fn into_inner(self) -> BTreeMap<String, V> {
        self.0.map(Arc::unwrap_or_clone).unwrap_or_default()
    }
}

impl<V: EmptyMap> Deref for SharedMap<V> {
    type Target = BTreeMap<String, V>;

    fn deref(&self) -> &Self::Target {
        self.0.as_deref().unwrap_or_else(|| V::empty())
    }
}

impl<V: EmptyMap + Clone> DerefMut for SharedMap<V> {
    /// The map to change, copied first when another view shares it.
    fn deref_mut(&mut self) -> &mut Self::Target {
        Arc::make_mut(self.0.get_or_insert_with(Arc::default))
    }
}

impl<V: EmptyMap + PartialEq> PartialEq for SharedMap<V> {
    fn eq(&self, other: &Self) -> bool {
        self.shares_with(other) || **self == **other
    }
}

impl<V: EmptyMap + Eq> Eq for SharedMap<V> {}

impl<V: EmptyMap + Ord> PartialOrd for SharedMap<V> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl<V: EmptyMap + Ord> Ord for SharedMap<V> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (**self).cmp(&**other)
    }
}

impl<V: EmptyMap + std::hash::Hash> std::hash::Hash for SharedMap<V> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (**self).hash(state);
    }
}

impl<V: EmptyMap + PartialEq> PartialEq<BTreeMap<String, V>> for SharedMap<V> {
    fn eq(&self, other: &BTreeMap<String, V>) -> bool {
        **self == *other
    }
}

impl<V: EmptyMap + fmt::Debug> fmt::Debug for SharedMap<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl<V> From<BTreeMap<String, V>> for SharedMap<V> {
    fn from(map: BTreeMap<String, V>) -> Self {
        Self((!map.is_empty()).then(|| Arc::new(map)))
    }
}

impl<V: EmptyMap + Clone> From<SharedMap<V>> for BTreeMap<String, V> {
    fn from(map: SharedMap<V>) -> Self {
        map.into_inner()
    }
}

impl<V, const N: usize> From<[(String, V); N]> for SharedMap<V> {
    fn from(entries: [(String, V); N]) -> Self {
        Self::from(BTreeMap::from(entries))
    }
}

impl<V> FromIterator<(String, V)> for SharedMap<V> {
    fn from_iter<I: IntoIterator<Item = (String, V)>>(entries: I) -> Self {
        Self::from(entries.into_iter().collect::<BTreeMap<_, _>>())
    }
}

impl<V: EmptyMap + Clone> Extend<(String, V)> for SharedMap<V> {
    fn extend<I: IntoIterator<Item = (String, V)>>(&mut self, entries: I) {
        (**self).extend(entries);
    }
}

impl<'a, V: EmptyMap> IntoIterator for &'a SharedMap<V> {
    type Item = (&'a String, &'a V);
    type IntoIter = std::collections::btree_map::Iter<'a, String, V>;

    fn into_iter(self) -> Self::IntoIter {
        (**self).iter()
    }
}

impl<V: EmptyMap + Clone> IntoIterator for SharedMap<V> {
    type Item = (String, V);
    type IntoIter = std::collections::btree_map::IntoIter<String, V>;

    fn into_iter(self) -> Self::IntoIter {
        self.into_inner().into_iter()
    }
}

impl<V: EmptyMap + serde::Serialize> serde::Serialize for SharedMap<V> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(serializer)
    }
}

impl<'de, V: serde::Deserialize<'de>> serde::Deserialize<'de> for SharedMap<V> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        BTreeMap::deserialize(deserializer).map(Self::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(entries: &[(&str, &str)]) -> StringMap {
        entries
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn a_change_to_a_copy_leaves_the_original_alone() {
        let original = map(&[("a", "1")]);
        let mut copy = original.clone();
        assert!(copy.shares_with(&original));
        copy.insert("b".into(), "2".into());
        assert!(!copy.shares_with(&original));
        assert_eq!(original.len(), 1);
        assert_eq!(copy.len(), 2);
        assert_ne!(copy, original);
    }

    #[test]
    fn maps_compare_by_content_whether_shared_or_not() {
        let a = map(&[("a", "1"), ("b", "2")]);
        let b = map(&[("b", "2"), ("a", "1")]);
        assert!(!a.shares_with(&b));
        assert_eq!(a, b);
        assert_eq!(a, a.clone());
        assert_eq!(
            a,
            BTreeMap::from([("a".into(), "1".into()), ("b".into(), "2".into())])
        );
        assert_ne!(a, map(&[("a", "1")]));
    }

    #[test]
    fn an_empty_map_allocates_nothing_until_changed() {
        let mut empty = StringMap::new();
        assert!(empty.0.is_none());
        assert!(StringMap::from(BTreeMap::new()).0.is_none());
        assert_eq!(empty, StringMap::default());
        assert!(empty.is_empty());
        empty.insert("a".into(), "1".into());
        assert_eq!(empty, map(&[("a", "1")]));
        assert_ne!(empty, StringMap::new());
    }

    #[test]
    fn an_unshared_map_is_changed_in_place() {
        let mut only = map(&[("a", "1")]);
        let before: *const BTreeMap<String, String> = &*only;
        only.insert("b".into(), "2".into());
        assert!(std::ptr::eq(before, &*only));
    }
}
