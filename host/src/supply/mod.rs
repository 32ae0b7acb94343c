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
}

impl TrustedKey {
    /// An Ed25519 key (signs components, with `wasmsign2`).
    pub fn from_ed25519(name: &str, key: [u8; 32]) -> TrustedKey {
        TrustedKey { name: name.to_string(), spki: [&ED25519_SPKI[..], &key].concat() }
    }

    /// An ECDSA P-256 key (signs registry artifacts, with cosign): `point`
    /// is the uncompressed point.
    pub fn from_p256(name: &str, point: [u8; 65]) -> TrustedKey {
        TrustedKey { name: name.to_string(), spki: [&P256_SPKI[..], &point].concat() }
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
        let key = TrustedKey { name: name.to_string(), spki: der };
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
        format!("{} ({} key {})", self.name, self.kind(), self.fingerprint())
    }
}

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
            keys.push(TrustedKey::parse(&k.name, &k.public_key)?);
        }
        if json.require_signature && keys.is_empty() {
            return Err("a policy that requires a signature must trust at least one key".into());
        }
        Ok(TrustPolicy { require_signature: json.require_signature, keys, unreadable: None })
    }

    /// The policy of a tenant whose stored policy cannot be read: it
    /// refuses every deploy, saying why, rather than trusting everything.
    pub fn unreadable(why: String) -> TrustPolicy {
        TrustPolicy { require_signature: true, keys: Vec::new(), unreadable: Some(why) }
    }

    /// The stored form.
    pub fn to_json(&self) -> TrustPolicyJson {
        TrustPolicyJson {
            require_signature: self.require_signature,
            keys: self.keys.iter().map(|k| TrustedKeyJson { name: k.name.clone(), public_key: k.pem() }).collect(),
        }
    }

    /// The policy as the admin API shows it: each key with its kind and fingerprint.
    pub fn to_api_json(&self) -> serde_json::Value {
        serde_json::json!({
            "requireSignature": self.require_signature,
            "keys": self.keys.iter().map(|k| serde_json::json!({
                "name": k.name,
                "publicKey": k.pem(),
                "kind": k.kind(),
                "fingerprint": k.fingerprint(),
            })).collect::<Vec<_>>(),
        })
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
                    "a stored trust policy that cannot be read ({why}); every deploy is refused until an operator or publisher sets the policy again"
                )],
            });
        }
        let mut signers = Vec::new();
        let mut found = Vec::new();
        let names =
            |indexes: &[usize]| indexes.iter().map(|i| self.keys[*i].name.as_str()).collect::<Vec<_>>().join(", ");
        match wasmsig::check(evidence.component, &self.keys) {
            wasmsig::Embedded::Unsigned => found.push("no signature embedded in the component".to_string()),
            wasmsig::Embedded::Malformed(why) => {
                found.push(format!("an embedded signature that cannot be read ({why})"))
            }
            wasmsig::Embedded::Signed { verified, other_bytes } => {
                signers.extend(verified.iter().map(|i| self.keys[*i].signer()));
                if !other_bytes.is_empty() {
                    found.push(format!("an embedded signature by {} over other bytes than these", names(&other_bytes)));
                } else if verified.is_empty() {
                    found.push("an embedded signature by a key this policy does not trust".into());
                }
            }
        }
        match &evidence.registry {
            RegistrySignatures::NotPulled => {
                if self.wants_cosign() {
                    found.push("no cosign signature (the component was not pulled from a registry)".into());
                }
            }
            RegistrySignatures::NotFetched => {}
            RegistrySignatures::Unavailable(why) => {
                found.push(format!("cosign signatures that could not be read: {why}"))
            }
            RegistrySignatures::Found { signatures, manifest_digest } => {
                let checked = cosign::check(signatures, manifest_digest, &self.keys);
                signers.extend(checked.verified.iter().map(|i| self.keys[*i].signer()));
                if checked.found == 0 {
                    found.push(format!("no cosign signature of {manifest_digest} in the registry"));
                } else if !checked.other_manifest.is_empty() {
                    found.push(format!("a cosign signature by {} of another manifest", names(&checked.other_manifest)));
                } else if checked.verified.is_empty() {
                    found.push(format!("{} cosign signature(s) by keys this policy does not trust", checked.found));
                }
            }
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
        assert!(TrustPolicy::from_json(&empty).is_err());
        let key = TrustedKey::from_ed25519("release", [3; 32]);
        let policy = TrustPolicy { require_signature: true, keys: vec![key.clone()], unreadable: None };
        let refused = policy
            .judge(&Evidence { component: b"\0asm\x0d\x00\x01\x00", registry: RegistrySignatures::NotPulled })
            .unwrap_err();
        let message = refused.to_string();
        assert!(message.contains("release (wasmsign2 key sha256:"), "{message}");
        assert!(message.contains("no signature embedded"), "{message}");
        let open = TrustPolicy { require_signature: false, ..policy };
        assert_eq!(open.judge(&Evidence { component: b"", registry: RegistrySignatures::NotPulled }), Ok(vec![]));
        // A policy that cannot be read refuses everything, saying why.
        let broken = TrustPolicy::unreadable("bad key".into());
        let refused = broken.judge(&Evidence { component: b"", registry: RegistrySignatures::NotPulled }).unwrap_err();
        assert!(refused.found[0].contains("cannot be read (bad key)"), "{refused}");
    }
}
