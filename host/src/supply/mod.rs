//! The supply chain: where a version came from and who signed it.
//!
//! - [`reference`]: OCI references (`registry/repo:tag@sha256:…`);
//! - [`oci`]: a registry client (pull and push in the CNCF "Wasm OCI
//!   artifact" layout, cosign signatures), under the outbound policy;
//! - [`wasmsig`]: signatures embedded in components (`wasmsign2`'s format);
//! - [`cosign`]: cosign key signatures stored next to an artifact;
//! - here: a tenant's trust policy (its trusted keys, and whether a
//!   signature is required), the decision it makes about a component, and
//!   the [`Provenance`] a version records: its source reference and
//!   manifest digest, and its verified signers.
//!
//! The decision is made once, at deploy, and recorded with the version: a
//! running version is never disabled by a later change of policy.

pub mod cosign;
pub mod oci;
pub mod reference;
pub mod wasmsig;

use base64::Engine;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub use reference::Reference;

/// Keys a trust policy may hold.
pub const MAX_TRUSTED_KEYS: usize = 32;
/// Scopes a trusted key may have.
pub const MAX_KEY_SCOPES: usize = 16;

/// DER prefix of an Ed25519 SubjectPublicKeyInfo (RFC 8410), before the 32-byte key.
const ED25519_SPKI: [u8; 12] = [0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00];
/// DER prefix of an ECDSA P-256 SubjectPublicKeyInfo, before the 65-byte point.
const P256_SPKI: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce,
    0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

/// Where a version came from and who signed it, recorded at deploy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Provenance {
    /// The registry artifact it was pulled from; none for posted bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Source>,
    /// The trusted keys whose signatures verified, at deploy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signers: Vec<Signer>,
}

/// A registry artifact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Source {
    /// The reference as the deployer wrote it (tag and all).
    pub reference: String,
    /// The sha256 digest of the manifest that was pulled: what the tag
    /// pointed at then.
    pub manifest_digest: String,
}

/// A verified signer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Signer {
    /// `wasmsign2` (embedded in the component) or `cosign` (in the registry).
    pub kind: String,
    /// The name the trust policy gives the key.
    pub key: String,
    /// `sha256:` and the hex SHA-256 of the key's SubjectPublicKeyInfo (DER).
    pub fingerprint: String,
}

impl Provenance {
    /// The JSON every front door shows (`{}` for posted, unsigned bytes).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }
}

/// A public key a tenant trusts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustedKey {
    /// The tenant's name for it (shown as the signer).
    pub name: String,
    /// Its SubjectPublicKeyInfo, DER.
    spki: Vec<u8>,
    /// The repositories it may sign for (`registry/repository`, or a
    /// prefix ending in `/*`); empty: any component. A scoped key counts
    /// only for a pull whose reference matches, never for posted bytes.
    pub scopes: Vec<String>,
}

impl TrustedKey {
    /// An Ed25519 key (signs components, with `wasmsign2`).
    pub fn from_ed25519(name: &str, key: [u8; 32]) -> TrustedKey {
        TrustedKey { name: name.to_string(), spki: [&ED25519_SPKI[..], &key].concat(), scopes: Vec::new() }
    }

    /// An ECDSA P-256 key (signs registry artifacts, with cosign): `point`
    /// is the uncompressed point.
    pub fn from_p256(name: &str, point: [u8; 65]) -> TrustedKey {
        TrustedKey { name: name.to_string(), spki: [&P256_SPKI[..], &point].concat(), scopes: Vec::new() }
    }

    /// Reads a key: a PEM `PUBLIC KEY` (Ed25519 or P-256, as `openssl` and
    /// cosign write them), or the base64 of a `wasmsign2 keygen` public key
    /// file (33 bytes) or of a raw 32-byte Ed25519 key.
    pub fn parse(name: &str, text: &str) -> Result<TrustedKey, String> {
        let text = text.trim();
        let b64 = base64::engine::general_purpose::STANDARD;
        let der = if text.starts_with("-----BEGIN PUBLIC KEY-----") {
            let body: String = text
                .lines()
                .filter(|l| !l.starts_with("-----"))
                .flat_map(|l| l.chars().filter(|c| !c.is_whitespace()))
                .collect();
            b64.decode(body).map_err(|_| format!("key `{name}`: the PEM's base64 cannot be read"))?
        } else {
            let raw = b64.decode(text).map_err(|_| {
                format!("key `{name}`: write a PEM public key (-----BEGIN PUBLIC KEY-----) or the base64 of a wasmsign2 public key file")
            })?;
            match raw.as_slice() {
                [0x01, key @ ..] if key.len() == 32 => [&ED25519_SPKI[..], key].concat(),
                key if key.len() == 32 => [&ED25519_SPKI[..], key].concat(),
                _ => return Err(format!("key `{name}`: a raw key is 32 bytes (or 33 from wasmsign2 keygen)")),
            }
        };
        let key = TrustedKey { name: name.to_string(), spki: der, scopes: Vec::new() };
        if key.ed25519().is_none() && key.p256().is_none() {
            return Err(format!(
                "key `{name}`: only Ed25519 (wasmsign2) and ECDSA P-256 (cosign) public keys are supported"
            ));
        }
        Ok(key)
    }

    /// The 32-byte key, if it is an Ed25519 key.
    pub fn ed25519(&self) -> Option<[u8; 32]> {
        self.spki.strip_prefix(&ED25519_SPKI[..]).and_then(|k| k.try_into().ok())
    }

    /// The uncompressed point, if it is a P-256 key.
    pub fn p256(&self) -> Option<&[u8]> {
        self.spki.strip_prefix(&P256_SPKI[..]).filter(|p| p.len() == 65 && p[0] == 4)
    }

    /// `sha256:<hex>` of its SubjectPublicKeyInfo.
    pub fn fingerprint(&self) -> String {
        format!("sha256:{}", hex::encode(Sha256::digest(&self.spki)))
    }

    /// Its PEM form.
    pub fn pem(&self) -> String {
        let b64 = base64::engine::general_purpose::STANDARD.encode(&self.spki);
        let lines: Vec<&str> = b64.as_bytes().chunks(64).map(|c| std::str::from_utf8(c).unwrap_or_default()).collect();
        format!("-----BEGIN PUBLIC KEY-----\n{}\n-----END PUBLIC KEY-----\n", lines.join("\n"))
    }

    /// What it verifies: embedded `wasmsign2` signatures or registry `cosign` ones.
    pub fn kind(&self) -> &'static str {
        if self.ed25519().is_some() { "wasmsign2" } else { "cosign" }
    }

    fn signer(&self) -> Signer {
        Signer { kind: self.kind().into(), key: self.name.clone(), fingerprint: self.fingerprint() }
    }

    fn describe(&self) -> String {
        match self.scopes.as_slice() {
            [] => format!("{} ({} key {})", self.name, self.kind(), self.fingerprint()),
            scopes => format!("{} ({} key {}, for {})", self.name, self.kind(), self.fingerprint(), scopes.join(", ")),
        }
    }

    /// Whether it may sign a component pulled from `repository`
    /// (`registry/repository`; none: posted bytes).
    pub fn covers(&self, repository: Option<&str>) -> bool {
        self.scopes.is_empty() || repository.is_some_and(|r| self.scopes.iter().any(|s| scope_matches(s, r)))
    }

    /// Whether every component it may sign, `wider` may sign too (same key,
    /// no wider scopes): a publisher may keep it in an operator's policy.
    fn within(&self, wider: &TrustedKey) -> bool {
        self.spki == wider.spki
            && (wider.scopes.is_empty()
                || (!self.scopes.is_empty()
                    && self.scopes.iter().all(|s| wider.scopes.iter().any(|w| scope_within(s, w)))))
    }
}

/// Whether `scope` (`registry/repository`, or a prefix ending in `/*`)
/// matches `repository` (`registry/repository`).
fn scope_matches(scope: &str, repository: &str) -> bool {
    match scope.strip_suffix('*') {
        Some(prefix) => repository.starts_with(prefix),
        None => repository == scope,
    }
}

/// Whether every repository `inner` matches, `outer` matches too.
fn scope_within(inner: &str, outer: &str) -> bool {
    match outer.strip_suffix('*') {
        Some(prefix) => inner.starts_with(prefix),
        None => inner == outer,
    }
}

/// Checks a key scope: `registry/repository`, `registry/prefix/*` or `registry/*`.
fn check_scope(key: &str, scope: &str) -> Result<(), String> {
    let invalid = || {
        format!(
            "key `{key}`: scope `{}` is not `registry/repository`, `registry/prefix/*` or `registry/*` (lowercase, like ghcr.io/acme/*)",
            outside_text(scope)
        )
    };
    let (base, wildcard) = match scope.strip_suffix("/*") {
        Some(base) => (base, true),
        None => (scope, false),
    };
    if wildcard && Reference::parse(&format!("{base}/x")).is_ok_and(|r| r.registry == base) {
        return Ok(());
    }
    match Reference::parse(base) {
        Ok(r) if r.digest.is_none() && format!("{}/{}", r.registry, r.repository) == base => Ok(()),
        _ => Err(invalid()),
    }
}

/// Text from outside (a registry's answer, a stored value) as it may reach
/// an error or a log: quoted as a JSON string (so newlines and control
/// characters stay escaped) and cut to [`MAX_OUTSIDE_TEXT`] characters.
pub fn outside_text(text: &str) -> String {
    let mut cut: String = text.chars().take(MAX_OUTSIDE_TEXT).collect();
    if cut.len() < text.len() {
        cut.push('…');
    }
    serde_json::to_string(&cut).unwrap_or_default()
}

/// Characters of outside text kept in an error or a log.
pub const MAX_OUTSIDE_TEXT: usize = 200;

/// A tenant's trust policy: the keys it trusts, and whether a deploy must
/// carry a signature by one of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustPolicy {
    /// Refuse a deploy that no trusted key signed.
    pub require_signature: bool,
    /// The trusted keys.
    pub keys: Vec<TrustedKey>,
    /// Why the stored policy could not be read, if it could not: then
    /// every deploy is refused (fail closed) until it is set again.
    pub unreadable: Option<String>,
    /// The policy an operator set, when one did and it requires a
    /// signature: a publisher may only set policies at least as strict.
    pub operator: Option<Box<TrustPolicy>>,
}

/// The stored form: the policy, and the operator's one a publisher may
/// only tighten.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StoredTrustPolicy {
    /// Refuse a deploy that no trusted key signed.
    #[serde(default)]
    pub require_signature: bool,
    /// The trusted keys.
    #[serde(default)]
    pub keys: Vec<TrustedKeyJson>,
    /// The policy an operator set (when it requires a signature).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<TrustPolicyJson>,
}

/// The policy as JSON (the admin API and the store).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TrustPolicyJson {
    /// Refuse a deploy that no trusted key signed.
    #[serde(default)]
    pub require_signature: bool,
    /// The trusted keys.
    #[serde(default)]
    pub keys: Vec<TrustedKeyJson>,
}

/// A trusted key as JSON.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TrustedKeyJson {
    /// The tenant's name for it: 1 to 64 lowercase letters, digits, `.`, `_` or `-`.
    pub name: String,
    /// A PEM public key, or the base64 of a `wasmsign2` public key file.
    pub public_key: String,
    /// The repositories it may sign for (`registry/repository`,
    /// `registry/prefix/*`, `registry/*`); none: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
}

impl TrustPolicy {
    /// Reads and checks a policy.
    pub fn from_json(json: &TrustPolicyJson) -> Result<TrustPolicy, String> {
        if json.keys.len() > MAX_TRUSTED_KEYS {
            return Err(format!("a trust policy holds at most {MAX_TRUSTED_KEYS} keys"));
        }
        let mut keys: Vec<TrustedKey> = Vec::new();
        for k in &json.keys {
            let valid_name = (1..=64).contains(&k.name.len())
                && k.name
                    .bytes()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'.' | b'_' | b'-'));
            if !valid_name {
                return Err(format!("key name `{}`: 1 to 64 lowercase letters, digits, `.`, `_` or `-`", k.name));
            }
            if keys.iter().any(|e| e.name == k.name) {
                return Err(format!("two keys are named `{}`", k.name));
            }
            if k.scopes.len() > MAX_KEY_SCOPES {
                return Err(format!("key `{}`: at most {MAX_KEY_SCOPES} scopes", k.name));
            }
            for scope in &k.scopes {
                check_scope(&k.name, scope)?;
            }
            let mut key = TrustedKey::parse(&k.name, &k.public_key)?;
            key.scopes = k.scopes.clone();
            keys.push(key);
        }
        if json.require_signature && keys.is_empty() {
            return Err("a policy that requires a signature must trust at least one key".into());
        }
        Ok(TrustPolicy { require_signature: json.require_signature, keys, unreadable: None, operator: None })
    }

    /// Reads and checks a stored policy: one that does not validate (a
    /// newer or older release may read a rule differently) refuses every
    /// deploy, saying why, rather than trusting everything.
    pub fn from_stored(text: &str) -> TrustPolicy {
        let stored: StoredTrustPolicy = match serde_json::from_str(text) {
            Ok(stored) => stored,
            Err(e) => {
                let mut policy = TrustPolicy::unreadable(e.to_string());
                // A policy that may hold an operator's part: only an operator sets it again.
                let publishers = serde_json::from_str::<serde_json::Value>(text)
                    .is_ok_and(|v| v.as_object().is_some_and(|o| !o.contains_key("operator")));
                if !publishers {
                    policy.operator = Some(Box::new(TrustPolicy::unreadable(e.to_string())));
                }
                return policy;
            }
        };
        let json = TrustPolicyJson { require_signature: stored.require_signature, keys: stored.keys };
        let read = TrustPolicy::from_json(&json).and_then(|mut policy| {
            if let Some(operator) = &stored.operator {
                policy.operator = Some(Box::new(TrustPolicy::from_json(operator)?));
            }
            Ok(policy)
        });
        read.unwrap_or_else(|why| {
            let mut policy = TrustPolicy::unreadable(why.clone());
            // An operator's policy was stored: only an operator sets it again.
            if stored.operator.is_some() {
                policy.operator = Some(Box::new(TrustPolicy::unreadable(why)));
            }
            policy
        })
    }

    /// The policy of a tenant whose stored policy cannot be read: it
    /// refuses every deploy, saying why, rather than trusting everything.
    pub fn unreadable(why: String) -> TrustPolicy {
        TrustPolicy { require_signature: true, keys: Vec::new(), unreadable: Some(why), operator: None }
    }

    /// The policy as set through the API.
    pub fn to_json(&self) -> TrustPolicyJson {
        TrustPolicyJson {
            require_signature: self.require_signature,
            keys: self
                .keys
                .iter()
                .map(|k| TrustedKeyJson { name: k.name.clone(), public_key: k.pem(), scopes: k.scopes.clone() })
                .collect(),
        }
    }

    /// The stored form.
    pub fn to_stored(&self) -> StoredTrustPolicy {
        let TrustPolicyJson { require_signature, keys } = self.to_json();
        StoredTrustPolicy { require_signature, keys, operator: self.operator.as_ref().map(|o| o.to_json()) }
    }

    /// Whether it accepts nothing `wider` refuses: it requires a signature
    /// whenever `wider` does, and trusts no key `wider` does not, nor any
    /// for more repositories. Adding a trusted key widens who may sign, so
    /// it is a relaxation too.
    pub fn at_least_as_strict_as(&self, wider: &TrustPolicy) -> Result<(), String> {
        if wider.unreadable.is_some() {
            return Err(
                "the stored policy cannot be read and holds an operator's; only an operator may set it again".into()
            );
        }
        if !wider.require_signature {
            return Ok(());
        }
        if !self.require_signature {
            return Err("it does not require a signature, which the operator's policy does".into());
        }
        match self.keys.iter().find(|k| !wider.keys.iter().any(|w| k.within(w))) {
            Some(k) => Err(format!(
                "it trusts key `{}` ({}) {}",
                k.name,
                k.fingerprint(),
                if wider.keys.iter().any(|w| w.spki == k.spki) {
                    "for more repositories than the operator's policy does"
                } else {
                    "which the operator's policy does not trust"
                }
            )),
            None => Ok(()),
        }
    }

    /// The policy as the admin API shows it: each key with its kind and
    /// fingerprint, whether an operator set it, and why it cannot be read.
    pub fn to_api_json(&self) -> serde_json::Value {
        let mut json = serde_json::json!({
            "requireSignature": self.require_signature,
            "keys": self.keys.iter().map(|k| {
                let mut key = serde_json::json!({
                    "name": k.name,
                    "publicKey": k.pem(),
                    "kind": k.kind(),
                    "fingerprint": k.fingerprint(),
                });
                if !k.scopes.is_empty() {
                    key["scopes"] = serde_json::json!(k.scopes);
                }
                key
            }).collect::<Vec<_>>(),
            "lockedByOperator": self.operator.is_some(),
        });
        if let Some(why) = &self.unreadable {
            json["unreadable"] = serde_json::json!(why);
        }
        json
    }

    /// Whether it trusts any cosign (P-256) key: only then are a pulled
    /// artifact's registry signatures fetched.
    pub fn wants_cosign(&self) -> bool {
        self.keys.iter().any(|k| k.p256().is_some())
    }

    /// Decides on a component: its verified signers, or why it is refused.
    pub fn judge(&self, evidence: &Evidence<'_>) -> Result<Vec<Signer>, Untrusted> {
        if let Some(why) = &self.unreadable {
            return Err(Untrusted {
                expected: Vec::new(),
                found: vec![format!(
                    "a stored trust policy that cannot be read ({why}); every deploy is refused until {} sets the policy again",
                    if self.operator.is_some() { "an operator" } else { "an operator or a publisher" }
                )],
            });
        }
        let mut signers = Vec::new();
        let mut found = Vec::new();
        // A scoped key counts only for what was pulled from its repositories.
        let (keys, elsewhere): (Vec<TrustedKey>, Vec<TrustedKey>) =
            self.keys.iter().cloned().partition(|k| k.covers(evidence.repository.as_deref()));
        let names = |indexes: &[usize]| indexes.iter().map(|i| keys[*i].name.as_str()).collect::<Vec<_>>().join(", ");
        match wasmsig::check(evidence.component, &keys) {
            wasmsig::Embedded::Unsigned => found.push("no signature embedded in the component".to_string()),
            wasmsig::Embedded::Malformed(why) => {
                found.push(format!("an embedded signature that cannot be read ({why})"))
            }
            wasmsig::Embedded::Signed { verified, other_bytes } => {
                signers.extend(verified.iter().map(|i| keys[*i].signer()));
                if !other_bytes.is_empty() {
                    found.push(format!("an embedded signature by {} over other bytes than these", names(&other_bytes)));
                } else if verified.is_empty() {
                    found.push("an embedded signature by a key this policy does not trust".into());
                }
            }
        }
        match &evidence.registry {
            RegistrySignatures::NotPulled => {
                if keys.iter().any(|k| k.p256().is_some()) {
                    found.push("no cosign signature (the component was not pulled from a registry)".into());
                }
            }
            RegistrySignatures::NotFetched => {}
            RegistrySignatures::Unavailable(why) => {
                found.push(format!("cosign signatures that could not be read: {why}"))
            }
            RegistrySignatures::Found { signatures, manifest_digest } => {
                let checked = cosign::check(signatures, manifest_digest, &keys);
                signers.extend(checked.verified.iter().map(|i| keys[*i].signer()));
                if checked.found == 0 {
                    found.push(format!("no cosign signature of {manifest_digest} in the registry"));
                } else if !checked.other_manifest.is_empty() {
                    found.push(format!("a cosign signature by {} of another manifest", names(&checked.other_manifest)));
                } else if checked.verified.is_empty() {
                    found.push(format!("{} cosign signature(s) by keys this policy does not trust", checked.found));
                }
            }
        }
        if !elsewhere.is_empty() {
            let came_from = match &evidence.repository {
                Some(repository) => format!("the component came from `{repository}`"),
                None => "the component was posted, and a scoped key counts only for a pull".into(),
            };
            found.push(format!(
                "keys trusted only for other repositories: {} ({came_from})",
                elsewhere.iter().map(|k| k.name.as_str()).collect::<Vec<_>>().join(", ")
            ));
        }
        if self.require_signature && signers.is_empty() {
            return Err(Untrusted { expected: self.keys.iter().map(TrustedKey::describe).collect(), found });
        }
        Ok(signers)
    }
}

/// What a deploy brings for the policy to judge.
pub struct Evidence<'a> {
    /// The component's bytes (with any embedded signature).
    pub component: &'a [u8],
    /// The `registry/repository` it was pulled from; none for posted bytes.
    pub repository: Option<String>,
    /// The registry's signatures of the artifact it came from.
    pub registry: RegistrySignatures,
}

/// The registry's cosign signatures of a pulled artifact.
#[derive(Debug, Clone)]
pub enum RegistrySignatures {
    /// The component was posted, not pulled.
    NotPulled,
    /// Not looked for: the policy trusts no cosign key.
    NotFetched,
    /// The registry did not answer for them.
    Unavailable(String),
    /// What the registry holds for the manifest (none: no `.sig` tag).
    Found { signatures: Vec<cosign::Found>, manifest_digest: String },
}

/// A deploy the trust policy refuses: which signers it expected and what it found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "this tenant's trust policy requires a signature by one of its keys: {}; found {}",
    .expected.join(", "),
    .found.join("; ")
)]
pub struct Untrusted {
    /// The trusted keys, described.
    pub expected: Vec<String>,
    /// What the component and its registry held.
    pub found: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_read_from_pem_or_wasmsign2_files_and_have_one_fingerprint() {
        let raw = [5u8; 32];
        let from_raw = TrustedKey::parse("a", &base64::engine::general_purpose::STANDARD.encode(raw)).unwrap();
        let mut file = vec![1u8];
        file.extend_from_slice(&raw);
        let from_file = TrustedKey::parse("a", &base64::engine::general_purpose::STANDARD.encode(&file)).unwrap();
        let from_pem = TrustedKey::parse("a", &from_raw.pem()).unwrap();
        assert_eq!(from_raw, from_file);
        assert_eq!(from_raw, from_pem);
        assert_eq!(from_raw.kind(), "wasmsign2");
        assert!(from_raw.fingerprint().starts_with("sha256:") && from_raw.fingerprint().len() == 71);
        // An RSA key (openssl genpkey -algorithm RSA … | openssl pkey -pubout), shortened: refused.
        assert!(
            TrustedKey::parse("r", "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VuAyEA\n-----END PUBLIC KEY-----").is_err()
        );
        assert!(TrustedKey::parse("r", "not base64 !").is_err());
    }

    #[test]
    fn a_required_signature_needs_a_key_and_a_refusal_says_what_was_expected_and_found() {
        let empty = TrustPolicyJson { require_signature: true, keys: vec![] };
        // Stored, it refuses everything, saying why, rather than trusting everything.
        let stored = TrustPolicy::from_stored(r#"{"requireSignature": true, "keys": []}"#);
        let refused = stored
            .judge(&Evidence { component: b"", registry: RegistrySignatures::NotPulled, repository: None })
            .unwrap_err();
        assert!(refused.found[0].contains("must trust at least one key"), "{refused}");
        assert!(TrustPolicy::from_json(&empty).is_err());
        let key = TrustedKey::from_ed25519("release", [3; 32]);
        let policy = TrustPolicy { require_signature: true, keys: vec![key.clone()], unreadable: None, operator: None };
        let refused = policy
            .judge(&Evidence {
                component: b"\0asm\x0d\x00\x01\x00",
                registry: RegistrySignatures::NotPulled,
                repository: None,
            })
            .unwrap_err();
        let message = refused.to_string();
        assert!(message.contains("release (wasmsign2 key sha256:"), "{message}");
        assert!(message.contains("no signature embedded"), "{message}");
        let open = TrustPolicy { require_signature: false, ..policy };
        assert_eq!(
            open.judge(&Evidence { component: b"", registry: RegistrySignatures::NotPulled, repository: None }),
            Ok(vec![])
        );
        // A policy that cannot be read refuses everything, saying why.
        let broken = TrustPolicy::unreadable("bad key".into());
        let refused = broken
            .judge(&Evidence { component: b"", registry: RegistrySignatures::NotPulled, repository: None })
            .unwrap_err();
        assert!(refused.found[0].contains("cannot be read (bad key)"), "{refused}");
    }

    fn stored(policy: &str) -> TrustPolicy {
        TrustPolicy::from_stored(policy)
    }

    fn key_json(name: &str, key: &TrustedKey, scopes: &[&str]) -> serde_json::Value {
        serde_json::json!({"name": name, "publicKey": key.pem(), "scopes": scopes})
    }

    #[test]
    fn a_publisher_policy_may_only_tighten_the_operators() {
        let (a, b) = (TrustedKey::from_ed25519("a", [1; 32]), TrustedKey::from_ed25519("b", [2; 32]));
        let read = |v: serde_json::Value| TrustPolicy::from_json(&serde_json::from_value(v).unwrap()).unwrap();
        let operator = read(serde_json::json!({"requireSignature": true,
            "keys": [key_json("a", &a, &[]), key_json("b", &b, &["r.example/acme/*"])]}));
        // Tighter: fewer keys, narrower scopes, another name for the same key.
        for tighter in [
            serde_json::json!({"requireSignature": true, "keys": [key_json("a", &a, &[])]}),
            serde_json::json!({"requireSignature": true, "keys": [key_json("mine", &a, &["r.example/x"])]}),
            serde_json::json!({"requireSignature": true, "keys": [key_json("b", &b, &["r.example/acme/echo"])]}),
            serde_json::json!({"requireSignature": true, "keys": [key_json("b", &b, &["r.example/acme/tools/*"])]}),
        ] {
            assert_eq!(read(tighter.clone()).at_least_as_strict_as(&operator), Ok(()), "{tighter}");
        }
        // Looser: no signature required, a key added, a scope widened or dropped.
        let c = TrustedKey::from_ed25519("c", [3; 32]);
        for (looser, says) in [
            (serde_json::json!({"requireSignature": false}), "does not require a signature"),
            (
                serde_json::json!({"requireSignature": true, "keys": [key_json("a", &a, &[]), key_json("c", &c, &[])]}),
                "which the operator's policy does not trust",
            ),
            (serde_json::json!({"requireSignature": true, "keys": [key_json("b", &b, &[])]}), "for more repositories"),
            (
                serde_json::json!({"requireSignature": true, "keys": [key_json("b", &b, &["r.example/*"])]}),
                "for more repositories",
            ),
        ] {
            let why = read(looser.clone()).at_least_as_strict_as(&operator).unwrap_err();
            assert!(why.contains(says), "{looser}: {why}");
        }
        // An operator's policy that requires nothing leaves the publisher free.
        let open = read(serde_json::json!({}));
        assert_eq!(read(serde_json::json!({})).at_least_as_strict_as(&open), Ok(()));

        // The operator's policy is stored with the tenant's, and read back.
        let mut set = read(serde_json::json!({"requireSignature": true, "keys": [key_json("a", &a, &[])]}));
        set.operator = Some(Box::new(operator.clone()));
        let text = serde_json::to_string(&set.to_stored()).unwrap();
        assert_eq!(stored(&text), set);
        // A stored operator's policy that does not validate refuses everything.
        let broken = text.replace("r.example/acme/*", "not a scope");
        assert!(stored(&broken).unreadable.is_some(), "{broken}");
    }

    #[test]
    fn a_scoped_key_signs_only_for_its_repositories_and_never_posted_bytes() {
        use ed25519_dalek::SigningKey;
        let vendor = SigningKey::from_bytes(&[7; 32]);
        let key = TrustedKey::from_ed25519("vendor", vendor.verifying_key().to_bytes());
        let policy = TrustPolicy::from_json(
            &serde_json::from_value(serde_json::json!({"requireSignature": true,
                "keys": [key_json("vendor", &key, &["r.example/vendor/*", "other.example:5000/tools/echo"])]}))
            .unwrap(),
        )
        .unwrap();
        let signed = wasmsig::tests::sign(b"\0asm\x0d\x00\x01\x00\x00\x04\x03abc", &vendor);
        let judge = |repository: Option<&str>| {
            policy.judge(&Evidence {
                component: &signed,
                registry: RegistrySignatures::NotFetched,
                repository: repository.map(str::to_string),
            })
        };
        assert_eq!(judge(Some("r.example/vendor/echo")).unwrap()[0].key, "vendor");
        assert_eq!(judge(Some("r.example/vendor/a/b")).unwrap().len(), 1);
        assert_eq!(judge(Some("other.example:5000/tools/echo")).unwrap().len(), 1);
        for elsewhere in
            [Some("r.example/vendorx/echo"), Some("r.example/other/echo"), Some("other.example/tools/echo")]
        {
            let refused = judge(elsewhere).unwrap_err();
            assert!(refused.to_string().contains("keys trusted only for other repositories: vendor"), "{refused}");
        }
        let posted = judge(None).unwrap_err();
        assert!(posted.to_string().contains("the component was posted"), "{posted}");
        // Scopes are checked when set.
        for bad in ["r.example", "r.example/a*", "r.example/A", "r.example/a:1", "*", "r.example/a@sha256:00"] {
            let json = serde_json::json!({"keys": [key_json("k", &key, &[bad])]});
            assert!(TrustPolicy::from_json(&serde_json::from_value(json).unwrap()).is_err(), "{bad}");
        }
    }

    #[test]
    fn outside_text_is_quoted_and_cut() {
        let long = format!("application/x\n{}", "y".repeat(300 << 10));
        let shown = outside_text(&long);
        assert!(shown.len() < 2 * MAX_OUTSIDE_TEXT, "{shown}");
        assert!(shown.starts_with("\"application/x\\n") && shown.ends_with("…\""), "{shown}");
        assert!(!shown.contains('\n'));
        assert_eq!(outside_text("a\"b"), r#""a\"b""#);
    }
}
