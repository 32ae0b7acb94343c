//! Outbound HTTP: a tool reaches only the hosts its manifest declares, and
//! never the host's own network unless the operator allows it.
//!
//! Every `wasi:http/outgoing-handler` request of a tool passes through
//! [`OutboundPolicy::send_request`], the one place the policy is enforced
//! (the shape Spin uses for `allowed_outbound_hosts`):
//! 1. the invocation must not have used up its request budget, which every
//!    attempt spends, refused or not;
//! 2. the authority must match an `allowed-hosts` entry of the manifest;
//! 3. the name is resolved and **every** address must be public — loopback,
//!    private, link-local (cloud metadata), CGNAT, multicast, reserved and
//!    IPv4-embedding ranges are refused unless an operator CIDR allows them;
//! 4. the request goes to the address that was checked, on a connection
//!    opened to it for the same tenant (a pooled one, [`pool`], or a new
//!    one), so a DNS answer that changes between check and connect cannot
//!    redirect it; HTTPS presents the host name for SNI and verifies the
//!    certificate against it, and the `Host` header keeps the name;
//! 5. the response body is capped.
//!
//! Refusals are counted in [`Denials`] (the first reason kept), so the host
//! can tell the caller that the tool tried to reach what it may not, and log
//! one line per call rather than one per refusal.

mod pool;
mod tokens;

pub use pool::{Connections, PoolSettings};
pub use tokens::{PersonToken, fuzzing as token_fuzzing};

use crate::egress::OutboundLimits;
use crate::manifest::{HostPattern, split_host_port};
use crate::telemetry::CallerTrace;
use http_body_util::BodyExt;
use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;
use tracing::Instrument;
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

/// Connect timeout when the tool sets none.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Time to the first response byte when the tool sets none.
const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest pause between response body frames when the tool sets none.
const BETWEEN_BYTES_TIMEOUT: Duration = Duration::from_secs(10);

/// One allowed host, with config references already resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
enum AllowedHost {
    Exact {
        host: String,
        port: Option<u16>,
    },
    Subdomains {
        suffix: String,
        port: Option<u16>,
    },
    /// A `${config.KEY}` entry: the host and port of the URL configured
    /// under `key`, which whoever sets the config chooses (a publisher, for
    /// stored config) — so it is named by the entry, never by that URL.
    Configured {
        key: String,
        host: String,
        port: u16,
    },
}

impl AllowedHost {
    /// The entry as the manifest declares it (`api.example.com`,
    /// `*.example.com:8443`, `${config.backend-url}`): what metrics and
    /// traces name a request's host by, so that no name a tool makes up (a
    /// subdomain carrying an input, say) nor a configured URL (an internal
    /// address, a value cycled to make series without end) reaches them.
    fn declared(&self) -> String {
        let host = self.declared_host();
        let port = match self {
            AllowedHost::Exact { port, .. } | AllowedHost::Subdomains { port, .. } => port,
            AllowedHost::Configured { .. } => &None,
        };
        match port {
            Some(port) if host.contains(':') => format!("[{host}]:{port}"),
            Some(port) => format!("{host}:{port}"),
            None => host,
        }
    }

    /// The host part of [`AllowedHost::declared`]: the traces'
    /// `server.address`.
    fn declared_host(&self) -> String {
        match self {
            AllowedHost::Exact { host, .. } => host.clone(),
            AllowedHost::Subdomains { suffix, .. } => format!("*.{suffix}"),
            AllowedHost::Configured { key, .. } => format!("${{config.{key}}}"),
        }
    }

    /// Whether traces may name the port a request went to: not for a
    /// `${config.KEY}` entry, whose port is the configured URL's.
    fn shows_port(&self) -> bool {
        !matches!(self, AllowedHost::Configured { .. })
    }
}

/// How a tool's outbound request ended, for the metrics: a status class,
/// or why there was no answer. A fixed set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutboundStatus {
    /// An answer, by class: `2xx`, `3xx`, `4xx`, `5xx`.
    Answered(u16),
    /// Refused by the policy (undeclared host, internal address, the
    /// request budget, a write while describing); never sent.
    Denied,
    /// The name did not resolve.
    DnsError,
    /// The connection was refused.
    ConnectionRefused,
    /// Connecting or the answer timed out.
    Timeout,
    /// TLS failed (the certificate, or the handshake).
    TlsError,
    /// Anything else (a protocol error).
    Error,
}

impl OutboundStatus {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            OutboundStatus::Answered(status) => match status / 100 {
                1 => "1xx",
                2 => "2xx",
                3 => "3xx",
                4 => "4xx",
                _ => "5xx",
            },
            OutboundStatus::Denied => "denied",
            OutboundStatus::DnsError => "dns_error",
            OutboundStatus::ConnectionRefused => "connection_refused",
            OutboundStatus::Timeout => "timeout",
            OutboundStatus::TlsError => "tls_error",
            OutboundStatus::Error => "error",
        }
    }

    fn of(error: &HttpError) -> OutboundStatus {
        match error {
            HttpError::HttpRequestDenied => OutboundStatus::Denied,
            HttpError::DnsError { .. } => OutboundStatus::DnsError,
            HttpError::ConnectionRefused => OutboundStatus::ConnectionRefused,
            HttpError::ConnectionTimeout | HttpError::ConnectionReadTimeout => OutboundStatus::Timeout,
            HttpError::TlsCertificateError | HttpError::TlsProtocolError => OutboundStatus::TlsError,
            _ => OutboundStatus::Error,
        }
    }
}

/// Refused outbound requests of one invocation, for the caller's answer and
/// the call's log summary. Refusals are counted, and only the first (and the
/// exhausted budget's) reason is kept: a tool that loops on refused requests
/// costs a counter, not memory or a log line each.
#[derive(Debug, Clone, Default)]
pub struct Denials(Arc<Mutex<Refusals>>);

#[derive(Debug, Default)]
struct Refusals {
    count: u64,
    first: Option<String>,
    over_budget: Option<String>,
}

impl Denials {
    fn lock(&self) -> std::sync::MutexGuard<'_, Refusals> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn record(&self, why: String) {
        let mut refusals = self.lock();
        refusals.count += 1;
        refusals.first.get_or_insert(why);
    }

    fn record_over_budget(&self, why: String) {
        let mut refusals = self.lock();
        refusals.count += 1;
        refusals.over_budget.get_or_insert_with(|| why.clone());
        refusals.first.get_or_insert(why);
    }

    /// The first refusal, if any.
    #[cfg(test)]
    fn first(&self) -> Option<String> {
        self.lock().first.clone()
    }

    /// What the caller is told: that the request budget ran out, if it did
    /// (the refusals before it count in it), else the first refusal.
    pub fn reason(&self) -> Option<String> {
        let refusals = self.lock();
        refusals.over_budget.clone().or_else(|| refusals.first.clone())
    }

    /// How many requests were refused, and the first reason, if any were.
    pub fn summary(&self) -> Option<(u64, String)> {
        let refusals = self.lock();
        Some((refusals.count, refusals.first.clone()?))
    }
}

/// Counts each outbound request as it ends, by declared host and status.
/// The metrics layer implements it (`metrics::OutboundCounter`), so the
/// runtime names no layer above it.
pub trait CountOutbound: Send + Sync + std::fmt::Debug {
    fn count(&self, host: &str, status: OutboundStatus);
}

/// What one invocation of one tool may call.
#[derive(Debug, Clone, Default)]
pub struct OutboundPolicy {
    allowed: Vec<AllowedHost>,
    limits: Arc<OutboundLimits>,
    sent: u32,
    denials: Denials,
    read_only: bool,
    /// The caller's trace context, passed on when no span is exported.
    trace: Option<CallerTrace>,
    /// Where each request is counted.
    counter: Option<Arc<dyn CountOutbound>>,
    /// The time its requests were worked on outside the call's polls.
    work: BackendWork,
    /// The tenant whose tool this is: its lookups are a bounded share of
    /// the tools' ([`crate::egress::lookups::TOOL_LOOKUPS`]).
    tenant: Option<Arc<str>>,
    /// The call's end user's tokens, each for the hosts of one
    /// `[[authorization]]` entry ([`tokens`]).
    tokens: Arc<[PersonToken]>,
    /// The connections its requests go out on (shared by every call).
    connections: Connections,
}

/// The time a call's requests were worked on outside the call's own
/// polls: resolving, connecting, TLS, and hyper's writing and reading run
/// in tasks of their own, which the call's CPU clock does not see. Counted
/// by the wall time of those tasks' polls — an upper bound on their CPU
/// without two system calls a poll — never by the time they wait for the
/// backend, so a tool that waits on a slow backend is not taken for one
/// that computes.
#[derive(Debug, Clone, Default)]
pub struct BackendWork(Arc<std::sync::atomic::AtomicU64>);

impl BackendWork {
    /// The time counted so far.
    pub fn spent(&self) -> Duration {
        Duration::from_nanos(self.0.load(std::sync::atomic::Ordering::Relaxed))
    }

    fn add(&self, took: Duration) {
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.0.fetch_add(nanos, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The call a task works for now, if any: a pooled connection's task
/// works for each call whose request it carries, in turn.
#[derive(Clone, Default)]
pub(super) struct WorkingFor(Arc<Mutex<Option<BackendWork>>>);

impl WorkingFor {
    fn call(work: &BackendWork) -> Self {
        WorkingFor(Arc::new(Mutex::new(Some(work.clone()))))
    }

    /// From now on, working for `work`'s call (`None`: for nobody).
    pub(super) fn set(&self, work: Option<&BackendWork>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = work.cloned();
    }

    fn add(&self, took: Duration) {
        if let Some(work) = &*self.0.lock().unwrap_or_else(|p| p.into_inner()) {
            work.add(took);
        }
    }
}

/// `inner`, each of its polls counted for the call it works for.
pub(super) struct Timed<F> {
    inner: std::pin::Pin<Box<F>>,
    working_for: WorkingFor,
}

impl<F> Timed<F> {
    pub(super) fn new(inner: F, working_for: WorkingFor) -> Self {
        Timed { inner: Box::pin(inner), working_for }
    }
}

impl<F: Future> Future for Timed<F> {
    type Output = F::Output;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<F::Output> {
        let started = std::time::Instant::now();
        let polled = self.inner.as_mut().poll(cx);
        self.working_for.add(started.elapsed());
        polled
    }
}

impl OutboundPolicy {
    /// The policy for a tool's manifest entries; `${config.KEY}` entries take
    /// the host and port of the URL configured under `KEY` (and allow nothing
    /// when it is unset or not a URL).
    pub fn new(patterns: &[HostPattern], config: &BTreeMap<String, String>, limits: Arc<OutboundLimits>) -> Self {
        let allowed = patterns
            .iter()
            .filter_map(|p| match p {
                HostPattern::Exact { host, port } => Some(AllowedHost::Exact { host: host.clone(), port: *port }),
                HostPattern::Subdomains { suffix, port } => {
                    Some(AllowedHost::Subdomains { suffix: suffix.clone(), port: *port })
                }
                HostPattern::ConfigUrl(key) => {
                    let (host, port) = url_host_port(config.get(key)?)?;
                    Some(AllowedHost::Configured { key: key.clone(), host, port })
                }
            })
            .collect();
        OutboundPolicy {
            allowed,
            limits,
            sent: 0,
            denials: Denials::default(),
            read_only: false,
            trace: None,
            counter: None,
            work: BackendWork::default(),
            tenant: None,
            tokens: Arc::new([]),
            // An `Arc`'s count, not new pools per call: a call's policy
            // is given the server's (`through`).
            connections: UNSHARED_CONNECTIONS.clone(),
        }
    }

    /// The same policy, its requests going out on `connections` (the
    /// server's pools) rather than on pools of its own.
    pub fn through(self, connections: &Connections) -> Self {
        OutboundPolicy { connections: connections.clone(), ..self }
    }

    /// The same policy, attaching each of `tokens` — a person's token and
    /// the `allowed-hosts` entries it goes to (written as in the manifest,
    /// `${config.KEY}` resolved with `config`) — to the requests to those
    /// hosts. A token that cannot be a header value, or whose hosts resolve
    /// to none, is attached to nothing.
    pub fn with_tokens(
        self,
        tokens: &[(Vec<HostPattern>, Vec<HostPattern>, String)],
        config: &BTreeMap<String, String>,
    ) -> Self {
        let tokens: Vec<PersonToken> = tokens
            .iter()
            .filter_map(|(patterns, bound, token)| {
                let hosts = OutboundPolicy::new(patterns, config, self.limits.clone()).allowed;
                let bound = OutboundPolicy::new(bound, &BTreeMap::new(), self.limits.clone()).allowed;
                (!hosts.is_empty()).then(|| PersonToken::new(hosts, bound, token)).flatten()
            })
            .collect();
        OutboundPolicy { tokens: tokens.into(), ..self }
    }

    /// The same policy, for a tool of `tenant`. A tool that declares no
    /// host resolves no name: it is spared the copy of the name.
    pub fn for_tenant(self, tenant: &str) -> Self {
        if self.allowed.is_empty() {
            return self;
        }
        OutboundPolicy { tenant: Some(Arc::from(tenant)), ..self }
    }

    /// The same policy, continuing the caller's trace: every request
    /// carries a `traceparent` — its own span's when spans are exported,
    /// else the caller's as it came.
    pub fn traced(self, trace: Option<CallerTrace>) -> Self {
        OutboundPolicy { trace, ..self }
    }

    /// The same policy, counting each request (by declared host and how it
    /// ended) in `counter`.
    pub fn counted(self, counter: Arc<dyn CountOutbound>) -> Self {
        OutboundPolicy { counter: Some(counter), ..self }
    }

    /// The same policy allowing only requests that read (`GET`, `HEAD`): for
    /// a tool's `describe`, which runs before anyone has confirmed the call
    /// and so must not act.
    pub fn read_only(self) -> Self {
        OutboundPolicy { read_only: true, ..self }
    }

    /// Where this invocation's refusals are recorded.
    pub fn denials(&self) -> Denials {
        self.denials.clone()
    }

    /// The time this invocation's requests were worked on outside its
    /// polls, as it goes.
    pub fn backend_work(&self) -> BackendWork {
        self.work.clone()
    }

    /// Whether a request to `authority` over `scheme` is allowed.
    pub fn allows(&self, scheme: Option<&str>, authority: &str) -> bool {
        self.entry_for(scheme, authority).is_some()
    }

    /// The manifest's entry that allows a request to `authority` over
    /// `scheme`, if one does.
    fn entry_for(&self, scheme: Option<&str>, authority: &str) -> Option<&AllowedHost> {
        matching(&self.allowed, scheme, authority)
    }

    fn count(&self, host: &str, status: OutboundStatus) {
        if let Some(counter) = &self.counter {
            counter.count(host, status);
        }
    }
}

/// `http://host:8080/path` → `("host", 8080)`, with the scheme's default port.
fn url_host_port(url: &str) -> Option<(String, u16)> {
    let (scheme, rest) = url.split_once("://")?;
    let default_port = match scheme.to_ascii_lowercase().as_str() {
        "http" => 80,
        "https" => 443,
        _ => return None,
    };
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let (host, port) = split_host_port(authority)?;
    (!host.is_empty()).then(|| (host.to_ascii_lowercase(), port.unwrap_or(default_port)))
}

impl WasiHttpHooks for OutboundPolicy {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> Box<
        dyn Future<
                Output = Result<
                    (http::Response<WasiBody>, Box<dyn Future<Output = Result<(), HttpError>> + Send>),
                    HttpError,
                >,
            > + Send,
    > {
        drop(fut);
        let uri = request.uri().clone();
        // Host and port only: a `user:password@` part is the tool's secret.
        let target = uri.authority().map_or_else(
            || "(no host)".to_string(),
            |a| a.port().map_or_else(|| a.host().to_string(), |port| format!("{}:{port}", a.host())),
        );
        // The manifest's entry that allows it: also what metrics and
        // traces name the host by.
        let entry = uri.authority().and_then(|a| self.entry_for(uri.scheme_str(), a.as_str()));
        let declared = entry.map_or_else(|| "undeclared".to_string(), AllowedHost::declared);
        let entry = entry.cloned();
        // Every attempt spends the budget, refused or not, so that a tool
        // cannot make requests without end by aiming them at what it may not
        // reach.
        self.sent = self.sent.saturating_add(1);
        let deny = |why: String| -> Box<dyn Future<Output = _> + Send> {
            self.denials.record(why);
            self.count(&declared, OutboundStatus::Denied);
            Box::new(async { Err(HttpError::HttpRequestDenied) })
        };
        if self.sent > self.limits.max_requests {
            self.denials.record_over_budget(format!(
                "more than {} outbound requests in one invocation",
                self.limits.max_requests
            ));
            self.count(&declared, OutboundStatus::Denied);
            return Box::new(async { Err(HttpError::HttpRequestDenied) });
        }
        let Some(entry) = entry else {
            return deny(format!("`{target}` is not among the hosts the tool declares"));
        };
        if self.read_only && !matches!(*request.method(), http::Method::GET | http::Method::HEAD) {
            return deny(format!(
                "a {} request to `{target}` while describing a call: before the end user confirms it, a tool may only read (GET, HEAD)",
                request.method()
            ));
        }
        // The person's token for this host, if it is one of an
        // `[[authorization]]` entry's: on the request in place of any the
        // tool set, out of the answer.
        let token = self.tokens.iter().find(|t| t.hosts.contains(&entry)).cloned();
        // Only to the hosts its provider names, when it names them.
        if let (Some(token), Some(authority)) = (&token, uri.authority())
            && !token.bound.is_empty()
            && matching(&token.bound, uri.scheme_str(), authority.as_str()).is_none()
        {
            return deny(format!(
                "`{target}` is not among the hosts the provider's `apiHosts` name: its end user's token goes nowhere else"
            ));
        }
        // Never in cleartext over a network: plain http only to this
        // machine (the stand-ins of tests and `make run`).
        if token.is_some() && uri.scheme_str() != Some("https") && !is_loopback_host(uri.host()) {
            return deny(format!(
                "`{target}` gets its end user's token, which goes only over https (plain http only to this machine)"
            ));
        }
        let mut request = request;
        if let Some(token) = &token {
            token.attach(&mut request);
        }
        let options = options.unwrap_or_default();
        let options = RequestOptions {
            connect_timeout: options.connect_timeout.or(Some(CONNECT_TIMEOUT)),
            first_byte_timeout: options.first_byte_timeout.or(Some(FIRST_BYTE_TIMEOUT)),
            between_bytes_timeout: options.between_bytes_timeout.or(Some(BETWEEN_BYTES_TIMEOUT)),
        };
        let span = self.trace_request(&mut request, &entry);
        let (limits, denials, counter) = (self.limits.clone(), self.denials.clone(), self.counter.clone());
        let (checked, tenant, connections) = (limits.clone(), self.tenant.clone(), self.connections.clone());
        let credential = token.as_ref().map(PersonToken::credential);
        let work = self.work.clone();
        let working_for = WorkingFor::call(&work);
        let sent = Timed::new(
            async move {
                let address =
                    check_addresses(&uri, &checked, connections.lookups(), &denials, tenant.as_deref()).await?;
                let destination = pool::Destination::of(&uri, address, credential)?;
                connections.send(tenant.as_ref(), destination, request, &options, &work).await
            },
            working_for,
        );
        Box::new(
            async move {
                let sent = sent.await;
                let status = match &sent {
                    Ok(response) => OutboundStatus::Answered(response.status().as_u16()),
                    Err(e) => OutboundStatus::of(e),
                };
                if let Some(counter) = counter {
                    counter.count(&declared, status);
                }
                let span = tracing::Span::current();
                match &sent {
                    Ok(response) => {
                        span.record("http.response.status_code", response.status().as_u16());
                        if response.status().is_client_error() || response.status().is_server_error() {
                            span.record("error.type", response.status().as_str());
                            span.record("otel.status_code", "ERROR");
                        }
                    }
                    Err(_) => {
                        span.record("error.type", status.as_str());
                        span.record("otel.status_code", "ERROR");
                    }
                }
                let response = sent?;
                let max = limits.max_response_bytes;
                let limited = move |body| {
                    http_body_util::Limited::new(body, max as usize)
                        .map_err(move |e| match e.downcast::<HttpError>() {
                            Ok(inner) => *inner,
                            Err(_) => HttpError::HttpResponseBodySize(Some(max)),
                        })
                        .boxed_unsync()
                };
                let response: http::Response<WasiBody> = match &token {
                    Some(token) => token.scrub(response).map(BodyExt::boxed_unsync),
                    None => response,
                };
                let response = response.map(limited);
                // The connection runs in a task of its own: nothing for
                // the call to drive.
                Ok((response, Box::new(async { Ok(()) }) as Box<dyn Future<Output = Result<(), HttpError>> + Send>))
            }
            .instrument(span),
        )
    }
}

impl OutboundPolicy {
    /// Gives `request` the trace context Plinth sends — never the tool's
    /// own: any `traceparent` or `tracestate` the tool set is replaced or
    /// removed. With spans exported, the request gets a span of its own
    /// (OpenTelemetry's semantic conventions for HTTP clients: method,
    /// the manifest `entry` that allowed it as the host, the port (unless the
    /// entry is a configured URL's), scheme and status; never the path,
    /// query or headers, which may carry the tool's inputs or secrets), a
    /// child of the tool's, and its `traceparent` names that span.
    /// Otherwise the caller's trace context is passed on as it came, if
    /// there is one.
    fn trace_request(&self, request: &mut http::Request<WasiBody>, entry: &AllowedHost) -> tracing::Span {
        use opentelemetry::trace::TraceContextExt as _;
        use tracing_opentelemetry::OpenTelemetrySpanExt as _;
        let span = if crate::telemetry::exporting() {
            let uri = request.uri();
            let port = uri.port_u16().unwrap_or(if uri.scheme_str() == Some("http") { 80 } else { 443 });
            tracing::info_span!(
                "outbound",
                otel.name = %request.method(),
                otel.kind = "client",
                otel.status_code = tracing::field::Empty,
                http.request.method = %request.method(),
                server.address = %entry.declared_host(),
                server.port = entry.shows_port().then_some(port),
                url.scheme = uri.scheme_str().unwrap_or("https"),
                http.response.status_code = tracing::field::Empty,
                error.type = tracing::field::Empty,
            )
        } else {
            tracing::Span::none()
        };
        let own = (!span.is_none()).then(|| span.context()).filter(|cx| cx.span().span_context().is_valid());
        let headers = request.headers_mut();
        match (own, &self.trace) {
            (Some(context), _) => crate::telemetry::inject(&context, headers),
            (None, Some(trace)) => crate::telemetry::inject(&trace.context(), headers),
            (None, None) => {
                headers.remove("traceparent");
                headers.remove("tracestate");
            }
        }
        span
    }
}

/// The pools of a policy given no others ([`OutboundPolicy::through`]):
/// tests', and the policies `with_tokens` makes to read patterns.
static UNSHARED_CONNECTIONS: LazyLock<Connections> = LazyLock::new(Connections::default);

/// The TLS client settings: the web's public roots (webpki-roots), so that a
/// server must prove it is the name the tool asked for.
static TLS: LazyLock<Option<Arc<rustls::ClientConfig>>> =
    LazyLock::new(|| outbound_tls(&[]).map_err(|e| tracing::error!(error = %e, "outbound TLS cannot be set up")).ok());

/// The TLS client settings for tools' `https`: the web's public roots
/// (webpki-roots) and the certificates of `extra_roots` (PEM: an
/// operator's own CA, `--outbound-ca-file`).
pub fn outbound_tls(extra_roots: &[u8]) -> Result<Arc<rustls::ClientConfig>, String> {
    use rustls::pki_types::{CertificateDer, pem::PemObject};
    let mut roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.into() };
    if !extra_roots.is_empty() {
        let mut added = 0;
        for certificate in CertificateDer::pem_slice_iter(extra_roots) {
            let certificate = certificate.map_err(|e| format!("not a PEM certificate: {e}"))?;
            roots.add(certificate).map_err(|e| format!("not a CA certificate rustls accepts: {e}"))?;
            added += 1;
        }
        if added == 0 {
            return Err("no certificate in it".into());
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// Resolves the request's host and refuses it unless every address is
/// public or in a network the operator allows. Returns the address to use.
async fn check_addresses(
    uri: &http::Uri,
    limits: &OutboundLimits,
    lookups: &crate::egress::lookups::NameLookups,
    denials: &Denials,
    tenant: Option<&str>,
) -> Result<std::net::SocketAddr, HttpError> {
    let authority = uri.authority().ok_or(HttpError::HttpRequestUriInvalid)?;
    let port = authority.port_u16().unwrap_or(if uri.scheme_str() == Some("http") { 80 } else { 443 });
    let host = authority.host().trim_start_matches('[').trim_end_matches(']');
    // Bounded in number and time, off the store's blocking pool.
    let addresses = match lookups.resolve_as(tenant, host, port).await {
        Ok(found) => found,
        Err(_) => return Err(HttpError::DnsError { rcode: None, info_code: None }),
    };
    let Some(first) = addresses.first().copied() else {
        return Err(HttpError::DnsError { rcode: None, info_code: None });
    };
    for address in &addresses {
        let ip = address.ip();
        if limits.refuses(ip) {
            // The address stays in the host's log: the caller learns only
            // that the name is off limits, not what the network behind it is.
            tracing::debug!(target: "plinth::outbound", %authority, %ip, "outbound request to an internal address refused");
            denials.record(format!(
                "`{authority}` resolves to an address on the host's own or a private network, which the operator does not allow"
            ));
            // The same answer as any other refusal.
            return Err(HttpError::HttpRequestDenied);
        }
    }
    Ok(first)
}

/// The entry of `allowed` that a request to `authority` over `scheme`
/// matches, if one does.
fn matching<'a>(allowed: &'a [AllowedHost], scheme: Option<&str>, authority: &str) -> Option<&'a AllowedHost> {
    let (host, port) = split_host_port(authority)?;
    let host = host.to_ascii_lowercase();
    let port = port.unwrap_or(if scheme == Some("http") { 80 } else { 443 });
    allowed.iter().find(|allowed| match allowed {
        AllowedHost::Exact { host: h, port: p } => *h == host && p.is_none_or(|p| p == port),
        AllowedHost::Configured { host: h, port: p, .. } => *h == host && *p == port,
        AllowedHost::Subdomains { suffix, port: p } => {
            host.len() > suffix.len() + 1
                && host.ends_with(suffix.as_str())
                && host[..host.len() - suffix.len()].ends_with('.')
                && p.is_none_or(|p| p == port)
        }
    })
}

/// Whether `host` names this machine: `localhost` or a loopback address.
fn is_loopback_host(host: Option<&str>) -> bool {
    let Some(host) = host else { return false };
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost") || bare.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::egress::lookups::TOOL_LOOKUPS;

    fn policy(entries: &[&str], config: &[(&str, &str)]) -> OutboundPolicy {
        let patterns: Vec<_> = entries.iter().map(|e| HostPattern::parse(e).unwrap()).collect();
        let config = config.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        OutboundPolicy::new(&patterns, &config, Default::default())
    }

    /// `request` sent to `address` on pools of its own, as the policy
    /// sends one once the address passed.
    async fn send_to(
        request: http::Request<WasiBody>,
        address: std::net::SocketAddr,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Result<http::Response<WasiBody>, HttpError> {
        let destination = pool::Destination::of(request.uri(), address, None)?;
        Connections::new(PoolSettings::default(), tls)
            .send(None, destination, request, &RequestOptions::default(), &BackendWork::default())
            .await
    }

    #[test]
    fn refusals_are_counted_not_kept() {
        let denials = Denials::default();
        assert_eq!(denials.summary(), None);
        for i in 0..100_000 {
            denials.record(format!("refusal {i}"));
        }
        denials.record_over_budget("over budget".into());
        denials.record_over_budget("over budget again".into());
        assert_eq!(denials.summary(), Some((100_002, "refusal 0".to_string())));
        assert_eq!(denials.reason().as_deref(), Some("over budget"), "the caller hears of the budget");
        assert_eq!(denials.first().as_deref(), Some("refusal 0"));
    }

    /// A backend on 127.0.0.1 that answers every request with the
    /// `Authorization` header it got, in its body and in a header.
    async fn reflecting_backend() -> u16 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") && stream.read_exact(&mut byte).await.is_ok() {
                        head.push(byte[0]);
                    }
                    let head = String::from_utf8_lossy(&head).to_string();
                    let seen = head
                        .lines()
                        .find_map(|l| l.strip_prefix("authorization: ").or_else(|| l.strip_prefix("Authorization: ")))
                        .unwrap_or("none")
                        .to_string();
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nx-seen: {seen}\r\nconnection: close\r\n\r\n{seen}",
                        seen.len()
                    );
                    let _ = stream.write_all(answer.as_bytes()).await;
                });
            }
        });
        port
    }

    async fn send(policy: &mut OutboundPolicy, url: &str, authorization: Option<&str>) -> (String, String) {
        let mut request = http::Request::get(url);
        if let Some(value) = authorization {
            request = request.header("authorization", value);
        }
        let request = request.body(http_body_util::Empty::new().map_err(|e| match e {}).boxed_unsync()).unwrap();
        let answer = Box::into_pin(policy.send_request(request, None, Box::new(async { Ok(()) }))).await;
        let (response, _io) = answer.unwrap_or_else(|e| panic!("{url}: {e:?}"));
        let header = response.headers()["x-seen"].to_str().unwrap().to_string();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (header, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn a_persons_token_goes_only_to_its_hosts_and_never_back_to_the_tool() {
        let (granted, other) = (reflecting_backend().await, reflecting_backend().await);
        let (granted_host, other_host) = (format!("127.0.0.1:{granted}"), format!("127.0.0.1:{other}"));
        let limits = OutboundLimits { allowed_private: vec!["127.0.0.0/8".parse().unwrap()], ..Default::default() };
        let patterns: Vec<_> = [&granted_host, &other_host].iter().map(|e| HostPattern::parse(e).unwrap()).collect();
        let token = vec![(vec![HostPattern::parse(&granted_host).unwrap()], Vec::new(), "tok_SECRET_123".to_string())];
        let mut policy =
            OutboundPolicy::new(&patterns, &BTreeMap::new(), Arc::new(limits)).with_tokens(&token, &BTreeMap::new());
        // To its host: the person's token, in place of the tool's own, and
        // taken out of what the host answers (header and body).
        let (header, body) =
            send(&mut policy, &format!("http://{granted_host}/me"), Some("Bearer the-tools-own")).await;
        assert_eq!((header.as_str(), body.as_str()), ("Bearer **************", "Bearer **************"));
        let (header, _) = send(&mut policy, &format!("http://{granted_host}/me"), None).await;
        assert_eq!(header, "Bearer **************", "attached without the tool asking");
        // To another host the tool may reach: never, whatever the tool sets.
        let (header, body) = send(&mut policy, &format!("http://{other_host}/x"), Some("Bearer the-tools-own")).await;
        assert_eq!((header.as_str(), body.as_str()), ("Bearer the-tools-own", "Bearer the-tools-own"));
        let (header, _) = send(&mut policy, &format!("http://{other_host}/x"), None).await;
        assert_eq!(header, "none");
        assert!(!format!("{policy:?}").contains("SECRET"), "{policy:?}");

        // A provider that names its API's hosts (`apiHosts`): a host the
        // tool declares for the token but the provider does not name gets
        // nothing, the request is refused.
        let bound = vec![HostPattern::parse(&other_host).unwrap()];
        let token = vec![(vec![HostPattern::parse(&granted_host).unwrap()], bound, "tok_SECRET_123".to_string())];
        let limits = OutboundLimits { allowed_private: vec!["127.0.0.0/8".parse().unwrap()], ..Default::default() };
        let mut policy =
            OutboundPolicy::new(&patterns, &BTreeMap::new(), Arc::new(limits)).with_tokens(&token, &BTreeMap::new());
        let request = http::Request::get(format!("http://{granted_host}/me"))
            .body(http_body_util::Empty::new().map_err(|e| match e {}).boxed_unsync())
            .unwrap();
        let answer = Box::into_pin(policy.send_request(request, None, Box::new(async { Ok(()) }))).await;
        assert!(matches!(answer, Err(HttpError::HttpRequestDenied)));
        assert!(policy.denials().reason().is_some_and(|r| r.contains("apiHosts")), "{:?}", policy.denials().reason());
    }

    #[tokio::test]
    async fn a_persons_token_never_goes_in_cleartext_over_a_network() {
        let token =
            vec![(vec![HostPattern::parse("api.example.com").unwrap()], Vec::new(), "tok_SECRET_123".to_string())];
        let mut policy = policy(&["api.example.com"], &[]).with_tokens(&token, &BTreeMap::new());
        let request = http::Request::get("http://api.example.com/me")
            .body(http_body_util::Empty::new().map_err(|e| match e {}).boxed_unsync())
            .unwrap();
        let answer = Box::into_pin(policy.send_request(request, None, Box::new(async { Ok(()) }))).await;
        assert!(matches!(answer, Err(HttpError::HttpRequestDenied)));
        assert!(
            policy.denials().reason().is_some_and(|r| r.contains("only over https")),
            "{:?}",
            policy.denials().reason()
        );
        assert!(
            is_loopback_host(Some("127.0.0.1"))
                && is_loopback_host(Some("[::1]"))
                && is_loopback_host(Some("localhost"))
        );
        assert!(
            !is_loopback_host(Some("api.example.com"))
                && !is_loopback_host(Some("10.0.0.1"))
                && !is_loopback_host(None)
        );
    }

    #[tokio::test]
    async fn refused_requests_spend_the_budget() {
        let limits = OutboundLimits { max_requests: 3, ..Default::default() };
        let mut policy = policy(&["api.example.com"], &[]);
        policy.limits = Arc::new(limits);
        for _ in 0..5 {
            let request = http::Request::get("http://undeclared.example/")
                .body(http_body_util::Empty::new().map_err(|e| match e {}).boxed_unsync())
                .unwrap();
            let answer = Box::into_pin(policy.send_request(request, None, Box::new(async { Ok(()) }))).await;
            assert!(matches!(answer, Err(HttpError::HttpRequestDenied)));
        }
        let denials = policy.denials();
        assert_eq!(denials.summary().unwrap().0, 5);
        assert_eq!(denials.reason().as_deref(), Some("more than 3 outbound requests in one invocation"));
    }

    /// Where a tool's calls start counts what its requests cost outside
    /// its polls (`ToolHost::execute`): their work, not their wait. A
    /// refused request costs nothing; one answered after 300 ms of the
    /// backend's thinking counts the microseconds of its connecting,
    /// writing and reading, not the 300 ms (a bound wide enough for a
    /// debug build on a busy machine, and far below the wait).
    #[tokio::test]
    async fn a_calls_requests_count_their_work_not_their_wait() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let host = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut head = [0u8; 1024];
            let _ = tokio::io::AsyncReadExt::read(&mut stream, &mut head).await;
            tokio::time::sleep(Duration::from_millis(300)).await;
            let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
            tokio::io::AsyncWriteExt::write_all(&mut stream, answer).await.unwrap();
            tokio::time::sleep(Duration::from_secs(5)).await;
        });
        let limits =
            Arc::new(OutboundLimits { allowed_private: vec!["127.0.0.1/32".parse().unwrap()], ..Default::default() });
        let patterns = [HostPattern::parse(&host).unwrap()];
        let mut policy = OutboundPolicy::new(&patterns, &BTreeMap::new(), limits);
        let work = policy.backend_work();
        let request = |uri: &str| {
            http::Request::get(uri).body(http_body_util::Empty::new().map_err(|e| match e {}).boxed_unsync()).unwrap()
        };
        let refused = policy.send_request(request("http://undeclared.example/"), None, Box::new(async { Ok(()) }));
        assert!(Box::into_pin(refused).await.is_err());
        assert_eq!(work.spent(), Duration::ZERO, "refused: no work");
        let sent = policy.send_request(request(&format!("http://{host}/")), None, Box::new(async { Ok(()) }));
        let (response, _io) = Box::into_pin(sent).await.expect("answered");
        assert_eq!(&response.into_body().collect().await.unwrap().to_bytes()[..], b"ok");
        let spent = work.spent();
        assert!(spent > Duration::ZERO, "connecting and reading are work");
        assert!(spent < Duration::from_millis(150), "the backend's 300 ms are a wait, not work: {spent:?}");
    }

    #[tokio::test]
    async fn https_connects_to_the_checked_address_and_presents_the_name() {
        // `pinned.invalid` resolves nowhere: only the checked address can
        // be where the connection goes.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut stream, peer) = listener.accept().await.unwrap();
            let mut hello = vec![0; 4096];
            let n = tokio::io::AsyncReadExt::read(&mut stream, &mut hello).await.unwrap();
            hello.truncate(n);
            (peer, hello)
        });
        let request = http::Request::get("https://pinned.invalid/path")
            .body(http_body_util::Empty::new().map_err(|e| match e {}).boxed_unsync())
            .unwrap();
        let answer = send_to(request, address, TLS.clone()).await;
        assert!(answer.is_err(), "the listener closes without a handshake");
        let (peer, hello) = server.await.unwrap();
        assert!(peer.ip().is_loopback());
        assert_eq!(hello[0], 0x16, "a TLS handshake record");
        assert!(hello.windows(b"pinned.invalid".len()).any(|w| w == b"pinned.invalid"), "SNI names the host");
    }

    #[tokio::test]
    async fn https_works_end_to_end_against_the_checked_address() {
        // A server at 127.0.0.1 with a certificate for `pinned.test`, a name
        // that resolves nowhere: the request reaches it only through the
        // pinned address, and the handshake succeeds only if the name is
        // what TLS presents and verifies.
        let rcgen::CertifiedKey { cert, signing_key } =
            rcgen::generate_simple_self_signed(vec!["pinned.test".to_string()]).unwrap();
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(signing_key.serialize_der().into());
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let server_config = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let mut tls = acceptor.accept(tcp).await.unwrap();
            let sni = tls.get_ref().1.server_name().map(str::to_string);
            let mut head = Vec::new();
            let mut buf = [0; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = tokio::io::AsyncReadExt::read(&mut tls, &mut buf).await.unwrap();
                assert!(n > 0, "the request head ended early");
                head.extend_from_slice(&buf[..n]);
            }
            let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello";
            tokio::io::AsyncWriteExt::write_all(&mut tls, answer).await.unwrap();
            tokio::io::AsyncWriteExt::shutdown(&mut tls).await.unwrap();
            (sni, String::from_utf8_lossy(&head).into_owned())
        });

        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert.der().clone()).unwrap();
        let client_config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let tls = Arc::new(client_config);
        let request = http::Request::get("https://pinned.test/path?q=1")
            .header(http::header::HOST, "pinned.test")
            .body(http_body_util::Empty::new().map_err(|e| match e {}).boxed_unsync())
            .unwrap();
        let response = send_to(request, address, Some(tls.clone())).await.unwrap();
        assert_eq!(response.status(), 200);
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"hello");
        let (sni, head) = server.await.unwrap();
        assert_eq!(sni.as_deref(), Some("pinned.test"));
        assert!(head.starts_with("GET /path?q=1 HTTP/1.1\r\n"), "origin form on the wire: {head}");
        assert!(head.to_ascii_lowercase().contains("host: pinned.test\r\n"), "{head}");

        // The same server, asked for another name: the certificate does not
        // prove it, and the tool gets a certificate error.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let other = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(
                rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                    .with_safe_default_protocol_versions()
                    .unwrap()
                    .with_no_client_auth()
                    .with_single_cert(
                        vec![cert.der().clone()],
                        rustls::pki_types::PrivateKeyDer::Pkcs8(signing_key.serialize_der().into()),
                    )
                    .unwrap(),
            ));
            let _ = acceptor.accept(tcp).await;
        });
        let request = http::Request::get("https://internal.test/")
            .body(http_body_util::Empty::new().map_err(|e| match e {}).boxed_unsync())
            .unwrap();
        let answer = send_to(request, other, Some(tls)).await;
        assert!(matches!(answer, Err(HttpError::TlsCertificateError)), "{:?}", answer.err());
    }

    #[tokio::test]
    async fn a_failed_connection_keeps_its_kind_and_no_detail() {
        // A closed port: refused, a variant with no OS error or address in
        // it. The tool hears no more than that.
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let request = http::Request::get("http://api.example.com/")
            .body(http_body_util::Empty::new().map_err(|e| match e {}).boxed_unsync())
            .unwrap();
        let answer = send_to(request, closed, TLS.clone()).await;
        assert!(matches!(answer, Err(HttpError::ConnectionRefused)));
    }

    #[tokio::test]
    async fn loopback_is_refused_unless_the_operator_allows_it() {
        let uri: http::Uri = "http://127.0.0.1:9/".parse().unwrap();
        let denials = Denials::default();
        let closed = OutboundLimits::default();
        assert!(matches!(
            check_addresses(&uri, &closed, &TOOL_LOOKUPS, &denials, None).await,
            Err(HttpError::HttpRequestDenied)
        ));
        assert!(denials.first().unwrap().contains("127.0.0.1"));
        let open = OutboundLimits { allowed_private: vec!["127.0.0.0/8".parse().unwrap()], ..Default::default() };
        assert_eq!(
            check_addresses(&uri, &open, &TOOL_LOOKUPS, &Denials::default(), None).await.unwrap(),
            "127.0.0.1:9".parse().unwrap()
        );
        let localhost: http::Uri = "http://localhost:9/".parse().unwrap();
        assert!(
            check_addresses(&localhost, &closed, &TOOL_LOOKUPS, &Denials::default(), None).await.is_err(),
            "names are checked after resolution"
        );
    }

    #[test]
    fn exact_hosts_and_ports() {
        let p = policy(&["api.example.com", "pinned.example.com:8443"], &[]);
        assert!(p.allows(Some("https"), "api.example.com"));
        assert!(p.allows(Some("http"), "API.example.com:8080"));
        assert!(p.allows(Some("https"), "pinned.example.com:8443"));
        assert!(!p.allows(Some("https"), "pinned.example.com"));
        assert!(!p.allows(Some("https"), "example.com"));
        assert!(!p.allows(Some("https"), "api.example.com.evil.net"));
    }

    #[test]
    fn wildcards_match_subdomains_only() {
        let p = policy(&["*.example.com"], &[]);
        assert!(p.allows(Some("https"), "a.example.com"));
        assert!(p.allows(Some("https"), "a.b.example.com"));
        assert!(!p.allows(Some("https"), "example.com"));
        assert!(!p.allows(Some("https"), "badexample.com"));
    }

    #[test]
    fn config_urls_allow_their_host_and_port() {
        let p = policy(&["${config.backend-url}"], &[("backend-url", "http://127.0.0.1:8090/base")]);
        assert!(p.allows(Some("http"), "127.0.0.1:8090"));
        assert!(!p.allows(Some("http"), "127.0.0.1:8091"));
        assert!(!p.allows(Some("http"), "127.0.0.1"));
        let https = policy(&["${config.u}"], &[("u", "https://api.example.com")]);
        assert!(https.allows(Some("https"), "api.example.com"));
        let unset = policy(&["${config.backend-url}"], &[]);
        assert!(!unset.allows(Some("http"), "127.0.0.1:8090"));
        let not_a_url = policy(&["${config.u}"], &[("u", "file:///etc/passwd")]);
        assert!(!not_a_url.allows(Some("http"), "localhost"));
    }

    #[test]
    fn a_tool_cannot_set_the_trace_context_plinth_sends() {
        let forged = "00-11111111111111111111111111111111-2222222222222222-01";
        let request = || {
            http::Request::get("http://api.example.com/")
                .header("traceparent", forged)
                .header("tracestate", "tool=forged")
                .body(http_body_util::Empty::new().map_err(|e| match e {}).boxed_unsync())
                .unwrap()
        };
        // No caller's trace: the tool's headers are removed.
        let mut untraced = request();
        let entry = AllowedHost::Exact { host: "api.example.com".into(), port: None };
        policy(&["api.example.com"], &[]).trace_request(&mut untraced, &entry);
        assert!(!untraced.headers().contains_key("traceparent") && !untraced.headers().contains_key("tracestate"));
        // The caller's: it replaces them.
        let caller: http::HeaderMap = [(
            http::header::HeaderName::from_static("traceparent"),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".parse().unwrap(),
        )]
        .into_iter()
        .collect();
        let traced = policy(&["api.example.com"], &[]).traced(CallerTrace::from_headers(&caller));
        let mut replaced = request();
        traced.trace_request(&mut replaced, &entry);
        assert_eq!(replaced.headers()["traceparent"], "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        assert!(!replaced.headers().contains_key("tracestate"));
    }

    #[test]
    fn requests_are_named_by_the_entry_that_allows_them() {
        let p = policy(&["api.example.com", "*.example.org:8443", "${config.u}"], &[("u", "http://127.0.0.1:8090/x")]);
        let declared = |scheme, authority| p.entry_for(Some(scheme), authority).map(AllowedHost::declared);
        assert_eq!(declared("https", "API.example.com").as_deref(), Some("api.example.com"));
        assert_eq!(declared("https", "secret-value.example.org:8443").as_deref(), Some("*.example.org:8443"));
        // A configured URL is named by its entry, never by the URL.
        assert_eq!(declared("http", "127.0.0.1:8090").as_deref(), Some("${config.u}"));
        assert_eq!(
            p.entry_for(Some("http"), "127.0.0.1:8090").map(AllowedHost::declared_host).as_deref(),
            Some("${config.u}")
        );
        assert_eq!(declared("http", "127.0.0.1:8091"), None, "only the configured URL's port");
        assert_eq!(declared("https", "elsewhere.example"), None);
        let v6 = policy(&["[::1]:8080"], &[]);
        assert_eq!(v6.entry_for(Some("http"), "[::1]:8080").map(AllowedHost::declared).as_deref(), Some("[::1]:8080"));
    }

    #[test]
    fn nothing_is_allowed_by_default() {
        assert!(!OutboundPolicy::default().allows(Some("https"), "example.com"));
    }
}
