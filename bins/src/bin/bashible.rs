//! `bashible`: the node agent (see `nodemgr_bins::bashible`): applies the NodeGroup's bundle to
//! this machine under Deckhouse's update protocol.

use std::process::ExitCode;

use clap::Parser;
use nodemgr_bins::bashible::{Config, run};
use nodemgr_bins::daemon_main;

fn main() -> ExitCode {
    let config = Config::parse();
    daemon_main("bashible", false, run(config))
}
