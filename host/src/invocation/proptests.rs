//! Property tests of input validation: any JSON an agent sends is turned into
//! the `input` record or refused with [`InputError`]s that name the problem —
//! never a panic — and the answer is exactly the one the signature implies
//! (checked against a small independent model of the rules, [`expected`]).
//!
//! Signatures come from the packed example tools and fixtures (the real ones
//! agents call) and from a generator of every input type and constraint.

use super::*;
use crate::signature::{InputParam, IntKind};
use proptest::prelude::*;
use std::sync::OnceLock;

/// Every code input validation may answer with.
const CODES: &[&str] = super::INPUT_ERROR_CODES;

/// The signatures of the packed example tools and fixtures.
fn real_signatures() -> &'static [Signature] {
    static SIGNATURES: OnceLock<Vec<Signature>> = OnceLock::new();
    SIGNATURES.get_or_init(|| {
        crate::package::proptests::packed_tools()
            .iter()
            .map(|tool| {
                crate::package::ToolPackage::read(&tool.bytes)
                    .unwrap_or_else(|e| panic!("{}: {e}", tool.name))
                    .signature
            })
            .collect()
    })
}

fn int_kind() -> impl Strategy<Value = IntKind> {
    use IntKind::*;
    prop::sample::select(vec![U8, U16, U32, U64, S8, S16, S32, S64])
}

/// Any input type with any constraints `plinth.toml` could give it.
fn input_type() -> impl Strategy<Value = InputType> {
    prop_oneof![
        prop::option::of(1u32..40).prop_map(|max_length| InputType::String { max_length }),
        Just(InputType::Boolean),
        int_kind().prop_flat_map(|wit| {
            let (lo, hi) = wit.range();
            prop_oneof![
                Just(InputType::Int { wit, min: lo, max: hi }),
                (lo..=hi, lo..=hi).prop_map(move |(a, b)| InputType::Int { wit, min: a.min(b), max: a.max(b) }),
            ]
        }),
        prop::collection::btree_set("[a-z]{1,5}(-[a-z0-9]{1,3})?", 1..5).prop_map(|cases| InputType::Enum {
            values: cases
                .into_iter()
                .map(|case| EnumValue { name: capitalized_snake(&case), case, description: "A case.".into() })
                .collect(),
        }),
    ]
}

/// A generated signature: unique snake_case inputs of any type, some
/// optional, some private strings. Up to eleven: with the arguments for
/// them, enough for names to be looked up both ways (`FEW_NAMES`).
fn generated_signature() -> impl Strategy<Value = Signature> {
    prop::collection::btree_map(
        "[a-z][a-z0-9]{0,5}(_[a-z0-9]{1,4})?",
        (input_type(), any::<bool>(), any::<bool>()),
        0..12,
    )
    .prop_map(|params| Signature {
        name: "generated_tool".into(),
        description: "A generated tool.".into(),
        img: None,
        tags: Vec::new(),
        inputs: params
            .into_iter()
            .map(|(name, (ty, required, private))| InputParam {
                id: name.clone(),
                field: name.replace('_', "-"),
                name,
                description: "A parameter.".into(),
                required,
                private: private && matches!(ty, InputType::String { .. }),
                ty,
            })
            .collect(),
        outputs: Vec::new(),
    })
}

fn signature() -> impl Strategy<Value = Signature> {
    prop_oneof![prop::sample::select(real_signatures().to_vec()), generated_signature()]
}

/// Any JSON: deep arrays and objects, huge and fractional numbers, strings
/// outside the Basic Multilingual Plane.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        prop::sample::select(vec![
            json!(i64::MIN),
            json!(i64::MAX),
            json!(u64::MAX),
            json!(1e300),
            json!(-0.0),
            json!(18446744073709551616.0),
            json!(5.0),
            json!(-1),
            json!(256),
            json!(65536),
        ]),
        any::<String>().prop_map(Value::String),
        "[\u{10000}-\u{10FFFF}]{0,8}".prop_map(Value::String),
        "[A-Z_]{1,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((any::<String>(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// A value nested `depth` arrays deep.
fn deep(depth: usize) -> Value {
    (0..depth).fold(json!("bottom"), |inner, _| Value::Array(vec![inner]))
}

/// A valid value for `ty`.
fn valid_value(ty: &InputType) -> BoxedStrategy<Value> {
    match ty.clone() {
        InputType::String { max_length } => {
            let max = max_length.map_or(64, |m| m as usize);
            prop_oneof![any::<String>(), "[\u{10000}-\u{10FFFF}]{0,40}"]
                .prop_map(move |s| Value::String(s.chars().take(max).collect()))
                .boxed()
        }
        InputType::Boolean => any::<bool>().prop_map(Value::Bool).boxed(),
        InputType::Int { min, max, .. } => (min..=max).prop_map(integer).boxed(),
        InputType::Enum { values } => prop::sample::select(values).prop_map(|v| Value::String(v.name)).boxed(),
    }
}

/// An integer in the range of i64 or u64 as JSON.
fn integer(n: i128) -> Value {
    i64::try_from(n).map(Value::from).unwrap_or_else(|_| Value::from(u64::try_from(n).unwrap_or(u64::MAX)))
}

/// Names an agent might send: the right ones, near misses (the WIT field,
/// other case, padding, look-alikes) and anything.
fn name_for(signature: &Signature) -> BoxedStrategy<String> {
    let names: Vec<String> = signature.inputs.iter().map(|p| p.name.clone()).collect();
    if names.is_empty() {
        return any::<String>().boxed();
    }
    prop_oneof![
        4 => prop::sample::select(names.clone()),
        1 => prop::sample::select(names).prop_flat_map(|name| prop_oneof![
            Just(name.replace('_', "-")),
            Just(name.to_uppercase()),
            Just(format!("{name} ")),
            Just(format!("{name}\0")),
            Just(format!("\u{FEFF}{name}")),
        ]),
        1 => any::<String>(),
    ]
    .boxed()
}

/// Arguments for `signature`: each parameter left out, or given a valid,
/// `null`, arbitrary or deeply nested value; then a few near-miss or
/// arbitrary names; in any order.
fn arguments_for(signature: &Signature) -> BoxedStrategy<Vec<(String, Value)>> {
    let params: Vec<_> = signature
        .inputs
        .iter()
        .map(|p| {
            let value = prop_oneof![
                2 => Just(None),
                6 => valid_value(&p.ty).prop_map(Some),
                1 => Just(Some(Value::Null)),
                1 => json_value().prop_map(Some),
                1 => (1usize..400).prop_map(|d| Some(deep(d))),
            ];
            (Just(p.name.clone()), value)
        })
        .collect();
    let extra = prop::collection::vec((name_for(signature), json_value()), 0..3);
    (params, extra, prop::bool::weighted(0.2), any::<prop::sample::Index>())
        .prop_map(|(params, extra, extra_first, rotate)| {
            let mut arguments: Vec<(String, Value)> =
                params.into_iter().filter_map(|(name, value)| Some((name, value?))).collect();
            if !arguments.is_empty() {
                let by = rotate.index(arguments.len());
                arguments.rotate_left(by);
            }
            if extra_first {
                let mut all = extra;
                all.extend(arguments);
                all
            } else {
                arguments.extend(extra);
                arguments
            }
        })
        .boxed()
}

/// The model: the component value `value` becomes, or `None` if it is not
/// valid for `ty`.
fn model_scalar(ty: &InputType, value: &Value) -> Option<Val> {
    Some(match (ty, value) {
        (InputType::String { max_length }, Value::String(s)) => {
            if max_length.is_some_and(|max| s.chars().count() > max as usize) {
                return None;
            }
            Val::String(s.clone())
        }
        (InputType::Boolean, Value::Bool(b)) => Val::Bool(*b),
        (InputType::Int { wit, min, max }, Value::Number(n)) => {
            let n: i128 = if let Some(n) = n.as_i64() { n.into() } else { n.as_u64()?.into() };
            if n < *min || n > *max {
                return None;
            }
            match wit {
                IntKind::U8 => Val::U8(n.try_into().ok()?),
                IntKind::U16 => Val::U16(n.try_into().ok()?),
                IntKind::U32 => Val::U32(n.try_into().ok()?),
                IntKind::U64 => Val::U64(n.try_into().ok()?),
                IntKind::S8 => Val::S8(n.try_into().ok()?),
                IntKind::S16 => Val::S16(n.try_into().ok()?),
                IntKind::S32 => Val::S32(n.try_into().ok()?),
                IntKind::S64 => Val::S64(n.try_into().ok()?),
            }
        }
        (InputType::Enum { values }, Value::String(s)) => Val::Enum(values.iter().find(|v| v.name == *s)?.case.clone()),
        _ => return None,
    })
}

/// The model: the `input` record `arguments` make, or `None` if any is
/// unknown, missing or invalid.
fn expected(signature: &Signature, arguments: &[(&str, &Value)], supplier: Supplier) -> Option<Val> {
    if arguments.iter().any(|(name, _)| !signature.inputs.iter().any(|p| p.name == *name)) {
        return None;
    }
    let mut fields = Vec::new();
    for param in &signature.inputs {
        let given = arguments.iter().find(|(name, _)| *name == param.name).map(|(_, v)| *v).filter(|v| !v.is_null());
        let val = match given {
            Some(_) if param.private && supplier == Supplier::Agent => return None,
            None if param.private && supplier == Supplier::Agent && param.required => Val::String(String::new()),
            None if param.required => return None,
            None => Val::Option(None),
            Some(value) => {
                let val = model_scalar(&param.ty, value)?;
                if param.required { val } else { Val::Option(Some(Box::new(val))) }
            }
        };
        fields.push((param.field.clone(), val));
    }
    Some(Val::Record(fields))
}

/// Every refusal is a known code with a message; the list stays bounded.
fn clean_refusals(signature: &Signature, errors: &[InputError]) -> Result<(), TestCaseError> {
    prop_assert!(!errors.is_empty(), "refused without saying why");
    prop_assert!(errors.len() <= MAX_UNKNOWN_REPORTED + signature.inputs.len(), "{} errors", errors.len());
    for e in errors {
        prop_assert!(CODES.contains(&e.code), "unknown code {}", e.code);
        prop_assert!(!e.message.trim().is_empty(), "an empty message for {}", e.code);
    }
    Ok(())
}

fn signature_and_arguments() -> impl Strategy<Value = (Signature, Vec<(String, Value)>)> {
    signature().prop_flat_map(|s| {
        let arguments = arguments_for(&s);
        (Just(s), arguments)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Named values in, the record the signature implies out, or refusals.
    #[test]
    fn any_arguments_get_the_answer_the_signature_implies(
        (signature, arguments) in signature_and_arguments(),
        end_user in any::<bool>(),
    ) {
        let supplier = if end_user { Supplier::EndUser } else { Supplier::Agent };
        let arguments: Vec<(&str, &Value)> = arguments.iter().map(|(n, v)| (n.as_str(), v)).collect();
        let got = input_record_from(&signature, &arguments, supplier);
        let want = expected(&signature, &arguments, supplier);
        match (got, want) {
            (Ok(got), Some(want)) => prop_assert_eq!(got, want),
            (Err(errors), None) => clean_refusals(&signature, &errors)?,
            (got, want) => prop_assert!(false, "got {:?}, the model says {:?}", got, want),
        }
    }

    /// Valid values for every parameter (optional ones sometimes left out or
    /// `null`, private ones left to the end user) are always accepted, and
    /// reach the tool unchanged.
    #[test]
    fn valid_arguments_are_accepted(
        (signature, arguments) in signature().prop_flat_map(|s| {
            let values: Vec<_> = s
                .inputs
                .iter()
                .map(|p| {
                    let given = if p.private {
                        Just(None).boxed()
                    } else if p.required {
                        valid_value(&p.ty).prop_map(Some).boxed()
                    } else {
                        prop_oneof![
                            3 => valid_value(&p.ty).prop_map(Some),
                            1 => Just(Some(Value::Null)),
                            1 => Just(None),
                        ]
                        .boxed()
                    };
                    (Just(p.name.clone()), given)
                })
                .collect();
            (Just(s), values)
        }),
    ) {
        let arguments: Vec<(&str, &Value)> =
            arguments.iter().filter_map(|(name, value)| Some((name.as_str(), value.as_ref()?))).collect();
        let got = input_record(&signature, &arguments);
        prop_assert!(got.is_ok(), "valid arguments refused: {:?}", got.err());
        prop_assert_eq!(Some(got.unwrap()), expected(&signature, &arguments, Supplier::Agent));
    }

    /// A whole A2T body, of any shape: an answer, never a panic; and when the
    /// body is well formed, the same answer as for its named values.
    #[test]
    fn any_a2t_body_is_validated_or_refused(
        (signature, arguments) in signature_and_arguments(),
        body in json_value(),
        shape in 0..4u8,
    ) {
        let entries: Vec<Value> = arguments.iter().map(|(n, v)| json!({"name": n, "value": v})).collect();
        let body = match shape {
            0 => body,
            1 => json!({"name": signature.name, "input_parameters": body}),
            2 => json!({"name": body, "input_parameters": entries}),
            _ => json!({"name": signature.name, "input_parameters": entries}),
        };
        match input_value(&signature, &body) {
            Ok(val) => {
                prop_assert!(shape >= 1);
                if shape == 3 {
                    let named: Vec<(&str, &Value)> = arguments.iter().map(|(n, v)| (n.as_str(), v)).collect();
                    prop_assert_eq!(Some(val), expected(&signature, &named, Supplier::Agent));
                }
            }
            Err(e) => {
                prop_assert!(CODES.contains(&e.code), "unknown code {}", e.code);
                prop_assert!(!e.message.trim().is_empty());
                if shape == 3 {
                    let names: Vec<&str> = arguments.iter().map(|(n, _)| n.as_str()).collect();
                    let duplicate = names.iter().enumerate().any(|(i, n)| {
                        signature.input(n).is_some() && names[..i].contains(n)
                    });
                    prop_assert_eq!(duplicate, e.code == "duplicate_parameter", "{:?}", e);
                    let named: Vec<(&str, &Value)> = arguments.iter().map(|(n, v)| (n.as_str(), v)).collect();
                    prop_assert!(duplicate || expected(&signature, &named, Supplier::Agent).is_none());
                }
            }
        }
    }
}
