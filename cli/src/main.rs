//! `nodemgr`: the command-line tool of nodemgr. Each subcommand is one file under `cli/`;
//! `main` parses the arguments, sets up logging to stderr (`RUST_LOG`, default `warn`) and maps
//! the subcommand's outcome to the process exit code.

mod cli;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// mimalloc, not the C library's allocator: `nodemgr simulate` allocates and frees small
/// objects at a high rate, and spends about a fifth fewer instructions on mimalloc
/// (docs/scale.md §5).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Manage Kubernetes nodes in groups, as Deckhouse's node-manager does.
#[derive(Debug, Parser)]
#[command(name = "nodemgr", version, about, long_about = None)]
struct Cli {
    #[command(flatten)]
    log: nodemgr_bins::observability::logging::LogArgs,
    /// What to do.
    #[command(subcommand)]
    command: Command,
}

/// The subcommands; each variant's arguments live in its `cli/` file.
#[derive(Debug, Subcommand)]
enum Command {
    /// Check NodeGroup, StaticInstance and SSHCredentials manifests as Deckhouse would.
    Validate(cli::validate::ValidateArgs),
    /// Convert Deckhouse manifests to another served version, as the API server's conversion
    /// webhook would (like `kubectl convert`).
    Convert(cli::convert::ConvertArgs),
    /// Say what changing a NodeGroup from OLD into NEW does to its nodes.
    Explain(cli::explain::ExplainArgs),
    /// Print a group's bootstrap script, cleanup script or configuration checksum.
    Render(cli::render::RenderArgs),
    /// Run a scenario in the simulator (virtual time) and print its timeline.
    Simulate(cli::simulate::SimulateArgs),
    /// Print the CustomResourceDefinitions nodemgr serves (for `kubectl apply -f -`).
    Crds(cli::crds::CrdsArgs),
    /// Run node-manager against an API emulator with simulated nodes, through a scripted story.
    Demo(cli::demo::DemoArgs),
    /// The node agent (the `bashible` binary's code), for `nodemgr demo`'s nodes: the demo
    /// runs its own executable so it needs no second binary built.
    #[command(hide = true)]
    Agent(nodemgr_bins::bashible::Config),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    nodemgr_bins::observability::logging::init(cli.log.log_format, "warn");
    let result = match &cli.command {
        Command::Validate(args) => cli::validate::run(args),
        Command::Convert(args) => cli::convert::run(args),
        Command::Explain(args) => cli::explain::run(args),
        Command::Render(args) => cli::render::run(args),
        Command::Simulate(args) => cli::simulate::run_cmd(args),
        Command::Crds(args) => cli::crds::run(args),
        Command::Demo(args) => cli::demo::run(args),
        Command::Agent(config) => cli::demo::run_agent(config),
    };
    match result {
        Ok(outcome) => outcome.exit_code(),
        Err(e) => {
            eprintln!("nodemgr: {e:#}");
            cli::Outcome::Unreadable.exit_code()
        }
    }
}
