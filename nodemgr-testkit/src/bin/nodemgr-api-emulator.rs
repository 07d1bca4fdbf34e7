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
    /// Where a webhook's `clientConfig.service` goes, as `NAMESPACE/NAME:PORT=https://HOST:PORT`
    /// (repeatable; the same service repeated gets several endpoints, taken in turn): the
    /// emulator has no cluster network.
    #[arg(long = "route-service", value_name = "NS/NAME:PORT=URL", value_parser = parse_route)]
    routes: Vec<ServiceRoute>,
}

/// One `--route-service` value.
#[derive(Clone, Debug)]
struct ServiceRoute {
    namespace: String,
    name: String,
    port: u16,
    url: String,
}

fn parse_route(text: &str) -> Result<ServiceRoute, String> {
    let usage = || format!("{text:?} is not NAMESPACE/NAME:PORT=https://HOST:PORT");
    let (service, url) = text.split_once('=').ok_or_else(usage)?;
    let (namespace, rest) = service.split_once('/').ok_or_else(usage)?;
    let (name, port) = rest.split_once(':').ok_or_else(usage)?;
    let port: u16 = port.parse().map_err(|_| usage())?;
    if namespace.is_empty() || name.is_empty() || !url.starts_with("https://") {
        return Err(usage());
    }
    Ok(ServiceRoute {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        port,
        url: url.to_owned(),
    })
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
    let mut services: std::collections::BTreeMap<(&str, &str, u16), Vec<&str>> =
        std::collections::BTreeMap::new();
    for route in &args.routes {
        services
            .entry((&route.namespace, &route.name, route.port))
            .or_default()
            .push(&route.url);
    }
    for ((namespace, name, port), urls) in services {
        emulator.route_service_endpoints(namespace, name, port, &urls);
    }
    println!("API emulator at {}", emulator.url());
    println!("export KUBECONFIG={}", emulator.kubeconfig_path().display());
    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl-C")?;
    emulator.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_parse_and_bad_ones_are_named() {
        let route = parse_route(
            "d8-cloud-instance-manager/node-manager-webhook:443=https://127.0.0.1:9443",
        )
        .expect("a valid route");
        assert_eq!(
            (
                route.namespace.as_str(),
                route.name.as_str(),
                route.port,
                route.url.as_str()
            ),
            (
                "d8-cloud-instance-manager",
                "node-manager-webhook",
                443,
                "https://127.0.0.1:9443"
            )
        );
        for bad in [
            "ns/name=https://x",
            "ns/name:99999=https://x",
            "ns/name:443=http://x",
            "name:443=https://x",
        ] {
            let error = parse_route(bad).expect_err("invalid");
            assert!(error.contains("NAMESPACE/NAME:PORT"), "{error}");
        }
    }
}
