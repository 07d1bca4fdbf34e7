//! The alert rules the chart ships (`charts/nodemgr/files/alerts/*.yaml`) with the real
//! promtool: `promtool check rules` accepts every file, and `promtool test rules` passes the unit
//! tests in `tests/alerts/` — one test file per rule file, and a firing case for every alert.
//! (promtool comes from `scripts/install.d/36-promtool.sh`; the tests fail when it is missing.)

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup step should panic

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

fn rule_files() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/nodemgr/files/alerts");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 6, "rule files lost: {files:?}");
    files
}

fn test_file(rules: &Path) -> PathBuf {
    let stem = rules.file_stem().unwrap().to_str().unwrap();
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/alerts/{stem}.test.yaml"))
}

fn promtool(args: &[&str]) -> std::process::Output {
    let binary = std::env::var("NODEMGR_PROMTOOL").unwrap_or_else(|_| "promtool".to_owned());
    Command::new(&binary)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!("promtool is missing ({e}): run scripts/install.d/36-promtool.sh (./scripts/test.sh does)")
        })
}

fn yaml(path: &Path) -> Value {
    serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn promtool_accepts_every_rule_file() {
    for file in rule_files() {
        let out = promtool(&["check", "rules", file.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "{}: {}{}",
            file.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn every_alert_has_a_passing_promtool_unit_test() {
    for rules in rule_files() {
        let tests = test_file(&rules);
        assert!(
            tests.exists(),
            "{} has no test file {}",
            rules.display(),
            tests.display()
        );
        let alerts: BTreeSet<String> = yaml(&rules)["groups"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|g| g["rules"].as_array().unwrap().iter())
            .filter_map(|r| r["alert"].as_str().map(str::to_owned))
            .collect();
        let cases = yaml(&tests);
        let mut firing = BTreeSet::new();
        let mut quiet = BTreeSet::new();
        for case in cases["tests"].as_array().unwrap() {
            for check in case["alert_rule_test"].as_array().into_iter().flatten() {
                let name = check["alertname"].as_str().unwrap().to_owned();
                if check["exp_alerts"]
                    .as_array()
                    .is_some_and(|a| !a.is_empty())
                {
                    firing.insert(name);
                } else {
                    quiet.insert(name);
                }
            }
        }
        for alert in &alerts {
            assert!(
                firing.contains(alert),
                "{alert}: no firing case in {}",
                tests.display()
            );
            assert!(
                quiet.contains(alert),
                "{alert}: no non-firing case in {}",
                tests.display()
            );
        }
        let out = promtool(&["test", "rules", tests.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "{}: {}{}",
            tests.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn deckhouses_alert_names_are_kept_where_the_meaning_is_the_same() {
    let names: BTreeSet<String> = rule_files()
        .iter()
        .flat_map(|f| {
            yaml(f)["groups"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|g| g["rules"].as_array().unwrap().clone())
                .filter_map(|r| r["alert"].as_str().map(str::to_owned))
                .collect::<Vec<_>>()
        })
        .collect();
    for deckhouse in [
        "D8NodeIsNotUpdating",
        "D8NodeUpdateStuckWaitingForDisruptionApproval",
        "D8NodeGroupIsNotUpdating",
        "NodeRequiresDisruptionApprovalForUpdate",
        "NodeStuckInDrainingForDisruptionDuringUpdate",
        "NodeGroupReplicasUnavailable",
        "EarlyOOMPodIsNotReady",
    ] {
        assert!(
            names.contains(deckhouse),
            "{deckhouse} missing from {names:?}"
        );
    }
}
