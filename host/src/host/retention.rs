//! The periodic sweep of CHEQ transactions: it counts those that expired
//! unanswered, and deletes those past the operator's retention period, so
//! the store does not grow with every confirmation ever asked for.
//!
//! The sweep runs once at start and then periodically on the tool executor.
//! A pending transaction is deleted only once it has been expired for the
//! whole period, and a running (`accepted`) one never: its call is still
//! going to record its answer.
//!
//! **Expiries.** A transaction expires by the clock, with no event of its
//! own. Each sweep claims from the store the transactions that expired
//! since the last claim (one aggregate query over the settled-at index: no
//! memory and no task per transaction) and counts them by tool in
//! `plinth_cheq_transactions_total{state="expired"}`. The store keeps how far
//! expiries were claimed, so a restart counts those that expired while the
//! server was down (at its first sweep), and in a fleet each expiry is
//! counted by exactly one replica — whichever sweep claims it first — so
//! the replicas' counts sum to the total.

use super::ToolHost;
use crate::metrics::Metrics;
use crate::store::{RegistryStore, StoreError};
use crate::tenancy::unix_now;
use std::sync::Arc;
use std::time::Duration;

/// How often expiries are counted at least (more often when the retention
/// sweep runs more often).
const EXPIRY_COUNT_INTERVAL: Duration = Duration::from_secs(10);

/// How long after its expiry a transaction is counted expired. A decision
/// reads the clock, then writes: one that read it just before the expiry
/// may still land a moment after, and must find the transaction unclaimed
/// (or be counted twice, decided and expired). Seconds of slack cover a
/// store that made the decision wait.
const EXPIRY_SETTLE_SECS: i64 = 5;

/// How often the deletion runs for a retention period: a tenth of it, at
/// least a second and at most an hour (a transaction outlives its period by
/// at most that much).
pub(super) fn sweep_interval(retention: Duration) -> Duration {
    (retention / 10).clamp(Duration::from_secs(1), Duration::from_secs(3600))
}

/// Counts the transactions that expired since the last claim, fleet-wide
/// (see the module docs). Returns how far expiries are now counted.
pub(super) fn count_expiries(store: &dyn RegistryStore, metrics: &Metrics) -> Result<i64, StoreError> {
    let until = unix_now().saturating_sub(EXPIRY_SETTLE_SECS);
    for expired in store.claim_expired_confirmations(until)? {
        metrics.cheq_expired(&expired.tenant, &expired.tool, expired.count);
    }
    Ok(until)
}

/// Deletes the transactions settled more than `retention` ago, and none
/// that expired after `counted_until`: an expiry is counted before its
/// transaction is deleted.
pub(super) fn sweep(
    store: &dyn RegistryStore,
    retention: Duration,
    counted_until: i64,
    calls_kept: Duration,
) -> Result<usize, StoreError> {
    let before = unix_now().saturating_sub(i64::try_from(retention.as_secs()).unwrap_or(i64::MAX)).min(counted_until);
    let deleted = store.sweep_confirmations(before)?;
    // Expired OAuth codes and tokens are of no use to anyone: a day after
    // their expiry (so a replay is still told apart from nonsense) they go.
    let day_ago = unix_now().saturating_sub(24 * 3600);
    let expired = store.sweep_oauth_grants(day_ago)?;
    // Clients never used go a day after registering; used ones a refresh
    // token's life and a margin after their last use.
    let idle_since =
        unix_now().saturating_sub(i64::try_from(super::oauth::CLIENT_KEPT_AFTER_USE.as_secs()).unwrap_or(i64::MAX));
    let unused = store.sweep_oauth_clients(day_ago, idle_since)?;
    if expired + unused > 0 {
        tracing::info!(expired, unused, "deleted expired OAuth codes and tokens, and clients that hold none");
    }
    // Call ids past their retention, of tenants that made no call lately
    // (a claim deletes its own tenant's).
    let calls =
        store.sweep_calls(unix_now().saturating_sub(i64::try_from(calls_kept.as_secs()).unwrap_or(i64::MAX)))?;
    if calls > 0 {
        tracing::info!(calls, "deleted call-id records past their retention");
    }
    if deleted > 0 {
        tracing::info!(deleted, retention_secs = retention.as_secs(), "deleted CHEQ transactions past their retention");
    }
    Ok(deleted)
}

/// Counts and sweeps now, then counts expiries every
/// [`EXPIRY_COUNT_INTERVAL`] (or [`sweep_interval`], if shorter) and sweeps
/// every [`sweep_interval`], on the host's tool executor (the task ends
/// with the host).
pub(super) fn start_confirmation_sweep(host: &ToolHost, retention: Duration) -> Result<(), StoreError> {
    let counted = count_expiries(&*host.store, &host.metrics)?;
    let calls_kept = host.call_retention();
    sweep(&*host.store, retention, counted, calls_kept)?;
    let Some(executor) = &host.executor else { return Ok(()) };
    let store: Arc<dyn RegistryStore> = host.store.clone();
    let links = host.authorizations.store();
    let metrics = host.metrics.clone();
    let sweep_every = sweep_interval(retention);
    let every = sweep_every.min(EXPIRY_COUNT_INTERVAL);
    executor.normal().spawn(async move {
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut next_sweep = tokio::time::Instant::now() + sweep_every;
        loop {
            ticks.tick().await;
            let due = tokio::time::Instant::now() >= next_sweep;
            if due {
                next_sweep += sweep_every;
            }
            let (store, links, metrics) = (store.clone(), links.clone(), metrics.clone());
            // SQLite blocks: keep it off the threads that run tools' async work.
            let swept = tokio::task::spawn_blocking(move || {
                let counted = count_expiries(&*store, &metrics)?;
                if due {
                    sweep(&*store, retention, counted, calls_kept)?;
                    // Authorization links, a link's life after they expired
                    // (an agent may still be polling a finished one).
                    let kept = i64::try_from(super::authorizations::LINK_TTL.as_secs()).unwrap_or(i64::MAX);
                    let expired = links.sweep_links(unix_now().saturating_sub(kept))?;
                    if expired > 0 {
                        tracing::info!(expired, "deleted expired authorization links");
                    }
                }
                Ok::<_, StoreError>(())
            });
            match swept.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::error!(error = %e, "counting or sweeping CHEQ transactions failed; retrying later")
                }
                Err(_) => tracing::error!("counting or sweeping CHEQ transactions was interrupted; retrying later"),
            }
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sweep_runs_often_enough_for_its_period() {
        assert_eq!(sweep_interval(Duration::from_secs(1)), Duration::from_secs(1));
        assert_eq!(sweep_interval(Duration::from_secs(600)), Duration::from_secs(60));
        assert_eq!(sweep_interval(Duration::from_secs(30 * 24 * 3600)), Duration::from_secs(3600));
    }
}
