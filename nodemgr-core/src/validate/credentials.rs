//! StaticInstance and SSHCredentials rules: the CRD schemas of `staticinstances.deckhouse.io`
//! and `sshcredentials.deckhouse.io` (docs/deckhouse.md §2): a required IPv4 address and credentials
//! reference; a user, a key or sudo password (anyOf), a port in 1..65535 and base64 secrets.

use super::syntax;
use super::{Errors, FieldError};
use crate::model::{ObjectMeta, SshCredentials, StaticInstance};

fn check_object_name(e: &mut Errors, meta: &ObjectMeta, kind: &str) {
    match meta.name.as_deref() {
        None => e.push(
            "metadata.name",
            format!("required: every {kind} needs a name"),
        ),
        Some(name) => e.check(
            "metadata.name",
            syntax::check_dns_subdomain(name).map_err(|m| format!("name {m}")),
        ),
    }
}

/// Checks a StaticInstance: `spec.address` is a required IPv4 address and
/// `spec.credentialsRef` a required reference (with a name) to an SSHCredentials.
pub fn validate_static_instance(si: &StaticInstance) -> Vec<FieldError> {
    let mut e = Errors::default();
    check_object_name(&mut e, &si.metadata, "StaticInstance");
    match si.spec.address.as_deref() {
        None | Some("") => e.push(
            "spec.address",
            "required: the IPv4 address nodemgr reaches the machine at over SSH",
        ),
        Some(a) if !syntax::is_ipv4(a) => e.push(
            "spec.address",
            format!("{a:?} is not an IPv4 address; use a dotted quad such as \"192.168.1.10\""),
        ),
        Some(_) => {}
    }
    match &si.spec.credentials_ref {
        None => e.push(
            "spec.credentialsRef",
            "required: {kind: SSHCredentials, name: <credentials>} to log in with",
        ),
        Some(r) => {
            if r.name.is_empty() {
                e.push(
                    "spec.credentialsRef.name",
                    "required: the name of an SSHCredentials object",
                );
            }
            if let Some(kind) = &r.kind
                && kind != "SSHCredentials"
            {
                e.push(
                    "spec.credentialsRef.kind",
                    format!("{kind:?} is not accepted; credentials are of kind SSHCredentials"),
                );
            }
        }
    }
    e.0
}

/// Checks an SSHCredentials: `user` is required; one of `privateSSHKey` (base64 of a PEM key),
/// `sudoPassword` (`v1alpha1`) or `sudoPasswordEncoded` (`v1alpha2`, base64) is required;
/// `sshPort` is 1..65535.
pub fn validate_ssh_credentials(c: &SshCredentials) -> Vec<FieldError> {
    let mut e = Errors::default();
    let spec = &c.spec;
    check_object_name(&mut e, &c.metadata, "SSHCredentials");
    if spec.user.as_deref().is_none_or(str::is_empty) {
        e.push("spec.user", "required: the user to log in as over SSH");
    }
    let has = |v: &Option<String>| v.as_deref().is_some_and(|s| !s.is_empty());
    if !has(&spec.private_ssh_key) && !has(&spec.sudo_password) && !has(&spec.sudo_password_encoded)
    {
        e.push(
            "spec.privateSSHKey",
            "one of privateSSHKey, sudoPassword (v1alpha1) or sudoPasswordEncoded (v1alpha2) \
             is required",
        );
    }
    if let Some(key) = spec.private_ssh_key.as_deref().filter(|k| !k.is_empty()) {
        match syntax::decode_base64(key) {
            Err(m) => e.push(
                "spec.privateSSHKey",
                format!("privateSSHKey {m}; it holds the PEM private key encoded in base64"),
            ),
            Ok(pem) if !pem.starts_with(b"-----BEGIN ") => e.push(
                "spec.privateSSHKey",
                "decodes to something that is not a PEM key (it should start with \
                 \"-----BEGIN\"); encode the whole private key file with base64",
            ),
            Ok(_) => {}
        }
    }
    if let Some(p) = spec
        .sudo_password_encoded
        .as_deref()
        .filter(|k| !k.is_empty())
        && let Err(m) = syntax::decode_base64(p)
    {
        e.push(
            "spec.sudoPasswordEncoded",
            format!("sudoPasswordEncoded {m}; it holds the sudo password encoded in base64"),
        );
    }
    e.range("spec.sshPort", spec.ssh_port, 1, 65535);
    e.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ObjectReference, SshCredentialsSpec, StaticInstanceSpec};

    fn meta(name: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        }
    }

    fn paths(errors: &[FieldError]) -> Vec<&str> {
        errors.iter().map(|e| e.path.as_str()).collect()
    }

    // base64 of "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    const KEY: &str = "LS0tLS1CRUdJTiBPUEVOU1NIIFBSSVZBVEUgS0VZLS0tLS0K";

    #[test]
    fn static_instance_rules() {
        let good = StaticInstance {
            metadata: meta("static-0"),
            spec: StaticInstanceSpec {
                address: Some("192.168.1.10".into()),
                credentials_ref: Some(ObjectReference {
                    kind: Some("SSHCredentials".into()),
                    name: "creds".into(),
                    ..Default::default()
                }),
            },
            ..Default::default()
        };
        assert_eq!(validate_static_instance(&good), vec![]);
        let mut bad = good.clone();
        bad.metadata.name = Some("Static_0".into());
        bad.spec.address = Some("192.168.1".into());
        bad.spec.credentials_ref = Some(ObjectReference {
            kind: Some("Secret".into()),
            ..Default::default()
        });
        assert_eq!(
            paths(&validate_static_instance(&bad)),
            vec![
                "metadata.name",
                "spec.address",
                "spec.credentialsRef.name",
                "spec.credentialsRef.kind"
            ]
        );
        let empty = StaticInstance::default();
        assert_eq!(
            paths(&validate_static_instance(&empty)),
            vec!["metadata.name", "spec.address", "spec.credentialsRef"]
        );
    }

    #[test]
    fn ssh_credentials_rules() {
        let good = SshCredentials {
            metadata: meta("creds"),
            spec: SshCredentialsSpec {
                user: Some("ubuntu".into()),
                private_ssh_key: Some(KEY.into()),
                ssh_port: Some(22),
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(validate_ssh_credentials(&good), vec![]);
        let sudo_only = SshCredentials {
            metadata: meta("creds"),
            spec: SshCredentialsSpec {
                user: Some("ubuntu".into()),
                sudo_password_encoded: Some("c2VjcmV0".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(validate_ssh_credentials(&sudo_only), vec![]);
        let mut bad = good.clone();
        bad.spec.user = None;
        bad.spec.private_ssh_key = Some("not base64!".into());
        bad.spec.ssh_port = Some(70000);
        bad.spec.sudo_password_encoded = Some("@@@@".into());
        assert_eq!(
            paths(&validate_ssh_credentials(&bad)),
            vec![
                "spec.user",
                "spec.privateSSHKey",
                "spec.sudoPasswordEncoded",
                "spec.sshPort"
            ]
        );
        let mut not_pem = good.clone();
        not_pem.spec.private_ssh_key = Some("aGVsbG8=".into());
        let e = validate_ssh_credentials(&not_pem);
        assert_eq!(paths(&e), vec!["spec.privateSSHKey"]);
        assert!(e[0].message.contains("PEM"));
        let mut nothing = good;
        nothing.spec.private_ssh_key = None;
        nothing.spec.ssh_port = Some(0);
        assert_eq!(
            paths(&validate_ssh_credentials(&nothing)),
            vec!["spec.privateSSHKey", "spec.sshPort"]
        );
    }
}
