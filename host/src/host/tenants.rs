//! Tenants, API keys and the audit log: who may do what, within which
//! quotas, and the record of what they did.

use super::{ChangeError, Tenant, ToolHost};
use crate::store::{StoreError, Topic};
use crate::tenancy::{
    self, AuditEntry, AuditQuery, KeyRecord, NewKey, Principal, Quotas, Role, TenantRecord, unix_now,
};
use std::sync::Arc;

impl ToolHost {
    /// The tenant called `name`.
    pub fn tenant(&self, name: &str) -> Option<Arc<Tenant>> {
        self.tenants.get(name).map(|t| t.clone())
    }

    /// Every tenant, in name order.
    pub fn tenants(&self) -> Vec<TenantRecord> {
        let mut all: Vec<TenantRecord> = self.tenants.iter().map(|t| t.record.clone()).collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// Creates a tenant with default quotas (patched by `quotas`, a JSON
    /// object of [`Quotas`] fields).
    pub fn create_tenant(
        &self,
        actor: &Principal,
        name: &str,
        public_enumeration: bool,
        quotas: &serde_json::Value,
    ) -> Result<TenantRecord, ChangeError> {
        if !tenancy::is_tenant_name(name) {
            return Err(ChangeError::Invalid(
                "a tenant name is 1 to 63 lowercase letters, digits or `-`, not starting with `-`".into(),
            ));
        }
        let quotas = Quotas::default().patched(quotas).map_err(ChangeError::Invalid)?;
        let _changing = self.changes.lock().unwrap_or_else(|p| p.into_inner());
        self.refresh_tenants()?;
        if self.tenants.contains_key(name) {
            return Err(ChangeError::Conflict(format!("tenant `{name}` already exists")));
        }
        let record = TenantRecord { name: name.to_string(), public_enumeration, quotas, created_at: unix_now() };
        self.save_tenant(actor, record, "tenant.create")
    }

    /// In a fleet, reads the tenants again before one is created or
    /// changed: another replica may have changed it a moment ago, and a
    /// change made from a stale copy would undo theirs.
    pub(super) fn refresh_tenants(&self) -> Result<(), StoreError> {
        if self.store.shared() { self.reload(Topic::Tenants) } else { Ok(()) }
    }

    /// Changes a tenant's public enumeration and quotas (fields of `quotas`
    /// not given keep their values). The new quotas apply to the next call.
    pub fn update_tenant(
        &self,
        actor: &Principal,
        name: &str,
        public_enumeration: Option<bool>,
        quotas: &serde_json::Value,
    ) -> Result<TenantRecord, ChangeError> {
        let _changing = self.changes.lock().unwrap_or_else(|p| p.into_inner());
        self.refresh_tenants()?;
        let current = self.tenant(name).ok_or_else(|| ChangeError::NotFound(format!("there is no tenant `{name}`")))?;
        let record = TenantRecord {
            quotas: current.record.quotas.patched(quotas).map_err(ChangeError::Invalid)?,
            public_enumeration: public_enumeration.unwrap_or(current.record.public_enumeration),
            ..current.record.clone()
        };
        self.save_tenant(actor, record, "tenant.update")
    }

    /// Stores a tenant's settings with their audit entry, then makes them
    /// the ones calls see. Called with `changes` held.
    fn save_tenant(&self, actor: &Principal, record: TenantRecord, action: &str) -> Result<TenantRecord, ChangeError> {
        let detail = serde_json::json!({ "publicEnumeration": record.public_enumeration, "quotas": record.quotas });
        let audit = AuditEntry::new(actor, Some(&record.name), action, &record.name).detail(detail);
        self.store.put_tenant(&record, &audit)?;
        self.put_tenant_state(record.clone());
        tracing::info!(tenant = record.name, action, "tenant settings stored");
        Ok(record)
    }

    /// Makes `record` the settings calls see, carrying over what the
    /// tenant had running ([`Tenant::succeeding`]) unless nothing changed.
    pub(super) fn put_tenant_state(&self, record: TenantRecord) {
        let share = self.fleet.replicas();
        let next = match self.tenants.get(&record.name).map(|t| t.clone()) {
            Some(current) if current.record == record && current.share == share => return,
            Some(current) => current.succeeding(record, share),
            None => Tenant::new(record, share),
        };
        self.tenants.insert(next.record.name.clone(), Arc::new(next));
    }

    /// Creates an API key; the returned key text is the only copy.
    pub fn create_key(
        &self,
        actor: &Principal,
        tenant: Option<&str>,
        role: Role,
        label: Option<String>,
    ) -> Result<NewKey, ChangeError> {
        self.create_key_with(actor, tenant, role, label, |_| Ok(()))
    }

    /// Creates an API key, handing it to `keep` before it is stored: the key
    /// becomes live only once `keep` has it (the first operator key is
    /// written to its file first, so a crash never leaves a live key nobody
    /// holds). When `keep` fails, nothing is stored.
    pub fn create_key_with(
        &self,
        actor: &Principal,
        tenant: Option<&str>,
        role: Role,
        label: Option<String>,
        keep: impl FnOnce(&NewKey) -> std::io::Result<()>,
    ) -> Result<NewKey, ChangeError> {
        self.new_key(actor, tenant, role, label, None, keep)
    }

    /// Creates a consumer key of `tenant` scoped to its toolset `toolset`:
    /// it opens that toolset's roots and nothing else, and is revoked when
    /// the toolset is deleted.
    pub fn create_toolset_key(
        &self,
        actor: &Principal,
        tenant: &str,
        toolset: &str,
        label: Option<String>,
    ) -> Result<NewKey, ChangeError> {
        // Not while this replica deletes it; the store checks again, in the
        // transaction, for a delete on another replica.
        let _writing = self.toolsets.writing.lock().unwrap_or_else(|p| p.into_inner());
        let gone = || {
            ChangeError::NotFound(format!(
                "tenant `{tenant}` has no toolset `{}`",
                crate::supply::outside_text(toolset)
            ))
        };
        if self.tenants.contains_key(tenant) && !self.has_toolset(tenant, toolset) {
            return Err(gone());
        }
        match self.new_key(actor, Some(tenant), Role::Consumer, label, Some(toolset.to_string()), |_| Ok(())) {
            Err(ChangeError::Store(StoreError::Conflict(_))) => Err(gone()),
            made => made,
        }
    }

    fn new_key(
        &self,
        actor: &Principal,
        tenant: Option<&str>,
        role: Role,
        label: Option<String>,
        toolset: Option<String>,
        keep: impl FnOnce(&NewKey) -> std::io::Result<()>,
    ) -> Result<NewKey, ChangeError> {
        match (role, tenant) {
            (Role::Operator, Some(_)) => {
                return Err(ChangeError::Invalid("an operator key belongs to no tenant; leave out `tenant`".into()));
            }
            (Role::Publisher | Role::Consumer, None) => {
                return Err(ChangeError::Invalid(format!("a {} key needs a `tenant`", role.as_str())));
            }
            (_, Some(t)) if !self.tenants.contains_key(t) => {
                return Err(ChangeError::NotFound(format!("there is no tenant `{t}`")));
            }
            _ => {}
        }
        let mut new = NewKey::generate(tenant.map(str::to_string), role, label, unix_now())
            .map_err(|e| ChangeError::Store(StoreError::Io(e)))?;
        new.record.toolset = toolset;
        keep(&new).map_err(|e| ChangeError::Store(StoreError::Io(e)))?;
        let audit = AuditEntry::new(actor, tenant, "key.create", &new.record.id).detail(
            serde_json::json!({ "role": role.as_str(), "label": new.record.label, "toolset": new.record.toolset }),
        );
        self.store.insert_key(&new.record, &audit)?;
        self.keys.insert(new.record.id.clone(), new.record.clone());
        tracing::info!(key_id = new.record.id, role = role.as_str(), tenant, "API key created");
        Ok(new)
    }

    /// Revokes a key: it stops working with the next request.
    pub fn revoke_key(&self, actor: &Principal, id: &str) -> Result<KeyRecord, ChangeError> {
        let record = self
            .keys
            .get(id)
            .map(|k| k.clone())
            .ok_or_else(|| ChangeError::NotFound(format!("there is no key `{id}`")))?;
        let at = unix_now();
        let audit = AuditEntry::new(actor, record.tenant.as_deref(), "key.revoke", id)
            .detail(serde_json::json!({ "role": record.role.as_str() }));
        if self.store.revoke_key(id, at, &audit)?
            && let Some(mut key) = self.keys.get_mut(id)
        {
            key.revoked_at = Some(at);
        }
        tracing::info!(key_id = id, "API key revoked");
        Ok(self.keys.get(id).map(|k| k.clone()).unwrap_or(record))
    }

    /// Every key (never the keys themselves), optionally one tenant's.
    pub fn keys(&self, tenant: Option<&str>) -> Vec<KeyRecord> {
        let mut keys: Vec<KeyRecord> = self
            .keys
            .iter()
            .filter(|k| tenant.is_none_or(|t| k.tenant.as_deref() == Some(t)))
            .map(|k| k.clone())
            .collect();
        keys.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        keys
    }

    /// A key the server itself uses, by name (see
    /// [`crate::store::RegistryStore::server_key`]).
    pub fn server_key(&self, name: &str) -> Result<[u8; 32], StoreError> {
        self.store.server_key(name)
    }

    /// Whether a live operator key is stored.
    pub fn has_operator_key(&self) -> bool {
        self.keys.iter().any(|k| k.role == Role::Operator && k.revoked_at.is_none())
    }

    /// Who presents `key`, if it is a live key.
    pub fn authenticate(&self, key: &str) -> Option<Principal> {
        if let Some(id) = tenancy::key_id(key)
            && let Some(record) = self.keys.get(id)
        {
            return (record.revoked_at.is_none() && tenancy::key_matches(key, &record.key_sha256)).then(|| Principal {
                key_id: record.id.clone(),
                role: record.role,
                tenant: record.tenant.clone(),
                token: None,
                toolset: record.toolset.clone(),
            });
        }
        let configured = self.operator_key_sha256.as_deref()?;
        tenancy::key_matches(key, configured).then(|| Principal::server(tenancy::ENV_OPERATOR_KEY_ID))
    }

    /// A page of the audit log, newest first.
    pub fn audit(&self, query: &AuditQuery) -> Result<Vec<AuditEntry>, StoreError> {
        self.store.audit(query)
    }
}
