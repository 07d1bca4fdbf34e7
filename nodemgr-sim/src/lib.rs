//! # nodemgr-sim
//!
//! An in-memory Kubernetes cluster with a virtual clock, for running nodemgr's executors and
//! policies without a cluster: scenario tests, property tests, benchmarks and
//! `nodemgr simulate`. It implements the cluster port ([`nodemgr_core::ports`]), so the update
//! executor that runs here is the one the Kubernetes adapter runs.
//!
//! - [`Scenario`]: what the cluster looks like and what happens (YAML, see the README).
//! - [`World`]: groups, nodes (heartbeats, readiness, zones, labels, annotations, taints,
//!   capacity), pods (owners, priorities, requests), PodDisruptionBudgets, the node agent, and
//!   injected failures.
//! - [`Controller`]: a policy stepped by the run loop ([`UpdateController`], the fencing and
//!   lifecycle controllers); add your own with [`Simulation::add_controller`].
//! - [`run`] / [`Simulation`]: the run loop; [`Timeline`]: what happened.
//!
//! Deterministic: the same scenario and seed give the same timeline (the only randomness is
//! the seeded [`SimRng`]; the clock is virtual).
//!
//! ```
//! let scenario = nodemgr_sim::Scenario::from_yaml(nodemgr_sim::DEFAULT_SCENARIO).unwrap();
//! let timeline = nodemgr_sim::run(&scenario, 1);
//! assert!(timeline.of_kind("update.approved").count() > 0);
//! ```

pub mod agent;
pub mod api;
pub mod cloud;
pub mod cluster;
pub mod controller;
pub mod fencing_faults;
pub mod health;
pub mod rng;
pub mod scaling;
pub mod scenario;
pub mod sim;
pub mod timeline;
pub mod world;

pub use cluster::{SimCluster, block_on};
pub use controller::{Controller, UpdateController};
pub use rng::SimRng;
pub use scenario::{Scenario, ScenarioError};
pub use sim::{Simulation, run};
pub use timeline::{Timeline, TimelineEvent};
pub use world::{SimStats, World};

/// The default scenario (`examples/scenarios/default.yaml`): a kubelet-restart change rolling
/// through a group under maxConcurrent, a Manual disruptive change approved by the operator,
/// and an Automatic disruptive change whose drain force-deletes a PDB-blocked pod at 5 min.
pub const DEFAULT_SCENARIO: &str = include_str!("../../examples/scenarios/default.yaml");
