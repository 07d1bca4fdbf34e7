//! A label or annotation map whose copies share one allocation until one of them is changed.
//!
//! Node and pod views are copied often: a watch cache hands out a view, an executor keeps one
//! between passes, the simulator versions every state of a node. The labels and annotations
//! are most of a view's size and almost never change together with the rest of it, so
//! [`StringMap`] keeps them behind an `Arc`: a clone costs one reference count, a change
//! (through [`std::ops::DerefMut`]) copies the map only when another view still shares it, and
//! two views that share a map compare equal without looking at its entries.
//!
//! Reading is a `BTreeMap<String, String>` read (the map derefs to one), so callers use
//! `get`, `contains_key`, `iter` and friends as before. An empty map allocates nothing (most
//! pods carry no annotation nodemgr keeps).

use std::collections::BTreeMap;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

/// Labels or annotations: a `BTreeMap<String, String>` shared between copies (see the module
/// docs).
#[derive(Clone, Default)]
pub struct StringMap(Option<Arc<BTreeMap<String, String>>>);

/// What an empty [`StringMap`] derefs to.
static EMPTY: BTreeMap<String, String> = BTreeMap::new();

impl StringMap {
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

    /// The map, copied only when another view still shares it.
    pub fn into_inner(self) -> BTreeMap<String, String> {
        self.0.map(Arc::unwrap_or_clone).unwrap_or_default()
    }
}

impl Deref for StringMap {
    type Target = BTreeMap<String, String>;

    fn deref(&self) -> &Self::Target {
        self.0.as_deref().unwrap_or(&EMPTY)
    }
}

impl DerefMut for StringMap {
    /// The map to change, copied first when another view shares it.
    fn deref_mut(&mut self) -> &mut Self::Target {
        Arc::make_mut(self.0.get_or_insert_with(Arc::default))
    }
}

impl PartialEq for StringMap {
    fn eq(&self, other: &Self) -> bool {
        self.shares_with(other) || **self == **other
    }
}

impl Eq for StringMap {}

impl PartialOrd for StringMap {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for StringMap {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (**self).cmp(&**other)
    }
}

impl std::hash::Hash for StringMap {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (**self).hash(state);
    }
}

impl PartialEq<BTreeMap<String, String>> for StringMap {
    fn eq(&self, other: &BTreeMap<String, String>) -> bool {
        **self == *other
    }
}

impl fmt::Debug for StringMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl From<BTreeMap<String, String>> for StringMap {
    fn from(map: BTreeMap<String, String>) -> Self {
        Self((!map.is_empty()).then(|| Arc::new(map)))
    }
}

impl From<StringMap> for BTreeMap<String, String> {
    fn from(map: StringMap) -> Self {
        map.into_inner()
    }
}

impl<const N: usize> From<[(String, String); N]> for StringMap {
    fn from(entries: [(String, String); N]) -> Self {
        Self::from(BTreeMap::from(entries))
    }
}

impl FromIterator<(String, String)> for StringMap {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(entries: I) -> Self {
        Self::from(entries.into_iter().collect::<BTreeMap<_, _>>())
    }
}

impl Extend<(String, String)> for StringMap {
    fn extend<I: IntoIterator<Item = (String, String)>>(&mut self, entries: I) {
        (**self).extend(entries);
    }
}

impl<'a> IntoIterator for &'a StringMap {
    type Item = (&'a String, &'a String);
    type IntoIter = std::collections::btree_map::Iter<'a, String, String>;

    fn into_iter(self) -> Self::IntoIter {
        (**self).iter()
    }
}

impl IntoIterator for StringMap {
    type Item = (String, String);
    type IntoIter = std::collections::btree_map::IntoIter<String, String>;

    fn into_iter(self) -> Self::IntoIter {
        self.into_inner().into_iter()
    }
}

impl serde::Serialize for StringMap {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(serializer)
    }
}

impl<'de> serde::Deserialize<'de> for StringMap {
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
