//! What outside identity parties send: an external issuer's JWT access
//! tokens and its key set (JWKS), OAuth clients' metadata (registered, or
//! a Client ID Metadata Document fetched from the client's URL), redirect
//! URIs, and signed CHEQs from confirmation servers.
//!
//! The first byte picks what the rest feeds. Properties beyond "no panic":
//! - a token this target did not sign never grants anything, whatever the
//!   key set; one it signed (Ed25519, beside arbitrary other keys) grants
//!   exactly when its claims are right (issuer, audience, time, end user),
//!   and only for the resource asked;
//! - accepted client metadata holds only sound redirect URIs (1 to 16) and
//!   a printable name of at most 100 characters;
//! - a signed CHEQ verifies only against the key that signed it.
#![no_main]

use arbitrary::{Result, Unstructured};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use ed25519_dalek::{Signer, SigningKey};
use libfuzzer_sys::fuzz_target;
use plinth::host::is_end_user_name;
use plinth::host::oauth::{OAuthSetting, fuzzing, redirect_matches};
use serde_json::{Value, json};

const ISSUER: &str = "https://id.example.com";
const RESOURCE: &str = "https://tools.example.com/t/acme/mcp";
const NOW: i64 = 1_900_000_000;

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else { return };
    let mut u = Unstructured::new(rest);
    let _ = match which % 5 {
        0 => raw_token(rest),
        1 => signed_token(&mut u),
        2 => client_metadata(rest),
        3 => redirects(&mut u),
        _ => cheq(rest),
    };
});

fn key() -> SigningKey {
    SigningKey::from_bytes(&[3; 32])
}

fn our_jwk() -> Value {
    json!({ "kty": "OKP", "crv": "Ed25519", "kid": "k1", "alg": "EdDSA", "x": B64.encode(key().verifying_key().to_bytes()) })
}

/// Any bytes as the bearer, any bytes as the key set (split at a 0 byte):
/// nothing this target did not sign may grant.
fn raw_token(data: &[u8]) -> Result<()> {
    let (token, jwks) = match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &b"{}"[..]),
    };
    let token = String::from_utf8_lossy(token);
    let mut jwks: Value = serde_json::from_slice(jwks).unwrap_or(Value::Null);
    let setting = OAuthSetting { issuer: Some(ISSUER.into()), ..Default::default() };
    if let Ok(grant) = fuzzing::external_token(&setting, ISSUER, &token, &jwks, RESOURCE, NOW) {
        panic!("a token nobody signed granted {grant:?}");
    }
    if let Some(keys) = jwks.get_mut("keys").and_then(Value::as_array_mut) {
        keys.push(our_jwk());
        if let Ok(grant) = fuzzing::external_token(&setting, ISSUER, &token, &jwks, RESOURCE, NOW) {
            panic!("a token nobody signed granted {grant:?}");
        }
    }
    Ok(())
}

fn any_json(u: &mut Unstructured, depth: u32) -> Result<Value> {
    let top = if depth == 0 { 4 } else { 6 };
    Ok(match u.int_in_range(0..=top)? {
        0 => Value::Null,
        1 => Value::Bool(u.arbitrary()?),
        2 => Value::from(u.arbitrary::<i64>()?),
        3 => Value::String(u.arbitrary()?),
        4 => serde_json::Number::from_f64(u.arbitrary()?).map_or(Value::Null, Value::Number),
        5 => Value::Array((0..u.int_in_range(0..=3)?).map(|_| any_json(u, depth - 1)).collect::<Result<_>>()?),
        _ => {
            let mut map = serde_json::Map::new();
            for _ in 0..u.int_in_range(0..=3)? {
                map.insert(u.arbitrary()?, any_json(u, depth - 1)?);
            }
            Value::Object(map)
        }
    })
}

/// A claim: right, wrong, or anything.
fn pick(u: &mut Unstructured, right: Value, wrong: Value) -> Result<Option<Value>> {
    Ok(match u.int_in_range(0..=7)? {
        0 => None,
        1 => Some(wrong),
        2 => Some(any_json(u, 1)?),
        _ => Some(right),
    })
}

fn signed_token(u: &mut Unstructured) -> Result<()> {
    let mut claims = serde_json::Map::new();
    let mut put = |name: &str, value: Option<Value>| {
        if let Some(value) = value {
            claims.insert(name.into(), value);
        }
    };
    let right_exp = NOW + u.int_in_range(-59..=7200)?;
    let wrong_exp = NOW - u.int_in_range(60..=100_000)?;
    let right_nbf = NOW + u.int_in_range(-100_000..=59)?;
    let wrong_nbf = NOW + u.int_in_range(61..=100_000)?;
    let sub: String = u.arbitrary()?;
    let jti: String = u.arbitrary()?;
    let aud = if u.arbitrary()? { json!(RESOURCE) } else { json!(["https://other.example", RESOURCE]) };
    put("iss", pick(u, json!(ISSUER), json!(format!("{ISSUER}/")))?);
    put("aud", pick(u, aud, json!("https://tools.example.com/t/other/mcp"))?);
    // The ends of i64 too: an issuer's numbers are any numbers.
    let edge = |u: &mut Unstructured| -> Result<Value> {
        Ok(json!(*u.choose(&[i64::MAX, i64::MIN, i64::MAX - 59, i64::MIN + 59, NOW - 60, NOW + 60, NOW - 61, NOW + 61])?))
    };
    let exp = if u.ratio(1, 8)? { Some(edge(u)?) } else { pick(u, json!(right_exp), json!(wrong_exp))? };
    let nbf = if u.ratio(1, 8)? { Some(edge(u)?) } else { pick(u, json!(right_nbf), json!(wrong_nbf))? };
    put("exp", exp);
    put("nbf", nbf);
    put("sub", pick(u, json!(sub), json!(""))?);
    put("scope", pick(u, json!("tools:call tools:read other"), json!(["tools:read"]))?);
    put("jti", pick(u, json!(jti), json!(7))?);
    let typ = match u.int_in_range(0..=4)? {
        0 => None,
        1 => Some("JWT".to_string()),
        2 => Some(u.arbitrary()?),
        _ => Some("at+jwt".to_string()),
    };
    let mut header = json!({ "alg": "EdDSA", "kid": "k1" });
    if let Some(typ) = &typ {
        header["typ"] = json!(typ);
    }
    if u.ratio(1, 8)? {
        header["kid"] = json!(u.arbitrary::<String>()?);
    }
    let claims = Value::Object(claims);
    let signed = format!(
        "{}.{}",
        B64.encode(serde_json::to_vec(&header).unwrap()),
        B64.encode(serde_json::to_vec(&claims).unwrap())
    );
    let signature = key().sign(signed.as_bytes()).to_bytes();
    let mut token = format!("{signed}.{}", B64.encode(signature));
    let tampered = u.ratio(1, 6)?;
    if tampered {
        // A claim changed after signing, the signature kept.
        let forged = json!({ "sub": "admin", "iss": ISSUER, "aud": RESOURCE, "exp": NOW + 60 });
        let parts: Vec<&str> = token.split('.').collect();
        token = format!("{}.{}.{}", parts[0], B64.encode(serde_json::to_vec(&forged).unwrap()), parts[2]);
    }
    // Our key among arbitrary others (a key set's shape is the issuer's).
    let mut keys: Vec<Value> = (0..u.int_in_range(0..=3)?).map(|_| any_json(u, 2)).collect::<Result<_>>()?;
    let at = u.int_in_range(0..=keys.len())?;
    keys.insert(at, our_jwk());
    let jwks = json!({ "keys": keys });
    let setting = OAuthSetting { issuer: Some(ISSUER.into()), ..Default::default() };
    let outcome = fuzzing::external_token(&setting, ISSUER, &token, &jwks, RESOURCE, NOW);

    let c = &claims;
    let should = !tampered
        && typ.as_deref().is_none_or(|t| t.eq_ignore_ascii_case("at+jwt") || t.eq_ignore_ascii_case("application/at+jwt"))
        && header["kid"] == "k1"
        && c["iss"] == ISSUER
        && (c["aud"] == RESOURCE || c["aud"].as_array().is_some_and(|a| a.iter().any(|x| x == RESOURCE)))
        && c["exp"].as_i64().is_some_and(|exp| i128::from(exp) + 60 > i128::from(NOW))
        && c["nbf"].as_i64().is_none_or(|nbf| i128::from(nbf) - 60 <= i128::from(NOW))
        && c["sub"].as_str().is_some_and(is_end_user_name);
    match outcome {
        Ok(grant) => {
            assert!(should, "granted {grant:?} for {claims} {header}");
            assert_eq!(grant.resource, RESOURCE);
            assert_eq!(Some(grant.end_user.as_str()), c["sub"].as_str());
            assert!(grant.scopes.iter().all(|s| s == "tools:read" || s == "tools:call"));
        }
        Err(why) => assert!(!should, "refused ({why}) {claims} {header}"),
    }
    Ok(())
}

fn client_metadata(data: &[u8]) -> Result<()> {
    let Ok(metadata) = serde_json::from_slice::<Value>(data) else { return Ok(()) };
    let client_id = metadata["client_id"].as_str().unwrap_or("https://app.example/client.json").to_string();
    for document in [true, false] {
        match fuzzing::client_metadata(&client_id, &metadata, document) {
            Ok(client) => {
                assert!((1..=16).contains(&client.redirect_uris.len()));
                assert!(client.redirect_uris.iter().all(|u| fuzzing::sound_redirect(u)));
                assert!(client.name.chars().count() <= 100 && !client.name.chars().any(char::is_control));
                assert_eq!(client.metadata_document, document);
                // A redirect is to one of the client's own URIs.
                for uri in &client.redirect_uris {
                    assert!(redirect_matches(&client.redirect_uris, uri));
                }
            }
            Err(e) => assert!(!e.to_string().is_empty() || !format!("{e:?}").is_empty()),
        }
    }
    Ok(())
}

fn redirects(u: &mut Unstructured) -> Result<()> {
    let registered: Vec<String> = (0..u.int_in_range(0..=3)?).map(|_| uri(u)).collect::<Result<_>>()?;
    let given = uri(u)?;
    if redirect_matches(&registered, &given) {
        // Only a registered URI, or a loopback one on another port.
        let loopback = given.starts_with("http://127.0.0.1") || given.starts_with("http://[::1]") || given.starts_with("http://localhost");
        assert!(registered.contains(&given) || loopback, "{given} matched {registered:?}");
    }
    let _ = fuzzing::sound_redirect(&given);
    Ok(())
}

fn uri(u: &mut Unstructured) -> Result<String> {
    const STARTS: &[&str] =
        &["https://app.example/cb", "http://127.0.0.1:", "http://localhost", "http://[::1]:8", "com.example.app:/", "javascript:", "cursor://x/", ""];
    Ok(format!("{}{}", STARTS[u.choose_index(STARTS.len())?], u.arbitrary::<String>()?))
}

fn cheq(data: &[u8]) -> Result<()> {
    let signing = plinth::cheq::SigningKey::from_bytes(&[5; 32]);
    let trusted = plinth::cheq::jwks(&[&signing]);
    if let Ok(jws) = plinth::cheq::from_wire(data) {
        // Nothing this target did not sign verifies against its key.
        if let Ok((payload, _)) = plinth::cheq::verify(&jws, std::slice::from_ref(&trusted)) {
            panic!("a CHEQ this target did not sign verified: {}", String::from_utf8_lossy(&payload));
        }
    }
    // A CHEQ we sign verifies; with its payload changed it does not.
    let Ok(cheq) = serde_json::from_slice::<Value>(data) else { return Ok(()) };
    let jws = plinth::cheq::sign(&cheq, &signing, serde_json::Map::new());
    let (payload, signed) = plinth::cheq::verify(&jws, std::slice::from_ref(&trusted)).expect("our own signature");
    assert_eq!(payload, plinth::cheq::canonical(&cheq));
    assert_eq!(signed.len(), 1);
    let mut forged = jws.clone();
    forged["payload"] = json!(B64.encode(b"{\"forged\":true}"));
    assert!(plinth::cheq::verify(&forged, std::slice::from_ref(&trusted)).is_err());
    Ok(())
}
