//! Talking to a tenant's provider: its metadata (RFC 8414, else OpenID
//! discovery), the code exchange and the refresh at its token endpoint,
//! revocation (RFC 7009). Everything a provider answers is untrusted:
//! bounded in bytes and time, parsed strictly, quoted and cut before it
//! reaches a message, never logged whole. The provider's URLs are a
//! tenant's: fetched under the outbound address policy (`egress`), over
//! `https` unless the operator allows `http`, without redirects, each
//! fetch held to the tenant's share.

use crate::egress::{CheckedResolver, OutboundLimits, caused_by_refusal, read_capped};
use crate::store::authorizations::StoredProvider;
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest answer read from a provider (metadata, token, revocation).
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;
/// The longest a request to a provider may take, all of it.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a provider's metadata is used before it is fetched again.
const DOCUMENT_TTL: Duration = Duration::from_secs(300);
/// The longest token kept (access or refresh).
const MAX_TOKEN_BYTES: usize = 16 * 1024;
/// The longest text of a provider's quoted in a message.
const QUOTED_CHARS: usize = 120;

/// The operator's settings for talking to providers.
#[derive(Debug, Clone, Default)]
pub struct ExchangeOptions {
    /// Allow `http://` provider URLs (tests, closed networks).
    pub allow_http: bool,
}

/// Why a provider did not give what was asked.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ExchangeError {
    /// It refused the grant (`invalid_grant`, `invalid_client`,
    /// `unauthorized_client`…): asking again will not help.
    #[error("the provider refused: {0}")]
    Refused(String),
    /// It could not be reached or answered an error of its own (down,
    /// slow, `5xx`): worth retrying.
    #[error("the provider could not be reached or failed ({0})")]
    Unavailable(String),
    /// It answered what is not what the protocol says.
    #[error("the provider answered what OAuth does not allow ({0})")]
    Invalid(String),
}

/// A provider's endpoints, from its settings and its metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderDocument {
    pub issuer: Option<String>,
    pub authorization_endpoint: String,
    pub token_endpoint: String,
    pub revocation_endpoint: Option<String>,
    /// Whether it sends `iss` in its authorization responses (RFC 9207).
    pub iss_in_response: bool,
}

/// A token endpoint's answer, checked.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenAnswer {
    pub access_token: String,
    pub refresh_token: Option<String>,
    pub expires_in: Option<i64>,
    pub scope: Option<String>,
}

impl std::fmt::Debug for TokenAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenAnswer")
            .field("expires_in", &self.expires_in)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

/// The query of the provider's redirect back to Plinth's callback.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
pub struct CallbackQuery {
    #[serde(default)]
    pub state: String,
    #[serde(default)]
    pub code: Option<String>,
    #[serde(default)]
    pub iss: Option<String>,
    #[serde(default)]
    pub error: Option<String>,
}

/// `text` quoted for a message: cut, control characters dropped.
pub fn quoted(text: &str) -> String {
    let mut out: String = text.chars().filter(|c| !c.is_control()).take(QUOTED_CHARS).collect();
    if text.chars().count() > QUOTED_CHARS {
        out.push('…');
    }
    out
}

/// Whether `url` may be a provider's URL: absolute `https` (or `http` when
/// the operator allows it), with a host, no user or password, no fragment.
pub fn check_url(url: &str, allow_http: bool) -> Result<reqwest::Url, &'static str> {
    let parsed = reqwest::Url::parse(url).map_err(|_| "not an absolute URL")?;
    match parsed.scheme() {
        "https" => {}
        "http" if allow_http => {}
        _ => return Err("must be an https:// URL (http:// only where the operator allows it)"),
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err("has no host");
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err("must not contain a user name or password");
    }
    if parsed.fragment().is_some() {
        return Err("must not have a fragment");
    }
    if url.len() > 2048 {
        return Err("is longer than 2,048 bytes");
    }
    Ok(parsed)
}

/// Reads a provider's metadata document (RFC 8414 §3.2 / OpenID Discovery):
/// its `issuer` must be the one asked for, its endpoints sound URLs.
pub fn parse_document(bytes: &[u8], issuer: &str, allow_http: bool) -> Result<ProviderDocument, ExchangeError> {
    let invalid = |why: &str| ExchangeError::Invalid(why.to_string());
    let document: Value = serde_json::from_slice(bytes).map_err(|_| invalid("its metadata is not JSON"))?;
    let document = document.as_object().ok_or_else(|| invalid("its metadata is not a JSON object"))?;
    if document.get("issuer").and_then(Value::as_str) != Some(issuer) {
        return Err(invalid("its metadata names another issuer"));
    }
    let endpoint = |name: &str| -> Result<Option<String>, ExchangeError> {
        match document.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(url)) => {
                check_url(url, allow_http).map_err(|why| ExchangeError::Invalid(format!("its `{name}` {why}")))?;
                Ok(Some(url.clone()))
            }
            Some(_) => Err(ExchangeError::Invalid(format!("its `{name}` is not a string"))),
        }
    };
    let authorization_endpoint =
        endpoint("authorization_endpoint")?.ok_or_else(|| invalid("its metadata names no authorization endpoint"))?;
    let token_endpoint = endpoint("token_endpoint")?.ok_or_else(|| invalid("its metadata names no token endpoint"))?;
    if let Some(methods) = document.get("code_challenge_methods_supported").and_then(Value::as_array)
        && !methods.iter().any(|m| m == "S256")
    {
        return Err(invalid("it does not support PKCE with S256"));
    }
    Ok(ProviderDocument {
        issuer: Some(issuer.to_string()),
        authorization_endpoint,
        token_endpoint,
        revocation_endpoint: endpoint("revocation_endpoint")?,
        iss_in_response: document.get("authorization_response_iss_parameter_supported") == Some(&Value::Bool(true)),
    })
}

/// Reads a token endpoint's answer (RFC 6749 §5.1 and §5.2): a Bearer
/// `access_token` of sound characters, or the error it names.
pub fn parse_token_answer(status: u16, bytes: &[u8]) -> Result<TokenAnswer, ExchangeError> {
    let answer: Value = serde_json::from_slice(bytes).map_err(|_| {
        if status >= 500 {
            ExchangeError::Unavailable(format!("its token endpoint answered {status}"))
        } else {
            ExchangeError::Invalid(format!("its token endpoint answered {status} with what is not JSON"))
        }
    })?;
    if !(200..300).contains(&status) {
        let error = answer.get("error").and_then(Value::as_str).map(quoted);
        return Err(match (status, error) {
            (500.., _) => ExchangeError::Unavailable(format!("its token endpoint answered {status}")),
            (_, Some(error)) if error == "temporarily_unavailable" => ExchangeError::Unavailable(error),
            (_, Some(error)) => ExchangeError::Refused(error),
            (_, None) => ExchangeError::Invalid(format!("its token endpoint answered {status} without an error")),
        });
    }
    let token = |name: &str| -> Result<Option<String>, ExchangeError> {
        match answer.get(name) {
            None | Some(Value::Null) => Ok(None),
            // RFC 6749 appendix A.12/A.17: VSCHAR, printable ASCII.
            Some(Value::String(t))
                if !t.is_empty() && t.len() <= MAX_TOKEN_BYTES && t.bytes().all(|b| (0x20..0x7f).contains(&b)) =>
            {
                Ok(Some(t.clone()))
            }
            Some(_) => Err(ExchangeError::Invalid(format!("its `{name}` is not a token"))),
        }
    };
    let access_token =
        token("access_token")?.ok_or_else(|| ExchangeError::Invalid("it answered no access token".into()))?;
    match answer.get("token_type").and_then(Value::as_str) {
        Some(kind) if kind.eq_ignore_ascii_case("bearer") => {}
        Some(_) => return Err(ExchangeError::Invalid("its token is not a Bearer token".into())),
        None => return Err(ExchangeError::Invalid("its answer has no `token_type`".into())),
    }
    let expires_in = match answer.get("expires_in") {
        None | Some(Value::Null) => None,
        // Some providers send it as a string.
        Some(Value::String(s)) => s.parse::<i64>().ok(),
        Some(value) => value.as_i64(),
    }
    .filter(|s| (0..=10 * 365 * 24 * 3600).contains(s));
    let scope = match answer.get("scope") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.len() <= 4096 && s.split_ascii_whitespace().all(crate::manifest::is_scope) => {
            Some(s.clone())
        }
        Some(_) => return Err(ExchangeError::Invalid("its `scope` is not a list of scopes".into())),
    };
    Ok(TokenAnswer { access_token, refresh_token: token("refresh_token")?, expires_in, scope })
}

/// Talks to providers.
pub struct Exchange {
    options: ExchangeOptions,
    /// Built once; `None` if it could not be (every exchange then fails).
    client: Option<reqwest::Client>,
    /// Metadata by (tenant, provider id): when fetched, and what.
    documents: dashmap::DashMap<(String, String), (Instant, ProviderDocument)>,
}

impl Exchange {
    pub fn new(options: ExchangeOptions, limits: Arc<OutboundLimits>) -> Exchange {
        let client = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .dns_resolver(Arc::new(CheckedResolver::new(limits)))
            .user_agent(concat!("plinth/", env!("CARGO_PKG_VERSION")))
            .build()
            .inspect_err(|e| tracing::error!(error = %e, "no HTTP client for authorization providers"))
            .ok();
        Exchange { options, client, documents: Default::default() }
    }

    pub fn allows_http(&self) -> bool {
        self.options.allow_http
    }

    /// Forgets a provider's cached metadata (its settings changed).
    pub fn forget(&self, tenant: &str, id: &str) {
        self.documents.remove(&(tenant.to_string(), id.to_string()));
    }

    /// The provider's endpoints: its settings' own, over what its issuer's
    /// metadata says (fetched, and cached for a while).
    pub async fn document(&self, provider: &StoredProvider) -> Result<ProviderDocument, ExchangeError> {
        let settings = super::settings_of(provider);
        let key = (provider.tenant.clone(), provider.id.clone());
        let from_issuer = match &settings.issuer {
            None => None,
            Some(issuer) => {
                match self.documents.get(&key).filter(|d| d.0.elapsed() < DOCUMENT_TTL).map(|d| d.1.clone()) {
                    Some(document) => Some(document),
                    None => {
                        let document = self.fetch_document(issuer).await?;
                        self.documents.insert(key, (Instant::now(), document.clone()));
                        Some(document)
                    }
                }
            }
        };
        let unset = || ExchangeError::Invalid("no authorization or token endpoint is configured".into());
        Ok(ProviderDocument {
            issuer: settings.issuer.clone(),
            authorization_endpoint: settings
                .authorization_endpoint
                .clone()
                .or_else(|| from_issuer.as_ref().map(|d| d.authorization_endpoint.clone()))
                .ok_or_else(unset)?,
            token_endpoint: settings
                .token_endpoint
                .clone()
                .or_else(|| from_issuer.as_ref().map(|d| d.token_endpoint.clone()))
                .ok_or_else(unset)?,
            revocation_endpoint: settings
                .revocation_endpoint
                .clone()
                .or_else(|| from_issuer.as_ref().and_then(|d| d.revocation_endpoint.clone())),
            iss_in_response: from_issuer.as_ref().is_some_and(|d| d.iss_in_response),
        })
    }

    /// RFC 8414 §3.1's well-known URL (the issuer's path after the
    /// well-known segment), then OpenID Discovery's.
    async fn fetch_document(&self, issuer: &str) -> Result<ProviderDocument, ExchangeError> {
        let url = check_url(issuer, self.options.allow_http)
            .map_err(|why| ExchangeError::Invalid(format!("its issuer {why}")))?;
        let origin = url.origin().ascii_serialization();
        let path = url.path().trim_end_matches('/');
        let candidates = [
            format!("{origin}/.well-known/oauth-authorization-server{path}"),
            format!("{}/.well-known/openid-configuration", issuer.trim_end_matches('/')),
        ];
        let mut last = ExchangeError::Unavailable("its metadata could not be fetched".into());
        for candidate in candidates {
            match self.get(&candidate).await {
                Ok((200, body)) => return parse_document(&body, issuer, self.options.allow_http),
                Ok((status, _)) => last = ExchangeError::Unavailable(format!("its metadata answered {status}")),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Exchanges an authorization code (with its PKCE verifier).
    pub async fn redeem(
        &self,
        provider: &StoredProvider,
        document: &ProviderDocument,
        code: &str,
        redirect_uri: &str,
        verifier: &str,
    ) -> Result<TokenAnswer, ExchangeError> {
        let form = [
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", redirect_uri),
            ("code_verifier", verifier),
        ];
        self.token_request(provider, &document.token_endpoint, &form).await
    }

    /// Refreshes with a refresh token.
    pub async fn refresh(&self, provider: &StoredProvider, refresh_token: &str) -> Result<TokenAnswer, ExchangeError> {
        let document = self.document(provider).await?;
        let form = [("grant_type", "refresh_token"), ("refresh_token", refresh_token)];
        self.token_request(provider, &document.token_endpoint, &form).await
    }

    /// Revokes a token at the provider (RFC 7009), when it has a revocation
    /// endpoint; `Ok` when it has none.
    pub async fn revoke(&self, provider: &StoredProvider, token: &str) -> Result<(), ExchangeError> {
        let document = self.document(provider).await?;
        let Some(endpoint) = document.revocation_endpoint else { return Ok(()) };
        let (status, _) = self.post(provider, &endpoint, &[("token", token)]).await?;
        // RFC 7009 §2.2: 200 whether or not the token was valid.
        if status == 200 {
            Ok(())
        } else {
            Err(ExchangeError::Unavailable(format!("its revocation endpoint answered {status}")))
        }
    }

    async fn token_request(
        &self,
        provider: &StoredProvider,
        endpoint: &str,
        form: &[(&str, &str)],
    ) -> Result<TokenAnswer, ExchangeError> {
        let (status, body) = self.post(provider, endpoint, form).await?;
        parse_token_answer(status, &body)
    }

    /// POSTs `form` to `endpoint` with the client's credentials: HTTP Basic
    /// (RFC 6749 §2.3.1) with a secret, else `client_id` in the form.
    async fn post(
        &self,
        provider: &StoredProvider,
        endpoint: &str,
        form: &[(&str, &str)],
    ) -> Result<(u16, Vec<u8>), ExchangeError> {
        let url = check_url(endpoint, self.options.allow_http)
            .map_err(|why| ExchangeError::Invalid(format!("its endpoint {why}")))?;
        let client = self.client.as_ref().ok_or_else(|| ExchangeError::Unavailable("no HTTP client".into()))?;
        let settings = super::settings_of(provider);
        let mut fields: Vec<(&str, &str)> = form.to_vec();
        let mut request = client.post(url).header(reqwest::header::ACCEPT, "application/json");
        match &provider.client_secret {
            Some(secret) => {
                let encode = |s: &str| form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
                request = request.basic_auth(encode(&settings.client_id), Some(encode(secret)));
            }
            None => fields.push(("client_id", &settings.client_id)),
        }
        if let Some(resource) = &settings.resource {
            fields.push(("resource", resource));
        }
        let body: String = form_urlencoded::Serializer::new(String::new()).extend_pairs(fields).finish();
        let request = request.header(reqwest::header::CONTENT_TYPE, "application/x-www-form-urlencoded").body(body);
        self.read(request.send().await).await
    }

    async fn get(&self, url: &str) -> Result<(u16, Vec<u8>), ExchangeError> {
        let url = check_url(url, self.options.allow_http)
            .map_err(|why| ExchangeError::Invalid(format!("its metadata URL {why}")))?;
        let client = self.client.as_ref().ok_or_else(|| ExchangeError::Unavailable("no HTTP client".into()))?;
        self.read(client.get(url).header(reqwest::header::ACCEPT, "application/json").send().await).await
    }

    async fn read(&self, sent: Result<reqwest::Response, reqwest::Error>) -> Result<(u16, Vec<u8>), ExchangeError> {
        let mut response = sent.map_err(|e| {
            if caused_by_refusal(&e) {
                ExchangeError::Invalid("its URL leads to an address on this server's own or a private network, which the operator does not allow".into())
            } else if e.is_timeout() {
                ExchangeError::Unavailable("too slow".into())
            } else {
                ExchangeError::Unavailable("unreachable".into())
            }
        })?;
        let status = response.status().as_u16();
        if response.content_length().is_some_and(|n| n > MAX_ANSWER_BYTES as u64) {
            return Err(ExchangeError::Invalid(format!("its answer is larger than {MAX_ANSWER_BYTES} bytes")));
        }
        let body = read_capped(&mut response, MAX_ANSWER_BYTES)
            .await
            .map_err(|_| ExchangeError::Unavailable("its answer broke off".into()))?
            .ok_or_else(|| ExchangeError::Invalid(format!("its answer is larger than {MAX_ANSWER_BYTES} bytes")))?;
        Ok((status, body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_answer_is_a_bearer_token_of_sound_characters() {
        let good = br#"{"access_token":"at-1","token_type":"Bearer","expires_in":3600,"refresh_token":"rt-1","scope":"inbox.read"}"#;
        let answer = parse_token_answer(200, good).unwrap();
        assert_eq!(
            (answer.access_token.as_str(), answer.expires_in, answer.scope.as_deref()),
            ("at-1", Some(3600), Some("inbox.read"))
        );
        assert_eq!(answer.refresh_token.as_deref(), Some("rt-1"));
        assert!(!format!("{answer:?}").contains("at-1"));
        for (status, bad, kind) in [
            (200, &br#"{"access_token":"at","token_type":"mac"}"#[..], "Invalid"),
            (200, br#"{"token_type":"Bearer"}"#, "Invalid"),
            (200, br#"{"access_token":"a\nb","token_type":"Bearer"}"#, "Invalid"),
            (200, br#"{"access_token":"at","token_type":"Bearer","scope":"a \"b"}"#, "Invalid"),
            (200, b"<html>", "Invalid"),
            (400, br#"{"error":"invalid_grant"}"#, "Refused"),
            (400, br#"{"error":"temporarily_unavailable"}"#, "Unavailable"),
            (503, b"<html>down</html>", "Unavailable"),
            (502, br#"{"error":"invalid_grant"}"#, "Unavailable"),
        ] {
            let got = parse_token_answer(status, bad).unwrap_err();
            assert!(format!("{got:?}").starts_with(kind), "{status} {:?}: {got:?}", String::from_utf8_lossy(bad));
        }
        // Expiry: a string is read, nonsense ignored.
        let lenient = br#"{"access_token":"at","token_type":"bearer","expires_in":"60"}"#;
        assert_eq!(parse_token_answer(200, lenient).unwrap().expires_in, Some(60));
        let negative = br#"{"access_token":"at","token_type":"bearer","expires_in":-5}"#;
        assert_eq!(parse_token_answer(200, negative).unwrap().expires_in, None);
    }

    #[test]
    fn a_providers_metadata_must_name_its_issuer_and_sound_endpoints() {
        let issuer = "https://login.example";
        let good = br#"{"issuer":"https://login.example","authorization_endpoint":"https://login.example/auth","token_endpoint":"https://login.example/token","revocation_endpoint":"https://login.example/revoke","authorization_response_iss_parameter_supported":true,"code_challenge_methods_supported":["S256"]}"#;
        let document = parse_document(good, issuer, false).unwrap();
        assert!(document.iss_in_response);
        assert_eq!(document.revocation_endpoint.as_deref(), Some("https://login.example/revoke"));
        for bad in [
            &br#"{"issuer":"https://evil.example","authorization_endpoint":"https://login.example/auth","token_endpoint":"https://login.example/token"}"#[..],
            br#"{"issuer":"https://login.example","token_endpoint":"https://login.example/token"}"#,
            br#"{"issuer":"https://login.example","authorization_endpoint":"http://login.example/auth","token_endpoint":"https://login.example/token"}"#,
            br#"{"issuer":"https://login.example","authorization_endpoint":"https://login.example/auth","token_endpoint":"https://login.example/token","code_challenge_methods_supported":["plain"]}"#,
            br#"[1]"#,
        ] {
            assert!(parse_document(bad, issuer, false).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn a_providers_text_is_quoted_cut_and_without_control_characters() {
        assert_eq!(quoted("invalid_grant"), "invalid_grant");
        assert_eq!(quoted("a\nb\u{1b}[31m"), "ab[31m");
        assert_eq!(quoted(&"x".repeat(500)).chars().count(), QUOTED_CHARS + 1);
    }
}
