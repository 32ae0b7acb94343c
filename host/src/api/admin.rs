//! The operator's API: deploy and retire versions.
//!
//! - `POST /admin/tools[?expectVersion=N]` with the packed component
//!   (`Content-Type: application/wasm`) → `201` new version, `200` identical
//!   bytes, `409` breaking change or version mismatch
//! - `DELETE /admin/tools/{toolId}/versions/{n}` → the version is retired
//! - `PUT /admin/secrets/{id}` (the value as the body), `DELETE
//!   /admin/secrets/{id}`, `GET /admin/secrets` (ids only: a value is never
//!   readable back)
//!
//! Every request needs `Authorization: Bearer <admin token>`; without a token
//! configured, the admin API is disabled.

use super::{ApiError, AppState};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, RawQuery, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use serde_json::json;
use sha2::{Digest, Sha256};

/// Largest component accepted by `POST /admin/tools`.
pub const MAX_COMPONENT_BYTES: usize = 32 << 20;
/// Largest secret value.
pub const MAX_SECRET_BYTES: usize = 64 << 10;

/// The admin routes, guarded by `token` (disabled when it is `None`).
pub fn routes(token: Option<String>) -> Router<AppState> {
    let expected = token.map(|t| Sha256::digest(t.as_bytes()));
    Router::new()
        .route("/admin/tools", post(deploy).layer(DefaultBodyLimit::max(MAX_COMPONENT_BYTES)))
        .route("/admin/tools/{tool_id}/versions/{version}", delete(retire))
        .route("/admin/secrets", get(list_secrets))
        .route(
            "/admin/secrets/{id}",
            put(put_secret).delete(delete_secret).layer(DefaultBodyLimit::max(MAX_SECRET_BYTES)),
        )
        .route_layer(middleware::from_fn(move |request: Request, next: Next| {
            let expected = expected;
            async move { authorize(expected.as_ref().map(|d| d.as_slice()), request, next).await }
        }))
}

/// Compares digests of the presented and configured tokens, so the time
/// taken does not reveal how much of a guess was right.
async fn authorize(expected: Option<&[u8]>, request: Request, next: Next) -> Response {
    let Some(expected) = expected else {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "admin_disabled",
            "the admin API is disabled: start the server with --admin-token or PLINTH_ADMIN_TOKEN",
        )
        .into_response();
    };
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|t| Sha256::digest(t.trim().as_bytes()));
    let valid = presented.is_some_and(|p| p.iter().zip(expected).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0);
    if !valid {
        let mut response = ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "a valid admin token is required: Authorization: Bearer <token>",
        )
        .into_response();
        response.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
        return response;
    }
    next.run(request).await
}

async fn deploy(
    State(host): State<AppState>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    if content_type.split(';').next().map(str::trim) != Some("application/wasm") {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "send the packed component as the body with Content-Type: application/wasm",
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
    // Compiling is CPU-bound: keep it off the request threads.
    let deployed = tokio::task::spawn_blocking(move || host.deploy(&body, expect_version)).await.map_err(|_| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "deploy_failed",
            "the deploy was interrupted; nothing was deployed",
        )
    })??;
    let status = if deployed.created { StatusCode::CREATED } else { StatusCode::OK };
    if deployed.created {
        tracing::info!(
            tool = deployed.name,
            version = deployed.version,
            sha256 = deployed.sha256,
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
    });
    Ok((status, axum::Json(body)).into_response())
}

async fn retire(
    State(host): State<AppState>,
    Path((tool_id, version)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let version = version.parse::<u32>().ok().filter(|n| *n >= 1).ok_or_else(|| {
        ApiError::not_found(format!("`{version}` is not a version; versions are whole numbers from 1"))
    })?;
    host.retire(&tool_id, version)?;
    let current = host.tool(&tool_id).and_then(|t| t.current()).map(|v| v.number);
    Ok(axum::Json(json!({ "toolId": tool_id, "version": version, "retired": true, "currentVersion": current }))
        .into_response())
}

async fn put_secret(State(host): State<AppState>, Path(id): Path<String>, body: Bytes) -> Result<StatusCode, ApiError> {
    if !crate::manifest::is_secret_id(&id) {
        return Err(ApiError::bad_request(
            "invalid_secret_id",
            "a secret id is 1 to 128 lowercase letters, digits, `.`, `_` or `-`",
        ));
    }
    let value = String::from_utf8(body.to_vec())
        .map_err(|_| ApiError::bad_request("invalid_secret_value", "the secret value must be UTF-8 text"))?;
    if value.is_empty() {
        return Err(ApiError::bad_request(
            "invalid_secret_value",
            "the secret value is empty; DELETE the secret instead",
        ));
    }
    host.put_secret(&id, &value).map_err(|e| {
        tracing::error!(secret = id, error = %e, "storing a secret failed");
        ApiError::storage_failed("the change could not be stored; nothing changed")
    })?;
    Ok(StatusCode::NO_CONTENT)
}

async fn delete_secret(State(host): State<AppState>, Path(id): Path<String>) -> Result<StatusCode, ApiError> {
    match host.delete_secret(&id) {
        Ok(true) => Ok(StatusCode::NO_CONTENT),
        Ok(false) => Err(ApiError::not_found(format!("there is no secret `{id}`"))),
        Err(e) => {
            tracing::error!(secret = id, error = %e, "deleting a secret failed");
            Err(ApiError::storage_failed("the change could not be stored; nothing changed"))
        }
    }
}

async fn list_secrets(State(host): State<AppState>) -> axum::Json<serde_json::Value> {
    let items: Vec<_> = host.secret_ids().into_iter().map(|id| json!({ "id": id })).collect();
    axum::Json(json!({ "items": items }))
}
