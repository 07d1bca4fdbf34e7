//! Runs the built `nodemgr` binary on the fixtures of `nodemgr-core/tests/fixtures`: valid
//! files exit 0 with no output, invalid ones exit 1 with one `FILE:DOC: PATH: message` line per
//! declared `# expect:` path, and unreadable input (missing, not UTF-8, not YAML) exits 2.

// Test helpers outside `#[test]` functions fail loudly on broken fixtures.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixtures(kind: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../nodemgr-core/tests/fixtures")
        .join(kind);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty());
    files
}

fn nodemgr(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nodemgr"))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

fn validate(files: &[PathBuf]) -> Output {
    let mut args: Vec<&std::ffi::OsStr> = vec!["validate".as_ref()];
    args.extend(files.iter().map(|f| f.as_os_str()));
    nodemgr(&args)
}

/// `FILE:DOC: PATH` for each `# expect:` line, numbering non-empty documents as the YAML
/// parser does (the fixtures have no empty documents).
fn expected_prefixes(file: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(file).unwrap();
    let mut out = BTreeSet::new();
    let mut doc = 0;
    let mut content = false;
    let mut pending = Vec::new();
    for line in text.lines().chain(std::iter::once("---")) {
        if line.trim_end() == "---" {
            if content {
                for p in pending.drain(..) {
                    out.insert(format!("{}:{doc}: {p}", file.display()));
                }
                doc += 1;
            }
            content = false;
        } else if let Some(p) = line.trim_start().strip_prefix("# expect:") {
            pending.push(p.trim().to_owned());
        } else if !line.trim().is_empty() && !line.trim_start().starts_with('#') {
            content = true;
        }
    }
    out
}

#[test]
fn valid_fixtures_exit_zero_silently() {
    let files = fixtures("valid");
    let out = validate(&files);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        stderr.contains(&format!("in {} files: 0 invalid", files.len())),
        "{stderr}"
    );
}

#[test]
fn each_invalid_fixture_exits_one_with_its_expected_lines() {
    for file in fixtures("invalid") {
        let out = validate(std::slice::from_ref(&file));
        let stdout = String::from_utf8(out.stdout).unwrap();
        assert_eq!(out.status.code(), Some(1), "{}: {stdout}", file.display());
        let got: BTreeSet<String> = stdout
            .lines()
            .map(|l| {
                // FILE:DOC: PATH: message -> FILE:DOC: PATH
                let (head, rest) = l.split_once(": ").unwrap();
                let path = rest.split_once(": ").map_or(rest, |(p, _)| p);
                format!("{head}: {path}")
            })
            .collect();
        assert_eq!(got, expected_prefixes(&file), "{}", file.display());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("in 1 files:"), "{stderr}");
        assert!(!stderr.contains(": 0 invalid"), "{stderr}");
    }
}

#[test]
fn all_invalid_fixtures_together_are_counted() {
    let files = fixtures("invalid");
    let out = validate(&files);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("in {} files:", files.len())),
        "{stderr}"
    );
}

#[test]
fn missing_file_exits_two_and_names_it() {
    let missing = Path::new(env!("CARGO_MANIFEST_DIR")).join("no-such-manifest.yaml");
    let out = validate(std::slice::from_ref(&missing));
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no-such-manifest.yaml"), "{stderr}");
    assert!(stderr.contains("check that the path exists"), "{stderr}");
}

#[test]
fn garbage_exits_two_even_next_to_valid_files() {
    let dir = std::env::temp_dir().join(format!("nodemgr-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let not_yaml = dir.join("broken.yaml");
    std::fs::write(&not_yaml, "apiVersion: deckhouse.io/v1\nkind: [NodeGroup\n").unwrap();
    let not_utf8 = dir.join("binary.yaml");
    std::fs::write(&not_utf8, [0x61, 0x3a, 0x20, 0xff, 0xfe, 0x0a]).unwrap();
    let mut files = fixtures("valid");
    files.push(not_yaml);
    files.push(not_utf8);
    let out = validate(&files);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("broken.yaml is not valid YAML"), "{stderr}");
    assert!(stderr.contains("binary.yaml is not UTF-8"), "{stderr}");
    assert!(stderr.contains("2 unreadable"), "{stderr}");
}

#[test]
fn no_files_is_a_usage_error() {
    let out = nodemgr(&["validate".as_ref()]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_huge_cluster_prefix_len_is_refused_naming_the_flag() {
    let file = &fixtures("valid")[0];
    for huge in [
        "64",
        "18446744073709551615",
        "99999999999999999999999999",
        "-1",
    ] {
        let flag = format!("--cluster-prefix-len={huge}");
        let out = nodemgr(&["validate".as_ref(), flag.as_ref(), file.as_os_str()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{huge}: {stderr}");
        assert!(stderr.contains("--cluster-prefix-len"), "{huge}: {stderr}");
        assert!(!stderr.contains("panicked"), "{huge}: {stderr}");
    }
    // The largest prefix accepted still validates (and a long name is reported, not wrapped).
    let out = nodemgr(&[
        "validate".as_ref(),
        "--cluster-prefix-len=63".as_ref(),
        file.as_os_str(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn node_group_configurations_and_node_users_are_checked_with_field_paths() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("custom.yaml");
    std::fs::write(
        &file,
        "apiVersion: deckhouse.io/v1alpha1\nkind: NodeGroupConfiguration\nmetadata: {name: add-ca}\n\
         spec: {content: \"\", weight: 5000, nodeGroups: [\"No Such\"]}\n\
         ---\napiVersion: deckhouse.io/v1\nkind: NodeUser\nmetadata: {name: ops}\nspec: {uid: 42}\n\
         ---\napiVersion: deckhouse.io/v1alpha1\nkind: NodeUser\nmetadata: {name: fine}\nspec: {uid: 1001}\n",
    )
    .unwrap();
    let out = validate(std::slice::from_ref(&file));
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let prefix = file.display().to_string();
    for line in [
        ":0: metadata.name: \"add-ca\" does not end in .sh",
        ":0: spec.content: is empty",
        ":0: spec.weight: 5000 is out of range; must be 0..999",
        ":0: spec.nodeGroups[0]:",
        ":1: spec.uid: 42 is out of range; must be 1001..",
    ] {
        assert!(
            stdout.contains(&format!("{prefix}{line}")),
            "missing {line:?} in:\n{stdout}"
        );
    }
    assert!(!stdout.contains(":2:"), "{stdout}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("3 documents in 1 files: 2 invalid"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn typos_are_unknown_fields_with_the_closest_known_name() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("typos.yaml");
    std::fs::write(
        &file,
        "apiVersion: deckhouse.io/v1\nkind: NodeGroup\nmetadata: {name: w}\nspec:\n  nodeType: Static\n  update: {maxConcurent: 2}\n  nodeTemplate:\n    lables: {a: b}\n---\napiVersion: deckhouse.io/v1alpha2\nkind: SSHCredentials\nmetadata: {name: c}\nspec: {user: root, privateSSHKey: eA==, sshPrt: 22}\n",
    )
    .unwrap();
    let out = validate(std::slice::from_ref(&file));
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for line in [
        ":0: spec.update.maxConcurent: unknown field \"maxConcurent\"; did you mean maxConcurrent?",
        ":0: spec.nodeTemplate.lables: unknown field \"lables\"; did you mean labels?",
        ":1: spec.sshPrt: unknown field \"sshPrt\"; did you mean sshPort?",
    ] {
        assert!(stdout.contains(line), "missing {line:?} in:\n{stdout}");
    }
}

#[test]
fn other_kinds_are_skipped_and_refused_with_strict() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mixed.yaml");
    std::fs::write(
        &file,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n---\napiVersion: deckhouse.io/v1\nkind: NodeGroup\nmetadata: {name: w}\nspec: {nodeType: Static}\n",
    )
    .unwrap();
    let out = validate(std::slice::from_ref(&file));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(":0: skipped: ConfigMap (v1) is not a kind nodemgr validates"),
        "{stderr}"
    );
    assert!(
        stderr.contains("2 documents in 1 files: 0 invalid, 1 skipped"),
        "{stderr}"
    );
    let out = nodemgr(&["validate".as_ref(), "--strict".as_ref(), file.as_os_str()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(":0: kind: ConfigMap (v1) is not a kind"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn control_and_bidirectional_characters_in_messages_are_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bidi.yaml");
    std::fs::write(
        &file,
        "apiVersion: deckhouse.io/v1\nkind: NodeGroup\nmetadata: {name: w}\nspec:\n  nodeType: \"Stat\u{202E}ic\\e[2J\"\n",
    )
    .unwrap();
    let out = validate(std::slice::from_ref(&file));
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        !stdout.contains('\u{202E}') && !stdout.contains('\u{1b}'),
        "{stdout:?}"
    );
    assert!(stdout.to_lowercase().contains("\\u{202e}"), "{stdout}");
}

#[test]
fn an_old_hybrid_group_is_validated_with_the_provider_cluster_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("hybrid.yaml");
    // Valid as CloudStatic (what `Hybrid` becomes without the provider configuration), not as
    // CloudPermanent (what it becomes for a group the provider configuration names).
    std::fs::write(
        &file,
        "apiVersion: deckhouse.io/v1alpha2\nkind: NodeGroup\nmetadata: {name: front}\nspec:\n  nodeType: Hybrid\n  staticInstances: {count: 1}\n",
    )
    .unwrap();
    let out = validate(std::slice::from_ref(&file));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let provider = dir.path().join("provider.yaml");
    std::fs::write(
        &provider,
        "apiVersion: deckhouse.io/v1\nkind: OpenStackClusterConfiguration\nnodeGroups:\n- name: front\n",
    )
    .unwrap();
    let with = |provider: &Path| {
        nodemgr(&[
            "validate".as_ref(),
            "--provider-cluster-configuration".as_ref(),
            provider.as_os_str(),
            file.as_os_str(),
        ])
    };
    let out = with(&provider);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "{}:0: spec.staticInstances: not allowed for nodeType CloudPermanent",
            file.display()
        )),
        "{stdout}"
    );
    // A provider configuration naming other groups changes nothing.
    let others = dir.path().join("others.yaml");
    std::fs::write(
        &others,
        "apiVersion: deckhouse.io/v1\nkind: OpenStackClusterConfiguration\nnodeGroups:\n- name: back\n",
    )
    .unwrap();
    assert_eq!(with(&others).status.code(), Some(0));
    // One that cannot be read: exit 2, naming the flag; nothing validated.
    let out = with(&dir.path().join("missing.yaml"));
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--provider-cluster-configuration") && stderr.contains("missing.yaml"),
        "{stderr}"
    );
}
