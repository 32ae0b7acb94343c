//! A stand-in for an API that acts for one person — their inbox — shaped
//! like common mail APIs, for the tests and the quickstart of tools that
//! call an API with their end user's own OAuth grant (issue 65). Two roles
//! in one server:
//!
//! **The API** (`api.rs`). Every request carries `Authorization: Bearer
//! TOKEN`; the API answers only the token's person (`sub`), and only for
//! the scopes the token holds:
//! - `GET /v1/messages[?unread=true]` (scope `inbox.read`) →
//!   `{"messages": [{"id", "from", "subject", "received_at", "unread", "snippet"}]}`, newest first;
//! - `GET /v1/messages/{id}` (`inbox.read`) → one message with its `body`;
//!   `404` for a message of someone else's;
//! - `POST /v1/messages/{id}/read` (`inbox.write`) → the message, now read.
//!
//! A request without a token answers `401` with `WWW-Authenticate: Bearer
//! realm="fake-inbox"`; one with a token that is not valid (unknown,
//! expired, revoked, for another audience, from another issuer) `401` with
//! `error="invalid_token"`; one whose token lacks the scope `403` with
//! `error="insufficient_scope"` (RFC 6750 §3). Error bodies are
//! `{"error": {"code", "message"}}`.
//!
//! Valid tokens are (a) JWT access tokens (RFC 9068) signed by the issuer
//! the server is configured with (`jwt.rs`: its keys found through its
//! OpenID discovery document), for the API's audience — what an OAuth
//! provider with resource indicators issues, as oidc-provider does in the
//! e2e tests — and (b) the opaque tokens of the built-in provider.
//!
//! **The built-in provider** (`provider.rs`, only when configured): a small
//! OAuth 2.1 authorization server for one confidential client, so that the
//! quickstart needs nothing else: RFC 8414 metadata, a sign-in and consent
//! page (no password: pick alice or bob), authorization code with PKCE
//! S256 and RFC 9207 `iss`, refresh tokens with rotation, RFC 7009
//! revocation.
//!
//! **For tests of the token staying outside a tool** (a hostile tool tries
//! to get it or move it): `GET /v1/echo-headers` answers the request's
//! headers as JSON, `GET /v1/redirect?to=URL` answers `307` to `URL`, and
//! `/collect` (any method) takes whatever is sent to it. Every request is
//! recorded (`seen.rs`): method, path, the `Authorization` header as
//! presented, the person and scopes its token was valid for, the status;
//! `GET /test/seen` answers the record (the last thousand requests), and
//! [`Inbox::seen`] gives it to tests in the same process.
//!
//! Everything is bounded: request bodies (64 KiB), form fields, each
//! request's time (10 s), the provider's tables of pending sign-ins, codes
//! and tokens, the record, the JWT issuer's documents and the time spent
//! fetching them.

mod api;
mod jwt;
mod mailbox;
mod params;
mod provider;
mod seen;
mod table;

pub use mailbox::USERS;
pub use seen::SeenRequest;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use std::time::Duration;

/// The largest request body read, in bytes.
const MAX_BODY_BYTES: usize = 64 * 1024;
/// How long one request may take, fetches of an issuer's keys included.
const REQUEST_DEADLINE: Duration = Duration::from_secs(10);

/// How the server is set up.
#[derive(Debug, Clone)]
pub struct Options {
    /// The URL clients reach the server at (an origin, e.g.
    /// `http://127.0.0.1:8091`): the built-in provider's issuer and the
    /// default audience.
    pub public_url: String,
    /// The audience access tokens must be for (RFC 8707's resource, the
    /// JWT's `aud`); the public URL when `None`.
    pub audience: Option<String>,
    /// An issuer whose JWT access tokens the API accepts.
    pub issuer: Option<String>,
    /// The built-in provider, when it should run.
    pub provider: Option<ProviderOptions>,
}

impl Options {
    /// An API at `public_url` that accepts no token yet: add an issuer or
    /// the built-in provider.
    pub fn new(public_url: impl Into<String>) -> Options {
        Options { public_url: public_url.into(), audience: None, issuer: None, provider: None }
    }
}

/// The built-in provider's one client and its tokens' lifetimes.
#[derive(Debug, Clone)]
pub struct ProviderOptions {
    /// The client's id.
    pub client_id: String,
    /// The client's secret (`client_secret_basic` or `client_secret_post`).
    pub client_secret: String,
    /// The client's redirect URIs, compared exactly.
    pub redirect_uris: Vec<String>,
    /// How long an access token lives (zero: it is issued expired, for tests).
    pub access_token_ttl: Duration,
    /// How long a refresh token lives.
    pub refresh_token_ttl: Duration,
}

impl ProviderOptions {
    /// A client with the default lifetimes: five minutes for an access
    /// token, a day for a refresh token.
    pub fn new(
        client_id: impl Into<String>,
        client_secret: impl Into<String>,
        redirect_uri: impl Into<String>,
    ) -> Self {
        ProviderOptions {
            client_id: client_id.into(),
            client_secret: client_secret.into(),
            redirect_uris: vec![redirect_uri.into()],
            access_token_ttl: Duration::from_secs(300),
            refresh_token_ttl: Duration::from_secs(24 * 3600),
        }
    }
}

/// Why [`Options`] cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum OptionsError {
    /// A URL that is not an absolute http(s) origin.
    #[error("{what} `{url}` is not an http(s) URL without a path, query or fragment (e.g. http://127.0.0.1:8091)")]
    NotAnOrigin {
        /// Which option.
        what: &'static str,
        /// Its value.
        url: String,
    },
    /// An audience that is not an absolute URL.
    #[error("the audience `{0}` is not an absolute URL")]
    Audience(String),
    /// The provider's client is incomplete.
    #[error("the built-in provider needs {0}")]
    Client(&'static str),
    /// A redirect URI that is not an absolute URL without a fragment.
    #[error("the redirect URI `{0}` is not an absolute URL without a fragment")]
    RedirectUri(String),
    /// The HTTP client for the issuer's documents could not be built.
    #[error("the HTTP client could not be built: {0}")]
    HttpClient(String),
}

/// The server's state: its mailboxes, its provider's tables and its record
/// of requests. Cheap to clone; every clone is the same server.
#[derive(Clone)]
pub struct Inbox(Arc<Inner>);

struct Inner {
    audience: String,
    issuer: Option<jwt::Issuer>,
    provider: Option<Arc<provider::Provider>>,
    mailbox: mailbox::Mailbox,
    seen: seen::Seen,
}

impl Inbox {
    /// The server `options` describe.
    pub fn new(options: Options) -> Result<Inbox, OptionsError> {
        let public_url = origin("the public URL", &options.public_url)?;
        let audience = options.audience.unwrap_or_else(|| public_url.clone());
        if url::Url::parse(&audience).is_err() {
            return Err(OptionsError::Audience(audience));
        }
        let issuer = match options.issuer {
            Some(issuer) => Some(jwt::Issuer::new(origin_or_path("the issuer", &issuer)?, audience.clone())?),
            None => None,
        };
        let provider = match options.provider {
            Some(client) => Some(Arc::new(provider::Provider::new(public_url, audience.clone(), client)?)),
            None => None,
        };
        Ok(Inbox(Arc::new(Inner {
            audience,
            issuer,
            provider,
            mailbox: mailbox::Mailbox::default(),
            seen: seen::Seen::default(),
        })))
    }

    /// The audience access tokens must be for.
    pub fn audience(&self) -> &str {
        &self.0.audience
    }

    /// The requests served so far (the last thousand), oldest first.
    pub fn seen(&self) -> Vec<SeenRequest> {
        self.0.seen.requests()
    }

    /// The server's routes.
    pub fn router(&self) -> Router {
        let mut router = api::routes().merge(seen::routes());
        if let Some(provider) = &self.0.provider {
            router = router.merge(provider::routes(provider.clone()));
        }
        router
            .layer(axum::middleware::from_fn_with_state(self.clone(), seen::record))
            .layer(axum::middleware::from_fn(within_deadline))
            .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
            .with_state(self.clone())
    }
}

/// Answers `503` to a request that takes longer than [`REQUEST_DEADLINE`].
async fn within_deadline(request: Request, next: Next) -> Response {
    match tokio::time::timeout(REQUEST_DEADLINE, next.run(request)).await {
        Ok(response) => response,
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "the request took too long").into_response(),
    }
}

/// `url` as an origin, without a trailing slash.
fn origin(what: &'static str, url: &str) -> Result<String, OptionsError> {
    let refuse = || OptionsError::NotAnOrigin { what, url: url.to_string() };
    let parsed = url::Url::parse(url).map_err(|_| refuse())?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.path() != "/" || !parsed.has_host() {
        return Err(refuse());
    }
    if parsed.query().is_some() || parsed.fragment().is_some() || !parsed.username().is_empty() {
        return Err(refuse());
    }
    Ok(url.trim_end_matches('/').to_string())
}

/// An issuer: an http(s) URL, possibly with a path (as some providers'
/// are), compared exactly as given.
fn origin_or_path(what: &'static str, url: &str) -> Result<String, OptionsError> {
    let refuse = || OptionsError::NotAnOrigin { what, url: url.to_string() };
    let parsed = url::Url::parse(url).map_err(|_| refuse())?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(refuse());
    }
    Ok(url.to_string())
}

/// Serves `inbox` on `listener` until the process ends.
pub async fn serve(listener: tokio::net::TcpListener, inbox: Inbox) -> std::io::Result<()> {
    axum::serve(listener, inbox.router()).await
}

/// Serves a new server on a free port of 127.0.0.1 in a task of its own:
/// its URL (`http://127.0.0.1:PORT`) and state. `options` makes its
/// options from its URL.
pub async fn spawn(options: impl FnOnce(&str) -> Options) -> Result<(String, Inbox), SpawnError> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let inbox = Inbox::new(options(&url))?;
    tokio::spawn(serve(listener, inbox.clone()));
    Ok((url, inbox))
}

/// Why [`spawn`] did not start a server.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// No port.
    #[error("could not listen: {0}")]
    Listen(#[from] std::io::Error),
    /// Options it cannot serve.
    #[error(transparent)]
    Options(#[from] OptionsError),
}
