//! Retention of CHEQ transactions: a decided or expired transaction, with its
//! evidence, is kept for the operator's retention period and then deleted,
//! so the store does not grow with every confirmation ever asked for.
//!
//! The sweep runs once at start and then periodically on the tool executor.
//! A pending transaction is deleted only once it has been expired for the
//! whole period, and a running (`accepted`) one never: its call is still
//! going to record its answer.

use super::ToolHost;
use crate::store::{RegistryStore, StoreError};
use crate::tenancy::unix_now;
use std::sync::Arc;
use std::time::Duration;

/// How often the sweep runs for a retention period: a tenth of it, at
/// least a second and at most an hour (a transaction outlives its period by
/// at most that much).
pub(super) fn sweep_interval(retention: Duration) -> Duration {
    (retention / 10).clamp(Duration::from_secs(1), Duration::from_secs(3600))
}

/// Deletes the transactions settled more than `retention` ago.
pub(super) fn sweep(store: &dyn RegistryStore, retention: Duration) -> Result<usize, StoreError> {
    let before = unix_now().saturating_sub(i64::try_from(retention.as_secs()).unwrap_or(i64::MAX));
    let deleted = store.sweep_confirmations(before)?;
    if deleted > 0 {
        tracing::info!(deleted, retention_secs = retention.as_secs(), "deleted CHEQ transactions past their retention");
    }
    Ok(deleted)
}

/// Sweeps now, then every [`sweep_interval`] on the host's tool executor
/// (the task ends with the host).
pub(super) fn start_confirmation_sweep(host: &ToolHost, retention: Duration) -> Result<(), StoreError> {
    sweep(&*host.store, retention)?;
    let Some(executor) = &host.executor else { return Ok(()) };
    let store: Arc<dyn RegistryStore> = host.store.clone();
    let every = sweep_interval(retention);
    executor.normal().spawn(async move {
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let store = store.clone();
            // SQLite blocks: keep it off the threads that run tools' async work.
            match tokio::task::spawn_blocking(move || sweep(&*store, retention)).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::error!(error = %e, "sweeping old CHEQ transactions failed; retrying later"),
                Err(_) => tracing::error!("sweeping old CHEQ transactions was interrupted; retrying later"),
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
