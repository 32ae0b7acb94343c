//! The Open Tool Calling front door, end to end: an OTC client's view of the
//! example tools. Every answer is validated against the schemas of the OTC
//! 1.0 OpenAPI document (`tests/specs/otc-openapi-1.0.json`) by a JSON Schema
//! validator before a test looks at it.

use crate::support::{Server, TOKEN, fixture, plugins_dir};
use reqwest::Method;
use serde_json::{Value, json};
use std::path::Path;
use std::sync::OnceLock;

const SCHEMA_URI: &str = "https://github.com/ArcadeAI/OpenToolCalling/tree/main/specification/http/1.0/openapi.json";

/// The OTC 1.0 OpenAPI document, with its one defect mended.
///
/// `CallToolResponse` declares `call_id`, `duration` and `success` in
/// `properties`, `value` and `error` only inside its `oneOf` branches, and
/// `additionalProperties: false` beside them. In JSON Schema 2020-12 (the
/// dialect of OpenAPI 3.1) `additionalProperties` sees only its sibling
/// `properties`, so as written no response may carry `value` or `error` —
/// not even the RFC's own examples. The keyword that says what the document
/// means is `unevaluatedProperties: false` (it sees what the `oneOf` branch
/// evaluated); the mend swaps exactly that keyword (docs/otc.md).
fn openapi() -> &'static Value {
    static DOCUMENT: OnceLock<Value> = OnceLock::new();
    DOCUMENT.get_or_init(|| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/specs/otc-openapi-1.0.json");
        let mut document: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let response = document["components"]["schemas"]["CallToolResponse"].as_object_mut().unwrap();
        assert_eq!(response.remove("additionalProperties"), Some(json!(false)), "the defect is no longer there");
        response.insert("unevaluatedProperties".into(), json!(false));
        document
    })
}

/// Where, in the OpenAPI document, the schema of each kind of answer is.
const TOOL_LIST: &str = "#/paths/~1tools/get/responses/200/content/application~1json/schema";
const CALL_RESULT: &str = "#/paths/~1tools~1call/post/responses/200/content/application~1json/schema";
const CALL_REQUEST: &str = "#/paths/~1tools~1call/post/requestBody/content/application~1json/schema";
const SERVER_ERROR: &str = "#/components/schemas/ServerErrorResponse";
const VALIDATION_ERROR: &str = "#/components/schemas/ValidationErrorResponse";

/// Panics unless `instance` is valid against the schema at `pointer`.
fn assert_valid(pointer: &str, instance: &Value) {
    let mut schema = openapi().clone();
    schema["$ref"] = pointer.into();
    let validator =
        jsonschema::options().with_draft(jsonschema::Draft::Draft202012).build(&schema).expect("the schema compiles");
    let errors: Vec<String> =
        validator.iter_errors(instance).map(|e| format!("{e} at {}", e.instance_path())).collect();
    assert!(errors.is_empty(), "not a valid {pointer}:\n{}\n{instance:#}", errors.join("\n"));
}

/// An answer from the OTC front door, already checked against its schema.
pub struct Answer {
    pub status: u16,
    pub body: Value,
    pub replayed: bool,
}

/// Sends `request` and validates the answer: against `success` on `200`
/// (the health check's has no schema), a `ValidationErrorResponse` on `422`,
/// a `ServerErrorResponse` on every other status; `$schema` always.
async fn send(request: reqwest::RequestBuilder, success: Option<&str>) -> Answer {
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let replayed = response.headers().get("idempotent-replayed").is_some_and(|v| v == "true");
    let text = response.text().await.unwrap();
    let body: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{status}: not JSON ({e}): {text}"));
    let schema = match status {
        200 => success,
        422 => Some(VALIDATION_ERROR),
        _ => Some(SERVER_ERROR),
    };
    if let Some(schema) = schema {
        assert_valid(schema, &body);
    }
    assert_eq!(body["$schema"], SCHEMA_URI, "{body}");
    Answer { status, body, replayed }
}

/// `GET {root}/otc/tools` as `key` → the tool definitions.
async fn list(server: &Server, key: &str, root: &str) -> Vec<Value> {
    let answer = send(server.request_as(Some(key), Method::GET, &format!("{root}/otc/tools")), Some(TOOL_LIST)).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    answer.body["tools"].as_array().unwrap().clone()
}

/// `POST path` with `body` (a request the test means to be valid by the
/// OpenAPI document is checked as such first) as the operator.
pub async fn call(server: &Server, path: &str, body: &Value) -> Answer {
    call_as(server, TOKEN, path, body).await
}

async fn call_as(server: &Server, key: &str, path: &str, body: &Value) -> Answer {
    if body.get("request").is_some() {
        assert_valid(CALL_REQUEST, body);
    }
    send(server.request_as(Some(key), Method::POST, path).json(body), Some(CALL_RESULT)).await
}

/// A wrapped `CallToolRequest`.
pub fn request(tool_id: &str, input: Value) -> Value {
    json!({ "request": { "tool_id": tool_id, "input": input } })
}

/// A wrapped `CallToolRequest` with a call id.
fn request_with_id(call_id: &str, tool_id: &str, input: Value) -> Value {
    json!({ "request": { "call_id": call_id, "tool_id": tool_id, "input": input } })
}

fn booking() -> Value {
    json!({ "flight_number": "UA123", "date": "2026-12-24", "passengers": 2, "cabin_class": "ECONOMY" })
}

fn definition<'a>(tools: &'a [Value], id: &str) -> &'a Value {
    tools.iter().find(|t| t["id"] == id).unwrap_or_else(|| panic!("no {id} in {tools:#?}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn every_version_of_every_tool_is_listed_with_its_schemas() {
    let server = Server::start(&[]);
    let health = send(server.request_as(None, Method::GET, "/otc/health"), None).await;
    assert_eq!((health.status, &health.body["status"]), (200, &json!("ok")));

    let tools = list(&server, TOKEN, "").await;
    let ids: Vec<&str> = tools.iter().map(|t| t["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["Travel.BookFlight@1.0.0", "Default.Echo@1.0.0", "Weather.LookupWeatherByCity@1.0.0"]);

    let book = definition(&tools, "Travel.BookFlight@1.0.0");
    assert_eq!(book["name"], "Travel_BookFlight");
    assert_eq!(book["version"], "1.0.0");
    assert!(book["description"].as_str().unwrap().starts_with("Books seats on a scheduled flight"));
    assert!(book.get("requirements").is_none(), "book_flight needs no secrets");
    let parameters = &book["input_schema"]["parameters"];
    assert_eq!(parameters["type"], "object");
    assert_eq!(parameters["required"], json!(["flight_number", "date", "passengers", "cabin_class"]));
    let props = &parameters["properties"];
    assert_eq!(props["flight_number"]["type"], "string");
    assert_eq!(props["flight_number"]["maxLength"], 6);
    assert_eq!((&props["passengers"]["type"], &props["passengers"]["minimum"]), (&json!("integer"), &json!(1)));
    assert_eq!(props["passengers"]["maximum"], 9);
    assert_eq!(props["cabin_class"]["enum"], json!(["ECONOMY", "PREMIUM_ECONOMY", "BUSINESS", "FIRST"]));
    let cabin = props["cabin_class"]["description"].as_str().unwrap();
    assert!(cabin.contains("ECONOMY: Economy class, the least expensive cabin class. Also known as coach."), "{cabin}");
    for (name, prop) in props.as_object().unwrap() {
        assert!(!prop["description"].as_str().unwrap_or("").is_empty(), "{name} has no description");
    }
    let outputs = &book["output_schema"];
    assert_eq!(outputs["required"], json!(["confirmation_code", "total_price_usd", "cabin_class"]));
    assert_eq!(outputs["properties"]["total_price_usd"]["type"], "integer");

    // The published input schema is a working JSON Schema: a client that
    // checks its arguments with it agrees with the server.
    let input_schema = jsonschema::validator_for(parameters).expect("input_schema.parameters compiles");
    assert!(input_schema.is_valid(&booking()));
    let mut too_many = booking();
    too_many["passengers"] = 10.into();
    assert!(!input_schema.is_valid(&too_many));
    assert_eq!(call(&server, "/otc/tools/call", &request("Travel.BookFlight", too_many)).await.status, 422);

    // A new version is listed beside the old, newest first; the toolkit of
    // a tool without one is its tenant's.
    let (status, deployed) = server.deploy(fixture("echo_v2.wasm"), "").await;
    assert_eq!(status, 201, "{deployed}");
    let tools = list(&server, TOKEN, "").await;
    let echoes: Vec<&str> = tools.iter().filter_map(|t| t["id"].as_str().filter(|id| id.contains("Echo"))).collect();
    assert_eq!(echoes, ["Default.Echo@2.0.0", "Default.Echo@1.0.0"]);
    assert_eq!(definition(&tools, "Default.Echo@2.0.0")["name"], "Default_Echo");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_is_called_by_every_id_form_through_both_paths() {
    let server = Server::start(&[]);
    let mut codes = Vec::new();
    for id in ["Travel.BookFlight", "Travel.BookFlight@1", "Travel.BookFlight@1.0.0"] {
        for path in ["/otc/tools/call", "/otc/call"] {
            let wrapped = request(id, booking());
            let bare = wrapped["request"].clone();
            for body in [wrapped, bare] {
                let answer = call(&server, path, &body).await;
                assert_eq!(answer.status, 200, "{id} {path}: {}", answer.body);
                let result = &answer.body["result"];
                assert_eq!(result["success"], true, "{result}");
                assert_eq!(result["value"]["total_price_usd"], 360);
                assert_eq!(result["value"]["cabin_class"], "ECONOMY");
                assert!(result["duration"].as_f64().unwrap() > 0.0);
                uuid::Uuid::parse_str(result["call_id"].as_str().unwrap()).expect("a generated call_id is a UUID");
                codes.push(result["value"]["confirmation_code"].as_str().unwrap().to_string());
            }
        }
    }
    codes.dedup();
    assert_eq!(codes.len(), 1, "the same booking, the same confirmation code: {codes:?}");

    // The RFC's `inputs` and the echo of a given call_id.
    let body = json!({ "call_id": "call-1", "tool_id": "Default.Echo@1", "inputs": { "text": "héllo" } });
    let answer = call(&server, "/otc/call", &body).await;
    assert_eq!(answer.body["result"]["value"], json!({ "text": "héllo" }));
    assert_eq!(answer.body["result"]["call_id"], "call-1");

    // Versions that are not there, and ids that are not ids.
    for (id, code) in [
        ("Travel.BookFlight@2", "unknown_version"),
        ("Travel.BookFlight@1.2.0", "unknown_version"),
        ("Travel.CancelFlight", "unknown_tool"),
        ("Weather.BookFlight", "unknown_tool"),
        ("Travel.book_flight", "unknown_tool"),
        ("book_flight", "invalid_tool_id"),
        ("Travel.BookFlight@latest", "invalid_tool_id"),
    ] {
        // (Some are not ToolIds, so the request is not checked as valid.)
        let body = request(id, booking());
        let answer = send(server.request(Method::POST, "/otc/tools/call").json(&body), Some(CALL_RESULT)).await;
        assert_eq!((answer.status, answer.body["code"].as_str()), (400, Some(code)), "{id}: {}", answer.body);
    }

    // A tenant's tools under its own platform root, with its own toolkit.
    server.create_tenant("acme-travel", json!({})).await;
    let (_, publisher) = server.create_key(Some("acme-travel"), "publisher").await;
    let (_, consumer) = server.create_key(Some("acme-travel"), "consumer").await;
    let echo = std::fs::read(plugins_dir().join("echo.wasm")).unwrap();
    assert_eq!(server.deploy_as(&publisher, "acme-travel", echo).await.0, 201);
    let tools = list(&server, &consumer, "/t/acme-travel").await;
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0]["id"], "AcmeTravel.Echo@1.0.0");
    let hello = request("AcmeTravel.Echo", json!({ "text": "hi" }));
    let answer = call_as(&server, &consumer, "/t/acme-travel/otc/tools/call", &hello).await;
    assert_eq!(answer.body["result"]["value"]["text"], "hi", "{}", answer.body);
    // Not from the other tenant's root, nor with the other tenant's key.
    let answer = call(&server, "/otc/tools/call", &hello).await;
    assert_eq!(answer.status, 400);
    let default_tool = request("Travel.BookFlight", booking());
    assert_eq!(call_as(&server, &consumer, "/otc/tools/call", &default_tool).await.status, 404);
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_requests_are_400_bad_inputs_422_and_failed_calls_200() {
    let server = Server::start(&[]);
    let raw = |body: &'static str| server.request(Method::POST, "/otc/tools/call").body(body);
    for body in ["{not json", "[]", r#"{"request": {"input": {}}}"#, r#"{"request": {"tool_id": 7}}"#] {
        let answer = send(raw(body).header("content-type", "application/json"), Some(CALL_RESULT)).await;
        assert_eq!(answer.status, 400, "{body}: {}", answer.body);
        assert!(!answer.body["message"].as_str().unwrap().is_empty());
    }
    let unknown_field = json!({ "request": { "tool_id": "Default.Echo", "input": {}, "timeout": 5 } });
    let answer = send(server.request(Method::POST, "/otc/tools/call").json(&unknown_field), Some(CALL_RESULT)).await;
    assert_eq!(answer.status, 400);
    assert!(answer.body["message"].as_str().unwrap().contains("`timeout`"), "{}", answer.body);

    // Every bad parameter is named at once.
    let bad = json!({ "flight_number": "UA123", "passengers": 12, "cabin_class": "LUXURY", "seat": "1A" });
    let answer = call(&server, "/otc/tools/call", &request("Travel.BookFlight@1.0.0", bad)).await;
    assert_eq!(answer.status, 422, "{}", answer.body);
    let errors = answer.body["parameter_errors"].as_object().unwrap();
    let mut named: Vec<&str> = errors.keys().map(String::as_str).collect();
    named.sort();
    assert_eq!(named, ["cabin_class", "date", "passengers", "seat"], "{}", answer.body);
    assert!(errors["passengers"].as_str().unwrap().contains('9'), "{}", answer.body);

    // The tool ran and said no: its own error, field by field.
    let mut booking = booking();
    booking["flight_number"] = "U-1".into();
    let answer = call(&server, "/otc/tools/call", &request("Travel.BookFlight", booking)).await;
    assert_eq!(answer.status, 200);
    let result = &answer.body["result"];
    assert_eq!(result["success"], false);
    assert_eq!(result["error"]["message"], "`U-1` is not a flight number");
    assert_eq!(result["error"]["can_retry"], false);
    assert!(result["error"]["additional_prompt_content"].as_str().unwrap().contains("UA123"), "{result}");
    assert!(result.get("value").is_none());

    // Refusals from the access layer and the router are OTC-shaped too.
    let anonymous = server.request_as(None, Method::POST, "/otc/tools/call").json(&request("Default.Echo", json!({})));
    assert_eq!(send(anonymous, Some(CALL_RESULT)).await.status, 401);
    assert_eq!(send(server.request(Method::GET, "/otc/nothing"), Some(CALL_RESULT)).await.status, 404);
    // The health check says the same under every root: it names no tenant.
    let real = send(server.request_as(None, Method::GET, "/otc/health"), None).await;
    // Nor which toolsets a tenant has.
    for root in ["/t/ghost", "/t/default/toolsets/no-such-toolset"] {
        let elsewhere = send(server.request_as(None, Method::GET, &format!("{root}/otc/health")), None).await;
        assert_eq!((&elsewhere.status, &elsewhere.body), (&real.status, &real.body), "{root}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_timeout_while_waiting_may_be_retried_and_a_loop_or_a_trap_may_not() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["spin_forever", "panic_at_once", "slow_sleep"] {
        std::fs::write(dir.path().join(format!("{name}.wasm")), fixture(&format!("{name}.wasm"))).unwrap();
    }
    let plugins = dir.path().to_str().unwrap();
    let server = Server::start_in(tempfile::tempdir().unwrap(), &["--plugins", plugins, "--deadline-ms", "500"]);
    for (id, input, code, can_retry) in [
        // Waiting (on a backend, here a sleep) at its deadline: may pass.
        ("Default.SlowSleep", json!({ "millis": 1200 }), "tool_timeout", true),
        // Computing at its deadline: would loop again.
        ("Default.SpinForever", json!({ "note": "x" }), "tool_timeout", false),
        ("Default.PanicAtOnce", json!({ "note": "x" }), "tool_trapped", false),
    ] {
        let answer = call(&server, "/otc/tools/call", &request(id, input)).await;
        assert_eq!(answer.status, 200, "{id}: {}", answer.body);
        let error = &answer.body["result"]["error"];
        assert_eq!(answer.body["result"]["success"], false);
        assert_eq!((&error["developer_message"], &error["can_retry"]), (&json!(code), &json!(can_retry)), "{id}");
        assert!(!error["message"].as_str().unwrap().is_empty());
    }
}

/// Every file under `dir`, read whole.
fn files_under(dir: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(files_under(&path));
        } else if let Ok(bytes) = std::fs::read(&path) {
            found.push((path, bytes));
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread")]
async fn a_secret_supplied_with_a_call_serves_that_call_only() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("use_secret.wasm"), fixture("use_secret.wasm")).unwrap();
    let server = Server::start_in(tempfile::tempdir().unwrap(), &["--plugins", dir.path().to_str().unwrap()]);
    let tools = list(&server, TOKEN, "").await;
    assert_eq!(
        definition(&tools, "Default.UseSecret@1.0.0")["requirements"],
        json!({ "secrets": [{ "id": "api-key" }] })
    );

    let input = json!({ "log_lines": 0, "fail": false });
    let without = request("Default.UseSecret", input.clone());
    let answer = call(&server, "/otc/tools/call", &without).await;
    assert_eq!(answer.status, 400, "{}", answer.body);
    assert_eq!(answer.body["code"], "missing_requirements");
    assert!(answer.body["message"].as_str().unwrap().contains("`api-key`"), "{}", answer.body);
    assert_eq!(answer.body["missing_requirements"], json!({ "secrets": [{ "id": "api-key" }] }));

    const KEY: &str = "sk-call-scoped-93be17";
    let mut with = without.clone();
    with["request"]["context"] = json!({ "secrets": [{ "id": "api-key", "value": KEY }] });
    with["request"]["call_id"] = "with-secret-1".into();
    let answer = call(&server, "/otc/tools/call", &with).await;
    // The tool read the value (it reports it, and the host redacts it).
    assert_eq!(answer.body["result"]["value"]["report"], "api-key=[redacted]; undeclared-key=none", "{}", answer.body);
    with["request"]["input"]["fail"] = true.into();
    with["request"]["call_id"] = "with-secret-2".into();
    let answer = call(&server, "/otc/tools/call", &with).await;
    assert_eq!(answer.body["result"]["error"]["message"], "failed with key [redacted]", "{}", answer.body);

    // A retry of a recorded call is answered from the record, secret or not.
    let mut retry = without.clone();
    retry["request"]["call_id"] = "with-secret-1".into();
    let replayed = call(&server, "/otc/tools/call", &retry).await;
    assert!(replayed.replayed, "{}", replayed.body);
    assert_eq!(replayed.body["result"]["value"]["report"], "api-key=[redacted]; undeclared-key=none");
    // A value short enough to swell every answer it is redacted from is refused.
    let mut short = without.clone();
    short["request"]["context"] = json!({ "secrets": [{ "id": "api-key", "value": "e" }] });
    let refused = call(&server, "/otc/tools/call", &short).await;
    assert_eq!(refused.status, 400);
    assert!(refused.body["message"].as_str().unwrap().contains("8 to 4096 characters"), "{}", refused.body);

    // Nothing was kept: the next call lacks it again, and neither the log
    // nor any file of the data dir (where call ids are recorded) holds it.
    assert_eq!(call(&server, "/otc/tools/call", &without).await.status, 400);
    assert!(!server.logs().contains(KEY), "the secret reached the log");
    let data = server.stop();
    for (path, bytes) in files_under(data.path()) {
        assert!(!bytes.windows(KEY.len()).any(|w| w == KEY.as_bytes()), "{} holds the secret", path.display());
    }

    // A stored secret satisfies the requirement; the list stops asking.
    let server = Server::start_in(data, &["--plugins", dir.path().to_str().unwrap()]);
    let put = server.request(Method::PUT, "/admin/secrets/api-key").body("stored-value").send().await.unwrap();
    assert_eq!(put.status(), 204);
    assert!(definition(&list(&server, TOKEN, "").await, "Default.UseSecret@1.0.0").get("requirements").is_none());
    assert_eq!(call(&server, "/otc/tools/call", &without).await.body["result"]["success"], true);
}

/// The fake weather service on a free port, and its request counter.
pub async fn weather_backend() -> (String, fake_weather::Counter) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let counter = fake_weather::Counter::default();
    tokio::spawn(fake_weather::serve(listener, counter.clone()));
    (url, counter)
}

/// A call over its tenant's rate is refused before its `call_id` is
/// claimed: it writes nothing to the store, and is answered as one without
/// a call id is. (Before, its claim was written — an fsynced write on
/// SQLite's one writer — and then released, a second write, for every
/// refused call.)
#[tokio::test(flavor = "multi_thread")]
async fn a_call_over_the_rate_writes_nothing_for_its_call_id() {
    let server = Server::start(&[]);
    // Every claim the server writes is counted by a trigger of the test's.
    server.execute_sql(
        "CREATE TABLE test_claims (call_id TEXT);
         CREATE TRIGGER test_claims AFTER INSERT ON idempotent_calls
         BEGIN INSERT INTO test_claims VALUES (new.call_id); END;",
    );
    let slow = json!({ "quotas": { "invocationsPerSecond": 1, "invocationBurst": 1 } });
    let (status, body) = server.call_as(Some(TOKEN), Method::PATCH, "/admin/tenants/default", Some(&slow)).await;
    assert_eq!(status, 200, "{body}");
    let echo = |call_id: &str| request_with_id(call_id, "Default.Echo", json!({ "text": "hi" }));
    // Fresh call ids until the rate refuses one.
    let (mut ran, mut refused) = (0, None);
    for i in 0..50 {
        let answer = call(&server, "/otc/tools/call", &echo(&format!("call-{i}"))).await;
        match answer.status {
            200 => ran += 1,
            503 => {
                refused = Some((format!("call-{i}"), answer));
                break;
            }
            other => panic!("answered {other}: {}", answer.body),
        }
    }
    let (refused_id, refused) = refused.expect("the rate refused a call");
    assert_eq!(refused.body["code"], "rate_limited", "{}", refused.body);
    // Only the calls that ran were claimed.
    assert_eq!(server.stored_count("SELECT count(*) FROM test_claims"), ran, "a refused call's id was claimed");
    assert_eq!(server.stored_count("SELECT count(*) FROM idempotent_calls"), ran);
    // Answered as a call without a call id over the rate is.
    let without = call(&server, "/otc/tools/call", &request("Default.Echo", json!({ "text": "hi" }))).await;
    assert_eq!((without.status, &without.body["code"]), (503, &refused.body["code"]), "{}", without.body);
    // Its call id is free: once the rate allows, it runs.
    let fast = json!({ "quotas": { "invocationsPerSecond": 1000, "invocationBurst": 2000 } });
    let (status, body) = server.call_as(Some(TOKEN), Method::PATCH, "/admin/tenants/default", Some(&fast)).await;
    assert_eq!(status, 200, "{body}");
    let retried = call(&server, "/otc/tools/call", &echo(&refused_id)).await;
    assert_eq!((retried.status, retried.replayed), (200, false), "{}", retried.body);
    assert_eq!(retried.body["result"]["value"]["text"], "hi", "{}", retried.body);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retried_call_id_runs_the_tool_once() {
    let (url, backend_calls) = weather_backend().await;
    let config = format!("lookup_weather_by_city.backend-url={url}");
    let plugins = plugins_dir();
    let args =
        ["--plugins", plugins.to_str().unwrap(), "--tool-config", &config, "--allow-private-cidr", "127.0.0.0/8"];
    let server = Server::start_in(tempfile::tempdir().unwrap(), &args);
    let omaha = |call_id: &str| {
        json!({ "request": {
            "call_id": call_id,
            "tool_id": "Weather.LookupWeatherByCity",
            "input": { "city": "Omaha, Nebraska", "units": "FAHRENHEIT" },
        } })
    };

    // Each run makes two backend requests (geocode, forecast).
    let first = call(&server, "/otc/tools/call", &omaha("trip-1")).await;
    assert_eq!(first.body["result"]["value"]["temperature"], 80, "{}", first.body);
    assert_eq!((backend_calls.get(), first.replayed), (2, false));
    let retry = call(&server, "/otc/call", &omaha("trip-1")).await;
    assert_eq!((retry.body.clone(), retry.replayed), (first.body.clone(), true));
    assert_eq!(backend_calls.get(), 2, "the retry did not run the tool");

    // The same call id for another request is refused, not answered.
    let mut paris = omaha("trip-1");
    paris["request"]["input"]["city"] = "Paris".into();
    let reused = call(&server, "/otc/tools/call", &paris).await;
    assert_eq!((reused.status, reused.body["code"].as_str()), (400, Some("call_id_reused")), "{}", reused.body);

    // Retries racing the first call wait for it and get its answer.
    let trip = omaha("trip-2");
    let racer = || call(&server, "/otc/tools/call", &trip);
    let (a, b, c, d) = tokio::join!(racer(), racer(), racer(), racer());
    let racing = [a, b, c, d];
    assert_eq!(backend_calls.get(), 4, "four racing calls with one call id ran once");
    assert!(racing.iter().all(|a| a.body == racing[0].body && a.body["result"]["call_id"] == "trip-2"));
    assert_eq!(racing.iter().filter(|a| !a.replayed).count(), 1);

    // Without a call id every call runs.
    let mut anonymous = omaha("x");
    anonymous["request"].as_object_mut().unwrap().remove("call_id");
    call(&server, "/otc/tools/call", &anonymous).await;
    call(&server, "/otc/tools/call", &anonymous).await;
    assert_eq!(backend_calls.get(), 8);

    // Call ids are each caller's own: another key's "trip-1" is a new call.
    let (_, consumer) = server.create_key(Some("default"), "consumer").await;
    let theirs = call_as(&server, &consumer, "/otc/tools/call", &omaha("trip-1")).await;
    assert_eq!((theirs.replayed, backend_calls.get()), (false, 10));

    // The record outlives a restart.
    let server = Server::start_in(server.stop(), &args);
    let after = call(&server, "/otc/tools/call", &omaha("trip-1")).await;
    assert_eq!((after.body, after.replayed, backend_calls.get()), (first.body, true, 10));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tenants_call_ledger_forgets_its_oldest_records_past_its_quota() {
    let server = Server::start(&[]);
    let quota = json!({ "quotas": { "maxRecordedCalls": 64 } });
    let (status, body) = server.call_as(Some(TOKEN), Method::PATCH, "/admin/tenants/default", Some(&quota)).await;
    assert_eq!((status, &body["quotas"]["maxRecordedCalls"]), (200, &json!(64)), "{body}");
    let echo = |n: usize| request_with_id(&format!("c{n}"), "Default.Echo", json!({ "text": n.to_string() }));
    for n in 0..100 {
        let answer = call(&server, "/otc/tools/call", &echo(n)).await;
        assert_eq!((answer.status, answer.replayed), (200, false), "{}", answer.body);
    }
    // The newest calls are still answered from their records...
    for n in [99, 60] {
        let retry = call(&server, "/otc/tools/call", &echo(n)).await;
        assert!(retry.replayed, "c{n} was forgotten: {}", retry.body);
    }
    // ...the oldest were forgotten to keep the tenant within its quota: a
    // retry runs again.
    let retry = call(&server, "/otc/tools/call", &echo(0)).await;
    assert_eq!((retry.status, retry.replayed), (200, false), "{}", retry.body);
}

/// The bytes under `dir`, every file counted.
fn stored_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            let meta = entry.metadata().unwrap();
            if meta.is_dir() { stored_bytes(&entry.path()) } else { meta.len() }
        })
        .sum()
}

/// A call id whose tool still runs when the operator stops the server, its
/// caller gone: the server lets it finish and records its answer, so the
/// retry after the restart gets that answer, not `call_outcome_unknown`
/// (which is left to a server that died).
#[tokio::test(flavor = "multi_thread")]
async fn a_stop_lets_a_claimed_call_finish_and_records_its_answer() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("spin_forever.wasm"), fixture("spin_forever.wasm")).unwrap();
    let args = ["--plugins", dir.path().to_str().unwrap()];
    let server = Server::start_in(tempfile::tempdir().unwrap(), &args);
    let mut body = request("Default.SpinForever", json!({ "note": "in flight" }));
    body["request"]["call_id"] = "in-flight-1".into();
    let calling = tokio::spawn(server.request(Method::POST, "/otc/tools/call").json(&body).send());
    // Claimed, its answer not yet recorded: the tool runs, to its 5 s deadline.
    let in_flight = "SELECT count(*) FROM idempotent_calls WHERE call_id = 'in-flight-1' AND response IS NULL";
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while server.stored_count(in_flight) == 0 {
        assert!(std::time::Instant::now() < deadline, "the call id was never claimed");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    calling.abort();
    let data = tokio::task::block_in_place(|| server.terminate());
    let log = std::fs::read_to_string(data.path().join("server.log")).unwrap();
    assert!(log.contains("waiting for calls to finish"), "{log}");

    let server = Server::start_in(data, &args);
    let retry = call(&server, "/otc/tools/call", &body).await;
    assert!(retry.replayed, "{}", retry.body);
    assert_eq!(retry.body["result"]["error"]["developer_message"], "tool_timeout", "{}", retry.body);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_oversize_tool_error_is_refused_like_an_oversize_output_and_never_kept() {
    let plugins = tempfile::tempdir().unwrap();
    std::fs::write(plugins.path().join("huge_error.wasm"), fixture("huge_error.wasm")).unwrap();
    let args = ["--plugins", plugins.path().to_str().unwrap(), "--max-output-kib", "1"];
    let server = Server::start_in(tempfile::tempdir().unwrap(), &args);
    let huge = |field: &str, kib: u32| json!({ "kibibytes": kib, "field": field });

    // A2T: each text field of the tool-error is capped like an output.
    for field in ["message", "developer-message", "additional-prompt-content"] {
        let (status, body) = server.invoke("huge_error", &[("kibibytes", json!(4096)), ("field", json!(field))]).await;
        assert_eq!((status, &body["error"]["code"]), (422, &json!("output_too_large")), "{field}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(&format!("the tool-error's `{field}` is 4194306 bytes; at most 1024")), "{message}");
    }
    // Under the cap, the tool's own error is answered as ever.
    let (status, body) =
        server.invoke("huge_error", &[("kibibytes", json!(0)), ("field", json!("developer-message"))]).await;
    assert_eq!(
        (status, &body["error"]["code"], &body["error"]["message"]),
        (422, &json!("tool_error"), &json!("failed"))
    );

    // OTC with a call id: the refusal is what is kept, not the 4 MiB.
    let before = stored_bytes(server.data.path());
    let body =
        json!({ "request": { "call_id": "huge-1", "tool_id": "Default.HugeError", "input": huge("message", 4096) } });
    let first = call(&server, "/otc/tools/call", &body).await;
    let result = &first.body["result"];
    assert_eq!(
        (first.status, &result["success"], &result["error"]["developer_message"]),
        (200, &json!(false), &json!("output_too_large")),
        "{}",
        first.body
    );
    assert!(result["error"]["message"].as_str().unwrap().contains("the tool-error's `message` is 4194306 bytes"));
    let retry = call(&server, "/otc/tools/call", &body).await;
    assert_eq!((retry.status, &retry.body, retry.replayed), (200, &first.body, true));
    let grown = stored_bytes(server.data.path()) - before;
    assert!(grown < 1 << 20, "the data dir grew by {grown} bytes");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_waiting_for_its_end_user_is_answered_on_schema_with_the_uri_pack() {
    let (server, _plugins) = crate::cheq::confirming_server(&[]).await;
    // The listing says who needs an end user, on schema.
    let tools = list(&server, TOKEN, "").await;
    assert_eq!(definition(&tools, "Travel.BookFlight@1.0.0")["requirements"]["user_id"], true);

    let mut body = request(
        "Travel.BookFlight",
        json!({ "flight_number": "UA123", "date": "2026-12-24", "passengers": 1, "cabin_class": "FIRST" }),
    );
    body["request"]["call_id"] = "pending-1".into();
    body["request"]["context"] = json!({ "user_id": "alice" });
    let answer = call(&server, "/otc/tools/call", &body).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let result = &answer.body["result"];
    assert_eq!((&result["call_id"], &result["success"]), (&json!("pending-1"), &json!(false)), "{}", answer.body);
    assert_eq!(result["error"]["developer_message"], "confirmation_pending");
    let result_uri = answer.body["result uri"].as_str().unwrap();
    assert!(result["error"]["message"].as_str().unwrap().contains(result_uri), "{}", answer.body);
    assert!(answer.body["resource uri"].is_string() && answer.body["confirmation uri"].is_string());
    // The retry of the call id: the same answer, replayed.
    let again = call(&server, "/otc/tools/call", &body).await;
    assert!(again.replayed);
    assert_eq!(again.body, answer.body);
}

/// Per-call secrets are OTC's alone (`context.secrets`): A2T and MCP calls
/// bring none, so only this door can meet `confirmation_cannot_wait`.
#[tokio::test(flavor = "multi_thread")]
async fn a_call_that_waits_for_its_end_user_cannot_bring_the_secrets_its_tool_reads() {
    let (server, _plugins) = crate::cheq::confirming_server(&[]).await;
    let (status, deployed) = server.deploy(fixture("use_secret.wasm"), "").await;
    assert_eq!(status, 201, "{deployed}");
    let policy = format!("/admin/tools/{}/confirmation", deployed["toolId"].as_str().unwrap());
    let (status, body) = server.call_as(Some(TOKEN), Method::PUT, &policy, Some(&json!({ "required": true }))).await;
    assert_eq!(status, 204, "{body}");
    let put = server.request(Method::PUT, "/admin/secrets/api-key").body("stored-value").send().await.unwrap();
    assert_eq!(put.status(), 204);

    // The call would run later, with its secret long gone: refused now.
    let mut body = request("Default.UseSecret", json!({ "log_lines": 0, "fail": false }));
    body["request"]["call_id"] = "cannot-wait-1".into();
    body["request"]["context"] =
        json!({ "user_id": "alice", "secrets": [{ "id": "api-key", "value": "sk-call-scoped-5c0ffee" }] });
    let refused = call(&server, "/otc/tools/call", &body).await;
    assert_eq!((refused.status, &refused.body["code"]), (400, &json!("confirmation_cannot_wait")), "{}", refused.body);
    let message = refused.body["message"].as_str().unwrap();
    assert!(message.contains("`api-key`") && message.contains("did not run"), "{message}");
    assert!(!server.logs().contains("the api key is"), "the tool never ran");
    assert_eq!(server.stored_confirmations(), 0, "no transaction was opened");

    // Nothing was kept for the call id: without the secret, the same call
    // waits for alice (and will run with the stored one).
    body["request"]["context"] = json!({ "user_id": "alice" });
    let waiting = call(&server, "/otc/tools/call", &body).await;
    assert!(!waiting.replayed, "{}", waiting.body);
    assert_eq!(waiting.body["result"]["error"]["developer_message"], "confirmation_pending", "{}", waiting.body);
    assert_eq!(server.stored_confirmations(), 1);

    // A secret the tool does not read is ignored by any call, so it does not
    // keep the call from waiting.
    let echo = format!("/admin/tools/{}/confirmation", server.tool_id("echo").await);
    assert_eq!(server.call_as(Some(TOKEN), Method::PUT, &echo, Some(&json!({ "required": true }))).await.0, 204);
    let mut body = request("Default.Echo", json!({ "text": "hi" }));
    body["request"]["context"] =
        json!({ "user_id": "alice", "secrets": [{ "id": "unrelated", "value": "sk-not-for-echo-1" }] });
    let waiting = call(&server, "/otc/tools/call", &body).await;
    assert_eq!(waiting.body["result"]["error"]["developer_message"], "confirmation_pending", "{}", waiting.body);
    assert_eq!(server.stored_confirmations(), 2);
}

/// `503` when the server cannot take calls: another process holds the
/// database's write lock (an operator's `sqlite3` shell mid-transaction, a
/// tool copying the database), so no call id or confirmation can be
/// recorded.
#[tokio::test(flavor = "multi_thread")]
async fn health_is_503_while_the_store_cannot_record_calls() {
    let server = Server::start(&[]);
    let health = || send(server.request_as(None, Method::GET, "/otc/health"), None);
    assert_eq!(health().await.status, 200);

    let db = rusqlite::Connection::open(server.data.path().join("registry.sqlite3")).unwrap();
    db.execute_batch("BEGIN IMMEDIATE").unwrap();
    let unhealthy = health().await;
    assert_eq!(unhealthy.status, 503, "{}", unhealthy.body);
    assert!(unhealthy.body["message"].is_string(), "a ServerErrorResponse: {}", unhealthy.body);
    // Honestly so: a call that must be recorded is refused, and does not run.
    let mut echo = request("Default.Echo", json!({ "text": "hi" }));
    echo["request"]["call_id"] = "while-locked".into();
    let refused = call(&server, "/otc/tools/call", &echo).await;
    assert_eq!(refused.body["code"], "storage_failed", "{}", refused.body);

    db.execute_batch("ROLLBACK").unwrap();
    assert_eq!(health().await.status, 200);
    let answer = call(&server, "/otc/tools/call", &echo).await;
    assert_eq!((answer.status, answer.replayed), (200, false), "the call id was left free: {}", answer.body);
    assert_eq!(answer.body["result"]["value"]["text"], "hi", "{}", answer.body);
}
