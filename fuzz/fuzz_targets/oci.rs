//! What a registry answers a pull: manifests (image manifests, indexes,
//! anything), token answers to a `WWW-Authenticate` challenge, blobs,
//! redirects, and the cosign signature manifest beside the artifact —
//! served by a registry in this process (on 127.0.0.1) to the real client,
//! `OciClient::pull`, as a registry would send them.
//!
//! Properties: no panic; a pull that succeeds returned bytes whose digest
//! is the layer's, a manifest digest that is the served manifest's (and the
//! pinned one when the reference pins it), no more than `max_bytes`; every
//! refusal is an `OciError` whose message stays on one line (outside text
//! quoted) and short; Basic credentials never go to a realm on another
//! origin over plain http.
#![no_main]

#[path = "common.rs"]
mod common;

use arbitrary::{Result, Unstructured};
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use libfuzzer_sys::fuzz_target;
use plinth::supply::oci::{Credentials, OciClient, OciOptions, sha256_digest};
use plinth::supply::reference::Reference;
use serde_json::json;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

#[derive(Default)]
struct Script {
    /// Sent with a `401` to a request without `Authorization`.
    challenge: Option<String>,
    token: (u16, Vec<u8>),
    manifest: (u16, Vec<u8>),
    /// The signature manifest (`sha256-….sig`); `None`: 404.
    signatures: Option<Vec<u8>>,
    blobs: HashMap<String, Vec<u8>>,
    /// Bytes served for any blob, whatever its digest.
    any_blob: Option<Vec<u8>>,
    /// Blobs answered with a redirect to `/storage/…`.
    redirect: bool,
}

static SCRIPT: Mutex<Option<Script>> = Mutex::new(None);
/// `Authorization` headers the other origin's token endpoint received.
static ELSEWHERE: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn with_script<T>(f: impl FnOnce(&Script) -> T) -> T {
    f(SCRIPT.lock().unwrap().as_ref().unwrap())
}

async fn registry(uri: Uri, headers: HeaderMap) -> Response {
    let path = uri.path().to_string();
    with_script(|s| {
        let status = |code: u16| StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
        if path == "/token" {
            return (status(s.token.0), s.token.1.clone()).into_response();
        }
        if let Some(challenge) = &s.challenge
            && headers.get("authorization").is_none()
        {
            return (StatusCode::UNAUTHORIZED, [("www-authenticate", challenge.clone())]).into_response();
        }
        if let Some(name) = path.strip_prefix("/v2/fuzz/tool/manifests/") {
            if name.ends_with(".sig") {
                return match &s.signatures {
                    Some(body) => body.clone().into_response(),
                    None => StatusCode::NOT_FOUND.into_response(),
                };
            }
            return (status(s.manifest.0), s.manifest.1.clone()).into_response();
        }
        let blob = |digest: &str| match (&s.any_blob, s.blobs.get(digest)) {
            (Some(bytes), _) | (None, Some(bytes)) => bytes.clone().into_response(),
            _ => StatusCode::NOT_FOUND.into_response(),
        };
        if let Some(digest) = path.strip_prefix("/v2/fuzz/tool/blobs/") {
            if s.redirect {
                return (StatusCode::TEMPORARY_REDIRECT, [("location", format!("/storage/{digest}"))]).into_response();
            }
            return blob(digest);
        }
        if let Some(digest) = path.strip_prefix("/storage/") {
            return blob(digest);
        }
        StatusCode::NOT_FOUND.into_response()
    })
}

async fn elsewhere(headers: HeaderMap) -> Response {
    if let Some(auth) = headers.get("authorization") {
        ELSEWHERE.lock().unwrap().push(String::from_utf8_lossy(auth.as_bytes()).into_owned());
    }
    (StatusCode::OK, Bytes::from_static(br#"{"token":"t"}"#)).into_response()
}

struct Servers {
    registry: u16,
    other: u16,
    client: OciClient,
}

fn servers() -> &'static Servers {
    static SERVERS: OnceLock<Servers> = OnceLock::new();
    SERVERS.get_or_init(|| {
        common::runtime().block_on(async {
            let listen = || async { tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap() };
            let (a, b) = (listen().await, listen().await);
            let (registry_port, other) = (a.local_addr().unwrap().port(), b.local_addr().unwrap().port());
            tokio::spawn(async move { axum::serve(a, axum::Router::new().fallback(registry)).await });
            tokio::spawn(async move { axum::serve(b, axum::Router::new().fallback(elsewhere)).await });
            let client = OciClient::new(OciOptions {
                insecure: vec!["127.0.0.1".into()],
                limits: None,
                timeout: Duration::from_secs(5),
            })
            .unwrap();
            Servers { registry: registry_port, other, client }
        })
    })
}

fuzz_target!(|data: &[u8]| {
    let _ = one(&mut Unstructured::new(data));
});

fn bytes_or(u: &mut Unstructured, made: Vec<u8>) -> Result<Vec<u8>> {
    Ok(if u.ratio(1, 5)? { u.arbitrary()? } else { made })
}

fn status(u: &mut Unstructured) -> Result<u16> {
    Ok(*u.choose(&[200, 200, 200, 200, 200, 201, 204, 301, 404, 403, 401, 500, 502])?)
}

fn one(u: &mut Unstructured) -> Result<()> {
    let servers = servers();
    let component: Vec<u8> = u.arbitrary()?;
    let layer_digest = if u.ratio(7, 8)? { sha256_digest(&component) } else { u.arbitrary()? };
    let layer_size = if u.ratio(7, 8)? { component.len() as u64 } else { u.arbitrary()? };
    let config_type = *u.choose(&["application/vnd.wasm.config.v0+json", "application/vnd.oci.image.config.v1+json"])?;
    let media_type = *u.choose(&[
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.oci.image.index.v1+json",
    ])?;
    let mut layers = vec![json!({ "mediaType": "application/wasm", "digest": layer_digest, "size": layer_size })];
    for _ in 0..u.int_in_range(0..=1)? {
        layers.push(json!({ "mediaType": u.arbitrary::<String>()?, "digest": u.arbitrary::<String>()?, "size": u.arbitrary::<i64>()? }));
    }
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": media_type,
        "config": { "mediaType": config_type, "digest": sha256_digest(b"{}"), "size": 2 },
        "layers": layers,
    });
    let manifest = bytes_or(u, serde_json::to_vec(&manifest).unwrap())?;
    let manifest_digest = sha256_digest(&manifest);

    // cosign's signature manifest and its payloads.
    let payload = serde_json::to_vec(&json!({ "critical": {
        "image": { "docker-manifest-digest": manifest_digest },
        "type": "cosign container image signature" } }))
    .unwrap();
    let payload = bytes_or(u, payload)?;
    let signatures = if u.arbitrary()? {
        let sig = json!({ "schemaVersion": 2, "layers": [{
            "mediaType": "application/vnd.dev.cosign.simplesigning.v1+json",
            "digest": sha256_digest(&payload), "size": payload.len(),
            "annotations": { "dev.cosignproject.cosign/signature": u.arbitrary::<String>()? } }] });
        Some(bytes_or(u, serde_json::to_vec(&sig).unwrap())?)
    } else {
        None
    };

    let (registry, other) = (servers.registry, servers.other);
    let challenge = match u.int_in_range(0..=5)? {
        0 | 1 => None,
        2 => Some("Basic realm=\"registry\"".to_string()),
        _ => {
            let realm = *u.choose(&[
                "http://127.0.0.1:{registry}/token",
                "http://127.0.0.1:{other}/token",
                "https://127.0.0.1:{registry}/token",
                "http://127.0.0.1:1/token",
                "http://u:p@127.0.0.1:{registry}/token",
                "not a url",
                "",
            ])?;
            let realm = realm.replace("{registry}", &registry.to_string()).replace("{other}", &other.to_string());
            let scheme = *u.choose(&["Bearer", "bearer", "Bearer", "Negotiate"])?;
            let rest: String = u.arbitrary::<String>()?.replace("://", "");
            Some(format!("{scheme} realm=\"{realm}\",service=\"fuzz\"{rest}"))
        }
    };
    let token = (status(u)?, bytes_or(u, br#"{"token":"t"}"#.to_vec())?);
    let mut blobs = HashMap::new();
    blobs.insert(sha256_digest(&component), component.clone());
    blobs.insert(sha256_digest(&payload), payload);
    let any_blob = if u.ratio(1, 8)? { Some(u.arbitrary()?) } else { None };
    *SCRIPT.lock().unwrap() = Some(Script {
        challenge,
        token,
        manifest: (status(u)?, manifest.clone()),
        signatures,
        blobs,
        any_blob,
        redirect: u.ratio(1, 4)?,
    });
    ELSEWHERE.lock().unwrap().clear();

    let pin = match u.int_in_range(0..=3)? {
        0 => Some(manifest_digest.clone()),
        1 => Some(sha256_digest(u.bytes(2)?)),
        _ => None,
    };
    let text = match &pin {
        Some(pin) if u.arbitrary()? => format!("127.0.0.1:{registry}/fuzz/tool:1@{pin}"),
        Some(pin) => format!("127.0.0.1:{registry}/fuzz/tool@{pin}"),
        None => format!("127.0.0.1:{registry}/fuzz/tool:1"),
    };
    let reference = Reference::parse(&text).unwrap();
    let credentials = Credentials { username: "u".into(), password: "secret".into() };
    let credentials = if u.arbitrary()? { Some(&credentials) } else { None };
    let max_bytes = if u.ratio(3, 4)? { 1 << 20 } else { u.int_in_range(0..=64)? };
    let with_signatures = u.arbitrary()?;

    let outcome = common::runtime().block_on(servers.client.pull(&reference, credentials, max_bytes, with_signatures));
    match outcome {
        Ok((pulled, found)) => {
            assert_eq!(pulled.manifest_digest, manifest_digest, "the manifest digest is not the served manifest's");
            if let Some(pin) = &pin {
                assert_eq!(&pulled.manifest_digest, pin, "a pinned pull took another manifest");
            }
            let layer: serde_json::Value = serde_json::from_slice(&manifest).unwrap();
            let declared = layer["layers"].as_array().and_then(|l| l.first()).and_then(|l| l["digest"].as_str());
            assert_eq!(Some(sha256_digest(&pulled.bytes).as_str()), declared, "bytes that are not the layer's");
            assert!(pulled.bytes.len() as u64 <= max_bytes);
            assert_eq!(found.is_some(), with_signatures);
        }
        Err(e) => {
            let message = e.to_string();
            assert!(!message.is_empty());
            assert!(!message.contains(['\n', '\r']), "outside text unquoted in an error: {message:?}");
            assert!(message.len() < 4096, "an error of {} bytes", message.len());
        }
    }
    let leaked = ELSEWHERE.lock().unwrap().iter().any(|auth| auth.starts_with("Basic"));
    assert!(!leaked, "Basic credentials went over http to a realm on another origin");
    Ok(())
}
