//! What an operator sees of the server: `/metrics` and request ids.

use crate::support::*;
use reqwest::Method;
use serde_json::{Value, json};

/// The value of the sample `name{labels}` in a text exposition, if present.
pub fn sample(text: &str, name: &str, labels: &str) -> Option<f64> {
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

    // A server that has done one of everything the dashboard shows: calls
    // that succeed and fail, outbound requests, a CHEQ transaction.
    let dir = tempfile::tempdir().unwrap();
    for plugin in ["echo.wasm", "lookup_weather_by_city.wasm"] {
        std::fs::copy(plugins_dir().join(plugin), dir.path().join(plugin)).unwrap();
    }
    std::fs::write(dir.path().join("panic_at_once.wasm"), fixture("panic_at_once.wasm")).unwrap();
    crate::cheq::pack_with_confirmation("book-flight", crate::cheq::PREMIUM, dir.path()).unwrap();
    let (backend, _) = crate::weather::backend().await;
    let config = format!("lookup_weather_by_city.backend-url={backend}");
    let server = Server::start_in(
        tempfile::tempdir().unwrap(),
        &["--plugins", dir.path().to_str().unwrap(), "--tool-config", &config, "--allow-private-cidr", "127.0.0.0/8"],
    );
    assert_eq!(server.invoke("echo", &[("text", json!("hi"))]).await.0, 200);
    assert_eq!(server.invoke("panic_at_once", &[("note", json!("x"))]).await.0, 422);
    assert_eq!(server.invoke("lookup_weather_by_city", &[("city", json!("Paris"))]).await.0, 200);
    let password = json!({ "password": "alice-password" });
    assert_eq!(server.call_as(Some(TOKEN), Method::PUT, "/admin/end-users/alice", Some(&password)).await.0, 204);
    let booking = crate::cheq::booking("BUSINESS", 1);
    assert_eq!(crate::cheq::call_for(&server, Some("alice"), "book_flight", &booking).await.0, 202);
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

async fn scrape(server: &Server) -> String {
    let response = server.request(Method::GET, "/metrics").send().await.unwrap();
    assert_eq!(response.status(), 200);
    response.text().await.unwrap()
}

/// A tool's outbound requests are counted by the manifest entry that
/// allowed them and how they ended; the host label is the declared one.
#[tokio::test(flavor = "multi_thread")]
async fn outbound_requests_are_counted_by_tool_declared_host_and_status() {
    let (backend, calls) = crate::weather::backend().await;
    let config = format!("lookup_weather_by_city.backend-url={backend}");
    let server = Server::start(&["--tool-config", &config, "--allow-private-cidr", "127.0.0.0/8"]);
    let (status, body) = server.invoke("lookup_weather_by_city", &[("city", json!("Paris"))]).await;
    assert_eq!(status, 200, "{body}");
    // Stormville geocodes, then its forecast answers 503.
    let (status, body) = server.invoke("lookup_weather_by_city", &[("city", json!("Stormville"))]).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(calls.get(), 4);

    let text = scrape(&server).await;
    // The tool declares `${config.backend-url}`: that is the label, never
    // the configured URL (its value is the config's, which could name an
    // internal address, or change at every call to make series without end).
    let labels = |status: &str| {
        format!(r#"tenant="default",tool="lookup_weather_by_city",host="${{config.backend-url}}",status="{status}""#)
    };
    assert_eq!(sample(&text, "plinth_outbound_requests_total", &labels("2xx")), Some(3.0), "{text}");
    assert_eq!(sample(&text, "plinth_outbound_requests_total", &labels("5xx")), Some(1.0), "{text}");
    let host = backend.strip_prefix("http://").unwrap();
    assert!(!text.contains(host), "the configured URL's address is in no label: {text}");
    // Nothing a tool chose (the path, the query, the city) is a label.
    assert!(!text.contains("geocode") && !text.contains("Paris") && !text.contains("Stormville"), "{text}");
}

/// A tool that declares no host at all is counted too when it tries to
/// reach one: an exfiltration attempt is what the series is there to show.
#[tokio::test(flavor = "multi_thread")]
async fn a_tool_that_declares_no_hosts_is_counted_when_it_tries() {
    let server = Server::start(&[]);
    let hostless = with_manifest(&fixture("call_undeclared_host.wasm"), |m| {
        m.as_object_mut().unwrap().remove("allowed-hosts").expect("the fixture declares a host");
    });
    let (status, body) = server.deploy(hostless, "").await;
    assert_eq!(status, 201, "{body}");
    for _ in 0..2 {
        let url = format!("{}/health", server.base);
        let (status, body) = server.invoke("call_undeclared_host", &[("url", json!(url))]).await;
        assert_eq!((status, &body["error"]["code"]), (422, &json!("outbound_denied")), "{body}");
    }
    let text = scrape(&server).await;
    let labels = r#"tenant="default",tool="call_undeclared_host",host="undeclared",status="denied""#;
    assert_eq!(sample(&text, "plinth_outbound_requests_total", labels), Some(2.0), "{text}");
}

/// CHEQ transactions are counted by what happened to them, per tool:
/// opened, accepted (and its call done), rejected, and expired unanswered.
#[tokio::test(flavor = "multi_thread")]
async fn cheq_transactions_are_counted_by_state() {
    use crate::cheq::{PageSession, booking, call_for, confirming_server};
    let (server, _plugins) = confirming_server(&[]).await;
    let (status, _, accepted) = call_for(&server, Some("alice"), "book_flight", &booking("BUSINESS", 1)).await;
    assert_eq!(status, 202, "{accepted}");
    let (status, html) = PageSession::log_in(&accepted, "alice").await.decide(&accepted, "accept").await;
    assert_eq!(status, 200, "{html}");
    let (status, _, rejected) = call_for(&server, Some("alice"), "book_flight", &booking("FIRST", 2)).await;
    assert_eq!(status, 202, "{rejected}");
    let (status, html) = PageSession::log_in(&rejected, "alice").await.decide(&rejected, "reject").await;
    assert_eq!(status, 200, "{html}");
    let text = scrape(&server).await;
    let count = |state: &str| {
        let labels = format!(r#"tenant="default",tool="book_flight",state="{state}""#);
        sample(&text, "plinth_cheq_transactions_total", &labels)
    };
    assert_eq!(
        [count("opened"), count("accepted"), count("done"), count("rejected"), count("expired")],
        [Some(2.0), Some(1.0), Some(1.0), Some(1.0), None],
        "{text}"
    );
    assert!(text.lines().any(|line| line == "plinth_cheq_interrupted_total 0"), "{text}");

    // Unanswered, a transaction expires by the clock, with no event of its
    // own: the periodic sweep counts it once it has expired (and settled).
    // That the store, not the server, keeps how far expiries were counted —
    // so a restart or another replica never counts one twice — is the store
    // suite's `expiries_are_claimed_once_by_tool`.
    let args = ["--confirmation-ttl-secs", "1", "--confirmation-retention-secs", "10"];
    let (server, _plugins) = confirming_server(&args).await;
    let (status, _, pack) = call_for(&server, Some("alice"), "book_flight", &booking("BUSINESS", 1)).await;
    assert_eq!(status, 202, "{pack}");
    let expired = r#"tenant="default",tool="book_flight",state="expired""#;
    let mut text = scrape(&server).await;
    for _ in 0..300 {
        if sample(&text, "plinth_cheq_transactions_total", expired).is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        text = scrape(&server).await;
    }
    assert_eq!(sample(&text, "plinth_cheq_transactions_total", expired), Some(1.0), "{text}");
}

/// Compiled code comes from the cache after a restart; the pooling
/// allocator's slots are exported with how many are in use.
#[tokio::test(flavor = "multi_thread")]
async fn compiled_cache_lookups_and_pool_slots_are_exported() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(plugins_dir().join("echo.wasm"), dir.path().join("echo.wasm")).unwrap();
    std::fs::write(dir.path().join("spin_forever.wasm"), fixture("spin_forever.wasm")).unwrap();
    let server = Server::start_in(
        tempfile::tempdir().unwrap(),
        &["--plugins", dir.path().to_str().unwrap(), "--max-instances", "7", "--deadline-ms", "60000"],
    );
    let text = scrape(&server).await;
    let cache = |text: &str, result: &str| {
        sample(text, "plinth_compiled_cache_lookups_total", &format!(r#"result="{result}""#))
    };
    assert_eq!(
        (cache(&text, "hit"), cache(&text, "miss")),
        (Some(0.0), Some(2.0)),
        "compiled at the first start: {text}"
    );
    let slots = |text: &str, kind: &str| sample(text, "plinth_pool_slots", &format!(r#"kind="{kind}""#));
    let in_use = |text: &str, kind: &str| sample(text, "plinth_pool_slots_in_use", &format!(r#"kind="{kind}""#));
    assert_eq!(slots(&text, "component_instances"), Some(7.0), "{text}");
    assert_eq!(slots(&text, "core_instances"), Some(7.0 * 16.0), "{text}");
    assert_eq!(in_use(&text, "component_instances"), Some(0.0), "{text}");

    // A call that spins holds its slot while it runs.
    let spinning = {
        let id = server.tool_id("spin_forever").await;
        let request = server
            .request(Method::POST, &format!("/tools/{id}:invoke"))
            .json(&invocation("spin_forever", &[("note", json!("x"))]));
        tokio::spawn(async move { request.send().await.map(|r| r.status().as_u16()) })
    };
    let mut text = scrape(&server).await;
    for _ in 0..600 {
        if in_use(&text, "component_instances") == Some(1.0) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        text = scrape(&server).await;
    }
    assert_eq!(in_use(&text, "component_instances"), Some(1.0), "{text}");
    assert!(in_use(&text, "memories").is_some_and(|n| n >= 1.0), "{text}");
    assert!(in_use(&text, "core_instances").is_some_and(|n| n >= 1.0), "{text}");
    spinning.abort();

    // Restarted on the same data dir: nothing is linked until it is
    // called, and then from the cache.
    let data = tokio::task::block_in_place(|| server.stop());
    let server = Server::start_in(data, &[]);
    let text = scrape(&server).await;
    assert_eq!((cache(&text, "hit"), cache(&text, "miss")), (Some(0.0), Some(0.0)), "{text}");
    let id = server.tool_id("echo").await;
    let (status, body) =
        server.post(&format!("/tools/{id}:invoke"), &invocation("echo", &[("text", json!("x"))])).await;
    assert_eq!(status, 200, "{body}");
    let text = scrape(&server).await;
    assert_eq!((cache(&text, "hit"), cache(&text, "miss")), (Some(1.0), Some(0.0)), "{text}");
}

/// A small OpenTelemetry collector on 127.0.0.1: it takes OTLP/HTTP
/// protobuf exports at `/v1/traces`, decodes them with the protocol's own
/// generated types, and keeps every span (with its resource's attributes).
struct Collector {
    /// The base URL to pass as `--otlp-endpoint`.
    url: String,
    received: std::sync::Arc<std::sync::Mutex<Received>>,
}

#[derive(Default)]
struct Received {
    /// Export requests, decodable or not.
    requests: usize,
    spans: Vec<ExportedSpan>,
}

#[derive(Clone, Debug)]
struct ExportedSpan {
    span: opentelemetry_proto::tonic::trace::v1::Span,
    resource: Vec<opentelemetry_proto::tonic::common::v1::KeyValue>,
}

impl Collector {
    async fn start() -> Collector {
        use axum::routing::post;
        use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
        use prost::Message;
        let received = std::sync::Arc::new(std::sync::Mutex::new(Received::default()));
        let kept = received.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            post(move |body: axum::body::Bytes| {
                let kept = kept.clone();
                async move {
                    let mut received = kept.lock().unwrap();
                    received.requests += 1;
                    let export = ExportTraceServiceRequest::decode(body).expect("an OTLP trace export");
                    for resource_spans in export.resource_spans {
                        let resource = resource_spans.resource.map(|r| r.attributes).unwrap_or_default();
                        for scope in resource_spans.scope_spans {
                            received.spans.extend(
                                scope.spans.into_iter().map(|span| ExportedSpan { span, resource: resource.clone() }),
                            );
                        }
                    }
                    let answer = ExportTraceServiceResponse::default().encode_to_vec();
                    ([(axum::http::header::CONTENT_TYPE, "application/x-protobuf")], answer)
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Collector { url, received }
    }

    fn requests(&self) -> usize {
        self.received.lock().unwrap().requests
    }

    fn spans(&self) -> Vec<ExportedSpan> {
        self.received.lock().unwrap().spans.clone()
    }
}

/// An attribute's value as text (strings as they are, numbers in decimal).
fn attribute(attributes: &[opentelemetry_proto::tonic::common::v1::KeyValue], key: &str) -> Option<String> {
    use opentelemetry_proto::tonic::common::v1::any_value::Value as V;
    let value = attributes.iter().find(|kv| kv.key == key)?.value.as_ref()?.value.as_ref()?;
    Some(match value {
        V::StringValue(s) => s.clone(),
        V::IntValue(i) => i.to_string(),
        V::BoolValue(b) => b.to_string(),
        V::DoubleValue(d) => d.to_string(),
        other => format!("{other:?}"),
    })
}

const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

/// One weather call is one trace: the caller's span → the request → the
/// call → the tool's execution → its two requests to the weather service,
/// which receives the trace too, each request naming its own span.
#[tokio::test(flavor = "multi_thread")]
async fn a_traced_weather_call_continues_the_callers_trace_into_the_backend() {
    let collector = Collector::start().await;
    let (backend, weather) = crate::weather::backend().await;
    let config = format!("lookup_weather_by_city.backend-url={backend}");
    let server = Server::start(&[
        "--tool-config",
        &config,
        "--allow-private-cidr",
        "127.0.0.0/8",
        "--otlp-endpoint",
        &collector.url,
    ]);
    let id = server.tool_id("lookup_weather_by_city").await;
    let response = server
        .request(Method::POST, &format!("/tools/{id}:invoke"))
        .header("traceparent", format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01"))
        .header("tracestate", "agent=run-42")
        .json(&invocation("lookup_weather_by_city", &[("city", json!("Paris"))]))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    // A caller whose traceparent says "not sampled" is traced all the same,
    // in its own trace: it cannot keep its requests out of the operator's.
    let unsampled = "5bf92f3577b34da6a3ce929d0e0e4737";
    let response = server
        .request(Method::POST, &format!("/tools/{id}:invoke"))
        .header("traceparent", format!("00-{unsampled}-{CALLER_SPAN}-00"))
        .json(&invocation("lookup_weather_by_city", &[("city", json!("Tokyo"))]))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    // A graceful stop sends what is still queued.
    tokio::task::block_in_place(|| server.terminate());

    let exported = collector.spans();
    for span in &exported {
        assert_eq!(attribute(&span.resource, "service.name").as_deref(), Some("plinth"));
        assert!(attribute(&span.resource, "service.version").is_some());
        assert!(attribute(&span.resource, "service.instance.id").is_some());
    }
    let mut outbound = weather_trace(&exported, CALLER_TRACE, CALLER_SPAN, "POST /tools/{tool_ref}");
    outbound.extend(weather_trace(&exported, unsampled, CALLER_SPAN, "POST /tools/{tool_ref}"));
    outbound.sort();

    // The weather service got the traces: each request carries its own span.
    let mut received: Vec<String> = weather.traceparents().into_iter().map(|t| t.expect("a traceparent")).collect();
    received.sort();
    assert_eq!(received, outbound);
    // But none of the caller's tracestate: the operator allowed no key.
    assert!(weather.tracestates().iter().all(Option::is_none), "{:?}", weather.tracestates());

    // Never an input, a query or a path a tool chose, nor the configured
    // backend's address, in what is exported.
    let exported = format!("{exported:?}");
    let address = backend.strip_prefix("http://").unwrap().split(':').next().unwrap();
    for private in ["Paris", "Tokyo", "geocode", "latitude", address] {
        assert!(!exported.contains(private), "`{private}` was exported: {exported}");
    }
}

/// Checks that trace `trace` of `exported` is one weather call: a server
/// span `request` (child of the caller's span `parent`) → `invoke` → the
/// tool's execution → two `GET`s named by the tool's manifest entry, and no
/// other span. Returns the
/// `traceparent` each `GET` sent, sorted.
fn weather_trace(exported: &[ExportedSpan], trace: &str, parent: &str, request: &str) -> Vec<String> {
    use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
    let hex = |bytes: &[u8]| hex::encode(bytes);
    // Other requests (finding the tool's id) are traces of their own.
    let spans: Vec<_> = exported.iter().map(|e| &e.span).filter(|s| hex(&s.trace_id) == trace).collect();
    assert_eq!(spans.len(), 5, "request, invoke, tool, two outbound requests: {exported:#?}");
    let named = |name: &str| spans.iter().copied().filter(|s| s.name == name).collect::<Vec<_>>();
    let [server] = named(request)[..] else { panic!("one `{request}` span: {spans:#?}") };
    assert_eq!(hex(&server.parent_span_id), parent, "the request is the caller's span's child");
    assert_eq!(server.kind, SpanKind::Server as i32);
    let route = request.split_once(' ').unwrap().1;
    assert_eq!(attribute(&server.attributes, "http.route").as_deref(), Some(route));
    assert_eq!(attribute(&server.attributes, "http.response.status_code").as_deref(), Some("200"));
    let [invoke] = named("invoke")[..] else { panic!("one invoke span: {spans:#?}") };
    assert_eq!(invoke.parent_span_id, server.span_id, "the call is the request's child");
    assert_eq!(attribute(&invoke.attributes, "tool").as_deref(), Some("lookup_weather_by_city"));
    let [tool] = named("execute_tool lookup_weather_by_city")[..] else { panic!("one tool span: {spans:#?}") };
    assert_eq!(tool.parent_span_id, invoke.span_id, "the tool's execution is the call's child");
    assert_eq!(attribute(&tool.attributes, "gen_ai.tool.name").as_deref(), Some("lookup_weather_by_city"));
    let outbound = named("GET");
    assert_eq!(outbound.len(), 2, "geocode and forecast: {spans:#?}");
    for span in &outbound {
        assert_eq!(span.parent_span_id, tool.span_id, "an outbound request is the tool's child");
        assert_eq!(span.kind, SpanKind::Client as i32);
        // Named by the manifest's entry, not the configured URL: neither
        // its address nor its port is exported.
        assert_eq!(attribute(&span.attributes, "server.address").as_deref(), Some("${config.backend-url}"));
        assert_eq!(attribute(&span.attributes, "server.port"), None);
        assert_eq!(attribute(&span.attributes, "http.request.method").as_deref(), Some("GET"));
        assert_eq!(attribute(&span.attributes, "http.response.status_code").as_deref(), Some("200"));
    }
    let mut sent: Vec<String> = outbound.iter().map(|s| format!("00-{trace}-{}-01", hex(&s.span_id))).collect();
    sent.sort();
    sent
}

/// Sends `request` → (status, JSON body).
async fn answered(request: reqwest::RequestBuilder) -> (u16, Value) {
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
}

/// The OTC and MCP doors trace a call the same way: each continues its
/// caller's trace down to the tool's requests.
#[tokio::test(flavor = "multi_thread")]
async fn otc_and_mcp_calls_continue_the_callers_trace_too() {
    let collector = Collector::start().await;
    let (backend, weather) = crate::weather::backend().await;
    let config = format!("lookup_weather_by_city.backend-url={backend}");
    let args = ["--tool-config", &config, "--allow-private-cidr", "127.0.0.0/8", "--otlp-endpoint", &collector.url];
    let server = Server::start(&args);
    let (otc_trace, mcp_trace) = ("11111111111111111111111111111111", "22222222222222222222222222222222");

    let body = json!({ "request": { "tool_id": "Weather.LookupWeatherByCity", "input": { "city": "Tokyo" } } });
    let otc = server
        .request(Method::POST, "/otc/tools/call")
        .header("traceparent", format!("00-{otc_trace}-{CALLER_SPAN}-01"))
        .json(&body);
    let (status, answer) = answered(otc).await;
    assert_eq!((status, &answer["result"]["success"]), (200, &json!(true)), "{answer}");

    let modern = "2026-07-28";
    let capabilities =
        json!({ "io.modelcontextprotocol/protocolVersion": modern, "io.modelcontextprotocol/clientCapabilities": {} });
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": { "name": "lookup_weather_by_city", "arguments": { "city": "Boston" }, "_meta": capabilities },
    });
    let mcp = server
        .request(Method::POST, "/mcp")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", modern)
        .header("mcp-method", "tools/call")
        .header("mcp-name", "lookup_weather_by_city")
        .header("traceparent", format!("00-{mcp_trace}-{CALLER_SPAN}-01"))
        .json(&body);
    let (status, answer) = answered(mcp).await;
    assert_eq!((status, &answer["result"]["isError"]), (200, &json!(false)), "{answer}");
    tokio::task::block_in_place(|| server.terminate());

    let exported = collector.spans();
    let mut sent = weather_trace(&exported, otc_trace, CALLER_SPAN, "POST /otc/tools/call");
    sent.extend(weather_trace(&exported, mcp_trace, CALLER_SPAN, "POST /mcp"));
    sent.sort();
    let mut received: Vec<String> = weather.traceparents().into_iter().map(|t| t.expect("a traceparent")).collect();
    received.sort();
    assert_eq!(received, sent);
}

/// Without `--otlp-endpoint` nothing is exported or even attempted — not
/// even with the standard OpenTelemetry variables set — and the caller's
/// trace context reaches the tool's backend as it came, its `tracestate`
/// cut to the keys the operator allows (`--forward-tracestate`).
#[tokio::test(flavor = "multi_thread")]
async fn without_an_otlp_endpoint_nothing_is_exported_and_the_callers_trace_context_goes_on_as_allowed() {
    let collector = Collector::start().await;
    let (backend, weather) = crate::weather::backend().await;
    let plugins = plugins_dir();
    let config = format!("lookup_weather_by_city.backend-url={backend}");
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT".to_string(), collector.url.clone()),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT".to_string(), format!("{}/v1/traces", collector.url)),
    ];
    let args = [
        "--plugins",
        plugins.to_str().unwrap(),
        "--tool-config",
        &config,
        "--allow-private-cidr",
        "127.0.0.0/8",
        "--forward-tracestate",
        "agent",
    ];
    let (server, _) = Server::start_on(tempfile::tempdir().unwrap(), "127.0.0.1:0", &args, Some(TOKEN), &env);
    let id = server.tool_id("lookup_weather_by_city").await;
    let traceparent = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01");
    let response = server
        .request(Method::POST, &format!("/tools/{id}:invoke"))
        .header("traceparent", &traceparent)
        .header("tracestate", "private=customer-7,agent=run-42")
        .json(&invocation("lookup_weather_by_city", &[("city", json!("Paris"))]))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    // Without one, the backend gets none.
    let (status, _) = server.invoke("lookup_weather_by_city", &[("city", json!("Tokyo"))]).await;
    assert_eq!(status, 200);
    tokio::task::block_in_place(|| server.terminate());

    assert_eq!(collector.requests(), 0, "nothing was sent to a collector");
    assert_eq!(weather.traceparents(), [Some(traceparent.clone()), Some(traceparent), None, None]);
    // Of the caller's tracestate, only what the operator allows goes on.
    let agent = Some("agent=run-42".to_string());
    assert_eq!(weather.tracestates(), [agent.clone(), agent, None, None]);
}
