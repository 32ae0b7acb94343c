//! The MCP front door, end to end with the official Python SDK (`mcp` on
//! PyPI, pinned in tests/mcp-clients/requirements.txt): listing and calling
//! tools, validation errors, calls pinned to a version's bytes, tenants kept
//! apart, and a confirmation completed by the end user in a real headless
//! Chromium, for a 2026-07-28 client (URL elicitation, the SDK retries) and
//! a 2025-11-25 one (-32042, the agent repeats the call).
//!
//! The scripts in tests/mcp-clients/python/ print one JSON object per line;
//! the checks are here, so a failure shows what the SDK saw.

use crate::browser::{self, Browser};
use crate::mcp_support::{OidcProvider, free_port, venv_python};
use crate::support::{Server, TOKEN, fixture, plugins_dir};
use reqwest::Method;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;
use tokio::sync::mpsc;

/// How long a script may take to print its next line (it starts Python,
/// imports the SDK and talks to the server; a hang fails the test).
const LINE: Duration = Duration::from_secs(120);
const WAIT: Duration = Duration::from_secs(10);

/// A running script of tests/mcp-clients/python/, killed on drop.
pub(crate) struct Script {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::UnboundedReceiver<String>,
    /// Holds the script's stderr, shown when a check fails.
    dir: tempfile::TempDir,
}

impl Script {
    /// Starts `script` with `args`, sending `key` as its bearer key.
    pub(crate) fn start(script: &str, args: &[&str], key: Option<&str>) -> Script {
        Script::start_with(script, args, key, &[])
    }

    /// Starts `script` with `args`, `key` and more environment (secrets
    /// stay off the command line, which other users can read).
    fn start_with(script: &str, args: &[&str], key: Option<&str>, env: &[(&str, &str)]) -> Script {
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/mcp-clients/python");
        let dir = tempfile::tempdir().unwrap();
        let stderr = std::fs::File::create(dir.path().join("stderr")).unwrap();
        let mut command = Command::new(venv_python());
        command
            .arg(source.join(script))
            .args(args)
            .current_dir(&source)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env_remove("PLINTH_KEY");
        if let Some(key) = key {
            command.env("PLINTH_KEY", key);
        }
        command.envs(env.iter().copied());
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("{script} does not start ({e}): run `make mcp-clients`"));
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        Script { name: format!("{script} {}", args.join(" ")), child, stdin, lines, dir }
    }

    /// What the script wrote on stderr so far.
    fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr")).unwrap_or_default()
    }

    /// The next JSON object the script prints (None when it ended).
    async fn next(&mut self) -> Option<Value> {
        let line = match tokio::time::timeout(LINE, self.lines.recv()).await {
            Ok(line) => line?,
            Err(_) => panic!("`{}` printed nothing within {LINE:?}; its stderr:\n{}", self.name, self.stderr()),
        };
        Some(serde_json::from_str(&line).unwrap_or_else(|e| {
            panic!("`{}` printed a line that is not JSON ({e}): {line}\nits stderr:\n{}", self.name, self.stderr())
        }))
    }

    /// The next object, which must have `field`.
    pub(crate) async fn expect_line(&mut self, field: &str) -> Value {
        match self.next().await {
            Some(line) if line.get(field).is_some() => line,
            Some(line) => {
                panic!("`{}` printed {line}, expected a {field:?}; its stderr:\n{}", self.name, self.stderr())
            }
            None => panic!("`{}` ended before a {field:?}; its stderr:\n{}", self.name, self.stderr()),
        }
    }

    /// The next object's `field`, which it must have.
    pub(crate) async fn expect(&mut self, field: &str) -> Value {
        self.expect_line(field).await[field].take()
    }

    /// Writes `line` on the script's stdin.
    pub(crate) fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        writeln!(stdin, "{line}").and_then(|()| stdin.flush()).unwrap();
    }

    /// Closes stdin, reads what is left and checks that the script exited 0.
    pub(crate) async fn finish(mut self) -> Vec<Value> {
        self.stdin = None;
        let mut rest = Vec::new();
        while let Some(line) = self.next().await {
            rest.push(line);
        }
        let status = self.child.wait().unwrap();
        assert!(status.success(), "`{}` exited with {status}; its stderr:\n{}", self.name, self.stderr());
        rest
    }

    /// Runs a script to its end and returns every object it printed.
    async fn run(script: &str, args: &[&str], key: Option<&str>) -> Vec<Value> {
        Script::start(script, args, key).finish().await
    }
}

impl Drop for Script {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What `list_tools.py` printed: (protocol version, tools).
async fn list(url: &str, mode: &str, key: Option<&str>) -> (String, Vec<Value>) {
    let lines = Script::run("list_tools.py", &[url, "--mode", mode], key).await;
    let (first, tools) = lines.split_first().unwrap_or_else(|| panic!("list_tools.py printed nothing"));
    let version = first["protocolVersion"].as_str().unwrap_or_else(|| panic!("no protocol version: {lines:?}"));
    let tools = tools.iter().map(|t| t.get("tool").cloned().unwrap_or_else(|| panic!("not a tool: {t}"))).collect();
    (version.to_string(), tools)
}

/// A tool of a listing by name.
fn find<'a>(tools: &'a [Value], name: &str) -> &'a Value {
    tools.iter().find(|t| t["name"] == name).unwrap_or_else(|| panic!("no {name} in {tools:?}"))
}

fn names(tools: &[Value]) -> Vec<&str> {
    let mut names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    names.sort();
    names
}

/// What `call_tool.py` printed last: `{"result": …}` or `{"error": …}`.
async fn call(url: &str, key: Option<&str>, mode: &str, name: &str, arguments: Value, meta: Option<Value>) -> Value {
    let arguments = arguments.to_string();
    let mut args = vec![url, name, &arguments, "--mode", mode];
    let meta = meta.map(|m| m.to_string());
    if let Some(meta) = &meta {
        args.extend(["--meta", meta]);
    }
    let mut lines = Script::run("call_tool.py", &args, key).await;
    lines.pop().unwrap_or_else(|| panic!("call_tool.py {args:?} printed nothing"))
}

/// The result of a call that must succeed (a tool error included).
fn result(outcome: &Value) -> &Value {
    outcome.get("result").unwrap_or_else(|| panic!("expected a result, got {outcome}"))
}

/// The JSON-RPC error of a call that must raise one.
fn rpc_error(outcome: &Value) -> &Value {
    outcome.get("error").unwrap_or_else(|| panic!("expected a JSON-RPC error, got {outcome}"))
}

/// A completed, successful call's structured content, checked against its
/// text block (the same JSON, for clients that read only text).
fn structured(outcome: &Value) -> &Value {
    let result = result(outcome);
    assert_eq!(result["isError"], false, "{result}");
    let text = result["content"][0]["text"].as_str().unwrap_or_else(|| panic!("no text block: {result}"));
    let parsed: Value =
        serde_json::from_str(text).unwrap_or_else(|e| panic!("the text block is not JSON ({e}): {result}"));
    assert_eq!(parsed, result["structuredContent"], "the text block says what structuredContent does: {result}");
    &result["structuredContent"]
}

/// A consumer key of the default tenant.
async fn consumer(server: &Server) -> String {
    server.create_key(Some("default"), "consumer").await.1
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_sdk_lists_and_calls_tools() {
    let server = Server::start(&[]);
    let key = consumer(&server).await;
    let url = format!("{}/mcp", server.base);

    // `auto` discovers the server and settles on 2026-07-28.
    let (version, tools) = list(&url, "auto", Some(&key)).await;
    assert_eq!(version, "2026-07-28");
    assert_eq!(names(&tools), ["book_flight", "echo", "lookup_weather_by_city"]);
    let echo = find(&tools, "echo");
    assert_eq!(
        echo["description"].as_str().unwrap(),
        "Returns the text it is given, unchanged. Use it to check that the tool server answers; it has no other effect."
    );
    let echo_bytes = std::fs::read(plugins_dir().join("echo.wasm")).unwrap();
    assert_eq!(
        echo["_meta"],
        json!({"toolId": server.tool_id("echo").await, "version": 1, "sha256": sha256_hex(&echo_bytes)}),
        "{echo}"
    );
    // The input schema is the OTC door's.
    let (_, otc) = server.get("/otc/tools").await;
    let otc_echo = otc["tools"].as_array().unwrap().iter().find(|t| t["name"] == "Default_Echo").unwrap();
    assert_eq!(echo["inputSchema"], otc_echo["input_schema"]["parameters"], "{echo}\n{otc_echo}");
    assert_eq!(echo["inputSchema"]["properties"]["text"]["maxLength"], 4096, "{echo}");
    assert_eq!(echo["outputSchema"]["properties"]["text"]["type"], "string", "{echo}");
    // echo reaches no host; the weather tool does.
    assert_eq!(echo["annotations"]["openWorldHint"], false, "{echo}");
    let weather = find(&tools, "lookup_weather_by_city");
    assert_ne!(weather["annotations"]["openWorldHint"], false, "{weather}");
    assert!(tools.iter().all(|t| t["_meta"].get("confirmation").is_none()), "nothing needs confirmation: {tools:?}");

    // A 2025-11-25 client (initialize) sees the same tools.
    let (version, legacy) = list(&url, "legacy", Some(&key)).await;
    assert_eq!(version, "2025-11-25");
    assert_eq!(names(&legacy), names(&tools));
    assert_eq!(find(&legacy, "echo")["_meta"], echo["_meta"]);

    for mode in ["2026-07-28", "legacy"] {
        let outcome = call(&url, Some(&key), mode, "echo", json!({"text": "hello"}), None).await;
        assert_eq!(structured(&outcome), &json!({"text": "hello"}), "{mode}");

        // Arguments the schema refuses: a result the model can read and fix,
        // naming the parameter.
        for arguments in [json!({"text": "x".repeat(4097)}), json!({}), json!({"text": 5})] {
            let outcome = call(&url, Some(&key), mode, "echo", arguments.clone(), None).await;
            let refused = result(&outcome);
            assert_eq!(refused["isError"], true, "{mode} {arguments}: {refused}");
            assert!(refused["content"][0]["text"].as_str().unwrap().contains("text"), "{mode}: {refused}");
            assert_eq!(refused["_meta"]["code"], "invalid_input", "{mode}: {refused}");
            // Parameter name → what is wrong with it.
            let errors = &refused["_meta"]["parameterErrors"];
            assert!(errors["text"].as_str().is_some_and(|m| m.contains("text")), "{mode}: {refused}");
            assert!(refused.get("structuredContent").is_none(), "{mode}: {refused}");
        }

        let outcome = call(&url, Some(&key), mode, "no_such_tool", json!({}), None).await;
        let error = rpc_error(&outcome);
        assert_eq!(
            (&error["code"], &error["data"]["code"]),
            (&json!(-32602), &json!("unknown_tool")),
            "{mode}: {error}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_pinned_to_replaced_bytes_is_refused() {
    let server = Server::start(&[]);
    let key = consumer(&server).await;
    let url = format!("{}/mcp", server.base);
    let (_, tools) = list(&url, "2026-07-28", Some(&key)).await;
    let old = find(&tools, "echo")["_meta"]["sha256"].as_str().unwrap().to_string();
    let hi = || json!({"text": "hi"});

    // The pin matches: the call runs.
    let outcome = call(&url, Some(&key), "2026-07-28", "echo", hi(), Some(json!({"sha256": old}))).await;
    assert_eq!(structured(&outcome), &json!({"text": "hi"}));

    let (status, deployed) = server.deploy(fixture("echo_v2.wasm"), "").await;
    assert_eq!((status, &deployed["version"]), (201, &json!(2)), "{deployed}");
    let new = deployed["sha256"].as_str().unwrap().to_string();
    assert_eq!(new, sha256_hex(&fixture("echo_v2.wasm")));

    // The agent still expects the bytes it reviewed: refused, never served
    // by version 2.
    for mode in ["2026-07-28", "legacy"] {
        let outcome = call(&url, Some(&key), mode, "echo", hi(), Some(json!({"sha256": old}))).await;
        let error = rpc_error(&outcome);
        assert_eq!(error["code"], -32602, "{mode}: {error}");
        assert_eq!(error["data"]["code"], "pinned_version_mismatch", "{mode}: {error}");
    }

    // The new listing names the new bytes, and a call pinned to them runs v2.
    let (_, tools) = list(&url, "2026-07-28", Some(&key)).await;
    let echo = find(&tools, "echo");
    assert_eq!((&echo["_meta"]["version"], &echo["_meta"]["sha256"]), (&json!(2), &json!(new)), "{echo}");
    assert!(echo["inputSchema"]["properties"].get("shout").is_some(), "{echo}");
    let outcome = call(&url, Some(&key), "2026-07-28", "echo", hi(), Some(json!({"sha256": new}))).await;
    assert_eq!(structured(&outcome), &json!({"text": "hi", "length": 2}));

    // Version 1 stays callable by number, and the hash is checked against it.
    let outcome = call(&url, Some(&key), "2026-07-28", "echo", hi(), Some(json!({"version": 1, "sha256": new}))).await;
    assert_eq!(rpc_error(&outcome)["data"]["code"], "pinned_version_mismatch", "{outcome}");
    // Its result must still pass the SDK's check against the listed
    // outputSchema (MCP: structured results MUST conform to it), though v2
    // added an output v1 does not give.
    let outcome = call(&url, Some(&key), "2026-07-28", "echo", hi(), Some(json!({"version": 1, "sha256": old}))).await;
    assert_eq!(structured(&outcome), &json!({"text": "hi"}));
}

/// An agent lists its tools when it starts and keeps the listing (the SDK
/// checks each result against the outputSchema it listed). A compatible
/// deploy (v2 adds an output) must not break its next call.
#[tokio::test(flavor = "multi_thread")]
async fn a_compatible_deploy_does_not_break_an_agent_that_listed_before_it() {
    let server = Server::start(&[]);
    let key = consumer(&server).await;
    let url = format!("{}/mcp", server.base);
    for mode in ["2026-07-28", "legacy"] {
        let mut agent = Script::start(
            "call_tool.py",
            &[&url, "echo", r#"{"text": "hi"}"#, "--mode", mode, "--list-first"],
            Some(&key),
        );
        agent.expect("protocolVersion").await;
        assert_eq!(agent.expect("listed").await, json!(["book_flight", "echo", "lookup_weather_by_city"]));
        let (status, deployed) = server.deploy(fixture("echo_v2.wasm"), "").await;
        assert!(status == 201 || status == 200, "{deployed}");
        agent.send("go");
        let outcome = json!({"result": agent.expect("result").await});
        assert_eq!(structured(&outcome), &json!({"text": "hi", "length": 2}), "{mode}");
        assert_eq!(agent.finish().await, Vec::<Value>::new());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tenants_key_reaches_only_its_tenants_tools() {
    let server = Server::start(&[]);
    server.create_tenant("acme", json!({})).await;
    server.create_tenant("globex", json!({})).await;
    let acme_publisher = server.create_key(Some("acme"), "publisher").await.1;
    let globex_publisher = server.create_key(Some("globex"), "publisher").await.1;
    let acme = server.create_key(Some("acme"), "consumer").await.1;
    let globex = server.create_key(Some("globex"), "consumer").await.1;
    let echo = std::fs::read(plugins_dir().join("echo.wasm")).unwrap();
    let weather = std::fs::read(plugins_dir().join("lookup_weather_by_city.wasm")).unwrap();
    assert_eq!(server.deploy_as(&acme_publisher, "acme", echo).await.0, 201);
    assert_eq!(server.deploy_as(&globex_publisher, "globex", weather).await.0, 201);
    let acme_url = format!("{}/t/acme/mcp", server.base);
    let globex_url = format!("{}/t/globex/mcp", server.base);

    let (_, tools) = list(&acme_url, "auto", Some(&acme)).await;
    assert_eq!(names(&tools), ["echo"]);
    let (_, tools) = list(&globex_url, "auto", Some(&globex)).await;
    assert_eq!(names(&tools), ["lookup_weather_by_city"]);

    // acme's key at globex's door, or the default tenant's: not found, over
    // HTTP, before any JSON-RPC; the SDK raises an error.
    for url in [&globex_url, &format!("{}/mcp", server.base)] {
        for mode in ["auto", "legacy", "2026-07-28"] {
            let lines = Script::run("list_tools.py", &[url, "--mode", mode], Some(&acme)).await;
            let refused = lines.last().unwrap();
            assert!(refused.get("error").is_some(), "{url} {mode}: {lines:?}");
            let refusals = refused["refusals"].as_array().unwrap();
            assert!(!refusals.is_empty(), "{url} {mode}: {refused}");
            for refusal in refusals {
                assert_eq!(refusal["status"], 404, "{url} {mode}: {refused}");
                assert!(refusal["body"]["error"]["code"].is_string(), "an A2T error body: {refused}");
            }
        }
        let outcome = call(url, Some(&acme), "2026-07-28", "echo", json!({"text": "hi"}), None).await;
        assert_eq!(outcome["refusals"][0]["status"], 404, "{url}: {outcome}");
    }

    // No key at all: 401.
    let lines = Script::run("list_tools.py", &[&acme_url, "--mode", "2026-07-28"], None).await;
    assert_eq!(lines.last().unwrap()["refusals"][0]["status"], 401, "{lines:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_sdk_lists_and_calls_exactly_a_toolsets_tools() {
    use crate::toolsets::{echo_v2, put_toolset, travel};
    let server = Server::start(&[]);
    echo_v2(&server).await;
    assert_eq!(put_toolset(&server, "travel", travel()).await.0, 201);
    let key = consumer(&server).await;
    let url = format!("{}/t/default/toolsets/travel/mcp", server.base);

    for mode in ["auto", "legacy"] {
        let (_, tools) = list(&url, mode, Some(&key)).await;
        assert_eq!(names(&tools), ["echo", "lookup_weather_by_city"], "{mode}");
        // echo at its pin, though version 2 is current.
        assert_eq!(find(&tools, "echo")["_meta"]["version"], 1, "{mode}");
    }
    for mode in ["2026-07-28", "legacy"] {
        let outcome = call(&url, Some(&key), mode, "echo", json!({"text": "hi"}), None).await;
        assert_eq!(structured(&outcome), &json!({"text": "hi"}), "{mode}");
        // Outside it, whatever the request names: another tool (answered as
        // one that does not exist), another version.
        let outcome = call(&url, Some(&key), mode, "book_flight", json!({}), None).await;
        assert_eq!(rpc_error(&outcome)["data"]["code"], "unknown_tool", "{mode}: {outcome}");
        let pinned = Some(json!({"version": 2}));
        let outcome = call(&url, Some(&key), mode, "echo", json!({"text": "hi"}), pinned).await;
        assert_eq!(rpc_error(&outcome)["data"]["code"], "outside_toolset", "{mode}: {outcome}");
    }

    // A key scoped to the toolset opens its MCP URL, and no other.
    let body = json!({ "tenant": "default", "role": "consumer", "toolset": "travel" });
    let (status, created) = server.call_as(Some(TOKEN), Method::POST, "/admin/keys", Some(&body)).await;
    assert_eq!(status, 201, "{created}");
    let scoped = created["key"].as_str().unwrap();
    let (_, tools) = list(&url, "auto", Some(scoped)).await;
    assert_eq!(names(&tools), ["echo", "lookup_weather_by_city"]);
    let lines = Script::run("list_tools.py", &[&format!("{}/mcp", server.base), "--mode", "auto"], Some(scoped)).await;
    let refused = lines.last().unwrap();
    assert_eq!(refused["refusals"][0]["status"], 403, "{lines:?}");
    assert_eq!(refused["refusals"][0]["body"]["error"]["code"], "outside_toolset", "{lines:?}");
}

/// A server whose `book_flight` always needs its end user's confirmation,
/// with the end users alice and bob; returns it and a consumer key.
async fn confirming_server() -> (Server, String) {
    let server = Server::start(&[]);
    let id = server.tool_id("book_flight").await;
    let required = json!({"required": true});
    let (status, body) =
        server.call_as(Some(TOKEN), Method::PUT, &format!("/admin/tools/{id}/confirmation"), Some(&required)).await;
    assert_eq!(status, 204, "{body}");
    for user in ["alice", "bob"] {
        let password = json!({ "password": format!("{user}-password") });
        let (status, body) =
            server.call_as(Some(TOKEN), Method::PUT, &format!("/admin/end-users/{user}"), Some(&password)).await;
        assert_eq!(status, 204, "{body}");
    }
    let key = consumer(&server).await;
    (server, key)
}

fn booking(passengers: u32) -> String {
    json!({"flight_number": "UA123", "date": "2026-12-24", "passengers": passengers, "cabin_class": "ECONOMY"})
        .to_string()
}

/// Opens the confirmation page at `url`, logs in as `user` and waits for the call.
async fn log_in(browser: &Browser, url: &str, user: &str) {
    browser.goto(url).await;
    browser.wait_for_text("Log in to see what you are asked to confirm", WAIT).await;
    browser.fill("#user", user).await;
    browser.fill("#password", &format!("{user}-password")).await;
    browser.click("#login").await;
    let page = browser.wait_for_text("Book flight", WAIT).await;
    assert!(page.contains("UA123") && page.contains(user), "{page}");
}

/// Where a URL elicitation points: the server's confirmation page.
fn confirmation_url(server: &Server, elicitation: &Value) -> String {
    assert_eq!(elicitation["mode"], "url", "{elicitation}");
    assert!(elicitation["message"].as_str().is_some_and(|m| !m.is_empty()), "{elicitation}");
    let url = elicitation["url"].as_str().unwrap_or_else(|| panic!("no url: {elicitation}"));
    let page = format!("{}/cheq/confirm?resource_uri=", server.base);
    assert!(url.starts_with(&page), "{url} is not {page}…");
    url.to_string()
}

/// A 2026-07-28 agent's call for `user`: (the script, the confirmation page).
async fn modern_call(server: &Server, key: &str, passengers: u32, user: &str) -> (Script, String) {
    let url = format!("{}/mcp", server.base);
    let meta = json!({"endUser": user}).to_string();
    let args = [url.as_str(), "book_flight", &booking(passengers), "--meta", &meta, "--mode", "2026-07-28"];
    let mut agent = Script::start("confirm_call.py", &args, Some(key));
    assert_eq!(agent.expect("protocolVersion").await, "2026-07-28");
    let asked = agent.expect_line("elicitation").await;
    assert_eq!(asked["key"], "confirmation", "the input request's key: {asked}");
    let page = confirmation_url(server, &asked["elicitation"]);

    // The client says yes before the end user decided: still waiting, asked again.
    agent.send("accept");
    let again = agent.expect("elicitation").await;
    assert_eq!(confirmation_url(server, &again), page, "the same confirmation");
    (agent, page)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_2026_client_books_once_the_end_user_accepts_in_a_browser() {
    let (server, key) = confirming_server().await;
    let (_, tools) = list(&format!("{}/mcp", server.base), "2026-07-28", Some(&key)).await;
    assert_eq!(find(&tools, "book_flight")["_meta"]["confirmation"], "required");

    let (mut agent, page) = modern_call(&server, &key, 2, "alice").await;
    let browser = browser::start().await;
    log_in(&browser, &page, "alice").await;
    browser.click("#accept").await;
    browser.wait_for_text("You confirmed", WAIT).await;
    browser.close().await;

    // The SDK's retry carries the request state and gets the booking.
    agent.send("accept");
    let outcome = json!({"result": agent.expect("result").await});
    let booked = structured(&outcome);
    assert_eq!((&booked["cabin_class"], &booked["total_price_usd"]), (&json!("ECONOMY"), &json!(360)), "{booked}");
    assert_eq!(booked["confirmation_code"].as_str().map(str::len), Some(6), "{booked}");
    assert_eq!(agent.finish().await, Vec::<Value>::new());

    // bob rejects: the retry ends with a tool result that says so.
    let (mut agent, page) = modern_call(&server, &key, 3, "bob").await;
    let browser = browser::start().await;
    log_in(&browser, &page, "bob").await;
    browser.click("#reject").await;
    browser.wait_for_text("You rejected", WAIT).await;
    browser.close().await;
    agent.send("accept");
    let rejected = agent.expect("result").await;
    assert_eq!(rejected["isError"], true, "{rejected}");
    assert_eq!(rejected["_meta"]["code"], "confirmation_rejected", "{rejected}");
    assert_eq!(agent.finish().await, Vec::<Value>::new());
}

/// A legacy agent's call for `user`: (the script, the confirmation page).
async fn legacy_call(server: &Server, key: &str, passengers: u32, user: &str) -> (Script, String) {
    let url = format!("{}/mcp", server.base);
    let meta = json!({"endUser": user}).to_string();
    let mut agent = Script::start(
        "confirm_call.py",
        &[&url, "book_flight", &booking(passengers), "--meta", &meta, "--mode", "legacy"],
        Some(key),
    );
    assert_eq!(agent.expect("protocolVersion").await, "2025-11-25");
    let error = agent.expect("error").await;
    assert_eq!(error["code"], -32042, "URL elicitation required: {error}");
    let elicitations = error["data"]["elicitations"].as_array().unwrap_or_else(|| panic!("{error}"));
    assert_eq!(elicitations.len(), 1, "{error}");
    assert!(elicitations[0]["elicitationId"].as_str().is_some_and(|id| !id.is_empty()), "{error}");
    let page = confirmation_url(server, &elicitations[0]);

    // Repeated before the end user decided: the same elicitation again.
    agent.send("again");
    let again = agent.expect("error").await;
    assert_eq!(again["code"], -32042, "{again}");
    assert_eq!(confirmation_url(server, &again["data"]["elicitations"][0]), page);
    (agent, page)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_legacy_client_repeats_the_call_once_the_end_user_decided() {
    let (server, key) = confirming_server().await;

    // alice accepts: the repeated call returns the booking.
    let (mut agent, page) = legacy_call(&server, &key, 2, "alice").await;
    let browser = browser::start().await;
    log_in(&browser, &page, "alice").await;
    browser.click("#accept").await;
    browser.wait_for_text("You confirmed", WAIT).await;
    browser.close().await;
    agent.send("again");
    let outcome = json!({"result": agent.expect("result").await});
    let booked = structured(&outcome);
    assert_eq!((&booked["cabin_class"], &booked["total_price_usd"]), (&json!("ECONOMY"), &json!(360)), "{booked}");
    assert_eq!(agent.finish().await, Vec::<Value>::new());

    // bob rejects: the repeated call says so, as a tool result.
    let (mut agent, page) = legacy_call(&server, &key, 3, "bob").await;
    let browser = browser::start().await;
    log_in(&browser, &page, "bob").await;
    browser.click("#reject").await;
    browser.wait_for_text("You rejected", WAIT).await;
    browser.close().await;
    agent.send("again");
    let rejected = agent.expect("result").await;
    assert_eq!(rejected["isError"], true, "{rejected}");
    assert_eq!(rejected["_meta"]["code"], "confirmation_rejected", "{rejected}");
    assert_eq!(agent.finish().await, Vec::<Value>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_sdks_oauth_client_signs_in_lists_calls_and_refreshes_in_both_revisions() {
    let server = Server::start(&[]);
    server.create_tenant("acme", json!({})).await;
    let echo = std::fs::read(plugins_dir().join("echo.wasm")).unwrap();
    assert_eq!(server.deploy_as(TOKEN, "acme", echo).await.0, 201);
    let password = json!({ "password": "alice-password" });
    let (status, body) =
        server.call_as(Some(TOKEN), Method::PUT, "/t/acme/admin/end-users/alice", Some(&password)).await;
    assert_eq!(status, 204, "{body}");
    let url = format!("{}/t/acme/mcp", server.base);
    let secret = [("PLINTH_END_USER_PASSWORD", "alice-password")];
    for mode in ["legacy", "2026-07-28"] {
        let args = [url.as_str(), "echo", r#"{"text": "hi"}"#, "--mode", mode, "--refresh"];
        let lines = Script::start_with("oauth_client.py", &args, None, &secret).finish().await;
        let field = |name: &str| {
            lines.iter().find_map(|l| l.get(name).cloned()).unwrap_or_else(|| panic!("{mode}: no {name} in {lines:?}"))
        };
        assert_eq!(field("listed"), json!(["echo"]), "{mode}");
        assert_eq!(field("result")["structuredContent"], json!({ "text": "hi" }), "{mode}: {lines:?}");
        let refreshed = field("refreshed");
        assert_eq!(refreshed["newToken"], true, "{mode}: {lines:?}");
        assert_eq!(refreshed["result"]["structuredContent"], json!({ "text": "hi" }), "{mode}");
        assert_eq!(refreshed["pages"], true, "{mode}: the refresh needed no sign-in");
        // Discovery where RFC 9728 and RFC 8414 put the documents,
        // registration, the code exchange and the refresh.
        let port = server.base.rsplit(':').next().unwrap();
        assert_eq!(
            field("oauth"),
            json!([
                format!("GET {port} /.well-known/oauth-protected-resource/t/acme/mcp 200"),
                format!("GET {port} /.well-known/oauth-authorization-server/t/acme 200"),
                format!("POST {port} /t/acme/oauth/register 201"),
                format!("POST {port} /t/acme/oauth/token 200"),
                format!("POST {port} /t/acme/oauth/token 200"),
            ]),
            "{mode}"
        );
    }
    // A wrong password or a person who denies: no token, no call.
    for (args, env) in [
        (vec![url.as_str(), "echo", "{}", "--deny"], secret),
        (vec![url.as_str(), "echo", "{}"], [("PLINTH_END_USER_PASSWORD", "wrong")]),
    ] {
        let lines = Script::start_with("oauth_client.py", &args, None, &env).finish().await;
        assert!(lines.iter().any(|l| l.get("clientError").is_some()), "{lines:?}");
        assert!(!lines.iter().any(|l| l.get("result").is_some()), "{lines:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_oauth_token_for_a_toolsets_mcp_url_opens_that_toolset_only() {
    let server = Server::start(&[]);
    assert_eq!(crate::toolsets::put_toolset(&server, "travel", crate::toolsets::travel()).await.0, 201);
    assert_eq!(crate::toolsets::put_toolset(&server, "payroll", json!([{ "name": "book_flight" }])).await.0, 201);
    let password = json!({ "password": "alice-password" });
    let (status, body) = server.call_as(Some(TOKEN), Method::PUT, "/admin/end-users/alice", Some(&password)).await;
    assert_eq!(status, 204, "{body}");
    let url = format!("{}/t/default/toolsets/travel/mcp", server.base);
    let secret = [("PLINTH_END_USER_PASSWORD", "alice-password")];
    let port = server.base.rsplit(':').next().unwrap().to_string();
    for (elsewhere, mode) in [
        (format!("{}/t/default/mcp", server.base), "2026-07-28"),
        (format!("{}/t/default/toolsets/payroll/mcp", server.base), "legacy"),
    ] {
        let args = [url.as_str(), "echo", r#"{"text": "hi"}"#, "--mode", mode, "--then", &elsewhere];
        let lines = Script::start_with("oauth_client.py", &args, None, &secret).finish().await;
        let field = |name: &str| {
            lines.iter().find_map(|l| l.get(name).cloned()).unwrap_or_else(|| panic!("no {name} in {lines:?}"))
        };
        // Signed in for travel: its tools, discovered at its own resource.
        assert_eq!(field("listed"), json!(["echo", "lookup_weather_by_city"]), "{lines:?}");
        assert_eq!(field("result")["structuredContent"], json!({ "text": "hi" }), "{lines:?}");
        assert_eq!(
            field("oauth")[0],
            json!(format!("GET {port} /.well-known/oauth-protected-resource/t/default/toolsets/travel/mcp 200")),
            "{lines:?}"
        );
        // The same token at the tenant's MCP URL or payroll's: 403, saying why.
        let then = field("then");
        assert_eq!(then["status"], 403, "{elsewhere}: {then}");
        assert_eq!(then["body"]["error"]["code"], "outside_toolset", "{elsewhere}: {then}");
        assert!(then["body"]["error"]["message"].as_str().unwrap().contains("travel"), "{then}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_sdks_oauth_client_gets_its_token_from_a_tenants_identity_provider() {
    // A real OpenID provider (tests/mcp-clients/oidc/provider.mjs).
    let provider = OidcProvider::start("provider.mjs", free_port(), &[]);
    let server = Server::start(&["--oauth-allow-http", "--allow-private-cidr", "127.0.0.0/8"]);
    server.create_tenant("acme", json!({})).await;
    let echo = std::fs::read(plugins_dir().join("echo.wasm")).unwrap();
    assert_eq!(server.deploy_as(TOKEN, "acme", echo).await.0, 201);
    let setting = json!({ "issuer": provider.issuer });
    let (status, body) = server.call_as(Some(TOKEN), Method::PUT, "/admin/tenants/acme/oauth", Some(&setting)).await;
    assert_eq!(status, 200, "{body}");
    // The provider's user must be one of the tenant's end users.
    let password = json!({ "password": "alice-password" });
    let (status, body) =
        server.call_as(Some(TOKEN), Method::PUT, "/t/acme/admin/end-users/alice", Some(&password)).await;
    assert_eq!(status, 204, "{body}");
    // The resource metadata names the provider; the built-in server is off.
    let (_, metadata) = server.get("/.well-known/oauth-protected-resource/t/acme/mcp").await;
    assert_eq!(metadata["authorization_servers"], json!([provider.issuer]));
    assert_eq!(server.get("/.well-known/oauth-authorization-server/t/acme").await.0, 404);

    let url = format!("{}/t/acme/mcp", server.base);
    for mode in ["legacy", "2026-07-28"] {
        let args = [url.as_str(), "echo", r#"{"text": "hi"}"#, "--mode", mode, "--refresh", "--user", "alice"];
        let lines = Script::start_with("oauth_client.py", &args, None, &[]).finish().await;
        let field = |name: &str| {
            lines.iter().find_map(|l| l.get(name).cloned()).unwrap_or_else(|| panic!("{mode}: no {name} in {lines:?}"))
        };
        assert_eq!(field("listed"), json!(["echo"]), "{mode}: {lines:?}");
        assert_eq!(field("result")["structuredContent"], json!({ "text": "hi" }), "{mode}: {lines:?}");
        let refreshed = field("refreshed");
        assert_eq!((&refreshed["newToken"], &refreshed["pages"]), (&json!(true), &json!(true)), "{mode}: {lines:?}");
        assert_eq!(refreshed["result"]["structuredContent"], json!({ "text": "hi" }), "{mode}: {lines:?}");
        // Every token request went to the provider, none to Plinth's own server.
        let provider_port = provider.issuer.rsplit(':').next().unwrap();
        let oauth = field("oauth");
        let tokens: Vec<&str> =
            oauth.as_array().unwrap().iter().filter_map(Value::as_str).filter(|r| r.contains("/token")).collect();
        assert_eq!(tokens.len(), 2, "{mode}: {oauth}");
        assert!(tokens.iter().all(|r| r.starts_with(&format!("POST {provider_port} "))), "{mode}: {oauth}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_sdks_oauth_client_identifies_itself_by_a_client_id_metadata_document() {
    // The document is served over loopback http by the script: the
    // operator allows both, as for tests and closed networks.
    let server = Server::start(&["--oauth-allow-http", "--allow-private-cidr", "127.0.0.0/8"]);
    let password = json!({ "password": "alice-password" });
    let (status, _) = server.call_as(Some(TOKEN), Method::PUT, "/admin/end-users/alice", Some(&password)).await;
    assert_eq!(status, 204);
    let url = format!("{}/mcp", server.base);
    for mode in ["legacy", "2026-07-28"] {
        let args = [url.as_str(), "echo", r#"{"text": "hi"}"#, "--mode", mode, "--metadata-document", "--refresh"];
        let secret = [("PLINTH_END_USER_PASSWORD", "alice-password")];
        let lines = Script::start_with("oauth_client.py", &args, None, &secret).finish().await;
        let field = |name: &str| {
            lines.iter().find_map(|l| l.get(name).cloned()).unwrap_or_else(|| panic!("{mode}: no {name} in {lines:?}"))
        };
        assert!(field("clientId").as_str().unwrap().ends_with("/client.json"), "{lines:?}");
        assert_eq!(field("result")["structuredContent"], json!({ "text": "hi" }), "{mode}: {lines:?}");
        assert_eq!(field("refreshed")["newToken"], true, "{mode}: {lines:?}");
        // No registration: the server fetched the document instead.
        let oauth = field("oauth");
        assert!(!oauth.to_string().contains("/register"), "{oauth}");
        assert_eq!(
            oauth.as_array().unwrap().iter().filter(|r| r.as_str().unwrap().contains("/oauth/token")).count(),
            2
        );
    }
}

/// Issue 66: the official SDK, in both revisions, lists a toolset's tools
/// with the designer's words (the tool's description, its input's and its
/// output's in the schemas) and the tenant's `/mcp` with the vendor's; a
/// pinned toolset version keeps its words; the call is the same.
#[tokio::test(flavor = "multi_thread")]
async fn the_python_sdk_lists_a_toolsets_tools_in_its_designers_words() {
    use crate::toolset_words::worded_echo;
    let server = Server::start(&[]);
    let put = |tag: &'static str| {
        let body = json!({ "tools": [worded_echo(Some(1), tag)] });
        let server = &server;
        async move { server.call_as(Some(TOKEN), Method::PUT, "/admin/toolsets/words", Some(&body)).await.0 }
    };
    assert_eq!(put("first").await, 201);
    assert_eq!(put("second").await, 201);
    let key = consumer(&server).await;
    let texts = |tool: &Value| {
        (
            tool["description"].as_str().unwrap().to_string(),
            tool["inputSchema"]["properties"]["text"]["description"].as_str().unwrap().to_string(),
            tool["outputSchema"]["properties"]["text"]["description"].as_str().unwrap().to_string(),
        )
    };
    for mode in ["auto", "legacy"] {
        let url = format!("{}/t/default/toolsets/words/mcp", server.base);
        let (_, tools) = list(&url, mode, Some(&key)).await;
        let echo = find(&tools, "echo");
        assert_eq!(
            texts(echo),
            (
                "second: repeat the traveller's words back.".into(),
                "second: exactly what the traveller said.".into(),
                "second: the same words.".into()
            ),
            "{mode}"
        );
        let (_, tenant) = list(&format!("{}/mcp", server.base), mode, Some(&key)).await;
        let vendor = find(&tenant, "echo");
        assert_eq!(texts(vendor).1, "The text to send back.", "{mode}: the tenant's root, the vendor's words");
        // Only texts differ: the same schema otherwise.
        let mut reworded = echo["inputSchema"].clone();
        reworded["properties"]["text"]["description"] =
            vendor["inputSchema"]["properties"]["text"]["description"].clone();
        assert_eq!(reworded, vendor["inputSchema"], "{mode}");
        let pinned = format!("{}/t/default/toolsets/words@1/mcp", server.base);
        let (_, first) = list(&pinned, mode, Some(&key)).await;
        assert_eq!(texts(find(&first, "echo")).0, "first: repeat the traveller's words back.", "{mode}");
        let outcome = call(&url, Some(&key), mode, "echo", json!({"text": "hi"}), None).await;
        assert_eq!(structured(&outcome), &json!({"text": "hi"}), "{mode}");
    }
}
