//! Traces: OpenTelemetry spans of each request, of its tool's execution and
//! of every outbound HTTP request the tool makes, exported over OTLP/HTTP
//! when the operator sets `--otlp-endpoint`; and the W3C trace context
//! (`traceparent`, `tracestate`) a caller sends, carried through to the
//! tool's outbound requests so that an agent's trace continues into the
//! vendor's backend (docs/observability.md).
//!
//! Off by default, and then free: no OpenTelemetry layer is installed, no
//! span beyond the `request` and `invoke` ones the logs already have is
//! made, and a request without `traceparent` costs one header lookup.
//! With export on, spans go through a batch processor with a bounded
//! queue on a thread of its own: a collector that is down or slow drops
//! spans, it never blocks a call or grows memory.

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{SpanContext, TraceContextExt};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Whether spans are being exported (set once, at start).
static EXPORTING: AtomicBool = AtomicBool::new(false);

/// Spans waiting for export at most; more are dropped (and counted in the
/// SDK's log line at shutdown) rather than queued without bound.
const MAX_QUEUED_SPANS: usize = 4096;
/// Spans per export request.
const EXPORT_BATCH: usize = 512;
/// How often queued spans are sent.
const EXPORT_EVERY: Duration = Duration::from_secs(2);
/// How long one export may take before it is given up.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest `tracestate` passed on; a longer one is dropped (the W3C
/// recommendation: 512 characters), the `traceparent` kept.
const MAX_TRACESTATE_BYTES: usize = 512;

/// The `tracestate` list-members (by key) a caller's trace context keeps
/// on its way to tools' backends, set once at start; none by default: a
/// caller's `tracestate` carries other vendors' data, which is not the
/// tool vendor's to read.
static FORWARDED_TRACESTATE_KEYS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();

/// Sets which `tracestate` keys are passed on (the operator's
/// `--forward-tracestate`); the first call wins.
pub fn forward_tracestate_keys(keys: Vec<String>) {
    let _ = FORWARDED_TRACESTATE_KEYS.set(keys);
}

/// Whether spans are exported. Code that makes spans only for traces
/// (the tool's, the outbound requests') asks this first.
pub fn exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

/// The trace context a caller sent in its `traceparent` (and
/// `tracestate`) headers, checked against the W3C format.
#[derive(Debug, Clone, PartialEq)]
pub struct CallerTrace(SpanContext);

impl CallerTrace {
    /// The caller's trace context, if it sent a valid one. A request
    /// without `traceparent` costs one header lookup.
    pub fn from_headers(headers: &http::HeaderMap) -> Option<CallerTrace> {
        Self::keeping(headers, FORWARDED_TRACESTATE_KEYS.get().map_or(&[], Vec::as_slice))
    }

    /// The same, keeping of its `tracestate` only the list-members whose
    /// keys are `allowed`.
    fn keeping(headers: &http::HeaderMap, allowed: &[String]) -> Option<CallerTrace> {
        if !headers.contains_key("traceparent") {
            return None;
        }
        let context = TraceContextPropagator::new().extract(&Headers(headers));
        let span = context.span().span_context().clone();
        if !span.is_valid() {
            return None;
        }
        let members = span.trace_state().header();
        let kept = members.split(',').filter_map(|m| m.split_once('=')).filter(|(k, _)| allowed.iter().any(|a| a == k));
        let state = opentelemetry::trace::TraceState::from_key_value(kept).unwrap_or_default();
        Some(CallerTrace(SpanContext::new(span.trace_id(), span.span_id(), span.trace_flags(), true, state)))
    }

    /// As an OpenTelemetry context, to parent a span with.
    pub fn context(&self) -> opentelemetry::Context {
        opentelemetry::Context::new().with_remote_span_context(self.0.clone())
    }

    /// The caller's span.
    pub fn span_context(&self) -> &SpanContext {
        &self.0
    }
}

/// The span of an HTTP request when spans are exported: an OpenTelemetry
/// server span (semantic conventions for HTTP servers), the child of the
/// caller's span if it sent one. In the logs it reads `request{id=…}`, as
/// without export: its OpenTelemetry attributes are not log fields.
pub fn server_span(id: &str, method: &'static str, caller: Option<&CallerTrace>) -> tracing::Span {
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    let span = tracing::info_span!("request", id = %id, otel.kind = "server");
    if let Some(caller) = caller {
        let _ = span.set_parent(caller.context());
    }
    span.set_attribute("http.request.method", method);
    span.context().span().update_name(method);
    span
}

/// Names the server span by the route the request took.
pub fn routed(span: &tracing::Span, method: &'static str, route: &'static str) {
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    span.set_attribute("http.route", route);
    span.context().span().update_name(format!("{method} {route}"));
}

/// Records the answer's status on the server span: an error when it is a
/// 5xx (a 4xx is the client's).
pub fn answered(span: &tracing::Span, status: http::StatusCode) {
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    span.set_attribute("http.response.status_code", i64::from(status.as_u16()));
    if status.is_server_error() {
        span.set_status(opentelemetry::trace::Status::error(""));
    }
}

/// Whether the logs show `metadata`: everything `PLINTH_LOG` lets through
/// but the spans made only for traces (the tool's execution, its outbound
/// requests), which would add their attributes to every log line inside
/// them.
pub fn logged(metadata: &tracing::Metadata<'_>) -> bool {
    !(metadata.is_span() && metadata.target().starts_with("plinth") && TRACE_ONLY.contains(&metadata.name()))
}

/// The spans made only when spans are exported.
const TRACE_ONLY: [&str; 2] = ["tool", "outbound"];

/// What a library logs as an error though nothing went wrong, by target and
/// message: rmcp's "failed to send pending response during drain" is a
/// client that closed its stream before the server's last answer on it,
/// which is how every `subscriptions/listen` stream of the 2026-07-28
/// revision ends; "fail to response message" is the same close met before
/// the drain (the answer's channel is closed: the client hung up while its
/// request was answered). Operators alert on `ERROR`; a normal close must
/// not be one.
const CLOSES_LOGGED_AS_ERRORS: [(&str, &str); 2] =
    [("rmcp::service", "failed to send pending response during drain"), ("rmcp::service", "fail to response message")];

/// A log filter that leaves out [`CLOSES_LOGGED_AS_ERRORS`] and lets
/// everything else through.
pub struct ClosesAreNotErrors;

impl<S> tracing_subscriber::layer::Filter<S> for ClosesAreNotErrors {
    fn enabled(&self, _: &tracing::Metadata<'_>, _: &tracing_subscriber::layer::Context<'_, S>) -> bool {
        true
    }

    fn event_enabled(&self, event: &tracing::Event<'_>, _: &tracing_subscriber::layer::Context<'_, S>) -> bool {
        let metadata = event.metadata();
        if *metadata.level() != tracing::Level::ERROR
            || !CLOSES_LOGGED_AS_ERRORS.iter().any(|(target, _)| metadata.target() == *target)
        {
            return true;
        }
        let mut message = Message(None);
        event.record(&mut message);
        !CLOSES_LOGGED_AS_ERRORS
            .iter()
            .any(|(target, text)| metadata.target() == *target && message.0.as_deref() == Some(*text))
    }
}

/// An event's `message`, as written.
struct Message(Option<String>);

impl tracing::field::Visit for Message {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = Some(format!("{value:?}"));
        }
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "message" {
            self.0 = Some(value.to_string());
        }
    }
}

/// Sets `traceparent` (and `tracestate`, if any) in `headers` for the span
/// `context` names, replacing whatever was there.
pub fn inject(context: &opentelemetry::Context, headers: &mut http::HeaderMap) {
    headers.remove("traceparent");
    headers.remove("tracestate");
    TraceContextPropagator::new().inject_context(context, &mut HeadersMut(headers));
}

/// Reads the two trace-context headers, ignoring a `tracestate` longer
/// than [`MAX_TRACESTATE_BYTES`].
struct Headers<'a>(&'a http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        let value = self.0.get(key)?.to_str().ok()?;
        (key != "tracestate" || value.len() <= MAX_TRACESTATE_BYTES).then_some(value)
    }

    fn keys(&self) -> Vec<&str> {
        vec!["traceparent", "tracestate"]
    }
}

/// Writes the trace-context headers; an empty `tracestate` is left out, as
/// the W3C format asks.
struct HeadersMut<'a>(&'a mut http::HeaderMap);

impl Injector for HeadersMut<'_> {
    fn set(&mut self, key: &str, value: String) {
        if value.is_empty() {
            return;
        }
        if let (Ok(name), Ok(value)) = (http::HeaderName::try_from(key), http::HeaderValue::try_from(value)) {
            self.0.insert(name, value);
        }
    }
}

/// `endpoint` as it may be logged or shown in an error: scheme, host, port
/// and path, without the `user:password@` or the query a collector's
/// credentials may be in. What does not parse as a URL is not shown at all.
pub fn redacted_endpoint(endpoint: &str) -> String {
    let Ok(uri) = endpoint.parse::<http::Uri>() else { return "(not a URL)".to_string() };
    let Some(authority) = uri.authority() else { return "(not a URL)".to_string() };
    let port = authority.port().map_or_else(String::new, |p| format!(":{p}"));
    let scheme = uri.scheme_str().map_or_else(String::new, |s| format!("{s}://"));
    let path = if uri.path() == "/" && !endpoint.ends_with('/') { "" } else { uri.path() };
    format!("{scheme}{}{port}{path}", authority.host())
}

/// Exports spans to an OTLP collector: the tracer behind the
/// `tracing-opentelemetry` layer. Dropping it does not flush; call
/// [`SpanExport::shutdown`] at a graceful stop.
pub struct SpanExport {
    provider: opentelemetry_sdk::trace::SdkTracerProvider,
}

impl SpanExport {
    /// Spans to `endpoint` (an OTLP/HTTP collector's base URL, such as
    /// `http://collector:4318`; `/v1/traces` is appended unless the URL
    /// already names it), as protobuf, with `service.name` `plinth`, its
    /// version and an id of this process (`service.instance.id`). Also
    /// read: `OTEL_EXPORTER_OTLP_HEADERS` (a collector's credentials) and
    /// `OTEL_RESOURCE_ATTRIBUTES`.
    pub fn to(endpoint: &str) -> anyhow::Result<SpanExport> {
        use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
        let endpoint = endpoint.trim_end_matches('/');
        let shown = redacted_endpoint(endpoint);
        let uri: http::Uri =
            endpoint.parse().map_err(|e| anyhow::anyhow!("--otlp-endpoint `{shown}` is not a URL: {e}"))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
            anyhow::bail!(
                "--otlp-endpoint `{shown}` must be an http:// or https:// URL, such as http://127.0.0.1:4318"
            );
        }
        let traces =
            if endpoint.ends_with("/v1/traces") { endpoint.to_string() } else { format!("{endpoint}/v1/traces") };
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(traces)
            .with_timeout(EXPORT_TIMEOUT)
            .with_http_client(BlockingClient::new()?)
            .build()?;
        let batches = opentelemetry_sdk::trace::BatchConfigBuilder::default()
            .with_max_queue_size(MAX_QUEUED_SPANS)
            .with_max_export_batch_size(EXPORT_BATCH)
            .with_scheduled_delay(EXPORT_EVERY)
            .build();
        let processor =
            opentelemetry_sdk::trace::BatchSpanProcessor::builder(exporter).with_batch_config(batches).build();
        let resource = opentelemetry_sdk::Resource::builder()
            .with_service_name("plinth")
            .with_attributes([
                opentelemetry::KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
                opentelemetry::KeyValue::new("service.instance.id", uuid::Uuid::new_v4().to_string()),
            ])
            .build();
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
            .with_sampler(sampler())
            .with_span_processor(processor)
            .with_resource(resource)
            .build();
        Ok(SpanExport { provider })
    }

    /// The `tracing` layer that turns Plinth's spans into OpenTelemetry
    /// spans (only spans: log lines stay in the log), and marks export on.
    pub fn layer<S>(&self) -> impl tracing_subscriber::Layer<S> + use<S>
    where
        S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
    {
        use opentelemetry::trace::TracerProvider as _;
        use tracing_subscriber::Layer as _;
        EXPORTING.store(true, Ordering::Relaxed);
        tracing_opentelemetry::layer()
            .with_tracer(self.provider.tracer("plinth"))
            .with_location(false)
            .with_threads(false)
            .with_target(false)
            .with_tracked_inactivity(false)
            .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
                meta.is_span() && meta.target().starts_with("plinth") && *meta.level() <= tracing::Level::INFO
            }))
    }

    /// Sends the spans still queued and stops exporting (a graceful stop).
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!(error = %e, "not every span could be exported before the server stopped");
        }
    }
}

/// Which spans are recorded: every one. The SDK's default follows the
/// sampled flag of a remote parent, but that parent is the caller's
/// `traceparent`, which anyone may send: `…-00` would keep the requests of
/// whoever sent it out of the operator's traces. So a caller's span is a
/// parent (its trace id is kept, the trace continues) but never decides;
/// Plinth's own spans follow their parent as usual, so a trace is whole.
/// The flag Plinth passes on to a tool's backend is then its own: sampled.
fn sampler() -> opentelemetry_sdk::trace::ParentBasedSampler {
    use opentelemetry_sdk::trace::Sampler;
    Sampler::parent_based(Sampler::AlwaysOn).with_remote_parent_not_sampled(Sampler::AlwaysOn)
}

/// The OTLP exporter's HTTP client: reqwest's blocking client, already in
/// the build with rustls, used from the batch processor's own thread.
#[derive(Debug)]
struct BlockingClient(reqwest::blocking::Client);

impl BlockingClient {
    fn new() -> anyhow::Result<Self> {
        // reqwest's blocking client runs a runtime of its own: build it
        // off any async context.
        let client = std::thread::spawn(|| reqwest::blocking::Client::builder().timeout(EXPORT_TIMEOUT).build())
            .join()
            .map_err(|_| anyhow::anyhow!("the OTLP exporter's HTTP client could not be built"))??;
        Ok(BlockingClient(client))
    }
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for BlockingClient {
    async fn send_bytes(
        &self,
        request: http::Request<opentelemetry_http::Bytes>,
    ) -> Result<http::Response<opentelemetry_http::Bytes>, opentelemetry_http::HttpError> {
        let (parts, body) = request.into_parts();
        // The SDK logs an export's error: without the URL, which may carry
        // the collector's credentials.
        let response = self
            .0
            .request(parts.method, parts.uri.to_string())
            .headers(parts.headers)
            .body(body.to_vec())
            .send()
            .map_err(reqwest::Error::without_url)?;
        let mut answer = http::Response::builder().status(response.status());
        if let Some(headers) = answer.headers_mut() {
            *headers = response.headers().clone();
        }
        // A collector's answer is a few bytes; a huge one is not read whole.
        let body: Vec<u8> = std::io::Read::bytes(std::io::Read::take(response, 1 << 20)).collect::<Result<_, _>>()?;
        Ok(answer.body(body.into())?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_closing_its_stream_is_not_logged_as_an_error_and_real_errors_are() {
        use tracing_subscriber::Layer as _;
        use tracing_subscriber::layer::SubscriberExt as _;
        #[derive(Clone, Default)]
        struct Written(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Written {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let written = Written::default();
        let writer = written.clone();
        let logs = tracing_subscriber::fmt::layer().with_ansi(false).with_writer(move || writer.clone());
        let subscriber = tracing_subscriber::registry().with(logs.with_filter(ClosesAreNotErrors));
        tracing::subscriber::with_default(subscriber, || {
            let error = "transport closed";
            tracing::error!(target: "rmcp::service", %error, "failed to send pending response during drain");
            tracing::error!(target: "rmcp::service", %error, "fail to response message");
            tracing::error!(target: "rmcp::service", %error, "response send task failed during drain");
            tracing::error!(target: "plinth::other", "failed to send pending response during drain");
            tracing::warn!(target: "rmcp::service", "failed to send pending response during drain");
        });
        let text = String::from_utf8(written.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[0].contains("response send task failed"), "{text}");
        assert!(lines[1].contains("plinth::other") && lines[2].contains("WARN"), "{text}");
    }

    fn headers(pairs: &[(&str, &str)]) -> http::HeaderMap {
        pairs.iter().map(|(k, v)| (http::HeaderName::try_from(*k).unwrap(), v.parse().unwrap())).collect()
    }

    #[test]
    fn a_valid_traceparent_is_passed_on_with_only_the_allowed_tracestate() {
        let given = headers(&[
            ("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            ("tracestate", "vendor=abc,other=1,third=x"),
        ]);
        let passed_on = |allowed: &[&str]| {
            let allowed: Vec<String> = allowed.iter().map(|k| k.to_string()).collect();
            let caller = CallerTrace::keeping(&given, &allowed).expect("valid");
            assert_eq!(caller.span_context().trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
            let mut out = headers(&[
                ("traceparent", "00-11111111111111111111111111111111-2222222222222222-01"),
                ("tracestate", "tool=forged"),
            ]);
            inject(&caller.context(), &mut out);
            assert_eq!(out["traceparent"], "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
            out.get("tracestate").map(|v| v.to_str().unwrap().to_string())
        };
        // By default none of the caller's tracestate reaches a backend.
        assert_eq!(passed_on(&[]), None);
        assert_eq!(CallerTrace::from_headers(&given).unwrap().span_context().trace_state().header(), "");
        // The operator's keys, in the caller's order; absent keys are skipped.
        assert_eq!(passed_on(&["vendor"]).as_deref(), Some("vendor=abc"));
        assert_eq!(passed_on(&["other", "vendor", "absent"]).as_deref(), Some("vendor=abc,other=1"));
    }

    #[test]
    fn an_invalid_traceparent_is_ignored() {
        for bad in [
            "",
            "garbage",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert_eq!(CallerTrace::from_headers(&headers(&[("traceparent", bad)])), None, "{bad}");
        }
        assert_eq!(CallerTrace::from_headers(&http::HeaderMap::new()), None);
    }

    #[test]
    fn an_endpoint_is_shown_without_its_credentials_or_query() {
        for (given, shown) in [
            ("http://user:pass@collector:4318", "http://collector:4318"),
            (
                "https://token@collector.example.com/otlp/v1/traces?api_key=secret",
                "https://collector.example.com/otlp/v1/traces",
            ),
            ("http://[::1]:4318/", "http://[::1]:4318/"),
            ("http://127.0.0.1:4318", "http://127.0.0.1:4318"),
            ("not a url: user:pass", "(not a URL)"),
            ("/v1/traces?key=secret", "(not a URL)"),
        ] {
            assert_eq!(redacted_endpoint(given), shown, "{given}");
        }
    }

    #[test]
    fn a_callers_unsampled_flag_does_not_keep_its_spans_out() {
        use opentelemetry::trace::{SpanKind, TraceId};
        use opentelemetry_sdk::trace::{SamplingDecision, ShouldSample as _};
        let decide = |traceparent: &str| {
            let caller = CallerTrace::from_headers(&headers(&[("traceparent", traceparent)])).expect("valid");
            let trace_id = caller.span_context().trace_id();
            sampler().should_sample(Some(&caller.context()), trace_id, "request", &SpanKind::Server, &[], &[]).decision
        };
        assert_eq!(
            decide("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"),
            SamplingDecision::RecordAndSample
        );
        assert_eq!(
            decide("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            SamplingDecision::RecordAndSample
        );
        let root = sampler().should_sample(None, TraceId::from(7), "request", &SpanKind::Server, &[], &[]);
        assert_eq!(root.decision, SamplingDecision::RecordAndSample);
    }

    #[test]
    fn a_long_tracestate_is_dropped_and_the_traceparent_kept() {
        let long = format!("v={}", "a".repeat(MAX_TRACESTATE_BYTES));
        let given = headers(&[
            ("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"),
            ("tracestate", &long),
        ]);
        let caller = CallerTrace::from_headers(&given).expect("valid");
        let mut out = http::HeaderMap::new();
        inject(&caller.context(), &mut out);
        assert_eq!(out["traceparent"], "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
        assert!(!out.contains_key("tracestate"), "an empty tracestate is not sent");
    }
}
