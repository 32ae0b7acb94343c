//! Confirmation conditions (`[confirmation] when = "…"` in plinth.toml, and
//! the operator's override): a publisher's CEL text, checked against the
//! budget, compiled, and evaluated against arbitrary inputs on every call.
//!
//! Input: the condition's text, a 0 byte, then bytes for the inputs'
//! values. Properties: no panic outside the CEL crate's own (which the host
//! catches and answers as a refusal); a refusal is a `ConditionError`
//! naming a limit when it is the budget; an accepted condition evaluates
//! to an answer for any inputs (libFuzzer's `-timeout` bounds its time);
//! inputs larger than a condition may read ask for confirmation.
#![no_main]

#[path = "common.rs"]
mod common;

use arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use plinth::cheq::{ConditionError, Confirmation, ConfirmationPolicy, budget};
use serde_json::{Map, Value};

/// The tool's inputs a condition may name.
const INPUTS: &[&str] = &["amount", "city", "mood", "is_ok", "note", "count"];

fuzz_target!(|data: &[u8]| {
    common::tolerate_caught_panics_in(&["/cel-0."]);
    let (text, rest) = match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[][..]),
    };
    let Ok(text) = std::str::from_utf8(text) else { return };
    let policy = ConfirmationPolicy { required: false, when: Some(text.to_string()) };
    match policy.check(INPUTS) {
        Ok(()) => {}
        Err(ConditionError::TooCostly(limit)) => {
            assert!(!limit.name().is_empty());
            return;
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return;
        }
    }
    // Accepted: it compiles again the same way (a stored policy is
    // compiled when its version loads) and answers for any inputs.
    let confirmation = policy.compile();
    let mut u = Unstructured::new(rest);
    for _ in 0..4 {
        let Ok(inputs) = inputs(&mut u) else { break };
        // What the condition reads, as the host measures it.
        let read: &[String] = match &confirmation {
            Confirmation::When { variables, .. } => variables,
            _ => &[],
        };
        let size: usize = read
            .iter()
            .map(|name| serde_json::to_string(inputs.get(name).unwrap_or(&Value::Null)).unwrap().len())
            .sum();
        let holds = confirmation.applies_to(&inputs);
        if size > budget::MAX_INPUT_BYTES {
            assert!(holds, "inputs above the budget must ask for confirmation");
        }
    }
});

fn inputs(u: &mut Unstructured) -> Result<Map<String, Value>> {
    let mut map = Map::new();
    for name in INPUTS {
        if u.ratio(1, 5)? {
            continue;
        }
        map.insert(name.to_string(), value(u, 2)?);
    }
    Ok(map)
}

fn value(u: &mut Unstructured, depth: u32) -> Result<Value> {
    let top = if depth == 0 { 5 } else { 7 };
    Ok(match u.int_in_range(0..=top)? {
        0 => Value::Null,
        1 => Value::Bool(u.arbitrary()?),
        2 => Value::from(u.arbitrary::<i64>()?),
        3 => Value::from(u.arbitrary::<u64>()?),
        4 => serde_json::Number::from_f64(u.arbitrary()?).map_or(Value::Null, Value::Number),
        5 => {
            // Sometimes long: the read budget is in bytes.
            let s: String = u.arbitrary()?;
            if u.ratio(1, 8)? { Value::String(s.repeat(u.int_in_range(1..=600)?)) } else { Value::String(s) }
        }
        6 => Value::Array((0..u.int_in_range(0..=6)?).map(|_| value(u, depth - 1)).collect::<Result<_>>()?),
        _ => {
            let mut map = Map::new();
            for _ in 0..u.int_in_range(0..=4)? {
                map.insert(u.arbitrary()?, value(u, depth - 1)?);
            }
            Value::Object(map)
        }
    })
}
