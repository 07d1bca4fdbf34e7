//! # nodemgr-core
//!
//! The pure half of nodemgr: the Deckhouse-compatible NodeGroup model and every policy that
//! decides what happens to a group's nodes. The crate is sans-I/O: no network, no files, no
//! async runtime, no clock reads. Time comes in as `now` ([`model::Timestamp`]); policies take a
//! snapshot and return decisions as data, which adapters (`nodemgr-k8s`, `nodemgr-ssh`,
//! `nodemgr-cloud`) or the simulator (`nodemgr-sim`) carry out.

pub mod drain;
pub mod model;
pub mod update;
pub mod window;

pub use model::{NodeGroup, NodeGroupSpec};
