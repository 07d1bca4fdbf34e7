//! Reports in a NodeGroup's status that its bundle no longer renders: while rendering fails,
//! `status.conditions` holds a condition of type [`CONDITION_TYPE`] (status `True`, the error
//! as its message); it is removed once the group renders again. It also stamps
//! `status.deckhouse.processed` with the checksum of the spec the group's served bundle was
//! rendered from (docs/deckhouse.md §1.3), which node-manager's status controller compares
//! with the spec it observed for `status.deckhouse.synced`. Written by bashible-apiserver
//! with a JSON merge patch of the status subresource under field manager [`FIELD_MANAGER`],
//! guarded by the resourceVersion the conditions were read at (a conflict is left for the next
//! pass). node-manager's status controller keeps conditions of types it does not compute, so
//! the two writers do not undo each other (`docs/bashible-apiserver.md`, "Render errors").

use std::collections::BTreeMap;

use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

/// The condition type.
pub const CONDITION_TYPE: &str = "BundleRenderFailed";
/// The field manager of the status writes.
pub const FIELD_MANAGER: &str = "bashible-apiserver";

/// A NodeGroup's conditions as watched: its resourceVersion and `status.conditions`.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupConditions {
    /// resourceVersion of the object read.
    pub resource_version: Option<String>,
    /// `status.conditions`, as they are.
    pub conditions: Vec<Value>,
    /// `status.deckhouse.processed.checkSum`, as it is.
    pub processed: Option<String>,
}

/// The conditions `current` should become for `failure` (the render error, if any) at `now`
/// (RFC 3339); `None` when they already are. A failure with an unchanged message keeps its
/// transition time.
pub fn desired_conditions(
    current: &[Value],
    failure: Option<&str>,
    now: &str,
) -> Option<Vec<Value>> {
    let ours = current.iter().find(|c| c["type"] == CONDITION_TYPE);
    let mut desired: Vec<Value> = current
        .iter()
        .filter(|c| c["type"] != CONDITION_TYPE)
        .cloned()
        .collect();
    if let Some(message) = failure {
        let since = ours
            .filter(|c| c["message"] == message && c["status"] == "True")
            .and_then(|c| c["lastTransitionTime"].as_str())
            .unwrap_or(now);
        desired.push(json!({
            "type": CONDITION_TYPE,
            "status": "True",
            "lastTransitionTime": since,
            "message": message,
        }));
    }
    (desired != current).then_some(desired)
}

/// Writes the status of every group whose render condition differs from what `failures`
/// (group → render error) asks for, or whose `deckhouse.processed` checksum differs from the
/// one in `processed` (group → checksum of the spec its served bundle was rendered from; a
/// group that is not there keeps its stamp). Returns how many groups were written.
pub async fn sync_render_conditions(
    client: &Client,
    groups: &BTreeMap<String, GroupConditions>,
    failures: &BTreeMap<String, String>,
    processed: &BTreeMap<String, String>,
    now: &str,
) -> usize {
    let api: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &crate::bashible_sources::node_group_resource(),
    );
    let mut written = 0;
    for (group, current) in groups {
        let conditions = desired_conditions(
            &current.conditions,
            failures.get(group).map(String::as_str),
            now,
        );
        let stamp = processed
            .get(group)
            .filter(|sum| current.processed.as_ref() != Some(*sum));
        if conditions.is_none() && stamp.is_none() {
            continue;
        }
        let mut status = serde_json::Map::new();
        if let Some(conditions) = conditions {
            status.insert("conditions".into(), Value::Array(conditions));
        }
        if let Some(sum) = stamp {
            status.insert(
                "deckhouse".into(),
                json!({"processed": {"checkSum": sum, "lastTimestamp": now}}),
            );
        }
        let patch = json!({
            "metadata": {"resourceVersion": current.resource_version},
            "status": status,
        });
        match api
            .patch_status(
                group,
                &PatchParams {
                    field_manager: Some(FIELD_MANAGER.to_owned()),
                    ..PatchParams::default()
                },
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => {
                written += 1;
                tracing::info!(%group, failing = failures.contains_key(group), processed = stamp.is_some(), "render status written");
            }
            Err(error) => {
                tracing::warn!(%group, %error, "cannot write the render status; retried on the next pass");
            }
        }
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Whatever the conditions and the render outcome, writing what is asked once leaves
        /// nothing more to write (the writer never flaps on its own), other writers'
        /// conditions are kept in order, and the condition is there exactly while failing.
        #[test]
        fn the_condition_converges_in_one_write(
            others in proptest::collection::vec("[A-Z][a-z]{1,8}", 0..4),
            ours in proptest::option::of("[a-z ]{1,20}"),
            failure in proptest::option::of("[a-z ]{1,20}"),
        ) {
            let mut current: Vec<Value> = others
                .iter()
                .filter(|t| t.as_str() != CONDITION_TYPE)
                .map(|t| json!({"type": t, "status": "True"}))
                .collect();
            let foreign = current.clone();
            if let Some(message) = &ours {
                current.push(json!({"type": CONDITION_TYPE, "status": "True",
                    "lastTransitionTime": "T0", "message": message}));
            }
            let after = desired_conditions(&current, failure.as_deref(), "T1")
                .unwrap_or_else(|| current.clone());
            proptest::prop_assert_eq!(desired_conditions(&after, failure.as_deref(), "T2"), None);
            let kept: Vec<Value> = after
                .iter()
                .filter(|c| c["type"] != CONDITION_TYPE)
                .cloned()
                .collect();
            proptest::prop_assert_eq!(kept, foreign);
            proptest::prop_assert_eq!(
                after.iter().any(|c| c["type"] == CONDITION_TYPE),
                failure.is_some()
            );
        }
    }

    #[test]
    fn a_failure_adds_the_condition_once_and_success_removes_it() {
        let ready = json!({"type": "Ready", "status": "True"});
        let failing =
            desired_conditions(std::slice::from_ref(&ready), Some("bad"), "T1").expect("added");
        assert_eq!(failing.len(), 2);
        assert_eq!(failing[1]["message"], "bad");
        assert_eq!(
            desired_conditions(&failing, Some("bad"), "T2"),
            None,
            "stable"
        );
        let changed = desired_conditions(&failing, Some("worse"), "T3").expect("new message");
        assert_eq!(changed[1]["lastTransitionTime"], "T3");
        assert_eq!(
            desired_conditions(&failing, None, "T4"),
            Some(vec![ready.clone()])
        );
        assert_eq!(desired_conditions(&[ready], None, "T5"), None);
    }
}
