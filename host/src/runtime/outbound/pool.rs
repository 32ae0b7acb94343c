//! Keep-alive connections for tools' outbound HTTP: a sculpted tool's
//! backend calls cost the network's round trip, not a TCP connect and (for
//! `https`) a TLS handshake each, and a busy backend does not run the host
//! out of ports parked in `TIME_WAIT`.
//!
//! A connection is pooled under its [`Destination`]: the scheme, the host
//! name (what TLS verified and `Host` names), the address that passed the
//! policy when it was opened, and the end user's token it carried, if any;
//! and each tenant has pools of its own ([`TenantPool`]), so a connection
//! opened for one tenant's tool never carries another tenant's request, nor
//! one end user's connection another's. The policy comes first, for every
//! request: its name is resolved (answers cached no longer than their TTL,
//! `egress::lookups`) and every address checked, and only then is an idle
//! connection to the address that passed looked for — a name that now
//! resolves elsewhere never rides a connection opened for its old address,
//! and one that turned private is refused before any pool is asked.
//!
//! A connection goes back to its pool only once its answer was read to the
//! end and neither side said `Connection: close`; one whose answer was left
//! unread, failed or timed out is closed. An idle connection that its
//! server closed is noticed (hyper reads its end) and never handed out; a
//! request that found one closed before it went out is sent on another.
//!
//! Bounds ([`PoolSettings`]): open connections per tenant and per tenant
//! and destination (a request past them waits, within its connect timeout,
//! for one to close or come back), idle ones per destination, per tenant
//! and in all, and how long one stays idle. `https` sessions resume (TLS
//! session tickets) from a cache of each tenant's own. HTTP/1.1 only: no
//! ALPN is offered, so a backend that speaks HTTP/2 answers in HTTP/1.1.
use super::{BackendWork, CONNECT_TIMEOUT, FIRST_BYTE_TIMEOUT, Timed, WorkingFor};
use crate::egress::lookups::{NameLookups, TOOL_LOOKUPS};
use http_body_util::BodyExt;
use hyper::body::Body as _;
use hyper::client::conn::http1::SendRequest;
use rustls::pki_types::ServerName;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody};

/// How many connections the pools keep, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSettings {
    /// How long a connection stays idle before it is closed; zero pools
    /// nothing (a connection per request).
    pub idle_timeout: Duration,
    /// Connections open at once (in use or idle) for one tenant's tools.
    pub max_per_tenant: usize,
    /// Connections open at once for one tenant to one destination.
    pub max_per_destination: usize,
    /// Idle connections kept per tenant and destination.
    pub max_idle_per_destination: usize,
    /// Idle connections kept per tenant.
    pub max_idle_per_tenant: usize,
    /// Idle connections kept in all.
    pub max_idle: usize,
}

impl Default for PoolSettings {
    fn default() -> Self {
        PoolSettings {
            // Below the keep-alive of most servers (nginx 75 s, Apache and
            // Node 5 s are the short ones: their close is noticed).
            idle_timeout: Duration::from_secs(30),
            max_per_tenant: 128,
            max_per_destination: 64,
            max_idle_per_destination: 16,
            max_idle_per_tenant: 64,
            max_idle: 1024,
        }
    }
}

/// Where a pooled connection goes: only a request to the same place, for
/// the same tenant, may ride it.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(super) struct Destination {
    pub https: bool,
    /// The host name, lowercase, without brackets.
    pub host: String,
    /// The address the policy checked when the connection was opened.
    pub address: SocketAddr,
    /// The digest of the end user's token the requests carry, if any.
    pub credential: Option<[u8; 32]>,
}

impl Destination {
    /// Where a request to `uri` goes, at the `address` the policy checked,
    /// carrying the token whose digest is `credential`, if any.
    pub fn of(uri: &http::Uri, address: SocketAddr, credential: Option<[u8; 32]>) -> Result<Destination, HttpError> {
        let host = uri.host().ok_or(HttpError::HttpRequestUriInvalid)?;
        let host = host.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
        Ok(Destination { https: uri.scheme_str() == Some("https"), host, address, credential })
    }
}

impl std::fmt::Debug for Destination {
    /// Never the token's digest.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Destination")
            .field("https", &self.https)
            .field("host", &self.host)
            .field("address", &self.address)
            .field("credential", &self.credential.is_some())
            .finish()
    }
}

/// The tools' outbound connections: the pools, the TLS settings new ones
/// use, and how their names resolve. Cloning shares them.
#[derive(Clone)]
pub struct Connections(Arc<Shared>);

struct Shared {
    settings: PoolSettings,
    /// The TLS client settings each tenant's connector copies (with a
    /// session cache of its own); `None`: `https` cannot be set up.
    tls: Option<Arc<rustls::ClientConfig>>,
    /// The tools' name lookups; `None`: [`TOOL_LOOKUPS`].
    lookups: Option<Arc<NameLookups>>,
    /// Each tenant's pools (`None`: a policy of no tenant, in tests).
    tenants: Mutex<HashMap<Option<Arc<str>>, Arc<TenantPool>>>,
    /// Idle connections in all.
    idle: AtomicUsize,
    /// Connections opened so far.
    opened: AtomicU64,
    /// Whether the task that closes expired idle connections runs.
    sweeping: std::sync::Once,
}

impl std::fmt::Debug for Connections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connections").field("settings", &self.0.settings).finish_non_exhaustive()
    }
}

impl Default for Connections {
    fn default() -> Self {
        Connections::new(PoolSettings::default(), super::TLS.clone())
    }
}

/// One tenant's connections.
struct TenantPool {
    /// A permit per open connection.
    open: Arc<Semaphore>,
    /// A semaphore per destination with a connection open or wanted.
    per_destination: Arc<Mutex<HashMap<Destination, Arc<Semaphore>>>>,
    idle: Mutex<IdleConnections>,
    /// Told each time a connection comes back idle: a request waiting for
    /// room may take it.
    returned: tokio::sync::Notify,
    /// TLS with this tenant's own session cache.
    tls: Option<tokio_rustls::TlsConnector>,
}

#[derive(Default)]
struct IdleConnections {
    /// Most recently returned last.
    by_destination: HashMap<Destination, Vec<Pooled>>,
    count: usize,
}

/// An open connection and its places in the bounds, given back when it is
/// dropped (which closes it).
struct Pooled {
    sender: SendRequest<WasiBody>,
    /// The call its task's work is counted for: the one whose request it
    /// carries.
    working_for: WorkingFor,
    /// When it was last returned.
    since: Instant,
    _tenant: OwnedSemaphorePermit,
    _destination: DestinationPermit,
}

/// A connection's place among its destination's; the destination's entry
/// goes when no connection holds or waits for one.
struct DestinationPermit {
    permit: Option<OwnedSemaphorePermit>,
    per_destination: Arc<Mutex<HashMap<Destination, Arc<Semaphore>>>>,
    destination: Destination,
}

impl Drop for DestinationPermit {
    fn drop(&mut self) {
        let mut map = self.per_destination.lock().unwrap_or_else(|p| p.into_inner());
        drop(self.permit.take());
        if map.get(&self.destination).is_some_and(|s| Arc::strong_count(s) == 1) {
            map.remove(&self.destination);
        }
    }
}

impl Connections {
    /// Pools bounded by `settings`; new `https` connections use `tls`.
    pub fn new(settings: PoolSettings, tls: Option<Arc<rustls::ClientConfig>>) -> Connections {
        Connections(Arc::new(Shared {
            settings,
            tls,
            lookups: None,
            tenants: Mutex::default(),
            idle: AtomicUsize::new(0),
            opened: AtomicU64::new(0),
            sweeping: std::sync::Once::new(),
        }))
    }

    /// The same settings, resolving names with `lookups` (tests).
    #[cfg(test)]
    pub(crate) fn with_lookups(
        settings: PoolSettings,
        tls: Option<Arc<rustls::ClientConfig>>,
        lookups: NameLookups,
    ) -> Self {
        let connections = Connections::new(settings, tls);
        let mut shared = Arc::into_inner(connections.0).expect("just made");
        shared.lookups = Some(Arc::new(lookups));
        Connections(Arc::new(shared))
    }

    /// How the tools' names resolve.
    pub(crate) fn lookups(&self) -> &NameLookups {
        self.0.lookups.as_deref().unwrap_or(&TOOL_LOOKUPS)
    }

    /// How many connections were opened so far.
    pub fn opened(&self) -> u64 {
        self.0.opened.load(Ordering::Relaxed)
    }

    /// How many connections are idle now.
    pub fn idle(&self) -> usize {
        self.0.idle.load(Ordering::Relaxed)
    }

    /// Sends `request` to `destination` for a tool of `tenant`, on an idle
    /// connection of the tenant's to it if there is one, else on a new one
    /// (waiting, within the connect timeout, while the bounds are full).
    pub(super) async fn send(
        &self,
        tenant: Option<&Arc<str>>,
        destination: Destination,
        mut request: http::Request<WasiBody>,
        options: &RequestOptions,
        work: &BackendWork,
    ) -> Result<http::Response<WasiBody>, HttpError> {
        let connect_timeout = options.connect_timeout.unwrap_or(CONNECT_TIMEOUT);
        let first_byte_timeout = options.first_byte_timeout.unwrap_or(FIRST_BYTE_TIMEOUT);
        let between_bytes_timeout =
            options.between_bytes_timeout.unwrap_or(super::BETWEEN_BYTES_TIMEOUT).max(Duration::from_millis(1));
        // Origin form on the wire: the host travels in the `Host` header.
        let path = request.uri().path_and_query().map_or("/", |p| p.as_str());
        *request.uri_mut() = path.parse().map_err(|_| HttpError::HttpRequestUriInvalid)?;
        let keep = self.0.settings.idle_timeout > Duration::ZERO && !says_close(request.headers());
        let pool = self.tenant(tenant);
        let deadline = tokio::time::Instant::now() + connect_timeout;
        loop {
            // Listening before looking: a connection that comes back while
            // this looks, or waits for room, is not missed.
            let returned = pool.returned.notified();
            let mut returned = std::pin::pin!(returned);
            returned.as_mut().enable();
            while let Some(mut pooled) = pool.take_idle(&destination, &self.0) {
                if !pooled.sender.is_ready() {
                    match tokio::time::timeout_at(deadline, pooled.sender.ready()).await {
                        Ok(Ok(())) => {}
                        _ => continue,
                    }
                }
                pooled.working_for.set(Some(work));
                match tokio::time::timeout(first_byte_timeout, pooled.sender.try_send_request(request)).await {
                    Ok(Ok(response)) => {
                        return Ok(self.answer(response, pooled, &pool, destination, keep, between_bytes_timeout));
                    }
                    // Closed before the request went out: another connection.
                    Ok(Err(mut failed)) => match failed.take_message() {
                        Some(unsent) => request = unsent,
                        None => return Err(HttpError::from(failed.into_error())),
                    },
                    Err(_) => return Err(HttpError::ConnectionReadTimeout),
                }
            }
            let Some(mut pooled) = self.open(&pool, &destination, deadline, returned).await? else {
                // One came back while this waited for room: take it.
                continue;
            };
            pooled.working_for.set(Some(work));
            let response = match tokio::time::timeout(first_byte_timeout, pooled.sender.send_request(request)).await {
                Ok(Ok(response)) => response,
                Ok(Err(e)) => return Err(HttpError::from(e)),
                Err(_) => return Err(HttpError::ConnectionReadTimeout),
            };
            return Ok(self.answer(response, pooled, &pool, destination, keep, between_bytes_timeout));
        }
    }

    /// The response as the tool reads it: its pauses bounded, and its
    /// connection back in the pool once it was read to the end (if it may
    /// be kept).
    fn answer(
        &self,
        response: http::Response<hyper::body::Incoming>,
        pooled: Pooled,
        pool: &Arc<TenantPool>,
        destination: Destination,
        keep: bool,
        pause: Duration,
    ) -> http::Response<WasiBody> {
        let keep = keep && !says_close(response.headers()) && response.version() != http::Version::HTTP_10;
        let mut returning = Some(Returning { pooled, pool: pool.clone(), shared: self.0.clone(), destination, keep });
        if response.body().is_end_stream()
            && let Some(returning) = returning.take()
        {
            returning.finish();
        }
        response.map(|incoming| {
            PooledBody { incoming, pause, timer: Box::pin(tokio::time::sleep(pause)), returning }.boxed_unsync()
        })
    }

    /// The pools of `tenant`, made when it has none.
    fn tenant(&self, tenant: Option<&Arc<str>>) -> Arc<TenantPool> {
        self.0.sweeping.call_once(|| {
            if self.0.settings.idle_timeout > Duration::ZERO
                && let Ok(runtime) = tokio::runtime::Handle::try_current()
            {
                runtime.spawn(sweep(Arc::downgrade(&self.0)));
            }
        });
        let mut tenants = self.0.tenants.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(pool) = tenants.get(&tenant.cloned()) {
            return pool.clone();
        }
        let tls = self.0.tls.as_ref().map(|base| {
            let mut config = (**base).clone();
            config.resumption = rustls::client::Resumption::in_memory_sessions(64);
            tokio_rustls::TlsConnector::from(Arc::new(config))
        });
        let pool = Arc::new(TenantPool {
            open: Arc::new(Semaphore::new(self.0.settings.max_per_tenant.max(1))),
            per_destination: Arc::default(),
            idle: Mutex::default(),
            returned: tokio::sync::Notify::new(),
            tls,
        });
        tenants.insert(tenant.cloned(), pool.clone());
        pool
    }

    /// A new connection to `destination`, once the bounds have room for it
    /// — or `None` if, while it waited, a connection of the tenant's came
    /// back idle (`returned`), which may be one to take.
    async fn open(
        &self,
        pool: &Arc<TenantPool>,
        destination: &Destination,
        deadline: tokio::time::Instant,
        mut returned: std::pin::Pin<&mut tokio::sync::futures::Notified<'_>>,
    ) -> Result<Option<Pooled>, HttpError> {
        let waited = |_| {
            tracing::debug!(target: "plinth::outbound", "no connection free within the connect timeout");
            HttpError::ConnectionTimeout
        };
        let semaphore = {
            let mut map = pool.per_destination.lock().unwrap_or_else(|p| p.into_inner());
            let max = self.0.settings.max_per_destination.max(1);
            map.entry(destination.clone()).or_insert_with(|| Arc::new(Semaphore::new(max))).clone()
        };
        // The entry stays while this waits: the permit's guard holds it.
        let mut place = DestinationPermit {
            permit: None,
            per_destination: pool.per_destination.clone(),
            destination: destination.clone(),
        };
        let acquired = tokio::select! {
            acquired = tokio::time::timeout_at(deadline, semaphore.acquire_owned()) => acquired.map_err(waited)?,
            () = returned.as_mut() => return Ok(None),
        };
        place.permit = Some(acquired.map_err(|_| HttpError::ConfigurationError)?);
        let tenant = match pool.open.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                // Full: an idle connection elsewhere makes room.
                pool.close_oldest_idle(&self.0);
                let acquired = tokio::select! {
                    acquired = tokio::time::timeout_at(deadline, pool.open.clone().acquire_owned()) => {
                        acquired.map_err(waited)?
                    }
                    () = returned.as_mut() => return Ok(None),
                };
                acquired.map_err(|_| HttpError::ConfigurationError)?
            }
        };
        let (sender, working_for) = tokio::time::timeout_at(deadline, dial(destination, pool.tls.as_ref()))
            .await
            .map_err(|_| HttpError::ConnectionTimeout)??;
        self.0.opened.fetch_add(1, Ordering::Relaxed);
        Ok(Some(Pooled { sender, working_for, since: Instant::now(), _tenant: tenant, _destination: place }))
    }
}

/// A new connection to `destination`: TCP to its checked address, TLS
/// presenting its name and verifying the certificate against it, and
/// hyper's HTTP/1.1 on top, run in a task of its own (it ends when its
/// sender is dropped and it is idle, or when the server closes it), whose
/// polls count for the call it works for ([`WorkingFor`]). A
/// failure keeps its kind (refused, TLS certificate or protocol) but no
/// system detail (no OS error, no address).
async fn dial(
    destination: &Destination,
    tls: Option<&tokio_rustls::TlsConnector>,
) -> Result<(SendRequest<WasiBody>, WorkingFor), HttpError> {
    let tcp = tokio::net::TcpStream::connect(destination.address).await.map_err(|_| HttpError::ConnectionRefused)?;
    // A request's head and body go out as written, not held back for an ACK.
    let _ = tcp.set_nodelay(true);
    let stream: Box<dyn Stream> = if destination.https {
        let connector = tls.ok_or(HttpError::ConfigurationError)?;
        let name = ServerName::try_from(destination.host.clone()).map_err(|_| HttpError::HttpRequestUriInvalid)?;
        match connector.connect(name, tcp).await {
            Ok(tls) => Box::new(tls),
            Err(e) => {
                let certificate = e
                    .get_ref()
                    .and_then(|inner| inner.downcast_ref::<rustls::Error>())
                    .is_some_and(|e| matches!(e, rustls::Error::InvalidCertificate(_)));
                return Err(if certificate { HttpError::TlsCertificateError } else { HttpError::TlsProtocolError });
            }
        }
    } else {
        Box::new(tcp)
    };
    let (sender, connection) = hyper::client::conn::http1::handshake(wasmtime_wasi_http::io::TokioIo::new(stream))
        .await
        .map_err(|_| HttpError::HttpProtocolError)?;
    let working_for = WorkingFor::default();
    tokio::spawn(Timed::new(
        async move {
            let _ = connection.await;
        },
        working_for.clone(),
    ));
    Ok((sender, working_for))
}

/// Whether `headers` ask for the connection to close after this exchange.
fn says_close(headers: &http::HeaderMap) -> bool {
    headers
        .get_all(http::header::CONNECTION)
        .iter()
        .any(|v| v.as_bytes().split(|b| *b == b',').any(|t| t.trim_ascii().eq_ignore_ascii_case(b"close")))
}

impl TenantPool {
    /// The most recently returned idle connection to `destination` that is
    /// still open and fresh; older or closed ones met on the way are closed.
    fn take_idle(&self, destination: &Destination, shared: &Shared) -> Option<Pooled> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let IdleConnections { by_destination, count } = &mut *idle;
        let list = by_destination.get_mut(destination)?;
        let mut found = None;
        while let Some(pooled) = list.pop() {
            *count -= 1;
            shared.idle.fetch_sub(1, Ordering::Relaxed);
            if pooled.since.elapsed() < shared.settings.idle_timeout && !pooled.sender.is_closed() {
                found = Some(pooled);
                break;
            }
        }
        if list.is_empty() {
            by_destination.remove(destination);
        }
        found
    }

    /// Keeps `pooled` for the next request to `destination`, unless it
    /// closed or the bounds are full (then it is closed).
    fn put_idle(&self, mut pooled: Pooled, destination: Destination, shared: &Shared) {
        if pooled.sender.is_closed() {
            return;
        }
        let settings = &shared.settings;
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.count >= settings.max_idle_per_tenant || shared.idle.load(Ordering::Relaxed) >= settings.max_idle {
            return;
        }
        let list = idle.by_destination.entry(destination).or_default();
        if list.len() >= settings.max_idle_per_destination {
            return;
        }
        pooled.since = Instant::now();
        list.push(pooled);
        idle.count += 1;
        shared.idle.fetch_add(1, Ordering::Relaxed);
        drop(idle);
        self.returned.notify_waiters();
    }

    /// Closes the idle connection returned longest ago, if there is one.
    fn close_oldest_idle(&self, shared: &Shared) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let oldest = idle
            .by_destination
            .iter()
            .filter_map(|(destination, list)| list.first().map(|p| (p.since, destination.clone())))
            .min_by_key(|(since, _)| *since);
        let Some((_, destination)) = oldest else { return };
        let closed = idle.by_destination.get_mut(&destination).map(|list| list.remove(0));
        if idle.by_destination.get(&destination).is_some_and(Vec::is_empty) {
            idle.by_destination.remove(&destination);
        }
        if closed.is_some() {
            idle.count -= 1;
            shared.idle.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Closes the idle connections that expired or closed; whether the
    /// tenant has none open left.
    fn sweep(&self, shared: &Shared) -> bool {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let IdleConnections { by_destination, count } = &mut *idle;
        by_destination.retain(|_, list| {
            list.retain(|pooled| {
                let keep = pooled.since.elapsed() < shared.settings.idle_timeout && !pooled.sender.is_closed();
                if !keep {
                    *count -= 1;
                    shared.idle.fetch_sub(1, Ordering::Relaxed);
                }
                keep
            });
            !list.is_empty()
        });
        *count == 0 && self.open.available_permits() == shared.settings.max_per_tenant.max(1)
    }
}

/// Closes expired idle connections and forgets tenants with none open,
/// every half idle timeout, while the pools exist.
async fn sweep(shared: Weak<Shared>) {
    let every =
        shared.upgrade().map_or(Duration::from_secs(1), |s| (s.settings.idle_timeout / 2).max(Duration::from_secs(1)));
    loop {
        tokio::time::sleep(every).await;
        let Some(shared) = shared.upgrade() else { return };
        let mut tenants = shared.tenants.lock().unwrap_or_else(|p| p.into_inner());
        tenants.retain(|_, pool| !(pool.sweep(&shared) && Arc::strong_count(pool) == 1));
    }
}

/// A connection on its way back to its pool.
struct Returning {
    pooled: Pooled,
    pool: Arc<TenantPool>,
    shared: Arc<Shared>,
    destination: Destination,
    keep: bool,
}

impl Returning {
    /// The answer was read to the end: back to the pool, if it may be kept.
    fn finish(self) {
        self.pooled.working_for.set(None);
        if self.keep {
            self.pool.put_idle(self.pooled, self.destination, &self.shared);
        }
    }
}

/// What a connection can be: plain TCP or TLS over it.
trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin> Stream for T {}

/// A response body as the tool reads it: it fails when the server pauses
/// longer than `pause` between frames, and gives its connection back once
/// it was read to the end; dropped before that (or failed), it closes it.
struct PooledBody {
    incoming: hyper::body::Incoming,
    pause: Duration,
    timer: std::pin::Pin<Box<tokio::time::Sleep>>,
    returning: Option<Returning>,
}

impl hyper::body::Body for PooledBody {
    type Data = hyper::body::Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        use std::task::Poll;
        let this = &mut *self;
        let frame = match std::pin::Pin::new(&mut this.incoming).poll_frame(cx) {
            Poll::Ready(frame) => {
                let next = tokio::time::Instant::now() + this.pause;
                this.timer.as_mut().reset(next);
                frame.map(|frame| frame.map_err(HttpError::from))
            }
            Poll::Pending => {
                return match this.timer.as_mut().poll(cx) {
                    // A stalled answer: the connection is closed with it.
                    Poll::Ready(()) => {
                        drop(this.returning.take());
                        Poll::Ready(Some(Err(HttpError::ConnectionReadTimeout)))
                    }
                    Poll::Pending => Poll::Pending,
                };
            }
        };
        let ended = match &frame {
            None => true,
            Some(Ok(_)) => this.incoming.is_end_stream(),
            // A failure closes the connection.
            Some(Err(_)) => {
                drop(this.returning.take());
                false
            }
        };
        if ended && let Some(returning) = this.returning.take() {
            returning.finish();
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.incoming.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.incoming.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::super::OutboundPolicy;
    use super::*;
    use crate::egress::OutboundLimits;
    use crate::manifest::HostPattern;
    use std::collections::BTreeMap;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use wasmtime_wasi_http::WasiHttpHooks as _;

    /// How the stand-in backend treats a connection after each answer.
    #[derive(Clone, Copy)]
    enum After {
        /// Keeps it open for the next request.
        KeepAlive,
        /// Says `Connection: close` and closes it.
        SayClose,
        /// Closes it, without a word, once it was idle this long.
        CloseWhenIdleFor(Duration),
    }

    /// A backend on 127.0.0.1 that answers every request with `body_bytes`
    /// bytes and, in `x-connection`, the number of the connection it came
    /// on; and how many connections it accepted, and how many are open.
    struct Backend {
        port: u16,
        accepted: Arc<AtomicUsize>,
        open: Arc<AtomicUsize>,
    }

    impl Backend {
        async fn start(after: After, body_bytes: usize) -> Backend {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            let (accepted, open) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
            let (counted, opened) = (accepted.clone(), open.clone());
            tokio::spawn(async move {
                while let Ok((mut stream, _)) = listener.accept().await {
                    let number = counted.fetch_add(1, Ordering::SeqCst) + 1;
                    let open = opened.clone();
                    open.fetch_add(1, Ordering::SeqCst);
                    tokio::spawn(async move {
                        loop {
                            let wait = match after {
                                After::CloseWhenIdleFor(idle) => idle,
                                _ => Duration::from_secs(3600),
                            };
                            let Ok(Some(_head)) = tokio::time::timeout(wait, read_head(&mut stream)).await else {
                                break;
                            };
                            let close = matches!(after, After::SayClose);
                            let answer = format!(
                                "HTTP/1.1 200 OK\r\ncontent-length: {body_bytes}\r\nx-connection: {number}\r\n{}\r\n",
                                if close { "connection: close\r\n" } else { "" }
                            );
                            let mut bytes = answer.into_bytes();
                            bytes.resize(bytes.len() + body_bytes, b'x');
                            if stream.write_all(&bytes).await.is_err() || close {
                                break;
                            }
                        }
                        let _ = stream.shutdown().await;
                        open.fetch_sub(1, Ordering::SeqCst);
                    });
                }
            });
            Backend { port, accepted, open }
        }

        fn accepted(&self) -> usize {
            self.accepted.load(Ordering::SeqCst)
        }
    }

    /// A request's head, `None` at the end of the stream.
    async fn read_head(stream: &mut tokio::net::TcpStream) -> Option<String> {
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if stream.read(&mut byte).await.ok()? == 0 {
                return None;
            }
            head.push(byte[0]);
        }
        Some(String::from_utf8_lossy(&head).into_owned())
    }

    fn loopback_limits() -> Arc<OutboundLimits> {
        Arc::new(OutboundLimits {
            allowed_private: vec!["127.0.0.1/32".parse().unwrap()],
            max_requests: 10_000,
            ..Default::default()
        })
    }

    /// A call's policy for a tool of `tenant` that may reach `hosts`, its
    /// requests going out on `connections`.
    fn policy(tenant: &str, hosts: &[&str], connections: &Connections) -> OutboundPolicy {
        let patterns: Vec<_> = hosts.iter().map(|h| HostPattern::parse(h).unwrap()).collect();
        OutboundPolicy::new(&patterns, &BTreeMap::new(), loopback_limits()).through(connections).for_tenant(tenant)
    }

    /// A GET of `url` as a tool sends one: its answer, or why there is none.
    async fn get(policy: &mut OutboundPolicy, url: &str) -> Result<http::Response<WasiBody>, HttpError> {
        let request =
            http::Request::get(url).body(http_body_util::Empty::new().map_err(|e| match e {}).boxed_unsync()).unwrap();
        let answer = Box::into_pin(policy.send_request(request, None, Box::new(async { Ok(()) }))).await;
        answer.map(|(response, _io)| response)
    }

    /// A GET read to the end: the number of the backend's connection it
    /// came on.
    async fn get_read(policy: &mut OutboundPolicy, url: &str) -> usize {
        let response = get(policy, url).await.unwrap_or_else(|e| panic!("{url}: {e:?}"));
        let connection = response.headers()["x-connection"].to_str().unwrap().parse().unwrap();
        response.into_body().collect().await.unwrap();
        connection
    }

    /// Until `done` holds, or a second passed.
    async fn eventually(done: impl Fn() -> bool) {
        for _ in 0..200 {
            if done() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn a_connection_read_to_the_end_carries_the_next_request_and_only_its_tenants() {
        let backend = Backend::start(After::KeepAlive, 64).await;
        let host = format!("127.0.0.1:{}", backend.port);
        let url = format!("http://{host}/x");
        let connections = Connections::default();
        let (mut acme, mut globex) = (policy("acme", &[&host], &connections), policy("globex", &[&host], &connections));
        let first = get_read(&mut acme, &url).await;
        assert_eq!(get_read(&mut acme, &url).await, first, "acme's second request rides its first's connection");
        let theirs = get_read(&mut globex, &url).await;
        assert_ne!(theirs, first, "globex never gets acme's connection");
        assert_eq!(get_read(&mut globex, &url).await, theirs);
        assert_eq!(get_read(&mut acme, &url).await, first);
        assert_eq!((backend.accepted(), connections.opened()), (2, 2));
        // A later call of acme's tool (a policy of its own) reuses it too.
        let mut next_call = policy("acme", &[&host], &connections);
        assert_eq!(get_read(&mut next_call, &url).await, first);
    }

    #[tokio::test]
    async fn a_connection_whose_answer_was_left_unread_is_closed_not_reused() {
        let backend = Backend::start(After::KeepAlive, 256 * 1024).await;
        let host = format!("127.0.0.1:{}", backend.port);
        let url = format!("http://{host}/big");
        let connections = Connections::default();
        let mut tool = policy("acme", &[&host], &connections);
        let unread = get(&mut tool, &url).await.unwrap();
        let first = unread.headers()["x-connection"].to_str().unwrap().to_string();
        drop(unread);
        let second = get_read(&mut tool, &url).await;
        assert_ne!(second.to_string(), first, "a new connection");
        assert_eq!(backend.accepted(), 2);
        eventually(|| backend.open.load(Ordering::SeqCst) == 1).await;
        assert_eq!(backend.open.load(Ordering::SeqCst), 1, "the unread one was closed");
        // Half read is unread too.
        let mut half = get(&mut tool, &url).await.unwrap().into_body();
        let frame = half.frame().await.unwrap().unwrap();
        assert!(frame.is_data());
        drop(half);
        get_read(&mut tool, &url).await;
        assert_eq!(backend.accepted(), 3, "the half-read connection was not reused");
    }

    #[tokio::test]
    async fn a_backend_that_closes_idle_connections_costs_no_call() {
        let backend = Backend::start(After::CloseWhenIdleFor(Duration::from_millis(50)), 16).await;
        let host = format!("127.0.0.1:{}", backend.port);
        let url = format!("http://{host}/x");
        let connections = Connections::default();
        let mut tool = policy("acme", &[&host], &connections);
        for round in 1..=3 {
            let connection = get_read(&mut tool, &url).await;
            assert_eq!(connection, round, "a new connection each time the backend closed the last");
            eventually(|| backend.open.load(Ordering::SeqCst) == 0).await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(backend.accepted(), 3);
    }

    #[tokio::test]
    async fn connection_close_from_the_backend_is_honoured() {
        let backend = Backend::start(After::SayClose, 16).await;
        let host = format!("127.0.0.1:{}", backend.port);
        let url = format!("http://{host}/x");
        let connections = Connections::default();
        let mut tool = policy("acme", &[&host], &connections);
        let numbers =
            [get_read(&mut tool, &url).await, get_read(&mut tool, &url).await, get_read(&mut tool, &url).await];
        assert_eq!(numbers, [1, 2, 3]);
        assert_eq!(connections.idle(), 0, "none kept");
        // And from the tool: its own `Connection: close` is honoured too.
        let keeping = Backend::start(After::KeepAlive, 16).await;
        let host = format!("127.0.0.1:{}", keeping.port);
        let mut tool = policy("acme", &[&host], &connections);
        for _ in 0..2 {
            let request = http::Request::get(format!("http://{host}/x"))
                .header(http::header::CONNECTION, "close")
                .body(http_body_util::Empty::new().map_err(|e| match e {}).boxed_unsync())
                .unwrap();
            let (response, _) =
                Box::into_pin(tool.send_request(request, None, Box::new(async { Ok(()) }))).await.unwrap();
            response.into_body().collect().await.unwrap();
        }
        assert_eq!(keeping.accepted(), 2);
    }

    #[tokio::test]
    async fn the_bounds_hold_under_a_tool_that_opens_many_connections() {
        let backend = Backend::start(After::KeepAlive, 16).await;
        let host = format!("127.0.0.1:{}", backend.port);
        let url = format!("http://{host}/x");
        let settings = PoolSettings {
            max_per_tenant: 6,
            max_per_destination: 4,
            max_idle_per_destination: 2,
            max_idle_per_tenant: 3,
            ..PoolSettings::default()
        };
        let connections = Connections::new(settings, None);
        let mut tool = policy("acme", &[&host], &connections);
        // Four answers held unread: the destination's four connections.
        let mut held = Vec::new();
        for _ in 0..4 {
            held.push(get(&mut tool, &url).await.unwrap());
        }
        assert_eq!(backend.accepted(), 4);
        // A fifth waits for one of them, and fails when its connect
        // timeout passes first: no fifth connection is opened.
        let request =
            http::Request::get(&url).body(http_body_util::Empty::new().map_err(|e| match e {}).boxed_unsync()).unwrap();
        let options = RequestOptions { connect_timeout: Some(Duration::from_millis(100)), ..Default::default() };
        let answer = Box::into_pin(tool.send_request(request, Some(options), Box::new(async { Ok(()) }))).await;
        assert!(matches!(answer, Err(HttpError::ConnectionTimeout)), "{:?}", answer.err());
        assert_eq!(backend.accepted(), 4);
        // One that waits while an answer is read gets its connection.
        let waiting = {
            let mut tool = policy("acme", &[&host], &connections);
            let url = url.clone();
            tokio::spawn(async move { get_read(&mut tool, &url).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        held.pop().unwrap().into_body().collect().await.unwrap();
        let reused = waiting.await.unwrap();
        assert!(reused <= 4, "on one of the four");
        // Read to the end, the rest go idle: at most two kept for it.
        for response in held {
            response.into_body().collect().await.unwrap();
        }
        assert!(connections.idle() <= 2, "{} idle", connections.idle());
        // Another host of the tenant's: the tenant's six hold (idle ones
        // elsewhere are closed to make room).
        let other = Backend::start(After::KeepAlive, 16).await;
        let other_host = format!("127.0.0.1:{}", other.port);
        let mut tool = policy("acme", &[&other_host], &connections);
        let mut held = Vec::new();
        for _ in 0..4 {
            held.push(get(&mut tool, &format!("http://{other_host}/y")).await.unwrap());
        }
        assert_eq!(other.accepted(), 4);
        assert!(connections.idle() <= 2);
        let open = |s: &Semaphore| settings.max_per_tenant - s.available_permits();
        let tenants = connections.0.tenants.lock().unwrap();
        let acme = tenants.get(&Some(Arc::from("acme"))).unwrap();
        assert!(open(&acme.open) <= 6, "{} open", open(&acme.open));
    }

    /// A name server on 127.0.0.1 answering every `A` question with the
    /// address in `answer`, valid for one second.
    async fn name_server(answer: Arc<Mutex<std::net::Ipv4Addr>>) -> SocketAddr {
        let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let address = socket.local_addr().unwrap();
        tokio::spawn(async move {
            let mut buf = [0u8; 512];
            while let Ok((n, from)) = socket.recv_from(&mut buf).await {
                let query = &buf[..n];
                // The question: labels up to the zero, then type and class.
                let mut end = 12;
                while end < n && query[end] != 0 {
                    end += 1 + query[end] as usize;
                }
                let question = &query[12..(end + 5).min(n)];
                let is_a = question.len() >= 4 && question[question.len() - 4..question.len() - 2] == [0, 1];
                let mut reply = Vec::from(&query[..2]);
                reply.extend_from_slice(&[0x81, 0x80, 0, 1, 0, u8::from(is_a), 0, 0, 0, 0]);
                reply.extend_from_slice(question);
                if is_a {
                    let ip = *answer.lock().unwrap();
                    reply.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 1, 0, 4]);
                    reply.extend_from_slice(&ip.octets());
                }
                let _ = socket.send_to(&reply, from).await;
            }
        });
        address
    }

    #[tokio::test]
    async fn a_name_that_turns_private_after_its_ttl_is_refused_on_the_next_connection() {
        // `backend.test` resolves, through a real resolver and its cache,
        // to 127.0.0.1 (which the operator allows) for one second, then
        // to 127.0.0.2 (which it does not).
        let backend = Backend::start(After::KeepAlive, 16).await;
        let answer = Arc::new(Mutex::new(std::net::Ipv4Addr::LOCALHOST));
        let server = name_server(answer.clone()).await;
        let lookups = NameLookups::new(4, Duration::from_secs(5), crate::egress::lookups::name_server_lookups(server));
        let connections = Connections::with_lookups(PoolSettings::default(), None, lookups);
        let host = format!("backend.test:{}", backend.port);
        let url = format!("http://{host}/x");
        let mut tool = policy("acme", &[&host], &connections);
        let first = get_read(&mut tool, &url).await;
        *answer.lock().unwrap() = std::net::Ipv4Addr::new(127, 0, 0, 2);
        // Within the TTL: the cached answer, the pooled connection.
        assert_eq!(get_read(&mut tool, &url).await, first);
        tokio::time::sleep(Duration::from_millis(1500)).await;
        // Past it: the new answer is checked, and refused, though a
        // connection to the old address is idle in the pool.
        assert_eq!(connections.idle(), 1);
        let answer = get(&mut tool, &url).await;
        assert!(matches!(answer, Err(HttpError::HttpRequestDenied)), "{:?}", answer.err());
        assert!(
            tool.denials().reason().is_some_and(|r| r.contains("private network")),
            "{:?}",
            tool.denials().reason()
        );
        assert_eq!(backend.accepted(), 1);
    }

    #[tokio::test]
    async fn an_end_users_connection_carries_no_other_end_users_request() {
        let backend = Backend::start(After::KeepAlive, 16).await;
        let host = format!("127.0.0.1:{}", backend.port);
        let url = format!("http://{host}/me");
        let connections = Connections::default();
        let for_person = |token: &str| {
            let grant = vec![(vec![HostPattern::parse(&host).unwrap()], Vec::new(), token.to_string())];
            policy("acme", &[&host], &connections).with_tokens(&grant, &BTreeMap::new())
        };
        let (mut alice, mut bob, mut nobody) =
            (for_person("tok_alice"), for_person("tok_bob"), policy("acme", &[&host], &connections));
        let alices = get_read(&mut alice, &url).await;
        let bobs = get_read(&mut bob, &url).await;
        let nobodys = get_read(&mut nobody, &url).await;
        assert!(alices != bobs && bobs != nobodys && alices != nobodys, "{alices} {bobs} {nobodys}");
        assert_eq!(get_read(&mut for_person("tok_alice"), &url).await, alices, "alice's next call rides hers");
        assert_eq!(backend.accepted(), 3);
    }
}
