//! The admin API of toolsets (docs/toolsets.md): `PUT`, `GET` and `DELETE`
//! `/admin/toolsets/{name}` and the list `GET /admin/toolsets`. A
//! publisher's: a toolset decides what consumers see of the tenant's
//! tools, and pins versions a publisher retires (docs/tenancy.md).
//!
//! The toolsets themselves are served by the A2T, OTC and MCP doors'
//! handlers under `/t/{tenant}/toolsets/{name}[@{n}]/` (`auth.rs` reads the
//! root, `host/toolsets.rs` decides what it reaches).

use super::{Access, ApiError, ApiOptions, AppState, Caller, Routes, Scope, schemas};
use crate::host::toolsets::{EntryState, ToolsetTool};
use crate::signature::Wording;
use crate::store::{StoredToolset, ToolsetEntry};
use axum::Extension;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, RawQuery, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, put};
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;

/// A toolset's `PUT` body: 64 tools, a description and the most words a
/// toolset version may hold (`MAX_WORDING_CHARS_PER_TOOLSET`, escaped) fit
/// within.
const MAX_TOOLSET_BYTES: usize = 256 << 10;

/// The toolsets' admin routes.
pub(super) fn routes(routes: Routes) -> Routes {
    use Access::Publish;
    use Scope::Tenant;
    let limit = DefaultBodyLimit::max(MAX_TOOLSET_BYTES);
    routes
        .add(Method::GET, "/admin/toolsets", Publish, Tenant, get(list_toolsets))
        .add(Method::GET, "/admin/toolsets/{name}", Publish, Tenant, get(get_toolset))
        .add(Method::PUT, "/admin/toolsets/{name}", Publish, Tenant, put(put_toolset).layer(limit))
        .add(Method::DELETE, "/admin/toolsets/{name}", Publish, Tenant, delete(delete_toolset))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolsetRequest {
    #[serde(default)]
    description: String,
    tools: Vec<EntryRequest>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct EntryRequest {
    name: String,
    #[serde(default)]
    version: Option<u32>,
    /// The designer's words (docs/toolsets.md): texts only.
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    input_descriptions: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    output_descriptions: std::collections::BTreeMap<String, String>,
    /// The tool version the words were written for (to say a followed
    /// tool's new parameters were reviewed); by default the one served.
    #[serde(default)]
    words_for: Option<u32>,
}

/// A toolset version as JSON: what it says, each tool as it stands now,
/// and the URLs of its roots.
fn toolset_json(host: &AppState, options: &ApiOptions, toolset: &StoredToolset) -> Value {
    let tools: Vec<Value> = host.toolset_tools(toolset).iter().map(tool_json).collect();
    let versions: Vec<u32> = host.toolset_versions(&toolset.tenant, &toolset.name).iter().map(|v| v.version).collect();
    let root = format!("{}/t/{}/toolsets/{}", options.public_url, toolset.tenant, toolset.name);
    json!({
        "name": toolset.name,
        "version": toolset.version,
        "latestVersion": versions.last(),
        "versions": versions,
        "description": toolset.description,
        "createdAt": toolset.created_at,
        "tools": tools,
        "roots": {
            "a2t": format!("{root}/tools"),
            "otc": format!("{root}/otc"),
            "mcp": format!("{root}/mcp"),
            "pinned": format!("{root}@{}", toolset.version),
        },
    })
}

fn tool_json(tool: &ToolsetTool) -> Value {
    let state = match tool.state {
        EntryState::Live => "live",
        EntryState::RetiredPinned => "retiredPinned",
        EntryState::Retired => "retired",
        EntryState::Missing => "missing",
    };
    let mut json = json!({
        "name": tool.entry.name,
        "version": tool.entry.version,
        "toolId": tool.tool.as_ref().map(|t| t.id.to_string()),
        "resolvedVersion": tool.version.as_ref().map(|v| v.number),
        "state": state,
    });
    // The designer's words as stored, `wordsFor` among them, and what to
    // review now.
    if let Value::Object(words) = serde_json::to_value(&tool.entry.wording).unwrap_or_default() {
        json.as_object_mut().into_iter().for_each(|j| j.extend(words.clone()));
    }
    if let Some(review) = &tool.review {
        json["review"] = serde_json::to_value(review).unwrap_or_default();
    }
    json
}

/// The tenant's toolsets, each at its newest version.
#[utoipa::path(get, path = "/admin/toolsets", tag = "Admin", operation_id = "list_toolsets",
    responses(
        (status = 200, description = "The toolsets, by name, each at its newest version", body = schemas::ToolsetList),
    ))]
pub(super) async fn list_toolsets(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Extension(options): Extension<Arc<ApiOptions>>,
) -> Response {
    let items: Vec<Value> =
        host.toolsets(&caller.tenant).iter().map(|toolset| toolset_json(&host, &options, toolset)).collect();
    axum::Json(json!({ "items": items })).into_response()
}

/// The version `?version=` asks for, if any.
fn asked_version(raw: Option<&str>) -> Result<Option<u32>, ApiError> {
    let mut version = None;
    for (key, value) in form_urlencoded::parse(raw.unwrap_or("").as_bytes()) {
        if key == "version" {
            version = Some(value.parse::<u32>().ok().filter(|n| *n >= 1).ok_or_else(|| {
                ApiError::bad_request("invalid_request", "`version` is a toolset version number (1, 2, …)")
            })?);
        }
    }
    Ok(version)
}

fn no_such_toolset(name: &str, version: Option<u32>) -> ApiError {
    let name = crate::supply::outside_text(name);
    let message = match version {
        None => format!("there is no toolset `{name}`"),
        Some(n) => format!("there is no version {n} of toolset `{name}`"),
    };
    ApiError::new(StatusCode::NOT_FOUND, "toolset_not_found", message)
}

/// One toolset: its newest version, or the one `?version=` names.
#[utoipa::path(get, path = "/admin/toolsets/{name}", tag = "Admin", operation_id = "get_toolset",
    params(("name" = String, Path, description = "The toolset's name"),
        ("version" = Option<u32>, Query, minimum = 1, description = "A version of the toolset (default: its newest)"),
    ),
    responses(
        (status = 200, description = "The toolset version, each tool as it stands now (`state` `retiredPinned`: its pinned version was retired by force)", body = schemas::Toolset),
        (status = 400, description = "`invalid_request`: `version` is not a number", body = schemas::ErrorBody),
        (status = 404, description = "`toolset_not_found`", body = schemas::ErrorBody),
    ))]
pub(super) async fn get_toolset(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Extension(options): Extension<Arc<ApiOptions>>,
    Path(name): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let version = asked_version(raw.as_deref())?;
    let toolset = host.toolset(&caller.tenant, &name, version).ok_or_else(|| no_such_toolset(&name, version))?;
    Ok(axum::Json(toolset_json(&host, &options, &toolset)).into_response())
}

/// Creates a toolset, or its next version.
#[utoipa::path(put, path = "/admin/toolsets/{name}", tag = "Admin", operation_id = "put_toolset",
    params(("name" = String, Path, description = "The toolset's name: 1 to 64 lowercase letters, digits, `-` or `_`")),
    request_body = schemas::ToolsetRequest,
    responses(
        (status = 200, description = "The same content as its newest version: nothing changed", body = schemas::Toolset),
        (status = 201, description = "A new version (version 1: a new toolset)", body = schemas::Toolset),
        (status = 400, description = "`invalid_json`, `invalid_toolset` (a name, a description or a list of tools out of bounds, a tool named twice, more words than a toolset version holds); `invalid_wording` (a tool's words name a parameter its version lacks or a private input, or a text is empty or too long: `tool` and `parameter` say which)", body = schemas::ErrorBody),
        (status = 404, description = "`toolset_tool_not_found`: the tenant has no such tool; `toolset_version_not_found`: the tool has no such version", body = schemas::ErrorBody),
        (status = 409, description = "`toolset_version_retired`: a pinned version (or every version of a followed tool) is retired; `quota_exceeded`: too many toolsets, or versions of this one", body = schemas::ErrorBody),
        (status = 503, description = "`busy`: another replica changed the toolset at the same time; `storage_failed`", body = schemas::ErrorBody, headers(("Retry-After" = u64, description = "Seconds"))),
    ))]
pub(super) async fn put_toolset(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Extension(options): Extension<Arc<ApiOptions>>,
    Path(name): Path<String>,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Response, ApiError> {
    let body = super::body_within_limit(body)?;
    let request: ToolsetRequest = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request("invalid_json", format!("the body is not a toolset: {e}")))?;
    if request.tools.len() > crate::host::toolsets::MAX_TOOLSET_TOOLS {
        return Err(ApiError::bad_request(
            "invalid_toolset",
            format!("a toolset names at most {} tools", crate::host::toolsets::MAX_TOOLSET_TOOLS),
        ));
    }
    let mut tools = Vec::with_capacity(request.tools.len());
    for entry in request.tools {
        if entry.version == Some(0) {
            return Err(ApiError::bad_request("invalid_toolset", "versions are whole numbers from 1"));
        }
        let wording = Wording {
            description: entry.description,
            input_descriptions: entry.input_descriptions,
            output_descriptions: entry.output_descriptions,
            words_for: entry.words_for,
        };
        tools.push(ToolsetEntry { name: entry.name, version: entry.version, wording });
    }
    let put = host.put_toolset(caller.principal()?, &caller.tenant, &name, &request.description, &tools)?;
    let status = if put.created { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, axum::Json(toolset_json(&host, &options, &put.toolset))).into_response())
}

/// Deletes a toolset.
#[utoipa::path(delete, path = "/admin/toolsets/{name}", tag = "Admin", operation_id = "delete_toolset",
    params(("name" = String, Path, description = "The toolset's name")),
    responses(
        (status = 204, description = "Deleted: its roots answer `404`, and the keys scoped to it are revoked"),
        (status = 404, description = "`toolset_not_found`", body = schemas::ErrorBody),
        schemas::StorageFailed,
    ))]
pub(super) async fn delete_toolset(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    host.delete_toolset(caller.principal()?, &caller.tenant, &name)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// The toolsets' operations, merged into the OpenAPI document
/// (`openapi.rs`).
#[derive(utoipa::OpenApi)]
#[openapi(paths(list_toolsets, get_toolset, put_toolset, delete_toolset))]
pub(super) struct Doc;
