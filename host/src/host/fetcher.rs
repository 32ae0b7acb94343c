//! Documents fetched from others' servers under the same rules as a tool's
//! outbound requests: the keys of tenants' external confirmation servers
//! (their JWKS URLs, for CHEQ), and for OAuth, clients' metadata documents
//! and external identity providers' discovery documents and key sets.
//!
//! The URL is a publisher's (or, for a client metadata document, anyone's),
//! and the fetch is set off by whoever posts an accept to a resource URI or
//! opens a sign-in page, so:
//! - only `https://` (plain `http://` only when the operator allows it);
//! - the name is resolved and every address must be public, unless a
//!   network the operator allows for tools (`--allow-private-cidr`) holds
//!   it; the connection goes to exactly the addresses checked (the client's
//!   resolver is the check), so a DNS answer that changes in between cannot
//!   redirect it; no proxy, no redirects;
//! - no user name or password in the URL (it would travel to the server
//!   and into logs); the log names only the URL's host;
//! - the body is capped;
//! - a key set is cached for a while (a bounded cache), so accepts do not
//!   each cost a fetch: a key the confirmation server revokes is trusted
//!   until its cached set expires. A failed fetch is cached too, for a
//!   shorter while, and one fetch per URL runs at a time (the others wait
//!   for its result), so accepts posted while a confirmation server fails
//!   cost it, and this server, one fetch per failure period, not one each;
//! - fetches are bounded: [`MAX_FETCHES`] at once for each fetcher and
//!   [`MAX_FETCHES_PER_CLIENT`] for one requester — the client address
//!   that set it off, or the tenant whose setting names the URL (a fetch
//!   over either is refused at once, never queued), and whatever a fetch
//!   holds (its place among the fetches in flight, its name lookup) is
//!   given back when the request that set it off goes away mid-fetch, not
//!   only when the fetch completes: each is held by a guard;
//! - a metadata document's host that could not be reached (its name did
//!   not resolve, nothing answered, too slow) is remembered, by host, for
//!   the failure period: made-up paths on one dead host cost one attempt
//!   per period, not one each.

use crate::egress::{CheckedResolver, OutboundLimits, caused_by_refusal, read_capped};
use serde_json::Value;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Key sets cached at most (one per tenant that has a confirmation server).
const MAX_CACHED: usize = 1024;
/// Time a whole fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// Fetches one fetcher runs at once (each holds a connection and a
/// resolution for up to [`FETCH_TIMEOUT`]).
pub(crate) const MAX_FETCHES: usize = 32;
/// Fetches set off by one requester (a client address, a tenant) at once.
pub(crate) const MAX_FETCHES_PER_CLIENT: usize = 4;

/// Who set a fetch off, for its share of the fetches in flight.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Requester<'a> {
    /// A client, by its address (its /64 for IPv6).
    Address(IpAddr),
    /// A tenant, whose own setting names the URL (its confirmation server).
    Tenant(&'a str),
}

impl Requester<'_> {
    fn key(self) -> String {
        match self {
            Requester::Address(ip) => {
                format!("address {}", crate::client_address::prefix(ip, crate::client_address::HOST_PREFIX))
            }
            Requester::Tenant(tenant) => format!("tenant {tenant}"),
        }
    }
}
/// The least time between two fetches of one URL that skip its cache
/// ([`JwksFetcher::refetch`]).
pub(crate) const REFETCH_INTERVAL: Duration = Duration::from_secs(30);

/// The operator's settings for fetching confirmation servers' keys.
#[derive(Debug, Clone)]
pub struct JwksOptions {
    /// Allow `http://` JWKS URLs (for tests and closed networks).
    pub allow_http: bool,
    /// Largest JWKS body read.
    pub max_bytes: usize,
    /// How long a fetched key set is trusted before it is fetched again.
    pub cache_ttl: Duration,
    /// How long a failed fetch is answered from the cache before it is
    /// tried again.
    pub failure_ttl: Duration,
}

impl Default for JwksOptions {
    fn default() -> Self {
        JwksOptions {
            allow_http: false,
            max_bytes: 64 * 1024,
            cache_ttl: Duration::from_secs(300),
            failure_ttl: Duration::from_secs(5),
        }
    }
}

/// Why a confirmation server's keys were not used.
#[derive(Debug, Clone, thiserror::Error)]
pub enum JwksError {
    /// Not `https://` (or not a URL at all).
    #[error(
        "the confirmation server's JWKS URL must be an https:// URL (this server accepts http:// only when its operator allows it)"
    )]
    Insecure,
    /// A user name or password in the URL.
    #[error(
        "the confirmation server's JWKS URL must not contain a user name or password; serve the key set without credentials"
    )]
    Credentials,
    /// An address on the host's own or a private network.
    #[error(
        "the confirmation server's JWKS URL leads to an address on this server's own or a private network, which its operator does not allow"
    )]
    InternalAddress,
    /// Larger than the cap.
    #[error("the confirmation server's JWKS is larger than {0} bytes")]
    TooLarge(usize),
    /// Not a JSON object with a `keys` array.
    #[error("the confirmation server's JWKS is not a JSON key set")]
    Invalid,
    /// Unreachable, or not answering `200`.
    #[error("the confirmation server's keys could not be fetched; nothing was decided, try again")]
    Unavailable,
}

/// A fetch's outcome, as cached.
type Fetched = Result<Arc<Value>, JwksError>;

/// Fetches and caches key sets.
pub(crate) struct JwksFetcher {
    options: JwksOptions,
    /// The outbound address policy tools' requests follow too.
    limits: Arc<OutboundLimits>,
    /// Built once (its TLS roots and pool); `None` if it could not be.
    client: Option<reqwest::Client>,
    /// By URL: when it was fetched, and the key set or the failure.
    cache: Mutex<HashMap<String, (Instant, Fetched)>>,
    /// By URL, while a fetch of it runs: whoever holds the lock fetches.
    flights: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// What a fetched document must be: a key set, or any JSON object.
    shape: fn(&Value) -> bool,
    /// Whether the answer must say it is JSON (`application/json` or a
    /// `+json` type), as metadata documents must.
    json_content_type: bool,
    /// Places for fetches running now.
    running: Arc<tokio::sync::Semaphore>,
    /// Fetches running now, by who set them off ([`Requester::key`]).
    by_requester: Mutex<HashMap<String, usize>>,
    /// By host (scheme, host and port), when it could last not be reached,
    /// for fetchers that remember failures by host (metadata documents);
    /// `None` for the others.
    unreachable: Option<Mutex<HashMap<String, Instant>>>,
    /// By URL: when it was last fetched past its cache ([`Self::refetch`]).
    refetched: Mutex<HashMap<String, Instant>>,
}

impl JwksFetcher {
    pub(crate) fn new(options: JwksOptions, limits: Arc<OutboundLimits>) -> JwksFetcher {
        let resolver = CheckedResolver::new(limits.clone());
        JwksFetcher::with_resolver(options, limits, resolver)
    }

    fn with_resolver(options: JwksOptions, limits: Arc<OutboundLimits>, resolver: CheckedResolver) -> JwksFetcher {
        let client = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .dns_resolver(Arc::new(resolver))
            .build()
            .inspect_err(|e| tracing::error!(error = %e, "no HTTP client for confirmation servers' keys"))
            .ok();
        JwksFetcher {
            options,
            limits,
            client,
            cache: Mutex::new(HashMap::new()),
            flights: Mutex::new(HashMap::new()),
            shape: |keys| keys["keys"].is_array(),
            json_content_type: false,
            running: Arc::new(tokio::sync::Semaphore::new(MAX_FETCHES)),
            by_requester: Mutex::new(HashMap::new()),
            unreachable: None,
            refetched: Mutex::new(HashMap::new()),
        }
    }

    /// A fetcher of JSON objects other than key sets (OAuth clients'
    /// metadata documents), under the same rules, capped at `max_bytes`
    /// ([`super::oauth::MAX_CLIENT_METADATA_BYTES`]); each must be
    /// answered `200` with a JSON content type.
    /// Anyone can name one, so their names are looked up apart from the
    /// host's ([`CheckedResolver::for_strangers`]).
    pub(crate) fn documents(options: JwksOptions, limits: Arc<OutboundLimits>, max_bytes: usize) -> JwksFetcher {
        let options = JwksOptions { max_bytes, ..options };
        let resolver = CheckedResolver::for_strangers(limits.clone());
        JwksFetcher {
            shape: Value::is_object,
            json_content_type: true,
            unreachable: Some(Mutex::new(HashMap::new())),
            ..JwksFetcher::with_resolver(options, limits, resolver)
        }
    }

    /// A fetcher of JSON objects of at most `max_bytes`.
    pub(crate) fn documents_of(options: JwksOptions, limits: Arc<OutboundLimits>, max_bytes: usize) -> JwksFetcher {
        let options = JwksOptions { max_bytes, ..options };
        JwksFetcher { shape: Value::is_object, json_content_type: true, ..JwksFetcher::new(options, limits) }
    }

    /// Whether `url` may be a JWKS URL at all (checked when a publisher
    /// sets it, and again at every fetch).
    pub(crate) fn check_url(&self, url: &str) -> Result<reqwest::Url, JwksError> {
        let url = reqwest::Url::parse(url).map_err(|_| JwksError::Insecure)?;
        if !url.username().is_empty() || url.password().is_some() {
            return Err(JwksError::Credentials);
        }
        match url.scheme() {
            "https" => {}
            "http" if self.options.allow_http => {}
            _ => return Err(JwksError::Insecure),
        }
        // The resolver checks names; an address in the URL is never resolved.
        let host = url.host_str().filter(|h| !h.is_empty()).ok_or(JwksError::Insecure)?;
        let literal = host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>().ok();
        if literal.is_some_and(|ip| self.limits.refuses(ip)) {
            return Err(JwksError::InternalAddress);
        }
        Ok(url)
    }

    /// The key set at `url`, from the cache while it is fresh (a failure
    /// for [`JwksOptions::failure_ttl`]); at most one fetch of a URL at a
    /// time.
    #[cfg(test)]
    pub(crate) async fn get(&self, url: &str) -> Fetched {
        self.get_for(url, None).await
    }

    /// [`JwksFetcher::get`] for a request set off by `requester`, which may
    /// have at most [`MAX_FETCHES_PER_CLIENT`] fetches running.
    pub(crate) async fn get_for(&self, url: &str, requester: Option<Requester<'_>>) -> Fetched {
        if let Some(cached) = self.cached(url) {
            return cached;
        }
        if self.host_unreachable(url) {
            return Err(JwksError::Unavailable);
        }
        let flight = Flight::join(self, url);
        let _fetching = flight.lock.lock().await;
        // Whoever held the lock before may have fetched it meanwhile.
        if let Some(cached) = self.cached(url) {
            return cached;
        }
        let Some(_place) = self.place(requester) else {
            tracing::warn!(host = %host_of(url), "a document fetch was refused: too many fetches at once");
            return Err(JwksError::Unavailable);
        };
        let fetched = self.fetch(url).await.map(Arc::new).inspect_err(|e| {
            tracing::warn!(host = %host_of(url), error = %e, "a fetched key set or document was not used");
        });
        self.remember(url, fetched.clone());
        fetched
    }

    /// A place for one more fetch (of `requester`, if named), given back
    /// when dropped; `None` when every place is taken.
    fn place(&self, requester: Option<Requester<'_>>) -> Option<Place<'_>> {
        let permit = self.running.clone().try_acquire_owned().ok()?;
        let requester = requester.map(Requester::key);
        if let Some(key) = &requester {
            let mut by_requester = self.requesters();
            let running = by_requester.entry(key.clone()).or_default();
            if *running >= MAX_FETCHES_PER_CLIENT {
                return None;
            }
            *running += 1;
        }
        Some(Place { fetcher: self, requester, _permit: permit })
    }

    fn requesters(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        self.by_requester.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `url`'s host could not be reached within the failure period
    /// (only for fetchers that remember failures by host).
    fn host_unreachable(&self, url: &str) -> bool {
        let Some(unreachable) = &self.unreachable else { return false };
        let Some(host) = host_key(url) else { return false };
        let failed = unreachable.lock().unwrap_or_else(|p| p.into_inner()).get(&host).copied();
        failed.is_some_and(|at| at.elapsed() < self.options.failure_ttl)
    }

    /// Remembers that `url`'s host could not be reached (a bounded table:
    /// when full of recent failures, the oldest is forgotten).
    fn remember_unreachable(&self, url: &reqwest::Url) {
        let Some(unreachable) = &self.unreachable else { return };
        let Some(host) = host_key(url.as_str()) else { return };
        let now = Instant::now();
        let mut unreachable = unreachable.lock().unwrap_or_else(|p| p.into_inner());
        if unreachable.len() >= MAX_CACHED && !unreachable.contains_key(&host) {
            let ttl = self.options.failure_ttl;
            unreachable.retain(|_, at| now.duration_since(*at) < ttl);
            if unreachable.len() >= MAX_CACHED
                && let Some(oldest) = unreachable.iter().min_by_key(|(_, at)| **at).map(|(k, _)| k.clone())
            {
                unreachable.remove(&oldest);
            }
        }
        unreachable.insert(host, now);
    }

    /// The cached outcome for `url` while it is fresh.
    fn cached(&self, url: &str) -> Option<Fetched> {
        let (fetched, outcome) = self.cache().get(url)?.clone();
        let ttl = if outcome.is_ok() { self.options.cache_ttl } else { self.options.failure_ttl };
        (fetched.elapsed() < ttl).then_some(outcome)
    }

    fn remember(&self, url: &str, outcome: Fetched) {
        let now = Instant::now();
        let (ttl, failure_ttl) = (self.options.cache_ttl, self.options.failure_ttl);
        let mut cache = self.cache();
        if cache.len() >= MAX_CACHED && !cache.contains_key(url) {
            cache.retain(|_, (fetched, outcome)| {
                now.duration_since(*fetched) < if outcome.is_ok() { ttl } else { failure_ttl }
            });
            if cache.len() >= MAX_CACHED
                && let Some(oldest) = cache.iter().min_by_key(|(_, (fetched, _))| *fetched).map(|(k, _)| k.clone())
            {
                cache.remove(&oldest);
            }
        }
        cache.insert(url.to_string(), (now, outcome));
    }

    /// Forgets the cached key set of `url` (its tenant changed servers).
    pub(crate) fn forget(&self, url: &str) {
        self.cache().remove(url);
    }

    /// The document at `url` fetched again past its cache (a key set that
    /// lacks the key a token names: its issuer may have rotated its keys),
    /// at most once per URL every [`REFETCH_INTERVAL`]: within it, the
    /// cached outcome. Anyone can send tokens naming made-up keys, so they
    /// cost the issuer, and this server, one fetch per interval, not one
    /// each. The fresh document replaces the cached one only when it was
    /// fetched: a failed refetch (the issuer's blip, made-up tokens sent
    /// while it fails) leaves the good key set in place.
    pub(crate) async fn refetch(&self, url: &str, requester: Option<Requester<'_>>) -> Fetched {
        if self.may_refetch(url, Instant::now())
            && let Some(_place) = self.place(requester)
        {
            match self.fetch(url).await {
                Ok(fresh) => {
                    let fetched = Ok(Arc::new(fresh));
                    self.remember(url, fetched.clone());
                    return fetched;
                }
                Err(e) => tracing::warn!(host = %host_of(url), error = %e, "a key set was not fetched again"),
            }
        }
        self.get_for(url, requester).await
    }

    /// Whether `url` may be fetched past its cache now (and if so, counts
    /// it). The table is bounded like the cache; when it is full of recent
    /// refetches, none is allowed.
    fn may_refetch(&self, url: &str, now: Instant) -> bool {
        let mut refetched = self.refetched.lock().unwrap_or_else(|p| p.into_inner());
        if refetched.get(url).is_some_and(|at| now.duration_since(*at) < REFETCH_INTERVAL) {
            return false;
        }
        if refetched.len() >= MAX_CACHED && !refetched.contains_key(url) {
            refetched.retain(|_, at| now.duration_since(*at) < REFETCH_INTERVAL);
            if refetched.len() >= MAX_CACHED {
                return false;
            }
        }
        refetched.insert(url.to_string(), now);
        true
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, Fetched)>> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn flights(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<tokio::sync::Mutex<()>>>> {
        self.flights.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn fetch(&self, url: &str) -> Result<Value, JwksError> {
        let url = self.check_url(url)?;
        let client = self.client.as_ref().ok_or(JwksError::Unavailable)?;
        let mut response = client.get(url.clone()).send().await.map_err(|e| {
            if caused_by_refusal(&e) {
                JwksError::InternalAddress
            } else {
                tracing::debug!(error = %e, "fetching a JWKS failed");
                if e.is_connect() || e.is_timeout() {
                    self.remember_unreachable(&url);
                }
                JwksError::Unavailable
            }
        })?;
        // Exactly 200 (the client metadata document draft §4; a 203 or 206
        // is not the document itself).
        if response.status() != reqwest::StatusCode::OK {
            return Err(JwksError::Unavailable);
        }
        if self.json_content_type && !is_json(response.headers()) {
            return Err(JwksError::Invalid);
        }
        let max = self.options.max_bytes;
        if response.content_length().is_some_and(|n| n > max as u64) {
            return Err(JwksError::TooLarge(max));
        }
        let body = read_capped(&mut response, max)
            .await
            .map_err(|_| JwksError::Unavailable)?
            .ok_or(JwksError::TooLarge(max))?;
        let document: Value = serde_json::from_slice(&body).map_err(|_| JwksError::Invalid)?;
        if !(self.shape)(&document) {
            return Err(JwksError::Invalid);
        }
        Ok(document)
    }
}

/// A request's share in the fetch of one URL: the flight's lock, whose
/// holder fetches. The last share dropped (the fetch done, or every
/// request waiting for it gone) takes the URL out of the flights.
struct Flight<'a> {
    fetcher: &'a JwksFetcher,
    url: &'a str,
    lock: Arc<tokio::sync::Mutex<()>>,
}

impl<'a> Flight<'a> {
    fn join(fetcher: &'a JwksFetcher, url: &'a str) -> Flight<'a> {
        let lock = fetcher.flights().entry(url.to_string()).or_default().clone();
        Flight { fetcher, url, lock }
    }
}

impl Drop for Flight<'_> {
    fn drop(&mut self) {
        let mut flights = self.fetcher.flights();
        // Shares are taken under this lock: one held by the map and this
        // one alone means no request is waiting on it.
        if flights.get(self.url).is_some_and(|lock| Arc::ptr_eq(lock, &self.lock) && Arc::strong_count(lock) <= 2) {
            flights.remove(self.url);
        }
    }
}

/// One running fetch's place, among the fetcher's and its requester's.
struct Place<'a> {
    fetcher: &'a JwksFetcher,
    requester: Option<String>,
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        let Some(key) = &self.requester else { return };
        let mut by_requester = self.fetcher.requesters();
        if let Some(running) = by_requester.get_mut(key) {
            *running = running.saturating_sub(1);
            if *running == 0 {
                by_requester.remove(key);
            }
        }
    }
}

/// A URL's scheme, host and port: what a failure to reach it is
/// remembered by.
fn host_key(url: &str) -> Option<String> {
    let url = reqwest::Url::parse(url).ok()?;
    Some(format!("{}://{}:{}", url.scheme(), url.host_str()?, url.port_or_known_default()?))
}

/// Whether an answer's `Content-Type` is JSON: `application/json` or a
/// `+json` type (`application/jwk-set+json`), any parameters.
fn is_json(headers: &reqwest::header::HeaderMap) -> bool {
    let Some(value) = headers.get(reqwest::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) else { return false };
    let essence = value.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// What the log may say of a JWKS URL: its host, never a user name,
/// password, path or query.
fn host_of(url: &str) -> String {
    reqwest::Url::parse(url).ok().and_then(|u| u.host_str().map(str::to_string)).unwrap_or_else(|| "?".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fetcher(allow_http: bool, allowed: &[&str]) -> JwksFetcher {
        let allowed_private = allowed.iter().map(|n| n.parse().unwrap()).collect();
        JwksFetcher::new(
            JwksOptions { allow_http, ..Default::default() },
            Arc::new(OutboundLimits { allowed_private, ..Default::default() }),
        )
    }

    #[test]
    fn only_https_unless_the_operator_allows_http() {
        let strict = fetcher(false, &[]);
        assert!(strict.check_url("https://confirm.example/jwks.json").is_ok());
        for bad in ["http://confirm.example/jwks.json", "file:///etc/passwd", "ftp://x/", "not a url", "https://"] {
            assert!(matches!(strict.check_url(bad), Err(JwksError::Insecure)), "{bad}");
        }
        assert!(fetcher(true, &[]).check_url("http://confirm.example/jwks.json").is_ok());
    }

    #[test]
    fn credentials_in_the_url_are_refused_and_never_logged() {
        let f = fetcher(false, &[]);
        for with in [
            "https://user:s3cret@confirm.example/jwks.json",
            "https://user@confirm.example/",
            "https://:s3cret@confirm.example/",
        ] {
            assert!(matches!(f.check_url(with), Err(JwksError::Credentials)), "{with}");
        }
        assert!(!JwksError::Credentials.to_string().contains("s3cret"));
        assert_eq!(host_of("https://user:s3cret@confirm.example/jwks.json?token=t"), "confirm.example");
    }

    #[tokio::test]
    async fn a_failure_is_cached_for_its_own_while() {
        let failing = JwksFetcher::new(
            JwksOptions { allow_http: true, failure_ttl: Duration::from_secs(3600), ..Default::default() },
            Arc::default(),
        );
        let url = "http://localhost:9/jwks.json";
        assert!(matches!(failing.get(url).await, Err(JwksError::InternalAddress)));
        assert!(matches!(failing.cached(url), Some(Err(JwksError::InternalAddress))), "the failure is kept");
        failing.forget(url);
        assert!(failing.cached(url).is_none());
        let retrying = JwksFetcher::new(
            JwksOptions { allow_http: true, failure_ttl: Duration::ZERO, ..Default::default() },
            Arc::default(),
        );
        assert!(retrying.get(url).await.is_err());
        assert!(retrying.cached(url).is_none(), "a zero failure time caches nothing");
        assert!(retrying.flights().is_empty(), "no fetch is left in flight");
    }

    async fn silent_server() -> String {
        format!("http://{}", crate::testing::silent_listener().await)
    }

    #[tokio::test]
    async fn a_fetch_abandoned_midway_leaves_nothing_behind() {
        let fetcher = Arc::new(fetcher(true, &["127.0.0.0/8"]));
        let base = silent_server().await;
        let client: IpAddr = "192.0.2.7".parse().unwrap();
        for i in 0..200 {
            let (fetcher, url) = (fetcher.clone(), format!("{base}/client-{i}.json"));
            let request = tokio::spawn(async move { fetcher.get_for(&url, Some(Requester::Address(client))).await });
            tokio::time::sleep(Duration::from_millis(2)).await;
            request.abort();
            let _ = request.await;
        }
        assert!(fetcher.flights().is_empty(), "no URL is left in flight");
        assert!(fetcher.requesters().is_empty(), "no client is left counted");
        assert_eq!(fetcher.running.available_permits(), MAX_FETCHES, "every place is given back");
    }

    #[tokio::test]
    async fn fetches_are_bounded_per_client_and_for_the_fetcher_refused_at_once_beyond() {
        let fetcher = Arc::new(fetcher(true, &["127.0.0.0/8"]));
        let base = silent_server().await;
        let start = |i: usize, client: &str| {
            let (fetcher, url, client) = (fetcher.clone(), format!("{base}/c-{i}.json"), client.parse().ok());
            tokio::spawn(async move { fetcher.get_for(&url, client.map(Requester::Address)).await })
        };
        let mut hanging: Vec<_> = (0..MAX_FETCHES_PER_CLIENT).map(|i| start(i, "192.0.2.1")).collect();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let started = Instant::now();
        let refused = start(100, "192.0.2.1").await.unwrap();
        assert!(matches!(refused, Err(JwksError::Unavailable)));
        assert!(started.elapsed() < Duration::from_secs(2), "refused at once, not after the fetch timeout");
        // Other clients fill the fetcher's places; past them anyone is refused.
        for i in MAX_FETCHES_PER_CLIENT..MAX_FETCHES {
            hanging.push(start(i, &format!("192.0.2.{}", 10 + i / MAX_FETCHES_PER_CLIENT)));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(fetcher.running.available_permits(), 0);
        assert!(matches!(start(200, "198.51.100.1").await.unwrap(), Err(JwksError::Unavailable)));
        for request in &hanging {
            request.abort();
        }
        for request in hanging {
            let _ = request.await;
        }
        assert_eq!(fetcher.running.available_permits(), MAX_FETCHES);
        assert!(fetcher.requesters().is_empty() && fetcher.flights().is_empty());
    }

    #[tokio::test]
    async fn one_tenants_fetches_hold_only_its_share_whoever_sets_them_off() {
        let fetcher = Arc::new(fetcher(true, &["127.0.0.0/8"]));
        let base = silent_server().await;
        let start = |i: usize, tenant: &'static str| {
            let (fetcher, url) = (fetcher.clone(), format!("{base}/jwks-{i}.json"));
            tokio::spawn(async move { fetcher.get_for(&url, Some(Requester::Tenant(tenant))).await })
        };
        let hanging: Vec<_> = (0..MAX_FETCHES_PER_CLIENT).map(|i| start(i, "noisy")).collect();
        while fetcher.running.available_permits() > MAX_FETCHES - MAX_FETCHES_PER_CLIENT {
            tokio::task::yield_now().await;
        }
        assert!(matches!(start(100, "noisy").await.unwrap(), Err(JwksError::Unavailable)), "its share is spent");
        let quiet = start(101, "quiet");
        while fetcher.running.available_permits() > MAX_FETCHES - MAX_FETCHES_PER_CLIENT - 1 {
            tokio::task::yield_now().await;
        }
        assert_eq!(fetcher.requesters().get("tenant quiet"), Some(&1), "another tenant's fetch runs");
        for request in hanging.iter().chain([&quiet]) {
            request.abort();
        }
        for request in hanging.into_iter().chain([quiet]) {
            let _ = request.await;
        }
        assert!(fetcher.requesters().is_empty());
    }

    #[tokio::test]
    async fn a_metadata_document_host_that_cannot_be_reached_is_remembered_by_host() {
        // A port nothing listens on: the connection is refused.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let limits =
            Arc::new(OutboundLimits { allowed_private: vec!["127.0.0.0/8".parse().unwrap()], ..Default::default() });
        let options = JwksOptions { allow_http: true, failure_ttl: Duration::from_secs(3600), ..Default::default() };
        let documents = JwksFetcher::documents(options, limits, 4096);
        let client = Some(Requester::Address("192.0.2.9".parse().unwrap()));
        let first = format!("http://127.0.0.1:{port}/clients/1.json");
        assert!(matches!(documents.get_for(&first, client).await, Err(JwksError::Unavailable)));
        // The host listens now; within the failure period, another path on
        // it is not tried.
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.unwrap();
        let other = format!("http://127.0.0.1:{port}/clients/2.json");
        assert!(matches!(documents.get_for(&other, client).await, Err(JwksError::Unavailable)));
        let connected = tokio::time::timeout(Duration::from_millis(300), listener.accept()).await;
        assert!(connected.is_err(), "the host was tried again within the failure period");
        // Another host is tried.
        assert!(!documents.host_unreachable(&format!("http://127.0.0.2:{port}/clients/1.json")));
        // Key sets (a tenant's confirmation server) are remembered by URL only.
        let keys = fetcher(true, &["127.0.0.0/8"]);
        assert!(keys.unreachable.is_none());
    }

    #[test]
    fn a_document_must_say_it_is_json() {
        let with = |value: &str| {
            let mut headers = reqwest::header::HeaderMap::new();
            headers.insert(reqwest::header::CONTENT_TYPE, value.parse().unwrap());
            is_json(&headers)
        };
        for good in
            ["application/json", "application/json; charset=utf-8", "Application/JSON", "application/jwk-set+json"]
        {
            assert!(with(good), "{good}");
        }
        for bad in ["text/html", "text/plain", "application/jsonp", "text/json+x"] {
            assert!(!with(bad), "{bad}");
        }
        assert!(!is_json(&reqwest::header::HeaderMap::new()));
    }

    #[test]
    fn internal_addresses_in_the_url_are_refused() {
        let strict = fetcher(true, &[]);
        for internal in ["http://127.0.0.1:9/", "https://169.254.169.254/", "https://[::1]/", "https://10.0.0.1/"] {
            assert!(matches!(strict.check_url(internal), Err(JwksError::InternalAddress)), "{internal}");
        }
        assert!(fetcher(true, &["127.0.0.0/8"]).check_url("http://127.0.0.1:9/").is_ok());
    }

    #[test]
    fn a_url_is_fetched_past_its_cache_at_most_once_an_interval() {
        let f = fetcher(false, &[]);
        let t0 = Instant::now();
        assert!(f.may_refetch("https://idp.example/jwks", t0));
        assert!(!f.may_refetch("https://idp.example/jwks", t0 + Duration::from_secs(29)));
        assert!(f.may_refetch("https://other.example/jwks", t0), "each URL has its own");
        assert!(f.may_refetch("https://idp.example/jwks", t0 + REFETCH_INTERVAL));
        // A full table of recent refetches allows no new one.
        for i in 0..MAX_CACHED {
            f.may_refetch(&format!("https://n{i}.example/jwks"), t0 + REFETCH_INTERVAL);
        }
        assert!(!f.may_refetch("https://new.example/jwks", t0 + REFETCH_INTERVAL));
        assert!(f.may_refetch("https://new.example/jwks", t0 + REFETCH_INTERVAL * 3));
    }

    #[tokio::test]
    async fn a_failed_refetch_keeps_the_key_set_it_had() {
        // A key set once, then failures.
        let served = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = served.clone();
        let app = axum::Router::new().route(
            "/jwks.json",
            axum::routing::get(move || {
                let first = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0;
                async move {
                    if first {
                        (axum::http::StatusCode::OK, r#"{"keys": [{"kid": "k1"}]}"#)
                    } else {
                        (axum::http::StatusCode::INTERNAL_SERVER_ERROR, "down")
                    }
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/jwks.json", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let f = fetcher(true, &["127.0.0.0/8"]);
        assert!(f.get(&url).await.is_ok());
        let again = f.refetch(&url, None).await.expect("the good key set is kept");
        assert_eq!(again["keys"][0]["kid"], "k1");
        assert_eq!(served.load(std::sync::atomic::Ordering::SeqCst), 2, "it was fetched again, and failed");
        assert!(f.get(&url).await.is_ok(), "the cache still holds the good set");
    }

    #[tokio::test]
    async fn names_that_resolve_to_internal_addresses_are_refused_before_connecting() {
        let strict = fetcher(true, &[]);
        assert!(matches!(strict.get("http://localhost:9/jwks.json").await, Err(JwksError::InternalAddress)));
    }
}
