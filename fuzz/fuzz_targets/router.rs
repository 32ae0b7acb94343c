//! Whole HTTP requests — method, path under a tenant's root, headers,
//! body — through the real router (`plinth::api::router`) in this process,
//! over a real host (SQLite in a temporary directory) that serves two
//! tenants: `acme`, whose consumer and publisher keys the requests may
//! carry, and `rival`, whose keys they never have.
//!
//! Both tenants run the example tools (`echo`; `rival` also
//! `book_flight`), and `rival` holds a secret and a config value that are
//! canaries. Properties:
//! - no panic (a handler's panic reaches the target and aborts);
//! - no 5xx but the documented temporary ones (502, 503, 504): a `500` is
//!   Plinth failing;
//! - every error body is `{"error": {"code", "message"}}` (JSON answers),
//!   a JSON-RPC error on the MCP door, or OAuth's `{"error": …}`;
//! - no answer carries what only `rival` has (its tool ids, the sha256 of
//!   `book_flight`, its canaries) unless the request itself did;
//! - every answer comes within seconds (listening streams excepted).
//!
//! Needs the packed example tools: `make plugins` (or `PLINTH_FUZZ_TOOLS`
//! pointing at a folder with `echo.wasm` and `book_flight.wasm`).
#![no_main]

#[path = "common.rs"]
mod common;

use arbitrary::{Result, Unstructured};
use axum::body::Body;
use axum::http::{Method, Request};
use http_body_util::BodyExt;
use libfuzzer_sys::fuzz_target;
use plinth::api::{ApiOptions, router};
use plinth::host::{HostLimits, HostOptions, ToolHost};
use plinth::runtime::RuntimeConfig;
use plinth::tenancy::{Principal, Role};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tower::ServiceExt;

struct World {
    app: axum::Router,
    consumer: String,
    publisher: String,
    /// A key of `rival`'s: only to check it is not in answers.
    rival_key: String,
    acme_echo: String,
    rival_echo: String,
    rival_flight: String,
    /// What only `rival` has.
    canaries: Vec<String>,
}

/// The canaries some request carried so far (the host outlives each input).
static CARRIED: std::sync::Mutex<std::collections::BTreeSet<String>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

const SECRET_CANARY: &str = "rival-secret-7f3a9c1e";
const CONFIG_CANARY: &str = "https://rival-config-5b2d.example";

fn tools_dir() -> PathBuf {
    std::env::var_os("PLINTH_FUZZ_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/plugins"))
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let dir = Box::leak(Box::new(tempfile::tempdir().unwrap()));
        let options = HostOptions {
            data_dir: dir.path().to_path_buf(),
            database_url: None,
            change_poll: Duration::from_secs(1),
            runtime: RuntimeConfig { pooling: false, ..Default::default() },
            tool_config: Default::default(),
            operator_key: None,
            limits: HostLimits::default(),
            tool_threads: 1,
            call_retention: plinth::host::DEFAULT_CALL_RETENTION,
            confirmation_ttl: plinth::host::DEFAULT_CONFIRMATION_TTL,
            confirmation_retention: plinth::host::DEFAULT_CONFIRMATION_RETENTION,
            max_concurrent_deploys: 1,
            idle_unlink: std::time::Duration::from_secs(600),
            secrets_key: None,
            registries: Default::default(),
            console: Default::default(),
            usage: Default::default(),
            cheq: Default::default(),
        };
        let host = ToolHost::open(options).unwrap();
        let op = Principal::server("fuzz");
        let read = |name: &str| {
            let path = tools_dir().join(name);
            std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}; run `make plugins` first", path.display()))
        };
        let (echo, flight) = (read("echo.wasm"), read("book_flight.wasm"));
        for tenant in ["acme", "rival"] {
            host.create_tenant(&op, tenant, false, &serde_json::json!({})).unwrap();
        }
        let acme_echo = host.deploy(&op, "acme", &echo, None).unwrap().tool_id.to_string();
        let rival_echo = host.deploy(&op, "rival", &echo, None).unwrap().tool_id.to_string();
        let flight_deployed = host.deploy(&op, "rival", &flight, None).unwrap();
        host.put_secret(&op, "rival", "api-token", SECRET_CANARY).unwrap();
        host.put_config(&op, "rival", "book_flight", "endpoint", CONFIG_CANARY).unwrap();
        let consumer = host.create_key(&op, Some("acme"), Role::Consumer, None).unwrap().key;
        let publisher = host.create_key(&op, Some("acme"), Role::Publisher, None).unwrap().key;
        let rival_key = host.create_key(&op, Some("rival"), Role::Publisher, None).unwrap().key;
        let canaries = vec![
            rival_echo.clone(),
            flight_deployed.tool_id.to_string(),
            flight_deployed.sha256.clone(),
            SECRET_CANARY.to_string(),
            CONFIG_CANARY.to_string(),
            rival_key.clone(),
        ];
        let rival_flight = flight_deployed.tool_id.to_string();
        let host = Arc::new(host);
        let app = common::runtime().block_on(async { router(host, ApiOptions::default()) });
        World { app, consumer, publisher, rival_key, acme_echo, rival_echo, rival_flight, canaries }
    })
}

fuzz_target!(|data: &[u8]| {
    let _ = one(&mut Unstructured::new(data));
});

const PATHS: &[&str] = &[
    "/health", "/ready", "/.well-known/jwks.json", "/metrics", "/openapi.json", "/tools", "/tools/{tool}",
    "/tools/{tool}/versions", "/tools/{tool}/versions/1", "/tools/{tool}/versions/latest", "/otc/health", "/otc/tools",
    "/otc/tools/call", "/otc/call", "/mcp", "/cheq/transactions/{any}", "/cheq/transactions/{any}/cheq",
    "/cheq/results/{any}", "/cheq/confirm", "/cheq/login", "/cheq/decide", "/admin/cheq/{any}",
    "/admin/end-users/{any}", "/admin/logs", "/admin/usage", "/admin/confirmation-server",
    "/admin/tools/{tool}/confirmation", "/catalog/sign-in", "/catalog", "/catalog/tools/{tool}",
    "/catalog/tools/{tool}/try", "/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp",
    "/.well-known/oauth-protected-resource/t/{tenant}/mcp", "/.well-known/oauth-authorization-server",
    "/.well-known/oauth-authorization-server/t/{tenant}", "/oauth/authorize", "/oauth/token", "/oauth/register",
    "/oauth/revoke", "/admin/tenants/{tenant}/oauth", "/admin/tools", "/admin/tools/{tool}/versions/1",
    "/admin/trust-policy", "/admin/trust-policy/refused", "/admin/registries", "/admin/registries/{any}",
    "/admin/secrets", "/admin/secrets/{any}", "/admin/config", "/admin/config/{name}/{any}", "/admin/tenant",
    "/admin/tenants", "/admin/tenants/{tenant}", "/admin/keys", "/admin/keys/{any}", "/admin/audit",
    "/admin/authorization-providers", "/admin/authorization-providers/{any}", "/admin/end-users/{any}/connections",
    "/admin/end-users/{any}/connections/{any}", "/connections", "/connections/callback", "/connections/{any}",
    "/connections/{any}/status", "/connections/{any}/revoke", "/catalog/providers", "/{any}",
];

const METHODS: &[Method] =
    &[Method::GET, Method::GET, Method::POST, Method::POST, Method::PUT, Method::DELETE, Method::PATCH, Method::HEAD, Method::OPTIONS];

fn body(u: &mut Unstructured, w: &World, tool: &str) -> Result<Vec<u8>> {
    let text: String = u.arbitrary()?;
    let n: i64 = u.arbitrary()?;
    Ok(match u.int_in_range(0..=12)? {
        0 => serde_json::to_vec(&serde_json::json!({ "name": "echo", "input_parameters": [{ "name": "text", "value": text }] })).unwrap(),
        1 => serde_json::to_vec(&serde_json::json!({ "request": { "tool_id": format!("acme.echo@{n}"), "input": { "text": text } } })).unwrap(),
        2 => serde_json::to_vec(&serde_json::json!({ "tool_id": tool, "input": { "text": text }, "call_id": text })).unwrap(),
        3 => serde_json::to_vec(&serde_json::json!({ "jsonrpc": "2.0", "id": n, "method": "tools/call",
            "params": { "name": "echo", "arguments": { "text": text }, "_meta": { "toolId": tool } } })).unwrap(),
        4 => serde_json::to_vec(&serde_json::json!({ "jsonrpc": "2.0", "id": n, "method": *u.choose(&["initialize", "tools/list", "server/discover", "ping", "resources/list"])?,
            "params": { "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": text, "version": "1" } } })).unwrap(),
        5 => format!("grant_type=authorization_code&code={text}&client_id=https%3A%2F%2Fapp.example%2Fc&code_verifier={n}&redirect_uri=http%3A%2F%2F127.0.0.1%2Fcb").into_bytes(),
        6 => serde_json::to_vec(&serde_json::json!({ "redirect_uris": [text], "client_name": "c" })).unwrap(),
        7 => serde_json::to_vec(&serde_json::json!({ "requireSignature": u.arbitrary::<bool>()?, "keys": [{ "name": "k", "publicKey": text }] })).unwrap(),
        8 => text.into_bytes(),
        9 => {
            // A component upload: an example tool, sometimes changed.
            let mut bytes = std::fs::read(tools_dir().join("echo.wasm")).unwrap_or_default();
            if !bytes.is_empty() && u.arbitrary()? {
                let at = u.choose_index(bytes.len())?;
                bytes[at] = u.arbitrary()?;
            }
            bytes
        }
        10 => serde_json::to_vec(&serde_json::json!({ "when": text })).unwrap(),
        _ => {
            let _ = w;
            u.arbitrary()?
        }
    })
}

fn one(u: &mut Unstructured) -> Result<()> {
    let w = world();
    let tool = match u.int_in_range(0..=5)? {
        0 | 1 => w.acme_echo.clone(),
        2 => w.rival_echo.clone(),
        3 => w.rival_flight.clone(),
        4 => "echo".to_string(),
        _ => u.arbitrary::<String>()?,
    };
    let tenant = (*u.choose(&["acme", "acme", "rival", "default", "nobody"])?).to_string();
    let any: String = u.arbitrary()?;
    let any: String = any.chars().filter(|c| !matches!(c, '/' | '?' | '#')).collect();
    let template = *u.choose(PATHS)?;
    let mut path = template
        .replace("{tool}", &tool)
        .replace("{tenant}", &tenant)
        .replace("{name}", *u.choose(&["echo", "book_flight"])?)
        .replace("{any}", &any);
    match u.int_in_range(0..=3)? {
        0 => {}
        1 | 2 => path = format!("/t/{tenant}{path}"),
        _ => path = format!("/t/{}{path}", u.arbitrary::<String>()?),
    }
    if u.ratio(1, 4)? {
        path.push('?');
        path.push_str(*u.choose(&["limit=1", "cursor=", "version=1", "tool=echo", "tail=1&level=info", "state=s&code=c&iss=https://login.example", "state=s&state=t&error=access_denied", "response_type=code&client_id=https://app.example/c&redirect_uri=http://127.0.0.1/cb&code_challenge=x&code_challenge_method=S256&state=s&resource=http://127.0.0.1:8080/t/acme/mcp"])?);
        path.push_str(&u.arbitrary::<String>()?);
    }
    let method = u.choose(METHODS)?.clone();
    let mut request = Request::builder().method(method.clone()).uri(path.as_str());
    let key = match u.int_in_range(0..=5)? {
        0 => None,
        1 | 2 => Some(w.consumer.clone()),
        3 | 4 => Some(w.publisher.clone()),
        _ => Some(u.arbitrary::<String>()?),
    };
    if let Some(key) = &key {
        request = request.header("authorization", format!("Bearer {key}"));
    }
    request = request.header("host", *u.choose(&["127.0.0.1:8080", "127.0.0.1:8080", "evil.example", "localhost"])?);
    for _ in 0..u.int_in_range(0..=3)? {
        let (name, value) = *u.choose(&[
            ("content-type", "application/json"),
            ("content-type", "application/x-www-form-urlencoded"),
            ("content-type", "application/wasm"),
            ("accept", "application/json, text/event-stream"),
            ("accept", "text/html"),
            ("mcp-protocol-version", "2025-06-18"),
            ("mcp-protocol-version", "2026-07-28"),
            ("origin", "https://evil.example"),
            ("origin", "http://127.0.0.1:8080"),
            ("x-request-id", "fuzz"),
            ("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
            ("cookie", "plinth_catalog=x"),
            ("idempotency-key", "k1"),
            ("x-end-user", "alice"),
        ])?;
        request = request.header(name, value);
    }
    if u.ratio(1, 6)? {
        let name: String = u.arbitrary()?;
        let value: String = u.arbitrary()?;
        request = request.header(name.as_str(), value.as_str());
    }
    let body = body(u, w, &tool)?;
    let Ok(mut request) = request.body(Body::from(body.clone())) else { return Ok(()) };
    // What the accept loop (api::serve) puts on every request: its TCP peer.
    let peer: [u8; 4] = *u.choose(&[[127, 0, 0, 1], [10, 0, 0, 7], [203, 0, 113, 9]])?;
    request.extensions_mut().insert(axum::extract::ConnectInfo(std::net::SocketAddr::from((peer, 40000))));
    let asked = format!("{path} {key:?} {}", String::from_utf8_lossy(&body));

    let app = w.app.clone();
    let answer = common::runtime().block_on(async move {
        let response = tokio::time::timeout(Duration::from_secs(20), app.oneshot(request))
            .await
            .unwrap_or_else(|_| panic!("no answer within 20 s to {asked}"))
            .unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        // A listening stream (`subscriptions/listen`) does not end: its
        // first part is enough.
        let stream = headers.get("content-type").is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
        let mut bytes = Vec::new();
        let mut body = response.into_body();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(if stream { 1 } else { 10 });
        loop {
            let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(_) if stream => break,
                Err(_) => panic!("the body of a {status} answer did not end within 10 s: {asked}"),
            };
            let Ok(frame) = frame else { break };
            if let Some(data) = frame.data_ref() {
                bytes.extend_from_slice(data);
                // A stream's first event is its answer (`tools/call` over
                // SSE); a listening stream sends nothing more for minutes.
                if stream && bytes.ends_with(b"\n\n") {
                    break;
                }
            }
        }
        (status, headers, bytes, asked)
    });
    let (status, headers, bytes, asked) = answer;
    let text = String::from_utf8_lossy(&bytes);
    let code = status.as_u16();
    assert!(
        !(500..600).contains(&code) || matches!(code, 502..=504),
        "{code} to {method} {asked}\n{text}"
    );
    // acme's own records (its audit log, console, usage, the names of its
    // secrets and config: `/admin/` answers) may give back what an earlier
    // request of acme's carried, rival's ids among them; no other answer may.
    let records = path.contains("/admin/");
    let mut carried = CARRIED.lock().unwrap_or_else(|e| e.into_inner());
    for canary in &w.canaries {
        if !asked.contains(canary.as_str()) && !(records && carried.contains(canary)) {
            assert!(!text.contains(canary.as_str()), "`rival`'s {canary} in the answer to {method} {asked}\n{text}");
            for (name, value) in &headers {
                assert!(!value.as_bytes().windows(canary.len()).any(|w| w == canary.as_bytes()), "`rival`'s {canary} in header {name}");
            }
        }
    }
    carried.extend(w.canaries.iter().filter(|c| asked.contains(c.as_str())).cloned());
    drop(carried);
    let _ = &w.rival_key;
    let json = headers.get("content-type").is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if status.is_client_error() || status.is_server_error() {
        if json && method != Method::HEAD {
            let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{code} with a JSON type but not JSON ({e}): {text}"));
            let shaped = v["error"]["code"].is_string() && v["error"]["message"].is_string();
            // OAuth's endpoints answer RFC 6749's shape; the MCP door JSON-RPC's.
            let oauth = v["error"].is_string();
            let rpc = v["jsonrpc"] == "2.0";
            // The OTC door answers the OTC specification's error shape.
            let otc = path.contains("/otc/") && v["code"].is_string() && v["message"].is_string();
            assert!(shaped || oauth || rpc || otc, "{code} error body not in the error shape: {text}");
        }
    }
    Ok(())
}
