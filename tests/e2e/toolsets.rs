//! Toolsets (docs/toolsets.md): a named set of a tenant's tools, pinned or
//! following, served at its own roots on A2T and OTC (MCP with the
//! official Python SDK: `mcp_python.rs`), versioned, with keys that open
//! one toolset only, and retirements that would break a pin refused.

use crate::support::{Server, TOKEN, invocation, outputs, plugins_dir, relabeled};
use reqwest::Method;
use serde_json::{Value, json};

/// Puts a toolset of the default tenant as the operator → (status, body).
pub async fn put_toolset(server: &Server, name: &str, tools: Value) -> (u16, Value) {
    let body = json!({ "description": format!("{name} tools"), "tools": tools });
    server.call_as(Some(TOKEN), Method::PUT, &format!("/admin/toolsets/{name}"), Some(&body)).await
}

/// Deploys version 2 of echo (the same signature, other bytes).
pub async fn echo_v2(server: &Server) {
    let echo = std::fs::read(plugins_dir().join("echo.wasm")).unwrap();
    let (status, body) = server.deploy(relabeled(&echo, "v2"), "").await;
    assert_eq!((status, body["version"].as_u64()), (201, Some(2)), "{body}");
}

/// `plinth ARGS` against `server` with the operator key → (succeeded,
/// stdout and stderr).
pub fn operator_cli(server: &Server, args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(crate::support::plinth_bin())
        .args(args)
        .env("PLINTH_SERVER", &server.base)
        .env("PLINTH_KEY", TOKEN)
        .env_remove("PLINTH_TENANT")
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// "travel": echo pinned at version 1, the weather tool following its
/// current version; book_flight is not in it.
pub fn travel() -> Value {
    json!([{ "name": "echo", "version": 1 }, { "name": "lookup_weather_by_city" }])
}

/// An error's code, in Plinth's shape or OTC's (`/otc/…`).
fn code(body: &Value) -> Option<&str> {
    body["error"]["code"].as_str().or(body["code"].as_str())
}

/// An error's message, in either shape.
fn message(body: &Value) -> &str {
    body["error"]["message"].as_str().or(body["message"].as_str()).unwrap_or("")
}

fn names(items: &[Value]) -> Vec<String> {
    let mut names: Vec<String> = items.iter().map(|t| t["name"].as_str().unwrap().to_string()).collect();
    names.sort();
    names
}

async fn invoke_echo(server: &Server, key: Option<&str>, path: &str) -> reqwest::Response {
    server.request_as(key, Method::POST, path).json(&invocation("echo", &[("text", json!("hi"))])).send().await.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_toolset_lists_and_calls_exactly_its_tools_at_their_versions_on_a2t_and_otc() {
    let server = Server::start(&[]);
    echo_v2(&server).await;
    let echo = server.tool_id("echo").await;
    let book = server.tool_id("book_flight").await;

    let (status, created) = put_toolset(&server, "travel", travel()).await;
    assert_eq!((status, created["version"].as_u64()), (201, Some(1)), "{created}");
    // The same content again changes nothing.
    let (status, again) = put_toolset(&server, "travel", travel()).await;
    assert_eq!((status, again["version"].as_u64()), (200, Some(1)), "{again}");

    // A2T: its tools only, echo at its pin although version 2 is current.
    let root = "/t/default/toolsets/travel";
    let (status, listed) = server.call_as(Some(TOKEN), Method::GET, &format!("{root}/tools"), None).await;
    assert_eq!(status, 200, "{listed}");
    let items = listed["items"].as_array().unwrap();
    assert_eq!(names(items), ["echo", "lookup_weather_by_city"]);
    assert_eq!(items.iter().find(|t| t["name"] == "echo").unwrap()["version"], 1, "{listed}");
    let response = invoke_echo(&server, Some(TOKEN), &format!("{root}/tools/{echo}:invoke")).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["plinth-tool-version"], "1");
    assert_eq!(outputs(&response.json().await.unwrap())["text"], "hi");

    // Whatever the request names, nothing outside it: another tool (as if
    // it did not exist: `not_found`), or another version of one of its
    // tools (`outside_toolset`).
    for (path, status, code) in [
        (format!("{root}/tools/{book}:invoke"), 404, "not_found"),
        (format!("{root}/tools/{echo}/versions/2:invoke"), 403, "outside_toolset"),
    ] {
        let response = invoke_echo(&server, Some(TOKEN), &path).await;
        assert_eq!(response.status(), status, "{path}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], code, "{path}: {body}");
    }
    let (status, body) = server.call_as(Some(TOKEN), Method::GET, &format!("{root}/tools/{book}"), None).await;
    assert_eq!((status, body["error"]["code"].as_str()), (404, Some("not_found")), "{body}");
    // Only under a tenant's root; and nothing but the doors under it.
    for path in ["/toolsets/travel/tools", "/t/default/toolsets/travel/admin/toolsets", "/t/default/toolsets/travel"] {
        assert_eq!(server.call_as(Some(TOKEN), Method::GET, path, None).await.0, 404, "{path}");
    }

    // OTC: the same set, the same versions.
    let (status, otc) = server.call_as(Some(TOKEN), Method::GET, &format!("{root}/otc/tools"), None).await;
    assert_eq!(status, 200, "{otc}");
    let ids: Vec<&str> = otc["tools"].as_array().unwrap().iter().map(|t| t["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 2, "{otc}");
    assert!(ids.iter().any(|id| id.ends_with("Echo@1.0.0")), "{ids:?}");
    assert!(!ids.iter().any(|id| id.contains("BookFlight")), "{ids:?}");
    let call = |tool_id: &str| json!({ "tool_id": tool_id, "input": { "text": "hi" } });
    let echo_v1 = ids.iter().find(|id| id.ends_with("Echo@1.0.0")).unwrap().to_string();
    let (status, body) =
        server.call_as(Some(TOKEN), Method::POST, &format!("{root}/otc/tools/call"), Some(&call(&echo_v1))).await;
    assert_eq!(status, 200, "{body}");
    let echo_v2 = echo_v1.replace("@1.0.0", "@2.0.0");
    let (status, body) =
        server.call_as(Some(TOKEN), Method::POST, &format!("{root}/otc/tools/call"), Some(&call(&echo_v2))).await;
    assert_eq!((status, code(&body)), (403, Some("outside_toolset")), "{body}");

    // A change makes version 2; version 1 stays callable by pin.
    let (status, second) = put_toolset(&server, "travel", json!([{ "name": "echo" }])).await;
    assert_eq!((status, second["version"].as_u64()), (201, Some(2)), "{second}");
    let (_, now) = server.call_as(Some(TOKEN), Method::GET, &format!("{root}/tools"), None).await;
    assert_eq!(names(now["items"].as_array().unwrap()), ["echo"], "{now}");
    assert_eq!(now["items"][0]["version"], 2, "{now}");
    let (_, pinned) = server.call_as(Some(TOKEN), Method::GET, &format!("{root}@1/tools"), None).await;
    assert_eq!(names(pinned["items"].as_array().unwrap()), ["echo", "lookup_weather_by_city"], "{pinned}");
    let (status, _) = server.call_as(Some(TOKEN), Method::GET, &format!("{root}@3/tools"), None).await;
    assert_eq!(status, 404);

    // Deleted: every root answers 404.
    let (status, _) = server.call_as(Some(TOKEN), Method::DELETE, "/admin/toolsets/travel", None).await;
    assert_eq!(status, 204);
    for path in [format!("{root}/tools"), format!("{root}@1/tools"), format!("{root}/otc/tools")] {
        let (status, body) = server.call_as(Some(TOKEN), Method::GET, &path, None).await;
        assert_eq!((status, code(&body)), (404, Some("toolset_not_found")), "{path}: {body}");
    }
}

/// `text` with every `from` replaced by `to`.
fn swapped(text: &Value, from: &str, to: &str) -> String {
    text.to_string().replace(from, to)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_toolsets_key_cannot_tell_a_tool_outside_it_from_one_that_does_not_exist() {
    let server = Server::start(&[]);
    assert_eq!(put_toolset(&server, "travel", travel()).await.0, 201);
    let body = json!({ "tenant": "default", "role": "consumer", "toolset": "travel" });
    let (status, created) = server.call_as(Some(TOKEN), Method::POST, "/admin/keys", Some(&body)).await;
    assert_eq!(status, 201, "{created}");
    let key = created["key"].as_str().unwrap();
    let root = "/t/default/toolsets/travel";
    // book_flight is the tenant's, outside the toolset; the other name and
    // id are no tool at all.
    let book = server.tool_id("book_flight").await;
    let nothing = "00000000-0000-4000-8000-000000000000";

    // A2T: reading it and calling it, by toolId.
    for (method, tail) in [(Method::GET, ""), (Method::POST, ":invoke")] {
        let outside =
            server.call_as(Some(key), method.clone(), &format!("{root}/tools/{book}{tail}"), Some(&json!({}))).await;
        let none =
            server.call_as(Some(key), method.clone(), &format!("{root}/tools/{nothing}{tail}"), Some(&json!({}))).await;
        assert_eq!(outside.0, none.0, "{method} {tail}: {outside:?} {none:?}");
        assert_eq!(swapped(&outside.1, &book, nothing), none.1.to_string(), "{method} {tail}");
        assert_eq!(none.0, 404, "{none:?}");
    }

    // OTC: by ToolId, the tenant's own id for book_flight and one made up
    // in its shape.
    let (_, listed) = server.call_as(Some(TOKEN), Method::GET, "/otc/tools", None).await;
    let otc_book = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_string())
        .find(|id| id.contains("BookFlight"))
        .unwrap_or_else(|| panic!("{listed}"));
    let otc_nothing = otc_book.replace("BookFlight", "NoSuchTool");
    let call = |id: &str| json!({ "request": { "tool_id": id, "input": {} } });
    let outside =
        server.call_as(Some(key), Method::POST, &format!("{root}/otc/tools/call"), Some(&call(&otc_book))).await;
    let none =
        server.call_as(Some(key), Method::POST, &format!("{root}/otc/tools/call"), Some(&call(&otc_nothing))).await;
    assert_eq!(outside.0, none.0, "{outside:?} {none:?}");
    assert_eq!(swapped(&outside.1, &otc_book, &otc_nothing), none.1.to_string());
    assert_eq!((none.0, code(&none.1)), (400, Some("unknown_tool")), "{none:?}");

    // MCP: by name, a JSON-RPC error either way.
    let mcp = crate::mcp::Mcp::with_key(&server, key, root);
    let outside = mcp.call("book_flight", json!({}), Value::Null).await;
    let none = mcp.call("no_such_tool", json!({}), Value::Null).await;
    assert_eq!(swapped(&outside["error"], "book_flight", "no_such_tool"), none["error"].to_string());
    assert_eq!(none["error"]["data"]["code"], "unknown_tool", "{none}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_toolset_names_only_the_tenants_live_tools_and_versions() {
    let server = Server::start(&[]);
    let refused = [
        (json!([{ "name": "no_such_tool" }]), 404, "toolset_tool_not_found"),
        (json!([{ "name": "echo", "version": 9 }]), 404, "toolset_version_not_found"),
        (json!([{ "name": "echo" }, { "name": "echo", "version": 1 }]), 400, "invalid_toolset"),
        (json!((0..65).map(|_| json!({ "name": "echo" })).collect::<Vec<_>>()), 400, "invalid_toolset"),
    ];
    for (tools, status, code) in refused {
        let (got, body) = put_toolset(&server, "travel", tools.clone()).await;
        assert_eq!((got, body["error"]["code"].as_str()), (status, Some(code)), "{tools}: {body}");
    }
    let (status, body) = put_toolset(&server, &"x".repeat(65), json!([])).await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("invalid_toolset")), "{body}");
    // Nothing was made.
    let (_, listed) = server.call_as(Some(TOKEN), Method::GET, "/admin/toolsets", None).await;
    assert_eq!(listed["items"], json!([]), "{listed}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_toolsets_key_opens_its_toolset_and_nothing_else() {
    let server = Server::start(&[]);
    assert_eq!(put_toolset(&server, "travel", travel()).await.0, 201);
    assert_eq!(put_toolset(&server, "payroll", json!([{ "name": "book_flight" }])).await.0, 201);
    let body = json!({ "tenant": "default", "role": "consumer", "toolset": "travel" });
    let (status, created) = server.call_as(Some(TOKEN), Method::POST, "/admin/keys", Some(&body)).await;
    assert_eq!((status, created["toolset"].as_str()), (201, Some("travel")), "{created}");
    let key = created["key"].as_str().unwrap();

    let (status, listed) = server.call_as(Some(key), Method::GET, "/t/default/toolsets/travel/tools", None).await;
    assert_eq!(status, 200, "{listed}");
    let (status, _) = server.call_as(Some(key), Method::GET, "/t/default/toolsets/travel/otc/tools", None).await;
    assert_eq!(status, 200);
    // Everywhere else: 403, saying why.
    for (method, path) in [
        (Method::GET, "/tools"),
        (Method::GET, "/t/default/tools"),
        (Method::GET, "/otc/tools"),
        (Method::GET, "/t/default/toolsets/payroll/tools"),
        (Method::GET, "/t/default/toolsets/payroll/otc/tools"),
        (Method::GET, "/admin/toolsets"),
        (Method::POST, "/mcp"),
        (Method::POST, "/t/default/toolsets/payroll/mcp"),
    ] {
        let (status, body) = server.call_as(Some(key), method.clone(), path, Some(&json!({}))).await;
        assert_eq!((status, code(&body)), (403, Some("outside_toolset")), "{method} {path}: {body}");
        assert!(message(&body).contains("travel"), "{body}");
    }
    // A key for a toolset that does not exist is not made; nor one that is
    // not a consumer's.
    let body = json!({ "tenant": "default", "role": "consumer", "toolset": "nope" });
    assert_eq!(server.call_as(Some(TOKEN), Method::POST, "/admin/keys", Some(&body)).await.0, 404);
    let body = json!({ "tenant": "default", "role": "publisher", "toolset": "travel" });
    assert_eq!(server.call_as(Some(TOKEN), Method::POST, "/admin/keys", Some(&body)).await.0, 400);

    // Deleting the toolset revokes its keys.
    assert_eq!(server.call_as(Some(TOKEN), Method::DELETE, "/admin/toolsets/travel", None).await.0, 204);
    let (status, _) = server.call_as(Some(key), Method::GET, "/t/default/toolsets/travel/tools", None).await;
    assert_eq!(status, 401);
}

#[tokio::test(flavor = "multi_thread")]
async fn retiring_a_pinned_version_is_refused_unless_forced_and_then_flagged() {
    let server = Server::start(&[]);
    echo_v2(&server).await;
    let echo = server.tool_id("echo").await;
    assert_eq!(put_toolset(&server, "travel", travel()).await.0, 201);
    assert_eq!(put_toolset(&server, "support", json!([{ "name": "echo", "version": 1 }])).await.0, 201);

    let (status, body) = server.delete(&format!("/admin/tools/{echo}/versions/1")).await;
    assert_eq!((status, body["error"]["code"].as_str()), (409, Some("version_pinned_by_toolset")), "{body}");
    assert_eq!(body["error"]["toolsets"], json!(["support", "travel"]), "{body}");
    // A version nobody pins retires as before.
    let (status, body) = server.delete(&format!("/admin/tools/{echo}/versions/2")).await;
    assert_eq!(status, 200, "{body}");

    let (status, body) = server.delete(&format!("/admin/tools/{echo}/versions/1?force=true")).await;
    assert_eq!(status, 200, "{body}");
    let (_, toolset) = server.call_as(Some(TOKEN), Method::GET, "/admin/toolsets/travel", None).await;
    let tool = toolset["tools"].as_array().unwrap().iter().find(|t| t["name"] == "echo").unwrap().clone();
    assert_eq!((tool["state"].as_str(), tool["version"].as_u64()), (Some("retiredPinned"), Some(1)), "{toolset}");
    // The toolset no longer serves it.
    let (_, listed) = server.call_as(Some(TOKEN), Method::GET, "/t/default/toolsets/travel/tools", None).await;
    assert_eq!(names(listed["items"].as_array().unwrap()), ["lookup_weather_by_city"], "{listed}");
    let response = invoke_echo(&server, Some(TOKEN), &format!("/t/default/toolsets/travel/tools/{echo}:invoke")).await;
    assert_eq!(response.status(), 410);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_toolsets_mcp_list_says_how_long_to_keep_it_and_listeners_hear_the_toolset_change() {
    use crate::mcp::{MODERN, Mcp};
    use std::time::Duration;
    let server = Server::start(&[]);
    assert_eq!(put_toolset(&server, "travel", travel()).await.0, 201);
    assert_eq!(put_toolset(&server, "pinned", json!([{ "name": "echo", "version": 1 }])).await.0, 201);
    let ttl = |root: &'static str| {
        let server = &server;
        async move {
            let (status, answer) =
                Mcp::with_key(server, TOKEN, root).request("tools/list", json!({}), Value::Null).await;
            assert_eq!(status, 200, "{root}: {answer}");
            answer["result"]["ttlMs"].clone()
        }
    };
    // Everything pinned: a minute; anything following current versions, or
    // the tenant's whole catalogue: not at all.
    assert_eq!(ttl("/t/default/toolsets/pinned").await, 60_000);
    assert_eq!(ttl("/t/default/toolsets/travel").await, 0);
    assert_eq!(ttl("").await, 0);

    // A listener at the toolset's MCP URL hears its new version.
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    let body = json!({ "jsonrpc": "2.0", "id": 7, "method": "subscriptions/listen",
                       "params": { "notifications": { "toolsListChanged": true }, "_meta": meta } });
    let mut stream = server
        .request(Method::POST, "/t/default/toolsets/travel/mcp")
        .bearer_auth(TOKEN)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", MODERN)
        .header("mcp-method", "subscriptions/listen")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    let mut seen = String::new();
    let mut next = async || {
        let chunk = tokio::time::timeout(Duration::from_secs(20), stream.chunk()).await.expect("an event in time");
        String::from_utf8(chunk.unwrap().unwrap().to_vec()).unwrap()
    };
    while !seen.contains("notifications/subscriptions/acknowledged") {
        seen.push_str(&next().await);
    }
    assert_eq!(put_toolset(&server, "travel", json!([{ "name": "echo" }])).await.0, 201);
    // Bounded as a whole: the stream's keep-alives would keep a per-chunk
    // wait going.
    let heard = tokio::time::timeout(Duration::from_secs(20), async {
        while !seen.contains("notifications/tools/list_changed") {
            seen.push_str(&next().await);
        }
    })
    .await;
    assert!(heard.is_ok(), "no list_changed after the toolset changed: {seen}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cli_sets_shows_lists_and_removes_a_toolset_and_scopes_a_key_to_it() {
    let server = Server::start(&[]);
    let plinth = |args: &[&str]| operator_cli(&server, args);
    let args =
        ["toolset", "set", "travel", "--description", "Trips", "--tool", "echo@1", "--tool", "lookup_weather_by_city"];
    let (ok, text) = plinth(&args);
    assert!(
        ok && text.contains("travel version 1: Trips") && text.contains("/t/default/toolsets/travel/mcp"),
        "{text}"
    );
    let (_, toolset) = server.call_as(Some(TOKEN), Method::GET, "/admin/toolsets/travel", None).await;
    let pins: Vec<(&str, Option<u64>)> = toolset["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["name"].as_str().unwrap(), t["version"].as_u64()))
        .collect();
    assert_eq!(pins, [("echo", Some(1)), ("lookup_weather_by_city", None)], "{toolset}");
    let (ok, text) = plinth(&["toolset", "list"]);
    assert!(ok && text.contains("travel") && text.contains("Trips"), "{text}");

    let (ok, text) = plinth(&["retire", "echo", "1"]);
    assert!(!ok && text.contains("pinned by toolset `travel`"), "{text}");
    let (ok, text) = plinth(&["retire", "echo", "1", "--force"]);
    assert!(ok, "{text}");
    let (ok, text) = plinth(&["toolset", "show", "travel", "--version", "1"]);
    assert!(ok && text.contains("retiredPinned"), "{text}");

    let (ok, key) = plinth(&["key", "create", "--tenant", "default", "--role", "consumer", "--toolset", "travel"]);
    assert!(ok, "{key}");
    let key = key.lines().find(|l| l.starts_with("plk_")).unwrap_or_else(|| panic!("no key in {key}"));
    assert_eq!(server.call_as(Some(key), Method::GET, "/t/default/toolsets/travel/tools", None).await.0, 200);
    assert_eq!(server.call_as(Some(key), Method::GET, "/tools", None).await.0, 403);
    let (ok, text) = plinth(&["key", "list", "--tenant", "default"]);
    assert!(ok && text.contains("TOOLSET") && text.contains("travel"), "{text}");

    let (ok, text) = plinth(&["toolset", "rm", "travel"]);
    assert!(ok, "{text}");
    let (ok, text) = plinth(&["toolset", "show", "travel"]);
    assert!(!ok && text.contains("404"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_through_a_toolset_that_waits_for_confirmation_is_polled_under_the_toolsets_root() {
    let server = Server::start(&[]);
    let echo = server.tool_id("echo").await;
    let path = format!("/admin/tools/{echo}/confirmation");
    let (status, body) = server.call_as(Some(TOKEN), Method::PUT, &path, Some(&json!({ "required": true }))).await;
    assert_eq!(status, 204, "{body}");
    let password = json!({ "password": "alice-password" });
    let (status, body) = server.call_as(Some(TOKEN), Method::PUT, "/admin/end-users/alice", Some(&password)).await;
    assert_eq!(status, 204, "{body}");
    assert_eq!(put_toolset(&server, "travel", travel()).await.0, 201);
    assert_eq!(put_toolset(&server, "payroll", json!([{ "name": "book_flight" }])).await.0, 201);
    let body = json!({ "tenant": "default", "role": "consumer", "toolset": "travel" });
    let (_, created) = server.call_as(Some(TOKEN), Method::POST, "/admin/keys", Some(&body)).await;
    let key = created["key"].as_str().unwrap();

    let response = server
        .request_as(Some(key), Method::POST, &format!("/t/default/toolsets/travel/tools/{echo}:invoke"))
        .header("plinth-end-user", "alice")
        .json(&invocation("echo", &[("text", json!("hi"))]))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let pack: Value = response.json().await.unwrap();
    let result_uri = pack["result uri"].as_str().unwrap().to_string();
    let prefix = format!("{}/t/default/toolsets/travel/cheq/results/", server.base);
    assert!(result_uri.starts_with(&prefix), "{pack}");
    // The scoped key polls it there: it waits for alice.
    let path = result_uri.strip_prefix(&server.base).unwrap();
    let (status, body) = server.call_as(Some(key), Method::GET, path, None).await;
    assert_eq!((status, body["state"].as_str()), (202, Some("pending")), "{body}");
    // Another toolset's root does not give it out.
    let id = result_uri.rsplit('/').next().unwrap();
    let elsewhere = format!("/t/default/toolsets/payroll/cheq/results/{id}");
    assert_eq!(server.call_as(Some(TOKEN), Method::GET, &elsewhere, None).await.0, 404);
}
