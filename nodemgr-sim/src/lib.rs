//! # nodemgr-sim
//!
//! An in-memory Kubernetes cluster with a virtual clock, for running nodemgr's executors and
//! policies without a cluster: scenario tests, property tests, benchmarks and
//! `nodemgr simulate`. It implements the ports ([`nodemgr_core::ports`]: the cluster and
//! machine ports over the [`World`] in [`cluster`], the cloud port in [`cloud`]), so the
//! executors that run here are the ones node-manager runs (docs/executors.md):
//!
//! | controller | drives | the simulator plays around it |
//! |---|---|---|
//! | [`UpdateController`] | `nodemgr_core::executor::UpdateExecutor` | the node agents (bashible), `RollingUpdate` machines of groups without `scaling` |
//! | [`scaling::ScalingController`] | `nodemgr_core::executor::ScalingExecutor` | the cloud, kubelets joining machines, the standby holders' ReplicaSet controller, kube-scheduler |
//! | [`health::FencingController`] | `nodemgr_core::executor::FencingExecutor` | heartbeats, dark nodes |
//! | [`health::LifecycleController`] | the node lifecycle policy directly (kube-controller-manager's, not node-manager's) | heartbeats, dark nodes |
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
mod text;
pub mod timeline;
pub mod world;

pub use cluster::{SimCluster, block_on};
pub use controller::{Controller, UpdateController};
pub use rng::SimRng;
pub use scenario::{Scenario, ScenarioError};
pub use sim::{Simulation, run};
pub use timeline::{Name, Timeline, TimelineEvent};
pub use world::{SimStats, World};

/// The default scenario (`examples/scenarios/default.yaml`): a kubelet-restart change rolling
/// through a group under maxConcurrent, a Manual disruptive change approved by the operator,
/// and an Automatic disruptive change whose drain force-deletes a PDB-blocked pod at 5 min.
pub const DEFAULT_SCENARIO: &str = include_str!("../../examples/scenarios/default.yaml");
