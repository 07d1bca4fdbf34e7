//! The docs stay true to the daemons: every flag the README, docs/ and the sources give a daemon
//! exists in its `--help` (the CLI's own README checks are in `cli/tests/readme.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup step should panic

use std::process::Command;

/// Files under `dir` (recursively) whose name ends in one of `extensions`.
fn files_under(dir: &std::path::Path, extensions: &[&str], out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "target") {
                files_under(&path, extensions, out);
            }
        } else if path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| extensions.contains(&e))
        {
            out.push(path);
        }
    }
}

/// `(binary, flag)` for every `BINARY --flag` written in `text` (the binary's name not part of
/// a longer name).
fn flags_named(text: &str, binary: &str) -> Vec<String> {
    let mut found = Vec::new();
    let needle = format!("{binary} --");
    let mut from = 0;
    while let Some(at) = text[from..].find(&needle) {
        let start = from + at;
        let before = text[..start].chars().next_back();
        let end = start + needle.len();
        from = end;
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            continue;
        }
        let flag: String = text[end..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        if !flag.is_empty() {
            found.push(format!("--{flag}"));
        }
    }
    found
}

#[test]
fn every_flag_the_docs_and_sources_give_a_binary_exists() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = vec![root.join("README.md")];
    files_under(&root.join("docs"), &["md"], &mut files);
    for dir in std::fs::read_dir(&root).unwrap() {
        let dir = dir.unwrap().path();
        if dir.join("src").is_dir() {
            files_under(&dir.join("src"), &["rs", "md"], &mut files);
        }
    }
    let binaries = [
        ("nodemgr-webhook", env!("CARGO_BIN_EXE_nodemgr-webhook")),
        ("node-manager", env!("CARGO_BIN_EXE_node-manager")),
        ("fencing-agent", env!("CARGO_BIN_EXE_fencing-agent")),
        ("early-oom", env!("CARGO_BIN_EXE_early-oom")),
        (
            "bashible-apiserver",
            env!("CARGO_BIN_EXE_bashible-apiserver"),
        ),
        ("bashible", env!("CARGO_BIN_EXE_bashible")),
    ];
    let mut checked = 0;
    let mut missing = Vec::new();
    for (name, binary) in binaries {
        let help = Command::new(binary).arg("--help").output().unwrap();
        let help = String::from_utf8_lossy(&help.stdout).into_owned();
        for file in &files {
            let text = std::fs::read_to_string(file).unwrap();
            for flag in flags_named(&text, name) {
                checked += 1;
                let known = help.match_indices(&flag).any(|(i, _)| {
                    !help[i + flag.len()..]
                        .starts_with(|c: char| c.is_ascii_alphanumeric() || c == '-')
                });
                if !known {
                    missing.push(format!("{}: {name} {flag}", file.display()));
                }
            }
        }
    }
    assert!(
        checked >= 3,
        "the scan finds the flags the docs name ({checked})"
    );
    assert!(
        missing.is_empty(),
        "flags named in the docs or sources that the binary does not have:\n{}",
        missing.join("\n")
    );
}

#[test]
fn flags_are_found_after_their_binary_only() {
    assert_eq!(
        flags_named(
            "run `nodemgr-webhook --no-cluster`, or `x-nodemgr-webhook --y`",
            "nodemgr-webhook"
        ),
        ["--no-cluster"]
    );
    assert_eq!(
        flags_named("bashible-apiserver --from-cluster", "bashible"),
        Vec::<String>::new()
    );
}
