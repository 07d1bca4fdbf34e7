//! Decides the fencing of silent nodes (see `docs/fencing.md`): on the node, when the fencing
//! agent arms, feeds and disarms the watchdog ([`FencingAgent`], `agent.rs`); in the cluster,
//! how long a node must be silent before its watchdog has surely fired (`deadline.rs`), when
//! the controller may trust what it sees (`confirm.rs`) and when it deletes a silent node's
//! pods and then the node, with a storm guard per zone and for the whole cluster
//! ([`plan_fencing`], `plan.rs`).
//!
//! # Agent
//!
//! Every `api_check_interval` the agent reads its own Node and its kubelet's Lease
//! ([`AgentAction::CheckApi`]); the binary reports the outcome with
//! [`FencingAgent::handle_api_check`], the node's maintenance annotations with
//! [`FencingAgent::handle_node`] (see [`is_maintenance`]) and the Lease's `renewTime` with
//! [`FencingAgent::handle_kubelet_lease`]. Then:
//!
//! 1. maintenance and armed → [`AgentAction::RemoveLabel`], then [`AgentAction::Disarm`];
//! 2. not maintenance, disarmed, the API answered and the kubelet alive →
//!    [`AgentAction::ArmWatchdog`], then [`AgentAction::SetLabel`] (a failed label ⇒ disarm
//!    and exit, see [`FencingAgent::handle_action_failed`]);
//! 3. API up, kubelet alive, no maintenance, armed → [`AgentAction::Feed`] every
//!    `feed_interval`.
//!
//! After a failed check the agent never feeds until a later check succeeds, so a node cut off
//! from the API reboots `watchdog_timeout` after its last feed. While a check is in flight the
//! agent does not feed either, and a check that stays unanswered for `api_timeout` counts as
//! a timeout. The kubelet is alive while the agent saw it renew its Lease within
//! `kubelet_stale_after`: a node whose kubelet died while the API still answers reboots too,
//! so its containers cannot outlive the deletion of their pods.
//!
//! # Controller
//!
//! Each pass: [`judge_cache`] (a failing or quiet watch ⇒ do nothing), the cached heartbeats
//! through [`HeartbeatObserver::observe`], [`plan_fencing`] on that view, and for every
//! deletion a direct read of the node's Lease and Node confirmed by
//! [`HeartbeatObserver::confirm`]. The deadline is
//! `fencing.watchdog.timeout + kubelet_stale_after + margin` (95 s by default,
//! [`FencingConfig::deadline_for`]), counted from the controller's own observation of the
//! last heartbeat.

mod agent;
mod confirm;
mod deadline;
mod plan;

pub use agent::{AgentAction, AgentConfig, ApiCheck, ApiErrorKind, FencingAgent, is_maintenance};
pub use confirm::{
    CacheHealth, CacheVerdict, Confirmation, DirectRead, HeartbeatObserver, judge_cache,
};
pub use deadline::{DeadlineError, min_deadline, validate_agent};
pub use plan::{
    ClusterStorm, FencedNode, FencingCommand, FencingConfig, FencingPlan, StormSuppressed,
    heartbeat_token, plan_fencing, watchdog_timeout,
};

/// Errors of the fencing module.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FencingError {
    /// `spec.fencing.watchdog.timeout` is not a duration.
    #[error("failed to parse fencing.watchdog.timeout {0:?}: expected a duration such as 60s")]
    InvalidTimeout(String),
}
