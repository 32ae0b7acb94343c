//! What the crate's tests share: a fake-inbox with the built-in provider, a
//! person who signs in at it over HTTP, and a JWT issuer of the tests' own.

#![allow(dead_code)]

use axum::Json;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use fake_inbox::{Inbox, Options, ProviderOptions};
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::time::Duration;

pub const CLIENT_ID: &str = "plinth";
pub const CLIENT_SECRET: &str = "test-secret";
pub const REDIRECT_URI: &str = "http://127.0.0.1:9/oauth/callback";

/// A client that follows no redirect: the tests look at each.
pub fn http() -> reqwest::Client {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap()
}

/// A fake-inbox with the built-in provider, its access tokens living `ttl`.
pub async fn inbox_with_provider(ttl: Duration) -> (String, Inbox) {
    fake_inbox::spawn(|url| Options {
        provider: Some(ProviderOptions {
            access_token_ttl: ttl,
            ..ProviderOptions::new(CLIENT_ID, CLIENT_SECRET, REDIRECT_URI)
        }),
        ..Options::new(url)
    })
    .await
    .unwrap()
}

/// A PKCE verifier and its S256 challenge.
pub fn pkce() -> (String, String) {
    let mut bytes = [0u8; 32];
    ring::rand::SecureRandom::fill(&SystemRandom::new(), &mut bytes).unwrap();
    let verifier = URL_SAFE_NO_PAD.encode(bytes);
    let challenge = URL_SAFE_NO_PAD.encode(ring::digest::digest(&ring::digest::SHA256, verifier.as_bytes()));
    (verifier, challenge)
}

/// The query of a URL, as a map.
pub fn query(url: &str) -> HashMap<String, String> {
    url::Url::parse(url).unwrap().query_pairs().into_owned().collect()
}

/// `GET /authorize` with `params`: its response.
pub async fn authorize(base: &str, params: &[(&str, &str)]) -> reqwest::Response {
    http().get(format!("{base}/authorize")).query(params).send().await.unwrap()
}

/// The hidden `request` field of a sign-in page.
pub fn request_id(page: &str) -> String {
    let at = page.find(r#"name="request" value=""#).unwrap_or_else(|| panic!("no request field: {page}"));
    let rest = &page[at + r#"name="request" value=""#.len()..];
    rest[..rest.find('"').unwrap()].to_string()
}

/// Signs in as `user` and allows `scope`, as a person would with the
/// page's form: the code and the PKCE verifier it needs.
pub async fn sign_in(base: &str, user: &str, scope: &str) -> (String, String) {
    let (verifier, challenge) = pkce();
    let page = authorize(
        base,
        &[
            ("response_type", "code"),
            ("client_id", CLIENT_ID),
            ("redirect_uri", REDIRECT_URI),
            ("scope", scope),
            ("state", "the-state"),
            ("code_challenge", &challenge),
            ("code_challenge_method", "S256"),
        ],
    )
    .await;
    assert_eq!(page.status(), 200);
    let request = request_id(&page.text().await.unwrap());
    let answer = [("request", request.as_str()), ("user", user), ("decision", "allow")];
    let back = http().post(format!("{base}/authorize")).form(&answer).send().await.unwrap();
    assert_eq!(back.status(), 303);
    let location = back.headers()["location"].to_str().unwrap().to_string();
    assert!(location.starts_with(REDIRECT_URI), "{location}");
    let query = query(&location);
    assert_eq!((query["state"].as_str(), query["iss"].as_str()), ("the-state", base));
    (query["code"].clone(), verifier)
}

/// `POST /token` with `form`, the client authenticating by HTTP Basic.
pub async fn token(base: &str, form: &[(&str, &str)]) -> (u16, Value) {
    let response = http()
        .post(format!("{base}/token"))
        .basic_auth(CLIENT_ID, Some(CLIENT_SECRET))
        .form(form)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    assert_eq!(response.headers()["cache-control"], "no-store");
    (status, response.json().await.unwrap())
}

/// Signs in as `user` for `scope` and exchanges the code: the tokens.
pub async fn tokens_for(base: &str, user: &str, scope: &str) -> Value {
    let (code, verifier) = sign_in(base, user, scope).await;
    let form = [
        ("grant_type", "authorization_code"),
        ("code", code.as_str()),
        ("redirect_uri", REDIRECT_URI),
        ("code_verifier", verifier.as_str()),
    ];
    let (status, tokens) = token(base, &form).await;
    assert_eq!(status, 200, "{tokens}");
    tokens
}

/// `GET {url}` with `Authorization: Bearer {token}` (none without one):
/// the status, the `WWW-Authenticate` header and the body.
pub async fn get(url: &str, token: Option<&str>) -> (u16, Option<String>, Value) {
    let mut request = http().get(url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let challenge = response.headers().get("www-authenticate").map(|v| v.to_str().unwrap().to_string());
    (status, challenge, response.json().await.unwrap_or(Value::Null))
}

/// The ids of a `GET /v1/messages` answer.
pub fn ids(body: &Value) -> Vec<&str> {
    body["messages"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect()
}

/// A JWT issuer of the tests' own: an OpenID discovery document and a key
/// set with one ES256 key, which signs what the tests ask.
pub struct TestIssuer {
    pub url: String,
    key: EcdsaKeyPair,
    pub kid: String,
}

impl TestIssuer {
    pub async fn start(kid: &str) -> TestIssuer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let key = Self::key();
        let point = key.public_key().as_ref();
        let jwk = json!({"kty": "EC", "crv": "P-256", "kid": kid, "use": "sig", "alg": "ES256",
                         "x": URL_SAFE_NO_PAD.encode(&point[1..33]), "y": URL_SAFE_NO_PAD.encode(&point[33..])});
        let discovery = json!({"issuer": url, "jwks_uri": format!("{url}/jwks")});
        let router = axum::Router::new()
            .route("/.well-known/openid-configuration", axum::routing::get(move || async move { Json(discovery) }))
            .route("/jwks", axum::routing::get(move || async move { Json(json!({ "keys": [jwk] })) }));
        tokio::spawn(async move { axum::serve(listener, router).await });
        TestIssuer { url, key, kid: kid.to_string() }
    }

    fn key() -> EcdsaKeyPair {
        let random = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &random).unwrap();
        EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &random).unwrap()
    }

    /// `claims` signed with its key, under `header`.
    pub fn sign_with_header(&self, header: Value, claims: Value) -> String {
        sign(&self.key, header, claims)
    }

    /// An access token (typ at+jwt, its kid) for `claims`.
    pub fn sign(&self, claims: Value) -> String {
        self.sign_with_header(json!({"alg": "ES256", "typ": "at+jwt", "kid": self.kid}), claims)
    }

    /// `claims` signed by a key that is not in its key set, under its kid.
    pub fn forge(&self, claims: Value) -> String {
        sign(&Self::key(), json!({"alg": "ES256", "typ": "at+jwt", "kid": self.kid}), claims)
    }

    /// Claims it would issue to `user` for `audience` with `scope`, an hour long.
    pub fn claims(&self, user: &str, audience: &str, scope: &str) -> Value {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
        json!({"iss": self.url, "sub": user, "aud": audience, "scope": scope, "iat": now, "exp": now + 3600,
               "client_id": CLIENT_ID, "jti": format!("{user}-{now}")})
    }
}

fn sign(key: &EcdsaKeyPair, header: Value, claims: Value) -> String {
    let input =
        format!("{}.{}", URL_SAFE_NO_PAD.encode(header.to_string()), URL_SAFE_NO_PAD.encode(claims.to_string()));
    let signature = key.sign(&SystemRandom::new(), input.as_bytes()).unwrap();
    format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature.as_ref()))
}
