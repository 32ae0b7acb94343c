//! The vendor's console: a tenant's publisher sees its tools' calls and log
//! lines, live (`plinth logs --follow`, server-sent events) and recent
//! (`GET /admin/logs`), with secrets redacted; nobody else sees them.

use crate::support::{Server, TOKEN, fixture, plinth_bin, plugins_dir};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The secret `use_secret` logs, which must never be shown.
pub const SECRET: &str = "console-secret-7f3a9";

/// A server with echo, `use_secret` (logs its secret, succeeds or fails
/// on request) and `panic_at_once` (traps), and the secret stored.
pub async fn console_server(extra: &[&str]) -> (Server, tempfile::TempDir) {
    let plugins = tempfile::tempdir().unwrap();
    std::fs::copy(plugins_dir().join("echo.wasm"), plugins.path().join("echo.wasm")).unwrap();
    std::fs::copy(
        plugins_dir().join("lookup_weather_by_city.wasm"),
        plugins.path().join("lookup_weather_by_city.wasm"),
    )
    .unwrap();
    for name in ["use_secret.wasm", "panic_at_once.wasm", "call_undeclared_host.wasm"] {
        std::fs::write(plugins.path().join(name), fixture(name)).unwrap();
    }
    let mut args = vec!["--plugins", plugins.path().to_str().unwrap()];
    args.extend_from_slice(extra);
    let server = Server::start_in(tempfile::tempdir().unwrap(), &args);
    let stored = server.request(reqwest::Method::PUT, "/admin/secrets/api-key").body(SECRET).send().await.unwrap();
    assert_eq!(stored.status(), 204);
    (server, plugins)
}

/// `plinth logs --follow` running, its lines arriving on a channel.
struct Follow {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Follow {
    fn start(server: &Server, args: &[&str]) -> Follow {
        let mut child = Command::new(plinth_bin())
            .args(["logs", "--follow", "--server", &server.base, "--key", TOKEN])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Follow { child, lines }
    }

    /// The next call line that contains `wanted`, and the lines printed
    /// under it, within `within`.
    fn expect(&self, wanted: &str, within: Duration) -> Vec<String> {
        let deadline = Instant::now() + within;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("`{wanted}` not shown within {within:?}; shown:\n{}", seen.join("\n")));
            if line.contains(wanted) {
                let mut block = vec![line];
                // The call's log lines follow it at once.
                while let Ok(more) = self.lines.recv_timeout(Duration::from_millis(200)) {
                    if !more.starts_with("    ") {
                        break;
                    }
                    block.push(more);
                }
                return block;
            }
            seen.push(line);
        }
    }
}

impl Drop for Follow {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_publisher_follows_its_calls_from_every_door_with_their_lines_and_no_secret() {
    let (server, _plugins) = console_server(&[]).await;
    let follow = Follow::start(&server, &[]);
    // The tail is open once the server counts it (it prints nothing before the first call).
    std::thread::sleep(Duration::from_millis(500));

    let (status, _) = server.invoke("use_secret", &[("log_lines", json!(1)), ("fail", json!(false))]).await;
    assert_eq!(status, 200);
    let block = follow.expect("use_secret v1  a2t  ok", Duration::from_secs(1));
    let shown = block.join("\n");
    assert!(shown.contains("[info] the api key is [redacted]"), "{shown}");
    assert!(shown.contains("[debug] chatty line 0"), "{shown}");
    assert!(!shown.contains(SECRET), "{shown}");

    let tools = server.request(reqwest::Method::GET, "/otc/tools").send().await.unwrap().json::<Value>().await.unwrap();
    let otc_id =
        tools["tools"].as_array().unwrap().iter().find(|t| t["name"].as_str().unwrap().contains("UseSecret")).unwrap()
            ["id"]
            .as_str()
            .unwrap()
            .to_string();
    let answer = crate::otc::call(
        &server,
        "/otc/tools/call",
        &crate::otc::request(&otc_id, json!({"log_lines": 0, "fail": true})),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let block = follow.expect("use_secret v1  otc  tool_error", Duration::from_secs(1));
    assert!(!block.join("\n").contains(SECRET), "{block:?}");

    let mcp = crate::mcp::Mcp::modern(&server);
    mcp.call("echo", json!({"text": "hello"}), Value::Null).await;
    follow.expect("echo v1  mcp  ok", Duration::from_secs(1));

    let (status, _) = server.invoke("panic_at_once", &[("note", json!("x"))]).await;
    assert_eq!(status, 422);
    follow.expect("panic_at_once v1  a2t  tool_trapped", Duration::from_secs(1));

    // The same calls, recent, newest first; filtered by outcome and level.
    let (status, page) = server.get("/admin/logs").await;
    assert_eq!(status, 200, "{page}");
    let outcomes: Vec<&str> =
        page["items"].as_array().unwrap().iter().map(|e| e["outcome"].as_str().unwrap()).collect();
    assert_eq!(outcomes, ["tool_trapped", "ok", "tool_error", "ok"], "{page}");
    assert_eq!(page["items"][3]["door"], "a2t");
    assert_eq!(page["retentionMinutes"], 60);
    assert!(!page.to_string().contains(SECRET), "no secret in any answer: {page}");
    for leak in ["hello", "endUser", "inputs", "outputs"] {
        assert!(!page.to_string().contains(leak), "no inputs, outputs or end users: `{leak}` in {page}");
    }
    let (_, failures) = server.get("/admin/logs?outcome=tool_error,tool_trapped&level=warn").await;
    let items = failures["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{failures}");
    assert!(items.iter().all(|e| e["lines"].as_array().unwrap().iter().all(|l| l["level"] != "info")), "{failures}");
    let (_, one) = server.get("/admin/logs?tool=use_secret&limit=1").await;
    assert_eq!((one["items"].as_array().unwrap().len(), one["items"][0]["outcome"].as_str()), (1, Some("tool_error")));
    let before = one["next"].as_str().unwrap();
    let (_, older) = server.get(&format!("/admin/logs?tool=use_secret&before={before}")).await;
    assert_eq!(older["items"][0]["outcome"], "ok", "{older}");
    assert!(!server.logs().is_empty());

    // A publisher's catalog page of the tool lists its recent failures with
    // their lines; a consumer's does not.
    let (_, publisher) = server.create_key(Some("default"), "publisher").await;
    let (_, consumer) = server.create_key(Some("default"), "consumer").await;
    let designer = crate::catalog::Designer::sign_in(&server.base, &publisher).await;
    let page = crate::catalog::tool_path(&designer, "use_secret").await;
    let (status, html) = designer.get(&page).await;
    assert_eq!(status, 200, "{html}");
    let failures = html.split("id=\"failures-heading\"").nth(1).unwrap_or_else(|| panic!("{html}"));
    let failures = failures.split("</section>").next().unwrap();
    assert!(failures.contains("tool_error") && failures.contains("otc"), "{failures}");
    assert!(failures.contains("the api key is [redacted]") && !html.contains(SECRET), "{failures}");
    let reader = crate::catalog::Designer::sign_in(&server.base, &consumer).await;
    let (_, html) = reader.get(&page).await;
    assert!(!html.contains("Recent failures") && !html.contains("the api key is"), "a consumer sees none of it");

    // The CLI without --follow prints the same calls, oldest first.
    let printed = Command::new(plinth_bin()).args(["logs", "--server", &server.base, "--key", TOKEN]).output().unwrap();
    let printed = String::from_utf8_lossy(&printed.stdout);
    let first = printed.find("use_secret v1  a2t  ok").unwrap();
    let last = printed.find("panic_at_once v1  a2t  tool_trapped").unwrap();
    assert!(first < last && !printed.contains(SECRET), "{printed}");
}

#[tokio::test(flavor = "multi_thread")]
async fn only_the_tenants_publishers_and_operators_see_its_console() {
    let server = Server::start(&["--console-max-tails", "2"]);
    for tenant in ["acme", "globex"] {
        server.create_tenant(tenant, json!({})).await;
    }
    let (_, acme) = server.create_key(Some("acme"), "publisher").await;
    let (_, acme_consumer) = server.create_key(Some("acme"), "consumer").await;
    let (_, globex) = server.create_key(Some("globex"), "publisher").await;
    let echo = std::fs::read(plugins_dir().join("echo.wasm")).unwrap();
    let (status, deployed) = server.deploy_as(&acme, "acme", echo).await;
    assert_eq!(status, 201, "{deployed}");
    let id = deployed["toolId"].as_str().unwrap();
    let call = crate::support::invocation("echo", &[("text", json!("acme's call"))]);
    let (status, _) = server
        .call_as(Some(&acme_consumer), reqwest::Method::POST, &format!("/t/acme/tools/{id}:invoke"), Some(&call))
        .await;
    assert_eq!(status, 200);

    let (status, page) = server.call_as(Some(&acme), reqwest::Method::GET, "/t/acme/admin/logs", None).await;
    assert_eq!((status, page["items"].as_array().unwrap().len()), (200, 1), "{page}");
    let (status, page) = server.call_as(Some(TOKEN), reqwest::Method::GET, "/t/acme/admin/logs", None).await;
    assert_eq!((status, page["items"].as_array().unwrap().len()), (200, 1), "the operator: {page}");
    let (status, page) = server.call_as(Some(&globex), reqwest::Method::GET, "/t/globex/admin/logs", None).await;
    assert_eq!((status, page["items"].as_array().unwrap().len()), (200, 0), "{page}");
    let (status, body) = server.call_as(Some(&globex), reqwest::Method::GET, "/t/acme/admin/logs", None).await;
    assert_eq!(status, 404, "{body}");
    assert!(!body.to_string().contains("echo"), "{body}");
    let (status, _) = server.call_as(Some(&acme_consumer), reqwest::Method::GET, "/t/acme/admin/logs", None).await;
    assert_eq!(status, 403);
    let tail = |key: &str, root: &str| {
        server
            .request_as(Some(key), reqwest::Method::GET, &format!("{root}/admin/logs"))
            .header("accept", "text/event-stream")
            .send()
    };
    assert_eq!(tail(&acme_consumer, "/t/acme").await.unwrap().status(), 403);
    assert_eq!(tail(&globex, "/t/acme").await.unwrap().status(), 404);

    // At most two tails at once; a third is refused, and a closed one frees its place.
    let first = tail(&acme, "/t/acme").await.unwrap();
    let second = tail(&acme, "/t/acme").await.unwrap();
    assert_eq!((first.status(), second.status()), (reqwest::StatusCode::OK, reqwest::StatusCode::OK));
    assert_eq!(first.headers()["content-type"], "text/event-stream");
    let third = tail(&acme, "/t/acme").await.unwrap();
    assert_eq!(third.status(), 429);
    assert_eq!(third.json::<Value>().await.unwrap()["error"]["code"], "too_many_tails");
    assert_eq!(tail(&globex, "/t/globex").await.unwrap().status(), 200, "another tenant's tails count apart");
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let again = tail(&acme, "/t/acme").await.unwrap();
        if again.status() == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "a closed tail never freed its place");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(second);
}

/// Reads server-sent events from `response` until `done` says the events
/// so far are enough (`Ok`), or `within` passes (`Err` with what came).
async fn read_events(
    response: &mut reqwest::Response,
    within: Duration,
    done: impl Fn(&[(String, Value)]) -> bool,
) -> Result<Vec<(String, Value)>, String> {
    let deadline = tokio::time::Instant::now() + within;
    let (mut text, mut events) = (String::new(), Vec::new());
    while !done(&events) {
        let chunk = tokio::time::timeout_at(deadline, response.chunk())
            .await
            .map_err(|_| format!("not enough events within {within:?}: {text}"))?
            .map_err(|e| format!("the stream failed: {e}"))?
            .ok_or_else(|| format!("the stream ended: {text}"))?;
        text.push_str(std::str::from_utf8(&chunk).unwrap());
        while let Some(end) = text.find("\n\n") {
            let block: String = text.drain(..end + 2).collect();
            let field = |name: &str| block.lines().find_map(|l| l.strip_prefix(name)).map(str::to_string);
            if let (Some(name), Some(data)) = (field("event: "), field("data: ")) {
                events.push((name, serde_json::from_str(&data).unwrap()));
            }
        }
    }
    Ok(events)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tail_that_falls_behind_is_told_how_many_calls_it_lost() {
    // The ring keeps one call; sixty end at once, and a tail takes what
    // ended in 25 ms together: unless the calls came more than 25 ms apart
    // each, it must lose some and say so.
    let server = Server::start(&["--console-entries", "1"]);
    let mut tail =
        server.request(reqwest::Method::GET, "/admin/logs").header("accept", "text/event-stream").send().await.unwrap();
    assert_eq!(tail.status(), 200);
    let id = server.tool_id("echo").await;
    let mut calls = tokio::task::JoinSet::new();
    for n in 0..60 {
        let call = server
            .request(reqwest::Method::POST, &format!("/tools/{id}:invoke"))
            .json(&crate::support::invocation("echo", &[("text", json!(format!("call {n}")))]));
        calls.spawn(async move { call.send().await.unwrap().status().as_u16() });
    }
    // More than the tool's 16 at once may be refused as busy (503): a
    // refused call is still a call the console shows.
    let statuses = calls.join_all().await;
    assert!(statuses.iter().all(|s| *s == 200 || *s == 503), "{statuses:?}");

    // Every call is accounted for: shown, or counted as lost.
    let accounted = |events: &[(String, Value)]| {
        events
            .iter()
            .map(|(name, data)| if name == "call" { 1 } else { data["dropped"].as_u64().unwrap_or(0) })
            .sum::<u64>()
    };
    let events = read_events(&mut tail, Duration::from_secs(15), |e| accounted(e) >= 60).await.unwrap();
    let shown = events.iter().filter(|(name, _)| name == "call").count();
    let lost: u64 =
        events.iter().filter(|(name, _)| name == "dropped").map(|(_, d)| d["dropped"].as_u64().unwrap()).sum();
    assert_eq!(
        (shown as u64 + lost, events.len() - shown),
        (60, events.iter().filter(|(n, _)| n == "dropped").count())
    );
    assert!(lost >= 1 && shown >= 1, "{shown} shown, {lost} lost: {events:?}");
    let seqs: Vec<u64> = events.iter().filter(|(n, _)| n == "call").map(|(_, d)| d["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "shown in order, none twice: {seqs:?}");

    // A tail that keeps up loses nothing: one call at a time.
    for n in 0..3 {
        let (status, _) = server.invoke("echo", &[("text", json!(format!("alone {n}")))]).await;
        assert_eq!(status, 200);
        let events = read_events(&mut tail, Duration::from_secs(5), |e| !e.is_empty()).await.unwrap();
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!((events[0].0.as_str(), events[0].1["outcome"].as_str()), ("call", Some("ok")));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn private_inputs_the_end_user_typed_are_redacted_from_the_console() {
    use crate::cheq::{PageSession, call_for, confirming_server};
    let (server, _plugins) = confirming_server(&[]).await;
    let (status, _, pack) = call_for(&server, Some("alice"), "transfer_funds", &[("amount_usd", json!(250))]).await;
    assert_eq!(status, 202, "{pack}");
    // Alice types the accounts on the confirmation page; the tool logs them.
    let session = PageSession::log_in(&pack, "alice").await;
    let private = [("from_account", "DE89370400440532013000"), ("to_account", "GB29NWBK60161331926819")];
    let (status, html) = session.decide_with(&pack, "accept", &private).await;
    assert_eq!(status, 200, "{html}");
    let deadline = Instant::now() + Duration::from_secs(10);
    let ran = loop {
        let (_, page) = server.get("/admin/logs?tool=transfer_funds&outcome=ok").await;
        if let Some(entry) = page["items"].as_array().and_then(|items| items.first().cloned()) {
            break entry;
        }
        assert!(Instant::now() < deadline, "the confirmed call never reached the console: {page}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let lines = ran["lines"].to_string();
    assert!(lines.contains("moving 250 USD from [redacted] to [redacted]"), "{ran}");
    let (_, everything) = server.get("/admin/logs").await;
    for (_, account) in private {
        assert!(!everything.to_string().contains(account), "{everything}");
    }
}

/// The usage item of `tool` through `door` in `usage`, if any.
fn usage_of<'a>(usage: &'a Value, tool: &str, door: &str) -> Option<&'a Value> {
    usage["items"].as_array()?.iter().find(|i| i["tool"] == tool && i["door"] == door)
}

/// Polls `/admin/usage?window=W` until `done` holds, for at most 20 s.
pub async fn usage_until(server: &Server, window: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, usage) = server.get(&format!("/admin/usage?window={window}")).await;
        assert_eq!(status, 200, "{usage}");
        if done(&usage) {
            return usage;
        }
        assert!(Instant::now() < deadline, "usage never showed the calls: {usage}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn usage_counts_each_doors_calls_by_outcome_and_survives_a_restart() {
    let (backend, backend_calls) = crate::otc::weather_backend().await;
    let config = format!("lookup_weather_by_city.backend-url={backend}");
    let args = ["--usage-flush-secs", "1", "--tool-config", &config, "--allow-private-cidr", "127.0.0.0/8"];
    let (server, plugins) = console_server(&args).await;
    for _ in 0..2 {
        let (status, _) = server.invoke("use_secret", &[("log_lines", json!(0)), ("fail", json!(false))]).await;
        assert_eq!(status, 200);
    }
    let (status, _) = server.invoke("use_secret", &[("log_lines", json!(0)), ("fail", json!(true))]).await;
    assert_eq!(status, 422, "A2T answers a tool error 422");
    let (status, _) = server.invoke("panic_at_once", &[("note", json!("x"))]).await;
    assert_eq!(status, 422);
    crate::mcp::Mcp::modern(&server).call("echo", json!({"text": "hi"}), Value::Null).await;
    // Outbound requests: one the policy refuses, and a call whose tool
    // asks its declared backend twice (geocode, forecast).
    let (status, _) = server.invoke("call_undeclared_host", &[("url", json!("http://undeclared.example/"))]).await;
    assert_eq!(status, 422);
    let omaha = json!({ "request": {
        "tool_id": "Weather.LookupWeatherByCity",
        "input": { "city": "Omaha, Nebraska", "units": "FAHRENHEIT" },
    } });
    let weather = crate::otc::call(&server, "/otc/tools/call", &omaha).await;
    assert_eq!(weather.body["result"]["success"], true, "{}", weather.body);
    assert_eq!(backend_calls.get(), 2);

    let expected = |usage: &Value| {
        usage_of(usage, "use_secret", "a2t").is_some_and(|i| i["calls"] == 3)
            && usage_of(usage, "panic_at_once", "a2t").is_some()
            && usage_of(usage, "echo", "mcp").is_some()
            && usage_of(usage, "call_undeclared_host", "a2t").is_some()
            && usage_of(usage, "lookup_weather_by_city", "otc").is_some()
    };
    let usage = usage_until(&server, "hour", expected).await;
    let use_secret = usage_of(&usage, "use_secret", "a2t").unwrap();
    assert_eq!(use_secret["outcomes"], json!({ "ok": 2, "tool_error": 1 }), "{usage}");
    assert!(use_secret["latencyMs"]["p50"].as_f64().unwrap() > 0.0, "{usage}");
    assert!(use_secret["latencyMs"]["p99"].as_f64().unwrap() >= use_secret["latencyMs"]["p50"].as_f64().unwrap());
    let series = use_secret["series"].as_array().unwrap();
    assert_eq!(series.iter().map(|p| p["calls"].as_u64().unwrap()).sum::<u64>(), 3, "{usage}");
    assert_eq!(series.iter().map(|p| p["failures"].as_u64().unwrap()).sum::<u64>(), 1, "{usage}");
    assert_eq!(usage_of(&usage, "panic_at_once", "a2t").unwrap()["outcomes"], json!({ "tool_trapped": 1 }));
    assert_eq!(usage_of(&usage, "echo", "mcp").unwrap()["outcomes"], json!({ "ok": 1 }));
    assert_eq!(usage_of(&usage, "echo", "mcp").unwrap()["outbound"], json!([]));
    assert_eq!(
        usage_of(&usage, "call_undeclared_host", "a2t").unwrap()["outbound"],
        json!([{ "host": "undeclared", "status": "denied", "requests": 1 }]),
        "{usage}"
    );
    assert_eq!(
        usage_of(&usage, "lookup_weather_by_city", "otc").unwrap()["outbound"],
        json!([{ "host": "${config.backend-url}", "status": "2xx", "requests": 2 }]),
        "{usage}"
    );
    assert_eq!(usage["bucketSeconds"], 60);
    let (_, week) = server.get("/admin/usage?window=week&tool=use_secret").await;
    assert_eq!(week["items"].as_array().unwrap().len(), 1, "{week}");
    assert_eq!(week["items"][0]["calls"], 3);
    let (status, _) = server.get("/admin/usage?window=year").await;
    assert_eq!(status, 400);

    // A publisher's catalog page of the tool charts its last hour; a consumer's does not.
    let (_, publisher) = server.create_key(Some("default"), "publisher").await;
    let (_, consumer) = server.create_key(Some("default"), "consumer").await;
    let designer = crate::catalog::Designer::sign_in(&server.base, &publisher).await;
    let page = crate::catalog::tool_path(&designer, "use_secret").await;
    let (_, html) = designer.get(&page).await;
    assert!(html.contains("<p id=\"usage-summary\">3 calls, 1 failed.</p>"), "{html}");
    let chart = html.split("id=\"usage-chart\"").nth(1).unwrap().split("</svg>").next().unwrap();
    // One bar per minute (the calls may straddle two), failures drawn over them.
    assert!(
        chart.contains(" UTC: ") && chart.contains("<rect class=\"calls\"") && chart.contains("<rect class=\"failed\""),
        "{chart}"
    );
    assert!(!html.contains(" style="), "no inline style: the page's CSP stays strict");
    let weather_page = crate::catalog::tool_path(&designer, "lookup_weather_by_city").await;
    let (_, html) = designer.get(&weather_page).await;
    let table = html.split("<table id=\"usage-outbound\"").nth(1).unwrap_or_else(|| panic!("{html}"));
    assert!(table.contains("<tr><td><code>${config.backend-url}</code></td><td>2xx</td><td>2</td></tr>"), "{table}");
    let reader = crate::catalog::Designer::sign_in(&server.base, &consumer).await;
    let (_, html) = reader.get(&page).await;
    assert!(!html.contains("usage-chart"), "a consumer sees no usage");

    // After a restart the counts are read from the store.
    let plugins_dir = plugins.path().to_str().unwrap().to_string();
    let server = Server::start_in(server.stop(), &["--plugins", &plugins_dir, "--usage-flush-secs", "3600"]);
    let (_, again) = server.get("/admin/usage?window=hour").await;
    assert_eq!(
        usage_of(&again, "use_secret", "a2t").unwrap()["outcomes"],
        json!({ "ok": 2, "tool_error": 1 }),
        "{again}"
    );
    // A graceful stop writes what it counted since its last flush (an
    // hour away here).
    let (status, _) = server.invoke("use_secret", &[("log_lines", json!(0)), ("fail", json!(false))]).await;
    assert_eq!(status, 200);
    let server = Server::start_in(server.terminate(), &["--plugins", &plugins_dir]);
    let (_, again) = server.get("/admin/usage?window=hour").await;
    assert_eq!(
        usage_of(&again, "use_secret", "a2t").unwrap()["outcomes"],
        json!({ "ok": 3, "tool_error": 1 }),
        "{again}"
    );
}
