//! The OpenAPI document, end to end: the server serves the committed
//! `docs/openapi.json`, it is valid OpenAPI 3.1, and schemathesis, run
//! against the served document with the operator key, finds no server error
//! and no answer the document does not describe.

use crate::support::{Server, TOKEN, plinth_bin};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// target/schemathesis (`make schemathesis` fills it).
fn tools_dir() -> PathBuf {
    let dir = std::env::var_os("PLINTH_TEST_SCHEMATHESIS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/schemathesis"));
    for tool in ["st", "openapi-spec-validator"] {
        assert!(
            dir.join("venv/bin").join(tool).exists(),
            "{tool} is missing from {}: run `make schemathesis` (or `make test`) first",
            dir.display()
        );
    }
    dir
}

fn committed() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/openapi.json")
}

/// Runs `command` to its end, or kills it after `limit` (a hung run fails
/// the test rather than the CI job). Returns its exit success and output.
fn run_bounded(mut command: Command, limit: Duration) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let (out, err) = (dir.path().join("out"), dir.path().join("err"));
    let mut child = command
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .expect("the tool starts");
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let output = format!(
        "{}\n{}",
        std::fs::read_to_string(&out).unwrap_or_default(),
        std::fs::read_to_string(&err).unwrap_or_default()
    );
    match status {
        Some(status) => (status.success(), output),
        None => panic!("{command:?} did not finish within {limit:?}; its output so far:\n{output}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_served_document_is_the_committed_one_and_valid_openapi_3_1() {
    let tools = tools_dir();
    let server = Server::start(&[]);
    let response = reqwest::get(format!("{}/openapi.json", server.base)).await.unwrap();
    assert_eq!(response.status(), 200, "open to anyone, without a key");
    assert_eq!(response.headers()["content-type"], "application/json");
    let served = response.text().await.unwrap();
    let document: Value = serde_json::from_str(&served).unwrap();
    assert_eq!(document["openapi"], "3.1.0");

    let on_disk = std::fs::read_to_string(committed()).unwrap_or_default();
    assert!(
        served == on_disk,
        "docs/openapi.json differs from the document the server serves: run `make openapi` (plinth openapi > docs/openapi.json) and commit it"
    );
    let printed = Command::new(plinth_bin()).arg("openapi").output().unwrap();
    assert!(printed.status.success());
    assert_eq!(String::from_utf8(printed.stdout).unwrap(), served, "`plinth openapi` prints what the server serves");

    // Server-wide: not under a tenant's root.
    let (status, body) = server.get("/t/default/openapi.json").await;
    assert_eq!((status, &body["error"]["code"]), (404, &json!("not_found")));

    // The document itself, by an OpenAPI 3.1 validator.
    let mut validate = Command::new(tools.join("venv/bin/openapi-spec-validator"));
    validate.arg(committed());
    let (valid, report) = run_bounded(validate, Duration::from_secs(300));
    assert!(valid, "docs/openapi.json is not valid OpenAPI 3.1:\n{report}");
    assert!(report.contains("OK"), "{report}");
}

/// What schemathesis checks on every answer: no `5xx`, and status, content
/// type, headers and body as the document describes them.
const CHECKS: &str = "not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance";

#[tokio::test(flavor = "multi_thread")]
async fn schemathesis_finds_no_server_error_and_no_undocumented_answer() {
    let tools = tools_dir();
    // A registry of the test's own holding the deploy example's artifact
    // (tests/schemathesis/hooks.py sends every reference there).
    let registry = crate::oci::Registry::start(false);
    let echo = std::fs::read(crate::support::plugins_dir().join("echo.wasm")).unwrap();
    let echo_file = tempfile::Builder::new().suffix(".wasm").tempfile().unwrap();
    std::fs::write(echo_file.path(), &echo).unwrap();
    let pushed = Command::new(plinth_bin())
        .arg("push")
        .arg(echo_file.path())
        .arg(registry.reference("acme/echo:1.2.0"))
        .arg("--insecure")
        .output()
        .unwrap();
    assert!(pushed.status.success(), "{}", String::from_utf8_lossy(&pushed.stderr));
    // The example tools, a second tenant with a tool of its own, and the
    // end user of the document's login example.
    let server = Server::start(&["--insecure-registry", &registry.address, "--allow-private-cidr", "127.0.0.1/32"]);
    let password = json!({ "password": "correct horse battery staple" });
    let (status, body) =
        server.call_as(Some(TOKEN), reqwest::Method::PUT, "/admin/end-users/alice", Some(&password)).await;
    assert_eq!(status, 204, "{body}");
    server.create_tenant("acme", json!({})).await;
    let (status, deployed) = server.deploy_as(TOKEN, "acme", echo).await;
    assert_eq!(status, 201, "{deployed}");

    let report = tempfile::tempdir().unwrap();
    let mut st = Command::new(tools.join("venv/bin/st"));
    st.current_dir(report.path())
        .env("SCHEMATHESIS_HOOKS", Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/schemathesis/hooks.py"))
        .env("PLINTH_TEST_REGISTRY", &registry.address)
        .arg("--config-file")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/schemathesis/schemathesis.toml"))
        .args(["run", &format!("{}/openapi.json", server.base), "--url", &server.base])
        .args(["--header", &format!("Authorization: Bearer {TOKEN}")])
        .args(["--generation-with-security-parameters", "false"])
        .args(["--checks", CHECKS])
        .args(["--phases", "examples,coverage,fuzzing,stateful"])
        // Deterministic and bounded: the same cases every run, a few per
        // operation, one request at a time, none waiting long.
        .args(["--seed", "20260728", "--generation-database", "none", "--max-examples", "100"])
        .args(["--workers", "1", "--request-timeout", "20", "--no-color", "--output-truncate", "false"])
        .args(["--report", "json", "--report-json-path"])
        .arg(report.path().join("report.json"));
    let (passed, output) = run_bounded(st, Duration::from_secs(900));
    assert!(passed, "schemathesis found faults (server log below its report):\n{output}\n{}", server.logs());
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(report.path().join("report.json")).unwrap_or_default())
            .unwrap_or(Value::Null);
    // It ran to its end, over every operation of the document, with none
    // skipped and every phase run.
    let operations = &summary["operations"];
    assert_eq!(summary["complete"], true, "{output}");
    assert_eq!(summary["failures"], json!([]), "{output}");
    assert_eq!(summary["errors"], json!([]), "{output}");
    let documented: Value = serde_json::from_str(plinth::api::openapi::rendered()).unwrap();
    // Schemathesis leaves out the operation that serves the document it
    // loaded (GET /openapi.json, which the test above checks).
    let count: usize =
        documented["paths"].as_object().unwrap().values().map(|item| item.as_object().unwrap().len()).sum::<usize>()
            - 1;
    assert_eq!(operations["total"], count, "{output}");
    assert_eq!(operations["tested"], count, "every operation tested:\n{output}");
    assert_eq!(operations["skipped"], 0, "{output}");
    for phase in ["examples", "coverage", "fuzzing", "stateful"] {
        assert_eq!(summary["phases"][phase]["status"], "success", "phase {phase}:\n{output}");
    }
    assert!(summary["test_cases"]["generated"].as_u64().unwrap_or(0) > count as u64, "{output}");
    // Its report, for `--nocapture` (what it reached, its warnings).
    eprintln!("{output}");
}

/// Checks that `body`, answered with `status` to `method` on the documented
/// `path`, is what the document says that operation answers.
fn assert_documented(doc: &Value, method: &str, path: &str, status: u16, body: &Value) {
    let operation = &doc["paths"][path][method];
    assert!(operation.is_object(), "{method} {path} is not in the document");
    let answer = &operation["responses"][status.to_string()];
    let schema = &answer["content"]["application/json"]["schema"];
    assert!(schema.is_object(), "{method} {path} does not document a JSON {status}: {answer}");
    assert_fits(doc, schema, body, &format!("{method} {path} answering {status}"));
}

/// Checks `body` against `schema`, a schema of the document.
fn assert_fits(doc: &Value, schema: &Value, body: &Value, what: &str) {
    // The schema with the document's components beside it, so that its
    // `#/components/schemas/…` references resolve.
    let schema = json!({ "allOf": [schema], "components": doc["components"].clone() });
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator.iter_errors(body).map(|e| format!("{e} at {}", e.instance_path())).collect();
    assert!(errors.is_empty(), "{what}: {body} is not what the document describes: {errors:?}");
}

/// Answers a fuzzer seldom or never reaches — successful calls, the CHEQ
/// flow, deploys — and the router's own refusals, against the document.
#[tokio::test(flavor = "multi_thread")]
async fn real_answers_are_as_the_document_describes() {
    use crate::support::{fixture, invocation};
    use reqwest::Method;
    let doc: Value = serde_json::from_str(plinth::api::openapi::rendered()).unwrap();
    let (server, _plugins) = crate::cheq::confirming_server(&[]).await;
    let call = |method: Method, path: String, body: Option<Value>| {
        let server = &server;
        async move { server.call_as(Some(TOKEN), method, &path, body.as_ref()).await }
    };

    let (status, body) = call(Method::GET, "/tools".into(), None).await;
    assert_documented(&doc, "get", "/tools", status, &body);
    let echo = server.tool_id("echo").await;
    let (status, body) = call(Method::GET, format!("/tools/{echo}"), None).await;
    assert_documented(&doc, "get", "/tools/{tool_id}", status, &body);
    let hello = invocation("echo", &[("text", json!("hello"))]);
    let (status, body) = call(Method::POST, format!("/tools/{echo}:invoke"), Some(hello.clone())).await;
    assert_eq!(status, 200, "{body}");
    assert_documented(&doc, "post", "/tools/{tool_id}:invoke", status, &body);
    let (status, body) = call(Method::POST, format!("/tools/{echo}:invoke"), Some(invocation("echo", &[]))).await;
    assert_eq!(status, 400, "{body}");
    assert_documented(&doc, "post", "/tools/{tool_id}:invoke", status, &body);
    let otc = json!({ "request": { "tool_id": "Default.Echo", "input": { "text": "hello" } } });
    let (status, body) = call(Method::POST, "/otc/tools/call".into(), Some(otc)).await;
    assert_eq!(status, 200, "{body}");
    assert_documented(&doc, "post", "/otc/tools/call", status, &body);

    // A new version, the old one retired.
    let (status, body) = server.deploy(fixture("echo_v2.wasm"), "").await;
    assert_eq!(status, 201, "{body}");
    assert_documented(&doc, "post", "/admin/tools", status, &body);
    let (status, body) = call(Method::DELETE, format!("/admin/tools/{echo}/versions/1"), None).await;
    assert_documented(&doc, "delete", "/admin/tools/{tool_id}/versions/{version}", status, &body);
    let (status, body) = call(Method::GET, format!("/tools/{echo}/versions/1"), None).await;
    assert_eq!(body["retired"], true);
    assert_documented(&doc, "get", "/tools/{tool_id}/versions/{version}", status, &body);
    let (status, body) = call(Method::GET, format!("/tools/{echo}/versions"), None).await;
    assert_documented(&doc, "get", "/tools/{tool_id}/versions", status, &body);

    // A call that waits for its end user, and its transaction.
    let transfer = server.tool_id("transfer_funds").await;
    let response = server
        .request(Method::POST, &format!("/tools/{transfer}:invoke"))
        .header("Plinth-End-User", "alice")
        .json(&invocation("transfer_funds", &[("amount_usd", json!(250))]))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let pack: Value = response.json().await.unwrap();
    assert_eq!(status, 202, "{pack}");
    assert_documented(&doc, "post", "/tools/{tool_id}:invoke", status, &pack);
    let path_of = |uri: &Value| uri.as_str().unwrap().strip_prefix(&server.base).unwrap().to_string();
    let (result, resource) = (path_of(&pack["result uri"]), path_of(&pack["resource uri"]));
    let id = resource.rsplit('/').next().unwrap().to_string();
    let (status, body) = call(Method::GET, result.clone(), None).await;
    assert_documented(&doc, "get", "/cheq/results/{id}", status, &body);
    for path in [resource.clone(), format!("{resource}?raw")] {
        let (status, body) = call(Method::GET, path, None).await;
        assert_documented(&doc, "get", "/cheq/transactions/{id}", status, &body);
    }
    let (status, body) = call(Method::GET, format!("/admin/cheq/{id}"), None).await;
    assert_documented(&doc, "get", "/admin/cheq/{id}", status, &body);
    let (status, body) = call(Method::POST, format!("{resource}?reject"), None).await;
    assert_documented(&doc, "post", "/cheq/transactions/{id}", status, &body);
    let (status, body) = call(Method::GET, result, None).await;
    assert_eq!(status, 403, "{body}");
    assert_documented(&doc, "get", "/cheq/results/{id}", status, &body);

    // Tenants, keys, the audit log, settings.
    let (status, body) = call(Method::POST, "/admin/tenants".into(), Some(json!({ "name": "globex" }))).await;
    assert_documented(&doc, "post", "/admin/tenants", status, &body);
    let (status, body) = call(Method::GET, "/admin/tenants".into(), None).await;
    assert_documented(&doc, "get", "/admin/tenants", status, &body);
    let (status, body) =
        call(Method::POST, "/admin/keys".into(), Some(json!({ "tenant": "globex", "role": "consumer" }))).await;
    assert_documented(&doc, "post", "/admin/keys", status, &body);
    let (status, body) = call(Method::DELETE, format!("/admin/keys/{}", body["id"].as_str().unwrap()), None).await;
    assert_documented(&doc, "delete", "/admin/keys/{id}", status, &body);
    let (status, body) = call(Method::GET, "/admin/keys".into(), None).await;
    assert_documented(&doc, "get", "/admin/keys", status, &body);
    let (status, body) = call(Method::GET, "/admin/audit".into(), None).await;
    assert_documented(&doc, "get", "/admin/audit", status, &body);
    let (status, body) = call(Method::GET, format!("/admin/tools/{transfer}/confirmation"), None).await;
    assert_documented(&doc, "get", "/admin/tools/{tool_id}/confirmation", status, &body);
    let (status, body) = call(Method::GET, "/.well-known/jwks.json".into(), None).await;
    assert_documented(&doc, "get", "/.well-known/jwks.json", status, &body);

    // The router's own refusals, in the same shape: a body over the
    // route's limit, a path parameter that is not UTF-8, a method the
    // route does not take.
    let response = server.request(Method::PUT, "/admin/secrets/big").body(vec![b'a'; 70 * 1024]).send().await.unwrap();
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    assert_eq!((status, &body["error"]["code"]), (413, &json!("request_too_large")));
    assert_documented(&doc, "put", "/admin/secrets/{id}", status, &body);
    let (status, body) = call(Method::DELETE, "/admin/secrets/%FF".into(), None).await;
    assert_eq!((status, &body["error"]["code"]), (400, &json!("invalid_request")));
    assert_documented(&doc, "delete", "/admin/secrets/{id}", status, &body);
    let response = server.request(Method::PATCH, "/admin/keys").send().await.unwrap();
    assert_eq!(response.headers()["allow"], "GET,HEAD,POST");
    let body: Value = response.json().await.unwrap_or(Value::Null);
    assert_eq!(body["error"]["code"], "method_not_allowed");
    assert_fits(&doc, &json!({ "$ref": "#/components/schemas/ErrorBody" }), &body, "PATCH /admin/keys");
}
