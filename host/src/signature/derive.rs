//! WIT world → [`Signature`]: the tool contract of `wit/README.md`.

use super::*;
use crate::manifest::{InputConstraints, ToolManifest};
use wit_parser::{Docs, Resolve, Type, TypeDefKind, TypeOwner, WorldId, WorldItem, WorldKey};

/// Why a component's WIT does not make a valid tool.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DeriveError {
    /// The world does not export `call` with the contract's shape.
    #[error("the world must export `call: func(input: input) -> result<output, tool-error>`: {0}")]
    Contract(String),
    /// An input field has a type A2T does not allow.
    #[error(
        "input `{field}` has type `{found}`; inputs may only be string, bool, an integer type, an enum, or option<> of one of these"
    )]
    UnsupportedInput {
        /// The WIT field name.
        field: String,
        /// The WIT type found.
        found: String,
    },
    /// An output field has a type that cannot be returned as JSON.
    #[error("output `{field}` has type `{found}`, which cannot be returned as a value")]
    UnsupportedOutput {
        /// The WIT field name.
        field: String,
        /// The WIT type found.
        found: String,
    },
    /// `plinth.toml` constrains an input in a way its type does not allow.
    #[error("plinth.toml, [inputs.{id}]: {why}")]
    Constraint {
        /// The input id as written in `plinth.toml`.
        id: String,
        /// What is wrong.
        why: String,
    },
    /// The signature breaks a rule of the A2T draft.
    #[error("{0}")]
    Rule(#[from] RuleViolation),
    /// `[confirmation]` in plinth.toml is not valid for these inputs.
    #[error("plinth.toml, [confirmation]: {0}")]
    Confirmation(#[from] crate::cheq::ConditionError),
}

/// Derives the signature of the tool defined by `world`, with the extra
/// constraints of its manifest, and checks it against the A2T rules.
pub fn derive(
    resolve: &Resolve,
    world: WorldId,
    world_name: &str,
    manifest: &ToolManifest,
) -> Result<Signature, DeriveError> {
    let contract = |why: &str| DeriveError::Contract(why.to_string());
    let w = &resolve.worlds[world];
    let call = match w.exports.get(&WorldKey::Name("call".into())) {
        Some(WorldItem::Function(f)) => f,
        _ => return Err(contract("no exported function `call`")),
    };
    let [param] = call.params.as_slice() else {
        return Err(contract("`call` must take exactly one parameter, the input record"));
    };
    let input_fields = match record_fields(resolve, &param.ty) {
        Some(fields) => fields,
        None => return Err(contract("the parameter of `call` must be a record")),
    };
    let (ok, err) = match call.result.as_ref().map(|t| resolved_kind(resolve, t)) {
        Some(Some(TypeDefKind::Result(r))) => (r.ok, r.err),
        _ => return Err(contract("`call` must return result<output, tool-error>")),
    };
    match err {
        Some(t) if is_tool_error(resolve, &t) => {}
        _ => return Err(contract("the error type must be `tool-error` from plinth:tool/types@0.1.x")),
    }
    let output_fields = match ok {
        None => Vec::new(),
        Some(t) => record_fields(resolve, &t).ok_or_else(|| contract("the ok type of `call` must be a record"))?,
    };
    if let Some(describe) = w.exports.get(&WorldKey::Name("describe".into())) {
        check_describe(resolve, describe, &param.ty)?;
    }

    for id in manifest.inputs.keys() {
        if !input_fields.iter().any(|f| snake(&f.name) == *id) {
            return Err(DeriveError::Constraint { id: id.clone(), why: "there is no input with this id".into() });
        }
    }

    let inputs = input_fields
        .iter()
        .map(|field| {
            let id = snake(&field.name);
            let constraints = manifest.inputs.get(&id).cloned().unwrap_or_default();
            let (ty, required) = input_type(resolve, &field.name, &field.ty, &id, &constraints)?;
            Ok(InputParam {
                name: id.clone(),
                id,
                field: field.name.clone(),
                description: doc_text(&field.docs),
                required,
                ty,
                private: constraints.private,
            })
        })
        .collect::<Result<Vec<_>, DeriveError>>()?;
    let names: Vec<&str> = inputs.iter().map(|p: &InputParam| p.name.as_str()).collect();
    manifest.confirmation.check(&names)?;

    let outputs = output_fields
        .iter()
        .map(|field| {
            check_returnable(resolve, &field.name, &field.ty)?;
            let id = snake(&field.name);
            Ok(OutputParam {
                name: id.clone(),
                id,
                field: field.name.clone(),
                description: doc_text(&field.docs),
                ty: output_type(resolve, &field.ty),
            })
        })
        .collect::<Result<Vec<_>, DeriveError>>()?;

    let signature = Signature {
        name: snake(world_name),
        description: doc_text(&w.docs),
        img: manifest.img.clone(),
        tags: manifest.tags.clone(),
        inputs,
        outputs,
    };
    signature.check_rules()?;
    Ok(signature)
}

/// A doc comment as one text: lines wrapped in the source are joined with a
/// space; blank lines still separate paragraphs.
fn doc_text(docs: &Docs) -> String {
    let text = docs.contents.as_deref().unwrap_or("");
    text.split("\n\n")
        .map(|paragraph| paragraph.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// Follows type aliases (`type a = b`, and `use`d types) to the definition.
fn resolved_id(resolve: &Resolve, ty: &Type) -> Option<wit_parser::TypeId> {
    let mut ty = *ty;
    loop {
        let Type::Id(id) = ty else { return None };
        match &resolve.types[id].kind {
            TypeDefKind::Type(inner) => ty = *inner,
            _ => return Some(id),
        }
    }
}

fn resolved_kind<'a>(resolve: &'a Resolve, ty: &Type) -> Option<&'a TypeDefKind> {
    resolved_id(resolve, ty).map(|id| &resolve.types[id].kind)
}

fn record_fields(resolve: &Resolve, ty: &Type) -> Option<Vec<wit_parser::Field>> {
    match resolved_kind(resolve, ty)? {
        TypeDefKind::Record(r) => Some(r.fields.clone()),
        _ => None,
    }
}

/// The optional `describe` export (the CHEQ's call description) takes the
/// same input as `call` and returns `result<call-description, tool-error>`.
fn check_describe(resolve: &Resolve, describe: &WorldItem, input: &Type) -> Result<(), DeriveError> {
    let contract = |why: &str| {
        DeriveError::Contract(format!(
            "`describe`, when exported, must be `describe: func(input: input) -> result<call-description, tool-error>`: {why}"
        ))
    };
    let WorldItem::Function(describe) = describe else { return Err(contract("it is not a function")) };
    match describe.params.as_slice() {
        [param] if resolved_id(resolve, &param.ty) == resolved_id(resolve, input) => {}
        _ => return Err(contract("it must take the same input record as `call`")),
    }
    match describe.result.as_ref().and_then(|t| resolved_kind(resolve, t)) {
        Some(TypeDefKind::Result(r))
            if r.ok.is_some_and(|t| is_contract_type(resolve, &t, "call-description"))
                && r.err.is_some_and(|t| is_tool_error(resolve, &t)) =>
        {
            Ok(())
        }
        _ => Err(contract("it must return result<call-description, tool-error> from plinth:tool/types@0.1.x")),
    }
}

/// `tool-error` defined in `plinth:tool/types` of any 0.1.x version.
fn is_tool_error(resolve: &Resolve, ty: &Type) -> bool {
    is_contract_type(resolve, ty, "tool-error")
}

/// The type `name` defined in `plinth:tool/types` of any 0.1.x version.
fn is_contract_type(resolve: &Resolve, ty: &Type, name: &str) -> bool {
    let Some(id) = resolved_id(resolve, ty) else { return false };
    let def = &resolve.types[id];
    let TypeOwner::Interface(iface) = def.owner else { return false };
    let iface = &resolve.interfaces[iface];
    let Some(pkg) = iface.package else { return false };
    let pkg = &resolve.packages[pkg].name;
    def.name.as_deref() == Some(name)
        && iface.name.as_deref() == Some("types")
        && pkg.namespace == "plinth"
        && pkg.name == "tool"
        && pkg.version.as_ref().is_some_and(|v| v.major == 0 && v.minor == 1)
}

fn int_kind(ty: &Type) -> Option<IntKind> {
    Some(match ty {
        Type::U8 => IntKind::U8,
        Type::U16 => IntKind::U16,
        Type::U32 => IntKind::U32,
        Type::U64 => IntKind::U64,
        Type::S8 => IntKind::S8,
        Type::S16 => IntKind::S16,
        Type::S32 => IntKind::S32,
        Type::S64 => IntKind::S64,
        _ => return None,
    })
}

fn enum_values(resolve: &Resolve, ty: &Type) -> Option<Vec<EnumValue>> {
    match resolved_kind(resolve, ty)? {
        TypeDefKind::Enum(e) => Some(
            e.cases
                .iter()
                .map(|c| EnumValue {
                    name: capitalized_snake(&c.name),
                    case: c.name.clone(),
                    description: doc_text(&c.docs),
                })
                .collect(),
        ),
        _ => None,
    }
}

/// The A2T input type of a field and whether it is required.
fn input_type(
    resolve: &Resolve,
    field: &str,
    ty: &Type,
    id: &str,
    constraints: &InputConstraints,
) -> Result<(InputType, bool), DeriveError> {
    let (ty, required) = match resolved_kind(resolve, ty) {
        Some(TypeDefKind::Option(inner)) => (*inner, false),
        _ => (*ty, true),
    };
    let unsupported = || DeriveError::UnsupportedInput { field: field.to_string(), found: type_name(resolve, &ty) };
    let constraint = |why: &str| DeriveError::Constraint { id: id.to_string(), why: why.to_string() };

    if constraints.private && ty != Type::String {
        return Err(constraint("`private` applies to string inputs (account numbers, card data)"));
    }
    let constraints = &InputConstraints { private: false, ..constraints.clone() };
    let input = if ty == Type::String {
        if constraints.min.is_some() || constraints.max.is_some() {
            return Err(constraint("min and max apply to integers; use max-length for a string"));
        }
        InputType::String { max_length: constraints.max_length }
    } else if let Some(kind) = int_kind(&ty) {
        if constraints.max_length.is_some() {
            return Err(constraint("max-length applies to strings; use min and max for an integer"));
        }
        let (lo, hi) = kind.range();
        let min = constraints.min.map_or(lo, i128::from);
        let max = constraints.max.map_or(hi, i128::from);
        if min < lo || max > hi {
            return Err(constraint(&format!("min and max must lie within the range of the WIT type ({lo} to {hi})")));
        }
        InputType::Int { wit: kind, min, max }
    } else if ty == Type::Bool {
        if *constraints != InputConstraints::default() {
            return Err(constraint("a boolean takes no constraints"));
        }
        InputType::Boolean
    } else if let Some(values) = enum_values(resolve, &ty) {
        if *constraints != InputConstraints::default() {
            return Err(constraint("an enum takes no constraints; its cases are its allowed values"));
        }
        InputType::Enum { values }
    } else {
        return Err(unsupported());
    };
    Ok((input, required))
}

fn output_type(resolve: &Resolve, ty: &Type) -> OutputType {
    if *ty == Type::String {
        OutputType::String
    } else if int_kind(ty).is_some() {
        OutputType::Int
    } else if let Some(values) = enum_values(resolve, ty) {
        OutputType::Enum { values }
    } else {
        OutputType::Json { schema: Some(json_schema(resolve, ty, 0)) }
    }
}

/// How deep a JSON Schema is derived (WIT types cannot recurse; this bounds
/// a hostile component's nesting all the same).
const MAX_SCHEMA_DEPTH: usize = 32;

/// The JSON Schema of what [`crate::invocation::to_json`] renders a value
/// of `ty` as: records as objects with snake_case keys (every field present,
/// an absent option as `null`), enum cases and flags as CAPITALIZED_SNAKE
/// strings, a variant case with a payload as `{"CASE": payload}`, results
/// as `{"ok": …}` / `{"error": …}`, floats as numbers (`null` when not
/// finite). Doc comments become descriptions.
fn json_schema(resolve: &Resolve, ty: &Type, depth: usize) -> serde_json::Value {
    use serde_json::json;
    if depth > MAX_SCHEMA_DEPTH {
        return json!({});
    }
    let inner = |ty: &Type| json_schema(resolve, ty, depth + 1);
    let or_null = |ty: Option<&Type>| ty.map_or_else(|| json!({ "type": "null" }), &inner);
    if let Some(kind) = int_kind(ty) {
        let (min, max) = kind.range();
        return json!({ "type": "integer", "minimum": super::schema::int_value(min), "maximum": super::schema::int_value(max) });
    }
    let Type::Id(id) = ty else {
        return match ty {
            Type::Bool => json!({ "type": "boolean" }),
            // Non-finite floats render as null. `anyOf` rather than a type
            // list: clients mapping schemas onto a one-type dialect (the
            // Inspector's portability check) take it.
            Type::F32 | Type::F64 => json!({ "anyOf": [{ "type": "number" }, { "type": "null" }] }),
            Type::Char => json!({ "type": "string", "minLength": 1, "maxLength": 1 }),
            Type::String => json!({ "type": "string" }),
            _ => json!({}),
        };
    };
    let def = &resolve.types[*id];
    let mut schema = match &def.kind {
        TypeDefKind::Type(alias) => inner(alias),
        TypeDefKind::Record(r) => {
            let properties: serde_json::Map<String, serde_json::Value> = r
                .fields
                .iter()
                .map(|f| {
                    let mut field = inner(&f.ty);
                    let description = doc_text(&f.docs);
                    if !description.is_empty() {
                        field["description"] = description.into();
                    }
                    (snake(&f.name), field)
                })
                .collect();
            let required: Vec<String> = r.fields.iter().map(|f| snake(&f.name)).collect();
            json!({ "type": "object", "properties": properties, "required": required })
        }
        TypeDefKind::Tuple(t) => {
            let items: Vec<_> = t.types.iter().map(inner).collect();
            json!({ "type": "array", "prefixItems": items, "minItems": t.types.len(), "maxItems": t.types.len() })
        }
        TypeDefKind::Variant(v) => {
            let cases: Vec<_> = v
                .cases
                .iter()
                .map(|c| {
                    let name = capitalized_snake(&c.name);
                    let mut case = match &c.ty {
                        None => json!({ "const": name }),
                        Some(payload) => json!({ "type": "object", "properties": { name.clone(): inner(payload) },
                                                 "required": [name], "additionalProperties": false }),
                    };
                    let description = doc_text(&c.docs);
                    if !description.is_empty() {
                        case["description"] = description.into();
                    }
                    case
                })
                .collect();
            json!({ "oneOf": cases })
        }
        TypeDefKind::Enum(e) => {
            let names: Vec<String> = e.cases.iter().map(|c| capitalized_snake(&c.name)).collect();
            json!({ "type": "string", "enum": names })
        }
        TypeDefKind::Flags(f) => {
            let names: Vec<String> = f.flags.iter().map(|f| capitalized_snake(&f.name)).collect();
            json!({ "type": "array", "items": { "type": "string", "enum": names }, "uniqueItems": true })
        }
        TypeDefKind::Option(t) => json!({ "anyOf": [inner(t), { "type": "null" }] }),
        TypeDefKind::Result(r) => json!({ "oneOf": [
            { "type": "object", "properties": { "ok": or_null(r.ok.as_ref()) }, "required": ["ok"], "additionalProperties": false },
            { "type": "object", "properties": { "error": or_null(r.err.as_ref()) }, "required": ["error"], "additionalProperties": false },
        ] }),
        TypeDefKind::List(t) => json!({ "type": "array", "items": inner(t) }),
        TypeDefKind::FixedLengthList(t, n) => {
            json!({ "type": "array", "items": inner(t), "minItems": n, "maxItems": n })
        }
        TypeDefKind::Map(k, v) => json!({ "type": "array", "items": {
            "type": "array", "prefixItems": [inner(k), inner(v)], "minItems": 2, "maxItems": 2 } }),
        _ => json!({}),
    };
    let description = doc_text(&def.docs);
    if !description.is_empty() && schema.get("description").is_none() {
        schema["description"] = description.into();
    }
    schema
}

/// Outputs become JSON values; handles, futures and streams cannot.
fn check_returnable(resolve: &Resolve, field: &str, ty: &Type) -> Result<(), DeriveError> {
    let refuse = || DeriveError::UnsupportedOutput { field: field.to_string(), found: type_name(resolve, ty) };
    let mut pending = vec![*ty];
    let mut seen = std::collections::HashSet::new();
    while let Some(ty) = pending.pop() {
        match ty {
            Type::ErrorContext => return Err(refuse()),
            Type::Id(id) => {
                if !seen.insert(id) {
                    continue;
                }
                match &resolve.types[id].kind {
                    TypeDefKind::Record(r) => pending.extend(r.fields.iter().map(|f| f.ty)),
                    TypeDefKind::Tuple(t) => pending.extend(t.types.iter().copied()),
                    TypeDefKind::Variant(v) => pending.extend(v.cases.iter().filter_map(|c| c.ty)),
                    TypeDefKind::Option(t)
                    | TypeDefKind::List(t)
                    | TypeDefKind::Type(t)
                    | TypeDefKind::FixedLengthList(t, _) => pending.push(*t),
                    TypeDefKind::Result(r) => pending.extend(r.ok.iter().chain(r.err.iter()).copied()),
                    TypeDefKind::Map(k, v) => pending.extend([*k, *v]),
                    TypeDefKind::Enum(_) | TypeDefKind::Flags(_) => {}
                    TypeDefKind::Resource
                    | TypeDefKind::Handle(_)
                    | TypeDefKind::Future(_)
                    | TypeDefKind::Stream(_)
                    | TypeDefKind::Unknown => return Err(refuse()),
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// A short WIT spelling of a type, for error messages.
fn type_name(resolve: &Resolve, ty: &Type) -> String {
    match ty {
        Type::Bool => "bool".into(),
        Type::U8 => "u8".into(),
        Type::U16 => "u16".into(),
        Type::U32 => "u32".into(),
        Type::U64 => "u64".into(),
        Type::S8 => "s8".into(),
        Type::S16 => "s16".into(),
        Type::S32 => "s32".into(),
        Type::S64 => "s64".into(),
        Type::F32 => "f32".into(),
        Type::F64 => "f64".into(),
        Type::Char => "char".into(),
        Type::String => "string".into(),
        Type::ErrorContext => "error-context".into(),
        Type::Id(id) => {
            let def = &resolve.types[*id];
            if let Some(name) = &def.name {
                return name.clone();
            }
            match &def.kind {
                TypeDefKind::Option(t) => format!("option<{}>", type_name(resolve, t)),
                TypeDefKind::List(t) => format!("list<{}>", type_name(resolve, t)),
                TypeDefKind::Tuple(t) => {
                    format!("tuple<{}>", t.types.iter().map(|t| type_name(resolve, t)).collect::<Vec<_>>().join(", "))
                }
                TypeDefKind::Result(_) => "result<…>".into(),
                TypeDefKind::Type(t) => type_name(resolve, t),
                TypeDefKind::Handle(_) => "a resource handle".into(),
                TypeDefKind::Future(_) => "future<…>".into(),
                TypeDefKind::Stream(_) => "stream<…>".into(),
                other => other.as_str().to_string(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLINTH_TOOL: &str = include_str!("../../../wit/tool.wit");
    const WASI_CONFIG: &str = include_str!("../../../wit/deps/config/store.wit");
    const WASI_CONFIG_WORLD: &str = include_str!("../../../wit/deps/config/world.wit");

    /// Resolves a tool world written in WIT, with the shared packages.
    fn world(body: &str) -> (Resolve, WorldId) {
        let mut resolve = Resolve::default();
        let config = format!("{WASI_CONFIG_WORLD}\n{WASI_CONFIG}");
        resolve.push_str("config.wit", &config).unwrap();
        resolve.push_str("tool.wit", PLINTH_TOOL).unwrap();
        let text = format!(
            "package test:tool;\n/// A test tool that does one thing well.\nworld the-tool {{\n use plinth:tool/types@0.1.0.{{tool-error, call-description}};\n{body}\n}}"
        );
        let pkg = resolve.push_str("world.wit", &text).unwrap();
        let world = resolve.select_world(&[pkg], Some("the-tool")).unwrap();
        (resolve, world)
    }

    fn sig(body: &str, manifest: &str) -> Result<Signature, DeriveError> {
        let (resolve, world) = world(body);
        derive(&resolve, world, "the-tool", &ToolManifest::from_toml(manifest).unwrap())
    }

    const CALL: &str = "export call: func(input: input) -> result<output, tool-error>;";

    #[test]
    fn maps_every_input_type() {
        let s = sig(
            &format!(
                "/// Cabins.\nenum cabin {{\n /// Cheap.\n economy,\n /// Roomier.\n premium-economy,\n}}\n\
                 record input {{\n /// A city.\n city-name: string,\n /// Count.\n n: u16,\n /// Signed.\n delta: s8,\n \
                 /// Big.\n big: u64,\n /// Flag.\n flag: bool,\n /// Cabin.\n cabin: cabin,\n /// Maybe.\n maybe: option<u32>,\n}}\n\
                 record output {{\n /// Out.\n o: string,\n}}\n{CALL}"
            ),
            "",
        )
        .unwrap();
        assert_eq!(s.name, "the_tool");
        assert_eq!(s.description, "A test tool that does one thing well.");
        let by_id = |id: &str| s.inputs.iter().find(|p| p.id == id).unwrap().clone();
        assert_eq!(by_id("city_name").ty, InputType::String { max_length: None });
        assert_eq!(by_id("city_name").field, "city-name");
        assert_eq!(by_id("city_name").description, "A city.");
        assert!(by_id("city_name").required);
        assert_eq!(by_id("n").ty, InputType::Int { wit: IntKind::U16, min: 0, max: 65535 });
        assert_eq!(by_id("delta").ty, InputType::Int { wit: IntKind::S8, min: -128, max: 127 });
        assert_eq!(by_id("big").ty, InputType::Int { wit: IntKind::U64, min: 0, max: u64::MAX.into() });
        assert_eq!(by_id("flag").ty, InputType::Boolean);
        let InputType::Enum { values } = by_id("cabin").ty else { panic!() };
        assert_eq!(values[1].name, "PREMIUM_ECONOMY");
        assert_eq!(values[1].case, "premium-economy");
        assert_eq!(values[1].description, "Roomier.");
        let maybe = by_id("maybe");
        assert!(!maybe.required);
        assert_eq!(maybe.ty, InputType::Int { wit: IntKind::U32, min: 0, max: u32::MAX.into() });
    }

    #[test]
    fn maps_every_output_type() {
        let s = sig(
            &format!(
                "/// E.\nenum e {{\n /// A.\n a,\n}}\nrecord point {{ x: f64, y: f64 }}\n\
                 variant shape {{ dot, circle(f64) }}\n\
                 record input {{\n /// In.\n i: string,\n}}\n\
                 record output {{\n /// S.\n s: string,\n /// I.\n i: s32,\n /// E.\n e: e,\n /// P.\n p: point,\n \
                 /// L.\n l: list<string>,\n /// O.\n o: option<string>,\n /// B.\n b: bool,\n /// F.\n f: f64,\n /// V.\n v: shape,\n}}\n{CALL}"
            ),
            "",
        )
        .unwrap();
        let types: Vec<_> = s.outputs.iter().map(|o| (o.id.as_str(), o.ty.a2t_name())).collect();
        assert_eq!(
            types,
            [
                ("s", "string"),
                ("i", "int"),
                ("e", "enum"),
                ("p", "json"),
                ("l", "json"),
                ("o", "json"),
                ("b", "json"),
                ("f", "json"),
                ("v", "json")
            ]
        );
    }

    #[test]
    fn a_json_output_publishes_the_schema_of_what_its_wit_type_renders_as() {
        let s = sig(
            &format!(
                "/// A place.\nrecord point {{\n /// Degrees north.\n lat: f64,\n lon: f64,\n /// A name.\n name: option<string>,\n}}\n\
                 variant shape {{ dot, circle(f64) }}\nflags seen {{ early, late }}\n\
                 record input {{\n /// In.\n i: string,\n}}\n\
                 record output {{\n /// P.\n p: point,\n /// L.\n l: list<point>,\n /// T.\n t: tuple<u8, string>,\n \
                 /// V.\n v: shape,\n /// F.\n f: seen,\n /// R.\n r: result<u32, string>,\n /// N.\n n: f32,\n}}\n{CALL}"
            ),
            "",
        )
        .unwrap();
        let schema = |id: &str| match &s.outputs.iter().find(|o| o.id == id).unwrap().ty {
            OutputType::Json { schema } => schema.clone().unwrap(),
            other => panic!("{other:?}"),
        };
        let point = schema("p");
        assert_eq!(point["type"], "object");
        assert_eq!(point["description"], "A place.");
        assert_eq!(
            point["properties"]["lat"],
            serde_json::json!({ "anyOf": [{ "type": "number" }, { "type": "null" }], "description": "Degrees north." })
        );
        assert_eq!(point["required"], serde_json::json!(["lat", "lon", "name"]));
        assert_eq!(schema("l")["items"]["properties"]["lon"]["anyOf"][0]["type"], "number");
        assert_eq!(
            schema("t")["prefixItems"][0],
            serde_json::json!({ "type": "integer", "minimum": 0, "maximum": 255 })
        );
        // What the tool returns validates against what is published.
        let cases = [
            ("p", serde_json::json!({ "lat": 41.2, "lon": -95.9, "name": null }), true),
            ("p", serde_json::json!({ "lat": "north", "lon": 1, "name": null }), false),
            ("l", serde_json::json!([{ "lat": 1, "lon": 2, "name": "x" }]), true),
            ("t", serde_json::json!([7, "seven"]), true),
            ("t", serde_json::json!([700, "seven"]), false),
            ("v", serde_json::json!("DOT"), true),
            ("v", serde_json::json!({ "CIRCLE": 2.5 }), true),
            ("v", serde_json::json!("SQUARE"), false),
            ("f", serde_json::json!(["EARLY", "LATE"]), true),
            ("r", serde_json::json!({ "ok": 3 }), true),
            ("r", serde_json::json!({ "error": "no" }), true),
            ("r", serde_json::json!({ "ok": "3" }), false),
            ("n", serde_json::json!(null), true),
        ];
        for (id, value, valid) in cases {
            let validator = jsonschema::validator_for(&schema(id)).unwrap();
            assert_eq!(validator.is_valid(&value), valid, "{id}: {value}");
        }
    }

    #[test]
    fn a_tool_may_have_no_outputs() {
        let s = sig(
            "record input {\n /// In.\n i: string,\n}\nexport call: func(input: input) -> result<_, tool-error>;",
            "",
        )
        .unwrap();
        assert!(s.outputs.is_empty());
    }

    #[test]
    fn applies_manifest_constraints() {
        let body = format!(
            "record input {{\n /// S.\n s: string,\n /// N.\n n: u8,\n}}\nrecord output {{\n /// O.\n o: string,\n}}\n{CALL}"
        );
        let s = sig(&body, "tags = ['x']\nimg = 'https://i'\n[inputs.s]\nmax-length = 5\n[inputs.n]\nmin = 1\nmax = 9")
            .unwrap();
        assert_eq!(s.inputs[0].ty, InputType::String { max_length: Some(5) });
        assert_eq!(s.inputs[1].ty, InputType::Int { wit: IntKind::U8, min: 1, max: 9 });
        assert_eq!(s.tags, ["x"]);
        assert_eq!(s.img.as_deref(), Some("https://i"));

        for (manifest, expect) in [
            ("[inputs.nope]\nmax-length = 1", "there is no input with this id"),
            ("[inputs.n]\nmax = 300", "within the range of the WIT type (0 to 255)"),
            ("[inputs.n]\nmax-length = 3", "max-length applies to strings"),
            ("[inputs.s]\nmin = 3", "use max-length for a string"),
            ("[inputs.n]\nmin = 9\nmax = 1", "min (9) is greater than max (1)"),
            ("[inputs.s]\nmax-length = 0", "max-length must be at least 1"),
        ] {
            let err = sig(&body, manifest).unwrap_err().to_string();
            assert!(err.contains(expect), "{manifest}: {err}");
        }
    }

    #[test]
    fn rejects_unsupported_inputs_naming_the_field() {
        for (ty, found) in [
            ("list<string>", "list<string>"),
            ("f64", "f64"),
            ("char", "char"),
            ("tuple<u8, u8>", "tuple<u8, u8>"),
            ("option<option<u8>>", "option<u8>"),
            ("option<list<u8>>", "list<u8>"),
            ("point", "point"),
        ] {
            let body = format!(
                "record point {{ x: u8 }}\nrecord input {{\n /// Bad.\n bad-field: {ty},\n}}\nrecord output {{\n /// O.\n o: string,\n}}\n{CALL}"
            );
            let err = sig(&body, "").unwrap_err();
            assert_eq!(err, DeriveError::UnsupportedInput { field: "bad-field".into(), found: found.into() }, "{ty}");
            assert!(err.to_string().contains("input `bad-field` has type"));
        }
    }

    #[test]
    fn rejects_contract_violations() {
        let input = "record input {\n /// I.\n i: string,\n}\nrecord output {\n /// O.\n o: string,\n}\n";
        for (exports, expect) in [
            ("export run: func(input: input) -> result<output, tool-error>;", "no exported function `call`"),
            ("export call: func(a: input, b: input) -> result<output, tool-error>;", "exactly one parameter"),
            ("export call: func(s: string) -> result<output, tool-error>;", "must be a record"),
            ("export call: func(input: input) -> output;", "must return result<output, tool-error>"),
            ("export call: func(input: input) -> result<output, string>;", "`tool-error` from plinth:tool"),
            ("export call: func(input: input) -> result<string, tool-error>;", "ok type of `call` must be a record"),
        ] {
            let err = sig(&format!("{input}{exports}"), "").unwrap_err().to_string();
            assert!(err.contains(expect), "{exports}: {err}");
        }
    }

    #[test]
    fn checks_the_optional_describe_export() {
        let types = "record input {\n /// I.\n i: string,\n}\nrecord other {\n i: string,\n}\nrecord output {\n /// O.\n o: string,\n}\n";
        let describe = "export describe: func(input: input) -> result<call-description, tool-error>;";
        assert!(sig(&format!("{types}{CALL}\n{describe}"), "").is_ok());
        for (exports, expect) in [
            ("export describe: func(input: other) -> result<call-description, tool-error>;", "same input record"),
            ("export describe: func(input: input) -> result<string, tool-error>;", "result<call-description"),
            ("export describe: func(input: input) -> result<call-description, string>;", "result<call-description"),
            ("export describe: func(input: input) -> call-description;", "result<call-description"),
            ("export describe: func() -> result<call-description, tool-error>;", "same input record"),
        ] {
            let err = sig(&format!("{types}{CALL}\n{exports}"), "").unwrap_err().to_string();
            assert!(err.contains(expect) && err.contains("`describe`, when exported"), "{exports}: {err}");
        }
    }

    #[test]
    fn enforces_the_a2t_rules() {
        let ok_input = "record input {\n /// I.\n i: string,\n}\n";
        let ok_output = "record output {\n /// O.\n o: string,\n}\n";
        // A missing description on an input, an output and an enum case.
        for (body, expect) in [
            (format!("record input {{\n i: string,\n}}\n{ok_output}{CALL}"), "input `i`: a description is required"),
            (format!("{ok_input}record output {{\n o: string,\n}}\n{CALL}"), "output `o`: a description is required"),
            (
                format!("enum e {{ a }}\nrecord input {{\n /// E.\n e: e,\n}}\n{ok_output}{CALL}"),
                "input `e`, value `A`: a description is required",
            ),
        ] {
            let err = sig(&body, "").unwrap_err().to_string();
            assert!(err.contains(expect), "{err}");
        }
        // Descriptions that are too long.
        let long = "x".repeat(2001);
        let err = sig(&format!("record input {{\n /// {long}\n i: string,\n}}\n{ok_output}{CALL}"), "")
            .unwrap_err()
            .to_string();
        assert!(err.contains("at most 2000 characters (it has 2001)"), "{err}");

        // Tool-level rules, checked on a derived signature.
        let good = sig(&format!("{ok_input}{ok_output}{CALL}"), "").unwrap();
        let broken = |edit: &dyn Fn(&mut Signature)| {
            let mut s = good.clone();
            edit(&mut s);
            s.check_rules().unwrap_err().to_string()
        };
        assert!(broken(&|s| s.name = "a".repeat(255)).contains("shorter than 255"));
        assert!(good.clone().check_rules().is_ok());
        let mut longest = good.clone();
        longest.name = "a".repeat(254);
        assert!(longest.check_rules().is_ok());
        assert!(broken(&|s| s.name = "Not_Snake".into()).contains("snake_case"));
        assert!(broken(&|s| s.description = String::new()).contains("the world's doc comment"));
        assert!(broken(&|s| s.description = "d".repeat(2000)).contains("at most 1999"));
        assert!(broken(&|s| s.tags = vec![" ".into()]).contains("tags must not be empty"));
        assert!(
            broken(&|s| {
                let mut dup = s.inputs[0].clone();
                dup.id = "other".into();
                s.inputs.push(dup);
            })
            .contains("names must be unique")
        );
        assert!(
            broken(&|s| {
                let mut dup = s.inputs[0].clone();
                dup.name = "other".into();
                s.inputs.push(dup);
            })
            .contains("ids must be unique")
        );
        assert!(
            broken(&|s| {
                s.inputs[0].ty = InputType::Enum {
                    values: vec![EnumValue { name: "lower".into(), case: "lower".into(), description: "d".into() }],
                }
            })
            .contains("CAPITALIZED_SNAKE_CASE")
        );
        assert!(
            broken(&|s| {
                s.inputs[0].ty = InputType::Enum {
                    values: vec![EnumValue { name: "A".repeat(256), case: "a".into(), description: "d".into() }],
                }
            })
            .contains("at most 255 characters")
        );
    }
}
