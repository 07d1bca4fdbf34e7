//! `bashible-apiserver`: serves each NodeGroup's bashible bundle, configuration checksum,
//! bootstrap and cleanup scripts over HTTP to nodes holding a bearer token. See
//! `nodemgr_bins::bashible_apiserver` for the endpoints, flags and reload rules.

use std::process::ExitCode;

use clap::Parser;
use nodemgr_bins::bashible_apiserver::{Config, run};

fn main() -> ExitCode {
    let config = Config::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("bashible-apiserver: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bashible-apiserver: {e:#}");
            ExitCode::from(1)
        }
    }
}
