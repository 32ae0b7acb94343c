//! What an operator sees of the server: `/metrics` and request ids.

use crate::support::*;
use reqwest::Method;
use serde_json::{Value, json};

/// The value of the sample `name{labels}` in a text exposition, if present.
fn sample(text: &str, name: &str, labels: &str) -> Option<f64> {
    let prefix = format!("{name}{{{labels}}} ");
    text.lines().find_map(|line| line.strip_prefix(&prefix)).and_then(|value| value.parse().ok())
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_count_calls_by_tenant_tool_version_door_and_outcome_for_the_operator_only() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(plugins_dir().join("echo.wasm"), dir.path().join("echo.wasm")).unwrap();
    std::fs::write(dir.path().join("panic_at_once.wasm"), fixture("panic_at_once.wasm")).unwrap();
    let server = Server::start_in(tempfile::tempdir().unwrap(), &["--plugins", dir.path().to_str().unwrap()]);

    for _ in 0..3 {
        let (status, _) = server.invoke("echo", &[("text", json!("hi"))]).await;
        assert_eq!(status, 200);
    }
    let (status, _) = server.invoke("panic_at_once", &[("note", json!("x"))]).await;
    assert_eq!(status, 422);
    let (status, answer) = server
        .post("/otc/tools/call", &json!({ "request": { "tool_id": "Default.Echo", "input": { "text": "otc" } } }))
        .await;
    assert_eq!((status, &answer["result"]["success"]), (200, &json!(true)), "{answer}");

    let response = server.request(Method::GET, "/metrics").send().await.unwrap();
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"].to_str().unwrap().to_string();
    assert!(content_type.starts_with("application/openmetrics-text"), "{content_type}");
    let text = response.text().await.unwrap();

    let calls = |tool: &str, door: &str, outcome: &str| {
        let labels = format!(r#"tenant="default",tool="{tool}",version="1",door="{door}",outcome="{outcome}""#);
        sample(&text, "plinth_invocations_total", &labels)
    };
    assert_eq!(calls("echo", "a2t", "ok"), Some(3.0), "{text}");
    assert_eq!(calls("echo", "otc", "ok"), Some(1.0), "{text}");
    assert_eq!(calls("panic_at_once", "a2t", "tool_trapped"), Some(1.0), "{text}");
    let whole = r#"tenant="default",tool="echo",version="1",door="a2t""#;
    assert_eq!(sample(&text, "plinth_invocation_duration_seconds_count", whole), Some(3.0), "{text}");
    let inside = r#"tenant="default",tool="echo",version="1""#;
    assert_eq!(sample(&text, "plinth_tool_duration_seconds_count", inside), Some(4.0), "{text}");
    let invokes = r#"method="POST",route="/tools/{tool_ref}",status="200""#;
    assert_eq!(sample(&text, "plinth_http_requests_total", invokes), Some(3.0), "{text}");
    assert_eq!(sample(&text, "plinth_deploys_total", r#"tenant="default""#), Some(2.0), "{text}");
    assert!(text.lines().any(|line| line == "plinth_instances_in_use 0"), "{text}");
    // Nothing a caller chose becomes a label: no call ids, no keys.
    assert!(!text.contains("call_id") && !text.contains(TOKEN), "{text}");

    // A consumer of the tenant may not read them; nor may anyone without a key.
    let (_, consumer) = server.create_key(Some("default"), "consumer").await;
    let (status, _) = server.call_as(Some(&consumer), Method::GET, "/metrics", None).await;
    assert_eq!(status, 403);
    let (status, _) = server.call_as(None, Method::GET, "/metrics", None).await;
    assert_eq!(status, 401);
    let (status, _) = server.call_as(Some(TOKEN), Method::GET, "/t/default/metrics", None).await;
    assert_eq!(status, 404, "the server's metrics are not under a tenant's root");
}

#[tokio::test(flavor = "multi_thread")]
async fn every_answer_carries_a_request_id_that_its_log_lines_carry_too() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("panic_at_once.wasm"), fixture("panic_at_once.wasm")).unwrap();
    let server = Server::start_in(tempfile::tempdir().unwrap(), &["--plugins", dir.path().to_str().unwrap()]);
    let id = server.tool_id("panic_at_once").await;
    let path = format!("/tools/{id}:invoke");

    // The caller's id is kept, and every log line of the call carries it.
    let response = server
        .request(Method::POST, &path)
        .header("x-request-id", "agent-run-42.step-7")
        .json(&invocation("panic_at_once", &[("note", json!("x"))]))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 422);
    assert_eq!(response.headers()["x-request-id"], "agent-run-42.step-7");
    let logs = server.logs();
    let lines: Vec<&str> = logs.lines().filter(|line| line.contains("tool did not return")).collect();
    assert!(!lines.is_empty(), "{logs}");
    assert!(lines.iter().all(|line| line.contains("agent-run-42.step-7")), "{lines:?}");

    // No id, or one that could forge log lines or grow without bound: a new
    // one, different each time, on every kind of answer.
    let mut seen = std::collections::HashSet::new();
    for given in [None, Some("two words"), Some(&*"x".repeat(129)), Some("semi;colon")] {
        let mut request = server.request_as(None, Method::GET, "/tools");
        if let Some(given) = given {
            request = request.header("x-request-id", given);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 401);
        let id = response.headers()["x-request-id"].to_str().unwrap().to_string();
        assert!(Some(id.as_str()) != given && !id.is_empty() && id.len() <= 128, "{id}");
        assert!(seen.insert(id), "request ids are unique");
    }
    let (status, body): (u16, Value) = server.get("/health").await;
    assert_eq!(status, 200, "{body}");
}

/// The Grafana dashboard in `deploy/grafana/` queries only series the
/// server exports: every `plinth_…` name in its queries is a sample name in
/// a real scrape.
#[tokio::test(flavor = "multi_thread")]
async fn the_grafana_dashboard_queries_only_metrics_the_server_exports() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("deploy/grafana/plinth.json")).unwrap()).unwrap();
    let mut queried = std::collections::BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            for (at, _) in expr.match_indices("plinth_") {
                let name: String = expr[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                queried.insert(name);
            }
        }
    }
    assert!(queried.len() >= 6, "{queried:?}");

    // A server that has done one of everything the dashboard shows.
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(plugins_dir().join("echo.wasm"), dir.path().join("echo.wasm")).unwrap();
    std::fs::write(dir.path().join("panic_at_once.wasm"), fixture("panic_at_once.wasm")).unwrap();
    let server = Server::start_in(tempfile::tempdir().unwrap(), &["--plugins", dir.path().to_str().unwrap()]);
    assert_eq!(server.invoke("echo", &[("text", json!("hi"))]).await.0, 200);
    assert_eq!(server.invoke("panic_at_once", &[("note", json!("x"))]).await.0, 422);
    let id = server.tool_id("panic_at_once").await;
    assert_eq!(server.delete(&format!("/admin/tools/{id}/versions/1")).await.0, 200);
    let text = server.request(Method::GET, "/metrics").send().await.unwrap().text().await.unwrap();

    for name in &queried {
        let exported = text.lines().any(|line| {
            line.strip_prefix(name.as_str()).is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        });
        assert!(exported, "the dashboard queries {name}, which /metrics does not export:\n{text}");
    }
}
