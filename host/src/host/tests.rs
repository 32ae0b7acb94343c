//! Unit tests of the core's storage rules: version quotas, unloading
//! retired code, deploy concurrency; and of confirmed calls.

use super::*;
use crate::invocation;
use crate::package::tests::{ECHOISH, build};
use crate::tenancy::{DEFAULT_TENANT, Principal, Quotas};

fn options(data_dir: &std::path::Path) -> HostOptions {
    HostOptions {
        data_dir: data_dir.to_path_buf(),
        database_url: None,
        change_poll: std::time::Duration::from_secs(1),
        runtime: RuntimeConfig { pooling: false, ..Default::default() },
        tool_config: ToolConfig::new(),
        operator_key: None,
        limits: HostLimits::default(),
        tool_threads: 1,
        call_retention: DEFAULT_CALL_RETENTION,
        confirmation_ttl: DEFAULT_CONFIRMATION_TTL,
        confirmation_retention: DEFAULT_CONFIRMATION_RETENTION,
        max_concurrent_deploys: DEFAULT_MAX_CONCURRENT_DEPLOYS,
        idle_unlink: Duration::from_secs(600),
        secrets_key: None,
        registries: Default::default(),
        console: Default::default(),
        usage: Default::default(),
        cheq: Default::default(),
    }
}

/// A packed tool; `label` makes other bytes with the same signature.
fn packed(label: &str) -> Vec<u8> {
    let (component, resolve, world) = build(ECHOISH);
    let (bytes, _) = crate::package::pack(&component, &resolve, world, Default::default()).unwrap();
    crate::testing::relabeled(&bytes, label)
}

#[test]
fn a_retired_version_drops_its_code_and_is_not_compiled_again_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let actor = Principal::server("test");
    let tool_id = {
        let host = ToolHost::open(options(dir.path())).unwrap();
        let one = host.deploy(&actor, DEFAULT_TENANT, &packed("1"), None).unwrap();
        host.deploy(&actor, DEFAULT_TENANT, &packed("2"), None).unwrap();
        let tool = host.registry().get(&one.tool_id).unwrap();
        let running = tool.version(1).unwrap().component();
        assert!(running.is_some(), "a live version holds its code");
        assert_eq!(tool.loaded_versions(), 2);

        host.retire(&actor, DEFAULT_TENANT, &one.tool_id.to_string(), 1).unwrap();
        let v1 = tool.version(1).unwrap();
        assert!(v1.retired_at().is_some());
        assert!(v1.component().is_none(), "retiring unloads the compiled code");
        assert!(tool.version(2).unwrap().component().is_some());
        assert_eq!(tool.loaded_versions(), 1);
        assert_eq!(tool.version_count(), 2, "the retired version stays listed");
        // A call that began before keeps its own Arc of the code.
        assert!(running.is_some());
        // Invoking it answers `retired`.
        let err = host.resolve(DEFAULT_TENANT, &one.tool_id.to_string(), Some(1)).err().unwrap();
        assert!(matches!(err, InvokeError::Retired(_)), "{err}");
        one.tool_id
    };
    let host = ToolHost::open(options(dir.path())).unwrap();
    let tool = host.registry().get(&tool_id).unwrap();
    assert!(tool.version(1).unwrap().component().is_none(), "a retired version is not compiled at start");
    assert!(tool.version(1).unwrap().retired_at().is_some());
    assert!(tool.version(2).unwrap().component().is_none(), "nor a live one: its first call links it");
}

/// What a call answers, to compare: the test component traps at once, the
/// same way whenever it runs.
async fn answer(host: &Arc<ToolHost>, tool_id: &str, version: u32) -> String {
    format!("{:?}", call(host, tool_id, version, "hi").await)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_version_linked_at_its_first_call_answers_as_one_linked_at_deploy() {
    let dir = tempfile::tempdir().unwrap();
    let actor = Principal::server("test");
    let (tool_id, at_deploy) = {
        let host = Arc::new(ToolHost::open(options(dir.path())).unwrap());
        let tool_id = host.deploy(&actor, DEFAULT_TENANT, &packed("1"), None).unwrap().tool_id.to_string();
        let (_, version) = host.resolve(DEFAULT_TENANT, &tool_id, Some(1)).unwrap();
        assert!(version.component().is_some(), "a deploy links what it compiled");
        (tool_id.clone(), answer(&host, &tool_id, 1).await)
    };
    assert!(at_deploy.contains("Trapped"), "{at_deploy}");
    let host = Arc::new(ToolHost::open(options(dir.path())).unwrap());
    let (_, version) = host.resolve(DEFAULT_TENANT, &tool_id, Some(1)).unwrap();
    assert!(version.component().is_none(), "a restart links nothing");
    assert_eq!(answer(&host, &tool_id, 1).await, at_deploy);
    assert!(version.component().is_some(), "its first call linked it");
    assert_eq!(host.runtime.cache_counts().1, 0, "from the compiled cache: nothing was compiled");
    // Idle, it lets its code go; the next call links it again.
    assert_eq!(host.registry().unlink_idle(0), 1);
    assert!(version.component().is_none());
    assert_eq!(answer(&host, &tool_id, 1).await, at_deploy);
    // Retired, it is never linked again.
    host.retire(&actor, DEFAULT_TENANT, &tool_id, 1).unwrap();
    assert!(matches!(host.resolve(DEFAULT_TENANT, &tool_id, Some(1)), Err(InvokeError::Retired(_))));
    assert!(version.component().is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn tenants_deploying_the_same_bytes_share_its_code_and_one_retiring_leaves_the_other_served() {
    let dir = tempfile::tempdir().unwrap();
    let host = Arc::new(ToolHost::open(options(dir.path())).unwrap());
    let operator = Principal::server("test");
    host.create_tenant(&operator, "acme", false, &serde_json::json!({})).unwrap();
    let bytes = packed("1");
    let ours = host.deploy(&operator, DEFAULT_TENANT, &bytes, None).unwrap().tool_id.to_string();
    let theirs = host.deploy(&operator, "acme", &bytes, None).unwrap().tool_id.to_string();
    assert_eq!(host.runtime.cache_counts().1, 1, "compiled once");
    assert_eq!(host.runtime.linked_count(), 1, "linked once, for both");
    let expected = answer(&host, &ours, 1).await;
    host.retire(&operator, "acme", &theirs, 1).unwrap();
    assert_eq!(answer(&host, &ours, 1).await, expected);
    assert_eq!(host.runtime.linked_count(), 1);
    host.retire(&operator, DEFAULT_TENANT, &ours, 1).unwrap();
    assert_eq!(host.runtime.linked_count(), 0, "nobody holds it: its code is let go");
}

#[test]
fn a_tool_may_have_as_many_versions_as_its_quota_retired_ones_included() {
    let dir = tempfile::tempdir().unwrap();
    let host = ToolHost::open(options(dir.path())).unwrap();
    let actor = Principal::server("test");
    host.update_tenant(&actor, DEFAULT_TENANT, None, &serde_json::json!({ "maxVersionsPerTool": 2 })).unwrap();
    let one = host.deploy(&actor, DEFAULT_TENANT, &packed("1"), None).unwrap();
    host.deploy(&actor, DEFAULT_TENANT, &packed("2"), None).unwrap();
    host.retire(&actor, DEFAULT_TENANT, &one.tool_id.to_string(), 1).unwrap();
    let err = host.deploy(&actor, DEFAULT_TENANT, &packed("3"), None).unwrap_err();
    assert!(matches!(err, DeployError::TooManyVersions { max: 2, .. }), "{err}");
    // The same bytes again change nothing, so they are no new version.
    assert!(!host.deploy(&actor, DEFAULT_TENANT, &packed("2"), None).unwrap().created);
}

#[test]
fn deploys_beyond_the_bound_are_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let host = ToolHost::open(HostOptions { max_concurrent_deploys: 1, ..options(dir.path()) }).unwrap();
    let actor = Principal::server("test");
    let receiving = host.deploy_slot().unwrap();
    let err = host.deploy(&actor, DEFAULT_TENANT, &packed("1"), None).unwrap_err();
    assert!(matches!(err, DeployError::Busy), "{err}");
    assert!(matches!(host.deploy_slot(), Err(DeployError::Busy)));
    // The slot is held through the deploy made in it, and freed after.
    assert!(host.deploy_in(receiving, &actor, DEFAULT_TENANT, &packed("1"), None).unwrap().created);
    assert!(host.deploy(&actor, DEFAULT_TENANT, &packed("2"), None).unwrap().created);
}

/// A host (in `dir`) with the echoish tool, whose calls need their end
/// user's confirmation under `policy`; its id.
fn confirming(dir: &std::path::Path, policy: crate::cheq::ConfirmationPolicy) -> (Arc<ToolHost>, String) {
    let host = Arc::new(ToolHost::open(options(dir)).unwrap());
    let actor = Principal::server("test");
    let tool_id = host.deploy(&actor, DEFAULT_TENANT, &packed("1"), None).unwrap().tool_id.to_string();
    host.set_confirmation_override(&actor, DEFAULT_TENANT, &tool_id, Some(policy)).unwrap();
    // Confirmed on this server's page: the calls' end user must be one of
    // the tenant's (the hash is never checked here).
    let audit = crate::tenancy::AuditEntry::new(&actor, None, "end_user.put", "ann");
    host.store.put_end_user(DEFAULT_TENANT, "ann", "unused", &audit, u64::MAX).unwrap();
    (host, tool_id)
}

/// Calls version `version` of the tool for end user `ann` with `text`.
async fn call(host: &Arc<ToolHost>, tool_id: &str, version: u32, text: &str) -> Result<ToolResult, InvokeError> {
    call_for(host, tool_id, version, text, "ann").await
}

/// Calls version `version` of the tool for `end_user` with `text`.
async fn call_for(
    host: &Arc<ToolHost>,
    tool_id: &str,
    version: u32,
    text: &str,
    end_user: &str,
) -> Result<ToolResult, InvokeError> {
    let (tool, version) = host.resolve(DEFAULT_TENANT, tool_id, Some(version)).unwrap();
    let text = serde_json::json!(text);
    let input = invocation::input_record(&version.signature, &[("text", &text)]).unwrap();
    let call = Call { end_user: Some(end_user.into()), ..Call::new(input, FrontDoor::A2t) };
    host.invoke(tool, version, call).await
}

/// The name a call gives must be someone who can confirm it: one of the
/// tenant's end users when they confirm on this server's page, anyone on
/// the tenant's external confirmation server (its people are its own).
#[tokio::test]
async fn a_call_waits_only_for_someone_who_can_confirm_it() {
    let dir = tempfile::tempdir().unwrap();
    let always = crate::cheq::ConfirmationPolicy { required: true, when: None };
    let (host, tool_id) = confirming(dir.path(), always);
    let err = call_for(&host, &tool_id, 1, "hi", "zed").await.unwrap_err();
    assert!(matches!(&err, InvokeError::UnknownEndUser { end_user } if end_user == "zed"), "{err}");
    assert_eq!(err.code(), "unknown_end_user");
    assert!(matches!(call(&host, &tool_id, 1, "hi").await, Err(InvokeError::ConfirmationPending(_))));

    let server = ConfirmationServer {
        uri: "https://confirm.example/".into(),
        jwks_url: "https://confirm.example/jwks.json".into(),
    };
    host.set_confirmation_server(&Principal::server("test"), DEFAULT_TENANT, Some(server)).unwrap();
    let Err(InvokeError::ConfirmationPending(pending)) = call_for(&host, &tool_id, 1, "hi", "zed").await else {
        panic!("an external confirmation server's end user was refused")
    };
    assert_eq!(pending.confirmation_uri.as_deref(), Some("https://confirm.example/"));
}

/// A call that would open a transaction past its tenant's bounds is
/// refused, naming the bound; so is one whose transaction is too large.
#[tokio::test]
async fn a_call_that_would_wait_past_its_tenants_bounds_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let always = crate::cheq::ConfirmationPolicy { required: true, when: None };
    let (host, tool_id) = confirming(dir.path(), always);
    let actor = Principal::server("test");
    let quotas = serde_json::json!({ "maxPendingConfirmationsPerEndUser": 1, "maxConfirmationBytes": 8_192 });
    host.update_tenant(&actor, DEFAULT_TENANT, None, &quotas).unwrap();
    let err = call_for(&host, &tool_id, 1, &"x".repeat(10_000), "ann").await.unwrap_err();
    assert!(matches!(err, InvokeError::ConfirmationTooLarge { max: 8_192, .. }), "{err}");
    assert!(matches!(call(&host, &tool_id, 1, "hi").await, Err(InvokeError::ConfirmationPending(_))));
    let err = call(&host, &tool_id, 1, "hi").await.unwrap_err();
    let InvokeError::TooManyPending { limit, max: 1, .. } = &err else { panic!("{err}") };
    assert_eq!(limit.quota(), "maxPendingConfirmationsPerEndUser");
    assert!(
        err.to_string().contains("end user `ann`")
            && err.to_string().contains("(maxPendingConfirmationsPerEndUser, 1)"),
        "{err}"
    );
}

/// Retired between the acceptance and the run: the tool does not run and
/// the transaction ends `retired`, exactly as when the version was retired
/// before the acceptance; recording the refusal's answer afterwards does
/// not turn it into `done`.
#[tokio::test]
async fn a_version_retired_after_the_acceptance_ends_the_transaction_retired() {
    let dir = tempfile::tempdir().unwrap();
    let always = crate::cheq::ConfirmationPolicy { required: true, when: None };
    let (host, tool_id) = confirming(dir.path(), always);
    let actor = Principal::server("test");
    host.deploy(&actor, DEFAULT_TENANT, &packed("2"), None).unwrap();
    let Err(InvokeError::ConfirmationPending(pending)) = call(&host, &tool_id, 1, "hi").await else {
        panic!("the call should wait for its confirmation")
    };
    let (c, confirmed) = host.accept_as_end_user(DEFAULT_TENANT, &pending.id, "ann").unwrap();
    host.retire(&actor, DEFAULT_TENANT, &tool_id, 1).unwrap();

    let Err(err) = host.run_confirmed(&c, confirmed, &Default::default()).await else {
        panic!("a retired version ran")
    };
    assert!(matches!(&err, InvokeError::Retired(m) if m == confirmations::RETIRED_MESSAGE), "{err}");
    let stored = host.confirmation(DEFAULT_TENANT, &pending.id).unwrap().unwrap();
    assert_eq!(stored.state, "retired");
    assert_eq!(State::of(&stored, crate::tenancy::unix_now()), State::Retired);
    assert_eq!(stored.result_status, None);
    // The front door records the refusal it rendered: the state stays.
    host.finish_confirmation(host.running_confirmed(), &pending.id, 410, "{}").unwrap();
    let stored = host.confirmation(DEFAULT_TENANT, &pending.id).unwrap().unwrap();
    assert_eq!((stored.state.as_str(), stored.result_status), ("retired", None));
    let query = crate::tenancy::AuditQuery { tenant: None, before: None, limit: 100 };
    let audit = host.store.audit(&query).unwrap();
    assert!(audit.iter().any(|a| a.action == "cheq.run.retired" && a.target == pending.id), "{audit:?}");
}

/// A condition is evaluated on the tool executor's threads, never on the
/// thread that made the call (in the server, a thread serving HTTP): the
/// heaviest condition the budget accepts takes milliseconds of a core.
#[tokio::test]
async fn confirmation_conditions_are_evaluated_on_the_tool_threads() {
    let dir = tempfile::tempdir().unwrap();
    let when = crate::cheq::ConfirmationPolicy { required: false, when: Some("text == 'confirm'".into()) };
    let (host, tool_id) = confirming(dir.path(), when);
    let caller = std::thread::current().name().map(str::to_string);
    assert_ne!(caller.as_deref(), Some("plinth-tool"));

    let outcome = call(&host, &tool_id, 1, "confirm").await;
    assert!(matches!(outcome, Err(InvokeError::ConfirmationPending(_))), "the condition decided");
    let threads = confirmations::evaluated_on::threads(tool_id.parse().unwrap());
    assert_eq!(threads, [Some("plinth-tool".to_string())]);
}

#[test]
fn each_replica_enforces_its_share_of_a_tenants_rate_and_concurrency() {
    let record =
        |quotas: Quotas| TenantRecord { name: "acme".into(), public_enumeration: false, quotas, created_at: 0 };
    let quotas =
        Quotas { invocations_per_second: 1, invocation_burst: 5, max_concurrent_invocations: 3, ..Quotas::default() };
    let admitted = |tenant: &Tenant| (0..10).take_while(|_| tenant.rate.check().is_ok()).count();
    let alone = Tenant::new(record(quotas.clone()), 1);
    assert_eq!((admitted(&alone), alone.free_slots()), (5, 3));
    // Two replicas: half of each, rounded up, so the fleet admits the quota
    // plus at most one per replica.
    let one_of_two = Tenant::new(record(quotas.clone()), 2);
    assert_eq!((admitted(&one_of_two), one_of_two.free_slots()), (3, 2));
    // More replicas than the quota: each still admits one.
    let one_of_ten = Tenant::new(record(quotas.clone()), 10);
    assert_eq!((admitted(&one_of_ten), one_of_ten.free_slots()), (1, 1));

    // The fleet grows or shrinks: the calls running go on counting, and
    // the new token bucket starts empty — no fresh burst, no fresh slots.
    let before = Tenant::new(record(quotas.clone()), 1);
    let running: Vec<_> = (0..3).map(|_| before.start_call().unwrap()).collect();
    assert!(before.start_call().is_none(), "3 of 3 running");
    let shrunk = before.succeeding(record(quotas.clone()), 2);
    assert_eq!((admitted(&shrunk), shrunk.free_slots()), (0, 0), "still 3 running, over the new 2");
    let grown = shrunk.succeeding(record(quotas.clone()), 1);
    assert_eq!((admitted(&grown), grown.free_slots()), (0, 0));
    // A quota the operator edits starts its bucket afresh; the running
    // calls still count.
    let edited = Quotas { invocation_burst: 4, ..quotas.clone() };
    let grown = grown.succeeding(record(edited), 1);
    assert_eq!((admitted(&grown), grown.free_slots()), (4, 0));
    drop(running);
    assert_eq!(grown.free_slots(), 3, "the calls that ended are given back to the tenant as it is now");
    assert!(grown.start_call().is_some());
}

/// Issue 52: an operator's trust-policy floor is not dropped by a
/// publisher's change made on another replica at the same moment. Each
/// round the operator (on A) requires signatures while a publisher (on B)
/// writes a policy that requires none: whichever order the store sees them
/// in, the tenant ends with the operator's floor (the publisher's write is
/// refused, or comes first and is replaced).
#[test]
fn a_publisher_on_another_replica_cannot_drop_the_floor_an_operator_sets_at_the_same_moment() {
    use base64::Engine;
    let database = crate::testing::TestPostgres::shared().fresh_database();
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let replica = |dir: &tempfile::TempDir| {
        ToolHost::open(HostOptions {
            database_url: Some(database.clone()),
            secrets_key: Some("AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=".into()),
            ..options(dir.path())
        })
        .unwrap()
    };
    let (a, b) = (replica(&dir_a), replica(&dir_b));
    let operator = Principal::server("test");
    a.create_tenant(&operator, "acme", false, &serde_json::json!({})).unwrap();
    b.catch_up().unwrap();
    let publisher = Principal {
        key_id: "pub".into(),
        role: Role::Publisher,
        tenant: Some("acme".into()),
        token: None,
        toolset: None,
    };
    let key = base64::engine::general_purpose::STANDARD.encode([1u8; 32]);
    use crate::supply::TrustPolicyJson;
    use crate::tenancy::Role;
    let strict: TrustPolicyJson = serde_json::from_value(
        serde_json::json!({"requireSignature": true, "keys": [{"name": "k", "publicKey": key}]}),
    )
    .unwrap();
    let open: TrustPolicyJson = serde_json::from_value(serde_json::json!({"requireSignature": false})).unwrap();
    let (mut refused, mut replaced) = (0, 0);
    for round in 0..40 {
        a.set_trust_policy(&operator, "acme", &open).unwrap(); // no floor
        let barrier = std::sync::Barrier::new(2);
        let published = std::thread::scope(|scope| {
            scope.spawn(|| {
                barrier.wait();
                a.set_trust_policy(&operator, "acme", &strict).unwrap();
            });
            let published = scope.spawn(|| {
                barrier.wait();
                b.set_trust_policy(&publisher, "acme", &open)
            });
            published.join().unwrap()
        });
        match published {
            Ok(()) => replaced += 1,
            Err(ChangeError::Forbidden(_)) => refused += 1,
            Err(e) => panic!("round {round}: {e}"),
        }
        b.catch_up().unwrap();
        for (name, replica) in [("A", &a), ("B", &b)] {
            let policy = replica.trust_policy("acme");
            assert!(policy.require_signature, "round {round}: {name} lost the operator's floor");
        }
    }
    assert_eq!(refused + replaced, 40);
}

#[test]
fn a_replica_catches_up_with_the_changes_another_made() {
    let database = crate::testing::TestPostgres::shared().fresh_database();
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let replica = |dir: &tempfile::TempDir| {
        ToolHost::open(HostOptions {
            database_url: Some(database.clone()),
            secrets_key: Some("AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=".into()),
            ..options(dir.path())
        })
        .unwrap()
    };
    let (a, b) = (replica(&dir_a), replica(&dir_b));
    assert!(a.is_ready() && b.is_ready());
    let operator = Principal::server("test");
    a.create_tenant(&operator, "acme", false, &serde_json::json!({ "maxTools": 7 })).unwrap();
    a.put_secret(&operator, "acme", "api-key", "s3cret").unwrap();
    a.put_config(&operator, "acme", "echo", "backend-url", "http://backend").unwrap();
    a.deploy(&operator, "acme", &packed("v1"), None).unwrap();
    assert!(b.tenant("acme").is_none(), "B has not read the log yet");

    let topics = b.catch_up().unwrap();
    assert_eq!(topics, [Topic::Tenants, Topic::Secrets, Topic::Config, Topic::Versions]);
    assert_eq!(b.tenant("acme").unwrap().record.quotas.max_tools, 7);
    assert_eq!(b.secret_ids("acme"), ["api-key"]);
    assert_eq!(b.stored_config("acme")["echo"]["backend-url"], "http://backend");
    assert_eq!(b.registry().live_tools("acme"), 1);
    assert!(b.catch_up().unwrap().is_empty(), "nothing new");

    // A provider set on A is one B serves, once it caught up.
    let settings = crate::host::authorizations::ProviderSettings {
        issuer: Some("https://login.mail.example".into()),
        client_id: "plinth".into(),
        client_secret: Some("s3cret".into()),
        ..Default::default()
    };
    a.put_authorization_provider(&operator, "acme", "mail", settings).unwrap();
    assert!(b.authorization_providers("acme").is_empty(), "not before it caught up");
    assert_eq!(b.catch_up().unwrap(), [Topic::Authorizations]);
    let served = b.authorization_providers("acme");
    assert_eq!(served.len(), 1);
    assert_eq!((served[0].0.as_str(), served[0].2), ("mail", true), "the id, and a secret set");
    assert_eq!(served[0].1.client_secret, None, "never read back");

    // Removals reach it too.
    a.delete_secret(&operator, "acme", "api-key").unwrap();
    assert_eq!(b.catch_up().unwrap(), [Topic::Secrets]);
    assert!(b.secret_ids("acme").is_empty());

    // A tenant changed on A a moment ago is changed on B from A's version,
    // not from B's stale copy.
    a.update_tenant(&operator, "acme", None, &serde_json::json!({ "maxTools": 9 })).unwrap();
    let changed = b.update_tenant(&operator, "acme", Some(true), &serde_json::json!({})).unwrap();
    assert_eq!((changed.public_enumeration, changed.quotas.max_tools), (true, 9));
    assert!(matches!(
        b.create_tenant(&operator, "beta", false, &serde_json::json!({})).and(a.create_tenant(
            &operator,
            "beta",
            false,
            &serde_json::json!({})
        )),
        Err(ChangeError::Conflict(_))
    ));
}

/// A tool whose calls ran into their deadline while computing, or out of
/// memory, twice is demoted: its next calls run on the low-priority threads
/// (nice 19) and never start on the caller's thread. Other tools, and failures
/// that cost little (a trap, a wait on a slow backend), are not.
#[test]
fn a_tool_that_spins_to_its_deadline_or_bombs_its_memory_runs_at_low_priority() {
    use crate::runtime::CallError;
    let executors = executors::Executors::new(2).unwrap();
    // A thread's scheduling policy and nice value (the tests may run niced).
    let priority = || {
        // SAFETY: scheduling queries of the calling thread's own id.
        unsafe {
            let tid = libc::gettid();
            (libc::sched_getscheduler(tid), libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t))
        }
    };
    let ours = priority();
    // The thread a call of the tool would run on, and its priority.
    let runs_on = |tool: Uuid| {
        let pool = executors.for_tool(tool);
        let handle = pool.handle().clone();
        let (name, theirs) = handle
            .block_on(handle.spawn(async move { (std::thread::current().name().map(str::to_string), priority()) }))
            .unwrap();
        (pool.starts_inline(), name.unwrap_or_default(), theirs)
    };
    let (spinner, bomb, flaky, waiting, other) =
        (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let normal = runs_on(other);
    assert!(normal.0 && normal.1 == "plinth-tool", "{normal:?}");
    assert_eq!(normal.2, ours, "the normal tool threads keep the server's priority");

    let deadline = Duration::from_millis(200);
    let offend = || {
        executors.ran(
            spinner,
            "spin_forever",
            &Err(CallError::Timeout { deadline, computing: true }),
            deadline,
            deadline,
        );
        executors.ran(bomb, "memory_bomb", &Err(CallError::ResourceExhausted), deadline, deadline);
        executors.ran(flaky, "panic_at_once", &Err(CallError::Trapped("a panic".into())), deadline, deadline);
        // Waited out its deadline on a backend, computing 100 µs of it.
        let computed = Duration::from_micros(100);
        executors.ran(
            waiting,
            "slow_backend",
            &Err(CallError::Timeout { deadline, computing: false }),
            deadline,
            computed,
        );
    };
    // All but the waiting one computed long in their calls lately (no
    // single call makes a tool costly).
    for _ in 0..2 {
        for busy in [spinner, bomb, flaky] {
            executors.ran(busy, "busy", &Ok(wasmtime::component::Val::Bool(true)), deadline, deadline);
        }
    }
    offend();
    // A costly tool's threads: 10 steps of nice below the server's, at
    // `SCHED_IDLE` unless the guard lifted them (`executors::CostlyThreads`,
    // whose own test follows the policy).
    let costly_nice = (ours.1 + 10).min(19);
    let is_costly = |(inline, name, (policy, nice)): (bool, String, (i32, i32))| {
        !inline && name == "plinth-tool-costly" && nice == costly_nice && [ours.0, libc::SCHED_IDLE].contains(&policy)
    };
    for once in [spinner, bomb] {
        // Not demoted; its calls computed long, so they start off the HTTP threads.
        let runs = runs_on(once);
        assert!(is_costly(runs.clone()), "a first offence may be bad luck: not demoted: {runs:?}");
    }
    offend();
    for demoted in [spinner, bomb] {
        let (inline, name, (_, nice)) = runs_on(demoted);
        assert_eq!((inline, name.as_str(), nice), (false, "plinth-tool-low", 19));
    }
    assert_eq!(runs_on(other), normal);
    // Only a tool that burned CPU or memory is demoted; one whose calls
    // computed long lately starts them on the costly tools' threads, not
    // inline; one whose calls waited long is not costly.
    assert!(is_costly(runs_on(flaky)), "only a tool that burned CPU or memory is demoted");
    assert_eq!(runs_on(waiting), normal, "a tool that waits is neither demoted nor costly");
    executors.shutdown();
}

/// Where a tool's next calls start depends on the CPU time its calls took,
/// not on how long they took (real components): a cheap call whose thread
/// the kernel preempted for milliseconds leaves its tool cheap — counted by
/// the clock, one such call made a cheap tool costly on a busy machine —
/// and a tool that computes 5 ms a call starts its calls on the costly
/// tools' threads, from its fourth.
#[test]
fn a_tool_is_costly_for_the_cpu_its_calls_take_not_for_how_long_they_take() {
    let dir = tempfile::tempdir().unwrap();
    // Pooled instances, as a server has them: an instance made afresh
    // costs a debug build more CPU than a cheap call's whole budget.
    let pooled = HostOptions { runtime: RuntimeConfig::default(), ..options(dir.path()) };
    let host = Arc::new(ToolHost::open(pooled).unwrap());
    let actor = Principal::server("test");
    let fixture = |file: &str| {
        let tools = crate::package::proptests::packed_tools();
        tools.iter().find(|tool| tool.name.ends_with(file)).unwrap_or_else(|| panic!("no {file}")).bytes.clone()
    };
    // Compiled, and the host's threads started, before any thread is
    // pinned: threads inherit their creator's CPUs.
    let echo = host.deploy(&actor, DEFAULT_TENANT, &fixture("/echo.wasm"), None).unwrap().tool_id;
    let compute = host.deploy(&actor, DEFAULT_TENANT, &fixture("/compute.wasm"), None).unwrap().tool_id;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    for _ in 0..20 {
        runtime.block_on(call(&host, &echo.to_string(), 1, "warm")).unwrap();
    }
    let is_cheap = |tool: Uuid| host.executor.as_ref().unwrap().for_tool(tool).starts_inline();
    assert!(is_cheap(echo), "echo is cheap on a quiet thread");

    // A caller and a spinner share one CPU: the kernel preempts each every
    // few milliseconds, and echo's calls with the caller.
    // SAFETY: no arguments; the CPU this thread runs on.
    let cpu = usize::try_from(unsafe { libc::sched_getcpu() }).expect("sched_getcpu tells the CPU");
    let pin = move || {
        // SAFETY: a CPU set on the stack, for the calling thread only.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            let pinned = libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
            assert_eq!(pinned, 0, "pinning a thread to CPU {cpu}: {}", std::io::Error::last_os_error());
        }
    };
    /// Stops the spinner however the test ends.
    struct Spinning(Arc<std::sync::atomic::AtomicBool>, Option<std::thread::JoinHandle<()>>);
    impl Drop for Spinning {
        fn drop(&mut self) {
            self.0.store(true, std::sync::atomic::Ordering::Relaxed);
            let _ = self.1.take().map(std::thread::JoinHandle::join);
        }
    }
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let spinning = Spinning(
        stop.clone(),
        Some(std::thread::spawn(move || {
            pin();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        })),
    );
    const CALLS: usize = 1500;
    let caller = {
        let host = host.clone();
        std::thread::spawn(move || {
            pin();
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            // Calls that took over a millisecond, and after which echo
            // was costly.
            let (mut preempted, mut left_costly) = (0, 0);
            for _ in 0..CALLS {
                let started = std::time::Instant::now();
                let outcome = runtime.block_on(call(&host, &echo.to_string(), 1, "hello"));
                assert!(matches!(outcome, Ok(ToolResult::Outputs(_))), "{outcome:?}");
                preempted += usize::from(started.elapsed() >= Duration::from_millis(1));
                left_costly += usize::from(!host.executor.as_ref().unwrap().for_tool(echo).starts_inline());
            }
            (preempted, left_costly)
        })
    };
    let counted = caller.join();
    drop(spinning);
    let (preempted, left_costly) = counted.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    eprintln!("of {CALLS} echo calls, {preempted} took over 1 ms, and {left_costly} left echo costly");
    assert!(preempted >= 10, "the kernel preempted too few calls to tell ({preempted})");
    // Counted by the clock, each preempted call made echo costly, and the
    // few after it stayed so (twice as many calls left it costly as were
    // preempted, 431 and 227 in one run). By the CPU, none should; the
    // kernel's work for a call on a loaded machine (faults under memory
    // pressure) can still make a few costly (0 to 51 seen).
    assert!(left_costly * 2 < preempted, "{left_costly} calls of {CALLS} left echo costly, {preempted} preempted");

    let (tool, version) = host.resolve(DEFAULT_TENANT, &compute.to_string(), None).unwrap();
    let micros = serde_json::json!(5000);
    let input = invocation::input_record(&version.signature, &[("micros", &micros)]).unwrap();
    for call in 1..=3 {
        assert!(is_cheap(compute), "no single call makes a tool costly");
        let input = input.clone();
        let outcome = runtime.block_on(host.invoke(tool.clone(), version.clone(), Call::new(input, FrontDoor::A2t)));
        assert!(matches!(outcome, Ok(ToolResult::Outputs(_))), "call {call}: {outcome:?}");
    }
    assert!(!is_cheap(compute), "a tool that computes 5 ms a call is costly from its fourth");
}

/// A demoted tool's calls take turns: one at a time, and after a call that
/// offends again the tool rests three times as long as that call ran, twice
/// that after the next offence; a call that gets no turn within its
/// deadline is refused at its deadline. Other tools never wait.
#[test]
fn a_demoted_tools_calls_take_turns_and_rest_after_each_new_offence() {
    use crate::runtime::CallError;
    use std::time::Instant;
    let executors = executors::Executors::new(2).unwrap();
    let (spinner, other) = (Uuid::new_v4(), Uuid::new_v4());
    // A call of the spinner that computed for `ran_for` into its deadline.
    let spun = |ran_for| {
        let outcome = Err(CallError::Timeout { deadline: ran_for, computing: true });
        executors.ran(spinner, "spin_forever", &outcome, ran_for, ran_for);
    };
    // The second offence demotes, and imposes no rest.
    for _ in 0..2 {
        spun(Duration::from_secs(3));
    }
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        assert!(executors.turn(other, Duration::ZERO).await.unwrap().is_none(), "not demoted: no turn to wait for");
        // No rest for the offences before (3 s calls would rest 9 s).
        let first = executors.turn(spinner, Duration::from_millis(500)).await.unwrap();
        assert!(first.is_some(), "no rest for the offences before");
        // While it runs, another call gives up at its deadline.
        let asked = Instant::now();
        assert!(executors.turn(spinner, Duration::from_millis(50)).await.is_err());
        assert!(asked.elapsed() >= Duration::from_millis(50));
        // It offends again after 100 ms: about 300 ms of rest.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let offended = Instant::now();
        spun(Duration::from_millis(100));
        drop(first);
        assert!(executors.turn(spinner, Duration::from_millis(100)).await.is_err(), "within the rest");
        assert!(offended.elapsed() >= Duration::from_millis(100), "refused at its deadline, not at once");
        let second = executors.turn(spinner, Duration::from_secs(1)).await.unwrap();
        let rested = offended.elapsed();
        assert!(second.is_some());
        assert!(rested >= Duration::from_millis(300), "rested {rested:?}");
        // Offending again after 100 ms: twice as long, 600 ms (the lengths
        // themselves are `executors::rest_after`'s unit test).
        tokio::time::sleep(Duration::from_millis(100)).await;
        let offended = Instant::now();
        spun(Duration::from_millis(100));
        drop(second);
        assert!(executors.turn(spinner, Duration::from_millis(400)).await.is_err(), "within the doubled rest");
        let third = executors.turn(spinner, Duration::from_secs(5)).await.unwrap();
        let rested = offended.elapsed();
        assert!(third.is_some());
        assert!(rested >= Duration::from_millis(600), "rested {rested:?}");
    });
    executors.shutdown();
}

/// A request without a key for a tenant that does not exist — a CHEQ
/// transaction, a confirmation-page or catalog session with a made-up
/// cookie — is answered from memory: the store is never asked (here it
/// is down, and only a real tenant's lookup finds out).
#[test]
fn lookups_for_a_tenant_that_does_not_exist_never_reach_the_store() {
    let postgres = crate::testing::TestPostgres::start();
    let dir = tempfile::tempdir().unwrap();
    let host = Arc::new(
        ToolHost::open(HostOptions {
            database_url: Some(postgres.fresh_database()),
            secrets_key: Some("AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=".into()),
            ..options(dir.path())
        })
        .unwrap(),
    );
    postgres.stop();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let log_in = |tenant: &str| {
        runtime.block_on(host.log_in_end_user(tenant, "alice", "a-password", std::net::Ipv4Addr::LOCALHOST.into()))
    };
    // An end user of a made-up tenant is refused like a wrong password, not
    // looked up; of a real tenant, the store is asked.
    assert!(matches!(log_in("nosuch"), Err(LoginError::Invalid)));
    assert!(matches!(log_in(DEFAULT_TENANT), Err(LoginError::Store(_))));
    let id = uuid::Uuid::new_v4().to_string();
    for tenant in ["nosuch", "made-up-7"] {
        assert!(matches!(host.page_session(tenant, "made-up-cookie"), Ok(None)), "{tenant}");
        assert!(matches!(host.designer_session(tenant, "made-up-cookie"), Ok(None)), "{tenant}");
        assert!(matches!(host.confirmation(tenant, &id), Ok(None)), "{tenant}");
    }
    // The same lookups for a tenant that exists do ask the store, and fail.
    assert!(host.page_session(DEFAULT_TENANT, "made-up-cookie").is_err());
    assert!(host.confirmation(DEFAULT_TENANT, &id).is_err());

    // OAuth's endpoints answer a made-up tenant as a real one answers a
    // made-up code, token or client (docs/oauth.md), without the store.
    let from: std::net::IpAddr = std::net::Ipv4Addr::LOCALHOST.into();
    let client = "plinth_client_madeupmadeupmadeupmadeupmadeupmadeupmad";
    let exchange = |tenant: &str| host.exchange_code(tenant, "plinth_ac_made_up", client, None, "v", None);
    assert_eq!(exchange("nosuch").map(|_| ()).unwrap_err().code, "invalid_grant");
    let refresh = host.refresh_tokens("nosuch", "plinth_rt_made_up", client, None, None).map(|_| ());
    assert_eq!(refresh.unwrap_err().code, "invalid_client", "a registered client unknown: register again");
    assert!(host.revoke_token("nosuch", "plinth_rt_made_up", client).is_ok());
    let metadata = serde_json::json!({
        "client_name": "x", "application_type": "native", "redirect_uris": ["http://127.0.0.1:1/cb"]
    });
    let registered = host.register_oauth_client("nosuch", &metadata, from).unwrap();
    assert!(registered["client_id"].as_str().is_some_and(|id| id.starts_with("plinth_client_")), "{registered}");
    let unknown = runtime.block_on(host.oauth_client("nosuch", client, from)).map(|_| ()).unwrap_err();
    assert_eq!(unknown.code, "invalid_client");
    assert!(host.access_grant("nosuch", "plinth_at_made_up").unwrap().is_none());
    // A real tenant's ask the store, and fail.
    assert_eq!(exchange(DEFAULT_TENANT).map(|_| ()).unwrap_err().code, "temporarily_unavailable");
    assert!(host.register_oauth_client(DEFAULT_TENANT, &metadata, from).is_err());
}

#[test]
fn an_access_token_past_its_expiry_or_revoked_grants_nothing() {
    let (host, _dir, tokens) = host_with_a_grant();
    let grant = host.access_grant("default", &tokens.access_token).unwrap().expect("a fresh token is valid");
    assert_eq!((grant.end_user.as_str(), grant.scopes.as_slice()), ("alice", ["tools:read".to_string()].as_slice()));
    assert!(host.access_grant("acme", &tokens.access_token).unwrap().is_none(), "another tenant's");

    // Expired: its row says so.
    let sha = crate::digest::sha256_hex(tokens.access_token.as_bytes());
    let mut row = host.store.oauth_grant(&sha).unwrap().unwrap();
    row.token_sha256 = crate::digest::sha256_hex(b"plinth_at_expired");
    row.expires_at = crate::tenancy::unix_now() - 1;
    host.store.insert_oauth_grants(&[row]).unwrap();
    assert!(host.access_grant("default", "plinth_at_expired").unwrap().is_none());

    // Revoked with its grant.
    host.revoke_token("default", &tokens.refresh_token, "plinth_client_x").unwrap();
    assert!(host.access_grant("default", &tokens.access_token).unwrap().is_none());
}

#[test]
fn open_registration_keeps_a_bounded_number_of_clients_per_tenant() {
    let dir = tempfile::tempdir().unwrap();
    let host = ToolHost::open(options(dir.path())).unwrap();
    let metadata = serde_json::json!({
        "client_name": "x", "application_type": "native", "redirect_uris": ["http://127.0.0.1/cb"]
    });
    // Each from an address of its own: one address is rated.
    let address = |n: u64| std::net::IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + n as u32));
    let mut ids = Vec::new();
    for n in 0..super::oauth::MAX_REGISTERED_CLIENTS {
        let registered = host.register_oauth_client("default", &metadata, address(n)).unwrap();
        ids.push(registered["client_id"].as_str().unwrap().to_string());
    }
    // Full: the oldest client never used makes room for a newcomer.
    let newcomer = host.register_oauth_client("default", &metadata, address(1 << 20)).unwrap();
    assert!(host.store.oauth_client("default", &ids[0]).unwrap().is_none(), "the oldest unused client went");
    assert!(host.store.oauth_client("default", newcomer["client_id"].as_str().unwrap()).unwrap().is_some());
    // When every client is in use, none is evicted and a newcomer is refused.
    let now = crate::tenancy::unix_now();
    for id in &ids[1..] {
        host.store.touch_oauth_client("default", id, now).unwrap();
    }
    host.store.touch_oauth_client("default", newcomer["client_id"].as_str().unwrap(), now).unwrap();
    let refused = host.register_oauth_client("default", &metadata, address(1 << 21)).unwrap_err();
    assert_eq!(refused.code, "temporarily_unavailable");
    assert!(ids[1..].iter().all(|id| host.store.oauth_client("default", id).unwrap().is_some()));
    assert!(
        host.register_oauth_client("acme", &metadata, address(1 << 22)).is_ok(),
        "another tenant has its own bound"
    );
    // Metadata past 16 KiB is refused before anything is stored.
    let huge = serde_json::json!({ "client_name": "x".repeat(20_000), "redirect_uris": ["http://127.0.0.1/cb"] });
    assert_eq!(
        host.register_oauth_client("acme", &huge, address(1 << 23)).unwrap_err().code,
        "invalid_client_metadata"
    );
}

#[test]
fn one_address_registers_a_few_clients_then_waits() {
    let dir = tempfile::tempdir().unwrap();
    let host = ToolHost::open(options(dir.path())).unwrap();
    let metadata = serde_json::json!({
        "client_name": "x", "application_type": "native", "redirect_uris": ["http://127.0.0.1/cb"]
    });
    let flooder: std::net::IpAddr = "2001:db8:1::7".parse().unwrap();
    let mut refused = None;
    for n in 0..100u16 {
        // Another address of the same /48 site counts as the same client.
        let from = std::net::IpAddr::V6(std::net::Ipv6Addr::new(0x2001, 0xdb8, 1, n, 0, 0, 0, 1));
        if let Err(e) = host.register_oauth_client("default", &metadata, from) {
            refused = Some((n, e));
            break;
        }
    }
    let (n, e) = refused.expect("one site cannot register without end");
    assert!(n >= 10, "a few registrations pass first: {n}");
    assert_eq!((e.code, e.retry_after.is_some()), ("temporarily_unavailable", true));
    assert!(host.register_oauth_client("default", &metadata, flooder).is_err());
    assert!(host.register_oauth_client("default", &metadata, "192.0.2.1".parse().unwrap()).is_ok(), "others register");
}

#[test]
fn token_requests_are_rated_by_the_ipv6_site_like_registrations_and_logins() {
    let dir = tempfile::tempdir().unwrap();
    let host = ToolHost::open(options(dir.path())).unwrap();
    let mut refused = None;
    for n in 0..1000u16 {
        // Each request from another /64 of one /48 site: the same client.
        let from = std::net::IpAddr::V6(std::net::Ipv6Addr::new(0x2001, 0xdb8, 1, n, 0, 0, 0, 1));
        if let Err(e) = host.admit_token_request(from) {
            refused = Some((n, e));
            break;
        }
    }
    let (n, e) = refused.expect("one site rotating its /64s is rated as one client");
    assert!(n >= 60, "the burst passes first: {n}");
    assert_eq!((e.code, e.retry_after.is_some()), ("temporarily_unavailable", true));
    // Another /64 of that site is refused too; another site is not.
    assert!(host.admit_token_request("2001:db8:1:ffff::9".parse().unwrap()).is_err());
    assert!(host.admit_token_request("2001:db8:2::1".parse().unwrap()).is_ok());
}

/// A tenant with end user alice and a registered client `plinth_client_x`
/// (registered two days ago) → (host, its data dir, a fresh grant's tokens).
fn host_with_a_grant() -> (ToolHost, tempfile::TempDir, super::oauth::IssuedTokens) {
    let dir = tempfile::tempdir().unwrap();
    let host = ToolHost::open(options(dir.path())).unwrap();
    alice_and_a_client(&host);
    let tokens = grant_for(&host, "http://127.0.0.1:8080/mcp");
    (host, dir, tokens)
}

/// End user alice and client `plinth_client_x` (registered two days ago).
fn alice_and_a_client(host: &ToolHost) {
    let audit = crate::tenancy::AuditEntry::new(&Principal::server("test"), Some("default"), "end_user.put", "alice");
    host.store.put_end_user("default", "alice", "not-a-real-hash", &audit, u64::MAX).unwrap();
    let two_days_ago = crate::tenancy::unix_now() - 2 * 24 * 3600;
    assert!(host.store.register_oauth_client("default", "plinth_client_x", "{}", two_days_ago, 10).unwrap());
}

/// Tokens of alice, by client `plinth_client_x`, for `resource`.
fn grant_for(host: &ToolHost, resource: &str) -> super::oauth::IssuedTokens {
    let asked = super::oauth::Authorization {
        client_id: "plinth_client_x".into(),
        redirect_uri: "http://127.0.0.1/cb".into(),
        redirect_uri_given: true,
        code_challenge: "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM".into(),
        scopes: vec!["tools:read".into()],
        resource: resource.into(),
    };
    let code = host.issue_code("default", "alice", &asked).unwrap();
    let verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
    host.exchange_code("default", &code, "plinth_client_x", Some("http://127.0.0.1/cb"), verifier, None).unwrap()
}

#[test]
fn a_deleted_toolsets_oauth_tokens_do_not_open_a_toolset_recreated_under_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let host = ToolHost::open(options(dir.path())).unwrap();
    let actor = Principal::server("test");
    host.put_toolset(&actor, DEFAULT_TENANT, "travel", "d", &[]).unwrap();
    alice_and_a_client(&host);
    let travel = "http://127.0.0.1:8080/t/default/toolsets/travel/mcp";
    let tokens = grant_for(&host, travel);
    let untouched = grant_for(&host, "http://127.0.0.1:8080/t/default/mcp");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let opens = |token: &str, resource: &str| {
        runtime.block_on(host.token_grant(DEFAULT_TENANT, token, resource)).unwrap().is_some()
    };
    assert!(opens(&tokens.access_token, travel));

    host.delete_toolset(&actor, DEFAULT_TENANT, "travel").unwrap();
    host.put_toolset(&actor, DEFAULT_TENANT, "travel", "someone else's", &[]).unwrap();
    assert!(!opens(&tokens.access_token, travel), "the old access token opens the new toolset");
    let refreshed = host.refresh_tokens(DEFAULT_TENANT, &tokens.refresh_token, "plinth_client_x", None, None);
    assert_eq!(refreshed.map(|_| ()).unwrap_err().code, "invalid_grant", "the old refresh token is refused");
    // Tokens for another MCP URL of the tenant are kept.
    assert!(opens(&untouched.access_token, "http://127.0.0.1:8080/t/default/mcp"));
}

#[test]
fn a_used_client_outlives_its_tokens_and_one_swept_at_last_is_told_to_register_again() {
    let (host, _dir, tokens) = host_with_a_grant();
    let refresh = |token: &str| host.refresh_tokens("default", token, "plinth_client_x", None, None);
    // Its tokens expire and are swept; the sweep as the server runs it (a
    // day for clients never used, a refresh token's life and a margin
    // after the last use) keeps the client: it signs in again under the id
    // it has stored.
    host.store.sweep_oauth_grants(i64::MAX).unwrap();
    let now = crate::tenancy::unix_now();
    let kept_after_use = super::oauth::CLIENT_KEPT_AFTER_USE.as_secs() as i64;
    assert_eq!(host.store.sweep_oauth_clients(now - 24 * 3600, now - kept_after_use).unwrap(), 0);
    assert_eq!(refresh(&tokens.refresh_token).unwrap_err().code, "invalid_grant", "its token is gone, not the client");
    // Long idle, it is swept at last: the token endpoint says
    // `invalid_client`, on which clients register again.
    assert_eq!(host.store.sweep_oauth_clients(now - 24 * 3600, now + 1).unwrap(), 1);
    let refused = refresh(&tokens.refresh_token).unwrap_err();
    assert_eq!(refused.code, "invalid_client", "{refused}");
    let verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
    let exchanged = host.exchange_code("default", "plinth_ac_x", "plinth_client_x", None, verifier, None);
    assert_eq!(exchanged.unwrap_err().code, "invalid_grant", "a made-up code is no grant, whoever sends it");
}

#[test]
fn a_grant_keeps_a_few_tokens_however_often_it_refreshes_and_its_refreshes_are_rated() {
    let (host, _dir, first) = host_with_a_grant();
    let sha = |token: &str| crate::digest::sha256_hex(token.as_bytes());
    let mut latest = first.clone();
    for _ in 0..super::oauth::KEPT_TOKENS_PER_GRANT + 1 {
        latest = host.refresh_tokens("default", &latest.refresh_token, "plinth_client_x", None, None).unwrap();
    }
    // The first tokens are long replaced: deleted, not kept for good.
    assert!(host.store.oauth_grant(&sha(&first.access_token)).unwrap().is_none());
    assert!(host.store.oauth_grant(&sha(&first.refresh_token)).unwrap().is_none());
    assert!(host.access_grant("default", &latest.access_token).unwrap().is_some());
    // One grant refreshing without pause is told to wait.
    let refused = loop {
        match host.refresh_tokens("default", &latest.refresh_token, "plinth_client_x", None, None) {
            Ok(tokens) => latest = tokens,
            Err(e) => break e,
        }
    };
    assert_eq!((refused.code, refused.retry_after.is_some()), ("temporarily_unavailable", true), "{refused}");
    assert!(host.access_grant("default", &latest.access_token).unwrap().is_some(), "the refusal revoked nothing");
}

/// An external token may act only as one of the tenant's end users, unless
/// the operator opted in to any name.
#[tokio::test(flavor = "multi_thread")]
async fn an_external_token_acts_only_as_an_existing_end_user_unless_the_operator_allows_any() {
    let dir = tempfile::tempdir().unwrap();
    let host = Arc::new(ToolHost::open(options(dir.path())).unwrap());
    let actor = Principal::server("test");
    host.put_end_user(&actor, DEFAULT_TENANT, "alice", "alice-password").await.unwrap();
    let setting = super::oauth::OAuthSetting { issuer: Some("https://idp.example".into()), ..Default::default() };
    assert!(host.end_user_may_act(DEFAULT_TENANT, &setting, "alice").unwrap());
    assert!(!host.end_user_may_act(DEFAULT_TENANT, &setting, "mallory").unwrap(), "no such end user");
    assert!(!host.end_user_may_act("acme", &setting, "alice").unwrap(), "another tenant's end user");
    let any = super::oauth::OAuthSetting { any_end_user: true, ..setting };
    assert!(host.end_user_may_act(DEFAULT_TENANT, &any, "mallory").unwrap());
}

#[tokio::test(flavor = "multi_thread")]
async fn re_verifying_live_versions_runs_apart_and_waits_its_turn() {
    use base64::Engine;
    use std::future::Future;
    let dir = tempfile::tempdir().unwrap();
    let host = Arc::new(ToolHost::open(options(dir.path())).unwrap());
    let actor = Principal::server("test");
    host.deploy(&actor, DEFAULT_TENANT, &packed("1"), None).unwrap();
    let key = base64::engine::general_purpose::STANDARD.encode([1u8; 32]);
    let policy = serde_json::json!({"requireSignature": true, "keys": [{"name": "k", "publicKey": key}]});
    // Setting the policy stores it; the live versions are judged apart.
    host.set_trust_policy(&actor, DEFAULT_TENANT, &serde_json::from_value(policy).unwrap()).unwrap();
    let held = host.supply.reverifying.clone().acquire_many_owned(super::supply::MAX_REVERIFYING as u32).await.unwrap();
    let mut waiting = Box::pin(host.clone().refused_versions(DEFAULT_TENANT.into()));
    let pending = std::future::poll_fn(|cx| std::task::Poll::Ready(waiting.as_mut().poll(cx).is_pending())).await;
    assert!(pending, "every re-verification slot is taken: it waits");
    drop(held);
    let refused = waiting.await;
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(host.supply.reverifying.available_permits(), super::supply::MAX_REVERIFYING, "its slot is given back");
}

#[test]
fn toolset_versions_diff_by_pin_resolve_their_tools_now_and_survive_a_restart() {
    use crate::host::toolsets::EntryState;
    use crate::store::ToolsetEntry;
    let dir = tempfile::tempdir().unwrap();
    let actor = Principal::server("test");
    let host = ToolHost::open(options(dir.path())).unwrap();
    let one = host.deploy(&actor, DEFAULT_TENANT, &packed("1"), None).unwrap();
    host.deploy(&actor, DEFAULT_TENANT, &packed("2"), None).unwrap();
    let name = host.registry().get(&one.tool_id).unwrap().name.clone();
    let entry = |version| ToolsetEntry { name: name.clone(), version, ..Default::default() };

    let first = host.put_toolset(&actor, DEFAULT_TENANT, "travel", "d", &[entry(Some(1))]).unwrap();
    assert!(first.created);
    assert_eq!(first.toolset.version, 1);
    let same = host.put_toolset(&actor, DEFAULT_TENANT, "travel", "d", &[entry(Some(1))]).unwrap();
    assert!(!same.created, "the same content makes no version");
    let second = host.put_toolset(&actor, DEFAULT_TENANT, "travel", "d2", &[entry(None)]).unwrap();
    assert_eq!(second.toolset.version, 2);

    // The diff: the pin moved from 1 to following (version 2 now), no
    // signature change, so nothing breaks.
    let diff = host.diff_toolsets(DEFAULT_TENANT, "travel", 1, 2).unwrap();
    assert!(diff.description_changed && diff.added.is_empty() && diff.removed.is_empty());
    assert_eq!(diff.changed.len(), 1);
    assert_eq!((diff.changed[0].from, diff.changed[0].to), (Some(1), None));
    assert!(diff.changed[0].signature.as_ref().is_some_and(|d| d.changes.is_empty()));
    assert!(!diff.is_breaking());
    assert!(host.diff_toolsets(DEFAULT_TENANT, "travel", 1, 3).is_none());

    // Each version resolves now: the pin, and the current version.
    let resolved = |t: &crate::store::StoredToolset| {
        host.toolset_tools(t).iter().map(|t| (t.state, t.version.as_ref().map(|v| v.number))).collect::<Vec<_>>()
    };
    assert_eq!(resolved(&first.toolset), [(EntryState::Live, Some(1))]);
    assert_eq!(resolved(&second.toolset), [(EntryState::Live, Some(2))]);
    // A call: a pinned tool at its pin only; a followed one at its current
    // version, or at an older live one a listing made before gave out.
    let tool = host.registry().get(&one.tool_id).unwrap();
    let reached = |toolset: &crate::store::StoredToolset, asked| {
        ToolHost::resolve_in(Some(toolset), tool.clone(), asked).map(|(_, v)| v.number)
    };
    assert_eq!(reached(&first.toolset, None).unwrap(), 1);
    assert!(matches!(reached(&first.toolset, Some(2)), Err(InvokeError::OutsideToolset(_))));
    assert_eq!(reached(&second.toolset, None).unwrap(), 2);
    assert_eq!(reached(&second.toolset, Some(1)).unwrap(), 1, "listed as current before version 2");

    // Retiring the pinned version is refused, then forced and flagged.
    let id = one.tool_id.to_string();
    let refused = host.retire(&actor, DEFAULT_TENANT, &id, 1);
    assert!(matches!(&refused, Err(ChangeError::PinnedByToolsets { toolsets, .. }) if toolsets == &["travel"]));
    host.retire_forced(&actor, DEFAULT_TENANT, &id, 1, true).unwrap();
    assert_eq!(resolved(&first.toolset), [(EntryState::RetiredPinned, Some(1))]);
    drop(host);

    // What was stored comes back.
    let host = ToolHost::open(options(dir.path())).unwrap();
    let listed: Vec<u32> = host.toolsets(DEFAULT_TENANT).iter().map(|t| t.version).collect();
    assert_eq!(listed, [2]);
    assert_eq!(host.toolset_versions(DEFAULT_TENANT, "travel").len(), 2);
    host.delete_toolset(&actor, DEFAULT_TENANT, "travel").unwrap();
    assert!(host.toolset(DEFAULT_TENANT, "travel", Some(1)).is_none());
    assert!(host.toolsets(DEFAULT_TENANT).is_empty());
}

/// A refused call is counted in memory, by the signature's parameters and
/// `(unknown)`, never a caller's made-up name; the console shows a value
/// only where the tenant allows it and never a private input's.
#[test]
fn refusals_keep_no_private_value_and_made_up_names_never_reach_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let host = ToolHost::open(options(dir.path())).unwrap();
    let actor = Principal::server("test");
    let id = host.deploy(&actor, DEFAULT_TENANT, &packed("1"), None).unwrap().tool_id.to_string();
    let (tool, version) = host.resolve(DEFAULT_TENANT, &id, None).unwrap();
    let number = serde_json::json!(42);
    let refuse = |name: &str| {
        let refused = host.check_input(&tool, &version, FrontDoor::Otc, None, &[(name, &number), ("text", &number)]);
        assert!(refused.is_err());
    };
    refuse("made_up_first");
    let shown = |n: usize| host.recent_calls(DEFAULT_TENANT, &ConsoleFilter::default(), None, n);
    assert_eq!(shown(1)[0].outcome, REFUSED);
    assert!(shown(1)[0].refused.iter().all(|r| r.value.is_none()), "no value unless the tenant allows it");
    host.set_console_settings(&actor, DEFAULT_TENANT, ConsoleSettings { show_offending_values: true }).unwrap();
    for n in 0..999 {
        refuse(&format!("made_up_{n}"));
    }
    let text = shown(1)[0].refused.iter().find(|r| r.parameter.as_deref() == Some("text")).cloned();
    assert_eq!(text.and_then(|r| r.value).as_deref(), Some("42"));
    // Nothing reached the store on the calls' path; the flush writes one
    // row, whose keys are the signature's and `(unknown)`.
    assert!(host.store.usage(DEFAULT_TENANT, "minute", 0).unwrap().is_empty());
    host.usage.flush(&*host.store).unwrap();
    let rows = host.store.usage(DEFAULT_TENANT, "minute", 0).unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!((rows[0].outcome.as_str(), rows[0].door.as_str(), rows[0].calls), (REFUSED, "otc", 1000));
    let keys: Vec<&str> = rows[0].refused.keys().map(String::as_str).collect();
    assert_eq!(keys, ["(unknown)", "text"]);
    assert_eq!(rows[0].refused["(unknown)"]["unknown_parameter"], 1000);
    assert_eq!(rows[0].refused["text"]["invalid_type"], 1000);

    // A private input: its value is never kept, whatever the tenant allows.
    let other = tempfile::tempdir().unwrap();
    let host = ToolHost::open(options(other.path())).unwrap();
    let (component, resolve, world) = build(ECHOISH);
    let manifest = crate::manifest::ToolManifest::from_toml("[inputs.text]\nprivate = true").unwrap();
    let (private, _) = crate::package::pack(&component, &resolve, world, manifest).unwrap();
    let id = host.deploy(&actor, DEFAULT_TENANT, &private, None).unwrap().tool_id.to_string();
    host.set_console_settings(&actor, DEFAULT_TENANT, ConsoleSettings { show_offending_values: true }).unwrap();
    let (tool, version) = host.resolve(DEFAULT_TENANT, &id, None).unwrap();
    let account = serde_json::json!("DE89370400440532013000");
    let refused = host.check_input(&tool, &version, FrontDoor::Mcp, None, &[("text", &account)]).unwrap_err();
    assert_eq!(refused[0].code, "private_parameter");
    let entry = &host.recent_calls(DEFAULT_TENANT, &ConsoleFilter::default(), None, 1)[0];
    assert_eq!(entry.refused, [Refusal { parameter: Some("text".into()), code: "private_parameter", value: None }]);
    assert!(!serde_json::to_string(entry).unwrap().contains("DE89"));
}

#[test]
fn a_toolset_names_versions_and_a_tenant_stores_toolset_versions_up_to_a_cap_deleted_ones_included() {
    use crate::host::toolsets::{MAX_TOOLSET_ROWS_PER_TENANT, MAX_TOOLSET_VERSIONS, ToolsetError};
    let dir = tempfile::tempdir().unwrap();
    let actor = Principal::server("test");
    let host = ToolHost::open(options(dir.path())).unwrap();
    let put = |name: &str, n: u32| host.put_toolset(&actor, DEFAULT_TENANT, name, &format!("v{n}"), &[]);
    for n in 1..=MAX_TOOLSET_VERSIONS {
        put("a", n).unwrap();
    }
    let refused = put("a", 0).map(|_| ()).unwrap_err();
    assert!(matches!(&refused, ToolsetError::TooMany(m) if m.contains("choose another name")), "{refused}");
    // Deleting and re-creating does not reset the count: the rule is the
    // number, and the message says so.
    host.delete_toolset(&actor, DEFAULT_TENANT, "a").unwrap();
    let refused = put("a", 0).map(|_| ()).unwrap_err();
    assert!(matches!(&refused, ToolsetError::TooMany(m) if m.contains("choose another name")), "{refused}");

    // Deleted toolsets' versions count toward the tenant's stored ones.
    let mut stored = MAX_TOOLSET_VERSIONS as usize;
    let mut names = (0..).map(|i| format!("t{i}"));
    while stored < MAX_TOOLSET_ROWS_PER_TENANT {
        let name = names.next().unwrap();
        put(&name, 1).unwrap();
        host.delete_toolset(&actor, DEFAULT_TENANT, &name).unwrap();
        stored += 1;
    }
    let refused = put("fresh", 1).map(|_| ()).unwrap_err();
    assert!(matches!(&refused, ToolsetError::TooMany(m) if m.contains("deleted toolsets' included")), "{refused}");
    assert!(host.toolsets(DEFAULT_TENANT).is_empty(), "not one toolset is live");
}

/// A stand-in token endpoint on 127.0.0.1 that answers every refresh with
/// the next access token (`at-1`, `at-2`, …) a moment later, or refuses
/// them all (`invalid_grant`) when `refuse`: its URL and how many
/// refreshes it was asked for.
async fn token_endpoint(refuse: bool) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::Ordering;
    let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = asked.clone();
    // A refresh is answered once a second one arrives, or after a while:
    // every caller that would refresh on its own has the time to.
    let another = Arc::new(tokio::sync::Notify::new());
    let app = axum::Router::new().route(
        "/token",
        axum::routing::post(move |body: String| {
            let (counted, another) = (counted.clone(), another.clone());
            async move {
                assert!(body.contains("grant_type=refresh_token"), "{body}");
                let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
                another.notify_waiters();
                let _ = tokio::time::timeout(Duration::from_millis(1500), another.notified()).await;
                if refuse {
                    return (
                        axum::http::StatusCode::BAD_REQUEST,
                        axum::Json(serde_json::json!({ "error": "invalid_grant" })),
                    );
                }
                let answer = serde_json::json!({ "access_token": format!("at-{n}"), "token_type": "Bearer",
                                                 "expires_in": 3600, "refresh_token": format!("rt-{n}") });
                (axum::http::StatusCode::OK, axum::Json(answer))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, asked)
}

/// Two replicas on one PostgreSQL whose tenant `acme` has the provider
/// `inbox` at `endpoint`, and alice's grant there expiring in 10 s.
fn replicas_with_an_expiring_grant(endpoint: &str) -> (ToolHost, ToolHost, [tempfile::TempDir; 2]) {
    let database = crate::testing::TestPostgres::shared().fresh_database();
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let limits = HostLimits {
        outbound: Arc::new(OutboundLimits {
            allowed_private: vec!["127.0.0.0/8".parse().unwrap()],
            ..Default::default()
        }),
        ..HostLimits::default()
    };
    let replica = |dir: &tempfile::TempDir| {
        let cheq = CheqOptions { client_documents_allow_http: true, ..Default::default() };
        ToolHost::open(HostOptions {
            database_url: Some(database.clone()),
            secrets_key: Some("AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=".into()),
            limits: limits.clone(),
            cheq,
            ..options(dir.path())
        })
        .unwrap()
    };
    let (a, b) = (replica(&dirs[0]), replica(&dirs[1]));
    let operator = Principal::server("test");
    a.create_tenant(&operator, "acme", false, &serde_json::json!({})).unwrap();
    let settings = authorizations::ProviderSettings {
        authorization_endpoint: Some(format!("{endpoint}/authorize")),
        token_endpoint: Some(format!("{endpoint}/token")),
        client_id: "plinth".into(),
        client_secret: Some("s3cret".into()),
        ..Default::default()
    };
    a.put_authorization_provider(&operator, "acme", "inbox", settings).unwrap();
    let now = crate::tenancy::unix_now();
    let grant = crate::store::authorizations::StoredGrant {
        tenant: "acme".into(),
        end_user: "alice".into(),
        provider: "inbox".into(),
        access_token: "at-0".into(),
        refresh_token: Some("rt-0".into()),
        scopes: "inbox.read".into(),
        expires_at: Some(now + 10),
        created_at: now,
        updated_at: now,
    };
    let audit = crate::tenancy::AuditEntry::new(&operator, Some("acme"), "authorization.grant", "alice/inbox");
    a.authorizations.store().put_grant(&grant, &audit).unwrap();
    b.catch_up().unwrap();
    (a, b, dirs)
}

fn inbox_need() -> crate::manifest::AuthorizationNeed {
    crate::manifest::AuthorizationNeed {
        provider: "inbox".into(),
        scopes: vec!["inbox.read".into()],
        hosts: vec!["api.inbox.example".into()],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_grant_about_to_expire_is_refreshed_once_however_many_calls_and_replicas_need_it() {
    let (endpoint, asked) = token_endpoint(false).await;
    let (a, b, _dirs) = tokio::task::block_in_place(|| replicas_with_an_expiring_grant(&endpoint));
    let (a, b) = (Arc::new(a), Arc::new(b));
    let mut calls = Vec::new();
    for n in 0..8 {
        let host = if n % 2 == 0 { a.clone() } else { b.clone() };
        calls.push(tokio::spawn(async move { host.usable_grant("acme", "alice", &inbox_need()).await }));
    }
    for call in calls {
        let grant = call.await.unwrap().unwrap().expect("a usable grant");
        assert_eq!(grant.access_token, "at-1", "every call got the one refresh's token");
    }
    assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 1, "one refresh at the provider");
    // Stored for both: sealed, with the rotated refresh token.
    let stored = a.authorizations.store().grant("acme", "alice", "inbox").unwrap().unwrap();
    assert_eq!((stored.access_token.as_str(), stored.refresh_token.as_deref()), ("at-1", Some("rt-1")));
    assert!(stored.expires_at.is_some_and(|at| at > crate::tenancy::unix_now() + 3000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refresh_the_provider_refuses_removes_the_grant_and_asks_the_person_again() {
    let (endpoint, asked) = token_endpoint(true).await;
    let (a, b, _dirs) = tokio::task::block_in_place(|| replicas_with_an_expiring_grant(&endpoint));
    assert!(a.usable_grant("acme", "alice", &inbox_need()).await.unwrap().is_none(), "no grant: a challenge");
    assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert!(a.authorizations.store().grant("acme", "alice", "inbox").unwrap().is_none(), "the grant is gone");
    // The other replica, once it caught up, asks the person again too (and
    // asks the provider nothing).
    tokio::task::block_in_place(|| b.catch_up()).unwrap();
    assert!(b.usable_grant("acme", "alice", &inbox_need()).await.unwrap().is_none());
    assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 1);
    let query = crate::tenancy::AuditQuery { tenant: Some("acme".into()), before: None, limit: 100 };
    let audit = a.store.audit(&query).unwrap();
    assert!(audit.iter().any(|e| e.action == "authorization.refresh_refused"), "{audit:?}");
}
