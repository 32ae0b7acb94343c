//! CHEQ settings of a tenant: its external confirmation server and a
//! publisher's overrides of its tools' confirmation policies, stored as
//! tenant settings and loaded again when another replica changes them.

use crate::cheq::ConfirmationPolicy;
use crate::host::{ChangeError, ToolHost};
use crate::store::StoreError;
use crate::tenancy::{AuditEntry, Principal};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::sync::Arc;
use uuid::Uuid;

/// A tenant's external confirmation server: where end users confirm (the
/// URI pack's confirmation URI), and the keys its signatures are checked
/// against.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConfirmationServer {
    /// The confirmation server's URI (figure 3).
    pub uri: String,
    /// Where its JWKS is published.
    pub jwks_url: String,
}

/// The tenant setting that holds its confirmation server.
const SERVER_SETTING: &str = "confirmation-server";

/// The tenant setting that holds a publisher's override of a tool's policy.
fn override_setting(tool_id: Uuid) -> String {
    format!("confirmation:{tool_id}")
}

impl ToolHost {
    /// Loads the tenants' CHEQ settings, replacing what was loaded before
    /// (another replica may have changed or removed some).
    pub(in crate::host) fn load_cheq_settings(
        &self,
        settings: &[crate::store::StoredSetting],
    ) -> Result<(), StoreError> {
        let mut servers = std::collections::HashMap::new();
        let mut overrides = std::collections::HashMap::new();
        for (tenant, key, value) in settings.iter().cloned() {
            let what = format!("tenant {tenant} setting {key}");
            if key == SERVER_SETTING {
                let server: ConfirmationServer =
                    serde_json::from_str(&value).map_err(|e| StoreError::Decode(what, e))?;
                servers.insert(tenant, server);
            } else if let Some(tool_id) = key.strip_prefix("confirmation:").and_then(|id| Uuid::parse_str(id).ok()) {
                let policy: ConfirmationPolicy =
                    serde_json::from_str(&value).map_err(|e| StoreError::Decode(what, e))?;
                overrides.insert(tool_id, (tenant, policy));
            }
        }
        self.cheq.servers.retain(|tenant, _| servers.contains_key(tenant));
        for (tenant, server) in servers {
            self.cheq.servers.insert(tenant, server);
        }
        self.cheq.overrides.retain(|tool_id, _| overrides.contains_key(tool_id));
        for (tool_id, (tenant, policy)) in overrides {
            // An override changes a tool's listing (its confirmation need).
            if self.cheq.overrides.get(&tool_id).is_none_or(|entry| entry.0 != policy) {
                let compiled = Arc::new(policy.compile());
                self.cheq.overrides.insert(tool_id, (policy, compiled));
                self.registry.changed(&tenant);
            }
        }
        Ok(())
    }

    /// The tenant's external confirmation server, if it has one.
    pub fn confirmation_server(&self, tenant: &str) -> Option<ConfirmationServer> {
        self.cheq.servers.get(tenant).map(|s| s.clone())
    }

    /// Sets (or with `None` removes) the tenant's external confirmation
    /// server.
    pub fn set_confirmation_server(
        &self,
        actor: &Principal,
        tenant: &str,
        server: Option<ConfirmationServer>,
    ) -> Result<(), ChangeError> {
        match server {
            Some(server) => {
                if !(server.uri.starts_with("https://") || server.uri.starts_with("http://")) {
                    return Err(ChangeError::Invalid("`uri` must be an http(s) URL".into()));
                }
                self.cheq
                    .jwks
                    .check_url(&server.jwks_url)
                    .map_err(|e| ChangeError::Invalid(format!("`jwks_url`: {e}")))?;
                let value = serde_json::to_string(&server).unwrap_or_default();
                let audit = AuditEntry::new(actor, Some(tenant), "cheq.server.put", tenant)
                    .detail(json!({ "uri": server.uri, "jwks_url": server.jwks_url }));
                self.store.put_setting(&(tenant.to_string(), SERVER_SETTING.into(), value), &audit)?;
                if let Some(old) = self.cheq.servers.insert(tenant.to_string(), server) {
                    self.cheq.jwks.forget(&old.jwks_url);
                }
            }
            None => {
                let audit = AuditEntry::new(actor, Some(tenant), "cheq.server.delete", tenant);
                if !self.store.delete_setting(tenant, SERVER_SETTING, &audit)? {
                    return Err(ChangeError::NotFound("the tenant has no external confirmation server".into()));
                }
                if let Some((_, old)) = self.cheq.servers.remove(tenant) {
                    self.cheq.jwks.forget(&old.jwks_url);
                }
            }
        }
        Ok(())
    }

    /// The tenant's override of a tool's confirmation policy, if any.
    pub fn confirmation_override(&self, tool_id: Uuid) -> Option<ConfirmationPolicy> {
        self.cheq.overrides.get(&tool_id).map(|entry| entry.0.clone())
    }

    /// Sets (or with `None` removes) a tenant's override of a tool's
    /// confirmation policy, whatever the tool declared. A condition must
    /// compile and name inputs of the tool's newest version.
    pub fn set_confirmation_override(
        &self,
        actor: &Principal,
        tenant: &str,
        tool_id: &str,
        policy: Option<ConfirmationPolicy>,
    ) -> Result<(), ChangeError> {
        let tool =
            self.tool(tenant, tool_id).ok_or_else(|| ChangeError::NotFound(format!("there is no tool {tool_id}")))?;
        let key = override_setting(tool.id);
        match policy {
            Some(policy) => {
                let newest = tool.version(tool.newest_number());
                let inputs: Vec<&str> = newest
                    .as_ref()
                    .map(|v| v.signature.inputs.iter().map(|p| p.name.as_str()).collect())
                    .unwrap_or_default();
                policy.check(&inputs)?;
                let value = serde_json::to_string(&policy).unwrap_or_default();
                let audit = AuditEntry::new(actor, Some(tenant), "cheq.policy.put", tool.id.to_string())
                    .detail(serde_json::to_value(&policy).unwrap_or_default());
                self.store.put_setting(&(tenant.to_string(), key, value), &audit)?;
                let compiled = Arc::new(policy.compile());
                self.cheq.overrides.insert(tool.id, (policy, compiled));
            }
            None => {
                let audit = AuditEntry::new(actor, Some(tenant), "cheq.policy.delete", tool.id.to_string());
                if !self.store.delete_setting(tenant, &key, &audit)? {
                    return Err(ChangeError::NotFound(format!("{tool_id} has no confirmation override")));
                }
                self.cheq.overrides.remove(&tool.id);
            }
        }
        // The listings that say which tools need confirmation changed.
        self.registry.changed(tenant);
        Ok(())
    }
}
