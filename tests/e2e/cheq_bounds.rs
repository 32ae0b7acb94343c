//! What a consumer can make the server keep through CHEQ: transactions
//! waiting for their end users, bounded per tenant and per end user (`429
//! too_many_pending_confirmations`, nothing stored), names that are no end
//! user refused before anything is stored, each transaction capped in size,
//! and every transaction a tenant keeps bounded in number — while another
//! tenant deploys and decides as ever.

use crate::cheq::{PREMIUM, booking, fetch, pack_with_confirmation};
use crate::mcp::{Mcp, arguments};
use crate::support::{Server, TOKEN, invocation, plugins_dir};
use reqwest::Method;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// A server with `book_flight` (confirmation above economy) and `echo`.
async fn server_with_book_flight() -> (Server, tempfile::TempDir, Vec<u8>) {
    let plugins = tempfile::tempdir().unwrap();
    let packed = pack_with_confirmation("book-flight", PREMIUM, plugins.path()).unwrap();
    let bytes = std::fs::read(packed).unwrap();
    let server = Server::start_in(tempfile::tempdir().unwrap(), &["--plugins", plugins.path().to_str().unwrap()]);
    (server, plugins, bytes)
}

/// Tenant `name` with `quotas`, `bytes` deployed in it and `users` as its
/// end users: (the tool's id, a consumer key).
async fn tenant_with(server: &Server, name: &str, quotas: Value, bytes: &[u8], users: &[&str]) -> (String, String) {
    server.create_tenant(name, quotas).await;
    let (status, deployed) = server.deploy_as(TOKEN, name, bytes.to_vec()).await;
    assert_eq!(status, 201, "{deployed}");
    for user in users {
        server.add_end_user(&format!("/t/{name}"), user).await;
    }
    let (_, consumer) = server.create_key(Some(name), "consumer").await;
    (deployed["toolId"].as_str().unwrap().to_string(), consumer)
}

/// An A2T call of `book_flight` (first class) in `tenant` for `end_user`,
/// with `key` → (status, body).
async fn book_first(server: &Server, tenant: &str, tool_id: &str, key: &str, end_user: &str) -> (u16, Value) {
    let response = server
        .request_as(Some(key), Method::POST, &format!("/t/{tenant}/tools/{tool_id}:invoke"))
        .header("Plinth-End-User", end_user)
        .json(&invocation("book_flight", &booking("FIRST", 2)))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn stored_in(server: &Server, tenant: &str) -> i64 {
    server.stored_count(&format!("SELECT count(*) FROM confirmations WHERE tenant = '{tenant}'"))
}

/// A consumer of one tenant floods calls that need confirmation: past its
/// tenant's bound (and an end user's) every call is refused with `429
/// too_many_pending_confirmations` naming the quota, on every door, and
/// nothing more is stored; names that are not end users are refused
/// before anything is stored. Meanwhile another tenant deploys, opens a
/// transaction and decides it as ever. (How long those take during the
/// flood is measured by hand, not asserted: no timing thresholds here.)
#[tokio::test(flavor = "multi_thread")]
async fn a_consumer_flooding_confirmations_is_bounded_and_another_tenant_carries_on() {
    let (server, _plugins, bytes) = server_with_book_flight().await;
    let quotas = json!({ "maxPendingConfirmations": 10, "maxPendingConfirmationsPerEndUser": 3 });
    let users = ["alice", "bob", "carol", "dave", "erin"];
    let (flood_tool, flood_key) = tenant_with(&server, "flood", quotas, &bytes, &users).await;
    let (quiet_tool, quiet_key) = tenant_with(&server, "quiet", json!({}), &bytes, &["bea"]).await;

    // One end user's bound: alice's fourth waiting call is refused.
    for _ in 0..3 {
        let (status, body) = book_first(&server, "flood", &flood_tool, &flood_key, "alice").await;
        assert_eq!(status, 202, "{body}");
    }
    let (status, body) = book_first(&server, "flood", &flood_tool, &flood_key, "alice").await;
    assert_eq!((status, &body["error"]["code"]), (429, &json!("too_many_pending_confirmations")), "{body}");
    assert_eq!(body["error"]["limit"], "maxPendingConfirmationsPerEndUser", "{body}");
    assert_eq!(body["error"]["maxPendingConfirmationsPerEndUser"], 3, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("`alice`") && message.contains("decide") && message.contains("nothing was stored"));
    assert_eq!(stored_in(&server, "flood"), 3, "the refused call stored nothing");

    // A name that is no end user of the tenant: nobody could confirm it.
    let (status, body) = book_first(&server, "flood", &flood_tool, &flood_key, "mallory").await;
    assert_eq!((status, &body["error"]["code"]), (400, &json!("unknown_end_user")), "{body}");
    assert_eq!(stored_in(&server, "flood"), 3, "nothing stored for mallory");

    // The flood: eight clients calling for the other end users, as fast as
    // they can, until the other tenant is done.
    let server = Arc::new(server);
    let stop = Arc::new(AtomicBool::new(false));
    let refused = Arc::new(AtomicUsize::new(0));
    let opened = Arc::new(AtomicUsize::new(0));
    let flood: Vec<_> = (0..8)
        .map(|n| {
            let (server, stop, refused, opened) = (server.clone(), stop.clone(), refused.clone(), opened.clone());
            let (tool, key) = (flood_tool.clone(), flood_key.clone());
            tokio::spawn(async move {
                let mut answers = Vec::new();
                let mut call = n;
                while !stop.load(Ordering::Relaxed) {
                    let user = users[1 + call % 4];
                    call += 1;
                    let (status, body) = book_first(&server, "flood", &tool, &key, user).await;
                    match status {
                        202 => opened.fetch_add(1, Ordering::Relaxed),
                        _ => refused.fetch_add(1, Ordering::Relaxed),
                    };
                    answers.push((status, body));
                }
                answers
            })
        })
        .collect();
    // Wait until the flood is past its tenant's bound (or, on a server
    // without one, has stored more than it).
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while refused.load(Ordering::Relaxed) < 50 && opened.load(Ordering::Relaxed) < 50 {
        assert!(std::time::Instant::now() < deadline, "the flood made no progress");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // During the flood, the other tenant deploys a tool...
    let echo = std::fs::read(plugins_dir().join("echo.wasm")).unwrap();
    let (status, deployed) = server.deploy_as(TOKEN, "quiet", echo).await;
    assert_eq!(status, 201, "{deployed}");
    // ...and opens a transaction, which its end user decides.
    let (status, pack) = book_first(&server, "quiet", &quiet_tool, &quiet_key, "bea").await;
    assert_eq!(status, 202, "{pack}");
    let resource_uri = pack["resource uri"].as_str().unwrap();
    let (status, _, cheq) = fetch(resource_uri).await;
    assert_eq!(status, 200, "{cheq}");
    let rejected = reqwest::Client::new().post(format!("{resource_uri}?reject")).send().await.unwrap();
    assert_eq!(rejected.status(), 200);
    let (status, _, answer) = fetch(pack["result uri"].as_str().unwrap()).await;
    assert_eq!((status, &answer["error"]["code"]), (403, &json!("confirmation_rejected")), "{answer}");

    stop.store(true, Ordering::Relaxed);
    let mut answers = Vec::new();
    for client in flood {
        answers.extend(client.await.unwrap());
    }
    let opened: Vec<&Value> = answers.iter().filter(|(status, _)| *status == 202).map(|(_, body)| body).collect();
    assert_eq!(opened.len(), 7, "past the tenant's bound of 10 (alice holds 3), transactions were stored");
    for (status, body) in answers.iter().filter(|(status, _)| *status != 202) {
        assert_eq!((*status, &body["error"]["code"]), (429, &json!("too_many_pending_confirmations")), "{body}");
        let limit = body["error"]["limit"].as_str().unwrap();
        assert!(["maxPendingConfirmations", "maxPendingConfirmationsPerEndUser"].contains(&limit), "{body}");
    }
    assert!(
        answers.iter().any(|(_, body)| body["error"]["limit"] == "maxPendingConfirmations"),
        "the tenant's bound refused none"
    );
    assert_eq!(stored_in(&server, "flood"), 10, "the flood stored past its bound");
    assert_eq!(stored_in(&server, "quiet"), 1);

    // Every door answers the same refusals, and stores nothing for them.
    let otc_call = |user: &str| {
        json!({ "request": {
            "tool_id": "Travel.BookFlight",
            "input": { "flight_number": "UA123", "date": "2026-12-24", "passengers": 2, "cabin_class": "FIRST" },
            "context": { "user_id": user },
        } })
    };
    let otc = |user: &'static str| {
        let (server, key, body) = (&server, &flood_key, otc_call(user));
        async move { server.call_as(Some(key), Method::POST, "/t/flood/otc/tools/call", Some(&body)).await }
    };
    let (status, body) = otc("bob").await;
    assert_eq!((status, &body["code"]), (429, &json!("too_many_pending_confirmations")), "{body}");
    assert!(body["$schema"].is_string(), "the OTC error shape: {body}");
    let (status, body) = otc("mallory").await;
    assert_eq!((status, &body["code"]), (400, &json!("unknown_end_user")), "{body}");
    let mcp = Mcp::with_key(&server, &flood_key, "/t/flood");
    let answer = mcp.call("book_flight", arguments(&booking("FIRST", 2)), json!({ "endUser": "bob" })).await;
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    assert_eq!(answer["result"]["_meta"]["code"], "too_many_pending_confirmations", "{answer}");
    let answer = mcp.call("book_flight", arguments(&booking("FIRST", 2)), json!({ "endUser": "mallory" })).await;
    assert_eq!(
        (&answer["error"]["code"], &answer["error"]["data"]["code"]),
        (&json!(-32602), &json!("unknown_end_user"))
    );
    assert_eq!(stored_in(&server, "flood"), 10);
}

/// A consumer that opens transactions and rejects them at once (anyone
/// holding a resource URI may) never has more than a few waiting, so the
/// waiting bound alone would not stop it: the transactions its tenant
/// keeps are bounded too, the oldest settled ones forgotten first. And one
/// transaction is capped in size: a larger one is refused, nothing stored.
#[tokio::test(flavor = "multi_thread")]
async fn what_a_tenant_keeps_of_its_transactions_is_bounded_in_number_and_size() {
    let (server, _plugins, bytes) = server_with_book_flight().await;
    let quotas = json!({ "maxStoredConfirmations": 20, "maxConfirmationBytes": 8_192 });
    let (tool, key) = tenant_with(&server, "cycle", quotas, &bytes, &["alice"]).await;
    let mut resource_uris = Vec::new();
    for _ in 0..60 {
        let (status, pack) = book_first(&server, "cycle", &tool, &key, "alice").await;
        assert_eq!(status, 202, "{pack}");
        let resource_uri = pack["resource uri"].as_str().unwrap().to_string();
        let rejected = reqwest::Client::new().post(format!("{resource_uri}?reject")).send().await.unwrap();
        assert_eq!(rejected.status(), 200);
        resource_uris.push(resource_uri);
    }
    assert!(stored_in(&server, "cycle") <= 20, "{} transactions kept for a bound of 20", stored_in(&server, "cycle"));
    // The newest are kept; the oldest were forgotten before their retention.
    assert_eq!(fetch(&resource_uris[59]).await.0, 200);
    assert_eq!(fetch(&resource_uris[0]).await.0, 404);

    // One transaction past `maxConfirmationBytes`: refused, nothing stored.
    let echo = std::fs::read(plugins_dir().join("echo.wasm")).unwrap();
    let (status, deployed) = server.deploy_as(TOKEN, "cycle", echo).await;
    assert_eq!(status, 201, "{deployed}");
    let echo_id = deployed["toolId"].as_str().unwrap();
    let policy = format!("/t/cycle/admin/tools/{echo_id}/confirmation");
    let (status, body) = server.call_as(Some(TOKEN), Method::PUT, &policy, Some(&json!({ "required": true }))).await;
    assert_eq!(status, 204, "{body}");
    let before = stored_in(&server, "cycle");
    let echo_call = |text: String| {
        server
            .request_as(Some(&key), Method::POST, &format!("/t/cycle/tools/{echo_id}:invoke"))
            .header("Plinth-End-User", "alice")
            .json(&invocation("echo", &[("text", json!(text))]))
            .send()
    };
    let response = echo_call("x".repeat(4_000)).await.unwrap();
    let status = response.status();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, 413, "{body}");
    assert_eq!(
        (&body["error"]["code"], &body["error"]["maxConfirmationBytes"]),
        (&json!("confirmation_too_large"), &json!(8_192)),
        "{body}"
    );
    assert_eq!(stored_in(&server, "cycle"), before, "nothing stored");
    assert_eq!(echo_call("small".into()).await.unwrap().status(), 202);
}
