//! Invocations: an arbitrary tool signature and arbitrary JSON through the
//! doors' input conversion, and arbitrary tool results back out.
//!
//! The signature is derived the way a deploy derives it: a WIT world built
//! from arbitrary types (records, variants, enums, flags, lists, options,
//! results, tuples, numbers, chars, strings, with doc comments) plus
//! arbitrary `plinth.toml` input constraints (ranges, lengths, `private`),
//! through `signature::derive`. Then:
//! - A2T (`invocation::input_value` on `{name, input_parameters}`) and
//!   OTC/MCP (`invocation::input_record` on the `input`/`arguments`
//!   object) take arbitrary values: every refusal is a typed `InputError`
//!   whose code is a documented one; what is accepted turns back into JSON
//!   (`invocation::to_json`) equal to the normalised input, fits the
//!   published input schema, and both conversions agree.
//! - A well-typed result value of the output record reads back
//!   (`invocation::read_result`) into JSON that fits the published output
//!   schema; an arbitrary value is refused with a typed error, never a
//!   panic.
#![no_main]

use arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use plinth::invocation::{self, INPUT_ERROR_CODES, InputError, OutputLimits, Supplier, ToolResult};
use plinth::signature::{self, InputType, OutputType, Signature};
use serde_json::{Map, Value};
use wasmtime::component::Val;

#[path = "tool_wit.rs"]
mod tool_wit;

use tool_wit::{Tool, WORDS, base};

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let _ = one(&mut u);
});

fn one(u: &mut Unstructured) -> Result<()> {
    let tool = Tool::arbitrary(u)?;
    let mut resolve = base();
    let Ok(package) = resolve.push_str("world.wit", &tool.wit()) else { return Ok(()) };
    let Ok(world) = resolve.select_world(&[package], None) else { return Ok(()) };
    let world_name = resolve.worlds[world].name.clone();
    let manifest = tool.manifest(u)?;
    let signature = match signature::derive(&resolve, world, &world_name, &manifest) {
        Ok(signature) => signature,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return Ok(());
        }
    };
    // Stored as JSON with every version: it reads back the same.
    let stored = serde_json::to_string(&signature).unwrap();
    assert_eq!(serde_json::from_str::<Signature>(&stored).unwrap(), signature, "{stored}");
    let _ = signature::a2t::signature_json(None, 1, Some(1), &signature);
    let input_schema = validator(&signature::schema::input_schema(&signature));
    let output_schema = signature::schema::output_schema(&signature).map(|s| validator(&s));

    for _ in 0..u.int_in_range(1..=4)? {
        inputs(u, &signature, &input_schema)?;
    }
    for _ in 0..u.int_in_range(1..=3)? {
        outputs(u, &tool, &signature, output_schema.as_ref())?;
    }
    Ok(())
}

fn validator(schema: &Value) -> jsonschema::Validator {
    jsonschema::validator_for(schema).unwrap_or_else(|e| panic!("the published schema is not a JSON Schema: {e}\n{schema}"))
}

// ---------------------------------------------------------------- inputs

fn inputs(u: &mut Unstructured, signature: &Signature, schema: &jsonschema::Validator) -> Result<()> {
    // The arguments as the agent gives them, in order, repeats allowed.
    let mut given: Vec<(String, Value)> = Vec::new();
    for param in &signature.inputs {
        match u.int_in_range(0..=9)? {
            0 => {}
            1 => given.push((param.name.clone(), Value::Null)),
            2 => given.push((param.name.clone(), any_json(u, 3)?)),
            _ => given.push((param.name.clone(), value_for(u, &param.ty)?)),
        }
    }
    for _ in 0..u.int_in_range(0..=2)? {
        let name = if !given.is_empty() && u.ratio(1, 2)? {
            given[u.choose_index(given.len())?].0.clone()
        } else {
            u.arbitrary::<String>()?
        };
        let at = u.int_in_range(0..=given.len())?;
        given.insert(at, (name, any_json(u, 2)?));
    }
    if !given.is_empty() && u.ratio(1, 4)? {
        let a = u.choose_index(given.len())?;
        let b = u.choose_index(given.len())?;
        given.swap(a, b);
    }

    // A2T: `{name, input_parameters: [{name, value}…]}` (sometimes malformed).
    let params: Vec<Value> =
        given.iter().map(|(name, value)| serde_json::json!({ "name": name, "value": value })).collect();
    let mut body = serde_json::json!({ "name": signature.name, "input_parameters": params });
    let intact = match u.int_in_range(0..=15)? {
        0 => {
            body["name"] = any_json(u, 1)?;
            false
        }
        1 => {
            body["input_parameters"] = any_json(u, 2)?;
            false
        }
        2 => {
            body = any_json(u, 3)?;
            false
        }
        _ => true,
    };
    let a2t = invocation::input_value(signature, &body);
    if let Err(e) = &a2t {
        typed(e, signature, &given);
    }

    // OTC and MCP: an object of named values (a repeated key: the last).
    let object: Map<String, Value> = given.iter().cloned().collect();
    let pairs: Vec<(&str, &Value)> = object.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let record = invocation::input_record(signature, &pairs);
    match &record {
        Ok(val) => {
            let json = invocation::to_json(val.clone());
            assert_eq!(json, normalised(signature, &object, Supplier::Agent), "the round trip changed the input");
            let offered: Map<String, Value> = object
                .iter()
                .filter(|(k, v)| !v.is_null() && signature.input(k).is_some_and(|p| !p.private))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let offered = Value::Object(offered);
            assert!(schema.is_valid(&offered), "an accepted input does not fit the input schema: {offered}");
        }
        Err(errors) => {
            assert!(!errors.is_empty(), "a refusal names no error");
            for e in errors {
                typed(e, signature, &given);
            }
        }
    }

    // Without repeats, both conversions are the same conversion.
    let distinct = given.len() == object.len();
    if distinct && intact {
        match (&a2t, &record) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "A2T and OTC/MCP built different inputs"),
            (Err(a), Err(b)) => assert_eq!(a, &b[0], "A2T and OTC/MCP refused differently"),
            (a, b) => panic!("A2T answered {a:?}, OTC/MCP {b:?}"),
        }
    }

    // The end user on the confirmation page: private inputs are theirs.
    match invocation::input_record_from(signature, &pairs, Supplier::EndUser) {
        Ok(val) => {
            let json = invocation::to_json(val);
            assert_eq!(json, normalised(signature, &object, Supplier::EndUser));
        }
        Err(errors) => errors.iter().for_each(|e| typed(e, signature, &given)),
    }
    Ok(())
}

fn typed(e: &InputError, signature: &Signature, given: &[(String, Value)]) {
    assert!(INPUT_ERROR_CODES.contains(&e.code), "undocumented code {}", e.code);
    assert!(!e.message.is_empty());
    if let Some(p) = &e.parameter {
        assert!(
            signature.input(p).is_some() || given.iter().any(|(n, _)| n == p),
            "the error names `{p}`, which neither the tool nor the call has"
        );
    }
}

/// What an accepted input reads as: every input in signature order, its
/// value, or `null` when left out (a private one the agent may not give:
/// the empty string when required).
fn normalised(signature: &Signature, object: &Map<String, Value>, supplier: Supplier) -> Value {
    let mut out = Map::new();
    for param in &signature.inputs {
        let given = object.get(&param.name).filter(|v| !v.is_null()).cloned();
        let value = match given {
            _ if param.private && supplier == Supplier::Agent => {
                if param.required { Value::String(String::new()) } else { Value::Null }
            }
            Some(v) => v,
            None => Value::Null,
        };
        out.insert(signature::snake(&param.field), value);
    }
    Value::Object(out)
}

fn value_for(u: &mut Unstructured, ty: &InputType) -> Result<Value> {
    Ok(match ty {
        InputType::String { max_length } => {
            let mut s: String = u.arbitrary()?;
            if let Some(max) = max_length
                && u.ratio(3, 4)?
            {
                s = s.chars().take(*max as usize).collect();
            }
            Value::String(s)
        }
        InputType::Int { min, max, .. } => {
            let n: i128 = match u.int_in_range(0..=5)? {
                0 => *min,
                1 => *max,
                2 => min.saturating_sub(1),
                3 => max.saturating_add(1),
                _ if min <= max => u.int_in_range(*min..=*max)?,
                _ => u.arbitrary()?,
            };
            match (i64::try_from(n), u64::try_from(n)) {
                (Ok(n), _) if u.ratio(1, 16)? => Value::from(n as f64),
                (Ok(n), _) => Value::from(n),
                (_, Ok(n)) => Value::from(n),
                _ => Value::from(n as f64),
            }
        }
        InputType::Boolean => Value::Bool(u.arbitrary()?),
        InputType::Enum { values } if !values.is_empty() && u.ratio(7, 8)? => {
            Value::String(values[u.choose_index(values.len())?].name.clone())
        }
        InputType::Enum { .. } => Value::String(u.arbitrary()?),
    })
}

fn any_json(u: &mut Unstructured, depth: u32) -> Result<Value> {
    let top = if depth == 0 { 4 } else { 6 };
    Ok(match u.int_in_range(0..=top)? {
        0 => Value::Null,
        1 => Value::Bool(u.arbitrary()?),
        2 => Value::from(u.arbitrary::<i64>()?),
        3 => serde_json::Number::from_f64(u.arbitrary()?).map_or(Value::Null, Value::Number),
        4 => Value::String(u.arbitrary()?),
        5 => {
            let n = u.int_in_range(0..=3)?;
            Value::Array((0..n).map(|_| any_json(u, depth - 1)).collect::<Result<_>>()?)
        }
        _ => {
            let mut map = Map::new();
            for _ in 0..u.int_in_range(0..=3)? {
                map.insert(u.arbitrary()?, any_json(u, depth - 1)?);
            }
            Value::Object(map)
        }
    })
}

// --------------------------------------------------------------- outputs

fn outputs(
    u: &mut Unstructured,
    tool: &Tool,
    signature: &Signature,
    schema: Option<&jsonschema::Validator>,
) -> Result<()> {
    let limits = OutputLimits { max_value_bytes: usize::MAX, max_total_bytes: usize::MAX };
    if u.ratio(1, 4)? {
        // Whatever a misbehaving component could return.
        let val = any_val(u, 3)?;
        let _ = invocation::read_result(signature, val, limits);
        return Ok(());
    }
    let mut fields = Vec::new();
    for field in &tool.outputs {
        fields.push((field.name.clone(), tool.val(u, &field.ty, 0)?));
    }
    let result = Val::Result(Ok(Some(Box::new(Val::Record(fields)))));
    let read = invocation::read_result(signature, result, limits)
        .unwrap_or_else(|e| panic!("a well-typed result is refused: {e}"));
    let ToolResult::Outputs(values) = read else { panic!("an ok result read as a failure") };
    let mut object = Map::new();
    for (param, value) in signature.outputs.iter().zip(&values) {
        assert_eq!(param.name, value.name);
        match &param.ty {
            OutputType::String => assert!(value.value.is_string()),
            OutputType::Int => assert!(value.value.is_i64() || value.value.is_u64()),
            OutputType::Enum { values } => assert!(values.iter().any(|v| value.value == v.name.as_str())),
            OutputType::Json { schema: Some(schema) } => {
                assert!(
                    validator(schema).is_valid(&value.value),
                    "output `{}` = {} does not fit its schema {schema}",
                    value.name,
                    value.value
                );
            }
            OutputType::Json { schema: None } => {}
        }
        object.insert(value.name.clone(), value.value.clone());
    }
    if let Some(schema) = schema {
        let object = Value::Object(object);
        assert!(schema.is_valid(&object), "the outputs do not fit the output schema: {object}");
    }
    Ok(())
}

fn any_val(u: &mut Unstructured, depth: u32) -> Result<Val> {
    let top = if depth == 0 { 12 } else { 20 };
    let name = |u: &mut Unstructured| -> Result<String> { Ok(WORDS[u.choose_index(WORDS.len())?].to_string()) };
    Ok(match u.int_in_range(0..=top)? {
        0 => Val::Bool(u.arbitrary()?),
        1 => Val::U8(u.arbitrary()?),
        2 => Val::S8(u.arbitrary()?),
        3 => Val::U16(u.arbitrary()?),
        4 => Val::S16(u.arbitrary()?),
        5 => Val::U32(u.arbitrary()?),
        6 => Val::S32(u.arbitrary()?),
        7 => Val::U64(u.arbitrary()?),
        8 => Val::S64(u.arbitrary()?),
        9 => Val::Float32(u.arbitrary()?),
        10 => Val::Float64(u.arbitrary()?),
        11 => Val::Char(u.arbitrary()?),
        12 => Val::String(u.arbitrary()?),
        13 => Val::List((0..u.int_in_range(0..=3)?).map(|_| any_val(u, depth - 1)).collect::<Result<_>>()?),
        14 => Val::Record(
            (0..u.int_in_range(0..=3)?).map(|_| Ok((name(u)?, any_val(u, depth - 1)?))).collect::<Result<_>>()?,
        ),
        15 => Val::Tuple((0..u.int_in_range(0..=3)?).map(|_| any_val(u, depth - 1)).collect::<Result<_>>()?),
        16 => Val::Variant(name(u)?, if u.arbitrary()? { Some(Box::new(any_val(u, depth - 1)?)) } else { None }),
        17 => Val::Enum(name(u)?),
        18 => Val::Option(if u.arbitrary()? { Some(Box::new(any_val(u, depth - 1)?)) } else { None }),
        19 => {
            let inner = if u.arbitrary()? { Some(Box::new(any_val(u, depth - 1)?)) } else { None };
            Val::Result(if u.arbitrary()? { Ok(inner) } else { Err(inner) })
        }
        _ => Val::Flags((0..u.int_in_range(0..=3)?).map(|_| name(u)).collect::<Result<_>>()?),
    })
}

