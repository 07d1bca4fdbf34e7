//! `node-manager`: the nodemgr controller manager (see `nodemgr_bins::node_manager`).

use std::process::ExitCode;

use clap::Parser;
use nodemgr_bins::daemon_main;
use nodemgr_bins::node_manager::{Config, run, termination};

fn main() -> ExitCode {
    let config = Config::parse();
    daemon_main("node-manager", true, run(config, termination(), None))
}
