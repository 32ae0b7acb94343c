//! The API over HTTP on 127.0.0.1: it answers a person only their own
//! messages, only with a valid token holding the scope, and records what
//! reached it.

mod support;

use fake_inbox::Options;
use serde_json::{Value, json};
use std::time::Duration;
use support::*;

/// A fake-inbox taking the tokens of both a test issuer and its own provider.
async fn inbox() -> (String, fake_inbox::Inbox, TestIssuer) {
    let issuer = TestIssuer::start("key-1").await;
    let provider = fake_inbox::ProviderOptions::new(CLIENT_ID, CLIENT_SECRET, REDIRECT_URI);
    let issuer_url = issuer.url.clone();
    let (base, inbox) =
        fake_inbox::spawn(|url| Options { issuer: Some(issuer_url), provider: Some(provider), ..Options::new(url) })
            .await
            .unwrap();
    (base, inbox, issuer)
}

#[tokio::test]
async fn each_person_gets_only_their_own_messages() {
    let (base, _inbox, issuer) = inbox().await;
    let alice = issuer.sign(issuer.claims("alice", &base, "inbox.read"));
    let bob = tokens_for(&base, "bob", "inbox.read").await;
    let bob = bob["access_token"].as_str().unwrap();

    let (status, _, body) = get(&format!("{base}/v1/messages"), Some(&alice)).await;
    assert_eq!((status, ids(&body)), (200, vec!["a-3", "a-2", "a-1"]));
    let first = &body["messages"][0];
    assert_eq!(first["from"], "Sam Okafor <sam@example.com>");
    assert_eq!(
        (&first["subject"], &first["received_at"], &first["unread"]),
        (&json!("Lunch on Thursday?"), &json!("2026-12-01T11:45:00Z"), &json!(true))
    );
    let (status, _, body) = get(&format!("{base}/v1/messages?unread=true"), Some(bob)).await;
    assert_eq!((status, ids(&body)), (200, vec!["b-2"]));
    let (status, _, body) = get(&format!("{base}/v1/messages?unread=false"), Some(bob)).await;
    assert_eq!((status, ids(&body)), (200, vec!["b-2", "b-1"]));
    assert_eq!(get(&format!("{base}/v1/messages?unread=maybe"), Some(bob)).await.0, 400);

    // One message: one's own, never another's (as if it did not exist).
    let (status, _, body) = get(&format!("{base}/v1/messages/a-2"), Some(&alice)).await;
    assert_eq!(
        (status, body["subject"].as_str(), body["body"].as_str().is_some()),
        (200, Some("Quarterly planning: agenda"), true)
    );
    let (status, _, body) = get(&format!("{base}/v1/messages/a-2"), Some(bob)).await;
    assert_eq!((status, &body["error"]["code"]), (404, &json!("not_found")));

    // Someone a valid token names but who has no mailbox has no messages.
    let carol = issuer.sign(issuer.claims("carol", &base, "inbox.read"));
    let (status, _, body) = get(&format!("{base}/v1/messages"), Some(&carol)).await;
    assert_eq!((status, body), (200, json!({"messages": []})));
}

#[tokio::test]
async fn no_token_a_foreign_an_expired_or_an_under_scoped_one_is_refused() {
    let (base, _inbox, issuer) = inbox().await;
    let messages = format!("{base}/v1/messages");

    let (status, challenge, body) = get(&messages, None).await;
    assert_eq!((status, challenge.as_deref()), (401, Some(r#"Bearer realm="fake-inbox""#)));
    assert_eq!(body["error"]["code"], "no_token");

    let invalid = |why: &'static str| {
        move |(status, challenge, body): (u16, Option<String>, Value)| {
            assert_eq!(status, 401, "{why}: {body}");
            assert!(challenge.unwrap().starts_with(r#"Bearer realm="fake-inbox", error="invalid_token""#), "{why}");
            assert_eq!(body["error"]["code"], "invalid_token", "{why}");
            let message = body["error"]["message"].as_str().unwrap().to_string();
            assert!(message.contains(why), "{why}: {message}");
        }
    };
    invalid("not valid")(get(&messages, Some("fia_made-up")).await);
    let claims = issuer.claims("alice", &base, "inbox.read");
    invalid("signature")(get(&messages, Some(&issuer.forge(claims.clone()))).await);
    let mut other = claims.clone();
    other["iss"] = json!("http://127.0.0.1:1");
    invalid("another issuer")(get(&messages, Some(&issuer.sign(other))).await);
    let mut other = claims.clone();
    other["aud"] = json!("http://127.0.0.1:1");
    invalid("not for this API")(get(&messages, Some(&issuer.sign(other))).await);
    let mut other = claims.clone();
    other["exp"] = json!(1_000_000);
    invalid("expired")(get(&messages, Some(&issuer.sign(other))).await);
    // An ID token, or any JWT not typed as an access token, is no access token.
    let header = json!({"alg": "ES256", "typ": "JWT", "kid": issuer.kid});
    invalid("typ at+jwt")(get(&messages, Some(&issuer.sign_with_header(header, claims.clone()))).await);
    let header = json!({"alg": "HS256", "typ": "at+jwt", "kid": issuer.kid});
    invalid("signature")(get(&messages, Some(&issuer.sign_with_header(header, claims.clone()))).await);
    // Not a bearer token at all.
    let basic = reqwest::Client::new().get(&messages).basic_auth("alice", Some("x")).send().await.unwrap();
    assert_eq!(basic.status(), 401);

    // A valid token without the scope: 403, naming the scope.
    let reader = issuer.sign(claims.clone());
    let response = http().post(format!("{base}/v1/messages/a-3/read")).bearer_auth(&reader).send().await.unwrap();
    assert_eq!(response.status(), 403);
    assert_eq!(
        response.headers()["www-authenticate"],
        r#"Bearer realm="fake-inbox", error="insufficient_scope", scope="inbox.write""#
    );
    let writer = issuer.sign(issuer.claims("alice", &base, "inbox.write"));
    assert_eq!(get(&messages, Some(&writer)).await.0, 403);
    let response = http().post(format!("{base}/v1/messages/a-3/read")).bearer_auth(&writer).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.json::<Value>().await.unwrap()["unread"], false);
}

#[tokio::test]
async fn the_providers_tokens_expire_and_jwts_need_an_issuer() {
    // Access tokens issued already expired.
    let (base, _inbox) = inbox_with_provider(Duration::ZERO).await;
    let tokens = tokens_for(&base, "alice", "inbox.read").await;
    assert_eq!(tokens["expires_in"], 0);
    let (status, _, body) = get(&format!("{base}/v1/messages"), tokens["access_token"].as_str()).await;
    assert_eq!((status, &body["error"]["code"]), (401, &json!("invalid_token")));

    // This server trusts no issuer: a well-signed JWT is no token of its.
    let issuer = TestIssuer::start("key-1").await;
    let jwt = issuer.sign(issuer.claims("alice", &base, "inbox.read"));
    assert_eq!(get(&format!("{base}/v1/messages"), Some(&jwt)).await.0, 401);
}

#[tokio::test]
async fn the_record_says_which_token_reached_it_for_whom() {
    let (base, inbox, issuer) = inbox().await;
    let alice = issuer.sign(issuer.claims("alice", &base, "inbox.read"));
    get(&format!("{base}/v1/messages"), Some(&alice)).await;
    get(&format!("{base}/v1/messages"), Some("wrong")).await;
    let seen = inbox.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(
        (seen[0].authorization.clone(), seen[0].user.as_deref()),
        (Some(format!("Bearer {alice}")), Some("alice"))
    );
    assert_eq!(
        (seen[0].scopes.as_slice(), seen[0].token.as_deref(), seen[0].status),
        (&["inbox.read".to_string()][..], Some("jwt"), 200)
    );
    assert_eq!((seen[1].user.as_deref(), seen[1].status, seen[1].path.as_str()), (None, 401, "/v1/messages"));
    // The same over HTTP, without counting itself.
    let (status, _, record) = get(&format!("{base}/test/seen"), None).await;
    assert_eq!((status, &record["total"]), (200, &json!(2)));
    assert_eq!(record["requests"][0]["authorization"], format!("Bearer {alice}"));
    assert_eq!(inbox.seen().len(), 2);
}

#[tokio::test]
async fn headers_are_echoed_redirects_go_where_asked_and_the_collector_keeps_what_it_is_sent() {
    let (base, inbox, _issuer) = inbox().await;
    let response = http()
        .get(format!("{base}/v1/echo-headers"))
        .bearer_auth("echo-me")
        .header("x-extra", "1")
        .send()
        .await
        .unwrap();
    let echoed: Value = response.json().await.unwrap();
    assert_eq!(
        (&echoed["headers"]["authorization"], &echoed["headers"]["x-extra"]),
        (&json!("Bearer echo-me"), &json!("1"))
    );

    let to = "http://127.0.0.1:9/collect?from=redirect";
    let response = http().get(format!("{base}/v1/redirect")).query(&[("to", to)]).send().await.unwrap();
    assert_eq!((response.status().as_u16(), response.headers()["location"].to_str().unwrap()), (307, to));
    for bad in ["javascript:alert(1)", "/relative", ""] {
        let response = http().get(format!("{base}/v1/redirect")).query(&[("to", bad)]).send().await.unwrap();
        assert_eq!(response.status(), 400, "{bad}");
    }

    let response = http().post(format!("{base}/collect")).body("what the tool learned").send().await.unwrap();
    assert_eq!(response.status(), 204);
    let collected = inbox.seen().into_iter().find(|r| r.path == "/collect").unwrap();
    assert_eq!(collected.body.as_deref(), Some("what the tool learned"));

    // Bodies are bounded.
    let response = http().post(format!("{base}/collect")).body(vec![b'x'; 65 * 1024]).send().await.unwrap();
    assert_eq!(response.status(), 413);
}
