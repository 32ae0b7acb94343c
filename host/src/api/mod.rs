//! The HTTP front doors. Each is a thin translation between a protocol's
//! JSON and the core ([`ToolHost`]); this module builds the router.

pub mod a2t;
pub mod admin;
pub mod error;

use crate::host::ToolHost;
use axum::Router;
use axum::routing::get;
use std::sync::Arc;

pub use error::ApiError;

/// Shared state of every handler.
pub type AppState = Arc<ToolHost>;

/// How the HTTP surface is set up.
#[derive(Debug, Clone)]
pub struct ApiOptions {
    /// The admin API's bearer token; `None` disables the admin API.
    pub admin_token: Option<String>,
    /// Largest invocation body accepted.
    pub max_request_bytes: usize,
}

impl Default for ApiOptions {
    fn default() -> Self {
        ApiOptions { admin_token: None, max_request_bytes: 1 << 20 }
    }
}

/// The whole HTTP surface.
pub fn router(host: AppState, options: ApiOptions) -> Router {
    Router::new()
        .route("/health", get(health))
        .merge(a2t::routes().layer(axum::extract::DefaultBodyLimit::max(options.max_request_bytes)))
        .merge(admin::routes(options.admin_token))
        .fallback(not_found)
        .with_state(host)
}

async fn health(axum::extract::State(host): axum::extract::State<AppState>) -> axum::Json<serde_json::Value> {
    axum::Json(serde_json::json!({ "status": "ok", "tools": host.registry().len() }))
}

async fn not_found() -> ApiError {
    ApiError::not_found(
        "no such endpoint; the A2T endpoints are /tools, /tools/{toolId}, /tools/{toolId}/versions and …:invoke",
    )
}
