//! One tool's page: a version's signature for a human, its confirmation
//! policy, outbound hosts and hash, its last hour, and every version.

use super::*;

/// `GET catalog/tools/{id}[?version=N]`.
#[derive(Template)]
#[template(path = "pages/catalog_tool.html")]
struct ToolPage {
    frame: Frame,
    crumbs: Vec<(String, Option<String>)>,
    name: String,
    description: String,
    tags: Vec<(String, String)>,
    version: u32,
    current: Option<u32>,
    is_current: bool,
    retired: Option<String>,
    try_href: String,
    compare_href: Option<String>,
    inputs: Vec<ParamView>,
    outputs: Vec<ParamView>,
    confirmation: String,
    confirmation_note: Option<String>,
    hosts: Vec<String>,
    secrets: Vec<String>,
    /// The accounts it acts with: (provider, scopes, the hosts its token goes to).
    authorization: Vec<(String, String, String)>,
    /// The published annotations, as (what, said).
    annotations: Vec<(&'static str, String)>,
    tool_id: String,
    otc_id: String,
    sha256: String,
    deployed: String,
    /// The registry reference and manifest digest it was pulled from.
    source: Option<(String, String)>,
    /// Its verified signers: key name, kind, fingerprint.
    signers: Vec<(String, String, String)>,
    versions: Vec<VersionRow>,
    /// The tool's recent failed calls with their log lines, for a
    /// publisher of the tenant (or an operator); `None` for a consumer.
    failures: Option<Vec<ConsoleEntry>>,
    /// The tool's usage over the last hour, for a publisher; `None` for a
    /// consumer.
    usage: Option<UsageChart>,
    /// The toolsets it is in, and those a publisher may add it to.
    toolsets: super::toolsets::ToolInToolsets,
    /// What callers get wrong, for a publisher; `None` for a consumer.
    refusals: Option<RefusalPanel>,
}

/// "What callers get wrong": the calls refused for their inputs over the
/// last day, per version, and the parameters behind them beside their
/// descriptions, with recent examples (values only where the tenant shows
/// them).
struct RefusalPanel {
    /// (version, calls, refused, rate), newest version first.
    rates: Vec<(u32, u64, u64, String)>,
    /// The shown version's refused (parameter, code, calls, its
    /// description), most first.
    top: Vec<(String, String, u64, String)>,
    /// The shown version's newest refused calls in the console.
    examples: Vec<RefusalExample>,
}

/// A refused call shown as an example.
struct RefusalExample {
    time: String,
    door: &'static str,
    /// (parameter, code, value shown).
    refused: Vec<(String, &'static str, Option<String>)>,
}

/// The most (parameter, code) rows and examples shown.
const TOP_REFUSALS: usize = 8;
const REFUSAL_EXAMPLES: usize = 5;

impl RefusalPanel {
    fn new(usage: &serde_json::Value, version: &ToolVersion, recent: Vec<ConsoleEntry>) -> RefusalPanel {
        use std::collections::BTreeMap;
        let mut per_version: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
        let mut top: BTreeMap<(String, String), u64> = BTreeMap::new();
        for item in usage["items"].as_array().into_iter().flatten() {
            let number = item["version"].as_u64().and_then(|n| u32::try_from(n).ok()).unwrap_or(0);
            let counts = per_version.entry(number).or_default();
            counts.0 += item["calls"].as_u64().unwrap_or(0);
            counts.1 += item["outcomes"][crate::host::REFUSED].as_u64().unwrap_or(0);
            if number != version.number {
                continue;
            }
            for refused in item["refused"].as_array().into_iter().flatten() {
                let parameter = refused["parameter"].as_str().unwrap_or("(none)").to_string();
                let code = refused["code"].as_str().unwrap_or("?").to_string();
                *top.entry((parameter, code)).or_default() += refused["calls"].as_u64().unwrap_or(0);
            }
        }
        let rates = per_version
            .into_iter()
            .rev()
            .filter(|(_, (calls, _))| *calls > 0)
            .map(|(number, (calls, refused))| {
                (number, calls, refused, format!("{}%", (refused * 100 + calls / 2) / calls))
            })
            .collect();
        let mut top: Vec<_> = top.into_iter().collect();
        top.sort_by_key(|t| std::cmp::Reverse(t.1));
        let top = top
            .into_iter()
            .take(TOP_REFUSALS)
            .map(|((parameter, code), calls)| {
                let described = version.signature.input(&parameter).map(|p| p.description.clone()).unwrap_or_default();
                (parameter, code, calls, described)
            })
            .collect();
        let examples = recent
            .into_iter()
            .map(|entry| RefusalExample {
                time: entry.time(),
                door: entry.door,
                refused: entry
                    .refused
                    .into_iter()
                    .map(|r| (r.parameter.unwrap_or_else(|| "(none)".into()), r.code, r.value))
                    .collect(),
            })
            .collect();
        RefusalPanel { rates, top, examples }
    }
}

/// A tool's last hour, drawn as bars (server-rendered SVG, no script).
struct UsageChart {
    calls: u64,
    failures: u64,
    /// (door, version, p50, p95, p99) in milliseconds, as text.
    latency: Vec<(String, u32, String, String, String)>,
    /// (declared host, status, requests), every door and version's.
    outbound: Vec<(String, String, u64)>,
    /// One per minute: x, the height of its calls and of its failures (of
    /// [`CHART_HEIGHT`]), and its title.
    bars: Vec<(u32, u32, u32, String)>,
}

/// The chart's size in SVG units, and one minute's width.
const CHART_HEIGHT: u32 = 80;
const BAR_WIDTH: u32 = 8;

impl UsageChart {
    fn from_usage(usage: &serde_json::Value) -> UsageChart {
        use std::collections::BTreeMap;
        let items = usage["items"].as_array().cloned().unwrap_or_default();
        let since = usage["since"].as_i64().unwrap_or(0);
        let mut minutes: BTreeMap<i64, (u64, u64)> = BTreeMap::new();
        let (mut calls, mut failures) = (0, 0);
        let mut latency = Vec::new();
        let mut outbound: BTreeMap<(String, String), u64> = BTreeMap::new();
        let ms = |v: &serde_json::Value| v.as_f64().map_or("—".to_string(), |n| format!("≤ {n} ms"));
        for item in &items {
            calls += item["calls"].as_u64().unwrap_or(0);
            latency.push((
                item["door"].as_str().unwrap_or("?").to_string(),
                item["version"].as_u64().unwrap_or(0) as u32,
                ms(&item["latencyMs"]["p50"]),
                ms(&item["latencyMs"]["p95"]),
                ms(&item["latencyMs"]["p99"]),
            ));
            for request in item["outbound"].as_array().into_iter().flatten() {
                let host = request["host"].as_str().unwrap_or("?").to_string();
                let status = request["status"].as_str().unwrap_or("?").to_string();
                *outbound.entry((host, status)).or_default() += request["requests"].as_u64().unwrap_or(0);
            }
            for point in item["series"].as_array().into_iter().flatten() {
                let slot = minutes.entry(point["start"].as_i64().unwrap_or(0)).or_default();
                slot.0 += point["calls"].as_u64().unwrap_or(0);
                slot.1 += point["failures"].as_u64().unwrap_or(0);
                failures += point["failures"].as_u64().unwrap_or(0);
            }
        }
        let most = minutes.values().map(|m| m.0).max().unwrap_or(0).max(1);
        let bars = minutes
            .iter()
            .map(|(start, (n, failed))| {
                let x = u32::try_from((start - since) / 60).unwrap_or(0).min(60) * BAR_WIDTH;
                let height = |v: u64| ((v * u64::from(CHART_HEIGHT)).div_ceil(most)) as u32;
                let minute = chrono::DateTime::from_timestamp(*start, 0)
                    .map_or(String::new(), |t| t.format("%H:%M").to_string());
                (x, height(*n), height(*failed), format!("{minute} UTC: {n} calls, {failed} failed"))
            })
            .collect();
        let outbound = outbound.into_iter().map(|((host, status), n)| (host, status, n)).collect();
        UsageChart { calls, failures, latency, outbound, bars }
    }
}

/// A row of the versions table.
struct VersionRow {
    number: u32,
    href: String,
    deployed: String,
    retired: Option<String>,
    current: bool,
    sha256: String,
    short_sha256: String,
    diff_href: Option<String>,
}

#[utoipa::path(get, summary = "A tool's page", description = "A version's signature for a human (inputs with their types, ranges, enum values and descriptions; outputs), its confirmation policy, the outbound hosts it may reach, its content hash, and every version.", path = "/catalog/tools/{tool_id}", tag = "Catalog", operation_id = "catalog_tool",
    params(("tool_id" = String, Path, description = "The tool's `toolId`"), ("version" = Option<u32>, Query, description = "The version shown (the current one by default)")),
    responses((status = 200, description = "The tool", content_type = "text/html", body = String), (status = 404, description = "No such tool or version", content_type = "text/html", body = String)))]
pub(in crate::api) async fn tool(about: AboutTool) -> Response {
    let AboutTool { host, options, session, tool, query } = about;
    let version = match find_version(&tool, field(&query, "version")) {
        Ok(version) => version,
        Err(why) => return why.page(&options, &session),
    };
    let links = Links::new(&options, &session.tenant);
    let current = tool.current().map(|v| v.number);
    let signature = &version.signature;
    let versions = tool.versions_before(None, usize::MAX);
    let rows = versions
        .iter()
        .map(|v| VersionRow {
            number: v.number,
            href: links.version(&tool, v.number),
            deployed: at(v.created_at),
            retired: v.retired_at().map(at),
            current: Some(v.number) == current,
            sha256: v.sha256.clone(),
            short_sha256: v.sha256.chars().take(12).collect(),
            diff_href: current
                .filter(|c| *c != v.number)
                .map(|c| links.diff_of(&tool, v.number.min(c), v.number.max(c))),
        })
        .collect();
    let (confirmation, confirmation_note) = confirmation_words(&host, &tool, &version);
    let page = ToolPage {
        frame: frame(&options, &links, tool.name.clone(), Some(&session)),
        crumbs: vec![("Catalog".into(), Some(links.home())), (tool.name.clone(), None)],
        name: tool.name.clone(),
        description: signature.description.clone(),
        tags: signature.tags.iter().map(|t| (t.clone(), links.tagged(t))).collect(),
        version: version.number,
        current,
        is_current: Some(version.number) == current,
        retired: version.retired_at().map(at),
        try_href: format!("{}?version={}", links.try_it(&tool), version.number),
        compare_href: (versions.len() > 1).then(|| links.diff(&tool)),
        inputs: input_views(signature, |_| None),
        outputs: output_views(signature, |_| None),
        confirmation,
        confirmation_note,
        hosts: version.manifest.allowed_hosts.clone(),
        secrets: version.manifest.secrets.clone(),
        authorization: version
            .manifest
            .authorization
            .iter()
            .map(|need| {
                let scopes =
                    if need.scopes.is_empty() { "the provider's default".into() } else { need.scopes.join(" ") };
                (need.provider.clone(), scopes, need.hosts.join(", "))
            })
            .collect(),
        annotations: annotation_words(&host, &tool, &version),
        tool_id: tool.id.to_string(),
        otc_id: crate::tool_ids::otc_tool_id(&tool, &version),
        sha256: version.sha256.clone(),
        deployed: at(version.created_at),
        source: version.provenance.source.as_ref().map(|s| (s.reference.clone(), s.manifest_digest.clone())),
        signers: version
            .provenance
            .signers
            .iter()
            .map(|s| (s.key.clone(), s.kind.clone(), s.fingerprint.clone()))
            .collect(),
        versions: rows,
        failures: (session.principal.role >= crate::tenancy::Role::Publisher).then(|| {
            let filter = crate::host::ConsoleFilter {
                tool: Some(tool.id.to_string()),
                failures_only: true,
                ..Default::default()
            };
            host.recent_calls(&tool.tenant, &filter, None, RECENT_FAILURES)
        }),
        usage: None,
        toolsets: super::toolsets::ToolInToolsets::of(&host, &links, &session, &tool),
        refusals: None,
    };
    let mut page = page;
    if page.failures.is_some() {
        let (reader, tenant, id) = (host.clone(), tool.tenant.clone(), tool.id.to_string());
        // The store may block: off the request threads.
        let usage = tokio::task::spawn_blocking(move || {
            (reader.usage(&tenant, "hour", Some(&id), None), reader.usage(&tenant, "day", Some(&id), None))
        })
        .await;
        if let Ok((hour, day)) = usage {
            page.usage = hour.ok().map(|u| UsageChart::from_usage(&u));
            let filter = crate::host::ConsoleFilter {
                tool: Some(tool.id.to_string()),
                version: Some(version.number),
                outcomes: vec![crate::host::REFUSED.to_string()],
                ..Default::default()
            };
            let recent = host.recent_calls(&tool.tenant, &filter, None, REFUSAL_EXAMPLES);
            page.refusals = day.ok().map(|u| RefusalPanel::new(&u, &version, recent));
        }
    }
    pages::page(StatusCode::OK, &page)
}

/// Recent failed calls a publisher sees on a tool's page.
const RECENT_FAILURES: usize = 10;

/// The confirmation policy that applies to `version`'s calls, in words,
/// and where it comes from.
fn confirmation_words(host: &AppState, tool: &Tool, version: &ToolVersion) -> (String, Option<String>) {
    let private = version.signature.inputs.iter().any(|p| p.private);
    let overridden = host.confirmation_override(tool.id);
    let policy = overridden.as_ref().unwrap_or(&version.manifest.confirmation);
    let rule = if private {
        "Every call needs its end user's confirmation: the end user types its private inputs on the confirmation page."
            .to_string()
    } else if policy.required {
        "Every call needs its end user's confirmation before it runs.".to_string()
    } else if let Some(when) = &policy.when {
        format!(
            "A call needs its end user's confirmation when this condition on its inputs holds (or cannot be evaluated): {when}"
        )
    } else {
        "No call needs confirmation: calls run at once.".to_string()
    };
    let source = if overridden.is_some() {
        Some("Set by the tenant's publisher, over what the tool declares in its plinth.toml.".to_string())
    } else if !policy.is_empty() {
        Some("Declared by the tool ([confirmation] in its plinth.toml).".to_string())
    } else {
        None
    };
    (rule, source)
}
