//! The sandbox: wasmtime with the component model.
//!
//! A component is compiled once (by the sha256 of its bytes, in a worker
//! process, mapped from disk: [`compiled`]) and pre-instantiated once
//! ([`Runtime::load`]), shared by every version with those bytes while any
//! holds it; every invocation gets a fresh [`Store`] (the protocol is stateless, and so
//! no call can see another's memory), bounded in time (epoch deadline plus a
//! wall-clock timeout) and memory. Instances come from the pooling allocator.
//!
//! A tool gets only: `plinth:tool/log`, `wasi:config/store` (its own config),
//! `wasi:http/outgoing-handler` (its declared hosts, see [`outbound`]), and the
//! WASI pieces the Rust standard library links against, with no preopened
//! directories, no environment, no arguments and no network sockets.

mod compiled;
#[cfg(test)]
mod engine_advisories;
pub mod outbound;
mod redact;
#[cfg(test)]
mod slot_isolation;
mod teardown;
mod tool_log;

pub use compiled::run_worker;
pub use redact::Redactor;
pub use teardown::{after_answer, drop_after_answer, drop_held};
pub use tool_log::{CallLines, LogBudget, LogLabels, LogLine};
use tool_log::{LogLevel, ToolLog};

use crate::manifest::ToolManifest;
use outbound::OutboundPolicy;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::Poll;
use std::time::Duration;
use wasmtime::component::{Component, ComponentExportIndex, InstancePre, Linker, ResourceTable, Val, WasmStr};
use wasmtime::{
    Engine, InstanceAllocationStrategy, PoolingAllocationConfig, ResourceLimiter, Store, Trap, UpdateDeadline,
};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_config::{WasiConfig, WasiConfigVariables};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

/// How often the epoch advances: deadlines are accurate to about one tick,
/// and a running tool yields its thread once per tick.
const EPOCH_TICK: Duration = Duration::from_millis(2);
/// A tick that comes this soon after a call began does not make it yield.
/// Ticks are the epoch thread's, not the call's: one lands inside a
/// 50 µs echo one time in forty, and a yield there sends the rest of the
/// call from the thread that received it to the tool threads — behind
/// whatever they run (`host::executors`). A call that has run this little
/// gets to its next tick instead: it holds its thread at most this much
/// longer than one tick.
const FIRST_YIELD_AFTER: Duration = Duration::from_micros(500);
/// How much of a tool's stdout/stderr is kept for the logs, per call.
const CAPTURED_OUTPUT_BYTES: usize = 16 * 1024;
/// Table elements one instance may have, over all its tables.
const MAX_TABLE_ELEMENTS: usize = 100_000;
/// Memories one component (and one core module) may define: enough for
/// toolchains that give each core instance its own, while the limiter keeps
/// their sum within the instance's quota.
const MAX_MEMORIES_PER_COMPONENT: u32 = 4;
/// Core instances one component may have: a Rust tool has a few, a Python
/// tool built by componentize-py about 14.
const MAX_CORE_INSTANCES_PER_COMPONENT: u32 = 16;

/// Compilations that may run at once, whoever asks for them: each takes a
/// core and, for a Python or JavaScript tool, hundreds of MiB.
pub const COMPILES_AT_ONCE: usize = 2;
/// How long a failed compilation is answered from memory before the same
/// bytes are compiled again.
pub const RECOMPILE_AFTER: Duration = Duration::from_secs(60);
/// How long a deploy or a first call waits for one of the
/// [`COMPILES_AT_ONCE`] compilations by default; then it is refused
/// ([`LoadError::Busy`]).
pub const COMPILE_WAIT: Duration = Duration::from_secs(30);
/// A compile worker's deadline by default: a Python or JavaScript tool
/// (13–18 MB) compiles in about 10 s on a free core, 30 s from nothing on
/// a busy two-core machine.
pub const COMPILE_DEADLINE: Duration = Duration::from_secs(300);
/// A compile worker's `RLIMIT_DATA` by default: compiling a Python or
/// JavaScript tool from nothing peaks at about 600 MiB resident and needs
/// between 700 MB and 1 GB of data (measured with `prlimit --data`).
pub const COMPILE_MEMORY_BYTES: u64 = 4 << 30;

/// Limits applied to every invocation.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Wall-clock time an invocation may take, including its outbound calls.
    pub deadline: Duration,
    /// Linear memory one instance may grow to.
    pub max_memory_bytes: usize,
    /// Instances that may exist at once (sizes the pooling allocator).
    pub max_instances: u32,
    /// Use the pooling allocator (fast instantiation) rather than on-demand.
    pub pooling: bool,
    /// Where compiled components are cached across restarts (none: no cache).
    pub cache_dir: Option<PathBuf>,
    /// The program that compiles components in a process of its own
    /// (`plinth compile-worker`, see [`compiled`]); none, or no cache dir:
    /// they are compiled in this process.
    pub compile_worker: Option<PathBuf>,
    /// Wall-clock time a compile worker may take before it is killed (its
    /// load fails; nothing is cached).
    pub compile_deadline: Duration,
    /// A compile worker's data limit (`RLIMIT_DATA`), if any.
    pub compile_memory_bytes: Option<u64>,
    /// How long a deploy or a first call waits for a compilation slot.
    pub compile_wait: Duration,
    /// How many bytes of each linear memory and table are reset in place
    /// (copied back from the component's initial image, or zeroed) when
    /// its slot is freed, rather than handed back to the kernel. Resetting
    /// in place keeps `madvise` — and the TLB shootdowns it sends to every
    /// core running the process — off the call path. 0: hand them all back.
    pub keep_resident_bytes: usize,
    /// Which bytes those are: see [`SlotReset`].
    pub slot_reset: SlotReset,
}

/// How a freed pool slot's memories and tables are made fresh for the next
/// instance, which may be another tenant's tool. docs/sandbox.md has the
/// reasoning and the measured cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotReset {
    /// The first `keep_resident_bytes` are rewritten whatever the kernel
    /// has done with their pages (a write brings a swapped-out or migrating
    /// page back first), and the rest is handed back with
    /// `madvise(MADV_DONTNEED)`, which discards swapped-out pages too.
    /// Costs a rewrite of the whole first MiB on every call.
    Prefix,
    /// Linux's `PAGEMAP_SCAN` (6.7 and later) finds the written pages, up
    /// to `keep_resident_bytes` of them, and only those are rewritten; the
    /// rest is handed back. Written pages that are in swap or being
    /// migrated are found too, and handed back: that is the patch Plinth
    /// carries on wasmtime 48 (vendor/wasmtime/PLINTH.md), without which
    /// the next instance in the slot read them. On an older kernel wasmtime resets
    /// by prefix instead.
    Scan,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            deadline: Duration::from_secs(5),
            max_memory_bytes: 64 << 20,
            max_instances: 100,
            pooling: true,
            cache_dir: None,
            compile_worker: None,
            compile_deadline: COMPILE_DEADLINE,
            compile_memory_bytes: Some(COMPILE_MEMORY_BYTES),
            compile_wait: COMPILE_WAIT,
            keep_resident_bytes: 1 << 20,
            slot_reset: SlotReset::Scan,
        }
    }
}

/// Why a version could not be loaded into the runtime.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LoadError {
    /// Compilation failed.
    #[error("the component could not be compiled: {0}")]
    Compile(String),
    /// The server could not compile it now (its compile worker could not
    /// run or finish, the disk is full): not the component's doing, as far
    /// as the server can tell.
    #[error("the server could not compile the component now: {0}")]
    Unavailable(String),
    /// Every compilation slot stayed taken for as long as a load may wait
    /// ([`RuntimeConfig::compile_wait`]): nothing was compiled, try again.
    #[error("the server is compiling as many components as it may at once; try again in a moment")]
    Busy,
    /// The component imports something the host does not provide.
    #[error("the component needs an import the host does not provide: {0}")]
    Link(String),
    /// No `call` export.
    #[error("the component does not export `call`")]
    NoCall,
}

/// Why an invocation did not produce a value.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The deadline passed. `computing`: the tool was running its own code
    /// then (a loop, say), not waiting on a host call such as an outbound
    /// request — the same input will most likely run out of time again,
    /// where a slow backend may answer sooner next time.
    #[error("the tool did not finish within {deadline:?}{}", computing_note(.computing))]
    Timeout {
        /// The deadline it had.
        deadline: Duration,
        /// Whether it was executing its own code (not waiting) at the deadline.
        computing: bool,
    },
    /// The tool hit its memory or table limit.
    #[error("the tool ran out of memory")]
    ResourceExhausted,
    /// The tool trapped (a panic, an illegal operation, a stack overflow…).
    #[error("the tool failed while running: {0}")]
    Trapped(String),
    /// No instance slot is free.
    #[error("too many tool invocations are running")]
    Busy,
}

impl CallError {
    /// The stable code callers, metrics and traces name it by.
    pub fn code(&self) -> &'static str {
        match self {
            CallError::Timeout { .. } => "tool_timeout",
            CallError::ResourceExhausted => "tool_resource_exhausted",
            CallError::Trapped(_) => "tool_trapped",
            CallError::Busy => "busy",
        }
    }
}

fn computing_note(computing: &bool) -> &'static str {
    if *computing { "; it was still computing, and the same input would run out of time again" } else { "" }
}

/// A loaded version, ready to instantiate (cloning shares the compiled code).
#[derive(Clone)]
pub struct LoadedComponent {
    pre: InstancePre<ToolState>,
    call: ComponentExportIndex,
    describe: Option<ComponentExportIndex>,
}

/// Which of a tool's exports to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Export {
    /// `call`: the tool's work.
    Call,
    /// `describe`: the call's description for its confirmation, when the
    /// tool exports one.
    Describe,
}

impl Export {
    /// Its name, as the component exports it.
    pub fn as_str(self) -> &'static str {
        match self {
            Export::Call => "call",
            Export::Describe => "describe",
        }
    }
}

impl LoadedComponent {
    /// The pre-instantiated component (for embedders and benchmarks that
    /// call it with typed values).
    pub fn instance_pre(&self) -> &InstancePre<ToolState> {
        &self.pre
    }

    /// The index of its `call` export.
    pub fn call_export(&self) -> ComponentExportIndex {
        self.call
    }

    /// Whether it exports `describe`.
    pub fn describes(&self) -> bool {
        self.describe.is_some()
    }

    fn export(&self, export: Export) -> Option<ComponentExportIndex> {
        match export {
            Export::Call => Some(self.call),
            Export::Describe => self.describe,
        }
    }
}

/// Everything one invocation needs besides its input.
pub struct CallSetup {
    /// Wall-clock time the invocation may take (capped by the runtime's).
    pub deadline: Duration,
    /// Linear memory the instance may use (capped by the runtime's).
    pub max_memory_bytes: usize,
    /// Values the tool reads through `wasi:config/store`.
    pub config: BTreeMap<String, String>,
    /// Where the tool may send HTTP requests.
    pub outbound: OutboundPolicy,
    /// Labels for the tool's log lines.
    pub log: LogLabels,
    /// The secrets the tool declares and the operator has set.
    pub secrets: BTreeMap<String, String>,
    /// The tool's share of the log, across its calls.
    pub log_budget: Arc<LogBudget>,
    /// Other values kept out of the tool's log lines, like secrets (the
    /// `private` inputs of a confirmed call).
    pub redact: Vec<String>,
}

impl CallSetup {
    /// A call with no config, secrets or outbound access, and the runtime's
    /// own limits.
    pub fn bare(tool: &str) -> Self {
        CallSetup {
            deadline: Duration::MAX,
            max_memory_bytes: usize::MAX,
            config: BTreeMap::new(),
            outbound: OutboundPolicy::default(),
            log: LogLabels { tool: tool.to_string(), version: 1, call_id: String::new(), lines: None },
            secrets: BTreeMap::new(),
            log_budget: Arc::new(LogBudget::new()),
            redact: Vec::new(),
        }
    }
}

/// The per-invocation state inside a [`Store`].
pub struct ToolState {
    wasi: LazyWasi,
    http: WasiHttpCtx,
    table: ResourceTable,
    outbound: OutboundPolicy,
    config: WasiConfigVariables,
    limits: MemoryLimiter,
    log: ToolLog,
    secrets: BTreeMap<String, String>,
    /// Whether the call's last poll ended in a yield at an epoch tick
    /// ([`within`]). Shared with the poller: the call borrows the store
    /// while it is polled.
    yielded_at_tick: Arc<AtomicBool>,
    /// When the call's deadline passes.
    ends: std::time::Instant,
}

impl WasiView for ToolState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: self.wasi.get(), table: &mut self.table }
    }
}

/// A call's WASI context, built at the call's first WASI import. Building
/// one (its random generators seeded, its clocks and stdio boxed) and
/// dropping it is 0.4 µs of a pooled echo call's 6.8 (bench/ANALYSIS.md,
/// arm 2), and a tool that computes its answer from its input may make no
/// WASI call.
enum LazyWasi {
    /// Not built yet: the pipes its stdout and stderr will write to.
    Unbuilt([MemoryOutputPipe; 2]),
    /// Boxed: an unbuilt context should not cost every store its size.
    Built(Box<WasiCtx>),
}

impl LazyWasi {
    fn is_built(&self) -> bool {
        matches!(self, LazyWasi::Built(_))
    }

    fn get(&mut self) -> &mut WasiCtx {
        if let LazyWasi::Unbuilt([stdout, stderr]) = self {
            let ctx = WasiCtx::builder()
                .stdout(stdout.clone())
                .stderr(stderr.clone())
                .allow_tcp(false)
                .allow_udp(false)
                .allow_ip_name_lookup(false)
                .build();
            *self = LazyWasi::Built(Box::new(ctx));
        }
        match self {
            LazyWasi::Built(ctx) => ctx,
            LazyWasi::Unbuilt(_) => unreachable!("built above"),
        }
    }
}

impl WasiHttpView for ToolState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView { ctx: &mut self.http, table: &mut self.table, hooks: &mut self.outbound }
    }
}

/// Caps the instance's linear memory and tables, and remembers whether it
/// refused growth so that the resulting trap is reported as exhaustion, not
/// as a bug.
///
/// The limits are totals over the whole store: a component may define
/// several memories (multi-memory, or one per core instance), and each of
/// them is created and grown through this limiter, so their sizes are summed
/// rather than each compared with the quota. A growth that was allowed here
/// but then failed inside wasmtime stays counted: wasmtime does not say
/// which growth failed, and over-counting only errs on the safe side.
struct MemoryLimiter {
    max_memory_bytes: usize,
    max_table_elements: usize,
    memory_bytes: usize,
    table_elements: usize,
    refused: bool,
}

impl MemoryLimiter {
    fn new(max_memory_bytes: usize, max_table_elements: usize) -> Self {
        MemoryLimiter { max_memory_bytes, max_table_elements, memory_bytes: 0, table_elements: 0, refused: false }
    }

    /// Adds `desired - current` to `total` if the sum stays within `max`.
    fn grow(total: &mut usize, max: usize, current: usize, desired: usize) -> bool {
        let after = total.saturating_add(desired.saturating_sub(current));
        let allowed = after <= max;
        if allowed {
            *total = after;
        }
        allowed
    }
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(&mut self, current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        let allowed = Self::grow(&mut self.memory_bytes, self.max_memory_bytes, current, desired);
        self.refused |= !allowed;
        Ok(allowed)
    }

    fn table_growing(&mut self, current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        let allowed = Self::grow(&mut self.table_elements, self.max_table_elements, current, desired);
        self.refused |= !allowed;
        Ok(allowed)
    }
}

/// The engine, the linker with every capability, and the epoch ticker.
pub struct Runtime {
    engine: Engine,
    linker: Linker<ToolState>,
    config: RuntimeConfig,
    /// The compiled-code cache (none without a cache dir).
    code: Option<compiled::CodeCache>,
    /// Components loaded and linked, by the sha256 of their bytes, while
    /// any version holds them: tenants and versions that deploy the same
    /// bytes share one compiled and linked component.
    linked: std::sync::Mutex<std::collections::HashMap<String, std::sync::Weak<LoadedComponent>>>,
    /// Compilations running now, at most [`COMPILES_AT_ONCE`].
    compiles: compiled::Permits,
    /// Compilations that failed lately, by sha256, with their error.
    failures: std::sync::Mutex<std::collections::HashMap<String, (std::time::Instant, LoadError)>>,
    stop_ticker: Arc<AtomicBool>,
    /// The pooling allocator's live counts and sizes, for the metrics.
    pool: Option<(wasmtime::PoolingAllocatorMetrics, PoolTotals)>,
    cache_hits: AtomicU64,
    cache_misses: AtomicU64,
}

/// How many slots of each kind the pooling allocator has.
#[derive(Debug, Clone, Copy)]
struct PoolTotals {
    component_instances: u32,
    core_instances: u32,
    memories: u32,
    tables: u32,
    stacks: u32,
}

impl PoolTotals {
    /// Room for `instances` components of the largest shape allowed.
    fn for_instances(instances: u32) -> Self {
        PoolTotals {
            component_instances: instances,
            core_instances: instances.saturating_mul(MAX_CORE_INSTANCES_PER_COMPONENT),
            memories: instances.saturating_mul(2),
            tables: instances.saturating_mul(4),
            stacks: instances,
        }
    }
}

/// The pooling allocator's slots in use and their number, by kind.
#[derive(Debug, Clone, Copy)]
pub struct PoolSlots {
    in_use: [u64; 5],
    totals: PoolTotals,
}

impl PoolSlots {
    /// `(kind, in use, slots)` for component instances, core instances,
    /// memories, tables and stacks.
    pub fn kinds(&self) -> [(&'static str, u64, u64); 5] {
        let t = &self.totals;
        let [components, cores, memories, tables, stacks] = self.in_use;
        [
            ("component_instances", components, t.component_instances.into()),
            ("core_instances", cores, t.core_instances.into()),
            ("memories", memories, t.memories.into()),
            ("tables", tables, t.tables.into()),
            ("stacks", stacks, t.stacks.into()),
        ]
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.stop_ticker.store(true, Ordering::Relaxed);
    }
}

impl Runtime {
    /// Builds the engine (pooling allocator unless disabled) and the linker.
    pub fn new(config: RuntimeConfig) -> anyhow::Result<Self> {
        if config.pooling {
            tracing::info!(reset = ?config.slot_reset, "pool slots");
        }
        let mut wasm = compiled::code_config();
        let incremental = match (&config.cache_dir, &config.compile_worker) {
            (Some(dir), None) => Some(compiled::IncrementalStore::open(&dir.join("incremental"))?),
            _ => None,
        };
        if let Some(store) = incremental {
            wasm.enable_incremental_compilation(Arc::new(store))?;
        }
        let totals = PoolTotals::for_instances(config.max_instances);
        if config.pooling {
            let mut pool = PoolingAllocationConfig::new();
            // Every instance slot may hold a component of the largest shape
            // allowed: a Python component has about 14 core instances
            // (CPython, libc, the WASI adapter, shims), so core instances
            // are pooled at the per-component maximum rather than at a
            // Rust tool's handful. A slot of the pool costs address space,
            // not memory, until it is used.
            pool.total_component_instances(totals.component_instances)
                .total_core_instances(totals.core_instances)
                .total_memories(totals.memories)
                .total_tables(totals.tables)
                .total_stacks(totals.stacks)
                .max_memory_size(config.max_memory_bytes)
                .max_memories_per_component(MAX_MEMORIES_PER_COMPONENT)
                .max_memories_per_module(MAX_MEMORIES_PER_COMPONENT)
                .max_core_instances_per_component(MAX_CORE_INSTANCES_PER_COMPONENT)
                .max_tables_per_component(8)
                .linear_memory_keep_resident(config.keep_resident_bytes)
                .table_keep_resident(config.keep_resident_bytes)
                .pagemap_scan(match config.slot_reset {
                    SlotReset::Prefix => wasmtime::Enabled::No,
                    SlotReset::Scan => wasmtime::Enabled::Auto,
                });
            wasm.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        }
        let engine = Engine::new(&wasm)?;

        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
        wasmtime_wasi_config::add_to_linker(&mut linker, |s: &mut ToolState| WasiConfig::from(&s.config))?;
        // `plinth:tool/types` holds only types; components that `use` it
        // import it as an instance with nothing to call.
        linker.instance("plinth:tool/types@0.1.0")?;
        linker.instance("plinth:tool/log@0.1.0")?.func_wrap(
            "write",
            |mut store: wasmtime::StoreContextMut<'_, ToolState>, (level, message): (LogLevel, WasmStr)| {
                // Copy only what can be logged, and only when it will be:
                // not a multi-megabyte line, nor a line past the allowance.
                let (head, total) = {
                    let text = message.to_str(&store)?;
                    let log = &store.data().log;
                    let head = log.admit().map(|()| text[..text.floor_char_boundary(log.needed())].to_string());
                    (head, text.len())
                };
                let log = &mut store.data_mut().log;
                match head {
                    Ok(head) => log.write_admitted(level, &head, total),
                    Err(dropped) => log.drop_line(dropped, total),
                }
                Ok(())
            },
        )?;
        linker.instance("plinth:tool/secrets@0.1.0")?.func_wrap(
            "get",
            |store: wasmtime::StoreContextMut<'_, ToolState>, (id,): (String,)| {
                // Only declared secrets are in the map: anything else is none.
                Ok((store.data().secrets.get(&id).cloned(),))
            },
        )?;

        let stop_ticker = Arc::new(AtomicBool::new(false));
        let (ticker_engine, stop) = (engine.clone(), stop_ticker.clone());
        std::thread::Builder::new().name("plinth-epoch".into()).spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(EPOCH_TICK);
                ticker_engine.increment_epoch();
            }
        })?;

        // Compiled code of private components: the owner's only.
        let code = config.cache_dir.as_deref().map(|dir| compiled::CodeCache::open(dir, &engine)).transpose()?;
        let pool = engine.pooling_allocator_metrics().map(|live| (live, totals));
        Ok(Runtime {
            engine,
            linker,
            config,
            code,
            linked: Default::default(),
            compiles: compiled::Permits::new(COMPILES_AT_ONCE),
            failures: Default::default(),
            stop_ticker,
            pool,
            cache_hits: 0.into(),
            cache_misses: 0.into(),
        })
    }

    /// Compiled components taken from the cache, and compiled for want of
    /// a sound entry, since start.
    pub fn cache_counts(&self) -> (u64, u64) {
        (self.cache_hits.load(Ordering::Relaxed), self.cache_misses.load(Ordering::Relaxed))
    }

    /// The pooling allocator's slots now (none without the pooling allocator).
    pub fn pool_slots(&self) -> Option<PoolSlots> {
        let (live, totals) = self.pool.as_ref()?;
        Some(PoolSlots {
            in_use: [
                live.component_instances(),
                live.core_instances(),
                live.memories() as u64,
                live.tables() as u64,
                live.stacks() as u64,
            ],
            totals: *totals,
        })
    }

    /// How freed pool slots are reset (none without the pooling
    /// allocator).
    pub fn slot_reset(&self) -> Option<SlotReset> {
        self.pool.as_ref().map(|_| self.config.slot_reset)
    }

    /// The limits in force.
    pub fn config(&self) -> &RuntimeConfig {
        &self.config
    }

    /// The component whose bytes hash to `sha256`, linked against the
    /// host's capabilities: the one already linked if a version holds it,
    /// else mapped from the cache, else compiled from `bytes` (in the
    /// compile worker when there is one) and cached.
    pub fn load(&self, bytes: &[u8], sha256: &str) -> Result<Arc<LoadedComponent>, LoadError> {
        if let Some(loaded) = self.load_compiled(sha256)? {
            return Ok(loaded);
        }
        self.load_uncached(bytes, sha256)
    }

    /// [`Runtime::load`] for a caller that just found
    /// [`Runtime::load_compiled`] empty: compiles, then links.
    pub fn load_uncached(&self, bytes: &[u8], sha256: &str) -> Result<Arc<LoadedComponent>, LoadError> {
        let component = self.compile(bytes, sha256, Some(self.config.compile_wait))?;
        self.link(sha256, component)
    }

    /// Compiles these bytes into the cache unless it has them, without
    /// linking (a stored version's code, ahead of its first call: the
    /// background thread, which waits its turn for as long as it takes).
    pub fn prepare(&self, bytes: &[u8], sha256: &str) -> Result<(), LoadError> {
        if !self.is_cached(sha256) {
            self.compile(bytes, sha256, None)?;
        }
        Ok(())
    }

    /// Compiles (in the compile worker when there is one) and caches; the
    /// component is mapped from the cache when it has a cache. At most
    /// [`COMPILES_AT_ONCE`] compile at once, whoever asks (deploys, first
    /// calls, the background), and one waits for its turn at most `wait`
    /// ([`LoadError::Busy`], not remembered); the same bytes are compiled
    /// once by whoever gets there first, and a failure is remembered for
    /// [`RECOMPILE_AFTER`] rather than repeated for every call that asks.
    fn compile(&self, bytes: &[u8], sha256: &str, wait: Option<Duration>) -> Result<Component, LoadError> {
        if let Some(error) = self.recent_failure(sha256) {
            return Err(error);
        }
        let Some(_permit) = self.compiles.take(wait) else {
            tracing::warn!(sha256, "a compilation waited for its turn for too long and was refused");
            return Err(LoadError::Busy);
        };
        if let Some(component) = self.code.as_ref().and_then(|code| code.map(&self.engine, sha256)) {
            // Another caller compiled it while this one waited.
            return Ok(component);
        }
        if let Some(error) = self.recent_failure(sha256) {
            return Err(error);
        }
        self.cache_misses.fetch_add(1, Ordering::Relaxed);
        let compiled = self.compile_now(bytes, sha256);
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        match &compiled {
            Ok(_) => failures.remove(sha256),
            Err(error) => failures.insert(sha256.to_string(), (std::time::Instant::now(), error.clone())),
        };
        compiled
    }

    fn recent_failure(&self, sha256: &str) -> Option<LoadError> {
        let failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let (at, error) = failures.get(sha256)?;
        (at.elapsed() < RECOMPILE_AFTER).then(|| error.clone())
    }

    fn compile_now(&self, bytes: &[u8], sha256: &str) -> Result<Component, LoadError> {
        if let (Some(code), Some(worker)) = (&self.code, &self.config.compile_worker) {
            let limits = compiled::WorkerLimits {
                deadline: self.config.compile_deadline,
                memory_bytes: self.config.compile_memory_bytes,
            };
            code.compile_in_worker(worker, sha256, bytes, limits).map_err(|e| match e {
                compiled::WorkerError::Refused(why) => LoadError::Compile(why),
                compiled::WorkerError::Failed(why) => LoadError::Unavailable(why),
            })?;
            return code.map(&self.engine, sha256).ok_or_else(|| {
                // Never left to be found again: the next try compiles anew.
                code.remove(sha256);
                LoadError::Unavailable("the compile worker's output could not be loaded (the log says why)".into())
            });
        }
        let component = Component::new(&self.engine, bytes).map_err(|e| LoadError::Compile(format!("{e:#}")))?;
        let Some(code) = &self.code else { return Ok(component) };
        // Failing to cache is not an error: the next load compiles. Cached,
        // the code is mapped from there rather than kept in the heap.
        let stored = component
            .serialize()
            .map_err(std::io::Error::other)
            .and_then(|serialized| code.put_serialized(sha256, &serialized));
        if let Err(e) = &stored {
            tracing::warn!(error = %e, "could not cache a compiled component");
        }
        Ok(stored.ok().and_then(|()| code.map(&self.engine, sha256)).unwrap_or(component))
    }

    /// The component whose bytes hash to `sha256` if it needs no compiling:
    /// already linked, or in the cache (mapped and linked now).
    pub fn load_compiled(&self, sha256: &str) -> Result<Option<Arc<LoadedComponent>>, LoadError> {
        if let Some(loaded) = self.linked_now(sha256) {
            self.cache_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(Some(loaded));
        }
        let Some(component) = self.code.as_ref().and_then(|code| code.map(&self.engine, sha256)) else {
            return Ok(None);
        };
        self.cache_hits.fetch_add(1, Ordering::Relaxed);
        self.link(sha256, component).map(Some)
    }

    /// Whether the cache has a compilation of these bytes (no check of it).
    pub fn is_cached(&self, sha256: &str) -> bool {
        self.code.as_ref().is_some_and(|code| code.is_complete(sha256))
    }

    fn linked_now(&self, sha256: &str) -> Option<Arc<LoadedComponent>> {
        self.linked.lock().unwrap_or_else(|p| p.into_inner()).get(sha256)?.upgrade()
    }

    /// Links a compiled component, or takes the one another loader linked
    /// meanwhile, and shares it.
    fn link(&self, sha256: &str, component: Component) -> Result<Arc<LoadedComponent>, LoadError> {
        let call = component.get_export_index(None, "call").ok_or(LoadError::NoCall)?;
        let describe = component.get_export_index(None, "describe");
        let pre = self.linker.instantiate_pre(&component).map_err(|e| LoadError::Link(format!("{e:#}")))?;
        let mut linked = self.linked.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(loaded) = linked.get(sha256).and_then(std::sync::Weak::upgrade) {
            return Ok(loaded);
        }
        // The entries of components no version holds any more go here.
        linked.retain(|_, held| held.strong_count() > 0);
        let loaded = Arc::new(LoadedComponent { pre, call, describe });
        linked.insert(sha256.to_string(), Arc::downgrade(&loaded));
        Ok(loaded)
    }

    /// How many distinct components are linked now.
    pub fn linked_count(&self) -> usize {
        self.linked.lock().unwrap_or_else(|p| p.into_inner()).values().filter(|held| held.strong_count() > 0).count()
    }

    /// A fresh store set up for one invocation: its WASI context (captured
    /// stdio, nothing else; built at the call's first WASI import), memory
    /// limiter and epoch deadline. Returns the
    /// store and its stdout/stderr pipes.
    pub fn store(&self, setup: CallSetup) -> (Store<ToolState>, [MemoryOutputPipe; 2]) {
        let stdout = MemoryOutputPipe::new(CAPTURED_OUTPUT_BYTES);
        let stderr = MemoryOutputPipe::new(CAPTURED_OUTPUT_BYTES);
        let deadline = setup.deadline.min(self.config.deadline);
        let started = std::time::Instant::now();
        let ends = started + deadline;
        let state = ToolState {
            wasi: LazyWasi::Unbuilt([stdout.clone(), stderr.clone()]),
            http: WasiHttpCtx::new(),
            table: ResourceTable::new(),
            outbound: setup.outbound,
            config: setup.config.into_iter().collect(),
            limits: MemoryLimiter::new(setup.max_memory_bytes.min(self.config.max_memory_bytes), MAX_TABLE_ELEMENTS),
            log: ToolLog::new(
                setup.log,
                Redactor::new(setup.secrets.values().chain(&setup.redact).cloned()),
                setup.log_budget,
            ),
            secrets: setup.secrets,
            yielded_at_tick: Arc::new(AtomicBool::new(false)),
            ends,
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limits);
        // At every tick a running tool yields to the scheduler, so a CPU-bound
        // tool cannot hold a worker thread while other calls wait; once its
        // deadline has passed it is interrupted (a trap, reported as a timeout).
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(move |store| {
            match at_tick(std::time::Instant::now(), started, ends) {
                AtTick::Interrupt => return Ok(UpdateDeadline::Interrupt),
                AtTick::GoOn => return Ok(UpdateDeadline::Continue(1)),
                AtTick::Yield => {}
            }
            store.data().yielded_at_tick.store(true, Ordering::Relaxed);
            #[cfg(test)]
            tests::stall_if_asked(store.data(), started);
            Ok(UpdateDeadline::Yield(1))
        });
        (store, [stdout, stderr])
    }

    /// Runs `call(input)` in a fresh instance and returns the raw result value.
    pub async fn call(&self, component: &LoadedComponent, input: Val, setup: CallSetup) -> Result<Val, CallError> {
        self.run(component, Export::Call, input, setup).await
    }

    /// Runs one of the tool's exports with `input` in a fresh instance, under
    /// the same limits whichever it is, and returns the raw result value.
    pub async fn run(
        &self,
        component: &LoadedComponent,
        export: Export,
        input: Val,
        setup: CallSetup,
    ) -> Result<Val, CallError> {
        let deadline = setup.deadline.min(self.config.deadline);
        let (mut store, [stdout, stderr]) = self.store(setup);
        let (yielded_at_tick, ends) = (store.data().yielded_at_tick.clone(), store.data().ends);

        let run = Box::pin(async {
            let instance = component.pre.instantiate_async(&mut store).await?;
            let func = component
                .export(export)
                .and_then(|index| instance.get_func(&mut store, index))
                .ok_or_else(|| wasmtime::format_err!("the instance has no `{export:?}` function"))?;
            let mut results = [Val::Bool(false)];
            func.call_async(&mut store, &[input], &mut results).await?;
            let [result] = results;
            wasmtime::Result::Ok(result)
        });
        let outcome = within(ends, &yielded_at_tick, run).await;
        // A call that made no WASI import wrote nothing to its stdio.
        if store.data().wasi.is_built() {
            let log = &mut store.data_mut().log;
            log.captured("stdout", &stdout);
            log.captured("stderr", &stderr);
        }
        let denials = store.data().outbound.denials();
        store.data().log.finish(&denials);
        let result = match outcome {
            Err(DeadlinePassed { computing }) => Err(CallError::Timeout { deadline, computing }),
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(classify(&error, store.data().limits.refused, deadline)),
        };
        // The slot's reset, after the answer where the caller can wait.
        teardown::drop_after_answer(store);
        result
    }
}

/// The deadline's timer fired while the call was suspended.
struct DeadlinePassed {
    /// Where the call was when its deadline passed: running (its own code,
    /// or the host's between two waits), or suspended at an epoch tick's
    /// yield — computing, either way, and only letting others run in the
    /// second case. Otherwise it was waiting inside a host call (an
    /// outbound request, a sleep). Which timer noticed the deadline first
    /// says nothing: a tool thread starved of CPU can yield at a tick and
    /// see the timer fired before it runs again.
    computing: bool,
}

/// Polls `run` until it ends or its deadline, `ends`, passes.
///
/// A poll of a call ends at an epoch tick's yield or in a host call that
/// waits. The epoch callback sets `yielded_at_tick` when it yields, and it
/// is cleared before every poll, so after a poll it says which; a clock
/// read after each poll that did not end the call (none for a call that
/// ends in its first) notes whether the deadline passed while it ran.
///
/// The timer is set only if the call waits: one that answers in its first
/// poll, as one that computes its answer does, never needs it. A call
/// computing past its deadline is stopped by the epoch callback instead.
async fn within<T>(
    ends: std::time::Instant,
    yielded_at_tick: &AtomicBool,
    run: impl Future<Output = T>,
) -> Result<T, DeadlinePassed> {
    let mut run = std::pin::pin!(run);
    // Unconstrained by tokio's budget, as `tokio::time::timeout`'s timer:
    // a call that spends its task's budget still sees its deadline.
    let mut timer = None;
    // Where the call was when its deadline passed, once that is known.
    let mut at_deadline: Option<bool> = None;
    std::future::poll_fn(|cx| {
        let polled_before = timer.is_some();
        if polled_before && at_deadline.is_none() && std::time::Instant::now() >= ends {
            // It passed while the call was suspended where its last poll
            // left it.
            at_deadline = Some(yielded_at_tick.load(Ordering::Relaxed));
        }
        yielded_at_tick.store(false, Ordering::Relaxed);
        if let Poll::Ready(output) = run.as_mut().poll(cx) {
            return Poll::Ready(Ok(output));
        }
        if at_deadline.is_none() && std::time::Instant::now() >= ends {
            // It passed while the call ran.
            at_deadline = Some(true);
        }
        let timer =
            timer.get_or_insert_with(|| Box::pin(tokio::task::unconstrained(tokio::time::sleep_until(ends.into()))));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => {
                let computing = at_deadline.unwrap_or_else(|| yielded_at_tick.load(Ordering::Relaxed));
                Poll::Ready(Err(DeadlinePassed { computing }))
            }
            // The call gives its thread up here, at a tick as in a wait.
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}

/// What a running call does at an epoch tick.
#[derive(Debug, PartialEq, Eq)]
enum AtTick {
    /// Its deadline has passed: it stops.
    Interrupt,
    /// It began less than [`FIRST_YIELD_AFTER`] ago: it runs on.
    GoOn,
    /// It gives its thread up, and is polled again when its turn comes.
    Yield,
}

/// What a call that began at `started` and must end by `ends` does at a
/// tick at `now`.
fn at_tick(now: std::time::Instant, started: std::time::Instant, ends: std::time::Instant) -> AtTick {
    if now >= ends {
        AtTick::Interrupt
    } else if now.duration_since(started) < FIRST_YIELD_AFTER {
        AtTick::GoOn
    } else {
        AtTick::Yield
    }
}

/// Turns a wasmtime error into what the caller is told. Only a one-line
/// reason leaves the host; the full error goes to the log.
fn classify(error: &wasmtime::Error, memory_refused: bool, deadline: Duration) -> CallError {
    tracing::debug!(error = format!("{error:#}"), "tool invocation failed");
    if let Some(trap) = error.downcast_ref::<Trap>() {
        return match trap {
            Trap::Interrupt => CallError::Timeout { deadline, computing: true },
            Trap::StackOverflow => CallError::Trapped("stack overflow".into()),
            _ if memory_refused => CallError::ResourceExhausted,
            Trap::UnreachableCodeReached => {
                CallError::Trapped("the tool aborted (a panic or an unreachable instruction)".into())
            }
            // Rust keeps its stack in linear memory: overflowing it shows up
            // as an access below address 0.
            Trap::MemoryOutOfBounds => {
                CallError::Trapped("out-of-bounds memory access (often a stack overflow)".into())
            }
            Trap::IntegerDivisionByZero => CallError::Trapped("integer division by zero".into()),
            other => CallError::Trapped(other.to_string()),
        };
    }
    if memory_refused {
        return CallError::ResourceExhausted;
    }
    let text = format!("{error:#}");
    if text.contains("maximum concurrent") || text.contains("pooling allocator") {
        return CallError::Busy;
    }
    CallError::Trapped("the tool could not be run".into())
}

/// The manifest's config keys with their defaults, overlaid by the
/// operator's values.
pub fn effective_config(
    manifest: &ToolManifest,
    operator: Option<&BTreeMap<String, String>>,
) -> BTreeMap<String, String> {
    let mut config: BTreeMap<String, String> =
        manifest.config.iter().filter_map(|(k, v)| Some((k.clone(), v.default.clone()?))).collect();
    if let Some(values) = operator {
        config.extend(values.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    config
}

#[cfg(test)]
mod tests;
