//! Open Tool Calling (OTC 1.0): the same tools, served to OTC clients.
//!
//! - `GET /otc/health` — `200`, or `503` when the host cannot run tools
//! - `GET /otc/tools` — every live version of every tool, as `ToolDefinition`s
//! - `POST /otc/tools/call` (the OpenAPI document) and `POST /otc/call` (the
//!   RFC's examples) — one call, wrapped in `{"request": …}` or bare
//!
//! A translation only: inputs are checked by [`crate::host::ToolHost::check_input`],
//! calls run through [`ToolHost::invoke`](crate::host::ToolHost::invoke),
//! retries are answered by the core's [idempotency ledger](crate::idempotency).
//! Where the RFC text and `otc-openapi-1.0.json` disagree, and what Plinth
//! sends and accepts, is written down in `docs/otc.md`.

use super::{ApiError, ApiOptions, AppState, Caller, schemas};
use crate::door::FrontDoor;
use crate::host::{Call, InvokeError, ToolHost};
use crate::idempotency::Claim;
use crate::invocation::{InputError, OutputError, ToolError, ToolResult};
use crate::registry::{Tool, ToolVersion};
use crate::runtime::CallError;
use crate::signature::{Signature, Wording, schema};
use crate::store::{CallKey, StoredToolset};
use crate::telemetry::CallerTrace;
use crate::tool_ids::{otc_tool_id, pascal_case, toolkit};
use axum::Extension;
use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use tracing::Instrument;

/// The `$schema` of every answer: the OTC 1.0 OpenAPI document.
pub const SCHEMA_URI: &str =
    "https://github.com/ArcadeAI/OpenToolCalling/tree/main/specification/http/1.0/openapi.json";

/// Longest `call_id` accepted (it is stored for the retention window).
const MAX_CALL_ID_CHARS: usize = 256;
/// Shortest and longest value of a secret supplied in `context.secrets`.
const MIN_SECRET_CHARS: usize = 8;
const MAX_SECRET_CHARS: usize = 4096;
/// Longest OTC `name` (the `ToolDefinition` pattern allows 64).
const MAX_NAME_CHARS: usize = 64;

/// The snake case name [`pascal_case`] made `name` from.
fn snake_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 8);
    for c in name.chars() {
        if c.is_ascii_uppercase() {
            if !out.is_empty() {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// `Toolkit_Name`, shortened past 64 characters with a hash that keeps it
/// unique.
fn otc_name(toolkit: &str, tool_name: &str) -> String {
    let name = format!("{toolkit}_{tool_name}");
    if name.len() <= MAX_NAME_CHARS {
        return name;
    }
    let hash = crate::digest::sha256_hex(name.as_bytes());
    format!("{}_{}", &name[..MAX_NAME_CHARS - 9], &hash[..8])
}

/// A ToolId: `Toolkit.Name`, `Toolkit.Name@N` or `Toolkit.Name@N.M.P`.
#[derive(Debug, PartialEq, Eq)]
struct ToolRef<'a> {
    toolkit: &'a str,
    name: &'a str,
    version: VersionRef,
}

#[derive(Debug, PartialEq, Eq)]
enum VersionRef {
    Current,
    Exact(u32),
    /// A semantic version Plinth never publishes (`1.2.0`): versions are `N.0.0`.
    Unpublished(String),
}

fn word(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// Parses a ToolId by the pattern of the OTC `ToolId` schema.
fn parse_tool_id(id: &str) -> Option<ToolRef<'_>> {
    let (name_part, version) = match id.split_once('@') {
        Some((name, version)) => (name, Some(version)),
        None => (id, None),
    };
    let (toolkit, name) = name_part.split_once('.')?;
    if !word(toolkit) || !word(name) {
        return None;
    }
    let number = |s: &str| s.parse::<u32>().ok().filter(|n| *n >= 1);
    let version = match version {
        None => VersionRef::Current,
        Some(v) if digits(v) => number(v).map_or(VersionRef::Unpublished(v.to_string()), VersionRef::Exact),
        Some(v) => {
            let parts: Vec<&str> = v.split('.').collect();
            if parts.len() != 3 || !parts.iter().all(|p| digits(p)) {
                return None;
            }
            match (number(parts[0]), parts[1].parse::<u64>(), parts[2].parse::<u64>()) {
                (Some(n), Ok(0), Ok(0)) => VersionRef::Exact(n),
                _ => VersionRef::Unpublished(v.to_string()),
            }
        }
    };
    Some(ToolRef { toolkit, name, version })
}

/// The version a ToolId names in the caller's tenant, through its toolset
/// when it came through one (a tool outside it is `unknown_tool`, as one
/// that does not exist; another version of one of its tools `403
/// outside_toolset`).
fn resolve(
    host: &AppState,
    tenant: &str,
    toolset: Option<&StoredToolset>,
    tool_id: &str,
) -> Result<(Arc<Tool>, Arc<ToolVersion>), ApiError> {
    let tool_ref = parse_tool_id(tool_id).ok_or_else(|| {
        ApiError::bad_request(
            "invalid_tool_id",
            format!("`{tool_id}` is not a ToolId; write Toolkit.Name, Toolkit.Name@N or Toolkit.Name@N.0.0"),
        )
    })?;
    let unknown = || {
        ApiError::bad_request("unknown_tool", format!("there is no tool `{tool_id}`; GET /otc/tools lists every id"))
    };
    let snake = snake_case(tool_ref.name);
    // Through a toolset, a tool outside it is no tool.
    let tool = host.tool_named_in(tenant, toolset, &snake).filter(|t| pascal_case(&t.name) == tool_ref.name);
    let tool = tool.ok_or_else(unknown)?;
    let version = match tool_ref.version {
        VersionRef::Current => None,
        VersionRef::Exact(n) => Some(n),
        VersionRef::Unpublished(v) => {
            return Err(ApiError::bad_request(
                "unknown_version",
                format!("`{}` has no version {v}; Plinth versions are N.0.0", tool_ref.name),
            ));
        }
    };
    let (tool, version) = ToolHost::resolve_in(toolset, tool, version).map_err(|e| match e {
        InvokeError::Retired(message) => ApiError::bad_request("version_retired", message),
        e @ InvokeError::OutsideToolset(_) => ApiError::from(e),
        InvokeError::UnknownVersion { version, .. } => {
            ApiError::bad_request("unknown_version", format!("`{}` has no version {version}.0.0", tool_ref.name))
        }
        _ => unknown(),
    })?;
    if toolkit(&tool, &version) != tool_ref.toolkit {
        return Err(unknown());
    }
    Ok((tool, version))
}

/// The `ToolDefinition` of a version (built once), with its `requirements`:
/// the accounts it acts with (locked), the secrets the caller must supply,
/// and `user_id` when a call may need its end user's confirmation (it names
/// who confirms) or acts with its account. Under a toolset's root, with
/// the designer's words (`wording`), it is built again with them.
fn definition(host: &AppState, tool: &Tool, version: &ToolVersion, wording: Option<&Wording>) -> Value {
    let mut definition = match wording {
        None => version.otc_view.get_or_init(|| build_definition(tool, version, &version.signature)).clone(),
        Some(wording) => build_definition(tool, version, &wording.apply(&version.signature)),
    };
    let missing = host.missing_secrets(tool, version, &BTreeMap::new());
    if !missing.is_empty() {
        let secrets: Vec<Value> = missing.iter().map(|id| json!({ "id": id })).collect();
        definition["requirements"]["secrets"] = secrets.into();
    }
    if host.confirmation_need(tool, version).marker().is_some() {
        definition["requirements"]["user_id"] = true.into();
    }
    definition
}

/// A version's `ToolDefinition` from `signature` (the version's, or it
/// with a toolset's words).
fn build_definition(tool: &Tool, version: &ToolVersion, signature: &Signature) -> Value {
    let toolkit = toolkit(tool, version);
    let name = pascal_case(&signature.name);
    let mut definition = json!({
        "id": otc_tool_id(tool, version),
        "name": otc_name(&toolkit, &name),
        "description": signature.description,
        "version": format!("{}.0.0", version.number),
        "input_schema": { "parameters": schema::input_schema(signature) },
        "output_schema": schema::output_schema(signature).unwrap_or(Value::Null),
    });
    // The accounts it acts with (OTC §4.1 `requirements.authorization`):
    // locked with the version, as its manifest declares them.
    let authorization: Vec<Value> = version
        .manifest
        .authorization
        .iter()
        .map(|need| json!({ "id": need.provider, "oauth2": { "scopes": need.scopes } }))
        .collect();
    if !authorization.is_empty() {
        definition["requirements"]["authorization"] = authorization.into();
    }
    definition
}

/// `GET /otc/health`: the same answer under every platform root, so that
/// it tells no one which tenants exist.
#[utoipa::path(get, summary = "OTC health", description = "The same answer under every platform root, existing tenant or not, so that it tells no one which tenants exist.", path = "/otc/health", tag = "OTC", operation_id = "otc_health", responses(
    (status = 200, description = "The server can take calls", body = schemas::OtcHealth),
    (status = 503, description = "The server cannot take calls now (its store cannot record them)", body = ref("#/components/schemas/OtcServerErrorResponse")),
))]
pub(super) async fn health(State(host): State<AppState>) -> Response {
    if host.can_run_tools() {
        axum::Json(json!({ "$schema": SCHEMA_URI, "status": "ok" })).into_response()
    } else {
        let body = json!({ "$schema": SCHEMA_URI, "message": "the server cannot run tools right now" });
        (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response()
    }
}

/// `GET /otc/tools`: every live version, tools in name order, newest
/// version first.
#[utoipa::path(get, summary = "The tenant's tools as OTC ToolDefinitions", description = "Every live version of every tool, tools in name order, newest version first.", path = "/otc/tools", tag = "OTC", operation_id = "otc_list_tools", responses(
    (status = 200, description = "The tenant's tools as OTC `ToolDefinition`s", body = ref("#/components/schemas/OtcToolList")),
))]
pub(super) async fn list_tools(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> axum::Json<Value> {
    let (tools, _) = host.registry().page(&caller.tenant, None, usize::MAX, |_| true);
    let mut definitions = Vec::new();
    for tool in &tools {
        if let Some(toolset) = caller.toolset.as_deref() {
            // Through a toolset: its tools, each at the version it gives.
            if let Some(version) = ToolHost::version_in(Some(toolset), tool) {
                definitions.push(definition(&host, tool, &version, ToolHost::wording_in(Some(toolset), &tool.name)));
            }
            continue;
        }
        for version in tool.versions_before(None, usize::MAX) {
            if version.retired_at().is_none() {
                definitions.push(definition(&host, tool, &version, None));
            }
        }
    }
    axum::Json(json!({ "$schema": SCHEMA_URI, "tools": definitions }))
}

/// A `CallToolRequest`, read from either form of the body.
struct CallRequest {
    /// The caller's call id, when it sent one (then it is an idempotency key).
    call_id: Option<String>,
    tool_id: String,
    input: Map<String, Value>,
    secrets: BTreeMap<String, String>,
    /// `context.authorization`: tokens for this call only, by provider id.
    authorizations: BTreeMap<String, String>,
    trace_id: Option<String>,
    /// `context.user_id`: the end user the call acts for.
    end_user: Option<String>,
    /// The caller's trace context, from its `traceparent` header.
    trace: Option<CallerTrace>,
}

fn malformed(message: impl Into<String>) -> ApiError {
    ApiError::bad_request("invalid_request", message)
}

fn optional_string(request: &Map<String, Value>, key: &str) -> Result<Option<String>, ApiError> {
    match request.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(malformed(format!("`{key}` must be a string"))),
    }
}

impl CallRequest {
    fn parse(body: &[u8]) -> Result<CallRequest, ApiError> {
        let body: Value = serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request("invalid_json", format!("the body is not valid JSON: {e}")))?;
        let Value::Object(mut body) = body else {
            return Err(malformed("the body must be a JSON object: {\"request\": {\"tool_id\": …, \"input\": {…}}}"));
        };
        if body.get("$schema").is_some_and(|s| !s.is_string()) {
            return Err(malformed("`$schema` must be a URI string"));
        }
        // Wrapped as the OpenAPI document says, or bare as the RFC's text
        // lists the fields.
        let request = match body.remove("request") {
            Some(Value::Object(request)) => request,
            Some(_) => return Err(malformed("`request` must be a CallToolRequest object")),
            None => {
                body.remove("$schema");
                body
            }
        };
        const FIELDS: [&str; 6] = ["call_id", "trace_id", "tool_id", "input", "inputs", "context"];
        if let Some(unknown) = request.keys().find(|k| !FIELDS.contains(&k.as_str())) {
            return Err(malformed(format!(
                "unknown field `{unknown}`: a CallToolRequest has call_id, trace_id, tool_id, input and context"
            )));
        }
        let call_id = optional_string(&request, "call_id")?;
        if let Some(id) = &call_id
            && (id.is_empty() || id.chars().count() > MAX_CALL_ID_CHARS)
        {
            return Err(malformed(format!("`call_id` must be 1 to {MAX_CALL_ID_CHARS} characters")));
        }
        let tool_id = optional_string(&request, "tool_id")?.ok_or_else(|| {
            malformed("`tool_id` is required: the id of the tool to call, as GET /otc/tools lists it")
        })?;
        let input = match (request.get("input"), request.get("inputs")) {
            (Some(_), Some(_)) => return Err(malformed("give `input` or `inputs`, not both")),
            (Some(input), None) | (None, Some(input)) => input,
            (None, None) => &Value::Null,
        };
        let input = match input {
            Value::Null => Map::new(),
            Value::Object(input) => input.clone(),
            _ => return Err(malformed("`input` must be an object of parameter names to values")),
        };
        let (secrets, authorizations, end_user) = match request.get("context") {
            None | Some(Value::Null) => (BTreeMap::new(), BTreeMap::new(), None),
            Some(Value::Object(context)) => {
                let end_user = optional_string(context, "user_id")?;
                if let Some(user) = &end_user {
                    super::links::check_end_user(user)?;
                }
                (context_secrets(context)?, context_authorizations(context)?, end_user)
            }
            Some(_) => return Err(malformed("`context` must be an object")),
        };
        let trace_id = optional_string(&request, "trace_id")?;
        Ok(CallRequest { call_id, tool_id, input, secrets, authorizations, trace_id, end_user, trace: None })
    }

    /// What a retry must repeat to be the same call: the tool and the input
    /// (not the secrets, which are never stored, not even hashed). Inputs
    /// are checked scalars by now, hashed in name order as written: exact
    /// for integers past 2^53, which a float-based canonical form is not.
    fn sha256(&self) -> String {
        let input: BTreeMap<&String, &Value> = self.input.iter().collect();
        let mut request = json!({ "tool_id": self.tool_id, "input": input });
        if let Some(user) = &self.end_user {
            request["user_id"] = user.clone().into();
        }
        crate::digest::sha256_hex(request.to_string().as_bytes())
    }
}

fn context_secrets(context: &Map<String, Value>) -> Result<BTreeMap<String, String>, ApiError> {
    let mut secrets = BTreeMap::new();
    let items = match context.get("secrets") {
        None | Some(Value::Null) => return Ok(secrets),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(malformed("`context.secrets` must be an array of {\"id\", \"value\"} objects")),
    };
    for item in items {
        let (Some(Value::String(id)), Some(Value::String(value))) = (item.get("id"), item.get("value")) else {
            return Err(malformed("each of `context.secrets` must be an object with string `id` and `value`"));
        };
        // Every copy of a secret is redacted from what the tool answers: a
        // value of a letter or two would swell the answer tenfold.
        let length = value.chars().count();
        if !(MIN_SECRET_CHARS..=MAX_SECRET_CHARS).contains(&length) {
            return Err(malformed(format!(
                "secret `{id}` must be {MIN_SECRET_CHARS} to {MAX_SECRET_CHARS} characters long"
            )));
        }
        if secrets.insert(id.clone(), value.clone()).is_some() {
            return Err(malformed(format!("secret `{id}` is given more than once")));
        }
    }
    Ok(secrets)
}

/// The longest token a caller may supply in `context.authorization`.
const MAX_SUPPLIED_TOKEN_BYTES: usize = 16 * 1024;

/// `context.authorization` (OTC §4.2): `[{"id": provider, "token"}]`, a
/// token for this call only (never stored), used instead of the end user's
/// grant at that provider.
fn context_authorizations(context: &Map<String, Value>) -> Result<BTreeMap<String, String>, ApiError> {
    let mut tokens = BTreeMap::new();
    let items = match context.get("authorization") {
        None | Some(Value::Null) => return Ok(tokens),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(malformed("`context.authorization` must be an array of {\"id\", \"token\"} objects")),
    };
    for item in items {
        let (Some(Value::String(id)), Some(Value::String(token))) = (item.get("id"), item.get("token")) else {
            return Err(malformed("each of `context.authorization` must be an object with string `id` and `token`"));
        };
        // Attached as a Bearer header: printable ASCII only.
        if token.is_empty()
            || token.len() > MAX_SUPPLIED_TOKEN_BYTES
            || !token.bytes().all(|b| (0x21..0x7f).contains(&b))
        {
            return Err(malformed(format!(
                "the token for `{id}` must be 1 to {MAX_SUPPLIED_TOKEN_BYTES} printable ASCII characters without spaces"
            )));
        }
        if tokens.insert(id.clone(), token.clone()).is_some() {
            return Err(malformed(format!("a token for `{id}` is given more than once")));
        }
    }
    Ok(tokens)
}

/// `422` with a `ValidationErrorResponse` naming every bad parameter.
fn validation_error(errors: Vec<InputError>) -> Response {
    let mut parameter_errors = Map::new();
    for error in &errors {
        if let Some(parameter) = &error.parameter {
            parameter_errors.insert(parameter.clone(), error.message.clone().into());
        }
    }
    let message = match errors.len() {
        1 => errors[0].message.clone(),
        n => format!("{n} parameters are invalid; see parameter_errors"),
    };
    let body = json!({ "$schema": SCHEMA_URI, "message": message, "parameter_errors": parameter_errors });
    (StatusCode::UNPROCESSABLE_ENTITY, axum::Json(body)).into_response()
}

/// `POST /otc/tools/call` and `POST /otc/call`: one call.
///
/// The request wrapped in `{"request": …}` as the OTC document has it, or
/// bare as the RFC's examples write it (docs/otc.md).
#[utoipa::path(post, summary = "Calls a tool (OTC)", description = "The request wrapped in `{\"request\": …}` as the OTC document has it, or bare as the RFC's examples write it (docs/otc.md). `POST /otc/call` is the same call at the RFC's examples' path.", path = "/otc/tools/call", tag = "OTC", operation_id = "otc_call_tool",
    request_body = ref("#/components/schemas/OtcCallToolRequestBody"),
    responses(
        (status = 200, description = "The call's result (a tool's failure too: `success` false); a call that waits for its end user's confirmation adds the CHEQ URI pack", body = ref("#/components/schemas/OtcCallToolResult"),
            headers(("Location" = Option<String>, description = "The result URI, when the call waits for confirmation"),
                ("idempotent-replayed" = Option<String>, description = "`true` when the answer is the recorded one of an earlier call with this `call_id`"))),
        (status = 400, description = "`invalid_json`, `invalid_request`, `invalid_tool_id`, `unknown_tool`, `unknown_version`, `version_retired`, `call_id_reused`, `missing_requirements`, `invalid_end_user`, `end_user_required`, `confirmation_cannot_wait`, `unknown_end_user`", body = ref("#/components/schemas/OtcServerErrorResponse")),
        (status = 413, description = "`confirmation_too_large`: the call's transaction would be over the tenant's `maxConfirmationBytes`; nothing was stored", body = ref("#/components/schemas/OtcServerErrorResponse")),
        (status = 422, description = "The inputs do not fit the tool's `input_schema`", body = ref("#/components/schemas/OtcValidationErrorResponse")),
        (status = 429, description = "`too_many_pending_confirmations`: the tenant, or the call's end user, has as many calls waiting for confirmation as its quota allows (`limit` names it); nothing was stored", body = ref("#/components/schemas/OtcServerErrorResponse")),
        (status = 500, description = "`internal`: Plinth itself failed (a bug)", body = ref("#/components/schemas/OtcServerErrorResponse")),
        (status = 503, description = "Temporary: `busy`, `rate_limited`, `storage_failed`; the tool did not run", body = ref("#/components/schemas/OtcServerErrorResponse"),
            headers(("Retry-After" = u64, description = "Seconds to wait before retrying"))),
    ))]
pub(super) async fn call_tool(
    State(host): State<AppState>,
    Extension(caller): Extension<Caller>,
    Extension(options): Extension<Arc<ApiOptions>>,
    trace: Option<Extension<CallerTrace>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let mut request = CallRequest::parse(&super::body_within_limit(body)?)?;
    request.trace = trace.map(|Extension(trace)| trace);
    let (tool, version) = resolve(&host, &caller.tenant, caller.toolset.as_deref(), &request.tool_id)?;
    let arguments: Vec<(&str, &Value)> = request.input.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let input = match host.check_input(&tool, &version, FrontDoor::Otc, caller.toolset.as_deref(), &arguments) {
        Ok(input) => input,
        Err(errors) => return Ok(validation_error(errors)),
    };
    let key_id = caller.principal.map(|p| p.key_id).unwrap_or_default();
    let claims_call_id = request.call_id.is_some();
    let toolset = caller.toolset.as_ref().map(|t| (t.name.clone(), t.version));
    let run = run_call(host, options, caller.tenant, toolset, key_id, tool, version, input, request);
    if !claims_call_id {
        // Nothing claimed: the call is the request's, as on A2T and MCP. A
        // client that hangs up drops it (one that moved to the tool threads
        // runs to its end there, but is not counted in usage or the console).
        return run.await;
    }
    // Own task: a client that hangs up must not leave a claimed call id
    // unrecorded while its tool still runs — its retry waits for the answer.
    // In the request's span: the call's log lines carry its id, and its
    // spans are the request's children. (A task per call costs a wake of
    // an idle worker, so calls without a call id do not pay for it.)
    let call = tokio::spawn(run.instrument(tracing::Span::current()));
    call.await.map_err(|_| ApiError::internal("the call was interrupted"))?
}

#[allow(clippy::too_many_arguments)]
async fn run_call(
    host: AppState,
    options: Arc<ApiOptions>,
    tenant: String,
    toolset: Option<(String, u32)>,
    key_id: String,
    tool: Arc<Tool>,
    version: Arc<ToolVersion>,
    input: wasmtime::component::Val,
    request: CallRequest,
) -> Result<Response, ApiError> {
    let call_id = request.call_id.clone().unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let mut call = Call::new(input, FrontDoor::Otc);
    call.call_id = call_id.clone();
    call.toolset = toolset.clone();
    let toolset = toolset.map(|(name, _)| name);
    // A call id the server made up cannot be retried, so only the caller's
    // are claimed.
    let ticket = match &request.call_id {
        None => None,
        Some(id) => {
            // The tenant's rate first: a call over it is refused before its
            // claim is written (and released: two writes on the store's one
            // writer for a call that never runs).
            call.rate = Some(host.take_rate(&tool, &version, &call)?);
            let key = CallKey { tenant, caller: key_id, call_id: id.clone() };
            match host.claim_call(&key, &request.sha256()).await.map_err(storage_failed)? {
                Claim::Run(ticket) => Some(ticket),
                Claim::Recorded(response) => return Ok(recorded(response)),
                Claim::Conflict => {
                    return Err(ApiError::bad_request(
                        "call_id_reused",
                        format!(
                            "call_id `{id}` was used for a different request in the last {} hours; use a new call_id for a new call",
                            host.call_retention().as_secs() / 3600
                        ),
                    ));
                }
                Claim::Unfinished => return Ok(unfinished(&call_id)),
                Claim::RunningElsewhere => return Ok(running_elsewhere(&call_id)),
            }
        }
    };
    // After the claim: a retry of a recorded call is answered from the
    // record, whatever secrets it brings.
    let missing = host.missing_secrets(&tool, &version, &request.secrets);
    if !missing.is_empty() {
        if let Some(ticket) = ticket {
            host.settle_call(ticket, None).map_err(storage_failed)?;
        }
        let list = missing.iter().map(|id| format!("`{id}`")).collect::<Vec<_>>().join(", ");
        let secrets: Vec<Value> = missing.iter().map(|id| json!({ "id": id })).collect();
        return Err(ApiError::bad_request(
            "missing_requirements",
            format!("`{}` needs the secret {list}: supply it in context.secrets", request.tool_id),
        )
        .with("missing_requirements", json!({ "secrets": secrets })));
    }
    if let Some(trace_id) = &request.trace_id {
        tracing::debug!(call_id, trace_id, "OTC call");
    }
    let has_outputs = !version.signature.outputs.is_empty();
    let started = std::time::Instant::now();
    call.secrets = request.secrets;
    call.authorizations = request.authorizations;
    call.end_user = request.end_user;
    call.trace = request.trace;
    let outcome = host.invoke(tool, version, call).await;
    let (response, answer) = match outcome {
        // The person must grant it first (OTC's `missing_requirements`):
        // nothing ran, the call id is free for the retry.
        Err(e @ InvokeError::AuthorizationRequired { .. }) => {
            if let Some(ticket) = ticket {
                host.settle_call(ticket, None).map_err(storage_failed)?;
            }
            return Err(missing_authorization(&options, &e, toolset.as_deref()));
        }
        // Recorded as the call id's response: a retry gets the same pack,
        // not a second confirmation.
        Err(InvokeError::ConfirmationPending(pending)) => {
            let answer = pending_answer(&call_id, &options, &pending, toolset.as_deref());
            (answer.to_string(), located(json_response(answer.to_string(), false), &answer))
        }
        outcome => match result(&call_id, started.elapsed(), has_outputs, outcome) {
            Ok(body) => (body.clone(), json_response(body, false)),
            Err(e) => {
                // Refused before the tool ran (busy, over the rate): the call
                // id is free for the retry.
                if let Some(ticket) = ticket {
                    host.settle_call(ticket, None).map_err(storage_failed)?;
                }
                return Err(e.into());
            }
        },
    };
    if let Some(ticket) = ticket
        && let Err(e) = host.settle_call(ticket, Some(&response))
    {
        // The caller still gets the answer; a retry will be told the
        // outcome is unknown rather than run the tool again.
        tracing::error!(error = %e, "a call's response could not be recorded");
    }
    Ok(answer)
}

/// `400` with OTC's `missing_requirements.authorization`: one
/// `ToolAuthorizationChallenge` (`id`, `url` the person visits, `check_url`
/// the agent polls) per provider the call's end user must grant first.
fn missing_authorization(options: &ApiOptions, e: &InvokeError, toolset: Option<&str>) -> ApiError {
    let InvokeError::AuthorizationRequired { pending, .. } = e else {
        return ApiError::internal("an authorization answer for another error");
    };
    let challenges: Vec<Value> = pending
        .iter()
        .map(|p| {
            let (url, check_url) = super::links::authorization_urls(options, &p.tenant, &p.link, toolset);
            json!({ "id": p.provider, "url": url, "check_url": check_url })
        })
        .collect();
    ApiError::bad_request("missing_requirements", e.to_string())
        .with("missing_requirements", json!({ "authorization": challenges }))
}

/// The OTC answer (`CallToolResponse` in its envelope) to a call whose tool
/// ran, or the error when it was refused before it ran.
pub(super) fn result(
    call_id: &str,
    duration: std::time::Duration,
    has_outputs: bool,
    outcome: Result<ToolResult, InvokeError>,
) -> Result<String, InvokeError> {
    let duration = (duration.as_secs_f64() * 1e6).round() / 1e3;
    let mut result = json!({ "call_id": call_id, "duration": duration });
    match outcome {
        Ok(ToolResult::Outputs(outputs)) => {
            result["success"] = true.into();
            if has_outputs {
                let value: Map<String, Value> = outputs.into_iter().map(|o| (o.name, o.value)).collect();
                result["value"] = value.into();
            }
        }
        Ok(ToolResult::Failed(error)) => {
            result["success"] = false.into();
            result["error"] = tool_error(&error);
        }
        Err(e) if e.tool_ran() => {
            result["success"] = false.into();
            result["error"] = sandbox_error(&e);
        }
        Err(e) => return Err(e),
    }
    Ok(json!({ "$schema": SCHEMA_URI, "result": result }).to_string())
}

/// The answer to a call that waits for its end user's confirmation: a
/// `CallToolResponse` in its envelope, as the OTC schemas have it (`200`,
/// `success: false`, the tool has not run), with the CHEQ URI pack beside
/// `result` (the envelope allows more properties) for a client that knows
/// CHEQ: the result URI answers the call's `CallToolResponse` once the end
/// user decided.
fn pending_answer(
    call_id: &str,
    options: &ApiOptions,
    pending: &crate::host::PendingConfirmation,
    toolset: Option<&str>,
) -> Value {
    let Value::Object(pack) = super::links::uri_pack_body_in(options, pending, toolset) else { return Value::Null };
    let result_uri = pack[super::links::RESULT_URI].as_str().unwrap_or_default().to_string();
    let error = json!({
        "message": format!(
            "the call waits for its end user's confirmation; the tool has not run yet. Its outcome will be at {result_uri}"
        ),
        "developer_message": "confirmation_pending",
        "can_retry": false,
        "additional_prompt_content": "Tell the user to confirm the call on the page their application shows them; it runs only once they do.",
    });
    let mut answer = json!({
        "$schema": SCHEMA_URI,
        "result": { "call_id": call_id, "success": false, "error": error },
    });
    if let Value::Object(answer) = &mut answer {
        answer.extend(pack);
    }
    answer
}

/// `response` with `Location: {result uri}` when `answer` carries a URI
/// pack (the call waits for its end user).
fn located(mut response: Response, answer: &Value) -> Response {
    if let Some(uri) = answer[super::links::RESULT_URI].as_str().and_then(|u| HeaderValue::from_str(u).ok()) {
        response.headers_mut().insert(header::LOCATION, uri);
    }
    response
}

/// A recorded response, replayed (a pending call's with its `Location`).
fn recorded(body: String) -> Response {
    let answer: Value = serde_json::from_str(&body).unwrap_or_default();
    located(json_response(body, true), &answer)
}

fn storage_failed(e: crate::store::StoreError) -> ApiError {
    tracing::error!(error = %e, "call ids could not be read or written");
    ApiError::storage_failed(
        "the call could not be recorded (the data disk is full, or the database cannot be reached); the tool did not run",
    )
}

fn json_response(body: String, replayed: bool) -> Response {
    let mut response = ([(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], body).into_response();
    if replayed {
        response.headers_mut().insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    response
}

/// The answer to a call id whose earlier call never recorded its outcome.
fn unfinished(call_id: &str) -> Response {
    let error = json!({
        "message": "an earlier call with this call_id started but its outcome was never recorded (the server went down while it ran), so it may or may not have taken effect; check before calling again with a new call_id",
        "developer_message": "call_outcome_unknown",
        "can_retry": false,
    });
    let body = json!({ "$schema": SCHEMA_URI, "result": { "call_id": call_id, "success": false, "error": error } });
    json_response(body.to_string(), true)
}

/// A call id whose call another replica of the fleet is still running: the
/// same request again, later, gets its recorded answer.
fn running_elsewhere(call_id: &str) -> Response {
    let error = json!({
        "message": "the call with this call_id is still running; send the same request again in a moment to get its answer",
        "developer_message": "call_in_progress",
        "can_retry": true,
        "retry_after_ms": 1000,
    });
    let body = json!({ "$schema": SCHEMA_URI, "result": { "call_id": call_id, "success": false, "error": error } });
    json_response(body.to_string(), true)
}

/// The OTC `ToolError` of a tool's own `tool-error`.
fn tool_error(e: &ToolError) -> Value {
    let mut error = json!({ "message": e.message, "can_retry": e.can_retry });
    if let Some(text) = &e.developer_message {
        error["developer_message"] = text.clone().into();
    }
    if let Some(ms) = e.retry_after_ms {
        error["retry_after_ms"] = ms.into();
    }
    if let Some(text) = &e.additional_prompt_content {
        error["additional_prompt_content"] = text.clone().into();
    }
    error
}

/// The OTC `ToolError` of a call the sandbox ended or whose answer the host
/// refused. `can_retry` is the core's judgement ([`InvokeError::is_temporary`]):
/// a timeout while the tool waited may pass (a slow backend); a trap,
/// exhausted memory, a bad answer or a tool computing past its deadline
/// will not.
fn sandbox_error(e: &InvokeError) -> Value {
    let code = match e {
        InvokeError::Call(CallError::Timeout { .. }) => "tool_timeout",
        InvokeError::Call(CallError::ResourceExhausted) => "tool_resource_exhausted",
        InvokeError::Call(_) => "tool_trapped",
        InvokeError::Output(OutputError::TooLarge(_)) => "output_too_large",
        InvokeError::Output(_) => "invalid_tool_output",
        InvokeError::OutboundDenied(_) => "outbound_denied",
        InvokeError::Internal(_) => "internal",
        _ => "tool_failed",
    };
    json!({ "message": e.to_string(), "developer_message": code, "can_retry": e.is_temporary() })
}

/// Gives every error under `/otc/` the OTC `ServerErrorResponse` shape
/// (`$schema`, `message`, plus Plinth's `code` and fields), whether the OTC
/// handlers, the authorization layer or the router produced it.
pub async fn uniform_errors(request: Request, next: Next) -> Response {
    if !request.uri().path().starts_with("/otc/") {
        return next.run(request).await;
    }
    otc_error_shape(next.run(request).await).await
}

/// An error response in the OTC `ServerErrorResponse` shape; any other
/// response as it is.
pub(super) async fn otc_error_shape(response: Response) -> Response {
    if !(response.status().is_client_error() || response.status().is_server_error()) {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, 1 << 20).await.unwrap_or_default();
    let mut body: Map<String, Value> = serde_json::from_slice(&bytes).unwrap_or_default();
    if body.contains_key("$schema") {
        return Response::from_parts(parts, Body::from(bytes));
    }
    let mut otc = match body.remove("error") {
        Some(Value::Object(error)) => error,
        _ => Map::new(),
    };
    if !otc.contains_key("message") {
        let reason = parts.status.canonical_reason().unwrap_or("error").to_ascii_lowercase();
        otc.insert("message".into(), reason.into());
    }
    otc.insert("$schema".into(), SCHEMA_URI.into());
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Response::from_parts(parts, Body::from(Value::Object(otc).to_string()))
}

/// The OTC door's operations, merged into the OpenAPI document
/// (`openapi.rs`).
#[derive(utoipa::OpenApi)]
#[openapi(paths(health, list_tools, call_tool,))]
pub(super) struct Doc;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_one_to_one() {
        let cases = [
            ("lookup_weather_by_city", "LookupWeatherByCity"),
            ("echo", "Echo"),
            ("echo2", "Echo2"),
            ("route_66", "Route_66"),
            ("a_2b", "A_2b"),
            ("a2b", "A2b"),
        ];
        for (snake, pascal) in cases {
            assert_eq!(pascal_case(snake), pascal);
            assert_eq!(snake_case(pascal), snake);
        }
        assert_eq!(pascal_case("acme-travel"), "AcmeTravel");
        assert_eq!(pascal_case("1st-choice"), "1stChoice");
        let long = otc_name("Toolkit", &"Verylong".repeat(10));
        assert_eq!(long.len(), 64);
        assert_ne!(long, otc_name("Toolkit", &"Verylong".repeat(11)));
    }

    #[test]
    fn tool_ids_parse_as_the_errata_describe() {
        let id = |s| parse_tool_id(s).map(|r| (r.toolkit, r.name, r.version));
        assert_eq!(id("Travel.BookFlight"), Some(("Travel", "BookFlight", VersionRef::Current)));
        assert_eq!(id("Travel.BookFlight@3"), Some(("Travel", "BookFlight", VersionRef::Exact(3))));
        assert_eq!(id("Travel.BookFlight@3.0.0"), Some(("Travel", "BookFlight", VersionRef::Exact(3))));
        assert_eq!(
            id("Travel.BookFlight@3.1.0"),
            Some(("Travel", "BookFlight", VersionRef::Unpublished("3.1.0".into())))
        );
        assert_eq!(id("Travel.BookFlight@0"), Some(("Travel", "BookFlight", VersionRef::Unpublished("0".into()))));
        for bad in ["BookFlight", "Travel.", ".X", "Travel.Book-Flight", "T.X@", "T.X@1.0", "T.X@v1", "T.X@1.0.0.0"] {
            assert_eq!(id(bad), None, "{bad}");
        }
    }
}
