//! Hot deploys over the admin API: compatibility, `expectVersion`,
//! idempotence, retirement, caching headers, restarts, crashes, hot swaps,
//! `--watch`, and the operator CLI.

use crate::support::{Server, TOKEN, fixture, invocation, outputs, plinth_bin, plugins_dir, relabeled};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::process::Command;
use std::time::{Duration, Instant};

fn echo_v1() -> Vec<u8> {
    std::fs::read(plugins_dir().join("echo.wasm")).unwrap()
}

/// A server with the example tools; its client sends the operator key.
fn with_token() -> Server {
    Server::start(&[])
}

fn codes(changes: &Value) -> Vec<String> {
    changes.as_array().unwrap().iter().map(|c| c["code"].as_str().unwrap().to_string()).collect()
}

#[tokio::test]
async fn the_admin_api_needs_a_key() {
    let server = with_token();
    for (auth, challenge) in [(None, "Bearer"), (Some("Bearer wrong"), "Bearer error=\"invalid_token\"")] {
        let mut request =
            server.request_as(None, reqwest::Method::POST, "/admin/tools").header("content-type", "application/wasm");
        if let Some(auth) = auth {
            request = request.header("authorization", auth);
        }
        let response = request.body(echo_v1()).send().await.unwrap();
        assert_eq!(response.status(), 401, "{auth:?}");
        assert_eq!(response.headers()["www-authenticate"], challenge);
    }
    let (status, _) = server.deploy(echo_v1(), "").await;
    assert_eq!(status, 200, "the right token deploys");
}

#[tokio::test]
async fn compatible_versions_deploy_and_breaking_ones_are_refused() {
    let server = with_token();
    let id = server.tool_id("echo").await;
    let versions = || async { server.get(&format!("/tools/{id}/versions")).await.1["items"].as_array().unwrap().len() };

    // The same bytes again: nothing new.
    let (status, body) = server.deploy(echo_v1(), "").await;
    assert_eq!(status, 200);
    assert_eq!(body["toolId"], id);
    assert_eq!(body["version"], 1);
    assert_eq!(body["previousVersion"], 1);
    assert_eq!(body["sha256"], hex::encode(Sha256::digest(echo_v1())));

    // expectVersion that does not match: 409, nothing created.
    let (status, body) = server.deploy(fixture("echo_v2.wasm"), "?expectVersion=3").await;
    assert_eq!(status, 409);
    assert_eq!(body["error"]["code"], "version_mismatch");
    assert_eq!(
        (body["error"]["expectedVersion"].clone(), body["error"]["actualVersion"].clone()),
        (json!(3), json!(2))
    );
    assert_eq!(versions().await, 1);

    let (status, body) = server.deploy(fixture("echo_v2.wasm"), "?expectVersion=2").await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["toolId"], id);
    assert_eq!(body["name"], "echo");
    assert_eq!(body["version"], 2);
    assert_eq!(body["previousVersion"], 1);
    assert_eq!(body["signatureSha256"].as_str().unwrap().len(), 64);
    let (status, again) = server.deploy(fixture("echo_v2.wasm"), "").await;
    assert_eq!((status, again["version"].clone()), (200, json!(2)));

    // A breaking change: every breaking change listed, nothing created.
    let (status, body) = server.deploy(fixture("echo_breaking.wasm"), "").await;
    assert_eq!(status, 409);
    assert_eq!(body["error"]["code"], "breaking_change");
    assert_eq!(body["error"]["currentVersion"], 2);
    assert_eq!(
        codes(&body["error"]["breakingChanges"]),
        ["input_removed", "input_removed", "required_input_added", "output_removed"],
        "text and shout removed, message required, length gone"
    );
    assert!(body["error"]["message"].as_str().unwrap().contains("input `text` was removed"));
    assert_eq!(versions().await, 2);

    // Unpinned callers get version 2; pinned callers keep version 1.
    let response = server
        .request(reqwest::Method::POST, &format!("/tools/{id}:invoke"))
        .json(&invocation("echo", &[("text", json!("hi")), ("shout", json!(true))]))
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["plinth-tool-version"], "2");
    let body: Value = response.json().await.unwrap();
    assert_eq!(outputs(&body)["text"], "HI");
    assert_eq!(outputs(&body)["length"], 2);
    let (status, body) =
        server.post(&format!("/tools/{id}/versions/1:invoke"), &invocation("echo", &[("text", json!("hi"))])).await;
    assert_eq!(status, 200);
    assert_eq!(body, json!({"output_parameters": [{"name": "text", "value": "hi"}]}));
    let (status, body) = server
        .post(
            &format!("/tools/{id}/versions/1:invoke"),
            &invocation("echo", &[("text", json!("hi")), ("shout", json!(true))]),
        )
        .await;
    assert_eq!((status, body["error"]["code"].clone()), (400, json!("unknown_parameter")), "v1's signature applies");

    // Bad uploads.
    let response = server
        .request(reqwest::Method::POST, "/admin/tools")
        .bearer_auth(TOKEN)
        .header("content-type", "application/octet-stream")
        .body(echo_v1())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 415);
    let (status, body) = server.deploy(b"\0asm garbage".to_vec(), "").await;
    assert_eq!((status, body["error"]["code"].clone()), (400, json!("invalid_component")));
    let (status, body) = server.deploy(echo_v1(), "?expectVersion=zero").await;
    assert_eq!((status, body["error"]["code"].clone()), (400, json!("invalid_expect_version")));
}

#[tokio::test]
async fn version_resources_carry_hashes_and_revalidate() {
    let server = with_token();
    let id = server.tool_id("echo").await;
    let path = format!("/tools/{id}/versions/1");
    let response = server.request(reqwest::Method::GET, &path).send().await.unwrap();
    let etag = response.headers()["etag"].to_str().unwrap().to_string();
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["contentHash"], format!("sha256:{}", hex::encode(Sha256::digest(echo_v1()))));

    let revalidate = |etag: String| {
        let request = server.request(reqwest::Method::GET, &path).header("if-none-match", etag);
        async move { request.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(revalidate(etag.clone()).await, 304);
    assert_eq!(revalidate("\"something-else\"".into()).await, 200);

    // The current tool's ETag too.
    let response = server
        .request(reqwest::Method::GET, &format!("/tools/{id}"))
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 304);

    // A new current version changes what the resource says, so its tag.
    server.deploy(fixture("echo_v2.wasm"), "").await;
    assert_eq!(revalidate(etag).await, 200);
}

#[tokio::test]
async fn retired_versions_answer_410_and_everything_survives_a_restart() {
    let server = with_token();
    let id = server.tool_id("echo").await;
    server.deploy(fixture("echo_v2.wasm"), "").await;

    let (status, body) = server.delete(&format!("/admin/tools/{id}/versions/2")).await;
    assert_eq!(status, 200);
    assert_eq!(body, json!({"toolId": id, "version": 2, "retired": true, "currentVersion": 1}));
    let (status, _) = server.delete(&format!("/admin/tools/{id}/versions/2")).await;
    assert_eq!(status, 200, "retiring twice is harmless");

    let (status, body) =
        server.post(&format!("/tools/{id}/versions/2:invoke"), &invocation("echo", &[("text", json!("x"))])).await;
    assert_eq!((status, body["error"]["code"].clone()), (410, json!("version_retired")));
    let (status, tool) = server.get(&format!("/tools/{id}")).await;
    assert_eq!((status, tool["version"].clone(), tool["currentVersion"].clone()), (200, json!(1), json!(1)));
    let (_, listing) = server.get(&format!("/tools/{id}/versions")).await;
    assert_eq!(listing["items"][0]["version"], 2);
    assert_eq!(listing["items"][0]["retired"], true);
    assert!(listing["items"][0]["retiredAt"].as_i64().is_some());
    assert!(listing["items"][1].get("retired").is_none());
    let (status, _) = server.invoke("echo", &[("text", json!("still served"))]).await;
    assert_eq!(status, 200, "unpinned calls fall back to the newest live version");

    // A new version after a retired one takes the next number.
    let (status, body) = server.deploy(relabeled(&fixture("echo_v2.wasm"), "3"), "").await;
    assert_eq!((status, body["version"].clone(), body["previousVersion"].clone()), (201, json!(3), json!(1)));

    for n in [1, 3] {
        server.delete(&format!("/admin/tools/{id}/versions/{n}")).await;
    }
    let (status, body) = server.get(&format!("/tools/{id}")).await;
    assert_eq!((status, body["error"]["code"].clone()), (410, json!("tool_retired")));
    let (_, tools) = server.get("/tools").await;
    assert!(tools["items"].as_array().unwrap().iter().all(|t| t["name"] != "echo"), "{tools}");
    let (status, _) = server.post(&format!("/tools/{id}:invoke"), &invocation("echo", &[("text", json!("x"))])).await;
    assert_eq!(status, 410);

    for (path, status) in [
        (format!("/admin/tools/{id}/versions/9"), 404),
        (format!("/admin/tools/{}/versions/1", uuid::Uuid::new_v4()), 404),
    ] {
        assert_eq!(server.delete(&path).await.0, status, "{path}");
    }

    let before = server.get(&format!("/tools/{id}/versions")).await.1;
    let server = Server::start_in(server.stop(), &[]);
    let after = server.get(&format!("/tools/{id}/versions")).await.1;
    assert_eq!(before, after, "a restart serves exactly what was acknowledged");
    assert_eq!(server.get(&format!("/tools/{id}")).await.0, 410);
}

#[tokio::test(flavor = "multi_thread")]
async fn hot_swapping_twenty_versions_drops_no_request() {
    let server = std::sync::Arc::new(with_token());
    let id = server.tool_id("echo").await;
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // The caller loops as fast as it can; this test is not about rate limits.
    server.lift_rate().await;

    let caller = {
        let (server, done, id) = (server.clone(), done.clone(), id.clone());
        tokio::spawn(async move {
            let mut seen = Vec::new();
            let mut failures = Vec::new();
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                let response = server
                    .request(reqwest::Method::POST, &format!("/tools/{id}:invoke"))
                    .json(&invocation("echo", &[("text", json!("ping"))]))
                    .send()
                    .await;
                match response {
                    Ok(r) if r.status() == 200 => {
                        let version: u32 = r.headers()["plinth-tool-version"].to_str().unwrap().parse().unwrap();
                        let body: Value = r.json().await.unwrap();
                        if outputs(&body)["text"] != "ping" {
                            failures.push(format!("wrong answer {body}"));
                        }
                        seen.push(version);
                    }
                    Ok(r) => failures.push(format!("status {}", r.status())),
                    Err(e) => failures.push(e.to_string()),
                }
            }
            (seen, failures)
        })
    };

    for n in 2..=21u32 {
        let (status, body) =
            server.deploy(relabeled(&echo_v1(), &format!("build {n}")), &format!("?expectVersion={n}")).await;
        assert_eq!(status, 201, "{body}");
        // Once the deploy is acknowledged, new calls get the new version.
        let (_, tool) = server.get(&format!("/tools/{id}")).await;
        assert_eq!(tool["version"], n);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let (seen, failures) = caller.await.unwrap();
    assert!(failures.is_empty(), "{} failed requests: {:?}", failures.len(), &failures[..failures.len().min(5)]);
    assert!(seen.len() > 20, "the caller made only {} calls", seen.len());
    assert!(seen.windows(2).all(|w| w[0] <= w[1]), "answers never go back to an older version");
    assert_eq!(seen.first(), Some(&1));
    assert_eq!(seen.last(), Some(&21), "answers switched to the newest version");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crash_in_the_middle_of_deploys_loses_nothing_acknowledged() {
    let mut data = tempfile::tempdir().unwrap();
    let plugins = plugins_dir();
    let mut acknowledged = 1u32;
    let mut label = 0u32;
    for round in 0..3u64 {
        let server = Server::start_in(data, &["--plugins", plugins.to_str().unwrap()]);
        let base = server.base.clone();
        // Deploy as fast as possible from another task, and kill the server
        // while that goes on.
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let start = label;
        let deployer = tokio::spawn(async move {
            let client = reqwest::Client::new();
            for n in start.. {
                let sent = client
                    .post(format!("{base}/admin/tools"))
                    .bearer_auth(TOKEN)
                    .header("content-type", "application/wasm")
                    .body(relabeled(&echo_v1(), &format!("crash {n}")))
                    .send()
                    .await;
                match sent {
                    Ok(r) if r.status() == 201 => {
                        let body: Value = r.json().await.unwrap();
                        let _ = tx.send(body["version"].as_u64().unwrap() as u32);
                    }
                    _ => return n,
                }
            }
            unreachable!()
        });
        for _ in 0..3 + round {
            acknowledged = rx.recv().await.expect("deploys are acknowledged");
        }
        tokio::time::sleep(Duration::from_millis(7 * round)).await;
        data = server.stop(); // SIGKILL
        label = deployer.await.unwrap() + 1;
        while let Ok(v) = rx.try_recv() {
            acknowledged = v;
        }

        // After the crash: every acknowledged version is there, numbers are
        // contiguous, each version runs, and no blob is left without a version.
        let server = Server::start_in(data, &[]);
        let id = server.tool_id("echo").await;
        let (_, versions) = server.get(&format!("/tools/{id}/versions?pageLimit=200")).await;
        let numbers: Vec<u64> =
            versions["items"].as_array().unwrap().iter().map(|v| v["version"].as_u64().unwrap()).collect();
        let newest = numbers[0] as u32;
        assert!(newest >= acknowledged, "round {round}: version {acknowledged} was acknowledged, {newest} survived");
        assert_eq!(numbers, (1..=u64::from(newest)).rev().collect::<Vec<_>>(), "round {round}");
        for n in [1, newest / 2 + 1, newest] {
            let (status, _) = server
                .post(&format!("/tools/{id}/versions/{n}:invoke"), &invocation("echo", &[("text", json!("x"))]))
                .await;
            assert_eq!(status, 200, "round {round}: version {n} has its blob");
        }
        let blobs = std::fs::read_dir(server.data.path().join("blobs/sha256")).unwrap().count();
        assert_eq!(blobs, numbers.len() + 2, "one blob per version of echo, plus the two other example tools");
        data = server.stop();
    }
}

#[tokio::test]
async fn watched_directories_deploy_what_is_copied_into_them() {
    let watched = tempfile::tempdir().unwrap();
    let server = Server::start_in(tempfile::tempdir().unwrap(), &["--watch", watched.path().to_str().unwrap()]);
    assert_eq!(server.get("/tools").await.1["items"], json!([]));

    let wait_for = |version: u64| {
        let server = &server;
        async move {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let (_, tools) = server.get("/tools").await;
                if tools["items"].as_array().unwrap().iter().any(|t| t["name"] == "echo" && t["version"] == version) {
                    return;
                }
                assert!(Instant::now() < deadline, "echo version {version} was not deployed: {}", server.logs());
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    std::fs::write(watched.path().join("echo.wasm"), echo_v1()).unwrap();
    wait_for(1).await;
    std::fs::write(watched.path().join("echo.wasm"), fixture("echo_v2.wasm")).unwrap();
    wait_for(2).await;
    // A breaking build dropped in is refused and logged; version 2 stays.
    std::fs::write(watched.path().join("echo.wasm"), fixture("echo_breaking.wasm")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !server.logs().contains("would break callers") {
        assert!(Instant::now() < deadline, "{}", server.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let id = server.tool_id("echo").await;
    assert_eq!(server.get(&format!("/tools/{id}")).await.1["version"], 2);
}

fn plinth(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(plinth_bin()).args(args).env_remove("PLINTH_KEY").output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn the_operator_cli_deploys_lists_and_retires() {
    let server = with_token();
    let dir = tempfile::tempdir().unwrap();
    let v2 = dir.path().join("echo_v2.wasm");
    let breaking = dir.path().join("echo_breaking.wasm");
    std::fs::write(&v2, fixture("echo_v2.wasm")).unwrap();
    std::fs::write(&breaking, fixture("echo_breaking.wasm")).unwrap();
    let v1 = plugins_dir().join("echo.wasm");
    let (v1, v2, breaking) = (v1.to_str().unwrap(), v2.to_str().unwrap(), breaking.to_str().unwrap());
    let base = server.base.clone();

    // Offline diff: exit 0 when compatible, 1 when breaking.
    let (code, out, _) = plinth(&["diff", v1, v2]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("optional input `shout` was added") && out.contains("compatible"), "{out}");
    let (code, out, _) = plinth(&["diff", v1, breaking]);
    assert_eq!(code, 1);
    assert!(out.contains("BREAKING input `text` was removed"), "{out}");

    let cli = move |args: &[&str]| {
        let mut all: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        all.extend(["--server".to_string(), base.clone()]);
        tokio::task::block_in_place(|| plinth(&all.iter().map(String::as_str).collect::<Vec<_>>()))
    };
    let (code, _, err) = cli(&["deploy", v2]);
    assert_eq!(code, 2);
    assert!(err.contains("401") && err.contains("a valid API key is required"), "{err}");
    let (code, out, err) = cli(&["deploy", v2, "--key", TOKEN, "--expect-version", "2"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("echo version 2 "), "{out}");
    let (code, _, err) = cli(&["deploy", breaking, "--key", TOKEN]);
    assert_eq!(code, 2);
    assert!(err.contains("409") && err.contains("breaking: input `text` was removed"), "{err}");

    let (code, out, _) = cli(&["tools", "list", "--key", TOKEN]);
    assert_eq!(code, 0);
    assert!(out.lines().any(|l| l.starts_with("echo") && l.contains(" 2 ")), "{out}");
    let (code, _, err) = cli(&["retire", "echo", "2", "--key", TOKEN]);
    assert_eq!(code, 0, "{err}");
    let (code, out, _) = cli(&["tools", "versions", "echo", "--key", TOKEN]);
    assert_eq!(code, 0);
    let rows: Vec<Vec<&str>> = out.lines().skip(1).map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows[0][..2], ["2", "retired"]);
    assert_eq!(rows[1][..2], ["1", "current"]);
    assert!(rows[1][2].starts_with("sha256:"));
}

#[tokio::test(flavor = "multi_thread")]
async fn compatibility_holds_over_the_whole_history_of_a_tool() {
    let server = with_token();
    let id = server.tool_id("echo").await;
    assert_eq!(server.deploy(fixture("echo_v2.wasm"), "").await.0, 201);
    // v2 added an output. Retired, it is no longer current, but a new version
    // without that output would still break callers pinned to it.
    assert_eq!(server.delete(&format!("/admin/tools/{id}/versions/2")).await.0, 200);
    let (status, body) = server.deploy(relabeled(&echo_v1(), "v3"), "").await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "breaking_change");
    assert_eq!(body["error"]["currentVersion"], 2, "the retired version it breaks");
    assert!(codes(&body["error"]["breakingChanges"]).contains(&"output_removed".to_string()), "{body}");

    // Every version retired: the toolId still holds its history.
    assert_eq!(server.delete(&format!("/admin/tools/{id}/versions/1")).await.0, 200);
    let (status, body) = server.deploy(fixture("echo_breaking.wasm"), "").await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "breaking_change");
    // A compatible one is still welcome, under the same toolId.
    let (status, body) = server.deploy(relabeled(&fixture("echo_v2.wasm"), "v3"), "").await;
    assert_eq!(status, 201, "{body}");
    assert_eq!((body["toolId"].as_str(), body["version"].as_u64()), (Some(id.as_str()), Some(3)));
}

/// A thousand versions — 50 builds of echo, each deployed into 20 tenants
/// — survive a restart, which links none of them; each then answers its
/// first call itself, as the version it is.
#[tokio::test(flavor = "multi_thread")]
async fn a_restart_with_a_thousand_versions_serves_each_correctly() {
    const BUILDS: u32 = 50;
    const TENANTS: usize = 20;
    let server = Server::start_in(tempfile::tempdir().unwrap(), &[]);
    let room = json!({ "maxVersionsPerTool": BUILDS, "invocationsPerSecond": 100_000, "invocationBurst": 100_000 });
    let tenants: Vec<String> = (0..TENANTS).map(|t| format!("many-{t}")).collect();
    for tenant in &tenants {
        server.create_tenant(tenant, room.clone()).await;
    }
    let mut ids = Vec::new();
    for tenant in &tenants {
        let mut id = String::new();
        for build in 1..=BUILDS {
            let (status, body) = server
                .post_component_as_operator(
                    &format!("/t/{tenant}/admin/tools"),
                    relabeled(&echo_v1(), &format!("b{build}")),
                )
                .await;
            assert_eq!((status, body["version"].as_u64()), (201, Some(build.into())), "{body}");
            id = body["toolId"].as_str().unwrap().to_string();
        }
        ids.push(id);
    }

    let started = Instant::now();
    let server = Server::start_in(server.stop(), &[]);
    let logs = server.logs();
    let registered = logs.lines().find(|l| l.contains("stored versions registered")).unwrap_or_default();
    assert!(registered.contains("1000"), "every version registered at start: {logs}");
    eprintln!("restarted with 1000 versions in {:?}", started.elapsed());
    for (tenant, id) in tenants.iter().zip(&ids) {
        for build in 1..=BUILDS {
            let text = format!("{tenant} {build}");
            let response = server
                .request(reqwest::Method::POST, &format!("/t/{tenant}/tools/{id}/versions/{build}:invoke"))
                .json(&invocation("echo", &[("text", json!(text))]))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 200, "{tenant} v{build}");
            assert_eq!(response.headers()["plinth-tool-version"], build.to_string().as_str());
            let body: Value = response.json().await.unwrap();
            assert_eq!(outputs(&body)["text"], text.as_str(), "{tenant} v{build}: {body}");
        }
    }
}
