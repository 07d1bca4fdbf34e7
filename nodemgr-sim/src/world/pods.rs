//! The world's pod table ([`Pods`]): pods by `namespace/name` in a hash map, so that binding,
//! finding and removing a pod costs one hash lookup rather than a search of a string-keyed
//! B-tree that moves whole pods around its nodes. It answers as the `BTreeMap<String, SimPod>`
//! it replaces: iteration is in key order, from the keys sorted when first iterated after a
//! change (pods are iterated rarely — listings, PodDisruptionBudgets, a scheduler controller —
//! and bound and removed often).

use std::cell::OnceCell;
use std::collections::HashMap;
use std::collections::hash_map::Entry;

use nodemgr_core::hash::FastHash;

use super::SimPod;

/// The world's pods by `namespace/name`, iterated in key order (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct Pods {
    map: HashMap<String, SimPod, FastHash>,
    /// The keys in order, made when first iterated after a change.
    order: OnceCell<Vec<String>>,
}

impl Pods {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes room for `additional` more pods (a capacity hint: iteration is in key order or,
    /// [`Pods::iter_unordered`], for callers whose result does not depend on it).
    pub(crate) fn reserve(&mut self, additional: usize) {
        self.map.reserve(additional);
    }

    /// How many pods.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Pod `key`.
    pub fn get(&self, key: &str) -> Option<&SimPod> {
        self.map.get(key)
    }

    /// Pod `key`, to change.
    pub fn get_mut(&mut self, key: &str) -> Option<&mut SimPod> {
        self.map.get_mut(key)
    }

    /// Whether pod `key` exists.
    pub fn contains_key(&self, key: &str) -> bool {
        self.map.contains_key(key)
    }

    /// Sets pod `key`; the one it replaces, if any.
    pub fn insert(&mut self, key: String, pod: SimPod) -> Option<SimPod> {
        match self.map.entry(key) {
            Entry::Occupied(mut old) => Some(std::mem::replace(old.get_mut(), pod)),
            Entry::Vacant(place) => {
                self.order.take();
                place.insert(pod);
                None
            }
        }
    }

    /// Takes pod `key` out.
    pub fn remove(&mut self, key: &str) -> Option<SimPod> {
        let pod = self.map.remove(key)?;
        self.order.take();
        Some(pod)
    }

    fn order(&self) -> &[String] {
        self.order.get_or_init(|| {
            let mut keys: Vec<String> = self.map.keys().cloned().collect();
            keys.sort_unstable();
            keys
        })
    }

    /// The pods with their keys, in key order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&String, &SimPod)> {
        self.order()
            .iter()
            .filter_map(|key| self.map.get_key_value(key.as_str()))
    }

    /// The pods with their keys in no particular order (without sorting the keys), for
    /// callers whose result does not depend on the order.
    pub(crate) fn iter_unordered(&self) -> impl Iterator<Item = (&String, &SimPod)> {
        self.map.iter()
    }

    /// The keys, in order.
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &String> {
        self.iter().map(|(key, _)| key)
    }

    /// The pods, in key order.
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &SimPod> {
        self.iter().map(|(_, pod)| pod)
    }
}

impl<'a> IntoIterator for &'a Pods {
    type Item = (&'a String, &'a SimPod);
    type IntoIter = Box<dyn Iterator<Item = (&'a String, &'a SimPod)> + 'a>;

    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

impl FromIterator<(String, SimPod)> for Pods {
    fn from_iter<I: IntoIterator<Item = (String, SimPod)>>(iter: I) -> Self {
        let mut pods = Pods::new();
        for (key, pod) in iter {
            pods.insert(key, pod);
        }
        pods
    }
}

#[cfg(test)]
mod tests {
    //! The table answers as a `BTreeMap` of the same pods.

    use super::*;
    use nodemgr_core::model::Pod;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn pod(name: &str) -> SimPod {
        SimPod {
            pod: Pod {
                name: name.to_owned(),
                ..Pod::default()
            },
            terminating_until: None,
            workload: None,
        }
    }

    proptest! {
        #[test]
        fn the_pod_table_is_a_map_by_key(
            ops in prop::collection::vec((0u8..4, 0u8..40, any::<u8>()), 0..200),
        ) {
            let mut table = Pods::new();
            let mut map: BTreeMap<String, SimPod> = BTreeMap::new();
            for (op, key, tag) in ops {
                let key = format!("ns/p{key}");
                match op {
                    0 | 1 => {
                        let a = table.insert(key.clone(), pod(&format!("{tag}")));
                        let b = map.insert(key, pod(&format!("{tag}")));
                        prop_assert_eq!(a.map(|p| p.pod.name), b.map(|p| p.pod.name));
                    }
                    2 => {
                        let a = table.remove(&key);
                        let b = map.remove(&key);
                        prop_assert_eq!(a.map(|p| p.pod.name), b.map(|p| p.pod.name));
                    }
                    _ => {
                        prop_assert_eq!(
                            table.get(&key).map(|p| &p.pod.name),
                            map.get(&key).map(|p| &p.pod.name)
                        );
                        let listed: Vec<(&String, &String)> =
                            table.iter().map(|(k, p)| (k, &p.pod.name)).collect();
                        let expected: Vec<(&String, &String)> =
                            map.iter().map(|(k, p)| (k, &p.pod.name)).collect();
                        prop_assert_eq!(listed, expected);
                    }
                }
                prop_assert_eq!(table.len(), map.len());
            }
            let listed: Vec<&String> = table.keys().collect();
            let expected: Vec<&String> = map.keys().collect();
            prop_assert_eq!(listed, expected);
        }
    }
}
