//! `node-manager`: the nodemgr controller manager (see `nodemgr_bins::node_manager`).

use std::process::ExitCode;

use clap::Parser;
use nodemgr_bins::daemon_main;
use nodemgr_bins::node_manager::{Config, run, termination};
use nodemgr_bins::observability::logging::LogArgs;

/// The flags of node-manager and the logging flags.
#[derive(Parser)]
#[command(
    name = "node-manager",
    version,
    about = "The nodemgr controller manager"
)]
struct Cli {
    #[command(flatten)]
    log: LogArgs,
    #[command(flatten)]
    config: Config,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    daemon_main(
        "node-manager",
        true,
        cli.log.log_format,
        run(cli.config, termination(), None),
    )
}
