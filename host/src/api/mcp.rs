//! The Model Context Protocol front door: the same tools, served to MCP
//! clients at `/mcp` under every platform root.
//!
//! A translation only, like the other doors: rmcp (the official SDK) speaks
//! JSON-RPC over streamable HTTP and checks the protocol's own rules
//! (revisions, `Mcp-Method`/`Mcp-Name` headers, Host and Origin); this
//! module maps `tools/list` and `tools/call` onto the core. It serves the
//! 2026-07-28 revision and, through rmcp, clients still on 2025-11-25.
//! Stateless: no session is kept between requests, so any replica of a fleet
//! can answer any of them.
//!
//! - Access is decided per JSON-RPC method ([`access_of`]): `tools/call`
//!   needs a key that may invoke, everything else one that may enumerate.
//! - Calls that need their end user's confirmation answer with the link to
//!   the confirmation page: a URL-mode elicitation in an `input_required`
//!   result with a sealed `requestState` for 2026-07-28 clients that open
//!   URLs; a tool error whose text carries the link for those that do not;
//!   error -32042 (the link in its message too) for 2025-11-25 ones, which,
//!   like the second kind, repeat the call to get its outcome. Only the
//!   signed CHEQ decides; the client's own "accept" never does.
//! - With an OAuth token, the person who signed in is every call's end user.
//!
//! The mapping and the choices behind it are in `docs/mcp.md`.

mod direct;
mod listeners;
use listeners::Listeners;

use super::access::{Access, Scope};
use super::auth;
pub use super::listings::meta;
use super::listings::tool_entry;
use super::{ApiError, ApiOptions, AppState, Caller};
use crate::door::FrontDoor;
use crate::host::{Call, ConfirmationNeed, InvokeError, PendingConfirmation, State as TxState, ToolHost};
use crate::invocation::{InputError, ToolResult};
use crate::registry::{Tool, ToolVersion};
use crate::telemetry::CallerTrace;
use crate::tenancy::unix_now;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rmcp::ErrorData;
use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorCode, Implementation,
    InputRequest, InputRequests, InputRequiredResult, JsonObject, ListToolsResult, MetaObject, PaginatedRequestParams,
    ProtocolVersion, ServerCapabilities, ServerConfig, SubscriptionFilter,
};
use rmcp::service::{RequestContext, RoleServer, SubscriptionContext};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

/// Tools per `tools/list` page.
const PAGE_SIZE: usize = 100;
/// The key of the confirmation in an `input_required` result.
const CONFIRMATION_REQUEST: &str = "confirmation";
/// The input requests of a call that needs its end user's grants: one per
/// provider, `authorization:{provider}`.
const AUTHORIZATION_REQUEST: &str = "authorization:";
/// JSON-RPC error of 2025-11-25 for a request that needs a URL elicitation.
const URL_ELICITATION_REQUIRED: i32 = -32042;
/// How long a retry waits for an accepted call that is still running (the
/// default tool deadline is 5 s; an operator may raise it).
const RUNNING_WAIT: Duration = Duration::from_secs(60);
/// How long after its confirmation window a call's outcome can still be
/// fetched by the retry (a sealed state's lifetime past the window).
const OUTCOME_KEPT: Duration = Duration::from_secs(24 * 3600);
/// Calls of 2025-11-25 clients waiting for confirmation remembered per
/// tenant, so that their repetition is answered from the transaction (past
/// this many, a repetition starts a new transaction, which needs its own
/// confirmation: safe, if less convenient).
const MAX_LEGACY_PENDING_PER_TENANT: usize = 1_000;
/// How long one `subscriptions/listen` stream lasts; the client opens the
/// next one (and its key is checked again).
const LISTEN_LIFETIME: Duration = Duration::from_secs(10 * 60);
/// How often a listening stream's key is checked (a revoked key ends it).
const LISTEN_KEY_CHECK: Duration = Duration::from_secs(30);

/// Who may call a JSON-RPC method: invoking needs a key that may invoke;
/// listing, discovery and the protocol's own methods one that may
/// enumerate (a public tenant's listing needs none).
pub fn access_of(rpc_method: &str) -> Access {
    match rpc_method {
        "tools/call" => Access::Invoke,
        _ => Access::Enumerate,
    }
}

/// The JSON-RPC methods the authorization matrix walks.
pub const RPC_METHODS: [&str; 5] =
    ["initialize", "server/discover", "tools/list", "tools/call", "subscriptions/listen"];

/// How the MCP door is set up: where requests may come from, the key that
/// seals request state, and the server's stop signal.
#[derive(Clone)]
pub struct McpOptions {
    /// `Host` values accepted (DNS-rebinding protection): `name` for any
    /// port, `name:port` for one.
    pub allowed_hosts: Vec<String>,
    /// `Origin` values accepted from browsers; requests without one pass.
    pub allowed_origins: Vec<String>,
    /// Seals `requestState` (HMAC) so that it cannot be forged.
    pub state_key: [u8; 32],
    /// Set to `true` when the server stops: `subscriptions/listen` streams
    /// end then (they never would by themselves, and the server waits for
    /// its open requests).
    pub stopping: Arc<tokio::sync::watch::Sender<bool>>,
}

impl std::fmt::Debug for McpOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpOptions")
            .field("allowed_hosts", &self.allowed_hosts)
            .field("allowed_origins", &self.allowed_origins)
            .finish_non_exhaustive()
    }
}

impl McpOptions {
    /// The Host and Origin values a server reached at `public_url` and
    /// listening on `listen` accepts: the loopback names (any port: only
    /// this machine reaches them), the public URL's host, the listening
    /// address unless it is a wildcard.
    pub fn for_server(public_url: &str, listen: std::net::SocketAddr, state_key: [u8; 32]) -> McpOptions {
        let mut allowed_hosts: Vec<String> = ["localhost", "127.0.0.1", "::1"].map(String::from).to_vec();
        let mut allowed_origins: Vec<String> =
            ["localhost", "127.0.0.1", "[::1]"].iter().map(|h| format!("http://{h}:*")).collect();
        if let Ok(url) = public_url.parse::<http::Uri>()
            && let Some(authority) = url.authority()
        {
            allowed_hosts.push(authority.as_str().to_string());
            allowed_origins.push(format!("{}://{}", url.scheme_str().unwrap_or("http"), authority));
        }
        if !listen.ip().is_unspecified() && !listen.ip().is_loopback() {
            allowed_hosts.push(listen.to_string());
        }
        allowed_hosts.dedup();
        allowed_origins.dedup();
        McpOptions {
            allowed_hosts,
            allowed_origins,
            state_key,
            stopping: Arc::new(tokio::sync::watch::channel(false).0),
        }
    }
}

impl McpOptions {
    /// These options, accepting the operator's extra `hosts` (a balancer's,
    /// a cluster's names) and the browser `origins` allowed by CORS.
    pub fn with_names(mut self, hosts: &[String], origins: &[String]) -> McpOptions {
        self.allowed_hosts.extend(hosts.iter().map(|h| h.trim().to_ascii_lowercase()).filter(|h| !h.is_empty()));
        self.allowed_origins.extend(origins.iter().map(|o| o.trim_end_matches('/').to_string()));
        self.allowed_hosts.dedup();
        self.allowed_origins.dedup();
        self
    }
}

/// The name of the key that seals `requestState` among the server's keys
/// (its file in the data dir, with SQLite): kept, so that a restart does not
/// break a client's pending retry, and shared by every replica of a fleet.
pub const STATE_KEY: &str = "mcp-request-state.key";

impl Default for McpOptions {
    /// For routers built without a server (the list of endpoints, tests): a
    /// random state key, used by nobody else.
    fn default() -> Self {
        let mut state_key = [0u8; 32];
        getrandom::fill(&mut state_key).unwrap_or_else(|e| panic!("no randomness for a key: {e}"));
        McpOptions::for_server("http://127.0.0.1:8080", ([127, 0, 0, 1], 8080).into(), state_key)
    }
}

/// The tower service that serves `/mcp` with `door`.
pub fn service(door: McpDoor) -> SharedService {
    let options = door.options.clone();
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_allowed_hosts(options.mcp.allowed_hosts.clone())
        .with_allowed_origins(options.mcp.allowed_origins.clone())
        .with_max_request_body_bytes(options.max_request_bytes);
    let service =
        StreamableHttpService::new(move || Ok(door.clone()), Arc::new(NeverSessionManager::default()), config);
    SharedService(Arc::new(service))
}

/// rmcp's service behind one `Arc`. The router and each middleware layer
/// clone the service they wrap for every request; rmcp's clone copies its
/// whole config (the allowed hosts and origins, a cancellation token), which
/// cost the MCP door a measurable share of its throughput.
#[derive(Clone)]
pub struct SharedService(Arc<StreamableHttpService<McpDoor, NeverSessionManager>>);

impl tower::Service<Request> for SharedService {
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future = std::pin::Pin<Box<dyn Future<Output = Result<Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let service = self.0.clone();
        Box::pin(async move { Ok(service.handle(request).await.into_response()) })
    }
}

/// Decides access per JSON-RPC method, behind the access layer's check
/// of the lowest access any method needs ([`Access::Enumerate`], made
/// before the body is read, so that a stranger costs no body): reads the
/// method and checks the access it needs.
pub(super) async fn per_method(
    axum::extract::State(door): axum::extract::State<Arc<McpDoor>>,
    request: Request,
    next: Next,
) -> Response {
    let limit = request.extensions().get::<Arc<ApiOptions>>().map_or(1 << 20, |o| o.max_request_bytes);
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, limit).await else {
        return ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "request_too_large",
            "the request body is larger than this server accepts, or did not arrive",
        )
        .into_response();
    };
    // A call the direct lane takes is a `tools/call`, read in full once.
    let plain_call = door.lane.plain_call(&parts, &bytes);
    let access = match &plain_call {
        Some(_) => access_of("tools/call"),
        None => rpc_method(&bytes).map_or(Access::Enumerate, |m| access_of(&m)),
    };
    let (Some(caller), Some(host)) = (parts.extensions.get::<Caller>(), parts.extensions.get::<AppState>()) else {
        return ApiError::internal("the server is misconfigured").into_response();
    };
    let options = parts.extensions.get::<Arc<ApiOptions>>().map(|o| o.as_ref());
    if let Some(refusal) = auth::refusal_for(host, options, access, Scope::Tenant, caller) {
        return refusal;
    }
    if let Some(call) = plain_call {
        tracing::debug!(tool = %call.params.name, "tools/call served by the direct lane");
        let scope = CallScope::direct(host.clone(), caller.clone(), &call, &parts);
        let answer = door.call(&call.params, &scope).await;
        return direct::answer(call.id, answer);
    }
    let mut parts = parts;
    // rmcp runs the handler in a task of its own: it is put back in the
    // request's span there (`call_tool`).
    parts.extensions.insert(RequestSpan(tracing::Span::current()));
    name_notification(&mut parts.headers, &bytes);
    // rmcp's own HTTP refusals (Host or Origin not allowed, a missing
    // `Accept`, a body that is not JSON) are plain text: the router gives
    // them Plinth's error shape, like every other (`error::as_error_body`).
    next.run(Request::from_parts(parts, Body::from(bytes))).await
}

/// The span of the HTTP request an MCP message came in.
#[derive(Clone)]
struct RequestSpan(tracing::Span);

/// Gives a notification posted without an `Mcp-Method` header the one its
/// body names. The 2026-07-28 revision requires the header on requests and
/// says nothing of notifications, and clients post them without it (the
/// official TypeScript SDK v2 closing a `subscriptions/listen` stream with
/// `notifications/cancelled`); rmcp refuses any message without it (`400
/// -32020`). A header that is there is left for rmcp to check against the
/// body.
fn name_notification(headers: &mut HeaderMap, body: &[u8]) {
    if headers.contains_key("mcp-method") {
        return;
    }
    let Ok(Value::Object(message)) = serde_json::from_slice::<Value>(body) else { return };
    if message.contains_key("id") {
        return;
    }
    let method = message.get("method").and_then(Value::as_str).and_then(|m| http::HeaderValue::from_str(m).ok());
    if let Some(method) = method {
        headers.insert("mcp-method", method);
    }
}

/// The `method` of a JSON-RPC message, if the body is one.
fn rpc_method(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Message {
        method: Option<String>,
    }
    serde_json::from_slice::<Message>(body).ok()?.method
}

/// The MCP server rmcp runs for each request.
#[derive(Clone)]
pub struct McpDoor {
    options: Arc<ApiOptions>,
    codec: Arc<rmcp::model::RequestStateCodec>,
    listeners: Arc<Listeners>,
    lane: Arc<direct::Lane>,
}

impl McpDoor {
    /// The door of a server set up with `options`.
    pub fn new(options: Arc<ApiOptions>) -> McpDoor {
        McpDoor {
            // 32 bytes: the minimum `try_new` checks for.
            codec: Arc::new(rmcp::model::RequestStateCodec::new_unchecked(options.mcp.state_key.to_vec())),
            listeners: Arc::new(Listeners::default()),
            lane: Arc::new(direct::Lane::new(&options.mcp)),
            options,
        }
    }
}

/// What a `tools/call` needs of the request it came in, whether rmcp
/// dispatched it or the direct lane took it ([`direct`]).
struct CallScope<'a> {
    host: AppState,
    caller: Caller,
    /// The request's `_meta`.
    meta: Option<&'a JsonObject>,
    /// The HTTP request's head: the end user's header, the caller's trace.
    parts: Option<&'a http::request::Parts>,
    /// The request's span, which the call runs in.
    span: tracing::Span,
    /// Of the stateless revision (2026-07-28 on).
    stateless: bool,
    /// The client declared URL elicitation (it can send its user to the
    /// confirmation page).
    can_open_urls: bool,
}

impl<'a> CallScope<'a> {
    /// A call rmcp dispatched (which moves the request's `_meta` into the
    /// context, and runs the handler in a task of its own).
    fn of(request: &'a CallToolRequestParams, ctx: &'a RequestContext<RoleServer>) -> Result<Self, ErrorData> {
        let (host, caller) = scope(ctx)?;
        let parts = ctx.extensions.get::<http::request::Parts>();
        Ok(CallScope {
            host,
            caller,
            meta: Some(&ctx.meta.0.0).filter(|m| !m.is_empty()).or(request.meta.as_ref().map(|m| &m.0.0)),
            parts,
            span: parts
                .and_then(|p| p.extensions.get::<RequestSpan>())
                .map_or_else(tracing::Span::none, |s| s.0.clone()),
            stateless: ctx.protocol_version().is_some_and(|v| v >= ProtocolVersion::V_2026_07_28),
            can_open_urls: ctx.client_capabilities().and_then(|c| c.elicitation).is_some_and(|e| e.url.is_some()),
        })
    }

    /// A call the direct lane took: a 2026-07-28 request, whose `_meta`
    /// carries the client's capabilities, served in the request's task.
    fn direct(host: AppState, caller: Caller, call: &'a direct::PlainCall, parts: &'a http::request::Parts) -> Self {
        CallScope {
            host,
            caller,
            meta: call.params.meta.as_ref().map(|m| &m.0.0),
            parts: Some(parts),
            span: tracing::Span::current(),
            stateless: true,
            can_open_urls: call.can_open_urls,
        }
    }

    /// Whether a call waiting for its end user is finished by the client
    /// repeating it (recognised by its fingerprint) rather than by a
    /// retry with a sealed `requestState`: a 2025-11-25 client (error
    /// -32042), or a 2026-07-28 client that cannot open a URL (a tool
    /// result with the link, for the person and the model to read).
    fn waits_by_repetition(&self) -> bool {
        !self.stateless || !self.can_open_urls
    }

    /// The end user the call is made for: with an OAuth token, the person
    /// who signed in (an agent naming anyone else is refused); with a key,
    /// `_meta.endUser`, else the A2T header.
    fn end_user(&self) -> Result<Option<String>, ErrorData> {
        let empty = HeaderMap::new();
        let named = end_user(self.meta, self.parts.map_or(&empty, |p| &p.headers))?;
        let Some(token) = self.caller.principal.as_ref().and_then(|p| p.token.as_ref()) else { return Ok(named) };
        match named {
            Some(other) if other != token.end_user => Err(rpc_error(
                ErrorCode::INVALID_PARAMS.0,
                "this token acts for the person who signed in; a call cannot name another end user",
                "end_user_mismatch",
                Map::new(),
            )),
            _ => Ok(Some(token.end_user.clone())),
        }
    }
}

/// What a sealed `requestState` holds: the transaction a call waits for,
/// bound to its tenant, key (sealed with it) and the call itself.
#[derive(serde::Serialize, serde::Deserialize)]
struct PendingState {
    transaction: String,
    tenant: String,
    tool: String,
    /// [`call_fingerprint`] of the call.
    call: String,
}

impl ServerHandler for McpDoor {
    // Logging (deprecated by SEP-2577, gone from 2026-07-28) is declared so
    // that 2025-11-25 clients' logging/setLevel succeeds; the door sends no
    // log messages.
    #[allow(deprecated)]
    fn get_info(&self) -> ServerConfig {
        let capabilities =
            ServerCapabilities::builder().enable_logging().enable_tools().enable_tool_list_changed().build();
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("plinth", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Tools hosted by Plinth. Each tool's _meta names its toolId, version and sha256; pin a call with _meta.version or _meta.sha256. Tools marked _meta.confirmation run only once their end user (named by _meta.endUser) confirms the call on the page the elicitation links to.",
            )
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let (host, caller) = scope(&ctx)?;
        let after = match request.and_then(|r| r.cursor) {
            None => None,
            Some(cursor) => Some(decode_cursor(&cursor).ok_or_else(|| {
                rpc_error(
                    ErrorCode::INVALID_PARAMS.0,
                    "the cursor is not one this server issued; list again without it",
                    "invalid_cursor",
                    Map::new(),
                )
            })?),
        };
        // Through a toolset, only its tools, each at the version it gives.
        let view = caller.toolset.as_deref();
        let (tools, more) = host
            .registry()
            .page(&caller.tenant, after.as_deref(), PAGE_SIZE, |tool| ToolHost::version_in(view, tool).is_some());
        let mut items = Vec::with_capacity(tools.len());
        for tool in &tools {
            if let Some(version) = ToolHost::version_in(view, tool) {
                items.push(tool_entry(&host, tool, &version, ToolHost::wording_in(view, &tool.name))?);
            }
        }
        let next = if more { tools.last().map(|t| URL_SAFE_NO_PAD.encode(&t.name)) } else { None };
        let mut page = ListToolsResult::with_all_items(items)
            .with_ttl_ms(ToolHost::list_ttl_ms(view))
            .with_cache_scope(CacheScope::Private);
        page.next_cursor = next;
        Ok(page)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let scope = CallScope::of(&request, &ctx)?;
        self.call(&request, &scope).await
    }

    /// 2025-11-25 clients: the same as `server/discover` says, but for
    /// `listChanged`, which has no stream to reach them on (no sessions).
    async fn initialize(
        &self,
        request: rmcp::model::InitializeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ServerConfig, ErrorData> {
        ctx.peer.set_peer_info(request.clone());
        let mut answer = self.negotiate_initialize(&request)?;
        if let Some(tools) = answer.capabilities.tools.as_mut() {
            tools.list_changed = None;
        }
        Ok(answer)
    }

    #[allow(deprecated)]
    async fn set_level(
        &self,
        _request: rmcp::model::SetLevelRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Ok(())
    }

    fn accepted_subscription_filter(&self, _requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        Some(SubscriptionFilter::builder().tools_list_changed().build())
    }

    /// Each stream holds a connection: their number is capped, each lasts
    /// [`LISTEN_LIFETIME`] (ended gracefully: the client opens the next
    /// one), and one whose key was revoked ends at the next check.
    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let (host, caller) = scope(context.request_context())?;
        let _slot = self.listeners.take(&caller.tenant, key_id(&caller))?;
        let key = context
            .request_context()
            .extensions
            .get::<http::request::Parts>()
            .and_then(|p| auth::bearer_token(&p.headers))
            .map(str::to_string);
        // A token's stream is checked against the token's grant (an
        // external JWT's, which cannot be revoked here, until it expires).
        let token = caller.principal.as_ref().and_then(|p| p.token.clone());
        let tenant = caller.tenant;
        let wants_tools = context.accepted().tools_list_changed == Some(true);
        // A stream that asked for no tool changes only waits to be closed.
        let mut changes = wants_tools.then(|| host.registry().changes());
        let mut stopping = self.options.mcp.stopping.subscribe();
        if *stopping.borrow_and_update() {
            return Ok(());
        }
        let ends = tokio::time::sleep(LISTEN_LIFETIME);
        tokio::pin!(ends);
        let mut key_check = tokio::time::interval(LISTEN_KEY_CHECK);
        key_check.tick().await;
        loop {
            tokio::select! {
                _ = context.cancelled() => return Ok(()),
                // Ends the stream gracefully: the client opens the next one.
                () = &mut ends => return Ok(()),
                _ = stopping.changed() => return Ok(()),
                _ = key_check.tick() => {
                    let live = match (key.as_deref(), &token) {
                        (None, _) => true,
                        (Some(k), None) => host.authenticate(k).is_some(),
                        // Checked for the MCP URL it was checked for at the start.
                        (Some(k), Some(t)) => host.token_grant(&tenant, k, &t.resource).await.is_ok_and(|g| g.is_some()),
                    };
                    if !live {
                        return Ok(());
                    }
                }
                change = next_change(&mut changes) => match change {
                    Ok(changed) if changed != tenant => continue,
                    // A lag lost changes, some perhaps this tenant's.
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        if context.sink().notify_tool_list_changed().await.is_err() {
                            return Ok(());
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return Ok(()),
                },
            }
        }
    }
}

/// The next tenant whose tools changed; never, without a receiver.
async fn next_change(
    changes: &mut Option<tokio::sync::broadcast::Receiver<String>>,
) -> Result<String, tokio::sync::broadcast::error::RecvError> {
    match changes {
        Some(changes) => changes.recv().await,
        None => std::future::pending().await,
    }
}

/// The version a call means: the tool's current one, or the one its
/// `_meta.version` pins; refused when its `_meta.sha256` does not match (the
/// tool changed under the client).
fn resolve(
    host: &AppState,
    caller: &Caller,
    name: &str,
    meta: Option<&JsonObject>,
) -> Result<(Arc<Tool>, Arc<ToolVersion>), ErrorData> {
    let unknown = || {
        rpc_error(
            ErrorCode::INVALID_PARAMS.0,
            format!("there is no tool `{name}`; tools/list lists them"),
            "unknown_tool",
            Map::new(),
        )
    };
    // Through a toolset, a tool outside it is no tool.
    let tool = host.tool_named_in(&caller.tenant, caller.toolset.as_deref(), name).ok_or_else(unknown)?;
    let pinned = match meta.and_then(|m| m.get(meta::VERSION)) {
        None | Some(Value::Null) => None,
        Some(v) => Some(version_number(v).ok_or_else(|| {
            rpc_error(
                ErrorCode::INVALID_PARAMS.0,
                format!("_meta.{} must be a version number (1, 2, …)", meta::VERSION),
                "invalid_pin",
                Map::new(),
            )
        })?),
    };
    let expected_sha256 = match meta.and_then(|m| m.get(meta::SHA256)) {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()) => {
            Some(s.to_ascii_lowercase())
        }
        Some(_) => {
            return Err(rpc_error(
                ErrorCode::INVALID_PARAMS.0,
                format!("_meta.{} must be the hex sha256 of a version, as tools/list gives it", meta::SHA256),
                "invalid_pin",
                Map::new(),
            ));
        }
    };
    let (tool, version) = ToolHost::resolve_in(caller.toolset.as_deref(), tool, pinned).map_err(|e| {
        if matches!(e, InvokeError::UnknownTool(_)) {
            return unknown();
        }
        let error = ApiError::from(e);
        let code = if error.status().is_server_error() { ErrorCode::INTERNAL_ERROR } else { ErrorCode::INVALID_PARAMS };
        let plinth_code = if error.code() == "not_found" { "unknown_version" } else { error.code() };
        rpc_error(code.0, error.message().to_string(), plinth_code, Map::new())
    })?;
    if let Some(expected) = expected_sha256
        && expected != version.sha256
    {
        let mut data = Map::new();
        data.insert("pinned".into(), json!({ meta::SHA256: expected, meta::VERSION: pinned }));
        data.insert("current".into(), json!({ meta::SHA256: version.sha256, meta::VERSION: version.number }));
        return Err(rpc_error(
            ErrorCode::INVALID_PARAMS.0,
            format!(
                "`{name}` version {} is not the one this call is pinned to (sha256 {expected}): the tool changed; list the tools again and review it before calling",
                version.number
            ),
            "pinned_version_mismatch",
            data,
        ));
    }
    Ok((tool, version))
}

impl McpDoor {
    /// `tools/call`: the one implementation, whichever way the request came
    /// in.
    async fn call(
        &self,
        request: &CallToolRequestParams,
        scope: &CallScope<'_>,
    ) -> Result<CallToolResponse, ErrorData> {
        let (host, caller) = (&scope.host, &scope.caller);
        if let Some(state) = &request.request_state {
            return self.resume(request, state, scope).await;
        }
        let (tool, version) = resolve(host, caller, &request.name, scope.meta)?;
        let end_user = scope.end_user()?;
        let arguments = arguments_of(request);
        let arguments = arguments.as_ref();
        let pairs: Vec<(&str, &Value)> = arguments.iter().map(|(k, v)| (k.as_str(), v)).collect();
        let input = match host.check_input(&tool, &version, FrontDoor::Mcp, caller.toolset.as_deref(), &pairs) {
            Ok(input) => input,
            Err(errors) => return Ok(invalid_input(errors).into()),
        };
        // Hashed only when needed: a 2025-11-25 client's call, or a call
        // that waits for its end user.
        let fingerprint = || call_fingerprint(caller, &tool.name, &end_user, arguments);
        // Only a call of a tool that may need confirmation can be waiting
        // (a tool whose policy was removed since runs as it now says).
        if scope.waits_by_repetition() && host.confirmation_need(&tool, &version) != ConfirmationNeed::Never {
            let fingerprint = fingerprint();
            if let Some(transaction) = LegacyPending::get(host, &caller.tenant, &fingerprint) {
                return self.repeated_outcome(&tool.name, end_user.as_deref(), &fingerprint, &transaction, scope).await;
            }
        }
        // A client that declined to send its user to grant an account ends
        // the call (the retry of an `input_required` answer, below).
        if declined_authorization(request) {
            let message = "the person was not sent to grant the account the tool acts with; the tool did not run";
            return Ok(error_result("authorization_declined", message, Map::new()).into());
        }
        let mut call = Call::new(input, FrontDoor::Mcp);
        call.toolset = caller.toolset.as_ref().map(|t| (t.name.clone(), t.version));
        call.end_user = end_user.clone();
        call.trace = scope.parts.and_then(|p| p.extensions.get::<CallerTrace>()).cloned();
        match host.invoke(tool.clone(), version, call).instrument(scope.span.clone()).await {
            Err(InvokeError::ConfirmationPending(pending)) => {
                self.confirmation_required(&tool.name, &pending, &fingerprint(), scope)
            }
            Err(e @ InvokeError::AuthorizationRequired { .. }) => self.authorization_required(&e, scope),
            outcome => call_result(outcome).map(Into::into),
        }
    }

    /// The answer to a call whose end user must grant an account first: a
    /// URL elicitation per provider to its link — an `input_required`
    /// result for 2026-07-28 clients that open URLs (no state: their retry
    /// is the call again, which runs once the grant is there), error
    /// -32042 for 2025-11-25 ones, and for a client that opens no URL a
    /// tool error giving the links. Nothing waits on the server.
    fn authorization_required(&self, e: &InvokeError, scope: &CallScope<'_>) -> Result<CallToolResponse, ErrorData> {
        let InvokeError::AuthorizationRequired { pending, .. } = e else {
            return Err(ErrorData::internal_error("an authorization answer for another error", None));
        };
        let toolset = scope.caller.toolset.as_ref().map(|t| t.name.as_str());
        let links: Vec<(String, String, String)> = pending
            .iter()
            .map(|p| {
                let (url, check_url) = super::links::authorization_urls(&self.options, &p.tenant, &p.link, toolset);
                (p.provider.clone(), url, check_url)
            })
            .collect();
        let message = |url: &str| format!("{e} Open the link to grant it: {url}. Then make the same call again.");
        if scope.stateless && scope.can_open_urls {
            let mut requests = BTreeMap::new();
            for (provider, url, _) in &links {
                let request = json!({
                    "method": "elicitation/create",
                    "params": { "mode": "url", "message": message(url), "url": url, "elicitationId": format!("authorization-{provider}") },
                });
                let request: InputRequest = serde_json::from_value(request)
                    .map_err(|e| ErrorData::internal_error(format!("the elicitation could not be built: {e}"), None))?;
                requests.insert(format!("{AUTHORIZATION_REQUEST}{provider}"), request);
            }
            return Ok(InputRequiredResult::new(Some(requests), None).into());
        }
        if !scope.stateless {
            let elicitations: Vec<Value> = links
                .iter()
                .map(|(provider, url, _)| {
                    json!({ "mode": "url", "elicitationId": format!("authorization-{provider}"), "url": url, "message": message(url) })
                })
                .collect();
            let first = links.first().map_or(String::new(), |l| l.1.clone());
            return Err(ErrorData::new(
                ErrorCode(URL_ELICITATION_REQUIRED),
                message(&first),
                Some(json!({ "elicitations": elicitations })),
            ));
        }
        let mut data = Map::new();
        data.insert("authorization".into(), super::links::authorization_challenges(&self.options, pending, toolset));
        let urls: Vec<&str> = links.iter().map(|l| l.1.as_str()).collect();
        let text = format!(
            "{e} Give the person this link to grant it: {}. Once they have, make the same call again.",
            urls.join(" and ")
        );
        Ok(error_result("authorization_required", &text, data).into())
    }

    /// The answer to a call now waiting for its end user: a URL elicitation
    /// to the confirmation page — an `input_required` result with the sealed
    /// state for 2026-07-28 clients, error -32042 for older ones.
    fn confirmation_required(
        &self,
        tool: &str,
        pending: &PendingConfirmation,
        fingerprint: &str,
        scope: &CallScope<'_>,
    ) -> Result<CallToolResponse, ErrorData> {
        let (host, caller) = (&scope.host, &scope.caller);
        let url = super::links::confirmation_link(&self.options, pending);
        let message = format!(
            "`{tool}` runs only once you confirm it: open the link, log in and review the call (it expires at {}).",
            crate::host::rfc3339(pending.expires_at)
        );
        if scope.waits_by_repetition() {
            LegacyPending::insert(host, &caller.tenant, fingerprint, pending);
            return if scope.stateless {
                let end_user = scope.end_user().ok().flatten();
                Ok(link_result(tool, end_user.as_deref(), &url, pending).into())
            } else {
                Err(url_elicitation_error(&pending.id, &url, &format!("{message} {url}")))
            };
        }
        let state = PendingState {
            transaction: pending.id.clone(),
            tenant: caller.tenant.clone(),
            tool: tool.into(),
            call: fingerprint.into(),
        };
        // The retry may come late, once the end user decided: it still gets
        // the outcome for a day after the window.
        let window = Duration::from_secs(u64::try_from(pending.expires_at - unix_now()).unwrap_or(0));
        let options =
            rmcp::model::SealOptions::new().ttl(window + OUTCOME_KEPT).associated_data(key_id(caller).as_bytes());
        let sealed = self.codec.seal_json_with(&state, &options).map_err(|e| {
            tracing::error!(error = %e, "a request state could not be sealed");
            ErrorData::internal_error("the call's state could not be kept", None)
        })?;
        Ok(InputRequiredResult::new(Some(elicitation(&pending.id, &url, &message)?), Some(sealed)).into())
    }

    /// A 2026-07-28 client's retry with the `requestState` it was given: the
    /// same call (tool, arguments, end user) with the same key.
    async fn resume(
        &self,
        request: &CallToolRequestParams,
        sealed: &str,
        scope: &CallScope<'_>,
    ) -> Result<CallToolResponse, ErrorData> {
        let (host, caller) = (&scope.host, &scope.caller);
        let invalid = |message: &str| {
            rpc_error(ErrorCode::INVALID_PARAMS.0, message.to_string(), "invalid_request_state", Map::new())
        };
        let state: PendingState =
            self.codec.open_json_with(sealed, key_id(caller).as_bytes()).map_err(|e| match e {
                rmcp::model::RequestStateError::Expired => invalid(
                    "the requestState is too old for its outcome to be kept: check whether the call took effect before making it again",
                ),
                _ => invalid("the requestState is not one this server gave this key"),
            })?;
        let fingerprint = call_fingerprint(caller, &request.name, &scope.end_user()?, &arguments_of(request));
        if state.tenant != caller.tenant || state.tool != request.name || state.call != fingerprint {
            return Err(invalid("the requestState belongs to another call: retry with the call's own arguments"));
        }
        // The client's "decline" or "cancel" ends the call; its "accept" is
        // no confirmation (only the signed CHEQ is), so it only means: look.
        let declined = request
            .input_responses
            .as_ref()
            .and_then(|r| r.get(CONFIRMATION_REQUEST))
            .and_then(|r| serde_json::to_value(r).ok())
            .is_some_and(|r| matches!(r["action"].as_str(), Some("decline" | "cancel")));
        if declined {
            let evidence = json!({ "by": "mcp-client", "reason": "the client declined the confirmation" });
            // Already decided (say, accepted on the page): that outcome stands.
            if host.reject_confirmation(&caller.tenant, &state.transaction, evidence).is_ok() {
                let message = "the confirmation was declined before the end user decided; the tool did not run";
                return Ok(error_result("confirmation_declined", message, Map::new()).into());
            }
        }
        match outcome(host, &caller.tenant, &state.transaction).await? {
            Outcome::Pending(pending) => self.confirmation_required(&request.name, &pending, &fingerprint, scope),
            Outcome::Running => Ok(still_running().into()),
            Outcome::Done(answer) => answer.map(Into::into),
        }
    }

    /// The repetition of a call that waits (or waited) for its end user,
    /// by a client that is not told to retry with a `requestState`: a
    /// 2025-11-25 client, or a 2026-07-28 one without URL elicitation.
    /// Once the outcome is delivered, the same call again is a new call.
    async fn repeated_outcome(
        &self,
        tool: &str,
        end_user: Option<&str>,
        fingerprint: &str,
        transaction: &str,
        scope: &CallScope<'_>,
    ) -> Result<CallToolResponse, ErrorData> {
        let (host, caller) = (&scope.host, &scope.caller);
        match outcome(host, &caller.tenant, transaction).await? {
            Outcome::Pending(pending) => {
                let url = super::links::confirmation_link(&self.options, &pending);
                if scope.stateless {
                    return Ok(link_result(tool, end_user, &url, &pending).into());
                }
                let message =
                    format!("The call still waits for its end user's confirmation: open the link to review it. {url}");
                Err(url_elicitation_error(&pending.id, &url, &message))
            }
            Outcome::Running => Ok(still_running().into()),
            Outcome::Done(answer) => {
                LegacyPending::remove(host, &caller.tenant, fingerprint);
                answer.map(Into::into)
            }
        }
    }
}

/// Where a transaction stands, as a call's answer. Waits a while for an
/// accepted call that is still running.
async fn outcome(host: &AppState, tenant: &str, transaction: &str) -> Result<Outcome, ErrorData> {
    let deadline = tokio::time::Instant::now() + RUNNING_WAIT;
    loop {
        let c = host
            .confirmation(tenant, transaction)
            .map_err(|e| {
                tracing::error!(error = %e, transaction, "a confirmation could not be read");
                ErrorData::internal_error("the confirmation could not be read; retry", None)
            })?
            .ok_or_else(|| {
                rpc_error(
                    ErrorCode::INVALID_PARAMS.0,
                    "there is no such confirmation",
                    "unknown_confirmation",
                    Map::new(),
                )
            })?;
        return match TxState::of(&c, unix_now()) {
            TxState::Pending => Ok(Outcome::Pending(host.pending(&c))),
            TxState::Running if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            TxState::Running => Ok(Outcome::Running),
            TxState::Done => {
                let body = c.result_body.unwrap_or_default();
                Ok(Outcome::Done(match serde_json::from_str::<CallToolResult>(&body) {
                    Ok(result) => Ok(result),
                    Err(_) => Err(serde_json::from_str::<ErrorData>(&body).unwrap_or_else(|_| {
                        ErrorData::internal_error("the confirmed call's answer could not be read", None)
                    })),
                }))
            }
            state => {
                let (code, message) =
                    state.unanswered().unwrap_or(("call_outcome_unknown", "the call's outcome is unknown"));
                Ok(Outcome::Done(Ok(error_result(code, message, Map::new()))))
            }
        };
    }
}

/// Where a call that waited for its end user stands.
enum Outcome {
    /// Still waiting for the end user.
    Pending(PendingConfirmation),
    /// Accepted, and the tool still runs (past [`RUNNING_WAIT`]).
    Running,
    /// Decided: the tool's answer, or why it did not run.
    Done(Result<CallToolResult, ErrorData>),
}

/// The answer to a retry that came while the confirmed tool still runs:
/// the same retry later gets its result.
fn still_running() -> CallToolResult {
    let message = "the end user accepted the call and the tool is still running: send this same retry again in a moment (do not make the call anew)";
    error_result("confirmation_running", message, Map::new())
}

/// Error -32021: the call needs a URL elicitation the client cannot show.
/// The answer to a call waiting for its end user, for a client that cannot
/// open a URL: a tool error the model reads, with the link for the person
/// and what to do once they have confirmed. The tool has not run.
fn link_result(tool: &str, end_user: Option<&str>, url: &str, pending: &PendingConfirmation) -> CallToolResult {
    let message = format!(
        "`{tool}` has not run: it needs {} to confirm it first. Give them this link to review and confirm the call: {url} \
         (it expires at {}). Once they have confirmed, make exactly the same call again (same tool and arguments) to get \
         its outcome; until then the same call answers this again.",
        end_user.unwrap_or("its end user"),
        crate::host::rfc3339(pending.expires_at),
    );
    let mut data = Map::new();
    data.insert("url".into(), url.into());
    data.insert("confirmationId".into(), pending.id.clone().into());
    data.insert("expires".into(), crate::host::rfc3339(pending.expires_at).into());
    error_result("confirmation_required", &message, data)
}

/// The host and the caller the access layer put on the request.
fn scope(ctx: &RequestContext<RoleServer>) -> Result<(AppState, Caller), ErrorData> {
    let parts = ctx.extensions.get::<http::request::Parts>();
    let host = parts.and_then(|p| p.extensions.get::<AppState>()).cloned();
    let caller = parts.and_then(|p| p.extensions.get::<Caller>()).cloned();
    host.zip(caller)
        .ok_or_else(|| ErrorData::internal_error("the request reached the MCP door without an access decision", None))
}

/// The key a call is made with (sealed states are bound to it).
fn key_id(caller: &Caller) -> &str {
    caller.principal.as_ref().map_or("", |p| p.key_id.as_str())
}

/// The end user a call is made for: `_meta.endUser`, else the A2T header.
fn end_user(meta: Option<&JsonObject>, headers: &HeaderMap) -> Result<Option<String>, ErrorData> {
    let invalid =
        |e: ApiError| rpc_error(ErrorCode::INVALID_PARAMS.0, e.message().to_string(), "invalid_end_user", Map::new());
    match meta.and_then(|m| m.get(meta::END_USER)) {
        Some(Value::String(user)) => {
            super::links::check_end_user(user).map_err(invalid)?;
            Ok(Some(user.clone()))
        }
        Some(Value::Null) | None => super::links::end_user_header(headers).map_err(invalid),
        Some(_) => Err(rpc_error(
            ErrorCode::INVALID_PARAMS.0,
            format!("_meta.{} must be the end user's name", meta::END_USER),
            "invalid_end_user",
            Map::new(),
        )),
    }
}

fn version_number(value: &Value) -> Option<u32> {
    let n = match value {
        Value::Number(n) => u32::try_from(n.as_u64()?).ok()?,
        Value::String(s) => s.strip_suffix(".0.0").unwrap_or(s).parse().ok()?,
        _ => return None,
    };
    (n >= 1).then_some(n)
}

fn decode_cursor(cursor: &str) -> Option<String> {
    String::from_utf8(URL_SAFE_NO_PAD.decode(cursor).ok()?).ok()
}

/// A JSON-RPC error with Plinth's code in `data.code`.
fn rpc_error(code: i32, message: impl Into<String>, plinth_code: &str, mut data: Map<String, Value>) -> ErrorData {
    data.insert("code".into(), plinth_code.into());
    ErrorData::new(ErrorCode(code), message.into(), Some(Value::Object(data)))
}

/// `isError` naming each bad parameter: what the model can fix.
fn invalid_input(errors: Vec<InputError>) -> CallToolResult {
    let mut parameters = Map::new();
    let mut lines = Vec::new();
    // Each message names its parameter already.
    for error in &errors {
        if let Some(p) = &error.parameter {
            parameters.insert(p.clone(), error.message.clone().into());
        }
        lines.push(error.message.clone());
    }
    let mut extra = Map::new();
    extra.insert("parameterErrors".into(), parameters.into());
    error_result("invalid_input", &lines.join("\n"), extra)
}

/// An `isError` result with `message` and Plinth's code (and `extra`) in
/// `_meta`.
fn error_result(code: &str, message: &str, extra: Map<String, Value>) -> CallToolResult {
    let mut meta = extra;
    meta.insert("code".into(), code.into());
    CallToolResult::error(vec![ContentBlock::text(message.to_string())]).with_meta(Some(MetaObject(meta)))
}

/// A call's answer: the outputs as structured content (and as text), or
/// what went wrong — as a result the model reads when it can act on it,
/// as a JSON-RPC error when the request itself cannot be served.
pub(super) fn call_result(outcome: Result<ToolResult, InvokeError>) -> Result<CallToolResult, ErrorData> {
    match outcome {
        Ok(ToolResult::Outputs(outputs)) => {
            let value: Map<String, Value> = outputs.into_iter().map(|o| (o.name, o.value)).collect();
            // Structured even without outputs (`{}`): a call pinned to such a
            // version may be listed under a later version's output schema.
            Ok(CallToolResult::structured(Value::Object(value)))
        }
        Ok(ToolResult::Failed(e)) => {
            let mut content = vec![ContentBlock::text(e.message.clone())];
            if let Some(more) = &e.additional_prompt_content {
                content.push(ContentBlock::text(more.clone()));
            }
            let mut meta = Map::new();
            meta.insert("code".into(), "tool_error".into());
            meta.insert("canRetry".into(), e.can_retry.into());
            if let Some(ms) = e.retry_after_ms {
                meta.insert("retryAfterMs".into(), ms.into());
            }
            if let Some(text) = &e.developer_message {
                meta.insert("developerMessage".into(), text.clone().into());
            }
            Ok(CallToolResult::error(content).with_meta(Some(MetaObject(meta))))
        }
        Err(InvokeError::Input(e)) => Ok(invalid_input(vec![e])),
        Err(e @ (InvokeError::UnknownTool(_) | InvokeError::UnknownVersion { .. } | InvokeError::Retired(_))) => {
            let code = if matches!(e, InvokeError::Retired(_)) { "version_retired" } else { "unknown_tool" };
            Err(rpc_error(ErrorCode::INVALID_PARAMS.0, e.to_string(), code, Map::new()))
        }
        Err(InvokeError::AccountEndUserRequired(tool)) => Err(rpc_error(
            ErrorCode::INVALID_PARAMS.0,
            format!(
                "`{tool}` acts with the own account of the end user the call is made for: name them in _meta.{} (or the Plinth-End-User header), or call with the person's OAuth token; the tool did not run",
                meta::END_USER
            ),
            "end_user_required",
            Map::new(),
        )),
        Err(InvokeError::EndUserRequired(tool)) => Err(rpc_error(
            ErrorCode::INVALID_PARAMS.0,
            format!(
                "`{tool}` needs the confirmation of the end user the call is made for: name them in _meta.{} (or the Plinth-End-User header); the tool did not run",
                meta::END_USER
            ),
            "end_user_required",
            Map::new(),
        )),
        // Like a malformed `_meta.endUser`: the name is the request's.
        Err(e @ InvokeError::UnknownEndUser { .. }) => {
            Err(rpc_error(ErrorCode::INVALID_PARAMS.0, e.to_string(), e.code(), Map::new()))
        }
        Err(e @ InvokeError::Storage(_)) => {
            let error = ApiError::from(e);
            Err(rpc_error(ErrorCode::INTERNAL_ERROR.0, error.message().to_string(), error.code(), Map::new()))
        }
        // The sandbox's and the quotas' refusals, classified as A2T does.
        Err(e) => {
            let error = ApiError::from(e);
            let mut extra = Map::new();
            if let Some(secs) = error.retry_after_secs() {
                extra.insert("retryAfterMs".into(), (secs * 1000).into());
            }
            Ok(error_result(error.code(), error.message(), extra))
        }
    }
}

/// A confirmed call's answer as the result URI keeps it: the
/// `CallToolResult`, or the JSON-RPC error, as JSON.
pub(super) fn stored_answer(outcome: Result<ToolResult, InvokeError>) -> (StatusCode, String) {
    match call_result(outcome) {
        Ok(result) => (StatusCode::OK, serde_json::to_string(&result).unwrap_or_default()),
        Err(error) => (StatusCode::UNPROCESSABLE_ENTITY, serde_json::to_string(&error).unwrap_or_default()),
    }
}

/// The `inputRequests` of an `input_required` result: one URL elicitation.
fn elicitation(id: &str, url: &str, message: &str) -> Result<InputRequests, ErrorData> {
    let request = json!({
        "method": "elicitation/create",
        "params": { "mode": "url", "message": message, "url": url, "elicitationId": id },
    });
    let request: InputRequest = serde_json::from_value(request)
        .map_err(|e| ErrorData::internal_error(format!("the elicitation could not be built: {e}"), None))?;
    Ok(BTreeMap::from([(CONFIRMATION_REQUEST.to_string(), request)]))
}

/// Error -32042 of 2025-11-25: the client must send its user to `url`.
fn url_elicitation_error(id: &str, url: &str, message: &str) -> ErrorData {
    ErrorData::new(
        ErrorCode(URL_ELICITATION_REQUIRED),
        message.to_string(),
        Some(json!({ "elicitations": [{ "mode": "url", "elicitationId": id, "url": url, "message": message }] })),
    )
}

/// Whether the call is the retry of an `input_required` answer for an
/// account whose URL the client declined (or cancelled) to open.
fn declined_authorization(request: &CallToolRequestParams) -> bool {
    let Some(responses) = &request.input_responses else { return false };
    let Ok(responses) = serde_json::to_value(responses) else { return false };
    responses.as_object().is_some_and(|responses| {
        responses.iter().any(|(key, response)| {
            key.starts_with(AUTHORIZATION_REQUEST) && matches!(response["action"].as_str(), Some("decline" | "cancel"))
        })
    })
}

/// A call's arguments, borrowed (none sent: an empty object).
fn arguments_of(request: &CallToolRequestParams) -> std::borrow::Cow<'_, JsonObject> {
    request.arguments.as_ref().map_or_else(Default::default, std::borrow::Cow::Borrowed)
}

/// What makes a call the same call: its tenant, key, tool, end user and
/// arguments. A sealed state is bound to it; a 2025-11-25 client's
/// repetition is recognised by it.
fn call_fingerprint(caller: &Caller, tool: &str, end_user: &Option<String>, arguments: &JsonObject) -> String {
    let arguments: BTreeMap<&String, &Value> = arguments.iter().collect();
    let call = json!({
        "tenant": caller.tenant,
        "key": key_id(caller),
        "tool": tool,
        "endUser": end_user,
        "arguments": arguments,
    });
    crate::digest::sha256_hex(call.to_string().as_bytes())
}

/// Calls of 2025-11-25 clients that wait for their end user, per tenant and
/// by fingerprint, until their outcome is delivered or is no longer kept.
/// Kept in the store (the client may repeat its call on another replica),
/// capped per tenant, so that one tenant's calls never crowd out another's.
/// The store failing loses only the shortcut: the repeated call then makes a
/// new transaction.
struct LegacyPending;

impl LegacyPending {
    /// How long an entry is kept: the confirmation window, then as long as
    /// its outcome is.
    fn kept_until(pending: &PendingConfirmation) -> i64 {
        pending.expires_at + OUTCOME_KEPT.as_secs() as i64
    }

    fn get(host: &AppState, tenant: &str, fingerprint: &str) -> Option<String> {
        host.waiting_call(tenant, fingerprint)
            .inspect_err(|e| tracing::warn!(tenant, error = %e, "a waiting MCP call could not be read"))
            .ok()
            .flatten()
    }

    fn insert(host: &AppState, tenant: &str, fingerprint: &str, pending: &PendingConfirmation) {
        let kept_until = Self::kept_until(pending);
        if let Err(e) =
            host.keep_waiting_call(tenant, fingerprint, &pending.id, kept_until, MAX_LEGACY_PENDING_PER_TENANT)
        {
            tracing::warn!(tenant, error = %e, "a waiting MCP call could not be recorded");
        }
    }

    fn remove(host: &AppState, tenant: &str, fingerprint: &str) {
        if let Err(e) = host.forget_waiting_call(tenant, fingerprint) {
            tracing::warn!(tenant, error = %e, "a waiting MCP call could not be forgotten");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_tools_call_needs_a_key_that_may_invoke() {
        assert_eq!(access_of("tools/call"), Access::Invoke);
        for method in ["tools/list", "initialize", "server/discover", "subscriptions/listen", "ping", "anything"] {
            assert_eq!(access_of(method), Access::Enumerate, "{method}");
        }
        assert_eq!(
            rpc_method(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}"#).as_deref(),
            Some("tools/call")
        );
        assert_eq!(rpc_method(b"not json"), None);
    }

    #[test]
    fn versions_pin_as_numbers_or_their_semantic_spelling() {
        assert_eq!(version_number(&json!(3)), Some(3));
        assert_eq!(version_number(&json!("3")), Some(3));
        assert_eq!(version_number(&json!("3.0.0")), Some(3));
        for bad in [json!(0), json!(-1), json!(1.5), json!("3.1.0"), json!(true)] {
            assert_eq!(version_number(&bad), None, "{bad}");
        }
    }

    #[test]
    fn allowed_hosts_come_from_the_public_url_and_the_listen_address() {
        let options = McpOptions::for_server("https://tools.example.com", "10.0.0.5:8080".parse().unwrap(), [0; 32]);
        for host in ["localhost", "127.0.0.1", "::1", "tools.example.com", "10.0.0.5:8080"] {
            assert!(options.allowed_hosts.iter().any(|h| h == host), "{host}: {:?}", options.allowed_hosts);
        }
        assert!(options.allowed_origins.iter().any(|o| o == "https://tools.example.com"));
        let wildcard = McpOptions::for_server("http://127.0.0.1:9000", "0.0.0.0:9000".parse().unwrap(), [0; 32]);
        assert!(!wildcard.allowed_hosts.iter().any(|h| h.starts_with("0.0.0.0")));
        assert!(!format!("{wildcard:?}").contains("state_key"));
    }
}
