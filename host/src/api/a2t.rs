//! A2T (also published as N-ACT): enumeration and invocation.
//!
//! - `GET /tools` — latest version of each tool, paginated, `tag` filter
//! - `GET /tools/{toolId}`, `GET /tools/{toolId}/versions[/{n}]`
//! - `POST /tools/{toolId}:invoke`, `POST /tools/{toolId}/versions/{n}:invoke`
//!
//! Choices where the draft is open are documented in `docs/a2t.md`.

use super::paging::{PageQuery, cursor, json_text, page_of_json};
use super::{ApiError, ApiOptions, AppState, Caller, schemas};
use crate::door::FrontDoor;
use crate::host::{Call, InvokeError, ToolHost};
use crate::invocation::ToolResult;
use crate::registry::{Tool, ToolVersion};
use crate::signature::Wording;
use crate::signature::a2t::LockedJson;
use crate::telemetry::CallerTrace;
use axum::Extension;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::borrow::Cow;
use std::sync::Arc;

/// `{toolId}:invoke` and `{n}:invoke`: the A2T invocation suffix.
pub fn strip_invoke_suffix(segment: &str) -> Option<&str> {
    segment.strip_suffix(":invoke")
}

/// A version resource, as JSON text: the signature plus what identifies its
/// bytes, whether it is retired, and whether its calls need their end
/// user's confirmation (a publisher may change that). The locked part was
/// serialised when the version was loaded; a page of 100 only splices the
/// few fields that change into it. Under a toolset's root, with the
/// designer's words (`wording`), the locked part is made again with them.
pub(super) fn version_json(host: &AppState, tool: &Tool, version: &ToolVersion, wording: Option<&Wording>) -> String {
    spliced(host, tool, version, &locked(tool, version, wording).0)
}

/// A version's locked A2T JSON and its signature's hash, with `wording`
/// in place of the vendor's words when given.
fn locked<'a>(tool: &Tool, version: &'a ToolVersion, wording: Option<&Wording>) -> (Cow<'a, LockedJson>, Cow<'a, str>) {
    match wording {
        None => (Cow::Borrowed(&version.a2t_json), Cow::Borrowed(&version.signature_sha256)),
        Some(wording) => {
            let reworded = wording.apply(&version.signature);
            (Cow::Owned(version.a2t_json_with(&tool.id, &reworded)), Cow::Owned(reworded.sha256()))
        }
    }
}

/// [`version_json`] from the locked part.
fn spliced(host: &AppState, tool: &Tool, version: &ToolVersion, locked: &LockedJson) -> String {
    let mut json = String::with_capacity(locked.head.len() + locked.tail.len() + 64);
    json.push_str(&locked.head);
    match current_number(tool) {
        Some(n) => json.push_str(&n.to_string()),
        None => json.push_str("null"),
    }
    json.push_str(&locked.tail);
    // Extension (docs/a2t.md): the call must name its end user.
    if let Some(marker) = host.confirmation_need(tool, version).marker() {
        json.push_str(",\"confirmation\":");
        json.push_str(&Value::from(marker).to_string());
    }
    if let Some(at) = version.retired_at() {
        json.push_str(&format!(",\"retired\":true,\"retiredAt\":{at}"));
    }
    json.push('}');
    json
}

fn current_number(tool: &Tool) -> Option<u32> {
    tool.current().map(|v| v.number)
}

/// A version resource with its `ETag`; `304` when `If-None-Match` matches.
/// The tag covers the signature (locked per version; under a toolset's
/// root, with its words) and what may still change about the resource:
/// the current version, retirement and the confirmation a publisher's
/// override may require.
fn cacheable(
    host: &AppState,
    tool: &Tool,
    version: &ToolVersion,
    wording: Option<&Wording>,
    headers: &HeaderMap,
) -> Response {
    let (locked, signature_sha256) = locked(tool, version, wording);
    let current = current_number(tool).map_or("none".to_string(), |n| n.to_string());
    let retired = if version.retired_at().is_some() { "-retired" } else { "" };
    let confirmation = host.confirmation_need(tool, version).marker().map_or(String::new(), |m| format!("-{m}"));
    let etag = format!("\"{signature_sha256}-{current}{retired}{confirmation}\"");
    let matches =
        headers.get_all(header::IF_NONE_MATCH).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(',')).any(
            |tag| {
                let tag = tag.trim();
                tag == "*" || tag.trim_start_matches("W/") == etag
            },
        );
    let mut response = if matches {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        json_text(spliced(host, tool, version, &locked))
    };
    if let Ok(value) = HeaderValue::from_str(&etag) {
        response.headers_mut().insert(header::ETAG, value);
    }
    response
}

const TOOLS_CURSOR: &str = "tools:";
const VERSIONS_CURSOR: &str = "versions:";

/// The tenant's tools, each at its current version, by name.
#[utoipa::path(get, path = "/tools", tag = "A2T", operation_id = "list_tools",
    params(
        schemas::PageParams,
        ("tag" = Option<Vec<String>>, Query, explode = true, description = "Only tools with every tag given (repeatable)"),
    ),
    responses(
        (status = 200, description = "A page of tools", body = schemas::ToolPage, links(
            ("GetTool" = (operation_id = "get_tool", parameters(("tool_id" = "$response.body#/items/0/toolId")))),
            ("ListVersions" = (operation_id = "list_versions", parameters(("tool_id" = "$response.body#/items/0/toolId")))),
            ("GetVersion" = (operation_id = "get_version", parameters(("tool_id" = "$response.body#/items/0/toolId"), ("version" = "$response.body#/items/0/version")))),
            ("InvokeTool" = (operation_id = "invoke_tool", parameters(("tool_id" = "$response.body#/items/0/toolId")))),
            ("InvokeVersion" = (operation_id = "invoke_version", parameters(("tool_id" = "$response.body#/items/0/toolId"), ("version" = "$response.body#/items/0/version")))),
            ("GetPolicy" = (operation_id = "get_policy", parameters(("tool_id" = "$response.body#/items/0/toolId")))),
            ("PutPolicy" = (operation_id = "put_policy", parameters(("tool_id" = "$response.body#/items/0/toolId")))),
            ("DeletePolicy" = (operation_id = "delete_policy", parameters(("tool_id" = "$response.body#/items/0/toolId")))),
            ("Retire" = (operation_id = "retire", parameters(("tool_id" = "$response.body#/items/0/toolId"), ("version" = "$response.body#/items/0/version")))),
        )),
        (status = 400, description = "`invalid_page_limit`, `invalid_cursor`", body = schemas::ErrorBody),
    ))]
pub(super) async fn list_tools(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let query = PageQuery::parse(raw.as_deref())?;
    let after = query.cursor_after(TOOLS_CURSOR)?;
    let tags = &query.tags;
    let view = caller.toolset.as_deref();
    // A tool whose every version is retired is no longer enumerated; through
    // a toolset, only its tools, each at the version it gives.
    let (tools, more) = host.registry().page(&caller.tenant, after.as_deref(), query.limit, |tool| {
        ToolHost::version_in(view, tool).is_some_and(|listed| tags.iter().all(|t| listed.signature.tags.contains(t)))
    });
    let next = if more { tools.last().map(|t| cursor(TOOLS_CURSOR, &t.name)) } else { None };
    let items = tools.iter().filter_map(|t| {
        Some(version_json(&host, t, &*ToolHost::version_in(view, t)?, ToolHost::wording_in(view, &t.name)))
    });
    Ok(page_of_json(items, query.limit, next))
}

/// The caller's tenant's tool with this id; another tenant's is `404` like
/// one that does not exist.
/// The tool `id` in the caller's view: through a toolset, one outside it
/// is answered as one that does not exist.
fn find_tool(host: &AppState, caller: &Caller, id: &str) -> Result<Arc<Tool>, ApiError> {
    host.tool_in(&caller.tenant, caller.toolset.as_deref(), id)
        .ok_or_else(|| ApiError::not_found(format!("there is no tool with id `{id}`")))
}

fn parse_version(raw: &str) -> Result<u32, ApiError> {
    raw.parse::<u32>()
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| ApiError::not_found(format!("`{raw}` is not a version; versions are whole numbers from 1")))
}

/// The tool's current version.
#[utoipa::path(get, path = "/tools/{tool_id}", tag = "A2T", operation_id = "get_tool",
    params(("tool_id" = String, Path, description = "The tool's `toolId`"),
        ("If-None-Match" = Option<String>, Header, description = "An `ETag` of this resource: `304` when it still matches"),
    ),
    responses(
        (status = 200, description = "The current version", body = schemas::ToolSignature, headers(("ETag" = String, description = "Changes with the signature, the current version, retirement and the confirmation a call needs"))),
        (status = 304, description = "`If-None-Match` matched", headers(("ETag" = String, description = "Changes with the signature, the current version, retirement and the confirmation a call needs"))),
        (status = 404, description = "`not_found`: no such tool in this tenant", body = schemas::ErrorBody),
        (status = 410, description = "`tool_retired`: every version is retired", body = schemas::ErrorBody),
    ))]
pub(super) async fn get_tool(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(tool_id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let tool = find_tool(&host, &caller, &tool_id)?;
    if let Some(toolset) = caller.toolset.as_deref() {
        let (tool, version) = ToolHost::resolve_in(Some(toolset), tool, None)?;
        let wording = ToolHost::wording_in(Some(toolset), &tool.name);
        return Ok(cacheable(&host, &tool, &version, wording, &headers));
    }
    let current = tool.current().ok_or_else(|| {
        ApiError::new(StatusCode::GONE, "tool_retired", format!("every version of `{}` is retired", tool.name))
    })?;
    Ok(cacheable(&host, &tool, &current, None, &headers))
}

/// Every version of a tool, newest first.
#[utoipa::path(get, path = "/tools/{tool_id}/versions", tag = "A2T", operation_id = "list_versions",
    params(("tool_id" = String, Path, description = "The tool's `toolId`"),
        schemas::PageParams,
    ),
    responses(
        (status = 200, description = "A page of versions", body = schemas::ToolPage),
        (status = 400, description = "`invalid_page_limit`, `invalid_cursor`", body = schemas::ErrorBody),
        (status = 404, description = "`not_found`: no such tool in this tenant", body = schemas::ErrorBody),
    ))]
pub(super) async fn list_versions(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(tool_id): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let query = PageQuery::parse(raw.as_deref())?;
    let tool = find_tool(&host, &caller, &tool_id)?;
    if let Some(toolset) = caller.toolset.as_deref() {
        // Through a toolset a tool has one version: the one it gives.
        let (tool, version) = ToolHost::resolve_in(Some(toolset), tool, None)?;
        let wording = ToolHost::wording_in(Some(toolset), &tool.name);
        return Ok(page_of_json(std::iter::once(version_json(&host, &tool, &version, wording)), query.limit, None));
    }
    let before = match query.cursor_after(VERSIONS_CURSOR)? {
        Some(n) => {
            Some(n.parse::<u32>().map_err(|_| ApiError::bad_request("invalid_cursor", "pageCursor is not valid"))?)
        }
        None => None,
    };
    // One extra tells whether another page exists.
    let mut versions = tool.versions_before(before, query.limit + 1);
    let more = versions.len() > query.limit;
    versions.truncate(query.limit);
    let next = if more { versions.last().map(|v| cursor(VERSIONS_CURSOR, &v.number.to_string())) } else { None };
    let items = versions.iter().map(|v| version_json(&host, &tool, v, None));
    Ok(page_of_json(items, query.limit, next))
}

/// One version of a tool, retired or not.
#[utoipa::path(get, path = "/tools/{tool_id}/versions/{version}", tag = "A2T", operation_id = "get_version",
    params(("tool_id" = String, Path, description = "The tool's `toolId`"),
        ("version" = String, Path, description = "The version's number (from 1)"),
        ("If-None-Match" = Option<String>, Header, description = "An `ETag` of this resource: `304` when it still matches"),
    ),
    responses(
        (status = 200, description = "The version", body = schemas::ToolSignature, headers(("ETag" = String, description = "Changes with the signature, the current version, retirement and the confirmation a call needs"))),
        (status = 304, description = "`If-None-Match` matched", headers(("ETag" = String, description = "Changes with the signature, the current version, retirement and the confirmation a call needs"))),
        (status = 404, description = "`not_found`: no such tool, or no such version", body = schemas::ErrorBody),
    ))]
pub(super) async fn get_version(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((tool_id, version)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let tool = find_tool(&host, &caller, &tool_id)?;
    let n = parse_version(&version)?;
    if let Some(toolset) = caller.toolset.as_deref() {
        let (tool, version) = ToolHost::resolve_in(Some(toolset), tool, Some(n))?;
        let wording = ToolHost::wording_in(Some(toolset), &tool.name);
        return Ok(cacheable(&host, &tool, &version, wording, &headers));
    }
    let version = tool.version(n).ok_or_else(|| ApiError::not_found(format!("tool `{tool_id}` has no version {n}")))?;
    Ok(cacheable(&host, &tool, &version, None, &headers))
}

/// `{toolId}:invoke` → `toolId`; anything else is not an A2T route.
fn strip_invoke(segment: &str) -> Result<&str, ApiError> {
    strip_invoke_suffix(segment).ok_or_else(|| {
        ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "to invoke a tool, POST to /tools/{toolId}:invoke",
        )
    })
}

/// Invokes the tool's current version.
#[utoipa::path(post, path = "/tools/{tool_id}:invoke", tag = "A2T", operation_id = "invoke_tool",
    params(("tool_id" = String, Path, description = "The tool's `toolId`"), schemas::EndUserHeader),
    request_body = schemas::Invocation,
    responses(schemas::InvocationAnswers))]
pub(super) async fn invoke_current(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Extension(options): Extension<Arc<ApiOptions>>,
    Path(tool_ref): Path<String>,
    trace: Option<Extension<CallerTrace>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let tool_id = strip_invoke(&tool_ref)?;
    let end_user = super::links::end_user_header(&headers)?;
    let trace = trace.map(|Extension(trace)| trace);
    invoke(&host, &caller, &options, tool_id, None, end_user, trace, &super::body_within_limit(body)?).await
}

/// Invokes one version of the tool.
#[utoipa::path(post, path = "/tools/{tool_id}/versions/{version}:invoke", tag = "A2T", operation_id = "invoke_version",
    params(("tool_id" = String, Path, description = "The tool's `toolId`"),
        ("version" = String, Path, description = "The version's number (from 1)"),
        schemas::EndUserHeader,
    ),
    request_body = schemas::Invocation,
    responses(schemas::InvocationAnswers))]
pub(super) async fn invoke_version(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Extension(options): Extension<Arc<ApiOptions>>,
    Path((tool_id, version_ref)): Path<(String, String)>,
    trace: Option<Extension<CallerTrace>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let version = parse_version(strip_invoke(&version_ref)?)?;
    let end_user = super::links::end_user_header(&headers)?;
    let trace = trace.map(|Extension(trace)| trace);
    invoke(&host, &caller, &options, &tool_id, Some(version), end_user, trace, &super::body_within_limit(body)?).await
}

#[allow(clippy::too_many_arguments)]
async fn invoke(
    host: &AppState,
    caller: &Caller,
    options: &ApiOptions,
    tool_id: &str,
    version: Option<u32>,
    end_user: Option<String>,
    trace: Option<CallerTrace>,
    body: &[u8],
) -> Result<Response, ApiError> {
    // Unknown tools (and, through a toolset, tools outside it) are 404,
    // versions outside the caller's toolset 403, whatever the body says.
    let tool = find_tool(host, caller, tool_id)?;
    let (tool, version) = ToolHost::resolve_in(caller.toolset.as_deref(), tool, version)?;
    let body: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request("invalid_json", format!("the body is not valid JSON: {e}")))?;
    let input = host.check_a2t_input(&tool, &version, caller.toolset.as_deref(), &body)?;
    let mut call = Call::new(input, FrontDoor::A2t);
    call.toolset = caller.toolset.as_ref().map(|t| (t.name.clone(), t.version));
    call.end_user = end_user;
    call.trace = trace;
    let call_id = call.call_id.clone();
    let number = version.number;
    match host.invoke(tool, version, call).await {
        Err(InvokeError::ConfirmationPending(pending)) => {
            let toolset = caller.toolset.as_ref().map(|t| t.name.as_str());
            Ok(super::links::uri_pack(options, &pending, toolset))
        }
        Err(e @ InvokeError::AuthorizationRequired { .. }) => {
            let toolset = caller.toolset.as_ref().map(|t| t.name.as_str());
            Ok(super::links::authorization_required(options, &e, toolset))
        }
        outcome => Ok(answer(outcome, &call_id, number)),
    }
}

/// The A2T answer to a call that ran (or was refused): outputs, or the error.
pub(super) fn answer(outcome: Result<ToolResult, InvokeError>, call_id: &str, version: u32) -> Response {
    let mut response = match outcome {
        Ok(ToolResult::Outputs(outputs)) => axum::Json(json!({ "output_parameters": outputs })).into_response(),
        Ok(ToolResult::Failed(error)) => ApiError::from(error).into_response(),
        Err(e) => ApiError::from(e).into_response(),
    };
    if let Ok(value) = HeaderValue::from_str(call_id) {
        response.headers_mut().insert("plinth-call-id", value);
    }
    response.headers_mut().insert("plinth-tool-version", HeaderValue::from(version));
    response
}

/// The A2T door's operations, merged into the OpenAPI document
/// (`openapi.rs`).
#[derive(utoipa::OpenApi)]
#[openapi(paths(list_tools, get_tool, invoke_current, list_versions, get_version, invoke_version,))]
pub(super) struct Doc;
