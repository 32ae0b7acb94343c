//! JWT access tokens (RFC 9068) from the configured issuer: signed (ES256
//! or RS256) by a key of the issuer's key set — found through its OpenID
//! discovery document (`/.well-known/openid-configuration` → `jwks_uri`),
//! kept, and fetched again for a key it does not have at most every
//! [`REFETCH_AFTER`] — typed `at+jwt`, issued by the issuer (`iss`), for this
//! API (`aud`), live (`exp`, `nbf`: no leeway, so that a test sees expiry
//! when it happens), naming a person (`sub`); its scopes from `scope`.

use crate::OptionsError;
use crate::api::Caller;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The longest token read as a JWT.
const MAX_TOKEN_BYTES: usize = 16 * 1024;
/// The largest discovery document or key set read.
const MAX_DOCUMENT_BYTES: usize = 64 * 1024;
/// How long fetching one document may take.
const FETCH_DEADLINE: Duration = Duration::from_secs(5);
/// The key set is fetched again for an unknown `kid` at most this often.
const REFETCH_AFTER: Duration = Duration::from_secs(10);
/// Keys of a key set tried at most (for a token without a `kid`).
const MAX_KEYS_TRIED: usize = 8;

/// The issuer whose tokens the API accepts.
pub(crate) struct Issuer {
    url: String,
    audience: String,
    http: reqwest::Client,
    /// The key set and when it was fetched; held while fetching, so that
    /// one fetch serves every request waiting for it.
    keys: tokio::sync::Mutex<Option<(Value, Instant)>>,
}

impl Issuer {
    pub(crate) fn new(url: String, audience: String) -> Result<Issuer, OptionsError> {
        let http = reqwest::Client::builder()
            .timeout(FETCH_DEADLINE)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| OptionsError::HttpClient(e.to_string()))?;
        Ok(Issuer { url, audience, http, keys: tokio::sync::Mutex::new(None) })
    }

    /// Whether `token` looks like a JWT (three dot-separated parts).
    pub(crate) fn looks_like_jwt(token: &str) -> bool {
        token.split('.').count() == 3
    }

    /// Who `token` is valid for, or why it is not.
    pub(crate) async fn verify(&self, token: &str) -> Result<Caller, String> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err("the token is too long".into());
        }
        let jwt = Jwt::parse(token).ok_or("the token is not a JWT")?;
        let typ = jwt.header["typ"].as_str().unwrap_or("");
        if !typ.eq_ignore_ascii_case("at+jwt") && !typ.eq_ignore_ascii_case("application/at+jwt") {
            return Err("the token is not a JWT access token (typ at+jwt)".into());
        }
        let kid = jwt.header["kid"].as_str();
        let keys = self.keys(kid).await?;
        if !jwt.signed_by(&keys, kid) {
            return Err("the token's signature is not the issuer's".into());
        }
        self.claims(&jwt.claims, now())
    }

    /// What verified claims grant at `now` (Unix seconds).
    fn claims(&self, claims: &Value, now: i64) -> Result<Caller, String> {
        if claims["iss"].as_str() != Some(self.url.as_str()) {
            return Err("the token is from another issuer".into());
        }
        let audience = match &claims["aud"] {
            Value::String(aud) => *aud == self.audience,
            Value::Array(auds) => auds.iter().any(|a| a.as_str() == Some(self.audience.as_str())),
            _ => false,
        };
        if !audience {
            return Err(format!("the token is not for this API (its audience is not {})", self.audience));
        }
        if claims["exp"].as_i64().is_none_or(|exp| exp <= now) {
            return Err("the token expired".into());
        }
        if claims["nbf"].as_i64().is_some_and(|nbf| nbf > now) {
            return Err("the token is not valid yet".into());
        }
        let user = claims["sub"].as_str().filter(|s| !s.is_empty()).ok_or("the token names no person (sub)")?;
        let scopes = claims["scope"].as_str().unwrap_or("").split(' ').filter(|s| !s.is_empty());
        Ok(Caller { user: user.to_string(), scopes: scopes.map(str::to_string).collect(), token: "jwt" })
    }

    /// The issuer's key set, fetched again when it lacks `kid` and was not
    /// fetched in the last [`REFETCH_AFTER`].
    async fn keys(&self, kid: Option<&str>) -> Result<Value, String> {
        let mut kept = self.keys.lock().await;
        let lacks = |keys: &Value| {
            kid.is_some_and(|kid| !keys["keys"].as_array().is_some_and(|k| k.iter().any(|k| k["kid"] == kid)))
        };
        match &*kept {
            Some((keys, fetched)) if !lacks(keys) || fetched.elapsed() < REFETCH_AFTER => return Ok(keys.clone()),
            _ => {}
        }
        let discovery = self.fetch(&format!("{}/.well-known/openid-configuration", self.url)).await?;
        if discovery["issuer"].as_str() != Some(self.url.as_str()) {
            return Err("the issuer's discovery document names another issuer".into());
        }
        let jwks_uri = discovery["jwks_uri"].as_str().ok_or("the issuer's discovery document has no jwks_uri")?;
        let keys = self.fetch(jwks_uri).await?;
        *kept = Some((keys.clone(), Instant::now()));
        Ok(keys)
    }

    /// A JSON document of the issuer's, within the bounds.
    async fn fetch(&self, url: &str) -> Result<Value, String> {
        let failed = |why: String| format!("the issuer's document {url} could not be read: {why}");
        let mut response = self.http.get(url).send().await.map_err(|e| failed(e.to_string()))?;
        if response.status() != reqwest::StatusCode::OK {
            return Err(failed(format!("HTTP {}", response.status())));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| failed(e.to_string()))? {
            if body.len() + chunk.len() > MAX_DOCUMENT_BYTES {
                return Err(failed(format!("larger than {MAX_DOCUMENT_BYTES} bytes")));
            }
            body.extend_from_slice(&chunk);
        }
        serde_json::from_slice(&body).map_err(|e| failed(e.to_string()))
    }
}

fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// A compact JWS taken apart.
struct Jwt {
    header: Value,
    claims: Value,
    /// `header.payload`, as signed.
    signing_input: String,
    signature: Vec<u8>,
}

impl Jwt {
    fn parse(token: &str) -> Option<Jwt> {
        let (signing_input, signature) = token.rsplit_once('.')?;
        let (header, claims) = signing_input.split_once('.')?;
        let json = |part: &str| serde_json::from_slice::<Value>(&URL_SAFE_NO_PAD.decode(part).ok()?).ok();
        let (header, claims) = (json(header)?, json(claims)?);
        (header.is_object() && claims.is_object()).then_some(())?;
        Some(Jwt {
            header,
            claims,
            signing_input: signing_input.to_string(),
            signature: URL_SAFE_NO_PAD.decode(signature).ok()?,
        })
    }

    /// Whether a key of `keys` (the one named `kid`, else any) signed it
    /// with the algorithm its header names: ES256 or RS256, nothing else.
    fn signed_by(&self, keys: &Value, kid: Option<&str>) -> bool {
        use ring::signature::{ECDSA_P256_SHA256_FIXED, RSA_PKCS1_2048_8192_SHA256, RsaPublicKeyComponents};
        let part = |key: &Value, name: &str| key[name].as_str().and_then(|v| URL_SAFE_NO_PAD.decode(v).ok());
        let message = self.signing_input.as_bytes();
        let alg = self.header["alg"].as_str().unwrap_or("");
        let all = keys["keys"].as_array().map(Vec::as_slice).unwrap_or_default();
        let named = all.iter().filter(|key| kid.is_none_or(|kid| key["kid"] == kid));
        named.take(MAX_KEYS_TRIED).any(|key| {
            if key["alg"].as_str().is_some_and(|a| a != alg) {
                return false;
            }
            match (alg, key["kty"].as_str()) {
                ("ES256", Some("EC")) if key["crv"] == "P-256" => {
                    let (Some(x), Some(y)) = (part(key, "x"), part(key, "y")) else { return false };
                    let mut point = vec![4u8];
                    point.extend(x.iter().chain(&y));
                    ring::signature::UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, point)
                        .verify(message, &self.signature)
                        .is_ok()
                }
                ("RS256", Some("RSA")) => {
                    let (Some(n), Some(e)) = (part(key, "n"), part(key, "e")) else { return false };
                    RsaPublicKeyComponents { n, e }
                        .verify(&RSA_PKCS1_2048_8192_SHA256, message, &self.signature)
                        .is_ok()
                }
                _ => false,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn issuer() -> Issuer {
        Issuer::new("https://id.example".into(), "https://inbox.example".into()).unwrap()
    }

    #[test]
    fn claims_must_name_the_issuer_the_audience_a_live_time_and_a_person() {
        let issuer = issuer();
        let good = json!({"iss": "https://id.example", "aud": "https://inbox.example", "exp": 100, "sub": "alice",
                          "scope": "inbox.read openid"});
        let caller = issuer.claims(&good, 99).unwrap();
        assert_eq!(
            (caller.user.as_str(), caller.scopes.as_slice()),
            ("alice", &["inbox.read", "openid"].map(String::from)[..])
        );
        let with = |field: &str, value: Value| {
            let mut claims = good.clone();
            claims[field] = value;
            issuer.claims(&claims, 99).map(|c| c.user)
        };
        assert_eq!(with("aud", json!(["other", "https://inbox.example"])), Ok("alice".into()));
        assert!(with("aud", json!("https://inbox.example/")).unwrap_err().contains("not for this API"));
        assert!(with("iss", json!("https://id.example/")).unwrap_err().contains("another issuer"));
        assert!(with("exp", json!(99)).unwrap_err().contains("expired"));
        assert!(with("exp", json!("100")).unwrap_err().contains("expired"));
        assert!(with("nbf", json!(100)).unwrap_err().contains("not valid yet"));
        assert!(with("sub", json!("")).unwrap_err().contains("no person"));
    }

    #[test]
    fn only_es256_and_rs256_from_a_key_of_the_set() {
        let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"none","typ":"at+jwt"}"#);
        let claims = URL_SAFE_NO_PAD.encode(br#"{"sub":"alice"}"#);
        let jwt = Jwt::parse(&format!("{header}.{claims}.")).unwrap();
        let keys = json!({"keys": [{"kty": "EC", "crv": "P-256", "x": "AA", "y": "AA"}]});
        assert!(!jwt.signed_by(&keys, None));
        assert!(Jwt::parse("a.b").is_none());
        assert!(Jwt::parse(&format!("{header}.{}.", URL_SAFE_NO_PAD.encode(b"[1]"))).is_none());
    }
}
