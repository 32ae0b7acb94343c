//! Write [Plinth](https://github.com/) tools in Rust with little ceremony.
//!
//! A tool crate declares its world in `wit/world.wit` (with the shared
//! `plinth:tool` package under `wit/deps/`), then:
//!
//! ```ignore
//! plinth_sdk::tool!("quote-flight"); // input: flight-number; output: quote
//!
//! struct QuoteFlight;
//!
//! impl Guest for QuoteFlight {
//!     fn call(input: Input) -> Result<Output, ToolError> {
//!         let base = plinth_sdk::config::require("backend-url")?;
//!         let reply = plinth_sdk::http::get(&format!("{base}/quote?flight={}", input.flight_number))?;
//!         Ok(Output { quote: reply.text() })
//!     }
//! }
//!
//! export!(QuoteFlight);
//! ```
//!
//! What the SDK gives a tool:
//! - [`tool!`]: the bindings for the tool's own world, with `tool-error`
//!   mapped to [`ToolError`] so the helpers below work with it;
//! - [`ToolError`] constructors ([`ToolError::new`], [`ToolError::retry`]…);
//! - [`CallDescription`], for a tool that exports `describe`: what a call
//!   will do, signed into its CHEQ and shown to the human who confirms it;
//! - [`http`]: blocking outbound HTTP over `wasi:http/outgoing-handler`,
//!   limited by the host to the hosts the tool declares in `plinth.toml`;
//! - [`config`]: the operator's per-tool configuration (`wasi:config/store`);
//! - [`secrets`]: the secrets the tool declares (`plinth:tool/secrets`);
//! - [`log`]: log lines that reach the host's structured logs.

#![warn(missing_docs)]

/// The `wit-bindgen` this SDK was built with; [`tool!`] expands through it.
pub use wit_bindgen;

#[allow(missing_docs)]
mod bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "plinth:tool/imports@0.1.0",
        generate_all,
        generate_unused_types: true,
    });
}

/// The shared types of the `plinth:tool` package (`tool-error`,
/// `call-description`).
pub mod types {
    pub use crate::bindings::plinth::tool::types::*;
}

pub use types::{CallDescription, ToolError};

/// Generates the bindings for the tool's world, defined in the crate's
/// `wit/` folder, and brings `Guest`, `Input`, `Output`, `ToolError` and
/// `export!` into scope.
///
/// The argument is the world name (the tool's name in kebab case).
#[macro_export]
macro_rules! tool {
    ($world:literal) => {
        $crate::wit_bindgen::generate!({
            world: $world,
            runtime_path: "::plinth_sdk::wit_bindgen::rt",
            with: { "plinth:tool/types@0.1.0": ::plinth_sdk::types },
        });
    };
}

impl ToolError {
    /// A failure the caller should not retry as is.
    pub fn new(message: impl Into<String>) -> Self {
        ToolError {
            message: message.into(),
            developer_message: None,
            can_retry: false,
            retry_after_ms: None,
            additional_prompt_content: None,
        }
    }

    /// A temporary failure: the same call may succeed after `after_ms`.
    pub fn retry(message: impl Into<String>, after_ms: u64) -> Self {
        ToolError { can_retry: true, retry_after_ms: Some(after_ms), ..Self::new(message) }
    }

    /// Adds detail meant for the developer of the calling agent.
    pub fn with_developer_message(mut self, detail: impl Into<String>) -> Self {
        self.developer_message = Some(detail.into());
        self
    }

    /// Adds text the executor may put in front of the LLM.
    pub fn with_prompt_content(mut self, text: impl Into<String>) -> Self {
        self.additional_prompt_content = Some(text.into());
        self
    }
}

impl CallDescription {
    /// A description of one call for the human who confirms it (a tool's
    /// `describe` export): a sentence or two about it.
    pub fn new(summary: impl Into<String>) -> Self {
        CallDescription { summary: summary.into(), facts: Vec::new() }
    }

    /// Adds a named fact the human should see before deciding, e.g.
    /// `("Total price", "360 USD")`.
    pub fn fact(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.facts.push(types::Fact { name: name.into(), value: value.into() });
        self
    }
}

/// Per-tool configuration set by the operator (`wasi:config/store`).
pub mod config {
    use crate::ToolError;
    use crate::bindings::wasi::config::store;

    /// The value of `key`, or `None` when the operator did not set it.
    pub fn get(key: &str) -> Result<Option<String>, ToolError> {
        store::get(key).map_err(|e| {
            let detail = match e {
                store::Error::Upstream(m) | store::Error::Io(m) => m,
            };
            ToolError::retry("the tool's configuration could not be read", 1000).with_developer_message(detail)
        })
    }

    /// The value of `key`; a clear, non-retryable error when it is missing.
    pub fn require(key: &str) -> Result<String, ToolError> {
        get(key)?.ok_or_else(|| {
            ToolError::new("the tool is not configured on this server")
                .with_developer_message(format!("config key `{key}` is not set"))
        })
    }
}

/// Secrets the operator stores for the tool (declare their ids under
/// `secrets` in `plinth.toml`).
pub mod secrets {
    use crate::ToolError;

    /// The secret's value, or `None` when it is not declared or not set.
    pub fn get(id: &str) -> Option<String> {
        crate::bindings::plinth::tool::secrets::get(id)
    }

    /// The secret's value; a clear, non-retryable error when it is missing.
    pub fn require(id: &str) -> Result<String, ToolError> {
        get(id).ok_or_else(|| {
            ToolError::new("the tool is not configured on this server")
                .with_developer_message(format!("secret `{id}` is not set (or not declared in plinth.toml)"))
        })
    }
}

/// Log lines that reach the host's structured logs, tagged with the tool,
/// its version and the call id.
pub mod log {
    use crate::bindings::plinth::tool::log::{Level, write};

    /// Logs at debug level.
    pub fn debug(message: &str) {
        write(Level::Debug, message)
    }
    /// Logs at info level.
    pub fn info(message: &str) {
        write(Level::Info, message)
    }
    /// Logs at warn level.
    pub fn warn(message: &str) {
        write(Level::Warn, message)
    }
    /// Logs at error level.
    pub fn error(message: &str) {
        write(Level::Error, message)
    }
}

/// Blocking outbound HTTP over `wasi:http/outgoing-handler`.
///
/// The host lets a tool reach only the hosts its `plinth.toml` declares;
/// anything else fails with [`HttpError`].
pub mod http {
    use crate::ToolError;
    use wasip2::http::outgoing_handler;
    use wasip2::http::types::{Fields, IncomingBody, Method, OutgoingBody, OutgoingRequest, Scheme};
    use wasip2::io::streams::StreamError;

    /// A response whose body has been read in full.
    #[derive(Debug, Clone)]
    pub struct Response {
        /// The HTTP status code.
        pub status: u16,
        /// The response headers, names in lower case, in order (values
        /// that are not UTF-8 lossily).
        pub headers: Vec<(String, String)>,
        /// The response body.
        pub body: Vec<u8>,
    }

    impl Response {
        /// The first value of header `name` (any case).
        pub fn header(&self, name: &str) -> Option<&str> {
            self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
        }

        /// Whether the status is 2xx.
        pub fn is_success(&self) -> bool {
            (200..300).contains(&self.status)
        }

        /// The body as UTF-8 text (lossy).
        pub fn text(&self) -> String {
            String::from_utf8_lossy(&self.body).into_owned()
        }
    }

    /// Why an outbound request failed.
    #[derive(Debug, Clone)]
    pub struct HttpError(pub String);

    impl std::fmt::Display for HttpError {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.0)
        }
    }

    impl std::error::Error for HttpError {}

    /// A failed backend call is usually temporary from the LLM's point of view.
    impl From<HttpError> for ToolError {
        fn from(e: HttpError) -> Self {
            ToolError::retry("the backend service could not be reached", 1000).with_developer_message(e.0)
        }
    }

    /// `GET url`.
    pub fn get(url: &str) -> Result<Response, HttpError> {
        send("GET", url, &[], None)
    }

    /// `POST url` with a body and its content type.
    pub fn post(url: &str, content_type: &str, body: &[u8]) -> Result<Response, HttpError> {
        send("POST", url, &[("content-type", content_type)], Some(body))
    }

    /// Sends one request and reads the whole response.
    pub fn send(method: &str, url: &str, headers: &[(&str, &str)], body: Option<&[u8]>) -> Result<Response, HttpError> {
        let err = |what: &str| HttpError(format!("{what} ({method} {url})"));
        let (scheme, authority, path) = split_url(url).ok_or_else(|| err("not an http(s) URL"))?;

        let entries: Vec<(String, Vec<u8>)> =
            headers.iter().map(|(k, v)| (k.to_string(), v.as_bytes().to_vec())).collect();
        let fields = Fields::from_list(&entries).map_err(|_| err("invalid header"))?;
        let request = OutgoingRequest::new(fields);
        let method = match method {
            "GET" => Method::Get,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "DELETE" => Method::Delete,
            "PATCH" => Method::Patch,
            "HEAD" => Method::Head,
            other => Method::Other(other.to_string()),
        };
        request.set_method(&method).map_err(|_| err("invalid method"))?;
        request.set_scheme(Some(&scheme)).map_err(|_| err("invalid scheme"))?;
        request.set_authority(Some(authority)).map_err(|_| err("invalid authority"))?;
        request.set_path_with_query(Some(path)).map_err(|_| err("invalid path"))?;

        let outgoing = request.body().map_err(|_| err("request body unavailable"))?;
        if let Some(bytes) = body {
            let stream = outgoing.write().map_err(|_| err("request body unavailable"))?;
            // blocking-write-and-flush accepts at most 4096 bytes per call.
            for chunk in bytes.chunks(4096) {
                stream
                    .blocking_write_and_flush(chunk)
                    .map_err(|e| HttpError(format!("writing the request body failed: {e:?}")))?;
            }
        }
        let future = outgoing_handler::handle(request, None)
            .map_err(|e| HttpError(format!("request refused: {e:?} ({url})")))?;
        OutgoingBody::finish(outgoing, None).map_err(|e| HttpError(format!("finishing the request failed: {e:?}")))?;

        let response = loop {
            match future.get() {
                Some(Ok(Ok(response))) => break response,
                Some(Ok(Err(e))) => return Err(HttpError(format!("request failed: {e:?} ({url})"))),
                Some(Err(())) => return Err(err("response already taken")),
                None => future.subscribe().block(),
            }
        };
        let status = response.status();
        let headers = response
            .headers()
            .entries()
            .into_iter()
            .map(|(name, value)| (name.to_ascii_lowercase(), String::from_utf8_lossy(&value).into_owned()))
            .collect();
        let incoming = response.consume().map_err(|_| err("response body unavailable"))?;
        let body = read_all(&incoming).map_err(|e| HttpError(format!("{e} ({url})")))?;
        drop(IncomingBody::finish(incoming));
        Ok(Response { status, headers, body })
    }

    fn read_all(body: &IncomingBody) -> Result<Vec<u8>, String> {
        let stream = body.stream().map_err(|_| "response body unavailable".to_string())?;
        let mut out = Vec::new();
        loop {
            match stream.blocking_read(64 * 1024) {
                Ok(chunk) => out.extend_from_slice(&chunk),
                Err(StreamError::Closed) => break,
                Err(StreamError::LastOperationFailed(e)) => {
                    return Err(format!("reading the response failed: {}", e.to_debug_string()));
                }
            }
        }
        drop(stream);
        Ok(out)
    }

    /// Percent-encodes `value` for a URL's query (RFC 3986: unreserved
    /// characters stay as they are), e.g. `encode("Omaha, NE")` is
    /// `Omaha%2C%20NE`.
    pub fn encode(value: &str) -> String {
        value
            .bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect()
    }

    /// `http://host:port/path?q` → (scheme, "host:port", "/path?q").
    fn split_url(url: &str) -> Option<(Scheme, &str, &str)> {
        let (scheme, rest) = if let Some(rest) = url.strip_prefix("https://") {
            (Scheme::Https, rest)
        } else if let Some(rest) = url.strip_prefix("http://") {
            (Scheme::Http, rest)
        } else {
            return None;
        };
        let split = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(split);
        if authority.is_empty() {
            return None;
        }
        Some((scheme, authority, if path.is_empty() { "/" } else { path }))
    }
}
