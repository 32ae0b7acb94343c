//! CHEQ signatures: the server's Ed25519 [`SigningKey`] (kept in the data
//! dir, published as a JWKS) and JWS (EdDSA) in the general JSON
//! serialization over the RFC 8785 (JCS) form of a CHEQ object — [`sign`],
//! [`countersign`], [`verify`] — so the resource server's and the
//! confirmation server's signatures sit side by side over the same bytes.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use ed25519_dalek::{Signer, Verifier};
use serde_json::{Map, Value, json};
use std::path::Path;

/// An Ed25519 key that signs CHEQ objects, with its JWKS key id.
pub struct SigningKey {
    pub(super) key: ed25519_dalek::SigningKey,
    kid: String,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey").field("kid", &self.kid).finish_non_exhaustive()
    }
}

/// The file in the data dir that holds the key this server signs its CHEQ
/// objects with (as the resource server).
pub const KEY_FILE: &str = "cheq-signing.key";

/// The file in the data dir that holds the key of the built-in confirmation
/// server (it countersigns what end users accept on its page).
pub const CONFIRMATION_KEY_FILE: &str = "cheq-confirmation.key";

impl SigningKey {
    /// A key from its 32 secret bytes. The key id is the JWK thumbprint
    /// (RFC 7638) of its public half, so it names the key, not a file.
    pub fn from_bytes(secret: &[u8; 32]) -> SigningKey {
        let key = ed25519_dalek::SigningKey::from_bytes(secret);
        let x = B64.encode(key.verifying_key().as_bytes());
        let thumbprint = format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{x}"}}"#);
        let kid = B64.encode(<sha2::Sha256 as sha2::Digest>::digest(thumbprint.as_bytes()));
        SigningKey { key, kid }
    }

    /// A new random key.
    pub fn generate() -> std::io::Result<SigningKey> {
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret).map_err(std::io::Error::other)?;
        Ok(SigningKey::from_bytes(&secret))
    }

    /// The key in `dir/file`, created (readable by its owner only) on
    /// first use.
    pub fn load_or_create(dir: &Path, file: &str) -> std::io::Result<SigningKey> {
        let secret = crate::private_files::read_or_create_hex_key(&dir.join(file), "a CHEQ signing key")?;
        Ok(SigningKey::from_bytes(&secret))
    }

    /// The key id (`kid`) under which the public key is published.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The public key as a JWK.
    pub fn jwk(&self) -> Value {
        json!({
            "kty": "OKP",
            "crv": "Ed25519",
            "alg": "EdDSA",
            "use": "sig",
            "kid": self.kid,
            "x": B64.encode(self.key.verifying_key().as_bytes()),
        })
    }
}

/// A JWKS of `keys`.
pub fn jwks(keys: &[&SigningKey]) -> Value {
    json!({ "keys": keys.iter().map(|k| k.jwk()).collect::<Vec<_>>() })
}

/// The bytes every signature covers: the RFC 8785 form of `cheq`.
pub fn canonical(cheq: &Value) -> Vec<u8> {
    serde_json_canonicalizer::to_vec(cheq).unwrap_or_default()
}

/// `cheq` signed by `key`: a JWS in the general JSON serialization,
/// `{"payload", "signatures": [{"protected", "signature"}]}`. `claims` go
/// into the signature's protected header (a confirmation server puts the
/// end user and its decision there).
pub fn sign(cheq: &Value, key: &SigningKey, claims: Map<String, Value>) -> Value {
    let payload = B64.encode(canonical(cheq));
    json!({ "payload": payload, "signatures": [signature(&payload, key, claims)] })
}

/// Adds `key`'s signature over the payload of `jws`, beside the ones there.
pub fn countersign(jws: &mut Value, key: &SigningKey, claims: Map<String, Value>) -> Result<(), VerifyError> {
    let payload = jws["payload"].as_str().ok_or(VerifyError::Malformed("no `payload`"))?.to_string();
    let signatures = jws["signatures"].as_array_mut().ok_or(VerifyError::Malformed("no `signatures`"))?;
    signatures.push(signature(&payload, key, claims));
    Ok(())
}

fn signature(payload: &str, key: &SigningKey, claims: Map<String, Value>) -> Value {
    let mut header = claims;
    header.insert("alg".into(), "EdDSA".into());
    header.insert("kid".into(), key.kid.clone().into());
    let protected = B64.encode(Value::Object(header).to_string());
    let signed = key.key.sign(format!("{protected}.{payload}").as_bytes());
    json!({ "protected": protected, "signature": B64.encode(signed.to_bytes()) })
}

/// A signed CHEQ as it came over the wire, in the general JSON
/// serialization [`verify`] reads. The draft leaves the multi-signature
/// syntax open, so a confirmation server may send the CHEQ in any of
/// RFC 7515's serializations: the general JSON one (`{"payload",
/// "signatures"}`, as this server issues it), the flattened JSON one
/// (`{"payload", "protected", "signature"}`) or the compact one
/// (`protected.payload.signature`); the last two carry one signature. Only
/// the form changes here: nothing is verified, and a JSON object that is
/// neither JWS form is returned as it is, for [`verify`] to refuse.
pub fn from_wire(body: &[u8]) -> Result<Value, String> {
    let text = std::str::from_utf8(body).map_err(|_| "it is not UTF-8".to_string())?.trim();
    if text.starts_with('{') {
        let mut jws: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let flattened = jws.get("signatures").is_none() && jws.get("signature").is_some();
        if let (true, Some(object)) = (flattened, jws.as_object_mut()) {
            let mut entry = Map::new();
            for field in ["protected", "header", "signature"] {
                if let Some(value) = object.remove(field) {
                    entry.insert(field.into(), value);
                }
            }
            object.insert("signatures".into(), Value::Array(vec![Value::Object(entry)]));
        }
        return Ok(jws);
    }
    let base64url = |part: &&str| part.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    match text.split('.').collect::<Vec<_>>()[..] {
        [protected, payload, signature] if [protected, payload, signature].iter().all(base64url) => {
            Ok(json!({ "payload": payload, "signatures": [{ "protected": protected, "signature": signature }] }))
        }
        _ => Err("it is neither JSON nor a compact JWS".into()),
    }
}

/// Why a signed CHEQ was not accepted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum VerifyError {
    /// Not a JWS in the general JSON serialization.
    #[error("not a signed CHEQ (a JWS in the general JSON serialization): {0}")]
    Malformed(&'static str),
    /// A signature by a key none of the given key sets hold.
    #[error("a signature is by key `{0}`, which no trusted key set holds")]
    UnknownKey(String),
    /// A signature that does not verify.
    #[error("the signature by key `{0}` does not match the CHEQ: it was altered or forged")]
    BadSignature(String),
    /// An algorithm other than EdDSA.
    #[error("the signature by key `{0}` uses `{1}`; only EdDSA is accepted")]
    Algorithm(String, String),
    /// More than [`MAX_SIGNATURES`] signatures (how many there were).
    #[error(
        "not a signed CHEQ: it has {0} signatures, more than {max} signatures are refused; a CHEQ carries 2",
        max = MAX_SIGNATURES
    )]
    TooManySignatures(usize),
}

/// One verified signature: who signed, and its protected header.
#[derive(Debug, Clone)]
pub struct Signed {
    /// The signing key's id.
    pub kid: String,
    /// The signature's protected header (its `alg`, `kid` and claims).
    pub header: Map<String, Value>,
}

/// Most signatures [`verify`] takes: a CHEQ carries the resource server's
/// and a confirmation server's.
pub const MAX_SIGNATURES: usize = 8;

/// Verifies every signature of `jws` against the JWK sets in `trusted`:
/// each must be by a known key and match. Returns the payload (the
/// canonical CHEQ bytes) and the signatures.
pub fn verify(jws: &Value, trusted: &[Value]) -> Result<(Vec<u8>, Vec<Signed>), VerifyError> {
    let payload_b64 = jws["payload"].as_str().ok_or(VerifyError::Malformed("no `payload`"))?;
    let payload = B64.decode(payload_b64).map_err(|_| VerifyError::Malformed("`payload` is not base64url"))?;
    let signatures = jws["signatures"].as_array().ok_or(VerifyError::Malformed("no `signatures`"))?;
    if signatures.is_empty() {
        return Err(VerifyError::Malformed("no signatures"));
    }
    // Each signature costs an Ed25519 verification: a body of copies of one
    // valid signature must not buy that work hundreds of times over.
    if signatures.len() > MAX_SIGNATURES {
        return Err(VerifyError::TooManySignatures(signatures.len()));
    }
    let mut signed = Vec::new();
    for entry in signatures {
        let protected = entry["protected"].as_str().ok_or(VerifyError::Malformed("a signature has no `protected`"))?;
        let header: Map<String, Value> = B64
            .decode(protected)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .ok_or(VerifyError::Malformed("a protected header is not base64url JSON"))?;
        let kid =
            header.get("kid").and_then(Value::as_str).ok_or(VerifyError::Malformed("a signature has no `kid`"))?;
        let alg = header.get("alg").and_then(Value::as_str).unwrap_or("");
        if alg != "EdDSA" {
            return Err(VerifyError::Algorithm(kid.into(), alg.into()));
        }
        let key = find_key(trusted, kid).ok_or_else(|| VerifyError::UnknownKey(kid.into()))?;
        let bytes = entry["signature"]
            .as_str()
            .and_then(|s| B64.decode(s).ok())
            .and_then(|b| <[u8; 64]>::try_from(b).ok())
            .ok_or(VerifyError::Malformed("a signature is not 64 base64url bytes"))?;
        let message = format!("{protected}.{payload_b64}");
        key.verify(message.as_bytes(), &ed25519_dalek::Signature::from_bytes(&bytes))
            .map_err(|_| VerifyError::BadSignature(kid.into()))?;
        signed.push(Signed { kid: kid.into(), header });
    }
    Ok((payload, signed))
}

/// The Ed25519 key `kid` in one of the JWK sets.
fn find_key(sets: &[Value], kid: &str) -> Option<ed25519_dalek::VerifyingKey> {
    let jwk = sets.iter().filter_map(|set| set["keys"].as_array()).flatten().find(|k| k["kid"] == kid)?;
    if jwk["kty"] != "OKP" || jwk["crv"] != "Ed25519" {
        return None;
    }
    let x = B64.decode(jwk["x"].as_str()?).ok()?;
    ed25519_dalek::VerifyingKey::from_bytes(&<[u8; 32]>::try_from(x).ok()?).ok()
}
