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

use super::schemas::*;
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

/// The server's own annotated handlers, the schemas the annotations do not
/// reach, and the tags; each door lists its own handlers beside them (its
/// `Doc`), merged in by [`document`].
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
        super::pages::stylesheet,
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
        (name = "Accounts", description = "End-user authorization: the pages where a person connects the account a tool acts with, their connected accounts, and the status an agent polls; docs/authorization.md"),
        (name = "Catalog", description = "The designer's catalog: pages for people, signed in with an API key of the tenant; docs/catalog.md"),
    )
)]
struct Annotated;

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
    let mut annotated = Annotated::openapi();
    for door in [
        super::a2t::Doc::openapi(),
        super::otc::Doc::openapi(),
        super::cheq::Doc::openapi(),
        super::admin::Doc::openapi(),
        super::toolsets::Doc::openapi(),
        super::console::Doc::openapi(),
        super::catalog::Doc::openapi(),
        super::oauth::Doc::openapi(),
        super::login::Doc::openapi(),
        super::authorizations::Doc::openapi(),
        super::connections::Doc::openapi(),
    ] {
        annotated.merge(door);
    }
    let mut doc = serde_json::to_value(annotated).unwrap_or_default();
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
        Access::CatalogPublish => "catalog-publish",
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
    if endpoint.access.is_catalog() {
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
    let who = if endpoint.access == Access::CatalogPublish {
        "Needs a catalog session of the tenant opened with a publisher key (or an operator's): sign in at `catalog/sign-in`. Forms carry the session's form token."
    } else {
        "Needs a catalog session of the tenant: sign in at `catalog/sign-in` with any of its keys (a consumer key is enough). Forms carry the session's form token."
    };
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
            page(if endpoint.access == Access::CatalogPublish {
                "`forbidden`: the session's key is a consumer's, or the form does not carry the session's form token, or came from another site"
            } else {
                "`forbidden`: the form does not carry the session's form token, or came from another site"
            }),
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
                Some(_) if endpoint.access.is_catalog() => {
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
