//! Paging of the listings (A2T's tools and versions, the admin API's audit
//! log): `pageLimit` and `pageCursor` in, `{"items", "paging"}` out.

use super::ApiError;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};

/// Page size when the client asks for none.
pub const DEFAULT_PAGE_LIMIT: usize = 50;
/// Largest page the server offers; larger requests are clamped to it.
pub const MAX_PAGE_LIMIT: usize = 200;

/// `pageLimit`, `pageCursor` and `tag` from the query string.
pub struct PageQuery {
    pub limit: usize,
    cursor: Option<String>,
    pub tags: Vec<String>,
}

impl PageQuery {
    pub fn parse(raw: Option<&str>) -> Result<Self, ApiError> {
        let mut query = PageQuery { limit: DEFAULT_PAGE_LIMIT, cursor: None, tags: Vec::new() };
        for (key, value) in form_urlencoded::parse(raw.unwrap_or("").as_bytes()) {
            match key.as_ref() {
                "pageLimit" => {
                    let limit: usize = value.parse().ok().filter(|n| *n >= 1).ok_or_else(|| {
                        ApiError::bad_request(
                            "invalid_page_limit",
                            format!("pageLimit must be a whole number from 1 to {MAX_PAGE_LIMIT}"),
                        )
                    })?;
                    query.limit = limit.min(MAX_PAGE_LIMIT);
                }
                "pageCursor" => query.cursor = Some(value.into_owned()),
                "tag" => query.tags.push(value.into_owned()),
                _ => {}
            }
        }
        Ok(query)
    }

    /// Decodes a cursor this server issued with `prefix`.
    pub fn cursor_after(&self, prefix: &str) -> Result<Option<String>, ApiError> {
        let Some(cursor) = &self.cursor else { return Ok(None) };
        let invalid = || {
            ApiError::bad_request(
                "invalid_cursor",
                "pageCursor is not a cursor this server issued for this listing; start again without it",
            )
        };
        let bytes = URL_SAFE_NO_PAD.decode(cursor).map_err(|_| invalid())?;
        let text = String::from_utf8(bytes).map_err(|_| invalid())?;
        text.strip_prefix(prefix).map(|s| Some(s.to_string())).ok_or_else(invalid)
    }
}

/// A cursor for the items after `after` in the listing `prefix` names.
pub fn cursor(prefix: &str, after: &str) -> String {
    URL_SAFE_NO_PAD.encode(format!("{prefix}{after}"))
}

/// A page of `items`, with the cursor of the next one if there is one.
pub fn page(items: Vec<Value>, limit: usize, next: Option<String>) -> axum::Json<Value> {
    axum::Json(json!({ "items": items, "paging": paging(limit, next) }))
}

fn paging(limit: usize, next: Option<String>) -> Value {
    let mut paging = json!({ "pageLimit": limit });
    if let Some(next) = next {
        paging["next"] = next.into();
    }
    paging
}

/// A page of items that are JSON text already.
pub fn page_of_json(items: impl Iterator<Item = String>, limit: usize, next: Option<String>) -> Response {
    let mut body = String::from("{\"items\":[");
    for (i, item) in items.enumerate() {
        if i > 0 {
            body.push(',');
        }
        body.push_str(&item);
    }
    body.push_str("],\"paging\":");
    body.push_str(&paging(limit, next).to_string());
    body.push('}');
    json_text(body)
}

/// A `200` whose body is JSON text.
pub fn json_text(body: String) -> Response {
    ([(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], body).into_response()
}
