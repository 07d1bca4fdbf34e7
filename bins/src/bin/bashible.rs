//! `bashible`: the node agent (see `nodemgr_bins::bashible`): applies the NodeGroup's bundle to
//! this machine under Deckhouse's update protocol.

use std::process::ExitCode;

use clap::Parser;
use nodemgr_bins::bashible::{Config, run};
use nodemgr_bins::daemon_main;
use nodemgr_bins::observability::logging::LogArgs;

/// The agent's flags and the logging flags.
#[derive(Parser)]
#[command(
    name = "bashible",
    version,
    about = "The nodemgr node agent: applies its NodeGroup's configuration"
)]
struct Cli {
    #[command(flatten)]
    log: LogArgs,
    #[command(flatten)]
    config: Config,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    daemon_main("bashible", false, cli.log.log_format, run(cli.config))
}
