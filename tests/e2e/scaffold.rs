//! A new user's first tool, in each language: `plinth new`, one edit,
//! `plinth pack` (built from source with the pinned toolchain), then served:
//! listed with the signature its WIT docs give, and callable over A2T, OTC
//! and MCP.

use crate::support::{Server, outputs, plinth_bin};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The pinned toolchains `make toolchains` installs (sdk/toolchains).
pub fn toolchains() -> PathBuf {
    let dir = PathBuf::from(std::env::var("PLINTH_TEST_TOOLCHAINS").unwrap_or_else(|_| {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/toolchains").to_string_lossy().into_owned()
    }));
    assert!(
        dir.join("venv/bin/componentize-py").is_file()
            && dir.join("node_modules/@bytecodealliance/componentize-js").is_dir(),
        "no Python and JavaScript toolchains in {}: run `make toolchains`",
        dir.display()
    );
    dir
}

/// `plinth pack DIR -o OUT` with the pinned toolchains; panics with what it
/// said when it fails.
pub fn pack(dir: &Path, out: &Path) {
    let toolchains = toolchains();
    let output = Command::new(plinth_bin())
        .arg("pack")
        .arg(dir)
        .arg("-o")
        .arg(out)
        .env("PLINTH_COMPONENTIZE_PY", toolchains.join("venv/bin/componentize-py"))
        .env("PLINTH_NODE_MODULES", toolchains.join("node_modules"))
        // New Rust tools share one target dir, so their dependencies build once.
        .env("CARGO_TARGET_DIR", Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/new-tools"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "plinth pack {} failed:\n{}",
        dir.display(),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Creates `say-hello` in `language`, changes its greeting as a user edits
/// its one function, packs it and serves it.
async fn new_tool_served(language: &str, source: &str) -> (Server, tempfile::TempDir) {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("say-hello");
    let created =
        Command::new(plinth_bin()).args(["new", "say-hello", "--lang", language, "--dir"]).arg(&dir).output().unwrap();
    assert!(created.status.success(), "{}", String::from_utf8_lossy(&created.stderr));
    assert!(String::from_utf8_lossy(&created.stderr).contains("plinth pack ."), "it says what to do next");

    let code = std::fs::read_to_string(dir.join(source)).unwrap();
    assert!(code.contains("Hello, "), "{code}");
    std::fs::write(dir.join(source), code.replace("Hello, ", "Howdy, ")).unwrap();

    let plugins = work.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    pack(&dir, &plugins.join("say_hello.wasm"));
    let server = Server::start_in(tempfile::tempdir().unwrap(), &["--plugins", plugins.to_str().unwrap()]);
    (server, work)
}

async fn the_new_tool_is_listed_and_callable_over_every_protocol(language: &str, source: &str) {
    let (server, _work) = new_tool_served(language, source).await;

    // Listed with the signature its WIT docs give.
    let (_, listed) = server.get("/tools").await;
    let tool = &listed["items"][0];
    assert_eq!(tool["name"], "say_hello", "{listed}");
    assert!(tool["description"].as_str().unwrap().starts_with("Greets someone by name."), "{tool}");
    let tone = tool["input_parameters"].as_array().unwrap().iter().find(|p| p["name"] == "tone").unwrap();
    assert_eq!((&tone["type"], &tone["required"]), (&json!("enum"), &json!(false)), "{tone}");

    // A2T: the edit is what runs; a refusal comes back as the tool's error.
    let (status, body) = server.invoke("say_hello", &[("name", json!("Ada")), ("tone", json!("WARM"))]).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(outputs(&body)["greeting"], "Howdy, Ada! Lovely to meet you!");
    let (status, body) = server.invoke("say_hello", &[("name", json!("  "))]).await;
    assert_eq!((status, &body["error"]["code"]), (422, &json!("tool_error")), "{body}");
    assert!(body["error"]["additionalPromptContent"].as_str().unwrap().contains("Ask the person"), "{body}");
    let (status, body) = server.invoke("say_hello", &[("name", json!("Ada")), ("times", json!(4))]).await;
    assert_eq!((status, &body["error"]["code"]), (400, &json!("out_of_range")), "{body}");

    // OTC.
    let otc =
        json!({ "request": { "tool_id": format!("Default.SayHello@1.0.0"), "input": { "name": "Ada", "times": 2 } } });
    let (status, body) = server.post("/otc/tools/call", &otc).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"]["value"]["greeting"], "Howdy, Ada. Howdy, Ada.", "{body}");

    // MCP (2025-11-25, stateless).
    let call = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": { "name": "say_hello", "arguments": { "name": "Ada" } } });
    let response = server
        .request(reqwest::Method::POST, "/mcp")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .json(&call)
        .send()
        .await
        .unwrap();
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["result"]["structuredContent"]["greeting"], "Howdy, Ada.", "{answer}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_rust_tool_is_listed_and_callable_over_every_protocol() {
    the_new_tool_is_listed_and_callable_over_every_protocol("rust", "src/lib.rs").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_python_tool_is_listed_and_callable_over_every_protocol() {
    the_new_tool_is_listed_and_callable_over_every_protocol("python", "app.py").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_javascript_tool_is_listed_and_callable_over_every_protocol() {
    the_new_tool_is_listed_and_callable_over_every_protocol("js", "tool.js").await;
}
