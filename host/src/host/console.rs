//! The vendor's console in the core: each tenant's recent calls, with their
//! tools' log lines, kept in memory for its publishers to tail and page.
//!
//! Every call [`ToolHost::invoke`] runs ends in one [`ConsoleEntry`]: time,
//! tool, version, call id, door, outcome, duration and the lines the tool
//! logged (already redacted of the call's secrets and private inputs, and
//! cut like the server's log). Inputs, outputs and end users are never in
//! it. Bounded everywhere:
//! - a ring of the newest `entries_per_tenant` entries per tenant, served
//!   for `retention` (older ones are not shown);
//! - live tails read the same ring, each from where it last read: a tail
//!   that falls further behind than the ring holds loses the oldest and is
//!   told how many (nothing is buffered for it); at most
//!   `max_tails_per_tenant` at once. A call wakes the tails only when there
//!   are some, and never waits on them.
//!
//! The ring is this replica's: in a fleet, a tail shows the calls of the
//! replica it reached.

use super::ToolHost;
use crate::runtime::LogLine;
use serde::Serialize;
use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The operator's bounds on the console.
#[derive(Debug, Clone)]
pub struct ConsoleOptions {
    /// Recent calls kept per tenant (`--console-entries`).
    pub entries_per_tenant: usize,
    /// How long a recent call is shown (`--console-retention-minutes`).
    pub retention: Duration,
    /// Live tails open at once per tenant (`--console-max-tails`).
    pub max_tails_per_tenant: usize,
    /// Bytes of entries kept per tenant (`--console-max-kib`): a call may
    /// log 64 KiB, so the entry count alone would not bound memory.
    pub max_bytes_per_tenant: usize,
}

impl Default for ConsoleOptions {
    fn default() -> Self {
        ConsoleOptions {
            entries_per_tenant: 1000,
            retention: Duration::from_secs(3600),
            max_tails_per_tenant: 4,
            max_bytes_per_tenant: 4 << 20,
        }
    }
}

/// One call, as its publisher's console shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsoleEntry {
    /// Its place in the tenant's console (grows by one per call).
    pub seq: u64,
    /// When it ended, in Unix milliseconds; shown as `time`, RFC 3339 (UTC),
    /// formatted only when an entry is read, never on the call's path.
    #[serde(rename = "time", serialize_with = "rfc3339")]
    pub at_ms: i64,
    /// The tool's name.
    pub tool: String,
    /// The tool's id.
    pub tool_id: String,
    /// The version that ran.
    pub version: u32,
    /// The call's id.
    pub call_id: String,
    /// `a2t`, `otc` or `mcp` (the catalog's try form calls as A2T).
    pub door: &'static str,
    /// `ok`, `tool_error`, or the code of what stopped it (`timeout`,
    /// `resource_exhausted`, `trapped`, …: docs/a2t.md's codes).
    pub outcome: String,
    /// How long the call took, in milliseconds.
    pub duration_ms: f64,
    /// The tool's log lines for the call.
    pub lines: Vec<LogLine>,
    /// For a call refused for its inputs (outcome `refused`): each refused
    /// parameter and why, with its value only where the tenant allows it
    /// (`host/refusals.rs`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<Refusal>,
}

/// The outcome of a call refused for its inputs, in the console and usage
/// (`host/refusals.rs`).
pub const REFUSED: &str = "refused";

/// One refused parameter, as the console shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Refusal {
    /// The parameter, as the caller named it (cut); `None` when the
    /// request as a whole was refused.
    pub parameter: Option<String>,
    /// The input error's code (`missing_parameter`, `invalid_type`, …).
    pub code: &'static str,
    /// The value the caller gave, as JSON cut (`refusals::MAX_VALUE_CHARS`): only
    /// where the tenant shows offending values, never a `private` input's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

impl Refusal {
    /// About how many bytes it holds.
    pub(super) fn size(&self) -> usize {
        32 + self.parameter.as_ref().map_or(0, String::len) + self.value.as_ref().map_or(0, String::len)
    }
}

/// Unix milliseconds as RFC 3339, milliseconds, UTC.
fn rfc3339<S: serde::Serializer>(at_ms: &i64, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&time_of(*at_ms))
}

fn time_of(at_ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(at_ms)
        .map_or_else(String::new, |t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
}

impl ConsoleEntry {
    /// When it ended: RFC 3339, milliseconds, UTC.
    pub fn time(&self) -> String {
        time_of(self.at_ms)
    }

    /// About how many bytes it holds.
    fn size(&self) -> usize {
        256 + self.tool.len()
            + self.call_id.len()
            + self.lines.iter().map(|l| 16 + l.text.len()).sum::<usize>()
            + self.refused.iter().map(Refusal::size).sum::<usize>()
    }
}

/// Which entries a reader wants.
#[derive(Debug, Clone, Default)]
pub struct ConsoleFilter {
    /// A tool's name or id.
    pub tool: Option<String>,
    /// A version number.
    pub version: Option<u32>,
    /// Outcomes (any of them).
    pub outcomes: Vec<String>,
    /// The least level of the lines shown (`trace` … `error`).
    pub level: Option<&'static str>,
    /// Only calls that ran, or a limit refused, and did not end `ok`
    /// (refused inputs have their own panel: `host/refusals.rs`).
    pub failures_only: bool,
}

/// Log levels, least first.
pub const LEVELS: [&str; 5] = ["trace", "debug", "info", "warn", "error"];

/// `level` as one of [`LEVELS`], if it is one.
pub fn console_level(level: &str) -> Option<&'static str> {
    LEVELS.iter().find(|l| **l == level).copied()
}

fn rank(level: &str) -> usize {
    LEVELS.iter().position(|l| *l == level).unwrap_or(0)
}

impl ConsoleFilter {
    /// The entry as this reader sees it, or `None` when it does not match;
    /// copied only when some of its lines are not shown.
    pub fn apply<'a>(&self, entry: &'a ConsoleEntry) -> Option<Cow<'a, ConsoleEntry>> {
        if self.tool.as_ref().is_some_and(|t| *t != entry.tool && *t != entry.tool_id)
            || self.version.is_some_and(|v| v != entry.version)
            || (!self.outcomes.is_empty() && !self.outcomes.contains(&entry.outcome))
            || (self.failures_only && (entry.outcome == "ok" || entry.outcome == REFUSED))
        {
            return None;
        }
        match self.level {
            Some(least) if entry.lines.iter().any(|l| rank(l.level) < rank(least)) => {
                let mut shown = entry.clone();
                shown.lines.retain(|l| rank(l.level) >= rank(least));
                Some(Cow::Owned(shown))
            }
            _ => Some(Cow::Borrowed(entry)),
        }
    }
}

/// One tenant's console.
struct TenantConsole {
    /// The entries, oldest first (their `seq`s follow one another), and
    /// the bytes they hold.
    ring: Mutex<(VecDeque<Arc<ConsoleEntry>>, usize)>,
    /// The `seq` the next entry gets; assigned under the ring's lock.
    next_seq: AtomicU64,
    /// Wakes the tails waiting for an entry.
    arrived: tokio::sync::Notify,
    tails: AtomicUsize,
}

/// Every tenant's console.
pub(super) struct ConsoleState {
    options: ConsoleOptions,
    tenants: dashmap::DashMap<String, Arc<TenantConsole>>,
}

/// A live tail: the tenant's entries from when it was opened on, read
/// from the ring; frees its place when dropped.
pub struct Tail {
    console: Arc<TenantConsole>,
    /// The `seq` of the next entry it shows.
    next: u64,
}

impl Tail {
    /// Returns once there is an entry this tail has not taken.
    pub async fn arrival(&self) {
        let notified = self.console.arrived.notified();
        tokio::pin!(notified);
        // Registered before looking, so an entry kept after the look wakes it.
        notified.as_mut().enable();
        if self.console.next_seq.load(Ordering::SeqCst) > self.next {
            return;
        }
        notified.await;
    }

    /// The entries kept since the last take, oldest first, and how many
    /// this tail lost: kept and pushed out of the ring before it took them.
    pub fn take(&mut self) -> (Vec<Arc<ConsoleEntry>>, u64) {
        let guard = self.console.ring.lock().unwrap_or_else(|p| p.into_inner());
        let ring = &guard.0;
        let oldest = ring.front().map_or_else(|| self.console.next_seq.load(Ordering::SeqCst), |e| e.seq);
        let lost = oldest.saturating_sub(self.next);
        let start = ring.partition_point(|e| e.seq < self.next);
        let taken: Vec<_> = ring.range(start..).cloned().collect();
        self.next = taken.last().map_or(self.next.max(oldest), |e| e.seq + 1);
        (taken, lost)
    }
}

impl Drop for Tail {
    fn drop(&mut self) {
        self.console.tails.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Why a tail was not opened.
#[derive(Debug, thiserror::Error)]
#[error("this tenant already has {0} live tails open, as many as the operator allows; close one and try again")]
pub struct TooManyTails(pub usize);

impl ConsoleState {
    pub(super) fn new(options: ConsoleOptions) -> ConsoleState {
        ConsoleState { options, tenants: dashmap::DashMap::new() }
    }

    fn of(&self, tenant: &str) -> Arc<TenantConsole> {
        if let Some(console) = self.tenants.get(tenant) {
            return console.clone();
        }
        self.tenants
            .entry(tenant.to_string())
            .or_insert_with(|| {
                Arc::new(TenantConsole {
                    ring: Mutex::new((VecDeque::new(), 0)),
                    next_seq: AtomicU64::new(1),
                    arrived: tokio::sync::Notify::new(),
                    tails: AtomicUsize::new(0),
                })
            })
            .clone()
    }

    /// Keeps a call's entry (its `seq` is assigned here) and wakes the
    /// tenant's live tails.
    pub(super) fn record(&self, tenant: &str, mut entry: ConsoleEntry) {
        if self.options.entries_per_tenant == 0 {
            return;
        }
        let console = self.of(tenant);
        {
            let mut guard = console.ring.lock().unwrap_or_else(|p| p.into_inner());
            let (ring, bytes) = &mut *guard;
            entry.seq = console.next_seq.fetch_add(1, Ordering::SeqCst);
            let entry = Arc::new(entry);
            ring.push_back(entry.clone());
            *bytes += entry.size();
            while ring.len() > self.options.entries_per_tenant
                || (*bytes > self.options.max_bytes_per_tenant && ring.len() > 1)
            {
                if let Some(oldest) = ring.pop_front() {
                    *bytes -= oldest.size();
                }
            }
        }
        // A tail opened after this look starts after this entry.
        if console.tails.load(Ordering::SeqCst) > 0 {
            console.arrived.notify_waiters();
        }
    }

    /// Opens a live tail of the tenant's calls, unless it has as many as
    /// the operator allows.
    fn open_tail(&self, tenant: &str) -> Result<Tail, TooManyTails> {
        let console = self.of(tenant);
        let max = self.options.max_tails_per_tenant;
        console
            .tails
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < max).then_some(n + 1))
            .map_err(|_| TooManyTails(max))?;
        let next = console.next_seq.load(Ordering::SeqCst);
        Ok(Tail { console, next })
    }
}

impl ToolHost {
    /// The tenant's recent calls that match `filter`, newest first, older
    /// than `before` (a `seq`) when given, at most `limit`; within the
    /// console's retention.
    pub fn recent_calls(
        &self,
        tenant: &str,
        filter: &ConsoleFilter,
        before: Option<u64>,
        limit: usize,
    ) -> Vec<ConsoleEntry> {
        let Some(console) = self.console.tenants.get(tenant).map(|c| c.clone()) else { return Vec::new() };
        let oldest = chrono::Utc::now().timestamp_millis() - self.console.options.retention.as_millis() as i64;
        let ring = console.ring.lock().unwrap_or_else(|p| p.into_inner());
        ring.0
            .iter()
            .rev()
            .filter(|e| before.is_none_or(|b| e.seq < b) && e.at_ms >= oldest)
            .filter_map(|e| filter.apply(e).map(Cow::into_owned))
            .take(limit)
            .collect()
    }

    /// Opens a live tail of the tenant's calls, unless it has as many as
    /// the operator allows.
    pub fn tail(&self, tenant: &str) -> Result<Tail, TooManyTails> {
        self.console.open_tail(tenant)
    }

    /// How far back the recent calls go.
    pub fn console_retention(&self) -> Duration {
        self.console.options.retention
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(tool: &str, outcome: &str) -> ConsoleEntry {
        ConsoleEntry {
            seq: 0,
            at_ms: chrono::Utc::now().timestamp_millis(),
            tool: tool.into(),
            tool_id: "id".into(),
            version: 1,
            call_id: "c".into(),
            door: "a2t",
            outcome: outcome.into(),
            duration_ms: 1.0,
            lines: vec![LogLine { level: "debug", text: "d".into() }, LogLine { level: "error", text: "e".into() }],
            refused: Vec::new(),
        }
    }

    #[test]
    fn the_ring_keeps_the_newest_and_a_slow_tail_is_told_what_it_lost() {
        let state = ConsoleState::new(ConsoleOptions { entries_per_tenant: 3, ..Default::default() });
        state.record("acme", entry("echo", "ok"));
        let mut slow = state.open_tail("acme").unwrap();
        let mut quick = state.open_tail("acme").unwrap();
        for _ in 0..12 {
            state.record("acme", entry("echo", "ok"));
            if quick.next < 6 {
                let (taken, lost) = quick.take();
                assert_eq!((taken.len(), lost), (1, 0), "a tail that keeps up takes each entry, once");
            }
        }
        let console = state.of("acme");
        let kept: Vec<u64> = console.ring.lock().unwrap().0.iter().map(|e| e.seq).collect();
        assert_eq!(kept, [11, 12, 13], "only the newest three");
        // The tail that never read lost the entries pushed out since it
        // opened (2 to 10), and is told so; the one opened before is not
        // shown to it.
        let (taken, lost) = slow.take();
        assert_eq!((taken.iter().map(|e| e.seq).collect::<Vec<_>>(), lost), (vec![11, 12, 13], 9));
        assert_eq!((slow.take().0.len(), slow.take().1), (0, 0), "nothing twice");
        let (taken, lost) = quick.take();
        assert_eq!((taken.len(), lost), (3, 5), "6 to 10 were lost; 11 to 13 are taken");
        assert_eq!(console.tails.load(Ordering::SeqCst), 2);
        drop((slow, quick));
        assert_eq!(console.tails.load(Ordering::SeqCst), 0, "a closed tail frees its place");
        assert!(state.tenants.get("globex").is_none(), "another tenant's console is untouched");

        // Entries with many lines are bounded by bytes too.
        let small = ConsoleState::new(ConsoleOptions { max_bytes_per_tenant: 20_000, ..Default::default() });
        let mut chatty = entry("echo", "ok");
        chatty.lines = vec![LogLine { level: "info", text: "x".repeat(4096) }; 2];
        for _ in 0..10 {
            small.record("acme", chatty.clone());
        }
        let (ring, bytes) = small.of("acme").ring.lock().unwrap().clone();
        assert!(bytes <= 20_000 && ring.len() == 2, "{} entries, {bytes} bytes", ring.len());
    }

    #[tokio::test]
    async fn a_tail_wakes_for_an_entry_it_has_not_taken_and_only_then() {
        let state = Arc::new(ConsoleState::new(ConsoleOptions::default()));
        let mut tail = state.open_tail("acme").unwrap();
        let soon = Duration::from_millis(200);
        assert!(tokio::time::timeout(soon, tail.arrival()).await.is_err(), "nothing new: it waits");
        // Kept before it looks: it returns at once.
        state.record("acme", entry("echo", "ok"));
        tokio::time::timeout(soon, tail.arrival()).await.expect("an entry not taken");
        assert_eq!(tail.take().0.len(), 1);
        assert!(tokio::time::timeout(soon, tail.arrival()).await.is_err(), "taken: it waits again");
        // Kept while it waits: it wakes.
        let keeper = state.clone();
        let later = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            keeper.record("acme", entry("echo", "ok"));
        });
        tokio::time::timeout(Duration::from_secs(5), tail.arrival()).await.expect("woken by the entry");
        later.await.unwrap();
        // Another tenant's entries do not wake it.
        tail.take();
        state.record("globex", entry("echo", "ok"));
        assert!(tokio::time::timeout(soon, tail.arrival()).await.is_err(), "another tenant's call");
    }

    #[test]
    fn filters_pick_entries_and_lines() {
        let filter = ConsoleFilter {
            tool: Some("echo".into()),
            outcomes: vec!["ok".into()],
            level: Some("warn"),
            ..Default::default()
        };
        let both = entry("echo", "ok");
        let shown = filter.apply(&both).unwrap();
        assert_eq!(shown.lines, [LogLine { level: "error", text: "e".into() }]);
        assert!(matches!(shown, Cow::Owned(_)), "a debug line is not shown");
        let quiet = ConsoleFilter { tool: Some("echo".into()), ..Default::default() };
        assert!(matches!(quiet.apply(&both), Some(Cow::Borrowed(_))), "every line is shown: not copied");
        assert!(filter.apply(&entry("other", "ok")).is_none());
        assert!(filter.apply(&entry("echo", "tool_error")).is_none());
        assert_eq!(console_level("warn"), Some("warn"));
        assert_eq!(console_level("loud"), None);
    }
}
