//! What a node reports about its NodeUsers (`docs/bundles.md`): the users step prints one
//! `nodemgr-node-user-error: <user>: <message>` line per user it could not apply; the node
//! agent reads them from the step's output with [`node_user_errors`] and records them in each
//! NodeUser's `status.errors` under its node name with [`record_node_user_result`] (an applied
//! user clears its node's entry).

use std::collections::BTreeMap;

use crate::model::NodeUserStatus;

/// The prefix of an error line of the users step.
pub const NODE_USER_ERROR_PREFIX: &str = "nodemgr-node-user-error: ";

/// One user the users step could not apply on a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeUserError {
    /// The NodeUser's name.
    pub user: String,
    /// What went wrong.
    pub message: String,
}

/// The users step's error lines in `output` (its standard error), last one per user.
pub fn node_user_errors(output: &str) -> Vec<NodeUserError> {
    let mut by_user: BTreeMap<String, String> = BTreeMap::new();
    for line in output.lines() {
        if let Some(rest) = line.trim_end().strip_prefix(NODE_USER_ERROR_PREFIX)
            && let Some((user, message)) = rest.split_once(": ")
            && !user.is_empty()
        {
            by_user.insert(user.to_owned(), message.to_owned());
        }
    }
    by_user
        .into_iter()
        .map(|(user, message)| NodeUserError { user, message })
        .collect()
}

/// Records what the users step did with one user on `node`: its error, or `None` once applied.
/// Returns whether the status changed (so the agent patches it only then).
pub fn record_node_user_result(
    status: &mut NodeUserStatus,
    node: &str,
    error: Option<&str>,
) -> bool {
    match error {
        Some(message) => {
            if status.errors.get(node).map(String::as_str) == Some(message) {
                false
            } else {
                status.errors.insert(node.to_owned(), message.to_owned());
                true
            }
        }
        None => status.errors.remove(node).is_some(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_lines_are_read_last_per_user() {
        let output = "bashible: created user a\nnodemgr-node-user-error: b: useradd failed\n\
                      noise\nnodemgr-node-user-error: b: second: with colon\n\
                      nodemgr-node-user-error: : nameless\n";
        assert_eq!(
            node_user_errors(output),
            vec![NodeUserError {
                user: "b".into(),
                message: "second: with colon".into()
            }]
        );
    }

    #[test]
    fn recording_changes_only_on_difference() {
        let mut status = NodeUserStatus::default();
        assert!(record_node_user_result(&mut status, "n1", Some("boom")));
        assert!(!record_node_user_result(&mut status, "n1", Some("boom")));
        assert_eq!(status.errors["n1"], "boom");
        assert!(record_node_user_result(&mut status, "n1", None));
        assert!(!record_node_user_result(&mut status, "n1", None));
        assert!(status.errors.is_empty());
    }
}
