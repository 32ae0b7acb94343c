//! The HTTP front doors. Each is a thin translation between a protocol's
//! JSON and the core ([`ToolHost`]); this module builds the router.
//!
//! Every route is declared once in [`routes`] with the [`Access`] it needs
//! and its [`Scope`]; the router and the list of endpoints the authorization
//! tests walk both come from that one declaration, so a route cannot exist
//! without an access decision.

pub mod a2t;
pub mod admin;
pub mod auth;
pub mod error;
pub mod otc;

use crate::host::ToolHost;
use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::Method;
use axum::middleware::{self, Next};
use axum::routing::{MethodRouter, get, post};
use std::sync::Arc;

pub use auth::{Access, Caller, Scope};
pub use error::ApiError;

/// Shared state of every handler.
pub type AppState = Arc<ToolHost>;

/// How the HTTP surface is set up.
#[derive(Debug, Clone)]
pub struct ApiOptions {
    /// Largest invocation body accepted.
    pub max_request_bytes: usize,
}

impl Default for ApiOptions {
    fn default() -> Self {
        ApiOptions { max_request_bytes: 1 << 20 }
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
        let route = route.route_layer(middleware::from_fn(move |request: Request, next: Next| {
            auth::authorize(access, scope, request, next)
        }));
        self.router = self.router.route(path, route);
        self.endpoints.push(Endpoint { method, path, access, scope });
        self
    }
}

/// Every route, with its access decision.
fn routes(options: &ApiOptions) -> Routes {
    use Access::*;
    use Scope::{Server, Tenant};
    let invocation_limit = DefaultBodyLimit::max(options.max_request_bytes);
    let routes = Routes { router: Router::new(), endpoints: Vec::new() }
        .add(Method::GET, "/health", Open, Server, get(health))
        .add(Method::GET, "/.well-known/jwks.json", Open, Server, get(jwks))
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
        .add(Method::POST, "/otc/call", Invoke, Tenant, post(otc::call_tool).layer(invocation_limit));
    admin::routes(routes)
}

/// The whole HTTP surface, as a service (the tenant roots are rewritten
/// before routing, so it is not a bare `Router`).
pub fn router(host: AppState, options: ApiOptions) -> axum::Router {
    let app = routes(&options).router.fallback(not_found).with_state(host.clone());
    let service = tower::ServiceBuilder::new()
        .layer(axum::Extension(host))
        .map_request(auth::strip_tenant_root)
        .layer(middleware::from_fn(otc::uniform_errors))
        .service(app);
    Router::new().fallback_service(service)
}

/// Every endpoint the router serves, with its access decision (what the
/// authorization tests walk).
pub fn endpoints() -> Vec<Endpoint> {
    routes(&ApiOptions::default()).endpoints
}

/// The public keys this server signs CHEQ objects with, for confirmation
/// servers and for verifying stored evidence later.
async fn jwks(State(host): State<AppState>) -> axum::Json<serde_json::Value> {
    axum::Json(crate::cheq::jwks(&[host.cheq_key()]))
}

/// Open to anyone, so it says nothing about any tenant (not even how many
/// tools the server holds).
async fn health() -> axum::Json<serde_json::Value> {
    axum::Json(serde_json::json!({ "status": "ok" }))
}

fn no_such_endpoint() -> ApiError {
    ApiError::not_found(
        "no such endpoint; the A2T endpoints are /tools, /tools/{toolId}, /tools/{toolId}/versions and …:invoke, the OTC ones /otc/health, /otc/tools and /otc/tools/call, under / for the default tenant and /t/{tenant}/ for every tenant",
    )
}

async fn not_found() -> ApiError {
    no_such_endpoint()
}
