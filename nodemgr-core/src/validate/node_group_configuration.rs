//! NodeGroupConfiguration rules (`docs/bundles.md`): a name ending in `.sh` (it becomes the
//! step's file name), a non-empty script without NUL bytes, a weight the step names can order
//! (0..=999), and group and bundle lists of valid names or `*`.

use super::syntax;
use super::{Errors, FieldError};
use crate::model::{ALL, NodeGroupConfiguration};

/// Highest `spec.weight`: steps are named `<weight, 3 digits>_<name>` so that lexical order is
/// weight order, built-in steps included.
pub const MAX_CONFIGURATION_WEIGHT: i64 = 999;

/// Checks the names of `spec.nodeGroups` (`*` or NodeGroup names), shared with NodeUser.
pub(crate) fn check_node_groups(e: &mut Errors, groups: Option<&[String]>) {
    let Some(groups) = groups else {
        return;
    };
    if groups.is_empty() {
        e.push(
            "spec.nodeGroups",
            "an empty list targets no group: leave the field out (or write [\"*\"]) for every \
             group, or list NodeGroup names",
        );
    }
    for (i, group) in groups.iter().enumerate() {
        if group != ALL {
            e.check(
                format!("spec.nodeGroups[{i}]"),
                syntax::check_node_group_name(group),
            );
        }
    }
}

/// Checks a NodeGroupConfiguration; an empty list means valid.
pub fn validate_node_group_configuration(ngc: &NodeGroupConfiguration) -> Vec<FieldError> {
    let mut e = Errors::default();
    match ngc.metadata.name.as_deref() {
        None | Some("") => e.push(
            "metadata.name",
            "required: the step's file name, ending in .sh (e.g. \"add-ca.sh\")",
        ),
        Some(name) => {
            if let Err(m) = syntax::check_dns_subdomain(name) {
                e.push("metadata.name", format!("name {m}"));
            } else if !name.ends_with(".sh") || name.len() < 4 {
                e.push(
                    "metadata.name",
                    format!(
                        "{name:?} does not end in .sh: the name is the step's file name on \
                         the node; rename it, e.g. \"{}.sh\"",
                        name.trim_end_matches('.')
                    ),
                );
            }
        }
    }
    match ngc.spec.content.as_deref() {
        None => e.push(
            "spec.content",
            "required: the bash script to run on the nodes",
        ),
        Some(content) if content.trim().is_empty() => e.push(
            "spec.content",
            "is empty: write the bash script to run on the nodes",
        ),
        Some(content) if content.contains('\0') => e.push(
            "spec.content",
            "holds a NUL byte, which no script can carry; remove it",
        ),
        Some(_) => {}
    }
    e.range("spec.weight", ngc.spec.weight, 0, MAX_CONFIGURATION_WEIGHT);
    check_node_groups(&mut e, ngc.spec.node_groups.as_deref());
    if let Some(bundles) = &ngc.spec.bundles {
        if bundles.is_empty() {
            e.push(
                "spec.bundles",
                "an empty list runs nowhere: leave the field out (or write [\"*\"]) for every \
                 OS, or list bundles such as ubuntu-lts, debian, centos",
            );
        }
        for (i, bundle) in bundles.iter().enumerate() {
            if bundle != ALL && !syntax::is_dns_label(bundle) {
                e.push(
                    format!("spec.bundles[{i}]"),
                    format!(
                        "{bundle:?} is not a bundle name: use \"*\" or a name such as \
                         ubuntu-lts, debian, centos, redos, altlinux, astra"
                    ),
                );
            }
        }
    }
    e.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{NodeGroupConfigurationSpec, ObjectMeta};

    fn ngc(name: &str, spec: NodeGroupConfigurationSpec) -> NodeGroupConfiguration {
        NodeGroupConfiguration {
            api_version: "deckhouse.io/v1alpha1".into(),
            kind: "NodeGroupConfiguration".into(),
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            spec,
        }
    }

    fn paths(errors: Vec<FieldError>) -> Vec<String> {
        errors.into_iter().map(|e| e.path).collect()
    }

    #[test]
    fn a_minimal_one_is_valid() {
        let spec = NodeGroupConfigurationSpec {
            content: Some("echo hi\n".into()),
            ..NodeGroupConfigurationSpec::default()
        };
        assert_eq!(
            validate_node_group_configuration(&ngc("a.sh", spec)),
            vec![]
        );
    }

    #[test]
    fn every_bad_field_is_named() {
        let spec = NodeGroupConfigurationSpec {
            content: Some("echo \0".into()),
            weight: Some(-1),
            node_groups: Some(vec!["worker".into(), "Bad_Group".into()]),
            bundles: Some(vec!["*".into(), "Ubuntu LTS".into()]),
        };
        assert_eq!(
            paths(validate_node_group_configuration(&ngc("a", spec))),
            vec![
                "metadata.name",
                "spec.content",
                "spec.weight",
                "spec.nodeGroups[1]",
                "spec.bundles[1]"
            ]
        );
        let spec = NodeGroupConfigurationSpec {
            content: Some("  \n".into()),
            weight: Some(1000),
            node_groups: Some(vec![]),
            bundles: Some(vec![]),
        };
        let errors = validate_node_group_configuration(&ngc("Bad.sh", spec));
        assert_eq!(
            paths(errors.clone()),
            vec![
                "metadata.name",
                "spec.content",
                "spec.weight",
                "spec.nodeGroups",
                "spec.bundles"
            ]
        );
        assert!(errors[2].message.contains("0..999"), "{}", errors[2]);
        let missing = validate_node_group_configuration(&NodeGroupConfiguration::default());
        assert_eq!(paths(missing), vec!["metadata.name", "spec.content"]);
    }
}
