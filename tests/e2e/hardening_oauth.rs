//! Hardening III, the OAuth endpoints anyone reaches without a key: what a
//! stranger's flood of them costs the server, and the clients in the wild
//! that must still get in. Each test replays an attack (or a client) found
//! by an outside review against the real binary.

use crate::support::{Server, TOKEN};
use reqwest::Method;
use serde_json::{Value, json};
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

/// A client whose requests leave from `address` (any of 127.0.0.0/8).
fn client_from(address: Ipv4Addr, timeout: Option<Duration>) -> reqwest::Client {
    let mut builder = reqwest::Client::builder().local_address(IpAddr::V4(address)).pool_max_idle_per_host(0);
    if let Some(timeout) = timeout {
        builder = builder.timeout(timeout);
    }
    builder.build().unwrap()
}

/// The server's anonymous memory and resident size, in KiB.
fn memory_kib(pid: u32) -> (u64, u64) {
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap();
    let field = |name: &str| -> u64 {
        let line = rollup.lines().find(|l| l.starts_with(name)).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    (field("Anonymous:"), field("Rss:"))
}

/// Sends `count` sign-in page requests naming made-up metadata documents on
/// `host`, each abandoned by its client after 150 ms, from 48 addresses at
/// once. Every other one names a document URL of 60 KB, as the review
/// sent them (each used to stay in the server's fetches in flight for
/// good); the others fetches that start and are abandoned.
async fn abandon_document_fetches(server: &Server, host: &str, from: usize, count: usize) {
    let lanes = 48;
    let mut tasks = Vec::new();
    for lane in 0..lanes {
        let client = client_from(Ipv4Addr::new(127, 0, 5, 1 + lane as u8), Some(Duration::from_millis(150)));
        let (base, host) = (server.base.clone(), host.to_string());
        tasks.push(tokio::spawn(async move {
            for n in (from + lane..from + count).step_by(lanes) {
                let padding = if n % 2 == 0 { "p".repeat(60_000) } else { String::new() };
                let client_id = format!("{host}/clients/{n}{padding}.json");
                let query = [
                    ("response_type", "code"),
                    ("client_id", client_id.as_str()),
                    ("redirect_uri", "http://127.0.0.1:41873/callback"),
                    ("code_challenge", "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"),
                    ("code_challenge_method", "S256"),
                ];
                let _ = client.get(format!("{base}/oauth/authorize")).query(&query).send().await;
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn abandoned_metadata_document_fetches_give_their_memory_back() {
    let server = Server::start(&["--oauth-allow-http", "--allow-private-cidr", "127.0.0.0/8"]);
    // https: each fetch hangs in its TLS handshake until abandoned.
    let host = format!("https://{}", plinth::testing::silent_listener().await);
    // Warm up: the allocator's and the runtime's pools reach their size.
    abandon_document_fetches(&server, &host, 0, 1_000).await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    let (anonymous, resident) = memory_kib(server.pid());
    abandon_document_fetches(&server, &host, 1_000, 3_000).await;
    // Past the fetch timeout, whatever was still running has ended.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let (anonymous_after, resident_after) = memory_kib(server.pid());
    // Each abandoned request naming a long URL used to leave it behind
    // for good (about 108 MiB for these 3,000 when measured).
    assert!(
        anonymous_after < anonymous + 16 * 1024,
        "anonymous memory {anonymous} KiB → {anonymous_after} KiB (resident {resident} → {resident_after} KiB)"
    );
    // A real document is still fetched. (The short URLs' fetches, each
    // abandoned mid-way, leave too little behind to weigh here; that
    // their guards give everything back is
    // `jwks.rs::a_fetch_abandoned_midway_leaves_nothing_behind`.)
    let document = |url: &str| {
        json!({ "client_id": url, "client_name": "Document host", "redirect_uris": ["http://127.0.0.1:41873/callback"] })
            .to_string()
    };
    let url = document_host(200, "application/json", document).await;
    let query = [
        ("response_type", "code"),
        ("client_id", url.as_str()),
        ("code_challenge", "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"),
        ("code_challenge_method", "S256"),
    ];
    let response = reqwest::Client::new().get(format!("{}/oauth/authorize", server.base)).query(&query).send().await;
    let response = response.unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.text().await.unwrap().contains("Document host"));
}

/// Registers a client with `redirect_uris` from `client` → (status, body).
async fn register(client: &reqwest::Client, server: &Server, redirect_uris: &[&str]) -> (u16, Value, Option<String>) {
    let metadata = json!({ "client_name": "Host", "redirect_uris": redirect_uris, "application_type": "native" });
    let response = client.post(format!("{}/oauth/register", server.base)).json(&metadata).send().await.unwrap();
    let status = response.status().as_u16();
    let retry = response.headers().get("retry-after").map(|v| v.to_str().unwrap().to_string());
    (status, response.json().await.unwrap_or(Value::Null), retry)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_registration_flood_from_many_addresses_locks_no_new_client_out() {
    let server = Server::start(&[]);
    // 12,000 registrations from 24 addresses, as the review sent them.
    let mut floods = Vec::new();
    for a in 0..24u8 {
        let client = client_from(Ipv4Addr::new(127, 0, 6, 1 + a), None);
        let base = server.base.clone();
        floods.push(tokio::spawn(async move {
            let metadata =
                json!({ "client_name": "flood", "redirect_uris": ["http://127.0.0.1/cb"], "application_type": "native" });
            let (mut created, mut refused) = (0, 0);
            for _ in 0..500 {
                let response = client.post(format!("{base}/oauth/register")).json(&metadata).send().await.unwrap();
                match response.status().as_u16() {
                    201 => created += 1,
                    429 => {
                        assert!(response.headers().contains_key("retry-after"));
                        refused += 1
                    }
                    other => panic!("a flood registration answered {other}"),
                }
            }
            (created, refused)
        }));
    }
    let mut created = 0;
    for flood in floods {
        let (c, r) = flood.await.unwrap();
        assert!(r > 0, "one address cannot register without end");
        created += c;
    }
    assert!(created < 24 * 40, "{created} registrations from 24 addresses");
    // A real client from another address registers at once.
    let newcomer = client_from(Ipv4Addr::new(127, 0, 7, 1), None);
    let (status, body, _) = register(&newcomer, &server, &["https://claude.ai/api/mcp/auth_callback"]).await;
    assert_eq!(status, 201, "{body}");
    // A flooder is told when to come back.
    let flooder = client_from(Ipv4Addr::new(127, 0, 6, 1), None);
    let (status, body, retry) = register(&flooder, &server, &["http://127.0.0.1/cb"]).await;
    assert_eq!((status, body["error"].as_str()), (429, Some("temporarily_unavailable")), "{body}");
    assert!(retry.is_some_and(|r| r.parse::<u64>().is_ok_and(|s| (1..=60).contains(&s))));
}

#[tokio::test(flavor = "multi_thread")]
async fn mcp_hosts_register_with_their_own_schemes_and_browser_schemes_are_refused() {
    let server = Server::start(&[]);
    let client = reqwest::Client::new();
    // Cursor's, as it sends it.
    let cursor = ["cursor://anysphere.cursor-mcp/oauth/callback", "http://localhost:8787/callback"];
    let (status, body, _) = register(&client, &server, &cursor).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["redirect_uris"], json!(cursor));
    let (status, _, _) = register(&client, &server, &["vscode://vscode.github-authentication/did-authenticate"]).await;
    assert_eq!(status, 201);
    for bad in ["javascript:alert(1)", "data:text/html,<b>x</b>", "file:///etc/passwd", "http://app.example/cb"] {
        let (status, body, _) = register(&client, &server, &[bad]).await;
        assert_eq!((status, body["error"].as_str()), (400, Some("invalid_redirect_uri")), "{bad}: {body}");
    }
    // MCP 2026-07-28: a registration says what the client is (OpenID
    // Connect Registration §2), and a web site's redirect URIs are web ones.
    let post = |metadata: Value| {
        let (client, url) = (client.clone(), format!("{}/oauth/register", server.base));
        async move {
            let response = client.post(url).json(&metadata).send().await.unwrap();
            (response.status().as_u16(), response.json::<Value>().await.unwrap())
        }
    };
    let (status, body) = post(json!({ "client_name": "Host", "redirect_uris": ["http://127.0.0.1/cb"] })).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("invalid_client_metadata")), "{body}");
    assert!(body["error_description"].as_str().unwrap().contains("application_type"), "{body}");
    let web = json!({ "client_name": "Site", "redirect_uris": [cursor[0]], "application_type": "web" });
    let (status, body) = post(web).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("invalid_redirect_uri")), "{body}");
    let web = json!({ "client_name": "Site", "redirect_uris": ["https://site.example/cb"], "application_type": "web" });
    let (status, body) = post(web).await;
    assert_eq!((status, body["application_type"].as_str()), (201, Some("web")), "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn scopes_this_server_does_not_know_are_ignored() {
    let server = Server::start(&[]);
    server
        .call_as(Some(TOKEN), Method::PUT, "/admin/end-users/alice", Some(&json!({"password": "alice-password"})))
        .await;
    let client = reqwest::Client::new();
    let (_, registered, _) = register(&client, &server, &["http://127.0.0.1:41873/callback"]).await;
    let client_id = registered["client_id"].as_str().unwrap();
    for (scope, shown) in [("openid offline_access tools:read", "tools:read"), ("openid offline_access", "tools:call")]
    {
        let query = [
            ("response_type", "code"),
            ("client_id", client_id),
            ("code_challenge", "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"),
            ("code_challenge_method", "S256"),
            ("scope", scope),
        ];
        let response = client.get(format!("{}/oauth/authorize", server.base)).query(&query).send().await.unwrap();
        let status = response.status().as_u16();
        let page = response.text().await.unwrap();
        assert_eq!(status, 200, "{scope}: {page}");
        assert!(page.contains(shown), "{scope}: {page}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn one_address_asking_the_token_endpoint_too_often_waits_and_others_do_not() {
    let server = Server::start(&[]);
    let form = [("grant_type", "refresh_token"), ("refresh_token", "plinth_rt_madeup"), ("client_id", "c")];
    let noisy = client_from(Ipv4Addr::new(127, 0, 8, 1), None);
    let mut statuses = Vec::new();
    for _ in 0..100 {
        let response = noisy.post(format!("{}/oauth/token", server.base)).form(&form).send().await.unwrap();
        let status = response.status().as_u16();
        if status == 429 {
            assert!(response.headers().contains_key("retry-after"));
            let body: Value = response.json().await.unwrap();
            assert_eq!(body["error"], "temporarily_unavailable", "{body}");
        }
        statuses.push(status);
    }
    assert_eq!(statuses[0], 400, "a made-up refresh token is invalid_grant");
    assert!(statuses.contains(&429), "one address is rated: {statuses:?}");
    let quiet = client_from(Ipv4Addr::new(127, 0, 8, 2), None);
    let response = quiet.post(format!("{}/oauth/token", server.base)).form(&form).send().await.unwrap();
    assert_eq!(response.status(), 400, "another address is not");
}

/// Serves `body` as `content_type` with `status` at `/client.json` on
/// 127.0.0.1 → its URL.
async fn document_host(status: u16, content_type: &'static str, body: impl Fn(&str) -> String) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/client.json", listener.local_addr().unwrap());
    let body = body(&url);
    let status = axum::http::StatusCode::from_u16(status).unwrap();
    let app = axum::Router::new().route(
        "/client.json",
        axum::routing::get(move || {
            let body = body.clone();
            async move { (status, [(axum::http::header::CONTENT_TYPE, content_type)], body) }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

#[tokio::test(flavor = "multi_thread")]
async fn a_metadata_document_is_used_only_when_answered_200_as_json() {
    let server = Server::start(&["--oauth-allow-http", "--allow-private-cidr", "127.0.0.0/8"]);
    let document = |url: &str| {
        json!({ "client_id": url, "client_name": "Document host", "redirect_uris": ["http://127.0.0.1:41873/callback"] })
            .to_string()
    };
    let page = |client_id: String| {
        let base = server.base.clone();
        async move {
            let query = [
                ("response_type", "code"),
                ("client_id", client_id.as_str()),
                ("code_challenge", "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"),
                ("code_challenge_method", "S256"),
            ];
            let response = reqwest::Client::new().get(format!("{base}/oauth/authorize")).query(&query).send().await;
            let response = response.unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        }
    };
    let good = document_host(200, "application/json; charset=utf-8", document).await;
    assert_eq!(page(good).await.0, 200);
    for (status, content_type) in [(200, "text/html"), (200, "text/plain"), (203, "application/json")] {
        let url = document_host(status, content_type, document).await;
        let (answered, text) = page(url).await;
        assert_eq!(answered, 400, "{status} {content_type}: {text}");
    }
    // A client_id past 1 KiB is not looked at.
    let long = format!("http://127.0.0.1:9/{}.json", "x".repeat(2_000));
    let (status, text) = page(long).await;
    assert_eq!(status, 400);
    assert!(text.contains("longer than this server reads"), "{text}");
}
