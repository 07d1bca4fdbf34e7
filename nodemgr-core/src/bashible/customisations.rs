//! The operator's additions to a group's bundle (`docs/bundles.md`): NodeGroupConfigurations
//! (their own steps, placed among the built-in ones by weight) and NodeUsers (one step that
//! keeps the users). Decides which objects reach which group, in which order and under which
//! step name, and which are skipped: an invalid object never breaks a bundle; it is left out of
//! every group it targets and reported in [`Bundle::skipped`](super::Bundle::skipped).
//!
//! # Step names and order
//! A configuration's step is named `<weight as 3 digits>_<metadata.name>` (`050_add-ca.sh`),
//! as Deckhouse names them. Built-in steps carry the same 3-digit prefix (their weight), so
//! sorting the names sorts by weight, then by name: a configuration of weight 100 (the default)
//! runs after every built-in step, one of weight 25 between containerd (20) and the kubelet
//! (30). A configuration whose step name equals a built-in step's is skipped.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Serialize;

use crate::model::{ALL, NodeGroupConfiguration, NodeUser};
use crate::validate::{FieldError, validate_node_group_configuration, validate_node_user};

/// The NodeGroupConfigurations and NodeUsers bundles are rendered with (all of them; each
/// group takes those that target it).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Customisations {
    /// Every NodeGroupConfiguration.
    pub configurations: Vec<NodeGroupConfiguration>,
    /// Every NodeUser.
    pub users: Vec<NodeUser>,
}

/// An object left out of a group's bundle, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// `NodeGroupConfiguration` or `NodeUser`.
    pub kind: &'static str,
    /// Its `metadata.name`.
    pub name: String,
    /// What is wrong, by field.
    pub errors: Vec<FieldError>,
}

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {:?} is skipped: ", self.kind, self.name)?;
        for (i, e) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

/// A configuration's step before rendering.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConfigurationStep {
    /// The step's file name, `<weight:03>_<name>`.
    pub step: String,
    /// `metadata.name`.
    pub name: String,
    /// `spec.weight` (defaulted).
    pub weight: i64,
    /// OS bundles it runs on; empty for every bundle (`*`).
    pub bundles: Vec<String>,
    /// The script.
    pub content: String,
}

/// The step name of a configuration: `<weight:03>_<name>`.
pub fn configuration_step_name(ngc: &NodeGroupConfiguration) -> String {
    format!("{:03}_{}", ngc.weight(), ngc.name())
}

/// The configurations targeting `group`, valid ones as steps sorted by step name, the others
/// (invalid, a duplicate name, or a step name in `reserved`, the built-in steps) skipped.
pub fn configuration_steps(
    configurations: &[NodeGroupConfiguration],
    group: &str,
    reserved: &[&str],
) -> (Vec<ConfigurationStep>, Vec<Skipped>) {
    let mut steps: BTreeMap<String, ConfigurationStep> = BTreeMap::new();
    let mut names = BTreeSet::new();
    let mut skipped = Vec::new();
    for ngc in configurations.iter().filter(|c| c.targets_group(group)) {
        let skip = |errors: Vec<FieldError>| Skipped {
            kind: "NodeGroupConfiguration",
            name: ngc.name().to_owned(),
            errors,
        };
        let errors = validate_node_group_configuration(ngc);
        if !errors.is_empty() {
            skipped.push(skip(errors));
            continue;
        }
        let step = configuration_step_name(ngc);
        if !names.insert(ngc.name().to_owned()) {
            skipped.push(skip(vec![FieldError::new(
                "metadata.name",
                "another NodeGroupConfiguration has this name; names are unique",
            )]));
            continue;
        }
        if reserved.contains(&step.as_str()) {
            skipped.push(skip(vec![FieldError::new(
                "metadata.name",
                format!(
                    "the step name {step} is a built-in step's; rename it or change the weight"
                ),
            )]));
            continue;
        }
        let bundles = ngc.bundles();
        let bundles = if bundles.iter().any(|b| b == ALL) {
            Vec::new()
        } else {
            bundles
        };
        steps.insert(
            step.clone(),
            ConfigurationStep {
                step,
                name: ngc.name().to_owned(),
                weight: ngc.weight(),
                bundles,
                content: ngc.spec.content.clone().unwrap_or_default(),
            },
        );
    }
    (steps.into_values().collect(), skipped)
}

/// A NodeUser as the users step needs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UserEntry {
    /// Login name.
    pub name: String,
    /// User id.
    pub uid: i64,
    /// crypt(3) hash, empty to lock the password.
    pub password_hash: String,
    /// Whether the user may sudo.
    pub sudoer: bool,
    /// Supplementary groups, comma-separated, sorted.
    pub groups: String,
    /// `authorized_keys`: one key per line, each ending with a newline.
    pub keys: String,
}

/// The users of `group`, valid ones sorted by name, the others (invalid, a duplicate name, or a
/// uid another user of the group already has) skipped.
pub fn user_entries(users: &[NodeUser], group: &str) -> (Vec<UserEntry>, Vec<Skipped>) {
    let mut sorted: Vec<&NodeUser> = users.iter().filter(|u| u.targets_group(group)).collect();
    sorted.sort_by(|a, b| a.name().cmp(b.name()));
    let mut entries: Vec<UserEntry> = Vec::new();
    let mut skipped = Vec::new();
    for user in sorted {
        let skip = |errors: Vec<FieldError>| Skipped {
            kind: "NodeUser",
            name: user.name().to_owned(),
            errors,
        };
        let errors = validate_node_user(user);
        if !errors.is_empty() {
            skipped.push(skip(errors));
            continue;
        }
        let uid = user.spec.uid.unwrap_or_default();
        if let Some(other) = entries
            .iter()
            .find(|e| e.name == user.name() || e.uid == uid)
        {
            let (path, message) = if other.name == user.name() {
                (
                    "metadata.name",
                    "another NodeUser has this name; names are unique".to_owned(),
                )
            } else {
                (
                    "spec.uid",
                    format!(
                        "uid {uid} is already NodeUser {}'s on this group",
                        other.name
                    ),
                )
            };
            skipped.push(skip(vec![FieldError::new(path, message)]));
            continue;
        }
        let groups: BTreeSet<&str> = user
            .spec
            .extra_groups
            .iter()
            .flatten()
            .map(String::as_str)
            .collect();
        let keys: String = user
            .ssh_public_keys()
            .iter()
            .map(|k| format!("{}\n", k.trim()))
            .collect();
        entries.push(UserEntry {
            name: user.name().to_owned(),
            uid,
            password_hash: user.spec.password_hash.clone().unwrap_or_default(),
            sudoer: user.spec.is_sudoer.unwrap_or(false),
            groups: groups.into_iter().collect::<Vec<_>>().join(","),
            keys,
        });
    }
    (entries, skipped)
}

/// The sudoers drop-in of the users' sudoers: full sudo, without a password for users that have
/// none (they could not type one). Empty when no user is a sudoer.
pub fn sudoers(entries: &[UserEntry]) -> String {
    let mut out = String::new();
    for e in entries.iter().filter(|e| e.sudoer) {
        if out.is_empty() {
            out.push_str("# NodeUsers with isSudoer (managed by nodemgr).\n");
        }
        let tag = if e.password_hash.is_empty() {
            "NOPASSWD: "
        } else {
            ""
        };
        out.push_str(&format!("{} ALL=(ALL:ALL) {tag}ALL\n", e.name));
    }
    out
}

/// How many NodeGroupConfigurations name each group in `spec.nodeGroups`, with `*` for those
/// that target every group (Deckhouse's `d8_node_group_configurations_total{node_group}`). A
/// configuration listing a group twice counts once for it.
pub fn configuration_counts(configurations: &[NodeGroupConfiguration]) -> BTreeMap<String, u64> {
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for ngc in configurations {
        let groups: BTreeSet<String> = ngc.node_groups().into_iter().collect();
        for group in groups {
            let count = counts.entry(group).or_default();
            *count = count.saturating_add(1);
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{NodeGroupConfigurationSpec, NodeUserSpec, ObjectMeta};

    fn meta(name: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        }
    }

    fn ngc(name: &str, weight: Option<i64>, groups: Option<&[&str]>) -> NodeGroupConfiguration {
        NodeGroupConfiguration {
            api_version: "deckhouse.io/v1alpha1".into(),
            kind: "NodeGroupConfiguration".into(),
            metadata: meta(name),
            spec: NodeGroupConfigurationSpec {
                content: Some(format!("echo {name}\n")),
                weight,
                node_groups: groups.map(|g| g.iter().map(|s| (*s).to_owned()).collect()),
                bundles: None,
            },
        }
    }

    #[test]
    fn steps_are_ordered_by_weight_then_name_and_invalid_ones_skipped() {
        let configs = vec![
            ngc("b.sh", None, None),
            ngc("a.sh", None, Some(&["worker"])),
            ngc("z.sh", Some(5), Some(&["worker", "master"])),
            ngc("m.sh", Some(50), Some(&["master"])),
            ngc("bad", Some(1), None),
            ngc("ca.sh", Some(1), None),
        ];
        let (steps, skipped) = configuration_steps(&configs, "worker", &["001_ca.sh"]);
        let names: Vec<&str> = steps.iter().map(|s| s.step.as_str()).collect();
        assert_eq!(names, ["005_z.sh", "100_a.sh", "100_b.sh"]);
        let skipped: Vec<&str> = skipped.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(skipped, ["bad", "ca.sh"]);
        let (steps, _) = configuration_steps(&configs, "master", &[]);
        let names: Vec<&str> = steps.iter().map(|s| s.step.as_str()).collect();
        assert_eq!(names, ["001_ca.sh", "005_z.sh", "050_m.sh", "100_b.sh"]);
    }

    #[test]
    fn counts_per_named_group_and_wildcard() {
        let configs = vec![
            ngc("a.sh", None, None),
            ngc("b.sh", None, Some(&["worker", "worker"])),
            ngc("c.sh", None, Some(&["worker", "master"])),
            ngc("d.sh", None, Some(&["*"])),
        ];
        let counts = configuration_counts(&configs);
        assert_eq!(
            counts.into_iter().collect::<Vec<_>>(),
            vec![("*".into(), 2), ("master".into(), 1), ("worker".into(), 2)]
        );
    }

    fn user(name: &str, uid: i64, sudoer: bool, hash: Option<&str>) -> NodeUser {
        NodeUser {
            api_version: "deckhouse.io/v1".into(),
            kind: "NodeUser".into(),
            metadata: meta(name),
            spec: NodeUserSpec {
                uid: Some(uid),
                ssh_public_keys: Some(vec!["ssh-ed25519 AAAA k ".into()]),
                password_hash: hash.map(str::to_owned),
                is_sudoer: Some(sudoer),
                extra_groups: Some(vec!["video".into(), "audio".into()]),
                ..NodeUserSpec::default()
            },
            status: None,
        }
    }

    #[test]
    fn users_sorted_duplicates_skipped_sudoers_listed() {
        let users = vec![
            user("zed", 1002, true, None),
            user("amy", 1001, true, Some("$6$s$h")),
            user("bob", 1001, false, None),
            user("x_y", 1003, false, None),
        ];
        let (entries, skipped) = user_entries(&users, "worker");
        let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["amy", "zed"]);
        assert_eq!(entries[0].groups, "audio,video");
        assert_eq!(entries[0].keys, "ssh-ed25519 AAAA k\n");
        let skipped: Vec<(&str, &str)> = skipped
            .iter()
            .map(|s| (s.name.as_str(), s.errors[0].path.as_str()))
            .collect();
        assert_eq!(skipped, [("bob", "spec.uid"), ("x_y", "metadata.name")]);
        assert_eq!(
            sudoers(&entries),
            "# NodeUsers with isSudoer (managed by nodemgr).\namy ALL=(ALL:ALL) ALL\nzed ALL=(ALL:ALL) NOPASSWD: ALL\n"
        );
        assert_eq!(sudoers(&[]), "");
    }
}
