//! `fencing-agent`: feeds the node's watchdog while the Kubernetes API is reachable (see
//! `nodemgr_bins::fencing_agent`).

use std::process::ExitCode;

use clap::Parser;
use nodemgr_bins::daemon_main;
use nodemgr_bins::fencing_agent::{Config, run};
use nodemgr_bins::node_manager::termination;
use nodemgr_bins::observability::logging::LogArgs;

/// The flags of the fencing agent and the logging flags.
#[derive(Parser)]
#[command(
    name = "fencing-agent",
    version,
    about = "Feeds the watchdog while the Kubernetes API is reachable"
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
        "fencing-agent",
        false,
        cli.log.log_format,
        run(cli.config, termination()),
    )
}
