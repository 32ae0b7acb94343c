//! What guards end users' passwords on the built-in confirmation page: a
//! bound on password hashing, and the throttle on failed logins.
//!
//! An Argon2id check costs 19 MiB and tens of milliseconds of a core, and
//! the login form is open to anyone. So:
//! - at most [`LoginOptions::max_concurrent_hashes`] hashes run at once
//!   (default: one per core); a login beyond that is refused at once
//!   ([`LoginError::Busy`]), never queued, so a flood costs the server a
//!   fixed amount of memory and CPU whatever its size;
//! - failed logins are counted per (tenant, user name) and per client
//!   address; past a threshold each further failure locks that key out for
//!   a time that doubles, up to a maximum ([`LoginError::Locked`]). A locked
//!   out attempt is refused before any hashing, even with the right
//!   password;
//! - the tables hold at most [`LoginOptions::max_tracked`] keys each; when
//!   full, the key whose last failure is oldest is forgotten. A user key is
//!   the sha256 of (tenant, name), fixed-size however long the names an
//!   anonymous caller makes up, so the tables cannot be grown to exhaust
//!   memory.
//!
//! Unknown tenants and user names are counted like known ones: the answers
//! (and their timing) say nothing about who exists.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The operator's settings for end-user logins.
#[derive(Debug, Clone)]
pub struct LoginOptions {
    /// Password hashes computed at once (logins and password changes).
    pub max_concurrent_hashes: usize,
    /// Failed logins of one user name (in one tenant) before it is locked
    /// out.
    pub user_failures: u32,
    /// Failed logins from one client address before it is locked out.
    pub address_failures: u32,
    /// The first lockout; each further failure doubles it.
    pub lockout_base: Duration,
    /// The longest lockout.
    pub lockout_max: Duration,
    /// Keys each throttle table remembers at most.
    pub max_tracked: usize,
}

impl Default for LoginOptions {
    fn default() -> Self {
        LoginOptions {
            max_concurrent_hashes: std::thread::available_parallelism().map_or(2, |n| n.get()),
            user_failures: 5,
            address_failures: 20,
            lockout_base: Duration::from_secs(1),
            lockout_max: Duration::from_secs(15 * 60),
            max_tracked: 10_000,
        }
    }
}

/// Why a login was refused.
#[derive(Debug, thiserror::Error)]
pub enum LoginError {
    /// The user name or the password is wrong (which one is not said).
    #[error("wrong user name or password")]
    Invalid,
    /// Too many failed logins for this user name or from this address.
    #[error("too many failed logins; try again in {} seconds", .retry_after.as_secs().max(1))]
    Locked {
        /// When a login may be tried again.
        retry_after: Duration,
    },
    /// Every password-hashing slot is taken.
    #[error("too many logins at once; try again in a moment")]
    Busy,
    /// The store failed.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

impl LoginError {
    /// Seconds to wait before trying again, for `Retry-After`.
    pub fn retry_after_secs(&self) -> Option<u64> {
        match self {
            LoginError::Locked { retry_after } => Some(retry_after.as_millis().div_ceil(1000).max(1) as u64),
            LoginError::Busy => Some(1),
            LoginError::Invalid | LoginError::Store(_) => None,
        }
    }
}

/// The hashing slots and both throttle tables.
pub(crate) struct LoginGuard {
    pub(crate) hashing: std::sync::Arc<tokio::sync::Semaphore>,
    users: Throttle<[u8; 32]>,
    addresses: Throttle<IpAddr>,
}

impl LoginGuard {
    pub(crate) fn new(options: &LoginOptions) -> LoginGuard {
        let backoff = Backoff { base: options.lockout_base, max: options.lockout_max.max(options.lockout_base) };
        LoginGuard {
            hashing: std::sync::Arc::new(tokio::sync::Semaphore::new(options.max_concurrent_hashes.max(1))),
            users: Throttle::new(options.user_failures.max(1), backoff, options.max_tracked.max(1)),
            addresses: Throttle::new(options.address_failures.max(1), backoff, options.max_tracked.max(1)),
        }
    }

    /// Refuses a login that is locked out, by user or by address.
    pub(crate) fn check(&self, tenant: &str, user: &str, address: IpAddr) -> Result<(), LoginError> {
        let now = Instant::now();
        let user = self.users.locked(&user_key(tenant, user), now);
        let address = self.addresses.locked(&address_key(address), now);
        match user.max(address) {
            Some(retry_after) => Err(LoginError::Locked { retry_after }),
            None => Ok(()),
        }
    }

    /// Counts a failed login against the user name and the address.
    pub(crate) fn failed(&self, tenant: &str, user: &str, address: IpAddr) {
        let now = Instant::now();
        self.users.fail(user_key(tenant, user), now);
        self.addresses.fail(address_key(address), now);
    }

    /// A successful login clears its user name's count (not its
    /// address's: one good account must not reset a guesser's address).
    pub(crate) fn succeeded(&self, tenant: &str, user: &str) {
        self.users.clear(&user_key(tenant, user));
    }
}

/// An address's throttle key: an IPv6 client is counted by its /64 (one
/// host usually holds a whole /64, so counting single addresses would let it
/// rotate past the lockout); an IPv4-mapped address as the IPv4 address.
fn address_key(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(std::net::Ipv6Addr::from(u128::from(v6) & !((1u128 << 64) - 1))),
        },
        v4 => v4,
    }
}

/// A user name's throttle key: fixed-size, and no name kept in memory.
fn user_key(tenant: &str, user: &str) -> [u8; 32] {
    use sha2::Digest;
    let mut hash = sha2::Sha256::new();
    hash.update(tenant.as_bytes());
    hash.update([0]);
    hash.update(user.as_bytes());
    hash.finalize().into()
}

/// How long a lockout lasts.
#[derive(Debug, Clone, Copy)]
struct Backoff {
    base: Duration,
    max: Duration,
}

impl Backoff {
    /// The lockout after `over` failures past the threshold (1 for the
    /// first): base, 2×base, 4×base, … up to max.
    fn lockout(&self, over: u32) -> Duration {
        let doublings = over.saturating_sub(1).min(31);
        self.base.saturating_mul(1 << doublings).min(self.max)
    }
}

/// One key's failures.
#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    last: Instant,
    locked_until: Option<Instant>,
}

/// Failed attempts by key, with lockouts; at most `max` keys.
struct Throttle<K> {
    threshold: u32,
    backoff: Backoff,
    max: usize,
    entries: Mutex<HashMap<K, Failures>>,
}

impl<K: Eq + Hash + Clone> Throttle<K> {
    fn new(threshold: u32, backoff: Backoff, max: usize) -> Self {
        Throttle { threshold, backoff, max, entries: Mutex::new(HashMap::new()) }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<K, Failures>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How long `key` is still locked out, if it is.
    fn locked(&self, key: &K, now: Instant) -> Option<Duration> {
        let until = self.entries().get(key)?.locked_until?;
        (until > now).then(|| until - now)
    }

    fn fail(&self, key: K, now: Instant) {
        let mut entries = self.entries();
        if !entries.contains_key(&key) && entries.len() >= self.max {
            // Forget what no longer matters (no lockout left, no failure
            // for the longest lockout), and if that frees nothing, the key
            // whose last failure is oldest.
            let forget_after = self.backoff.max;
            entries.retain(|_, f| {
                f.locked_until.is_some_and(|until| until > now) || now.duration_since(f.last) < forget_after
            });
            if entries.len() >= self.max
                && let Some(oldest) = entries.iter().min_by_key(|(_, f)| f.last).map(|(k, _)| k.clone())
            {
                entries.remove(&oldest);
            }
        }
        let failures = entries.entry(key).or_insert(Failures { count: 0, last: now, locked_until: None });
        // A key whose failures are long past starts again.
        if failures.locked_until.is_none_or(|until| until <= now)
            && now.duration_since(failures.last) >= self.backoff.max
        {
            failures.count = 0;
        }
        failures.count = failures.count.saturating_add(1);
        failures.last = now;
        if failures.count >= self.threshold {
            failures.locked_until = Some(now + self.backoff.lockout(failures.count - self.threshold + 1));
        }
    }

    fn clear(&self, key: &K) {
        self.entries().remove(key);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backoff() -> Backoff {
        Backoff { base: Duration::from_secs(1), max: Duration::from_secs(60) }
    }

    #[test]
    fn lockouts_double_up_to_the_maximum() {
        let b = backoff();
        let secs: Vec<u64> = (1..=8).map(|n| b.lockout(n).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(b.lockout(u32::MAX), Duration::from_secs(60));
    }

    #[test]
    fn a_key_is_locked_after_the_threshold_and_released_after_its_lockout() {
        let throttle = Throttle::new(3, backoff(), 100);
        let t0 = Instant::now();
        throttle.fail("alice", t0);
        throttle.fail("alice", t0);
        assert_eq!(throttle.locked(&"alice", t0), None, "below the threshold");
        throttle.fail("alice", t0);
        assert_eq!(throttle.locked(&"alice", t0), Some(Duration::from_secs(1)));
        assert_eq!(throttle.locked(&"bob", t0), None, "other keys are not affected");
        let later = t0 + Duration::from_secs(1);
        assert_eq!(throttle.locked(&"alice", later), None, "released");
        throttle.fail("alice", later);
        assert_eq!(throttle.locked(&"alice", later), Some(Duration::from_secs(2)), "doubled");
        throttle.clear(&"alice");
        assert_eq!(throttle.locked(&"alice", later), None);
    }

    #[test]
    fn old_failures_are_forgotten() {
        let throttle = Throttle::new(2, backoff(), 100);
        let t0 = Instant::now();
        throttle.fail("alice", t0);
        throttle.fail("alice", t0 + Duration::from_secs(61));
        assert_eq!(throttle.locked(&"alice", t0 + Duration::from_secs(61)), None);
    }

    #[test]
    fn the_table_never_outgrows_its_bound() {
        let throttle = Throttle::new(1, backoff(), 10);
        let t0 = Instant::now();
        for i in 0..1000u32 {
            throttle.fail(i, t0 + Duration::from_millis(u64::from(i)));
        }
        assert_eq!(throttle.len(), 10);
        // The newest keys are the ones kept.
        assert!(throttle.locked(&999, t0 + Duration::from_millis(999)).is_some());
        assert!(throttle.locked(&0, t0 + Duration::from_millis(999)).is_none());
    }

    #[test]
    fn unknown_and_known_users_are_throttled_alike() {
        let guard = LoginGuard::new(&LoginOptions { user_failures: 2, address_failures: 100, ..Default::default() });
        let address: IpAddr = "192.0.2.1".parse().unwrap();
        for _ in 0..2 {
            guard.failed("nosuch", "nobody", address);
        }
        assert!(matches!(guard.check("nosuch", "nobody", address), Err(LoginError::Locked { .. })));
        assert!(guard.check("nosuch", "somebody", address).is_ok());
    }

    #[test]
    fn an_ipv6_client_is_counted_by_its_64() {
        let guard = LoginGuard::new(&LoginOptions { user_failures: 100, address_failures: 2, ..Default::default() });
        guard.failed("t", "a", "2001:db8:1:2::1".parse().unwrap());
        guard.failed("t", "b", "2001:db8:1:2:ffff::9".parse().unwrap());
        assert!(matches!(guard.check("t", "c", "2001:db8:1:2::77".parse().unwrap()), Err(LoginError::Locked { .. })));
        assert!(guard.check("t", "c", "2001:db8:1:3::1".parse().unwrap()).is_ok());
        guard.failed("t", "a", "::ffff:192.0.2.1".parse().unwrap());
        guard.failed("t", "b", "192.0.2.1".parse().unwrap());
        assert!(matches!(guard.check("t", "c", "192.0.2.1".parse().unwrap()), Err(LoginError::Locked { .. })));
    }

    #[test]
    fn an_address_is_locked_after_its_own_threshold() {
        let guard = LoginGuard::new(&LoginOptions { user_failures: 100, address_failures: 3, ..Default::default() });
        let address: IpAddr = "192.0.2.1".parse().unwrap();
        for user in ["a", "b", "c"] {
            guard.failed("t", user, address);
        }
        assert!(matches!(guard.check("t", "d", address), Err(LoginError::Locked { .. })));
        assert!(guard.check("t", "d", "192.0.2.2".parse().unwrap()).is_ok());
        guard.succeeded("t", "a");
        assert!(
            matches!(guard.check("t", "a", address), Err(LoginError::Locked { .. })),
            "a success does not clear the address"
        );
    }
}
