//! What the end-user authorization tests stand on: a small OAuth
//! authorization server of the test's own (RFC 8414 metadata with RFC 9207
//! `iss`, an `/authorize` that sends the browser back at once as a provider
//! does after its own sign-in, a `/token` that checks PKCE S256, the
//! redirect URI and the client's credentials, RFC 7009 `/revoke`); the API
//! behind the tool, which accepts only that provider's live tokens; and a
//! person's browser over plain HTTP (cookies kept per origin and path, as a
//! browser keeps them).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use serde_json::{Value, json};
use sha2::Digest as _;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// The client Plinth is at the test's provider.
pub const CLIENT_ID: &str = "plinth-test";
/// Its secret.
pub const CLIENT_SECRET: &str = "s3cret-of-the-client";

/// A code the provider handed out, and what it was for.
#[derive(Clone, Debug)]
struct Code {
    redirect_uri: String,
    challenge: String,
    scope: String,
    user: String,
}

/// What the provider did and is told to do.
#[derive(Default)]
pub struct ProviderState {
    /// Its issuer identifier.
    pub issuer: String,
    /// Who is signed in at the provider: whose grant `/authorize` makes.
    pub signed_in: String,
    /// The `iss` `/authorize` sends back (default: its own issuer).
    pub answer_iss: Option<String>,
    /// `/authorize` shows a page with an **Allow** link back instead of
    /// redirecting at once: the navigation back then starts on the
    /// provider's own site, as a real provider's does after its sign-in.
    pub consent_page: bool,
    codes: BTreeMap<String, Code>,
    /// Live access tokens → (user, scope).
    pub tokens: BTreeMap<String, (String, String)>,
    /// Refresh tokens → access token.
    pub refresh_tokens: BTreeMap<String, String>,
    /// The tokens revoked (RFC 7009), in order.
    pub revoked: Vec<String>,
    /// The authorization requests' queries, in order.
    pub authorize_requests: Vec<BTreeMap<String, String>>,
    /// Successful code exchanges.
    pub exchanges: usize,
    /// Token requests refused, with why.
    pub refusals: Vec<String>,
    issued: usize,
}

/// The test's OAuth provider, on 127.0.0.1 (named `host` in its URLs).
pub struct Provider {
    pub state: Arc<Mutex<ProviderState>>,
    pub issuer: String,
}

fn form_of(text: &str) -> BTreeMap<String, String> {
    form_urlencoded::parse(text.as_bytes()).into_owned().collect()
}

fn token_error(error: &str) -> axum::response::Response {
    use axum::response::IntoResponse;
    (axum::http::StatusCode::BAD_REQUEST, axum::Json(json!({ "error": error }))).into_response()
}

/// Whether a token request carries the client's credentials (HTTP Basic,
/// RFC 6749 §2.3.1: each part form-encoded).
fn client_authenticated(headers: &axum::http::HeaderMap) -> bool {
    let Some(basic) = headers.get("authorization").and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Basic "))
    else {
        return false;
    };
    let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(basic) else { return false };
    let decoded = String::from_utf8_lossy(&decoded).to_string();
    let decode = |s: &str| form_urlencoded::parse(format!("x={s}").as_bytes()).next().map(|(_, v)| v.into_owned());
    match decoded.split_once(':') {
        Some((id, secret)) => {
            decode(id).as_deref() == Some(CLIENT_ID) && decode(secret).as_deref() == Some(CLIENT_SECRET)
        }
        None => false,
    }
}

impl Provider {
    /// Starts it on `host` (`127.0.0.1`, or `localhost` for a browser to
    /// see it as another site than a Plinth on 127.0.0.1).
    pub async fn start(host: &str) -> Provider {
        use axum::extract::{RawQuery, State};
        use axum::http::{HeaderMap, StatusCode, header};
        use axum::response::IntoResponse;
        use axum::routing::{get, post};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let issuer = format!("http://{host}:{}", listener.local_addr().unwrap().port());
        let state = Arc::new(Mutex::new(ProviderState { issuer: issuer.clone(), ..Default::default() }));
        type Shared = Arc<Mutex<ProviderState>>;
        let metadata = |State(state): State<Shared>| async move {
            let issuer = state.lock().unwrap().issuer.clone();
            axum::Json(json!({
                "issuer": issuer,
                "authorization_endpoint": format!("{issuer}/authorize"),
                "token_endpoint": format!("{issuer}/token"),
                "revocation_endpoint": format!("{issuer}/revoke"),
                "response_types_supported": ["code"],
                "code_challenge_methods_supported": ["S256"],
                "authorization_response_iss_parameter_supported": true,
            }))
        };
        // As a provider does once its own sign-in and consent are done: the
        // browser goes back at once with the code.
        let authorize = |State(state): State<Shared>, RawQuery(query): RawQuery| async move {
            let query = form_of(&query.unwrap_or_default());
            let mut state = state.lock().unwrap();
            state.authorize_requests.push(query.clone());
            let get = |k: &str| query.get(k).cloned().unwrap_or_default();
            if get("response_type") != "code" || get("client_id") != CLIENT_ID || get("code_challenge_method") != "S256"
            {
                return (StatusCode::BAD_REQUEST, "not an authorization request this provider serves").into_response();
            }
            state.issued += 1;
            let code = format!("code-{}", state.issued);
            let user = state.signed_in.clone();
            state.codes.insert(
                code.clone(),
                Code { redirect_uri: get("redirect_uri"), challenge: get("code_challenge"), scope: get("scope"), user },
            );
            let iss = state.answer_iss.clone().unwrap_or_else(|| state.issuer.clone());
            let back: String = form_urlencoded::Serializer::new(String::new())
                .append_pair("code", &code)
                .append_pair("state", &get("state"))
                .append_pair("iss", &iss)
                .finish();
            let location = format!("{}?{back}", get("redirect_uri"));
            if state.consent_page {
                let page = format!(
                    "<!doctype html><title>Inbox</title><p>Allow Plinth to read your mail?</p><a id=\"allow\" href=\"{}\">Allow</a>",
                    location.replace('&', "&amp;")
                );
                return axum::response::Html(page).into_response();
            }
            (StatusCode::FOUND, [(header::LOCATION, location)]).into_response()
        };
        let token = |State(state): State<Shared>, headers: HeaderMap, body: String| async move {
            let form = form_of(&body);
            let mut state = state.lock().unwrap();
            if !client_authenticated(&headers) {
                state.refusals.push("client credentials".into());
                return token_error("invalid_client");
            }
            let get = |k: &str| form.get(k).cloned().unwrap_or_default();
            let (user, scope) = match get("grant_type").as_str() {
                "authorization_code" => {
                    let Some(code) = state.codes.remove(&get("code")) else {
                        state.refusals.push("unknown or used code".into());
                        return token_error("invalid_grant");
                    };
                    if code.redirect_uri != get("redirect_uri") {
                        state.refusals.push("redirect_uri".into());
                        return token_error("invalid_grant");
                    }
                    let challenge = B64.encode(sha2::Sha256::digest(get("code_verifier").as_bytes()));
                    if challenge != code.challenge {
                        state.refusals.push("PKCE".into());
                        return token_error("invalid_grant");
                    }
                    state.exchanges += 1;
                    (code.user, code.scope)
                }
                "refresh_token" => match state.refresh_tokens.get(&get("refresh_token")).cloned() {
                    Some(access) => match state.tokens.get(&access).cloned() {
                        Some(grant) => grant,
                        None => return token_error("invalid_grant"),
                    },
                    None => return token_error("invalid_grant"),
                },
                _ => return token_error("unsupported_grant_type"),
            };
            state.issued += 1;
            let access = format!("at-{user}-{}", state.issued);
            let refresh = format!("rt-{user}-{}", state.issued);
            state.tokens.insert(access.clone(), (user, scope.clone()));
            state.refresh_tokens.insert(refresh.clone(), access.clone());
            axum::Json(json!({
                "access_token": access, "token_type": "Bearer", "expires_in": 3600,
                "refresh_token": refresh, "scope": scope,
            }))
            .into_response()
        };
        let revoke = |State(state): State<Shared>, headers: HeaderMap, body: String| async move {
            let mut state = state.lock().unwrap();
            if !client_authenticated(&headers) {
                return token_error("invalid_client");
            }
            let token = form_of(&body).get("token").cloned().unwrap_or_default();
            if let Some(access) = state.refresh_tokens.remove(&token) {
                state.tokens.remove(&access);
            }
            state.tokens.remove(&token);
            state.revoked.push(token);
            StatusCode::OK.into_response()
        };
        let app = axum::Router::new()
            .route("/.well-known/oauth-authorization-server", get(metadata))
            .route("/authorize", get(authorize))
            .route("/token", post(token))
            .route("/revoke", post(revoke))
            .with_state(state.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Provider { state, issuer }
    }

    /// Who signs in at the provider from now on.
    pub fn sign_in_as(&self, user: &str) {
        self.state.lock().unwrap().signed_in = user.to_string();
    }

    /// Successful code exchanges so far.
    pub fn exchanges(&self) -> usize {
        self.state.lock().unwrap().exchanges
    }

    /// The provider's settings for `PUT /admin/authorization-providers/…`.
    pub fn settings(&self) -> Value {
        json!({ "displayName": "Inbox", "issuer": self.issuer, "clientId": CLIENT_ID, "clientSecret": CLIENT_SECRET })
    }
}

/// The API behind the tool: `GET /folders/{folder}` answers the mailbox of
/// the person whose live token of the provider it is given, `401` to
/// anything else. Keeps every `Authorization` it was sent.
pub struct Api {
    pub url: String,
    pub seen: Arc<Mutex<Vec<Option<String>>>>,
}

impl Api {
    pub async fn start(provider: &Provider) -> Api {
        use axum::extract::{Path, State};
        use axum::http::{HeaderMap, StatusCode};
        use axum::response::IntoResponse;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
        let seen: Arc<Mutex<Vec<Option<String>>>> = Default::default();
        let state = (provider.state.clone(), seen.clone());
        type Shared = (Arc<Mutex<ProviderState>>, Arc<Mutex<Vec<Option<String>>>>);
        let folder = |State((provider, seen)): State<Shared>, Path(folder): Path<String>, headers: HeaderMap| async move {
            let authorization = headers.get("authorization").and_then(|v| v.to_str().ok()).map(str::to_string);
            seen.lock().unwrap().push(authorization.clone());
            let token = authorization.as_deref().and_then(|a| a.strip_prefix("Bearer ")).unwrap_or("");
            let grant = provider.lock().unwrap().tokens.get(token).cloned();
            match grant {
                Some((user, scope)) if scope.split(' ').any(|s| s == "inbox.read") => {
                    axum::Json(json!({ "user": user, "folder": folder, "messages": [format!("hello {user}")] }))
                        .into_response()
                }
                _ => (StatusCode::UNAUTHORIZED, "no live token of the provider with inbox.read").into_response(),
            }
        };
        let app = axum::Router::new().route("/folders/{folder}", axum::routing::get(folder)).with_state(state);
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Api { url, seen }
    }

    /// The `Authorization` headers the API was sent, in order.
    pub fn seen(&self) -> Vec<Option<String>> {
        self.seen.lock().unwrap().clone()
    }
}

/// A cookie a [`Person`]'s browser keeps.
#[derive(Clone, Debug)]
struct Kept {
    origin: String,
    name: String,
    value: String,
    path: String,
}

/// A person's browser over plain HTTP: follows nothing on its own, keeps
/// cookies per origin and path (what `Set-Cookie` says), sends them where a
/// browser would, and says its posts come from the same origin (Fetch
/// Metadata) as a browser does for a page's own form.
#[derive(Clone)]
pub struct Person {
    client: reqwest::Client,
    jar: Arc<Mutex<Vec<Kept>>>,
}

/// An answer a [`Person`] got.
pub struct Page {
    pub status: u16,
    pub location: Option<String>,
    pub error_code: Option<String>,
    pub headers: reqwest::header::HeaderMap,
    pub html: String,
}

fn origin_and_path(url: &str) -> (String, String) {
    let parsed = reqwest::Url::parse(url).unwrap();
    (parsed.origin().ascii_serialization(), parsed.path().to_string())
}

impl Default for Person {
    fn default() -> Self {
        Person::new()
    }
}

impl Person {
    pub fn new() -> Person {
        let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
        Person { client, jar: Default::default() }
    }

    fn cookies_for(&self, url: &str) -> String {
        let (origin, path) = origin_and_path(url);
        let jar = self.jar.lock().unwrap();
        jar.iter()
            .filter(|c| {
                c.origin == origin
                    && (path == c.path
                        || path.starts_with(&format!("{}/", c.path.trim_end_matches('/')))
                        || c.path == "/")
            })
            .map(|c| format!("{}={}", c.name, c.value))
            .collect::<Vec<_>>()
            .join("; ")
    }

    fn keep(&self, url: &str, response: &reqwest::Response) {
        let (origin, _) = origin_and_path(url);
        let mut jar = self.jar.lock().unwrap();
        for value in response.headers().get_all("set-cookie") {
            let cookie = cookie::Cookie::parse(value.to_str().unwrap().to_string()).unwrap();
            let path = cookie.path().unwrap_or("/").to_string();
            jar.retain(|c| !(c.origin == origin && c.name == cookie.name() && c.path == path));
            let forget = cookie.max_age().is_some_and(|age| age.is_zero()) || cookie.value().is_empty();
            if !forget {
                jar.push(Kept {
                    origin: origin.clone(),
                    name: cookie.name().to_string(),
                    value: cookie.value().to_string(),
                    path,
                });
            }
        }
    }

    /// Whether it holds a cookie called `name`.
    pub fn has_cookie(&self, name: &str) -> bool {
        self.jar.lock().unwrap().iter().any(|c| c.name == name)
    }

    async fn read(&self, url: &str, response: reqwest::Response) -> Page {
        self.keep(url, &response);
        let status = response.status().as_u16();
        let header = |name: &str| response.headers().get(name).map(|v| v.to_str().unwrap().to_string());
        let (location, error_code) = (header("location"), header("plinth-error-code"));
        let headers = response.headers().clone();
        Page { status, location, error_code, headers, html: response.text().await.unwrap() }
    }

    /// `GET url`.
    pub async fn get(&self, url: &str) -> Page {
        let request = self.client.get(url).header("cookie", self.cookies_for(url));
        let response = request.send().await.unwrap();
        self.read(url, response).await
    }

    /// `POST url` with `fields` and `headers` (a page's own form sends
    /// `Sec-Fetch-Site: same-origin`: give it, or another).
    pub async fn post(&self, url: &str, fields: &[(&str, &str)], headers: &[(&str, &str)]) -> Page {
        let mut request = self.client.post(url).header("cookie", self.cookies_for(url)).form(fields);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().await.unwrap();
        self.read(url, response).await
    }

    /// A page's own form, posted.
    pub async fn submit(&self, url: &str, fields: &[(&str, &str)]) -> Page {
        self.post(url, fields, &[("sec-fetch-site", "same-origin")]).await
    }

    /// Opens `url` (a page that asks to log in first) and logs in as
    /// `user` (password `{user}-password`) → the page it goes on to.
    pub async fn log_in_at(&self, url: &str, user: &str) -> Page {
        let login = self.get(url).await;
        assert_eq!(login.status, 200, "{}", login.html);
        let token = crate::support::hidden(&login.html, "login_token");
        let next = crate::support::hidden(&login.html, "next");
        let action = action_of(&login.html);
        let password = format!("{user}-password");
        let fields =
            [("user", user), ("password", password.as_str()), ("next", next.as_str()), ("login_token", token.as_str())];
        let logged_in = self.submit(&action, &fields).await;
        assert_eq!(logged_in.status, 303, "{user} logs in: {}", logged_in.html);
        let location = logged_in.location.unwrap();
        assert_eq!(location, url, "the login goes on to the page that asked for it");
        self.get(&location).await
    }

    /// Follows redirects from `page` (as a browser does), to the first
    /// answer that is not one.
    pub async fn follow(&self, mut page: Page) -> Page {
        for _ in 0..10 {
            match (page.status, page.location.clone()) {
                (301 | 302 | 303 | 307, Some(location)) => page = self.get(&location).await,
                _ => return page,
            }
        }
        panic!("too many redirects");
    }
}

/// The `action` of a page's (first) form.
pub fn action_of(html: &str) -> String {
    html.split("action=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("no form:\n{html}"))
        .replace("&#38;", "&")
}
