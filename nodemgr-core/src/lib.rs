//! # nodemgr-core
//!
//! The pure half of nodemgr: the Deckhouse-compatible NodeGroup model and every policy that
//! decides what happens to a group's nodes. The crate is sans-I/O: no network, no files, no
//! async runtime, no clock reads. Time comes in as `now` ([`model::Timestamp`]); policies take a
//! snapshot and return decisions as data, which adapters (`nodemgr-k8s`, `nodemgr-ssh`,
//! `nodemgr-cloud`) or the simulator (`nodemgr-sim`) carry out.
//!
//! # Entry points
//!
//! Every policy is entered by one of five kinds of name:
//!
//! - `plan_*`: a pure decision over a snapshot at `now`, with no state kept between calls
//!   ([`update::plan_updates`], [`scaling::scale_up::plan_scale_up`], [`fencing::plan_fencing`],
//!   [`bootstrap_tokens::plan_bootstrap_tokens`], [`serving_certificates::plan_serving_certificate`],
//!   [`oom::plan_victim`], …);
//! - `step`: one pass of a state machine that keeps state between passes (back-offs, operations
//!   in flight) and returns that pass's decisions ([`machines::Machines::step`],
//!   [`static_nodes::StaticNodes::step`]), or of an executor that also carries them out over the
//!   ports ([`executor::UpdateExecutor::step`]);
//! - `handle_*`: an event fed into a state machine (an answer, a sample, a timer that fired);
//! - `poll_*`: the next thing a state machine wants done, until it returns `None`;
//! - `next_deadline`: when the state machine should next be woken if nothing else happens.
//!
//! # Examples
//!
//! Validate a NodeGroup the way Deckhouse's schema and webhook would
//! ([`validate::validate_node_group`]):
//!
//! ```
//! use nodemgr_core::model::parse_node_group;
//! use nodemgr_core::validate::{ValidationContext, validate_node_group};
//!
//! let group = parse_node_group(
//!     "apiVersion: deckhouse.io/v1\nkind: NodeGroup\nmetadata: {name: worker}\n\
//!      spec: {nodeType: Static, update: {maxConcurrent: 0}, nodeDrainTimeoutSecond: -5}",
//! )?;
//! let errors = validate_node_group(&group, &ValidationContext::default());
//! let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
//! assert_eq!(paths, ["spec.nodeDrainTimeoutSecond", "spec.update.maxConcurrent"]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Plan one update pass ([`update::plan_updates`]): of three nodes waiting for an update, a
//! group with `maxConcurrent: 2` approves two.
//!
//! ```
//! use std::collections::BTreeMap;
//! use nodemgr_core::model::{Node, Timestamp, keys, parse_node_group};
//! use nodemgr_core::update::{UpdateCommand, plan_updates};
//!
//! let group = parse_node_group(
//!     "apiVersion: deckhouse.io/v1\nkind: NodeGroup\nmetadata: {name: worker}\n\
//!      spec: {nodeType: Static, update: {maxConcurrent: 2}}",
//! )?;
//! let waiting = |name: &str| {
//!     let mut node = Node { name: name.into(), ready: true, ..Node::default() };
//!     node.labels.insert(keys::LABEL_NODE_GROUP.into(), "worker".into());
//!     node.annotations.insert(keys::ANNOTATION_CONFIGURATION_CHECKSUM.into(), "v1".into());
//!     node.annotations.insert(keys::ANNOTATION_WAITING_FOR_APPROVAL.into(), String::new());
//!     node
//! };
//! let nodes = [waiting("w-0"), waiting("w-1"), waiting("w-2")];
//! let desired = BTreeMap::from([("worker".to_owned(), "v2".to_owned())]);
//! let commands = plan_updates(&[group], &desired, &nodes, Timestamp::EPOCH);
//! assert_eq!(
//!     commands,
//!     [
//!         UpdateCommand::Approve { node: "w-0".into() },
//!         UpdateCommand::Approve { node: "w-1".into() },
//!     ]
//! );
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The executors ([`executor`]) carry such plans out over the ports ([`ports`]); the
//! `update_executor` example of the repository's `examples/` drives one against a port of its
//! own, and `scale_up_plan` plans machines for pending pods
//! ([`scaling::plan_scale_up`], which has an example of its own).

pub mod admission;
pub mod agent;
pub mod backoff;
pub mod bashible;
pub mod bootstrap_tokens;
pub mod conversion;
pub mod disruption;
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
