//! Malformed input that once broke a parser, replayed against the real
//! server: each is refused with a clean error, and the server keeps serving.
//! (The parsers themselves are property-tested beside their code, in
//! `host/src/*/proptests.rs`.)

use crate::support::{Server, invocation, outputs, plugins_dir, with_manifest};
use serde_json::{Value, json};

/// A `when` condition with a syntax error past column 65 535 made the CEL
/// parser panic while rendering its error, so the deploy never answered.
/// It is refused, and the server goes on serving.
#[tokio::test]
async fn a_confirmation_condition_too_long_to_parse_is_refused() {
    let server = Server::start(&[]);
    let echo = std::fs::read(plugins_dir().join("echo.wasm")).unwrap();
    let hostile = with_manifest(&echo, |m| {
        m["world"] = json!("echo-too");
        m["confirmation"] = json!({ "when": format!("{})", "d".repeat(70_000)) });
    });
    let (status, body) = server.deploy(hostile, "").await;
    assert_eq!((status, body["error"]["code"].clone()), (400, json!("condition_too_costly")), "{body}");
    assert_eq!(body["error"]["limit"], "max_chars", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("[confirmation]") && message.contains("70001"), "{message}");

    // A condition of a normal size in the same place deploys.
    let fine = with_manifest(&echo, |m| {
        m["world"] = json!("echo-too");
        m["confirmation"] = json!({ "when": "text == 'launch'" });
    });
    let (status, body) = server.deploy(fine, "").await;
    assert_eq!(status, 201, "{body}");

    let id = server.tool_id("echo").await;
    let (status, body) =
        server.post(&format!("/tools/{id}:invoke"), &invocation("echo", &[("text", json!("hi"))])).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(outputs(&body)["text"], "hi");
}

/// Anyone holding a resource URI may post a CHEQ to it (no key), and each
/// signature costs an Ed25519 verification: a body of copies of the
/// server's own signature bought hundreds of them per request. More than
/// `MAX_SIGNATURES` signatures are refused before any is verified, and the
/// transaction can still be confirmed.
#[tokio::test]
async fn a_cheq_with_copies_of_a_signature_is_refused() {
    use crate::cheq::{booking, call_for, confirming_server, fetch};
    let (server, _plugins) = confirming_server(&[]).await;
    let (status, _, pack) = call_for(&server, Some("alice"), "book_flight", &booking("FIRST", 2)).await;
    assert_eq!(status, 202, "{pack}");
    let resource = pack["resource uri"].as_str().unwrap();
    let (_, _, mut signed) = fetch(resource).await;
    let entry = signed["signatures"][0].clone();
    signed["signatures"] = Value::Array(vec![entry; 300]);

    let response = reqwest::Client::new().post(format!("{resource}?accept")).json(&signed).send().await.unwrap();
    assert_eq!(response.status(), 403);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_signature", "{body}");
    let limit = format!("more than {} signatures are refused", plinth::cheq::MAX_SIGNATURES);
    assert!(body["error"]["message"].as_str().unwrap().contains(&limit), "{body}");

    // Nothing was decided: the transaction is still pending.
    let (status, _, body) = fetch(pack["result uri"].as_str().unwrap()).await;
    assert_eq!(status, 202, "{body}");
}
