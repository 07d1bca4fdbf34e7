//! `nodemgr crds [--output yaml|json]`: prints the CustomResourceDefinitions of NodeGroup,
//! StaticInstance, SSHCredentials and Instance (`deckhouse.io`, every served version), ready
//! for `nodemgr crds | kubectl apply -f -` (`nodemgr_k8s::crd`).

use std::io::Write;

use anyhow::Context;
use clap::{Args, ValueEnum};

use super::Outcome;

/// Output format of `crds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CrdsOutput {
    /// A multi-document YAML stream.
    Yaml,
    /// A JSON `List` of the definitions.
    Json,
}

/// Arguments of `nodemgr crds`.
#[derive(Debug, Clone, Args)]
pub struct CrdsArgs {
    /// Output format.
    #[arg(long, value_enum, default_value = "yaml")]
    pub output: CrdsOutput,
}

/// Prints the definitions to stdout.
pub fn run(args: &CrdsArgs) -> anyhow::Result<Outcome> {
    let text = match args.output {
        CrdsOutput::Yaml => nodemgr_k8s::crd::definitions_yaml()?,
        CrdsOutput::Json => {
            let list = serde_json::json!({
                "apiVersion": "v1",
                "kind": "List",
                "items": nodemgr_k8s::crd::definitions()?,
            });
            let mut text = serde_json::to_string_pretty(&list)?;
            text.push('\n');
            text
        }
    };
    std::io::stdout()
        .lock()
        .write_all(text.as_bytes())
        .context("cannot write to stdout")?;
    Ok(Outcome::Ok)
}
