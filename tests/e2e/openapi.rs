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
    // The example tools, and a second tenant with a tool of its own.
    let server = Server::start(&[]);
    server.create_tenant("acme", json!({})).await;
    let echo = std::fs::read(crate::support::plugins_dir().join("echo.wasm")).unwrap();
    let (status, deployed) = server.deploy_as(TOKEN, "acme", echo).await;
    assert_eq!(status, 201, "{deployed}");

    let report = tempfile::tempdir().unwrap();
    let mut st = Command::new(tools.join("venv/bin/st"));
    st.current_dir(report.path())
        .env("SCHEMATHESIS_HOOKS", "")
        .args(["run", &format!("{}/openapi.json", server.base), "--url", &server.base])
        .args(["--header", &format!("Authorization: Bearer {TOKEN}")])
        .args(["--generation-with-security-parameters", "false"])
        .args(["--checks", CHECKS])
        .args(["--phases", "examples,coverage,fuzzing,stateful"])
        // Deterministic and bounded: the same cases every run, a few per
        // operation, one request at a time, none waiting long.
        .args(["--seed", "20260728", "--generation-database", "none", "--max-examples", "25"])
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
    let count: usize =
        documented["paths"].as_object().unwrap().values().map(|item| item.as_object().unwrap().len()).sum();
    assert_eq!(operations["total"], count, "{output}");
    assert_eq!(operations["tested"], count, "every operation tested:\n{output}");
    assert_eq!(operations["skipped"], 0, "{output}");
    for phase in ["examples", "coverage", "fuzzing", "stateful"] {
        assert_eq!(summary["phases"][phase]["status"], "success", "phase {phase}:\n{output}");
    }
    assert!(summary["test_cases"]["generated"].as_u64().unwrap_or(0) > count as u64, "{output}");
}
