//! The designer's catalog in a real headless Chromium: sign in with a
//! consumer key, search, filter by tag, read a signature, compare two
//! versions of echo, book a flight from the form and see a bad field
//! refused where it is; a call that needs its end user's confirmation,
//! completed through the confirmation pages; vendor markup that stays text;
//! the pages at a phone's width.
//!
//! The tests save what the designer sees as PNGs, into `target/screenshots/`
//! or the folder `PLINTH_SCREENSHOTS` names: `make screenshots` runs them
//! into `docs/catalog/`, the pictures the README and docs/catalog.md show.

use crate::browser::{self, Browser};
use crate::catalog::{bookings, catalog_server};
use crate::support::TOKEN;
use reqwest::Method;
use serde_json::json;
use std::path::PathBuf;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(10);
/// The width of the desktop screenshots, in CSS pixels.
const DESKTOP: u32 = 1200;
/// A phone's width (an iPhone 12–15's viewport).
const PHONE: u32 = 390;

/// Where a screenshot goes: `{name}.png` in `PLINTH_SCREENSHOTS`, else in
/// `target/screenshots/` (a test run leaves the committed pictures alone).
fn picture(name: &str) -> PathBuf {
    let dir = std::env::var_os("PLINTH_SCREENSHOTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/screenshots"));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    dir.join(format!("{name}.png"))
}

/// Saves the whole page at `width` as `{name}.png` ([`picture`]).
async fn capture(browser: &Browser, name: &str, width: u32) {
    browser.fit(width, if width == PHONE { 844 } else { 720 }).await;
    browser.screenshot(&picture(name)).await;
}

/// Whether the page is wider than the viewport (a phone would scroll
/// sideways).
async fn overflows(browser: &Browser) -> bool {
    let widths = browser.evaluate("return [document.documentElement.scrollWidth, window.innerWidth]").await;
    widths[0].as_u64() > widths[1].as_u64()
}

/// Signs in on the page the browser is on (the sign-in form).
async fn sign_in(browser: &Browser, key: &str) {
    browser.wait_for_text("Sign in with an API key", WAIT).await;
    browser.fill("#key", key).await;
    browser.click("#sign-in").await;
}

/// The names of the tools the catalog lists, in order.
async fn listed(browser: &Browser) -> Vec<String> {
    let cards = browser.client().find_all(fantoccini::Locator::Css("#results article")).await.unwrap();
    let mut names = Vec::new();
    for card in cards {
        names.push(card.attr("data-tool").await.unwrap().unwrap_or_default());
    }
    names
}

#[tokio::test(flavor = "multi_thread")]
async fn a_designer_finds_reads_compares_and_books_a_flight_in_a_browser() {
    let (server, _plugins) = catalog_server(&[]);
    let (_, key) = server.create_key(Some("default"), "consumer").await;
    let browser = browser::start().await;

    // Signed out, the catalog is the sign-in form.
    browser.goto(&format!("{}/catalog", server.base)).await;
    browser.wait_for_text("Sign in with an API key", WAIT).await;
    capture(&browser, "sign-in", DESKTOP).await;
    browser.fill("#key", "plk_0123456789abcdef_wrong").await;
    browser.click("#sign-in").await;
    browser.wait_for_text("does not open this tenant's catalog", WAIT).await;
    sign_in(&browser, &key).await;
    browser.wait_for_text("Tools of default", WAIT).await;
    assert!(!browser.current_url().await.contains(&key), "no key in a URL");
    assert_eq!(
        listed(&browser).await,
        ["book_flight", "echo", "lookup_weather_by_city", "markup_docs", "transfer_funds"]
    );

    // Search "flight": book_flight, with what identifies it in each protocol.
    browser.fill("#q", "flight").await;
    browser.click("#search").await;
    browser.wait_for_text("1 tool.", WAIT).await;
    assert_eq!(listed(&browser).await, ["book_flight"]);
    let card = browser.text_of("[data-tool=book_flight]").await;
    let id = browser.attribute("[data-tool=book_flight] h2", "id").await.unwrap();
    let ids = browser.text_of("[data-tool=book_flight] .ids").await;
    let lines: Vec<&str> = ids.lines().collect();
    assert_eq!(
        lines,
        ["A2T", id.strip_prefix("tool-").unwrap(), "OTC", "Travel.BookFlight@1.0.0", "MCP", "book_flight"]
    );
    for shown in ["Books seats on a scheduled flight", "travel", "bookings", "Version 1"] {
        assert!(card.contains(shown), "the card does not show {shown}:\n{card}");
    }
    capture(&browser, "search", DESKTOP).await;

    // Filter by tag (the search cleared).
    browser.clear("#q").await;
    browser.select("#tag", "diagnostics").await;
    browser.click("#search").await;
    browser.wait_for_text("2 tools.", WAIT).await;
    assert_eq!(listed(&browser).await, ["echo", "markup_docs"]);
    browser.goto(&format!("{}/catalog", server.base)).await;
    capture(&browser, "catalog", DESKTOP).await;

    // Open book_flight and read its signature.
    browser.fill("#q", "flight").await;
    browser.click("#search").await;
    browser.wait_for_text("1 tool.", WAIT).await;
    browser.click("[data-tool=book_flight] h2 a").await;
    browser.wait_for_text("Inputs", WAIT).await;
    assert_eq!(browser.text_of("#tool-name").await, "book_flight");
    let passengers = browser.text_of("[data-input=passengers]").await;
    assert!(passengers.contains("integer") && passengers.contains("from 1 to 9"), "{passengers}");
    let cabin = browser.text_of("[data-input=cabin_class]").await;
    for value in ["ECONOMY", "PREMIUM_ECONOMY", "BUSINESS", "FIRST", "Lie down seating"] {
        assert!(cabin.contains(value), "{value} is not listed:\n{cabin}");
    }
    assert!(browser.text_of("[data-input=flight_number]").await.contains("at most 6 characters"));
    assert!(browser.text_of("[data-input=quoted_price_usd]").await.contains("optional"));
    assert!(browser.text_of("[data-output=confirmation_code]").await.contains("string"));
    assert!(browser.text_of("#confirmation").await.contains("No call needs confirmation"));
    assert!(browser.text_of("#outbound").await.contains("None"));
    assert!(browser.text_of("#content-hash").await.starts_with("sha256:"));
    assert_eq!(browser.text_of("#otc-id").await, "Travel.BookFlight@1.0.0");
    capture(&browser, "tool", DESKTOP).await;

    // Book a flight from the form.
    browser.click("#try-it").await;
    browser.wait_for_text("Call book_flight", WAIT).await;
    browser.fill("#input-flight_number", "UA123").await;
    browser.fill("#input-date", "2026-12-24").await;
    browser.fill("#input-passengers", "2").await;
    browser.select("#input-cabin_class", "PREMIUM_ECONOMY").await;
    browser.click("#call").await;
    browser.wait_for_text("It ran: the tool answered.", WAIT).await;
    let code = browser.text_of("[data-output=confirmation_code] td").await;
    assert_eq!(code.trim_matches('"').len(), 6, "a confirmation code: {code}");
    assert_eq!(browser.text_of("[data-output=cabin_class] td").await, "\"PREMIUM_ECONOMY\"");
    capture(&browser, "try", DESKTOP).await;
    assert_eq!(bookings(&server).await, 1.0);

    // A reload posts the form again: the page says so and shows the same
    // booking; the flight is not booked twice.
    browser.client().refresh().await.unwrap();
    let resent = browser.wait_for_text("This form was sent before", WAIT).await;
    assert!(resent.contains("The tool did not run again"), "{resent}");
    assert_eq!(browser.text_of("[data-output=confirmation_code] td").await, code);
    assert_eq!(bookings(&server).await, 1.0, "booked once");
    capture(&browser, "try-resent", DESKTOP).await;

    // A passenger too many: the core's error, at its field; nothing else.
    browser.clear("#input-passengers").await;
    browser.fill("#input-passengers", "12").await;
    browser.click("#call").await;
    browser.wait_for_text("must be an integer from 1 to 9; got 12", WAIT).await;
    let error = browser.text_of("#field-passengers .field-error").await;
    assert!(error.contains("passengers") && error.contains("got 12"), "{error}");
    assert_eq!(browser.attribute("#input-passengers", "aria-invalid").await.as_deref(), Some("true"));
    assert_eq!(browser.count(".field-error").await, 1, "only the bad field");
    assert_eq!(browser.count("#answer").await, 0, "nothing ran");
    capture(&browser, "try-invalid", DESKTOP).await;

    // Compare the two versions of echo.
    browser.goto(&format!("{}/catalog?q=echo", server.base)).await;
    browser.click("[data-tool=echo] h2 a").await;
    browser.wait_for_text("Versions", WAIT).await;
    assert_eq!(browser.count("#versions tbody tr").await, 2);
    browser.click("#compare").await;
    browser.wait_for_text("What changed from 1 to 2", WAIT).await;
    let verdict = browser.text_of("#verdict").await;
    assert!(verdict.contains("A caller written against version 1 keeps working with version 2"), "{verdict}");
    let added = browser.text_of("#added").await;
    assert!(added.contains("optional input shout was added") && added.contains("output length was added"), "{added}");
    assert_eq!(browser.count("#new tr.added").await, 2, "shout and length, marked on the newer side");
    assert_eq!(browser.count("#old tr.removed").await, 0);
    capture(&browser, "diff", DESKTOP).await;

    // Signing out ends it.
    browser.click("#sign-out").await;
    browser.wait_for_text("Sign in with an API key", WAIT).await;
    browser.goto(&format!("{}/catalog", server.base)).await;
    browser.wait_for_text("Sign in with an API key", WAIT).await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn markup_in_vendor_text_stays_text_in_the_browser() {
    let (server, _plugins) = catalog_server(&[]);
    let (_, key) = server.create_key(Some("default"), "consumer").await;
    let browser = browser::start().await;
    browser.goto(&format!("{}/catalog?q=note", server.base)).await;
    sign_in(&browser, &key).await;
    browser.wait_for_text("1 tool.", WAIT).await;

    let description = "<script>document.title = \"pwned by the description\"</script>";
    let image = "<img src=x onerror=\"document.title = 'pwned by an image'\">";
    let parameter = "The <em>note</em> to send back. <script>document.title = \"pwned by a parameter\"</script>";
    let enum_value = "<script>document.title = \"pwned by an enum value\"</script>";
    for page in ["the list", "the tool", "the form"] {
        match page {
            "the tool" => browser.click("[data-tool=markup_docs] h2 a").await,
            "the form" => browser.click("#try-it").await,
            _ => {}
        }
        let text = browser.wait_for_text("pwned by the description", WAIT).await;
        let mut shown = vec![description, image, "<b>markup</b>"];
        if page != "the list" {
            shown.extend([parameter, enum_value]);
        }
        if page == "the form" {
            shown.retain(|s| *s != "<b>markup</b>");
        }
        for text_of_it in shown {
            assert!(text.contains(text_of_it), "{page} does not show {text_of_it} as text:\n{text}");
        }
        // Text only: no element was made of it, and nothing ran.
        for element in ["script", "img", "main b", "main em"] {
            assert_eq!(browser.count(element).await, 0, "{page} has a {element} element");
        }
        let title = browser.client().title().await.unwrap();
        assert!(!title.contains("pwned"), "{page}: {title}");
    }
    browser.goto(&format!("{}/catalog?q=note", server.base)).await;
    browser.click("[data-tool=markup_docs] h2 a").await;
    browser.wait_for_text("Inputs", WAIT).await;
    capture(&browser, "markup", DESKTOP).await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_that_needs_confirmation_is_completed_on_the_confirmation_page() {
    let (server, _plugins) = catalog_server(&[]);
    let password = json!({ "password": "alice-password" });
    let (status, body) = server.call_as(Some(TOKEN), Method::PUT, "/admin/end-users/alice", Some(&password)).await;
    assert_eq!(status, 204, "{body}");
    let (_, key) = server.create_key(Some("default"), "consumer").await;
    let browser = browser::start().await;
    browser.goto(&format!("{}/catalog?q=transfer", server.base)).await;
    sign_in(&browser, &key).await;
    browser.wait_for_text("1 tool.", WAIT).await;
    assert!(browser.text_of("[data-tool=transfer_funds]").await.contains("every call needs confirmation"));
    browser.click("[data-tool=transfer_funds] h2 a").await;
    browser.wait_for_text("Every call needs its end user's confirmation", WAIT).await;
    browser.click("#try-it").await;

    // The account numbers are the end user's to type: not on this form.
    let form = browser.wait_for_text("Call transfer_funds", WAIT).await;
    assert!(form.contains("Not asked here: from_account, to_account"), "{form}");
    assert_eq!(browser.count("#input-from_account").await, 0);
    browser.fill("#input-amount_usd", "250").await;
    browser.click("#call").await;
    browser.wait_for_text("name the end user who confirms it", WAIT).await;
    browser.fill("#end-user", "alice").await;
    browser.click("#call").await;
    let waiting = browser.wait_for_text("The call waits for alice to confirm it.", WAIT).await;
    assert!(waiting.contains("resource uri") && waiting.contains("result uri"), "the URI pack: {waiting}");
    capture(&browser, "pending", DESKTOP).await;
    let status_page = browser.attribute("#status-link", "href").await.unwrap();

    // What a human does next: the confirmation page, as the end user.
    browser.click("#confirm-link").await;
    browser.wait_for_text("Log in to see what you are asked to confirm", WAIT).await;
    browser.fill("#user", "alice").await;
    browser.fill("#password", "alice-password").await;
    browser.click("#login").await;
    let page = browser.wait_for_text("Transfer funds", WAIT).await;
    assert!(page.contains("250"), "{page}");
    browser.fill("#private-from_account", "DE89370400440532013000").await;
    browser.fill("#private-to_account", "GB29NWBK60161331926819").await;
    capture(&browser, "confirmation-page", PHONE).await;
    assert!(!overflows(&browser).await, "the confirmation page fits a phone");
    browser.click("#accept").await;
    browser.wait_for_text("You confirmed", WAIT).await;

    // Back in the catalog, the call's answer, as its result URI gives it.
    browser.goto(&format!("{}{status_page}", server.base)).await;
    browser.wait_for_text("It ended with status 200", WAIT).await;
    let kept = browser.text_of("#kept").await;
    assert!(kept.contains("\"to_account_last4\"") && kept.contains("\"6819\""), "{kept}");
    assert!(kept.contains("[redacted]") && !kept.contains("GB29"), "{kept}");
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_pages_fit_a_phone() {
    let (server, _plugins) = catalog_server(&[]);
    let (_, key) = server.create_key(Some("default"), "consumer").await;
    let browser = browser::start().await;
    browser.fit(PHONE, 844).await;
    browser.goto(&format!("{}/catalog", server.base)).await;
    sign_in(&browser, &key).await;
    browser.wait_for_text("Tools of default", WAIT).await;
    assert!(!overflows(&browser).await, "the catalog scrolls sideways on a phone");
    capture(&browser, "phone-catalog", PHONE).await;

    browser.goto(&format!("{}/catalog?q=flight", server.base)).await;
    browser.click("[data-tool=book_flight] h2 a").await;
    browser.wait_for_text("Inputs", WAIT).await;
    assert!(!overflows(&browser).await, "the tool page scrolls sideways on a phone");
    capture(&browser, "phone-tool", PHONE).await;

    browser.click("#try-it").await;
    browser.wait_for_text("Call book_flight", WAIT).await;
    assert!(!overflows(&browser).await, "the form scrolls sideways on a phone");

    browser.goto(&format!("{}/catalog?q=echo", server.base)).await;
    browser.click("[data-tool=echo] h2 a").await;
    browser.click("#compare").await;
    browser.wait_for_text("What changed", WAIT).await;
    assert!(!overflows(&browser).await, "the diff scrolls sideways on a phone");
    browser.close().await;
}

/// A publisher's view of a tool: its usage over the last hour and its
/// recent failures with their log lines, in the browser (no script runs;
/// the chart is server-drawn SVG).
#[tokio::test(flavor = "multi_thread")]
async fn a_publisher_sees_a_tools_usage_and_recent_failures() {
    use crate::console::{SECRET, console_server};
    let (server, _plugins) = console_server(&["--usage-flush-secs", "1"]).await;
    for fail in [false, false, true, false, true] {
        server.invoke("use_secret", &[("log_lines", json!(1)), ("fail", json!(fail))]).await;
    }
    crate::console::usage_until(&server, "hour", |u| {
        u["items"].as_array().is_some_and(|items| items.iter().any(|i| i["tool"] == "use_secret" && i["calls"] == 5))
    })
    .await;
    let (_, publisher) = server.create_key(Some("default"), "publisher").await;
    let browser = browser::start().await;
    browser.goto(&format!("{}/catalog?q=use_secret", server.base)).await;
    sign_in(&browser, &publisher).await;
    browser.wait_for_text("1 tool.", WAIT).await;
    browser.click("[data-tool=use_secret] h2 a").await;
    let text = browser.wait_for_text("Usage, last hour", WAIT).await;
    assert!(text.contains("5 calls, 2 failed."), "{text}");
    assert!(text.contains("Recent failures"), "{text}");
    assert!(!text.contains(SECRET), "{text}");
    assert!(browser.count("#usage-chart rect.calls").await >= 1);
    assert!(browser.count("#failures tbody tr").await == 2);
    browser.click("#failures details summary").await;
    let text = browser.wait_for_text("the api key is [redacted]", WAIT).await;
    assert!(!text.contains(SECRET), "{text}");
    capture(&browser, "tool-usage", DESKTOP).await;
    browser.close().await;
}

/// Issue 56, the designer's view: a publisher makes a toolset in the
/// catalog, adds book_flight (following) from its page and echo pinned to
/// version 1 from that version's page, and reads what each door sends the
/// model — the A2T preview is exactly what the toolset's A2T root answers,
/// and its size is the o200k tokenizer's count. Retiring echo 1 is refused
/// while the toolset pins it; forced, the toolset page warns, until the pin
/// is moved to version 2 from the page; the two toolset versions compare.
#[tokio::test(flavor = "multi_thread")]
async fn a_designer_picks_pins_and_previews_a_toolset_in_a_browser() {
    let (server, _plugins) = catalog_server(&[]);
    let (_, publisher) = server.create_key(Some("default"), "publisher").await;
    let browser = browser::start().await;
    browser.goto(&format!("{}/catalog/toolsets", server.base)).await;
    sign_in(&browser, &publisher).await;
    browser.wait_for_text("This tenant has no toolset yet.", WAIT).await;
    browser.fill("#toolset", "travel").await;
    browser.fill("#description", "Book flights; echo for checks.").await;
    browser.click("#create").await;
    browser.wait_for_text("None yet.", WAIT).await;

    // From book_flight's page: followed.
    let flight = server.tool_id("book_flight").await;
    browser.goto(&format!("{}/catalog/tools/{flight}", server.base)).await;
    browser.wait_for_text("In no toolset.", WAIT).await;
    browser.select("#add-toolset", "travel").await;
    browser.select("#add-version", "follow").await;
    browser.click("#add").await;
    browser.wait_for_text("follows the current version (now 1)", WAIT).await;
    // From echo version 1's page: pinned.
    let echo = server.tool_id("echo").await;
    browser.goto(&format!("{}/catalog/tools/{echo}?version=1", server.base)).await;
    browser.wait_for_text("Toolsets", WAIT).await;
    browser.select("#add-toolset", "travel").await;
    browser.click("#add").await;
    browser.wait_for_text("pinned to version 1", WAIT).await;
    assert_eq!(browser.text_of("[data-tool=echo] [data-pin]").await, "pinned to version 1");
    assert!(browser.text_of("#cache").await.contains("ttlMs 0"), "a followed tool: not cached");
    let roots = browser.text_of("#roots").await;
    for door in ["/t/default/toolsets/travel/mcp", "/t/default/toolsets/travel/tools", "/t/default/toolsets/travel/otc"]
    {
        assert!(roots.contains(&format!("{}{door}", server.base)), "{roots}");
    }

    // The previews: what the doors send, and its size.
    let preview = |id: &str| format!("return document.querySelector('#{id} pre').textContent");
    let mcp: serde_json::Value =
        serde_json::from_str(browser.evaluate(&preview("preview-mcp")).await.as_str().unwrap()).unwrap();
    let names: Vec<&str> = mcp["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["book_flight", "echo"]);
    let a2t_preview: serde_json::Value =
        serde_json::from_str(browser.evaluate(&preview("preview-a2t")).await.as_str().unwrap()).unwrap();
    let served: serde_json::Value = server
        .request_as(Some(&publisher), Method::GET, "/t/default/toolsets/travel/tools")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(a2t_preview, served, "the preview is what the toolset's A2T root answers");
    assert_eq!(served["items"][1]["version"], 1, "echo at its pin");
    let counted: usize = browser.attribute("#preview-a2t .tokens", "data-o200k").await.unwrap().parse().unwrap();
    let expected = tiktoken_rs::o200k_base_singleton().encode_ordinary(&served.to_string()).len();
    assert_eq!(counted, expected, "o200k's own count of the compact JSON");
    assert!(browser.text_of("#preview-mcp .tokens").await.contains("with cl100k"));
    capture(&browser, "toolset", DESKTOP).await;

    // Retiring the pinned version: refused, then forced and flagged.
    let retire = format!("/admin/tools/{echo}/versions/1");
    let refused = server.request_as(Some(&publisher), Method::DELETE, &retire).send().await.unwrap();
    assert_eq!(refused.status(), 409);
    let body: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "version_pinned_by_toolset", "{body}");
    let forced =
        server.request_as(Some(&publisher), Method::DELETE, &format!("{retire}?force=true")).send().await.unwrap();
    assert!(forced.status().is_success(), "{}", forced.status());
    browser.goto(&format!("{}/catalog/toolsets", server.base)).await;
    browser.wait_for_text("1 unreachable", WAIT).await;
    browser.click("[data-toolset=travel] a").await;
    let warning = browser.wait_for_text("Version 1 was retired", WAIT).await;
    assert!(warning.contains("calls of echo through this toolset are refused"), "{warning}");
    // Moved to version 2 from the page: a new toolset version, no warning.
    browser.select("#pin-echo", "2").await;
    browser.click("[data-tool=echo] [data-action=pin]").await;
    browser.wait_for_text("pinned to version 2", WAIT).await;
    assert_eq!(browser.count("[data-warning]").await, 0);
    browser.click("#compare").await;
    browser.wait_for_text("What changed from 3 to 4", WAIT).await;
    let changed = browser.text_of("#changed").await;
    assert!(changed.contains("echo: pinned to version 1 → pinned to version 2"), "{changed}");
    browser.close().await;
}

/// A publisher's view of what callers get wrong: the refusal rate per
/// version, the refused parameters beside their descriptions, and recent
/// examples with the values the tenant shows.
#[tokio::test(flavor = "multi_thread")]
async fn a_publisher_sees_what_callers_get_wrong_beside_the_descriptions() {
    let (server, _plugins) = crate::refusals::refusals_server(&[]);
    let shown = json!({ "showOffendingValues": true });
    let (status, _) = server.call_as(Some(TOKEN), Method::PUT, "/admin/console-settings", Some(&shown)).await;
    assert_eq!(status, 200);
    let id = server.tool_id("echo").await;
    let call = |version: u32, params: &[(&str, serde_json::Value)]| {
        let body = crate::support::invocation("echo", params);
        let path = format!("/tools/{id}/versions/{version}:invoke");
        let server = &server;
        async move { server.post(&path, &body).await.0 }
    };
    // Version 1: callers often leave the text out or send a number.
    for _ in 0..3 {
        assert_eq!(call(1, &[("text", json!("hi"))]).await, 200);
    }
    assert_eq!(call(1, &[]).await, 400);
    assert_eq!(call(1, &[("text", json!(42))]).await, 400);
    assert_eq!(call(1, &[("text", json!(7))]).await, 400);
    assert_eq!(call(1, &[("txt", json!("hi"))]).await, 400);
    // Version 2: fewer mistakes.
    for _ in 0..4 {
        assert_eq!(call(2, &[("text", json!("hi"))]).await, 200);
    }
    assert_eq!(call(2, &[("text", json!(true))]).await, 400);
    crate::console::usage_until(&server, "hour", |u| {
        u["items"].as_array().is_some_and(|items| {
            items.iter().filter(|i| i["tool"] == "echo").map(|i| i["calls"].as_u64().unwrap_or(0)).sum::<u64>() == 12
        })
    })
    .await;
    let (_, publisher) = server.create_key(Some("default"), "publisher").await;
    let browser = browser::start().await;
    browser.goto(&format!("{}/catalog?q=echo", server.base)).await;
    sign_in(&browser, &publisher).await;
    browser.wait_for_text("1 tool.", WAIT).await;
    browser.goto(&format!("{}/catalog/tools/{id}?version=1", server.base)).await;
    let text = browser.wait_for_text("What callers get wrong", WAIT).await;
    assert!(text.contains("Version 1: the parameters callers get wrong"), "{text}");
    assert_eq!(browser.count("#refusal-rates tbody tr").await, 2);
    assert_eq!(browser.text_of("#refusal-rates tr[data-version=\"1\"] td:last-child").await, "57%");
    assert_eq!(browser.text_of("#refusal-rates tr[data-version=\"2\"] td:last-child").await, "20%");
    let top = browser.text_of("#refusal-top").await;
    assert!(top.contains("invalid_type") && top.contains("The text to send back."), "{top}");
    assert!(browser.text_of("#refusal-examples").await.contains("given 42"));
    capture(&browser, "tool-refusals", DESKTOP).await;
    browser.close().await;
}

/// Issue 66, the designer's words in the catalog: a toolset's page shows
/// the words served beside the vendor's, the tokens of both lists; the
/// words are changed from the form (a new toolset version that its roots
/// serve, the tenant's root unchanged); a followed tool's new input is
/// flagged "new words to review"; and the calls refused for their inputs
/// are shown per toolset version, as many as the test made.
#[tokio::test(flavor = "multi_thread")]
async fn a_designer_rewords_a_toolset_and_sees_the_refusals_per_version_in_a_browser() {
    use crate::toolset_words::{echo_calls, worded_echo};
    let server = crate::support::Server::start(&["--usage-flush-secs", "1"]);
    let body = json!({ "description": "Checks", "tools": [worded_echo(None, "first")] });
    let (status, made) = server.call_as(Some(TOKEN), Method::PUT, "/admin/toolsets/checks", Some(&body)).await;
    assert_eq!(status, 201, "{made}");
    let (_, publisher) = server.create_key(Some("default"), "publisher").await;
    let browser = browser::start().await;
    let page = format!("{}/catalog/toolsets/checks", server.base);
    browser.goto(&page).await;
    sign_in(&browser, &publisher).await;
    browser.wait_for_text("Its tools", WAIT).await;
    assert_eq!(browser.text_of("[data-tool=echo] p.summary").await, "first: repeat the traveller's words back.");
    let content = |css: &str| format!("return document.querySelector('{css}').textContent");
    let vendor = browser.evaluate(&content("[data-form=reword] [data-vendor=\"input.text\"]")).await;
    assert_eq!(vendor, "The text to send back.");
    // What the model is sent, with the designer's words and with the
    // vendor's, each counted.
    let served = browser.evaluate(&content("#preview-mcp pre")).await.as_str().unwrap().to_string();
    let vendors = browser.evaluate(&content("#preview-mcp-vendor pre")).await.as_str().unwrap().to_string();
    assert!(served.contains("first: exactly what the traveller said.") && !served.contains("The text to send back."));
    assert!(vendors.contains("The text to send back.") && !vendors.contains("first:"), "{vendors}");
    let tokens = |css: &'static str| {
        let browser = &browser;
        async move { browser.attribute(css, "data-o200k").await.unwrap().parse::<usize>().unwrap() }
    };
    let expected = |json: &str| {
        let compact: serde_json::Value = serde_json::from_str(json).unwrap();
        tiktoken_rs::o200k_base_singleton().encode_ordinary(&compact.to_string()).len()
    };
    assert_eq!(tokens("#preview-mcp .tokens").await, expected(&served));
    assert_eq!(tokens("#preview-mcp-vendor .tokens").await, expected(&vendors));
    assert!(browser.attribute("[data-tool=echo] [data-vendor-tokens]", "data-vendor-tokens").await.is_some());

    // Reworded from the form: toolset version 2, served at its root.
    browser.click("[data-tool=echo] details.words summary").await;
    browser.clear("#reword-echo-input-text").await;
    browser.fill("#reword-echo-input-text", "Second words for the text.").await;
    browser.clear("#reword-echo-description").await;
    browser.click("[data-form=reword][data-tool=echo] [data-action=reword]").await;
    browser.wait_for_text("Version 2, the newest", WAIT).await;
    let echo = server.tool_id("echo").await;
    let (_, signature) =
        server.call_as(Some(&publisher), Method::GET, &format!("/t/default/toolsets/checks/tools/{echo}"), None).await;
    assert_eq!(signature["input_parameters"][0]["description"], "Second words for the text.", "{signature}");
    assert_eq!(signature["description"], crate::toolset_words::VENDOR_ECHO, "an emptied field: the vendor's");
    assert_eq!(signature["output_parameters"][0]["description"], "first: the same words.", "{signature}");
    let (_, tenant) = server.call_as(Some(&publisher), Method::GET, &format!("/tools/{echo}"), None).await;
    assert_eq!(tenant["input_parameters"][0]["description"], "The text to send back.");

    // Calls through each version, then the refusals per version.
    echo_calls(&server, "/t/default/toolsets/checks@1", 3, 2, 0).await;
    echo_calls(&server, "/t/default/toolsets/checks", 4, 0, 1).await;
    echo_calls(&server, "", 0, 3, 0).await;
    // echo's version 2 adds `shout`: new to the words.
    let (status, _) = server.deploy(crate::support::fixture("echo_v2.wasm"), "").await;
    assert_eq!(status, 201);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        browser.goto(&page).await;
        browser.wait_for_text("What callers get wrong, per toolset version", WAIT).await;
        if browser.count("tr[data-toolset-version='1']").await == 1
            && browser.count("tr[data-toolset-version='2']").await == 1
        {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the refusals never showed: {}", browser.text().await);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let cell = |version: u32, what: &'static str| {
        let browser = &browser;
        async move { browser.text_of(&format!("tr[data-toolset-version='{version}'] td[data-{what}]")).await }
    };
    assert_eq!(
        (cell(1, "calls").await, cell(1, "refused").await, cell(1, "rate").await),
        ("5".into(), "2".into(), "40%".into())
    );
    assert_eq!(
        (cell(2, "calls").await, cell(2, "refused").await, cell(2, "rate").await),
        ("5".into(), "1".into(), "20%".into())
    );
    let count = |version: u32, code: &'static str| {
        let browser = &browser;
        let css = format!("tr[data-toolset-version='{version}'] li[data-parameter=text][data-code={code}]");
        async move { browser.attribute(&css, "data-count").await }
    };
    assert_eq!(count(1, "invalid_type").await.as_deref(), Some("2"));
    assert_eq!(count(2, "missing_parameter").await.as_deref(), Some("1"));
    assert_eq!(
        browser.count("#refusals tr[data-toolset-version]").await,
        2,
        "the tenant root's calls are not the toolset's"
    );
    let review = browser.text_of("[data-tool=echo] [data-review]").await;
    assert!(review.contains("new words to review") && review.contains("shout"), "{review}");
    let vendor = browser.evaluate(&content("[data-form=reword] [data-vendor=\"input.shout\"]")).await;
    assert_eq!(vendor, "Send the text back in capital letters.");
    // Saved as it stands: reviewed for version 2, no flag.
    browser.click("[data-form=reword][data-tool=echo] [data-action=reword]").await;
    browser.wait_for_text("Version 3, the newest", WAIT).await;
    assert_eq!(browser.count("[data-review]").await, 0);
    browser.click("#compare").await;
    browser.wait_for_text("What changed from 2 to 3", WAIT).await;
    browser.goto(&format!("{page}/diff?from=1&to=2")).await;
    let reworded = browser.wait_for_text("Words changed", WAIT).await;
    assert!(reworded.contains("Second words for the text."), "{reworded}");
    browser.close().await;
}
