//! Toolsets in the core: a named set of a tenant's tools, each pinned to a
//! version or following its current one, served at a root of its own on
//! every door (docs/toolsets.md).
//!
//! A toolset is versioned: a `PUT` with different content makes version
//! n+1 and the previous ones stay callable by pin (`name@n`). What a door
//! serves under a toolset's root is decided here, once: which tools it
//! lists ([`ToolHost::toolset_tools`]) and which version a call reaches
//! ([`ToolHost::resolve_in`]), whatever the request names. Toolsets are
//! kept in memory as a cache of the store, refreshed in a fleet from the
//! change log (`Topic::Toolsets`), like keys and tenants.

use super::{InvokeError, ToolHost};
use crate::registry::{Tool, ToolVersion};
use crate::signature::{MAX_WORDING_CHARS_PER_TOOLSET, Review, SignatureDiff, Wording};
use crate::store::{StoreError, StoredToolset, ToolsetEntry};
use crate::tenancy::{AuditEntry, Principal, unix_now};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

/// Tools one toolset may name.
pub const MAX_TOOLSET_TOOLS: usize = 64;
/// Toolsets one tenant may keep (deleted ones do not count).
pub const MAX_TOOLSETS_PER_TENANT: usize = 256;
/// Versions one toolset name may number, deleted toolsets of the name
/// included (a deleted toolset's numbers are never reused, so a toolset
/// re-created under a name goes on from them): past it, choose another
/// name.
#[cfg(not(test))]
pub const MAX_TOOLSET_VERSIONS: u32 = 1_000;
#[cfg(test)]
pub const MAX_TOOLSET_VERSIONS: u32 = 6;
/// Toolset versions one tenant may have stored, deleted toolsets'
/// included (they are kept, in the store and in memory, so that numbers
/// are not reused): create/delete cycles cannot grow them without bound.
#[cfg(not(test))]
pub const MAX_TOOLSET_ROWS_PER_TENANT: usize = 2_000;
#[cfg(test)]
pub const MAX_TOOLSET_ROWS_PER_TENANT: usize = 16;
/// Characters of a toolset's description.
pub const MAX_TOOLSET_DESCRIPTION_CHARS: usize = 2_000;

/// Whether `name` may name a toolset: 1 to 64 lowercase letters, digits,
/// `-` or `_`, starting with a letter or digit (it appears in URLs as
/// `/t/{tenant}/toolsets/{name}/`).
pub fn is_toolset_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        && name.bytes().next().is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

/// A toolset change refused, or failed.
#[derive(Debug, thiserror::Error)]
pub enum ToolsetError {
    /// The name, description or list of tools is not acceptable.
    #[error("{0}")]
    Invalid(String),
    /// A tool named is not one of the tenant's.
    #[error("the tenant has no tool `{0}`")]
    UnknownTool(String),
    /// A pinned version does not exist.
    #[error("tool `{tool}` has no version {version}")]
    UnknownVersion {
        /// The tool.
        tool: String,
        /// The version named.
        version: u32,
    },
    /// A pinned version is retired (or every version of a followed tool is).
    #[error("{0}")]
    Retired(String),
    /// A tool's words are refused: a parameter the version lacks, a private
    /// input, a text out of bounds.
    #[error("{message}")]
    Wording {
        /// The tool.
        tool: String,
        /// The parameter, when the refusal is about one.
        parameter: Option<String>,
        /// Why.
        message: String,
    },
    /// No such toolset in the tenant.
    #[error("there is no toolset `{0}`")]
    NotFound(String),
    /// The tenant has as many toolsets (or the toolset as many versions) as
    /// it may.
    #[error("{0}")]
    TooMany(String),
    /// Another change of the same toolset won (another replica): retry.
    #[error("the toolset was changed at the same time by another request; send it again")]
    Conflict,
    /// Persisting failed; nothing changed.
    #[error(transparent)]
    Store(StoreError),
}

impl From<StoreError> for ToolsetError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Conflict(_) => ToolsetError::Conflict,
            e => ToolsetError::Store(e),
        }
    }
}

/// Every version of each toolset, oldest first, by (tenant, name).
type Versions = BTreeMap<(String, String), Vec<Arc<StoredToolset>>>;

/// The tenants' toolsets, every version, by (tenant, name).
#[derive(Default)]
pub(super) struct ToolsetState {
    by_name: RwLock<Versions>,
    /// Serializes this replica's toolset changes (numbering; the store
    /// refuses a number that is not the next, for other replicas).
    pub(super) writing: std::sync::Mutex<()>,
}

impl StoredToolset {
    /// What the toolset says of the tool named `tool`: `None` when it is
    /// not in it, else its pin (`Some(None)`: it follows the current
    /// version).
    pub fn pin(&self, tool: &str) -> Option<Option<u32>> {
        self.tools.iter().find(|t| t.name == tool).map(|t| t.version)
    }

    /// Whether every tool is pinned: then the list this version serves
    /// changes only when a pinned version is retired.
    pub fn all_pinned(&self) -> bool {
        self.tools.iter().all(|t| t.version.is_some())
    }
}

/// Where one tool of a toolset stands now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum EntryState {
    /// It can be called: the pinned version is live, or the tool has a
    /// current version to follow.
    Live,
    /// Its pinned version was retired (by force): the toolset cannot call
    /// it until a new toolset version changes the pin.
    RetiredPinned,
    /// It follows the current version and every version is retired.
    Retired,
    /// The tenant has no tool of that name (any more, in this replica).
    Missing,
}

/// One tool of a toolset version, resolved now: a followed tool to its
/// current version.
#[derive(Clone)]
pub struct ToolsetTool {
    /// What the toolset says: the name and the pin.
    pub entry: ToolsetEntry,
    /// The tool, when the tenant has it.
    pub tool: Option<Arc<Tool>>,
    /// The version a call reaches now, when one does.
    pub version: Option<Arc<ToolVersion>>,
    /// Where it stands.
    pub state: EntryState,
    /// For a tool with the designer's words and a version served: the
    /// parameters to look at again (new since the words were written, or
    /// worded and gone).
    pub review: Option<Review>,
}

/// What changed for one tool between two toolset versions.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolsetToolChange {
    /// The tool.
    pub name: String,
    /// Its pin in the older version (`null`: followed the current one).
    pub from: Option<u32>,
    /// Its pin in the newer version.
    pub to: Option<u32>,
    /// The signature diff between the versions the two pins reach now
    /// (a followed tool: its current version), when both exist.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signature: Option<SignatureDiff>,
}

/// The difference between two versions of a toolset, for the catalog.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolsetDiff {
    /// The toolset.
    pub name: String,
    /// The older version compared.
    pub from: u32,
    /// The newer version compared.
    pub to: u32,
    /// Whether the description changed.
    pub description_changed: bool,
    /// Tools only the newer version has.
    pub added: Vec<ToolsetEntry>,
    /// Tools only the older version has.
    pub removed: Vec<ToolsetEntry>,
    /// Tools in both whose pin changed.
    pub changed: Vec<ToolsetToolChange>,
    /// Tools in both whose words changed, each text that changed.
    pub reworded: Vec<RewordedTool>,
}

/// A tool of both toolset versions whose words changed.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RewordedTool {
    /// The tool.
    pub name: String,
    /// Each text that changed.
    pub changes: Vec<WordChange>,
}

/// One text of a tool's words, before and after (`None`: the vendor's).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WordChange {
    /// `description`, `input.NAME` or `output.NAME`.
    pub field: String,
    /// The older toolset version's words.
    pub from: Option<String>,
    /// The newer's.
    pub to: Option<String>,
}

/// The texts of two wordings that differ, by field.
fn word_changes(old: &Wording, new: &Wording) -> Vec<WordChange> {
    let mut changes = Vec::new();
    if old.description != new.description {
        changes.push(WordChange {
            field: "description".into(),
            from: old.description.clone(),
            to: new.description.clone(),
        });
    }
    for (kind, old, new) in [
        ("input", &old.input_descriptions, &new.input_descriptions),
        ("output", &old.output_descriptions, &new.output_descriptions),
    ] {
        let names: std::collections::BTreeSet<&String> = old.keys().chain(new.keys()).collect();
        for name in names {
            let (from, to) = (old.get(name), new.get(name));
            if from != to {
                changes.push(WordChange { field: format!("{kind}.{name}"), from: from.cloned(), to: to.cloned() });
            }
        }
    }
    changes
}

impl ToolsetDiff {
    /// Whether a caller of the older version could fail with the newer one:
    /// a tool removed, or a breaking signature change.
    pub fn is_breaking(&self) -> bool {
        !self.removed.is_empty()
            || self.changed.iter().any(|c| c.signature.as_ref().is_some_and(|d| !d.is_compatible()))
    }
}

/// What a `PUT` of a toolset did.
#[derive(Debug, Clone)]
pub struct PutToolset {
    /// The toolset's newest version now.
    pub toolset: Arc<StoredToolset>,
    /// Whether that version is new (`false`: the content was the same as
    /// the newest version's, nothing changed).
    pub created: bool,
}

impl ToolHost {
    /// The newest live version of each of the tenant's toolsets, by name.
    pub fn toolsets(&self, tenant: &str) -> Vec<Arc<StoredToolset>> {
        let by_name = self.toolsets.by_name.read().unwrap_or_else(|p| p.into_inner());
        by_name
            .range((tenant.to_string(), String::new())..)
            .take_while(|((t, _), _)| t == tenant)
            .filter_map(|(_, versions)| versions.last().filter(|v| v.deleted_at.is_none()).cloned())
            .collect()
    }

    /// A live toolset of the tenant: version `version`, or its newest.
    pub fn toolset(&self, tenant: &str, name: &str, version: Option<u32>) -> Option<Arc<StoredToolset>> {
        let by_name = self.toolsets.by_name.read().unwrap_or_else(|p| p.into_inner());
        let versions = by_name.get(&(tenant.to_string(), name.to_string()))?;
        let found = match version {
            None => versions.last(),
            Some(n) => versions.iter().find(|v| v.version == n),
        };
        found.filter(|v| v.deleted_at.is_none()).cloned()
    }

    /// Every version of a live toolset, oldest first (empty when there is
    /// no such toolset).
    pub fn toolset_versions(&self, tenant: &str, name: &str) -> Vec<Arc<StoredToolset>> {
        let by_name = self.toolsets.by_name.read().unwrap_or_else(|p| p.into_inner());
        by_name
            .get(&(tenant.to_string(), name.to_string()))
            .map(|versions| versions.iter().filter(|v| v.deleted_at.is_none()).cloned().collect())
            .unwrap_or_default()
    }

    /// The tools of a toolset version as they stand now: each pinned one at
    /// its pin, each followed one at the tool's current version.
    pub fn toolset_tools(&self, toolset: &StoredToolset) -> Vec<ToolsetTool> {
        toolset
            .tools
            .iter()
            .map(|entry| {
                let tool = self.registry.by_name(&toolset.tenant, &entry.name);
                let (version, state) = match (&tool, entry.version) {
                    (None, _) => (None, EntryState::Missing),
                    (Some(tool), None) => match tool.current() {
                        Some(v) => (Some(v), EntryState::Live),
                        None => (None, EntryState::Retired),
                    },
                    (Some(tool), Some(n)) => match tool.version(n) {
                        Some(v) if v.retired_at().is_none() => (Some(v), EntryState::Live),
                        Some(v) => (Some(v), EntryState::RetiredPinned),
                        None => (None, EntryState::Missing),
                    },
                };
                let review = match (&tool, &version) {
                    (Some(tool), Some(served)) if !entry.wording.is_empty() => {
                        let written_for = entry.wording.words_for.and_then(|n| tool.version(n));
                        Some(entry.wording.review(&served.signature, written_for.as_ref().map(|v| &*v.signature)))
                    }
                    _ => None,
                };
                ToolsetTool { entry: entry.clone(), tool, version, state, review }
            })
            .collect()
    }

    /// The tool `id` of `tenant` as the view `toolset` serves it (`None`:
    /// the tenant's whole catalogue). Through a toolset, a tool outside it
    /// is none: a key or token of the toolset cannot tell the tenant's
    /// other tools from names that are no tool (docs/toolsets.md), so each
    /// door answers it as it answers a tool that does not exist.
    pub fn tool_in(&self, tenant: &str, toolset: Option<&StoredToolset>, id: &str) -> Option<Arc<Tool>> {
        self.tool(tenant, id).filter(|tool| Self::in_view(toolset, tool))
    }

    /// [`Self::tool_in`] by the tool's name.
    pub fn tool_named_in(&self, tenant: &str, toolset: Option<&StoredToolset>, name: &str) -> Option<Arc<Tool>> {
        self.registry.by_name(tenant, name).filter(|tool| Self::in_view(toolset, tool))
    }

    /// The designer's words for `tool` in the view `toolset`, when it has
    /// any: the doors serve them in place of the vendor's
    /// ([`Wording::apply`]); the tenant's whole catalogue (`None`) has none.
    pub fn wording_in<'a>(toolset: Option<&'a StoredToolset>, tool: &str) -> Option<&'a Wording> {
        let entry = toolset?.tools.iter().find(|t| t.name == tool)?;
        (!entry.wording.is_empty()).then_some(&entry.wording)
    }

    /// Whether the view `toolset` (`None`: the tenant's whole catalogue)
    /// holds `tool`, at whatever version.
    pub fn in_view(toolset: Option<&StoredToolset>, tool: &Tool) -> bool {
        toolset.is_none_or(|toolset| toolset.pin(&tool.name).is_some())
    }

    /// The version a call of `tool` reaches through `toolset` (`None`: the
    /// tenant's whole catalogue), the request asking for `version` (`None`:
    /// whichever is current). Through a toolset, a version other than the
    /// one the toolset gives a tool is refused
    /// ([`InvokeError::OutsideToolset`]) whatever the request names; a tool
    /// outside it is [`InvokeError::UnknownTool`] (the doors find it with
    /// [`Self::tool_in`], which never gives one).
    pub fn resolve_in(
        toolset: Option<&StoredToolset>,
        tool: Arc<Tool>,
        version: Option<u32>,
    ) -> Result<(Arc<Tool>, Arc<ToolVersion>), InvokeError> {
        let Some(toolset) = toolset else { return Self::version_of(tool, version) };
        let Some(pin) = toolset.pin(&tool.name) else {
            return Err(InvokeError::UnknownTool(tool.id.to_string()));
        };
        let tool_name = tool.name.clone();
        let outside = |asked: u32, given: &str| {
            InvokeError::OutsideToolset(format!(
                "toolset `{}` (version {}) gives `{tool_name}` at {given}, not version {asked}",
                toolset.name, toolset.version
            ))
        };
        match (pin, version) {
            (Some(pinned), Some(asked)) if asked != pinned => Err(outside(asked, &format!("version {pinned}"))),
            (Some(pinned), _) => Self::version_of(tool, Some(pinned)),
            // A followed tool: its current version, or one that was current
            // when the caller listed the toolset and is still live (an OTC
            // `ToolId` or MCP `_meta.version` from a listing made before the
            // last deploy), as at the tenant's root; never a newer one.
            (None, asked) => {
                let current = Self::version_of(tool.clone(), None)?;
                match asked {
                    Some(asked) if asked > current.1.number => Err(outside(asked, "its current version")),
                    Some(asked) if asked != current.1.number => Self::version_of(tool, Some(asked)),
                    _ => Ok(current),
                }
            }
        }
    }

    /// The version of `tool` a view lists: the tool's current one for the
    /// tenant's whole catalogue (`None`), else the one the toolset gives
    /// it, when it is in it and that version is live.
    pub fn version_in(toolset: Option<&StoredToolset>, tool: &Tool) -> Option<Arc<ToolVersion>> {
        match toolset.map(|t| t.pin(&tool.name)) {
            None | Some(Some(None)) => tool.current(),
            Some(None) => None,
            Some(Some(Some(n))) => tool.version(n).filter(|v| v.retired_at().is_none()),
        }
    }

    /// How long a client may cache the list a view serves (MCP's
    /// `ttlMs`): a toolset whose every tool is pinned changes only by a
    /// retirement or a new toolset version, both announced to listeners
    /// (`listChanged`), so a minute; anything following current versions
    /// changes with any deploy: not at all.
    pub fn list_ttl_ms(toolset: Option<&StoredToolset>) -> u64 {
        match toolset {
            Some(toolset) if toolset.all_pinned() => 60_000,
            _ => 0,
        }
    }

    /// The difference between two live versions of a toolset; `None` when
    /// either does not exist.
    pub fn diff_toolsets(&self, tenant: &str, name: &str, from: u32, to: u32) -> Option<ToolsetDiff> {
        let old = self.toolset(tenant, name, Some(from))?;
        let new = self.toolset(tenant, name, Some(to))?;
        let olds: BTreeMap<&str, Option<u32>> = old.tools.iter().map(|t| (t.name.as_str(), t.version)).collect();
        let news: BTreeMap<&str, Option<u32>> = new.tools.iter().map(|t| (t.name.as_str(), t.version)).collect();
        let entry = |name: &str, version| ToolsetEntry { name: name.to_string(), version, ..Default::default() };
        let added = news.iter().filter(|(n, _)| !olds.contains_key(*n)).map(|(n, v)| entry(n, *v)).collect();
        let removed = olds.iter().filter(|(n, _)| !news.contains_key(*n)).map(|(n, v)| entry(n, *v)).collect();
        let reach = |tool: &Tool, pin: Option<u32>| match pin {
            Some(n) => tool.version(n),
            None => tool.current(),
        };
        let changed = olds
            .iter()
            .filter_map(|(name, from_pin)| {
                let to_pin = *news.get(name)?;
                (to_pin != *from_pin).then(|| {
                    let tool = self.registry.by_name(tenant, name);
                    let signature = tool.and_then(|tool| {
                        let (a, b) = (reach(&tool, *from_pin)?, reach(&tool, to_pin)?);
                        Some(SignatureDiff::between(&a.signature, &b.signature))
                    });
                    ToolsetToolChange { name: name.to_string(), from: *from_pin, to: to_pin, signature }
                })
            })
            .collect();
        let reworded = old
            .tools
            .iter()
            .filter_map(|before| {
                let after = new.tools.iter().find(|t| t.name == before.name)?;
                let changes = word_changes(&before.wording, &after.wording);
                (!changes.is_empty()).then(|| RewordedTool { name: before.name.clone(), changes })
            })
            .collect();
        Some(ToolsetDiff {
            name: name.to_string(),
            from,
            to,
            description_changed: old.description != new.description,
            added,
            removed,
            changed,
            reworded,
        })
    }

    /// Creates a toolset, or gives it a new version when `description` or
    /// `tools` differ from its newest version's (the same content changes
    /// nothing). Every tool must be the tenant's, every pinned version
    /// must exist and be live; tools are kept in name order.
    pub fn put_toolset(
        &self,
        actor: &Principal,
        tenant: &str,
        name: &str,
        description: &str,
        tools: &[ToolsetEntry],
    ) -> Result<PutToolset, ToolsetError> {
        if !is_toolset_name(name) {
            return Err(ToolsetError::Invalid(
                "a toolset's name is 1 to 64 lowercase letters, digits, `-` or `_`, starting with a letter or digit"
                    .into(),
            ));
        }
        if description.chars().count() > MAX_TOOLSET_DESCRIPTION_CHARS {
            return Err(ToolsetError::Invalid(format!(
                "a toolset's description is at most {MAX_TOOLSET_DESCRIPTION_CHARS} characters"
            )));
        }
        if tools.len() > MAX_TOOLSET_TOOLS {
            return Err(ToolsetError::Invalid(format!("a toolset names at most {MAX_TOOLSET_TOOLS} tools")));
        }
        // Under the lock retirements take: a version is not retired between
        // being found live here and being pinned.
        let _changing = self.changes.lock().unwrap_or_else(|p| p.into_inner());
        let mut tools = tools.to_vec();
        tools.sort();
        if let Some(twice) = tools.windows(2).find(|w| w[0].name == w[1].name) {
            return Err(ToolsetError::Invalid(format!("tool `{}` is named twice", twice[0].name)));
        }
        for entry in &tools {
            let tool = self
                .registry
                .by_name(tenant, &entry.name)
                .ok_or_else(|| ToolsetError::UnknownTool(crate::supply::outside_text(&entry.name).to_string()))?;
            match entry.version {
                Some(n) => {
                    let version = tool
                        .version(n)
                        .ok_or_else(|| ToolsetError::UnknownVersion { tool: tool.name.clone(), version: n })?;
                    if version.retired_at().is_some() {
                        return Err(ToolsetError::Retired(format!(
                            "version {n} of `{}` is retired: pin a live version",
                            tool.name
                        )));
                    }
                }
                None if tool.current().is_none() => {
                    return Err(ToolsetError::Retired(format!(
                        "every version of `{}` is retired: there is nothing to follow",
                        tool.name
                    )));
                }
                None => {}
            }
        }
        let _writing = self.toolsets.writing.lock().unwrap_or_else(|p| p.into_inner());
        let newest = {
            let by_name = self.toolsets.by_name.read().unwrap_or_else(|p| p.into_inner());
            by_name.get(&(tenant.to_string(), name.to_string())).and_then(|v| v.last().cloned())
        };
        let live = newest.as_ref().filter(|n| n.deleted_at.is_none());
        self.check_wording(tenant, live.map(|l| &**l), &mut tools)?;
        if let Some(live) = live
            && live.description == description
            && live.tools == tools
        {
            return Ok(PutToolset { toolset: live.clone(), created: false });
        }
        if live.is_none() && self.toolsets(tenant).len() >= MAX_TOOLSETS_PER_TENANT {
            return Err(ToolsetError::TooMany(format!(
                "the tenant has {MAX_TOOLSETS_PER_TENANT} toolsets, as many as it may; delete one first"
            )));
        }
        let version = newest.as_ref().map_or(1, |n| n.version + 1);
        // On the number, deleted toolsets of the name included: deleting
        // and re-creating does not reset it (numbers are never reused).
        if version > MAX_TOOLSET_VERSIONS {
            return Err(ToolsetError::TooMany(format!(
                "the toolset name `{name}` has used its {MAX_TOOLSET_VERSIONS} versions (a deleted toolset's \
                 numbers are not reused): choose another name"
            )));
        }
        let stored_rows: usize = {
            let by_name = self.toolsets.by_name.read().unwrap_or_else(|p| p.into_inner());
            by_name
                .range((tenant.to_string(), String::new())..)
                .take_while(|((t, _), _)| t == tenant)
                .map(|(_, versions)| versions.len())
                .sum()
        };
        if stored_rows >= MAX_TOOLSET_ROWS_PER_TENANT {
            return Err(ToolsetError::TooMany(format!(
                "the tenant has {MAX_TOOLSET_ROWS_PER_TENANT} toolset versions stored, deleted toolsets' included, \
                 as many as it may: no more toolset versions can be made in it"
            )));
        }
        let stored = StoredToolset {
            tenant: tenant.to_string(),
            name: name.to_string(),
            version,
            description: description.to_string(),
            tools,
            created_at: unix_now(),
            deleted_at: None,
        };
        let audit = AuditEntry::new(actor, Some(tenant), "toolset.put", name)
            .detail(serde_json::json!({ "version": version, "tools": stored.tools }));
        if let Err(e) = self.store.insert_toolset(&stored, &audit) {
            if matches!(e, StoreError::Conflict(_)) {
                // Another replica numbered it first: learn its version.
                self.reload_toolsets()?;
            }
            return Err(e.into());
        }
        let stored = Arc::new(stored);
        self.toolsets
            .by_name
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .entry((tenant.to_string(), name.to_string()))
            .or_default()
            .push(stored.clone());
        // An MCP client listening for this tenant's list hears of it.
        self.registry.changed(tenant);
        tracing::info!(tenant, toolset = name, version, "toolset version created");
        Ok(PutToolset { toolset: stored, created: true })
    }

    /// Checks each tool's words against the version they are served with
    /// (its pin, or its current version) and records the version they were
    /// written for (`words_for`): the one the caller names, if it is that
    /// version or an older one (a form shown for it); else the newest
    /// toolset version's when the words and the pin are unchanged, so that
    /// an unrelated edit does not mark a followed tool's new parameters
    /// reviewed; else the version served.
    fn check_wording(
        &self,
        tenant: &str,
        newest: Option<&StoredToolset>,
        tools: &mut [ToolsetEntry],
    ) -> Result<(), ToolsetError> {
        let total: usize = tools.iter().map(|t| t.wording.chars()).sum();
        if total > MAX_WORDING_CHARS_PER_TOOLSET {
            return Err(ToolsetError::Invalid(format!(
                "a toolset version's words are at most {MAX_WORDING_CHARS_PER_TOOLSET} characters in all (these are {total})"
            )));
        }
        for entry in tools.iter_mut() {
            if entry.wording.is_empty() {
                entry.wording.words_for = None;
                continue;
            }
            // The loop before found every tool and version live.
            let Some(tool) = self.registry.by_name(tenant, &entry.name) else { continue };
            let Some(served) = (match entry.version {
                Some(n) => tool.version(n),
                None => tool.current(),
            }) else {
                continue;
            };
            entry.wording.check(&tool.name, &served.signature).map_err(|e| ToolsetError::Wording {
                tool: tool.name.clone(),
                parameter: e.parameter,
                message: e.message,
            })?;
            let unchanged = newest.and_then(|n| n.tools.iter().find(|t| t.name == entry.name)).filter(|before| {
                before.version == entry.version
                    && Wording { words_for: None, ..before.wording.clone() }
                        == Wording { words_for: None, ..entry.wording.clone() }
            });
            let given = entry.wording.words_for.filter(|n| *n <= served.number && tool.version(*n).is_some());
            entry.wording.words_for =
                given.or_else(|| unchanged.and_then(|before| before.wording.words_for)).or(Some(served.number));
        }
        Ok(())
    }

    /// Deletes a toolset: its roots answer `404`, and the keys scoped to it
    /// and the OAuth grants issued for its MCP URL are revoked, at once
    /// and for good (a toolset re-created under the name is not opened by
    /// them; tokens are checked against the store on every request). Its versions stay in the store
    /// (marked deleted) so that a new toolset of the same name never
    /// reuses a number an old pin names.
    pub fn delete_toolset(&self, actor: &Principal, tenant: &str, name: &str) -> Result<(), ToolsetError> {
        let _writing = self.toolsets.writing.lock().unwrap_or_else(|p| p.into_inner());
        if self.toolset(tenant, name, None).is_none() {
            return Err(ToolsetError::NotFound(crate::supply::outside_text(name).to_string()));
        }
        let at = unix_now();
        let audit = AuditEntry::new(actor, Some(tenant), "toolset.delete", name);
        self.store.delete_toolset(tenant, name, at, &audit)?;
        if let Some(versions) = self
            .toolsets
            .by_name
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(&(tenant.to_string(), name.to_string()))
        {
            for version in versions.iter_mut() {
                if version.deleted_at.is_none() {
                    *version = Arc::new(StoredToolset { deleted_at: Some(at), ..(**version).clone() });
                }
            }
        }
        for mut key in self.keys.iter_mut() {
            if key.tenant.as_deref() == Some(tenant) && key.toolset.as_deref() == Some(name) && key.revoked_at.is_none()
            {
                key.revoked_at = Some(at);
            }
        }
        self.registry.changed(tenant);
        tracing::info!(tenant, toolset = name, "toolset deleted; its keys are revoked");
        Ok(())
    }

    /// The live toolsets (any live version) that pin `tool` at `version`,
    /// by name: retiring that version would break them.
    pub fn pinned_by(&self, tenant: &str, tool: &str, version: u32) -> Vec<String> {
        let by_name = self.toolsets.by_name.read().unwrap_or_else(|p| p.into_inner());
        by_name
            .range((tenant.to_string(), String::new())..)
            .take_while(|((t, _), _)| t == tenant)
            .filter(|(_, versions)| {
                versions.iter().any(|v| v.deleted_at.is_none() && v.pin(tool) == Some(Some(version)))
            })
            .map(|((_, name), _)| name.clone())
            .collect()
    }

    /// Replaces what this replica caches of the toolsets with what the
    /// store holds (at start, and in a fleet when the change log says).
    pub(super) fn reload_toolsets(&self) -> Result<(), StoreError> {
        let mut fresh = Versions::new();
        for stored in self.store.toolsets()? {
            fresh.entry((stored.tenant.clone(), stored.name.clone())).or_default().push(Arc::new(stored));
        }
        let changed: Vec<String> = {
            let mut by_name = self.toolsets.by_name.write().unwrap_or_else(|p| p.into_inner());
            let changed = fresh
                .iter()
                .filter(|(k, v)| by_name.get(*k) != Some(*v))
                .map(|((tenant, _), _)| tenant.clone())
                .chain(by_name.keys().filter(|k| !fresh.contains_key(*k)).map(|(tenant, _)| tenant.clone()))
                .collect();
            *by_name = fresh;
            changed
        };
        for tenant in changed {
            self.registry.changed(&tenant);
        }
        Ok(())
    }

    /// Whether a scoped key may be made for `toolset` in `tenant`.
    pub(super) fn has_toolset(&self, tenant: &str, toolset: &str) -> bool {
        self.toolset(tenant, toolset, None).is_some()
    }
}
