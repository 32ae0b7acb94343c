//! The direct lane: the plainest MCP request of all — a stateless
//! (2026-07-28) `tools/call`, with its standard headers, from a client that
//! sent no `Origin` — served without rmcp's per-request machinery.
//!
//! rmcp serves each stateless request by building a service for it, with
//! channels, a cancellation tree and a spawned serve loop, and parses the
//! message twice; for a tool that answers in microseconds that cost more
//! than the tool (bench/ANALYSIS.md). This lane reads the message once and
//! calls the same [`McpDoor::call`](super::McpDoor) rmcp would, and writes
//! the answer with rmcp's own types.
//!
//! It never refuses anything: it takes a request only when every check rmcp
//! makes would pass it (Host, Origin, `Accept`, `Content-Type`, the
//! revision's headers and `_meta`), and leaves anything else — anything
//! unusual, anything it is not sure of, every other method — to rmcp, which
//! refuses or serves it as before. The e2e tests send the same calls both
//! ways and compare the answers.

use super::McpOptions;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use rmcp::ErrorData;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ErrorCode, InputResponses, JsonObject, ProtocolVersion, RequestId,
    RequestMetaObject, ServerJsonRpcMessage, ServerResult,
};

/// The only revision the lane serves: the one whose requests carry their own
/// `_meta` and need no session.
const REVISION: &str = "2026-07-28";

/// The revision's headers, by name (looked up without parsing the name).
const MCP_PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
const MCP_METHOD: HeaderName = HeaderName::from_static("mcp-method");
const MCP_NAME: HeaderName = HeaderName::from_static("mcp-name");

/// A `tools/call` the lane takes: its id, its parameters, and whether the
/// client declared URL elicitation (in `_meta`, read once here).
pub(super) struct PlainCall {
    pub id: RequestId,
    pub params: CallToolRequestParams,
    pub can_open_urls: bool,
}

/// The lane of one door: what it checks requests against, parsed once.
pub(super) struct Lane {
    /// The allowed `Host` values: a host (lowercase), and a port unless
    /// any is allowed. Bracketed (IPv6) entries are left out: the lane
    /// leaves such hosts to rmcp.
    hosts: Vec<(String, Option<u16>)>,
}

/// The JSON-RPC envelope, with nothing else in it.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Envelope {
    jsonrpc: String,
    id: RequestId,
    method: String,
    params: Params,
}

/// `tools/call`'s params, with only the fields rmcp knows: anything else
/// (a task, a field of a later revision) is left to rmcp. Read straight
/// from the body, in the one pass that reads the envelope; a duplicated
/// field fails here and is left to rmcp too.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Params {
    #[serde(rename = "_meta", default)]
    meta: Option<RequestMetaObject>,
    name: String,
    #[serde(default)]
    arguments: Option<JsonObject>,
    #[serde(default)]
    input_responses: Option<InputResponses>,
    #[serde(default)]
    request_state: Option<String>,
}

impl From<Params> for CallToolRequestParams {
    fn from(params: Params) -> Self {
        let mut call = CallToolRequestParams::new(params.name);
        call.meta = params.meta;
        call.arguments = params.arguments;
        call.input_responses = params.input_responses;
        call.request_state = params.request_state;
        call
    }
}

impl Lane {
    /// The lane of a door set up with `options`.
    pub fn new(options: &McpOptions) -> Lane {
        let hosts = options
            .allowed_hosts
            .iter()
            .filter_map(|entry| entry.parse::<http::uri::Authority>().ok())
            .filter(|entry| !entry.host().starts_with('['))
            .map(|entry| (entry.host().to_ascii_lowercase(), entry.port_u16()))
            .collect();
        Lane { hosts }
    }

    /// The call, when the request is one rmcp would pass on to the handler
    /// unchanged; `None` leaves the request to rmcp.
    pub fn plain_call(&self, parts: &http::request::Parts, body: &[u8]) -> Option<PlainCall> {
        let headers = &parts.headers;
        if parts.method != http::Method::POST
            || headers.contains_key(header::ORIGIN)
            || !self.host_allowed(headers)
            || !accepts_json_and_sse(headers)
            || !is_json(headers)
            || only(headers, &MCP_PROTOCOL_VERSION) != Some(REVISION)
            || only(headers, &MCP_METHOD) != Some("tools/call")
            || headers.keys().any(|name| name.as_str().starts_with("mcp-param-"))
        {
            return None;
        }
        let envelope: Envelope = serde_json::from_slice(body).ok()?;
        if envelope.jsonrpc != "2.0" || envelope.method != "tools/call" {
            return None;
        }
        let params = CallToolRequestParams::from(envelope.params);
        let meta = params.meta.as_ref()?;
        // The revision's two required keys, as rmcp's `missing_required_keys`
        // reads them (the capabilities decoded once, for the call too).
        let capabilities = meta.client_capabilities()?;
        if meta.protocol_version() != Some(ProtocolVersion::V_2026_07_28)
            // A plain name, sent as is (rmcp also decodes a Base64 form).
            || only(headers, &MCP_NAME) != Some(params.name.as_ref())
            || params.name.starts_with("=?")
        {
            return None;
        }
        let can_open_urls = capabilities.elicitation.is_some_and(|e| e.url.is_some());
        Some(PlainCall { id: envelope.id, params, can_open_urls })
    }

    /// The Host is one the door allows, by the rule rmcp applies: the same
    /// host (case aside), and the same port unless the allowed entry names
    /// none. Bracketed (IPv6) hosts are left to rmcp.
    fn host_allowed(&self, headers: &HeaderMap) -> bool {
        let Some(authority) = only(headers, &header::HOST).and_then(|h| h.parse::<http::uri::Authority>().ok()) else {
            return false;
        };
        let host = authority.host();
        if host.starts_with('[') {
            return false;
        }
        self.hosts.iter().any(|(allowed, port)| {
            allowed.eq_ignore_ascii_case(host) && port.is_none_or(|p| authority.port_u16() == Some(p))
        })
    }
}

/// The handler's answer as rmcp writes it for a stateless request: a JSON
/// body, and the HTTP status rmcp gives each JSON-RPC error.
pub(super) fn answer(id: RequestId, outcome: Result<CallToolResponse, ErrorData>) -> Response {
    let (status, message) = match outcome {
        Ok(response) => (StatusCode::OK, ServerJsonRpcMessage::response(ServerResult::from(response), id)),
        Err(error) => (status_of(error.code), ServerJsonRpcMessage::error(error, Some(id))),
    };
    match serde_json::to_vec(&message) {
        Ok(body) => {
            (status, [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], body).into_response()
        }
        Err(e) => {
            tracing::error!(error = %e, "an MCP answer could not be serialised");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

/// rmcp's HTTP status for a JSON-RPC error on a 2026-07-28 request whose
/// `_meta` is well formed (the lane takes no other).
fn status_of(code: ErrorCode) -> StatusCode {
    match code {
        ErrorCode::UNSUPPORTED_PROTOCOL_VERSION
        | ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
        | ErrorCode::HEADER_MISMATCH => StatusCode::BAD_REQUEST,
        ErrorCode::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
        _ => StatusCode::OK,
    }
}

/// The one value of a header, if it has exactly one, readable.
fn only<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a str> {
    let mut values = headers.get_all(name).iter();
    let value = values.next()?;
    values.next().is_none().then(|| value.to_str().ok()).flatten()
}

/// `Accept` lists both types the transport needs, plainly: a list with
/// weights (which may exclude a type) is left to rmcp.
fn accepts_json_and_sse(headers: &HeaderMap) -> bool {
    let Some(accept) = only(headers, &header::ACCEPT) else { return false };
    if accept.contains(';') {
        return false;
    }
    let types: Vec<&str> = accept.split(',').map(str::trim).collect();
    ["application/json", "text/event-stream"].iter().all(|wanted| types.iter().any(|t| t.eq_ignore_ascii_case(wanted)))
}

/// `Content-Type` is JSON.
fn is_json(headers: &HeaderMap) -> bool {
    only(headers, &header::CONTENT_TYPE).is_some_and(|value| {
        let essence = value.split(';').next().unwrap_or_default().trim();
        essence.eq_ignore_ascii_case("application/json")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &str = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;

    fn parts(extra: &[(&str, &str)], without: &[&str]) -> http::request::Parts {
        let mut request = http::Request::post("/mcp");
        for (name, value) in [
            ("host", "127.0.0.1:8080"),
            ("accept", "application/json, text/event-stream"),
            ("content-type", "application/json"),
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "echo"),
        ] {
            if !without.contains(&name) {
                request = request.header(name, value);
            }
        }
        for (name, value) in extra {
            request = request.header(*name, *value);
        }
        request.body(()).unwrap().into_parts().0
    }

    fn takes(parts: &http::request::Parts, body: &str) -> bool {
        Lane::new(&McpOptions::default()).plain_call(parts, body.as_bytes()).is_some()
    }

    #[test]
    fn the_plain_stateless_call_is_taken_with_its_id_and_params() {
        let call = Lane::new(&McpOptions::default()).plain_call(&parts(&[], &[]), BODY.as_bytes()).unwrap();
        assert_eq!(call.id, RequestId::Number(7));
        assert!(!call.can_open_urls);
        assert_eq!(call.params.name, "echo");
        assert_eq!(call.params.arguments.unwrap()["text"], "hi");
        // The host's case and an allowed name at any port.
        assert!(takes(&parts(&[("host", "LOCALHOST:9")], &["host"]), BODY));
        // A client that can open URLs says so in `_meta`.
        let with_urls = BODY.replace("clientCapabilities\":{}", "clientCapabilities\":{\"elicitation\":{\"url\":{}}}");
        let call = Lane::new(&McpOptions::default()).plain_call(&parts(&[], &[]), with_urls.as_bytes()).unwrap();
        assert!(call.can_open_urls);
    }

    #[test]
    fn allowed_hosts_are_matched_by_name_whatever_its_case_and_by_port_when_one_is_named() {
        let options = McpOptions {
            allowed_hosts: vec!["Tools.Example:8443".into(), "other.example".into()],
            ..McpOptions::default()
        };
        let lane = Lane::new(&options);
        for (host, taken) in [
            ("tools.example:8443", true),
            ("TOOLS.EXAMPLE:8443", true),
            ("tools.example:9", false),
            ("tools.example", false),
            ("other.example", true),
            ("other.example:9", true),
            ("127.0.0.1:8080", false),
        ] {
            let parts = parts(&[("host", host)], &["host"]);
            assert_eq!(lane.plain_call(&parts, BODY.as_bytes()).is_some(), taken, "{host}");
        }
    }

    #[test]
    fn anything_unusual_is_left_to_rmcp() {
        for without in ["host", "accept", "content-type", "mcp-protocol-version", "mcp-method", "mcp-name"] {
            assert!(!takes(&parts(&[], &[without]), BODY), "without {without}");
        }
        for (name, value) in [
            ("origin", "http://127.0.0.1:8080"),
            ("mcp-param-text", "hi"),
            // A second value of a header that must have one.
            ("mcp-name", "echo"),
            ("mcp-method", "tools/call"),
        ] {
            assert!(!takes(&parts(&[(name, value)], &[]), BODY), "with {name}");
        }
        for (name, value) in [
            ("host", "evil.example:8080"),
            ("host", "[::1]:8080"),
            ("accept", "application/json"),
            ("accept", "application/json, text/event-stream;q=0"),
            ("content-type", "text/plain"),
            ("mcp-protocol-version", "2025-11-25"),
            ("mcp-method", "tools/list"),
            ("mcp-name", "other"),
        ] {
            assert!(!takes(&parts(&[(name, value)], &[name]), BODY), "with {name}: {value}");
        }
        let other_bodies = [
            BODY.replace("\"2.0\"", "\"1.0\""),
            BODY.replace("tools/call", "tools/list"),
            BODY.replace("\"id\":7,", ""),
            BODY.replace("\"id\":7,", "\"id\":7,\"extra\":1,"),
            BODY.replace("\"name\":\"echo\",", "\"name\":\"echo\",\"task\":{},"),
            BODY.replace("\"name\":\"echo\",", "\"name\":\"echo\",\"name\":\"other\","),
            BODY.replace("2026-07-28\",\"io", "2025-11-25\",\"io"),
            BODY.replace(",\"io.modelcontextprotocol/clientCapabilities\":{}", ""),
            BODY.replace("\"io.modelcontextprotocol/clientCapabilities\":{}", "\"io.modelcontextprotocol/clientCapabilities\":5"),
            BODY.replace("\"2026-07-28\",\"io", "20260728,\"io"),
            BODY.replace(",\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\",\"io.modelcontextprotocol/clientCapabilities\":{}}", ""),
            "not json".to_string(),
        ];
        for body in other_bodies {
            assert!(!takes(&parts(&[], &[]), &body), "{body}");
        }
    }

    #[test]
    fn errors_get_rmcps_statuses() {
        let capability = ErrorData::missing_required_client_capability(Default::default());
        assert_eq!(answer(RequestId::Number(1), Err(capability)).status(), StatusCode::BAD_REQUEST);
        let invalid = ErrorData::invalid_params("no such tool", None);
        assert_eq!(answer(RequestId::Number(1), Err(invalid)).status(), StatusCode::OK);
    }
}
