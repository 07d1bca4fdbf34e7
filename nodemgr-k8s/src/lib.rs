//! # nodemgr-k8s
//!
//! The Kubernetes adapter of nodemgr: the Deckhouse-compatible custom resources, conversions
//! between API objects and nodemgr-core's views, the cluster port over kube-rs ([`cluster`]), the
//! controllers ([`controllers`]), leader election ([`leader`]), metrics ([`metrics`]) and the
//! HTTP endpoints and shutdown signal of the controller binary ([`serve`]).

pub mod cluster;
pub mod controllers;
pub mod convert;
pub mod crd;
pub mod leader;
pub mod metrics;
pub mod serve;
pub mod watch_health;
