//! Calls refused for their inputs, seen by the vendor: every door's refusal
//! is a console entry and a usage count by parameter and code for the
//! tool's publisher, with the offending value only where the tenant allows
//! it and never a private input's; the tenant's limits are counted by
//! reason; nobody else sees any of it.

use crate::support::{Server, TOKEN, fixture, invocation, plinth_bin, plugins_dir};
use serde_json::{Value, json};
use std::process::Command;
use std::time::{Duration, Instant};

/// What the private inputs of `transfer_funds` are given as, by an agent
/// that should not: never shown, wherever.
const PRIVATE_VALUE: &str = "DE89370400440532013000";

/// A server with echo (versions 1 and 2) and `transfer_funds` (private
/// inputs) in the default tenant, usage written every second.
pub fn refusals_server(extra: &[&str]) -> (Server, tempfile::TempDir) {
    let plugins = tempfile::tempdir().unwrap();
    std::fs::copy(plugins_dir().join("echo.wasm"), plugins.path().join("echo.wasm")).unwrap();
    for name in ["echo_v2.wasm", "transfer_funds.wasm"] {
        std::fs::write(plugins.path().join(name), fixture(name)).unwrap();
    }
    let mut args = vec!["--plugins", plugins.path().to_str().unwrap(), "--usage-flush-secs", "1"];
    args.extend_from_slice(extra);
    (Server::start_in(tempfile::tempdir().unwrap(), &args), plugins)
}

/// `GET path` with `key` → (status, JSON).
async fn get_as(server: &Server, key: &str, path: &str) -> (u16, Value) {
    server.call_as(Some(key), reqwest::Method::GET, path, None).await
}

/// The refused entries of the console, newest first, once there are `n`.
async fn refused_entries(server: &Server, key: &str, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, page) = get_as(server, key, "/admin/logs?outcome=refused").await;
        assert_eq!(status, 200, "{page}");
        let items = page["items"].as_array().cloned().unwrap_or_default();
        if items.len() >= n {
            return items;
        }
        assert!(Instant::now() < deadline, "{n} refused calls never reached the console: {page}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls the usage of the last hour until `done` holds.
async fn usage_until(server: &Server, key: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, usage) = get_as(server, key, "/admin/usage?window=hour").await;
        assert_eq!(status, 200, "{usage}");
        if done(&usage) {
            return usage;
        }
        assert!(Instant::now() < deadline, "usage never showed the refusals: {usage}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The usage item of `tool` version `version` through `door`.
fn item<'a>(usage: &'a Value, tool: &str, version: u64, door: &str) -> Option<&'a Value> {
    usage["items"].as_array()?.iter().find(|i| i["tool"] == tool && i["version"] == version && i["door"] == door)
}

/// The OTC `ToolId` `wanted` picks from the tenant's listing.
async fn otc_tool_id(server: &Server, key: &str, wanted: impl Fn(&str) -> bool) -> String {
    let (_, tools) = get_as(server, key, "/otc/tools").await;
    tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .find(|id| wanted(id))
        .unwrap_or_else(|| panic!("{tools}"))
        .to_string()
}

/// The tenant's publisher `key` shows offending values → (status, settings).
async fn show_offending_values(server: &Server, key: &str) -> (u16, Value) {
    let settings = json!({ "showOffendingValues": true });
    server.call_as(Some(key), reqwest::Method::PUT, "/admin/console-settings", Some(&settings)).await
}

fn refused_count(item: &Value, parameter: Value, code: &str) -> u64 {
    item["refused"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["parameter"] == parameter && r["code"] == code)
        .and_then(|r| r["calls"].as_u64())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_call_reaches_its_publishers_log_and_usage_from_every_door() {
    let (server, _plugins) = refusals_server(&[]);
    server.create_tenant("globex", json!({})).await;
    let (_, publisher) = server.create_key(Some("default"), "publisher").await;
    let (_, consumer) = server.create_key(Some("default"), "consumer").await;
    let (_, stranger) = server.create_key(Some("globex"), "publisher").await;
    let echo = server.tool_id("echo").await;
    let a2t = |body: Value, path: String| {
        let consumer = consumer.clone();
        let server = &server;
        async move { server.call_as(Some(&consumer), reqwest::Method::POST, &path, Some(&body)).await }
    };
    let current = format!("/tools/{echo}:invoke");
    let first = format!("/tools/{echo}/versions/1:invoke");

    // A2T, as a vendor tried it: two good calls, two refused ones.
    for text in ["hello", "again"] {
        let (status, body) = a2t(invocation("echo", &[("text", json!(text))]), current.clone()).await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, body) = a2t(invocation("echo", &[]), current.clone()).await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("missing_parameter")), "{body}");
    let (status, body) = a2t(invocation("echo", &[("text", json!(42))]), current.clone()).await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("invalid_type")), "{body}");
    // Version 1, and a made-up parameter name that must not reach the store.
    let made_up = "made_up_parameter_9c1";
    let (status, _) = a2t(invocation("echo", &[("text", json!("x")), (made_up, json!("y"))]), first.clone()).await;
    assert_eq!(status, 400);
    // A private input given by the agent.
    let transfer = server.tool_id("transfer_funds").await;
    let (status, body) = a2t(
        invocation("transfer_funds", &[("amount_usd", json!(5)), ("from_account", json!(PRIVATE_VALUE))]),
        format!("/tools/{transfer}:invoke"),
    )
    .await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("private_parameter")), "{body}");

    // OTC.
    let otc_id = otc_tool_id(&server, &consumer, |id| id.contains("Echo") && id.contains("@2.")).await;
    let (status, body) = server
        .call_as(
            Some(&consumer),
            reqwest::Method::POST,
            "/otc/tools/call",
            Some(&crate::otc::request(&otc_id, json!({ "text": 7 }))),
        )
        .await;
    assert_eq!(status, 422, "{body}");

    // MCP.
    let mcp = crate::mcp::Mcp::with_key(&server, &consumer, "");
    let answer = mcp.call("echo", json!({}), Value::Null).await;
    assert_eq!(answer["result"]["isError"], true, "{answer}");

    // The catalog's try form, the text left empty.
    let designer = crate::catalog::Designer::sign_in(&server.base, &publisher).await;
    let page = crate::catalog::tool_path(&designer, "echo").await;
    let (status, html) = designer.try_call(&page, &[("version", "2"), ("input.text", "")]).await;
    assert_eq!(status, 422, "{html}");

    // The publisher's console: each refusal, with its door, version,
    // parameter and code, and no value (the tenant shows none by default).
    let entries = refused_entries(&server, &publisher, 7).await;
    let seen: Vec<(String, u64, String, Value)> = entries
        .iter()
        .map(|e| {
            (
                e["door"].as_str().unwrap().to_string(),
                e["version"].as_u64().unwrap(),
                e["tool"].as_str().unwrap().to_string(),
                e["refused"].clone(),
            )
        })
        .collect();
    let refusal = |parameter: &str, code: &str| json!([{ "parameter": parameter, "code": code }]);
    assert_eq!(
        seen,
        [
            ("a2t".into(), 2, "echo".into(), refusal("text", "missing_parameter")),
            ("mcp".into(), 2, "echo".into(), refusal("text", "missing_parameter")),
            ("otc".into(), 2, "echo".into(), refusal("text", "invalid_type")),
            ("a2t".into(), 1, "transfer_funds".into(), refusal("from_account", "private_parameter")),
            ("a2t".into(), 1, "echo".into(), refusal(made_up, "unknown_parameter")),
            ("a2t".into(), 2, "echo".into(), refusal("text", "invalid_type")),
            ("a2t".into(), 2, "echo".into(), refusal("text", "missing_parameter")),
        ],
        "{entries:?}"
    );
    assert!(entries.iter().all(|e| e["outcome"] == "refused" && e["time"].is_string()), "{entries:?}");
    let (_, all) = get_as(&server, &publisher, "/admin/logs?tool=echo").await;
    assert_eq!(all["items"].as_array().unwrap().len(), 8, "two good calls and six refused: {all}");

    // Shown values, once the tenant allows them: cut, never a private input's.
    let (status, settings) = show_offending_values(&server, &publisher).await;
    assert_eq!((status, &settings), (200, &json!({ "showOffendingValues": true })));
    let (status, _) = a2t(invocation("echo", &[("text", json!(42))]), current.clone()).await;
    assert_eq!(status, 400);
    let long = "y".repeat(1000);
    let (status, _) = a2t(invocation("echo", &[("text", json!([long])), ("other", json!("z"))]), current.clone()).await;
    assert_eq!(status, 400);
    let (status, _) = a2t(
        invocation("transfer_funds", &[("amount_usd", json!(5)), ("to_account", json!(PRIVATE_VALUE))]),
        format!("/tools/{transfer}:invoke"),
    )
    .await;
    assert_eq!(status, 400);
    let entries = refused_entries(&server, &publisher, 10).await;
    assert_eq!(entries[0]["refused"], json!([{ "parameter": "to_account", "code": "private_parameter" }]));
    let other = entries[1]["refused"].as_array().unwrap();
    let shown = other.iter().find(|r| r["parameter"] == "text").unwrap()["value"].as_str().unwrap();
    assert_eq!(shown.chars().count(), 121, "cut at 120 characters and marked: {shown}");
    // Never under a name echo does not have: it may be a private input's,
    // misspelt.
    assert!(other.iter().any(|r| r["parameter"] == "other" && r.get("value").is_none()), "{other:?}");
    assert_eq!(entries[2]["refused"], json!([{ "parameter": "text", "code": "invalid_type", "value": "42" }]));

    // Usage, per tool version and door: refused calls by parameter and code,
    // made-up names folded into one.
    let usage = usage_until(&server, &publisher, |u| {
        item(u, "echo", 2, "a2t").is_some_and(|i| i["outcomes"]["refused"] == 5)
            && item(u, "transfer_funds", 1, "a2t").is_some_and(|i| i["outcomes"]["refused"] == 2)
            && item(u, "echo", 2, "mcp").is_some()
            && item(u, "echo", 2, "otc").is_some()
            && item(u, "echo", 1, "a2t").is_some()
    })
    .await;
    let echo_a2t = item(&usage, "echo", 2, "a2t").unwrap();
    assert_eq!(echo_a2t["outcomes"], json!({ "ok": 2, "refused": 5 }), "{usage}");
    assert_eq!(echo_a2t["calls"], 7);
    // By the A2T door and the try form (which calls as A2T).
    assert_eq!(refused_count(echo_a2t, json!("text"), "missing_parameter"), 2, "{echo_a2t}");
    assert_eq!(refused_count(echo_a2t, json!("text"), "invalid_type"), 3, "{echo_a2t}");
    assert_eq!(refused_count(echo_a2t, json!("(unknown)"), "unknown_parameter"), 1, "{echo_a2t}");
    assert_eq!(echo_a2t["limited"], json!([]));
    let echo_v1 = item(&usage, "echo", 1, "a2t").unwrap();
    assert_eq!(echo_v1["refused"], json!([{ "parameter": "(unknown)", "code": "unknown_parameter", "calls": 1 }]));
    assert_eq!(
        item(&usage, "echo", 2, "mcp").unwrap()["refused"],
        json!([{ "parameter": "text", "code": "missing_parameter", "calls": 1 }])
    );
    assert_eq!(
        item(&usage, "echo", 2, "otc").unwrap()["refused"],
        json!([{ "parameter": "text", "code": "invalid_type", "calls": 1 }])
    );
    let transfer_usage = item(&usage, "transfer_funds", 1, "a2t").unwrap();
    assert_eq!(refused_count(transfer_usage, json!("from_account"), "private_parameter"), 1);
    assert_eq!(refused_count(transfer_usage, json!("to_account"), "private_parameter"), 1);
    assert!(!usage.to_string().contains(made_up), "a made-up name is never stored: {usage}");

    // A consumer sees none of it; another tenant's publisher neither.
    for path in ["/admin/logs?outcome=refused", "/admin/usage", "/admin/console-settings"] {
        let (status, _) = get_as(&server, &consumer, path).await;
        assert_eq!(status, 403, "{path}");
        let (status, body) = get_as(&server, &stranger, &format!("/t/default{path}")).await;
        assert_eq!(status, 404, "{path}: {body}");
    }
    let (_, theirs) = get_as(&server, &stranger, "/t/globex/admin/logs").await;
    assert_eq!(theirs["items"], json!([]), "{theirs}");
    let (_, theirs) = get_as(&server, &stranger, "/t/globex/admin/usage").await;
    assert_eq!(theirs["items"], json!([]), "{theirs}");
    let reader = crate::catalog::Designer::sign_in(&server.base, &consumer).await;
    let (_, html) = reader.get(&page).await;
    assert!(!html.contains("What callers get wrong") && !html.contains("missing_parameter"), "{html}");

    // The publisher's tool page: the refusal rate per version, the top
    // parameters and codes, examples where allowed.
    let (status, html) = designer.get(&page).await;
    assert_eq!(status, 200, "{html}");
    let panel = html.split("id=\"refusals-heading\"").nth(1).unwrap_or_else(|| panic!("{html}"));
    let panel = panel.split("</section>").next().unwrap();
    assert!(panel.contains("What callers get wrong"), "{panel}");
    let rates = panel.split("id=\"refusal-rates\"").nth(1).unwrap();
    // Version 2: 2 good + 5 refused by A2T and the try form, 1 by MCP, 1 by OTC: 7 of 9.
    assert!(rates.contains("<tr data-version=\"2\"><td>2</td><td>9</td><td>7</td><td>78%</td></tr>"), "{rates}");
    assert!(rates.contains("<tr data-version=\"1\"><td>1</td><td>1</td><td>1</td><td>100%</td></tr>"), "{rates}");
    let top = panel.split("id=\"refusal-top\"").nth(1).unwrap();
    assert!(top.contains("<code>text</code>") && top.contains("invalid_type"), "{top}");
    assert!(panel.contains("42"), "an example value, the tenant allowing it: {panel}");
    assert!(!html.contains(" style="), "no inline style: the page's CSP stays strict");

    // The terminal: `plinth logs --outcome refused` and `plinth usage --tool echo`.
    let printed = Command::new(plinth_bin())
        .args(["logs", "--outcome", "refused", "--tool", "echo", "--server", &server.base, "--key", &publisher])
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&printed.stdout);
    assert!(printed.contains("echo v2  mcp  refused"), "{printed}");
    assert!(printed.contains("    refused text: missing_parameter"), "{printed}");
    assert!(printed.contains("    refused text: invalid_type (value 42)"), "{printed}");
    assert!(!printed.contains("  ok  "), "only refused calls: {printed}");
    let printed = Command::new(plinth_bin())
        .args(["usage", "--tool", "echo", "--server", &server.base, "--key", &publisher])
        .output()
        .unwrap();
    assert!(printed.status.success(), "{}", String::from_utf8_lossy(&printed.stderr));
    let printed = String::from_utf8_lossy(&printed.stdout);
    assert!(printed.contains("echo v2  a2t  7 calls, 5 refused (71%)"), "{printed}");
    assert!(printed.contains("    text  invalid_type  3"), "{printed}");
    assert!(!printed.contains("transfer_funds"), "{printed}");

    // A private input's value never appears anywhere: console, usage, the
    // catalog, the server's own log.
    let (_, logs) = get_as(&server, &publisher, "/admin/logs").await;
    let (_, usage) = get_as(&server, TOKEN, "/admin/usage?window=day").await;
    let transfer_page = crate::catalog::tool_path(&designer, "transfer_funds").await;
    let (_, transfer_html) = designer.get(&transfer_page).await;
    for (what, text) in [
        ("the console", logs.to_string()),
        ("usage", usage.to_string()),
        ("the catalog", transfer_html),
        ("the server's log", server.logs()),
    ] {
        assert!(!text.contains(PRIVATE_VALUE), "{what}: {text}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn calls_the_tenants_limits_refuse_are_counted_for_the_vendor_by_reason() {
    let (server, _plugins) = refusals_server(&[]);
    let quotas = json!({ "quotas": { "invocationsPerSecond": 1, "invocationBurst": 1 } });
    let (status, body) =
        server.call_as(Some(TOKEN), reqwest::Method::PATCH, "/admin/tenants/default", Some(&quotas)).await;
    assert_eq!(status, 200, "{body}");
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(server.invoke("echo", &[("text", json!("x"))]).await.0);
    }
    let limited = statuses.iter().filter(|s| **s == 503).count() as u64;
    assert!(limited >= 1, "{statuses:?}");
    let usage =
        usage_until(&server, TOKEN, |u| item(u, "echo", 2, "a2t").is_some_and(|i| i["calls"].as_u64() == Some(3)))
            .await;
    let echo = item(&usage, "echo", 2, "a2t").unwrap();
    assert_eq!(echo["limited"], json!([{ "reason": "rate_limit", "calls": limited }]), "{usage}");
    assert_eq!(echo["refused"], json!([]), "{usage}");
}

/// The names an agent that was never shown `transfer_funds`' private
/// `from_account` (MCP and OTC leave it out of their schemas) might guess.
const MISSPELT: [&str; 10] = [
    "fromAccount",
    "from-account",
    "from_account ",
    " from_account",
    "FROM_ACCOUNT",
    "from_acount",
    "fromaccount",
    "from account",
    "from_accounts",
    "source_account",
];

/// The parameters an `unknown_parameter` answer lists, as it lists them.
fn listed_parameters(answer: &str) -> String {
    let listed = answer.split("its parameters are: ").nth(1).unwrap_or_else(|| panic!("nothing listed: {answer}"));
    listed.chars().take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | ',' | ' ')).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_private_value_given_under_a_misspelt_name_is_shown_nowhere_and_no_answer_names_the_private_inputs() {
    let (server, _plugins) = refusals_server(&[]);
    let (_, publisher) = server.create_key(Some("default"), "publisher").await;
    let (_, consumer) = server.create_key(Some("default"), "consumer").await;
    // The tenant shows offending values: a misspelt private one must still
    // not be shown.
    assert_eq!(show_offending_values(&server, &publisher).await.0, 200);
    let transfer = server.tool_id("transfer_funds").await;
    let otc_id = otc_tool_id(&server, &consumer, |id| id.contains("TransferFunds")).await;
    // What MCP and OTC show the agent: the amount only.
    let mcp = crate::mcp::Mcp::with_key(&server, &consumer, "");
    let (_, listed) = mcp.request("tools/list", json!({}), Value::Null).await;
    let schema = listed["result"]["tools"].as_array().unwrap().iter().find(|t| t["name"] == "transfer_funds").unwrap()
        ["inputSchema"]["properties"]
        .clone();
    assert_eq!(schema.as_object().unwrap().keys().collect::<Vec<_>>(), ["amount_usd"], "{schema}");

    let mut answers = Vec::new();
    for (i, name) in MISSPELT.iter().enumerate() {
        let value = json!(format!("{PRIVATE_VALUE}{i}"));
        let (status, body) = server
            .call_as(
                Some(&consumer),
                reqwest::Method::POST,
                &format!("/tools/{transfer}:invoke"),
                Some(&invocation("transfer_funds", &[("amount_usd", json!(5)), (name, value.clone())])),
            )
            .await;
        assert_eq!((status, body["error"]["code"].as_str()), (400, Some("unknown_parameter")), "{name:?}: {body}");
        answers.push(("a2t", body));
        let mut input = json!({ "amount_usd": 5 });
        input[*name] = value;
        let (status, body) = server
            .call_as(
                Some(&consumer),
                reqwest::Method::POST,
                "/otc/tools/call",
                Some(&crate::otc::request(&otc_id, input.clone())),
            )
            .await;
        assert_eq!(status, 422, "{name:?}: {body}");
        answers.push(("otc", body));
        let answer = mcp.call("transfer_funds", input, Value::Null).await;
        assert_eq!(answer["result"]["isError"], true, "{name:?}: {answer}");
        answers.push(("mcp", answer));
    }
    // Every answer names the mistake and lists only what the agent may
    // give: never a private input, never the value.
    for (door, answer) in &answers {
        let text = answer.to_string();
        assert!(!text.contains(PRIVATE_VALUE), "{door}: {text}");
        assert_eq!(listed_parameters(&text).trim(), "amount_usd", "{door}: {text}");
    }

    // The console names each misspelling, with no value; usage folds them
    // into `(unknown)`; the catalog's examples and the server's log hold no
    // value either.
    let entries = refused_entries(&server, &publisher, 30).await;
    let refused: Vec<&Value> = entries.iter().flat_map(|e| e["refused"].as_array().unwrap()).collect();
    assert_eq!(refused.len(), 30, "{entries:?}");
    for refusal in &refused {
        assert_eq!(refusal["code"], "unknown_parameter", "{refusal}");
        assert!(MISSPELT.contains(&refusal["parameter"].as_str().unwrap()), "{refusal}");
        assert!(refusal.get("value").is_none(), "no value under a name the signature lacks: {refusal}");
    }
    let usage = usage_until(&server, &publisher, |u| {
        ["a2t", "otc", "mcp"].iter().all(|door| {
            item(u, "transfer_funds", 1, door).is_some_and(|i| i["outcomes"]["refused"].as_u64() == Some(10))
        })
    })
    .await;
    let designer = crate::catalog::Designer::sign_in(&server.base, &publisher).await;
    let page = crate::catalog::tool_path(&designer, "transfer_funds").await;
    let (status, html) = designer.get(&page).await;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("What callers get wrong"), "{html}");
    let (_, logs) = get_as(&server, &publisher, "/admin/logs").await;
    let printed = Command::new(plinth_bin())
        .args(["logs", "--outcome", "refused", "--server", &server.base, "--key", &publisher])
        .output()
        .unwrap();
    for (what, text) in [
        ("the console", logs.to_string()),
        ("plinth logs", String::from_utf8_lossy(&printed.stdout).into_owned()),
        ("usage", usage.to_string()),
        ("the catalog", html),
        ("the server's log", server.logs()),
    ] {
        assert!(!text.contains(PRIVATE_VALUE), "{what}: {text}");
    }
}
