//! The official TypeScript SDK v2 (`@modelcontextprotocol/client` 2.4.0),
//! pinned to the 2026-07-28 revision, against the real binary
//! (tests/mcp-clients/typescript/session.mjs): it lists, calls, and opens
//! and closes a `subscriptions/listen` stream as the SDK does — aborting
//! the stream and posting `notifications/cancelled` without an
//! `Mcp-Method` header. Every exchange succeeds, and the server logs no
//! error for a normal close.

use crate::mcp_support::{clients_dir, node_command, serve_example_tools};
use crate::support::TOKEN;
use serde_json::Value;
use std::path::Path;

#[tokio::test(flavor = "multi_thread")]
async fn the_typescript_sdk_v2_lists_calls_and_closes_a_listen_stream_cleanly() {
    let (server, _weather) = serve_example_tools().await;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/mcp-clients/typescript/session.mjs");
    let home = tempfile::tempdir().unwrap();
    let mcp_url = format!("{}/mcp", server.base);
    let output = tokio::task::spawn_blocking(move || {
        node_command(&script, home.path()).arg(clients_dir()).arg(&mcp_url).arg(TOKEN).output().unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the SDK's session failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let session: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap();
    assert!(session["tools"].as_array().unwrap().iter().any(|t| t == "echo"), "{session}");
    assert!(!session["echo"]["isError"].as_bool().unwrap_or(false), "{session}");
    let exchanges = session["exchanges"].as_array().unwrap();
    // Every exchange the SDK made was answered 2xx, the cancellation
    // it posts without an Mcp-Method header among them.
    for exchange in exchanges {
        let status = exchange["status"].as_u64().unwrap();
        assert!((200..300).contains(&status), "{exchange} in {session}");
    }
    let cancelled = exchanges
        .iter()
        .find(|e| e["rpc"] == "notifications/cancelled")
        .unwrap_or_else(|| panic!("the SDK posted no cancellation: {session}"));
    assert_eq!(cancelled["mcpMethod"], Value::Null, "sent without the header, as the SDK sends it: {cancelled}");
    assert_eq!(cancelled["status"], 202, "{cancelled}");
    assert!(exchanges.iter().any(|e| e["rpc"] == "subscriptions/listen"), "{session}");
    // Give the server the time its drain of the closed stream takes.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let logs = server.logs();
    let errors: Vec<&str> = logs.lines().filter(|l| l.contains("ERROR")).collect();
    assert!(errors.is_empty(), "a normal session logged errors:\n{}", errors.join("\n"));
}
