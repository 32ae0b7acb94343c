//! The record of every request the server answered: what a test checks to
//! know which tokens reached this host (and which never did), for whom and
//! with which scopes. The last [`KEPT`] requests are kept; `GET /test/seen`
//! answers them as JSON, [`crate::Inbox::seen`] in the same process.

use crate::Inbox;
use axum::Json;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::get;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::sync::Mutex;

/// Requests kept at most: the oldest go first.
const KEPT: usize = 1000;
/// The most of a body sent to `/collect` that is kept, in bytes.
const KEPT_BODY_BYTES: usize = 64 * 1024;

/// One request as the server saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeenRequest {
    /// Its method.
    pub method: String,
    /// Its path and query.
    pub path: String,
    /// Its `Authorization` header as presented, if any.
    pub authorization: Option<String>,
    /// Every header it came with, names in lower case, in order (values
    /// that are not UTF-8 lossily).
    pub headers: Vec<(String, String)>,
    /// The person its valid access token was for.
    pub user: Option<String>,
    /// The scopes that token held.
    pub scopes: Vec<String>,
    /// What kind of token it was: `jwt` (from the configured issuer) or
    /// `opaque` (from the built-in provider).
    pub token: Option<String>,
    /// The status answered.
    pub status: u16,
    /// What was sent to `/collect` (lossily UTF-8, cut at 64 KiB).
    pub body: Option<String>,
}

/// What a handler noted about a request for the record: put in its
/// response's extensions.
#[derive(Debug, Clone, Default)]
pub(crate) struct Noted {
    pub(crate) user: Option<String>,
    pub(crate) scopes: Vec<String>,
    pub(crate) token: Option<&'static str>,
    pub(crate) body: Option<String>,
}

impl Noted {
    /// A collected body, cut to what is kept.
    pub(crate) fn body(bytes: &[u8]) -> Noted {
        let kept = &bytes[..bytes.len().min(KEPT_BODY_BYTES)];
        Noted { body: Some(String::from_utf8_lossy(kept).into_owned()), ..Noted::default() }
    }
}

#[derive(Default)]
pub(crate) struct Seen(Mutex<(VecDeque<SeenRequest>, u64)>);

impl Seen {
    pub(crate) fn requests(&self) -> Vec<SeenRequest> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).0.iter().cloned().collect()
    }

    fn push(&self, request: SeenRequest) {
        let mut seen = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if seen.0.len() == KEPT {
            seen.0.pop_front();
        }
        seen.0.push_back(request);
        seen.1 += 1;
    }

    fn json(&self) -> Value {
        let seen = self.0.lock().unwrap_or_else(|p| p.into_inner());
        json!({ "total": seen.1, "requests": seen.0 })
    }
}

/// `GET /test/seen`.
pub(crate) fn routes() -> axum::Router<Inbox> {
    axum::Router::new().route("/test/seen", get(|State(inbox): State<Inbox>| async move { Json(inbox.0.seen.json()) }))
}

/// Records every request but those for the record itself.
pub(crate) async fn record(State(inbox): State<Inbox>, request: Request, next: Next) -> Response {
    if request.uri().path() == "/test/seen" {
        return next.run(request).await;
    }
    let text = |v: &axum::http::HeaderValue| String::from_utf8_lossy(v.as_bytes()).into_owned();
    let method = request.method().to_string();
    let path = request.uri().path_and_query().map_or_else(|| request.uri().path().to_string(), |p| p.to_string());
    let headers: Vec<(String, String)> = request.headers().iter().map(|(k, v)| (k.to_string(), text(v))).collect();
    let authorization = request.headers().get(axum::http::header::AUTHORIZATION).map(text);
    let response = next.run(request).await;
    let noted = response.extensions().get::<Noted>().cloned().unwrap_or_default();
    inbox.0.seen.push(SeenRequest {
        method,
        path,
        authorization,
        headers,
        user: noted.user,
        scopes: noted.scopes,
        token: noted.token.map(str::to_string),
        status: response.status().as_u16(),
        body: noted.body,
    });
    response
}
