//! A confirmed call whose tool was still running when the server stopped.
//! Killed, the server cannot know what the tool did: after the restart the
//! call's outcome is unknown, said so through every door, and the tool never
//! runs again. Stopped by its operator (`SIGTERM`), the server lets the
//! running call finish first, and keeps its answer.

use crate::cheq::{PageSession, call_for, confirming_server, fetch};
use crate::mcp::{Mcp, arguments, pack_of};
use crate::support::{Server, TOKEN, fixture};
use reqwest::Method;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// A server where every call of `spin_forever` (which runs until its
/// deadline, `deadline_ms`) needs its end user's confirmation.
async fn spinning_server(deadline_ms: u64) -> (Server, tempfile::TempDir, Vec<String>) {
    let args = vec!["--deadline-ms".to_string(), deadline_ms.to_string()];
    let (server, plugins) = confirming_server(&args.iter().map(String::as_str).collect::<Vec<_>>()).await;
    let quotas = json!({ "quotas": { "maxDeadlineMs": deadline_ms } });
    let (status, body) = server.call_as(Some(TOKEN), Method::PATCH, "/admin/tenants/default", Some(&quotas)).await;
    assert_eq!(status, 200, "{body}");
    let (status, deployed) = server.deploy(fixture("spin_forever.wasm"), "").await;
    assert_eq!(status, 201, "{deployed}");
    let policy = format!("/admin/tools/{}/confirmation", deployed["toolId"].as_str().unwrap());
    let (status, body) = server.call_as(Some(TOKEN), Method::PUT, &policy, Some(&json!({ "required": true }))).await;
    assert_eq!(status, 204, "{body}");
    let mut restart = vec!["--plugins".to_string(), plugins.path().to_str().unwrap().to_string()];
    restart.extend(args);
    (server, plugins, restart)
}

/// The result URI of a transaction, from its pack (or its resource URI).
fn result_uri(pack: &Value) -> String {
    match pack["result uri"].as_str() {
        Some(uri) => uri.to_string(),
        None => pack["resource uri"].as_str().unwrap().replace("/cheq/transactions/", "/cheq/results/"),
    }
}

/// `uri` on the restarted server (a new port).
fn rebase(uri: &str, base: &str) -> String {
    format!("{base}{}", &uri[uri.find("/cheq/").unwrap()..])
}

fn transaction(pack: &Value) -> String {
    pack["resource uri"].as_str().unwrap().rsplit('/').next().unwrap().to_string()
}

/// Polls a result URI until the transaction is `state`.
async fn wait_for(result_uri: &str, state: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, _, body) = fetch(result_uri).await;
        if body["state"] == state {
            return;
        }
        assert!(status == 202 && Instant::now() < deadline, "never {state}: {status} {body}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Alice accepts each call on the confirmation page, on requests left
/// waiting for the tools' answers; returns them once every tool runs.
async fn accept_until_running(packs: &[Value]) -> Vec<tokio::task::JoinHandle<(u16, String)>> {
    let session = PageSession::log_in(&packs[0], "alice").await;
    let accepting = packs
        .iter()
        .map(|pack| {
            let (session, pack) = (session.clone(), pack.clone());
            tokio::spawn(async move { session.decide(&pack, "accept").await })
        })
        .collect();
    for pack in packs {
        wait_for(&result_uri(pack), "running").await;
    }
    accepting
}

#[tokio::test(flavor = "multi_thread")]
async fn a_confirmed_call_cut_off_by_a_crash_has_an_unknown_outcome_and_never_runs_again() {
    let (server, _plugins, restart) = spinning_server(60_000).await;

    // One call through each door, each made for alice.
    let (status, _, a2t) = call_for(&server, Some("alice"), "spin_forever", &[("note", json!("a2t"))]).await;
    assert_eq!(status, 202, "{a2t}");
    let otc_call = json!({ "request": {
        "call_id": "cut-off", "tool_id": "Default.SpinForever", "input": { "note": "otc" }, "context": { "user_id": "alice" },
    } });
    let (status, otc) = server.post("/otc/tools/call", &otc_call).await;
    assert_eq!(otc["result"]["error"]["developer_message"], "confirmation_pending", "{status}: {otc}");
    let mcp = Mcp::modern(&server);
    let answer = mcp.call("spin_forever", arguments(&[("note", json!("mcp"))]), json!({ "endUser": "alice" })).await;
    assert_eq!(answer["result"]["resultType"], "input_required", "{answer}");
    let mcp_state = answer["result"]["requestState"].as_str().unwrap().to_string();
    let mcp_pack = pack_of(answer["result"]["inputRequests"]["confirmation"]["params"]["url"].as_str().unwrap());
    let packs = [a2t, otc, mcp_pack];

    // Accepted: the three tools run. The server dies under them.
    for accepting in accept_until_running(&packs).await {
        accepting.abort();
    }
    let server = Server::start_in(server.stop(), &restart.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(server.logs().contains("confirmed calls were running when the server went down"), "{}", server.logs());
    let metrics = server.request(reqwest::Method::GET, "/metrics").send().await.unwrap().text().await.unwrap();
    assert!(metrics.lines().any(|line| line == "plinth_cheq_interrupted_total 3"), "counted: {metrics}");

    // Every door says the outcome is unknown, and none says it succeeded.
    let (status, _, body) = fetch(&rebase(&result_uri(&packs[0]), &server.base)).await;
    assert!(status >= 400, "{status}: {body}");
    assert_eq!(body["error"]["code"], "call_outcome_unknown", "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("may or may not have taken effect"), "{body}");
    let (status, _, body) = fetch(&rebase(&result_uri(&packs[1]), &server.base)).await;
    assert!(status >= 400, "{status}: {body}");
    assert_eq!(
        (&body["code"], body["$schema"].is_string()),
        (&json!("call_outcome_unknown"), true),
        "OTC's shape: {body}"
    );
    let (status, _, body) = fetch(&rebase(&result_uri(&packs[2]), &server.base)).await;
    assert_eq!(body["error"]["code"], "call_outcome_unknown", "{status}: {body}");
    let mcp = Mcp::modern(&server);
    let params = json!({ "name": "spin_forever", "arguments": { "note": "mcp" }, "requestState": mcp_state });
    let (_, answer) = mcp.request("tools/call", params, json!({ "endUser": "alice" })).await;
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    assert_eq!(answer["result"]["_meta"]["code"], "call_outcome_unknown", "{answer}");
    let (_, again) = server.post("/otc/tools/call", &otc_call).await;
    assert_ne!(again["result"]["success"], true, "a retry of the OTC call id: {again}");

    // None can be decided again, so none runs again.
    let session = PageSession::log_in(&rebase_pack(&packs[0], &server.base), "alice").await;
    for pack in &packs {
        let pack = rebase_pack(pack, &server.base);
        let (status, _) = session.page(&pack).await;
        assert_eq!(status, 409, "decided once");
        let (_, evidence) = server.get(&format!("/admin/cheq/{}", transaction(&pack))).await;
        assert_eq!((&evidence["state"], &evidence["result_status"]), (&json!("interrupted"), &Value::Null));
    }
    assert!(!server.logs().contains("the end user accepted the call"), "{}", server.logs());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_operators_stop_lets_a_running_confirmed_call_finish_and_keeps_its_answer() {
    // Long enough to see it run and stop the server under it; short enough to wait for.
    let (server, _plugins, restart) = spinning_server(8_000).await;
    let (status, _, pack) = call_for(&server, Some("alice"), "spin_forever", &[("note", json!("a2t"))]).await;
    assert_eq!(status, 202, "{pack}");
    // The page that accepted it is closed while the tool runs: nobody waits for the answer.
    for accepting in accept_until_running(std::slice::from_ref(&pack)).await {
        accepting.abort();
    }
    let data = tokio::task::block_in_place(|| server.terminate());
    let log = std::fs::read_to_string(data.path().join("server.log")).unwrap();
    assert!(log.contains("waiting for calls to finish"), "{log}");

    let server = Server::start_in(data, &restart.iter().map(String::as_str).collect::<Vec<_>>());
    let (status, _, body) = fetch(&rebase(&result_uri(&pack), &server.base)).await;
    assert_eq!(body["error"]["code"], "tool_timeout", "the tool's own outcome: {status} {body}");
    let (_, evidence) = server.get(&format!("/admin/cheq/{}", transaction(&pack))).await;
    assert_eq!(evidence["state"], "accepted and done", "{evidence}");
}

/// A pack's URIs on the restarted server.
fn rebase_pack(pack: &Value, base: &str) -> Value {
    let mut pack = pack.clone();
    for key in ["confirmation uri", "resource uri", "result uri"] {
        if let Some(uri) = pack[key].as_str().map(|uri| rebase(uri, base)) {
            pack[key] = uri.into();
        }
    }
    pack
}
