//! Calls refused before they ran, shown to the tool's publisher: the
//! person who can fix the description an LLM misread.
//!
//! Every door checks a call's inputs here ([`ToolHost::check_input`],
//! [`ToolHost::check_a2t_input`]), and a refusal is recorded once, in the
//! core: a console entry (outcome `refused`; each refused parameter and its
//! code, and its value only where the tenant allows it — never a `private`
//! input's, nor one given under a name the signature does not have, cut at
//! [`MAX_VALUE_CHARS`]) and a usage count per tool version
//! by parameter and code. Calls the tenant's quotas or rate refused are
//! counted by reason beside them ([`limit_reason`], from `invoke.rs`).
//!
//! What a stranger can make the store keep is bounded: a parameter is the
//! signature's or one of the placeholders `(unknown)` and `(none)`
//! (`usage.rs`; a made-up name is never stored), a code one of
//! `invocation::INPUT_ERROR_CODES` or a limit's reason. Nothing is written
//! on the request's path: the counts go to the usage totals the flusher
//! writes, the entry to the console's ring.

use super::console::{REFUSED, Refusal};
use super::usage::{self, NO_PARAMETER, UNKNOWN_PARAMETER};
use super::{ChangeError, ConsoleEntry, InvokeError, ToolHost};
use crate::door::FrontDoor;
use crate::invocation::{self, InputError};
use crate::registry::{Tool, ToolVersion};
use crate::runtime::CallError;
use crate::store::{StoredSetting, StoredToolset};
use crate::tenancy::{AuditEntry, Principal};
use serde::{Deserialize, Serialize};
use serde_json::Value;
#[cfg(test)]
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Instant;
use wasmtime::component::Val;

/// An offending value shown is cut at this many characters.
pub const MAX_VALUE_CHARS: usize = 120;
/// A parameter name the caller made up is cut at this many characters in
/// the console (usage never keeps it).
const MAX_NAME_CHARS: usize = 64;
/// The tenant setting's key in the store.
pub(super) const CONSOLE_SETTING: &str = "console";

/// A tenant's console settings (`GET|PUT /admin/console-settings`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConsoleSettings {
    /// Whether the console shows the values callers gave for refused
    /// parameters (off by default; never a `private` input's, nor one
    /// given under a name the signature does not have).
    #[serde(default)]
    pub show_offending_values: bool,
}

/// `text` cut at `max` characters, marked when cut.
fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// A value as JSON, cut: a long string is cut before it is serialised.
fn shown_value(value: &Value) -> String {
    match value {
        Value::String(s) => cut(&Value::String(cut(s, MAX_VALUE_CHARS)).to_string(), MAX_VALUE_CHARS),
        other => cut(&other.to_string(), MAX_VALUE_CHARS),
    }
}

/// Why a limit refused a call, if one did: `rate_limit` (the tenant's
/// rate), `quota` (the tenant's concurrent invocations, or its bounds on
/// the CHEQ transactions it keeps), `busy` (the tool's or the server's
/// places, a demoted tool's turn).
pub(super) fn limit_reason(outcome: &Result<invocation::ToolResult, InvokeError>) -> Option<&'static str> {
    match outcome {
        Err(InvokeError::RateLimited { .. }) => Some("rate_limit"),
        Err(InvokeError::OverQuota(_) | InvokeError::TooManyPending { .. }) => Some("quota"),
        Err(InvokeError::Busy(_) | InvokeError::Call(CallError::Busy)) => Some("busy"),
        _ => None,
    }
}

impl ToolHost {
    /// Checks a call's named values against `version`'s signature and
    /// builds its `input` record ([`invocation::input_record`]); a refusal
    /// is recorded for the tool's publisher (console and usage) before it
    /// is returned, and for the designer of the toolset whose root the call
    /// came through (`toolset`), if one.
    pub fn check_input(
        &self,
        tool: &Tool,
        version: &ToolVersion,
        door: FrontDoor,
        toolset: Option<&StoredToolset>,
        arguments: &[(&str, &Value)],
    ) -> Result<Val, Vec<InputError>> {
        let started = Instant::now();
        invocation::input_record(&version.signature, arguments)
            .inspect_err(|errors| self.refused_input(tool, version, (door, toolset), errors, arguments, started))
    }

    /// [`Self::check_input`] for an A2T invocation body (`name` and
    /// `input_parameters`): the first error.
    pub fn check_a2t_input(
        &self,
        tool: &Tool,
        version: &ToolVersion,
        toolset: Option<&StoredToolset>,
        body: &Value,
    ) -> Result<Val, InputError> {
        let started = Instant::now();
        let arguments = invocation::a2t_arguments(&version.signature, body).inspect_err(|e| {
            self.refused_input(tool, version, (FrontDoor::A2t, toolset), std::slice::from_ref(e), &[], started)
        })?;
        // `input_record` reports at least one error when it fails.
        self.check_input(tool, version, FrontDoor::A2t, toolset, &arguments).map_err(|mut errors| errors.swap_remove(0))
    }

    /// Records a call refused for its inputs: a console entry and a usage
    /// count. No store write: both are in memory, the counts written by the
    /// usage flusher.
    fn refused_input(
        &self,
        tool: &Tool,
        version: &ToolVersion,
        (door, toolset): (FrontDoor, Option<&StoredToolset>),
        errors: &[InputError],
        arguments: &[(&str, &Value)],
        started: Instant,
    ) {
        let signature = &version.signature;
        let show_values = self.console_settings(&tool.tenant).show_offending_values;
        let mut keys: Vec<(&str, &'static str)> = Vec::with_capacity(errors.len());
        let mut refused = Vec::with_capacity(errors.len());
        for error in errors {
            let input = error.parameter.as_deref().and_then(|name| signature.input(name));
            let key = match (&error.parameter, input) {
                (None, _) => NO_PARAMETER,
                (Some(_), Some(input)) => input.name.as_str(),
                (Some(_), None) => UNKNOWN_PARAMETER,
            };
            if !keys.contains(&(key, error.code)) {
                keys.push((key, error.code));
            }
            // Only under one of the signature's own names, and never a
            // private input's, whoever allows what. A name the signature
            // does not have may be a private one misspelt by an agent that
            // was never shown it (`fromAccount` for `from_account`): its
            // value is not shown either.
            let value = match (&error.parameter, input) {
                (Some(name), Some(input)) if show_values && !input.private => {
                    arguments.iter().find(|(given, _)| given == name).map(|(_, value)| shown_value(value))
                }
                _ => None,
            };
            refused.push(Refusal {
                parameter: error.parameter.as_deref().map(|name| cut(name, MAX_NAME_CHARS)),
                code: error.code,
                value,
            });
        }
        let elapsed = started.elapsed();
        self.usage.count(usage::Counted {
            tenant: &tool.tenant,
            tool_id: tool.id.to_string(),
            tool: &tool.name,
            version: version.number,
            door: door.as_str(),
            outcome: REFUSED,
            elapsed,
            outbound: BTreeMap::new(),
            refused: &keys,
            toolset: toolset.map(|t| (t.name.as_str(), t.version)),
        });
        self.console.record(
            &tool.tenant,
            ConsoleEntry {
                seq: 0,
                at_ms: chrono::Utc::now().timestamp_millis(),
                tool: tool.name.clone(),
                tool_id: tool.id.to_string(),
                version: version.number,
                call_id: uuid::Uuid::new_v4().to_string(),
                door: door.as_str(),
                outcome: REFUSED.to_string(),
                duration_ms: elapsed.as_secs_f64() * 1000.0,
                lines: Vec::new(),
                refused,
            },
        );
    }

    /// A tenant's console settings (the defaults when it set none).
    pub fn console_settings(&self, tenant: &str) -> ConsoleSettings {
        self.console_settings.get(tenant).map(|s| *s).unwrap_or_default()
    }

    /// Sets a tenant's console settings (audited).
    pub fn set_console_settings(
        &self,
        actor: &Principal,
        tenant: &str,
        settings: ConsoleSettings,
    ) -> Result<(), ChangeError> {
        if self.tenant(tenant).is_none() {
            return Err(ChangeError::NotFound(format!("there is no tenant `{tenant}`")));
        }
        let value = serde_json::to_string(&settings).unwrap_or_default();
        let audit = AuditEntry::new(actor, Some(tenant), "console-settings.put", tenant)
            .detail(serde_json::to_value(settings).unwrap_or_default());
        self.store.put_setting(&(tenant.to_string(), CONSOLE_SETTING.into(), value), &audit)?;
        self.console_settings.insert(tenant.to_string(), settings);
        Ok(())
    }

    /// Loads the tenants' console settings, replacing what was loaded
    /// before. One that cannot be read shows no value (the default).
    pub(super) fn load_console_settings(&self, settings: &[StoredSetting]) {
        let mut loaded = std::collections::HashMap::new();
        for (tenant, key, value) in settings {
            if key == CONSOLE_SETTING {
                let read = serde_json::from_str::<ConsoleSettings>(value).unwrap_or_else(|e| {
                    tracing::error!(tenant, error = %e, "a stored console setting cannot be read; values are not shown");
                    ConsoleSettings::default()
                });
                loaded.insert(tenant.clone(), read);
            }
        }
        self.console_settings.retain(|tenant, _| loaded.contains_key(tenant));
        for (tenant, read) in loaded {
            self.console_settings.insert(tenant, read);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_cut_and_marked() {
        assert_eq!(shown_value(&json!(42)), "42");
        assert_eq!(shown_value(&json!("hi")), "\"hi\"");
        let long = shown_value(&json!("x".repeat(10_000)));
        assert_eq!(long.chars().count(), MAX_VALUE_CHARS + 1, "cut, and marked: {long}");
        assert!(long.ends_with('…'));
    }

    #[test]
    fn each_limit_has_its_reason() {
        use std::time::Duration;
        let reason = |e: InvokeError| limit_reason(&Err(e));
        let rate = InvokeError::RateLimited { tenant: "t".into(), retry_after: Duration::from_secs(1) };
        assert_eq!(reason(rate), Some("rate_limit"));
        assert_eq!(reason(InvokeError::OverQuota("t".into())), Some("quota"));
        let pending = InvokeError::TooManyPending {
            limit: crate::tenancy::ConfirmationLimit::Pending,
            max: 1,
            end_user: "ann".into(),
        };
        assert_eq!(reason(pending), Some("quota"));
        assert_eq!(reason(InvokeError::Busy("t".into())), Some("busy"));
        assert_eq!(reason(InvokeError::Call(CallError::Busy)), Some("busy"));
        assert_eq!(reason(InvokeError::Call(CallError::ResourceExhausted)), None);
        assert_eq!(limit_reason(&Ok(invocation::ToolResult::Outputs(Vec::new()))), None);
        // The quota's refusal is answered as every other `busy`.
        assert_eq!(InvokeError::OverQuota("t".into()).code(), "busy");
    }
}
