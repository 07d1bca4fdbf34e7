//! `early-oom`: kills one pod per memory-pressure episode before the kernel does (see
//! `nodemgr_bins::early_oom`).

use std::process::ExitCode;

use clap::Parser;
use nodemgr_bins::daemon_main;
use nodemgr_bins::early_oom::{Config, run};
use nodemgr_bins::node_manager::termination;

fn main() -> ExitCode {
    let config = Config::parse();
    daemon_main("early-oom", true, run(config, termination()))
}
