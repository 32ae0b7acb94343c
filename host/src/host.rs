//! `ToolHost`: the one core every front door calls.
//!
//! It owns the registry (signatures, versions, hashes), the runtime (compiled
//! components) and the store, and offers three things: deploy a packed
//! component, enumerate tools, invoke a version. Validation, limits and
//! storage happen here, so every protocol gets them the same way.

use crate::invocation::{self, InputError, OutputError, ToolResult};
use crate::package::{PackageError, ToolPackage};
use crate::registry::{Registry, Tool, ToolVersion};
use crate::runtime::outbound::OutboundPolicy;
use crate::runtime::{self, CallError, CallSetup, LoadError, LogLabels, Runtime, RuntimeConfig};
use crate::store::{BlobStore, RegistryStore, SqliteStore, StoreError, StoredVersion};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
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
}

/// What a deploy did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeployOutcome {
    /// A new tool, at version 1.
    Created {
        /// The new toolId.
        tool_id: Uuid,
    },
    /// A new version of an existing tool.
    NewVersion {
        /// The toolId.
        tool_id: Uuid,
        /// The new version number.
        version: u32,
    },
    /// These exact bytes are already deployed as this version.
    Unchanged {
        /// The toolId.
        tool_id: Uuid,
        /// The existing version number.
        version: u32,
    },
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
    /// The sandbox stopped the tool.
    #[error(transparent)]
    Call(#[from] CallError),
    /// The tool's answer does not fit its signature.
    #[error(transparent)]
    Output(#[from] OutputError),
}

/// The core: registry + runtime + store.
pub struct ToolHost {
    registry: Registry,
    runtime: Runtime,
    store: Box<dyn RegistryStore>,
    blobs: BlobStore,
    tool_config: ToolConfig,
}

impl ToolHost {
    /// Opens the data dir and loads every stored version.
    pub fn open(options: HostOptions) -> anyhow::Result<Self> {
        std::fs::create_dir_all(&options.data_dir)?;
        let store = SqliteStore::open(&options.data_dir)?;
        let blobs = BlobStore::open(&options.data_dir)?;
        let runtime = Runtime::new(options.runtime)?;
        let host = ToolHost {
            registry: Registry::default(),
            runtime,
            store: Box::new(store),
            blobs,
            tool_config: options.tool_config,
        };
        for stored in host.store.versions()? {
            // One bad version must not keep the others from being served.
            if let Err(e) = host.load_stored(stored.clone()) {
                tracing::error!(tool = stored.name, version = stored.version, error = %e, "stored version could not be loaded; it is not served");
            }
        }
        Ok(host)
    }

    fn load_stored(&self, stored: StoredVersion) -> Result<(), DeployError> {
        let bytes = self.blobs.get(&stored.sha256)?;
        let component = self.runtime.load(&bytes)?;
        self.registry.insert(
            stored.tool_id,
            &stored.name,
            ToolVersion {
                number: stored.version,
                sha256: stored.sha256,
                // The signature stored with the version is the locked one.
                signature: Arc::new(stored.signature),
                manifest: Arc::new(stored.manifest),
                component,
                created_at: stored.created_at,
            },
        );
        Ok(())
    }

    /// Deploys a packed component: the same bytes again are a no-op; new
    /// bytes for a known tool name become its next version.
    ///
    /// The compatibility check between versions is not enforced yet.
    pub fn deploy(&self, bytes: &[u8]) -> Result<DeployOutcome, DeployError> {
        let package = ToolPackage::read(bytes)?;
        let existing = self.registry.by_name(&package.signature.name);
        if let Some(tool) = &existing
            && let Some(version) = tool.version_with_sha256(&package.sha256)
        {
            return Ok(DeployOutcome::Unchanged { tool_id: tool.id, version: version.number });
        }
        // Compile before anything is written: a component that cannot run is
        // refused without leaving a trace.
        let component = self.runtime.load(bytes)?;
        let (tool_id, number) = match &existing {
            Some(tool) => (tool.id, tool.current().number + 1),
            None => (Uuid::new_v4(), 1),
        };
        self.blobs.put(bytes)?;
        let stored = StoredVersion {
            tool_id,
            name: package.signature.name.clone(),
            version: number,
            sha256: package.sha256.clone(),
            signature: package.signature.clone(),
            manifest: package.manifest.clone(),
            created_at: unix_now(),
        };
        self.store.insert_version(&stored)?;
        self.registry.insert(
            tool_id,
            &stored.name,
            ToolVersion {
                number,
                sha256: package.sha256,
                signature: Arc::new(package.signature),
                manifest: Arc::new(package.manifest),
                component,
                created_at: stored.created_at,
            },
        );
        Ok(if existing.is_some() {
            DeployOutcome::NewVersion { tool_id, version: number }
        } else {
            DeployOutcome::Created { tool_id }
        })
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

    /// Config keys a tool requires that neither the operator nor a default
    /// supplies (reported at start so the operator can fix them).
    pub fn missing_config(&self, tool: &Tool) -> Vec<String> {
        let version = tool.current();
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
    /// A2T invocation body.
    pub async fn invoke(
        &self,
        tool_id: &str,
        version: Option<u32>,
        body: &serde_json::Value,
        call_id: &str,
    ) -> Result<ToolResult, InvokeError> {
        let tool = self.tool(tool_id).ok_or_else(|| InvokeError::UnknownTool(tool_id.to_string()))?;
        let version = match version {
            None => tool.current(),
            Some(n) => tool.version(n).ok_or(InvokeError::UnknownVersion { tool_id: tool.id, version: n })?,
        };
        let span = tracing::info_span!("invoke", tool = %tool.name, version = version.number, call_id);
        self.run(&tool, &version, body, call_id).instrument(span).await
    }

    async fn run(
        &self,
        tool: &Tool,
        version: &ToolVersion,
        body: &serde_json::Value,
        call_id: &str,
    ) -> Result<ToolResult, InvokeError> {
        let input = invocation::input_value(&version.signature, body)?;
        let config = runtime::effective_config(&version.manifest, self.tool_config.get(&tool.name));
        let setup = CallSetup {
            outbound: OutboundPolicy::new(&version.manifest.host_patterns(), &config),
            config,
            log: LogLabels { tool: tool.name.clone(), version: version.number, call_id: call_id.to_string() },
        };
        let started = std::time::Instant::now();
        let result = self.runtime.call(&version.component, input, setup).await;
        let elapsed_us = started.elapsed().as_micros() as u64;
        match &result {
            Ok(_) => tracing::debug!(elapsed_us, "tool returned"),
            Err(e) => tracing::info!(elapsed_us, error = %e, "tool did not return"),
        }
        Ok(invocation::read_result(&version.signature, result?)?)
    }
}

fn unix_now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}
