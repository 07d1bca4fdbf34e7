//! `nodemgr convert FILE... --to-version deckhouse.io/VERSION`: prints every document of
//! every file converted to VERSION by `nodemgr_core::conversion`, as `kubectl convert` does
//! (YAML documents separated by `---`, or with `--output json` one object, or a `List` of
//! them when there are several).
//!
//! Documents of kinds nodemgr does not convert (ConfigMaps, NodeGroupConfigurations, …) are
//! printed unchanged and named on stderr as skipped. Exit code as `nodemgr validate`: 0 when
//! every document converted, 1 when some could not be (each one `FILE:DOC: message` on
//! stderr; the others are still printed), 2 when a file or the provider cluster configuration
//! cannot be read.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, ValueEnum};
use nodemgr_core::conversion::{ConversionContext, ConversionError, GROUP, convert};
use nodemgr_core::model::parse_documents;
use serde_json::Value;

use super::{Outcome, read_text};

/// How the converted documents are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// YAML documents separated by `---`.
    Yaml,
    /// One JSON object, or a `v1` `List` when there are several.
    Json,
}

/// Arguments of `nodemgr convert`.
#[derive(Debug, Clone, Args)]
pub struct ConvertArgs {
    /// Manifest files (YAML or JSON, several documents per file allowed).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// The version to convert to, e.g. deckhouse.io/v1 (a bare v1 is read as deckhouse.io/v1).
    #[arg(long, value_name = "deckhouse.io/VERSION")]
    pub to_version: String,
    /// The provider cluster configuration (the `…ClusterConfiguration` document or the Secret
    /// kube-system/d8-provider-cluster-configuration): its nodeGroups turn an old `Hybrid`
    /// group of the same name into CloudPermanent instead of CloudStatic.
    #[arg(long, value_name = "FILE")]
    pub provider_cluster_configuration: Option<PathBuf>,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value_t = OutputFormat::Yaml)]
    pub output: OutputFormat,
}

impl ConvertArgs {
    /// The target `apiVersion`, with the group added to a bare version.
    pub fn target(&self) -> String {
        if self.to_version.contains('/') {
            self.to_version.clone()
        } else {
            format!("{GROUP}/{}", self.to_version)
        }
    }
}

/// What one run did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Converted {
    /// Every non-empty document, converted or (when skipped) as read, in input order.
    pub documents: Vec<Value>,
    /// Documents that could not be converted.
    pub failed: usize,
    /// Documents of kinds nodemgr does not convert, printed unchanged.
    pub skipped: usize,
    /// Files that could not be read.
    pub unreadable: usize,
}

impl Converted {
    /// The outcome these counts mean.
    pub fn outcome(&self) -> Outcome {
        Outcome::of(self.unreadable, self.failed)
    }
}

fn convert_file(path: &Path, target: &str, ctx: &ConversionContext, done: &mut Converted) {
    let text = match read_text(path) {
        Ok(text) => text,
        Err(message) => {
            eprintln!("nodemgr: {message}");
            done.unreadable += 1;
            return;
        }
    };
    let documents = match parse_documents(&text) {
        Ok(documents) => documents,
        Err(e) => {
            eprintln!(
                "nodemgr: {} is not valid YAML ({e}); fix the syntax and run again",
                path.display()
            );
            done.unreadable += 1;
            return;
        }
    };
    for doc in documents {
        if doc.value.is_null() {
            continue;
        }
        match convert(&doc.value, target, ctx) {
            Ok(converted) => done.documents.push(converted),
            Err(ConversionError::UnknownKind { kind, api_version }) => {
                eprintln!(
                    "{}:{}: skipped: {kind} ({api_version}) is not a kind nodemgr converts; \
                     printed unchanged",
                    path.display(),
                    doc.index
                );
                done.skipped += 1;
                done.documents.push(doc.value);
            }
            Err(e) => {
                eprintln!("{}:{}: {e}", path.display(), doc.index);
                done.failed += 1;
            }
        }
    }
}

/// The conversion context of `--provider-cluster-configuration FILE` (the default without
/// one), shared by `convert` and `validate`.
///
/// # Errors
/// When the file cannot be read or holds no provider cluster configuration.
pub fn conversion_context(path: Option<&Path>) -> Result<ConversionContext, String> {
    match path {
        None => Ok(ConversionContext::default()),
        Some(path) => {
            let text = read_text(path)?;
            ConversionContext::from_provider_cluster_configuration(&text)
                .map_err(|e| format!("{}: {e}", path.display()))
        }
    }
}

/// Converts every document of `args.files`, reporting problems on stderr.
///
/// # Errors
/// When the provider cluster configuration cannot be read or is malformed.
pub fn convert_files(args: &ConvertArgs) -> Result<Converted, String> {
    let ctx = conversion_context(args.provider_cluster_configuration.as_deref())?;
    let target = args.target();
    let mut done = Converted::default();
    for path in &args.files {
        convert_file(path, &target, &ctx, &mut done);
    }
    Ok(done)
}

/// Writes the documents in `format`.
///
/// # Errors
/// When `out` cannot be written or a document cannot be printed.
pub fn write_documents(
    documents: &[Value],
    format: OutputFormat,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    match format {
        OutputFormat::Yaml => {
            for (i, doc) in documents.iter().enumerate() {
                if i > 0 {
                    writeln!(out, "---")?;
                }
                let text = serde_saphyr::to_string(doc).context("failed to print YAML")?;
                out.write_all(text.as_bytes())?;
                if !text.ends_with('\n') {
                    writeln!(out)?;
                }
            }
        }
        OutputFormat::Json => {
            let value = match documents {
                [one] => one.clone(),
                many => serde_json::json!({
                    "apiVersion": "v1",
                    "kind": "List",
                    "metadata": {"resourceVersion": ""},
                    "items": many,
                }),
            };
            serde_json::to_writer_pretty(&mut *out, &value)?;
            writeln!(out)?;
        }
    }
    out.flush().context("failed to write to stdout")
}

/// Runs `nodemgr convert` on stdout.
///
/// # Errors
/// When stdout cannot be written.
pub fn run(args: &ConvertArgs) -> anyhow::Result<Outcome> {
    let done = match convert_files(args) {
        Ok(done) => done,
        Err(message) => {
            eprintln!("nodemgr: {message}");
            return Ok(Outcome::Unreadable);
        }
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    write_documents(&done.documents, args.output, &mut out)?;
    Ok(done.outcome())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_version_gets_the_group() {
        let mut args = ConvertArgs {
            files: vec![],
            to_version: "v1".into(),
            provider_cluster_configuration: None,
            output: OutputFormat::Yaml,
        };
        assert_eq!(args.target(), "deckhouse.io/v1");
        args.to_version = "deckhouse.io/v1alpha2".into();
        assert_eq!(args.target(), "deckhouse.io/v1alpha2");
    }

    #[test]
    fn several_json_documents_are_a_list() {
        let docs = vec![serde_json::json!({"a": 1}), serde_json::json!({"b": 2})];
        let mut out = Vec::new();
        write_documents(&docs, OutputFormat::Json, &mut out).unwrap();
        let value: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(value["kind"], "List");
        assert_eq!(value["items"][1]["b"], 2);
        let mut out = Vec::new();
        write_documents(&docs, OutputFormat::Yaml, &mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "a: 1\n---\nb: 2\n");
    }
}
