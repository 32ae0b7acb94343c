//! The built-in confirmation server, end to end in a real headless Chromium:
//! the agent's call waits, the end user logs in, sees what they are asked
//! to confirm and accepts or rejects it; the agent's poll gets the answer.
//! Also the privacy flow (private inputs typed on the page), another user's
//! login, and a cross-site form post.

use crate::browser::{self, Browser};
use crate::cheq::{booking, call_for, confirming_server, fetch};
use crate::support::{Server, outputs};
use serde_json::{Value, json};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(10);

/// The user application's link: the confirmation URI with the resource URI.
fn confirmation_link(pack: &Value) -> String {
    let resource: String = form_urlencoded::byte_serialize(pack["resource uri"].as_str().unwrap().as_bytes()).collect();
    format!("{}?resource_uri={resource}", pack["confirmation uri"].as_str().unwrap())
}

/// Opens the confirmation link and logs in as `user`.
async fn log_in(browser: &Browser, pack: &Value, user: &str) {
    browser.goto(&confirmation_link(pack)).await;
    browser.wait_for_text("Log in to see what you are asked to confirm", WAIT).await;
    browser.fill("#user", user).await;
    browser.fill("#password", &format!("{user}-password")).await;
    browser.click("#login").await;
}

/// Books a first-class flight for `user` at the fare, as the agent does.
async fn book_first_class(server: &Server, user: &str) -> Value {
    let mut params = booking("FIRST", 1);
    params.push(("quoted_price_usd", json!(4200)));
    let (status, _, pack) = call_for(server, Some(user), "book_flight", &params).await;
    assert_eq!(status, 202, "{pack}");
    pack
}

#[tokio::test(flavor = "multi_thread")]
async fn the_end_user_accepts_a_booking_in_a_browser() {
    let (server, _plugins) = confirming_server(&[]).await;
    let pack = book_first_class(&server, "alice").await;
    let browser = browser::start().await;

    // A wrong password is refused; the right one shows the call.
    browser.goto(&confirmation_link(&pack)).await;
    browser.fill("#user", "alice").await;
    browser.fill("#password", "not-her-password").await;
    browser.click("#login").await;
    browser.wait_for_text("Wrong user name or password", WAIT).await;
    browser.fill("#user", "alice").await;
    browser.fill("#password", "alice-password").await;
    browser.click("#login").await;
    let page = browser.wait_for_text("Book flight", WAIT).await;
    // The tool's own account of the call (its `describe` export) comes first.
    for shown in
        ["alice", "Books 1 passenger in first class on flight UA123", "Total price", "4200 USD, taxes included"]
    {
        assert!(page.contains(shown), "the page does not show {shown}:\n{page}");
    }
    for shown in ["alice", "UA123", "2026-12-24", "FIRST", "4200"] {
        assert!(page.contains(shown), "the page does not show {shown}:\n{page}");
    }
    let (status, _, _) = fetch(pack["result uri"].as_str().unwrap()).await;
    assert_eq!(status, 202, "nothing runs before the end user decides");

    browser.click("#accept").await;
    browser.wait_for_text("You confirmed", WAIT).await;
    browser.close().await;

    let (status, _, body) = fetch(pack["result uri"].as_str().unwrap()).await;
    assert_eq!(status, 200, "{body}");
    let booked = outputs(&body);
    assert_eq!((&booked["cabin_class"], &booked["total_price_usd"]), (&json!("FIRST"), &json!(4200)));
    assert_eq!(booked["confirmation_code"].as_str().unwrap().len(), 6);

    // The evidence holds the end user's acceptance, countersigned.
    let id = pack["resource uri"].as_str().unwrap().rsplit('/').next().unwrap().to_string();
    let (_, evidence) = server.get(&format!("/admin/cheq/{id}")).await;
    let signatures = evidence["decision"]["signatures"].as_array().unwrap();
    assert_eq!(signatures.len(), 2, "{evidence}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_end_user_rejects_a_booking_in_a_browser() {
    let (server, _plugins) = confirming_server(&[]).await;
    let pack = book_first_class(&server, "bob").await;
    let browser = browser::start().await;
    log_in(&browser, &pack, "bob").await;
    browser.wait_for_text("Book flight", WAIT).await;
    browser.click("#reject").await;
    browser.wait_for_text("You rejected", WAIT).await;
    // The decision is final: the page cannot be used to accept it after all.
    browser.goto(&confirmation_link(&pack)).await;
    browser.wait_for_text("already rejected", WAIT).await;
    browser.close().await;

    let (status, _, body) = fetch(pack["result uri"].as_str().unwrap()).await;
    assert_eq!((status, &body["error"]["code"]), (403, &json!("confirmation_rejected")), "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn another_user_cannot_approve() {
    let (server, _plugins) = confirming_server(&[]).await;
    let pack = book_first_class(&server, "alice").await;
    let browser = browser::start().await;
    log_in(&browser, &pack, "bob").await;
    let page = browser.wait_for_text("another user", WAIT).await;
    assert!(!page.contains("Accept"), "no Accept button for bob:\n{page}");
    assert!(browser.client().find(fantoccini::Locator::Css("#accept")).await.is_err());
    browser.close().await;
    let (status, _, _) = fetch(pack["result uri"].as_str().unwrap()).await;
    assert_eq!(status, 202, "still waiting for alice");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cross_site_form_cannot_accept() {
    let (server, _plugins) = confirming_server(&[]).await;
    let pack = book_first_class(&server, "alice").await;
    let id = pack["resource uri"].as_str().unwrap().rsplit('/').next().unwrap().to_string();
    // Another site (another port of 127.0.0.1: the same "site" to the
    // browser, so the session cookie goes along) with a form that posts an
    // acceptance without the page's form token.
    let action = format!("{}/cheq/decide", server.base);
    let evil = format!(
        "<!doctype html><form id=f method=post action=\"{action}\"><input type=hidden name=transaction value=\"{id}\">\
         <input type=hidden name=decision value=accept><button id=go>Win a prize</button></form>"
    );
    let app = axum::Router::new().route("/", axum::routing::get(move || async move { axum::response::Html(evil) }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let evil_url = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let browser = browser::start().await;
    log_in(&browser, &pack, "alice").await;
    browser.wait_for_text("Book flight", WAIT).await;
    browser.goto(&evil_url).await;
    browser.click("#go").await;
    let page = browser.wait_for_text("Not confirmed", WAIT).await;
    // Refused as a post from another site (Fetch Metadata), before its
    // missing form token would have been.
    assert!(page.contains("did not come from the confirmation page"), "{page}");
    browser.close().await;
    let (status, _, body) = fetch(pack["result uri"].as_str().unwrap()).await;
    assert_eq!(status, 202, "still pending: {body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn private_inputs_are_typed_on_the_page_and_never_reach_the_agent() {
    let (server, _plugins) = confirming_server(&[]).await;
    const FROM: &str = "DE89370400440532013000";
    const TO: &str = "GB29NWBK60161331926819";

    // The agent is not offered the account numbers, and cannot give them.
    let (_, tools) = server.get("/otc/tools").await;
    let transfer = tools["tools"].as_array().unwrap().iter().find(|t| t["name"] == "Default_TransferFunds").unwrap();
    let properties = transfer["input_schema"]["parameters"]["properties"].as_object().unwrap();
    assert_eq!(properties.keys().collect::<Vec<_>>(), ["amount_usd"], "{transfer}");
    let call =
        |input: Value| json!({ "tool_id": "Default.TransferFunds", "input": input, "context": { "user_id": "alice" } });
    let (status, body) =
        server.post("/otc/tools/call", &call(json!({ "amount_usd": 250, "from_account": FROM }))).await;
    assert_eq!(status, 422, "{body}");
    assert!(body.to_string().contains("private"), "{body}");

    let (status, pack) = server.post("/otc/tools/call", &call(json!({ "amount_usd": 250 }))).await;
    assert_eq!((status, &pack["result"]["success"]), (200, &json!(false)), "{pack}");
    let browser = browser::start().await;
    log_in(&browser, &pack, "alice").await;
    let page = browser.wait_for_text("Transfer funds", WAIT).await;
    assert!(page.contains("250"), "{page}");
    browser.fill("#private-from_account", FROM).await;
    browser.fill("#private-to_account", TO).await;
    browser.click("#accept").await;
    browser.wait_for_text("You confirmed", WAIT).await;
    browser.close().await;

    let result = reqwest::Client::new()
        .get(pack["result uri"].as_str().unwrap())
        .bearer_auth(crate::support::TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(result.status(), 200);
    let text = result.text().await.unwrap();
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["result"]["success"], true, "{body}");
    // The numbers reached the tool (it printed the last four)...
    assert_eq!(body["result"]["value"]["to_account_last4"], "6819", "{body}");
    assert!(body["result"]["value"]["summary"].as_str().unwrap().contains("[redacted]"), "{body}");
    // ...and appear in nothing the agent, the evidence or the logs show.
    let id = pack["resource uri"].as_str().unwrap().rsplit('/').next().unwrap().to_string();
    let (_, _, cheq) = fetch(pack["resource uri"].as_str().unwrap()).await;
    let (_, evidence) = server.get(&format!("/admin/cheq/{id}")).await;
    for seen in [text, cheq.to_string(), evidence.to_string(), server.logs()] {
        for number in [FROM, TO] {
            assert!(!seen.contains(number), "{number} leaked: {seen}");
        }
    }
}
