//! [`AuthorizationStore`] on SQLite: one process writes the file, through
//! one connection, so each method's transaction is alone; the change log
//! (a fleet's) is not written.

use super::{SWEEP_BATCH, SqliteStore, in_batches, insert_audit};
use crate::store::StoreError;
use crate::store::authorizations::{
    AtRest, AuthorizationStore, Columns, LinkBounds, LinkInserted, LinkState, StoredGrant, StoredLink, StoredProvider,
    finished_state, grant_row, link_row, no_provider, provider_row,
};
use crate::tenancy::AuditEntry;
use rusqlite::{Connection, OptionalExtension, Params, Row, params};

impl Columns for Row<'_> {
    fn text(&self, i: usize) -> Result<String, StoreError> {
        Ok(self.get(i)?)
    }
    fn maybe_text(&self, i: usize) -> Result<Option<String>, StoreError> {
        Ok(self.get(i)?)
    }
    fn int(&self, i: usize) -> Result<i64, StoreError> {
        Ok(self.get(i)?)
    }
    fn maybe_int(&self, i: usize) -> Result<Option<i64>, StoreError> {
        Ok(self.get(i)?)
    }
}

/// Every row `sql` answers, read by `read`.
fn rows<T>(
    conn: &Connection,
    sql: &str,
    params: impl Params,
    read: impl Fn(&Row<'_>) -> Result<T, StoreError>,
) -> Result<Vec<T>, StoreError> {
    let mut stmt = conn.prepare(sql)?;
    let mut rows = stmt.query(params)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        out.push(read(row)?);
    }
    Ok(out)
}

/// The one row `sql` answers, if any, read by `read`.
fn row<T>(
    conn: &Connection,
    sql: &str,
    params: impl Params,
    read: impl Fn(&Row<'_>) -> Result<T, StoreError>,
) -> Result<Option<T>, StoreError> {
    conn.query_row(sql, params, |r| Ok(read(r))).optional()?.transpose()
}

fn provider_exists(conn: &Connection, tenant: &str, id: &str) -> Result<bool, StoreError> {
    let found: Option<i64> = conn
        .query_row("SELECT 1 FROM authorization_providers WHERE tenant = ?1 AND id = ?2", [tenant, id], |r| r.get(0))
        .optional()?;
    Ok(found.is_some())
}

fn count(conn: &Connection, sql: &str, params: impl Params) -> Result<u64, StoreError> {
    let n: i64 = conn.query_row(sql, params, |r| r.get(0))?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// Deletes what the store keeps for `tenant`'s end user `name` in this
/// slice, in the transaction `tx` that deletes the end user.
pub(super) fn delete_of_end_user(tx: &rusqlite::Transaction, tenant: &str, name: &str) -> rusqlite::Result<()> {
    tx.execute("DELETE FROM authorization_grants WHERE tenant = ?1 AND end_user = ?2", [tenant, name])?;
    tx.execute("DELETE FROM authorization_links WHERE tenant = ?1 AND end_user = ?2", [tenant, name])?;
    Ok(())
}

impl AuthorizationStore for SqliteStore {
    fn providers(&self) -> Result<Vec<StoredProvider>, StoreError> {
        let sealed = rows(
            &self.conn(),
            concat!("SELECT ", provider_columns!(), " FROM authorization_providers ORDER BY tenant, id"),
            [],
            |r| provider_row(r),
        )?;
        sealed.into_iter().map(|p| p.open(&self.cipher)).collect()
    }

    fn put_provider(&self, provider: &StoredProvider, audit: &AuditEntry) -> Result<(), StoreError> {
        let sealed = AtRest::seal(provider, &self.cipher)?;
        let p = sealed.row();
        self.audited(audit, |tx| {
            tx.execute(
                "INSERT INTO authorization_providers (tenant, id, settings, client_secret, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (tenant, id) DO UPDATE SET settings = excluded.settings,
                     client_secret = excluded.client_secret, updated_at = excluded.updated_at",
                params![p.tenant, p.id, p.settings, p.client_secret, p.updated_at],
            )
        })?;
        Ok(())
    }

    fn delete_provider(&self, tenant: &str, id: &str, audit: &AuditEntry) -> Result<bool, StoreError> {
        let deleted = self.audited(audit, |tx| {
            tx.execute("DELETE FROM authorization_grants WHERE tenant = ?1 AND provider = ?2", [tenant, id])?;
            tx.execute("DELETE FROM authorization_links WHERE tenant = ?1 AND provider = ?2", [tenant, id])?;
            tx.execute("DELETE FROM authorization_providers WHERE tenant = ?1 AND id = ?2", [tenant, id])
        })?;
        Ok(deleted == 1)
    }

    fn insert_link(&self, link: &StoredLink, bounds: LinkBounds, now: i64) -> Result<LinkInserted, StoreError> {
        let sealed = AtRest::seal(link, &self.cipher)?;
        let l = sealed.row();
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        if !provider_exists(&tx, &l.tenant, &l.provider)? {
            return Err(no_provider(&l.tenant, &l.provider));
        }
        let existing = row(
            &tx,
            concat!(
                "SELECT ",
                link_columns!(),
                " FROM authorization_links
                 WHERE tenant = ?1 AND end_user = ?2 AND provider = ?3 AND scopes = ?4 AND state = 'pending'
                   AND expires_at > ?5
                 ORDER BY expires_at DESC LIMIT 1"
            ),
            params![l.tenant, l.end_user, l.provider, l.scopes, now],
            |r| link_row(r),
        )?;
        if let Some(existing) = existing {
            return Ok(LinkInserted::Existing(existing.open(&self.cipher)?));
        }
        let of_end_user = count(
            &tx,
            "SELECT count(*) FROM authorization_links WHERE tenant = ?1 AND end_user = ?2
                 AND state IN ('pending', 'exchanging') AND expires_at > ?3",
            params![l.tenant, l.end_user, now],
        )?;
        let of_tenant = count(
            &tx,
            "SELECT count(*) FROM authorization_links WHERE tenant = ?1
                 AND state IN ('pending', 'exchanging') AND expires_at > ?2",
            params![l.tenant, now],
        )?;
        if !bounds.admit(of_end_user, of_tenant) {
            return Ok(LinkInserted::TooMany);
        }
        tx.execute(
            "INSERT INTO authorization_links (tenant, id, end_user, provider, scopes, state_sha256, verifier,
                 asked_by, created_at, expires_at, state, error)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, NULL)",
            params![
                l.tenant,
                l.id,
                l.end_user,
                l.provider,
                l.scopes,
                l.state_sha256,
                l.verifier,
                l.asked_by,
                l.created_at,
                l.expires_at,
                LinkState::Pending.as_str()
            ],
        )?;
        tx.commit()?;
        Ok(LinkInserted::Stored)
    }

    fn link(&self, tenant: &str, id: &str) -> Result<Option<StoredLink>, StoreError> {
        let sealed = row(
            &self.conn(),
            concat!("SELECT ", link_columns!(), " FROM authorization_links WHERE tenant = ?1 AND id = ?2"),
            [tenant, id],
            |r| link_row(r),
        )?;
        sealed.map(|l| l.open(&self.cipher)).transpose()
    }

    fn take_link(&self, tenant: &str, state_sha256: &str, now: i64) -> Result<Option<StoredLink>, StoreError> {
        let sealed = row(
            &self.conn(),
            concat!(
                "UPDATE authorization_links SET state = 'exchanging'
                 WHERE tenant = ?1 AND state_sha256 = ?2 AND state = 'pending' AND expires_at > ?3
                 RETURNING ",
                link_columns!()
            ),
            params![tenant, state_sha256, now],
            |r| link_row(r),
        )?;
        sealed.map(|l| l.open(&self.cipher)).transpose()
    }

    fn finish_link(&self, tenant: &str, id: &str, state: LinkState, error: Option<&str>) -> Result<(), StoreError> {
        self.conn().execute(
            "UPDATE authorization_links SET state = ?3, error = ?4
             WHERE tenant = ?1 AND id = ?2 AND state = 'exchanging'",
            params![tenant, id, finished_state(state)?, error],
        )?;
        Ok(())
    }

    fn sweep_links(&self, before: i64) -> Result<u64, StoreError> {
        let swept = in_batches(|| {
            Ok(self.conn().execute(
                "DELETE FROM authorization_links WHERE rowid IN (
                     SELECT rowid FROM authorization_links WHERE expires_at < ?1 LIMIT ?2)",
                params![before, SWEEP_BATCH],
            )?)
        })?;
        Ok(swept as u64)
    }

    fn grant(&self, tenant: &str, end_user: &str, provider: &str) -> Result<Option<StoredGrant>, StoreError> {
        let sealed = row(
            &self.conn(),
            concat!(
                "SELECT ",
                grant_columns!(),
                " FROM authorization_grants WHERE tenant = ?1 AND end_user = ?2 AND provider = ?3"
            ),
            [tenant, end_user, provider],
            |r| grant_row(r),
        )?;
        sealed.map(|g| g.open(&self.cipher)).transpose()
    }

    fn grants_of(&self, tenant: &str, end_user: &str) -> Result<Vec<StoredGrant>, StoreError> {
        let sealed = rows(
            &self.conn(),
            concat!(
                "SELECT ",
                grant_columns!(),
                " FROM authorization_grants WHERE tenant = ?1 AND end_user = ?2 ORDER BY provider"
            ),
            [tenant, end_user],
            |r| grant_row(r),
        )?;
        sealed.into_iter().map(|g| g.open(&self.cipher)).collect()
    }

    fn put_grant(&self, grant: &StoredGrant, audit: &AuditEntry) -> Result<(), StoreError> {
        let sealed = AtRest::seal(grant, &self.cipher)?;
        let g = sealed.row();
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        if !provider_exists(&tx, &g.tenant, &g.provider)? {
            return Err(no_provider(&g.tenant, &g.provider));
        }
        tx.execute(
            "INSERT INTO authorization_grants (tenant, end_user, provider, access_token, refresh_token, scopes,
                 expires_at, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
             ON CONFLICT (tenant, end_user, provider) DO UPDATE SET access_token = excluded.access_token,
                 refresh_token = excluded.refresh_token, scopes = excluded.scopes,
                 expires_at = excluded.expires_at, created_at = excluded.created_at,
                 updated_at = max(excluded.updated_at, authorization_grants.updated_at + 1)",
            params![
                g.tenant,
                g.end_user,
                g.provider,
                g.access_token,
                g.refresh_token,
                g.scopes,
                g.expires_at,
                g.created_at,
                g.updated_at
            ],
        )?;
        insert_audit(&tx, audit)?;
        tx.commit()?;
        Ok(())
    }

    fn replace_refreshed(&self, grant: &StoredGrant, refreshed_from: i64) -> Result<bool, StoreError> {
        let sealed = AtRest::seal(grant, &self.cipher)?;
        let g = sealed.row();
        let replaced = self.conn().execute(
            "UPDATE authorization_grants SET access_token = ?4, refresh_token = ?5, scopes = ?6, expires_at = ?7,
                 updated_at = max(?8, ?9 + 1)
             WHERE tenant = ?1 AND end_user = ?2 AND provider = ?3 AND updated_at = ?9",
            params![
                g.tenant,
                g.end_user,
                g.provider,
                g.access_token,
                g.refresh_token,
                g.scopes,
                g.expires_at,
                g.updated_at,
                refreshed_from
            ],
        )?;
        Ok(replaced == 1)
    }

    fn claim_refresh(
        &self,
        tenant: &str,
        end_user: &str,
        provider: &str,
        until: i64,
        now: i64,
    ) -> Result<bool, StoreError> {
        let claimed = self.conn().execute(
            "UPDATE authorization_grants SET refreshing_until = ?4
             WHERE tenant = ?1 AND end_user = ?2 AND provider = ?3
               AND (refreshing_until IS NULL OR refreshing_until <= ?5)",
            params![tenant, end_user, provider, until, now],
        )?;
        Ok(claimed == 1)
    }

    fn release_refresh(&self, tenant: &str, end_user: &str, provider: &str, until: i64) -> Result<(), StoreError> {
        self.conn().execute(
            "UPDATE authorization_grants SET refreshing_until = NULL
             WHERE tenant = ?1 AND end_user = ?2 AND provider = ?3 AND refreshing_until = ?4",
            params![tenant, end_user, provider, until],
        )?;
        Ok(())
    }

    fn delete_grant(
        &self,
        tenant: &str,
        end_user: &str,
        provider: &str,
        audit: &AuditEntry,
    ) -> Result<bool, StoreError> {
        let deleted = self.audited(audit, |tx| {
            tx.execute(
                "DELETE FROM authorization_grants WHERE tenant = ?1 AND end_user = ?2 AND provider = ?3",
                [tenant, end_user, provider],
            )
        })?;
        Ok(deleted == 1)
    }
}
