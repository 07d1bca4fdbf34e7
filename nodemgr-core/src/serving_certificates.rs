//! Kubelet serving certificates: whether a `kubernetes.io/kubelet-serving`
//! CertificateSigningRequest is approved or denied (see `docs/bootstrap.md`).
//!
//! A kubelet with `serverTLSBootstrap: true` asks for its serving certificate with a CSR; the
//! signer issues it only once someone approves. [`plan_serving_certificate`] approves a request only when all of
//! these hold, and denies it naming the first that does not:
//!
//! 1. the requester (`spec.username`) is `system:node:<name>` and is in `system:nodes`;
//! 2. the usages are the serving ones: `digital signature` and `server auth`, optionally
//!    `key encipherment`, nothing else;
//! 3. the request parses, its subject is `CN=system:node:<name>, O=system:nodes` and it asks
//!    for DNS names and IP addresses only (no e-mail or URI names), at least one;
//! 4. a Node `<name>` exists;
//! 5. every DNS name is one of that Node's `Hostname`, `InternalDNS` or `ExternalDNS`
//!    addresses and every IP address one of its `InternalIP` or `ExternalIP` addresses.
//!
//! Requests for other signers and requests already approved or denied are left alone. A
//! certificate naming fewer addresses than the Node has is approved (it cannot impersonate
//! anything); one naming a single address the Node does not have is denied.

use std::collections::BTreeSet;
use std::net::IpAddr;

/// The signer of kubelet serving certificates.
pub const SIGNER_KUBELET_SERVING: &str = "kubernetes.io/kubelet-serving";
/// The group every kubelet is in.
pub const NODES_GROUP: &str = "system:nodes";
/// Prefix of a kubelet's user name.
pub const NODE_USER_PREFIX: &str = "system:node:";
/// Reason of the `Approved` condition nodemgr writes.
pub const APPROVED_REASON: &str = "AutoApproved";

/// What a PKCS#10 request asks for (parsed by the adapter from `spec.request`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CertificateRequest {
    /// Subject common names (a well-formed request has one).
    pub common_names: Vec<String>,
    /// Subject organizations.
    pub organizations: Vec<String>,
    /// DNS subject alternative names.
    pub dns_names: Vec<String>,
    /// IP subject alternative names.
    pub ip_addresses: Vec<IpAddr>,
    /// Other alternative names (e-mail, URI, …), described.
    pub other_names: Vec<String>,
}

/// A CertificateSigningRequest as [`plan_serving_certificate`] needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServingRequest {
    /// Name of the CSR.
    pub name: String,
    /// `spec.signerName`.
    pub signer_name: String,
    /// `spec.username`.
    pub username: String,
    /// `spec.groups`.
    pub groups: Vec<String>,
    /// `spec.usages`.
    pub usages: Vec<String>,
    /// `spec.request`, parsed, or why it does not parse.
    pub request: Result<CertificateRequest, String>,
    /// Whether `status.conditions` already holds `Approved` or `Denied`.
    pub decided: bool,
}

impl ServingRequest {
    /// The Node name of the requester when it is a kubelet (`system:node:<name>`).
    pub fn node_name(&self) -> Option<&str> {
        self.username
            .strip_prefix(NODE_USER_PREFIX)
            .filter(|n| !n.is_empty())
    }
}

/// The addresses of a Node (`status.addresses`), by kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeAddresses {
    /// `Hostname`, `InternalDNS` and `ExternalDNS` addresses.
    pub dns_names: BTreeSet<String>,
    /// `InternalIP` and `ExternalIP` addresses.
    pub ip_addresses: BTreeSet<IpAddr>,
}

impl NodeAddresses {
    /// Reads `(type, address)` pairs of `status.addresses`; unknown types and IP addresses
    /// that do not parse are skipped.
    pub fn from_status<'a>(addresses: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut out = NodeAddresses::default();
        for (kind, address) in addresses {
            match kind {
                "Hostname" | "InternalDNS" | "ExternalDNS" => {
                    out.dns_names.insert(address.to_ascii_lowercase());
                }
                "InternalIP" | "ExternalIP" => {
                    if let Ok(ip) = address.parse() {
                        out.ip_addresses.insert(ip);
                    }
                }
                _ => {}
            }
        }
        out
    }
}

/// Why a request is denied: the `reason` of its `Denied` condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenyReason {
    /// The requester is not a kubelet.
    RequesterNotANode,
    /// The usages are not the serving ones.
    UsagesNotServing,
    /// `spec.request` is not a PKCS#10 request.
    RequestUnreadable,
    /// The subject is not the requesting Node.
    SubjectMismatch,
    /// No names, or names other than DNS and IP.
    UnsupportedNames,
    /// No Node of that name.
    UnknownNode,
    /// A name the Node does not have.
    NameNotOfNode,
}

impl DenyReason {
    /// The condition `reason` (CamelCase, as Kubernetes writes them).
    pub fn as_str(self) -> &'static str {
        match self {
            DenyReason::RequesterNotANode => "RequesterNotANode",
            DenyReason::UsagesNotServing => "UsagesNotServing",
            DenyReason::RequestUnreadable => "RequestUnreadable",
            DenyReason::SubjectMismatch => "SubjectMismatch",
            DenyReason::UnsupportedNames => "UnsupportedNames",
            DenyReason::UnknownNode => "UnknownNode",
            DenyReason::NameNotOfNode => "NameNotOfNode",
        }
    }
}

/// What to do with a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CsrDecision {
    /// Not ours (another signer) or already approved or denied.
    Skip,
    /// Approve it; the message names the Node.
    Approve {
        /// Message of the `Approved` condition.
        message: String,
    },
    /// Deny it.
    Deny {
        /// Reason of the `Denied` condition.
        reason: DenyReason,
        /// Message of the `Denied` condition: what is wrong.
        message: String,
    },
}

impl std::fmt::Display for CsrDecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CsrDecision::Skip => write!(f, "leave alone"),
            CsrDecision::Approve { message } => write!(f, "approve: {message}"),
            CsrDecision::Deny { reason, message } => {
                write!(f, "deny ({}): {message}", reason.as_str())
            }
        }
    }
}

fn deny(reason: DenyReason, message: String) -> CsrDecision {
    CsrDecision::Deny { reason, message }
}

/// Decides a kubelet serving CSR given the Node its requester names (`None` when no such Node
/// exists; look it up with [`ServingRequest::node_name`]). See the module docs for the rules.
pub fn plan_serving_certificate(csr: &ServingRequest, node: Option<&NodeAddresses>) -> CsrDecision {
    if csr.signer_name != SIGNER_KUBELET_SERVING || csr.decided {
        return CsrDecision::Skip;
    }
    let Some(node_name) = csr.node_name() else {
        return deny(
            DenyReason::RequesterNotANode,
            format!(
                "requester {:?} is not a kubelet (system:node:<name>)",
                csr.username
            ),
        );
    };
    if !csr.groups.iter().any(|g| g == NODES_GROUP) {
        return deny(
            DenyReason::RequesterNotANode,
            format!("requester {:?} is not in {NODES_GROUP}", csr.username),
        );
    }
    let usages: BTreeSet<&str> = csr.usages.iter().map(String::as_str).collect();
    let allowed = ["digital signature", "key encipherment", "server auth"];
    if !usages.contains("digital signature")
        || !usages.contains("server auth")
        || usages.iter().any(|u| !allowed.contains(u))
    {
        return deny(
            DenyReason::UsagesNotServing,
            format!(
                "usages {:?} are not the serving ones (digital signature, server auth, optionally key encipherment)",
                csr.usages
            ),
        );
    }
    let request = match &csr.request {
        Ok(r) => r,
        Err(e) => {
            return deny(
                DenyReason::RequestUnreadable,
                format!("spec.request is not a PEM PKCS#10 request: {e}"),
            );
        }
    };
    if request.common_names != [csr.username.as_str()] || request.organizations != [NODES_GROUP] {
        return deny(
            DenyReason::SubjectMismatch,
            format!(
                "subject CN={:?} O={:?} is not CN={} O={NODES_GROUP}",
                request.common_names, request.organizations, csr.username
            ),
        );
    }
    if !request.other_names.is_empty() {
        return deny(
            DenyReason::UnsupportedNames,
            format!(
                "only DNS names and IP addresses may be asked for, not {:?}",
                request.other_names
            ),
        );
    }
    if request.dns_names.is_empty() && request.ip_addresses.is_empty() {
        return deny(
            DenyReason::UnsupportedNames,
            "the request names no DNS name or IP address".to_owned(),
        );
    }
    let Some(node) = node else {
        return deny(
            DenyReason::UnknownNode,
            format!("there is no Node {node_name:?}"),
        );
    };
    if let Some(dns) = request
        .dns_names
        .iter()
        .find(|d| !node.dns_names.contains(&d.to_ascii_lowercase()))
    {
        return deny(
            DenyReason::NameNotOfNode,
            format!("DNS name {dns:?} is not an address of Node {node_name}"),
        );
    }
    if let Some(ip) = request
        .ip_addresses
        .iter()
        .find(|ip| !node.ip_addresses.contains(ip))
    {
        return deny(
            DenyReason::NameNotOfNode,
            format!("IP address {ip} is not an address of Node {node_name}"),
        );
    }
    CsrDecision::Approve {
        message: format!(
            "kubelet serving certificate of Node {node_name} (names checked against its addresses)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn node() -> NodeAddresses {
        NodeAddresses::from_status([
            ("Hostname", "w1"),
            ("InternalIP", "10.0.0.5"),
            ("ExternalIP", "2001:db8::5"),
            ("InternalDNS", "w1.internal"),
            ("Weird", "x"),
        ])
    }

    fn csr(dns: &[&str], ips: &[&str]) -> ServingRequest {
        ServingRequest {
            name: "csr-1".into(),
            signer_name: SIGNER_KUBELET_SERVING.into(),
            username: "system:node:w1".into(),
            groups: vec!["system:nodes".into(), "system:authenticated".into()],
            usages: vec![
                "digital signature".into(),
                "key encipherment".into(),
                "server auth".into(),
            ],
            request: Ok(CertificateRequest {
                common_names: vec!["system:node:w1".into()],
                organizations: vec!["system:nodes".into()],
                dns_names: dns.iter().map(|s| (*s).to_owned()).collect(),
                ip_addresses: ips.iter().filter_map(|s| s.parse().ok()).collect(),
                other_names: Vec::new(),
            }),
            decided: false,
        }
    }

    fn reason(d: &CsrDecision) -> Option<DenyReason> {
        match d {
            CsrDecision::Deny { reason, .. } => Some(*reason),
            _ => None,
        }
    }

    #[test]
    fn a_kubelet_asking_for_its_own_addresses_is_approved() {
        let d = plan_serving_certificate(
            &csr(&["w1", "W1.internal"], &["10.0.0.5", "2001:db8::5"]),
            Some(&node()),
        );
        assert!(matches!(d, CsrDecision::Approve { .. }), "{d}");
        let mut two = csr(&["w1"], &["10.0.0.5"]);
        two.usages.retain(|u| u != "key encipherment");
        assert!(matches!(
            plan_serving_certificate(&two, Some(&node())),
            CsrDecision::Approve { .. }
        ));
    }

    #[test]
    fn each_rule_denies_with_its_reason() {
        let n = node();
        let base = csr(&["w1"], &["10.0.0.5"]);
        let mut c = base.clone();
        c.username = "alice".into();
        assert_eq!(
            reason(&plan_serving_certificate(&c, Some(&n))),
            Some(DenyReason::RequesterNotANode)
        );
        let mut c = base.clone();
        c.groups = vec!["system:authenticated".into()];
        assert_eq!(
            reason(&plan_serving_certificate(&c, Some(&n))),
            Some(DenyReason::RequesterNotANode)
        );
        let mut c = base.clone();
        c.usages.push("client auth".into());
        assert_eq!(
            reason(&plan_serving_certificate(&c, Some(&n))),
            Some(DenyReason::UsagesNotServing)
        );
        let mut c = base.clone();
        c.request = Err("no PEM block".into());
        assert_eq!(
            reason(&plan_serving_certificate(&c, Some(&n))),
            Some(DenyReason::RequestUnreadable)
        );
        let mut c = base.clone();
        c.username = "system:node:w2".into();
        assert_eq!(
            reason(&plan_serving_certificate(&c, Some(&n))),
            Some(DenyReason::SubjectMismatch)
        );
        let mut c = base.clone();
        if let Ok(r) = &mut c.request {
            r.other_names.push("email:a@b".into());
        }
        assert_eq!(
            reason(&plan_serving_certificate(&c, Some(&n))),
            Some(DenyReason::UnsupportedNames)
        );
        assert_eq!(
            reason(&plan_serving_certificate(&csr(&[], &[]), Some(&n))),
            Some(DenyReason::UnsupportedNames)
        );
        assert_eq!(
            reason(&plan_serving_certificate(&base, None)),
            Some(DenyReason::UnknownNode)
        );
        let d = plan_serving_certificate(&csr(&["w1", "evil.example"], &[]), Some(&n));
        assert_eq!(reason(&d), Some(DenyReason::NameNotOfNode));
        assert!(d.to_string().contains("evil.example"), "{d}");
        assert_eq!(
            reason(&plan_serving_certificate(
                &csr(&[], &["10.0.0.6"]),
                Some(&n)
            )),
            Some(DenyReason::NameNotOfNode)
        );
    }

    #[test]
    fn other_signers_and_decided_requests_are_left_alone() {
        let mut c = csr(&["evil"], &[]);
        c.signer_name = "kubernetes.io/kube-apiserver-client-kubelet".into();
        assert_eq!(plan_serving_certificate(&c, None), CsrDecision::Skip);
        let mut c = csr(&["evil"], &[]);
        c.decided = true;
        assert_eq!(plan_serving_certificate(&c, None), CsrDecision::Skip);
    }

    fn arb_ip() -> impl Strategy<Value = IpAddr> {
        (0u8..4).prop_map(|i| IpAddr::from([10, 0, 0, i]))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Approval is sound: an approved request comes from the Node it names, with serving
        /// usages, and every name it asks for is one of that Node's addresses. And it is
        /// complete: a well-formed request for a non-empty subset of the Node's addresses is
        /// approved.
        #[test]
        fn approved_exactly_when_every_name_is_the_nodes(
            node_dns in proptest::collection::btree_set("[a-c]{1,2}", 0..3),
            node_ips in proptest::collection::btree_set(arb_ip(), 0..3),
            asked_dns in proptest::collection::vec("[a-c]{1,2}", 0..3),
            asked_ips in proptest::collection::vec(arb_ip(), 0..3),
            exists in any::<bool>(),
            extra_usage in proptest::option::of(prop_oneof![Just("client auth"), Just("key encipherment"), Just("signing")]),
            username in prop_oneof![Just("system:node:w1"), Just("system:node:w2"), Just("bob")],
        ) {
            let node = NodeAddresses { dns_names: node_dns, ip_addresses: node_ips };
            let mut c = csr(&[], &[]);
            c.username = username.to_owned();
            c.usages = vec!["server auth".into(), "digital signature".into()];
            c.usages.extend(extra_usage.map(str::to_owned));
            if let Ok(r) = &mut c.request {
                r.dns_names = asked_dns.clone();
                r.ip_addresses = asked_ips.clone();
            }
            let d = plan_serving_certificate(&c, exists.then_some(&node));
            let well_formed = username == "system:node:w1"
                && extra_usage.is_none_or(|u| u == "key encipherment")
                && !(asked_dns.is_empty() && asked_ips.is_empty());
            let names_ok = asked_dns.iter().all(|n| node.dns_names.contains(n))
                && asked_ips.iter().all(|ip| node.ip_addresses.contains(ip));
            let approve = well_formed && exists && names_ok;
            let approved = matches!(d, CsrDecision::Approve { .. });
            prop_assert_eq!(approved, approve, "{}", d);
            let decided = matches!(d, CsrDecision::Approve { .. } | CsrDecision::Deny { .. });
            prop_assert!(decided, "a pending kubelet-serving request is always decided: {}", d);
        }
    }
}
