//! The A2T `ToolSignature` JSON of a signature (draft section 6.1): a view
//! of the one model, like [`super::schema`] is for JSON Schema.
//!
//! A version's JSON is locked with it except for a few fields
//! (`currentVersion`, retirement, the confirmation marker), so it is
//! serialised once, when the version is loaded ([`LockedJson`]), and an
//! answer only splices those fields in: enumeration costs the same whether
//! a page's versions were listed before or not.

use super::{EnumValue, InputType, OutputType, Signature, schema};
use serde_json::{Map, Value, json};

/// The A2T `ToolSignature` JSON of one version. `current_version` is `None`
/// when every version of the tool is retired.
pub fn signature_json(
    tool_id: Option<&uuid::Uuid>,
    version: u32,
    current_version: Option<u32>,
    s: &Signature,
) -> Value {
    Value::Object(signature_fields(tool_id, version, current_version, s))
}

/// [`signature_json`]'s fields, in their order.
fn signature_fields(
    tool_id: Option<&uuid::Uuid>,
    version: u32,
    current_version: Option<u32>,
    s: &Signature,
) -> Map<String, Value> {
    let mut out = Map::new();
    if let Some(id) = tool_id {
        out.insert("toolId".into(), id.to_string().into());
    }
    out.insert("name".into(), s.name.clone().into());
    out.insert("description".into(), s.description.clone().into());
    if let Some(img) = &s.img {
        out.insert("img".into(), img.clone().into());
    }
    out.insert("version".into(), version.into());
    out.insert("currentVersion".into(), current_version.into());
    out.insert("tags".into(), s.tags.clone().into());
    let inputs = s
        .inputs
        .iter()
        .map(|p| {
            // A private input is the end user's to type on the confirmation
            // page, never the agent's: marked, and not required of the agent
            // (docs/a2t.md, signature extensions).
            let mut param = json!({
                "id": p.id,
                "name": p.name,
                "type": p.ty.a2t_name(),
                "description": p.description,
                "required": p.required && !p.private,
            });
            if p.private {
                param["private"] = true.into();
            }
            match &p.ty {
                InputType::String { max_length: Some(max) } => param["maxLength"] = (*max).into(),
                InputType::Int { min, max, .. } => {
                    param["min"] = schema::int_value(*min);
                    param["max"] = schema::int_value(*max);
                }
                InputType::Enum { values } => param["allowed-values"] = allowed_values(values),
                _ => {}
            }
            param
        })
        .collect::<Vec<_>>();
    out.insert("input_parameters".into(), inputs.into());
    let outputs = s
        .outputs
        .iter()
        .map(|p| {
            let mut param =
                json!({ "id": p.id, "name": p.name, "type": p.ty.a2t_name(), "description": p.description });
            if let OutputType::Enum { values } = &p.ty {
                param["allowed-values"] = allowed_values(values);
            }
            param
        })
        .collect::<Vec<_>>();
    out.insert("output_parameters".into(), outputs.into());
    out
}

fn allowed_values(values: &[EnumValue]) -> Value {
    values.iter().map(|v| json!({ "name": v.name, "description": v.description })).collect()
}

/// A version's A2T JSON text with `contentHash`, serialised once, in two
/// pieces around `currentVersion`'s value, and without its closing brace
/// (the fields that may change are appended per answer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockedJson {
    /// `{…,"currentVersion":`
    pub head: String,
    /// `,…` up to, not including, the closing brace.
    pub tail: String,
}

impl LockedJson {
    /// Serialises version `version` (bytes `sha256`) of tool `tool_id`,
    /// with its extensions (docs/a2t.md): its provenance's JSON, present
    /// when the version came from a registry or a trusted key signed it,
    /// and the accounts it acts with (`authorization`) — locked like the
    /// rest, in the order given.
    pub fn new(
        tool_id: &uuid::Uuid,
        version: u32,
        sha256: &str,
        s: &Signature,
        extensions: Map<String, Value>,
    ) -> LockedJson {
        let (mut head, mut tail) = (Map::new(), Map::new());
        let mut before = true;
        for (key, value) in signature_fields(Some(tool_id), version, None, s) {
            if key == "currentVersion" {
                before = false;
            } else if before {
                head.insert(key, value);
            } else {
                tail.insert(key, value);
            }
        }
        tail.insert("contentHash".into(), format!("sha256:{sha256}").into());
        tail.extend(extensions);
        // `{"a":1}` → `{"a":1,"currentVersion":` and `,"b":2`.
        let head = Value::Object(head).to_string();
        let tail = Value::Object(tail).to_string();
        LockedJson {
            head: format!("{},\"currentVersion\":", head.strip_suffix('}').unwrap_or(&head)),
            tail: format!(",{}", tail.strip_prefix('{').and_then(|t| t.strip_suffix('}')).unwrap_or(&tail)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spliced back together, the pieces are the signature's JSON with its
    /// hash, field for field and in order.
    #[test]
    fn the_locked_pieces_with_current_version_spliced_in_are_the_whole_json() {
        let signature: Signature = serde_json::from_value(json!({
            "name": "echo", "description": "Says it back.", "tags": ["demo"],
            "inputs": [{"id": "text", "name": "text", "field": "text", "description": "What to say.",
                        "required": true, "type": {"kind": "string", "max_length": 10}}],
            "outputs": [{"id": "text", "name": "text", "field": "text", "description": "What was said.", "type": {"kind": "string"}}]
        }))
        .unwrap();
        let id = uuid::Uuid::new_v4();
        let locked = LockedJson::new(&id, 2, "ab", &signature, Map::new());
        let text = format!("{}3{}}}", locked.head, locked.tail);
        let mut expected = signature_json(Some(&id), 2, Some(3), &signature);
        expected["contentHash"] = "sha256:ab".into();
        let parsed: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(parsed, expected);
        let keys: Vec<&String> = parsed.as_object().unwrap().keys().collect();
        let expected_keys: Vec<&String> = expected.as_object().unwrap().keys().collect();
        assert_eq!(keys, expected_keys);
    }
}
