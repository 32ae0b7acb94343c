//! Resolving names that others choose (a tool's outbound hosts, OAuth
//! metadata documents and identity providers, confirmation servers' keys,
//! registries), bounded in number and time, and off the pool the store
//! needs.
//!
//! The system resolver (`getaddrinfo`, which reads /etc/hosts and
//! /etc/resolv.conf) blocks its thread and cannot be cancelled. Tokio's
//! `lookup_host` runs it on the blocking pool, which the store's calls
//! (`spawn_blocking`, `block_in_place`) need too, with no bound of its own:
//! names whose DNS never answers would hold those threads until the store
//! could get none. So each lookup runs on a thread of its own, at most
//! [`NameLookups::new`]'s `max` at once: a lookup past that is refused at
//! once ([`LookupError::Busy`]), never queued. A caller waits at most the
//! timeout ([`LookupError::TimedOut`]); the lookup's slot is given back when
//! the lookup itself ends, so threads stuck on a dead name are counted
//! until they end and can never grow past the bound.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

/// Lookups at once in each set (a thread each while it runs).
const MAX_LOOKUPS: usize = 32;
/// Tools' lookups at once for one tenant: a tenant whose tools name hosts
/// whose DNS never answers holds at most this share of [`TOOL_LOOKUPS`].
const MAX_TOOL_LOOKUPS_PER_TENANT: usize = 8;
/// The longest a caller waits for one lookup.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);
/// A lookup thread's stack: `getaddrinfo` needs little.
const LOOKUP_STACK: usize = 256 * 1024;

/// Lookups for tools' outbound requests.
pub(crate) static TOOL_LOOKUPS: LazyLock<NameLookups> = LazyLock::new(|| {
    NameLookups::new(MAX_LOOKUPS, LOOKUP_TIMEOUT, Arc::new(system_lookup)).per_key(MAX_TOOL_LOOKUPS_PER_TENANT)
});
/// Lookups for the host's own fetches of what an operator or a tenant
/// named (confirmation servers' keys, identity providers, registries): a
/// tool's dead names cannot take their slots.
pub(crate) static HOST_LOOKUPS: LazyLock<NameLookups> =
    LazyLock::new(|| NameLookups::new(MAX_LOOKUPS, LOOKUP_TIMEOUT, Arc::new(system_lookup)));
/// Lookups for names anyone may choose (OAuth client metadata documents):
/// a stranger's dead names take only these slots.
pub(crate) static STRANGER_LOOKUPS: LazyLock<NameLookups> =
    LazyLock::new(|| NameLookups::new(MAX_LOOKUPS, LOOKUP_TIMEOUT, Arc::new(system_lookup)));

/// How a name is looked up: the system's resolver, or a test's.
pub(crate) type LookupFn = Arc<dyn Fn(&str, u16) -> std::io::Result<Vec<SocketAddr>> + Send + Sync>;

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

/// A bounded set of lookups.
pub(crate) struct NameLookups {
    slots: Arc<tokio::sync::Semaphore>,
    timeout: Duration,
    lookup: LookupFn,
    /// Lookups running by key (a tenant), each held until its lookup ends.
    by_key: Arc<std::sync::Mutex<std::collections::HashMap<String, usize>>>,
    max_per_key: usize,
}

/// A key's share of the lookups running, given back when the lookup ends.
struct KeyShare {
    by_key: Arc<std::sync::Mutex<std::collections::HashMap<String, usize>>>,
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
        let share = match key {
            Some(key) if self.max_per_key != usize::MAX => {
                let mut by_key = self.by_key.lock().unwrap_or_else(|p| p.into_inner());
                let running = by_key.entry(key.to_string()).or_default();
                if *running >= self.max_per_key {
                    return Err(LookupError::Busy);
                }
                *running += 1;
                Some(KeyShare { by_key: self.by_key.clone(), key: key.to_string() })
            }
            _ => None,
        };
        let slot = self.slots.clone().try_acquire_owned().map_err(|_| LookupError::Busy)?;
        let (answer, answered) = tokio::sync::oneshot::channel();
        let lookup = self.lookup.clone();
        let name = host.to_string();
        std::thread::Builder::new()
            .name("plinth-lookup".into())
            .stack_size(LOOKUP_STACK)
            .spawn(move || {
                let found = lookup(&name, port);
                // Free before answering: the caller may look up again at once.
                drop((slot, share));
                let _ = answer.send(found);
            })
            // Not spawned: the closure, and with it the slot, is dropped.
            .map_err(|_| LookupError::Busy)?;
        match tokio::time::timeout(self.timeout, answered).await {
            Ok(Ok(Ok(found))) if !found.is_empty() => Ok(found),
            Ok(_) => Err(LookupError::Failed),
            Err(_) => Err(LookupError::TimedOut),
        }
    }
}

/// The system resolver.
fn system_lookup(host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
    use std::net::ToSocketAddrs;
    Ok((host, port).to_socket_addrs()?.collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lookup that never answers until `release` is dropped.
    fn hanging() -> (LookupFn, std::sync::mpsc::SyncSender<()>) {
        let (release, wait) = std::sync::mpsc::sync_channel::<()>(0);
        let wait = std::sync::Mutex::new(wait);
        let lookup: LookupFn = Arc::new(move |_: &str, _: u16| {
            let _ = wait.lock().unwrap_or_else(|p| p.into_inner()).recv();
            Err(std::io::Error::other("released"))
        });
        (lookup, release)
    }

    #[test]
    fn names_that_never_resolve_neither_starve_the_store_nor_pile_up() {
        // A blocking pool of two threads: two hung lookups on it would
        // leave the store none.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .max_blocking_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let (lookup, release) = hanging();
            // A timeout no test waits for: a refusal is at once.
            let lookups = Arc::new(NameLookups::new(2, Duration::from_secs(3600), lookup));
            let mut hung = Vec::new();
            for name in ["dead-1.example", "dead-2.example"] {
                let lookups = lookups.clone();
                hung.push(tokio::spawn(async move { lookups.resolve(name, 443).await }));
            }
            // Both lookups hold their slots.
            while lookups.slots.available_permits() > 0 {
                tokio::task::yield_now().await;
            }
            // The store's calls still get threads.
            let store_call = tokio::task::spawn_blocking(|| 7);
            let answered = tokio::time::timeout(Duration::from_secs(60), store_call).await;
            assert_eq!(answered.ok().and_then(Result::ok), Some(7), "a store call found no thread");
            // The third lookup is refused at once, not queued.
            assert!(matches!(lookups.resolve("dead-3.example", 443).await, Err(LookupError::Busy)));
            // An address needs no lookup.
            assert_eq!(lookups.resolve("127.0.0.1", 9).await.unwrap(), ["127.0.0.1:9".parse().unwrap()]);
            // Once the lookups end, their slots are free again.
            drop(release);
            for lookup in hung {
                assert!(matches!(lookup.await.unwrap(), Err(LookupError::Failed)));
            }
            assert_eq!(lookups.slots.available_permits(), 2);
        });
    }

    #[tokio::test]
    async fn a_lookup_that_outlives_its_timeout_keeps_its_slot_until_it_ends() {
        let (lookup, release) = hanging();
        let lookups = NameLookups::new(1, Duration::from_millis(1), lookup);
        assert!(matches!(lookups.resolve("dead.example", 443).await, Err(LookupError::TimedOut)));
        assert!(matches!(lookups.resolve("other.example", 443).await, Err(LookupError::Busy)));
        drop(release);
        while lookups.slots.available_permits() == 0 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn one_tenants_dead_names_hold_only_its_share_of_the_tools_lookups() {
        let (lookup, release) = hanging();
        let lookups = NameLookups::new(4, Duration::from_millis(1), lookup).per_key(2);
        for name in ["dead-1.example", "dead-2.example"] {
            assert!(matches!(lookups.resolve_as(Some("noisy"), name, 443).await, Err(LookupError::TimedOut)));
        }
        // Its two lookups still hang: the tenant's share is spent, the set's is not.
        assert!(matches!(lookups.resolve_as(Some("noisy"), "dead-3.example", 443).await, Err(LookupError::Busy)));
        assert!(matches!(lookups.resolve_as(Some("quiet"), "slow.example", 443).await, Err(LookupError::TimedOut)));
        assert_eq!(lookups.slots.available_permits(), 1, "noisy holds two, quiet one");
        drop(release);
        while lookups.slots.available_permits() < 4 {
            tokio::task::yield_now().await;
        }
        // Once its lookups ended, nothing of the tenant is left counted.
        while !lookups.by_key.lock().unwrap().is_empty() {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn the_system_resolver_reads_the_hosts_file() {
        let found = HOST_LOOKUPS.resolve("localhost", 9).await.unwrap();
        assert!(found.iter().all(|a| a.ip().is_loopback() && a.port() == 9), "{found:?}");
    }
}
