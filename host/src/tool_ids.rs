//! What a tool is called in each protocol, where a front door's name for
//! it is not simply its signature's: the Open Tool Calling `ToolId`
//! (`Toolkit.Name@N.0.0`). The OTC door resolves and serves these ids; the
//! catalog shows them beside the A2T toolId and the MCP name.

use crate::registry::{Tool, ToolVersion};

/// `lookup_weather_by_city` → `LookupWeatherByCity`. A word that starts with
/// a digit keeps its separator (`route_66` → `Route_66`), so no two snake
/// case names meet and the OTC door's `snake_case` undoes it. Also turns tenant names
/// (`acme-travel`) into default toolkit names (`AcmeTravel`).
pub fn pascal_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for word in name.split(['_', '-']).filter(|w| !w.is_empty()) {
        let mut chars = word.chars();
        if let Some(first) = chars.next() {
            if first.is_ascii_alphabetic() {
                out.push(first.to_ascii_uppercase());
            } else if !out.is_empty() {
                out.push('_');
                out.push(first);
            } else {
                out.push(first);
            }
            out.extend(chars);
        }
    }
    out
}

/// The toolkit of a version: its `plinth.toml`'s, else its tenant's name.
pub fn toolkit(tool: &Tool, version: &ToolVersion) -> String {
    version.manifest.toolkit.clone().unwrap_or_else(|| pascal_case(&tool.tenant))
}

/// A version's OTC `ToolId`: `Toolkit.Name@N.0.0` (Plinth's versions are
/// whole numbers, published as `N.0.0`).
pub fn otc_tool_id(tool: &Tool, version: &ToolVersion) -> String {
    format!("{}.{}@{}.0.0", toolkit(tool, version), pascal_case(&version.signature.name), version.number)
}
