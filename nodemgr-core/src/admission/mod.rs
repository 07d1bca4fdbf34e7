//! Decides an admission review: whether the API server may store a NodeGroup, StaticInstance,
//! SSHCredentials, NodeUser or NodeGroupConfiguration being created or updated, and which
//! warnings go back to the client, as Deckhouse's `nodegroup-policy.deckhouse.io` and Cluster
//! API Provider Static's webhooks do (docs/admission-and-conversion.md).
//!
//! Pure: the webhook server gathers the [`ClusterInputs`] a review needs (settings, the
//! group's nodes, the other StaticInstances; [`needs`] says which) and passes them in with the
//! old and new objects. The rules themselves are [`crate::validate`]'s, the same the
//! `nodemgr validate` command and the status controller run, plus the cluster-wide ones only
//! an admission review can check (a StaticInstance address used twice) and the warnings.

mod node_group;
mod static_instance;

use std::collections::BTreeMap;

use serde_json::Value;

use crate::model::{Manifest, parse_manifest};
use crate::validate::{
    FieldError, ValidationContext, validate_node_group_configuration, validate_node_user,
    validate_ssh_credentials,
};

pub use node_group::{LABEL_CONTAINERD_CONFIG, LABEL_CONTAINERD_V2_UNSUPPORTED};

/// The operation under review.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// `CREATE`.
    Create,
    /// `UPDATE`.
    Update,
    /// `DELETE`.
    Delete,
    /// `CONNECT` (never registered for; allowed).
    Connect,
}

impl std::str::FromStr for Operation {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "CREATE" => Ok(Self::Create),
            "UPDATE" => Ok(Self::Update),
            "DELETE" => Ok(Self::Delete),
            "CONNECT" => Ok(Self::Connect),
            other => Err(format!(
                "unknown operation {other:?}; expected CREATE, UPDATE, DELETE or CONNECT"
            )),
        }
    }
}

/// One review: the kind, the operation and the objects (`old` on UPDATE and DELETE, `new` on
/// CREATE and UPDATE), as JSON in any served version.
#[derive(Debug, Clone, Copy)]
pub struct Review<'a> {
    /// The object's kind (`NodeGroup`, …).
    pub kind: &'a str,
    /// What is being done.
    pub operation: Operation,
    /// The stored object, when there is one.
    pub old: Option<&'a Value>,
    /// The object to be stored, when there is one.
    pub new: Option<&'a Value>,
}

/// A node as admission sees it: name and labels.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeLabels {
    /// Node name.
    pub name: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
}

/// What a review may need to know about the cluster. Unknown facts are `None` or empty, and
/// the rules that depend on them are skipped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterInputs {
    /// The module's settings: cluster prefix length, the provider's zones and the custom
    /// toleration keys (the node lists in it are filled from [`Self::group_nodes`]).
    pub settings: ValidationContext,
    /// The nodes of the NodeGroup under review (label `node.deckhouse.io/group=<name>`).
    pub group_nodes: Vec<NodeLabels>,
    /// Every other StaticInstance, name → `spec.address`.
    pub static_instance_addresses: BTreeMap<String, String>,
    /// How many kube-apiserver endpoints the cluster has (warning on a master CRI change).
    pub api_endpoints: Option<usize>,
    /// `podSubnetNodeCIDRPrefix` of the cluster configuration (warning on maxPods).
    pub pod_subnet_node_cidr_prefix: Option<u8>,
}

/// What the webhook needs to look up before deciding a review.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Needs {
    /// The nodes of this NodeGroup.
    pub nodes_of_group: Option<String>,
    /// Every StaticInstance's address.
    pub static_instances: bool,
}

/// What to look up for `review` (nothing for deletions and kinds without cluster rules).
pub fn needs(review: &Review<'_>) -> Needs {
    let object = review.new.or(review.old);
    let name = object
        .and_then(|o| o.get("metadata"))
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str);
    match (review.kind, review.operation) {
        ("NodeGroup", Operation::Create | Operation::Update) => Needs {
            nodes_of_group: name.map(str::to_owned),
            static_instances: false,
        },
        ("StaticInstance", Operation::Create | Operation::Update) => Needs {
            nodes_of_group: None,
            static_instances: true,
        },
        _ => Needs::default(),
    }
}

/// The answer to a review.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Whether the API server may go on.
    pub allowed: bool,
    /// Why not (every error, `path: message`, joined by `; `), when refused.
    pub message: Option<String>,
    /// Warnings for the client (`kubectl` prints them), allowed or not.
    pub warnings: Vec<String>,
}

impl Verdict {
    /// Allowed with `warnings`.
    pub fn allow(warnings: Vec<String>) -> Self {
        Self {
            allowed: true,
            message: None,
            warnings,
        }
    }

    /// Refused for `errors` (allowed when there are none), with `warnings`.
    pub fn from_errors(
        kind: &str,
        name: &str,
        errors: &[FieldError],
        warnings: Vec<String>,
    ) -> Self {
        if errors.is_empty() {
            return Self::allow(warnings);
        }
        let list = errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        Self {
            allowed: false,
            message: Some(format!("{kind} {name:?} is invalid: {list}")),
            warnings,
        }
    }

    /// Refused with `message`.
    pub fn deny(message: impl Into<String>) -> Self {
        Self {
            allowed: false,
            message: Some(message.into()),
            warnings: Vec::new(),
        }
    }
}

fn name_of(value: &Value) -> String {
    value
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// Decides `review`. Deletions and CONNECT are allowed; an object that cannot be read as its
/// kind is refused with what is wrong; kinds nodemgr has no rules for are allowed.
pub fn admit(review: &Review<'_>, inputs: &ClusterInputs) -> Verdict {
    if matches!(review.operation, Operation::Delete | Operation::Connect) {
        return Verdict::allow(Vec::new());
    }
    let Some(new) = review.new else {
        return Verdict::deny(format!(
            "the {} review carries no object; the API server sends one on CREATE and UPDATE",
            review.kind
        ));
    };
    let name = name_of(new);
    let typed = match parse_manifest(new.clone()) {
        Ok(typed) => typed,
        Err(e) => return Verdict::deny(format!("{} {name:?} is invalid: {e}", review.kind)),
    };
    let old = match (review.operation, review.old) {
        (Operation::Update, Some(old)) => parse_manifest(old.clone()).ok(),
        _ => None,
    };
    match typed {
        Manifest::NodeGroup(ng) => {
            let old = match old {
                Some(Manifest::NodeGroup(o)) => Some(o),
                _ => None,
            };
            node_group::admit(&ng, old.as_deref(), inputs)
        }
        Manifest::StaticInstance(si) => static_instance::admit(&si, inputs),
        Manifest::SshCredentials(c) => Verdict::from_errors(
            "SSHCredentials",
            &name,
            &validate_ssh_credentials(&c),
            vec![],
        ),
        Manifest::NodeUser(u) => {
            Verdict::from_errors("NodeUser", &name, &validate_node_user(&u), vec![])
        }
        Manifest::NodeGroupConfiguration(c) => Verdict::from_errors(
            "NodeGroupConfiguration",
            &name,
            &validate_node_group_configuration(&c),
            vec![],
        ),
        Manifest::Instance(_) | Manifest::Other { .. } => Verdict::allow(Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn deletions_are_allowed_and_missing_objects_refused() {
        let inputs = ClusterInputs::default();
        let old = json!({"apiVersion": "deckhouse.io/v1", "kind": "NodeGroup"});
        let review = Review {
            kind: "NodeGroup",
            operation: Operation::Delete,
            old: Some(&old),
            new: None,
        };
        assert!(admit(&review, &inputs).allowed);
        let review = Review {
            operation: Operation::Create,
            ..review
        };
        assert!(!admit(&review, &inputs).allowed);
    }

    #[test]
    fn other_kinds_are_checked_by_their_validators() {
        let inputs = ClusterInputs::default();
        let user = json!({"apiVersion": "deckhouse.io/v1", "kind": "NodeUser",
            "metadata": {"name": "ops"}, "spec": {"uid": 10}});
        let verdict = admit(
            &Review {
                kind: "NodeUser",
                operation: Operation::Create,
                old: None,
                new: Some(&user),
            },
            &inputs,
        );
        assert!(!verdict.allowed);
        let message = verdict.message.unwrap_or_default();
        assert!(
            message.starts_with("NodeUser \"ops\" is invalid: spec.uid"),
            "{message}"
        );
        let wrong = json!({"apiVersion": "deckhouse.io/v1", "kind": "NodeUser",
            "metadata": {"name": "ops"}, "spec": {"uid": "x"}});
        let verdict = admit(
            &Review {
                kind: "NodeUser",
                operation: Operation::Create,
                old: None,
                new: Some(&wrong),
            },
            &inputs,
        );
        assert!(!verdict.allowed);
    }

    #[test]
    fn needs_follow_the_kind() {
        let ng = json!({"metadata": {"name": "w"}});
        let review = Review {
            kind: "NodeGroup",
            operation: Operation::Update,
            old: None,
            new: Some(&ng),
        };
        assert_eq!(needs(&review).nodes_of_group.as_deref(), Some("w"));
        let review = Review {
            kind: "StaticInstance",
            ..review
        };
        assert!(needs(&review).static_instances);
        assert_eq!("UPDATE".parse(), Ok(Operation::Update));
        assert!("PATCH".parse::<Operation>().is_err());
    }
}
