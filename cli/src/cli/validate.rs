//! `nodemgr validate FILE...`: checks every document of every file with
//! `nodemgr_core::validate` and prints one line per error,
//! `FILE:DOC_INDEX: PATH: message` (DOC_INDEX = 0-based position of the document in its file,
//! as `nodemgr_core::model::parse_documents` numbers them: the YAML reader drops empty
//! documents, so `---` followed directly by `---` takes no number), to stdout, then a summary `N documents in M files: K invalid` to stderr.
//!
//! Strict like `kubectl apply`'s server-side field validation: a field the document's CRD
//! version does not know is an error naming the closest known field (`did you mean
//! maxConcurrent?`); a field of the wrong type does not hide the document's other errors.
//! Control and bidirectional characters in the printed lines are escaped (`\u{202E}`).
//!
//! Exit code: 0 when every document is valid, 1 when any is invalid, 2 when a file cannot be
//! read (missing, not UTF-8, not YAML); unreadable files are reported on stderr and the other
//! files are still checked; a `--provider-cluster-configuration` that cannot be read exits 2
//! before any file is checked. Empty documents are skipped; documents of kinds nodemgr does not
//! validate are named on stderr as skipped, and with `--strict` are errors.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use nodemgr_bins::settings_flags::SettingsFlags;
use nodemgr_core::conversion::ConversionContext;
use nodemgr_core::model::parse_documents;
use nodemgr_core::validate::{
    FieldError, ValidationContext, unknown_fields, validate_document_with,
};
use serde_json::Value;

use super::convert::conversion_context;
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
    /// Documents of kinds nodemgr does not validate are errors (without it they are reported
    /// on stderr as skipped).
    #[arg(long)]
    pub strict: bool,
    /// The provider cluster configuration (the `…ClusterConfiguration` document or the Secret
    /// kube-system/d8-provider-cluster-configuration), as for `nodemgr convert`: an old
    /// (`v1alpha1`/`v1alpha2`) `Hybrid` group it names is validated as CloudPermanent, any
    /// other as CloudStatic, as the conversion webhook reads them.
    #[arg(long, value_name = "FILE")]
    pub provider_cluster_configuration: Option<PathBuf>,
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
    /// Documents of kinds nodemgr does not validate (errors with `--strict`).
    pub skipped: usize,
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
    conversion: &ConversionContext,
    schemas: &Schemas,
    strict: bool,
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
        let mut errors = Vec::new();
        if let Some((api_version, kind)) = foreign_kind(&doc.value) {
            let what = format!("{kind} ({api_version}) is not a kind nodemgr validates");
            if strict {
                errors.push(FieldError::new(
                    "kind",
                    format!("{what}; --strict refuses it"),
                ));
            } else {
                summary.skipped += 1;
                eprintln!(
                    "{}",
                    escape(&format!(
                        "{}:{}: skipped: {what}",
                        path.display(),
                        doc.index
                    ))
                );
                continue;
            }
        } else {
            if let Some(schema) = schema_of(schemas, &doc.value) {
                errors.extend(unknown_fields(&doc.value, schema));
            }
            errors.extend(validate_document_with(doc.value, ctx, conversion));
        }
        if !errors.is_empty() {
            summary.invalid += 1;
        }
        for e in errors {
            writeln!(
                out,
                "{}",
                escape(&format!("{}:{}: {e}", path.display(), doc.index))
            )
            .context("failed to write to stdout")?;
        }
    }
    Ok(())
}

/// The CRD schemas by `(apiVersion, kind)`: what the API server checks fields against.
pub type Schemas = BTreeMap<(String, String), Value>;

/// The `openAPIV3Schema` of every served version of nodemgr's CRDs.
///
/// # Errors
/// The CRDs cannot be built (a bug, caught by nodemgr-k8s's tests).
pub fn schemas() -> anyhow::Result<Schemas> {
    let mut out = Schemas::new();
    for crd in nodemgr_k8s::crd::definitions()? {
        let value = serde_json::to_value(&crd)?;
        let group = value["spec"]["group"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let kind = value["spec"]["names"]["kind"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        for version in value["spec"]["versions"].as_array().into_iter().flatten() {
            let name = version["name"].as_str().unwrap_or_default();
            out.insert(
                (format!("{group}/{name}"), kind.clone()),
                version["schema"]["openAPIV3Schema"].clone(),
            );
        }
    }
    Ok(out)
}

fn schema_of<'a>(schemas: &'a Schemas, doc: &Value) -> Option<&'a Value> {
    let api_version = doc.get("apiVersion")?.as_str()?.to_owned();
    let kind = doc.get("kind")?.as_str()?.to_owned();
    schemas.get(&(api_version, kind))
}

const NODEMGR_KINDS: &[&str] = &[
    "NodeGroup",
    "StaticInstance",
    "SSHCredentials",
    "Instance",
    "NodeGroupConfiguration",
    "NodeUser",
];

/// `(apiVersion, kind)` of a document whose kind nodemgr does not validate (anything but its
/// `deckhouse.io` kinds); `None` for its own kinds and for documents without both fields
/// (validation reports those).
fn foreign_kind(doc: &Value) -> Option<(String, String)> {
    let api_version = doc.get("apiVersion")?.as_str()?;
    let kind = doc.get("kind")?.as_str()?;
    let ours = api_version.starts_with("deckhouse.io/") && NODEMGR_KINDS.contains(&kind);
    (!ours).then(|| (api_version.to_owned(), kind.to_owned()))
}

/// `text` with control and bidirectional-override characters written as `\u{XXXX}`, so a
/// message quoting a manifest cannot rewrite or reorder the terminal's line.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let bidi = matches!(c, '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}');
        if c.is_control() || bidi {
            out.push_str(&format!("\\u{{{:04X}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

/// Runs `nodemgr validate`, writing error lines to `out` and the summary to stderr.
///
/// # Errors
/// Only when `out` cannot be written; unreadable files are counted in the outcome instead.
pub fn run_with(args: &ValidateArgs, out: &mut impl Write) -> anyhow::Result<Summary> {
    let ctx = args.context();
    let schemas = schemas()?;
    let mut summary = Summary {
        files: args.files.len(),
        ..Summary::default()
    };
    let conversion = match conversion_context(args.provider_cluster_configuration.as_deref()) {
        Ok(conversion) => conversion,
        Err(message) => {
            // Validating old groups without it would type some of them wrongly: nothing is
            // checked, as for an unreadable manifest.
            eprintln!("nodemgr: --provider-cluster-configuration: {message}");
            summary.unreadable += 1;
            return Ok(summary);
        }
    };
    for path in &args.files {
        check_file(
            path,
            &ctx,
            &conversion,
            &schemas,
            args.strict,
            out,
            &mut summary,
        )?;
    }
    out.flush().context("failed to write to stdout")?;
    eprintln!(
        "{} documents in {} files: {} invalid{}{}",
        summary.documents,
        summary.files,
        summary.invalid,
        if summary.skipped > 0 {
            format!(", {} skipped", summary.skipped)
        } else {
            String::new()
        },
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
            strict: false,
            provider_cluster_configuration: None,
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
    fn control_and_bidi_characters_are_escaped() {
        assert_eq!(escape("a\u{202E}b\n\tc"), "a\\u{202E}b\\u{000A}\\u{0009}c");
        assert_eq!(escape("plain ünïcode"), "plain ünïcode");
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
                unreadable: 0,
                skipped: 0,
            }
        );
        assert!(
            text.starts_with(&format!("{}:1: spec.nodeType: required", file.display())),
            "{text}"
        );
    }
}
