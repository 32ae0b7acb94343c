//! `plinth inspect` and `plinth pack` as a vendor uses them.

use crate::support::{plinth_bin, plugins_dir};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;

fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// `plinth pack CRATE --wasm WASM -o OUT`.
fn pack(crate_dir: &Path, wasm: &Path, out: &Path) -> std::process::Output {
    Command::new(plinth_bin()).arg("pack").arg(crate_dir).arg("--wasm").arg(wasm).arg("-o").arg(out).output().unwrap()
}

#[test]
fn inspect_prints_the_signature_the_server_serves() {
    let out = Command::new(plinth_bin())
        .arg("inspect")
        .arg(plugins_dir().join("lookup_weather_by_city.wasm"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let signature: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(signature["name"], "lookup_weather_by_city");
    assert_eq!(signature["version"], 1);
    assert!(signature.get("toolId").is_none(), "a toolId exists only once deployed");
    let inputs: Vec<&str> =
        signature["input_parameters"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(inputs, ["city", "units"]);
    assert_eq!(
        signature["input_parameters"][0]["description"],
        "The city for the weather lookup. For example, Boston or Los Angeles."
    );
}

#[test]
fn a_reader_that_stops_early_ends_the_print_quietly() {
    // `plinth openapi | head -1`: the reader closes the pipe after one line.
    use std::io::Read;
    let mut child = Command::new(plinth_bin())
        .arg("openapi")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 1];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    // The pipe's read end is closed here (dropped), before the ~100 KB are written.
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    use std::os::unix::process::ExitStatusExt;
    // 13 is SIGPIPE on Linux.
    assert_eq!(out.status.signal(), Some(13), "ended by SIGPIPE, as `cat` would be: {:?}", out.status);
}

#[test]
fn inspect_refuses_what_is_not_a_packed_tool() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.wasm");
    std::fs::write(&junk, b"hello").unwrap();
    let out = Command::new(plinth_bin()).arg("inspect").arg(&junk).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("error: not a WebAssembly component"), "{stderr}");
}

#[test]
fn pack_embeds_docs_and_manifest_into_the_built_component() {
    let built = repo().join("target/wasm32-wasip2/plugin/echo.wasm");
    assert!(built.exists(), "run `make plugins` first");
    let dir = tempfile::tempdir().unwrap();
    let packed = dir.path().join("echo.wasm");
    let out = pack(&repo().join("plugins/echo"), &built, &packed);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Deterministic: the same inputs pack to the same bytes as `make plugins`.
    assert_eq!(std::fs::read(&packed).unwrap(), std::fs::read(plugins_dir().join("echo.wasm")).unwrap());

    // Packing a packed tool again is refused.
    let again = pack(&repo().join("plugins/echo"), &packed, &dir.path().join("twice.wasm"));
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already has a `plinth-manifest` section"));
}

#[test]
fn pack_refuses_a_tool_whose_wit_breaks_the_contract() {
    // A crate folder whose WIT gives an input a type A2T does not allow.
    let dir = tempfile::tempdir().unwrap();
    let wit = dir.path().join("wit");
    std::fs::create_dir_all(wit.join("deps")).unwrap();
    std::os::unix::fs::symlink(repo().join("wit").canonicalize().unwrap(), wit.join("deps/plinth-tool")).unwrap();
    std::os::unix::fs::symlink(repo().join("wit/deps/config").canonicalize().unwrap(), wit.join("deps/config"))
        .unwrap();
    std::fs::write(
        wit.join("world.wit"),
        "package test:bad;\n/// Echo, with a list input.\nworld echo {\n use plinth:tool/types@0.1.0.{tool-error};\n\
         record input {\n /// The text.\n text: list<string>,\n }\n record output {\n /// The text.\n text: string,\n }\n\
         export call: func(input: input) -> result<output, tool-error>;\n}\n",
    )
    .unwrap();
    let out = pack(dir.path(), &repo().join("target/wasm32-wasip2/plugin/echo.wasm"), &dir.path().join("out.wasm"));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("input `text` has type `list<string>`"), "{stderr}");
    assert!(!dir.path().join("out.wasm").exists());
}

#[test]
fn pack_builds_the_crate_when_no_component_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("echo.wasm");
    let result =
        Command::new(plinth_bin()).arg("pack").arg(repo().join("plugins/echo")).arg("-o").arg(&out).output().unwrap();
    assert!(result.status.success(), "{}", String::from_utf8_lossy(&result.stderr));
    let inspected = Command::new(plinth_bin()).arg("inspect").arg(&out).output().unwrap();
    let signature: Value = serde_json::from_slice(&inspected.stdout).unwrap();
    assert_eq!(signature["name"], "echo");
}

/// One option of `plinth serve --help`: its flag, environment variable and
/// default, as clap prints them.
struct ServeOption {
    flag: String,
    env: Option<String>,
    default: Option<String>,
}

fn serve_options() -> Vec<ServeOption> {
    let out = Command::new(plinth_bin()).args(["serve", "--help"]).output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    let mut options: Vec<ServeOption> = Vec::new();
    for line in help.lines().map(str::trim) {
        if let Some(flag) = line.strip_prefix("--").and_then(|rest| rest.split([' ', '<']).next()) {
            options.push(ServeOption { flag: format!("--{flag}"), env: None, default: None });
        } else if let Some(option) = options.last_mut() {
            let value = |prefix: &str| line.strip_prefix(prefix).and_then(|rest| rest.strip_suffix(']'));
            if let Some(env) = value("[env: ") {
                option.env = Some(env.trim_end_matches('=').to_string());
            } else if let Some(default) = value("[default: ") {
                option.default = Some(default.to_string());
            }
        }
    }
    options.retain(|o| o.flag != "--help");
    options
}

/// The README's flag table is what operators read: every option of `plinth
/// serve` is in it, with its environment variable and, where clap has one,
/// its default.
#[test]
fn every_serve_flag_is_in_the_readme_with_its_variable_and_default() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let options = serve_options();
    assert!(options.len() >= 30, "the help lost its options: {}", options.len());
    for option in options {
        let row = readme
            .lines()
            .find(|line| line.starts_with(&format!("| `{}` |", option.flag)))
            .unwrap_or_else(|| panic!("{} is missing from the README's flag table", option.flag));
        let cells: Vec<&str> = row.trim_matches('|').split(" | ").map(str::trim).collect();
        let env = option.env.unwrap_or_else(|| panic!("{} has no PLINTH_* variable", option.flag));
        assert!(cells[1].contains(&format!("`{env}`")), "{}: the README names another variable: {row}", option.flag);
        if let Some(default) = option.default {
            assert!(
                cells[2].trim_matches('`') == default,
                "{}: the default is {default}, the README says {}",
                option.flag,
                cells[2]
            );
        }
    }
}

/// `plinth ARGS` against `server` as the operator → (success, stdout and
/// stderr).
fn plinth_against(server: &crate::support::Server, args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let out = Command::new(plinth_bin())
        .args(args)
        .env("PLINTH_SERVER", &server.base)
        .env("PLINTH_KEY", crate::support::TOKEN)
        .env_remove("PLINTH_TENANT")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[tokio::test(flavor = "multi_thread")]
async fn provider_and_connections_commands_set_list_and_revoke_without_a_secret_on_the_command_line() {
    use crate::authorization::{connect, setup};
    use crate::authorization_support::{CLIENT_SECRET, Person};
    let s = setup().await;
    let server = &s.server;
    let secret_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(secret_file.path(), format!("{CLIENT_SECRET}\n")).unwrap();
    let secret_path = secret_file.path().to_str().unwrap();

    // Set from a file; the secret is neither printed nor needed again.
    let (ok, out) = plinth_against(
        server,
        &[
            "provider",
            "set",
            "inbox",
            "--issuer",
            &s.provider.issuer,
            "--client-id",
            "plinth-test",
            "--client-secret-file",
            secret_path,
            "--param",
            "prompt=consent",
            "--display-name",
            "Inbox",
        ],
        &[],
    );
    assert!(ok, "{out}");
    assert!(
        out.contains("set provider inbox") && out.contains("(secret set)") && out.contains("parameter prompt=consent"),
        "{out}"
    );
    assert!(!out.contains(CLIENT_SECRET), "{out}");
    // From an environment variable, in another tenant.
    server.create_tenant("acme", json!({})).await;
    let (ok, out) = plinth_against(
        server,
        &[
            "provider",
            "set",
            "mail",
            "--tenant",
            "acme",
            "--authorization-endpoint",
            "https://mail.example/auth",
            "--token-endpoint",
            "https://mail.example/token",
            "--client-id",
            "c",
            "--client-secret-env",
            "MAIL_SECRET",
        ],
        &[("MAIL_SECRET", "from-the-environment")],
    );
    assert!(ok, "{out}");
    let (ok, out) = plinth_against(server, &["provider", "list", "--tenant", "acme"], &[]);
    assert!(ok && out.contains("mail") && out.contains("(secret set)") && !out.contains("inbox"), "{out}");
    assert!(!out.contains("from-the-environment"), "{out}");
    // A secret is never an argument's value; a missing variable, an empty
    // file or a bad --param are refused before anything is sent.
    let (ok, out) = plinth_against(server, &["provider", "set", "x", "--client-id", "c", "--client-secret", "s"], &[]);
    assert!(!ok && out.contains("--client-secret"), "{out}");
    let (ok, out) = plinth_against(
        server,
        &[
            "provider",
            "set",
            "x",
            "--issuer",
            "https://x.example",
            "--client-id",
            "c",
            "--client-secret-env",
            "PLINTH_NO_SUCH_VAR",
        ],
        &[],
    );
    assert!(!ok && out.contains("PLINTH_NO_SUCH_VAR"), "{out}");
    let (ok, out) = plinth_against(
        server,
        &["provider", "set", "x", "--issuer", "https://x.example", "--client-id", "c", "--param", "novalue"],
        &[],
    );
    assert!(!ok && out.contains("NAME=VALUE"), "{out}");
    // The server's refusals, named.
    let (ok, out) =
        plinth_against(server, &["provider", "set", "x", "--issuer", "ftp://x.example", "--client-id", "c"], &[]);
    assert!(!ok && out.contains("400") && out.contains("`issuer`"), "{out}");
    let (ok, out) = plinth_against(server, &["provider", "list"], &[]);
    assert!(ok && out.contains("inbox  Inbox  client plinth-test (secret set)") && !out.contains("  x "), "{out}");

    // A person's accounts: listed, then revoked.
    s.provider.sign_in_as("alice@inbox");
    let (url, _) = s.challenge("alice").await;
    let alice = Person::new();
    alice.log_in_at(&url, "alice").await;
    assert_eq!(connect(&alice, &url).await.status, 200);
    let (ok, out) = plinth_against(server, &["connections", "list", "--end-user", "alice"], &[]);
    assert!(ok && out.contains("inbox  (Inbox)  scopes inbox.read") && out.contains("refreshable"), "{out}");
    assert!(!out.contains("at-alice"), "{out}");
    let (ok, out) =
        plinth_against(server, &["connections", "revoke", "--end-user", "alice", "--provider", "inbox"], &[]);
    assert!(ok && out.contains("revoked alice's inbox account"), "{out}");
    let (ok, out) =
        plinth_against(server, &["connections", "revoke", "--end-user", "alice", "--provider", "inbox"], &[]);
    assert!(!ok && out.contains("404"), "{out}");
    let (ok, out) = plinth_against(server, &["connections", "list", "--end-user", "alice"], &[]);
    assert!(ok && out.contains("alice has connected no account"), "{out}");
    // A name that needs encoding reaches the server whole.
    let (ok, out) = plinth_against(server, &["connections", "list", "--end-user", "a b/c"], &[]);
    assert!(ok && out.contains("a b/c has connected no account"), "{out}");

    let (ok, out) = plinth_against(server, &["provider", "delete", "inbox"], &[]);
    assert!(ok && out.contains("deleted provider inbox"), "{out}");
    let (ok, out) = plinth_against(server, &["provider", "delete", "inbox"], &[]);
    assert!(!ok && out.contains("404"), "{out}");
}
