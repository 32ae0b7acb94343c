//! The embedded registry: SQLite in the data dir.

mod authorizations;
mod migrations;

use super::{
    BlobStore, CallKey, ChangeFeed, Claimed, EXPIRIES_CLAIMED_UNTIL, ExpiredConfirmations, FORGOTTEN_FIRST, OAuthGrant,
    RegistryStore, SecretsCipher, StoreError, StoredConfig, StoredConfirmation, StoredDesignerSession, StoredSecret,
    StoredSession, StoredSetting, StoredToolset, StoredVersion, UsageRow, usage_of,
};
use crate::tenancy::{
    AuditEntry, AuditQuery, ConfirmationBound, ConfirmationLimit, ConfirmationUsage, KeyRecord, LedgerBound, Role,
    TenantRecord, unix_now,
};
use migrations::MIGRATIONS;
use rusqlite::{Connection, OptionalExtension, params};
use std::path::Path;
use std::sync::Mutex;
use uuid::Uuid;

/// An `oauth_grants` row, its columns in the table's order.
fn oauth_grant_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<OAuthGrant> {
    Ok(OAuthGrant {
        token_sha256: r.get(0)?,
        kind: r.get(1)?,
        tenant: r.get(2)?,
        client_id: r.get(3)?,
        end_user: r.get(4)?,
        scope: r.get(5)?,
        resource: r.get(6)?,
        family: r.get(7)?,
        detail: r.get(8)?,
        expires_at: r.get(9)?,
        used_at: r.get(10)?,
        revoked_at: r.get(11)?,
    })
}

/// The database file in the data dir.
const DB_FILE: &str = "registry.sqlite3";

/// The `store_meta` row that proves the secrets key is the one the stored
/// secrets were sealed with.
const KEY_CHECK: &str = "secrets-key-check";

/// Most transactions one statement of the retention sweep deletes. With
/// `secure_delete` on, a delete overwrites what it frees: one statement over
/// a backlog would hold the store's one connection, and every request
/// waiting on it, for as long as that takes. Between batches the lock is
/// released.
const SWEEP_BATCH: usize = 500;

/// Runs `delete`, one statement deleting at most [`SWEEP_BATCH`] rows,
/// until a batch deletes fewer; returns how many it deleted in all.
fn in_batches(mut delete: impl FnMut() -> Result<usize, StoreError>) -> Result<usize, StoreError> {
    let mut deleted = 0;
    loop {
        let batch = delete()?;
        deleted += batch;
        if batch < SWEEP_BATCH {
            return Ok(deleted);
        }
    }
}

/// What `tenant`'s transactions hold, by the counts the triggers keep.
fn confirmation_usage(tx: &Connection, tenant: &str) -> rusqlite::Result<ConfirmationUsage> {
    let row = tx
        .query_row(
            "SELECT pending, pending_bytes, stored, stored_bytes FROM confirmation_usage WHERE tenant = ?1",
            [tenant],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .optional()?;
    Ok(usage_of(row))
}

/// How many transactions wait for `end_user` of `tenant` at `now`, and the
/// bytes they hold.
fn waiting_for(tx: &Connection, tenant: &str, end_user: &str, now: i64) -> rusqlite::Result<(u64, u64)> {
    let (waiting, bytes): (i64, i64) = tx.query_row(
        "SELECT count(*), coalesce(sum(length(CAST(inputs AS BLOB)) + length(CAST(cheq AS BLOB))), 0)
         FROM confirmations WHERE tenant = ?1 AND end_user = ?2 AND state = 'pending' AND expires_at > ?3",
        params![tenant, end_user, now],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    Ok((count(waiting), count(bytes)))
}

/// Whether `c` may be stored beside its tenant's transactions, within
/// `bound` at `now` (see [`RegistryStore::insert_confirmation`]): marks the
/// tenant's expired ones and forgets its oldest settled ones as needed.
fn admit_confirmation(
    tx: &rusqlite::Transaction,
    c: &StoredConfirmation,
    bound: ConfirmationBound,
    now: i64,
) -> Result<Result<(), ConfirmationLimit>, StoreError> {
    let bytes = c.stored_bytes();
    let mut usage = confirmation_usage(tx, &c.tenant)?;
    if bound.pending_refusal(&usage, bytes).is_some() || bound.trim_batch(&usage, bytes).is_some() {
        // Only at a bound: the waiting ones whose expiry passed are waiting
        // no longer.
        tx.execute(
            "UPDATE confirmations SET state = 'expired' WHERE tenant = ?1 AND state = 'pending' AND expires_at <= ?2",
            params![c.tenant, now],
        )?;
        usage = confirmation_usage(tx, &c.tenant)?;
    }
    if let Some(limit) = bound.pending_refusal(&usage, bytes) {
        return Ok(Err(limit));
    }
    let (waiting, waiting_bytes) = waiting_for(tx, &c.tenant, &c.end_user, now)?;
    if let Some(limit) = bound.end_user_refusal(waiting, waiting_bytes, bytes) {
        return Ok(Err(limit));
    }
    while let Some(batch) = bound.trim_batch(&usage, bytes) {
        let mut forgotten = 0;
        for state in FORGOTTEN_FIRST {
            forgotten = tx.execute(
                "DELETE FROM confirmations WHERE rowid IN (
                     SELECT rowid FROM confirmations WHERE tenant = ?1 AND state = ?2 ORDER BY expires_at LIMIT ?3)",
                params![c.tenant, state, i64::try_from(batch).unwrap_or(i64::MAX)],
            )?;
            if forgotten > 0 {
                break;
            }
        }
        if forgotten == 0 {
            return Ok(Err(bound.stored_refusal(&usage)));
        }
        usage = confirmation_usage(tx, &c.tenant)?;
    }
    Ok(Ok(()))
}

/// How long a statement waits for a lock another connection holds.
const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// How long [`RegistryStore::ping`] waits for the write lock.
const PING_WAIT: std::time::Duration = std::time::Duration::from_millis(250);

/// The registry in `DATA/registry.sqlite3`, component bytes in
/// `DATA/blobs/`, the server's keys in files of the data dir.
pub struct SqliteStore {
    conn: Mutex<Connection>,
    /// Seals secret values at rest.
    cipher: SecretsCipher,
    blobs: BlobStore,
    data_dir: std::path::PathBuf,
}

impl SqliteStore {
    /// Opens (creating and migrating) the database under `data_dir`, its
    /// secrets sealed with `cipher`, and sweeps blobs no version refers to
    /// (a deploy that died before its row committed). The database and its
    /// `-wal`/`-shm` files are readable by their owner only.
    pub fn open(data_dir: &Path, cipher: SecretsCipher) -> Result<Self, StoreError> {
        let path = data_dir.join(DB_FILE);
        // Created 0600 before SQLite opens it: SQLite gives its -wal and
        // -shm files the mode of the database file.
        let mut create = std::fs::OpenOptions::new();
        create.write(true).create(true).truncate(false);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut create, 0o600);
        create.open(&path)?;
        crate::private_files::private_file(&path)?;
        let conn = Connection::open(&path)?;
        // Deleted rows (secrets, evidence) are overwritten, not left in
        // free pages.
        conn.pragma_update(None, "secure_delete", "ON")?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        // Migrations rebuild tables that others reference, which SQLite
        // allows only with foreign keys off; they are checked right after.
        conn.pragma_update(None, "foreign_keys", "OFF")?;
        let applied: usize = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        for (i, migration) in MIGRATIONS.iter().enumerate().skip(applied) {
            let tx = conn.unchecked_transaction()?;
            tx.execute_batch(migration)?;
            tx.pragma_update(None, "user_version", i + 1)?;
            tx.commit()?;
        }
        conn.pragma_update(None, "foreign_keys", "ON")?;
        let broken: Option<String> = conn.query_row("PRAGMA foreign_key_check", [], |r| r.get(0)).optional()?;
        if let Some(table) = broken {
            return Err(StoreError::Inconsistent(format!("table {table} refers to rows that do not exist")));
        }
        for suffix in ["-wal", "-shm"] {
            crate::private_files::private_file(&data_dir.join(format!("{DB_FILE}{suffix}")))?;
        }
        let blobs = BlobStore::open(data_dir)?;
        let store = SqliteStore { conn: Mutex::new(conn), cipher, blobs, data_dir: data_dir.to_path_buf() };
        store.seal_secrets()?;
        let referenced = store.versions()?.into_iter().map(|v| v.sha256).collect();
        let swept = store.blobs.sweep(&referenced)?;
        if swept > 0 {
            tracing::info!(files = swept, "removed blobs of deploys that never committed");
        }
        Ok(store)
    }

    /// Checks the secrets key against the stored key check (writing one on
    /// first use), then seals secrets stored in plaintext before this
    /// version, in one transaction.
    fn seal_secrets(&self) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let check: Option<String> =
            tx.query_row("SELECT value FROM store_meta WHERE key = ?1", [KEY_CHECK], |r| r.get(0)).optional()?;
        match check {
            Some(sealed) => {
                self.cipher.open("", KEY_CHECK, &sealed)?;
            }
            None => {
                let sealed = self.cipher.seal("", KEY_CHECK, KEY_CHECK)?;
                tx.execute("INSERT INTO store_meta (key, value) VALUES (?1, ?2)", [KEY_CHECK, &sealed])?;
            }
        }
        let plain: Vec<(String, String, String)> = {
            let mut stmt = tx.prepare("SELECT tenant, id, value FROM secrets WHERE sealed = 0")?;
            let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
            rows.collect::<Result<_, _>>()?
        };
        for (tenant, id, value) in &plain {
            let sealed = self.cipher.seal(tenant, id, value)?;
            tx.execute(
                "UPDATE secrets SET value = ?3, sealed = 1 WHERE tenant = ?1 AND id = ?2",
                params![tenant, id, sealed],
            )?;
        }
        tx.commit()?;
        if !plain.is_empty() {
            // Old page images with the plaintext leave the WAL file.
            conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
            tracing::info!(secrets = plain.len(), "encrypted secrets stored in plaintext by an older version");
        }
        Ok(())
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave SQLite inconsistent
        // (transactions roll back), so a poisoned lock is still usable.
        match self.conn.try_lock() {
            Ok(conn) => conn,
            // Another request holds it (a write that fsyncs): wait for it
            // without holding up the worker's other requests.
            Err(std::sync::TryLockError::WouldBlock) => {
                super::off_the_workers(|| self.conn.lock().unwrap_or_else(|p| p.into_inner()))
            }
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
        }
    }

    /// Deletes at most `limit` of the transactions
    /// [`RegistryStore::sweep_confirmations`] deletes, under one hold of the
    /// lock. Returns how many it deleted.
    fn sweep_confirmation_batch(&self, before: i64, limit: usize) -> Result<usize, StoreError> {
        // `COALESCE(decided_at, expires_at)` is when a transaction settled
        // (the indexed expression); a pending one settles when it expires.
        Ok(self.conn().execute(
            "DELETE FROM confirmations WHERE rowid IN (
                 SELECT rowid FROM confirmations
                 WHERE state <> 'accepted' AND COALESCE(decided_at, expires_at) < ?1
                   AND (state <> 'pending' OR expires_at < ?1)
                 LIMIT ?2)",
            params![before, i64::try_from(limit).unwrap_or(i64::MAX)],
        )?)
    }

    /// Runs `change` and appends `audit` in one transaction, unless
    /// `change` answers `false` (a bound refused it): then nothing is
    /// written. Returns what `change` answered.
    fn audited_if(
        &self,
        audit: &AuditEntry,
        change: impl FnOnce(&rusqlite::Transaction) -> rusqlite::Result<bool>,
    ) -> Result<bool, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        if !change(&tx)? {
            // Dropped: rolled back.
            return Ok(false);
        }
        insert_audit(&tx, audit)?;
        tx.commit()?;
        Ok(true)
    }

    /// Runs `change` and appends `audit` in one transaction.
    fn audited<T>(
        &self,
        audit: &AuditEntry,
        change: impl FnOnce(&rusqlite::Transaction) -> rusqlite::Result<T>,
    ) -> Result<T, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let out = change(&tx)?;
        insert_audit(&tx, audit)?;
        tx.commit()?;
        Ok(out)
    }
}

fn insert_audit(tx: &rusqlite::Transaction, audit: &AuditEntry) -> rusqlite::Result<usize> {
    tx.execute(
        "INSERT INTO audit (at, actor, tenant, action, target, sha256, detail) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![
            audit.at,
            audit.actor,
            audit.tenant,
            audit.action,
            audit.target,
            audit.sha256,
            audit.detail.to_string()
        ],
    )
}

fn decode_error(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Decode(what.to_string(), serde_json::Error::io(std::io::Error::other(e.to_string())))
}

/// A usage bucket from the first 14 columns both usage tables share.
fn usage_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<UsageRow> {
    Ok(UsageRow {
        tenant: r.get(0)?,
        tool_id: r.get(1)?,
        tool: r.get(2)?,
        version: r.get(3)?,
        door: r.get(4)?,
        outcome: r.get(5)?,
        granularity: r.get(6)?,
        bucket: r.get(7)?,
        replica: r.get(8)?,
        calls: r.get::<_, i64>(9)?.max(0) as u64,
        total_ms: r.get(10)?,
        histogram: serde_json::from_str(&r.get::<_, String>(11)?).unwrap_or_default(),
        outbound: serde_json::from_str(&r.get::<_, String>(12)?).unwrap_or_default(),
        refused: serde_json::from_str(&r.get::<_, String>(13)?).unwrap_or_default(),
        toolset: None,
    })
}

impl RegistryStore for SqliteStore {
    fn versions(&self) -> Result<Vec<StoredVersion>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT v.tool_id, t.tenant, t.name, v.version, v.sha256, v.signature, v.manifest, v.created_at,
                    v.signature_sha256, v.retired_at, v.provenance
             FROM versions v JOIN tools t USING (tool_id)
             ORDER BY v.created_at, v.tool_id, v.version",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok((
                (r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?, r.get::<_, u32>(3)?),
                (r.get::<_, String>(4)?, r.get::<_, String>(5)?, r.get::<_, String>(6)?),
                (r.get::<_, i64>(7)?, r.get::<_, String>(8)?, r.get::<_, Option<i64>>(9)?, r.get::<_, String>(10)?),
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (
                (tool_id, tenant, name, version),
                (sha256, signature, manifest),
                (created_at, signature_sha256, retired_at, provenance),
            ) = row?;
            let what = format!("{tenant}/{name} version {version}");
            out.push(StoredVersion {
                tool_id: Uuid::parse_str(&tool_id).map_err(|e| decode_error(&what, e))?,
                tenant,
                name,
                version,
                sha256,
                signature: serde_json::from_str(&signature).map_err(|e| StoreError::Decode(what.clone(), e))?,
                manifest: serde_json::from_str(&manifest).map_err(|e| StoreError::Decode(what.clone(), e))?,
                provenance: serde_json::from_str(&provenance).map_err(|e| StoreError::Decode(what, e))?,
                signature_sha256,
                created_at,
                retired_at,
            });
        }
        Ok(out)
    }

    fn insert_version(&self, v: &StoredVersion, bytes: &[u8], audit: &AuditEntry) -> Result<(), StoreError> {
        // Serializing plain data cannot fail.
        let signature = serde_json::to_string(&v.signature).unwrap_or_default();
        let manifest = serde_json::to_string(&v.manifest).unwrap_or_default();
        let provenance = serde_json::to_string(&v.provenance).unwrap_or_default();
        let tool_id = v.tool_id.to_string();
        // The bytes first (fsynced): a crash before the row commits leaves
        // an orphan blob, swept at the next start, never a row without bytes.
        if self.blobs.put(bytes)? != v.sha256 {
            return Err(StoreError::Inconsistent(format!("the bytes of {} are not its sha256", v.name)));
        }
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let newest: Option<(String, u32)> = tx
            .query_row(
                "SELECT t.tool_id, COALESCE(MAX(v.version), 0) FROM tools t LEFT JOIN versions v USING (tool_id)
                 WHERE t.tenant = ?1 AND t.name = ?2 GROUP BY t.tool_id",
                [&v.tenant, &v.name],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        let next = match &newest {
            None => v.version == 1,
            Some((id, newest)) => *id == tool_id && v.version == newest + 1,
        };
        if !next {
            return Err(StoreError::Conflict(format!("{} version {} is not the next version", v.name, v.version)));
        }
        {
            tx.execute(
                "INSERT INTO tools (tool_id, tenant, name, created_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (tool_id) DO NOTHING",
                params![tool_id, v.tenant, v.name, v.created_at],
            )?;
            // No ON CONFLICT clause: an existing (tool, version) is an error,
            // so a version's bytes and signature can never be replaced.
            tx.execute(
                "INSERT INTO versions (tool_id, version, sha256, signature, manifest, created_at, signature_sha256, retired_at, provenance)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                params![tool_id, v.version, v.sha256, signature, manifest, v.created_at, v.signature_sha256, v.retired_at, provenance],
            )?;
        }
        insert_audit(&tx, audit)?;
        tx.commit()?;
        Ok(())
    }

    fn blob(&self, sha256: &str) -> Result<Vec<u8>, StoreError> {
        self.blobs.get(sha256)
    }

    fn retire_version(&self, tool_id: Uuid, version: u32, at: i64, audit: &AuditEntry) -> Result<bool, StoreError> {
        let changed = self.audited(audit, |tx| {
            tx.execute(
                "UPDATE versions SET retired_at = ?3 WHERE tool_id = ?1 AND version = ?2 AND retired_at IS NULL",
                params![tool_id.to_string(), version, at],
            )
        })?;
        Ok(changed == 1)
    }

    fn secrets(&self) -> Result<Vec<StoredSecret>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare("SELECT tenant, id, value FROM secrets ORDER BY tenant, id")?;
        let rows =
            stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?)))?;
        let mut out = Vec::new();
        for row in rows {
            let (tenant, id, sealed) = row?;
            let value = self.cipher.open(&tenant, &id, &sealed)?;
            out.push((tenant, id, value));
        }
        Ok(out)
    }

    fn put_secret(
        &self,
        tenant: &str,
        id: &str,
        value: &str,
        audit: &AuditEntry,
        max: u64,
    ) -> Result<bool, StoreError> {
        let sealed = self.cipher.seal(tenant, id, value)?;
        self.audited_if(audit, |tx| {
            let room: bool = tx.query_row(
                "SELECT EXISTS (SELECT 1 FROM secrets WHERE tenant = ?1 AND id = ?2)
                     OR (SELECT count(*) FROM secrets WHERE tenant = ?1) < ?3",
                params![tenant, id, i64::try_from(max).unwrap_or(i64::MAX)],
                |r| r.get(0),
            )?;
            if room {
                tx.execute(
                    "INSERT INTO secrets (tenant, id, value, updated_at, sealed) VALUES (?1, ?2, ?3, ?4, 1)
                     ON CONFLICT (tenant, id) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at,
                         sealed = 1",
                    params![tenant, id, sealed, audit.at],
                )?;
            }
            Ok(room)
        })
    }

    fn delete_secret(&self, tenant: &str, id: &str, audit: &AuditEntry) -> Result<bool, StoreError> {
        let deleted =
            self.audited(audit, |tx| tx.execute("DELETE FROM secrets WHERE tenant = ?1 AND id = ?2", [tenant, id]))?;
        Ok(deleted == 1)
    }

    fn config(&self) -> Result<Vec<StoredConfig>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare("SELECT tenant, tool, key, value FROM tool_config ORDER BY tenant, tool, key")?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn put_config(
        &self,
        (tenant, tool, key, value): &StoredConfig,
        audit: &AuditEntry,
        max: u64,
    ) -> Result<bool, StoreError> {
        self.audited_if(audit, |tx| {
            let room: bool = tx.query_row(
                "SELECT EXISTS (SELECT 1 FROM tool_config WHERE tenant = ?1 AND tool = ?2 AND key = ?3)
                     OR (SELECT count(*) FROM tool_config WHERE tenant = ?1) < ?4",
                params![tenant, tool, key, i64::try_from(max).unwrap_or(i64::MAX)],
                |r| r.get(0),
            )?;
            if room {
                tx.execute(
                    "INSERT INTO tool_config (tenant, tool, key, value, updated_at) VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT (tenant, tool, key) DO UPDATE SET value = excluded.value,
                         updated_at = excluded.updated_at",
                    params![tenant, tool, key, value, audit.at],
                )?;
            }
            Ok(room)
        })
    }

    fn delete_config(&self, tenant: &str, tool: &str, key: &str, audit: &AuditEntry) -> Result<bool, StoreError> {
        let deleted = self.audited(audit, |tx| {
            tx.execute("DELETE FROM tool_config WHERE tenant = ?1 AND tool = ?2 AND key = ?3", [tenant, tool, key])
        })?;
        Ok(deleted == 1)
    }

    fn tenants(&self) -> Result<Vec<TenantRecord>, StoreError> {
        let conn = self.conn();
        let mut stmt =
            conn.prepare("SELECT name, public_enumeration, quotas, created_at FROM tenants ORDER BY name")?;
        let rows = stmt.query_map([], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, bool>(1)?, r.get::<_, String>(2)?, r.get::<_, i64>(3)?))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (name, public_enumeration, quotas, created_at) = row?;
            let quotas = serde_json::from_str(&quotas).map_err(|e| StoreError::Decode(format!("tenant {name}"), e))?;
            out.push(TenantRecord { name, public_enumeration, quotas, created_at });
        }
        Ok(out)
    }

    fn put_tenant(&self, t: &TenantRecord, audit: &AuditEntry) -> Result<(), StoreError> {
        let quotas = serde_json::to_string(&t.quotas).unwrap_or_default();
        self.audited(audit, |tx| {
            tx.execute(
                "INSERT INTO tenants (name, public_enumeration, quotas, created_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (name) DO UPDATE SET public_enumeration = excluded.public_enumeration, quotas = excluded.quotas",
                params![t.name, t.public_enumeration, quotas, t.created_at],
            )
        })?;
        Ok(())
    }

    fn keys(&self) -> Result<Vec<KeyRecord>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT id, tenant, role, key_sha256, label, created_at, revoked_at, toolset FROM api_keys
             ORDER BY created_at, id",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok((
                (r.get::<_, String>(0)?, r.get::<_, Option<String>>(1)?, r.get::<_, String>(2)?),
                (r.get::<_, String>(3)?, r.get::<_, Option<String>>(4)?),
                (r.get::<_, i64>(5)?, r.get::<_, Option<i64>>(6)?, r.get::<_, Option<String>>(7)?),
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let ((id, tenant, role), (key_sha256, label), (created_at, revoked_at, toolset)) = row?;
            let role = Role::parse(&role).ok_or_else(|| decode_error(&format!("key {id}"), "unknown role"))?;
            out.push(KeyRecord { id, tenant, role, key_sha256, label, created_at, revoked_at, toolset });
        }
        Ok(out)
    }

    fn insert_key(&self, k: &KeyRecord, audit: &AuditEntry) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        // A key scoped to a toolset only while it is live, in the
        // transaction that stores the key: a delete is before or after.
        if let Some(toolset) = &k.toolset {
            let live: Option<i64> = tx
                .query_row(
                    "SELECT 1 FROM toolsets WHERE tenant = ?1 AND name = ?2 AND deleted_at IS NULL LIMIT 1",
                    params![k.tenant, toolset],
                    |r| r.get(0),
                )
                .optional()?;
            if live.is_none() {
                return Err(StoreError::Conflict(format!("toolset {toolset} is not live")));
            }
        }
        tx.execute(
            "INSERT INTO api_keys (id, tenant, role, key_sha256, label, created_at, revoked_at, toolset)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![k.id, k.tenant, k.role.as_str(), k.key_sha256, k.label, k.created_at, k.revoked_at, k.toolset],
        )?;
        insert_audit(&tx, audit)?;
        tx.commit()?;
        Ok(())
    }

    fn revoke_key(&self, id: &str, at: i64, audit: &AuditEntry) -> Result<bool, StoreError> {
        let changed = self.audited(audit, |tx| {
            tx.execute("UPDATE api_keys SET revoked_at = ?2 WHERE id = ?1 AND revoked_at IS NULL", params![id, at])
        })?;
        Ok(changed == 1)
    }

    fn toolsets(&self) -> Result<Vec<StoredToolset>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT tenant, name, version, description, tools, created_at, deleted_at FROM toolsets
             ORDER BY tenant, name, version",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok((
                (r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, u32>(2)?),
                (r.get::<_, String>(3)?, r.get::<_, String>(4)?),
                (r.get::<_, i64>(5)?, r.get::<_, Option<i64>>(6)?),
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let ((tenant, name, version), (description, tools), (created_at, deleted_at)) = row?;
            let tools = serde_json::from_str(&tools)
                .map_err(|e| StoreError::Decode(format!("toolset {tenant}/{name} version {version}"), e))?;
            out.push(StoredToolset { tenant, name, version, description, tools, created_at, deleted_at });
        }
        Ok(out)
    }

    fn insert_toolset(&self, t: &StoredToolset, audit: &AuditEntry) -> Result<(), StoreError> {
        // Serializing plain data cannot fail.
        let tools = serde_json::to_string(&t.tools).unwrap_or_default();
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let newest: u32 = tx.query_row(
            "SELECT COALESCE(MAX(version), 0) FROM toolsets WHERE tenant = ?1 AND name = ?2",
            params![t.tenant, t.name],
            |r| r.get(0),
        )?;
        if t.version != newest + 1 {
            return Err(StoreError::Conflict(format!(
                "toolset {} version {} is not the next version",
                t.name, t.version
            )));
        }
        tx.execute(
            "INSERT INTO toolsets (tenant, name, version, description, tools, created_at, deleted_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![t.tenant, t.name, t.version, t.description, tools, t.created_at, t.deleted_at],
        )?;
        insert_audit(&tx, audit)?;
        tx.commit()?;
        Ok(())
    }

    fn delete_toolset(&self, tenant: &str, name: &str, at: i64, audit: &AuditEntry) -> Result<bool, StoreError> {
        let deleted = self.audited(audit, |tx| {
            let deleted = tx.execute(
                "UPDATE toolsets SET deleted_at = ?3 WHERE tenant = ?1 AND name = ?2 AND deleted_at IS NULL",
                params![tenant, name, at],
            )?;
            tx.execute(
                "UPDATE api_keys SET revoked_at = ?3 WHERE tenant = ?1 AND toolset = ?2 AND revoked_at IS NULL",
                params![tenant, name, at],
            )?;
            // The OAuth grants (codes, access and refresh tokens) issued
            // for the toolset's MCP URL: a toolset re-created under the
            // same name is not opened by them.
            tx.execute(
                "UPDATE oauth_grants SET revoked_at = ?3
                 WHERE tenant = ?1 AND revoked_at IS NULL AND substr(resource, -length(?2)) = ?2",
                params![tenant, super::toolset_resource_suffix(tenant, name), at],
            )?;
            Ok(deleted)
        })?;
        Ok(deleted > 0)
    }

    fn claim_call(
        &self,
        key: &CallKey,
        request_sha256: &str,
        now: i64,
        expired_before: i64,
    ) -> Result<Claimed, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        // The claiming tenant's expired records only (its index): other
        // tenants' go with their own next claim, or the retention sweep.
        tx.execute(
            "DELETE FROM idempotent_calls WHERE tenant = ?1 AND created_at < ?2",
            params![key.tenant, expired_before],
        )?;
        let inserted = tx.execute(
            "INSERT OR IGNORE INTO idempotent_calls (tenant, caller, call_id, request_sha256, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![key.tenant, key.caller, key.call_id, request_sha256, now],
        )?;
        let claimed = if inserted == 1 {
            Claimed::Fresh
        } else {
            let (request_sha256, response) = tx.query_row(
                "SELECT request_sha256, response FROM idempotent_calls WHERE tenant = ?1 AND caller = ?2 AND call_id = ?3",
                params![key.tenant, key.caller, key.call_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?;
            // Only this process writes the store: a claim its ledger does
            // not hold lost its runner when the process it ran in died.
            Claimed::Existing { request_sha256, response, running_elsewhere: false }
        };
        tx.commit()?;
        Ok(claimed)
    }

    fn record_call(&self, key: &CallKey, response: &str, bound: LedgerBound) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        tx.execute(
            "UPDATE idempotent_calls SET response = ?4 WHERE tenant = ?1 AND caller = ?2 AND call_id = ?3",
            params![key.tenant, key.caller, key.call_id, response],
        )?;
        loop {
            let (records, bytes): (u64, u64) =
                tx.query_row("SELECT records, bytes FROM call_ledger_usage WHERE tenant = ?1", [&key.tenant], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })?;
            let Some(batch) = bound.trim_batch(records, bytes) else { break };
            // The oldest settled records go first; one still running keeps
            // its claim, and the one just recorded stays.
            let trimmed = tx.execute(
                "DELETE FROM idempotent_calls WHERE rowid IN (
                     SELECT rowid FROM idempotent_calls
                     WHERE tenant = ?1 AND response IS NOT NULL AND NOT (caller = ?2 AND call_id = ?3)
                     ORDER BY created_at, rowid LIMIT ?4)",
                params![key.tenant, key.caller, key.call_id, batch],
            )?;
            if trimmed == 0 {
                break;
            }
        }
        tx.commit()?;
        Ok(())
    }

    fn sweep_calls(&self, before: i64) -> Result<usize, StoreError> {
        in_batches(|| {
            Ok(self.conn().execute(
                "DELETE FROM idempotent_calls WHERE rowid IN (
                     SELECT rowid FROM idempotent_calls WHERE created_at < ?1 LIMIT ?2)",
                params![before, SWEEP_BATCH],
            )?)
        })
    }

    fn release_call(&self, key: &CallKey) -> Result<(), StoreError> {
        self.conn().execute(
            "DELETE FROM idempotent_calls WHERE tenant = ?1 AND caller = ?2 AND call_id = ?3",
            params![key.tenant, key.caller, key.call_id],
        )?;
        Ok(())
    }

    fn insert_confirmation(
        &self,
        c: &StoredConfirmation,
        bound: ConfirmationBound,
        now: i64,
    ) -> Result<Result<(), ConfirmationLimit>, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let admitted = admit_confirmation(&tx, c, bound, now)?;
        if admitted.is_ok() {
            tx.execute(
                "INSERT INTO confirmations (id, tenant, tool_id, version, end_user, front_door, call_id, inputs, cheq,
                     state, created_at, expires_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
                params![
                    c.id,
                    c.tenant,
                    c.tool_id.to_string(),
                    c.version,
                    c.end_user,
                    c.front_door,
                    c.call_id,
                    c.inputs,
                    c.cheq,
                    c.state,
                    c.created_at,
                    c.expires_at
                ],
            )?;
        }
        // Refused, what expired or was forgotten to make room stays so.
        tx.commit()?;
        Ok(admitted)
    }

    fn pending_refusal(
        &self,
        tenant: &str,
        end_user: &str,
        bytes: u64,
        bound: ConfirmationBound,
        now: i64,
    ) -> Result<Option<ConfirmationLimit>, StoreError> {
        let conn = self.conn();
        if let Some(limit) = bound.pending_refusal(&confirmation_usage(&conn, tenant)?, bytes) {
            // The count is exact while none of the waiting ones expired.
            let earliest: Option<i64> = conn.query_row(
                "SELECT min(expires_at) FROM confirmations WHERE tenant = ?1 AND state = 'pending'",
                [tenant],
                |r| r.get(0),
            )?;
            if earliest.is_some_and(|earliest| earliest > now) {
                return Ok(Some(limit));
            }
        }
        let (waiting, waiting_bytes) = waiting_for(&conn, tenant, end_user, now)?;
        Ok(bound.end_user_refusal(waiting, waiting_bytes, bytes))
    }

    fn confirmation(&self, id: &str) -> Result<Option<StoredConfirmation>, StoreError> {
        let conn = self.conn();
        let row = conn
            .query_row(
                "SELECT id, tenant, tool_id, version, end_user, front_door, call_id, inputs, cheq, state, created_at,
                     expires_at, decided_at, decision, result_status, result_body
                 FROM confirmations WHERE id = ?1",
                [id],
                |r| {
                    Ok((
                        StoredConfirmation {
                            id: r.get(0)?,
                            tenant: r.get(1)?,
                            tool_id: Uuid::nil(),
                            version: r.get(3)?,
                            end_user: r.get(4)?,
                            front_door: r.get(5)?,
                            call_id: r.get(6)?,
                            inputs: r.get(7)?,
                            cheq: r.get(8)?,
                            state: r.get(9)?,
                            created_at: r.get(10)?,
                            expires_at: r.get(11)?,
                            decided_at: r.get(12)?,
                            decision: r.get(13)?,
                            result_status: r.get(14)?,
                            result_body: r.get(15)?,
                        },
                        r.get::<_, String>(2)?,
                    ))
                },
            )
            .optional()?;
        let Some((mut confirmation, tool_id)) = row else { return Ok(None) };
        confirmation.tool_id = Uuid::parse_str(&tool_id).map_err(|e| decode_error(&format!("confirmation {id}"), e))?;
        Ok(Some(confirmation))
    }

    fn decide_confirmation(
        &self,
        id: &str,
        state: &str,
        decision: Option<&str>,
        audit: &AuditEntry,
    ) -> Result<bool, StoreError> {
        // The audit entry is written only with the change: a second decision
        // changes nothing and records nothing.
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let changed = tx.execute(
            "UPDATE confirmations SET state = ?2, decision = ?3, decided_at = ?4
             WHERE id = ?1 AND state = 'pending' AND expires_at > ?4",
            params![id, state, decision, audit.at],
        )?;
        if changed == 1 {
            insert_audit(&tx, audit)?;
        }
        tx.commit()?;
        Ok(changed == 1)
    }

    fn finish_confirmation(&self, id: &str, status: u16, body: &str) -> Result<(), StoreError> {
        self.conn().execute(
            "UPDATE confirmations SET state = 'done', result_status = ?2, result_body = ?3
             WHERE id = ?1 AND state = 'accepted'",
            params![id, status, body],
        )?;
        Ok(())
    }

    fn retire_confirmation(&self, id: &str, audit: &AuditEntry) -> Result<bool, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let changed =
            tx.execute("UPDATE confirmations SET state = 'retired' WHERE id = ?1 AND state = 'accepted'", [id])?;
        if changed == 1 {
            insert_audit(&tx, audit)?;
        }
        tx.commit()?;
        Ok(changed == 1)
    }

    fn interrupt_confirmations(&self) -> Result<usize, StoreError> {
        Ok(self.conn().execute("UPDATE confirmations SET state = 'interrupted' WHERE state = 'accepted'", [])?)
    }

    fn sweep_confirmations(&self, before: i64) -> Result<usize, StoreError> {
        in_batches(|| self.sweep_confirmation_batch(before, SWEEP_BATCH))
    }

    fn claim_expired_confirmations(&self, until: i64) -> Result<Vec<ExpiredConfirmations>, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let mark: Option<String> = tx
            .query_row("SELECT value FROM store_meta WHERE key = ?1", [EXPIRIES_CLAIMED_UNTIL], |r| r.get(0))
            .optional()?;
        let mark = super::claimed_until(mark)?;
        let claimed = match mark {
            Some(mark) if mark >= until => return Ok(Vec::new()),
            None => Vec::new(),
            // A pending transaction settles when it expires: the indexed
            // `COALESCE(decided_at, expires_at)` is its expiry.
            Some(mark) => {
                let mut stmt = tx.prepare(
                    "SELECT c.tenant, COALESCE(t.name, c.tool_id), COUNT(*)
                     FROM confirmations c LEFT JOIN tools t ON t.tool_id = c.tool_id
                     WHERE c.state IN ('pending', 'expired')
                       AND COALESCE(c.decided_at, c.expires_at) > ?1 AND COALESCE(c.decided_at, c.expires_at) <= ?2
                     GROUP BY c.tenant, COALESCE(t.name, c.tool_id)",
                )?;
                let rows = stmt.query_map(params![mark, until], |r| {
                    Ok(ExpiredConfirmations {
                        tenant: r.get(0)?,
                        tool: r.get(1)?,
                        count: r.get::<_, i64>(2)?.unsigned_abs(),
                    })
                })?;
                rows.collect::<Result<_, _>>()?
            }
        };
        tx.execute(
            "INSERT INTO store_meta (key, value) VALUES (?1, ?2)
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            params![EXPIRIES_CLAIMED_UNTIL, until.to_string()],
        )?;
        tx.commit()?;
        Ok(claimed)
    }

    fn settings(&self) -> Result<Vec<StoredSetting>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare("SELECT tenant, key, value FROM tenant_settings ORDER BY tenant, key")?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn put_setting(&self, (tenant, key, value): &StoredSetting, audit: &AuditEntry) -> Result<(), StoreError> {
        self.audited(audit, |tx| {
            tx.execute(
                "INSERT INTO tenant_settings (tenant, key, value, updated_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (tenant, key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
                params![tenant, key, value, audit.at],
            )
        })?;
        Ok(())
    }

    fn replace_setting(
        &self,
        (tenant, key, value): &StoredSetting,
        expected: Option<&str>,
        audit: &AuditEntry,
    ) -> Result<bool, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let changed = match expected {
            None => tx.execute(
                "INSERT INTO tenant_settings (tenant, key, value, updated_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (tenant, key) DO NOTHING",
                params![tenant, key, value, audit.at],
            )?,
            Some(old) => tx.execute(
                "UPDATE tenant_settings SET value = ?3, updated_at = ?4 WHERE tenant = ?1 AND key = ?2 AND value = ?5",
                params![tenant, key, value, audit.at, old],
            )?,
        };
        if changed != 1 {
            return Ok(false); // dropping the transaction rolls it back
        }
        insert_audit(&tx, audit)?;
        tx.commit()?;
        Ok(true)
    }

    fn delete_setting(&self, tenant: &str, key: &str, audit: &AuditEntry) -> Result<bool, StoreError> {
        let deleted = self.audited(audit, |tx| {
            tx.execute("DELETE FROM tenant_settings WHERE tenant = ?1 AND key = ?2", [tenant, key])
        })?;
        Ok(deleted == 1)
    }

    fn put_usage(&self, rows: &[UsageRow]) -> Result<(), StoreError> {
        // The vendor's buckets, or a toolset's (its name and version last).
        const VENDOR: &str = "INSERT INTO usage_buckets (tenant, tool_id, tool, version, door, outcome, granularity, bucket, replica, calls, total_ms, histogram, outbound, refused)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)
             ON CONFLICT (tenant, granularity, bucket, tool_id, version, door, outcome, replica)
             DO UPDATE SET calls = excluded.calls, total_ms = excluded.total_ms, histogram = excluded.histogram,
                 outbound = excluded.outbound, refused = excluded.refused";
        const TOOLSET: &str = "INSERT INTO toolset_usage_buckets (tenant, tool_id, tool, version, door, outcome, granularity, bucket, replica, calls, total_ms, histogram, outbound, refused, toolset, toolset_version)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)
             ON CONFLICT (tenant, toolset, granularity, bucket, toolset_version, tool_id, version, door, outcome, replica)
             DO UPDATE SET calls = excluded.calls, total_ms = excluded.total_ms, histogram = excluded.histogram,
                 outbound = excluded.outbound, refused = excluded.refused";
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        for r in rows {
            let mut values: Vec<Box<dyn rusqlite::ToSql + '_>> = vec![
                Box::new(&r.tenant),
                Box::new(&r.tool_id),
                Box::new(&r.tool),
                Box::new(r.version),
                Box::new(&r.door),
                Box::new(&r.outcome),
                Box::new(&r.granularity),
                Box::new(r.bucket),
                Box::new(&r.replica),
                Box::new(r.calls as i64),
                Box::new(r.total_ms),
                Box::new(serde_json::to_string(&r.histogram).unwrap_or_default()),
                Box::new(serde_json::to_string(&r.outbound).unwrap_or_default()),
                Box::new(serde_json::to_string(&r.refused).unwrap_or_default()),
            ];
            let statement = match &r.toolset {
                Some((toolset, version)) => {
                    values.push(Box::new(toolset));
                    values.push(Box::new(*version));
                    TOOLSET
                }
                None => VENDOR,
            };
            tx.execute(statement, rusqlite::params_from_iter(values.iter()))?;
        }
        tx.commit()?;
        Ok(())
    }

    fn toolset_usage(
        &self,
        tenant: &str,
        toolset: &str,
        granularity: &str,
        since: i64,
    ) -> Result<Vec<UsageRow>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT tenant, tool_id, tool, version, door, outcome, granularity, bucket, replica, calls, total_ms, histogram,
                    outbound, refused, toolset, toolset_version
             FROM toolset_usage_buckets WHERE tenant = ?1 AND toolset = ?2 AND granularity = ?3 AND bucket >= ?4
             ORDER BY bucket",
        )?;
        let rows = stmt.query_map(params![tenant, toolset, granularity, since], |r| {
            let mut row = usage_row(r)?;
            row.toolset = Some((r.get(14)?, r.get(15)?));
            Ok(row)
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn usage(&self, tenant: &str, granularity: &str, since: i64) -> Result<Vec<UsageRow>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT tenant, tool_id, tool, version, door, outcome, granularity, bucket, replica, calls, total_ms, histogram,
                    outbound, refused
             FROM usage_buckets WHERE tenant = ?1 AND granularity = ?2 AND bucket >= ?3 ORDER BY bucket",
        )?;
        let rows = stmt.query_map(params![tenant, granularity, since], usage_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn sweep_usage(&self, granularity: &str, before: i64) -> Result<u64, StoreError> {
        let conn = self.conn();
        let mut deleted = 0;
        for table in ["usage_buckets", "toolset_usage_buckets"] {
            deleted += conn.execute(
                &format!("DELETE FROM {table} WHERE granularity = ?1 AND bucket < ?2"),
                params![granularity, before],
            )?;
        }
        Ok(deleted as u64)
    }
    fn has_end_users(&self, tenant: &str) -> Result<bool, StoreError> {
        let found: Option<i64> = self
            .conn()
            .query_row("SELECT 1 FROM end_users WHERE tenant = ?1 LIMIT 1", [tenant], |r| r.get(0))
            .optional()?;
        Ok(found.is_some())
    }

    fn insert_oauth_grants(&self, grants: &[OAuthGrant]) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        for g in grants {
            tx.execute(
                "INSERT INTO oauth_grants (token_sha256, kind, tenant, client_id, end_user, scope, resource, family,
                     detail, expires_at, used_at, revoked_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
                params![
                    g.token_sha256,
                    g.kind,
                    g.tenant,
                    g.client_id,
                    g.end_user,
                    g.scope,
                    g.resource,
                    g.family,
                    g.detail,
                    g.expires_at,
                    g.used_at,
                    g.revoked_at
                ],
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    fn oauth_grant(&self, token_sha256: &str) -> Result<Option<OAuthGrant>, StoreError> {
        Ok(self
            .conn()
            .query_row(
                "SELECT token_sha256, kind, tenant, client_id, end_user, scope, resource, family, detail, expires_at,
                     used_at, revoked_at
                 FROM oauth_grants WHERE token_sha256 = ?1",
                [token_sha256],
                oauth_grant_row,
            )
            .optional()?)
    }

    fn use_oauth_grant(&self, token_sha256: &str, now: i64) -> Result<Option<OAuthGrant>, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let grant = tx
            .query_row(
                "SELECT token_sha256, kind, tenant, client_id, end_user, scope, resource, family, detail, expires_at,
                     used_at, revoked_at
                 FROM oauth_grants WHERE token_sha256 = ?1",
                [token_sha256],
                oauth_grant_row,
            )
            .optional()?;
        if grant.as_ref().is_some_and(|g| g.used_at.is_none()) {
            tx.execute("UPDATE oauth_grants SET used_at = ?2 WHERE token_sha256 = ?1", params![token_sha256, now])?;
        }
        tx.commit()?;
        Ok(grant)
    }

    fn revoke_oauth(&self, token_sha256: &str, family: Option<&str>, now: i64) -> Result<(), StoreError> {
        let conn = self.conn();
        match family {
            Some(family) => conn.execute(
                "UPDATE oauth_grants SET revoked_at = ?2 WHERE family = ?1 AND revoked_at IS NULL",
                params![family, now],
            )?,
            None => conn.execute(
                "UPDATE oauth_grants SET revoked_at = ?2 WHERE token_sha256 = ?1 AND revoked_at IS NULL",
                params![token_sha256, now],
            )?,
        };
        Ok(())
    }

    fn revoke_oauth_of(&self, tenant: &str, end_user: Option<&str>, now: i64) -> Result<(), StoreError> {
        self.conn().execute(
            "UPDATE oauth_grants SET revoked_at = ?3
             WHERE tenant = ?1 AND (?2 IS NULL OR end_user = ?2) AND revoked_at IS NULL",
            params![tenant, end_user, now],
        )?;
        Ok(())
    }

    fn sweep_oauth_clients(&self, unused_before: i64, idle_before: i64) -> Result<usize, StoreError> {
        Ok(self.conn().execute(
            "DELETE FROM oauth_clients WHERE
                 (CASE WHEN last_used_at IS NULL THEN created_at < ?1 ELSE last_used_at < ?2 END)
                 AND NOT EXISTS (SELECT 1 FROM oauth_grants g
                                 WHERE g.tenant = oauth_clients.tenant AND g.client_id = oauth_clients.client_id)",
            [unused_before, idle_before],
        )?)
    }

    fn touch_oauth_client(&self, tenant: &str, client_id: &str, now: i64) -> Result<(), StoreError> {
        self.conn().execute(
            "UPDATE oauth_clients SET last_used_at = ?3 WHERE tenant = ?1 AND client_id = ?2",
            params![tenant, client_id, now],
        )?;
        Ok(())
    }

    fn prune_oauth_family(&self, family: &str, keep: u32, spare: &[String]) -> Result<usize, StoreError> {
        let spare = serde_json::to_string(spare).unwrap_or_else(|_| "[]".into());
        Ok(self.conn().execute(
            "DELETE FROM oauth_grants WHERE family = ?1 AND kind IN ('access', 'refresh')
             AND token_sha256 NOT IN (SELECT value FROM json_each(?3)) AND token_sha256 NOT IN (
                 SELECT token_sha256 FROM oauth_grants WHERE family = ?1 AND kind = 'access'
                     ORDER BY expires_at DESC, rowid DESC LIMIT ?2)
             AND token_sha256 NOT IN (
                 SELECT token_sha256 FROM oauth_grants WHERE family = ?1 AND kind = 'refresh'
                     ORDER BY expires_at DESC, rowid DESC LIMIT ?2)",
            params![family, keep, spare],
        )?)
    }

    fn revoke_unused_refresh(&self, family: &str, now: i64) -> Result<(), StoreError> {
        self.conn().execute(
            "UPDATE oauth_grants SET revoked_at = ?2
             WHERE family = ?1 AND kind = 'refresh' AND used_at IS NULL AND revoked_at IS NULL",
            params![family, now],
        )?;
        Ok(())
    }

    fn sweep_oauth_grants(&self, before: i64) -> Result<usize, StoreError> {
        in_batches(|| {
            Ok(self.conn().execute(
                "DELETE FROM oauth_grants WHERE rowid IN (
                     SELECT rowid FROM oauth_grants WHERE expires_at < ?1 LIMIT ?2)",
                params![before, SWEEP_BATCH],
            )?)
        })
    }

    fn register_oauth_client(
        &self,
        tenant: &str,
        client_id: &str,
        metadata: &str,
        now: i64,
        max: u64,
    ) -> Result<bool, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let count: u64 =
            tx.query_row("SELECT count(*) FROM oauth_clients WHERE tenant = ?1", [tenant], |r| r.get(0))?;
        if count >= max {
            // Full: the oldest registration that was never used (and holds
            // no credential) makes room; one in use never does.
            let evicted = tx.execute(
                "DELETE FROM oauth_clients WHERE rowid IN (
                     SELECT rowid FROM oauth_clients c WHERE c.tenant = ?1 AND c.last_used_at IS NULL
                         AND NOT EXISTS (SELECT 1 FROM oauth_grants g WHERE g.tenant = c.tenant AND g.client_id = c.client_id)
                     ORDER BY c.created_at, c.rowid LIMIT ?2)",
                params![tenant, count - max + 1],
            )?;
            if count - evicted as u64 >= max {
                return Ok(false);
            }
        }
        tx.execute(
            "INSERT INTO oauth_clients (tenant, client_id, metadata, created_at) VALUES (?1, ?2, ?3, ?4)",
            params![tenant, client_id, metadata, now],
        )?;
        tx.commit()?;
        Ok(true)
    }

    fn oauth_client(&self, tenant: &str, client_id: &str) -> Result<Option<String>, StoreError> {
        Ok(self
            .conn()
            .query_row(
                "SELECT metadata FROM oauth_clients WHERE tenant = ?1 AND client_id = ?2",
                [tenant, client_id],
                |r| r.get(0),
            )
            .optional()?)
    }

    fn end_user(&self, tenant: &str, name: &str) -> Result<Option<String>, StoreError> {
        let conn = self.conn();
        let hash = conn
            .query_row("SELECT password_hash FROM end_users WHERE tenant = ?1 AND name = ?2", [tenant, name], |r| {
                r.get(0)
            })
            .optional()?;
        Ok(hash)
    }

    fn put_end_user(
        &self,
        tenant: &str,
        name: &str,
        password_hash: &str,
        audit: &AuditEntry,
        max: u64,
    ) -> Result<bool, StoreError> {
        self.audited_if(audit, |tx| {
            let room: bool = tx.query_row(
                "SELECT EXISTS (SELECT 1 FROM end_users WHERE tenant = ?1 AND name = ?2)
                     OR (SELECT count(*) FROM end_users WHERE tenant = ?1) < ?3",
                params![tenant, name, i64::try_from(max).unwrap_or(i64::MAX)],
                |r| r.get(0),
            )?;
            if room {
                tx.execute(
                    "INSERT INTO end_users (tenant, name, password_hash, updated_at) VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT (tenant, name) DO UPDATE SET password_hash = excluded.password_hash,
                         updated_at = excluded.updated_at",
                    params![tenant, name, password_hash, audit.at],
                )?;
            }
            Ok(room)
        })
    }

    fn delete_end_user(&self, tenant: &str, name: &str, audit: &AuditEntry) -> Result<bool, StoreError> {
        // Their grants and links go with them.
        let deleted = self.audited(audit, |tx| {
            authorizations::delete_of_end_user(tx, tenant, name)?;
            tx.execute("DELETE FROM end_users WHERE tenant = ?1 AND name = ?2", [tenant, name])
        })?;
        Ok(deleted == 1)
    }

    fn ping(&self) -> Result<(), StoreError> {
        let conn = self.conn();
        // The write lock, taken and let go: a read alone is served from
        // SQLite's cache and answers even while every call that must be
        // recorded fails. Waited for briefly, not the usual busy timeout: a
        // health check answers at once.
        conn.busy_timeout(PING_WAIT)?;
        let probe = conn
            .execute_batch("BEGIN IMMEDIATE")
            .and_then(|()| conn.query_row("SELECT count(*) FROM tenants", [], |_| Ok(())));
        let rolled_back = if conn.is_autocommit() { Ok(()) } else { conn.execute_batch("ROLLBACK") };
        conn.busy_timeout(BUSY_TIMEOUT)?;
        rolled_back?;
        Ok(probe?)
    }

    fn insert_session(&self, session: &StoredSession, now: i64) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        tx.execute("DELETE FROM sessions WHERE expires_at <= ?1", [now])?;
        tx.execute(
            "INSERT INTO sessions (token_sha256, tenant, user, form_token, expires_at) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![session.token_sha256, session.tenant, session.user, session.form_token, session.expires_at],
        )?;
        tx.commit()?;
        Ok(())
    }

    fn session(&self, token_sha256: &str, now: i64) -> Result<Option<StoredSession>, StoreError> {
        Ok(self
            .conn()
            .query_row(
                "SELECT token_sha256, tenant, user, form_token, expires_at FROM sessions
                 WHERE token_sha256 = ?1 AND expires_at > ?2",
                params![token_sha256, now],
                |r| {
                    Ok(StoredSession {
                        token_sha256: r.get(0)?,
                        tenant: r.get(1)?,
                        user: r.get(2)?,
                        form_token: r.get(3)?,
                        expires_at: r.get(4)?,
                    })
                },
            )
            .optional()?)
    }

    fn insert_designer_session(
        &self,
        session: &StoredDesignerSession,
        now: i64,
        max_per_key: usize,
    ) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        tx.execute("DELETE FROM designer_sessions WHERE expires_at <= ?1", [now])?;
        tx.execute(
            "INSERT INTO designer_sessions (token_sha256, tenant, key_id, key_sha256, form_token, created_at, expires_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                session.token_sha256,
                session.tenant,
                session.key_id,
                session.key_sha256,
                session.form_token,
                session.created_at,
                session.expires_at
            ],
        )?;
        // The new session and the newest others, `max_per_key` in all, stay.
        tx.execute(
            "DELETE FROM designer_sessions WHERE key_id = ?1 AND token_sha256 <> ?2 AND token_sha256 NOT IN
                (SELECT token_sha256 FROM designer_sessions WHERE key_id = ?1 AND token_sha256 <> ?2
                 ORDER BY created_at DESC, rowid DESC LIMIT ?3)",
            params![
                session.key_id,
                session.token_sha256,
                i64::try_from(max_per_key.saturating_sub(1)).unwrap_or(i64::MAX)
            ],
        )?;
        tx.commit()?;
        Ok(())
    }

    fn designer_session(&self, token_sha256: &str, now: i64) -> Result<Option<StoredDesignerSession>, StoreError> {
        Ok(self
            .conn()
            .query_row(
                "SELECT token_sha256, tenant, key_id, key_sha256, form_token, created_at, expires_at
                 FROM designer_sessions WHERE token_sha256 = ?1 AND expires_at > ?2",
                params![token_sha256, now],
                |r| {
                    Ok(StoredDesignerSession {
                        token_sha256: r.get(0)?,
                        tenant: r.get(1)?,
                        key_id: r.get(2)?,
                        key_sha256: r.get(3)?,
                        form_token: r.get(4)?,
                        created_at: r.get(5)?,
                        expires_at: r.get(6)?,
                    })
                },
            )
            .optional()?)
    }

    fn delete_designer_session(&self, token_sha256: &str) -> Result<(), StoreError> {
        self.conn().execute("DELETE FROM designer_sessions WHERE token_sha256 = ?1", [token_sha256])?;
        Ok(())
    }

    fn waiting_call(&self, tenant: &str, fingerprint: &str, now: i64) -> Result<Option<String>, StoreError> {
        // Read on every MCP call of a tool that may need confirmation, from
        // a client that repeats calls: the statement is parsed once.
        Ok(self
            .conn()
            .prepare_cached("SELECT id FROM waiting_calls WHERE tenant = ?1 AND fingerprint = ?2 AND kept_until > ?3")?
            .query_row(params![tenant, fingerprint, now], |r| r.get(0))
            .optional()?)
    }

    fn put_waiting_call(
        &self,
        tenant: &str,
        fingerprint: &str,
        id: &str,
        kept_until: i64,
        max_per_tenant: usize,
    ) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let count = |tx: &rusqlite::Transaction| -> rusqlite::Result<i64> {
            tx.query_row("SELECT count(*) FROM waiting_calls WHERE tenant = ?1", [tenant], |r| r.get(0))
        };
        let max = i64::try_from(max_per_tenant).unwrap_or(i64::MAX);
        if count(&tx)? >= max {
            tx.execute(
                "DELETE FROM waiting_calls WHERE tenant = ?1 AND kept_until <= ?2",
                params![tenant, unix_now()],
            )?;
        }
        if count(&tx)? < max {
            tx.execute(
                "INSERT INTO waiting_calls (tenant, fingerprint, id, kept_until) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (tenant, fingerprint) DO UPDATE SET id = excluded.id, kept_until = excluded.kept_until",
                params![tenant, fingerprint, id, kept_until],
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    fn delete_waiting_call(&self, tenant: &str, fingerprint: &str) -> Result<(), StoreError> {
        self.conn()
            .execute("DELETE FROM waiting_calls WHERE tenant = ?1 AND fingerprint = ?2", [tenant, fingerprint])?;
        Ok(())
    }

    fn server_key(&self, name: &str) -> Result<[u8; 32], StoreError> {
        Ok(crate::private_files::read_or_create_hex_key(&self.data_dir.join(name), name)?)
    }

    fn changes_since(&self, _after: i64) -> Result<ChangeFeed, StoreError> {
        // One process writes this store and its memory is changed with it:
        // nothing changes behind its back.
        Ok(ChangeFeed::default())
    }

    fn record_audit(&self, audit: &AuditEntry) -> Result<(), StoreError> {
        self.audited(audit, |_| Ok(()))
    }

    fn audit(&self, query: &AuditQuery) -> Result<Vec<AuditEntry>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT seq, at, actor, tenant, action, target, sha256, detail FROM audit
             WHERE (?1 IS NULL OR tenant = ?1) AND seq < ?2
             ORDER BY seq DESC LIMIT ?3",
        )?;
        let before = query.before.unwrap_or(i64::MAX);
        let limit = i64::try_from(query.limit).unwrap_or(i64::MAX);
        let rows = stmt.query_map(params![query.tenant, before, limit], |r| {
            Ok(AuditEntry {
                seq: r.get(0)?,
                at: r.get(1)?,
                actor: r.get(2)?,
                tenant: r.get(3)?,
                action: r.get(4)?,
                target: r.get(5)?,
                sha256: r.get(6)?,
                detail: serde_json::from_str(&r.get::<_, String>(7)?).unwrap_or_default(),
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::suite::{audit, cipher, component, version};

    #[test]
    fn persists_versions_and_never_overwrites_one() {
        let dir = tempfile::tempdir().unwrap();
        let id = Uuid::new_v4();
        {
            let store = SqliteStore::open(dir.path(), cipher()).unwrap();
            store.insert_version(&version(id, 1), &component(1), &audit("tool.deploy")).unwrap();
            store.insert_version(&version(id, 2), &component(2), &audit("tool.deploy")).unwrap();
            let mut changed = version(id, 1);
            changed.sha256 = "f".repeat(64);
            assert!(store.insert_version(&changed, &component(changed.version), &audit("tool.deploy")).is_err());
        }
        let reopened = SqliteStore::open(dir.path(), cipher()).unwrap();
        let versions = reopened.versions().unwrap();
        assert_eq!(versions, vec![version(id, 1), version(id, 2)]);

        assert!(reopened.retire_version(id, 1, 1_800_000_000, &audit("tool.retire")).unwrap());
        assert!(!reopened.retire_version(id, 1, 1_900_000_000, &audit("tool.retire")).unwrap());
        assert!(!reopened.retire_version(id, 7, 1_800_000_000, &audit("tool.retire")).unwrap());
        let versions = reopened.versions().unwrap();
        assert_eq!(versions[0].retired_at, Some(1_800_000_000));
        assert_eq!(versions[1].retired_at, None);

        reopened.put_secret("default", "api-key", "one", &audit("secret.put"), u64::MAX).unwrap();
        reopened.put_secret("default", "api-key", "two", &audit("secret.put"), u64::MAX).unwrap();
        assert_eq!(reopened.secrets().unwrap(), [("default".into(), "api-key".into(), "two".into())]);
        assert!(reopened.delete_secret("default", "api-key", &audit("secret.delete")).unwrap());
        assert!(!reopened.delete_secret("default", "api-key", &audit("secret.delete")).unwrap());
    }

    #[test]
    fn a_failed_change_leaves_no_audit_entry_and_the_log_cannot_be_rewritten() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path(), cipher()).unwrap();
        let id = Uuid::new_v4();
        store.insert_version(&version(id, 1), &component(1), &audit("tool.deploy")).unwrap();
        assert!(store.insert_version(&version(id, 1), &component(1), &audit("tool.deploy")).is_err());
        let entries = store.audit(&AuditQuery { limit: 10, ..Default::default() }).unwrap();
        assert_eq!(entries.len(), 1, "the refused insert wrote no entry");
        let conn = store.conn();
        let err = conn.execute("DELETE FROM audit", []).unwrap_err();
        assert!(err.to_string().contains("append-only"), "{err}");
        let err = conn.execute("UPDATE audit SET actor = 'someone else'", []).unwrap_err();
        assert!(err.to_string().contains("append-only"), "{err}");
    }

    #[test]
    fn settled_transactions_are_swept_by_age_and_open_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path(), cipher()).unwrap();
        let decide = |id: &str, state: &str, at: i64| {
            crate::store::store_pending(&store, &StoredConfirmation::pending_for_test(id, 1_000));
            let audit = AuditEntry { at, ..audit("cheq.decide") };
            assert!(store.decide_confirmation(id, state, Some("{}"), &audit).unwrap());
        };
        decide("interrupted-old", "accepted", 100);
        assert_eq!(store.interrupt_confirmations().unwrap(), 1);
        decide("done-old", "accepted", 100);
        store.finish_confirmation("done-old", 200, "{}").unwrap();
        decide("rejected-old", "rejected", 100);
        decide("done-new", "accepted", 600);
        store.finish_confirmation("done-new", 200, "{}").unwrap();
        decide("running", "accepted", 100);
        crate::store::store_pending(&store, &StoredConfirmation::pending_for_test("expired-long-ago", 400));
        crate::store::store_pending(&store, &StoredConfirmation::pending_for_test("expired-lately", 600));
        crate::store::store_pending(&store, &StoredConfirmation::pending_for_test("pending", 10_000));

        assert_eq!(store.sweep_confirmations(500).unwrap(), 4);
        let kept = |id: &str| store.confirmation(id).unwrap().is_some();
        for gone in ["done-old", "rejected-old", "interrupted-old", "expired-long-ago"] {
            assert!(!kept(gone), "{gone}");
        }
        for id in ["done-new", "expired-lately", "pending", "running"] {
            assert!(kept(id), "{id}");
        }
        assert_eq!(store.sweep_confirmations(500).unwrap(), 0);
    }

    /// A backlog is deleted a batch per statement (the lock released between
    /// them), and all of it by one sweep; what is not due stays.
    #[test]
    fn a_backlog_is_swept_in_batches() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path(), cipher()).unwrap();
        let backlog = 2 * SWEEP_BATCH + 7;
        {
            let mut conn = store.conn();
            let tx = conn.transaction().unwrap();
            for n in 0..backlog {
                let c = StoredConfirmation::pending_for_test(&format!("expired-{n}"), 100);
                tx.execute(
                    "INSERT INTO confirmations (id, tenant, tool_id, version, end_user, front_door, call_id, inputs,
                         cheq, state, created_at, expires_at)
                     VALUES (?1, ?2, ?3, 1, 'ann', 'a2t', 'c', '{}', '{}', 'pending', 0, ?4)",
                    params![c.id, c.tenant, c.tool_id.to_string(), c.expires_at],
                )
                .unwrap();
            }
            tx.commit().unwrap();
        }
        crate::store::store_pending(&store, &StoredConfirmation::pending_for_test("pending", 10_000));
        assert_eq!(store.sweep_confirmation_batch(500, 3).unwrap(), 3, "one statement deletes one batch");
        assert_eq!(store.sweep_confirmations(500).unwrap(), backlog - 3);
        assert!(store.confirmation("pending").unwrap().is_some());
        assert!(store.confirmation("expired-0").unwrap().is_none());
        assert_eq!(store.sweep_confirmations(500).unwrap(), 0);
    }

    #[test]
    fn a_database_from_before_tenants_moves_into_the_default_tenant() {
        let dir = tempfile::tempdir().unwrap();
        {
            let conn = Connection::open(dir.path().join("registry.sqlite3")).unwrap();
            for migration in &MIGRATIONS[..3] {
                conn.execute_batch(migration).unwrap();
            }
            conn.pragma_update(None, "user_version", 3).unwrap();
            conn.execute("INSERT INTO tools VALUES ('6f1c3f2e-8d4b-4a53-9c1e-2b7f0d1e5a90', 'echo', 1)", []).unwrap();
            conn.execute(
                "INSERT INTO versions (tool_id, version, sha256, signature, manifest, created_at)
                 VALUES ('6f1c3f2e-8d4b-4a53-9c1e-2b7f0d1e5a90', 1, 'aa', ?1, '{}', 1)",
                [serde_json::to_string(&version(Uuid::nil(), 1).signature).unwrap()],
            )
            .unwrap();
            conn.execute("INSERT INTO secrets VALUES ('api-key', 'v', 1)", []).unwrap();
        }
        let store = SqliteStore::open(dir.path(), cipher()).unwrap();
        let versions = store.versions().unwrap();
        assert_eq!((versions[0].tenant.as_str(), versions[0].name.as_str()), ("default", "echo"));
        assert_eq!(store.secrets().unwrap(), [("default".into(), "api-key".into(), "v".into())]);
        let raw: String = store.conn().query_row("SELECT value FROM secrets", [], |r| r.get(0)).unwrap();
        assert!(raw.starts_with("xc1:"), "the plaintext secret was sealed in place: {raw}");
    }

    /// The `value` column of the secret `(tenant, id)`, read from the file
    /// by a connection of its own.
    fn raw_secret(dir: &Path, tenant: &str, id: &str) -> String {
        let conn = Connection::open(dir.join(DB_FILE)).unwrap();
        conn.query_row("SELECT value FROM secrets WHERE tenant = ?1 AND id = ?2", [tenant, id], |r| r.get(0)).unwrap()
    }

    #[test]
    fn secrets_are_stored_as_ciphertext_bound_to_their_row_and_key() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = SqliteStore::open(dir.path(), cipher()).unwrap();
            store.put_secret("default", "api-key", "sk-live-7f3a9c2e", &audit("secret.put"), u64::MAX).unwrap();
            store.put_secret("default", "other", "other-value-5d1b", &audit("secret.put"), u64::MAX).unwrap();
        }
        let raw = raw_secret(dir.path(), "default", "api-key");
        assert!(!raw.contains("sk-live-7f3a9c2e") && raw.starts_with("xc1:"), "{raw}");
        assert_eq!(cipher().open("default", "api-key", &raw).unwrap(), "sk-live-7f3a9c2e");
        let file = std::fs::read(dir.path().join(DB_FILE)).unwrap();
        assert!(!file.windows(16).any(|w| w == b"sk-live-7f3a9c2e"), "no plaintext in the database file");

        // A wrong key fails at open, with what to do.
        let err = SqliteStore::open(dir.path(), SecretsCipher::new(&[1; 32])).err().unwrap();
        assert!(matches!(err, StoreError::WrongSecretsKey), "{err}");
        assert!(err.to_string().contains("start the server with the key they were stored with"), "{err}");

        // A value moved to another row does not open there.
        let other = raw_secret(dir.path(), "default", "other");
        {
            let conn = Connection::open(dir.path().join(DB_FILE)).unwrap();
            conn.execute("UPDATE secrets SET value = ?1 WHERE id = 'api-key'", [&other]).unwrap();
        }
        let store = SqliteStore::open(dir.path(), cipher()).unwrap();
        assert!(matches!(store.secrets(), Err(StoreError::WrongSecretsKey)));
        store.put_secret("default", "api-key", "sk-live-7f3a9c2e", &audit("secret.put"), u64::MAX).unwrap();
        assert_eq!(store.secrets().unwrap().len(), 2);
    }

    #[test]
    fn ping_fails_while_another_connection_holds_the_write_lock() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path(), cipher()).unwrap();
        store.ping().unwrap();
        let other = Connection::open(dir.path().join(DB_FILE)).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let started = std::time::Instant::now();
        assert!(store.ping().is_err(), "the write lock is taken");
        assert!(started.elapsed() < BUSY_TIMEOUT, "waited {:?}", started.elapsed());
        other.execute_batch("ROLLBACK").unwrap();
        store.ping().unwrap();
        // The probe leaves no transaction open: writes go on.
        assert!(store.conn().is_autocommit());
        store.conn().execute("INSERT INTO store_meta (key, value) VALUES ('after-ping', 'x')", []).unwrap();
    }

    #[test]
    fn the_database_and_its_journal_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(DB_FILE);
        std::fs::write(&path, b"").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let store = SqliteStore::open(dir.path(), cipher()).unwrap();
        store.put_secret("default", "a", "b", &audit("secret.put"), u64::MAX).unwrap();
        for file in [DB_FILE, "registry.sqlite3-wal", "registry.sqlite3-shm"] {
            let mode = std::fs::metadata(dir.path().join(file)).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{file}");
        }
    }
}
