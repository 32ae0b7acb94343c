//! CHEQ transactions (draft sections 4.1–4.3): a call whose tool wants its
//! end user's confirmation waits here, with the CHEQ object this server
//! signed for it, until the end user accepts or rejects it or it expires.
//! An accepted one runs once, with exactly the confirmed inputs, and its
//! answer is kept for the agent to collect.
//!
//! Transport-free: the HTTP side (URI pack, resource and result URIs, the
//! built-in confirmation page) is `api::cheq`.

mod end_users;
pub(super) mod login;
mod sessions;
mod settings;

pub use end_users::{MAX_END_USER_CHARS, is_end_user_name};
pub use login::{LoginError, LoginOptions};
pub use sessions::PageSession;
pub use settings::ConfirmationServer;

use super::fetcher::{JwksError, JwksFetcher, JwksOptions, Requester};
use super::{Call, InvokeError, ToolHost};
use crate::cheq::{self, Confirmation, ConfirmationPolicy, SigningKey, VerifyError};
use crate::door::FrontDoor;
use crate::invocation::{self, CallDescription, ToolResult};
use crate::metrics::CheqEvent;
use crate::registry::{Tool, ToolVersion};
use crate::signature::Signature;
use crate::store::{RegistryStore, StoreError, StoredConfirmation};
use crate::tenancy::{AuditEntry, ConfirmationLimit, Quotas, unix_now};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

/// How long an unanswered confirmation stays open unless the operator says
/// otherwise (`--confirmation-ttl`).
pub const DEFAULT_CONFIRMATION_TTL: Duration = Duration::from_secs(15 * 60);

/// Which calls of a version need their end user's confirmation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfirmationNeed {
    /// None.
    Never,
    /// Those whose inputs meet the policy's condition.
    Sometimes,
    /// Every call.
    Always,
}

impl ConfirmationNeed {
    /// How the signatures say it (A2T `confirmation`, MCP
    /// `_meta.confirmation`): `required`, `conditional`, or nothing.
    pub fn marker(self) -> Option<&'static str> {
        match self {
            ConfirmationNeed::Never => None,
            ConfirmationNeed::Sometimes => Some("conditional"),
            ConfirmationNeed::Always => Some("required"),
        }
    }
}

/// Proof that a call's end user confirmed it. Only this module makes one,
/// and only from an accepted transaction: no front door can skip the check.
#[derive(Debug)]
pub struct Confirmed(());

/// A confirmed call counted as running, from its acceptance until its
/// answer is kept ([`ToolHost::finish_confirmation`] takes it): a graceful
/// stop waits until none is left ([`ToolHost::answers_kept`]),
/// so that a planned stop never cuts a confirmed call off, leaving its
/// outcome unknown.
#[derive(Debug)]
pub struct RunningConfirmed(Arc<tokio::sync::watch::Sender<usize>>);

impl Drop for RunningConfirmed {
    fn drop(&mut self) {
        self.0.send_modify(|running| *running -= 1);
    }
}

/// A call now waiting for its end user.
#[derive(Debug, Clone)]
pub struct PendingConfirmation {
    /// The transaction id.
    pub id: String,
    /// When it expires (Unix seconds).
    pub expires_at: i64,
    /// The tenant.
    pub tenant: String,
    /// The tenant's external confirmation server's URI, when it has one
    /// and the call has no private inputs (those only this server's page
    /// collects).
    pub confirmation_uri: Option<String>,
}

/// The operator's settings for the confirmation servers: the built-in
/// one's logins, external ones' keys.
#[derive(Debug, Clone, Default)]
pub struct CheqOptions {
    /// End users' logins to the built-in confirmation page.
    pub login: LoginOptions,
    /// Fetching external confirmation servers' keys.
    pub jwks: JwksOptions,
    /// Accept `http://` OAuth client metadata documents (fetched under
    /// the rules of `jwks` otherwise).
    pub client_documents_allow_http: bool,
}

/// The keys of both CHEQ roles this server plays, how long a confirmation
/// stays open, and the tenants' CHEQ settings.
pub(super) struct CheqState {
    /// Signs the CHEQ objects of this (resource) server.
    pub resource: SigningKey,
    /// Countersigns what end users accept on the built-in confirmation page.
    pub confirmation: SigningKey,
    pub ttl: Duration,
    /// External confirmation servers, by tenant.
    pub servers: dashmap::DashMap<String, ConfirmationServer>,
    /// Publishers' overrides of tools' confirmation policies, by tool.
    pub overrides: dashmap::DashMap<Uuid, (ConfirmationPolicy, Arc<Confirmation>)>,
    /// Password hashing slots and the failed-login throttle.
    login: login::LoginGuard,
    /// External confirmation servers' keys, fetched and cached.
    jwks: JwksFetcher,
    /// Confirmed calls running or keeping their answers ([`RunningConfirmed`]).
    running: Arc<tokio::sync::watch::Sender<usize>>,
}

impl CheqState {
    /// `outbound`: the address policy key fetches follow, the one tools'
    /// outbound requests follow (its OAuth counterpart is
    /// [`super::oauth::OAuthState::new`]).
    /// The signing keys are the store's (every replica of a fleet signs
    /// with the same, so one JWKS checks them all).
    pub fn new(
        store: &dyn RegistryStore,
        ttl: Duration,
        options: &CheqOptions,
        outbound: Arc<crate::egress::OutboundLimits>,
    ) -> anyhow::Result<CheqState> {
        let key = |name| {
            store
                .server_key(name)
                .map(|secret| SigningKey::from_bytes(&secret))
                .map_err(|e| anyhow::anyhow!("the CHEQ key {name}: {e}"))
        };
        Ok(CheqState {
            resource: key(cheq::KEY_FILE)?,
            confirmation: key(cheq::CONFIRMATION_KEY_FILE)?,
            ttl,
            servers: Default::default(),
            overrides: Default::default(),
            login: login::LoginGuard::new(&options.login),
            jwks: JwksFetcher::new(options.jwks.clone(), outbound),
            running: Arc::new(tokio::sync::watch::Sender::new(0)),
        })
    }
}

/// Why an accepted call of a retired version did not run.
pub const RETIRED_MESSAGE: &str = "the version this call was made to was retired before the end user's acceptance could run it; the tool did not run and this confirmation has ended. Make the call again to use the current version";

/// Where a transaction stands, as the caller sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Waiting for the end user.
    Pending,
    /// Accepted; the tool is running.
    Running,
    /// The tool ran; its answer is kept.
    Done,
    /// The end user said no.
    Rejected,
    /// Nobody answered in time.
    Expired,
    /// The server went down while the tool ran: it may or may not have taken
    /// effect.
    Interrupted,
    /// Accepted after its pinned version was retired: the tool did not run,
    /// and never will.
    Retired,
}

impl State {
    /// The state of `c` at `now`.
    pub fn of(c: &StoredConfirmation, now: i64) -> State {
        match c.state.as_str() {
            "pending" if now >= c.expires_at => State::Expired,
            "pending" => State::Pending,
            "accepted" => State::Running,
            "done" => State::Done,
            "rejected" => State::Rejected,
            "expired" => State::Expired,
            "retired" => State::Retired,
            _ => State::Interrupted,
        }
    }

    /// Why a transaction in this state gives its caller no answer from the
    /// tool, and never will: (code, message). `None` while one may still
    /// come (pending, running) or has come (done).
    pub fn unanswered(self) -> Option<(&'static str, &'static str)> {
        match self {
            State::Pending | State::Running | State::Done => None,
            State::Rejected => Some(("confirmation_rejected", "the end user rejected the call; the tool did not run")),
            State::Expired => Some((
                "confirmation_expired",
                "the end user did not confirm the call in time; the tool did not run. Make the call again for a new confirmation",
            )),
            State::Retired => Some(("version_retired", RETIRED_MESSAGE)),
            State::Interrupted => Some((
                "call_outcome_unknown",
                "the end user confirmed the call, but the server went down while the tool ran: it may or may not have taken effect; check before calling again",
            )),
        }
    }

    /// In words, for messages.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Running => "accepted",
            State::Done => "accepted and done",
            State::Rejected => "rejected",
            State::Expired => "expired",
            State::Interrupted => "interrupted",
            State::Retired => "retired",
        }
    }
}

/// Why a decision on a transaction was not taken.
#[derive(Debug, thiserror::Error)]
pub enum DecideError {
    /// No such transaction (or not this tenant's).
    #[error("there is no confirmation `{0}`")]
    Unknown(String),
    /// Past its expiry.
    #[error("this confirmation expired; the tool did not run, and the agent must make the call again")]
    Expired,
    /// Accepted or rejected before.
    #[error("this confirmation was already {0}; each is decided once")]
    AlreadyDecided(&'static str),
    /// A signature is malformed, unknown or does not verify.
    #[error(transparent)]
    Signature(#[from] VerifyError),
    /// The signed payload is not the CHEQ issued for the transaction: the
    /// CHEQ of another transaction (its id), or an altered one.
    #[error("{}", match .0 {
        Some(other) => format!("the signed CHEQ is the one issued for transaction `{other}`, not for this one: post it to its own resource URI"),
        None => "the signed CHEQ is not, byte for byte, the one this server issued for this transaction: it was altered".into(),
    })]
    Altered(Option<String>),
    /// The signatures do not show the right end user accepting.
    #[error("{0}")]
    NotConfirmed(String),
    /// The version the call was made to was retired before it was accepted:
    /// the transaction ended without running the tool.
    #[error("{RETIRED_MESSAGE}")]
    Retired,
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The tenant's confirmation server's keys could not be used.
    #[error(transparent)]
    Jwks(#[from] JwksError),
}

impl ToolHost {
    /// The JWKS of this server's CHEQ keys: the resource server's and the
    /// built-in confirmation server's.
    pub fn cheq_jwks(&self) -> Value {
        cheq::jwks(&[&self.cheq.resource, &self.cheq.confirmation])
    }

    /// The key id of this server's resource-server signatures.
    pub fn cheq_resource_kid(&self) -> &str {
        self.cheq.resource.kid()
    }

    /// Opens a transaction for a call that needs its end user's
    /// confirmation: the CHEQ object, signed by this server, is stored with
    /// the inputs the tool will run with — unless it is larger than the
    /// tenant's `maxConfirmationBytes`, or storing it would pass one of the
    /// tenant's bounds on the transactions it keeps (checked by the store,
    /// in the transaction that would store it); then nothing is stored.
    pub(super) fn begin_confirmation(
        &self,
        tool: &Tool,
        version: &ToolVersion,
        inputs: &Map<String, Value>,
        call: &Call,
        end_user: &str,
        description: Option<&CallDescription>,
    ) -> Result<PendingConfirmation, InvokeError> {
        let storage = |e: StoreError| InvokeError::Storage(e.to_string());
        let id = random_id().map_err(|e| InvokeError::Storage(e.to_string()))?;
        let nonce = random_id().map_err(|e| InvokeError::Storage(e.to_string()))?;
        let now = unix_now();
        let expires_at = now + i64::try_from(self.cheq.ttl.as_secs()).unwrap_or(i64::MAX / 2);
        let mut object = json!({
            "version": 1.0,
            "operation": format!("plinth:{}/{}@{}", tool.tenant, tool.name, version.number),
            "operation name": as_words(&tool.name),
            "operation description": version.signature.description,
            "inputs": { "parameters": parameters(&version.signature, inputs) },
            "date": rfc3339(now),
            "expires": rfc3339(expires_at),
            "transaction": id,
            "nonce": nonce,
            "end user": end_user,
            "tool": {
                "id": tool.id,
                "name": tool.name,
                "version": version.number,
                "sha256": version.sha256,
            },
        });
        if let Some(description) = description {
            add_description(&mut object, description);
        }
        let signed = cheq::sign(&object, &self.cheq.resource, Map::new());
        let record = StoredConfirmation {
            id: id.clone(),
            tenant: tool.tenant.clone(),
            tool_id: tool.id,
            version: version.number,
            end_user: end_user.to_string(),
            front_door: call.front_door.as_str().to_string(),
            call_id: call.call_id.clone(),
            inputs: Value::Object(inputs.clone()).to_string(),
            cheq: signed.to_string(),
            state: "pending".into(),
            created_at: now,
            expires_at,
            decided_at: None,
            decision: None,
            result_status: None,
            result_body: None,
        };
        let quotas = self.confirmation_quotas(&tool.tenant);
        let bytes = record.stored_bytes();
        if bytes > quotas.max_confirmation_bytes {
            return Err(InvokeError::ConfirmationTooLarge { bytes, max: quotas.max_confirmation_bytes });
        }
        let stored = self.store.insert_confirmation(&record, quotas.confirmation_bound(), now).map_err(storage)?;
        if let Err(limit) = stored {
            return Err(too_many_pending(&quotas, limit, end_user));
        }
        tracing::info!(transaction = id, end_user, "the call waits for its end user's confirmation");
        // Its expiry, if nobody decides, is counted by the retention sweep.
        self.metrics.cheq(&tool.tenant, &tool.name, CheqEvent::Opened);
        Ok(PendingConfirmation {
            id,
            expires_at,
            tenant: tool.tenant.clone(),
            confirmation_uri: self.confirmation_uri(&tool.tenant, version),
        })
    }

    /// Refuses a call for `end_user` whose transaction, of at least
    /// `bytes`, its tenant's waiting bounds refuse already: before its
    /// `describe` runs and its CHEQ is signed, so that a flood at the bound
    /// costs a read per call. The store checks again, exactly, as it stores
    /// the transaction ([`Self::begin_confirmation`]).
    pub(super) fn check_room(&self, tenant: &str, end_user: &str, bytes: usize) -> Result<(), InvokeError> {
        let quotas = self.confirmation_quotas(tenant);
        let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
        let refused = self
            .store
            .pending_refusal(tenant, end_user, bytes, quotas.confirmation_bound(), unix_now())
            .map_err(|e| InvokeError::Storage(e.to_string()))?;
        match refused {
            Some(limit) => Err(too_many_pending(&quotas, limit, end_user)),
            None => Ok(()),
        }
    }

    /// The quotas a tenant's transactions are held to (a tenant removed
    /// meanwhile: the defaults).
    fn confirmation_quotas(&self, tenant: &str) -> Quotas {
        self.tenant(tenant).map(|t| t.record.quotas.clone()).unwrap_or_default()
    }

    /// A stored transaction that still waits, as when it was made (its
    /// link, for a caller that asks again).
    pub fn pending(&self, c: &StoredConfirmation) -> PendingConfirmation {
        let version = self.tool(&c.tenant, &c.tool_id.to_string()).and_then(|t| t.version(c.version));
        PendingConfirmation {
            id: c.id.clone(),
            expires_at: c.expires_at,
            tenant: c.tenant.clone(),
            confirmation_uri: version.and_then(|v| self.confirmation_uri(&c.tenant, &v)),
        }
    }

    /// Where the end user confirms: the tenant's external confirmation
    /// server, unless the call has private inputs (only this server's page
    /// collects them) or the tenant has none.
    fn confirmation_uri(&self, tenant: &str, version: &ToolVersion) -> Option<String> {
        let has_private = version.signature.inputs.iter().any(|p| p.private);
        self.cheq.servers.get(tenant).filter(|_| !has_private).map(|server| server.uri.clone())
    }

    /// A transaction of `tenant`.
    pub fn confirmation(&self, tenant: &str, id: &str) -> Result<Option<StoredConfirmation>, StoreError> {
        // A made-up tenant is answered from memory, never from the store.
        if self.tenant(tenant).is_none() {
            return Ok(None);
        }
        Ok(self.store.confirmation(id)?.filter(|c| c.tenant == tenant))
    }

    /// Whether a call of `version` with `inputs` needs its end user's
    /// confirmation: always with a private input; else by the tenant's
    /// override of the tool's policy, if it set one, or the tool's own.
    pub(super) fn needs_confirmation(&self, tool: &Tool, version: &ToolVersion, inputs: &Map<String, Value>) -> bool {
        #[cfg(test)]
        evaluated_on::record(tool.id);
        if version.signature.inputs.iter().any(|p| p.private) {
            return true;
        }
        match self.cheq.overrides.get(&tool.id) {
            Some(entry) => entry.1.applies_to(inputs),
            None => version.confirmation.applies_to(inputs),
        }
    }

    /// Whether calls of `version` need their end user's confirmation: every
    /// call, some (a condition on the inputs decides), or none.
    pub fn confirmation_need(&self, tool: &Tool, version: &ToolVersion) -> ConfirmationNeed {
        if version.signature.inputs.iter().any(|p| p.private) {
            return ConfirmationNeed::Always;
        }
        let policy = self.cheq.overrides.get(&tool.id);
        match policy.as_ref().map_or(&version.confirmation, |entry| &*entry.1) {
            Confirmation::Never => ConfirmationNeed::Never,
            Confirmation::Always => ConfirmationNeed::Always,
            Confirmation::When { .. } => ConfirmationNeed::Sometimes,
        }
    }

    /// Whether some call of `version` may need confirmation (so its inputs
    /// must be looked at).
    pub(super) fn may_need_confirmation(&self, tool: &Tool, version: &ToolVersion) -> bool {
        !matches!(version.confirmation, Confirmation::Never) || self.cheq.overrides.contains_key(&tool.id)
    }

    /// A transaction of any tenant (for the operator's evidence).
    pub fn confirmation_any(&self, id: &str) -> Result<Option<StoredConfirmation>, StoreError> {
        self.store.confirmation(id)
    }

    /// The built-in confirmation server's acceptance: `end_user`, logged in
    /// on its page, accepted the transaction. Countersigns the stored CHEQ
    /// and accepts it exactly as a signed CHEQ from outside is accepted.
    pub fn accept_as_end_user(
        &self,
        tenant: &str,
        id: &str,
        end_user: &str,
    ) -> Result<(StoredConfirmation, Confirmed), DecideError> {
        let c = self.confirmation(tenant, id)?.ok_or_else(|| DecideError::Unknown(id.into()))?;
        let mut signed: Value = serde_json::from_str(&c.cheq).map_err(|_| VerifyError::Malformed("stored CHEQ"))?;
        let mut claims = Map::new();
        claims.insert("sub".into(), end_user.into());
        claims.insert("decision".into(), "accept".into());
        claims.insert("iat".into(), unix_now().into());
        cheq::countersign(&mut signed, &self.cheq.confirmation, claims)?;
        self.accept_confirmation(tenant, id, &signed, &[])
    }

    /// Accepts a transaction with `signed`, as posted to its resource URI:
    /// checked against the tenant's external confirmation server's keys
    /// (fetched, or cached for a while) as well as this server's own. The
    /// transaction is looked up first: an unknown, expired or decided one
    /// never sets off a fetch.
    pub async fn accept_signed(
        &self,
        tenant: &str,
        id: &str,
        signed: &Value,
    ) -> Result<(StoredConfirmation, Confirmed), DecideError> {
        // Looked up first: an unknown or settled transaction fetches nothing.
        let c = self.decidable(tenant, id)?;
        let trusted = match self.confirmation_server(tenant) {
            // The tenant's own setting names the server: its fetches hold the
            // tenant's share of the places, whoever posts the accepts.
            Some(server) => {
                let keys = self.cheq.jwks.get_for(&server.jwks_url, Some(Requester::Tenant(tenant))).await?;
                vec![Value::clone(&*keys)]
            }
            None => Vec::new(),
        };
        self.accept_decidable(c, signed, &trusted)
    }

    /// Accepts a transaction with `signed`: the CHEQ this server issued,
    /// with its signature and a confirmation server's (this server's
    /// built-in one, or one whose keys are in `trusted`) naming the
    /// transaction's end user and the decision `accept`. Every signature
    /// must verify, the payload must be byte for byte the issued one, and
    /// the transaction pending and unexpired; it is accepted at most once.
    pub fn accept_confirmation(
        &self,
        tenant: &str,
        id: &str,
        signed: &Value,
        trusted: &[Value],
    ) -> Result<(StoredConfirmation, Confirmed), DecideError> {
        self.accept_decidable(self.decidable(tenant, id)?, signed, trusted)
    }

    /// [`ToolHost::accept_confirmation`] of a transaction already read (and
    /// found pending); the decision itself is still made once, in the store.
    fn accept_decidable(
        &self,
        c: StoredConfirmation,
        signed: &Value,
        trusted: &[Value],
    ) -> Result<(StoredConfirmation, Confirmed), DecideError> {
        let mut sets = vec![self.cheq_jwks()];
        sets.extend_from_slice(trusted);
        let (payload, mut signatures) = cheq::verify(signed, &sets)?;
        if payload != c.issued_payload() {
            let object: Value = serde_json::from_slice(&payload).unwrap_or_default();
            let other = object["transaction"].as_str().filter(|other| *other != c.id);
            return Err(DecideError::Altered(other.map(str::to_string)));
        }
        // The draft leaves the multi-signature syntax open: a confirmation
        // server may send its own signature alone. The payload is the issued
        // one, so this server's signature over it, kept with the
        // transaction, completes the evidence.
        let mut signed = signed.clone();
        if !signatures.iter().any(|s| s.kid == self.cheq.resource.kid()) {
            let mut completed: Value =
                serde_json::from_str(&c.cheq).map_err(|_| VerifyError::Malformed("stored CHEQ"))?;
            let theirs = signed["signatures"].as_array().cloned().unwrap_or_default();
            completed["signatures"].as_array_mut().ok_or(VerifyError::Malformed("stored CHEQ"))?.extend(theirs);
            (_, signatures) = cheq::verify(&completed, &sets)?;
            signed = completed;
        }
        let confirmation = signatures.iter().find(|s| s.kid != self.cheq.resource.kid()).ok_or_else(|| {
            DecideError::NotConfirmed("the CHEQ carries no confirmation server's signature: nobody confirmed it".into())
        })?;
        let sub = confirmation.header.get("sub").and_then(Value::as_str);
        if sub != Some(c.end_user.as_str()) {
            return Err(DecideError::NotConfirmed(format!(
                "the confirmation was signed for {}, not for the end user this call was made for",
                sub.map_or("nobody".to_string(), |s| format!("`{s}`"))
            )));
        }
        if confirmation.header.get("decision").and_then(Value::as_str) != Some("accept") {
            return Err(DecideError::NotConfirmed("the confirmation server's signature does not say `accept`".into()));
        }
        let object: Value = serde_json::from_slice(&payload).unwrap_or_default();
        let has_private =
            object["inputs"]["parameters"].as_array().is_some_and(|ps| ps.iter().any(|p| p["private"] == true));
        if has_private && confirmation.kid != self.cheq.confirmation.kid() {
            return Err(DecideError::NotConfirmed(
                "this call has private inputs, which only this server's confirmation page collects: confirm it there"
                    .into(),
            ));
        }
        // Retired means gone: an acceptance cannot bring a version back. The
        // transaction ends here, its evidence kept, the tool never run.
        if self.pinned_version_retired(&c) {
            let audit = self.decision_audit(&c, "cheq.accept.retired", &confirmation.kid);
            self.decide(&c, "retired", &signed.to_string(), &audit)?;
            self.count_cheq(&c, CheqEvent::Retired);
            tracing::info!(
                transaction = c.id,
                "an acceptance came after the call's version was retired; it ended unrun"
            );
            return Err(DecideError::Retired);
        }
        let audit = self.decision_audit(&c, "cheq.accept", &confirmation.kid);
        self.decide(&c, "accepted", &signed.to_string(), &audit)?;
        tracing::info!(transaction = c.id, "the end user accepted the call");
        self.count_cheq(&c, CheqEvent::Accepted);
        Ok((c, Confirmed(())))
    }

    /// Whether the version a transaction pinned is retired (or gone).
    fn pinned_version_retired(&self, c: &StoredConfirmation) -> bool {
        self.registry
            .get_in(&c.tenant, &c.tool_id)
            .and_then(|tool| tool.version(c.version))
            .is_none_or(|version| version.retired_at().is_some())
    }

    /// Rejects a pending transaction: its tool never runs. `evidence` says
    /// who rejected it (the end user on the built-in page, or the resource
    /// URI's `?reject`).
    pub fn reject_confirmation(&self, tenant: &str, id: &str, evidence: Value) -> Result<(), DecideError> {
        let c = self.decidable(tenant, id)?;
        let actor = evidence["by"].as_str().unwrap_or("resource-uri").to_string();
        let audit = self.decision_audit(&c, "cheq.reject", &actor);
        self.decide(&c, "rejected", &evidence.to_string(), &audit)?;
        tracing::info!(transaction = id, "the call was rejected");
        self.count_cheq(&c, CheqEvent::Rejected);
        Ok(())
    }

    /// Runs an accepted transaction's call: its pinned version, with the
    /// stored inputs and the `private` ones the end user entered. A version
    /// retired since the acceptance does not run: the transaction ends
    /// `retired`, as when it was retired before (`Err(Retired)`).
    pub async fn run_confirmed(
        self: &Arc<Self>,
        c: &StoredConfirmation,
        confirmed: Confirmed,
        private: &Map<String, Value>,
    ) -> Result<(Arc<ToolVersion>, Result<ToolResult, InvokeError>), InvokeError> {
        let (tool, version, input) = self.confirmed_input(c, private)?;
        let outcome = if version.retired_at().is_some() {
            Err(InvokeError::Retired(RETIRED_MESSAGE.into()))
        } else {
            let call = Call {
                input,
                call_id: c.call_id.clone(),
                secrets: Default::default(),
                authorizations: Default::default(),
                end_user: Some(c.end_user.clone()),
                front_door: c.door(),
                // Counted at the tenant's root: the transaction does not
                // keep the toolset its call came through.
                toolset: None,
                confirmed: Some(confirmed),
                rate: None,
                redact: private
                    .values()
                    .filter_map(Value::as_str)
                    .filter(|v| !v.is_empty())
                    .map(str::to_string)
                    .collect(),
                trace: None,
                lines: None,
                outbound: None,
            };
            // `invoke` too refuses a version retired after this check.
            self.invoke(tool, version.clone(), call).await
        };
        if let Err(InvokeError::Retired(_)) = outcome {
            let audit = self.decision_audit(c, "cheq.run.retired", "server");
            self.store.retire_confirmation(&c.id, &audit).map_err(|e| InvokeError::Storage(e.to_string()))?;
            self.count_cheq(c, CheqEvent::Retired);
            tracing::info!(transaction = c.id, "the call's version was retired after the acceptance; it ended unrun");
            return Err(InvokeError::Retired(RETIRED_MESSAGE.into()));
        }
        self.count_cheq(c, CheqEvent::Done);
        Ok((version, outcome))
    }

    /// Counts what happened to a transaction, under its tool's name.
    fn count_cheq(&self, c: &StoredConfirmation, event: CheqEvent) {
        match self.registry.get_in(&c.tenant, &c.tool_id) {
            Some(tool) => self.metrics.cheq(&c.tenant, &tool.name, event),
            None => self.metrics.cheq(&c.tenant, &c.tool_id.to_string(), event),
        }
    }

    /// The input record a confirmed call runs with: the stored inputs and
    /// the `private` ones the end user entered (checked like any input).
    pub fn confirmed_input(
        &self,
        c: &StoredConfirmation,
        private: &Map<String, Value>,
    ) -> Result<(Arc<Tool>, Arc<ToolVersion>, wasmtime::component::Val), InvokeError> {
        let tool = self
            .tool(&c.tenant, &c.tool_id.to_string())
            .ok_or_else(|| InvokeError::UnknownTool(c.tool_id.to_string()))?;
        let version =
            tool.version(c.version).ok_or(InvokeError::UnknownVersion { tool_id: tool.id, version: c.version })?;
        let mut inputs: Map<String, Value> = serde_json::from_str(&c.inputs).unwrap_or_default();
        // Private inputs come from the end user only, never the stored record...
        let is_private = |name: &str| version.signature.input(name).is_some_and(|p| p.private);
        inputs.retain(|name, _| !is_private(name));
        // ...and only private ones: the end user cannot change what they confirm.
        inputs.extend(private.iter().filter(|(name, _)| is_private(name)).map(|(k, v)| (k.clone(), v.clone())));
        let arguments: Vec<(&str, &Value)> = inputs.iter().map(|(k, v)| (k.as_str(), v)).collect();
        let input = invocation::input_record_from(&version.signature, &arguments, invocation::Supplier::EndUser)
            .map_err(|mut errors| InvokeError::Input(errors.swap_remove(0)))?;
        Ok((tool, version, input))
    }

    /// Counts an accepted transaction's call as running until the returned
    /// guard is handed to [`ToolHost::finish_confirmation`] (or dropped):
    /// take it as soon as the transaction is accepted.
    pub fn running_confirmed(&self) -> RunningConfirmed {
        self.cheq.running.send_modify(|running| *running += 1);
        RunningConfirmed(self.cheq.running.clone())
    }

    /// Confirmed calls running or keeping their answers now.
    pub(super) fn confirmed_calls_running(&self) -> usize {
        *self.cheq.running.borrow()
    }

    /// Returns once no confirmed call is running or keeping its answer.
    pub(super) async fn confirmed_calls_finished(&self) {
        let mut running = self.cheq.running.subscribe();
        // The sender lives as long as the host.
        let _ = running.wait_for(|running| *running == 0).await;
    }

    /// Keeps the answer of an accepted transaction's call for the agent; the
    /// call stops counting as running once it is kept.
    pub fn finish_confirmation(
        &self,
        running: RunningConfirmed,
        id: &str,
        status: u16,
        body: &str,
    ) -> Result<(), StoreError> {
        let kept = self.store.finish_confirmation(id, status, body);
        drop(running);
        kept
    }

    /// Marks transactions that were running when the server went down.
    pub(super) fn interrupt_confirmations(&self) -> Result<(), StoreError> {
        let interrupted = self.store.interrupt_confirmations()?;
        self.metrics.cheq_interrupted(interrupted as u64);
        if interrupted > 0 {
            tracing::warn!(
                interrupted,
                "confirmed calls were running when the server went down; their outcome is unknown"
            );
        }
        Ok(())
    }

    fn decidable(&self, tenant: &str, id: &str) -> Result<StoredConfirmation, DecideError> {
        let c = self.confirmation(tenant, id)?.ok_or_else(|| DecideError::Unknown(id.into()))?;
        match State::of(&c, unix_now()) {
            State::Pending => Ok(c),
            State::Expired => Err(DecideError::Expired),
            decided => Err(DecideError::AlreadyDecided(decided.as_str())),
        }
    }

    fn decision_audit(&self, c: &StoredConfirmation, action: &str, actor: &str) -> AuditEntry {
        AuditEntry {
            seq: 0,
            at: unix_now(),
            actor: actor.to_string(),
            tenant: Some(c.tenant.clone()),
            action: action.into(),
            target: c.id.clone(),
            sha256: None,
            detail: json!({ "tool_id": c.tool_id, "version": c.version, "end_user": c.end_user }),
        }
    }

    /// Takes the decision, once: of two racing decisions one wins, the
    /// other is told what happened.
    fn decide(
        &self,
        c: &StoredConfirmation,
        state: &str,
        evidence: &str,
        audit: &AuditEntry,
    ) -> Result<(), DecideError> {
        if self.store.decide_confirmation(&c.id, state, Some(evidence), audit)? {
            return Ok(());
        }
        let now = self.store.confirmation(&c.id)?.ok_or_else(|| DecideError::Unknown(c.id.clone()))?;
        match State::of(&now, unix_now()) {
            State::Expired | State::Pending => Err(DecideError::Expired),
            decided => Err(DecideError::AlreadyDecided(decided.as_str())),
        }
    }
}

/// The refusal of a call at its tenant's bound `limit`.
fn too_many_pending(quotas: &Quotas, limit: ConfirmationLimit, end_user: &str) -> InvokeError {
    tracing::debug!(limit = limit.quota(), "a call's confirmation was refused at its tenant's bound");
    InvokeError::TooManyPending { limit, max: quotas.confirmation_limit(limit), end_user: end_user.to_string() }
}

/// The parameters of the CHEQ object (figure 4): each input's name,
/// description and value; a `private` input says so and has no value yet
/// (the end user enters it on the confirmation page). A value with
/// characters a screen would not show as they are (`cheq::shown`:
/// bidirectional overrides, zero-width and other format characters,
/// combining marks struck through digits or Latin text) also
/// gets a `parameter display value`, with each such character as a visible
/// `<U+XXXX>` marker, for confirmation servers to show; the `parameter
/// value`, what the tool gets, is unchanged.
fn parameters(signature: &Signature, inputs: &Map<String, Value>) -> Vec<Value> {
    signature
        .inputs
        .iter()
        .map(|p| {
            let mut parameter = json!({
                "parameter name": p.name,
                "parameter description": p.description,
            });
            if p.private {
                parameter["private"] = true.into();
            } else {
                let value = exact_in_cheq(inputs.get(&p.name).cloned().unwrap_or(Value::Null));
                if let Some(display) = display_value(&value) {
                    parameter["parameter display value"] = display.into();
                }
                parameter["parameter value"] = value;
            }
            parameter
        })
        .collect()
}

/// The tool's own words on the call (its `describe` export): the draft's
/// "explanatory information meant for human consumption" as `explanation`,
/// and its "facts (e.g., the price)" as `facts`, apart from the inputs, as
/// they are not values the tool runs with. Characters a screen would not
/// show as they are are signed as visible `<U+XXXX>` markers: these words
/// are only ever read, so the human reads what was signed.
fn add_description(object: &mut Value, description: &CallDescription) {
    let shown = |text: &str| cheq::marked(text).unwrap_or_else(|| text.to_string());
    if !description.summary.is_empty() {
        object["explanation"] = shown(&description.summary).into();
    }
    if !description.facts.is_empty() {
        object["facts"] = description
            .facts
            .iter()
            .map(|(name, value)| json!({ "fact name": shown(name), "fact value": shown(value) }))
            .collect();
    }
}

/// Integers JCS cannot write exactly (it writes numbers as IEEE doubles,
/// exact only within ±2^53) as their decimal string: the signed CHEQ, and
/// the page, show the very value the tool gets, never a rounded one.
fn exact_in_cheq(value: Value) -> Value {
    const EXACT: u64 = 1 << 53;
    match value {
        Value::Number(n)
            if n.as_u64().is_some_and(|u| u > EXACT) || n.as_i64().is_some_and(|i| i.unsigned_abs() > EXACT) =>
        {
            Value::String(n.to_string())
        }
        other => other,
    }
}

/// A value as an end user must see it, when that differs from its text:
/// a string, or any other value as JSON, with its hidden characters marked.
fn display_value(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => cheq::marked(text),
        other => cheq::marked(&other.to_string()),
    }
}

impl StoredConfirmation {
    /// The front door the call came through.
    pub fn door(&self) -> FrontDoor {
        FrontDoor::parse(&self.front_door).unwrap_or(FrontDoor::A2t)
    }

    /// The bytes this server signed: the canonical CHEQ object.
    pub fn issued_payload(&self) -> Vec<u8> {
        let signed: Value = serde_json::from_str(&self.cheq).unwrap_or_default();
        signed["payload"].as_str().and_then(|p| B64.decode(p).ok()).unwrap_or_default()
    }

    /// The CHEQ object this server signed.
    pub fn cheq_object(&self) -> Value {
        serde_json::from_slice(&self.issued_payload()).unwrap_or_default()
    }
}

/// What MCP clients and the catalog are told of `version`, whose calls
/// `need` confirmation as said: its publisher's `[annotations]` with what
/// Plinth knows in their place ([`crate::manifest::ToolAnnotations::published`]).
pub fn published_annotations(version: &ToolVersion, need: ConfirmationNeed) -> crate::manifest::ToolAnnotations {
    let manifest = &version.manifest;
    manifest.annotations.published(need != ConfirmationNeed::Never, manifest.allowed_hosts.is_empty())
}

/// A name as words for people: `book_flight` → `Book flight`.
pub fn as_words(name: &str) -> String {
    let words = name.replace('_', " ");
    let mut chars = words.chars();
    chars.next().map(|c| c.to_uppercase().chain(chars).collect()).unwrap_or_default()
}

/// Unix seconds as RFC 3339 (UTC).
pub fn rfc3339(unix: i64) -> String {
    chrono::DateTime::from_timestamp(unix, 0)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_default()
}

/// 128 random bits, base64url: unguessable, so a transaction's URIs are its
/// capability.
fn random_id() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)?;
    Ok(B64.encode(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operation_names_read_as_words() {
        assert_eq!(as_words("book_flight"), "Book flight");
        assert_eq!(as_words(""), "");
    }

    #[test]
    fn integers_past_2_pow_53_are_signed_exactly() {
        use crate::signature::{InputParam, InputType, IntKind};
        let amount = InputParam {
            id: "amount".into(),
            name: "amount".into(),
            field: "amount".into(),
            description: "The amount.".into(),
            required: true,
            ty: InputType::Int { wit: IntKind::U64, min: 0, max: u64::MAX.into() },
            private: false,
        };
        let signature = Signature {
            name: "pay".into(),
            description: "Pays.".into(),
            img: None,
            tags: Vec::new(),
            inputs: vec![amount],
            outputs: Vec::new(),
        };
        let exact = (1u64 << 53) + 1;
        for (value, shown) in [(exact, "9007199254740993"), (u64::MAX, "18446744073709551615"), (1 << 53, "")] {
            let inputs = serde_json::json!({ "amount": value }).as_object().unwrap().clone();
            let cheq = Value::Array(parameters(&signature, &inputs));
            let canonical = String::from_utf8(cheq::canonical(&cheq)).unwrap();
            if shown.is_empty() {
                // Within the exact range: a number, as before.
                assert!(canonical.contains("\"parameter value\":9007199254740992"), "{canonical}");
            } else {
                assert!(canonical.contains(&format!("\"parameter value\":\"{shown}\"")), "{canonical}");
            }
        }
    }

    #[test]
    fn an_unanswered_transaction_expires() {
        let c = StoredConfirmation::pending_for_test("x", 100);
        assert_eq!(State::of(&c, 99), State::Pending);
        assert_eq!(State::of(&c, 100), State::Expired);
    }
}

/// Which threads evaluated which tool's confirmation policy: the evidence for
/// the test that conditions are never evaluated on the caller's (HTTP)
/// threads.
#[cfg(test)]
pub(super) mod evaluated_on {
    use std::sync::Mutex;
    use uuid::Uuid;

    static THREADS: Mutex<Vec<(Uuid, Option<String>)>> = Mutex::new(Vec::new());

    /// Notes that the current thread evaluates `tool`'s policy.
    pub fn record(tool: Uuid) {
        let thread = std::thread::current().name().map(str::to_string);
        THREADS.lock().unwrap_or_else(|p| p.into_inner()).push((tool, thread));
    }

    /// The names of the threads that evaluated `tool`'s policy.
    pub fn threads(tool: Uuid) -> Vec<Option<String>> {
        let threads = THREADS.lock().unwrap_or_else(|p| p.into_inner());
        threads.iter().filter(|(t, _)| *t == tool).map(|(_, name)| name.clone()).collect()
    }
}
