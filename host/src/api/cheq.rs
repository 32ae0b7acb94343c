//! CHEQ over HTTP (draft sections 4.1–4.3, 5 and 7): the URI pack a call
//! that needs confirmation answers with, the resource URI a confirmation
//! server fetches the signed CHEQ from and posts its decision to, the result
//! URI the agent polls, and the built-in confirmation server's pages (log in,
//! see the call, accept or reject). The transactions themselves are the
//! core's (`host::confirmations`).
//!
//! Every path is under the tenant's platform root:
//!
//! | path | who | what |
//! | --- | --- | --- |
//! | `GET cheq/transactions/{id}`, `…/{id}/cheq` | anyone with the URI | the CHEQ signed by this server (`?raw`: the object alone) |
//! | `POST cheq/transactions/{id}?accept` | a confirmation server | the CHEQ countersigned by it |
//! | `POST cheq/transactions/{id}?reject` | anyone with the URI | the call never runs |
//! | `GET cheq/results/{id}` | a consumer key of the tenant | `202` pending, then the call's answer |
//! | `GET`/`POST cheq/confirm` | the end user's browser, the user application | login, then the confirmation page |
//!
//! The draft's wire forms are read alongside Plinth's (docs/cheq.md): the
//! resource URI posted to the confirmation URI as the whole query or body,
//! `GET {resource uri}/cheq`, and `?accept`/`?reject` as HTTP clients write
//! them.

use super::links::*;
use super::pages::{self, Frame, Paragraph, Product, Revealed, field, form, provider_name};
use super::{ApiError, ApiOptions, AppState, Caller, login, schemas};
use crate::host::{DecideError, InvokeError, PageSession, State as TxState, ToolHost, as_words, rfc3339};
use crate::store::StoredConfirmation;
use crate::tenancy::unix_now;
use askama::Template;
use axum::Extension;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::time::Instant;

/// How long the agent should wait between polls of a pending result.
const POLL_AFTER_SECS: u64 = 2;

fn storage(e: crate::store::StoreError) -> ApiError {
    DecideError::Store(e).into()
}

fn transaction(host: &AppState, tenant: &str, id: &str) -> Result<StoredConfirmation, ApiError> {
    host.confirmation(tenant, id).map_err(storage)?.ok_or_else(|| DecideError::Unknown(id.into()).into())
}

/// `GET {resource uri}`, and `GET {resource uri}/cheq` (the draft's
/// "retrieve cheq function", `GET {resource-server}/cheq`): the CHEQ this
/// server signed, as a JWS in the general JSON serialization; `?raw` gives
/// the CHEQ object alone (for a voice gateway to read out). Whatever key or
/// service account the caller presents is not needed: the URI is the
/// capability.
#[utoipa::path(get, summary = "The CHEQ of a transaction (its resource URI)", description = "The CHEQ this server signed, as a JWS in the general JSON serialization; `?raw` gives the CHEQ object alone (for a voice gateway to read out). The URI is the capability: no key is needed. `GET {resource uri}/cheq` is the same (the draft's \"retrieve cheq function\").", path = "/cheq/transactions/{id}", tag = "CHEQ", operation_id = "get_transaction",
    params(("id" = String, Path, description = "The transaction id (from the URI pack)"),
        ("raw" = Option<String>, Query, description = "Present: the CHEQ object alone, unsigned")),
    responses(
        (status = 200, description = "The CHEQ signed by this server (with `?raw`, the CHEQ object)", body = schemas::CheqAnswer),
        (status = 404, description = "`unknown_transaction`", body = schemas::ErrorBody),
        schemas::StorageFailed,
    ))]
pub(super) async fn get_transaction(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let c = transaction(&host, &caller.tenant, &id)?;
    if form(query.as_deref().unwrap_or("").as_bytes()).iter().any(|(k, _)| k == "raw") {
        return Ok(axum::Json(c.cheq_object()).into_response());
    }
    let signed: Value = serde_json::from_str(&c.cheq).unwrap_or_default();
    Ok(axum::Json(signed).into_response())
}

/// A confirmation server's decision, as its query names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    Accept,
    Reject,
}

/// The decision in the query of a `POST {resource uri}`: the draft's
/// `?accept` and `?reject`, and what HTTP clients make of them
/// (`?accept=`, `?accept=true`, percent-encoded). Anything that leaves the
/// decision in doubt — both, neither, another value, another parameter —
/// is refused.
fn decision(query: Option<&str>) -> Result<Decision, ApiError> {
    let refuse = |why: String| {
        ApiError::bad_request(
            "invalid_decision",
            format!("{why}: post to the resource URI with `?accept` (and the countersigned CHEQ) or `?reject`"),
        )
    };
    let mut decided = None;
    for (key, value) in form(query.unwrap_or("").as_bytes()) {
        let this = match key.as_str() {
            "accept" => Decision::Accept,
            "reject" => Decision::Reject,
            _ => return Err(refuse(format!("`{key}` is not a decision"))),
        };
        if !value.is_empty() && value != "true" {
            return Err(refuse(format!("`{key}={value}` leaves the decision in doubt (give `?{key}` alone)")));
        }
        if decided.is_some_and(|d| d != this) {
            return Err(refuse("`accept` and `reject` together leave the decision in doubt".into()));
        }
        decided = Some(this);
    }
    decided.ok_or_else(|| refuse("the query names no decision".into()))
}

/// `POST {resource uri}?accept` with the countersigned CHEQ, or `?reject`.
/// The CHEQ may come in any JWS serialization (`cheq::from_wire`). An
/// accepted call runs before the answer, which says how it went for the
/// confirmation server (the agent gets the tool's answer from the result
/// URI).
#[utoipa::path(post, summary = "A confirmation server's decision", description = "`?accept` with the CHEQ countersigned by the confirmation server (in any JWS serialization), or `?reject`. An accepted call runs before the answer, which says how it went for the confirmation server; the agent gets the tool's answer from the result URI.", path = "/cheq/transactions/{id}", tag = "CHEQ", operation_id = "decide_transaction",
    params(("id" = String, Path, description = "The transaction id (from the URI pack)"),
        ("accept" = Option<String>, Query, description = "Accept: the body is the CHEQ countersigned by the confirmation server"),
        ("reject" = Option<String>, Query, description = "Reject: the call never runs")),
    request_body(description = "On `?accept`, the countersigned CHEQ: a JWS in the general or flattened JSON serialization, or the compact one", content(
        (schemas::SignedCheq = "application/json"),
        (String = "application/jose"),
    )),
    responses(
        (status = 200, description = "The decision was recorded (an accepted call has run)", body = schemas::DecisionRecorded),
        (status = 400, description = "`invalid_decision`, `invalid_json`", body = schemas::ErrorBody),
        (status = 403, description = "`invalid_signature`, `not_confirmed`", body = schemas::ErrorBody),
        (status = 404, description = "`unknown_transaction`", body = schemas::ErrorBody),
        (status = 409, description = "`already_decided`, `cheq_altered`", body = schemas::ErrorBody),
        (status = 410, description = "`confirmation_expired`, `version_retired`", body = schemas::ErrorBody),
        (status = 502, description = "`jwks_*`: the external confirmation server's keys cannot be used", body = schemas::ErrorBody),
        schemas::StorageFailed,
    ))]
pub(super) async fn decide_transaction(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
    body: Bytes,
) -> Result<Response, ApiError> {
    match decision(query.as_deref())? {
        Decision::Accept => {
            let signed = crate::cheq::from_wire(&body).map_err(|e| {
                ApiError::bad_request(
                    "invalid_json",
                    format!(
                        "the body must be the signed CHEQ: a JWS in the general or flattened JSON serialization, or in the compact one ({e})"
                    ),
                )
            })?;
            let (c, confirmed) = host.accept_signed(&caller.tenant, &id, &signed).await?;
            let status = complete(&host, c, confirmed, Map::new()).await;
            Ok(axum::Json(json!({ "transaction": id, "state": "accepted", "result_status": status })).into_response())
        }
        Decision::Reject => {
            let evidence = json!({ "by": "resource-uri", "at": unix_now() });
            host.reject_confirmation(&caller.tenant, &id, evidence)?;
            Ok(axum::Json(json!({ "transaction": id, "state": "rejected" })).into_response())
        }
    }
}

/// `GET /admin/confirmation-server`: the tenant's external confirmation
/// server, or `null` (the built-in one).
#[utoipa::path(get, summary = "The tenant's confirmation server", description = "The tenant's external confirmation server, or `null` when the built-in one confirms.", path = "/admin/confirmation-server", tag = "Admin", responses(
    (status = 200, description = "The tenant's confirmation server", body = schemas::ConfirmationServerSetting),
))]
pub(super) async fn get_confirmation_server(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> axum::Json<Value> {
    axum::Json(json!({ "confirmation_server": host.confirmation_server(&caller.tenant) }))
}

/// `PUT /admin/confirmation-server` with `{"uri", "jwks_url"}`.
#[utoipa::path(put, summary = "Sets an external confirmation server", description = "Where the tenant's end users confirm (the URI pack's confirmation URI), and where its keys are published (https only).", path = "/admin/confirmation-server", tag = "Admin",
    request_body = crate::host::ConfirmationServer,
    responses(
        (status = 204, description = "Set"),
        (status = 400, description = "`invalid_json`, `invalid_request`", body = schemas::ErrorBody),
        schemas::StorageFailed,
    ))]
pub(super) async fn put_confirmation_server(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    let server = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request("invalid_json", format!("the body must be {{\"uri\": …, \"jwks_url\": …}}: {e}"))
    })?;
    host.set_confirmation_server(caller.principal()?, &caller.tenant, Some(server))?;
    Ok(StatusCode::NO_CONTENT)
}

/// `DELETE /admin/confirmation-server`: back to the built-in one.
#[utoipa::path(delete, summary = "Back to the built-in confirmation server", description = "The tenant's end users confirm on the built-in confirmation server again.", path = "/admin/confirmation-server", tag = "Admin", responses(
    (status = 204, description = "The built-in confirmation server confirms again"),
    schemas::StorageFailed,
))]
pub(super) async fn delete_confirmation_server(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<StatusCode, ApiError> {
    host.set_confirmation_server(caller.principal()?, &caller.tenant, None)?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /admin/tools/{tool_id}/confirmation`: the tenant's override of the
/// tool's policy (`null` when the tool's own applies) and what the newest
/// version declares.
#[utoipa::path(get, summary = "A tool's confirmation policy", description = "The tenant's override of the tool's policy (`null` when the tool's own applies) and what the newest version declares.", path = "/admin/tools/{tool_id}/confirmation", tag = "Admin", params(("tool_id" = String, Path, description = "The tool's `toolId`")), responses(
    (status = 200, description = "The override and the tool's own policy", body = schemas::PolicySetting),
    (status = 404, description = "`not_found`: no such tool in this tenant", body = schemas::ErrorBody),
))]
pub(super) async fn get_policy(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(tool_id): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    let tool = host
        .tool(&caller.tenant, &tool_id)
        .ok_or_else(|| ApiError::not_found(format!("there is no tool {tool_id}")))?;
    let declared = tool.version(tool.newest_number()).map(|v| v.manifest.confirmation.clone());
    Ok(axum::Json(json!({ "override": host.confirmation_override(tool.id), "declared": declared })))
}

/// `PUT /admin/tools/{tool_id}/confirmation` with a policy
/// (`{"required": true}`, `{"when": "…"}` or `{}` for never).
#[utoipa::path(put, summary = "Overrides a tool's confirmation policy", description = "`{\"required\": true}`, `{\"when\": \"<CEL>\"}`, or `{}` for never.", path = "/admin/tools/{tool_id}/confirmation", tag = "Admin", params(("tool_id" = String, Path, description = "The tool's `toolId`")),
    request_body = crate::cheq::ConfirmationPolicy,
    responses(
        (status = 204, description = "The override applies to the tool's calls"),
        (status = 400, description = "`invalid_json`, `invalid_request`, `invalid_condition`, `condition_too_costly`", body = schemas::ErrorBody),
        (status = 404, description = "`not_found`: no such tool in this tenant", body = schemas::ErrorBody),
        schemas::StorageFailed,
    ))]
pub(super) async fn put_policy(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(tool_id): Path<String>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    let policy = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(
            "invalid_json",
            format!("the body must be {{\"required\": true}}, {{\"when\": \"<CEL>\"}} or {{}}: {e}"),
        )
    })?;
    host.set_confirmation_override(caller.principal()?, &caller.tenant, &tool_id, Some(policy))?;
    Ok(StatusCode::NO_CONTENT)
}

/// `DELETE /admin/tools/{tool_id}/confirmation`: the tool's own policy
/// applies again.
#[utoipa::path(delete, summary = "Drops the override of a tool's confirmation policy", description = "The tool's own policy applies again.", path = "/admin/tools/{tool_id}/confirmation", tag = "Admin", params(("tool_id" = String, Path, description = "The tool's `toolId`")), responses(
    (status = 204, description = "The tool's own policy applies again"),
    (status = 404, description = "`not_found`: no such tool in this tenant", body = schemas::ErrorBody),
    schemas::StorageFailed,
))]
pub(super) async fn delete_policy(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(tool_id): Path<String>,
) -> Result<StatusCode, ApiError> {
    host.set_confirmation_override(caller.principal()?, &caller.tenant, &tool_id, None)?;
    Ok(StatusCode::NO_CONTENT)
}

/// Runs an accepted call to its end (on its own task: a client that hangs
/// up does not stop it, and a graceful stop waits for it) and keeps its
/// answer for the result URI, with the status of a final answer
/// ([`super::error::settled`]). Returns that status. Called right after the
/// acceptance, with no await in between.
async fn complete(
    host: &AppState,
    c: StoredConfirmation,
    confirmed: crate::host::Confirmed,
    private: Map<String, Value>,
) -> u16 {
    // Counted from here: a graceful stop waits until its answer is kept.
    let running = host.running_confirmed();
    let host = host.clone();
    let run = async move {
        let started = Instant::now();
        let door = c.door();
        let (version, has_outputs, outcome) = match host.run_confirmed(&c, confirmed, &private).await {
            Ok((version, outcome)) => (version.number, !version.signature.outputs.is_empty(), outcome),
            Err(e) => (c.version, false, Err(e)),
        };
        let response = super::render_outcome(door, &c.call_id, version, has_outputs, started.elapsed(), outcome).await;
        let status = super::error::settled(response.status()).as_u16();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap_or_default();
        let body = match serde_json::from_slice::<Value>(&body) {
            Ok(mut answer) => {
                final_answer(&mut answer);
                answer.to_string()
            }
            Err(_) => String::from_utf8_lossy(&body).into_owned(),
        };
        if let Err(e) = host.finish_confirmation(running, &c.id, status, &body) {
            tracing::error!(error = %e, transaction = c.id, "a confirmed call's answer could not be kept");
        }
        status
    };
    // In the accepting request's span: the call's log lines and spans are
    // that request's.
    let run = tokio::spawn(tracing::Instrument::instrument(run, tracing::Span::current()));
    run.await.unwrap_or(500)
}

/// A confirmed call's answer as it is kept: final, since the call is not
/// run again, so its error (A2T `error`, OTC `result.error`) no longer says
/// a retry may work (`canRetry`/`can_retry` false, no `retryAfterMs`). The
/// tool's outputs are left as they are.
fn final_answer(answer: &mut Value) {
    for pointer in ["/error", "/result/error"] {
        let Some(fields) = answer.pointer_mut(pointer).and_then(Value::as_object_mut) else { continue };
        for key in ["canRetry", "can_retry"] {
            if let Some(can_retry) = fields.get_mut(key) {
                *can_retry = Value::Bool(false);
            }
        }
        fields.remove("retryAfterMs");
    }
}

/// `GET {result uri}`: `202` while the end user has not decided (or the
/// tool runs); the call's answer once it ran (final: never a `5xx`, see
/// [`super::error::settled`]); `403 confirmation_rejected`,
/// `410 confirmation_expired`, `410 version_retired` or
/// `422 call_outcome_unknown` otherwise. In the shape of the front door the
/// call came through.
#[utoipa::path(get, summary = "The answer of a call that waited for confirmation (its result URI)", description = "`202` while the end user has not decided (or the accepted tool runs); then the call's answer, final (never a `5xx`), in the shape of the door the call came through; or why it has none.", path = "/cheq/results/{id}", tag = "CHEQ", operation_id = "get_result",
    params(("id" = String, Path, description = "The transaction id (from the URI pack)")),
    responses(
        (status = 200, description = "The call's answer, in the shape of the door it came through (A2T outputs, an OTC result, an MCP result); final", content_type = "application/json", body = Object),
        (status = 202, description = "The end user has not decided (`pending`), or the accepted call runs (`running`)", body = schemas::TransactionWaiting,
            headers(("Retry-After" = u64, description = "Seconds until the next poll"))),
        (status = 400, description = "The call's own answer: its input was refused when it ran (final)", content_type = "application/json", body = Object),
        (status = 403, description = "`confirmation_rejected`: the end user rejected the call", content_type = "application/json", body = Object),
        (status = 404, description = "`unknown_transaction`", body = schemas::ErrorBody),
        (status = 410, description = "`confirmation_expired`, `version_retired`", content_type = "application/json", body = Object),
        (status = 422, description = "The call's own failure (`tool_error`, …, a temporary one kept as final), or `call_outcome_unknown`", content_type = "application/json", body = Object),
        (status = 503, description = "`storage_failed`: the transaction could not be read", body = schemas::ErrorBody, headers(("Retry-After" = u64, description = "Seconds"))),
    ))]
pub(super) async fn get_result(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let c = transaction(&host, &caller.tenant, &id)?;
    // Through a toolset's root, only the results of its tools' calls.
    if let Some(toolset) = caller.toolset.as_deref()
        && host.registry().get(&c.tool_id).is_none_or(|tool| !ToolHost::in_view(Some(toolset), &tool))
    {
        return Err(DecideError::Unknown(id).into());
    }
    let door = c.door();
    let waiting = |state: &str, retry: u64| {
        let mut response = (
            StatusCode::ACCEPTED,
            axum::Json(json!({ "transaction": c.id, "state": state, "expires": rfc3339(c.expires_at) })),
        )
            .into_response();
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(retry));
        response
    };
    let error = match TxState::of(&c, unix_now()) {
        TxState::Pending => return Ok(waiting("pending", POLL_AFTER_SECS)),
        TxState::Running => return Ok(waiting("running", 1)),
        TxState::Done => {
            // Settled again: an answer kept before 5xx were settled.
            let status = c.result_status.and_then(|s| StatusCode::from_u16(s).ok()).unwrap_or(StatusCode::OK);
            let status = super::error::settled(status);
            let mut response =
                (status, [(header::CONTENT_TYPE, "application/json")], c.result_body.unwrap_or_default())
                    .into_response();
            if let Ok(call_id) = HeaderValue::from_str(&c.call_id) {
                response.headers_mut().insert("plinth-call-id", call_id);
            }
            return Ok(response);
        }
        state => ApiError::unanswered(state),
    };
    Ok(super::render_error(door, error).await)
}

/// `GET /admin/cheq/{id}`: the evidence of one transaction — the CHEQ this
/// server signed, the decision (the CHEQ with the confirmation server's
/// signature, or who rejected it), and what came of it.
#[utoipa::path(get, summary = "The evidence of a CHEQ transaction", description = "The CHEQ this server signed, the decision (the CHEQ with the confirmation server's signature, or who rejected it), and what came of it. An operator sees every tenant's; a publisher its own.", path = "/admin/cheq/{id}", tag = "CHEQ", operation_id = "evidence",
    params(("id" = String, Path, description = "The transaction id")),
    responses(
        (status = 200, description = "The transaction's evidence", body = schemas::Evidence),
        (status = 404, description = "`unknown_transaction` (another tenant's too, for a publisher)", body = schemas::ErrorBody),
        schemas::StorageFailed,
    ))]
pub(super) async fn evidence(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    let principal = caller.principal()?;
    // An operator sees every tenant's; a publisher its own.
    let c = match &principal.tenant {
        None => host.confirmation_any(&id).map_err(storage)?,
        Some(tenant) => host.confirmation(tenant, &id).map_err(storage)?,
    }
    .ok_or_else(|| ApiError::from(DecideError::Unknown(id.clone())))?;
    let parse = |text: &str| serde_json::from_str::<Value>(text).unwrap_or(Value::Null);
    Ok(axum::Json(json!({
        "transaction": c.id,
        "tenant": c.tenant,
        "tool_id": c.tool_id,
        "version": c.version,
        "end_user": c.end_user,
        "front_door": c.front_door,
        "call_id": c.call_id,
        "state": TxState::of(&c, unix_now()).as_str(),
        "created": rfc3339(c.created_at),
        "expires": rfc3339(c.expires_at),
        "decided": c.decided_at.map(rfc3339),
        "cheq": parse(&c.cheq),
        "decision": c.decision.as_deref().map(parse),
        "result_status": c.result_status,
        "jwks": host.cheq_jwks(),
    })))
}

/// `PUT /admin/end-users/{name}` with `{"password": "…"}`.
#[utoipa::path(put, summary = "Sets an end user's password", description = "An end user of the built-in confirmation server; the password is hashed with Argon2id.", path = "/admin/end-users/{name}", tag = "Admin", params(("name" = String, Path, min_length = 1, max_length = 128, example = "alice", description = "The end user's name: 1 to 128 printable characters")),
    request_body = schemas::EndUserPassword,
    responses(
        (status = 204, description = "Set"),
        (status = 400, description = "`invalid_end_user`, `invalid_json`, `invalid_request`", body = schemas::ErrorBody),
        (status = 409, description = "`quota_exceeded`: the tenant has `maxEndUsers` end users (a new name is refused; a password of an existing one can always be set)", body = schemas::ErrorBody),
        (status = 503, description = "`busy`: the tenant's share of the password-hashing slots is in use, refused at once; `storage_failed`", body = schemas::ErrorBody, headers(("Retry-After" = u64, description = "Seconds"))),
    ))]
pub(super) async fn put_end_user(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    check_end_user(&name)?;
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Body {
        password: String,
    }
    let body: Body = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request("invalid_json", format!("the body must be {{\"password\": \"…\"}}: {e}")))?;
    host.put_end_user(caller.principal()?, &caller.tenant, &name, &body.password).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `DELETE /admin/end-users/{name}`.
#[utoipa::path(delete, summary = "Deletes an end user", description = "The end user can no longer log in to the confirmation page.", path = "/admin/end-users/{name}", tag = "Admin", params(("name" = String, Path, min_length = 1, max_length = 128, example = "alice", description = "The end user's name: 1 to 128 printable characters")), responses(
    (status = 204, description = "Deleted, with the end user's sessions"),
    (status = 404, description = "`not_found`: no such end user", body = schemas::ErrorBody),
    schemas::StorageFailed,
))]
pub(super) async fn delete_end_user(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    host.delete_end_user(caller.principal()?, &caller.tenant, &name)?;
    Ok(StatusCode::NO_CONTENT)
}

// The built-in confirmation server.

/// The transaction a resource URI names, if it is one of this tenant's on
/// this server.
fn resource_id(options: &ApiOptions, tenant: &str, resource_uri: &str) -> Option<String> {
    let prefix = format!("{}/cheq/transactions/", root(options, tenant));
    let id = resource_uri.strip_prefix(&prefix)?;
    (!id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')).then(|| id.to_string())
}

/// The resource URIs a user application passed to the confirmation URI, in
/// `text`, a query or a body: a form with the field `resource_uri`
/// (Plinth's) or `resource uri` (the URI pack's key, `resource%20uri=` or
/// `resource+uri=`), or — a text with no `=` and no `&` — the resource URI
/// itself, percent-encoded or not (the draft's `POST {confirmation
/// uri}?{resource uri}`, or a body that is the URI).
fn passed_in(text: &str) -> Vec<String> {
    let text = text.trim();
    if text.is_empty() {
        return Vec::new();
    }
    if !text.contains(['=', '&']) {
        return form(text.as_bytes()).into_iter().map(|(uri, _)| uri).collect();
    }
    form(text.as_bytes())
        .into_iter()
        .filter(|(key, _)| key == "resource_uri" || key == RESOURCE_URI)
        .map(|(_, uri)| uri)
        .collect()
}

/// The resource URI a user application passed to the confirmation URI, in
/// any form [`passed_in`] reads in the query or the body, or as the
/// `"resource uri"` of a JSON body (the URI pack itself). Two different
/// ones are refused rather than one picked (`Err`: why, for the page).
fn passed_resource_uri(query: Option<&str>, headers: &HeaderMap, body: &[u8]) -> Result<String, &'static str> {
    let mut uris = passed_in(query.unwrap_or(""));
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("application/json"));
    if json {
        let pack: Value = serde_json::from_slice(body).unwrap_or_default();
        uris.extend([RESOURCE_URI, "resource_uri"].iter().filter_map(|k| pack[k].as_str().map(str::to_string)));
    } else {
        uris.extend(passed_in(&String::from_utf8_lossy(body)));
    }
    uris.sort();
    uris.dedup();
    match &uris[..] {
        [uri] => Ok(uri.clone()),
        [] => Err("No resource URI came with this request"),
        _ => Err("This request names more than one resource URI"),
    }
}

/// `GET`/`POST {confirmation uri}` with the resource URI (the forms
/// [`passed_resource_uri`] reads): the login page, or for a logged-in end
/// user the confirmation page.
#[utoipa::path(get, summary = "The built-in confirmation server's page (its confirmation URI)", description = "With the resource URI — `?resource_uri=`, the URI pack's `resource uri`, or the draft's `?{resource uri}` — the login page, or for a logged-in end user the confirmation page. `POST` takes the same in the body.", path = "/cheq/confirm", tag = "CHEQ", operation_id = "confirm_page",
    params(("resource_uri" = Option<String>, Query, description = "The resource URI (or the draft's `?{resource uri}`: the query is the URI itself)")),
    responses(
        (status = 200, description = "The login page, or for a logged-in end user the confirmation page", content_type = "text/html", body = String),
        (status = 400, description = "No resource URI, two, or one of another server", content_type = "text/html", body = String),
        (status = 403, description = "The call was made for another end user", content_type = "text/html", body = String),
        (status = 404, description = "No such transaction", content_type = "text/html", body = String),
        (status = 409, description = "Already decided", content_type = "text/html", body = String),
        (status = 410, description = "Expired", content_type = "text/html", body = String),
    ))]
pub(super) async fn confirm_page(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Extension(options): Extension<Arc<ApiOptions>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let found = passed_resource_uri(query.as_deref(), &headers, &body).and_then(|uri| {
        let id = resource_id(&options, &caller.tenant, &uri)
            .ok_or("This confirmation server confirms the calls of this server only")?;
        Ok((uri, id))
    });
    let (resource_uri, id) = match found {
        Ok(found) => found,
        Err(why) => {
            let said = Paragraph::of(format!("{why}: open the confirmation link the application gave you."));
            return notice(&options, StatusCode::BAD_REQUEST, "Nothing to confirm", vec![said]);
        }
    };
    match login::session_of(&host, &headers, &caller.tenant) {
        None => login::login_page(&options, &caller.tenant, &headers, &login::Next::Confirm(resource_uri), None),
        Some(session) => confirmation_page(&host, &options, &caller.tenant, &session, &id),
    }
}

/// `POST cheq/decide`: the end user's Accept or Reject on the confirmation
/// page. Needs the session and the page's form token, and the end user the
/// call was made for.
#[utoipa::path(post, summary = "The end user's Accept or Reject", description = "From the confirmation page: needs the session, the page's form token, and the end user the call was made for.", path = "/cheq/decide", tag = "CHEQ", operation_id = "decide",
    request_body(content = schemas::DecisionForm, content_type = "application/x-www-form-urlencoded"),
    responses(
        (status = 200, description = "Decided: what came of it", content_type = "text/html", body = String),
        (status = 400, description = "Neither accept nor reject", content_type = "text/html", body = String),
        (status = 401, description = "Not logged in", content_type = "text/html", body = String),
        (status = 403, description = "Without the page's form token, or the call is another end user's, or not confirmed", content_type = "text/html", body = String),
        (status = 404, description = "No such transaction", content_type = "text/html", body = String),
        (status = 409, description = "Already decided", content_type = "text/html", body = String),
        (status = 410, description = "Expired, or the version was retired", content_type = "text/html", body = String),
        (status = 422, description = "A private value does not fit: asked again", content_type = "text/html", body = String),
        (status = 503, description = "The decision could not be recorded", content_type = "text/html", body = String),
    ))]
pub(super) async fn decide(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Extension(options): Extension<Arc<ApiOptions>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let fields = form(&body);
    let session = match login::posted_form(&host, &options, &caller.tenant, &headers, &fields) {
        Ok(session) => session,
        Err(refusal) => {
            let (title, said) = match refusal {
                login::FormRefusal::NotLoggedIn => {
                    ("Log in first", "You are not logged in: open the confirmation link again.")
                }
                login::FormRefusal::Elsewhere => {
                    ("Not confirmed", "This request did not come from the confirmation page. Nothing was decided.")
                }
                login::FormRefusal::WithoutToken => (
                    "Not confirmed",
                    "This request did not come from the confirmation page (its form token is missing or wrong). Nothing was decided.",
                ),
            };
            return notice(&options, refusal.status(), title, vec![Paragraph::of(said)]);
        }
    };
    let id = field(&fields, "transaction").unwrap_or("");
    let c = match host.confirmation(&caller.tenant, id) {
        Ok(Some(c)) => c,
        _ => return unknown_confirmation(&options),
    };
    if c.end_user != session.user {
        return other_user_page(&options, &session);
    }
    match field(&fields, "decision") {
        Some("accept") => {
            let private: Map<String, Value> = fields
                .iter()
                .filter_map(|(k, v)| Some((k.strip_prefix("private.")?.to_string(), Value::String(v.clone()))))
                .collect();
            // A private value that does not fit is asked again, before the
            // transaction is spent.
            if let Err(InvokeError::Input(e)) = host.confirmed_input(&c, &private) {
                let said = vec![Paragraph::of(e.to_string()).id("problem"), Paragraph::of("Go back and correct it.")];
                return notice(&options, StatusCode::UNPROCESSABLE_ENTITY, "Check what you entered", said);
            }
            match host.accept_as_end_user(&caller.tenant, id, &session.user) {
                Ok((c, confirmed)) => {
                    let name = operation(&c);
                    let status = complete(&host, c, confirmed, private).await;
                    let outcome = if status < 300 { "It ran" } else { "It was confirmed, but did not succeed" };
                    let said = Paragraph::new()
                        .id("outcome")
                        .text("You confirmed ")
                        .strong(name)
                        .text(format!(". {outcome}; the agent receives the answer."));
                    notice(&options, StatusCode::OK, "Confirmed", vec![said])
                }
                Err(e) => decision_refused(&options, e),
            }
        }
        Some("reject") => {
            let evidence =
                json!({ "by": format!("end-user:{}", session.user), "via": "confirmation page", "at": unix_now() });
            match host.reject_confirmation(&caller.tenant, id, evidence) {
                Ok(()) => {
                    let said = Paragraph::new()
                        .id("outcome")
                        .text("You rejected ")
                        .strong(operation(&c))
                        .text(". It did not run.");
                    notice(&options, StatusCode::OK, "Rejected", vec![said])
                }
                Err(e) => decision_refused(&options, e),
            }
        }
        _ => {
            notice(&options, StatusCode::BAD_REQUEST, "Not confirmed", vec![Paragraph::of("Choose Accept or Reject.")])
        }
    }
}

/// A plain page of the confirmation server.
fn notice(options: &ApiOptions, status: StatusCode, title: &str, paragraphs: Vec<Paragraph>) -> Response {
    pages::notice(status, Frame::new(&options.public_url, Product::Confirmation, title), paragraphs)
}

fn unknown_confirmation(options: &ApiOptions) -> Response {
    let said = Paragraph::of("There is no such confirmation.");
    notice(options, StatusCode::NOT_FOUND, "Unknown confirmation", vec![said])
}

fn decision_refused(options: &ApiOptions, e: DecideError) -> Response {
    let message = e.to_string();
    let status = ApiError::from(e).status();
    notice(options, status, "Not confirmed", vec![Paragraph::of(message).id("problem")])
}

fn operation(c: &StoredConfirmation) -> String {
    c.cheq_object()["operation name"].as_str().unwrap_or("the call").to_string()
}

fn other_user_page(options: &ApiOptions, session: &PageSession) -> Response {
    let said = Paragraph::new()
        .id("problem")
        .text("This call was made for another user; you are logged in as ")
        .strong(&session.user)
        .text(". Only the user it was made for can confirm it.");
    notice(options, StatusCode::FORBIDDEN, "Not yours to confirm", vec![said])
}

/// The confirmation page: what the agent asks, what the tool says of it,
/// the inputs, Accept and Reject.
#[derive(Template)]
#[template(path = "pages/cheq_confirm.html")]
struct ConfirmationPage {
    frame: Frame,
    name: String,
    user: String,
    description: Revealed,
    explanation: Option<Revealed>,
    facts: Vec<FactRow>,
    /// The accounts the call acts with (its version's `[[authorization]]`):
    /// each provider's display name.
    accounts: Vec<String>,
    rows: Vec<ParameterRow>,
    private: Vec<PrivateField>,
    any_hidden: bool,
    action: String,
    id: String,
    form_token: String,
    expires: String,
}

/// A fact the tool's `describe` gave.
struct FactRow {
    name: String,
    label: Revealed,
    value: Revealed,
}

/// An input the agent gave.
struct ParameterRow {
    name: String,
    words: String,
    value: Revealed,
    description: Revealed,
}

/// A private input the end user types.
struct PrivateField {
    name: String,
    words: String,
    description: Revealed,
}

fn confirmation_page(host: &AppState, options: &ApiOptions, tenant: &str, session: &PageSession, id: &str) -> Response {
    let c = match host.confirmation(tenant, id) {
        Ok(Some(c)) => c,
        _ => return unknown_confirmation(options),
    };
    if c.end_user != session.user {
        return other_user_page(options, session);
    }
    let object = c.cheq_object();
    let name = object["operation name"].as_str().unwrap_or("");
    match TxState::of(&c, unix_now()) {
        TxState::Pending => {}
        TxState::Expired => {
            let said = Paragraph::of(format!("This request to {name} expired; it did not run.")).id("problem");
            return notice(options, StatusCode::GONE, "Expired", vec![said]);
        }
        decided => {
            let said = Paragraph::of(format!("This request to {name} was already {}.", decided.as_str())).id("problem");
            return notice(options, StatusCode::CONFLICT, "Already decided", vec![said]);
        }
    }
    let mut rows = Vec::new();
    let mut private = Vec::new();
    let mut any_hidden = false;
    for parameter in object["inputs"]["parameters"].as_array().into_iter().flatten() {
        let pname = parameter["parameter name"].as_str().unwrap_or("");
        let description = Revealed::new(parameter["parameter description"].as_str().unwrap_or(""));
        if parameter["private"] == true {
            private.push(PrivateField { name: pname.to_string(), words: as_words(pname), description });
            continue;
        }
        let value = match &parameter["parameter value"] {
            Value::String(s) => s.clone(),
            Value::Null => "(not given)".to_string(),
            other => other.to_string(),
        };
        any_hidden |= crate::cheq::has_hidden(&value);
        rows.push(ParameterRow {
            name: pname.to_string(),
            words: as_words(pname),
            value: Revealed::new(&value),
            description,
        });
    }
    // What the tool said of this call (its `describe` export), signed into
    // the CHEQ: its explanation and facts, marked as the tool's words.
    let facts = object["facts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|fact| {
            let name = fact["fact name"].as_str().unwrap_or("");
            FactRow {
                name: name.to_string(),
                label: Revealed::new(name),
                value: Revealed::new(fact["fact value"].as_str().unwrap_or("")),
            }
        })
        .collect();
    // The accounts it will act with: the person sees whose grant the
    // confirmed call uses (docs/authorization.md, "With CHEQ").
    let accounts = host
        .registry()
        .get(&c.tool_id)
        .and_then(|tool| tool.version(c.version))
        .map(|version| {
            version.manifest.authorization.iter().map(|need| provider_name(host, tenant, &need.provider)).collect()
        })
        .unwrap_or_default();
    let page = ConfirmationPage {
        frame: Frame::new(&options.public_url, Product::Confirmation, format!("Confirm: {name}")),
        name: name.to_string(),
        user: session.user.clone(),
        description: Revealed::new(object["operation description"].as_str().unwrap_or("")),
        explanation: object["explanation"].as_str().map(Revealed::new),
        facts,
        accounts,
        rows,
        private,
        any_hidden,
        action: format!("{}/cheq/decide", root(options, tenant)),
        id: id.to_string(),
        form_token: session.form_token.clone(),
        expires: rfc3339(c.expires_at),
    };
    pages::page(StatusCode::OK, &page)
}

/// The CHEQ endpoints's operations, merged into the OpenAPI document
/// (`openapi.rs`).
#[derive(utoipa::OpenApi)]
#[openapi(paths(
    get_transaction,
    decide_transaction,
    get_result,
    confirm_page,
    decide,
    evidence,
    put_end_user,
    delete_end_user,
    get_confirmation_server,
    put_confirmation_server,
    delete_confirmation_server,
    get_policy,
    put_policy,
    delete_policy,
))]
pub(super) struct Doc;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_answer_never_says_a_retry_may_work() {
        let mut a2t = json!({"error": {"code": "tool_error", "canRetry": true, "retryAfterMs": 2000}});
        final_answer(&mut a2t);
        assert_eq!(a2t, json!({"error": {"code": "tool_error", "canRetry": false}}));
        let mut otc = json!({"result": {"success": false, "error": {"message": "busy", "can_retry": true}}});
        final_answer(&mut otc);
        assert_eq!(otc["result"]["error"]["can_retry"], false);
        let mut outputs = json!({"output_parameters": [{"name": "state", "value": {"canRetry": true}}]});
        let kept = outputs.clone();
        final_answer(&mut outputs);
        assert_eq!(outputs, kept, "the tool's outputs are its own");
    }
}
