//! Fleet mode: several `plinth serve` processes on one real PostgreSQL
//! (`plinth::testing::TestPostgres`), started with the settings of
//! `deploy/fleet.env` — the replicas `deploy/compose.yaml` runs — and one
//! public URL, as behind a load balancer. Each test waits for a change to
//! reach the other replicas by polling, with a deadline, never by sleeping.

use crate::cheq::{PREMIUM, PageSession, booking, pack_with_confirmation};
use crate::otc::{call, weather_backend};
use crate::support::{Server, TOKEN, invocation, outputs, plugins_dir, relabeled};
use plinth::testing::TestPostgres;
use reqwest::Method;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// The secrets key every replica shares (base64 of 32 bytes).
const SECRETS_KEY: &str = "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=";

/// Replicas on one database, all answering to the first one's address.
struct Fleet {
    replicas: Vec<Server>,
    database: String,
    public_url: String,
    args: Vec<String>,
}

/// `deploy/fleet.env`: the settings compose gives every replica.
fn fleet_env() -> Vec<(String, String)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/fleet.env");
    let text = std::fs::read_to_string(path).expect("deploy/fleet.env");
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (key, value) = l.split_once('=').expect("KEY=VALUE");
            (key.to_string(), value.to_string())
        })
        .collect()
}

impl Fleet {
    /// `n` replicas on `database`, with `args` each.
    fn start(n: usize, database: String, args: &[&str]) -> Fleet {
        let args = args.iter().map(|a| a.to_string()).collect();
        let mut fleet = Fleet { replicas: Vec::new(), database, public_url: String::new(), args };
        // Replica 0 listens at the fleet's public URL, which every replica
        // is told before it starts: on a port found free, which another
        // process may take before replica 0 binds it. Then another port.
        for attempt in 1.. {
            let listen = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
            fleet.public_url = format!("http://{listen}");
            match fleet.try_launch(&listen) {
                Ok(first) => {
                    fleet.replicas.push(first);
                    break;
                }
                Err(log) if log.contains("Address already in use") && attempt < 5 => continue,
                Err(log) => panic!("replica 0 did not start; its log:\n{log}"),
            }
        }
        for _ in 1..n {
            let replica =
                fleet.try_launch("127.0.0.1:0").unwrap_or_else(|log| panic!("a replica did not start:\n{log}"));
            fleet.replicas.push(replica);
        }
        fleet
    }

    /// Starts one more replica process on `listen`, or returns its log.
    fn try_launch(&self, listen: &str) -> Result<Server, String> {
        let mut env = fleet_env();
        env.push(("PLINTH_DATABASE_URL".into(), self.database.clone()));
        env.push(("PLINTH_SECRETS_KEY".into(), SECRETS_KEY.into()));
        env.push(("PLINTH_PUBLIC_URL".into(), self.public_url.clone()));
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        Server::try_start_on(tempfile::tempdir().unwrap(), listen, &args, Some(TOKEN), &env).map(|(server, _)| server)
    }

    fn replica(&self, i: usize) -> &Server {
        &self.replicas[i]
    }
}

/// Polls `check` until it holds, for at most 30 seconds.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    while !check().await {
        assert!(Instant::now() < deadline, "{what}: not after 30 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The versions of the tool named `name` a replica lists, oldest first.
async fn versions_of(replica: &Server, name: &str) -> Vec<u64> {
    let (status, body) = replica.get("/tools").await;
    assert_eq!(status, 200, "{body}");
    let Some(tool) = body["items"].as_array().unwrap().iter().find(|t| t["name"] == name) else { return vec![] };
    let id = tool["toolId"].as_str().unwrap();
    let (_, versions) = replica.get(&format!("/tools/{id}/versions?pageLimit=100")).await;
    let mut numbers: Vec<u64> =
        versions["items"].as_array().unwrap().iter().map(|v| v["version"].as_u64().unwrap()).collect();
    numbers.sort();
    numbers
}

async fn invoke_echo(replica: &Server, id: &str, version: Option<u64>, text: &str) -> (u16, Value) {
    let path = match version {
        Some(v) => format!("/tools/{id}/versions/{v}:invoke"),
        None => format!("/tools/{id}:invoke"),
    };
    replica.post(&path, &invocation("echo", &[("text", json!(text))])).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deploy_on_one_replica_is_served_by_all_and_a_retirement_too() {
    let fleet = Fleet::start(3, TestPostgres::shared().fresh_database(), &[]);
    for replica in &fleet.replicas {
        assert_eq!(replica.get("/ready").await, (200, json!({"status": "ready"})));
    }
    let echo = std::fs::read(plugins_dir().join("echo.wasm")).unwrap();
    let (status, deployed) = fleet.replica(0).deploy(echo, "").await;
    assert_eq!(status, 201, "{deployed}");
    let id = deployed["toolId"].as_str().unwrap().to_string();

    for replica in &fleet.replicas[1..] {
        eventually("the deploy reaches the replica", || async { versions_of(replica, "echo").await == [1] }).await;
        let (status, body) = invoke_echo(replica, &id, None, "hello").await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(outputs(&body)["text"], "hello");
    }

    let (status, body) = fleet.replica(1).delete(&format!("/admin/tools/{id}/versions/1")).await;
    assert!(status == 200 || status == 204, "{status} {body}");
    for replica in [fleet.replica(0), fleet.replica(2)] {
        eventually("the retirement reaches the replica", || async {
            invoke_echo(replica, &id, None, "x").await.0 == 410
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_revoked_on_one_replica_stops_working_on_every_replica() {
    let fleet = Fleet::start(3, TestPostgres::shared().fresh_database(), &[]);
    let (key_id, key) = fleet.replica(0).create_key(Some("default"), "consumer").await;
    for replica in &fleet.replicas {
        eventually("the new key works on the replica", || async {
            replica.call_as(Some(&key), Method::GET, "/tools", None).await.0 == 200
        })
        .await;
    }
    let (status, body) = fleet.replica(2).delete(&format!("/admin/keys/{key_id}")).await;
    assert!(status == 200 || status == 204, "{status} {body}");
    for replica in &fleet.replicas {
        eventually("the revoked key is refused", || async {
            replica.call_as(Some(&key), Method::GET, "/tools", None).await.0 == 401
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_toolset_made_on_one_replica_is_served_by_the_others_and_its_deletion_too() {
    let fleet = Fleet::start(2, TestPostgres::shared().fresh_database(), &[]);
    let echo = std::fs::read(plugins_dir().join("echo.wasm")).unwrap();
    let (status, deployed) = fleet.replica(0).deploy(echo, "").await;
    assert_eq!(status, 201, "{deployed}");
    let id = deployed["toolId"].as_str().unwrap().to_string();
    let other = fleet.replica(1);
    eventually("the deploy reaches the replica", || async { versions_of(other, "echo").await == [1] }).await;

    let body = json!({ "description": "d", "tools": [{ "name": "echo", "version": 1 }] });
    let (status, made) =
        fleet.replica(0).call_as(Some(TOKEN), Method::PUT, "/admin/toolsets/travel", Some(&body)).await;
    assert_eq!(status, 201, "{made}");
    let key = json!({ "tenant": "default", "role": "consumer", "toolset": "travel" });
    let (status, key) = fleet.replica(0).call_as(Some(TOKEN), Method::POST, "/admin/keys", Some(&key)).await;
    assert_eq!(status, 201, "{key}");
    let key = key["key"].as_str().unwrap().to_string();
    let path = format!("/t/default/toolsets/travel/tools/{id}:invoke");
    let call = invocation("echo", &[("text", json!("hi"))]);
    eventually("the toolset and its key reach the replica", || async {
        other.call_as(Some(&key), Method::POST, &path, Some(&call)).await.0 == 200
    })
    .await;
    // The same version, refusals included, on the other replica.
    let (status, body) = other.call_as(Some(&key), Method::GET, "/tools", None).await;
    assert_eq!((status, body["error"]["code"].as_str()), (403, Some("outside_toolset")), "{body}");
    let (status, body) = other.delete(&format!("/admin/tools/{id}/versions/1")).await;
    assert_eq!((status, body["error"]["code"].as_str()), (409, Some("version_pinned_by_toolset")), "{body}");

    let (status, _) = fleet.replica(0).call_as(Some(TOKEN), Method::DELETE, "/admin/toolsets/travel", None).await;
    assert_eq!(status, 204);
    eventually("the deletion reaches the replica", || async {
        other.call_as(Some(TOKEN), Method::GET, "/t/default/toolsets/travel/tools", None).await.0 == 404
    })
    .await;
    assert_eq!(other.call_as(Some(&key), Method::POST, &path, Some(&call)).await.0, 401);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_id_runs_once_across_replicas() {
    let (url, backend_calls) = weather_backend().await;
    let config = format!("lookup_weather_by_city.backend-url={url}");
    let fleet = Fleet::start(
        3,
        TestPostgres::shared().fresh_database(),
        &["--tool-config", &config, "--allow-private-cidr", "127.0.0.0/8"],
    );
    let weather = std::fs::read(plugins_dir().join("lookup_weather_by_city.wasm")).unwrap();
    assert_eq!(fleet.replica(0).deploy(weather, "").await.0, 201);
    for replica in &fleet.replicas {
        eventually("the tool reaches the replica", || async {
            versions_of(replica, "lookup_weather_by_city").await == [1]
        })
        .await;
    }
    let omaha = |call_id: &str| {
        json!({ "request": {
            "call_id": call_id,
            "tool_id": "Weather.LookupWeatherByCity",
            "input": { "city": "Omaha, Nebraska", "units": "FAHRENHEIT" },
        } })
    };
    // Each run makes two backend requests (geocode, forecast).
    let first = call(fleet.replica(0), "/otc/tools/call", &omaha("trip-1")).await;
    assert_eq!(first.body["result"]["value"]["temperature"], 80, "{}", first.body);
    assert_eq!(backend_calls.get(), 2);
    for replica in &fleet.replicas[1..] {
        let retry = call(replica, "/otc/tools/call", &omaha("trip-1")).await;
        assert_eq!((retry.body.clone(), retry.replayed), (first.body.clone(), true));
    }
    assert_eq!(backend_calls.get(), 2, "the retries on other replicas did not run the tool");

    // Racing retries on every replica run it once and all get its answer.
    let trip = omaha("trip-2");
    let (a, b, c) = tokio::join!(
        call(fleet.replica(0), "/otc/tools/call", &trip),
        call(fleet.replica(1), "/otc/tools/call", &trip),
        call(fleet.replica(2), "/otc/tools/call", &trip),
    );
    let answers = format!("{} / {} / {}", a.body, b.body, c.body);
    assert_eq!(backend_calls.get(), 4, "three racing calls with one call id on three replicas ran once: {answers}");
    for answer in [&a, &b, &c] {
        assert_eq!(answer.body["result"]["value"]["temperature"], 80, "{answers}");
        assert_eq!(answer.body, a.body);
    }
    let replayed = [&a, &b, &c].map(|x| x.replayed);
    assert_eq!(replayed.iter().filter(|r| !**r).count(), 1, "replayed: {replayed:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cheq_made_on_one_replica_is_accepted_on_another_and_polled_on_a_third() {
    let plugins = tempfile::tempdir().unwrap();
    let booked = pack_with_confirmation("book-flight", PREMIUM, plugins.path()).unwrap();
    let fleet = Fleet::start(3, TestPostgres::shared().fresh_database(), &[]);
    let (a, b, c) = (fleet.replica(0), fleet.replica(1), fleet.replica(2));
    assert_eq!(a.deploy(std::fs::read(booked).unwrap(), "").await.0, 201);
    let password = json!({ "password": "alice-password" });
    let (status, body) = a.call_as(Some(TOKEN), Method::PUT, "/admin/end-users/alice", Some(&password)).await;
    assert_eq!(status, 204, "{body}");
    eventually("the tool reaches B", || async { versions_of(b, "book_flight").await == [1] }).await;

    let id = a.tool_id("book_flight").await;
    let response = a
        .request(Method::POST, &format!("/tools/{id}:invoke"))
        .header("Plinth-End-User", "alice")
        .json(&invocation("book_flight", &booking("FIRST", 2)))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let pack: Value = response.json().await.unwrap();

    // The end user opens the link on whichever replica the load balancer
    // picks: B here (the URIs name the fleet's one public URL).
    let on = |replica: &Server, uri: &str| uri.replace(&fleet.public_url, &replica.base);
    let mut via_b = pack.clone();
    via_b["confirmation uri"] = on(b, pack["confirmation uri"].as_str().unwrap()).into();
    let session = PageSession::log_in(&via_b, "alice").await;
    let (status, html) = session.decide(&via_b, "accept").await;
    assert_eq!(status, 200, "{html}");

    // The result is kept in the store: C answers it.
    let result = on(c, pack["result uri"].as_str().unwrap());
    let client = reqwest::Client::new();
    let fetch = || async { client.get(&result).bearer_auth(TOKEN).send().await.unwrap() };
    eventually("the accepted call's result is kept", || async { fetch().await.status() == 200 }).await;
    let answer: Value = fetch().await.json().await.unwrap();
    let out = outputs(&answer);
    assert_eq!((&out["cabin_class"], &out["total_price_usd"]), (&json!("FIRST"), &json!(8400)));

    // Decided once, with its evidence, on whichever replica is asked.
    let transaction = pack["resource uri"].as_str().unwrap().rsplit('/').next().unwrap();
    let (status, evidence) = a.get(&format!("/admin/cheq/{transaction}")).await;
    assert_eq!((status, &evidence["state"]), (200, &json!("accepted and done")), "{evidence}");
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_deploys_on_two_replicas_get_consecutive_versions() {
    let fleet = Fleet::start(2, TestPostgres::shared().fresh_database(), &[]);
    let (a, b) = (fleet.replica(0), fleet.replica(1));
    let echo = std::fs::read(plugins_dir().join("echo.wasm")).unwrap();
    assert_eq!(a.deploy(echo.clone(), "").await.0, 201);
    eventually("v1 reaches B", || async { versions_of(b, "echo").await == [1] }).await;

    for round in 0..3 {
        let (left, right) = tokio::join!(
            a.deploy(relabeled(&echo, &format!("a{round}")), ""),
            b.deploy(relabeled(&echo, &format!("b{round}")), ""),
        );
        assert_eq!((left.0, right.0), (201, 201), "{} {}", left.1, right.1);
        let mut numbers = [left.1["version"].as_u64().unwrap(), right.1["version"].as_u64().unwrap()];
        numbers.sort();
        let base = 2 + 2 * round;
        assert_eq!(numbers, [base, base + 1], "consecutive, no duplicate");
    }
    let all: Vec<u64> = (1..=7).collect();
    for replica in [a, b] {
        eventually("every version is listed everywhere", || async { versions_of(replica, "echo").await == all }).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn killing_a_replica_mid_deploy_loses_no_acknowledged_deploy() {
    let mut fleet = Fleet::start(3, TestPostgres::shared().fresh_database(), &[]);
    let echo = std::fs::read(plugins_dir().join("echo.wasm")).unwrap();
    let (status, first) = fleet.replica(0).deploy(echo.clone(), "").await;
    assert_eq!(status, 201, "{first}");
    let id = first["toolId"].as_str().unwrap().to_string();
    eventually("v1 reaches C", || async { versions_of(fleet.replica(2), "echo").await == [1] }).await;
    // Not a test of rate limits: its callers loop as fast as they can, and
    // the tenant's rate is shared by the replicas, fewer after the kill.
    fleet.replica(0).lift_rate().await;
    for replica in &fleet.replicas {
        eventually("every replica has the rate lifted", || async {
            let (_, tenant) = replica.call_as(Some(TOKEN), reqwest::Method::GET, "/admin/tenants/default", None).await;
            tenant["quotas"]["invocationsPerSecond"] == json!(1_000_000)
        })
        .await;
    }

    // B deploys in a loop while it is killed.
    let doomed = fleet.replicas.remove(1);
    let pid = doomed.pid();
    let deploys = {
        let (base, echo) = (doomed.base.clone(), echo.clone());
        tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut acknowledged = Vec::new();
            for i in 0..1000 {
                let sent = client
                    .post(format!("{base}/admin/tools"))
                    .bearer_auth(TOKEN)
                    .header("content-type", "application/wasm")
                    .body(relabeled(&echo, &format!("doomed-{i}")))
                    .send()
                    .await;
                let Ok(response) = sent else { break };
                if response.status() != 201 {
                    break;
                }
                let body: Value = response.json().await.unwrap();
                acknowledged.push(body["version"].as_u64().unwrap());
            }
            acknowledged
        })
    };
    // Calls keep going to B (cut off mid-call by the kill) and to C (which
    // must answer every one of them).
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let calls = |base: String| {
        let (stop, id) = (stop.clone(), id.clone());
        tokio::spawn(async move {
            let client = reqwest::Client::new();
            let (mut answered, mut failed) = (0u32, 0u32);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let sent = client
                    .post(format!("{base}/tools/{id}/versions/1:invoke"))
                    .bearer_auth(TOKEN)
                    .json(&invocation("echo", &[("text", json!("busy"))]))
                    .send()
                    .await;
                match sent {
                    Ok(response) if response.status() == 200 => answered += 1,
                    _ => failed += 1,
                }
            }
            (answered, failed)
        })
    };
    let on_doomed = calls(doomed.base.clone());
    let on_survivor = calls(fleet.replica(1).base.clone());
    let survivor = fleet.replica(1);
    eventually("B has deployed a few versions", || async { versions_of(survivor, "echo").await.len() >= 4 }).await;
    // SAFETY: a signal to the replica's own process id.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0);
    let acknowledged = deploys.await.unwrap();
    assert!(!acknowledged.is_empty());
    drop(doomed);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (answered_by_doomed, _) = on_doomed.await.unwrap();
    assert!(answered_by_doomed > 0, "calls were running on the replica that was killed");
    let (answered_by_survivor, failed_on_survivor) = on_survivor.await.unwrap();
    assert!(answered_by_survivor > 0);
    assert_eq!(failed_on_survivor, 0, "the survivor answered every call while its peer died");

    // The survivors answer, deploy on, and hold every acknowledged version
    // with its bytes: each is invocable, pinned.
    let (status, body) = fleet.replica(0).deploy(relabeled(&echo, "after"), "").await;
    assert_eq!(status, 201, "{body}");
    let newest = body["version"].as_u64().unwrap();
    for replica in &fleet.replicas {
        eventually("the survivors agree", || async { versions_of(replica, "echo").await.last() == Some(&newest) })
            .await;
        let listed = versions_of(replica, "echo").await;
        assert_eq!(listed, (1..=newest).collect::<Vec<_>>(), "no gap, no duplicate");
        for version in &acknowledged {
            let (status, body) = invoke_echo(replica, &id, Some(*version), "still here").await;
            assert_eq!(status, 200, "version {version}: {body}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn replicas_ride_out_a_database_restart() {
    let postgres = TestPostgres::start();
    let fleet = Fleet::start(2, postgres.fresh_database(), &[]);
    let (a, b) = (fleet.replica(0), fleet.replica(1));
    let echo = std::fs::read(plugins_dir().join("echo.wasm")).unwrap();
    let (status, deployed) = a.deploy(echo.clone(), "").await;
    assert_eq!(status, 201, "{deployed}");
    let id = deployed["toolId"].as_str().unwrap().to_string();
    eventually("v1 reaches B", || async { versions_of(b, "echo").await == [1] }).await;

    tokio::task::block_in_place(|| postgres.stop());
    // Down: tools in memory keep answering; readiness says what is wrong.
    let (status, body) = invoke_echo(b, &id, None, "no database").await;
    assert_eq!(status, 200, "{body}");
    eventually("B is not ready without its database", || async { b.get("/ready").await.0 == 503 }).await;
    let (status, body) = a.deploy(relabeled(&echo, "while down"), "").await;
    assert_eq!((status, &body["error"]["code"]), (503, &json!("storage_failed")), "{body}");

    tokio::task::block_in_place(|| postgres.start_again());
    for replica in [a, b] {
        eventually("the replica is ready again", || async { replica.get("/ready").await.0 == 200 }).await;
    }
    let (status, body) = a.deploy(relabeled(&echo, "after the restart"), "").await;
    assert_eq!(status, 201, "{body}");
    eventually("a deploy after the restart reaches B", || async { versions_of(b, "echo").await == [1, 2] }).await;
    let (status, body) = invoke_echo(b, &id, Some(2), "back").await;
    assert_eq!(status, 200, "{body}");
}

/// Requests waiting on the database — here on a table another session
/// holds locked — leave the threads that serve HTTP free: `/health` is
/// answered while every one of them still waits (before, they held every
/// async worker until the lock was let go, and `/health` came after them).
#[tokio::test(flavor = "multi_thread")]
async fn requests_waiting_on_the_database_leave_the_http_threads_free() {
    let postgres = TestPostgres::start();
    let database = postgres.fresh_database();
    let fleet = Fleet::start(1, database.clone(), &[]);
    let server = fleet.replica(0);
    let mut holder = postgres.psql_in_background(
        &database,
        "BEGIN; LOCK TABLE designer_sessions IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(20); COMMIT;",
    );
    eventually("the other session holds the lock", || async {
        let sleeping = "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE '%pg_sleep(20)%' \
                        AND pid <> pg_backend_pid()";
        tokio::task::block_in_place(|| postgres.psql(sleeping)).is_ok_and(|n| n == "1")
    })
    .await;
    // Catalog pages with a session cookie: each looks the session up, and waits.
    let client = reqwest::Client::new();
    let waiting: Vec<_> = (0..8)
        .map(|_| {
            let request =
                client.get(format!("{}/catalog", server.base)).header("cookie", "plinth_catalog_session=made-up");
            tokio::spawn(async move { request.send().await.map(|r| r.status().as_u16()) })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (status, body) = server.get("/health").await;
    assert_eq!(status, 200, "{body}");
    let still_waiting = waiting.iter().filter(|w| !w.is_finished()).count();
    assert_eq!(still_waiting, 8, "/health was answered only after requests that waited on the database");
    // Let go: they are answered.
    let end = "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(20)%' \
               AND pid <> pg_backend_pid()";
    tokio::task::block_in_place(|| postgres.psql(end)).unwrap();
    let _ = holder.wait();
    for request in waiting {
        let status = request.await.unwrap().unwrap();
        assert!(matches!(status, 401 | 503), "{status}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_oauth_token_issued_by_one_replica_works_refreshes_and_is_revoked_on_the_others() {
    use crate::oauth::{Flow, list_with};
    let fleet = Fleet::start(2, TestPostgres::shared().fresh_database(), &[]);
    let password = serde_json::json!({ "password": "alice-password" });
    let (status, _) =
        fleet.replica(0).call_as(Some(TOKEN), Method::PUT, "/admin/end-users/alice", Some(&password)).await;
    assert_eq!(status, 204);
    // Registered, signed in and issued on replica 0...
    let (client_id, tokens) = Flow::new(fleet.replica(0), "").tokens().await;
    let access = tokens["access_token"].as_str().unwrap();
    // ...taken on replica 1, and refreshed there.
    assert_eq!(list_with(fleet.replica(1), "", access).await.0, 200);
    let refresh = tokens["refresh_token"].as_str().unwrap();
    let (status, renewed) = Flow::new(fleet.replica(1), "").refresh(&client_id, refresh).await;
    assert_eq!(status, 200, "{renewed}");
    assert_eq!(list_with(fleet.replica(0), "", renewed["access_token"].as_str().unwrap()).await.0, 200);
    // Its successor used on replica 0, the spent refresh token presented
    // again there (past its reuse window: its successor was used): its
    // grant is revoked on both.
    let renewed_refresh = renewed["refresh_token"].as_str().unwrap();
    let (status, next) = Flow::new(fleet.replica(0), "").refresh(&client_id, renewed_refresh).await;
    assert_eq!(status, 200, "{next}");
    let (status, _) = Flow::new(fleet.replica(0), "").refresh(&client_id, refresh).await;
    assert_eq!(status, 400);
    for replica in &fleet.replicas {
        for tokens in [&renewed, &next] {
            assert_eq!(list_with(replica, "", tokens["access_token"].as_str().unwrap()).await.0, 401);
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deploy_by_reference_on_one_replica_is_served_by_the_others_without_the_registry() {
    use crate::oci::{Registry, cosign_keys, cosign_sign};
    let mut registry = Registry::start(false);
    let keys = tempfile::tempdir().unwrap();
    let (key, public) = cosign_keys(keys.path(), "ci");
    let echo = std::fs::read(plugins_dir().join("echo.wasm")).unwrap();
    registry.wkg_push("acme/echo:1.0", &echo, None);
    let reference = registry.reference("acme/echo:1.0");
    cosign_sign(&reference, &key, None);
    let args = ["--allow-private-cidr", "127.0.0.1/32", "--insecure-registry", registry.address.as_str()];
    let fleet = Fleet::start(2, TestPostgres::shared().fresh_database(), &args);

    // The policy set on one replica holds on the other.
    let policy = json!({ "requireSignature": true, "keys": [{ "name": "ci", "publicKey": std::fs::read_to_string(&public).unwrap() }] });
    let (status, body) = fleet.replica(1).call_as(Some(TOKEN), Method::PUT, "/admin/trust-policy", Some(&policy)).await;
    assert_eq!(status, 200, "{body}");
    eventually("the policy reaches the other replica", || async {
        fleet.replica(0).get("/admin/trust-policy").await.1["requireSignature"] == true
    })
    .await;
    let unsigned = relabeled(&echo, "unsigned");
    let (status, body) = fleet.replica(0).deploy(unsigned, "").await;
    assert_eq!(status, 422, "{body}");

    let (status, deployed) = fleet
        .replica(0)
        .call_as(Some(TOKEN), Method::POST, "/admin/tools", Some(&json!({ "reference": reference })))
        .await;
    assert_eq!(status, 201, "{deployed}");
    let id = deployed["toolId"].as_str().unwrap().to_string();
    registry.stop();

    let other = fleet.replica(1);
    eventually("the deploy reaches the replica", || async { versions_of(other, "echo").await == [1] }).await;
    let (status, body) = invoke_echo(other, &id, None, "from the store").await;
    assert_eq!((status, outputs(&body)["text"].clone()), (200, json!("from the store")), "{body}");
    let (_, version) = other.get(&format!("/tools/{id}/versions/1")).await;
    assert_eq!(version["provenance"], deployed["provenance"], "the same provenance on every replica");
    assert_eq!(version["provenance"]["signers"][0]["kind"], "cosign");
}

#[tokio::test(flavor = "multi_thread")]
async fn usage_counted_on_every_replica_adds_up() {
    let fleet = Fleet::start(2, TestPostgres::shared().fresh_database(), &["--usage-flush-secs", "1"]);
    let echo = std::fs::read(plugins_dir().join("echo.wasm")).unwrap();
    let (status, deployed) = fleet.replica(0).deploy(echo, "").await;
    assert_eq!(status, 201, "{deployed}");
    let id = deployed["toolId"].as_str().unwrap().to_string();
    let other = fleet.replica(1);
    eventually("the deploy reaches the replica", || async { versions_of(other, "echo").await == [1] }).await;
    for (replica, calls) in [(0, 2), (1, 3)] {
        for _ in 0..calls {
            let (status, body) = invoke_echo(fleet.replica(replica), &id, None, "x").await;
            assert_eq!(status, 200, "{body}");
        }
        // And one refused for its inputs on each (issue 57): counted by
        // parameter and code, summed like the rest.
        let refused = crate::support::invocation("echo", &[("text", json!(42))]);
        let (status, body) = fleet.replica(replica).post(&format!("/tools/{id}:invoke"), &refused).await;
        assert_eq!(status, 400, "{body}");
    }
    for replica in &fleet.replicas {
        let usage = crate::console::usage_until(replica, "hour", |u| u["items"][0]["calls"] == 7).await;
        assert_eq!(usage["items"][0]["outcomes"], json!({ "ok": 5, "refused": 2 }), "{usage}");
        assert_eq!(
            usage["items"][0]["refused"],
            json!([{ "parameter": "text", "code": "invalid_type", "calls": 2 }]),
            "{usage}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_grant_made_through_one_replica_serves_calls_on_another_and_its_revocation_too() {
    use crate::authorization::connect;
    use crate::authorization_support::{Api, Person, Provider};
    let provider = Provider::start("127.0.0.1").await;
    provider.sign_in_as("alice@inbox");
    let api = Api::start(&provider).await;
    let config = format!("use_account.api-url={}", api.url);
    let args = ["--oauth-allow-http", "--allow-private-cidr", "127.0.0.0/8", "--tool-config", &config];
    let fleet = Fleet::start(2, TestPostgres::shared().fresh_database(), &args);
    let (a, b) = (fleet.replica(0), fleet.replica(1));
    let (status, body) = a.deploy(crate::support::fixture("use_account.wasm"), "").await;
    assert_eq!(status, 201, "{body}");
    let path = "/admin/authorization-providers/inbox";
    let (status, body) = a.call_as(Some(TOKEN), Method::PUT, path, Some(&provider.settings())).await;
    assert_eq!(status, 200, "{body}");
    a.add_end_user("", "alice").await;
    eventually("the tool reaches B", || async { versions_of(b, "use_account").await == [1] }).await;
    let id = a.tool_id("use_account").await;

    // B knows the provider set on A: alice's call there is a challenge,
    // whose link is at the fleet's one public URL (A here).
    eventually("B asks alice to connect", || async { alice_calls(b, &id).await.0 == 403 }).await;
    let (_, body) = alice_calls(b, &id).await;
    assert_eq!(body["error"]["code"], "authorization_required", "{body}");
    let url = body["error"]["authorization"][0]["url"].as_str().unwrap().to_string();
    assert!(url.starts_with(&format!("{}/connections/", fleet.public_url)), "{url}");
    let alice = Person::new();
    alice.log_in_at(&url, "alice").await;
    assert_eq!(connect(&alice, &url).await.status, 200);
    assert_eq!(provider.exchanges(), 1);

    // The grant, stored through A, serves her calls on both.
    for replica in [a, b] {
        let (status, body) = alice_calls(replica, &id).await;
        assert_eq!(status, 200, "{body}");
        assert!(outputs(&body)["body"].as_str().unwrap().contains("hello alice@inbox"), "{body}");
    }
    assert_eq!(provider.exchanges(), 1, "one code exchange for the fleet");

    // Revoked through B: A, which had it cached, asks her again.
    let path = "/admin/end-users/alice/connections/inbox";
    let (status, body) = b.call_as(Some(TOKEN), Method::DELETE, path, None).await;
    assert!(status == 204 || status == 200, "{body}");
    eventually("A drops the revoked grant", || async { alice_calls(a, &id).await.0 == 403 }).await;
}

/// `use_account` called as alice on `replica`, as a client that honours
/// `Retry-After`: a replica's share of the tenant's rate starts empty
/// whenever the fleet's size changes (a heartbeat missed under load).
async fn alice_calls(replica: &Server, id: &str) -> (u16, Value) {
    for _ in 0..20 {
        let response = replica
            .request(Method::POST, &format!("/tools/{id}:invoke"))
            .header("plinth-end-user", "alice")
            .json(&invocation("use_account", &[("folder", json!("inbox"))]))
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let body = response.json::<Value>().await.unwrap();
        if status != 503 || body["error"]["code"] != "rate_limited" {
            return (status, body);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("rate limited twenty times in a row");
}
