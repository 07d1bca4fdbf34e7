//! nodemgr's daemons as a library: node-manager, bashible-apiserver, the bashible agent, the
//! webhook, fencing-agent and early-oom, what they share ([`inputs`], [`observability`]) and
//! what the `nodemgr` CLI (crate `nodemgr-cli`) reuses from them, so that the binaries stay thin
//! and tests can reach the pieces. This crate links neither the API emulator nor the
//! simulator: only the CLI's `demo` and `simulate` need those.

pub mod bashible;
pub mod bashible_apiserver;
pub mod early_oom;
pub mod fencing_agent;
pub mod inputs;
pub mod node_manager;
pub mod observability;
pub mod settings_flags;
pub mod webhook;

/// Common plumbing of the long-running binaries (`node-manager`, `fencing-agent`,
/// `early-oom`, `bashible-apiserver`, `bashible`): logging to stderr in `log_format`
/// (`RUST_LOG`, default `info`, see [`observability::logging`]), a tokio runtime, and the exit
/// code (0 when `main` ends well, 1 with the error printed, 2 when no runtime could start).
pub fn daemon_main<F>(
    name: &str,
    multi_thread: bool,
    log_format: observability::logging::LogFormat,
    main: F,
) -> std::process::ExitCode
where
    F: std::future::Future<Output = anyhow::Result<()>>,
{
    observability::logging::init(log_format, "info");
    let runtime = if multi_thread {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    };
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("{name}: cannot start the async runtime: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    match runtime.block_on(main) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}

/// Parses a Go-style duration flag (`5s`, `1m30s`).
///
/// # Errors
/// A message naming the text and the accepted form, or saying that it is too long.
pub fn duration_flag(text: &str) -> Result<std::time::Duration, String> {
    nodemgr_core::model::parse_duration_checked(text).map_err(|e| e.to_string())
}

/// Parses a percentage flag: a finite number from 0 to 100.
///
/// # Errors
/// A message naming the text and the accepted range.
pub fn percent_flag(text: &str) -> Result<f64, String> {
    text.trim()
        .parse::<f64>()
        .ok()
        .filter(|p| p.is_finite() && (0.0..=100.0).contains(p))
        .ok_or_else(|| format!("{text:?} is not a percentage from 0 to 100 (like 30 or 12.5)"))
}

/// The wall clock as the core's timestamp: the adapters' one clock read
/// ([`nodemgr_k8s::controllers::now`]).
pub fn wall_clock() -> nodemgr_core::model::Timestamp {
    nodemgr_k8s::controllers::now()
}
