//! Tools that act with a person's own account (docs/authorization.md),
//! end to end against the real binary: what a version publishes on every
//! door, and that the token stays outside the tool — a hostile fixture
//! (`tests/fixtures/steal-token`) tries every way to read or move it.

use crate::support::{Server, fixture};
use reqwest::Method;
use serde_json::{Value, json};

/// A token that looks like one, and is unique to a test.
fn token() -> String {
    format!("tok-{}", uuid::Uuid::new_v4().simple())
}

/// A server with `tools` deployed from the fixtures, and the default
/// tenant's config for them.
async fn server_with(tools: &[&str], config: &[(&str, &str, &str)]) -> Server {
    let server = Server::start(&["--allow-private-cidr", "127.0.0.0/8", "--oauth-allow-http"]);
    for tool in tools {
        let (status, body) = server.deploy(fixture(&format!("{tool}.wasm")), "").await;
        assert!(status == 200 || status == 201, "{tool}: {body}");
    }
    for (tool, key, value) in config {
        let response = server
            .request(Method::PUT, &format!("/admin/config/{tool}/{key}"))
            .body(value.to_string())
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success(), "{tool}.{key}: {}", response.text().await.unwrap());
    }
    server
}

/// The OTC definition of the tool whose name ends in `pascal` (`MyInbox`).
async fn otc_definition(server: &Server, pascal: &str) -> Value {
    let (_, listed) = server.get("/otc/tools").await;
    listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"].as_str().is_some_and(|n| n.ends_with(pascal)))
        .cloned()
        .unwrap_or_else(|| panic!("no OTC tool {pascal}: {listed}"))
}

/// An OTC call of the tool whose name ends in `pascal`, with `context`.
async fn otc_call(server: &Server, pascal: &str, input: Value, context: Value) -> (u16, Value) {
    let definition = otc_definition(server, pascal).await;
    let body = json!({ "request": { "tool_id": definition["id"], "input": input, "context": context } });
    server.post("/otc/tools/call", &body).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_versions_accounts_are_published_on_every_door_and_a_call_without_a_grant_runs_nothing() {
    let (inbox_url, inbox) = fake_inbox::spawn(|url| fake_inbox::Options::new(url)).await.unwrap();
    let server = server_with(&["my_inbox"], &[("my_inbox", "inbox-url", &inbox_url)]).await;
    // A2T: the signature's `authorization` extension.
    let id = server.tool_id("my_inbox").await;
    let (status, signature) = server.get(&format!("/tools/{id}")).await;
    assert_eq!(status, 200, "{signature}");
    assert_eq!(signature["authorization"], json!([{ "provider": "inbox", "scopes": ["inbox.read"] }]), "{signature}");
    // OTC: `requirements.authorization`.
    let definition = otc_definition(&server, "MyInbox").await;
    assert_eq!(
        definition["requirements"]["authorization"],
        json!([{ "id": "inbox", "oauth2": { "scopes": ["inbox.read"] } }]),
        "{definition}"
    );
    // MCP: `_meta.authorization`.
    let listing = crate::mcp::Mcp::modern(&server).list().await;
    let tool = listing.iter().find(|t| t["name"] == "my_inbox").unwrap();
    assert_eq!(tool["_meta"]["authorization"], json!([{ "provider": "inbox", "scopes": ["inbox.read"] }]), "{tool}");

    // No provider configured: a call is refused, naming what to do, and
    // nothing reached the API.
    let (status, body) = server
        .request(Method::POST, &format!("/tools/{id}:invoke"))
        .header("plinth-end-user", "alice")
        .json(&crate::support::invocation("my_inbox", &[("unread_only", json!(false))]))
        .send()
        .await
        .map(|r| (r.status().as_u16(), r))
        .unwrap();
    let body: Value = body.json().await.unwrap();
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "authorization_unavailable", "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("PUT /admin/authorization-providers/inbox"), "{body}");
    // Without an end user: refused before anything.
    let (status, body) = otc_call(&server, "MyInbox", json!({ "unread_only": false }), json!({})).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("end_user_required")), "{body}");
    assert!(body["message"].as_str().unwrap().contains("own account"), "{body}");
    assert!(inbox.seen().is_empty(), "{:?}", inbox.seen());
}

/// Every string in `value`, recursively.
fn strings(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
        Value::Object(map) => map.iter().for_each(|(k, v)| {
            out.push(k.clone());
            strings(v, out)
        }),
        _ => {}
    }
}

/// The hostile tool (`steal_token`) on a server whose tenant stores a
/// secret under every id a token might be filed under; the inbox (made by
/// `inbox` from its URL and the server's) and the collector (a host the
/// grant does not name) it is configured with; the inbox's URL.
async fn hostile_server(
    inbox: impl FnOnce(&str, &str) -> fake_inbox::Options,
) -> (Server, fake_inbox::Inbox, fake_inbox::Inbox, String) {
    let server = server_with(&["steal_token"], &[]).await;
    let base = server.base.clone();
    let (inbox_url, inbox) = fake_inbox::spawn(|url| inbox(url, &base)).await.unwrap();
    let (collector_url, collector) = fake_inbox::spawn(|url| fake_inbox::Options::new(url)).await.unwrap();
    for (key, value) in [("inbox-url", &inbox_url), ("collector-url", &collector_url)] {
        let response = server
            .request(Method::PUT, &format!("/admin/config/steal_token/{key}"))
            .body(value.clone())
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success(), "{key}: {}", response.text().await.unwrap());
    }
    // The secrets the tool reads, stored for the tenant: none is the token.
    for id in ["inbox", "inbox-token", "inbox.access-token", "inbox.refresh-token", "access-token", "refresh-token"]
        .into_iter()
        .chain(["token", "authorization", "bearer", "oauth.inbox", "grant.inbox", "provider.inbox", "client-secret"])
    {
        let response = server
            .request(Method::PUT, &format!("/admin/secrets/{id}"))
            .body(format!("stored-{id}"))
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success(), "{id}: {}", response.text().await.unwrap());
    }
    (server, inbox, collector, inbox_url)
}

/// The hostile tool called over OTC with `context`, answering and then
/// failing; then everything it could have left `secret` in — its answers,
/// what the inbox got beside its `Authorization`, what the collector got
/// (directly and through the inbox's cross-origin redirect), the server's
/// log, console, audit, usage and store — is searched for it. `secret`
/// is the token the inbox sees (`None`: learn it from the inbox).
async fn steal_and_search(
    server: &Server,
    inbox: &fake_inbox::Inbox,
    collector: &fake_inbox::Inbox,
    context: Value,
    secret: Option<String>,
) {
    // What the inbox saw before (a provider's sign-in and code exchange).
    let before = inbox.seen().len();
    let mut answers = Vec::new();
    for fail in [false, true] {
        let (status, body) = otc_call(server, "StealToken", json!({ "fail": fail }), context.clone()).await;
        assert_eq!(status, 200, "{body}");
        // What the tool saw of its own requests: the token only ever as stars.
        let report =
            if fail { body["result"]["error"]["message"].clone() } else { body["result"]["value"]["report"].clone() };
        assert!(report.as_str().is_some_and(|r| r.contains("echo-own-authorization")), "{body}");
        answers.push(body.to_string());
    }
    let seen = inbox.seen().split_off(before);
    assert!(!seen.is_empty());
    let presented = seen[0].authorization.clone().expect("the inbox got a token");
    let secret = secret.unwrap_or_else(|| presented.strip_prefix("Bearer ").unwrap().to_string());
    assert!(secret.len() >= 16, "{secret}");
    for text in &answers {
        assert!(!text.contains(&secret), "the answer carries the token: {text}");
    }
    // The inbox got the person's token on every request of the tool's, in
    // place of the tool's own, and nothing else.
    for request in &seen {
        assert_eq!(request.authorization.as_deref(), Some(format!("Bearer {secret}").as_str()), "{request:?}");
        for (name, value) in &request.headers {
            if name != "authorization" {
                assert!(!value.contains(&secret), "{name}: {value}");
            }
        }
    }
    // The collector (a host the grant does not name, reached directly and
    // by following the inbox's cross-origin redirect) never did.
    let collected = collector.seen();
    assert!(collected.iter().any(|r| r.path.contains("via=redirect")), "the tool followed the redirect: {collected:?}");
    for request in &collected {
        let mut all = vec![request.path.clone(), request.body.clone().unwrap_or_default()];
        all.extend(request.headers.iter().map(|(_, v)| v.clone()));
        assert!(all.iter().all(|text| !text.contains(&secret)), "the collector got it: {request:?}");
    }
    // Nor the server's log, the console, the audit log or the store.
    assert!(!server.logs().contains(&secret), "the server logged it");
    for path in ["/admin/logs", "/admin/audit", "/admin/usage"] {
        let (_, body) = server.get(path).await;
        let mut texts = Vec::new();
        strings(&body, &mut texts);
        assert!(texts.iter().all(|t| !t.contains(&secret)), "{path} carries it");
    }
    // Not in the store as it is: a supplied token is never kept, a grant's
    // only sealed.
    for file in ["registry.sqlite3", "registry.sqlite3-wal"] {
        let database = std::fs::read(server.data.path().join(file)).unwrap_or_default();
        assert!(!database.windows(secret.len()).any(|w| w == secret.as_bytes()), "{file} holds the token as it is");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hostile_tool_never_holds_the_persons_token_nor_sends_it_anywhere_else() {
    let (server, inbox, collector, _) = hostile_server(|url, _| fake_inbox::Options::new(url)).await;
    // The caller's own token for the call (OTC `context.authorization`):
    // attached like a grant's, and never stored.
    let secret = token();
    let context = json!({ "user_id": "alice", "authorization": [{ "id": "inbox", "token": secret }] });
    steal_and_search(&server, &inbox, &collector, context, Some(secret)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hostile_tool_acting_with_a_stored_grant_never_holds_its_token_either() {
    use crate::authorization::press_continue;
    use crate::authorization_support::{Person, action_of};
    // fake-inbox's own provider issues alice's grant (opaque tokens).
    let (server, inbox, collector, issuer) = hostile_server(|url, server| {
        let callback = format!("{server}/connections/callback");
        let client = fake_inbox::ProviderOptions::new("plinth", "fake-inbox-secret", callback);
        fake_inbox::Options { provider: Some(client), ..fake_inbox::Options::new(url) }
    })
    .await;
    let settings = json!({ "displayName": "Fake Inbox", "issuer": issuer, "clientId": "plinth", "clientSecret": "fake-inbox-secret" });
    let (status, body) = server
        .call_as(Some(crate::support::TOKEN), Method::PUT, "/admin/authorization-providers/inbox", Some(&settings))
        .await;
    assert_eq!(status, 200, "{body}");
    server.add_end_user("", "alice").await;

    // alice connects: the challenge, Plinth's pages, the provider's, back.
    let (status, body) = otc_call(&server, "StealToken", json!({ "fail": false }), json!({ "user_id": "alice" })).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("missing_requirements")), "{body}");
    let url = body["missing_requirements"]["authorization"][0]["url"].as_str().unwrap().to_string();
    let alice = Person::new();
    let page = alice.log_in_at(&url, "alice").await;
    let to_provider = press_continue(&alice, &page, &url).await;
    let authorize = to_provider.location.clone().unwrap_or_else(|| panic!("{}", to_provider.html));
    let sign_in = alice.get(&authorize).await;
    assert_eq!(sign_in.status, 200, "{}", sign_in.html);
    let request = crate::support::hidden(&sign_in.html, "request");
    let action = reqwest::Url::parse(&authorize).unwrap().join(&action_of(&sign_in.html)).unwrap();
    let back = alice
        .post(action.as_str(), &[("request", request.as_str()), ("user", "alice"), ("decision", "allow")], &[])
        .await;
    let connected = alice.get(back.location.as_deref().unwrap_or_else(|| panic!("{}", back.html))).await;
    assert_eq!(connected.status, 200, "{}", connected.html);
    let tools_requests = inbox.seen().into_iter().filter(|r| r.path.starts_with("/v1/")).count();
    assert_eq!(tools_requests, 0, "nothing ran before the grant");

    steal_and_search(&server, &inbox, &collector, json!({ "user_id": "alice" }), None).await;
}

/// A server serving my_inbox, with the provider `inbox` set from its file
/// (`--authorization-provider`) at `issuer`.
async fn inbox_server(inbox_url: &str, issuer: &str) -> (Server, tempfile::TempDir) {
    let files = tempfile::tempdir().unwrap();
    let settings = files.path().join("inbox.json");
    let provider = json!({ "displayName": "Fake Inbox", "issuer": issuer, "clientId": "plinth", "clientSecret": "fake-inbox-secret" });
    std::fs::write(&settings, provider.to_string()).unwrap();
    let provider_flag = format!("inbox={}", settings.display());
    let config = format!("my_inbox.inbox-url={inbox_url}");
    let server = Server::start(&[
        "--allow-private-cidr",
        "127.0.0.0/8",
        "--oauth-allow-http",
        "--authorization-provider",
        &provider_flag,
        "--tool-config",
        &config,
    ]);
    let (status, body) = server.deploy(fixture("my_inbox.wasm"), "").await;
    assert!(status == 200 || status == 201, "{body}");
    server.add_end_user("", "alice").await;
    server.add_end_user("", "bob").await;
    (server, files)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_without_its_persons_grant_answers_each_door_its_own_challenge_and_runs_nothing() {
    let (inbox_url, inbox) = fake_inbox::spawn(|url| fake_inbox::Options::new(url)).await.unwrap();
    let (server, _files) = inbox_server(&inbox_url, &inbox_url).await;
    let id = server.tool_id("my_inbox").await;
    let link_of = |url: &str| url.rsplit('/').next().unwrap().to_string();

    // A2T: 403 authorization_required, the challenge beside the error and
    // in a Link header.
    let response = server
        .request(Method::POST, &format!("/tools/{id}:invoke"))
        .header("plinth-end-user", "alice")
        .json(&crate::support::invocation("my_inbox", &[("unread_only", json!(false))]))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    let link_header = response.headers().get("link").map(|v| v.to_str().unwrap().to_string());
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "authorization_required", "{body}");
    let challenge = &body["error"]["authorization"][0];
    assert_eq!(
        (challenge["provider"].as_str(), &challenge["scopes"]),
        (Some("inbox"), &json!(["inbox.read"])),
        "{body}"
    );
    let url = challenge["url"].as_str().unwrap().to_string();
    assert!(url.starts_with(&format!("{}/connections/", server.base)), "{url}");
    assert_eq!(challenge["checkUrl"].as_str().unwrap(), format!("{url}/status"));
    assert_eq!(link_header, Some(format!("<{url}>; rel=\"authorization\"")));
    assert!(body["error"]["message"].as_str().unwrap().contains("alice"), "{body}");

    // OTC: the errata's missing_requirements.authorization; the same
    // person gets the same pending link.
    let context = json!({ "user_id": "alice" });
    let (status, body) = otc_call(&server, "MyInbox", json!({ "unread_only": false }), context).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("missing_requirements")), "{body}");
    let challenge = &body["missing_requirements"]["authorization"][0];
    assert_eq!(challenge["id"], "inbox", "{body}");
    assert_eq!(challenge["url"].as_str().unwrap(), url, "the pending link is answered again");
    assert_eq!(challenge["check_url"].as_str().unwrap(), format!("{url}/status"));
    // Another person gets a link of their own.
    let (_, bobs) = otc_call(&server, "MyInbox", json!({ "unread_only": false }), json!({ "user_id": "bob" })).await;
    let bobs_url = bobs["missing_requirements"]["authorization"][0]["url"].as_str().unwrap().to_string();
    assert_ne!(link_of(&bobs_url), link_of(&url));

    // MCP, 2026-07-28 with URL elicitation: input_required with a URL
    // elicitation to the same link, no state to carry.
    let alice = json!({ "endUser": "alice" });
    let answer =
        crate::mcp::Mcp::modern(&server).call("my_inbox", json!({ "unread_only": false }), alice.clone()).await;
    let result = &answer["result"];
    assert_eq!(result["resultType"], "input_required", "{answer}");
    let request = &result["inputRequests"]["authorization:inbox"];
    assert_eq!(
        (request["method"].as_str(), request["params"]["mode"].as_str()),
        (Some("elicitation/create"), Some("url")),
        "{answer}"
    );
    assert_eq!(request["params"]["url"].as_str().unwrap(), url, "{answer}");
    assert!(result.get("requestState").is_none_or(Value::is_null), "{answer}");
    // A client that declined to open it ends the call.
    let declined = json!({ "authorization:inbox": { "action": "decline" } });
    let (_, answer) = crate::mcp::Mcp::modern(&server)
        .request(
            "tools/call",
            json!({ "name": "my_inbox", "arguments": { "unread_only": false }, "inputResponses": declined }),
            alice.clone(),
        )
        .await;
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    assert_eq!(answer["result"]["_meta"]["code"], "authorization_declined", "{answer}");
    // 2025-11-25: error -32042 with the URL elicitation.
    let answer =
        crate::mcp::Mcp::legacy(&server).call("my_inbox", json!({ "unread_only": false }), alice.clone()).await;
    assert_eq!(answer["error"]["code"], -32042, "{answer}");
    assert_eq!(answer["error"]["data"]["elicitations"][0]["url"].as_str().unwrap(), url, "{answer}");
    // A client that opens no URL: a tool error giving the link.
    let answer = crate::mcp::Mcp::without_urls(&server).call("my_inbox", json!({ "unread_only": false }), alice).await;
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    assert_eq!(answer["result"]["_meta"]["code"], "authorization_required", "{answer}");
    assert!(answer["result"]["content"][0]["text"].as_str().unwrap().contains(&url), "{answer}");

    // A name that is no end user of the tenant (who could never log in to
    // follow a link) stores nothing: refused at once, on every door.
    let (status, body) =
        otc_call(&server, "MyInbox", json!({ "unread_only": false }), json!({ "user_id": "zed" })).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("unknown_end_user")), "{body}");

    // Nothing ran: the API was never called.
    assert!(inbox.seen().is_empty(), "{:?}", inbox.seen());
}
