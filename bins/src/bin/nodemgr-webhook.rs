//! `nodemgr-webhook`: admission and conversion webhook of nodemgr's custom resources (see
//! `nodemgr_bins::webhook`).

use std::process::ExitCode;

use clap::Parser;
use nodemgr_bins::daemon_main;
use nodemgr_bins::webhook::{Config, run};

fn main() -> ExitCode {
    let config = Config::parse();
    daemon_main("nodemgr-webhook", true, run(config))
}
