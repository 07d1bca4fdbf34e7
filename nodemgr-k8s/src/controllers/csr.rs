//! The kubelet serving certificate controller: approves or denies pending
//! `kubernetes.io/kubelet-serving` CertificateSigningRequests as
//! [`nodemgr_core::serving_certificates::plan_serving_certificate`] says, through the `approval` subresource
//! (see `docs/bootstrap.md`).
//!
//! A kube-runtime `Controller` over CertificateSigningRequests: each pending request of the
//! kubelet-serving signer is decided against its Node read fresh from the API (a request
//! whose Node is missing from a cache is not denied), and the `Approved` or `Denied`
//! condition is written with the request's resourceVersion as a precondition, so a request
//! changed or decided by someone else meanwhile is decided again on fresh data, never twice.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Node;
use kube::api::PostParams;
use kube::runtime::controller::Action;
use kube::runtime::{Controller, watcher};
use kube::{Api, Client, ResourceExt};
use nodemgr_core::model::Timestamp;
use nodemgr_core::serving_certificates::{
    APPROVED_REASON, CsrDecision, NodeAddresses, SIGNER_KUBELET_SERVING, ServingRequest,
    plan_serving_certificate,
};
use serde_json::json;
use tokio::sync::watch;

use super::{Backoff, RETRY_FIRST, RETRY_MAX, now};
use crate::metrics::Metrics;
use crate::pkcs10;
use nodemgr_core::ports::ErrorChain;

/// The controller's name in metrics and logs.
const CONTROLLER: &str = "csr";

/// A failed reconcile of one request.
#[derive(Debug, thiserror::Error)]
pub enum CsrError {
    /// Reading the requester's Node failed.
    #[error("failed to read Node {node}")]
    Node {
        /// The Node.
        node: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Writing the decision failed (a conflict included: decided again on fresh data).
    #[error("failed to write the {condition} condition of CertificateSigningRequest {csr}")]
    Write {
        /// `Approved` or `Denied`.
        condition: &'static str,
        /// The request.
        csr: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The request could not be serialized.
    #[error("failed to encode CertificateSigningRequest {csr}")]
    Encode {
        /// The request.
        csr: String,
        /// The serde error.
        #[source]
        source: serde_json::Error,
    },
}

/// Reads a CertificateSigningRequest as the core's decision needs it.
pub fn serving_request(csr: &CertificateSigningRequest) -> ServingRequest {
    let spec = &csr.spec;
    let decided = csr
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == "Approved" || c.type_ == "Denied")
        });
    ServingRequest {
        name: csr.name_any(),
        signer_name: spec.signer_name.clone(),
        username: spec.username.clone().unwrap_or_default(),
        groups: spec.groups.clone().unwrap_or_default(),
        usages: spec.usages.clone().unwrap_or_default(),
        request: pkcs10::parse_pem(&spec.request.0).map_err(|e| e.to_string()),
        decided,
    }
}

/// The addresses of a Node's status.
pub fn node_addresses(node: &Node) -> NodeAddresses {
    NodeAddresses::from_status(
        node.status
            .as_ref()
            .and_then(|s| s.addresses.as_ref())
            .into_iter()
            .flatten()
            .map(|a| (a.type_.as_str(), a.address.as_str())),
    )
}

struct Context {
    client: Client,
    metrics: Metrics,
    backoff: Backoff,
}

/// Decides `csr` on fresh data and writes the decision. Returns what was decided.
///
/// # Errors
/// Reading the Node or writing the condition failed.
pub async fn reconcile_request(
    client: &Client,
    csr: &CertificateSigningRequest,
    now: Timestamp,
) -> Result<CsrDecision, CsrError> {
    if csr.spec.signer_name != SIGNER_KUBELET_SERVING {
        return Ok(CsrDecision::Skip);
    }
    let request = serving_request(csr);
    if request.decided {
        return Ok(CsrDecision::Skip);
    }
    let node = match request.node_name() {
        Some(name) => Api::<Node>::all(client.clone())
            .get_opt(name)
            .await
            .map_err(|source| CsrError::Node {
                node: name.to_owned(),
                source,
            })?,
        None => None,
    };
    let decision = plan_serving_certificate(&request, node.as_ref().map(node_addresses).as_ref());
    let (condition, reason, message) = match &decision {
        CsrDecision::Skip => return Ok(decision),
        CsrDecision::Approve { message } => ("Approved", APPROVED_REASON, message.as_str()),
        CsrDecision::Deny { reason, message } => ("Denied", reason.as_str(), message.as_str()),
    };
    let name = csr.name_any();
    let mut body = serde_json::to_value(csr).map_err(|source| CsrError::Encode {
        csr: name.clone(),
        source,
    })?;
    let entry = json!({
        "type": condition,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastUpdateTime": now.to_rfc3339(),
    });
    match body
        .pointer_mut("/status/conditions")
        .and_then(|c| c.as_array_mut())
    {
        Some(conditions) => conditions.push(entry),
        None => body["status"] = json!({"conditions": [entry]}),
    }
    Api::<CertificateSigningRequest>::all(client.clone())
        .replace_subresource("approval", &name, &PostParams::default(), &body)
        .await
        .map_err(|source| CsrError::Write {
            condition,
            csr: name.clone(),
            source,
        })?;
    match &decision {
        CsrDecision::Deny { .. } => {
            tracing::warn!(csr = %name, requester = %request.username, %decision, "kubelet serving certificate request denied");
        }
        _ => tracing::info!(csr = %name, %decision, "kubelet serving certificate request approved"),
    }
    Ok(decision)
}

async fn reconcile(
    csr: Arc<CertificateSigningRequest>,
    ctx: Arc<Context>,
) -> Result<Action, CsrError> {
    let started = Instant::now();
    let result = reconcile_request(&ctx.client, &csr, now()).await;
    ctx.metrics
        .reconciled(CONTROLLER, started.elapsed().as_secs_f64(), result.is_err());
    if result.is_ok() {
        ctx.backoff.succeeded(&csr.name_any());
    }
    result.map(|_| Action::await_change())
}

fn error_policy(
    csr: Arc<CertificateSigningRequest>,
    error: &CsrError,
    ctx: Arc<Context>,
) -> Action {
    let delay: Duration = ctx.backoff.failed(&csr.name_any());
    tracing::warn!(controller = CONTROLLER, csr = %csr.name_any(), error = %ErrorChain(&error), retry_in = ?delay, "reconcile failed; retrying");
    Action::requeue(delay)
}

/// Runs the controller until `stop`.
pub async fn run(client: Client, metrics: Metrics, mut stop: watch::Receiver<bool>) {
    let ctx = Arc::new(Context {
        client: client.clone(),
        metrics,
        backoff: Backoff::new(RETRY_FIRST, RETRY_MAX),
    });
    Controller::new(
        Api::<CertificateSigningRequest>::all(client),
        watcher::Config::default(),
    )
    .graceful_shutdown_on(async move {
        let _ = stop.wait_for(|s| *s).await;
    })
    .run(reconcile, error_policy, ctx)
    .for_each(|result| async move {
        if let Err(error) = result {
            tracing::debug!(%error, controller = CONTROLLER, "reconcile");
        }
    })
    .await;
}
