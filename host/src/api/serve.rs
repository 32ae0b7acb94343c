//! Serving connections: the accept loop, the cap on open connections and
//! the timeouts a slow or idle client gets.
//!
//! `axum::serve` has neither, so a client that opens connections and sends
//! half a request head (or nothing) could hold them, and the server's file
//! descriptors, forever. Here:
//! - at most [`ConnectionLimits::max_connections`] are open at once; at the
//!   cap the server stops accepting until one closes, so further clients wait
//!   in the kernel's listen backlog (and are served as slots free) instead of
//!   being accepted and dropped;
//! - a request head must be complete within the header-read timeout of its
//!   first byte, or the connection is dropped;
//! - a connection on which nothing was read or written for the idle timeout,
//!   and that is serving no request (a new one that sends nothing, a kept-alive
//!   one between requests), is closed; one that is still idle that long after
//!   being asked to close (a client that does not read its answer) is dropped;
//! - a request body must arrive within its own timeout (`api::body_deadline`,
//!   answered `408`).
//!
//! Every request carries its TCP peer as `ConnectInfo<SocketAddr>` (the
//! login throttle keys on it). It is the peer of the connection, never a
//! header: behind a reverse proxy every client has the proxy's address.

use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tower::ServiceExt;

/// How many connections may be open and how long they may dawdle.
#[derive(Debug, Clone)]
pub struct ConnectionLimits {
    /// Connections open at once; at the cap the server stops accepting.
    pub max_connections: usize,
    /// Time to receive a whole request head, from the connection's start or
    /// the end of its previous response.
    pub header_read_timeout: Duration,
    /// Time a connection serving no request may go without a byte read or
    /// written before it is closed.
    pub idle_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connections: 1024,
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
        }
    }
}

/// Serves `app` on `listener` until `shutdown` completes, then stops
/// accepting, lets every open connection finish its request, and returns
/// once all are closed.
pub async fn serve(
    listener: TcpListener,
    app: axum::Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let max = limits.max_connections.clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize));
    let slots = Arc::new(Semaphore::new(max));
    let (stop, stopping) = watch::channel(false);
    let mut http = hyper::server::conn::http1::Builder::new();
    // hyper's own header timer also runs while a kept-alive connection
    // waits for its next request, which would make the idle timeout the
    // header timeout; `Connection::run` keeps both instead.
    http.header_read_timeout(None).keep_alive(true);
    let http = Arc::new(http);
    tokio::pin!(shutdown);
    loop {
        // A slot first, then accept: at the cap nothing is accepted, and the
        // kernel's backlog holds the next clients until a connection closes.
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    // Out of file descriptors, most likely: wait, don't spin.
                    tracing::error!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(250)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let connection =
            Connection { app: app.clone(), http: http.clone(), limits: limits.clone(), stopping: stopping.clone() };
        tokio::spawn(async move {
            connection.run(stream, peer).await;
            drop(slot);
        });
    }
    drop(listener);
    let _ = stop.send(true);
    // Each open connection holds a slot until it closes.
    let _ = slots.acquire_many(max as u32).await;
    Ok(())
}

/// Errors of one connection that says nothing about the listener.
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(e.kind(), ConnectionRefused | ConnectionAborted | ConnectionReset)
}

/// One accepted connection.
struct Connection {
    app: axum::Router,
    http: Arc<hyper::server::conn::http1::Builder>,
    limits: ConnectionLimits,
    stopping: watch::Receiver<bool>,
}

impl Connection {
    async fn run(mut self, stream: TcpStream, peer: SocketAddr) {
        let activity = Arc::new(Activity::new());
        let io = TokioIo::new(Tracked { inner: stream, activity: activity.clone() });
        let app = self.app.clone();
        let serving = activity.clone();
        let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            let in_flight = serving.begin();
            let app = app.clone();
            async move {
                let response = app.oneshot(request.map(axum::body::Body::new)).await;
                drop(in_flight);
                response
            }
        });
        let connection = self.http.serve_connection(io, service);
        tokio::pin!(connection);
        let (header, idle) = (self.limits.header_read_timeout, self.limits.idle_timeout);
        let mut check =
            tokio::time::interval((header.min(idle) / 4).clamp(Duration::from_millis(50), Duration::from_secs(1)));
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut closing = false;
        loop {
            tokio::select! {
                result = connection.as_mut() => {
                    if let Err(e) = result {
                        tracing::debug!(%peer, error = %e, "connection ended");
                    }
                    return;
                }
                _ = check.tick() => match activity.overdue(header, idle) {
                    Some(Overdue::Head) => {
                        tracing::debug!(%peer, "closing a connection whose request head did not arrive in time");
                        return;
                    }
                    // Idle again after being asked to close: it never will.
                    Some(Overdue::Idle) if closing => return,
                    Some(Overdue::Idle) => {
                        tracing::debug!(%peer, "closing an idle connection");
                        connection.as_mut().graceful_shutdown();
                        closing = true;
                        activity.touch();
                    }
                    None => {}
                },
                _ = self.stopping.changed(), if !closing => {
                    connection.as_mut().graceful_shutdown();
                    closing = true;
                }
            }
        }
    }
}

/// Which timeout a connection overran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Overdue {
    /// A request head started arriving and is still not complete.
    Head,
    /// Nothing moved, and no request is being served.
    Idle,
}

/// No head is arriving.
const NO_HEAD: u64 = u64::MAX;

/// When a connection last moved a byte, whether a request head is arriving,
/// and how many requests it is serving.
struct Activity {
    start: Instant,
    /// Milliseconds after `start` of the last byte read or written.
    last: AtomicU64,
    /// Milliseconds after `start` of the first byte of the request head
    /// being read, or [`NO_HEAD`].
    head: AtomicU64,
    in_flight: AtomicUsize,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            start: Instant::now(),
            last: AtomicU64::new(0),
            head: AtomicU64::new(NO_HEAD),
            in_flight: AtomicUsize::new(0),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(NO_HEAD - 1)
    }

    fn touch(&self) {
        self.last.store(self.now(), Ordering::Relaxed);
    }

    /// Bytes arrived: between requests, they start the next request's head.
    fn read(&self) {
        let now = self.now();
        self.last.store(now, Ordering::Relaxed);
        if self.in_flight.load(Ordering::Relaxed) == 0 {
            let _ = self.head.compare_exchange(NO_HEAD, now, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// A request head is complete: it is served until the guard drops.
    fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.head.store(NO_HEAD, Ordering::Relaxed);
        InFlight(self.clone())
    }

    /// Whether the connection overran a timeout by now.
    fn overdue(&self, header: Duration, idle: Duration) -> Option<Overdue> {
        if self.in_flight.load(Ordering::Relaxed) > 0 {
            return None;
        }
        let now = self.now();
        let head = self.head.load(Ordering::Relaxed);
        if head != NO_HEAD && now.saturating_sub(head) >= millis(header) {
            return Some(Overdue::Head);
        }
        (now.saturating_sub(self.last.load(Ordering::Relaxed)) >= millis(idle)).then_some(Overdue::Idle)
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A request being served.
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.0.head.store(NO_HEAD, Ordering::Relaxed);
        self.0.touch();
    }
}

/// A TCP stream that records its activity.
struct Tracked {
    inner: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Tracked {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let result = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(result, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.read();
        }
        result
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(result, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        result
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(result, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        result
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
