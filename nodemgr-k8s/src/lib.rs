//! # nodemgr-k8s
//!
//! The Kubernetes adapter of nodemgr: the Deckhouse-compatible custom resources, conversions
//! between API objects and nodemgr-core's views, and (in later modules) the cluster port over
//! kube-rs, the controllers, leader election and metrics.

pub mod cluster;
pub mod controllers;
pub mod convert;
pub mod crd;
pub mod leader;
pub mod metrics;
