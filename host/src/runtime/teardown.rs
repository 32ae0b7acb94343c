//! A call's teardown, after its answer. Dropping a call's store resets its
//! instance slot (the written pages `PAGEMAP_SCAN` finds are zeroed, the
//! decommit queue flushed: about 6 µs of echo's one-connection latency,
//! bench/ANALYSIS.md), and the caller need not wait for it.
//!
//! While an HTTP connection is polled, inside [`after_answer`]
//! (`api::serve`), the stores of the calls that finish are held and dropped
//! when that poll ends, or when the connection's next request starts in the
//! same poll ([`drop_held`]): by then hyper has written their answers (or as
//! much of a large one as the socket took). The drop
//! stays on the same thread and happens before the thread takes any other
//! work, so the slot is back in the pool as soon as before for every call
//! but the one being answered. Anywhere else (a call that moved to the tool
//! threads, a test, the benchmark's in-process arm) a store is dropped at
//! once. The host's place of the call (`ToolHost::execute`) is given back
//! the same way, after the store: the pool has a slot for every place, so
//! a call that takes a place finds a slot free.

use std::any::Any;
use std::cell::RefCell;

thread_local! {
    /// What waits for the end of the poll this thread is in, if it is in one.
    static HELD: RefCell<Option<Vec<Box<dyn Any>>>> = const { RefCell::new(None) };
}

/// Drops `value` once the answers of the connection being polled are
/// written, or at once outside such a poll.
pub fn drop_after_answer<T: 'static>(value: T) {
    let now = HELD.with(|held| match held.borrow_mut().as_mut() {
        Some(held) => {
            held.push(Box::new(value));
            None
        }
        None => Some(value),
    });
    drop(now);
}

/// Drops now what this thread holds for the poll it is in. A request that
/// starts calls it (`api::serve`): hyper reads a connection's next
/// request in the same poll once the last answer is written, and what the
/// last call left (its store, its place on the server) must not be held
/// while the next one runs.
pub fn drop_held() {
    let held = HELD.with(|held| held.borrow_mut().as_mut().map(std::mem::take));
    drop(held);
}

/// Runs `poll` (one poll of an HTTP connection), then drops what the calls
/// it finished left behind ([`drop_after_answer`]); a poll inside another
/// leaves that to the outer one.
pub fn after_answer<R>(poll: impl FnOnce() -> R) -> R {
    /// Drops what was held when the poll ends, even by a panic.
    struct Window;
    impl Drop for Window {
        fn drop(&mut self) {
            // Taken out first: a drop below runs with the window closed.
            let held = HELD.with(|held| held.borrow_mut().take());
            drop(held);
        }
    }
    let opens = HELD.with(|held| {
        let mut held = held.borrow_mut();
        let opens = held.is_none();
        if opens {
            *held = Some(Vec::new());
        }
        opens
    });
    // Not `then_some(Window)`: a `Window` made and dropped here, in a poll
    // inside another, would close the outer poll's window.
    let _window = if opens { Some(Window) } else { None };
    poll()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Counted(Arc<AtomicUsize>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn held_until_the_poll_ends_and_dropped_at_once_outside_one() {
        let dropped = Arc::new(AtomicUsize::new(0));
        drop_after_answer(Counted(dropped.clone()));
        assert_eq!(dropped.load(Ordering::SeqCst), 1, "outside a poll: at once");
        after_answer(|| {
            drop_after_answer(Counted(dropped.clone()));
            after_answer(|| drop_after_answer(Counted(dropped.clone())));
            assert_eq!(dropped.load(Ordering::SeqCst), 1, "held, the inner poll's too, while the outer one runs");
        });
        assert_eq!(dropped.load(Ordering::SeqCst), 3, "dropped when the poll ended");
        drop_after_answer(Counted(dropped.clone()));
        assert_eq!(dropped.load(Ordering::SeqCst), 4, "the window closed with the poll");
    }

    #[test]
    fn a_request_that_starts_in_the_same_poll_drops_what_the_last_one_left() {
        let dropped = Arc::new(AtomicUsize::new(0));
        after_answer(|| {
            drop_after_answer(Counted(dropped.clone()));
            drop_held();
            assert_eq!(dropped.load(Ordering::SeqCst), 1, "dropped when the next request started");
            drop_after_answer(Counted(dropped.clone()));
            assert_eq!(dropped.load(Ordering::SeqCst), 1, "the window is still open");
        });
        assert_eq!(dropped.load(Ordering::SeqCst), 2);
        drop_held();
    }

    #[test]
    fn a_poll_that_panics_still_drops_what_it_held() {
        let dropped = Arc::new(AtomicUsize::new(0));
        let held = dropped.clone();
        let panicked = std::panic::catch_unwind(move || {
            after_answer(|| {
                drop_after_answer(Counted(held));
                panic!("a poll that panics");
            })
        });
        assert!(panicked.is_err());
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
        drop_after_answer(Counted(dropped.clone()));
        assert_eq!(dropped.load(Ordering::SeqCst), 2, "and the window is closed");
    }
}
