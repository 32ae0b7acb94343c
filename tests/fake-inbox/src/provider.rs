//! The built-in provider: a small OAuth 2.1 authorization server for one
//! confidential client, so that the quickstart needs no other. Its opaque
//! access tokens are what the API accepts besides the configured issuer's
//! JWTs.
//!
//! - `GET /.well-known/oauth-authorization-server`: RFC 8414 metadata.
//! - `GET /authorize`: the client and its exact redirect URI checked first
//!   (a page if either is wrong: nothing is sent to an unchecked URI), then
//!   `response_type=code`, PKCE `S256` (required), the scopes (`inbox.read`,
//!   `inbox.write`), `resource` if given (the API's audience); a page that
//!   signs in as one of [`USERS`] (no password: a stand-in) and allows or
//!   denies.
//! - `POST /authorize`: the answer; back to the redirect URI with `code`
//!   (or `error=access_denied`), `state` and `iss` (RFC 9207).
//! - `POST /token`: `authorization_code` (PKCE verifier checked; a code
//!   works once, and a code used twice revokes what it made) and
//!   `refresh_token` (rotated: a refresh token works once, and one used
//!   again revokes its grant, as OAuth 2.1 §4.3.1 asks); the client
//!   authenticates by `client_secret_basic` or `client_secret_post`.
//! - `POST /revoke`: RFC 7009; a refresh token revokes its whole grant.
//!
//! Every table is bounded in entries and time (`table.rs`).

use crate::api::{Caller, READ, WRITE};
use crate::params::Params;
use crate::table::Table;
use crate::{OptionsError, ProviderOptions, USERS};
use askama::Template;
use axum::Json;
use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ring::rand::SecureRandom;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use subtle::ConstantTimeEq;

/// The scopes, with what the consent page says each allows.
const SCOPES: [(&str, &str); 2] = [(READ, "read your messages"), (WRITE, "mark your messages read")];
/// How long a sign-in page may be left unanswered.
const PENDING_TTL: Duration = Duration::from_secs(600);
/// How long a code may wait for its exchange.
const CODE_TTL: Duration = Duration::from_secs(60);
/// How long a code is remembered once exchanged (to revoke what it made if
/// it comes again).
const SPENT_TTL: Duration = Duration::from_secs(600);
/// Entries in each table of sign-ins and codes.
const MAX_PENDING: usize = 1000;
/// Entries in each table of tokens.
const MAX_TOKENS: usize = 10_000;

pub(crate) struct Provider {
    issuer: String,
    audience: String,
    client: ProviderOptions,
    tables: Mutex<Tables>,
    random: ring::rand::SystemRandom,
}

struct Tables {
    /// Sign-in pages shown and not answered yet, by the id in their form.
    pending: Table<Pending>,
    codes: Table<Code>,
    /// Codes exchanged: the grant each made.
    spent: Table<u64>,
    access: Table<Token>,
    refresh: Table<Refresh>,
    next_grant: u64,
}

/// A checked authorization request.
#[derive(Clone)]
struct Pending {
    redirect_uri: String,
    /// Whether the request named its redirect URI (the exchange must then
    /// name it too: RFC 6749 §4.1.3).
    redirect_uri_given: bool,
    state: Option<String>,
    scopes: Vec<String>,
    challenge: String,
}

struct Code {
    request: Pending,
    user: &'static str,
}

/// What a token grants: a person, scopes, and the grant it belongs to
/// (every token one sign-in led to, through its refreshes).
#[derive(Clone)]
struct Token {
    user: String,
    scopes: Vec<String>,
    grant: u64,
}

struct Refresh {
    token: Token,
    /// Exchanged for a new pair already: presented again, it revokes its grant.
    used: bool,
}

impl Tables {
    fn revoke_grant(&mut self, grant: u64) {
        self.access.retain(|t| t.grant != grant);
        self.refresh.retain(|r| r.token.grant != grant);
    }
}

impl Provider {
    pub(crate) fn new(issuer: String, audience: String, client: ProviderOptions) -> Result<Provider, OptionsError> {
        if client.client_id.is_empty() {
            return Err(OptionsError::Client("a client id"));
        }
        if client.client_secret.is_empty() {
            return Err(OptionsError::Client("a client secret"));
        }
        if client.redirect_uris.is_empty() {
            return Err(OptionsError::Client("a redirect URI"));
        }
        for uri in &client.redirect_uris {
            if url::Url::parse(uri).map_or(true, |u| u.fragment().is_some() || u.cannot_be_a_base()) {
                return Err(OptionsError::RedirectUri(uri.clone()));
            }
        }
        let tables = Tables {
            pending: Table::new(MAX_PENDING),
            codes: Table::new(MAX_PENDING),
            spent: Table::new(MAX_PENDING),
            access: Table::new(MAX_TOKENS),
            refresh: Table::new(MAX_TOKENS),
            next_grant: 0,
        };
        Ok(Provider { issuer, audience, client, tables: Mutex::new(tables), random: ring::rand::SystemRandom::new() })
    }

    /// Whom an access token it issued is for, while it lives.
    pub(crate) fn access_token(&self, token: &str) -> Option<Caller> {
        let tables = self.tables();
        let token = tables.access.get(token)?;
        Some(Caller { user: token.user.clone(), scopes: token.scopes.clone(), token: "opaque" })
    }

    fn tables(&self) -> MutexGuard<'_, Tables> {
        self.tables.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `prefix` and 256 random bits.
    fn random(&self, prefix: &str) -> Result<String, ServerError> {
        let mut bytes = [0u8; 32];
        self.random.fill(&mut bytes).map_err(|_| ServerError)?;
        Ok(format!("{prefix}{}", URL_SAFE_NO_PAD.encode(bytes)))
    }

    fn metadata(&self) -> Value {
        let issuer = &self.issuer;
        let methods = ["client_secret_basic", "client_secret_post"];
        json!({
            "issuer": issuer,
            "authorization_endpoint": format!("{issuer}/authorize"),
            "token_endpoint": format!("{issuer}/token"),
            "revocation_endpoint": format!("{issuer}/revoke"),
            "response_types_supported": ["code"],
            "response_modes_supported": ["query"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": methods,
            "revocation_endpoint_auth_methods_supported": methods,
            "scopes_supported": SCOPES.map(|(scope, _)| scope),
            "authorization_response_iss_parameter_supported": true,
        })
    }

    /// `redirect_uri` with `pairs`, `state` and `iss` added to its query.
    fn back(&self, redirect_uri: &str, state: Option<&str>, pairs: &[(&str, &str)]) -> Result<String, AuthorizeError> {
        let mut url =
            url::Url::parse(redirect_uri).map_err(|_| AuthorizeError::page("The redirect URI is not valid."))?;
        {
            let mut query = url.query_pairs_mut();
            query.extend_pairs(pairs);
            if let Some(state) = state {
                query.append_pair("state", state);
            }
            query.append_pair("iss", &self.issuer);
        }
        Ok(url.into())
    }

    /// `GET /authorize`: the request checked and kept; the id of its page.
    fn ask(&self, params: &Params) -> Result<String, AuthorizeError> {
        if params.get("client_id") != Some(self.client.client_id.as_str()) {
            return Err(AuthorizeError::page("The app that sent you here is not one Fake Inbox knows (client_id)."));
        }
        let redirect_uri = match params.get("redirect_uri") {
            Some(uri) if self.client.redirect_uris.iter().any(|known| known == uri) => uri.to_string(),
            None if self.client.redirect_uris.len() == 1 => self.client.redirect_uris[0].clone(),
            _ => return Err(AuthorizeError::page("The app asked to send you back to an address it did not register.")),
        };
        // From here on, what is wrong goes back to the client.
        let state = params.get("state");
        let refuse = |error: &str, description: &str| -> AuthorizeError {
            match self.back(&redirect_uri, state, &[("error", error), ("error_description", description)]) {
                Ok(url) => AuthorizeError::Back(url),
                Err(page) => page,
            }
        };
        if params.get("response_type") != Some("code") {
            return Err(refuse("unsupported_response_type", "only response_type=code"));
        }
        let challenge = params.get("code_challenge").filter(|c| is_pkce_text(c));
        let (Some(challenge), Some("S256")) = (challenge, params.get("code_challenge_method")) else {
            return Err(refuse("invalid_request", "PKCE is required: code_challenge with code_challenge_method=S256"));
        };
        let scopes = scopes(params.get("scope").unwrap_or("")).map_err(|why| refuse("invalid_scope", &why))?;
        if params.get("resource").is_some_and(|r| r != self.audience) {
            return Err(refuse("invalid_target", "this provider issues tokens for its inbox API only"));
        }
        let request = Pending {
            redirect_uri,
            redirect_uri_given: params.get("redirect_uri").is_some(),
            state: state.map(str::to_string),
            scopes,
            challenge: challenge.to_string(),
        };
        let id = self.random("").map_err(|_| AuthorizeError::page("Try again in a moment."))?;
        self.tables().pending.insert(id.clone(), request, PENDING_TTL);
        Ok(id)
    }

    /// `POST /authorize`: the person's answer; where to send them back to.
    fn answer(&self, params: &Params) -> Result<String, AuthorizeError> {
        let allow = match params.get("decision") {
            Some("allow") => true,
            Some("deny") => false,
            _ => return Err(AuthorizeError::page("Choose Allow or Deny.")),
        };
        let user = USERS.into_iter().find(|u| params.get("user") == Some(u));
        if allow && user.is_none() {
            return Err(AuthorizeError::page("Choose whom to sign in as."));
        }
        let expired = "This sign-in expired or was answered already. Go back to the app and start again.";
        let id = params.get("request").ok_or(AuthorizeError::page(expired))?;
        let request = self.tables().pending.take(id).ok_or(AuthorizeError::page(expired))?;
        let state = request.state.clone();
        let Some(user) = user.filter(|_| allow) else {
            let denied = [("error", "access_denied"), ("error_description", "the person denied access")];
            return self.back(&request.redirect_uri, state.as_deref(), &denied);
        };
        let code = self.random("fic_").map_err(|_| AuthorizeError::page("Try again in a moment."))?;
        let back = self.back(&request.redirect_uri, state.as_deref(), &[("code", &code)])?;
        self.tables().codes.insert(code.clone(), Code { request, user }, CODE_TTL);
        Ok(back)
    }

    /// The client's credentials, by `client_secret_basic` or
    /// `client_secret_post` (one of them), compared in constant time.
    fn authenticate(&self, headers: &HeaderMap, params: &Params) -> Result<(), TokenError> {
        let (id, secret, basic) = match (headers.get(header::AUTHORIZATION), params.get("client_secret")) {
            (Some(_), Some(_)) => {
                return Err(TokenError::InvalidRequest("use one client authentication method".into()));
            }
            (Some(value), None) => {
                let (id, secret) = basic_credentials(value).ok_or(TokenError::InvalidClient { basic: true })?;
                if params.get("client_id").is_some_and(|c| c != id) {
                    return Err(TokenError::InvalidClient { basic: true });
                }
                (id, secret, true)
            }
            (None, Some(secret)) => {
                let id = params.get("client_id").ok_or(TokenError::InvalidClient { basic: false })?;
                (id.to_string(), secret.to_string(), false)
            }
            (None, None) => return Err(TokenError::InvalidClient { basic: false }),
        };
        let same = id.as_bytes().ct_eq(self.client.client_id.as_bytes())
            & secret.as_bytes().ct_eq(self.client.client_secret.as_bytes());
        if bool::from(same) { Ok(()) } else { Err(TokenError::InvalidClient { basic }) }
    }

    /// `POST /token`.
    fn token(&self, headers: &HeaderMap, body: &[u8]) -> Result<Value, TokenError> {
        let params = Params::parse(body).map_err(|e| TokenError::InvalidRequest(e.to_string()))?;
        self.authenticate(headers, &params)?;
        match params.get("grant_type") {
            Some("authorization_code") => self.exchange(&params),
            Some("refresh_token") => self.refresh(&params),
            Some(_) => Err(TokenError::UnsupportedGrantType),
            None => Err(TokenError::InvalidRequest("grant_type is missing".into())),
        }
    }

    fn exchange(&self, params: &Params) -> Result<Value, TokenError> {
        let code = params.get("code").ok_or(TokenError::InvalidRequest("code is missing".into()))?;
        let verifier =
            params.get("code_verifier").ok_or(TokenError::InvalidRequest("code_verifier is missing".into()))?;
        let mut tables = self.tables();
        let Some(Code { request, user }) = tables.codes.take(code) else {
            if let Some(grant) = tables.spent.take(code) {
                tables.revoke_grant(grant);
            }
            return Err(TokenError::InvalidGrant("the code is unknown, expired or used already"));
        };
        let grant = tables.next_grant;
        tables.next_grant += 1;
        tables.spent.insert(code.to_string(), grant, SPENT_TTL);
        let redirect_uri = params.get("redirect_uri");
        if redirect_uri.is_some_and(|uri| uri != request.redirect_uri)
            || (request.redirect_uri_given && redirect_uri.is_none())
        {
            return Err(TokenError::InvalidGrant("redirect_uri is not the one the code was sent to"));
        }
        let digest = ring::digest::digest(&ring::digest::SHA256, verifier.as_bytes());
        if !is_pkce_text(verifier) || URL_SAFE_NO_PAD.encode(digest) != request.challenge {
            return Err(TokenError::InvalidGrant("the code_verifier does not match the code_challenge"));
        }
        self.issue(&mut tables, Token { user: user.to_string(), scopes: request.scopes, grant })
    }

    fn refresh(&self, params: &Params) -> Result<Value, TokenError> {
        let presented =
            params.get("refresh_token").ok_or(TokenError::InvalidRequest("refresh_token is missing".into()))?;
        let asked = params.get("scope").map(scopes).transpose().map_err(TokenError::InvalidScope)?;
        let mut tables = self.tables();
        let refresh =
            tables.refresh.get_mut(presented).ok_or(TokenError::InvalidGrant("the refresh token is not valid"))?;
        if refresh.used {
            let grant = refresh.token.grant;
            tables.revoke_grant(grant);
            return Err(TokenError::InvalidGrant("the refresh token was used already: its grant is revoked"));
        }
        let mut token = refresh.token.clone();
        if let Some(asked) = asked {
            if !asked.iter().all(|s| token.scopes.contains(s)) {
                return Err(TokenError::InvalidScope("a refresh may ask for fewer scopes, never more".into()));
            }
            token.scopes = asked;
        }
        refresh.used = true;
        self.issue(&mut tables, token)
    }

    /// A new access token and refresh token for `token`'s grant.
    fn issue(&self, tables: &mut Tables, token: Token) -> Result<Value, TokenError> {
        let access = self.random("fia_")?;
        let refresh = self.random("fir_")?;
        let scope = token.scopes.join(" ");
        tables.access.insert(access.clone(), token.clone(), self.client.access_token_ttl);
        tables.refresh.insert(refresh.clone(), Refresh { token, used: false }, self.client.refresh_token_ttl);
        Ok(json!({
            "access_token": access,
            "token_type": "Bearer",
            "expires_in": self.client.access_token_ttl.as_secs(),
            "refresh_token": refresh,
            "scope": scope,
        }))
    }

    /// `POST /revoke` (RFC 7009): an unknown token is no error.
    fn revoke(&self, headers: &HeaderMap, body: &[u8]) -> Result<(), TokenError> {
        let params = Params::parse(body).map_err(|e| TokenError::InvalidRequest(e.to_string()))?;
        self.authenticate(headers, &params)?;
        let token = params.get("token").ok_or(TokenError::InvalidRequest("token is missing".into()))?;
        let mut tables = self.tables();
        match tables.refresh.get(token).map(|r| r.token.grant) {
            Some(grant) => tables.revoke_grant(grant),
            None => drop(tables.access.take(token)),
        }
        Ok(())
    }
}

/// The scopes of a `scope` parameter: known ones, at least one, each once.
fn scopes(scope: &str) -> Result<Vec<String>, String> {
    let mut scopes: Vec<String> = Vec::new();
    for scope in scope.split(' ').filter(|s| !s.is_empty()) {
        if !SCOPES.iter().any(|(known, _)| *known == scope) {
            return Err(format!("unknown scope `{}`: ask for inbox.read, inbox.write or both", quoted(scope)));
        }
        if !scopes.iter().any(|s| s == scope) {
            scopes.push(scope.to_string());
        }
    }
    if scopes.is_empty() {
        return Err("no scope: ask for inbox.read, inbox.write or both".into());
    }
    Ok(scopes)
}

fn quoted(text: &str) -> String {
    text.chars().filter(|c| c.is_ascii_graphic()).take(40).collect()
}

/// A PKCE verifier's or S256 challenge's text: 43 to 128 unreserved
/// characters (RFC 7636 §4.1).
fn is_pkce_text(text: &str) -> bool {
    (43..=128).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b))
}

/// `Basic base64(id:secret)`, each part form-urlencoded (RFC 6749 §2.3.1).
fn basic_credentials(value: &HeaderValue) -> Option<(String, String)> {
    let (scheme, encoded) = value.to_str().ok()?.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = String::from_utf8(STANDARD.decode(encoded.trim()).ok()?).ok()?;
    let (id, secret) = decoded.split_once(':')?;
    let form_decoded = |part: &str| {
        percent_encoding::percent_decode_str(&part.replace('+', " ")).decode_utf8().ok().map(|s| s.into_owned())
    };
    Some((form_decoded(id)?, form_decoded(secret)?))
}

/// Randomness failed: nothing was issued.
#[derive(Debug)]
struct ServerError;

/// Why the authorization endpoint did not go on.
#[derive(Debug)]
enum AuthorizeError {
    /// Shown to the person, never sent to the client (the client or its
    /// redirect URI could not be trusted, or the page was stale).
    Page(String),
    /// Sent back to the client's redirect URI, as this URL.
    Back(String),
}

impl AuthorizeError {
    fn page(message: &str) -> AuthorizeError {
        AuthorizeError::Page(message.to_string())
    }
}

impl IntoResponse for AuthorizeError {
    fn into_response(self) -> Response {
        match self {
            AuthorizeError::Page(message) => {
                page(StatusCode::BAD_REQUEST, &Notice { title: "This sign-in cannot go on", message: &message })
            }
            AuthorizeError::Back(url) => see_other(url),
        }
    }
}

/// Why the token or revocation endpoint refused (RFC 6749 §5.2).
#[derive(Debug)]
enum TokenError {
    InvalidRequest(String),
    /// The client did not authenticate; `basic`: it tried with HTTP Basic.
    InvalidClient {
        basic: bool,
    },
    InvalidGrant(&'static str),
    InvalidScope(String),
    UnsupportedGrantType,
    Server,
}

impl From<ServerError> for TokenError {
    fn from(_: ServerError) -> Self {
        TokenError::Server
    }
}

impl IntoResponse for TokenError {
    fn into_response(self) -> Response {
        let basic = matches!(self, TokenError::InvalidClient { basic: true });
        let (status, error, description) = match self {
            TokenError::InvalidRequest(why) => (StatusCode::BAD_REQUEST, "invalid_request", why),
            TokenError::InvalidClient { .. } => {
                (StatusCode::UNAUTHORIZED, "invalid_client", "the client id or secret is wrong".into())
            }
            TokenError::InvalidGrant(why) => (StatusCode::BAD_REQUEST, "invalid_grant", why.to_string()),
            TokenError::InvalidScope(why) => (StatusCode::BAD_REQUEST, "invalid_scope", why),
            TokenError::UnsupportedGrantType => (
                StatusCode::BAD_REQUEST,
                "unsupported_grant_type",
                "grant_type is authorization_code or refresh_token".into(),
            ),
            TokenError::Server => (StatusCode::SERVICE_UNAVAILABLE, "temporarily_unavailable", "try again".into()),
        };
        let mut response = no_store(status, json!({"error": error, "error_description": description}));
        if basic {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(r#"Basic realm="fake-inbox""#));
        }
        response
    }
}

/// A JSON answer no cache keeps (RFC 6749 §5.1).
fn no_store(status: StatusCode, body: Value) -> Response {
    let headers = [(header::CACHE_CONTROL, "no-store"), (header::PRAGMA, "no-cache")];
    (status, headers, Json(body)).into_response()
}

fn see_other(url: String) -> Response {
    (StatusCode::SEE_OTHER, [(header::LOCATION, url), (header::CACHE_CONTROL, "no-store".to_string())]).into_response()
}

/// The sign-in and consent page.
#[derive(Template)]
#[template(path = "authorize.html")]
struct AuthorizePage<'a> {
    client_id: &'a str,
    request: &'a str,
    users: &'a [&'a str],
    scopes: Vec<(&'a str, &'a str)>,
}

/// A page that says why a sign-in cannot go on.
#[derive(Template)]
#[template(path = "notice.html")]
struct Notice<'a> {
    title: &'a str,
    message: &'a str,
}

/// A page, never cached nor framed.
fn page(status: StatusCode, template: &impl Template) -> Response {
    let Ok(html) = template.render() else {
        return (StatusCode::INTERNAL_SERVER_ERROR, "the page could not be rendered").into_response();
    };
    let headers = [
        (header::CONTENT_TYPE, "text/html; charset=utf-8"),
        (header::CACHE_CONTROL, "no-store"),
        // No form-action: a browser would apply it to the redirect back.
        (header::CONTENT_SECURITY_POLICY, "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'"),
    ];
    (status, headers, html).into_response()
}

pub(crate) fn routes<S: Clone + Send + Sync + 'static>(provider: Arc<Provider>) -> axum::Router<S> {
    axum::Router::new()
        .route("/.well-known/oauth-authorization-server", get(metadata))
        .route("/authorize", get(ask).post(answer))
        .route("/token", post(token))
        .route("/revoke", post(revoke))
        .with_state(provider)
}

async fn metadata(State(provider): State<Arc<Provider>>) -> Json<Value> {
    Json(provider.metadata())
}

async fn ask(State(provider): State<Arc<Provider>>, RawQuery(query): RawQuery) -> Response {
    let params = match Params::parse(query.unwrap_or_default().as_bytes()) {
        Ok(params) => params,
        Err(e) => return AuthorizeError::Page(format!("The app's request is not valid: {e}.")).into_response(),
    };
    match provider.ask(&params) {
        Ok(request) => {
            let scopes = params.get("scope").unwrap_or("").split(' ').collect::<Vec<_>>();
            let scopes = SCOPES.into_iter().filter(|(s, _)| scopes.contains(s)).collect();
            let client_id = &provider.client.client_id;
            page(StatusCode::OK, &AuthorizePage { client_id, request: &request, users: &USERS, scopes })
        }
        Err(e) => e.into_response(),
    }
}

async fn answer(State(provider): State<Arc<Provider>>, body: Bytes) -> Response {
    let params = match Params::parse(&body) {
        Ok(params) => params,
        Err(e) => return AuthorizeError::Page(format!("The form is not valid: {e}.")).into_response(),
    };
    match provider.answer(&params) {
        Ok(url) => see_other(url),
        Err(e) => e.into_response(),
    }
}

async fn token(State(provider): State<Arc<Provider>>, headers: HeaderMap, body: Bytes) -> Response {
    match provider.token(&headers, &body) {
        Ok(tokens) => no_store(StatusCode::OK, tokens),
        Err(e) => e.into_response(),
    }
}

async fn revoke(State(provider): State<Arc<Provider>>, headers: HeaderMap, body: Bytes) -> Response {
    match provider.revoke(&headers, &body) {
        Ok(()) => no_store(StatusCode::OK, json!({})),
        Err(e) => e.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_credentials_are_form_decoded() {
        let header = |raw: &str| HeaderValue::from_str(&format!("Basic {}", STANDARD.encode(raw))).unwrap();
        assert_eq!(basic_credentials(&header("plinth:s%3Acret+1")), Some(("plinth".into(), "s:cret 1".into())));
        assert_eq!(basic_credentials(&header("no-colon")), None);
        assert_eq!(basic_credentials(&HeaderValue::from_static("Bearer x")), None);
    }

    #[test]
    fn scopes_are_known_and_counted_once() {
        assert_eq!(scopes("inbox.read inbox.read  inbox.write"), Ok(vec![READ.to_string(), WRITE.to_string()]));
        assert!(scopes("").unwrap_err().contains("no scope"));
        assert!(scopes("inbox.read openid").unwrap_err().contains("`openid`"));
    }
}
