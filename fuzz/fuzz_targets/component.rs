//! Components as a tenant uploads them, through the path of `plinth
//! inspect` and of a deploy: `ToolPackage::read` (top-level sections, the
//! embedded manifest, WIT decoding, signature derivation), then the
//! runtime's loader (compilation and linking against the host's
//! capabilities).
//!
//! Inputs that start with the Wasm magic are taken as they are: the seeds
//! are the real example tools and fixtures, which libFuzzer mutates. Any
//! other input drives a generator, one of:
//! - a tool-shaped world of arbitrary types (`tool_wit.rs`) with
//!   arbitrary manifest constraints, built by `wit_component::dummy_module`
//!   and packed with `plinth::package::pack` (what `plinth pack` does), then
//!   read back — and read again with bytes of it changed;
//! - an arbitrary WIT package from `wit-smith`, one of its worlds built by
//!   `dummy_module` and given a manifest section naming it.
//!
//! Properties: no panic in Plinth (a panic inside the WIT decoder, which
//! the host catches and refuses, is let through); what `pack` accepts reads
//! back with the signature `pack` derived; every refusal is a
//! `PackageError` or `LoadError` with a message. libFuzzer's `-timeout`
//! and `-rss_limit_mb` bound time and memory.
#![no_main]

#[path = "common.rs"]
mod common;
#[path = "tool_wit.rs"]
mod tool_wit;

use arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use plinth::manifest::{SECTION_NAME, ToolManifest};
use plinth::package::{self, ToolPackage};
use plinth::runtime::{Runtime, RuntimeConfig};
use sha2::Digest;
use std::sync::OnceLock;
use wit_component::{ComponentEncoder, StringEncoding, dummy_module, embed_component_metadata};
use wit_parser::{ManglingAndAbi, Resolve, WorldId};

fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| Runtime::new(RuntimeConfig { pooling: false, ..Default::default() }).unwrap())
}

fuzz_target!(|data: &[u8]| {
    common::tolerate_caught_panics_in(&["/wit-parser-0.", "/wit-component-0.", "/wasmparser-0."]);
    if data.starts_with(b"\0asm") {
        // Compiling a whole real tool takes a large part of a second in
        // this instrumented build: one input in eight (the same ones every
        // run) is compiled, the rest stop after `plinth inspect`'s part.
        let compile = sha2::Sha256::digest(data)[0] % 8 == 0;
        read_and_load(data, compile);
        return;
    }
    let mut u = Unstructured::new(data);
    let _ = if u.ratio(3, 4).unwrap_or(true) { tool_shaped(&mut u) } else { smith(&mut u) };
});

/// `plinth inspect`, then a deploy's load.
fn read_and_load(bytes: &[u8], compile: bool) -> Option<ToolPackage> {
    let package = match ToolPackage::read(bytes) {
        Ok(package) => package,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return None;
        }
    };
    assert_eq!(package.sha256, plinth::digest::sha256_hex(bytes));
    let _ = plinth::signature::a2t::signature_json(None, 1, Some(1), &package.signature);
    let _ = plinth::signature::schema::input_schema(&package.signature);
    let _ = plinth::signature::schema::output_schema(&package.signature);
    if !compile {
        return Some(package);
    }
    if let Err(e) = runtime().load(bytes, &package.sha256) {
        assert!(!e.to_string().is_empty());
    }
    Some(package)
}

fn build(resolve: &Resolve, world: WorldId) -> Option<Vec<u8>> {
    let mut module = dummy_module(resolve, world, ManglingAndAbi::Standard32);
    embed_component_metadata(&mut module, resolve, world, StringEncoding::UTF8).ok()?;
    ComponentEncoder::default().module(&module).ok()?.validate(true).encode().ok()
}

fn tool_shaped(u: &mut Unstructured) -> Result<()> {
    let tool = tool_wit::Tool::arbitrary(u)?;
    let mut resolve = tool_wit::base();
    let Ok(pkg) = resolve.push_str("world.wit", &tool.wit()) else { return Ok(()) };
    let Ok(world) = resolve.select_world(&[pkg], None) else { return Ok(()) };
    let Some(component) = build(&resolve, world) else { return Ok(()) };
    let manifest = tool.manifest(u)?;
    let (packed, package) = match package::pack(&component, &resolve, world, manifest) {
        Ok(packed) => packed,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return Ok(());
        }
    };
    let read = read_and_load(&packed, true).expect("what `plinth pack` made must read back");
    assert_eq!(read.signature, package.signature);
    assert_eq!(read.manifest, package.manifest);
    // A tenant's upload is not always what `pack` made.
    let mut changed = packed.clone();
    for _ in 0..u.int_in_range(1..=4)? {
        let at = u.choose_index(changed.len())?;
        match u.int_in_range(0..=2)? {
            0 => changed[at] = u.arbitrary()?,
            1 => changed.truncate(at.max(8)),
            _ => changed.insert(at, u.arbitrary()?),
        }
    }
    let _ = ToolPackage::read(&changed);
    Ok(())
}

fn smith(u: &mut Unstructured) -> Result<()> {
    let config: wit_smith::Config = u.arbitrary()?;
    let wasm = wit_smith::smith(&config, u)?;
    let Ok(wit_parser::decoding::DecodedWasm::WitPackage(resolve, pkg)) = wit_parser::decoding::decode(&wasm) else {
        return Ok(());
    };
    let worlds: Vec<WorldId> = resolve.packages[pkg].worlds.values().copied().collect();
    if worlds.is_empty() {
        return Ok(());
    }
    let world = worlds[u.choose_index(worlds.len())?];
    let Some(mut component) = build(&resolve, world) else { return Ok(()) };
    let manifest = ToolManifest { world: Some(resolve.worlds[world].name.clone()), ..Default::default() };
    package::append_custom_section(&mut component, SECTION_NAME, &manifest.to_section());
    let _ = read_and_load(&component, true);
    Ok(())
}
