//! What guards end users' passwords on the built-in confirmation page: a
//! bound on password hashing, and the throttles on failed logins.
//!
//! An Argon2id check costs 19 MiB and tens of milliseconds of a core, and
//! the login form is open to anyone. So:
//! - at most [`LoginOptions::max_concurrent_hashes`] hashes run at once
//!   (default: one per core, at least two), logins and password sets
//!   alike, and of those at most a share ([`LoginOptions::hashes_per_tenant`],
//!   [`LoginOptions::hashes_per_address`], half of them by default) for one
//!   tenant (made-up tenants together are one) and for one client address
//!   (an IPv6 /48): no one tenant's publisher setting passwords, nor one
//!   address logging in, holds every slot. A login without a slot is
//!   refused at once ([`LoginError::Busy`]), and so is a password set
//!   ([`HashingSlots::for_password`]), never queued, so a flood costs the
//!   server a fixed amount of memory and CPU whatever its size. A login
//!   refused because its own address holds its share counts as a failure
//!   of that address (the flooder locks itself out); one refused because
//!   others hold the slots counts against no one;
//! - at most [`LoginOptions::max_failures_per_minute`] failed logins per
//!   tenant (a token bucket: that many at once, refilled evenly over a
//!   minute); beyond it every login to that tenant is refused before
//!   hashing ([`LoginError::Locked`]), which bounds how fast anyone, from
//!   however many addresses, can guess a tenant's passwords or fill the
//!   tables below. A budget per tenant, not one for the server: failures
//!   on one tenant (made-up tenants included) must not lock every other
//!   tenant's sign-ins. A login from an address where its user logged in
//!   before is exempt (checked first), so an exhausted budget does not
//!   lock a user out of the places they log in from;
//! - failed logins are counted per client address (IPv4, or an IPv6 /48: a
//!   site), per (user, client address) (IPv6 by /64) and per user across
//!   addresses (a user is a (tenant, name)). Past a threshold each further
//!   failure locks that key out for a time that doubles, up to a maximum
//!   ([`LoginError::Locked`]), refused before any hashing even with the
//!   right password. The address and (user, address) locks always hold. The
//!   per-user lock (which stops guessing spread over many addresses) does
//!   not hold at an address that logged in as that user before (a bounded
//!   set of known (user, address) pairs): a stranger who keeps failing as
//!   a user cannot lock that user out of the places they log in from;
//! - each table holds at most [`LoginOptions::max_tracked`] keys. A locked
//!   key is never forgotten to make room (flooding the tables with made-up
//!   names or addresses cannot erase a lock); an unlocked one may be, the
//!   stale first, then the one whose last failure is oldest. When a table is
//!   full of locked keys, a login whose failure it could not count is
//!   refused ([`LoginError::Busy`]). A user key is the sha256 of (tenant,
//!   name), fixed-size however long the names an anonymous caller makes up,
//!   so the tables cannot be grown to exhaust memory. The tenants' budgets
//!   are a table of the same bound: a budget refilled to the full is
//!   forgotten first, then the fullest one; an exhausted one never.
//!
//! Unknown tenants and user names are counted like known ones: the answers
//! (and their timing) say nothing about who exists. A made-up tenant's
//! users are its own ([`LoginTenant`]); its failures are spent from the
//! one budget all made-up tenants share, so a flood that empties that
//! budget (600 failures a minute, from dozens of addresses) tells, while
//! it lasts, made-up tenants from real ones (docs/security.md).

use crate::client_address::{HOST_PREFIX, SITE_PREFIX, prefix};
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
    /// Of those, the most one tenant's logins and password sets hold at
    /// once (`None`: half of them, at least one).
    pub hashes_per_tenant: Option<usize>,
    /// Of those, the most logins from one client address (an IPv6 /48)
    /// hold at once (`None`: half of them, at least one).
    pub hashes_per_address: Option<usize>,
    /// Failed logins of one user name (in one tenant), from one address or
    /// from all, before it is locked out.
    pub user_failures: u32,
    /// Failed logins from one client address before it is locked out.
    pub address_failures: u32,
    /// The first lockout; each further failure doubles it.
    pub lockout_base: Duration,
    /// The longest lockout.
    pub lockout_max: Duration,
    /// Keys each throttle table remembers at most.
    pub max_tracked: usize,
    /// Failed logins per minute for each tenant (at most that many at
    /// once).
    pub max_failures_per_minute: u32,
}

impl Default for LoginOptions {
    fn default() -> Self {
        LoginOptions {
            // At least two: with one, whoever holds it holds them all.
            max_concurrent_hashes: std::thread::available_parallelism().map_or(2, |n| n.get()).max(2),
            hashes_per_tenant: None,
            hashes_per_address: None,
            user_failures: 5,
            address_failures: 20,
            lockout_base: Duration::from_secs(1),
            lockout_max: Duration::from_secs(15 * 60),
            max_tracked: 10_000,
            max_failures_per_minute: 600,
        }
    }
}

/// Why a login was refused.
#[derive(Debug, thiserror::Error)]
pub enum LoginError {
    /// The user name or the password is wrong (which one is not said).
    #[error("wrong user name or password")]
    Invalid,
    /// Too many failed logins for this user name, from this address, or on
    /// the tenant.
    #[error("too many failed logins; try again in {}", seconds(.retry_after.as_secs().max(1)))]
    Locked {
        /// When a login may be tried again.
        retry_after: Duration,
    },
    /// Every password-hashing slot is taken, or the throttle cannot count
    /// one more failure.
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

/// The hashing slots, the throttle tables and the tenants' budgets.
pub(crate) struct LoginGuard {
    pub(crate) hashing: std::sync::Arc<HashingSlots>,
    /// Per user, across addresses; not held at the user's known addresses.
    users: Throttle<[u8; 32]>,
    /// Per (user, address).
    user_addresses: Throttle<[u8; 32]>,
    /// Per address (an IPv6 site).
    addresses: Throttle<IpAddr>,
    /// (user, address) pairs that logged in, with their last success.
    known: Known,
    /// Failed logins each tenant may still take; not held at a user's known
    /// addresses.
    budgets: Budgets,
}

/// One login attempt's keys.
struct Keys {
    tenant: [u8; 32],
    user: [u8; 32],
    pair: [u8; 32],
    site: IpAddr,
}

impl Keys {
    fn new(tenant: LoginTenant<'_>, user: &str, address: IpAddr) -> Keys {
        let host = prefix(address, HOST_PREFIX);
        let budget = if tenant.exists { tenant.name } else { UNKNOWN_TENANT };
        Keys {
            tenant: tenant_key(budget),
            user: user_key(tenant.name, user),
            pair: pair_key(tenant.name, user, host),
            site: prefix(address, SITE_PREFIX),
        }
    }
}

/// The tenant a login names, as the throttles count it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LoginTenant<'a> {
    name: &'a str,
    exists: bool,
}

impl<'a> LoginTenant<'a> {
    /// `name`, which `exists` or not. A tenant that does not exist spends
    /// from the one budget all such tenants share (a budget each would let
    /// a guesser who names a new tenant every time fail without bound),
    /// but its users are its own: were a made-up name's lock shared by
    /// every made-up tenant, failing as `zed` at one and trying `zed` at
    /// another would tell a stranger which names are tenants.
    pub(crate) fn new(name: &'a str, exists: bool) -> LoginTenant<'a> {
        LoginTenant { name, exists }
    }
}

impl<'a> From<&'a str> for LoginTenant<'a> {
    /// A tenant that exists.
    fn from(name: &'a str) -> LoginTenant<'a> {
        LoginTenant { name, exists: true }
    }
}

impl LoginGuard {
    pub(crate) fn new(options: &LoginOptions) -> LoginGuard {
        let backoff = Backoff { base: options.lockout_base, max: options.lockout_max.max(options.lockout_base) };
        let max = options.max_tracked.max(1);
        LoginGuard {
            hashing: std::sync::Arc::new(HashingSlots::new(options)),
            users: Throttle::new(options.user_failures.max(1), backoff, max),
            user_addresses: Throttle::new(options.user_failures.max(1), backoff, max),
            addresses: Throttle::new(options.address_failures.max(1), backoff, max),
            known: Known::new(max),
            budgets: Budgets::new(options.max_failures_per_minute.max(1), max),
        }
    }

    /// Refuses a login that is locked out (by its address, its (user,
    /// address), and unless the address is one the user logged in from, by
    /// its user or its tenant's budget), or whose failure could not be
    /// counted.
    pub(crate) fn check<'t>(
        &self,
        tenant: impl Into<LoginTenant<'t>>,
        user: &str,
        address: IpAddr,
    ) -> Result<(), LoginError> {
        let now = Instant::now();
        let keys = Keys::new(tenant.into(), user, address);
        // Known pairs first: neither a flood of failures on the tenant nor
        // one on the user locks a user out where they log in.
        let known = self.known.contains(&keys.pair);
        let locked = [
            if known { None } else { self.budgets.empty(&keys.tenant, now) },
            self.addresses.locked(&keys.site, now),
            self.user_addresses.locked(&keys.pair, now),
            if known { None } else { self.users.locked(&keys.user, now) },
        ];
        if let Some(retry_after) = locked.into_iter().flatten().max() {
            return Err(LoginError::Locked { retry_after });
        }
        // A known pair needs no room: a user keeps logging in where they do
        // while a flood fills the tables (its failures are counted where
        // there is room).
        let room = known
            || (self.budgets.has_room(&keys.tenant, now)
                && self.addresses.has_room(&keys.site, now)
                && self.user_addresses.has_room(&keys.pair, now)
                && self.users.has_room(&keys.user, now));
        if room { Ok(()) } else { Err(LoginError::Busy) }
    }

    /// Counts a failed login against the tenant, the address, the (user,
    /// address) and the user.
    pub(crate) fn failed<'t>(&self, tenant: impl Into<LoginTenant<'t>>, user: &str, address: IpAddr) {
        let now = Instant::now();
        let keys = Keys::new(tenant.into(), user, address);
        self.budgets.spend(keys.tenant, now);
        self.addresses.fail(keys.site, now);
        self.user_addresses.fail(keys.pair, now);
        self.users.fail(keys.user, now);
    }

    /// A hashing slot for a login of `tenant`'s `user` from `address`, or
    /// [`LoginError::Busy`] at once. A login refused because its own
    /// address holds its share of the slots counts against that address
    /// (a flood from one address locks it out); one refused because its
    /// tenant's share or every slot is held by others counts against no
    /// one: the refused client is not the one flooding.
    pub(crate) fn hashing_slot<'t>(
        &self,
        tenant: impl Into<LoginTenant<'t>>,
        user: &str,
        address: IpAddr,
    ) -> Result<HashingSlot, LoginError> {
        let keys = Keys::new(tenant.into(), user, address);
        match HashingSlots::take(&self.hashing, keys.tenant, Some(keys.site)) {
            Ok(slot) => Ok(slot),
            Err(NoSlot::AddressShare) => {
                self.busy(address);
                Err(LoginError::Busy)
            }
            Err(NoSlot::TakenByOthers) => Err(LoginError::Busy),
        }
    }

    /// A login refused for want of a hashing slot its own address holds
    /// counts against that address: a flood from one address locks that
    /// address out.
    fn busy(&self, address: IpAddr) {
        self.addresses.fail(prefix(address, SITE_PREFIX), Instant::now());
    }

    /// A successful login clears its (user, address) count and makes the
    /// address one the user logs in from. Neither the user's count across
    /// addresses nor the address's is cleared: one good login must not
    /// reset a guesser's budget.
    pub(crate) fn succeeded<'t>(&self, tenant: impl Into<LoginTenant<'t>>, user: &str, address: IpAddr) {
        let keys = Keys::new(tenant.into(), user, address);
        self.user_addresses.clear(&keys.pair);
        self.known.insert(keys.pair, Instant::now());
    }
}

/// The password-hashing slots: at most `total` hashes at once, of them at
/// most `per_tenant` for one tenant and `per_address` for one client
/// address. Counted under one lock (a hash takes tens of milliseconds; a
/// slot is taken and given back once each), in maps that hold only the
/// tenants and addresses holding a slot now: bounded by `total`.
pub(crate) struct HashingSlots {
    total: usize,
    per_tenant: usize,
    per_address: usize,
    held: Mutex<Held>,
}

#[derive(Default)]
struct Held {
    total: usize,
    tenants: HashMap<[u8; 32], usize>,
    addresses: HashMap<IpAddr, usize>,
}

/// Why no hashing slot was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoSlot {
    /// The client's own address holds its share: its own doing.
    AddressShare,
    /// Its tenant's share, or every slot, is held (by others, for all this
    /// client did).
    TakenByOthers,
}

/// A hashing slot, given back when dropped.
pub(crate) struct HashingSlot {
    slots: std::sync::Arc<HashingSlots>,
    tenant: [u8; 32],
    address: Option<IpAddr>,
}

impl HashingSlots {
    fn new(options: &LoginOptions) -> HashingSlots {
        let total = options.max_concurrent_hashes.max(1);
        let share = |set: Option<usize>| set.unwrap_or(total / 2).clamp(1, total);
        HashingSlots {
            total,
            per_tenant: share(options.hashes_per_tenant),
            per_address: share(options.hashes_per_address),
            held: Mutex::new(Held::default()),
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot for `tenant` (its budget key: made-up tenants share one) and
    /// the client `address` (its site), when neither holds its share and a
    /// slot is free. The address is checked first: a client refused for
    /// its own address's share is the flooder.
    fn take(
        slots: &std::sync::Arc<HashingSlots>,
        tenant: [u8; 32],
        address: Option<IpAddr>,
    ) -> Result<HashingSlot, NoSlot> {
        let mut held = slots.held();
        if address.is_some_and(|a| held.addresses.get(&a).copied().unwrap_or(0) >= slots.per_address) {
            return Err(NoSlot::AddressShare);
        }
        if held.tenants.get(&tenant).copied().unwrap_or(0) >= slots.per_tenant || held.total >= slots.total {
            return Err(NoSlot::TakenByOthers);
        }
        held.total += 1;
        *held.tenants.entry(tenant).or_default() += 1;
        if let Some(address) = address {
            *held.addresses.entry(address).or_default() += 1;
        }
        Ok(HashingSlot { slots: slots.clone(), tenant, address })
    }

    /// A slot for setting a password of `tenant`'s (a publisher's change),
    /// or `None` at once when the tenant holds its share or every slot is
    /// taken: a publisher setting passwords in a loop takes its tenant's
    /// share and no more, and never waits in front of anyone's login.
    pub(crate) fn for_password(slots: &std::sync::Arc<HashingSlots>, tenant: &str) -> Option<HashingSlot> {
        HashingSlots::take(slots, tenant_key(tenant), None).ok()
    }

    #[cfg(test)]
    fn in_use(&self) -> usize {
        self.held().total
    }
}

impl Drop for HashingSlot {
    fn drop(&mut self) {
        let mut held = self.slots.held();
        held.total = held.total.saturating_sub(1);
        fn give_back<K: Eq + Hash>(map: &mut HashMap<K, usize>, key: &K) {
            if let Some(count) = map.get_mut(key) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    map.remove(key);
                }
            }
        }
        give_back(&mut held.tenants, &self.tenant);
        if let Some(address) = &self.address {
            give_back(&mut held.addresses, address);
        }
    }
}

/// The budget a login to a tenant that does not exist is spent from: no
/// tenant is named so, and all such logins share it.
const UNKNOWN_TENANT: &str = "";

/// A tenant's budget key: fixed-size, whatever tenant name a caller makes
/// up.
fn tenant_key(tenant: &str) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(tenant.as_bytes()).into()
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

/// A (user, address) key.
fn pair_key(tenant: &str, user: &str, address: IpAddr) -> [u8; 32] {
    use sha2::Digest;
    let mut hash = sha2::Sha256::new();
    hash.update(user_key(tenant, user));
    hash.update(address.to_string().as_bytes());
    hash.finalize().into()
}

/// The (user, address) pairs that logged in, at most `max`: when full, the
/// one whose last success is oldest is forgotten.
struct Known {
    max: usize,
    pairs: Mutex<HashMap<[u8; 32], Instant>>,
}

impl Known {
    fn new(max: usize) -> Known {
        Known { max, pairs: Mutex::new(HashMap::new()) }
    }

    fn pairs(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Instant>> {
        self.pairs.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn contains(&self, pair: &[u8; 32]) -> bool {
        self.pairs().contains_key(pair)
    }

    fn insert(&self, pair: [u8; 32], now: Instant) {
        let mut pairs = self.pairs();
        if !pairs.contains_key(&pair)
            && pairs.len() >= self.max
            && let Some(oldest) = pairs.iter().min_by_key(|(_, at)| **at).map(|(k, _)| *k)
        {
            pairs.remove(&oldest);
        }
        pairs.insert(pair, now);
    }
}

/// The tenants' failed-login budgets, at most `max` tenants: when full, a
/// budget refilled to the full (the same as none) is forgotten first, then
/// the fullest; an exhausted one never (forgetting it would refill it).
struct Budgets {
    per_minute: u32,
    max: usize,
    tenants: Mutex<HashMap<[u8; 32], Budget>>,
}

impl Budgets {
    fn new(per_minute: u32, max: usize) -> Budgets {
        Budgets { per_minute, max, tenants: Mutex::new(HashMap::new()) }
    }

    fn tenants(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Budget>> {
        self.tenants.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How long until `tenant`'s next failure may be spent, if none may now.
    fn empty(&self, tenant: &[u8; 32], now: Instant) -> Option<Duration> {
        self.tenants().get(tenant)?.empty(now)
    }

    /// Whether a failure of `tenant` can be counted.
    fn has_room(&self, tenant: &[u8; 32], now: Instant) -> bool {
        let mut tenants = self.tenants();
        tenants.contains_key(tenant) || self.make_room(&mut tenants, now)
    }

    fn make_room(&self, tenants: &mut HashMap<[u8; 32], Budget>, now: Instant) -> bool {
        if tenants.len() < self.max {
            return true;
        }
        let full = f64::from(self.per_minute);
        tenants.retain(|_, budget| budget.tokens(now) < full);
        if tenants.len() < self.max {
            return true;
        }
        let fullest = tenants
            .iter()
            .map(|(k, budget)| (*k, budget.tokens(now)))
            .filter(|(_, tokens)| *tokens >= 1.0)
            .max_by(|a, b| a.1.total_cmp(&b.1));
        match fullest {
            Some((key, _)) => {
                tenants.remove(&key);
                true
            }
            None => false,
        }
    }

    /// Spends one of `tenant`'s failures; not counted if the table is full
    /// of exhausted budgets (the next [`Budgets::has_room`] refuses then).
    fn spend(&self, tenant: [u8; 32], now: Instant) {
        let mut tenants = self.tenants();
        if !tenants.contains_key(&tenant) && !self.make_room(&mut tenants, now) {
            return;
        }
        tenants.entry(tenant).or_insert_with(|| Budget::new(self.per_minute, now)).spend(now);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.tenants().len()
    }
}

/// One tenant's failed-login budget: a token bucket of `per_minute`
/// tokens, refilled evenly over a minute.
struct Budget {
    per_minute: u32,
    state: Mutex<(f64, Instant)>,
}

impl Budget {
    fn new(per_minute: u32, now: Instant) -> Budget {
        Budget { per_minute, state: Mutex::new((f64::from(per_minute), now)) }
    }

    /// The tokens by `now`, refilled since the last look.
    fn refill(&self, now: Instant) -> std::sync::MutexGuard<'_, (f64, Instant)> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let rate = f64::from(self.per_minute) / 60.0;
        let earned = now.saturating_duration_since(state.1).as_secs_f64() * rate;
        state.0 = (state.0 + earned).min(f64::from(self.per_minute));
        state.1 = state.1.max(now);
        state
    }

    /// The tokens left by `now`.
    fn tokens(&self, now: Instant) -> f64 {
        self.refill(now).0
    }

    /// How long until the next failure may be spent, if none may now.
    fn empty(&self, now: Instant) -> Option<Duration> {
        let state = self.refill(now);
        (state.0 < 1.0).then(|| Duration::from_secs_f64((1.0 - state.0) * 60.0 / f64::from(self.per_minute)))
    }

    fn spend(&self, now: Instant) {
        let mut state = self.refill(now);
        state.0 = (state.0 - 1.0).max(0.0);
    }
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

impl Failures {
    fn locked_at(&self, now: Instant) -> bool {
        self.locked_until.is_some_and(|until| until > now)
    }
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

    /// Whether a failure of `key` can be counted: it is known, or there is
    /// room for it (after forgetting what may be forgotten).
    fn has_room(&self, key: &K, now: Instant) -> bool {
        let mut entries = self.entries();
        entries.contains_key(key) || self.make_room(&mut entries, now)
    }

    /// Frees a place if the table is full: the stale entries (no lockout
    /// left, no failure for the longest lockout) go first, then the
    /// unlocked one whose last failure is oldest; a locked entry never.
    /// Whether there is room now.
    fn make_room(&self, entries: &mut HashMap<K, Failures>, now: Instant) -> bool {
        if entries.len() < self.max {
            return true;
        }
        let forget_after = self.backoff.max;
        entries.retain(|_, f| f.locked_at(now) || now.duration_since(f.last) < forget_after);
        if entries.len() < self.max {
            return true;
        }
        let oldest = entries.iter().filter(|(_, f)| !f.locked_at(now)).min_by_key(|(_, f)| f.last);
        match oldest.map(|(k, _)| k.clone()) {
            Some(oldest) => {
                entries.remove(&oldest);
                true
            }
            None => false,
        }
    }

    /// Counts a failure of `key`; not counted if the table is full of
    /// locked keys (the next [`Throttle::has_room`] refuses then).
    fn fail(&self, key: K, now: Instant) {
        let mut entries = self.entries();
        if !entries.contains_key(&key) && !self.make_room(&mut entries, now) {
            return;
        }
        let failures = entries.entry(key).or_insert(Failures { count: 0, last: now, locked_until: None });
        // A key whose failures are long past starts again.
        if !failures.locked_at(now) && now.duration_since(failures.last) >= self.backoff.max {
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

/// `1 second`, `5 seconds`.
fn seconds(n: u64) -> String {
    if n == 1 { "1 second".into() } else { format!("{n} seconds") }
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
        // Threshold 2: every key has one failure, none is locked, so the
        // oldest make room for the newest.
        let throttle = Throttle::new(2, backoff(), 10);
        let t0 = Instant::now();
        for i in 0..1000u32 {
            throttle.fail(i, t0 + Duration::from_millis(u64::from(i)));
        }
        assert_eq!(throttle.len(), 10);
        let end = t0 + Duration::from_millis(999);
        assert!(throttle.has_room(&5000, end), "an unlocked key can be forgotten");
        throttle.fail(999, end);
        assert!(throttle.locked(&999, end).is_some(), "the newest keys are kept");
    }

    #[test]
    fn a_locked_key_is_never_forgotten_to_make_room() {
        let throttle = Throttle::new(1, backoff(), 10);
        let t0 = Instant::now();
        // The victim's lock, then a flood of made-up keys.
        throttle.fail(u32::MAX, t0);
        for i in 0..1000u32 {
            throttle.fail(i, t0 + Duration::from_millis(u64::from(i)));
        }
        let end = t0 + Duration::from_millis(999);
        assert_eq!(throttle.len(), 10);
        assert!(throttle.locked(&u32::MAX, end).is_some(), "the flood erased a lock");
        assert!(!throttle.has_room(&5000, end), "a full table of locks has no room for a new key");
        assert!(throttle.has_room(&u32::MAX, end), "a known key is still counted");
        // Once the locks end, their keys may make room again.
        assert!(throttle.has_room(&5000, t0 + Duration::from_secs(2)));
    }

    #[test]
    fn a_full_table_of_locks_refuses_the_logins_it_could_not_count() {
        let guard = LoginGuard::new(&LoginOptions {
            user_failures: 1,
            address_failures: 1000,
            max_tracked: 3,
            ..Default::default()
        });
        let address: IpAddr = "192.0.2.1".parse().unwrap();
        for user in ["a", "b", "c"] {
            guard.failed("t", user, address);
        }
        assert!(matches!(guard.check("t", "a", address), Err(LoginError::Locked { .. })), "still locked");
        assert!(matches!(guard.check("t", "d", address), Err(LoginError::Busy)));
        // A user at an address they logged in from still may.
        let home: IpAddr = "192.0.2.77".parse().unwrap();
        guard.succeeded("t", "e", home);
        assert!(guard.check("t", "e", home).is_ok());

        // The same when the address table is full of locks.
        let guard = LoginGuard::new(&LoginOptions {
            user_failures: 1000,
            address_failures: 1,
            max_tracked: 2,
            ..Default::default()
        });
        guard.succeeded("t", "e", home);
        for address in ["198.51.100.1", "198.51.100.2"] {
            guard.failed("t", "x", address.parse().unwrap());
        }
        assert!(matches!(guard.check("t", "x", "198.51.100.3".parse().unwrap()), Err(LoginError::Busy)));
        assert!(guard.check("t", "e", home).is_ok());
    }

    #[test]
    fn a_tenants_budget_refills_evenly_over_a_minute() {
        let t0 = Instant::now();
        let budget = Budget::new(3, t0);
        for _ in 0..3 {
            assert_eq!(budget.empty(t0), None);
            budget.spend(t0);
        }
        assert_eq!(budget.empty(t0), Some(Duration::from_secs(20)), "one token per 20 s");
        assert_eq!(budget.empty(t0 + Duration::from_secs(5)), Some(Duration::from_secs(15)));
        assert_eq!(budget.empty(t0 + Duration::from_secs(20)), None);
        assert_eq!(budget.empty(t0 + Duration::from_secs(3600)), None);
        for _ in 0..3 {
            budget.spend(t0 + Duration::from_secs(3600));
        }
        assert!(budget.empty(t0 + Duration::from_secs(3600)).is_some(), "never more than the cap at once");
    }

    #[test]
    fn past_a_tenants_budget_every_login_to_it_is_refused() {
        let guard = LoginGuard::new(&LoginOptions {
            user_failures: 100,
            address_failures: 100,
            max_failures_per_minute: 2,
            ..Default::default()
        });
        guard.failed("t", "a", "192.0.2.1".parse().unwrap());
        guard.failed("t", "b", "198.51.100.1".parse().unwrap());
        let elsewhere: IpAddr = "203.0.113.9".parse().unwrap();
        assert!(matches!(guard.check("t", "c", elsewhere), Err(LoginError::Locked { .. })));
        assert!(guard.check("u", "c", elsewhere).is_ok(), "another tenant's budget is its own");
    }

    #[test]
    fn failures_on_one_tenant_lock_neither_another_tenant_nor_a_known_address() {
        // The defaults: 600 failures a minute, 20 per address. About 30
        // addresses spend tenant a's whole budget without any of them
        // being locked out before.
        let guard = LoginGuard::new(&LoginOptions::default());
        let home: IpAddr = "192.0.2.10".parse().unwrap();
        guard.succeeded("a", "alice", home);
        for i in 0..30u8 {
            let address = IpAddr::from([198, 51, 100, i]);
            for j in 0..20u8 {
                assert!(!matches!(guard.check("a", &format!("u{i}-{j}"), address), Err(LoginError::Busy)));
                guard.failed("a", &format!("u{i}-{j}"), address);
            }
        }
        let stranger: IpAddr = "203.0.113.9".parse().unwrap();
        assert!(
            matches!(guard.check("a", "bob", stranger), Err(LoginError::Locked { .. })),
            "tenant a's budget is spent"
        );
        assert!(guard.check("b", "carol", stranger).is_ok(), "tenant b is not locked by tenant a's failures");
        assert!(guard.check("a", "alice", home).is_ok(), "alice still signs in where she did before");
    }

    #[test]
    fn the_tenants_budgets_never_outgrow_their_bound_nor_forget_an_exhausted_one() {
        let guard = LoginGuard::new(&LoginOptions {
            user_failures: 100,
            address_failures: 100_000,
            max_failures_per_minute: 2,
            max_tracked: 3,
            ..Default::default()
        });
        let address: IpAddr = "192.0.2.1".parse().unwrap();
        // The victim's budget is spent, then made-up tenants flood the table.
        guard.failed("victim", "a", address);
        guard.failed("victim", "a", address);
        for i in 0..100 {
            guard.failed(format!("made-up-{i}").as_str(), "a", address);
        }
        assert_eq!(guard.budgets.len(), 3);
        assert!(matches!(guard.check("victim", "b", address), Err(LoginError::Locked { .. })), "its lock holds");
        // Once every tracked budget is spent, a failure that could not be
        // counted is refused.
        for i in 0..2 {
            for _ in 0..2 {
                guard.failed(format!("spent-{i}").as_str(), "a", address);
            }
        }
        assert!(matches!(guard.check("other", "b", address), Err(LoginError::Busy)));
    }

    #[test]
    fn a_stranger_cannot_lock_a_user_out_of_an_address_they_logged_in_from() {
        let guard = LoginGuard::new(&LoginOptions { user_failures: 3, address_failures: 100, ..Default::default() });
        let home: IpAddr = "2001:db8:1:2::10".parse().unwrap();
        let stranger: IpAddr = "203.0.113.9".parse().unwrap();
        let elsewhere: IpAddr = "198.51.100.7".parse().unwrap();
        assert!(guard.check("t", "alice", home).is_ok());
        guard.succeeded("t", "alice", home);
        for _ in 0..3 {
            guard.failed("t", "alice", stranger);
        }
        // The stranger is locked out, and so is alice from a new address
        // (guessing spread over addresses must still stop)...
        assert!(matches!(guard.check("t", "alice", stranger), Err(LoginError::Locked { .. })));
        assert!(matches!(guard.check("t", "alice", elsewhere), Err(LoginError::Locked { .. })));
        // ...but not from her own host (another address of the same /64).
        assert!(guard.check("t", "alice", "2001:db8:1:2::99".parse().unwrap()).is_ok());
        // Failures from her own host lock it out like any other.
        for _ in 0..3 {
            guard.failed("t", "alice", home);
        }
        assert!(matches!(guard.check("t", "alice", home), Err(LoginError::Locked { .. })));
    }

    #[test]
    fn busy_refusals_count_against_the_address_that_holds_its_share_and_no_other() {
        let guard = LoginGuard::new(&LoginOptions {
            user_failures: 100,
            address_failures: 3,
            max_concurrent_hashes: 4,
            ..Default::default()
        });
        let flooder: IpAddr = "192.0.2.1".parse().unwrap();
        let innocent: IpAddr = "198.51.100.7".parse().unwrap();
        // The flooder holds its share (half the slots)...
        let held: Vec<_> = (0..2).map(|i| guard.hashing_slot("t", &format!("u{i}"), flooder).unwrap()).collect();
        // ...so its further logins are refused and counted against it,
        for _ in 0..3 {
            assert!(matches!(guard.hashing_slot("t", "x", flooder), Err(LoginError::Busy)));
        }
        assert!(matches!(guard.check("t", "a", flooder), Err(LoginError::Locked { .. })));
        // while another address still gets a slot (of another tenant: t's
        // share is the flooder's now).
        let other = guard.hashing_slot("u", "a", innocent).unwrap();
        // Refused because others hold the slots, a login counts against no
        // one: the innocent address is never locked by it.
        let last = guard.hashing_slot("v", "b", "203.0.113.1".parse().unwrap()).unwrap();
        for _ in 0..10 {
            assert!(matches!(guard.hashing_slot("w", "c", innocent), Err(LoginError::Busy)));
        }
        assert!(guard.check("w", "c", innocent).is_ok(), "a refusal for others' slots locked an innocent address");
        drop((held, other, last));
        assert_eq!(guard.hashing.in_use(), 0, "every slot is given back");
    }

    #[test]
    fn one_tenant_and_one_address_hold_only_their_share_of_the_hashing_slots() {
        let slots =
            std::sync::Arc::new(HashingSlots::new(&LoginOptions { max_concurrent_hashes: 2, ..Default::default() }));
        // A publisher setting passwords in a loop takes its tenant's share.
        let a = HashingSlots::for_password(&slots, "a").expect("a's first");
        assert!(HashingSlots::for_password(&slots, "a").is_none(), "a holds its share: refused at once");
        // Another tenant's login still gets a slot,
        let guard_key = tenant_key("b");
        let b = HashingSlots::take(&slots, guard_key, Some("198.51.100.1".parse().unwrap())).expect("b's login");
        // and when every slot is held, the refusal is not the client's own doing.
        assert_eq!(
            HashingSlots::take(&slots, tenant_key("c"), Some("198.51.100.2".parse().unwrap())).err(),
            Some(NoSlot::TakenByOthers)
        );
        drop(a);
        // One address, logging in to many tenants, holds its share only.
        let site: IpAddr = "2001:db8:1::1".parse().unwrap();
        let _one = HashingSlots::take(&slots, tenant_key("c"), Some(site)).expect("its first");
        drop(b);
        assert_eq!(HashingSlots::take(&slots, tenant_key("d"), Some(site)).err(), Some(NoSlot::AddressShare));
        assert!(HashingSlots::take(&slots, tenant_key("d"), Some("198.51.100.3".parse().unwrap())).is_ok());
        // Shares set by the operator are bounded by the total.
        let set = HashingSlots::new(&LoginOptions {
            max_concurrent_hashes: 3,
            hashes_per_tenant: Some(10),
            hashes_per_address: Some(0),
            ..Default::default()
        });
        assert_eq!((set.per_tenant, set.per_address), (3, 1));
    }

    #[test]
    fn a_made_up_tenants_names_are_its_own_though_made_up_tenants_share_a_budget() {
        let guard = LoginGuard::new(&LoginOptions {
            user_failures: 2,
            address_failures: 100,
            max_failures_per_minute: 5,
            ..Default::default()
        });
        let address: IpAddr = "192.0.2.1".parse().unwrap();
        fn made_up(name: &str) -> LoginTenant<'_> {
            LoginTenant::new(name, false)
        }
        for _ in 0..2 {
            guard.failed(made_up("made-up-1"), "zed", address);
        }
        assert!(matches!(guard.check(made_up("made-up-1"), "zed", address), Err(LoginError::Locked { .. })));
        // Neither another made-up tenant nor a real one has `zed` locked:
        // the lock does not tell them apart.
        assert!(guard.check(made_up("made-up-2"), "zed", address).is_ok());
        assert!(guard.check("real", "zed", address).is_ok());
        // The budget is the made-up tenants' together, not a real one's.
        for i in 0..3 {
            guard.failed(made_up(&format!("made-up-{}", 10 + i)), "someone", address);
        }
        assert!(matches!(guard.check(made_up("made-up-99"), "x", address), Err(LoginError::Locked { .. })));
        assert!(guard.check("real", "x", address).is_ok(), "a real tenant's budget is its own");
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
    fn an_ipv6_client_is_counted_by_its_48() {
        let guard = LoginGuard::new(&LoginOptions { user_failures: 100, address_failures: 2, ..Default::default() });
        guard.failed("t", "a", "2001:db8:1:2::1".parse().unwrap());
        guard.failed("t", "b", "2001:db8:1:ffff::9".parse().unwrap());
        assert!(matches!(guard.check("t", "c", "2001:db8:1:77::1".parse().unwrap()), Err(LoginError::Locked { .. })));
        assert!(guard.check("t", "c", "2001:db8:2::1".parse().unwrap()).is_ok());
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
        guard.succeeded("t", "a", address);
        assert!(
            matches!(guard.check("t", "a", address), Err(LoginError::Locked { .. })),
            "a success does not clear the address"
        );
    }
}
