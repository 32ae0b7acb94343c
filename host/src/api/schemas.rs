//! What the server sends and takes, as schemas. Each is closed
//! (`additionalProperties: false`, from `deny_unknown_fields`) where the
//! server sends exactly these fields, so that schemathesis
//! (tests/e2e/openapi.rs) fails on a field the code adds without the
//! document; the unit tests of `openapi.rs` read real answers into them.

// Documentation types: utoipa reads them for the schemas, the tests
// read answers into them; the server never constructs one.
#![allow(dead_code)]
use serde::Deserialize;
use serde_json::{Map, Value};
use utoipa::{IntoParams, IntoResponses, ToSchema};

/// Every error of the A2T, CHEQ and admin endpoints.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// The error object: a stable code, a message written for its reader (an
/// LLM, a developer), and fields a caller can act on.
#[derive(Debug, Deserialize, ToSchema)]
pub struct ErrorDetail {
    /// A stable snake_case code (docs/a2t.md lists them with their statuses).
    #[schema(pattern = "^[a-z][a-z0-9_]*$", example = "missing_parameter")]
    pub code: String,
    /// What went wrong and what to do about it.
    pub message: String,
    /// The input parameter a `400` is about.
    pub parameter: Option<String>,
    /// A tool's `tool-error`: detail for the agent's developer.
    pub developer_message: Option<String>,
    /// A tool's `tool-error`: whether retrying may succeed.
    pub can_retry: Option<bool>,
    /// A tool's `tool-error`: how long to wait before retrying.
    pub retry_after_ms: Option<u64>,
    /// A tool's `tool-error`: extra text for the LLM's prompt.
    pub additional_prompt_content: Option<String>,
}

/// `{"status": "ok"}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Health {
    /// Always `ok`.
    #[schema(pattern = "^ok$")]
    pub status: String,
}

/// The readiness answer.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Readiness {
    /// `ready`, or `not_ready`.
    #[schema(pattern = "^(ready|not_ready)$")]
    pub status: String,
    /// Why it is not ready.
    pub message: Option<String>,
}

/// A JSON Web Key Set: the Ed25519 public keys this server signs CHEQ
/// objects with (RFC 7517, RFC 8037).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Jwks {
    /// The keys.
    pub keys: Vec<Jwk>,
}

/// One public key.
#[derive(Debug, Deserialize, ToSchema)]
pub struct Jwk {
    /// `OKP`.
    pub kty: String,
    /// `Ed25519`.
    pub crv: String,
    /// The public key, base64url.
    pub x: String,
    /// The key id CHEQ signatures name.
    pub kid: String,
}

/// An A2T tool version (the draft's ToolSignature, with Plinth's
/// extensions: docs/a2t.md).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolSignature {
    /// The tool's id, stable across its versions.
    #[schema(format = "uuid")]
    #[serde(rename = "toolId")]
    pub tool_id: String,
    /// The tool's name, which an invocation repeats.
    pub name: String,
    /// What the tool does, for the LLM.
    pub description: String,
    /// An image of the tool, when its `plinth.toml` sets one.
    pub img: Option<String>,
    /// This version's number.
    #[schema(minimum = 1)]
    pub version: u32,
    /// The newest version that is not retired; `null` when every one is.
    #[serde(rename = "currentVersion")]
    #[schema(minimum = 1)]
    pub current_version: Option<u32>,
    /// The tool's tags.
    pub tags: Vec<String>,
    /// What a call passes.
    pub input_parameters: Vec<InputParameter>,
    /// What a call returns.
    pub output_parameters: Vec<OutputParameter>,
    /// `sha256:` and the hash of the component's bytes.
    #[serde(rename = "contentHash")]
    #[schema(pattern = "^sha256:[0-9a-f]{64}$")]
    pub content_hash: String,
    /// Present when calls need their end user's confirmation: every call
    /// (`required`) or those a condition picks (`conditional`).
    #[schema(pattern = "^(required|conditional)$")]
    pub confirmation: Option<String>,
    /// Present (and true) on a retired version.
    pub retired: Option<bool>,
    /// When it was retired (Unix seconds).
    #[serde(rename = "retiredAt")]
    pub retired_at: Option<i64>,
    /// Where the version came from and who signed it (extension,
    /// docs/deploying.md): present when it was pulled from a registry
    /// or a key its tenant trusts signed it.
    pub provenance: Option<Provenance>,
}

/// An input parameter of a ToolSignature.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct InputParameter {
    /// Ties the parameter across versions (the WIT field name).
    pub id: String,
    /// The name an invocation uses.
    pub name: String,
    /// `string`, `int`, `boolean` or `enum`.
    #[serde(rename = "type")]
    #[schema(pattern = "^(string|int|boolean|enum)$")]
    pub kind: String,
    /// What it means, for the LLM.
    pub description: String,
    /// Whether a call must give it.
    pub required: bool,
    /// Typed by the end user on the confirmation page, never by the agent.
    pub private: Option<bool>,
    /// A string's longest length, in Unicode scalar values.
    #[serde(rename = "maxLength")]
    pub max_length: Option<u64>,
    /// An int's least value.
    pub min: Option<i64>,
    /// An int's greatest value.
    pub max: Option<u64>,
    /// An enum's values.
    #[serde(rename = "allowed-values")]
    pub allowed_values: Option<Vec<AllowedValue>>,
}

/// An output parameter of a ToolSignature.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OutputParameter {
    /// Ties the parameter across versions.
    pub id: String,
    /// The name the answer uses.
    pub name: String,
    /// `string`, `int`, `enum` or `json`.
    #[serde(rename = "type")]
    #[schema(pattern = "^(string|int|enum|json)$")]
    pub kind: String,
    /// What it means.
    pub description: String,
    /// An enum's values.
    #[serde(rename = "allowed-values")]
    pub allowed_values: Option<Vec<AllowedValue>>,
}

/// One value of an enum.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AllowedValue {
    /// The value, as a call writes it.
    pub name: String,
    /// What it means.
    pub description: String,
}

/// A page of tool versions.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolPage {
    /// The versions on this page.
    pub items: Vec<ToolSignature>,
    /// Where the next page is.
    pub paging: Paging,
}

/// A page's position.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Paging {
    /// The page size the server used.
    #[serde(rename = "pageLimit")]
    #[schema(minimum = 1, maximum = 200)]
    pub page_limit: u32,
    /// The `pageCursor` of the next page; absent on the last.
    pub next: Option<String>,
}

/// An A2T invocation. The parameters are the tool's own (its signature's
/// `input_parameters`): this is the envelope every tool shares.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Invocation {
    /// The tool's name (from its signature).
    pub name: String,
    /// The inputs, by name; an optional one may be left out or `null`.
    pub input_parameters: Option<Vec<NamedValue>>,
}

/// A parameter's value.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NamedValue {
    /// The parameter's name.
    pub name: String,
    /// Its value, of the parameter's type.
    pub value: Value,
}

/// A call's answer: the outputs, in signature order.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct InvocationResult {
    /// The outputs.
    pub output_parameters: Vec<NamedValue>,
}

/// The CHEQ URI pack of a call that waits for its end user's confirmation
/// (the draft's figure 3; its keys have spaces).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UriPack {
    /// Where the end user confirms.
    #[serde(rename = "confirmation uri")]
    pub confirmation_uri: String,
    /// The transaction (a confirmation server's URI).
    #[serde(rename = "resource uri")]
    pub resource_uri: String,
    /// Where the agent polls for the call's answer.
    #[serde(rename = "result uri")]
    pub result_uri: String,
}

/// A transaction still waiting at the result URI.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TransactionWaiting {
    /// The transaction id.
    pub transaction: String,
    /// `pending` (the end user has not decided) or `running`.
    #[schema(pattern = "^(pending|running)$")]
    pub state: String,
    /// When the confirmation window ends (RFC 3339).
    pub expires: String,
}

/// A signed CHEQ: a JWS in the general JSON serialization (RFC 7515).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SignedCheq {
    /// The CHEQ object (its RFC 8785 form), base64url.
    pub payload: String,
    /// This server's signature, and a confirmation server's once accepted.
    pub signatures: Vec<JwsSignature>,
}

/// One signature of a JWS.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JwsSignature {
    /// The protected header, base64url.
    pub protected: String,
    /// The signature, base64url.
    pub signature: String,
    /// An unprotected header.
    pub header: Option<Map<String, Value>>,
}

/// The CHEQ object of a transaction (the draft's section 4; `?raw`).
#[derive(Debug, Deserialize, ToSchema)]
pub struct CheqObject {
    /// The operation the end user confirms (the tool).
    #[serde(rename = "operation name")]
    pub operation_name: String,
    /// What it does.
    #[serde(rename = "operation description")]
    pub operation_description: String,
    /// The call's inputs.
    pub inputs: Value,
}

/// The resource URI's answer: the signed CHEQ, or (`?raw`) the object.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum CheqAnswer {
    /// The CHEQ signed by this server.
    Signed(SignedCheq),
    /// The CHEQ object alone.
    Object(CheqObject),
}

/// A confirmation server's decision, as it was recorded.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionRecorded {
    /// The transaction id.
    pub transaction: String,
    /// `accepted` or `rejected`.
    #[schema(pattern = "^(accepted|rejected)$")]
    pub state: String,
    /// On an accept: the status the call's answer is kept with at the
    /// result URI.
    pub result_status: Option<u16>,
}

/// The evidence of one CHEQ transaction.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Evidence {
    /// The transaction id.
    pub transaction: String,
    /// Its tenant.
    pub tenant: String,
    /// The tool called.
    #[schema(format = "uuid")]
    pub tool_id: String,
    /// The version called.
    pub version: u32,
    /// Who the call was made for.
    pub end_user: String,
    /// `a2t`, `otc` or `mcp`.
    pub front_door: String,
    /// The call's id in the server's logs.
    pub call_id: String,
    /// `pending`, `accepted`, `rejected`, `expired`, `running`, `done`, …
    pub state: String,
    /// When it was opened (RFC 3339).
    pub created: String,
    /// When its window ends (RFC 3339).
    pub expires: String,
    /// When it was decided (RFC 3339).
    pub decided: Option<String>,
    /// The CHEQ this server signed.
    pub cheq: Value,
    /// The CHEQ with the confirmation server's signature, or who rejected it.
    pub decision: Option<Value>,
    /// The status the call's answer is kept with.
    pub result_status: Option<u16>,
    /// This server's public keys, to check the signatures with.
    pub jwks: Jwks,
}

/// An end user's password.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EndUserPassword {
    /// The password (hashed with Argon2id; never stored or logged).
    pub password: String,
}

/// The tenant's confirmation server.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConfirmationServerSetting {
    /// The external server, or `null` for the built-in one.
    pub confirmation_server: Option<crate::host::ConfirmationServer>,
}

/// A tool's confirmation policy: the tenant's override and the tool's own.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicySetting {
    /// The tenant's override; `null` when the tool's own applies.
    #[serde(rename = "override")]
    pub override_policy: Option<crate::cheq::ConfirmationPolicy>,
    /// What the tool's newest version declares.
    pub declared: Option<crate::cheq::ConfirmationPolicy>,
}

/// A deployed version.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Deployed {
    /// The tool's id (the same as its earlier versions').
    #[serde(rename = "toolId")]
    #[schema(format = "uuid")]
    pub tool_id: String,
    /// The tool's name.
    pub name: String,
    /// The version's number.
    pub version: u32,
    /// The sha256 of the component's bytes.
    pub sha256: String,
    /// The sha256 of the version's signature.
    #[serde(rename = "signatureSha256")]
    pub signature_sha256: String,
    /// The version that was current before, if any.
    #[serde(rename = "previousVersion")]
    pub previous_version: Option<u32>,
    /// Where the version came from and who signed it.
    pub provenance: Provenance,
}

/// Where a version came from and who signed it, verified at deploy:
/// `{}` for posted bytes no trusted key signed.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    /// The registry artifact it was pulled from; absent for posted bytes.
    pub source: Option<ProvenanceSource>,
    /// The tenant's trusted keys whose signatures verified.
    #[serde(default)]
    pub signers: Vec<ProvenanceSigner>,
}

/// A registry artifact a version was pulled from.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProvenanceSource {
    /// The reference as it was deployed (tag and all).
    #[schema(example = "ghcr.io/acme/echo:1.2.0")]
    pub reference: String,
    /// The digest of the manifest pulled: what the tag pointed at then.
    #[serde(rename = "manifestDigest")]
    #[schema(pattern = "^sha256:[0-9a-f]{64}$")]
    pub manifest_digest: String,
}

/// A verified signer.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProvenanceSigner {
    /// `wasmsign2`: a signature embedded in the component; `cosign`: a
    /// signature stored next to the artifact in its registry.
    #[schema(example = "cosign")]
    pub kind: String,
    /// The trust policy's name for the key.
    pub key: String,
    /// `sha256:` and the hex SHA-256 of the key's SubjectPublicKeyInfo.
    #[schema(pattern = "^sha256:[0-9a-f]{64}$")]
    pub fingerprint: String,
}

/// A page of a tenant's recent calls (docs/console.md).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ConsolePage {
    /// The calls, newest first.
    pub items: Vec<ConsoleCall>,
    /// The `before` of the next page; `null` on the last.
    pub next: Option<String>,
    /// How far back the recent calls go, in minutes.
    pub retention_minutes: u64,
}

/// One call in the console.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ConsoleCall {
    /// Its place in the tenant's console (grows by one per call).
    pub seq: u64,
    /// When it ended (RFC 3339, UTC).
    pub time: String,
    /// The tool's name.
    pub tool: String,
    /// The tool's id.
    #[schema(format = "uuid")]
    pub tool_id: String,
    /// The version that ran.
    pub version: u32,
    /// The call's id.
    pub call_id: String,
    /// `a2t`, `otc` or `mcp`.
    pub door: String,
    /// `ok`, `tool_error`, `refused` (refused for its inputs), or the code
    /// of what stopped the call.
    pub outcome: String,
    /// How long it took, in milliseconds.
    pub duration_ms: f64,
    /// The tool's log lines for the call (redacted, cut at 4 KiB each).
    pub lines: Vec<ConsoleLine>,
    /// For a `refused` call: each refused parameter and why.
    #[serde(default)]
    pub refused: Vec<ConsoleRefusal>,
}

/// A parameter a call was refused for.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConsoleRefusal {
    /// The parameter as the caller named it (cut at 64 characters);
    /// `null` when the request as a whole was refused.
    pub parameter: Option<String>,
    /// The input error's code (`missing_parameter`, `invalid_type`, …).
    pub code: String,
    /// The value given, as JSON cut at 120 characters: only when the
    /// tenant shows offending values, never a `private` input's.
    #[serde(default)]
    pub value: Option<String>,
}

/// A tenant's console settings.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ConsoleSettings {
    /// Whether the console shows the values callers gave for refused
    /// parameters (cut at 120 characters; never a `private` input's).
    /// Off by default.
    #[serde(default)]
    pub show_offending_values: bool,
}

/// A log line of a call.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConsoleLine {
    /// `trace`, `debug`, `info`, `warn` or `error`.
    pub level: String,
    /// The text.
    pub text: String,
}

/// A tenant's usage over a window (docs/console.md).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct UsagePage {
    /// `hour`, `day` or `week`.
    pub window: String,
    /// The first bucket's start (Unix seconds).
    pub since: i64,
    /// The buckets' width: 60 (hour) or 3600 (day, week).
    pub bucket_seconds: i64,
    /// Per tool version and door.
    pub items: Vec<UsageItem>,
}

/// One tool version's usage through one door.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct UsageItem {
    /// The tool's name.
    pub tool: String,
    /// The tool's id.
    #[schema(format = "uuid")]
    pub tool_id: String,
    /// The version.
    pub version: u32,
    /// `a2t`, `otc` or `mcp`.
    pub door: String,
    /// Calls in the window.
    pub calls: u64,
    /// Calls by outcome (`ok`, `tool_error`, `tool_trapped`, …).
    pub outcomes: Map<String, Value>,
    /// Latency percentiles (`p50`, `p95`, `p99`), in milliseconds: the
    /// upper bound of the doubling range holding each (`null` beyond
    /// the last range, 131 s).
    pub latency_ms: Map<String, Value>,
    /// Calls and failures per bucket, oldest first.
    pub series: Vec<UsagePoint>,
    /// The calls' outbound requests by declared host and status.
    pub outbound: Vec<UsageOutbound>,
    /// Calls refused for their inputs (outcome `refused`), by parameter
    /// and code, most first (a call refused for two parameters counts
    /// once in each).
    pub refused: Vec<UsageRefused>,
    /// Calls the tenant's limits refused, by reason.
    pub limited: Vec<UsageLimited>,
    /// With `?toolset=`: the toolset version the calls came through.
    pub toolset_version: Option<u32>,
}

/// Calls refused for one parameter with one code.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UsageRefused {
    /// The signature's parameter; `(unknown)` for every name it does not
    /// have; `null` when the request as a whole was refused.
    pub parameter: Option<String>,
    /// The input error's code.
    pub code: String,
    /// Calls.
    pub calls: u64,
}

/// Calls one kind of limit refused.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UsageLimited {
    /// `rate_limit` (the tenant's invocation rate), `quota` (its
    /// concurrent invocations), `busy` (the tool's or the server's).
    pub reason: String,
    /// Calls.
    pub calls: u64,
}

/// Outbound requests to one declared host that ended one way.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UsageOutbound {
    /// The manifest's host the request was allowed by (`undeclared`
    /// when none allows it).
    pub host: String,
    /// `2xx`, `3xx`, `4xx`, `5xx`, `denied`, `dns_error`,
    /// `connection_refused`, `timeout`, `tls_error` or `error`.
    pub status: String,
    /// Requests.
    pub requests: u64,
}

/// One bucket of a series.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UsagePoint {
    /// The bucket's start (Unix seconds).
    pub start: i64,
    /// Calls.
    pub calls: u64,
    /// Calls whose outcome was not `ok`.
    pub failures: u64,
}

/// A deploy by reference: the server pulls the component.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeployReference {
    /// `registry[:port]/repository[:tag][@sha256:…]`; the registry must
    /// be named (no Docker Hub default); no tag and no digest means `latest`.
    #[schema(example = "ghcr.io/acme/echo:1.2.0", max_length = 512)]
    pub reference: String,
}

/// A trust policy as set.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TrustPolicyInput {
    /// Refuse deploys that no trusted key signed (needs at least one key).
    #[serde(default)]
    pub require_signature: bool,
    /// At most 32 keys.
    #[serde(default)]
    pub keys: Vec<TrustedKeyInput>,
}

/// A trusted key as set.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TrustedKeyInput {
    /// The name signers are shown by: 1 to 64 of `[a-z0-9._-]`.
    #[schema(pattern = "^[a-z0-9._-]{1,64}$")]
    pub name: String,
    /// A PEM public key (`-----BEGIN PUBLIC KEY-----`): Ed25519 for
    /// `wasmsign2` signatures, ECDSA P-256 for cosign ones; or the
    /// base64 of a `wasmsign2 keygen` public key file.
    pub public_key: String,
    /// The repositories the key may sign for: `registry/repository`,
    /// `registry/prefix/*` or `registry/*` (at most 16). A scoped key
    /// counts only for a deploy by reference that matches, never for
    /// posted bytes; none: any component.
    #[serde(default)]
    pub scopes: Vec<String>,
}

/// A trust policy.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TrustPolicy {
    /// Whether deploys must carry a signature by one of the keys.
    pub require_signature: bool,
    /// The trusted keys.
    pub keys: Vec<TrustedKey>,
    /// An operator set the policy: a publisher may only tighten it
    /// (require a signature, remove keys, narrow scopes).
    pub locked_by_operator: bool,
    /// Why the stored policy cannot be read, if it cannot: every
    /// deploy is refused until it is set again.
    #[serde(default)]
    pub unreadable: Option<String>,
}

/// A trusted key.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TrustedKey {
    /// Its name.
    pub name: String,
    /// Its PEM.
    pub public_key: String,
    /// `wasmsign2` (Ed25519) or `cosign` (ECDSA P-256).
    pub kind: String,
    /// `sha256:` and the hex SHA-256 of its SubjectPublicKeyInfo.
    pub fingerprint: String,
    /// The repositories it may sign for (absent: any).
    #[serde(default)]
    pub scopes: Option<Vec<String>>,
}

/// A trust policy just set, and the live versions it would refuse.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TrustPolicySet {
    /// Whether deploys must carry a signature by one of the keys.
    pub require_signature: bool,
    /// The trusted keys.
    pub keys: Vec<TrustedKey>,
    /// An operator set the policy: a publisher may only tighten it
    /// (require a signature, remove keys, narrow scopes).
    pub locked_by_operator: bool,
    /// Why the stored policy cannot be read, if it cannot: every
    /// deploy is refused until it is set again.
    #[serde(default)]
    pub unreadable: Option<String>,
    /// Live versions it would refuse if deployed now (they keep running).
    pub would_refuse: Vec<RefusedVersion>,
}

/// Live versions the trust policy would refuse.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RefusedVersions {
    /// The versions.
    pub items: Vec<RefusedVersion>,
}

/// A live version the trust policy would refuse.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RefusedVersion {
    /// The tool's id.
    #[schema(format = "uuid")]
    pub tool_id: String,
    /// The tool's name.
    pub name: String,
    /// The version.
    pub version: u32,
    /// The sha256 of its bytes.
    pub sha256: String,
    /// What was recorded when it was deployed.
    pub provenance: Provenance,
}

/// Credentials for a registry (the password is sealed and never shown again).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RegistryCredentials {
    /// The user name.
    pub username: String,
    /// The password or access token.
    pub password: String,
}

/// The registries a tenant has credentials for.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RegistryList {
    /// Each registry and its user name.
    pub items: Vec<RegistryEntry>,
}

/// A registry a tenant has credentials for.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RegistryEntry {
    /// `host[:port]`.
    pub registry: String,
    /// The user name.
    pub username: String,
}

/// A retired version.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Retired {
    /// The tool's id.
    #[serde(rename = "toolId")]
    pub tool_id: String,
    /// The version retired.
    pub version: u32,
    /// Always true.
    pub retired: bool,
    /// The current version now, `null` when none is left.
    #[serde(rename = "currentVersion")]
    pub current_version: Option<u32>,
}

/// The ids of the tenant's secrets (never their values).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretList {
    /// The secrets.
    pub items: Vec<SecretId>,
}

/// A secret's id.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretId {
    /// The id.
    pub id: String,
}

/// The tenant's stored config: tool name → key → value.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConfigList {
    /// By tool, by key.
    pub tools: std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>,
}

/// A tenant.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Tenant {
    /// Its name, in `/t/{name}/`.
    pub name: String,
    /// Whether its tools are listed without a key.
    #[serde(rename = "publicEnumeration")]
    pub public_enumeration: bool,
    /// Its limits.
    pub quotas: crate::tenancy::Quotas,
    /// When it was created (Unix seconds).
    #[serde(rename = "createdAt")]
    pub created_at: i64,
}

/// The tenants.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TenantList {
    /// Every tenant.
    pub items: Vec<Tenant>,
}

/// A new tenant.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewTenant {
    /// 1 to 63 lowercase letters, digits and `-`, not starting with `-`.
    #[schema(pattern = "^[a-z0-9][a-z0-9-]{0,62}$", example = "globex")]
    pub name: String,
    /// Whether its tools are listed without a key (default false).
    #[serde(rename = "publicEnumeration")]
    pub public_enumeration: Option<bool>,
    /// Quotas other than the defaults.
    pub quotas: Option<QuotaChange>,
}

/// A change to a tenant.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TenantChange {
    /// Whether its tools are listed without a key.
    #[serde(rename = "publicEnumeration")]
    pub public_enumeration: Option<bool>,
    /// The quotas to change; the others keep their values.
    pub quotas: Option<QuotaChange>,
}

/// Some of a tenant's quotas (each at least 1).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct QuotaChange {
    /// Tools with a live version.
    #[schema(minimum = 1)]
    pub max_tools: Option<u32>,
    /// Largest component a deploy may send, in bytes.
    #[schema(minimum = 1)]
    pub max_component_bytes: Option<u64>,
    /// Invocations a second, sustained.
    #[schema(minimum = 1)]
    pub invocations_per_second: Option<u32>,
    /// Invocations at once after a quiet spell.
    #[schema(minimum = 1)]
    pub invocation_burst: Option<u32>,
    /// Invocations running at once.
    #[schema(minimum = 1)]
    pub max_concurrent_invocations: Option<u32>,
    /// One instance's memory, in MiB.
    #[schema(minimum = 1)]
    pub max_memory_mib: Option<u64>,
    /// One invocation's time, in milliseconds.
    #[schema(minimum = 1)]
    pub max_deadline_ms: Option<u64>,
    /// Versions per tool, retired ones included.
    #[schema(minimum = 1)]
    pub max_versions_per_tool: Option<u32>,
    /// Call ids remembered for retries.
    #[schema(minimum = 1)]
    pub max_recorded_calls: Option<u64>,
    /// Bytes of recorded responses kept for retries.
    #[schema(minimum = 1)]
    pub max_recorded_call_bytes: Option<u64>,
    /// Secrets stored, registry credentials included.
    #[schema(minimum = 1)]
    pub max_secrets: Option<u32>,
    /// Config values stored, over all the tenant's tools.
    #[schema(minimum = 1)]
    pub max_config_values: Option<u32>,
    /// End users of the built-in confirmation server.
    #[schema(minimum = 1)]
    pub max_end_users: Option<u32>,
}

/// An API key as stored (never the key itself).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Key {
    /// The key's public id.
    pub id: String,
    /// Its tenant; `null` for an operator key.
    pub tenant: Option<String>,
    /// `operator`, `publisher` or `consumer`.
    #[schema(pattern = "^(operator|publisher|consumer)$")]
    pub role: String,
    /// A note from whoever created it.
    pub label: Option<String>,
    /// When it was created (Unix seconds).
    #[serde(rename = "createdAt")]
    pub created_at: i64,
    /// When it was revoked.
    #[serde(rename = "revokedAt")]
    pub revoked_at: Option<i64>,
    /// The toolset it is scoped to (it opens that toolset's roots and
    /// nothing else); `null` for the whole tenant.
    pub toolset: Option<String>,
}

/// A new key: its record, and the key itself, shown this once.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreatedKey {
    /// The key's public id.
    pub id: String,
    /// Its tenant; `null` for an operator key.
    pub tenant: Option<String>,
    /// Its role.
    #[schema(pattern = "^(operator|publisher|consumer)$")]
    pub role: String,
    /// Its note.
    pub label: Option<String>,
    /// When it was created (Unix seconds).
    #[serde(rename = "createdAt")]
    pub created_at: i64,
    /// Always `null`.
    #[serde(rename = "revokedAt")]
    pub revoked_at: Option<i64>,
    /// The toolset it is scoped to; `null` for the whole tenant.
    pub toolset: Option<String>,
    /// `plk_{id}_{secret}`: keep it, it is not shown again.
    pub key: String,
}

/// The keys.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct KeyList {
    /// Every key (of the tenant asked for).
    pub items: Vec<Key>,
}

/// A key to create.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewKeyRequest {
    /// Its tenant; absent for an operator key.
    #[schema(example = "acme")]
    pub tenant: Option<String>,
    /// `operator`, `publisher` or `consumer`.
    #[schema(pattern = "^(operator|publisher|consumer)$", example = "consumer")]
    pub role: String,
    /// A note (at most 200 bytes of UTF-8).
    #[schema(max_length = 200)]
    pub label: Option<String>,
    /// Scope a consumer key to this toolset of its tenant: it opens
    /// `/t/{tenant}/toolsets/{toolset}/…` and nothing else.
    #[schema(example = "travel")]
    pub toolset: Option<String>,
}

/// A page of the audit log, newest first.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AuditPage {
    /// The entries.
    #[schema(value_type = Vec<crate::tenancy::AuditEntry>)]
    pub items: Vec<Value>,
    /// Where the next page is.
    pub paging: Paging,
}

/// `503 storage_failed`: the store failed; nothing changed, and the same
/// request may work once it recovers.
#[derive(IntoResponses)]
pub enum StorageFailed {
    /// `storage_failed`: the data disk or the database failed; nothing changed.
    #[response(status = 503, headers(("Retry-After" = u64, description = "Seconds to wait before retrying")))]
    Unavailable(ErrorBody),
}

/// A page of a listing.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageParams {
    /// Page size: default 50, larger than 200 is clamped to 200.
    #[serde(rename = "pageLimit")]
    #[param(minimum = 1)]
    pub page_limit: Option<u32>,
    /// `paging.next` of the previous page.
    #[serde(rename = "pageCursor")]
    pub page_cursor: Option<String>,
}

/// The end user a call acts for.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Header)]
pub struct EndUserHeader {
    /// Who the call is made for: the end user who confirms it when it
    /// needs confirmation (the signature's `confirmation`). 1 to 128
    /// printable characters.
    #[serde(rename = "Plinth-End-User")]
    pub plinth_end_user: Option<String>,
}

/// Every answer of an A2T invocation (docs/a2t.md, "Status codes").
#[derive(IntoResponses)]
pub enum InvocationAnswers {
    /// The tool's outputs.
    #[response(status = 200, headers(
        ("plinth-call-id" = String, description = "The call's id in the server's logs"),
        ("plinth-tool-version" = u32, description = "The version that ran"),
    ))]
    Outputs(InvocationResult),
    /// The call waits for its end user's confirmation (CHEQ): poll the
    /// result URI.
    #[response(status = 202, headers(("Location" = String, description = "The result URI")))]
    Pending(UriPack),
    /// The request is wrong: `invalid_json`, `invalid_request`,
    /// `wrong_tool_name`, `unknown_parameter`, `duplicate_parameter`,
    /// `missing_parameter`, `invalid_type`, `invalid_enum_value`,
    /// `out_of_range`, `too_long`, `private_parameter`,
    /// `invalid_end_user`, `end_user_required`,
    /// `confirmation_cannot_wait`, `unknown_end_user` (with `parameter`
    /// when it is about one).
    #[response(status = 400)]
    BadRequest(ErrorBody),
    /// `not_found`: no such tool (or version) in this tenant.
    #[response(status = 404)]
    NotFound(ErrorBody),
    /// `request_timeout`: the body did not arrive in time.
    #[response(status = 408)]
    Timeout(ErrorBody),
    /// `version_retired`: the version (unpinned: every version) is retired.
    #[response(status = 410)]
    Gone(ErrorBody),
    /// `request_too_large`: the body is over the server's limit;
    /// `confirmation_too_large`: the call's transaction would be over the
    /// tenant's `maxConfirmationBytes` (nothing was stored).
    #[response(status = 413)]
    TooLarge(ErrorBody),
    /// `too_many_pending_confirmations`: the tenant, or the call's end user,
    /// has as many calls waiting for confirmation as its quota allows
    /// (`limit` names it); nothing was stored. Have the waiting ones decided.
    #[response(status = 429)]
    TooManyPending(ErrorBody),
    /// Permanent for this input: `tool_error` (without `can-retry`),
    /// `tool_trapped`, `tool_resource_exhausted`, `invalid_tool_output`,
    /// `output_too_large`, `outbound_denied`, `tool_timeout` (computing).
    #[response(status = 422)]
    Permanent(ErrorBody),
    /// `internal`: Plinth itself failed (a bug); the tool may or may not have run.
    #[response(status = 500)]
    Internal(ErrorBody),
    /// Temporary: `busy`, `rate_limited`, `storage_failed`, or the
    /// tool's own `tool_error` with `can-retry`.
    #[response(status = 503, headers(("Retry-After" = u64, description = "Seconds to wait before retrying")))]
    Unavailable(ErrorBody),
    /// `tool_timeout`: the deadline passed while the tool waited (on a backend).
    #[response(status = 504, headers(("Retry-After" = u64, description = "Seconds to wait before retrying")))]
    GatewayTimeout(ErrorBody),
}

/// OTC's health answer.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OtcHealth {
    /// The OTC 1.0 document's URI.
    #[serde(rename = "$schema")]
    pub schema: String,
    /// `ok`.
    #[schema(pattern = "^ok$")]
    pub status: String,
}

/// The confirmation page's login form.
#[derive(Debug, Deserialize, ToSchema)]
pub struct LoginForm {
    /// The end user's name.
    #[schema(example = "alice")]
    pub user: String,
    /// The end user's password.
    #[schema(example = "correct horse battery staple")]
    pub password: String,
    /// The resource URI to confirm, to go on to.
    pub resource_uri: Option<String>,
    /// Or the connections page to go on to: `/connections` or
    /// `/connections/{link}` under this tenant's root.
    #[schema(pattern = "^/connections(/[A-Za-z0-9_-]{1,64})?$")]
    pub next: Option<String>,
    /// The login page's token, which its cookie (`plinth_cheq_login`)
    /// holds too: a login from anywhere else is refused (`403`).
    pub login_token: String,
}

/// The OAuth sign-in and consent form: the authorization request's
/// fields as the page carries them, and the person's answer.
#[derive(Debug, Deserialize, ToSchema)]
pub struct AuthorizeForm {
    /// `code`.
    pub response_type: String,
    /// The client's id, or its metadata document's URL.
    pub client_id: String,
    /// One of the client's redirect URIs.
    pub redirect_uri: Option<String>,
    /// Returned to the client as is.
    pub state: Option<String>,
    /// The PKCE S256 challenge.
    pub code_challenge: String,
    /// `S256`.
    pub code_challenge_method: String,
    /// The scopes asked, space-separated.
    pub scope: Option<String>,
    /// The tenant's MCP URL.
    pub resource: Option<String>,
    /// The end user's name.
    #[schema(example = "alice")]
    pub user: String,
    /// The end user's password.
    pub password: String,
    /// `allow` or `deny`.
    pub decision: String,
    /// The page's token, which its cookie (`plinth_oauth_sign_in`) holds
    /// too.
    pub login_token: String,
}

/// A token request (RFC 6749 §4.1.3, §6).
#[derive(Debug, Deserialize, ToSchema)]
pub struct TokenForm {
    /// `authorization_code` or `refresh_token`.
    pub grant_type: String,
    /// The client's id.
    pub client_id: String,
    /// The code (`authorization_code`).
    pub code: Option<String>,
    /// The redirect URI the code was issued with.
    pub redirect_uri: Option<String>,
    /// The PKCE verifier.
    pub code_verifier: Option<String>,
    /// The refresh token (`refresh_token`).
    pub refresh_token: Option<String>,
    /// Narrower scopes on refresh.
    pub scope: Option<String>,
    /// The tenant's MCP URL (RFC 8707).
    pub resource: Option<String>,
}

/// A revocation request (RFC 7009).
#[derive(Debug, Deserialize, ToSchema)]
pub struct RevokeForm {
    /// The token to revoke.
    pub token: String,
    /// `access_token` or `refresh_token` (a hint; not needed).
    pub token_type_hint: Option<String>,
    /// The client it was issued to.
    pub client_id: String,
}

/// The catalog's sign-in form.
#[derive(Debug, Deserialize, ToSchema)]
pub struct SignInForm {
    /// An API key of the tenant.
    #[schema(example = "plk_0123456789abcdef_not-a-real-key")]
    pub key: String,
    /// The token of the sign-in page's `plinth_catalog_sign_in` cookie,
    /// which the page puts in its form: a sign-in without it is refused
    /// (`403`).
    #[schema(example = "0123456789abcdef0123456789abcdef")]
    pub sign_in_token: String,
    /// The catalog page to go on to (any other is the catalog).
    #[schema(example = "/catalog?q=flight")]
    pub next: Option<String>,
}

/// A catalog form that carries only its session's form token.
#[derive(Debug, Deserialize, ToSchema)]
pub struct FormTokenForm {
    /// The session's form token (from any catalog page).
    pub form_token: String,
}

/// The catalog's try form: the session's form token, the version, the
/// end user when the call may need confirmation, and each input the
/// agent gives as `input.{name}` (text, as typed).
#[derive(Debug, Deserialize, ToSchema)]
pub struct TryForm {
    /// The session's form token.
    pub form_token: String,
    /// The form's call id (32 hex digits, new on every page): the same
    /// form sent again is answered from its first call's record.
    #[schema(example = "0123456789abcdef0123456789abcdef")]
    pub call_id: String,
    /// The version to call (the current one when left out).
    pub version: Option<u32>,
    /// The end user who confirms the call, when it may need confirmation.
    pub end_user: Option<String>,
}

/// The confirmation page's decision form.
#[derive(Debug, Deserialize, ToSchema)]
pub struct DecisionForm {
    /// The transaction id.
    pub transaction: String,
    /// The page's form token.
    pub form_token: String,
    /// `accept` or `reject`.
    #[schema(pattern = "^(accept|reject)$")]
    pub decision: String,
}

/// A JSON-RPC 2.0 message to the MCP endpoint (its `params` are the
/// method's, as the MCP specification defines them).
#[derive(Debug, Deserialize, ToSchema)]
pub struct McpMessage {
    /// `2.0`.
    pub jsonrpc: String,
    /// The request's id; absent on a notification.
    pub id: Option<Value>,
    /// `initialize`, `server/discover`, `tools/list`, `tools/call`, …
    pub method: String,
    /// The method's parameters.
    pub params: Option<Map<String, Value>>,
}

/// A toolset to create, or its next version.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolsetRequest {
    /// What it is for, for the agent's designer (at most 2,000 characters).
    #[schema(max_length = 2000, example = "Booking trips: flights and the weather where they land")]
    pub description: Option<String>,
    /// Its tools (at most 64), each pinned or following its current version.
    #[schema(max_items = 64)]
    pub tools: Vec<ToolsetEntryRequest>,
}

/// One tool of a toolset to create.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolsetEntryRequest {
    /// The tool's name in the tenant.
    #[schema(example = "book-flight")]
    pub name: String,
    /// The version it is pinned to; absent (or `null`) follows the tool's
    /// current version.
    #[schema(minimum = 1)]
    pub version: Option<u32>,
    /// The designer's description of the tool, served at the toolset's
    /// roots in place of the vendor's (at most 1,999 characters; absent:
    /// the vendor's).
    #[schema(max_length = 1999, example = "Book a seat on a flight the traveller chose.")]
    pub description: Option<String>,
    /// The designer's descriptions of inputs, by name (each at most 2,000
    /// characters; never a private input's).
    #[serde(rename = "inputDescriptions")]
    pub input_descriptions: Option<std::collections::BTreeMap<String, String>>,
    /// The designer's descriptions of outputs, by name.
    #[serde(rename = "outputDescriptions")]
    pub output_descriptions: Option<std::collections::BTreeMap<String, String>>,
    /// The tool version the words were written for: naming the version
    /// served says its new parameters were reviewed. By default: the
    /// newest toolset version's while the words and the pin stay the same,
    /// else the version served.
    #[serde(rename = "wordsFor")]
    #[schema(minimum = 1)]
    pub words_for: Option<u32>,
}

/// What a designer should look at again in a tool's words.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ToolsetWordingReview {
    /// Inputs the served version has that the version the words were
    /// written for lacked, and that the words do not cover (served with the
    /// vendor's text): "new words to review".
    pub new_inputs: Vec<String>,
    /// The same for outputs.
    pub new_outputs: Vec<String>,
    /// Worded inputs the served version does not have (not served).
    pub stale_inputs: Vec<String>,
    /// The same for outputs.
    pub stale_outputs: Vec<String>,
}

/// One tool of a toolset version, as it stands now.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolsetTool {
    /// The tool's name.
    pub name: String,
    /// Its pin; `null` follows the current version.
    pub version: Option<u32>,
    /// The tool's `toolId`, when the tenant has it.
    #[serde(rename = "toolId")]
    pub tool_id: Option<String>,
    /// The version a call reaches now (a retired pin's, for a
    /// `retiredPinned` tool).
    #[serde(rename = "resolvedVersion")]
    pub resolved_version: Option<u32>,
    /// `live`; `retiredPinned` (its pinned version was retired by force: it
    /// cannot be called until a new toolset version changes the pin);
    /// `retired` (followed, every version retired); `missing`.
    #[schema(pattern = "^(live|retiredPinned|retired|missing)$")]
    pub state: String,
    /// The designer's description of the tool, if any.
    pub description: Option<String>,
    /// The designer's descriptions of inputs, by name, if any.
    #[serde(rename = "inputDescriptions")]
    pub input_descriptions: Option<std::collections::BTreeMap<String, String>>,
    /// The designer's descriptions of outputs, by name, if any.
    #[serde(rename = "outputDescriptions")]
    pub output_descriptions: Option<std::collections::BTreeMap<String, String>>,
    /// The tool version the words were checked against when this toolset
    /// version was written (present with words).
    #[serde(rename = "wordsFor")]
    pub words_for: Option<u32>,
    /// With words: what to review now.
    pub review: Option<ToolsetWordingReview>,
}

/// The URLs a toolset is served at.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolsetRoots {
    /// A2T: `…/toolsets/{name}/tools`.
    pub a2t: String,
    /// Open Tool Calling: `…/toolsets/{name}/otc`.
    pub otc: String,
    /// MCP: `…/toolsets/{name}/mcp`.
    pub mcp: String,
    /// The root of this version, pinned: `…/toolsets/{name}@{version}`.
    pub pinned: String,
}

/// A toolset version.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Toolset {
    /// Its name.
    pub name: String,
    /// This version.
    pub version: u32,
    /// Its newest version.
    #[serde(rename = "latestVersion")]
    pub latest_version: Option<u32>,
    /// Every version, oldest first.
    pub versions: Vec<u32>,
    /// What it is for.
    pub description: String,
    /// When this version was made (Unix seconds).
    #[serde(rename = "createdAt")]
    pub created_at: i64,
    /// Its tools, by name.
    pub tools: Vec<ToolsetTool>,
    /// Where it is served.
    pub roots: ToolsetRoots,
}

/// The tenant's toolsets.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolsetList {
    /// Each toolset at its newest version, by name.
    pub items: Vec<Toolset>,
}

/// A provider's settings as a publisher writes them (`PUT
/// /admin/authorization-providers/{id}`; docs/authorization.md): an
/// `issuer` whose metadata names the endpoints, or the endpoints
/// themselves, and Plinth's client at the provider.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ProviderSettings {
    /// What the person is shown; the id when absent.
    #[schema(example = "Inbox")]
    pub display_name: Option<String>,
    /// The provider's issuer identifier: its metadata (RFC 8414, else
    /// OpenID Discovery) is fetched from it, and its `iss` (RFC 9207) must
    /// come back with every code.
    #[schema(example = "https://login.inbox.example")]
    pub issuer: Option<String>,
    /// Overrides the metadata's (or, without an issuer, required).
    pub authorization_endpoint: Option<String>,
    /// Overrides the metadata's (or, without an issuer, required).
    pub token_endpoint: Option<String>,
    /// Overrides the metadata's: where grants are revoked (RFC 7009).
    pub revocation_endpoint: Option<String>,
    /// Plinth's client id at the provider.
    #[schema(example = "plinth-acme")]
    pub client_id: String,
    /// Its client secret: sealed, never read back; left out, the stored
    /// one is kept. Without one Plinth is a public client (PKCE only).
    pub client_secret: Option<String>,
    /// Extra parameters of the authorization request (never one Plinth
    /// sets itself: `redirect_uri`, `state`, `scope`…).
    pub authorization_parameters: Option<std::collections::BTreeMap<String, String>>,
    /// The resource (RFC 8707) the tokens are for.
    pub resource: Option<String>,
    /// The hosts of the API its tokens are for (at most 16:
    /// `api.inbox.example`, `*.inbox.example`, `host:port`): when set, a
    /// person's token goes only to these, whatever a tool declares.
    pub api_hosts: Option<Vec<String>>,
}

/// A tenant's provider as the admin API shows it: its settings without the
/// secret, whether one is set, and when it was last changed.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Provider {
    /// The id tools name in `[[authorization]] provider`.
    #[schema(example = "inbox")]
    pub id: String,
    /// What the person is shown.
    pub display_name: Option<String>,
    /// The issuer identifier.
    pub issuer: Option<String>,
    /// The authorization endpoint, when set explicitly.
    pub authorization_endpoint: Option<String>,
    /// The token endpoint, when set explicitly.
    pub token_endpoint: Option<String>,
    /// The revocation endpoint, when set explicitly.
    pub revocation_endpoint: Option<String>,
    /// Plinth's client id at the provider.
    pub client_id: String,
    /// Whether a client secret is stored (it is never shown).
    pub client_secret_set: bool,
    /// Extra parameters of the authorization request.
    pub authorization_parameters: Option<std::collections::BTreeMap<String, String>>,
    /// The resource (RFC 8707) the tokens are for.
    pub resource: Option<String>,
    /// The hosts of the API its tokens are for, when set.
    pub api_hosts: Option<Vec<String>>,
    /// When it was last set (Unix seconds).
    pub updated_at: i64,
}

/// A tenant's providers.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProviderList {
    /// Each provider, by id.
    pub providers: Vec<Provider>,
}

/// An account a person connected: their grant at a provider, never its
/// token.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Connection {
    /// The provider's id.
    pub provider: String,
    /// What the person is shown it as.
    pub provider_name: String,
    /// The scopes granted.
    pub scopes: Vec<String>,
    /// When its access token expires (Unix seconds), if the provider said.
    pub expires_at: Option<i64>,
    /// When the person connected it (Unix seconds).
    pub connected_at: i64,
    /// Whether Plinth can refresh its token (the provider gave a refresh
    /// token).
    pub refreshable: bool,
}

/// A person's connected accounts.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConnectionList {
    /// Each account, by provider.
    pub connections: Vec<Connection>,
}

/// Where an authorization link is, for the agent that polls its
/// `check_url`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ConnectionStatus {
    /// `pending` until the person is back from the provider; then
    /// `connected` (call the tool again) or `failed` (the link expired, or
    /// the sign-in failed: `error` says why; the next call gets a new link).
    #[schema(pattern = "^(pending|connected|failed)$")]
    pub state: String,
    /// The provider's id.
    pub provider: String,
    /// When the link stops working (Unix seconds).
    pub expires_at: i64,
    /// Why it failed.
    pub error: Option<String>,
}

/// The connections pages' forms (Continue, Revoke): the page's form token.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConnectionForm {
    /// The page's form token.
    pub form_token: String,
}

/// The failures the link page and its Continue share, as pages.
#[derive(IntoResponses)]
pub enum LinkPageFailures {
    /// No such link in this tenant.
    #[response(status = 404, content_type = "text/html")]
    NotFound(String),
    /// `provider_failed`: the provider cannot be reached, or answered what
    /// OAuth does not allow.
    #[response(status = 502, content_type = "text/html", headers(("Retry-After" = u64, description = "Seconds")))]
    Provider(String),
    /// The link cannot be read now (`storage_failed`).
    #[response(status = 503, content_type = "text/html", headers(("Retry-After" = u64, description = "Seconds")))]
    Unavailable(String),
}

/// A connections page that cannot be served now, as a page.
#[derive(IntoResponses)]
pub enum PageUnavailable {
    /// What it needs cannot be read or stored now (`storage_failed`).
    #[response(status = 503, content_type = "text/html", headers(("Retry-After" = u64, description = "Seconds")))]
    Unavailable(String),
}
