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

        let run = inspector(home, &url, &key, era, &["--method", "tools/list"]).await;
        let listing = run.json();
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
