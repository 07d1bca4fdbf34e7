//! Log output of every binary: `--log-format text` (human-readable lines) or `json` (one JSON
//! object per event, for log collectors), filtered by `RUST_LOG` (default per binary). Events of
//! crates that log through the `log` facade (russh, …) reach the same output through the
//! `tracing-log` bridge that [`init`] installs.

use clap::{Args, ValueEnum};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::util::SubscriberInitExt as _;

/// The format of log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line (`timestamp`, `level`, `target`, `fields`, `spans`).
    Json,
}

/// The logging flags every binary has.
#[derive(Debug, Clone, Default, Args)]
pub struct LogArgs {
    /// Log line format: text or json.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
}

/// Installs the global subscriber writing to stderr in `format`, filtered by `RUST_LOG` (else
/// `default_filter`), with the `log` bridge. A second call (tests) leaves the first in place.
pub fn init(format: LogFormat, default_filter: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // `try_init` also installs the `log` → `tracing` bridge (the `tracing-log` feature).
    let result = match format {
        LogFormat::Text => builder.finish().try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .finish()
            .try_init(),
    };
    if let Err(error) = result {
        tracing::debug!(%error, "logging was already set up");
    }
}
