//! Prometheus metrics (`GET /metrics`, operator only): what the core did,
//! by tenant, tool, version and front door.
//!
//! Every label comes from a bounded set — tenants and tools exist only as
//! their quotas allow, versions per tool are bounded, the outcome is an
//! [`InvokeError::code`], routes come from the route table — so no
//! request can add a series of its own: no call ids, end users, keys or
//! free-form values (docs/observability.md).

use crate::host::{FrontDoor, InvokeError};
use crate::invocation::ToolResult;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
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
        }
    }
}

impl Metrics {
    /// An invocation of `tool`'s `version` through `door` ended with
    /// `outcome` after `elapsed`.
    pub fn invoked(
        &self,
        tenant: &str,
        tool: &str,
        version: u32,
        door: FrontDoor,
        outcome: &Result<ToolResult, InvokeError>,
        elapsed: Duration,
    ) {
        let outcome = match outcome {
            Ok(ToolResult::Outputs(_)) => "ok",
            Ok(ToolResult::Failed(_)) => "tool_error",
            Err(e) => e.code(),
        };
        let (tenant, tool, door) = (tenant.to_string(), tool.to_string(), door.as_str());
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

    /// The text exposition, with the instance gauges as they stand.
    pub fn render(&self, instances_in_use: usize, instances_max: usize) -> String {
        self.instances_in_use.set(i64::try_from(instances_in_use).unwrap_or(i64::MAX));
        self.instances_max.set(i64::try_from(instances_max).unwrap_or(i64::MAX));
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}
