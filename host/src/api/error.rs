//! The one place where errors become HTTP responses.
//!
//! Every error body is `{"error": {"code": "snake_case", "message": "…", …}}`
//! plus fields a caller can act on (`parameter`, the tool-error fields).
//! Messages never carry host internals.

use crate::cheq::ConditionError;
use crate::host::{ChangeError, DecideError, DeployError, InvokeError, JwksError, LoginError};
use crate::invocation::{InputError, OutputError, ToolError};
use crate::package::PackageError;
use crate::runtime::CallError;
use crate::signature::DeriveError;
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

    /// `500 storage_failed`: the data dir refused a write; nothing changed.
    pub fn storage_failed(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "storage_failed", message)
    }

    /// `503 busy` with `Retry-After: 1`.
    fn busy(message: String) -> Self {
        let mut error = Self::new(StatusCode::SERVICE_UNAVAILABLE, "busy", message);
        error.retry_after_secs = Some(1);
        error
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
            (StatusCode::SERVICE_UNAVAILABLE, Some(e.retry_after_ms.unwrap_or(1000).div_ceil(1000).max(1)))
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
    fn from(e: InvokeError) -> Self {
        match e {
            InvokeError::UnknownTool(_) | InvokeError::UnknownVersion { .. } => ApiError::not_found(e.to_string()),
            InvokeError::Retired(_) => ApiError::new(StatusCode::GONE, "version_retired", e.to_string()),
            InvokeError::Input(e) => e.into(),
            InvokeError::Call(CallError::Timeout(_)) => {
                ApiError::new(StatusCode::GATEWAY_TIMEOUT, "tool_timeout", e.to_string())
            }
            InvokeError::Call(CallError::ResourceExhausted) => {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "tool_resource_exhausted", e.to_string())
            }
            InvokeError::Call(CallError::Trapped(_)) => {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "tool_trapped", e.to_string())
            }
            InvokeError::Call(CallError::Busy) | InvokeError::Busy(_) => ApiError::busy(e.to_string()),
            InvokeError::RateLimited { retry_after, .. } => {
                let mut error = ApiError::new(StatusCode::TOO_MANY_REQUESTS, "rate_limited", e.to_string());
                error.retry_after_secs = Some(retry_after.as_millis().div_ceil(1000).max(1) as u64);
                error
            }
            InvokeError::Output(OutputError::Invalid(_)) => {
                ApiError::new(StatusCode::BAD_GATEWAY, "invalid_tool_output", e.to_string())
            }
            InvokeError::Output(OutputError::TooLarge(_)) => {
                ApiError::new(StatusCode::BAD_GATEWAY, "output_too_large", e.to_string())
            }
            InvokeError::OutboundDenied(_) => ApiError::new(StatusCode::BAD_GATEWAY, "outbound_denied", e.to_string()),
            // The front doors answer a pending call with its URI pack
            // before it gets here; this is only a fallback.
            InvokeError::ConfirmationPending(_) => {
                ApiError::new(StatusCode::ACCEPTED, "confirmation_pending", e.to_string())
            }
            InvokeError::EndUserRequired(_) => ApiError::bad_request("end_user_required", e.to_string()),
            InvokeError::CannotWait(_) => ApiError::bad_request("confirmation_cannot_wait", e.to_string()),
            InvokeError::Storage(_) => {
                tracing::error!(error = %e, "a call could not be recorded");
                ApiError::storage_failed(
                    "the call could not be recorded (is the data disk full?); the tool did not run",
                )
            }
        }
    }
}

impl From<DeployError> for ApiError {
    fn from(e: DeployError) -> Self {
        match &e {
            DeployError::Store(_) => {
                tracing::error!(error = %e, "deploy failed in the store");
                ApiError::storage_failed("the tool could not be stored (is the data disk full?); nothing was deployed")
            }
            DeployError::Package(PackageError::Signature(DeriveError::Confirmation(
                condition @ ConditionError::TooCostly(_),
            ))) => ApiError { message: e.to_string(), ..condition.clone().into() },
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
            DeployError::Busy => ApiError::busy(e.to_string()),
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
        }
    }
}

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
                return ApiError::storage_failed("the confirmation could not be recorded (is the data disk full?)");
            }
        };
        ApiError::new(status, code, e.to_string())
    }
}

impl From<JwksError> for ApiError {
    /// `502`: the external confirmation server's keys could not be had, or
    /// the operator's rules refused its URL.
    fn from(e: JwksError) -> Self {
        let code = match e {
            JwksError::Insecure => "jwks_insecure_url",
            JwksError::Credentials => "jwks_url_credentials",
            JwksError::InternalAddress => "jwks_internal_address",
            JwksError::TooLarge(_) => "jwks_too_large",
            JwksError::Invalid => "jwks_invalid",
            JwksError::Unavailable => "jwks_unavailable",
        };
        ApiError::new(StatusCode::BAD_GATEWAY, code, e.to_string())
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
            ChangeError::Condition(e) => e.into(),
            ChangeError::Store(_) => {
                tracing::error!(error = %e, "a change failed in the store");
                ApiError::storage_failed("the change could not be stored (is the data disk full?); nothing changed")
            }
        }
    }
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
