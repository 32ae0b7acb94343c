//! Arm 13: what acting with a person's own account costs a call
//! (docs/authorization.md). The same request to the same API, made by twin
//! tools: `use_account`, to which Plinth attaches the person's cached grant
//! after the request leaves the sandbox (and out of whose answer it scrubs
//! the token), and `use_api_key`, which reads a tenant secret and sends it
//! itself. The grant is made as a person makes it: the call's challenge,
//! Plinth's login and link pages, the provider's redirect back.
//!
//! The provider and the API are one small in-process server: RFC 8414
//! metadata, an `/authorize` that sends the browser back at once, a
//! `/token` that always grants, and `GET /folders/{folder}`, which answers
//! a small JSON document to either token and 401 to anything else.

use crate::Opts;
use crate::arms::{CONNECTIONS, load_duration, load_row, median_load, tool_id};
use crate::measure::{Report, Server, client, unthrottle, warm_up, wrk_with_headers};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The person's access token the provider issues.
const PERSON_TOKEN: &str = "bench-person-access-token";
/// The tenant's API key, the twin's secret.
const TENANT_TOKEN: &str = "bench-tenant-api-key";

/// Requests the API answered, per token.
#[derive(Default)]
struct Seen {
    person: AtomicU64,
    tenant: AtomicU64,
}

/// The provider and API, at `url`.
async fn provider_and_api(seen: Arc<Seen>) -> anyhow::Result<(String, tokio::task::JoinHandle<()>)> {
    use axum::extract::{RawQuery, Request};
    use axum::http::{StatusCode, header};
    use axum::response::{IntoResponse, Response};
    use axum::routing::{get, post};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let metadata = json!({
        "issuer": url,
        "authorization_endpoint": format!("{url}/authorize"),
        "token_endpoint": format!("{url}/token"),
        "response_types_supported": ["code"],
        "code_challenge_methods_supported": ["S256"],
        "authorization_response_iss_parameter_supported": true,
    });
    let issuer = url.clone();
    let router = axum::Router::new()
        .route("/.well-known/oauth-authorization-server", get(move || async move { axum::Json(metadata) }))
        .route(
            "/authorize",
            get(move |RawQuery(query): RawQuery| async move {
                let parsed = reqwest::Url::parse(&format!("http://query/?{}", query.unwrap_or_default()));
                let pairs: BTreeMap<String, String> =
                    parsed.map(|u| u.query_pairs().into_owned().collect()).unwrap_or_default();
                let (Some(redirect), Some(state)) = (pairs.get("redirect_uri"), pairs.get("state")) else {
                    return StatusCode::BAD_REQUEST.into_response();
                };
                let Ok(mut back) = reqwest::Url::parse(redirect) else {
                    return StatusCode::BAD_REQUEST.into_response();
                };
                back.query_pairs_mut()
                    .append_pair("code", "bench-code")
                    .append_pair("state", state)
                    .append_pair("iss", &issuer);
                (StatusCode::FOUND, [(header::LOCATION, back.to_string())]).into_response()
            }),
        )
        .route(
            "/token",
            post(|| async {
                axum::Json(json!({
                    "access_token": PERSON_TOKEN, "token_type": "Bearer", "expires_in": 86400,
                    "refresh_token": "bench-refresh-token", "scope": "inbox.read",
                }))
            }),
        )
        .route(
            "/folders/{folder}",
            get(move |request: Request| async move {
                let presented = request.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
                let counter = match presented {
                    Some(p) if p == format!("Bearer {PERSON_TOKEN}") => &seen.person,
                    Some(p) if p == format!("Bearer {TENANT_TOKEN}") => &seen.tenant,
                    _ => return Response::builder().status(401).body(axum::body::Body::empty()).unwrap(),
                };
                counter.fetch_add(1, Ordering::Relaxed);
                axum::Json(json!({ "folder": "inbox", "messages": [{ "id": "m-1", "subject": "Lunch?" }] }))
                    .into_response()
            }),
        );
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    Ok((url, task))
}

/// A person's browser over plain HTTP: no redirects followed, every cookie
/// kept by name and sent back to Plinth (its paths do not matter here).
struct Browser {
    http: reqwest::Client,
    cookies: BTreeMap<String, String>,
}

/// An answer: status, `Location`, body.
struct Page {
    status: u16,
    location: Option<String>,
    html: String,
}

impl Browser {
    fn new() -> anyhow::Result<Browser> {
        let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build()?;
        Ok(Browser { http, cookies: BTreeMap::new() })
    }

    async fn send(&mut self, request: reqwest::RequestBuilder) -> anyhow::Result<Page> {
        let cookie = self.cookies.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("; ");
        let response = request.header("cookie", cookie).send().await?;
        for set in response.headers().get_all("set-cookie") {
            let pair = set.to_str()?.split(';').next().unwrap_or_default();
            if let Some((name, value)) = pair.split_once('=') {
                self.cookies.insert(name.trim().to_string(), value.to_string());
            }
        }
        let status = response.status().as_u16();
        let location = response.headers().get("location").and_then(|v| v.to_str().ok()).map(str::to_string);
        Ok(Page { status, location, html: response.text().await? })
    }

    async fn get(&mut self, url: &str) -> anyhow::Result<Page> {
        let request = self.http.get(url);
        self.send(request).await
    }

    /// A page's own form, posted (as the browser marks it).
    async fn submit(&mut self, url: &str, fields: &[(&str, &str)]) -> anyhow::Result<Page> {
        let request = self.http.post(url).header("sec-fetch-site", "same-origin").form(fields);
        self.send(request).await
    }
}

/// The value of the hidden field `name` on `html`.
fn hidden(html: &str, name: &str) -> anyhow::Result<String> {
    let value = html.split(&format!("name=\"{name}\" value=\"")).nth(1).and_then(|rest| rest.split('"').next());
    value.map(|v| v.replace("&#38;", "&")).ok_or_else(|| anyhow::anyhow!("no {name} on the page: {html}"))
}

/// The `action` of the page's first form.
fn action_of(html: &str) -> anyhow::Result<String> {
    let action = html.split("action=\"").nth(1).and_then(|rest| rest.split('"').next());
    action.map(|a| a.replace("&#38;", "&")).ok_or_else(|| anyhow::anyhow!("no form on the page: {html}"))
}

/// `person` connects their account as they would in a browser: the call's
/// challenge, Plinth's login and link pages, the provider, the callback.
async fn connect(url: &str, body: &str, person: &str) -> anyhow::Result<()> {
    let challenge = client()
        .post(url)
        .header("plinth-end-user", person)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await?;
    anyhow::ensure!(challenge.status() == 403, "the first call answered {}, not a challenge", challenge.status());
    let challenge: Value = challenge.json().await?;
    let link = challenge["error"]["authorization"][0]["url"]
        .as_str()
        .ok_or_else(|| anyhow::anyhow!("no link in {challenge}"))?
        .to_string();
    let mut browser = Browser::new()?;
    let login = browser.get(&link).await?;
    let (next, token) = (hidden(&login.html, "next")?, hidden(&login.html, "login_token")?);
    let password = format!("{person}-password");
    let fields = [("user", person), ("password", &password), ("next", &next), ("login_token", &token)];
    let logged_in = browser.submit(&action_of(&login.html)?, &fields).await?;
    anyhow::ensure!(logged_in.status == 303, "the login answered {}: {}", logged_in.status, logged_in.html);
    let page = browser.get(&link).await?;
    let form_token = hidden(&page.html, "form_token")?;
    let to_provider = browser.submit(&link, &[("form_token", &form_token)]).await?;
    let authorize = to_provider.location.ok_or_else(|| anyhow::anyhow!("Continue answered {}", to_provider.status))?;
    let back = browser.get(&authorize).await?;
    let callback = back.location.ok_or_else(|| anyhow::anyhow!("the provider answered {}", back.status))?;
    let connected = browser.get(&callback).await?;
    anyhow::ensure!(connected.status == 200, "the callback answered {}: {}", connected.status, connected.html);
    Ok(())
}

pub async fn accounts(opts: &Opts, report: &mut Report) -> anyhow::Result<()> {
    let duration = load_duration(opts);
    let seen = Arc::new(Seen::default());
    let (api, backend) = provider_and_api(seen.clone()).await?;
    let dir = tempfile::tempdir()?;
    for name in ["use_account", "use_api_key"] {
        let path = opts.fixtures.join(format!("{name}.wasm"));
        std::fs::copy(&path, dir.path().join(format!("{name}.wasm")))
            .map_err(|e| anyhow::anyhow!("{}: {e} (make fixtures)", path.display()))?;
    }
    let settings = dir.path().join("provider.json");
    let provider = json!({ "displayName": "Bench inbox", "issuer": api, "clientId": "plinth-bench", "clientSecret": "bench-client-secret" });
    std::fs::write(&settings, provider.to_string())?;
    let plugins = dir.path().to_string_lossy().to_string();
    let provider_flag = format!("inbox={}", settings.display());
    let (account_config, key_config) = (format!("use_account.api-url={api}"), format!("use_api_key.api-url={api}"));
    let data = tempfile::tempdir()?;
    let args = [
        "--plugins",
        plugins.as_str(),
        "--oauth-allow-http",
        "--allow-private-cidr",
        "127.0.0.0/8",
        "--authorization-provider",
        provider_flag.as_str(),
        "--tool-config",
        account_config.as_str(),
        "--tool-config",
        key_config.as_str(),
    ];
    let plinth = Server::plinth(opts, data.path(), &args)?;
    let base = plinth.base.clone();
    unthrottle(&base).await?;
    let http = client();
    let secret = http.put(format!("{base}/admin/secrets/api-token")).body(TENANT_TOKEN).send().await?;
    anyhow::ensure!(secret.status().is_success(), "setting the secret answered {}", secret.status());
    let person =
        http.put(format!("{base}/admin/end-users/alice")).json(&json!({ "password": "alice-password" })).send().await?;
    anyhow::ensure!(person.status().is_success(), "adding alice answered {}", person.status());

    let body =
        |tool: &str| json!({ "name": tool, "input_parameters": [{ "name": "folder", "value": "inbox" }] }).to_string();
    let (account_body, key_body) = (body("use_account"), body("use_api_key"));
    let account_url = format!("{base}/tools/{}:invoke", tool_id(&base, "use_account").await?);
    let key_url = format!("{base}/tools/{}:invoke", tool_id(&base, "use_api_key").await?);
    connect(&account_url, &account_body, "alice").await?;
    // Each twin reaches the API with its own token, and the API's answer.
    for (url, body) in [(&account_url, &account_body), (&key_url, &key_body)] {
        let answer: Value = http
            .post(url.as_str())
            .header("plinth-end-user", "alice")
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await?
            .json()
            .await?;
        let status = answer["output_parameters"].as_array().and_then(|o| o.iter().find(|p| p["name"] == "status"));
        anyhow::ensure!(status.is_some_and(|s| s["value"] == 200), "{url} answered {answer}");
    }
    anyhow::ensure!(seen.person.load(Ordering::Relaxed) == 1 && seen.tenant.load(Ordering::Relaxed) == 1);

    let alice = [("plinth-end-user", "alice")];
    tokio::task::block_in_place(|| warm_up(&account_url, Some(&account_body), &alice, opts.smoke))?;
    tokio::task::block_in_place(|| warm_up(&key_url, Some(&key_body), &alice, opts.smoke))?;
    let rounds = if opts.smoke { 1 } else { 3 };
    let (mut granted, mut keyed) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let load = |url: &str, body: &str| wrk_with_headers(url, Some(body), &alice, duration, CONNECTIONS);
        granted.push(tokio::task::block_in_place(|| load(&account_url, &account_body))?);
        keyed.push(tokio::task::block_in_place(|| load(&key_url, &key_body))?);
    }
    backend.abort();
    let (granted, keyed) = (median_load(&granted), median_load(&keyed));
    load_row(report, &format!("13 a call with a tenant secret the tool sends (median of {rounds})"), &keyed);
    load_row(
        report,
        &format!("13 the same call with the person's grant Plinth attaches (median of {rounds})"),
        &granted,
    );
    let ratio = granted.rps / keyed.rps;
    report.row(
        "13 grant ÷ secret",
        "requests/s",
        format!("{ratio:.2}"),
        "≥ 0.95",
        (!opts.smoke).then_some(ratio >= 0.95),
    );
    anyhow::ensure!(granted.errors == 0 && keyed.errors == 0, "calls failed under load: {granted:?} {keyed:?}");
    report.note(format!(
        "arm 13: the API answered {} requests with the person's token and {} with the tenant's",
        seen.person.load(Ordering::Relaxed),
        seen.tenant.load(Ordering::Relaxed)
    ));
    Ok(())
}
