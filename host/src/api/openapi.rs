//! The OpenAPI 3.1 document of the whole HTTP surface, served at
//! `GET /openapi.json` and committed as `docs/openapi.json`.
//!
//! Generated from the code, in two layers (docs/openapi.md says why):
//!
//! 1. Each handler carries a `#[utoipa::path]` annotation: its summary (the
//!    handler's doc comment), parameters, request body and every answer the
//!    handler itself sends, with the types below (or the core's own, such as
//!    [`crate::tenancy::Quotas`]) as schemas. The OTC operations use the OTC
//!    1.0 document's own schemas, included from `tests/specs/`.
//! 2. The route table ([`super::endpoints`]) then adds what the layers in
//!    front of every handler decide: the security requirement of the route's
//!    [`Access`], the `401`/`403`/`404` answers it may give, `408` for a body
//!    that does not arrive, and the servers (every tenant's root, or the
//!    server's only, by [`Scope`]).
//!
//! [`problems`] lists every route the annotations miss and every annotation
//! no route serves; a unit test keeps it empty, so the document and the
//! router cannot drift apart.

use super::{Access, Endpoint, Scope};
use axum::http::Method;
use serde_json::{Map, Value, json};
use utoipa::OpenApi;

/// The OTC 1.0 document Plinth's OTC door follows (docs/otc.md), whose
/// schemas describe the OTC operations here.
const OTC_DOCUMENT: &str = include_str!("../../../tests/specs/otc-openapi-1.0.json");

/// The prefix of the OTC document's schemas among this document's.
const OTC_PREFIX: &str = "Otc";

/// The name of the security scheme: a Plinth API key as a bearer token.
const API_KEY: &str = "apiKey";

/// The name of the catalog pages' security scheme: a catalog session's
/// cookie.
const CATALOG_SESSION: &str = "catalogSession";

/// Every annotated handler, and the schemas the annotations do not reach.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Plinth",
        description = "A host for AI-agent tools: WebAssembly components served over A2T, Open Tool Calling and MCP, with CHEQ human confirmation and an admin API. Every path of a tenant is served under `/` for the tenant `default` and under `/t/{tenant}/` for every tenant; server-wide paths only under `/`. The `x-plinth-access` extension of each operation names the access it needs: the least role of its key (`consumer` < `publisher` < `operator`), or none. Errors are `{\"error\": {\"code\", \"message\", …}}` (OTC errors have the OTC document's shapes); a `5xx` is temporary and carries `Retry-After`, a `4xx` is not (docs/a2t.md, \"Status codes\").",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    paths(
        super::health,
        super::ready,
        super::jwks,
        super::metrics,
        openapi_json,
        super::a2t::list_tools,
        super::a2t::get_tool,
        super::a2t::invoke_current,
        super::a2t::list_versions,
        super::a2t::get_version,
        super::a2t::invoke_version,
        super::otc::health,
        super::otc::list_tools,
        super::otc::call_tool,
        super::cheq::get_transaction,
        super::cheq::decide_transaction,
        super::cheq::get_result,
        super::cheq::confirm_page,
        super::cheq::login,
        super::cheq::decide,
        super::cheq::evidence,
        super::cheq::put_end_user,
        super::cheq::delete_end_user,
        super::cheq::get_confirmation_server,
        super::cheq::put_confirmation_server,
        super::cheq::delete_confirmation_server,
        super::cheq::get_policy,
        super::cheq::put_policy,
        super::cheq::delete_policy,
        super::admin::deploy,
        super::admin::retire,
        super::console::logs,
        super::console::usage,
        super::admin::get_trust_policy,
        super::admin::put_trust_policy,
        super::admin::refused_by_trust_policy,
        super::admin::list_registries,
        super::admin::put_registry,
        super::admin::delete_registry,
        super::admin::list_secrets,
        super::admin::put_secret,
        super::admin::delete_secret,
        super::admin::list_config,
        super::admin::put_config,
        super::admin::delete_config,
        super::admin::own_tenant,
        super::admin::list_tenants,
        super::admin::create_tenant,
        super::admin::get_tenant,
        super::admin::update_tenant,
        super::admin::list_keys,
        super::admin::create_key,
        super::admin::revoke_key,
        super::admin::audit,
        super::pages::stylesheet,
        super::catalog::sign_in_form,
        super::catalog::sign_in,
        super::catalog::sign_out,
        super::catalog::catalog,
        super::catalog::tool,
        super::catalog::diff,
        super::catalog::try_form,
        super::catalog::try_call,
        super::catalog::confirmation,
        super::oauth::resource_metadata_here,
        super::oauth::default_resource_metadata,
        super::oauth::tenant_resource_metadata,
        super::oauth::server_metadata_here,
        super::oauth::tenant_server_metadata,
        super::oauth::authorize_form,
        super::oauth::authorize,
        super::oauth::token,
        super::oauth::register,
        super::oauth::revoke,
        super::oauth::put_tenant_oauth,
    ),
    // What `IntoResponses` and `add_mcp` refer to (utoipa collects the rest
    // from the annotations).
    components(schemas(ErrorBody, InvocationResult, UriPack, McpMessage)),
    tags(
        (name = "A2T", description = "Enumeration and invocation (draft-rosenberg-aiproto-a2t-00); docs/a2t.md"),
        (name = "OTC", description = "Open Tool Calling 1.0; docs/otc.md"),
        (name = "MCP", description = "Model Context Protocol, streamable HTTP, stateless; docs/mcp.md"),
        (name = "CHEQ", description = "Human confirmation (draft-rosenberg-aiproto-cheq-00): the resource and result URIs and the built-in confirmation server; docs/cheq.md"),
        (name = "Admin", description = "Tools, secrets, config, tenants, keys, audit; docs/deploying.md and docs/tenancy.md"),
        (name = "Server", description = "Health, readiness, keys, metrics and this document"),
        (name = "OAuth", description = "OAuth 2.1 for the MCP door: each tenant's MCP URL is a protected resource, each tenant's root an authorization server whose people are its end users; docs/oauth.md"),
        (name = "Catalog", description = "The designer's catalog: pages for people, signed in with an API key of the tenant; docs/catalog.md"),
    )
)]
struct Annotated;

pub use schemas::*;

/// What the server sends and takes, as schemas. Each is closed
/// (`additionalProperties: false`, from `deny_unknown_fields`) where the
/// server sends exactly these fields, so that schemathesis
/// (tests/e2e/openapi.rs) fails on a field the code adds without the
/// document; the unit tests below read real answers into them.
pub mod schemas {
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
        /// `ok`, `tool_error`, or the code of what stopped the call.
        pub outcome: String,
        /// How long it took, in milliseconds.
        pub duration_ms: f64,
        /// The tool's log lines for the call (redacted, cut at 4 KiB each).
        pub lines: Vec<ConsoleLine>,
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
        /// `confirmation_cannot_wait` (with `parameter` when it is about one).
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
        /// `request_too_large`: the body is over the server's limit.
        #[response(status = 413)]
        TooLarge(ErrorBody),
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
}

/// `GET /openapi.json`: this document.
///
/// Open to anyone: it describes the API, which is the same for every
/// tenant, and no tenant's tools, keys or data (docs/openapi.md).
#[utoipa::path(get, summary = "This document", description = "The OpenAPI 3.1 document of this server. Open to anyone: it describes the API, which is the same for every tenant, and no tenant's tools, keys or data (docs/openapi.md).", path = "/openapi.json", tag = "Server", responses(
    (status = 200, description = "The OpenAPI 3.1 document of this server", content_type = "application/json", body = Object),
))]
pub(super) async fn openapi_json() -> axum::response::Response {
    use axum::response::IntoResponse;
    let headers = [(axum::http::header::CONTENT_TYPE, "application/json")];
    (headers, rendered().as_str()).into_response()
}

/// The document as served, rendered once.
pub fn rendered() -> &'static String {
    static RENDERED: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    RENDERED.get_or_init(|| {
        let mut text = serde_json::to_string_pretty(&document().0).unwrap_or_default();
        text.push('\n');
        text
    })
}

/// The document, and what is wrong with it (see [`problems`]).
fn document() -> (Value, Vec<String>) {
    let mut doc = serde_json::to_value(Annotated::openapi()).unwrap_or_default();
    let mut problems = Vec::new();
    add_otc_schemas(&mut doc);
    add_mcp(&mut doc);
    add_aliases(&mut doc);
    add_router_answers(&mut doc);
    doc["servers"] = json!([
        { "url": "/", "description": "the tenant `default` (and every server-wide path)" },
        {
            "url": "/t/{tenant}",
            "description": "any tenant's platform root (not for server-wide paths)",
            "variables": { "tenant": { "default": "default", "description": "the tenant's name" } },
        },
    ]);
    doc["components"]["securitySchemes"] = json!({
        API_KEY: {
            "type": "http",
            "scheme": "bearer",
            "description": "A Plinth API key (`plk_…`, or the operator key the server was started with): `Authorization: Bearer <key>`. Its role (consumer < publisher < operator) decides what it may do; see each operation's `x-plinth-access`.",
        },
        CATALOG_SESSION: {
            "type": "apiKey",
            "in": "cookie",
            "name": "plinth_catalog_session",
            "description": "The catalog pages' session, opened by signing in with an API key of the tenant (`POST catalog/sign-in`); scoped to that root's catalog. A bearer key is not read by these pages.",
        },
    });
    let endpoints = super::endpoints();
    let mut applied = std::collections::HashSet::new();
    for endpoint in &endpoints {
        // JSON-RPC methods share one operation, whose security is the
        // least any of them needs (`x-plinth-access` names each one's).
        let endpoint = match endpoint.rpc_method {
            Some(_) => endpoints
                .iter()
                .filter(|e| e.path == endpoint.path && e.method == endpoint.method)
                .min_by_key(|e| e.access.least_role())
                .unwrap_or(endpoint),
            None => endpoint,
        };
        if !applied.insert((endpoint.method.clone(), endpoint.path)) {
            continue;
        }
        let path = documented_path(&endpoint.method, endpoint.path);
        let method = endpoint.method.as_str().to_ascii_lowercase();
        match doc["paths"].get_mut(&path).and_then(|item| item.get_mut(&method)) {
            Some(operation) => apply_access(operation, endpoint, &endpoints),
            None => {
                problems.push(format!("{} {} (routed as {}) is not described", endpoint.method, path, endpoint.path))
            }
        }
    }
    // In path order, wherever they were described.
    let mut described = doc["paths"].as_object().cloned().unwrap_or_default();
    described.sort_keys();
    doc["paths"] = Value::Object(described.clone());
    for (path, item) in &described {
        for method in item.as_object().into_iter().flat_map(|m| m.keys()) {
            let routed = endpoints
                .iter()
                .any(|e| e.method.as_str().eq_ignore_ascii_case(method) && documented_path(&e.method, e.path) == *path);
            if !routed {
                problems.push(format!("{} {path} is described but not routed", method.to_uppercase()));
            }
        }
    }
    (doc, problems)
}

/// What keeps the document from describing exactly the routes served: routes
/// without an annotation, annotations without a route.
pub fn problems() -> Vec<String> {
    document().1
}

/// The path an endpoint is documented at. A route parameter ending in
/// `_ref` is an id that may carry A2T's `:invoke` suffix (axum routes whole
/// segments only): the document names it without `_ref`, and a `POST` to it
/// is the invocation, `…/{tool_id}:invoke`.
pub fn documented_path(method: &Method, path: &str) -> String {
    let mut segments: Vec<String> = path.split('/').map(str::to_string).collect();
    let last = segments.len() - 1;
    for (i, segment) in segments.iter_mut().enumerate() {
        if let Some(name) = segment.strip_prefix('{').and_then(|s| s.strip_suffix("_ref}")) {
            let name = if name == "tool" { "tool_id" } else { name };
            *segment =
                if i == last && *method == Method::POST { format!("{{{name}}}:invoke") } else { format!("{{{name}}}") };
        }
    }
    segments.join("/")
}

/// The least role of an access level, as the document names it.
fn role_name(access: Access) -> Option<&'static str> {
    access.least_role().map(|role| role.as_str())
}

fn access_name(access: Access) -> &'static str {
    match access {
        Access::Open => "open",
        Access::Enumerate => "enumerate",
        Access::Invoke => "invoke",
        Access::Publish => "publish",
        Access::Audit => "audit",
        Access::Operate => "operate",
        Access::Catalog => "catalog",
    }
}

/// Adds to an operation what the route table decides for its endpoint.
fn apply_access(operation: &mut Value, endpoint: &Endpoint, endpoints: &[Endpoint]) {
    let otc = endpoint.path.starts_with("/otc/");
    let error = if otc {
        json!({ "$ref": format!("#/components/schemas/{OTC_PREFIX}ServerErrorResponse") })
    } else {
        json!({ "$ref": "#/components/schemas/ErrorBody" })
    };
    let html = operation["responses"]
        .as_object()
        .is_some_and(|r| r.values().any(|answer| answer["content"].get("text/html").is_some()));
    let mut access = json!({ "access": access_name(endpoint.access), "scope": match endpoint.scope {
        Scope::Tenant => "tenant",
        Scope::Server => "server",
    } });
    let least = role_name(endpoint.access);
    access["leastRole"] = least.into();
    if endpoint.path == "/mcp" {
        // Decided per JSON-RPC method on POST.
        let methods: Map<String, Value> = endpoints
            .iter()
            .filter(|e| e.path == "/mcp")
            .filter_map(|e| Some((e.rpc_method?.to_string(), role_name(e.access).into())))
            .collect();
        if endpoint.method == Method::POST {
            access["leastRoleByRpcMethod"] = methods.into();
        }
    }
    if endpoint.access == Access::Enumerate {
        access["publicEnumeration"] = "a tenant that made its enumeration public lists its tools without a key".into();
    }
    operation["x-plinth-access"] = access;
    if endpoint.access == Access::Catalog {
        return apply_catalog_access(operation, endpoint);
    }
    let who = match (endpoint.access, endpoint.scope) {
        (Access::Open, _) => "Open to anyone: no key is needed.".to_string(),
        (Access::Enumerate, _) => {
            "Needs a key of the tenant (any role) or an operator key, or none when the tenant's enumeration is public."
                .to_string()
        }
        (Access::Invoke, _) => "Needs a key of the tenant (any role) or an operator key.".to_string(),
        (Access::Audit, _) => {
            "Needs a publisher key (its own tenant's entries) or an operator key (every tenant's).".to_string()
        }
        (access, Scope::Tenant) => {
            format!("Needs a {} key of the tenant, or an operator key.", role_name(access).unwrap_or(""))
        }
        (access, Scope::Server) => format!("Needs an {} key.", role_name(access).unwrap_or("")),
    };
    let description = operation["description"].as_str().map(str::to_string);
    operation["description"] = match description {
        Some(text) if !text.is_empty() => format!("{text}\n\n{who}"),
        _ => who,
    }
    .into();
    if endpoint.scope == Scope::Server {
        operation["servers"] = json!([{ "url": "/", "description": "the server's root only" }]);
    }
    let Some(least) = least else { return };
    operation["security"] =
        if endpoint.access == Access::Enumerate { json!([{ API_KEY: [] }, {}]) } else { json!([{ API_KEY: [] }]) };
    let responses = &mut operation["responses"];
    let error_answer = |description: &str| {
        if html {
            // The pages' own refusals are pages; the access layer's are JSON.
            json!({ "description": description, "content": {
                "application/json": { "schema": error.clone() },
                "text/html": { "schema": { "type": "string" } },
            } })
        } else {
            json!({ "description": description, "content": { "application/json": { "schema": error.clone() } } })
        }
    };
    let mut unauthorized =
        error_answer("`unauthorized`: no key, or an unknown or revoked one (with `WWW-Authenticate: Bearer`)");
    unauthorized["headers"] = json!({ "WWW-Authenticate": {
        "description": "`Bearer`, or `Bearer error=\"invalid_token\"` for a key that is not valid",
        "schema": { "type": "string" },
    } });
    add_answer(responses, "401", unauthorized);
    if least != "consumer" || endpoint.path == "/mcp" {
        add_answer(responses, "403", error_answer("`forbidden`: the key's role may not do this"));
    }
    if endpoint.scope == Scope::Tenant {
        add_answer(
            responses,
            "404",
            error_answer("`not_found`: the tenant does not exist, or the key is another tenant's (the two look alike)"),
        );
    }
}

/// What the access layer decides for a catalog page: a catalog session of
/// the tenant (its cookie), else the sign-in page; a form without its
/// session's token is refused. Its refusals are pages.
fn apply_catalog_access(operation: &mut Value, endpoint: &Endpoint) {
    let who = "Needs a catalog session of the tenant: sign in at `catalog/sign-in` with any of its keys (a consumer key is enough). Forms carry the session's form token.";
    let description = operation["description"].as_str().map(str::to_string);
    operation["description"] = match description {
        Some(text) if !text.is_empty() => format!("{text}\n\n{who}"),
        _ => who.to_string(),
    }
    .into();
    operation["security"] = json!([{ CATALOG_SESSION: [] }]);
    let page = |description: &str| {
        json!({ "description": description, "content": { "text/html": { "schema": { "type": "string" } } },
            "headers": { "Plinth-Error-Code": { "description": "The error's code", "schema": { "type": "string" } } } })
    };
    let responses = &mut operation["responses"];
    add_answer(
        responses,
        "401",
        page(
            "`unauthorized`: no live catalog session of this tenant (none, expired, another tenant's, or its key was revoked): the sign-in page",
        ),
    );
    if endpoint.method != Method::GET {
        add_answer(
            responses,
            "403",
            page("`forbidden`: the form does not carry the session's form token, or came from another site"),
        );
    }
    let mut unavailable = page("`storage_failed`: the session could not be checked");
    unavailable["headers"]["Retry-After"] = json!({ "description": "Seconds", "schema": { "type": "integer" } });
    add_answer(responses, "503", unavailable);
}

/// Adds `answer` as the response for `status`, or adds its description to
/// the one the handler's annotation gives.
fn add_answer(responses: &mut Value, status: &str, answer: Value) {
    match responses.get_mut(status) {
        Some(existing) => {
            let theirs = answer["description"].as_str().unwrap_or_default();
            let ours = existing["description"].as_str().unwrap_or_default().to_string();
            existing["description"] = format!("{ours}; or {theirs}").into();
            // The access layer answers JSON, whatever the handler's type.
            if let (Some(content), Some(json)) =
                (existing["content"].as_object_mut(), answer["content"].get("application/json"))
            {
                content.entry("application/json").or_insert_with(|| json.clone());
            }
            if existing.get("headers").is_none() && answer.get("headers").is_some() {
                existing["headers"] = answer["headers"].clone();
            }
        }
        None => responses[status] = answer,
    }
}

/// Routes served by the handler of another (method, path), whose
/// annotation describes the first: each alias gets a copy of that operation,
/// with its own id and, where the alias takes what the first does not, its
/// request body.
const ALIASES: [(&str, &str, &str, &str, &str); 3] = [
    // OTC: the OpenAPI document's path, and the RFC's examples' path.
    ("post", "/otc/tools/call", "post", "/otc/call", "otc_call_tool_rfc_path"),
    // CHEQ: the resource URI, and the draft's `GET {resource-server}/cheq`.
    ("get", "/cheq/transactions/{id}", "get", "/cheq/transactions/{id}/cheq", "get_transaction_cheq"),
    // CHEQ: the confirmation URI, opened by a link or posted to.
    ("get", "/cheq/confirm", "post", "/cheq/confirm", "confirm_page_post"),
];

fn add_aliases(doc: &mut Value) {
    for (method, path, alias_method, alias_path, operation_id) in ALIASES {
        let mut operation = doc["paths"][path][method].clone();
        if operation.is_null() {
            continue; // reported by `problems` as a route without a description
        }
        operation["operationId"] = operation_id.into();
        if alias_method == "post" && operation.get("requestBody").is_none() {
            operation["requestBody"] = json!({
                "description": "The resource URI, as the user application passes it: a form with `resource_uri` (or the URI pack's `resource uri`), the URI itself as the body, or the URI pack as JSON",
                "required": false,
                "content": {
                    "application/x-www-form-urlencoded": { "schema": { "type": "object", "properties": { "resource_uri": { "type": "string" } } } },
                    "application/json": { "schema": { "type": "object", "properties": { "resource uri": { "type": "string" } } } },
                    "text/plain": { "schema": { "type": "string" } },
                },
            });
            let responses = &mut operation["responses"];
            responses["408"] = json!({ "description": "`request_timeout`: the body did not arrive in time", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/ErrorBody" } } } });
        }
        doc["paths"][alias_path][alias_method] = operation;
    }
}

/// Answers the router gives before any handler runs, on every operation they
/// can reach (`error::as_error_body` shapes them): `400` for a path
/// parameter that is not UTF-8 once percent-decoded, and for a request with
/// a body, `408` when it does not arrive in time and `413` over the route's
/// limit.
fn add_router_answers(doc: &mut Value) {
    let error = |description: &str, otc: bool| {
        let schema = if otc { format!("{OTC_PREFIX}ServerErrorResponse") } else { "ErrorBody".to_string() };
        json!({ "description": description, "content": { "application/json": {
            "schema": { "$ref": format!("#/components/schemas/{schema}") },
        } } })
    };
    let Some(paths) = doc["paths"].as_object_mut() else { return };
    for (path, item) in paths.iter_mut() {
        let otc = path.starts_with("/otc/");
        for operation in item.as_object_mut().into_iter().flat_map(|item| item.values_mut()) {
            let has_path_parameter =
                operation["parameters"].as_array().is_some_and(|p| p.iter().any(|p| p["in"] == "path"));
            let has_body = operation.get("requestBody").is_some();
            let responses = &mut operation["responses"];
            if has_path_parameter {
                const NOT_UTF8: &str = "`invalid_request`: a path parameter is not UTF-8 once percent-decoded";
                match responses.get_mut("400") {
                    Some(existing) => {
                        let ours = existing["description"].as_str().unwrap_or_default();
                        existing["description"] = format!("{ours}; {NOT_UTF8}").into();
                    }
                    None => responses["400"] = error(NOT_UTF8, otc),
                }
            }
            if has_body {
                for (status, description) in [
                    ("408", "`request_timeout`: the body did not arrive in time"),
                    ("413", "`request_too_large`: the body is over the endpoint's limit"),
                ] {
                    if responses.get(status).is_none() {
                        responses[status] = error(description, otc);
                    }
                }
            }
        }
    }
}

/// The OTC document's schemas, under [`OTC_PREFIX`], and the envelopes its
/// operations define inline, named.
fn add_otc_schemas(doc: &mut Value) {
    let otc: Value = serde_json::from_str(OTC_DOCUMENT).unwrap_or_default();
    let renamed = |value: &Value| {
        let text = value.to_string().replace("#/components/schemas/", &format!("#/components/schemas/{OTC_PREFIX}"));
        serde_json::from_str::<Value>(&text).unwrap_or_default()
    };
    let schemas = &mut doc["components"]["schemas"];
    for (name, schema) in otc["components"]["schemas"].as_object().into_iter().flatten() {
        schemas[format!("{OTC_PREFIX}{name}")] = renamed(schema);
    }
    // The OTC document's one defect (docs/otc.md): `CallToolResponse` puts
    // `value` and `error` in its `oneOf` branches and
    // `additionalProperties: false` beside them, which in JSON Schema
    // 2020-12 refuses every answer with either. It means
    // `unevaluatedProperties: false`, which sees the branches.
    if let Some(response) = schemas[format!("{OTC_PREFIX}CallToolResponse")].as_object_mut()
        && response.remove("additionalProperties").is_some()
    {
        response.insert("unevaluatedProperties".into(), false.into());
    }
    let ok = |path: &str, method: &str| {
        &otc["paths"][path][method]["responses"]["200"]["content"]["application/json"]["schema"]
    };
    schemas[format!("{OTC_PREFIX}ToolList")] = renamed(ok("/tools", "get"));
    schemas[format!("{OTC_PREFIX}CallToolResult")] = renamed(ok("/tools/call", "post"));
    schemas[format!("{OTC_PREFIX}CallToolRequestBody")] =
        renamed(&otc["paths"]["/tools/call"]["post"]["requestBody"]["content"]["application/json"]["schema"]);
}

/// The MCP endpoint: rmcp's service, not a handler, so described here.
fn add_mcp(doc: &mut Value) {
    let error = json!({ "application/json": { "schema": { "$ref": "#/components/schemas/ErrorBody" } } });
    let refused = |description: &str| json!({ "description": description, "content": error.clone() });
    let rpc_answer = json!({
        "application/json": { "schema": { "type": "object", "description": "a JSON-RPC 2.0 response (`result` or `error`)" } },
        "text/event-stream": { "schema": { "type": "string", "description": "`subscriptions/listen`: JSON-RPC notifications as server-sent events" } },
    });
    let post = json!({
        "tags": ["MCP"],
        "summary": "A JSON-RPC request or notification (MCP 2026-07-28, and 2025-11-25 clients)",
        "description": "The Model Context Protocol over streamable HTTP, stateless (docs/mcp.md). `Accept` must name `application/json` and `text/event-stream`; `Host` and `Origin` must be this server's.",
        "operationId": "mcp_post",
        "requestBody": { "required": true, "content": { "application/json": { "schema": { "$ref": "#/components/schemas/McpMessage" } } } },
        "responses": {
            "200": { "description": "The JSON-RPC response (a JSON-RPC error too: MCP errors are not HTTP errors)", "content": rpc_answer },
            "202": { "description": "A notification or response, accepted" },
            "400": refused("`invalid_request`: not a JSON-RPC message, or a header the protocol requires is missing or wrong"),
            "403": refused("`forbidden`: `Host` or `Origin` is not this server's"),
            "406": refused("`not_acceptable`: `Accept` does not name both `application/json` and `text/event-stream`"),
            "408": refused("`request_timeout`: the body did not arrive in time"),
            "413": refused("`request_too_large`: the body is over the server's limit"),
            "415": refused("`unsupported_media_type`: the body is not `application/json`"),
        },
    });
    let not_used = |operation_id: &str, description: &str| {
        json!({
            "tags": ["MCP"],
            "summary": description,
            "operationId": operation_id,
            "responses": {
                "405": refused("`method_not_allowed`: the stateless server opens no stream and keeps no session"),
            },
        })
    };
    doc["paths"]["/mcp"] = json!({
        "post": post,
        "get": not_used("mcp_get", "Not used: a stateless MCP server opens no stream on GET"),
        "delete": not_used("mcp_delete", "Not used: a stateless MCP server keeps no session to end"),
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_is_described_and_every_description_routed() {
        let problems = problems();
        assert!(
            problems.is_empty(),
            "the OpenAPI document and the route table (api::endpoints) disagree; annotate the handler with #[utoipa::path] and list it in api/openapi.rs, or remove the stale annotation:\n{}",
            problems.join("\n")
        );
    }

    #[test]
    fn every_operation_names_the_access_the_route_table_decides() {
        let doc = document().0;
        let mut seen = 0;
        for endpoint in super::super::endpoints() {
            let path = documented_path(&endpoint.method, endpoint.path);
            let operation = &doc["paths"][&path][endpoint.method.as_str().to_ascii_lowercase()];
            let access = &operation["x-plinth-access"];
            assert_eq!(
                access["access"],
                access_name(if endpoint.rpc_method.is_some() { Access::Enumerate } else { endpoint.access }),
                "{path}"
            );
            match endpoint.access.least_role() {
                None => assert!(operation.get("security").is_none(), "{path} is open"),
                Some(_) if endpoint.access == Access::Catalog => {
                    assert_eq!(operation["security"], json!([{ CATALOG_SESSION: [] }]), "{path}");
                    assert!(
                        operation["responses"]["401"]["content"]["text/html"].is_object(),
                        "{path}: the sign-in page"
                    );
                }
                Some(_) => {
                    let schemes = operation["security"].as_array().unwrap();
                    assert_eq!(schemes[0], json!({ API_KEY: [] }), "{path}");
                    // Only enumeration may go without a key.
                    assert_eq!(
                        schemes.len() == 2,
                        endpoint.access == Access::Enumerate || endpoint.path == "/mcp",
                        "{path}"
                    );
                    assert!(operation["responses"]["401"].is_object(), "{path} documents its 401");
                }
            }
            if let Some(rpc) = endpoint.rpc_method {
                assert_eq!(access["leastRoleByRpcMethod"][rpc], role_name(endpoint.access).unwrap(), "{rpc}");
            }
            if endpoint.scope == Scope::Server {
                assert_eq!(operation["servers"], json!([{ "url": "/", "description": "the server's root only" }]));
            }
            seen += 1;
        }
        assert!(seen > 40, "the route table lost its routes ({seen})");
    }

    #[test]
    fn invocation_routes_are_documented_as_the_a2t_draft_writes_them() {
        assert_eq!(documented_path(&Method::POST, "/tools/{tool_ref}"), "/tools/{tool_id}:invoke");
        assert_eq!(documented_path(&Method::GET, "/tools/{tool_ref}"), "/tools/{tool_id}");
        assert_eq!(
            documented_path(&Method::POST, "/tools/{tool_id}/versions/{version_ref}"),
            "/tools/{tool_id}/versions/{version}:invoke"
        );
        assert_eq!(documented_path(&Method::GET, "/admin/keys/{id}"), "/admin/keys/{id}");
    }

    #[test]
    fn the_otc_operations_use_the_otc_documents_schemas() {
        let doc = document().0;
        let text = doc.to_string();
        for name in ["ToolDefinition", "CallToolRequest", "CallToolResponse", "ServerErrorResponse"] {
            assert!(doc["components"]["schemas"][format!("{OTC_PREFIX}{name}")].is_object(), "{name}");
        }
        let response = &doc["components"]["schemas"][format!("{OTC_PREFIX}CallToolResponse")];
        assert_eq!(
            (response.get("additionalProperties"), &response["unevaluatedProperties"]),
            (None, &json!(false)),
            "the OTC document's defect is mended"
        );
        // Every reference resolves within the document.
        for reference in text.split("\"$ref\":\"").skip(1) {
            let target = reference.split('"').next().unwrap();
            let name = target.strip_prefix("#/components/schemas/").unwrap_or_else(|| panic!("{target}"));
            assert!(doc["components"]["schemas"][name].is_object(), "{target} does not resolve");
        }
    }

    #[test]
    fn operation_ids_are_unique_and_every_link_names_one() {
        let doc = document().0;
        let operations: Vec<&Value> =
            doc["paths"].as_object().unwrap().values().flat_map(|item| item.as_object().unwrap().values()).collect();
        let mut ids: Vec<&str> = operations.iter().map(|o| o["operationId"].as_str().unwrap()).collect();
        let count = ids.len();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), count, "operationIds repeat");
        let mut links = 0;
        for operation in operations {
            for answer in operation["responses"].as_object().unwrap().values() {
                for link in answer["links"].as_object().into_iter().flat_map(|l| l.values()) {
                    let target = link["operationId"].as_str().unwrap();
                    assert!(ids.contains(&target), "a link names `{target}`, which is no operation");
                    links += 1;
                }
            }
        }
        assert!(links >= 10, "the links from listings to the resources they list are gone ({links})");
    }
}
