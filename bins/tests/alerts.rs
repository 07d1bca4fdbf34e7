//! The alert rules the chart ships (`charts/nodemgr/files/alerts/*.yaml`) with the real
//! promtool: `promtool check rules` accepts every file, and `promtool test rules` passes the unit
//! tests in `tests/alerts/` — one test file per rule file, with a firing and a quiet case for
//! every rule (an alert defined by several rules, like `D8NodeIsNotUpdating`, needs them for
//! each: an expected alert belongs to the one rule whose labels and summary it carries).
//! (promtool comes from `scripts/install.d/36-promtool.sh`; the tests fail when it is missing.)

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup step should panic

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

#[path = "support/promql.rs"]
mod promql;

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

/// One alerting rule: its name, static labels, summary template and the series it reads.
#[derive(Debug)]
struct Rule {
    alert: String,
    labels: serde_json::Map<String, Value>,
    summary: String,
    metrics: BTreeSet<String>,
}

fn rules_of(file: &Path) -> Vec<Rule> {
    yaml(file)["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().iter())
        .filter_map(|r| {
            Some(Rule {
                alert: r["alert"].as_str()?.to_owned(),
                labels: r["labels"].as_object().cloned().unwrap_or_default(),
                summary: r["annotations"]["summary"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                metrics: promql::metrics_in(r["expr"].as_str().unwrap()),
            })
        })
        .collect()
}

/// Whether `text` is what the Go template `template` renders to for some label values: its
/// literal parts in order, each `{{ … }}` standing for any text.
fn renders_to(template: &str, text: &str) -> bool {
    let mut literals = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find("{{") {
        literals.push(&rest[..open]);
        rest = rest[open..]
            .find("}}")
            .map_or("", |close| &rest[open + close + 2..]);
    }
    literals.push(rest);
    let (first, others) = literals.split_first().unwrap();
    let Some(mut text) = text.strip_prefix(first) else {
        return false;
    };
    let Some((last, middle)) = others.split_last() else {
        return text.is_empty();
    };
    for literal in middle {
        match text.find(literal) {
            Some(at) => text = &text[at + literal.len()..],
            None => return false,
        }
    }
    text.ends_with(last)
}

/// Whether an expected alert of a promtool case is one of `rule`'s: same name, the rule's
/// labels among its labels, its summary rendered from the rule's.
fn is_of(rule: &Rule, name: &str, expected: &Value) -> bool {
    name == rule.alert
        && rule
            .labels
            .iter()
            .all(|(k, v)| expected["exp_labels"][k] == *v)
        && expected["exp_annotations"]["summary"]
            .as_str()
            .is_some_and(|s| renders_to(&rule.summary, s))
}

#[test]
fn summaries_match_their_templates() {
    let t = "Node {{ $labels.node }} of NodeGroup {{ $labels.node_group }} does not start.";
    assert!(renders_to(
        t,
        "Node w-1 of NodeGroup worker does not start."
    ));
    assert!(!renders_to(
        t,
        "Node w-1 of NodeGroup worker does not finish."
    ));
    assert!(!renders_to(
        t,
        "A node w-1 of NodeGroup worker does not start."
    ));
    assert!(renders_to("Fencing paused.", "Fencing paused."));
    assert!(!renders_to("Fencing paused.", "Fencing paused. Twice."));
}

#[test]
fn every_rule_has_a_firing_and_a_quiet_promtool_case_that_pass() {
    for file in rule_files() {
        let tests = test_file(&file);
        assert!(
            tests.exists(),
            "{} has no test file {}",
            file.display(),
            tests.display()
        );
        let rules = rules_of(&file);
        let cases = yaml(&tests);
        let mut firing = vec![false; rules.len()];
        let mut quiet = vec![false; rules.len()];
        for case in cases["tests"].as_array().unwrap() {
            let fed: BTreeSet<String> = case["input_series"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s["series"].as_str())
                .flat_map(promql::metrics_in)
                .collect();
            for check in case["alert_rule_test"].as_array().into_iter().flatten() {
                let name = check["alertname"].as_str().unwrap();
                let expected: Vec<&Value> = check["exp_alerts"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .collect();
                for alert in &expected {
                    let owners: Vec<usize> = (0..rules.len())
                        .filter(|&i| is_of(&rules[i], name, alert))
                        .collect();
                    assert_eq!(
                        owners.len(),
                        1,
                        "{}: an expected {name} alert must be of exactly one rule (by its \
                         labels and summary), is of rules {owners:?}: {alert}",
                        tests.display()
                    );
                    firing[owners[0]] = true;
                }
                for (i, rule) in rules.iter().enumerate() {
                    // Quiet for this rule: asked about its alert, with its series fed, and
                    // none of its alerts expected.
                    if rule.alert == name
                        && !rule.metrics.is_disjoint(&fed)
                        && !expected.iter().any(|a| is_of(rule, name, a))
                    {
                        quiet[i] = true;
                    }
                }
            }
        }
        for (i, rule) in rules.iter().enumerate() {
            assert!(
                firing[i],
                "{} rule #{i} ({}, {:?}): no firing case in {}",
                file.display(),
                rule.alert,
                rule.labels,
                tests.display()
            );
            assert!(
                quiet[i],
                "{} rule #{i} ({}, {:?}): no quiet case (its series fed, no alert of it expected) in {}",
                file.display(),
                rule.alert,
                rule.labels,
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
