//! The advisories wasmtime 48.0.9 fixed, against Plinth's build (no `gc`,
//! no `threads`, no `component-model-async` cargo feature) and its engine
//! (vendor/wasmtime/PLINTH.md, "Advisories fixed in 48.0.9"): the one a
//! tool could trigger here is patched; four others need what the engine
//! refuses to load, pinned here; the last three need what Plinth does not
//! use (an `AsyncWriteStream`, `Caller::get_module_export`, HTTP/2).
//!
//! The tools are components written in WAT, exporting `call` (u64 → u64)
//! as the other runtime tests' tools do.

use super::*;

/// A pooling runtime as the server runs one, with room for two instances.
fn runtime() -> Runtime {
    Runtime::new(RuntimeConfig { max_instances: 2, ..RuntimeConfig::default() }).expect("a runtime starts")
}

fn load(runtime: &Runtime, wat: &str) -> Result<Arc<LoadedComponent>, LoadError> {
    let bytes = wat::parse_str(wat).expect("the test tool is valid WAT");
    runtime.load(&bytes, &crate::digest::sha256_hex(&bytes))
}

/// Why the engine refused `wat`, which it must.
fn refused(wat: &str) -> String {
    match load(&runtime(), wat) {
        Err(LoadError::Compile(why)) => why,
        Err(other) => panic!("refused, but not by the compiler: {other}"),
        Ok(_) => panic!("the engine loaded a tool it must refuse"),
    }
}

async fn call(runtime: &Runtime, tool: &LoadedComponent, op: u64) -> Result<u64, CallError> {
    match runtime.call(tool, Val::U64(op), CallSetup::bare("advisories")).await? {
        Val::U64(n) => Ok(n),
        other => panic!("the test tool answered {other:?}"),
    }
}

/// Calls through non-final function types (the GC proposal's subtyping,
/// which Plinth's engine accepts: only GC *types* need the `gc` feature).
/// `$derived` is declared a subtype of `$base`; `$other` is unrelated.
/// Every check below compares two different types, so compiled code asks
/// the runtime's `is_subtype` (GHSA-rc4p-x33f-vpr2).
const SUBTYPED_CALLS: &str = r#"(component
  (core module $M
    (type $base (sub (func (result i64))))
    (type $derived (sub $base (func (result i64))))
    (type $other (sub (func (param i32) (result i64))))
    (table 2 funcref)
    (elem (i32.const 0) func $derived_f $other_f)
    (func $derived_f (type $derived) (i64.const 7))
    (func $other_f (type $other) (i64.const 9))
    (func (export "run") (param $op i64) (result i64)
      (local $slot i32)
      (local.set $slot (i32.wrap_i64 (i64.and (local.get $op) (i64.const 1))))
      ;; 0, 1: `call_indirect` through `$base` to slot 0 ($derived: 7) or
      ;; slot 1 ($other: a type mismatch).
      (if (i64.lt_u (local.get $op) (i64.const 2))
        (then (return (call_indirect (type $base) (local.get $slot)))))
      ;; 2, 3: `ref.test` of slot 0 or 1 against `$base`.
      (i64.extend_i32_u (ref.test (ref $base) (table.get (local.get $slot))))))
  (core instance $m (instantiate $M))
  (func (export "call") (param "op" u64) (result u64) (canon lift (core func $m "run"))))"#;

/// Set in the child process that makes the calls of
/// [`a_call_through_a_subtype_answers_instead_of_aborting_the_host`].
const CHILD: &str = "PLINTH_ADVISORY_CHILD";

/// GHSA-rc4p-x33f-vpr2. As published, a build without the `gc` feature
/// aborted the whole process (every tenant's calls) at the first such check
/// between two different types: the `is_subtype` builtin was compiled out
/// and reached `unreachable!()` in an `extern "C"` function. The test runs
/// itself again in a child process, which makes the calls, so that an
/// abort fails this test rather than ending the test run.
#[test]
fn a_call_through_a_subtype_answers_instead_of_aborting_the_host() {
    if std::env::var_os(CHILD).is_some() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        return runtime.block_on(calls_through_subtypes());
    }
    let own_path = module_path!().split_once("::").map_or(module_path!(), |(_, path)| path);
    let name = format!("{own_path}::a_call_through_a_subtype_answers_instead_of_aborting_the_host");
    let child = std::process::Command::new(std::env::current_exe().expect("the test binary's path"))
        .args([&name, "--exact", "--nocapture"])
        .env(CHILD, "1")
        .output()
        .expect("the child process runs");
    let (stdout, stderr) = (String::from_utf8_lossy(&child.stdout), String::from_utf8_lossy(&child.stderr));
    assert!(
        child.status.success() && stdout.contains("1 passed"),
        "the child ended with {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        child.status
    );
}

/// The calls the child process makes.
async fn calls_through_subtypes() {
    let runtime = runtime();
    let tool = load(&runtime, SUBTYPED_CALLS).expect("subtyped function types load without GC types");
    for _ in 0..2 {
        assert_eq!(call(&runtime, &tool, 0).await.unwrap(), 7, "a subtype's function is called");
        match call(&runtime, &tool, 1).await {
            Err(CallError::Trapped(why)) => assert!(why.contains("type mismatch"), "{why}"),
            other => panic!("an unrelated type is a type mismatch, not {other:?}"),
        }
        assert_eq!(call(&runtime, &tool, 2).await.unwrap(), 1, "a subtype's function is a (ref $base)");
        assert_eq!(call(&runtime, &tool, 3).await.unwrap(), 0, "an unrelated one is not");
    }
}

/// GHSA-43j2-gcp4-m22g (a stale GC heap base in compiled code) and
/// GHSA-wvgq-g5hf-6gm6 (a GC heap whose reservation is not a whole number
/// of pages) need a GC heap; there is none without GC types, nor without
/// exceptions (their objects live in it), and the engine refuses both.
#[test]
fn a_tool_cannot_define_gc_types_or_exceptions() {
    let gc_types = refused(
        r#"(component (core module $M
             (type $point (struct (field i64)))
             (func (export "run") (param i64) (result i64)
               (drop (struct.new $point (local.get 0))) (local.get 0))))"#,
    );
    assert!(gc_types.contains("gc"), "{gc_types}");
    let exceptions = refused(
        r#"(component (core module $M
             (tag $e (param i64))
             (func (export "run") (param i64) (result i64) (throw $e (local.get 0)))))"#,
    );
    assert!(exceptions.contains("exception"), "{exceptions}");
}

/// GHSA-2674-w29h-wqvj (an abort in builds without the `threads` feature):
/// the builtins that feature compiles out are called only for
/// `memory.atomic.wait*` and `memory.atomic.notify`, and no shared memory
/// can exist; the engine refuses both (the threads proposal is off in this
/// build), so compiled code never reaches them.
#[test]
fn a_tool_cannot_use_shared_memories_or_atomics() {
    let notify = refused(
        r#"(component (core module $M
             (memory 1)
             (func (export "run") (param i64) (result i64)
               (i64.extend_i32_u (memory.atomic.notify (i32.const 0) (i32.const 1))))))"#,
    );
    assert!(notify.contains("threads"), "{notify}");
    let wait = refused(
        r#"(component (core module $M
             (memory 1)
             (func (export "run") (param i64) (result i64)
               (i64.extend_i32_u (memory.atomic.wait64 (i32.const 0) (local.get 0) (i64.const 0))))))"#,
    );
    assert!(wait.contains("threads"), "{wait}");
    let shared = refused(r#"(component (core module $M (memory 1 1 shared)))"#);
    assert!(shared.contains("threads"), "{shared}");
}

/// GHSA-xrvr-8678-5wp8 (a panic when a component cancels a stream or
/// future copy on the wrong end): streams and futures are the component
/// model's async ABI, which this build does not have; the engine refuses
/// their types and built-ins.
#[test]
fn a_tool_cannot_use_streams_or_futures() {
    let stream = refused(
        r#"(component
             (type $s (stream u8))
             (core func $new (canon stream.new $s)))"#,
    );
    assert!(stream.contains("async"), "{stream}");
    let future = refused(
        r#"(component
             (type $f (future u8))
             (core func $new (canon future.new $f)))"#,
    );
    assert!(future.contains("async"), "{future}");
}
