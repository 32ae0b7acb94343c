//! The store a fleet shares: PostgreSQL, through sqlx.
//!
//! The [`RegistryStore`] interface is synchronous (SQLite's calls are), and
//! the host calls it from its HTTP threads, its tool threads and plain
//! threads alike. So this store owns a small runtime of its own
//! (`plinth-db`) with the connection pool: each method runs its queries
//! there and blocks the caller on the answer, at most [`STATEMENT_WAIT`] —
//! a database that does not answer is an error, never a hang.
//!
//! What makes a fleet work lives here too:
//! - **the change log**: every change a replica caches writes a `changes`
//!   row in its own transaction, under a lock that makes sequence order
//!   commit order, and `NOTIFY plinth_changes`; a listener task wakes
//!   [`RegistryStore::wait_for_change`] (and wakes it on reconnect too, so
//!   that a replica reads the log after any notification it may have
//!   missed);
//! - **the replicas' heartbeats**: each process beats every
//!   [`HEARTBEAT`]; a replica is live while its beat is younger than five
//!   seconds (`live_since!`, in the database's clock). A call claim or a running CHEQ transaction names its
//!   replica (`runner`), so another replica can tell a call still running
//!   from one whose replica died;
//! - **per-tool serialisation of deploys**: `insert_version` takes a
//!   transaction-scoped advisory lock on (tenant, name) and refuses a
//!   version that is not the tool's next.

use super::{
    CallKey, ChangeFeed, Claimed, EXPIRIES_CLAIMED_UNTIL, ExpiredConfirmations, FORGOTTEN_FIRST, OAuthGrant,
    RegistryStore, SecretsCipher, StoreError, StoredConfig, StoredConfirmation, StoredDesignerSession, StoredSecret,
    StoredSession, StoredSetting, StoredToolset, StoredVersion, Topic, UsageRow, usage_of,
};
use crate::digest::sha256_hex;
use crate::tenancy::{
    AuditEntry, AuditQuery, ConfirmationBound, ConfirmationLimit, ConfirmationUsage, KeyRecord, LedgerBound, Role,
    TenantRecord, unix_now,
};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{PgConnection, Row};
use std::future::Future;
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;
use uuid::Uuid;

/// How long a caller waits for the database's answer.
const STATEMENT_WAIT: Duration = Duration::from_secs(10);
/// How long a connection is waited for when the pool has none free (or the
/// database is unreachable).
const ACQUIRE_WAIT: Duration = Duration::from_secs(3);
/// One `oauth_grants` row by its sha256, its columns in [`oauth_grant_row`]'s
/// order.
macro_rules! oauth_grant_select {
    () => {
        "SELECT token_sha256, kind, tenant, client_id, end_user, scope, resource, family, detail, expires_at,
             used_at, revoked_at FROM oauth_grants WHERE token_sha256 = $1"
    };
}

/// A replica whose last beat is older than this is gone (its claims and
/// running transactions are orphans): SQL, spliced into statements.
macro_rules! live_since {
    () => {
        "now() - interval '5 seconds'"
    };
}

// After the macros: the fleet code splices `live_since!` too.
mod fleet;

use fleet::{HEARTBEAT, interrupt_orphans, record};

/// The `store_meta` row that proves the secrets key is the one the stored
/// secrets were sealed with.
const KEY_CHECK: &str = "secrets-key-check";

/// A PostgreSQL database shared by the replicas of a fleet.
pub struct PostgresStore {
    pool: PgPool,
    cipher: SecretsCipher,
    /// This process's id among the replicas (random per start).
    replica: Arc<str>,
    /// Replicas live at the last heartbeat.
    live: Arc<AtomicUsize>,
    /// Set by the listener when a change may have happened.
    changed: Arc<(Mutex<bool>, Condvar)>,
    /// Whether the database could not be reached a moment ago (see
    /// [`Reachability`]).
    reachability: Arc<Reachability>,
    /// The `plinth-db` runtime; shut down in the background on drop (a
    /// runtime must not be dropped inside another one, where the host may
    /// be dropped).
    runtime: Option<tokio::runtime::Runtime>,
}

/// Locks `tenant`'s row of `call_ledger_usage`. Every transaction that
/// writes `idempotent_calls` takes it first: the trigger that keeps the
/// usage updates that row after the record's, so a transaction that locked
/// a record first (settling it) and one that locked the usage row first
/// (claiming, whose insert waits on that record) would each wait for the
/// other, and PostgreSQL would abort one as a deadlock.
async fn lock_ledger_usage(tx: &mut sqlx::Transaction<'_, sqlx::Postgres>, tenant: &str) -> Result<(), StoreError> {
    sqlx::query("SELECT 1 FROM call_ledger_usage WHERE tenant = $1 FOR UPDATE")
        .bind(tenant)
        .execute(&mut **tx)
        .await
        .map_err(db)?;
    Ok(())
}

/// Locks `tenant`'s row of `confirmation_usage` (made first if it has none)
/// and reads it. Every transaction whose writes move its counts takes it
/// before it writes a transaction (as [`lock_ledger_usage`] for the
/// ledger): storing one, which may mark others expired or forget them
/// while holding it, must never wait on a row whose writer waits for it.
/// Storing replicas take turns on it, so none passes a bound beside another.
async fn lock_confirmation_usage(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    tenant: &str,
) -> Result<ConfirmationUsage, StoreError> {
    sqlx::query(
        "INSERT INTO confirmation_usage (tenant, pending, pending_bytes, stored, stored_bytes)
         VALUES ($1, 0, 0, 0, 0) ON CONFLICT (tenant) DO NOTHING",
    )
    .bind(tenant)
    .execute(&mut **tx)
    .await
    .map_err(db)?;
    confirmation_usage(tx, tenant, true).await
}

/// `tenant`'s row of `confirmation_usage`, locked for the transaction when
/// `lock`.
async fn confirmation_usage(
    conn: &mut PgConnection,
    tenant: &str,
    lock: bool,
) -> Result<ConfirmationUsage, StoreError> {
    let query = if lock {
        "SELECT pending, pending_bytes, stored, stored_bytes FROM confirmation_usage WHERE tenant = $1 FOR UPDATE"
    } else {
        "SELECT pending, pending_bytes, stored, stored_bytes FROM confirmation_usage WHERE tenant = $1"
    };
    let row: Option<(i64, i64, i64, i64)> =
        sqlx::query_as(query).bind(tenant).fetch_optional(&mut *conn).await.map_err(db)?;
    Ok(usage_of(row))
}

/// How many transactions wait for `end_user` of `tenant` at `now`, and the
/// bytes they hold.
async fn waiting_for(
    conn: &mut PgConnection,
    tenant: &str,
    end_user: &str,
    now: i64,
) -> Result<(u64, u64), StoreError> {
    let (waiting, bytes): (i64, i64) = sqlx::query_as(
        "SELECT count(*), coalesce(sum(octet_length(inputs)::BIGINT + octet_length(cheq)), 0)::BIGINT
         FROM confirmations WHERE tenant = $1 AND end_user = $2 AND state = 'pending' AND expires_at > $3",
    )
    .bind(tenant)
    .bind(end_user)
    .bind(now)
    .fetch_one(&mut *conn)
    .await
    .map_err(db)?;
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    Ok((count(waiting), count(bytes)))
}

/// Locks the `confirmation_usage` row of transaction `id`'s tenant, before
/// a write to it that moves its counts (a decision, an answer).
async fn lock_confirmation_usage_of(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    id: &str,
) -> Result<(), StoreError> {
    sqlx::query(
        "SELECT 1 FROM confirmation_usage WHERE tenant = (SELECT tenant FROM confirmations WHERE id = $1) FOR UPDATE",
    )
    .bind(id)
    .execute(&mut **tx)
    .await
    .map_err(db)?;
    Ok(())
}

/// [`RegistryStore::insert_confirmation`]'s checks, in `tx`, which holds the
/// tenant's usage row.
async fn admit_confirmation(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    c: &StoredConfirmation,
    bound: ConfirmationBound,
    now: i64,
    mut usage: ConfirmationUsage,
) -> Result<Result<(), ConfirmationLimit>, StoreError> {
    let bytes = c.stored_bytes();
    if bound.pending_refusal(&usage, bytes).is_some() || bound.trim_batch(&usage, bytes).is_some() {
        // Only at a bound: the waiting ones whose expiry passed are waiting
        // no longer.
        sqlx::query(
            "UPDATE confirmations SET state = 'expired' WHERE tenant = $1 AND state = 'pending' AND expires_at <= $2",
        )
        .bind(&c.tenant)
        .bind(now)
        .execute(&mut **tx)
        .await
        .map_err(db)?;
        usage = confirmation_usage(tx, &c.tenant, false).await?;
    }
    if let Some(limit) = bound.pending_refusal(&usage, bytes) {
        return Ok(Err(limit));
    }
    let (waiting, waiting_bytes) = waiting_for(tx, &c.tenant, &c.end_user, now).await?;
    if let Some(limit) = bound.end_user_refusal(waiting, waiting_bytes, bytes) {
        return Ok(Err(limit));
    }
    while let Some(batch) = bound.trim_batch(&usage, bytes) {
        let mut forgotten = 0;
        for state in FORGOTTEN_FIRST {
            forgotten = sqlx::query(
                "DELETE FROM confirmations WHERE id IN (
                     SELECT id FROM confirmations WHERE tenant = $1 AND state = $2 ORDER BY expires_at LIMIT $3)",
            )
            .bind(&c.tenant)
            .bind(state)
            .bind(i64::try_from(batch).unwrap_or(i64::MAX))
            .execute(&mut **tx)
            .await
            .map_err(db)?
            .rows_affected();
            if forgotten > 0 {
                break;
            }
        }
        if forgotten == 0 {
            return Ok(Err(bound.stored_refusal(&usage)));
        }
        usage = confirmation_usage(tx, &c.tenant, false).await?;
    }
    Ok(Ok(()))
}

fn db(e: sqlx::Error) -> StoreError {
    StoreError::Postgres(e)
}

impl PostgresStore {
    /// Connects to `url`, applies the migrations (one replica at a time:
    /// sqlx's migrator holds an advisory lock), checks the secrets key and
    /// starts the heartbeat and the change listener.
    pub fn open(url: &str, cipher: SecretsCipher) -> Result<Self, StoreError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("plinth-db")
            .enable_all()
            .build()?;
        // The URL holds the database password: an error must not repeat it.
        let options = PgConnectOptions::from_str(url)
            .map_err(|_| {
                StoreError::Inconsistent(
                    "the database URL is not a PostgreSQL URL (postgres://USER:PASSWORD@HOST:PORT/DATABASE)".into(),
                )
            })?
            .application_name("plinth");
        // On the store's runtime, waited for on a channel: `open` may be
        // called from inside another runtime, where `block_on` would panic.
        let (answer, receive) = std::sync::mpsc::sync_channel(1);
        runtime.spawn(async move {
            let connected = async {
                let pool = PgPoolOptions::new()
                    .max_connections(16)
                    .acquire_timeout(ACQUIRE_WAIT)
                    .connect_with(options)
                    .await?;
                sqlx::migrate!("./migrations/postgres").run(&pool).await?;
                Ok::<_, sqlx::Error>(pool)
            };
            let _ = answer.send(connected.await);
        });
        let pool = receive.recv().map_err(|_| StoreError::Inconsistent("the database runtime stopped".into()))?;
        let pool = pool.map_err(db)?;
        let mut id = [0u8; 8];
        getrandom::fill(&mut id).map_err(|e| StoreError::Io(std::io::Error::other(e)))?;
        let store = PostgresStore {
            pool,
            cipher,
            replica: hex::encode(id).into(),
            live: Arc::new(AtomicUsize::new(1)),
            changed: Arc::new((Mutex::new(false), Condvar::new())),
            reachability: Arc::default(),
            runtime: Some(runtime),
        };
        store.check_secrets_key()?;
        store.beat()?;
        store.spawn_heartbeat();
        store.spawn_listener();
        tracing::info!(replica = &*store.replica, "connected to the fleet's PostgreSQL store");
        Ok(store)
    }

    /// Runs `work` on the store's runtime and waits for its answer. While
    /// the database is known to be unreachable, fails at once instead.
    fn run<T: Send + 'static>(
        &self,
        work: impl Future<Output = Result<T, StoreError>> + Send + 'static,
    ) -> Result<T, StoreError> {
        let Some(runtime) = &self.runtime else {
            return Err(StoreError::Inconsistent("the store is closed".into()));
        };
        if !self.reachability.worth_trying() {
            return Err(StoreError::Postgres(sqlx::Error::PoolTimedOut));
        }
        let (answer, receive) = std::sync::mpsc::sync_channel(1);
        runtime.spawn(async move {
            let _ = answer.send(work.await);
        });
        let answer = super::off_the_workers(|| receive.recv_timeout(STATEMENT_WAIT))
            .map_err(|_| StoreError::Postgres(sqlx::Error::PoolTimedOut))?;
        self.reachability.observe(&answer);
        answer
    }

    fn check_secrets_key(&self) -> Result<(), StoreError> {
        let fresh = self.cipher.seal("", KEY_CHECK, KEY_CHECK)?;
        let pool = self.pool.clone();
        let stored = self.run(async move {
            sqlx::query("INSERT INTO store_meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING")
                .bind(KEY_CHECK)
                .bind(fresh)
                .execute(&pool)
                .await
                .map_err(db)?;
            let row = sqlx::query("SELECT value FROM store_meta WHERE key = $1")
                .bind(KEY_CHECK)
                .fetch_one(&pool)
                .await
                .map_err(db)?;
            row.try_get::<String, _>(0).map_err(db)
        })?;
        self.cipher.open("", KEY_CHECK, &stored)?;
        Ok(())
    }
}

/// A circuit breaker in front of the database. When a call could not reach
/// it (no connection within the pool's wait), callers fail at once for the
/// next [`HEARTBEAT`] instead of each holding its thread — an HTTP worker,
/// often — for the whole wait: an outage must not let a flood of requests
/// that need the store (logins, calls with a `call_id`, health checks) stall
/// the ones that do not. The heartbeat keeps trying and closes the breaker
/// when the database answers again.
#[derive(Debug, Default)]
struct Reachability {
    unreachable_until: Mutex<Option<std::time::Instant>>,
}

impl Reachability {
    fn worth_trying(&self) -> bool {
        let until = *self.unreachable_until.lock().unwrap_or_else(|p| p.into_inner());
        until.is_none_or(|until| std::time::Instant::now() >= until)
    }

    fn observe<T>(&self, outcome: &Result<T, StoreError>) {
        let unreachable = matches!(
            outcome,
            Err(StoreError::Postgres(
                sqlx::Error::PoolTimedOut | sqlx::Error::Io(_) | sqlx::Error::Tls(_) | sqlx::Error::PoolClosed
            ))
        );
        let mut until = self.unreachable_until.lock().unwrap_or_else(|p| p.into_inner());
        *until = unreachable.then(|| std::time::Instant::now() + HEARTBEAT);
    }
}

impl Drop for PostgresStore {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

async fn insert_audit(tx: &mut PgConnection, audit: &AuditEntry) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO audit (at, actor, tenant, action, target, sha256, detail) VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(audit.at)
    .bind(&audit.actor)
    .bind(&audit.tenant)
    .bind(&audit.action)
    .bind(&audit.target)
    .bind(&audit.sha256)
    .bind(audit.detail.to_string())
    .execute(&mut *tx)
    .await?;
    Ok(())
}

async fn waiting_count(tx: &mut PgConnection, tenant: &str) -> Result<i64, sqlx::Error> {
    sqlx::query("SELECT count(*) FROM waiting_calls WHERE tenant = $1").bind(tenant).fetch_one(tx).await?.try_get(0)
}

fn decode_error(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Decode(what.to_string(), serde_json::Error::io(std::io::Error::other(e.to_string())))
}

/// Runs one statement with its audit entry and, for a change replicas cache
/// (`Some(topic)`), its change-log row, in one transaction; returns the rows
/// it changed.
macro_rules! audited {
    ($store:expr, $audit:expr, $topic:expr, $query:expr $(, $bind:ident)* $(,)?) => {{
        let pool = $store.pool.clone();
        let audit = $audit.clone();
        $store.run(async move {
            let mut tx = pool.begin().await.map_err(db)?;
            let changed = sqlx::query($query)
                $(.bind($bind))*
                .execute(&mut *tx)
                .await
                .map_err(db)?
                .rows_affected();
            insert_audit(&mut tx, &audit).await.map_err(db)?;
            if let Some(topic) = $topic {
                record(&mut tx, topic).await.map_err(db)?;
            }
            tx.commit().await.map_err(db)?;
            Ok(changed)
        })
    }};
}

/// [`audited!`] for a put bounded per tenant: under a transaction-scoped
/// advisory lock on `$lock` (the tenant's rows of one kind), `$room` (a
/// boolean query: the row exists, or the tenant holds fewer than the bound)
/// decides, in the upsert's own transaction, whether the upsert and its
/// audit entry (and change-log row) are written; `false`, and nothing is.
/// Replicas racing for the last place take it one at a time.
macro_rules! audited_within_bound {
    ($store:expr, $audit:expr, $topic:expr, $lock:expr, $room:expr, [$($room_bind:expr),*], $query:expr, [$($bind:ident),*] $(,)?) => {{
        let pool = $store.pool.clone();
        let audit = $audit.clone();
        let lock: String = $lock;
        $store.run(async move {
            let mut tx = pool.begin().await.map_err(db)?;
            sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
                .bind(&lock)
                .execute(&mut *tx)
                .await
                .map_err(db)?;
            let room: bool = sqlx::query_scalar($room)
                $(.bind($room_bind))*
                .fetch_one(&mut *tx)
                .await
                .map_err(db)?;
            if !room {
                // Dropped: rolled back.
                return Ok(false);
            }
            sqlx::query($query)
                $(.bind($bind))*
                .execute(&mut *tx)
                .await
                .map_err(db)?;
            insert_audit(&mut tx, &audit).await.map_err(db)?;
            if let Some(topic) = $topic {
                record(&mut tx, topic).await.map_err(db)?;
            }
            tx.commit().await.map_err(db)?;
            Ok(true)
        })
    }};
}

// After `audited!`, which it uses.
mod authorizations;

/// A usage bucket from the first 14 columns both usage tables share.
fn usage_row(r: &sqlx::postgres::PgRow) -> Result<UsageRow, sqlx::Error> {
    Ok(UsageRow {
        tenant: r.try_get(0)?,
        tool_id: r.try_get(1)?,
        tool: r.try_get(2)?,
        version: u32::try_from(r.try_get::<i64, _>(3)?).unwrap_or(0),
        door: r.try_get(4)?,
        outcome: r.try_get(5)?,
        granularity: r.try_get(6)?,
        bucket: r.try_get(7)?,
        replica: r.try_get(8)?,
        calls: u64::try_from(r.try_get::<i64, _>(9)?).unwrap_or(0),
        total_ms: r.try_get(10)?,
        histogram: serde_json::from_str(&r.try_get::<String, _>(11)?).unwrap_or_default(),
        outbound: serde_json::from_str(&r.try_get::<String, _>(12)?).unwrap_or_default(),
        refused: serde_json::from_str(&r.try_get::<String, _>(13)?).unwrap_or_default(),
        toolset: None,
    })
}

impl RegistryStore for PostgresStore {
    fn versions(&self) -> Result<Vec<StoredVersion>, StoreError> {
        let pool = self.pool.clone();
        let rows = self.run(async move {
            sqlx::query(
                "SELECT v.tool_id, t.tenant, t.name, v.version, v.sha256, v.signature, v.manifest, v.created_at,
                        v.signature_sha256, v.retired_at, v.provenance
                 FROM versions v JOIN tools t USING (tool_id)
                 ORDER BY v.created_at, v.tool_id, v.version",
            )
            .fetch_all(&pool)
            .await
            .map_err(db)
        })?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let tenant: String = row.try_get(1).map_err(db)?;
            let name: String = row.try_get(2).map_err(db)?;
            let version: i32 = row.try_get(3).map_err(db)?;
            let what = format!("{tenant}/{name} version {version}");
            let tool_id: String = row.try_get(0).map_err(db)?;
            let signature: String = row.try_get(5).map_err(db)?;
            let manifest: String = row.try_get(6).map_err(db)?;
            let provenance: String = row.try_get(10).map_err(db)?;
            out.push(StoredVersion {
                tool_id: Uuid::parse_str(&tool_id).map_err(|e| decode_error(&what, e))?,
                tenant,
                name,
                version: u32::try_from(version).map_err(|e| decode_error(&what, e))?,
                sha256: row.try_get(4).map_err(db)?,
                signature: serde_json::from_str(&signature).map_err(|e| StoreError::Decode(what.clone(), e))?,
                manifest: serde_json::from_str(&manifest).map_err(|e| StoreError::Decode(what.clone(), e))?,
                provenance: serde_json::from_str(&provenance).map_err(|e| StoreError::Decode(what.clone(), e))?,
                created_at: row.try_get(7).map_err(db)?,
                signature_sha256: row.try_get(8).map_err(db)?,
                retired_at: row.try_get(9).map_err(db)?,
            });
        }
        Ok(out)
    }

    fn insert_version(&self, v: &StoredVersion, bytes: &[u8], audit: &AuditEntry) -> Result<(), StoreError> {
        if sha256_hex(bytes) != v.sha256 {
            return Err(StoreError::Inconsistent(format!("the bytes of {} are not its sha256", v.name)));
        }
        // Serializing plain data cannot fail.
        let signature = serde_json::to_string(&v.signature).unwrap_or_default();
        let manifest = serde_json::to_string(&v.manifest).unwrap_or_default();
        let provenance = serde_json::to_string(&v.provenance).unwrap_or_default();
        let (pool, v, bytes, audit) = (self.pool.clone(), v.clone(), bytes.to_vec(), audit.clone());
        let number = i32::try_from(v.version).map_err(|e| decode_error(&v.name, e))?;
        self.run(async move {
            let mut tx = pool.begin().await.map_err(db)?;
            // Deploys of one tool, from any replica, one at a time.
            sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
                .bind(format!("{}/{}", v.tenant, v.name))
                .execute(&mut *tx)
                .await
                .map_err(db)?;
            let newest = sqlx::query(
                "SELECT t.tool_id, COALESCE(MAX(v.version), 0) FROM tools t LEFT JOIN versions v USING (tool_id)
                 WHERE t.tenant = $1 AND t.name = $2 GROUP BY t.tool_id",
            )
            .bind(&v.tenant)
            .bind(&v.name)
            .fetch_optional(&mut *tx)
            .await
            .map_err(db)?;
            let next = match newest {
                None => number == 1,
                Some(row) => {
                    let (id, newest): (String, i32) = (row.try_get(0).map_err(db)?, row.try_get(1).map_err(db)?);
                    id == v.tool_id.to_string() && number == newest + 1
                }
            };
            if !next {
                return Err(StoreError::Conflict(format!("{} version {} is not the next version", v.name, v.version)));
            }
            sqlx::query("INSERT INTO blobs (sha256, bytes) VALUES ($1, $2) ON CONFLICT (sha256) DO NOTHING")
                .bind(&v.sha256)
                .bind(bytes)
                .execute(&mut *tx)
                .await
                .map_err(db)?;
            sqlx::query(
                "INSERT INTO tools (tool_id, tenant, name, created_at) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (tool_id) DO NOTHING",
            )
            .bind(v.tool_id.to_string())
            .bind(&v.tenant)
            .bind(&v.name)
            .bind(v.created_at)
            .execute(&mut *tx)
            .await
            .map_err(db)?;
            sqlx::query(
                "INSERT INTO versions (tool_id, version, sha256, signature, manifest, created_at, signature_sha256, retired_at, provenance)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            )
            .bind(v.tool_id.to_string())
            .bind(number)
            .bind(&v.sha256)
            .bind(signature)
            .bind(manifest)
            .bind(v.created_at)
            .bind(&v.signature_sha256)
            .bind(v.retired_at)
            .bind(provenance)
            .execute(&mut *tx)
            .await
            .map_err(db)?;
            insert_audit(&mut tx, &audit).await.map_err(db)?;
            record(&mut tx, Topic::Versions).await.map_err(db)?;
            tx.commit().await.map_err(db)?;
            Ok(())
        })
    }

    fn blob(&self, sha256: &str) -> Result<Vec<u8>, StoreError> {
        let (pool, sha) = (self.pool.clone(), sha256.to_string());
        let bytes: Option<Vec<u8>> = self.run(async move {
            let row = sqlx::query("SELECT bytes FROM blobs WHERE sha256 = $1")
                .bind(sha)
                .fetch_optional(&pool)
                .await
                .map_err(db)?;
            row.map(|r| r.try_get(0)).transpose().map_err(db)
        })?;
        let bytes = bytes.ok_or_else(|| StoreError::Inconsistent(format!("no bytes are stored for {sha256}")))?;
        if sha256_hex(&bytes) != sha256 {
            return Err(StoreError::Corrupt(sha256.to_string()));
        }
        Ok(bytes)
    }

    fn retire_version(&self, tool_id: Uuid, version: u32, at: i64, audit: &AuditEntry) -> Result<bool, StoreError> {
        let (tool_id, version) = (tool_id.to_string(), i32::try_from(version).unwrap_or(i32::MAX));
        let changed = audited!(
            self,
            audit,
            Some(Topic::Versions),
            "UPDATE versions SET retired_at = $3 WHERE tool_id = $1 AND version = $2 AND retired_at IS NULL",
            tool_id,
            version,
            at
        )?;
        Ok(changed == 1)
    }

    fn secrets(&self) -> Result<Vec<StoredSecret>, StoreError> {
        let pool = self.pool.clone();
        let rows = self.run(async move {
            sqlx::query("SELECT tenant, id, value FROM secrets ORDER BY tenant, id").fetch_all(&pool).await.map_err(db)
        })?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let (tenant, id, sealed): (String, String, String) =
                (row.try_get(0).map_err(db)?, row.try_get(1).map_err(db)?, row.try_get(2).map_err(db)?);
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
        let (tenant, id, at) = (tenant.to_string(), id.to_string(), audit.at);
        let max = i64::try_from(max).unwrap_or(i64::MAX);
        audited_within_bound!(
            self,
            audit,
            Some(Topic::Secrets),
            format!("secrets:{tenant}"),
            "SELECT EXISTS (SELECT 1 FROM secrets WHERE tenant = $1 AND id = $2)
                 OR (SELECT count(*) FROM secrets WHERE tenant = $1) < $3",
            [&tenant, &id, max],
            "INSERT INTO secrets (tenant, id, value, updated_at) VALUES ($1, $2, $3, $4)
             ON CONFLICT (tenant, id) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
            [tenant, id, sealed, at],
        )
    }

    fn delete_secret(&self, tenant: &str, id: &str, audit: &AuditEntry) -> Result<bool, StoreError> {
        let (tenant, id) = (tenant.to_string(), id.to_string());
        let deleted = audited!(
            self,
            audit,
            Some(Topic::Secrets),
            "DELETE FROM secrets WHERE tenant = $1 AND id = $2",
            tenant,
            id
        )?;
        Ok(deleted == 1)
    }

    fn config(&self) -> Result<Vec<StoredConfig>, StoreError> {
        let pool = self.pool.clone();
        let rows = self.run(async move {
            sqlx::query("SELECT tenant, tool, key, value FROM tool_config ORDER BY tenant, tool, key")
                .fetch_all(&pool)
                .await
                .map_err(db)
        })?;
        rows.iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?)))
            .collect::<Result<_, sqlx::Error>>()
            .map_err(db)
    }

    fn put_config(
        &self,
        (tenant, tool, key, value): &StoredConfig,
        audit: &AuditEntry,
        max: u64,
    ) -> Result<bool, StoreError> {
        let (tenant, tool, key, value, at) = (tenant.clone(), tool.clone(), key.clone(), value.clone(), audit.at);
        let max = i64::try_from(max).unwrap_or(i64::MAX);
        audited_within_bound!(
            self,
            audit,
            Some(Topic::Config),
            format!("config:{tenant}"),
            "SELECT EXISTS (SELECT 1 FROM tool_config WHERE tenant = $1 AND tool = $2 AND key = $3)
                 OR (SELECT count(*) FROM tool_config WHERE tenant = $1) < $4",
            [&tenant, &tool, &key, max],
            "INSERT INTO tool_config (tenant, tool, key, value, updated_at) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (tenant, tool, key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
            [tenant, tool, key, value, at],
        )
    }

    fn delete_config(&self, tenant: &str, tool: &str, key: &str, audit: &AuditEntry) -> Result<bool, StoreError> {
        let (tenant, tool, key) = (tenant.to_string(), tool.to_string(), key.to_string());
        let deleted = audited!(
            self,
            audit,
            Some(Topic::Config),
            "DELETE FROM tool_config WHERE tenant = $1 AND tool = $2 AND key = $3",
            tenant,
            tool,
            key
        )?;
        Ok(deleted == 1)
    }

    fn tenants(&self) -> Result<Vec<TenantRecord>, StoreError> {
        let pool = self.pool.clone();
        let rows = self.run(async move {
            sqlx::query("SELECT name, public_enumeration, quotas, created_at FROM tenants ORDER BY name")
                .fetch_all(&pool)
                .await
                .map_err(db)
        })?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let name: String = row.try_get(0).map_err(db)?;
            let quotas: String = row.try_get(2).map_err(db)?;
            let quotas = serde_json::from_str(&quotas).map_err(|e| StoreError::Decode(format!("tenant {name}"), e))?;
            out.push(TenantRecord {
                name,
                public_enumeration: row.try_get(1).map_err(db)?,
                quotas,
                created_at: row.try_get(3).map_err(db)?,
            });
        }
        Ok(out)
    }

    fn put_tenant(&self, t: &TenantRecord, audit: &AuditEntry) -> Result<(), StoreError> {
        let quotas = serde_json::to_string(&t.quotas).unwrap_or_default();
        let (name, public, created_at) = (t.name.clone(), t.public_enumeration, t.created_at);
        audited!(
            self,
            audit,
            Some(Topic::Tenants),
            "INSERT INTO tenants (name, public_enumeration, quotas, created_at) VALUES ($1, $2, $3, $4)
             ON CONFLICT (name) DO UPDATE SET public_enumeration = excluded.public_enumeration, quotas = excluded.quotas",
            name,
            public,
            quotas,
            created_at
        )?;
        Ok(())
    }

    fn keys(&self) -> Result<Vec<KeyRecord>, StoreError> {
        let pool = self.pool.clone();
        let rows = self.run(async move {
            sqlx::query(
                "SELECT id, tenant, role, key_sha256, label, created_at, revoked_at, toolset FROM api_keys
                 ORDER BY created_at, id",
            )
            .fetch_all(&pool)
            .await
            .map_err(db)
        })?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let id: String = row.try_get(0).map_err(db)?;
            let role: String = row.try_get(2).map_err(db)?;
            let role = Role::parse(&role).ok_or_else(|| decode_error(&format!("key {id}"), "unknown role"))?;
            out.push(KeyRecord {
                id,
                tenant: row.try_get(1).map_err(db)?,
                role,
                key_sha256: row.try_get(3).map_err(db)?,
                label: row.try_get(4).map_err(db)?,
                created_at: row.try_get(5).map_err(db)?,
                revoked_at: row.try_get(6).map_err(db)?,
                toolset: row.try_get(7).map_err(db)?,
            });
        }
        Ok(out)
    }

    fn insert_key(&self, k: &KeyRecord, audit: &AuditEntry) -> Result<(), StoreError> {
        let (pool, k, audit) = (self.pool.clone(), k.clone(), audit.clone());
        self.run(async move {
            let mut tx = pool.begin().await.map_err(db)?;
            // A key scoped to a toolset only while it is live: under the
            // lock `delete_toolset` takes, so a delete on another replica
            // is wholly before (refused here) or after (revokes the key).
            if let Some(toolset) = &k.toolset {
                sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
                    .bind(format!("toolset:{}/{toolset}", k.tenant.as_deref().unwrap_or_default()))
                    .execute(&mut *tx)
                    .await
                    .map_err(db)?;
                let live: Option<i32> = sqlx::query_scalar(
                    "SELECT 1 FROM toolsets WHERE tenant = $1 AND name = $2 AND deleted_at IS NULL LIMIT 1",
                )
                .bind(&k.tenant)
                .bind(toolset)
                .fetch_optional(&mut *tx)
                .await
                .map_err(db)?;
                if live.is_none() {
                    return Err(StoreError::Conflict(format!("toolset {toolset} is not live")));
                }
            }
            sqlx::query(
                "INSERT INTO api_keys (id, tenant, role, key_sha256, label, created_at, revoked_at, toolset)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            )
            .bind(&k.id)
            .bind(&k.tenant)
            .bind(k.role.as_str())
            .bind(&k.key_sha256)
            .bind(&k.label)
            .bind(k.created_at)
            .bind(k.revoked_at)
            .bind(&k.toolset)
            .execute(&mut *tx)
            .await
            .map_err(db)?;
            insert_audit(&mut tx, &audit).await.map_err(db)?;
            record(&mut tx, Topic::Keys).await.map_err(db)?;
            tx.commit().await.map_err(db)?;
            Ok(())
        })
    }

    fn revoke_key(&self, id: &str, at: i64, audit: &AuditEntry) -> Result<bool, StoreError> {
        let id = id.to_string();
        let changed = audited!(
            self,
            audit,
            Some(Topic::Keys),
            "UPDATE api_keys SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL",
            id,
            at
        )?;
        Ok(changed == 1)
    }

    fn toolsets(&self) -> Result<Vec<StoredToolset>, StoreError> {
        let pool = self.pool.clone();
        let rows = self.run(async move {
            sqlx::query(
                "SELECT tenant, name, version, description, tools, created_at, deleted_at FROM toolsets
                 ORDER BY tenant, name, version",
            )
            .fetch_all(&pool)
            .await
            .map_err(db)
        })?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let tenant: String = row.try_get(0).map_err(db)?;
            let name: String = row.try_get(1).map_err(db)?;
            let version: i32 = row.try_get(2).map_err(db)?;
            let version = u32::try_from(version).map_err(|e| decode_error(&name, e))?;
            let tools: String = row.try_get(4).map_err(db)?;
            let tools = serde_json::from_str(&tools)
                .map_err(|e| StoreError::Decode(format!("toolset {tenant}/{name} version {version}"), e))?;
            out.push(StoredToolset {
                description: row.try_get(3).map_err(db)?,
                created_at: row.try_get(5).map_err(db)?,
                deleted_at: row.try_get(6).map_err(db)?,
                tenant,
                name,
                version,
                tools,
            });
        }
        Ok(out)
    }

    fn insert_toolset(&self, t: &StoredToolset, audit: &AuditEntry) -> Result<(), StoreError> {
        // Serializing plain data cannot fail.
        let tools = serde_json::to_string(&t.tools).unwrap_or_default();
        let number = i32::try_from(t.version).map_err(|e| decode_error(&t.name, e))?;
        let (pool, t, audit) = (self.pool.clone(), t.clone(), audit.clone());
        self.run(async move {
            let mut tx = pool.begin().await.map_err(db)?;
            // Changes of one toolset, from any replica, one at a time.
            sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
                .bind(format!("toolset:{}/{}", t.tenant, t.name))
                .execute(&mut *tx)
                .await
                .map_err(db)?;
            let newest: i32 =
                sqlx::query_scalar("SELECT COALESCE(MAX(version), 0) FROM toolsets WHERE tenant = $1 AND name = $2")
                    .bind(&t.tenant)
                    .bind(&t.name)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(db)?;
            if number != newest + 1 {
                return Err(StoreError::Conflict(format!(
                    "toolset {} version {} is not the next version",
                    t.name, t.version
                )));
            }
            sqlx::query(
                "INSERT INTO toolsets (tenant, name, version, description, tools, created_at, deleted_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )
            .bind(&t.tenant)
            .bind(&t.name)
            .bind(number)
            .bind(&t.description)
            .bind(tools)
            .bind(t.created_at)
            .bind(t.deleted_at)
            .execute(&mut *tx)
            .await
            .map_err(db)?;
            insert_audit(&mut tx, &audit).await.map_err(db)?;
            record(&mut tx, Topic::Toolsets).await.map_err(db)?;
            tx.commit().await.map_err(db)?;
            Ok(())
        })
    }

    fn delete_toolset(&self, tenant: &str, name: &str, at: i64, audit: &AuditEntry) -> Result<bool, StoreError> {
        let (pool, tenant, name, audit) = (self.pool.clone(), tenant.to_string(), name.to_string(), audit.clone());
        self.run(async move {
            let mut tx = pool.begin().await.map_err(db)?;
            // The same lock as `insert_toolset`: a PUT on another replica
            // waits, then numbers after the delete (it cannot undo it).
            sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
                .bind(format!("toolset:{tenant}/{name}"))
                .execute(&mut *tx)
                .await
                .map_err(db)?;
            let deleted = sqlx::query(
                "UPDATE toolsets SET deleted_at = $3 WHERE tenant = $1 AND name = $2 AND deleted_at IS NULL",
            )
            .bind(&tenant)
            .bind(&name)
            .bind(at)
            .execute(&mut *tx)
            .await
            .map_err(db)?
            .rows_affected();
            sqlx::query(
                "UPDATE api_keys SET revoked_at = $3 WHERE tenant = $1 AND toolset = $2 AND revoked_at IS NULL",
            )
            .bind(&tenant)
            .bind(&name)
            .bind(at)
            .execute(&mut *tx)
            .await
            .map_err(db)?;
            // The OAuth grants issued for the toolset's MCP URL: a toolset
            // re-created under the same name is not opened by them.
            sqlx::query(
                "UPDATE oauth_grants SET revoked_at = $3
                 WHERE tenant = $1 AND revoked_at IS NULL AND right(resource, char_length($2)) = $2",
            )
            .bind(&tenant)
            .bind(super::toolset_resource_suffix(&tenant, &name))
            .bind(at)
            .execute(&mut *tx)
            .await
            .map_err(db)?;
            insert_audit(&mut tx, &audit).await.map_err(db)?;
            record(&mut tx, Topic::Keys).await.map_err(db)?;
            record(&mut tx, Topic::Toolsets).await.map_err(db)?;
            tx.commit().await.map_err(db)?;
            Ok(deleted > 0)
        })
    }

    fn claim_call(
        &self,
        key: &CallKey,
        request_sha256: &str,
        now: i64,
        expired_before: i64,
    ) -> Result<Claimed, StoreError> {
        let (pool, key, request, replica) =
            (self.pool.clone(), key.clone(), request_sha256.to_string(), self.replica.to_string());
        self.run(async move {
            let mut tx = pool.begin().await.map_err(db)?;
            // The claiming tenant's expired records only.
            lock_ledger_usage(&mut tx, &key.tenant).await?;
            sqlx::query("DELETE FROM idempotent_calls WHERE tenant = $1 AND created_at < $2")
                .bind(&key.tenant)
                .bind(expired_before)
                .execute(&mut *tx)
                .await
                .map_err(db)?;
            // Two replicas racing: the unique key makes the second wait for
            // the first's commit, then insert nothing.
            let inserted = sqlx::query(
                "INSERT INTO idempotent_calls (tenant, caller, call_id, request_sha256, created_at, runner)
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (tenant, caller, call_id) DO NOTHING",
            )
            .bind(&key.tenant)
            .bind(&key.caller)
            .bind(&key.call_id)
            .bind(&request)
            .bind(now)
            .bind(&replica)
            .execute(&mut *tx)
            .await
            .map_err(db)?
            .rows_affected();
            let claimed = if inserted == 1 {
                Claimed::Fresh
            } else {
                let row = sqlx::query(concat!(
                    "SELECT request_sha256, response,
                            response IS NULL AND runner IS NOT NULL AND runner <> $4 AND runner IN (
                                SELECT id FROM replicas WHERE heartbeat_ts > ",
                    live_since!(),
                    ")
                     FROM idempotent_calls WHERE tenant = $1 AND caller = $2 AND call_id = $3"
                ))
                .bind(&key.tenant)
                .bind(&key.caller)
                .bind(&key.call_id)
                .bind(&replica)
                .fetch_one(&mut *tx)
                .await
                .map_err(db)?;
                Claimed::Existing {
                    request_sha256: row.try_get(0).map_err(db)?,
                    response: row.try_get(1).map_err(db)?,
                    running_elsewhere: row.try_get(2).map_err(db)?,
                }
            };
            tx.commit().await.map_err(db)?;
            Ok(claimed)
        })
    }

    fn record_call(&self, key: &CallKey, response: &str, bound: LedgerBound) -> Result<(), StoreError> {
        let (pool, key, response) = (self.pool.clone(), key.clone(), response.to_string());
        self.run(async move {
            let mut tx = pool.begin().await.map_err(db)?;
            lock_ledger_usage(&mut tx, &key.tenant).await?;
            sqlx::query("UPDATE idempotent_calls SET response = $4 WHERE tenant = $1 AND caller = $2 AND call_id = $3")
                .bind(&key.tenant)
                .bind(&key.caller)
                .bind(&key.call_id)
                .bind(response)
                .execute(&mut *tx)
                .await
                .map_err(db)?;
            loop {
                // The usage row is locked: replicas recording for one
                // tenant trim one at a time.
                let (records, bytes): (i64, i64) =
                    sqlx::query_as("SELECT records, bytes FROM call_ledger_usage WHERE tenant = $1")
                        .bind(&key.tenant)
                        .fetch_one(&mut *tx)
                        .await
                        .map_err(db)?;
                let usage = |n: i64| u64::try_from(n).unwrap_or(0);
                let Some(batch) = bound.trim_batch(usage(records), usage(bytes)) else { break };
                // The oldest settled records go first; one still running
                // keeps its claim, and the one just recorded stays.
                let trimmed = sqlx::query(
                    "DELETE FROM idempotent_calls WHERE (tenant, caller, call_id) IN (
                         SELECT tenant, caller, call_id FROM idempotent_calls
                         WHERE tenant = $1 AND response IS NOT NULL AND NOT (caller = $2 AND call_id = $3)
                         ORDER BY created_at LIMIT $4)",
                )
                .bind(&key.tenant)
                .bind(&key.caller)
                .bind(&key.call_id)
                .bind(i64::try_from(batch).unwrap_or(i64::MAX))
                .execute(&mut *tx)
                .await
                .map_err(db)?
                .rows_affected();
                if trimmed == 0 {
                    break;
                }
            }
            tx.commit().await.map_err(db)?;
            Ok(())
        })
    }

    fn sweep_calls(&self, before: i64) -> Result<usize, StoreError> {
        let pool = self.pool.clone();
        self.run(async move {
            let tenants: Vec<String> =
                sqlx::query_scalar("SELECT DISTINCT tenant FROM idempotent_calls WHERE created_at < $1 LIMIT 1000")
                    .bind(before)
                    .fetch_all(&pool)
                    .await
                    .map_err(db)?;
            let mut deleted = 0;
            // One tenant per transaction.
            for tenant in tenants {
                let mut tx = pool.begin().await.map_err(db)?;
                lock_ledger_usage(&mut tx, &tenant).await?;
                let n = sqlx::query("DELETE FROM idempotent_calls WHERE tenant = $1 AND created_at < $2")
                    .bind(&tenant)
                    .bind(before)
                    .execute(&mut *tx)
                    .await
                    .map_err(db)?
                    .rows_affected();
                tx.commit().await.map_err(db)?;
                deleted += usize::try_from(n).unwrap_or(usize::MAX);
            }
            Ok(deleted)
        })
    }

    fn release_call(&self, key: &CallKey) -> Result<(), StoreError> {
        let (pool, key) = (self.pool.clone(), key.clone());
        self.run(async move {
            let mut tx = pool.begin().await.map_err(db)?;
            lock_ledger_usage(&mut tx, &key.tenant).await?;
            sqlx::query("DELETE FROM idempotent_calls WHERE tenant = $1 AND caller = $2 AND call_id = $3")
                .bind(&key.tenant)
                .bind(&key.caller)
                .bind(&key.call_id)
                .execute(&mut *tx)
                .await
                .map_err(db)?;
            tx.commit().await.map_err(db)?;
            Ok(())
        })
    }

    fn insert_confirmation(
        &self,
        c: &StoredConfirmation,
        bound: ConfirmationBound,
        now: i64,
    ) -> Result<Result<(), ConfirmationLimit>, StoreError> {
        let (pool, c) = (self.pool.clone(), c.clone());
        let version = i32::try_from(c.version).map_err(|e| decode_error(&c.id, e))?;
        self.run(async move {
            let mut tx = pool.begin().await.map_err(db)?;
            let usage = lock_confirmation_usage(&mut tx, &c.tenant).await?;
            let admitted = admit_confirmation(&mut tx, &c, bound, now, usage).await?;
            if admitted.is_ok() {
                sqlx::query(
                    "INSERT INTO confirmations (id, tenant, tool_id, version, end_user, front_door, call_id, inputs,
                         cheq, state, created_at, expires_at)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
                )
                .bind(&c.id)
                .bind(&c.tenant)
                .bind(c.tool_id.to_string())
                .bind(version)
                .bind(&c.end_user)
                .bind(&c.front_door)
                .bind(&c.call_id)
                .bind(&c.inputs)
                .bind(&c.cheq)
                .bind(&c.state)
                .bind(c.created_at)
                .bind(c.expires_at)
                .execute(&mut *tx)
                .await
                .map_err(db)?;
            }
            // Refused, what expired or was forgotten to make room stays so.
            tx.commit().await.map_err(db)?;
            Ok(admitted)
        })
    }

    fn pending_refusal(
        &self,
        tenant: &str,
        end_user: &str,
        bytes: u64,
        bound: ConfirmationBound,
        now: i64,
    ) -> Result<Option<ConfirmationLimit>, StoreError> {
        let (pool, tenant, end_user) = (self.pool.clone(), tenant.to_string(), end_user.to_string());
        self.run(async move {
            let mut conn = pool.acquire().await.map_err(db)?;
            if let Some(limit) = bound.pending_refusal(&confirmation_usage(&mut conn, &tenant, false).await?, bytes) {
                // The count is exact while none of the waiting ones expired.
                let earliest: Option<i64> = sqlx::query_scalar(
                    "SELECT min(expires_at) FROM confirmations WHERE tenant = $1 AND state = 'pending'",
                )
                .bind(&tenant)
                .fetch_one(&mut *conn)
                .await
                .map_err(db)?;
                if earliest.is_some_and(|earliest| earliest > now) {
                    return Ok(Some(limit));
                }
            }
            let (waiting, waiting_bytes) = waiting_for(&mut conn, &tenant, &end_user, now).await?;
            Ok(bound.end_user_refusal(waiting, waiting_bytes, bytes))
        })
    }

    fn confirmation(&self, id: &str) -> Result<Option<StoredConfirmation>, StoreError> {
        let (pool, key) = (self.pool.clone(), id.to_string());
        let row = self.run(async move {
            sqlx::query(
                "SELECT id, tenant, tool_id, version, end_user, front_door, call_id, inputs, cheq, state, created_at,
                     expires_at, decided_at, decision, result_status, result_body
                 FROM confirmations WHERE id = $1",
            )
            .bind(key)
            .fetch_optional(&pool)
            .await
            .map_err(db)
        })?;
        let Some(row) = row else { return Ok(None) };
        let what = format!("confirmation {id}");
        let tool_id: String = row.try_get(2).map_err(db)?;
        let version: i32 = row.try_get(3).map_err(db)?;
        let status: Option<i32> = row.try_get(14).map_err(db)?;
        Ok(Some(StoredConfirmation {
            id: row.try_get(0).map_err(db)?,
            tenant: row.try_get(1).map_err(db)?,
            tool_id: Uuid::parse_str(&tool_id).map_err(|e| decode_error(&what, e))?,
            version: u32::try_from(version).map_err(|e| decode_error(&what, e))?,
            end_user: row.try_get(4).map_err(db)?,
            front_door: row.try_get(5).map_err(db)?,
            call_id: row.try_get(6).map_err(db)?,
            inputs: row.try_get(7).map_err(db)?,
            cheq: row.try_get(8).map_err(db)?,
            state: row.try_get(9).map_err(db)?,
            created_at: row.try_get(10).map_err(db)?,
            expires_at: row.try_get(11).map_err(db)?,
            decided_at: row.try_get(12).map_err(db)?,
            decision: row.try_get(13).map_err(db)?,
            result_status: status.map(|s| u16::try_from(s).map_err(|e| decode_error(&what, e))).transpose()?,
            result_body: row.try_get(15).map_err(db)?,
        }))
    }

    fn decide_confirmation(
        &self,
        id: &str,
        state: &str,
        decision: Option<&str>,
        audit: &AuditEntry,
    ) -> Result<bool, StoreError> {
        let (pool, id, state, decision, audit, replica) = (
            self.pool.clone(),
            id.to_string(),
            state.to_string(),
            decision.map(str::to_string),
            audit.clone(),
            self.replica.to_string(),
        );
        self.run(async move {
            let mut tx = pool.begin().await.map_err(db)?;
            lock_confirmation_usage_of(&mut tx, &id).await?;
            // Decided once, fleet-wide: the row's lock makes a second
            // decision wait, then find it no longer pending. The replica
            // that accepts runs the call, and is named as its runner.
            let changed = sqlx::query(
                "UPDATE confirmations SET state = $2, decision = $3, decided_at = $4,
                     runner = CASE WHEN $2 = 'accepted' THEN $5 ELSE runner END
                 WHERE id = $1 AND state = 'pending' AND expires_at > $4",
            )
            .bind(&id)
            .bind(&state)
            .bind(&decision)
            .bind(audit.at)
            .bind(&replica)
            .execute(&mut *tx)
            .await
            .map_err(db)?
            .rows_affected();
            if changed == 1 {
                insert_audit(&mut tx, &audit).await.map_err(db)?;
            }
            tx.commit().await.map_err(db)?;
            Ok(changed == 1)
        })
    }

    fn finish_confirmation(&self, id: &str, status: u16, body: &str) -> Result<(), StoreError> {
        let (pool, id, body) = (self.pool.clone(), id.to_string(), body.to_string());
        self.run(async move {
            let mut tx = pool.begin().await.map_err(db)?;
            // The answer's bytes count.
            lock_confirmation_usage_of(&mut tx, &id).await?;
            sqlx::query(
                "UPDATE confirmations SET state = 'done', result_status = $2, result_body = $3
                 WHERE id = $1 AND state = 'accepted'",
            )
            .bind(id)
            .bind(i32::from(status))
            .bind(body)
            .execute(&mut *tx)
            .await
            .map_err(db)?;
            tx.commit().await.map_err(db)?;
            Ok(())
        })
    }

    fn retire_confirmation(&self, id: &str, audit: &AuditEntry) -> Result<bool, StoreError> {
        let (pool, id, audit) = (self.pool.clone(), id.to_string(), audit.clone());
        self.run(async move {
            let mut tx = pool.begin().await.map_err(db)?;
            let changed =
                sqlx::query("UPDATE confirmations SET state = 'retired' WHERE id = $1 AND state = 'accepted'")
                    .bind(id)
                    .execute(&mut *tx)
                    .await
                    .map_err(db)?
                    .rows_affected();
            if changed == 1 {
                insert_audit(&mut tx, &audit).await.map_err(db)?;
            }
            tx.commit().await.map_err(db)?;
            Ok(changed == 1)
        })
    }

    fn interrupt_confirmations(&self) -> Result<usize, StoreError> {
        let pool = self.pool.clone();
        self.run(async move { interrupt_orphans(&pool).await })
    }

    fn sweep_confirmations(&self, before: i64) -> Result<usize, StoreError> {
        let pool = self.pool.clone();
        self.run(async move {
            let mut deleted = 0usize;
            // One tenant per transaction, its usage row locked first (see
            // `lock_confirmation_usage`); in batches, so that no statement
            // holds many rows' locks long.
            loop {
                let tenants: Vec<String> = sqlx::query_scalar(
                    "SELECT DISTINCT tenant FROM confirmations
                     WHERE state <> 'accepted' AND COALESCE(decided_at, expires_at) < $1
                       AND (state <> 'pending' OR expires_at < $1)
                     LIMIT 100",
                )
                .bind(before)
                .fetch_all(&pool)
                .await
                .map_err(db)?;
                let before_pass = deleted;
                for tenant in &tenants {
                    let mut tx = pool.begin().await.map_err(db)?;
                    lock_confirmation_usage(&mut tx, tenant).await?;
                    let batch = sqlx::query(
                        "DELETE FROM confirmations WHERE id IN (
                             SELECT id FROM confirmations
                             WHERE tenant = $2 AND state <> 'accepted' AND COALESCE(decided_at, expires_at) < $1
                               AND (state <> 'pending' OR expires_at < $1)
                             LIMIT 500)",
                    )
                    .bind(before)
                    .bind(tenant)
                    .execute(&mut *tx)
                    .await
                    .map_err(db)?
                    .rows_affected();
                    tx.commit().await.map_err(db)?;
                    deleted += usize::try_from(batch).unwrap_or(usize::MAX);
                }
                if deleted == before_pass {
                    return Ok(deleted);
                }
            }
        })
    }

    fn claim_expired_confirmations(&self, until: i64) -> Result<Vec<ExpiredConfirmations>, StoreError> {
        let pool = self.pool.clone();
        self.run(async move {
            let mut tx = pool.begin().await.map_err(db)?;
            // The mark's row lock makes replicas take turns: the next one
            // waits, then reads the mark this one moved.
            let mark: Option<String> = sqlx::query_scalar("SELECT value FROM store_meta WHERE key = $1 FOR UPDATE")
                .bind(EXPIRIES_CLAIMED_UNTIL)
                .fetch_optional(&mut *tx)
                .await
                .map_err(db)?;
            let mark = super::claimed_until(mark)?;
            let claimed = match mark {
                Some(mark) if mark >= until => return Ok(Vec::new()),
                None => Vec::new(),
                // A pending transaction settles when it expires: the indexed
                // `COALESCE(decided_at, expires_at)` is its expiry.
                Some(mark) => sqlx::query(
                    "SELECT c.tenant, COALESCE(t.name, c.tool_id), COUNT(*)
                     FROM confirmations c LEFT JOIN tools t ON t.tool_id = c.tool_id
                     WHERE c.state IN ('pending', 'expired')
                       AND COALESCE(c.decided_at, c.expires_at) > $1 AND COALESCE(c.decided_at, c.expires_at) <= $2
                     GROUP BY c.tenant, COALESCE(t.name, c.tool_id)",
                )
                .bind(mark)
                .bind(until)
                .fetch_all(&mut *tx)
                .await
                .map_err(db)?
                .iter()
                .map(|r| {
                    Ok(ExpiredConfirmations {
                        tenant: r.try_get(0)?,
                        tool: r.try_get(1)?,
                        count: r.try_get::<i64, _>(2)?.unsigned_abs(),
                    })
                })
                .collect::<Result<_, sqlx::Error>>()
                .map_err(db)?,
            };
            // Two first claims may race: the one that inserts second
            // leaves the mark as it is.
            sqlx::query(
                "INSERT INTO store_meta (key, value) VALUES ($1, $2)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value WHERE $3",
            )
            .bind(EXPIRIES_CLAIMED_UNTIL)
            .bind(until.to_string())
            .bind(mark.is_some())
            .execute(&mut *tx)
            .await
            .map_err(db)?;
            tx.commit().await.map_err(db)?;
            Ok(claimed)
        })
    }

    fn settings(&self) -> Result<Vec<StoredSetting>, StoreError> {
        let pool = self.pool.clone();
        let rows = self.run(async move {
            sqlx::query("SELECT tenant, key, value FROM tenant_settings ORDER BY tenant, key")
                .fetch_all(&pool)
                .await
                .map_err(db)
        })?;
        rows.iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
            .collect::<Result<_, sqlx::Error>>()
            .map_err(db)
    }

    fn put_setting(&self, (tenant, key, value): &StoredSetting, audit: &AuditEntry) -> Result<(), StoreError> {
        let (tenant, key, value, at) = (tenant.clone(), key.clone(), value.clone(), audit.at);
        audited!(
            self,
            audit,
            Some(Topic::Settings),
            "INSERT INTO tenant_settings (tenant, key, value, updated_at) VALUES ($1, $2, $3, $4)
             ON CONFLICT (tenant, key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
            tenant,
            key,
            value,
            at
        )?;
        Ok(())
    }

    fn replace_setting(
        &self,
        (tenant, key, value): &StoredSetting,
        expected: Option<&str>,
        audit: &AuditEntry,
    ) -> Result<bool, StoreError> {
        let (pool, audit) = (self.pool.clone(), audit.clone());
        let (tenant, key, value, expected) = (tenant.clone(), key.clone(), value.clone(), expected.map(str::to_string));
        self.run(async move {
            let mut tx = pool.begin().await.map_err(db)?;
            // One statement each: under READ COMMITTED the update waits for
            // a concurrent writer's row lock and then re-checks the value.
            let query = match &expected {
                None => sqlx::query(
                    "INSERT INTO tenant_settings (tenant, key, value, updated_at) VALUES ($1, $2, $3, $4)
                     ON CONFLICT (tenant, key) DO NOTHING",
                ),
                Some(_) => sqlx::query(
                    "UPDATE tenant_settings SET value = $3, updated_at = $4 WHERE tenant = $1 AND key = $2 AND value = $5",
                ),
            };
            let query = query.bind(&tenant).bind(&key).bind(&value).bind(audit.at);
            let query = match &expected {
                None => query,
                Some(old) => query.bind(old),
            };
            let changed = query
                .execute(&mut *tx)
                .await
                .map_err(db)?
                .rows_affected();
            if changed != 1 {
                return Ok(false); // dropping the transaction rolls it back
            }
            insert_audit(&mut tx, &audit).await.map_err(db)?;
            record(&mut tx, Topic::Settings).await.map_err(db)?;
            tx.commit().await.map_err(db)?;
            Ok(true)
        })
    }

    fn delete_setting(&self, tenant: &str, key: &str, audit: &AuditEntry) -> Result<bool, StoreError> {
        let (tenant, key) = (tenant.to_string(), key.to_string());
        let deleted = audited!(
            self,
            audit,
            Some(Topic::Settings),
            "DELETE FROM tenant_settings WHERE tenant = $1 AND key = $2",
            tenant,
            key
        )?;
        Ok(deleted == 1)
    }

    fn put_usage(&self, rows: &[UsageRow]) -> Result<(), StoreError> {
        // The vendor's buckets, or a toolset's (its name and version last).
        const VENDOR: &str = "INSERT INTO usage_buckets (tenant, tool_id, tool, version, door, outcome, granularity, bucket, replica, calls, total_ms, histogram, outbound, refused)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
             ON CONFLICT (tenant, granularity, bucket, tool_id, version, door, outcome, replica)
             DO UPDATE SET calls = excluded.calls, total_ms = excluded.total_ms, histogram = excluded.histogram,
                 outbound = excluded.outbound, refused = excluded.refused";
        const TOOLSET: &str = "INSERT INTO toolset_usage_buckets (tenant, tool_id, tool, version, door, outcome, granularity, bucket, replica, calls, total_ms, histogram, outbound, refused, toolset, toolset_version)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
             ON CONFLICT (tenant, toolset, granularity, bucket, toolset_version, tool_id, version, door, outcome, replica)
             DO UPDATE SET calls = excluded.calls, total_ms = excluded.total_ms, histogram = excluded.histogram,
                 outbound = excluded.outbound, refused = excluded.refused";
        let (pool, rows) = (self.pool.clone(), rows.to_vec());
        self.run(async move {
            let mut tx = pool.begin().await.map_err(db)?;
            for r in rows {
                let query = sqlx::query(if r.toolset.is_some() { TOOLSET } else { VENDOR })
                    .bind(&r.tenant)
                    .bind(&r.tool_id)
                    .bind(&r.tool)
                    .bind(i64::from(r.version))
                    .bind(&r.door)
                    .bind(&r.outcome)
                    .bind(&r.granularity)
                    .bind(r.bucket)
                    .bind(&r.replica)
                    .bind(i64::try_from(r.calls).unwrap_or(i64::MAX))
                    .bind(r.total_ms)
                    .bind(serde_json::to_string(&r.histogram).unwrap_or_default())
                    .bind(serde_json::to_string(&r.outbound).unwrap_or_default())
                    .bind(serde_json::to_string(&r.refused).unwrap_or_default());
                let query = match &r.toolset {
                    Some((toolset, version)) => query.bind(toolset).bind(i64::from(*version)),
                    None => query,
                };
                query.execute(&mut *tx).await.map_err(db)?;
            }
            tx.commit().await.map_err(db)?;
            Ok(())
        })
    }

    fn toolset_usage(
        &self,
        tenant: &str,
        toolset: &str,
        granularity: &str,
        since: i64,
    ) -> Result<Vec<UsageRow>, StoreError> {
        let (pool, tenant, toolset, granularity) =
            (self.pool.clone(), tenant.to_string(), toolset.to_string(), granularity.to_string());
        let rows = self.run(async move {
            sqlx::query(
                "SELECT tenant, tool_id, tool, version, door, outcome, granularity, bucket, replica, calls, total_ms, histogram,
                        outbound, refused, toolset, toolset_version
                 FROM toolset_usage_buckets WHERE tenant = $1 AND toolset = $2 AND granularity = $3 AND bucket >= $4
                 ORDER BY bucket",
            )
            .bind(tenant)
            .bind(toolset)
            .bind(granularity)
            .bind(since)
            .fetch_all(&pool)
            .await
            .map_err(db)
        })?;
        rows.iter()
            .map(|r| {
                let mut row = usage_row(r)?;
                row.toolset = Some((r.try_get(14)?, u32::try_from(r.try_get::<i64, _>(15)?).unwrap_or(0)));
                Ok(row)
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(db)
    }

    fn usage(&self, tenant: &str, granularity: &str, since: i64) -> Result<Vec<UsageRow>, StoreError> {
        let (pool, tenant, granularity) = (self.pool.clone(), tenant.to_string(), granularity.to_string());
        let rows = self.run(async move {
            sqlx::query(
                "SELECT tenant, tool_id, tool, version, door, outcome, granularity, bucket, replica, calls, total_ms, histogram,
                        outbound, refused
                 FROM usage_buckets WHERE tenant = $1 AND granularity = $2 AND bucket >= $3 ORDER BY bucket",
            )
            .bind(tenant)
            .bind(granularity)
            .bind(since)
            .fetch_all(&pool)
            .await
            .map_err(db)
        })?;
        rows.iter().map(usage_row).collect::<Result<_, sqlx::Error>>().map_err(db)
    }

    fn sweep_usage(&self, granularity: &str, before: i64) -> Result<u64, StoreError> {
        let (pool, granularity) = (self.pool.clone(), granularity.to_string());
        self.run(async move {
            let mut deleted = 0;
            for statement in [
                "DELETE FROM usage_buckets WHERE granularity = $1 AND bucket < $2",
                "DELETE FROM toolset_usage_buckets WHERE granularity = $1 AND bucket < $2",
            ] {
                let done = sqlx::query(statement).bind(&granularity).bind(before).execute(&pool).await.map_err(db)?;
                deleted += done.rows_affected();
            }
            Ok(deleted)
        })
    }

    fn has_end_users(&self, tenant: &str) -> Result<bool, StoreError> {
        let (pool, tenant) = (self.pool.clone(), tenant.to_string());
        self.run(async move {
            let row = sqlx::query("SELECT 1 FROM end_users WHERE tenant = $1 LIMIT 1")
                .bind(tenant)
                .fetch_optional(&pool)
                .await
                .map_err(db)?;
            Ok(row.is_some())
        })
    }

    fn insert_oauth_grants(&self, grants: &[OAuthGrant]) -> Result<(), StoreError> {
        let (pool, grants) = (self.pool.clone(), grants.to_vec());
        self.run(async move {
            let mut tx = pool.begin().await.map_err(db)?;
            for g in grants {
                sqlx::query(
                    "INSERT INTO oauth_grants (token_sha256, kind, tenant, client_id, end_user, scope, resource,
                         family, detail, expires_at, used_at, revoked_at)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
                )
                .bind(g.token_sha256)
                .bind(g.kind)
                .bind(g.tenant)
                .bind(g.client_id)
                .bind(g.end_user)
                .bind(g.scope)
                .bind(g.resource)
                .bind(g.family)
                .bind(g.detail)
                .bind(g.expires_at)
                .bind(g.used_at)
                .bind(g.revoked_at)
                .execute(&mut *tx)
                .await
                .map_err(db)?;
            }
            tx.commit().await.map_err(db)?;
            Ok(())
        })
    }

    fn oauth_grant(&self, token_sha256: &str) -> Result<Option<OAuthGrant>, StoreError> {
        let (pool, sha) = (self.pool.clone(), token_sha256.to_string());
        self.run(async move {
            let row = sqlx::query(oauth_grant_select!()).bind(sha).fetch_optional(&pool).await.map_err(db)?;
            row.map(|r| oauth_grant_row(&r)).transpose()
        })
    }

    fn use_oauth_grant(&self, token_sha256: &str, now: i64) -> Result<Option<OAuthGrant>, StoreError> {
        let (pool, sha) = (self.pool.clone(), token_sha256.to_string());
        self.run(async move {
            let mut tx = pool.begin().await.map_err(db)?;
            // The row lock makes two replicas exchanging one code take turns:
            // the second sees it used.
            let row = sqlx::query(concat!(oauth_grant_select!(), " FOR UPDATE"))
                .bind(&sha)
                .fetch_optional(&mut *tx)
                .await
                .map_err(db)?;
            let grant = row.map(|r| oauth_grant_row(&r)).transpose()?;
            if grant.as_ref().is_some_and(|g| g.used_at.is_none()) {
                sqlx::query("UPDATE oauth_grants SET used_at = $2 WHERE token_sha256 = $1")
                    .bind(&sha)
                    .bind(now)
                    .execute(&mut *tx)
                    .await
                    .map_err(db)?;
            }
            tx.commit().await.map_err(db)?;
            Ok(grant)
        })
    }

    fn revoke_oauth(&self, token_sha256: &str, family: Option<&str>, now: i64) -> Result<(), StoreError> {
        let (pool, sha, family) = (self.pool.clone(), token_sha256.to_string(), family.map(str::to_string));
        self.run(async move {
            let query = match family {
                Some(family) => {
                    sqlx::query("UPDATE oauth_grants SET revoked_at = $2 WHERE family = $1 AND revoked_at IS NULL")
                        .bind(family)
                }
                None => sqlx::query(
                    "UPDATE oauth_grants SET revoked_at = $2 WHERE token_sha256 = $1 AND revoked_at IS NULL",
                )
                .bind(sha),
            };
            query.bind(now).execute(&pool).await.map_err(db)?;
            Ok(())
        })
    }

    fn revoke_oauth_of(&self, tenant: &str, end_user: Option<&str>, now: i64) -> Result<(), StoreError> {
        let (pool, tenant, end_user) = (self.pool.clone(), tenant.to_string(), end_user.map(str::to_string));
        self.run(async move {
            sqlx::query(
                "UPDATE oauth_grants SET revoked_at = $3
                 WHERE tenant = $1 AND ($2::text IS NULL OR end_user = $2) AND revoked_at IS NULL",
            )
            .bind(tenant)
            .bind(end_user)
            .bind(now)
            .execute(&pool)
            .await
            .map_err(db)?;
            Ok(())
        })
    }

    fn sweep_oauth_clients(&self, unused_before: i64, idle_before: i64) -> Result<usize, StoreError> {
        let pool = self.pool.clone();
        self.run(async move {
            let deleted = sqlx::query(
                "DELETE FROM oauth_clients c WHERE
                     (CASE WHEN c.last_used_at IS NULL THEN c.created_at < $1 ELSE c.last_used_at < $2 END)
                     AND NOT EXISTS (SELECT 1 FROM oauth_grants g WHERE g.tenant = c.tenant AND g.client_id = c.client_id)",
            )
            .bind(unused_before)
            .bind(idle_before)
            .execute(&pool)
            .await
            .map_err(db)?
            .rows_affected();
            Ok(usize::try_from(deleted).unwrap_or(usize::MAX))
        })
    }

    fn touch_oauth_client(&self, tenant: &str, client_id: &str, now: i64) -> Result<(), StoreError> {
        let (pool, tenant, id) = (self.pool.clone(), tenant.to_string(), client_id.to_string());
        self.run(async move {
            sqlx::query("UPDATE oauth_clients SET last_used_at = $3 WHERE tenant = $1 AND client_id = $2")
                .bind(tenant)
                .bind(id)
                .bind(now)
                .execute(&pool)
                .await
                .map_err(db)?;
            Ok(())
        })
    }

    fn prune_oauth_family(&self, family: &str, keep: u32, spare: &[String]) -> Result<usize, StoreError> {
        let (pool, family, spare) = (self.pool.clone(), family.to_string(), spare.to_vec());
        self.run(async move {
            let deleted = sqlx::query(
                "DELETE FROM oauth_grants WHERE family = $1 AND kind IN ('access', 'refresh')
                 AND NOT (token_sha256 = ANY($3)) AND token_sha256 NOT IN (
                     SELECT token_sha256 FROM oauth_grants WHERE family = $1 AND kind = 'access'
                         ORDER BY expires_at DESC, token_sha256 LIMIT $2)
                 AND token_sha256 NOT IN (
                     SELECT token_sha256 FROM oauth_grants WHERE family = $1 AND kind = 'refresh'
                         ORDER BY expires_at DESC, token_sha256 LIMIT $2)",
            )
            .bind(family)
            .bind(i64::from(keep))
            .bind(spare)
            .execute(&pool)
            .await
            .map_err(db)?
            .rows_affected();
            Ok(usize::try_from(deleted).unwrap_or(usize::MAX))
        })
    }

    fn revoke_unused_refresh(&self, family: &str, now: i64) -> Result<(), StoreError> {
        let (pool, family) = (self.pool.clone(), family.to_string());
        self.run(async move {
            sqlx::query(
                "UPDATE oauth_grants SET revoked_at = $2
                 WHERE family = $1 AND kind = 'refresh' AND used_at IS NULL AND revoked_at IS NULL",
            )
            .bind(family)
            .bind(now)
            .execute(&pool)
            .await
            .map_err(db)?;
            Ok(())
        })
    }

    fn sweep_oauth_grants(&self, before: i64) -> Result<usize, StoreError> {
        let pool = self.pool.clone();
        self.run(async move {
            let deleted = sqlx::query("DELETE FROM oauth_grants WHERE expires_at < $1")
                .bind(before)
                .execute(&pool)
                .await
                .map_err(db)?
                .rows_affected();
            Ok(usize::try_from(deleted).unwrap_or(usize::MAX))
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
        let (pool, tenant, id, metadata) =
            (self.pool.clone(), tenant.to_string(), client_id.to_string(), metadata.to_string());
        self.run(async move {
            // Full: the oldest registration never used (holding no
            // credential) makes room; one in use never does.
            sqlx::query(
                "DELETE FROM oauth_clients WHERE (tenant, client_id) IN (
                     SELECT c.tenant, c.client_id FROM oauth_clients c
                     WHERE c.tenant = $1 AND c.last_used_at IS NULL
                       AND (SELECT count(*) FROM oauth_clients WHERE tenant = $1) >= $2
                       AND NOT EXISTS (SELECT 1 FROM oauth_grants g WHERE g.tenant = c.tenant AND g.client_id = c.client_id)
                     ORDER BY c.created_at LIMIT 1)",
            )
            .bind(&tenant)
            .bind(i64::try_from(max).unwrap_or(i64::MAX))
            .execute(&pool)
            .await
            .map_err(db)?;
            // One statement: the count and the insert cannot be split by
            // another replica's registration beyond a few over the bound.
            let inserted = sqlx::query(
                "INSERT INTO oauth_clients (tenant, client_id, metadata, created_at)
                 SELECT $1, $2, $3, $4 WHERE (SELECT count(*) FROM oauth_clients WHERE tenant = $1) < $5",
            )
            .bind(tenant)
            .bind(id)
            .bind(metadata)
            .bind(now)
            .bind(i64::try_from(max).unwrap_or(i64::MAX))
            .execute(&pool)
            .await
            .map_err(db)?
            .rows_affected();
            Ok(inserted == 1)
        })
    }

    fn oauth_client(&self, tenant: &str, client_id: &str) -> Result<Option<String>, StoreError> {
        let (pool, tenant, id) = (self.pool.clone(), tenant.to_string(), client_id.to_string());
        self.run(async move {
            let row = sqlx::query("SELECT metadata FROM oauth_clients WHERE tenant = $1 AND client_id = $2")
                .bind(tenant)
                .bind(id)
                .fetch_optional(&pool)
                .await
                .map_err(db)?;
            row.map(|r| r.try_get(0)).transpose().map_err(db)
        })
    }

    fn end_user(&self, tenant: &str, name: &str) -> Result<Option<String>, StoreError> {
        let (pool, tenant, name) = (self.pool.clone(), tenant.to_string(), name.to_string());
        self.run(async move {
            let row = sqlx::query("SELECT password_hash FROM end_users WHERE tenant = $1 AND name = $2")
                .bind(tenant)
                .bind(name)
                .fetch_optional(&pool)
                .await
                .map_err(db)?;
            row.map(|r| r.try_get(0)).transpose().map_err(db)
        })
    }

    fn put_end_user(
        &self,
        tenant: &str,
        name: &str,
        password_hash: &str,
        audit: &AuditEntry,
        max: u64,
    ) -> Result<bool, StoreError> {
        let (tenant, name, hash, at) = (tenant.to_string(), name.to_string(), password_hash.to_string(), audit.at);
        let max = i64::try_from(max).unwrap_or(i64::MAX);
        // End users are read from the store at each login: no change-log row.
        audited_within_bound!(
            self,
            audit,
            None::<Topic>,
            format!("end_users:{tenant}"),
            "SELECT EXISTS (SELECT 1 FROM end_users WHERE tenant = $1 AND name = $2)
                 OR (SELECT count(*) FROM end_users WHERE tenant = $1) < $3",
            [&tenant, &name, max],
            "INSERT INTO end_users (tenant, name, password_hash, updated_at) VALUES ($1, $2, $3, $4)
             ON CONFLICT (tenant, name) DO UPDATE SET password_hash = excluded.password_hash,
                 updated_at = excluded.updated_at",
            [tenant, name, hash, at],
        )
    }

    fn delete_end_user(&self, tenant: &str, name: &str, audit: &AuditEntry) -> Result<bool, StoreError> {
        let (pool, tenant, name, audit) = (self.pool.clone(), tenant.to_string(), name.to_string(), audit.clone());
        self.run(async move {
            let mut tx = pool.begin().await.map_err(db)?;
            // Their grants and links go with them; replicas drop the grants.
            let grants = authorizations::delete_of_end_user(&mut tx, &tenant, &name).await?;
            let deleted = sqlx::query("DELETE FROM end_users WHERE tenant = $1 AND name = $2")
                .bind(&tenant)
                .bind(&name)
                .execute(&mut *tx)
                .await
                .map_err(db)?
                .rows_affected();
            insert_audit(&mut tx, &audit).await.map_err(db)?;
            if grants {
                record(&mut tx, Topic::Authorizations).await.map_err(db)?;
            }
            tx.commit().await.map_err(db)?;
            Ok(deleted == 1)
        })
    }

    fn ping(&self) -> Result<(), StoreError> {
        let pool = self.pool.clone();
        self.run(async move {
            sqlx::query("SELECT 1").execute(&pool).await.map_err(db)?;
            Ok(())
        })
    }

    fn record_audit(&self, audit: &AuditEntry) -> Result<(), StoreError> {
        let (pool, audit) = (self.pool.clone(), audit.clone());
        self.run(async move {
            let mut tx = pool.begin().await.map_err(db)?;
            insert_audit(&mut tx, &audit).await.map_err(db)?;
            tx.commit().await.map_err(db)
        })
    }

    fn audit(&self, query: &AuditQuery) -> Result<Vec<AuditEntry>, StoreError> {
        let (pool, tenant) = (self.pool.clone(), query.tenant.clone());
        let before = query.before.unwrap_or(i64::MAX);
        let limit = i64::try_from(query.limit).unwrap_or(i64::MAX);
        let rows = self.run(async move {
            sqlx::query(
                "SELECT seq, at, actor, tenant, action, target, sha256, detail FROM audit
                 WHERE ($1::TEXT IS NULL OR tenant = $1) AND seq < $2
                 ORDER BY seq DESC LIMIT $3",
            )
            .bind(tenant)
            .bind(before)
            .bind(limit)
            .fetch_all(&pool)
            .await
            .map_err(db)
        })?;
        rows.iter()
            .map(|r| {
                Ok(AuditEntry {
                    seq: r.try_get(0)?,
                    at: r.try_get(1)?,
                    actor: r.try_get(2)?,
                    tenant: r.try_get(3)?,
                    action: r.try_get(4)?,
                    target: r.try_get(5)?,
                    sha256: r.try_get(6)?,
                    detail: serde_json::from_str(&r.try_get::<String, _>(7)?).unwrap_or_default(),
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(db)
    }

    fn insert_session(&self, session: &StoredSession, now: i64) -> Result<(), StoreError> {
        let (pool, s) = (self.pool.clone(), session.clone());
        self.run(async move {
            let mut tx = pool.begin().await.map_err(db)?;
            sqlx::query("DELETE FROM sessions WHERE expires_at <= $1").bind(now).execute(&mut *tx).await.map_err(db)?;
            sqlx::query(
                "INSERT INTO sessions (token_sha256, tenant, end_user, form_token, expires_at) VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(s.token_sha256)
            .bind(s.tenant)
            .bind(s.user)
            .bind(s.form_token)
            .bind(s.expires_at)
            .execute(&mut *tx)
            .await
            .map_err(db)?;
            tx.commit().await.map_err(db)?;
            Ok(())
        })
    }

    fn session(&self, token_sha256: &str, now: i64) -> Result<Option<StoredSession>, StoreError> {
        let (pool, token) = (self.pool.clone(), token_sha256.to_string());
        self.run(async move {
            let row = sqlx::query(
                "SELECT token_sha256, tenant, end_user, form_token, expires_at FROM sessions
                 WHERE token_sha256 = $1 AND expires_at > $2",
            )
            .bind(token)
            .bind(now)
            .fetch_optional(&pool)
            .await
            .map_err(db)?;
            row.map(|r| {
                Ok(StoredSession {
                    token_sha256: r.try_get(0)?,
                    tenant: r.try_get(1)?,
                    user: r.try_get(2)?,
                    form_token: r.try_get(3)?,
                    expires_at: r.try_get(4)?,
                })
            })
            .transpose()
            .map_err(db)
        })
    }

    fn insert_designer_session(
        &self,
        session: &StoredDesignerSession,
        now: i64,
        max_per_key: usize,
    ) -> Result<(), StoreError> {
        let (pool, s) = (self.pool.clone(), session.clone());
        let others = i64::try_from(max_per_key.saturating_sub(1)).unwrap_or(i64::MAX);
        self.run(async move {
            let mut tx = pool.begin().await.map_err(db)?;
            sqlx::query("DELETE FROM designer_sessions WHERE expires_at <= $1")
                .bind(now)
                .execute(&mut *tx)
                .await
                .map_err(db)?;
            sqlx::query(
                "INSERT INTO designer_sessions (token_sha256, tenant, key_id, key_sha256, form_token, created_at, expires_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )
            .bind(&s.token_sha256)
            .bind(&s.tenant)
            .bind(&s.key_id)
            .bind(&s.key_sha256)
            .bind(&s.form_token)
            .bind(s.created_at)
            .bind(s.expires_at)
            .execute(&mut *tx)
            .await
            .map_err(db)?;
            // The new session and the newest others, `max_per_key` in all, stay.
            sqlx::query(
                "DELETE FROM designer_sessions WHERE key_id = $1 AND token_sha256 <> $2 AND token_sha256 NOT IN
                    (SELECT token_sha256 FROM designer_sessions WHERE key_id = $1 AND token_sha256 <> $2
                     ORDER BY created_at DESC, seq DESC LIMIT $3)",
            )
            .bind(&s.key_id)
            .bind(&s.token_sha256)
            .bind(others)
            .execute(&mut *tx)
            .await
            .map_err(db)?;
            tx.commit().await.map_err(db)?;
            Ok(())
        })
    }

    fn designer_session(&self, token_sha256: &str, now: i64) -> Result<Option<StoredDesignerSession>, StoreError> {
        let (pool, token) = (self.pool.clone(), token_sha256.to_string());
        self.run(async move {
            let row = sqlx::query(
                "SELECT token_sha256, tenant, key_id, key_sha256, form_token, created_at, expires_at
                 FROM designer_sessions WHERE token_sha256 = $1 AND expires_at > $2",
            )
            .bind(token)
            .bind(now)
            .fetch_optional(&pool)
            .await
            .map_err(db)?;
            row.map(|r| {
                Ok(StoredDesignerSession {
                    token_sha256: r.try_get(0)?,
                    tenant: r.try_get(1)?,
                    key_id: r.try_get(2)?,
                    key_sha256: r.try_get(3)?,
                    form_token: r.try_get(4)?,
                    created_at: r.try_get(5)?,
                    expires_at: r.try_get(6)?,
                })
            })
            .transpose()
            .map_err(db)
        })
    }

    fn delete_designer_session(&self, token_sha256: &str) -> Result<(), StoreError> {
        let (pool, token) = (self.pool.clone(), token_sha256.to_string());
        self.run(async move {
            sqlx::query("DELETE FROM designer_sessions WHERE token_sha256 = $1")
                .bind(token)
                .execute(&pool)
                .await
                .map_err(db)?;
            Ok(())
        })
    }

    fn waiting_call(&self, tenant: &str, fingerprint: &str, now: i64) -> Result<Option<String>, StoreError> {
        let (pool, tenant, fingerprint) = (self.pool.clone(), tenant.to_string(), fingerprint.to_string());
        self.run(async move {
            let row =
                sqlx::query("SELECT id FROM waiting_calls WHERE tenant = $1 AND fingerprint = $2 AND kept_until > $3")
                    .bind(tenant)
                    .bind(fingerprint)
                    .bind(now)
                    .fetch_optional(&pool)
                    .await
                    .map_err(db)?;
            row.map(|r| r.try_get(0)).transpose().map_err(db)
        })
    }

    fn put_waiting_call(
        &self,
        tenant: &str,
        fingerprint: &str,
        id: &str,
        kept_until: i64,
        max_per_tenant: usize,
    ) -> Result<(), StoreError> {
        let (pool, tenant, fingerprint, id) =
            (self.pool.clone(), tenant.to_string(), fingerprint.to_string(), id.to_string());
        let max = i64::try_from(max_per_tenant).unwrap_or(i64::MAX);
        self.run(async move {
            let mut tx = pool.begin().await.map_err(db)?;
            // One tenant's waiting calls at a time: the cap holds under races.
            sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('waiting:' || $1, 0))")
                .bind(&tenant)
                .execute(&mut *tx)
                .await
                .map_err(db)?;
            if waiting_count(&mut tx, &tenant).await.map_err(db)? >= max {
                sqlx::query("DELETE FROM waiting_calls WHERE tenant = $1 AND kept_until <= $2")
                    .bind(&tenant)
                    .bind(unix_now())
                    .execute(&mut *tx)
                    .await
                    .map_err(db)?;
            }
            if waiting_count(&mut tx, &tenant).await.map_err(db)? < max {
                sqlx::query(
                    "INSERT INTO waiting_calls (tenant, fingerprint, id, kept_until) VALUES ($1, $2, $3, $4)
                     ON CONFLICT (tenant, fingerprint) DO UPDATE SET id = excluded.id, kept_until = excluded.kept_until",
                )
                .bind(&tenant)
                .bind(fingerprint)
                .bind(id)
                .bind(kept_until)
                .execute(&mut *tx)
                .await
                .map_err(db)?;
            }
            tx.commit().await.map_err(db)?;
            Ok(())
        })
    }

    fn delete_waiting_call(&self, tenant: &str, fingerprint: &str) -> Result<(), StoreError> {
        let (pool, tenant, fingerprint) = (self.pool.clone(), tenant.to_string(), fingerprint.to_string());
        self.run(async move {
            sqlx::query("DELETE FROM waiting_calls WHERE tenant = $1 AND fingerprint = $2")
                .bind(tenant)
                .bind(fingerprint)
                .execute(&pool)
                .await
                .map_err(db)?;
            Ok(())
        })
    }

    fn server_key(&self, name: &str) -> Result<[u8; 32], StoreError> {
        let id = format!("server-key:{name}");
        let mut fresh = [0u8; 32];
        getrandom::fill(&mut fresh).map_err(|e| StoreError::Io(std::io::Error::other(e)))?;
        let sealed = self.cipher.seal("", &id, &hex::encode(fresh))?;
        let (pool, key) = (self.pool.clone(), name.to_string());
        // Replicas starting together: the first insert wins, every one
        // reads the winner's.
        let stored: String = self.run(async move {
            sqlx::query("INSERT INTO server_keys (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING")
                .bind(&key)
                .bind(sealed)
                .execute(&pool)
                .await
                .map_err(db)?;
            sqlx::query("SELECT value FROM server_keys WHERE name = $1")
                .bind(&key)
                .fetch_one(&pool)
                .await
                .and_then(|r| r.try_get(0))
                .map_err(db)
        })?;
        let hex_key = self.cipher.open("", &id, &stored)?;
        hex::decode(hex_key.trim())
            .ok()
            .and_then(|b| <[u8; 32]>::try_from(b).ok())
            .ok_or_else(|| StoreError::Inconsistent(format!("the server key {name} is not 32 bytes")))
    }

    fn changes_since(&self, after: i64) -> Result<ChangeFeed, StoreError> {
        let pool = self.pool.clone();
        let (latest, oldest, topics): (i64, i64, Vec<String>) = self.run(async move {
            // One statement, one snapshot: the topics and where the log ends
            // are read together.
            let row = sqlx::query(
                "SELECT COALESCE((SELECT max(seq) FROM changes), 0),
                        COALESCE((SELECT min(seq) FROM changes), 0),
                        ARRAY(SELECT DISTINCT topic FROM changes WHERE seq > $1)",
            )
            .bind(after)
            .fetch_one(&pool)
            .await
            .map_err(db)?;
            Ok((row.try_get(0).map_err(db)?, row.try_get(1).map_err(db)?, row.try_get(2).map_err(db)?))
        })?;
        // Rows this replica never read were pruned: it reloads everything.
        let topics = if after < latest && after < oldest - 1 {
            Topic::ALL.into_iter().collect()
        } else {
            topics.iter().filter_map(|t| Topic::parse(t)).collect()
        };
        Ok(ChangeFeed { latest, topics })
    }

    fn shared(&self) -> bool {
        true
    }

    fn wait_for_change(&self, timeout: Duration) -> bool {
        let (flag, condvar) = &*self.changed;
        let guard = flag.lock().unwrap_or_else(|p| p.into_inner());
        let (mut guard, _) =
            condvar.wait_timeout_while(guard, timeout, |changed| !*changed).unwrap_or_else(|p| p.into_inner());
        std::mem::take(&mut *guard)
    }

    fn live_replicas(&self) -> usize {
        self.live.load(Ordering::Acquire).max(1)
    }
}

fn oauth_grant_row(r: &sqlx::postgres::PgRow) -> Result<OAuthGrant, StoreError> {
    Ok(OAuthGrant {
        token_sha256: r.try_get(0).map_err(db)?,
        kind: r.try_get(1).map_err(db)?,
        tenant: r.try_get(2).map_err(db)?,
        client_id: r.try_get(3).map_err(db)?,
        end_user: r.try_get(4).map_err(db)?,
        scope: r.try_get(5).map_err(db)?,
        resource: r.try_get(6).map_err(db)?,
        family: r.try_get(7).map_err(db)?,
        detail: r.try_get(8).map_err(db)?,
        expires_at: r.try_get(9).map_err(db)?,
        used_at: r.try_get(10).map_err(db)?,
        revoked_at: r.try_get(11).map_err(db)?,
    })
}
