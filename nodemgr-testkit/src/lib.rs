//! nodemgr-testkit: a Kubernetes API emulator for tests and playing.
//!
//! [`Emulator::start`] serves, on `http://127.0.0.1:PORT`, what kube-apiserver serves for the
//! clients nodemgr cares about (kube-rs controllers and a person's `kubectl`): discovery, CRDs
//! registered by creating CustomResourceDefinitions, list/watch with resourceVersions (resume,
//! 410 Gone, bookmarks), get/create/update/delete with optimistic concurrency and
//! preconditions, merge/JSON/strategic-merge patches, server-side apply with field managers,
//! the status subresource, `pods/eviction` honouring PodDisruptionBudgets, label and field
//! selectors, and Table output for `kubectl get`.
//!
//! It also calls admission webhooks and CRD conversion webhooks, prunes, defaults and validates
//! custom resources against their schemas (`fieldValidation`, a subset of CEL rules), serves
//! Events through both APIs, and answers `/healthz`, `/livez`, `/readyz`.
//!
//! It is a **test double**: everything lives in memory, there is no authentication, garbage
//! collection or scheduling. `docs/api-emulator.md` describes the request path and where it
//! differs from kube-apiserver.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let emulator = nodemgr_testkit::Emulator::start().await?;
//! println!("KUBECONFIG={}", emulator.kubeconfig_path().display());
//! emulator.seed(serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "w1"}}))?;
//! emulator.shutdown().await;
//! # Ok(()) }
//! ```

pub mod admission;
pub mod approval;
pub mod auth_reviews;
pub mod cel;
pub mod conversion;
pub mod discovery;
pub mod duplicates;
pub mod emulator;
pub mod events;
pub mod eviction;
pub mod faults;
pub mod fleet;
mod fleet_agent;
pub mod health;
pub mod latency;
pub mod managed;
pub mod media;
pub mod openapi;
pub mod patch;
pub mod protobuf;
pub mod query;
pub mod registry;
pub mod schema;
pub mod selector;
pub mod server;
pub mod status;
pub mod store;
pub mod structural;
pub mod table;
pub mod time;
pub mod webhook_client;
mod write;

pub use emulator::{Emulator, EmulatorError, EmulatorOptions, kubeconfig_text};
pub use faults::Fault;
pub use fleet::{Fleet, FleetConfig, FleetEvent, FleetNode, Generation, Workload, WorkloadKind};
pub use latency::RequestDelay;
pub use status::ApiError;
