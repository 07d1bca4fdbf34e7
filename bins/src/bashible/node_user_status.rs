//! The agent's report of its NodeUsers: after the users step ran, the
//! `nodemgr-node-user-error:` lines of its standard error (the last 500 bytes the runner
//! keeps) become entries of each NodeUser's `status.errors` under this node's name, and a
//! NodeUser whose entry for this node has no error any more loses it (`docs/agent.md`,
//! "NodeUser status"). Each change is a JSON merge patch of the `status` subresource touching
//! only this node's key, so agents of different nodes never overwrite each other.
//! A failed report is logged and tried again after the next run of the step.

use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use kube::{Api, Client};
use nodemgr_core::bashible::node_user_report::{node_user_errors, record_node_user_result};
use nodemgr_core::model::NodeUserStatus;
use serde_json::json;

/// Whether `step` is the users step of a bundle.
pub fn is_node_users_step(step: &str) -> bool {
    step.ends_with("_node_users.sh")
}

fn node_users() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("deckhouse.io", "v1", "NodeUser"),
        "nodeusers",
    )
}

/// Folds the users step's `stderr` into the NodeUsers' status for `node`. Returns how many
/// NodeUsers were patched.
///
/// # Errors
/// The NodeUsers cannot be listed, or a patch fails.
pub async fn report(client: &Client, node: &str, stderr: &str) -> Result<usize, kube::Error> {
    let errors = node_user_errors(stderr);
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &node_users());
    let mut patched = 0;
    for user in api.list(&ListParams::default()).await?.items {
        let Some(name) = user.metadata.name.clone() else {
            continue;
        };
        let mut status: NodeUserStatus =
            serde_json::from_value(user.data["status"].clone()).unwrap_or_default();
        let error = errors
            .iter()
            .find(|e| e.user == name)
            .map(|e| e.message.as_str());
        if !record_node_user_result(&mut status, node, error) {
            continue;
        }
        let patch = json!({"status": {"errors": {node: error}}});
        api.patch_status(
            &name,
            &PatchParams {
                field_manager: Some("bashible".to_owned()),
                ..PatchParams::default()
            },
            &Patch::Merge(&patch),
        )
        .await?;
        tracing::info!(user = %name, failed = error.is_some(), "NodeUser status reported");
        patched += 1;
    }
    Ok(patched)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_users_step_is_recognised_by_its_name() {
        assert!(is_node_users_step("000_node_users.sh"));
        assert!(!is_node_users_step("050_motd.sh"));
    }
}
