//! The embedded registry: SQLite in the data dir.

use super::{RegistryStore, StoreError, StoredVersion};
use rusqlite::{Connection, OptionalExtension, params};
use std::path::Path;
use std::sync::Mutex;
use uuid::Uuid;

/// Schema migrations, applied in order; `PRAGMA user_version` records how
/// many have run.
const MIGRATIONS: &[&str] = &[
    "
    CREATE TABLE tools (
        tool_id    TEXT PRIMARY KEY,
        name       TEXT NOT NULL UNIQUE,
        created_at INTEGER NOT NULL
    );
    CREATE TABLE versions (
        tool_id    TEXT NOT NULL REFERENCES tools(tool_id),
        version    INTEGER NOT NULL CHECK (version >= 1),
        sha256     TEXT NOT NULL,
        signature  TEXT NOT NULL,
        manifest   TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (tool_id, version)
    );
",
    "
    ALTER TABLE versions ADD COLUMN signature_sha256 TEXT NOT NULL DEFAULT '';
    ALTER TABLE versions ADD COLUMN retired_at INTEGER;
",
    "
    CREATE TABLE secrets (
        id         TEXT PRIMARY KEY,
        value      TEXT NOT NULL,
        updated_at INTEGER NOT NULL
    );
",
];

/// The registry in `DATA/registry.sqlite3`.
pub struct SqliteStore {
    conn: Mutex<Connection>,
}

impl SqliteStore {
    /// Opens (creating and migrating) the database under `data_dir`.
    pub fn open(data_dir: &Path) -> Result<Self, StoreError> {
        let conn = Connection::open(data_dir.join("registry.sqlite3"))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        let applied: usize = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        for (i, migration) in MIGRATIONS.iter().enumerate().skip(applied) {
            let tx = conn.unchecked_transaction()?;
            tx.execute_batch(migration)?;
            tx.pragma_update(None, "user_version", i + 1)?;
            tx.commit()?;
        }
        Ok(SqliteStore { conn: Mutex::new(conn) })
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave SQLite inconsistent
        // (transactions roll back), so a poisoned lock is still usable.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl RegistryStore for SqliteStore {
    fn versions(&self) -> Result<Vec<StoredVersion>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT v.tool_id, t.name, v.version, v.sha256, v.signature, v.manifest, v.created_at,
                    v.signature_sha256, v.retired_at
             FROM versions v JOIN tools t USING (tool_id)
             ORDER BY v.created_at, v.tool_id, v.version",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, u32>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, String>(4)?,
                r.get::<_, String>(5)?,
                r.get::<_, i64>(6)?,
                r.get::<_, String>(7)?,
                r.get::<_, Option<i64>>(8)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (tool_id, name, version, sha256, signature, manifest, created_at, signature_sha256, retired_at) = row?;
            let what = format!("{name} version {version}");
            let tool_id = Uuid::parse_str(&tool_id).map_err(|e| {
                StoreError::Decode(what.clone(), serde_json::Error::io(std::io::Error::other(e.to_string())))
            })?;
            out.push(StoredVersion {
                tool_id,
                name,
                version,
                sha256,
                signature: serde_json::from_str(&signature).map_err(|e| StoreError::Decode(what.clone(), e))?,
                manifest: serde_json::from_str(&manifest).map_err(|e| StoreError::Decode(what, e))?,
                signature_sha256,
                created_at,
                retired_at,
            });
        }
        Ok(out)
    }

    fn insert_version(&self, v: &StoredVersion) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let tool_id = v.tool_id.to_string();
        let known: Option<String> =
            tx.query_row("SELECT tool_id FROM tools WHERE tool_id = ?1", [&tool_id], |r| r.get(0)).optional()?;
        if known.is_none() {
            tx.execute(
                "INSERT INTO tools (tool_id, name, created_at) VALUES (?1, ?2, ?3)",
                params![tool_id, v.name, v.created_at],
            )?;
        }
        // Serializing plain data cannot fail.
        let signature = serde_json::to_string(&v.signature).unwrap_or_default();
        let manifest = serde_json::to_string(&v.manifest).unwrap_or_default();
        // No ON CONFLICT clause: an existing (tool, version) is an error, so
        // a version's bytes and signature can never be replaced.
        tx.execute(
            "INSERT INTO versions (tool_id, version, sha256, signature, manifest, created_at, signature_sha256, retired_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![tool_id, v.version, v.sha256, signature, manifest, v.created_at, v.signature_sha256, v.retired_at],
        )?;
        tx.commit()?;
        Ok(())
    }

    fn secrets(&self) -> Result<Vec<(String, String)>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare("SELECT id, value FROM secrets ORDER BY id")?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn put_secret(&self, id: &str, value: &str, at: i64) -> Result<(), StoreError> {
        self.conn().execute(
            "INSERT INTO secrets (id, value, updated_at) VALUES (?1, ?2, ?3)
             ON CONFLICT (id) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
            params![id, value, at],
        )?;
        Ok(())
    }

    fn delete_secret(&self, id: &str) -> Result<bool, StoreError> {
        Ok(self.conn().execute("DELETE FROM secrets WHERE id = ?1", [id])? == 1)
    }

    fn retire_version(&self, tool_id: Uuid, version: u32, at: i64) -> Result<bool, StoreError> {
        let changed = self.conn().execute(
            "UPDATE versions SET retired_at = ?3 WHERE tool_id = ?1 AND version = ?2 AND retired_at IS NULL",
            params![tool_id.to_string(), version, at],
        )?;
        Ok(changed == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signature::Signature;

    fn version(tool_id: Uuid, n: u32) -> StoredVersion {
        StoredVersion {
            tool_id,
            name: "echo".into(),
            version: n,
            sha256: format!("{n:064}"),
            signature: Signature {
                name: "echo".into(),
                description: "d".into(),
                img: None,
                tags: vec![],
                inputs: vec![],
                outputs: vec![],
            },
            manifest: Default::default(),
            signature_sha256: format!("{:064}", n + 100),
            created_at: 1_700_000_000 + i64::from(n),
            retired_at: None,
        }
    }

    #[test]
    fn persists_versions_and_never_overwrites_one() {
        let dir = tempfile::tempdir().unwrap();
        let id = Uuid::new_v4();
        {
            let store = SqliteStore::open(dir.path()).unwrap();
            store.insert_version(&version(id, 1)).unwrap();
            store.insert_version(&version(id, 2)).unwrap();
            let mut changed = version(id, 1);
            changed.sha256 = "f".repeat(64);
            assert!(store.insert_version(&changed).is_err());
        }
        let reopened = SqliteStore::open(dir.path()).unwrap();
        let versions = reopened.versions().unwrap();
        assert_eq!(versions, vec![version(id, 1), version(id, 2)]);

        assert!(reopened.retire_version(id, 1, 1_800_000_000).unwrap());
        assert!(!reopened.retire_version(id, 1, 1_900_000_000).unwrap(), "retiring twice changes nothing");
        assert!(!reopened.retire_version(id, 7, 1_800_000_000).unwrap());
        let versions = reopened.versions().unwrap();
        assert_eq!(versions[0].retired_at, Some(1_800_000_000));

        reopened.put_secret("api-key", "one", 1).unwrap();
        reopened.put_secret("api-key", "two", 2).unwrap();
        assert_eq!(reopened.secrets().unwrap(), [("api-key".to_string(), "two".to_string())]);
        assert!(reopened.delete_secret("api-key").unwrap());
        assert!(!reopened.delete_secret("api-key").unwrap());
        assert_eq!(versions[1].retired_at, None);
    }
}
