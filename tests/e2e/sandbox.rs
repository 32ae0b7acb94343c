//! Misbehaving tools (`tests/fixtures/`, built from source) against the
//! sandbox: each gets a precise error and a log line, and a well-behaved tool
//! invoked at the same time keeps answering.

use crate::support::{Server, TOKEN, fixture, invocation, outputs, plugins_dir};
use serde_json::{Value, json};

const ADVERSARIES: &[&str] = &[
    "spin_forever",
    "memory_bomb",
    "deep_recursion",
    "panic_at_once",
    "huge_output",
    "call_undeclared_host",
    "call_loopback",
    "snoop",
    "slow_sleep",
];

/// A server with echo and every adversary deployed.
fn sandbox(extra: &[&str]) -> (Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(plugins_dir().join("echo.wasm"), dir.path().join("echo.wasm")).unwrap();
    for name in ADVERSARIES {
        std::fs::write(dir.path().join(format!("{name}.wasm")), fixture(&format!("{name}.wasm"))).unwrap();
    }
    let mut args = vec!["--plugins", dir.path().to_str().unwrap(), "--max-memory-mib", "32"];
    if !extra.contains(&"--deadline-ms") {
        args.extend(["--deadline-ms", "3000"]);
    }
    args.extend_from_slice(extra);
    let server = Server::start_in(tempfile::tempdir().unwrap(), &args);
    (server, dir)
}

/// Invokes `tool` with one parameter, and echo while that call runs:
/// returns the adversary's answer once echo has answered correctly.
async fn alongside_echo(server: &Server, tool: &str, param: &str, value: Value) -> (u16, Value) {
    let id = server.tool_id(tool).await;
    let echo = server.tool_id("echo").await;
    let bad = server
        .request(reqwest::Method::POST, &format!("/tools/{id}:invoke"))
        .json(&invocation(tool, &[(param, value)]))
        .send();
    let (echo_path, echo_body) =
        (format!("/tools/{echo}:invoke"), invocation("echo", &[("text", json!("still here"))]));
    let good = server.post(&echo_path, &echo_body);
    let (bad, (status, body)) = tokio::join!(bad, good);
    assert_eq!((status, outputs(&body)["text"].clone()), (200, json!("still here")), "echo while {tool} ran");
    let bad = bad.unwrap();
    let status = bad.status().as_u16();
    (status, bad.json().await.unwrap_or(Value::Null))
}

fn error_code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("(none)")
}

#[tokio::test(flavor = "multi_thread")]
async fn an_infinite_loop_is_stopped_at_its_deadline_while_others_answer() {
    let (server, _dir) = sandbox(&[]);
    let id = server.tool_id("spin_forever").await;
    let spin = {
        let request = server.request(reqwest::Method::POST, &format!("/tools/{id}:invoke"));
        tokio::spawn(request.json(&invocation("spin_forever", &[("note", json!("x"))])).send())
    };
    // Echo answers while the loop burns its three seconds.
    for _ in 0..5 {
        let (status, _) = server.invoke("echo", &[("text", json!("hi"))]).await;
        assert_eq!(status, 200);
    }
    assert!(!spin.is_finished(), "echo answered only after the loop was stopped");
    let response = spin.await.unwrap().unwrap();
    assert_eq!(response.status(), 504);
    let body: Value = response.json().await.unwrap();
    assert_eq!(error_code(&body), "tool_timeout");
    assert_eq!(body["error"]["message"], "the tool did not finish within 3s");
    assert!(server.logs().contains("tool did not return"), "{}", server.logs());
}

#[tokio::test(flavor = "multi_thread")]
async fn crashes_become_precise_errors() {
    let (server, _dir) = sandbox(&[]);
    let cases = [
        ("memory_bomb", "note", json!("x"), 500, "tool_resource_exhausted", "ran out of memory"),
        ("deep_recursion", "note", json!("x"), 500, "tool_trapped", "stack overflow"),
        ("panic_at_once", "note", json!("x"), 500, "tool_trapped", "a panic"),
        ("huge_output", "megabytes", json!(8), 502, "output_too_large", "at most 1048576 are passed on"),
    ];
    for (tool, param, value, status, code, text) in cases {
        let (got, body) = alongside_echo(&server, tool, param, value).await;
        assert_eq!((got, error_code(&body)), (status, code), "{tool}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(text), "{tool}: {message}");
        assert!(!message.contains("wasm") && !message.contains("backtrace"), "no host internals: {message}");
    }
    let logs = server.logs();
    assert!(logs.contains("this tool always panics"), "the panic message reaches the log: {logs}");
    // The host is unharmed.
    assert_eq!(server.get("/health").await.0, 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn undeclared_hosts_and_loopback_are_out_of_reach() {
    let (server, _dir) = sandbox(&[]);
    let target = format!("{}/health", server.base);
    let (status, body) = alongside_echo(&server, "call_undeclared_host", "url", json!(target)).await;
    assert_eq!((status, error_code(&body)), (502, "outbound_denied"), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("is not among the hosts the tool declares"), "{body}");

    // Declared, but loopback: refused after resolution, by address.
    for url in [target.clone(), target.replace("127.0.0.1", "localhost")] {
        let (status, body) = alongside_echo(&server, "call_loopback", "url", json!(url)).await;
        assert_eq!((status, error_code(&body)), (502, "outbound_denied"), "{url}: {body}");
        assert!(body["error"]["message"].as_str().unwrap().contains("private network"), "{body}");
    }
    assert!(server.logs().matches("outbound request refused").count() >= 3);

    // With the operator's allowance the declared loopback call goes through.
    let (allowed, _dir) = sandbox(&["--allow-private-cidr", "127.0.0.0/8"]);
    let (status, body) = allowed.invoke("call_loopback", &[("url", json!(format!("{}/health", allowed.base)))]).await;
    assert_eq!(status, 200, "{body}");
    assert!(outputs(&body)["report"].as_str().unwrap().contains("\"status\":\"ok\""));
    // The allowance does not widen what the tool declared.
    let (status, body) =
        allowed.invoke("call_undeclared_host", &[("url", json!(format!("{}/health", allowed.base)))]).await;
    assert_eq!((status, error_code(&body)), (502, "outbound_denied"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_sees_no_environment_arguments_or_files() {
    // The server runs with environment variables of its own (PLINTH_LOG,
    // PATH…) and files all around it; the tool must see none of them.
    let (server, _dir) = sandbox(&[]);
    let (status, body) = alongside_echo(&server, "snoop", "note", json!("x")).await;
    assert_eq!(status, 200, "{body}");
    let report = outputs(&body)["report"].as_str().unwrap().to_string();
    let lines: Vec<&str> = report.lines().collect();
    assert_eq!(lines[0], "env=0");
    assert_eq!(lines[1], "args=0");
    for line in &lines[2..] {
        assert!(line.contains("=refused: "), "{line}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_flood_of_slow_calls_is_refused_not_queued() {
    let (server, _dir) = sandbox(&["--max-concurrency-per-tool", "3"]);
    let id = server.tool_id("slow_sleep").await;
    let calls: Vec<_> = (0..8)
        .map(|_| {
            let request = server
                .request(reqwest::Method::POST, &format!("/tools/{id}:invoke"))
                .json(&invocation("slow_sleep", &[("millis", json!(1200))]));
            tokio::spawn(request.send())
        })
        .collect();
    let echo = async {
        // Give the flood a head start, then check echo is unaffected.
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        server.invoke("echo", &[("text", json!("unaffected"))]).await
    };
    let (echo_status, echo_body) = echo.await;
    assert_eq!((echo_status, outputs(&echo_body)["text"].clone()), (200, json!("unaffected")));
    let mut ok = 0;
    let mut busy = 0;
    for call in calls {
        let answer = call.await.unwrap().unwrap();
        match answer.status().as_u16() {
            200 => ok += 1,
            503 => {
                assert_eq!(answer.headers()["retry-after"], "1");
                let body: Value = answer.json().await.unwrap();
                assert_eq!(error_code(&body), "busy");
                busy += 1;
            }
            other => panic!("unexpected status {other}"),
        }
    }
    assert_eq!(ok + busy, 8);
    assert!(ok <= 3, "at most 3 ran at once, {ok} succeeded");
    assert!(busy >= 5, "the rest were refused at once, {busy} were");
}

#[tokio::test(flavor = "multi_thread")]
async fn oversized_requests_are_refused() {
    let (server, _dir) = sandbox(&[]);
    let id = server.tool_id("echo").await;
    let big = invocation("echo", &[("text", json!("x".repeat(2 << 20)))]);
    let (status, body) = server.post(&format!("/tools/{id}:invoke"), &big).await;
    assert_eq!((status, error_code(&body)), (413, "request_too_large"));
}

#[tokio::test(flavor = "multi_thread")]
async fn secrets_reach_only_their_tool_and_never_leave_the_host() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("use_secret.wasm"), fixture("use_secret.wasm")).unwrap();
    let data = tempfile::tempdir().unwrap();
    let server = Server::start_in(data, &["--plugins", dir.path().to_str().unwrap()]);
    assert!(server.logs().contains("declared secrets are not set"), "{}", server.logs());

    let (status, body) = server.invoke("use_secret", &[("log_lines", json!(0)), ("fail", json!(false))]).await;
    assert_eq!(status, 200);
    assert_eq!(outputs(&body)["report"], "api-key=none; undeclared-key=none");

    let put = |id: &str, value: &str| {
        server
            .request(reqwest::Method::PUT, &format!("/admin/secrets/{id}"))
            .bearer_auth(TOKEN)
            .body(value.to_string())
            .send()
    };
    const KEY: &str = "sk-live-7f3a9c2e41d8";
    const OTHER: &str = "other-secret-5d1b";
    assert_eq!(put("api-key", KEY).await.unwrap().status(), 204);
    assert_eq!(put("undeclared-key", OTHER).await.unwrap().status(), 204);
    assert_eq!(put("Bad Id", "x").await.unwrap().status(), 400);
    let unauthenticated =
        server.request_as(None, reqwest::Method::PUT, "/admin/secrets/api-key").body("stolen").send().await.unwrap();
    assert_eq!(unauthenticated.status(), 401);

    // The tool gets its declared secret, not the other; every copy it tries
    // to pass on is redacted.
    let (status, body) = server.invoke("use_secret", &[("log_lines", json!(0)), ("fail", json!(false))]).await;
    assert_eq!(status, 200);
    assert_eq!(outputs(&body)["report"], "api-key=[redacted]; undeclared-key=none");
    let (status, body) = server.invoke("use_secret", &[("log_lines", json!(0)), ("fail", json!(true))]).await;
    assert_eq!(status, 422);
    assert_eq!(body["error"]["message"], "failed with key [redacted]");
    assert_eq!(body["error"]["developerMessage"], "[redacted]");

    // Never readable back.
    let listing = server.request(reqwest::Method::GET, "/admin/secrets").bearer_auth(TOKEN).send().await.unwrap();
    let listing = listing.text().await.unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&listing).unwrap(),
        json!({"items": [{"id": "api-key"}, {"id": "undeclared-key"}]})
    );
    let logs = server.logs();
    assert!(logs.contains("the api key is [redacted]"), "{logs}");
    assert!(logs.contains("stdout: the api key is [redacted]"), "{logs}");
    assert!(!logs.contains(KEY) && !logs.contains(OTHER), "a secret value reached the log");

    // Secrets survive a restart; deleting one makes it unset.
    let server = Server::start_in(server.stop(), &[]);
    let (_, body) = server.invoke("use_secret", &[("log_lines", json!(0)), ("fail", json!(false))]).await;
    assert_eq!(outputs(&body)["report"], "api-key=[redacted]; undeclared-key=none");
    let deleted =
        server.request(reqwest::Method::DELETE, "/admin/secrets/api-key").bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(deleted.status(), 204);
    let (_, body) = server.invoke("use_secret", &[("log_lines", json!(0)), ("fail", json!(false))]).await;
    assert_eq!(outputs(&body)["report"], "api-key=none; undeclared-key=none");
    let again =
        server.request(reqwest::Method::DELETE, "/admin/secrets/api-key").bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(again.status(), 404);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_chatty_tool_cannot_flood_the_log() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("use_secret.wasm"), fixture("use_secret.wasm")).unwrap();
    let server = Server::start_in(tempfile::tempdir().unwrap(), &["--plugins", dir.path().to_str().unwrap()]);
    let (status, _) = server.invoke("use_secret", &[("log_lines", json!(20000)), ("fail", json!(false))]).await;
    assert_eq!(status, 200);
    let logs = server.logs();
    let lines = logs.matches("chatty line").count();
    assert!(lines < 1000, "{lines} of 20000 lines were logged");
    assert!(logs.contains("the tool logs faster than it may; lines were dropped"), "{logs}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_may_ask_for_a_tighter_deadline_than_the_operators() {
    // slow_sleep's plinth.toml asks for 1.5 s; the operator allows 3 s.
    let (server, _dir) = sandbox(&[]);
    let (status, body) = server.invoke("slow_sleep", &[("millis", json!(2500))]).await;
    assert_eq!((status, error_code(&body)), (504, "tool_timeout"));
    assert_eq!(body["error"]["message"], "the tool did not finish within 1.5s");
    // And cannot ask for more than the operator's ceiling.
    let (tight, _dir) = sandbox(&["--deadline-ms", "1000"]);
    let (status, body) = tight.invoke("slow_sleep", &[("millis", json!(1300))]).await;
    assert_eq!((status, body["error"]["message"].clone()), (504, json!("the tool did not finish within 1s")));
}

#[tokio::test(flavor = "multi_thread")]
async fn each_invocation_has_an_outbound_budget_and_a_response_cap() {
    let (server, _dir) = sandbox(&[
        "--allow-private-cidr",
        "127.0.0.0/8",
        "--outbound-max-requests",
        "3",
        "--outbound-max-response-kib",
        "1",
    ]);
    let health = format!("{}/health", server.base);
    let (status, body) = server.invoke("call_loopback", &[("url", json!(health)), ("times", json!(3))]).await;
    assert_eq!(status, 200, "three requests fit the budget: {body}");
    let (status, body) = server.invoke("call_loopback", &[("url", json!(health)), ("times", json!(4))]).await;
    assert_eq!((status, error_code(&body)), (502, "outbound_denied"), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("more than 3 outbound requests"), "{body}");

    // The tool listing is far larger than 1 KiB: reading it fails inside the
    // tool (which has no key: the listing is made public for it).
    let public = json!({ "publicEnumeration": true });
    let (status, _) =
        server.call_as(Some(TOKEN), reqwest::Method::PATCH, "/admin/tenants/default", Some(&public)).await;
    assert_eq!(status, 200);
    let listing = format!("{}/tools?pageLimit=200", server.base);
    let (status, body) = server.invoke("call_loopback", &[("url", json!(listing))]).await;
    assert_eq!((status, error_code(&body)), (503, "tool_error"), "{body}");
    assert!(body["error"]["developerMessage"].as_str().unwrap().contains("reading the response failed"), "{body}");
}
