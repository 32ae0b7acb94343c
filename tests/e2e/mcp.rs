//! The MCP front door over raw JSON-RPC on HTTP, both revisions: what each
//! answer carries, version pins, CHEQ through URL elicitation, list-changed
//! notifications, DNS-rebinding protection. The official clients (the
//! conformance suite, the Inspector, the Python SDK) are in `mcp_*.rs`.

use crate::cheq::{PageSession, booking, confirming_server};
use crate::support::{Server, TOKEN, fixture, plugins_dir};
use reqwest::Method;
use serde_json::{Value, json};
use std::time::Duration;

pub const MODERN: &str = "2026-07-28";
const LEGACY: &str = "2025-11-25";

/// A client of one revision, with one key, at one platform root.
pub struct Mcp<'a> {
    server: &'a Server,
    key: String,
    root: String,
    revision: &'static str,
    /// Declares URL elicitation (2026-07-28 clients).
    url_elicitation: bool,
    /// Sends an `Accept` with weights, which the direct lane leaves to rmcp
    /// (api/mcp/direct.rs): the same request, served by rmcp's dispatcher.
    through_rmcp: bool,
}

impl<'a> Mcp<'a> {
    pub fn modern(server: &'a Server) -> Mcp<'a> {
        Mcp {
            server,
            key: TOKEN.into(),
            root: String::new(),
            revision: MODERN,
            url_elicitation: true,
            through_rmcp: false,
        }
    }

    /// A 2026-07-28 client with URL elicitation, sending `key` (a key or an
    /// OAuth token) to the MCP URL under `root`.
    pub fn with_key(server: &'a Server, key: &str, root: &str) -> Mcp<'a> {
        Mcp { key: key.into(), root: root.into(), ..Mcp::modern(server) }
    }

    /// A 2025-11-25 client (no handshake needed: each request stands alone).
    pub fn legacy(server: &'a Server) -> Mcp<'a> {
        Mcp { revision: LEGACY, ..Mcp::modern(server) }
    }

    /// A 2026-07-28 client that opens no URL (form elicitation only).
    pub fn without_urls(server: &'a Server) -> Mcp<'a> {
        Mcp { url_elicitation: false, ..Mcp::modern(server) }
    }

    /// One request → (HTTP status, the JSON-RPC message).
    pub async fn request(&self, method: &str, mut params: Value, extra_meta: Value) -> (u16, Value) {
        let mut request = self
            .server
            .request_as(Some(&self.key), Method::POST, &format!("{}/mcp", self.root))
            .header(
                "accept",
                if self.through_rmcp {
                    "application/json;q=1, text/event-stream;q=1"
                } else {
                    "application/json, text/event-stream"
                },
            )
            .header("mcp-protocol-version", self.revision);
        if self.revision == MODERN {
            // Without URL mode, what Claude Code declares: form elicitation only.
            let capabilities = if self.url_elicitation {
                json!({ "elicitation": { "url": {} } })
            } else {
                json!({ "elicitation": {} })
            };
            let mut meta = json!({
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": capabilities,
            });
            meta.as_object_mut().unwrap().extend(extra_meta.as_object().cloned().unwrap_or_default());
            params["_meta"] = meta;
            request = request.header("mcp-method", method);
            if let Some(name) = params["name"].as_str() {
                request = request.header("mcp-name", name);
            }
        } else if extra_meta.is_object() {
            params["_meta"] = extra_meta;
        }
        let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
        let response = request.json(&body).send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    pub async fn list(&self) -> Vec<Value> {
        let (status, answer) = self.request("tools/list", json!({}), Value::Null).await;
        assert_eq!(status, 200, "{answer}");
        answer["result"]["tools"].as_array().cloned().unwrap_or_default()
    }

    /// `tools/call` → the JSON-RPC message.
    pub async fn call(&self, name: &str, arguments: Value, meta: Value) -> Value {
        let (status, answer) = self.request("tools/call", json!({ "name": name, "arguments": arguments }), meta).await;
        assert!(status == 200, "{status}: {answer}");
        answer
    }
}

pub fn arguments(params: &[(&str, Value)]) -> Value {
    Value::Object(params.iter().map(|(k, v)| (k.to_string(), v.clone())).collect())
}

fn tool<'t>(tools: &'t [Value], name: &str) -> &'t Value {
    tools.iter().find(|t| t["name"] == name).unwrap_or_else(|| panic!("no {name} in {tools:?}"))
}

/// The example tools, the weather one configured (it may reach its backend).
fn example_server() -> Server {
    Server::start(&["--tool-config", "lookup_weather_by_city.backend-url=http://127.0.0.1:9"])
}

#[tokio::test(flavor = "multi_thread")]
async fn tools_are_listed_with_their_identity_schemas_and_enforced_facts() {
    let server = example_server();
    let tools = Mcp::modern(&server).list().await;
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["book_flight", "echo", "lookup_weather_by_city"], "the A2T names, in name order");

    // The same identity A2T publishes, and the same input schema as OTC.
    let (_, otc) = server.get("/otc/tools").await;
    for t in &tools {
        let name = t["name"].as_str().unwrap();
        let (status, a2t) = server.get(&format!("/tools/{}", t["_meta"]["toolId"].as_str().unwrap())).await;
        assert_eq!(status, 200, "{a2t}");
        assert_eq!(t["_meta"]["version"], a2t["version"], "{name}");
        assert_eq!(format!("sha256:{}", t["_meta"]["sha256"].as_str().unwrap()), a2t["contentHash"], "{name}");
        assert_eq!(t["description"], a2t["description"], "{name}");
        let definition = otc["tools"].as_array().unwrap().iter().find(|d| {
            d["version"] == "1.0.0" && {
                d["input_schema"]["parameters"]["properties"] == t["inputSchema"]["properties"]
            }
        });
        assert!(definition.is_some(), "{name}'s inputSchema is one the OTC door publishes");
        assert_eq!(t["outputSchema"]["type"], "object", "{name}");
        // Every output is typed (a strict client warns on a schema with no
        // keyword at all), a record's fields included.
        for (field, schema) in t["outputSchema"]["properties"].as_object().unwrap() {
            let typed = ["type", "enum", "const", "oneOf", "anyOf"].iter().any(|k| schema.get(*k).is_some());
            assert!(typed, "{name}.{field} has no validation keyword: {schema}");
        }
    }
    let coordinates = &tool(&tools, "lookup_weather_by_city")["outputSchema"]["properties"]["coordinates"];
    assert_eq!(coordinates["type"], "object", "{coordinates}");
    assert_eq!(coordinates["properties"]["latitude"]["anyOf"][0]["type"], "number", "{coordinates}");
    // The publishers' claims from plinth.toml, with what the sandbox
    // enforces in their place: echo and book_flight may reach no host.
    assert_eq!(
        tool(&tools, "echo")["annotations"],
        json!({ "title": "Echo", "readOnlyHint": true, "idempotentHint": true, "openWorldHint": false })
    );
    assert_eq!(
        tool(&tools, "book_flight")["annotations"],
        json!({ "title": "Book a flight", "readOnlyHint": false, "destructiveHint": false,
                "idempotentHint": false, "openWorldHint": false })
    );
    assert_eq!(
        tool(&tools, "lookup_weather_by_city")["annotations"],
        json!({ "title": "Current weather in a city", "readOnlyHint": true, "idempotentHint": true, "openWorldHint": true })
    );
    assert!(tool(&tools, "echo")["_meta"].get("confirmation").is_none());

    // The legacy revision lists the same tools.
    assert_eq!(Mcp::legacy(&server).list().await, tools);
}

#[tokio::test(flavor = "multi_thread")]
async fn calls_answer_structured_content_and_errors_the_model_can_act_on() {
    let server = example_server();
    for client in [Mcp::modern(&server), Mcp::legacy(&server)] {
        let answer = client.call("echo", json!({ "text": "hi" }), Value::Null).await;
        let result = &answer["result"];
        assert_eq!(result["structuredContent"], json!({ "text": "hi" }), "{answer}");
        assert_eq!(result["isError"], false);
        let text: Value = serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(text, json!({ "text": "hi" }), "the same answer as text");

        // A bad argument: a result the model reads, naming the parameter.
        let answer = client.call("book_flight", arguments(&booking("ECONOMY", 12)), Value::Null).await;
        let result = &answer["result"];
        assert_eq!(result["isError"], true, "{answer}");
        assert!(result["content"][0]["text"].as_str().unwrap().contains("passengers"), "{answer}");
        assert_eq!(result["_meta"]["code"], "invalid_input");
        assert!(result["_meta"]["parameterErrors"]["passengers"].is_string(), "{answer}");

        // The tool's own error: its message, and what it adds for the model.
        // (The weather tool's backend is a closed port here.)
        let answer = client.call("lookup_weather_by_city", json!({ "city": "Paris" }), Value::Null).await;
        assert_eq!(answer["result"]["isError"], true, "{answer}");
        assert!(answer["result"]["_meta"]["code"].is_string(), "{answer}");

        // An unknown tool is the request's error, not the model's.
        let answer = client.call("no_such_tool", json!({}), Value::Null).await;
        assert_eq!(answer["error"]["code"], -32602, "{answer}");
        assert_eq!(answer["error"]["data"]["code"], "unknown_tool");
    }
}

/// A plain stateless `tools/call` is served by the direct lane, the same
/// request with anything unusual by rmcp's dispatcher: both answer alike,
/// status and message, whatever the outcome. (The lane says in the debug
/// log which calls it served.)
#[tokio::test(flavor = "multi_thread")]
async fn the_direct_lane_answers_every_call_as_rmcp_does() {
    let plugins = tempfile::tempdir().unwrap();
    for tool in ["echo.wasm", "book_flight.wasm"] {
        std::fs::copy(plugins_dir().join(tool), plugins.path().join(tool)).unwrap();
    }
    std::fs::write(plugins.path().join("transfer_funds.wasm"), fixture("transfer_funds.wasm")).unwrap();
    let log = [("PLINTH_LOG".to_string(), "info,plinth::api::mcp=debug".to_string())];
    let args = ["--plugins", plugins.path().to_str().unwrap()];
    let (server, _) = Server::start_on(tempfile::tempdir().unwrap(), "127.0.0.1:0", &args, Some(TOKEN), &log);
    let (status, body) = server.deploy(fixture("echo_v2.wasm"), "").await;
    assert_eq!(status, 201, "{body}");
    server.add_end_user("", "alice").await;
    let mut calls = vec![
        ("echo", json!({ "text": "hi" }), Value::Null),
        ("echo", json!({ "text": "hi" }), json!({ "version": 1 })),
        ("echo", json!({ "text": 5 }), Value::Null),
        ("echo", json!({}), json!({ "version": 7 })),
        ("echo", json!({}), json!({ "sha256": "0".repeat(64) })),
        ("echo", json!({}), json!({ "endUser": 3 })),
        ("book_flight", arguments(&booking("ECONOMY", 12)), Value::Null),
        ("no_such_tool", json!({}), Value::Null),
    ];
    // A call that needs a confirmation the client cannot show (-32021, 400).
    calls.push(("transfer_funds", json!({ "amount_usd": 5 }), json!({ "endUser": "alice" })));
    let served_by_lane = || server.logs().matches("served by the direct lane").count();
    for (n, (name, arguments, meta)) in calls.into_iter().enumerate() {
        let lane = Mcp { url_elicitation: false, ..Mcp::modern(&server) };
        let rmcp = Mcp { through_rmcp: true, ..Mcp { url_elicitation: false, ..Mcp::modern(&server) } };
        let params = json!({ "name": name, "arguments": arguments });
        let direct = lane.request("tools/call", params.clone(), meta.clone()).await;
        assert_eq!(served_by_lane(), n + 1, "the lane served {name} {meta}");
        let dispatched = rmcp.request("tools/call", params, meta.clone()).await;
        assert_eq!(served_by_lane(), n + 1, "rmcp served the weighted request");
        assert_eq!(direct, dispatched, "{name} {meta}");
        assert!(direct.1["jsonrpc"] == "2.0" && direct.1["id"] == 1, "{direct:?}");
    }

    // A call that waits for its end user: the same result both ways but
    // for its transaction and sealed state, and each way resumes the
    // other's state.
    let (lane, rmcp) = (Mcp::modern(&server), Mcp { through_rmcp: true, ..Mcp::modern(&server) });
    let params = json!({ "name": "transfer_funds", "arguments": { "amount_usd": 5 } });
    let alice = json!({ "endUser": "alice" });
    let direct = lane.request("tools/call", params.clone(), alice.clone()).await;
    let dispatched = rmcp.request("tools/call", params.clone(), alice.clone()).await;
    assert_eq!(direct.1["result"]["resultType"], "input_required", "{direct:?}");
    assert_eq!((direct.0, shape(&direct.1)), (dispatched.0, shape(&dispatched.1)));
    for (client, answer) in [(&lane, &dispatched.1), (&rmcp, &direct.1)] {
        let mut params = params.clone();
        params["requestState"] = answer["result"]["requestState"].clone();
        let (status, resumed) = client.request("tools/call", params, alice.clone()).await;
        assert_eq!(status, 200, "{resumed}");
        assert_eq!(resumed["result"]["resultType"], "input_required", "still waiting: {resumed}");
        let url = |a: &Value| a["result"]["inputRequests"]["confirmation"]["params"]["url"].clone();
        assert_eq!(url(&resumed), url(answer), "the same transaction");
    }
}

/// A JSON value with every string and number blanked: its keys, types and
/// lengths of arrays.
fn shape(value: &Value) -> Value {
    match value {
        Value::String(_) => json!(""),
        Value::Number(_) => json!(0),
        Value::Array(items) => items.iter().map(shape).collect(),
        Value::Object(map) => map.iter().map(|(k, v)| (k.clone(), shape(v))).collect(),
        other => other.clone(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_legacy_client_is_not_promised_list_changes_it_cannot_receive() {
    let server = example_server();
    let initialize =
        json!({ "protocolVersion": LEGACY, "capabilities": {}, "clientInfo": { "name": "t", "version": "1" } });
    let (status, answer) = Mcp::legacy(&server).request("initialize", initialize, Value::Null).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["result"]["protocolVersion"], LEGACY);
    assert!(answer["result"]["capabilities"]["tools"].is_object(), "{answer}");
    assert!(answer["result"]["capabilities"]["tools"].get("listChanged").is_none(), "{answer}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_pinned_to_bytes_that_changed_is_refused_never_served_by_another_version() {
    let server = example_server();
    let client = Mcp::modern(&server);
    let before = tool(&client.list().await, "echo").clone();
    let (status, body) = server.deploy(fixture("echo_v2.wasm"), "").await;
    assert_eq!(status, 201, "{body}");
    let after = tool(&client.list().await, "echo").clone();
    assert_eq!(after["_meta"]["version"], 2);
    assert_ne!(after["_meta"]["sha256"], before["_meta"]["sha256"]);

    let old_sha = before["_meta"]["sha256"].clone();
    let answer = client.call("echo", json!({ "text": "hi" }), json!({ "sha256": old_sha })).await;
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    assert_eq!(answer["error"]["data"]["code"], "pinned_version_mismatch");
    assert_eq!(answer["error"]["data"]["current"]["version"], 2);
    assert!(answer["error"]["message"].as_str().unwrap().contains("changed"), "{answer}");

    // Pinned to what the client reviewed, both ways, it runs.
    let answer = client.call("echo", json!({ "text": "hi" }), json!({ "version": 1, "sha256": old_sha })).await;
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    // Its answer fits the listed output schema, which requires only what
    // every live version answers.
    let v1 = answer["result"]["structuredContent"].as_object().unwrap();
    let required = after["outputSchema"]["required"].as_array().unwrap();
    assert!(required.iter().all(|name| v1.contains_key(name.as_str().unwrap())), "{required:?} vs {v1:?}");
    assert!(after["outputSchema"]["properties"].as_object().unwrap().len() > required.len(), "v2 adds an output");
    let answer = client.call("echo", json!({ "text": "hi" }), json!({ "sha256": after["_meta"]["sha256"] })).await;
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    // A version that does not exist, or a pin that is not one.
    let answer = client.call("echo", json!({ "text": "hi" }), json!({ "version": 7 })).await;
    assert_eq!(answer["error"]["data"]["code"], "unknown_version", "{answer}");
    let answer = client.call("echo", json!({ "text": "hi" }), json!({ "version": "latest" })).await;
    assert_eq!(answer["error"]["data"]["code"], "invalid_pin", "{answer}");
    let answer = client.call("echo", json!({ "text": "hi" }), json!({ "sha256": "<script>" })).await;
    assert_eq!(answer["error"]["data"]["code"], "invalid_pin", "{answer}");
}

/// The confirmation pack of an elicitation URL, as the page helpers take it.
pub fn pack_of(url: &str) -> Value {
    let (page, query) = url.split_once('?').unwrap();
    let resource = form_urlencoded::parse(query.as_bytes()).find(|(k, _)| k == "resource_uri").unwrap().1;
    json!({ "confirmation uri": page, "resource uri": resource })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_that_needs_confirmation_completes_through_url_elicitation() {
    let (server, _plugins) = confirming_server(&[]).await;
    let client = Mcp::modern(&server);
    assert_eq!(tool(&client.list().await, "book_flight")["_meta"]["confirmation"], "conditional");
    // A tool that may need confirmation changes something, whatever its
    // publisher claims.
    let annotations = tool(&client.list().await, "book_flight")["annotations"].clone();
    assert_eq!((&annotations["readOnlyHint"], &annotations["destructiveHint"]), (&json!(false), &json!(true)));
    assert_eq!(tool(&client.list().await, "echo")["_meta"].get("confirmation"), None);

    // No end user named: the request's error.
    let answer = client.call("book_flight", arguments(&booking("FIRST", 2)), Value::Null).await;
    assert_eq!(answer["error"]["data"]["code"], "end_user_required", "{answer}");

    let alice = json!({ "endUser": "alice" });
    let answer = client.call("book_flight", arguments(&booking("FIRST", 2)), alice.clone()).await;
    let result = &answer["result"];
    assert_eq!(result["resultType"], "input_required", "{answer}");
    let elicitation = &result["inputRequests"]["confirmation"];
    assert_eq!(elicitation["method"], "elicitation/create");
    assert_eq!(elicitation["params"]["mode"], "url");
    let url = elicitation["params"]["url"].as_str().unwrap().to_string();
    assert!(url.starts_with(&format!("{}/cheq/confirm?resource_uri=", server.base)), "{url}");
    let state = result["requestState"].as_str().unwrap().to_string();

    let retry = |state: String| {
        let params = json!({ "name": "book_flight", "arguments": arguments(&booking("FIRST", 2)), "requestState": state,
                             "inputResponses": { "confirmation": { "action": "accept" } } });
        client.request("tools/call", params, json!({ "endUser": "alice" }))
    };
    // The client's own "accept" is no confirmation: still waiting.
    let (_, answer) = retry(state.clone()).await;
    assert_eq!(answer["result"]["resultType"], "input_required", "{answer}");

    // A forged or altered state, or another key's, is refused.
    let (_, answer) = retry(format!("{state}x")).await;
    assert_eq!(answer["error"]["data"]["code"], "invalid_request_state", "{answer}");
    let other_key = server.create_key(Some("default"), "consumer").await.1;
    let other = Mcp { key: other_key, ..Mcp::modern(&server) };
    let params = json!({ "name": "book_flight", "arguments": arguments(&booking("FIRST", 2)), "requestState": state });
    let (_, answer) = other.request("tools/call", params, json!({ "endUser": "alice" })).await;
    assert_eq!(answer["error"]["data"]["code"], "invalid_request_state", "{answer}");
    // The state belongs to its call: other arguments, or another end user, are refused.
    let params = json!({ "name": "book_flight", "arguments": arguments(&booking("FIRST", 3)), "requestState": state });
    let (_, answer) = client.request("tools/call", params.clone(), json!({ "endUser": "alice" })).await;
    assert_eq!(answer["error"]["data"]["code"], "invalid_request_state", "{answer}");
    let params = json!({ "name": "book_flight", "arguments": arguments(&booking("FIRST", 2)), "requestState": state });
    let (_, answer) = client.request("tools/call", params, json!({ "endUser": "bob" })).await;
    assert_eq!(answer["error"]["data"]["code"], "invalid_request_state", "{answer}");

    // Alice accepts on the page; the retry returns the booking.
    let pack = pack_of(&url);
    let (status, html) = PageSession::log_in(&pack, "alice").await.decide(&pack, "accept").await;
    assert_eq!(status, 200, "{html}");
    let (_, answer) = retry(state.clone()).await;
    let result = &answer["result"];
    assert_eq!(result["isError"], false, "{answer}");
    assert_eq!(result["structuredContent"]["cabin_class"], "FIRST", "{answer}");
    assert!(result["structuredContent"]["confirmation_code"].is_string(), "{answer}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_without_url_elicitation_gets_the_link_in_a_result_and_its_repetition_the_outcome() {
    let (server, _plugins) = confirming_server(&[]).await;
    // Declares elicitation without URL mode, as Claude Code does.
    let client = Mcp { url_elicitation: false, ..Mcp::modern(&server) };
    let alice = json!({ "endUser": "alice" });
    let call = || client.call("book_flight", arguments(&booking("FIRST", 2)), alice.clone());
    let answer = call().await;
    let result = &answer["result"];
    assert_eq!(
        (&result["isError"], &result["_meta"]["code"]),
        (&json!(true), &json!("confirmation_required")),
        "{answer}"
    );
    let url = result["_meta"]["url"].as_str().unwrap().to_string();
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(text.contains(&url) && text.contains("alice") && text.contains("same call again"), "{text}");
    assert!(url.starts_with(&format!("{}/cheq/confirm?resource_uri=", server.base)), "{url}");

    // Repeated before a decision: the same link, no second transaction,
    // and the tool has not run.
    let again = call().await;
    assert_eq!(again["result"]["_meta"]["url"], url.as_str(), "{again}");
    assert_eq!(server.stored_count("SELECT count(*) FROM confirmations"), 1);
    assert_eq!(server.stored_count("SELECT count(*) FROM confirmations WHERE state <> 'pending'"), 0);
    // Another end user's identical call is another call.
    let bob = client.call("book_flight", arguments(&booking("FIRST", 2)), json!({ "endUser": "bob" })).await;
    assert_ne!(bob["result"]["_meta"]["url"], url.as_str(), "{bob}");

    let pack = pack_of(&url);
    let (status, html) = PageSession::log_in(&pack, "alice").await.decide(&pack, "accept").await;
    assert_eq!(status, 200, "{html}");
    let answer = call().await;
    let result = &answer["result"];
    assert_eq!(result["isError"], false, "{answer}");
    assert_eq!(result["structuredContent"]["cabin_class"], "FIRST", "{answer}");
    let code = result["structuredContent"]["confirmation_code"].clone();
    assert!(code.is_string(), "{answer}");

    // The outcome was delivered: the same call again is a new one.
    let answer = call().await;
    assert_eq!(answer["result"]["_meta"]["code"], "confirmation_required", "{answer}");
    assert_ne!(answer["result"]["_meta"]["url"], url.as_str());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_legacy_client_gets_the_link_as_error_32042_and_its_repetition_the_outcome() {
    let (server, _plugins) = confirming_server(&[]).await;
    let client = Mcp::legacy(&server);
    let bob = json!({ "endUser": "bob" });
    let answer = client.call("book_flight", arguments(&booking("BUSINESS", 1)), bob.clone()).await;
    assert_eq!(answer["error"]["code"], -32042, "{answer}");
    let elicitation = &answer["error"]["data"]["elicitations"][0];
    assert_eq!(elicitation["mode"], "url");
    let url = elicitation["url"].as_str().unwrap().to_string();
    // The link is in the message too, for clients that show only that.
    assert!(answer["error"]["message"].as_str().unwrap().contains(&url), "{answer}");

    // Repeated before a decision: the same link, no second transaction.
    let again = client.call("book_flight", arguments(&booking("BUSINESS", 1)), bob.clone()).await;
    assert_eq!(again["error"]["data"]["elicitations"][0]["url"], url.as_str(), "{again}");

    let pack = pack_of(&url);
    let (status, html) = PageSession::log_in(&pack, "bob").await.decide(&pack, "reject").await;
    assert_eq!(status, 200, "{html}");
    let answer = client.call("book_flight", arguments(&booking("BUSINESS", 1)), bob.clone()).await;
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    assert_eq!(answer["result"]["_meta"]["code"], "confirmation_rejected");

    // The outcome was delivered: the same call again is a new one.
    let answer = client.call("book_flight", arguments(&booking("BUSINESS", 1)), bob).await;
    assert_eq!(answer["error"]["code"], -32042, "{answer}");
    assert_ne!(answer["error"]["data"]["elicitations"][0]["url"], url.as_str());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deploy_reaches_clients_listening_for_list_changes() {
    let server = example_server();
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    let body = json!({ "jsonrpc": "2.0", "id": 7, "method": "subscriptions/listen",
                       "params": { "notifications": { "toolsListChanged": true }, "_meta": meta } });
    let mut stream = server
        .request(Method::POST, "/mcp")
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
    let (status, body) = server.deploy(fixture("echo_v2.wasm"), "").await;
    assert_eq!(status, 201, "{body}");
    while !seen.contains("notifications/tools/list_changed") {
        seen.push_str(&next().await);
    }

    // Stopping the server ends the stream, so the server does stop.
    let stopped = std::process::Command::new("kill").args(["-TERM", &server.pid().to_string()]).status().unwrap();
    assert!(stopped.success());
    let rest = tokio::time::timeout(Duration::from_secs(20), async {
        while let Ok(Some(chunk)) = stream.chunk().await {
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await;
    assert!(rest.is_ok(), "the stream ended when the server stopped: {seen}");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::path::Path::new(&format!("/proc/{}/stat", server.pid())).exists()
        && !std::fs::read_to_string(format!("/proc/{}/stat", server.pid())).unwrap_or_default().contains(") Z")
    {
        assert!(std::time::Instant::now() < deadline, "the server stopped with a listener connected");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn hosts_other_than_the_servers_own_are_refused() {
    let server = example_server();
    let port = server.base.rsplit(':').next().unwrap().to_string();
    let list = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {} });
    let send = |host: String, origin: Option<&'static str>| {
        let mut request = server
            .request(Method::POST, "/mcp")
            .bearer_auth(TOKEN)
            .header("accept", "application/json, text/event-stream")
            .header("host", host)
            .json(&list);
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        async move { request.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(send(format!("127.0.0.1:{port}"), None).await, 200);
    assert_eq!(send(format!("localhost:{port}"), None).await, 200);
    assert_eq!(send("attacker.example".into(), None).await, 403, "a rebound name");
    // Refused in Plinth's error shape, like every refusal.
    let response = server
        .request(Method::POST, "/mcp")
        .bearer_auth(TOKEN)
        .header("accept", "application/json, text/event-stream")
        .header("host", "attacker.example")
        .json(&list)
        .send()
        .await
        .unwrap();
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "forbidden", "{body}");
    assert_eq!(send(format!("127.0.0.1:{port}"), Some("http://attacker.example")).await, 403, "a foreign page");
}

#[tokio::test(flavor = "multi_thread")]
async fn tenants_see_and_call_only_their_own_tools() {
    let server = Server::start(&[]);
    server.create_tenant("acme", json!({})).await;
    server.create_tenant("globex", json!({})).await;
    let acme_publisher = server.create_key(Some("acme"), "publisher").await.1;
    let acme = server.create_key(Some("acme"), "consumer").await.1;
    let echo = std::fs::read(plugins_dir().join("echo.wasm")).unwrap();
    assert_eq!(server.deploy_as(&acme_publisher, "acme", echo).await.0, 201);

    let client = Mcp { key: acme.clone(), root: "/t/acme".into(), ..Mcp::modern(&server) };
    assert_eq!(client.list().await.len(), 1);
    let answer = client.call("echo", json!({ "text": "hi" }), Value::Null).await;
    assert_eq!(answer["result"]["structuredContent"]["text"], "hi", "{answer}");
    // The default tenant's root and another tenant's are not acme's.
    for root in ["", "/t/globex"] {
        let other = Mcp { key: acme.clone(), root: root.into(), ..Mcp::modern(&server) };
        let (status, _) = other.request("tools/list", json!({}), Value::Null).await;
        assert_eq!(status, 404, "{root}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn names_and_browser_origins_the_operator_lists_are_let_in_and_no_others() {
    let server = Server::start(&[
        "--mcp-allowed-host",
        "tools.internal",
        "--mcp-allowed-host",
        "plinth.cluster.local:8443",
        "--cors-origin",
        "https://app.example",
    ]);
    let list = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {} });
    let send = |host: &'static str, origin: Option<&'static str>| {
        let mut request = server
            .request(Method::POST, "/mcp")
            .bearer_auth(TOKEN)
            .header("accept", "application/json, text/event-stream")
            .header("host", host)
            .json(&list);
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        async move { request.send().await.unwrap() }
    };
    // A balancer's or a cluster's names, as listed.
    assert_eq!(send("tools.internal:9999", None).await.status(), 200);
    assert_eq!(send("plinth.cluster.local:8443", None).await.status(), 200);
    assert_eq!(send("plinth.cluster.local:1", None).await.status(), 403, "another port of a name listed with one");
    assert_eq!(send("tools.other", None).await.status(), 403);

    // A listed browser origin: its preflight, then the answer it may read.
    let preflight = server
        .request(Method::OPTIONS, "/mcp")
        .header("origin", "https://app.example")
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "authorization, content-type, mcp-protocol-version")
        .send()
        .await
        .unwrap();
    assert_eq!(preflight.status(), 204);
    assert_eq!(preflight.headers()["access-control-allow-origin"], "https://app.example");
    assert!(preflight.headers()["access-control-allow-headers"].to_str().unwrap().contains("authorization"));
    let answer = send("tools.internal", Some("https://app.example")).await;
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.headers()["access-control-allow-origin"], "https://app.example");
    // Its script can read where the OAuth metadata is.
    let anonymous = server
        .request_as(None, Method::POST, "/mcp")
        .header("origin", "https://app.example")
        .header("accept", "application/json, text/event-stream")
        .json(&list)
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
    assert!(anonymous.headers()["access-control-expose-headers"].to_str().unwrap().contains("www-authenticate"));
    let metadata = server
        .request(Method::GET, "/.well-known/oauth-protected-resource/mcp")
        .header("origin", "https://app.example")
        .send()
        .await
        .unwrap();
    assert_eq!(metadata.headers()["access-control-allow-origin"], "https://app.example");

    // Any other origin: no CORS header, and the MCP door refuses its page.
    let foreign = send("tools.internal", Some("https://evil.example")).await;
    assert_eq!(foreign.status(), 403);
    assert!(foreign.headers().get("access-control-allow-origin").is_none());
    // Nor for paths a script has no business calling.
    let admin = server
        .request(Method::GET, "/tools")
        .bearer_auth(TOKEN)
        .header("origin", "https://app.example")
        .send()
        .await
        .unwrap();
    assert!(admin.headers().get("access-control-allow-origin").is_none());
    // Without --cors-origin, none at all.
    let plain = example_server();
    let response = plain
        .request(Method::OPTIONS, "/mcp")
        .header("origin", "https://app.example")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert!(response.headers().get("access-control-allow-origin").is_none());
}
