//! Usage per tool version: calls by door and outcome, and their latency, in
//! minute and hour buckets kept in the store, so that they survive restarts
//! and a fleet's replicas add up.
//!
//! Each call adds to this replica's totals in memory (one map update);
//! every few seconds the totals of the buckets that changed are written to
//! the store as this replica's rows (`UsageRow`, replaced, never added to:
//! a retried write counts nothing twice). Readers sum every replica's rows.
//! Latency is a histogram with ranges doubling from 0.5 ms, so percentiles
//! are known to within a factor of two (the upper bound of their range is
//! reported). A crash loses at most the last flush interval's counts.
//!
//! Minute buckets answer the last hour and are kept two hours; hour buckets
//! answer the last day and week and are kept `retention`.

use super::ToolHost;
use crate::store::{RegistryStore, StoreError, UsageRow};
use crate::tenancy::unix_now;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Upper bounds of the latency ranges, in milliseconds (the last is open).
const BOUNDS_MS: [f64; 19] = [
    0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0, 32768.0,
    65536.0, 131072.0,
];
const RANGES: usize = BOUNDS_MS.len() + 1;
/// How long minute buckets are kept.
const MINUTE_KEPT: i64 = 2 * 3600;

/// The operator's settings.
#[derive(Debug, Clone)]
pub struct UsageOptions {
    /// How often this replica writes its totals (`--usage-flush-secs`);
    /// zero counts nothing.
    pub flush: Duration,
    /// How long hour buckets are kept (`--usage-retention-days`).
    pub retention: Duration,
}

impl Default for UsageOptions {
    fn default() -> Self {
        UsageOptions { flush: Duration::from_secs(5), retention: Duration::from_secs(8 * 24 * 3600) }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    tenant: String,
    tool_id: String,
    tool: String,
    version: u32,
    door: &'static str,
    outcome: String,
    granularity: &'static str,
    bucket: i64,
    /// The toolset (name, version) whose root the calls came through:
    /// the designer's count (`None`: the vendor's, of every call).
    toolset: Option<(String, u32)>,
}

#[derive(Debug, Clone, Default)]
struct Totals {
    calls: u64,
    total_ms: f64,
    histogram: Vec<u64>,
    /// Declared host → status → requests.
    outbound: BTreeMap<String, BTreeMap<String, u64>>,
    /// Refused calls: parameter → code → calls (`host/refusals.rs` bounds
    /// the keys).
    refused: BTreeMap<String, BTreeMap<String, u64>>,
    dirty: bool,
}

/// This replica's usage totals.
pub(super) struct UsageState {
    options: UsageOptions,
    replica: String,
    totals: Mutex<HashMap<Key, Totals>>,
    /// Held from a flush's snapshot until its rows are written: rows
    /// replace, so an older snapshot written last would undo a newer one
    /// (the periodic flush against the one at a graceful stop).
    flushing: Mutex<()>,
}

/// One call, as usage counts it.
pub(super) struct Counted<'a> {
    pub tenant: &'a str,
    pub tool_id: String,
    pub tool: &'a str,
    pub version: u32,
    pub door: &'static str,
    pub outcome: &'a str,
    pub elapsed: Duration,
    /// Its outbound requests by declared host and status.
    pub outbound: BTreeMap<(String, &'static str), u64>,
    /// Why it was refused, if it was: (parameter, code) pairs, the
    /// parameter one of the signature's or a fixed placeholder, the code
    /// one of a fixed set (`host/refusals.rs`).
    pub refused: &'a [(&'a str, &'static str)],
    /// The toolset (name, version) whose root it came through, if one:
    /// it is counted for the toolset's designer too.
    pub toolset: Option<(&'a str, u32)>,
}

impl UsageState {
    pub(super) fn new(options: UsageOptions) -> UsageState {
        UsageState {
            options,
            replica: uuid::Uuid::new_v4().to_string(),
            totals: Mutex::new(HashMap::new()),
            flushing: Mutex::new(()),
        }
    }

    fn totals(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Totals>> {
        self.totals.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether calls are counted at all.
    fn counting(&self) -> bool {
        !self.options.flush.is_zero()
    }

    /// Counts a call in its minute and its hour.
    pub(super) fn count(&self, call: Counted<'_>) {
        if !self.counting() {
            return;
        }
        let now = unix_now();
        let ms = call.elapsed.as_secs_f64() * 1000.0;
        // A call refused for its inputs never ran: its microseconds would
        // only pull the latency of those that did down.
        let timed = call.outcome != super::console::REFUSED;
        let range = BOUNDS_MS.iter().position(|b| ms <= *b).unwrap_or(RANGES - 1);
        // One key, its bucket moved from the minute to the hour: a call
        // allocates it once, and a bucket's first call copies it once more.
        let mut key = Key {
            tenant: call.tenant.to_string(),
            tool_id: call.tool_id,
            tool: call.tool.to_string(),
            version: call.version,
            door: call.door,
            outcome: call.outcome.to_string(),
            granularity: "minute",
            bucket: now - now.rem_euclid(60),
            toolset: None,
        };
        let add = |cell: &mut Totals| {
            cell.calls += 1;
            if timed {
                cell.total_ms += ms;
                cell.histogram[range] += 1;
            }
            for ((host, status), n) in &call.outbound {
                *cell.outbound.entry(host.clone()).or_default().entry(status.to_string()).or_default() += n;
            }
            for (parameter, code) in call.refused {
                let codes = match cell.refused.get_mut(*parameter) {
                    Some(codes) => codes,
                    None => cell.refused.entry(parameter.to_string()).or_default(),
                };
                match codes.get_mut(*code) {
                    Some(n) => *n += 1,
                    None => {
                        codes.insert(code.to_string(), 1);
                    }
                }
            }
            cell.dirty = true;
        };
        let mut totals = self.totals();
        // The vendor's count, then the toolset designer's (a call through
        // a toolset's root is both).
        let views = std::iter::once(None).chain(call.toolset.map(|(name, version)| Some((name.to_string(), version))));
        for toolset in views {
            key.toolset = toolset;
            for (granularity, width) in [("minute", 60), ("hour", 3600)] {
                (key.granularity, key.bucket) = (granularity, now - now.rem_euclid(width));
                match totals.get_mut(&key) {
                    Some(cell) => add(cell),
                    None => add(totals
                        .entry(key.clone())
                        .or_insert_with(|| Totals { histogram: vec![0; RANGES], ..Totals::default() })),
                }
            }
        }
    }

    /// Writes the totals that changed, and forgets the buckets that are
    /// over (their last totals are written).
    pub(super) fn flush(&self, store: &dyn RegistryStore) -> Result<(), StoreError> {
        let _one_at_a_time = self.flushing.lock().unwrap_or_else(|p| p.into_inner());
        let now = unix_now();
        let rows: Vec<UsageRow> = {
            let mut totals = self.totals();
            let rows = totals
                .iter_mut()
                .filter(|(_, t)| t.dirty)
                .map(|(k, t)| {
                    t.dirty = false;
                    UsageRow {
                        tenant: k.tenant.clone(),
                        tool_id: k.tool_id.clone(),
                        tool: k.tool.clone(),
                        version: k.version,
                        door: k.door.to_string(),
                        outcome: k.outcome.clone(),
                        granularity: k.granularity.to_string(),
                        bucket: k.bucket,
                        replica: self.replica.clone(),
                        calls: t.calls,
                        total_ms: t.total_ms,
                        histogram: t.histogram.clone(),
                        outbound: t.outbound.clone(),
                        refused: t.refused.clone(),
                        toolset: k.toolset.clone(),
                    }
                })
                .collect();
            totals.retain(|k, t| t.dirty || k.bucket + if k.granularity == "minute" { 120 } else { 7200 } > now);
            rows
        };
        if rows.is_empty() {
            return Ok(());
        }
        store.put_usage(&rows).inspect_err(|_| {
            // Everything is written again next time (rows replace, so
            // writing one twice counts nothing twice).
            self.totals().values_mut().for_each(|t| t.dirty = true);
        })
    }

    /// Deletes what is past its keeping.
    fn sweep(&self, store: &dyn RegistryStore) -> Result<(), StoreError> {
        let now = unix_now();
        store.sweep_usage("minute", now - MINUTE_KEPT)?;
        store.sweep_usage("hour", now - i64::try_from(self.options.retention.as_secs()).unwrap_or(i64::MAX))?;
        Ok(())
    }
}

/// Flushes every [`UsageOptions::flush`] and sweeps every hour, on the
/// host's tool executor (the task ends with the host).
pub(super) fn start_usage_flush(host: &ToolHost) {
    let Some(executor) = &host.executor else { return };
    let (store, usage): (Arc<dyn RegistryStore>, Arc<UsageState>) = (host.store.clone(), host.usage.clone());
    // Counting nothing, the replica still sweeps what is past its keeping.
    let every =
        if usage.counting() { usage.options.flush.max(Duration::from_millis(100)) } else { Duration::from_secs(3600) };
    executor.normal().spawn(async move {
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut next_sweep = tokio::time::Instant::now();
        loop {
            ticks.tick().await;
            let sweep = tokio::time::Instant::now() >= next_sweep;
            if sweep {
                next_sweep += Duration::from_secs(3600);
            }
            let (store, usage) = (store.clone(), usage.clone());
            // The store blocks: keep it off the threads that run tools' async work.
            let done = tokio::task::spawn_blocking(move || {
                usage.flush(&*store)?;
                if sweep {
                    usage.sweep(&*store)?;
                }
                Ok::<_, StoreError>(())
            });
            if let Ok(Err(e)) = done.await {
                tracing::warn!(error = %e, "usage could not be written; trying again");
            }
        }
    });
}

/// A refusal's parameter for a name the signature does not have.
pub const UNKNOWN_PARAMETER: &str = "(unknown)";
/// A refusal's parameter when the request as a whole was refused.
pub const NO_PARAMETER: &str = "(none)";
/// The parameter of a call refused by a limit, its reason the code.
pub const LIMIT: &str = "(limit)";

/// The usage items' `refused` (by parameter and code, most first) and
/// `limited` (by reason) lists from the summed counts.
fn refused_json(counts: BTreeMap<(String, String), u64>) -> (Vec<Value>, Vec<Value>) {
    let (mut refused, mut limited) = (Vec::new(), Vec::new());
    for ((parameter, code), calls) in counts {
        match parameter.as_str() {
            LIMIT => limited.push((calls, json!({ "reason": code, "calls": calls }))),
            NO_PARAMETER => refused.push((calls, json!({ "parameter": null, "code": code, "calls": calls }))),
            _ => refused.push((calls, json!({ "parameter": parameter, "code": code, "calls": calls }))),
        }
    }
    // Most first; ties keep the (parameter, code) order.
    refused.sort_by_key(|r| std::cmp::Reverse(r.0));
    limited.sort_by_key(|l| std::cmp::Reverse(l.0));
    (refused.into_iter().map(|(_, v)| v).collect(), limited.into_iter().map(|(_, v)| v).collect())
}

/// What a window reads: its granularity and how far back.
pub fn window(name: &str) -> Option<(&'static str, i64)> {
    match name {
        "hour" => Some(("minute", 3600)),
        "day" => Some(("hour", 24 * 3600)),
        "week" => Some(("hour", 7 * 24 * 3600)),
        _ => None,
    }
}

/// The upper bound of the range holding the `q`-quantile call.
fn percentile(histogram: &[u64], q: f64) -> Option<f64> {
    let total: u64 = histogram.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = ((total as f64) * q).ceil().max(1.0) as u64;
    let mut seen = 0;
    for (i, n) in histogram.iter().enumerate() {
        seen += n;
        if seen >= rank {
            return Some(BOUNDS_MS.get(i).copied().unwrap_or(f64::INFINITY));
        }
    }
    None
}

impl ToolHost {
    /// Writes the usage counted since the last flush: a graceful stop's
    /// last step, so that a planned stop loses no counts.
    pub async fn flush_usage(&self) {
        let (store, usage) = (self.store.clone(), self.usage.clone());
        // The store blocks: off the async threads.
        let flushed = tokio::task::spawn_blocking(move || usage.flush(&*store)).await;
        if let Ok(Err(e)) = flushed {
            tracing::warn!(error = %e, "the last usage counts could not be written");
        }
    }

    /// A tenant's usage over `window` (`hour`, `day` or `week`), per tool
    /// version and door, every replica's rows summed; `tool` (a name or
    /// id) keeps one tool's. With `toolset`, only the calls made through
    /// that toolset's roots, per toolset version too (`toolsetVersion`):
    /// the designer's view of how each version's words do.
    pub fn usage(
        &self,
        tenant: &str,
        window_name: &str,
        tool: Option<&str>,
        toolset: Option<&str>,
    ) -> Result<Value, StoreError> {
        let (granularity, span) = window(window_name).unwrap_or(("minute", 3600));
        let width = if granularity == "minute" { 60 } else { 3600 };
        let since = unix_now() - span;
        let since = since - since.rem_euclid(width);
        let rows = match toolset {
            Some(toolset) => self.store.toolset_usage(tenant, toolset, granularity, since)?,
            None => self.store.usage(tenant, granularity, since)?,
        };
        #[derive(Default)]
        struct Sum {
            tool: String,
            outcomes: BTreeMap<String, u64>,
            histogram: Vec<u64>,
            /// Per bucket: (calls, failures).
            series: BTreeMap<i64, (u64, u64)>,
            /// (declared host, status) → requests.
            outbound: BTreeMap<(String, String), u64>,
            /// (parameter, code) → refused calls.
            refused: BTreeMap<(String, String), u64>,
        }
        let mut grouped: BTreeMap<(String, u32, String, Option<u32>), Sum> = BTreeMap::new();
        for r in rows.iter().filter(|r| tool.is_none_or(|t| t == r.tool || t == r.tool_id)) {
            let toolset_version = r.toolset.as_ref().map(|(_, n)| *n);
            let key = (r.tool_id.clone(), r.version, r.door.clone(), toolset_version);
            let sum = grouped.entry(key).or_insert_with(|| Sum {
                tool: r.tool.clone(),
                histogram: vec![0; RANGES],
                ..Sum::default()
            });
            *sum.outcomes.entry(r.outcome.clone()).or_default() += r.calls;
            for (i, n) in r.histogram.iter().enumerate().take(RANGES) {
                sum.histogram[i] += n;
            }
            let point = sum.series.entry(r.bucket).or_default();
            point.0 += r.calls;
            if r.outcome != "ok" {
                point.1 += r.calls;
            }
            for (host, statuses) in &r.outbound {
                for (status, n) in statuses {
                    *sum.outbound.entry((host.clone(), status.clone())).or_default() += n;
                }
            }
            for (parameter, codes) in &r.refused {
                for (code, n) in codes {
                    *sum.refused.entry((parameter.clone(), code.clone())).or_default() += n;
                }
            }
        }
        let items: Vec<Value> = grouped
            .into_iter()
            .map(|((tool_id, version, door, toolset_version), sum)| {
                let calls: u64 = sum.outcomes.values().sum();
                let latency: Map<String, Value> = [("p50", 0.5), ("p95", 0.95), ("p99", 0.99)]
                    .into_iter()
                    .map(|(name, q)| (name.to_string(), percentile(&sum.histogram, q).map_or(Value::Null, Value::from)))
                    .collect();
                let series: Vec<Value> = sum
                    .series
                    .into_iter()
                    .map(|(start, (calls, failures))| json!({ "start": start, "calls": calls, "failures": failures }))
                    .collect();
                let outbound: Vec<Value> = sum
                    .outbound
                    .into_iter()
                    .map(|((host, status), requests)| json!({ "host": host, "status": status, "requests": requests }))
                    .collect();
                let (refused, limited) = refused_json(sum.refused);
                let mut item = json!({
                    "tool": sum.tool,
                    "toolId": tool_id,
                    "version": version,
                    "door": door,
                    "calls": calls,
                    "outcomes": sum.outcomes,
                    "latencyMs": latency,
                    "series": series,
                    "outbound": outbound,
                    "refused": refused,
                    "limited": limited,
                });
                if let Some(n) = toolset_version {
                    item["toolsetVersion"] = n.into();
                }
                item
            })
            .collect();
        Ok(json!({ "window": window_name, "since": since, "bucketSeconds": width, "items": items }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_listed_most_first_and_limits_apart() {
        let counts: BTreeMap<(String, String), u64> = [
            (("text".to_string(), "missing_parameter".to_string()), 1),
            (("text".to_string(), "invalid_type".to_string()), 3),
            ((NO_PARAMETER.to_string(), "invalid_request".to_string()), 1),
            ((LIMIT.to_string(), "rate_limit".to_string()), 2),
        ]
        .into();
        let (refused, limited) = refused_json(counts);
        assert_eq!(
            refused,
            [
                json!({"parameter": "text", "code": "invalid_type", "calls": 3}),
                json!({"parameter": null, "code": "invalid_request", "calls": 1}),
                json!({"parameter": "text", "code": "missing_parameter", "calls": 1}),
            ]
        );
        assert_eq!(limited, [json!({"reason": "rate_limit", "calls": 2})]);
    }

    #[test]
    fn percentiles_are_the_upper_bound_of_their_range() {
        let mut histogram = vec![0; RANGES];
        histogram[2] = 90; // ≤ 2 ms
        histogram[6] = 9; // ≤ 32 ms
        histogram[RANGES - 1] = 1; // beyond the last bound
        assert_eq!(percentile(&histogram, 0.5), Some(2.0));
        assert_eq!(percentile(&histogram, 0.95), Some(32.0));
        assert_eq!(percentile(&histogram, 0.99), Some(32.0));
        assert_eq!(percentile(&histogram, 1.0), Some(f64::INFINITY));
        assert_eq!(percentile(&[0; RANGES], 0.5), None);
    }
}
