//! Runs the validator over the manifests in `tests/fixtures/`: every document
//! in `valid/` must pass, and every document in `invalid/` must fail with exactly the field
//! paths its `# expect: PATH` comments declare. An `# expect:` line belongs to the document it
//! is written in (the text between two `---` lines; comment-only sections carry over to the
//! next document).

// Test helpers outside `#[test]` functions fail loudly on broken fixtures.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use nodemgr_core::model::parse_documents;
use nodemgr_core::validate::{ValidationContext, validate_document};

fn fixture_files(kind: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(kind);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no fixtures in {}", dir.display());
    files
}

/// The expected paths of each non-empty document of `text`, in order.
fn expectations(text: &str) -> Vec<BTreeSet<String>> {
    let mut out = Vec::new();
    let mut pending = BTreeSet::new();
    let mut has_content = false;
    let mut flush = |pending: &mut BTreeSet<String>, has_content: &mut bool| {
        if *has_content {
            out.push(std::mem::take(pending));
        }
        *has_content = false;
    };
    for line in text.lines() {
        if line.trim_end() == "---" {
            flush(&mut pending, &mut has_content);
            continue;
        }
        let trimmed = line.trim_start();
        if let Some(path) = trimmed.strip_prefix("# expect:") {
            pending.insert(path.trim().to_owned());
        } else if !trimmed.is_empty() && !trimmed.starts_with('#') {
            has_content = true;
        }
    }
    flush(&mut pending, &mut has_content);
    out
}

fn actual(text: &str) -> Vec<BTreeSet<String>> {
    let ctx = ValidationContext::default();
    parse_documents(text)
        .unwrap()
        .into_iter()
        .filter(|d| !d.value.is_null())
        .map(|d| {
            validate_document(d.value, &ctx)
                .into_iter()
                .map(|e| e.path)
                .collect()
        })
        .collect()
}

#[test]
fn valid_fixtures_have_no_errors() {
    for file in fixture_files("valid") {
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(
            !text.contains("# expect:"),
            "{}: valid fixtures declare no errors",
            file.display()
        );
        let ctx = ValidationContext::default();
        for doc in parse_documents(&text).unwrap() {
            let errors = validate_document(doc.value, &ctx);
            assert!(
                errors.is_empty(),
                "{}:{}: {:#?}",
                file.display(),
                doc.index,
                errors.iter().map(ToString::to_string).collect::<Vec<_>>()
            );
        }
    }
}

#[test]
fn invalid_fixtures_fail_with_exactly_the_declared_paths() {
    for file in fixture_files("invalid") {
        let text = std::fs::read_to_string(&file).unwrap();
        let expected = expectations(&text);
        assert!(
            expected.iter().any(|e| !e.is_empty()),
            "{}: an invalid fixture must declare at least one `# expect:` path",
            file.display()
        );
        let got = actual(&text);
        assert_eq!(
            got.len(),
            expected.len(),
            "{}: document count",
            file.display()
        );
        for (i, (got, want)) in got.iter().zip(&expected).enumerate() {
            assert_eq!(got, want, "{} document {i}", file.display());
        }
    }
}

#[test]
fn expectation_parser_assigns_comments_to_their_document() {
    let text = "# expect: a\n---\nkind: X\n# expect: b\n---\n# expect: c\nkind: Y\n---\n";
    let got = expectations(text);
    assert_eq!(got.len(), 2);
    assert_eq!(got[0], BTreeSet::from(["a".to_owned(), "b".to_owned()]));
    assert_eq!(got[1], BTreeSet::from(["c".to_owned()]));
}
