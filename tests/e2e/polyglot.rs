//! Python and JavaScript tools, built from source by `plinth pack` with the
//! pinned toolchains (`make toolchains`), against the real server: the
//! examples `plugins/daily-forecast` (Python) and `plugins/get-daily-forecast`
//! (JavaScript), the same tool in each language, calling the stand-in
//! weather service over outbound HTTP; and the fixtures
//! `tests/fixtures/{py,js}-misbehave` for the sandbox. Every test runs per
//! language (`Lang`); each component is built once per test binary.

use crate::mcp::Mcp;
use crate::otc;
use crate::support::{Server, TOKEN, outputs};
use crate::weather::backend;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// A language's example tool and misbehaving fixture.
struct Lang {
    /// The example's directory, under the repository root.
    example: &'static str,
    /// The example's A2T name and OTC id.
    example_tool: &'static str,
    example_otc: &'static str,
    /// The fixture's directory, under the repository root.
    fixture: &'static str,
    fixture_tool: &'static str,
    /// What the log shows of a bug (an exception other than a tool error).
    bug_logged: &'static [&'static str],
    /// Its components, once built.
    built: &'static OnceLock<Built>,
}

struct Built {
    example: Vec<u8>,
    fixture: Vec<u8>,
}

static JS_BUILT: OnceLock<Built> = OnceLock::new();
static PY_BUILT: OnceLock<Built> = OnceLock::new();

const JS: Lang = Lang {
    example: "plugins/get-daily-forecast",
    example_tool: "get_daily_forecast",
    example_otc: "Weather.GetDailyForecast",
    fixture: "tests/fixtures/js-misbehave",
    fixture_tool: "js_misbehave",
    bug_logged: &["the tool failed: TypeError: can't access property \"field\" of null", "tool.js:"],
    built: &JS_BUILT,
};

const PY: Lang = Lang {
    example: "plugins/daily-forecast",
    example_tool: "daily_forecast",
    example_otc: "Weather.DailyForecast",
    fixture: "tests/fixtures/py-misbehave",
    fixture_tool: "py_misbehave",
    bug_logged: &["ZeroDivisionError", "app.py"],
    built: &PY_BUILT,
};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `plinth pack DIR` with the pinned toolchains → the packed component.
fn pack(dir: &Path) -> Vec<u8> {
    let out = tempfile::tempdir().unwrap();
    let packed = out.path().join("tool.wasm");
    crate::scaffold::pack(dir, &packed);
    std::fs::read(packed).unwrap()
}

impl Lang {
    fn built(&self) -> &'static Built {
        self.built.get_or_init(|| Built {
            example: pack(&repo().join(self.example)),
            fixture: pack(&repo().join(self.fixture)),
        })
    }

    /// A copy of the example with `edit` applied to its world, packed.
    fn example_edited(&self, edit: impl Fn(&str) -> String) -> Vec<u8> {
        let copy = tempfile::tempdir().unwrap();
        let source = repo().join(self.example);
        copy_tree(&source, copy.path());
        let world = copy.path().join("wit/world.wit");
        let edited = edit(&std::fs::read_to_string(&world).unwrap());
        std::fs::write(&world, edited).unwrap();
        pack(copy.path())
    }
}

/// Copies a tool's directory; the WIT dependencies (symlinks into the
/// repository's `wit/`) become links to where they point.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let (path, target) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type().unwrap();
        if kind.is_symlink() {
            std::os::unix::fs::symlink(path.canonicalize().unwrap(), target).unwrap();
        } else if kind.is_dir() {
            copy_tree(&path, &target);
        } else {
            std::fs::copy(&path, &target).unwrap();
        }
    }
}

/// Compilations the servers of this binary made, shared: compiling a Python
/// or JavaScript component takes the debug server tens of seconds, and the
/// tests here are about what the tool does once it runs. Each server starts
/// with a copy in its own data dir (where the server looks, and checks each
/// entry before it trusts it); what it compiled at start is copied back.
/// Compiling is still tested: the first server of each component compiles
/// it, and so does every deploy of a new version over the admin API.
/// In cargo's temporary dir for tests (under `target/`, emptied at the first
/// use of each run), so that no run leaves it behind in `/tmp`.
static COMPILED: OnceLock<PathBuf> = OnceLock::new();

fn shared_compiled() -> &'static Path {
    COMPILED.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("polyglot-compiled");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    })
}

fn copy_entries(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).into_iter().flatten().flatten() {
        let target = to.join(entry.file_name());
        if !target.exists() {
            // Written aside (a name of its own: tests run in parallel) and
            // renamed: a server reading `to` never sees half a file.
            let unique = uuid::Uuid::new_v4();
            let partial = to.join(format!(".{}.{unique}.partial", entry.file_name().to_string_lossy()));
            if std::fs::copy(entry.path(), &partial).is_ok() {
                let _ = std::fs::rename(&partial, &target);
            }
        }
    }
}

/// A server with only `components` (file name → bytes) deployed at start.
fn serve(components: &[(&str, &[u8])], extra: &[&str]) -> (Server, tempfile::TempDir) {
    use std::os::unix::fs::DirBuilderExt;
    let plugins = tempfile::tempdir().unwrap();
    for (name, bytes) in components {
        std::fs::write(plugins.path().join(format!("{name}.wasm")), bytes).unwrap();
    }
    let mut args = vec!["--plugins", plugins.path().to_str().unwrap()];
    args.extend_from_slice(extra);
    let shared = shared_compiled();
    let data = tempfile::tempdir().unwrap();
    let compiled = data.path().join("compiled");
    std::fs::DirBuilder::new().mode(0o700).create(&compiled).unwrap();
    copy_entries(shared, &compiled);
    let server = Server::start_in(data, &args);
    copy_entries(&server.data.path().join("compiled"), shared);
    (server, plugins)
}

/// The example, configured to reach the stand-in backend on loopback.
async fn example_server(lang: &Lang) -> (Server, tempfile::TempDir, fake_weather::Counter) {
    let (url, calls) = backend().await;
    let config = format!("{}.backend-url={url}", lang.example_tool);
    let (server, dir) = serve(
        &[(lang.example_tool, &lang.built().example)],
        &["--tool-config", &config, "--allow-private-cidr", "127.0.0.0/8"],
    );
    (server, dir, calls)
}

/// The fixture, with the operator's limits for the sandbox tests.
fn fixture_server(lang: &Lang, extra: &[&str]) -> (Server, tempfile::TempDir) {
    let mut args = vec!["--max-memory-mib", "32", "--deadline-ms", "3000"];
    args.extend_from_slice(extra);
    serve(&[(lang.fixture_tool, &lang.built().fixture)], &args)
}

fn error_code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("(none)")
}

async fn the_signature_comes_from_the_wit_docs(lang: &Lang) {
    let (server, _dir, _) = example_server(lang).await;
    let id = server.tool_id(lang.example_tool).await;
    let (status, tool) = server.get(&format!("/tools/{id}")).await;
    assert_eq!(status, 200, "{tool}");
    assert!(tool["description"].as_str().unwrap().starts_with("Forecasts the weather in a city for the coming days"));
    assert_eq!(tool["tags"], json!(["weather", "retrievals"]));
    let inputs = tool["input_parameters"].as_array().unwrap();
    let names: Vec<&str> = inputs.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["city", "days", "units"]);
    assert_eq!((inputs[0]["type"].clone(), inputs[0]["maxLength"].clone()), (json!("string"), json!(100)));
    assert_eq!(
        (inputs[1]["type"].clone(), inputs[1]["min"].clone(), inputs[1]["max"].clone(), inputs[1]["required"].clone()),
        (json!("int"), json!(1), json!(7), json!(true)),
        "the WIT's u8, narrowed by plinth.toml"
    );
    assert_eq!(inputs[2]["required"], false);
    assert_eq!(
        inputs[2]["allowed-values"],
        json!([
            {"name": "CELSIUS", "description": "Degrees Celsius."},
            {"name": "FAHRENHEIT", "description": "Degrees Fahrenheit."}
        ])
    );
    let outputs: Vec<(&str, &str)> = tool["output_parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap(), p["type"].as_str().unwrap()))
        .collect();
    assert_eq!(outputs, [("location", "string"), ("units", "enum"), ("forecast", "json")]);
}

async fn it_calls_its_backend_and_answers(lang: &Lang) {
    let (server, _dir, calls) = example_server(lang).await;
    let params = [("city", json!("Paris, France")), ("days", json!(3)), ("units", json!("FAHRENHEIT"))];
    let (status, body) = server.invoke(lang.example_tool, &params).await;
    assert_eq!(status, 200, "{body}");
    let out = outputs(&body);
    assert_eq!(out["location"], "Paris, France");
    assert_eq!(out["units"], "FAHRENHEIT");
    assert_eq!(
        out["forecast"],
        json!([
            {"day": 1, "high": 58, "low": 45, "conditions": "overcast"},
            {"day": 2, "high": 58, "low": 44, "conditions": "clear sky"},
            {"day": 3, "high": 59, "low": 43, "conditions": "partly cloudy"}
        ]),
        "14.2 °C is 57.6 °F"
    );
    assert_eq!(calls.get(), 2, "geocode, then the days");

    let (status, body) = server.invoke(lang.example_tool, &[("city", json!("Tokyo")), ("days", json!(1))]).await;
    assert_eq!(status, 200, "{body}");
    let out = outputs(&body);
    assert_eq!(out["units"], "CELSIUS", "Celsius when absent");
    assert_eq!(out["forecast"], json!([{"day": 1, "high": 21, "low": 14, "conditions": "clear sky"}]));
}

async fn invalid_input_never_reaches_the_tool(lang: &Lang) {
    let (server, _dir, calls) = example_server(lang).await;
    let cases = [
        (vec![("city", json!("x".repeat(101))), ("days", json!(1))], "too_long"),
        (vec![("city", json!("Paris")), ("days", json!(8))], "out_of_range"),
        (vec![("city", json!("Paris")), ("days", json!(0))], "out_of_range"),
        (vec![("city", json!("Paris")), ("days", json!(2)), ("units", json!("KELVIN"))], "invalid_enum_value"),
        (vec![("city", json!("Paris"))], "missing_parameter"),
    ];
    for (params, code) in cases {
        let (status, body) = server.invoke(lang.example_tool, &params).await;
        assert_eq!((status, error_code(&body)), (400, code), "{params:?}: {body}");
    }
    assert_eq!(calls.get(), 0);
}

async fn tool_errors_reach_the_caller(lang: &Lang) {
    let (server, _dir, _) = example_server(lang).await;
    let (status, body) = server.invoke(lang.example_tool, &[("city", json!("Atlantis")), ("days", json!(2))]).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "tool_error");
    assert_eq!(body["error"]["message"], "no city called `Atlantis` is known");
    assert_eq!(
        body["error"]["additionalPromptContent"],
        "Ask the user to check the city's spelling or to name a nearby larger city."
    );
    assert_eq!(body["error"]["canRetry"], false);

    // The backend's 503: the tool says it is worth retrying.
    let id = server.tool_id(lang.example_tool).await;
    let call = crate::support::invocation(lang.example_tool, &[("city", json!("Stormville")), ("days", json!(2))]);
    let response = server.post_raw(&format!("/tools/{id}:invoke"), call.to_string()).await;
    assert_eq!(response.status(), 503);
    assert_eq!(response.headers()["retry-after"], "2");
    let body: Value = response.json().await.unwrap();
    assert_eq!((body["error"]["canRetry"].clone(), body["error"]["retryAfterMs"].clone()), (json!(true), json!(2000)));
    assert_eq!(body["error"]["developerMessage"], "backend answered HTTP 503");
}

async fn outbound_calls_are_limited_to_declared_hosts(lang: &Lang) {
    // The example's declared backend, on loopback, without the operator's
    // allowance.
    let (url, calls) = backend().await;
    let config = format!("{}.backend-url={url}", lang.example_tool);
    let (server, _dir) = serve(&[(lang.example_tool, &lang.built().example)], &["--tool-config", &config]);
    let (status, body) = server.invoke(lang.example_tool, &[("city", json!("Paris")), ("days", json!(1))]).await;
    assert_eq!((status, error_code(&body)), (422, "outbound_denied"), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("private network"), "{body}");
    assert_eq!(calls.get(), 0, "the request never left the sandbox");

    // A host the tool does not declare, even with the allowance.
    let (server, _dir) = fixture_server(lang, &["--allow-private-cidr", "127.0.0.0/8"]);
    let target = format!("{}/health", server.base);
    let params = [("act", json!("CALL_UNDECLARED_HOST")), ("url", json!(target))];
    let (status, body) = server.invoke(lang.fixture_tool, &params).await;
    assert_eq!((status, error_code(&body)), (422, "outbound_denied"), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("is not among the hosts the tool declares"), "{body}");
    assert_eq!(server.logs().matches("1 outbound requests refused").count(), 1, "{}", server.logs());
}

async fn config_and_secrets_reach_the_tool(lang: &Lang) {
    let config = format!("{}.greeting=hello", lang.fixture_tool);
    let (server, _dir) = fixture_server(lang, &["--tool-config", &config]);
    let (status, body) = server.invoke(lang.fixture_tool, &[("act", json!("READ_CONFIG"))]).await;
    assert_eq!((status, outputs(&body)["report"].clone()), (200, json!("greeting=hello")), "{body}");

    let (status, body) = server.invoke(lang.fixture_tool, &[("act", json!("READ_SECRET"))]).await;
    assert_eq!((status, outputs(&body)["report"].clone()), (200, json!("api-key=none; undeclared-key=none")));
    const KEY: &str = "sk-live-3b9e7d";
    for id in ["api-key", "undeclared-key"] {
        let put = server.request(reqwest::Method::PUT, &format!("/admin/secrets/{id}")).bearer_auth(TOKEN).body(KEY);
        assert_eq!(put.send().await.unwrap().status(), 204);
    }
    let (status, body) = server.invoke(lang.fixture_tool, &[("act", json!("READ_SECRET"))]).await;
    assert_eq!(status, 200);
    assert_eq!(outputs(&body)["report"], "api-key=[redacted]; undeclared-key=none", "the declared secret only");
    let logs = server.logs();
    assert!(logs.contains("the api key is [redacted]"), "{logs}");
    assert!(!logs.contains(KEY), "a secret value reached the log");

    // Unset config reads as unset.
    let (server, _dir) = fixture_server(lang, &[]);
    let (_, body) = server.invoke(lang.fixture_tool, &[("act", json!("READ_CONFIG"))]).await;
    assert_eq!(outputs(&body)["report"], "greeting=none");
}

async fn the_deadline_and_the_memory_limit_stop_runaways(lang: &Lang) {
    let (server, _dir) = fixture_server(lang, &[]);
    let (status, body) = server.invoke(lang.fixture_tool, &[("act", json!("SPIN"))]).await;
    assert_eq!((status, error_code(&body)), (422, "tool_timeout"), "computing at its deadline: {body}");
    assert!(body["error"]["message"].as_str().unwrap().starts_with("the tool did not finish within 3s"), "{body}");

    let (status, body) = server.invoke(lang.fixture_tool, &[("act", json!("ALLOCATE"))]).await;
    assert_eq!((status, error_code(&body)), (422, "tool_resource_exhausted"), "{body}");

    // The tool is fine for the next call.
    let (status, _) = server.invoke(lang.fixture_tool, &[("act", json!("READ_CONFIG"))]).await;
    assert_eq!(status, 200);
}

async fn a_compatible_version_deploys_and_a_breaking_one_is_refused(lang: &Lang) {
    let (server, _dir, _) = example_server(lang).await;
    let id = server.tool_id(lang.example_tool).await;

    let with_optional_input = lang.example_edited(|world| {
        world.replacen(
            "        units: option<temperature-unit>,\n",
            "        units: option<temperature-unit>,\n        /// Leave out days drier than this, in millimetres.\n        min-rain-mm: option<u16>,\n",
            1,
        )
    });
    let (status, body) = server.deploy(with_optional_input, "").await;
    assert_eq!(status, 201, "{body}");
    assert_eq!((body["toolId"].as_str(), body["version"].clone()), (Some(id.as_str()), json!(2)));
    let (status, body) = server.invoke(lang.example_tool, &[("city", json!("Paris")), ("days", json!(1))]).await;
    assert_eq!(status, 200, "version 2 answers: {body}");

    let new_required_input = lang.example_edited(|world| {
        world.replacen(
            "        days: u8,\n",
            "        days: u8,\n        /// The country the city is in.\n        country: string,\n",
            1,
        )
    });
    let (status, body) = server.deploy(new_required_input, "").await;
    assert_eq!((status, error_code(&body)), (409, "breaking_change"), "{body}");
    let codes: Vec<&str> =
        body["error"]["breakingChanges"].as_array().unwrap().iter().map(|c| c["code"].as_str().unwrap()).collect();
    assert_eq!(codes, ["input_removed", "required_input_added"], "min_rain_mm (of version 2) gone, country required");
    let (_, versions) = server.get(&format!("/tools/{id}/versions")).await;
    assert_eq!(versions["items"].as_array().unwrap().len(), 2, "nothing created");
}

async fn it_is_served_over_otc_and_mcp(lang: &Lang) {
    let (server, _dir, _) = example_server(lang).await;
    let input = json!({ "city": "Tokyo", "days": 1, "units": "CELSIUS" });
    let answer = otc::call(&server, "/otc/tools/call", &otc::request(lang.example_otc, input.clone())).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let result = &answer.body["result"];
    assert_eq!(result["success"], true, "{result}");
    assert_eq!(result["value"]["location"], "Tokyo, Japan");
    assert_eq!(result["value"]["forecast"][0]["high"], 21);

    let mcp = Mcp::modern(&server);
    let listed = mcp.list().await;
    let names: Vec<&str> = listed.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, [lang.example_tool]);
    let answer = mcp.call(lang.example_tool, json!({ "city": "Tokyo", "days": 1 }), Value::Null).await;
    let result = &answer["result"];
    assert_eq!(result["isError"], false, "{answer}");
    assert_eq!(result["structuredContent"]["location"], "Tokyo, Japan");
    assert_eq!(result["structuredContent"]["units"], "CELSIUS");

    let answer = mcp.call(lang.example_tool, json!({ "city": "Atlantis", "days": 1 }), Value::Null).await;
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    assert!(answer["result"]["content"][0]["text"].as_str().unwrap().contains("no city called `Atlantis`"), "{answer}");
}

/// An exception other than a `ToolError` is a bug: the SDK's `tool` ends
/// the call as a trap, as a panic in Rust, with the stack in the log; the
/// exception's text never reaches the caller.
async fn a_bug_is_a_trap_logged_with_its_stack(lang: &Lang) {
    let (server, _dir) = fixture_server(lang, &[]);
    let (status, body) = server.invoke(lang.fixture_tool, &[("act", json!("CRASH"))]).await;
    assert_eq!((status, error_code(&body)), (422, "tool_trapped"), "{body}");
    assert!(!body.to_string().contains("null"), "{body}");
    let logs = server.logs();
    for shown in lang.bug_logged {
        assert!(logs.contains(shown), "the log does not show {shown}: {logs}");
    }
    let (status, _) = server.invoke(lang.fixture_tool, &[("act", json!("READ_CONFIG"))]).await;
    assert_eq!(status, 200, "the next call runs");
}

/// Each check, once per language.
macro_rules! per_language {
    ($($check:ident),* $(,)?) => {
        mod python {
            $(#[tokio::test(flavor = "multi_thread")]
            async fn $check() {
                super::$check(&super::PY).await;
            })*
        }
        mod javascript {
            $(#[tokio::test(flavor = "multi_thread")]
            async fn $check() {
                super::$check(&super::JS).await;
            })*
        }
    };
}

per_language!(
    the_signature_comes_from_the_wit_docs,
    it_calls_its_backend_and_answers,
    invalid_input_never_reaches_the_tool,
    tool_errors_reach_the_caller,
    outbound_calls_are_limited_to_declared_hosts,
    config_and_secrets_reach_the_tool,
    the_deadline_and_the_memory_limit_stop_runaways,
    a_compatible_version_deploys_and_a_breaking_one_is_refused,
    it_is_served_over_otc_and_mcp,
    a_bug_is_a_trap_logged_with_its_stack,
);
