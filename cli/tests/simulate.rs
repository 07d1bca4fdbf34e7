//! `nodemgr simulate` end to end through the built binary: the default scenario's timeline
//! (text and JSON Lines), determinism per seed, a scenario file, and the exit codes for
//! invalid and unreadable scenarios.

#![allow(clippy::unwrap_used)] // test helpers: a failed setup step should panic

use std::path::PathBuf;
use std::process::{Command, Output};

fn simulate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nodemgr"))
        .arg("simulate")
        .args(args)
        .output()
        .unwrap()
}

fn write(name: &str, text: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("simulate-{name}.yaml"));
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn default_scenario_prints_the_three_stories() {
    let out = simulate(&[]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    // kubelet-restart rollout, two at a time
    assert!(
        text.contains("update.approved            frontend/frontend-0"),
        "{text}"
    );
    assert!(text.contains("agent.kubelet-restart"));
    assert!(text.contains("maxConcurrent 2 reached"));
    // Manual: waits, then the operator approves
    assert!(text.contains("waits for manual disruption approval"));
    assert!(text.contains("00:20:00.000  operator.disruption-approved db/db-0"));
    // Automatic: the PDB-blocked pod is deleted forcibly 5 minutes after the drain started
    assert!(text.contains("00:03:20.000  drain.started              workers/workers-0"));
    assert!(text.contains("00:08:20.000  drain.force-deleted        workers/workers-0"));
}

#[test]
fn json_lines_have_time_kind_node_and_group() {
    let out = simulate(&["--output", "json", "--seed", "7"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    let mut last_t = 0.0;
    let mut lines = 0;
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let t = v["t"].as_f64().unwrap();
        assert!(t >= last_t, "time goes backwards at {line}");
        last_t = t;
        assert!(v["kind"].is_string());
        assert!(v["message"].is_string());
        if v["kind"].as_str().unwrap().starts_with("update.approved") {
            assert!(v["node"].is_string() && v["group"].is_string(), "{line}");
        }
        lines += 1;
    }
    assert!(lines > 50);
    let forced: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["kind"] == "drain.force-deleted")
        .collect();
    assert_eq!(forced[0]["t"], 500.0);
    assert_eq!(forced[0]["node"], "workers-0");
    assert_eq!(forced[0]["group"], "workers");
    assert_eq!(forced[0]["pod"], "default/queue-0");
}

#[test]
fn same_seed_same_timeline() {
    let a = simulate(&["--output", "json", "--seed", "3"]);
    let b = simulate(&["--output", "json", "--seed", "3"]);
    assert_eq!(a.stdout, b.stdout);
}

#[test]
fn scenario_file_runs() {
    let path = write(
        "small",
        "name: small\nduration: 10m\ngroups:\n  - name: g\n    nodes: 2\nevents:\n  - at: 10s\n    change: {group: g, impact: none}\n",
    );
    let out = simulate(&[path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("# scenario small"));
    assert_eq!(text.matches("update.finished").count(), 2, "{text}");
}

#[test]
fn invalid_scenario_exits_1_naming_the_field() {
    let path = write(
        "invalid",
        "duration: 10m\ngroups:\n  - name: g\n    nodes: 2\nevents:\n  - at: 10s\n    nodeDark: {node: g-7}\n",
    );
    let out = simulate(&[path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("events[0].nodeDark.node: no node named `g-7`"),
        "{err}"
    );
    let path = write("typo", "duration: 10m\ngroup: []\n");
    let out = simulate(&[path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8(out.stderr).unwrap().contains("group"));
}

#[test]
fn unreadable_scenario_exits_2() {
    let out = simulate(&["/nonexistent/scenario.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .contains("cannot read")
    );
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("simulate-binary.yaml");
    std::fs::write(&path, [0xff, 0xfe, 0x00]).unwrap();
    let out = simulate(&[path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
}
