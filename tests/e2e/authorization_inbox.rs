//! The inbox example (`plugins/my-inbox`) as its users meet it, with every
//! part real: oidc-provider as the inbox's OAuth provider
//! (tests/mcp-clients/oidc/inbox-provider.mjs: PKCE, RFC 9207 `iss`,
//! resource indicators, JWT access tokens living five seconds, rotated
//! refresh tokens, RFC 7009 revocation), the stand-in inbox API
//! (tests/fake-inbox), which takes only that provider's tokens for the
//! person and scope they were issued for, the official MCP Python SDK in
//! both revisions, OTC and A2T calls with a consumer key, and a headless
//! Chromium in which each person signs in at Plinth and then at the
//! provider's own pages.
//!
//! One story, in order: alice (MCP 2026-07-28, URL elicitation) and bob
//! (MCP 2025-11-25, -32042) each connect their own account; alice's grant
//! outlives its access token (refreshed); she revokes it on her accounts
//! page and connects again through OTC's challenge, then an operator
//! revokes it and she connects through A2T's; a new version asking for
//! one more scope asks her again (step-up).

use crate::browser;
use crate::inbox_provider::{CLIENT_ID, CLIENT_SECRET, start_inbox_provider};
use crate::mcp_python::Script;
use crate::mcp_support::free_port;
use crate::support::{Server, TOKEN, fixture, invocation, outputs, with_manifest};
use reqwest::Method;
use serde_json::{Value, json};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(15);

/// The server, the inbox and its provider, wired as an operator would.
struct Inbox {
    server: Server,
    inbox: fake_inbox::Inbox,
    /// A consumer key of the default tenant: the agent's.
    key: String,
    tool_id: String,
    _provider: crate::mcp_support::OidcProvider,
}

impl Inbox {
    async fn start() -> Inbox {
        // The provider's port first: the inbox must know its issuer, the
        // provider the inbox (its resource) and Plinth's callback.
        let port = free_port();
        let issuer = format!("http://127.0.0.1:{port}");
        let trusted = issuer.clone();
        let (inbox_url, inbox) =
            fake_inbox::spawn(|url| fake_inbox::Options { issuer: Some(trusted), ..fake_inbox::Options::new(url) })
                .await
                .unwrap();
        let config = format!("my_inbox.inbox-url={inbox_url}");
        let server =
            Server::start(&["--allow-private-cidr", "127.0.0.0/8", "--oauth-allow-http", "--tool-config", &config]);
        let callback = format!("{}/connections/callback", server.base);
        let provider = start_inbox_provider(port, &inbox_url, &callback, &["--access-token-ttl", "5"]);
        let settings = json!({
            "displayName": "Inbox",
            "issuer": issuer,
            "clientId": CLIENT_ID,
            "clientSecret": CLIENT_SECRET,
            "resource": inbox_url,
            // Its tokens go to the inbox only, whatever a tool declares.
            "apiHosts": [inbox_url.trim_start_matches("http://")],
        });
        let path = "/admin/authorization-providers/inbox";
        let (status, body) = server.call_as(Some(TOKEN), Method::PUT, path, Some(&settings)).await;
        assert_eq!(status, 200, "{body}");
        let (status, body) = server.deploy(fixture("my_inbox.wasm"), "").await;
        assert!(status == 200 || status == 201, "{body}");
        server.add_end_user("", "alice").await;
        server.add_end_user("", "bob").await;
        let key = server.create_key(Some("default"), "consumer").await.1;
        let tool_id = server.tool_id("my_inbox").await;
        Inbox { server, inbox, key, tool_id, _provider: provider }
    }

    /// An A2T call as `person` → (status, body).
    async fn a2t(&self, person: &str) -> (u16, Value) {
        let response = self
            .server
            .request_as(Some(&self.key), Method::POST, &format!("/tools/{}:invoke", self.tool_id))
            .header("plinth-end-user", person)
            .json(&invocation("my_inbox", &[("unread_only", json!(false))]))
            .send()
            .await
            .unwrap();
        (response.status().as_u16(), response.json().await.unwrap())
    }

    /// An OTC call as `person` → (status, body).
    async fn otc(&self, person: &str) -> (u16, Value) {
        let (_, listed) = self.server.call_as(Some(&self.key), Method::GET, "/otc/tools", None).await;
        let definition = listed["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"].as_str().is_some_and(|n| n.ends_with("MyInbox")))
            .cloned()
            .unwrap_or_else(|| panic!("{listed}"));
        let body = json!({ "request": {
            "tool_id": definition["id"], "input": { "unread_only": false }, "context": { "user_id": person },
        }});
        self.server.call_as(Some(&self.key), Method::POST, "/otc/tools/call", Some(&body)).await
    }

    /// The Python SDK's call as `person` in `mode`, up to its URL elicitation.
    fn mcp(&self, person: &str, mode: &str) -> Script {
        let url = format!("{}/mcp", self.server.base);
        let meta = json!({ "endUser": person }).to_string();
        let args = [url.as_str(), "my_inbox", r#"{"unread_only": false}"#, "--meta", &meta, "--mode", mode];
        Script::start("confirm_call.py", &args, Some(&self.key))
    }

    /// The `Authorization` headers the inbox saw for `person`'s valid
    /// tokens, oldest first.
    fn bearers_of(&self, person: &str) -> Vec<String> {
        let seen = self.inbox.seen();
        seen.into_iter().filter(|r| r.user.as_deref() == Some(person)).filter_map(|r| r.authorization).collect()
    }
}

/// The message ids of a call's outputs, A2T's or OTC's.
fn message_ids(outputs: &Value) -> Vec<String> {
    let messages = outputs["messages"].as_array().unwrap_or_else(|| panic!("no messages: {outputs}"));
    messages.iter().map(|m| m["id"].as_str().unwrap().to_string()).collect()
}

fn ids_of(person: &str) -> Vec<String> {
    let prefix = &person[..1];
    let count = if person == "alice" { 3 } else { 2 };
    let mut ids: Vec<String> = (1..=count).map(|n| format!("{prefix}-{n}")).collect();
    ids.sort();
    ids
}

fn sorted(mut ids: Vec<String>) -> Vec<String> {
    ids.sort();
    ids
}

/// `person` opens `url` in a fresh Chromium: logs in at Plinth, reads what
/// they are asked, presses Continue, signs in at the provider's own page,
/// allows it, and is back on Plinth's "Connected" page.
async fn connect_in_browser(url: &str, person: &str, scopes: &[&str]) {
    let browser = browser::start().await;
    browser.goto(url).await;
    browser.wait_for_text("Log in to see which account you are asked to connect", WAIT).await;
    browser.fill("#user", person).await;
    browser.fill("#password", &format!("{person}-password")).await;
    browser.click("#login").await;
    let page = browser.wait_for_text("Continue to Inbox", WAIT).await;
    for shown in ["my_inbox", person].iter().chain(scopes) {
        assert!(page.contains(shown), "the link page does not show {shown}:\n{page}");
    }
    browser.click("#continue").await;
    // oidc-provider's own sign-in page, then its consent page.
    browser.wait_for_text("Sign-in", WAIT).await;
    browser.fill("input[name=login]", person).await;
    browser.fill("input[name=password]", "any password").await;
    browser.click("button[type=submit]").await;
    let consent = browser.wait_for_text("Authorize", WAIT).await;
    for scope in scopes {
        assert!(consent.contains(scope), "the provider does not ask for {scope}:\n{consent}");
    }
    browser.click("button[type=submit]").await;
    let page = browser.wait_for_text("Connected", WAIT).await;
    assert!(page.contains("You can go back to your agent"), "{page}");
    browser.close().await;
}

/// The person's URL of an A2T or OTC challenge body, with its check URL.
fn challenge_of(challenge: &Value) -> (String, String) {
    let url = challenge["url"].as_str().unwrap_or_else(|| panic!("no url: {challenge}")).to_string();
    let check = challenge.get("checkUrl").or(challenge.get("check_url")).and_then(Value::as_str).unwrap().to_string();
    (url, check)
}

#[tokio::test(flavor = "multi_thread")]
async fn people_connect_their_own_inbox_from_every_door_in_a_browser_and_the_retried_calls_act_with_it() {
    let s = Inbox::start().await;

    // alice, through a 2026-07-28 agent: input_required with a URL
    // elicitation; she connects; the SDK's retry returns her messages.
    let mut agent = s.mcp("alice", "2026-07-28");
    assert_eq!(agent.expect("protocolVersion").await, "2026-07-28");
    let asked = agent.expect_line("elicitation").await;
    assert_eq!(asked["key"], "authorization:inbox", "{asked}");
    assert_eq!(asked["elicitation"]["mode"], "url", "{asked}");
    let alices_url = asked["elicitation"]["url"].as_str().unwrap().to_string();
    assert!(alices_url.starts_with(&format!("{}/connections/", s.server.base)), "{alices_url}");
    assert!(s.inbox.seen().is_empty(), "nothing ran before the grant");
    connect_in_browser(&alices_url, "alice", &["inbox.read"]).await;
    agent.send("accept");
    let result = agent.expect("result").await;
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(sorted(message_ids(&result["structuredContent"])), ids_of("alice"), "{result}");
    agent.finish().await;
    assert_eq!(s.bearers_of("alice").len(), 1, "the inbox saw alice's own token");

    // bob, through a 2025-11-25 agent: -32042 naming a link of his own;
    // the agent repeats the call once he connected, and gets his messages.
    let mut agent = s.mcp("bob", "legacy");
    assert_eq!(agent.expect("protocolVersion").await, "2025-11-25");
    let error = agent.expect("error").await;
    assert_eq!(error["code"], -32042, "{error}");
    let bobs_url = error["data"]["elicitations"][0]["url"].as_str().unwrap().to_string();
    assert_ne!(bobs_url, alices_url);
    connect_in_browser(&bobs_url, "bob", &["inbox.read"]).await;
    agent.send("again");
    let result = agent.expect("result").await;
    assert_eq!(sorted(message_ids(&result["structuredContent"])), ids_of("bob"), "{result}");
    agent.finish().await;
    assert!(s.bearers_of("bob").iter().all(|b| !s.bearers_of("alice").contains(b)), "bob's token is not alice's");

    // The access tokens live five seconds: past that, alice's grant is
    // refreshed (at the provider, rotating its refresh token) and the call
    // carries a new token, without asking her anything.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let (status, body) = s.a2t("alice").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(sorted(message_ids(&Value::Object(outputs(&body)))), ids_of("alice"));
    let bearers = s.bearers_of("alice");
    assert_eq!(bearers.len(), 2, "{bearers:?}");
    assert_ne!(bearers[0], bearers[1], "a refreshed token");

    // alice revokes it on her accounts page: the next call (OTC) is a
    // challenge, the errata's missing_requirements.authorization.
    let browser = browser::start().await;
    browser.goto(&format!("{}/connections", s.server.base)).await;
    browser.wait_for_text("Log in", WAIT).await;
    browser.fill("#user", "alice").await;
    browser.fill("#password", "alice-password").await;
    browser.click("#login").await;
    browser.wait_for_text("Your connected accounts", WAIT).await;
    browser.click("#revoke-inbox").await;
    browser.wait_for_text("You have connected no account.", WAIT).await;
    browser.close().await;
    let (status, body) = s.otc("alice").await;
    assert_eq!((status, body["code"].as_str()), (400, Some("missing_requirements")), "{body}");
    let (url, check_url) = challenge_of(&body["missing_requirements"]["authorization"][0]);
    let check = || async {
        let response = reqwest::Client::new().get(&check_url).bearer_auth(&s.key).send().await.unwrap();
        response.json::<Value>().await.unwrap()
    };
    assert_eq!(check().await["state"], "pending");
    connect_in_browser(&url, "alice", &["inbox.read"]).await;
    assert_eq!(check().await["state"], "connected", "the agent's poll says so");
    let (status, body) = s.otc("alice").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(sorted(message_ids(&body["result"]["value"])), ids_of("alice"), "{body}");

    // An operator revokes it: the next call (A2T) is a 403 challenge.
    let path = "/admin/end-users/alice/connections/inbox";
    let (status, body) = s.server.call_as(Some(TOKEN), Method::DELETE, path, None).await;
    assert!(status == 204 || status == 200, "{body}");
    let (status, body) = s.a2t("alice").await;
    assert_eq!((status, body["error"]["code"].as_str()), (403, Some("authorization_required")), "{body}");
    let (url, _) = challenge_of(&body["error"]["authorization"][0]);
    connect_in_browser(&url, "alice", &["inbox.read"]).await;
    let (status, body) = s.a2t("alice").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(sorted(message_ids(&Value::Object(outputs(&body)))), ids_of("alice"));

    // Step-up: version 2 asks for inbox.write too. Not a break of the
    // signature (it deploys), but its first call asks alice again, for both.
    let more = with_manifest(&fixture("my_inbox.wasm"), |m| {
        m["authorization"][0]["scopes"] = json!(["inbox.read", "inbox.write"]);
    });
    let (status, body) = s.server.deploy(more, "").await;
    assert!(status == 200 || status == 201, "{body}");
    let (status, body) = s.a2t("alice").await;
    assert_eq!((status, body["error"]["code"].as_str()), (403, Some("authorization_required")), "{body}");
    let challenge = &body["error"]["authorization"][0];
    assert_eq!(challenge["scopes"], json!(["inbox.read", "inbox.write"]), "{body}");
    let (url, _) = challenge_of(challenge);
    connect_in_browser(&url, "alice", &["inbox.read", "inbox.write"]).await;
    let (status, body) = s.a2t("alice").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(sorted(message_ids(&Value::Object(outputs(&body)))), ids_of("alice"));
    let seen = s.inbox.seen();
    let last = seen.iter().rev().find(|r| r.user.as_deref() == Some("alice")).unwrap();
    assert_eq!(sorted(last.scopes.clone()), ["inbox.read", "inbox.write"], "the new grant's token holds both");
}
