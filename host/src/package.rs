//! A packed tool: one `.wasm` component that carries everything the host needs.
//!
//! `plinth pack` ([`pack`]) adds two custom sections to a built component:
//! - `package-docs`, the standard section `wit-parser` decodes, holding the
//!   doc comments of the tool's world (tool, parameter and enum descriptions);
//! - `plinth-manifest`, the checked `plinth.toml` plus the world's name (a
//!   component's binary form does not keep it).
//!
//! The host reads both back with [`ToolPackage::read`], which derives the
//! [`Signature`] from the component's real types, so a manifest or a doc
//! comment can describe a tool but never change what it accepts.

use crate::digest::sha256_hex;
use crate::manifest::{self, ManifestError, ToolManifest};
use crate::signature::{self, DeriveError, Signature};
use std::panic::AssertUnwindSafe;
use wit_parser::decoding::DecodedWasm;
use wit_parser::{PackageMetadata, Resolve, WorldId};

/// A packed tool, read and checked.
#[derive(Debug, Clone)]
pub struct ToolPackage {
    /// Lower-case hex sha256 of the component's bytes: its content address.
    pub sha256: String,
    /// The WIT world the tool was built from (kebab case).
    pub world: String,
    /// The embedded `plinth.toml`.
    pub manifest: ToolManifest,
    /// The tool's signature.
    pub signature: Signature,
}

/// Why bytes are not a usable tool.
#[derive(Debug, thiserror::Error)]
pub enum PackageError {
    /// Not a WebAssembly component at all.
    #[error("not a WebAssembly component: {0}")]
    NotAComponent(String),
    /// A component without the `plinth-manifest` section.
    #[error("the component is not packed: it has no `{}` section; run `plinth pack` on it", manifest::SECTION_NAME)]
    NotPacked,
    /// `plinth pack` was given a component it already packed.
    #[error("the component already has a `{0}` section; pack the build output, not a packed tool")]
    AlreadyPacked(&'static str),
    /// The embedded or source WIT could not be read.
    #[error("{0}")]
    Wit(String),
    /// The manifest is invalid.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// The WIT does not make a valid tool.
    #[error("{0}")]
    Signature(#[from] DeriveError),
}

impl ToolPackage {
    /// Reads a packed tool and derives its signature.
    pub fn read(bytes: &[u8]) -> Result<Self, PackageError> {
        let sections = top_level_sections(bytes)?;
        let manifest_bytes = sections.manifest.ok_or(PackageError::NotPacked)?;
        let mut manifest = ToolManifest::from_section(&manifest_bytes)?;
        let world = manifest
            .world
            .take()
            .ok_or_else(|| PackageError::Wit("the manifest section does not name the tool's world".into()))?;
        let (resolve, root) = decode_component(bytes)?;
        let signature = signature::derive(&resolve, root, &world, &manifest)?;
        Ok(ToolPackage { sha256: sha256_hex(bytes), world, manifest, signature })
    }
}

/// Packs a built component: embeds the doc comments of `world` (from the
/// tool's source WIT) and the manifest, then reads the result back to check
/// that it is a valid tool.
pub fn pack(
    component: &[u8],
    source: &Resolve,
    world: WorldId,
    mut manifest: ToolManifest,
) -> Result<(Vec<u8>, ToolPackage), PackageError> {
    let sections = top_level_sections(component)?;
    if sections.manifest.is_some() {
        return Err(PackageError::AlreadyPacked(manifest::SECTION_NAME));
    }
    if sections.has_docs {
        return Err(PackageError::AlreadyPacked(PackageMetadata::SECTION_NAME));
    }
    // The contract is checked on the source first, so errors point at the
    // vendor's own WIT.
    let world_name = source.worlds[world].name.clone();
    let declared = signature::derive(source, world, &world_name, &manifest)?;
    let (built, root) = decode_component(component)?;
    let docs = world_docs_as_root(source, world, &built, root)?;
    manifest.world = Some(world_name);

    let mut packed = component.to_vec();
    append_custom_section(&mut packed, PackageMetadata::SECTION_NAME, &docs);
    append_custom_section(&mut packed, manifest::SECTION_NAME, &manifest.to_section());
    let package = ToolPackage::read(&packed).map_err(|e| match e {
        // A docs section that does not fit the component means the WIT folder
        // is not the one the component was built from.
        PackageError::Wit(why) => {
            PackageError::Wit(format!("the WIT folder does not match the built component ({why}); rebuild the tool"))
        }
        other => other,
    })?;
    if package.signature != declared {
        return Err(PackageError::Wit(
            "the WIT folder does not match the built component (their types differ); rebuild the tool".into(),
        ));
    }
    Ok((packed, package))
}

/// Finds the tool world in a tool crate's WIT folder: the one named in the
/// manifest, or else the only world of the folder's package.
pub fn select_world(
    resolve: &Resolve,
    package: wit_parser::PackageId,
    name: Option<&str>,
) -> Result<WorldId, PackageError> {
    resolve
        .select_world(&[package], name)
        .map_err(|e| PackageError::Wit(format!("{e:#}; name the tool's world with `world = \"…\"` in plinth.toml")))
}

struct Sections {
    manifest: Option<Vec<u8>>,
    has_docs: bool,
}

/// The custom sections of the outermost component (not of nested modules).
fn top_level_sections(bytes: &[u8]) -> Result<Sections, PackageError> {
    use wasmparser::{Encoding, Parser, Payload};
    let mut sections = Sections { manifest: None, has_docs: false };
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(bytes) {
        let payload = payload.map_err(|e| PackageError::NotAComponent(e.to_string()))?;
        match payload {
            Payload::Version { encoding, .. } if depth == 0 && encoding != Encoding::Component => {
                return Err(PackageError::NotAComponent(
                    "this is a core module; build the tool for the wasm32-wasip2 target to get a component".into(),
                ));
            }
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::CustomSection(s) if depth == 0 => {
                if s.name() == manifest::SECTION_NAME {
                    if sections.manifest.is_some() {
                        return Err(PackageError::Wit(format!("more than one `{}` section", manifest::SECTION_NAME)));
                    }
                    sections.manifest = Some(s.data().to_vec());
                } else if s.name() == PackageMetadata::SECTION_NAME {
                    sections.has_docs = true;
                }
            }
            _ => {}
        }
    }
    Ok(sections)
}

/// The component's WIT (its `root` world) with the embedded docs applied.
fn decode_component(bytes: &[u8]) -> Result<(Resolve, WorldId), PackageError> {
    // The decoder validates first, but it is third-party code fed untrusted
    // bytes: a panic in it must become an error, not take the server down.
    let decoded = std::panic::catch_unwind(AssertUnwindSafe(|| wit_parser::decoding::decode(bytes)))
        .map_err(|_| PackageError::NotAComponent("the component could not be decoded".into()))?
        .map_err(|e| PackageError::Wit(format!("{e:#}")))?;
    match decoded {
        DecodedWasm::Component(resolve, world) => Ok((resolve, world)),
        DecodedWasm::WitPackage(..) => {
            Err(PackageError::NotAComponent("this is a WIT package, not an implementation of a tool".into()))
        }
    }
}

/// Encodes the docs of `world` as a `package-docs` section for a decoded
/// component's `root:component/root` world: the world is renamed `root` and
/// only the items the built component really has are kept.
fn world_docs_as_root(
    source: &Resolve,
    world: WorldId,
    built: &Resolve,
    root: WorldId,
) -> Result<Vec<u8>, PackageError> {
    let mut resolve = source.clone();
    let Some(package) = resolve.worlds[world].package else {
        return Err(PackageError::Wit("the tool's world belongs to no package".into()));
    };
    let built_world = &built.worlds[root];
    let built_imports: Vec<String> = built_world.imports.keys().map(|k| built.name_world_key(k)).collect();
    let built_exports: Vec<String> = built_world.exports.keys().map(|k| built.name_world_key(k)).collect();

    let names_import: Vec<String> = resolve.worlds[world].imports.keys().map(|k| resolve.name_world_key(k)).collect();
    let names_export: Vec<String> = resolve.worlds[world].exports.keys().map(|k| resolve.name_world_key(k)).collect();
    let w = &mut resolve.worlds[world];
    let mut i = 0;
    w.imports.retain(|_, _| {
        let keep = built_imports.contains(&names_import[i]);
        i += 1;
        keep
    });
    let mut i = 0;
    w.exports.retain(|_, _| {
        let keep = built_exports.contains(&names_export[i]);
        i += 1;
        keep
    });
    w.name = "root".into();

    let pkg = &mut resolve.packages[package];
    pkg.worlds.retain(|_, id| *id == world);
    pkg.worlds.shift_remove_index(0);
    pkg.worlds.insert("root".into(), world);
    pkg.interfaces.clear();
    pkg.docs = Default::default();
    PackageMetadata::extract(&resolve, package)
        .encode()
        .map_err(|e| PackageError::Wit(format!("encoding the docs failed: {e:#}")))
}

/// Appends a custom section (id 0) to a component or module.
pub fn append_custom_section(bytes: &mut Vec<u8>, name: &str, data: &[u8]) {
    let mut name_and_data = Vec::new();
    leb128(&mut name_and_data, name.len());
    name_and_data.extend_from_slice(name.as_bytes());
    name_and_data.extend_from_slice(data);
    bytes.push(0);
    leb128(bytes, name_and_data.len());
    bytes.extend_from_slice(&name_and_data);
}

fn leb128(out: &mut Vec<u8>, mut value: usize) {
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

#[cfg(test)]
pub(crate) mod proptests;

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use wit_component::{ComponentEncoder, StringEncoding, dummy_module, embed_component_metadata};
    use wit_parser::ManglingAndAbi;

    const PLINTH_TOOL: &str = include_str!("../../wit/tool.wit");
    const WASI_CONFIG: &str = include_str!("../../wit/deps/config/store.wit");
    const WASI_CONFIG_WORLD: &str = include_str!("../../wit/deps/config/world.wit");

    /// A real component for `world_wit` (a tool package's WIT text), whose
    /// functions trap when called: enough to exercise loading and packing.
    pub(crate) fn build(world_wit: &str) -> (Vec<u8>, Resolve, WorldId) {
        let mut resolve = Resolve::default();
        resolve.push_str("config.wit", &format!("{WASI_CONFIG_WORLD}\n{WASI_CONFIG}")).unwrap();
        resolve.push_str("tool.wit", PLINTH_TOOL).unwrap();
        let pkg = resolve.push_str("world.wit", world_wit).unwrap();
        let world = resolve.select_world(&[pkg], None).unwrap();
        let mut module = dummy_module(&resolve, world, ManglingAndAbi::Standard32);
        embed_component_metadata(&mut module, &resolve, world, StringEncoding::UTF8).unwrap();
        let component = ComponentEncoder::default().module(&module).unwrap().validate(true).encode().unwrap();
        (component, resolve, world)
    }

    pub(crate) const ECHOISH: &str = "package test:echoish;\n\
        /// Says it back.\n\
        world say-it-back {\n\
          use plinth:tool/types@0.1.0.{tool-error};\n\
          /// A mood.\n enum mood {\n /// Happy.\n happy,\n /// Very sad.\n very-sad,\n }\n\
          record input {\n /// What to say.\n text: string,\n /// How.\n mood: option<mood>,\n }\n\
          record output {\n /// What was said.\n text: string,\n }\n\
          export call: func(input: input) -> result<output, tool-error>;\n\
        }";

    #[test]
    fn pack_then_read_round_trips_docs_and_manifest() {
        let (component, resolve, world) = build(ECHOISH);
        let manifest = ToolManifest::from_toml("tags = ['t']\n[inputs.text]\nmax-length = 9").unwrap();
        let (packed, package) = pack(&component, &resolve, world, manifest).unwrap();
        assert_eq!(package.world, "say-it-back");
        assert_eq!(package.sha256, sha256_hex(&packed));
        let read = ToolPackage::read(&packed).unwrap();
        let s = &read.signature;
        assert_eq!(s.name, "say_it_back");
        assert_eq!(s.description, "Says it back.");
        assert_eq!(s.tags, ["t"]);
        assert_eq!(s.inputs[0].description, "What to say.");
        assert_eq!(s.inputs[0].ty, signature::InputType::String { max_length: Some(9) });
        let signature::InputType::Enum { values } = &s.inputs[1].ty else { panic!() };
        assert_eq!(values[1].name, "VERY_SAD");
        assert_eq!(values[1].description, "Very sad.");
        assert_eq!(s.outputs[0].description, "What was said.");
    }

    #[test]
    fn refuses_what_is_not_a_packed_tool() {
        let (component, resolve, world) = build(ECHOISH);
        assert!(matches!(ToolPackage::read(&component), Err(PackageError::NotPacked)));
        assert!(matches!(ToolPackage::read(b"not wasm"), Err(PackageError::NotAComponent(_))));
        let core_module = wat_module();
        let err = ToolPackage::read(&core_module).unwrap_err().to_string();
        assert!(err.contains("core module"), "{err}");

        let (packed, _) = pack(&component, &resolve, world, ToolManifest::default()).unwrap();
        let err = pack(&packed, &resolve, world, ToolManifest::default()).unwrap_err();
        assert!(matches!(err, PackageError::AlreadyPacked(_)), "{err}");
    }

    #[test]
    fn pack_refuses_an_undocumented_tool_naming_the_field() {
        let (component, resolve, world) = build(&ECHOISH.replace("/// What to say.\n", ""));
        let err = pack(&component, &resolve, world, ToolManifest::default()).unwrap_err().to_string();
        assert_eq!(
            err,
            "input `text`: a description is required: write the field's doc comment; it is what the LLM reads"
        );
    }

    #[test]
    fn pack_refuses_a_wit_folder_that_does_not_match_the_component() {
        let (component, _, _) = build(ECHOISH);
        let (_, other, world) =
            build(&ECHOISH.replace("/// What to say.\n text: string,", "/// What to say.\n text: u32,"));
        let err = pack(&component, &other, world, ToolManifest::default()).unwrap_err().to_string();
        assert!(err.contains("does not match the built component"), "{err}");
    }

    /// The smallest core module: the 8-byte header.
    fn wat_module() -> Vec<u8> {
        b"\0asm\x01\0\0\0".to_vec()
    }
}
