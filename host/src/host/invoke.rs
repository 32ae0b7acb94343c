//! Invocation: a call resolved to a version, counted against its tenant's
//! rate, confirmed first if its tool wants that, then run in a fresh
//! instance within the tenant's, the tool's and the server's slots.

use super::authorizations::CallTokens;
use super::{Call, ConsoleEntry, InvokeError, Places, Tenant, ToolHost, executors, outcome_code, refusals, usage};
use crate::idempotency::{Claim, Ticket};
use crate::invocation::{self, Described, ToolResult};
use crate::registry::{Tool, ToolVersion};
use crate::runtime::outbound::OutboundPolicy;
use crate::runtime::{self, CallError, CallSetup, Export, LogLabels, Redactor};
use crate::store::{CallKey, StoreError};
use crate::telemetry::CallerTrace;
use crate::tenancy::Quotas;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

impl ToolHost {
    /// The version of a tenant's tool a call means: `version`, or the current
    /// one when it is `None`. Retired versions are refused.
    pub fn resolve(
        &self,
        tenant: &str,
        tool_id: &str,
        version: Option<u32>,
    ) -> Result<(Arc<Tool>, Arc<ToolVersion>), InvokeError> {
        let tool = self.tool(tenant, tool_id).ok_or_else(|| InvokeError::UnknownTool(tool_id.to_string()))?;
        Self::version_of(tool, version)
    }

    /// `tool`'s current version, or version `version` unless retired: what
    /// [`Self::resolve`] does once it has found the tool (a door that found
    /// it by name calls this).
    pub fn version_of(tool: Arc<Tool>, version: Option<u32>) -> Result<(Arc<Tool>, Arc<ToolVersion>), InvokeError> {
        let version = match version {
            None => tool
                .current()
                .ok_or_else(|| InvokeError::Retired(format!("every version of `{}` is retired", tool.name)))?,
            Some(n) => {
                let version = tool.version(n).ok_or(InvokeError::UnknownVersion { tool_id: tool.id, version: n })?;
                if version.retired_at().is_some() {
                    return Err(InvokeError::Retired(format!("version {n} of `{}` is retired", tool.name)));
                }
                version
            }
        };
        Ok((tool, version))
    }

    /// Runs one call of a resolved version and returns its result.
    ///
    /// The call counts against the tenant's rate (unless it carries the
    /// token [`Self::take_rate`] took for it) and concurrency quotas.
    pub async fn invoke(
        self: &Arc<Self>,
        tool: Arc<Tool>,
        version: Arc<ToolVersion>,
        mut call: Call,
    ) -> Result<ToolResult, InvokeError> {
        let seen = Seen::of(&call);
        call.lines = Some(seen.lines.clone());
        call.outbound = Some(seen.outbound.clone());
        let number = version.number;
        let outcome = self.dispatch(tool.clone(), version, call).await;
        self.record_call(&tool, number, seen, &outcome);
        outcome
    }

    /// Takes the tenant's invocation rate for `call` of `version` now,
    /// ahead of [`Self::invoke`], which then takes none: for a door that
    /// writes before the call runs (an OTC `call_id` or a catalog form is
    /// claimed in the store), so that a call over the rate is refused
    /// before anything is written. A refused call is counted (metrics,
    /// usage, the console) as [`Self::invoke`] counts one.
    pub fn take_rate(&self, tool: &Tool, version: &ToolVersion, call: &Call) -> Result<RateTaken, InvokeError> {
        let seen = Seen::of(call);
        let quota = self.tenant(&tool.tenant).ok_or_else(|| InvokeError::UnknownTool(tool.id.to_string()))?;
        match rate(&quota) {
            Ok(()) => Ok(RateTaken { tenant: tool.tenant.clone() }),
            Err(refused) => {
                let outcome: Result<ToolResult, InvokeError> = Err(refused);
                self.record_call(tool, version.number, seen, &outcome);
                // Still the refusal: an `Err` maps to itself.
                outcome.map(|_| RateTaken { tenant: tool.tenant.clone() })
            }
        }
    }

    /// Counts an ended (or refused) call: metrics, the vendor's usage and
    /// console.
    fn record_call(&self, tool: &Tool, number: u32, seen: Seen, outcome: &Result<ToolResult, InvokeError>) {
        let elapsed = seen.started.elapsed();
        let door = seen.door;
        let code = outcome_code(outcome);
        self.metrics.invoked(&tool.tenant, &tool.name, number, door.as_str(), code, elapsed);
        // A call a limit refused is counted for the vendor by its reason.
        let limited = refusals::limit_reason(outcome).map(|reason| [(usage::LIMIT, reason)]);
        self.usage.count(usage::Counted {
            tenant: &tool.tenant,
            tool_id: tool.id.to_string(),
            tool: &tool.name,
            version: number,
            door: door.as_str(),
            outcome: code,
            elapsed,
            outbound: seen.outbound.take(),
            refused: limited.as_ref().map_or(&[], |l| &l[..]),
            toolset: seen.toolset.as_ref().map(|(name, version)| (name.as_str(), *version)),
        });
        let entry = ConsoleEntry {
            seq: 0,
            at_ms: chrono::Utc::now().timestamp_millis(),
            tool: tool.name.clone(),
            tool_id: tool.id.to_string(),
            version: number,
            call_id: seen.call_id,
            door: door.as_str(),
            outcome: code.to_string(),
            duration_ms: elapsed.as_secs_f64() * 1000.0,
            lines: std::mem::take(&mut *seen.lines.lock().unwrap_or_else(|p| p.into_inner())),
            refused: Vec::new(),
        };
        self.console.record(&tool.tenant, entry);
    }

    /// [`Self::invoke`] before it is counted: the tenant's rate, where the
    /// call runs, the call.
    async fn dispatch(
        self: &Arc<Self>,
        tool: Arc<Tool>,
        version: Arc<ToolVersion>,
        call: Call,
    ) -> Result<ToolResult, InvokeError> {
        let tenant = tool.tenant.clone();
        let quota = self.tenant(&tenant).ok_or_else(|| InvokeError::UnknownTool(tool.id.to_string()))?;
        // A confirmed call was counted when it was made; one its door
        // counted before claiming its call id carries the token.
        let counted = call.confirmed.is_some() || call.rate.as_ref().is_some_and(|taken| taken.tenant == tenant);
        if !counted {
            rate(&quota)?;
        }
        let span =
            tracing::info_span!("invoke", tenant, tool = %tool.name, version = version.number, call_id = call.call_id);
        // The executor is gone only while the host is dropped.
        let executors =
            self.executor.as_ref().ok_or_else(|| InvokeError::Internal("the invocation was interrupted".into()))?;
        let checks_confirmation = call.confirmed.is_none() && self.may_need_confirmation(&tool, &version);
        let pool = executors.for_tool(tool.id);
        let this = self.clone();
        let task = async move {
            // The accounts it acts with first: a person asked to confirm a
            // call is told which account it uses, and one who has not
            // granted it yet is asked for that before anything else.
            let tokens = this.call_tokens(&tool, &version, call.end_user.as_deref(), &call.authorizations).await?;
            // Fail closed: a call its tool wants confirmed never runs unconfirmed.
            if checks_confirmation
                && let Some(refused) = this.confirm_first(&quota, &tool, &version, &call, &tokens).await?
            {
                return Ok(ToolResult::Failed(refused));
            }
            this.run(&quota, &tool, &version, call, &tokens).await
        }
        .instrument(span);
        let mut task = Box::pin(task);
        // Where the call runs. Most calls are done in microseconds, and
        // handing them to another thread and back would cost more than
        // running them: a call starts on the thread that received it. At its
        // first pause — an epoch tick past its first 500 µs, or a
        // wait on an outbound request — the rest moves to the tool threads,
        // so no tool holds a thread serving HTTP for longer than a tick and a
        // half millisecond.
        // A demoted tool (`executors`) and a publisher's confirmation
        // condition (bounded by `cheq::budget`, but milliseconds of a core)
        // go to the tool threads from the start.
        if pool.starts_inline() && !checks_confirmation {
            let first = std::future::poll_fn(|cx| std::task::Poll::Ready(task.as_mut().poll(cx))).await;
            if let std::task::Poll::Ready(outcome) = first {
                return outcome;
            }
        }
        executors.run(pool, task).await.map_err(|_| InvokeError::Internal("the invocation was interrupted".into()))?
    }

    /// Evaluates the confirmation policy on the call's input; a call that
    /// needs its end user's confirmation becomes a pending transaction
    /// (`InvokeError::ConfirmationPending`) and does not run. A tool that
    /// exports `describe` says first what the call will do, for the CHEQ —
    /// or refuses it with its `tool-error` (returned), and no one is asked.
    async fn confirm_first(
        &self,
        tenant: &Tenant,
        tool: &Tool,
        version: &ToolVersion,
        call: &Call,
        tokens: &CallTokens,
    ) -> Result<Option<invocation::ToolError>, InvokeError> {
        let inputs = match invocation::to_json(call.input.clone()) {
            serde_json::Value::Object(inputs) => inputs,
            _ => serde_json::Map::new(),
        };
        if !self.needs_confirmation(tool, version, &inputs) {
            return Ok(None);
        }
        let end_user = call.end_user.clone().ok_or_else(|| InvokeError::EndUserRequired(tool.name.clone()))?;
        // Only secrets the tool declares matter: the others are ignored by
        // any call, so they need not wait.
        let supplied: Vec<String> = version
            .manifest
            .secrets
            .iter()
            .filter(|id| call.secrets.contains_key(*id))
            .map(|id| format!("`{id}`"))
            .collect();
        // Tokens supplied with a call (OTC `context.authorization`) are
        // never stored either.
        let supplied_tokens: Vec<String> = version
            .manifest
            .authorization
            .iter()
            .filter(|need| call.authorizations.contains_key(&need.provider))
            .map(|need| format!("`{}`", need.provider))
            .collect();
        if !supplied_tokens.is_empty() {
            return Err(InvokeError::CannotWait(format!(
                "`{}` runs only once its end user confirms the call, and tokens supplied with a call are never stored, so it cannot wait with the token for {}: let its end user grant the account instead (leave it out of context.authorization); the tool did not run",
                tool.name,
                supplied_tokens.join(", ")
            )));
        }
        if !supplied.is_empty() {
            return Err(InvokeError::CannotWait(format!(
                "`{}` runs only once its end user confirms the call, and secrets supplied with a call are never stored, so it cannot wait with {}: store them for the tenant (PUT /admin/secrets/{{id}}) instead; the tool did not run",
                tool.name,
                supplied.join(", ")
            )));
        }
        // Refused by a read, before `describe` runs and anything is stored:
        // a name nobody could confirm as, or a call at its tenant's bound
        // (at least its inputs would be stored).
        self.check_confirmer(&tool.tenant, version, &end_user)?;
        let inputs_bytes = serde_json::to_string(&inputs).map_or(0, |inputs| inputs.len());
        self.check_room(&tool.tenant, &end_user, inputs_bytes)?;
        let description = match self.describe(tenant, tool, version, call, tokens).await? {
            Some(Described::Failed(refused)) => return Ok(Some(refused)),
            Some(Described::Description(description)) => Some(description),
            None => None,
        };
        let pending = self.begin_confirmation(tool, version, &inputs, call, &end_user, description.as_ref())?;
        Err(InvokeError::ConfirmationPending(pending))
    }

    /// Claims a call id for one execution (see [`crate::idempotency`]).
    pub async fn claim_call(&self, key: &CallKey, request_sha256: &str) -> Result<Claim, StoreError> {
        self.calls.claim(&*self.store, key, request_sha256).await
    }

    /// Settles a claimed call: records its response, or (`None`: the tool
    /// never ran) releases the call id.
    pub fn settle_call(&self, ticket: Ticket, response: Option<&str>) -> Result<(), StoreError> {
        match response {
            Some(response) => {
                let bound = self.tenant(ticket.tenant()).map(|t| t.record.quotas.ledger_bound());
                ticket.record(&*self.store, response, bound.unwrap_or_else(|| Quotas::default().ledger_bound()))
            }
            None => ticket.release(&*self.store),
        }
    }

    /// How long call ids are remembered.
    pub fn call_retention(&self) -> Duration {
        self.calls.retention()
    }

    /// Calls whose answers are still to be kept: accepted CHEQ transactions'
    /// and claimed call ids'.
    pub fn answers_to_keep(&self) -> usize {
        self.confirmed_calls_running() + self.calls.in_flight()
    }

    /// Returns once every call whose answer is to be kept (an accepted CHEQ
    /// transaction's, a claimed call id's) has kept it, even if nobody waits
    /// for it any more. A graceful stop awaits it after its last request, so
    /// that a planned stop leaves no call whose outcome is unknown; the
    /// tools' deadlines bound the wait.
    pub async fn answers_kept(&self) {
        self.confirmed_calls_finished().await;
        // Settled tickets leave the ledger; there is nothing to wait on.
        while self.calls.in_flight() > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Whether the host can run tools: its store can record calls (it
    /// answers, and its write lock is free) and the threads that run tools
    /// are up.
    pub fn can_run_tools(&self) -> bool {
        self.executor.is_some() && self.store.ping().is_ok()
    }

    async fn run(
        &self,
        tenant: &Tenant,
        tool: &Tool,
        version: &ToolVersion,
        call: Call,
        tokens: &CallTokens,
    ) -> Result<ToolResult, InvokeError> {
        let run = RunOf {
            export: Export::Call,
            input: call.input,
            call_id: call.call_id,
            secrets: &call.secrets,
            redact: call.redact,
            trace: call.trace.as_ref(),
            lines: call.lines.clone(),
            outbound: call.outbound.clone(),
            tokens,
        };
        let Ran { result, redactor, denials } = self.execute(tenant, tool, version, run).await?;
        let outcome = result.map_err(InvokeError::from).and_then(|value| {
            let mut result = invocation::read_result(&version.signature, value, self.limits.output)?;
            result.redact(&redactor);
            Ok(result)
        });
        // A tool that failed after a refused request failed because of it:
        // say so, rather than pass on its own account of the failure.
        match (outcome, denials.reason()) {
            (Ok(ToolResult::Failed(_)) | Err(InvokeError::Call(CallError::Trapped(_))), Some(why)) => {
                // The refused address is the tool's to choose: it may carry
                // a secret in it.
                Err(InvokeError::OutboundDenied(redactor.text(&why)))
            }
            (outcome, _) => outcome,
        }
    }

    /// The version's linked code, linked now if it is not (mapped from the
    /// compiled cache; compiled first if the cache has none), once however
    /// many calls ask at the same time.
    async fn linked(&self, tool: &Tool, version: &ToolVersion) -> Result<Arc<runtime::LoadedComponent>, InvokeError> {
        let retired = || InvokeError::Retired(format!("version {} of `{}` is retired", version.number, tool.name));
        if let Some(component) = version.component() {
            return Ok(component);
        }
        let _linking = version.linking.lock().await;
        if let Some(component) = version.component() {
            return Ok(component);
        }
        if version.retired_at().is_some() {
            return Err(retired());
        }
        let (runtime, store, sha256) = (self.runtime.clone(), self.store.clone(), version.sha256.clone());
        // Mapping and linking take milliseconds, compiling seconds: off the
        // threads that run calls.
        let linked = tokio::task::spawn_blocking(move || match runtime.load_compiled(&sha256) {
            Ok(Some(component)) => Ok(component),
            Ok(None) => {
                let bytes = store
                    .blob(&sha256)
                    .map_err(|e| runtime::LoadError::Unavailable(format!("its bytes could not be read: {e}")))?;
                runtime.load_uncached(&bytes, &sha256)
            }
            Err(e) => Err(e),
        })
        .await
        .map_err(|e| InvokeError::Internal(format!("linking was interrupted: {e}")))?;
        let component = linked.map_err(|e| {
            // Every compilation slot stayed taken: temporary, like a full
            // set of call slots.
            if matches!(e, runtime::LoadError::Busy) {
                return InvokeError::Busy(format!(
                    "version {} of `{}` is not compiled yet and the server is compiling as many components as it may; retry shortly",
                    version.number, tool.name
                ));
            }
            let e = e.to_string();
            tracing::error!(
                tenant = tool.tenant,
                tool = tool.name,
                version = version.number,
                error = e,
                "a version could not be linked"
            );
            InvokeError::Unavailable(format!("version {} of `{}` could not be loaded", version.number, tool.name))
        })?;
        version.link(component.clone());
        if version.retired_at().is_some() {
            return Err(retired());
        }
        Ok(component)
    }

    /// Runs the tool's `describe` for a call that needs confirmation, under
    /// the same slots and limits as the call itself (the version is linked
    /// first, to know whether it exports one: the same linking its first
    /// call does, bounded by the compile permits); `None` when the tool
    /// exports none.
    async fn describe(
        &self,
        tenant: &Tenant,
        tool: &Tool,
        version: &ToolVersion,
        call: &Call,
        tokens: &CallTokens,
    ) -> Result<Option<Described>, InvokeError> {
        if !self.linked(tool, version).await?.describes() {
            return Ok(None);
        }
        let run = RunOf {
            export: Export::Describe,
            input: call.input.clone(),
            call_id: call.call_id.clone(),
            secrets: &call.secrets,
            redact: call.redact.clone(),
            trace: call.trace.as_ref(),
            lines: call.lines.clone(),
            outbound: call.outbound.clone(),
            tokens,
        };
        let Ran { result, redactor, denials } = self.execute(tenant, tool, version, run).await?;
        let outcome = result.map_err(InvokeError::from).and_then(|value| {
            let mut described = invocation::read_description(value, self.limits.output)?;
            described.redact(&redactor);
            Ok(described)
        });
        // A description made while trying what the tool may not (a request
        // that acts, or to an undeclared host) is not shown to anyone: the
        // call is refused, even if the tool went on as if nothing happened.
        match denials.reason() {
            Some(why) => Err(InvokeError::OutboundDenied(redactor.text(&why))),
            None => outcome.map(Some),
        }
    }

    /// Runs one export of the tool in a fresh instance, within the tenant's,
    /// the tool's and the server's slots and the tool's limits.
    async fn execute(
        &self,
        tenant: &Tenant,
        tool: &Tool,
        version: &ToolVersion,
        run: RunOf<'_>,
    ) -> Result<Ran, InvokeError> {
        // Refuse at once rather than queue: a tool that floods its slots must
        // not make its own callers, or anyone else's, wait without bound.
        let _tool_slot = self.per_tool_slots(tool, version).take().ok_or_else(|| {
            InvokeError::Busy(format!("`{}` is running as many invocations as it may; retry shortly", tool.name))
        })?;
        let config = runtime::effective_config(&version.manifest, Some(&self.config_values(tool)));
        let limits = &version.manifest.limits;
        let quotas = &tenant.record.quotas;
        // The tool's own limits, under its tenant's ceilings (and, in the
        // runtime, under the server's).
        let deadline_ms = limits.deadline_ms.map_or(quotas.max_deadline_ms, |ms| ms.min(quotas.max_deadline_ms));
        let deadline = Duration::from_millis(deadline_ms);
        // A demoted tool's calls take turns (`executors`); waiting for one,
        // no longer than the call's deadline (under the server's), holds
        // only this tool's slot, which bounds the waiters.
        let _turn = match &self.executor {
            Some(executors) => executors.turn(tool.id, deadline.min(self.runtime.config().deadline)).await.map_err(|_| {
                InvokeError::Busy(format!(
                    "`{}` recently ran into its deadline or memory limit, and its calls now take turns; retry later",
                    tool.name
                ))
            })?,
            None => None,
        };
        let _tenant_slot = tenant.start_call().ok_or_else(|| {
            InvokeError::OverQuota(format!(
                "tenant `{}` is running as many invocations as its quota allows; retry shortly",
                tenant.record.name
            ))
        })?;
        let host_slot = self.slots.take().ok_or_else(|| {
            InvokeError::Busy("the server is running as many tool invocations as it may; retry shortly".into())
        })?;

        let memory_mib = limits.memory_mib.map_or(quotas.max_memory_mib, |m| m.min(quotas.max_memory_mib));
        // Every tool's requests are counted, a tool that declares no host
        // included: its attempts (`undeclared`, `denied`) are the ones to see.
        let outbound = OutboundPolicy::new(&version.host_patterns, &config, self.limits.outbound.clone())
            .through(&self.limits.connections)
            .for_tenant(&tool.tenant)
            .with_tokens(run.tokens, &config)
            .traced(run.trace.cloned())
            .counted(Arc::new(self.metrics.outbound(&tool.tenant, &tool.name).tallied(run.outbound)));
        // `describe` runs before anyone has confirmed the call: it may read, not act.
        let outbound = if run.export == Export::Describe { outbound.read_only() } else { outbound };
        let denials = outbound.denials();
        let backend_work = outbound.backend_work();
        let setup = CallSetup {
            deadline,
            max_memory_bytes: usize::try_from(memory_mib).unwrap_or(usize::MAX).saturating_mul(1 << 20),
            outbound,
            config,
            log: LogLabels { tool: tool.name.clone(), version: version.number, call_id: run.call_id, lines: run.lines },
            secrets: version
                .manifest
                .secrets
                .iter()
                .filter_map(|id| {
                    let value = match run.secrets.get(id) {
                        Some(supplied) => supplied.clone(),
                        None => self.secrets.get(&(tool.tenant.clone(), id.clone()))?.clone(),
                    };
                    Some((id.clone(), value))
                })
                .collect(),
            log_budget: self.log_budgets.entry(tool.id).or_default().clone(),
            // A person's token is never the tool's to hold: should one come
            // its way after all (a backend that reflects a header
            // differently than the runtime takes out), it is redacted from
            // everything the call answers and logs.
            redact: run.redact.into_iter().chain(run.tokens.iter().map(|(_, _, token)| token.clone())).collect(),
        };
        let redactor = Redactor::new(setup.secrets.values().chain(&setup.redact).cloned());
        let started = std::time::Instant::now();
        // Retired since it was resolved: its code is gone, and so is the call.
        let component = self.linked(tool, version).await?;
        // The tool's execution, a child of the call's span, when spans are
        // exported (OpenTelemetry's semantic conventions for running a tool).
        let span = if crate::telemetry::exporting() {
            tracing::info_span!(
                "tool",
                otel.name = format!("execute_tool {}", tool.name),
                otel.status_code = tracing::field::Empty,
                gen_ai.operation.name = "execute_tool",
                gen_ai.tool.name = %tool.name,
                gen_ai.tool.call.id = %setup.log.call_id,
                plinth.tenant = %tool.tenant,
                plinth.tool.version = version.number,
                plinth.tool.export = run.export.as_str(),
                error.type = tracing::field::Empty,
            )
        } else {
            tracing::Span::none()
        };
        // Timed on the CPU: where the tool's next calls start depends on it.
        let running =
            std::pin::pin!(self.runtime.run(&component, run.export, run.input, setup).instrument(span.clone()));
        let mut on_cpu = executors::OnCpu::new(running);
        let result = (&mut on_cpu).await;
        if let Err(e) = &result {
            span.record("error.type", e.code());
            span.record("otel.status_code", "ERROR");
        }
        let elapsed = started.elapsed();
        if let Some(executors) = &self.executor {
            // Its requests' work (connecting, TLS, hyper's reading) runs in
            // tasks its CPU clock does not see, and such a tool's calls
            // start where that work goes: it counts too, but not the time
            // the requests waited for the backend.
            let computed = on_cpu.spent() + backend_work.spent();
            executors.ran(tool.id, &tool.name, &result, elapsed, computed);
        }
        self.metrics.ran(&tool.tenant, &tool.name, version.number, elapsed);
        let elapsed_us = elapsed.as_micros() as u64;
        match &result {
            Ok(_) => tracing::debug!(elapsed_us, export = ?run.export, "tool returned"),
            Err(e) => tracing::info!(elapsed_us, export = ?run.export, error = %e, "tool did not return"),
        }
        // Given back after the store, whose drop may wait for the answer to
        // be written (`runtime::after_answer`): whoever takes this place
        // finds a pool slot free.
        runtime::drop_after_answer(host_slot);
        Ok(Ran { result, redactor, denials })
    }

    /// The places bounding this tool's concurrent invocations: the
    /// operator's ceiling, or less if the tool asks for less.
    fn per_tool_slots(&self, tool: &Tool, version: &ToolVersion) -> Places {
        if let Some(places) = self.per_tool.get(&tool.id) {
            return places.clone();
        }
        let ceiling = self.limits.max_concurrency_per_tool;
        let wanted = version.manifest.limits.max_concurrency.map_or(ceiling, |n| n.clamp(1, ceiling));
        self.per_tool.entry(tool.id).or_insert_with(|| Places::new(wanted as usize)).clone()
    }
}

/// One run of a tool's export: what [`ToolHost::execute`] needs of a call.
struct RunOf<'a> {
    export: Export,
    input: wasmtime::component::Val,
    call_id: String,
    secrets: &'a BTreeMap<String, String>,
    redact: Vec<String>,
    trace: Option<&'a CallerTrace>,
    lines: Option<runtime::CallLines>,
    outbound: Option<crate::metrics::OutboundTally>,
    /// The person's tokens the runtime attaches ([`ToolHost::call_tokens`]).
    tokens: &'a CallTokens,
}

/// What a run gave: the raw result, the redactor of the call's secrets and
/// private inputs, and the outbound requests it was refused.
struct Ran {
    result: Result<wasmtime::component::Val, CallError>,
    redactor: Redactor,
    denials: runtime::outbound::Denials,
}

/// A token of its tenant's invocation rate, taken for one call by
/// [`ToolHost::take_rate`] before its door wrote anything for it; the call
/// carries it ([`Call::rate`]) so that [`ToolHost::invoke`] takes no
/// second one. Only the core makes one.
#[derive(Debug)]
pub struct RateTaken {
    tenant: String,
}

/// Takes one of the tenant's invocation tokens, or refuses the call.
fn rate(quota: &Tenant) -> Result<(), InvokeError> {
    quota.rate.check().map_err(|not_until| {
        // The limiter's own clock: building a new one runs CPUID, which
        // traps to the hypervisor in a VM, on every refused call.
        let retry_after = not_until.wait_time_from(governor::clock::Clock::now(quota.rate.clock()));
        InvokeError::RateLimited { tenant: quota.record.name.clone(), retry_after }
    })
}

/// What a call is counted by, once it ends.
struct Seen {
    door: crate::door::FrontDoor,
    toolset: Option<(String, u32)>,
    call_id: String,
    started: std::time::Instant,
    lines: runtime::CallLines,
    outbound: crate::metrics::OutboundTally,
}

impl Seen {
    fn of(call: &Call) -> Seen {
        Seen {
            door: call.front_door,
            toolset: call.toolset.clone(),
            call_id: call.call_id.clone(),
            started: std::time::Instant::now(),
            lines: runtime::CallLines::default(),
            outbound: crate::metrics::OutboundTally::default(),
        }
    }
}
