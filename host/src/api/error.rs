//! The one place where errors become HTTP responses.
//!
//! Every error body is `{"error": {"code": "snake_case", "message": "…", …}}`
//! plus fields a caller can act on (`parameter`, the tool-error fields).
//! Messages never carry host internals.
//!
//! Statuses follow the A2T draft's meaning (docs/a2t.md, "Status codes"):
//! a `4xx` says the request is wrong, or that the call failed in a way the
//! same call would fail again (`422`, with a distinct `error.code`); a `5xx`
//! is temporary — an executor retries it — and carries `Retry-After`.

use crate::cheq::ConditionError;
use crate::host::authorizations::{AuthorizationError, MAX_PROVIDERS_PER_TENANT};
use crate::host::toolsets::ToolsetError;
use crate::host::{
    ChangeError, DecideError, DeployError, InvokeError, JwksError, LoginError, SignInError, State as TxState,
};
use crate::invocation::{InputError, ToolError};
use crate::package::PackageError;
use crate::runtime::CallError;
use crate::signature::DeriveError;
use crate::store::StoreError;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

/// An error response.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    fields: Vec<(String, Value)>,
    retry_after_secs: Option<u64>,
}

impl ApiError {
    /// An error with a status, a code and a message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError { status, code, message: message.into(), fields: Vec::new(), retry_after_secs: None }
    }

    /// `400` with a code.
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    /// `503 storage_failed` with `Retry-After`: the data dir refused a read
    /// or write; nothing changed, and the same request may work once the
    /// store recovers (when is not known: the header is a hint).
    pub fn storage_failed(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "storage_failed", message).retry_after(STORAGE_RETRY_SECS)
    }

    /// `500 internal` with `Retry-After`: Plinth itself failed (a bug, or
    /// the server going down mid-call). `message` is Plinth's own words,
    /// never a lower layer's error text. When a retry may work is not
    /// known: the header is a hint, as for `storage_failed`.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message).retry_after(INTERNAL_RETRY_SECS)
    }

    /// `503 call_in_progress` with `Retry-After: 1`: the call with this id
    /// still runs elsewhere (another replica); the same request again, in a
    /// moment, gets its answer.
    pub fn call_in_progress(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "call_in_progress", message).retry_after(RETRY_SOON_SECS)
    }

    /// `503 busy` with `Retry-After: 1`.
    fn busy(message: String) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "busy", message).retry_after(RETRY_SOON_SECS)
    }

    /// `422`: the tool failed in a way the same call fails again every
    /// time — a permanent failure for this input, which an executor shows
    /// the LLM rather than retries (a `5xx` would be retried forever).
    fn permanent(code: &'static str, message: String) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, code, message)
    }

    /// Sets `Retry-After` (seconds; at least 1).
    pub(super) fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after_secs = Some(secs.max(1));
        self
    }

    /// The answer at the result URI of a transaction that ended without
    /// the tool's answer. Final — polling again never changes it — so never
    /// a `5xx`: `403 confirmation_rejected`, `410 confirmation_expired`,
    /// `410 version_retired`, `422 call_outcome_unknown`.
    pub fn unanswered(state: TxState) -> Self {
        let (code, message) = state.unanswered().unwrap_or(("call_outcome_unknown", "the call's outcome is unknown"));
        let status = match state {
            TxState::Rejected => StatusCode::FORBIDDEN,
            TxState::Expired | TxState::Retired => StatusCode::GONE,
            _ => StatusCode::UNPROCESSABLE_ENTITY,
        };
        Self::new(status, code, message)
    }

    /// `404 not_found`.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// Adds a field to the error object.
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.fields.push((key.to_string(), value.into()));
        self
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The stable snake_case code.
    pub fn code(&self) -> &'static str {
        self.code
    }

    /// What went wrong, in words.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The fields beside `code` and `message` (`parameter`, a tool
    /// error's `canRetry`…).
    pub fn fields(&self) -> &[(String, Value)] {
        &self.fields
    }

    /// When a retry may work, if waiting helps.
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after_secs
    }

    /// This error's status and headers (`Retry-After`, `Plinth-Error-Code`)
    /// on another body: a page for people rather than JSON.
    pub fn onto(self, mut response: Response) -> Response {
        *response.status_mut() = self.status;
        response.headers_mut().insert("plinth-error-code", HeaderValue::from_static(self.code));
        add_retry_after(&mut response, self.retry_after_secs);
        response
    }
}

/// The status a confirmed call's answer is kept and replayed with at the
/// result URI. That answer is final (the call is not run again; a new call
/// needs a new confirmation), so a temporary failure at the time (`5xx`:
/// busy, over the rate, a timeout) becomes `422` with its `error.code`: an
/// executor polling the URI must not retry what will never change.
pub fn settled(status: StatusCode) -> StatusCode {
    if status.is_server_error() { StatusCode::UNPROCESSABLE_ENTITY } else { status }
}

/// `Retry-After` of `busy`, a tool that timed out while it waited, and a
/// tool's own retryable error without a time.
const RETRY_SOON_SECS: u64 = 1;
/// `Retry-After` of `storage_failed` (a hint: when a full or failing disk
/// recovers is not known).
const STORAGE_RETRY_SECS: u64 = 5;
/// `Retry-After` of `internal` (a hint: a restart, or a replica that
/// works, takes a few seconds).
const INTERNAL_RETRY_SECS: u64 = 5;
/// `Retry-After` of `jwks_unavailable`: a failed fetch of a confirmation
/// server's keys is remembered this long by default
/// (`--cheq-jwks-failure-cache-secs`), so an earlier retry gets the same answer.
const JWKS_RETRY_SECS: u64 = 5;

fn add_retry_after(response: &mut Response, secs: Option<u64>) {
    if let Some(secs) = secs {
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
}

impl From<LoginError> for ApiError {
    /// `401 login_failed` (which of name and password is wrong is not
    /// said), `429 login_locked` or `503 login_busy` with `Retry-After`.
    fn from(e: LoginError) -> Self {
        let (status, code) = match &e {
            LoginError::Invalid => (StatusCode::UNAUTHORIZED, "login_failed"),
            LoginError::Locked { .. } => (StatusCode::TOO_MANY_REQUESTS, "login_locked"),
            LoginError::Busy => (StatusCode::SERVICE_UNAVAILABLE, "login_busy"),
            LoginError::Store(_) => {
                tracing::error!(error = %e, "an end user could not be read");
                return ApiError::storage_failed("the login could not be checked; try again");
            }
        };
        let mut error = ApiError::new(status, code, e.to_string());
        error.retry_after_secs = e.retry_after_secs();
        error
    }
}

impl From<SignInError> for ApiError {
    /// `401 unauthorized` (whether the key is unknown, revoked or another
    /// tenant's is not said), `429 login_locked` or `503 login_busy` with
    /// `Retry-After`: a catalog sign-in is throttled as a confirmation-page
    /// login is.
    fn from(e: SignInError) -> Self {
        let (status, code) = match &e {
            SignInError::Invalid => (StatusCode::UNAUTHORIZED, "unauthorized"),
            SignInError::Locked { .. } => (StatusCode::TOO_MANY_REQUESTS, "login_locked"),
            SignInError::Busy => (StatusCode::SERVICE_UNAVAILABLE, "login_busy"),
            SignInError::Store(_) => {
                tracing::error!(error = %e, "a catalog session could not be opened");
                return ApiError::storage_failed("the sign-in could not be recorded; try again");
            }
        };
        let mut error = ApiError::new(status, code, e.to_string());
        error.retry_after_secs = e.retry_after_secs();
        error
    }
}

impl From<InputError> for ApiError {
    fn from(e: InputError) -> Self {
        let error = ApiError::bad_request(e.code, e.message);
        match e.parameter {
            Some(p) => error.with("parameter", p),
            None => error,
        }
    }
}

impl From<ToolError> for ApiError {
    /// `422`, or `503` with `Retry-After` when the tool says a retry may work.
    fn from(e: ToolError) -> Self {
        let (status, retry_after_secs) = if e.can_retry {
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Some(e.retry_after_ms.map_or(RETRY_SOON_SECS, |ms| ms.div_ceil(1000)).max(1)),
            )
        } else {
            (StatusCode::UNPROCESSABLE_ENTITY, None)
        };
        let mut error = ApiError::new(status, "tool_error", e.message.clone());
        if let Value::Object(fields) = serde_json::to_value(&e).unwrap_or_default() {
            error.fields.extend(fields.into_iter().filter(|(k, _)| k != "message"));
        }
        error.retry_after_secs = retry_after_secs;
        error
    }
}

impl From<InvokeError> for ApiError {
    /// Refusals of the request are `4xx`; temporary failures `5xx` with
    /// `Retry-After`; failures the same call repeats (a trap, exhausted
    /// memory, a bad or oversize answer, a denied outbound request, a tool
    /// still computing at its deadline) `422` — see [`InvokeError::is_temporary`].
    fn from(e: InvokeError) -> Self {
        let (code, message) = (e.code(), e.to_string());
        match e {
            InvokeError::UnknownTool(_) | InvokeError::UnknownVersion { .. } => ApiError::not_found(message),
            InvokeError::Retired(_) => ApiError::new(StatusCode::GONE, code, message),
            InvokeError::OutsideToolset(_) => ApiError::new(StatusCode::FORBIDDEN, code, message),
            InvokeError::Input(e) => e.into(),
            // A slow backend may answer in time on the next call.
            InvokeError::Call(CallError::Timeout { computing: false, .. }) => {
                ApiError::new(StatusCode::GATEWAY_TIMEOUT, code, message).retry_after(RETRY_SOON_SECS)
            }
            InvokeError::Call(CallError::Busy) | InvokeError::Busy(_) | InvokeError::OverQuota(_) => {
                ApiError::busy(message)
            }
            // The rate is the tenant's, shared by all its callers: to one
            // caller it is a capacity limit like `busy`, and the draft's
            // executor retries a 5xx where it would give up on a 429.
            InvokeError::RateLimited { retry_after, .. } => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, code, message)
                    .retry_after(retry_after.as_millis().div_ceil(1000) as u64)
            }
            // The same call fails the same way again: a loop loops again, a
            // trap traps again.
            InvokeError::Call(CallError::Timeout { computing: true, .. })
            | InvokeError::Call(CallError::ResourceExhausted)
            | InvokeError::Call(CallError::Trapped(_))
            | InvokeError::Output(_)
            | InvokeError::OutboundDenied(_) => ApiError::permanent(code, message),
            // The front doors answer a pending call with its URI pack
            // before it gets here; this is only a fallback.
            InvokeError::ConfirmationPending(_) => ApiError::new(StatusCode::ACCEPTED, code, message),
            // Likewise: the doors add the links' URLs (`links::authorization_required`).
            InvokeError::AuthorizationRequired { pending, .. } => {
                let providers: Vec<&str> = pending.iter().map(|p| p.provider.as_str()).collect();
                ApiError::new(StatusCode::FORBIDDEN, code, message).with("providers", providers)
            }
            // The provider down or slow, or not configured yet: a retry may work.
            InvokeError::AuthorizationUnavailable(_) => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, code, message).retry_after(RETRY_SOON_SECS)
            }
            InvokeError::EndUserRequired(_)
            | InvokeError::AccountEndUserRequired(_)
            | InvokeError::CannotWait(_)
            | InvokeError::UnknownEndUser { .. } => ApiError::bad_request(code, message),
            // Not a `5xx`: a retry at once finds the same calls waiting, and
            // the draft's executor would retry it blindly; this tells the
            // LLM (or the person) to have the waiting ones decided first.
            InvokeError::TooManyPending { limit, max, .. } => {
                ApiError::new(StatusCode::TOO_MANY_REQUESTS, code, message)
                    .with("limit", limit.quota())
                    .with(limit.quota(), max)
            }
            InvokeError::ConfirmationTooLarge { max, .. } => {
                ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, code, message).with("maxConfirmationBytes", max)
            }
            InvokeError::Internal(_) => {
                tracing::error!(error = %message, "a call was interrupted inside the server");
                ApiError::internal(message)
            }
            InvokeError::Unavailable(_) => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, code, message).retry_after(RETRY_SOON_SECS)
            }
            InvokeError::Storage(_) => {
                tracing::error!(error = %message, "a call could not be recorded");
                ApiError::storage_failed(
                    "the call could not be recorded (the data disk is full, or the database cannot be reached); the tool did not run",
                )
            }
        }
    }
}

impl From<DeployError> for ApiError {
    fn from(e: DeployError) -> Self {
        match &e {
            DeployError::Store(StoreError::Conflict(_)) => ApiError::busy(
                "other replicas kept deploying versions of this tool while this one was deciding its number; nothing was deployed, try again".into(),
            ),
            DeployError::Store(_) => {
                tracing::error!(error = %e, "deploy failed in the store");
                ApiError::storage_failed("the tool could not be stored (the data disk is full, or the database cannot be reached); nothing was deployed")
            }
            DeployError::Package(PackageError::Signature(DeriveError::Confirmation(
                condition @ ConditionError::TooCostly(_),
            ))) => ApiError { message: e.to_string(), ..condition.clone().into() },
            // Every compilation slot stayed taken: nothing was deployed.
            DeployError::Load(crate::runtime::LoadError::Busy) => ApiError::busy(e.to_string()),
            // The server's own trouble compiling, not the component's.
            DeployError::Load(crate::runtime::LoadError::Unavailable(_)) => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "compile_unavailable", e.to_string())
                    .retry_after(RETRY_SOON_SECS)
            }
            DeployError::Package(_) | DeployError::Load(_) => ApiError::bad_request("invalid_component", e.to_string()),
            DeployError::UnknownTenant(_) => ApiError::not_found(e.to_string()),
            DeployError::TooLarge { .. } => {
                ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "quota_exceeded", e.to_string())
            }
            DeployError::TooManyTools { max, .. } => {
                ApiError::new(StatusCode::CONFLICT, "quota_exceeded", e.to_string()).with("maxTools", *max)
            }
            DeployError::TooManyVersions { max, .. } => {
                ApiError::new(StatusCode::CONFLICT, "quota_exceeded", e.to_string()).with("maxVersionsPerTool", *max)
            }
            DeployError::Busy | DeployError::TenantPulling(_) => ApiError::busy(e.to_string()),
            DeployError::Breaking { current, diff, .. } => {
                let breaking: Vec<&crate::signature::Change> = diff.breaking().collect();
                ApiError::new(StatusCode::CONFLICT, "breaking_change", e.to_string())
                    .with("currentVersion", *current)
                    .with("breakingChanges", serde_json::to_value(breaking).unwrap_or_default())
            }
            DeployError::UnexpectedVersion { expected, actual } => {
                ApiError::new(StatusCode::CONFLICT, "version_mismatch", e.to_string())
                    .with("expectedVersion", *expected)
                    .with("actualVersion", *actual)
            }
            DeployError::Untrusted(untrusted) => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "untrusted_component", e.to_string())
                    .with("expectedSigners", serde_json::to_value(&untrusted.expected).unwrap_or_default())
                    .with("found", serde_json::to_value(&untrusted.found).unwrap_or_default())
            }
            DeployError::Pull(pull) => pull_error(pull),
            DeployError::Interrupted => {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "deploy_failed", e.to_string())
            }
        }
    }
}

/// A failed pull. Whose fault it is decides the status: what a retry
/// cannot fix (a refused reference, address or credential, bytes that are
/// not what they claim) is 4xx; an unreachable or slow registry is 5xx,
/// with `Retry-After`, as every 5xx.
fn pull_error(e: &crate::supply::oci::OciError) -> ApiError {
    use crate::supply::oci::OciError as E;
    let (status, code) = match e {
        E::InvalidReference(_) => (StatusCode::BAD_REQUEST, "invalid_reference"),
        E::NotHttps(_) | E::AddressRefused(_) => (StatusCode::FORBIDDEN, "registry_not_allowed"),
        E::NotFound(..) => (StatusCode::NOT_FOUND, "artifact_not_found"),
        E::TooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "quota_exceeded"),
        E::Denied(..) => (StatusCode::UNPROCESSABLE_ENTITY, "registry_denied"),
        E::NotWasm(..) => (StatusCode::UNPROCESSABLE_ENTITY, "not_a_component_artifact"),
        E::DigestMismatch { .. } | E::TagMismatch { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "digest_mismatch"),
        E::TimedOut(..) => {
            return ApiError::new(StatusCode::GATEWAY_TIMEOUT, "registry_timeout", e.to_string())
                .retry_after(REGISTRY_RETRY_SECS);
        }
        E::Unreachable(..) | E::Status(..) => {
            return ApiError::new(StatusCode::BAD_GATEWAY, "registry_failed", e.to_string())
                .retry_after(REGISTRY_RETRY_SECS);
        }
    };
    ApiError::new(status, code, e.to_string())
}

/// `Retry-After` of a registry that could not be reached or was too slow (a hint).
const REGISTRY_RETRY_SECS: u64 = 30;

impl From<DecideError> for ApiError {
    fn from(e: DecideError) -> Self {
        let (status, code) = match &e {
            DecideError::Unknown(_) => (StatusCode::NOT_FOUND, "unknown_transaction"),
            DecideError::Expired => (StatusCode::GONE, "confirmation_expired"),
            DecideError::AlreadyDecided(_) => (StatusCode::CONFLICT, "already_decided"),
            DecideError::Signature(_) => (StatusCode::FORBIDDEN, "invalid_signature"),
            DecideError::Altered(_) => (StatusCode::CONFLICT, "cheq_altered"),
            DecideError::NotConfirmed(_) => (StatusCode::FORBIDDEN, "not_confirmed"),
            DecideError::Jwks(e) => return e.clone().into(),
            DecideError::Retired => (StatusCode::GONE, "version_retired"),
            DecideError::Store(e) => {
                tracing::error!(error = %e, "a confirmation could not be read or written");
                return ApiError::storage_failed(
                    "the confirmation could not be recorded (the data disk is full, or the database cannot be reached)",
                );
            }
        };
        ApiError::new(status, code, e.to_string())
    }
}

impl From<JwksError> for ApiError {
    /// `502`: the external confirmation server's keys could not be had, or
    /// the operator's rules refused its URL. Only `jwks_unavailable` (the
    /// server did not answer) may pass, so only it carries `Retry-After`.
    fn from(e: JwksError) -> Self {
        let code = match e {
            JwksError::Insecure => "jwks_insecure_url",
            JwksError::Credentials => "jwks_url_credentials",
            JwksError::InternalAddress => "jwks_internal_address",
            JwksError::TooLarge(_) => "jwks_too_large",
            JwksError::Invalid => "jwks_invalid",
            JwksError::Unavailable => "jwks_unavailable",
        };
        let error = ApiError::new(StatusCode::BAD_GATEWAY, code, e.to_string());
        if matches!(e, JwksError::Unavailable) { error.retry_after(JWKS_RETRY_SECS) } else { error }
    }
}

impl From<ConditionError> for ApiError {
    /// `400 condition_too_costly` (with the `limit` exceeded) or
    /// `400 invalid_condition`.
    fn from(e: ConditionError) -> Self {
        match &e {
            ConditionError::TooCostly(limit) => {
                ApiError::bad_request("condition_too_costly", e.to_string()).with("limit", limit.name())
            }
            _ => ApiError::bad_request("invalid_condition", e.to_string()),
        }
    }
}

impl From<ChangeError> for ApiError {
    fn from(e: ChangeError) -> Self {
        match e {
            ChangeError::NotFound(message) => ApiError::not_found(message),
            ChangeError::Invalid(message) => ApiError::bad_request("invalid_request", message),
            ChangeError::Conflict(message) => ApiError::new(StatusCode::CONFLICT, "conflict", message),
            ChangeError::Forbidden(message) => ApiError::new(StatusCode::FORBIDDEN, "forbidden", message),
            ChangeError::PinnedByToolsets { message, toolsets } => {
                ApiError::new(StatusCode::CONFLICT, "version_pinned_by_toolset", message).with("toolsets", toolsets)
            }
            ChangeError::Condition(e) => e.into(),
            ChangeError::Busy(message) => ApiError::busy(message),
            ChangeError::QuotaExceeded { message, quota, max } => {
                ApiError::new(StatusCode::CONFLICT, "quota_exceeded", message).with(quota, max)
            }
            ChangeError::Store(_) => {
                tracing::error!(error = %e, "a change failed in the store");
                ApiError::storage_failed(
                    "the change could not be stored (the data disk is full, or the database cannot be reached); nothing changed",
                )
            }
        }
    }
}

impl From<ToolsetError> for ApiError {
    fn from(e: ToolsetError) -> Self {
        let message = e.to_string();
        match e {
            ToolsetError::Invalid(_) => ApiError::bad_request("invalid_toolset", message),
            ToolsetError::UnknownTool(_) => ApiError::new(StatusCode::NOT_FOUND, "toolset_tool_not_found", message),
            ToolsetError::UnknownVersion { .. } => {
                ApiError::new(StatusCode::NOT_FOUND, "toolset_version_not_found", message)
            }
            ToolsetError::Retired(_) => ApiError::new(StatusCode::CONFLICT, "toolset_version_retired", message),
            ToolsetError::Wording { tool, parameter, .. } => ApiError::bad_request("invalid_wording", message)
                .with("tool", tool)
                // A name from the request: cut, as the message cuts it.
                .with("parameter", parameter.map_or(Value::Null, |p| p.chars().take(64).collect::<String>().into())),
            ToolsetError::NotFound(_) => ApiError::new(StatusCode::NOT_FOUND, "toolset_not_found", message),
            ToolsetError::TooMany(_) => ApiError::new(StatusCode::CONFLICT, "quota_exceeded", message),
            ToolsetError::Conflict => ApiError::busy(message),
            ToolsetError::Store(_) => {
                tracing::error!(error = %e, "a toolset change failed in the store");
                ApiError::storage_failed(
                    "the change could not be stored (the data disk is full, or the database cannot be reached); nothing changed",
                )
            }
        }
    }
}

/// `Retry-After` of `provider_failed`: a provider that could not be reached
/// or answered garbage (a hint; its metadata is fetched again then).
const PROVIDER_RETRY_SECS: u64 = 5;

impl From<AuthorizationError> for ApiError {
    /// `400 invalid_provider` (the message names the field), `409
    /// quota_exceeded`, `404 not_found`, `403 not_your_link`, `410
    /// link_gone`, `502 provider_failed` (with `Retry-After`: the message
    /// names the provider, never its raw answer), `503 storage_failed`.
    fn from(e: AuthorizationError) -> Self {
        let message = e.to_string();
        match e {
            AuthorizationError::InvalidProvider(_) => ApiError::bad_request("invalid_provider", message),
            AuthorizationError::TooManyProviders => ApiError::new(StatusCode::CONFLICT, "quota_exceeded", message)
                .with("maxProviders", MAX_PROVIDERS_PER_TENANT),
            AuthorizationError::NotFound(_) => ApiError::not_found(message),
            AuthorizationError::NotYours => ApiError::new(StatusCode::FORBIDDEN, "not_your_link", message),
            AuthorizationError::Gone(_) => ApiError::new(StatusCode::GONE, "link_gone", message),
            AuthorizationError::Provider(_) => {
                ApiError::new(StatusCode::BAD_GATEWAY, "provider_failed", message).retry_after(PROVIDER_RETRY_SECS)
            }
            AuthorizationError::Storage(_) => {
                tracing::error!(error = %message, "an authorization change failed in the store");
                ApiError::storage_failed(
                    "the change could not be stored (the data disk is full, or the database cannot be reached); nothing changed",
                )
            }
        }
    }
}

/// Gives an error answered in plain text, or with no body at all, Plinth's
/// error shape: axum's own refusals (a body over a route's limit, a path
/// parameter that is not UTF-8, a method the route does not take) and
/// rmcp's (Host or Origin not allowed, a missing `Accept`, a body that is
/// not JSON). A refusal (`4xx`) keeps its text: it says what was wrong with
/// the request, in terms of the request. A failure (`5xx`) becomes
/// `internal` with a fixed message and `Retry-After`: its text is a lower
/// layer's error (rmcp writes its internal error into the body), logged
/// for the operator, never sent. Every other answer passes as it is. The
/// router runs every answer through it (`api::router`).
pub async fn as_error_body(response: Response) -> Response {
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let plain = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_none_or(|v| v.to_str().is_ok_and(|v| v.starts_with("text/plain")));
    if !plain {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 4096).await.unwrap_or_default();
    let text = String::from_utf8_lossy(&text).trim().to_string();
    let error = match status {
        StatusCode::FORBIDDEN => ApiError::new(status, "forbidden", text),
        StatusCode::NOT_ACCEPTABLE => ApiError::new(status, "not_acceptable", text),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ApiError::new(status, "unsupported_media_type", text),
        StatusCode::PAYLOAD_TOO_LARGE => {
            ApiError::new(status, "request_too_large", "the request body is larger than this endpoint accepts")
        }
        StatusCode::METHOD_NOT_ALLOWED => ApiError::new(
            status,
            "method_not_allowed",
            "this endpoint does not take this method; the Allow header lists those it takes",
        ),
        _ if status.is_server_error() => {
            tracing::error!(status = status.as_u16(), error = text, "a request failed inside the server");
            ApiError { status, ..ApiError::internal("the server failed to answer this request; retry later") }
        }
        _ => ApiError::new(status, "invalid_request", text),
    };
    let mut error = error.into_response();
    // Keep what the refusal said besides its body (`Allow` on a 405).
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            error.headers_mut().entry(name).or_insert_with(|| value.clone());
        }
    }
    error
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut error = Map::new();
        error.insert("code".into(), self.code.into());
        error.insert("message".into(), self.message.into());
        error.extend(self.fields);
        let mut response = (self.status, axum::Json(json!({ "error": error }))).into_response();
        add_retry_after(&mut response, self.retry_after_secs);
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::invocation::OutputError;
    use std::time::Duration;

    /// A row of the status table in docs/a2t.md.
    struct Row {
        status: u16,
        code: String,
        retry: String,
    }

    fn a2t_table() -> Vec<Row> {
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/a2t.md")).unwrap();
        let table = doc.split("| status | `error.code` | when | retry |").nth(1).expect("the status table");
        table
            .lines()
            .skip(2)
            .take_while(|line| line.starts_with('|'))
            .map(|line| {
                let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
                assert_eq!(cells.len(), 4, "a row has status, code, when, retry: {line}");
                Row {
                    status: cells[0].parse().unwrap_or_else(|_| panic!("not a status: {line}")),
                    code: cells[1].trim_matches('`').to_string(),
                    retry: cells[3].to_string(),
                }
            })
            .collect()
    }

    /// Every error the A2T door's calls and result URI can end in.
    fn sent() -> Vec<ApiError> {
        let mut errors: Vec<ApiError> = crate::invocation::INPUT_ERROR_CODES
            .iter()
            .copied()
            .map(|code| InputError { code, message: String::new(), parameter: None }.into())
            .collect();
        let tool_error = |can_retry| ToolError {
            message: "no".into(),
            developer_message: None,
            can_retry,
            retry_after_ms: None,
            additional_prompt_content: None,
        };
        errors.extend([tool_error(false).into(), tool_error(true).into()]);
        let invoke = [
            InvokeError::UnknownTool("x".into()),
            InvokeError::UnknownVersion { tool_id: uuid::Uuid::nil(), version: 2 },
            InvokeError::Retired("x".into()),
            InvokeError::OutsideToolset("x".into()),
            InvokeError::Call(CallError::Timeout { deadline: Duration::from_secs(1), computing: false }),
            InvokeError::Call(CallError::Timeout { deadline: Duration::from_secs(1), computing: true }),
            InvokeError::Call(CallError::ResourceExhausted),
            InvokeError::Call(CallError::Trapped("x".into())),
            InvokeError::Call(CallError::Busy),
            InvokeError::Busy("x".into()),
            InvokeError::RateLimited { tenant: "t".into(), retry_after: Duration::from_millis(1500) },
            InvokeError::Output(OutputError::Invalid("x".into())),
            InvokeError::Output(OutputError::TooLarge("x".into())),
            InvokeError::OutboundDenied("x".into()),
            InvokeError::EndUserRequired("x".into()),
            InvokeError::CannotWait("x".into()),
            InvokeError::UnknownEndUser { end_user: "x".into() },
            InvokeError::TooManyPending {
                limit: crate::tenancy::ConfirmationLimit::PendingPerEndUser,
                max: 1,
                end_user: "x".into(),
            },
            InvokeError::ConfirmationTooLarge { bytes: 2, max: 1 },
            InvokeError::Storage("x".into()),
            InvokeError::Unavailable("x".into()),
            InvokeError::Internal("x".into()),
        ];
        errors.extend(invoke.into_iter().map(ApiError::from));
        errors.extend(
            [TxState::Rejected, TxState::Expired, TxState::Retired, TxState::Interrupted].map(ApiError::unanswered),
        );
        errors
    }

    #[test]
    fn every_status_in_the_a2t_table_is_what_the_code_sends() {
        let rows = a2t_table();
        assert!(rows.len() >= 40, "docs/a2t.md lost rows of its status table ({} found)", rows.len());
        let sent = sent();
        for error in &sent {
            let (status, code) = (error.status().as_u16(), error.code());
            let row = rows.iter().find(|r| r.status == status && r.code == code);
            let row = row.unwrap_or_else(|| panic!("docs/a2t.md has no row `{status} {code}`"));
            assert_eq!(
                row.retry.contains("`Retry-After"),
                error.retry_after_secs().is_some(),
                "`{status} {code}`: the table and the code disagree on Retry-After"
            );
        }
        for row in &rows {
            // The draft's meaning: 5xx is temporary (retried), anything else not.
            assert_eq!(
                row.retry.starts_with("yes"),
                row.status >= 500,
                "`{} {}`: a 5xx is retried, nothing else is",
                row.status,
                row.code
            );
            // A code the table gives with a status the code never sends.
            if sent.iter().any(|e| e.code() == row.code) {
                assert!(
                    sent.iter().any(|e| e.code() == row.code && e.status().as_u16() == row.status),
                    "docs/a2t.md says `{} {}`, which the code never sends",
                    row.status,
                    row.code
                );
            }
        }
        // Every temporary failure says when to retry.
        for error in sent.iter().filter(|e| e.status().is_server_error()) {
            assert!(error.retry_after_secs().is_some(), "`{}` is a 5xx without Retry-After", error.code());
        }
    }

    #[test]
    fn every_code_in_the_a2t_table_exists_in_the_source() {
        fn source(dir: &std::path::Path, text: &mut String) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    source(&path, text);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    text.push_str(&std::fs::read_to_string(&path).unwrap());
                }
            }
        }
        let mut text = String::new();
        source(std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src")), &mut text);
        for row in a2t_table() {
            assert!(
                text.contains(&format!("\"{}\"", row.code)),
                "docs/a2t.md names `{}`, which no code sends",
                row.code
            );
        }
    }

    #[test]
    fn of_a_confirmation_servers_keys_only_an_unanswered_fetch_may_pass() {
        let unavailable = ApiError::from(JwksError::Unavailable);
        assert_eq!((unavailable.status(), unavailable.retry_after_secs()), (StatusCode::BAD_GATEWAY, Some(5)));
        for refused in [JwksError::Insecure, JwksError::InternalAddress, JwksError::Invalid, JwksError::TooLarge(1)] {
            assert_eq!(ApiError::from(refused).retry_after_secs(), None);
        }
    }

    #[test]
    fn a_kept_answer_is_never_a_5xx() {
        for status in [StatusCode::SERVICE_UNAVAILABLE, StatusCode::GATEWAY_TIMEOUT, StatusCode::INTERNAL_SERVER_ERROR]
        {
            assert_eq!(settled(status), StatusCode::UNPROCESSABLE_ENTITY);
        }
        for status in [StatusCode::OK, StatusCode::UNPROCESSABLE_ENTITY, StatusCode::BAD_REQUEST] {
            assert_eq!(settled(status), status);
        }
    }

    /// An answer as a lower layer gave it, in plain text.
    fn plain(status: StatusCode, text: &'static str) -> Response {
        Response::builder()
            .status(status)
            .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
            .body(axum::body::Body::from(text))
            .unwrap()
    }

    async fn shaped(response: Response) -> (StatusCode, Option<String>, Value) {
        let response = as_error_body(response).await;
        let status = response.status();
        let retry = response.headers().get(header::RETRY_AFTER).map(|v| v.to_str().unwrap().to_string());
        let body = axum::body::to_bytes(response.into_body(), 1 << 16).await.unwrap();
        (status, retry, serde_json::from_slice(&body).unwrap())
    }

    #[tokio::test]
    async fn a_lower_layers_failure_is_answered_without_its_text_and_with_retry_after() {
        // What rmcp answers when it fails inside: its error, verbatim.
        let failed = plain(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Encounter an error when serialize json response: key must be a string at /srv/plinth/data",
        );
        let (status, retry, body) = shaped(failed).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(retry.as_deref(), Some("5"));
        assert_eq!(body["error"]["code"], "internal");
        assert_eq!(body["error"]["message"], "the server failed to answer this request; retry later");
        // Any 5xx, with a body or none.
        let empty = Response::builder().status(StatusCode::BAD_GATEWAY).body(axum::body::Body::empty()).unwrap();
        let (status, retry, body) = shaped(empty).await;
        assert_eq!(
            (status, retry.as_deref(), &body["error"]["code"]),
            (StatusCode::BAD_GATEWAY, Some("5"), &json!("internal"))
        );
    }

    #[tokio::test]
    async fn a_refusal_keeps_its_reason() {
        let refused = plain(StatusCode::FORBIDDEN, "Forbidden: Host header is not allowed");
        let (status, retry, body) = shaped(refused).await;
        assert_eq!((status, retry), (StatusCode::FORBIDDEN, None));
        assert_eq!(body["error"], json!({ "code": "forbidden", "message": "Forbidden: Host header is not allowed" }));
        let refused = plain(StatusCode::BAD_REQUEST, "Bad Request: Unsupported MCP-Protocol-Version: 1999-01-01");
        let (_, _, body) = shaped(refused).await;
        assert_eq!(body["error"]["code"], "invalid_request");
        assert_eq!(body["error"]["message"], "Bad Request: Unsupported MCP-Protocol-Version: 1999-01-01");
        // A JSON answer is Plinth's (or rmcp's JSON-RPC) already: untouched.
        let json_answer = ApiError::not_found("no such tool").into_response();
        let (status, _, body) = shaped(json_answer).await;
        assert_eq!((status, &body["error"]["code"]), (StatusCode::NOT_FOUND, &json!("not_found")));
    }
}
