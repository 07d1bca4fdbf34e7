//! `nodemgr simulate [SCENARIO.yaml] [--seed N] [--output text|json]`: runs a scenario in the
//! simulator (`nodemgr-sim`) in virtual time and prints its timeline. Without a scenario it runs
//! the embedded default one: a kubelet-restart change rolling under maxConcurrent, a Manual
//! disruptive change approved by the operator, and an Automatic change whose drain deletes a
//! PDB-blocked pod forcibly at 5 minutes.
//!
//! Exit codes: 0 the run completed; 1 the scenario is invalid (the message names the field);
//! 2 the file cannot be read or the output cannot be written.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use nodemgr_sim::{DEFAULT_SCENARIO, Scenario, run};

use super::{Outcome, read_text};

/// Output format of `simulate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SimulateOutput {
    /// One readable line per event: virtual time, kind, group/node, message.
    Text,
    /// JSON Lines: one object per event with `t` (seconds), `kind`, `node`, `group`, `message`.
    Json,
}

/// Arguments of `nodemgr simulate`.
#[derive(Debug, Clone, Args)]
pub struct SimulateArgs {
    /// The scenario (YAML, see nodemgr-sim/README.md); the embedded default when absent.
    #[arg(value_name = "SCENARIO")]
    pub scenario: Option<PathBuf>,
    /// Seed of the simulator's randomness: the same scenario and seed give the same timeline.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub output: SimulateOutput,
}

/// Runs `simulate`, writing the timeline to `out` and problems to `err`.
///
/// # Errors
/// Only when writing to `out` or `err` fails.
pub fn run_with(
    args: &SimulateArgs,
    out: &mut impl Write,
    err: &mut impl Write,
) -> anyhow::Result<Outcome> {
    let (text, origin) = match &args.scenario {
        Some(path) => match read_text(path) {
            Ok(text) => (text, path.display().to_string()),
            Err(message) => {
                writeln!(err, "nodemgr: {message}")?;
                return Ok(Outcome::Unreadable);
            }
        },
        None => (
            DEFAULT_SCENARIO.to_owned(),
            "the default scenario".to_owned(),
        ),
    };
    let scenario = match Scenario::from_yaml(&text) {
        Ok(s) => s,
        Err(e) => {
            writeln!(
                err,
                "nodemgr: {origin} is not a valid scenario: {e}\n\
                 (the format is described in nodemgr-sim/README.md)"
            )?;
            return Ok(Outcome::Invalid);
        }
    };
    tracing::info!(scenario = %scenario.name, seed = args.seed, "simulating");
    let timeline = run(&scenario, args.seed);
    match args.output {
        SimulateOutput::Text => {
            if !scenario.name.is_empty() {
                writeln!(
                    out,
                    "# scenario {}: {} (seed {})",
                    scenario.name, scenario.description, args.seed
                )?;
            }
            out.write_all(timeline.to_text().as_bytes())?;
        }
        SimulateOutput::Json => out.write_all(timeline.to_jsonl().as_bytes())?,
    }
    Ok(Outcome::Ok)
}

/// Runs `simulate` on stdout/stderr.
///
/// # Errors
/// When stdout or stderr cannot be written.
pub fn run_cmd(args: &SimulateArgs) -> anyhow::Result<Outcome> {
    let stdout = std::io::stdout();
    let stderr = std::io::stderr();
    run_with(args, &mut stdout.lock(), &mut stderr.lock())
}
