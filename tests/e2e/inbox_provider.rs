//! The inbox example's real parts, together: oidc-provider configured as
//! the provider of the API behind the inbox tool
//! (tests/mcp-clients/oidc/inbox-provider.mjs) and the stand-in API
//! (tests/fake-inbox). A person signs in on the provider's own pages (HTTP
//! form posts, as their browser would send them); the code, exchanged by a
//! confidential client with PKCE, gives JWT access tokens that the API
//! takes for that person and scope only; they expire, refresh (rotated) and
//! revoke as the core relies on.
//!
//! [`start_inbox_provider`] and [`Person`] are for the end-user authorization
//! tests too: Plinth is then the client, and the person's way runs through
//! its pages to the provider's and back to its callback.

use crate::mcp_support::{OidcProvider, free_port};
use base64::Engine;
use regex::Regex;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The provider's client id for the tests.
pub const CLIENT_ID: &str = "plinth-inbox";
/// Its client secret.
pub const CLIENT_SECRET: &str = "inbox-client-secret";

/// Starts oidc-provider as the inbox API's provider
/// (tests/mcp-clients/oidc/inbox-provider.mjs) on `port` of 127.0.0.1, for
/// the client [`CLIENT_ID`] redirecting to `redirect_uri`, issuing access
/// tokens for `resource`; `extra` are more of the script's arguments
/// (`--access-token-ttl 5`). The port is chosen first (`free_port`) when
/// the API must be told the issuer before the provider is told the API.
pub fn start_inbox_provider(port: u16, resource: &str, redirect_uri: &str, extra: &[&str]) -> OidcProvider {
    let mut args = vec!["--client-id", CLIENT_ID, "--client-secret", CLIENT_SECRET];
    args.extend(["--redirect-uri", redirect_uri, "--resource", resource]);
    args.extend(extra);
    OidcProvider::start("inbox-provider.mjs", port, &args)
}

/// A person at a browser, without the browser: follows redirects, keeps
/// cookies and fills in each page's first form — a login (`login` or
/// `user`: their name; `password`: anything), a choice (`decision`:
/// allow), a consent — until they are sent to the redirect URI. The same
/// person works oidc-provider's development pages and fake-inbox's own.
pub struct Person {
    user: String,
    http: reqwest::Client,
    cookies: HashMap<String, String>,
    /// Pages with a form they filled in.
    pub pages: usize,
}

impl Person {
    pub fn new(user: &str) -> Person {
        let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
        Person { user: user.to_string(), http, cookies: HashMap::new(), pages: 0 }
    }

    /// Opens `url` and goes on until sent to `redirect_uri`: the query it
    /// is sent there with.
    pub async fn authorize(&mut self, url: &str, redirect_uri: &str) -> HashMap<String, String> {
        let mut request = self.http.get(url);
        for _ in 0..16 {
            let cookie = self.cookies.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("; ");
            let response = request.header("cookie", cookie).send().await.unwrap();
            let at = response.url().clone();
            for set in response.headers().get_all("set-cookie") {
                let pair = set.to_str().unwrap().split(';').next().unwrap();
                if let Some((name, value)) = pair.split_once('=') {
                    self.cookies.insert(name.trim().to_string(), value.to_string());
                }
            }
            if response.status().is_redirection() {
                let location = at.join(response.headers()["location"].to_str().unwrap()).unwrap();
                if location.as_str().starts_with(redirect_uri) {
                    return location.query_pairs().into_owned().collect();
                }
                request = self.http.get(location);
                continue;
            }
            let status = response.status();
            let page = response.text().await.unwrap();
            assert_eq!(status, 200, "{at} answered {status}: {page}");
            let (action, fields) = self.fill_in(&page);
            self.pages += 1;
            request = self.http.post(at.join(&action).unwrap()).form(&fields);
        }
        panic!("{} was never sent back to {redirect_uri}", self.user);
    }

    /// The page's first form: where it posts and what the person posts.
    fn fill_in(&self, page: &str) -> (String, Vec<(String, String)>) {
        let form = Regex::new(r"(?s)<form\b([^>]*)>(.*?)</form>").unwrap();
        let attribute = Regex::new(r#"([\w-]+)="([^"]*)""#).unwrap();
        let attributes = |tag: &str| -> HashMap<String, String> {
            attribute.captures_iter(tag).map(|c| (c[1].to_string(), unescape(&c[2]))).collect()
        };
        let found = form.captures(page).unwrap_or_else(|| panic!("no form on the page: {page}"));
        let action = attributes(&found[1]).remove("action").expect("the form has an action");
        let mut fields: Vec<(String, String)> = Vec::new();
        for tag in Regex::new(r"<input\b[^>]*>").unwrap().find_iter(&found[2]) {
            let a = attributes(tag.as_str());
            let Some(name) = a.get("name") else { continue };
            if fields.iter().any(|(n, _)| n == name) {
                continue;
            }
            let value = match name.as_str() {
                "login" | "user" => self.user.clone(),
                "password" => "any password".to_string(),
                _ => a.get("value").cloned().unwrap_or_default(),
            };
            fields.push((name.clone(), value));
        }
        for tag in Regex::new(r"<button\b[^>]*>").unwrap().find_iter(&found[2]) {
            let a = attributes(tag.as_str());
            if let (Some(name), Some("allow")) = (a.get("name"), a.get("value").map(String::as_str)) {
                fields.push((name.clone(), "allow".to_string()));
            }
        }
        (action, fields)
    }
}

fn unescape(text: &str) -> String {
    text.replace("&quot;", "\"").replace("&#39;", "'").replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
}

/// A PKCE verifier and its S256 challenge.
pub fn pkce() -> (String, String) {
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let verifier = b64.encode(uuid::Uuid::new_v4().as_bytes()) + &b64.encode(uuid::Uuid::new_v4().as_bytes());
    let challenge = pkce_challenge(&verifier);
    (verifier, challenge)
}

/// The S256 challenge of a PKCE verifier.
pub fn pkce_challenge(verifier: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(ring::digest::digest(&ring::digest::SHA256, verifier.as_bytes()))
}

/// A JWT's header and claims, unverified.
fn jwt_parts(token: &str) -> (Value, Value) {
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let part = |i: usize| serde_json::from_slice(&b64.decode(token.split('.').nth(i).unwrap()).unwrap()).unwrap();
    (part(0), part(1))
}

/// A POST to the provider's token or revocation endpoint by the client
/// (HTTP Basic): the status and the body.
async fn as_client(url: &str, form: &[(&str, &str)]) -> (u16, Value) {
    let response =
        reqwest::Client::new().post(url).basic_auth(CLIENT_ID, Some(CLIENT_SECRET)).form(form).send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
}

/// `GET url` with the bearer token: the status and body.
async fn call(url: &str, token: &str) -> (u16, Value) {
    let response = reqwest::Client::new().get(url).bearer_auth(token).send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
}

fn ids(body: &Value) -> Vec<&str> {
    body["messages"].as_array().unwrap_or_else(|| panic!("{body}")).iter().map(|m| m["id"].as_str().unwrap()).collect()
}

/// What the test does as the provider's client (as Plinth will).
struct Client {
    authorization_endpoint: String,
    token_endpoint: String,
    redirect_uri: &'static str,
}

impl Client {
    /// Where the client sends `user` to sign in for `scope`, and what the
    /// provider sends them back with; `extra` is more of the query
    /// (`&resource=…`). The verifier is `verifier`'s.
    async fn sign_in(&self, user: &str, scope: &str, verifier: &str, extra: &str) -> HashMap<String, String> {
        let challenge = pkce_challenge(verifier);
        let url = format!(
            "{}?response_type=code&client_id={CLIENT_ID}&redirect_uri={}&scope={}&state=state-1\
             &code_challenge={challenge}&code_challenge_method=S256{extra}",
            self.authorization_endpoint,
            urlencode(self.redirect_uri),
            urlencode(scope)
        );
        Person::new(user).authorize(&url, self.redirect_uri).await
    }

    async fn exchange(&self, code: &str, verifier: &str) -> (u16, Value) {
        let form = [
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", self.redirect_uri),
            ("code_verifier", verifier),
        ];
        as_client(&self.token_endpoint, &form).await
    }

    /// Signs `user` in for `scope` and exchanges the code: the tokens.
    async fn tokens(&self, user: &str, scope: &str, extra: &str) -> Value {
        let verifier = pkce().0;
        let back = self.sign_in(user, scope, &verifier, extra).await;
        let (status, tokens) = self.exchange(&back["code"], &verifier).await;
        assert_eq!(status, 200, "{tokens}");
        tokens
    }

    async fn refresh(&self, refresh_token: &str) -> (u16, Value) {
        as_client(&self.token_endpoint, &[("grant_type", "refresh_token"), ("refresh_token", refresh_token)]).await
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_inbox_api_takes_the_providers_tokens_for_the_person_who_granted_them() {
    let port = free_port();
    let issuer = format!("http://127.0.0.1:{port}");
    let trusted = issuer.clone();
    let (inbox, record) =
        fake_inbox::spawn(|url| fake_inbox::Options { issuer: Some(trusted), ..fake_inbox::Options::new(url) })
            .await
            .unwrap();
    // Nothing listens at the callback: the person's way stops at it.
    let redirect_uri = "http://127.0.0.1:9/oauth/callback";
    let provider = start_inbox_provider(port, &inbox, redirect_uri, &["--access-token-ttl", "5"]);
    assert_eq!(provider.issuer, issuer);
    let discovery: Value =
        reqwest::get(format!("{issuer}/.well-known/openid-configuration")).await.unwrap().json().await.unwrap();
    assert_eq!(discovery["authorization_response_iss_parameter_supported"], true);
    assert_eq!(discovery["code_challenge_methods_supported"], json!(["S256"]));
    let endpoint = |name: &str| discovery[name].as_str().unwrap().to_string();
    let client = Client {
        authorization_endpoint: endpoint("authorization_endpoint"),
        token_endpoint: endpoint("token_endpoint"),
        redirect_uri,
    };
    let messages = format!("{inbox}/v1/messages");

    // Alice signs in on the provider's pages (a login, a consent) and
    // allows inbox.read; the request names no resource: the provider's
    // default is the API. RFC 9207: the response names its issuer.
    let verifier = pkce().0;
    let back = client.sign_in("alice", "inbox.read", &verifier, "").await;
    assert_eq!((back["state"].as_str(), back["iss"].as_str()), ("state-1", issuer.as_str()));
    // A code works only with its verifier.
    let (status, error) = client.exchange(&back["code"], &pkce().0).await;
    assert_eq!((status, &error["error"]), (400, &json!("invalid_grant")));
    // And once: used again, it revokes the grant it made.
    let back = client.sign_in("alice", "inbox.read", &verifier, "").await;
    let (status, tokens) = client.exchange(&back["code"], &verifier).await;
    assert_eq!(status, 200, "{tokens}");
    assert_eq!(client.exchange(&back["code"], &verifier).await.1["error"], "invalid_grant");
    assert_eq!(client.refresh(tokens["refresh_token"].as_str().unwrap()).await.1["error"], "invalid_grant");

    let tokens = client.tokens("alice", "inbox.read", "").await;
    let scope_and_ttl = (&tokens["token_type"], &tokens["scope"], &tokens["expires_in"]);
    assert_eq!(scope_and_ttl, (&json!("Bearer"), &json!("inbox.read"), &json!(5)));

    // The access token is an RFC 9068 JWT for the API, naming alice.
    let access = tokens["access_token"].as_str().unwrap().to_string();
    let (header, claims) = jwt_parts(&access);
    assert_eq!((&header["typ"], &header["alg"]), (&json!("at+jwt"), &json!("RS256")));
    assert_eq!((&claims["iss"], &claims["aud"], &claims["sub"]), (&json!(issuer), &json!(inbox), &json!("alice")));
    assert_eq!((&claims["scope"], &claims["client_id"]), (&json!("inbox.read"), &json!(CLIENT_ID)));

    // The API answers alice hers, and nothing that needs more.
    let (status, body) = call(&messages, &access).await;
    assert_eq!((status, ids(&body)), (200, vec!["a-3", "a-2", "a-1"]));
    assert_eq!(call(&format!("{inbox}/v1/messages/b-2"), &access).await.0, 404);
    let http = reqwest::Client::new();
    let response = http.post(format!("{messages}/a-3/read")).bearer_auth(&access).send().await.unwrap();
    assert_eq!(response.status(), 403);
    assert!(response.headers()["www-authenticate"].to_str().unwrap().contains(r#"error="insufficient_scope""#));

    // Bob signs in and allows both scopes, naming the resource: his own.
    let with_resource = format!("&resource={}", urlencode(&inbox));
    let bob = client.tokens("bob", "inbox.read inbox.write", &with_resource).await;
    assert_eq!(bob["scope"], "inbox.read inbox.write");
    let bob_access = bob["access_token"].as_str().unwrap();
    let (status, body) = call(&messages, bob_access).await;
    assert_eq!((status, ids(&body)), (200, vec!["b-2", "b-1"]));
    let response = http.post(format!("{messages}/b-2/read")).bearer_auth(bob_access).send().await.unwrap();
    assert_eq!(response.status(), 200);

    // A resource the provider does not serve is refused at the provider.
    let elsewhere = format!("&resource={}", urlencode("http://127.0.0.1:9"));
    let back = client.sign_in("bob", "inbox.read", &pkce().0, &elsewhere).await;
    assert_eq!(back.get("error").map(String::as_str), Some("invalid_target"), "{back:?}");

    // The API's record: whose token each call carried, as presented.
    let seen: Vec<_> = record.seen().into_iter().filter(|r| r.path == "/v1/messages").collect();
    assert_eq!(seen.iter().map(|r| r.user.as_deref()).collect::<Vec<_>>(), [Some("alice"), Some("bob")]);
    assert_eq!(seen[0].authorization.as_deref(), Some(format!("Bearer {access}").as_str()));

    // Alice's token expires (5 s); the refresh gives a new one, and a new
    // refresh token: the old one, used again, revokes her grant.
    let exp = claims["exp"].as_u64().unwrap();
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    tokio::time::sleep(Duration::from_secs(exp.saturating_sub(now) + 1)).await;
    let (status, body) = call(&messages, &access).await;
    assert_eq!((status, body["error"]["message"].as_str()), (401, Some("the token expired")));
    let refresh = tokens["refresh_token"].as_str().unwrap();
    let (status, refreshed) = client.refresh(refresh).await;
    assert_eq!(status, 200, "{refreshed}");
    let (renewed, rotated) =
        (refreshed["access_token"].as_str().unwrap(), refreshed["refresh_token"].as_str().unwrap());
    assert_ne!(rotated, refresh);
    assert_eq!(jwt_parts(renewed).1["sub"], "alice");
    let (status, body) = call(&messages, renewed).await;
    assert_eq!((status, ids(&body)), (200, vec!["a-3", "a-2", "a-1"]));
    assert_eq!(
        client.refresh(refresh).await,
        (400, json!({"error": "invalid_grant", "error_description": "grant request is invalid"}))
    );
    assert_eq!(client.refresh(rotated).await.1["error"], "invalid_grant", "the reuse revoked the grant");

    // Revocation (RFC 7009): bob's refresh token, which then refreshes no
    // more. A JWT access token cannot be revoked: it lives until it expires.
    let revoke_url = endpoint("revocation_endpoint");
    let bob_refresh = bob["refresh_token"].as_str().unwrap();
    let (status, _) = as_client(&revoke_url, &[("token", bob_refresh), ("token_type_hint", "refresh_token")]).await;
    assert_eq!(status, 200);
    assert_eq!(client.refresh(bob_refresh).await.1["error"], "invalid_grant");
    let (status, error) = as_client(&revoke_url, &[("token", bob_access)]).await;
    assert_eq!((status, &error["error"]), (400, &json!("unsupported_token_type")));

    // The client authenticates: a wrong secret gets nothing.
    let carol = client.tokens("carol", "inbox.read", "").await;
    let form = [("grant_type", "refresh_token"), ("refresh_token", carol["refresh_token"].as_str().unwrap())];
    let response =
        http.post(&client.token_endpoint).basic_auth(CLIENT_ID, Some("wrong")).form(&form).send().await.unwrap();
    assert_eq!(response.status(), 401);
    assert_eq!(client.refresh(carol["refresh_token"].as_str().unwrap()).await.0, 200);
}

fn urlencode(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_quickstart_provider_signs_a_person_in_on_its_own_page() {
    // fake-inbox's built-in provider, as `make run` starts it.
    let redirect_uri = "http://127.0.0.1:9/oauth/callback";
    let (inbox, _record) = fake_inbox::spawn(|url| fake_inbox::Options {
        provider: Some(fake_inbox::ProviderOptions::new(CLIENT_ID, CLIENT_SECRET, redirect_uri)),
        ..fake_inbox::Options::new(url)
    })
    .await
    .unwrap();
    let metadata: Value =
        reqwest::get(format!("{inbox}/.well-known/oauth-authorization-server")).await.unwrap().json().await.unwrap();
    let endpoint = |name: &str| metadata[name].as_str().unwrap().to_string();
    let client = Client {
        authorization_endpoint: endpoint("authorization_endpoint"),
        token_endpoint: endpoint("token_endpoint"),
        redirect_uri,
    };
    let verifier = pkce().0;
    let mut bob = Person::new("bob");
    let url = format!(
        "{}?response_type=code&client_id={CLIENT_ID}&redirect_uri={}&scope=inbox.read&state=s&code_challenge={}\
         &code_challenge_method=S256",
        client.authorization_endpoint,
        urlencode(redirect_uri),
        pkce_challenge(&verifier)
    );
    let back = bob.authorize(&url, redirect_uri).await;
    assert_eq!((bob.pages, back["iss"].as_str()), (1, inbox.as_str()), "one page: sign in and allow");
    let (status, tokens) = client.exchange(&back["code"], &verifier).await;
    assert_eq!(status, 200, "{tokens}");
    let (status, body) = call(&format!("{inbox}/v1/messages"), tokens["access_token"].as_str().unwrap()).await;
    assert_eq!((status, ids(&body)), (200, vec!["b-2", "b-1"]));
    let (status, refreshed) = client.refresh(tokens["refresh_token"].as_str().unwrap()).await;
    assert_eq!((status, &refreshed["scope"]), (200, &json!("inbox.read")));
}
