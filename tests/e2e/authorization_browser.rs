//! End-user authorization in a real headless Chromium: the person follows
//! the agent's link, logs in, presses Continue, allows it at the provider —
//! a site of its own (`localhost`, where Plinth is `127.0.0.1`), whose page
//! sends them back — so that the browser's own rules apply: the page's CSP
//! must let its form go on to the provider, and the session must reach the
//! callback, a navigation started on another site, although its cookie is
//! `SameSite=Strict`.

use crate::authorization::{Setup, setup_with};
use crate::browser;
use crate::support::{fixture, outputs};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread")]
async fn a_person_connects_their_account_in_a_browser_and_the_retried_call_acts_with_it() {
    let s: Setup = setup_with("localhost", fixture("use_account.wasm"), &["--allow-private-cidr", "::1/128"]).await;
    s.provider.sign_in_as("alice@inbox");
    s.provider.state.lock().unwrap().consent_page = true;
    let (url, check_url) = s.challenge("alice").await;
    let browser = browser::start().await;

    browser.goto(&url).await;
    browser.wait_for_text("Log in to see which account you are asked to connect", WAIT).await;
    browser.fill("#user", "alice").await;
    browser.fill("#password", "alice-password").await;
    browser.click("#login").await;
    let page = browser.wait_for_text("Continue to Inbox", WAIT).await;
    for shown in ["use_account", "Inbox", "inbox.read", "alice", "default"] {
        assert!(page.contains(shown), "the link page does not show {shown}:\n{page}");
    }
    browser.click("#continue").await;
    browser.wait_for_text("Allow Plinth to read your mail?", WAIT).await;
    assert!(browser.current_url().await.starts_with(&format!("{}/authorize?", s.provider.issuer)));
    browser.click("#allow").await;
    let page = browser.wait_for_text("Connected", WAIT).await;
    assert!(page.contains("You can go back to your agent"), "{page}");
    assert!(browser.current_url().await.starts_with(&format!("{}/connections/callback?", s.server.base)));
    assert_eq!(s.provider.exchanges(), 1);

    let (status, body) = s.status(&check_url, Some(&s.consumer)).await;
    assert_eq!((status, body["state"].as_str()), (200, Some("connected")), "{body}");
    let (status, body, _) = s.call_as("alice").await;
    assert_eq!(status, 200, "{body}");
    assert!(outputs(&body)["body"].as_str().unwrap().contains("hello alice@inbox"), "{body}");

    // The person's accounts page, and Revoke.
    browser.goto(&format!("{}/connections", s.server.base)).await;
    browser.wait_for_text("Your connected accounts", WAIT).await;
    browser.click("#revoke-inbox").await;
    browser.wait_for_text("You have connected no account.", WAIT).await;
    browser.close().await;
    assert_eq!(s.call_as("alice").await.0, 403, "revoked: the call is a challenge again");
}
