//! Deploys and retirements: a packed component becomes a tool's next
//! version (judged, compiled, stored, then made current), and a version
//! stops being served.

use super::{ChangeError, DeployError, DeploySlot, Deployed, ToolHost};
use crate::package::ToolPackage;
use crate::registry::ToolVersion;
use crate::runtime::LoadedComponent;
use crate::signature::SignatureDiff;
use crate::store::{StoreError, StoredVersion, Topic};
use crate::tenancy::{AuditEntry, Principal, Quotas, unix_now};
use std::sync::Arc;
use uuid::Uuid;

/// How many times a deploy decides its version number again after another
/// replica committed the tool's next version first.
const MAX_DEPLOY_ATTEMPTS: u32 = 5;

impl ToolHost {
    /// Deploys a packed component.
    ///
    /// Identical bytes are a no-op that names the existing version. New bytes
    /// for a known tool name become its next version, if the signature is
    /// compatible with the current version's. `expect_version` makes the
    /// deploy fail unless it results in exactly that version. The new version
    /// is compiled before anything is written, then the blob is stored
    /// (fsynced), then the registry row committed, then it becomes current:
    /// a crash at any point leaves no version without its blob.
    ///
    /// The tool lands in `tenant`, within its quotas (`maxTools`,
    /// `maxVersionsPerTool`, `maxComponentBytes`); `actor` is recorded in
    /// the audit log. It takes one of the deploy slots
    /// ([`ToolHost::deploy_slot`]); with none free it is refused at once.
    pub fn deploy(
        &self,
        actor: &Principal,
        tenant: &str,
        bytes: &[u8],
        expect_version: Option<u32>,
    ) -> Result<Deployed, DeployError> {
        self.deploy_in(self.deploy_slot()?, actor, tenant, bytes, expect_version)
    }

    /// One of the `--max-concurrent-deploys` deploy slots, or
    /// [`DeployError::Busy`] at once when all are taken: refused rather
    /// than queued, since a queue of uploads and compilations would hold
    /// every waiting component in memory. A front door receiving a
    /// component takes it before reading the bytes.
    pub fn deploy_slot(&self) -> Result<DeploySlot, DeployError> {
        let permit = self.deploys.clone().try_acquire_owned().map_err(|_| DeployError::Busy)?;
        Ok(DeploySlot { _permit: permit })
    }

    /// [`ToolHost::deploy`] in a deploy slot already taken; the slot is
    /// released when the deploy is done.
    pub fn deploy_in(
        &self,
        slot: DeploySlot,
        actor: &Principal,
        tenant: &str,
        bytes: &[u8],
        expect_version: Option<u32>,
    ) -> Result<Deployed, DeployError> {
        let registry = crate::supply::RegistrySignatures::NotPulled;
        self.deploy_judged(slot, actor, tenant, bytes, expect_version, None, registry)
    }

    /// A deploy of bytes posted (`source` none) or pulled from a registry:
    /// the tenant's trust policy judges them first, with the registry's
    /// signatures of the artifact they came from.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn deploy_judged(
        &self,
        slot: DeploySlot,
        actor: &Principal,
        tenant: &str,
        bytes: &[u8],
        expect_version: Option<u32>,
        source: Option<crate::supply::Source>,
        registry: crate::supply::RegistrySignatures,
    ) -> Result<Deployed, DeployError> {
        let _slot = slot;
        let quotas =
            self.tenant(tenant).ok_or_else(|| DeployError::UnknownTenant(tenant.to_string()))?.record.quotas.clone();
        if bytes.len() as u64 > quotas.max_component_bytes {
            return Err(DeployError::TooLarge {
                tenant: tenant.to_string(),
                size: bytes.len(),
                max: quotas.max_component_bytes,
            });
        }
        let provenance = self.judge(tenant, bytes, source, registry)?;
        let package = ToolPackage::read(bytes)?;
        // Checked again under the lock; this spares a refused deploy the
        // compilation.
        self.check_version_quota(tenant, &quotas, &package)?;
        let component = self.runtime.load(bytes, &package.sha256)?;
        // Another replica may number the tool's next version first: then
        // this one learns of it and decides again (the compatibility check
        // included), a few times at most.
        let mut attempts = 0;
        loop {
            match self.commit_version(actor, tenant, bytes, &package, &quotas, &component, expect_version, &provenance)
            {
                Err(DeployError::Store(StoreError::Conflict(why))) if attempts < MAX_DEPLOY_ATTEMPTS => {
                    attempts += 1;
                    tracing::info!(
                        tenant,
                        tool = package.signature.name,
                        why,
                        "another replica deployed first; deciding again"
                    );
                    self.reload(Topic::Versions)?;
                }
                outcome => return outcome,
            }
        }
    }

    /// The part of a deploy that decides the version number and commits
    /// it, under the lock that serialises this process's changes.
    #[allow(clippy::too_many_arguments)]
    fn commit_version(
        &self,
        actor: &Principal,
        tenant: &str,
        bytes: &[u8],
        package: &ToolPackage,
        quotas: &Quotas,
        component: &Arc<LoadedComponent>,
        expect_version: Option<u32>,
        provenance: &crate::supply::Provenance,
    ) -> Result<Deployed, DeployError> {
        let _changing = self.changes.lock().unwrap_or_else(|p| p.into_inner());
        let existing = self.registry.by_name(tenant, &package.signature.name);
        let previous_version = existing.as_ref().and_then(|t| t.current()).map(|v| v.number);
        if let Some(tool) = &existing
            && let Some(version) = tool.version_with_sha256(&package.sha256)
        {
            if let Some(expected) = expect_version.filter(|e| *e != version.number) {
                return Err(DeployError::UnexpectedVersion { expected, actual: version.number });
            }
            // The version keeps the provenance of its first deploy; evidence
            // this deploy adds (a registry reference, a signer) is audited.
            let recorded = &version.provenance;
            let new_source = provenance.source.is_some() && provenance.source != recorded.source;
            if new_source || provenance.signers.iter().any(|s| !recorded.signers.contains(s)) {
                let audit = AuditEntry::new(actor, Some(tenant), "tool.provenance", &tool.name)
                    .sha256(&version.sha256)
                    .detail(serde_json::json!({
                        "toolId": tool.id,
                        "version": version.number,
                        "provenance": provenance.to_json(),
                    }));
                self.store.record_audit(&audit)?;
            }
            return Ok(Deployed {
                tool_id: tool.id,
                name: tool.name.clone(),
                version: version.number,
                sha256: version.sha256.clone(),
                signature_sha256: version.signature_sha256.clone(),
                previous_version,
                created: false,
                provenance: version.provenance.clone(),
            });
        }
        let number = existing.as_ref().map_or(1, |t| t.newest_number() + 1);
        self.check_version_quota(tenant, quotas, package)?;
        // Stored tools count, retired or not: retiring frees no room (the
        // tool keeps its versions and blobs), else deploy, retire, deploy
        // another would store tools without end.
        if existing.is_none() && self.registry.stored_tools(tenant) >= quotas.max_tools as usize {
            return Err(DeployError::TooManyTools { tenant: tenant.to_string(), max: quotas.max_tools });
        }
        if let Some(expected) = expect_version.filter(|e| *e != number) {
            return Err(DeployError::UnexpectedVersion { expected, actual: number });
        }
        // The locked-signature rule holds over the tool's whole history, not
        // just its current version: a caller may be pinned to any of them,
        // and a tool whose versions are all retired keeps its toolId.
        for earlier in existing.iter().flat_map(|t| t.versions_before(None, usize::MAX)) {
            let diff = SignatureDiff::between(&earlier.signature, &package.signature);
            if !diff.is_compatible() {
                return Err(DeployError::Breaking {
                    tool: package.signature.name.clone(),
                    current: earlier.number,
                    diff,
                });
            }
        }

        let tool_id = existing.as_ref().map_or_else(Uuid::new_v4, |t| t.id);
        let stored = StoredVersion {
            tool_id,
            tenant: tenant.to_string(),
            name: package.signature.name.clone(),
            version: number,
            sha256: package.sha256.clone(),
            signature_sha256: package.signature.sha256(),
            signature: package.signature.clone(),
            manifest: package.manifest.clone(),
            provenance: provenance.clone(),
            created_at: unix_now(),
            retired_at: None,
        };
        let audit = AuditEntry::new(actor, Some(tenant), "tool.deploy", &stored.name).sha256(&stored.sha256).detail(
            serde_json::json!({
                "toolId": tool_id,
                "version": number,
                "previousVersion": previous_version,
                "provenance": provenance.to_json(),
            }),
        );
        self.store.insert_version(&stored, bytes, &audit)?;
        let deployed = Deployed {
            tool_id,
            name: stored.name.clone(),
            version: number,
            sha256: stored.sha256.clone(),
            signature_sha256: stored.signature_sha256.clone(),
            previous_version,
            created: true,
            provenance: provenance.clone(),
        };
        self.registry.insert(
            tool_id,
            tenant,
            &deployed.name,
            ToolVersion::from_stored(stored, Some(component.clone())),
        );
        self.metrics.deployed(tenant);
        Ok(deployed)
    }

    /// Refuses a new version of a tool that already has as many versions as
    /// its tenant's `maxVersionsPerTool` (retired ones count: they keep
    /// their rows and blobs). Bytes that are already a version pass.
    fn check_version_quota(&self, tenant: &str, quotas: &Quotas, package: &ToolPackage) -> Result<(), DeployError> {
        let Some(tool) = self.registry.by_name(tenant, &package.signature.name) else { return Ok(()) };
        if tool.version_count() >= quotas.max_versions_per_tool as usize
            && tool.version_with_sha256(&package.sha256).is_none()
        {
            return Err(DeployError::TooManyVersions {
                tenant: tenant.to_string(),
                tool: tool.name.clone(),
                max: quotas.max_versions_per_tool,
            });
        }
        Ok(())
    }

    /// Retires a version: it can no longer be invoked (callers get `410`),
    /// it stays listed and its bytes stay stored. Unpinned callers move to
    /// the newest version that is not retired. Retiring twice is a no-op.
    /// A version a live toolset pins is not retired
    /// ([`ChangeError::PinnedByToolsets`]).
    pub fn retire(&self, actor: &Principal, tenant: &str, tool_id: &str, version: u32) -> Result<(), ChangeError> {
        self.retire_forced(actor, tenant, tool_id, version, false)
    }

    /// [`Self::retire`]; with `force`, a version toolsets pin is retired
    /// too, and those toolsets mark it retired-pinned (docs/toolsets.md).
    pub fn retire_forced(
        &self,
        actor: &Principal,
        tenant: &str,
        tool_id: &str,
        version: u32,
        force: bool,
    ) -> Result<(), ChangeError> {
        let tool = self
            .tool(tenant, tool_id)
            .ok_or_else(|| ChangeError::NotFound(format!("there is no tool with id `{tool_id}`")))?;
        let target = tool
            .version(version)
            .ok_or_else(|| ChangeError::NotFound(format!("tool `{}` has no version {version}", tool.name)))?;
        let _changing = self.changes.lock().unwrap_or_else(|p| p.into_inner());
        if target.retired_at().is_some() {
            return Ok(());
        }
        let pinned_by = self.pinned_by(tenant, &tool.name, version);
        if !pinned_by.is_empty() && !force {
            let names = pinned_by.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ");
            return Err(ChangeError::PinnedByToolsets {
                message: format!(
                    "version {version} of `{}` is pinned by toolset {names}: pin another version there first, or retire it with force (the toolsets then mark it retired-pinned)",
                    tool.name
                ),
                toolsets: pinned_by,
            });
        }
        let at = unix_now();
        let audit = AuditEntry::new(actor, Some(tenant), "tool.retire", &tool.name)
            .sha256(&target.sha256)
            .detail(serde_json::json!({ "toolId": tool.id, "version": version, "pinnedBy": pinned_by }));
        self.store.retire_version(tool.id, version, at, &audit)?;
        // Its compiled code goes with it; calls already running keep theirs.
        let unloaded = target.retire(at);
        self.registry.changed(tenant);
        self.metrics.retired(tenant);
        tracing::info!(tenant, tool = tool.name, version, "version retired");
        if unloaded {
            tracing::info!(tenant, tool = tool.name, version, "unloaded compiled code of the retired version");
        }
        Ok(())
    }
}
