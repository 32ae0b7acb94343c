//! Unit tests of the sandbox: limits, redaction, deadlines and where a
//! call was when they passed, the compiled-code cache, the pool's slots.

use super::*;
use sha2::{Digest, Sha256};
use wasmtime::Config;

fn runtime(cache: &std::path::Path) -> Runtime {
    Runtime::new(RuntimeConfig { cache_dir: Some(cache.to_path_buf()), pooling: false, ..Default::default() }).unwrap()
}

#[test]
fn the_memory_limit_is_the_sum_over_every_memory() {
    const MIB: usize = 1 << 20;
    let mut limiter = MemoryLimiter::new(32 * MIB, 10);
    // Two memories created, then each grown to just under the limit.
    assert!(limiter.memory_growing(0, MIB, None).unwrap());
    assert!(limiter.memory_growing(0, MIB, None).unwrap());
    assert!(limiter.memory_growing(MIB, 20 * MIB, None).unwrap());
    assert!(!limiter.refused);
    assert!(!limiter.memory_growing(MIB, 20 * MIB, None).unwrap(), "21 + 20 MiB is over 32");
    assert!(limiter.refused);
    // What is left can still be used.
    assert!(limiter.memory_growing(MIB, 12 * MIB, None).unwrap());
    assert_eq!(limiter.memory_bytes, 32 * MIB);
    assert!(!limiter.memory_growing(20 * MIB, 20 * MIB + 65536, None).unwrap());
    // Tables likewise.
    assert!(limiter.table_growing(0, 6, None).unwrap());
    assert!(!limiter.table_growing(0, 6, None).unwrap());
    assert!(limiter.table_growing(0, 4, None).unwrap());
}

#[test]
fn a_cut_never_leaves_part_of_a_secret() {
    let redactor = Redactor::new(["sk-secret".to_string(), "abc".to_string()]);
    assert_eq!(redactor.longest(), 9);
    let text = "0123sk-secret tail";
    // Cutting at 8 would keep "sk-s": the cut moves to the secret's start.
    assert_eq!(redactor.cut(text, 8), 4);
    assert_eq!(redactor.cut(text, 13), 13, "the whole secret fits");
    assert_eq!(redactor.cut(text, 100), text.len());
    assert_eq!(redactor.text(&text[..redactor.cut(text, 13)]), "0123[redacted]");
    // Character boundaries: never inside "é".
    let accented = "aé";
    assert_eq!(Redactor::default().cut(accented, 2), 1);
    // A secret that starts inside another one's span.
    let nested = Redactor::new(["xxab".to_string(), "abyy".to_string()]);
    assert_eq!(nested.cut("..xxabyy..", 6), 2);
}

/// The tool name of a call whose thread loses the CPU for longer than
/// its deadline right after it yields at a tick (before the deadline's
/// timer is looked at), as a tool thread at nice 19 can on a busy
/// machine: at the first tick 5 ms into the call, when the timer has
/// been set.
const STALLS_AFTER_A_TICK: &str = "stalls-after-a-tick";

pub(super) fn stall_if_asked(state: &ToolState, started: std::time::Instant) {
    if state.log.labels.tool == STALLS_AFTER_A_TICK && started.elapsed() >= Duration::from_millis(5) {
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A tool that loops forever, yielding at every tick.
const SPINNER: &str = r#"(component
      (core module $M (func (export "run") (param i64) (result i64) (loop $l (br $l)) unreachable))
      (core instance $m (instantiate $M))
      (func (export "call") (param "op" u64) (result u64) (canon lift (core func $m "run"))))"#;

/// A tick lands anywhere in a call: one in its first moments does not
/// send the rest of a cheap call off the thread that received it.
#[test]
fn a_tick_early_in_a_call_lets_it_run_on_and_later_ones_make_it_yield() {
    let started = std::time::Instant::now();
    let ends = started + Duration::from_secs(5);
    assert_eq!(at_tick(started + Duration::from_micros(40), started, ends), AtTick::GoOn);
    assert_eq!(at_tick(started + FIRST_YIELD_AFTER, started, ends), AtTick::Yield);
    assert_eq!(at_tick(started + Duration::from_millis(3), started, ends), AtTick::Yield);
    assert_eq!(at_tick(ends, started, ends), AtTick::Interrupt);
    // A deadline shorter than the grace still stops the call.
    assert_eq!(at_tick(started + Duration::from_micros(100), started, started), AtTick::Interrupt);
}

/// Its deadline's timer fires while the spinner is suspended at a tick,
/// not in a host call: it was computing (`422`, the same input would
/// time out again), not waiting on a backend (`504`, retry). Before,
/// whichever timer noticed the deadline first decided.
#[test]
fn a_deadline_passing_while_a_computing_tool_waits_for_its_thread_is_a_computing_timeout() {
    let executor = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path());
    let bytes = wat::parse_str(SPINNER).unwrap();
    let spinner = rt.load(&bytes, &crate::digest::sha256_hex(&bytes)).unwrap();
    for (tool, stalls) in [("spinner", false), (STALLS_AFTER_A_TICK, true)] {
        let setup = CallSetup { deadline: Duration::from_millis(50), ..CallSetup::bare(tool) };
        let outcome = executor.block_on(rt.call(&spinner, Val::U64(0), setup));
        assert!(
            matches!(outcome, Err(CallError::Timeout { computing: true, .. })),
            "stalled after a tick: {stalls}; {outcome:?}"
        );
    }
}

/// What a call does in each of its polls: runs for a while, then ends
/// its poll at a tick's yield or in a wait (or answers).
#[derive(Clone, Copy)]
enum Step {
    Tick {
        runs: Duration,
    },
    /// Yields at a tick, and is not polled again until its deadline has
    /// passed (a tool thread starved of CPU).
    StarvedAtTick,
    Wait {
        runs: Duration,
    },
    Answer,
}

/// A call played by `steps`, one a poll, as wasmtime's fiber would:
/// the epoch callback's flag set at a yield, and the task woken for it.
async fn play(steps: &[Step], deadline: Duration, yielded_at_tick: &AtomicBool) -> Result<(), DeadlinePassed> {
    let ends = std::time::Instant::now() + deadline;
    let mut next = steps.iter();
    let call = std::future::poll_fn(|cx| match next.next().copied().unwrap_or(Step::Wait { runs: Duration::ZERO }) {
        Step::Tick { runs } => {
            std::thread::sleep(runs);
            yielded_at_tick.store(true, Ordering::Relaxed);
            cx.waker().wake_by_ref();
            Poll::Pending
        }
        Step::StarvedAtTick => {
            yielded_at_tick.store(true, Ordering::Relaxed);
            Poll::Pending
        }
        Step::Wait { runs } => {
            std::thread::sleep(runs);
            Poll::Pending
        }
        Step::Answer => Poll::Ready(()),
    });
    within(ends, yielded_at_tick, call).await
}

/// A deadline is reported by where the call was when it passed, not by
/// where the call's last poll stopped: a call resumed after its deadline
/// may have gone on to another place.
#[tokio::test]
async fn a_call_past_its_deadline_is_classed_by_where_it_was_when_it_passed() {
    const ZERO: Duration = Duration::ZERO;
    let d = Duration::from_millis(30);
    let past = d + Duration::from_millis(20);
    let flag = AtomicBool::new(false);
    let cases = [
        ("waiting on the host", vec![Step::Wait { runs: ZERO }], false),
        ("yielding at ticks", vec![Step::Tick { runs: Duration::from_millis(2) }; 40], true),
        // It computed past its deadline, then waited before any tick.
        ("running, then waiting", vec![Step::Wait { runs: past }], true),
        (
            "at a tick, resumed past its deadline into a wait",
            vec![Step::StarvedAtTick, Step::Wait { runs: ZERO }],
            true,
        ),
        (
            "waiting, resumed past its deadline into a tick",
            vec![Step::Wait { runs: ZERO }, Step::Tick { runs: ZERO }],
            false,
        ),
    ];
    for (case, steps, computing) in cases {
        let outcome = play(&steps, d, &flag).await;
        assert!(matches!(outcome, Err(DeadlinePassed { computing: c }) if c == computing), "{case}");
    }
    // A wait that ends before the deadline: the call answers.
    assert!(play(&[Step::Tick { runs: ZERO }, Step::Answer], d, &flag).await.is_ok());
}

/// A call that yields at a tick gives its thread up then: its poll ends
/// there, and it is not polled again until the executor's turn comes.
#[test]
fn a_call_that_yields_gives_its_thread_up_at_once() {
    let executor = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let _entered = executor.enter();
    let flag = AtomicBool::new(false);
    let polls = std::cell::Cell::new(0);
    let call = std::future::poll_fn(|cx| {
        polls.set(polls.get() + 1);
        flag.store(true, Ordering::Relaxed);
        cx.waker().wake_by_ref();
        Poll::<()>::Pending
    });
    let mut within = std::pin::pin!(within(std::time::Instant::now() + Duration::from_secs(5), &flag, call));
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    assert!(within.as_mut().poll(&mut cx).is_pending());
    assert_eq!(polls.get(), 1, "the call ran on after its yield");
    assert!(within.as_mut().poll(&mut cx).is_pending());
    assert_eq!(polls.get(), 2);
}

#[test]
fn compiled_code_is_mapped_from_the_cache_and_a_bad_entry_is_recompiled_never_mapped() {
    let dir = tempfile::tempdir().unwrap();
    let (component, _, _) = crate::package::tests::build(crate::package::tests::ECHOISH);
    let sha = crate::digest::sha256_hex(&component);
    let rt = runtime(dir.path());
    // Dropped at once: nothing holds it linked, so each load below goes to
    // the cache.
    drop(rt.load(&component, &sha).unwrap());
    let code = rt.code.as_ref().unwrap();
    let entry = code.entry(&sha);
    let sum = std::path::PathBuf::from(format!("{}.sum", entry.display()));
    assert!(entry.file_name().unwrap().to_str().unwrap().starts_with(&sha));
    assert!(sum.exists(), "the entry's checksum is beside it");
    let mapped = || code.map(&rt.engine, &sha).is_some();
    assert!(mapped(), "a sound entry is mapped");
    let misses = || rt.cache_counts().1;
    let compiled_before = misses();
    drop(rt.load(&component, &sha).unwrap());
    assert_eq!(misses(), compiled_before, "a sound entry is not compiled again");

    // Flip a byte of the compiled code: the checksum catches it.
    let sound = std::fs::read(&entry).unwrap();
    let mut flipped = sound.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 0xff;
    std::fs::write(&entry, &flipped).unwrap();
    assert!(!mapped());
    drop(rt.load(&component, &sha).unwrap());
    assert_eq!(misses(), compiled_before + 1, "recompiled");
    assert!(mapped(), "and rewritten");

    // Truncated, then without its checksum.
    std::fs::write(&entry, &sound[..sound.len() / 2]).unwrap();
    assert!(!mapped());
    drop(rt.load(&component, &sha).unwrap());
    assert_eq!(misses(), compiled_before + 2);
    std::fs::remove_file(&sum).unwrap();
    assert!(!mapped(), "an entry without its checksum is not trusted");
    drop(rt.load(&component, &sha).unwrap());
    assert!(mapped());

    // Garbage with a matching checksum: wasmtime's own header check
    // refuses it.
    let junk = b"not compiled code".to_vec();
    std::fs::write(&entry, &junk).unwrap();
    std::fs::write(&sum, Sha256::digest(&junk)).unwrap();
    assert!(!mapped());
    drop(rt.load(&component, &sha).unwrap());
    assert!(mapped());
}

#[tokio::test]
async fn versions_with_the_same_bytes_share_one_linked_component_while_any_holds_it() {
    let dir = tempfile::tempdir().unwrap();
    let (component, _, _) = crate::package::tests::build(crate::package::tests::ECHOISH);
    let sha = crate::digest::sha256_hex(&component);
    let rt = runtime(dir.path());
    let (first, second) = (rt.load(&component, &sha).unwrap(), rt.load(&component, &sha).unwrap());
    assert!(Arc::ptr_eq(&first, &second), "one compiled and linked component");
    assert_eq!(rt.linked_count(), 1);
    assert_eq!(rt.cache_counts().1, 1, "compiled once");
    // One holder lets go (its version retired): the other still runs it.
    drop(first);
    // The test component's code is a stub that traps at once: reaching the
    // trap shows its code is still mapped and runs.
    let input =
        Val::Record(vec![("text".into(), Val::String("still here".into())), ("mood".into(), Val::Option(None))]);
    let answer = rt.call(&second, input, CallSetup::bare("echoish")).await;
    assert!(matches!(answer, Err(CallError::Trapped(_))), "{answer:?}");
    drop(second);
    assert_eq!(rt.linked_count(), 0, "nobody holds it: it is unmapped");
    drop(rt.load(&component, &sha).unwrap());
    assert_eq!(rt.cache_counts().1, 1, "linked again from the cache, not compiled");
}

#[test]
fn the_compile_workers_settings_make_code_the_server_maps() {
    // The worker builds its engine from `code_config` with an incremental
    // cache and no pool; the server's has a pool. Their code must be
    // interchangeable: the same compatibility key.
    let dir = tempfile::tempdir().unwrap();
    let server =
        Runtime::new(RuntimeConfig { cache_dir: Some(dir.path().to_path_buf()), ..Default::default() }).unwrap();
    let mut worker = compiled::code_config();
    worker
        .enable_incremental_compilation(Arc::new(compiled::IncrementalStore::open(&dir.path().join("i")).unwrap()))
        .unwrap();
    let worker = Engine::new(&worker).unwrap();
    assert_eq!(compiled::engine_key(&server.engine), compiled::engine_key(&worker));
}

#[test]
fn a_second_build_reuses_the_functions_the_first_compiled() {
    let dir = tempfile::tempdir().unwrap();
    let functions = dir.path().join("incremental");
    let mut config = compiled::code_config();
    config.enable_incremental_compilation(Arc::new(compiled::IncrementalStore::open(&functions).unwrap())).unwrap();
    let engine = Engine::new(&config).unwrap();
    let count = || walk(&functions).len();
    let (component, _, _) = crate::package::tests::build(crate::package::tests::ECHOISH);
    engine.precompile_component(&component).unwrap();
    let first = count();
    assert!(first > 0, "the functions compiled are kept");
    // Compiled again, its functions come from the cache. A few (up to 2 of
    // the 12 here, varying from run to run with how the parallel
    // compilation goes; not traced further) may be keyed differently on a
    // later compilation and stored once more; the rest are never compiled
    // again. A cache that did not work would store all 12 again.
    let few = first / 4;
    let at_most_a_few_more = |before: usize, what: &str| {
        let now = count();
        assert!(now <= before + few, "{what}: {now} functions stored, {before} before");
        now
    };
    engine.precompile_component(&component).unwrap();
    let second = at_most_a_few_more(first, "compiled again");
    // The same code with other docs (another version of the tool).
    let relabeled = crate::testing::relabeled(&component, "build 2");
    assert_ne!(relabeled, component);
    engine.precompile_component(&relabeled).unwrap();
    let third = at_most_a_few_more(second, "another build of the same code");
    assert!(third <= first + 2 * few, "{third} functions stored after three builds, {first} after the first");
    // A damaged entry is a miss, never code.
    use wasmtime::CacheStore;
    let store = compiled::IncrementalStore::open(&dir.path().join("direct")).unwrap();
    assert!(store.insert(b"key", b"value".to_vec()));
    assert_eq!(store.get(b"key").as_deref(), Some(&b"value"[..]));
    let file = walk(&dir.path().join("direct")).pop().unwrap();
    std::fs::write(&file, b"garbage").unwrap();
    assert!(store.get(b"key").is_none());
    // Every entry damaged: the compilation makes the same code as before.
    let sound = engine.precompile_component(&component).unwrap();
    for entry in walk(&functions) {
        std::fs::write(entry, b"garbage").unwrap();
    }
    assert_eq!(engine.precompile_component(&component).unwrap(), sound);
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries.flatten().flat_map(|e| if e.path().is_dir() { walk(&e.path()) } else { vec![e.path()] }).collect()
}

/// The instance pool keeps shards of its own for the tool threads below
/// the server's priority (`wasmtime::mark_pooling_background_thread`,
/// vendor/wasmtime/PLINTH.md), so that an HTTP thread never waits on a
/// lock one of them holds. Neither side is confined to its half: when
/// its own shards are full it takes slots from the others, and every
/// slot of the pool stays usable from either.
#[test]
fn background_threads_have_shards_of_their_own_yet_every_slot_stays_usable() {
    const SLOTS: u32 = 100;
    let mut pool = wasmtime::PoolingAllocationConfig::new();
    pool.total_core_instances(2 * SLOTS).total_memories(SLOTS).total_tables(0).max_memory_size(1 << 16);
    let mut config = Config::new();
    config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    let engine = Engine::new(&config).unwrap();
    // Its one memory takes a slot of the pool's memories.
    let module = wasmtime::Module::new(&engine, wat::parse_str("(module (memory 1 1))").unwrap()).unwrap();
    let take = |count: u32| -> Vec<wasmtime::Store<()>> {
        (0..count)
            .map(|_| {
                let mut store = wasmtime::Store::new(&engine, ());
                wasmtime::Instance::new(&mut store, &module, &[]).unwrap();
                store
            })
            .collect()
    };
    let one_more = || {
        let mut store = wasmtime::Store::new(&engine, ());
        wasmtime::Instance::new(&mut store, &module, &[]).is_ok()
    };
    // `work` on a thread of its own, marked a background thread.
    fn in_background<T: Send>(work: impl FnOnce() -> T + Send) -> T {
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    wasmtime::mark_pooling_background_thread();
                    work()
                })
                .join()
                .unwrap()
        })
    }
    // A background thread takes more than its half, a normal thread
    // the rest: the pool is full, for both.
    let background = in_background(|| take(SLOTS * 7 / 10));
    let normal = take(SLOTS - SLOTS * 7 / 10);
    assert!(!one_more(), "the pool holds {SLOTS} instances, no more");
    assert!(!in_background(one_more), "nor for a background thread");
    // Given back, the slots serve either kind of thread, all of them.
    drop((background, normal));
    let normal = take(SLOTS);
    assert!(!one_more());
    drop(normal);
    let background = in_background(|| take(SLOTS));
    assert!(!one_more());
    drop(background);
}

#[test]
fn a_compile_worker_that_crashes_fails_that_load_and_nothing_else() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    // Stands in for a compiler a hostile component crashes: it reads the
    // component, then dies of a segmentation fault.
    let worker = dir.path().join("crashing-worker");
    std::fs::write(&worker, "#!/bin/sh\ncat >/dev/null\nkill -SEGV $$\n").unwrap();
    std::fs::set_permissions(&worker, std::fs::Permissions::from_mode(0o755)).unwrap();
    let cache = dir.path().join("compiled");
    let config = RuntimeConfig {
        cache_dir: Some(cache.clone()),
        compile_worker: Some(worker),
        pooling: false,
        ..Default::default()
    };
    let rt = Runtime::new(config).unwrap();
    let (component, _, _) = crate::package::tests::build(crate::package::tests::ECHOISH);
    let sha = crate::digest::sha256_hex(&component);
    let error = rt.load(&component, &sha).err().expect("the crash fails the load");
    // Killed, it may have been the component's doing or the kernel's (out
    // of memory): the server's trouble compiling now, said without its
    // paths.
    assert!(matches!(&error, LoadError::Unavailable(why) if why.contains("SIGSEGV")), "{error}");
    assert!(!error.to_string().contains(dir.path().to_str().unwrap()), "{error}");
    // Remembered a while: asking again answers the same without a worker.
    let again = rt.load(&component, &sha).err().expect("still failing");
    assert_eq!(again.to_string(), error.to_string());
    assert_eq!(rt.cache_counts().1, 1, "compiled once, not twice");
    assert!(!rt.is_cached(&sha), "nothing of it is cached");
    let left: Vec<_> = std::fs::read_dir(&cache).unwrap().flatten().filter(|e| e.path().is_file()).collect();
    assert!(left.is_empty(), "its output file is removed: {left:?}");
    // The runtime goes on: the same bytes compile in a runtime whose
    // worker works (here, in process).
    let working = runtime(&cache);
    assert!(working.load(&component, &sha).is_ok());
}

/// A stand-in compile worker: a shell script, made executable.
fn fake_worker(dir: &std::path::Path, name: &str, script: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let worker = dir.join(name);
    std::fs::write(&worker, script).unwrap();
    std::fs::set_permissions(&worker, std::fs::Permissions::from_mode(0o755)).unwrap();
    worker
}

#[test]
fn a_compile_worker_past_its_deadline_is_killed_with_what_it_started_and_fails_that_load_only() {
    let dir = tempfile::tempdir().unwrap();
    // Stands in for a compiler a hostile component keeps busy for ever: it
    // reads the component, starts a helper that would outlive it (holding
    // its standard error open), and hangs.
    let helper = dir.path().join("helper.pid");
    let script = format!("#!/bin/sh\ncat >/dev/null\nsleep 1000 &\necho $! > {}\nexec sleep 1000\n", helper.display());
    let worker = fake_worker(dir.path(), "hanging-worker", &script);
    let cache = dir.path().join("compiled");
    let config = RuntimeConfig {
        cache_dir: Some(cache.clone()),
        compile_worker: Some(worker),
        compile_deadline: Duration::from_secs(1),
        pooling: false,
        ..Default::default()
    };
    let rt = Runtime::new(config).unwrap();
    let (component, _, _) = crate::package::tests::build(crate::package::tests::ECHOISH);
    let sha = crate::digest::sha256_hex(&component);
    let error = rt.load(&component, &sha).err().expect("the deadline fails the load");
    assert!(matches!(&error, LoadError::Unavailable(why) if why.contains("deadline")), "{error}");
    assert!(!error.to_string().contains(dir.path().to_str().unwrap()), "{error}");
    // The worker and what it started are gone (or dead, awaiting a reaper).
    // The kill is sent before the load fails; the kernel may take a moment
    // to deliver it to a helper that is running.
    let pid = std::fs::read_to_string(&helper).unwrap();
    let state_of = || {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).unwrap_or_default();
        let state = stat.rsplit(") ").next().and_then(|rest| rest.chars().next());
        (state, stat)
    };
    let mut seen = state_of();
    for _ in 0..200 {
        if matches!(seen.0, None | Some('Z' | 'X')) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
        seen = state_of();
    }
    assert!(matches!(seen.0, None | Some('Z' | 'X')), "the worker's helper still runs: {}", seen.1);
    // Nothing of it is cached or left behind, and it is remembered a
    // while instead of tried again by every caller.
    assert!(!rt.is_cached(&sha));
    let left: Vec<_> = std::fs::read_dir(&cache).unwrap().flatten().filter(|e| e.path().is_file()).collect();
    assert!(left.is_empty(), "its output file is removed: {left:?}");
    assert_eq!(rt.load(&component, &sha).err().map(|e| e.to_string()), Some(error.to_string()));
    assert_eq!(rt.cache_counts().1, 1, "compiled once, not twice");
    // The runtime goes on: the same bytes compile where a worker works.
    assert!(runtime(&cache).load(&component, &sha).is_ok());
}

#[test]
fn a_compile_worker_is_the_kernels_first_choice_out_of_memory_and_its_data_is_limited() {
    let dir = tempfile::tempdir().unwrap();
    // Reports what it was given, then fails as a compiler would.
    let report = dir.path().join("report");
    let script = format!(
        "#!/bin/sh\ncat >/dev/null\necho $(cat /proc/self/oom_score_adj) $(ulimit -d) > {}\necho \"error: refused\" >&2\nexit 1\n",
        report.display()
    );
    let worker = fake_worker(dir.path(), "reporting-worker", &script);
    let config = RuntimeConfig {
        cache_dir: Some(dir.path().join("compiled")),
        compile_worker: Some(worker),
        compile_memory_bytes: Some(1 << 30),
        pooling: false,
        ..Default::default()
    };
    let rt = Runtime::new(config).unwrap();
    let (component, _, _) = crate::package::tests::build(crate::package::tests::ECHOISH);
    let error = rt.load(&component, &crate::digest::sha256_hex(&component)).err().expect("the worker refused");
    assert!(matches!(&error, LoadError::Compile(why) if why == "refused"), "{error}");
    // oom_score_adj 1000, and RLIMIT_DATA of 1 GiB (`ulimit -d` says KiB).
    assert_eq!(std::fs::read_to_string(&report).unwrap().trim(), "1000 1048576");
}

#[test]
fn a_load_waits_for_a_compilation_slot_within_its_bound_and_is_refused_busy_after() {
    let dir = tempfile::tempdir().unwrap();
    let config = RuntimeConfig {
        cache_dir: Some(dir.path().join("compiled")),
        compile_wait: Duration::from_millis(50),
        pooling: false,
        ..Default::default()
    };
    let rt = Runtime::new(config).unwrap();
    let (component, _, _) = crate::package::tests::build(crate::package::tests::ECHOISH);
    let sha = crate::digest::sha256_hex(&component);
    // Every slot is held (by compilations that take long).
    let held: Vec<_> = (0..COMPILES_AT_ONCE).map(|_| rt.compiles.take(None).unwrap()).collect();
    let error = rt.load(&component, &sha).err().expect("no slot came free");
    assert!(matches!(error, LoadError::Busy), "{error}");
    assert_eq!(rt.cache_counts().1, 0, "nothing was compiled");
    // Temporary, so not remembered: once a slot is free, it compiles.
    drop(held);
    assert!(rt.load(&component, &sha).is_ok());
}

/// Cranelift's incremental cache on disk, counting what is asked of it.
#[derive(Debug)]
struct CountedStore {
    store: compiled::IncrementalStore,
    asked: std::sync::atomic::AtomicUsize,
}

impl wasmtime::CacheStore for CountedStore {
    fn get(&self, key: &[u8]) -> Option<std::borrow::Cow<'_, [u8]>> {
        self.asked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.store.get(key)
    }
    fn insert(&self, key: &[u8], value: Vec<u8>) -> bool {
        self.store.insert(key, value)
    }
}

/// Compiles `component` with the incremental cache in `cache`: its code,
/// and how many times the cache was asked.
fn compile_with_cache(cache: &std::path::Path, component: &[u8]) -> (Vec<u8>, usize) {
    let store = Arc::new(CountedStore { store: compiled::IncrementalStore::open(cache).unwrap(), asked: 0.into() });
    let mut config = compiled::code_config();
    config.enable_incremental_compilation(store.clone()).unwrap();
    let code = Engine::new(&config).unwrap().precompile_component(component).unwrap();
    (code, store.asked.load(std::sync::atomic::Ordering::Relaxed))
}

/// A core module compiled before (CPython, in every Python tool) is taken
/// from the cache whole, as one entry, instead of function by function
/// after translating each (vendor/wasmtime/PLINTH.md, "Whole modules"):
/// the code is byte for byte what a compilation from nothing makes, also
/// where the module lies elsewhere in its component, and an entry that is
/// damaged or not whole is never used.
#[test]
fn a_module_compiled_before_is_taken_whole_and_makes_the_code_a_fresh_compilation_makes() {
    let python = fixture("echo_py.wasm");
    // Another component with the same core modules, each at another
    // offset: a custom section of 1,000 bytes ahead of them.
    let mut moved = python[..8].to_vec();
    let payload = [&[5u8][..], b"moved", &[0u8; 1000]].concat();
    moved.push(0);
    moved.extend_from_slice(&[(payload.len() & 0x7f) as u8 | 0x80, (payload.len() >> 7) as u8]);
    moved.extend_from_slice(&payload);
    moved.extend_from_slice(&python[8..]);

    let dir = tempfile::tempdir().unwrap();
    let warm = dir.path().join("warm");
    let (from_nothing, asked_cold) = compiled_after_and_from_nothing(&warm, &python, &moved);

    // Every entry damaged: none is used, and the code is the same.
    for entry in walk(&warm) {
        std::fs::write(entry, b"garbage").unwrap();
    }
    let (recompiled, asked) = compile_with_cache(&warm, &moved);
    assert!(recompiled == from_nothing);
    assert!(asked * 2 > asked_cold, "with every entry damaged, each function was looked up ({asked})");
    // The modules' entries, written again, are the large ones: cut each to
    // half its value under a checksum that matches, so that only the
    // entry's own shape can tell.
    let (_, asked) = compile_with_cache(&warm, &moved);
    assert!(asked * 2 < asked_cold, "the modules' entries were written again ({asked})");
    let mut entries = walk(&warm);
    entries.sort_by_key(|entry| std::cmp::Reverse(std::fs::metadata(entry).unwrap().len()));
    for entry in &entries[..3] {
        let value = std::fs::read(entry).unwrap()[32..].to_vec();
        let half = &value[..value.len() / 2];
        std::fs::write(entry, [Sha256::digest(half).as_slice(), half].concat()).unwrap();
    }
    let (recompiled, _) = compile_with_cache(&warm, &moved);
    assert!(recompiled == from_nothing, "a module's entry cut short was used");

    // A pack whose shape parses but one of whose functions' entries does
    // not decode (its first byte, whether the function needs a GC heap,
    // neither 0 nor 1): that function is compiled, the others taken from
    // the pack, and the pack written again.
    let pack = entries[0].clone();
    let first_entry = 32 + 8 + 8 + 8; // checksum, magic, count, the entry's length
    let mut bytes = std::fs::read(&pack).unwrap();
    assert!(&bytes[32..40] == b"PLNTHMP1" && bytes[first_entry] <= 1, "the largest entry is a module's pack");
    bytes[first_entry] = 7;
    let value = bytes[32..].to_vec();
    std::fs::write(&pack, [Sha256::digest(&value).as_slice(), &value].concat()).unwrap();
    let (recompiled, asked) = compile_with_cache(&warm, &moved);
    assert!(recompiled == from_nothing, "a pack with an entry that does not decode gave other code");
    assert!(asked * 2 < asked_cold, "the pack's other functions were taken from it ({asked})");
    assert!(std::fs::read(&pack).unwrap()[first_entry] <= 1, "the pack was written again");
}

/// What a module's memories start with, and where, is not part of its
/// code: a JavaScript tool's StarlingMonkey differs from another's only in
/// its data (the snapshot of the tool's heap, at other addresses), and is
/// taken whole from the cache; the code is what a compilation from nothing
/// makes.
#[test]
fn a_module_that_differs_only_in_its_data_is_taken_whole() {
    let javascript = fixture("echo_js.wasm");
    let other_data = with_the_first_data_changed(&javascript);
    assert_ne!(other_data, javascript);
    let dir = tempfile::tempdir().unwrap();
    compiled_after_and_from_nothing(&dir.path().join("warm"), &javascript, &other_data);
}

/// Compiles `first` then `second` with the cache in `warm`, and `second`
/// again with an empty cache: the two codes of `second` are the same, and
/// the second compilation took `first`'s modules whole. → `second`'s code,
/// and how many times the cache was asked for `first`.
fn compiled_after_and_from_nothing(warm: &std::path::Path, first: &[u8], second: &[u8]) -> (Vec<u8>, usize) {
    let fresh = tempfile::tempdir().unwrap();
    let (_, asked_cold) = compile_with_cache(warm, first);
    let (from_modules, asked_warm) = compile_with_cache(warm, second);
    let (from_nothing, _) = compile_with_cache(fresh.path(), second);
    assert!(from_modules == from_nothing, "the code made from whole modules differs from a fresh compilation's");
    // Cold, each function is looked up after its translation; warm, each
    // module once (what remains are the trampolines wasmtime makes).
    assert!(asked_warm * 2 < asked_cold, "the cache was asked {asked_warm} times, {asked_cold} the first time");
    (from_nothing, asked_cold)
}

fn fixture(name: &str) -> Vec<u8> {
    let fixtures = crate::package::proptests::tools_dir("PLINTH_TEST_FIXTURES", "fixtures", name, "fixtures");
    std::fs::read(fixtures.join(name)).unwrap()
}

/// `component` with the first data segment of its first core module that
/// has data changed: one byte of its data, and its offset by 8.
fn with_the_first_data_changed(component: &[u8]) -> Vec<u8> {
    let mut bytes = component.to_vec();
    for payload in wasmparser::Parser::new(0).parse_all(component) {
        if let wasmparser::Payload::DataSection(reader) = payload.unwrap() {
            for data in reader {
                let data = data.unwrap();
                let (Some(&first), wasmparser::DataKind::Active { offset_expr, .. }) = (data.data.first(), data.kind)
                else {
                    continue;
                };
                let at = data.range.end - data.data.len();
                assert_eq!(bytes[at], first);
                bytes[at] ^= 0x55;
                // `i32.const`, then its LEB128 value: a bit of the first
                // byte's value changes it by 8 and keeps its length.
                let offset = offset_expr.get_binary_reader().original_position();
                assert_eq!(bytes[offset], 0x41, "an i32.const offset");
                bytes[offset + 1] ^= 0x08;
                return bytes;
            }
        }
    }
    panic!("no active data segment with data")
}
