//! How `bashible-apiserver` holds its HTTP connections, so that clients that connect and then
//! say nothing (or too little, too slowly) cannot keep it busy:
//!
//! - **Header-read timeout** (`--header-read-timeout`, default 10 s): a client has this long to
//!   send a request's complete headers, counted from when the server starts waiting for them —
//!   on a new connection from its accept, on a kept-alive one from the end of the previous
//!   response. The connection is closed otherwise. A kept-alive connection is therefore closed
//!   after this long without a new request.
//! - **Idle timeout** (`--idle-timeout`, default 60 s): a connection on which not a byte moved
//!   either way for this long is closed, whatever it was doing — a client that stops reading
//!   a response, for instance.
//! - **Connection limit** (`--max-connections`, default 1024): at most this many connections
//!   are open at once. The server accepts no more until one closes; further clients wait in
//!   the kernel's listen backlog (and their connect eventually fails when it is full).
//!
//! The machinery (plain or TLS) is `nodemgr_k8s::tls::serve`; this file holds the flags.

use std::future::Future;
use std::time::Duration;

use axum::Router;
pub use nodemgr_k8s::tls::serve::{
    ConnectionLimits, ConnectionStats, MAX_CONNECTIONS_CEILING, SHUTDOWN_WAIT,
};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// The connection flags of `bashible-apiserver`.
#[derive(Debug, Clone, clap::Args)]
pub struct ConnectionFlags {
    /// How long a client has to send a request's headers (also how long a kept-alive
    /// connection may wait for its next request).
    #[arg(long, default_value = "10s", value_parser = parse_timeout)]
    pub header_read_timeout: Duration,
    /// A connection on which nothing moved for this long is closed.
    #[arg(long, default_value = "60s", value_parser = parse_timeout)]
    pub idle_timeout: Duration,
    /// At most this many connections at once; more wait to be accepted.
    #[arg(long, default_value_t = 1024, value_parser = parse_max_connections)]
    pub max_connections: u32,
}

impl ConnectionFlags {
    /// The limits these flags set.
    pub fn limits(&self) -> ConnectionLimits {
        ConnectionLimits {
            header_read_timeout: self.header_read_timeout,
            idle_timeout: self.idle_timeout,
            max_connections: self.max_connections,
        }
    }
}

fn parse_timeout(text: &str) -> Result<Duration, String> {
    match nodemgr_core::model::parse_duration(text) {
        Some(d) if d.is_zero() => Err("must be longer than 0s".into()),
        Some(d) if d > Duration::from_secs(24 * 3600) => {
            Err(format!("{text} is longer than a day; use at most 24h"))
        }
        Some(d) => Ok(d),
        None => Err(format!(
            "{text:?} is not a duration such as 10s, 500ms or 1m"
        )),
    }
}

fn parse_max_connections(text: &str) -> Result<u32, String> {
    match text.parse::<u32>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) if n > MAX_CONNECTIONS_CEILING => Err(format!(
            "{n} is more than {MAX_CONNECTIONS_CEILING}; the process could not open that many \
             sockets anyway"
        )),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{text:?} is not a number of connections: {e}")),
    }
}

/// Serves `app` on `listener` within `limits` until `shutdown` completes, over TLS when `tls`
/// is given.
///
/// # Errors
/// Limits that [`ConnectionLimits::check`] refuses.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    tls: Option<TlsAcceptor>,
    limits: ConnectionLimits,
    stats: ConnectionStats,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    nodemgr_k8s::tls::serve::serve(listener, app, tls, limits, stats, shutdown).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_refuse_what_makes_no_sense() {
        assert_eq!(parse_timeout("10s"), Ok(Duration::from_secs(10)));
        assert!(parse_timeout("0s").is_err());
        assert!(parse_timeout("soon").is_err());
        assert!(parse_timeout("48h").is_err());
        assert_eq!(parse_max_connections("1024"), Ok(1024));
        assert!(parse_max_connections("0").is_err());
        assert!(parse_max_connections("99999999999").is_err());
        assert!(parse_max_connections("-1").is_err());
    }
}
