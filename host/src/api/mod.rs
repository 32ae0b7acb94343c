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

/// The whole HTTP surface. The admin API needs `admin_token`; without one
/// it is disabled.
pub fn router(host: AppState, admin_token: Option<String>) -> Router {
    Router::new()
        .route("/health", get(health))
        .merge(a2t::routes())
        .merge(admin::routes(admin_token))
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
