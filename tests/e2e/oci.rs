//! The supply chain end to end: a real OCI registry (Debian's
//! `docker-registry`, the CNCF Distribution registry) started here,
//! artifacts pushed and pulled by an independent client (`wkg`, from
//! wasm-pkg-tools), signatures made by independent signers (`wasmsign2`,
//! and a cosign-format signer on the `sigstore` crate: `tests/oci-tools/`),
//! and the real `plinth` server and CLI. `make oci-tools` installs the tools.

use crate::support::{Server, TOKEN, fixture, plinth_bin, plugins_dir, relabeled};
use serde_json::{Value, json};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

/// The independent tools (`make oci-tools` builds them).
pub fn oci_tools() -> PathBuf {
    let dir = std::env::var_os("PLINTH_TEST_OCI_TOOLS").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/plinth/oci-tools/bin")
    });
    for tool in ["wkg", "wasmsign2", "cosign-sign"] {
        assert!(
            dir.join(tool).exists(),
            "{tool} is missing from {}: run `make oci-tools` (or `make test`) first",
            dir.display()
        );
    }
    dir
}

fn tool(name: &str) -> Command {
    let mut command = Command::new(oci_tools().join(name));
    // No Docker config or credential helper of the machine's.
    command.env("HOME", std::env::temp_dir()).env("DOCKER_CONFIG", std::env::temp_dir().join("no-docker-config"));
    command
}

/// Runs a command; its stdout, or a panic with its output.
fn run(command: &mut Command) -> String {
    let out = command.output().unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(
        out.status.success(),
        "{command:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A `docker-registry` of the test's own on a free port, stopped when
/// dropped (or when the test process ends: the shell around it stops it
/// when its stdin closes).
pub struct Registry {
    /// `127.0.0.1:PORT`.
    pub address: String,
    /// Its storage and config.
    pub dir: tempfile::TempDir,
    child: Option<(Child, ChildStdin)>,
}

/// The user and password of the registries started with authentication.
pub const USER: (&str, &str) = ("alice", "s3cret");

impl Registry {
    /// Starts a registry; with `auth`, HTTP Basic for [`USER`] (htpasswd, bcrypt).
    pub fn start(auth: bool) -> Registry {
        let bin = Path::new("/usr/bin/docker-registry");
        assert!(bin.exists(), "Debian's docker-registry is missing: run `make oci-tools` (or `make test`) first");
        let dir = tempfile::tempdir().unwrap();
        let mut config = format!(
            "version: 0.1\nlog: {{ level: info, accesslog: {{ disabled: true }} }}\n\
             storage: {{ filesystem: {{ rootdirectory: {} }}, delete: {{ enabled: true }} }}\n\
             http: {{ addr: 127.0.0.1:0, secret: plinth-test }}\n",
            dir.path().join("data").display()
        );
        if auth {
            // bcrypt of USER's password (htpasswd -Bbn), made once.
            let hash = bcrypt_line();
            std::fs::write(dir.path().join("htpasswd"), format!("{}:{hash}\n", USER.0)).unwrap();
            config.push_str(&format!(
                "auth: {{ htpasswd: {{ realm: plinth-test, path: {} }} }}\n",
                dir.path().join("htpasswd").display()
            ));
        }
        std::fs::write(dir.path().join("config.yml"), config).unwrap();
        let log = dir.path().join("log");
        let script = format!(
            "{} serve {} 2>>{} & pid=$!; read _; kill $pid; wait $pid",
            bin.display(),
            dir.path().join("config.yml").display(),
            log.display()
        );
        let mut child =
            Command::new("sh").arg("-c").arg(script).stdin(Stdio::piped()).stdout(Stdio::null()).spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let address = loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if let Some(at) = text.find("listening on ") {
                let rest = &text[at + "listening on ".len()..];
                break rest.split(|c: char| !(c.is_ascii_digit() || c == '.' || c == ':')).next().unwrap().to_string();
            }
            assert!(Instant::now() < deadline, "docker-registry did not start:\n{text}");
            std::thread::sleep(Duration::from_millis(20));
        };
        Registry { address, dir, child: Some((child, stdin)) }
    }

    /// Stops it (what a registry outage looks like).
    pub fn stop(&mut self) {
        if let Some((mut child, stdin)) = self.child.take() {
            drop(stdin);
            let _ = child.wait();
        }
    }

    /// `ADDRESS/repo:tag`.
    pub fn reference(&self, repo_and_tag: &str) -> String {
        format!("{}/{repo_and_tag}", self.address)
    }

    /// Pushes `bytes` with `wkg oci push`; the manifest digest it printed.
    pub fn wkg_push(&self, repo_and_tag: &str, bytes: &[u8], credentials: Option<(&str, &str)>) -> String {
        let file = tempfile::Builder::new().suffix(".wasm").tempfile().unwrap();
        std::fs::write(file.path(), bytes).unwrap();
        let mut command = tool("wkg");
        command.args(["oci", "push", "--insecure", &self.address, &self.reference(repo_and_tag)]).arg(file.path());
        if let Some((user, password)) = credentials {
            command.args(["-u", user, "-p", password]);
        }
        let out = run(&mut command);
        out.lines()
            .find_map(|l| l.trim().strip_prefix("digest: ").map(str::to_string))
            .unwrap_or_else(|| panic!("wkg printed no digest: {out}"))
    }

    /// Pulls `reference` with `wkg oci pull`.
    pub fn wkg_pull(&self, reference: &str) -> Vec<u8> {
        let out = tempfile::tempdir().unwrap();
        let file = out.path().join("pulled.wasm");
        run(tool("wkg").args(["oci", "pull", "--insecure", &self.address, reference, "-o"]).arg(&file));
        std::fs::read(file).unwrap()
    }

    /// The blob file the registry serves for `digest` (to tamper with).
    pub fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").unwrap();
        self.dir.path().join(format!("data/docker/registry/v2/blobs/sha256/{}/{hex}/data", &hex[..2]))
    }

    /// The registry's HTTP API, for what no tool does (copying a manifest).
    pub fn url(&self, path: &str) -> String {
        format!("http://{}/v2/{path}", self.address)
    }

    /// The bytes of the OCI manifest `repo` has under `reference` (a tag or digest).
    pub async fn manifest(&self, repo: &str, reference: &str) -> Vec<u8> {
        let response = reqwest::Client::new()
            .get(self.url(&format!("{repo}/manifests/{reference}")))
            .header("accept", "application/vnd.oci.image.manifest.v1+json")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{repo}:{reference}");
        response.bytes().await.unwrap().to_vec()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}

/// An htpasswd bcrypt hash of [`USER`]'s password (made once with
/// `htpasswd -Bbn alice s3cret`).
fn bcrypt_line() -> &'static str {
    "$2y$05$/3m7zRYs1z029WMfUyLdHOU6RDYnPiTvzlkxWd79pMpRQVGVr8nGC"
}

/// A wasmsign2 key pair in `dir`: (secret key file, public key file).
fn wasmsign2_keys(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let (sk, pk) = (dir.join(format!("{name}.sk")), dir.join(format!("{name}.pk")));
    run(tool("wasmsign2").arg("keygen").arg("-k").arg(&sk).arg("-K").arg(&pk));
    (sk, pk)
}

/// `bytes` signed with `wasmsign2 sign`.
fn wasmsign2_sign(dir: &Path, bytes: &[u8], sk: &Path) -> Vec<u8> {
    let (input, output) = (dir.join("unsigned.wasm"), dir.join("signed.wasm"));
    std::fs::write(&input, bytes).unwrap();
    run(tool("wasmsign2").arg("sign").arg("-i").arg(&input).arg("-o").arg(&output).arg("-k").arg(sk));
    std::fs::read(output).unwrap()
}

/// A cosign (ECDSA P-256) key pair made with openssl: (private, public PEM files).
pub fn cosign_keys(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let (key, public) = (dir.join(format!("{name}.key")), dir.join(format!("{name}.pub")));
    run(Command::new("openssl")
        .args(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out"])
        .arg(&key));
    run(Command::new("openssl").arg("pkey").arg("-in").arg(&key).arg("-pubout").arg("-out").arg(&public));
    (key, public)
}

/// Signs the artifact at `reference` in cosign's format (tag `sha256-….sig`).
pub fn cosign_sign(reference: &str, key: &Path, credentials: Option<(&str, &str)>) {
    let mut command = tool("cosign-sign");
    command.arg("--key").arg(key).arg("--http");
    if let Some((user, password)) = credentials {
        command.args(["--user", user, "--pass", password]);
    }
    run(command.arg(reference));
}

/// A server that may reach registries on 127.0.0.1 over http.
fn server_for(registries: &[&str], extra: &[&str]) -> Server {
    let mut args = vec!["--allow-private-cidr", "127.0.0.1/32"];
    for r in registries {
        args.extend_from_slice(&["--insecure-registry", r]);
    }
    args.extend_from_slice(extra);
    Server::start_in(tempfile::tempdir().unwrap(), &args)
}

/// `POST /admin/tools` with a reference, as `key` into `tenant` (`None`: the default tenant).
async fn deploy_reference(server: &Server, key: &str, tenant: Option<&str>, reference: &str) -> (u16, Value) {
    let path = match tenant {
        Some(t) => format!("/t/{t}/admin/tools"),
        None => "/admin/tools".to_string(),
    };
    server.call_as(Some(key), reqwest::Method::POST, &path, Some(&json!({ "reference": reference }))).await
}

/// Runs the `plinth` CLI against `server`.
fn cli(server: &Server, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    Command::new(plinth_bin())
        .args(args)
        .args(["--server", &server.base, "--key", TOKEN])
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

fn echo() -> Vec<u8> {
    std::fs::read(plugins_dir().join("echo.wasm")).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_component_wkg_pushed_deploys_by_reference_and_shows_where_it_came_from() {
    let registry = Registry::start(false);
    let digest = registry.wkg_push("acme/echo:1.0", &echo(), None);
    let reference = registry.reference("acme/echo:1.0");
    let server = server_for(&[&registry.address], &[]);

    // The CLI deploys by reference: the server pulls it.
    let out = cli(&server, &["deploy", &reference], &[]);
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{printed}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(printed.contains(&format!("from {reference} (manifest {digest})")), "{printed}");

    let id = server.tool_id("echo").await;
    let (status, version) = server.get(&format!("/tools/{id}/versions/1")).await;
    assert_eq!(status, 200);
    assert_eq!(version["provenance"], json!({ "source": { "reference": reference, "manifestDigest": digest } }));
    assert_eq!(version["contentHash"], format!("sha256:{}", plinth::digest::sha256_hex(&echo())));
    let (status, answer) = server.invoke("echo", &[("text", json!("pulled"))]).await;
    assert_eq!((status, crate::support::outputs(&answer)["text"].clone()), (200, json!("pulled")), "{answer}");

    // The same reference again over the API: the same bytes, nothing changes.
    let (status, again) = deploy_reference(&server, TOKEN, None, &reference).await;
    assert_eq!((status, again["version"].as_u64()), (200, Some(1)), "{again}");
    assert_eq!(again["provenance"]["source"]["manifestDigest"], digest);

    // MCP shows it in the tool's _meta; the audit log records it.
    let listed = crate::mcp::Mcp::modern(&server).list().await;
    let tool = listed.iter().find(|t| t["name"] == "echo").unwrap().clone();
    assert_eq!(tool["_meta"]["provenance"]["source"]["manifestDigest"], digest, "{tool}");
    let (_, audit) = server.get("/admin/audit?limit=5").await;
    let deploy = audit["items"].as_array().unwrap().iter().find(|e| e["action"] == "tool.deploy").unwrap().clone();
    assert_eq!(deploy["detail"]["provenance"]["source"]["reference"], reference, "{deploy}");
}

#[tokio::test(flavor = "multi_thread")]
async fn what_plinth_pushes_wkg_pulls_back_byte_for_byte_and_plinth_deploys_by_digest() {
    let registry = Registry::start(false);
    let reference = registry.reference("acme/echo:2.0");
    let bytes = fixture("echo_v2.wasm");
    let file = tempfile::Builder::new().suffix(".wasm").tempfile().unwrap();
    std::fs::write(file.path(), &bytes).unwrap();
    let pushed = run(Command::new(plinth_bin()).arg("push").arg(file.path()).arg(&reference).arg("--insecure"));
    let pinned = pushed.trim().to_string();
    assert!(pinned.starts_with(&format!("{reference}@sha256:")), "{pushed}");

    assert_eq!(registry.wkg_pull(&reference), bytes, "wkg reads the same bytes by tag");
    assert_eq!(registry.wkg_pull(pinned.split_once(":2.0").map(|(r, d)| format!("{r}{d}")).as_deref().unwrap()), bytes);

    let server = server_for(&[&registry.address], &[]);
    let (status, deployed) = deploy_reference(&server, TOKEN, None, &pinned).await;
    assert_eq!(status, 201, "{deployed}");
    assert_eq!(deployed["sha256"], plinth::digest::sha256_hex(&bytes));
    assert_eq!(deployed["provenance"]["source"]["reference"], pinned);

    // A reference the registry does not have, and one that is not a reference.
    let (status, missing) = deploy_reference(&server, TOKEN, None, &registry.reference("acme/nothing:1")).await;
    assert_eq!((status, missing["error"]["code"].as_str()), (404, Some("artifact_not_found")), "{missing}");
    let (status, bad) = deploy_reference(&server, TOKEN, None, "acme/echo:1.0").await;
    assert_eq!((status, bad["error"]["code"].as_str()), (400, Some("invalid_reference")), "{bad}");
    assert!(bad["error"]["message"].as_str().unwrap().contains("names no registry"), "{bad}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_trust_policy_accepts_only_what_a_trusted_key_signed_over_these_bytes() {
    let registry = Registry::start(false);
    let keys = tempfile::tempdir().unwrap();
    let (release_sk, release_pk) = wasmsign2_keys(keys.path(), "release");
    let (stranger_sk, _) = wasmsign2_keys(keys.path(), "stranger");
    let (cosign_key, cosign_pub) = cosign_keys(keys.path(), "ci");
    let (stranger_cosign, _) = cosign_keys(keys.path(), "stranger-ci");
    let server = server_for(&[&registry.address], &[]);
    server.create_tenant("acme", json!({})).await;
    let (_, publisher) = server.create_key(Some("acme"), "publisher").await;

    // The publisher sets the policy with the CLI: both kinds of key, a signature required.
    let set = Command::new(plinth_bin())
        .args([
            "trust",
            "set",
            "--require-signature",
            "--server",
            &server.base,
            "--key",
            &publisher,
            "--tenant",
            "acme",
        ])
        .arg("--trusted-key")
        .arg(format!("release={}", release_pk.display()))
        .arg("--trusted-key")
        .arg(format!("ci={}", cosign_pub.display()))
        // The CI key signs only for this registry's repositories.
        .arg("--key-scope")
        .arg(format!("ci={}/*", registry.address))
        .output()
        .unwrap();
    assert!(set.status.success(), "{}", String::from_utf8_lossy(&set.stderr));
    let (_, policy) = server.call_as(Some(&publisher), reqwest::Method::GET, "/t/acme/admin/trust-policy", None).await;
    let fingerprint = |name: &str| {
        policy["keys"].as_array().unwrap().iter().find(|k| k["name"] == name).unwrap()["fingerprint"].clone()
    };
    assert_eq!(policy["keys"][0]["kind"], "wasmsign2", "{policy}");
    assert_eq!(policy["keys"][1]["kind"], "cosign", "{policy}");
    assert_eq!(policy["keys"][1]["scopes"], json!([format!("{}/*", registry.address)]), "{policy}");
    assert!(policy["keys"][0].get("scopes").is_none_or(|s| s.as_array().is_some_and(Vec::is_empty)), "{policy}");

    let deploy = |reference: String| {
        let (server, publisher) = (&server, publisher.clone());
        async move { deploy_reference(server, &publisher, Some("acme"), &reference).await }
    };
    let refused = |answer: &Value, found: &str| {
        assert_eq!(answer["error"]["code"], "untrusted_component", "{answer}");
        let expected = answer["error"]["expectedSigners"].to_string();
        assert!(
            expected.contains("release (wasmsign2 key sha256:") && expected.contains("ci (cosign key sha256:"),
            "{answer}"
        );
        assert!(answer["error"]["found"].to_string().contains(found), "wanted `{found}` in {answer}");
    };

    // Unsigned: refused, saying what was expected and what was found.
    registry.wkg_push("acme/echo:unsigned", &echo(), None);
    let (status, answer) = deploy(registry.reference("acme/echo:unsigned")).await;
    assert_eq!(status, 422);
    refused(&answer, "no signature embedded in the component");
    refused(&answer, "no cosign signature");

    // Signed by wasmsign2 with the trusted key: accepted, the signer shown.
    let signed = wasmsign2_sign(keys.path(), &echo(), &release_sk);
    registry.wkg_push("acme/echo:signed", &signed, None);
    let (status, answer) = deploy(registry.reference("acme/echo:signed")).await;
    assert_eq!(status, 201, "{answer}");
    assert_eq!(
        answer["provenance"]["signers"],
        json!([{ "kind": "wasmsign2", "key": "release", "fingerprint": fingerprint("release") }])
    );

    // Signed by a key the policy does not know.
    let by_stranger = wasmsign2_sign(keys.path(), &relabeled(&echo(), "b"), &stranger_sk);
    registry.wkg_push("acme/echo:stranger", &by_stranger, None);
    let (status, answer) = deploy(registry.reference("acme/echo:stranger")).await;
    assert_eq!(status, 422);
    refused(&answer, "an embedded signature by a key this policy does not trust");

    // The trusted signature section moved onto other bytes.
    let section_end = 8 + {
        let mut at = 9;
        let (mut size, mut shift) = (0usize, 0);
        loop {
            let b = signed[at];
            at += 1;
            size |= usize::from(b & 0x7f) << shift;
            shift += 7;
            if b & 0x80 == 0 {
                break at - 8 + size;
            }
        }
    };
    let other = relabeled(&echo(), "other bytes");
    let grafted = [&signed[..section_end], &other[8..]].concat();
    registry.wkg_push("acme/echo:grafted", &grafted, None);
    let (status, answer) = deploy(registry.reference("acme/echo:grafted")).await;
    assert_eq!(status, 422);
    refused(&answer, "an embedded signature by release over other bytes than these");

    // Signed by cosign with the trusted key: accepted.
    let v2 = fixture("echo_v2.wasm");
    registry.wkg_push("acme/echo:cosigned", &v2, None);
    cosign_sign(&registry.reference("acme/echo:cosigned"), &cosign_key, None);
    let (status, answer) = deploy(registry.reference("acme/echo:cosigned")).await;
    assert_eq!(status, 201, "{answer}");
    assert_eq!(
        answer["provenance"]["signers"],
        json!([{ "kind": "cosign", "key": "ci", "fingerprint": fingerprint("ci") }])
    );

    // cosign-signed by a key the policy does not know.
    let v2b = relabeled(&v2, "b");
    registry.wkg_push("acme/echo:cosigned-stranger", &v2b, None);
    cosign_sign(&registry.reference("acme/echo:cosigned-stranger"), &stranger_cosign, None);
    let (status, answer) = deploy(registry.reference("acme/echo:cosigned-stranger")).await;
    assert_eq!(status, 422);
    refused(&answer, "1 cosign signature(s) by keys this policy does not trust");

    // A trusted cosign signature copied from another artifact.
    let signed_digest = answer_digest(&registry, "acme/echo", "cosigned").await;
    let copy_to = registry.wkg_push("acme/echo:copied", &relabeled(&v2, "c"), None);
    copy_manifest(
        &registry,
        "acme/echo",
        &format!("{}.sig", signed_digest.replace(':', "-")),
        &format!("{}.sig", copy_to.replace(':', "-")),
    )
    .await;
    let (status, answer) = deploy(registry.reference("acme/echo:copied")).await;
    assert_eq!(status, 422);
    refused(&answer, "a cosign signature by ci of another manifest");

    // The catalog's tool page shows the source and the signer of the version.
    let designer = crate::catalog::Designer::sign_in(&format!("{}/t/acme", server.base), &publisher).await;
    let page = crate::catalog::tool_path(&designer, "echo").await;
    let (status, html) = designer.get(&format!("{page}?version=2")).await;
    assert_eq!(status, 200, "{html}");
    let source = html.split("id=\"source\"").nth(1).unwrap().split("</dd>").next().unwrap();
    assert!(source.contains(&registry.reference("acme/echo:cosigned")), "{source}");
    let signers = html.split("id=\"signers\"").nth(1).unwrap().split("</dd>").next().unwrap();
    assert!(signers.contains("ci (cosign,") && signers.contains(fingerprint("ci").as_str().unwrap()), "{signers}");

    // Posted bytes face the same policy: embedded signatures count.
    let (status, answer) = server.deploy_as(&publisher, "acme", relabeled(&echo(), "posted")).await;
    assert_eq!(status, 422, "{answer}");
    let (status, answer) =
        server.deploy_as(&publisher, "acme", wasmsign2_sign(keys.path(), &relabeled(&v2, "p"), &release_sk)).await;
    assert_eq!(status, 201, "{answer}");
    assert_eq!(answer["provenance"]["signers"][0]["key"], "release");

    // A policy that trusts only the cosign key: `plinth trust check` lists
    // the live versions it would refuse (they keep running).
    let set = json!({ "requireSignature": true, "keys": [{ "name": "ci", "publicKey": std::fs::read_to_string(&cosign_pub).unwrap() }] });
    let (status, answer) =
        server.call_as(Some(&publisher), reqwest::Method::PUT, "/t/acme/admin/trust-policy", Some(&set)).await;
    assert_eq!(status, 200, "{answer}");
    let would: Vec<u64> =
        answer["wouldRefuse"].as_array().unwrap().iter().map(|v| v["version"].as_u64().unwrap()).collect();
    assert_eq!(would, [1, 3], "the two wasmsign2-signed versions: {answer}");
    let check = Command::new(plinth_bin())
        .args(["trust", "check", "--server", &server.base, "--key", &publisher, "--tenant", "acme"])
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&check.stdout);
    assert_eq!(check.status.code(), Some(1), "{printed}");
    assert!(
        printed.contains("would refuse: echo version 1") && printed.contains("would refuse: echo version 3"),
        "{printed}"
    );
    let (_, tools) = server.call_as(Some(&publisher), reqwest::Method::GET, "/t/acme/tools", None).await;
    let id = tools["items"][0]["toolId"].as_str().unwrap().to_string();
    let invoke = crate::support::invocation("echo", &[("text", json!("still running"))]);
    let path = format!("/t/acme/tools/{id}/versions/1:invoke");
    let (status, answer) = server.call_as(Some(&publisher), reqwest::Method::POST, &path, Some(&invoke)).await;
    assert_eq!(status, 200, "a policy change never disables a running version: {answer}");

    // The audit log has the policy changes.
    let (_, audit) = server.get("/admin/audit?tenant=acme&limit=50").await;
    let changes = audit["items"].as_array().unwrap().iter().filter(|e| e["action"] == "trust-policy.put").count();
    assert_eq!(changes, 2, "{audit}");
}

/// The digest `repo:tag` points at, read from the registry.
async fn answer_digest(registry: &Registry, repo: &str, tag: &str) -> String {
    let response = reqwest::Client::new()
        .head(registry.url(&format!("{repo}/manifests/{tag}")))
        .header("accept", "application/vnd.oci.image.manifest.v1+json")
        .send()
        .await
        .unwrap();
    response.headers()["docker-content-digest"].to_str().unwrap().to_string()
}

/// Copies the manifest tagged `from` to the tag `to` in `repo`.
async fn copy_manifest(registry: &Registry, repo: &str, from: &str, to: &str) {
    let bytes = registry.manifest(repo, from).await;
    let put = reqwest::Client::new()
        .put(registry.url(&format!("{repo}/manifests/{to}")))
        .header("content-type", "application/vnd.oci.image.manifest.v1+json")
        .body(bytes)
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 201);
}

#[tokio::test(flavor = "multi_thread")]
async fn pulls_refuse_tampered_oversized_stalled_and_redirected_artifacts() {
    let registry = Registry::start(false);
    let stall = fake_registry("127.0.0.1", Fake::Stall);
    let redirect_target = fake_registry("127.0.0.2", Fake::Stall);
    let redirect = fake_registry("127.0.0.1", Fake::RedirectTo(format!("http://127.0.0.2:{}", redirect_target.port())));
    let (stall_at, redirect_at) = (format!("127.0.0.1:{}", stall.port()), format!("127.0.0.1:{}", redirect.port()));
    let redirect_target_at = format!("127.0.0.2:{}", redirect_target.port());
    let server = server_for(
        &[&registry.address, &stall_at, &redirect_at, &redirect_target_at],
        &["--registry-timeout-secs", "3"],
    );

    // A layer changed in the registry's storage after it was pushed.
    let digest = registry.wkg_push("acme/echo:tampered", &echo(), None);
    let manifest: Value = serde_json::from_slice(&registry.manifest("acme/echo", &digest).await).unwrap();
    let layer = manifest["layers"][0]["digest"].as_str().unwrap();
    let mut bytes = std::fs::read(registry.blob_file(layer)).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(registry.blob_file(layer), bytes).unwrap();
    let (status, answer) = deploy_reference(&server, TOKEN, None, &registry.reference("acme/echo:tampered")).await;
    assert_eq!((status, answer["error"]["code"].as_str()), (422, Some("digest_mismatch")), "{answer}");

    // A manifest larger than any Wasm artifact's.
    let huge = json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": manifest["config"], "layers": manifest["layers"],
        "annotations": { "padding": "x".repeat(300 << 10) },
    });
    let put = reqwest::Client::new()
        .put(registry.url("acme/echo/manifests/huge"))
        .header("content-type", "application/vnd.oci.image.manifest.v1+json")
        .body(huge.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 201);
    let (status, answer) = deploy_reference(&server, TOKEN, None, &registry.reference("acme/echo:huge")).await;
    assert_eq!((status, answer["error"]["code"].as_str()), (413, Some("quota_exceeded")), "{answer}");
    assert!(answer["error"]["message"].as_str().unwrap().contains("manifest"), "{answer}");

    // A layer larger than the tenant may deploy: refused before it is read.
    server.create_tenant("small", json!({ "maxComponentBytes": 1000 })).await;
    registry.wkg_push("acme/echo:fine", &echo(), None);
    let (status, answer) = deploy_reference(&server, TOKEN, Some("small"), &registry.reference("acme/echo:fine")).await;
    assert_eq!((status, answer["error"]["code"].as_str()), (413, Some("quota_exceeded")), "{answer}");
    assert!(answer["error"]["message"].as_str().unwrap().contains("at most 1000"), "{answer}");

    // A registry that answers nothing: cut off at the deadline. Meanwhile
    // the tenant may not start another pull (its stalled one holds a deploy
    // slot, and must not hold them all).
    let started = Instant::now();
    let stalled = {
        let (base, reference) = (server.base.clone(), format!("{stall_at}/acme/echo:1"));
        tokio::spawn(async move {
            let response = reqwest::Client::new()
                .post(format!("{base}/admin/tools"))
                .bearer_auth(TOKEN)
                .json(&json!({ "reference": reference }))
                .send()
                .await
                .unwrap();
            (response.status().as_u16(), response.json::<Value>().await.unwrap())
        })
    };
    while stall.requests() == 0 {
        assert!(started.elapsed() < Duration::from_secs(10), "the pull never reached the stalling registry");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (status, answer) = deploy_reference(&server, TOKEN, None, &registry.reference("acme/echo:fine")).await;
    assert_eq!((status, answer["error"]["code"].as_str()), (503, Some("busy")), "{answer}");
    let (status, answer) = stalled.await.unwrap();
    assert_eq!((status, answer["error"]["code"].as_str()), (504, Some("registry_timeout")), "{answer}");
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());

    // A redirect to an address the outbound policy refuses (127.0.0.2 is
    // outside the allowed 127.0.0.1/32).
    let (status, answer) = deploy_reference(&server, TOKEN, None, &format!("{redirect_at}/acme/echo:1")).await;
    assert_eq!((status, answer["error"]["code"].as_str()), (403, Some("registry_not_allowed")), "{answer}");
    assert_eq!(redirect_target.requests(), 0, "the refused address was never contacted");

    // A registry the operator did not list is reached over https only,
    // never plain http (this one speaks http, so the TLS handshake fails).
    let unlisted = Registry::start(false);
    let (status, answer) = deploy_reference(&server, TOKEN, None, &unlisted.reference("acme/echo:1")).await;
    assert_eq!((status, answer["error"]["code"].as_str()), (502, Some("registry_failed")), "{answer}");
    assert!(answer["error"]["message"].as_str().unwrap().contains("https://"), "{answer}");
    // An address outside what the operator allows, named in the reference.
    let (status, answer) = deploy_reference(&server, TOKEN, None, "127.0.0.3:5000/acme/echo:1").await;
    assert_eq!((status, answer["error"]["code"].as_str()), (403, Some("registry_not_allowed")), "{answer}");
    assert!(server.logs().contains("could not pull from its registry"), "the refusals are logged");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_moved_tag_deploys_as_a_new_version_and_never_changes_the_old_one() {
    let registry = Registry::start(false);
    let server = server_for(&[&registry.address], &[]);
    let reference = registry.reference("acme/echo:stable");
    let first = registry.wkg_push("acme/echo:stable", &echo(), None);
    let (status, v1) = deploy_reference(&server, TOKEN, None, &reference).await;
    assert_eq!(status, 201, "{v1}");
    // The vendor pushes other bytes under the same tag.
    let second = registry.wkg_push("acme/echo:stable", &fixture("echo_v2.wasm"), None);
    assert_ne!(first, second);
    let (status, v2) = deploy_reference(&server, TOKEN, None, &reference).await;
    assert_eq!((status, v2["version"].as_u64(), v2["previousVersion"].as_u64()), (201, Some(2), Some(1)), "{v2}");
    assert_eq!(v2["provenance"]["source"]["manifestDigest"], second);

    let id = server.tool_id("echo").await;
    let (_, old) = server.get(&format!("/tools/{id}/versions/1")).await;
    assert_eq!(old["provenance"]["source"]["manifestDigest"], first, "version 1 still records what it was");
    // The first digest still names version 1.
    let (status, again) =
        deploy_reference(&server, TOKEN, None, &format!("{}/acme/echo@{first}", registry.address)).await;
    assert_eq!((status, again["version"].as_u64()), (200, Some(1)), "{again}");
}

#[tokio::test(flavor = "multi_thread")]
async fn registry_credentials_belong_to_one_tenant_and_are_never_shown() {
    let registry = Registry::start(true);
    let digest = registry.wkg_push("acme/echo:1.0", &echo(), Some(USER));
    let server = server_for(&[&registry.address], &[]);
    for tenant in ["acme", "globex"] {
        server.create_tenant(tenant, json!({})).await;
    }
    let (_, acme) = server.create_key(Some("acme"), "publisher").await;
    let (_, globex) = server.create_key(Some("globex"), "publisher").await;
    let reference = registry.reference("acme/echo:1.0");

    // Without credentials: the registry refuses, and the error says what to do.
    let (status, answer) = deploy_reference(&server, &acme, Some("acme"), &reference).await;
    assert_eq!((status, answer["error"]["code"].as_str()), (422, Some("registry_denied")), "{answer}");

    // The publisher stores them with the CLI (password from the environment).
    let login = Command::new(plinth_bin())
        .args(["registry", "login", &registry.address, "--username", USER.0])
        .args(["--server", &server.base, "--key", &acme, "--tenant", "acme"])
        .env("PLINTH_REGISTRY_PASSWORD", USER.1)
        .output()
        .unwrap();
    assert!(login.status.success(), "{}", String::from_utf8_lossy(&login.stderr));
    let (status, answer) = deploy_reference(&server, &acme, Some("acme"), &reference).await;
    assert_eq!(status, 201, "{answer}");
    assert_eq!(answer["provenance"]["source"]["manifestDigest"], digest);

    // Another tenant cannot use them.
    let (status, answer) = deploy_reference(&server, &globex, Some("globex"), &reference).await;
    assert_eq!((status, answer["error"]["code"].as_str()), (422, Some("registry_denied")), "{answer}");

    // Listed by registry and user name only; not among the tenant's secrets.
    let (_, listed) = server.call_as(Some(&acme), reqwest::Method::GET, "/t/acme/admin/registries", None).await;
    assert_eq!(listed, json!({ "items": [{ "registry": registry.address, "username": USER.0 }] }));
    let (_, secrets) = server.call_as(Some(&acme), reqwest::Method::GET, "/t/acme/admin/secrets", None).await;
    assert!(!secrets.to_string().contains("registry"), "{secrets}");
    let (_, theirs) = server.call_as(Some(&globex), reqwest::Method::GET, "/t/globex/admin/registries", None).await;
    assert_eq!(theirs, json!({ "items": [] }));
    let (_, audit) = server.get("/admin/audit?limit=100").await;
    assert!(!audit.to_string().contains(USER.1), "the password is not in the audit log");
    assert!(!server.logs().contains(USER.1), "the password is not in the server's log");

    // A bad registry name is refused; credentials are deleted.
    let (status, _) = server
        .call_as(
            Some(&acme),
            reqwest::Method::PUT,
            "/t/acme/admin/registries/not a host",
            Some(&json!({"username": "u", "password": "p"})),
        )
        .await;
    assert_eq!(status, 400);
    let (status, _) = server
        .call_as(Some(&acme), reqwest::Method::DELETE, &format!("/t/acme/admin/registries/{}", registry.address), None)
        .await;
    assert_eq!(status, 204);
}

/// What a fake registry does.
enum Fake {
    /// Accepts connections and reads requests, never answers.
    Stall,
    /// Answers every request with a redirect to this origin.
    RedirectTo(String),
    /// Serves one component as `acme/echo:1` behind the registry token
    /// flow (as ghcr.io and Docker Hub do): `/token` gives a bearer token
    /// for [`USER`]'s Basic credentials; everything else needs it. With a
    /// realm, the challenge names that token endpoint instead.
    Token(Vec<u8>, Option<String>),
}

/// A fake registry on a loopback address, counting the requests it read.
struct FakeRegistry {
    port: u16,
    requests: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl FakeRegistry {
    fn port(&self) -> u16 {
        self.port
    }
    fn requests(&self) -> usize {
        self.requests.load(std::sync::atomic::Ordering::SeqCst)
    }
}

fn fake_registry(ip: &str, behaviour: Fake) -> FakeRegistry {
    use std::io::{BufRead, BufReader};
    let listener = std::net::TcpListener::bind((ip, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let requests = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = requests.clone();
    let behaviour = std::sync::Arc::new(behaviour);
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            let (counted, behaviour) = (counted.clone(), behaviour.clone());
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut first = String::new();
                if reader.read_line(&mut first).unwrap_or(0) == 0 {
                    return;
                }
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let mut line = String::new();
                let mut authorization = String::new();
                while reader.read_line(&mut line).unwrap_or(0) > 2 {
                    if let Some(value) = line.strip_prefix("authorization: ").or(line.strip_prefix("Authorization: ")) {
                        authorization = value.trim().to_string();
                    }
                    line.clear();
                }
                match &*behaviour {
                    Fake::Token(component, realm) => {
                        let path = first.split_whitespace().nth(1).unwrap_or("/").to_string();
                        let mut stream = stream;
                        let basic = format!("Basic {}", base64_of(&format!("{}:{}", USER.0, USER.1)));
                        let realm = realm.clone().unwrap_or_else(|| format!("http://127.0.0.1:{port}/token"));
                        let (status, headers, body) = token_registry(&path, &authorization, &basic, &realm, component);
                        let _ = write!(
                            stream,
                            "HTTP/1.1 {status}\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n",
                            body.len()
                        );
                        let _ = stream.write_all(&body);
                    }
                    Fake::Stall => std::thread::sleep(Duration::from_secs(30)),
                    Fake::RedirectTo(origin) => {
                        let path = first.split_whitespace().nth(1).unwrap_or("/");
                        let mut stream = stream;
                        let _ = write!(
                            stream,
                            "HTTP/1.1 307 Temporary Redirect\r\nLocation: {origin}{path}\r\nContent-Length: 0\r\n\r\n"
                        );
                    }
                }
            });
        }
    });
    FakeRegistry { port, requests }
}

fn base64_of(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}

fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", plinth::digest::sha256_hex(bytes))
}

/// One answer of [`Fake::Token`]: (status line, headers, body).
fn token_registry(
    path: &str,
    authorization: &str,
    basic: &str,
    realm: &str,
    component: &[u8],
) -> (String, String, Vec<u8>) {
    let config = br#"{"architecture":"wasm","os":"wasip2"}"#.to_vec();
    let manifest = json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": { "mediaType": "application/vnd.wasm.config.v0+json", "digest": sha256_digest(&config), "size": config.len() },
        "layers": [{ "mediaType": "application/wasm", "digest": sha256_digest(component), "size": component.len() }],
    })
    .to_string()
    .into_bytes();
    if path.starts_with("/token?") {
        return if authorization == basic && path.contains("scope=repository%3Aacme%2Fecho%3Apull") {
            ("200 OK".into(), "Content-Type: application/json\r\n".into(), br#"{"token":"fake-token"}"#.to_vec())
        } else {
            ("401 Unauthorized".into(), String::new(), Vec::new())
        };
    }
    if authorization != "Bearer fake-token" {
        let challenge = format!(
            "WWW-Authenticate: Bearer realm=\"{realm}\",service=\"fake\",scope=\"repository:acme/echo:pull\"\r\n"
        );
        return ("401 Unauthorized".into(), challenge, Vec::new());
    }
    let typed = |t: &str| format!("Content-Type: {t}\r\n");
    match path {
        "/v2/acme/echo/manifests/1" => ("200 OK".into(), typed("application/vnd.oci.image.manifest.v1+json"), manifest),
        p if p == format!("/v2/acme/echo/blobs/{}", sha256_digest(component)) => {
            ("200 OK".into(), typed("application/octet-stream"), component.to_vec())
        }
        _ => ("404 Not Found".into(), String::new(), Vec::new()),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_registry_token_flow_is_followed_with_the_tenants_credentials() {
    let fake = fake_registry("127.0.0.1", Fake::Token(echo(), None));
    let address = format!("127.0.0.1:{}", fake.port());
    let server = server_for(&[&address], &[]);
    let reference = format!("{address}/acme/echo:1");
    let (status, answer) = deploy_reference(&server, TOKEN, None, &reference).await;
    assert_eq!((status, answer["error"]["code"].as_str()), (422, Some("registry_denied")), "{answer}");
    let credentials = json!({ "username": USER.0, "password": USER.1 });
    let (status, _) = server
        .call_as(Some(TOKEN), reqwest::Method::PUT, &format!("/admin/registries/{address}"), Some(&credentials))
        .await;
    assert_eq!(status, 204);
    let (status, answer) = deploy_reference(&server, TOKEN, None, &reference).await;
    assert_eq!(status, 201, "{answer}");
    assert_eq!(answer["sha256"], plinth::digest::sha256_hex(&echo()));

    // A registry whose token realm is an address the policy refuses: the
    // credentials are never sent there.
    let realm_target = fake_registry("127.0.0.2", Fake::Stall);
    let realm = format!("http://127.0.0.2:{}/token", realm_target.port());
    let sly = fake_registry("127.0.0.1", Fake::Token(echo(), Some(realm)));
    let sly_address = format!("127.0.0.1:{}", sly.port());
    let server = server_for(&[&sly_address, &format!("127.0.0.2:{}", realm_target.port())], &[]);
    let (status, _) = server
        .call_as(Some(TOKEN), reqwest::Method::PUT, &format!("/admin/registries/{sly_address}"), Some(&credentials))
        .await;
    assert_eq!(status, 204);
    let (status, answer) = deploy_reference(&server, TOKEN, None, &format!("{sly_address}/acme/echo:1")).await;
    assert_eq!((status, answer["error"]["code"].as_str()), (403, Some("registry_not_allowed")), "{answer}");
    assert_eq!(realm_target.requests(), 0, "the refused realm was never contacted");
}

/// Pushes `bytes` to `repo_and_tag` with `plinth push`; answers the manifest digest.
fn plinth_push(registry: &Registry, repo_and_tag: &str, bytes: &[u8]) -> String {
    let file = tempfile::Builder::new().suffix(".wasm").tempfile().unwrap();
    std::fs::write(file.path(), bytes).unwrap();
    let reference = registry.reference(repo_and_tag);
    let pushed = run(Command::new(plinth_bin()).arg("push").arg(file.path()).arg(&reference).arg("--insecure"));
    pushed.trim().split_once('@').unwrap_or_else(|| panic!("no digest in {pushed}")).1.to_string()
}

/// `PUT /t/{tenant}/admin/trust-policy` as `key`.
async fn put_policy(server: &Server, key: &str, tenant: &str, policy: Value) -> (u16, Value) {
    server.call_as(Some(key), reqwest::Method::PUT, &format!("/t/{tenant}/admin/trust-policy"), Some(&policy)).await
}

/// A trusted key as the API takes it: the base64 of a raw Ed25519 key.
fn raw_key(name: &str, byte: u8, scopes: &[&str]) -> Value {
    use base64::Engine;
    let mut key = json!({ "name": name, "publicKey": base64::engine::general_purpose::STANDARD.encode([byte; 32]) });
    if !scopes.is_empty() {
        key["scopes"] = json!(scopes);
    }
    key
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stored_trust_policy_that_no_longer_validates_refuses_every_deploy() {
    let server = Server::start(&[]);
    server.create_tenant("acme", json!({})).await;
    let (_, publisher) = server.create_key(Some("acme"), "publisher").await;
    let data = server.stop();
    // As a release that reads a rule differently may have stored it: a
    // signature required, and no key to sign with.
    let db = rusqlite::Connection::open(data.path().join("registry.sqlite3")).unwrap();
    db.execute(
        "INSERT INTO tenant_settings (tenant, key, value, updated_at) VALUES ('acme', 'trust-policy', ?1, 0)",
        [r#"{"requireSignature": true, "keys": []}"#],
    )
    .unwrap();
    drop(db);
    let plugins = plugins_dir();
    let server = Server::start_in(data, &["--plugins", plugins.to_str().unwrap()]);

    let (status, answer) = server.deploy_as(&publisher, "acme", echo()).await;
    assert_eq!((status, answer["error"]["code"].as_str()), (422, Some("untrusted_component")), "{answer}");
    let found = answer["error"]["found"].to_string();
    assert!(found.contains("cannot be read") && found.contains("must trust at least one key"), "{answer}");
    let (_, policy) = server.call_as(Some(&publisher), reqwest::Method::GET, "/t/acme/admin/trust-policy", None).await;
    assert!(policy["unreadable"].as_str().unwrap().contains("must trust at least one key"), "{policy}");
    assert!(server.logs().contains("a stored trust policy cannot be read"));

    // Set again (by the publisher: no operator's policy was stored), deploys go through.
    let (status, set) = put_policy(&server, &publisher, "acme", json!({})).await;
    assert_eq!(status, 200, "{set}");
    let (status, answer) = server.deploy_as(&publisher, "acme", echo()).await;
    assert_eq!(status, 201, "{answer}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_publisher_cannot_relax_the_trust_policy_an_operator_set() {
    let server = Server::start(&[]);
    server.create_tenant("acme", json!({})).await;
    let (_, publisher) = server.create_key(Some("acme"), "publisher").await;
    let operators = json!({ "requireSignature": true, "keys": [raw_key("release", 7, &[])] });
    let (status, set) = put_policy(&server, TOKEN, "acme", operators.clone()).await;
    assert_eq!((status, &set["lockedByOperator"]), (200, &json!(true)), "{set}");

    // Lowering it, or trusting one more key, is refused, and audited.
    for looser in [
        json!({ "requireSignature": false }),
        json!({ "requireSignature": true, "keys": [raw_key("release", 7, &[]), raw_key("mine", 8, &[])] }),
    ] {
        let (status, refused) = put_policy(&server, &publisher, "acme", looser.clone()).await;
        assert_eq!(
            (status, refused["error"]["code"].as_str()),
            (403, Some("relaxes_operator_trust_policy")),
            "{looser}: {refused}"
        );
        assert!(refused["error"]["message"].as_str().unwrap().contains("ask an operator"), "{refused}");
    }
    let (status, answer) = server.deploy_as(&publisher, "acme", echo()).await;
    assert_eq!((status, answer["error"]["code"].as_str()), (422, Some("untrusted_component")), "{answer}");

    // Tightening is the publisher's to do (a scope added), and to undo.
    let narrower = json!({ "requireSignature": true, "keys": [raw_key("release", 7, &["r.example/acme/*"])] });
    let (status, set) = put_policy(&server, &publisher, "acme", narrower).await;
    assert_eq!((status, &set["lockedByOperator"]), (200, &json!(true)), "{set}");
    let (status, set) = put_policy(&server, &publisher, "acme", operators).await;
    assert_eq!(status, 200, "{set}");

    let (_, audit) = server.get("/admin/audit?tenant=acme&limit=50").await;
    let actions: Vec<(String, String)> = audit["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"].as_str().unwrap().starts_with("trust-policy."))
        .map(|e| (e["action"].as_str().unwrap().into(), e["detail"]["setBy"].as_str().unwrap_or("").into()))
        .collect();
    let expected: Vec<(String, String)> = [
        ("trust-policy.put", "publisher"),
        ("trust-policy.put", "publisher"),
        ("trust-policy.refused", ""),
        ("trust-policy.refused", ""),
        ("trust-policy.put", "operator"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(actions, expected, "{audit}");

    // The operator relaxes it: then the publisher is free again.
    let (status, set) = put_policy(&server, TOKEN, "acme", json!({ "requireSignature": false })).await;
    assert_eq!((status, &set["lockedByOperator"]), (200, &json!(false)), "{set}");
    let (status, answer) = server.deploy_as(&publisher, "acme", echo()).await;
    assert_eq!(status, 201, "{answer}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tag_beside_a_digest_is_checked_against_the_registry() {
    let registry = Registry::start(false);
    plinth_push(&registry, "acme/echo:a", &echo());
    let other = plinth_push(&registry, "acme/echo:b", &fixture("echo_v2.wasm"));
    let server = server_for(&[&registry.address], &[]);
    // Tag `a` does not point at `other`: recording `:a` would be a false provenance.
    let reference = format!("{}@{other}", registry.reference("acme/echo:a"));
    let (status, answer) = deploy_reference(&server, TOKEN, None, &reference).await;
    assert_eq!((status, answer["error"]["code"].as_str()), (422, Some("digest_mismatch")), "{answer}");
    assert!(answer["error"]["message"].as_str().unwrap().contains("names the tag `a`"), "{answer}");
    // Where it does, the tag is recorded.
    let reference = format!("{}@{other}", registry.reference("acme/echo:b"));
    let (status, answer) = deploy_reference(&server, TOKEN, None, &reference).await;
    assert_eq!(status, 201, "{answer}");
    assert_eq!(answer["provenance"]["source"]["reference"], reference);
}

#[tokio::test(flavor = "multi_thread")]
async fn evidence_a_second_deploy_of_the_same_bytes_brings_is_recorded() {
    let registry = Registry::start(false);
    let digest = plinth_push(&registry, "acme/echo:1.0", &echo());
    let server = server_for(&[&registry.address], &[]);
    server.create_tenant("acme", json!({})).await;
    let (_, publisher) = server.create_key(Some("acme"), "publisher").await;
    // Posted first: no source.
    let (status, posted) = server.deploy_as(&publisher, "acme", echo()).await;
    assert_eq!(status, 201, "{posted}");
    // The same bytes by reference: nothing changes, but where they were found is recorded.
    let reference = registry.reference("acme/echo:1.0");
    let (status, again) = deploy_reference(&server, &publisher, Some("acme"), &reference).await;
    assert_eq!((status, again["version"].as_u64()), (200, Some(1)), "{again}");
    let (_, audit) = server.get("/admin/audit?tenant=acme&limit=10").await;
    let entry = audit["items"].as_array().unwrap().iter().find(|e| e["action"] == "tool.provenance").cloned();
    let entry = entry.unwrap_or_else(|| panic!("no tool.provenance entry in {audit}"));
    assert_eq!(entry["detail"]["provenance"]["source"], json!({ "reference": reference, "manifestDigest": digest }));
    assert_eq!(entry["detail"]["version"], 1);
    // Posted again: no evidence the version lacks, no entry.
    let (status, _) = server.deploy_as(&publisher, "acme", echo()).await;
    assert_eq!(status, 200);
    let (_, audit) = server.get("/admin/audit?tenant=acme&limit=10").await;
    let count = audit["items"].as_array().unwrap().iter().filter(|e| e["action"] == "tool.provenance").count();
    assert_eq!(count, 1, "posted bytes bring no new evidence: {audit}");
}
