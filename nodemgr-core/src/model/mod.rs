//! The domain model: NodeGroup, StaticInstance, SSHCredentials, Instance,
//! NodeGroupConfiguration and NodeUser with Deckhouse's
//! field names (docs/deckhouse.md §1–§2), the cluster views policies decide on, time and quantities, and the
//! label/annotation keys in one place.

pub mod cluster;
pub mod enums;
pub mod keys;
pub mod manifest;
pub mod meta;
pub mod node_group;
pub mod node_group_configuration;
pub mod node_user;
pub mod quantity;
pub mod shared_map;
pub mod spec_facts;
pub mod static_instance;
pub mod time;

pub use cluster::{
    NamespaceScope, Node, Owner, Pod, PodAffinityTerm, PodDisruptionBudget, PodPhase, Resources,
    Toleration, TopologyKey, TopologySpreadConstraint, WeightedPodAffinityTerm, WhenUnsatisfiable,
    pod_key,
};
pub use manifest::{
    Document, Manifest, ManifestError, parse_documents, parse_manifest, parse_manifest_with,
    parse_node_group,
};
pub use meta::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta, ObjectReference, SelectorOperator,
};
pub use node_group::*;
pub use node_group_configuration::{
    ALL, DEFAULT_CONFIGURATION_WEIGHT, NodeGroupConfiguration, NodeGroupConfigurationSpec,
};
pub use node_user::{MIN_NODE_USER_UID, NodeUser, NodeUserSpec, NodeUserStatus};
pub use quantity::{Quantity, QuantityError};
pub use shared_map::{SharedMap, SharedResources, StringMap};
pub use static_instance::*;
pub use time::{DurationError, MAX_DURATION, Timestamp, parse_duration, parse_duration_checked};
