//! The MCP Inspector's headless CLI (`@modelcontextprotocol/inspector`,
//! pinned in tests/mcp-clients/package-lock.json) lists the example tools
//! and calls each one over the MCP door, in both protocol eras: the
//! 2025-11-25 handshake ("legacy") and stateless 2026-07-28 ("modern").

use crate::mcp_support::{inspector_cli, node_command, serve_example_tools};
use serde_json::{Value, json};
use std::path::Path;

/// What one Inspector run printed, and how it ended.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    fn report(&self) -> String {
        format!("exit {:?}\n--- stdout\n{}\n--- stderr\n{}", self.code, self.stdout, self.stderr)
    }

    /// The result the Inspector printed (`{"result": …}` on stdout).
    fn result(&self) -> Value {
        let printed: Value =
            serde_json::from_str(self.stdout.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.report()));
        assert!(printed["result"].is_object(), "{}", self.report());
        printed["result"].clone()
    }

    /// The result of a run that succeeded.
    fn json(&self) -> Value {
        assert_eq!(self.code, Some(0), "{}", self.report());
        self.result()
    }
}

/// `mcp-inspector --cli URL --transport http --header "Authorization: Bearer KEY" ARGS`
async fn inspector(home: &Path, url: &str, key: &str, era: &str, args: &[&str]) -> Run {
    let mut command = node_command(&inspector_cli(), home);
    command
        .current_dir(home)
        .args(["--cli", url, "--transport", "http", "--header", &format!("Authorization: Bearer {key}")])
        .args(["--protocol-era", era, "--format", "json", "--quiet", "--stored-auth-only"])
        .args(["--connect-timeout", "30000"])
        .args(args);
    let output = tokio::task::spawn_blocking(move || command.output()).await.unwrap().expect("the Inspector CLI runs");
    Run {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

async fn call(home: &Path, url: &str, key: &str, era: &str, tool: &str, arguments: Value) -> Run {
    let arguments = arguments.to_string();
    inspector(home, url, key, era, &["--method", "tools/call", "--tool-name", tool, "--tool-args-json", &arguments])
        .await
}

/// The text of a result's first content block.
fn text(result: &Value) -> String {
    let content = result["content"].as_array().unwrap_or_else(|| panic!("no content in {result}"));
    assert_eq!(content[0]["type"], "text", "{result}");
    content[0]["text"].as_str().unwrap().to_string()
}

/// A successful call's structuredContent, also present as JSON text.
fn structured(result: &Value) -> Value {
    assert_ne!(result["isError"], true, "{result}");
    let structured = result["structuredContent"].clone();
    assert!(structured.is_object(), "no structuredContent in {result}");
    let text: Value =
        serde_json::from_str(&text(result)).unwrap_or_else(|e| panic!("text block not JSON ({e}): {result}"));
    assert_eq!(text, structured, "the text block carries the same result");
    structured
}

#[tokio::test(flavor = "multi_thread")]
async fn the_inspector_lists_and_calls_every_example_tool() {
    let (server, _weather) = serve_example_tools().await;
    let (_, key) = server.create_key(Some("default"), "consumer").await;
    let url = format!("{}/mcp", server.base);
    // The Inspector's catalog, client config and OAuth state stay here.
    let home = tempfile::tempdir().unwrap();
    let home = home.path();

    for era in ["legacy", "modern"] {
        let context = |run: &Run| format!("era {era}: {}\n--- plinth's log\n{}", run.report(), server.logs());

        // `--strict`: the Inspector's schema portability check, in full;
        // it exits 6 on an error and names every warning.
        let run = inspector(home, &url, &key, era, &["--method", "tools/list", "--strict"]).await;
        let listing = run.json();
        assert!(!run.stderr.contains("Warning:"), "schema portability warnings: {}", context(&run));
        let tools = listing["tools"].as_array().unwrap_or_else(|| panic!("no tools: {}", context(&run)));
        let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["book_flight", "echo", "lookup_weather_by_city"], "{}", context(&run));
        for tool in tools {
            assert!(!tool["description"].as_str().unwrap_or_default().is_empty(), "{tool}");
            assert_eq!(tool["inputSchema"]["type"], "object", "{tool}");
            assert_eq!(tool["outputSchema"]["type"], "object", "{tool}");
            assert_eq!(tool["_meta"]["version"], 1, "{tool}");
            assert!(uuid::Uuid::parse_str(tool["_meta"]["toolId"].as_str().unwrap_or_default()).is_ok(), "{tool}");
            let sha256 = tool["_meta"]["sha256"].as_str().unwrap_or_default();
            assert!(sha256.len() == 64 && sha256.bytes().all(|b| b.is_ascii_hexdigit()), "{tool}");
        }
        let echo = &tools[1];
        assert_eq!(echo["inputSchema"]["properties"]["text"]["type"], "string", "{echo}");
        assert_eq!(echo["inputSchema"]["required"], json!(["text"]), "{echo}");

        let run = call(home, &url, &key, era, "echo", json!({"text": "héllo from the Inspector"})).await;
        assert_eq!(structured(&run.json()), json!({"text": "héllo from the Inspector"}), "{}", context(&run));

        let booking =
            json!({"flight_number": "UA123", "date": "2026-12-24", "passengers": 2, "cabin_class": "PREMIUM_ECONOMY"});
        let run = call(home, &url, &key, era, "book_flight", booking).await;
        let booked = structured(&run.json());
        assert_eq!(booked["total_price_usd"], 840, "{}", context(&run));
        assert_eq!(booked["cabin_class"], "PREMIUM_ECONOMY", "{}", context(&run));
        let code = booked["confirmation_code"].as_str().unwrap();
        assert!(code.len() == 6 && code.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit()), "{code}");

        let run = call(
            home,
            &url,
            &key,
            era,
            "lookup_weather_by_city",
            json!({"city": "Omaha, Nebraska", "units": "FAHRENHEIT"}),
        )
        .await;
        let weather = structured(&run.json());
        assert_eq!(weather["location"], "Omaha, United States", "{}", context(&run));
        assert_eq!(weather["temperature"], 80, "{}", context(&run));
        assert_eq!(weather["units"], "FAHRENHEIT", "{}", context(&run));
        assert_eq!(weather["conditions"], "partly cloudy", "{}", context(&run));
        assert_eq!(weather["coordinates"], json!({"latitude": 41.26, "longitude": -95.94}), "{}", context(&run));

        // The tool's own error: isError with its message (the Inspector
        // exits 5 on it).
        let run = call(home, &url, &key, era, "lookup_weather_by_city", json!({"city": "Atlantis"})).await;
        assert_eq!(run.code, Some(5), "{}", context(&run));
        let failed = run.result();
        assert_eq!(failed["isError"], true, "{}", context(&run));
        assert_eq!(text(&failed), "no city called `Atlantis` is known", "{}", context(&run));
    }
}

/// The Inspector's CLI connecting with OAuth alone, as a person would: it
/// finds the authorization server from the `401`, registers, and opens the
/// sign-in page in "the browser" — here a stand-in `xdg-open` that hands
/// the URL to the test, which signs in as the end user and lets the browser
/// follow the redirect to the Inspector's callback.
#[tokio::test(flavor = "multi_thread")]
async fn the_inspector_connects_with_oauth_and_a_signed_in_end_user() {
    let (server, _weather) = serve_example_tools().await;
    let password = json!({ "password": "alice-password" });
    let (status, _) = server
        .call_as(Some(crate::support::TOKEN), reqwest::Method::PUT, "/admin/end-users/alice", Some(&password))
        .await;
    assert_eq!(status, 204);
    let home = tempfile::tempdir().unwrap();
    let bin = home.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let opened = home.path().join("opened");
    let opener = bin.join("xdg-open");
    std::fs::write(&opener, format!("#!/bin/sh\necho \"$1\" >> '{}'\n", opened.display())).unwrap();
    std::fs::set_permissions(&opener, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut command = node_command(&inspector_cli(), home.path());
    command
        .current_dir(home.path())
        .env("PATH", format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default()))
        .env("BROWSER", &opener)
        .env("MCP_AUTO_OPEN_ENABLED", "true")
        .env("MCP_INSPECTOR_SECRET_STORE", "memory")
        .args(["--cli", &format!("{}/mcp", server.base), "--transport", "http", "--method", "tools/list"])
        .args(["--format", "json", "--callback-url", &format!("http://127.0.0.1:{port}/oauth/callback")]);
    let child = command.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    // The sign-in page's URL, once the Inspector "opens" it.
    let started = std::time::Instant::now();
    let url = loop {
        if let Some(url) = std::fs::read_to_string(&opened).ok().and_then(|s| s.lines().next().map(str::to_string)) {
            break url;
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(60), "the Inspector opened no sign-in page");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert!(url.starts_with(&format!("{}/oauth/authorize?", server.base)), "{url}");
    let back = crate::oauth::allow_at(&url, "alice", "alice-password").await;
    assert!(back.starts_with(&format!("http://127.0.0.1:{port}/oauth/callback?code=")), "{back}");
    reqwest::get(&back).await.unwrap();
    let output = tokio::task::spawn_blocking(move || child.wait_with_output()).await.unwrap().unwrap();
    let run = Run {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    };
    assert_eq!(run.code, Some(0), "{}", run.report());
    let printed: Value = serde_json::from_str(run.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", run.report()));
    let tools = printed["tools"].as_array().or(printed["result"]["tools"].as_array()).cloned().unwrap_or_default();
    assert!(tools.iter().any(|t| t["name"] == "echo"), "{}", run.report());
}
