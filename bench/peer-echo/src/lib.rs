//! Echo as a plain `wasi:http/proxy` component: the work Plinth's `echo` tool
//! does, for `wasmtime serve` to run in the benchmark's peer arm. It reads
//! the same A2T invocation body the Plinth arm sends
//! (`{"name": "echo", "input_parameters": [{"name": "text", "value": …}]}`),
//! checks it as far as echo's signature needs (one string `text`), and
//! answers `{"output_parameters": [{"name": "text", "value": …}]}`; anything
//! else is a 400.

use serde::{Deserialize, Serialize};
use std::io::{Read as _, Write as _};
use wasip2::http::types::{Fields, IncomingBody, IncomingRequest, OutgoingBody, OutgoingResponse, ResponseOutparam};

wasip2::http::proxy::export!(PeerEcho);

/// Bodies past this are refused, as Plinth refuses large bodies.
const MAX_BODY: usize = 64 * 1024;

#[derive(Deserialize)]
struct Invocation {
    name: String,
    input_parameters: Vec<Parameter>,
}

#[derive(Deserialize, Serialize)]
struct Parameter {
    name: String,
    value: serde_json::Value,
}

#[derive(Serialize)]
struct Answer {
    output_parameters: [Parameter; 1],
}

struct PeerEcho;

impl wasip2::exports::http::incoming_handler::Guest for PeerEcho {
    fn handle(request: IncomingRequest, response_out: ResponseOutparam) {
        let (status, body) = match read_body(&request).and_then(|body| echo(&body)) {
            Ok(answer) => (200, answer),
            Err(message) => (400, serde_json::json!({ "error": message }).to_string()),
        };
        let headers = Fields::new();
        let _ = headers.append("content-type", b"application/json");
        let response = OutgoingResponse::new(headers);
        let _ = response.set_status_code(status);
        let Ok(outgoing) = response.body() else { return };
        ResponseOutparam::set(response_out, Ok(response));
        if let Ok(mut stream) = outgoing.write() {
            let _ = stream.write_all(body.as_bytes());
            let _ = stream.flush();
        }
        let _ = OutgoingBody::finish(outgoing, None);
    }
}

fn read_body(request: &IncomingRequest) -> Result<Vec<u8>, String> {
    let body = request.consume().map_err(|()| "no body".to_string())?;
    let mut bytes = Vec::new();
    {
        let stream = body.stream().map_err(|()| "no body stream".to_string())?;
        stream.take(MAX_BODY as u64 + 1).read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    }
    IncomingBody::finish(body);
    if bytes.len() > MAX_BODY {
        return Err("the body is too large".into());
    }
    Ok(bytes)
}

fn echo(body: &[u8]) -> Result<String, String> {
    let invocation: Invocation = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    if invocation.name != "echo" {
        return Err(format!("no tool `{}`", invocation.name));
    }
    let [text] = <[Parameter; 1]>::try_from(invocation.input_parameters)
        .map_err(|_| "echo takes exactly one parameter, `text`".to_string())?;
    if text.name != "text" || !text.value.is_string() {
        return Err("`text` must be a string".into());
    }
    serde_json::to_string(&Answer { output_parameters: [text] }).map_err(|e| e.to_string())
}
