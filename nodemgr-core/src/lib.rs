//! # nodemgr-core
//!
//! The pure half of nodemgr: the Deckhouse-compatible NodeGroup model and every policy that
//! decides what happens to a group's nodes. The crate is sans-I/O: no network, no files, no
//! async runtime, no clock reads. Time comes in as `now` ([`model::Timestamp`]); policies take a
//! snapshot and return decisions as data, which adapters (`nodemgr-k8s`, `nodemgr-ssh`,
//! `nodemgr-cloud`) or the simulator (`nodemgr-sim`) carry out.

pub mod admission;
pub mod agent;
pub mod backoff;
pub mod bashible;
pub mod bootstrap_tokens;
pub mod conversion;
pub mod drain;
pub mod executor;
pub mod fencing;
pub mod group_status;
pub mod hash;
pub mod impact;
pub mod lifecycle;
pub mod machines;
pub mod model;
pub mod node_duties;
pub mod node_template;
pub mod oom;
pub mod ports;
pub mod read_your_writes;
pub mod scaling;
pub mod serving_certificates;
pub mod static_nodes;
pub mod update;
pub mod validate;
pub mod window;

pub use impact::{ChangeImpact, Impact, ImpactKind, impact_of};
pub use model::{NodeGroup, NodeGroupSpec};
pub use validate::{
    FieldError, ValidationContext, validate_document, validate_node_group,
    validate_node_group_update, validate_ssh_credentials, validate_static_instance,
};
