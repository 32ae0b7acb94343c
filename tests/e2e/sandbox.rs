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
    // Still computing at its deadline: it would loop again, so not a 5xx
    // (which an A2T executor retries) and no Retry-After.
    assert_eq!(response.status(), 422);
    assert!(response.headers().get("retry-after").is_none());
    let body: Value = response.json().await.unwrap();
    assert_eq!(error_code(&body), "tool_timeout");
    assert_eq!(
        body["error"]["message"],
        "the tool did not finish within 3s; it was still computing, and the same input would run out of time again"
    );
    assert!(server.logs().contains("tool did not return"), "{}", server.logs());
}

#[tokio::test(flavor = "multi_thread")]
async fn crashes_become_precise_errors() {
    let (server, _dir) = sandbox(&[]);
    let cases = [
        ("memory_bomb", "note", json!("x"), 422, "tool_resource_exhausted", "ran out of memory"),
        ("deep_recursion", "note", json!("x"), 422, "tool_trapped", "stack overflow"),
        ("panic_at_once", "note", json!("x"), 422, "tool_trapped", "a panic"),
        ("huge_output", "megabytes", json!(8), 422, "output_too_large", "at most 1048576 are passed on"),
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
    assert_eq!((status, error_code(&body)), (422, "outbound_denied"), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("is not among the hosts the tool declares"), "{body}");

    // Declared, but loopback: refused after resolution, by address.
    for url in [target.clone(), target.replace("127.0.0.1", "localhost")] {
        let (status, body) = alongside_echo(&server, "call_loopback", "url", json!(url)).await;
        assert_eq!((status, error_code(&body)), (422, "outbound_denied"), "{url}: {body}");
        assert!(body["error"]["message"].as_str().unwrap().contains("private network"), "{body}");
    }
    // One summary line per call.
    assert_eq!(server.logs().matches("1 outbound requests refused (first: ").count(), 3, "{}", server.logs());

    // With the operator's allowance the declared loopback call goes through.
    let (allowed, _dir) = sandbox(&["--allow-private-cidr", "127.0.0.0/8"]);
    let (status, body) = allowed.invoke("call_loopback", &[("url", json!(format!("{}/health", allowed.base)))]).await;
    assert_eq!(status, 200, "{body}");
    assert!(outputs(&body)["report"].as_str().unwrap().contains("\"status\":\"ok\""));
    // The allowance does not widen what the tool declared.
    let (status, body) =
        allowed.invoke("call_undeclared_host", &[("url", json!(format!("{}/health", allowed.base)))]).await;
    assert_eq!((status, error_code(&body)), (422, "outbound_denied"));
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

/// A call's store is dropped (its pool slot reset) once its answer is
/// written, and its place on the server given back after the store
/// (`runtime::teardown`): with one instance, calls in a row from two
/// connections are each answered, or refused for want of a place, never
/// refused by a pool with no slot for a call that got a place; calls
/// pipelined on one connection are all answered.
#[tokio::test(flavor = "multi_thread")]
async fn one_instance_serves_calls_in_a_row_from_two_connections() {
    let server = Server::start(&["--max-instances", "1"]);
    server.lift_rate().await;
    let url = format!("{}/tools/{}:invoke", server.base, server.tool_id("echo").await);
    let body = invocation("echo", &[("text", json!("in a row"))]);
    let caller = |n: usize| {
        // A client of its own: its calls keep to one connection.
        let client = reqwest::Client::new();
        let (url, body) = (url.clone(), body.clone());
        async move {
            let (mut answered, mut no_place) = (0, 0);
            for _ in 0..n {
                let answer = client.post(&url).bearer_auth(TOKEN).json(&body).send().await.unwrap();
                let status = answer.status().as_u16();
                let answer: Value = answer.json().await.unwrap();
                match status {
                    200 => {
                        assert_eq!(outputs(&answer)["text"], "in a row");
                        answered += 1;
                    }
                    503 if answer["error"]["message"]
                        .as_str()
                        .is_some_and(|m| m.starts_with("the server is running")) =>
                    {
                        no_place += 1
                    }
                    _ => panic!("{status} {answer}"),
                }
            }
            (answered, no_place)
        }
    };
    let ((a, a_refused), (b, b_refused)) = tokio::join!(caller(300), caller(300));
    assert!(a > 0 && b > 0, "both connections were answered: {a} and {b} (refused {a_refused} and {b_refused})");

    // Pipelined on one connection: hyper reads the next request in the
    // poll that answered the last, and the last call's place is given back
    // before the next call asks for one. Every call is answered.
    let host = server.base.trim_start_matches("http://").to_string();
    let path = url.trim_start_matches(&server.base).to_string();
    let body = body.to_string();
    let answers = tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(&host).unwrap();
        stream.set_read_timeout(Some(std::time::Duration::from_secs(20))).unwrap();
        let requests: String = (0..5)
            .map(|i| {
                let connection = if i == 4 { "close" } else { "keep-alive" };
                format!(
                    "POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {TOKEN}\r\n\
                     Content-Type: application/json\r\nContent-Length: {}\r\nConnection: {connection}\r\n\r\n{body}",
                    body.len()
                )
            })
            .collect();
        stream.write_all(requests.as_bytes()).unwrap();
        let mut answers = String::new();
        stream.read_to_string(&mut answers).unwrap();
        answers
    })
    .await
    .unwrap();
    assert_eq!(answers.matches("HTTP/1.1 200 OK").count(), 5, "{answers}");
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
    let summary: Vec<&str> = logs.lines().filter(|l| l.contains("the tool logs more than it may: ")).collect();
    assert_eq!(summary.len(), 1, "one summary line: {summary:#?}");
    // Every line not logged is counted, all of them for the rate limit (the
    // tool stays within a call's bytes).
    let counts = summary[0].split("the tool logs more than it may: ").nth(1).unwrap();
    let dropped: usize = counts.split(' ').next().unwrap().parse().unwrap();
    assert!(dropped + lines >= 20000, "{}", summary[0]);
    assert!(counts.contains(&format!("({dropped} over the rate limit, 0 over")), "{}", summary[0]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_may_ask_for_a_tighter_deadline_than_the_operators() {
    // slow_sleep's plinth.toml asks for 1.5 s; the operator allows 3 s.
    let (server, _dir) = sandbox(&[]);
    let (status, body) = server.invoke("slow_sleep", &[("millis", json!(2500))]).await;
    assert_eq!((status, error_code(&body)), (504, "tool_timeout"));
    assert_eq!(body["error"]["message"], "the tool did not finish within 1.5s", "it was waiting, not computing");
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
    assert_eq!((status, error_code(&body)), (422, "outbound_denied"), "{body}");
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

/// A server with these fixtures (packed file names, in the default tenant)
/// and echo in a second tenant, `bystander`. Returns the server, its plugins
/// dir, and the path that invokes the bystander's echo.
async fn with_bystander(fixtures: &[&str], extra: &[&str]) -> (Server, tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    for name in fixtures {
        std::fs::write(dir.path().join(name), fixture(name)).unwrap();
    }
    let mut args = vec!["--plugins", dir.path().to_str().unwrap()];
    args.extend_from_slice(extra);
    let server = Server::start_in(tempfile::tempdir().unwrap(), &args);
    server.create_tenant("bystander", json!({})).await;
    let (status, deployed) =
        server.deploy_as(TOKEN, "bystander", std::fs::read(plugins_dir().join("echo.wasm")).unwrap()).await;
    assert_eq!(status, 201, "{deployed}");
    let id = deployed["toolId"].as_str().unwrap_or_else(|| panic!("no toolId in {deployed}"));
    (server, dir, format!("/t/bystander/tools/{id}:invoke"))
}

/// Invokes `tool` in the default tenant while the bystander tenant's echo is
/// called: returns the tool's answer once echo has answered correctly.
async fn alongside_bystander(server: &Server, echo: &str, tool: &str, params: &[(&str, Value)]) -> (u16, Value) {
    let id = server.tool_id(tool).await;
    let (path, call) = (format!("/tools/{id}:invoke"), invocation(tool, params));
    let echo_call = invocation("echo", &[("text", json!("unaffected"))]);
    let bad = server.post(&path, &call);
    let good = server.post(echo, &echo_call);
    let (bad, (status, body)) = tokio::join!(bad, good);
    assert_eq!(status, 200, "the other tenant's echo while {tool} ran: {body}");
    assert_eq!(outputs(&body)["text"], "unaffected");
    bad
}

#[tokio::test(flavor = "multi_thread")]
async fn refused_requests_spend_the_budget_and_are_logged_once() {
    let (server, _dir, echo) = with_bystander(&["outbound_flood.wasm"], &["--outbound-max-requests", "20"]).await;
    // The tool declares api.example.com only; it aims 5000 requests at the
    // server itself and ignores every refusal.
    let target = format!("{}/health", server.base);
    let authority = target.trim_start_matches("http://").trim_end_matches("/health").to_string();
    let (status, body) =
        alongside_bystander(&server, &echo, "outbound_flood", &[("url", json!(target)), ("times", json!(5000))]).await;
    assert_eq!((status, error_code(&body)), (422, "outbound_denied"), "{body}");
    assert_eq!(
        body["error"]["message"],
        "the tool tried to reach what it may not: more than 20 outbound requests in one invocation"
    );

    // One line for all 5000, naming the first refusal.
    let logs = server.logs();
    let about: Vec<&str> = logs.lines().filter(|l| l.contains("outbound request")).collect();
    assert_eq!(about.len(), 1, "{about:#?}");
    assert!(
        about[0].contains(&format!(
            "5000 outbound requests refused (first: `{authority}` is not among the hosts the tool declares)"
        )),
        "{}",
        about[0]
    );
    assert!(logs.lines().count() < 50, "{logs}");

    // The budget is per invocation: the next call starts afresh.
    let (status, body) = server.invoke("outbound_flood", &[("url", json!(target)), ("times", json!(3))]).await;
    assert_eq!((status, error_code(&body)), (422, "outbound_denied"), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("is not among the hosts the tool declares"), "{body}");
    assert_eq!(server.logs().matches("3 outbound requests refused").count(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_flooding_logger_is_cut_short_and_summed_up() {
    let (server, _dir, echo) = with_bystander(&["log_flood.wasm"], &[]).await;
    let before = server.logs().len();
    let params = [("line_bytes", json!(4_000_000)), ("lines", json!(5000)), ("stdout_lines", json!(2000))];
    let (status, body) = alongside_bystander(&server, &echo, "log_flood", &params).await;
    assert_eq!(status, 200, "{body}");
    let logs = server.logs();
    let call = &logs[before..];

    // The 4 MB line is cut at 4 KiB, with a marker saying how much is gone.
    let huge: Vec<&str> = call.lines().filter(|l| l.contains("huge line ")).collect();
    assert_eq!(huge.len(), 1);
    let kept = "huge line ".len() + huge[0].split("huge line ").nth(1).unwrap().matches('x').count();
    assert_eq!(kept, 4096, "{}", &huge[0][..200]);
    assert!(huge[0].contains(&format!("… [truncated: {} more bytes]", 4_000_010 - 4096)), "{}", &huge[0][4000..]);

    // The call's log is bounded (64 KiB of tool text, plus labels), whatever
    // the tool wrote (over 9 MB), and what was dropped is counted in one line.
    assert!(call.len() < 128 * 1024, "{} bytes logged", call.len());
    let flood = call.lines().filter(|l| l.contains("flood line ")).count();
    assert!((50..70).contains(&flood), "{flood} lines of 1 KB");
    let summary: Vec<&str> = call.lines().filter(|l| l.contains("the tool logs more than it may")).collect();
    assert_eq!(summary.len(), 1, "{summary:#?}");
    // Every line the tool wrote was either logged or counted as dropped.
    let dropped = summary[0].split("the tool logs more than it may: ").nth(1).unwrap();
    let dropped: usize = dropped.split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap();
    let stdout = call.lines().filter(|l| l.contains("[stdout] stdout flood")).count();
    // stdout keeps its first 16 KiB: 76 lines of 214 bytes and a piece.
    assert_eq!(1 + flood + stdout + dropped, 1 + 5000 + 77, "{}", summary[0]);
    assert!(summary[0].contains("0 over the rate limit"), "{}", summary[0]);
}

/// Builds and packs `tests/wat/two-memories` (a core module with two linear
/// memories, which no Rust toolchain emits): the `.wat` source, the tool's
/// WIT world embedded, made a component, then `plinth pack`ed.
fn two_memories(out: &std::path::Path) {
    let crate_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/wat/two-memories");
    let mut module = wat::parse_file(crate_dir.join("two_memories.wat")).unwrap();
    let mut resolve = wit_parser::Resolve::default();
    let (package, _) = resolve.push_path(crate_dir.join("wit")).unwrap();
    let world = resolve.select_world(&[package], None).unwrap();
    wit_component::embed_component_metadata(&mut module, &resolve, world, wit_component::StringEncoding::UTF8).unwrap();
    let component =
        wit_component::ComponentEncoder::default().module(&module).unwrap().validate(true).encode().unwrap();
    let built = out.with_extension("component.wasm");
    std::fs::write(&built, component).unwrap();
    let packed = std::process::Command::new(crate::support::plinth_bin())
        .arg("pack")
        .arg(&crate_dir)
        .arg("--wasm")
        .arg(&built)
        .arg("-o")
        .arg(out)
        .output()
        .unwrap();
    assert!(packed.status.success(), "{}", String::from_utf8_lossy(&packed.stderr));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_memory_limit_holds_for_the_instance_not_each_memory() {
    let plugins = tempfile::tempdir().unwrap();
    two_memories(&plugins.path().join("two_memories.wasm"));
    std::fs::copy(plugins_dir().join("echo.wasm"), plugins.path().join("echo.wasm")).unwrap();
    for allocator in ["pooling", "on-demand"] {
        let args = ["--plugins", plugins.path().to_str().unwrap(), "--max-memory-mib", "32", "--allocator", allocator];
        let server = Server::start_in(tempfile::tempdir().unwrap(), &args);
        // 2 × 12.6 MiB: within the 32 MiB, together.
        let (status, body) = server.invoke("two_memories", &[("pages", json!(200))]).await;
        assert_eq!(status, 200, "{allocator}: {body}");
        // 2 × 25 MiB: each memory is under 32 MiB, the instance is not.
        let (status, body) = alongside_echo(&server, "two_memories", "pages", json!(400)).await;
        assert_eq!((status, error_code(&body)), (422, "tool_resource_exhausted"), "{allocator}: {body}");
        assert_eq!(body["error"]["message"], "the tool ran out of memory", "{allocator}");
    }
}

/// A TCP listener on 127.0.0.1 that keeps the first bytes of every
/// connection it accepts (a TLS ClientHello, for HTTPS).
fn recording_listener() -> (u16, std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            stream.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
            let mut first = vec![0; 4096];
            let n = std::io::Read::read(&mut stream, &mut first).unwrap_or(0);
            first.truncate(n);
            record.lock().unwrap().push(first);
            // Closing the connection fails the handshake.
        }
    });
    (port, seen)
}

#[tokio::test(flavor = "multi_thread")]
async fn https_to_a_name_that_resolves_internal_is_refused_before_connecting() {
    let (port, seen) = recording_listener();
    // call_loopback declares `localhost`; the operator does not allow
    // loopback, so the name is refused once resolved, before any connection.
    let (server, _dir) = sandbox(&[]);
    for url in [format!("https://localhost:{port}/"), format!("http://localhost:{port}/")] {
        let (status, body) = alongside_echo(&server, "call_loopback", "url", json!(url)).await;
        assert_eq!((status, error_code(&body)), (422, "outbound_denied"), "{url}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert_eq!(
            message,
            format!(
                "the tool tried to reach what it may not: `localhost:{port}` resolves to an address on the host's own or a private network, \
                 which the operator does not allow"
            ),
            "the address itself is not told"
        );
    }
    assert!(seen.lock().unwrap().is_empty(), "something connected to the listener");

    // Where the operator allows loopback, the same request connects — to
    // the address that was checked — and presents the name for TLS.
    let (allowed, _dir) = sandbox(&["--allow-private-cidr", "127.0.0.0/8"]);
    let (status, body) = allowed.invoke("call_loopback", &[("url", json!(format!("https://localhost:{port}/")))]).await;
    assert_eq!((status, error_code(&body)), (503, "tool_error"), "the handshake fails: {body}");
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0][0], 0x16, "a TLS handshake record");
    assert!(seen[0].windows(b"localhost".len()).any(|w| w == b"localhost"), "SNI names the host");
}

/// The A2T draft: a 5xx is temporary and an executor retries it; anything
/// else it shows the LLM. So a failure that repeats on every retry is never
/// a 5xx, and a temporary one always says when to retry (docs/a2t.md,
/// "Status codes"). A tool's own `can-retry` error: `weather.rs`.
#[tokio::test(flavor = "multi_thread")]
async fn permanent_failures_are_not_5xx_and_temporary_ones_say_when_to_retry() {
    let (server, _dir) = sandbox(&["--deadline-ms", "1000", "--max-concurrency-per-tool", "1"]);
    let retry_after = |response: &reqwest::Response| {
        response.headers().get("retry-after").map(|v| v.to_str().unwrap().parse::<u64>().unwrap())
    };
    let call = |tool: &'static str, param: &'static str, value: Value| {
        let server = &server;
        async move {
            let id = server.tool_id(tool).await;
            let request = server.request(reqwest::Method::POST, &format!("/tools/{id}:invoke"));
            request.json(&invocation(tool, &[(param, value)])).send().await.unwrap()
        }
    };

    // Permanent for this input: the same call fails the same way again.
    let undeclared = json!(format!("{}/health", server.base));
    for (tool, param, value, code) in [
        ("panic_at_once", "note", json!("x"), "tool_trapped"),
        ("deep_recursion", "note", json!("x"), "tool_trapped"),
        ("memory_bomb", "note", json!("x"), "tool_resource_exhausted"),
        ("huge_output", "megabytes", json!(8), "output_too_large"),
        ("call_undeclared_host", "url", undeclared, "outbound_denied"),
        ("spin_forever", "note", json!("x"), "tool_timeout"),
    ] {
        let response = call(tool, param, value).await;
        let (status, wait) = (response.status().as_u16(), retry_after(&response));
        let body: Value = response.json().await.unwrap();
        assert_eq!((status, error_code(&body), wait), (422, code, None), "{tool}: {body}");
    }

    // Temporary: a slow backend (here a sleep) at the deadline...
    let response = call("slow_sleep", "millis", json!(1300)).await;
    let (status, wait) = (response.status().as_u16(), retry_after(&response));
    let body: Value = response.json().await.unwrap();
    assert_eq!((status, error_code(&body), wait), (504, "tool_timeout", Some(1)), "{body}");

    // ...no free slot: of two calls at once with one slot, one is refused...
    let (first, second) =
        tokio::join!(call("slow_sleep", "millis", json!(600)), call("slow_sleep", "millis", json!(600)));
    let refused = if first.status() == 503 { first } else { second };
    let (status, wait) = (refused.status().as_u16(), retry_after(&refused));
    let body: Value = refused.json().await.unwrap();
    assert_eq!((status, error_code(&body), wait), (503, "busy", Some(1)), "{body}");

    // ...and the tenant over its invocation rate: 503, not 429, which the
    // draft's executor would give up on.
    let slow = json!({ "quotas": { "invocationsPerSecond": 1, "invocationBurst": 1 } });
    let (status, _) = server.call_as(Some(TOKEN), reqwest::Method::PATCH, "/admin/tenants/default", Some(&slow)).await;
    assert_eq!(status, 200);
    let (first, second) = (call("echo", "text", json!("a")).await, call("echo", "text", json!("b")).await);
    assert_eq!(first.status(), 200);
    let (status, wait) = (second.status().as_u16(), retry_after(&second));
    let body: Value = second.json().await.unwrap();
    assert_eq!((status, error_code(&body), wait), (503, "rate_limited", Some(1)), "{body}");
}

/// One of the server's threads: its name, the CPUs it may run on
/// (`Cpus_allowed_list`), its policy (`sched(7)`) and the time slice it
/// asked for (ns; 0: the default), from `/proc/PID/task/*/status` and
/// `sched_getattr`.
struct ServerThread {
    name: String,
    cpus: String,
    policy: i32,
    slice: u64,
}

fn server_threads(pid: u32) -> Vec<ServerThread> {
    let mut threads = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        let Ok(status) = std::fs::read_to_string(task.path().join("status")) else { continue };
        let field = |key: &str| status.lines().find_map(|l| l.strip_prefix(key)).map(|v| v.trim().to_string());
        let tid: i32 = task.file_name().to_str().unwrap().parse().unwrap();
        let Some((policy, slice)) = plinth::cpu_policy::scheduling_of(tid) else { continue };
        let (name, cpus) = (field("Name:").unwrap(), field("Cpus_allowed_list:").unwrap());
        threads.push(ServerThread { name, cpus, policy, slice: slice.as_nanos() as u64 });
    }
    threads
}

/// The policy an operator starts the server at stands, on every thread,
/// while it serves requests and runs tools: asking for the HTTP threads'
/// short slices (host/src/cpu_policy.rs) once moved them to `SCHED_OTHER`,
/// out of `SCHED_BATCH`, and as root out of `SCHED_IDLE`, above the rest
/// of a server the operator had put below every other process. Under
/// `SCHED_BATCH` the costly tools' threads may go lower, to `SCHED_IDLE`,
/// and come back to `SCHED_BATCH`, never to `SCHED_OTHER`.
#[tokio::test(flavor = "multi_thread")]
async fn the_scheduling_policy_the_server_was_started_at_stands_on_every_thread() {
    for policy in [libc::SCHED_BATCH, libc::SCHED_IDLE] {
        let batch = policy == libc::SCHED_BATCH;
        // A process starts at the policy of the thread that started it.
        let (server, _dir) = std::thread::spawn(move || {
            let param = libc::sched_param { sched_priority: 0 };
            // SAFETY: sets the calling thread's own policy from a parameter it owns.
            assert_eq!(unsafe { libc::sched_setscheduler(0, policy, &param) }, 0, "{policy}");
            if batch {
                sandbox(&["--deadline-ms", "300"])
            } else {
                // Echo alone: at SCHED_IDLE, the server gets only the CPU
                // time the rest of a loaded test machine leaves.
                let dir = tempfile::tempdir().unwrap();
                std::fs::copy(plugins_dir().join("echo.wasm"), dir.path().join("echo.wasm")).unwrap();
                (Server::start_in(tempfile::tempdir().unwrap(), &["--plugins", dir.path().to_str().unwrap()]), dir)
            }
        })
        .join()
        .unwrap();
        // The HTTP threads settle when they first park; a loop that runs to
        // its deadline makes its tool costly.
        if batch {
            let (status, body) = alongside_echo(&server, "spin_forever", "note", json!("x")).await;
            assert_eq!((status, error_code(&body)), (422, "tool_timeout"), "{body}");
        }
        for _ in 0..20 {
            let (status, _) = server.invoke("echo", &[("text", json!("hi"))]).await;
            assert_eq!(status, 200);
        }
        let threads: Vec<(String, i32)> =
            server_threads(server.pid()).into_iter().map(|t| (t.name, t.policy)).collect();
        assert!(threads.len() > 4, "{threads:?}");
        let below = |name: &str, p: i32| batch && p == libc::SCHED_IDLE && name.starts_with("plinth-tool-cos");
        let moved: Vec<_> = threads.iter().filter(|(name, p)| *p != policy && !below(name, *p)).collect();
        assert!(moved.is_empty(), "started at policy {policy}, these threads moved: {moved:?}");
    }
}

/// The threads serving HTTP are pinned one per CPU with 100 µs slices
/// (host/src/cpu_policy.rs), unless the operator leaves them free
/// (`--http-threads-free`, for a machine shared with other busy processes).
#[tokio::test(flavor = "multi_thread")]
async fn the_http_threads_are_pinned_one_per_cpu_unless_the_operator_leaves_them_free() {
    const SHORT: u64 = 100_000;
    let cpus = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:").map(|v| v.trim().to_string()))
        .unwrap();
    let count = |list: &str| -> usize {
        list.split(',')
            .map(|range| match range.split_once('-') {
                Some((a, b)) => b.parse::<usize>().unwrap() - a.parse::<usize>().unwrap() + 1,
                None => 1,
            })
            .sum()
    };
    let one_per_cpu = count(&cpus) > 1 && std::thread::available_parallelism().unwrap().get() == count(&cpus);
    for free in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(plugins_dir().join("echo.wasm"), dir.path().join("echo.wasm")).unwrap();
        let mut args = vec!["--plugins", dir.path().to_str().unwrap()];
        if free {
            args.push("--http-threads-free");
        }
        let server = Server::start_in(tempfile::tempdir().unwrap(), &args);
        // Workers settle when they first park: any request will do.
        for _ in 0..20 {
            let (status, _) = server.invoke("echo", &[("text", json!("hi"))]).await;
            assert_eq!(status, 200);
        }
        let threads: Vec<(String, u64)> = server_threads(server.pid())
            .into_iter()
            .filter(|t| t.name == "tokio-rt-worker")
            .map(|t| (t.cpus, t.slice))
            .collect();
        assert!(!threads.is_empty(), "no HTTP threads found");
        let pinned: Vec<_> = threads.iter().filter(|(on, _)| *on != cpus).collect();
        if free {
            assert!(pinned.is_empty(), "left free, yet pinned: {threads:?} (the process: {cpus})");
            assert!(threads.iter().all(|(_, slice)| *slice != SHORT), "left free, yet short slices: {threads:?}");
        } else if one_per_cpu {
            let mut on: Vec<&str> = pinned.iter().map(|(on, _)| on.as_str()).collect();
            on.sort_unstable();
            on.dedup();
            assert_eq!((pinned.len(), on.len()), (count(&cpus), count(&cpus)), "one per CPU: {threads:?}");
            assert!(pinned.iter().all(|(_, slice)| [0, SHORT].contains(slice)), "{threads:?}");
        } else {
            println!("SKIPPED the pinned half: {cpus} allowed, and not one worker per CPU here");
        }
    }
}
