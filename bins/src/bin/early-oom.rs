//! `early-oom`: kills one pod per memory-pressure episode before the kernel does (see
//! `nodemgr_bins::early_oom`).

use std::process::ExitCode;

use clap::Parser;
use nodemgr_bins::daemon_main;
use nodemgr_bins::early_oom::{Config, run};
use nodemgr_bins::node_manager::termination;
use nodemgr_bins::observability::logging::LogArgs;

/// The flags of early-oom and the logging flags.
#[derive(Parser)]
#[command(
    name = "early-oom",
    version,
    about = "Kills one pod per memory-pressure episode, early"
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
        "early-oom",
        true,
        cli.log.log_format,
        run(cli.config, termination()),
    )
}
