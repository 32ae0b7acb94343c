//! The inbox API as this tool uses it: the URL it calls and what its
//! answers mean, apart from the bindings so that it is tested natively
//! (`cargo test -p my-inbox`).

use plinth_sdk::ToolError;
use serde::Deserialize;

/// One message as the API lists it.
#[derive(Debug, Deserialize, PartialEq, Eq)]
pub(crate) struct Listed {
    pub(crate) id: String,
    pub(crate) from: String,
    pub(crate) subject: String,
    pub(crate) received_at: String,
    pub(crate) unread: bool,
    #[serde(default)]
    pub(crate) snippet: String,
}

#[derive(Deserialize)]
struct Listing {
    messages: Vec<Listed>,
}

/// The API's error body, `{"error": {"code", "message"}}`.
#[derive(Deserialize)]
struct Failure {
    error: FailureDetail,
}

#[derive(Deserialize)]
struct FailureDetail {
    code: String,
    message: String,
}

/// The most of the API's own words put in a developer message.
const MAX_DETAIL_CHARS: usize = 200;

/// The listing's URL at `base` (with or without a trailing slash).
pub(crate) fn messages_url(base: &str, unread_only: bool) -> String {
    let base = base.trim_end_matches('/');
    if unread_only { format!("{base}/v1/messages?unread=true") } else { format!("{base}/v1/messages") }
}

/// The messages of a listing answered with `status` and `body`, or the
/// tool error that says what went wrong.
pub(crate) fn messages(status: u16, body: &[u8]) -> Result<Vec<Listed>, ToolError> {
    if !(200..300).contains(&status) {
        return Err(refusal(status, body));
    }
    serde_json::from_slice::<Listing>(body).map(|l| l.messages).map_err(|e| {
        ToolError::new("the inbox sent an answer this tool does not understand").with_developer_message(e.to_string())
    })
}

/// What an answer other than 2xx means for the caller.
fn refusal(status: u16, body: &[u8]) -> ToolError {
    let detail = match serde_json::from_slice::<Failure>(body) {
        Ok(f) => format!("inbox answered HTTP {status} {}: {}", f.error.code, f.error.message),
        Err(_) => format!("inbox answered HTTP {status}"),
    };
    let detail: String = detail.chars().take(MAX_DETAIL_CHARS).collect();
    match status {
        401 => {
            ToolError::new("the inbox did not accept the person's authorization: their account must be connected again")
                .with_developer_message(detail)
                .with_prompt_content(
                    "Tell the person their inbox account is no longer connected and that they will be asked to \
                 connect it again; then call the tool again.",
                )
        }
        403 => ToolError::new("the person's authorization does not allow reading their inbox (scope inbox.read)")
            .with_developer_message(detail)
            .with_prompt_content("Tell the person this tool needs permission to read their inbox."),
        500.. => ToolError::retry("the inbox is unavailable right now", 2000).with_developer_message(detail),
        _ => ToolError::new("the inbox could not answer this request").with_developer_message(detail),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_asks_for_unread_messages_only_when_told() {
        assert_eq!(messages_url("http://127.0.0.1:8091/", false), "http://127.0.0.1:8091/v1/messages");
        assert_eq!(messages_url("http://127.0.0.1:8091", true), "http://127.0.0.1:8091/v1/messages?unread=true");
    }

    #[test]
    fn a_listing_is_read_as_messages() {
        let body =
            br#"{"messages": [{"id": "a-3", "from": "Sam Okafor <sam@example.com>", "subject": "Lunch on Thursday?",
            "received_at": "2026-12-01T11:45:00Z", "unread": true, "snippet": "The new place", "extra": 1}]}"#;
        let listed = messages(200, body).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!((listed[0].id.as_str(), listed[0].from.as_str()), ("a-3", "Sam Okafor <sam@example.com>"));
        assert!(listed[0].unread);
        let error = messages(200, b"<html>").unwrap_err();
        assert_eq!(error.message, "the inbox sent an answer this tool does not understand");
    }

    #[test]
    fn refusals_say_what_the_person_must_do() {
        let body = br#"{"error": {"code": "invalid_token", "message": "the token expired"}}"#;
        let unauthorized = messages(401, body).unwrap_err();
        assert!(unauthorized.message.contains("must be connected again"));
        assert_eq!(
            unauthorized.developer_message.as_deref(),
            Some("inbox answered HTTP 401 invalid_token: the token expired")
        );
        assert!(!unauthorized.can_retry);
        let forbidden = messages(403, br#"{"error": {"code": "insufficient_scope", "message": "x"}}"#).unwrap_err();
        assert!(forbidden.message.contains("scope inbox.read"), "{}", forbidden.message);
        let down = messages(503, b"").unwrap_err();
        assert_eq!(
            (down.can_retry, down.retry_after_ms, down.developer_message.as_deref()),
            (true, Some(2000), Some("inbox answered HTTP 503"))
        );
        let long = format!(r#"{{"error": {{"code": "x", "message": "{}"}}}}"#, "y".repeat(1000));
        assert_eq!(
            messages(400, long.as_bytes()).unwrap_err().developer_message.unwrap().chars().count(),
            MAX_DETAIL_CHARS
        );
    }
}
