//! Property tests of the CHEQ JWS verifier: whatever JSON arrives, [`verify`]
//! answers with a [`VerifyError`] or the exact payload and headers that the
//! trusted keys signed — never a panic, and never a changed payload or a
//! changed claim.

use super::*;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use ed25519_dalek::Signer;
use proptest::prelude::*;
use serde_json::json;
use std::sync::OnceLock;

/// The resource server's key, the confirmation server's, and one nobody trusts.
fn keys() -> &'static [SigningKey; 3] {
    static KEYS: OnceLock<[SigningKey; 3]> = OnceLock::new();
    KEYS.get_or_init(|| [[1u8; 32], [2; 32], [3; 32]].map(|secret| SigningKey::from_bytes(&secret)))
}

fn trusted() -> Vec<Value> {
    let [server, confirmer, _] = keys();
    vec![jwks(&[server]), jwks(&[confirmer])]
}

/// Any JSON value, nested a little, with the strings a JWS is made of.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        any::<String>().prop_map(Value::String),
        "[A-Za-z0-9_=+/-]{0,120}".prop_map(Value::String),
        prop::sample::select(vec!["EdDSA", "none", "HS256", "payload", "signatures", "protected", "signature"])
            .prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec(
                (
                    prop_oneof![
                        prop::sample::select(vec![
                            "payload",
                            "signatures",
                            "protected",
                            "signature",
                            "header",
                            "kid",
                            "alg",
                            "sub",
                        ])
                        .prop_map(str::to_string),
                        any::<String>(),
                    ],
                    inner
                ),
                0..6
            )
            .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// Claims a confirmation server might put in its protected header.
fn claims() -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::vec(("[a-z]{1,8}", json_value()), 0..4).prop_map(|kv| kv.into_iter().collect())
}

/// A JWS signed by the resource server and, when `countersigned`, by the
/// confirmation server too.
fn signed(cheq: &Value, server_claims: Map<String, Value>, user_claims: Option<Map<String, Value>>) -> Value {
    let [server, confirmer, _] = keys();
    let mut jws = sign(cheq, server, server_claims);
    if let Some(claims) = user_claims {
        countersign(&mut jws, confirmer, claims).expect("a fresh JWS has a payload and signatures");
    }
    jws
}

/// Ways to change a signed JWS.
#[derive(Debug, Clone)]
enum Mutation {
    /// Replace one character of a signed string (`payload`, or a
    /// signature's `protected` or `signature`) with another.
    Char { field: usize, at: usize, with: char },
    /// Cut a signed string short.
    Truncate { field: usize, keep: usize },
    /// Append to a signed string.
    Append { field: usize, text: String },
    /// The payload replaced by another CHEQ, properly encoded.
    OtherPayload(Value),
    /// One protected header re-encoded with a claim changed, added or removed.
    Claim { signature: usize, name: String, value: Option<Value> },
    /// Any field of the JWS or of a signature replaced by any value.
    Replace { path: Vec<String>, value: Value },
    /// A signature by a key nobody trusts added.
    Untrusted,
    /// A signature over the same payload by an untrusted key, but naming a
    /// trusted key's id.
    Impersonate { signature: usize },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (0..5usize, any::<usize>(), any::<char>()).prop_map(|(field, at, with)| Mutation::Char { field, at, with }),
        (0..5usize, any::<usize>()).prop_map(|(field, keep)| Mutation::Truncate { field, keep }),
        (0..5usize, "[A-Za-z0-9_=+/-]{1,8}").prop_map(|(field, text)| Mutation::Append { field, text }),
        json_value().prop_map(Mutation::OtherPayload),
        (
            0..2usize,
            prop::sample::select(vec!["alg", "kid", "sub", "decision", "crit", "x"]),
            prop::option::of(json_value())
        )
            .prop_map(|(signature, name, value)| Mutation::Claim { signature, name: name.into(), value }),
        (
            prop::collection::vec(
                prop::sample::select(vec!["payload", "signatures", "0", "1", "protected", "signature", "header"]),
                1..4
            ),
            json_value()
        )
            .prop_map(|(path, value)| Mutation::Replace { path: path.into_iter().map(String::from).collect(), value }),
        Just(Mutation::Untrusted),
        (0..2usize).prop_map(|signature| Mutation::Impersonate { signature }),
    ]
}

/// The signed strings of a JWS, by number: the payload, then `protected`
/// and `signature` of each signature in turn.
fn signed_string(jws: &mut Value, field: usize) -> Option<&mut String> {
    let target = if field == 0 {
        jws.get_mut("payload")
    } else {
        let entry = jws.get_mut("signatures")?.get_mut((field - 1) / 2)?;
        entry.get_mut(if field % 2 == 1 { "protected" } else { "signature" })
    };
    match target? {
        Value::String(s) => Some(s),
        _ => None,
    }
}

fn apply(jws: &mut Value, mutation: &Mutation) {
    let [_, _, untrusted] = keys();
    match mutation {
        Mutation::Char { field, at, with } => {
            if let Some(s) = signed_string(jws, *field) {
                let mut chars: Vec<char> = s.chars().collect();
                if !chars.is_empty() {
                    let at = at % chars.len();
                    chars[at] = *with;
                    *s = chars.into_iter().collect();
                }
            }
        }
        Mutation::Truncate { field, keep } => {
            if let Some(s) = signed_string(jws, *field) {
                let keep = keep % (s.chars().count() + 1);
                *s = s.chars().take(keep).collect();
            }
        }
        Mutation::Append { field, text } => {
            if let Some(s) = signed_string(jws, *field) {
                s.push_str(text);
            }
        }
        Mutation::OtherPayload(cheq) => jws["payload"] = B64.encode(canonical(cheq)).into(),
        Mutation::Claim { signature, name, value } => {
            let Some(Value::String(protected)) = jws.pointer_mut(&format!("/signatures/{signature}/protected")) else {
                return;
            };
            let Ok(mut header) =
                serde_json::from_slice::<Map<String, Value>>(&B64.decode(&*protected).unwrap_or_default())
            else {
                return;
            };
            match value {
                Some(value) => header.insert(name.clone(), value.clone()),
                None => header.remove(name),
            };
            *protected = B64.encode(Value::Object(header).to_string());
        }
        Mutation::Replace { path, value } => {
            let mut target = &mut *jws;
            for step in path {
                let next = match target {
                    Value::Object(map) => map.get_mut(step),
                    Value::Array(items) => step.parse::<usize>().ok().and_then(|i| items.get_mut(i)),
                    _ => None,
                };
                match next {
                    Some(next) => target = next,
                    None => return,
                }
            }
            *target = value.clone();
        }
        Mutation::Untrusted => {
            let _ = countersign(jws, untrusted, Map::new());
        }
        Mutation::Impersonate { signature } => {
            let Some(payload) = jws["payload"].as_str().map(str::to_string) else { return };
            let Some(kid) = jws.pointer(&format!("/signatures/{signature}/protected")).and_then(|p| {
                let header: Value = serde_json::from_slice(&B64.decode(p.as_str()?).ok()?).ok()?;
                header["kid"].as_str().map(str::to_string)
            }) else {
                return;
            };
            // Signed by the untrusted key, labelled with a trusted key's id.
            let header = json!({"alg": "EdDSA", "kid": kid});
            let protected = B64.encode(header.to_string());
            let forged = untrusted.key.sign(format!("{protected}.{payload}").as_bytes());
            if let Some(signatures) = jws["signatures"].as_array_mut() {
                signatures.push(json!({"protected": protected, "signature": B64.encode(forged.to_bytes())}));
            }
        }
    }
}

/// The (`protected`, `signature`) pairs of a JWS.
fn signature_pairs(jws: &Value) -> Vec<(Value, Value)> {
    jws["signatures"]
        .as_array()
        .map(|entries| entries.iter().map(|e| (e["protected"].clone(), e["signature"].clone())).collect())
        .unwrap_or_default()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// No JSON at all gets through without a valid signature.
    #[test]
    fn any_json_is_refused(jws in json_value()) {
        let refused = verify(&jws, &trusted());
        prop_assert!(refused.is_err());
        prop_assert!(!refused.unwrap_err().to_string().trim().is_empty());
    }

    /// JWS-shaped garbage: the right fields, anything in them.
    #[test]
    fn any_jws_shape_is_refused(
        payload in json_value(),
        entries in prop::collection::vec((json_value(), json_value(), json_value()), 0..4),
    ) {
        let signatures: Vec<Value> = entries
            .into_iter()
            .map(|(protected, signature, header)| {
                json!({"protected": protected, "signature": signature, "header": header})
            })
            .collect();
        let refused = verify(&json!({"payload": payload, "signatures": signatures}), &trusted());
        prop_assert!(refused.is_err());
    }

    /// Whatever the trusted key sets hold, a JWS is verified or refused
    /// without a panic.
    #[test]
    fn any_key_set_is_handled(sets in prop::collection::vec(json_value(), 0..3), cheq in json_value()) {
        let jws = signed(&cheq, Map::new(), Some(Map::new()));
        let _ = verify(&jws, &sets);
    }

    /// Copies of a valid signature buy no work: past [`MAX_SIGNATURES`]
    /// the JWS is refused before any signature is verified.
    #[test]
    fn copies_of_a_signature_are_refused_past_the_limit(copies in 0..40usize, countersigned in any::<bool>()) {
        let mut jws = signed(&json!({"version": 1.0}), Map::new(), countersigned.then(Map::new));
        let entry = jws["signatures"][0].clone();
        let signatures = jws["signatures"].as_array_mut().expect("signatures");
        signatures.extend(std::iter::repeat_n(entry, copies));
        let total = signatures.len();
        match verify(&jws, &trusted()) {
            Ok((_, verified)) => prop_assert!(total <= MAX_SIGNATURES && verified.len() == total),
            Err(e) => {
                prop_assert!(total > MAX_SIGNATURES, "{} signatures refused: {}", total, e);
                prop_assert_eq!(&e, &VerifyError::TooManySignatures(total));
                let limit = format!("more than {MAX_SIGNATURES} signatures are refused");
                prop_assert!(e.to_string().contains(&limit), "{}", e);
            }
        }
    }

    /// The security property: a signed CHEQ changed in any way verifies only
    /// if the payload and every signed header are exactly what the trusted
    /// keys signed. A changed payload, protected header or signature is
    /// always refused.
    #[test]
    fn a_changed_jws_is_refused(
        cheq in json_value(),
        server_claims in claims(),
        user_claims in prop::option::of(claims()),
        mutations in prop::collection::vec(mutation(), 1..3),
    ) {
        let original = signed(&cheq, server_claims, user_claims);
        let (payload, headers) = verify(&original, &trusted()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&payload, &canonical(&cheq));

        let mut jws = original.clone();
        for m in &mutations {
            apply(&mut jws, m);
        }
        let outcome = verify(&jws, &trusted());
        let payload_changed = jws.get("payload") != original.get("payload");
        let originals = signature_pairs(&original);
        let any_signature_changed = signature_pairs(&jws).iter().any(|pair| !originals.contains(pair));
        if payload_changed || any_signature_changed {
            prop_assert!(outcome.is_err(), "a changed JWS verified: {}", jws);
        }
        match outcome {
            Ok((verified_payload, verified)) => {
                prop_assert_eq!(verified_payload, payload);
                for signed in &verified {
                    prop_assert!(
                        headers.iter().any(|h| h.kid == signed.kid && h.header == signed.header),
                        "a header that was never signed verified: {:?}", signed.header
                    );
                }
            }
            Err(e) => prop_assert!(!e.to_string().trim().is_empty()),
        }
    }
}

/// A condition with a syntax error past column 65 535 made the CEL parser
/// panic while rendering its error; such a condition is refused (by its
/// length, before it is parsed) with a message, not a panic.
#[test]
fn a_condition_too_long_to_parse_is_refused() {
    let policy = ConfirmationPolicy { required: false, when: Some(format!("{})", "d".repeat(70_000))) };
    let err = policy.check(&[]).unwrap_err().to_string();
    assert!(err.contains("70001") && err.contains("at most"), "{err}");
}

/// Too many signatures are refused before any is verified:
/// `MAX_SIGNATURES + 1` forged ones say "too many", not "forged".
#[test]
fn too_many_signatures_are_refused_before_verifying() {
    let mut jws = signed(&json!({"version": 1.0}), Map::new(), None);
    let [server, _, _] = keys();
    let header = B64.encode(json!({"alg": "EdDSA", "kid": server.kid()}).to_string());
    let forged = json!({"protected": header, "signature": B64.encode([0u8; 64])});
    jws["signatures"] = Value::Array(vec![forged; MAX_SIGNATURES + 1]);
    let refused = verify(&jws, &trusted()).unwrap_err();
    assert_eq!(refused, VerifyError::TooManySignatures(MAX_SIGNATURES + 1));
    assert!(refused.to_string().contains(&format!("more than {MAX_SIGNATURES} signatures")), "{refused}");
    jws["signatures"].as_array_mut().unwrap().pop();
    assert_eq!(verify(&jws, &trusted()).unwrap_err(), VerifyError::BadSignature(server.kid().into()));
}
