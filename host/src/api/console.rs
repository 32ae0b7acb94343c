//! The vendor's console over HTTP: a tenant's recent calls and a live tail
//! of them, for its publishers (and operators), never its consumers.
//!
//! - `GET /admin/logs[?tool&version&outcome&level&before&limit]`: the
//!   recent calls, newest first, as JSON pages;
//! - the same with `Accept: text/event-stream`: a live tail, as
//!   server-sent events (`event: call` per call, `event: dropped` when the
//!   reader fell behind and lost some, `event: end` when the stream ends);
//! - `GET /admin/usage`: usage per tool version and door (refused calls by
//!   parameter and code, and by limit, among them);
//! - `GET|PUT /admin/console-settings`: whether refused calls' values are
//!   shown.
//!
//! What an entry holds, how long it is kept and what is never in it:
//! `host/console.rs`.

use super::{ApiError, AppState, Caller, auth};
use crate::host::{ConsoleEntry, ConsoleFilter, ConsoleSettings};
use axum::Extension;
use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// A page's entries unless `limit` says otherwise, and the most it may say.
const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 500;
/// How long one tail lasts; `plinth logs --follow` opens the next.
const TAIL_LIFETIME: Duration = Duration::from_secs(3600);
/// How long a tail gathers the calls that end after the first it has not
/// sent, before it sends them: at most this late, and a few writes a
/// second for any number of calls. It keeps up while fewer calls than the
/// ring holds end in this time (`--console-entries`, 1,000; fewer when
/// calls log a lot: `--console-max-kib`).
const TAIL_GATHER: Duration = Duration::from_millis(25);
/// A write of a tail stops taking calls past this many bytes: a stalled
/// reader's channel (64 writes) holds a few MiB at most.
const TAIL_WRITE_BYTES: usize = 16 << 10;
/// How often a tail says it is alive, and checks its key is still good.
const TAIL_HEARTBEAT: Duration = Duration::from_secs(5);

/// The query of both forms.
struct LogsQuery {
    filter: ConsoleFilter,
    before: Option<u64>,
    limit: usize,
}

fn parse_query(raw: Option<&str>) -> Result<LogsQuery, ApiError> {
    let mut query = LogsQuery { filter: ConsoleFilter::default(), before: None, limit: DEFAULT_LIMIT };
    let bad = |what: &str| ApiError::bad_request("invalid_query", what.to_string());
    for (key, value) in form_urlencoded::parse(raw.unwrap_or_default().as_bytes()) {
        match &*key {
            "tool" if !value.is_empty() && value.len() <= 128 => query.filter.tool = Some(value.into_owned()),
            "version" => {
                query.filter.version = Some(
                    value
                        .parse::<u32>()
                        .ok()
                        .filter(|n| *n >= 1)
                        .ok_or_else(|| bad("version is a whole number from 1"))?,
                )
            }
            "outcome" => {
                for outcome in value.split(',').filter(|o| !o.is_empty()).take(32) {
                    if outcome.len() > 64 || !outcome.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
                        return Err(bad("outcome is a comma-separated list of codes such as ok,tool_error,timeout"));
                    }
                    query.filter.outcomes.push(outcome.to_string());
                }
            }
            "level" => {
                query.filter.level = Some(
                    crate::host::console_level(&value)
                        .ok_or_else(|| bad("level is one of trace, debug, info, warn, error"))?,
                )
            }
            "before" => query.before = Some(value.parse().map_err(|_| bad("before is an entry's seq"))?),
            "limit" => {
                query.limit = value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_LIMIT).contains(n))
                    .ok_or_else(|| bad("limit is a whole number from 1 to 500"))?
            }
            "tool" => return Err(bad("tool is a tool's name or id")),
            _ => {}
        }
    }
    Ok(query)
}

/// The tenant's recent calls, or a live tail of them.
#[utoipa::path(get, path = "/admin/logs", tag = "Admin", operation_id = "logs",
    params(
        ("tool" = Option<String>, Query, description = "Only this tool's calls (its name or toolId)"),
        ("version" = Option<u32>, Query, minimum = 1, description = "Only this version's"),
        ("outcome" = Option<String>, Query, description = "Only these outcomes, comma-separated (`ok`, `tool_error`, `timeout`, `resource_exhausted`, `trapped`, …)"),
        ("level" = Option<String>, Query, description = "The least level of the log lines shown: `trace`, `debug`, `info`, `warn` or `error`"),
        ("before" = Option<u64>, Query, description = "Entries older than this `seq` (the next page)"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 500, description = "Entries per page (100)"),
    ),
    responses(
        (status = 200, description = "The recent calls, newest first (JSON); or, with `Accept: text/event-stream`, a live tail: `event: call` with an entry per call as it ends, `event: dropped` with how many the reader lost by falling behind, `event: end` when the stream ends (after an hour, when the server stops or the key is revoked)", content(
            (super::schemas::ConsolePage = "application/json"),
            (String = "text/event-stream"),
        )),
        (status = 400, description = "`invalid_query`", body = super::schemas::ErrorBody),
        (status = 429, description = "`too_many_tails`: the tenant has as many live tails open as the operator allows", body = super::schemas::ErrorBody, headers(("Retry-After" = u64, description = "Seconds"))),
    ))]
pub(super) async fn logs(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    stopping: tokio::sync::watch::Receiver<bool>,
) -> Result<Response, ApiError> {
    let query = parse_query(raw.as_deref())?;
    let wants_stream = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.to_ascii_lowercase().contains("text/event-stream"));
    if wants_stream {
        let key = auth::bearer_token(&headers).map(str::to_string);
        return tail(host, caller, query.filter, key, stopping);
    }
    let items = host.recent_calls(&caller.tenant, &query.filter, query.before, query.limit);
    let next = (items.len() == query.limit).then(|| items.last().map(|e| e.seq.to_string())).flatten();
    let body = json!({
        "items": items,
        "next": next,
        "retentionMinutes": host.console_retention().as_secs() / 60,
    });
    Ok(axum::Json(body).into_response())
}

/// The tenant's usage per tool version and door over the last hour, day or
/// week: calls by outcome, latency percentiles, calls and failures per
/// bucket; fleet-wide (every replica's counts). With `toolset`, only the
/// calls through that toolset's roots, per toolset version too.
#[utoipa::path(get, path = "/admin/usage", tag = "Admin", operation_id = "usage",
    params(
        ("window" = Option<String>, Query, description = "`hour` (minute buckets; the default), `day` or `week` (hour buckets)"),
        ("tool" = Option<String>, Query, description = "Only this tool (its name or toolId)"),
        ("toolset" = Option<String>, Query, description = "Only the calls made through this toolset's roots, each item per toolset version (`toolsetVersion`): the designer's view (docs/toolsets.md)"),
    ),
    responses(
        (status = 200, description = "The usage", body = super::schemas::UsagePage),
        (status = 400, description = "`invalid_query`", body = super::schemas::ErrorBody),
        super::schemas::StorageFailed,
    ))]
pub(super) async fn usage(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let (mut window, mut tool, mut toolset) = ("hour".to_string(), None, None);
    for (key, value) in form_urlencoded::parse(raw.unwrap_or_default().as_bytes()) {
        match &*key {
            "window" if crate::host::usage_window(&value).is_some() => window = value.into_owned(),
            "window" => return Err(ApiError::bad_request("invalid_query", "window is hour, day or week")),
            "tool" if !value.is_empty() && value.len() <= 128 => tool = Some(value.into_owned()),
            "tool" => return Err(ApiError::bad_request("invalid_query", "tool is a tool's name or id")),
            "toolset" if crate::host::toolsets::is_toolset_name(&value) => toolset = Some(value.into_owned()),
            "toolset" => return Err(ApiError::bad_request("invalid_query", "toolset is a toolset's name")),
            _ => {}
        }
    }
    let tenant = caller.tenant.clone();
    // The store may block: off the request threads.
    let usage = tokio::task::spawn_blocking(move || host.usage(&tenant, &window, tool.as_deref(), toolset.as_deref()))
        .await
        .map_err(|_| ApiError::internal("reading usage was interrupted"))?
        .map_err(|e| {
            tracing::error!(error = %e, "usage could not be read");
            ApiError::storage_failed("usage could not be read (the database cannot be reached); try again")
        })?;
    Ok(axum::Json(usage).into_response())
}

/// The tenant's console settings.
#[utoipa::path(get, path = "/admin/console-settings", tag = "Admin", operation_id = "get_console_settings",
    responses((status = 200, description = "The settings (the default: no offending value shown)", body = super::schemas::ConsoleSettings)))]
pub(super) async fn get_console_settings(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Response {
    axum::Json(host.console_settings(&caller.tenant)).into_response()
}

/// Replaces the tenant's console settings (audited): whether the console
/// shows the values callers gave for refused parameters (cut; never a
/// `private` input's).
#[utoipa::path(put, path = "/admin/console-settings", tag = "Admin", operation_id = "put_console_settings",
    request_body(content = super::schemas::ConsoleSettings, content_type = "application/json"),
    responses(
        (status = 200, description = "Stored", body = super::schemas::ConsoleSettings),
        (status = 400, description = "`invalid_json`", body = super::schemas::ErrorBody),
        super::schemas::StorageFailed,
    ))]
pub(super) async fn put_console_settings(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let settings: ConsoleSettings = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request("invalid_json", format!("the body is not valid: {e}")))?;
    let principal = caller.principal()?;
    // It writes to the store: off the async workers.
    crate::store::off_the_workers(|| host.set_console_settings(principal, &caller.tenant, settings))?;
    Ok(axum::Json(host.console_settings(&caller.tenant)).into_response())
}

/// A live tail as server-sent events.
fn tail(
    host: AppState,
    caller: Caller,
    filter: ConsoleFilter,
    key: Option<String>,
    mut stopping: tokio::sync::watch::Receiver<bool>,
) -> Result<Response, ApiError> {
    let mut tail = host
        .tail(&caller.tenant)
        .map_err(|e| ApiError::new(StatusCode::TOO_MANY_REQUESTS, "too_many_tails", e.to_string()))?;
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(64);
    tokio::spawn(async move {
        // A tail opened while the server stops ends at once.
        let stopped = *stopping.borrow_and_update();
        let ends = tokio::time::sleep(if stopped { Duration::ZERO } else { TAIL_LIFETIME });
        tokio::pin!(ends);
        let mut heartbeat = tokio::time::interval(TAIL_HEARTBEAT);
        heartbeat.tick().await;
        // Never waits on the reader: what does not fit in the channel is
        // counted and said in an `event: dropped`, so every way a tail ends
        // is always heard.
        let mut dropped: u64 = 0;
        if !offer(&tx, &mut dropped, ": tailing\n\n", 0) {
            return;
        }
        loop {
            tokio::select! {
                () = tail.arrival() => {
                    // Calls that end close together go out together: under
                    // load, one wake-up and a few writes for many calls.
                    tokio::time::sleep(TAIL_GATHER).await;
                    let (entries, lost) = tail.take();
                    dropped += lost;
                    if !write_calls(&tx, &filter, &entries, &mut dropped).await {
                        return;
                    }
                }
                _ = heartbeat.tick() => {
                    // A revoked key ends its tails.
                    if key.as_deref().is_some_and(|k| host.authenticate(k).is_none()) {
                        break;
                    }
                    if !offer(&tx, &mut dropped, ": alive\n\n", 0) {
                        return;
                    }
                }
                () = &mut ends => break,
                _ = stopping.changed() => break,
                // The reader went away: its place is free at once.
                () = tx.closed() => return,
            }
            if dropped > 0 && tx.capacity() > 1 {
                let lost = std::mem::take(&mut dropped);
                if !offer(&tx, &mut dropped, event("dropped", &json!({ "dropped": lost })), 0) {
                    return;
                }
            }
        }
        offer(&tx, &mut dropped, event("end", &json!({})), 0);
    });
    let mut response = Response::new(axum::body::Body::new(EventStream { rx }));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // Proxies (nginx) pass the events on as they come.
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(response)
}

/// Writes the calls that `filter` shows, in writes of about
/// [`TAIL_WRITE_BYTES`]; `false` when the reader is gone.
async fn write_calls(
    tx: &tokio::sync::mpsc::Sender<Bytes>,
    filter: &ConsoleFilter,
    entries: &[Arc<ConsoleEntry>],
    dropped: &mut u64,
) -> bool {
    let (mut batch, mut calls) = (Vec::new(), 0);
    for entry in entries {
        let Some(shown) = filter.apply(entry) else { continue };
        // A reader that has not read the last 64 writes loses this call:
        // it is counted, not serialised.
        if tx.capacity() == 0 {
            *dropped += 1;
            continue;
        }
        push_call(&mut batch, &shown);
        calls += 1;
        if batch.len() >= TAIL_WRITE_BYTES {
            if !offer(tx, dropped, std::mem::take(&mut batch), calls) {
                return false;
            }
            calls = 0;
            // The calls on this thread wait while it writes: they go first
            // between writes.
            tokio::task::yield_now().await;
        }
    }
    batch.is_empty() || offer(tx, dropped, batch, calls)
}

/// Appends the event of one call to `batch`.
fn push_call(batch: &mut Vec<u8>, entry: &ConsoleEntry) {
    use std::io::Write;
    let _ = write!(batch, "event: call\nid: {}\ndata: ", entry.seq);
    let _ = serde_json::to_writer(&mut *batch, entry);
    batch.extend_from_slice(b"\n\n");
}

/// Sends `text` unless the reader's channel is full: then it is dropped,
/// and the `calls` it held are counted. `false` when the reader is gone.
fn offer(tx: &tokio::sync::mpsc::Sender<Bytes>, dropped: &mut u64, text: impl Into<Bytes>, calls: u64) -> bool {
    match tx.try_send(text.into()) {
        Ok(()) => true,
        Err(tokio::sync::mpsc::error::TrySendError::Full(_)) => {
            *dropped += calls;
            true
        }
        Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => false,
    }
}

/// One server-sent event without an id (a call's is [`push_call`]).
fn event(name: &str, data: &Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

/// A response body fed by a channel: ends when the sender does.
struct EventStream {
    rx: tokio::sync::mpsc::Receiver<Bytes>,
}

impl http_body::Body for EventStream {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        self.rx.poll_recv(cx).map(|chunk| chunk.map(|bytes| Ok(http_body::Frame::data(bytes))))
    }
}

/// The console (logs and usage)'s operations, merged into the OpenAPI document
/// (`openapi.rs`).
#[derive(utoipa::OpenApi)]
#[openapi(paths(logs, usage, get_console_settings, put_console_settings,))]
pub(super) struct Doc;
