//! Secrets and config: the values publishers store for their tools (and
//! the operator passes at start), and what a tool's calls see of them.

use super::{ChangeError, ToolHost};
use crate::registry::{Tool, ToolVersion};
use crate::runtime::{self};
use crate::tenancy::{AuditEntry, Principal, Quotas};
use std::collections::BTreeMap;

impl ToolHost {
    /// The quotas of `tenant` (the defaults for one that does not exist).
    pub(super) fn quotas_of(&self, tenant: &str) -> Quotas {
        self.tenant(tenant).map(|t| t.record.quotas.clone()).unwrap_or_default()
    }

    /// Stores a tenant's secret (replacing any value it had); a new id only
    /// within the tenant's `maxSecrets`, checked by the store in the
    /// write's transaction.
    pub fn put_secret(&self, actor: &Principal, tenant: &str, id: &str, value: &str) -> Result<(), ChangeError> {
        // The audit entry names the secret, never its value or a hash of it.
        let audit = AuditEntry::new(actor, Some(tenant), "secret.put", id);
        self.put_secret_row(tenant, id, value, &audit)?;
        self.secrets.insert((tenant.to_string(), id.to_string()), value.to_string());
        tracing::info!(tenant, secret = id, "secret set");
        Ok(())
    }

    /// A secret row, within the tenant's `maxSecrets` (registry credentials
    /// are secrets too), or [`ChangeError::QuotaExceeded`], nothing stored.
    pub(super) fn put_secret_row(
        &self,
        tenant: &str,
        id: &str,
        value: &str,
        audit: &AuditEntry,
    ) -> Result<(), ChangeError> {
        let max = self.quotas_of(tenant).max_secrets;
        if !self.store.put_secret(tenant, id, value, audit, u64::from(max))? {
            return Err(ChangeError::QuotaExceeded {
                message: format!(
                    "the tenant stores {max} secrets (registry credentials included), as many as its quota `maxSecrets` allows; delete one, or ask the operator for more"
                ),
                quota: "maxSecrets",
                max,
            });
        }
        Ok(())
    }

    /// Deletes a tenant's secret.
    pub fn delete_secret(&self, actor: &Principal, tenant: &str, id: &str) -> Result<(), ChangeError> {
        let audit = AuditEntry::new(actor, Some(tenant), "secret.delete", id);
        if !self.store.delete_secret(tenant, id, &audit)? {
            return Err(ChangeError::NotFound(format!("there is no secret `{id}`")));
        }
        self.secrets.remove(&(tenant.to_string(), id.to_string()));
        tracing::info!(tenant, secret = id, "secret deleted");
        Ok(())
    }

    /// The ids of a tenant's stored secrets (never their values).
    pub fn secret_ids(&self, tenant: &str) -> Vec<String> {
        let mut ids: Vec<String> = self
            .secrets
            .iter()
            .filter(|e| e.key().0 == tenant && !Self::is_registry_credential(&e.key().1))
            .map(|e| e.key().1.clone())
            .collect();
        ids.sort();
        ids
    }

    /// Sets a config value of a tenant's tool (the tool need not be deployed
    /// yet, so config can come first); a new (tool, key) only within the
    /// tenant's `maxConfigValues`, checked by the store in the write's
    /// transaction. The audit entry records the value's size and sha256,
    /// not the value: the audit log is kept for good and cannot be pruned.
    pub fn put_config(
        &self,
        actor: &Principal,
        tenant: &str,
        tool: &str,
        key: &str,
        value: &str,
    ) -> Result<(), ChangeError> {
        let audit = AuditEntry::new(actor, Some(tenant), "config.put", format!("{tool}.{key}"))
            .detail(serde_json::json!({ "bytes": value.len(), "sha256": crate::digest::sha256_hex(value.as_bytes()) }));
        let row = (tenant.to_string(), tool.to_string(), key.to_string(), value.to_string());
        let max = self.quotas_of(tenant).max_config_values;
        if !self.store.put_config(&row, &audit, u64::from(max))? {
            return Err(ChangeError::QuotaExceeded {
                message: format!(
                    "the tenant stores {max} config values, as many as its quota `maxConfigValues` allows; delete one, or ask the operator for more"
                ),
                quota: "maxConfigValues",
                max,
            });
        }
        self.stored_config.entry((row.0, row.1)).or_default().insert(row.2, row.3);
        Ok(())
    }

    /// Deletes a config value.
    pub fn delete_config(&self, actor: &Principal, tenant: &str, tool: &str, key: &str) -> Result<(), ChangeError> {
        let audit = AuditEntry::new(actor, Some(tenant), "config.delete", format!("{tool}.{key}"));
        if !self.store.delete_config(tenant, tool, key, &audit)? {
            return Err(ChangeError::NotFound(format!("`{tool}` has no stored config value `{key}`")));
        }
        if let Some(mut values) = self.stored_config.get_mut(&(tenant.to_string(), tool.to_string())) {
            values.remove(key);
        }
        Ok(())
    }

    /// A tenant's stored config, by tool then key.
    pub fn stored_config(&self, tenant: &str) -> BTreeMap<String, BTreeMap<String, String>> {
        self.stored_config
            .iter()
            .filter(|e| e.key().0 == tenant)
            .map(|e| (e.key().1.clone(), e.value().clone()))
            .collect()
    }

    /// The config a tool's calls see, apart from the manifest's defaults:
    /// what the publisher stored, overridden by the operator's command line.
    pub(super) fn config_values(&self, tool: &Tool) -> BTreeMap<String, String> {
        let key = (tool.tenant.clone(), tool.name.clone());
        let mut values = self.stored_config.get(&key).map(|v| v.clone()).unwrap_or_default();
        if let Some(operator) = self.tool_config.get(&key) {
            values.extend(operator.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        values
    }

    /// Config keys a tool requires that neither its tenant, the operator nor
    /// a default supplies (reported at start so they can be fixed).
    pub fn missing_config(&self, tool: &Tool) -> Vec<String> {
        let Some(version) = tool.current() else { return Vec::new() };
        let config = runtime::effective_config(&version.manifest, Some(&self.config_values(tool)));
        version
            .manifest
            .config
            .iter()
            .filter(|(k, v)| v.required && !config.contains_key(*k))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Secrets `version` declares that neither the caller supplied nor its
    /// tenant stored.
    pub fn missing_secrets(
        &self,
        tool: &Tool,
        version: &ToolVersion,
        supplied: &BTreeMap<String, String>,
    ) -> Vec<String> {
        version
            .manifest
            .secrets
            .iter()
            .filter(|id| {
                !supplied.contains_key(*id) && !self.secrets.contains_key(&(tool.tenant.clone(), (*id).clone()))
            })
            .cloned()
            .collect()
    }
}
