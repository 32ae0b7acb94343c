//! A replica among others: what this process caches of the store, kept in
//! step with the changes other replicas make.
//!
//! Every change a replica caches (tenants, keys, secrets, config, settings,
//! versions) appends a row to the store's change log in the transaction that
//! makes it. A replica reads the log after a notification
//! ([`crate::store::RegistryStore::wait_for_change`]) and at least every
//! `--change-poll-ms`, and refreshes each topic that changed as a whole from
//! the store ([`ToolHost::reload`]). A notification lost — the database
//! restarted, the connection dropped — is made up by the next read of the
//! log, so the staleness of a replica is bounded by the poll interval plus
//! the time to reload (docs/fleet.md gives the measured figures).
//!
//! With the embedded SQLite store only this process writes, its memory
//! changes with the store, and nothing here runs.

use super::ToolHost;
use crate::store::{StoreError, Topic};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::time::Duration;

/// Where this replica stands in the change log.
#[derive(Debug)]
pub(super) struct FleetState {
    /// The last change applied.
    seen: AtomicI64,
    /// Whether the last read of the change log succeeded (and the registry
    /// was loaded): what `/ready` answers.
    ready: AtomicBool,
    /// Replicas sharing the store, as last counted: each enforces its
    /// share of the tenants' quotas.
    replicas: AtomicUsize,
    poll: Duration,
}

impl FleetState {
    pub(super) fn new(poll: Duration) -> Self {
        FleetState {
            seen: AtomicI64::new(0),
            ready: AtomicBool::new(false),
            replicas: AtomicUsize::new(1),
            poll: poll.max(Duration::from_millis(10)),
        }
    }

    /// Records that everything up to `seq` is applied: the replica is
    /// ready.
    pub(super) fn caught_up_to(&self, seq: i64) {
        self.seen.store(seq, Ordering::Release);
        self.ready.store(true, Ordering::Release);
    }

    /// Records how many replicas share the store now; returns whether that
    /// changed.
    pub(super) fn count_replicas(&self, replicas: usize) -> bool {
        let replicas = replicas.max(1);
        self.replicas.swap(replicas, Ordering::AcqRel) != replicas
    }

    /// How many replicas share the tenants' quotas (at least 1).
    pub(super) fn replicas(&self) -> u32 {
        u32::try_from(self.replicas.load(Ordering::Acquire).max(1)).unwrap_or(u32::MAX)
    }
}

impl ToolHost {
    /// Whether this replica has loaded the registry and is caught up with
    /// the change log (`GET /ready`). A replica that cannot read the log
    /// (the database is down) is not ready until it can again.
    pub fn is_ready(&self) -> bool {
        self.fleet.ready.load(Ordering::Acquire)
    }

    /// Applies the changes other replicas made since the last time: each
    /// topic that changed is reloaded from the store. Returns the topics.
    pub fn catch_up(&self) -> Result<Vec<Topic>, StoreError> {
        let seen = self.fleet.seen.load(Ordering::Acquire);
        let feed = match self.store.changes_since(seen) {
            Ok(feed) => feed,
            Err(e) => {
                self.fleet.ready.store(false, Ordering::Release);
                return Err(e);
            }
        };
        let replicas = self.store.live_replicas();
        let share_changed = self.fleet.count_replicas(replicas);
        let mut topics: Vec<Topic> = feed.topics.into_iter().collect();
        if share_changed && !topics.contains(&Topic::Tenants) {
            tracing::info!(replicas, "the number of replicas changed; each now enforces its share of the quotas");
            topics.push(Topic::Tenants);
        }
        // Access first: a revoked key stops working before a slow compile of
        // a new version is done.
        topics.sort();
        for topic in &topics {
            if let Err(e) = self.reload(*topic) {
                self.fleet.ready.store(false, Ordering::Release);
                return Err(e);
            }
        }
        self.fleet.caught_up_to(feed.latest.max(seen));
        Ok(topics)
    }

    /// Starts the thread that keeps this replica in step with the others,
    /// when other processes share the store.
    pub fn keep_in_step(self: &Arc<Self>) -> std::io::Result<()> {
        if !self.store.shared() {
            return Ok(());
        }
        // Weak: the thread must not keep a stopped server's host alive.
        let host = Arc::downgrade(self);
        let store = Arc::clone(&self.store);
        let poll = self.fleet.poll;
        std::thread::Builder::new().name("plinth-changes".into()).spawn(move || {
            loop {
                store.wait_for_change(poll);
                let Some(host) = host.upgrade() else { return };
                match host.catch_up() {
                    Ok(topics) if !topics.is_empty() => {
                        tracing::debug!(?topics, "applied changes made by other replicas")
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "could not read the change log; retrying"),
                }
            }
        })?;
        Ok(())
    }

    /// Replaces what this replica caches of `topic` with what the store
    /// holds now.
    pub(super) fn reload(&self, topic: Topic) -> Result<(), StoreError> {
        match topic {
            Topic::Tenants => {
                let stored = self.store.tenants()?;
                let names: HashSet<String> = stored.iter().map(|t| t.name.clone()).collect();
                for record in stored {
                    // An unchanged tenant keeps its token bucket; a changed
                    // one keeps its count of running calls and gets no
                    // fresh burst.
                    self.put_tenant_state(record);
                }
                self.tenants.retain(|name, _| names.contains(name));
            }
            Topic::Keys => {
                let stored = self.store.keys()?;
                let ids: HashSet<String> = stored.iter().map(|k| k.id.clone()).collect();
                for key in stored {
                    self.keys.insert(key.id.clone(), key);
                }
                self.keys.retain(|id, _| ids.contains(id));
            }
            Topic::Secrets => {
                let stored: HashMap<(String, String), String> =
                    self.store.secrets()?.into_iter().map(|(tenant, id, value)| ((tenant, id), value)).collect();
                self.secrets.retain(|key, _| stored.contains_key(key));
                for (key, value) in stored {
                    self.secrets.insert(key, value);
                }
            }
            Topic::Config => {
                let mut stored: HashMap<(String, String), BTreeMap<String, String>> = HashMap::new();
                for (tenant, tool, key, value) in self.store.config()? {
                    stored.entry((tenant, tool)).or_default().insert(key, value);
                }
                self.stored_config.retain(|key, _| stored.contains_key(key));
                for (key, values) in stored {
                    self.stored_config.insert(key, values);
                }
            }
            Topic::Settings => {
                // One read of the settings for the four concerns kept in them.
                let settings = self.store.settings()?;
                self.load_cheq_settings(&settings)?;
                self.load_oauth_settings(&settings)?;
                self.load_trust_policies(&settings)?;
                self.load_console_settings(&settings);
            }
            Topic::Toolsets => self.reload_toolsets()?,
            // Providers again, and cached grants forgotten (read again
            // from the store when next used): another replica changed one.
            Topic::Authorizations => self.authorizations.reload()?,
            Topic::Versions => self.reload_versions()?,
        }
        Ok(())
    }

    /// Registers the versions other replicas deployed (compiling the live
    /// ones) and retires those they retired.
    fn reload_versions(&self) -> Result<(), StoreError> {
        // The same lock as a deploy: a version this replica is committing is
        // either in the registry already or not yet in the store.
        let _changing = self.changes.lock().unwrap_or_else(|p| p.into_inner());
        for stored in self.store.versions()? {
            let known = self.registry.get(&stored.tool_id).and_then(|tool| tool.version(stored.version));
            match known {
                Some(version) => {
                    if let Some(at) = stored.retired_at
                        && version.retired_at().is_none()
                    {
                        version.retire(at);
                        self.registry.changed(&stored.tenant);
                        tracing::info!(
                            tenant = stored.tenant,
                            tool = stored.name,
                            version = stored.version,
                            "version retired by another replica"
                        );
                    }
                }
                None => {
                    let (tenant, name, number) = (stored.tenant.clone(), stored.name.clone(), stored.version);
                    // Compiled here before it is served, as at a deploy:
                    // with its code in this replica's cache, it answers
                    // even while the database is down. Linked at its
                    // first call.
                    if let Err(error) = super::prepare_stored(&self.runtime, &*self.store, &stored.sha256) {
                        // A replica that cannot compile it (out of memory,
                        // say) still serves the rest; its first call here
                        // tries again.
                        tracing::error!(
                            tenant,
                            tool = name,
                            version = number,
                            error,
                            "a version another replica deployed could not be compiled"
                        );
                    }
                    self.load_stored(stored);
                    self.registry.changed(&tenant);
                    tracing::info!(
                        tenant,
                        tool = name,
                        version = number,
                        "version deployed by another replica registered"
                    );
                }
            }
        }
        Ok(())
    }
}
