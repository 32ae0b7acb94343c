//! The token counts a catalog toolset page shows (docs/catalog.md): what
//! each door would send the agent's model, counted by two real tokenizers
//! (`tiktoken-rs`: o200k and cl100k).
//!
//! Counting a toolset's listings takes a blocking thread for tens of
//! milliseconds (the first count also loads the tokenizers, about 75 MB
//! and a few hundred milliseconds, once), and anyone who can open the
//! catalog can ask for it. So:
//! - counts are kept by what was counted: the sha256 of the tenant and the
//!   text. A listing changes only when the toolset does (a new version) or
//!   a version it reaches does (a deploy of a tool it follows, a
//!   retirement, a changed confirmation policy), and then its text does, so
//!   a text's count never goes stale; the same page viewed again counts
//!   nothing. At most [`KEPT_PER_GENERATION`] × 2 counts are kept;
//! - a tenant counts one page at a time, and the server
//!   [`COUNTING_AT_ONCE`] at once: a page that would count while its
//!   tenant's other count runs (or every place is taken) is answered at
//!   once without counts ([`TokenCounted::Busy`], "counting…"), never
//!   queued. A count the request gave up on runs to its end (it is
//!   bounded: at most 64 tools, each within the signature's limits) and
//!   keeps what it counted, then gives its place back.

use sha2::Digest;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

/// Counts kept in each of the two generations.
pub const KEPT_PER_GENERATION: usize = 4_096;
/// Counts that run at once on the whole server (each on a blocking thread).
pub const COUNTING_AT_ONCE: usize = 2;

/// A text's key: the sha256 of its tenant and the text.
type TextKey = [u8; 32];

/// A text's (o200k, cl100k) token counts.
pub type Tokens = (usize, usize);

/// What a page gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenCounted {
    /// Each text's counts, in order; `fresh` when some were counted for
    /// this page (else every one was kept from before).
    Counts {
        /// (o200k, cl100k) per text.
        counts: Vec<Tokens>,
        /// Whether any was counted now.
        fresh: bool,
    },
    /// Another count of the tenant's is running, or the server's counting
    /// places are taken: nothing was counted.
    Busy,
    /// The tokenizers failed (a panic on the blocking thread).
    Failed,
}

/// The kept counts and who is counting now.
#[derive(Default)]
pub(crate) struct TokenCounts {
    shared: Arc<Shared>,
}

struct Shared {
    kept: Mutex<Kept>,
    /// The tenants counting now.
    counting: Mutex<HashSet<String>>,
    places: Arc<tokio::sync::Semaphore>,
}

impl Default for Shared {
    fn default() -> Self {
        Shared {
            kept: Mutex::default(),
            counting: Mutex::default(),
            places: Arc::new(tokio::sync::Semaphore::new(COUNTING_AT_ONCE)),
        }
    }
}

impl Shared {
    fn kept(&self) -> MutexGuard<'_, Kept> {
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn counting(&self) -> MutexGuard<'_, HashSet<String>> {
        self.counting.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Counts in two generations: a lookup finds either (and moves what it
/// finds in the older to the newer), a count goes to the newer, and when
/// the newer is full it becomes the older and the older is dropped. A
/// count used again stays; one unused for [`KEPT_PER_GENERATION`] new
/// counts goes.
#[derive(Default)]
struct Kept {
    newer: HashMap<TextKey, Tokens>,
    older: HashMap<TextKey, Tokens>,
}

impl Kept {
    fn get(&mut self, key: &TextKey) -> Option<Tokens> {
        if let Some(tokens) = self.newer.get(key) {
            return Some(*tokens);
        }
        let tokens = self.older.remove(key)?;
        self.insert(*key, tokens);
        Some(tokens)
    }

    fn insert(&mut self, key: TextKey, tokens: Tokens) {
        if self.newer.len() >= KEPT_PER_GENERATION && !self.newer.contains_key(&key) {
            self.older = std::mem::take(&mut self.newer);
        }
        self.newer.insert(key, tokens);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.newer.len() + self.older.len()
    }
}

/// A tenant's turn to count, and one of the server's places: given back
/// when the count ends (on its blocking thread), whether or not its
/// request is still there.
struct Turn {
    shared: Arc<Shared>,
    tenant: String,
    _place: tokio::sync::OwnedSemaphorePermit,
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.shared.counting().remove(&self.tenant);
    }
}

fn key(tenant: &str, text: &str) -> TextKey {
    let mut hash = sha2::Sha256::new();
    hash.update(tenant.as_bytes());
    hash.update([0]);
    hash.update(text.as_bytes());
    hash.finalize().into()
}

/// A text's counts, by the two tokenizers (each loaded once, by the first
/// count, and kept: loading them for every count would let anyone who can
/// open the catalog keep a core busy).
fn tokens(text: &str) -> Tokens {
    let (o200k, cl100k) = (tiktoken_rs::o200k_base_singleton(), tiktoken_rs::cl100k_base_singleton());
    (o200k.encode_ordinary(text).len(), cl100k.encode_ordinary(text).len())
}

impl TokenCounts {
    /// Each of `texts`' counts for a page of `tenant`'s, with `count`
    /// doing the counting (the tokenizers; a test's stand-in).
    pub(crate) async fn count_with(&self, tenant: &str, texts: Vec<String>, count: fn(&str) -> Tokens) -> TokenCounted {
        let keys: Vec<TextKey> = texts.iter().map(|text| key(tenant, text)).collect();
        let mut found: Vec<Option<Tokens>> = {
            let mut kept = self.shared.kept();
            keys.iter().map(|key| kept.get(key)).collect()
        };
        if found.iter().all(Option::is_some) {
            return TokenCounted::Counts { counts: found.into_iter().flatten().collect(), fresh: false };
        }
        let Some(turn) = self.turn(tenant) else { return TokenCounted::Busy };
        let missing: Vec<(usize, TextKey, String)> = texts
            .into_iter()
            .zip(keys)
            .enumerate()
            .filter(|(i, _)| found[*i].is_none())
            .map(|(i, (text, key))| (i, key, text))
            .collect();
        let counted = tokio::task::spawn_blocking(move || {
            let turn = turn;
            let counted: Vec<(usize, Tokens)> = missing
                .into_iter()
                .map(|(i, key, text)| {
                    let tokens = count(&text);
                    turn.shared.kept().insert(key, tokens);
                    (i, tokens)
                })
                .collect();
            counted
        })
        .await;
        let Ok(counted) = counted else { return TokenCounted::Failed };
        for (i, tokens) in counted {
            found[i] = Some(tokens);
        }
        TokenCounted::Counts { counts: found.into_iter().map(Option::unwrap_or_default).collect(), fresh: true }
    }

    /// [`Self::count_with`] the tokenizers.
    pub(crate) async fn count(&self, tenant: &str, texts: Vec<String>) -> TokenCounted {
        self.count_with(tenant, texts, tokens).await
    }

    /// `tenant`'s turn and a place, if it is not counting already and a
    /// place is free.
    fn turn(&self, tenant: &str) -> Option<Turn> {
        let place = self.shared.places.clone().try_acquire_owned().ok()?;
        if !self.shared.counting().insert(tenant.to_string()) {
            return None;
        }
        Some(Turn { shared: self.shared.clone(), tenant: tenant.to_string(), _place: place })
    }

    /// Counts kept now.
    #[cfg(test)]
    fn kept(&self) -> usize {
        self.shared.kept().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Texts counted by [`slow`]: a count that waits until the test lets it
    /// end (`RELEASE`), so that a second one is asked for while it runs.
    static STARTED: AtomicUsize = AtomicUsize::new(0);
    static RELEASE: std::sync::Mutex<bool> = std::sync::Mutex::new(false);
    static RELEASED: std::sync::Condvar = std::sync::Condvar::new();

    fn slow(text: &str) -> Tokens {
        STARTED.fetch_add(1, Ordering::SeqCst);
        let mut released = RELEASE.lock().unwrap();
        while !*released {
            released = RELEASED.wait(released).unwrap();
        }
        (text.len(), text.len() + 1)
    }

    fn quick(text: &str) -> Tokens {
        (text.len(), 0)
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn counts_are_kept_by_text_and_a_tenant_counts_one_page_at_a_time() {
        let counts = Arc::new(TokenCounts::default());
        let texts = || vec!["the listing".to_string(), "one tool".to_string()];
        // acme's count runs (held by the test)...
        let running = {
            let counts = counts.clone();
            tokio::spawn(async move { counts.count_with("acme", texts(), slow).await })
        };
        while STARTED.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        // ...so another page of acme's is told at once, and counts nothing;
        // another tenant counts beside it.
        assert_eq!(counts.count_with("acme", vec!["another".into()], quick).await, TokenCounted::Busy);
        let theirs = counts.count_with("globex", texts(), quick).await;
        assert_eq!(theirs, TokenCounted::Counts { counts: vec![(11, 0), (8, 0)], fresh: true });
        *RELEASE.lock().unwrap() = true;
        RELEASED.notify_all();
        let ours = running.await.unwrap();
        assert_eq!(ours, TokenCounted::Counts { counts: vec![(11, 12), (8, 9)], fresh: true });
        // Kept by tenant and text: the same page again counts nothing (a
        // count would panic here), a changed one counts what changed.
        fn never(_: &str) -> Tokens {
            panic!("counted again")
        }
        let again = counts.count_with("acme", texts(), never).await;
        assert_eq!(again, TokenCounted::Counts { counts: vec![(11, 12), (8, 9)], fresh: false });
        let changed = counts.count_with("acme", vec!["one tool".into(), "a new listing".into()], quick).await;
        assert_eq!(changed, TokenCounted::Counts { counts: vec![(8, 9), (13, 0)], fresh: true });
        // A count that failed gave its turn back.
        assert_eq!(counts.count_with("acme", vec!["x".into()], never).await, TokenCounted::Failed);
        assert!(matches!(counts.count_with("acme", vec!["y".into()], quick).await, TokenCounted::Counts { .. }));
    }

    #[test]
    fn counts_are_the_tokenizers_own() {
        // "hello world" is two tokens in both, as OpenAI's tiktoken says.
        assert_eq!(tokens("hello world"), (2, 2));
        let json = r#"{"name":"echo","description":"Says the text back."}"#;
        let (o200k, _) = tokens(json);
        assert!(o200k > 5 && o200k < json.len(), "{o200k}");
    }

    #[tokio::test]
    async fn at_most_two_generations_of_counts_are_kept() {
        let counts = TokenCounts::default();
        for i in 0..3 * KEPT_PER_GENERATION {
            counts.count_with("acme", vec![i.to_string()], quick).await;
        }
        assert!(counts.kept() <= 2 * KEPT_PER_GENERATION, "{}", counts.kept());
        // The newest are kept.
        fn never(_: &str) -> Tokens {
            panic!("counted again")
        }
        let newest = (3 * KEPT_PER_GENERATION - 1).to_string();
        assert!(matches!(
            counts.count_with("acme", vec![newest], never).await,
            TokenCounted::Counts { fresh: false, .. }
        ));
    }
}
