//! `nodemgr-api-emulator`: starts the Kubernetes API emulator and prints a kubeconfig path, to
//! play with `kubectl` (`KUBECONFIG=... kubectl get nodes`). Stops on Ctrl-C.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::Parser;
use nodemgr_testkit::{Emulator, EmulatorOptions};

/// Starts an in-memory Kubernetes API emulator on 127.0.0.1 (a test double, not a cluster).
#[derive(Parser)]
#[command(name = "nodemgr-api-emulator", version)]
struct Args {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Directory to write the kubeconfig into (default: a temporary directory).
    #[arg(long)]
    kubeconfig_dir: Option<PathBuf>,
    /// Watch events kept for resumption; older resourceVersions get 410 Gone.
    #[arg(long, default_value_t = 10_000)]
    history: usize,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let options = EmulatorOptions {
        address: args.listen,
        history_limit: args.history,
        kubeconfig_dir: args.kubeconfig_dir,
        ..EmulatorOptions::default()
    };
    let emulator = Emulator::start_with(options)
        .await
        .context("starting the API emulator")?;
    println!("API emulator at {}", emulator.url());
    println!("export KUBECONFIG={}", emulator.kubeconfig_path().display());
    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl-C")?;
    emulator.shutdown().await;
    Ok(())
}
