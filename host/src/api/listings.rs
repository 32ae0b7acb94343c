//! What the doors list about a tool version, built in one place so that
//! the catalog's previews of a toolset (`catalog/toolsets.rs`) are what the
//! doors send: MCP's `tools/list` entry. (A2T's is the version's locked
//! JSON, `a2t::version_json`.) A leaf of the doors: it uses none of them.

use super::AppState;
use crate::host::ConfirmationNeed;
use crate::registry::{Tool, ToolVersion};
use crate::signature::{Signature, Wording, schema};
use rmcp::ErrorData;
use serde_json::{Map, Value, json};
use std::sync::Arc;

/// The `_meta` keys Plinth reads on `tools/call` and writes on tools.
pub mod meta {
    /// The tool's id (stable across versions).
    pub const TOOL_ID: &str = "toolId";
    /// A version number: on a tool, its current version; on a call, the
    /// version the call is pinned to.
    pub const VERSION: &str = "version";
    /// The sha256 of a version's component bytes: on a call, what the
    /// version the call resolves to must have.
    pub const SHA256: &str = "sha256";
    /// On a call: the end user it is made for (who confirms it).
    pub const END_USER: &str = "endUser";
    /// On a tool: `required` or `conditional` when calls may need their end
    /// user's confirmation.
    pub const CONFIRMATION: &str = "confirmation";
    /// On a tool: where its version came from (`source`: the OCI reference
    /// and manifest digest) and who signed it (`signers`), verified at
    /// deploy; absent for posted bytes no trusted key signed.
    pub const PROVENANCE: &str = "provenance";
    /// On a tool: the accounts it acts with (`[{"provider", "scopes"}]`):
    /// a call needs its end user's grant at each (docs/authorization.md).
    pub const AUTHORIZATION: &str = "authorization";
}

/// A tool as `tools/list` shows it: the version's locked part built once,
/// the confirmation marker (a publisher may change it) per answer. Under a
/// toolset's root, with the designer's words (`wording`), the locked part
/// is built again with them.
pub fn tool_entry(
    host: &AppState,
    tool: &Tool,
    version: &ToolVersion,
    wording: Option<&Wording>,
) -> Result<rmcp::model::Tool, ErrorData> {
    let mut view = match wording {
        None => version.mcp_view.get_or_init(|| tool_view(tool, version, &version.signature)).clone(),
        Some(wording) => tool_view(tool, version, &wording.apply(&version.signature)),
    };
    let need = host.confirmation_need(tool, version);
    if let Some(marker) = need.marker() {
        view["_meta"][meta::CONFIRMATION] = marker.into();
    }
    if let Some(annotations) = annotations(need, version) {
        view["annotations"] = annotations;
    }
    // A call may be pinned to an older live version, whose answer must fit
    // this schema too: only outputs every live version has are required (a
    // compatible version may add outputs, never remove one).
    let live: Vec<Arc<ToolVersion>> =
        tool.versions_before(None, usize::MAX).into_iter().filter(|v| v.retired_at().is_none()).collect();
    if live.len() > 1
        && let Some(required) =
            view.get_mut("outputSchema").and_then(|s| s.get_mut("required")).and_then(Value::as_array_mut)
    {
        required.retain(|name| {
            live.iter().all(|v| v.signature.outputs.iter().any(|o| Some(o.name.as_str()) == name.as_str()))
        });
    }
    serde_json::from_value(view)
        .map_err(|e| ErrorData::internal_error(format!("a tool could not be listed: {e}"), None))
}

/// The locked part of a version's MCP tool: name, description, schemas
/// (of `signature`: the version's, or it with a toolset's words), what
/// identifies the bytes.
fn tool_view(tool: &Tool, version: &ToolVersion, signature: &Signature) -> Value {
    let mut view = json!({
        "name": signature.name,
        "description": signature.description,
        "inputSchema": schema::input_schema(signature),
        "_meta": {
            meta::TOOL_ID: tool.id.to_string(),
            meta::VERSION: version.number,
            meta::SHA256: version.sha256,
        },
    });
    if let Some(output) = schema::output_schema(signature) {
        view["outputSchema"] = output;
    }
    if version.provenance != crate::supply::Provenance::default() {
        view["_meta"][meta::PROVENANCE] = version.provenance.to_json();
    }
    if !version.manifest.authorization.is_empty() {
        view["_meta"][meta::AUTHORIZATION] = version.manifest.published_authorization();
    }
    view
}

/// A tool's MCP annotations: the publisher's claims from `plinth.toml`
/// (`[annotations]`) with what Plinth knows in their place
/// ([`crate::manifest::ToolAnnotations::published`]); `None` when nothing
/// is known.
fn annotations(need: ConfirmationNeed, version: &ToolVersion) -> Option<Value> {
    let published = crate::host::published_annotations(version, need);
    let mut out = Map::new();
    if let Some(title) = published.title {
        out.insert("title".into(), title.into());
    }
    for (key, value) in [
        ("readOnlyHint", published.read_only),
        ("destructiveHint", published.destructive),
        ("idempotentHint", published.idempotent),
        ("openWorldHint", published.open_world),
    ] {
        if let Some(value) = value {
            out.insert(key.into(), value.into());
        }
    }
    (!out.is_empty()).then_some(Value::Object(out))
}
