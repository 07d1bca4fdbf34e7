//! Creates the `master` NodeGroup when the cluster has none
//! ([`nodemgr_core::node_duties::master_group`]), checked at start and then every resync, so a
//! deleted one comes back. Off unless node-manager is told the master group's node type
//! (`Static` or `CloudPermanent`). An existing `master` is never changed.

use std::time::Duration;

use kube::Api;
use kube::api::PostParams;
use nodemgr_core::model::NodeType;
use nodemgr_core::node_duties::master_group::{MASTER_GROUP, NotAMasterType, master_node_group};
use tokio::sync::watch;

use crate::crd::NodeGroup;
use crate::metrics::Metrics;
use nodemgr_core::ports::ErrorChain;

/// The controller's name in metrics and logs.
const CONTROLLER: &str = "master-group";

/// Why the `master` NodeGroup could not be ensured.
#[derive(Debug, thiserror::Error)]
pub enum MasterGroupError {
    /// The configured node type cannot be the master group's.
    #[error(transparent)]
    NodeType(#[from] NotAMasterType),
    /// Reading or creating the group failed.
    #[error("failed to {action} NodeGroup master")]
    Api {
        /// `read` or `create`.
        action: &'static str,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

/// Creates `master` of `node_type` unless it exists. Returns whether it created it.
///
/// # Errors
/// A node type other than Static or CloudPermanent, or an API error (an AlreadyExists from a
/// concurrent creation is not one).
pub async fn ensure_master_group(
    client: &kube::Client,
    node_type: NodeType,
) -> Result<bool, MasterGroupError> {
    let wanted = master_node_group(node_type)?;
    let api = Api::<NodeGroup>::all(client.clone());
    let existing = api
        .get_opt(MASTER_GROUP)
        .await
        .map_err(|source| MasterGroupError::Api {
            action: "read",
            source,
        })?;
    if existing.is_some() {
        return Ok(false);
    }
    match api
        .create(&PostParams::default(), &NodeGroup::from_core(&wanted))
        .await
    {
        Ok(_) => {
            tracing::info!(node_type = ?wanted.spec.node_type, "created NodeGroup master");
            Ok(true)
        }
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(source) => Err(MasterGroupError::Api {
            action: "create",
            source,
        }),
    }
}

/// Ensures `master` now and every `resync` until `stop`.
pub async fn run(
    client: kube::Client,
    node_type: NodeType,
    resync: Duration,
    metrics: Metrics,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let started = std::time::Instant::now();
        let result = ensure_master_group(&client, node_type.clone()).await;
        metrics.reconciled(CONTROLLER, started.elapsed().as_secs_f64(), result.is_err());
        if let Err(error) = result {
            tracing::warn!(controller = CONTROLLER, error = %ErrorChain(&error), "retrying at the next resync");
        }
        tokio::select! {
            () = tokio::time::sleep(resync) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}
