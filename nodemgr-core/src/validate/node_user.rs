//! NodeUser rules (`docs/bundles.md`): a login name the OS accepts, a uid of at least 1001,
//! single-line SSH keys, a crypt(3) password hash, valid extra group and NodeGroup names.

use super::node_group_configuration::check_node_groups;
use super::{Errors, FieldError};
use crate::model::{MIN_NODE_USER_UID, NodeUser};

/// Highest `spec.uid` accepted (the largest signed 32-bit id, which every tool handles).
pub const MAX_NODE_USER_UID: i64 = 2_147_483_647;

/// Longest login or group name `useradd` accepts.
const MAX_POSIX_NAME: usize = 32;

/// `^[a-z_][a-z0-9_-]*$`, at most 32 characters: a name `useradd` and `groupadd` accept.
fn is_posix_name(s: &str) -> bool {
    let mut bytes = s.bytes();
    let first_ok = bytes
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b == b'_');
    first_ok
        && s.len() <= MAX_POSIX_NAME
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

const KEY_TYPES: &[&str] = &["ssh-", "ecdsa-sha2-", "sk-ssh-", "sk-ecdsa-sha2-"];

/// Checks a NodeUser; an empty list means valid.
pub fn validate_node_user(user: &NodeUser) -> Vec<FieldError> {
    let mut e = Errors::default();
    match user.metadata.name.as_deref() {
        None | Some("") => e.push("metadata.name", "required: the user's login name"),
        Some(name) if !is_posix_name(name) || name.contains('_') => e.push(
            "metadata.name",
            format!(
                "{name:?} is not a login name: use at most 32 lowercase letters, digits and \
                 '-', starting with a letter (e.g. \"ops-admin\")"
            ),
        ),
        Some(_) => {}
    }
    let spec = &user.spec;
    match spec.uid {
        None => e.push(
            "spec.uid",
            format!("required: the numeric user id, {MIN_NODE_USER_UID} or more"),
        ),
        Some(65534) => e.push(
            "spec.uid",
            "65534 is the uid of nobody; pick another id of 1001 or more",
        ),
        Some(uid) => e.range("spec.uid", Some(uid), MIN_NODE_USER_UID, MAX_NODE_USER_UID),
    }
    let keys = spec
        .ssh_public_keys
        .iter()
        .flatten()
        .map(|k| ("spec.sshPublicKeys", k));
    let old = spec.ssh_public_key.iter().map(|k| ("spec.sshPublicKey", k));
    for (i, (field, key)) in keys.chain(old).enumerate() {
        let path = if field == "spec.sshPublicKey" {
            field.to_owned()
        } else {
            format!("{field}[{i}]")
        };
        if key.contains(['\n', '\r', '\0']) {
            e.push(
                path,
                "holds a line break or NUL byte: give one key per list item, on one line",
            );
        } else if !key
            .split_whitespace()
            .any(|word| KEY_TYPES.iter().any(|t| word.starts_with(t)))
        {
            e.push(
                path,
                "not an OpenSSH public key: paste one line of a .pub file, such as \
                 \"ssh-ed25519 AAAAC3Nz... user@host\"",
            );
        }
    }
    if let Some(hash) = &spec.password_hash {
        let printable = hash.bytes().all(|b| b.is_ascii_graphic() && b != b':');
        if !printable || hash.is_empty() || !hash.starts_with(['$', '!', '*']) {
            e.push(
                "spec.passwordHash",
                "not a crypt(3) hash: give the hash, not the password (e.g. from \
                 `mkpasswd -m sha-512`; it starts with \"$6$\"), or leave the field out to \
                 lock the password",
            );
        }
    }
    for (i, group) in spec.extra_groups.iter().flatten().enumerate() {
        if !is_posix_name(group) {
            e.push(
                format!("spec.extraGroups[{i}]"),
                format!(
                    "{group:?} is not a group name: use at most 32 lowercase letters, digits, \
                     '_' and '-', starting with a letter or '_'"
                ),
            );
        }
    }
    check_node_groups(&mut e, spec.node_groups.as_deref());
    e.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{NodeUserSpec, ObjectMeta};

    fn user(name: &str, spec: NodeUserSpec) -> NodeUser {
        NodeUser {
            api_version: "deckhouse.io/v1".into(),
            kind: "NodeUser".into(),
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            spec,
            status: None,
        }
    }

    fn paths(errors: Vec<FieldError>) -> Vec<String> {
        errors.into_iter().map(|e| e.path).collect()
    }

    #[test]
    fn a_full_user_is_valid() {
        let spec = NodeUserSpec {
            uid: Some(1001),
            ssh_public_keys: Some(vec!["ssh-ed25519 AAAAC3 ops@laptop".into()]),
            password_hash: Some("$6$salt$hash".into()),
            is_sudoer: Some(true),
            extra_groups: Some(vec!["docker".into()]),
            node_groups: Some(vec!["worker".into()]),
            ssh_public_key: None,
        };
        assert_eq!(validate_node_user(&user("ops", spec)), vec![]);
    }

    #[test]
    fn every_bad_field_is_named() {
        let spec = NodeUserSpec {
            uid: Some(1000),
            ssh_public_keys: Some(vec![
                "ssh-rsa AAAA".into(),
                "hello".into(),
                "ssh-rsa A\nssh-rsa B".into(),
            ]),
            password_hash: Some("secret password".into()),
            is_sudoer: None,
            extra_groups: Some(vec!["Wheel".into()]),
            node_groups: Some(vec!["*".into(), "x_y".into()]),
            ssh_public_key: Some("nope".into()),
        };
        assert_eq!(
            paths(validate_node_user(&user("Root_", spec))),
            vec![
                "metadata.name",
                "spec.uid",
                "spec.sshPublicKeys[1]",
                "spec.sshPublicKeys[2]",
                "spec.sshPublicKey",
                "spec.passwordHash",
                "spec.extraGroups[0]",
                "spec.nodeGroups[1]"
            ]
        );
        assert_eq!(
            paths(validate_node_user(&NodeUser::default())),
            vec!["metadata.name", "spec.uid"]
        );
        let nobody = NodeUserSpec {
            uid: Some(65534),
            ..NodeUserSpec::default()
        };
        assert_eq!(
            paths(validate_node_user(&user("a", nobody))),
            vec!["spec.uid"]
        );
    }
}
