//! The server's container image and the compose fleet, run with podman:
//! the image `make image-test` builds (deploy/image/build, from the debug
//! binary, as `localhost/plinth:test`) and PostgreSQL and nginx images made
//! the same way from Debian's packages (deploy/image/build-postgres). Each
//! test names its containers, volumes and networks after itself and this
//! process and removes them when it ends, passed or failed. Nothing is
//! skipped: without podman or the images a test fails and says what to run.

use crate::support::{fixture, invocation, outputs, plugins_dir};
use reqwest::Method;
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// The repository's root.
fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// `program`, with podman's settings for these machines
/// (deploy/image/containers.conf) unless the environment names others.
fn container_command(program: &str) -> Command {
    let mut command = Command::new(program);
    if std::env::var_os("CONTAINERS_CONF").is_none() {
        command.env("CONTAINERS_CONF", repo().join("deploy/image/containers.conf"));
    }
    command
}

fn output(command: &mut Command) -> Output {
    command.output().unwrap_or_else(|e| {
        panic!("{command:?} did not start ({e}): `make system-packages` installs podman and podman-compose")
    })
}

/// `podman ARGS`, which must succeed → its standard output, trimmed.
fn podman(args: &[&str]) -> String {
    let out = output(container_command("podman").args(args));
    assert!(
        out.status.success(),
        "podman {} failed ({}):\n{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `podman ARGS` → whether it succeeded, and its standard error.
fn podman_status(args: &[&str]) -> (bool, String) {
    let out = output(container_command("podman").args(args));
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The image named by `variable`, or `default`; it must exist.
fn image(variable: &str, default: &str) -> String {
    let image = std::env::var(variable).unwrap_or_else(|_| default.to_string());
    let (exists, _) = podman_status(&["image", "exists", &image]);
    assert!(exists, "the image {image} is missing: run `make image-test` (or `make test`) first");
    image
}

/// A port on 127.0.0.1 that was free a moment ago.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// What a test made with podman, removed when the test ends (a panic too).
struct Made {
    /// Names start with this: `plinth-e2e-PID-TEST`.
    prefix: String,
    containers: Vec<String>,
    volumes: Vec<String>,
    /// A compose project: everything carrying its label.
    project: Option<String>,
}

impl Made {
    fn new(test: &str) -> Made {
        let prefix = format!("plinth-e2e-{}-{test}", std::process::id());
        Made { prefix, containers: Vec::new(), volumes: Vec::new(), project: None }
    }

    fn volume(&mut self, name: &str) -> String {
        let volume = format!("{}-{name}", self.prefix);
        podman(&["volume", "create", &volume]);
        self.volumes.push(volume.clone());
        volume
    }

    fn container(&mut self, name: &str) -> String {
        let container = format!("{}-{name}", self.prefix);
        self.containers.push(container.clone());
        container
    }
}

impl Drop for Made {
    fn drop(&mut self) {
        let mut containers = self.containers.clone();
        let mut volumes = self.volumes.clone();
        let mut networks = Vec::new();
        if let Some(project) = &self.project {
            let label = format!("label=io.podman.compose.project={project}");
            let list = |args: &[&str]| -> Vec<String> {
                let out = output(container_command("podman").args(args));
                String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect()
            };
            containers.extend(list(&["ps", "-a", "-q", "--filter", &label]));
            volumes.extend(list(&["volume", "ls", "-q", "--filter", &label]));
            networks.extend(list(&["network", "ls", "-q", "--filter", &label]));
        }
        for container in containers {
            let _ = output(container_command("podman").args(["rm", "-f", "-v", "-t", "0", &container]));
        }
        for volume in volumes {
            let _ = output(container_command("podman").args(["volume", "rm", "-f", &volume]));
        }
        for network in networks {
            let _ = output(container_command("podman").args(["network", "rm", "-f", &network]));
        }
    }
}

/// One server, reached over HTTP on 127.0.0.1.
struct Node {
    base: String,
    http: reqwest::Client,
}

impl Node {
    fn new(port: u16) -> Node {
        Node { base: format!("http://127.0.0.1:{port}"), http: reqwest::Client::new() }
    }

    /// `method path` with `key` and a body → (status, JSON body).
    async fn send(&self, key: Option<&str>, method: Method, path: &str, body: Option<reqwest::Body>) -> (u16, Value) {
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        if let Some(body) = body {
            request = request.body(body);
        }
        let response = request.send().await.unwrap_or_else(|e| panic!("{path}: {e}"));
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn get(&self, key: &str, path: &str) -> (u16, Value) {
        self.send(Some(key), Method::GET, path, None).await
    }

    async fn post_json(&self, key: &str, path: &str, body: &Value) -> (u16, Value) {
        let response = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(key)
            .json(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// Deploys a packed tool as `key` → the deploy's answer (201).
    async fn deploy(&self, key: &str, bytes: Vec<u8>) -> Value {
        let response = self
            .http
            .post(format!("{}/admin/tools", self.base))
            .bearer_auth(key)
            .header("content-type", "application/wasm")
            .body(bytes)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        assert_eq!(status, 201, "{body}");
        body
    }

    /// Calls echo over A2T (version `version`, or the current one) → its text.
    async fn a2t_echo(&self, key: &str, id: &str, version: Option<u64>, text: &str) -> String {
        let path = match version {
            Some(v) => format!("/tools/{id}/versions/{v}:invoke"),
            None => format!("/tools/{id}:invoke"),
        };
        let (status, body) = self.post_json(key, &path, &invocation("echo", &[("text", json!(text))])).await;
        assert_eq!(status, 200, "{body}");
        outputs(&body)["text"].as_str().unwrap().to_string()
    }

    /// Calls echo over MCP (a stateless 2026-07-28 `tools/call`) → the result.
    async fn mcp_echo(&self, key: &str, text: &str) -> Value {
        let revision = "2026-07-28";
        let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "echo",
            "arguments": { "text": text },
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": revision,
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        } });
        let response = self
            .http
            .post(format!("{}/mcp", self.base))
            .bearer_auth(key)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", revision)
            .header("mcp-method", "tools/call")
            .header("mcp-name", "echo")
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let answer: Value = response.json().await.unwrap_or(Value::Null);
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["result"]["isError"], false, "{answer}");
        answer["result"].clone()
    }

    /// The operator's view of a Prometheus sample (`name{labels} value`).
    async fn metric(&self, key: &str, name: &str, labels: &str) -> Option<f64> {
        let response = self.http.get(format!("{}/metrics", self.base)).bearer_auth(key).send().await.unwrap();
        assert_eq!(response.status(), 200);
        let text = response.text().await.unwrap();
        let prefix = format!("{name}{{{labels}}} ");
        text.lines().find_map(|line| line.strip_prefix(&prefix)).and_then(|value| value.parse().ok())
    }

    /// Waits until `GET /ready` answers 200, while `container` runs.
    async fn wait_ready(&self, container: &str) {
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            if let Ok(response) = self.http.get(format!("{}/ready", self.base)).send().await
                && response.status() == 200
            {
                return;
            }
            let running = podman(&["inspect", "--format", "{{.State.Running}}", container]);
            assert!(
                Instant::now() < deadline && running == "true",
                "{container} is not ready (running: {running}); its log:\n{}",
                podman_logs(container)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A container's log (its standard output and error).
fn podman_logs(container: &str) -> String {
    let out = output(container_command("podman").args(["logs", container]));
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// The usage item of echo through `door` in a `/admin/usage` answer.
fn echo_usage<'a>(usage: &'a Value, door: &str) -> Option<&'a Value> {
    usage["items"].as_array()?.iter().find(|i| i["tool"] == "echo" && i["door"] == door)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_image_runs_as_non_root_on_a_read_only_root_keeps_its_state_and_stops_gracefully() {
    let image = image("PLINTH_TEST_IMAGE", "localhost/plinth:test");
    assert_eq!(podman(&["image", "inspect", "--format", "{{.Config.StopSignal}}", &image]), "SIGTERM");
    let mut made = Made::new("image");
    let volume = made.volume("data");
    let port = free_port();
    let node = Node::new(port);
    // Usage is written every hour here: only the graceful stop writes it
    // before the restart. No health-check timer: podman schedules those with
    // systemd, which does not run here (`podman healthcheck run` runs it).
    let run = |name: &str| {
        podman(&[
            "run",
            "-d",
            "--name",
            name,
            "--read-only",
            "--health-interval",
            "disable",
            "-v",
            &format!("{volume}:/data"),
            "-p",
            &format!("127.0.0.1:{port}:8080"),
            "-e",
            &format!("PLINTH_PUBLIC_URL={}", node.base),
            "-e",
            "PLINTH_USAGE_FLUSH_SECS=3600",
            &image,
        ])
    };

    let first = made.container("first");
    run(&first);
    node.wait_ready(&first).await;
    let log = podman_logs(&first);
    let operator = log
        .lines()
        .find_map(|l| l.strip_prefix("operator key (saved to /data/operator.key; shown only now): "))
        .unwrap_or_else(|| panic!("no operator key in the first start's log:\n{log}"))
        .trim()
        .to_string();

    // The server is user 10001, not root, on the host too (no user namespace).
    let pid = podman(&["inspect", "--format", "{{.State.Pid}}", &first]);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    for field in ["Uid:", "Gid:"] {
        let ids: Vec<&str> =
            status.lines().find(|l| l.starts_with(field)).unwrap().split_whitespace().skip(1).collect();
        assert_eq!(ids, ["10001"; 4], "{field} of the server in the container");
    }
    // The root file system is read-only even to root; the volume is writable.
    assert_eq!(podman(&["inspect", "--format", "{{.HostConfig.ReadonlyRootfs}}", &first]), "true");
    let (wrote, error) = podman_status(&["exec", "--user", "0", &first, "bash", "-c", ": > /usr/local/bin/probe"]);
    assert!(!wrote && error.contains("Read-only file system"), "root wrote to the root file system: {error}");
    podman(&["exec", &first, "bash", "-c", ": > /data/probe"]);
    // The image's health check asks /ready.
    podman(&["healthcheck", "run", &first]);

    // A deploy, a consumer key, a call over A2T and one over MCP.
    let echo = node.deploy(&operator, std::fs::read(plugins_dir().join("echo.wasm")).unwrap()).await;
    assert_eq!(echo["version"], 1, "{echo}");
    let id = echo["toolId"].as_str().unwrap().to_string();
    let (status, key) =
        node.post_json(&operator, "/admin/keys", &json!({ "tenant": "default", "role": "consumer" })).await;
    assert_eq!(status, 201, "{key}");
    let consumer = key["key"].as_str().unwrap().to_string();
    assert_eq!(node.a2t_echo(&consumer, &id, None, "before").await, "before");
    assert_eq!(node.mcp_echo(&consumer, "before").await["structuredContent"], json!({ "text": "before" }));
    let cache = |result: &'static str| {
        let (node, operator) = (&node, &operator);
        async move { node.metric(operator, "plinth_compiled_cache_lookups_total", &format!(r#"result="{result}""#)).await }
    };
    assert_eq!((cache("hit").await, cache("miss").await), (Some(0.0), Some(1.0)), "compiled at the deploy");

    // `podman stop` sends the image's STOPSIGNAL: a graceful stop exits 0
    // and logs "stopped" last (SIGKILL after the timeout would be 137).
    podman(&["stop", "-t", "60", &first]);
    assert_eq!(podman(&["inspect", "--format", "{{.State.ExitCode}}", &first]), "0");
    let log = podman_logs(&first);
    assert!(log.trim_end().ends_with("stopped"), "the last line is not \"stopped\":\n{log}");

    // A new container on the same volume: the version, both keys and the
    // compiled code are there; so is the usage the graceful stop wrote.
    let second = made.container("second");
    run(&second);
    node.wait_ready(&second).await;
    let log = podman_logs(&second);
    assert!(!log.contains("operator key"), "a second operator key was made:\n{log}");
    let (status, usage) = node.get(&operator, "/admin/usage?window=hour").await;
    assert_eq!(status, 200, "{usage}");
    assert_eq!(echo_usage(&usage, "a2t").map(|u| &u["outcomes"]), Some(&json!({ "ok": 1 })), "{usage}");
    assert_eq!(echo_usage(&usage, "mcp").map(|u| &u["outcomes"]), Some(&json!({ "ok": 1 })), "{usage}");
    let (status, versions) = node.get(&consumer, &format!("/tools/{id}/versions")).await;
    assert_eq!(status, 200, "{versions}");
    let numbers: Vec<&Value> = versions["items"].as_array().unwrap().iter().map(|v| &v["version"]).collect();
    assert_eq!(numbers, [&json!(1)], "{versions}");
    assert_eq!(node.a2t_echo(&consumer, &id, Some(1), "after").await, "after");
    assert_eq!(node.mcp_echo(&consumer, "after").await["structuredContent"], json!({ "text": "after" }));
    assert_eq!((cache("hit").await, cache("miss").await), (Some(1.0), Some(0.0)), "loaded from the compiled cache");
}

/// deploy/compose.yaml brought up with podman-compose: PostgreSQL, two
/// replicas, the load balancer, each from an image made here. A version
/// deployed on one replica is served by the other and by the balancer.
#[tokio::test(flavor = "multi_thread")]
async fn the_compose_fleet_serves_a_deploy_on_one_replica_from_the_other() {
    let plinth_image = image("PLINTH_TEST_IMAGE", "localhost/plinth:test");
    let postgres_image = image("PLINTH_TEST_POSTGRES_IMAGE", "localhost/plinth-postgres:test");
    let nginx_image = image("PLINTH_TEST_NGINX_IMAGE", "localhost/plinth-nginx:test");
    let mut made = Made::new("fleet");
    let project = made.prefix.clone();
    made.project = Some(project.clone());
    let (lb, first, second) = (free_port(), free_port(), free_port());
    let operator = "fleet-operator-key-for-the-e2e-test";

    // The committed files, copied: podman-compose would let a deploy/.env
    // of the developer's override the settings below. The test reaches each
    // replica: an override publishes their ports on 127.0.0.1
    // (deploy/compose.yaml publishes only the balancer's).
    let dir = tempfile::tempdir().unwrap();
    for file in ["compose.yaml", "fleet.env", "nginx.conf"] {
        std::fs::copy(repo().join("deploy").join(file), dir.path().join(file)).unwrap();
    }
    let compose = dir.path().join("compose.yaml");
    let overrides = dir.path().join("replica-ports.yaml");
    std::fs::write(
        &overrides,
        format!(
            "services:\n  plinth-1:\n    ports: [\"127.0.0.1:{first}:8080\"]\n  plinth-2:\n    ports: [\"127.0.0.1:{second}:8080\"]\n"
        ),
    )
    .unwrap();
    let compose_command = |args: &[&str]| {
        let mut command = container_command("podman-compose");
        command
            .args(["-p", &project, "-f"])
            .arg(&compose)
            .arg("-f")
            .arg(&overrides)
            .args(args)
            .env("PLINTH_IMAGE", &plinth_image)
            .env("POSTGRES_IMAGE", &postgres_image)
            .env("NGINX_IMAGE", &nginx_image)
            .env("POSTGRES_PASSWORD", "fleet-e2e-database-password")
            .env("PLINTH_SECRETS_KEY", "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=")
            .env("PLINTH_OPERATOR_KEY", operator)
            .env("PLINTH_PUBLIC_URL", format!("http://127.0.0.1:{lb}"))
            .env("PLINTH_PUBLISH", format!("127.0.0.1:{lb}"));
        command
    };
    let up = output(compose_command(&["up", "-d"]).current_dir(dir.path()));
    let up_log = format!("{}{}", String::from_utf8_lossy(&up.stdout), String::from_utf8_lossy(&up.stderr));
    assert!(up.status.success(), "podman-compose up failed:\n{up_log}");
    let replica = |n: u32| format!("{project}_plinth-{n}_1");
    for name in [replica(1), replica(2), format!("{project}_postgres_1"), format!("{project}_lb_1")] {
        let (exists, _) = podman_status(&["container", "exists", &name]);
        assert!(exists, "podman-compose made no {name}:\n{up_log}");
    }

    let (one, two, balancer) = (Node::new(first), Node::new(second), Node::new(lb));
    one.wait_ready(&replica(1)).await;
    two.wait_ready(&replica(2)).await;
    balancer.wait_ready(&format!("{project}_lb_1")).await;

    // Every replica deployed the image's example tools at start: echo is
    // version 1, whichever replica stored it. Version 2 goes to replica 1.
    let deployed = one.deploy(operator, fixture("echo_v2.wasm")).await;
    assert_eq!(deployed["version"], 2, "{deployed}");
    let id = deployed["toolId"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) = two
            .post_json(
                operator,
                &format!("/tools/{id}/versions/2:invoke"),
                &invocation("echo", &[("text", json!("hi"))]),
            )
            .await;
        if status == 200 {
            assert_eq!(outputs(&body)["text"], "hi", "{body}");
            assert_eq!(outputs(&body)["length"], 2, "version 2 answers with the length: {body}");
            break;
        }
        assert!(Instant::now() < deadline, "replica 2 never served version 2: {status} {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Through the balancer, either replica answers with the current version;
    // MCP too (the public URL is the balancer's).
    for _ in 0..4 {
        assert_eq!(balancer.a2t_echo(operator, &id, Some(2), "lb").await, "lb");
        let result = balancer.mcp_echo(operator, "lb").await;
        assert_eq!(result["structuredContent"]["text"], "lb", "{result}");
    }

    let down = output(compose_command(&["down"]).current_dir(dir.path()));
    assert!(down.status.success(), "podman-compose down failed:\n{}", String::from_utf8_lossy(&down.stderr));
}
