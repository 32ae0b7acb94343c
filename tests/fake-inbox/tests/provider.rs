//! The built-in provider over HTTP on 127.0.0.1: discovery, the sign-in
//! page, code + PKCE, refresh with rotation, revocation, and the requests it
//! must refuse.

mod support;

use serde_json::{Value, json};
use std::time::Duration;
use support::*;

const HOUR: Duration = Duration::from_secs(3600);

#[tokio::test]
async fn code_pkce_refresh_and_revocation_work_end_to_end() {
    let (base, _inbox) = inbox_with_provider(HOUR).await;
    let messages = format!("{base}/v1/messages");

    let (status, _, metadata) = get(&format!("{base}/.well-known/oauth-authorization-server"), None).await;
    assert_eq!(status, 200);
    assert_eq!(metadata["issuer"], base);
    assert_eq!(metadata["authorization_endpoint"], format!("{base}/authorize"));
    assert_eq!(metadata["token_endpoint"], format!("{base}/token"));
    assert_eq!(metadata["revocation_endpoint"], format!("{base}/revoke"));
    assert_eq!(metadata["code_challenge_methods_supported"], json!(["S256"]));
    assert_eq!(metadata["authorization_response_iss_parameter_supported"], true);
    assert_eq!(metadata["token_endpoint_auth_methods_supported"], json!(["client_secret_basic", "client_secret_post"]));

    // Code + PKCE: alice's tokens answer alice's messages.
    let (code, verifier) = sign_in(&base, "alice", "inbox.read").await;
    let exchange = |code: &str, verifier: &str| {
        [
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", REDIRECT_URI),
            ("code_verifier", verifier),
        ]
        .map(|(k, v)| (k, v.to_string()))
    };
    let form = exchange(&code, &verifier);
    let form: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (status, tokens) = token(&base, &form).await;
    assert_eq!(status, 200, "{tokens}");
    assert_eq!(
        (&tokens["token_type"], &tokens["scope"], &tokens["expires_in"]),
        (&json!("Bearer"), &json!("inbox.read"), &json!(3600))
    );
    let access = tokens["access_token"].as_str().unwrap().to_string();
    let (status, _, body) = get(&messages, Some(&access)).await;
    assert_eq!((status, ids(&body)), (200, vec!["a-3", "a-2", "a-1"]));

    // The code again: refused, and what it made is revoked.
    let (status, error) = token(&base, &form).await;
    assert_eq!((status, &error["error"]), (400, &json!("invalid_grant")));
    assert_eq!(get(&messages, Some(&access)).await.0, 401);

    // Refresh (the client authenticating in the body): a new pair; the
    // refresh token used is spent, and presented again revokes the grant.
    let tokens = tokens_for(&base, "alice", "inbox.read").await;
    let refresh = tokens["refresh_token"].as_str().unwrap();
    let by_post = |refresh: &str| {
        [
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh),
            ("client_id", CLIENT_ID),
            ("client_secret", CLIENT_SECRET),
        ]
        .map(|(k, v)| (k, v.to_string()))
    };
    let refreshed: Value =
        http().post(format!("{base}/token")).form(&by_post(refresh)).send().await.unwrap().json().await.unwrap();
    let (new_access, new_refresh) =
        (refreshed["access_token"].as_str().unwrap(), refreshed["refresh_token"].as_str().unwrap());
    assert_ne!(new_access, tokens["access_token"].as_str().unwrap());
    assert_ne!(new_refresh, refresh);
    assert_eq!(get(&messages, Some(new_access)).await.0, 200);
    let (status, error) = token(&base, &[("grant_type", "refresh_token"), ("refresh_token", refresh)]).await;
    assert_eq!((status, error["error"].as_str()), (400, Some("invalid_grant")));
    assert!(error["error_description"].as_str().unwrap().contains("used already"), "{error}");
    assert_eq!(get(&messages, Some(new_access)).await.0, 401);
    assert_eq!(token(&base, &[("grant_type", "refresh_token"), ("refresh_token", new_refresh)]).await.0, 400);

    // Revocation (RFC 7009): a refresh token takes its grant with it; an
    // access token goes alone; an unknown token is no error.
    let revoke_url = format!("{base}/revoke");
    let revoke = |token: String| {
        let url = revoke_url.clone();
        async move {
            http()
                .post(url)
                .basic_auth(CLIENT_ID, Some(CLIENT_SECRET))
                .form(&[("token", token)])
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    let tokens = tokens_for(&base, "bob", "inbox.read").await;
    let (access, refresh) = (tokens["access_token"].as_str().unwrap(), tokens["refresh_token"].as_str().unwrap());
    assert_eq!(revoke(access.to_string()).await, 200);
    assert_eq!(get(&messages, Some(access)).await.0, 401);
    let (status, refreshed) = token(&base, &[("grant_type", "refresh_token"), ("refresh_token", refresh)]).await;
    assert_eq!(status, 200);
    let access = refreshed["access_token"].as_str().unwrap();
    let (status, _, body) = get(&messages, Some(access)).await;
    assert_eq!((status, ids(&body)), (200, vec!["b-2", "b-1"]));
    assert_eq!(revoke(refreshed["refresh_token"].as_str().unwrap().to_string()).await, 200);
    assert_eq!(get(&messages, Some(access)).await.0, 401);
    assert_eq!(
        token(
            &base,
            &[("grant_type", "refresh_token"), ("refresh_token", refreshed["refresh_token"].as_str().unwrap())]
        )
        .await
        .0,
        400
    );
    assert_eq!(revoke("never-issued".into()).await, 200);
}

#[tokio::test]
async fn the_token_endpoint_refuses_a_wrong_client_verifier_or_redirect_uri() {
    let (base, _inbox) = inbox_with_provider(HOUR).await;

    // The client's secret, by either method, never both.
    let (code, verifier) = sign_in(&base, "alice", "inbox.read").await;
    let form = [("grant_type", "authorization_code"), ("code", code.as_str()), ("code_verifier", verifier.as_str())];
    let response =
        http().post(format!("{base}/token")).basic_auth(CLIENT_ID, Some("wrong")).form(&form).send().await.unwrap();
    assert_eq!(response.status(), 401);
    assert_eq!(response.headers()["www-authenticate"], r#"Basic realm="fake-inbox""#);
    assert_eq!(response.json::<Value>().await.unwrap()["error"], "invalid_client");
    let mut both = form.to_vec();
    both.push(("client_secret", CLIENT_SECRET));
    let response = http()
        .post(format!("{base}/token"))
        .basic_auth(CLIENT_ID, Some(CLIENT_SECRET))
        .form(&both)
        .send()
        .await
        .unwrap();
    assert_eq!(
        (response.status().as_u16(), response.json::<Value>().await.unwrap()["error"].clone()),
        (400, json!("invalid_request"))
    );
    let response = http().post(format!("{base}/token")).form(&form).send().await.unwrap();
    assert_eq!(response.status(), 401);

    // The code was sent with a redirect URI: the exchange names the same.
    let (status, error) = token(&base, &form).await;
    assert_eq!((status, &error["error"]), (400, &json!("invalid_grant")));
    assert!(error["error_description"].as_str().unwrap().contains("redirect_uri"), "{error}");

    // Another verifier, or none.
    let (code, _) = sign_in(&base, "alice", "inbox.read").await;
    let (other, _) = pkce();
    let form = [
        ("grant_type", "authorization_code"),
        ("code", &code),
        ("redirect_uri", REDIRECT_URI),
        ("code_verifier", &other),
    ];
    let (status, error) = token(&base, &form).await;
    assert_eq!(
        (status, error["error_description"].as_str()),
        (400, Some("the code_verifier does not match the code_challenge"))
    );
    let (code, _) = sign_in(&base, "alice", "inbox.read").await;
    let (status, error) =
        token(&base, &[("grant_type", "authorization_code"), ("code", &code), ("redirect_uri", REDIRECT_URI)]).await;
    assert_eq!((status, &error["error"]), (400, &json!("invalid_request")));

    assert_eq!(token(&base, &[("grant_type", "password")]).await.1["error"], "unsupported_grant_type");
    assert_eq!(
        token(&base, &[("grant_type", "refresh_token"), ("grant_type", "refresh_token")]).await.1["error"],
        "invalid_request"
    );

    // A refresh may narrow the scopes, never widen them.
    let tokens = tokens_for(&base, "alice", "inbox.read inbox.write").await;
    assert_eq!(tokens["scope"], "inbox.read inbox.write");
    let refresh = tokens["refresh_token"].as_str().unwrap();
    let (status, narrowed) =
        token(&base, &[("grant_type", "refresh_token"), ("refresh_token", refresh), ("scope", "inbox.read")]).await;
    assert_eq!((status, &narrowed["scope"]), (200, &json!("inbox.read")));
    let refresh = narrowed["refresh_token"].as_str().unwrap();
    let (status, error) =
        token(&base, &[("grant_type", "refresh_token"), ("refresh_token", refresh), ("scope", "inbox.write")]).await;
    assert_eq!((status, &error["error"]), (400, &json!("invalid_scope")));
    // Refused before it was spent: it still refreshes.
    assert_eq!(token(&base, &[("grant_type", "refresh_token"), ("refresh_token", refresh)]).await.0, 200);
}

#[tokio::test]
async fn the_authorization_endpoint_checks_the_client_first_then_sends_errors_back() {
    let (base, _inbox) = inbox_with_provider(HOUR).await;
    let (_, challenge) = pkce();
    let good = [
        ("response_type", "code"),
        ("client_id", CLIENT_ID),
        ("redirect_uri", REDIRECT_URI),
        ("scope", "inbox.read inbox.write"),
        ("state", "s-1"),
        ("code_challenge", challenge.as_str()),
        ("code_challenge_method", "S256"),
    ];
    let with = |name: &str, value: Option<&'static str>| {
        let mut params: Vec<(&str, &str)> = good.iter().copied().filter(|(k, _)| *k != name).collect();
        if let Some(value) = value {
            params.push((name, value));
        }
        params.into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<Vec<_>>()
    };
    let ask = |params: Vec<(String, String)>| {
        let base = base.clone();
        async move { http().get(format!("{base}/authorize")).query(&params).send().await.unwrap() }
    };

    // The page names the client and the scopes, escaped, and is never framed.
    let page = ask(with("state", Some("s-1"))).await;
    assert_eq!(page.status(), 200);
    assert!(page.headers()["content-security-policy"].to_str().unwrap().contains("frame-ancestors 'none'"));
    let text = page.text().await.unwrap();
    for shown in [
        "Sign in to Fake Inbox",
        "<strong>plinth</strong>",
        "read your messages",
        "mark your messages read",
        r#"value="alice""#,
        r#"value="bob""#,
    ] {
        assert!(text.contains(shown), "{shown}: {text}");
    }

    // Unknown client or redirect URI: a page, never a redirect.
    for (name, value) in [
        ("client_id", Some("someone-else")),
        ("redirect_uri", Some("http://127.0.0.1:9/elsewhere")),
        ("client_id", None),
    ] {
        let response = ask(with(name, value)).await;
        assert_eq!(response.status(), 400, "{name}={value:?}");
        assert!(response.headers().get("location").is_none());
    }
    // Only one redirect URI is registered: it may go unsaid.
    assert_eq!(ask(with("redirect_uri", None)).await.status(), 200);

    // The rest goes back to the client, with its state and the issuer.
    for (name, value, error) in [
        ("code_challenge", None, "invalid_request"),
        ("code_challenge_method", None, "invalid_request"),
        ("code_challenge_method", Some("plain"), "invalid_request"),
        ("code_challenge", Some("short"), "invalid_request"),
        ("response_type", Some("token"), "unsupported_response_type"),
        ("scope", Some("inbox.read openid"), "invalid_scope"),
        ("scope", None, "invalid_scope"),
        ("resource", Some("http://127.0.0.1:9"), "invalid_target"),
    ] {
        let response = ask(with(name, value)).await;
        assert_eq!(response.status(), 303, "{name}={value:?}");
        let back = query(response.headers()["location"].to_str().unwrap());
        assert_eq!(
            (back["error"].as_str(), back["state"].as_str(), back["iss"].as_str()),
            (error, "s-1", base.as_str()),
            "{name}={value:?}"
        );
    }

    // Deny: access_denied. A page answered once is spent.
    let request = request_id(&ask(with("state", Some("s-1"))).await.text().await.unwrap());
    let deny = [("request", request.as_str()), ("user", "alice"), ("decision", "deny")];
    let response = http().post(format!("{base}/authorize")).form(&deny).send().await.unwrap();
    assert_eq!(response.status(), 303);
    let back = query(response.headers()["location"].to_str().unwrap());
    assert_eq!((back["error"].as_str(), back.get("code")), ("access_denied", None));
    let response = http()
        .post(format!("{base}/authorize"))
        .form(&[("request", request.as_str()), ("user", "alice"), ("decision", "allow")])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    // Only the people the inbox knows sign in.
    let request = request_id(&ask(with("state", Some("s-1"))).await.text().await.unwrap());
    let response = http()
        .post(format!("{base}/authorize"))
        .form(&[("request", request.as_str()), ("user", "mallory"), ("decision", "allow")])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
}
