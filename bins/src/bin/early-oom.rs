//! `early-oom`: kills one pod per memory-pressure episode before the kernel does (see
//! `nodemgr_bins::early_oom`).

use std::process::ExitCode;

use clap::Parser;
use nodemgr_bins::early_oom::{Config, run};
use nodemgr_bins::node_manager::termination;

fn main() -> ExitCode {
    let config = Config::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("early-oom: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(run(config, termination())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("early-oom: {e:#}");
            ExitCode::from(1)
        }
    }
}
