//! The supply chain, in the core: deploys by OCI reference, each tenant's
//! trust policy, and its registry credentials.
//!
//! A deploy by reference pulls the component (under the outbound policy,
//! with the tenant's credentials for that registry), lets the tenant's trust
//! policy judge it, then takes the same path as posted bytes: compatibility
//! rule, quotas, compile cache, store. The bytes go into the store, so the
//! other replicas of a fleet serve the version without pulling it.
//!
//! Registry credentials are sealed in the secrets table under ids
//! (`registry:HOST`) that no tool can name (tool secret ids have no `:`),
//! and are never listed with the tenant's secrets nor shown again.

use super::{ChangeError, DeployError, DeploySlot, Deployed, ToolHost};
use crate::store::StoreError;
use crate::supply::oci::{Credentials, OciClient, OciError, OciOptions};
use crate::supply::{Evidence, Provenance, Reference, RegistrySignatures, Source, TrustPolicy, TrustPolicyJson};
use crate::tenancy::{AuditEntry, Principal, Role};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// The tenant setting that holds its trust policy.
pub(super) const TRUST_SETTING: &str = "trust-policy";

/// How often a trust-policy change is checked again against a policy that
/// another writer replaced while it was being checked.
const TRUST_WRITE_ATTEMPTS: usize = 8;
/// The secret id prefix of registry credentials.
const CREDENTIALS_PREFIX: &str = "registry:";
/// Largest component pulled, whatever a tenant's quota says (as for posted bytes).
const MAX_PULLED_BYTES: u64 = 256 << 20;

/// How the server reaches registries (the operator's flags).
#[derive(Debug, Clone)]
pub struct RegistryOptions {
    /// Registries reached over plain http (`--insecure-registry`).
    pub insecure: Vec<String>,
    /// How long a pull may take (`--registry-timeout`).
    pub timeout: Duration,
}

impl Default for RegistryOptions {
    fn default() -> Self {
        RegistryOptions { insecure: Vec::new(), timeout: Duration::from_secs(120) }
    }
}

/// The core's supply-chain state.
pub(super) struct SupplyState {
    /// Trust policies by tenant (none: unsigned deploys allowed, no keys).
    trust: dashmap::DashMap<String, TrustPolicy>,
    /// The registry client; `None` if it could not be built (pulls then fail).
    client: Option<OciClient>,
    /// One pull per tenant at a time: a registry that stalls holds a deploy
    /// slot until the pull's deadline, and must not hold every slot.
    pulling: dashmap::DashMap<String, Arc<tokio::sync::Semaphore>>,
    /// Re-verifications of live versions under way: each reads every live
    /// version's bytes and checks their signatures, off the async workers.
    pub(super) reverifying: Arc<tokio::sync::Semaphore>,
}

/// Re-verifications of live versions run at once, across the server.
pub(super) const MAX_REVERIFYING: usize = 2;

impl SupplyState {
    pub(super) fn new(options: &RegistryOptions, limits: Arc<crate::egress::OutboundLimits>) -> SupplyState {
        let client = OciClient::new(OciOptions {
            insecure: options.insecure.clone(),
            limits: Some(limits),
            timeout: options.timeout,
        })
        .inspect_err(|e| tracing::error!(error = %e, "no registry client: deploys by reference will fail"))
        .ok();
        SupplyState {
            trust: dashmap::DashMap::new(),
            client,
            pulling: dashmap::DashMap::new(),
            reverifying: Arc::new(tokio::sync::Semaphore::new(MAX_REVERIFYING)),
        }
    }
}

/// The `registry/repository` a version was pulled from, for key scopes.
fn repository_of(source: Option<&Source>) -> Option<String> {
    let reference = Reference::parse(&source?.reference).ok()?;
    Some(format!("{}/{}", reference.registry, reference.repository))
}

/// A registry name as credentials are stored under: `host[:port]`.
fn check_registry(registry: &str) -> Result<(), ChangeError> {
    Reference::parse(&format!("{registry}/x")).ok().filter(|r| r.registry == registry).map(|_| ()).ok_or_else(|| {
        ChangeError::Invalid(format!(
            "`{registry}` is not a registry: write host or host:port, like ghcr.io or 127.0.0.1:5000"
        ))
    })
}

impl ToolHost {
    /// A tenant's trust policy (the default: no keys, nothing required).
    pub fn trust_policy(&self, tenant: &str) -> TrustPolicy {
        self.supply.trust.get(tenant).map(|p| p.clone()).unwrap_or_default()
    }

    /// Sets a tenant's trust policy (audited). It judges deploys from now
    /// on; running versions keep running ([`ToolHost::refused_versions`]
    /// says which it would refuse).
    ///
    /// What an operator set, only an operator relaxes: a publisher may
    /// replace an operator's policy only with one at least as strict (a
    /// signature still required, no key added, no scope widened). The
    /// operator's policy is kept with the tenant's, so a publisher may
    /// also undo its own tightening. A refused attempt is audited too.
    pub fn set_trust_policy(&self, actor: &Principal, tenant: &str, json: &TrustPolicyJson) -> Result<(), ChangeError> {
        if self.tenant(tenant).is_none() {
            return Err(ChangeError::NotFound(format!("there is no tenant `{tenant}`")));
        }
        let asked = TrustPolicy::from_json(json).map_err(ChangeError::Invalid)?;
        let by_operator = actor.role == Role::Operator;
        // The floor as the store has it, not this replica's copy, written
        // back only if nobody changed it meanwhile (a compare-and-set, so
        // that a publisher's change on another replica at the same moment
        // cannot drop an operator's floor); on a lost race, read again.
        for _ in 0..TRUST_WRITE_ATTEMPTS {
            let stored = self
                .store
                .settings()?
                .into_iter()
                .find(|(t, key, _)| t == tenant && key == TRUST_SETTING)
                .map(|(_, _, text)| text);
            let current = stored.as_deref().map(TrustPolicy::from_stored).unwrap_or_default();
            let mut policy = asked.clone();
            if by_operator {
                policy.operator = policy.require_signature.then(|| Box::new(policy.clone()));
            } else if let Some(operator) = current.operator {
                if let Err(why) = policy.at_least_as_strict_as(&operator) {
                    let audit = AuditEntry::new(actor, Some(tenant), "trust-policy.refused", tenant)
                        .detail(json!({ "why": why, "policy": policy.to_api_json() }));
                    self.store.record_audit(&audit)?;
                    tracing::warn!(
                        tenant,
                        key = actor.key_id,
                        why,
                        "a publisher tried to relax an operator's trust policy"
                    );
                    return Err(ChangeError::Forbidden(format!(
                        "an operator set this tenant's trust policy, and a publisher may only tighten it: {why}; ask an operator to relax it"
                    )));
                }
                policy.operator = Some(operator);
            }
            let mut detail = policy.to_api_json();
            detail["setBy"] = json!(actor.role.as_str());
            let audit = AuditEntry::new(actor, Some(tenant), "trust-policy.put", tenant).detail(detail);
            let value = serde_json::to_string(&policy.to_stored()).unwrap_or_default();
            let setting = (tenant.to_string(), TRUST_SETTING.into(), value);
            if self.store.replace_setting(&setting, stored.as_deref(), &audit)? {
                self.supply.trust.insert(tenant.to_string(), policy);
                return Ok(());
            }
        }
        Err(ChangeError::Conflict(
            "the trust policy kept changing while this change was checked against it: try again".into(),
        ))
    }

    /// [`ToolHost::versions_refused_by_policy`] on a blocking thread (it
    /// reads and checks every live version of the tenant), at most
    /// [`MAX_REVERIFYING`] at once: the rest wait their turn.
    pub async fn refused_versions(self: Arc<Self>, tenant: String) -> Vec<Value> {
        let Ok(permit) = self.supply.reverifying.clone().acquire_owned().await else {
            return Vec::new();
        };
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            self.versions_refused_by_policy(&tenant)
        })
        .await
        .unwrap_or_default()
    }

    /// The live versions of `tenant` its current trust policy would refuse
    /// if they were deployed now: a version passes when a signer recorded
    /// at its deploy is still trusted, or the policy's own judgement of its
    /// stored bytes (embedded signatures, against the current keys) passes.
    pub fn versions_refused_by_policy(&self, tenant: &str) -> Vec<Value> {
        let policy = self.trust_policy(tenant);
        if !policy.require_signature {
            return Vec::new();
        }
        let mut refused = Vec::new();
        for tool in self.registry.all().into_iter().filter(|t| t.tenant == tenant) {
            for version in tool.versions_before(None, usize::MAX) {
                let repository = repository_of(version.provenance.source.as_ref());
                let trusted: Vec<String> =
                    policy.keys.iter().filter(|k| k.covers(repository.as_deref())).map(|k| k.fingerprint()).collect();
                if version.retired_at().is_some()
                    || (policy.unreadable.is_none()
                        && version.provenance.signers.iter().any(|s| trusted.contains(&s.fingerprint)))
                {
                    continue;
                }
                let passes = self.store.blob(&version.sha256).is_ok_and(|bytes| {
                    let evidence = Evidence { component: &bytes, registry: RegistrySignatures::NotFetched, repository };
                    policy.judge(&evidence).is_ok()
                });
                if !passes {
                    refused.push(json!({
                        "toolId": tool.id,
                        "name": tool.name,
                        "version": version.number,
                        "sha256": version.sha256,
                        "provenance": version.provenance.to_json(),
                    }));
                }
            }
        }
        refused.sort_by(|a, b| {
            (a["name"].as_str(), a["version"].as_u64()).cmp(&(b["name"].as_str(), b["version"].as_u64()))
        });
        refused
    }

    /// Loads the tenants' trust policies, replacing what was loaded before.
    pub(super) fn load_trust_policies(&self, settings: &[crate::store::StoredSetting]) -> Result<(), StoreError> {
        let mut loaded = std::collections::HashMap::new();
        for (tenant, key, value) in settings.iter().cloned() {
            if key == TRUST_SETTING {
                // One that cannot be read or does not validate refuses every deploy.
                let policy = TrustPolicy::from_stored(&value);
                if let Some(why) = &policy.unreadable {
                    tracing::error!(
                        tenant,
                        why,
                        "a stored trust policy cannot be read; deploys to the tenant are refused until it is set again"
                    );
                }
                loaded.insert(tenant, policy);
            }
        }
        self.supply.trust.retain(|tenant, _| loaded.contains_key(tenant));
        for (tenant, policy) in loaded {
            self.supply.trust.insert(tenant, policy);
        }
        Ok(())
    }

    /// Stores a tenant's credentials for `registry` (audited, the password never).
    pub fn put_registry_credentials(
        &self,
        actor: &Principal,
        tenant: &str,
        registry: &str,
        credentials: &Credentials,
    ) -> Result<(), ChangeError> {
        check_registry(registry)?;
        if credentials.username.is_empty() || credentials.username.len() > 256 || credentials.password.len() > 8192 {
            return Err(ChangeError::Invalid("`username` is 1 to 256 characters and `password` at most 8 KiB".into()));
        }
        let id = format!("{CREDENTIALS_PREFIX}{registry}");
        let audit = AuditEntry::new(actor, Some(tenant), "registry-credentials.put", registry)
            .detail(json!({ "username": credentials.username }));
        let value = serde_json::to_string(credentials).unwrap_or_default();
        self.put_secret_row(tenant, &id, &value, &audit)?;
        self.secrets.insert((tenant.to_string(), id), value);
        Ok(())
    }

    /// Deletes a tenant's credentials for `registry`.
    pub fn delete_registry_credentials(
        &self,
        actor: &Principal,
        tenant: &str,
        registry: &str,
    ) -> Result<(), ChangeError> {
        let id = format!("{CREDENTIALS_PREFIX}{registry}");
        let audit = AuditEntry::new(actor, Some(tenant), "registry-credentials.delete", registry);
        if !self.store.delete_secret(tenant, &id, &audit)? {
            return Err(ChangeError::NotFound(format!("there are no credentials for `{registry}`")));
        }
        self.secrets.remove(&(tenant.to_string(), id));
        Ok(())
    }

    /// The registries a tenant has credentials for, with their user names.
    pub fn registry_credentials(&self, tenant: &str) -> Vec<Value> {
        let mut out: Vec<Value> = self
            .secrets
            .iter()
            .filter(|e| e.key().0 == tenant)
            .filter_map(|e| {
                let registry = e.key().1.strip_prefix(CREDENTIALS_PREFIX)?;
                let credentials: Credentials = serde_json::from_str(e.value()).ok()?;
                Some(json!({ "registry": registry, "username": credentials.username }))
            })
            .collect();
        out.sort_by(|a, b| a["registry"].as_str().cmp(&b["registry"].as_str()));
        out
    }

    /// Whether a stored secret id is a registry credential (never a tool's).
    pub(super) fn is_registry_credential(id: &str) -> bool {
        id.starts_with(CREDENTIALS_PREFIX)
    }

    fn credentials_for(&self, tenant: &str, registry: &str) -> Option<Credentials> {
        let id = format!("{CREDENTIALS_PREFIX}{registry}");
        self.secrets.get(&(tenant.to_string(), id)).and_then(|v| serde_json::from_str(v.value()).ok())
    }

    /// Deploys the component `reference` names, pulled from its registry,
    /// in a deploy slot already taken. The version records the reference
    /// and the manifest's digest; a tag is resolved once, here: deploying
    /// the same tag again after it moved makes a new version (under the
    /// usual rules), never a silent change of this one.
    pub async fn deploy_reference(
        self: Arc<Self>,
        slot: DeploySlot,
        actor: Principal,
        tenant: String,
        reference: &str,
        expect_version: Option<u32>,
    ) -> Result<Deployed, DeployError> {
        let reference = Reference::parse(reference).map_err(OciError::InvalidReference)?;
        let quotas =
            self.tenant(&tenant).ok_or_else(|| DeployError::UnknownTenant(tenant.clone()))?.record.quotas.clone();
        let policy = self.trust_policy(&tenant);
        let client = self.supply.client.as_ref().ok_or_else(|| {
            OciError::Unreachable(reference.registry.clone(), "this server has no registry client".into())
        })?;
        let permits = self
            .supply
            .pulling
            .entry(tenant.clone())
            .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(1)))
            .clone();
        let _pulling = permits.try_acquire_owned().map_err(|_| DeployError::TenantPulling(tenant.clone()))?;
        let credentials = self.credentials_for(&tenant, &reference.registry);
        let max = quotas.max_component_bytes.min(MAX_PULLED_BYTES);
        let (pulled, signatures) =
            client.pull(&reference, credentials.as_ref(), max, policy.wants_cosign()).await.inspect_err(|e| {
                tracing::warn!(tenant, reference = %reference, error = %e, "a deploy by reference could not pull from its registry");
            })?;
        let registry = match signatures {
            None => RegistrySignatures::NotFetched,
            Some(Ok(signatures)) => {
                RegistrySignatures::Found { signatures, manifest_digest: pulled.manifest_digest.clone() }
            }
            Some(Err(why)) => RegistrySignatures::Unavailable(why),
        };
        let source = Source { reference: reference.to_string(), manifest_digest: pulled.manifest_digest.clone() };
        let host = self.clone();
        tokio::task::spawn_blocking(move || {
            host.deploy_judged(slot, &actor, &tenant, &pulled.bytes, expect_version, Some(source), registry)
        })
        .await
        .map_err(|_| DeployError::Interrupted)?
    }

    /// The trust policy's verdict on a component about to be deployed: its
    /// provenance, or the refusal.
    pub(super) fn judge(
        &self,
        tenant: &str,
        bytes: &[u8],
        source: Option<Source>,
        registry: RegistrySignatures,
    ) -> Result<Provenance, DeployError> {
        let repository = repository_of(source.as_ref());
        let signers = self.trust_policy(tenant).judge(&Evidence { component: bytes, registry, repository }).inspect_err(|e| {
            tracing::warn!(tenant, source = source.as_ref().map(|s| s.reference.as_str()), found = ?e.found, "the trust policy refused a deploy");
        })?;
        Ok(Provenance { source, signers })
    }
}
