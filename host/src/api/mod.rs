//! The HTTP front doors. Each is a thin translation between a protocol's
//! JSON and the core ([`ToolHost`]); this module builds the router.
//!
//! Every route is declared once in [`routes`] with the [`Access`] it needs
//! and its [`Scope`]; the router and the list of endpoints the authorization
//! tests walk both come from that one declaration, so a route cannot exist
//! without an access decision.

pub mod a2t;
pub mod access;
pub mod admin;
pub mod auth;
pub mod authorizations;
pub mod catalog;
pub mod cheq;
pub mod connections;
pub mod console;
pub mod cors;
pub mod error;
pub mod links;
pub mod listings;
pub mod login;
pub mod mcp;
pub mod oauth;
pub mod openapi;
pub mod otc;
pub mod pages;
pub mod paging;
pub mod schemas;
pub mod serve;
pub mod toolsets;

use crate::door::FrontDoor;
use crate::host::{InvokeError, ToolHost};
use crate::invocation::ToolResult;
use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::Method;
use axum::middleware::{self, Next};
use axum::routing::{MethodRouter, delete, get, post, put};
use std::sync::Arc;
use std::time::Duration;

pub use access::{Access, Caller, Scope};
pub use error::ApiError;

/// Shared state of every handler.
pub type AppState = Arc<ToolHost>;

/// How the HTTP surface is set up.
#[derive(Debug, Clone)]
pub struct ApiOptions {
    /// Largest invocation body accepted.
    pub max_request_bytes: usize,
    /// The URL clients reach the server at, without a trailing `/` (the
    /// absolute URIs of CHEQ URI packs start with it).
    pub public_url: String,
    /// Time a request's body may take to arrive, from when its head did;
    /// later answers `408 request_timeout`.
    pub request_body_timeout: Duration,
    /// The MCP door's Host/Origin checks and request-state key.
    pub mcp: mcp::McpOptions,
    /// Browser origins allowed to call the MCP and OAuth endpoints from
    /// script (`cors.rs`); none by default.
    pub cors_origins: Vec<String>,
}

impl Default for ApiOptions {
    fn default() -> Self {
        ApiOptions {
            max_request_bytes: 1 << 20,
            public_url: "http://127.0.0.1:8080".into(),
            request_body_timeout: Duration::from_secs(30),
            mcp: mcp::McpOptions::default(),
            cors_origins: Vec::new(),
        }
    }
}

/// One method on one path, and who may call it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Endpoint {
    /// The HTTP method.
    pub method: Method,
    /// The path under a platform root, as routed (`/tools/{tool_ref}`).
    pub path: &'static str,
    /// Who may call it.
    pub access: Access,
    /// Whether it is served under every tenant's root or the server's only.
    pub scope: Scope,
    /// The JSON-RPC method, on the MCP endpoint (which decides access per
    /// method).
    pub rpc_method: Option<&'static str>,
}

/// Builds the router and the list of its endpoints together.
struct Routes {
    router: Router<AppState>,
    endpoints: Vec<Endpoint>,
}

impl Routes {
    fn add(
        mut self,
        method: Method,
        path: &'static str,
        access: Access,
        scope: Scope,
        route: MethodRouter<AppState>,
    ) -> Self {
        let route = route
            .route_layer(middleware::from_fn(move |request: Request, next: Next| {
                auth::authorize(access, scope, request, next)
            }))
            .route_layer(middleware::from_fn(move |request: Request, next: Next| counted(path, request, next)));
        self.router = self.router.route(path, route);
        self.endpoints.push(Endpoint { method, path, access, scope, rpc_method: None });
        self
    }

    /// The MCP endpoint: every HTTP method goes to rmcp (which answers the
    /// ones the protocol does not use), access decided per JSON-RPC method.
    fn add_mcp(mut self, options: &ApiOptions) -> Self {
        let door = mcp::McpDoor::new(Arc::new(options.clone()));
        let service = mcp::service(door.clone());
        // `layer`, not `route_layer`: every method is the service's fallback.
        let route = axum::routing::any_service(service)
            // Behind one `Arc`: the layer clones its state for every request.
            .layer(middleware::from_fn_with_state(Arc::new(door), mcp::per_method))
            .layer(middleware::from_fn(|request: Request, next: Next| {
                auth::authorize(Access::Enumerate, Scope::Tenant, request, next)
            }))
            .layer(middleware::from_fn(|request: Request, next: Next| counted("/mcp", request, next)));
        self.router = self.router.route("/mcp", route);
        for method in [Method::GET, Method::DELETE] {
            self.endpoints.push(Endpoint {
                method,
                path: "/mcp",
                access: Access::Enumerate,
                scope: Scope::Tenant,
                rpc_method: None,
            });
        }
        for rpc in mcp::RPC_METHODS {
            self.endpoints.push(Endpoint {
                method: Method::POST,
                path: "/mcp",
                access: mcp::access_of(rpc),
                scope: Scope::Tenant,
                rpc_method: Some(rpc),
            });
        }
        self
    }
}

/// Every route, with its access decision.
fn routes(options: &ApiOptions) -> Routes {
    use Access::*;
    use Scope::{Server, Tenant};
    let invocation_limit = DefaultBodyLimit::max(options.max_request_bytes);
    let form_limit = DefaultBodyLimit::max(64 * 1024);
    let routes = Routes { router: Router::new(), endpoints: Vec::new() }
        .add(Method::GET, "/health", Open, Server, get(health))
        .add(Method::GET, "/ready", Open, Server, get(ready))
        .add(Method::GET, "/.well-known/jwks.json", Open, Server, get(jwks))
        .add(Method::GET, "/metrics", Operate, Server, get(metrics))
        .add(Method::GET, "/openapi.json", Open, Server, get(openapi::openapi_json))
        // A2T, under every platform root.
        .add(Method::GET, "/tools", Enumerate, Tenant, get(a2t::list_tools))
        .add(Method::GET, "/tools/{tool_ref}", Enumerate, Tenant, get(a2t::get_tool))
        .add(Method::POST, "/tools/{tool_ref}", Invoke, Tenant, post(a2t::invoke_current).layer(invocation_limit))
        .add(Method::GET, "/tools/{tool_id}/versions", Enumerate, Tenant, get(a2t::list_versions))
        .add(Method::GET, "/tools/{tool_id}/versions/{version_ref}", Enumerate, Tenant, get(a2t::get_version))
        .add(
            Method::POST,
            "/tools/{tool_id}/versions/{version_ref}",
            Invoke,
            Tenant,
            post(a2t::invoke_version).layer(invocation_limit),
        )
        // Open Tool Calling, under every platform root.
        .add(Method::GET, "/otc/health", Open, Tenant, get(otc::health))
        .add(Method::GET, "/otc/tools", Enumerate, Tenant, get(otc::list_tools))
        .add(Method::POST, "/otc/tools/call", Invoke, Tenant, post(otc::call_tool).layer(invocation_limit))
        .add(Method::POST, "/otc/call", Invoke, Tenant, post(otc::call_tool).layer(invocation_limit))
        // CHEQ: the resource and result URIs, the built-in confirmation
        // server, the evidence. The resource URI is a capability (128
        // random bits); an accept must carry a confirmation server's
        // signature.
        .add(Method::GET, "/cheq/transactions/{id}", Open, Tenant, get(cheq::get_transaction))
        .add(Method::GET, "/cheq/transactions/{id}/cheq", Open, Tenant, get(cheq::get_transaction))
        .add(Method::POST, "/cheq/transactions/{id}", Open, Tenant, post(cheq::decide_transaction).layer(form_limit))
        .add(Method::GET, "/cheq/results/{id}", Invoke, Tenant, get(cheq::get_result))
        .add(Method::GET, "/cheq/confirm", Open, Tenant, get(cheq::confirm_page))
        .add(Method::POST, "/cheq/confirm", Open, Tenant, post(cheq::confirm_page).layer(form_limit))
        .add(Method::POST, "/cheq/login", Open, Tenant, post(login::login).layer(form_limit))
        .add(Method::POST, "/cheq/decide", Open, Tenant, post(cheq::decide).layer(form_limit))
        .add(Method::GET, "/admin/cheq/{id}", Audit, Server, get(cheq::evidence))
        .add(Method::PUT, "/admin/end-users/{name}", Publish, Tenant, put(cheq::put_end_user).layer(form_limit))
        .add(Method::DELETE, "/admin/end-users/{name}", Publish, Tenant, delete(cheq::delete_end_user))
        .add(Method::GET, "/admin/logs", Publish, Tenant, {
            let stopping = options.mcp.stopping.clone();
            get(move |state, caller, query, headers| console::logs(state, caller, query, headers, stopping.subscribe()))
        })
        .add(Method::GET, "/admin/usage", Publish, Tenant, get(console::usage))
        .add(Method::GET, "/admin/console-settings", Publish, Tenant, get(console::get_console_settings))
        .add(
            Method::PUT,
            "/admin/console-settings",
            Publish,
            Tenant,
            put(console::put_console_settings).layer(form_limit),
        )
        .add(Method::GET, "/admin/confirmation-server", Publish, Tenant, get(cheq::get_confirmation_server))
        .add(
            Method::PUT,
            "/admin/confirmation-server",
            Publish,
            Tenant,
            put(cheq::put_confirmation_server).layer(form_limit),
        )
        .add(Method::DELETE, "/admin/confirmation-server", Publish, Tenant, delete(cheq::delete_confirmation_server))
        .add(Method::GET, "/admin/tools/{tool_id}/confirmation", Publish, Tenant, get(cheq::get_policy))
        .add(
            Method::PUT,
            "/admin/tools/{tool_id}/confirmation",
            Publish,
            Tenant,
            put(cheq::put_policy).layer(form_limit),
        )
        .add(Method::DELETE, "/admin/tools/{tool_id}/confirmation", Publish, Tenant, delete(cheq::delete_policy))
        // The pages' stylesheet, and the designer's catalog: its pages need
        // a catalog session of the tenant (`Catalog`, decided in auth.rs).
        .add(Method::GET, pages::STYLESHEET_PATH, Open, Server, get(pages::stylesheet))
        .add(Method::GET, "/catalog/sign-in", Open, Tenant, get(catalog::session::sign_in_form))
        .add(Method::POST, "/catalog/sign-in", Open, Tenant, post(catalog::session::sign_in).layer(form_limit))
        .add(Method::POST, "/catalog/sign-out", Catalog, Tenant, post(catalog::session::sign_out).layer(form_limit))
        .add(Method::GET, "/catalog", Catalog, Tenant, get(catalog::list::catalog))
        .add(Method::GET, "/catalog/tools/{tool_id}", Catalog, Tenant, get(catalog::tool_page::tool))
        .add(Method::GET, "/catalog/tools/{tool_id}/diff", Catalog, Tenant, get(catalog::diff::diff))
        .add(Method::GET, "/catalog/tools/{tool_id}/try", Catalog, Tenant, get(catalog::try_call::try_form))
        .add(
            Method::POST,
            "/catalog/tools/{tool_id}/try",
            Catalog,
            Tenant,
            post(catalog::try_call::try_call).layer(invocation_limit),
        )
        .add(Method::GET, "/catalog/confirmations/{id}", Catalog, Tenant, get(catalog::try_call::confirmation))
        .add(Method::GET, "/catalog/toolsets", Catalog, Tenant, get(catalog::toolsets::toolsets))
        .add(Method::POST, "/catalog/toolsets", CatalogPublish, Tenant, post(catalog::toolsets::edit).layer(form_limit))
        .add(Method::GET, "/catalog/toolsets/{name}", Catalog, Tenant, get(catalog::toolsets::toolset))
        .add(Method::GET, "/catalog/toolsets/{name}/diff", Catalog, Tenant, get(catalog::toolsets::diff))
        .add(Method::GET, "/catalog/providers", CatalogPublish, Tenant, get(catalog::providers::providers))
        // OAuth 2.1 for the MCP door: metadata where RFC 9728 and RFC 8414
        // put it (and under each tenant's root), the tenant's authorization
        // server.
        .add(Method::GET, "/.well-known/oauth-protected-resource", Open, Tenant, get(oauth::resource_metadata_here))
        .add(
            Method::GET,
            "/.well-known/oauth-protected-resource/mcp",
            Open,
            Server,
            get(oauth::default_resource_metadata),
        )
        .add(
            Method::GET,
            "/.well-known/oauth-protected-resource/t/{tenant}/mcp",
            Open,
            Server,
            get(oauth::tenant_resource_metadata),
        )
        .add(
            Method::GET,
            "/.well-known/oauth-protected-resource/t/{tenant}/toolsets/{name}/mcp",
            Open,
            Server,
            get(oauth::toolset_resource_metadata),
        )
        .add(Method::GET, "/.well-known/oauth-authorization-server", Open, Tenant, get(oauth::server_metadata_here))
        .add(
            Method::GET,
            "/.well-known/oauth-authorization-server/t/{tenant}",
            Open,
            Server,
            get(oauth::tenant_server_metadata),
        )
        .add(Method::GET, "/oauth/authorize", Open, Tenant, get(oauth::authorize_form))
        .add(Method::POST, "/oauth/authorize", Open, Tenant, post(oauth::authorize).layer(form_limit))
        .add(Method::POST, "/oauth/token", Open, Tenant, post(oauth::token).layer(form_limit))
        .add(Method::POST, "/oauth/register", Open, Tenant, post(oauth::register).layer(form_limit))
        .add(Method::POST, "/oauth/revoke", Open, Tenant, post(oauth::revoke).layer(form_limit))
        .add(
            Method::PUT,
            "/admin/tenants/{tenant}/oauth",
            Operate,
            Server,
            put(oauth::put_tenant_oauth).layer(form_limit),
        );
    // End-user authorization: the admin API, the person's pages and the
    // agent's status (docs/authorization.md).
    let routes = connections::routes(authorizations::routes(routes));
    toolsets::routes(admin::routes(routes)).add_mcp(options)
}

/// The whole HTTP surface, as a service (the tenant roots are rewritten
/// before routing, so it is not a bare `Router`).
pub fn router(host: AppState, options: ApiOptions) -> axum::Router {
    let app = routes(&options).router.fallback(not_found).with_state(host.clone());
    let body_timeout = options.request_body_timeout;
    let service = tower::ServiceBuilder::new()
        .layer(middleware::from_fn(request_id))
        .layer(axum::Extension(host))
        .layer(axum::Extension(Arc::new(options)))
        .map_request(auth::strip_tenant_root)
        .layer(middleware::from_fn(cors::cors))
        .layer(middleware::from_fn(otc::uniform_errors))
        .layer(middleware::map_response(error::as_error_body))
        .layer(middleware::from_fn(move |request: Request, next: Next| body_deadline(body_timeout, request, next)))
        .service(app);
    Router::new().fallback_service(service)
}

/// Counts the answer of a request to the declared `route` (in the metrics,
/// by method, route and status: a bounded set).
async fn counted(route: &'static str, request: Request, next: Next) -> axum::response::Response {
    let method = known_method(request.method());
    if crate::telemetry::exporting() {
        // The request's span (`request_id`) is named by its route.
        crate::telemetry::routed(&tracing::Span::current(), method, route);
    }
    let host = request.extensions().get::<AppState>().cloned();
    let response = next.run(request).await;
    if let Some(host) = host {
        host.metrics().answered(method, route, response.status().as_u16());
    }
    response
}

/// A method's name from a fixed set, for a metric label.
fn known_method(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

/// `GET /metrics`: the Prometheus exposition, in the OpenMetrics text
/// format (Prometheus asks for it by default).
#[utoipa::path(get, summary = "Prometheus metrics", description = "The metrics in the OpenMetrics text format (docs/observability.md).", path = "/metrics", tag = "Server", responses(
    (status = 200, description = "The metrics (docs/observability.md)", content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8", body = String),
))]
async fn metrics(State(host): State<AppState>) -> axum::response::Response {
    use axum::response::IntoResponse;
    let content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8";
    ([(axum::http::header::CONTENT_TYPE, content_type)], host.render_metrics()).into_response()
}

/// Gives every request an id: the caller's `x-request-id` when it is a
/// sensible one (1–128 of `A-Za-z0-9._:-`), else a new one. It is in every
/// log line of the request (a `request` span) and in the answer's
/// `x-request-id`. A valid `traceparent` is put on the request as a
/// [`CallerTrace`](crate::telemetry::CallerTrace) for the doors.
async fn request_id(mut request: Request, next: Next) -> axum::response::Response {
    use tracing::Instrument;
    const HEADER: &str = "x-request-id";
    let given = request.headers().get(HEADER).and_then(|value| value.to_str().ok()).filter(|id| {
        (1..=128).contains(&id.len())
            && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
    });
    let id = match given {
        Some(id) => id.to_string(),
        None => new_request_id(),
    };
    // The caller's W3C trace context, for the doors to hand to the core.
    let caller = crate::telemetry::CallerTrace::from_headers(request.headers());
    if let Some(caller) = &caller {
        request.extensions_mut().insert(caller.clone());
    }
    if !crate::telemetry::exporting() {
        let mut response = next.run(request).instrument(tracing::info_span!("request", id = %id)).await;
        if let Ok(value) = axum::http::HeaderValue::from_str(&id) {
            response.headers_mut().insert(HEADER, value);
        }
        return response;
    }
    // Exported: an OpenTelemetry server span, named by its declared route
    // once routed (`counted`), never by its path: a CHEQ resource URI's
    // path is a capability.
    let span = crate::telemetry::server_span(&id, known_method(request.method()), caller.as_ref());
    let mut response = next.run(request).instrument(span.clone()).await;
    crate::telemetry::answered(&span, response.status());
    if let Ok(value) = axum::http::HeaderValue::from_str(&id) {
        response.headers_mut().insert(HEADER, value);
    }
    response
}

/// A request id unique across restarts and replicas without a system call
/// per request: 64 random bits drawn once per process, and a counter.
fn new_request_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static PROCESS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let process = PROCESS.get_or_init(|| uuid::Uuid::new_v4().as_u64_pair().0);
    format!("{process:016x}-{:x}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Gives a request's body `timeout` to arrive: a client that sends its
/// head and then trickles (or withholds) the body is answered `408` and the
/// connection closed, whatever the handler made of the failed read.
///
/// And an HTTP/1 answer sent before its request's body was read to the
/// end (a refusal: `401`, `404`, `413`…) says `Connection: close`. hyper
/// drains what has already arrived of such a body and otherwise closes the
/// connection once the answer is written; told nothing, a client sends its
/// next request down the closing connection and gets no answer ("Server
/// disconnected without sending a response": the MCP Python SDK's first
/// request after its `401`, when the body had not arrived by the time the
/// server refused the head).
async fn body_deadline(timeout: Duration, request: Request, next: Next) -> axum::response::Response {
    use axum::response::IntoResponse;
    use http_body::Body as _;
    use std::sync::atomic::Ordering::Relaxed;
    // Nothing to wait for (a GET, say): no timer on the per-request path.
    if request.body().is_end_stream() {
        return next.run(request).await;
    }
    let state = Arc::new(BodyState::default());
    let (parts, body) = request.into_parts();
    let http1 = parts.version <= axum::http::Version::HTTP_11;
    let body = DeadlineBody { inner: body, deadline: Box::pin(tokio::time::sleep(timeout)), state: state.clone() };
    let mut response = next.run(Request::from_parts(parts, axum::body::Body::new(body))).await;
    if state.expired.load(Relaxed) {
        response = ApiError::new(
            axum::http::StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            format!("the request body did not arrive within {} seconds; send it whole, then retry", timeout.as_secs()),
        )
        .into_response();
    } else if state.read.load(Relaxed) || !http1 {
        return response;
    }
    response.headers_mut().insert(axum::http::header::CONNECTION, axum::http::HeaderValue::from_static("close"));
    response
}

/// What became of a request's body, for [`body_deadline`].
#[derive(Default)]
struct BodyState {
    /// Its deadline passed before it arrived.
    expired: std::sync::atomic::AtomicBool,
    /// It was read to its end.
    read: std::sync::atomic::AtomicBool,
}

/// A request body that fails once its deadline passes.
struct DeadlineBody {
    inner: axum::body::Body,
    deadline: std::pin::Pin<Box<tokio::time::Sleep>>,
    state: Arc<BodyState>,
}

impl http_body::Body for DeadlineBody {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        use std::future::Future;
        use std::task::Poll;
        if let Poll::Ready(frame) = std::pin::Pin::new(&mut self.inner).poll_frame(cx) {
            if frame.is_none() || matches!(frame, Some(Ok(_))) && self.inner.is_end_stream() {
                self.state.read.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            return Poll::Ready(frame);
        }
        if self.deadline.as_mut().poll(cx).is_ready() {
            self.state.expired.store(true, std::sync::atomic::Ordering::Relaxed);
            return Poll::Ready(Some(Err(axum::Error::new("the request body did not arrive in time"))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// A call's answer in the shape of the door it came through, for answers
/// made away from that door (a confirmed call's result, kept for the result
/// URI). With [`render_error`], the one place that knows every door's
/// shape, so that no door calls another.
pub(crate) async fn render_outcome(
    door: FrontDoor,
    call_id: &str,
    version: u32,
    has_outputs: bool,
    duration: Duration,
    outcome: Result<ToolResult, InvokeError>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let json = |status: axum::http::StatusCode, body: String| {
        (status, [(axum::http::header::CONTENT_TYPE, "application/json")], body).into_response()
    };
    match door {
        FrontDoor::A2t => a2t::answer(outcome, call_id, version),
        FrontDoor::Otc => match otc::result(call_id, duration, has_outputs, outcome) {
            Ok(body) => json(axum::http::StatusCode::OK, body),
            Err(e) => render_error(door, ApiError::from(e)).await,
        },
        FrontDoor::Mcp => {
            let (status, body) = mcp::stored_answer(outcome);
            json(status, body)
        }
    }
}

/// An error in the shape of `door`'s errors.
pub(crate) async fn render_error(door: FrontDoor, error: ApiError) -> axum::response::Response {
    use axum::response::IntoResponse;
    match door {
        FrontDoor::A2t | FrontDoor::Mcp => error.into_response(),
        FrontDoor::Otc => otc::otc_error_shape(error.into_response()).await,
    }
}

/// The body, or `413 request_too_large` past the configured limit.
pub(crate) fn body_within_limit(
    body: Result<axum::body::Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<axum::body::Bytes, ApiError> {
    body.map_err(|rejection| {
        if rejection.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                axum::http::StatusCode::PAYLOAD_TOO_LARGE,
                "request_too_large",
                "the request body is larger than this server accepts",
            )
        } else {
            ApiError::bad_request("invalid_request", "the request body could not be read")
        }
    })
}

/// Every endpoint the router serves, with its access decision (what the
/// authorization tests walk).
pub fn endpoints() -> Vec<Endpoint> {
    routes(&ApiOptions::default()).endpoints
}

/// The public keys this server signs CHEQ objects with (as resource server
/// and as built-in confirmation server), for confirmation servers and for
/// verifying stored evidence later.
#[utoipa::path(get, summary = "The server's public signing keys", description = "The Ed25519 keys this server signs CHEQ objects with, as resource server and as built-in confirmation server: for confirmation servers, and to verify stored evidence later.", path = "/.well-known/jwks.json", tag = "Server", operation_id = "jwks", responses(
    (status = 200, description = "The server's JSON Web Key Set", body = schemas::Jwks),
))]
async fn jwks(State(host): State<AppState>) -> axum::Json<serde_json::Value> {
    axum::Json(host.cheq_jwks())
}

/// Liveness: the process answers.
///
/// Open to anyone, so it says nothing about any tenant (not even how many
/// tools the server holds).
#[utoipa::path(get, path = "/health", tag = "Server", operation_id = "health", responses(
    (status = 200, description = "The server answers", body = schemas::Health),
))]
async fn health() -> axum::Json<serde_json::Value> {
    axum::Json(serde_json::json!({ "status": "ok" }))
}

/// Readiness (a load balancer's or Kubernetes' probe).
///
/// `200` once the registry is loaded and this replica is caught up with the
/// store's change log, `503` before, or while the store cannot be reached —
/// so traffic goes to replicas that see every deploy and revocation.
/// `/health` is liveness: the process answers.
#[utoipa::path(get, path = "/ready", tag = "Server", operation_id = "ready", responses(
    (status = 200, description = "Ready for traffic", body = schemas::Readiness),
    (status = 503, description = "Not caught up with the store, or cannot reach it", body = schemas::Readiness,
        headers(("Retry-After" = u64, description = "Seconds to wait"))),
))]
async fn ready(State(host): State<AppState>) -> axum::response::Response {
    use axum::http::{StatusCode, header};
    use axum::response::IntoResponse;
    if host.is_ready() && host.can_run_tools() {
        axum::Json(serde_json::json!({ "status": "ready" })).into_response()
    } else {
        let body = serde_json::json!({
            "status": "not_ready",
            "message": "this replica is not caught up with the store, or cannot reach it",
        });
        (StatusCode::SERVICE_UNAVAILABLE, [(header::RETRY_AFTER, "1")], axum::Json(body)).into_response()
    }
}

fn no_such_endpoint() -> ApiError {
    ApiError::not_found(
        "no such endpoint; the A2T endpoints are /tools, /tools/{toolId}, /tools/{toolId}/versions and …:invoke, the OTC ones /otc/health, /otc/tools and /otc/tools/call, under / for the default tenant and /t/{tenant}/ for every tenant",
    )
}

async fn not_found() -> ApiError {
    no_such_endpoint()
}
