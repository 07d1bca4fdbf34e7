//! The `nodemgr` CLI logs to stderr in the format asked (`--log-format`, before or after the
//! subcommand).

#![allow(clippy::unwrap_used)] // test helpers: a failed setup step should panic

use std::process::Command;

use serde_json::Value;

#[test]
fn the_nodemgr_cli_logs_in_the_format_asked() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ng.yaml");
    std::fs::write(
        &file,
        "apiVersion: deckhouse.io/v1\nkind: NodeGroup\nmetadata: {name: w}\nspec: {nodeType: Static}\n",
    )
    .unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_nodemgr"))
            .args(args)
            .arg(&file)
            .env("RUST_LOG", "debug")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // The flag is global: before or after the subcommand.
    for args in [
        &["--log-format", "json", "validate"][..],
        &["validate", "--log-format", "json"][..],
    ] {
        let (code, stderr) = run(args);
        assert_eq!(code, Some(0), "{stderr}");
        // Log events are JSON lines; the command's own summary line is not a log event.
        let events: Vec<Value> = stderr
            .lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
            .collect();
        assert!(
            events.iter().any(|e| e["level"] == "DEBUG"
                && e["message"] == "validating"
                && e["documents"] == 1
                && e["timestamp"].is_string()),
            "{stderr}"
        );
        assert!(
            stderr.contains("1 documents in 1 files: 0 invalid"),
            "{stderr}"
        );
    }
    let (code, stderr) = run(&["validate", "--log-format", "text"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("DEBUG") && l.contains("validating") && !l.starts_with('{')),
        "{stderr}"
    );
    let (code, stderr) = run(&["validate", "--log-format", "xml"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("text") && stderr.contains("json"),
        "{stderr}"
    );
}
