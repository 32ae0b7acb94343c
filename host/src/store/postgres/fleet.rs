//! What makes the PostgreSQL store a fleet's: each replica's heartbeat and
//! the count of live replicas, the housekeeping any replica may do (gone
//! replicas, their orphaned transactions, old change-log rows), and the
//! change log itself — a row per change, appended under a lock in the
//! changing transaction with its `NOTIFY`, and the listener that wakes
//! [`RegistryStore::wait_for_change`](crate::store::RegistryStore::wait_for_change).

use super::{PostgresStore, StoreError, Topic, db};
use sqlx::postgres::{PgListener, PgPool};
use sqlx::{PgConnection, Row};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// How often a replica beats.
pub(super) const HEARTBEAT: Duration = Duration::from_secs(1);
/// The notification channel of the change log.
const CHANNEL: &str = "plinth_changes";
/// The advisory lock (two-key space) that orders change-log writes.
const CHANGE_LOCK: (i32, i32) = (0x706c_6e74, 1);

impl PostgresStore {
    /// Records this replica's heartbeat and counts the live replicas.
    pub(super) fn beat(&self) -> Result<(), StoreError> {
        let (pool, replica, live) = (self.pool.clone(), self.replica.clone(), self.live.clone());
        self.run(async move { beat(&pool, &replica, &live).await })
    }

    pub(super) fn spawn_heartbeat(&self) {
        let (pool, replica, live) = (self.pool.clone(), self.replica.clone(), self.live.clone());
        let reachability = self.reachability.clone();
        let Some(runtime) = &self.runtime else { return };
        runtime.spawn(async move {
            let mut ticks = 0u64;
            loop {
                tokio::time::sleep(HEARTBEAT).await;
                // The heartbeat always tries: it is what finds the database
                // back after an outage.
                let beaten = beat(&pool, &replica, &live).await;
                reachability.observe(&beaten);
                if let Err(e) = beaten {
                    tracing::warn!(error = %e, "the heartbeat could not be recorded");
                    continue;
                }
                ticks += 1;
                if ticks.is_multiple_of(10)
                    && let Err(e) = tidy(&pool).await
                {
                    tracing::warn!(error = %e, "the fleet's housekeeping failed");
                }
            }
        });
    }

    /// Listens for change notifications; wakes the waiter on each one, and
    /// after every (re)connection, since notifications sent while the
    /// connection was down are lost.
    pub(super) fn spawn_listener(&self) {
        let (pool, changed) = (self.pool.clone(), self.changed.clone());
        let Some(runtime) = &self.runtime else { return };
        runtime.spawn(async move {
            let wake = || {
                let (flag, condvar) = &*changed;
                *flag.lock().unwrap_or_else(|p| p.into_inner()) = true;
                condvar.notify_all();
            };
            loop {
                let mut listener = match PgListener::connect_with(&pool).await {
                    Ok(listener) => listener,
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot listen for changes; retrying");
                        tokio::time::sleep(HEARTBEAT).await;
                        continue;
                    }
                };
                if let Err(e) = listener.listen(CHANNEL).await {
                    tracing::warn!(error = %e, "cannot listen for changes; retrying");
                    tokio::time::sleep(HEARTBEAT).await;
                    continue;
                }
                wake();
                loop {
                    match listener.try_recv().await {
                        Ok(Some(_)) => wake(),
                        // The connection was lost; the next receive
                        // reconnects. Whatever was sent meanwhile is lost:
                        // the replica reads the log.
                        Ok(None) => wake(),
                        Err(e) => {
                            tracing::warn!(error = %e, "the change listener failed; reconnecting");
                            wake();
                            tokio::time::sleep(HEARTBEAT).await;
                            break;
                        }
                    }
                }
            }
        });
    }
}

async fn beat(pool: &PgPool, replica: &str, live: &AtomicUsize) -> Result<(), StoreError> {
    sqlx::query("INSERT INTO replicas (id) VALUES ($1) ON CONFLICT (id) DO UPDATE SET heartbeat_ts = now()")
        .bind(replica)
        .execute(pool)
        .await
        .map_err(db)?;
    let count: i64 = sqlx::query(concat!("SELECT count(*) FROM replicas WHERE heartbeat_ts > ", live_since!()))
        .fetch_one(pool)
        .await
        .and_then(|row| row.try_get(0))
        .map_err(db)?;
    live.store(usize::try_from(count).unwrap_or(1).max(1), Ordering::Release);
    Ok(())
}

/// Housekeeping any replica may do: forget long-gone replicas, end the
/// running transactions of replicas that died (`interrupted`), and drop
/// change-log rows older than a day, always keeping the newest (a replica
/// behind by more reloads everything).
async fn tidy(pool: &PgPool) -> Result<(), StoreError> {
    interrupt_orphans(pool).await?;
    sqlx::query("DELETE FROM replicas WHERE heartbeat_ts < now() - interval '1 hour'")
        .execute(pool)
        .await
        .map_err(db)?;
    sqlx::query(
        "DELETE FROM changes WHERE at_ts < now() - interval '1 day'
         AND seq < (SELECT max(seq) FROM changes)",
    )
    .execute(pool)
    .await
    .map_err(db)?;
    Ok(())
}

pub(super) async fn interrupt_orphans(pool: &PgPool) -> Result<usize, StoreError> {
    let done = sqlx::query(concat!(
        "UPDATE confirmations SET state = 'interrupted'
         WHERE state = 'accepted' AND (runner IS NULL OR runner NOT IN (
             SELECT id FROM replicas WHERE heartbeat_ts > ",
        live_since!(),
        "))"
    ))
    .execute(pool)
    .await
    .map_err(db)?;
    Ok(usize::try_from(done.rows_affected()).unwrap_or(usize::MAX))
}

/// Appends a change-log row for `topic`, with its notification, to the
/// transaction `tx`. The lock is held to the commit: change-log rows commit
/// in sequence order, so a replica that has read row N has seen every row
/// before it.
pub(super) async fn record(tx: &mut PgConnection, topic: Topic) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_advisory_xact_lock($1, $2)")
        .bind(CHANGE_LOCK.0)
        .bind(CHANGE_LOCK.1)
        .execute(&mut *tx)
        .await?;
    let seq: i64 = sqlx::query("INSERT INTO changes (topic) VALUES ($1) RETURNING seq")
        .bind(topic.as_str())
        .fetch_one(&mut *tx)
        .await?
        .try_get(0)?;
    sqlx::query("SELECT pg_notify($1, $2)").bind(CHANNEL).bind(seq.to_string()).execute(&mut *tx).await?;
    Ok(())
}
