//! What a tenant's authorization provider sends (issue 65): its metadata
//! document, its token endpoint's answers (any status), and what comes
//! back through a response Plinth scrubs a person's token out of.
//!
//! The first byte picks what the rest feeds. Properties beyond "no panic":
//! - accepted metadata names the issuer asked for and only `https`
//!   endpoints (http not allowed here);
//! - an accepted token answer is a Bearer token of printable ASCII, at most
//!   16 KiB, its expiry within ten years, its scopes sound; an answer with
//!   a status outside 2xx is never accepted;
//! - a provider's text quoted in a message has no control character and
//!   at most 121 characters;
//! - accepted settings name only `https` URLs and never set a parameter
//!   Plinth sets itself;
//! - a response streamed in any frames, scrubbed of a token (a Bearer
//!   b64token), is what the whole response scrubbed at once is: the same
//!   length, and no occurrence of the token left in it.
#![no_main]

use arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use plinth::host::authorizations::fuzzing;
use plinth::runtime::outbound::token_fuzzing;

const ISSUER: &str = "https://login.example.com";

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else { return };
    let mut u = Unstructured::new(rest);
    let _ = match which % 5 {
        0 => document(rest),
        1 => token_answer(&mut u),
        2 => quoted(rest),
        3 => settings(rest),
        _ => scrub(&mut u),
    };
});

fn document(data: &[u8]) -> Result<()> {
    if let Ok(document) = fuzzing::document(data, ISSUER, false) {
        assert_eq!(document.issuer.as_deref(), Some(ISSUER));
        for url in [Some(&document.authorization_endpoint), Some(&document.token_endpoint), document.revocation_endpoint.as_ref()]
            .into_iter()
            .flatten()
        {
            assert!(url.starts_with("https://"), "{url}");
        }
    }
    Ok(())
}

fn token_answer(u: &mut Unstructured) -> Result<()> {
    let status: u16 = u.int_in_range(100..=599)?;
    let body = u.bytes(u.len())?;
    if let Ok(answer) = fuzzing::token_answer(status, body) {
        assert!((200..300).contains(&status), "accepted with {status}");
        assert!(!answer.access_token.is_empty() && answer.access_token.len() <= 16 * 1024);
        assert!(answer.access_token.bytes().all(|b| (0x20..0x7f).contains(&b)));
        assert!(answer.expires_in.is_none_or(|s| (0..=10 * 365 * 24 * 3600).contains(&s)));
        if let Some(scope) = &answer.scope {
            assert!(scope.split_ascii_whitespace().all(plinth::manifest::is_scope), "{scope}");
        }
    }
    Ok(())
}

fn quoted(data: &[u8]) -> Result<()> {
    let text = String::from_utf8_lossy(data);
    let quoted = fuzzing::quoted(&text);
    assert!(!quoted.chars().any(char::is_control));
    assert!(quoted.chars().count() <= 121);
    Ok(())
}

fn settings(data: &[u8]) -> Result<()> {
    if let Ok(settings) = fuzzing::settings("inbox", data) {
        for url in [&settings.issuer, &settings.authorization_endpoint, &settings.token_endpoint, &settings.revocation_endpoint]
            .into_iter()
            .flatten()
        {
            assert!(url.starts_with("https://"), "{url}");
        }
        for own in ["redirect_uri", "state", "scope", "client_id", "code_challenge"] {
            assert!(!settings.authorization_parameters.contains_key(own), "{own}");
        }
    }
    Ok(())
}

/// A Bearer token (RFC 6750's b64token: what providers issue; `*`, which
/// scrubbing writes, is not one of its characters).
fn b64token(u: &mut Unstructured) -> Result<String> {
    const CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~+/";
    let length: usize = u.int_in_range(1..=24)?;
    (0..length).map(|_| Ok(char::from(*u.choose(CHARS)?))).collect()
}

fn scrub(u: &mut Unstructured) -> Result<()> {
    let token = b64token(u)?;
    let frames: Vec<Vec<u8>> = u.arbitrary()?;
    let frames: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
    let Some(streamed) = token_fuzzing::scrub_frames(&frames, &token) else { return Ok(()) };
    let whole: Vec<u8> = frames.concat();
    assert_eq!(streamed.len(), whole.len(), "the length is kept");
    assert_eq!(streamed, token_fuzzing::scrub_whole(&whole, &token), "streamed as scrubbed at once");
    assert!(!streamed.windows(token.len()).any(|w| w == token.as_bytes()), "the token is gone");
    Ok(())
}
