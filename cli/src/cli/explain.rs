//! `nodemgr explain OLD.yaml NEW.yaml [--output text|json]`: what changing a NodeGroup from OLD
//! into NEW does to its nodes — per changed parameter, whether it needs a disruptive update, a
//! re-provisioned machine or a kubelet restart, and their union (`nodemgr_core::impact`).
//!
//! Both files must hold one valid NodeGroup each (any served version). Invalid input prints the
//! validation errors as `FILE:0: PATH: message` and exits 1; unreadable input exits 2.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, ValueEnum};
use nodemgr_core::impact::{impact_of, rules_table};
use nodemgr_core::model::{NodeGroup, parse_node_group};
use nodemgr_core::validate::{ValidationContext, validate_node_group};

use super::{Outcome, read_text};

/// Output format of `explain`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExplainOutput {
    /// A readable table.
    Text,
    /// Exactly one JSON object.
    Json,
}

/// Arguments of `nodemgr explain`.
#[derive(Debug, Clone, Args)]
pub struct ExplainArgs {
    /// The NodeGroup as it is (one NodeGroup document).
    #[arg(value_name = "OLD", required_unless_present = "rules")]
    pub old: Option<PathBuf>,
    /// The NodeGroup as it will be (one NodeGroup document).
    #[arg(value_name = "NEW", required_unless_present = "rules")]
    pub new: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub output: ExplainOutput,
    /// Print the rule of every spec parameter, with why it is what it is, instead.
    #[arg(long, conflicts_with_all = ["old", "new"])]
    pub rules: bool,
}

/// What became of one input file.
enum Loaded {
    /// A valid NodeGroup.
    Group(Box<NodeGroup>),
    /// Validation errors, already formatted as output lines.
    Invalid(Vec<String>),
}

fn load(path: &Path) -> anyhow::Result<Loaded> {
    let text = read_text(path).map_err(anyhow::Error::msg)?;
    let group = parse_node_group(&text).with_context(|| {
        format!(
            "{} is not one NodeGroup manifest; `nodemgr validate {}` says more",
            path.display(),
            path.display()
        )
    })?;
    let errors = validate_node_group(&group, &ValidationContext::default());
    if errors.is_empty() {
        Ok(Loaded::Group(Box::new(group)))
    } else {
        Ok(Loaded::Invalid(
            errors
                .iter()
                .map(|e| format!("{}:0: {e}", path.display()))
                .collect(),
        ))
    }
}

/// Runs `explain`, writing to `out`.
///
/// # Errors
/// An input that cannot be read or is not one NodeGroup document (exit 2), or `out` failing.
pub fn run_with(args: &ExplainArgs, out: &mut impl Write) -> anyhow::Result<Outcome> {
    if args.rules {
        write!(out, "{}", rules_table())?;
        return Ok(Outcome::Ok);
    }
    let (Some(old_path), Some(new_path)) = (&args.old, &args.new) else {
        anyhow::bail!("explain needs OLD and NEW files (or --rules)");
    };
    let mut groups = Vec::with_capacity(2);
    let mut invalid = Vec::new();
    for path in [old_path, new_path] {
        match load(path)? {
            Loaded::Group(group) => groups.push(group),
            Loaded::Invalid(lines) => invalid.extend(lines),
        }
    }
    if !invalid.is_empty() {
        for line in &invalid {
            writeln!(out, "{line}")?;
        }
        eprintln!("explain needs two valid NodeGroups; fix the errors above");
        return Ok(Outcome::Invalid);
    }
    let (old, new) = (&groups[0], &groups[1]);
    if old.name() != new.name() {
        eprintln!(
            "note: comparing NodeGroup {:?} with NodeGroup {:?}",
            old.name(),
            new.name()
        );
    }
    let impact = impact_of(&old.spec, &new.spec);
    match args.output {
        ExplainOutput::Text => write!(out, "{}", impact.to_table())?,
        ExplainOutput::Json => writeln!(
            out,
            "{}",
            serde_json::to_string(&impact).context("cannot encode the impact as JSON")?
        )?,
    }
    Ok(Outcome::Ok)
}

/// Runs `explain` on stdout.
///
/// # Errors
/// As [`run_with`].
pub fn run(args: &ExplainArgs) -> anyhow::Result<Outcome> {
    let stdout = std::io::stdout();
    let mut lock = stdout.lock();
    run_with(args, &mut lock)
}
