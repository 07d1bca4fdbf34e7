//! NodeGroupConfigurations, NodeUsers and fenced groups, run for real into a temporary root:
//! a configuration for `["worker"]` reaches only worker's bundle and runs in weight order
//! among the built-in steps; NodeUsers appear in (and leave) the root's `/etc/passwd`; a fenced
//! group loads softdog and keeps a panicked node halted.
//!
//! The users step runs `useradd --prefix "$BB_ROOT"` in a test root, which needs root
//! privileges; without them the test checks that the step says so.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use nodemgr_core::bashible::node_user_report::node_user_errors;
use nodemgr_core::bashible::{
    BootstrapOptions, BootstrapToken, Bundle, ClusterContext, Customisations, RenderRoot, Renderer,
    configuration_counts,
};
use nodemgr_core::model::{
    Manifest, NodeGroup, NodeGroupConfiguration, NodeUser, parse_documents, parse_manifest,
    parse_node_group,
};

const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n";

fn cluster() -> ClusterContext {
    ClusterContext {
        api_endpoints: vec!["10.0.0.1:6443".into()],
        ca_cert: CA.into(),
        ..ClusterContext::default()
    }
}

fn group(name: &str, extra: &str) -> NodeGroup {
    parse_node_group(&format!(
        "apiVersion: deckhouse.io/v1\nkind: NodeGroup\nmetadata: {{name: {name}}}\nspec:\n  nodeType: Static\n{extra}"
    ))
    .unwrap()
}

fn customisations(yaml: &str) -> Customisations {
    let mut out = Customisations::default();
    for doc in parse_documents(yaml).unwrap() {
        match parse_manifest(doc.value).unwrap() {
            Manifest::NodeGroupConfiguration(c) => out.configurations.push(*c),
            Manifest::NodeUser(u) => out.users.push(*u),
            other => panic!("{other:?}"),
        }
    }
    out
}

fn ngc(name: &str, weight: i64, groups: &str, content: &str) -> String {
    format!(
        "---\napiVersion: deckhouse.io/v1alpha1\nkind: NodeGroupConfiguration\nmetadata: {{name: {name}}}\nspec:\n  weight: {weight}\n  nodeGroups: {groups}\n  content: {content:?}\n"
    )
}

fn run_steps(bundle: &Bundle, root: &Path) -> Output {
    let scripts = tempfile::tempdir().unwrap();
    let mut last = None;
    for step in &bundle.steps {
        let path: PathBuf = scripts.path().join(&step.name);
        std::fs::write(&path, &step.script).unwrap();
        let out = Command::new("bash")
            .arg(&path)
            .env("BB_ROOT", root)
            .output()
            .unwrap();
        if !out.status.success() {
            return out;
        }
        last = Some(out);
    }
    last.expect("a bundle has steps")
}

fn host_log(root: &Path) -> String {
    std::fs::read_to_string(root.join(".nodemgr-host-commands.log")).unwrap_or_default()
}

fn names(bundle: &Bundle) -> Vec<&str> {
    bundle.steps.iter().map(|s| s.name.as_str()).collect()
}

fn is_root() -> bool {
    let out = Command::new("id").arg("-u").output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim() == "0"
}

#[test]
fn a_configuration_for_worker_reaches_only_worker_in_weight_order() {
    let renderer = Renderer::new();
    let (worker, master) = (group("worker", ""), group("master", ""));
    let extra = customisations(
        &[
            ngc("late.sh", 200, "[worker]", "echo late"),
            ngc("early.sh", 5, "[worker]", "echo early"),
            ngc("between.sh", 25, "[worker]", "echo between"),
            ngc("default.sh", 100, "[worker]", "echo default"),
            ngc("master-only.sh", 100, "[master]", "echo master"),
        ]
        .concat(),
    );
    let bundle = renderer.bundle_with(&worker, &cluster(), &extra).unwrap();
    assert_eq!(
        names(&bundle),
        [
            "000_node_users.sh",
            "001_ca.sh",
            "005_early.sh",
            "010_os_settings.sh",
            "020_containerd.sh",
            "025_between.sh",
            "030_kubelet.sh",
            "090_cleanup_script.sh",
            "100_default.sh",
            "200_late.sh"
        ]
    );
    assert!(bundle.skipped.is_empty(), "{:?}", bundle.skipped);
    // The worker's checksum moved; the master's changed only by its own configuration.
    let plain_worker = renderer.bundle(&worker, &cluster()).unwrap();
    assert_ne!(plain_worker.checksum, bundle.checksum);
    let master_bundle = renderer.bundle_with(&master, &cluster(), &extra).unwrap();
    assert!(names(&master_bundle).contains(&"100_master-only.sh"));
    assert!(!names(&master_bundle).iter().any(|n| n.contains("early")));
    let without_worker_ones =
        customisations(&ngc("master-only.sh", 100, "[master]", "echo master"));
    assert_eq!(
        master_bundle.checksum,
        renderer
            .bundle_with(&master, &cluster(), &without_worker_ones)
            .unwrap()
            .checksum,
        "configurations for worker changed master's checksum"
    );
    assert_eq!(
        configuration_counts(&extra.configurations)
            .into_iter()
            .collect::<Vec<_>>(),
        vec![("master".to_owned(), 1), ("worker".to_owned(), 4)]
    );

    // Run into a root: the configurations run in weight order between the built-in steps'
    // host commands (early before sysctl, between after the containerd restart).
    let root = tempfile::tempdir().unwrap();
    let out = run_steps(&bundle, root.path());
    assert!(out.status.success(), "{out:?}");
    let log = host_log(root.path());
    let at = |needle: &str| {
        log.find(needle)
            .unwrap_or_else(|| panic!("{needle} missing from\n{log}"))
    };
    let early = at("bash /var/lib/bashible/configurations/005_early.sh");
    let sysctl = at("sysctl --system");
    let between = at("bash /var/lib/bashible/configurations/025_between.sh");
    let containerd = at("systemctl restart containerd");
    let default = at("bash /var/lib/bashible/configurations/100_default.sh");
    let late = at("bash /var/lib/bashible/configurations/200_late.sh");
    assert!(early < sysctl && containerd < between && between < default && default < late);
    assert!(!log.contains("master-only"));
    assert_eq!(
        std::fs::read_to_string(
            root.path()
                .join("var/lib/bashible/configurations/200_late.sh")
        )
        .unwrap(),
        "echo late"
    );
}

#[test]
fn an_invalid_configuration_is_skipped_and_reported_without_breaking_the_bundle() {
    let renderer = Renderer::new();
    let worker = group("worker", "");
    let extra = customisations(
        &[
            ngc("good.sh", 100, "[worker]", "echo good"),
            ngc("no-suffix", 100, "[worker]", "echo bad"),
            ngc("empty.sh", 100, "[\"*\"]", " "),
        ]
        .concat(),
    );
    let bundle = renderer.bundle_with(&worker, &cluster(), &extra).unwrap();
    assert!(names(&bundle).contains(&"100_good.sh"));
    let skipped: Vec<String> = bundle.skipped.iter().map(ToString::to_string).collect();
    assert_eq!(skipped.len(), 2, "{skipped:?}");
    assert!(skipped[0].contains("\"no-suffix\"") && skipped[0].contains("metadata.name"));
    assert!(skipped[1].contains("\"empty.sh\"") && skipped[1].contains("spec.content"));
    let only_good = customisations(&ngc("good.sh", 100, "[worker]", "echo good"));
    assert_eq!(
        bundle.checksum,
        renderer
            .bundle_with(&worker, &cluster(), &only_good)
            .unwrap()
            .checksum
    );
}

#[test]
fn a_configuration_for_other_os_bundles_is_skipped_on_the_node() {
    let renderer = Renderer::new();
    let worker = group("worker", "");
    let extra = customisations(
        "apiVersion: deckhouse.io/v1alpha1\nkind: NodeGroupConfiguration\nmetadata: {name: apt.sh}\nspec: {bundles: [debian], content: apt-get update}\n",
    );
    let bundle = renderer.bundle_with(&worker, &cluster(), &extra).unwrap();
    for (id, runs) in [("ubuntu", false), ("debian", true)] {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("etc")).unwrap();
        std::fs::write(root.path().join("etc/os-release"), format!("ID={id}\n")).unwrap();
        let out = run_steps(&bundle, root.path());
        assert!(out.status.success(), "{out:?}");
        assert_eq!(
            host_log(root.path()).contains("configurations/100_apt.sh"),
            runs,
            "{id}"
        );
    }
}

const USERS: &str = r#"
apiVersion: deckhouse.io/v1
kind: NodeUser
metadata: {name: ops}
spec:
  uid: 1001
  sshPublicKeys: ["ssh-ed25519 AAAAC3Nz ops@laptop", "ssh-rsa AAAAB3 ops@desk"]
  passwordHash: "$6$salt$hashhash"
  isSudoer: true
  extraGroups: [docker]
---
apiVersion: deckhouse.io/v1
kind: NodeUser
metadata: {name: guest}
spec:
  uid: 1002
  nodeGroups: [worker]
---
apiVersion: deckhouse.io/v1
kind: NodeUser
metadata: {name: masters-only}
spec:
  uid: 1003
  nodeGroups: [master]
"#;

fn users_step(bundle: &Bundle) -> &str {
    &bundle
        .steps
        .iter()
        .find(|s| s.name == "000_node_users.sh")
        .unwrap()
        .script
}

fn run_users_step(bundle: &Bundle, root: &Path) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("users.sh");
    std::fs::write(&path, users_step(bundle)).unwrap();
    Command::new("bash")
        .arg(&path)
        .env("BB_ROOT", root)
        .output()
        .unwrap()
}

fn read(root: &Path, path: &str) -> String {
    std::fs::read_to_string(root.join(path)).unwrap_or_default()
}

#[test]
fn node_users_appear_in_the_roots_passwd_and_leave_it_when_removed() {
    let renderer = Renderer::new();
    let worker = group("worker", "");
    let extra = customisations(USERS);
    let root = tempfile::tempdir().unwrap();
    let bundle = renderer.bundle_with(&worker, &cluster(), &extra).unwrap();
    if !is_root() {
        let out = run_users_step(&bundle, root.path());
        assert!(!out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("needs root"),
            "{out:?}"
        );
        return;
    }
    let out = run_steps(&bundle, root.path());
    assert!(out.status.success(), "{out:?}");
    let passwd = read(root.path(), "etc/passwd");
    assert!(passwd.contains("ops:x:1001:"), "{passwd}");
    assert!(passwd.contains("guest:x:1002:"), "{passwd}");
    assert!(!passwd.contains("masters-only"), "{passwd}");
    assert!(read(root.path(), "etc/shadow").contains("ops:$6$salt$hashhash:"));
    assert!(read(root.path(), "etc/shadow").contains("guest:!:"));
    assert!(read(root.path(), "etc/group").contains("docker:x:"));
    assert!(
        read(root.path(), "etc/group")
            .lines()
            .any(|l| l.starts_with("docker:") && l.ends_with(":ops"))
    );
    assert_eq!(
        read(root.path(), "home/ops/.ssh/authorized_keys"),
        "ssh-ed25519 AAAAC3Nz ops@laptop\nssh-rsa AAAAB3 ops@desk\n"
    );
    assert_eq!(
        read(root.path(), "etc/sudoers.d/90-nodemgr-node-users"),
        "# NodeUsers with isSudoer (managed by nodemgr).\nops ALL=(ALL:ALL) ALL\n"
    );
    assert_eq!(
        read(root.path(), "var/lib/bashible/node-users.created"),
        "guest\nops\n"
    );

    // Again: nothing to do, still fine.
    let out = run_users_step(&bundle, root.path());
    assert!(out.status.success(), "{out:?}");
    assert_eq!(read(root.path(), "etc/passwd"), passwd);

    // guest leaves the list: removed, home included; ops stays. A pre-existing user the step
    // did not create is never touched.
    std::fs::write(
        root.path().join("etc/passwd"),
        format!("{passwd}admin:x:1500:1500::/home/admin:/bin/bash\n"),
    )
    .unwrap();
    let mut fewer = extra.clone();
    fewer.users.retain(|u: &NodeUser| u.name() != "guest");
    let bundle = renderer.bundle_with(&worker, &cluster(), &fewer).unwrap();
    let out = run_users_step(&bundle, root.path());
    assert!(out.status.success(), "{out:?}");
    let passwd = read(root.path(), "etc/passwd");
    assert!(!passwd.contains("guest:"), "{passwd}");
    assert!(passwd.contains("ops:x:1001:") && passwd.contains("admin:x:1500:"));
    assert!(!root.path().join("home/guest").exists());
    assert_eq!(
        read(root.path(), "var/lib/bashible/node-users.created"),
        "ops\n"
    );

    // A NodeUser named like that pre-existing user, with another uid, is refused and reported
    // in the line the node agent reads; the others are still applied.
    let mut clash = fewer.clone();
    clash.users.extend(customisations(
        "apiVersion: deckhouse.io/v1\nkind: NodeUser\nmetadata: {name: admin}\nspec: {uid: 1600}\n",
    )
    .users);
    let bundle = renderer.bundle_with(&worker, &cluster(), &clash).unwrap();
    let out = run_users_step(&bundle, root.path());
    assert!(!out.status.success());
    let errors = node_user_errors(&String::from_utf8_lossy(&out.stderr));
    assert_eq!(errors.len(), 1, "{out:?}");
    assert_eq!(errors[0].user, "admin");
    assert!(
        errors[0].message.contains("uid 1500"),
        "{}",
        errors[0].message
    );
    assert!(read(root.path(), "etc/passwd").contains("admin:x:1500:"));

    // No NodeUser at all: the step removes every user it created.
    let bundle = renderer.bundle(&worker, &cluster()).unwrap();
    let out = run_users_step(&bundle, root.path());
    assert!(out.status.success(), "{out:?}");
    let passwd = read(root.path(), "etc/passwd");
    assert!(
        !passwd.contains("ops:") && passwd.contains("admin:x:1500:"),
        "{passwd}"
    );
    assert!(
        !root
            .path()
            .join("etc/sudoers.d/90-nodemgr-node-users")
            .exists()
    );
}

#[test]
fn a_fenced_group_loads_softdog_and_stays_halted_after_a_panic() {
    let renderer = Renderer::new();
    let fenced = group(
        "fenced",
        "  fencing: {mode: Watchdog, watchdog: {timeout: 45s}}\n",
    );
    let plain = group("plain", "");
    let root = tempfile::tempdir().unwrap();
    let rendered = renderer
        .render(
            &fenced,
            &cluster(),
            &BootstrapOptions {
                root: RenderRoot::new(root.path().to_str().unwrap()).unwrap(),
                bootstrap_token: BootstrapToken::new("abcdef.0123456789abcdef").unwrap(),
            },
        )
        .unwrap();
    let out = run_steps(&rendered.bundle, root.path());
    assert!(out.status.success(), "{out:?}");
    assert!(read(root.path(), "etc/sysctl.d/90-nodemgr.conf").contains("kernel.panic = 0\n"));
    assert_eq!(
        read(root.path(), "etc/modprobe.d/nodemgr-softdog.conf"),
        "options softdog soft_margin=45 soft_panic=1\n"
    );
    assert_eq!(
        read(root.path(), "etc/modules-load.d/nodemgr-softdog.conf"),
        "softdog\n"
    );
    assert!(host_log(root.path()).contains("modprobe softdog soft_margin=45 soft_panic=1"));

    // The group stops being fenced: the files go, kernel.panic is 10 again.
    let bundle = renderer.bundle(&plain, &cluster()).unwrap();
    let out = run_steps(&bundle, root.path());
    assert!(out.status.success(), "{out:?}");
    assert!(read(root.path(), "etc/sysctl.d/90-nodemgr.conf").contains("kernel.panic = 10\n"));
    assert!(
        !root
            .path()
            .join("etc/modprobe.d/nodemgr-softdog.conf")
            .exists()
    );
    assert!(!names(&bundle).contains(&"015_fencing_watchdog.sh"));
}

#[test]
fn configurations_parse_from_the_valid_fixture() {
    let extra = customisations(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/valid/node-customisations.yaml"),
        )
        .unwrap(),
    );
    let first: &NodeGroupConfiguration = &extra.configurations[0];
    assert_eq!(first.weight(), 50);
    assert_eq!(extra.users.len(), 2);
}
