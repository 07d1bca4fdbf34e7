//! `nodemgr demo` (the README's main job) runs its whole story against the emulator with the
//! real controllers and a real `bashible` agent process per node, and ends well: every step's
//! "done" line, the agents' requests, the rollout's bound, the forced deletion of the
//! PDB-blocked pods, the fencing of the dark node, and the final table.

#![allow(clippy::unwrap_used)] // test helpers: a failed setup step should panic

use std::process::Command;

#[test]
fn the_demo_walks_its_story_to_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_nodemgr"))
        .arg("demo")
        .arg("--kubeconfig-dir")
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for expected in [
        "KUBECONFIG=",
        "done: team=checkout on every frontend node",
        "done: team gone from every frontend node (tier kept)",
        "evictions refused by the PodDisruptionBudget",
        "db-0         pod default/postgres-0 deleted",
        "done: both db nodes drained and on their new container runtime",
        "a real bashible agent process",
        "edge-1       Node deleted",
        "done: edge's status shows 3 nodes",
    ] {
        assert!(
            stdout.contains(expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
    // maxConcurrent held: the story reports the most frontend nodes approved at once (1 when
    // the real agents happened to ask one after another, never more than 2).
    let most: usize = stdout
        .lines()
        .find_map(|l| {
            l.split("at most ")
                .nth(1)?
                .strip_suffix(" frontend nodes were approved at once (maxConcurrent 2)")?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no maxConcurrent line in:\n{stdout}"));
    assert!(
        (1..=2).contains(&most),
        "{most} approved at once:\n{stdout}"
    );
    // The real agents ask: the story prints what it observes, and an ask answered between two
    // observations is not printed, so some node of each group is looked for, not a given one.
    for (group, ask) in [
        (
            "frontend-",
            "bashible: asks for approval (waiting-for-approval)",
        ),
        (
            "db-",
            "bashible: asks for a disruption (disruption-required)",
        ),
    ] {
        assert!(
            stdout.lines().any(|l| l.contains(group) && l.contains(ask)),
            "no {group}* node printed {ask:?} in:\n{stdout}"
        );
    }
    let table: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("NAME"))
        .collect();
    assert_eq!(table.len(), 4, "{stdout}");
    assert!(
        table[1].split_whitespace().eq(["frontend", "4", "4", "4"]),
        "{stdout}"
    );
    assert!(
        table[3].split_whitespace().eq(["edge", "3", "3", "3"]),
        "{stdout}"
    );
    assert!(dir.path().join("kubeconfig").exists());
}
