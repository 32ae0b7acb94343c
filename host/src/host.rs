//! `ToolHost`: the one core every front door calls.
//!
//! It owns the registry (signatures, versions, hashes), the runtime (compiled
//! components) and the store, and offers three things: deploy a packed
//! component, enumerate tools, invoke a version. Validation, limits and
//! storage happen here, so every protocol gets them the same way.

use crate::invocation::{self, InputError, OutputError, OutputLimits, ToolResult};
use crate::package::{PackageError, ToolPackage};
use crate::registry::{Registry, Tool, ToolVersion};
use crate::runtime::outbound::{OutboundLimits, OutboundPolicy};
use crate::runtime::{self, CallError, CallSetup, LoadError, LogBudget, LogLabels, Redactor, Runtime, RuntimeConfig};
use crate::signature::SignatureDiff;
use crate::store::{BlobStore, RegistryStore, SqliteStore, StoreError, StoredVersion};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;
use uuid::Uuid;

/// Operator-set configuration values, by tool name then key.
pub type ToolConfig = BTreeMap<String, BTreeMap<String, String>>;

/// How to open a host.
#[derive(Debug, Clone)]
pub struct HostOptions {
    /// Where the registry and blobs live.
    pub data_dir: PathBuf,
    /// Sandbox limits.
    pub runtime: RuntimeConfig,
    /// Per-tool configuration values.
    pub tool_config: ToolConfig,
    /// Limits beyond the sandbox's own.
    pub limits: HostLimits,
    /// Threads that run tools (apart from the threads serving HTTP).
    pub tool_threads: usize,
}

/// Operator limits the core enforces around each invocation.
#[derive(Debug, Clone)]
pub struct HostLimits {
    /// Invocations of one tool running at once (a tool may ask for fewer).
    pub max_concurrency_per_tool: u32,
    /// Outbound HTTP policy (shared by every call).
    pub outbound: Arc<OutboundLimits>,
    /// Output sizes passed on.
    pub output: OutputLimits,
}

impl Default for HostLimits {
    fn default() -> Self {
        HostLimits { max_concurrency_per_tool: 16, outbound: Arc::default(), output: OutputLimits::default() }
    }
}

/// Why a deploy was refused.
#[derive(Debug, thiserror::Error)]
pub enum DeployError {
    /// The bytes are not a valid packed tool.
    #[error(transparent)]
    Package(#[from] PackageError),
    /// The component does not compile or link.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// Persisting failed; nothing was registered.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The new version would break callers of the current one.
    #[error("{}", breaking_message(.tool, .current, .diff))]
    Breaking {
        /// The tool's name.
        tool: String,
        /// The version it was compared with.
        current: u32,
        /// Every change, breaking or not.
        diff: SignatureDiff,
    },
    /// `expectVersion` does not match what the deploy would produce.
    #[error("expected this deploy to {}, but it would {}", describe_version(*.expected), describe_version(*.actual))]
    UnexpectedVersion {
        /// What the caller asked for.
        expected: u32,
        /// What the deploy would produce (the existing version for
        /// identical bytes).
        actual: u32,
    },
}

fn describe_version(n: u32) -> String {
    format!("be version {n}")
}

fn breaking_message(tool: &str, current: &u32, diff: &SignatureDiff) -> String {
    let changes: Vec<&str> = diff.breaking().map(|c| c.message.as_str()).collect();
    format!(
        "this would break callers of `{tool}` version {current}: {}. A new version may only add optional inputs, add outputs, widen what inputs accept, or edit descriptions; deploy a tool with a new name for anything else",
        changes.join("; ")
    )
}

/// Why a retirement was refused.
#[derive(Debug, thiserror::Error)]
pub enum RetireError {
    /// No such tool or version.
    #[error("{0}")]
    NotFound(String),
    /// Persisting failed; nothing changed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a deploy did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deployed {
    /// The toolId.
    pub tool_id: Uuid,
    /// The tool's name.
    pub name: String,
    /// The version the bytes are deployed as.
    pub version: u32,
    /// The sha256 of the bytes.
    pub sha256: String,
    /// The sha256 of the version's signature.
    pub signature_sha256: String,
    /// The version that was current before (none for a new tool).
    pub previous_version: Option<u32>,
    /// `false` when these exact bytes were already deployed (nothing changed).
    pub created: bool,
}

/// Why an invocation did not produce outputs.
#[derive(Debug, thiserror::Error)]
pub enum InvokeError {
    /// No such tool.
    #[error("there is no tool with id {0}")]
    UnknownTool(String),
    /// The tool exists, the version does not.
    #[error("tool {tool_id} has no version {version}")]
    UnknownVersion {
        /// The toolId.
        tool_id: Uuid,
        /// The version asked for.
        version: u32,
    },
    /// The request does not fit the signature.
    #[error(transparent)]
    Input(#[from] InputError),
    /// The version (or, unpinned, every version) is retired.
    #[error("{0}")]
    Retired(String),
    /// The sandbox stopped the tool.
    #[error(transparent)]
    Call(#[from] CallError),
    /// The tool's answer does not fit its signature or the size limits.
    #[error(transparent)]
    Output(#[from] OutputError),
    /// The tool failed after the host refused one of its outbound requests.
    #[error("the tool tried to reach what it may not: {0}")]
    OutboundDenied(String),
    /// The tool, or the host, is running as many invocations as it may.
    #[error("{0}")]
    Busy(String),
}

/// The core: registry + runtime + store.
pub struct ToolHost {
    registry: Registry,
    runtime: Runtime,
    store: Box<dyn RegistryStore>,
    blobs: BlobStore,
    tool_config: ToolConfig,
    limits: HostLimits,
    /// Instance slots of the whole host (the pooling allocator's size).
    slots: Arc<tokio::sync::Semaphore>,
    /// Running invocations per tool.
    per_tool: dashmap::DashMap<Uuid, Arc<tokio::sync::Semaphore>>,
    /// Each tool's share of the log.
    log_budgets: dashmap::DashMap<Uuid, Arc<LogBudget>>,
    /// Secret values by id, as the operator stored them.
    secrets: dashmap::DashMap<String, String>,
    /// The threads tools run on (a runtime of its own; see `invoke`).
    executor: Option<tokio::runtime::Runtime>,
    /// Serializes the registry-changing step of deploys and retirements, so
    /// version numbers are assigned without races. Compilation happens
    /// before it is taken.
    changes: std::sync::Mutex<()>,
}

impl ToolHost {
    /// Opens the data dir, loads every stored version and sweeps blobs no
    /// version refers to.
    pub fn open(options: HostOptions) -> anyhow::Result<Self> {
        std::fs::create_dir_all(&options.data_dir)?;
        let store = SqliteStore::open(&options.data_dir)?;
        let blobs = BlobStore::open(&options.data_dir)?;
        let slots = Arc::new(tokio::sync::Semaphore::new(options.runtime.max_instances as usize));
        let mut runtime_config = options.runtime;
        runtime_config.cache_dir.get_or_insert_with(|| options.data_dir.join("compiled"));
        let runtime = Runtime::new(runtime_config)?;
        let host = ToolHost {
            registry: Registry::default(),
            runtime,
            store: Box::new(store),
            blobs,
            tool_config: options.tool_config,
            limits: options.limits,
            slots,
            per_tool: dashmap::DashMap::new(),
            log_budgets: dashmap::DashMap::new(),
            secrets: dashmap::DashMap::new(),
            executor: Some(
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(options.tool_threads.max(1))
                    .thread_name("plinth-tool")
                    .enable_all()
                    .build()?,
            ),
            changes: std::sync::Mutex::new(()),
        };
        for (id, value) in host.store.secrets()? {
            host.secrets.insert(id, value);
        }
        let stored = host.store.versions()?;
        let referenced = stored.iter().map(|v| v.sha256.clone()).collect();
        let swept = host.blobs.sweep(&referenced)?;
        if swept > 0 {
            tracing::info!(files = swept, "removed blobs of deploys that never committed");
        }
        for version in stored {
            // One bad version must not keep the others from being served.
            let (name, number) = (version.name.clone(), version.version);
            if let Err(e) = host.load_stored(version) {
                tracing::error!(tool = name, version = number, error = %e, "stored version could not be loaded; it is not served");
            }
        }
        Ok(host)
    }

    fn load_stored(&self, stored: StoredVersion) -> Result<(), DeployError> {
        let bytes = self.blobs.get(&stored.sha256)?;
        let component = self.runtime.load(&bytes, &stored.sha256)?;
        self.registry.insert(stored.tool_id, &stored.name.clone(), ToolVersion::from_stored(stored, component));
        Ok(())
    }

    /// Deploys a packed component.
    ///
    /// Identical bytes are a no-op that names the existing version. New bytes
    /// for a known tool name become its next version, if the signature is
    /// compatible with the current version's. `expect_version` makes the
    /// deploy fail unless it results in exactly that version. The new version
    /// is compiled before anything is written, then the blob is stored
    /// (fsynced), then the registry row committed, then it becomes current:
    /// a crash at any point leaves no version without its blob.
    pub fn deploy(&self, bytes: &[u8], expect_version: Option<u32>) -> Result<Deployed, DeployError> {
        let package = ToolPackage::read(bytes)?;
        let component = self.runtime.load(bytes, &package.sha256)?;

        let _changing = self.changes.lock().unwrap_or_else(|p| p.into_inner());
        let existing = self.registry.by_name(&package.signature.name);
        let previous_version = existing.as_ref().and_then(|t| t.current()).map(|v| v.number);
        if let Some(tool) = &existing
            && let Some(version) = tool.version_with_sha256(&package.sha256)
        {
            if let Some(expected) = expect_version.filter(|e| *e != version.number) {
                return Err(DeployError::UnexpectedVersion { expected, actual: version.number });
            }
            return Ok(Deployed {
                tool_id: tool.id,
                name: tool.name.clone(),
                version: version.number,
                sha256: version.sha256.clone(),
                signature_sha256: version.signature_sha256.clone(),
                previous_version,
                created: false,
            });
        }
        let number = existing.as_ref().map_or(1, |t| t.newest_number() + 1);
        if let Some(expected) = expect_version.filter(|e| *e != number) {
            return Err(DeployError::UnexpectedVersion { expected, actual: number });
        }
        if let Some(current) = existing.as_ref().and_then(|t| t.current()) {
            let diff = SignatureDiff::between(&current.signature, &package.signature);
            if !diff.is_compatible() {
                return Err(DeployError::Breaking {
                    tool: package.signature.name.clone(),
                    current: current.number,
                    diff,
                });
            }
        }

        let tool_id = existing.as_ref().map_or_else(Uuid::new_v4, |t| t.id);
        self.blobs.put(bytes)?;
        let stored = StoredVersion {
            tool_id,
            name: package.signature.name.clone(),
            version: number,
            sha256: package.sha256.clone(),
            signature_sha256: package.signature.sha256(),
            signature: package.signature,
            manifest: package.manifest,
            created_at: unix_now(),
            retired_at: None,
        };
        self.store.insert_version(&stored)?;
        let deployed = Deployed {
            tool_id,
            name: stored.name.clone(),
            version: number,
            sha256: stored.sha256.clone(),
            signature_sha256: stored.signature_sha256.clone(),
            previous_version,
            created: true,
        };
        self.registry.insert(tool_id, &stored.name.clone(), ToolVersion::from_stored(stored, component));
        Ok(deployed)
    }

    /// Retires a version: it can no longer be invoked (callers get `410`),
    /// it stays listed and its bytes stay stored. Unpinned callers move to
    /// the newest version that is not retired. Retiring twice is a no-op.
    pub fn retire(&self, tool_id: &str, version: u32) -> Result<(), RetireError> {
        let tool =
            self.tool(tool_id).ok_or_else(|| RetireError::NotFound(format!("there is no tool with id `{tool_id}`")))?;
        let target = tool
            .version(version)
            .ok_or_else(|| RetireError::NotFound(format!("tool `{}` has no version {version}", tool.name)))?;
        let _changing = self.changes.lock().unwrap_or_else(|p| p.into_inner());
        if target.retired_at().is_some() {
            return Ok(());
        }
        let at = unix_now();
        self.store.retire_version(tool.id, version, at)?;
        target.retired_at.store(at, std::sync::atomic::Ordering::Release);
        tracing::info!(tool = tool.name, version, "version retired");
        Ok(())
    }

    /// The registry, for enumeration.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The tool with this id.
    pub fn tool(&self, id: &str) -> Option<Arc<Tool>> {
        let id = Uuid::parse_str(id).ok()?;
        self.registry.get(&id)
    }

    /// Stores a secret (replacing any value it had).
    pub fn put_secret(&self, id: &str, value: &str) -> Result<(), StoreError> {
        self.store.put_secret(id, value, unix_now())?;
        self.secrets.insert(id.to_string(), value.to_string());
        tracing::info!(secret = id, "secret set");
        Ok(())
    }

    /// Deletes a secret; returns whether it existed.
    pub fn delete_secret(&self, id: &str) -> Result<bool, StoreError> {
        let existed = self.store.delete_secret(id)?;
        self.secrets.remove(id);
        if existed {
            tracing::info!(secret = id, "secret deleted");
        }
        Ok(existed)
    }

    /// The ids of the stored secrets (never their values).
    pub fn secret_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.secrets.iter().map(|e| e.key().clone()).collect();
        ids.sort();
        ids
    }

    /// Secrets a tool declares that the operator has not set.
    pub fn missing_secrets(&self, tool: &Tool) -> Vec<String> {
        let Some(version) = tool.current() else { return Vec::new() };
        version.manifest.secrets.iter().filter(|id| !self.secrets.contains_key(*id)).cloned().collect()
    }

    /// Config keys a tool requires that neither the operator nor a default
    /// supplies (reported at start so the operator can fix them).
    pub fn missing_config(&self, tool: &Tool) -> Vec<String> {
        let Some(version) = tool.current() else { return Vec::new() };
        let config = runtime::effective_config(&version.manifest, self.tool_config.get(&tool.name));
        version
            .manifest
            .config
            .iter()
            .filter(|(k, v)| v.required && !config.contains_key(*k))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Invokes a version (the current one when `version` is `None`) with an
    /// A2T invocation body. Returns the version that ran and its result.
    pub async fn invoke(
        self: &Arc<Self>,
        tool_id: &str,
        version: Option<u32>,
        body: &serde_json::Value,
        call_id: &str,
    ) -> Result<(u32, ToolResult), InvokeError> {
        let tool = self.tool(tool_id).ok_or_else(|| InvokeError::UnknownTool(tool_id.to_string()))?;
        let version = match version {
            None => tool
                .current()
                .ok_or_else(|| InvokeError::Retired(format!("every version of `{}` is retired", tool.name)))?,
            Some(n) => {
                let version = tool.version(n).ok_or(InvokeError::UnknownVersion { tool_id: tool.id, version: n })?;
                if version.retired_at().is_some() {
                    return Err(InvokeError::Retired(format!("version {n} of `{}` is retired", tool.name)));
                }
                version
            }
        };
        let span = tracing::info_span!("invoke", tool = %tool.name, version = version.number, call_id);
        let number = version.number;
        let (this, body, call_id) = (self.clone(), body.clone(), call_id.to_string());
        let task = async move { this.run(&tool, &version, &body, &call_id).instrument(span).await };
        // Tools run on their own threads, never on the ones serving HTTP: a
        // tool burning CPU can slow other tools, but not the host's answers.
        let result = match &self.executor {
            Some(executor) => executor
                .spawn(task)
                .await
                .map_err(|_| InvokeError::Call(CallError::Trapped("the invocation was interrupted".into())))??,
            None => task.await?,
        };
        Ok((number, result))
    }

    async fn run(
        &self,
        tool: &Tool,
        version: &ToolVersion,
        body: &serde_json::Value,
        call_id: &str,
    ) -> Result<ToolResult, InvokeError> {
        let input = invocation::input_value(&version.signature, body)?;
        // Refuse at once rather than queue: a tool that floods its slots must
        // not make its own callers, or anyone else's, wait without bound.
        let _tool_slot = self.per_tool_slots(tool, version).try_acquire_owned().map_err(|_| {
            InvokeError::Busy(format!("`{}` is running as many invocations as it may; retry shortly", tool.name))
        })?;
        let _host_slot = self.slots.clone().try_acquire_owned().map_err(|_| {
            InvokeError::Busy("the server is running as many tool invocations as it may; retry shortly".into())
        })?;

        let config = runtime::effective_config(&version.manifest, self.tool_config.get(&tool.name));
        let limits = &version.manifest.limits;
        let outbound = OutboundPolicy::new(&version.host_patterns, &config, self.limits.outbound.clone());
        let denials = outbound.denials();
        let setup = CallSetup {
            deadline: limits.deadline_ms.map_or(Duration::MAX, Duration::from_millis),
            max_memory_bytes: limits.memory_mib.map_or(usize::MAX, |m| (m as usize).saturating_mul(1 << 20)),
            outbound,
            config,
            log: LogLabels { tool: tool.name.clone(), version: version.number, call_id: call_id.to_string() },
            secrets: version
                .manifest
                .secrets
                .iter()
                .filter_map(|id| Some((id.clone(), self.secrets.get(id)?.clone())))
                .collect(),
            log_budget: self.log_budgets.entry(tool.id).or_default().clone(),
        };
        let redactor = Redactor::new(setup.secrets.values().cloned());
        let started = std::time::Instant::now();
        let result = self.runtime.call(&version.component, input, setup).await;
        let elapsed_us = started.elapsed().as_micros() as u64;
        match &result {
            Ok(_) => tracing::debug!(elapsed_us, "tool returned"),
            Err(e) => tracing::info!(elapsed_us, error = %e, "tool did not return"),
        }
        let outcome = result.map_err(InvokeError::from).and_then(|value| {
            let mut result = invocation::read_result(&version.signature, value, self.limits.output)?;
            result.redact(&redactor);
            Ok(result)
        });
        // A tool that failed after a refused request failed because of it:
        // say so, rather than pass on its own account of the failure.
        match (outcome, denials.first()) {
            (Ok(ToolResult::Failed(_)) | Err(InvokeError::Call(CallError::Trapped(_))), Some(why)) => {
                Err(InvokeError::OutboundDenied(why))
            }
            (outcome, _) => outcome,
        }
    }

    /// The semaphore bounding this tool's concurrent invocations: the
    /// operator's ceiling, or less if the tool asks for less.
    fn per_tool_slots(&self, tool: &Tool, version: &ToolVersion) -> Arc<tokio::sync::Semaphore> {
        let ceiling = self.limits.max_concurrency_per_tool;
        let wanted = version.manifest.limits.max_concurrency.map_or(ceiling, |n| n.clamp(1, ceiling));
        self.per_tool.entry(tool.id).or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(wanted as usize))).clone()
    }
}

impl Drop for ToolHost {
    fn drop(&mut self) {
        // Dropping a runtime from async code would panic; let its threads
        // finish on their own.
        if let Some(executor) = self.executor.take() {
            executor.shutdown_background();
        }
    }
}

fn unix_now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}
