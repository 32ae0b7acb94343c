//! The API: a person's messages, for the person their bearer token names
//! and the scopes it holds; and the endpoints the hostile tool's tests use
//! (headers echoed, a redirect, a collector).

use crate::Inbox;
use crate::jwt::Issuer;
use crate::params::Params;
use crate::seen::Noted;
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use serde_json::{Value, json};

/// The scope that reads messages.
pub const READ: &str = "inbox.read";
/// The scope that changes them.
pub const WRITE: &str = "inbox.write";
/// The longest URL `/v1/redirect` sends to.
const MAX_REDIRECT_BYTES: usize = 2048;

/// Whom a valid token is for.
#[derive(Debug, Clone)]
pub(crate) struct Caller {
    pub(crate) user: String,
    pub(crate) scopes: Vec<String>,
    /// `jwt` or `opaque`.
    pub(crate) token: &'static str,
}

impl Caller {
    fn noted(&self) -> Noted {
        Noted { user: Some(self.user.clone()), scopes: self.scopes.clone(), token: Some(self.token), body: None }
    }
}

/// Why the API refused: the one place that turns a refusal into a status,
/// a `WWW-Authenticate` challenge (RFC 6750 §3) and an error body.
#[derive(Debug)]
pub(crate) enum ApiError {
    /// No bearer token.
    NoToken,
    /// A token that is not valid here, and why.
    InvalidToken(String),
    /// A valid token without the scope.
    InsufficientScope(Caller, &'static str),
    /// No such message of the caller's.
    NotFound(Caller),
    /// A request the API cannot read.
    BadRequest(String),
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, challenge, code, message, noted) = match self {
            ApiError::NoToken => (
                StatusCode::UNAUTHORIZED,
                Some(r#"Bearer realm="fake-inbox""#.to_string()),
                "no_token",
                "send the person's access token: Authorization: Bearer TOKEN".to_string(),
                None,
            ),
            ApiError::InvalidToken(why) => (
                StatusCode::UNAUTHORIZED,
                Some(format!(
                    r#"Bearer realm="fake-inbox", error="invalid_token", error_description="{}""#,
                    quoted(&why)
                )),
                "invalid_token",
                why,
                None,
            ),
            ApiError::InsufficientScope(caller, scope) => (
                StatusCode::FORBIDDEN,
                Some(format!(r#"Bearer realm="fake-inbox", error="insufficient_scope", scope="{scope}""#)),
                "insufficient_scope",
                format!("this needs the scope {scope}, which the token does not hold"),
                Some(caller.noted()),
            ),
            ApiError::NotFound(caller) => (
                StatusCode::NOT_FOUND,
                None,
                "not_found",
                "the person has no message with this id".to_string(),
                Some(caller.noted()),
            ),
            ApiError::BadRequest(why) => (StatusCode::BAD_REQUEST, None, "bad_request", why, None),
        };
        let mut response = (status, Json(json!({"error": {"code": code, "message": message}}))).into_response();
        if let Some(value) = challenge.and_then(|c| HeaderValue::from_str(&c).ok()) {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, value);
        }
        if let Some(noted) = noted {
            response.extensions_mut().insert(noted);
        }
        response
    }
}

/// `text` fit for a quoted string in a header: printable ASCII, no quotes
/// or backslashes, at most 200 characters.
fn quoted(text: &str) -> String {
    text.chars().filter(|c| (' '..='~').contains(c) && *c != '"' && *c != '\\').take(200).collect()
}

pub(crate) fn routes() -> axum::Router<Inbox> {
    axum::Router::new()
        .route("/v1/messages", get(list))
        .route("/v1/messages/{id}", get(message))
        .route("/v1/messages/{id}/read", post(mark_read))
        .route("/v1/echo-headers", get(echo_headers))
        .route("/v1/redirect", get(redirect))
        .route("/collect", any(collect))
}

impl Inbox {
    /// The caller of a request that needs `scope`: its bearer token valid
    /// (a JWT from the configured issuer, or the built-in provider's opaque
    /// token) and holding `scope`.
    async fn caller(&self, headers: &HeaderMap, scope: &'static str) -> Result<Caller, ApiError> {
        let Some(value) = headers.get(header::AUTHORIZATION) else { return Err(ApiError::NoToken) };
        let value =
            value.to_str().map_err(|_| ApiError::InvalidToken("the Authorization header is not text".into()))?;
        let token = match value.split_once(' ') {
            Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty() => token.trim(),
            _ => return Err(ApiError::InvalidToken("the Authorization header is not `Bearer TOKEN`".into())),
        };
        let caller = match (&self.0.issuer, &self.0.provider) {
            (Some(issuer), _) if Issuer::looks_like_jwt(token) => issuer.verify(token).await,
            (_, Some(provider)) => provider.access_token(token).ok_or_else(|| "the token is not valid".to_string()),
            _ => Err("the token is not valid".to_string()),
        }
        .map_err(ApiError::InvalidToken)?;
        if !caller.scopes.iter().any(|s| s == scope) {
            return Err(ApiError::InsufficientScope(caller, scope));
        }
        Ok(caller)
    }
}

/// A JSON answer for `caller`, noted in the record.
fn answer(caller: &Caller, body: Value) -> Response {
    let mut response = Json(body).into_response();
    response.extensions_mut().insert(caller.noted());
    response
}

/// `GET /v1/messages[?unread=true]`.
async fn list(State(inbox): State<Inbox>, headers: HeaderMap, RawQuery(query): RawQuery) -> Result<Response, ApiError> {
    let caller = inbox.caller(&headers, READ).await?;
    let params =
        Params::parse(query.unwrap_or_default().as_bytes()).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let unread_only = match params.get("unread") {
        None | Some("false") => false,
        Some("true") => true,
        Some(_) => return Err(ApiError::BadRequest("`unread` is `true` or `false`".into())),
    };
    Ok(answer(&caller, json!({ "messages": inbox.0.mailbox.list(&caller.user, unread_only) })))
}

/// `GET /v1/messages/{id}`.
async fn message(State(inbox): State<Inbox>, headers: HeaderMap, Path(id): Path<String>) -> Result<Response, ApiError> {
    let caller = inbox.caller(&headers, READ).await?;
    match inbox.0.mailbox.get(&caller.user, &id) {
        Some(message) => Ok(answer(&caller, message)),
        None => Err(ApiError::NotFound(caller)),
    }
}

/// `POST /v1/messages/{id}/read`.
async fn mark_read(
    State(inbox): State<Inbox>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let caller = inbox.caller(&headers, WRITE).await?;
    match inbox.0.mailbox.mark_read(&caller.user, &id) {
        Some(message) => Ok(answer(&caller, message)),
        None => Err(ApiError::NotFound(caller)),
    }
}

/// `GET /v1/echo-headers`: the request's headers, as a JSON object (a
/// header given more than once, its values joined by `, `). What a tool
/// could learn from an API that reflects what it was sent.
async fn echo_headers(headers: HeaderMap) -> Json<Value> {
    let mut echoed = serde_json::Map::new();
    for (name, value) in &headers {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        match echoed.get_mut(name.as_str()) {
            Some(Value::String(seen)) => *seen = format!("{seen}, {value}"),
            _ => drop(echoed.insert(name.to_string(), Value::String(value))),
        }
    }
    Json(json!({ "headers": echoed }))
}

/// `GET /v1/redirect?to=URL`: `307` to `URL` (an absolute http(s) URL).
async fn redirect(RawQuery(query): RawQuery) -> Result<Response, ApiError> {
    let params =
        Params::parse(query.unwrap_or_default().as_bytes()).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let to = params.get("to").ok_or_else(|| ApiError::BadRequest("`to` is missing".into()))?;
    let fits = to.len() <= MAX_REDIRECT_BYTES
        && url::Url::parse(to).is_ok_and(|u| matches!(u.scheme(), "http" | "https"))
        && HeaderValue::from_str(to).is_ok();
    if !fits {
        return Err(ApiError::BadRequest("`to` is not an absolute http(s) URL".into()));
    }
    Ok((StatusCode::TEMPORARY_REDIRECT, [(header::LOCATION, to.to_string())]).into_response())
}

/// `/collect`, any method: takes what it is sent (kept in the record) and
/// answers `204`.
async fn collect(body: Bytes) -> Response {
    let mut response = StatusCode::NO_CONTENT.into_response();
    response.extensions_mut().insert(Noted::body(&body));
    response
}
