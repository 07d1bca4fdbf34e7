//! `fencing-agent`: feeds the node's watchdog while the Kubernetes API is reachable (see
//! `nodemgr_bins::fencing_agent`).

use std::process::ExitCode;

use clap::Parser;
use nodemgr_bins::daemon_main;
use nodemgr_bins::fencing_agent::{Config, run};
use nodemgr_bins::node_manager::termination;

fn main() -> ExitCode {
    let config = Config::parse();
    daemon_main("fencing-agent", false, run(config, termination()))
}
