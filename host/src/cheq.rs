//! CHEQ (draft-rosenberg-cheq): a consequential call runs only after the
//! human it acts for approves a signed description of it.
//!
//! This module holds the parts every CHEQ flow needs, independent of HTTP:
//!
//! - [`ConfirmationPolicy`]: when a tool's calls need confirmation, declared
//!   in its `plinth.toml` (`required = true`, or a CEL condition `when` over
//!   its inputs), checked at pack and deploy time and evaluated per call;
//! - [`SigningKey`]: the server's Ed25519 key, kept in the data dir and
//!   published as a JWKS;
//! - [`sign`], [`countersign`] and [`verify`]: JWS (EdDSA) in the general
//!   JSON serialization over the RFC 8785 (JCS) form of a CHEQ object, so the
//!   resource server's and the confirmation server's signatures sit side by
//!   side over the same bytes.
//!
//! Until the confirmation flow is served (see `docs/cheq.md`), a call that
//! needs confirmation is refused before the tool runs: it never runs
//! unconfirmed.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use ed25519_dalek::{Signer, Verifier};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::path::Path;

/// When a tool's calls need the end user's confirmation (`[confirmation]`
/// in `plinth.toml`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ConfirmationPolicy {
    /// Every call needs confirmation.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub required: bool,
    /// A call needs confirmation when this CEL expression over the inputs
    /// (by parameter name; an absent optional input is `null`) is true —
    /// or cannot be evaluated: a condition that fails, fails closed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
}

impl ConfirmationPolicy {
    /// Whether the tool declared no confirmation at all.
    pub fn is_empty(&self) -> bool {
        !self.required && self.when.is_none()
    }

    /// Checks the policy against the tool's input names: the condition
    /// compiles and names only inputs.
    pub fn check(&self, inputs: &[&str]) -> Result<(), String> {
        let Some(when) = &self.when else { return Ok(()) };
        if self.required {
            return Err("give `required = true` or a `when` condition, not both".into());
        }
        let program = compile(when)?;
        let references = program.references();
        let unknown: Vec<&str> = references.variables().into_iter().filter(|v| !inputs.contains(v)).collect();
        if !unknown.is_empty() {
            return Err(format!(
                "the `when` condition names {}, which {} not an input; the inputs are: {}",
                unknown.join(", "),
                if unknown.len() == 1 { "is" } else { "are" },
                inputs.join(", ")
            ));
        }
        Ok(())
    }

    /// The policy ready to evaluate, its condition compiled once (when a
    /// version is loaded). A condition that no longer compiles — it was
    /// checked at deploy — asks for confirmation on every call.
    pub fn compile(&self) -> Confirmation {
        match &self.when {
            _ if self.required => Confirmation::Always,
            None => Confirmation::Never,
            Some(when) => match compile(when) {
                Ok(program) => Confirmation::When { expression: when.clone(), program },
                Err(why) => {
                    tracing::warn!(condition = when, why, "a stored confirmation condition does not compile");
                    Confirmation::Always
                }
            },
        }
    }
}

/// A version's [`ConfirmationPolicy`], compiled.
#[derive(Debug)]
pub enum Confirmation {
    /// No call needs confirmation.
    Never,
    /// Every call does.
    Always,
    /// A call does when the condition holds for its inputs.
    When {
        /// The condition as written, for the logs.
        expression: String,
        /// The condition, compiled.
        program: cel::Program,
    },
}

impl Confirmation {
    /// Whether a call with `inputs` (the input record as JSON, by parameter
    /// name) needs confirmation.
    pub fn applies_to(&self, inputs: &Map<String, Value>) -> bool {
        let (expression, program) = match self {
            Confirmation::Never => return false,
            Confirmation::Always => return true,
            Confirmation::When { expression, program } => (expression, program),
        };
        match evaluate(program, inputs) {
            Ok(holds) => holds,
            Err(why) => {
                tracing::warn!(condition = expression, why, "a confirmation condition failed; asking for confirmation");
                true
            }
        }
    }
}

/// Longest `when` condition, in bytes: far more than any real condition
/// needs, and it keeps the CEL parser's error rendering in bounds (it pads
/// to the error's column and panics past column 65 535).
pub const MAX_CONDITION_BYTES: usize = 4096;

fn compile(expression: &str) -> Result<cel::Program, String> {
    if expression.len() > MAX_CONDITION_BYTES {
        return Err(format!(
            "the `when` condition is {} bytes long; at most {MAX_CONDITION_BYTES} are allowed",
            expression.len()
        ));
    }
    cel::Program::compile(expression).map_err(|e| format!("the `when` condition is not valid CEL: {e}"))
}

fn evaluate(program: &cel::Program, inputs: &Map<String, Value>) -> Result<bool, String> {
    let mut context = cel::Context::default();
    for (name, value) in inputs {
        context.add_variable(name.as_str(), value.clone()).map_err(|e| e.to_string())?;
    }
    match program.execute(&context) {
        Ok(cel::Value::Bool(holds)) => Ok(holds),
        Ok(other) => Err(format!("the condition gave {other:?}, not a boolean")),
        Err(e) => Err(e.to_string()),
    }
}

/// An Ed25519 key that signs CHEQ objects, with its JWKS key id.
pub struct SigningKey {
    key: ed25519_dalek::SigningKey,
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
        let path = dir.join(file);
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let bytes = hex::decode(text.trim()).ok().and_then(|b| <[u8; 32]>::try_from(b).ok());
                let secret = bytes.ok_or_else(|| {
                    std::io::Error::other(format!("{} is not a CHEQ signing key (64 hex digits)", path.display()))
                })?;
                Ok(SigningKey::from_bytes(&secret))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let key = SigningKey::generate()?;
                crate::tenancy::write_private_file(&path, &hex::encode(key.key.to_bytes()))?;
                Ok(key)
            }
            Err(e) => Err(e),
        }
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
        return Err(VerifyError::Malformed("more than 8 signatures; a CHEQ carries 2"));
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

#[cfg(test)]
mod proptests;

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn a_condition_over_the_inputs_decides_and_fails_closed() {
        let policy = ConfirmationPolicy {
            when: Some("cabin_class in ['BUSINESS', 'FIRST'] || passengers > 4".into()),
            ..Default::default()
        };
        policy.check(&["cabin_class", "passengers", "date"]).unwrap();
        assert!(!policy.compile().applies_to(&inputs(json!({"cabin_class": "ECONOMY", "passengers": 2}))));
        assert!(policy.compile().applies_to(&inputs(json!({"cabin_class": "FIRST", "passengers": 1}))));
        assert!(policy.compile().applies_to(&inputs(json!({"cabin_class": "ECONOMY", "passengers": 5}))));
        // A type error cannot be settled: ask.
        assert!(policy.compile().applies_to(&inputs(json!({"cabin_class": "ECONOMY", "passengers": "many"}))));

        let unknown = policy.check(&["cabin_class"]).unwrap_err();
        assert!(unknown.contains("names passengers, which is not an input"), "{unknown}");
        let broken = ConfirmationPolicy { when: Some("passengers >".into()), ..Default::default() };
        assert!(broken.check(&["passengers"]).unwrap_err().contains("not valid CEL"));
        let both = ConfirmationPolicy { required: true, when: Some("true".into()) };
        assert!(both.check(&[]).is_err());
        assert!(ConfirmationPolicy { required: true, when: None }.compile().applies_to(&Map::new()));
        assert!(!ConfirmationPolicy::default().compile().applies_to(&Map::new()));
    }

    #[test]
    fn signatures_sit_side_by_side_and_catch_every_change() {
        let server = SigningKey::generate().unwrap();
        let confirmer = SigningKey::generate().unwrap();
        let trusted = [jwks(&[&server]), jwks(&[&confirmer])];
        let cheq = json!({"version": 1.0, "operation name": "book_flight", "inputs": {"parameters": []}});

        let mut jws = sign(&cheq, &server, Map::new());
        let mut claims = Map::new();
        claims.insert("sub".into(), "alice".into());
        countersign(&mut jws, &confirmer, claims).unwrap();
        let (payload, signed) = verify(&jws, &trusted).unwrap();
        assert_eq!(payload, canonical(&cheq));
        assert_eq!(signed.len(), 2);
        assert_eq!((signed[1].kid.as_str(), &signed[1].header["sub"]), (confirmer.kid(), &json!("alice")));

        // The payload altered after signing.
        let mut altered = jws.clone();
        let other = json!({"version": 1.0, "operation name": "book_flight", "inputs": {"parameters": [1]}});
        altered["payload"] = B64.encode(canonical(&other)).into();
        assert_eq!(verify(&altered, &trusted).unwrap_err(), VerifyError::BadSignature(server.kid().into()));
        // A claim altered after signing.
        let mut header: Value =
            serde_json::from_slice(&B64.decode(jws["signatures"][1]["protected"].as_str().unwrap()).unwrap()).unwrap();
        header["sub"] = "mallory".into();
        let mut relabeled = jws.clone();
        relabeled["signatures"][1]["protected"] = B64.encode(header.to_string()).into();
        assert_eq!(verify(&relabeled, &trusted).unwrap_err(), VerifyError::BadSignature(confirmer.kid().into()));
        // A signature by a key nobody trusts.
        let forger = SigningKey::generate().unwrap();
        let mut forged = sign(&cheq, &server, Map::new());
        countersign(&mut forged, &forger, Map::new()).unwrap();
        assert_eq!(verify(&forged, &trusted).unwrap_err(), VerifyError::UnknownKey(forger.kid().into()));
        assert!(matches!(verify(&json!({"payload": "e30"}), &trusted), Err(VerifyError::Malformed(_))));
    }

    #[test]
    fn the_key_survives_a_restart_and_is_private() {
        let dir = tempfile::tempdir().unwrap();
        let first = SigningKey::load_or_create(dir.path(), KEY_FILE).unwrap();
        let again = SigningKey::load_or_create(dir.path(), KEY_FILE).unwrap();
        assert_eq!(first.kid(), again.kid());
        assert_eq!(first.jwk(), again.jwk());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(KEY_FILE)).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::write(dir.path().join(KEY_FILE), "not a key").unwrap();
        assert!(SigningKey::load_or_create(dir.path(), KEY_FILE).is_err());
    }
}
