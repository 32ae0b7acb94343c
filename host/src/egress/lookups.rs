//! Resolving names that others choose (a tool's outbound hosts, OAuth
//! metadata documents and identity providers, confirmation servers' keys,
//! registries), bounded in number and time, and given up the moment their
//! request goes away.
//!
//! The system resolver (`getaddrinfo`) blocks its thread and cannot be
//! cancelled: a lookup of a name whose DNS never answers held its slot for
//! as long as the resolver's retries lasted (ten seconds and more), long
//! after the request that asked had gone, so a stranger who named dead
//! hosts and hung up at once could keep every slot taken. So names are
//! resolved here by an asynchronous stub resolver (hickory-dns) that reads
//! the same files — `/etc/hosts` first, then the name servers, search
//! domains and options of `/etc/resolv.conf` — and runs on a thread of its
//! own (no tool's low-priority thread ever drives it). A lookup is a task
//! there that is aborted when its caller's future is dropped; its slot is
//! a guard held by that future, so a request that goes away gives its slot
//! back at once.
//!
//! Each set ([`TOOL_LOOKUPS`], [`HOST_LOOKUPS`], [`STRANGER_LOOKUPS`]) runs
//! at most [`MAX_LOOKUPS`] at once, refusing one past that at once
//! ([`LookupError::Busy`]), never queueing it; the tools' set also holds
//! each tenant to its share. A caller waits at most [`LOOKUP_TIMEOUT`]
//! ([`LookupError::TimedOut`]). Each set's resolver caches answers for no
//! longer than their TTL (at most [`MAX_ANSWER_TTL`]) in a bounded cache of
//! its own (a stranger's made-up names never evict a tool's), and reads
//! the two files again when they change (checked every
//! [`FILES_CHECK_INTERVAL`]).

use hickory_resolver::TokioResolver;
use hickory_resolver::config::{LookupIpStrategy, ResolveHosts, ResolverConfig, ResolverOpts};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// Lookups at once in each set.
const MAX_LOOKUPS: usize = 32;
/// Tools' lookups at once for one tenant: a tenant whose tools name hosts
/// whose DNS never answers holds at most this share of [`TOOL_LOOKUPS`].
const MAX_TOOL_LOOKUPS_PER_TENANT: usize = 8;
/// The longest a caller waits for one lookup.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the resolver waits for one name server's answer, and how many
/// times it asks again: together within [`LOOKUP_TIMEOUT`].
const QUERY_TIMEOUT: Duration = Duration::from_secs(2);
const QUERY_RETRIES: usize = 1;
/// Answers cached at most (responses, each a name's records of one type).
const CACHED_ANSWERS: u64 = 1024;
/// The longest an answer is cached, whatever its TTL says.
const MAX_ANSWER_TTL: Duration = Duration::from_secs(300);
/// The longest a name's absence (`NXDOMAIN`) is cached.
const MAX_ABSENCE_TTL: Duration = Duration::from_secs(30);
/// How often the resolver looks whether `/etc/hosts` or `/etc/resolv.conf`
/// changed.
const FILES_CHECK_INTERVAL: Duration = Duration::from_secs(5);
const RESOLV_CONF: &str = "/etc/resolv.conf";
const HOSTS: &str = "/etc/hosts";

/// Lookups for tools' outbound requests.
pub(crate) static TOOL_LOOKUPS: LazyLock<NameLookups> = LazyLock::new(|| {
    NameLookups::new(MAX_LOOKUPS, LOOKUP_TIMEOUT, system_lookups()).per_key(MAX_TOOL_LOOKUPS_PER_TENANT)
});
/// Lookups for the host's own fetches of what an operator or a tenant
/// named (confirmation servers' keys, identity providers, registries): a
/// tool's dead names cannot take their slots.
pub(crate) static HOST_LOOKUPS: LazyLock<NameLookups> =
    LazyLock::new(|| NameLookups::new(MAX_LOOKUPS, LOOKUP_TIMEOUT, system_lookups()));
/// Lookups for names anyone may choose (OAuth client metadata documents):
/// a stranger's dead names take only these slots, and only while the
/// stranger's requests last.
pub(crate) static STRANGER_LOOKUPS: LazyLock<NameLookups> =
    LazyLock::new(|| NameLookups::new(MAX_LOOKUPS, LOOKUP_TIMEOUT, system_lookups()));

/// How a name is looked up: the system's files and name servers, or a
/// test's. The future is dropped when its caller goes away, which must end
/// the lookup.
pub(crate) type LookupFn = Arc<dyn Fn(&str, u16) -> Lookup + Send + Sync>;
/// A lookup under way.
pub(crate) type Lookup = std::pin::Pin<Box<dyn Future<Output = std::io::Result<Vec<SocketAddr>>> + Send>>;

/// Why a name gave no addresses.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    /// As many lookups as allowed are running.
    #[error("too many name lookups at once")]
    Busy,
    /// The lookup took longer than allowed.
    #[error("the name lookup timed out")]
    TimedOut,
    /// The resolver answered with an error (or no addresses).
    #[error("the name did not resolve")]
    Failed,
}

/// Lookups running, by key (a tenant).
type RunningByKey = Arc<Mutex<std::collections::HashMap<String, usize>>>;

/// A bounded set of lookups.
pub(crate) struct NameLookups {
    slots: Arc<tokio::sync::Semaphore>,
    timeout: Duration,
    lookup: LookupFn,
    by_key: RunningByKey,
    max_per_key: usize,
}

/// A key's share of the lookups running, given back when the lookup ends
/// or its caller goes away.
struct KeyShare {
    by_key: RunningByKey,
    key: String,
}

impl Drop for KeyShare {
    fn drop(&mut self) {
        let mut by_key = self.by_key.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(running) = by_key.get_mut(&self.key) {
            *running = running.saturating_sub(1);
            if *running == 0 {
                by_key.remove(&self.key);
            }
        }
    }
}

impl NameLookups {
    /// At most `max` lookups at once, each waited for at most `timeout`.
    pub(crate) fn new(max: usize, timeout: Duration, lookup: LookupFn) -> NameLookups {
        NameLookups {
            slots: Arc::new(tokio::sync::Semaphore::new(max.max(1))),
            timeout,
            lookup,
            by_key: Arc::default(),
            max_per_key: usize::MAX,
        }
    }

    /// The same set, where one key (a tenant) holds at most `max` lookups.
    pub(crate) fn per_key(self, max: usize) -> NameLookups {
        NameLookups { max_per_key: max.max(1), ..self }
    }

    /// The addresses of `host` (with `port`). An address literal is its own
    /// answer and takes no slot.
    pub(crate) async fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, LookupError> {
        self.resolve_as(None, host, port).await
    }

    /// [`NameLookups::resolve`] for `key` (a tenant), which may have at
    /// most the set's share per key running.
    pub(crate) async fn resolve_as(
        &self,
        key: Option<&str>,
        host: &str,
        port: u16,
    ) -> Result<Vec<SocketAddr>, LookupError> {
        if let Ok(ip) = host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
            return Ok(vec![SocketAddr::new(ip, port)]);
        }
        // Both guards live in this future: dropped with it, whether the
        // lookup ended or the caller went away.
        let _share = match key {
            Some(key) if self.max_per_key != usize::MAX => Some(self.share(key)?),
            _ => None,
        };
        let _slot = self.slots.clone().try_acquire_owned().map_err(|_| LookupError::Busy)?;
        match tokio::time::timeout(self.timeout, (self.lookup)(host, port)).await {
            Ok(Ok(found)) if !found.is_empty() => Ok(found),
            Ok(_) => Err(LookupError::Failed),
            Err(_) => Err(LookupError::TimedOut),
        }
    }

    /// One more lookup of `key`'s, unless it has its share running.
    fn share(&self, key: &str) -> Result<KeyShare, LookupError> {
        let mut by_key = self.by_key.lock().unwrap_or_else(|p| p.into_inner());
        let running = by_key.entry(key.to_string()).or_default();
        if *running >= self.max_per_key {
            return Err(LookupError::Busy);
        }
        *running += 1;
        Ok(KeyShare { by_key: self.by_key.clone(), key: key.to_string() })
    }
}

/// The thread the resolver runs on: its tasks (the lookups, and hickory's
/// own for each name server) are never driven by a tool's thread, whose
/// priority may be low. `None` if it could not be started: every lookup
/// fails.
static RESOLVER_THREAD: LazyLock<Option<tokio::runtime::Runtime>> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("plinth-dns")
        .enable_all()
        .build()
        .inspect_err(|e| tracing::error!(error = %e, "no thread for name lookups: names will not resolve"))
        .ok()
});

/// A resolver built from the files as they were when it was built.
struct Loaded {
    resolver: TokioResolver,
    files: [Option<SystemTime>; 2],
    checked: Instant,
}

/// When `/etc/resolv.conf` and `/etc/hosts` were last modified.
fn files_modified() -> [Option<SystemTime>; 2] {
    [RESOLV_CONF, HOSTS].map(|path| std::fs::metadata(path).and_then(|m| m.modified()).ok())
}

/// The system's resolver of one set (its own cache), built again when its
/// files change.
#[derive(Default)]
struct SystemResolver(Mutex<Option<Loaded>>);

impl SystemResolver {
    /// The resolver for the files as they are now (looked at again at most
    /// every [`FILES_CHECK_INTERVAL`]).
    fn current(&self) -> TokioResolver {
        let mut loaded = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(current) = loaded.as_mut() {
            if current.checked.elapsed() < FILES_CHECK_INTERVAL {
                return current.resolver.clone();
            }
            current.checked = Instant::now();
            if files_modified() == current.files {
                return current.resolver.clone();
            }
        }
        let files = files_modified();
        let resolver = system_resolver();
        *loaded = Some(Loaded { resolver: resolver.clone(), files, checked: Instant::now() });
        resolver
    }
}

/// A resolver from `/etc/resolv.conf` and `/etc/hosts`, with Plinth's
/// bounds. Without a readable `resolv.conf` (or one naming no name
/// server), names resolve from the hosts file only: it never falls back to
/// name servers the operator did not choose.
fn system_resolver() -> TokioResolver {
    let mut builder = TokioResolver::builder_tokio().unwrap_or_else(|e| {
        tracing::error!(error = %e, file = RESOLV_CONF, "no name servers: names resolve from /etc/hosts only");
        TokioResolver::builder_with_config(
            ResolverConfig::from_parts(None, vec![], vec![]),
            TokioRuntimeProvider::default(),
        )
    });
    bound(builder.options_mut());
    let resolved = builder.build();
    resolved.unwrap_or_else(|e| {
        tracing::error!(error = %e, "the name resolver could not be set up: names resolve from /etc/hosts only");
        let mut options = ResolverOpts::default();
        bound(&mut options);
        TokioResolver::builder_with_config(
            ResolverConfig::from_parts(None, vec![], vec![]),
            TokioRuntimeProvider::default(),
        )
        .with_options(options)
        .build()
        .unwrap_or_else(|_| unreachable!("a resolver without name servers always builds"))
    })
}

/// Plinth's bounds on the system's options: its timeouts within
/// [`LOOKUP_TIMEOUT`], the cache's size and lifetimes, both address
/// families, the hosts file first.
fn bound(options: &mut ResolverOpts) {
    options.timeout = options.timeout.min(QUERY_TIMEOUT);
    options.attempts = options.attempts.min(QUERY_RETRIES);
    options.cache_size = CACHED_ANSWERS;
    options.positive_max_ttl = Some(MAX_ANSWER_TTL);
    options.negative_max_ttl = Some(MAX_ABSENCE_TTL);
    options.ip_strategy = LookupIpStrategy::Ipv4thenIpv6;
    options.use_hosts_file = ResolveHosts::Always;
}

/// Lookups of the system's files and name servers with a resolver (and a
/// cache) of their own: each on the resolver's thread, aborted when the
/// future is dropped.
fn system_lookups() -> LookupFn {
    let resolver = Arc::new(SystemResolver::default());
    Arc::new(move |host: &str, port: u16| system_lookup(resolver.clone(), host, port))
}

fn system_lookup(resolver: Arc<SystemResolver>, host: &str, port: u16) -> Lookup {
    let Some(thread) = RESOLVER_THREAD.as_ref() else {
        return Box::pin(async { Err(std::io::Error::other("no thread for name lookups")) });
    };
    let name = host.to_string();
    let task = AbortOnDrop(thread.spawn(async move {
        let found = resolver.current().lookup_ip(name.as_str()).await.map_err(std::io::Error::other)?;
        Ok(found.iter().map(|ip| SocketAddr::new(ip, port)).collect())
    }));
    Box::pin(async move {
        let mut task = task;
        (&mut task.0).await.map_err(std::io::Error::other)?
    })
}

/// Lookups through the name server at `server` alone (no hosts file),
/// with the system's bounds and a cache of their own: tests' stand-in for
/// a DNS whose answers change.
#[cfg(test)]
pub(crate) fn name_server_lookups(server: SocketAddr) -> LookupFn {
    use hickory_resolver::config::NameServerConfig;
    let mut name_server = NameServerConfig::udp(server.ip());
    for connection in &mut name_server.connections {
        connection.port = server.port();
    }
    let mut options = ResolverOpts::default();
    bound(&mut options);
    options.use_hosts_file = ResolveHosts::Never;
    let resolver = TokioResolver::builder_with_config(
        ResolverConfig::from_parts(None, vec![], vec![name_server]),
        TokioRuntimeProvider::default(),
    )
    .with_options(options)
    .build()
    .expect("a resolver");
    Arc::new(move |host: &str, port: u16| {
        let (resolver, name) = (resolver.clone(), host.to_string());
        Box::pin(async move {
            let found = resolver.lookup_ip(name.as_str()).await.map_err(std::io::Error::other)?;
            Ok(found.iter().map(|ip| SocketAddr::new(ip, port)).collect())
        })
    })
}

/// A task that is aborted when this is dropped (its caller went away).
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lookup that never answers, and counts the lookups running (a
    /// lookup dropped by its caller stops counting).
    fn never_answers() -> (LookupFn, Arc<std::sync::atomic::AtomicUsize>) {
        let running = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = running.clone();
        let lookup: LookupFn = Arc::new(move |_: &str, _: u16| {
            let running = counted.clone();
            Box::pin(async move {
                struct Running(Arc<std::sync::atomic::AtomicUsize>);
                impl Drop for Running {
                    fn drop(&mut self) {
                        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                    }
                }
                running.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let _running = Running(running);
                std::future::pending::<()>().await;
                Ok(Vec::new())
            })
        });
        (lookup, running)
    }

    #[tokio::test]
    async fn a_lookup_past_the_bound_is_refused_at_once_and_one_that_outlives_its_timeout_ends_with_it() {
        let (lookup, _running) = never_answers();
        // A timeout no test waits for: a refusal is at once.
        let lookups = Arc::new(NameLookups::new(2, Duration::from_secs(3600), lookup.clone()));
        let mut hung = Vec::new();
        for name in ["dead-1.example", "dead-2.example"] {
            let lookups = lookups.clone();
            hung.push(tokio::spawn(async move { lookups.resolve(name, 443).await }));
        }
        while lookups.slots.available_permits() > 0 {
            tokio::task::yield_now().await;
        }
        assert!(matches!(lookups.resolve("dead-3.example", 443).await, Err(LookupError::Busy)));
        // An address needs no lookup.
        assert_eq!(lookups.resolve("127.0.0.1", 9).await.unwrap(), ["127.0.0.1:9".parse().unwrap()]);
        // A lookup that times out gives its slot back with it.
        let quick = NameLookups::new(1, Duration::from_millis(1), lookup);
        assert!(matches!(quick.resolve("dead.example", 443).await, Err(LookupError::TimedOut)));
        assert_eq!(quick.slots.available_permits(), 1);
        for lookup in hung {
            lookup.abort();
        }
    }

    #[tokio::test]
    async fn a_caller_that_goes_away_ends_its_lookup_and_gives_its_slot_back_at_once() {
        let (lookup, running) = never_answers();
        let lookups = Arc::new(NameLookups::new(2, Duration::from_secs(3600), lookup).per_key(1));
        let caller = {
            let lookups = lookups.clone();
            tokio::spawn(async move { lookups.resolve_as(Some("noisy"), "dead.example", 443).await })
        };
        while running.load(std::sync::atomic::Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        assert!(matches!(lookups.resolve_as(Some("noisy"), "other.example", 443).await, Err(LookupError::Busy)));
        caller.abort();
        let _ = caller.await;
        assert_eq!(running.load(std::sync::atomic::Ordering::SeqCst), 0, "the lookup ended with its caller");
        assert_eq!(lookups.slots.available_permits(), 2);
        assert!(lookups.by_key.lock().unwrap().is_empty(), "nothing of the tenant is left counted");
    }

    #[tokio::test]
    async fn one_tenants_dead_names_hold_only_its_share_of_the_tools_lookups() {
        let (lookup, _running) = never_answers();
        let lookups = Arc::new(NameLookups::new(4, Duration::from_secs(3600), lookup).per_key(2));
        let mut hung = Vec::new();
        for name in ["dead-1.example", "dead-2.example"] {
            let lookups = lookups.clone();
            hung.push(tokio::spawn(async move { lookups.resolve_as(Some("noisy"), name, 443).await }));
        }
        while lookups.slots.available_permits() > 2 {
            tokio::task::yield_now().await;
        }
        // The tenant's share is spent, the set's is not.
        assert!(matches!(lookups.resolve_as(Some("noisy"), "dead-3.example", 443).await, Err(LookupError::Busy)));
        let quiet =
            tokio::time::timeout(Duration::from_millis(10), lookups.resolve_as(Some("quiet"), "slow.example", 443));
        assert!(quiet.await.is_err(), "quiet's lookup ran (and timed out here)");
        assert_eq!(lookups.slots.available_permits(), 2, "noisy holds two, and quiet's ended with its caller");
        for lookup in hung {
            lookup.abort();
        }
    }

    #[tokio::test]
    async fn the_system_resolver_reads_the_hosts_file() {
        let found = HOST_LOOKUPS.resolve("localhost", 9).await.unwrap();
        assert!(!found.is_empty() && found.iter().all(|a| a.ip().is_loopback() && a.port() == 9), "{found:?}");
    }
}
