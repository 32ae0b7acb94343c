//! External issuers: a tenant's identity provider's JWT access tokens,
//! verified by its keys (found through its OIDC discovery document) and
//! read as a grant to one of the tenant's end users.

use super::{OAuthSetting, SCOPES};
use crate::digest::sha256_hex;
use crate::host::ToolHost;
use crate::host::fetcher::Requester;
use crate::store::StoreError;
use crate::tenancy::TokenGrant;
use serde_json::Value;

/// How far an external token's `exp` and `nbf` may be off this server's
/// clock.
const CLOCK_LEEWAY_SECS: i64 = 60;
/// The longest bearer read as an external JWT.
pub(super) const MAX_JWT_BYTES: usize = 16 * 1024;

/// Whether a JWT's header `typ` (if it has one) is an access token's (RFC
/// 9068 §2.1: `at+jwt`, or its full media type): an ID token or any other
/// JWT the provider signs is not one. Media types ignore case.
pub(super) fn access_token_type(typ: Option<&str>) -> bool {
    typ.is_none_or(|typ| typ.eq_ignore_ascii_case("at+jwt") || typ.eq_ignore_ascii_case("application/at+jwt"))
}

/// What a verified external token's `claims` grant at `resource`, or why
/// nothing: issued by `issuer`, for `resource`, live at `now`, naming a
/// valid end user in the setting's claim. Its scopes are those of
/// [`SCOPES`] it carries.
pub(super) fn granted_by(
    setting: &OAuthSetting,
    issuer: &str,
    claims: &Value,
    resource: &str,
    now: i64,
    token: &str,
) -> Result<TokenGrant, &'static str> {
    if claims["iss"].as_str() != Some(issuer) {
        return Err("another issuer");
    }
    let audience = match &claims["aud"] {
        Value::String(aud) => aud == resource,
        Value::Array(auds) => auds.iter().any(|a| a.as_str() == Some(resource)),
        _ => false,
    };
    if !audience {
        return Err("not for this MCP URL");
    }
    // Saturating: the claims are the issuer's numbers, any i64.
    if claims["exp"].as_i64().is_none_or(|exp| exp.saturating_add(CLOCK_LEEWAY_SECS) <= now)
        || claims["nbf"].as_i64().is_some_and(|nbf| nbf.saturating_sub(CLOCK_LEEWAY_SECS) > now)
    {
        return Err("expired or not yet valid");
    }
    let end_user = claims[&setting.end_user_claim]
        .as_str()
        .filter(|u| crate::host::is_end_user_name(u))
        .ok_or("no valid end user in its end-user claim")?;
    let carried: Vec<&str> = match &claims[&setting.scope_claim] {
        Value::String(scopes) => scopes.split(' ').collect(),
        Value::Array(scopes) => scopes.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let scopes =
        carried.into_iter().filter(|s| SCOPES.iter().any(|(known, _)| known == s)).map(str::to_string).collect();
    let client_id = claims["client_id"].as_str().or(claims["azp"].as_str()).unwrap_or("").to_string();
    let family = claims["jti"].as_str().map_or_else(|| sha256_hex(token.as_bytes())[..32].to_string(), str::to_string);
    Ok(TokenGrant { client_id, end_user: end_user.to_string(), scopes, resource: resource.to_string(), family })
}

/// A JWT (compact JWS) taken apart: what was signed, the signature, its
/// header's `alg`, `kid` and `typ`, its claims.
pub(super) struct Jwt {
    signed: String,
    signature: Vec<u8>,
    alg: String,
    kid: Option<String>,
    pub(super) typ: Option<String>,
    pub(super) claims: Value,
}

impl Jwt {
    pub(super) fn parse(token: &str) -> Option<Jwt> {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let mut parts = token.split('.');
        let (header, payload, signature) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() {
            return None;
        }
        let header: Value = serde_json::from_slice(&b64.decode(header).ok()?).ok()?;
        let claims: Value = serde_json::from_slice(&b64.decode(payload).ok()?).ok()?;
        Some(Jwt {
            signed: format!("{}.{}", token.split('.').next()?, token.split('.').nth(1)?),
            signature: b64.decode(signature).ok()?,
            alg: header["alg"].as_str()?.to_string(),
            kid: header["kid"].as_str().map(str::to_string),
            typ: header["typ"].as_str().map(str::to_string),
            claims: claims.is_object().then_some(claims)?,
        })
    }

    /// Whether it names a key (`kid`) that `jwks` does not have.
    pub(super) fn names_a_key_not_in(&self, jwks: &Value) -> bool {
        let keys = jwks["keys"].as_array().map(Vec::as_slice).unwrap_or_default();
        self.kid.as_deref().is_some_and(|kid| !keys.iter().any(|k| k["kid"].as_str() == Some(kid)))
    }

    /// Whether a key of `jwks` (the one its `kid` names, else any of the
    /// right type) signed it, with `ES256`, `RS256` or `EdDSA`.
    pub(super) fn verified_by(&self, jwks: &Value) -> bool {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let field = |key: &Value, name: &str| key[name].as_str().and_then(|v| b64.decode(v).ok());
        let keys = jwks["keys"].as_array().map(Vec::as_slice).unwrap_or_default();
        let candidates = keys.iter().filter(|k| self.kid.is_none() || k["kid"].as_str() == self.kid.as_deref());
        candidates.take(8).any(|key| match (self.alg.as_str(), key["kty"].as_str()) {
            ("ES256", Some("EC")) if key["crv"] == "P-256" => {
                let (Some(x), Some(y)) = (field(key, "x"), field(key, "y")) else { return false };
                let point = [&[4u8][..], &x, &y].concat();
                ring::signature::UnparsedPublicKey::new(&ring::signature::ECDSA_P256_SHA256_FIXED, point)
                    .verify(self.signed.as_bytes(), &self.signature)
                    .is_ok()
            }
            ("RS256", Some("RSA")) => {
                let (Some(n), Some(e)) = (field(key, "n"), field(key, "e")) else { return false };
                ring::signature::RsaPublicKeyComponents { n, e }
                    .verify(&ring::signature::RSA_PKCS1_2048_8192_SHA256, self.signed.as_bytes(), &self.signature)
                    .is_ok()
            }
            ("EdDSA", Some("OKP")) if key["crv"] == "Ed25519" => {
                let Some(x) = field(key, "x").and_then(|x| <[u8; 32]>::try_from(x).ok()) else { return false };
                let Ok(signature) = ed25519_dalek::Signature::from_slice(&self.signature) else { return false };
                ed25519_dalek::VerifyingKey::from_bytes(&x)
                    .is_ok_and(|k| k.verify_strict(self.signed.as_bytes(), &signature).is_ok())
            }
            _ => false,
        })
    }
}

impl ToolHost {
    /// What an external identity provider's JWT access token grants at
    /// `tenant`'s MCP URL `resource`, if it is one: typed as an access token
    /// where it says (`typ`, RFC 9068), signed by a key of the tenant's
    /// issuer (its OIDC discovery document's `jwks_uri`, fetched and cached
    /// under the outbound policy; fetched again, at most once every 30 s,
    /// when the token names a key the cached set lacks), issued by it, for
    /// `resource` (`aud`), live (`exp`, `nbf`, a minute's leeway), naming
    /// in the configured claim one of the tenant's end users (anyone, if
    /// the operator allowed it). `None` for anything else.
    pub async fn external_grant(
        &self,
        tenant: &str,
        token: &str,
        resource: &str,
    ) -> Result<Option<TokenGrant>, StoreError> {
        let Some(setting) = self.oauth.settings.get(tenant).map(|s| s.clone()).filter(|s| s.enabled) else {
            return Ok(None);
        };
        let Some(issuer) = setting.issuer.as_deref() else { return Ok(None) };
        if token.len() > MAX_JWT_BYTES {
            return Ok(None);
        }
        let refuse = |why: &str| {
            tracing::info!(tenant, why, "an external access token was refused");
            Ok(None)
        };
        let Some(jwt) = Jwt::parse(token) else { return Ok(None) };
        if !access_token_type(jwt.typ.as_deref()) {
            return refuse("its `typ` is not an access token's (at+jwt)");
        }
        let providers = &self.oauth.providers;
        // The tenant's own setting names the issuer: its fetches hold the
        // tenant's share of the places.
        let requester = Some(Requester::Tenant(tenant));
        let discovery = match providers.get_for(&format!("{issuer}/.well-known/openid-configuration"), requester).await
        {
            Ok(document) => document,
            Err(e) => {
                tracing::warn!(tenant, error = %e, "the tenant's identity provider's discovery document was not used");
                return Ok(None);
            }
        };
        if discovery["issuer"].as_str() != Some(issuer) {
            return refuse("the discovery document names another issuer");
        }
        let Some(jwks_uri) = discovery["jwks_uri"].as_str() else { return Ok(None) };
        let mut keys = providers.get_for(jwks_uri, requester).await;
        // A key the cached set lacks: the provider may have rotated its
        // keys since (a refetch at most every 30 s per URL).
        if keys.as_ref().is_ok_and(|keys| jwt.names_a_key_not_in(keys)) {
            keys = providers.refetch(jwks_uri, requester).await;
        }
        let keys = match keys {
            Ok(keys) => keys,
            Err(e) => {
                tracing::warn!(tenant, error = %e, "the tenant's identity provider's keys were not used");
                return Ok(None);
            }
        };
        if !jwt.verified_by(&keys) {
            return refuse("no key of the issuer signed it");
        }
        let grant = match granted_by(&setting, issuer, &jwt.claims, resource, crate::tenancy::unix_now(), token) {
            Ok(grant) => grant,
            Err(why) => return refuse(why),
        };
        if !self.end_user_may_act(tenant, &setting, &grant.end_user)? {
            return refuse("its end-user claim names none of the tenant's end users");
        }
        Ok(Some(grant))
    }

    /// Whether an external token naming `end_user` may act as them: one of
    /// `tenant`'s end users, or anyone when its operator allowed it
    /// ([`OAuthSetting::any_end_user`]).
    pub(in crate::host) fn end_user_may_act(
        &self,
        tenant: &str,
        setting: &OAuthSetting,
        end_user: &str,
    ) -> Result<bool, StoreError> {
        if setting.any_end_user {
            return Ok(true);
        }
        Ok(crate::store::off_the_workers(|| self.store.end_user(tenant, end_user))?.is_some())
    }
}
