//! The one internal model of a tool's published signature.
//!
//! A [`Signature`] is derived once per version, when the component is loaded
//! ([`derive`]), and checked against the rules of the A2T draft (section 6.1).
//! Everything else — the A2T JSON, input validation, output checks — is a view
//! of it; nothing re-reads WIT per request.

pub mod a2t;
mod derive;
mod diff;
pub mod schema;
mod wording;

pub use derive::{DeriveError, derive};
pub use diff::{Change, SignatureDiff};
pub use wording::{MAX_WORDING_CHARS_PER_TOOLSET, Review, Wording, WordingError};

use serde::{Deserialize, Serialize};

/// A tool's signature: its name, description and typed parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Signature {
    /// The tool's name in snake case (the WIT world name, `-` → `_`).
    pub name: String,
    /// The world's doc comment.
    pub description: String,
    /// An optional image URL, from `plinth.toml`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub img: Option<String>,
    /// Tags from `plinth.toml`.
    #[serde(default)]
    pub tags: Vec<String>,
    /// The fields of the `input` record, in WIT order.
    pub inputs: Vec<InputParam>,
    /// The fields of the `output` record, in WIT order.
    pub outputs: Vec<OutputParam>,
}

/// One input parameter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputParam {
    /// Stable id across versions: the field name in snake case.
    pub id: String,
    /// The name the LLM writes in an invocation (same as `id`).
    pub name: String,
    /// The WIT field name (kebab case), used to build the component value.
    pub field: String,
    /// The field's doc comment.
    pub description: String,
    /// `false` for `option<T>` fields.
    pub required: bool,
    /// The parameter's type and constraints.
    #[serde(rename = "type")]
    pub ty: InputType,
    /// Entered by the end user on the confirmation page, never by the agent
    /// (`private = true` in `plinth.toml`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub private: bool,
}

/// The input types A2T allows: deliberately few, so LLMs synthesize them well.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum InputType {
    /// `string`, optionally bounded in length.
    String {
        /// Maximum length in characters, from `plinth.toml`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_length: Option<u32>,
    },
    /// Any WIT integer type, bounded by its range (narrowed by `plinth.toml`).
    Int {
        /// The WIT integer type, needed to build the component value.
        wit: IntKind,
        /// Smallest allowed value.
        #[serde(with = "decimal")]
        min: i128,
        /// Largest allowed value.
        #[serde(with = "decimal")]
        max: i128,
    },
    /// `bool`.
    Boolean,
    /// A WIT `enum`.
    Enum {
        /// The allowed values, in WIT order.
        values: Vec<EnumValue>,
    },
}

/// Stores `i128` bounds as decimal strings: JSON parsers (serde_json among
/// them) cannot read integers beyond 64 bits back.
mod decimal {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(n: &i128, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&n.to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<i128, D::Error> {
        String::deserialize(d)?.parse().map_err(D::Error::custom)
    }
}

/// The WIT integer types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[allow(missing_docs)]
pub enum IntKind {
    U8,
    U16,
    U32,
    U64,
    S8,
    S16,
    S32,
    S64,
}

impl IntKind {
    /// The full range of the WIT type.
    pub fn range(self) -> (i128, i128) {
        match self {
            IntKind::U8 => (0, u8::MAX.into()),
            IntKind::U16 => (0, u16::MAX.into()),
            IntKind::U32 => (0, u32::MAX.into()),
            IntKind::U64 => (0, u64::MAX.into()),
            IntKind::S8 => (i8::MIN.into(), i8::MAX.into()),
            IntKind::S16 => (i16::MIN.into(), i16::MAX.into()),
            IntKind::S32 => (i32::MIN.into(), i32::MAX.into()),
            IntKind::S64 => (i64::MIN.into(), i64::MAX.into()),
        }
    }
}

/// One allowed value of an enum.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnumValue {
    /// The value on the wire, in CAPITALIZED_SNAKE case.
    pub name: String,
    /// The WIT case name (kebab case).
    pub case: String,
    /// The case's doc comment.
    pub description: String,
}

/// One output parameter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputParam {
    /// Stable id across versions: the field name in snake case.
    pub id: String,
    /// The name used in `output_parameters` (same as `id`).
    pub name: String,
    /// The WIT field name (kebab case).
    pub field: String,
    /// The field's doc comment.
    pub description: String,
    /// The parameter's type.
    #[serde(rename = "type")]
    pub ty: OutputType,
}

/// Output types: strings, integers and enums keep their type; anything else
/// (records, lists, options, floats…) is returned as a JSON value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum OutputType {
    /// `string`.
    String,
    /// Any WIT integer type.
    Int,
    /// A WIT `enum`.
    Enum {
        /// The possible values, in WIT order.
        values: Vec<EnumValue>,
    },
    /// Any other type, rendered as JSON.
    Json {
        /// The JSON Schema of what the WIT type renders as (an object with
        /// its fields, an array of its items, a number…), derived at load.
        /// Versions stored before it was derived have none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        schema: Option<serde_json::Value>,
    },
}

impl InputType {
    /// The A2T type name.
    pub fn a2t_name(&self) -> &'static str {
        match self {
            InputType::String { .. } => "string",
            InputType::Int { .. } => "int",
            InputType::Boolean => "boolean",
            InputType::Enum { .. } => "enum",
        }
    }
}

impl OutputType {
    /// The A2T type name.
    pub fn a2t_name(&self) -> &'static str {
        match self {
            OutputType::String => "string",
            OutputType::Int => "int",
            OutputType::Enum { .. } => "enum",
            OutputType::Json { .. } => "json",
        }
    }
}

/// Longest tool name the draft allows (it says "less than 255").
pub const MAX_NAME_CHARS: usize = 254;
/// Longest tool description the draft allows (it says "less than 2000").
pub const MAX_TOOL_DESCRIPTION_CHARS: usize = 1999;
/// Longest parameter or enum value description ("maximum length of 2000").
pub const MAX_DESCRIPTION_CHARS: usize = 2000;
/// Longest enum value name ("maximum length of 255").
pub const MAX_ENUM_NAME_CHARS: usize = 255;

/// A broken rule of the A2T draft, section 6.1.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{at}: {rule}")]
pub struct RuleViolation {
    /// Where: the tool, or a parameter or enum value of it.
    pub at: String,
    /// Which rule, in words.
    pub rule: String,
}

impl Signature {
    /// Checks every rule of the A2T draft (section 6.1) that a signature must
    /// satisfy on its own; uniqueness on the server is the registry's job.
    pub fn check_rules(&self) -> Result<(), RuleViolation> {
        let tool = format!("tool `{}`", self.name);
        let broken = |at: &str, rule: String| Err(RuleViolation { at: at.to_string(), rule });

        if self.name.chars().count() > MAX_NAME_CHARS {
            return broken(
                &tool,
                format!("the name must be shorter than 255 characters (it has {})", self.name.chars().count()),
            );
        }
        if !is_snake_case(&self.name) {
            return broken(
                &tool,
                "the name must be snake_case: lowercase letters, digits and single underscores, starting with a letter"
                    .into(),
            );
        }
        check_description(&tool, &self.description, MAX_TOOL_DESCRIPTION_CHARS, "the world's doc comment")?;
        for tag in &self.tags {
            if tag.trim().is_empty() {
                return broken(&tool, "tags must not be empty".into());
            }
        }

        let mut ids = std::collections::HashSet::new();
        let mut names = std::collections::HashSet::new();
        for input in &self.inputs {
            let at = format!("input `{}`", input.id);
            if !ids.insert(&input.id) {
                return broken(&at, "parameter ids must be unique within the tool".into());
            }
            if !names.insert(&input.name) {
                return broken(&at, "parameter names must be unique within the tool".into());
            }
            check_description(&at, &input.description, MAX_DESCRIPTION_CHARS, "the field's doc comment")?;
            match &input.ty {
                InputType::Int { min, max, .. } if min > max => {
                    return broken(&at, format!("min ({min}) is greater than max ({max})"));
                }
                InputType::String { max_length: Some(0) } => {
                    return broken(&at, "max-length must be at least 1".into());
                }
                InputType::Enum { values } => check_enum(&at, values)?,
                _ => {}
            }
        }
        let mut ids = std::collections::HashSet::new();
        for output in &self.outputs {
            let at = format!("output `{}`", output.id);
            if !ids.insert(&output.id) {
                return broken(&at, "parameter ids must be unique within the tool".into());
            }
            check_description(&at, &output.description, MAX_DESCRIPTION_CHARS, "the field's doc comment")?;
            if let OutputType::Enum { values } = &output.ty {
                check_enum(&at, values)?;
            }
        }
        Ok(())
    }

    /// The sha256 (hex) of the signature's JSON: what its ETag is made of.
    pub fn sha256(&self) -> String {
        // Field order is fixed by the struct, so the JSON is canonical for
        // this model; the hash is stored with the version at deploy time.
        crate::digest::sha256_hex(&serde_json::to_vec(self).unwrap_or_default())
    }

    /// The input parameter called `name`.
    pub fn input(&self, name: &str) -> Option<&InputParam> {
        self.inputs.iter().find(|p| p.name == name)
    }
}

fn check_description(at: &str, text: &str, max: usize, source: &str) -> Result<(), RuleViolation> {
    let chars = text.chars().count();
    if text.trim().is_empty() {
        return Err(RuleViolation {
            at: at.to_string(),
            rule: format!("a description is required: write {source}; it is what the LLM reads"),
        });
    }
    if chars > max {
        return Err(RuleViolation {
            at: at.to_string(),
            rule: format!("the description must be at most {max} characters (it has {chars})"),
        });
    }
    Ok(())
}

fn check_enum(at: &str, values: &[EnumValue]) -> Result<(), RuleViolation> {
    for value in values {
        let at = format!("{at}, value `{}`", value.name);
        if value.name.chars().count() > MAX_ENUM_NAME_CHARS {
            return Err(RuleViolation { at, rule: "enum value names must be at most 255 characters".into() });
        }
        if !is_capitalized_snake_case(&value.name) {
            return Err(RuleViolation { at, rule: "enum value names must be CAPITALIZED_SNAKE_CASE".into() });
        }
        check_description(&at, &value.description, MAX_DESCRIPTION_CHARS, "the enum case's doc comment")?;
    }
    Ok(())
}

/// `lookup_weather_by_city`: lowercase ASCII words of letters and digits
/// joined by single underscores, starting with a letter.
pub fn is_snake_case(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.split('_').all(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()))
}

/// `PREMIUM_ECONOMY`.
pub fn is_capitalized_snake_case(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_uppercase())
        && name.split('_').all(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit()))
}

/// `flight-number` → `flight_number`.
pub fn snake(kebab: &str) -> String {
    kebab.replace('-', "_")
}

/// `premium-economy` → `PREMIUM_ECONOMY`.
pub fn capitalized_snake(kebab: &str) -> String {
    kebab.replace('-', "_").to_ascii_uppercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_rules() {
        assert!(is_snake_case("lookup_weather_by_city"));
        assert!(is_snake_case("echo2"));
        for bad in ["", "Echo", "a__b", "_a", "a_", "2fast", "a-b"] {
            assert!(!is_snake_case(bad), "{bad}");
        }
        assert!(is_capitalized_snake_case("PREMIUM_ECONOMY"));
        for bad in ["", "Economy", "A__B", "_A", "1A"] {
            assert!(!is_capitalized_snake_case(bad), "{bad}");
        }
        assert_eq!(snake("temp-f"), "temp_f");
        assert_eq!(capitalized_snake("premium-economy"), "PREMIUM_ECONOMY");
    }

    #[test]
    fn wide_integer_bounds_survive_storage() {
        let ty = InputType::Int { wit: IntKind::U64, min: 0, max: u64::MAX.into() };
        let json = serde_json::to_string(&ty).unwrap();
        assert_eq!(serde_json::from_str::<InputType>(&json).unwrap(), ty);
    }
}
