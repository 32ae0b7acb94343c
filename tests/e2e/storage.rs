//! Storage and memory, end to end: what a tenant can make the server keep
//! is bounded (versions per tool, CHEQ transactions past their retention,
//! compiled code of retired versions, deploys compiling at once), the data
//! dir is private and secrets in it are encrypted, and the first operator
//! key is never live without its file.

use crate::support::{Server, TOKEN, plinth_bin, plugins_dir, relabeled};
use reqwest::Method;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

fn echo() -> Vec<u8> {
    std::fs::read(plugins_dir().join("echo.wasm")).unwrap()
}

/// Runs `plinth serve` on `data` expecting it to fail at start; returns its
/// stderr. A server that starts instead is killed and the test fails.
fn start_fails(data: &std::path::Path, env: &[(&str, &str)]) -> String {
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut child = std::process::Command::new(plinth_bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(data)
        .env_remove("PLINTH_OPERATOR_KEY")
        .env_remove("PLINTH_SECRETS_KEY")
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::null())
        .stderr(log.reopen().unwrap())
        .spawn()
        .unwrap();
    // A hang guard only: a start that fails does so at once.
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!("plinth started, or hung, instead of failing");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stderr = std::fs::read_to_string(log.path()).unwrap();
    assert!(!status.success(), "{stderr}");
    stderr
}

#[tokio::test(flavor = "multi_thread")]
async fn the_first_operator_key_is_stored_only_once_its_file_is_written() {
    let data = tempfile::tempdir().unwrap();
    // Nothing can be written at DATA/operator.key: a directory is in the way.
    let file = data.path().join("operator.key");
    std::fs::create_dir(&file).unwrap();
    let stderr = start_fails(data.path(), &[]);
    assert!(stderr.contains("creating the first operator key"), "{stderr}");

    // Had the key been stored before its file, this start would find a live
    // operator key and make none: nobody would hold one.
    std::fs::remove_dir(&file).unwrap();
    let (server, printed) = Server::start_with(data, &[], None);
    let key = std::fs::read_to_string(&file).unwrap().trim().to_string();
    assert!(key.starts_with("plk_"), "{key}");
    assert!(printed.iter().any(|l| l.contains(&key)), "{printed:?}");
    assert_eq!(server.call_as(Some(&key), Method::GET, "/admin/tenants", None).await.0, 200);
    let (_, keys) = server.call_as(Some(&key), Method::GET, "/admin/keys", None).await;
    let operators = keys["items"].as_array().unwrap().iter().filter(|k| k["role"] == "operator").count();
    assert_eq!(operators, 1, "the failed start stored no key: {keys}");
    let leftovers: Vec<_> = std::fs::read_dir(server.data.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "no temporary files are left: {leftovers:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_has_at_most_its_tenants_versions_retired_ones_included() {
    let server = Server::start_with(tempfile::tempdir().unwrap(), &[], Some(TOKEN)).0;
    server.create_tenant("acme", json!({ "maxVersionsPerTool": 2 })).await;
    server.create_tenant("globex", json!({})).await;
    let (_, acme) = server.create_key(Some("acme"), "publisher").await;
    let (_, globex) = server.create_key(Some("globex"), "publisher").await;

    let (status, first) = server.deploy_as(&acme, "acme", echo()).await;
    assert_eq!(status, 201, "{first}");
    assert_eq!(server.deploy_as(&acme, "acme", relabeled(&echo(), "2")).await.0, 201);
    let tool_id = first["toolId"].as_str().unwrap();
    let (status, body) =
        server.call_as(Some(&acme), Method::DELETE, &format!("/t/acme/admin/tools/{tool_id}/versions/1"), None).await;
    assert!(status < 300, "{status} {body}");

    // A retired version keeps its row and bytes, so it still counts.
    let (status, body) = server.deploy_as(&acme, "acme", relabeled(&echo(), "3")).await;
    assert_eq!((status, body["error"]["code"].as_str()), (409, Some("quota_exceeded")), "{body}");
    assert_eq!(body["error"]["maxVersionsPerTool"], 2, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("retired ones count"), "{body}");
    // The same bytes again are no new version; another tenant has its own quota.
    assert_eq!(server.deploy_as(&acme, "acme", relabeled(&echo(), "2")).await.0, 200);
    for label in ["2", "3", "4"] {
        assert_eq!(server.deploy_as(&globex, "globex", relabeled(&echo(), label)).await.0, 201);
    }
    // Raising the quota lets the next version in.
    let raise = json!({ "quotas": { "maxVersionsPerTool": 3 } });
    assert_eq!(server.call_as(Some(TOKEN), Method::PATCH, "/admin/tenants/acme", Some(&raise)).await.0, 200);
    let (status, body) = server.deploy_as(&acme, "acme", relabeled(&echo(), "3")).await;
    assert_eq!((status, &body["version"]), (201, &json!(3)), "{body}");
}

/// `POST {resource uri}?reject`, as a confirmation server does (no key).
async fn reject(resource_uri: &str) {
    let response =
        reqwest::Client::new().post(format!("{resource_uri}?reject")).json(&Value::Null).send().await.unwrap();
    assert_eq!(response.status(), 200);
}

/// `GET` an absolute URI with the operator key → (status, body).
async fn fetch(uri: &str) -> (u16, Value) {
    let response = reqwest::Client::new().get(uri).bearer_auth(TOKEN).send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_decided_transaction_is_deleted_after_its_retention_and_a_pending_one_kept() {
    // Kept one second after it settles; the sweep runs every second.
    let server = Server::start(&["--confirmation-retention-secs", "1"]);
    server.add_end_user("", "alice").await;
    let echo_id = server.tool_id("echo").await;
    let path = format!("/admin/tools/{echo_id}/confirmation");
    assert_eq!(server.call_as(Some(TOKEN), Method::PUT, &path, Some(&json!({ "required": true }))).await.0, 204);
    let call = crate::support::invocation("echo", &[("text", json!("hi"))]);
    let mut packs = Vec::new();
    for _ in 0..2 {
        let response = server
            .request(Method::POST, &format!("/tools/{echo_id}:invoke"))
            .header("Plinth-End-User", "alice")
            .json(&call)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 202);
        packs.push(response.json::<Value>().await.unwrap());
    }
    let (decided, pending) = (&packs[0], &packs[1]);
    reject(decided["resource uri"].as_str().unwrap()).await;
    let result_uri = decided["result uri"].as_str().unwrap();
    let id = result_uri.rsplit('/').next().unwrap();
    // (That it is kept until its period ends is the store's unit test: the
    // period here is too short to observe it without a timing assumption.)

    // A hang guard only: the sweep deletes it within a couple of seconds.
    let started = Instant::now();
    let (status, body) = loop {
        let (status, body) = fetch(result_uri).await;
        if status != 403 || started.elapsed() > Duration::from_secs(60) {
            break (status, body);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!((status, body["error"]["code"].as_str()), (404, Some("unknown_transaction")), "{body}");
    let (status, body) = server.get(&format!("/admin/cheq/{id}")).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("unknown_transaction")),
        "the evidence is gone too"
    );
    assert!(server.logs().contains("deleted CHEQ transactions past their retention"));

    // The one still waiting for its end user is untouched.
    let (status, body) = fetch(pending["result uri"].as_str().unwrap()).await;
    assert_eq!((status, body["state"].as_str()), (202, Some("pending")), "{body}");
}

/// `logs` without the terminal's colour codes.
fn plain(logs: &str) -> String {
    let mut out = String::with_capacity(logs.len());
    let mut chars = logs.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            // ESC [ … m
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retired_version_drops_its_compiled_code_and_is_not_compiled_at_start() {
    let server = Server::start(&[]);
    let (status, two) = server.deploy(relabeled(&echo(), "2"), "").await;
    assert_eq!((status, &two["version"]), (201, &json!(2)), "{two}");
    let tool_id = two["toolId"].as_str().unwrap().to_string();
    assert!(!server.logs().contains("unloaded compiled code"));
    let (status, body) = server.delete(&format!("/admin/tools/{tool_id}/versions/1")).await;
    assert!(status < 300, "{status} {body}");
    let logs = plain(&server.logs());
    let unloaded = logs.lines().find(|l| l.contains("unloaded compiled code of the retired version"));
    assert!(unloaded.is_some_and(|l| l.contains("version=1")), "{logs}");

    // It still answers, from its metadata: listed, and 410 when invoked.
    let (status, body) = server.get(&format!("/tools/{tool_id}/versions/1")).await;
    assert_eq!(status, 200, "{body}");
    let call = crate::support::invocation("echo", &[("text", json!("hi"))]);
    let (status, body) = server.post(&format!("/tools/{tool_id}/versions/1:invoke"), &call).await;
    assert_eq!((status, body["error"]["code"].as_str()), (410, Some("version_retired")), "{body}");
    assert_eq!(server.post(&format!("/tools/{tool_id}/versions/2:invoke"), &call).await.0, 200);

    // After a restart, versions are registered, not linked: a live one is
    // linked at its first call, a retired one never.
    let server = Server::start_in(server.stop(), &[]);
    let logs = plain(&server.logs());
    let line = logs.lines().find(|l| l.contains("stored versions registered")).unwrap_or_else(|| panic!("{logs}"));
    assert!(line.contains("retired=1"), "{line}");
    let (status, body) = server.post(&format!("/tools/{tool_id}/versions/1:invoke"), &call).await;
    assert_eq!((status, body["error"]["code"].as_str()), (410, Some("version_retired")), "{body}");
    assert_eq!(server.post(&format!("/tools/{tool_id}/versions/2:invoke"), &call).await.0, 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn deploys_beyond_the_bound_are_answered_503_at_once() {
    let server = Server::start(&["--max-concurrent-deploys", "1"]);
    let client = reqwest::Client::new();
    let mut refused = None;
    // Rounds of simultaneous deploys of distinct bytes (each compiles),
    // until one finds the only compile slot taken; a server without the
    // bound never refuses, and the test fails after the last round.
    for round in 0..10 {
        let mut deploys = tokio::task::JoinSet::new();
        for i in 0..6 {
            let request = client
                .post(format!("{}/admin/tools", server.base))
                .bearer_auth(TOKEN)
                .header("content-type", "application/wasm")
                .body(relabeled(&echo(), &format!("r{round}-{i}")));
            deploys.spawn(async move {
                let response = request.send().await.unwrap();
                let status = response.status().as_u16();
                let retry_after = response.headers().get("retry-after").map(|v| v.to_str().unwrap().to_string());
                (status, retry_after, response.json::<Value>().await.unwrap_or(Value::Null))
            });
        }
        while let Some(answer) = deploys.join_next().await {
            let (status, retry_after, body) = answer.unwrap();
            match status {
                201 => {}
                503 => refused = Some((retry_after, body)),
                other => panic!("{other} {body}"),
            }
        }
        if refused.is_some() {
            break;
        }
    }
    let (retry_after, body) = refused.expect("no deploy was refused although only one may compile at once");
    assert_eq!(body["error"]["code"], "busy", "{body}");
    assert_eq!(retry_after.as_deref(), Some("1"));
    assert!(body["error"]["message"].as_str().unwrap().contains("nothing was deployed"), "{body}");
    // The slot is free again once the others finish.
    assert_eq!(server.deploy(relabeled(&echo(), "after"), "").await.0, 201);
}

/// The deploy slot is taken before the upload is read: an upload still
/// arriving holds one of `--max-concurrent-deploys`, so that many uploads
/// (up to 32 MiB each) are all the server holds, and a deploy beyond is
/// refused `503 busy` at once, before its body is read.
#[tokio::test(flavor = "multi_thread")]
async fn an_upload_still_arriving_holds_a_deploy_slot() {
    use std::io::{Read, Write};
    let server = Server::start(&["--max-concurrent-deploys", "1"]);
    let held = relabeled(&echo(), "held");
    let address = server.base.trim_start_matches("http://").to_string();
    // Sends the upload's head and its first KiB, and no more.
    let start_upload = || {
        let mut upload = std::net::TcpStream::connect(&address).unwrap();
        upload.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
        let head = format!(
            "POST /admin/tools HTTP/1.1\r\nhost: plinth\r\nauthorization: Bearer {TOKEN}\r\n\
             content-type: application/wasm\r\ncontent-length: {}\r\n\r\n",
            held.len()
        );
        upload.write_all(head.as_bytes()).unwrap();
        upload.write_all(&held[..1024]).unwrap();
        upload
    };
    let mut upload = start_upload();

    // Until the server has read that head, another deploy finds the slot
    // free (and deploys); from then on it is refused. If the held upload's
    // head arrived while another deploy had the slot, the upload itself was
    // refused: it is started again. A server that took the slot only once the
    // body was in never refuses: the guard fails the test.
    let started = Instant::now();
    let (status, body) = loop {
        let (status, body) = server.deploy(relabeled(&echo(), "other"), "").await;
        if status != 201 && status != 200 {
            break (status, body);
        }
        upload.set_nonblocking(true).unwrap();
        let answered = upload.peek(&mut [0u8; 1]).is_ok();
        upload.set_nonblocking(false).unwrap();
        if answered {
            upload = start_upload();
        }
        assert!(started.elapsed() < Duration::from_secs(60), "a deploy was never refused while an upload arrived");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!((status, body["error"]["code"].as_str()), (503, Some("busy")), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("nothing was deployed"), "{body}");

    // The held upload completes and deploys; then the slot is free again.
    upload.write_all(&held[1024..]).unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = upload.read(&mut buf).unwrap();
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&answer));
        answer.extend_from_slice(&buf[..n]);
    }
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
    assert_eq!(server.deploy(relabeled(&echo(), "after"), "").await.0, 201);
}

/// Every file under `dir` (but the test's own server log), recursively.
fn files_under(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.push(path.clone());
            files_under(&path, out);
        } else if path.file_name().is_some_and(|n| n != "server.log") {
            out.push(path);
        }
    }
}

/// Asserts the data dir is 0700, every directory in it 0700 and every file
/// 0600, and that no file in it holds `secret`.
fn assert_private_and_sealed(data: &std::path::Path, secret: &str) {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(data), 0o700, "the data dir");
    let mut paths = Vec::new();
    files_under(data, &mut paths);
    assert!(paths.iter().any(|p| p.ends_with("registry.sqlite3")), "{paths:?}");
    assert!(paths.iter().any(|p| p.ends_with("secrets.key")), "{paths:?}");
    for path in &paths {
        let expected = if path.is_dir() { 0o700 } else { 0o600 };
        assert_eq!(mode(path), expected, "{}", path.display());
    }
    // The server's log too: a secret is never logged.
    paths.push(data.join("server.log"));
    for path in paths.iter().filter(|p| p.is_file()) {
        let bytes = std::fs::read(path).unwrap();
        assert!(!bytes.windows(secret.len()).any(|w| w == secret.as_bytes()), "{} holds the secret", path.display());
    }
}

/// What `use_secret` reports of the secrets it can read.
async fn report(server: &Server) -> Value {
    let call = [("log_lines", json!(0)), ("fail", json!(false))];
    let (status, body) = server.invoke("use_secret", &call).await;
    assert_eq!(status, 200, "{body}");
    crate::support::outputs(&body)["report"].clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_data_dir_is_private_and_a_stored_secret_is_in_no_file_of_it() {
    let plugins = tempfile::tempdir().unwrap();
    std::fs::write(plugins.path().join("use_secret.wasm"), crate::support::fixture("use_secret.wasm")).unwrap();
    let plugins_arg = plugins.path().to_str().unwrap().to_string();
    let data = tempfile::tempdir().unwrap();
    // Too open before the first start: tightened, with a warning.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(data.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let server = Server::start_in(data, &["--plugins", &plugins_arg]);
    assert!(server.logs().contains("now 0700"), "{}", server.logs());

    const SECRET: &str = "sk-live-0c4e8d2a91f7b35e";
    let put = server.request(Method::PUT, "/admin/secrets/api-key").body(SECRET).send().await.unwrap();
    assert_eq!(put.status(), 204);
    assert_eq!(report(&server).await, "api-key=[redacted]; undeclared-key=none", "the tool gets it");
    assert_private_and_sealed(server.data.path(), SECRET);

    // A restart keeps it.
    let server = Server::start_in(server.stop(), &[]);
    assert_eq!(report(&server).await, "api-key=[redacted]; undeclared-key=none");
    assert_private_and_sealed(server.data.path(), SECRET);

    // Another key cannot open them: the start fails and says what to do.
    let data = server.stop();
    let other = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="; // base64 of 32 bytes
    let stderr = start_fails(data.path(), &[("PLINTH_SECRETS_KEY", other)]);
    assert!(stderr.contains("start the server with the key they were stored with"), "{stderr}");
    let stderr = start_fails(data.path(), &[("PLINTH_SECRETS_KEY", "too-short")]);
    assert!(stderr.contains("base64 of 32 random bytes"), "{stderr}");

    // The key given to the server works like the file, and no file is made.
    let key = std::fs::read_to_string(data.path().join("secrets.key")).unwrap();
    std::fs::remove_file(data.path().join("secrets.key")).unwrap();
    let server = Server::start_in(data, &["--secrets-key", key.trim()]);
    assert_eq!(report(&server).await, "api-key=[redacted]; undeclared-key=none");
    assert!(!server.data.path().join("secrets.key").exists());
}

/// What a publisher can make every replica keep in memory and the store
/// keep for good is bounded by its tenant's quotas: secrets (registry
/// credentials are secrets), config values and end users, each refused past
/// its quota with `409 quota_exceeded` naming it and nothing stored; a value
/// it has can always be set again. A config value is audited by its size
/// and sha256, never whole. (Before, none of them had a bound, and every
/// config value was copied whole into the append-only audit log.)
#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_keeps_at_most_its_quotas_of_secrets_config_values_and_end_users() {
    let server = Server::start(&[]);
    let tenant = server.create_tenant("acme", json!({ "maxSecrets": 2, "maxConfigValues": 2, "maxEndUsers": 1 })).await;
    assert_eq!(
        (&tenant["quotas"]["maxSecrets"], &tenant["quotas"]["maxConfigValues"], &tenant["quotas"]["maxEndUsers"]),
        (&json!(2), &json!(2), &json!(1)),
        "{tenant}"
    );
    let (status, default) = server.get("/admin/tenants/default").await;
    assert_eq!(status, 200, "{default}");
    assert_eq!(default["quotas"]["maxSecrets"], 1000, "{default}");
    let (_, publisher) = server.create_key(Some("acme"), "publisher").await;
    let put_text = |path: &str, value: &str| {
        let request =
            server.request_as(Some(&publisher), Method::PUT, &format!("/t/acme/admin{path}")).body(value.to_string());
        async move {
            let response = request.send().await.unwrap();
            (response.status().as_u16(), response.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let put_json = |path: &str, body: Value| {
        let path = format!("/t/acme/admin{path}");
        let (server, publisher) = (&server, publisher.clone());
        async move { server.call_as(Some(&publisher), Method::PUT, &path, Some(&body)).await }
    };
    let refused = |(status, body): (u16, Value), quota: &str, max: u32| {
        assert_eq!((status, body["error"]["code"].as_str()), (409, Some("quota_exceeded")), "{body}");
        assert_eq!(body["error"][quota], max, "{body}");
    };

    // Secrets: registry credentials take a place too.
    assert_eq!(put_text("/secrets/one", "v1").await.0, 204);
    let credentials = json!({ "username": "ci", "password": "registry-password" });
    assert_eq!(put_json("/registries/registry.example", credentials.clone()).await.0, 204);
    refused(put_text("/secrets/two", "v2").await, "maxSecrets", 2);
    refused(put_json("/registries/other.example", credentials).await, "maxSecrets", 2);
    assert_eq!(put_text("/secrets/one", "v1-again").await.0, 204, "one it has is set again");
    let (_, secrets) = server.call_as(Some(&publisher), Method::GET, "/t/acme/admin/secrets", None).await;
    assert_eq!(secrets["items"], json!([{ "id": "one" }]), "{secrets}");

    // Config values, over every tool's, deployed or not.
    assert_eq!(put_text("/config/echo/k1", "a-config-value").await.0, 204);
    assert_eq!(put_text("/config/other/k1", "x").await.0, 204);
    refused(put_text("/config/echo/k2", "x").await, "maxConfigValues", 2);
    assert_eq!(put_text("/config/echo/k1", "another-config-value").await.0, 204);

    // End users.
    assert_eq!(put_json("/end-users/alice", json!({ "password": "alice-password" })).await.0, 204);
    refused(put_json("/end-users/bob", json!({ "password": "bob-password" })).await, "maxEndUsers", 1);
    assert_eq!(put_json("/end-users/alice", json!({ "password": "alice-password-2" })).await.0, 204);

    // The audit log has the stored changes only, and no config value.
    let (status, log) = server.call_as(Some(&publisher), Method::GET, "/admin/audit", None).await;
    assert_eq!(status, 200, "{log}");
    let actions: Vec<&str> = log["items"].as_array().unwrap().iter().map(|e| e["action"].as_str().unwrap()).collect();
    let count = |action: &str| actions.iter().filter(|a| **a == action).count();
    assert_eq!(
        (count("secret.put"), count("registry-credentials.put"), count("config.put"), count("end_user.put")),
        (2, 1, 3, 2),
        "{actions:?}"
    );
    let config_put = log["items"].as_array().unwrap().iter().find(|e| e["action"] == "config.put").unwrap();
    assert_eq!(config_put["target"], "echo.k1", "{config_put}");
    let sha = format!("{:x}", <sha2::Sha256 as sha2::Digest>::digest(b"another-config-value"));
    assert_eq!(config_put["detail"], json!({ "bytes": 20, "sha256": sha }), "{config_put}");
    assert!(!log.to_string().contains("config-value"), "a config value reached the audit log: {log}");
}
