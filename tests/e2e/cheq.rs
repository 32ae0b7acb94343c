//! CHEQ, end to end: a tool's `[confirmation]` policy, checked when it is
//! packed; calls that need confirmation answered with the URI pack; the
//! resource and result URIs; an external confirmation server's signatures
//! and the attacks on them; the evidence and its offline check; the
//! server's published keys. The built-in confirmation page, in a real
//! browser, is in `cheq_browser.rs`.

use crate::support::{Server, TOKEN, fixture, invocation, outputs, plinth_bin, plugins_dir};
use reqwest::Method;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;

/// `plugin` packed from its built component with `confirmation` (TOML) as
/// its `[confirmation]` table, into `dir`. Returns the packed file, or what
/// `plinth pack` said when it refused.
pub fn pack_with_confirmation(plugin: &str, confirmation: &str, dir: &Path) -> Result<PathBuf, String> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins").join(plugin);
    let crate_dir = dir.join(format!("{plugin}-src"));
    std::fs::create_dir_all(&crate_dir).unwrap();
    // The WIT by link: its own links into wit/ then still resolve.
    std::os::unix::fs::symlink(source.join("wit").canonicalize().unwrap(), crate_dir.join("wit")).unwrap();
    let manifest = std::fs::read_to_string(source.join("plinth.toml")).unwrap();
    std::fs::write(crate_dir.join("plinth.toml"), format!("{manifest}\n[confirmation]\n{confirmation}\n")).unwrap();
    let name = plugin.replace('-', "_");
    let built = plugins_dir().join(format!("../wasm32-wasip2/plugin/{name}.wasm"));
    let packed = dir.join(format!("{name}.wasm"));
    let output = Command::new(plinth_bin())
        .arg("pack")
        .arg(&crate_dir)
        .arg("--wasm")
        .arg(&built)
        .arg("-o")
        .arg(&packed)
        .output()
        .unwrap();
    std::fs::remove_dir_all(&crate_dir).unwrap();
    if output.status.success() { Ok(packed) } else { Err(String::from_utf8_lossy(&output.stderr).into_owned()) }
}

#[test]
fn a_condition_that_names_no_input_is_refused_when_packed() {
    let dir = tempfile::tempdir().unwrap();
    let refused = pack_with_confirmation("book-flight", r#"when = "price_usd > 1000""#, dir.path()).unwrap_err();
    assert!(
        refused.contains("[confirmation]: the `when` condition names price_usd, which is not an input"),
        "{refused}"
    );
    let refused = pack_with_confirmation("book-flight", r#"when = "passengers >""#, dir.path()).unwrap_err();
    assert!(refused.contains("not valid CEL"), "{refused}");
    let refused = pack_with_confirmation("book-flight", "required = \"yes\"", dir.path()).unwrap_err();
    assert!(refused.contains("required = \"yes\"") && refused.contains("expected a boolean"), "{refused}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_signing_key_is_published_and_kept() {
    let server = Server::start(&[]);
    let anonymous = server.request_as(None, Method::GET, "/.well-known/jwks.json").send().await.unwrap();
    assert_eq!(anonymous.status(), 200);
    let jwks: Value = anonymous.json().await.unwrap();
    let keys = jwks["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 2, "the resource server's key and the built-in confirmation server's");
    assert_eq!(
        (&keys[0]["kty"], &keys[0]["crv"], &keys[0]["alg"]),
        (&json!("OKP"), &json!("Ed25519"), &json!("EdDSA"))
    );
    assert!(keys[0].get("d").is_none(), "the private half is never published");
    let key_file = server.data.path().join("cheq-signing.key");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&key_file).unwrap().permissions().mode() & 0o777, 0o600);
    assert!(!server.logs().contains(std::fs::read_to_string(&key_file).unwrap().trim()));
    let server = Server::start_in(server.stop(), &[]);
    assert_eq!(server.get("/.well-known/jwks.json").await.1, jwks, "the same key after a restart");
}

/// The condition the tests put on `book_flight`.
pub const PREMIUM: &str = r#"when = "cabin_class in ['BUSINESS', 'FIRST'] || passengers > 4""#;

/// A server with `book_flight` (confirmation above economy or four
/// passengers), `echo` (none) and `transfer_funds` (private inputs), and
/// the end users alice and bob.
pub async fn confirming_server(extra: &[&str]) -> (Server, tempfile::TempDir) {
    let plugins = tempfile::tempdir().unwrap();
    pack_with_confirmation("book-flight", PREMIUM, plugins.path()).unwrap();
    std::fs::copy(plugins_dir().join("echo.wasm"), plugins.path().join("echo.wasm")).unwrap();
    std::fs::write(plugins.path().join("transfer_funds.wasm"), fixture("transfer_funds.wasm")).unwrap();
    let mut args = vec!["--plugins", plugins.path().to_str().unwrap()];
    args.extend_from_slice(extra);
    let server = Server::start_in(tempfile::tempdir().unwrap(), &args);
    for user in ["alice", "bob"] {
        server.add_end_user("", user).await;
    }
    (server, plugins)
}

pub fn booking(cabin: &str, passengers: u32) -> Vec<(&'static str, Value)> {
    vec![
        ("flight_number", json!("UA123")),
        ("date", json!("2026-12-24")),
        ("passengers", json!(passengers)),
        ("cabin_class", json!(cabin)),
    ]
}

/// An A2T call of `name` made for `end_user` → (status, Location, body).
pub async fn call_for(
    server: &Server,
    end_user: Option<&str>,
    name: &str,
    params: &[(&str, Value)],
) -> (u16, Option<String>, Value) {
    let id = server.tool_id(name).await;
    let mut request = server.request(Method::POST, &format!("/tools/{id}:invoke")).bearer_auth(TOKEN);
    if let Some(user) = end_user {
        request = request.header("Plinth-End-User", user);
    }
    let response = request.json(&invocation(name, params)).send().await.unwrap();
    let status = response.status().as_u16();
    let location = response.headers().get("location").map(|v| v.to_str().unwrap().to_string());
    (status, location, response.json().await.unwrap_or(Value::Null))
}

/// `GET` an absolute URI with the operator key → (status, headers, body).
pub async fn fetch(uri: &str) -> (u16, reqwest::header::HeaderMap, Value) {
    let response = reqwest::Client::new().get(uri).bearer_auth(TOKEN).send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, headers, response.json().await.unwrap_or(Value::Null))
}

/// `POST {resource uri}?{decision}` with `body`, as a confirmation server
/// does (no Plinth key) → (status, body).
async fn decide(resource_uri: &str, decision: &str, body: &Value) -> (u16, Value) {
    let response = reqwest::Client::new().post(format!("{resource_uri}?{decision}")).json(body).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// The CHEQ object inside a JWS.
fn payload(signed: &Value) -> Value {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(signed["payload"].as_str().unwrap()).unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

/// What a server needs to fetch the stand-in confirmation server's keys:
/// plain HTTP, on 127.0.0.1.
pub const LOCAL_JWKS: [&str; 3] = ["--cheq-allow-http-jwks", "--allow-private-cidr", "127.0.0.0/8"];

/// A stand-in external confirmation server: its own Ed25519 key, its JWKS
/// served on 127.0.0.1 (a server fetches it with [`LOCAL_JWKS`]).
struct ConfirmationServer {
    key: plinth::cheq::SigningKey,
    jwks_url: String,
    _serving: tokio::task::JoinHandle<()>,
}

impl ConfirmationServer {
    async fn start() -> ConfirmationServer {
        let key = plinth::cheq::SigningKey::generate().unwrap();
        let jwks = plinth::cheq::jwks(&[&key]);
        let app = axum::Router::new().route("/jwks.json", axum::routing::get(move || async move { axum::Json(jwks) }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let jwks_url = format!("http://{}/jwks.json", listener.local_addr().unwrap());
        let serving = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        ConfirmationServer { key, jwks_url, _serving: serving }
    }

    /// `signed` with this server's signature added: `user` decided `decision`.
    fn countersign(&self, signed: &Value, key: &plinth::cheq::SigningKey, user: &str, decision: &str) -> Value {
        let mut signed = signed.clone();
        let claims = json!({ "sub": user, "decision": decision }).as_object().unwrap().clone();
        plinth::cheq::countersign(&mut signed, key, claims).unwrap();
        signed
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_that_needs_confirmation_answers_with_the_uri_pack() {
    let (server, _plugins) = confirming_server(&[]).await;

    // Below the condition the booking runs as before.
    let (status, _, body) = call_for(&server, None, "book_flight", &booking("ECONOMY", 2)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(outputs(&body)["total_price_usd"], 360);

    // Above it, a call that names no end user is refused: nobody could confirm it.
    let (status, _, body) = call_for(&server, None, "book_flight", &booking("FIRST", 1)).await;
    assert_eq!((status, &body["error"]["code"]), (400, &json!("end_user_required")), "{body}");

    let (status, location, pack) = call_for(&server, Some("alice"), "book_flight", &booking("FIRST", 1)).await;
    assert_eq!(status, 202, "{pack}");
    let keys: Vec<&String> = pack.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["confirmation uri", "resource uri", "result uri"], "exactly the draft's keys");
    assert_eq!(location.as_deref(), pack["result uri"].as_str(), "Location is the result URI");
    assert_eq!(pack["confirmation uri"], format!("{}/cheq/confirm", server.base));

    // The agent polls: pending, with Retry-After.
    let (status, headers, body) = fetch(pack["result uri"].as_str().unwrap()).await;
    assert_eq!((status, body["state"].as_str()), (202, Some("pending")), "{body}");
    assert_eq!(headers["retry-after"], "2");

    // The confirmation server fetches the CHEQ: figure 4's fields, signed by this server.
    let (status, _, signed) = fetch(pack["resource uri"].as_str().unwrap()).await;
    assert_eq!(status, 200, "{signed}");
    assert_eq!(signed["signatures"].as_array().unwrap().len(), 1);
    let cheq = payload(&signed);
    assert_eq!(cheq["operation name"], "Book flight");
    assert_eq!(cheq["end user"], "alice");
    let parameters = cheq["inputs"]["parameters"].as_array().unwrap();
    let cabin = parameters.iter().find(|p| p["parameter name"] == "cabin_class").unwrap();
    assert_eq!(cabin["parameter value"], "FIRST");
    assert!(cabin["parameter description"].as_str().unwrap().contains("cabin class"));
    for field in ["version", "operation", "date", "expires", "transaction", "nonce"] {
        assert!(cheq.get(field).is_some(), "the CHEQ has no `{field}`: {cheq}");
    }
    let (_, _, raw) = fetch(&format!("{}?raw", pack["resource uri"].as_str().unwrap())).await;
    assert_eq!(raw, cheq, "?raw is the object alone");

    // Through OTC: the user comes as context.user_id; a retry of the call id
    // gets the same pack, not a second confirmation.
    let input: serde_json::Map<String, Value> =
        booking("BUSINESS", 1).into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    let otc = json!({ "request": { "call_id": "b-1", "tool_id": "Travel.BookFlight", "input": input, "context": { "user_id": "bob" } } });
    let (status, first) = server.post("/otc/tools/call", &otc).await;
    assert_eq!(
        (status, &first["result"]["error"]["developer_message"]),
        (200, &json!("confirmation_pending")),
        "{first}"
    );
    let (status, again) = server.post("/otc/tools/call", &otc).await;
    assert_eq!((status, &again), (200, &first));

    // Rejected through the resource URI: the agent gets the documented answer,
    // in the OTC shape for an OTC call.
    let (status, body) = decide(first["resource uri"].as_str().unwrap(), "reject", &Value::Null).await;
    assert_eq!(status, 200, "{body}");
    let (status, _, body) = fetch(first["result uri"].as_str().unwrap()).await;
    assert_eq!((status, &body["code"]), (403, &json!("confirmation_rejected")), "{body}");
    assert!(body["$schema"].is_string(), "{body}");
    let (status, body) = decide(first["resource uri"].as_str().unwrap(), "reject", &Value::Null).await;
    assert_eq!((status, &body["error"]["code"]), (409, &json!("already_decided")), "{body}");

    // A publisher's override wins over what the vendor declared.
    let echo = server.tool_id("echo").await;
    let path = format!("/admin/tools/{echo}/confirmation");
    let (status, body) = server.call_as(Some(TOKEN), Method::PUT, &path, Some(&json!({ "required": true }))).await;
    assert_eq!(status, 204, "{body}");
    let (status, _, body) = call_for(&server, Some("alice"), "echo", &[("text", json!("hi"))]).await;
    assert_eq!(status, 202, "{body}");
    let bad = json!({ "when": "colour == 'red'" });
    let (status, body) = server.call_as(Some(TOKEN), Method::PUT, &path, Some(&bad)).await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("colour"), "{body}");
    let (status, _) = server.call_as(Some(TOKEN), Method::DELETE, &path, None).await;
    assert_eq!(status, 204);
    let (status, _, body) = call_for(&server, Some("alice"), "echo", &[("text", json!("hi"))]).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_that_describes_its_call_has_its_facts_signed_into_the_cheq() {
    let (server, _plugins) = confirming_server(&[]).await;

    // book_flight exports `describe`: the fare it will charge is in the
    // signed CHEQ, apart from the inputs.
    let (status, _, pack) = call_for(&server, Some("alice"), "book_flight", &booking("BUSINESS", 2)).await;
    assert_eq!(status, 202, "{pack}");
    let (_, _, signed) = fetch(pack["resource uri"].as_str().unwrap()).await;
    let cheq = payload(&signed);
    assert_eq!(cheq["explanation"], "Books 2 passengers in business class on flight UA123 on 2026-12-24.", "{cheq}");
    assert_eq!(
        cheq["facts"],
        json!([
            { "fact name": "Fare per passenger", "fact value": "1350 USD" },
            { "fact name": "Total price", "fact value": "2700 USD, taxes included" },
        ])
    );
    let parameters = cheq["inputs"]["parameters"].as_array().unwrap();
    assert!(parameters.iter().all(|p| p.get("fact name").is_none()), "facts are not inputs");
    // Signed like the rest: the server's own signature covers them.
    let jwks = server.get("/.well-known/jwks.json").await.1;
    let (bytes, signers) = plinth::cheq::verify(&signed, std::slice::from_ref(&jwks)).unwrap();
    assert_eq!((signers.len(), serde_json::from_slice::<Value>(&bytes).unwrap()), (1, cheq.clone()));

    // A booking `describe` refuses is refused at once, with the tool's words,
    // and nobody is asked to confirm it.
    let mut params = booking("FIRST", 1);
    params.push(("quoted_price_usd", json!(100)));
    let (status, location, body) = call_for(&server, Some("alice"), "book_flight", &params).await;
    assert_eq!((status, &body["error"]["code"], location), (422, &json!("tool_error"), None), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("the price is 4200 USD"), "{body}");
    assert!(body["error"]["additionalPromptContent"].is_string(), "{body}");

    // A tool without the export is confirmed as before: no explanation, no facts.
    let echo = server.tool_id("echo").await;
    let path = format!("/admin/tools/{echo}/confirmation");
    let (status, _) = server.call_as(Some(TOKEN), Method::PUT, &path, Some(&json!({ "required": true }))).await;
    assert_eq!(status, 204);
    let (status, _, pack) = call_for(&server, Some("alice"), "echo", &[("text", json!("hi"))]).await;
    assert_eq!(status, 202, "{pack}");
    let (_, _, signed) = fetch(pack["resource uri"].as_str().unwrap()).await;
    let cheq = payload(&signed);
    assert!(cheq.get("explanation").is_none() && cheq.get("facts").is_none(), "{cheq}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_description_runs_sandboxed_and_within_bounds() {
    let (server, _plugins) = confirming_server(&[]).await;
    let (status, body) = server.deploy(fixture("describe_hostile.wasm"), "").await;
    assert_eq!(status, 201, "{body}");
    let put = server.request(Method::PUT, "/admin/secrets/api-token").body("tok-5ecret-value").send().await.unwrap();
    assert_eq!(put.status(), 204);
    let call = |mode: &'static str| {
        let server = &server;
        async move { call_for(server, Some("alice"), "describe_hostile", &[("mode", json!(mode))]).await }
    };

    // A description that never ends is stopped at the tool's deadline, like
    // a call; one too long for a page is refused; one that tries to act (a
    // POST) is refused, since before the end user confirms a tool may only
    // read. Nobody is asked, and no transaction is opened.
    for (mode, code) in [
        ("SPIN", "tool_timeout"),
        ("MANY_FACTS", "output_too_large"),
        ("LONG_SUMMARY", "output_too_large"),
        ("ACT", "outbound_denied"),
        ("CRASH", "tool_trapped"),
    ] {
        let (status, location, body) = call(mode).await;
        assert_eq!((&body["error"]["code"], location), (&json!(code), None), "{mode}: {status} {body}");
        if mode == "ACT" {
            assert!(body["error"]["message"].as_str().unwrap().contains("may only read (GET, HEAD)"), "{body}");
        }
    }
    assert_eq!(server.stored_confirmations(), 0, "no transaction was opened");

    // Hidden characters are signed as the visible markers the human reads.
    let (status, _, pack) = call("HIDDEN").await;
    assert_eq!(status, 202, "{pack}");
    let cheq = payload(&fetch(pack["resource uri"].as_str().unwrap()).await.2);
    assert_eq!(cheq["explanation"], "Pays<U+202E>0001");
    assert_eq!(cheq["facts"][0]["fact value"], "10<U+200B>0 USD");

    // The CHEQ is readable by anyone with its URI: secrets are redacted from it.
    let (status, _, pack) = call("LEAK_SECRET").await;
    assert_eq!(status, 202, "{pack}");
    let (_, _, signed) = fetch(pack["resource uri"].as_str().unwrap()).await;
    let cheq = payload(&signed);
    assert_eq!(cheq["facts"][0]["fact name"], "Token", "{cheq}");
    assert!(!cheq.to_string().contains("tok-5ecret-value"), "{cheq}");
}

#[tokio::test(flavor = "multi_thread")]
async fn only_the_right_users_signed_acceptance_runs_the_call_once() {
    let external = ConfirmationServer::start().await;
    let (server, _plugins) = confirming_server(&LOCAL_JWKS).await;
    let setting = json!({ "uri": "https://confirm.example/", "jwks_url": external.jwks_url });
    let (status, body) = server.call_as(Some(TOKEN), Method::PUT, "/admin/confirmation-server", Some(&setting)).await;
    assert_eq!(status, 204, "{body}");

    let (status, _, pack) = call_for(&server, Some("alice"), "book_flight", &booking("FIRST", 2)).await;
    assert_eq!(status, 202, "{pack}");
    assert_eq!(pack["confirmation uri"], "https://confirm.example/", "the tenant's confirmation server");
    let resource = pack["resource uri"].as_str().unwrap();
    let (_, _, signed) = fetch(resource).await;
    let key = &external.key;

    // A CHEQ altered after signing: the resource server's signature no longer matches.
    let mut altered = signed.clone();
    let mut cheq = payload(&signed);
    cheq["inputs"]["parameters"][3]["parameter value"] = json!("ECONOMY");
    use base64::Engine;
    altered["payload"] = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(serde_json_canonicalizer::to_vec(&cheq).unwrap())
        .into();
    let altered = external.countersign(&altered, key, "alice", "accept");
    let (status, body) = decide(resource, "accept", &altered).await;
    assert_eq!((status, &body["error"]["code"]), (403, &json!("invalid_signature")), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("altered or forged"), "{body}");

    // A confirmation signed by a key the tenant's confirmation server does not publish.
    let forger = plinth::cheq::SigningKey::generate().unwrap();
    let (status, body) = decide(resource, "accept", &external.countersign(&signed, &forger, "alice", "accept")).await;
    assert_eq!((status, &body["error"]["code"]), (403, &json!("invalid_signature")), "{body}");

    // The CHEQ back with no confirmation at all, or approved by another user.
    let (status, body) = decide(resource, "accept", &signed).await;
    assert_eq!((status, &body["error"]["code"]), (403, &json!("not_confirmed")), "{body}");
    let (status, body) = decide(resource, "accept", &external.countersign(&signed, key, "mallory", "accept")).await;
    assert_eq!((status, &body["error"]["code"]), (403, &json!("not_confirmed")), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("mallory"), "{body}");

    // None of that ran the tool.
    let (status, _, body) = fetch(pack["result uri"].as_str().unwrap()).await;
    assert_eq!(status, 202, "{body}");

    // Pending transactions survive a restart.
    let mut args = vec!["--plugins", _plugins.path().to_str().unwrap()];
    args.extend(LOCAL_JWKS);
    let server = Server::start_in(server.stop(), &args);
    let resource = resource.replace(&resource[..resource.find("/cheq/").unwrap()], &server.base);
    let result = pack["result uri"].as_str().unwrap();
    let result = result.replace(&result[..result.find("/cheq/").unwrap()], &server.base);

    // The right user's acceptance runs it, exactly once.
    let accepted = external.countersign(&signed, key, "alice", "accept");
    let (status, body) = decide(&resource, "accept", &accepted).await;
    assert_eq!((status, &body["state"]), (200, &json!("accepted")), "{body}");
    let (status, _, body) = fetch(&result).await;
    assert_eq!(status, 200, "{body}");
    let out = outputs(&body);
    assert_eq!((&out["cabin_class"], &out["total_price_usd"]), (&json!("FIRST"), &json!(8400)));
    let (status, body) = decide(&resource, "accept", &accepted).await;
    assert_eq!((status, &body["error"]["code"]), (409, &json!("already_decided")), "{body}");

    // The evidence: both signatures, provable offline with the published keys.
    let id = resource.rsplit('/').next().unwrap();
    let (status, evidence) = server.get(&format!("/admin/cheq/{id}")).await;
    assert_eq!(status, 200, "{evidence}");
    assert_eq!(evidence["state"], "accepted and done");
    assert_eq!(evidence["decision"]["signatures"].as_array().unwrap().len(), 2);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("evidence.json");
    std::fs::write(&file, evidence.to_string()).unwrap();
    let jwks = format!("{}/.well-known/jwks.json", server.base);
    let verify = |file: &Path, jwks: &[&str]| {
        let mut command = Command::new(plinth_bin());
        command.arg("cheq").arg("verify").arg(file);
        for url in jwks {
            command.arg("--jwks").arg(url);
        }
        command.output().unwrap()
    };
    let checked = tokio::task::block_in_place(|| verify(&file, &[&jwks, &external.jwks_url]));
    let stdout = String::from_utf8_lossy(&checked.stdout);
    assert!(checked.status.success(), "{stdout}{}", String::from_utf8_lossy(&checked.stderr));
    assert!(stdout.contains("accept") && stdout.contains("alice"), "{stdout}");
    // Without the confirmation server's keys, or altered, it does not verify.
    let unchecked = tokio::task::block_in_place(|| verify(&file, &[&jwks]));
    assert!(!unchecked.status.success());
    std::fs::write(&file, evidence.to_string().replace("\"payload\":\"ey", "\"payload\":\"ez")).unwrap();
    let forged = tokio::task::block_in_place(|| verify(&file, &[&jwks, &external.jwks_url]));
    assert!(!forged.status.success());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unanswered_confirmation_expires() {
    let external = ConfirmationServer::start().await;
    let mut args = vec!["--confirmation-ttl-secs", "1"];
    args.extend(LOCAL_JWKS);
    let (server, _plugins) = confirming_server(&args).await;
    let setting = json!({ "uri": "https://confirm.example/", "jwks_url": external.jwks_url });
    server.call_as(Some(TOKEN), Method::PUT, "/admin/confirmation-server", Some(&setting)).await;
    let (_, _, pack) = call_for(&server, Some("alice"), "book_flight", &booking("BUSINESS", 1)).await;
    let (_, _, signed) = fetch(pack["resource uri"].as_str().unwrap()).await;
    tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
    let accepted = external.countersign(&signed, &external.key, "alice", "accept");
    let (status, body) = decide(pack["resource uri"].as_str().unwrap(), "accept", &accepted).await;
    assert_eq!((status, &body["error"]["code"]), (410, &json!("confirmation_expired")), "{body}");
    let (status, _, body) = fetch(pack["result uri"].as_str().unwrap()).await;
    assert_eq!((status, &body["error"]["code"]), (410, &json!("confirmation_expired")), "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_private_input_from_the_agent_is_refused_before_any_transaction() {
    let (server, _plugins) = confirming_server(&[]).await;
    let amount = ("amount_usd", json!(250));
    let from = ("from_account", json!("DE89370400440532013000"));
    let to = ("to_account", json!("GB29NWBK60161331926819"));
    // Named or not, the end user changes nothing: the input is refused first.
    for (end_user, params) in
        [(Some("alice"), vec![amount.clone(), to.clone()]), (None, vec![amount.clone(), from, to])]
    {
        let (status, location, body) = call_for(&server, end_user, "transfer_funds", &params).await;
        let error = &body["error"];
        assert_eq!(status, 400, "{body}");
        assert_eq!(error["code"], "private_parameter", "{body}");
        let named = params[1].0;
        assert_eq!(error["parameter"], named, "the first private input given is named: {body}");
        assert!(error["message"].as_str().unwrap().contains(named), "{body}");
        assert_eq!(location, None, "no result URI: {body}");
    }
    assert_eq!(server.stored_confirmations(), 0, "no transaction was opened");
    assert!(!server.logs().contains("USD from"), "the tool never ran:\n{}", server.logs());

    // Without them the same call waits for alice, who will enter them.
    let (status, _, pack) = call_for(&server, Some("alice"), "transfer_funds", &[amount]).await;
    assert_eq!(status, 202, "{pack}");
    assert_eq!(server.stored_confirmations(), 1);
}

/// An end user's session on the built-in confirmation page, over plain
/// HTTP (what a browser does, without one).
#[derive(Clone)]
pub struct PageSession {
    client: reqwest::Client,
    cookie: String,
    root: String,
}

impl PageSession {
    /// Logs `user` in through the login form.
    pub async fn log_in(pack: &Value, user: &str) -> PageSession {
        let confirm = pack["confirmation uri"].as_str().unwrap();
        let root = confirm.strip_suffix("/cheq/confirm").unwrap().to_string();
        let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
        let (form, cookie) = login_form(&client, pack, user).await;
        let response =
            client.post(format!("{root}/cheq/login")).header("cookie", cookie).form(&form).send().await.unwrap();
        assert_eq!(response.status(), 303, "{user} logs in");
        let cookie = response.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string();
        PageSession { client, cookie, root }
    }

    /// The confirmation page of `pack`'s transaction → (status, HTML).
    pub async fn page(&self, pack: &Value) -> (u16, String) {
        let response = self
            .client
            .get(pack["confirmation uri"].as_str().unwrap())
            .query(&[("resource_uri", pack["resource uri"].as_str().unwrap())])
            .header("cookie", &self.cookie)
            .send()
            .await
            .unwrap();
        (response.status().as_u16(), response.text().await.unwrap())
    }

    /// Accepts or rejects on the page, with its form token → (status, HTML).
    pub async fn decide(&self, pack: &Value, decision: &str) -> (u16, String) {
        self.decide_with(pack, decision, &[]).await
    }

    /// [`PageSession::decide`], with the private inputs typed on the page
    /// (`(name, value)`).
    pub async fn decide_with(&self, pack: &Value, decision: &str, private: &[(&str, &str)]) -> (u16, String) {
        self.post_decision(pack, decision, private, &[]).await
    }

    /// The page's decision form, posted with `headers` besides the session's
    /// cookie → (status, HTML).
    async fn post_decision(
        &self,
        pack: &Value,
        decision: &str,
        private: &[(&str, &str)],
        headers: &[(&str, &str)],
    ) -> (u16, String) {
        let (status, html) = self.page(pack).await;
        assert_eq!(status, 200, "{html}");
        let transaction = pack["resource uri"].as_str().unwrap().rsplit('/').next().unwrap();
        let mut form = vec![
            ("transaction".to_string(), transaction.to_string()),
            ("form_token".to_string(), crate::support::hidden(&html, "form_token")),
            ("decision".to_string(), decision.to_string()),
        ];
        form.extend(private.iter().map(|(name, value)| (format!("private.{name}"), value.to_string())));
        let mut request =
            self.client.post(format!("{}/cheq/decide", self.root)).header("cookie", &self.cookie).form(&form);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().await.unwrap();
        (response.status().as_u16(), response.text().await.unwrap())
    }
}

/// The login form's fields for `user` (whose password the test directory
/// sets as `{user}-password`), on `pack`'s transaction.
/// The login form for `pack`'s confirmation page as its login page gives
/// it (its token among the fields), and the cookie that page set.
async fn login_form(client: &reqwest::Client, pack: &Value, user: &str) -> ([(&'static str, String); 4], String) {
    let response = client
        .get(pack["confirmation uri"].as_str().unwrap())
        .query(&[("resource_uri", pack["resource uri"].as_str().unwrap())])
        .send()
        .await
        .unwrap();
    let cookie = response.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string();
    assert!(cookie.starts_with("plinth_cheq_login="), "{cookie}");
    let page = response.text().await.unwrap();
    let form = [
        ("user", user.to_string()),
        ("password", format!("{user}-password")),
        ("resource_uri", pack["resource uri"].as_str().unwrap().to_string()),
        ("login_token", crate::support::hidden(&page, "login_token")),
    ];
    (form, cookie)
}

/// `[0,1,…,n-1]`.
fn numbers(n: usize) -> String {
    format!("[{}]", (0..n).map(|i| i.to_string()).collect::<Vec<_>>().join(","))
}

/// The packed `echo` with `condition` as its `[confirmation] when`, put in
/// by hand where `plinth pack` would have refused it: a same-length
/// condition packed, then its bytes swapped.
fn echo_with_condition(condition: &str, dir: &Path) -> Vec<u8> {
    let harmless = format!("text == '{}'", "z".repeat(condition.len() - 10));
    assert_eq!(harmless.len(), condition.len());
    let packed = pack_with_confirmation("echo", &format!("when = \"{harmless}\""), dir).unwrap();
    let bytes = std::fs::read(packed).unwrap();
    let at = bytes.windows(harmless.len()).position(|w| w == harmless.as_bytes()).unwrap();
    let mut swapped = bytes.clone();
    swapped[at..at + condition.len()].copy_from_slice(condition.as_bytes());
    swapped
}

#[tokio::test(flavor = "multi_thread")]
async fn a_condition_over_its_budget_is_refused_at_pack_deploy_and_override() {
    let (server, _plugins) = confirming_server(&[]).await;
    let echo = server.tool_id("echo").await;
    let path = format!("/admin/tools/{echo}/confirmation");
    // The reported attack, and shorter forms of it, each refused by the limit it breaks.
    let list = numbers(300);
    let attack = format!("{list}.all(a,{list}.all(b,{list}.all(c,true)))");
    let short = numbers(10);
    let cases = [
        (attack.clone(), "max_chars"),
        (format!("{short}.all(a,{short}.all(b,{short}.all(c,true)))"), "max_comprehension_depth"),
        (format!("{}.exists(a, a == 7)", numbers(65)), "max_literal_entries"),
        ("text.matches(text)".to_string(), "allowed_functions"),
        (vec!["text"; 150].join("+") + " == 'x'", "max_nodes"),
    ];
    for (condition, limit) in &cases {
        let (status, body) = server.call_as(Some(TOKEN), Method::PUT, &path, Some(&json!({ "when": condition }))).await;
        assert_eq!(
            (status, &body["error"]["code"], &body["error"]["limit"]),
            (400, &json!("condition_too_costly"), &json!(limit)),
            "{body}"
        );
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(&format!("(limit `{limit}`)")), "{message}");
    }
    let (status, body) = server.call_as(Some(TOKEN), Method::GET, &path, None).await;
    assert_eq!((status, &body["override"]), (200, &Value::Null), "nothing was stored: {body}");

    // In a packed plinth.toml: `plinth pack` refuses it...
    let dir = tempfile::tempdir().unwrap();
    let refused = pack_with_confirmation("echo", &format!("when = \"{attack}\""), dir.path()).unwrap_err();
    assert!(
        refused.contains("could cost more than a condition may") && refused.contains("(limit `max_chars`)"),
        "{refused}"
    );
    // ...and a component packed around that check is refused at deploy.
    let deep = format!("{short}.all(a,{short}.all(b,{short}.all(c,text == 'x')))");
    let (status, body) = server.deploy(echo_with_condition(&deep, dir.path()), "").await;
    assert_eq!(
        (status, &body["error"]["code"], &body["error"]["limit"]),
        (400, &json!("condition_too_costly"), &json!("max_comprehension_depth")),
        "{body}"
    );
    assert!(body["error"]["message"].as_str().unwrap().contains("[confirmation]"), "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_costliest_accepted_condition_leaves_the_server_answering() {
    let (server, _plugins) = confirming_server(&[]).await;
    let echo = server.tool_id("echo").await;
    // Another tenant, with its own echo.
    server.create_tenant("other", json!({})).await;
    let (_, other) = server.create_key(Some("other"), "publisher").await;
    let (status, body) =
        server.deploy_as(&other, "other", std::fs::read(plugins_dir().join("echo.wasm")).unwrap()).await;
    assert_eq!(status, 201, "{body}");
    let other_echo = body["toolId"].as_str().unwrap().to_string();

    // As heavy as the budget allows: two nested comprehensions over 64-entry literals.
    let list = numbers(64);
    let heaviest = format!("{list}.all(a, {list}.all(b, a + b != 1000 && a * b != 5000)) && text == 'confirm'");
    let path = format!("/admin/tools/{echo}/confirmation");
    let (status, body) = server.call_as(Some(TOKEN), Method::PUT, &path, Some(&json!({ "when": heaviest }))).await;
    assert_eq!(status, 204, "{body}");

    // Sixteen calls at once evaluate it; health and the other tenant answer meanwhile.
    let calls: Vec<_> = (0..16)
        .map(|i| {
            let text = if i % 2 == 0 { "confirm" } else { "go" };
            let request =
                server.request(Method::POST, &format!("/tools/{echo}:invoke")).header("plinth-end-user", "alice");
            tokio::spawn(request.json(&invocation("echo", &[("text", json!(text))])).send())
        })
        .collect();
    let others = async {
        for _ in 0..4 {
            assert_eq!(server.get("/health").await.0, 200);
            let response = server
                .request_as(Some(&other), Method::POST, &format!("/t/other/tools/{other_echo}:invoke"))
                .json(&invocation("echo", &[("text", json!("mine"))]))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 200);
            let body: Value = response.json().await.unwrap();
            assert_eq!(outputs(&body)["text"], "mine");
        }
    };
    // A generous guard against a hang, not a speed test.
    tokio::time::timeout(std::time::Duration::from_secs(60), others).await.unwrap();
    for (i, call) in calls.into_iter().enumerate() {
        let status = call.await.unwrap().unwrap().status().as_u16();
        assert_eq!(status, if i % 2 == 0 { 202 } else { 200 }, "call {i}: the condition decided");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn hidden_characters_are_shown_as_markers_and_reach_the_tool_unchanged() {
    let (server, _plugins) = confirming_server(&[]).await;
    let echo = server.tool_id("echo").await;
    let path = format!("/admin/tools/{echo}/confirmation");
    server.call_as(Some(TOKEN), Method::PUT, &path, Some(&json!({ "required": true }))).await;
    // An IBAN whose tail a RIGHT-TO-LEFT OVERRIDE reverses on screen, and invisible characters.
    let hidden = [
        '\u{202E}', '\u{200B}', '\u{2066}', '\u{2067}', '\u{2068}', '\u{2069}', '\u{061C}', '\u{FEFF}', '\u{00AD}',
        '\u{2060}',
    ];
    let spoofed = format!("DE89 3704 0044 {}3210 5130 02{}", hidden[0], hidden[1..].iter().collect::<String>());
    let (status, _, pack) = call_for(&server, Some("alice"), "echo", &[("text", json!(spoofed))]).await;
    assert_eq!(status, 202, "{pack}");

    // The signed CHEQ: the raw value, and beside it the display form.
    let (_, _, object) = fetch(&format!("{}?raw", pack["resource uri"].as_str().unwrap())).await;
    let parameter = &object["inputs"]["parameters"][0];
    assert_eq!(parameter["parameter value"], json!(spoofed));
    let markers: String = hidden[1..].iter().map(|c| format!("<U+{:04X}>", u32::from(*c))).collect();
    assert_eq!(parameter["parameter display value"], json!(format!("DE89 3704 0044 <U+202E>3210 5130 02{markers}")));

    // The page shows each as a styled marker, never the character itself, and warns.
    let session = PageSession::log_in(&pack, "alice").await;
    let (status, html) = session.page(&pack).await;
    assert_eq!(status, 200, "{html}");
    for c in hidden {
        assert!(!html.contains(c), "U+{:04X} is on the page as itself", u32::from(c));
        let marker =
            format!("<span class=\"hidden-char\" title=\"invisible character\">&lt;U+{:04X}&gt;</span>", u32::from(c));
        assert!(html.contains(&marker), "no marker for U+{:04X}:\n{html}", u32::from(c));
    }
    assert!(html.contains("DE89 3704 0044 <span class=\"hidden-char\""), "{html}");
    assert!(html.contains("id=\"hidden-warning\""), "{html}");

    // Accepted, the tool gets exactly what was sent.
    let (status, html) = session.decide(&pack, "accept").await;
    assert_eq!(status, 200, "{html}");
    let (status, _, body) = fetch(pack["result uri"].as_str().unwrap()).await;
    assert_eq!((status, &outputs(&body)["text"]), (200, &json!(spoofed)), "{body}");

    // A value without such characters has no display form and no warning.
    let (_, _, pack) =
        call_for(&server, Some("alice"), "echo", &[("text", json!("DE89 3704 0044 0532 0130 00"))]).await;
    let (_, _, object) = fetch(&format!("{}?raw", pack["resource uri"].as_str().unwrap())).await;
    assert!(object["inputs"]["parameters"][0].get("parameter display value").is_none(), "{object}");
    let (_, html) = session.page(&pack).await;
    assert!(!html.contains("hidden-warning") && html.contains("DE89 3704 0044 0532 0130 00"), "{html}");
}

/// A LONG STROKE OVERLAY (U+0336) after two digits of an IBAN makes them
/// read as struck out, a slash (U+0338) or an enclosing circle (U+20DD)
/// changes a digit: each is a marker in the CHEQ's display form and on the
/// page, and the tool gets the value unchanged.
#[tokio::test(flavor = "multi_thread")]
async fn combining_marks_over_digits_are_shown_as_markers_and_reach_the_tool_unchanged() {
    let (server, _plugins) = confirming_server(&[]).await;
    let echo = server.tool_id("echo").await;
    let path = format!("/admin/tools/{echo}/confirmation");
    server.call_as(Some(TOKEN), Method::PUT, &path, Some(&json!({ "required": true }))).await;
    let struck = "DE89 3704 0044 05\u{0336}3\u{0336}2 0130 0\u{0338}0\u{20DD}";
    let (status, _, pack) = call_for(&server, Some("alice"), "echo", &[("text", json!(struck))]).await;
    assert_eq!(status, 202, "{pack}");

    let (_, _, object) = fetch(&format!("{}?raw", pack["resource uri"].as_str().unwrap())).await;
    let parameter = &object["inputs"]["parameters"][0];
    assert_eq!(parameter["parameter value"], json!(struck));
    assert_eq!(
        parameter["parameter display value"],
        json!("DE89 3704 0044 05<U+0336>3<U+0336>2 0130 0<U+0338>0<U+20DD>")
    );

    let session = PageSession::log_in(&pack, "alice").await;
    let (status, html) = session.page(&pack).await;
    assert_eq!(status, 200, "{html}");
    for c in ['\u{0336}', '\u{0338}', '\u{20DD}'] {
        assert!(!html.contains(c), "U+{:04X} is on the page as itself", u32::from(c));
        let marker =
            format!("<span class=\"hidden-char\" title=\"combining mark\">&lt;U+{:04X}&gt;</span>", u32::from(c));
        assert!(html.contains(&marker), "no marker for U+{:04X}:\n{html}", u32::from(c));
    }
    assert!(html.contains("DE89 3704 0044 05<span class=\"hidden-char\""), "{html}");
    assert!(html.contains("id=\"hidden-warning\""), "{html}");

    let (status, html) = session.decide(&pack, "accept").await;
    assert_eq!(status, 200, "{html}");
    let (status, _, body) = fetch(pack["result uri"].as_str().unwrap()).await;
    assert_eq!((status, &outputs(&body)["text"]), (200, &json!(struck)), "{body}");

    // Text written with combining marks reads as it is: no markers, no warning.
    let (_, _, pack) = call_for(&server, Some("alice"), "echo", &[("text", json!("नमस्ते"))]).await;
    let (_, _, object) = fetch(&format!("{}?raw", pack["resource uri"].as_str().unwrap())).await;
    assert!(object["inputs"]["parameters"][0].get("parameter display value").is_none(), "{object}");
    let (_, html) = session.page(&pack).await;
    assert!(!html.contains("hidden-warning") && html.contains("नमस्ते"), "{html}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_acceptance_after_its_version_was_retired_ends_the_transaction() {
    let (server, _plugins) = confirming_server(&[]).await;
    let book = server.tool_id("book_flight").await;
    // One call through A2T, one through OTC; both wait for alice.
    let (status, _, a2t) = call_for(&server, Some("alice"), "book_flight", &booking("FIRST", 1)).await;
    assert_eq!(status, 202, "{a2t}");
    let otc_call = json!({ "request": {
        "call_id": "retired-1",
        "tool_id": "Travel.BookFlight@1.0.0",
        "input": { "flight_number": "UA123", "date": "2026-12-24", "passengers": 1, "cabin_class": "FIRST" },
        "context": { "user_id": "alice" },
    } });
    let response = server.request(Method::POST, "/otc/tools/call").json(&otc_call).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let otc: Value = response.json().await.unwrap();

    // The publisher retires the version both calls were made to.
    let (status, body) = server.delete(&format!("/admin/tools/{book}/versions/1")).await;
    assert_eq!(status, 200, "{body}");

    // Accepted on the page: refused, 410, and the transaction is over.
    let session = PageSession::log_in(&a2t, "alice").await;
    let (status, html) = session.decide(&a2t, "accept").await;
    assert_eq!(status, 410, "{html}");
    assert!(html.contains("was retired") && html.contains("the tool did not run"), "{html}");
    let (status, _, body) = fetch(a2t["result uri"].as_str().unwrap()).await;
    assert_eq!((status, &body["error"]["code"]), (410, &json!("version_retired")), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("did not run"), "{body}");
    let (status, html) = session.page(&a2t).await;
    assert_eq!(status, 409, "decided once: {html}");
    let transaction = a2t["resource uri"].as_str().unwrap().rsplit('/').next().unwrap();
    let (status, evidence) = server.get(&format!("/admin/cheq/{transaction}")).await;
    assert_eq!((status, &evidence["state"], &evidence["result_status"]), (200, &json!("retired"), &Value::Null));
    assert!(evidence["decision"]["signatures"].as_array().unwrap().len() == 2, "the acceptance is kept: {evidence}");

    // The same through OTC: its result URI answers in OTC's error shape.
    let (status, html) = session.decide(&otc, "accept").await;
    assert_eq!(status, 410, "{html}");
    let (status, _, body) = fetch(otc["result uri"].as_str().unwrap()).await;
    assert_eq!((status, &body["code"]), (410, &json!("version_retired")), "{body}");
    assert!(body["$schema"].is_string(), "an OTC ServerErrorResponse: {body}");
    let (_, audit) = server.get("/admin/audit").await;
    let refused = audit["items"].as_array().unwrap().iter().filter(|e| e["action"] == "cheq.accept.retired").count();
    assert_eq!(refused, 2, "both refusals are audited: {audit}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_a2t_signature_marks_private_inputs_and_does_not_require_them_of_the_agent() {
    let (server, _plugins) = confirming_server(&[]).await;
    let id = server.tool_id("transfer_funds").await;
    let (status, signature) = server.get(&format!("/tools/{id}")).await;
    assert_eq!(status, 200, "{signature}");
    let inputs = signature["input_parameters"].as_array().unwrap();
    let private: Vec<&Value> = inputs.iter().filter(|p| p["private"] == true).collect();
    assert!(!private.is_empty(), "{signature}");
    for input in &private {
        assert_eq!(input["required"], false, "the agent is not asked for {input}");
    }
    // The others are as before, and unmarked.
    assert!(inputs.iter().filter(|p| p.get("private").is_none()).all(|p| p["required"].is_boolean()));
    assert!(inputs.iter().any(|p| p.get("private").is_none() && p["required"] == true), "{signature}");
}

#[tokio::test(flavor = "multi_thread")]
async fn every_protocol_says_which_tools_need_their_end_user() {
    let (server, _plugins) = confirming_server(&[]).await;
    // A2T: the signature extension.
    let marker = |name: &'static str| {
        let server = &server;
        async move {
            let id = server.tool_id(name).await;
            server.get(&format!("/tools/{id}")).await.1["confirmation"].clone()
        }
    };
    assert_eq!(marker("book_flight").await, "conditional");
    assert_eq!(marker("transfer_funds").await, "required");
    assert_eq!(marker("echo").await, Value::Null);
    // OTC: `requirements.user_id`, and nothing for a tool that never asks.
    let (status, otc) = server.get("/otc/tools").await;
    assert_eq!(status, 200, "{otc}");
    let definition = |name: &str| {
        otc["tools"].as_array().unwrap().iter().find(|d| d["id"].as_str().unwrap().contains(name)).unwrap().clone()
    };
    assert_eq!(definition("BookFlight")["requirements"]["user_id"], true);
    assert_eq!(definition("TransferFunds")["requirements"]["user_id"], true);
    assert!(definition("Echo").get("requirements").is_none(), "{otc}");
    // A publisher's override changes what they say, and the A2T ETag with it.
    let id = server.tool_id("echo").await;
    let tag = server.request(Method::GET, &format!("/tools/{id}")).send().await.unwrap().headers()["etag"].clone();
    let always = json!({ "required": true });
    let path = format!("/admin/tools/{id}/confirmation");
    assert_eq!(server.call_as(Some(TOKEN), Method::PUT, &path, Some(&always)).await.0, 204);
    assert_eq!(marker("echo").await, "required");
    let response = server.request(Method::GET, &format!("/tools/{id}")).header("if-none-match", tag).send().await;
    assert_eq!(response.unwrap().status(), 200, "a new ETag");
    let (_, otc) = server.get("/otc/tools").await;
    let echo = otc["tools"].as_array().unwrap().iter().find(|d| d["id"].as_str().unwrap().contains("Echo")).unwrap();
    assert_eq!(echo["requirements"]["user_id"], true, "{echo}");
}

/// `POST` `body` to `uri` (with `content_type`, and `cookie` when given) as
/// a user application or confirmation server does → (status, text).
async fn post_raw(uri: &str, content_type: Option<&str>, body: String, cookie: Option<&str>) -> (u16, String) {
    let mut request = reqwest::Client::new().post(uri).body(body);
    if let Some(content_type) = content_type {
        request = request.header("content-type", content_type);
    }
    if let Some(cookie) = cookie {
        request = request.header("cookie", cookie);
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

/// A user application written from the draft (4.2) POSTs the resource URI
/// to the confirmation URI in whichever form its author read into "passing
/// the resource URI as a parameter after URI-encoding it": each reaches the
/// login page, and with a session the confirmation page, whose decision
/// runs the call.
#[tokio::test(flavor = "multi_thread")]
async fn a_user_application_posts_the_resource_uri_in_each_of_the_drafts_forms() {
    let (server, _plugins) = confirming_server(&[]).await;
    let (status, _, pack) = call_for(&server, Some("alice"), "book_flight", &booking("FIRST", 1)).await;
    assert_eq!(status, 202, "{pack}");
    let confirm = pack["confirmation uri"].as_str().unwrap();
    let resource = pack["resource uri"].as_str().unwrap();
    let id = resource.rsplit('/').next().unwrap();
    let encoded: String = form_urlencoded::byte_serialize(resource.as_bytes()).collect();
    const FORM: Option<&str> = Some("application/x-www-form-urlencoded");
    let forms: Vec<(&str, String, Option<&str>, String)> = vec![
        ("the whole query, encoded", format!("{confirm}?{encoded}"), None, String::new()),
        ("the whole query, as it is", format!("{confirm}?{resource}"), None, String::new()),
        ("the query's `resource uri`", format!("{confirm}?resource%20uri={encoded}"), None, String::new()),
        ("the body, as text", confirm.into(), Some("text/plain"), format!("{resource}\n")),
        ("the body, encoded without a key", confirm.into(), FORM, encoded.clone()),
        ("the form field `resource%20uri`", confirm.into(), FORM, format!("resource%20uri={encoded}")),
        ("the form field `resource+uri`", confirm.into(), FORM, format!("resource+uri={encoded}")),
        ("Plinth's form field", confirm.into(), FORM, format!("resource_uri={encoded}")),
        ("the URI pack, as JSON", confirm.into(), Some("application/json"), pack.to_string()),
        ("the same URI twice", format!("{confirm}?resource_uri={encoded}"), FORM, format!("resource%20uri={encoded}")),
    ];
    let session = PageSession::log_in(&pack, "alice").await;
    for (what, uri, content_type, body) in &forms {
        let (status, html) = post_raw(uri, *content_type, body.clone(), None).await;
        assert_eq!(status, 200, "{what}: {html}");
        assert!(html.contains("Log in to see what you are asked to confirm"), "{what}: {html}");
        assert!(html.contains(&format!("name=\"resource_uri\" value=\"{resource}\"")), "{what}: {html}");
        let (status, html) = post_raw(uri, *content_type, body.clone(), Some(&session.cookie)).await;
        assert_eq!(status, 200, "{what}: {html}");
        assert!(html.contains("Book flight") && html.contains("id=\"accept\""), "{what}: {html}");
        assert!(html.contains(&format!("name=\"transaction\" value=\"{id}\"")), "{what}: {html}");
    }

    // What names no resource URI of this server, or two, is refused.
    let other = resource.replace(id, "another-transaction");
    let refused = [
        ("nothing", confirm.to_string(), FORM, String::new()),
        ("a form without the field", confirm.into(), FORM, "user=alice".to_string()),
        ("two different URIs", format!("{confirm}?{encoded}"), FORM, format!("resource_uri={other}")),
        (
            "another server's URI",
            confirm.into(),
            Some("text/plain"),
            "https://elsewhere.example/cheq/transactions/x".into(),
        ),
    ];
    for (what, uri, content_type, body) in refused {
        let (status, html) = post_raw(&uri, content_type, body, None).await;
        assert_eq!(status, 400, "{what}: {html}");
        assert!(html.contains("Nothing to confirm"), "{what}: {html}");
    }

    // The page reached through the draft's form decides as ever.
    let (status, html) = session.decide(&pack, "accept").await;
    assert_eq!(status, 200, "{html}");
    let (status, _, body) = fetch(pack["result uri"].as_str().unwrap()).await;
    assert_eq!((status, &outputs(&body)["cabin_class"]), (200, &json!("FIRST")), "{body}");
}

/// `POST` `body` to `{resource}?{query}` (no `?` when `query` is empty) →
/// (status, JSON).
async fn post_decision(resource: &str, query: &str, content_type: &str, body: String) -> (u16, Value) {
    let uri = if query.is_empty() { resource.to_string() } else { format!("{resource}?{query}") };
    let (status, text) = post_raw(&uri, Some(content_type), body, None).await;
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// A confirmation server written from the draft: it fetches the CHEQ with
/// `GET {resource-server}/cheq` presenting its own service account, and
/// posts `?accept` as its HTTP client writes it, with the CHEQ in whichever
/// JWS serialization it chose (the draft leaves the syntax open).
#[tokio::test(flavor = "multi_thread")]
async fn a_confirmation_server_written_from_the_draft_fetches_and_decides_in_its_forms() {
    let external = ConfirmationServer::start().await;
    let (server, _plugins) = confirming_server(&LOCAL_JWKS).await;
    let setting = json!({ "uri": "https://confirm.example/", "jwks_url": external.jwks_url });
    let (status, body) = server.call_as(Some(TOKEN), Method::PUT, "/admin/confirmation-server", Some(&setting)).await;
    assert_eq!(status, 204, "{body}");
    let book = || async {
        let (status, _, pack) = call_for(&server, Some("alice"), "book_flight", &booking("FIRST", 1)).await;
        assert_eq!(status, 202, "{pack}");
        pack
    };

    // `GET {resource uri}/cheq`: the same CHEQ as `GET {resource uri}`,
    // whatever the caller authenticates with.
    let pack = book().await;
    let resource = pack["resource uri"].as_str().unwrap();
    let (_, _, signed) = fetch(resource).await;
    let response = reqwest::Client::new()
        .get(format!("{resource}/cheq"))
        .bearer_auth("the-confirmation-servers-own-service-account")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.json::<Value>().await.unwrap(), signed);
    let (status, _, raw) = fetch(&format!("{resource}/cheq?raw")).await;
    assert_eq!((status, raw), (200, payload(&signed)), "?raw there too");

    // A query that leaves the decision in doubt is refused, and decides nothing.
    let accepted = external.countersign(&signed, &external.key, "alice", "accept");
    for query in
        ["accept&reject", "reject&accept=", "accept=false", "accept=1", "raw", "accept&raw", "decision=accept", ""]
    {
        let (status, body) = post_decision(resource, query, "application/json", accepted.to_string()).await;
        assert_eq!((status, &body["error"]["code"]), (400, &json!("invalid_decision")), "?{query}: {body}");
    }
    let (status, _, body) = fetch(pack["result uri"].as_str().unwrap()).await;
    assert_eq!((status, &body["state"]), (202, &json!("pending")), "{body}");

    // The decision as HTTP clients write it, with each JWS serialization.
    // `alone`: the confirmation server's signature only, over the payload
    // this server issued.
    let alone = |signed: &Value| {
        let claims = json!({ "sub": "alice", "decision": "accept" }).as_object().unwrap().clone();
        let jws = plinth::cheq::sign(&payload(signed), &external.key, claims);
        assert_eq!(jws["payload"], signed["payload"], "the same payload bytes");
        jws
    };
    type Form = fn(&Value, &Value) -> (String, &'static str);
    let general: Form = |signed, _| (signed.to_string(), "application/json");
    let general_alone: Form = |_, alone| (alone.to_string(), "application/json");
    let flattened: Form = |_, alone| {
        let s = &alone["signatures"][0];
        let body = json!({ "payload": alone["payload"], "protected": s["protected"], "signature": s["signature"] });
        (body.to_string(), "application/jose+json")
    };
    let compact: Form = |_, alone| {
        let s = &alone["signatures"][0];
        let (protected, signature) = (s["protected"].as_str().unwrap(), s["signature"].as_str().unwrap());
        (format!("{protected}.{}.{signature}\n", alone["payload"].as_str().unwrap()), "application/jose")
    };
    let cases: [(&str, &str, Form); 5] = [
        ("accept", "general, both signatures", general),
        ("accept=", "general, its signature alone", general_alone),
        ("accept=true", "flattened", flattened),
        ("%61ccept", "compact", compact),
        ("accept&accept", "general, both signatures", general),
    ];
    for (query, what, form) in cases {
        let pack = book().await;
        let resource = pack["resource uri"].as_str().unwrap();
        let (_, _, signed) = fetch(&format!("{resource}/cheq")).await;
        let (body, content_type) =
            form(&external.countersign(&signed, &external.key, "alice", "accept"), &alone(&signed));
        let (status, answer) = post_decision(resource, query, content_type, body).await;
        assert_eq!((status, &answer["state"]), (200, &json!("accepted")), "?{query} {what}: {answer}");
        let (status, _, result) = fetch(pack["result uri"].as_str().unwrap()).await;
        assert_eq!(status, 200, "?{query} {what}: {result}");
        // The evidence holds both signatures, this server's completing a lone one.
        let id = resource.rsplit('/').next().unwrap();
        let (_, evidence) = server.get(&format!("/admin/cheq/{id}")).await;
        assert_eq!(evidence["decision"]["signatures"].as_array().unwrap().len(), 2, "{what}: {evidence}");
        assert_eq!(evidence["decision"]["payload"], signed["payload"], "{what}");
    }

    // A body that is no JWS is refused as before; `?reject=` rejects.
    let pack = book().await;
    let resource = pack["resource uri"].as_str().unwrap();
    let (status, body) = post_decision(resource, "accept", "text/plain", "yes please".into()).await;
    assert_eq!((status, &body["error"]["code"]), (400, &json!("invalid_json")), "{body}");
    let (status, body) = post_decision(resource, "reject=", "text/plain", String::new()).await;
    assert_eq!((status, &body["state"]), (200, &json!("rejected")), "{body}");
    let (status, _, body) = fetch(pack["result uri"].as_str().unwrap()).await;
    assert_eq!((status, &body["error"]["code"]), (403, &json!("confirmation_rejected")), "{body}");
}

/// The countersigned CHEQ of transaction B posted to transaction A: every
/// signature is good, but it is not A's CHEQ. Refused `409 cheq_altered`,
/// naming B; neither transaction is decided by it.
#[tokio::test(flavor = "multi_thread")]
async fn the_cheq_of_another_transaction_is_refused_and_decides_neither() {
    let external = ConfirmationServer::start().await;
    let (server, _plugins) = confirming_server(&LOCAL_JWKS).await;
    let setting = json!({ "uri": "https://confirm.example/", "jwks_url": external.jwks_url });
    server.call_as(Some(TOKEN), Method::PUT, "/admin/confirmation-server", Some(&setting)).await;
    let (_, _, a) = call_for(&server, Some("alice"), "book_flight", &booking("FIRST", 1)).await;
    let (_, _, b) = call_for(&server, Some("alice"), "book_flight", &booking("FIRST", 1)).await;
    let (a_resource, b_resource) = (a["resource uri"].as_str().unwrap(), b["resource uri"].as_str().unwrap());
    let b_id = b_resource.rsplit('/').next().unwrap();
    let (_, _, a_signed) = fetch(a_resource).await;
    let (_, _, b_signed) = fetch(b_resource).await;
    let b_accepted = external.countersign(&b_signed, &external.key, "alice", "accept");

    let (status, body) = decide(a_resource, "accept", &b_accepted).await;
    assert_eq!((status, &body["error"]["code"]), (409, &json!("cheq_altered")), "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains(b_id) && message.contains("its own resource URI"), "{message}");
    for pack in [&a, &b] {
        let (status, _, body) = fetch(pack["result uri"].as_str().unwrap()).await;
        assert_eq!((status, &body["state"]), (202, &json!("pending")), "{body}");
    }

    // Each CHEQ accepts its own transaction.
    let (status, body) = decide(b_resource, "accept", &b_accepted).await;
    assert_eq!((status, &body["state"]), (200, &json!("accepted")), "{body}");
    let a_accepted = external.countersign(&a_signed, &external.key, "alice", "accept");
    let (status, body) = decide(a_resource, "accept", &a_accepted).await;
    assert_eq!((status, &body["state"]), (200, &json!("accepted")), "{body}");
}

/// A tool with private inputs, in a tenant with an external confirmation
/// server: only this server's page collects private inputs, so the URI pack
/// sends the end user there (through A2T and OTC alike), the external
/// server's acceptance is refused, and the page completes the flow.
#[tokio::test(flavor = "multi_thread")]
async fn a_private_input_tool_is_confirmed_on_this_servers_page_despite_an_external_server() {
    let external = ConfirmationServer::start().await;
    let (server, _plugins) = confirming_server(&LOCAL_JWKS).await;
    let setting = json!({ "uri": "https://confirm.example/", "jwks_url": external.jwks_url });
    server.call_as(Some(TOKEN), Method::PUT, "/admin/confirmation-server", Some(&setting)).await;
    let builtin = format!("{}/cheq/confirm", server.base);
    // Other tools go to the tenant's server.
    let (_, _, booking_pack) = call_for(&server, Some("alice"), "book_flight", &booking("FIRST", 1)).await;
    assert_eq!(booking_pack["confirmation uri"], "https://confirm.example/");

    let (status, _, pack) = call_for(&server, Some("alice"), "transfer_funds", &[("amount_usd", json!(250))]).await;
    assert_eq!(status, 202, "{pack}");
    assert_eq!(pack["confirmation uri"], json!(builtin), "{pack}");
    // Its `describe` ran before anyone entered the accounts: it saw them empty.
    let (_, _, signed) = fetch(pack["resource uri"].as_str().unwrap()).await;
    let facts: Vec<Value> =
        payload(&signed)["facts"].as_array().unwrap().iter().map(|f| f["fact value"].clone()).collect();
    assert_eq!(facts, [json!("(empty)"), json!("(empty)")]);
    let otc = json!({ "request": { "call_id": "t-1", "tool_id": "Default.TransferFunds", "input": { "amount_usd": 9 }, "context": { "user_id": "alice" } } });
    for _ in 0..2 {
        let (status, answer) = server.post("/otc/tools/call", &otc).await;
        assert_eq!((status, &answer["confirmation uri"]), (200, &json!(builtin)), "{answer}");
    }

    // The external server's acceptance cannot stand in for the page.
    let resource = pack["resource uri"].as_str().unwrap();
    let (_, _, signed) = fetch(resource).await;
    let accepted = external.countersign(&signed, &external.key, "alice", "accept");
    let (status, body) = decide(resource, "accept", &accepted).await;
    assert_eq!((status, &body["error"]["code"]), (403, &json!("not_confirmed")), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("private inputs"), "{body}");

    // Alice types the accounts on this server's page, and the transfer runs.
    let session = PageSession::log_in(&pack, "alice").await;
    let (status, html) = session.page(&pack).await;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("name=\"private.to_account\""), "{html}");
    let private = [("from_account", "DE89370400440532013000"), ("to_account", "GB29NWBK60161331926819")];
    let (status, html) = session.decide_with(&pack, "accept", &private).await;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("You confirmed"), "{html}");
    let (status, _, body) = fetch(pack["result uri"].as_str().unwrap()).await;
    assert_eq!((status, &outputs(&body)["to_account_last4"]), (200, &json!("6819")), "{body}");
}

/// The result URI's answer is final — the call does not run again — so an
/// answer that was a temporary `5xx` when the tool ran (here a timeout while
/// the tool waited) is kept as `422` with its code and no `Retry-After`: an
/// A2T executor polling the URI would retry a `5xx` forever (docs/a2t.md,
/// "Status codes").
#[tokio::test(flavor = "multi_thread")]
async fn a_confirmed_calls_kept_answer_is_never_a_5xx() {
    let plugins = tempfile::tempdir().unwrap();
    std::fs::write(plugins.path().join("slow_sleep.wasm"), fixture("slow_sleep.wasm")).unwrap();
    let args = ["--plugins", plugins.path().to_str().unwrap(), "--deadline-ms", "500"];
    let server = Server::start_in(tempfile::tempdir().unwrap(), &args);
    let password = json!({ "password": "alice-password" });
    let (status, _) = server.call_as(Some(TOKEN), Method::PUT, "/admin/end-users/alice", Some(&password)).await;
    assert_eq!(status, 204);
    let id = server.tool_id("slow_sleep").await;
    let always = json!({ "required": true });
    let path = format!("/admin/tools/{id}/confirmation");
    assert_eq!(server.call_as(Some(TOKEN), Method::PUT, &path, Some(&always)).await.0, 204);

    let (status, _, pack) = call_for(&server, Some("alice"), "slow_sleep", &[("millis", json!(900))]).await;
    assert_eq!(status, 202, "{pack}");
    let session = PageSession::log_in(&pack, "alice").await;
    let (status, html) = session.decide(&pack, "accept").await;
    assert_eq!(status, 200, "{html}");
    let (status, headers, body) = fetch(pack["result uri"].as_str().unwrap()).await;
    assert_eq!((status, &body["error"]["code"]), (422, &json!("tool_timeout")), "{body}");
    assert!(headers.get("retry-after").is_none(), "{headers:?}");
    let transaction = pack["resource uri"].as_str().unwrap().rsplit('/').next().unwrap();
    let (_, evidence) = server.get(&format!("/admin/cheq/{transaction}")).await;
    assert_eq!(evidence["result_status"], 422, "{evidence}");
}

/// The confirmation pages' login and decision are posted only by the pages
/// themselves: another site's form (a browser marks it, by Fetch Metadata
/// or by its `Origin`) neither logs the browser in (login CSRF) nor
/// decides anything, even with the page's session and form token.
#[tokio::test(flavor = "multi_thread")]
async fn the_login_and_the_decision_are_refused_when_another_site_posts_them() {
    let (server, _plugins) = confirming_server(&[]).await;
    let (status, _, pack) = call_for(&server, Some("alice"), "book_flight", &booking("BUSINESS", 1)).await;
    assert_eq!(status, 202, "{pack}");
    let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let (form, cookie) = login_form(&client, &pack, "alice").await;
    let login = format!("{}/cheq/login", server.base);
    for (name, value) in
        [("sec-fetch-site", "cross-site"), ("sec-fetch-site", "same-site"), ("origin", "https://evil.example")]
    {
        let response =
            client.post(&login).header("cookie", &cookie).header(name, value).form(&form).send().await.unwrap();
        assert_eq!(response.status(), 403, "{name}: {value}");
        assert!(response.headers().get("set-cookie").is_none(), "no session for {name}: {value}");
    }
    // A browser that says nothing of where the post came from (`Origin:
    // null`, or no Fetch Metadata) is let in only by the page's token: a
    // post without the cookie, or with another token, is refused.
    let foreign = [form[0].clone(), form[1].clone(), form[2].clone(), ("login_token", "f".repeat(32))];
    for (cookie, form) in [(None, &form), (Some(cookie.as_str()), &foreign)] {
        let mut post = client.post(&login).header("origin", "null").form(form);
        if let Some(cookie) = cookie {
            post = post.header("cookie", cookie);
        }
        let response = post.send().await.unwrap();
        assert_eq!(response.status(), 403, "cookie {cookie:?}");
        assert!(response.headers().get("set-cookie").is_none());
    }
    // The page's own post (same-origin) logs in; a decision another site
    // posts with that session is refused, and the transaction still waits.
    let response = client
        .post(&login)
        .header("cookie", &cookie)
        .header("sec-fetch-site", "same-origin")
        .form(&form)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 303);
    let session = PageSession::log_in(&pack, "alice").await;
    let (status, _) = session.post_decision(&pack, "accept", &[], &[("sec-fetch-site", "cross-site")]).await;
    assert_eq!(status, 403);
    let (status, html) = session.page(&pack).await;
    assert_eq!(status, 200, "still waiting: {html}");
    assert!(html.contains("name=\"form_token\""), "the decision is still to be made: {html}");
}
