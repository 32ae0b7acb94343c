//! The sculpted weather tool: two backend calls over wasi:http to the fake
//! weather service on 127.0.0.1, behind one A2T invocation.

use crate::support::{Server, outputs};
use serde_json::json;

/// Starts the fake weather service on a free port, in this process.
pub async fn backend() -> (String, fake_weather::Counter) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let counter = fake_weather::Counter::default();
    tokio::spawn(fake_weather::serve(listener, counter.clone()));
    (url, counter)
}

fn configured(url: &str) -> String {
    format!("lookup_weather_by_city.backend-url={url}")
}

/// The stand-in backend listens on loopback, which tools may reach only
/// when the operator allows it.
const LOOPBACK: [&str; 2] = ["--allow-private-cidr", "127.0.0.0/8"];

#[tokio::test(flavor = "multi_thread")]
async fn looks_up_the_weather_through_two_backend_calls() {
    let (url, calls) = backend().await;
    let server = Server::start(&["--tool-config", &configured(&url), LOOPBACK[0], LOOPBACK[1]]);

    let (status, body) = server
        .invoke("lookup_weather_by_city", &[("city", json!("Omaha, Nebraska")), ("units", json!("FAHRENHEIT"))])
        .await;
    assert_eq!(status, 200, "{body}");
    let out = outputs(&body);
    assert_eq!(out["location"], "Omaha, United States");
    assert_eq!(out["temperature"], 80, "26.7 °C is 80 °F");
    assert_eq!(out["units"], "FAHRENHEIT");
    assert_eq!(out["conditions"], "partly cloudy");
    assert_eq!(out["wind_speed_kmh"], 14);
    assert_eq!(out["coordinates"], json!({"latitude": 41.26, "longitude": -95.94}));
    assert_eq!(calls.get(), 2, "geocode, then forecast");

    let (status, body) = server.invoke("lookup_weather_by_city", &[("city", json!("Paris"))]).await;
    assert_eq!(status, 200);
    let out = outputs(&body);
    assert_eq!((out["temperature"].clone(), out["units"].clone()), (json!(11), json!("CELSIUS")), "Celsius by default");
}

#[tokio::test(flavor = "multi_thread")]
async fn backend_answers_become_tool_errors() {
    let (url, _) = backend().await;
    let server = Server::start(&["--tool-config", &configured(&url), LOOPBACK[0], LOOPBACK[1]]);

    let (status, body) = server.invoke("lookup_weather_by_city", &[("city", json!("Atlantis"))]).await;
    assert_eq!(status, 422);
    assert_eq!(body["error"]["code"], "tool_error");
    assert_eq!(body["error"]["message"], "no city called `Atlantis` is known");
    assert_eq!(body["error"]["canRetry"], false);

    // The backend's 503 is worth retrying: the tool says so, the host answers
    // 503 with Retry-After.
    let id = server.tool_id("lookup_weather_by_city").await;
    let response = server
        .post_raw(
            &format!("/tools/{id}:invoke"),
            json!({"name": "lookup_weather_by_city", "input_parameters": [{"name": "city", "value": "Stormville"}]})
                .to_string(),
        )
        .await;
    assert_eq!(response.status(), 503);
    assert_eq!(response.headers()["retry-after"], "2");
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"]["canRetry"], true);
    assert_eq!(body["error"]["retryAfterMs"], 2000);
    assert_eq!(body["error"]["developerMessage"], "backend answered HTTP 503");
}

#[tokio::test(flavor = "multi_thread")]
async fn invalid_input_never_reaches_the_backend() {
    let (url, calls) = backend().await;
    let server = Server::start(&["--tool-config", &configured(&url), LOOPBACK[0], LOOPBACK[1]]);
    let (status, body) = server.invoke("lookup_weather_by_city", &[("city", json!("x".repeat(101)))]).await;
    assert_eq!((status, body["error"]["code"].clone()), (400, json!("too_long")));
    let (status, body) =
        server.invoke("lookup_weather_by_city", &[("city", json!("Boston")), ("units", json!("KELVIN"))]).await;
    assert_eq!((status, body["error"]["code"].clone()), (400, json!("invalid_enum_value")));
    assert_eq!(calls.get(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn without_the_operators_allowance_loopback_is_out_of_reach() {
    let (url, calls) = backend().await;
    let server = Server::start(&["--tool-config", &configured(&url)]);
    let (status, body) = server.invoke("lookup_weather_by_city", &[("city", json!("Boston"))]).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "outbound_denied");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("resolves to an address on the host's own or a private network"), "{body}");
    assert_eq!(calls.get(), 0, "the request never left the sandbox");
    assert!(server.logs().contains("1 outbound requests refused"));
}

#[tokio::test(flavor = "multi_thread")]
async fn without_its_config_the_tool_says_it_is_not_configured() {
    let server = Server::start(&[]);
    assert!(server.logs().contains("required config is not set"), "{}", server.logs());
    let (status, body) = server.invoke("lookup_weather_by_city", &[("city", json!("Boston"))]).await;
    assert_eq!(status, 422);
    assert_eq!(body["error"]["message"], "the tool is not configured on this server");
}

/// A TCP stand-in in front of `upstream` (`http://host:port`) that counts
/// the connections it accepts and passes each on, byte for byte.
async fn counting_front(upstream: &str) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let front = format!("http://{}", listener.local_addr().unwrap());
    let upstream = upstream.trim_start_matches("http://").to_string();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let upstream = upstream.clone();
            tokio::spawn(async move {
                let mut outbound = tokio::net::TcpStream::connect(upstream).await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            });
        }
    });
    (front, accepted)
}

#[tokio::test(flavor = "multi_thread")]
async fn backend_calls_ride_kept_connections_and_never_another_tenants() {
    use crate::support::TOKEN;
    use reqwest::Method;
    use std::sync::atomic::Ordering;
    let (url, calls) = backend().await;
    let (front, connections) = counting_front(&url).await;
    let server = Server::start(&["--tool-config", &configured(&front), LOOPBACK[0], LOOPBACK[1]]);
    for _ in 0..3 {
        let (status, body) = server.invoke("lookup_weather_by_city", &[("city", json!("Paris"))]).await;
        assert_eq!(status, 200, "{body}");
    }
    assert_eq!(calls.get(), 6, "two backend calls a call");
    assert_eq!(connections.load(Ordering::SeqCst), 1, "all six on one kept connection");

    // Another tenant's copy of the tool, configured with the same backend:
    // a connection of its own, and the default tenant's stays its own.
    server.create_tenant("globex", json!({})).await;
    let (_, publisher) = server.create_key(Some("globex"), "publisher").await;
    let (_, consumer) = server.create_key(Some("globex"), "consumer").await;
    let weather = std::fs::read(crate::support::plugins_dir().join("lookup_weather_by_city.wasm")).unwrap();
    let (status, deployed) = server.deploy_as(&publisher, "globex", weather).await;
    assert_eq!(status, 201, "{deployed}");
    let response = server
        .request_as(Some(TOKEN), Method::PUT, "/t/globex/admin/config/lookup_weather_by_city/backend-url")
        .body(front.clone())
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{}", response.text().await.unwrap());
    let id = deployed["toolId"].as_str().unwrap();
    let paris = crate::support::invocation("lookup_weather_by_city", &[("city", json!("Paris"))]);
    for _ in 0..2 {
        let (status, body) =
            server.call_as(Some(&consumer), Method::POST, &format!("/t/globex/tools/{id}:invoke"), Some(&paris)).await;
        assert_eq!(status, 200, "{body}");
    }
    assert_eq!(calls.get(), 10);
    assert_eq!(connections.load(Ordering::SeqCst), 2, "globex's calls on a connection of globex's own");
    let (status, _) = server.invoke("lookup_weather_by_city", &[("city", json!("Paris"))]).await;
    assert_eq!(status, 200);
    assert_eq!(connections.load(Ordering::SeqCst), 2, "the default tenant's own connection, still kept");
    // What the operator sees: two connections opened for twelve requests,
    // both idle now.
    let metrics = server.request(Method::GET, "/metrics").send().await.unwrap().text().await.unwrap();
    let sample = |name: &str| metrics.lines().find_map(|l| l.strip_prefix(&format!("{name} "))).map(str::to_string);
    assert_eq!(sample("plinth_outbound_connections_opened_total").as_deref(), Some("2"), "{metrics}");
    assert_eq!(sample("plinth_outbound_connections_idle").as_deref(), Some("2"), "{metrics}");
}
