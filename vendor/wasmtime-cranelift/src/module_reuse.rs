//! PLINTH PATCH: reuse of a whole core module's compiled functions.
//!
//! Cranelift's incremental cache is keyed on each function's IR, so every
//! function of a component is parsed, validated and translated before the
//! cache is asked: for a Python tool, whose components carry CPython as core
//! modules byte-identical to every other Python tool's, that translation is
//! most of a warm compilation. This module keys a core module's compiled
//! functions on what decides them — the module's bytes, its place in the
//! component, the types it was given, and the compiler's settings — and
//! keeps them as one cache entry (a *pack*) in the embedder's `CacheStore`.
//! When the pack is there, a function of the module is neither translated
//! nor validated: the bytes are the ones compiled (and validated) before,
//! under the same features.
//!
//! A pack is written once every defined function of the module has been
//! compiled in one compilation, so it is whole or absent. A pack that does
//! not parse is as if absent (the embedder's store checks its integrity;
//! this checks its shape). See `vendor/wasmtime/PLINTH.md`.

use cranelift_codegen::incremental_cache::CacheKvStore;
use cranelift_codegen::ir::{self, SourceLoc, UserExternalName};
use cranelift_codegen::isa::TargetIsa;
use sha2::Digest as _;
use std::borrow::Cow;
use std::sync::{Arc, Mutex};
use wasmtime_environ::{
    CacheStore, DefinedFuncIndex, EngineOrModuleTypeIndex, ModuleTranslation, ModuleTypesBuilder,
    Tunables,
};

/// What a pack starts with; a change of its layout changes the version.
const PACK_MAGIC: &[u8; 8] = b"PLNTHMP1";

/// What the compiler keeps about one module during one compilation.
pub(crate) struct ModuleReuse {
    /// The pack's key in the store.
    key: [u8; 32],
    store: Arc<dyn CacheStore>,
    /// The pack found in the store, if any: each function's entry.
    found: Option<Pack>,
    /// Entries compiled in this compilation (a function taken from the
    /// pack has none), and how many of the module's functions are done.
    recorded: Mutex<Recorded>,
    /// Whether an entry of the pack found could not be used: the pack is
    /// written again once the module is compiled.
    stale: std::sync::atomic::AtomicBool,
}

struct Pack {
    bytes: Vec<u8>,
    entries: Vec<std::ops::Range<usize>>,
}

struct Recorded {
    entries: Vec<Option<Vec<u8>>>,
    done: usize,
}

/// A function taken from a pack: its parameters, ready for
/// `try_finish_recompile`, its stencil (read in place), and what its
/// translation would have said.
pub(crate) struct Reused<'a> {
    pub params: ir::function::FunctionParameters,
    pub blob: &'a [u8],
    pub needs_gc_heap: bool,
}

/// What to tell the module once a function's code is made.
pub(crate) struct ToRecord {
    pub reuse: Arc<ModuleReuse>,
    pub index: DefinedFuncIndex,
    pub body_offset: usize,
    pub needs_gc_heap: bool,
    /// Taken from the pack (its entry is the pack's) rather than compiled.
    pub from_pack: bool,
}

/// The module's reuse state, made by the first of its functions to be
/// compiled; `None` when reuse cannot apply (no store, settings under
/// which a function's code depends on more than the module: inlining
/// across functions, debugging, CLIF output; or Cranelift's own checks of
/// its cache, which recompile every hit).
pub(crate) fn for_module(
    store: Option<&Arc<dyn CacheStore>>,
    isa: &dyn TargetIsa,
    tunables: &Tunables,
    settings: &str,
    translation: &ModuleTranslation<'_>,
    types: &ModuleTypesBuilder,
    features: u64,
) -> Option<Arc<ModuleReuse>> {
    let store = store?;
    if tunables.inlining != wasmtime_environ::Inlining::No
        || tunables.debug_native
        || tunables.debug_guest
        || isa.flags().enable_incremental_compilation_cache_checks()
    {
        return None;
    }
    let state = translation.compiler_state.get_or_init(|| {
        let key = module_key(isa, tunables, settings, translation, types, features);
        let count = translation.module.num_defined_funcs();
        let found = store
            .get(&key)
            .and_then(|bytes| Pack::parse(bytes.into_owned(), count));
        Arc::new(ModuleReuse {
            key,
            store: store.clone(),
            found,
            recorded: Mutex::new(Recorded { entries: vec![None; count], done: 0 }),
            stale: Default::default(),
        })
    });
    state.clone().downcast::<ModuleReuse>().ok()
}

impl ModuleReuse {
    /// Whether the module's functions come from a pack.
    pub(crate) fn has_pack(&self) -> bool {
        self.found.is_some()
    }

    /// Function `index` from the pack, placed at `body_offset` (a module's
    /// offset in its component differs from one component to the next).
    pub(crate) fn take(&self, index: DefinedFuncIndex, body_offset: usize) -> Option<Reused<'_>> {
        let pack = self.found.as_ref()?;
        let entry = &pack.bytes[pack.entries.get(index.as_u32() as usize)?.clone()];
        decode_entry(entry, body_offset)
    }

    /// Marks the pack found as not wholly usable.
    pub(crate) fn mark_stale(&self) {
        self.stale.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Tells the module that function `index`'s code is made: `entry` if
    /// it was compiled (and encoded), `None` if it came from the pack (or
    /// could not be encoded). The last of the module's functions writes
    /// the pack when there was none or it was stale; each function's entry
    /// is the one compiled now or, failing that, the pack's. A function
    /// with neither leaves the pack unwritten.
    pub(crate) fn record(&self, index: DefinedFuncIndex, entry: Option<Vec<u8>>) {
        let entries = {
            let mut recorded = self.recorded.lock().unwrap();
            let Some(slot) = recorded.entries.get_mut(index.as_u32() as usize) else {
                return;
            };
            if entry.is_some() {
                *slot = entry;
            }
            recorded.done += 1;
            if recorded.done != recorded.entries.len() {
                return;
            }
            std::mem::take(&mut recorded.entries)
        };
        if self.found.is_some() && !self.stale.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        let mut pack = Vec::new();
        pack.extend_from_slice(PACK_MAGIC);
        pack.extend_from_slice(&(entries.len() as u64).to_le_bytes());
        for (i, entry) in entries.iter().enumerate() {
            let entry = match (entry, &self.found) {
                (Some(entry), _) => &entry[..],
                (None, Some(found)) => &found.bytes[found.entries[i].clone()],
                (None, None) => return,
            };
            pack.extend_from_slice(&(entry.len() as u64).to_le_bytes());
            pack.extend_from_slice(entry);
        }
        self.store.insert(&self.key, pack);
    }
}

impl Pack {
    /// A pack of `count` entries, or `None` if these bytes are not one.
    fn parse(bytes: Vec<u8>, count: usize) -> Option<Pack> {
        let mut at = PACK_MAGIC.len();
        if bytes.get(..at)? != PACK_MAGIC || read_u64(&bytes, &mut at)? != count as u64 {
            return None;
        }
        let mut entries = Vec::with_capacity(count);
        for _ in 0..count {
            let len = usize::try_from(read_u64(&bytes, &mut at)?).ok()?;
            let end = at.checked_add(len).filter(|end| *end <= bytes.len())?;
            entries.push(at..end);
            at = end;
        }
        (at == bytes.len()).then_some(Pack { bytes, entries })
    }
}

fn read_u64(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let value = u64::from_le_bytes(bytes.get(*at..*at + 8)?.try_into().ok()?);
    *at += 8;
    Some(value)
}

fn read_u32(bytes: &[u8], at: &mut usize) -> Option<u32> {
    let value = u32::from_le_bytes(bytes.get(*at..*at + 4)?.try_into().ok()?);
    *at += 4;
    Some(value)
}

/// One function's entry: whether it needs a GC heap, its base source
/// location relative to its body, the names its relocations refer to (in
/// their order), then Cranelift's cached stencil (`blob`).
pub(crate) fn encode_entry(
    params: &ir::function::FunctionParameters,
    body_offset: usize,
    needs_gc_heap: bool,
    blob: &[u8],
) -> Option<Vec<u8>> {
    let names = params.user_named_funcs();
    let mut entry = Vec::with_capacity(14 + names.len() * 8 + blob.len());
    entry.push(u8::from(needs_gc_heap));
    let base = params.base_srcloc();
    if base.is_default() {
        entry.push(0);
        entry.extend_from_slice(&0u32.to_le_bytes());
    } else {
        entry.push(1);
        let delta = base.bits().checked_sub(u32::try_from(body_offset).ok()?)?;
        entry.extend_from_slice(&delta.to_le_bytes());
    }
    entry.extend_from_slice(&u32::try_from(names.len()).ok()?.to_le_bytes());
    for (_, name) in names.iter() {
        entry.extend_from_slice(&name.namespace.to_le_bytes());
        entry.extend_from_slice(&name.index.to_le_bytes());
    }
    entry.extend_from_slice(blob);
    Some(entry)
}

fn decode_entry(entry: &[u8], body_offset: usize) -> Option<Reused<'_>> {
    let mut at = 0;
    let needs_gc_heap = match *entry.first()? {
        0 => false,
        1 => true,
        _ => return None,
    };
    let has_base = *entry.get(1)?;
    at += 2;
    let delta = read_u32(entry, &mut at)?;
    let mut params = ir::function::FunctionParameters::new();
    match has_base {
        0 => {}
        1 => {
            let base = u32::try_from(body_offset).ok()?.checked_add(delta)?;
            params.ensure_base_srcloc(SourceLoc::new(base));
        }
        _ => return None,
    }
    let names = read_u32(entry, &mut at)?;
    for i in 0..names {
        let namespace = read_u32(entry, &mut at)?;
        let index = read_u32(entry, &mut at)?;
        // Declared in their recorded order, so each gets its recorded
        // reference; a repeated name would not, and is no entry of ours.
        let reference = params.ensure_user_func_name(UserExternalName { namespace, index });
        if reference.as_u32() != i {
            return None;
        }
    }
    Some(Reused { params, blob: entry.get(at..)?, needs_gc_heap })
}

/// Wraps the embedder's store for one function's compilation and keeps
/// the value Cranelift read or wrote for it: the stencil a pack entry holds.
pub(crate) struct Recording<'a> {
    pub store: &'a dyn CacheStore,
    pub got: std::cell::RefCell<Option<Vec<u8>>>,
    pub inserted: Option<Vec<u8>>,
}

impl CacheKvStore for Recording<'_> {
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        let value = self.store.get(key)?;
        *self.got.borrow_mut() = Some(value.to_vec());
        Some(value)
    }
    fn insert(&mut self, key: &[u8], val: Vec<u8>) {
        self.inserted = Some(val.clone());
        self.store.insert(key, val);
    }
}

/// The sha256 of a module's bytes less the contents of its data segments:
/// what its memories start with is not in its code, and it is what differs
/// between two JavaScript tools (StarlingMonkey's code and the snapshot of
/// each tool's own heap are one module, and the snapshot's segments lie at
/// other addresses). A segment's place in the section, its kind and its
/// memory stay; not its offset, which only instantiation reads. Every other
/// section is taken whole. Bytes that do not parse are taken whole too.
fn code_digest(wasm: &[u8]) -> [u8; 32] {
    let whole = || sha2::Sha256::digest(wasm).into();
    let mut hasher = sha2::Sha256::new();
    for payload in wasmparser::Parser::new(0).parse_all(wasm) {
        let Ok(payload) = payload else { return whole() };
        match payload {
            wasmparser::Payload::DataSection(reader) => {
                hasher.update([0xd0]);
                hasher.update(reader.count().to_le_bytes());
                for data in reader {
                    let Ok(data) = data else { return whole() };
                    match data.kind {
                        wasmparser::DataKind::Passive => hasher.update([0]),
                        wasmparser::DataKind::Active { memory_index, .. } => {
                            hasher.update([1]);
                            hasher.update(memory_index.to_le_bytes());
                        }
                    }
                }
            }
            // The code section comes whole with its start; its entries
            // (and the module's end) add nothing to hash.
            wasmparser::Payload::CodeSectionEntry(_) | wasmparser::Payload::End(_) => {}
            other => match other.as_section() {
                Some((id, range)) => {
                    let Some(bytes) = wasm.get(range) else { return whole() };
                    hasher.update([id]);
                    hasher.update((bytes.len() as u64).to_le_bytes());
                    hasher.update(bytes);
                }
                // The header: its version.
                None => hasher.update(format!("{other:?}").as_bytes()),
            },
        }
    }
    hasher.finalize().into()
}

/// The key of a module's pack: everything a function's compiled code
/// depends on besides its own bytes.
fn module_key(
    isa: &dyn TargetIsa,
    tunables: &Tunables,
    settings: &str,
    translation: &ModuleTranslation<'_>,
    types: &ModuleTypesBuilder,
    features: u64,
) -> [u8; 32] {
    struct Sha256Hasher(sha2::Sha256);
    impl std::hash::Hasher for Sha256Hasher {
        fn finish(&self) -> u64 {
            unreachable!("only written to")
        }
        fn write(&mut self, bytes: &[u8]) {
            self.0.update(bytes);
        }
    }
    use std::hash::Hash as _;

    let mut hasher = Sha256Hasher(sha2::Sha256::new());
    let mut field = |bytes: &[u8]| {
        hasher.0.update((bytes.len() as u64).to_le_bytes());
        hasher.0.update(bytes);
    };
    field(PACK_MAGIC);
    field(env!("CARGO_PKG_VERSION").as_bytes());
    // The vendored sources themselves (build.rs): a patch to the copies of
    // this crate or wasmtime-environ changes the key, so that no pack
    // compiled before it is used after it.
    field(env!("PLINTH_VENDORED_SOURCES").as_bytes());
    field(isa.name().as_bytes());
    field(isa.triple().to_string().as_bytes());
    field(isa.flags().to_string().as_bytes());
    field(format!("{tunables:?}").as_bytes());
    field(settings.as_bytes());
    field(&features.to_le_bytes());
    let module = &translation.module;
    field(&module.module_index.as_u32().to_le_bytes());
    field(&code_digest(translation.wasm));
    // The module as wasmtime understood it: its imports, entities, and the
    // component-wide indices its types were interned at (which its code
    // carries), then those types themselves. Not what its memories are
    // initialised with (`memory_initialization`, `runtime_data`): where the
    // data lies in the module, never in its code. Every other field of
    // `Module` is here: a field added by a later wasmtime goes here too.
    let described = postcard::to_allocvec(&(
        (&module.strings, &module.name, &module.initializers, &module.exports),
        (&module.startup, &module.table_initialization, &module.passive_elements),
        (&module.types, &module.num_imported_funcs, &module.num_imported_tables),
        (&module.num_imported_memories, &module.num_imported_globals, &module.num_imported_tags),
        (&module.needs_gc_heap, &module.num_escaped_funcs, &module.functions, &module.tables),
        (&module.memories, &module.globals, &module.global_initializers, &module.tags),
    ));
    field(&described.unwrap_or_default());
    field(format!("{:?}", translation.known_imported_functions).as_bytes());
    field(format!("{:?}", translation.runtime_data_map).as_bytes());
    // How many runtime data there are places a passive segment's length in
    // the vmctx, which `memory.init` and `data.drop` read; the passive
    // segments are the last of them (`finalize_memory_init`).
    if translation.runtime_data_map.values().any(Option::is_some) {
        field(&(module.runtime_data.len() as u64).to_le_bytes());
    }
    for (_, ty) in translation.module.types.iter() {
        let text = match ty {
            EngineOrModuleTypeIndex::Module(index) => format!("{index:?} {:?}", types[*index]),
            other => format!("{other:?}"),
        };
        field(text.as_bytes());
    }
    isa.flags().hash(&mut hasher);
    isa.isa_flags_hash_key().hash(&mut hasher);
    hasher.0.finalize().into()
}
