//! The in-memory registry: which tools exist, their versions, and the
//! compiled component behind each version.
//!
//! Reads never wait on compilation: a version is inserted only once it is
//! compiled and ready, and a reader holds an `Arc` to the version it started
//! with, so a version added mid-request never changes that request.
//!
//! A version's compiled code is linked when it is first needed, not at
//! start: a deploy links it (it has just been compiled, and is checked
//! linkable), a restart or another replica's deploy does not, and the first
//! call links it then (mapped from the compiled cache: milliseconds). A
//! version idle for a while lets its code go ([`ToolVersion::unlink_if_idle`]),
//! and the next call links it again.
//!
//! A retired version keeps its metadata (it is still listed and answers
//! `410`) but not its compiled code: retiring unloads it, and a retired
//! version is never linked again.

use crate::manifest::{HostPattern, ToolManifest};
use crate::runtime::LoadedComponent;
use crate::signature::Signature;
use crate::signature::a2t::LockedJson;
use crate::store::StoredVersion;
use dashmap::DashMap;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use uuid::Uuid;

/// One version of a tool, compiled and ready to run.
pub struct ToolVersion {
    /// The version number.
    pub number: u32,
    /// The sha256 of its component bytes.
    pub sha256: String,
    /// Its locked signature.
    pub signature: Arc<Signature>,
    /// The sha256 of the signature (see [`Signature::sha256`]).
    pub signature_sha256: String,
    /// Its manifest.
    pub manifest: Arc<ToolManifest>,
    /// The manifest's `allowed-hosts`, parsed once.
    pub host_patterns: Vec<HostPattern>,
    /// The linked component; `None` until it is first needed, while idle,
    /// and once the version is retired (a call that began before keeps its
    /// own `Arc` until it ends).
    component: RwLock<Option<Arc<LoadedComponent>>>,
    /// When its code was last asked for (seconds on [`ticks`]' clock).
    last_used: AtomicU64,
    /// Held while its code is being linked, so that concurrent first calls
    /// link it once.
    pub linking: tokio::sync::Mutex<()>,
    /// When it was deployed (Unix seconds).
    pub created_at: i64,
    /// When it was retired (Unix seconds), 0 while it is live.
    pub retired_at: AtomicI64,
    /// The A2T JSON text of this version, serialised when it is loaded. A
    /// version's signature is locked, so it never goes stale; the fields
    /// that can change (currentVersion, retirement, confirmation) are
    /// spliced in per answer.
    pub a2t_json: LockedJson,
    /// The OTC `ToolDefinition` of this version, built once by the OTC front
    /// door (its `requirements` are added per answer).
    pub otc_view: std::sync::OnceLock<serde_json::Value>,
    /// The MCP tool of this version, built once by the MCP front door (its
    /// confirmation marker is added per answer).
    pub mcp_view: std::sync::OnceLock<serde_json::Value>,
    /// Its `[confirmation]` policy, compiled once.
    pub confirmation: crate::cheq::Confirmation,
    /// Where it came from and who signed it (verified at deploy).
    pub provenance: crate::supply::Provenance,
}

/// A version's A2T extensions (docs/a2t.md): its provenance, when it came
/// from a registry or a trusted key signed it, and the accounts it acts
/// with.
fn a2t_extensions(
    provenance: &crate::supply::Provenance,
    manifest: &ToolManifest,
) -> serde_json::Map<String, serde_json::Value> {
    let mut extensions = serde_json::Map::new();
    if *provenance != crate::supply::Provenance::default() {
        extensions.insert("provenance".into(), provenance.to_json());
    }
    if !manifest.authorization.is_empty() {
        extensions.insert("authorization".into(), manifest.published_authorization());
    }
    extensions
}

impl ToolVersion {
    /// A version from its registry row and its linked component, if it has
    /// one yet (`None` for a retired version, which is never linked). The
    /// signature stored with the version is the locked one.
    pub fn from_stored(stored: StoredVersion, component: Option<Arc<LoadedComponent>>) -> Self {
        // The end user enters private inputs when confirming: a tool with
        // one needs confirmation on every call.
        let confirmation = if stored.signature.inputs.iter().any(|p| p.private) {
            crate::cheq::Confirmation::Always
        } else {
            stored.manifest.confirmation.compile()
        };
        let extensions = a2t_extensions(&stored.provenance, &stored.manifest);
        ToolVersion {
            a2t_json: LockedJson::new(&stored.tool_id, stored.version, &stored.sha256, &stored.signature, extensions),
            number: stored.version,
            sha256: stored.sha256,
            signature: Arc::new(stored.signature),
            signature_sha256: stored.signature_sha256,
            host_patterns: stored.manifest.host_patterns(),
            confirmation,
            manifest: Arc::new(stored.manifest),
            component: RwLock::new(component),
            last_used: AtomicU64::new(ticks()),
            linking: tokio::sync::Mutex::new(()),
            created_at: stored.created_at,
            retired_at: AtomicI64::new(stored.retired_at.unwrap_or(0)),
            otc_view: Default::default(),
            mcp_view: Default::default(),
            provenance: stored.provenance,
        }
    }

    /// Its A2T JSON with `signature` in place of its own (a toolset's
    /// words, `signature::Wording`), locked the same way: the same fields,
    /// extensions and order, only texts differ.
    pub fn a2t_json_with(&self, tool_id: &uuid::Uuid, signature: &Signature) -> LockedJson {
        LockedJson::new(tool_id, self.number, &self.sha256, signature, a2t_extensions(&self.provenance, &self.manifest))
    }

    /// When it was retired, if it was.
    pub fn retired_at(&self) -> Option<i64> {
        Some(self.retired_at.load(Ordering::Acquire)).filter(|t| *t != 0)
    }

    /// Its linked component, if it is linked now (see [`Self::link`]).
    pub fn component(&self) -> Option<Arc<LoadedComponent>> {
        let component = self.component.read().unwrap_or_else(|p| p.into_inner()).clone();
        if component.is_some() {
            // Written once a second at most: every call reads it, and a
            // write on each would move its cache line between the cores.
            let now = ticks();
            if self.last_used.load(Ordering::Relaxed) != now {
                self.last_used.store(now, Ordering::Relaxed);
            }
        }
        component
    }

    /// Keeps `component` as its linked code, unless it was retired
    /// meanwhile (then the call that linked it still runs it, once).
    pub fn link(&self, component: Arc<LoadedComponent>) {
        let mut slot = self.component.write().unwrap_or_else(|p| p.into_inner());
        if self.retired_at().is_none() {
            *slot = Some(component);
            self.last_used.store(ticks(), Ordering::Relaxed);
        }
    }

    /// Lets its code go if nobody asked for it in the last `idle` seconds;
    /// returns whether it did. Calls running keep their `Arc`.
    pub fn unlink_if_idle(&self, idle: u64) -> bool {
        if ticks().saturating_sub(self.last_used.load(Ordering::Relaxed)) < idle {
            return false;
        }
        self.component.write().unwrap_or_else(|p| p.into_inner()).take().is_some()
    }

    /// Marks the version retired at `at` and drops its compiled code. Calls
    /// already running keep their `Arc` until they end. Returns whether code
    /// was unloaded.
    pub fn retire(&self, at: i64) -> bool {
        self.retired_at.store(at, Ordering::Release);
        self.component.write().unwrap_or_else(|p| p.into_inner()).take().is_some()
    }
}

/// Seconds since the process's first look at this clock: when versions
/// were last used, cheaper to keep than an `Instant`.
fn ticks() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed().as_secs()
}

/// A tool: a stable id and name, its tenant, and its versions.
pub struct Tool {
    /// The toolId (a UUID, stable across versions, unique on the server).
    pub id: Uuid,
    /// The tenant it belongs to.
    pub tenant: String,
    /// The tool's name.
    pub name: String,
    versions: RwLock<BTreeMap<u32, Arc<ToolVersion>>>,
}

impl Tool {
    /// The newest version that is not retired: what unpinned callers get.
    /// `None` when every version is retired.
    pub fn current(&self) -> Option<Arc<ToolVersion>> {
        let versions = self.versions.read().unwrap_or_else(|p| p.into_inner());
        versions.values().rev().find(|v| v.retired_at().is_none()).cloned()
    }

    /// The highest version number ever given, retired or not (numbers are
    /// never reused).
    pub fn newest_number(&self) -> u32 {
        self.versions.read().unwrap_or_else(|p| p.into_inner()).keys().next_back().copied().unwrap_or(0)
    }

    /// Version `n`, if it exists.
    pub fn version(&self, n: u32) -> Option<Arc<ToolVersion>> {
        self.versions.read().unwrap_or_else(|p| p.into_inner()).get(&n).cloned()
    }

    /// Up to `limit` versions, newest first, older than `before` (exclusive).
    pub fn versions_before(&self, before: Option<u32>, limit: usize) -> Vec<Arc<ToolVersion>> {
        let versions = self.versions.read().unwrap_or_else(|p| p.into_inner());
        let upper = before.unwrap_or(u32::MAX);
        versions.range(..upper).rev().take(limit).map(|(_, v)| v.clone()).collect()
    }

    /// How many versions the tool has, retired ones included (what the
    /// `maxVersionsPerTool` quota counts).
    pub fn version_count(&self) -> usize {
        self.versions.read().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// How many of its versions hold compiled code (the live ones).
    #[cfg(test)]
    pub fn loaded_versions(&self) -> usize {
        self.versions.read().unwrap_or_else(|p| p.into_inner()).values().filter(|v| v.component().is_some()).count()
    }

    /// The version whose bytes have this hash.
    pub fn version_with_sha256(&self, sha256: &str) -> Option<Arc<ToolVersion>> {
        self.versions.read().unwrap_or_else(|p| p.into_inner()).values().find(|v| v.sha256 == sha256).cloned()
    }
}

/// Every tool, by id and, per tenant, in name order.
pub struct Registry {
    by_id: DashMap<Uuid, Arc<Tool>>,
    /// Tenant → name → id. Name order is the enumeration order; a B-tree
    /// makes a page cost O(log n + page), whatever the number of tools.
    by_name: RwLock<HashMap<String, BTreeMap<String, Uuid>>>,
    /// The tenant of every change to its list of tools (a deploy, a
    /// retirement), for the clients that listen (MCP's `list_changed`).
    changes: tokio::sync::broadcast::Sender<String>,
}

impl Default for Registry {
    fn default() -> Self {
        // A listener more than this many changes behind is told that the
        // list changed (a lag), which is all a change says anyway.
        let (changes, _) = tokio::sync::broadcast::channel(64);
        Registry { by_id: DashMap::new(), by_name: RwLock::new(HashMap::new()), changes }
    }
}

impl Registry {
    /// The tool with this id, whatever its tenant (for the core's own
    /// bookkeeping; requests go through [`Registry::get_in`]).
    pub fn get(&self, id: &Uuid) -> Option<Arc<Tool>> {
        self.by_id.get(id).map(|t| t.clone())
    }

    /// The tool with this id, if it belongs to `tenant`. Another tenant's
    /// tool is indistinguishable from one that does not exist.
    pub fn get_in(&self, tenant: &str, id: &Uuid) -> Option<Arc<Tool>> {
        self.get(id).filter(|t| t.tenant == tenant)
    }

    /// The tenant's tool with this name.
    pub fn by_name(&self, tenant: &str, name: &str) -> Option<Arc<Tool>> {
        let id = *self.by_name.read().unwrap_or_else(|p| p.into_inner()).get(tenant)?.get(name)?;
        self.get(&id)
    }

    /// Adds a version; creates the tool on its first version.
    pub fn insert(&self, id: Uuid, tenant: &str, name: &str, version: ToolVersion) {
        let tool = self
            .by_id
            .entry(id)
            .or_insert_with(|| {
                Arc::new(Tool {
                    id,
                    tenant: tenant.to_string(),
                    name: name.to_string(),
                    versions: RwLock::new(BTreeMap::new()),
                })
            })
            .clone();
        tool.versions.write().unwrap_or_else(|p| p.into_inner()).insert(version.number, Arc::new(version));
        self.by_name
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .entry(tenant.to_string())
            .or_default()
            .insert(name.to_string(), id);
        self.changed(tenant);
    }

    /// Tells the listeners that `tenant`'s list of tools changed.
    pub fn changed(&self, tenant: &str) {
        // No receiver (nobody listens) is not an error.
        let _ = self.changes.send(tenant.to_string());
    }

    /// The tenants whose list of tools changes, from now on.
    pub fn changes(&self) -> tokio::sync::broadcast::Receiver<String> {
        self.changes.subscribe()
    }

    /// Up to `limit` of the tenant's tools whose name sorts after `after`,
    /// in name order, keeping those `keep` accepts. Returns them and whether
    /// more remain.
    pub fn page(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: usize,
        keep: impl Fn(&Tool) -> bool,
    ) -> (Vec<Arc<Tool>>, bool) {
        use std::ops::Bound::{Excluded, Unbounded};
        let by_name = self.by_name.read().unwrap_or_else(|p| p.into_inner());
        let Some(names) = by_name.get(tenant) else { return (Vec::new(), false) };
        let lower = after.map_or(Unbounded, |a| Excluded(a.to_string()));
        let mut page = Vec::with_capacity(limit.min(256));
        for (_, id) in names.range((lower, Unbounded)) {
            let Some(tool) = self.get(id) else { continue };
            if !keep(&tool) {
                continue;
            }
            if page.len() == limit {
                return (page, true);
            }
            page.push(tool);
        }
        (page, false)
    }

    /// Every tool of every tenant.
    pub fn all(&self) -> Vec<Arc<Tool>> {
        self.by_id.iter().map(|t| t.value().clone()).collect()
    }

    /// Lets the code of every version idle for `idle` seconds go; returns
    /// how many let it go.
    pub fn unlink_idle(&self, idle: u64) -> usize {
        let tools = self.all();
        let versions = tools.iter().flat_map(|tool| tool.versions_before(None, usize::MAX));
        versions.filter(|version| version.unlink_if_idle(idle)).count()
    }

    /// How many tools `tenant` has stored, fully retired ones included
    /// (each keeps its id, its versions and their blobs): what the
    /// `maxTools` quota counts.
    pub fn stored_tools(&self, tenant: &str) -> usize {
        let by_name = self.by_name.read().unwrap_or_else(|p| p.into_inner());
        by_name.get(tenant).map_or(0, |names| names.len())
    }

    /// How many of the tenant's tools have a live version.
    pub fn live_tools(&self, tenant: &str) -> usize {
        let by_name = self.by_name.read().unwrap_or_else(|p| p.into_inner());
        let Some(names) = by_name.get(tenant) else { return 0 };
        names.values().filter_map(|id| self.get(id)).filter(|t| t.current().is_some()).count()
    }

    /// How many tools there are, in every tenant.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}
