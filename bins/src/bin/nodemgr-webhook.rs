//! `nodemgr-webhook`: admission and conversion webhook of nodemgr's custom resources (see
//! `nodemgr_bins::webhook`).

use std::process::ExitCode;

use clap::Parser;
use nodemgr_bins::daemon_main;
use nodemgr_bins::observability::logging::LogArgs;
use nodemgr_bins::webhook::{Config, run};

/// The flags of the webhook and the logging flags.
#[derive(Parser)]
#[command(
    name = "nodemgr-webhook",
    version,
    about = "Admission and conversion webhook of nodemgr's custom resources"
)]
struct Cli {
    #[command(flatten)]
    log: LogArgs,
    #[command(flatten)]
    config: Config,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    daemon_main("nodemgr-webhook", true, cli.log.log_format, run(cli.config))
}
