//! The real MCP clients the tests drive (installed by `make mcp-clients`
//! into target/mcp-clients, passed as `PLINTH_TEST_MCP_CLIENTS`), and a
//! loopback proxy that adds a bearer key for the clients that cannot.

use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::Server;

/// An OAuth provider that a Node script of tests/mcp-clients/oidc/ runs
/// (oidc-provider) on 127.0.0.1: it prints `{"issuer": …}` once it listens,
/// and ends when dropped.
pub struct OidcProvider {
    child: std::process::Child,
    /// Its issuer URL.
    pub issuer: String,
    /// Its stdout, kept open: a write to a closed pipe would end it.
    _stdout: std::io::BufReader<std::process::ChildStdout>,
}

impl OidcProvider {
    /// Runs `tests/mcp-clients/oidc/{script} CLIENTS_DIR PORT ARGS…`.
    pub fn start(script: &str, port: u16, args: &[&str]) -> OidcProvider {
        use std::io::BufRead;
        use std::process::Stdio;
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/mcp-clients/oidc").join(script);
        let mut child = Command::new(node())
            .arg(&script)
            .arg(clients_dir())
            .arg(port.to_string())
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("node runs the provider: run `make mcp-clients`");
        let mut first = String::new();
        let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        stdout.read_line(&mut first).unwrap();
        let started: serde_json::Value =
            serde_json::from_str(&first).unwrap_or_else(|e| panic!("{}: {e}: {first:?}", script.display()));
        OidcProvider { child, issuer: started["issuer"].as_str().unwrap().to_string(), _stdout: stdout }
    }
}

impl Drop for OidcProvider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port of 127.0.0.1 free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// target/mcp-clients (`make mcp-clients` fills it).
pub fn clients_dir() -> PathBuf {
    let dir = std::env::var_os("PLINTH_TEST_MCP_CLIENTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/mcp-clients"));
    assert!(
        dir.join("stamp").exists(),
        "the MCP test clients are missing from {}: run `make mcp-clients` (or `make test`) first",
        dir.display()
    );
    dir
}

fn installed(relative: &str) -> PathBuf {
    let path = clients_dir().join(relative);
    assert!(
        path.exists(),
        "{} is missing: run `make mcp-clients` (or `make test`) to install the MCP test clients",
        path.display()
    );
    path
}

/// Node >= 22.19 (the machine's, or the one from npm).
pub fn node() -> PathBuf {
    installed("bin/node")
}

/// The conformance suite's CLI (`@modelcontextprotocol/conformance`), a
/// script for [`node`].
pub fn conformance_cli() -> PathBuf {
    installed("node_modules/.bin/conformance")
}

/// The Inspector's CLI (`@modelcontextprotocol/inspector`), a script for
/// [`node`]; run it with `--cli`.
pub fn inspector_cli() -> PathBuf {
    installed("node_modules/.bin/mcp-inspector")
}

/// The venv's python, with the `mcp` SDK (tests/mcp-clients/requirements.txt).
pub fn venv_python() -> PathBuf {
    installed("venv/bin/python")
}

/// `node script`, with HOME and the Inspector's state files in `home` (so a
/// client writes nothing to the user's home) and no colours.
pub fn node_command(script: &Path, home: &Path) -> Command {
    let mut command = Command::new(node());
    command
        .arg(script)
        .env("HOME", home)
        .env("MCP_CATALOG_PATH", home.join("mcp.json"))
        .env("MCP_CLIENT_CONFIG_PATH", home.join("client.json"))
        .env("MCP_STORAGE_DIR", home.join("storage"))
        .env("MCP_INSPECTOR_OAUTH_STATE_PATH", home.join("oauth.json"))
        .env("MCP_INSPECTOR_LOG_DIR", home.join("logs"))
        .env("NO_COLOR", "1")
        .env_remove("FORCE_COLOR")
        .env_remove("HTTP_PROXY")
        .env_remove("HTTPS_PROXY")
        .env_remove("http_proxy")
        .env_remove("https_proxy");
    command
}

/// The example tools served with the weather tool's stand-in backend (on a
/// free loopback port, in this process): the server and the backend's URL.
pub async fn serve_example_tools() -> (Server, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let weather = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(fake_weather::serve(listener, fake_weather::Counter::default()));
    let config = format!("lookup_weather_by_city.backend-url={weather}");
    let server = Server::start(&["--tool-config", &config, "--allow-private-cidr", "127.0.0.0/8"]);
    (server, weather)
}

/// A loopback reverse proxy in front of a server: forwards every request
/// to it with `Authorization: Bearer <key>`, streaming bodies both ways
/// (an SSE response reaches the client event by event) and leaving every
/// other header, Host and Origin among them, unchanged. For clients with no
/// way to send a header (the conformance suite). Runs on its own thread and
/// runtime, so a test may block on a client process; stops on drop.
pub struct AuthProxy {
    /// `http://127.0.0.1:PORT`
    pub base: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl AuthProxy {
    /// Proxies to `upstream` (`http://HOST:PORT`, as [`crate::support::Server::base`]).
    pub fn start(upstream: &str, key: &str) -> AuthProxy {
        let upstream = upstream
            .strip_prefix("http://")
            .unwrap_or_else(|| panic!("the proxy speaks plain HTTP only, not {upstream}"))
            .trim_end_matches('/')
            .to_string();
        let authorization = hyper::header::HeaderValue::try_from(format!("Bearer {key}")).unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let accept = async {
                    loop {
                        let Ok((stream, _)) = listener.accept().await else { continue };
                        let upstream = upstream.clone();
                        let authorization = authorization.clone();
                        tokio::spawn(async move {
                            let service = hyper::service::service_fn(move |request| {
                                forward(request, upstream.clone(), authorization.clone())
                            });
                            let _ = hyper::server::conn::http1::Builder::new()
                                .serve_connection(TokioIo::new(stream), service)
                                .await;
                        });
                    }
                };
                tokio::select! {
                    _ = accept => {}
                    _ = stopped => {}
                }
            });
            // Open client connections and streams end with the runtime.
            runtime.shutdown_background();
        });
        AuthProxy { base, stop: Some(stop), thread: Some(thread) }
    }
}

impl Drop for AuthProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

type ProxyBody = BoxBody<Bytes, hyper::Error>;

/// One request upstream, on a connection of its own (a long-lived SSE
/// response holds it for as long as it streams).
async fn forward(
    mut request: Request<Incoming>,
    upstream: String,
    authorization: hyper::header::HeaderValue,
) -> Result<Response<ProxyBody>, std::convert::Infallible> {
    request.headers_mut().insert(hyper::header::AUTHORIZATION, authorization);
    let answer = async {
        let stream = tokio::net::TcpStream::connect(&upstream).await.map_err(|e| e.to_string())?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| e.to_string())?;
        tokio::spawn(connection);
        let response = sender.send_request(request).await.map_err(|e| e.to_string())?;
        Ok::<_, String>(response.map(|body| body.boxed()))
    };
    Ok(answer.await.unwrap_or_else(|error| {
        let body = http_body_util::Full::new(Bytes::from(format!("proxy: {upstream}: {error}")))
            .map_err(|never| match never {})
            .boxed();
        Response::builder().status(502).body(body).unwrap()
    }))
}

/// A response body fed by a channel, one data frame per message.
struct ChannelBody(tokio::sync::mpsc::UnboundedReceiver<Bytes>);

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        self.0.poll_recv(cx).map(|chunk| chunk.map(|data| Ok(hyper::body::Frame::data(data))))
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_proxy_adds_the_key_keeps_host_and_origin_and_streams() {
    // Upstream: an event stream whose first event tells what it was sent; the
    // second comes only once the client has read the first.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = format!("http://{}", listener.local_addr().unwrap());
    let (go_on, may_go_on) = tokio::sync::oneshot::channel::<()>();
    let may_go_on = std::sync::Arc::new(std::sync::Mutex::new(Some(may_go_on)));
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let service = hyper::service::service_fn(move |request: Request<Incoming>| {
            let may_go_on = may_go_on.lock().unwrap().take();
            async move {
                let seen = |name: &str| {
                    request.headers().get(name).map(|v| v.to_str().unwrap().to_string()).unwrap_or_default()
                };
                let first = format!(
                    "data: {} {} auth={} host={} origin={}\n\n",
                    request.method(),
                    request.uri(),
                    seen("authorization"),
                    seen("host"),
                    seen("origin")
                );
                let body = request.into_body().collect().await.unwrap().to_bytes();
                let (events, receiver) = tokio::sync::mpsc::unbounded_channel();
                events.send(Bytes::from(first)).unwrap();
                tokio::spawn(async move {
                    let _ = may_go_on.unwrap().await;
                    let _ = events.send(Bytes::from(format!("data: body={}\n\n", String::from_utf8_lossy(&body))));
                });
                Ok::<_, std::convert::Infallible>(
                    Response::builder()
                        .header("content-type", "text/event-stream")
                        .body(ChannelBody(receiver))
                        .unwrap(),
                )
            }
        });
        let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
    });

    let proxy = AuthProxy::start(&upstream, "the-key");
    let mut response = reqwest::Client::new()
        .post(format!("{}/mcp?x=1", proxy.base))
        .header("host", "localhost:1234")
        .header("origin", "http://evil.example")
        .header("authorization", "Bearer another")
        .body("{\"jsonrpc\":\"2.0\"}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let first = tokio::time::timeout(std::time::Duration::from_secs(10), response.chunk())
        .await
        .expect("the first event arrives before the stream ends")
        .unwrap()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&first),
        "data: POST /mcp?x=1 auth=Bearer the-key host=localhost:1234 origin=http://evil.example\n\n"
    );
    go_on.send(()).unwrap();
    let rest = tokio::time::timeout(std::time::Duration::from_secs(10), response.bytes()).await.unwrap().unwrap();
    assert_eq!(String::from_utf8_lossy(&rest), "data: body={\"jsonrpc\":\"2.0\"}\n\n");

    // Nothing listening upstream: 502 naming it.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let gone = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let proxy = AuthProxy::start(&gone, "k");
    let response = reqwest::get(format!("{}/mcp", proxy.base)).await.unwrap();
    assert_eq!(response.status(), 502);
}
