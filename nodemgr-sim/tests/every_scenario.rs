//! Every scenario shipped in `examples/scenarios/` parses and runs to its end with two seeds,
//! deterministically (the same seed gives the same timeline) and without an executor error.
//! Their stories are asserted in the scenario-specific tests.

use nodemgr_sim::{Scenario, run};

#[test]
fn every_shipped_scenario_runs_deterministically() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/scenarios");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 8, "scenarios missing: {files:?}");
    for path in files {
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let scenario =
            Scenario::from_yaml(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for seed in [1, 42] {
            let a = run(&scenario, seed);
            let b = run(&scenario, seed);
            assert!(!a.events.is_empty(), "{}: empty timeline", path.display());
            assert_eq!(
                a.to_jsonl(),
                b.to_jsonl(),
                "{} is not deterministic for seed {seed}",
                path.display()
            );
            assert!(
                a.of_kind("executor.error").next().is_none() || text.contains("apiErrors"),
                "{}: executor errors without injected API errors\n{}",
                path.display(),
                a.to_text()
            );
        }
    }
}
