//! The manifests in `deploy/` (the Helm chart's rendered default, see `bins/tests/chart.rs`) are what a cluster gets: the CRDs there are exactly what
//! `nodemgr crds` prints, and every other document is a well-formed object of its kind — it
//! survives a round trip through the Kubernetes API types (`k8s-openapi`) without losing a
//! field, so a misspelled or misplaced field fails here rather than in a cluster. (The
//! `kubectl apply --dry-run=client -f deploy/` acceptance is in nodemgr-testkit's tests.)
//!
//! The node agents can do little: fencing-agent and early-oom run as root with every
//! capability dropped (early-oom adds only SYS_RESOURCE and is not privileged), seccomp
//! RuntimeDefault and a read-only root; an admission policy bound to each narrows its writes to
//! its own node; node-manager may read exactly the cloud Secret its code reads.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup step should panic

use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Namespace, Secret, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

fn manifests() -> Vec<(String, Value)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(deploy_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 2, "deploy/ lost its manifests: {files:?}");
    let mut docs = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let values: Vec<Value> = serde_saphyr::from_multiple(&text)
            .unwrap_or_else(|e| panic!("{}: not YAML: {e}", file.display()));
        for (i, value) in values.into_iter().enumerate() {
            if value.is_null() {
                continue;
            }
            docs.push((format!("{}#{i}", file.display()), value));
        }
    }
    docs
}

/// Parses `value` as `T` and serializes it back; the two must be equal.
fn round_trips<T: DeserializeOwned + Serialize>(name: &str, value: &Value) {
    let typed: T = serde_json::from_value(value.clone())
        .unwrap_or_else(|e| panic!("{name}: not a valid {}: {e}", std::any::type_name::<T>()));
    let back = serde_json::to_value(&typed).unwrap();
    if &back != value {
        panic!(
            "{name}: fields lost or changed by the API types (misspelled or misplaced?)\n\
             written: {value:#}\nas the API reads it: {back:#}"
        );
    }
}

#[test]
fn every_deploy_document_is_a_well_formed_kubernetes_object() {
    let mut kinds = Vec::new();
    for (name, doc) in manifests() {
        let kind = doc["kind"].as_str().unwrap_or_default().to_owned();
        match kind.as_str() {
            "Namespace" => round_trips::<Namespace>(&name, &doc),
            "ServiceAccount" => round_trips::<ServiceAccount>(&name, &doc),
            "ClusterRole" => round_trips::<ClusterRole>(&name, &doc),
            "ClusterRoleBinding" => round_trips::<ClusterRoleBinding>(&name, &doc),
            "Role" => round_trips::<Role>(&name, &doc),
            "RoleBinding" => round_trips::<RoleBinding>(&name, &doc),
            "Deployment" => round_trips::<Deployment>(&name, &doc),
            "DaemonSet" => round_trips::<DaemonSet>(&name, &doc),
            "Service" => round_trips::<Service>(&name, &doc),
            "Secret" => round_trips::<Secret>(&name, &doc),
            "PodDisruptionBudget" => round_trips::<PodDisruptionBudget>(&name, &doc),
            "CustomResourceDefinition" => round_trips::<CustomResourceDefinition>(&name, &doc),
            "ValidatingAdmissionPolicy" => round_trips::<ValidatingAdmissionPolicy>(&name, &doc),
            "ValidatingWebhookConfiguration" => {
                round_trips::<ValidatingWebhookConfiguration>(&name, &doc);
            }
            "ValidatingAdmissionPolicyBinding" => {
                round_trips::<ValidatingAdmissionPolicyBinding>(&name, &doc);
            }
            other => panic!("{name}: kind {other:?} has no round-trip check here; add one"),
        }
        kinds.push(kind);
    }
    for needed in [
        "Deployment",
        "DaemonSet",
        "ClusterRole",
        "CustomResourceDefinition",
    ] {
        assert!(kinds.iter().any(|k| k == needed), "deploy/ has no {needed}");
    }
}

#[test]
fn the_node_manager_deployment_runs_two_replicas_under_leader_election() {
    let docs = manifests();
    let (_, deployment) = docs
        .iter()
        .find(|(_, d)| d["kind"] == "Deployment" && d["metadata"]["name"] == "node-manager")
        .expect("a node-manager Deployment");
    assert_eq!(deployment["spec"]["replicas"], 2);
    let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap();
    assert!(
        args.iter().any(|a| a
            .as_str()
            .is_some_and(|a| a.starts_with("--leader-election-namespace"))),
        "{args:?}"
    );
}

/// The container `name` of the `kind` object `name` in deploy/ runs `binary` and passes only
/// flags its `--help` lists. Returns the container.
fn container_flags_exist(kind: &str, name: &str, binary: &str) -> Value {
    let help = Command::new(binary).arg("--help").output().unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    let docs = manifests();
    let (_, object) = docs
        .iter()
        .find(|(_, d)| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in deploy/"));
    let container = object["spec"]["template"]["spec"]["containers"][0].clone();
    assert_eq!(container["command"][0], format!("/usr/local/bin/{name}"));
    for arg in container["args"].as_array().unwrap() {
        let flag = arg.as_str().unwrap().split('=').next().unwrap();
        assert!(help.contains(flag), "{name} has no flag {flag}:\n{help}");
    }
    container
}

#[test]
fn the_node_manager_deployment_passes_only_flags_the_binary_has() {
    let container = container_flags_exist(
        "Deployment",
        "node-manager",
        env!("CARGO_BIN_EXE_node-manager"),
    );
    // The metrics port the probes use is the one the flags listen on.
    let port = container["ports"][0]["containerPort"].as_i64().unwrap();
    assert!(
        container["args"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a.as_str().unwrap().ends_with(&format!(":{port}")))
    );
}

#[test]
fn the_webhook_is_served_by_every_replica_and_named_by_the_crds() {
    let container = container_flags_exist(
        "Deployment",
        "nodemgr-webhook",
        env!("CARGO_BIN_EXE_nodemgr-webhook"),
    );
    let args: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    // No leader election: every replica behind the Service answers.
    assert!(!args.iter().any(|a| a.contains("leader")), "{args:?}");
    let docs = manifests();
    let deployment = find(&docs, "Deployment", "nodemgr-webhook");
    assert_eq!(deployment["spec"]["replicas"], 2);
    let port = container["ports"][0]["containerPort"].as_i64().unwrap();
    assert!(args.contains(&format!("--listen=0.0.0.0:{port}").as_str()));
    // Every CRD converted by webhook points at the Service, whose caBundle the webhook keeps.
    let service = find(&docs, "Service", "nodemgr-webhook");
    let namespace = service["metadata"]["namespace"].as_str().unwrap();
    for (_, crd) in docs
        .iter()
        .filter(|(_, d)| d["kind"] == "CustomResourceDefinition")
    {
        let conversion = &crd["spec"]["conversion"];
        if conversion["strategy"] != "Webhook" {
            continue;
        }
        let reference = &conversion["webhook"]["clientConfig"]["service"];
        assert_eq!(reference["name"], "nodemgr-webhook");
        assert_eq!(reference["namespace"], namespace);
        let name = crd["metadata"]["name"].as_str().unwrap();
        assert!(
            args.contains(&format!("--ca-bundle-crd={name}").as_str()),
            "{name}: caBundle not kept"
        );
    }
    let vwc = find(&docs, "ValidatingWebhookConfiguration", "nodemgr-webhook");
    for webhook in vwc["webhooks"].as_array().unwrap() {
        assert_eq!(
            webhook["clientConfig"]["service"]["name"],
            "nodemgr-webhook"
        );
        assert_eq!(webhook["clientConfig"]["service"]["path"], "/validate");
    }
    assert!(args.contains(&"--ca-bundle-webhook-configuration=nodemgr-webhook"));
}

#[test]
fn bashible_apiserver_runs_in_cluster_mode_with_the_rbac_its_watches_need() {
    let container = container_flags_exist(
        "Deployment",
        "bashible-apiserver",
        env!("CARGO_BIN_EXE_bashible-apiserver"),
    );
    let args: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(args.contains(&"--from-cluster"), "{args:?}");
    assert!(
        args.contains(&"--tls-name=bashible-apiserver.nodemgr-system.svc"),
        "{args:?}"
    );
    let docs = manifests();
    let deployment = find(&docs, "Deployment", "bashible-apiserver");
    assert_ne!(
        deployment["spec"]["template"]["spec"]["automountServiceAccountToken"], false,
        "cluster mode needs its token"
    );
    let grants = |kind: &str, name: &str, group: &str, resource: &str, verb: &str| {
        find(&docs, kind, name)["rules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| {
                r["apiGroups"][0] == group
                    && r["resources"]
                        .as_array()
                        .unwrap()
                        .contains(&Value::from(resource))
                    && r["verbs"].as_array().unwrap().contains(&Value::from(verb))
            })
    };
    for (kind, name, group, resource, verb) in [
        (
            "ClusterRole",
            "nodemgr:bashible-apiserver",
            "deckhouse.io",
            "nodegroups",
            "watch",
        ),
        (
            "ClusterRole",
            "nodemgr:bashible-apiserver",
            "deckhouse.io",
            "nodeusers",
            "list",
        ),
        (
            "ClusterRole",
            "nodemgr:bashible-apiserver",
            "deckhouse.io",
            "nodegroupconfigurations",
            "watch",
        ),
        (
            "ClusterRole",
            "nodemgr:bashible-apiserver",
            "deckhouse.io",
            "nodegroups/status",
            "patch",
        ),
        (
            "Role",
            "nodemgr:bashible-apiserver-endpoints",
            "discovery.k8s.io",
            "endpointslices",
            "watch",
        ),
        (
            "Role",
            "nodemgr:bashible-apiserver",
            "",
            "configmaps",
            "watch",
        ),
        (
            "Role",
            "nodemgr:bashible-apiserver-secrets",
            "",
            "secrets",
            "update",
        ),
        (
            "Role",
            "nodemgr:bashible-apiserver-bootstrap-tokens",
            "",
            "secrets",
            "list",
        ),
        (
            "Role",
            "nodemgr:bashible-apiserver-bootstrap-tokens",
            "",
            "secrets",
            "watch",
        ),
        (
            "ClusterRole",
            "nodemgr:node-manager",
            "storage.k8s.io",
            "csinodes",
            "watch",
        ),
        // node-manager reads the cluster context new nodes join with as bashible-apiserver does.
        (
            "Role",
            "nodemgr:node-manager-endpoints",
            "discovery.k8s.io",
            "endpointslices",
            "watch",
        ),
        (
            "Role",
            "nodemgr:node-manager-cluster-context",
            "",
            "configmaps",
            "watch",
        ),
        (
            "ClusterRole",
            "nodemgr:node-manager",
            "scheduling.k8s.io",
            "priorityclasses",
            "create",
        ),
        (
            "Role",
            "nodemgr:node-manager-standby",
            "apps",
            "deployments",
            "patch",
        ),
    ] {
        assert!(
            grants(kind, name, group, resource, verb),
            "{kind} {name}: {verb} {group}/{resource}"
        );
    }
    assert_eq!(
        find(&docs, "Role", "nodemgr:bashible-apiserver-endpoints")["metadata"]["namespace"],
        "default"
    );
    assert_eq!(
        find(&docs, "Role", "nodemgr:node-manager-endpoints")["metadata"]["namespace"],
        "default"
    );
    let node_manager = find(&docs, "Deployment", "node-manager");
    assert!(
        node_manager["spec"]["template"]["spec"]["containers"][0]["args"]
            .as_array()
            .unwrap()
            .contains(&Value::from("--cluster-context-namespace=nodemgr-system")),
        "node-manager reads the context where bashible-apiserver's settings are"
    );
    assert_eq!(
        find(&docs, "Role", "nodemgr:bashible-apiserver-secrets")["metadata"]["namespace"],
        "d8-cloud-instance-manager"
    );
    assert_eq!(
        find(&docs, "Role", "nodemgr:node-manager-standby")["metadata"]["namespace"],
        "d8-cloud-instance-manager",
        "the standby-holder Deployments live where Deckhouse keeps them"
    );
}

#[test]
fn the_fencing_agent_daemonset_passes_only_flags_the_binary_has() {
    let container = container_flags_exist(
        "DaemonSet",
        "fencing-agent",
        env!("CARGO_BIN_EXE_fencing-agent"),
    );
    assert_eq!(
        container["env"][0]["name"], "NODE_NAME",
        "the node name comes from the env"
    );
}

#[test]
fn the_early_oom_daemonset_passes_only_flags_the_binary_has() {
    let container =
        container_flags_exist("DaemonSet", "early-oom", env!("CARGO_BIN_EXE_early-oom"));
    assert_eq!(
        container["env"][0]["name"], "NODE_NAME",
        "the node name comes from the env"
    );
}

fn find<'a>(docs: &'a [(String, Value)], kind: &str, name: &str) -> &'a Value {
    &docs
        .iter()
        .find(|(_, d)| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in deploy/"))
        .1
}

#[test]
fn the_node_agents_run_as_root_with_the_least_they_need() {
    let docs = manifests();
    for (name, privileged, added) in [
        ("fencing-agent", true, vec![]),
        ("early-oom", false, vec!["SYS_RESOURCE"]),
    ] {
        let ds = find(&docs, "DaemonSet", name);
        let sc = &ds["spec"]["template"]["spec"]["containers"][0]["securityContext"];
        assert_eq!(
            sc["runAsUser"], 0,
            "{name}: root (the image's user is 65532)"
        );
        assert_eq!(sc["runAsNonRoot"], false, "{name}");
        assert_eq!(sc["readOnlyRootFilesystem"], true, "{name}");
        assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault", "{name}");
        assert_eq!(
            sc["capabilities"]["drop"],
            serde_json::json!(["ALL"]),
            "{name}"
        );
        let add: Vec<&str> = sc["capabilities"]["add"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        assert_eq!(add, added, "{name}: capabilities added");
        assert_eq!(
            sc["privileged"].as_bool().unwrap_or(false),
            privileged,
            "{name}"
        );
        if !privileged {
            assert_eq!(sc["allowPrivilegeEscalation"], false, "{name}");
        }
    }
    // early-oom mounts only the kubepods cgroup.
    let ds = find(&docs, "DaemonSet", "early-oom");
    let volumes = ds["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap();
    for v in volumes {
        if let Some(path) = v["hostPath"]["path"].as_str() {
            assert_eq!(path, "/sys/fs/cgroup/kubepods.slice");
        }
    }
}

#[test]
fn each_node_agent_is_held_to_its_own_node_by_an_admission_policy() {
    let docs = manifests();
    for (agent, policy, resource, operation) in [
        (
            "fencing-agent",
            "nodemgr-fencing-agent-own-node",
            "nodes",
            "UPDATE",
        ),
        ("early-oom", "nodemgr-early-oom-own-node", "pods", "DELETE"),
    ] {
        let ds = find(&docs, "DaemonSet", agent);
        let sa = ds["spec"]["template"]["spec"]["serviceAccountName"]
            .as_str()
            .unwrap();
        let ns = ds["metadata"]["namespace"].as_str().unwrap();
        let vap = find(&docs, "ValidatingAdmissionPolicy", policy);
        assert_eq!(vap["spec"]["failurePolicy"], "Fail", "{policy}");
        let rule = &vap["spec"]["matchConstraints"]["resourceRules"][0];
        assert_eq!(rule["resources"], serde_json::json!([resource]), "{policy}");
        assert_eq!(
            rule["operations"],
            serde_json::json!([operation]),
            "{policy}"
        );
        let condition = vap["spec"]["matchConditions"][0]["expression"]
            .as_str()
            .unwrap();
        assert!(
            condition.contains(&format!("'system:serviceaccount:{ns}:{sa}'")),
            "{policy} matches the agent's service account: {condition}"
        );
        let validations: String = vap["spec"]["validations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["expression"].as_str().unwrap().to_owned())
            .collect();
        assert!(
            validations
                .contains("request.userInfo.extra['authentication.kubernetes.io/node-name']"),
            "{policy} checks the token's node claim"
        );
        let binding = find(&docs, "ValidatingAdmissionPolicyBinding", policy);
        assert_eq!(binding["spec"]["policyName"], policy);
        assert_eq!(
            binding["spec"]["validationActions"],
            serde_json::json!(["Deny"])
        );
    }
    // What the policies cannot narrow is not granted at all.
    let early_oom = find(&docs, "ClusterRole", "nodemgr:early-oom");
    for rule in early_oom["rules"].as_array().unwrap() {
        assert!(
            !rule["resources"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r == "pods/eviction"),
            "early-oom may not evict: an eviction cannot be tied to a node by admission"
        );
    }
    let fencing = find(&docs, "ClusterRole", "nodemgr:fencing-agent");
    assert_eq!(
        fencing["rules"],
        serde_json::json!([{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}])
    );
}

#[test]
fn node_manager_may_read_exactly_the_cloud_secret_its_code_reads() {
    let docs = manifests();
    let mut granted = Vec::new();
    for (_, doc) in &docs {
        if doc["kind"] != "Role" {
            continue;
        }
        for rule in doc["rules"].as_array().unwrap() {
            if rule["resources"] == serde_json::json!(["secrets"]) {
                let Some(names) = rule["resourceNames"].as_array() else {
                    // The grants that cannot be narrowed by name (create and list never can):
                    // node-manager's bootstrap-token Secrets in kube-system (generated names);
                    // bashible-apiserver's TLS Secret (created when absent), the
                    // manual-bootstrap-for-<group> Secrets it keeps, and the bootstrap tokens it
                    // lists.
                    let role = (
                        doc["metadata"]["name"].as_str().unwrap(),
                        doc["metadata"]["namespace"].as_str().unwrap(),
                    );
                    assert!(
                        [
                            ("nodemgr:node-manager-bootstrap-tokens", "kube-system"),
                            ("nodemgr:bashible-apiserver", "nodemgr-system"),
                            (
                                "nodemgr:bashible-apiserver-secrets",
                                "d8-cloud-instance-manager"
                            ),
                            ("nodemgr:bashible-apiserver-bootstrap-tokens", "kube-system"),
                        ]
                        .contains(&role),
                        "secrets only by name, but for generated names: {role:?}"
                    );
                    continue;
                };
                for name in names {
                    granted.push(format!(
                        "{}/{}",
                        doc["metadata"]["namespace"].as_str().unwrap(),
                        name.as_str().unwrap()
                    ));
                }
            }
        }
    }
    let cloud = format!(
        "{}/{}",
        nodemgr_cloud::config::CLOUD_PROVIDER_SECRET_NAMESPACE,
        nodemgr_cloud::config::CLOUD_PROVIDER_SECRET
    );
    assert!(granted.contains(&cloud), "{cloud} not granted: {granted:?}");
}

#[test]
fn the_fencing_agents_timings_match_what_node_manager_derives_its_deadline_from() {
    let docs = manifests();
    let ds = find(&docs, "DaemonSet", "fencing-agent");
    let args = ds["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap();
    let stale = args
        .iter()
        .filter_map(Value::as_str)
        .find_map(|a| a.strip_prefix("--kubelet-stale-after="))
        .expect("the DaemonSet states --kubelet-stale-after");
    let default = nodemgr_core::fencing::FencingConfig::default()
        .agent
        .kubelet_stale_after;
    assert_eq!(
        nodemgr_core::model::parse_duration(stale),
        Some(default),
        "node-manager derives its deadline from a kubelet staleness of {default:?}"
    );
}
