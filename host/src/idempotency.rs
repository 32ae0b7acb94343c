//! Idempotent calls: a caller's call id runs its tool at most once.
//!
//! Clients retry — after a timeout, a dropped connection, a crash of their
//! own — and a tool like `book_flight` must not book twice. A front door that
//! carries call ids ([OTC](crate::api::otc)'s `call_id`, the
//! [catalog](crate::api::catalog)'s try forms, which a browser may send
//! again) claims each one here before the tool runs and settles it with the
//! response afterwards:
//!
//! - the first claim of a call id wins and runs the tool;
//! - a claim of the same call id for the same request, while the first runs,
//!   waits for it and gets its response; afterwards it gets the recorded one;
//! - the same call id for a different request is a [`Claim::Conflict`];
//! - a call that never ran the tool (refused as busy, say) releases its
//!   claim, so a retry runs.
//!
//! Records live in the store for the retention window, so they survive a
//! restart, and every replica of a fleet sees them: a claim of a call id
//! another live replica is running polls the store until its response is
//! recorded (or the claim released, or its replica gone), for as long as a
//! call can take. A record whose call never finished (the server died while the
//! tool ran) answers [`Claim::Unfinished`]: nobody can say whether the tool
//! took effect, so it is not run again. A graceful stop waits until nothing
//! is in flight ([`CallLedger::in_flight`]), so only a death leaves one.

use crate::store::{CallKey, Claimed, RegistryStore, StoreError};
use crate::tenancy::LedgerBound;
use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// What claiming a call id decided.
#[derive(Debug)]
pub enum Claim {
    /// The caller runs the call, then settles the ticket.
    Run(Ticket),
    /// The call ran before: this is its recorded response.
    Recorded(String),
    /// The call id was used for a different request.
    Conflict,
    /// The call began but its outcome was never recorded.
    Unfinished,
    /// Another replica still runs the call, past how long a claim waits for
    /// it: the caller retries later.
    RunningElsewhere,
}

/// How a call in flight ended, for those waiting on it.
#[derive(Debug, Clone)]
enum Settled {
    Recorded(Arc<str>),
    Released,
}

struct InFlight {
    request_sha256: String,
    settled: watch::Receiver<Option<Settled>>,
}

type InFlightMap = DashMap<CallKey, InFlight>;

/// The call ids being run by this process, in front of the store's records.
pub struct CallLedger {
    in_flight: Arc<InFlightMap>,
    retention: Duration,
    /// How long a claim waits for another replica to finish the call.
    elsewhere_wait: Duration,
}

/// How often a claim of a call another replica runs asks the store again.
const ELSEWHERE_POLL: Duration = Duration::from_millis(50);

/// The right to run a claimed call. Settle it with the response, or release
/// it when the tool never ran; dropped unsettled, the call counts as
/// unfinished.
#[derive(Debug)]
pub struct Ticket {
    key: CallKey,
    settled: watch::Sender<Option<Settled>>,
    in_flight: Arc<InFlightMap>,
    done: bool,
}

impl std::fmt::Debug for InFlight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InFlight").field("request_sha256", &self.request_sha256).finish_non_exhaustive()
    }
}

impl CallLedger {
    /// A ledger whose records are kept for `retention`; a claim of a call
    /// another replica runs waits up to `elsewhere_wait` for its response.
    pub fn new(retention: Duration, elsewhere_wait: Duration) -> Self {
        CallLedger { in_flight: Arc::default(), retention, elsewhere_wait }
    }

    /// How long a call's response is kept for retries.
    pub fn retention(&self) -> Duration {
        self.retention
    }

    /// Calls claimed by this process and not yet settled.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Claims `key` for the request whose sha256 is `request_sha256`.
    pub async fn claim(
        &self,
        store: &dyn RegistryStore,
        key: &CallKey,
        request_sha256: &str,
    ) -> Result<Claim, StoreError> {
        let give_up = tokio::time::Instant::now() + self.elsewhere_wait;
        loop {
            let mut running = match self.in_flight.entry(key.clone()) {
                Entry::Occupied(entry) if entry.get().request_sha256 != request_sha256 => return Ok(Claim::Conflict),
                Entry::Occupied(entry) => entry.get().settled.clone(),
                // The entry is held while the store is asked, so two claims
                // of one call id in this process cannot both find it fresh.
                Entry::Vacant(vacant) => {
                    let now = crate::tenancy::unix_now();
                    let expired_before =
                        now.saturating_sub(i64::try_from(self.retention.as_secs()).unwrap_or(i64::MAX));
                    let claimed = store.claim_call(key, request_sha256, now, expired_before)?;
                    if let Claimed::Existing { response: None, running_elsewhere: true, request_sha256: theirs } =
                        &claimed
                        && theirs == request_sha256
                    {
                        drop(vacant);
                        if tokio::time::Instant::now() >= give_up {
                            return Ok(Claim::RunningElsewhere);
                        }
                        tokio::time::sleep(ELSEWHERE_POLL).await;
                        continue;
                    }
                    return Ok(match claimed {
                        Claimed::Fresh => {
                            let (settled, receiver) = watch::channel(None);
                            vacant.insert(InFlight { request_sha256: request_sha256.to_string(), settled: receiver });
                            Claim::Run(Ticket {
                                key: key.clone(),
                                settled,
                                in_flight: self.in_flight.clone(),
                                done: false,
                            })
                        }
                        Claimed::Existing { request_sha256: theirs, .. } if theirs != request_sha256 => Claim::Conflict,
                        Claimed::Existing { response: Some(response), .. } => Claim::Recorded(response),
                        Claimed::Existing { response: None, .. } => Claim::Unfinished,
                    });
                }
            };
            let outcome = running.wait_for(Option::is_some).await.map(|settled| settled.clone());
            match outcome {
                Ok(Some(Settled::Recorded(response))) => return Ok(Claim::Recorded(response.to_string())),
                // The tool never ran: claim afresh.
                Ok(_) => continue,
                Err(_) => return Ok(Claim::Unfinished),
            }
        }
    }
}

impl Ticket {
    /// The tenant whose call this is.
    pub fn tenant(&self) -> &str {
        &self.key.tenant
    }

    /// Records the response the call produced (the tool ran), keeping its
    /// tenant's ledger within `bound`.
    pub fn record(mut self, store: &dyn RegistryStore, response: &str, bound: LedgerBound) -> Result<(), StoreError> {
        let stored = store.record_call(&self.key, response, bound);
        self.finish(Settled::Recorded(response.into()));
        stored
    }

    /// Gives the call id back: the tool never ran, so a retry may run it.
    pub fn release(mut self, store: &dyn RegistryStore) -> Result<(), StoreError> {
        let stored = store.release_call(&self.key);
        self.finish(Settled::Released);
        stored
    }

    fn finish(&mut self, settled: Settled) {
        // Out of the map first: a waiter woken by `Released` must find the
        // call id free, not this call still in flight.
        self.in_flight.remove(&self.key);
        self.settled.send_replace(Some(settled));
        self.done = true;
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.done {
            // Waiters see the sender gone and answer `Unfinished`.
            self.in_flight.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::SqliteStore;

    fn key(call_id: &str) -> CallKey {
        CallKey { tenant: "default".into(), caller: "k1".into(), call_id: call_id.into() }
    }

    /// A store in a temporary data dir and a ledger over it.
    fn ledger() -> (tempfile::TempDir, Arc<dyn RegistryStore>, Arc<CallLedger>) {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn RegistryStore> =
            Arc::new(SqliteStore::open(dir.path(), crate::store::SecretsCipher::new(&[0; 32])).unwrap());
        (dir, store, Arc::new(CallLedger::new(Duration::from_secs(60), Duration::from_secs(5))))
    }

    #[tokio::test]
    async fn a_second_claim_waits_for_the_first_and_gets_its_response() {
        let (_dir, store, ledger) = ledger();
        let Claim::Run(ticket) = ledger.claim(&*store, &key("a"), "h").await.unwrap() else { panic!() };
        assert!(matches!(ledger.claim(&*store, &key("a"), "other").await.unwrap(), Claim::Conflict));

        let waiter = tokio::spawn({
            let (ledger, store) = (ledger.clone(), store.clone());
            async move { ledger.claim(&*store, &key("a"), "h").await.unwrap() }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "the second claim waits while the first runs");
        ticket.record(&*store, "response", crate::tenancy::Quotas::default().ledger_bound()).unwrap();
        assert!(matches!(waiter.await.unwrap(), Claim::Recorded(r) if r == "response"));
        assert!(matches!(ledger.claim(&*store, &key("a"), "h").await.unwrap(), Claim::Recorded(r) if r == "response"));
    }

    #[tokio::test]
    async fn a_released_claim_can_run_again_and_an_abandoned_one_is_unfinished() {
        let (_dir, store, ledger) = ledger();
        let Claim::Run(ticket) = ledger.claim(&*store, &key("b"), "h").await.unwrap() else { panic!() };
        let waiter = tokio::spawn({
            let (ledger, store) = (ledger.clone(), store.clone());
            async move { ledger.claim(&*store, &key("b"), "h").await.unwrap() }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        ticket.release(&*store).unwrap();
        let Claim::Run(second) = waiter.await.unwrap() else { panic!("a released call id is claimed afresh") };
        drop(second);
        assert!(matches!(ledger.claim(&*store, &key("b"), "h").await.unwrap(), Claim::Unfinished));
    }
}
