//! Bashible scenarios: scripts rendered for sample groups pass `bash -n`, run for real into a
//! temporary root (twice, to show the steps are idempotent), the cleanup script undoes them,
//! hostile manifest values stay data, and the checksum follows exactly what a node runs.
//!
//! Every script here runs with `BB_ROOT` set to a fresh temporary directory: the scripts write
//! only below it and record host commands in `$BB_ROOT/.nodemgr-host-commands.log`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use nodemgr_core::bashible::{
    BootstrapOptions, BootstrapToken, ClusterContext, RenderError, RenderRoot, Renderer,
    desired_checksums,
};
use nodemgr_core::model::{NodeGroup, keys, parse_node_group};

const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n";
const TOKEN: &str = "abcdef.0123456789abcdef";

fn cluster() -> ClusterContext {
    ClusterContext {
        api_endpoints: vec!["10.0.0.1:6443".into(), "10.0.0.2:6443".into()],
        ca_cert: CA.into(),
        ..ClusterContext::default()
    }
}

fn group(yaml: &str) -> NodeGroup {
    parse_node_group(yaml).expect("sample group parses")
}

fn worker() -> NodeGroup {
    group(include_str!("fixtures/valid/static-with-instances.yaml"))
}

fn samples() -> Vec<NodeGroup> {
    vec![
        worker(),
        group(include_str!("fixtures/valid/cloud-static.yaml")),
        group(include_str!("fixtures/valid/v1alpha2-static.yaml")),
        group(
            r#"
apiVersion: deckhouse.io/v1
kind: NodeGroup
metadata: {name: gpu-v2}
spec:
  nodeType: Static
  cri: {type: ContainerdV2, containerdV2: {maxConcurrentDownloads: 7}}
  static: {internalNetworkCIDRs: ["192.168.10.0/24", "10.10.0.0/16"]}
  kubelet:
    rootDir: /data/kubelet/
    seccompDefault: true
    resourceReservation: {mode: Static, static: {cpu: 500m, memory: 1Gi, ephemeralStorage: 5Gi}}
    topologyManager: {enabled: true, policy: SingleNumaNode, scope: Pod}
    memorySwap: {swapBehavior: LimitedSwap, swappiness: 10, limitedSwap: {size: 4G}}
  nodeTemplate:
    labels: {node-role.kubernetes.io/gpu: "", tier: gpu}
    taints:
      - {key: dedicated, value: gpu, effect: NoSchedule}
"#,
        ),
        group(
            r#"
apiVersion: deckhouse.io/v1
kind: NodeGroup
metadata: {name: byo-runtime}
spec:
  nodeType: Static
  cri: {type: NotManaged, notManaged: {criSocketPath: /run/crio/crio.sock}}
  kubelet: {resourceReservation: {mode: "Off"}}
"#,
        ),
    ]
}

fn options(root: &Path) -> BootstrapOptions {
    BootstrapOptions {
        root: RenderRoot::new(root.to_str().expect("utf-8 temp path")).expect("absolute root"),
        bootstrap_token: BootstrapToken::new(TOKEN).expect("valid token"),
    }
}

fn bash(args: &[&str], root: Option<&Path>, script: &Path) -> Output {
    let mut cmd = Command::new("bash");
    cmd.arg(script).args(args);
    cmd.env_remove("BB_ROOT");
    if let Some(root) = root {
        cmd.env("BB_ROOT", root);
    }
    cmd.env("BB_NODE_NAME", "static-0");
    cmd.output().expect("bash runs")
}

fn write_script(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("script written");
    path
}

fn syntax_ok(text: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = write_script(dir.path(), "script.sh", text);
    let out = Command::new("bash")
        .arg("-n")
        .arg(&path)
        .output()
        .expect("bash runs");
    assert!(
        out.status.success(),
        "bash -n failed: {}\n--- script ---\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn host_log(root: &Path) -> String {
    std::fs::read_to_string(root.join(".nodemgr-host-commands.log")).unwrap_or_default()
}

fn read(root: &Path, path: &str) -> String {
    std::fs::read_to_string(root.join(path.trim_start_matches('/')))
        .unwrap_or_else(|e| panic!("{path} under the root: {e}"))
}

/// Every file below `dir`, with its content (for before/after comparisons).
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.insert(
                    path.strip_prefix(dir).unwrap().to_path_buf(),
                    std::fs::read(&path).unwrap(),
                );
            }
        }
    }
    out
}

#[test]
fn every_rendered_script_of_every_sample_passes_bash_n() {
    let renderer = Renderer::new();
    let root = tempfile::tempdir().unwrap();
    for g in samples() {
        let rendered = renderer
            .render(&g, &cluster(), &options(root.path()))
            .unwrap_or_else(|e| panic!("{}: {e}", g.name()));
        for step in &rendered.bundle.steps {
            syntax_ok(&step.script);
        }
        syntax_ok(&rendered.bootstrap_script);
        syntax_ok(&rendered.cleanup_script);
        let host = renderer
            .render(
                &g,
                &cluster(),
                &BootstrapOptions {
                    root: RenderRoot::host(),
                    bootstrap_token: BootstrapToken::new(TOKEN).unwrap(),
                },
            )
            .unwrap();
        syntax_ok(&host.bootstrap_script);
        // The steps and the checksum do not depend on the root.
        assert_eq!(host.bundle, rendered.bundle);
    }
}

#[test]
fn steps_refuse_to_run_without_a_root() {
    let renderer = Renderer::new();
    let bundle = renderer.bundle(&worker(), &cluster()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let step = write_script(dir.path(), "step.sh", &bundle.steps[0].script);
    let out = bash(&[], None, &step);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("BB_ROOT must be set"),
        "{out:?}"
    );
}

#[test]
fn bootstrap_runs_into_a_test_root_and_is_idempotent() {
    let renderer = Renderer::new();
    let root = tempfile::tempdir().unwrap();
    let scripts = tempfile::tempdir().unwrap();
    // A fake /proc with a 4-core, 16 GiB machine and an active swap, and an fstab with swap.
    std::fs::create_dir_all(root.path().join("proc")).unwrap();
    std::fs::write(
        root.path().join("proc/cpuinfo"),
        "processor\t: 0\nprocessor\t: 1\nprocessor\t: 2\nprocessor\t: 3\n",
    )
    .unwrap();
    std::fs::write(
        root.path().join("proc/meminfo"),
        "MemTotal:       16777216 kB\n",
    )
    .unwrap();
    std::fs::write(
        root.path().join("proc/swaps"),
        "Filename Type Size Used Priority\n/swap.img file 1 0 -2\n",
    )
    .unwrap();
    std::fs::create_dir_all(root.path().join("etc")).unwrap();
    std::fs::write(
        root.path().join("etc/fstab"),
        "UUID=1 / ext4 defaults 0 1\n/swap.img none swap sw 0 0\n",
    )
    .unwrap();

    let rendered = renderer
        .render(&worker(), &cluster(), &options(root.path()))
        .unwrap();
    let bootstrap = write_script(scripts.path(), "bootstrap.sh", &rendered.bootstrap_script);
    let out = bash(&[], None, &bootstrap);
    assert!(
        out.status.success(),
        "bootstrap failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The node's configuration landed under the root.
    let kubelet: serde_json::Value =
        serde_json::from_str(&read(root.path(), "/etc/kubernetes/kubelet-config.yaml")).unwrap();
    assert_eq!(kubelet["maxPods"], 150);
    assert_eq!(kubelet["containerLogMaxSize"], "100Mi");
    assert_eq!(kubelet["containerLogMaxFiles"], 5);
    assert_eq!(kubelet["failSwapOn"], true);
    // The serving certificate is asked for with a CSR (approved by node-manager).
    assert_eq!(kubelet["serverTLSBootstrap"], true);
    assert_eq!(kubelet["rotateCertificates"], true);
    assert_eq!(
        kubelet["containerRuntimeEndpoint"],
        "unix:///run/containerd/containerd.sock"
    );
    let containerd = read(root.path(), "/etc/containerd/config.toml");
    assert!(
        containerd.contains("max_concurrent_downloads = 3"),
        "{containerd}"
    );
    assert!(containerd.contains("version = 2"));
    assert_eq!(read(root.path(), "/etc/kubernetes/pki/ca.crt"), CA);
    assert!(read(root.path(), "/etc/sysctl.d/90-nodemgr.conf").contains("vm.swappiness = 60"));
    let unit = read(root.path(), "/etc/systemd/system/kubelet.service");
    assert!(unit.contains("--root-dir=/var/lib/kubelet "), "{unit}");
    // resourceReservation Auto from the fake /proc: 60+10+5+5 = 80m CPU; memory
    // 25% of 4096 + 20% of 4096 + 10% of 8192 = 1024 + 819 + 819 = 2662 Mi.
    let reservation = read(
        root.path(),
        "/etc/kubernetes/kubelet-config.d/10-nodemgr-reservation.conf",
    );
    let reservation: serde_json::Value = serde_json::from_str(&reservation).unwrap();
    assert_eq!(reservation["systemReserved"]["cpu"], "80m");
    assert_eq!(reservation["systemReserved"]["memory"], "2662Mi");
    // Registration labels and taints, and the join kubeconfig against the first endpoint.
    let registration = read(root.path(), "/var/lib/bashible/kubelet-registration.env");
    assert_eq!(
        registration,
        "KUBELET_REGISTRATION_ARGS=--node-labels=example.com/team=payments,\
         node.deckhouse.io/group=worker,node.deckhouse.io/type=Static\n"
    );
    let kubeconfig: serde_json::Value =
        serde_json::from_str(&read(root.path(), "/etc/kubernetes/bootstrap-kubelet.conf")).unwrap();
    assert_eq!(
        kubeconfig["clusters"][0]["cluster"]["server"],
        "https://10.0.0.1:6443"
    );
    assert_eq!(kubeconfig["users"][0]["user"]["token"], TOKEN);
    // Swap went off, now and at boot.
    assert!(read(root.path(), "/etc/fstab").contains("# disabled by nodemgr: /swap.img none swap"));
    // The checksum is on disk and reported on the Node, the token is gone, cleanup is installed.
    assert_eq!(
        read(root.path(), "/var/lib/bashible/configuration_checksum"),
        rendered.bundle.checksum
    );
    assert!(
        !root
            .path()
            .join("var/lib/bashible/bootstrap-token")
            .exists()
    );
    let cleanup = root.path().join("var/lib/bashible/cleanup_static_node.sh");
    assert!(cleanup.exists());
    let log = host_log(root.path());
    let annotate = format!(
        "kubectl --kubeconfig /etc/kubernetes/kubelet.conf annotate --overwrite node static-0 {}={}",
        keys::ANNOTATION_CONFIGURATION_CHECKSUM,
        rendered.bundle.checksum
    );
    assert!(log.contains(&annotate), "{log}");
    for command in [
        "modprobe br_netfilter",
        "sysctl --system",
        "swapoff -a",
        "systemctl restart containerd",
        "systemctl enable --now kubelet",
    ] {
        assert!(log.contains(command), "{command} missing from\n{log}");
    }

    // Running the steps again changes nothing and restarts nothing.
    std::fs::write(
        root.path().join("proc/swaps"),
        "Filename Type Size Used Priority\n",
    )
    .unwrap();
    let before = snapshot(root.path());
    for step in &rendered.bundle.steps {
        let path = write_script(scripts.path(), &step.name, &step.script);
        let out = bash(&[], Some(root.path()), &path);
        assert!(out.status.success(), "{}: {out:?}", step.name);
    }
    assert_eq!(snapshot(root.path()), before, "a second run changed files");

    // The installed cleanup script refuses without the confirmation, then removes everything.
    let out = bash(&[], None, &cleanup);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(root.path().join("etc/kubernetes").exists());
    let out = bash(&[keys::CLEANUP_SCRIPT_CONFIRMATION], None, &cleanup);
    assert!(out.status.success(), "cleanup failed: {out:?}");
    for gone in [
        "etc/kubernetes",
        "var/lib/kubelet",
        "var/lib/bashible",
        "etc/containerd",
        "etc/systemd/system/kubelet.service",
        "etc/sysctl.d/90-nodemgr.conf",
    ] {
        assert!(!root.path().join(gone).exists(), "{gone} survived cleanup");
    }
    assert!(host_log(root.path()).contains("systemctl disable --now kubelet"));
}

#[test]
fn limited_swap_topology_static_reservation_and_node_ip() {
    let renderer = Renderer::new();
    let root = tempfile::tempdir().unwrap();
    let scripts = tempfile::tempdir().unwrap();
    std::fs::write(
        root.path().join(".nodemgr-test-ipv4-addresses"),
        "172.17.0.5\n10.10.3.4\n192.168.10.7\n",
    )
    .unwrap();
    let g = samples()
        .into_iter()
        .find(|g| g.name() == "gpu-v2")
        .unwrap();
    let rendered = renderer
        .render(&g, &cluster(), &options(root.path()))
        .unwrap();
    let bootstrap = write_script(scripts.path(), "bootstrap.sh", &rendered.bootstrap_script);
    let out = bash(&[], None, &bootstrap);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let kubelet: serde_json::Value =
        serde_json::from_str(&read(root.path(), "/etc/kubernetes/kubelet-config.yaml")).unwrap();
    assert_eq!(kubelet["failSwapOn"], false);
    assert_eq!(kubelet["memorySwap"]["swapBehavior"], "LimitedSwap");
    assert_eq!(kubelet["cpuManagerPolicy"], "static");
    assert_eq!(kubelet["topologyManagerPolicy"], "single-numa-node");
    assert_eq!(kubelet["topologyManagerScope"], "pod");
    assert_eq!(kubelet["seccompDefault"], true);
    assert_eq!(
        kubelet["systemReserved"],
        serde_json::json!({"cpu": "500m", "memory": "1Gi", "ephemeral-storage": "5Gi"})
    );
    assert!(
        !root
            .path()
            .join("etc/kubernetes/kubelet-config.d/10-nodemgr-reservation.conf")
            .exists()
    );
    // The first address (in host order) inside one of the CIDRs.
    assert_eq!(
        read(root.path(), "/var/lib/bashible/kubelet-node-ip.env"),
        "KUBELET_NODE_IP_ARGS=--node-ip=10.10.3.4\n"
    );
    assert!(root.path().join("data/kubelet").is_dir());
    assert!(read(root.path(), "/etc/containerd/config.toml").contains("version = 3"));
    assert!(read(root.path(), "/etc/sysctl.d/90-nodemgr.conf").contains("vm.swappiness = 10"));
    let log = host_log(root.path());
    assert!(
        log.contains("fallocate -l 4G /var/lib/bashible/swapfile"),
        "{log}"
    );
    let registration = read(root.path(), "/var/lib/bashible/kubelet-registration.env");
    // node-role.kubernetes.io/* is left to the controller: the kubelet may not set it.
    assert_eq!(
        registration,
        "KUBELET_REGISTRATION_ARGS=--node-labels=node.deckhouse.io/group=gpu-v2,\
         node.deckhouse.io/type=Static,tier=gpu --register-with-taints=dedicated=gpu:NoSchedule\n"
    );
    assert_eq!(
        rendered.bundle.registration.deferred_labels,
        vec!["node-role.kubernetes.io/gpu".to_owned()]
    );

    // No address in the CIDRs: the kubelet step says what to fix.
    std::fs::write(
        root.path().join(".nodemgr-test-ipv4-addresses"),
        "172.17.0.5\n",
    )
    .unwrap();
    let kubelet_step = rendered
        .bundle
        .steps
        .iter()
        .find(|s| s.name == "030_kubelet.sh")
        .unwrap();
    let path = write_script(scripts.path(), "kubelet.sh", &kubelet_step.script);
    let out = bash(&[], Some(root.path()), &path);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("static.internalNetworkCIDRs"),
        "{out:?}"
    );
}

#[test]
fn not_managed_cri_has_no_containerd_step_and_uses_its_socket() {
    let renderer = Renderer::new();
    let g = samples()
        .into_iter()
        .find(|g| g.name() == "byo-runtime")
        .unwrap();
    let bundle = renderer.bundle(&g, &cluster()).unwrap();
    let names: Vec<&str> = bundle.steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "000_node_users.sh",
            "001_ca.sh",
            "010_os_settings.sh",
            "030_kubelet.sh",
            "090_cleanup_script.sh"
        ]
    );
    let kubelet = &bundle.steps[3].script;
    assert!(kubelet.contains("unix:///run/crio/crio.sock"));
    assert!(!kubelet.contains("systemReserved"));
}

/// Values an attacker could put into a manifest: each must stay data in every script.
const HOSTILE: &[&str] = &[
    "$(touch PWNED)",
    "`touch PWNED`",
    "'; touch PWNED; '",
    "\"; touch PWNED; \"",
    "\n touch PWNED \n",
    "50Mi\"\n}\n$(touch PWNED)",
];

#[test]
fn hostile_values_are_refused_or_stay_data() {
    let renderer = Renderer::new();
    for hostile in HOSTILE {
        // rootDir, labels and taints land in kubelet flags: refused with the field's name.
        let mut g = worker();
        g.spec.kubelet.get_or_insert_default().root_dir = Some(format!("/var/lib/{hostile}"));
        match renderer.bundle(&g, &cluster()) {
            Err(RenderError::Field { field, .. }) => assert_eq!(field, "spec.kubelet.rootDir"),
            other => panic!("rootDir {hostile:?} accepted: {other:?}"),
        }
        let mut g = worker();
        g.spec
            .node_template
            .get_or_insert_default()
            .labels
            .get_or_insert_default()
            .insert("team".into(), (*hostile).to_owned());
        match renderer.bundle(&g, &cluster()) {
            Err(RenderError::Field { field, .. }) => {
                assert_eq!(field, "spec.nodeTemplate.labels[\"team\"]")
            }
            other => panic!("label {hostile:?} accepted: {other:?}"),
        }
        // The quantity is checked too.
        let mut g = worker();
        g.spec
            .kubelet
            .get_or_insert_default()
            .container_log_max_size = Some((*hostile).into());
        assert!(matches!(
            renderer.bundle(&g, &cluster()),
            Err(RenderError::Field { .. })
        ));
    }
}

#[test]
fn hostile_cluster_values_and_versions_stay_data_when_run() {
    // Values that are only ever JSON/TOML/shell-escaped: a hostile CA body, sandbox image,
    // cluster domain and Kubernetes version of a group. They must reach the files verbatim and
    // never run.
    let renderer = Renderer::new();
    for hostile in HOSTILE {
        let root = tempfile::tempdir().unwrap();
        let scripts = tempfile::tempdir().unwrap();
        let mut cluster = cluster();
        cluster.ca_cert =
            format!("-----BEGIN CERTIFICATE-----\n{hostile}\n-----END CERTIFICATE-----\n");
        cluster.sandbox_image = format!("pause{hostile}");
        cluster.cluster_domain = format!("cluster{hostile}");
        let rendered = renderer
            .render(&worker(), &cluster, &options(root.path()))
            .unwrap();
        for step in &rendered.bundle.steps {
            syntax_ok(&step.script);
        }
        syntax_ok(&rendered.bootstrap_script);
        let bootstrap = write_script(scripts.path(), "bootstrap.sh", &rendered.bootstrap_script);
        let out = Command::new("bash")
            .arg(&bootstrap)
            .current_dir(scripts.path())
            .env("BB_NODE_NAME", "n")
            .output()
            .unwrap();
        assert!(out.status.success(), "{hostile:?}: {out:?}");
        assert!(!scripts.path().join("PWNED").exists(), "{hostile:?} ran");
        assert!(!root.path().join("PWNED").exists(), "{hostile:?} ran");
        assert_eq!(
            read(root.path(), "/etc/kubernetes/pki/ca.crt"),
            cluster.ca_cert
        );
        let kubelet: serde_json::Value =
            serde_json::from_str(&read(root.path(), "/etc/kubernetes/kubelet-config.yaml"))
                .unwrap();
        assert_eq!(kubelet["clusterDomain"], cluster.cluster_domain.as_str());
        let containerd = read(root.path(), "/etc/containerd/config.toml");
        assert!(
            containerd.contains("sandbox_image = \"pause"),
            "{containerd}"
        );
    }
    // A version that is not a version is refused, naming the field.
    let mut g = worker();
    g.spec.kubernetes_version = Some("1.33$(touch PWNED)".into());
    assert!(matches!(
        renderer.bundle(&g, &cluster()),
        Err(RenderError::Field { field, .. }) if field == "spec.kubernetesVersion"
    ));
}

#[test]
fn clear_errors_for_missing_cluster_settings_docker_and_bad_tokens() {
    let renderer = Renderer::new();
    let err = renderer
        .bundle(&worker(), &ClusterContext::default())
        .unwrap_err();
    assert!(err.to_string().contains("apiEndpoints"), "{err}");
    let mut no_ca = cluster();
    no_ca.ca_cert = String::new();
    assert!(
        renderer
            .bundle(&worker(), &no_ca)
            .unwrap_err()
            .to_string()
            .contains("caCert")
    );
    let mut docker = worker();
    docker.spec.cri = Some(nodemgr_core::model::Cri {
        type_: Some(nodemgr_core::model::CriType::Docker),
        ..Default::default()
    });
    assert!(
        renderer
            .bundle(&docker, &cluster())
            .unwrap_err()
            .to_string()
            .contains("Docker is not supported")
    );
    for bad in [
        "",
        "abcdef",
        "ABCDEF.0123456789abcdef",
        "abcdef.0123456789abcde",
        "abc$ef.0123456789abcdef",
    ] {
        assert!(BootstrapToken::new(bad).is_err(), "{bad:?}");
    }
    assert!(!format!("{:?}", BootstrapToken::new(TOKEN).unwrap()).contains("0123456789abcdef"));
    assert!(RenderRoot::new("relative").is_err());
    assert!(RenderRoot::new("/tmp/../etc").is_err());
    assert!(RenderRoot::new("/").unwrap().is_host());
}

#[test]
fn desired_checksums_feed_the_update_planner() {
    let renderer = Renderer::new();
    let mut groups = samples();
    let mut broken = worker();
    broken.metadata.name = Some("broken".into());
    broken.spec.kubelet.get_or_insert_default().root_dir = Some("relative".into());
    groups.push(broken);
    let desired = desired_checksums(&renderer, &groups, &cluster());
    assert_eq!(desired.checksums.len(), samples().len());
    assert_eq!(desired.errors.len(), 1);
    assert_eq!(desired.errors[0].0, "broken");
    for g in samples() {
        assert_eq!(
            desired.checksums[g.name()],
            renderer.bundle(&g, &cluster()).unwrap().checksum
        );
    }
}

/// The checksum a bootstrapped node reports is the one the update planner compares: the
/// node is up to date until the group changes something the node runs.
#[test]
fn the_bootstrapped_node_reports_the_checksum_the_update_planner_wants() {
    use nodemgr_core::model::Node;
    use nodemgr_core::update::{NodeUpdateStatus, node_update_status};

    let renderer = Renderer::new();
    let root = tempfile::tempdir().unwrap();
    let scripts = tempfile::tempdir().unwrap();
    let g = worker();
    let rendered = renderer
        .render(&g, &cluster(), &options(root.path()))
        .unwrap();
    let bootstrap = write_script(scripts.path(), "bootstrap.sh", &rendered.bootstrap_script);
    assert!(bash(&[], None, &bootstrap).status.success());

    // What the node annotated itself with, read back from the recorded kubectl command.
    let prefix = format!("{}=", keys::ANNOTATION_CONFIGURATION_CHECKSUM);
    let reported = host_log(root.path())
        .lines()
        .find(|l| l.contains("annotate"))
        .and_then(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix(prefix.as_str()))
        })
        .expect("annotate command recorded")
        .to_owned();
    let mut node = Node {
        name: "static-0".into(),
        ready: true,
        ..Node::default()
    };
    node.labels
        .insert(keys::LABEL_NODE_GROUP.into(), g.name().into());
    node.annotations
        .insert(keys::ANNOTATION_CONFIGURATION_CHECKSUM.into(), reported);

    let desired = desired_checksums(&renderer, std::slice::from_ref(&g), &cluster());
    assert_eq!(
        node_update_status(&g, &node, &desired.checksums[g.name()]),
        NodeUpdateStatus::UpToDate
    );
    // A nodeTemplate change keeps the node up to date; a kubelet change does not.
    let mut relabelled = g.clone();
    relabelled
        .spec
        .node_template
        .get_or_insert_default()
        .labels
        .get_or_insert_default()
        .insert("extra".into(), "yes".into());
    let desired = desired_checksums(&renderer, std::slice::from_ref(&relabelled), &cluster());
    assert_eq!(
        node_update_status(&relabelled, &node, &desired.checksums[g.name()]),
        NodeUpdateStatus::UpToDate
    );
    let mut more_pods = g.clone();
    more_pods.spec.kubelet.get_or_insert_default().max_pods = Some(200);
    let desired = desired_checksums(&renderer, std::slice::from_ref(&more_pods), &cluster());
    assert_eq!(
        node_update_status(&more_pods, &node, &desired.checksums[g.name()]),
        NodeUpdateStatus::ToBeUpdated
    );
}
