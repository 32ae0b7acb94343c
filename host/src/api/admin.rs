//! The admin API: a tenant's tools, secrets and config (publishers), and the
//! server's tenants, keys and audit log (operators).
//!
//! Under every platform root (`/` for the default tenant, `/t/{tenant}/`):
//! - `POST /admin/tools[?expectVersion=N]` with the packed component
//!   (`Content-Type: application/wasm`), or `{"reference": "registry/repo:tag"}`
//!   (`application/json`) for the server to pull → `201` new version, `200`
//!   identical bytes, `409` breaking change or version mismatch, `422` the
//!   trust policy refuses it
//! - `GET|PUT /admin/trust-policy`, `GET /admin/trust-policy/refused`
//! - `GET /admin/registries`, `PUT|DELETE /admin/registries/{registry}`
//! - `DELETE /admin/tools/{toolId}/versions/{n}` → the version is retired
//! - `PUT|DELETE /admin/secrets/{id}`, `GET /admin/secrets` (ids only)
//! - `PUT|DELETE /admin/config/{tool}/{key}`, `GET /admin/config`
//! - `GET /admin/tenant`: the tenant's own settings and quotas
//!
//! Under `/` only:
//! - `GET|POST /admin/tenants`, `GET|PATCH /admin/tenants/{name}`
//! - `GET|POST /admin/keys`, `DELETE /admin/keys/{id}`
//! - `GET /admin/audit[?tenant=T]`: the audit log, newest first
//!
//! Who may call which is declared with each route (see [`super::auth`]).

use super::paging::PageQuery;
use super::{Access, ApiError, AppState, Caller, Routes, Scope, schemas};
use crate::tenancy::{AuditEntry, AuditQuery, KeyRecord, Role, TenantRecord};
use axum::Extension;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, RawQuery, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, patch, post, put};
use serde::Deserialize;
use serde_json::{Value, json};

/// Largest component a deploy may send, whatever a tenant's quota says.
pub const MAX_COMPONENT_BYTES: usize = 256 << 20;
/// Largest secret or config value.
pub const MAX_VALUE_BYTES: usize = 64 << 10;
/// Largest JSON body of the tenant and key endpoints.
const MAX_JSON_BYTES: usize = 64 << 10;

/// Adds the admin routes.
pub(super) fn routes(routes: Routes) -> Routes {
    use Access::{Audit, Operate, Publish};
    use Scope::{Server, Tenant};
    let value_limit = DefaultBodyLimit::max(MAX_VALUE_BYTES);
    let json_limit = DefaultBodyLimit::max(MAX_JSON_BYTES);
    routes
        .add(Method::POST, "/admin/tools", Publish, Tenant, post(deploy).layer(DefaultBodyLimit::disable()))
        .add(Method::DELETE, "/admin/tools/{tool_id}/versions/{version}", Publish, Tenant, delete(retire))
        .add(Method::GET, "/admin/trust-policy", Publish, Tenant, get(get_trust_policy))
        .add(Method::PUT, "/admin/trust-policy", Publish, Tenant, put(put_trust_policy).layer(json_limit))
        .add(Method::GET, "/admin/trust-policy/refused", Publish, Tenant, get(refused_by_trust_policy))
        .add(Method::GET, "/admin/registries", Publish, Tenant, get(list_registries))
        .add(Method::PUT, "/admin/registries/{registry}", Publish, Tenant, put(put_registry).layer(json_limit))
        .add(Method::DELETE, "/admin/registries/{registry}", Publish, Tenant, delete(delete_registry))
        .add(Method::GET, "/admin/secrets", Publish, Tenant, get(list_secrets))
        .add(Method::PUT, "/admin/secrets/{id}", Publish, Tenant, put(put_secret).layer(value_limit))
        .add(Method::DELETE, "/admin/secrets/{id}", Publish, Tenant, delete(delete_secret))
        .add(Method::GET, "/admin/config", Publish, Tenant, get(list_config))
        .add(Method::PUT, "/admin/config/{tool}/{key}", Publish, Tenant, put(put_config).layer(value_limit))
        .add(Method::DELETE, "/admin/config/{tool}/{key}", Publish, Tenant, delete(delete_config))
        .add(Method::GET, "/admin/tenant", Publish, Tenant, get(own_tenant))
        .add(Method::GET, "/admin/tenants", Operate, Server, get(list_tenants))
        .add(Method::POST, "/admin/tenants", Operate, Server, post(create_tenant).layer(json_limit))
        .add(Method::GET, "/admin/tenants/{name}", Operate, Server, get(get_tenant))
        .add(Method::PATCH, "/admin/tenants/{name}", Operate, Server, patch(update_tenant).layer(json_limit))
        .add(Method::GET, "/admin/keys", Operate, Server, get(list_keys))
        .add(Method::POST, "/admin/keys", Operate, Server, post(create_key).layer(json_limit))
        .add(Method::DELETE, "/admin/keys/{id}", Operate, Server, delete(revoke_key))
        .add(Method::GET, "/admin/audit", Audit, Server, get(audit))
}

/// A JSON request body, or `400 invalid_json` saying what is wrong.
fn json_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request("invalid_json", format!("the body is not valid: {e}")))
}

/// Deploys a packed component, posted or pulled from a registry: a tool's
/// new version, or its first.
#[utoipa::path(post, path = "/admin/tools", tag = "Admin", operation_id = "deploy",
    params(("expectVersion" = Option<u32>, Query, minimum = 1, description = "Deploy only if the new version would be this number")),
    request_body(description = "The packed component (`plinth pack`), or the OCI reference of one for the server to pull", content(
        (Vec<u8> = "application/wasm"),
        (schemas::DeployReference = "application/json"),
    )),
    responses(
        (status = 200, description = "The same bytes are deployed already: nothing changed", body = schemas::Deployed),
        (status = 201, description = "A new version", body = schemas::Deployed),
        (status = 400, description = "`invalid_component`, `invalid_expect_version`, `invalid_condition`, `condition_too_costly`, `invalid_request`, `invalid_json`, `invalid_reference`", body = schemas::ErrorBody),
        (status = 403, description = "`registry_not_allowed`: plain http to a registry the operator did not list, or an address the outbound policy refuses", body = schemas::ErrorBody),
        (status = 404, description = "`artifact_not_found`: the registry has no such tag or digest", body = schemas::ErrorBody),
        (status = 409, description = "`breaking_change`, `version_mismatch`, `quota_exceeded`", body = schemas::ErrorBody),
        (status = 413, description = "`quota_exceeded`: larger than the tenant may deploy", body = schemas::ErrorBody),
        (status = 415, description = "`unsupported_media_type`: neither `application/wasm` nor `application/json`", body = schemas::ErrorBody),
        (status = 422, description = "`untrusted_component`: the tenant's trust policy refuses it (the error names the keys expected and what was found); `not_a_component_artifact`; `registry_denied`: the registry refused the tenant's credentials (or wants some); `digest_mismatch`: the registry sent bytes other than their digest names", body = schemas::ErrorBody),
        (status = 500, description = "`deploy_failed`: interrupted; nothing was deployed", body = schemas::ErrorBody),
        (status = 502, description = "`registry_failed`: the registry could not be reached or answered an error; nothing was deployed", body = schemas::ErrorBody, headers(("Retry-After" = u64, description = "Seconds"))),
        (status = 503, description = "`busy` (every deploy slot compiling), `storage_failed`", body = schemas::ErrorBody, headers(("Retry-After" = u64, description = "Seconds"))),
        (status = 504, description = "`registry_timeout`: the pull did not finish in time", body = schemas::ErrorBody, headers(("Retry-After" = u64, description = "Seconds"))),
    ))]
pub(super) async fn deploy(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    RawQuery(raw): RawQuery,
    request: Request,
) -> Result<Response, ApiError> {
    let headers = request.headers();
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let media_type = content_type.split(';').next().map(str::trim).unwrap_or("").to_ascii_lowercase();
    if media_type != "application/wasm" && media_type != "application/json" {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "send the packed component as the body with Content-Type: application/wasm, or {\"reference\": \"registry/repository:tag\"} with Content-Type: application/json",
        ));
    }
    let mut expect_version = None;
    for (key, value) in form_urlencoded::parse(raw.unwrap_or_default().as_bytes()) {
        if key == "expectVersion" {
            let n = value.parse::<u32>().ok().filter(|n| *n >= 1).ok_or_else(|| {
                ApiError::bad_request("invalid_expect_version", "expectVersion must be a whole number from 1")
            })?;
            expect_version = Some(n);
        }
    }
    let principal = caller.principal()?.clone();
    let tenant = caller.tenant.clone();
    let deployed = if media_type == "application/json" {
        // The slot bounds pulls held in memory as well as compilations.
        let slot = host.deploy_slot()?;
        let body = read_within(request.into_body(), MAX_JSON_BYTES).await?.ok_or_else(|| {
            ApiError::bad_request("invalid_json", format!("the body is larger than {MAX_JSON_BYTES} bytes"))
        })?;
        let wanted: schemas::DeployReference = json_body(&body)?;
        host.clone().deploy_reference(slot, principal, tenant, &wanted.reference, expect_version).await?
    } else {
        let quota = host.tenant(&caller.tenant).map_or(0, |t| t.record.quotas.max_component_bytes);
        let limit = usize::try_from(quota).unwrap_or(usize::MAX).min(MAX_COMPONENT_BYTES);
        let too_large = || {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "quota_exceeded",
                format!("the component is larger than tenant `{}` may deploy ({quota} bytes)", caller.tenant),
            )
        };
        let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if declared.is_some_and(|n| n > MAX_COMPONENT_BYTES as u64) {
            return Err(too_large());
        }
        // The slot bounds the uploads held in memory as well as the compilations.
        let slot = host.deploy_slot()?;
        let body = read_within(request.into_body(), limit).await?.ok_or_else(too_large)?;
        // Compiling is CPU-bound: keep it off the request threads.
        tokio::task::spawn_blocking(move || {
            let deployed = host.deploy_in(slot, &principal, &tenant, &body, expect_version);
            // The upload and what parsing it took go back to the kernel.
            drop(body);
            crate::heap::give_back();
            deployed
        })
        .await
        .map_err(|_| crate::host::DeployError::Interrupted)??
    };
    let status = if deployed.created { StatusCode::CREATED } else { StatusCode::OK };
    if deployed.created {
        tracing::info!(
            tenant = caller.tenant,
            tool = deployed.name,
            version = deployed.version,
            sha256 = deployed.sha256,
            source = deployed.provenance.source.as_ref().map(|s| s.reference.as_str()),
            "deployed over the admin API"
        );
    }
    let body = json!({
        "toolId": deployed.tool_id,
        "name": deployed.name,
        "version": deployed.version,
        "sha256": deployed.sha256,
        "signatureSha256": deployed.signature_sha256,
        "previousVersion": deployed.previous_version,
        "provenance": deployed.provenance.to_json(),
    });
    Ok((status, axum::Json(body)).into_response())
}

/// The tenant's trust policy: its keys (kind and fingerprint) and whether a
/// signature is required.
#[utoipa::path(get, path = "/admin/trust-policy", tag = "Admin", operation_id = "get_trust_policy",
    responses((status = 200, description = "The policy (the default: no keys, nothing required)", body = schemas::TrustPolicy)))]
pub(super) async fn get_trust_policy(State(host): State<AppState>, Extension(caller): Extension<Caller>) -> Response {
    axum::Json(host.trust_policy(&caller.tenant).to_api_json()).into_response()
}

/// Replaces the tenant's trust policy (audited). It judges deploys from now
/// on; running versions keep running, and the answer lists those it would
/// refuse.
#[utoipa::path(put, path = "/admin/trust-policy", tag = "Admin", operation_id = "put_trust_policy",
    request_body(content = schemas::TrustPolicyInput, content_type = "application/json"),
    responses(
        (status = 200, description = "Stored", body = schemas::TrustPolicySet),
        (status = 400, description = "`invalid_json`, `invalid_trust_policy`", body = schemas::ErrorBody),
        (status = 403, description = "`relaxes_operator_trust_policy`: an operator set the policy, and a publisher may only tighten it (require a signature, remove keys, narrow scopes)", body = schemas::ErrorBody),
        schemas::StorageFailed,
    ))]
pub(super) async fn put_trust_policy(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let json: crate::supply::TrustPolicyJson = json_body(&body)?;
    let principal = caller.principal()?;
    // It takes the host's change lock and reads the store: off the async
    // workers.
    crate::store::off_the_workers(|| host.set_trust_policy(principal, &caller.tenant, &json)).map_err(|e| match e {
        crate::host::ChangeError::Invalid(why) => ApiError::bad_request("invalid_trust_policy", why),
        crate::host::ChangeError::Forbidden(why) => {
            ApiError::new(StatusCode::FORBIDDEN, "relaxes_operator_trust_policy", why)
        }
        other => other.into(),
    })?;
    let mut answer = host.trust_policy(&caller.tenant).to_api_json();
    answer["wouldRefuse"] = Value::Array(host.clone().refused_versions(caller.tenant.clone()).await);
    Ok(axum::Json(answer).into_response())
}

/// The tenant's live versions its trust policy would refuse if they were
/// deployed now (they keep running).
#[utoipa::path(get, path = "/admin/trust-policy/refused", tag = "Admin", operation_id = "refused_by_trust_policy",
    responses((status = 200, description = "The versions", body = schemas::RefusedVersions)))]
pub(super) async fn refused_by_trust_policy(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Response {
    // Embedded signatures are checked again from the stored bytes.
    let items = host.refused_versions(caller.tenant.clone()).await;
    axum::Json(json!({ "items": items })).into_response()
}

/// The registries the tenant has credentials for (never the passwords).
#[utoipa::path(get, path = "/admin/registries", tag = "Admin", operation_id = "list_registries",
    responses((status = 200, description = "The registries and user names", body = schemas::RegistryList)))]
pub(super) async fn list_registries(State(host): State<AppState>, Extension(caller): Extension<Caller>) -> Response {
    axum::Json(json!({ "items": host.registry_credentials(&caller.tenant) })).into_response()
}

/// Stores the tenant's credentials for a registry, sealed like its secrets;
/// deploys by reference to that registry use them.
#[utoipa::path(put, path = "/admin/registries/{registry}", tag = "Admin", operation_id = "put_registry",
    params(("registry" = String, Path, example = "ghcr.io", description = "`host` or `host:port`, as in references")),
    request_body(content = schemas::RegistryCredentials, content_type = "application/json"),
    responses(
        (status = 204, description = "Stored"),
        (status = 400, description = "`invalid_json`, `invalid_request`: not a registry name, or an empty user name", body = schemas::ErrorBody),
        (status = 409, description = "`quota_exceeded`: new credentials would pass the tenant's `maxSecrets` (credentials are secrets); nothing stored", body = schemas::ErrorBody),
        schemas::StorageFailed,
    ))]
pub(super) async fn put_registry(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(registry): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let credentials: crate::supply::oci::Credentials = json_body(&body)?;
    host.put_registry_credentials(caller.principal()?, &caller.tenant, &registry, &credentials)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Deletes the tenant's credentials for a registry.
#[utoipa::path(delete, path = "/admin/registries/{registry}", tag = "Admin", operation_id = "delete_registry",
    params(("registry" = String, Path, example = "ghcr.io", description = "`host` or `host:port`")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "`not_found`: no credentials for that registry", body = schemas::ErrorBody),
        schemas::StorageFailed,
    ))]
pub(super) async fn delete_registry(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(registry): Path<String>,
) -> Result<Response, ApiError> {
    host.delete_registry_credentials(caller.principal()?, &caller.tenant, &registry)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Retires a version: it can no longer be called; its metadata stays.
#[utoipa::path(delete, path = "/admin/tools/{tool_id}/versions/{version}", tag = "Admin", operation_id = "retire",
    params(("tool_id" = String, Path, description = "The tool's `toolId`"), ("version" = String, Path, description = "The version's number"),
        ("force" = Option<bool>, Query, description = "Retire it even when toolsets pin it (they then mark it retired-pinned)"),
    ),
    responses(
        (status = 200, description = "Retired", body = schemas::Retired),
        (status = 400, description = "`invalid_request`: `force` is not `true` or `false`", body = schemas::ErrorBody),
        (status = 404, description = "`not_found`: no such tool or version", body = schemas::ErrorBody),
        (status = 409, description = "`version_pinned_by_toolset`: toolsets pin this version (`toolsets` names them); pass `force=true` to retire it anyway", body = schemas::ErrorBody),
        schemas::StorageFailed,
    ))]
pub(super) async fn retire(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((tool_id, version)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let version = version.parse::<u32>().ok().filter(|n| *n >= 1).ok_or_else(|| {
        ApiError::not_found(format!("`{version}` is not a version; versions are whole numbers from 1"))
    })?;
    let mut force = false;
    for (key, value) in form_urlencoded::parse(raw.as_deref().unwrap_or("").as_bytes()) {
        if key == "force" {
            force = match value.as_ref() {
                "true" => true,
                "false" => false,
                _ => return Err(ApiError::bad_request("invalid_request", "`force` is `true` or `false`")),
            };
        }
    }
    host.retire_forced(caller.principal()?, &caller.tenant, &tool_id, version, force)?;
    let current = host.tool(&caller.tenant, &tool_id).and_then(|t| t.current()).map(|v| v.number);
    Ok(axum::Json(json!({ "toolId": tool_id, "version": version, "retired": true, "currentVersion": current }))
        .into_response())
}

/// The body if it is at most `limit` bytes; `None` if it is larger. Only
/// `limit` bytes are ever held: the rest of an oversized body (up to
/// [`MAX_COMPONENT_BYTES`]) is read and dropped, so the client, still
/// sending, gets the `413` rather than a reset connection.
async fn read_within(mut body: axum::body::Body, limit: usize) -> Result<Option<Bytes>, ApiError> {
    use http_body_util::BodyExt;
    let unreadable = || ApiError::bad_request("invalid_request", "the request body could not be read");
    let mut kept = Vec::new();
    let mut total = 0usize;
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(|_| unreadable())?.into_data() else { continue };
        total = total.saturating_add(data.len());
        if total > MAX_COMPONENT_BYTES {
            return Ok(None);
        }
        if total <= limit {
            kept.extend_from_slice(&data);
        }
    }
    Ok((total <= limit).then(|| Bytes::from(kept)))
}

/// A secret id, a tool name or a config key: 1 to 128 lowercase letters,
/// digits, `.`, `_` or `-`.
fn check_name(what: &str, code: &'static str, name: &str) -> Result<(), ApiError> {
    if crate::manifest::is_secret_id(name) {
        Ok(())
    } else {
        Err(ApiError::bad_request(code, format!("{what} is 1 to 128 lowercase letters, digits, `.`, `_` or `-`")))
    }
}

/// A secret or config value: non-empty UTF-8.
fn text_value(body: Bytes, code: &'static str) -> Result<String, ApiError> {
    let value =
        String::from_utf8(body.to_vec()).map_err(|_| ApiError::bad_request(code, "the value must be UTF-8 text"))?;
    if value.is_empty() {
        return Err(ApiError::bad_request(code, "the value is empty; DELETE it instead"));
    }
    Ok(value)
}

/// Stores a secret of the tenant's (replacing its value).
#[utoipa::path(put, path = "/admin/secrets/{id}", tag = "Admin", operation_id = "put_secret",
    params(("id" = String, Path, pattern = "^[a-z0-9._-]{1,128}$", example = "weather-api-key", description = "1 to 128 lowercase letters, digits, `.`, `_` or `-`")),
    request_body(description = "The value: UTF-8, not empty, at most 64 KiB", content = String, content_type = "text/plain"),
    responses(
        (status = 204, description = "Stored"),
        (status = 400, description = "`invalid_secret_id`, `invalid_secret_value`, `invalid_request`", body = schemas::ErrorBody),
        (status = 409, description = "`quota_exceeded`: a new id past the tenant's `maxSecrets` (registry credentials included); an existing one can always be set again; nothing stored", body = schemas::ErrorBody),
        schemas::StorageFailed,
    ))]
pub(super) async fn put_secret(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    check_name("a secret id", "invalid_secret_id", &id)?;
    let value = text_value(body, "invalid_secret_value")?;
    host.put_secret(caller.principal()?, &caller.tenant, &id, &value)?;
    Ok(StatusCode::NO_CONTENT)
}

/// Deletes a secret.
#[utoipa::path(delete, path = "/admin/secrets/{id}", tag = "Admin", operation_id = "delete_secret",
    params(("id" = String, Path, description = "The secret's id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "`not_found`: no such secret", body = schemas::ErrorBody),
        schemas::StorageFailed,
    ))]
pub(super) async fn delete_secret(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    host.delete_secret(caller.principal()?, &caller.tenant, &id)?;
    Ok(StatusCode::NO_CONTENT)
}

/// The tenant's secrets' ids (never their values).
#[utoipa::path(get, path = "/admin/secrets", tag = "Admin", operation_id = "list_secrets", responses(
    (status = 200, description = "The ids", body = schemas::SecretList),
))]
pub(super) async fn list_secrets(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> axum::Json<Value> {
    let items: Vec<_> = host.secret_ids(&caller.tenant).into_iter().map(|id| json!({ "id": id })).collect();
    axum::Json(json!({ "items": items }))
}

/// Sets a tool's config value.
#[utoipa::path(put, path = "/admin/config/{tool}/{key}", tag = "Admin", operation_id = "put_config", params(
        ("tool" = String, Path, pattern = "^[a-z0-9._-]{1,128}$", example = "lookup_weather_by_city", description = "The tool's name"),
        ("key" = String, Path, pattern = "^[a-z0-9._-]{1,128}$", example = "backend-url", description = "The config key"),
    ),
    request_body(description = "The value: UTF-8, not empty, at most 64 KiB", content = String, content_type = "text/plain"),
    responses(
        (status = 204, description = "Set"),
        (status = 400, description = "`invalid_tool_name`, `invalid_config_key`, `invalid_config_value`, `invalid_request`", body = schemas::ErrorBody),
        (status = 409, description = "`quota_exceeded`: a new (tool, key) past the tenant's `maxConfigValues`; an existing one can always be set again; nothing stored", body = schemas::ErrorBody),
        schemas::StorageFailed,
    ))]
pub(super) async fn put_config(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((tool, key)): Path<(String, String)>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    check_name("a tool name", "invalid_tool_name", &tool)?;
    check_name("a config key", "invalid_config_key", &key)?;
    let value = text_value(body, "invalid_config_value")?;
    host.put_config(caller.principal()?, &caller.tenant, &tool, &key, &value)?;
    Ok(StatusCode::NO_CONTENT)
}

/// Deletes a tool's config value (its manifest's default applies again).
#[utoipa::path(delete, path = "/admin/config/{tool}/{key}", tag = "Admin", operation_id = "delete_config", params(
        ("tool" = String, Path, pattern = "^[a-z0-9._-]{1,128}$", example = "lookup_weather_by_city", description = "The tool's name"),
        ("key" = String, Path, pattern = "^[a-z0-9._-]{1,128}$", example = "backend-url", description = "The config key"),
    ),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "`not_found`: no such value", body = schemas::ErrorBody),
        schemas::StorageFailed,
    ))]
pub(super) async fn delete_config(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((tool, key)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    host.delete_config(caller.principal()?, &caller.tenant, &tool, &key)?;
    Ok(StatusCode::NO_CONTENT)
}

/// The tenant's stored config values.
#[utoipa::path(get, path = "/admin/config", tag = "Admin", operation_id = "list_config", responses(
    (status = 200, description = "By tool, by key", body = schemas::ConfigList),
))]
pub(super) async fn list_config(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> axum::Json<Value> {
    axum::Json(json!({ "tools": host.stored_config(&caller.tenant) }))
}

fn tenant_json(record: &TenantRecord) -> Value {
    json!({
        "name": record.name,
        "publicEnumeration": record.public_enumeration,
        "quotas": record.quotas,
        "createdAt": record.created_at,
    })
}

/// The key's own tenant: its settings and quotas.
#[utoipa::path(get, path = "/admin/tenant", tag = "Admin", operation_id = "own_tenant", responses(
    (status = 200, description = "The tenant", body = schemas::Tenant),
))]
pub(super) async fn own_tenant(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<Response, ApiError> {
    let tenant = host.tenant(&caller.tenant).ok_or_else(|| ApiError::not_found("the tenant no longer exists"))?;
    Ok(axum::Json(tenant_json(&tenant.record)).into_response())
}

/// Every tenant.
#[utoipa::path(get, path = "/admin/tenants", tag = "Admin", operation_id = "list_tenants", responses(
    (status = 200, description = "The tenants", body = schemas::TenantList),
))]
pub(super) async fn list_tenants(State(host): State<AppState>) -> axum::Json<Value> {
    let items: Vec<Value> = host.tenants().iter().map(tenant_json).collect();
    axum::Json(json!({ "items": items }))
}

/// One tenant.
#[utoipa::path(get, path = "/admin/tenants/{name}", tag = "Admin", operation_id = "get_tenant",
    params(("name" = String, Path, example = "acme", description = "The tenant's name")),
    responses(
        (status = 200, description = "The tenant", body = schemas::Tenant),
        (status = 404, description = "`not_found`: no such tenant", body = schemas::ErrorBody),
    ))]
pub(super) async fn get_tenant(State(host): State<AppState>, Path(name): Path<String>) -> Result<Response, ApiError> {
    let tenant = host.tenant(&name).ok_or_else(|| ApiError::not_found(format!("there is no tenant `{name}`")))?;
    Ok(axum::Json(tenant_json(&tenant.record)).into_response())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct NewTenant {
    name: String,
    #[serde(default)]
    public_enumeration: bool,
    #[serde(default = "empty_object")]
    quotas: Value,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct TenantChange {
    public_enumeration: Option<bool>,
    #[serde(default = "empty_object")]
    quotas: Value,
}

fn empty_object() -> Value {
    json!({})
}

/// Creates a tenant.
#[utoipa::path(post, path = "/admin/tenants", tag = "Admin", operation_id = "create_tenant",
    request_body = schemas::NewTenant,
    responses(
        (status = 201, description = "Created", body = schemas::Tenant, links(
            ("GetTenant" = (operation_id = "get_tenant", parameters(("name" = "$response.body#/name")))),
            ("UpdateTenant" = (operation_id = "update_tenant", parameters(("name" = "$response.body#/name")))),
        )),
        (status = 400, description = "`invalid_json` (not the body described), `invalid_request`", body = schemas::ErrorBody),
        (status = 409, description = "`conflict`: the tenant exists", body = schemas::ErrorBody),
        schemas::StorageFailed,
    ))]
pub(super) async fn create_tenant(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let new: NewTenant = json_body(&body)?;
    let record = host.create_tenant(caller.principal()?, &new.name, new.public_enumeration, &new.quotas)?;
    Ok((StatusCode::CREATED, axum::Json(tenant_json(&record))).into_response())
}

/// Changes a tenant's settings or quotas.
#[utoipa::path(patch, path = "/admin/tenants/{name}", tag = "Admin", operation_id = "update_tenant",
    params(("name" = String, Path, example = "acme", description = "The tenant's name")),
    request_body = schemas::TenantChange,
    responses(
        (status = 200, description = "Changed", body = schemas::Tenant),
        (status = 400, description = "`invalid_json` (not the body described), `invalid_request`", body = schemas::ErrorBody),
        (status = 404, description = "`not_found`: no such tenant", body = schemas::ErrorBody),
        schemas::StorageFailed,
    ))]
pub(super) async fn update_tenant(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let change: TenantChange = json_body(&body)?;
    let record = host.update_tenant(caller.principal()?, &name, change.public_enumeration, &change.quotas)?;
    Ok(axum::Json(tenant_json(&record)).into_response())
}

fn key_json(record: &KeyRecord) -> Value {
    json!({
        "id": record.id,
        "tenant": record.tenant,
        "role": record.role,
        "label": record.label,
        "createdAt": record.created_at,
        "revokedAt": record.revoked_at,
        "toolset": record.toolset,
    })
}

/// Every key's record (never the keys).
#[utoipa::path(get, path = "/admin/keys", tag = "Admin", operation_id = "list_keys",
    params(("tenant" = Option<String>, Query, description = "Only this tenant's keys")),
    responses(
        (status = 200, description = "The keys", body = schemas::KeyList),
    ))]
pub(super) async fn list_keys(State(host): State<AppState>, RawQuery(raw): RawQuery) -> axum::Json<Value> {
    let tenant = form_urlencoded::parse(raw.unwrap_or_default().as_bytes())
        .find(|(k, _)| k == "tenant")
        .map(|(_, v)| v.into_owned());
    let items: Vec<Value> = host.keys(tenant.as_deref()).iter().map(key_json).collect();
    axum::Json(json!({ "items": items }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewKeyRequest {
    tenant: Option<String>,
    role: String,
    label: Option<String>,
    toolset: Option<String>,
}

/// Creates a key; the answer is the only time the key is shown.
#[utoipa::path(post, path = "/admin/keys", tag = "Admin", operation_id = "create_key",
    request_body = schemas::NewKeyRequest,
    responses(
        (status = 201, description = "Created (`Cache-Control: no-store`)", body = schemas::CreatedKey,
            headers(("Cache-Control" = String, description = "`no-store`")),
            links(("RevokeKey" = (operation_id = "revoke_key", parameters(("id" = "$response.body#/id")))))),
        (status = 400, description = "`invalid_json`, `invalid_role`, `invalid_label`, `invalid_request`", body = schemas::ErrorBody),
        (status = 404, description = "`not_found`: no such tenant, or no such toolset in it", body = schemas::ErrorBody),
        schemas::StorageFailed,
    ))]
pub(super) async fn create_key(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let request: NewKeyRequest = json_body(&body)?;
    let role = Role::parse(&request.role)
        .ok_or_else(|| ApiError::bad_request("invalid_role", "role is one of `operator`, `publisher`, `consumer`"))?;
    if request.label.as_ref().is_some_and(|l| l.len() > 200) {
        return Err(ApiError::bad_request("invalid_label", "a label is at most 200 bytes"));
    }
    let new = match (request.toolset, role, request.tenant.as_deref()) {
        (None, _, tenant) => host.create_key(caller.principal()?, tenant, role, request.label)?,
        (Some(toolset), Role::Consumer, Some(tenant)) => {
            host.create_toolset_key(caller.principal()?, tenant, &toolset, request.label)?
        }
        (Some(_), _, _) => {
            return Err(ApiError::bad_request(
                "invalid_request",
                "a key scoped to a toolset is a consumer key of the toolset's tenant: give `role: consumer` and `tenant`",
            ));
        }
    };
    let mut body = key_json(&new.record);
    body["key"] = new.key.into();
    let mut response = (StatusCode::CREATED, axum::Json(body)).into_response();
    // The only copy of the key: no cache may keep it.
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

/// Revokes a key, at once and for good.
#[utoipa::path(delete, path = "/admin/keys/{id}", tag = "Admin", operation_id = "revoke_key",
    params(("id" = String, Path, description = "The key's id")),
    responses(
        (status = 200, description = "Revoked", body = schemas::Key),
        (status = 404, description = "`not_found`: no such key", body = schemas::ErrorBody),
        schemas::StorageFailed,
    ))]
pub(super) async fn revoke_key(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let record = host.revoke_key(caller.principal()?, &id)?;
    Ok(axum::Json(key_json(&record)).into_response())
}

const AUDIT_CURSOR: &str = "audit:";

/// `GET /admin/audit`: an operator reads every entry (or one tenant's with
/// `?tenant=`); a publisher reads its own tenant's, and naming another
/// tenant is `404` as everywhere else.
#[utoipa::path(get, summary = "The audit log, newest first", description = "An operator reads every entry (or one tenant's with `?tenant=`); a publisher reads its own tenant's, and naming another tenant is `404` as everywhere else.", path = "/admin/audit", tag = "Admin", operation_id = "audit",
    params(
        ("tenant" = Option<String>, Query, description = "Only this tenant's entries (a publisher: its own only)"),
        schemas::PageParams,
    ),
    responses(
        (status = 200, description = "A page of entries, newest first", body = schemas::AuditPage),
        (status = 400, description = "`invalid_page_limit`, `invalid_cursor`", body = schemas::ErrorBody),
        (status = 404, description = "`not_found`: another tenant than the publisher's own", body = schemas::ErrorBody),
        schemas::StorageFailed,
    ))]
pub(super) async fn audit(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    RawQuery(raw): RawQuery,
) -> Result<axum::Json<Value>, ApiError> {
    let principal = caller.principal()?;
    let query = PageQuery::parse(raw.as_deref())?;
    let asked = form_urlencoded::parse(raw.as_deref().unwrap_or("").as_bytes())
        .find(|(k, _)| k == "tenant")
        .map(|(_, v)| v.into_owned());
    let tenant = match (&principal.tenant, asked) {
        (None, asked) => asked,
        (Some(own), Some(asked)) if *own != asked => {
            return Err(ApiError::not_found(format!("there is no tenant `{asked}` this key may use")));
        }
        (Some(own), _) => Some(own.clone()),
    };
    let before = match query.cursor_after(AUDIT_CURSOR)? {
        Some(seq) => {
            Some(seq.parse::<i64>().map_err(|_| ApiError::bad_request("invalid_cursor", "pageCursor is not valid"))?)
        }
        None => None,
    };
    let mut entries = host.audit(&AuditQuery { tenant, before, limit: query.limit + 1 }).map_err(|e| {
        tracing::error!(error = %e, "reading the audit log failed");
        ApiError::storage_failed("the audit log could not be read")
    })?;
    let more = entries.len() > query.limit;
    entries.truncate(query.limit);
    let next = if more {
        entries.last().map(|e: &AuditEntry| super::paging::cursor(AUDIT_CURSOR, &e.seq.to_string()))
    } else {
        None
    };
    Ok(super::paging::page(
        entries.iter().map(|e| serde_json::to_value(e).unwrap_or_default()).collect(),
        query.limit,
        next,
    ))
}

/// The admin API's operations, merged into the OpenAPI document
/// (`openapi.rs`).
#[derive(utoipa::OpenApi)]
#[openapi(paths(
    deploy,
    retire,
    get_trust_policy,
    put_trust_policy,
    refused_by_trust_policy,
    list_registries,
    put_registry,
    delete_registry,
    list_secrets,
    put_secret,
    delete_secret,
    list_config,
    put_config,
    delete_config,
    own_tenant,
    list_tenants,
    create_tenant,
    get_tenant,
    update_tenant,
    list_keys,
    create_key,
    revoke_key,
    audit,
))]
pub(super) struct Doc;
