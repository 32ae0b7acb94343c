//! CORS for browser-based MCP clients, off unless the operator lists their
//! origins (`--cors-origin`): the MCP endpoint and the OAuth endpoints a
//! script calls (metadata, token, registration, revocation) answer a listed
//! origin's preflight and name it in `Access-Control-Allow-Origin`. Every
//! other origin, and every other path, gets no CORS header at all, so a
//! browser keeps other sites' scripts out. The authorization page is a
//! navigation, never a script's request: it has none.

use super::ApiOptions;
use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// Whether `path` (under a platform root, as routed) is one a browser
/// client calls from script.
fn scripted(path: &str) -> bool {
    path == "/mcp"
        || path.starts_with("/.well-known/oauth-")
        || matches!(path, "/oauth/token" | "/oauth/register" | "/oauth/revoke")
}

/// What a preflight may ask for.
const METHODS: &str = "GET, POST, DELETE";
const HEADERS: &str =
    "authorization, content-type, accept, mcp-protocol-version, mcp-method, mcp-name, mcp-session-id, last-event-id";
/// What a script may read of an answer besides the simple headers.
const EXPOSED: &str = "www-authenticate, mcp-session-id, mcp-protocol-version, retry-after";

pub async fn cors(request: Request, next: Next) -> Response {
    let options = request.extensions().get::<Arc<ApiOptions>>().cloned();
    let origin = request.headers().get(header::ORIGIN).cloned();
    let allowed = match (&options, &origin) {
        (Some(options), Some(origin)) if scripted(request.uri().path()) => {
            options.cors_origins.iter().any(|o| o.as_bytes() == origin.as_bytes())
        }
        _ => false,
    };
    let Some(origin) = origin.filter(|_| allowed) else { return next.run(request).await };
    let preflight =
        request.method() == Method::OPTIONS && request.headers().contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    let mut response = if preflight {
        let mut response = StatusCode::NO_CONTENT.into_response();
        let headers = response.headers_mut();
        headers.insert(header::ACCESS_CONTROL_ALLOW_METHODS, HeaderValue::from_static(METHODS));
        headers.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, HeaderValue::from_static(HEADERS));
        headers.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("600"));
        response
    } else {
        next.run(request).await
    };
    let headers = response.headers_mut();
    headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    headers.insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, HeaderValue::from_static(EXPOSED));
    headers.append(header::VARY, HeaderValue::from_static("origin"));
    response
}
