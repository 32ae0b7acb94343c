//! The official MCP conformance suite (`@modelcontextprotocol/conformance`,
//! pinned in tests/mcp-clients/package-lock.json) against the real binary
//! serving the example tools: every scenario a revision requires passes,
//! but for those tests/mcp-clients/conformance-baseline.yml names (the ones
//! that need the reference server's own test tools, prompts or resources).
//!
//! The suite sends no credentials, so it talks to the door through
//! [`AuthProxy`], which adds a consumer key and changes nothing else.

use crate::mcp_support::{AuthProxy, conformance_cli, node_command, serve_example_tools};
use std::path::Path;

fn baseline() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/mcp-clients/conformance-baseline.yml")
}

/// The suite's output without its colours (it ignores NO_COLOR).
fn plain(output: &[u8]) -> String {
    let text = String::from_utf8_lossy(output);
    let mut plain = String::with_capacity(text.len());
    let mut rest = text.as_ref();
    while let Some(start) = rest.find("\x1b[") {
        plain.push_str(&rest[..start]);
        rest = &rest[start + 2..];
        let end = rest.find(|c: char| c.is_ascii_alphabetic()).map_or(rest.len(), |i| i + 1);
        rest = &rest[end..];
    }
    plain.push_str(rest);
    plain
}

/// The checks (from `--output-dir`) that failed or warned, of the scenarios
/// the baseline check named as unexpected failures or stale entries.
fn failed_checks(stdout: &str, results: &Path) -> String {
    let named: std::collections::BTreeSet<&str> = stdout
        .lines()
        .filter_map(|line| line.strip_prefix("  ✗ ").or_else(|| line.strip_prefix("  ✓ ")))
        .map(|entry| entry.split(':').next().unwrap().trim())
        .collect();
    let mut report = String::new();
    let Ok(dirs) = std::fs::read_dir(results) else { return report };
    let mut dirs: Vec<_> = dirs.map_while(Result::ok).map(|d| d.path()).collect();
    dirs.sort();
    for dir in dirs {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        // server-<scenario>-<ISO timestamp>
        let Some(scenario) = name.strip_prefix("server-").and_then(|n| n.get(..n.len().saturating_sub(25))) else {
            continue;
        };
        if !named.contains(scenario) {
            continue;
        }
        let checks: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("checks.json")).unwrap_or_default()).unwrap_or_default();
        for check in checks.as_array().into_iter().flatten() {
            if check["status"] == "FAILURE" || check["status"] == "WARNING" {
                report.push_str(&format!("{scenario}: {check}\n"));
            }
        }
    }
    report
}

/// `conformance server --requirements REVISION` through the proxy at the
/// tenant's `/mcp`; fails with the suite's whole report on any unexpected
/// failure or stale baseline entry.
async fn conformance(revision: &str) {
    let (server, _weather) = serve_example_tools().await;
    conformance_at(&server, revision, "/mcp").await;
}

/// The suite at `path`, through the proxy with a consumer key.
async fn conformance_at(server: &crate::support::Server, revision: &str, path: &str) {
    let (_, key) = server.create_key(Some("default"), "consumer").await;
    let proxy = AuthProxy::start(&server.base, &key);
    let work = tempfile::tempdir().unwrap();
    // Each scenario's checks.json; kept where PLINTH_TEST_CONFORMANCE_RESULTS says, if set.
    let results = match std::env::var_os("PLINTH_TEST_CONFORMANCE_RESULTS") {
        Some(dir) => Path::new(&dir).join(revision),
        None => work.path().join("results"),
    };
    let mut command = node_command(&conformance_cli(), work.path());
    command
        .current_dir(work.path())
        .args(["server", "--url", &format!("{}{path}", proxy.base), "--requirements", revision])
        .arg("--expected-failures")
        .arg(baseline())
        .arg("--output-dir")
        .arg(&results);
    let output =
        tokio::task::spawn_blocking(move || command.output()).await.unwrap().expect("the conformance CLI runs");
    let stdout = plain(&output.stdout);
    let stderr = plain(&output.stderr);
    let report = format!(
        "conformance server --requirements {revision}: {}\n--- stdout\n{stdout}\n--- stderr\n{stderr}\n\
         --- the checks that failed or warned, of the scenarios named above\n{}\n--- plinth's log\n{}",
        output.status,
        failed_checks(&stdout, &results),
        server.logs()
    );
    assert!(output.status.success(), "{report}");
    assert!(stdout.contains("Baseline check passed"), "{report}");
    assert!(stdout.contains("tools-list: "), "the suite ran no tools-list scenario: {report}");
    drop(proxy);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_conformance_suite_passes_at_2026_07_28() {
    conformance("2026-07-28").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_conformance_suite_passes_at_2025_11_25() {
    conformance("2025-11-25").await;
}

/// Issue 66: at a toolset's root whose every tool carries its designer's
/// words (the tool's and its parameters' descriptions), the suite passes
/// as at the tenant's: only texts differ.
#[tokio::test(flavor = "multi_thread")]
async fn the_conformance_suite_passes_at_a_toolset_root_serving_its_designers_words() {
    let (server, _weather) = serve_example_tools().await;
    let words = |tool: &str, input: &str| {
        serde_json::json!({ "name": tool, "description": format!("The designer's words for {tool}."),
            "inputDescriptions": { input: format!("The designer's words for {input}.") } })
    };
    let body = serde_json::json!({ "tools": [words("echo", "text"), words("book_flight", "date"),
        words("lookup_weather_by_city", "city")] });
    let (status, put) =
        server.call_as(Some(crate::support::TOKEN), reqwest::Method::PUT, "/admin/toolsets/worded", Some(&body)).await;
    assert_eq!(status, 201, "{put}");
    conformance_at(&server, "2026-07-28", "/t/default/toolsets/worded/mcp").await;
}

/// `conformance authorization` against the default tenant's authorization
/// server: its metadata scenario, and the authorization code grant with a
/// client registered for the suite's callback, driven as the person's
/// browser (the suite prints the URL for one) signing in as an end user.
#[tokio::test(flavor = "multi_thread")]
async fn the_conformance_suites_authorization_server_scenarios_pass() {
    use std::io::{BufRead, BufReader};
    let server = crate::support::Server::start(&[]);
    let password = serde_json::json!({ "password": "alice-password" });
    let (status, _) = server
        .call_as(Some(crate::support::TOKEN), reqwest::Method::PUT, "/admin/end-users/alice", Some(&password))
        .await;
    assert_eq!(status, 204);
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let callback = format!("http://127.0.0.1:{port}/callback");
    let metadata = serde_json::json!({ "client_name": "Conformance suite", "redirect_uris": [callback],
                                       "application_type": "native" });
    let registered: serde_json::Value = reqwest::Client::new()
        .post(format!("{}/oauth/register", server.base))
        .json(&metadata)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let client_id = registered["client_id"].as_str().unwrap().to_string();
    let work = tempfile::tempdir().unwrap();
    let mut command = node_command(&conformance_cli(), work.path());
    command.current_dir(work.path()).args([
        "authorization",
        "--url",
        &server.base,
        "--client-id",
        &client_id,
        "--resource",
        &format!("{}/mcp", server.base),
        "--port",
        &port.to_string(),
    ]);
    let mut child = command.stdout(std::process::Stdio::piped()).spawn().expect("the conformance CLI runs");
    let stdout = child.stdout.take().unwrap();
    let (lines, mut seen) = (std::sync::mpsc::channel(), String::new());
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines.0.send(line).is_err() {
                break;
            }
        }
    });
    let authorize = format!("{}/oauth/authorize?", server.base);
    let mut answered = false;
    while let Ok(line) = lines.1.recv_timeout(std::time::Duration::from_secs(60)) {
        let line = plain(line.as_bytes());
        seen.push_str(&line);
        seen.push('\n');
        if !answered && line.trim().starts_with(&authorize) {
            let back = crate::oauth::allow_at(line.trim(), "alice", "alice-password").await;
            assert!(back.starts_with(&callback), "{back}");
            // The browser follows the redirect to the suite's callback.
            reqwest::get(&back).await.unwrap();
            answered = true;
        }
    }
    let status = child.wait().unwrap();
    assert!(answered, "the suite printed no authorization URL:\n{seen}");
    assert!(status.success() && seen.contains("Total: 3 passed, 0 failed"), "{status}:\n{seen}");
}
