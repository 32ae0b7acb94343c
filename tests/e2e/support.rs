//! Starting the real server and talking HTTP to it.

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The `plinth` binary cargo built for these tests.
pub fn plinth_bin() -> &'static str {
    env!("CARGO_BIN_EXE_plinth")
}

/// The packed example tools (`make plugins` writes them).
pub fn plugins_dir() -> PathBuf {
    let dir = std::env::var_os("PLINTH_TEST_PLUGINS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugins"));
    assert!(
        dir.join("echo.wasm").exists(),
        "the packed example tools are missing from {}: run `make plugins` (or `make test`) first",
        dir.display()
    );
    dir
}

/// The packed test fixtures (`make fixtures` writes them).
pub fn fixture(name: &str) -> Vec<u8> {
    let dir = std::env::var_os("PLINTH_TEST_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/fixtures"));
    std::fs::read(dir.join(name))
        .unwrap_or_else(|e| panic!("fixture {name} is missing from {} ({e}): run `make test`", dir.display()))
}

/// Reads an unsigned LEB128 at `at`, moving past it.
fn leb128(bytes: &[u8], at: &mut usize) -> usize {
    let (mut value, mut shift) = (0, 0);
    loop {
        let byte = bytes[*at];
        *at += 1;
        value |= usize::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return value;
        }
        shift += 7;
    }
}

/// A packed tool with its embedded manifest (the `plinth-manifest` custom
/// section) changed by `edit`.
pub fn with_manifest(packed: &[u8], edit: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut out = packed[..8].to_vec();
    let mut manifest = None;
    let mut at = 8;
    while at < packed.len() {
        let start = at;
        let id = packed[at];
        at += 1;
        let size = leb128(packed, &mut at);
        let end = at + size;
        let name_len = leb128(packed, &mut at);
        if id == 0 && &packed[at..at + name_len] == plinth::manifest::SECTION_NAME.as_bytes() {
            manifest = Some(serde_json::from_slice::<Value>(&packed[at + name_len..end]).unwrap());
        } else {
            out.extend_from_slice(&packed[start..end]);
        }
        at = end;
    }
    let mut manifest = manifest.expect("a packed tool has a manifest section");
    edit(&mut manifest);
    plinth::package::append_custom_section(
        &mut out,
        plinth::manifest::SECTION_NAME,
        &serde_json::to_vec(&manifest).unwrap(),
    );
    out
}

/// A packed tool with an extra custom section: the same signature, other
/// bytes (and so another sha256).
pub fn relabeled(packed: &[u8], label: &str) -> Vec<u8> {
    plinth::testing::relabeled(packed, label)
}

/// The operator key the tests start servers with (`PLINTH_OPERATOR_KEY`);
/// every request of [`Server`]'s own client carries it unless it sets
/// another `Authorization`.
pub const TOKEN: &str = "test-operator-key";

/// A running `plinth serve`, killed on drop.
pub struct Server {
    child: Child,
    /// `http://127.0.0.1:PORT`
    pub base: String,
    /// The data dir (kept so a restart can reuse it).
    pub data: tempfile::TempDir,
    log: PathBuf,
    client: reqwest::Client,
    anonymous: reqwest::Client,
}

impl Server {
    /// Serves the example tools with a fresh data dir.
    pub fn start(extra: &[&str]) -> Server {
        let plugins = plugins_dir();
        let mut args = vec!["--plugins", plugins.to_str().unwrap()];
        args.extend_from_slice(extra);
        Server::start_in(tempfile::tempdir().unwrap(), &args)
    }

    /// Serves with the given data dir and arguments.
    pub fn start_in(data: tempfile::TempDir, args: &[&str]) -> Server {
        Server::start_with(data, args, Some(TOKEN)).0
    }

    /// Serves with the given data dir, arguments and `PLINTH_OPERATOR_KEY`
    /// (none: the server makes its own on first start). Returns the server
    /// and what it printed on stdout before it listened.
    pub fn start_with(data: tempfile::TempDir, args: &[&str], operator_key: Option<&str>) -> (Server, Vec<String>) {
        Server::start_on(data, "127.0.0.1:0", args, operator_key, &[])
    }

    /// Serves on `listen` with the given data dir, arguments, operator key
    /// and environment (a replica of a fleet: its settings from
    /// `deploy/fleet.env`, its database URL).
    pub fn start_on(
        data: tempfile::TempDir,
        listen: &str,
        args: &[&str],
        operator_key: Option<&str>,
        env: &[(String, String)],
    ) -> (Server, Vec<String>) {
        Server::try_start_on(data, listen, args, operator_key, env)
            .unwrap_or_else(|log| panic!("plinth did not start; its log:\n{log}"))
    }

    /// [`Server::start_on`], or the server's log if it did not start.
    pub fn try_start_on(
        data: tempfile::TempDir,
        listen: &str,
        args: &[&str],
        operator_key: Option<&str>,
        env: &[(String, String)],
    ) -> Result<(Server, Vec<String>), String> {
        Server::try_start_under(&[], data, listen, args, operator_key, env)
    }

    /// Serves on a free port, the binary run by `wrapper` (a command that
    /// ends by executing its arguments: `unshare …`), or the server's log
    /// if it did not start.
    pub fn try_start_wrapped(
        wrapper: &[&str],
        data: tempfile::TempDir,
        args: &[&str],
        operator_key: Option<&str>,
    ) -> Result<(Server, Vec<String>), String> {
        Server::try_start_under(wrapper, data, "127.0.0.1:0", args, operator_key, &[])
    }

    fn try_start_under(
        wrapper: &[&str],
        data: tempfile::TempDir,
        listen: &str,
        args: &[&str],
        operator_key: Option<&str>,
        env: &[(String, String)],
    ) -> Result<(Server, Vec<String>), String> {
        let log = data.path().join("server.log");
        let mut command = match wrapper.split_first() {
            Some((program, wrapper_args)) => {
                let mut command = Command::new(program);
                command.args(wrapper_args).arg(plinth_bin());
                command
            }
            None => Command::new(plinth_bin()),
        };
        command
            .args(["serve", "--listen", listen, "--data"])
            .arg(data.path())
            .args(args)
            .env("PLINTH_LOG", "info,plinth::tool=debug")
            .env_remove("PLINTH_OPERATOR_KEY");
        if let Some(key) = operator_key {
            command.env("PLINTH_OPERATOR_KEY", key);
        }
        command.envs(env.iter().map(|(k, v)| (k, v)));
        let mut child =
            command.stdout(Stdio::piped()).stderr(std::fs::File::create(&log).unwrap()).spawn().expect("plinth starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut before = Vec::new();
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                match line.strip_prefix("plinth listening on ") {
                    Some(url) => {
                        let _ = tx.send((url.to_string(), std::mem::take(&mut before)));
                    }
                    None => before.push(line),
                }
            }
        });
        let (base, printed) = match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(started) => started,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(std::fs::read_to_string(&log).unwrap_or_default());
            }
        };
        let mut operator = reqwest::header::HeaderMap::new();
        operator.insert(reqwest::header::AUTHORIZATION, format!("Bearer {TOKEN}").parse().unwrap());
        let client = reqwest::Client::builder().default_headers(operator).build().unwrap();
        Ok((Server { child, base, data, log, client, anonymous: reqwest::Client::new() }, printed))
    }

    /// Stops the server and returns its data dir for a restart.
    pub fn stop(mut self) -> tempfile::TempDir {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let data = tempfile::tempdir().unwrap();
        std::mem::replace(&mut self.data, data)
    }

    /// Stops the server as an operator does (`SIGTERM`: it finishes what it
    /// is answering, then exits) and returns its data dir for a restart.
    pub fn terminate(mut self) -> tempfile::TempDir {
        // SAFETY: `kill` on the server's own process id, which it still holds.
        assert_eq!(unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) }, 0);
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        while self.child.try_wait().unwrap().is_none() {
            assert!(std::time::Instant::now() < deadline, "plinth did not stop on SIGTERM:\n{}", self.logs());
            std::thread::sleep(Duration::from_millis(20));
        }
        let data = tempfile::tempdir().unwrap();
        std::mem::replace(&mut self.data, data)
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// How many CHEQ transactions the server keeps.
    pub fn stored_confirmations(&self) -> i64 {
        self.stored_count("SELECT count(*) FROM confirmations")
    }

    /// A `count(*)` query's answer from the server's database (SQLite in WAL
    /// mode takes a reader beside the server).
    pub fn stored_count(&self, query: &str) -> i64 {
        let path = self.data.path().join("registry.sqlite3");
        let db = rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
        db.query_row(query, [], |row| row.get(0)).unwrap()
    }

    /// Runs `sql` on the server's database beside it: a test counting what
    /// the server writes installs its own triggers so.
    pub fn execute_sql(&self, sql: &str) {
        let db = rusqlite::Connection::open(self.data.path().join("registry.sqlite3")).unwrap();
        db.busy_timeout(Duration::from_secs(30)).unwrap();
        db.execute_batch(sql).unwrap();
    }

    /// What the server logged so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `GET path` → (status, JSON body).
    pub async fn get(&self, path: &str) -> (u16, Value) {
        let response = self.client.get(format!("{}{path}", self.base)).send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// `POST path` with a raw body → the response.
    pub async fn post_raw(&self, path: &str, body: impl Into<reqwest::Body>) -> reqwest::Response {
        self.client
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap()
    }

    /// `POST path` with a JSON body → (status, JSON body).
    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let response = self.post_raw(path, body.to_string()).await;
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// `POST /admin/tools[?query]` with a component, as the operator.
    pub async fn deploy(&self, bytes: Vec<u8>, query: &str) -> (u16, Value) {
        self.post_component(TOKEN, &format!("/admin/tools{query}"), bytes).await
    }

    /// `DELETE path` as the admin.
    pub async fn delete(&self, path: &str) -> (u16, Value) {
        let response = self.client.delete(format!("{}{path}", self.base)).bearer_auth(TOKEN).send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// A request builder against this server, as the operator.
    pub fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.client.request(method, format!("{}{path}", self.base))
    }

    /// A request builder with no key, or with `key` when given.
    pub fn request_as(&self, key: Option<&str>, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let request = self.anonymous.request(method, format!("{}{path}", self.base));
        match key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    }

    /// `method path` with `key` (and a JSON body) → (status, JSON body).
    pub async fn call_as(
        &self,
        key: Option<&str>,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> (u16, Value) {
        let mut request = self.request_as(key, method, path);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// Lifts the default tenant's invocation rate, as the operator, for a
    /// test whose callers loop as fast as they can and is not about rates.
    pub async fn lift_rate(&self) {
        let lifted =
            serde_json::json!({ "quotas": { "invocationsPerSecond": 1_000_000, "invocationBurst": 1_000_000 } });
        let (status, body) =
            self.call_as(Some(TOKEN), reqwest::Method::PATCH, "/admin/tenants/default", Some(&lifted)).await;
        assert_eq!(status, 200, "{body}");
    }

    /// Creates a tenant as the operator (with quotas, a JSON object).
    pub async fn create_tenant(&self, name: &str, quotas: Value) -> Value {
        let body = serde_json::json!({ "name": name, "quotas": quotas });
        let (status, tenant) = self.call_as(Some(TOKEN), reqwest::Method::POST, "/admin/tenants", Some(&body)).await;
        assert_eq!(status, 201, "{tenant}");
        tenant
    }

    /// Makes `name` an end user of the tenant at `root` (`""` for
    /// `default`, `/t/{tenant}` for another), password `{name}-password`,
    /// as the operator.
    pub async fn add_end_user(&self, root: &str, name: &str) {
        let password = serde_json::json!({ "password": format!("{name}-password") });
        let path = format!("{root}/admin/end-users/{name}");
        let (status, body) = self.call_as(Some(TOKEN), reqwest::Method::PUT, &path, Some(&password)).await;
        assert_eq!(status, 204, "{body}");
    }

    /// Creates a key as the operator and returns (its id, the key).
    pub async fn create_key(&self, tenant: Option<&str>, role: &str) -> (String, String) {
        let body = serde_json::json!({ "tenant": tenant, "role": role });
        let (status, key) = self.call_as(Some(TOKEN), reqwest::Method::POST, "/admin/keys", Some(&body)).await;
        assert_eq!(status, 201, "{key}");
        (key["id"].as_str().unwrap().to_string(), key["key"].as_str().unwrap().to_string())
    }

    /// Deploys a component into a tenant with `key` → (status, JSON body).
    pub async fn deploy_as(&self, key: &str, tenant: &str, bytes: Vec<u8>) -> (u16, Value) {
        self.post_component(key, &format!("/t/{tenant}/admin/tools"), bytes).await
    }

    /// `POST path` with a component, as the operator.
    pub async fn post_component_as_operator(&self, path: &str, bytes: Vec<u8>) -> (u16, Value) {
        self.post_component(TOKEN, path, bytes).await
    }

    async fn post_component(&self, key: &str, path: &str, bytes: Vec<u8>) -> (u16, Value) {
        let response = self
            .request_as(Some(key), reqwest::Method::POST, path)
            .header("content-type", "application/wasm")
            .body(bytes)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// The toolId of the tool called `name`.
    pub async fn tool_id(&self, name: &str) -> String {
        let (_, body) = self.get("/tools?pageLimit=200").await;
        body["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("no tool {name} in {body}"))["toolId"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// Invokes the current version of `name` with `params` (name → value).
    pub async fn invoke(&self, name: &str, params: &[(&str, Value)]) -> (u16, Value) {
        let id = self.tool_id(name).await;
        self.post(&format!("/tools/{id}:invoke"), &invocation(name, params)).await
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The value of the hidden field `name` of a page's form (the catalog's,
/// the confirmation page's).
pub fn hidden(html: &str, name: &str) -> String {
    html.split(&format!("name=\"{name}\" value=\""))
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("no {name} on the page:\n{html}"))
        .to_string()
}

/// An A2T invocation body.
pub fn invocation(name: &str, params: &[(&str, Value)]) -> Value {
    let params: Vec<Value> = params.iter().map(|(n, v)| serde_json::json!({"name": n, "value": v})).collect();
    serde_json::json!({ "name": name, "input_parameters": params })
}

/// `{name: value}` of an invocation's outputs.
pub fn outputs(body: &Value) -> serde_json::Map<String, Value> {
    body["output_parameters"]
        .as_array()
        .unwrap_or_else(|| panic!("no output_parameters in {body}"))
        .iter()
        .map(|o| (o["name"].as_str().unwrap().to_string(), o["value"].clone()))
        .collect()
}
