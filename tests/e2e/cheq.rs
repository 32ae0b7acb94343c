//! CHEQ, end to end: a tool's `[confirmation]` policy, checked when it is
//! packed and enforced on every call, and the server's published signing key.
//!
//! The confirmation flow itself (202 and the URI pack, the confirmation
//! page, accept and reject) is not served yet; until it is, a call that needs
//! confirmation must never run.

use crate::support::{Server, invocation, outputs, plinth_bin, plugins_dir};
use reqwest::Method;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;

/// `plugin` packed from its built component with `confirmation` (TOML) as
/// its `[confirmation]` table, into `dir`. Returns the packed file, or what
/// `plinth pack` said when it refused.
fn pack_with_confirmation(plugin: &str, confirmation: &str, dir: &Path) -> Result<PathBuf, String> {
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

fn booking(cabin: &str, passengers: u32) -> Vec<(&'static str, Value)> {
    vec![
        ("flight_number", json!("UA123")),
        ("date", json!("2026-12-24")),
        ("passengers", json!(passengers)),
        ("cabin_class", json!(cabin)),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_that_needs_confirmation_never_runs_unconfirmed() {
    let plugins = tempfile::tempdir().unwrap();
    let condition = r#"when = "cabin_class in ['BUSINESS', 'FIRST'] || passengers > 4""#;
    pack_with_confirmation("book-flight", condition, plugins.path()).unwrap();
    pack_with_confirmation("echo", "required = true", plugins.path()).unwrap();
    let server = Server::start_in(tempfile::tempdir().unwrap(), &["--plugins", plugins.path().to_str().unwrap()]);

    // Below the condition the booking runs as before.
    let (status, body) = server.invoke("book_flight", &booking("ECONOMY", 2)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(outputs(&body)["total_price_usd"], 360);

    // Above it, through either front door, the tool does not run.
    for (cabin, passengers) in [("FIRST", 1), ("ECONOMY", 5)] {
        let (status, body) = server.invoke("book_flight", &booking(cabin, passengers)).await;
        assert_eq!((status, &body["error"]["code"]), (403, &json!("confirmation_required")), "{body}");
        assert!(body["error"]["message"].as_str().unwrap().contains("the tool did not run"), "{body}");
    }
    let input: serde_json::Map<String, Value> =
        booking("BUSINESS", 1).into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    let otc = json!({ "request": { "call_id": "b-1", "tool_id": "Travel.BookFlight", "input": input } });
    for _ in 0..2 {
        let (status, body) = server.post("/otc/tools/call", &otc).await;
        assert_eq!((status, &body["code"]), (403, &json!("confirmation_required")), "{body}");
    }
    let (status, body) = server.invoke("echo", &[("text", json!("hi"))]).await;
    assert_eq!((status, &body["error"]["code"]), (403, &json!("confirmation_required")), "{body}");
    let id = server.tool_id("echo").await;
    let (status, _) = server.post(&format!("/tools/{id}/versions/1:invoke"), &invocation("echo", &[])).await;
    assert_eq!(status, 400, "invalid input is still refused first");
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
    assert_eq!(keys.len(), 1);
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
