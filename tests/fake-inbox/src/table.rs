//! A map bounded in entries and in time. Every table the built-in provider
//! keeps (pending sign-ins, codes, tokens) is one, so that a flood of
//! sign-ins never finished or tokens never used costs a fixed amount of
//! memory: a full table drops its expired entries, then the entry that
//! would expire first.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The longest an entry is kept, whatever it asks (and what keeps
/// `Instant + Duration` from overflowing).
const LONGEST: Duration = Duration::from_secs(365 * 24 * 3600);

pub(crate) struct Table<V> {
    entries: HashMap<String, (Instant, V)>,
    capacity: usize,
}

impl<V> Table<V> {
    pub(crate) fn new(capacity: usize) -> Table<V> {
        Table { entries: HashMap::new(), capacity: capacity.max(1) }
    }

    /// Keeps `value` under `key` for `ttl` from now (a zero `ttl`: it is
    /// already expired, for tests of expiry).
    pub(crate) fn insert(&mut self, key: String, value: V, ttl: Duration) {
        let now = Instant::now();
        if self.entries.len() >= self.capacity && !self.entries.contains_key(&key) {
            self.entries.retain(|_, (until, _)| *until > now);
            let first = self.entries.iter().min_by_key(|(_, (until, _))| *until).map(|(k, _)| k.clone());
            if let Some(first) = first.filter(|_| self.entries.len() >= self.capacity) {
                self.entries.remove(&first);
            }
        }
        self.entries.insert(key, (now + ttl.min(LONGEST), value));
    }

    /// The live value under `key`.
    pub(crate) fn get(&self, key: &str) -> Option<&V> {
        self.entries.get(key).filter(|(until, _)| *until > Instant::now()).map(|(_, v)| v)
    }

    /// The live value under `key`, to change.
    pub(crate) fn get_mut(&mut self, key: &str) -> Option<&mut V> {
        self.entries.get_mut(key).filter(|(until, _)| *until > Instant::now()).map(|(_, v)| v)
    }

    /// Takes the value under `key` out: `None` if there is none or it
    /// expired.
    pub(crate) fn take(&mut self, key: &str) -> Option<V> {
        self.entries.remove(key).filter(|(until, _)| *until > Instant::now()).map(|(_, v)| v)
    }

    /// Keeps only the values `keep` says yes to.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&V) -> bool) {
        self.entries.retain(|_, (_, v)| keep(v));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_table_drops_the_expired_then_the_first_to_expire() {
        let mut table = Table::new(2);
        table.insert("dead".into(), 0, Duration::ZERO);
        table.insert("short".into(), 1, Duration::from_secs(60));
        table.insert("long".into(), 2, Duration::from_secs(600));
        assert_eq!((table.len(), table.get("dead"), table.get("short")), (2, None, Some(&1)));
        table.insert("longer".into(), 3, Duration::from_secs(900));
        assert_eq!(
            (table.len(), table.get("short"), table.get("long"), table.get("longer")),
            (2, None, Some(&2), Some(&3))
        );
        assert_eq!(table.take("long"), Some(2));
        assert_eq!(table.take("long"), None);
        table.insert("gone".into(), 4, Duration::ZERO);
        assert_eq!(table.get("gone"), None);
        assert_eq!((table.take("gone"), table.len()), (None, 1));
    }
}
