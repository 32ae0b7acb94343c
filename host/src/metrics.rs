//! Prometheus metrics (`GET /metrics`, operator only): what the core did,
//! by tenant, tool, version and front door; CHEQ transactions; the tools'
//! outbound requests; and the runtime's compiled-code cache and pooling
//! allocator, read at each scrape.
//!
//! Every label comes from a bounded set — tenants and tools exist only as
//! their quotas allow, versions per tool are bounded, the outcome is an
//! invocation error's code, routes come from the route table, outbound hosts
//! are manifest entries, states and statuses are fixed lists — so no
//! request or tool can add a series of its own: no call ids, end users,
//! keys, paths or free-form values (docs/observability.md).

use crate::runtime::outbound::OutboundStatus;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A call of one version of one tool through one door, and how it ended.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InvocationLabels {
    tenant: String,
    tool: String,
    version: u32,
    door: &'static str,
    /// `ok`, `tool_error` (the tool answered its `tool-error`), or the
    /// error's code.
    outcome: &'static str,
}

/// One version of one tool through one door.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    tenant: String,
    tool: String,
    version: u32,
    door: &'static str,
}

/// One version of one tool.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabels {
    tenant: String,
    tool: String,
    version: u32,
}

/// One route of the HTTP surface, as declared (`/tools/{tool_ref}`), and
/// the status of the answer.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    method: &'static str,
    route: &'static str,
    status: u16,
}

/// A tenant.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantLabels {
    tenant: String,
}

/// A CHEQ transaction of one tool, and the state it reached.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CheqLabels {
    tenant: String,
    tool: String,
    /// A [`CheqEvent`].
    state: &'static str,
}

/// An outbound request of one tool, by the manifest entry that allowed it
/// (`undeclared` when none did) and how it ended.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutboundLabels {
    tenant: String,
    tool: String,
    host: String,
    /// An [`OutboundStatus`] (`2xx`… or why there was no answer).
    status: &'static str,
}

/// A tenant's catalog page that shows token counts, and how it got them.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TokenCountLabels {
    tenant: String,
    /// `counted`, `cached` or `busy`.
    outcome: &'static str,
}

/// Whether a compiled component came from the cache.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CacheLabels {
    result: &'static str,
}

/// One kind of pooling-allocator slot.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolLabels {
    kind: &'static str,
}

/// How freed pool slots are reset.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SlotResetLabels {
    method: &'static str,
}

/// What happened to a CHEQ transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheqEvent {
    /// A call needed confirmation: the transaction was opened.
    Opened,
    /// The end user accepted it.
    Accepted,
    /// The end user (or the resource URI's `?reject`) rejected it.
    Rejected,
    /// Nobody decided before it expired.
    Expired,
    /// Its accepted call ran.
    Done,
    /// Accepted after (or while) its version was retired: it never runs.
    Retired,
}

impl CheqEvent {
    fn as_str(self) -> &'static str {
        match self {
            CheqEvent::Opened => "opened",
            CheqEvent::Accepted => "accepted",
            CheqEvent::Rejected => "rejected",
            CheqEvent::Expired => "expired",
            CheqEvent::Done => "done",
            CheqEvent::Retired => "retired",
        }
    }
}

/// Counts one tool's outbound requests
/// (`plinth_outbound_requests_total`): handed to each of its invocations'
/// outbound policy.
#[derive(Debug, Clone)]
pub struct OutboundCounter {
    requests: Family<OutboundLabels, Counter>,
    tenant: String,
    tool: String,
    tally: Option<OutboundTally>,
}

impl crate::runtime::outbound::CountOutbound for OutboundCounter {
    /// A request to the declared `host` ended with `status`.
    fn count(&self, host: &str, status: OutboundStatus) {
        let labels = OutboundLabels {
            tenant: self.tenant.clone(),
            tool: self.tool.clone(),
            host: host.to_string(),
            status: status.as_str(),
        };
        self.requests.get_or_create(&labels).inc();
        if let Some(tally) = &self.tally {
            tally.add(host, status.as_str());
        }
    }
}

impl OutboundCounter {
    /// Also counts each request in `tally` (one call's, for its usage).
    pub fn tallied(self, tally: Option<OutboundTally>) -> Self {
        OutboundCounter { tally, ..self }
    }
}

/// One call's outbound requests by declared host and status (the labels of
/// `plinth_outbound_requests_total`), for the tenant's usage. Its size is
/// bounded by the call's request budget.
#[derive(Debug, Clone, Default)]
pub struct OutboundTally(Arc<Mutex<BTreeMap<(String, &'static str), u64>>>);

impl OutboundTally {
    fn add(&self, host: &str, status: &'static str) {
        let mut counts = self.0.lock().unwrap_or_else(|p| p.into_inner());
        *counts.entry((host.to_string(), status)).or_default() += 1;
    }

    /// The counts so far.
    pub fn take(&self) -> BTreeMap<(String, &'static str), u64> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// What the runtime reports of itself at a scrape.
#[derive(Debug, Clone, Copy, Default)]
pub struct RuntimeState {
    /// Tool instances running now (the host's slots taken).
    pub instances_in_use: usize,
    /// Tool instances that may run at once.
    pub instances_max: usize,
    /// Compiled components taken from the cache so far.
    pub cache_hits: u64,
    /// Components compiled because the cache had no sound entry.
    pub cache_misses: u64,
    /// The pooling allocator's slots in use, by kind, and their number
    /// (none with `--allocator on-demand`).
    pub pool: Option<crate::runtime::PoolSlots>,
    /// How freed pool slots are reset (none without the pooling
    /// allocator).
    pub slot_reset: Option<crate::runtime::SlotReset>,
    /// Tools' outbound connections opened so far, and idle in the pools now.
    pub outbound_connections_opened: u64,
    pub outbound_connections_idle: usize,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// 100 µs to about 15 s, each bucket 2.5× the one before.
fn seconds() -> Histogram {
    Histogram::new(exponential_buckets(0.000_1, 2.5, 14))
}

/// The server's metrics.
pub struct Metrics {
    registry: Registry,
    invocations: Family<InvocationLabels, Counter>,
    invocation_seconds: Histograms<CallLabels>,
    tool_seconds: Histograms<VersionLabels>,
    requests: Family<RouteLabels, Counter>,
    deploys: Family<TenantLabels, Counter>,
    retirements: Family<TenantLabels, Counter>,
    instances_in_use: Gauge,
    instances_max: Gauge,
    cheq: Family<CheqLabels, Counter>,
    cheq_interrupted: Counter,
    outbound: Family<OutboundLabels, Counter>,
    compiled_cache: Family<CacheLabels, Counter>,
    token_counts: Family<TokenCountLabels, Counter>,
    pool_in_use: Family<PoolLabels, Gauge>,
    pool_slots: Family<PoolLabels, Gauge>,
    outbound_connections_opened: Counter,
    outbound_connections_idle: Gauge,
    slot_reset: Family<SlotResetLabels, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("plinth");
        let invocations = Family::default();
        registry.register(
            "invocations",
            "Tool invocations that reached the core, by how they ended (outcome: ok, tool_error, or the error code)",
            invocations.clone(),
        );
        let invocation_seconds: Histograms<CallLabels> = Family::new_with_constructor(seconds);
        registry.register(
            "invocation_duration_seconds",
            "Whole invocations in the core: quotas, confirmation check, the tool, the output check",
            invocation_seconds.clone(),
        );
        let tool_seconds: Histograms<VersionLabels> = Family::new_with_constructor(seconds);
        registry.register(
            "tool_duration_seconds",
            "Time inside the tool: instantiation and the call, until it returned or was stopped",
            tool_seconds.clone(),
        );
        let requests = Family::default();
        registry.register("http_requests", "HTTP requests by declared route and status", requests.clone());
        let deploys = Family::default();
        registry.register("deploys", "Versions deployed (new bytes only)", deploys.clone());
        let retirements = Family::default();
        registry.register("retirements", "Versions retired", retirements.clone());
        let instances_in_use = Gauge::default();
        registry.register("instances_in_use", "Tool instances running now", instances_in_use.clone());
        let instances_max = Gauge::default();
        registry.register(
            "instances_max",
            "Tool instances that may run at once (--max-instances)",
            instances_max.clone(),
        );
        let cheq = Family::default();
        registry.register(
            "cheq_transactions",
            "CHEQ transactions by what happened to them (state: opened, accepted, rejected, expired, done, retired)",
            cheq.clone(),
        );
        let cheq_interrupted = Counter::default();
        registry.register(
            "cheq_interrupted",
            "Accepted CHEQ transactions found running at start, their server gone down mid-call (outcome unknown)",
            cheq_interrupted.clone(),
        );
        let outbound = Family::default();
        registry.register(
            "outbound_requests",
            "Outbound HTTP requests of tools, by the manifest entry that allowed them (undeclared: none) and how they ended",
            outbound.clone(),
        );
        let compiled_cache = Family::default();
        registry.register(
            "compiled_cache_lookups",
            "Components loaded (deploys, start, fleet catch-up) by whether their compiled code came from the cache",
            compiled_cache.clone(),
        );
        let token_counts = Family::default();
        registry.register(
            "catalog_token_counts",
            "Catalog pages that show token counts, by how they got them (outcome: counted, cached, busy: another \
             count of the tenant's was running, and the page said so)",
            token_counts.clone(),
        );
        let pool_in_use = Family::default();
        registry.register(
            "pool_slots_in_use",
            "Pooling-allocator slots in use, by kind (component instances, core instances, memories, tables, stacks)",
            pool_in_use.clone(),
        );
        let pool_slots = Family::default();
        registry.register("pool_slots", "Pooling-allocator slots, by kind", pool_slots.clone());
        let outbound_connections_opened = Counter::default();
        registry.register(
            "outbound_connections_opened",
            "Connections opened for tools' outbound requests (each request that found none idle in its tenant's pool)",
            outbound_connections_opened.clone(),
        );
        let outbound_connections_idle = Gauge::default();
        registry.register(
            "outbound_connections_idle",
            "Tools' outbound connections idle in the pools now",
            outbound_connections_idle.clone(),
        );
        let slot_reset = Family::default();
        registry.register(
            "pool_slot_reset",
            "1 for how freed pool slots are reset (scan: the written pages PAGEMAP_SCAN finds; prefix: the first \
             MiB of each memory, written or not; docs/sandbox.md)",
            slot_reset.clone(),
        );
        Metrics {
            registry,
            invocations,
            invocation_seconds,
            tool_seconds,
            requests,
            deploys,
            retirements,
            instances_in_use,
            instances_max,
            cheq,
            cheq_interrupted,
            outbound,
            compiled_cache,
            token_counts,
            pool_in_use,
            pool_slots,
            outbound_connections_opened,
            outbound_connections_idle,
            slot_reset,
        }
    }
}

impl Metrics {
    /// An invocation of `tool`'s `version` through `door` (its name) ended
    /// with `outcome` (`ok`, `tool_error` or the code of what stopped it)
    /// after `elapsed`.
    pub fn invoked(
        &self,
        tenant: &str,
        tool: &str,
        version: u32,
        door: &'static str,
        outcome: &'static str,
        elapsed: Duration,
    ) {
        let (tenant, tool) = (tenant.to_string(), tool.to_string());
        self.invocation_seconds
            .get_or_create(&CallLabels { tenant: tenant.clone(), tool: tool.clone(), version, door })
            .observe(elapsed.as_secs_f64());
        self.invocations.get_or_create(&InvocationLabels { tenant, tool, version, door, outcome }).inc();
    }

    /// A tool ran (or was stopped) after `elapsed` inside the sandbox.
    pub fn ran(&self, tenant: &str, tool: &str, version: u32, elapsed: Duration) {
        self.tool_seconds
            .get_or_create(&VersionLabels { tenant: tenant.to_string(), tool: tool.to_string(), version })
            .observe(elapsed.as_secs_f64());
    }

    /// An HTTP request to a declared route was answered with `status`.
    pub fn answered(&self, method: &'static str, route: &'static str, status: u16) {
        self.requests.get_or_create(&RouteLabels { method, route, status }).inc();
    }

    /// A version of one of `tenant`'s tools was deployed.
    pub fn deployed(&self, tenant: &str) {
        self.deploys.get_or_create(&TenantLabels { tenant: tenant.to_string() }).inc();
    }

    /// A version of one of `tenant`'s tools was retired.
    pub fn retired(&self, tenant: &str) {
        self.retirements.get_or_create(&TenantLabels { tenant: tenant.to_string() }).inc();
    }

    /// Something happened to a CHEQ transaction of `tenant`'s `tool`.
    pub fn cheq(&self, tenant: &str, tool: &str, event: CheqEvent) {
        let labels = CheqLabels { tenant: tenant.to_string(), tool: tool.to_string(), state: event.as_str() };
        self.cheq.get_or_create(&labels).inc();
    }

    /// `count` CHEQ transactions of `tenant`'s `tool` expired unanswered.
    pub fn cheq_expired(&self, tenant: &str, tool: &str, count: u64) {
        let labels =
            CheqLabels { tenant: tenant.to_string(), tool: tool.to_string(), state: CheqEvent::Expired.as_str() };
        self.cheq.get_or_create(&labels).inc_by(count);
    }

    /// A page of `tenant`'s catalog got its token counts as `outcome`
    /// (`counted`, `cached` or `busy`).
    pub fn token_counts(&self, tenant: &str, outcome: &'static str) {
        self.token_counts.get_or_create(&TokenCountLabels { tenant: tenant.to_string(), outcome }).inc();
    }

    /// `count` accepted transactions were found running at start.
    pub fn cheq_interrupted(&self, count: u64) {
        self.cheq_interrupted.inc_by(count);
    }

    /// The counter of `tenant`'s `tool`'s outbound requests.
    pub fn outbound(&self, tenant: &str, tool: &str) -> OutboundCounter {
        OutboundCounter {
            requests: self.outbound.clone(),
            tenant: tenant.to_string(),
            tool: tool.to_string(),
            tally: None,
        }
    }

    /// The text exposition, with the runtime's gauges and counts as they
    /// stand.
    pub fn render(&self, runtime: &RuntimeState) -> String {
        let gauge = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        self.instances_in_use.set(gauge(runtime.instances_in_use as u64));
        self.instances_max.set(gauge(runtime.instances_max as u64));
        // The runtime keeps the cache's counts; they are copied, not added.
        self.compiled_cache.get_or_create(&CacheLabels { result: "hit" }).inner().store(runtime.cache_hits, Relaxed);
        self.compiled_cache.get_or_create(&CacheLabels { result: "miss" }).inner().store(runtime.cache_misses, Relaxed);
        self.outbound_connections_opened.inner().store(runtime.outbound_connections_opened, Relaxed);
        self.outbound_connections_idle.set(gauge(runtime.outbound_connections_idle as u64));
        if let Some(pool) = &runtime.pool {
            for (kind, in_use, slots) in pool.kinds() {
                self.pool_in_use.get_or_create(&PoolLabels { kind }).set(gauge(in_use));
                self.pool_slots.get_or_create(&PoolLabels { kind }).set(gauge(slots));
            }
        }
        if let Some(method) = runtime.slot_reset {
            let method = match method {
                crate::runtime::SlotReset::Prefix => "prefix",
                crate::runtime::SlotReset::Scan => "scan",
            };
            self.slot_reset.get_or_create(&SlotResetLabels { method }).set(1);
        }
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}
