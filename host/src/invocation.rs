//! Invocation values: JSON in, component values through, JSON out.
//!
//! [`input_record`] validates named input values against the [`Signature`]
//! before any tool code runs and builds the `input` record (every front door
//! turns its request into those named values; [`input_value`] does it for
//! A2T); [`read_result`]
//! turns the tool's `result<output, tool-error>` back into named JSON
//! outputs, checking them against the signature on the way.

use crate::signature::{EnumValue, InputType, OutputType, Signature, capitalized_snake, snake};
use serde::Serialize;
use serde_json::{Map, Value, json};
use std::collections::{HashMap, HashSet};
use wasmtime::component::Val;

/// Why an invocation was refused before the tool ran. The message is written
/// for an LLM: it says what was wrong and what would be right.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct InputError {
    /// A stable snake_case code.
    pub code: &'static str,
    /// What is wrong, in words.
    pub message: String,
    /// The offending parameter, when there is one.
    pub parameter: Option<String>,
}

/// Every code input validation may answer with.
pub const INPUT_ERROR_CODES: &[&str] = &[
    "invalid_request",
    "wrong_tool_name",
    "duplicate_parameter",
    "unknown_parameter",
    "private_parameter",
    "missing_parameter",
    "invalid_type",
    "too_long",
    "out_of_range",
    "invalid_enum_value",
];

fn refuse(code: &'static str, parameter: Option<&str>, message: String) -> InputError {
    InputError { code, message, parameter: parameter.map(str::to_string) }
}

/// One named output value.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutputValue {
    /// The output's name, as in the signature.
    pub name: String,
    /// Its value.
    pub value: Value,
}

/// The `tool-error` a tool returned.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolError {
    /// What went wrong, for the LLM.
    pub message: String,
    /// Detail for the agent's developer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub developer_message: Option<String>,
    /// Whether retrying may succeed.
    pub can_retry: bool,
    /// How long to wait before retrying.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// Extra text for the LLM's prompt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub additional_prompt_content: Option<String>,
}

/// What a tool's result turned out to be.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolResult {
    /// `ok(output)`: the named outputs, in signature order.
    Outputs(Vec<OutputValue>),
    /// `err(tool-error)`.
    Failed(ToolError),
}

impl ToolResult {
    /// Replaces secret values in everything the caller will see.
    pub fn redact(&mut self, redactor: &crate::runtime::Redactor) {
        match self {
            ToolResult::Outputs(outputs) => outputs.iter_mut().for_each(|o| redactor.json(&mut o.value)),
            ToolResult::Failed(e) => e.redact(redactor),
        }
    }
}

impl ToolError {
    /// Replaces secret values in its texts.
    pub fn redact(&mut self, redactor: &crate::runtime::Redactor) {
        self.message = redactor.text(&self.message);
        for text in [&mut self.developer_message, &mut self.additional_prompt_content].into_iter().flatten() {
            *text = redactor.text(text);
        }
    }
}

/// The tool produced something its signature or the host's limits do not
/// allow.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OutputError {
    /// Not what the signature declares.
    #[error("the tool returned an invalid output: {0}")]
    Invalid(String),
    /// Larger than the host passes on.
    #[error("the tool's output is too large: {0}")]
    TooLarge(String),
}

/// How much output the host passes on.
#[derive(Debug, Clone, Copy)]
pub struct OutputLimits {
    /// Largest single output value, in bytes of JSON.
    pub max_value_bytes: usize,
    /// Largest sum of all output values.
    pub max_total_bytes: usize,
}

impl Default for OutputLimits {
    fn default() -> Self {
        OutputLimits { max_value_bytes: 1 << 20, max_total_bytes: 4 << 20 }
    }
}

/// The size of a value's JSON, without building the text.
fn json_size<T: Serialize + ?Sized>(value: &T) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

fn invalid(what: String) -> OutputError {
    OutputError::Invalid(what)
}

/// Validates an A2T invocation body against the signature and builds the
/// `input` record. No coercion: `"5"` is not an int, `1` is not a boolean.
pub fn input_value(signature: &Signature, body: &Value) -> Result<Val, InputError> {
    let arguments = a2t_arguments(signature, body)?;
    // `input_record` reports at least one error when it fails.
    input_record(signature, &arguments).map_err(|mut errors| errors.swap_remove(0))
}

/// The named values of an A2T invocation body (`name` and
/// `input_parameters`), checked for shape but not against the parameters.
pub fn a2t_arguments<'a>(signature: &Signature, body: &'a Value) -> Result<Vec<(&'a str, &'a Value)>, InputError> {
    let Some(body) = body.as_object() else {
        return Err(refuse(
            "invalid_request",
            None,
            "the body must be a JSON object with `name` and `input_parameters`".into(),
        ));
    };
    match body.get("name") {
        Some(Value::String(name)) if *name == signature.name => {}
        Some(Value::String(name)) => {
            return Err(refuse(
                "wrong_tool_name",
                None,
                format!("this endpoint invokes `{}`, but the request names `{name}`", signature.name),
            ));
        }
        _ => {
            return Err(refuse(
                "invalid_request",
                None,
                format!("`name` must be the tool's name, `{}`", signature.name),
            ));
        }
    }
    let params = match body.get("input_parameters") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(params)) => params,
        Some(_) => {
            return Err(refuse(
                "invalid_request",
                None,
                "`input_parameters` must be an array of {\"name\", \"value\"} objects".into(),
            ));
        }
    };
    let mut arguments: Vec<(&str, &Value)> = Vec::with_capacity(params.len());
    // Few are compared with those before them, many hashed: the same
    // bound as in `input_record_from`, on parameters × parameters.
    let few = params.len().saturating_mul(params.len()) <= FEW_NAMES;
    let mut seen = HashSet::new();
    for param in params {
        let (Some(Value::String(name)), Some(value)) = (param.get("name"), param.get("value")) else {
            return Err(refuse(
                "invalid_request",
                None,
                "each input parameter must be an object with `name` and `value`".into(),
            ));
        };
        let repeated =
            if few { arguments.iter().any(|&(given, _)| given == name) } else { !seen.insert(name.as_str()) };
        if repeated && signature.input(name).is_some() {
            return Err(refuse(
                "duplicate_parameter",
                Some(name),
                format!("parameter `{name}` is given more than once"),
            ));
        }
        arguments.push((name, value));
    }
    Ok(arguments)
}

/// Unknown parameters named in one refusal, at most.
const MAX_UNKNOWN_REPORTED: usize = 16;
/// Arguments × inputs up to which names are compared rather than hashed.
const FEW_NAMES: usize = 64;

/// Checks named values against the signature and builds the `input` record,
/// reporting every parameter that is unknown, missing or invalid (unknown
/// ones first, in the order given; then the rest in signature order). A
/// `null` value is the same as leaving an optional parameter out.
pub fn input_record(signature: &Signature, arguments: &[(&str, &Value)]) -> Result<Val, Vec<InputError>> {
    input_record_from(signature, arguments, Supplier::Agent)
}

/// Who supplies a call's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Supplier {
    /// The agent: it may not give `private` inputs, which stand empty until
    /// the end user enters them on the confirmation page.
    Agent,
    /// The end user confirming the call, who gives the `private` ones.
    EndUser,
}

/// [`input_record`], with `private` inputs refused from the agent.
pub fn input_record_from(
    signature: &Signature,
    arguments: &[(&str, &Value)],
    supplier: Supplier,
) -> Result<Val, Vec<InputError>> {
    let mut errors = Vec::new();
    // Indexed once when there are many, so a request's cost grows with its
    // size, not with the product of its arguments and the tool's inputs. A
    // few are compared instead: hashing them costs more (0.1–0.2 µs of a
    // pooled echo call's 6, bench/ANALYSIS.md, arm 2).
    let few = arguments.len().saturating_mul(signature.inputs.len()) <= FEW_NAMES;
    let inputs: HashSet<&str> =
        if few { HashSet::new() } else { signature.inputs.iter().map(|p| p.name.as_str()).collect() };
    let is_input = |name: &str| if few { signature.input(name).is_some() } else { inputs.contains(name) };
    // The first value given for a name counts.
    let mut given: HashMap<&str, &Value> = HashMap::new();
    if !few {
        given.reserve(arguments.len());
        for &(name, value) in arguments {
            given.entry(name).or_insert(value);
        }
    }
    let given_for = |name: &str| {
        if few {
            arguments.iter().find(|(given, _)| *given == name).map(|&(_, value)| value)
        } else {
            given.get(name).copied()
        }
    };
    let mut unknown = HashSet::new();
    for &(name, _) in arguments {
        // A handful names the mistake; thousands would only make the answer huge.
        if !is_input(name) && unknown.len() < MAX_UNKNOWN_REPORTED && unknown.insert(name) {
            errors.push(refuse("unknown_parameter", Some(name), unknown_message(signature, name, supplier)));
        }
    }
    let mut fields = Vec::with_capacity(signature.inputs.len());
    for param in &signature.inputs {
        let value = given_for(&param.name).filter(|v| !v.is_null());
        if param.private && supplier == Supplier::Agent {
            match value {
                Some(_) => errors.push(refuse(
                    "private_parameter",
                    Some(&param.name),
                    format!(
                        "parameter `{}` is private: the end user enters it when confirming the call; leave it out",
                        param.name
                    ),
                )),
                None if param.required => fields.push((param.field.clone(), Val::String(String::new()))),
                None => fields.push((param.field.clone(), Val::Option(None))),
            }
            continue;
        }
        let field = match (value, param.required) {
            (None, true) => Err(refuse(
                "missing_parameter",
                Some(&param.name),
                format!("parameter `{}` is required: {}", param.name, param.description),
            )),
            (None, false) => Ok(Val::Option(None)),
            (Some(value), required) => scalar(&param.name, &param.ty, value)
                .map(|val| if required { val } else { Val::Option(Some(Box::new(val))) }),
        };
        match field {
            Ok(val) => fields.push((param.field.clone(), val)),
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() { Ok(Val::Record(fields)) } else { Err(errors) }
}

/// What a caller naming a parameter `name` the signature does not have is
/// told: the parameters it may give. An agent is never told the private
/// ones: MCP and OTC leave them out of the schema they show it (A2T marks
/// them), and the end user, not the agent, gives them.
fn unknown_message(signature: &Signature, name: &str, supplier: Supplier) -> String {
    let known: Vec<&str> = signature
        .inputs
        .iter()
        .filter(|p| !p.private || supplier == Supplier::EndUser)
        .map(|p| p.name.as_str())
        .collect();
    if known.is_empty() {
        format!("`{}` has no parameter `{name}`; it takes none from the caller", signature.name)
    } else {
        format!("`{}` has no parameter `{name}`; its parameters are: {}", signature.name, known.join(", "))
    }
}

fn scalar(name: &str, ty: &InputType, value: &Value) -> Result<Val, InputError> {
    let wrong_type = |expected: &str| {
        refuse("invalid_type", Some(name), format!("parameter `{name}` must be {expected}; got {}", json_kind(value)))
    };
    match ty {
        InputType::String { max_length } => {
            let Value::String(s) = value else { return Err(wrong_type("a string")) };
            if let Some(max) = max_length {
                let len = s.chars().count();
                if len > *max as usize {
                    return Err(refuse(
                        "too_long",
                        Some(name),
                        format!("parameter `{name}` must be at most {max} characters; got {len}"),
                    ));
                }
            }
            Ok(Val::String(s.clone()))
        }
        InputType::Boolean => match value {
            Value::Bool(b) => Ok(Val::Bool(*b)),
            _ => Err(wrong_type("true or false")),
        },
        InputType::Int { wit, min, max } => {
            let n = match value {
                Value::Number(n) => n.as_i64().map(i128::from).or_else(|| n.as_u64().map(i128::from)),
                _ => None,
            };
            let Some(n) = n else { return Err(wrong_type(&format!("an integer from {min} to {max}"))) };
            if n < *min || n > *max {
                return Err(refuse(
                    "out_of_range",
                    Some(name),
                    format!("parameter `{name}` must be an integer from {min} to {max}; got {n}"),
                ));
            }
            // In range of the WIT type, so the narrowing conversions cannot fail.
            use crate::signature::IntKind::*;
            Ok(match wit {
                U8 => Val::U8(n as u8),
                U16 => Val::U16(n as u16),
                U32 => Val::U32(n as u32),
                U64 => Val::U64(n as u64),
                S8 => Val::S8(n as i8),
                S16 => Val::S16(n as i16),
                S32 => Val::S32(n as i32),
                S64 => Val::S64(n as i64),
            })
        }
        InputType::Enum { values } => {
            let allowed = || values.iter().map(|v| v.name.as_str()).collect::<Vec<_>>().join(", ");
            let Value::String(s) = value else { return Err(wrong_type(&format!("one of {}", allowed()))) };
            match values.iter().find(|v| v.name == *s) {
                Some(v) => Ok(Val::Enum(v.case.clone())),
                None => Err(refuse(
                    "invalid_enum_value",
                    Some(name),
                    format!("parameter `{name}` must be one of {}; got `{s}`", allowed()),
                )),
            }
        }
    }
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "an integer",
        Value::Number(_) => "a number with a fraction",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Reads the value `call` returned.
pub fn read_result(signature: &Signature, result: Val, limits: OutputLimits) -> Result<ToolResult, OutputError> {
    match result {
        Val::Result(Ok(output)) => {
            let fields = match output.map(|b| *b) {
                None => Vec::new(),
                Some(Val::Record(fields)) => fields,
                Some(_) => return Err(invalid("the ok value is not a record".into())),
            };
            let outputs = outputs(signature, fields)?;
            let sizes = outputs.iter().map(|output| (output.name.as_str(), json_size(&output.value)));
            check_sizes(sizes, limits, |name| format!("output `{name}`"), "the outputs are")?;
            Ok(ToolResult::Outputs(outputs))
        }
        Val::Result(Err(Some(error))) => {
            let error = tool_error(*error)?;
            check_error_size(&error, limits)?;
            Ok(ToolResult::Failed(error))
        }
        _ => Err(invalid("`call` did not return result<output, tool-error>".into())),
    }
}

fn outputs(signature: &Signature, mut fields: Vec<(String, Val)>) -> Result<Vec<OutputValue>, OutputError> {
    let mut out = Vec::with_capacity(signature.outputs.len());
    for param in &signature.outputs {
        let position = fields
            .iter()
            .position(|(name, _)| *name == param.field)
            .ok_or_else(|| invalid(format!("output `{}` is missing", param.name)))?;
        let (_, val) = fields.swap_remove(position);
        let value = match (&param.ty, val) {
            (OutputType::String, Val::String(s)) => Value::String(s),
            (OutputType::Int, val) => {
                int_json(&val).ok_or_else(|| invalid(format!("output `{}` is not an integer", param.name)))?
            }
            (OutputType::Enum { values }, Val::Enum(case)) => {
                Value::String(enum_name(values, &case).ok_or_else(|| {
                    invalid(format!("output `{}` has the value `{case}`, which its enum does not list", param.name))
                })?)
            }
            (OutputType::Json { .. }, val) => to_json(val),
            _ => return Err(invalid(format!("output `{}` does not have its declared type", param.name))),
        };
        out.push(OutputValue { name: param.name.clone(), value });
    }
    Ok(out)
}

fn enum_name(values: &[EnumValue], case: &str) -> Option<String> {
    values.iter().find(|v| v.case == case).map(|v| v.name.clone())
}

fn int_json(val: &Val) -> Option<Value> {
    Some(match *val {
        Val::U8(n) => n.into(),
        Val::U16(n) => n.into(),
        Val::U32(n) => n.into(),
        Val::U64(n) => n.into(),
        Val::S8(n) => n.into(),
        Val::S16(n) => n.into(),
        Val::S32(n) => n.into(),
        Val::S64(n) => n.into(),
        _ => return None,
    })
}

/// Any component value as JSON: records are objects with snake_case keys,
/// enum cases and flags are CAPITALIZED_SNAKE strings, a variant case with a
/// payload is `{"CASE": payload}`, options are the value or `null`, results
/// are `{"ok": …}` / `{"error": …}`, non-finite floats are `null`.
pub fn to_json(val: Val) -> Value {
    if let Some(n) = int_json(&val) {
        return n;
    }
    match val {
        Val::Bool(b) => Value::Bool(b),
        Val::Float32(f) => serde_json::Number::from_f64(f64::from(f)).map_or(Value::Null, Value::Number),
        Val::Float64(f) => serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number),
        Val::Char(c) => Value::String(c.to_string()),
        Val::String(s) => Value::String(s),
        Val::List(items) | Val::Tuple(items) | Val::FixedLengthList(items) => {
            Value::Array(items.into_iter().map(to_json).collect())
        }
        Val::Map(entries) => Value::Array(entries.into_iter().map(|(k, v)| json!([to_json(k), to_json(v)])).collect()),
        Val::Record(fields) => {
            Value::Object(fields.into_iter().map(|(k, v)| (snake(&k), to_json(v))).collect::<Map<_, _>>())
        }
        Val::Variant(case, None) | Val::Enum(case) => Value::String(capitalized_snake(&case)),
        Val::Variant(case, Some(payload)) => json!({ capitalized_snake(&case): to_json(*payload) }),
        Val::Option(None) => Value::Null,
        Val::Option(Some(v)) => to_json(*v),
        Val::Result(Ok(v)) => json!({ "ok": v.map_or(Value::Null, |v| to_json(*v)) }),
        Val::Result(Err(v)) => json!({ "error": v.map_or(Value::Null, |v| to_json(*v)) }),
        Val::Flags(flags) => Value::Array(flags.iter().map(|f| Value::String(capitalized_snake(f))).collect()),
        // Refused at load time (see signature::derive); never reached.
        _ => Value::Null,
    }
}

/// A tool-error's text is output like any other: it is answered, logged and
/// kept under an OTC `call_id`, so it gets the same caps, and an oversize
/// one is refused like an oversize output (never passed on truncated: a cut
/// message could say something the tool did not).
fn check_error_size(error: &ToolError, limits: OutputLimits) -> Result<(), OutputError> {
    let fields = [
        ("message", Some(&error.message)),
        ("developer-message", error.developer_message.as_ref()),
        ("additional-prompt-content", error.additional_prompt_content.as_ref()),
    ];
    let sizes = fields.into_iter().filter_map(|(name, text)| Some((name, json_size(text?.as_str()))));
    check_sizes(sizes, limits, |name| format!("the tool-error's `{name}`"), "the tool-error's fields are")
}

/// The output caps, for outputs and tool-error text alike: each value, then
/// all of them together. `named` says what one value is; `together` what
/// they all are.
fn check_sizes<'a>(
    sizes: impl IntoIterator<Item = (&'a str, usize)>,
    limits: OutputLimits,
    named: impl Fn(&str) -> String,
    together: &str,
) -> Result<(), OutputError> {
    let mut total = 0usize;
    for (name, size) in sizes {
        if size > limits.max_value_bytes {
            return Err(OutputError::TooLarge(format!(
                "{} is {size} bytes; at most {} are passed on",
                named(name),
                limits.max_value_bytes
            )));
        }
        total = total.saturating_add(size);
    }
    if total > limits.max_total_bytes {
        return Err(OutputError::TooLarge(format!(
            "{together} {total} bytes together; at most {} are passed on",
            limits.max_total_bytes
        )));
    }
    Ok(())
}

/// What a tool's `describe` said of a call: the CHEQ's explanation and facts.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CallDescription {
    /// One or two sentences about the call; may be empty.
    pub summary: String,
    /// Named facts, in the tool's order.
    pub facts: Vec<(String, String)>,
}

/// What `describe` returned.
#[derive(Debug, Clone, PartialEq)]
pub enum Described {
    /// `ok(call-description)`.
    Description(CallDescription),
    /// `err(tool-error)`: the tool refuses the call before anyone is asked.
    Failed(ToolError),
}

impl Described {
    /// Replaces secret values in everything the end user and the agent will
    /// see: the CHEQ is readable by anyone holding its resource URI.
    pub fn redact(&mut self, redactor: &crate::runtime::Redactor) {
        match self {
            Described::Description(d) => {
                d.summary = redactor.text(&d.summary);
                for (name, value) in &mut d.facts {
                    *name = redactor.text(name);
                    *value = redactor.text(value);
                }
            }
            Described::Failed(e) => e.redact(redactor),
        }
    }
}

/// Bounds on a call description, which a human reads before deciding: a
/// page, not a document.
pub mod description_limits {
    /// Longest summary, in characters.
    pub const SUMMARY_CHARS: usize = 1000;
    /// Most facts.
    pub const FACTS: usize = 20;
    /// Longest fact name, in characters.
    pub const FACT_NAME_CHARS: usize = 100;
    /// Longest fact value, in characters.
    pub const FACT_VALUE_CHARS: usize = 500;
}

/// Reads the value `describe` returned, within [`description_limits`] (a
/// tool-error within the output caps).
pub fn read_description(result: Val, limits: OutputLimits) -> Result<Described, OutputError> {
    use description_limits::*;
    let description = match result {
        Val::Result(Ok(Some(description))) => *description,
        Val::Result(Err(Some(error))) => {
            let error = tool_error(*error)?;
            check_error_size(&error, limits)?;
            return Ok(Described::Failed(error));
        }
        _ => return Err(invalid("`describe` did not return result<call-description, tool-error>".into())),
    };
    let Val::Record(fields) = description else { return Err(invalid("the call-description is not a record".into())) };
    let too_long = |what: &str, text: &str, max: usize| {
        let chars = text.chars().count();
        (chars > max).then(|| {
            OutputError::TooLarge(format!(
                "`describe` returned {what} of {chars} characters; at most {max} are allowed"
            ))
        })
    };
    let mut out = CallDescription::default();
    for (name, value) in fields {
        match (name.as_str(), value) {
            ("summary", Val::String(summary)) => out.summary = summary,
            ("facts", Val::List(facts)) => {
                if facts.len() > FACTS {
                    return Err(OutputError::TooLarge(format!(
                        "`describe` returned {} facts; at most {FACTS} are allowed",
                        facts.len()
                    )));
                }
                for fact in facts {
                    let Val::Record(fact) = fact else { return Err(invalid("a fact is not a record".into())) };
                    let text = |key: &str| {
                        fact.iter().find(|(k, _)| k == key).and_then(|(_, v)| match v {
                            Val::String(s) => Some(s.clone()),
                            _ => None,
                        })
                    };
                    let (Some(name), Some(value)) = (text("name"), text("value")) else {
                        return Err(invalid("a fact lacks its name or value".into()));
                    };
                    out.facts.push((name, value));
                }
            }
            _ => return Err(invalid(format!("the call-description's `{name}` does not have its declared type"))),
        }
    }
    let texts = std::iter::once(("a summary", &out.summary, SUMMARY_CHARS)).chain(
        out.facts
            .iter()
            .flat_map(|(n, v)| [("a fact name", n, FACT_NAME_CHARS), ("a fact value", v, FACT_VALUE_CHARS)]),
    );
    for (what, text, max) in texts {
        if let Some(e) = too_long(what, text, max) {
            return Err(e);
        }
    }
    Ok(Described::Description(out))
}

fn tool_error(val: Val) -> Result<ToolError, OutputError> {
    let Val::Record(fields) = val else { return Err(invalid("the tool-error is not a record".into())) };
    let mut error = ToolError {
        message: String::new(),
        developer_message: None,
        can_retry: false,
        retry_after_ms: None,
        additional_prompt_content: None,
    };
    let text = |v: Val| match v {
        Val::Option(Some(b)) => match *b {
            Val::String(s) => Some(s),
            _ => None,
        },
        _ => None,
    };
    for (name, value) in fields {
        match name.as_str() {
            "message" => {
                if let Val::String(s) = value {
                    error.message = s;
                }
            }
            "developer-message" => error.developer_message = text(value),
            "can-retry" => error.can_retry = matches!(value, Val::Bool(true)),
            "retry-after-ms" => {
                if let Val::Option(Some(b)) = value
                    && let Val::U64(ms) = *b
                {
                    error.retry_after_ms = Some(ms);
                }
            }
            "additional-prompt-content" => error.additional_prompt_content = text(value),
            _ => {}
        }
    }
    Ok(error)
}

#[cfg(test)]
mod proptests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signature::{InputParam, IntKind, OutputParam};

    fn signature() -> Signature {
        let input = |id: &str, required, ty| InputParam {
            id: id.into(),
            name: id.into(),
            field: id.replace('_', "-"),
            description: format!("The {id}."),
            required,
            ty,
            private: false,
        };
        let cabins = vec![
            EnumValue { name: "ECONOMY".into(), case: "economy".into(), description: "e".into() },
            EnumValue { name: "PREMIUM_ECONOMY".into(), case: "premium-economy".into(), description: "p".into() },
        ];
        Signature {
            name: "book_flight".into(),
            description: "Books.".into(),
            img: None,
            tags: vec![],
            inputs: vec![
                input("flight_number", true, InputType::String { max_length: Some(6) }),
                input("passengers", true, InputType::Int { wit: IntKind::U8, min: 1, max: 9 }),
                input("cabin", true, InputType::Enum { values: cabins.clone() }),
                input("window", false, InputType::Boolean),
            ],
            outputs: vec![
                OutputParam {
                    id: "code".into(),
                    name: "code".into(),
                    field: "code".into(),
                    description: "c".into(),
                    ty: OutputType::String,
                },
                OutputParam {
                    id: "price".into(),
                    name: "price".into(),
                    field: "price".into(),
                    description: "p".into(),
                    ty: OutputType::Int,
                },
                OutputParam {
                    id: "cabin".into(),
                    name: "cabin".into(),
                    field: "cabin".into(),
                    description: "c".into(),
                    ty: OutputType::Enum { values: cabins },
                },
                OutputParam {
                    id: "seat_map".into(),
                    name: "seat_map".into(),
                    field: "seat-map".into(),
                    description: "s".into(),
                    ty: OutputType::Json { schema: None },
                },
            ],
        }
    }

    fn invoke(params: Value) -> Result<Val, InputError> {
        input_value(&signature(), &json!({"name": "book_flight", "input_parameters": params}))
    }

    fn good() -> Value {
        json!([
            {"name": "flight_number", "value": "UA123"},
            {"name": "passengers", "value": 2},
            {"name": "cabin", "value": "PREMIUM_ECONOMY"},
        ])
    }

    #[test]
    fn builds_the_input_record() {
        let val = invoke(good()).unwrap();
        assert_eq!(
            val,
            Val::Record(vec![
                ("flight-number".into(), Val::String("UA123".into())),
                ("passengers".into(), Val::U8(2)),
                ("cabin".into(), Val::Enum("premium-economy".into())),
                ("window".into(), Val::Option(None)),
            ])
        );
        let mut with_optional = good();
        with_optional.as_array_mut().unwrap().push(json!({"name": "window", "value": true}));
        let Val::Record(fields) = invoke(with_optional).unwrap() else { panic!() };
        assert_eq!(fields[3].1, Val::Option(Some(Box::new(Val::Bool(true)))));
    }

    #[test]
    fn refuses_each_invalid_input_with_its_code() {
        let with = |name: &str, value: Value| {
            let mut params = good();
            let list = params.as_array_mut().unwrap();
            list.retain(|p| p["name"] != name);
            list.push(json!({"name": name, "value": value}));
            invoke(params).unwrap_err()
        };
        let cases = [
            (with("passengers", json!("5")), "invalid_type", "must be an integer from 1 to 9; got a string"),
            (with("passengers", json!(2.5)), "invalid_type", "got a number with a fraction"),
            (with("passengers", json!(10)), "out_of_range", "from 1 to 9; got 10"),
            (with("passengers", json!(0)), "out_of_range", "got 0"),
            (with("passengers", json!(-1)), "out_of_range", "got -1"),
            (with("flight_number", json!("UA12345")), "too_long", "at most 6 characters; got 7"),
            (with("flight_number", json!(123)), "invalid_type", "must be a string; got an integer"),
            (with("cabin", json!("LUXURY")), "invalid_enum_value", "one of ECONOMY, PREMIUM_ECONOMY; got `LUXURY`"),
            (with("cabin", json!("economy")), "invalid_enum_value", "got `economy`"),
            (with("window", json!("yes")), "invalid_type", "must be true or false"),
            (with("seat", json!(1)), "unknown_parameter", "has no parameter `seat`"),
            (with("passengers", Value::Null), "missing_parameter", "`passengers` is required: The passengers."),
        ];
        for (err, code, text) in cases {
            assert_eq!(err.code, code, "{err:?}");
            assert!(err.message.contains(text), "{}: {}", code, err.message);
        }
        let err = with("seat", json!(1));
        assert_eq!(err.parameter.as_deref(), Some("seat"));

        let mut twice = good();
        twice.as_array_mut().unwrap().push(json!({"name": "passengers", "value": 3}));
        assert_eq!(invoke(twice).unwrap_err().code, "duplicate_parameter");

        let err = input_value(&signature(), &json!({"name": "other_tool", "input_parameters": good()})).unwrap_err();
        assert_eq!(err.code, "wrong_tool_name");
        for body in [json!([]), json!({"input_parameters": []}), json!({"name": "book_flight", "input_parameters": {}})]
        {
            assert_eq!(input_value(&signature(), &body).unwrap_err().code, "invalid_request", "{body}");
        }
        assert_eq!(invoke(json!([{"value": 1}])).unwrap_err().code, "invalid_request");
    }

    #[test]
    fn reports_every_bad_parameter_at_once() {
        let (seat, five, luxury) = (json!(1), json!("5"), json!("LUXURY"));
        let arguments = [("seat", &seat), ("passengers", &five), ("cabin", &luxury)];
        let errors = input_record(&signature(), &arguments).unwrap_err();
        let found: Vec<_> = errors.iter().map(|e| (e.parameter.as_deref().unwrap(), e.code)).collect();
        assert_eq!(
            found,
            [
                ("seat", "unknown_parameter"),
                ("flight_number", "missing_parameter"),
                ("passengers", "invalid_type"),
                ("cabin", "invalid_enum_value"),
            ]
        );
    }

    #[test]
    fn an_unknown_name_is_answered_with_the_parameters_the_agent_may_give_only() {
        let mut signature = signature();
        signature.inputs.iter_mut().find(|p| p.name == "flight_number").unwrap().private = true;
        let (one, economy, guess) = (json!(1), json!("ECONOMY"), json!("UA123"));
        let arguments = [("passengers", &one), ("cabin", &economy), ("flightNumber", &guess)];
        let errors = input_record(&signature, &arguments).unwrap_err();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!((errors[0].code, errors[0].parameter.as_deref()), ("unknown_parameter", Some("flightNumber")));
        assert!(errors[0].message.contains("its parameters are: passengers, cabin, window"), "{}", errors[0].message);
        assert!(!errors[0].message.contains("flight_number"), "a private input is not named: {}", errors[0].message);
        // The end user, who gives the private ones, is told of them.
        let errors = input_record_from(&signature, &arguments, Supplier::EndUser).unwrap_err();
        assert!(errors[0].message.contains("flight_number"), "{}", errors[0].message);
        // A tool that takes nothing from the agent says so.
        signature.inputs.iter_mut().for_each(|p| p.private = true);
        let errors = input_record(&signature, &[("x", &one)]).unwrap_err();
        assert!(errors[0].message.ends_with("it takes none from the caller"), "{}", errors[0].message);
    }

    #[test]
    fn reads_outputs_and_tool_errors() {
        let ok = Val::Result(Ok(Some(Box::new(Val::Record(vec![
            ("code".into(), Val::String("ABC123".into())),
            ("price".into(), Val::U32(840)),
            ("cabin".into(), Val::Enum("premium-economy".into())),
            (
                "seat-map".into(),
                Val::Record(vec![("row-count".into(), Val::U8(30)), ("exits".into(), Val::List(vec![Val::U8(12)]))]),
            ),
        ])))));
        let ToolResult::Outputs(outputs) = read_result(&signature(), ok, OutputLimits::default()).unwrap() else {
            panic!()
        };
        let as_json: Vec<_> = outputs.iter().map(|o| (o.name.as_str(), o.value.clone())).collect();
        assert_eq!(
            as_json,
            [
                ("code", json!("ABC123")),
                ("price", json!(840)),
                ("cabin", json!("PREMIUM_ECONOMY")),
                ("seat_map", json!({"row_count": 30, "exits": [12]})),
            ]
        );

        let err = Val::Result(Err(Some(Box::new(Val::Record(vec![
            ("message".into(), Val::String("sold out".into())),
            ("developer-message".into(), Val::Option(Some(Box::new(Val::String("inventory=0".into()))))),
            ("can-retry".into(), Val::Bool(true)),
            ("retry-after-ms".into(), Val::Option(Some(Box::new(Val::U64(1500))))),
            ("additional-prompt-content".into(), Val::Option(None)),
        ])))));
        let ToolResult::Failed(e) = read_result(&signature(), err, OutputLimits::default()).unwrap() else { panic!() };
        assert_eq!(e.message, "sold out");
        assert_eq!(e.developer_message.as_deref(), Some("inventory=0"));
        assert!(e.can_retry);
        assert_eq!(e.retry_after_ms, Some(1500));
        assert_eq!(e.additional_prompt_content, None);
    }

    #[test]
    fn checks_outputs_against_the_signature() {
        let record = |fields: Vec<(&str, Val)>| {
            Val::Result(Ok(Some(Box::new(Val::Record(fields.into_iter().map(|(k, v)| (k.to_string(), v)).collect())))))
        };
        let base = || {
            vec![
                ("code", Val::String("A".into())),
                ("price", Val::U32(1)),
                ("cabin", Val::Enum("economy".into())),
                ("seat-map", Val::Bool(true)),
            ]
        };
        let mut missing = base();
        missing.remove(0);
        assert!(
            read_result(&signature(), record(missing), OutputLimits::default())
                .unwrap_err()
                .to_string()
                .contains("`code` is missing")
        );
        let mut wrong = base();
        wrong[1].1 = Val::String("1".into());
        assert!(
            read_result(&signature(), record(wrong), OutputLimits::default())
                .unwrap_err()
                .to_string()
                .contains("`price` is not an integer")
        );
        let mut unlisted = base();
        unlisted[2].1 = Val::Enum("steerage".into());
        assert!(
            read_result(&signature(), record(unlisted), OutputLimits::default())
                .unwrap_err()
                .to_string()
                .contains("does not list")
        );
        assert!(read_result(&signature(), Val::String("x".into()), OutputLimits::default()).is_err());

        let big = || {
            let mut fields = base();
            fields[0].1 = Val::String("x".repeat(100));
            record(fields)
        };
        let small = OutputLimits { max_value_bytes: 50, max_total_bytes: 1000 };
        let err = read_result(&signature(), big(), small).unwrap_err();
        assert!(
            matches!(&err, OutputError::TooLarge(m) if m.contains("output `code` is 102 bytes; at most 50")),
            "{err}"
        );
        let tight_total = OutputLimits { max_value_bytes: 1000, max_total_bytes: 100 };
        assert!(matches!(read_result(&signature(), big(), tight_total), Err(OutputError::TooLarge(_))));
        assert!(read_result(&signature(), big(), OutputLimits::default()).is_ok());
    }

    #[test]
    fn a_tool_error_gets_the_output_caps() {
        let error = |message: &str, developer: Option<&str>| {
            let text = |t: Option<&str>| Val::Option(t.map(|t| Box::new(Val::String(t.into()))));
            Val::Result(Err(Some(Box::new(Val::Record(vec![
                ("message".into(), Val::String(message.into())),
                ("developer-message".into(), text(developer)),
                ("can-retry".into(), Val::Bool(false)),
                ("retry-after-ms".into(), Val::Option(None)),
                ("additional-prompt-content".into(), text(None)),
            ])))))
        };
        let limits = OutputLimits { max_value_bytes: 50, max_total_bytes: 80 };
        let long = "x".repeat(100);
        let err = read_result(&signature(), error(&long, None), limits).unwrap_err();
        assert_eq!(
            err,
            OutputError::TooLarge("the tool-error's `message` is 102 bytes; at most 50 are passed on".into())
        );
        let err = read_result(&signature(), error("no", Some(&long)), limits).unwrap_err();
        assert!(matches!(&err, OutputError::TooLarge(m) if m.contains("`developer-message` is 102 bytes")), "{err}");
        let forty = "y".repeat(40);
        let err = read_result(&signature(), error(&forty, Some(&forty)), limits).unwrap_err();
        assert!(matches!(&err, OutputError::TooLarge(m) if m.contains("84 bytes together; at most 80")), "{err}");
        assert!(matches!(read_result(&signature(), error(&forty, None), limits), Ok(ToolResult::Failed(_))));
    }

    #[test]
    fn renders_any_value_as_json() {
        assert_eq!(to_json(Val::Float64(f64::NAN)), Value::Null);
        assert_eq!(to_json(Val::Variant("circle".into(), Some(Box::new(Val::Float64(1.5))))), json!({"CIRCLE": 1.5}));
        assert_eq!(to_json(Val::Variant("dot".into(), None)), json!("DOT"));
        assert_eq!(to_json(Val::Option(None)), Value::Null);
        assert_eq!(to_json(Val::Result(Ok(None))), json!({"ok": null}));
        assert_eq!(to_json(Val::Flags(vec!["read-only".into()])), json!(["READ_ONLY"]));
        assert_eq!(to_json(Val::Tuple(vec![Val::Char('x'), Val::S64(-3)])), json!(["x", -3]));
    }
}
