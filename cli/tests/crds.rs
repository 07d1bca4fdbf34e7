//! `nodemgr crds` end to end: the YAML stream holds the six CRDs with their versions and parses
//! back, and the JSON output is one `List` of the same definitions; the chart's and `deploy/`'s
//! copies are what it prints.

#![allow(clippy::unwrap_used)] // test helpers: a failed setup step should panic

use std::process::Command;

use serde_json::Value;

fn crds(output: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_nodemgr"))
        .args(["crds", "--output", output])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn summary(docs: &[Value]) -> Vec<(String, Vec<String>)> {
    docs.iter()
        .map(|d| {
            let mut versions: Vec<String> = d["spec"]["versions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| {
                    format!(
                        "{}{}{}",
                        v["name"].as_str().unwrap(),
                        if v["served"] == true {
                            ""
                        } else {
                            " (not served)"
                        },
                        if v["storage"] == true {
                            " (storage)"
                        } else {
                            ""
                        }
                    )
                })
                .collect();
            versions.sort();
            (d["metadata"]["name"].as_str().unwrap().to_owned(), versions)
        })
        .collect()
}

#[test]
fn yaml_stream_holds_every_kind_and_version() {
    let text = crds("yaml");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    assert_eq!(
        summary(&docs),
        vec![
            (
                "nodegroups.deckhouse.io".to_owned(),
                vec![
                    "v1 (storage)".to_owned(),
                    "v1alpha1".into(),
                    "v1alpha2".into()
                ]
            ),
            (
                "staticinstances.deckhouse.io".to_owned(),
                vec!["v1alpha1".to_owned(), "v1alpha2 (storage)".into()]
            ),
            (
                "sshcredentials.deckhouse.io".to_owned(),
                vec!["v1alpha1".to_owned(), "v1alpha2 (storage)".into()]
            ),
            (
                "instances.deckhouse.io".to_owned(),
                vec![
                    "v1alpha1 (not served)".to_owned(),
                    "v1alpha2 (storage)".into()
                ]
            ),
            (
                "nodegroupconfigurations.deckhouse.io".to_owned(),
                vec!["v1alpha1 (storage)".to_owned()]
            ),
            (
                "nodeusers.deckhouse.io".to_owned(),
                vec!["v1 (storage)".to_owned(), "v1alpha1".into()]
            ),
        ]
    );
    for d in &docs {
        assert_eq!(d["apiVersion"], "apiextensions.k8s.io/v1");
        assert_eq!(d["kind"], "CustomResourceDefinition");
        assert_eq!(d["spec"]["scope"], "Cluster");
    }
    // Words YAML 1.1 readers (kubectl's) take for booleans stay strings.
    assert!(text.contains("- \"Off\""), "Off must be quoted");
    assert!(text.contains("- \"True\""), "True must be quoted");
}

#[test]
fn json_output_is_the_same_list() {
    let yaml: Vec<Value> = serde_saphyr::from_multiple(&crds("yaml")).unwrap();
    let json: Value = serde_json::from_str(&crds("json")).unwrap();
    assert_eq!(json["kind"], "List");
    assert_eq!(summary(json["items"].as_array().unwrap()), summary(&yaml));
}

fn repo() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn the_charts_crds_are_what_nodemgr_crds_prints() {
    let out = Command::new(env!("CARGO_BIN_EXE_nodemgr"))
        .args(["crds"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let printed = String::from_utf8(out.stdout).unwrap();
    let in_chart = std::fs::read_to_string(repo().join("charts/nodemgr/crds/crds.yaml")).unwrap();
    assert!(
        in_chart == printed,
        "charts/nodemgr/crds/crds.yaml is stale: run `cargo run -p nodemgr-cli --bin nodemgr -- crds > charts/nodemgr/crds/crds.yaml` (and copy it to deploy/01-crds.yaml)"
    );
}

#[test]
fn deploy_crds_are_what_nodemgr_crds_prints() {
    let out = Command::new(env!("CARGO_BIN_EXE_nodemgr"))
        .args(["crds"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let committed = std::fs::read_to_string(repo().join("deploy/01-crds.yaml")).unwrap();
    assert!(
        committed == String::from_utf8(out.stdout).unwrap(),
        "deploy/01-crds.yaml is stale: run `cargo run -p nodemgr-cli --bin nodemgr -- crds > deploy/01-crds.yaml`"
    );
}
