//! The README stays true to the CLI: its scenario example runs in the simulator, and its
//! command table names every subcommand `nodemgr --help` lists.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup step should panic

use std::process::Command;

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap()
}

#[test]
fn the_readme_scenario_example_runs() {
    let text = readme();
    let start = text
        .find("```yaml\n")
        .expect("a yaml example in the README")
        + 8;
    let len = text[start..].find("```").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tiny.yaml");
    std::fs::write(&file, &text[start..start + len]).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_nodemgr"))
        .arg("simulate")
        .arg(&file)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("update.finished"), "{stdout}");
}

#[test]
fn the_readme_lists_every_subcommand() {
    let out = Command::new(env!("CARGO_BIN_EXE_nodemgr"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    let commands: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(commands.len() >= 5, "{help}");
    let text = readme();
    for command in commands {
        assert!(
            text.contains(&format!("| `nodemgr {command}")),
            "README's command table lacks `nodemgr {command}`"
        );
    }
}
