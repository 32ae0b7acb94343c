//! OAuth 2.1 for the MCP door, over raw HTTP: the metadata, the sign-in and
//! consent page, the token endpoint, and every refusal a stranger or a
//! careless client meets — each answered with the right error, and nothing
//! stored. The official Python SDK's OAuth client is in `mcp_python.rs`.

use crate::cheq::{booking, confirming_server};
use crate::mcp::{Mcp, arguments};
use crate::support::{Server, TOKEN, plugins_dir};
use base64::Engine;
use reqwest::Method;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::HashMap;

const REDIRECT: &str = "http://127.0.0.1:41873/callback";
const VERIFIER: &str = "a-verifier-of-more-than-forty-three-characters-0123456789";

fn challenge(verifier: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// A browser and a client of one tenant's authorization server.
pub struct Flow<'a> {
    server: &'a Server,
    /// `""` or `/t/{tenant}`.
    root: String,
    http: reqwest::Client,
}

/// Where the sign-in form sent the browser.
#[derive(Debug)]
enum SentBack {
    /// To the client, with these query fields.
    Client(HashMap<String, String>),
    /// Not: the page's status and text.
    Page(u16, String),
}

impl<'a> Flow<'a> {
    pub fn new(server: &'a Server, root: &str) -> Flow<'a> {
        let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
        Flow { server, root: root.into(), http }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{}{path}", self.server.base, self.root)
    }

    /// Registers a client with `redirect_uris` → its id.
    async fn register(&self, redirect_uris: &[&str]) -> String {
        let metadata = json!({ "client_name": "Test host", "redirect_uris": redirect_uris,
                               "application_type": "native", "token_endpoint_auth_method": "none" });
        let response = self.http.post(self.url("/oauth/register")).json(&metadata).send().await.unwrap();
        assert_eq!(response.status(), 201);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["token_endpoint_auth_method"], "none");
        body["client_id"].as_str().unwrap().to_string()
    }

    /// The authorization request's query fields.
    fn request(&self, client_id: &str, redirect_uri: &str) -> Vec<(String, String)> {
        [
            ("response_type", "code"),
            ("client_id", client_id),
            ("redirect_uri", redirect_uri),
            ("state", "st-1"),
            ("code_challenge", &challenge(VERIFIER)),
            ("code_challenge_method", "S256"),
            ("resource", &format!("{}{}/mcp", self.server.base, self.root)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    /// `GET` the authorization page → (status, headers, text).
    async fn page(&self, query: &[(String, String)]) -> (u16, reqwest::header::HeaderMap, String) {
        let response = self.http.get(self.url("/oauth/authorize")).query(query).send().await.unwrap();
        let (status, headers) = (response.status().as_u16(), response.headers().clone());
        (status, headers, response.text().await.unwrap())
    }

    /// Opens the page and posts its form as `user` with `password`,
    /// answering `decision`.
    async fn sign_in(&self, query: &[(String, String)], user: &str, password: &str, decision: &str) -> SentBack {
        let (status, headers, page) = self.page(query).await;
        if status != 200 {
            return SentBack::Page(status, page);
        }
        let cookie = headers[reqwest::header::SET_COOKIE].to_str().unwrap().split(';').next().unwrap().to_string();
        let mut form: Vec<(String, String)> = query.to_vec();
        form.push(("login_token".into(), crate::support::hidden(&page, "login_token")));
        form.extend(
            [("user", user), ("password", password), ("decision", decision)].map(|(k, v)| (k.into(), v.into())),
        );
        let response = self
            .http
            .post(self.url("/oauth/authorize"))
            .header(reqwest::header::COOKIE, cookie)
            .form(&form)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        if status != 303 {
            return SentBack::Page(status, response.text().await.unwrap());
        }
        let location = response.headers()[reqwest::header::LOCATION].to_str().unwrap().to_string();
        let url = reqwest::Url::parse(&location).unwrap();
        assert_eq!(
            format!("{}://{}{}", url.scheme(), url.authority(), url.path()),
            REDIRECT.split('?').next().unwrap()
        );
        SentBack::Client(url.query_pairs().into_owned().collect())
    }

    /// Signs alice in and allows → the code.
    async fn code(&self, client_id: &str) -> String {
        self.code_with(&self.request(client_id, REDIRECT)).await
    }

    /// Signs alice in for the authorization request `query` and allows →
    /// the code.
    async fn code_with(&self, query: &[(String, String)]) -> String {
        match self.sign_in(query, "alice", "alice-password", "allow").await {
            SentBack::Client(fields) => fields["code"].clone(),
            other => panic!("no code: {other:?}"),
        }
    }

    /// `POST oauth/token` with `form` → (status, body).
    async fn token(&self, form: &[(&str, &str)]) -> (u16, Value) {
        let response = self.http.post(self.url("/oauth/token")).form(form).send().await.unwrap();
        let status = response.status().as_u16();
        if status == 200 {
            assert_eq!(response.headers()[reqwest::header::CACHE_CONTROL], "no-store");
        }
        (status, response.json().await.unwrap())
    }

    /// Exchanges `code` with the right verifier → the token response.
    async fn exchange(&self, client_id: &str, code: &str) -> Value {
        let form = [
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", REDIRECT),
            ("client_id", client_id),
            ("code_verifier", VERIFIER),
        ];
        let (status, body) = self.token(&form).await;
        assert_eq!(status, 200, "{body}");
        body
    }

    pub async fn refresh(&self, client_id: &str, refresh_token: &str) -> (u16, Value) {
        self.token(&[("grant_type", "refresh_token"), ("refresh_token", refresh_token), ("client_id", client_id)]).await
    }

    /// Tokens for alice for `resource` (another MCP URL than the root's),
    /// from a fresh client → the token response.
    async fn tokens_for(&self, resource: &str) -> Value {
        let client_id = self.register(&[REDIRECT]).await;
        let mut query = self.request(&client_id, REDIRECT);
        query.retain(|(k, _)| k != "resource");
        query.push(("resource".into(), resource.into()));
        let code = self.code_with(&query).await;
        self.exchange(&client_id, &code).await
    }

    /// Tokens for alice, from a fresh client → (client id, token response).
    pub async fn tokens(&self) -> (String, Value) {
        let client_id = self.register(&[REDIRECT]).await;
        let code = self.code(&client_id).await;
        let tokens = self.exchange(&client_id, &code).await;
        (client_id, tokens)
    }
}

/// Opens an authorization URL as a person's browser and signs in as `user`
/// with `password`, allowing: → where the browser is sent back to.
pub async fn allow_at(url: &str, user: &str, password: &str) -> String {
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let page = http.get(url).send().await.unwrap();
    assert_eq!(page.status(), 200, "{url}");
    let cookie = page.headers()[reqwest::header::SET_COOKIE].to_str().unwrap().split(';').next().unwrap().to_string();
    let html = page.text().await.unwrap();
    let action = unescape(html.split("method=\"post\" action=\"").nth(1).unwrap().split('"').next().unwrap());
    let mut form: Vec<(String, String)> = html
        .split("<input type=\"hidden\" name=\"")
        .skip(1)
        .map(|rest| {
            let name = rest.split('"').next().unwrap();
            let value = rest.split("value=\"").nth(1).unwrap().split('"').next().unwrap();
            (unescape(name), unescape(value))
        })
        .collect();
    form.extend([("user", user), ("password", password), ("decision", "allow")].map(|(k, v)| (k.into(), v.into())));
    let answer = http.post(&action).header(reqwest::header::COOKIE, cookie).form(&form).send().await.unwrap();
    assert_eq!(answer.status(), 303, "{}", answer.text().await.unwrap());
    answer.headers()[reqwest::header::LOCATION].to_str().unwrap().to_string()
}

/// An attribute value as the pages' templates escape it, unescaped.
fn unescape(value: &str) -> String {
    [("&#x2f;", "/"), ("&#47;", "/"), ("&#x27;", "'"), ("&#39;", "'"), ("&quot;", "\""), ("&lt;", "<"), ("&gt;", ">")]
        .iter()
        .fold(value.to_string(), |v, (escaped, plain)| v.replace(escaped, plain))
        .replace("&amp;", "&")
}

/// `tools/list` at `root`'s MCP URL with `token` → (status, WWW-Authenticate, body).
pub async fn list_with(server: &Server, root: &str, token: &str) -> (u16, String, Value) {
    let response = server
        .request_as(Some(token), Method::POST, &format!("{root}/mcp"))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .json(&json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {} }))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let challenge = response
        .headers()
        .get(reqwest::header::WWW_AUTHENTICATE)
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (status, challenge, response.json().await.unwrap_or(Value::Null))
}

fn grants(server: &Server) -> i64 {
    server.stored_count("SELECT count(*) FROM oauth_grants")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_mcp_url_says_where_to_get_a_token_and_the_metadata_agrees() {
    let server = Server::start(&[]);
    server.create_tenant("acme", json!({})).await;
    for (root, resource_metadata) in [
        ("", "/.well-known/oauth-protected-resource/mcp"),
        ("/t/acme", "/.well-known/oauth-protected-resource/t/acme/mcp"),
    ] {
        let (status, challenge, _) = list_with(&server, root, "").await;
        assert_eq!(status, 401);
        assert_eq!(
            challenge,
            format!("Bearer scope=\"tools:read tools:call\", resource_metadata=\"{}{resource_metadata}\"", server.base)
        );
        let (status, metadata) = server.get(resource_metadata).await;
        assert_eq!(status, 200, "{metadata}");
        let issuer = format!("{}{root}", server.base);
        assert_eq!(metadata["resource"], format!("{issuer}/mcp"));
        assert_eq!(metadata["authorization_servers"], json!([issuer]));
        // The issuer's metadata, where RFC 8414 puts it, names it exactly.
        let (status, server_metadata) = server.get(&format!("/.well-known/oauth-authorization-server{root}")).await;
        assert_eq!(status, 200, "{server_metadata}");
        assert_eq!(server_metadata["issuer"], issuer);
        assert_eq!(server_metadata["code_challenge_methods_supported"], json!(["S256"]));
        assert_eq!(server_metadata["client_id_metadata_document_supported"], true);
        assert_eq!(server_metadata["token_endpoint"], format!("{issuer}/oauth/token"));
    }
    // A bad key is still told it is one, with where tokens come from.
    let (status, challenge, _) = list_with(&server, "", "not-a-key").await;
    assert_eq!(status, 401);
    assert!(challenge.starts_with("Bearer error=\"invalid_token\", scope="), "{challenge}");
    // No such tenant: the metadata of a tenant with the defaults, so that
    // nothing says whether it exists (`a_stranger_cannot_tell_…`); a
    // segment that cannot name a tenant is no resource.
    let (status, metadata) = server.get("/.well-known/oauth-protected-resource/t/nobody/mcp").await;
    assert_eq!(status, 200, "{metadata}");
    assert_eq!(metadata["resource"], format!("{}/t/nobody/mcp", server.base));
    assert_eq!(server.get("/.well-known/oauth-authorization-server/t/nobody").await.0, 200);
    assert_eq!(server.get("/.well-known/oauth-protected-resource/t/No_Such/mcp").await.0, 404);
    assert_eq!(server.get("/.well-known/oauth-authorization-server/t/No_Such").await.0, 404);

    // The operator turns a tenant's authorization server off: no metadata,
    // no challenge naming it, and keys as before.
    let off = json!({ "enabled": false });
    let (status, body) = server.call_as(Some(TOKEN), Method::PUT, "/admin/tenants/acme/oauth", Some(&off)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(server.get("/.well-known/oauth-protected-resource/t/acme/mcp").await.0, 404);
    let (status, challenge, _) = list_with(&server, "/t/acme", "").await;
    assert_eq!((status, challenge.as_str()), (401, "Bearer"));
    let audit = server.call_as(Some(TOKEN), Method::GET, "/admin/audit?tenant=acme", None).await.1;
    assert!(audit.to_string().contains("oauth.put"), "{audit}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_signed_in_end_user_gets_tokens_that_list_call_and_act_as_them() {
    let (server, _plugins) = confirming_server(&[]).await;
    let flow = Flow::new(&server, "");
    let (client_id, tokens) = flow.tokens().await;
    assert_eq!(tokens["token_type"], "Bearer");
    assert_eq!(tokens["scope"], "tools:read tools:call");
    let access = tokens["access_token"].as_str().unwrap();
    let (status, _, listed) = list_with(&server, "", access).await;
    assert_eq!(status, 200, "{listed}");
    assert!(listed["result"]["tools"].as_array().unwrap().iter().any(|t| t["name"] == "book_flight"));

    // The call needing confirmation goes to the person who signed in: no
    // `endUser` needed, and an agent naming someone else is refused.
    let client = Mcp::with_key(&server, access, "");
    let answer = client.call("book_flight", arguments(&booking("FIRST", 2)), json!({ "endUser": "bob" })).await;
    assert_eq!(answer["error"]["data"]["code"], "end_user_mismatch", "{answer}");
    let answer = client.call("book_flight", arguments(&booking("FIRST", 2)), Value::Null).await;
    assert_eq!(answer["result"]["resultType"], "input_required", "{answer}");
    assert_eq!(server.stored_count("SELECT count(*) FROM confirmations WHERE end_user = 'alice'"), 1);
    assert_eq!(server.stored_count("SELECT count(*) FROM confirmations WHERE end_user <> 'alice'"), 0);

    // Refreshing rotates: a new pair, and the old refresh token is spent.
    let refresh = tokens["refresh_token"].as_str().unwrap();
    let (status, renewed) = flow.refresh(&client_id, refresh).await;
    assert_eq!(status, 200, "{renewed}");
    assert_ne!(renewed["access_token"], tokens["access_token"]);
    assert_eq!(list_with(&server, "", renewed["access_token"].as_str().unwrap()).await.0, 200);
    // Narrower scopes on refresh; never wider.
    let (status, narrower) = flow
        .token(&[
            ("grant_type", "refresh_token"),
            ("refresh_token", renewed["refresh_token"].as_str().unwrap()),
            ("client_id", &client_id),
            ("scope", "tools:read"),
        ])
        .await;
    assert_eq!((status, &narrower["scope"]), (200, &json!("tools:read")), "{narrower}");
    let read_only = narrower["access_token"].as_str().unwrap();
    assert_eq!(list_with(&server, "", read_only).await.0, 200);
    // A call with a token lacking `tools:call`: 403 with the scope needed.
    let response = server
        .request_as(Some(read_only), Method::POST, "/mcp")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .json(&json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": { "name": "echo", "arguments": { "text": "x" } } }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    let challenge = response.headers()[reqwest::header::WWW_AUTHENTICATE].to_str().unwrap();
    assert!(challenge.starts_with("Bearer error=\"insufficient_scope\", scope=\"tools:call\""), "{challenge}");
    let (status, wider) = flow
        .token(&[
            ("grant_type", "refresh_token"),
            ("refresh_token", narrower["refresh_token"].as_str().unwrap()),
            ("client_id", &client_id),
            ("scope", "tools:read tools:call"),
        ])
        .await;
    assert_eq!((status, &wider["error"]), (400, &json!("invalid_scope")), "{wider}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_token_works_only_at_the_mcp_url_of_the_tenant_it_was_issued_for() {
    let (server, _plugins) = confirming_server(&[]).await;
    server.create_tenant("acme", json!({})).await;
    let echo = std::fs::read(plugins_dir().join("echo.wasm")).unwrap();
    assert_eq!(server.deploy_as(TOKEN, "acme", echo).await.0, 201);
    let (_, tokens) = Flow::new(&server, "").tokens().await;
    let access = tokens["access_token"].as_str().unwrap();
    assert_eq!(list_with(&server, "", access).await.0, 200);
    // Another tenant's MCP URL: not its audience.
    let (status, challenge, _) = list_with(&server, "/t/acme", access).await;
    assert_eq!(status, 401);
    assert!(challenge.starts_with("Bearer error=\"invalid_token\""), "{challenge}");
    // A2T, OTC and the admin API take keys, not tokens.
    for (method, path) in [(Method::GET, "/tools"), (Method::GET, "/otc/tools"), (Method::GET, "/admin/tenant")] {
        let response = server.request_as(Some(access), method, path).send().await.unwrap();
        assert_eq!(response.status(), 401, "{path}");
    }
    // A token is never handed to a tool: the echo of every header a tool
    // could see is in the sandbox tests; here, its text is not in any log.
    assert!(!server.logs().contains(access), "the token was logged");
}

/// A token works only at the exact MCP URL it was issued for: one for a
/// toolset's MCP URL opens that URL and not the toolset's pinned roots
/// (`…/toolsets/travel@1/mcp`), which take a key scoped to the toolset
/// (docs/toolsets.md). (Before, the pin was dropped before the token's
/// resource was compared, and the token opened every pinned root.)
#[tokio::test(flavor = "multi_thread")]
async fn a_toolsets_token_opens_its_exact_mcp_url_and_not_the_toolsets_pinned_roots() {
    let (server, _plugins) = confirming_server(&[]).await;
    let travel = json!({ "description": "", "tools": [{ "name": "echo" }] });
    assert_eq!(server.call_as(Some(TOKEN), Method::PUT, "/admin/toolsets/travel", Some(&travel)).await.0, 201);
    let resource = format!("{}/t/default/toolsets/travel/mcp", server.base);
    let tokens = Flow::new(&server, "/t/default").tokens_for(&resource).await;
    let access = tokens["access_token"].as_str().unwrap();
    let (status, _, listed) = list_with(&server, "/t/default/toolsets/travel", access).await;
    assert_eq!(status, 200, "{listed}");
    // The pinned root is another URL: refused, saying which one the token opens.
    let (status, _, refused) = list_with(&server, "/t/default/toolsets/travel@1", access).await;
    assert_eq!((status, &refused["error"]["code"]), (403, &json!("outside_toolset")), "{refused}");
    assert_eq!(refused["error"]["toolset"], "travel", "{refused}");
    // A key scoped to the toolset opens it there.
    let scoped = json!({ "tenant": "default", "role": "consumer", "toolset": "travel" });
    let (status, key) = server.call_as(Some(TOKEN), Method::POST, "/admin/keys", Some(&scoped)).await;
    assert_eq!(status, 201, "{key}");
    let (status, _, listed) = list_with(&server, "/t/default/toolsets/travel@1", key["key"].as_str().unwrap()).await;
    assert_eq!(status, 200, "{listed}");
}

#[tokio::test(flavor = "multi_thread")]
async fn stolen_replayed_or_mismatched_credentials_are_refused() {
    let (server, _plugins) = confirming_server(&[]).await;
    let flow = Flow::new(&server, "");
    let client_id = flow.register(&[REDIRECT]).await;

    // PKCE: the wrong verifier is refused, and so is a request naming
    // another client: neither spends the code (someone who saw it cannot
    // burn it), and nothing is stored.
    let code = flow.code(&client_id).await;
    let wrong = "another-verifier-of-more-than-forty-three-characters-000000";
    let form = |code: &str, verifier: &str, redirect: &str, client: &str| {
        vec![
            ("grant_type", "authorization_code".to_string()),
            ("code", code.to_string()),
            ("redirect_uri", redirect.to_string()),
            ("client_id", client.to_string()),
            ("code_verifier", verifier.to_string()),
        ]
    };
    let send = |fields: Vec<(&'static str, String)>| {
        let flow = &flow;
        async move {
            let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
            flow.token(&fields).await
        }
    };
    let before = grants(&server);
    let (status, body) = send(form(&code, wrong, REDIRECT, &client_id)).await;
    assert_eq!((status, &body["error"]), (400, &json!("invalid_grant")), "{body}");
    let (status, body) = send(form(&code, VERIFIER, REDIRECT, "plinth_client_someone_else")).await;
    assert_eq!((status, &body["error"]), (400, &json!("invalid_grant")), "{body}");
    assert_eq!(grants(&server), before, "a refused exchange stores nothing");
    let (status, body) = send(form(&code, VERIFIER, REDIRECT, &client_id)).await;
    assert_eq!(status, 200, "the code was not spent by the refused attempts: {body}");

    // The redirect URI and the client must be the code's.
    let code = flow.code(&client_id).await;
    let (status, body) = send(form(&code, VERIFIER, "http://127.0.0.1:41873/other", &client_id)).await;
    assert_eq!((status, &body["error"]), (400, &json!("invalid_grant")), "{body}");
    let other_client = flow.register(&[REDIRECT]).await;
    let code = flow.code(&client_id).await;
    let (status, body) = send(form(&code, VERIFIER, REDIRECT, &other_client)).await;
    assert_eq!((status, &body["error"]), (400, &json!("invalid_grant")), "{body}");

    // A code exchanged twice: the second is refused and what the first
    // issued is revoked.
    let code = flow.code(&client_id).await;
    let tokens = flow.exchange(&client_id, &code).await;
    let (status, body) = send(form(&code, VERIFIER, REDIRECT, &client_id)).await;
    assert_eq!((status, &body["error"]), (400, &json!("invalid_grant")), "{body}");
    assert_eq!(list_with(&server, "", tokens["access_token"].as_str().unwrap()).await.0, 401);

    // A refresh token presented again at once (a retry after a lost
    // answer) refreshes again; once the token that replaced it was used,
    // presenting it is a stolen copy's replay: refused, and its whole
    // grant revoked, every token issued from it alike.
    let (owner, tokens) = flow.tokens().await;
    let refresh = tokens["refresh_token"].as_str().unwrap();
    let (status, first) = flow.refresh(&owner, refresh).await;
    assert_eq!(status, 200, "{first}");
    let (status, retried) = flow.refresh(&owner, refresh).await;
    assert_eq!(status, 200, "a retry within the reuse window: {retried}");
    // The retry's tokens are the live line; what the first use issued is
    // replaced.
    let (status, next) = flow.refresh(&owner, retried["refresh_token"].as_str().unwrap()).await;
    assert_eq!(status, 200, "{next}");
    let (status, body) = flow.refresh(&owner, refresh).await;
    assert_eq!((status, &body["error"]), (400, &json!("invalid_grant")), "{body}");
    for access in [&retried, &next] {
        assert_eq!(list_with(&server, "", access["access_token"].as_str().unwrap()).await.0, 401);
    }
    let (status, _) = flow.refresh(&owner, next["refresh_token"].as_str().unwrap()).await;
    assert_eq!(status, 400, "the rotated refresh token is revoked with its grant");
    // A thief who replayed a token within its window, and kept what the
    // first use issued, gets no second line: that token is replaced, and
    // presenting it revokes the grant.
    let (owner, tokens) = flow.tokens().await;
    let refresh = tokens["refresh_token"].as_str().unwrap();
    let (status, kept_by_thief) = flow.refresh(&owner, refresh).await;
    assert_eq!(status, 200, "{kept_by_thief}");
    let (status, retried) = flow.refresh(&owner, refresh).await;
    assert_eq!(status, 200, "{retried}");
    let (status, body) = flow.refresh(&owner, kept_by_thief["refresh_token"].as_str().unwrap()).await;
    assert_eq!((status, &body["error"]), (400, &json!("invalid_grant")), "{body}");
    assert_eq!(list_with(&server, "", retried["access_token"].as_str().unwrap()).await.0, 401, "the grant is revoked");
    // Another client cannot use a client's refresh token, nor spend it.
    let (owner, tokens) = flow.tokens().await;
    let refresh = tokens["refresh_token"].as_str().unwrap();
    let (status, body) = flow.refresh(&other_client, refresh).await;
    assert_eq!((status, &body["error"]), (400, &json!("invalid_grant")), "{body}");
    assert_eq!(flow.refresh(&owner, refresh).await.0, 200, "the owner's token still works");

    // Revocation (RFC 7009): the refresh token and its grant's access token.
    let (client_id, tokens) = flow.tokens().await;
    let revoke = [("token", tokens["refresh_token"].as_str().unwrap()), ("client_id", client_id.as_str())];
    let response = flow.http.post(flow.url("/oauth/revoke")).form(&revoke).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(list_with(&server, "", tokens["access_token"].as_str().unwrap()).await.0, 401);
    let (status, _) = flow.refresh(&client_id, tokens["refresh_token"].as_str().unwrap()).await;
    assert_eq!(status, 400);

    // Made-up tokens, and the wrong grant types.
    assert_eq!(list_with(&server, "", "plinth_at_madeup").await.0, 401);
    let (status, body) = flow.token(&[("grant_type", "client_credentials"), ("client_id", &client_id)]).await;
    assert_eq!((status, &body["error"]), (400, &json!("unsupported_grant_type")), "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_authorization_page_never_sends_a_browser_where_the_client_did_not_register() {
    let (server, _plugins) = confirming_server(&[]).await;
    let flow = Flow::new(&server, "");
    let client_id = flow.register(&[REDIRECT]).await;
    let before = grants(&server);

    // A redirect URI the client did not register: a page, never a redirect.
    for elsewhere in
        ["https://evil.example/cb", "http://127.0.0.1:41873/callback/../x", "http://localhost:41873/callback"]
    {
        let (status, headers, page) = flow.page(&flow.request(&client_id, elsewhere)).await;
        assert_eq!(status, 400, "{elsewhere}: {page}");
        assert!(headers.get(reqwest::header::LOCATION).is_none());
    }
    // The same loopback callback on another port is the client's (OAuth 2.1).
    let (status, _, _) = flow.page(&flow.request(&client_id, "http://127.0.0.1:50000/callback")).await;
    assert_eq!(status, 200);
    // An unknown client: a page.
    let (status, _, _) = flow.page(&flow.request("plinth_client_nobody", REDIRECT)).await;
    assert_eq!(status, 400);
    // No PKCE, or plain; another resource than the tenant's MCP URL: a
    // page saying so, never a redirect (anyone may register a client whose
    // redirect URI is their own site: that would be an open redirector).
    let mut plain = flow.request(&client_id, REDIRECT);
    plain.retain(|(k, _)| k != "code_challenge_method");
    plain.push(("code_challenge_method".into(), "plain".into()));
    let mut other = flow.request(&client_id, REDIRECT);
    other.retain(|(k, _)| k != "resource");
    other.push(("resource".into(), "https://elsewhere.example/mcp".into()));
    // A toolset's URL as the bare root would name it: toolsets are served
    // under `/t/{tenant}/` only, so none is issued for it.
    let travel = json!({ "description": "", "tools": [{ "name": "echo" }] });
    assert_eq!(server.call_as(Some(TOKEN), Method::PUT, "/admin/toolsets/travel", Some(&travel)).await.0, 201);
    let mut unserved = flow.request(&client_id, REDIRECT);
    unserved.retain(|(k, _)| k != "resource");
    unserved.push(("resource".into(), format!("{}/toolsets/travel/mcp", server.base)));
    for (query, said) in [(plain, "invalid_request"), (other, "invalid_target"), (unserved, "invalid_target")] {
        let (status, headers, page) = flow.page(&query).await;
        assert_eq!(status, 400, "{page}");
        assert!(headers.get(reqwest::header::LOCATION).is_none());
        assert!(page.contains(said), "{page}");
    }

    // The page is never framed, runs no script, and posts only here and to
    // the client.
    let (_, headers, page) = flow.page(&flow.request(&client_id, REDIRECT)).await;
    assert_eq!(headers["x-frame-options"], "DENY");
    let csp = headers["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("frame-ancestors 'none'") && csp.contains("default-src 'none'"), "{csp}");
    assert!(csp.contains("form-action 'self' http://127.0.0.1:41873"), "{csp}");
    assert!(page.contains("Test host") && page.contains("tools:call"), "the consent names the client and scopes");

    // The person denies: back with access_denied, no code.
    match flow.sign_in(&flow.request(&client_id, REDIRECT), "alice", "alice-password", "deny").await {
        SentBack::Client(fields) => {
            assert_eq!(fields.get("error").map(String::as_str), Some("access_denied"));
            assert!(!fields.contains_key("code"));
            assert_eq!(fields["state"], "st-1");
            assert_eq!(fields["iss"], server.base);
        }
        other => panic!("{other:?}"),
    }
    // A form posted without the page's cookie (another site's form).
    let mut forged = flow.request(&client_id, REDIRECT);
    forged.extend(
        [("user", "alice"), ("password", "alice-password"), ("decision", "allow"), ("login_token", "x")]
            .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let response = flow.http.post(flow.url("/oauth/authorize")).form(&forged).send().await.unwrap();
    assert_eq!(response.status(), 403);
    assert_eq!(grants(&server), before, "nothing was issued");

    // Guessing passwords: the confirmation page's throttle.
    let mut statuses = Vec::new();
    for _ in 0..7 {
        match flow.sign_in(&flow.request(&client_id, REDIRECT), "alice", "wrong", "allow").await {
            SentBack::Page(status, page) => {
                assert!(page.contains(if status == 401 { "Wrong user name" } else { "Too many failed" }), "{page}");
                statuses.push(status);
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(&statuses[..5], [401; 5], "{statuses:?}");
    assert!(statuses[5..].iter().all(|s| *s == 429), "{statuses:?}");
    assert_eq!(grants(&server), before, "nothing was issued");
}

#[tokio::test(flavor = "multi_thread")]
async fn removing_an_end_user_changing_their_password_or_turning_oauth_off_ends_their_tokens() {
    let (server, _plugins) = confirming_server(&[]).await;
    let server = &server;
    let flow = Flow::new(server, "");
    let put_password = |password: &'static str| {
        let body = json!({ "password": password });
        async move { server.call_as(Some(TOKEN), Method::PUT, "/admin/end-users/alice", Some(&body)).await.0 }
    };
    // A new password ends what the old one signed in to.
    let (client_id, tokens) = flow.tokens().await;
    assert_eq!(put_password("alice-password").await, 204);
    assert_eq!(list_with(server, "", tokens["access_token"].as_str().unwrap()).await.0, 401);
    assert_eq!(flow.refresh(&client_id, tokens["refresh_token"].as_str().unwrap()).await.0, 400);
    // Removing the end user ends theirs; a later user of the name gets none.
    let (client_id, tokens) = flow.tokens().await;
    assert_eq!(server.call_as(Some(TOKEN), Method::DELETE, "/admin/end-users/alice", None).await.0, 204);
    assert_eq!(put_password("alice-password").await, 204);
    assert_eq!(list_with(server, "", tokens["access_token"].as_str().unwrap()).await.0, 401);
    assert_eq!(flow.refresh(&client_id, tokens["refresh_token"].as_str().unwrap()).await.0, 400);
    // Turning OAuth off and on again does not bring tokens back.
    let (_, tokens) = flow.tokens().await;
    for enabled in [false, true] {
        let body = json!({ "enabled": enabled });
        assert_eq!(server.call_as(Some(TOKEN), Method::PUT, "/admin/tenants/default/oauth", Some(&body)).await.0, 200);
    }
    assert_eq!(list_with(server, "", tokens["access_token"].as_str().unwrap()).await.0, 401);

    // A client with one redirect URI may leave it out of the request; then
    // the token request may too (RFC 6749 §4.1.3), else it must name it.
    let client_id = flow.register(&[REDIRECT]).await;
    let mut query = flow.request(&client_id, REDIRECT);
    query.retain(|(k, _)| k != "redirect_uri");
    let code = match flow.sign_in(&query, "alice", "alice-password", "allow").await {
        SentBack::Client(fields) => fields["code"].clone(),
        other => panic!("{other:?}"),
    };
    let form =
        [("grant_type", "authorization_code"), ("code", &code), ("client_id", &client_id), ("code_verifier", VERIFIER)];
    let (status, body) = flow.token(&form).await;
    assert_eq!(status, 200, "{body}");
    let code = flow.code(&client_id).await;
    let form =
        [("grant_type", "authorization_code"), ("code", &code), ("client_id", &client_id), ("code_verifier", VERIFIER)];
    let (status, body) = flow.token(&form).await;
    assert_eq!((status, &body["error"]), (400, &json!("invalid_request")), "{body}");
}

/// Serves `document` at `/client.json` on 127.0.0.1 (after `delay`) → its URL.
async fn client_document(
    document: impl Fn(&str) -> String + Send + Sync + 'static,
    delay: std::time::Duration,
) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/client.json", listener.local_addr().unwrap());
    let body = document(&url);
    let app = axum::Router::new().route(
        "/client.json",
        axum::routing::get(move || {
            let body = body.clone();
            async move {
                tokio::time::sleep(delay).await;
                ([(axum::http::header::CONTENT_TYPE, "application/json")], body)
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_metadata_document_is_fetched_within_the_outbound_policy() {
    let document = |url: &str| {
        json!({ "client_id": url, "client_name": "Document host", "redirect_uris": [REDIRECT],
                "token_endpoint_auth_method": "none" })
        .to_string()
    };
    let good = client_document(document, std::time::Duration::ZERO).await;
    let huge = client_document(
        |url: &str| {
            json!({ "client_id": url, "redirect_uris": [REDIRECT], "padding": "x".repeat(64 * 1024) }).to_string()
        },
        std::time::Duration::ZERO,
    )
    .await;
    let slow = client_document(document, std::time::Duration::from_secs(30)).await;
    let liar = client_document(
        |_: &str| json!({ "client_id": "https://someone.else/c.json", "redirect_uris": [REDIRECT] }).to_string(),
        std::time::Duration::ZERO,
    )
    .await;

    // Without the operator allowing loopback addresses, a document there
    // is never fetched.
    let strict = Server::start(&["--oauth-allow-http"]);
    strict
        .call_as(Some(TOKEN), Method::PUT, "/admin/end-users/alice", Some(&json!({"password": "alice-password"})))
        .await;
    let flow = Flow::new(&strict, "");
    // The page says the same of a private address as of a host that never
    // answers (it does not map the server's networks); the log says more.
    let (status, _, page) = flow.page(&flow.request(&good, REDIRECT)).await;
    assert_eq!(status, 400);
    assert!(page.contains("could not be fetched") && !page.contains("private"), "{page}");

    let server = Server::start(&["--oauth-allow-http", "--allow-private-cidr", "127.0.0.0/8"]);
    server
        .call_as(Some(TOKEN), Method::PUT, "/admin/end-users/alice", Some(&json!({"password": "alice-password"})))
        .await;
    let flow = Flow::new(&server, "");
    let (status, _, page) = flow.page(&flow.request(&good, REDIRECT)).await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("Document host"), "the page names the client from its document");
    let code = flow.code(&good).await;
    let tokens = flow.exchange(&good, &code).await;
    assert_eq!(list_with(&server, "", tokens["access_token"].as_str().unwrap()).await.0, 200);

    let unreachable = "http://127.0.0.1:9/client.json".to_string();
    for (url, said) in [
        (&huge, "larger"),
        (&liar, "does not name its own URL"),
        (&slow, "could not be fetched"),
        (&unreachable, "could not be fetched"),
    ] {
        let started = std::time::Instant::now();
        let (status, _, page) = flow.page(&flow.request(url, REDIRECT)).await;
        assert_eq!(status, 400, "{url}: {page}");
        assert!(page.contains(said), "{said}: {page}");
        assert!(started.elapsed() < std::time::Duration::from_secs(15), "a slow document is given up on");
    }
}

/// A client that came to the default tenant through `/t/default/mcp`
/// finds every URL under `/t/default` (the SDKs refuse a resource that is
/// not the URL they called, and an issuer other than the one they derived
/// the metadata's URL from); one that came to `/mcp` keeps `/mcp` and `/`.
/// A token is for the MCP URL it was asked for.
#[tokio::test(flavor = "multi_thread")]
async fn a_client_of_the_default_tenants_t_root_finds_every_url_under_that_root() {
    let (server, _plugins) = confirming_server(&[]).await;
    let http = reqwest::Client::new();
    let get = |url: String| {
        let http = http.clone();
        async move {
            let response = http.get(&url).send().await.unwrap();
            assert_eq!(response.status(), 200, "{url}");
            response.json::<Value>().await.unwrap()
        }
    };
    for (root, metadata_path) in [("/t/default", "/t/default/mcp"), ("", "/mcp")] {
        let issuer = format!("{}{root}", server.base);
        let mcp = format!("{issuer}/mcp");
        // The challenge at the MCP URL the client used...
        let (status, challenge, _) = list_with(&server, root, "").await;
        assert_eq!(status, 401);
        let metadata_url = challenge.split("resource_metadata=\"").nth(1).unwrap().trim_end_matches('"').to_string();
        assert_eq!(metadata_url, format!("{}/.well-known/oauth-protected-resource{metadata_path}", server.base));
        // ...names metadata whose resource is that URL, and whose issuer is
        // its root.
        let metadata = get(metadata_url).await;
        assert_eq!(metadata["resource"], mcp, "{root}");
        assert_eq!(metadata["authorization_servers"], json!([issuer]), "{root}");
        // The issuer's metadata, where RFC 8414 derives it from the issuer.
        let server_metadata = get(format!("{}/.well-known/oauth-authorization-server{root}", server.base)).await;
        assert_eq!(server_metadata["issuer"], issuer, "{root}");
        for endpoint in ["authorization_endpoint", "token_endpoint", "registration_endpoint", "revocation_endpoint"] {
            let url = server_metadata[endpoint].as_str().unwrap();
            assert!(url.starts_with(&format!("{issuer}/oauth/")), "{root}: {endpoint} {url}");
        }
        // The same documents under the root itself.
        assert_eq!(get(format!("{issuer}/.well-known/oauth-protected-resource")).await, metadata, "{root}");
        assert_eq!(get(format!("{issuer}/.well-known/oauth-authorization-server")).await, server_metadata, "{root}");

        // The flow through that root: the answer's `iss` is the issuer, and
        // the token works at the MCP URL it was asked for.
        let flow = Flow::new(&server, root);
        let client_id = flow.register(&[REDIRECT]).await;
        let fields = match flow.sign_in(&flow.request(&client_id, REDIRECT), "alice", "alice-password", "allow").await {
            SentBack::Client(fields) => fields,
            other => panic!("{root}: no code: {other:?}"),
        };
        assert_eq!(fields["iss"], issuer, "{root}");
        let tokens = flow.exchange(&client_id, &fields["code"]).await;
        let access = tokens["access_token"].as_str().unwrap();
        assert_eq!(list_with(&server, root, access).await.0, 200, "{root}");
        // Not at the default tenant's other MCP URL: it is not the token's
        // audience.
        let other = if root.is_empty() { "/t/default" } else { "" };
        let (status, challenge, _) = list_with(&server, other, access).await;
        assert_eq!(status, 401, "{root}");
        assert!(challenge.starts_with("Bearer error=\"invalid_token\""), "{challenge}");
    }
}

/// A stand-in external identity provider on 127.0.0.1 (plain http: a
/// server reaches it with `--oauth-allow-http --allow-private-cidr
/// 127.0.0.0/8`): its OIDC discovery document and a key set it can change,
/// counting the key set's fetches; it signs ES256 access tokens.
pub(crate) struct StandInProvider {
    pub(crate) issuer: String,
    jwks: std::sync::Arc<std::sync::Mutex<Value>>,
    jwks_fetches: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    _serving: tokio::task::JoinHandle<()>,
}

/// One of the provider's keys.
pub(crate) struct ProviderKey {
    kid: String,
    pair: ring::signature::EcdsaKeyPair,
}

impl ProviderKey {
    pub(crate) fn new(kid: &str) -> ProviderKey {
        let alg = &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING;
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = ring::signature::EcdsaKeyPair::generate_pkcs8(alg, &rng).unwrap();
        ProviderKey {
            kid: kid.into(),
            pair: ring::signature::EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).unwrap(),
        }
    }

    fn jwk(&self) -> Value {
        use ring::signature::KeyPair;
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let point = self.pair.public_key().as_ref();
        json!({ "kty": "EC", "crv": "P-256", "kid": self.kid, "alg": "ES256", "use": "sig",
                "x": b64.encode(&point[1..33]), "y": b64.encode(&point[33..]) })
    }
}

impl StandInProvider {
    async fn start() -> StandInProvider {
        StandInProvider::start_named(None).await
    }

    /// A provider on 127.0.0.1 whose issuer URL names `host` (a name the
    /// server resolves to 127.0.0.1) rather than the address.
    pub(crate) async fn start_named(host: Option<&str>) -> StandInProvider {
        use axum::routing::get;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let issuer = match host {
            Some(host) => format!("http://{host}:{}", address.port()),
            None => format!("http://{address}"),
        };
        let discovery = json!({ "issuer": issuer, "jwks_uri": format!("{issuer}/jwks.json") });
        let jwks = std::sync::Arc::new(std::sync::Mutex::new(json!({ "keys": [] })));
        let jwks_fetches = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (served, fetches) = (jwks.clone(), jwks_fetches.clone());
        let app = axum::Router::new()
            .route(
                "/.well-known/openid-configuration",
                get(move || {
                    let discovery = discovery.clone();
                    async move { axum::Json(discovery) }
                }),
            )
            .route(
                "/jwks.json",
                get(move || {
                    fetches.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let keys = served.lock().unwrap().clone();
                    async move { axum::Json(keys) }
                }),
            );
        let serving = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        StandInProvider { issuer, jwks, jwks_fetches, _serving: serving }
    }

    /// Publishes `keys` as its key set.
    pub(crate) fn publish(&self, keys: &[&ProviderKey]) {
        *self.jwks.lock().unwrap() = json!({ "keys": keys.iter().map(|k| k.jwk()).collect::<Vec<_>>() });
    }

    fn jwks_fetches(&self) -> usize {
        self.jwks_fetches.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// An access token for `audience` naming `user`, signed by `key` with
    /// header `kid` (the key's, unless given) and `typ` (none if `None`).
    pub(crate) fn token(
        &self,
        key: &ProviderKey,
        kid: Option<&str>,
        typ: Option<&str>,
        audience: &str,
        user: &str,
    ) -> String {
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let mut header = json!({ "alg": "ES256", "kid": kid.unwrap_or(&key.kid) });
        if let Some(typ) = typ {
            header["typ"] = json!(typ);
        }
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
        let claims = json!({ "iss": self.issuer, "aud": audience, "sub": user, "exp": now + 600, "iat": now,
                             "scope": "tools:read tools:call", "client_id": "stand-in-client" });
        let signed = format!("{}.{}", b64.encode(header.to_string()), b64.encode(claims.to_string()));
        let signature = key.pair.sign(&ring::rand::SystemRandom::new(), signed.as_bytes()).unwrap();
        format!("{signed}.{}", b64.encode(signature.as_ref()))
    }
}

/// A server whose tenant `acme` takes `provider`'s tokens (with `extra`
/// in its OAuth setting), and has the end user alice.
async fn external_issuer_server(provider: &StandInProvider, extra: Value) -> Server {
    let server = Server::start(&["--oauth-allow-http", "--allow-private-cidr", "127.0.0.0/8"]);
    server.create_tenant("acme", json!({})).await;
    set_issuer(&server, provider, extra).await;
    let password = json!({ "password": "alice-password" });
    let (status, body) =
        server.call_as(Some(TOKEN), Method::PUT, "/t/acme/admin/end-users/alice", Some(&password)).await;
    assert_eq!(status, 204, "{body}");
    server
}

async fn set_issuer(server: &Server, provider: &StandInProvider, extra: Value) -> Value {
    let mut setting = json!({ "issuer": provider.issuer });
    setting.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    let (status, body) = server.call_as(Some(TOKEN), Method::PUT, "/admin/tenants/acme/oauth", Some(&setting)).await;
    assert_eq!(status, 200, "{body}");
    body
}

#[tokio::test(flavor = "multi_thread")]
async fn an_external_token_must_be_an_access_token_naming_one_of_the_tenants_end_users() {
    let provider = StandInProvider::start().await;
    let key = ProviderKey::new("k1");
    provider.publish(&[&key]);
    let server = external_issuer_server(&provider, json!({})).await;
    let audience = format!("{}/t/acme/mcp", server.base);
    let status = |token: String| {
        let server = &server;
        async move { list_with(server, "/t/acme", &token).await.0 }
    };
    // An access token, typed as one or not typed, for alice.
    for typ in [Some("at+jwt"), Some("application/at+jwt"), None] {
        assert_eq!(status(provider.token(&key, None, typ, &audience, "alice")).await, 200, "{typ:?}");
    }
    // Another kind of JWT the provider signs (an ID token is `JWT`).
    for typ in ["JWT", "id_token+jwt"] {
        assert_eq!(status(provider.token(&key, None, Some(typ), &audience, "alice")).await, 401, "{typ}");
    }
    // A name the tenant never made, though the provider signed it.
    assert_eq!(status(provider.token(&key, None, Some("at+jwt"), &audience, "mallory")).await, 401);
    // Unless the operator lets the provider name anyone.
    let setting = set_issuer(&server, &provider, json!({ "anyEndUser": true })).await;
    assert_eq!(setting["anyEndUser"], true);
    assert_eq!(status(provider.token(&key, None, Some("at+jwt"), &audience, "mallory")).await, 200);
    // Only an operator may: a tenant's own publisher cannot.
    let (_, publisher) = server.create_key(Some("acme"), "publisher").await;
    let open = json!({ "issuer": provider.issuer, "anyEndUser": true });
    let (status, _) = server.call_as(Some(&publisher), Method::PUT, "/admin/tenants/acme/oauth", Some(&open)).await;
    assert_eq!(status, 403);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_token_naming_a_new_key_fetches_the_issuers_keys_again_at_most_once_in_a_while() {
    let provider = StandInProvider::start().await;
    let (old, new) = (ProviderKey::new("old"), ProviderKey::new("new"));
    provider.publish(&[&old]);
    let server = external_issuer_server(&provider, json!({})).await;
    let audience = format!("{}/t/acme/mcp", server.base);
    let status = |token: String| {
        let server = &server;
        async move { list_with(server, "/t/acme", &token).await.0 }
    };
    assert_eq!(status(provider.token(&old, None, None, &audience, "alice")).await, 200);
    assert_eq!(provider.jwks_fetches(), 1);
    // The provider rotates its keys: a token signed with the new one is
    // taken at once, though the old set is still cached.
    provider.publish(&[&old, &new]);
    assert_eq!(status(provider.token(&new, None, None, &audience, "alice")).await, 200);
    assert_eq!(provider.jwks_fetches(), 2);
    // Tokens naming made-up keys cost no fetch each: within the interval
    // the cached set answers (and so a key published meanwhile waits).
    for i in 0..10 {
        let kid = format!("made-up-{i}");
        assert_eq!(status(provider.token(&new, Some(&kid), None, &audience, "alice")).await, 401, "{kid}");
    }
    let newer = ProviderKey::new("newer");
    provider.publish(&[&new, &newer]);
    assert_eq!(status(provider.token(&newer, None, None, &audience, "alice")).await, 401);
    assert_eq!(provider.jwks_fetches(), 2);
    // Known keys keep working from the cache.
    assert_eq!(status(provider.token(&new, None, None, &audience, "alice")).await, 200);
}

/// A tenant that exists and one that does not; a toolset of the first and
/// a name that is none of its toolsets.
const REAL_TENANT: &str = "tenant-that-is";
const NO_TENANT: &str = "tenant-not-there";
const REAL_TOOLSET: &str = "set-that-is";
const NO_TOOLSET: &str = "set-not-there";

/// An answer as a stranger sees it, made comparable between tenants and
/// toolsets: the status, every header but the date, the length and the
/// request id, and the body, with the tenant's and the toolset's names
/// written `{T}` and `{S}`, random tokens (32 characters and more) and
/// registration times masked. Timing is not compared (docs/security.md).
async fn as_seen(response: reqwest::Response, tenant: &str, toolset: &str) -> String {
    let mut seen = format!("{}\n", response.status().as_u16());
    let mut names: Vec<&str> = response
        .headers()
        .keys()
        .map(|k| k.as_str())
        .filter(|k| !matches!(*k, "date" | "content-length" | "x-request-id"))
        .collect();
    names.sort();
    names.dedup();
    for name in names {
        for value in response.headers().get_all(name) {
            seen.push_str(&format!("{name}: {}\n", value.to_str().unwrap_or("(not text)")));
        }
    }
    seen.push_str(&response.text().await.unwrap_or_default());
    let seen = seen.replace(tenant, "{T}").replace(toolset, "{S}");
    let seen = regex::Regex::new(r"[A-Za-z0-9_\-]{32,}").unwrap().replace_all(&seen, "<random>").into_owned();
    regex::Regex::new(r#""client_id_issued_at":\s*\d+"#)
        .unwrap()
        .replace_all(&seen, "\"client_id_issued_at\":<time>")
        .into_owned()
}

/// Everything a stranger (no key, or another tenant's) may ask about
/// `tenant` and its `toolset`, from `source` (a 127.0.0.0/8 address of its
/// own, so that the sign-in throttles of one run do not meet another's) →
/// (what, the answer as seen).
async fn what_a_stranger_sees(
    server: &Server,
    tenant: &str,
    toolset: &str,
    source: &str,
    document: &str,
    other_key: &str,
) -> Vec<(&'static str, String)> {
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .local_address(source.parse::<std::net::IpAddr>().unwrap())
        .build()
        .unwrap();
    let (base, root) = (&server.base, format!("{}/t/{tenant}", server.base));
    let list = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {} });
    let mcp = |url: String, key: Option<&str>| {
        let request = http
            .post(url)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .json(&list);
        match key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    };
    let authorize = |client_id: &str, resource: &str| -> Vec<(String, String)> {
        [
            ("response_type", "code"),
            ("client_id", client_id),
            ("redirect_uri", REDIRECT),
            ("state", "st-1"),
            ("code_challenge", &challenge(VERIFIER)),
            ("code_challenge_method", "S256"),
            ("resource", resource),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    };
    let (tenant_mcp, toolset_mcp) = (format!("{root}/mcp"), format!("{root}/toolsets/{toolset}/mcp"));
    let made_up_client = "plinth_client_madeupmadeupmadeupmadeupmadeupmadeupmad";
    let made_up_tx = "00000000-0000-4000-8000-000000000000";
    let requests: Vec<(&'static str, reqwest::RequestBuilder)> = vec![
        ("resource metadata", http.get(format!("{base}/.well-known/oauth-protected-resource/t/{tenant}/mcp"))),
        ("resource metadata under the root", http.get(format!("{root}/.well-known/oauth-protected-resource"))),
        ("server metadata", http.get(format!("{base}/.well-known/oauth-authorization-server/t/{tenant}"))),
        ("server metadata under the root", http.get(format!("{root}/.well-known/oauth-authorization-server"))),
        (
            "a toolset's resource metadata",
            http.get(format!("{base}/.well-known/oauth-protected-resource/t/{tenant}/toolsets/{toolset}/mcp")),
        ),
        ("MCP, no key", mcp(tenant_mcp.clone(), None)),
        ("MCP, a made-up token", mcp(tenant_mcp.clone(), Some("plinth_at_madeupmadeupmadeupmadeupmadeupmadeup"))),
        ("MCP, a JWT", mcp(tenant_mcp.clone(), Some("eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln"))),
        ("MCP, another tenant's key", mcp(tenant_mcp.clone(), Some(other_key))),
        ("a toolset's MCP, no key", mcp(toolset_mcp.clone(), None)),
        ("a toolset's MCP, another tenant's key", mcp(toolset_mcp.clone(), Some(other_key))),
        ("A2T, no key", http.get(format!("{root}/tools"))),
        ("A2T, another tenant's key", http.get(format!("{root}/tools")).bearer_auth(other_key)),
        ("a toolset's A2T, no key", http.get(format!("{root}/toolsets/{toolset}/tools"))),
        ("OTC health", http.get(format!("{root}/otc/health"))),
        ("a toolset's OTC health", http.get(format!("{root}/toolsets/{toolset}/otc/health"))),
        (
            "sign-in, an unknown client",
            http.get(format!("{root}/oauth/authorize")).query(&authorize(made_up_client, &tenant_mcp)),
        ),
        (
            "sign-in, a document's client",
            http.get(format!("{root}/oauth/authorize")).query(&authorize(document, &tenant_mcp)),
        ),
        (
            "sign-in for a toolset",
            http.get(format!("{root}/oauth/authorize")).query(&authorize(document, &toolset_mcp)),
        ),
        (
            "token, a made-up code",
            http.post(format!("{root}/oauth/token")).form(&[
                ("grant_type", "authorization_code"),
                ("code", "plinth_ac_madeupmadeupmadeupmadeupmadeupmadeup"),
                ("redirect_uri", REDIRECT),
                ("client_id", document),
                ("code_verifier", VERIFIER),
            ]),
        ),
        (
            "token, a made-up refresh token",
            http.post(format!("{root}/oauth/token")).form(&[
                ("grant_type", "refresh_token"),
                ("refresh_token", "plinth_rt_madeupmadeupmadeupmadeupmadeupmadeup"),
                ("client_id", made_up_client),
            ]),
        ),
        (
            "registration",
            http.post(format!("{root}/oauth/register")).json(&json!({
                "client_name": "Prober", "application_type": "native", "redirect_uris": [REDIRECT],
                "token_endpoint_auth_method": "none"
            })),
        ),
        (
            "revocation",
            http.post(format!("{root}/oauth/revoke"))
                .form(&[("token", "plinth_rt_madeupmadeupmadeupmadeupmadeupmadeup"), ("client_id", document)]),
        ),
        ("the catalog", http.get(format!("{root}/catalog"))),
        ("the catalog's sign-in page", http.get(format!("{root}/catalog/sign-in"))),
        (
            "the catalog's sign-in, a wrong key",
            http.post(format!("{root}/catalog/sign-in"))
                .header("cookie", "plinth_catalog_sign_in=0123456789abcdef0123456789abcdef")
                .form(&[("key", "plk_0123456789abcdef_wrong"), ("sign_in_token", "0123456789abcdef0123456789abcdef")]),
        ),
        ("the confirmation page", http.get(format!("{root}/cheq/confirm"))),
        (
            "the confirmation login, a wrong password",
            http.post(format!("{root}/cheq/login"))
                .header("cookie", "plinth_cheq_login=0123456789abcdef0123456789abcdef")
                .form(&[
                    ("user", "alice"),
                    ("password", "wrong"),
                    ("resource_uri", ""),
                    ("login_token", "0123456789abcdef0123456789abcdef"),
                ]),
        ),
        ("a made-up transaction", http.get(format!("{root}/cheq/transactions/{made_up_tx}"))),
        ("a made-up transaction's CHEQ", http.get(format!("{root}/cheq/transactions/{made_up_tx}/cheq"))),
    ];
    let mut seen = Vec::new();
    for (what, request) in requests {
        seen.push((what, as_seen(request.send().await.unwrap(), tenant, toolset).await));
    }
    // Signing in at the page, for the toolset's MCP URL: a wrong password,
    // and a person who denies.
    for (what, decision) in [("signing in, a wrong password", "allow"), ("signing in, denied", "deny")] {
        let query = authorize(document, &toolset_mcp);
        let page = http.get(format!("{root}/oauth/authorize")).query(&query).send().await.unwrap();
        let cookie = page.headers().get(reqwest::header::SET_COOKIE).map(|c| c.to_str().unwrap().to_string());
        let html = page.text().await.unwrap();
        let mut form = query.clone();
        if html.contains("login_token") {
            form.push(("login_token".into(), crate::support::hidden(&html, "login_token")));
        }
        form.extend(
            [("user", "alice"), ("password", "wrong"), ("decision", decision)].map(|(k, v)| (k.into(), v.into())),
        );
        let cookie = cookie.unwrap_or_default().split(';').next().unwrap_or_default().to_string();
        let answer =
            http.post(format!("{root}/oauth/authorize")).header("cookie", cookie).form(&form).send().await.unwrap();
        seen.push((what, as_seen(answer, tenant, toolset).await));
    }
    seen
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stranger_cannot_tell_a_tenant_or_toolset_that_does_not_exist_from_one_that_does() {
    let server = Server::start(&["--oauth-allow-http", "--allow-private-cidr", "127.0.0.0/8"]);
    server.create_tenant(REAL_TENANT, json!({})).await;
    server.create_tenant("other", json!({})).await;
    let echo = std::fs::read(plugins_dir().join("echo.wasm")).unwrap();
    assert_eq!(server.deploy_as(TOKEN, REAL_TENANT, echo).await.0, 201);
    let password = json!({ "password": "alice-password" });
    let path = format!("/t/{REAL_TENANT}/admin/end-users/alice");
    assert_eq!(server.call_as(Some(TOKEN), Method::PUT, &path, Some(&password)).await.0, 204);
    let toolset = json!({ "description": "", "tools": [{ "name": "echo" }] });
    let path = format!("/t/{REAL_TENANT}/admin/toolsets/{REAL_TOOLSET}");
    assert_eq!(server.call_as(Some(TOKEN), Method::PUT, &path, Some(&toolset)).await.0, 201);
    let (_, other_key) = server.create_key(Some("other"), "consumer").await;
    let document = client_document(
        |url: &str| {
            json!({ "client_id": url, "client_name": "Document host", "redirect_uris": [REDIRECT],
                    "token_endpoint_auth_method": "none" })
            .to_string()
        },
        std::time::Duration::ZERO,
    )
    .await;

    let exists = what_a_stranger_sees(&server, REAL_TENANT, REAL_TOOLSET, "127.0.0.11", &document, &other_key).await;
    // What a tenant with the defaults shows (so that the comparison below
    // is of answers that say something).
    let shown = |what: &str| exists.iter().find(|(w, _)| *w == what).map(|(_, seen)| seen.as_str()).unwrap();
    assert!(shown("resource metadata").starts_with("200\n"), "{}", shown("resource metadata"));
    assert!(shown("a toolset's resource metadata").starts_with("200\n"), "{}", shown("a toolset's resource metadata"));
    assert!(shown("server metadata").starts_with("200\n"), "{}", shown("server metadata"));
    assert!(shown("MCP, no key").contains("resource_metadata="), "{}", shown("MCP, no key"));
    assert!(shown("sign-in for a toolset").starts_with("200\n"), "{}", shown("sign-in for a toolset"));
    assert!(shown("signing in, a wrong password").starts_with("401\n"), "{}", shown("signing in, a wrong password"));
    assert!(shown("signing in, denied").starts_with("303\n"), "{}", shown("signing in, denied"));
    assert!(shown("registration").starts_with("201\n"), "{}", shown("registration"));
    assert!(shown("MCP, another tenant's key").starts_with("404\n"), "{}", shown("MCP, another tenant's key"));

    for (tenant, toolset, source) in [(REAL_TENANT, NO_TOOLSET, "127.0.0.12"), (NO_TENANT, REAL_TOOLSET, "127.0.0.13")]
    {
        let seen = what_a_stranger_sees(&server, tenant, toolset, source, &document, &other_key).await;
        assert_eq!(seen.len(), exists.len());
        for ((what, there), (_, here)) in exists.iter().zip(&seen) {
            assert_eq!(here, there, "{what}: {tenant}/{toolset} answers otherwise than {REAL_TENANT}/{REAL_TOOLSET}");
        }
    }

    // Failing as one name at one made-up tenant locks that name there, and
    // nowhere else: were made-up tenants one, the lock would tell them from
    // real ones.
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .local_address("127.0.0.14".parse::<std::net::IpAddr>().unwrap())
        .build()
        .unwrap();
    let login = |tenant: &str| {
        http.post(format!("{}/t/{tenant}/cheq/login", server.base))
            .header("cookie", "plinth_cheq_login=0123456789abcdef0123456789abcdef")
            .form(&[
                ("user", "zed"),
                ("password", "wrong"),
                ("resource_uri", ""),
                ("login_token", "0123456789abcdef0123456789abcdef"),
            ])
            .send()
    };
    let mut statuses = Vec::new();
    for _ in 0..6 {
        statuses.push(login("made-up-first").await.unwrap().status().as_u16());
    }
    assert_eq!(statuses.last(), Some(&429), "the name is locked where it failed: {statuses:?}");
    let mut seen = Vec::new();
    for tenant in [REAL_TENANT, NO_TENANT] {
        let answer = login(tenant).await.unwrap();
        seen.push(as_seen(answer, tenant, REAL_TOOLSET).await);
    }
    assert!(seen[0].starts_with("401\n"), "{}", seen[0]);
    assert_eq!(seen[1], seen[0]);
}
