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
//! On shutdown the server stops accepting, lets every connection finish its current request
//! and waits at most [`SHUTDOWN_WAIT`] for them.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use anyhow::bail;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::Instant;

/// Longest wait for open connections at shutdown.
pub const SHUTDOWN_WAIT: Duration = Duration::from_secs(10);

/// After a failed accept (out of file descriptors, typically), how long before the next one.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

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

/// The largest `--max-connections` accepted.
const MAX_CONNECTIONS_CEILING: u32 = 1 << 20;

/// What [`serve`] enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// See the module docs.
    pub header_read_timeout: Duration,
    /// See the module docs.
    pub idle_timeout: Duration,
    /// See the module docs.
    pub max_connections: u32,
}

impl ConnectionLimits {
    /// Checks the limits.
    ///
    /// # Errors
    /// A zero timeout or limit.
    pub fn check(&self) -> anyhow::Result<()> {
        if self.header_read_timeout.is_zero() || self.idle_timeout.is_zero() {
            bail!("the header-read and idle timeouts must be longer than 0s");
        }
        if self.max_connections == 0 || self.max_connections > MAX_CONNECTIONS_CEILING {
            bail!("the connection limit must be within 1..={MAX_CONNECTIONS_CEILING}");
        }
        Ok(())
    }
}

/// Counters of a server's connections, shared with whoever watches them (tests, logs).
#[derive(Debug, Clone, Default)]
pub struct ConnectionStats {
    inner: Arc<StatsInner>,
}

#[derive(Debug, Default)]
struct StatsInner {
    open: AtomicUsize,
    peak: AtomicUsize,
    accepted: AtomicU64,
}

impl ConnectionStats {
    /// Connections open now.
    pub fn open(&self) -> usize {
        self.inner.open.load(Ordering::SeqCst)
    }

    /// The most connections that were open at once.
    pub fn peak(&self) -> usize {
        self.inner.peak.load(Ordering::SeqCst)
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.inner.accepted.load(Ordering::SeqCst)
    }

    fn opened(&self) {
        let open = self
            .inner
            .open
            .fetch_add(1, Ordering::SeqCst)
            .saturating_add(1);
        self.inner.peak.fetch_max(open, Ordering::SeqCst);
        self.inner.accepted.fetch_add(1, Ordering::SeqCst);
    }

    fn closed(&self) {
        let _ = self
            .inner
            .open
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
    }
}

/// When a byte last moved on a connection, in milliseconds since it was accepted.
#[derive(Debug, Clone)]
struct Activity {
    since: Instant,
    last_ms: Arc<AtomicU64>,
}

impl Activity {
    fn new() -> Self {
        Self {
            since: Instant::now(),
            last_ms: Arc::new(AtomicU64::new(0)),
        }
    }

    fn touch(&self) {
        let ms = u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.since + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }
}

/// A TCP stream that records its activity.
struct Watched {
    stream: TcpStream,
    activity: Activity,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write(cx, data);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// Serves `app` on `listener` within `limits` until `shutdown` completes.
///
/// # Errors
/// Limits that [`ConnectionLimits::check`] refuses.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    stats: ConnectionStats,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    limits.check()?;
    let permits = Arc::new(Semaphore::new(limits.max_connections as usize));
    let (closing_tx, closing_rx) = watch::channel(false);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = Arc::clone(&permits).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        match accepted {
            Ok((stream, peer)) => {
                stats.opened();
                tracing::trace!(%peer, open = stats.open(), "accepted");
                tokio::spawn(connection(
                    stream,
                    app.clone(),
                    limits,
                    permit,
                    stats.clone(),
                    closing_rx.clone(),
                ));
            }
            Err(error) => {
                tracing::warn!(%error, "accept failed; retrying shortly");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
    drop(listener);
    let _ = closing_tx.send(true);
    let all = Arc::clone(&permits).acquire_many_owned(limits.max_connections);
    if tokio::time::timeout(SHUTDOWN_WAIT, all).await.is_err() {
        tracing::warn!(
            open = stats.open(),
            "connections still open {} s after shutdown began; closing them",
            SHUTDOWN_WAIT.as_secs()
        );
    }
    Ok(())
}

/// Serves one connection until it ends, times out or the server shuts down.
async fn connection(
    stream: TcpStream,
    app: Router,
    limits: ConnectionLimits,
    permit: OwnedSemaphorePermit,
    stats: ConnectionStats,
    mut closing: watch::Receiver<bool>,
) {
    let activity = Activity::new();
    let io = TokioIo::new(Watched {
        stream,
        activity: activity.clone(),
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    let conn = builder.serve_connection(io, TowerToHyperService::new(app));
    let mut conn = std::pin::pin!(conn);
    let mut shutting_down = *closing.borrow();
    if shutting_down {
        conn.as_mut().graceful_shutdown();
    }
    loop {
        let idle_until = activity.last() + limits.idle_timeout;
        tokio::select! {
            ended = conn.as_mut() => {
                if let Err(error) = ended {
                    tracing::debug!(%error, "connection ended");
                }
                break;
            }
            () = tokio::time::sleep_until(idle_until) => {
                if activity.last() + limits.idle_timeout <= Instant::now() {
                    tracing::debug!("connection idle for {} s; closing it", limits.idle_timeout.as_secs_f64());
                    break;
                }
            }
            changed = closing.changed(), if !shutting_down => {
                shutting_down = true;
                if changed.is_ok() {
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    }
    stats.closed();
    drop(permit);
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
