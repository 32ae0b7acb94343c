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
//! - at most [`ConnectionLimits::max_per_address`] of them come from one
//!   client address (an IPv6 client counted by its /64); a further
//!   connection from it is accepted and closed at once, so one host cannot
//!   take every slot while the others are still served;
//! - a new connection's first request head must be complete within the
//!   header-read timeout of its accept (a connection that sends nothing is
//!   dropped then, not after the idle timeout), and a kept-alive
//!   connection's next head within that timeout of its first byte; else the
//!   connection is dropped;
//! - a kept-alive connection on which nothing was read or written for the
//!   idle timeout between requests is closed; one that is still idle that
//!   long after being asked to close (a client that does not read its
//!   answer) is dropped;
//! - a request body must arrive within its own timeout (`api::body_deadline`,
//!   answered `408`).
//!
//! Every request carries its TCP peer as `ConnectInfo<SocketAddr>` (the
//! login throttle keys on it). It is the peer of the connection, never a
//! header: behind a reverse proxy every client has the proxy's address.

use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
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
    /// Connections open at once from one client address (an IPv6 client by
    /// its /64); beyond it a new one is closed at once.
    pub max_per_address: usize,
    /// Time to receive a whole request head: the first from the
    /// connection's accept, a kept-alive connection's next from its first
    /// byte.
    pub header_read_timeout: Duration,
    /// Time a kept-alive connection serving no request may go without a
    /// byte read or written before it is closed.
    pub idle_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connections: 1024,
            max_per_address: 64,
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
    let per_address = Arc::new(PerAddress::new(limits.max_per_address));
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
        // Over its address's share: closed now, its slot free again.
        let Some(share) = per_address.clone().admit(peer.ip()) else {
            tracing::debug!(%peer, "closing a connection over its address's share");
            continue;
        };
        let _ = stream.set_nodelay(true);
        let connection =
            Connection { app: app.clone(), http: http.clone(), limits: limits.clone(), stopping: stopping.clone() };
        tokio::spawn(async move {
            connection.run(stream, peer).await;
            drop(share);
            drop(slot);
        });
    }
    drop(listener);
    let _ = stop.send(true);
    // Each open connection holds a slot until it closes.
    let _ = slots.acquire_many(max as u32).await;
    Ok(())
}

/// The open connections of each client address; an address is in the map
/// only while it has one open, so the map is never larger than the
/// connection cap.
struct PerAddress {
    max: usize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

impl PerAddress {
    fn new(max: usize) -> PerAddress {
        PerAddress { max: max.max(1), open: Mutex::new(HashMap::new()) }
    }

    fn open(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, usize>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a new connection from `ip`, unless its address already has
    /// its share open.
    fn admit(self: Arc<Self>, ip: IpAddr) -> Option<AddressShare> {
        let key = crate::client_address::prefix(ip, crate::client_address::HOST_PREFIX);
        {
            let mut open = self.open();
            let count = open.entry(key).or_insert(0);
            if *count >= self.max {
                return None;
            }
            *count += 1;
        }
        Some(AddressShare { of: self, key })
    }
}

/// One connection counted against its address, until it drops.
struct AddressShare {
    of: Arc<PerAddress>,
    key: IpAddr,
}

impl Drop for AddressShare {
    fn drop(&mut self) {
        let mut open = self.of.open();
        if let Some(count) = open.get_mut(&self.key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.key);
            }
        }
    }
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
            // hyper reads a connection's next request in the poll that
            // answered the last: what the last call left to tear down goes
            // before this one runs (`runtime::teardown`).
            crate::runtime::drop_held();
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
        let in_place = InPlace::new();
        let (header, idle) = (self.limits.header_read_timeout, self.limits.idle_timeout);
        let mut check =
            tokio::time::interval((header.min(idle) / 4).clamp(Duration::from_millis(50), Duration::from_secs(1)));
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut closing = false;
        loop {
            tokio::select! {
                result = std::future::poll_fn(|cx| in_place.poll(connection.as_mut(), cx)) => {
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

/// Polls a connection so that a wake it gives itself while being polled
/// is answered by polling it again there and then.
///
/// hyper wakes the connection's task from inside its own poll on every
/// request with a body: the handler reading the body wakes the reader of
/// the connection, which is the same task. Left to tokio, a task woken
/// while it runs is put back behind the others and an idle worker is woken
/// to look for work that is not there: at one connection, two more context
/// switches per request and ~20 µs of CPU (bench/ANALYSIS.md). Here such a
/// wake is noted and the connection polled once more at once instead. A
/// wake from anywhere else (the socket, a tool thread with a call's
/// answer) reaches the task as before, and a connection that keeps waking
/// itself (hyper yields after many requests in a row, tokio's budget runs
/// out) yields like any task after [`IN_PLACE_POLLS`].
struct InPlace {
    state: Arc<InPlaceState>,
    waker: std::task::Waker,
}

/// Polls of a connection in a row, at most, before it yields.
const IN_PLACE_POLLS: usize = 2;

struct InPlaceState {
    /// The connection is being polled.
    polling: AtomicBool,
    /// It was woken while being polled.
    woken: AtomicBool,
    /// The task that polls it.
    task: atomic_waker::AtomicWaker,
}

impl std::task::Wake for InPlaceState {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.polling.load(Ordering::SeqCst) {
            self.woken.store(true, Ordering::SeqCst);
            // Still being polled: the poller sees the note when it ends.
            if self.polling.load(Ordering::SeqCst) {
                return;
            }
        }
        self.task.wake();
    }
}

impl InPlace {
    fn new() -> InPlace {
        let state = Arc::new(InPlaceState {
            polling: AtomicBool::new(false),
            woken: AtomicBool::new(false),
            task: atomic_waker::AtomicWaker::new(),
        });
        InPlace { waker: state.clone().into(), state }
    }

    /// Polls the connection; what its finished calls leave to tear down
    /// (their stores, whose drop resets their instance slots) is dropped
    /// after, once their answers are written
    /// ([`after_answer`](crate::runtime::after_answer)).
    fn poll<F: Future>(&self, mut connection: Pin<&mut F>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let state = &self.state;
        state.task.register(cx.waker());
        let mut inner = Context::from_waker(&self.waker);
        crate::runtime::after_answer(|| {
            for _ in 0..IN_PLACE_POLLS {
                state.polling.store(true, Ordering::SeqCst);
                let polled = connection.as_mut().poll(&mut inner);
                state.polling.store(false, Ordering::SeqCst);
                if polled.is_ready() || !state.woken.swap(false, Ordering::SeqCst) {
                    return polled;
                }
            }
            cx.waker().wake_by_ref();
            Poll::Pending
        })
    }
}

/// Which timeout a connection overran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Overdue {
    /// The first request head is not complete in time since the accept, or
    /// a later one since its first byte.
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
    /// Milliseconds after `start` from which the request head being read is
    /// timed (the accept for the first, its first byte for a later one), or
    /// [`NO_HEAD`].
    head: AtomicU64,
    in_flight: AtomicUsize,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            start: Instant::now(),
            last: AtomicU64::new(0),
            // The first head is timed from the accept: a connection that
            // sends nothing holds its slot no longer than one sending slowly.
            head: AtomicU64::new(0),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_gets_its_share_of_connections_and_no_more() {
        let per_address = Arc::new(PerAddress::new(2));
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let same_64: IpAddr = "2001:db8:1:2::ffff".parse().unwrap();
        let other: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        let first = per_address.clone().admit(a).unwrap();
        let _second = per_address.clone().admit(same_64).unwrap();
        assert!(per_address.clone().admit(a).is_none(), "the /64 has its share");
        assert!(per_address.clone().admit(other).is_some(), "another /64 is not affected");
        drop(first);
        assert!(per_address.clone().admit(a).is_some(), "a closed connection frees its share");
    }

    #[test]
    fn closed_connections_leave_no_entry_behind() {
        let per_address = Arc::new(PerAddress::new(4));
        for i in 0..100u8 {
            let share = per_address.clone().admit(IpAddr::from([192, 0, 2, i]));
            drop(share);
        }
        assert!(per_address.open().is_empty());
    }

    #[test]
    fn the_first_head_is_timed_from_the_accept_and_later_ones_from_their_first_byte() {
        let long = Duration::from_secs(3600);
        let activity = Arc::new(Activity::new());
        // Nothing read yet: already timed (a zero timeout is overrun at once).
        assert_eq!(activity.overdue(Duration::ZERO, long), Some(Overdue::Head));
        assert_eq!(activity.overdue(long, long), None);
        // A request served: between requests no head is timed...
        drop(activity.begin());
        assert_eq!(activity.overdue(Duration::ZERO, long), None);
        // ...until the next one's first byte.
        activity.read();
        assert_eq!(activity.overdue(Duration::ZERO, long), Some(Overdue::Head));
    }

    /// Counts the wakes of the task that polls.
    #[derive(Default)]
    struct Wakes(AtomicUsize);

    impl std::task::Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A connection that wakes itself at each poll while `selfish` says so,
    /// hands its waker out, and is done when `done` says so.
    struct Pretend {
        polls: usize,
        selfish: fn(usize) -> bool,
        done: fn(usize) -> bool,
        waker: Arc<Mutex<Option<std::task::Waker>>>,
    }

    impl Future for Pretend {
        type Output = usize;

        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<usize> {
            self.polls += 1;
            *self.waker.lock().unwrap() = Some(cx.waker().clone());
            if (self.done)(self.polls) {
                return Poll::Ready(self.polls);
            }
            if (self.selfish)(self.polls) {
                cx.waker().wake_by_ref();
            }
            Poll::Pending
        }
    }

    fn pretend(selfish: fn(usize) -> bool, done: fn(usize) -> bool) -> Pretend {
        Pretend { polls: 0, selfish, done, waker: Default::default() }
    }

    /// A connection polled in place, and the waker of the task that polls it.
    fn polled_by_a_task() -> (InPlace, Arc<Wakes>, std::task::Waker) {
        let task = Arc::new(Wakes::default());
        (InPlace::new(), task.clone(), task.into())
    }

    #[test]
    fn a_connection_that_wakes_itself_while_polled_is_polled_again_there_not_rescheduled() {
        let (in_place, task, waker) = polled_by_a_task();
        let mut cx = Context::from_waker(&waker);
        // Woken while polled (hyper reading a request's body): polled again
        // at once, and done there; the task is never woken.
        let mut connection = std::pin::pin!(pretend(|polls| polls == 1, |polls| polls == 2));
        assert_eq!(in_place.poll(connection.as_mut(), &mut cx), Poll::Ready(2));
        assert_eq!(task.0.load(Ordering::SeqCst), 0);
        // Woken while polled, and then nothing to do: one more poll, and it waits.
        let mut connection = std::pin::pin!(pretend(|polls| polls == 1, |_| false));
        assert!(in_place.poll(connection.as_mut(), &mut cx).is_pending());
        assert_eq!((connection.polls, task.0.load(Ordering::SeqCst)), (2, 0));
    }

    #[test]
    fn a_connection_that_keeps_waking_itself_yields_like_any_task() {
        let (in_place, task, waker) = polled_by_a_task();
        let mut cx = Context::from_waker(&waker);
        let mut connection = std::pin::pin!(pretend(|_| true, |_| false));
        assert!(in_place.poll(connection.as_mut(), &mut cx).is_pending());
        assert_eq!(connection.polls, IN_PLACE_POLLS);
        assert_eq!(task.0.load(Ordering::SeqCst), 1, "its task is woken, to be polled in its turn");
    }

    #[test]
    fn a_wake_from_elsewhere_reaches_the_task() {
        let (in_place, task, waker) = polled_by_a_task();
        let mut cx = Context::from_waker(&waker);
        let mut connection = std::pin::pin!(pretend(|_| false, |_| false));
        assert!(in_place.poll(connection.as_mut(), &mut cx).is_pending());
        let handed_out = connection.waker.lock().unwrap().clone().unwrap();
        // The socket, or a tool thread with a call's answer, after the poll.
        std::thread::spawn(move || handed_out.wake()).join().unwrap();
        assert_eq!(task.0.load(Ordering::SeqCst), 1);
    }
}
