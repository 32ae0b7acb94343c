//! Issue 66, the designer's words (docs/toolsets.md): a toolset's tools
//! carry the designer's descriptions of the tool and its parameters,
//! served at the toolset's roots only (A2T and OTC here; MCP with the
//! official Python SDK in `mcp_python.rs`; the catalog in
//! `catalog_browser.rs`), texts only, pinned with the toolset version,
//! checked against the version served, flagged when a followed tool adds a
//! parameter; and the calls refused for their inputs per toolset version.

use crate::support::{Server, TOKEN, fixture, invocation};
use reqwest::Method;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// Echo with the designer's words `tag` for the tool, its input and its
/// output (`version`: a pin, or `None` to follow).
pub fn worded_echo(version: Option<u32>, tag: &str) -> Value {
    let mut entry = json!({
        "name": "echo",
        "description": format!("{tag}: repeat the traveller's words back."),
        "inputDescriptions": { "text": format!("{tag}: exactly what the traveller said.") },
        "outputDescriptions": { "text": format!("{tag}: the same words.") },
    });
    if let Some(n) = version {
        entry["version"] = n.into();
    }
    entry
}

/// Puts toolset `name` with `tools` as the operator → (status, body).
async fn put(server: &Server, name: &str, tools: Value) -> (u16, Value) {
    let body = json!({ "description": "worded", "tools": tools });
    server.call_as(Some(TOKEN), Method::PUT, &format!("/admin/toolsets/{name}"), Some(&body)).await
}

async fn get(server: &Server, path: &str) -> (u16, Value) {
    server.call_as(Some(TOKEN), Method::GET, path, None).await
}

/// `value` with every description (the tool's, each parameter's) taken out:
/// what must be the same at a toolset's root and the tenant's.
fn without_texts(mut value: Value) -> Value {
    if let Some(object) = value.as_object_mut() {
        object.remove("description");
        for params in ["input_parameters", "output_parameters"] {
            for param in object.get_mut(params).and_then(Value::as_array_mut).into_iter().flatten() {
                param.as_object_mut().unwrap().remove("description");
            }
        }
    }
    value
}

/// An A2T signature's texts: (tool, first input, first output).
fn a2t_texts(signature: &Value) -> (String, String, String) {
    let text = |v: &Value| v.as_str().unwrap_or_else(|| panic!("no text in {signature}")).to_string();
    (
        text(&signature["description"]),
        text(&signature["input_parameters"][0]["description"]),
        text(&signature["output_parameters"][0]["description"]),
    )
}

fn worded(tag: &str) -> (String, String, String) {
    (
        format!("{tag}: repeat the traveller's words back."),
        format!("{tag}: exactly what the traveller said."),
        format!("{tag}: the same words."),
    )
}

/// echo's own description.
pub const VENDOR_ECHO: &str =
    "Returns the text it is given, unchanged. Use it to check that the tool server answers; it has no other effect.";

const VENDOR: (&str, &str, &str) = (VENDOR_ECHO, "The text to send back.", "The text that was sent, unchanged.");

fn vendor() -> (String, String, String) {
    (VENDOR.0.into(), VENDOR.1.into(), VENDOR.2.into())
}

/// A2T's listing, signature resources and OTC's definitions at a toolset's
/// roots serve the designer's words, field for field the vendor's signature
/// otherwise; the tenant's root keeps the vendor's; a rewording is a new
/// toolset version, and the pinned earlier one keeps its words.
#[tokio::test(flavor = "multi_thread")]
async fn a_toolsets_words_are_served_at_its_roots_only_and_a_pinned_version_keeps_them() {
    let server = Server::start(&[]);
    let echo = server.tool_id("echo").await;
    let (status, made) = put(&server, "travel", json!([worded_echo(Some(1), "first")])).await;
    assert_eq!(status, 201, "{made}");
    assert_eq!(made["tools"][0]["wordsFor"], 1, "{made}");
    assert_eq!(made["tools"][0]["description"], worded("first").0, "{made}");
    // The same words again change nothing.
    assert_eq!(put(&server, "travel", json!([worded_echo(Some(1), "first")])).await.0, 200);

    let root = "/t/default/toolsets/travel";
    let (status, vendors) = get(&server, &format!("/tools/{echo}/versions/1")).await;
    assert_eq!(status, 200, "{vendors}");
    assert_eq!(a2t_texts(&vendors), vendor());
    for path in [format!("{root}/tools/{echo}"), format!("{root}/tools/{echo}/versions/1")] {
        let (status, signature) = get(&server, &path).await;
        assert_eq!(status, 200, "{path}: {signature}");
        assert_eq!(a2t_texts(&signature), worded("first"), "{path}");
        assert_eq!(without_texts(signature), without_texts(vendors.clone()), "{path}: only texts differ");
    }
    let (_, listed) = get(&server, &format!("{root}/tools")).await;
    assert_eq!(a2t_texts(&listed["items"][0]), worded("first"), "{listed}");
    // The tenant's own root: the vendor's words.
    let (_, tenant) = get(&server, "/tools").await;
    let tenant_echo = tenant["items"].as_array().unwrap().iter().find(|t| t["name"] == "echo").unwrap().clone();
    assert_eq!(a2t_texts(&tenant_echo), vendor());
    // The signature's ETag changes with the words.
    let etag = |path: String| {
        let request = server.request_as(Some(TOKEN), Method::GET, &path);
        async move { request.send().await.unwrap().headers()["etag"].to_str().unwrap().to_string() }
    };
    assert_ne!(etag(format!("{root}/tools/{echo}")).await, etag(format!("/tools/{echo}/versions/1")).await);

    // OTC: the definition's description and schemas' property descriptions.
    let (_, otc) = get(&server, &format!("{root}/otc/tools")).await;
    let definition = &otc["tools"][0];
    assert_eq!(definition["description"], worded("first").0, "{otc}");
    assert_eq!(definition["input_schema"]["parameters"]["properties"]["text"]["description"], worded("first").1);
    assert_eq!(definition["output_schema"]["properties"]["text"]["description"], worded("first").2);
    assert_eq!(definition["input_schema"]["parameters"]["properties"]["text"]["maxLength"], 4096, "{otc}");
    let (_, tenant_otc) = get(&server, "/otc/tools").await;
    let tenant_definition =
        tenant_otc["tools"].as_array().unwrap().iter().find(|t| t["name"].as_str().unwrap().ends_with("_Echo"));
    let tenant_definition = tenant_definition.unwrap_or_else(|| panic!("{tenant_otc}"));
    assert_eq!(tenant_definition["description"], VENDOR.0);

    // Reworded: version 2 serves the new words, `travel@1` the old ones.
    let (status, second) = put(&server, "travel", json!([worded_echo(Some(1), "second")])).await;
    assert_eq!((status, second["version"].as_u64()), (201, Some(2)), "{second}");
    let (_, newest) = get(&server, &format!("{root}/tools/{echo}")).await;
    assert_eq!(a2t_texts(&newest), worded("second"));
    let (_, pinned) = get(&server, &format!("{root}@1/tools/{echo}")).await;
    assert_eq!(a2t_texts(&pinned), worded("first"));
    let (_, pinned_otc) = get(&server, &format!("{root}@1/otc/tools")).await;
    assert_eq!(pinned_otc["tools"][0]["description"], worded("first").0);

    // And audited, the words with it; the comparison names each change.
    let (_, audit) = get(&server, "/admin/audit?tenant=default&pageLimit=20").await;
    let puts: Vec<&Value> =
        audit["items"].as_array().unwrap().iter().filter(|e| e["action"] == "toolset.put").collect();
    assert!(puts.iter().any(|e| e.to_string().contains("second: the same words.")), "{audit}");
}

/// Words are checked against the version they are served with: a
/// parameter it lacks, a private input, an empty or too long text are
/// refused with `invalid_wording` naming the tool and the parameter, and
/// nothing is stored.
#[tokio::test(flavor = "multi_thread")]
async fn words_for_a_parameter_the_version_lacks_or_a_private_input_are_refused() {
    let server = Server::start(&[]);
    let (status, _) = server.deploy(fixture("transfer_funds.wasm"), "").await;
    assert_eq!(status, 201);
    let refusals = [
        (json!({"name": "echo", "inputDescriptions": {"txt": "A typo."}}), Some("txt"), "no input `txt`"),
        (json!({"name": "echo", "outputDescriptions": {"length": "Made up."}}), Some("length"), "no output `length`"),
        (json!({"name": "echo", "description": "  "}), None, "empty"),
        (json!({"name": "echo", "inputDescriptions": {"text": "x".repeat(2001)}}), Some("text"), "at most 2000"),
        (json!({"name": "echo", "description": "x".repeat(2000)}), None, "at most 1999"),
        (
            json!({"name": "transfer_funds", "inputDescriptions": {"from_account": "The source."}}),
            Some("from_account"),
            "private",
        ),
    ];
    for (entry, parameter, said) in refusals {
        let (status, body) = put(&server, "refused", json!([entry])).await;
        assert_eq!((status, body["error"]["code"].as_str()), (400, Some("invalid_wording")), "{entry}: {body}");
        assert_eq!(body["error"]["parameter"].as_str(), parameter, "{body}");
        assert!(body["error"]["message"].as_str().unwrap().contains(said), "{said}: {body}");
        assert!(body["error"]["tool"].is_string(), "{body}");
    }
    let (status, _) = get(&server, "/admin/toolsets/refused").await;
    assert_eq!(status, 404, "nothing was stored");

    // The private inputs stay out of the toolset's schemas, as at the
    // tenant's root, whatever the words say of the others.
    let entry = json!({"name": "transfer_funds", "inputDescriptions": {"amount_usd": "Dollars to move."}});
    assert_eq!(put(&server, "bank", json!([entry])).await.0, 201);
    let (_, otc) = get(&server, "/t/default/toolsets/bank/otc/tools").await;
    let properties = &otc["tools"][0]["input_schema"]["parameters"]["properties"];
    assert_eq!(properties.as_object().unwrap().keys().collect::<Vec<_>>(), ["amount_usd"], "{otc}");
    assert_eq!(properties["amount_usd"]["description"], "Dollars to move.");
}

/// A followed tool's new version adds an input the words do not cover: it
/// is served with the vendor's words, the toolset says it is new to them
/// (the same toolset again keeps saying so), and naming the served version
/// in `wordsFor` says it was reviewed.
#[tokio::test(flavor = "multi_thread")]
async fn a_followed_tools_new_input_is_served_with_the_vendors_words_and_flagged() {
    let server = Server::start(&[]);
    let echo = server.tool_id("echo").await;
    assert_eq!(put(&server, "follow", json!([worded_echo(None, "mine")])).await.0, 201);
    let (_, before) = get(&server, "/admin/toolsets/follow").await;
    assert_eq!(before["tools"][0]["review"]["newInputs"], json!([]), "{before}");

    let (status, deployed) = server.deploy(fixture("echo_v2.wasm"), "").await;
    assert_eq!((status, deployed["version"].as_u64()), (201, Some(2)), "{deployed}");
    let (_, signature) = get(&server, &format!("/t/default/toolsets/follow/tools/{echo}")).await;
    assert_eq!(signature["version"], 2, "{signature}");
    let inputs = signature["input_parameters"].as_array().unwrap();
    let described = |name: &str| inputs.iter().find(|p| p["name"] == name).unwrap()["description"].clone();
    assert_eq!(described("text"), worded("mine").1, "the designer's words stay");
    assert_eq!(described("shout"), "Send the text back in capital letters.", "the new input: the vendor's");

    let (_, after) = get(&server, "/admin/toolsets/follow").await;
    let tool = &after["tools"][0];
    assert_eq!((tool["wordsFor"].as_u64(), tool["resolvedVersion"].as_u64()), (Some(1), Some(2)), "{after}");
    assert_eq!(tool["review"]["newInputs"], json!(["shout"]), "{after}");
    // The same words again: nothing changes, the flag stays.
    let (status, again) = put(&server, "follow", json!([worded_echo(None, "mine")])).await;
    assert_eq!((status, again["tools"][0]["review"]["newInputs"].clone()), (200, json!(["shout"])), "{again}");
    // Reviewed against version 2: a new toolset version, no flag.
    let mut reviewed = worded_echo(None, "mine");
    reviewed["wordsFor"] = 2.into();
    let (status, done) = put(&server, "follow", json!([reviewed])).await;
    assert_eq!((status, done["version"].as_u64()), (201, Some(2)), "{done}");
    assert_eq!(done["tools"][0]["review"]["newInputs"], json!([]), "{done}");
    // Words for an input the served version lacks are refused at a `PUT`;
    // pinned back to version 1, words for `shout` are.
    let mut pinned = worded_echo(Some(1), "mine");
    pinned["inputDescriptions"]["shout"] = "Loud.".into();
    let (status, body) = put(&server, "follow", json!([pinned])).await;
    assert_eq!((status, body["error"]["parameter"].as_str()), (400, Some("shout")), "{body}");
}

/// The toolset's usage, per toolset version: `GET /admin/usage?toolset=`.
async fn toolset_usage_until(server: &Server, name: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, usage) = get(server, &format!("/admin/usage?toolset={name}")).await;
        assert_eq!(status, 200, "{usage}");
        if done(&usage) {
            return usage;
        }
        assert!(Instant::now() < deadline, "the toolset's usage never showed the calls: {usage}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Of `usage`'s items, echo through `door` via toolset version `n`: (calls,
/// refused calls by (parameter, code)).
pub fn through(usage: &Value, door: &str, n: u64) -> (u64, Vec<(String, String, u64)>) {
    let items = usage["items"].as_array().unwrap();
    let mut calls = 0;
    let mut refused = Vec::new();
    for item in items.iter().filter(|i| i["door"] == door && i["toolsetVersion"] == n && i["tool"] == "echo") {
        calls += item["calls"].as_u64().unwrap();
        for r in item["refused"].as_array().unwrap() {
            let parameter = r["parameter"].as_str().unwrap_or("(none)").to_string();
            refused.push((parameter, r["code"].as_str().unwrap().to_string(), r["calls"].as_u64().unwrap()));
        }
    }
    (calls, refused)
}

/// Makes `good` good calls of echo at `root` over A2T and `bad` with
/// `text` given as a number (`invalid_type`), and `missing` without it.
pub async fn echo_calls(server: &Server, root: &str, good: usize, bad: usize, missing: usize) {
    let echo = server.tool_id("echo").await;
    let calls = std::iter::repeat_n((json!("hi"), 200), good)
        .chain(std::iter::repeat_n((json!(42), 400), bad))
        .chain(std::iter::repeat_n((Value::Null, 400), missing));
    for (text, expected) in calls {
        let body = if text.is_null() { invocation("echo", &[]) } else { invocation("echo", &[("text", text)]) };
        let path = format!("{root}/tools/{echo}:invoke");
        let response = server.request_as(Some(TOKEN), Method::POST, &path).json(&body).send().await.unwrap();
        assert_eq!(response.status(), expected, "{path} {body}");
    }
}

/// Calls through two toolset versions are counted apart, each with its
/// refusals by parameter and code; calls at the tenant's root are not the
/// toolset's, and the vendor's usage counts every call.
#[tokio::test(flavor = "multi_thread")]
async fn refused_calls_are_counted_per_toolset_version_apart_from_the_tenants_root() {
    let server = Server::start(&["--usage-flush-secs", "1"]);
    assert_eq!(put(&server, "travel", json!([worded_echo(Some(1), "first")])).await.0, 201);
    assert_eq!(put(&server, "travel", json!([worded_echo(Some(1), "second")])).await.0, 201);
    echo_calls(&server, "/t/default/toolsets/travel@1", 3, 2, 0).await;
    echo_calls(&server, "/t/default/toolsets/travel", 4, 0, 1).await;
    echo_calls(&server, "", 1, 5, 0).await;

    let usage =
        toolset_usage_until(&server, "travel", |u| through(u, "a2t", 1).0 == 5 && through(u, "a2t", 2).0 == 5).await;
    assert_eq!(through(&usage, "a2t", 1), (5, vec![("text".into(), "invalid_type".into(), 2)]), "{usage}");
    assert_eq!(through(&usage, "a2t", 2), (5, vec![("text".into(), "missing_parameter".into(), 1)]), "{usage}");
    assert_eq!(usage["items"].as_array().unwrap().len(), 2, "nothing but the two toolset versions: {usage}");
    // The vendor's: every call, the tenant root's five refusals included.
    let (_, vendor) = get(&server, "/admin/usage").await;
    let item = vendor["items"].as_array().unwrap().iter().find(|i| i["tool"] == "echo" && i["door"] == "a2t").unwrap();
    assert_eq!(item["calls"], 16, "{vendor}");
    assert!(item.get("toolsetVersion").is_none(), "{vendor}");
    let (status, body) = get(&server, "/admin/usage?toolset=Not%20A%20Name").await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("invalid_query")), "{body}");
}

/// `plinth toolset set --describe` writes the words (the tool's, an
/// input's, an output's), `toolset show` prints them, and words for a tool
/// that is not one of `--tool` are refused before anything is sent.
#[tokio::test(flavor = "multi_thread")]
async fn the_cli_writes_a_toolsets_words() {
    let server = Server::start(&[]);
    let plinth = |args: &[&str]| crate::toolsets::operator_cli(&server, args);
    let (ok, text) = plinth(&[
        "toolset",
        "set",
        "cli",
        "--tool",
        "echo@1",
        "--describe",
        "echo=Tool words, with = inside.",
        "--describe",
        "echo.text=Input words.",
        "--describe",
        "echo.output.text=Output words.",
    ]);
    assert!(ok && text.contains("description: Tool words, with = inside."), "{text}");
    assert!(text.contains("input text: Input words.") && text.contains("output text: Output words."), "{text}");
    let echo = server.tool_id("echo").await;
    let (_, signature) = get(&server, &format!("/t/default/toolsets/cli/tools/{echo}")).await;
    assert_eq!(
        a2t_texts(&signature),
        ("Tool words, with = inside.".into(), "Input words.".into(), "Output words.".into())
    );

    let (ok, text) = plinth(&["toolset", "set", "cli", "--tool", "echo", "--describe", "book_flight=Not here."]);
    assert!(!ok && text.contains("`book_flight`, which is not one of the toolset's --tool"), "{text}");
    let (ok, text) = plinth(&["toolset", "set", "cli", "--tool", "echo", "--describe", "echo.txt=Typo."]);
    assert!(!ok && text.contains("400") && text.contains("no input `txt`"), "{text}");
    let (_, toolset) = get(&server, "/admin/toolsets/cli").await;
    assert_eq!(toolset["version"], 1, "the refused changes stored nothing: {toolset}");
}
