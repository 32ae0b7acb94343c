//! Hardening IV, names whose DNS never answers: a stranger naming dead
//! hosts in sign-ins, and a publisher deploying from dead registries, each
//! request abandoned within 100 ms, while another tenant signs in with a
//! metadata document, pulls from its registry and has an external
//! identity provider's token checked. The server runs in a mount namespace
//! of its own whose `/etc/resolv.conf` names a name server that reads every
//! query and answers none, and whose `/etc/hosts` names the legitimate
//! hosts (all on 127.0.0.1): the real resolver's path, end to end.

use crate::oauth::{ProviderKey, StandInProvider, list_with};
use crate::oci::Registry;
use crate::support::{Server, TOKEN, plugins_dir};
use reqwest::Method;
use serde_json::json;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The legitimate hosts, named in the server's `/etc/hosts`.
const DOCS: &str = "docs.plinth.test";
const IDP: &str = "idp.plinth.test";
const REGISTRY: &str = "registry.plinth.test";

/// A name server that reads every query sent to `address`:53 and answers
/// none, for as long as it is kept.
struct SilentNameServer {
    address: Ipv4Addr,
    queries: Arc<std::sync::atomic::AtomicUsize>,
    _reading: tokio::task::JoinHandle<()>,
}

impl SilentNameServer {
    async fn start(address: Ipv4Addr) -> SilentNameServer {
        let socket = tokio::net::UdpSocket::bind((address, 53))
            .await
            .unwrap_or_else(|e| panic!("binding {address}:53 for the silent name server (the tests run as root): {e}"));
        let queries = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = queries.clone();
        let reading = tokio::spawn(async move {
            let mut buffer = [0u8; 4096];
            while socket.recv_from(&mut buffer).await.is_ok() {
                counted.fetch_add(1, Ordering::SeqCst);
            }
        });
        SilentNameServer { address, queries, _reading: reading }
    }

    fn queries(&self) -> usize {
        self.queries.load(Ordering::SeqCst)
    }
}

/// Starts the server with `args` in a mount namespace of its own whose
/// `/etc/resolv.conf` names only `name_server` and whose `/etc/hosts`
/// names the legitimate hosts.
fn start_behind(name_server: &SilentNameServer, args: &[&str]) -> (Server, tempfile::TempDir) {
    let files = tempfile::tempdir().unwrap();
    let resolv = files.path().join("resolv.conf");
    let hosts = files.path().join("hosts");
    std::fs::write(&resolv, format!("nameserver {}\noptions timeout:5 attempts:2\n", name_server.address)).unwrap();
    std::fs::write(&hosts, format!("127.0.0.1 localhost {DOCS} {IDP} {REGISTRY}\n::1 localhost\n")).unwrap();
    let script = "mount --bind \"$1\" /etc/resolv.conf && mount --bind \"$2\" /etc/hosts && shift 2 && exec \"$@\"";
    let (resolv, hosts) = (resolv.to_str().unwrap().to_string(), hosts.to_str().unwrap().to_string());
    let wrapper = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", &resolv, &hosts];
    let plugins = plugins_dir();
    let mut all = vec!["--plugins", plugins.to_str().unwrap()];
    all.extend_from_slice(args);
    let (server, _) = Server::try_start_wrapped(&wrapper, tempfile::tempdir().unwrap(), &all, Some(TOKEN))
        .unwrap_or_else(|log| {
            panic!("plinth did not start in its own mount namespace (unshare, as root); its log:\n{log}")
        });
    (server, files)
}

/// A sign-in page request naming the metadata document `client_id`.
async fn sign_in(client: &reqwest::Client, base: &str, client_id: &str) -> Result<(u16, String), reqwest::Error> {
    let query = [
        ("response_type", "code"),
        ("client_id", client_id),
        ("code_challenge", "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"),
        ("code_challenge_method", "S256"),
    ];
    let response = client.get(format!("{base}/oauth/authorize")).query(&query).send().await?;
    let status = response.status().as_u16();
    Ok((status, response.text().await?))
}

/// Serves a client metadata document at `http://docs.plinth.test:PORT/client.json` → its URL.
async fn document_host() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{DOCS}:{}/client.json", listener.local_addr().unwrap().port());
    let document = json!({ "client_id": url, "client_name": "Quiet's agent",
                           "redirect_uris": ["http://127.0.0.1:41873/callback"] })
    .to_string();
    let app = axum::Router::new().route(
        "/client.json",
        axum::routing::get(move || {
            let document = document.clone();
            async move { ([(axum::http::header::CONTENT_TYPE, "application/json")], document) }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

/// Until `stop`: sign-in requests naming made-up documents on hosts of a
/// zone whose name server never answers, from `addresses` (`lanes` at once
/// each), each abandoned after 100 ms.
fn flood_sign_ins(
    base: &str,
    addresses: &[Ipv4Addr],
    lanes: usize,
    stop: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<usize>> {
    let mut tasks = Vec::new();
    for (a, address) in addresses.iter().enumerate() {
        for lane in 0..lanes {
            let client = reqwest::Client::builder()
                .local_address(IpAddr::V4(*address))
                .timeout(Duration::from_millis(100))
                .build()
                .unwrap();
            let (base, stop) = (base.to_string(), stop.clone());
            tasks.push(tokio::spawn(async move {
                let mut sent = 0;
                while !stop.load(Ordering::SeqCst) {
                    let client_id = format!("https://a{a}l{lane}n{sent}.dead.test/client.json");
                    let _ = sign_in(&client, &base, &client_id).await;
                    sent += 1;
                }
                sent
            }));
        }
    }
    tasks
}

/// Until `stop`: `lanes` at once of the noisy publisher's deploys by
/// reference to registries in the dead zone, each abandoned after 100 ms.
fn flood_deploys(base: &str, key: &str, lanes: usize, stop: &Arc<AtomicBool>) -> Vec<tokio::task::JoinHandle<usize>> {
    (0..lanes)
        .map(|lane| {
            let client = reqwest::Client::builder().timeout(Duration::from_millis(100)).build().unwrap();
            let (url, key, stop) = (format!("{base}/t/noisy/admin/tools"), key.to_string(), stop.clone());
            tokio::spawn(async move {
                let mut sent = 0;
                while !stop.load(Ordering::SeqCst) {
                    let reference = format!("r{lane}n{sent}.dead.test/tools/echo:1");
                    let _ = client.post(&url).bearer_auth(&key).json(&json!({ "reference": reference })).send().await;
                    sent += 1;
                }
                sent
            })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn names_that_never_resolve_take_no_one_elses_sign_in_pull_or_token_check() {
    let name_server = SilentNameServer::start(Ipv4Addr::new(127, 53, 0, 1)).await;
    // The quiet tenant's registry, with echo pushed to it, and its
    // identity provider, both reached by the names in /etc/hosts.
    let registry = Registry::start(false);
    let port = registry.address.rsplit(':').next().unwrap().to_string();
    let echo = std::fs::read(plugins_dir().join("echo.wasm")).unwrap();
    registry.wkg_push("tools/echo:1", &echo, None);
    let registry_name = format!("{REGISTRY}:{port}");
    let provider = StandInProvider::start_named(Some(IDP)).await;
    let key = ProviderKey::new("k1");
    provider.publish(&[&key]);
    let (server, _files) = start_behind(
        &name_server,
        &[
            "--oauth-allow-http",
            "--allow-private-cidr",
            "127.0.0.0/8",
            "--insecure-registry",
            &registry_name,
            "--max-concurrent-deploys",
            "4",
        ],
    );
    // quiet signs its agents in here and pulls from its registry;
    // federated takes its identity provider's tokens.
    for tenant in ["quiet", "federated", "noisy"] {
        server.create_tenant(tenant, json!({})).await;
    }
    let issuer = json!({ "issuer": provider.issuer });
    let (status, body) =
        server.call_as(Some(TOKEN), Method::PUT, "/admin/tenants/federated/oauth", Some(&issuer)).await;
    assert_eq!(status, 200, "{body}");
    let password = json!({ "password": "alice-password" });
    let (status, body) =
        server.call_as(Some(TOKEN), Method::PUT, "/t/federated/admin/end-users/alice", Some(&password)).await;
    assert_eq!(status, 204, "{body}");
    let (_, noisy_publisher) = server.create_key(Some("noisy"), "publisher").await;
    let (_, quiet_publisher) = server.create_key(Some("quiet"), "publisher").await;
    let document = document_host().await;

    // The flood: a stranger's sign-ins from four addresses, eight at a
    // time each, and the noisy publisher's deploys, two at a time.
    let stop = Arc::new(AtomicBool::new(false));
    let strangers: Vec<Ipv4Addr> = (1..=4).map(|n| Ipv4Addr::new(127, 0, 9, n)).collect();
    let mut flood = flood_sign_ins(&server.base, &strangers, 8, &stop);
    flood.extend(flood_deploys(&server.base, &noisy_publisher, 2, &stop));
    // Long enough for every lookup slot to have been taken over and over
    // (each request is abandoned after 100 ms, and a tenant pulls one at a
    // time: about ten of noisy's lookups a second; the name server's
    // silence would hold a lookup for ten seconds).
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(name_server.queries() > 0, "the dead zone's names were looked up");

    // During the flood, the other tenants' three fetches each work (all
    // three are tried, and what each got is told, before any is judged).
    let quiet = reqwest::Client::new();
    let base = format!("{}/t/quiet", server.base);
    let (signed_in, page) = sign_in(&quiet, &base, &document).await.unwrap();
    let reference = format!("{registry_name}/tools/echo:1");
    let (pulled, pull) = server
        .call_as(Some(&quiet_publisher), Method::POST, "/t/quiet/admin/tools", Some(&json!({ "reference": reference })))
        .await;
    let audience = format!("{}/t/federated/mcp", server.base);
    let token = provider.token(&key, None, Some("at+jwt"), &audience, "alice");
    let (listed, _, listing) = list_with(&server, "/t/federated", &token).await;
    assert_eq!(
        (signed_in, pulled, listed),
        (200, 201, 200),
        "quiet's sign-in with its metadata document, quiet's pull from its registry, federated's token checked \
         against its identity provider's keys:\n{page}\n{pull}\n{listing}"
    );
    assert!(page.contains("Quiet&#39;s agent") || page.contains("Quiet's agent"), "{page}");
    assert!(listing["result"]["tools"].is_array(), "{listing}");

    stop.store(true, Ordering::SeqCst);
    let mut sent = 0;
    for task in flood {
        sent += task.await.unwrap();
    }
    assert!(sent > 100, "the flood sent {sent} requests");
}
