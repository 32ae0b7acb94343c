//! Signatures a deploy or a pull weighs: the `signature` section
//! `wasmsign2` embeds in a component (our own reader), cosign's simple
//! signing payloads and signatures found beside an artifact, the trust
//! policies (PEM and wasmsign2 public keys) a tenant sets, and registry
//! references.
//!
//! The first byte picks what the rest feeds. Properties beyond "no panic":
//! - wasmsig: a component this target signs with its key verifies for that
//!   key and no other; the same signature over bytes changed after it
//!   never verifies.
//! - cosign: a payload this target signs verifies exactly when it is a
//!   simple-signing payload naming the manifest's digest (else it counts as
//!   another manifest's); a signature it did not make never verifies.
//! - trust policies: what is accepted reads back the same through its JSON.
#![no_main]

use arbitrary::{Result, Unstructured};
use base64::Engine;
use ed25519_dalek::{Signer, SigningKey};
use libfuzzer_sys::fuzz_target;
use plinth::supply::reference::Reference;
use plinth::supply::{TrustPolicy, TrustPolicyJson, TrustedKey, cosign, wasmsig};
use ring::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair};
use sha2::{Digest, Sha256};
use std::sync::OnceLock;

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else { return };
    let _ = match which % 5 {
        0 => {
            embedded_as_is(rest);
            Ok(())
        }
        1 => embedded_signed(&mut Unstructured::new(rest)),
        2 => registry_signatures(&mut Unstructured::new(rest)),
        3 => {
            trust_policy(rest);
            Ok(())
        }
        _ => {
            reference(rest);
            Ok(())
        }
    };
});

fn ed25519() -> &'static SigningKey {
    static KEY: OnceLock<SigningKey> = OnceLock::new();
    KEY.get_or_init(|| SigningKey::from_bytes(&[7; 32]))
}

fn p256() -> &'static EcdsaKeyPair {
    static KEY: OnceLock<EcdsaKeyPair> = OnceLock::new();
    KEY.get_or_init(|| {
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng).unwrap();
        EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8.as_ref(), &rng).unwrap()
    })
}

/// Key 0 is ours; key 1 is another Ed25519 key; key 2 our P-256 key.
fn keys() -> Vec<TrustedKey> {
    let point: [u8; 65] = p256().public_key().as_ref().try_into().unwrap();
    vec![
        TrustedKey::from_ed25519("ours", ed25519().verifying_key().to_bytes()),
        TrustedKey::from_ed25519("theirs", SigningKey::from_bytes(&[9; 32]).verifying_key().to_bytes()),
        TrustedKey::from_p256("cosign", point),
    ]
}

fn embedded_as_is(component: &[u8]) {
    match wasmsig::check(component, &keys()) {
        wasmsig::Embedded::Signed { verified, other_bytes } => {
            assert!(!verified.contains(&1) && !verified.contains(&2), "a key that signed nothing verified");
            assert!(verified.iter().chain(&other_bytes).all(|i| *i < 3));
        }
        wasmsig::Embedded::Malformed(why) => assert!(!why.is_empty()),
        wasmsig::Embedded::Unsigned => {}
    }
}

fn leb(out: &mut Vec<u8>, mut n: usize) {
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// Signs like `wasmsign2` (whole component, SHA-256, Ed25519).
fn sign(component: &[u8], key: &SigningKey) -> Vec<u8> {
    let rest = &component[8..];
    let hash: [u8; 32] = Sha256::digest(rest).into();
    let mut message = b"wasmsig\x01\x01\x01".to_vec();
    message.extend_from_slice(&hash);
    let signature = key.sign(&message).to_bytes();
    let mut entry = vec![0u8, 1, 64];
    entry.extend_from_slice(&signature);
    let mut set = vec![1u8];
    set.extend_from_slice(&hash);
    set.push(1);
    leb(&mut set, entry.len());
    set.extend_from_slice(&entry);
    let mut section = vec![9u8];
    section.extend_from_slice(b"signature");
    section.extend_from_slice(&[1, 1, 1, 1]);
    leb(&mut section, set.len());
    section.extend_from_slice(&set);
    let mut out = component[..8].to_vec();
    out.push(0);
    leb(&mut out, section.len());
    out.extend_from_slice(&section);
    out.extend_from_slice(rest);
    out
}

fn embedded_signed(u: &mut Unstructured) -> Result<()> {
    let mut component = b"\0asm\x0d\x00\x01\x00".to_vec();
    let n = u.int_in_range(0..=64)?;
    component.extend_from_slice(u.bytes(n)?);
    let signed = sign(&component, ed25519());
    let keys = keys();
    match wasmsig::check(&signed, &keys) {
        wasmsig::Embedded::Signed { verified, other_bytes } => {
            assert_eq!(verified, [0], "our signature did not verify for exactly our key");
            assert!(other_bytes.is_empty());
        }
        other => panic!("a signed component read as {other:?}"),
    }
    // Changed after signing: the section is intact, the bytes are not.
    let section_end = signed.len() - (component.len() - 8);
    if signed.len() > section_end {
        let mut changed = signed.clone();
        let at = u.int_in_range(section_end..=changed.len() - 1)?;
        let flip: u8 = u.int_in_range(1..=255)?;
        changed[at] ^= flip;
        if let wasmsig::Embedded::Signed { verified, .. } = wasmsig::check(&changed, &keys) {
            assert!(verified.is_empty(), "a signature verified for bytes changed after signing");
        }
    }
    // Changed anywhere (the section too): never a panic, never a key that
    // did not sign.
    let mut changed = signed;
    let at = u.choose_index(changed.len())?;
    changed[at] = u.arbitrary()?;
    embedded_as_is(&changed);
    Ok(())
}

const PAYLOAD_TYPE: &str = "cosign container image signature";

fn registry_signatures(u: &mut Unstructured) -> Result<()> {
    let digest = format!("sha256:{}", hex::encode(Sha256::digest(u.bytes(4)?)));
    let mut found = Vec::new();
    let mut ours = Vec::new();
    for _ in 0..u.int_in_range(0..=3)? {
        let payload: Vec<u8> = match u.int_in_range(0..=3)? {
            0 => u.arbitrary()?,
            1 => serde_json::to_vec(&serde_json::json!({
                "critical": {
                    "identity": {"docker-reference": "registry.example/tools/echo"},
                    "image": {"docker-manifest-digest": digest},
                    "type": PAYLOAD_TYPE,
                },
                "optional": null,
            }))
            .unwrap(),
            2 => serde_json::to_vec(&serde_json::json!({
                "critical": {
                    "image": {"docker-manifest-digest": if u.arbitrary()? { digest.clone() } else { u.arbitrary()? }},
                    "type": if u.arbitrary()? { PAYLOAD_TYPE.to_string() } else { u.arbitrary()? },
                },
            }))
            .unwrap(),
            _ => serde_json::to_vec(&serde_json::json!({ "critical": u.arbitrary::<String>()? })).unwrap(),
        };
        let signed_by_us = u.arbitrary()?;
        let signature = if signed_by_us {
            let rng = ring::rand::SystemRandom::new();
            let sig = p256().sign(&rng, &payload).unwrap();
            let mut text = base64::engine::general_purpose::STANDARD.encode(sig.as_ref());
            if u.ratio(1, 8)? {
                text = format!(" {text}\n");
            }
            text
        } else {
            u.arbitrary()?
        };
        let names_this = serde_json::from_slice::<serde_json::Value>(&payload).is_ok_and(|p| {
            p["critical"]["type"] == PAYLOAD_TYPE && p["critical"]["image"]["docker-manifest-digest"] == digest.as_str()
        });
        if signed_by_us {
            ours.push(names_this);
        }
        found.push(cosign::Found { payload, signature });
    }
    let checked = cosign::check(&found, &digest, &keys());
    assert_eq!(checked.found, found.len());
    let verified = ours.iter().any(|n| *n);
    let other = !verified && ours.iter().any(|n| !n);
    assert_eq!(checked.verified == [2], verified, "{checked:?}");
    assert_eq!(checked.other_manifest == [2], other, "{checked:?}");
    assert!(checked.verified.len() <= 1 && checked.other_manifest.len() <= 1, "{checked:?}");
    Ok(())
}

fn trust_policy(bytes: &[u8]) {
    let Ok(json) = serde_json::from_slice::<TrustPolicyJson>(bytes) else { return };
    let Ok(policy) = TrustPolicy::from_json(&json) else { return };
    let again = policy.to_json();
    let back = TrustPolicy::from_json(&again).unwrap_or_else(|e| panic!("an accepted policy reads back refused: {e}"));
    assert_eq!(
        serde_json::to_value(back.to_json()).unwrap(),
        serde_json::to_value(&again).unwrap(),
        "a policy changed through its JSON"
    );
    // Stored as text, read back at start (a policy that cannot be read
    // refuses, never allows).
    let stored = serde_json::to_string(&again).unwrap();
    let _ = TrustPolicy::from_stored(&stored);
    let _ = TrustPolicy::from_stored(&String::from_utf8_lossy(bytes));
}

fn reference(bytes: &[u8]) {
    let Ok(text) = std::str::from_utf8(bytes) else { return };
    if let Ok(reference) = Reference::parse(text) {
        let shown = reference.to_string();
        let again = Reference::parse(&shown).unwrap_or_else(|e| panic!("`{shown}` (from `{text}`) is refused: {e}"));
        assert_eq!(again.to_string(), shown);
        let _ = reference.manifest_name();
        let _ = reference.host();
    }
}
