//! Compiled code: compiled once per component (the sha256 of its bytes),
//! kept on disk, and mapped rather than copied into the server's heap.
//!
//! - An entry is `<sha256>-<engine key>.cwasm`, exactly what wasmtime
//!   serialised, so that `Component::deserialize_file` maps it: its code is
//!   the page cache's, shared by every process and version that loads the
//!   same bytes, and reclaimable by the kernel while idle. Beside it,
//!   `<entry>.sum` holds the entry's sha256, checked (streamed through a
//!   small buffer) before every map: a corrupt or truncated entry is
//!   recompiled, never mapped. Entries are written whole and renamed into
//!   place, never rewritten, so a mapped entry never changes under its map.
//! - Compiling happens in a worker process when the runtime has one
//!   (`plinth compile-worker`): the compiler's working memory — hundreds of
//!   MiB for a Python or JavaScript tool — ends with the worker instead of
//!   staying in the server's heap, and a compiler bug a hostile component
//!   triggers ends there too. The worker is bounded: it is the kernel's
//!   first choice when memory runs out (`oom_score_adj` 1000), its data
//!   (heap and private mappings) is limited (`RLIMIT_DATA`,
//!   [`WorkerLimits::memory_bytes`]), it dies with the thread that started
//!   it, and it is killed, with anything it started, at a wall-clock
//!   deadline ([`WorkerLimits::deadline`]): a component that makes the
//!   compiler spin or swell fails its own load and nothing else.
//! - The worker's Cranelift keeps each function it compiles in
//!   `incremental/` (its incremental compilation cache), and each core
//!   module's functions together, under a key of the module (wasmtime
//!   patched: `vendor/wasmtime/PLINTH.md`, "Whole modules"): a second
//!   Python or JavaScript tool carries the same language runtime as the
//!   first, whose modules are taken from there whole, without translating
//!   a function of them.

use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use wasmtime::component::Component;
use wasmtime::{Config, Engine};

/// What a failed compile worker's error may say, at most.
const WORKER_ERROR_BYTES: usize = 4096;

/// How often, at most, a running worker is looked at (less at first: most
/// compilations take milliseconds).
const WORKER_POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// The bounds on one compile worker.
#[derive(Debug, Clone, Copy)]
pub(super) struct WorkerLimits {
    /// Wall-clock time it may take; then it is killed.
    pub(super) deadline: std::time::Duration,
    /// Its `RLIMIT_DATA` (heap and private writable mappings), if any.
    pub(super) memory_bytes: Option<u64>,
}

/// The engine settings that decide what compiled code looks like. The
/// server's engine and the compile worker's both start from these, so that
/// what the worker compiles the server can map (the engine key in an
/// entry's name, and wasmtime's own header check, catch any difference).
pub(super) fn code_config() -> Config {
    let mut wasm = Config::new();
    wasm.wasm_component_model(true).epoch_interruption(true);
    wasm
}

/// A short key for an engine's code-compatibility settings: entries made by
/// an engine with other settings (or another wasmtime) are never looked up.
pub(super) fn engine_key(engine: &Engine) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::hash::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

/// The folder of compiled entries, for one engine.
#[derive(Debug)]
pub(super) struct CodeCache {
    dir: PathBuf,
    engine_key: String,
}

impl CodeCache {
    /// The cache in `dir` (made private to the owner) for `engine`.
    pub(super) fn open(dir: &Path, engine: &Engine) -> std::io::Result<Self> {
        crate::private_files::private_dir(dir)?;
        Ok(CodeCache { dir: dir.to_path_buf(), engine_key: engine_key(engine) })
    }

    /// The entry of the component whose bytes hash to `sha256`.
    pub(super) fn entry(&self, sha256: &str) -> PathBuf {
        self.dir.join(format!("{sha256}-{}.cwasm", self.engine_key))
    }

    /// Where the worker keeps the functions it compiled.
    pub(super) fn incremental_dir(&self) -> PathBuf {
        self.dir.join("incremental")
    }

    /// Whether the entry and its checksum are there (not checked).
    pub(super) fn is_complete(&self, sha256: &str) -> bool {
        let entry = self.entry(sha256);
        entry.is_file() && sum_path(&entry).is_file()
    }

    /// Removes an entry (one the server could not load).
    pub(super) fn remove(&self, sha256: &str) {
        let entry = self.entry(sha256);
        let _ = std::fs::remove_file(sum_path(&entry));
        let _ = std::fs::remove_file(entry);
    }

    /// The component mapped from its entry, if the entry is there and
    /// sound; `None` (after a warning for an unsound one) means compile.
    pub(super) fn map(&self, engine: &Engine, sha256: &str) -> Option<Component> {
        let entry = self.entry(sha256);
        let Ok(recorded) = std::fs::read(sum_path(&entry)) else {
            // No checksum: none written yet, or an entry of the format
            // before checksums were kept beside entries.
            tracing::debug!(path = %entry.display(), "compiled cache entry without its checksum; recompiling");
            return None;
        };
        let actual = match file_sha256(&entry) {
            Ok(actual) => actual,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => {
                tracing::warn!(path = %entry.display(), error = %e, "compiled cache entry unreadable; recompiling");
                return None;
            }
        };
        if recorded != actual {
            tracing::warn!(path = %entry.display(), "compiled cache entry is corrupt; recompiling");
            return None;
        }
        // SAFETY: wasmtime requires that a mapped file come from
        // `Component::serialize` (or `precompile_component`) of a
        // compatible engine and not change while mapped. This entry was
        // written by this host or its compile worker into its own private
        // data dir, its checksum matches, its name carries this engine's
        // compatibility key (wasmtime checks its own header as well), and
        // entries are only ever replaced by a rename, never written in
        // place.
        let mapped = match unsafe { Component::deserialize_file(engine, &entry) } {
            Ok(component) => return Some(component),
            Err(e) => e,
        };
        // A data dir mounted `noexec` refuses executable maps of its files:
        // the same checked bytes, copied into memory, still run.
        // SAFETY: as above; the bytes are copied, so later changes to the
        // file cannot reach them.
        let copied = std::fs::read(&entry)
            .ok()
            .filter(|bytes| Sha256::digest(bytes).as_slice() == &actual[..])
            .and_then(|bytes| unsafe { Component::deserialize(engine, &bytes) }.ok());
        if copied.is_none() {
            tracing::warn!(path = %entry.display(), error = %format!("{mapped:#}"), "compiled cache entry is stale; recompiling");
        }
        copied
    }

    /// Stores a compilation made in this process (no worker).
    pub(super) fn put_serialized(&self, sha256: &str, code: &[u8]) -> std::io::Result<()> {
        let mut tmp = tempfile::NamedTempFile::new_in(&self.dir)?;
        tmp.write_all(code)?;
        tmp.as_file().sync_data()?;
        self.commit(sha256, tmp.into_temp_path())
    }

    /// Compiles `bytes` in the worker `worker` into this cache, within
    /// `limits`.
    pub(super) fn compile_in_worker(
        &self,
        worker: &Path,
        sha256: &str,
        bytes: &[u8],
        limits: WorkerLimits,
    ) -> Result<(), WorkerError> {
        use std::os::unix::process::CommandExt;
        let failed = |what: &str, e: &dyn std::fmt::Display| {
            tracing::error!(worker = %worker.display(), error = %e, "{what}");
            WorkerError::Failed(what.to_string())
        };
        let out = tempfile::NamedTempFile::new_in(&self.dir)
            .map_err(|e| failed("the compiled code could not be written (is the data disk full?)", &e))?;
        let out = out.into_temp_path();
        // Nothing of the server's environment (its keys among it) goes to
        // the worker: it needs none. A process group of its own, so that
        // the deadline ends whatever it started too.
        let mut command = std::process::Command::new(worker);
        command
            .arg("compile-worker")
            .arg("--out")
            .arg(&out)
            .arg("--incremental")
            .arg(self.incremental_dir())
            .env_clear()
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .process_group(0);
        let memory = limits.memory_bytes;
        // SAFETY: `bound_worker` makes only async-signal-safe calls and
        // allocates nothing, as code between fork and exec must.
        unsafe { command.pre_exec(move || bound_worker(memory)) };
        let mut child = command.spawn().map_err(|e| failed("the compile worker could not be started", &e))?;
        // Written and read from threads of their own: a worker that fails
        // early stops reading, and its error must still be read; and the
        // deadline is watched here.
        let mut stdin = child.stdin.take();
        let input = bytes.to_vec();
        let writer = std::thread::spawn(move || stdin.as_mut().map(|s| s.write_all(&input)));
        let stderr = child.stderr.take();
        let reader = std::thread::spawn(move || {
            let mut error = Vec::new();
            if let Some(stderr) = stderr {
                let _ = stderr.take(WORKER_ERROR_BYTES as u64).read_to_end(&mut error);
            }
            error
        });
        let ends = std::time::Instant::now() + limits.deadline;
        let mut pause = std::time::Duration::from_millis(1);
        let waited = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Ok(status),
                Ok(None) if std::time::Instant::now() >= ends => {
                    // Not reaped yet, so its pid (and group) is still its
                    // own: the kill reaches no one else.
                    let group = i32::try_from(child.id()).unwrap_or(i32::MAX);
                    // SAFETY: a plain system call on a process group this
                    // worker leads.
                    unsafe { libc::kill(-group, libc::SIGKILL) };
                    let _ = child.wait();
                    break Err(());
                }
                Ok(None) => {
                    std::thread::sleep(pause.min(ends.saturating_duration_since(std::time::Instant::now())));
                    pause = (pause * 2).min(WORKER_POLL);
                }
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(failed("the compile worker could not be waited for", &e));
                }
            }
        };
        let _ = writer.join();
        let error = reader.join().unwrap_or_default();
        let Ok(status) = waited else {
            let secs = limits.deadline.as_secs_f64();
            tracing::error!(worker = %worker.display(), sha256, "a compile worker was killed at its deadline ({secs} s)");
            return Err(WorkerError::Failed(format!(
                "the compile worker did not finish within its deadline ({secs} s) and was stopped"
            )));
        };
        if !status.success() {
            let said = String::from_utf8_lossy(&error);
            let said = said.trim().trim_start_matches("error: ");
            // It ended with an error it wrote: the compiler refused the
            // component. Killed (a compiler crash, or the kernel out of
            // memory), it could be either's doing.
            return Err(match status.code() {
                Some(_) if !said.is_empty() => WorkerError::Refused(said.to_string()),
                _ => failed(&format!("the compile worker ended without compiling ({status})"), &status),
            });
        }
        self.commit(sha256, out)
            .map_err(|e| failed("the compiled code could not be stored (is the data disk full?)", &e))
    }

    /// Renames a finished entry into place, then records its checksum.
    fn commit(&self, sha256: &str, written: tempfile::TempPath) -> std::io::Result<()> {
        let entry = self.entry(sha256);
        let sum = file_sha256(&written)?;
        written.persist(&entry).map_err(|e| e.error)?;
        let mut tmp = tempfile::NamedTempFile::new_in(&self.dir)?;
        tmp.write_all(&sum)?;
        tmp.persist(sum_path(&entry)).map_err(|e| e.error)?;
        Ok(())
    }
}

/// Run in the compile worker between fork and exec: makes it the
/// kernel's first choice when memory runs out (raising one's own
/// `oom_score_adj` needs no privilege), kills it when the thread that
/// started it ends (the server gone), and limits its data to `memory`
/// bytes. Only async-signal-safe calls, no allocation.
fn bound_worker(memory: Option<u64>) -> std::io::Result<()> {
    // SAFETY: open, write, close, prctl and setrlimit are async-signal-safe;
    // the path is a static C string and the buffers are static.
    unsafe {
        let fd = libc::open(c"/proc/self/oom_score_adj".as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd >= 0 {
            let _ = libc::write(fd, b"1000".as_ptr().cast(), 4);
            libc::close(fd);
        }
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
        if let Some(bytes) = memory {
            let limit = libc::rlimit { rlim_cur: bytes as libc::rlim_t, rlim_max: bytes as libc::rlim_t };
            if libc::setrlimit(libc::RLIMIT_DATA, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

/// Why the compile worker made no entry.
#[derive(Debug)]
pub(super) enum WorkerError {
    /// The compiler refused the component, saying why.
    Refused(String),
    /// The worker could not run or finish (said without the server's
    /// paths; the log has them).
    Failed(String),
}

fn sum_path(entry: &Path) -> PathBuf {
    let mut name = entry.as_os_str().to_owned();
    name.push(".sum");
    PathBuf::from(name)
}

/// The sha256 of a file, read through a small buffer.
fn file_sha256(path: &Path) -> std::io::Result<[u8; 32]> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        match file.read(&mut buffer)? {
            0 => break,
            n => hasher.update(&buffer[..n]),
        }
    }
    Ok(hasher.finalize().into())
}

/// Cranelift's incremental compilation cache in a folder: one file per
/// function (or per core module, for the patched Cranelift's whole
/// modules), named by the sha256 of its key, holding the sha256 of the
/// value then the value (a damaged file is a miss, never code).
#[derive(Debug)]
pub(super) struct IncrementalStore {
    dir: PathBuf,
}

impl IncrementalStore {
    pub(super) fn open(dir: &Path) -> std::io::Result<Self> {
        crate::private_files::private_dir(dir)?;
        Ok(IncrementalStore { dir: dir.to_path_buf() })
    }

    fn path(&self, key: &[u8]) -> PathBuf {
        let name = crate::digest::sha256_hex(key);
        self.dir.join(&name[..2]).join(name)
    }
}

impl wasmtime::CacheStore for IncrementalStore {
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        let entry = std::fs::read(self.path(key)).ok()?;
        let (sum, value) = entry.split_at_checked(32)?;
        (Sha256::digest(value).as_slice() == sum).then(|| Cow::Owned(value.to_vec()))
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> bool {
        let path = self.path(key);
        let write = || -> std::io::Result<()> {
            let dir = path.parent().unwrap_or(&self.dir);
            crate::private_files::private_dir(dir)?;
            let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
            tmp.write_all(&Sha256::digest(&value))?;
            tmp.write_all(&value)?;
            tmp.persist(&path).map_err(|e| e.error)?;
            Ok(())
        };
        write().is_ok()
    }
}

/// The compile worker (`plinth compile-worker`): compiles the component on
/// standard input into `out` with the server's code settings, keeping and
/// reusing functions in `incremental`. Exits non-zero with the error on
/// standard error.
pub fn run_worker(out: &Path, incremental: Option<&Path>) -> anyhow::Result<()> {
    let mut bytes = Vec::new();
    std::io::stdin().read_to_end(&mut bytes)?;
    let mut config = code_config();
    if let Some(dir) = incremental {
        config.enable_incremental_compilation(Arc::new(IncrementalStore::open(dir)?))?;
    }
    let engine = Engine::new(&config)?;
    let code = engine.precompile_component(&bytes).map_err(|e| anyhow::anyhow!("{e:#}"))?;
    let mut file = std::fs::OpenOptions::new().write(true).truncate(true).open(out)?;
    file.write_all(&code)?;
    file.sync_data()?;
    Ok(())
}

/// A count of permits, waited for on the (blocking) thread that asks:
/// compilations run on blocking threads.
pub(super) struct Permits {
    free: std::sync::Mutex<usize>,
    freed: std::sync::Condvar,
}

/// One permit, given back on drop.
pub(super) struct Permit<'a>(&'a Permits);

impl Permits {
    pub(super) fn new(permits: usize) -> Self {
        Permits { free: std::sync::Mutex::new(permits.max(1)), freed: std::sync::Condvar::new() }
    }

    /// A permit, once one is free; waited for at most `within` (without
    /// it, for as long as it takes: the one thread that compiles stored
    /// versions in the background, which holds up no request).
    pub(super) fn take(&self, within: Option<std::time::Duration>) -> Option<Permit<'_>> {
        let ends = within.map(|within| std::time::Instant::now() + within);
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        while *free == 0 {
            free = match ends {
                None => self.freed.wait(free).unwrap_or_else(|p| p.into_inner()),
                Some(ends) => {
                    let left = ends.saturating_duration_since(std::time::Instant::now());
                    if left.is_zero() {
                        return None;
                    }
                    self.freed.wait_timeout(free, left).unwrap_or_else(|p| p.into_inner()).0
                }
            };
        }
        *free -= 1;
        Some(Permit(self))
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        *self.0.free.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        self.0.freed.notify_one();
    }
}
