//! Attacks from the network, replayed against the real server: a flood of
//! anonymous logins, password guessing, connections that never finish
//! their request (or never send one), and external confirmation servers'
//! keys fetched where they must not be.

use crate::cheq::{LOCAL_JWKS, booking, call_for, confirming_server, fetch};
use crate::support::{Server, TOKEN, invocation};
use reqwest::Method;
use serde_json::{Value, json};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// A hang guard, never a measure: every wait below ends far sooner.
const GUARD: Duration = Duration::from_secs(60);

/// A /proc/PID/status field, in KiB.
fn proc_status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap_or_else(|| panic!("no {field} in {status}"));
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// `POST {base}{path}` with a form body, from a client without a key and
/// without redirects → (status, headers, body).
/// A confirmation-page login, with the login form's double-submit token
/// as a client that is not a browser sends it: the same value in the
/// cookie and in the form.
async fn post_form(
    client: &reqwest::Client,
    url: &str,
    form: &[(&str, &str)],
) -> (u16, reqwest::header::HeaderMap, String) {
    const TOKEN: &str = "0123456789abcdef0123456789abcdef";
    let form: Vec<(&str, &str)> = form.iter().copied().chain([("login_token", TOKEN)]).collect();
    let cookie = format!("plinth_cheq_login={TOKEN}");
    let response = client.post(url).header("cookie", cookie).form(&form).send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, headers, response.text().await.unwrap_or_default())
}

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap()
}

fn header<'a>(headers: &'a reqwest::header::HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).map(|v| v.to_str().unwrap())
}

/// The peak resident memory allowed while 400 anonymous logins hit the
/// server at once (docs/cheq.md). Each Argon2id check holds 19 MiB; before
/// hashing was bounded, 400 ran at once and the server grew by gigabytes.
const LOGIN_FLOOD_PEAK_MIB: u64 = 512;

#[tokio::test(flavor = "multi_thread")]
async fn a_flood_of_anonymous_logins_is_bounded_and_others_keep_working() {
    // The 400 logins stand for 400 clients: here they all come from
    // 127.0.0.1, so its connection share is lifted to let them all in.
    let server = Server::start(&["--max-password-checks", "2", "--max-connections-per-address", "1024"]);
    let echo = server.tool_id("echo").await;
    let login = format!("{}/t/nosuch/cheq/login", server.base);
    let flood_client = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
    let flood: Vec<_> = (0..400)
        .map(|i| {
            let (client, login) = (flood_client.clone(), login.clone());
            tokio::spawn(async move {
                let user = format!("user{i}");
                let form = [("user", user.as_str()), ("password", "guess-guess"), ("resource_uri", "")];
                tokio::time::timeout(GUARD, post_form(&client, &login, &form)).await.expect("a login hung")
            })
        })
        .collect();

    // Other callers are answered while the flood runs...
    let (status, body) = server.get("/health").await;
    assert_eq!(status, 200, "{body}");
    let (status, body) =
        server.post(&format!("/tools/{echo}:invoke"), &invocation("echo", &[("text", json!("hi"))])).await;
    assert_eq!(status, 200, "{body}");

    let mut counts = std::collections::BTreeMap::new();
    for answer in flood {
        let (status, headers, page) = answer.await.unwrap();
        *counts.entry(status).or_insert(0) += 1;
        let code = header(&headers, "plinth-error-code");
        match status {
            401 => assert_eq!(code, Some("login_failed"), "{page}"),
            429 => {
                assert_eq!(code, Some("login_locked"), "{page}");
                assert!(header(&headers, "retry-after").is_some());
            }
            503 => {
                assert_eq!(code, Some("login_busy"), "{page}");
                assert_eq!(header(&headers, "retry-after"), Some("1"));
            }
            other => panic!("a login was answered {other}: {page}"),
        }
        assert!(page.contains("id=\"problem\""), "{page}");
    }
    assert_eq!(counts.values().sum::<usize>(), 400);
    assert!(counts.contains_key(&503) || counts.contains_key(&429), "nothing was turned away: {counts:?}");

    // ...and after it.
    let (status, body) =
        server.post(&format!("/tools/{echo}:invoke"), &invocation("echo", &[("text", json!("hi"))])).await;
    assert_eq!(status, 200, "{body}");
    let peak_mib = proc_status_kib(server.pid(), "VmHWM:") / 1024;
    assert!(peak_mib < LOGIN_FLOOD_PEAK_MIB, "the server peaked at {peak_mib} MiB during the flood ({counts:?})");
}

/// One tenant's publisher setting passwords as fast as it can (eight
/// loops at once) takes its tenant's share of the hashing slots and no
/// more: another tenant's end user keeps logging in, and is never locked
/// out by refusals that were not their doing. (Before, a password set
/// waited for a slot, and tokio gave every freed slot to the waiting sets
/// first: each of the other tenant's logins was refused `503 login_busy`,
/// counted as a failure of its address, and the 20th locked it.)
#[tokio::test(flavor = "multi_thread")]
async fn a_publisher_setting_passwords_in_a_loop_takes_no_other_tenants_logins() {
    let server = Server::start(&["--max-password-checks", "2"]);
    server.create_tenant("a", json!({})).await;
    server.create_tenant("b", json!({})).await;
    let (_, a_publisher) = server.create_key(Some("a"), "publisher").await;
    let (_, b_publisher) = server.create_key(Some("b"), "publisher").await;
    let password = json!({ "password": "carol-password" });
    let (status, body) =
        server.call_as(Some(&b_publisher), Method::PUT, "/t/b/admin/end-users/carol", Some(&password)).await;
    assert_eq!(status, 204, "{body}");

    let stop = Arc::new(AtomicBool::new(false));
    let (set, busy) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let base = server.base.clone();
    let flood: Vec<_> = (0..8)
        .map(|i| {
            let (stop, set, busy, key, base) =
                (stop.clone(), set.clone(), busy.clone(), a_publisher.clone(), base.clone());
            tokio::spawn(async move {
                let client = reqwest::Client::new();
                let url = format!("{base}/t/a/admin/end-users/user{i}");
                while !stop.load(Ordering::Relaxed) {
                    let response = client
                        .put(&url)
                        .bearer_auth(&key)
                        .json(&json!({ "password": "a-password-of-a" }))
                        .send()
                        .await
                        .unwrap();
                    let status = response.status().as_u16();
                    let retry_after = response.headers().get("retry-after").map(|v| v.to_str().unwrap().to_string());
                    let body: Value = response.json().await.unwrap_or(Value::Null);
                    match status {
                        204 => set.fetch_add(1, Ordering::Relaxed),
                        // Its tenant's share is taken: refused at once.
                        503 => {
                            assert_eq!(body["error"]["code"], "busy", "{body}");
                            assert_eq!(retry_after.as_deref(), Some("1"));
                            busy.fetch_add(1, Ordering::Relaxed)
                        }
                        other => panic!("a password set was answered {other}: {body}"),
                    };
                }
            })
        })
        .collect();
    // The flood is under way...
    while set.load(Ordering::Relaxed) < 4 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // ...and the other tenant's end user logs in, again and again, from an
    // address of their own.
    let carol = client_from("127.0.0.2");
    let url = format!("{}/t/b/cheq/login", server.base);
    let mut answers = Vec::new();
    for _ in 0..30 {
        let (status, headers, _) =
            post_form(&carol, &url, &[("user", "carol"), ("password", "carol-password"), ("resource_uri", "")]).await;
        answers.push((status, header(&headers, "plinth-error-code").map(str::to_string)));
    }
    let still_setting = set.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    for task in flood {
        tokio::time::timeout(GUARD, task).await.expect("a password set hung").unwrap();
    }
    assert!(answers.iter().all(|(status, _)| *status == 303), "tenant b's logins: {answers:?}");
    assert!(still_setting > 4, "the flood kept setting passwords meanwhile");
    // Never locked: carol's address counted none of a's doing.
    let (status, headers, page) =
        post_form(&carol, &url, &[("user", "carol"), ("password", "carol-password"), ("resource_uri", "")]).await;
    assert_eq!((status, header(&headers, "plinth-error-code")), (303, None), "{page}");
}

#[tokio::test(flavor = "multi_thread")]
async fn repeated_wrong_passwords_lock_the_user_out_until_the_lockout_ends() {
    let (server, _plugins) = confirming_server(&[
        "--login-lockout-after",
        "3",
        "--login-lockout-secs",
        "2",
        "--login-address-lockout-after",
        "8",
    ])
    .await;
    let client = no_redirects();
    let login = format!("{}/cheq/login", server.base);
    let attempt = |user: &'static str, password: &'static str, url: String| {
        let client = client.clone();
        async move { post_form(&client, &url, &[("user", user), ("password", password), ("resource_uri", "")]).await }
    };

    // Three wrong passwords: each is a plain refusal.
    for _ in 0..3 {
        let (status, headers, page) = attempt("alice", "wrong-password", login.clone()).await;
        assert_eq!((status, header(&headers, "plinth-error-code")), (401, Some("login_failed")), "{page}");
        assert!(page.contains("Wrong user name or password"), "{page}");
    }
    // Now alice is locked out: even her password is refused, at once.
    let (status, headers, page) = attempt("alice", "alice-password", login.clone()).await;
    assert_eq!((status, header(&headers, "plinth-error-code")), (429, Some("login_locked")), "{page}");
    let wait: u64 = header(&headers, "retry-after").unwrap().parse().unwrap();
    // Retry-After is the rest of the 2 s base lockout, rounded up: 2 right
    // after the failure, 1 if a second has passed since.
    assert!((1..=2).contains(&wait), "the first lockout is the configured base: Retry-After {wait}");
    // Another user from the same address is not.
    let (status, headers, _) = attempt("bob", "bob-password", login.clone()).await;
    assert_eq!(status, 303, "{headers:?}");

    // Once the lockout is over, the right password works.
    tokio::time::sleep(Duration::from_secs(wait)).await;
    let (status, headers, page) = attempt("alice", "alice-password", login.clone()).await;
    assert_eq!(status, 303, "{page}");
    assert!(header(&headers, "set-cookie").unwrap().starts_with("plinth_cheq_session="));

    // A tenant that does not exist and a user who does not exist are
    // answered and locked out exactly alike: nothing tells them apart.
    let nosuch = format!("{}/t/nosuch/cheq/login", server.base);
    for _ in 0..3 {
        let (status, headers, _) = attempt("nobody", "wrong-password", nosuch.clone()).await;
        assert_eq!((status, header(&headers, "plinth-error-code")), (401, Some("login_failed")));
    }
    let (status, headers, _) = attempt("nobody", "wrong-password", nosuch.clone()).await;
    assert_eq!((status, header(&headers, "plinth-error-code")), (429, Some("login_locked")));

    // The address is locked out too once it failed eight times in all
    // (alice 3, nobody 3, now carol 2): then even bob is refused from it.
    for _ in 0..2 {
        let (status, _, _) = attempt("carol", "wrong-password", login.clone()).await;
        assert_eq!(status, 401);
    }
    let (status, headers, page) = attempt("bob", "bob-password", login.clone()).await;
    assert_eq!((status, header(&headers, "plinth-error-code")), (429, Some("login_locked")), "{page}");
}

/// A client without a key or redirects that connects from `source` (any
/// 127.0.0.0/8 address: another client on this host).
fn client_from(source: &str) -> reqwest::Client {
    let source: std::net::IpAddr = source.parse().unwrap();
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).local_address(source).build().unwrap()
}

/// A login to the default tenant's confirmation page → (status, error code, Retry-After).
async fn log_in(
    server: &Server,
    client: &reqwest::Client,
    user: &str,
    password: &str,
) -> (u16, Option<String>, Option<u64>) {
    let url = format!("{}/cheq/login", server.base);
    let (status, headers, page) =
        post_form(client, &url, &[("user", user), ("password", password), ("resource_uri", "")]).await;
    if status == 303 {
        assert!(header(&headers, "set-cookie").unwrap().starts_with("plinth_cheq_session="), "{headers:?}");
    }
    let code = header(&headers, "plinth-error-code").map(str::to_string);
    let wait = header(&headers, "retry-after").map(|w| w.parse().unwrap());
    assert!(status == 303 || page.contains("id=\"problem\""), "{page}");
    (status, code, wait)
}

const LOCKED: Option<&str> = Some("login_locked");

#[tokio::test(flavor = "multi_thread")]
async fn a_stranger_failing_as_a_user_cannot_lock_them_out_where_they_log_in() {
    let (server, _plugins) = confirming_server(&["--login-lockout-after", "3", "--login-lockout-secs", "600"]).await;
    let (home, stranger, elsewhere) = (client_from("127.0.0.1"), client_from("127.0.0.2"), client_from("127.0.0.3"));
    assert_eq!(log_in(&server, &home, "alice", "alice-password").await.0, 303);

    // A stranger fails as alice until alice is locked out (for ten minutes).
    for _ in 0..3 {
        let (status, code, _) = log_in(&server, &stranger, "alice", "wrong-password").await;
        assert_eq!((status, code.as_deref()), (401, Some("login_failed")));
    }
    let (status, code, _) = log_in(&server, &stranger, "alice", "alice-password").await;
    assert_eq!(
        (status, code.as_deref()),
        (429, LOCKED),
        "the stranger's address is locked out, even with the password"
    );
    // From an address alice never logged in from, the lock holds too:
    // guessing spread over many addresses must stop.
    let (status, code, _) = log_in(&server, &elsewhere, "alice", "alice-password").await;
    assert_eq!((status, code.as_deref()), (429, LOCKED));

    // But alice still logs in where she did before, again and again.
    for _ in 0..2 {
        assert_eq!(log_in(&server, &home, "alice", "alice-password").await.0, 303);
    }
    // And others are unaffected, even at the stranger's address.
    assert_eq!(log_in(&server, &stranger, "bob", "bob-password").await.0, 303);
}

#[tokio::test(flavor = "multi_thread")]
async fn past_the_servers_failed_login_budget_logins_are_refused_and_tools_keep_working() {
    let (server, _plugins) = confirming_server(&[
        "--max-failed-logins-per-minute",
        "1",
        "--login-lockout-after",
        "100",
        "--login-address-lockout-after",
        "100",
    ])
    .await;
    let (status, code, _) = log_in(&server, &client_from("127.0.0.2"), "nobody", "wrong-password").await;
    assert_eq!((status, code.as_deref()), (401, Some("login_failed")));
    // The budget (one a minute) is spent: every login is refused before
    // hashing, whoever and wherever, until the next is earned.
    let (status, code, wait) = log_in(&server, &client_from("127.0.0.3"), "alice", "alice-password").await;
    assert_eq!((status, code.as_deref()), (429, LOCKED));
    assert!(wait.is_some_and(|w| (1..=60).contains(&w)), "Retry-After {wait:?}");
    // Calls are served as before.
    let (status, _, pack) = call_for(&server, Some("alice"), "book_flight", &booking("FIRST", 1)).await;
    assert_eq!(status, 202, "{pack}");
}

#[tokio::test(flavor = "multi_thread")]
async fn flooding_the_login_throttle_with_made_up_names_does_not_erase_a_lock() {
    let (server, _plugins) = confirming_server(&[
        "--login-throttle-max-keys",
        "3",
        "--login-lockout-after",
        "1",
        "--login-lockout-secs",
        "600",
    ])
    .await;
    let (stranger, elsewhere, bobs) = (client_from("127.0.0.2"), client_from("127.0.0.3"), client_from("127.0.0.4"));
    assert_eq!(log_in(&server, &bobs, "bob", "bob-password").await.0, 303);
    // The stranger locks alice out, then floods the tables with made-up
    // names to push her lock out of them.
    let (status, _, _) = log_in(&server, &stranger, "alice", "wrong-password").await;
    assert_eq!(status, 401);
    let mut answers = Vec::new();
    for i in 0..10 {
        let (status, code, _) = log_in(&server, &stranger, &format!("made-up-{i}"), "wrong-password").await;
        answers.push((status, code));
    }
    // Once the tables are full of locks, the made-up names are turned away
    // uncounted...
    assert_eq!(answers[9], (503, Some("login_busy".to_string())), "{answers:?}");
    // ...and alice's lock holds.
    let (status, code, _) = log_in(&server, &elsewhere, "alice", "alice-password").await;
    assert_eq!((status, code.as_deref()), (429, LOCKED));
    // Bob logs in where he did before.
    assert_eq!(log_in(&server, &bobs, "bob", "bob-password").await.0, 303);
}

/// A raw connection to the server, with a hang guard on reads.
fn connect(server: &Server) -> TcpStream {
    let stream = TcpStream::connect(server.base.trim_start_matches("http://")).unwrap();
    stream.set_read_timeout(Some(GUARD)).unwrap();
    stream
}

/// Reads until the server closes the connection; returns what it sent.
/// Fails if it is still open when the hang guard runs out.
fn read_until_closed(stream: &mut TcpStream) -> String {
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return String::from_utf8_lossy(&received).into_owned(),
            Ok(n) => received.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return String::from_utf8_lossy(&received).into_owned(),
            Err(e) => panic!("the server kept the connection open ({e}); received so far: {received:?}"),
        }
    }
}

/// Whether the server has closed `stream` by now (without waiting).
fn closed_now(mut stream: &TcpStream) -> bool {
    stream.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 1024];
    let closed = loop {
        match stream.read(&mut buf) {
            Ok(0) => break true,
            Ok(_) => continue,
            Err(e) if e.kind() == ErrorKind::WouldBlock => break false,
            Err(_) => break true,
        }
    };
    stream.set_nonblocking(false).unwrap();
    closed
}

/// A whole `GET /health` on a raw connection → the response head and body.
fn raw_health(stream: &mut TcpStream) -> String {
    stream.write_all(b"GET /health HTTP/1.1\r\nHost: plinth\r\n\r\n").unwrap();
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&received).contains("\"ok\"}") {
        let n = stream.read(&mut buf).expect("no answer to /health");
        assert!(n > 0, "the connection closed before /health was answered: {received:?}");
        received.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&received).into_owned()
}

#[test]
fn half_sent_request_heads_are_cut_off_after_the_header_timeout() {
    // 200 slow clients, all from 127.0.0.1 here: its connection share is
    // lifted so that the header timeout alone cuts them off.
    let server = Server::start(&[
        "--header-read-timeout-secs",
        "2",
        "--idle-timeout-secs",
        "600",
        "--max-connections-per-address",
        "1024",
    ]);
    let mut slow: Vec<TcpStream> = (0..200)
        .map(|_| {
            let mut stream = connect(&server);
            stream.write_all(b"GET /health HTTP/1.1\r\nHost: plinth\r\nX-Slow: ").unwrap();
            stream
        })
        .collect();
    for stream in &mut slow {
        let answer = read_until_closed(stream);
        assert!(!answer.contains("200 OK"), "{answer}");
    }
    assert!(raw_health(&mut connect(&server)).starts_with("HTTP/1.1 200"));
}

#[test]
fn idle_connections_are_closed_after_the_idle_timeout() {
    let server = Server::start(&["--idle-timeout-secs", "2", "--header-read-timeout-secs", "600"]);
    // One that never sends anything.
    let mut silent = connect(&server);
    // One kept alive after a request.
    let mut kept = connect(&server);
    let answer = raw_health(&mut kept);
    assert!(answer.starts_with("HTTP/1.1 200") && !answer.to_ascii_lowercase().contains("connection: close"));
    assert_eq!(read_until_closed(&mut silent), "");
    assert_eq!(read_until_closed(&mut kept), "");
}

#[test]
fn a_request_body_that_never_arrives_is_answered_408() {
    let server = Server::start(&["--request-body-timeout-secs", "2"]);
    let mut stream = connect(&server);
    stream
        .write_all(
            b"POST /cheq/transactions/abc?accept HTTP/1.1\r\nHost: plinth\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"pay",
        )
        .unwrap();
    let answer = read_until_closed(&mut stream);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"code\":\"request_timeout\""), "{answer}");
}

/// Reads one answer's head from a raw connection (up to its blank line).
fn read_head(stream: &mut TcpStream) -> String {
    let mut received = Vec::new();
    let mut byte = [0u8; 1];
    while !received.ends_with(b"\r\n\r\n") {
        let n = stream.read(&mut byte).expect("no answer");
        assert!(n > 0, "the connection closed before an answer: {:?}", String::from_utf8_lossy(&received));
        received.push(byte[0]);
    }
    String::from_utf8_lossy(&received).to_ascii_lowercase()
}

/// An answer sent before the request's body arrived — a refusal of its
/// head — says `Connection: close`, and the connection is closed: hyper
/// cannot reuse it without the rest of the body, and a client told
/// nothing sent its next request down it and got no answer (the MCP Python
/// SDK's OAuth discovery after its first `401`: "Server disconnected
/// without sending a response", in CI). A call whose body was read keeps
/// its connection.
#[test]
fn an_answer_sent_before_the_body_arrived_closes_the_connection_and_says_so() {
    let server = Server::start(&[]);
    let host = server.base.trim_start_matches("http://").to_string();
    for path in ["/mcp", "/tools/no-such-tool:invoke", "/otc/tools/call"] {
        let mut stream = connect(&server);
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nContent-Length: 40\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).unwrap();
        let answer = read_head(&mut stream);
        assert!(answer.starts_with("http/1.1 401"), "{path}: {answer}");
        assert!(answer.contains("\r\nconnection: close\r\n"), "{path}: {answer}");
        read_until_closed(&mut stream);
    }
    // A whole call, twice on one connection: kept alive, no `close`.
    let mut stream = connect(&server);
    let body = r#"{"tool_id":"none","input":{}}"#;
    for _ in 0..2 {
        let request = format!(
            "POST /otc/tools/call HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {TOKEN}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).unwrap();
        let answer = read_head(&mut stream);
        assert!(!answer.contains("connection: close"), "{answer}");
        let length: usize = answer
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no content-length: {answer}"));
        let mut rest = vec![0u8; length];
        stream.read_exact(&mut rest).unwrap();
    }
    assert!(!closed_now(&stream), "a call whose body was read keeps its connection");
}

#[test]
fn at_the_connection_cap_new_clients_wait_until_slow_ones_are_cut_off() {
    let server = Server::start(&["--max-connections", "8", "--header-read-timeout-secs", "3"]);
    let mut slow: Vec<TcpStream> = (0..8)
        .map(|_| {
            let mut stream = connect(&server);
            stream.write_all(b"GET /health HTTP/1.1\r\nHost: plinth\r\n").unwrap();
            stream
        })
        .collect();
    // The ninth waits in the backlog: it is answered only once a slow one
    // has been cut off, and then it is.
    let answer = raw_health(&mut connect(&server));
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let cut_off = slow.iter().filter(|s| closed_now(s)).count();
    assert!(cut_off >= 1, "/health was served while all 8 slow connections were still open");
    for stream in &mut slow {
        read_until_closed(stream);
    }
    assert!(raw_health(&mut connect(&server)).starts_with("HTTP/1.1 200"));
}

#[test]
fn a_connection_that_sends_nothing_is_cut_off_at_the_header_timeout_of_its_accept() {
    // Idle timeout 600 s: only the header timeout (2 s, from the accept)
    // can close it before the hang guard.
    let server = Server::start(&["--header-read-timeout-secs", "2", "--idle-timeout-secs", "600"]);
    let mut silent: Vec<TcpStream> = (0..20).map(|_| connect(&server)).collect();
    for stream in &mut silent {
        assert_eq!(read_until_closed(stream), "");
    }
    assert!(raw_health(&mut connect(&server)).starts_with("HTTP/1.1 200"));
}

/// A connection from `source` (any 127.0.0.0/8 address: a second client
/// on this host) to the server.
async fn connect_from(server: &Server, source: &str) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{source}:0").parse().unwrap()).unwrap();
    let address = server.base.trim_start_matches("http://").parse().unwrap();
    let stream = socket.connect(address).await.unwrap().into_std().unwrap();
    stream.set_nonblocking(false).unwrap();
    stream.set_read_timeout(Some(GUARD)).unwrap();
    stream
}

#[tokio::test(flavor = "multi_thread")]
async fn one_address_gets_its_share_of_connections_and_others_keep_being_served() {
    let server = Server::start(&[
        "--max-connections",
        "16",
        "--max-connections-per-address",
        "4",
        "--header-read-timeout-secs",
        "600",
        "--idle-timeout-secs",
        "600",
    ]);
    // 127.0.0.1 holds its four connections, silent...
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(connect_from(&server, "127.0.0.1").await);
    }
    // ...and a fifth is closed without an answer, however complete its request.
    let mut fifth = connect_from(&server, "127.0.0.1").await;
    let _ = fifth.write_all(b"GET /health HTTP/1.1\r\nHost: plinth\r\n\r\n");
    let answer = read_until_closed(&mut fifth);
    assert_eq!(answer, "", "a connection over the address's share was served");
    // Another client is served all the while.
    for _ in 0..3 {
        assert!(raw_health(&mut connect_from(&server, "127.0.0.2").await).starts_with("HTTP/1.1 200"));
    }
    // The held ones are still open, and one of them is served.
    assert!(held.iter().all(|s| !closed_now(s)));
    assert!(raw_health(&mut held[0]).starts_with("HTTP/1.1 200"));
    // Once one closes, the address gets its slot back (as soon as the server
    // has seen the close: retried, under the hang guard).
    drop(held.pop());
    let served = tokio::time::timeout(GUARD, async {
        loop {
            let mut stream = connect_from(&server, "127.0.0.1").await;
            if stream.write_all(b"GET /health HTTP/1.1\r\nHost: plinth\r\nConnection: close\r\n\r\n").is_ok()
                && read_until_closed(&mut stream).starts_with("HTTP/1.1 200")
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(served.is_ok(), "127.0.0.1 never got a connection back");
}

/// A stand-in external confirmation server that counts the requests for
/// its keys: `/jwks.json` is its key set, `/big.json` one padded past
/// 64 KiB, `/down.json` a failure (`503`, after half a second),
/// `/flaky.json` its key set while it is up (`set_up`), else `503`.
struct CountingConfirmationServer {
    key: plinth::cheq::SigningKey,
    base: String,
    requests: Arc<AtomicUsize>,
    up: Arc<AtomicBool>,
    _serving: tokio::task::JoinHandle<()>,
}

impl CountingConfirmationServer {
    async fn start() -> CountingConfirmationServer {
        let key = plinth::cheq::SigningKey::generate().unwrap();
        let jwks = plinth::cheq::jwks(&[&key]);
        let mut big = jwks.clone();
        big["padding"] = "x".repeat(100 * 1024).into();
        let requests = Arc::new(AtomicUsize::new(0));
        let (small_count, big_count, down_count) = (requests.clone(), requests.clone(), requests.clone());
        let (flaky_count, up) = (requests.clone(), Arc::new(AtomicBool::new(true)));
        let (flaky_up, flaky_jwks) = (up.clone(), jwks.clone());
        let app = axum::Router::new()
            .route(
                "/jwks.json",
                axum::routing::get(move || async move {
                    small_count.fetch_add(1, Ordering::SeqCst);
                    axum::Json(jwks)
                }),
            )
            .route(
                "/big.json",
                axum::routing::get(move || async move {
                    big_count.fetch_add(1, Ordering::SeqCst);
                    axum::Json(big)
                }),
            )
            .route(
                "/down.json",
                axum::routing::get(move || async move {
                    down_count.fetch_add(1, Ordering::SeqCst);
                    // Slow, so that accepts posted at once overlap its fetch.
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    axum::http::StatusCode::SERVICE_UNAVAILABLE
                }),
            )
            .route(
                "/flaky.json",
                axum::routing::get(move || async move {
                    flaky_count.fetch_add(1, Ordering::SeqCst);
                    use axum::response::IntoResponse;
                    if !flaky_up.load(Ordering::SeqCst) {
                        return axum::http::StatusCode::SERVICE_UNAVAILABLE.into_response();
                    }
                    axum::Json(flaky_jwks).into_response()
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let serving = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        CountingConfirmationServer { key, base, requests, up, _serving: serving }
    }

    /// Whether `/flaky.json` serves the keys.
    fn set_up(&self, up: bool) {
        self.up.store(up, Ordering::SeqCst);
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    fn accept(&self, signed: &Value, user: &str) -> Value {
        let mut signed = signed.clone();
        let claims = json!({ "sub": user, "decision": "accept" }).as_object().unwrap().clone();
        plinth::cheq::countersign(&mut signed, &self.key, claims).unwrap();
        signed
    }
}

async fn set_confirmation_server(server: &Server, jwks_url: &str) -> (u16, Value) {
    let setting = json!({ "uri": "https://confirm.example/", "jwks_url": jwks_url });
    server.call_as(Some(TOKEN), Method::PUT, "/admin/confirmation-server", Some(&setting)).await
}

/// A booking that waits for alice, and its CHEQ signed by the server →
/// (resource URI, signed CHEQ).
async fn pending_booking(server: &Server) -> (String, Value) {
    let (status, _, pack) = call_for(server, Some("alice"), "book_flight", &booking("FIRST", 1)).await;
    assert_eq!(status, 202, "{pack}");
    let resource = pack["resource uri"].as_str().unwrap().to_string();
    let (_, _, signed) = fetch(&resource).await;
    (resource, signed)
}

async fn accept(resource_uri: &str, body: &Value) -> (u16, Value) {
    let response = reqwest::Client::new().post(format!("{resource_uri}?accept")).json(body).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_plain_http_jwks_url_is_refused_unless_the_operator_allows_it() {
    let external = CountingConfirmationServer::start().await;
    let (server, _plugins) = confirming_server(&["--allow-private-cidr", "127.0.0.0/8"]).await;
    let (status, body) = set_confirmation_server(&server, &format!("{}/jwks.json", external.base)).await;
    assert_eq!((status, &body["error"]["code"]), (400, &json!("invalid_request")), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("https://"), "{body}");
    let (status, body) = server.get("/admin/confirmation-server").await;
    assert_eq!((status, &body["confirmation_server"]), (200, &Value::Null));
    assert_eq!(external.requests(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_jwks_url_on_the_servers_own_network_is_refused() {
    let external = CountingConfirmationServer::start().await;
    let (server, _plugins) = confirming_server(&["--cheq-allow-http-jwks"]).await;
    // An address in the URL is refused when it is set...
    let (status, body) = set_confirmation_server(&server, &format!("{}/jwks.json", external.base)).await;
    assert_eq!((status, &body["error"]["code"]), (400, &json!("invalid_request")), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("private network"), "{body}");
    // ...a name that resolves to one when it would be fetched, before any
    // connection is made.
    let port = external.base.rsplit(':').next().unwrap();
    let (status, body) = set_confirmation_server(&server, &format!("http://localhost:{port}/jwks.json")).await;
    assert_eq!(status, 204, "{body}");
    let (resource, signed) = pending_booking(&server).await;
    let (status, body) = accept(&resource, &external.accept(&signed, "alice")).await;
    assert_eq!((status, &body["error"]["code"]), (502, &json!("jwks_internal_address")), "{body}");
    assert_eq!(external.requests(), 0, "nothing reached the internal address");
    let (_, _, result) = fetch(&resource.replace("/transactions/", "/results/")).await;
    assert_eq!(result["state"], "pending", "nothing was decided");
}

#[tokio::test(flavor = "multi_thread")]
async fn jwks_are_fetched_only_for_real_transactions_capped_and_cached() {
    let external = CountingConfirmationServer::start().await;
    let (server, _plugins) =
        confirming_server(&["--cheq-allow-http-jwks", "--allow-private-cidr", "127.0.0.0/8"]).await;
    let (status, body) = set_confirmation_server(&server, &format!("{}/jwks.json", external.base)).await;
    assert_eq!(status, 204, "{body}");

    // An unknown transaction sets off no fetch.
    let (_, signed) = pending_booking(&server).await;
    let unknown = format!("{}/cheq/transactions/no-such-transaction", server.base);
    let (status, body) = accept(&unknown, &external.accept(&signed, "alice")).await;
    assert_eq!((status, &body["error"]["code"]), (404, &json!("unknown_transaction")), "{body}");
    assert_eq!(external.requests(), 0, "an unknown transaction must not fetch anything");

    // A real one fetches the keys once; the next accept uses the cached set.
    let (resource, signed) = pending_booking(&server).await;
    let (status, body) = accept(&resource, &external.accept(&signed, "alice")).await;
    assert_eq!((status, &body["state"]), (200, &json!("accepted")), "{body}");
    assert_eq!(external.requests(), 1);
    let (resource, signed) = pending_booking(&server).await;
    let (status, body) = accept(&resource, &external.accept(&signed, "alice")).await;
    assert_eq!((status, &body["state"]), (200, &json!("accepted")), "{body}");
    assert_eq!(external.requests(), 1, "the second accept used the cached keys");

    // A key set past the cap is refused, and nothing is decided.
    let (status, body) = set_confirmation_server(&server, &format!("{}/big.json", external.base)).await;
    assert_eq!(status, 204, "{body}");
    let (resource, signed) = pending_booking(&server).await;
    let (status, body) = accept(&resource, &external.accept(&signed, "alice")).await;
    assert_eq!((status, &body["error"]["code"]), (502, &json!("jwks_too_large")), "{body}");
    assert_eq!(external.requests(), 2);
    let (_, _, result) = fetch(&resource.replace("/transactions/", "/results/")).await;
    assert_eq!(result["state"], "pending", "nothing was decided");
}

/// A confirming server that fetches local JWKS and remembers a failed
/// fetch for `secs`.
async fn remembering_failures_for(secs: &str) -> (Server, tempfile::TempDir) {
    let mut args = LOCAL_JWKS.to_vec();
    args.extend(["--cheq-jwks-failure-cache-secs", secs]);
    confirming_server(&args).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_confirmation_server_is_asked_once_however_many_accepts_arrive() {
    let external = CountingConfirmationServer::start().await;
    let (server, _plugins) = remembering_failures_for("600").await;
    let (status, body) =
        set_confirmation_server(&server, &format!("{}/down.json?token=s3cret-token", external.base)).await;
    assert_eq!(status, 204, "{body}");
    let (resource, signed) = pending_booking(&server).await;
    let countersigned = external.accept(&signed, "alice");

    // Twenty accepts at once: one fetch, whose failure answers them all.
    let accepts: Vec<_> = (0..20)
        .map(|_| {
            let (resource, countersigned) = (resource.clone(), countersigned.clone());
            tokio::spawn(async move { tokio::time::timeout(GUARD, accept(&resource, &countersigned)).await.unwrap() })
        })
        .collect();
    for answer in accepts {
        let (status, body) = answer.await.unwrap();
        assert_eq!((status, &body["error"]["code"]), (502, &json!("jwks_unavailable")), "{body}");
    }
    assert_eq!(external.requests(), 1, "the accepts waited for one fetch");
    // Later accepts get the cached failure.
    let (status, body) = accept(&resource, &countersigned).await;
    assert_eq!((status, &body["error"]["code"]), (502, &json!("jwks_unavailable")), "{body}");
    assert_eq!(external.requests(), 1);
    let (_, _, result) = fetch(&resource.replace("/transactions/", "/results/")).await;
    assert_eq!(result["state"], "pending", "nothing was decided");
    let logs = server.logs();
    assert!(logs.contains("a fetched key set or document was not used"), "{logs}");
    assert!(!logs.contains("s3cret-token"), "the URL's query was logged: {logs}");

    // A URL carrying credentials is refused when it is set, without
    // echoing them, and the setting stays as it was.
    let (status, body) =
        set_confirmation_server(&server, "https://user:s3cret-password@confirm.example/jwks.json").await;
    assert_eq!((status, &body["error"]["code"]), (400, &json!("invalid_request")), "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("user name or password") && !message.contains("s3cret"), "{body}");
    let (status, body) = server.get("/admin/confirmation-server").await;
    assert_eq!(status, 200);
    assert!(
        body["confirmation_server"]["jwks_url"].as_str().unwrap().ends_with("/down.json?token=s3cret-token"),
        "{body}"
    );
    assert!(!server.logs().contains("s3cret-password"));
}

/// An accept while the confirmation server's keys cannot be fetched is
/// `502 jwks_unavailable` and decides nothing; once the keys are back (and
/// the remembered failure has lapsed) the same accept, retried, runs the
/// call.
#[tokio::test(flavor = "multi_thread")]
async fn an_accept_without_the_keys_decides_nothing_and_its_retry_works_once_they_are_back() {
    let external = CountingConfirmationServer::start().await;
    let (server, _plugins) = remembering_failures_for("1").await;
    let (status, body) = set_confirmation_server(&server, &format!("{}/flaky.json", external.base)).await;
    assert_eq!(status, 204, "{body}");
    external.set_up(false);
    let (resource, signed) = pending_booking(&server).await;
    let countersigned = external.accept(&signed, "alice");
    let (status, body) = accept(&resource, &countersigned).await;
    assert_eq!((status, &body["error"]["code"]), (502, &json!("jwks_unavailable")), "{body}");
    let (_, _, result) = fetch(&resource.replace("/transactions/", "/results/")).await;
    assert_eq!(result["state"], "pending", "nothing was decided");
    let id = resource.rsplit('/').next().unwrap();
    let (_, evidence) = server.get(&format!("/admin/cheq/{id}")).await;
    assert_eq!((&evidence["state"], &evidence["decision"]), (&json!("pending"), &Value::Null), "{evidence}");

    // The keys are back: the confirmation server retries until the
    // remembered failure lapses, and the call runs.
    external.set_up(true);
    let retried = tokio::time::timeout(GUARD, async {
        loop {
            let (status, body) = accept(&resource, &countersigned).await;
            if body["error"]["code"] != "jwks_unavailable" {
                return (status, body);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .unwrap();
    assert_eq!((retried.0, &retried.1["state"]), (200, &json!("accepted")), "{}", retried.1);
    assert_eq!(external.requests(), 2, "one failed fetch, one that found the keys");
    let (status, _, result) = fetch(&resource.replace("/transactions/", "/results/")).await;
    assert_eq!(status, 200, "{result}");
}

/// The tenant segment of a URL never reaches a header: one that is not a
/// tenant name (`acme;SameSite=None;…` would append cookie attributes to
/// the sign-in token's `Path`) is no route at all, with no cookie, for
/// every page that sets one.
#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_segment_that_is_not_a_name_reaches_no_page_and_no_cookie() {
    let server = Server::start(&[]);
    let client = no_redirects();
    for forged in ["acme;SameSite=None;Max-Age=99999", "acme%3BSameSite=None", "Acme", "-acme", "acme%0d%0aX-Evil:1"] {
        for page in ["catalog/sign-in", "cheq/confirm", "catalog"] {
            let url = format!("{}/t/{forged}/{page}", server.base);
            let response = client.get(&url).send().await.unwrap();
            assert_eq!(response.status(), 404, "{url}");
            assert!(response.headers().get("set-cookie").is_none(), "{url}: {:?}", response.headers());
        }
    }
    // A real tenant's sign-in page sets its token for its own path only.
    let (status, body) =
        server.call_as(Some(TOKEN), Method::POST, "/admin/tenants", Some(&json!({"name": "acme"}))).await;
    assert_eq!(status, 201, "{body}");
    let response = client.get(format!("{}/t/acme/catalog/sign-in", server.base)).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let cookie = response.headers()["set-cookie"].to_str().unwrap();
    assert!(cookie.contains("; Path=/t/acme/catalog/sign-in;"), "{cookie}");
}
