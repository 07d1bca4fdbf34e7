//! Resource vectors: the core resources (cpu, memory, pod slots) at fixed indices, extended
//! resources numbered per simulation ([`ResourceIndex`]), what one pod takes ([`Demand`]), and
//! the size that orders first-fit decreasing ([`size_score`]).

use std::collections::HashMap;

use crate::hash::FastHash;
use crate::model::{Pod, Resources};

use super::fit::is_extended_resource;
use super::max_tree::covers;

/// Index of CPU in a core resource vector.
pub(crate) const CPU: usize = 0;
/// Index of memory in a core resource vector.
pub(crate) const MEMORY: usize = 1;
/// Index of the pod count in a core resource vector.
pub(crate) const PODS: usize = 2;
/// Milli-units of one pod slot.
pub(crate) const ONE_POD: i64 = 1000;
/// "Unlimited" for resources a node does not report (far from overflow when summed).
const UNLIMITED: i64 = i64::MAX / 4;

/// Resource names beyond cpu, memory and pods, numbered.
#[derive(Debug, Clone, Default)]
pub(crate) struct ResourceIndex {
    names: Vec<String>,
    by_name: HashMap<String, u32, FastHash>,
}

impl ResourceIndex {
    /// Numbers every extra resource `pods` request.
    #[cfg(test)]
    pub(crate) fn from_pods<'p>(pods: impl IntoIterator<Item = &'p Pod>) -> Self {
        let mut index = Self::default();
        for p in pods {
            for name in p.requests.keys() {
                if !matches!(name.as_str(), "cpu" | "memory" | "pods")
                    && !index.by_name.contains_key(name)
                {
                    index.by_name.insert(name.clone(), index.names.len() as u32);
                    index.names.push(name.clone());
                }
            }
        }
        index
    }

    pub(crate) fn len(&self) -> usize {
        self.names.len()
    }

    /// The capacity vector of an allocatable map.
    pub(crate) fn capacity(&self, allocatable: &Resources) -> ([i64; 3], Vec<i64>) {
        let get = |k: &str| allocatable.get(k).map_or(0, |q| q.0);
        let core = [get("cpu"), get("memory"), get("pods")];
        let ext = self
            .names
            .iter()
            .map(|n| {
                allocatable.get(n).map_or(
                    if is_extended_resource(n) {
                        0
                    } else {
                        UNLIMITED
                    },
                    |q| q.0,
                )
            })
            .collect();
        (core, ext)
    }

    /// The demand of a pod, numbering the extra resources it requests that are new: one pass
    /// instead of [`ResourceIndex::from_pods`] then [`ResourceIndex::demand`].
    pub(crate) fn demand_indexing(&mut self, pod: &Pod) -> Demand {
        demand_of(pod, |name| {
            Some(match self.by_name.get(name) {
                Some(&i) => i,
                None => {
                    let i = self.names.len() as u32;
                    self.by_name.insert(name.to_owned(), i);
                    self.names.push(name.to_owned());
                    i
                }
            })
        })
    }

    /// The demand of a pod (names it requests must have been indexed).
    pub(crate) fn demand(&self, pod: &Pod) -> Demand {
        demand_of(pod, |name| self.by_name.get(name).copied())
    }
}

/// The demand of a pod, its extra resources (those requested above 0) numbered by `index_of`
/// (`None`: not tracked).
fn demand_of(pod: &Pod, mut index_of: impl FnMut(&str) -> Option<u32>) -> Demand {
    let mut core = [0; 3];
    core[PODS] = ONE_POD;
    let mut d = Demand {
        core,
        ext: Vec::new(),
    };
    for (name, q) in &pod.requests {
        match name.as_str() {
            "cpu" => d.core[CPU] = q.0.max(0),
            "memory" => d.core[MEMORY] = q.0.max(0),
            "pods" => {}
            other => {
                if q.0 > 0
                    && let Some(i) = index_of(other)
                {
                    d.ext.push((i, q.0));
                }
            }
        }
    }
    d
}

/// What a pod takes from a node.
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub(crate) struct Demand {
    /// cpu, memory, pods (milli-units).
    pub(crate) core: [i64; 3],
    /// Extra resources: (index, amount), in index order.
    pub(crate) ext: Vec<(u32, i64)>,
}

/// A first-fit-decreasing order key: pods needing extended resources first, then larger CPU +
/// memory (1 core weighs as 4 GiB), then name.
pub(crate) fn size_score(d: &Demand) -> i128 {
    i128::from(d.core[CPU]) * i128::from(4i64 << 30) + i128::from(d.core[MEMORY])
}

/// Whether `demand` fits an empty node of capacity `cap` (as [`ResourceIndex::capacity`]
/// gives it).
pub(crate) fn fits_empty(demand: &Demand, cap: &([i64; 3], Vec<i64>)) -> bool {
    covers(&cap.0, &demand.core)
        && demand
            .ext
            .iter()
            .all(|&(i, v)| cap.1.get(i as usize).is_some_and(|&c| c >= v))
}
