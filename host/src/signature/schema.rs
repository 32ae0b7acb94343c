//! The JSON Schema of a signature's inputs and outputs: one definition for
//! every front door that publishes JSON Schema (OTC's `input_schema`, MCP's
//! `inputSchema` and `outputSchema`).

use super::{EnumValue, InputType, OutputType, Signature};
use serde_json::{Map, Value, json};

/// An integer bound as JSON: past the range of i64/u64 (which WIT's
/// integers never reach) it is `null`.
pub fn int_value(n: i128) -> Value {
    if let Ok(n) = i64::try_from(n) {
        n.into()
    } else if let Ok(n) = u64::try_from(n) {
        n.into()
    } else {
        Value::Null
    }
}

/// An enum as a string with `enum`, each value's description kept in the
/// property's description (JSON Schema has no place for it on the value).
fn enum_schema(description: &str, values: &[EnumValue]) -> Value {
    let mut text = format!("{description}\n\nAllowed values:");
    for value in values {
        text.push_str(&format!("\n- {}: {}", value.name, value.description));
    }
    let names: Vec<&str> = values.iter().map(|v| v.name.as_str()).collect();
    json!({ "type": "string", "enum": names, "description": text })
}

/// The input record as a JSON Schema object. Private inputs are left out:
/// the end user enters them on the confirmation page, the agent is not
/// even offered them.
pub fn input_schema(signature: &Signature) -> Value {
    let mut properties = Map::new();
    let offered = || signature.inputs.iter().filter(|p| !p.private);
    for param in offered() {
        let schema = match &param.ty {
            InputType::String { max_length } => {
                let mut schema = json!({ "type": "string", "description": param.description });
                if let Some(max) = max_length {
                    schema["maxLength"] = (*max).into();
                }
                schema
            }
            InputType::Int { min, max, .. } => json!({
                "type": "integer",
                "minimum": int_value(*min),
                "maximum": int_value(*max),
                "description": param.description,
            }),
            InputType::Boolean => json!({ "type": "boolean", "description": param.description }),
            InputType::Enum { values } => enum_schema(&param.description, values),
        };
        properties.insert(param.name.clone(), schema);
    }
    let required: Vec<&str> = offered().filter(|p| p.required).map(|p| p.name.as_str()).collect();
    json!({ "type": "object", "properties": properties, "required": required, "additionalProperties": false })
}

/// The output record as a JSON Schema object; `None` for a tool without
/// outputs.
pub fn output_schema(signature: &Signature) -> Option<Value> {
    if signature.outputs.is_empty() {
        return None;
    }
    let mut properties = Map::new();
    for param in &signature.outputs {
        let schema = match &param.ty {
            OutputType::String => json!({ "type": "string", "description": param.description }),
            OutputType::Int => json!({ "type": "integer", "description": param.description }),
            OutputType::Enum { values } => enum_schema(&param.description, values),
            // Records, lists, floats…: the schema of the JSON their WIT
            // type renders as (none for versions stored before it was).
            OutputType::Json { schema } => {
                let mut schema = schema.clone().filter(Value::is_object).unwrap_or_else(|| json!({}));
                schema["description"] = param.description.clone().into();
                schema
            }
        };
        properties.insert(param.name.clone(), schema);
    }
    let required: Vec<&str> = signature.outputs.iter().map(|p| p.name.as_str()).collect();
    // Open to more properties: a compatible new version may add outputs,
    // and a client holding this schema must still accept its answers.
    Some(json!({ "type": "object", "properties": properties, "required": required }))
}
