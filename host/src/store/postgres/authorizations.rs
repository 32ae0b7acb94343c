//! [`AuthorizationStore`] on PostgreSQL, shared by the replicas of a fleet:
//! what must hold across them is held by the database — a tenant's link
//! bounds under a per-tenant advisory lock, a link taken and a refresh
//! claimed by conditional updates (of racing writers, one changes the
//! row), a provider locked while it is deleted — and every write of a
//! provider or a grant appends to the change log (`authorizations`).

use super::{PostgresStore, db, insert_audit, record};
use crate::store::authorizations::{
    AtRest, AuthorizationStore, Columns, LinkBounds, LinkInserted, LinkState, StoredGrant, StoredLink, StoredProvider,
    finished_state, grant_row, link_row, no_provider, provider_row,
};
use crate::store::{StoreError, Topic};
use crate::tenancy::AuditEntry;
use sqlx::postgres::{PgArguments, PgRow};
use sqlx::{PgConnection, Row};

type PgQuery<'q> = sqlx::query::Query<'q, sqlx::Postgres, PgArguments>;

impl Columns for PgRow {
    fn text(&self, i: usize) -> Result<String, StoreError> {
        self.try_get(i).map_err(db)
    }
    fn maybe_text(&self, i: usize) -> Result<Option<String>, StoreError> {
        self.try_get(i).map_err(db)
    }
    fn int(&self, i: usize) -> Result<i64, StoreError> {
        self.try_get(i).map_err(db)
    }
    fn maybe_int(&self, i: usize) -> Result<Option<i64>, StoreError> {
        self.try_get(i).map_err(db)
    }
}

/// Whether `tenant` has the provider `id`, which stays so until the
/// transaction `tx` ends (a concurrent delete waits for it: see
/// [`AuthorizationStore::delete_provider`]).
async fn provider_held(tx: &mut PgConnection, tenant: &str, id: &str) -> Result<bool, StoreError> {
    let found = sqlx::query("SELECT 1 FROM authorization_providers WHERE tenant = $1 AND id = $2 FOR KEY SHARE")
        .bind(tenant)
        .bind(id)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db)?;
    Ok(found.is_some())
}

/// The count `query` answers.
async fn count(conn: &mut PgConnection, query: PgQuery<'_>) -> Result<u64, StoreError> {
    let n: i64 = query.fetch_one(&mut *conn).await.and_then(|r| r.try_get(0)).map_err(db)?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// Deletes what the store keeps for `tenant`'s end user `name` in this
/// slice, in the transaction `tx` that deletes the end user; whether it
/// deleted a grant (a change replicas cache).
pub(super) async fn delete_of_end_user(tx: &mut PgConnection, tenant: &str, name: &str) -> Result<bool, StoreError> {
    let grants = sqlx::query("DELETE FROM authorization_grants WHERE tenant = $1 AND end_user = $2")
        .bind(tenant)
        .bind(name)
        .execute(&mut *tx)
        .await
        .map_err(db)?
        .rows_affected();
    sqlx::query("DELETE FROM authorization_links WHERE tenant = $1 AND end_user = $2")
        .bind(tenant)
        .bind(name)
        .execute(&mut *tx)
        .await
        .map_err(db)?;
    Ok(grants > 0)
}

impl AuthorizationStore for PostgresStore {
    fn providers(&self) -> Result<Vec<StoredProvider>, StoreError> {
        let pool = self.pool.clone();
        let sealed = self.run(async move {
            let rows = sqlx::query(concat!(
                "SELECT ",
                provider_columns!(),
                " FROM authorization_providers ORDER BY tenant, id"
            ))
            .fetch_all(&pool)
            .await
            .map_err(db)?;
            rows.iter().map(provider_row).collect::<Result<Vec<_>, _>>()
        })?;
        sealed.into_iter().map(|p| p.open(&self.cipher)).collect()
    }

    fn put_provider(&self, provider: &StoredProvider, audit: &AuditEntry) -> Result<(), StoreError> {
        let sealed = AtRest::seal(provider, &self.cipher)?;
        let (pool, audit) = (self.pool.clone(), audit.clone());
        self.run(async move {
            let p = sealed.row();
            let mut tx = pool.begin().await.map_err(db)?;
            sqlx::query(
                "INSERT INTO authorization_providers (tenant, id, settings, client_secret, updated_at)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (tenant, id) DO UPDATE SET settings = excluded.settings,
                     client_secret = excluded.client_secret, updated_at = excluded.updated_at",
            )
            .bind(&p.tenant)
            .bind(&p.id)
            .bind(&p.settings)
            .bind(&p.client_secret)
            .bind(p.updated_at)
            .execute(&mut *tx)
            .await
            .map_err(db)?;
            insert_audit(&mut tx, &audit).await.map_err(db)?;
            record(&mut tx, Topic::Authorizations).await.map_err(db)?;
            tx.commit().await.map_err(db)
        })
    }

    fn delete_provider(&self, tenant: &str, id: &str, audit: &AuditEntry) -> Result<bool, StoreError> {
        let (pool, tenant, id, audit) = (self.pool.clone(), tenant.to_string(), id.to_string(), audit.clone());
        self.run(async move {
            let mut tx = pool.begin().await.map_err(db)?;
            // First the provider's row: a link or a grant being stored for
            // it (which holds it, `provider_held`) commits before, and is
            // deleted below; one that comes after finds no provider.
            let found = sqlx::query("SELECT 1 FROM authorization_providers WHERE tenant = $1 AND id = $2 FOR UPDATE")
                .bind(&tenant)
                .bind(&id)
                .fetch_optional(&mut *tx)
                .await
                .map_err(db)?;
            for delete in [
                "DELETE FROM authorization_grants WHERE tenant = $1 AND provider = $2",
                "DELETE FROM authorization_links WHERE tenant = $1 AND provider = $2",
            ] {
                sqlx::query(delete).bind(&tenant).bind(&id).execute(&mut *tx).await.map_err(db)?;
            }
            sqlx::query("DELETE FROM authorization_providers WHERE tenant = $1 AND id = $2")
                .bind(&tenant)
                .bind(&id)
                .execute(&mut *tx)
                .await
                .map_err(db)?;
            insert_audit(&mut tx, &audit).await.map_err(db)?;
            record(&mut tx, Topic::Authorizations).await.map_err(db)?;
            tx.commit().await.map_err(db)?;
            Ok(found.is_some())
        })
    }

    fn insert_link(&self, link: &StoredLink, bounds: LinkBounds, now: i64) -> Result<LinkInserted, StoreError> {
        let sealed = AtRest::seal(link, &self.cipher)?;
        let pool = self.pool.clone();
        // What was done, or (`Err`) the pending link answered instead.
        let existing = self.run(async move {
            let l = sealed.row();
            let mut tx = pool.begin().await.map_err(db)?;
            // The tenant's links are stored one at a time, whichever
            // replica stores them: none passes a bound beside another.
            sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
                .bind(format!("authorization-links:{}", l.tenant))
                .execute(&mut *tx)
                .await
                .map_err(db)?;
            if !provider_held(&mut tx, &l.tenant, &l.provider).await? {
                return Err(no_provider(&l.tenant, &l.provider));
            }
            let existing = sqlx::query(concat!(
                "SELECT ",
                link_columns!(),
                " FROM authorization_links
                 WHERE tenant = $1 AND end_user = $2 AND provider = $3 AND scopes = $4 AND state = 'pending'
                   AND expires_at > $5
                 ORDER BY expires_at DESC LIMIT 1"
            ))
            .bind(&l.tenant)
            .bind(&l.end_user)
            .bind(&l.provider)
            .bind(&l.scopes)
            .bind(now)
            .fetch_optional(&mut *tx)
            .await
            .map_err(db)?;
            if let Some(existing) = existing {
                return Ok(Err(link_row(&existing)?));
            }
            let of_end_user = count(
                &mut tx,
                sqlx::query(
                    "SELECT count(*) FROM authorization_links WHERE tenant = $1 AND end_user = $2
                         AND state IN ('pending', 'exchanging') AND expires_at > $3",
                )
                .bind(&l.tenant)
                .bind(&l.end_user)
                .bind(now),
            )
            .await?;
            let of_tenant = count(
                &mut tx,
                sqlx::query(
                    "SELECT count(*) FROM authorization_links WHERE tenant = $1
                         AND state IN ('pending', 'exchanging') AND expires_at > $2",
                )
                .bind(&l.tenant)
                .bind(now),
            )
            .await?;
            if !bounds.admit(of_end_user, of_tenant) {
                return Ok(Ok(LinkInserted::TooMany));
            }
            sqlx::query(
                "INSERT INTO authorization_links (tenant, id, end_user, provider, scopes, state_sha256, verifier,
                     asked_by, created_at, expires_at, state, error)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, NULL)",
            )
            .bind(&l.tenant)
            .bind(&l.id)
            .bind(&l.end_user)
            .bind(&l.provider)
            .bind(&l.scopes)
            .bind(&l.state_sha256)
            .bind(&l.verifier)
            .bind(&l.asked_by)
            .bind(l.created_at)
            .bind(l.expires_at)
            .bind(LinkState::Pending.as_str())
            .execute(&mut *tx)
            .await
            .map_err(db)?;
            tx.commit().await.map_err(db)?;
            Ok(Ok(LinkInserted::Stored))
        })?;
        // The link answered instead is opened here, off the store's runtime.
        match existing {
            Ok(inserted) => Ok(inserted),
            Err(existing) => Ok(LinkInserted::Existing(existing.open(&self.cipher)?)),
        }
    }

    fn link(&self, tenant: &str, id: &str) -> Result<Option<StoredLink>, StoreError> {
        let (pool, tenant, id) = (self.pool.clone(), tenant.to_string(), id.to_string());
        let sealed = self.run(async move {
            let row = sqlx::query(concat!(
                "SELECT ",
                link_columns!(),
                " FROM authorization_links WHERE tenant = $1 AND id = $2"
            ))
            .bind(tenant)
            .bind(id)
            .fetch_optional(&pool)
            .await
            .map_err(db)?;
            row.as_ref().map(link_row).transpose()
        })?;
        sealed.map(|l| l.open(&self.cipher)).transpose()
    }

    fn take_link(&self, tenant: &str, state_sha256: &str, now: i64) -> Result<Option<StoredLink>, StoreError> {
        let (pool, tenant, state_sha256) = (self.pool.clone(), tenant.to_string(), state_sha256.to_string());
        let sealed = self.run(async move {
            // Of two takers at once, the second waits for the first's row
            // lock, then finds the link no longer pending.
            let row = sqlx::query(concat!(
                "UPDATE authorization_links SET state = 'exchanging'
                 WHERE tenant = $1 AND state_sha256 = $2 AND state = 'pending' AND expires_at > $3
                 RETURNING ",
                link_columns!()
            ))
            .bind(tenant)
            .bind(state_sha256)
            .bind(now)
            .fetch_optional(&pool)
            .await
            .map_err(db)?;
            row.as_ref().map(link_row).transpose()
        })?;
        sealed.map(|l| l.open(&self.cipher)).transpose()
    }

    fn finish_link(&self, tenant: &str, id: &str, state: LinkState, error: Option<&str>) -> Result<(), StoreError> {
        let state = finished_state(state)?;
        let (pool, tenant, id, error) =
            (self.pool.clone(), tenant.to_string(), id.to_string(), error.map(str::to_string));
        self.run(async move {
            sqlx::query(
                "UPDATE authorization_links SET state = $3, error = $4
                 WHERE tenant = $1 AND id = $2 AND state = 'exchanging'",
            )
            .bind(tenant)
            .bind(id)
            .bind(state)
            .bind(error)
            .execute(&pool)
            .await
            .map_err(db)?;
            Ok(())
        })
    }

    fn sweep_links(&self, before: i64) -> Result<u64, StoreError> {
        let pool = self.pool.clone();
        self.run(async move {
            Ok(sqlx::query("DELETE FROM authorization_links WHERE expires_at < $1")
                .bind(before)
                .execute(&pool)
                .await
                .map_err(db)?
                .rows_affected())
        })
    }

    fn grant(&self, tenant: &str, end_user: &str, provider: &str) -> Result<Option<StoredGrant>, StoreError> {
        let (pool, tenant, end_user, provider) =
            (self.pool.clone(), tenant.to_string(), end_user.to_string(), provider.to_string());
        let sealed = self.run(async move {
            let row = sqlx::query(concat!(
                "SELECT ",
                grant_columns!(),
                " FROM authorization_grants WHERE tenant = $1 AND end_user = $2 AND provider = $3"
            ))
            .bind(tenant)
            .bind(end_user)
            .bind(provider)
            .fetch_optional(&pool)
            .await
            .map_err(db)?;
            row.as_ref().map(grant_row).transpose()
        })?;
        sealed.map(|g| g.open(&self.cipher)).transpose()
    }

    fn grants_of(&self, tenant: &str, end_user: &str) -> Result<Vec<StoredGrant>, StoreError> {
        let (pool, tenant, end_user) = (self.pool.clone(), tenant.to_string(), end_user.to_string());
        let sealed = self.run(async move {
            let rows = sqlx::query(concat!(
                "SELECT ",
                grant_columns!(),
                " FROM authorization_grants WHERE tenant = $1 AND end_user = $2 ORDER BY provider"
            ))
            .bind(tenant)
            .bind(end_user)
            .fetch_all(&pool)
            .await
            .map_err(db)?;
            rows.iter().map(grant_row).collect::<Result<Vec<_>, _>>()
        })?;
        sealed.into_iter().map(|g| g.open(&self.cipher)).collect()
    }

    fn put_grant(&self, grant: &StoredGrant, audit: &AuditEntry) -> Result<(), StoreError> {
        let sealed = AtRest::seal(grant, &self.cipher)?;
        let (pool, audit) = (self.pool.clone(), audit.clone());
        self.run(async move {
            let g = sealed.row();
            let mut tx = pool.begin().await.map_err(db)?;
            if !provider_held(&mut tx, &g.tenant, &g.provider).await? {
                return Err(no_provider(&g.tenant, &g.provider));
            }
            sqlx::query(
                "INSERT INTO authorization_grants (tenant, end_user, provider, access_token, refresh_token, scopes,
                     expires_at, created_at, updated_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
                 ON CONFLICT (tenant, end_user, provider) DO UPDATE SET access_token = excluded.access_token,
                     refresh_token = excluded.refresh_token, scopes = excluded.scopes,
                     expires_at = excluded.expires_at, created_at = excluded.created_at,
                     updated_at = GREATEST(excluded.updated_at, authorization_grants.updated_at + 1)",
            )
            .bind(&g.tenant)
            .bind(&g.end_user)
            .bind(&g.provider)
            .bind(&g.access_token)
            .bind(&g.refresh_token)
            .bind(&g.scopes)
            .bind(g.expires_at)
            .bind(g.created_at)
            .bind(g.updated_at)
            .execute(&mut *tx)
            .await
            .map_err(db)?;
            insert_audit(&mut tx, &audit).await.map_err(db)?;
            record(&mut tx, Topic::Authorizations).await.map_err(db)?;
            tx.commit().await.map_err(db)
        })
    }

    fn replace_refreshed(&self, grant: &StoredGrant, refreshed_from: i64) -> Result<bool, StoreError> {
        let sealed = AtRest::seal(grant, &self.cipher)?;
        let pool = self.pool.clone();
        self.run(async move {
            let g = sealed.row();
            let mut tx = pool.begin().await.map_err(db)?;
            let replaced = sqlx::query(
                "UPDATE authorization_grants SET access_token = $4, refresh_token = $5, scopes = $6,
                     expires_at = $7, updated_at = GREATEST($8, $9 + 1)
                 WHERE tenant = $1 AND end_user = $2 AND provider = $3 AND updated_at = $9",
            )
            .bind(&g.tenant)
            .bind(&g.end_user)
            .bind(&g.provider)
            .bind(&g.access_token)
            .bind(&g.refresh_token)
            .bind(&g.scopes)
            .bind(g.expires_at)
            .bind(g.updated_at)
            .bind(refreshed_from)
            .execute(&mut *tx)
            .await
            .map_err(db)?
            .rows_affected()
                == 1;
            if replaced {
                record(&mut tx, Topic::Authorizations).await.map_err(db)?;
            }
            tx.commit().await.map_err(db)?;
            Ok(replaced)
        })
    }

    fn claim_refresh(
        &self,
        tenant: &str,
        end_user: &str,
        provider: &str,
        until: i64,
        now: i64,
    ) -> Result<bool, StoreError> {
        let (pool, tenant, end_user, provider) =
            (self.pool.clone(), tenant.to_string(), end_user.to_string(), provider.to_string());
        self.run(async move {
            // Of two replicas claiming at once, the second waits for the
            // first's row lock, then finds the claim held.
            let claimed = sqlx::query(
                "UPDATE authorization_grants SET refreshing_until = $4
                 WHERE tenant = $1 AND end_user = $2 AND provider = $3
                   AND (refreshing_until IS NULL OR refreshing_until <= $5)",
            )
            .bind(tenant)
            .bind(end_user)
            .bind(provider)
            .bind(until)
            .bind(now)
            .execute(&pool)
            .await
            .map_err(db)?
            .rows_affected();
            Ok(claimed == 1)
        })
    }

    fn release_refresh(&self, tenant: &str, end_user: &str, provider: &str, until: i64) -> Result<(), StoreError> {
        let (pool, tenant, end_user, provider) =
            (self.pool.clone(), tenant.to_string(), end_user.to_string(), provider.to_string());
        self.run(async move {
            sqlx::query(
                "UPDATE authorization_grants SET refreshing_until = NULL
                 WHERE tenant = $1 AND end_user = $2 AND provider = $3 AND refreshing_until = $4",
            )
            .bind(tenant)
            .bind(end_user)
            .bind(provider)
            .bind(until)
            .execute(&pool)
            .await
            .map_err(db)?;
            Ok(())
        })
    }

    fn delete_grant(
        &self,
        tenant: &str,
        end_user: &str,
        provider: &str,
        audit: &AuditEntry,
    ) -> Result<bool, StoreError> {
        let (tenant, end_user, provider) = (tenant.to_string(), end_user.to_string(), provider.to_string());
        let deleted = audited!(
            self,
            audit,
            Some(Topic::Authorizations),
            "DELETE FROM authorization_grants WHERE tenant = $1 AND end_user = $2 AND provider = $3",
            tenant,
            end_user,
            provider
        )?;
        Ok(deleted == 1)
    }
}
