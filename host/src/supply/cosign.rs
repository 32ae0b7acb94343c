//! cosign signatures stored next to an artifact, in the format cosign 2
//! writes with a key (`cosign sign --key`), and cosign 3 with
//! `--new-bundle-format=false`: a manifest tagged `sha256-<hex>.sig` in the
//! same repository, one layer per signature, each layer a "simple signing"
//! JSON payload naming the signed manifest's digest, with an ECDSA P-256
//! signature of the payload in the layer's annotation
//! `dev.cosignproject.cosign/signature`.
//!
//! Verified with `ring` (already in the build through rustls) rather than
//! the `sigstore` crate, which would bring a second HTTP stack and TLS
//! library into the server. Keyless signatures (Fulcio certificates, Rekor
//! entries) are not verified: see docs/security.md.

use super::TrustedKey;
use base64::Engine;
use serde_json::Value;

/// The media type of a signature layer.
pub const SIMPLE_SIGNING: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The annotation that holds a layer's signature.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The payload type cosign writes.
const PAYLOAD_TYPE: &str = "cosign container image signature";

/// One signature found in the registry.
#[derive(Debug, Clone)]
pub struct Found {
    /// The payload bytes, exactly as signed.
    pub payload: Vec<u8>,
    /// The annotation's value: base64 of an ASN.1 DER ECDSA signature.
    pub signature: String,
}

/// What the registry's signatures say about the trusted keys.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Checked {
    /// Trusted keys (their index) that signed this manifest.
    pub verified: Vec<usize>,
    /// Trusted keys that signed a payload naming another manifest (a
    /// signature copied from another artifact).
    pub other_manifest: Vec<usize>,
    /// Signatures found in all.
    pub found: usize,
}

/// Checks `found` against the P-256 keys among `keys`, for the manifest
/// whose digest is `manifest_digest`.
pub fn check(found: &[Found], manifest_digest: &str, keys: &[TrustedKey]) -> Checked {
    let mut checked = Checked { found: found.len(), ..Checked::default() };
    for signature in found {
        let Ok(der) = base64::engine::general_purpose::STANDARD.decode(signature.signature.trim()) else { continue };
        for (index, key) in keys.iter().enumerate() {
            let Some(point) = key.p256() else { continue };
            let public = ring::signature::UnparsedPublicKey::new(&ring::signature::ECDSA_P256_SHA256_ASN1, point);
            if public.verify(&signature.payload, &der).is_err() {
                continue;
            }
            let names_this = serde_json::from_slice::<Value>(&signature.payload).is_ok_and(|p| {
                p["critical"]["type"] == PAYLOAD_TYPE
                    && p["critical"]["image"]["docker-manifest-digest"] == manifest_digest
            });
            let list = if names_this { &mut checked.verified } else { &mut checked.other_manifest };
            if !list.contains(&index) {
                list.push(index);
            }
        }
    }
    checked.other_manifest.retain(|i| !checked.verified.contains(i));
    checked
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::rand::SystemRandom;
    use ring::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair};

    fn key_pair() -> EcdsaKeyPair {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng).unwrap();
        EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8.as_ref(), &rng).unwrap()
    }

    fn signed(pair: &EcdsaKeyPair, digest: &str) -> Found {
        let payload = serde_json::to_vec(&serde_json::json!({
            "critical": {"identity": {"docker-reference": "r/x"}, "image": {"docker-manifest-digest": digest}, "type": PAYLOAD_TYPE},
            "optional": null
        }))
        .unwrap();
        let signature = pair.sign(&SystemRandom::new(), &payload).unwrap();
        Found { payload, signature: base64::engine::general_purpose::STANDARD.encode(signature.as_ref()) }
    }

    #[test]
    fn a_signature_counts_for_its_key_and_the_manifest_it_names() {
        let (vendor, other) = (key_pair(), key_pair());
        let keys = [
            TrustedKey::from_p256("other", other.public_key().as_ref().try_into().unwrap()),
            TrustedKey::from_p256("vendor", vendor.public_key().as_ref().try_into().unwrap()),
        ];
        let digest = format!("sha256:{}", "a".repeat(64));
        let found = [signed(&vendor, &digest)];
        assert_eq!(check(&found, &digest, &keys).verified, [1]);
        let elsewhere = check(&found, &format!("sha256:{}", "b".repeat(64)), &keys);
        assert_eq!((elsewhere.verified.len(), elsewhere.other_manifest.as_slice()), (0, &[1][..]));
        assert_eq!(check(&found, &digest, &keys[..1]), Checked { found: 1, ..Checked::default() });
        let mut tampered = found[0].clone();
        tampered.payload[10] ^= 1;
        assert!(check(&[tampered], &digest, &keys).verified.is_empty());
    }
}
