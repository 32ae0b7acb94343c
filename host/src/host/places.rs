//! Places for running calls, counted: the server's, a tenant's, a tool's.
//!
//! Taking one never waits (a call that finds none is refused as busy), and
//! giving one back takes no lock. A costly or demoted tool's call gives its
//! places back on a thread below the server's priority (`executors`); had
//! that taken a lock (a semaphore's list of waiters does), a tool thread
//! preempted while holding it — as a low-priority thread is whenever an
//! HTTP thread wants its CPU — would hold up every HTTP thread giving back
//! a place of its own until the tool thread ran again: milliseconds on a
//! busy machine.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Up to `max` places, taken and given back without a lock.
#[derive(Debug, Clone)]
pub(super) struct Places {
    taken: Arc<AtomicUsize>,
    max: usize,
}

impl Places {
    pub fn new(max: usize) -> Places {
        Places { taken: Arc::default(), max }
    }

    /// The same places, now bounded by `max`: those taken still count (a
    /// tenant whose quota changed).
    pub fn bounded(&self, max: usize) -> Places {
        Places { taken: self.taken.clone(), max }
    }

    /// A place, or none while all are taken. The count may pass `max` for
    /// an instant, between two racing takers, and then one of them gives
    /// its place back at once: never more than `max` are held.
    pub fn take(&self) -> Option<Taken> {
        if self.taken.fetch_add(1, Ordering::AcqRel) >= self.max {
            self.taken.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Taken(self.taken.clone()))
    }

    /// How many may be taken at once.
    pub fn max(&self) -> usize {
        self.max
    }

    /// How many more could be taken now.
    pub fn free(&self) -> usize {
        self.max.saturating_sub(self.taken.load(Ordering::Acquire))
    }
}

/// A place held, given back when dropped.
#[derive(Debug)]
pub(super) struct Taken(Arc<AtomicUsize>);

impl Drop for Taken {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_refused_when_all_are_taken_and_come_back_when_dropped() {
        let places = Places::new(2);
        let (one, two) = (places.take(), places.take());
        assert!(one.is_some() && two.is_some());
        assert!(places.take().is_none(), "a third is refused, not queued");
        assert_eq!(places.free(), 0);
        drop(one);
        assert_eq!(places.free(), 1);
        assert!(places.take().is_some());
    }

    #[test]
    fn a_new_bound_keeps_the_places_taken_under_the_old() {
        let places = Places::new(3);
        let held: Vec<_> = (0..3).map(|_| places.take()).collect();
        let shrunk = places.bounded(2);
        assert!(shrunk.take().is_none(), "3 still held, over the new 2");
        drop(held);
        assert_eq!(shrunk.free(), 2);
    }

    #[test]
    fn racing_takers_never_hold_more_than_the_bound() {
        let places = Places::new(4);
        let most = Arc::new(AtomicUsize::new(0));
        let held = Arc::new(AtomicUsize::new(0));
        std::thread::scope(|scope| {
            for _ in 0..8 {
                scope.spawn(|| {
                    for _ in 0..10_000 {
                        if let Some(place) = places.take() {
                            let now = held.fetch_add(1, Ordering::SeqCst) + 1;
                            most.fetch_max(now, Ordering::SeqCst);
                            held.fetch_sub(1, Ordering::SeqCst);
                            drop(place);
                        }
                    }
                });
            }
        });
        assert!(most.load(Ordering::SeqCst) <= 4, "{} held at once", most.load(Ordering::SeqCst));
        assert_eq!(places.free(), 4);
    }
}
