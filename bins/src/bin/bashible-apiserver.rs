//! `bashible-apiserver`: serves each NodeGroup's bashible bundle, configuration checksum,
//! bootstrap and cleanup scripts over HTTP to nodes holding a bearer token. See
//! `nodemgr_bins::bashible_apiserver` for the endpoints, flags and reload rules.

use std::process::ExitCode;

use clap::Parser;
use nodemgr_bins::bashible_apiserver::{Config, run};
use nodemgr_bins::daemon_main;
use nodemgr_bins::observability::logging::LogArgs;

/// The flags of bashible-apiserver and the logging flags.
#[derive(Parser)]
#[command(
    name = "bashible-apiserver",
    version,
    about = "Serves NodeGroups' bashible bundles and bootstrap scripts to nodes"
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
        "bashible-apiserver",
        false,
        cli.log.log_format,
        run(cli.config),
    )
}
