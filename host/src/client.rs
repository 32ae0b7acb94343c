//! The operator's client commands: `deploy`, `retire`, `tools`, and the
//! offline `diff`. They talk to a server over its public A2T and admin APIs,
//! exactly as any other client would.

use crate::ServerArgs;
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

fn with_token(request: RequestBuilder, server: &ServerArgs) -> RequestBuilder {
    match &server.token {
        Some(token) => request.bearer_auth(token),
        None => request,
    }
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

/// `plinth deploy FILE`.
pub fn deploy(server: &ServerArgs, file: &Path, expect_version: Option<u32>) -> anyhow::Result<()> {
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let mut url = format!("{}/admin/tools", base(server));
    if let Some(n) = expect_version {
        url.push_str(&format!("?expectVersion={n}"));
    }
    let request = client()?.post(url).header("content-type", "application/wasm").body(bytes);
    let body = json(with_token(request, server).send().context("reaching the server")?)?;
    let previous = body["previousVersion"].as_u64().map_or("none".to_string(), |n| n.to_string());
    println!(
        "{} version {} (toolId {}, sha256 {}, previous version {previous})",
        body["name"].as_str().unwrap_or("?"),
        body["version"],
        body["toolId"].as_str().unwrap_or("?"),
        body["sha256"].as_str().unwrap_or("?"),
    );
    Ok(())
}

/// Every item of a paginated A2T listing at `path`, walking all pages.
fn walk(server: &ServerArgs, path: &str) -> anyhow::Result<Vec<Value>> {
    let client = client()?;
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut url = format!("{}{path}?pageLimit=200", base(server));
        if let Some(c) = &cursor {
            url.push_str(&format!("&pageCursor={c}"));
        }
        let page = json(client.get(url).send().context("reaching the server")?)?;
        items.extend(page["items"].as_array().cloned().unwrap_or_default());
        match page["paging"]["next"].as_str() {
            Some(next) => cursor = Some(next.to_string()),
            None => return Ok(items),
        }
    }
}

fn all_tools(server: &ServerArgs) -> anyhow::Result<Vec<Value>> {
    walk(server, "/tools")
}

/// A tool's id from its name or id.
fn tool_id(server: &ServerArgs, tool: &str) -> anyhow::Result<String> {
    if uuid::Uuid::parse_str(tool).is_ok() {
        return Ok(tool.to_string());
    }
    all_tools(server)?
        .iter()
        .find(|t| t["name"] == tool)
        .and_then(|t| t["toolId"].as_str().map(str::to_string))
        .with_context(|| format!("the server has no tool called `{tool}`"))
}

/// `plinth tools list`.
pub fn list(server: &ServerArgs) -> anyhow::Result<()> {
    println!("{:<40} {:>7}  TOOL ID", "NAME", "VERSION");
    for tool in all_tools(server)? {
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
pub fn versions(server: &ServerArgs, tool: &str) -> anyhow::Result<()> {
    let id = tool_id(server, tool)?;
    let versions = walk(server, &format!("/tools/{id}/versions"))?;
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
pub fn retire(server: &ServerArgs, tool: &str, version: u32) -> anyhow::Result<()> {
    let id = tool_id(server, tool)?;
    let request = client()?.delete(format!("{}/admin/tools/{id}/versions/{version}", base(server)));
    let body = json(with_token(request, server).send().context("reaching the server")?)?;
    let current =
        body["currentVersion"].as_u64().map_or("none (every version is retired)".to_string(), |n| n.to_string());
    println!("retired version {version} of {tool}; current version: {current}");
    Ok(())
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
