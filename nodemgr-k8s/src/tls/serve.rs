//! Serving an axum `Router` over HTTP/1.1, in clear or over TLS (tokio-rustls), so that
//! clients that connect and then say nothing (or too little, too slowly) cannot keep the
//! server busy:
//!
//! - **Header-read timeout**: a client has this long to send a request's complete headers,
//!   counted from when the server starts waiting for them — on a new connection from its
//!   accept (the TLS handshake included), on a kept-alive one from the end of the previous
//!   response. The connection is closed otherwise.
//! - **Idle timeout**: a connection on which not a byte moved either way for this long is
//!   closed, whatever it was doing — a client that stops reading a response, for instance.
//! - **Connection limit**: at most this many connections are open at once. The server accepts
//!   no more until one closes; further clients wait in the kernel's listen backlog.
//!
//! On shutdown the server stops accepting, lets every connection finish its current request
//! and waits at most [`SHUTDOWN_WAIT`] for them.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

/// Longest wait for open connections at shutdown.
pub const SHUTDOWN_WAIT: Duration = Duration::from_secs(10);

/// After a failed accept (out of file descriptors, typically), how long before the next one.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Limits that make no sense.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitsError {
    /// A zero timeout.
    #[error("the header-read and idle timeouts must be longer than 0s")]
    ZeroTimeout,
    /// A connection limit out of range.
    #[error("the connection limit must be within 1..={MAX_CONNECTIONS_CEILING}")]
    ConnectionLimit,
}

/// The largest `--max-connections` accepted.
pub const MAX_CONNECTIONS_CEILING: u32 = 1 << 20;

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

impl Default for ConnectionLimits {
    /// 10 s to send headers, 60 s idle, 1024 connections.
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: 1024,
        }
    }
}

impl ConnectionLimits {
    /// Checks the limits.
    ///
    /// # Errors
    /// A zero timeout or limit.
    pub fn check(&self) -> Result<(), LimitsError> {
        if self.header_read_timeout.is_zero() || self.idle_timeout.is_zero() {
            return Err(LimitsError::ZeroTimeout);
        }
        if self.max_connections == 0 || self.max_connections > MAX_CONNECTIONS_CEILING {
            return Err(LimitsError::ConnectionLimit);
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

/// A stream that records its activity.
struct Watched<S> {
    stream: S,
    activity: Activity,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
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

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
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

/// Serves `app` on `listener` within `limits` until `shutdown` completes; over TLS when
/// `tls` is given (see [`super::server_config`]), in clear otherwise.
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
) -> Result<(), LimitsError> {
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
                tokio::spawn(accepted_connection(
                    stream,
                    tls.clone(),
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

/// Completes the TLS handshake (within the header-read timeout) if there is one, then serves.
async fn accepted_connection(
    stream: TcpStream,
    tls: Option<TlsAcceptor>,
    app: Router,
    limits: ConnectionLimits,
    permit: OwnedSemaphorePermit,
    stats: ConnectionStats,
    closing: watch::Receiver<bool>,
) {
    let activity = Activity::new();
    let watched = Watched {
        stream,
        activity: activity.clone(),
    };
    match tls {
        None => connection(watched, activity, app, limits, permit, stats, closing).await,
        Some(acceptor) => {
            match tokio::time::timeout(limits.header_read_timeout, acceptor.accept(watched)).await {
                Ok(Ok(stream)) => {
                    connection(stream, activity, app, limits, permit, stats, closing).await;
                }
                Ok(Err(error)) => {
                    tracing::debug!(%error, "TLS handshake failed");
                    stats.closed();
                    drop(permit);
                }
                Err(_) => {
                    tracing::debug!("TLS handshake not done within the header-read timeout");
                    stats.closed();
                    drop(permit);
                }
            }
        }
    }
}

/// Serves one connection until it ends, times out or the server shuts down.
async fn connection<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    stream: S,
    activity: Activity,
    app: Router,
    limits: ConnectionLimits,
    permit: OwnedSemaphorePermit,
    stats: ConnectionStats,
    mut closing: watch::Receiver<bool>,
) {
    let io = TokioIo::new(stream);
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
