//! A registry client for the OCI distribution API: pulls and pushes
//! components in the CNCF TAG Runtime "Wasm OCI artifact" layout (the one
//! `wkg`, Spin and wasmCloud use: config `application/vnd.wasm.config.v0+json`,
//! one `application/wasm` layer), and reads cosign signatures.
//!
//! Written on the server's own reqwest rather than with `oci-client`, which
//! builds its own HTTP client: a pull is set off by a publisher and goes
//! where the publisher says, so it must follow the same outbound rules as a
//! tool's requests, which that crate cannot take:
//! - names resolve through the outbound policy's resolver, and an address in
//!   the reference or a redirect is checked against it too;
//! - `https://` only, except registries the operator names
//!   (`--insecure-registry`);
//! - redirects (blob storage) are followed at most [`MAX_REDIRECTS`] times,
//!   each checked; the `Authorization` header is never sent to a redirect's
//!   host (reqwest drops it), and credentials go to a token realm only over
//!   https or on the registry's own host;
//! - a manifest is at most [`MAX_MANIFEST_BYTES`], a layer at most what its
//!   descriptor says and the tenant may deploy, checked before reading;
//!   every byte's digest is checked; the whole pull has one deadline.
//!
//! Authentication: anonymous, HTTP Basic, or the registry token flow
//! (`WWW-Authenticate: Bearer realm=…`) with Basic credentials at the realm.

use super::cosign;
use super::outside_text;
use super::reference::{Reference, is_sha256_digest};
use crate::egress::{OutboundLimits, read_capped};
use base64::Engine;
use reqwest::header::{self, HeaderMap, HeaderValue};
use reqwest::{Method, StatusCode, Url};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

/// The manifest media type written and preferred.
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// Docker's manifest type, which some registries answer with.
const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
/// The config media type of a Wasm artifact.
pub const WASM_CONFIG: &str = "application/vnd.wasm.config.v0+json";
/// The layer media type of a Wasm artifact.
pub const WASM_LAYER: &str = "application/wasm";
/// Largest manifest read (a Wasm artifact's is under 2 KiB).
pub const MAX_MANIFEST_BYTES: usize = 256 << 10;
/// Largest cosign signature payload read, and signatures read per artifact.
const MAX_SIGNATURE_BYTES: usize = 64 << 10;
const MAX_SIGNATURES: usize = 16;
/// Redirects followed per request.
pub const MAX_REDIRECTS: usize = 5;

/// Why a pull or push failed. Messages name the registry and the
/// reference, never credentials.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    /// Not a reference.
    #[error("{0}")]
    InvalidReference(String),
    /// Plain HTTP to a registry the operator did not allow it for.
    #[error(
        "registry `{0}` would be reached over plain http; this server uses https for registries except those its operator names with --insecure-registry"
    )]
    NotHttps(String),
    /// An address the outbound policy refuses.
    #[error(
        "registry `{0}` leads to an address on this server's own or a private network, which its operator does not allow"
    )]
    AddressRefused(String),
    /// Unreachable, a connection cut, or an unreadable answer.
    #[error("registry `{0}` could not be reached: {1}")]
    Unreachable(String, String),
    /// Refused the credentials (or their absence).
    #[error(
        "registry `{0}` refused access to `{1}`: store credentials for it (PUT /admin/registries/{0}) or check them"
    )]
    Denied(String, String),
    /// No such manifest or blob.
    #[error("registry `{0}` has no `{1}`")]
    NotFound(String, String),
    /// Any other answer.
    #[error("registry `{0}` answered {1} for `{2}`")]
    Status(String, u16, String),
    /// Not a Wasm component artifact.
    #[error("`{0}` is not a Wasm component artifact: {1}")]
    NotWasm(String, String),
    /// Bytes that are not what their digest says.
    #[error("the {what} of `{reference}` does not match its digest: expected {expected}, the registry sent {found}")]
    DigestMismatch { reference: String, what: &'static str, expected: String, found: String },
    /// A reference that names a tag and a digest, where the tag points elsewhere.
    #[error(
        "`{reference}` names the tag `{tag}`, which points at {found} in the registry, not at the digest given: deploy by the digest alone, or by the tag alone"
    )]
    TagMismatch { reference: String, tag: String, found: String },
    /// Larger than allowed.
    #[error("the {what} of `{reference}` is {size} bytes; at most {max} are accepted")]
    TooLarge { reference: String, what: &'static str, size: u64, max: u64 },
    /// The deadline passed.
    #[error("registry `{0}` did not finish within {1} s")]
    TimedOut(String, u64),
}

/// Registry credentials (a user name and a password or token).
#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub struct Credentials {
    /// The user name.
    pub username: String,
    /// The password or access token.
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials").field("username", &self.username).finish_non_exhaustive()
    }
}

/// How the client reaches registries.
#[derive(Debug, Clone)]
pub struct OciOptions {
    /// Registries (`host[:port]`) reached over plain http.
    pub insecure: Vec<String>,
    /// The outbound address policy; `None` on a vendor's own machine (the
    /// `plinth push` command), where any address is the user's to choose.
    pub limits: Option<Arc<OutboundLimits>>,
    /// How long a whole pull or push may take.
    pub timeout: Duration,
}

/// A component pulled from a registry.
#[derive(Debug)]
pub struct Pulled {
    /// The reference pulled, pinned to the manifest's digest.
    pub reference: Reference,
    /// The manifest's digest.
    pub manifest_digest: String,
    /// The component's bytes (digest checked).
    pub bytes: Vec<u8>,
}

/// A registry client.
pub struct OciClient {
    http: reqwest::Client,
    options: OciOptions,
}

impl OciClient {
    /// A client with its own connection pool.
    pub fn new(options: OciOptions) -> Result<OciClient, OciError> {
        let limits = options.limits.clone();
        let insecure = options.insecure.clone();
        let redirects = reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() >= MAX_REDIRECTS {
                return attempt.error(format!("more than {MAX_REDIRECTS} redirects"));
            }
            match check_url(attempt.url(), &insecure, limits.as_deref()) {
                Ok(()) => attempt.follow(),
                Err(e) => attempt.error(e),
            }
        });
        let mut builder = reqwest::Client::builder()
            .redirect(redirects)
            .no_proxy()
            .connect_timeout(Duration::from_secs(10))
            .read_timeout(options.timeout.min(Duration::from_secs(30)))
            .user_agent(concat!("plinth/", env!("CARGO_PKG_VERSION")));
        if let Some(limits) = &options.limits {
            builder = builder.dns_resolver(Arc::new(crate::egress::CheckedResolver::new(limits.clone())));
        }
        let http = builder.build().map_err(|e| OciError::Unreachable("*".into(), e.to_string()))?;
        Ok(OciClient { http, options })
    }

    /// Pulls the component `reference` names: the manifest (digest checked
    /// against the reference's, when it names one), then its one layer, no
    /// larger than `max_bytes`. Also reads the artifact's cosign
    /// signatures when `with_signatures`.
    pub async fn pull(
        &self,
        reference: &Reference,
        credentials: Option<&Credentials>,
        max_bytes: u64,
        with_signatures: bool,
    ) -> Result<(Pulled, Option<Result<Vec<cosign::Found>, String>>), OciError> {
        let seconds = self.options.timeout.as_secs();
        let work = async {
            let mut session = Session::new(self, reference, credentials, false)?;
            let (manifest_digest, manifest) = session.manifest(reference.manifest_name()).await?;
            if let Some(pinned) = &reference.digest
                && *pinned != manifest_digest
            {
                return Err(OciError::DigestMismatch {
                    reference: reference.to_string(),
                    what: "manifest",
                    expected: pinned.clone(),
                    found: manifest_digest,
                });
            }
            // A tag recorded beside a digest is checked: provenance says only what was true.
            if let (Some(tag), Some(pinned)) = (&reference.tag, &reference.digest) {
                let (tagged, _) = session.manifest(tag).await?;
                if tagged != *pinned {
                    return Err(OciError::TagMismatch {
                        reference: reference.to_string(),
                        tag: tag.clone(),
                        found: tagged,
                    });
                }
            }
            let layer = wasm_layer(reference, &manifest)?;
            let bytes = session.blob(&layer.digest, layer.size, max_bytes, "component layer").await?;
            let signatures = if with_signatures {
                Some(session.cosign_signatures(&manifest_digest).await.map_err(|e| e.to_string()))
            } else {
                None
            };
            let pulled = Pulled { reference: reference.at(&manifest_digest), manifest_digest, bytes };
            Ok((pulled, signatures))
        };
        tokio::time::timeout(self.options.timeout, work)
            .await
            .map_err(|_| OciError::TimedOut(reference.registry.clone(), seconds))?
    }

    /// Pushes `component` to `reference` (its tag) in the Wasm artifact
    /// layout; answers the manifest's digest.
    pub async fn push(
        &self,
        reference: &Reference,
        credentials: Option<&Credentials>,
        component: &[u8],
    ) -> Result<String, OciError> {
        let seconds = self.options.timeout.as_secs();
        let work = async {
            let mut session = Session::new(self, reference, credentials, true)?;
            let layer_digest = sha256_digest(component);
            let config = serde_json::to_vec(&wasm_config(component, &layer_digest)).unwrap_or_default();
            let config_digest = sha256_digest(&config);
            session.upload(&config_digest, config.clone()).await?;
            session.upload(&layer_digest, component.to_vec()).await?;
            let manifest = json!({
                "schemaVersion": 2,
                "mediaType": OCI_MANIFEST,
                "artifactType": WASM_CONFIG,
                "config": { "mediaType": WASM_CONFIG, "digest": config_digest, "size": config.len() },
                "layers": [{
                    "mediaType": WASM_LAYER,
                    "digest": layer_digest,
                    "size": component.len(),
                }],
            });
            let manifest = serde_json::to_vec(&manifest).unwrap_or_default();
            let digest = sha256_digest(&manifest);
            session.put_manifest(reference.manifest_name(), manifest).await?;
            Ok(digest)
        };
        tokio::time::timeout(self.options.timeout, work)
            .await
            .map_err(|_| OciError::TimedOut(reference.registry.clone(), seconds))?
    }
}

/// The manifest's one layer, checked to be a Wasm component artifact's.
struct Layer {
    digest: String,
    size: u64,
}

fn wasm_layer(reference: &Reference, manifest: &Value) -> Result<Layer, OciError> {
    let not_wasm = |why: &str| OciError::NotWasm(reference.to_string(), why.to_string());
    let media_type = manifest["mediaType"].as_str().unwrap_or(OCI_MANIFEST);
    if media_type != OCI_MANIFEST && media_type != DOCKER_MANIFEST {
        return Err(not_wasm(&format!(
            "its manifest is {} (an index or another kind); push one component per tag",
            outside_text(media_type)
        )));
    }
    if manifest["config"]["mediaType"] != WASM_CONFIG {
        return Err(not_wasm(&format!("its config is not `{WASM_CONFIG}`")));
    }
    let layers = manifest["layers"].as_array().map(Vec::as_slice).unwrap_or_default();
    let [layer] = layers else {
        return Err(not_wasm(&format!("it has {} layers; a component artifact has one", layers.len())));
    };
    if layer["mediaType"] != WASM_LAYER {
        return Err(not_wasm(&format!("its layer is not `{WASM_LAYER}`")));
    }
    let digest = layer["digest"]
        .as_str()
        .filter(|d| is_sha256_digest(d))
        .ok_or_else(|| not_wasm("its layer has no sha256 digest"))?;
    let size = layer["size"].as_u64().ok_or_else(|| not_wasm("its layer has no size"))?;
    Ok(Layer { digest: digest.to_string(), size })
}

/// The config `wkg` writes for a component: its WIT imports and exports
/// are the top-level import and export names.
fn wasm_config(component: &[u8], layer_digest: &str) -> Value {
    let (mut imports, mut exports) = (Vec::new(), Vec::new());
    let mut depth = 0usize;
    for payload in wasmparser::Parser::new(0).parse_all(component) {
        match payload {
            Ok(wasmparser::Payload::ModuleSection { .. } | wasmparser::Payload::ComponentSection { .. }) => depth += 1,
            Ok(wasmparser::Payload::End(_)) => depth = depth.saturating_sub(1),
            Ok(wasmparser::Payload::ComponentImportSection(section)) if depth == 0 => {
                imports.extend(section.into_iter().flatten().map(|i| i.name.name.to_string()));
            }
            Ok(wasmparser::Payload::ComponentExportSection(section)) if depth == 0 => {
                exports.extend(section.into_iter().flatten().map(|e| e.name.name.to_string()));
            }
            Err(_) => break,
            _ => {}
        }
    }
    json!({
        "created": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [layer_digest],
        "component": { "exports": exports, "imports": imports, "target": null },
    })
}

/// `sha256:<hex>` of `bytes`.
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// Whether the client may go to `url`: https (or http to a listed
/// registry), and an address literal the policy allows.
fn check_url(url: &Url, insecure: &[String], limits: Option<&OutboundLimits>) -> Result<(), OciError> {
    let host = url.host_str().unwrap_or_default().to_string();
    let origin = match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.clone(),
    };
    match url.scheme() {
        "https" => {}
        "http" if insecure.iter().any(|r| *r == origin || *r == host) => {}
        _ => return Err(OciError::NotHttps(origin)),
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(OciError::Unreachable(origin, "a URL with credentials in it".into()));
    }
    let literal = host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>().ok();
    if let (Some(ip), Some(limits)) = (literal, limits)
        && limits.refuses(ip)
    {
        return Err(OciError::AddressRefused(origin));
    }
    Ok(())
}

/// One pull or push: the repository's base URL and the authorization the
/// registry asked for, found at the first `401` and kept.
struct Session<'a> {
    client: &'a OciClient,
    reference: &'a Reference,
    base: Url,
    credentials: Option<&'a Credentials>,
    push: bool,
    authorization: Option<HeaderValue>,
}

impl<'a> Session<'a> {
    fn new(
        client: &'a OciClient,
        reference: &'a Reference,
        credentials: Option<&'a Credentials>,
        push: bool,
    ) -> Result<Session<'a>, OciError> {
        let scheme = if client.options.insecure.iter().any(|r| *r == reference.registry || r == reference.host()) {
            "http"
        } else {
            "https"
        };
        let base = Url::parse(&format!("{scheme}://{}/v2/{}/", reference.registry, reference.repository))
            .map_err(|e| OciError::InvalidReference(format!("`{reference}`: {e}")))?;
        check_url(&base, &client.options.insecure, client.options.limits.as_deref())?;
        Ok(Session { client, reference, base, credentials, push, authorization: None })
    }

    fn registry(&self) -> String {
        self.reference.registry.clone()
    }

    /// Whether `url` is on the registry's own origin (scheme, host, port).
    fn is_registry(&self, url: &Url) -> bool {
        url.origin() == self.base.origin()
    }

    fn url(&self, path: &str) -> Url {
        // The base is a valid URL and `path` is a digest, tag or fixed segment.
        self.base.join(path).unwrap_or_else(|_| self.base.clone())
    }

    /// Sends a request, authorizing once when the registry answers 401.
    async fn send(
        &mut self,
        method: Method,
        url: Url,
        headers: HeaderMap,
        body: Option<Vec<u8>>,
    ) -> Result<reqwest::Response, OciError> {
        for attempt in 0..2 {
            let mut request = self.client.http.request(method.clone(), url.clone()).headers(headers.clone());
            if let Some(auth) = &self.authorization {
                request = request.header(header::AUTHORIZATION, auth.clone());
            }
            if let Some(body) = &body {
                request = request.body(body.clone());
            }
            let response = request.send().await.map_err(|e| self.transport(e))?;
            // A challenge counts only from the registry's own origin: a host
            // it redirected to (blob storage) never gets its credentials.
            if response.status() != StatusCode::UNAUTHORIZED || attempt == 1 || !self.is_registry(response.url()) {
                return Ok(response);
            }
            let challenge = response
                .headers()
                .get(header::WWW_AUTHENTICATE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            self.authorization = Some(self.authorize(&challenge).await?);
        }
        unreachable!("the loop returns on its second attempt")
    }

    fn transport(&self, e: reqwest::Error) -> OciError {
        if crate::egress::caused_by_refusal(&e) {
            return OciError::AddressRefused(self.registry());
        }
        if e.is_timeout() {
            return OciError::TimedOut(self.registry(), self.client.options.timeout.as_secs());
        }
        let mut why = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            // A redirect the policy refused says where it would have gone.
            match s.downcast_ref::<OciError>() {
                Some(OciError::AddressRefused(to)) => return OciError::AddressRefused(to.clone()),
                Some(OciError::NotHttps(to)) => return OciError::NotHttps(to.clone()),
                _ => {}
            }
            why = format!("{why}: {s}");
            source = s.source();
        }
        // It may hold a URL the registry chose (a redirect's Location).
        let why = outside_text(&why);
        if e.is_redirect() {
            return OciError::Unreachable(self.registry(), format!("a redirect was refused ({why})"));
        }
        OciError::Unreachable(self.registry(), why)
    }

    fn denied(&self) -> OciError {
        OciError::Denied(self.registry(), self.reference.repository.clone())
    }

    /// The `Authorization` a `401`'s challenge asks for.
    async fn authorize(&self, challenge: &str) -> Result<HeaderValue, OciError> {
        let basic = self.credentials.map(|c| {
            let token = base64::engine::general_purpose::STANDARD.encode(format!("{}:{}", c.username, c.password));
            HeaderValue::from_str(&format!("Basic {token}")).ok()
        });
        let (scheme, params) = challenge.split_once(' ').unwrap_or((challenge, ""));
        if scheme.eq_ignore_ascii_case("basic") {
            return basic.flatten().ok_or_else(|| self.denied());
        }
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(self.denied());
        }
        let params = challenge_params(params);
        let realm = params.iter().find(|(k, _)| k == "realm").map(|(_, v)| v.as_str()).ok_or_else(|| self.denied())?;
        let mut realm = Url::parse(realm).map_err(|_| self.denied())?;
        check_url(&realm, &self.client.options.insecure, self.client.options.limits.as_deref())?;
        let actions = if self.push { "pull,push" } else { "pull" };
        let scope = format!("repository:{}:{actions}", self.reference.repository);
        {
            let mut query = realm.query_pairs_mut();
            if let Some((_, service)) = params.iter().find(|(k, _)| k == "service") {
                query.append_pair("service", service);
            }
            query.append_pair("scope", &scope);
        }
        let mut request = self.client.http.get(realm.clone());
        // Credentials go to the realm only over https or at the registry's
        // own origin (scheme, host and port: another port is another server).
        if let Some(Some(basic)) = basic
            && (realm.scheme() == "https" || self.is_registry(&realm))
        {
            request = request.header(header::AUTHORIZATION, basic);
        }
        let mut response = request.send().await.map_err(|e| self.transport(e))?;
        if response.status() == StatusCode::UNAUTHORIZED || response.status() == StatusCode::FORBIDDEN {
            return Err(self.denied());
        }
        if !response.status().is_success() {
            return Err(OciError::Status(self.registry(), response.status().as_u16(), "a token".into()));
        }
        let body = read_capped(&mut response, MAX_SIGNATURE_BYTES).await.map_err(|e| self.transport(e))?;
        let token: Value = body.and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
        let token = token["token"].as_str().or(token["access_token"].as_str()).ok_or_else(|| self.denied())?;
        HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| self.denied())
    }

    /// A manifest by tag or digest: its digest (computed here) and JSON.
    async fn manifest(&mut self, name: &str) -> Result<(String, Value), OciError> {
        let mut headers = HeaderMap::new();
        headers.insert(header::ACCEPT, HeaderValue::from_static("application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json;q=0.9, application/vnd.oci.image.index.v1+json;q=0.5"));
        let url = self.url(&format!("manifests/{name}"));
        let mut response = self.send(Method::GET, url, headers, None).await?;
        self.expect_success(&response, &format!("{}/{}:{name}", self.reference.registry, self.reference.repository))?;
        let shown = self.reference.to_string();
        let too_large = |size| OciError::TooLarge {
            reference: shown.clone(),
            what: "manifest",
            size,
            max: MAX_MANIFEST_BYTES as u64,
        };
        if let Some(size) = response.content_length().filter(|n| *n > MAX_MANIFEST_BYTES as u64) {
            return Err(too_large(size));
        }
        let body = read_capped(&mut response, MAX_MANIFEST_BYTES)
            .await
            .map_err(|e| self.transport(e))?
            .ok_or_else(|| too_large(MAX_MANIFEST_BYTES as u64 + 1))?;
        let digest = sha256_digest(&body);
        let manifest: Value = serde_json::from_slice(&body)
            .map_err(|_| OciError::NotWasm(shown.clone(), "its manifest is not JSON".into()))?;
        if !manifest.is_object() {
            return Err(OciError::NotWasm(shown, "its manifest is not a JSON object".into()));
        }
        Ok((digest, manifest))
    }

    fn expect_success(&self, response: &reqwest::Response, what: &str) -> Result<(), OciError> {
        match response.status() {
            s if s.is_success() => Ok(()),
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => Err(self.denied()),
            StatusCode::NOT_FOUND => Err(OciError::NotFound(self.registry(), what.to_string())),
            s => Err(OciError::Status(self.registry(), s.as_u16(), what.to_string())),
        }
    }

    /// A blob whose descriptor says `size` bytes, refused above `max`
    /// before it is read; its size and digest are checked.
    async fn blob(&mut self, digest: &str, size: u64, max: u64, what: &'static str) -> Result<Vec<u8>, OciError> {
        let shown = self.reference.to_string();
        if size > max {
            return Err(OciError::TooLarge { reference: shown, what, size, max });
        }
        let url = self.url(&format!("blobs/{digest}"));
        let mut response = self.send(Method::GET, url, HeaderMap::new(), None).await?;
        self.expect_success(&response, digest)?;
        let mismatch = |found: String| OciError::DigestMismatch {
            reference: shown.clone(),
            what,
            expected: digest.to_string(),
            found,
        };
        let body = read_capped(&mut response, size as usize)
            .await
            .map_err(|e| self.transport(e))?
            .ok_or_else(|| mismatch(format!("more than the {size} bytes its descriptor says")))?;
        if body.len() as u64 != size {
            return Err(mismatch(format!("{} bytes where its descriptor says {size}", body.len())));
        }
        let found = sha256_digest(&body);
        if found != digest {
            return Err(mismatch(found));
        }
        Ok(body)
    }

    /// The cosign signatures of the manifest `digest` (tag `sha256-<hex>.sig`):
    /// none when there is no such tag.
    async fn cosign_signatures(&mut self, digest: &str) -> Result<Vec<cosign::Found>, OciError> {
        let tag = format!("{}.sig", digest.replacen(':', "-", 1));
        let manifest = match self.manifest(&tag).await {
            Ok((_, manifest)) => manifest,
            Err(OciError::NotFound(..)) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut found = Vec::new();
        let layers = manifest["layers"].as_array().cloned().unwrap_or_default();
        for layer in layers.iter().filter(|l| l["mediaType"] == cosign::SIMPLE_SIGNING).take(MAX_SIGNATURES) {
            let (Some(digest), Some(size), Some(signature)) = (
                layer["digest"].as_str().filter(|d| is_sha256_digest(d)),
                layer["size"].as_u64(),
                layer["annotations"][cosign::SIGNATURE_ANNOTATION].as_str(),
            ) else {
                continue;
            };
            let payload = self.blob(digest, size, MAX_SIGNATURE_BYTES as u64, "signature payload").await?;
            found.push(cosign::Found { payload, signature: signature.to_string() });
        }
        Ok(found)
    }

    /// Uploads a blob unless the registry has it already.
    async fn upload(&mut self, digest: &str, bytes: Vec<u8>) -> Result<(), OciError> {
        let head = self.send(Method::HEAD, self.url(&format!("blobs/{digest}")), HeaderMap::new(), None).await?;
        if head.status().is_success() {
            return Ok(());
        }
        let started = self.send(Method::POST, self.url("blobs/uploads/"), HeaderMap::new(), Some(Vec::new())).await?;
        self.expect_success(&started, "an upload")?;
        let location = started
            .headers()
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| OciError::Unreachable(self.registry(), "the upload answer has no Location".into()))?;
        let mut target = self
            .base
            .join(location)
            .map_err(|_| OciError::Unreachable(self.registry(), "the upload Location is not a URL".into()))?;
        if target.origin() != self.base.origin() {
            return Err(OciError::Unreachable(self.registry(), "the upload Location is on another host".into()));
        }
        target.query_pairs_mut().append_pair("digest", digest);
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
        let done = self.send(Method::PUT, target, headers, Some(bytes)).await?;
        self.expect_success(&done, digest)
    }

    async fn put_manifest(&mut self, tag: &str, manifest: Vec<u8>) -> Result<(), OciError> {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(OCI_MANIFEST));
        let response = self.send(Method::PUT, self.url(&format!("manifests/{tag}")), headers, Some(manifest)).await?;
        self.expect_success(&response, tag)
    }
}

/// The `key="value"` pairs of a challenge.
fn challenge_params(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = text.trim();
    while let Some((key, after)) = rest.split_once('=') {
        let key = key.trim().trim_start_matches(',').trim().to_ascii_lowercase();
        let after = after.trim_start();
        let (value, next) = if let Some(quoted) = after.strip_prefix('"') {
            match quoted.split_once('"') {
                Some((v, next)) => (v, next),
                None => (quoted, ""),
            }
        } else {
            after.split_once(',').unwrap_or((after, ""))
        };
        out.push((key, value.to_string()));
        rest = next.trim_start().trim_start_matches(',');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_read_like_registries_write_them() {
        let params = challenge_params(
            r#"realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull""#,
        );
        assert_eq!(params[0], ("realm".into(), "https://auth.example/token".into()));
        assert_eq!(params[1], ("service".into(), "registry.example".into()));
        assert_eq!(params[2].1, "repository:a/b:pull");
    }

    #[test]
    fn plain_http_and_internal_addresses_are_refused_unless_allowed() {
        let strict = OutboundLimits::default();
        let url = |u: &str| Url::parse(u).unwrap();
        assert!(matches!(check_url(&url("http://r.example/v2/"), &[], Some(&strict)), Err(OciError::NotHttps(_))));
        assert!(check_url(&url("http://r.example/v2/"), &["r.example".into()], Some(&strict)).is_ok());
        assert!(matches!(
            check_url(&url("https://127.0.0.1:5000/v2/"), &[], Some(&strict)),
            Err(OciError::AddressRefused(_))
        ));
        assert!(matches!(check_url(&url("https://[::1]/v2/"), &[], Some(&strict)), Err(OciError::AddressRefused(_))));
        assert!(check_url(&url("https://127.0.0.1:5000/v2/"), &[], None).is_ok(), "the vendor's own machine");
        assert!(check_url(&url("https://u:p@r.example/v2/"), &[], None).is_err());
    }

    #[test]
    fn a_manifest_that_is_not_one_wasm_layer_is_refused_with_the_reason() {
        let r = Reference::parse("r.example/a/b:1").unwrap();
        let d = format!("sha256:{}", "0".repeat(64));
        let good = json!({"mediaType": OCI_MANIFEST, "config": {"mediaType": WASM_CONFIG},
            "layers": [{"mediaType": WASM_LAYER, "digest": d, "size": 10}]});
        assert_eq!(wasm_layer(&r, &good).unwrap().size, 10);
        for (bad, says) in [
            (json!({"mediaType": "application/vnd.oci.image.index.v1+json"}), "an index"),
            (json!({"config": {"mediaType": "application/vnd.oci.image.config.v1+json"}}), "its config"),
            (json!({"config": {"mediaType": WASM_CONFIG}, "layers": []}), "0 layers"),
            (
                json!({"config": {"mediaType": WASM_CONFIG}, "layers": [{"mediaType": "application/x-tar"}]}),
                "its layer",
            ),
        ] {
            let e = wasm_layer(&r, &bad).err().unwrap().to_string();
            assert!(e.contains(says), "{e}");
        }
    }

    #[test]
    fn registry_text_in_an_error_is_quoted_and_cut() {
        let r = Reference::parse("r.example/a/b:1").unwrap();
        let forged = format!("application/x\nlevel=ERROR msg=forged{}", "y".repeat(256 << 10));
        let e = wasm_layer(&r, &json!({ "mediaType": forged })).err().unwrap().to_string();
        assert!(e.len() < 1024, "{} bytes", e.len());
        assert!(!e.contains('\n'), "{e}");
        assert!(e.contains(r#""application/x\nlevel=ERROR msg=forged"#), "{e}");
    }

    /// What the test registries' token endpoints received: (where, the
    /// `Authorization` header).
    type Seen = std::sync::Arc<std::sync::Mutex<Vec<(String, Option<String>)>>>;

    fn token_route(seen: &Seen, name: &'static str) -> axum::routing::MethodRouter {
        let seen = seen.clone();
        axum::routing::get(move |headers: axum::http::HeaderMap| {
            let auth = headers.get("authorization").map(|v| v.to_str().unwrap().to_string());
            seen.lock().unwrap().push((name.to_string(), auth));
            async { axum::Json(json!({"token": "t"})) }
        })
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn credentials_answer_only_a_challenge_from_the_registrys_own_origin() {
        use axum::http::{HeaderMap as H, StatusCode as S};
        use axum::response::IntoResponse;
        let seen: Seen = Default::default();
        let body = b"abc".to_vec();
        let digest = sha256_digest(&body);
        // Another server on the same host: blob storage the registry
        // redirects to, which challenges with a realm of its own.
        let storage = {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            let realm = format!("Bearer realm=\"http://127.0.0.1:{port}/token\"");
            let router = axum::Router::new()
                .route(
                    "/blob",
                    axum::routing::get(move || {
                        std::future::ready((S::UNAUTHORIZED, [("www-authenticate", realm.clone())]))
                    }),
                )
                .route("/token", token_route(&seen, "storage"));
            tokio::spawn(async move { axum::serve(listener, router).await });
            port
        };
        let registry = {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            let own_realm = format!("Bearer realm=\"http://127.0.0.1:{port}/token\"");
            let body = body.clone();
            let router = axum::Router::new()
                // Redirected to storage.
                .route(
                    "/v2/a/redirected/blobs/{digest}",
                    axum::routing::get(move || async move {
                        (S::TEMPORARY_REDIRECT, [("location", format!("http://127.0.0.1:{storage}/blob"))])
                    }),
                )
                // A challenge by the registry whose realm is on another port, over http.
                .route(
                    "/v2/a/elsewhere/blobs/{digest}",
                    axum::routing::get(move || async move {
                        let realm = format!("Bearer realm=\"http://127.0.0.1:{storage}/token\"");
                        (S::UNAUTHORIZED, [("www-authenticate", realm)])
                    }),
                )
                // A challenge whose realm is the registry's own.
                .route(
                    "/v2/a/own/blobs/{digest}",
                    axum::routing::get(move |headers: H| {
                        std::future::ready(if headers.get("authorization").is_some_and(|v| v == "Bearer t") {
                            body.clone().into_response()
                        } else {
                            (S::UNAUTHORIZED, [("www-authenticate", own_realm.clone())]).into_response()
                        })
                    }),
                )
                .route("/token", token_route(&seen, "registry"));
            tokio::spawn(async move { axum::serve(listener, router).await });
            port
        };
        let client = OciClient::new(OciOptions {
            insecure: vec!["127.0.0.1".into()],
            limits: None,
            timeout: Duration::from_secs(20),
        })
        .unwrap();
        let credentials = Credentials { username: "u".into(), password: "secret".into() };
        let pull = |repository: &str| {
            let reference = Reference::parse(&format!("127.0.0.1:{registry}/a/{repository}:1")).unwrap();
            let (client, credentials, digest) = (&client, &credentials, digest.clone());
            async move {
                let mut session = Session::new(client, &reference, Some(credentials), false).unwrap();
                session.blob(&digest, 3, 10, "component layer").await
            }
        };
        assert!(matches!(pull("redirected").await, Err(OciError::Denied(..))));
        assert!(matches!(pull("elsewhere").await, Err(OciError::Denied(..))));
        assert!(
            seen.lock().unwrap().iter().all(|(_, auth)| auth.is_none()),
            "no credentials left the registry's origin: {seen:?}"
        );
        // The registry's own realm gets them.
        assert_eq!(pull("own").await.unwrap(), b"abc");
        let basic = format!("Basic {}", base64::engine::general_purpose::STANDARD.encode("u:secret"));
        assert_eq!(seen.lock().unwrap().last().unwrap(), &("registry".to_string(), Some(basic)));
    }
}
