//! A token bucket per key (a client address, an OAuth grant), in a table of
//! bounded size: how the open OAuth endpoints limit what one client may ask
//! for without the table itself becoming something a flood can grow.
//!
//! When the table is full, keys whose bucket has refilled (they are idle)
//! are forgotten first, then the one seen least recently: a flood of new
//! keys can make the server forget an old key's spent budget, never refuse
//! a key it has not seen (which would lock out every newcomer).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A token bucket per key: `burst` at once, refilled at `per_second`.
pub struct KeyedRate<K> {
    burst: f64,
    per_second: f64,
    max_keys: usize,
    /// By key: the tokens left and when they were counted.
    buckets: Mutex<HashMap<K, (f64, Instant)>>,
}

impl<K: Hash + Eq + Clone> KeyedRate<K> {
    /// `burst` requests at once, then one each `every`, for at most
    /// `max_keys` keys remembered.
    pub fn new(burst: u32, every: Duration, max_keys: usize) -> KeyedRate<K> {
        KeyedRate {
            burst: f64::from(burst.max(1)),
            per_second: 1.0 / every.as_secs_f64().max(1e-6),
            max_keys: max_keys.max(1),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one token of `key`'s bucket, or says how long until one is
    /// there.
    pub fn take(&self, key: &K) -> Result<(), Duration> {
        self.take_at(key, Instant::now())
    }

    fn take_at(&self, key: &K, now: Instant) -> Result<(), Duration> {
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if !buckets.contains_key(key) && buckets.len() >= self.max_keys {
            self.make_room(&mut buckets, now);
        }
        let (tokens, counted) = buckets.entry(key.clone()).or_insert((self.burst, now));
        let refilled =
            (*tokens + now.saturating_duration_since(*counted).as_secs_f64() * self.per_second).min(self.burst);
        *counted = now;
        if refilled >= 1.0 {
            *tokens = refilled - 1.0;
            Ok(())
        } else {
            *tokens = refilled;
            Err(Duration::from_secs_f64((1.0 - refilled) / self.per_second))
        }
    }

    /// Forgets the idle keys, and if none is idle the least recently seen.
    fn make_room(&self, buckets: &mut HashMap<K, (f64, Instant)>, now: Instant) {
        let full_after = Duration::from_secs_f64(self.burst / self.per_second);
        buckets.retain(|_, (_, counted)| now.saturating_duration_since(*counted) < full_after);
        if buckets.len() >= self.max_keys
            && let Some(oldest) = buckets.iter().min_by_key(|(_, (_, counted))| *counted).map(|(k, _)| k.clone())
        {
            buckets.remove(&oldest);
        }
    }

    /// How many keys are remembered.
    pub fn len(&self) -> usize {
        self.buckets.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether no key is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_gets_its_burst_then_waits_for_the_refill_and_others_are_unaffected() {
        let rate = KeyedRate::new(3, Duration::from_secs(1), 100);
        let start = Instant::now();
        for _ in 0..3 {
            assert!(rate.take_at(&"a", start).is_ok());
        }
        let wait = rate.take_at(&"a", start).unwrap_err();
        assert!(wait > Duration::from_millis(900) && wait <= Duration::from_secs(1), "{wait:?}");
        assert!(rate.take_at(&"b", start).is_ok(), "another key has its own bucket");
        assert!(rate.take_at(&"a", start + Duration::from_secs(1)).is_ok(), "one token a second");
        assert!(rate.take_at(&"a", start + Duration::from_secs(1)).is_err());
    }

    #[test]
    fn a_full_table_forgets_idle_keys_then_the_oldest_and_never_refuses_a_newcomer() {
        let rate = KeyedRate::new(1, Duration::from_secs(1), 3);
        let start = Instant::now();
        for (i, key) in ["a", "b", "c"].iter().enumerate() {
            assert!(rate.take_at(key, start + Duration::from_millis(i as u64)).is_ok());
        }
        // None idle: the least recently seen ("a") goes.
        assert!(rate.take_at(&"d", start + Duration::from_millis(10)).is_ok());
        assert_eq!(rate.len(), 3);
        assert!(rate.take_at(&"b", start + Duration::from_millis(11)).is_err(), "b is still remembered");
        assert!(rate.take_at(&"a", start + Duration::from_millis(12)).is_ok(), "a was forgotten");
        // Much later every key is idle: all are forgotten to make room.
        assert!(rate.take_at(&"e", start + Duration::from_secs(10)).is_ok());
        assert_eq!(rate.len(), 1);
    }
}
