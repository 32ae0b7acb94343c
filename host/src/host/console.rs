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
//! - live tails: a broadcast channel per tenant holding [`TAIL_BACKLOG`]
//!   entries; a tail that falls further behind loses the oldest and is told
//!   how many (never buffered without end); at most `max_tails_per_tenant`
//!   at once.
//!
//! The ring is this replica's: in a fleet, a tail shows the calls of the
//! replica it reached.

use super::ToolHost;
use crate::runtime::LogLine;
use serde::Serialize;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Entries a tail may fall behind before it loses the oldest.
pub const TAIL_BACKLOG: usize = 256;

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
        256 + self.tool.len() + self.call_id.len() + self.lines.iter().map(|l| 16 + l.text.len()).sum::<usize>()
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
    /// Only calls whose outcome is not `ok`.
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
    /// The entry as this reader sees it, or `None` when it does not match.
    pub fn apply(&self, entry: &ConsoleEntry) -> Option<ConsoleEntry> {
        if self.tool.as_ref().is_some_and(|t| *t != entry.tool && *t != entry.tool_id)
            || self.version.is_some_and(|v| v != entry.version)
            || (!self.outcomes.is_empty() && !self.outcomes.contains(&entry.outcome))
            || (self.failures_only && entry.outcome == "ok")
        {
            return None;
        }
        let mut shown = entry.clone();
        if let Some(least) = self.level {
            shown.lines.retain(|l| rank(l.level) >= rank(least));
        }
        Some(shown)
    }
}

/// One tenant's console.
struct TenantConsole {
    /// The entries, oldest first, and the bytes they hold.
    ring: Mutex<(VecDeque<Arc<ConsoleEntry>>, usize)>,
    live: tokio::sync::broadcast::Sender<Arc<ConsoleEntry>>,
    next_seq: AtomicU64,
    tails: AtomicUsize,
}

/// Every tenant's console.
pub(super) struct ConsoleState {
    options: ConsoleOptions,
    tenants: dashmap::DashMap<String, Arc<TenantConsole>>,
}

/// A live tail: entries as calls end; frees its place when dropped.
pub struct Tail {
    /// The entries, as they come.
    pub entries: tokio::sync::broadcast::Receiver<Arc<ConsoleEntry>>,
    console: Arc<TenantConsole>,
}

impl Drop for Tail {
    fn drop(&mut self) {
        self.console.tails.fetch_sub(1, Ordering::AcqRel);
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
                    live: tokio::sync::broadcast::channel(TAIL_BACKLOG).0,
                    next_seq: AtomicU64::new(1),
                    tails: AtomicUsize::new(0),
                })
            })
            .clone()
    }

    /// Keeps a call's entry (its `seq` is assigned here) and sends it to the
    /// tenant's live tails.
    pub(super) fn record(&self, tenant: &str, mut entry: ConsoleEntry) {
        if self.options.entries_per_tenant == 0 {
            return;
        }
        let console = self.of(tenant);
        let entry = {
            let mut guard = console.ring.lock().unwrap_or_else(|p| p.into_inner());
            let (ring, bytes) = &mut *guard;
            entry.seq = console.next_seq.fetch_add(1, Ordering::AcqRel);
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
            entry
        };
        // No receiver is not an error: nobody is tailing.
        let _ = console.live.send(entry);
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
            .filter_map(|e| filter.apply(e))
            .take(limit)
            .collect()
    }

    /// Opens a live tail of the tenant's calls, unless it has as many as
    /// the operator allows.
    pub fn tail(&self, tenant: &str) -> Result<Tail, TooManyTails> {
        let console = self.console.of(tenant);
        let max = self.console.options.max_tails_per_tenant;
        console
            .tails
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1))
            .map_err(|_| TooManyTails(max))?;
        Ok(Tail { entries: console.live.subscribe(), console })
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
        }
    }

    #[test]
    fn the_ring_keeps_the_newest_and_a_slow_tail_is_told_what_it_lost() {
        let state = ConsoleState::new(ConsoleOptions { entries_per_tenant: 3, ..Default::default() });
        let console = state.of("acme");
        let mut slow = console.live.subscribe();
        for _ in 0..TAIL_BACKLOG + 10 {
            state.record("acme", entry("echo", "ok"));
        }
        let ring = console.ring.lock().unwrap();
        let kept: Vec<u64> = ring.0.iter().map(|e| e.seq).collect();
        let last = (TAIL_BACKLOG + 10) as u64;
        assert_eq!(kept, [last - 2, last - 1, last], "only the newest three");
        // The tail that never read lost the oldest ten, and is told so.
        assert!(matches!(slow.try_recv(), Err(tokio::sync::broadcast::error::TryRecvError::Lagged(10))));
        assert_eq!(slow.try_recv().unwrap().seq, 11);
        assert!(state.tenants.get("globex").is_none(), "another tenant's console is untouched");
        drop(ring);

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

    #[test]
    fn filters_pick_entries_and_lines() {
        let filter = ConsoleFilter {
            tool: Some("echo".into()),
            outcomes: vec!["ok".into()],
            level: Some("warn"),
            ..Default::default()
        };
        let shown = filter.apply(&entry("echo", "ok")).unwrap();
        assert_eq!(shown.lines, [LogLine { level: "error", text: "e".into() }]);
        assert!(filter.apply(&entry("other", "ok")).is_none());
        assert!(filter.apply(&entry("echo", "tool_error")).is_none());
        assert_eq!(console_level("warn"), Some("warn"));
        assert_eq!(console_level("loud"), None);
    }
}
