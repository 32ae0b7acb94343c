//! End-user authorization, end to end (docs/authorization.md): a tenant's
//! providers over the admin API; a tool that acts with its end user's own
//! account, called over A2T; the person's pages (log in, the link,
//! Continue, the provider, the callback, their accounts); the agent's
//! status; revocation by the person, by a publisher, and with the end user.
//! The provider and the API behind the tool are the test's own
//! (`authorization_support.rs`); the person's browser is plain HTTP here
//! (`authorization_browser.rs` runs the flow in Chromium).

use crate::authorization_support::{Api, CLIENT_SECRET, Page, Person, Provider, action_of};
use crate::support::{Server, TOKEN, fixture, hidden, invocation, outputs, with_manifest};
use reqwest::Method;
use serde_json::{Value, json};

/// A server that reaches the test's provider and API on 127.0.0.1 over
/// plain http, with `use_account` deployed in the default tenant (its API
/// at `api`), the provider `inbox` set, and end users alice and bob.
pub struct Setup {
    pub server: Server,
    pub provider: Provider,
    pub api: Api,
    pub tool_id: String,
    /// A consumer key of the default tenant (the agent's).
    pub consumer: String,
    _plugins: tempfile::TempDir,
}

/// [`Setup`] with the provider on `provider_host`, `component` as
/// `use_account`, the server started with `extra` too.
pub async fn setup_with(provider_host: &str, component: Vec<u8>, extra: &[&str]) -> Setup {
    let provider = Provider::start(provider_host).await;
    let api = Api::start(&provider).await;
    let plugins = tempfile::tempdir().unwrap();
    std::fs::write(plugins.path().join("use_account.wasm"), component).unwrap();
    let config = format!("use_account.api-url={}", api.url);
    let mut args = vec![
        "--plugins",
        plugins.path().to_str().unwrap(),
        "--oauth-allow-http",
        "--allow-private-cidr",
        "127.0.0.0/8",
        "--tool-config",
        &config,
    ];
    args.extend_from_slice(extra);
    let server = Server::start_in(tempfile::tempdir().unwrap(), &args);
    let (status, body) = server
        .call_as(Some(TOKEN), Method::PUT, "/admin/authorization-providers/inbox", Some(&provider.settings()))
        .await;
    assert_eq!(status, 200, "{body}");
    server.add_end_user("", "alice").await;
    server.add_end_user("", "bob").await;
    let tool_id = server.tool_id("use_account").await;
    let consumer = server.create_key(Some("default"), "consumer").await.1;
    Setup { server, provider, api, tool_id, consumer, _plugins: plugins }
}

pub async fn setup() -> Setup {
    setup_with("127.0.0.1", fixture("use_account.wasm"), &[]).await
}

impl Setup {
    /// Calls `use_account` over A2T as `end_user`, with the agent's key →
    /// (status, body, the `Link` header).
    pub async fn call_as(&self, end_user: &str) -> (u16, Value, Option<String>) {
        let response = self
            .server
            .request_as(Some(&self.consumer), Method::POST, &format!("/tools/{}:invoke", self.tool_id))
            .header("plinth-end-user", end_user)
            .json(&invocation("use_account", &[("folder", json!("inbox"))]))
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let link = response.headers().get("link").map(|v| v.to_str().unwrap().to_string());
        (status, response.json().await.unwrap(), link)
    }

    /// The challenge a call as `end_user` answers: (the person's URL, the
    /// agent's check URL).
    pub async fn challenge(&self, end_user: &str) -> (String, String) {
        let (status, body, link) = self.call_as(end_user).await;
        assert_eq!((status, body["error"]["code"].as_str()), (403, Some("authorization_required")), "{body}");
        let challenge = &body["error"]["authorization"][0];
        assert_eq!(challenge["provider"], "inbox", "{body}");
        assert_eq!(challenge["scopes"], json!(["inbox.read"]), "{body}");
        let url = challenge["url"].as_str().unwrap().to_string();
        assert_eq!(link, Some(format!("<{url}>; rel=\"authorization\"")));
        (url, challenge["checkUrl"].as_str().unwrap().to_string())
    }

    /// What the agent's check URL says → (status, body).
    pub async fn status(&self, check_url: &str, key: Option<&str>) -> (u16, Value) {
        let mut request = reqwest::Client::new().get(check_url);
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        let response = request.send().await.unwrap();
        (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
    }
}

/// On the link page (open in `person`'s browser), **Continue** → the answer
/// (the `303` to the provider).
pub async fn press_continue(person: &Person, link_page: &Page, url: &str) -> Page {
    let token = hidden(&link_page.html, "form_token");
    assert_eq!(action_of(&link_page.html), url, "Continue posts to the link");
    person.submit(url, &[("form_token", token.as_str())]).await
}

/// alice logs in at `url`, presses Continue and is sent back by the
/// provider → the callback URL she is sent to (not yet followed).
async fn to_the_callback(s: &Setup, alice: &Person, url: &str) -> String {
    let page = alice.log_in_at(url, "alice").await;
    let to_provider = press_continue(alice, &page, url).await;
    assert_eq!(to_provider.status, 303, "{}", to_provider.html);
    let back = alice.get(to_provider.location.as_deref().unwrap()).await;
    let callback = back.location.clone().unwrap_or_else(|| panic!("the provider answered {}", back.status));
    assert!(callback.starts_with(&format!("{}/connections/callback?", s.server.base)), "{callback}");
    callback
}

/// `person` (logged in) follows `url` to the end: the link page, Continue,
/// the provider, the callback → the callback's page.
pub async fn connect(person: &Person, url: &str) -> Page {
    let page = person.get(url).await;
    assert_eq!(page.status, 200, "{}", page.html);
    let to_provider = press_continue(person, &page, url).await;
    assert_eq!(to_provider.status, 303, "{}", to_provider.html);
    person.follow(to_provider).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_person_connects_their_account_and_the_retried_call_acts_with_it() {
    let s = setup().await;
    s.provider.sign_in_as("alice@inbox");

    // The call runs nothing and answers the challenge; the tool's API saw
    // nothing.
    let (url, check_url) = s.challenge("alice").await;
    assert!(url.starts_with(&format!("{}/connections/", s.server.base)), "{url}");
    assert_eq!(check_url, format!("{url}/status"));
    assert!(s.api.seen().is_empty(), "the tool did not run");
    // The same call again: the same link, while it is pending.
    assert_eq!(s.challenge("alice").await.0, url);

    // The agent polls: pending. The check URL takes a consumer key of the
    // tenant, as a CHEQ result URI does.
    let (status, body) = s.status(&check_url, Some(&s.consumer)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "pending");
    assert_eq!(body["provider"], "inbox");
    assert!(body["expiresAt"].as_i64().unwrap() > 0, "{body}");
    assert_eq!(body.get("error"), None, "{body}");
    let (status, body) = s.status(&check_url, None).await;
    assert_eq!((status, body["error"]["code"].as_str()), (401, Some("unauthorized")), "{body}");

    // The person opens the link: the login page, then the link page.
    let alice = Person::new();
    let page = alice.get(&url).await;
    assert_eq!(page.status, 200);
    assert!(page.html.contains("Log in to your accounts"), "{}", page.html);
    let page = alice.log_in_at(&url, "alice").await;
    assert_eq!(page.status, 200, "{}", page.html);
    for shown in [
        "<strong id=\"tool\">use_account</strong>",
        "(version <span id=\"version\">1</span>)",
        "<strong id=\"tenant\">default</strong>",
        "<strong id=\"provider\">Inbox</strong>",
        "<strong id=\"end-user\">alice</strong>",
        "<li><code>inbox.read</code></li>",
        "Continue to Inbox",
    ] {
        assert!(page.html.contains(shown), "{shown}:\n{}", page.html);
    }
    // Its form may go on to the provider (the CSP's `form-action` covers
    // the redirect that follows the post), and nowhere else.
    let csp = page.headers["content-security-policy"].to_str().unwrap();
    assert!(csp.contains(&format!("form-action 'self' {};", s.provider.issuer)), "{csp}");

    // Continue: to the provider, with PKCE S256, `state`, the callback.
    let to_provider = press_continue(&alice, &page, &url).await;
    assert_eq!(to_provider.status, 303, "{}", to_provider.html);
    let authorize = to_provider.location.clone().unwrap();
    assert!(authorize.starts_with(&format!("{}/authorize?", s.provider.issuer)), "{authorize}");
    assert!(alice.has_cookie("plinth_connection"), "the session goes along to the callback");
    let done = alice.follow(to_provider).await;
    assert_eq!(done.status, 200, "{}", done.html);
    assert!(done.html.contains("Connected: your <strong>Inbox</strong> account is connected"), "{}", done.html);
    assert!(!alice.has_cookie("plinth_connection"), "the callback's cookie is forgotten");
    let request = s.provider.state.lock().unwrap().authorize_requests[0].clone();
    assert_eq!(request["redirect_uri"], format!("{}/connections/callback", s.server.base));
    assert_eq!(request["code_challenge_method"], "S256");
    assert_eq!(request["scope"], "inbox.read");
    assert_eq!(request["code_challenge"].len(), 43, "{request:?}");
    assert_eq!(s.provider.exchanges(), 1);
    assert!(s.provider.state.lock().unwrap().refusals.is_empty(), "PKCE, redirect URI and client all checked out");

    // The agent's poll says so, and the same call now runs with alice's
    // token, which the tool never saw.
    let (status, body) = s.status(&check_url, Some(&s.consumer)).await;
    assert_eq!((status, body["state"].as_str()), (200, Some("connected")), "{body}");
    let (status, body, _) = s.call_as("alice").await;
    assert_eq!(status, 200, "{body}");
    let answer = outputs(&body);
    assert_eq!(answer["status"], 200, "{body}");
    let mailbox: Value = serde_json::from_str(answer["body"].as_str().unwrap()).unwrap();
    assert_eq!(mailbox["user"], "alice@inbox", "{mailbox}");
    let token = s.provider.state.lock().unwrap().tokens.keys().next().unwrap().clone();
    assert_eq!(s.api.seen(), vec![Some(format!("Bearer {token}"))]);
    assert!(!s.server.logs().contains(&token), "the token is in no log");

    // The link page, opened again, says it is done.
    let again = alice.get(&url).await;
    assert_eq!(again.status, 200);
    assert!(again.html.contains("account is connected"), "{}", again.html);
}

#[tokio::test(flavor = "multi_thread")]
async fn publishers_set_list_replace_and_delete_providers_that_no_other_tenant_sees() {
    let server = Server::start(&["--oauth-allow-http"]);
    server.create_tenant("acme", json!({})).await;
    server.create_tenant("globex", json!({})).await;
    let acme = server.create_key(Some("acme"), "publisher").await.1;
    let acme_consumer = server.create_key(Some("acme"), "consumer").await.1;
    let globex = server.create_key(Some("globex"), "publisher").await.1;
    let call = |key: String, method: Method, path: &'static str, body: Option<Value>| {
        let server = &server;
        async move { server.call_as(Some(&key), method, path, body.as_ref()).await }
    };
    let settings = json!({
        "displayName": "Inbox", "issuer": "https://login.inbox.example", "clientId": "plinth-acme",
        "clientSecret": "acme-client-secret", "authorizationParameters": {"access_type": "offline"},
        "resource": "https://api.inbox.example",
    });

    // Set: the stored view, without the secret.
    let (status, stored) =
        call(acme.clone(), Method::PUT, "/t/acme/admin/authorization-providers/inbox", Some(settings.clone())).await;
    assert_eq!(status, 200, "{stored}");
    assert_eq!(stored["id"], "inbox");
    assert_eq!(stored["displayName"], "Inbox");
    assert_eq!(stored["issuer"], "https://login.inbox.example");
    assert_eq!(stored["clientId"], "plinth-acme");
    assert_eq!(stored["clientSecretSet"], true);
    assert_eq!(stored["authorizationParameters"], json!({"access_type": "offline"}));
    assert_eq!(stored["resource"], "https://api.inbox.example");
    assert!(stored["updatedAt"].as_i64().unwrap() > 0);
    assert!(!stored.to_string().contains("acme-client-secret"), "{stored}");

    // List: the same, never the secret.
    let (status, list) = call(acme.clone(), Method::GET, "/t/acme/admin/authorization-providers", None).await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list, json!({ "providers": [stored.clone()] }));

    // Replaced without a secret: the stored one is kept.
    let mut without_secret = settings.clone();
    without_secret.as_object_mut().unwrap().remove("clientSecret");
    without_secret["displayName"] = json!("Inbox (new)");
    let (status, replaced) =
        call(acme.clone(), Method::PUT, "/t/acme/admin/authorization-providers/inbox", Some(without_secret)).await;
    assert_eq!(status, 200, "{replaced}");
    assert_eq!(
        (replaced["displayName"].as_str(), replaced["clientSecretSet"].as_bool()),
        (Some("Inbox (new)"), Some(true))
    );

    // Moved (another token endpoint) without the secret: refused, for the
    // stored secret is never sent to a new place.
    let mut moved = settings.clone();
    moved.as_object_mut().unwrap().remove("clientSecret");
    moved["tokenEndpoint"] = json!("https://elsewhere.example/token");
    let (status, error) =
        call(acme.clone(), Method::PUT, "/t/acme/admin/authorization-providers/inbox", Some(moved)).await;
    assert_eq!((status, error["error"]["code"].as_str()), (400, Some("invalid_provider")), "{error}");
    assert!(error["error"]["message"].as_str().unwrap().contains("clientSecret"), "{error}");

    // Bad settings: 400, naming the field.
    for (body, code, names) in [
        (
            json!({"issuer": "https://login.example", "clientId": "x", "clientSecrt": "typo"}),
            "invalid_json",
            "clientSecrt",
        ),
        (json!({"issuer": "https://login.example"}), "invalid_json", "clientId"),
        (json!({"issuer": "ftp://login.example", "clientId": "x"}), "invalid_provider", "`issuer`"),
        (
            json!({"clientId": "x", "tokenEndpoint": "https://login.example/token"}),
            "invalid_provider",
            "authorizationEndpoint",
        ),
        (
            json!({"issuer": "https://login.example", "clientId": "x", "authorizationParameters": {"redirect_uri": "https://evil.example"}}),
            "invalid_provider",
            "redirect_uri",
        ),
        (json!({"issuer": "https://login.example", "clientId": ""}), "invalid_provider", "clientId"),
    ] {
        let (status, error) =
            call(acme.clone(), Method::PUT, "/t/acme/admin/authorization-providers/mail", Some(body.clone())).await;
        assert_eq!((status, error["error"]["code"].as_str()), (400, Some(code)), "{body}: {error}");
        assert!(error["error"]["message"].as_str().unwrap().contains(names), "{body}: {error}");
    }
    let (status, error) = call(
        acme.clone(),
        Method::PUT,
        "/t/acme/admin/authorization-providers/Not-An-Id",
        Some(json!({"issuer": "https://login.example", "clientId": "x"})),
    )
    .await;
    assert_eq!((status, error["error"]["code"].as_str()), (400, Some("invalid_provider")), "{error}");
    // A body past the admin limit.
    let huge = json!({"issuer": "https://login.example", "clientId": "x".repeat(70 * 1024)});
    let (status, _) = call(acme.clone(), Method::PUT, "/t/acme/admin/authorization-providers/mail", Some(huge)).await;
    assert_eq!(status, 413);

    // Another tenant sees none of it, and sets its own under the same id.
    let (status, list) = call(globex.clone(), Method::GET, "/t/globex/admin/authorization-providers", None).await;
    assert_eq!((status, list), (200, json!({ "providers": [] })));
    let (status, _) = call(globex.clone(), Method::GET, "/t/acme/admin/authorization-providers", None).await;
    assert_eq!(status, 404, "another tenant's root is no tenant to this key");
    let (status, error) =
        call(globex.clone(), Method::DELETE, "/t/globex/admin/authorization-providers/inbox", None).await;
    assert_eq!((status, error["error"]["code"].as_str()), (404, Some("not_found")), "{error}");
    let theirs = json!({"issuer": "https://sso.globex.example", "clientId": "plinth-globex"});
    let (status, _) =
        call(globex.clone(), Method::PUT, "/t/globex/admin/authorization-providers/inbox", Some(theirs)).await;
    assert_eq!(status, 200);
    let (_, list) = call(acme.clone(), Method::GET, "/t/acme/admin/authorization-providers", None).await;
    assert_eq!(list["providers"][0]["issuer"], "https://login.inbox.example", "acme's is its own");
    let (_, list) = call(globex.clone(), Method::GET, "/t/globex/admin/authorization-providers", None).await;
    assert_eq!(
        (list["providers"][0]["issuer"].as_str(), list["providers"][0]["clientSecretSet"].as_bool()),
        (Some("https://sso.globex.example"), Some(false))
    );

    // A consumer may not.
    let (status, _) = call(acme_consumer, Method::GET, "/t/acme/admin/authorization-providers", None).await;
    assert_eq!(status, 403);

    // Delete: 204, then 404.
    let (status, _) = call(acme.clone(), Method::DELETE, "/t/acme/admin/authorization-providers/inbox", None).await;
    assert_eq!(status, 204);
    let (status, error) = call(acme.clone(), Method::DELETE, "/t/acme/admin/authorization-providers/inbox", None).await;
    assert_eq!((status, error["error"]["code"].as_str()), (404, Some("not_found")), "{error}");
    let (_, list) = call(acme.clone(), Method::GET, "/t/acme/admin/authorization-providers", None).await;
    assert_eq!(list, json!({ "providers": [] }));

    // Audited, without the secret.
    let (status, audit) = server.call_as(Some(TOKEN), Method::GET, "/admin/audit?tenant=acme&pageLimit=50", None).await;
    assert_eq!(status, 200, "{audit}");
    let entries = audit["items"].as_array().unwrap();
    let of =
        |action: &str| entries.iter().filter(|e| e["action"] == action && e["target"] == "inbox").collect::<Vec<_>>();
    let (puts, deletes) = (of("authorization_provider.put"), of("authorization_provider.delete"));
    assert_eq!(puts.len(), 2, "{audit}");
    assert!(!deletes.is_empty(), "{audit}");
    assert_eq!(puts[0]["detail"]["settings"]["displayName"], "Inbox (new)", "the newest first: {audit}");
    assert_eq!(puts[0]["detail"]["clientSecretSet"], true, "{audit}");
    assert!(deletes[0]["seq"].as_i64() > puts[0]["seq"].as_i64());
    assert!(!audit.to_string().contains("acme-client-secret"), "{audit}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_link_is_its_persons_only_and_each_person_gets_their_own() {
    let s = setup().await;
    let (alice_url, alice_check) = s.challenge("alice").await;
    let (bob_url, _) = s.challenge("bob").await;
    assert_ne!(alice_url, bob_url, "bob's call is a challenge of his own");

    // Bob, logged in through his own link, opens alice's: refused, and
    // nothing of it shown but that it is another person's.
    let bob = Person::new();
    bob.log_in_at(&bob_url, "bob").await;
    let page = bob.get(&alice_url).await;
    assert_eq!((page.status, page.error_code.as_deref()), (403, Some("not_your_link")), "{}", page.html);
    assert!(
        page.html.contains("This link is for another person; you are logged in as <strong>bob</strong>"),
        "{}",
        page.html
    );
    for hidden in ["alice", "Inbox", "inbox.read", "use_account", "Continue"] {
        assert!(!page.html.contains(hidden), "{hidden} shown to another person:\n{}", page.html);
    }
    // Nor can he Continue with it, with his own page's form token.
    let own = bob.get(&bob_url).await;
    let token = hidden(&own.html, "form_token");
    let refused = bob.submit(&alice_url, &[("form_token", token.as_str())]).await;
    assert_eq!((refused.status, refused.error_code.as_deref()), (403, Some("not_your_link")), "{}", refused.html);
    assert!(s.provider.state.lock().unwrap().authorize_requests.is_empty(), "nobody was sent to the provider");

    // Alice's session cannot finish bob's sign-in either: the provider's
    // answer to bob's link, brought to alice's browser, grants nothing.
    let alice = Person::new();
    alice.log_in_at(&alice_url, "alice").await;
    s.provider.sign_in_as("bob@inbox");
    let own = bob.get(&bob_url).await;
    let to_provider = press_continue(&bob, &own, &bob_url).await;
    let back = bob.get(&to_provider.location.unwrap()).await;
    assert_eq!(back.status, 302);
    let callback = back.location.unwrap();
    let page = alice.get(&callback).await;
    assert_eq!((page.status, page.error_code.as_deref()), (400, Some("authorization_failed")), "{}", page.html);
    assert!(page.html.contains("came back to another person"), "{}", page.html);
    assert_eq!(s.provider.exchanges(), 0, "the code was never exchanged");
    for who in ["alice", "bob"] {
        let (status, body) =
            s.server.call_as(Some(TOKEN), Method::GET, &format!("/admin/end-users/{who}/connections"), None).await;
        assert_eq!((status, body), (200, json!({ "connections": [] })), "{who} was granted nothing");
    }
    // Alice's own link is still hers to follow.
    let (_, status) = s.status(&alice_check, Some(&s.consumer)).await;
    assert_eq!(status["state"], "pending");
    s.provider.sign_in_as("alice@inbox");
    let done = connect(&alice, &alice_url).await;
    assert_eq!(done.status, 200, "{}", done.html);
    let (status, body, _) = s.call_as("alice").await;
    assert_eq!(status, 200, "{body}");
    let (status, body, _) = s.call_as("bob").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (403, Some("authorization_required")),
        "alice's grant is never bob's: {body}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_callback_without_a_session_with_a_used_state_or_another_issuer_takes_nothing() {
    let s = setup().await;
    s.provider.sign_in_as("alice@inbox");
    let (url, check_url) = s.challenge("alice").await;
    let alice = Person::new();
    let callback = to_the_callback(&s, &alice, &url).await;

    // In a browser without alice's session: nothing is taken.
    let stranger = Person::new();
    let page = stranger.get(&callback).await;
    assert_eq!(page.status, 401, "{}", page.html);
    assert!(page.html.contains("Log in and follow the link you were given again"), "{}", page.html);
    assert_eq!(s.status(&check_url, Some(&s.consumer)).await.1["state"], "pending");
    assert_eq!(s.provider.exchanges(), 0);

    // Alice's own browser finishes it.
    let page = alice.get(&callback).await;
    assert_eq!(page.status, 200, "{}", page.html);
    assert_eq!(s.provider.exchanges(), 1);

    // The same callback again (a replay, or a reload): the state works
    // once; nothing more is exchanged or changed.
    let replay = alice.get(&callback).await;
    assert_eq!((replay.status, replay.error_code.as_deref()), (410, Some("link_gone")), "{}", replay.html);
    assert_eq!(s.provider.exchanges(), 1);
    assert_eq!(s.status(&check_url, Some(&s.consumer)).await.1["state"], "connected");
    // A state no link has: the same.
    let foreign = callback.replace("state=", "state=made-up");
    assert_eq!(alice.get(&foreign).await.status, 410);
    // Not a sign-in at all.
    for (query, why) in [("code=x", "it has no state"), ("state=a&state=b&code=c", "state came twice")] {
        let page = alice.get(&format!("{}/connections/callback?{query}", s.server.base)).await;
        assert_eq!(page.status, 400, "{query}");
        assert!(page.html.contains(why), "{query}: {}", page.html);
    }
    let long = format!("{}/connections/callback?state=s&code={}", s.server.base, "c".repeat(9000));
    assert_eq!(alice.get(&long).await.status, 400, "a callback's query is bounded");

    // Mix-up (RFC 9207): a code sent back with another issuer's `iss`
    // fails the link, and is never exchanged.
    s.provider.sign_in_as("bob@inbox");
    let (bob_url, bob_check) = s.challenge("bob").await;
    let bob = Person::new();
    let page = bob.log_in_at(&bob_url, "bob").await;
    s.provider.state.lock().unwrap().answer_iss = Some("https://evil.example".into());
    let to_provider = press_continue(&bob, &page, &bob_url).await;
    let page = bob.follow(to_provider).await;
    assert_eq!((page.status, page.error_code.as_deref()), (400, Some("authorization_failed")), "{}", page.html);
    assert!(page.html.contains("another issuer"), "{}", page.html);
    assert_eq!(s.provider.exchanges(), 1, "bob's code was never exchanged");
    let (status, body) = s.status(&bob_check, Some(&s.consumer)).await;
    assert_eq!((status, body["state"].as_str()), (200, Some("failed")), "{body}");
    assert!(body["error"].as_str().unwrap().contains("another issuer"), "{body}");
    let page = bob.get(&bob_url).await;
    assert_eq!(page.status, 410, "a failed link says so: {}", page.html);
    // Bob's next call gets a new link.
    let (again, _) = s.challenge("bob").await;
    assert_ne!(again, bob_url);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_link_pages_forms_refuse_forged_logins_and_posts() {
    let s = setup().await;
    let (url, _) = s.challenge("alice").await;
    let login = format!("{}/cheq/login", s.server.base);
    let alice = Person::new();
    let page = alice.get(&url).await;
    let token = hidden(&page.html, "login_token");
    let next = hidden(&page.html, "next");
    assert_eq!(next, url.strip_prefix(&s.server.base).unwrap(), "the login goes on to the link");
    let fields =
        |next: &'static str| [("user", "alice"), ("password", "alice-password"), ("next", next), ("login_token", "")];

    // Login CSRF: another site posting the login, or a form without this
    // browser's login token, logs nobody in.
    let mut form = fields("");
    let next_path = next.clone();
    form[2].1 = &next_path;
    form[3].1 = &token;
    let cross = alice.post(&login, &form, &[("sec-fetch-site", "cross-site")]).await;
    assert_eq!(cross.status, 403, "{}", cross.html);
    let stranger = Person::new();
    let without_cookie = stranger.submit(&login, &form).await;
    assert_eq!(without_cookie.status, 403, "{}", without_cookie.html);
    let mut wrong = form;
    let other_token = "f".repeat(32);
    wrong[3].1 = &other_token;
    assert_eq!(alice.submit(&login, &wrong).await.status, 403);
    assert!(!alice.has_cookie("plinth_cheq_session"), "no session was opened");

    // `next` goes to this tenant's connections pages only.
    for elsewhere in ["https://evil.example/connections", "//evil.example", "/admin/tenants", "/connections/../admin"] {
        let mut form = fields(elsewhere);
        form[3].1 = &token;
        let page = alice.submit(&login, &form).await;
        assert_eq!(page.status, 400, "{elsewhere}: {}", page.html);
        assert!(!alice.has_cookie("plinth_cheq_session"));
    }

    // Logged in, the Continue form must come from the page, with its token.
    let page = alice.log_in_at(&url, "alice").await;
    let form_token = hidden(&page.html, "form_token");
    let cross = alice.post(&url, &[("form_token", form_token.as_str())], &[("sec-fetch-site", "cross-site")]).await;
    assert_eq!(cross.status, 403, "{}", cross.html);
    let no_token = alice.submit(&url, &[("form_token", "forged")]).await;
    assert_eq!(no_token.status, 403, "{}", no_token.html);
    let logged_out = Person::new().submit(&url, &[("form_token", form_token.as_str())]).await;
    assert_eq!(logged_out.status, 401, "{}", logged_out.html);
    assert!(s.provider.state.lock().unwrap().authorize_requests.is_empty(), "nobody was sent to the provider");
    let sent = press_continue(&alice, &page, &url).await;
    assert_eq!(sent.status, 303, "the page's own form goes on: {}", sent.html);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_person_revokes_on_their_page_a_publisher_through_the_api_and_deleting_them_removes_theirs() {
    let s = setup().await;
    s.provider.sign_in_as("alice@inbox");
    let (url, _) = s.challenge("alice").await;
    let alice = Person::new();
    alice.log_in_at(&url, "alice").await;
    assert_eq!(connect(&alice, &url).await.status, 200);

    // The admin API lists it, never a token.
    let (status, body) = s.server.call_as(Some(TOKEN), Method::GET, "/admin/end-users/alice/connections", None).await;
    assert_eq!(status, 200, "{body}");
    let connection = &body["connections"][0];
    assert_eq!((connection["provider"].as_str(), connection["providerName"].as_str()), (Some("inbox"), Some("Inbox")));
    assert_eq!((connection["scopes"].clone(), connection["refreshable"].clone()), (json!(["inbox.read"]), json!(true)));
    assert!(!body.to_string().contains("at-alice") && !body.to_string().contains("rt-alice"), "{body}");

    // The person's accounts page lists it, with Revoke.
    let accounts_url = format!("{}/connections", s.server.base);
    let page = alice.get(&accounts_url).await;
    assert_eq!(page.status, 200, "{}", page.html);
    assert!(page.html.contains("<h2>Inbox</h2>") && page.html.contains("<code>inbox.read</code>"), "{}", page.html);
    let revoke = action_of(page.html.split("data-provider=\"inbox\"").nth(1).unwrap());
    assert_eq!(revoke, format!("{}/connections/inbox/revoke", s.server.base));
    let token = hidden(&page.html, "form_token");
    // A forged Revoke does nothing.
    assert_eq!(
        alice.post(&revoke, &[("form_token", token.as_str())], &[("sec-fetch-site", "cross-site")]).await.status,
        403
    );
    assert_eq!(alice.submit(&revoke, &[("form_token", "forged")]).await.status, 403);
    assert_eq!(s.call_as("alice").await.0, 200, "still connected");
    // The page's own: revoked, at the provider too (its refresh token).
    let done = alice.submit(&revoke, &[("form_token", token.as_str())]).await;
    assert_eq!((done.status, done.location.as_deref()), (303, Some(accounts_url.as_str())), "{}", done.html);
    let revoked = s.provider.state.lock().unwrap().revoked.clone();
    assert_eq!(revoked.len(), 1);
    assert!(revoked[0].starts_with("rt-alice@inbox-"), "{revoked:?}");
    let page = alice.get(&accounts_url).await;
    assert!(page.html.contains("You have connected no account."), "{}", page.html);
    assert_eq!(alice.submit(&revoke, &[("form_token", token.as_str())]).await.status, 404);
    let (status, body, _) = s.call_as("alice").await;
    assert_eq!((status, body["error"]["code"].as_str()), (403, Some("authorization_required")), "{body}");

    // A publisher revokes it: 204, then 404; the call is a challenge again.
    let (url, _) = s.challenge("alice").await;
    assert_eq!(connect(&alice, &url).await.status, 200);
    assert_eq!(s.call_as("alice").await.0, 200);
    let publisher = s.server.create_key(Some("default"), "publisher").await.1;
    let path = "/admin/end-users/alice/connections/inbox";
    assert_eq!(s.server.call_as(Some(&publisher), Method::DELETE, path, None).await.0, 204);
    let (status, body) = s.server.call_as(Some(&publisher), Method::DELETE, path, None).await;
    assert_eq!((status, body["error"]["code"].as_str()), (404, Some("not_found")), "{body}");
    assert_eq!(s.call_as("alice").await.0, 403);
    assert_eq!(s.provider.state.lock().unwrap().revoked.len(), 2);

    // Deleting the end user removes their grants.
    let (url, _) = s.challenge("alice").await;
    assert_eq!(connect(&alice, &url).await.status, 200);
    assert_eq!(s.call_as("alice").await.0, 200);
    assert_eq!(s.server.call_as(Some(&publisher), Method::DELETE, "/admin/end-users/alice", None).await.0, 204);
    let (status, body) =
        s.server.call_as(Some(&publisher), Method::GET, "/admin/end-users/alice/connections", None).await;
    assert_eq!((status, body), (200, json!({ "connections": [] })));
    // Her grant is gone, and her name, no longer an end user's, gets no
    // link either.
    let (status, body, _) = s.call_as("alice").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("unknown_end_user")),
        "a deleted end user's grant is gone: {body}"
    );

    // Audited: the person's revocation under their name, the publisher's
    // under its key; never a token.
    let (_, audit) =
        s.server.call_as(Some(TOKEN), Method::GET, "/admin/audit?tenant=default&pageLimit=100", None).await;
    let entries: Vec<(&str, &str)> = audit["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"].as_str().unwrap().starts_with("authorization."))
        .map(|e| (e["action"].as_str().unwrap(), e["actor"].as_str().unwrap()))
        .collect();
    assert!(entries.contains(&("authorization.revoke", "end-user:alice")), "{entries:?}");
    assert_eq!(entries.iter().filter(|(a, _)| *a == "authorization.grant").count(), 3, "{entries:?}");
    assert!(!audit.to_string().contains("at-alice") && !audit.to_string().contains(CLIENT_SECRET), "{audit}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_link_checked_through_a_toolset_is_its_tools_only() {
    let s = setup().await;
    let publisher = s.server.create_key(Some("default"), "publisher").await.1;
    for (name, tools) in [("mail", json!([{"name": "use_account"}])), ("other", json!([]))] {
        let body = json!({ "tools": tools });
        let (status, toolset) =
            s.server.call_as(Some(&publisher), Method::PUT, &format!("/admin/toolsets/{name}"), Some(&body)).await;
        assert_eq!(status, 201, "{toolset}");
    }
    let scoped = |toolset: &'static str| {
        let server = &s.server;
        async move {
            let body = json!({ "tenant": "default", "role": "consumer", "toolset": toolset });
            server.call_as(Some(TOKEN), Method::POST, "/admin/keys", Some(&body)).await.1["key"]
                .as_str()
                .unwrap()
                .to_string()
        }
    };
    let (mail_key, other_key) = (scoped("mail").await, scoped("other").await);

    // A call through the toolset's root: its check URL is under that root,
    // which the toolset's key opens.
    let root = format!("{}/t/default/toolsets/mail", s.server.base);
    let response = reqwest::Client::new()
        .post(format!("{root}/tools/{}:invoke", s.tool_id))
        .bearer_auth(&mail_key)
        .header("plinth-end-user", "alice")
        .json(&invocation("use_account", &[("folder", json!("inbox"))]))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    let body: Value = response.json().await.unwrap();
    let challenge = &body["error"]["authorization"][0];
    let (url, check_url) = (challenge["url"].as_str().unwrap(), challenge["checkUrl"].as_str().unwrap());
    assert!(url.starts_with(&format!("{}/connections/", s.server.base)), "the person's page is the tenant's: {url}");
    let link = url.rsplit('/').next().unwrap();
    assert_eq!(check_url, format!("{root}/connections/{link}/status"));
    let (status, body) = s.status(check_url, Some(&mail_key)).await;
    assert_eq!((status, body["state"].as_str()), (200, Some("pending")), "{body}");

    // The toolset's key opens nothing else; another toolset's root knows no
    // link of a tool outside it; the tenant's consumer key opens the
    // tenant's.
    let at_tenant = format!("{url}/status");
    let (status, body) = s.status(&at_tenant, Some(&mail_key)).await;
    assert_eq!((status, body["error"]["code"].as_str()), (403, Some("outside_toolset")), "{body}");
    let elsewhere = format!("{}/t/default/toolsets/other/connections/{link}/status", s.server.base);
    let (status, body) = s.status(&elsewhere, Some(&other_key)).await;
    assert_eq!((status, body["error"]["code"].as_str()), (404, Some("not_found")), "{body}");
    assert_eq!(s.status(&at_tenant, Some(&s.consumer)).await.0, 200);
    // Only the status is served under a toolset's root, not the pages.
    let page = reqwest::get(format!("{root}/connections/{link}")).await.unwrap();
    assert_eq!(page.status(), 404);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_needing_a_grant_and_a_confirmation_asks_for_the_grant_then_names_the_account_on_the_confirmation_page()
{
    let confirmed = with_manifest(&fixture("use_account.wasm"), |m| m["confirmation"] = json!({ "required": true }));
    let s = setup_with("127.0.0.1", confirmed, &[]).await;
    s.provider.sign_in_as("alice@inbox");
    // The grant first: nothing is asked to be confirmed before it.
    let (url, _) = s.challenge("alice").await;
    assert_eq!(s.server.stored_confirmations(), 0);
    let alice = Person::new();
    alice.log_in_at(&url, "alice").await;
    assert_eq!(connect(&alice, &url).await.status, 200);

    // Then the confirmation, whose page names the account.
    let (status, pack, _) = s.call_as("alice").await;
    assert_eq!(status, 202, "{pack}");
    let page = alice
        .get(&format!(
            "{}?resource_uri={}",
            pack["confirmation uri"].as_str().unwrap(),
            form_urlencoded::byte_serialize(pack["resource uri"].as_str().unwrap().as_bytes()).collect::<String>()
        ))
        .await;
    assert_eq!(page.status, 200, "{}", page.html);
    assert!(
        page.html.contains("<p id=\"accounts\">If you accept, it acts with your <strong>Inbox</strong> account.</p>"),
        "{}",
        page.html
    );
    assert!(s.api.seen().is_empty(), "nothing ran before the person accepted");
    let token = hidden(&page.html, "form_token");
    let transaction = pack["resource uri"].as_str().unwrap().rsplit('/').next().unwrap().to_string();
    let decided = alice
        .submit(
            &format!("{}/cheq/decide", s.server.base),
            &[("transaction", transaction.as_str()), ("form_token", token.as_str()), ("decision", "accept")],
        )
        .await;
    assert_eq!(decided.status, 200, "{}", decided.html);
    let seen = s.api.seen();
    assert_eq!(seen.len(), 1);
    assert!(
        seen[0].as_deref().unwrap().starts_with("Bearer at-alice@inbox-"),
        "the confirmed call acted with alice's grant: {seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_callback_for_a_person_removed_while_they_were_at_the_provider_stores_nothing() {
    let s = setup().await;
    s.provider.sign_in_as("alice@inbox");
    let (url, check_url) = s.challenge("alice").await;
    let alice = Person::new();
    // At the provider, which sends her back with a code…
    let callback = to_the_callback(&s, &alice, &url).await;
    // …while a publisher removes her.
    let (status, body) = s.server.call_as(Some(TOKEN), Method::DELETE, "/admin/end-users/alice", None).await;
    assert_eq!(status, 204, "{body}");

    let answer = alice.get(&callback).await;
    assert_ne!(answer.status, 200, "{}", answer.html);
    assert!(!answer.html.contains("Connected"), "{}", answer.html);
    assert_eq!(s.provider.exchanges(), 0, "the code was never exchanged");
    // Back under the same name, she has nothing connected, and her link
    // is no longer pending.
    s.server.add_end_user("", "alice").await;
    let (status, body) = s.server.call_as(Some(TOKEN), Method::GET, "/admin/end-users/alice/connections", None).await;
    assert_eq!((status, body), (200, json!({ "connections": [] })));
    let (status, body) = s.status(&check_url, Some(&s.consumer)).await;
    assert!(status != 200 || body["state"] != "connected", "{status} {body}");
    assert_eq!(s.call_as("alice").await.0, 403, "a call as her asks again");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_provider_moved_elsewhere_needs_its_secret_again_and_forgets_every_grant() {
    let s = setup().await;
    s.provider.sign_in_as("alice@inbox");
    let (url, _) = s.challenge("alice").await;
    let alice = Person::new();
    alice.log_in_at(&url, "alice").await;
    assert_eq!(connect(&alice, &url).await.status, 200);
    assert_eq!(s.call_as("alice").await.0, 200);

    // The same place, another display name: the grant stays.
    let mut renamed = s.provider.settings();
    renamed["displayName"] = json!("Mail");
    renamed.as_object_mut().unwrap().remove("clientSecret");
    let path = "/admin/authorization-providers/inbox";
    assert_eq!(s.server.call_as(Some(TOKEN), Method::PUT, path, Some(&renamed)).await.0, 200);
    assert_eq!(s.call_as("alice").await.0, 200, "still connected");
    // Another token endpoint, with its secret: her grant (whose refresh
    // token was the old endpoint's) is gone; the next call asks again.
    let mut moved = s.provider.settings();
    moved["tokenEndpoint"] = json!(format!("{}/token?moved", s.provider.issuer));
    let (status, body) = s.server.call_as(Some(TOKEN), Method::PUT, path, Some(&moved)).await;
    assert_eq!(status, 200, "{body}");
    let (status, body, _) = s.call_as("alice").await;
    assert_eq!((status, body["error"]["code"].as_str()), (403, Some("authorization_required")), "{body}");
    let (_, connections) = s.server.call_as(Some(TOKEN), Method::GET, "/admin/end-users/alice/connections", None).await;
    assert_eq!(connections, json!({ "connections": [] }));
}
