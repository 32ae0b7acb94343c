//! Property tests of reading a packed tool: whatever bytes a publisher
//! uploads, [`ToolPackage::read`] (and the signature derivation behind it)
//! answers with a tool or a [`PackageError`] with a message — never a panic,
//! an abort or a hang — and what it accepts obeys the rules a deploy relies
//! on.
//!
//! The inputs: arbitrary bytes; the real packed example tools and fixtures
//! (read from `target/`) with bytes changed, cut short, or their
//! `package-docs` / `plinth-manifest` sections replaced; and components built
//! from randomly generated WIT worlds.

use super::*;
use crate::signature::OutputType;
use proptest::prelude::*;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use wit_parser::Resolve;

/// One packed tool from `target/`.
pub(crate) struct PackedTool {
    /// Its file name.
    pub name: String,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

/// A directory of packed tools named by `var`, or else `target/<dir>`;
/// missing tools fail the test with what to run.
pub(crate) fn tools_dir(var: &str, dir: &str, probe: &str, make: &str) -> PathBuf {
    let path = std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target").join(dir));
    assert!(
        path.join(probe).exists(),
        "the packed tools are missing from {} (no {probe}): run `make {make}` (or `make test`) first, \
         or point {var} at them",
        path.display()
    );
    path
}

/// The packed example tools (`make plugins`) and test fixtures
/// (`make fixtures`), read once.
pub(crate) fn packed_tools() -> &'static [PackedTool] {
    static TOOLS: OnceLock<Vec<PackedTool>> = OnceLock::new();
    TOOLS.get_or_init(|| {
        let dirs = [
            tools_dir("PLINTH_TEST_PLUGINS", "plugins", "echo.wasm", "plugins"),
            tools_dir("PLINTH_TEST_FIXTURES", "fixtures", "echo_v2.wasm", "fixtures"),
        ];
        let mut tools = Vec::new();
        for dir in dirs {
            let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
                .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
                .filter_map(|entry| Some(entry.ok()?.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "wasm"))
                .collect();
            files.sort();
            for file in files {
                let bytes = std::fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
                tools.push(PackedTool { name: file.display().to_string(), bytes });
            }
        }
        tools
    })
}

/// One top-level section of a component: its id, where the whole section
/// lies, and where its contents lie.
#[derive(Debug, Clone)]
struct Section {
    id: u8,
    whole: Range<usize>,
    contents: Range<usize>,
}

fn read_leb128(bytes: &[u8], at: &mut usize) -> Option<usize> {
    let (mut value, mut shift) = (0usize, 0);
    loop {
        let byte = *bytes.get(*at)?;
        *at += 1;
        value |= usize::from(byte & 0x7f).checked_shl(shift)?;
        if byte & 0x80 == 0 {
            return Some(value);
        }
        shift += 7;
    }
}

/// The top-level sections of a component (nested modules are one section
/// each), as far as they can be told apart.
fn sections(bytes: &[u8]) -> Vec<Section> {
    let mut at = 8;
    let mut out = Vec::new();
    while at < bytes.len() {
        let start = at;
        let id = bytes[at];
        at += 1;
        let Some(size) = read_leb128(bytes, &mut at) else { break };
        let Some(end) = at.checked_add(size).filter(|end| *end <= bytes.len()) else { break };
        out.push(Section { id, whole: start..end, contents: at..end });
        at = end;
    }
    out
}

/// The name and data of a custom section.
fn custom<'a>(bytes: &'a [u8], section: &Section) -> Option<(&'a str, &'a [u8])> {
    if section.id != 0 {
        return None;
    }
    let mut at = section.contents.start;
    let len = read_leb128(bytes, &mut at)?;
    let name_end = at.checked_add(len).filter(|end| *end <= section.contents.end)?;
    let name = std::str::from_utf8(&bytes[at..name_end]).ok()?;
    Some((name, &bytes[name_end..section.contents.end]))
}

/// The data of the custom section `name`.
fn custom_data<'a>(bytes: &'a [u8], name: &str) -> Option<&'a [u8]> {
    sections(bytes).iter().filter_map(|s| custom(bytes, s)).find(|(n, _)| *n == name).map(|(_, data)| data)
}

/// The component without its custom section `name`.
fn without(bytes: &[u8], name: &str) -> Vec<u8> {
    let mut out = bytes[..bytes.len().min(8)].to_vec();
    for s in sections(bytes) {
        if custom(bytes, &s).is_none_or(|(n, _)| n != name) {
            out.extend_from_slice(&bytes[s.whole]);
        }
    }
    out
}

/// What a change did, to know what must still hold.
#[derive(Debug, Clone)]
enum Change {
    /// Bytes overwritten anywhere, or in the component-level sections (types,
    /// imports, exports, aliases, canonical functions — everything the
    /// signature is derived from — rather than the large core module).
    Bytes { outer: bool, edits: Vec<(usize, u8)> },
    /// Bytes inserted.
    Insert { at: usize, bytes: Vec<u8> },
    /// Cut short to a strict prefix.
    Truncate(usize),
    /// The `package-docs` section replaced (`None`: removed).
    Docs(Option<SectionData>),
    /// The `plinth-manifest` section replaced (`None`: removed).
    Manifest(Option<SectionData>),
    /// A second copy of a section, or another custom section, appended.
    Extra { name: String, data: Vec<u8> },
}

/// New data for a custom section.
#[derive(Debug, Clone)]
enum SectionData {
    /// Anything.
    Random(Vec<u8>),
    /// The original with some bytes overwritten.
    Edited(Vec<(usize, u8)>),
    /// The original cut short.
    Truncated(usize),
    /// Any JSON object with the manifest's keys (for the manifest).
    Json(serde_json::Value),
    /// The original's JSON (after the docs' version byte) with one node
    /// changed: the node numbered `pick` in document order replaced, or a
    /// key of it removed or added.
    JsonEdit { pick: usize, edit: JsonEdit },
}

/// One change to a JSON document.
#[derive(Debug, Clone)]
enum JsonEdit {
    /// A string, number or boolean node replaced by one of the same kind,
    /// so that the document usually still has its expected shape.
    Same {
        text: String,
        number: i64,
        flag: bool,
    },
    /// A key of an object node renamed.
    RenameKey(usize, String),
    /// A value set at a path of keys (objects made on the way), to reach
    /// every field of a manifest with any value.
    Set(Vec<String>, serde_json::Value),
    Replace(serde_json::Value),
    RemoveKey(usize),
    AddKey(String, serde_json::Value),
}

/// The JSON pointers of every node of `value`, in document order.
fn pointers(value: &serde_json::Value, at: String, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                pointers(v, format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")), out);
            }
        }
        serde_json::Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                pointers(v, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
    out.push(at);
}

fn edit_json(data: &[u8], pick: usize, edit: &JsonEdit) -> Vec<u8> {
    // The docs section starts with a version byte; the manifest is bare JSON.
    let (prefix, json) = match data.first() {
        Some(0 | 1) => data.split_at(1),
        _ => data.split_at(0),
    };
    let Ok(mut doc) = serde_json::from_slice::<serde_json::Value>(json) else { return data.to_vec() };
    if let JsonEdit::Set(path, value) = edit {
        let mut target = &mut doc;
        for key in path {
            if !target.is_object() {
                *target = serde_json::Value::Object(serde_json::Map::new());
            }
            target = &mut target[key.as_str()];
        }
        *target = value.clone();
        return [prefix, &serde_json::to_vec(&doc).unwrap_or_default()].concat();
    }
    let mut all = Vec::new();
    pointers(&doc, String::new(), &mut all);
    let Some(node) = doc.pointer_mut(&all[pick % all.len()]) else { return data.to_vec() };
    match (edit, node) {
        (JsonEdit::Same { text, .. }, serde_json::Value::String(s)) => *s = text.clone(),
        (JsonEdit::Same { number, .. }, serde_json::Value::Number(n)) => *n = (*number).into(),
        (JsonEdit::Same { flag, .. }, serde_json::Value::Bool(b)) => *b = *flag,
        (JsonEdit::RenameKey(i, name), serde_json::Value::Object(map)) if !map.is_empty() => {
            if let Some(key) = map.keys().nth(i % map.len()).cloned()
                && let Some(value) = map.remove(&key)
            {
                map.insert(name.clone(), value);
            }
        }
        (JsonEdit::Replace(value), node) => *node = value.clone(),
        (JsonEdit::RemoveKey(i), serde_json::Value::Object(map)) if !map.is_empty() => {
            if let Some(key) = map.keys().nth(i % map.len()).cloned() {
                map.remove(&key);
            }
        }
        (JsonEdit::AddKey(key, value), serde_json::Value::Object(map)) => {
            map.insert(key.clone(), value.clone());
        }
        _ => {}
    }
    [prefix, &serde_json::to_vec(&doc).unwrap_or_default()].concat()
}

fn edits() -> impl Strategy<Value = Vec<(usize, u8)>> {
    prop::collection::vec((any::<usize>(), any::<u8>()), 1..8)
}

fn section_data() -> impl Strategy<Value = SectionData> {
    prop_oneof![
        1 => prop::collection::vec(any::<u8>(), 0..256).prop_map(SectionData::Random),
        1 => edits().prop_map(SectionData::Edited),
        1 => any::<usize>().prop_map(SectionData::Truncated),
        1 => manifest_json().prop_map(SectionData::Json),
        4 => (
            any::<usize>(),
            prop_oneof![
                4 => (
                    prop_oneof![any::<String>(), "[a-z_-]{0,12}", (1usize..3000).prop_map(|n| "d".repeat(n))],
                    any::<i64>(),
                    any::<bool>()
                )
                    .prop_map(|(text, number, flag)| JsonEdit::Same { text, number, flag }),
                1 => (any::<usize>(), "[a-z-]{0,12}").prop_map(|(i, name)| JsonEdit::RenameKey(i, name)),
                2 => (manifest_path(), json_leaf()).prop_map(|(path, value)| JsonEdit::Set(path, value)),
                1 => manifest_json().prop_map(JsonEdit::Replace),
                1 => json_leaf().prop_map(JsonEdit::Replace),
                1 => any::<usize>().prop_map(JsonEdit::RemoveKey),
                1 => ("[a-z-]{1,12}", json_leaf()).prop_map(|(k, v)| JsonEdit::AddKey(k, v)),
            ]
        )
            .prop_map(|(pick, edit)| SectionData::JsonEdit { pick, edit }),
    ]
}

/// Paths to every field of a manifest (and a few that do not exist).
fn manifest_path() -> impl Strategy<Value = Vec<String>> {
    let input = prop::sample::select(vec!["text", "shout", "from_account", "city_name", "nope"]);
    let constraint = prop::sample::select(vec!["max-length", "min", "max", "private", "bogus"]);
    prop_oneof![
        prop::sample::select(vec![
            vec!["world"],
            vec!["tags"],
            vec!["toolkit"],
            vec!["img"],
            vec!["allowed-hosts"],
            vec!["secrets"],
            vec!["confirmation", "when"],
            vec!["confirmation", "required"],
            vec!["limits", "deadline-ms"],
            vec!["limits", "memory-mib"],
            vec!["limits", "max-concurrency"],
            vec!["config", "key", "default"],
        ])
        .prop_map(|path| path.into_iter().map(String::from).collect()),
        (input, constraint).prop_map(|(i, c)| vec!["inputs".to_string(), i.to_string(), c.to_string()]),
    ]
}

/// A JSON scalar, with the strings a tool's docs and manifest hold.
fn json_leaf() -> impl Strategy<Value = serde_json::Value> {
    prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<String>().prop_map(serde_json::Value::from),
        prop::sample::select(vec!["", " ", "Docs.", "echo", "say-it-back", "call", "input", "output", "text", "x"])
            .prop_map(serde_json::Value::from),
        (1usize..3000).prop_map(|n| serde_json::Value::from("d".repeat(n))),
        // Long texts that end in a syntax error, for the parsers behind the
        // manifest's fields (a column past 65 535 once made one panic).
        (1usize..70_000).prop_map(|n| serde_json::Value::from(format!("{})", "d".repeat(n)))),
    ]
}

/// A manifest's top-level keys, and one it does not have.
const MANIFEST_KEYS: [&str; 11] = [
    "world",
    "tags",
    "toolkit",
    "img",
    "allowed-hosts",
    "inputs",
    "config",
    "secrets",
    "limits",
    "confirmation",
    "bogus",
];

/// JSON shaped like an embedded manifest, with values of any type.
fn manifest_json() -> impl Strategy<Value = serde_json::Value> {
    let nested = ["max-length", "min", "max", "private", "required", "when", "text", "mood"];
    let key = prop::sample::select([MANIFEST_KEYS.as_slice(), nested.as_slice()].concat());
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<f64>().prop_map(serde_json::Value::from),
        any::<String>().prop_map(serde_json::Value::from),
        prop::sample::select(vec!["echo", "book-flight", "say-it-back", "Not A Name", "", "a", "api.example.com"])
            .prop_map(serde_json::Value::from),
    ];
    let value = leaf.prop_recursive(3, 32, 5, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
            prop::collection::vec((key.clone(), inner), 0..4).prop_map(|kv| {
                serde_json::Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
            }),
        ]
    });
    let key = prop::sample::select(MANIFEST_KEYS.to_vec());
    prop::collection::vec((key, value), 0..6)
        .prop_map(|kv| serde_json::Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect()))
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        2 => (any::<bool>(), edits()).prop_map(|(outer, edits)| Change::Bytes { outer, edits }),
        1 => (any::<usize>(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(at, bytes)| Change::Insert { at, bytes }),
        1 => any::<usize>().prop_map(Change::Truncate),
        3 => prop::option::weighted(0.9, section_data()).prop_map(Change::Docs),
        3 => prop::option::weighted(0.9, section_data()).prop_map(Change::Manifest),
        1 => (
            prop_oneof![
                Just(manifest::SECTION_NAME.to_string()),
                Just(PackageMetadata::SECTION_NAME.to_string()),
                "[a-z-]{0,12}",
            ],
            prop::collection::vec(any::<u8>(), 0..64)
        )
            .prop_map(|(name, data)| Change::Extra { name, data }),
    ]
}

/// Overwrites bytes at the `edits` positions, counted within the `within`
/// ranges laid end to end (`None`: the whole of `bytes`).
fn edit(bytes: &mut [u8], edits: &[(usize, u8)], within: Option<&[Range<usize>]>) {
    let whole = [Range { start: 0, end: bytes.len() }];
    let within = within.unwrap_or(&whole);
    let total: usize = within.iter().map(|r| r.len()).sum();
    if total == 0 {
        return;
    }
    for (at, byte) in edits {
        let mut at = at % total;
        for range in within {
            if at < range.len() {
                bytes[range.start + at] = *byte;
                break;
            }
            at -= range.len();
        }
    }
}

fn new_section_data(original: Option<&[u8]>, data: &SectionData) -> Vec<u8> {
    let original = original.unwrap_or_default();
    match data {
        SectionData::Random(bytes) => bytes.clone(),
        SectionData::Edited(edits) => {
            let mut bytes = original.to_vec();
            edit(&mut bytes, edits, None);
            bytes
        }
        SectionData::Truncated(keep) => original[..keep % (original.len() + 1)].to_vec(),
        SectionData::Json(json) => serde_json::to_vec(json).unwrap_or_default(),
        SectionData::JsonEdit { pick, edit } => edit_json(original, *pick, edit),
    }
}

fn apply(original: &[u8], change: &Change) -> Vec<u8> {
    match change {
        Change::Bytes { outer, edits } => {
            let mut bytes = original.to_vec();
            let outer_sections: Vec<Range<usize>> =
                sections(original).into_iter().filter(|s| s.id != 1).map(|s| s.whole).collect();
            edit(&mut bytes, edits, outer.then_some(outer_sections.as_slice()));
            bytes
        }
        Change::Insert { at, bytes } => {
            let mut out = original.to_vec();
            let at = at % (out.len() + 1);
            out.splice(at..at, bytes.iter().copied());
            out
        }
        Change::Truncate(keep) => original[..keep % original.len().max(1)].to_vec(),
        Change::Docs(data) | Change::Manifest(data) => {
            let name = match change {
                Change::Docs(_) => PackageMetadata::SECTION_NAME,
                _ => manifest::SECTION_NAME,
            };
            let mut out = without(original, name);
            if let Some(data) = data {
                let data = new_section_data(custom_data(original, name), data);
                append_custom_section(&mut out, name, &data);
            }
            out
        }
        Change::Extra { name, data } => {
            let mut out = original.to_vec();
            append_custom_section(&mut out, name, data);
            out
        }
    }
}

/// Reads `bytes`: a tool, or a refusal with a message.
fn read_cleanly(bytes: &[u8]) -> Result<Option<ToolPackage>, TestCaseError> {
    match ToolPackage::read(bytes) {
        Ok(package) => {
            // Whatever is accepted is a tool a deploy can serve.
            prop_assert!(package.signature.check_rules().is_ok(), "{:?}", package.signature.check_rules());
            prop_assert_eq!(&package.sha256, &sha256_hex(bytes));
            prop_assert!(package.manifest.world.is_none());
            Ok(Some(package))
        }
        Err(e) => {
            prop_assert!(!e.to_string().trim().is_empty(), "an empty message for {e:?}");
            Ok(None)
        }
    }
}

/// What a tool accepts, apart from what its docs and manifest say about it.
fn input_shape(signature: &Signature) -> Vec<(String, bool, &'static str)> {
    signature.inputs.iter().map(|p| (p.id.clone(), p.required, p.ty.a2t_name())).collect()
}

fn tool_index() -> impl Strategy<Value = usize> {
    0..packed_tools().len()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_bytes_are_refused_cleanly(
        header in prop::sample::select(vec![
            Vec::new(),
            b"\0asm".to_vec(),
            b"\0asm\x0d\0\x01\0".to_vec(),
            b"\0asm\x01\0\0\0".to_vec(),
        ]),
        rest in prop::collection::vec(any::<u8>(), 0..2048),
    ) {
        let bytes = [header, rest].concat();
        prop_assert!(read_cleanly(&bytes)?.is_none(), "random bytes made a tool");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Every change to a real packed tool is read or refused cleanly; a
    /// strict prefix is always refused; docs and the manifest never change
    /// what a tool accepts.
    #[test]
    fn a_changed_tool_is_read_or_refused_cleanly(
        tool in tool_index(),
        changes in prop::collection::vec(change(), 1..3),
    ) {
        let PackedTool { name, bytes: original } = &packed_tools()[tool];
        let before = ToolPackage::read(original).map_err(|e| TestCaseError::fail(format!("{name}: {e}")))?;
        let mut bytes = original.clone();
        for change in &changes {
            bytes = apply(&bytes, change);
        }
        let after = read_cleanly(&bytes)?;
        if let [Change::Truncate(_)] = changes.as_slice() {
            prop_assert!(after.is_none(), "a truncated component was accepted");
        }
        // Custom sections describe a tool; they never change what it accepts.
        let sections_only =
            changes.iter().all(|c| matches!(c, Change::Docs(_) | Change::Manifest(_) | Change::Extra { .. }));
        if let (Some(after), true) = (&after, sections_only) {
            prop_assert_eq!(input_shape(&after.signature), input_shape(&before.signature));
        }
    }

    /// Any value in any field of a real tool's manifest: read or refused
    /// cleanly, and what the tool accepts keeps its shape.
    #[test]
    fn any_manifest_field_is_read_or_refused_cleanly(
        tool in tool_index(),
        sets in prop::collection::vec((manifest_path(), prop_oneof![
            3 => json_leaf(),
            1 => (60_000usize..70_000).prop_map(|n| serde_json::Value::from(format!("{})", "d".repeat(n)))),
        ]), 1..4),
    ) {
        let original = &packed_tools()[tool].bytes;
        let before = ToolPackage::read(original).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let mut bytes = original.clone();
        for (path, value) in sets {
            let data = SectionData::JsonEdit { pick: 0, edit: JsonEdit::Set(path, value) };
            bytes = apply(&bytes, &Change::Manifest(Some(data)));
        }
        if let Some(after) = read_cleanly(&bytes)? {
            prop_assert_eq!(input_shape(&after.signature), input_shape(&before.signature));
        }
    }

    /// Every strict prefix of a real packed tool is refused.
    #[test]
    fn a_truncated_tool_is_refused(tool in tool_index(), keep in any::<usize>()) {
        let original = &packed_tools()[tool].bytes;
        prop_assert!(read_cleanly(&original[..keep % original.len()])?.is_none());
    }
}

/// A deploy compiles only what [`ToolPackage::read`] accepted; a changed
/// tool that still reads is compiled and linked or refused cleanly too.
mod deploy {
    use super::*;
    use crate::runtime::{Runtime, RuntimeConfig};

    fn runtime() -> &'static Runtime {
        static RUNTIME: OnceLock<Runtime> = OnceLock::new();
        RUNTIME.get_or_init(|| {
            Runtime::new(RuntimeConfig { pooling: false, ..RuntimeConfig::default() }).expect("a runtime starts")
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        #[test]
        fn a_changed_tool_that_reads_is_loaded_or_refused_cleanly(
            tool in tool_index(),
            change in prop_oneof![
                (Just(true), edits()).prop_map(|(outer, edits)| Change::Bytes { outer, edits }),
                prop::option::of(section_data()).prop_map(Change::Docs),
                prop::option::of(section_data()).prop_map(Change::Manifest),
            ],
        ) {
            let bytes = apply(&packed_tools()[tool].bytes, &change);
            if let Some(package) = read_cleanly(&bytes)?
                && let Err(e) = runtime().load(&bytes, &package.sha256)
            {
                prop_assert!(!e.to_string().trim().is_empty());
            }
        }
    }
}

/// Components built from generated WIT worlds: the derivation gives the
/// signature the tool contract implies, or names what breaks it; a packed
/// tool reads back to the same signature.
mod generated {
    use super::*;
    use wit_component::{ComponentEncoder, StringEncoding, dummy_module, embed_component_metadata};
    use wit_parser::{ManglingAndAbi, WorldId};

    const PLINTH_TOOL: &str = include_str!("../../../wit/tool.wit");
    const WASI_CONFIG: &str = include_str!("../../../wit/deps/config/store.wit");
    const WASI_CONFIG_WORLD: &str = include_str!("../../../wit/deps/config/world.wit");

    /// A WIT type, written as WIT.
    fn wit_type(defs: &Defs) -> impl Strategy<Value = String> + use<> {
        let mut leaves: Vec<String> =
            ["string", "bool", "u8", "u16", "u32", "u64", "s8", "s16", "s32", "s64", "f32", "f64", "char"]
                .map(String::from)
                .to_vec();
        leaves.extend(defs.enums.iter().map(|e| e.name.clone()));
        leaves.extend(["point", "shape", "perms"].map(String::from));
        prop::sample::select(leaves).prop_recursive(3, 8, 2, |inner| {
            prop_oneof![
                inner.clone().prop_map(|t| format!("option<{t}>")),
                inner.clone().prop_map(|t| format!("list<{t}>")),
                (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("tuple<{a}, {b}>")),
                (inner.clone(), inner).prop_map(|(a, b)| format!("result<{a}, {b}>")),
            ]
        })
    }

    #[derive(Debug, Clone)]
    struct EnumDef {
        name: String,
        cases: Vec<String>,
        documented: bool,
    }

    #[derive(Debug, Clone)]
    struct Defs {
        enums: Vec<EnumDef>,
    }

    #[derive(Debug, Clone)]
    struct Field {
        name: String,
        ty: String,
        documented: bool,
    }

    #[derive(Debug, Clone)]
    struct World {
        defs: Defs,
        described: bool,
        inputs: Vec<Field>,
        outputs: Option<Vec<Field>>,
    }

    fn defs() -> impl Strategy<Value = Defs> {
        prop::collection::vec(
            (prop::collection::btree_set("[a-z]{1,5}(-[a-z]{1,3})?", 1..4), prop::bool::weighted(0.8)),
            0..3,
        )
        .prop_map(|enums| Defs {
            enums: enums
                .into_iter()
                .enumerate()
                .map(|(i, (cases, documented))| EnumDef {
                    name: format!("choice{i}"),
                    cases: cases.into_iter().collect(),
                    documented,
                })
                .collect(),
        })
    }

    fn fields(defs: &Defs, simple: bool) -> impl Strategy<Value = Vec<Field>> + use<> {
        // Mostly types inputs may have, so that many worlds are valid tools.
        let mut simple_types: Vec<String> =
            ["string", "bool", "u8", "s16", "u32", "s64", "option<string>", "option<u64>"].map(String::from).to_vec();
        for e in &defs.enums {
            simple_types.push(e.name.clone());
            simple_types.push(format!("option<{}>", e.name));
        }
        let ty = if simple {
            prop_oneof![6 => prop::sample::select(simple_types), 1 => wit_type(defs)].boxed()
        } else {
            wit_type(defs).boxed()
        };
        prop::collection::btree_map("[a-z]{1,6}(-[a-z]{1,4})?", (ty, prop::bool::weighted(0.95)), 1..5).prop_map(
            |fields| fields.into_iter().map(|(name, (ty, documented))| Field { name, ty, documented }).collect(),
        )
    }

    fn world() -> impl Strategy<Value = World> {
        defs().prop_flat_map(|defs| {
            (
                Just(defs.clone()),
                prop::bool::weighted(0.95),
                fields(&defs, true),
                prop::option::weighted(0.9, fields(&defs, false)),
            )
                .prop_map(|(defs, described, inputs, outputs)| World { defs, described, inputs, outputs })
        })
    }

    const INTS: [&str; 8] = ["u8", "u16", "u32", "u64", "s8", "s16", "s32", "s64"];

    fn doc(documented: bool, text: &str) -> String {
        if documented { format!("/// {text}\n") } else { String::new() }
    }

    /// The world as a tool package's WIT; every name `%`-escaped, so that
    /// generated names may be WIT keywords.
    fn wit(world: &World) -> String {
        let mut out = String::from("package gen:tool;\n");
        out += &doc(world.described, "A generated tool.");
        out += "world gen-tool {\n use plinth:tool/types@0.1.0.{tool-error};\n";
        out += "record point { x: f64, y: f64 }\nvariant shape { dot, circle(f64) }\nflags perms { read, write }\n";
        for e in &world.defs.enums {
            out += &format!("/// An enum.\nenum {} {{\n", e.name);
            for case in &e.cases {
                out += &doc(e.documented, "A case.");
                out += &format!("%{case},\n");
            }
            out += "}\n";
        }
        let record = |name: &str, fields: &[Field]| {
            let mut out = format!("record {name} {{\n");
            for f in fields {
                out += &doc(f.documented, "A field.");
                out += &format!("%{}: {},\n", f.name, f.ty);
            }
            out + "}\n"
        };
        out += &record("input", &world.inputs);
        match &world.outputs {
            Some(outputs) => {
                out += &record("output", outputs);
                out += "export call: func(input: input) -> result<output, tool-error>;\n";
            }
            None => out += "export call: func(input: input) -> result<_, tool-error>;\n",
        }
        out + "}\n"
    }

    /// The model: whether the world is a valid tool.
    fn is_valid_tool(world: &World) -> bool {
        let enum_named = |ty: &str| world.defs.enums.iter().find(|e| e.name == ty);
        let input_ok = |f: &Field| {
            let base = f.ty.strip_prefix("option<").and_then(|t| t.strip_suffix('>')).unwrap_or(&f.ty);
            let scalar = base == "string" || base == "bool" || INTS.contains(&base);
            f.documented && (scalar || enum_named(base).is_some_and(|e| e.documented))
        };
        let output_ok = |f: &Field| f.documented && enum_named(&f.ty).is_none_or(|e| e.documented);
        world.described && world.inputs.iter().all(input_ok) && world.outputs.iter().flatten().all(output_ok)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn a_generated_world_derives_the_signature_the_contract_implies(world in world()) {
            let text = wit(&world);
            let (component, resolve, world_id) = build_checked(&text)?;
            let derived = signature::derive(&resolve, world_id, "gen-tool", &ToolManifest::default());
            prop_assert_eq!(derived.is_ok(), is_valid_tool(&world), "{}\n{:?}", text, derived);
            let packed = pack(&component, &resolve, world_id, ToolManifest::default());
            match derived {
                Ok(signature) => {
                    prop_assert_eq!(signature.inputs.len(), world.inputs.len());
                    for (param, field) in signature.inputs.iter().zip(&world.inputs) {
                        prop_assert_eq!(&param.field, &field.name);
                        prop_assert_eq!(param.required, !field.ty.starts_with("option<"));
                    }
                    let outputs = world.outputs.clone().unwrap_or_default();
                    prop_assert_eq!(signature.outputs.len(), outputs.len());
                    for (output, field) in signature.outputs.iter().zip(&outputs) {
                        prop_assert_eq!(&output.field, &field.name);
                        let typed = match &output.ty {
                            OutputType::String => field.ty == "string",
                            OutputType::Int => INTS.contains(&field.ty.as_str()),
                            OutputType::Enum { .. } => field.ty.starts_with("choice"),
                            OutputType::Json { .. } => {
                                let ty = field.ty.as_str();
                                ty != "string" && !INTS.contains(&ty) && !ty.starts_with("choice")
                            }
                        };
                        prop_assert!(typed, "output {:?} of type `{}`", output, field.ty);
                    }
                    let (packed, package) = packed.map_err(|e| TestCaseError::fail(format!("{text}\n{e}")))?;
                    prop_assert_eq!(&package.signature, &signature);
                    let read = read_cleanly(&packed)?;
                    prop_assert_eq!(read.map(|p| p.signature), Some(signature));
                }
                Err(e) => {
                    prop_assert!(!e.to_string().trim().is_empty());
                    prop_assert!(packed.is_err(), "pack accepted what derive refused");
                    // The unpacked component, labelled with the world by hand,
                    // is refused on reading as well.
                    let mut labelled = component.clone();
                    let manifest = ToolManifest { world: Some("gen-tool".into()), ..ToolManifest::default() };
                    append_custom_section(&mut labelled, manifest::SECTION_NAME, &manifest.to_section());
                    prop_assert!(read_cleanly(&labelled)?.is_none());
                }
            }
        }
    }

    /// Builds a real component for the world (its functions trap when
    /// called). A world the generator got wrong — not valid WIT — is
    /// rejected as a test case rather than failing it.
    fn build_checked(text: &str) -> Result<(Vec<u8>, Resolve, WorldId), TestCaseError> {
        let mut resolve = Resolve::default();
        resolve.push_str("config.wit", &format!("{WASI_CONFIG_WORLD}\n{WASI_CONFIG}")).expect("the shared WIT parses");
        resolve.push_str("tool.wit", PLINTH_TOOL).expect("the shared WIT parses");
        let reject = |e: anyhow::Error| TestCaseError::reject(format!("not a valid world: {e:#}"));
        let package = resolve.push_str("world.wit", text).map_err(reject)?;
        let world = resolve.select_world(&[package], None).map_err(reject)?;
        let mut module = dummy_module(&resolve, world, ManglingAndAbi::Standard32);
        embed_component_metadata(&mut module, &resolve, world, StringEncoding::UTF8).map_err(reject)?;
        let encoder = ComponentEncoder::default().module(&module).map_err(reject)?;
        let component = encoder.validate(true).encode().map_err(reject)?;
        Ok((component, resolve, world))
    }
}
