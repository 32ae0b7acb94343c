//! Versions and the data dir: new bytes of a known tool become its next
//! version, identical bytes change nothing, and everything survives a restart.

use crate::support::{Server, invocation, outputs, plugins_dir, relabeled};
use serde_json::json;

/// The packed echo tool relabeled: the same signature, other bytes.
fn echo_variant(dir: &std::path::Path, label: &str) {
    let bytes = std::fs::read(plugins_dir().join("echo.wasm")).unwrap();
    std::fs::write(dir.join("echo.wasm"), relabeled(&bytes, label)).unwrap();
}

#[tokio::test]
async fn new_bytes_become_the_next_version_and_survive_restarts() {
    let plugins = tempfile::tempdir().unwrap();
    std::fs::copy(plugins_dir().join("echo.wasm"), plugins.path().join("echo.wasm")).unwrap();
    let plugins_arg = plugins.path().to_str().unwrap().to_string();

    let server = Server::start_in(tempfile::tempdir().unwrap(), &["--plugins", &plugins_arg]);
    let id = server.tool_id("echo").await;
    let data = server.stop();

    // Same bytes again: still version 1.
    let server = Server::start_in(data, &["--plugins", &plugins_arg]);
    assert_eq!(server.tool_id("echo").await, id, "the toolId is stable across restarts");
    let (_, tool) = server.get(&format!("/tools/{id}")).await;
    assert_eq!(tool["version"], 1);
    let data = server.stop();

    echo_variant(plugins.path(), "two");
    let data = Server::start_in(data, &["--plugins", &plugins_arg]).stop();
    echo_variant(plugins.path(), "three");
    let server = Server::start_in(data, &["--plugins", &plugins_arg]);

    let (_, tool) = server.get(&format!("/tools/{id}")).await;
    assert_eq!((tool["version"].clone(), tool["currentVersion"].clone()), (json!(3), json!(3)));
    let (_, listing) = server.get("/tools").await;
    assert_eq!(listing["items"].as_array().unwrap().len(), 1, "one entry per tool, at its latest version");

    let (status, versions) = server.get(&format!("/tools/{id}/versions")).await;
    assert_eq!(status, 200);
    let numbers: Vec<_> = versions["items"].as_array().unwrap().iter().map(|v| v["version"].clone()).collect();
    assert_eq!(numbers, [json!(3), json!(2), json!(1)], "newest first");
    for v in versions["items"].as_array().unwrap() {
        assert_eq!(v["currentVersion"], 3);
        assert_eq!(v["toolId"], id);
    }

    // Walk the versions one per page.
    let mut walked = Vec::new();
    let mut path = format!("/tools/{id}/versions?pageLimit=1");
    loop {
        let (status, page) = server.get(&path).await;
        assert_eq!(status, 200);
        walked.push(page["items"][0]["version"].clone());
        match page["paging"]["next"].as_str() {
            Some(next) => path = format!("/tools/{id}/versions?pageLimit=1&pageCursor={next}"),
            None => break,
        }
    }
    assert_eq!(walked, [json!(3), json!(2), json!(1)]);

    let (status, v2) = server.get(&format!("/tools/{id}/versions/2")).await;
    assert_eq!((status, v2["version"].clone(), v2["currentVersion"].clone()), (200, json!(2), json!(3)));

    // Every version stays invocable; the current one answers unpinned calls.
    for path in [
        format!("/tools/{id}:invoke"),
        format!("/tools/{id}/versions/1:invoke"),
        format!("/tools/{id}/versions/2:invoke"),
    ] {
        let (status, body) = server.post(&path, &invocation("echo", &[("text", json!("still here"))])).await;
        assert_eq!((status, outputs(&body)["text"].clone()), (200, json!("still here")), "{path}");
    }

    // Without --plugins, the data dir alone serves everything.
    let server = Server::start_in(server.stop(), &[]);
    let (_, versions) = server.get(&format!("/tools/{id}/versions")).await;
    assert_eq!(versions["items"].as_array().unwrap().len(), 3);
}

#[tokio::test]
async fn a_broken_component_is_skipped_and_the_rest_served() {
    let plugins = tempfile::tempdir().unwrap();
    std::fs::copy(plugins_dir().join("echo.wasm"), plugins.path().join("echo.wasm")).unwrap();
    std::fs::write(plugins.path().join("broken.wasm"), b"\0asm this is not a component").unwrap();
    // Built but never packed: refused with advice.
    let unpacked =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/wasm32-wasip2/plugin/book_flight.wasm");
    if unpacked.exists() {
        std::fs::copy(&unpacked, plugins.path().join("unpacked.wasm")).unwrap();
    }
    let server = Server::start_in(tempfile::tempdir().unwrap(), &["--plugins", plugins.path().to_str().unwrap()]);
    let (status, tools) = server.get("/tools").await;
    assert_eq!((status, tools["items"].as_array().map(Vec::len)), (200, Some(1)));
    let logs = server.logs();
    assert!(logs.contains("broken.wasm") && logs.contains("not deployed"), "{logs}");
    if unpacked.exists() {
        assert!(logs.contains("run `plinth pack` on it"), "{logs}");
    }
}
