//! The scheduling simulation every scaling decision rests on: whether a pod fits a node, and a
//! fast first-fit engine that packs many pods onto many nodes (existing, ordered, or imagined
//! from a group's template).
//!
//! # What a fit means (kube-scheduler's filters, as far as nodemgr models them)
//! * **Node condition**: the node is Ready and schedulable (not cordoned).
//! * **Resources**: for every resource the pod requests (`cpu`, `memory`, extended resources
//!   such as `nvidia.com/gpu`, `hugepages-*`, and `ephemeral-storage`), the node's allocatable
//!   minus the requests of the non-finished pods already bound to it covers the request; one pod
//!   slot of `pods` is always needed. A resource missing from the node's allocatable is 0 for
//!   extended resources (a name with a `/` outside `kubernetes.io/`, or `hugepages-*`) and
//!   unlimited for the others (as the scheduler ignores `ephemeral-storage` a node does not
//!   report).
//! * **nodeSelector**: every pair is a node label.
//! * **Required node affinity**: some term has all its `matchExpressions` true
//!   (`In`/`NotIn`/`Exists`/`DoesNotExist`); an empty term matches nothing.
//! * **Taints**: every `NoSchedule` and `NoExecute` taint is tolerated; `PreferNoSchedule` is
//!   ignored.
//! * **Hostname pod anti-affinity** (required, `kubernetes.io/hostname` topology, the pod's own
//!   namespace): no pod on the node matches one of the pod's selectors, and no pod on the node
//!   has a selector matching the pod (the scheduler enforces existing pods' anti-affinity too).
//! * **Topology spread, pod affinity and the other anti-affinity terms** on the hostname and zone
//!   keys (docs/scheduling.md §1): these depend on the whole cluster, not one node, so
//!   [`check_fit`] does not read them; [`super::reference::Cluster::check`] adds them to it, and
//!   the engine evaluates them with incremental counters (`scaling::topology`).
//!
//! Not modelled: volume topology, host ports, and preemption of anything but standby-holder
//! pods.
//!
//! [`check_fit`] is the plain reading of the node-local rules over model objects; the engine
//! (`Bins`, `Placer`) computes the same answer fast (resource vectors in a max-tree, pods
//! grouped into equivalence classes, per-class first-fit cursors) and properties keep the two,
//! and the topology rules against the reference, in agreement.
//!
//! First-fit cursors skip a bin for a class only when the refusal lasts (room only shrinks in
//! one simulation, node labels never change, hostname anti-affinity only grows); a refusal by
//! pod affinity, topology spread or zone-level anti-affinity may lift as other pods land, so the
//! cursor stops there (docs/scheduling.md §2).
//!
//! # Files
//! | file | decides |
//! |---|---|
//! | `fit` | whether a pod fits a node, read plainly from the model ([`check_fit`]) |
//! | `resources` | resource vectors: which resources are numbered, what a pod takes, how large it is |
//! | `max_tree` | the first bin with enough free room, over a tree of per-resource maxima |
//! | `bins` | the per-node state of one simulation: free room, held room, pods, topology counters |
//! | `placer` | first-fit placement with per-class cursors, and the journal that rolls trials back |
//! | `classes` | pods the simulation cannot tell apart, and the first-fit-decreasing order |

mod bins;
mod classes;
mod fit;
mod max_tree;
mod placer;
mod resources;
#[cfg(test)]
mod test_support;

pub use fit::{
    Misfit, anti_affine, check_fit, check_static, is_extended_resource, is_standby_holder,
    static_fits,
};

pub(crate) use bins::Bins;
pub(crate) use classes::{PodClass, classify, trial_order};
pub(crate) use placer::Placer;
pub(crate) use resources::{CPU, Demand, MEMORY, ResourceIndex, fits_empty};
