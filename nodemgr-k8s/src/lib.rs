//! # nodemgr-k8s
//!
//! The Kubernetes adapter of nodemgr: the Deckhouse-compatible custom resources, conversions
//! between API objects and nodemgr-core's views, the cluster port over kube-rs ([`cluster`]) with
//! what its caches keep ([`prune`], [`pod_cache`]), the
//! controllers ([`controllers`]) supervised as one unit ([`supervisor`]), leader election
//! ([`leader`]), the watches' retry schedule ([`watch_backoff`]), metrics ([`metrics`]), the
//! PKCS#10 reader of kubelet serving CSRs ([`pkcs10`]) and the
//! HTTP endpoints and shutdown signal of the controller binary ([`serve`]).

pub mod bashible_secrets;
pub mod bashible_sources;
pub mod bashible_status;
pub mod cluster;
pub mod controllers;
pub mod convert;
pub mod crd;
pub mod exposition;
pub mod leader;
pub mod metrics;
pub mod node_views;
pub mod pkcs10;
pub mod pod_cache;
pub mod prune;
pub mod serve;
pub mod settings;
pub mod supervisor;
pub mod tls;
pub mod watch_backoff;
pub mod watch_health;
