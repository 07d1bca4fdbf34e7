//! `nodemgr validate FILE...`: checks every document of every file with
//! `nodemgr_core::validate` and prints one line per error,
//! `FILE:DOC_INDEX: PATH: message` (DOC_INDEX = 0-based position of the document in its file,
//! as `nodemgr_core::model::parse_documents` numbers them: the YAML reader drops empty
//! documents, so `---` followed directly by `---` takes no number), to stdout, then a summary `N documents in M files: K invalid` to stderr.
//!
//! Exit code: 0 when every document is valid, 1 when any is invalid, 2 when a file cannot be
//! read (missing, not UTF-8, not YAML); unreadable files are reported on stderr and the other
//! files are still checked. Empty documents are skipped; kinds nodemgr does not validate pass.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use nodemgr_bins::settings_flags::SettingsFlags;
use nodemgr_core::model::parse_documents;
use nodemgr_core::validate::{ValidationContext, validate_document};

use super::{Outcome, read_text};

/// Arguments of `nodemgr validate`.
#[derive(Debug, Clone, Args)]
pub struct ValidateArgs {
    /// Manifest files (YAML or JSON, several documents per file allowed).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Cluster settings some rules depend on.
    #[command(flatten)]
    pub settings: SettingsFlags,
}

impl ValidateArgs {
    /// The validation context the flags describe.
    pub fn context(&self) -> ValidationContext {
        self.settings.context()
    }
}

/// Counts of one run.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// Non-empty documents checked.
    pub documents: usize,
    /// Files given.
    pub files: usize,
    /// Documents with at least one error.
    pub invalid: usize,
    /// Files that could not be read.
    pub unreadable: usize,
}

impl Summary {
    /// The outcome these counts mean.
    pub fn outcome(&self) -> Outcome {
        Outcome::of(self.unreadable, self.invalid)
    }
}

/// Validates one file, writing its error lines to `out`.
fn check_file(
    path: &Path,
    ctx: &ValidationContext,
    out: &mut impl Write,
    summary: &mut Summary,
) -> anyhow::Result<()> {
    let text = match read_text(path) {
        Ok(text) => text,
        Err(message) => {
            eprintln!("nodemgr: {message}");
            summary.unreadable += 1;
            return Ok(());
        }
    };
    let documents = match parse_documents(&text) {
        Ok(documents) => documents,
        Err(e) => {
            eprintln!(
                "nodemgr: {} is not valid YAML ({e}); fix the syntax and run again",
                path.display()
            );
            summary.unreadable += 1;
            return Ok(());
        }
    };
    tracing::debug!(file = %path.display(), documents = documents.len(), "validating");
    for doc in documents {
        if doc.value.is_null() {
            continue;
        }
        summary.documents += 1;
        let errors = validate_document(doc.value, ctx);
        if !errors.is_empty() {
            summary.invalid += 1;
        }
        for e in errors {
            writeln!(out, "{}:{}: {e}", path.display(), doc.index)
                .context("failed to write to stdout")?;
        }
    }
    Ok(())
}

/// Runs `nodemgr validate`, writing error lines to `out` and the summary to stderr.
///
/// # Errors
/// Only when `out` cannot be written; unreadable files are counted in the outcome instead.
pub fn run_with(args: &ValidateArgs, out: &mut impl Write) -> anyhow::Result<Summary> {
    let ctx = args.context();
    let mut summary = Summary {
        files: args.files.len(),
        ..Summary::default()
    };
    for path in &args.files {
        check_file(path, &ctx, out, &mut summary)?;
    }
    out.flush().context("failed to write to stdout")?;
    eprintln!(
        "{} documents in {} files: {} invalid{}",
        summary.documents,
        summary.files,
        summary.invalid,
        if summary.unreadable > 0 {
            format!(", {} unreadable", summary.unreadable)
        } else {
            String::new()
        }
    );
    Ok(summary)
}

/// Runs `nodemgr validate` on stdout.
///
/// # Errors
/// When stdout cannot be written.
pub fn run(args: &ValidateArgs) -> anyhow::Result<Outcome> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    Ok(run_with(args, &mut out)?.outcome())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn args(files: &[&Path]) -> ValidateArgs {
        ValidateArgs {
            files: files.iter().map(|p| p.to_path_buf()).collect(),
            settings: SettingsFlags::default(),
        }
    }

    #[test]
    fn outcome_prefers_unreadable_over_invalid() {
        let s = Summary {
            invalid: 1,
            unreadable: 1,
            ..Summary::default()
        };
        assert_eq!(s.outcome(), Outcome::Unreadable);
        let s = Summary {
            invalid: 1,
            ..Summary::default()
        };
        assert_eq!(s.outcome(), Outcome::Invalid);
        assert_eq!(Summary::default().outcome(), Outcome::Ok);
    }

    #[test]
    fn flags_build_the_context() {
        let mut a = args(&[]);
        assert_eq!(a.context(), ValidationContext::default());
        a.settings.zones = vec!["a".into()];
        a.settings.cluster_prefix_len = Some(10);
        let ctx = a.context();
        assert_eq!(ctx.cluster_prefix_len, Some(10));
        assert_eq!(ctx.known_zones, Some(BTreeSet::from(["a".to_owned()])));
    }

    #[test]
    fn lines_name_file_document_and_path() {
        let dir = std::env::temp_dir().join(format!("nodemgr-validate-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("two.yaml");
        std::fs::write(
            &file,
            "apiVersion: deckhouse.io/v1\nkind: NodeGroup\nmetadata: {name: ok}\nspec: {nodeType: Static}\n---\n---\napiVersion: deckhouse.io/v1\nkind: NodeGroup\nmetadata: {name: bad}\nspec: {}\n",
        )
        .unwrap();
        let mut out = Vec::new();
        let summary = run_with(&args(&[&file]), &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            summary,
            Summary {
                documents: 2,
                files: 1,
                invalid: 1,
                unreadable: 0
            }
        );
        assert!(
            text.starts_with(&format!("{}:1: spec.nodeType: required", file.display())),
            "{text}"
        );
    }
}
