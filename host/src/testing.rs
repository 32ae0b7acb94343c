//! Helpers for tests and the benchmark: [`relabeled`] components, and a
//! real PostgreSQL: the machine's own server
//! binaries (Debian's `postgresql`, `make postgres`), a throwaway cluster in
//! a temporary directory, on a free port of 127.0.0.1.
//!
//! Not part of the server: the store tests, the fleet's end-to-end tests and
//! `plinth-bench` share it. The server process never outlives the test
//! process that started it: it runs under a small shell that holds a pipe
//! from us, and stops it (and removes its directory) when the pipe closes —
//! when we stop it, or when the test process exits, however it exits.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// A component with a custom section `build-label` holding `label` added
/// at its end: the same tool, other bytes (and so another sha256), as a
/// rebuild with other notes would be.
pub fn relabeled(component: &[u8], label: &str) -> Vec<u8> {
    const NAME: &[u8] = b"build-label";
    let mut section = vec![NAME.len() as u8];
    section.extend_from_slice(NAME);
    section.extend_from_slice(label.as_bytes());
    let mut bytes = component.to_vec();
    bytes.push(0);
    // The section's size, LEB128.
    let mut size = section.len();
    loop {
        let byte = (size & 0x7f) as u8;
        size >>= 7;
        bytes.push(if size == 0 { byte } else { byte | 0x80 });
        if size == 0 {
            break;
        }
    }
    bytes.extend_from_slice(&section);
    bytes
}

/// A listener on 127.0.0.1 that takes connections and never answers: a
/// request to it (or a TLS handshake with it) hangs until its client gives
/// up. Holds the connections until the runtime ends. → its address.
pub async fn silent_listener() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port of 127.0.0.1");
    let address = listener.local_addr().expect("its address");
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    address
}

/// A PostgreSQL cluster of the test process's own.
pub struct TestPostgres {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    /// The shell running the server, and the pipe that keeps it running.
    server: Mutex<Option<(Child, ChildStdin)>>,
    databases: AtomicU32,
}

impl TestPostgres {
    /// One cluster for the whole test binary, started on first use.
    pub fn shared() -> &'static TestPostgres {
        static SHARED: OnceLock<TestPostgres> = OnceLock::new();
        SHARED.get_or_init(TestPostgres::start)
    }

    /// A cluster of the caller's own (for tests that stop and restart it).
    /// Panics with what to do when PostgreSQL is not installed.
    pub fn start() -> TestPostgres {
        let bin = server_binaries();
        remove_abandoned_clusters();
        static CLUSTERS: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "plinth-pg-{}-{}",
            std::process::id(),
            CLUSTERS.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("creating the cluster's directory");
        if is_root() {
            // initdb refuses to run as root.
            run(Command::new("chown").arg("postgres").arg(&dir));
        }
        let initdb = bin.join("initdb");
        let data = dir.join("data");
        run(as_postgres(&initdb).arg("-D").arg(&data).args(["-A", "trust", "-U", "plinth", "--no-sync"]));
        let port = free_port();
        let cluster = TestPostgres { bin, dir, port, server: Mutex::new(None), databases: AtomicU32::new(0) };
        cluster.start_again();
        cluster
    }

    /// Starts the server again after [`TestPostgres::stop`], on the same
    /// port and data.
    pub fn start_again(&self) {
        let mut server = self.server.lock().unwrap_or_else(|p| p.into_inner());
        assert!(server.is_none(), "the test PostgreSQL is already running");
        let postgres = self.bin.join("postgres");
        // The shell stops the server when its stdin closes, then waits for it.
        let script = format!(
            "{postgres} -D {data} -k {dir} -p {port} -c listen_addresses=127.0.0.1 -c fsync=off \
             -c synchronous_commit=off -c full_page_writes=off -c max_connections=300 >>{dir}/log 2>&1 & \
             pid=$!; read _; kill -INT $pid; wait $pid",
            postgres = postgres.display(),
            data = self.dir.join("data").display(),
            dir = self.dir.display(),
            port = self.port,
        );
        let mut child = as_postgres(Path::new("sh"))
            .arg("-c")
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("starting the test PostgreSQL");
        let stdin = child.stdin.take().expect("the server's pipe");
        *server = Some((child, stdin));
        drop(server);
        self.wait_until_ready();
    }

    /// Stops the server (a fast shutdown), keeping its data.
    pub fn stop(&self) {
        let Some((mut child, stdin)) = self.server.lock().unwrap_or_else(|p| p.into_inner()).take() else { return };
        drop(stdin);
        let _ = child.wait();
    }

    /// The URL of `database` on this cluster.
    pub fn url_of(&self, database: &str) -> String {
        format!("postgres://plinth@127.0.0.1:{}/{database}", self.port)
    }

    /// A new, empty database; its URL.
    pub fn fresh_database(&self) -> String {
        let name = format!("t_{}", self.databases.fetch_add(1, Ordering::Relaxed));
        self.psql(&format!("CREATE DATABASE {name}")).expect("creating a test database");
        self.url_of(&name)
    }

    /// Runs `sql` in a session of its own against `database_url` (one of
    /// this cluster's), in the background: what another client holding a
    /// lock looks like. Kill the child to end the session.
    pub fn psql_in_background(&self, database_url: &str, sql: &str) -> Child {
        Command::new(self.bin.join("psql"))
            .args(["-d", database_url, "-XAtc", sql])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("psql runs")
    }

    /// Runs one SQL statement against the `postgres` database.
    pub fn psql(&self, sql: &str) -> Result<String, String> {
        let out = Command::new(self.bin.join("psql"))
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", "plinth", "-d", "postgres", "-XAtc", sql])
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    fn wait_until_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match self.psql("SELECT 1") {
                Ok(_) => return,
                Err(e) if Instant::now() > deadline => {
                    // The log's end says why; the whole log holds every
                    // earlier start too.
                    let log = std::fs::read_to_string(self.dir.join("log")).unwrap_or_default();
                    let lines: Vec<&str> = log.lines().collect();
                    let end = lines[lines.len().saturating_sub(20)..].join("\n");
                    panic!("the test PostgreSQL did not start: {e}\nthe end of its log:\n{end}")
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }
}

impl Drop for TestPostgres {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The newest installed PostgreSQL's server binaries (or
/// `PLINTH_TEST_PG_BIN`).
fn server_binaries() -> PathBuf {
    if let Some(dir) = std::env::var_os("PLINTH_TEST_PG_BIN") {
        return PathBuf::from(dir);
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
        .filter(|(_, bin): &(u32, PathBuf)| bin.join("initdb").exists() && bin.join("postgres").exists())
        .collect();
    found.sort();
    match found.pop() {
        Some((_, bin)) => bin,
        None => panic!(
            "the PostgreSQL tests need a PostgreSQL server: run `make postgres` (installs Debian's postgresql), or set PLINTH_TEST_PG_BIN to a folder with initdb and postgres"
        ),
    }
}

/// Removes the directories of clusters whose test process is gone (the
/// shared cluster of a test binary is never dropped).
fn remove_abandoned_clusters() {
    for entry in std::fs::read_dir(std::env::temp_dir()).into_iter().flatten().flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix("plinth-pg-")).and_then(|n| n.split('-').next())
        else {
            continue;
        };
        if !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.trim_ascii() == b"0")
}

/// `program`, run as the `postgres` user when we are root.
fn as_postgres(program: &Path) -> Command {
    if is_root() {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

fn run(command: &mut Command) {
    let out = command.output().unwrap_or_else(|e| panic!("running {command:?}: {e}"));
    if !out.status.success() {
        let _ = std::io::stderr().write_all(&out.stderr);
        panic!("{command:?} failed");
    }
}

/// A free port of 127.0.0.1 below the range the kernel picks the local
/// ports of outgoing connections from. The cluster keeps its port across a
/// restart, and while it is down, any client's connection (a replica
/// retrying, even connecting to itself) could take a port of that range,
/// and the restarted server could not listen on it.
fn free_port() -> u16 {
    let ephemeral_from = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let below = 1024..ephemeral_from.max(2048);
    for _ in 0..1000 {
        let mut random = [0u8; 2];
        getrandom::fill(&mut random).expect("random bytes");
        let port = below.start + u16::from_le_bytes(random) % (below.end - below.start);
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port of 127.0.0.1 below {ephemeral_from}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_makes_databases_and_restarts() {
        let pg = TestPostgres::start();
        let first = pg.fresh_database();
        let second = pg.fresh_database();
        assert_ne!(first, second);
        assert_eq!(pg.psql("SELECT count(*) FROM pg_database WHERE datname LIKE 't\\_%'").unwrap(), "2");
        pg.stop();
        assert!(pg.psql("SELECT 1").is_err(), "a stopped server answers nothing");
        // No outgoing connection can have taken its port meanwhile.
        let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap();
        let ephemeral_from: u16 = ephemeral.split_whitespace().next().unwrap().parse().unwrap();
        assert!(pg.port < ephemeral_from, "port {} is in the kernel's range for outgoing connections", pg.port);
        pg.start_again();
        assert_eq!(pg.psql("SELECT 1").unwrap(), "1");
    }
}
