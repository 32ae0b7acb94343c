//! The admin API of end-user authorization (docs/authorization.md): a
//! tenant's providers, and its people's connected accounts. A publisher's
//! (or an operator's), under every platform root, like `/admin/secrets`:
//!
//! - `GET /admin/authorization-providers`: every provider, never a secret
//! - `PUT /admin/authorization-providers/{id}`: creates or replaces one
//!   (a secret left out is kept), answers it as stored
//! - `DELETE /admin/authorization-providers/{id}`: with every grant and
//!   link made for it
//! - `GET /admin/end-users/{name}/connections`: a person's grants, never a
//!   token
//! - `DELETE /admin/end-users/{name}/connections/{provider}`: revokes one
//!   (at the provider too, when it has a revocation endpoint)
//!
//! The decisions are the core's (`host/authorizations.rs`); every change
//! is audited there. The person's own pages are `connections.rs`.

use super::links::check_end_user;
use super::{Access, ApiError, AppState, Caller, Routes, Scope, schemas};
use crate::host::authorizations::ProviderSettings;
use axum::Extension;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{Method, StatusCode};
use axum::routing::{delete, get, put};
use serde_json::{Value, json};

/// A provider's `PUT` body, as other admin JSON bodies.
const MAX_PROVIDER_BYTES: usize = 64 << 10;

/// The routes of this API.
pub(super) fn routes(routes: Routes) -> Routes {
    use Access::Publish;
    use Scope::Tenant;
    let limit = DefaultBodyLimit::max(MAX_PROVIDER_BYTES);
    routes
        .add(Method::GET, "/admin/authorization-providers", Publish, Tenant, get(list_providers))
        .add(Method::PUT, "/admin/authorization-providers/{id}", Publish, Tenant, put(put_provider).layer(limit))
        .add(Method::DELETE, "/admin/authorization-providers/{id}", Publish, Tenant, delete(delete_provider))
        .add(Method::GET, "/admin/end-users/{name}/connections", Publish, Tenant, get(list_connections))
        .add(
            Method::DELETE,
            "/admin/end-users/{name}/connections/{provider}",
            Publish,
            Tenant,
            delete(revoke_connection),
        )
}

/// A provider as the API shows it: its settings (never the secret),
/// `clientSecretSet`, `updatedAt`.
fn provider_json(id: &str, settings: &ProviderSettings, secret_set: bool, updated_at: i64) -> Value {
    let mut view = serde_json::to_value(settings).unwrap_or_else(|_| json!({}));
    if let Some(fields) = view.as_object_mut() {
        // Never serialized by the core's type; removed here all the same.
        fields.remove("clientSecret");
        fields.insert("id".into(), json!(id));
        fields.insert("clientSecretSet".into(), json!(secret_set));
        fields.insert("updatedAt".into(), json!(updated_at));
    }
    view
}

/// The tenant's providers, each without its secret.
#[utoipa::path(get, summary = "The tenant's authorization providers", description = "Every provider the tenant configured for its tools' `[[authorization]]` entries: its settings, whether a client secret is set (never the secret), when it was last set.", path = "/admin/authorization-providers", tag = "Admin", operation_id = "list_authorization_providers",
    responses((status = 200, description = "The providers, by id", body = schemas::ProviderList)))]
pub(super) async fn list_providers(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> axum::Json<Value> {
    let providers: Vec<Value> = host
        .authorization_providers(&caller.tenant)
        .iter()
        .map(|(id, settings, secret_set, updated_at)| provider_json(id, settings, *secret_set, *updated_at))
        .collect();
    axum::Json(json!({ "providers": providers }))
}

/// Creates or replaces one of the tenant's providers (audited, without
/// the secret). A `clientSecret` left out keeps the stored one.
#[utoipa::path(put, summary = "Sets an authorization provider", description = "Creates or replaces the tenant's provider `id`: an `issuer` (its metadata names the endpoints, and its `iss` must come back with every code) or explicit endpoints, Plinth's client id and secret there (sealed, never read back; left out, the stored one is kept), extra authorization parameters, the resource. Every URL must be https unless the operator allows http (`--oauth-allow-http`). Register `{root}/connections/callback` at the provider as the client's redirect URI. Audited, without the secret.", path = "/admin/authorization-providers/{id}", tag = "Admin", operation_id = "put_authorization_provider",
    params(("id" = String, Path, example = "inbox", description = "The provider's id, as tools name it: 1 to 64 of `a-z0-9_-`, starting with a letter")),
    request_body(content = schemas::ProviderSettings, content_type = "application/json"),
    responses(
        (status = 200, description = "Stored: the provider as it is now", body = schemas::Provider),
        (status = 400, description = "`invalid_json` (an unknown field, a missing `clientId`), `invalid_provider` (the message names the field)", body = schemas::ErrorBody),
        (status = 409, description = "`quota_exceeded`: the tenant has as many providers as it may", body = schemas::ErrorBody),
        schemas::StorageFailed,
    ))]
pub(super) async fn put_provider(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<axum::Json<Value>, ApiError> {
    let settings: ProviderSettings = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(
            "invalid_json",
            format!(
                "the body must be a provider's settings ({{\"issuer\", \"clientId\", …}}, docs/authorization.md): {e}"
            ),
        )
    })?;
    host.put_authorization_provider(caller.principal()?, &caller.tenant, &id, settings)?;
    let stored = host
        .authorization_providers(&caller.tenant)
        .into_iter()
        .find(|(provider, ..)| *provider == id)
        // Deleted again by someone else in between: it is gone.
        .ok_or_else(|| ApiError::not_found(format!("tenant `{}` has no provider `{id}`", caller.tenant)))?;
    let (id, settings, secret_set, updated_at) = stored;
    Ok(axum::Json(provider_json(&id, &settings, secret_set, updated_at)))
}

/// Deletes one of the tenant's providers, with every grant and link made
/// for it (audited).
#[utoipa::path(delete, summary = "Deletes an authorization provider", description = "With every grant and link made for it; its tools' calls answer `authorization_unavailable` until it is set again. Audited.", path = "/admin/authorization-providers/{id}", tag = "Admin", operation_id = "delete_authorization_provider",
    params(("id" = String, Path, example = "inbox", description = "The provider's id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "`not_found`: no such provider in this tenant", body = schemas::ErrorBody),
        schemas::StorageFailed,
    ))]
pub(super) async fn delete_provider(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    host.delete_authorization_provider(caller.principal()?, &caller.tenant, &id)?;
    Ok(StatusCode::NO_CONTENT)
}

/// An end user's connected accounts (their grants, never a token).
#[utoipa::path(get, summary = "An end user's connected accounts", description = "The person's grants at the tenant's providers: which provider, the scopes, when it was connected and when its token expires. Never a token. A person with none (or no such end user) has an empty list.", path = "/admin/end-users/{name}/connections", tag = "Admin", operation_id = "list_connections",
    params(("name" = String, Path, min_length = 1, max_length = 128, example = "alice", description = "The end user's name")),
    responses(
        (status = 200, description = "The person's accounts, by provider", body = schemas::ConnectionList),
        (status = 400, description = "`invalid_end_user`", body = schemas::ErrorBody),
        schemas::StorageFailed,
    ))]
pub(super) async fn list_connections(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    check_end_user(&name)?;
    let connections = host.grants_of(&caller.tenant, &name)?;
    Ok(axum::Json(json!({ "connections": connections })))
}

/// Revokes an end user's account at a provider: at the provider too (RFC
/// 7009) when it has a revocation endpoint; audited.
#[utoipa::path(delete, summary = "Revokes an end user's connected account", description = "Removes the person's grant at the provider (revoked at the provider too, RFC 7009, when it has a revocation endpoint; removed here whatever it answers). Their next call of a tool that needs it is a challenge again. Audited.", path = "/admin/end-users/{name}/connections/{provider}", tag = "Admin", operation_id = "revoke_connection",
    params(
        ("name" = String, Path, min_length = 1, max_length = 128, example = "alice", description = "The end user's name"),
        ("provider" = String, Path, example = "inbox", description = "The provider's id"),
    ),
    responses(
        (status = 204, description = "Revoked"),
        (status = 400, description = "`invalid_end_user`", body = schemas::ErrorBody),
        (status = 404, description = "`not_found`: the person has no account connected at that provider", body = schemas::ErrorBody),
        schemas::StorageFailed,
    ))]
pub(super) async fn revoke_connection(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((name, provider)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    check_end_user(&name)?;
    host.revoke_grant(caller.principal()?, &caller.tenant, &name, &provider).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// This API's operations, merged into the OpenAPI document (`openapi.rs`).
#[derive(utoipa::OpenApi)]
#[openapi(paths(list_providers, put_provider, delete_provider, list_connections, revoke_connection))]
pub(super) struct Doc;
