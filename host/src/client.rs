//! The client commands: `deploy`, `retire`, `tools`, `tenant`, `key`,
//! `provider`, `connections`,
//! `audit`, and the offline `diff`. They talk to a server over its public
//! A2T and admin APIs, with the key in `--key`/`PLINTH_KEY`, exactly as any
//! other client would.

use crate::cli::{ProviderSetArgs, ServerArgs, TenantTarget};
use anyhow::{Context, bail};
use plinth::package::ToolPackage;
use plinth::signature::SignatureDiff;
use reqwest::blocking::{Client, RequestBuilder, Response};
use serde_json::Value;
use std::path::Path;

fn client() -> anyhow::Result<Client> {
    Ok(Client::builder().timeout(std::time::Duration::from_secs(300)).build()?)
}

fn base(server: &ServerArgs) -> &str {
    server.server.trim_end_matches('/')
}

/// The tenant's platform root: `http://server/t/{tenant}`.
fn root(target: &TenantTarget) -> String {
    format!("{}/t/{}", base(&target.server), target.tenant)
}

fn with_token(request: RequestBuilder, server: &ServerArgs) -> RequestBuilder {
    match &server.key {
        Some(key) => request.bearer_auth(key),
        None => request,
    }
}

/// Sends a request with the key and returns the JSON of a 2xx answer.
fn send(request: RequestBuilder, server: &ServerArgs) -> anyhow::Result<Value> {
    json(with_token(request, server).send().context("reaching the server")?)
}

/// The JSON body of a 2xx answer; otherwise the server's error, with every
/// breaking change listed when there are some.
fn json(response: Response) -> anyhow::Result<Value> {
    let status = response.status();
    let body: Value = response.json().unwrap_or(Value::Null);
    if status.is_success() {
        return Ok(body);
    }
    let error = &body["error"];
    let mut message = format!("the server answered {status}: {}", error["message"].as_str().unwrap_or("(no message)"));
    if let Some(changes) = error["breakingChanges"].as_array() {
        for change in changes {
            message.push_str(&format!("\n  breaking: {}", change["message"].as_str().unwrap_or("")));
        }
    }
    bail!(message)
}

/// `plinth deploy FILE_OR_REFERENCE`: a file's bytes are posted; anything
/// else that parses as an OCI reference is sent for the server to pull.
pub fn deploy(target: &TenantTarget, source: &str, expect_version: Option<u32>) -> anyhow::Result<()> {
    let mut url = format!("{}/admin/tools", root(target));
    if let Some(n) = expect_version {
        url.push_str(&format!("?expectVersion={n}"));
    }
    let path = Path::new(source);
    let request = if path.exists() {
        let bytes = std::fs::read(path).with_context(|| format!("reading {source}"))?;
        client()?.post(url).header("content-type", "application/wasm").body(bytes)
    } else {
        plinth::supply::Reference::parse(source)
            .map_err(|why| anyhow::anyhow!("there is no file `{source}`, and it is not an OCI reference: {why}"))?;
        client()?.post(url).json(&serde_json::json!({ "reference": source }))
    };
    let body = send(request, &target.server)?;
    let previous = body["previousVersion"].as_u64().map_or("none".to_string(), |n| n.to_string());
    println!(
        "{} version {} (toolId {}, sha256 {}, previous version {previous})",
        body["name"].as_str().unwrap_or("?"),
        body["version"],
        body["toolId"].as_str().unwrap_or("?"),
        body["sha256"].as_str().unwrap_or("?"),
    );
    let provenance = &body["provenance"];
    if let Some(source) = provenance["source"].as_object() {
        println!(
            "  from {} (manifest {})",
            source["reference"].as_str().unwrap_or("?"),
            source["manifestDigest"].as_str().unwrap_or("?")
        );
    }
    for signer in provenance["signers"].as_array().into_iter().flatten() {
        println!(
            "  signed by {} ({} key {})",
            signer["key"].as_str().unwrap_or("?"),
            signer["kind"].as_str().unwrap_or("?"),
            signer["fingerprint"].as_str().unwrap_or("?")
        );
    }
    Ok(())
}

/// `plinth logs [--follow]`: the recent calls, oldest first; then, with
/// `follow`, each call as it ends (a tail that ends is opened again).
pub fn logs(target: &TenantTarget, query: &[(&str, String)], follow: bool) -> anyhow::Result<()> {
    let url = format!("{}/admin/logs", root(target));
    let page = send(client()?.get(&url).query(query).query(&[("limit", "500")]), &target.server)?;
    let mut items = page["items"].as_array().cloned().unwrap_or_default();
    items.reverse();
    items.iter().for_each(print_call);
    if !follow {
        return Ok(());
    }
    // No overall timeout: a tail lasts until the server ends it.
    let streaming = Client::builder().timeout(None).build()?;
    loop {
        let request = streaming.get(&url).query(query).header("accept", "text/event-stream");
        let response = with_token(request, &target.server).send().context("reaching the server")?;
        if !response.status().is_success() {
            json(response)?;
            return Ok(());
        }
        let mut event = String::new();
        for line in std::io::BufRead::lines(std::io::BufReader::new(response)) {
            let line = line.context("reading the tail")?;
            if let Some(name) = line.strip_prefix("event: ") {
                event = name.to_string();
            } else if let Some(data) = line.strip_prefix("data: ") {
                let data: Value = serde_json::from_str(data).unwrap_or(Value::Null);
                match event.as_str() {
                    "call" => print_call(&data),
                    "dropped" => println!("… {} calls not shown: this tail fell behind", data["dropped"]),
                    _ => {}
                }
                use std::io::Write;
                let _ = std::io::stdout().flush();
            }
        }
    }
}

fn print_call(call: &Value) {
    println!(
        "{}  {} v{}  {}  {}  {:.1} ms  call {}",
        call["time"].as_str().unwrap_or("?"),
        call["tool"].as_str().unwrap_or("?"),
        call["version"],
        call["door"].as_str().unwrap_or("?"),
        call["outcome"].as_str().unwrap_or("?"),
        call["durationMs"].as_f64().unwrap_or(0.0),
        call["callId"].as_str().unwrap_or("?"),
    );
    for line in call["lines"].as_array().into_iter().flatten() {
        println!("    [{}] {}", line["level"].as_str().unwrap_or("?"), line["text"].as_str().unwrap_or(""));
    }
    for refused in call["refused"].as_array().into_iter().flatten() {
        let value = refused["value"].as_str().map(|v| format!(" (value {v})")).unwrap_or_default();
        println!(
            "    refused {}: {}{value}",
            refused["parameter"].as_str().unwrap_or("(request)"),
            refused["code"].as_str().unwrap_or("?")
        );
    }
}

/// `plinth usage [--tool NAME] [--window hour|day|week]`: calls per tool
/// version and door, and those refused, by parameter and code or by limit.
pub fn usage(target: &TenantTarget, query: &[(&str, String)]) -> anyhow::Result<()> {
    let usage = send(client()?.get(format!("{}/admin/usage", root(target))).query(query), &target.server)?;
    for item in usage["items"].as_array().into_iter().flatten() {
        let calls = item["calls"].as_u64().unwrap_or(0);
        let refused = item["outcomes"]["refused"].as_u64().unwrap_or(0);
        let rate = (refused * 100 + calls / 2).checked_div(calls).unwrap_or(0);
        let failed = item["outcomes"]
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(outcome, _)| *outcome != "ok" && *outcome != "refused")
            .map(|(outcome, n)| format!(", {n} {outcome}"))
            .collect::<String>();
        println!(
            "{} v{}  {}  {calls} calls, {refused} refused ({rate}%){failed}",
            item["tool"].as_str().unwrap_or("?"),
            item["version"],
            item["door"].as_str().unwrap_or("?"),
        );
        for refused in item["refused"].as_array().into_iter().flatten() {
            println!(
                "    {}  {}  {}",
                refused["parameter"].as_str().unwrap_or("(request)"),
                refused["code"].as_str().unwrap_or("?"),
                refused["calls"]
            );
        }
        for limited in item["limited"].as_array().into_iter().flatten() {
            println!("    limit  {}  {}", limited["reason"].as_str().unwrap_or("?"), limited["calls"]);
        }
    }
    Ok(())
}

/// `plinth trust show`.
pub fn show_trust(target: &TenantTarget) -> anyhow::Result<()> {
    let policy = send(client()?.get(format!("{}/admin/trust-policy", root(target))), &target.server)?;
    print_policy(&policy);
    Ok(())
}

fn print_policy(policy: &Value) {
    let required = policy["requireSignature"].as_bool().unwrap_or(false);
    println!("signature required: {}", if required { "yes" } else { "no" });
    if policy["lockedByOperator"] == true {
        println!("set by an operator: a publisher may only tighten it");
    }
    if let Some(why) = policy["unreadable"].as_str() {
        println!("the stored policy cannot be read ({why}): every deploy is refused until it is set again");
    }
    for key in policy["keys"].as_array().into_iter().flatten() {
        let scopes: Vec<&str> = key["scopes"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        println!(
            "  {}  {}  {}{}",
            key["name"].as_str().unwrap_or("?"),
            key["kind"].as_str().unwrap_or("?"),
            key["fingerprint"].as_str().unwrap_or("?"),
            if scopes.is_empty() { String::new() } else { format!("  for {}", scopes.join(", ")) }
        );
    }
}

/// `plinth trust set [--require-signature] --trusted-key NAME=FILE… [--key-scope NAME=PATTERN…]`.
pub fn set_trust(
    target: &TenantTarget,
    require_signature: bool,
    keys: &[String],
    scopes: &[String],
) -> anyhow::Result<()> {
    let mut scoped: Vec<(&str, &str)> = Vec::new();
    for scope in scopes {
        scoped.push(scope.split_once('=').context("write each key scope as NAME=PATTERN")?);
    }
    if let Some((name, _)) =
        scoped.iter().find(|(name, _)| !keys.iter().any(|k| k.split_once('=').is_some_and(|(n, _)| n == *name)))
    {
        anyhow::bail!("--key-scope names `{name}`, which no --trusted-key names");
    }
    let mut listed = Vec::new();
    for key in keys {
        let (name, file) = key.split_once('=').context("write each key as NAME=FILE")?;
        let bytes = std::fs::read(file).with_context(|| format!("reading {file}"))?;
        // A PEM file as it is; a binary key file (wasmsign2 keygen) in base64.
        let public_key = match String::from_utf8(bytes.clone()) {
            Ok(text) if text.contains("-----BEGIN") => text,
            _ => base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &bytes),
        };
        let mut key = serde_json::json!({ "name": name, "publicKey": public_key });
        let patterns: Vec<&str> = scoped.iter().filter(|(n, _)| *n == name).map(|(_, p)| *p).collect();
        if !patterns.is_empty() {
            key["scopes"] = serde_json::json!(patterns);
        }
        listed.push(key);
    }
    let body = serde_json::json!({ "requireSignature": require_signature, "keys": listed });
    let url = format!("{}/admin/trust-policy", root(target));
    let answer = send(client()?.put(url).json(&body), &target.server)?;
    print_policy(&answer);
    print_refused(&answer["wouldRefuse"]);
    Ok(())
}

fn print_refused(refused: &Value) -> bool {
    let items = refused.as_array().cloned().unwrap_or_default();
    for v in &items {
        println!(
            "would refuse: {} version {} (sha256 {})",
            v["name"].as_str().unwrap_or("?"),
            v["version"],
            v["sha256"].as_str().unwrap_or("?")
        );
    }
    items.is_empty()
}

/// `plinth trust check`: whether every live version passes the policy.
pub fn check_trust(target: &TenantTarget) -> anyhow::Result<bool> {
    let answer = send(client()?.get(format!("{}/admin/trust-policy/refused", root(target))), &target.server)?;
    let clean = print_refused(&answer["items"]);
    if clean {
        println!("every live version passes the trust policy");
    }
    Ok(clean)
}

/// `plinth registry login HOST --username U`.
pub fn registry_login(target: &TenantTarget, registry: &str, username: &str) -> anyhow::Result<()> {
    let password = match std::env::var("PLINTH_REGISTRY_PASSWORD") {
        Ok(p) => p,
        Err(_) => {
            let mut line = String::new();
            std::io::stdin().read_line(&mut line).context("reading the password from standard input")?;
            line.trim_end_matches(['\r', '\n']).to_string()
        }
    };
    let url = format!("{}/admin/registries/{registry}", root(target));
    let body = serde_json::json!({ "username": username, "password": password });
    with_token(client()?.put(url).json(&body), &target.server)
        .send()
        .context("reaching the server")
        .and_then(|r| if r.status().is_success() { Ok(()) } else { json(r).map(|_| ()) })?;
    println!("stored credentials for {registry}");
    Ok(())
}

/// `plinth registry logout HOST`.
pub fn registry_logout(target: &TenantTarget, registry: &str) -> anyhow::Result<()> {
    let url = format!("{}/admin/registries/{registry}", root(target));
    let response = with_token(client()?.delete(url), &target.server).send().context("reaching the server")?;
    if !response.status().is_success() {
        json(response)?;
    }
    println!("deleted the credentials for {registry}");
    Ok(())
}

/// `plinth registry list`.
pub fn registry_list(target: &TenantTarget) -> anyhow::Result<()> {
    let answer = send(client()?.get(format!("{}/admin/registries", root(target))), &target.server)?;
    for item in answer["items"].as_array().into_iter().flatten() {
        println!("{}  {}", item["registry"].as_str().unwrap_or("?"), item["username"].as_str().unwrap_or("?"));
    }
    Ok(())
}

/// Every item of a paginated A2T listing at `path`, walking all pages.
fn walk(target: &TenantTarget, path: &str) -> anyhow::Result<Vec<Value>> {
    let client = client()?;
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut url = format!("{}{path}?pageLimit=200", root(target));
        if let Some(c) = &cursor {
            url.push_str(&format!("&pageCursor={c}"));
        }
        let page = send(client.get(url), &target.server)?;
        items.extend(page["items"].as_array().cloned().unwrap_or_default());
        match page["paging"]["next"].as_str() {
            Some(next) => cursor = Some(next.to_string()),
            None => return Ok(items),
        }
    }
}

fn all_tools(target: &TenantTarget) -> anyhow::Result<Vec<Value>> {
    walk(target, "/tools")
}

/// A tool's id from its name or id.
fn tool_id(target: &TenantTarget, tool: &str) -> anyhow::Result<String> {
    if uuid::Uuid::parse_str(tool).is_ok() {
        return Ok(tool.to_string());
    }
    all_tools(target)?
        .iter()
        .find(|t| t["name"] == tool)
        .and_then(|t| t["toolId"].as_str().map(str::to_string))
        .with_context(|| format!("the server has no tool called `{tool}`"))
}

/// `plinth tools list`.
pub fn list(target: &TenantTarget) -> anyhow::Result<()> {
    println!("{:<40} {:>7}  TOOL ID", "NAME", "VERSION");
    for tool in all_tools(target)? {
        println!(
            "{:<40} {:>7}  {}",
            tool["name"].as_str().unwrap_or("?"),
            tool["version"],
            tool["toolId"].as_str().unwrap_or("?")
        );
    }
    Ok(())
}

/// `plinth tools versions TOOL`.
pub fn versions(target: &TenantTarget, tool: &str) -> anyhow::Result<()> {
    let id = tool_id(target, tool)?;
    let versions = walk(target, &format!("/tools/{id}/versions"))?;
    println!("{:>7}  {:<8}  CONTENT HASH", "VERSION", "STATE");
    for v in versions {
        let state = if v["retired"] == true {
            "retired"
        } else if v["version"] == v["currentVersion"] {
            "current"
        } else {
            "live"
        };
        println!("{:>7}  {state:<8}  {}", v["version"], v["contentHash"].as_str().unwrap_or("?"));
    }
    Ok(())
}

/// `plinth retire TOOL N`.
pub fn retire(target: &TenantTarget, tool: &str, version: u32, force: bool) -> anyhow::Result<()> {
    let id = tool_id(target, tool)?;
    let force = if force { "?force=true" } else { "" };
    let request = client()?.delete(format!("{}/admin/tools/{id}/versions/{version}{force}", root(target)));
    let body = send(request, &target.server)?;
    let current =
        body["currentVersion"].as_u64().map_or("none (every version is retired)".to_string(), |n| n.to_string());
    println!("retired version {version} of {tool}; current version: {current}");
    Ok(())
}

/// `FIELD=N` quota arguments → a JSON object.
fn quotas(entries: &[String]) -> anyhow::Result<Value> {
    let mut quotas = serde_json::Map::new();
    for entry in entries {
        let Some((field, n)) = entry.split_once('=') else { bail!("--quota `{entry}` is not FIELD=N") };
        let n: u64 = n.trim().parse().with_context(|| format!("--quota `{entry}`: N must be a whole number"))?;
        quotas.insert(field.trim().to_string(), n.into());
    }
    Ok(Value::Object(quotas))
}

fn print_tenant(tenant: &Value) {
    let public = if tenant["publicEnumeration"] == true { "public" } else { "private" };
    println!("{:<24} {public:<8} {}", tenant["name"].as_str().unwrap_or("?"), tenant["quotas"]);
}

/// `plinth tenant create NAME`.
pub fn create_tenant(server: &ServerArgs, name: &str, public: bool, entries: &[String]) -> anyhow::Result<()> {
    let body = serde_json::json!({ "name": name, "publicEnumeration": public, "quotas": quotas(entries)? });
    let tenant = send(client()?.post(format!("{}/admin/tenants", base(server))).json(&body), server)?;
    print_tenant(&tenant);
    println!("its platform root is {}/t/{name}/", base(server));
    Ok(())
}

/// `plinth tenant set NAME`.
pub fn update_tenant(server: &ServerArgs, name: &str, public: Option<bool>, entries: &[String]) -> anyhow::Result<()> {
    let mut body = serde_json::json!({ "quotas": quotas(entries)? });
    if let Some(public) = public {
        body["publicEnumeration"] = public.into();
    }
    let tenant = send(client()?.patch(format!("{}/admin/tenants/{name}", base(server))).json(&body), server)?;
    print_tenant(&tenant);
    Ok(())
}

/// `plinth tenant list`.
pub fn list_tenants(server: &ServerArgs) -> anyhow::Result<()> {
    let tenants = send(client()?.get(format!("{}/admin/tenants", base(server))), server)?;
    println!("{:<24} {:<8} QUOTAS", "NAME", "BROWSE");
    for tenant in tenants["items"].as_array().into_iter().flatten() {
        print_tenant(tenant);
    }
    Ok(())
}

/// `plinth key create`: prints the key, which the server never shows again.
pub fn create_key(
    server: &ServerArgs,
    tenant: Option<&str>,
    role: &str,
    label: Option<&str>,
    toolset: Option<&str>,
) -> anyhow::Result<()> {
    let body = serde_json::json!({ "tenant": tenant, "role": role, "label": label, "toolset": toolset });
    let key = send(client()?.post(format!("{}/admin/keys", base(server))).json(&body), server)?;
    eprintln!(
        "created {role} key {} for {} (store it now: it cannot be shown again)",
        key["id"].as_str().unwrap_or("?"),
        tenant.map_or("the whole server".to_string(), |t| format!("tenant `{t}`"))
    );
    println!("{}", key["key"].as_str().unwrap_or("?"));
    Ok(())
}

/// `plinth key revoke ID`.
pub fn revoke_key(server: &ServerArgs, id: &str) -> anyhow::Result<()> {
    send(client()?.delete(format!("{}/admin/keys/{id}", base(server))), server)?;
    println!("revoked key {id}");
    Ok(())
}

/// `plinth key list`.
pub fn list_keys(server: &ServerArgs, tenant: Option<&str>) -> anyhow::Result<()> {
    let mut url = format!("{}/admin/keys", base(server));
    if let Some(tenant) = tenant {
        url.push_str(&format!("?tenant={tenant}"));
    }
    let keys = send(client()?.get(url), server)?;
    println!("{:<16}  {:<10} {:<24} {:<8} {:<16} LABEL", "ID", "ROLE", "TENANT", "STATE", "TOOLSET");
    for key in keys["items"].as_array().into_iter().flatten() {
        let state = if key["revokedAt"].is_null() { "live" } else { "revoked" };
        println!(
            "{:<16}  {:<10} {:<24} {state:<8} {:<16} {}",
            key["id"].as_str().unwrap_or("?"),
            key["role"].as_str().unwrap_or("?"),
            key["tenant"].as_str().unwrap_or("-"),
            key["toolset"].as_str().unwrap_or("-"),
            key["label"].as_str().unwrap_or("")
        );
    }
    Ok(())
}

/// The designer's words of `plinth toolset set`, by tool: the `--words`
/// file's, then each `--describe` (`TOOL=TEXT`, `TOOL.INPUT=TEXT`,
/// `TOOL.output.OUTPUT=TEXT`) over it.
fn toolset_words(
    describe: &[String],
    file: Option<&std::path::Path>,
) -> anyhow::Result<serde_json::Map<String, Value>> {
    let mut words = match file {
        None => serde_json::Map::new(),
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            match serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))? {
                Value::Object(words) => words,
                _ => anyhow::bail!("{}: the words are an object of tools' words", path.display()),
            }
        }
    };
    for given in describe {
        let Some((target, text)) = given.split_once('=') else {
            anyhow::bail!("--describe `{given}`: write TOOL=TEXT, TOOL.INPUT=TEXT or TOOL.output.OUTPUT=TEXT");
        };
        let mut parts = target.splitn(3, '.');
        let tool = parts.next().unwrap_or_default();
        let entry = words.entry(tool.to_string()).or_insert_with(|| serde_json::json!({}));
        let text = Value::from(text);
        match (parts.next(), parts.next()) {
            (None, _) => entry["description"] = text,
            (Some("output"), Some(output)) => entry["outputDescriptions"][output] = text,
            (Some(input), None) => entry["inputDescriptions"][input] = text,
            (Some(_), Some(_)) => {
                anyhow::bail!("--describe `{target}`: write TOOL, TOOL.INPUT or TOOL.output.OUTPUT before `=`")
            }
        }
    }
    Ok(words)
}

/// `plinth toolset set NAME --tool T[@N]… [--describe T[.P]=TEXT…]`.
pub fn set_toolset(
    target: &TenantTarget,
    name: &str,
    description: &str,
    tools: &[String],
    describe: &[String],
    words_file: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    let mut words = toolset_words(describe, words_file)?;
    let mut entries = Vec::with_capacity(tools.len());
    for tool in tools {
        let entry = match tool.split_once('@') {
            None => serde_json::json!({ "name": tool }),
            Some((tool, n)) => {
                let n: u32 = n.parse().with_context(|| format!("--tool `{tool}@{n}`: the version is a number"))?;
                serde_json::json!({ "name": tool, "version": n })
            }
        };
        let mut entry = entry;
        let tool_name = entry["name"].as_str().unwrap_or_default().to_string();
        if let Some(Value::Object(said)) = words.remove(&tool_name) {
            entry.as_object_mut().into_iter().for_each(|e| e.extend(said.clone()));
        }
        entries.push(entry);
    }
    if let Some(tool) = words.keys().next() {
        anyhow::bail!("words are given for `{tool}`, which is not one of the toolset's --tool");
    }
    let body = serde_json::json!({ "description": description, "tools": entries });
    let url = format!("{}/admin/toolsets/{name}", root(target));
    let toolset = send(client()?.put(url).json(&body), &target.server)?;
    print_toolset(&toolset);
    Ok(())
}

/// `plinth toolset show NAME`.
pub fn show_toolset(target: &TenantTarget, name: &str, version: Option<u32>) -> anyhow::Result<()> {
    let mut url = format!("{}/admin/toolsets/{name}", root(target));
    if let Some(n) = version {
        url.push_str(&format!("?version={n}"));
    }
    print_toolset(&send(client()?.get(url), &target.server)?);
    Ok(())
}

/// `plinth toolset list`.
pub fn list_toolsets(target: &TenantTarget) -> anyhow::Result<()> {
    let toolsets = send(client()?.get(format!("{}/admin/toolsets", root(target))), &target.server)?;
    println!("{:<32} {:>7} {:>5}  DESCRIPTION", "NAME", "VERSION", "TOOLS");
    for toolset in toolsets["items"].as_array().into_iter().flatten() {
        println!(
            "{:<32} {:>7} {:>5}  {}",
            toolset["name"].as_str().unwrap_or("?"),
            toolset["version"],
            toolset["tools"].as_array().map_or(0, Vec::len),
            toolset["description"].as_str().unwrap_or("")
        );
    }
    Ok(())
}

/// `plinth toolset rm NAME`.
pub fn delete_toolset(target: &TenantTarget, name: &str) -> anyhow::Result<()> {
    let request = client()?.delete(format!("{}/admin/toolsets/{name}", root(target)));
    let response = with_token(request, &target.server).send().context("reaching the server")?;
    if !response.status().is_success() {
        json(response)?;
    }
    println!("deleted toolset {name}; its keys are revoked");
    Ok(())
}

fn print_toolset(toolset: &Value) {
    println!(
        "{} version {}: {}",
        toolset["name"].as_str().unwrap_or("?"),
        toolset["version"],
        toolset["description"].as_str().unwrap_or("")
    );
    for tool in toolset["tools"].as_array().into_iter().flatten() {
        let pin = tool["version"].as_u64().map_or("current".to_string(), |n| format!("version {n}"));
        let now = tool["resolvedVersion"].as_u64().map_or("-".to_string(), |n| n.to_string());
        let state = tool["state"].as_str().unwrap_or("?");
        let warning = if state == "retiredPinned" { "  (pinned version retired: pin another)" } else { "" };
        println!("  {:<32} {pin:<12} now {now:<6} {state}{warning}", tool["name"].as_str().unwrap_or("?"));
        if let Some(text) = tool["description"].as_str() {
            println!("    description: {text}");
        }
        for (kind, key) in [("input", "inputDescriptions"), ("output", "outputDescriptions")] {
            for (param, text) in tool[key].as_object().into_iter().flatten() {
                println!("    {kind} {param}: {}", text.as_str().unwrap_or(""));
            }
        }
        let review = &tool["review"];
        let new: Vec<&str> = ["newInputs", "newOutputs"]
            .iter()
            .flat_map(|k| review[*k].as_array().into_iter().flatten().filter_map(Value::as_str))
            .collect();
        if !new.is_empty() {
            println!("    new words to review: {} (served with the vendor's words)", new.join(", "));
        }
    }
    for (door, url) in toolset["roots"].as_object().into_iter().flatten() {
        println!("  {door:<7} {}", url.as_str().unwrap_or("?"));
    }
}

/// `plinth audit`.
pub fn audit(server: &ServerArgs, tenant: Option<&str>, limit: usize) -> anyhow::Result<()> {
    let mut url = format!("{}/admin/audit?pageLimit={}", base(server), limit.clamp(1, 200));
    if let Some(tenant) = tenant {
        url.push_str(&format!("&tenant={tenant}"));
    }
    let entries = send(client()?.get(url), server)?;
    for entry in entries["items"].as_array().into_iter().flatten() {
        println!(
            "{:>6} {} {:<16} {:<14} {:<16} {}{}",
            entry["seq"],
            entry["at"],
            entry["actor"].as_str().unwrap_or("?"),
            entry["action"].as_str().unwrap_or("?"),
            entry["tenant"].as_str().unwrap_or("-"),
            entry["target"].as_str().unwrap_or("?"),
            entry["sha256"].as_str().map(|h| format!(" sha256:{h}")).unwrap_or_default()
        );
    }
    Ok(())
}

/// `plinth cheq verify FILE --jwks URL…`: prints who signed what; `Ok(false)`
/// when a signature does not verify.
pub fn verify_cheq(file: &Path, jwks: &[String]) -> anyhow::Result<bool> {
    let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let document: Value = serde_json::from_str(&text).with_context(|| format!("{} is not JSON", file.display()))?;
    // Evidence holds the accepted CHEQ as `decision`, or only the issued one.
    let signed = match (&document["decision"], &document["cheq"]) {
        (decision, _) if decision.get("signatures").is_some() => decision,
        (_, cheq) if cheq.get("signatures").is_some() => cheq,
        _ => &document,
    };
    let mut sets = Vec::new();
    for source in jwks {
        let set: Value = if source.starts_with("http://") || source.starts_with("https://") {
            Client::new()
                .get(source)
                .send()
                .and_then(Response::error_for_status)
                .and_then(Response::json)
                .with_context(|| format!("fetching the JWKS {source}"))?
        } else {
            let text = std::fs::read_to_string(source).with_context(|| format!("reading the JWKS {source}"))?;
            serde_json::from_str(&text).with_context(|| format!("{source} is not a JWKS"))?
        };
        sets.push(set);
    }
    match plinth::cheq::verify(signed, &sets) {
        Ok((payload, signatures)) => {
            let cheq: Value = serde_json::from_slice(&payload).unwrap_or(Value::Null);
            println!("verified: {} signature(s) over this CHEQ", signatures.len());
            for signature in &signatures {
                let claims: Vec<String> = signature
                    .header
                    .iter()
                    .filter(|(k, _)| !["alg", "kid"].contains(&k.as_str()))
                    .map(|(k, v)| format!("{k}={}", v.as_str().map_or_else(|| v.to_string(), str::to_string)))
                    .collect();
                println!("  signed by key {} {}", signature.kid, claims.join(" "));
            }
            println!("{}", serde_json::to_string_pretty(&cheq).unwrap_or_default());
            Ok(true)
        }
        Err(e) => {
            println!("not verified: {e}");
            Ok(false)
        }
    }
}

/// `plinth diff OLD NEW`: prints the changes; `Ok(false)` when breaking.
pub fn diff(old: &Path, new: &Path) -> anyhow::Result<bool> {
    let read = |path: &Path| -> anyhow::Result<ToolPackage> {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        ToolPackage::read(&bytes).with_context(|| path.display().to_string())
    };
    let (old, new) = (read(old)?, read(new)?);
    let diff = SignatureDiff::between(&old.signature, &new.signature);
    if diff.changes.is_empty() {
        println!("no changes to the signature");
    }
    for change in &diff.changes {
        println!("{} {}", if change.breaking { "BREAKING" } else { "ok      " }, change.message);
    }
    if diff.is_compatible() {
        println!("compatible: callers of the old version keep working");
    } else {
        println!("breaking: the server would refuse this as a new version of `{}`", old.signature.name);
    }
    Ok(diff.is_compatible())
}

/// `root(target)` followed by `segments`, each percent-encoded as one path
/// segment (an end user's name may hold any printable character).
fn url_of(target: &TenantTarget, segments: &[&str]) -> anyhow::Result<reqwest::Url> {
    let mut url = reqwest::Url::parse(&root(target)).with_context(|| format!("--server `{}`", target.server.server))?;
    url.path_segments_mut()
        .map_err(|()| anyhow::anyhow!("--server `{}` is not a base URL", target.server.server))?
        .extend(segments);
    Ok(url)
}

/// A request whose answer has no body (`204`): the server's error otherwise.
fn send_empty(request: RequestBuilder, server: &ServerArgs) -> anyhow::Result<()> {
    let response = with_token(request, server).send().context("reaching the server")?;
    if !response.status().is_success() {
        json(response)?;
    }
    Ok(())
}

/// The client secret of `plinth provider set`: a file's first line, or an
/// environment variable's value; `None` when neither is given (the server
/// keeps the stored one).
fn client_secret(flags: &ProviderSetArgs) -> anyhow::Result<Option<String>> {
    let secret = match (&flags.client_secret_file, &flags.client_secret_env) {
        (Some(file), _) => {
            let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
            text.lines().next().unwrap_or("").to_string()
        }
        (None, Some(var)) => {
            std::env::var(var).with_context(|| format!("the environment variable {var} is not set"))?
        }
        (None, None) => return Ok(None),
    };
    if secret.is_empty() {
        bail!("the client secret is empty");
    }
    Ok(Some(secret))
}

/// `plinth provider set ID …`.
pub fn set_provider(flags: &ProviderSetArgs) -> anyhow::Result<()> {
    let (target, id) = (&flags.target, flags.id.as_str());
    let mut parameters = serde_json::Map::new();
    for param in &flags.params {
        let (name, value) =
            param.split_once('=').with_context(|| format!("--param `{param}`: write it as NAME=VALUE"))?;
        parameters.insert(name.to_string(), Value::String(value.to_string()));
    }
    let mut body = serde_json::json!({ "clientId": flags.client_id });
    if let Some(secret) = client_secret(flags)? {
        body["clientSecret"] = Value::String(secret);
    }
    if !parameters.is_empty() {
        body["authorizationParameters"] = Value::Object(parameters);
    }
    for (field, value) in [
        ("issuer", &flags.issuer),
        ("displayName", &flags.display_name),
        ("resource", &flags.resource),
        ("authorizationEndpoint", &flags.authorization_endpoint),
        ("tokenEndpoint", &flags.token_endpoint),
        ("revocationEndpoint", &flags.revocation_endpoint),
    ] {
        if let Some(value) = value {
            body[field] = Value::String(value.clone());
        }
    }
    let url = url_of(target, &["admin", "authorization-providers", id])?;
    let provider = send(client()?.put(url).json(&body), &target.server)?;
    println!("set provider {id}");
    print_provider(&provider);
    Ok(())
}

fn print_provider(provider: &Value) {
    let text = |key: &str| provider[key].as_str().map(str::to_string);
    println!(
        "{}  {}  client {}{}",
        text("id").unwrap_or_default(),
        text("displayName").unwrap_or_else(|| "-".into()),
        text("clientId").unwrap_or_default(),
        if provider["clientSecretSet"] == true { " (secret set)" } else { " (no secret: public client)" },
    );
    for (key, what) in [
        ("issuer", "issuer"),
        ("authorizationEndpoint", "authorization endpoint"),
        ("tokenEndpoint", "token endpoint"),
        ("revocationEndpoint", "revocation endpoint"),
        ("resource", "resource"),
    ] {
        if let Some(url) = text(key) {
            println!("  {what} {url}");
        }
    }
    for (name, value) in provider["authorizationParameters"].as_object().into_iter().flatten() {
        println!("  parameter {name}={}", value.as_str().unwrap_or(""));
    }
}

/// `plinth provider list`.
pub fn list_providers(target: &TenantTarget) -> anyhow::Result<()> {
    let url = url_of(target, &["admin", "authorization-providers"])?;
    let answer = send(client()?.get(url), &target.server)?;
    let providers = answer["providers"].as_array().cloned().unwrap_or_default();
    if providers.is_empty() {
        println!("no providers");
    }
    providers.iter().for_each(print_provider);
    Ok(())
}

/// `plinth provider delete ID`.
pub fn delete_provider(target: &TenantTarget, id: &str) -> anyhow::Result<()> {
    send_empty(client()?.delete(url_of(target, &["admin", "authorization-providers", id])?), &target.server)?;
    println!("deleted provider {id}, with every account connected to it");
    Ok(())
}

/// `plinth connections list --end-user NAME`.
pub fn list_connections(target: &TenantTarget, end_user: &str) -> anyhow::Result<()> {
    let url = url_of(target, &["admin", "end-users", end_user, "connections"])?;
    let answer = send(client()?.get(url), &target.server)?;
    let connections = answer["connections"].as_array().cloned().unwrap_or_default();
    if connections.is_empty() {
        println!("{end_user} has connected no account");
    }
    for connection in connections {
        let scopes: Vec<&str> =
            connection["scopes"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        println!(
            "{}  ({})  scopes {}  connected {}{}",
            connection["provider"].as_str().unwrap_or("?"),
            connection["providerName"].as_str().unwrap_or("?"),
            if scopes.is_empty() { "(default)".to_string() } else { scopes.join(" ") },
            connection["connectedAt"].as_i64().map_or("?".to_string(), plinth::host::rfc3339),
            if connection["refreshable"] == true { "  refreshable" } else { "" },
        );
    }
    Ok(())
}

/// `plinth connections revoke --end-user NAME --provider ID`.
pub fn revoke_connection(target: &TenantTarget, end_user: &str, provider: &str) -> anyhow::Result<()> {
    let url = url_of(target, &["admin", "end-users", end_user, "connections", provider])?;
    send_empty(client()?.delete(url), &target.server)?;
    println!("revoked {end_user}'s {provider} account");
    Ok(())
}
