//! One test suite for every [`RegistryStore`]: each test here runs against
//! SQLite in a temporary data dir and against a real PostgreSQL
//! ([`crate::testing::TestPostgres`], one cluster per test binary, a fresh
//! database per test). What only one implementation does is tested beside
//! it; what only a shared store does (racing replicas, the change log,
//! heartbeats) is at the end, on PostgreSQL.

use super::*;
use crate::signature::Signature;
use crate::tenancy::{ConfirmationBound, ConfirmationLimit, LedgerBound, Principal, Quotas, unix_now};
use crate::testing::TestPostgres;
use std::time::Duration;

/// The bytes of version `n` of a test tool.
pub(super) fn component(n: u32) -> Vec<u8> {
    format!("component {n}").into_bytes()
}

/// Version `n` of the test tool `echo` of the `default` tenant.
pub(super) fn version(tool_id: Uuid, n: u32) -> StoredVersion {
    StoredVersion {
        tool_id,
        tenant: "default".into(),
        name: "echo".into(),
        version: n,
        sha256: crate::digest::sha256_hex(&component(n)),
        signature: Signature {
            name: "echo".into(),
            description: "d".into(),
            img: None,
            tags: vec![],
            inputs: vec![],
            outputs: vec![],
        },
        manifest: Default::default(),
        // Version 2 came from a registry, signed: its provenance must read back.
        provenance: if n == 2 {
            crate::supply::Provenance {
                source: Some(crate::supply::Source {
                    reference: "registry.example/acme/echo:2".into(),
                    manifest_digest: format!("sha256:{:064}", n),
                }),
                signers: vec![crate::supply::Signer {
                    kind: "cosign".into(),
                    key: "release".into(),
                    fingerprint: format!("sha256:{:064}", 7),
                }],
            }
        } else {
            Default::default()
        },
        signature_sha256: format!("{:064}", n + 100),
        created_at: 1_700_000_000 + i64::from(n),
        retired_at: None,
    }
}

pub(super) fn cipher() -> SecretsCipher {
    SecretsCipher::new(&[42; 32])
}

pub(super) fn audit(action: &str) -> AuditEntry {
    AuditEntry::new(&Principal::server("test"), Some("default"), action, "t")
}

fn acme() -> TenantRecord {
    TenantRecord { name: "acme".into(), public_enumeration: false, quotas: Quotas::default(), created_at: 1 }
}

/// A store of each kind, and what keeps it alive.
enum Fixture {
    Sqlite(tempfile::TempDir),
    Postgres(String),
}

impl Fixture {
    fn open(&self) -> Box<dyn RegistryStore> {
        match self {
            Fixture::Sqlite(dir) => Box::new(SqliteStore::open(dir.path(), cipher()).unwrap()),
            Fixture::Postgres(url) => Box::new(PostgresStore::open(url, cipher()).unwrap()),
        }
    }

    /// The store with both its slices, as the host holds it.
    fn open_all(&self) -> Box<dyn Stores> {
        match self {
            Fixture::Sqlite(dir) => Box::new(SqliteStore::open(dir.path(), cipher()).unwrap()),
            Fixture::Postgres(url) => Box::new(PostgresStore::open(url, cipher()).unwrap()),
        }
    }

    /// Runs `sql` on the database behind the store's back, as someone
    /// holding the file or the database could: the first column of each
    /// row it answers, as text (NULL as empty).
    fn raw(&self, sql: &str) -> Vec<String> {
        match self {
            Fixture::Sqlite(dir) => {
                let conn = rusqlite::Connection::open(dir.path().join("registry.sqlite3")).unwrap();
                let mut stmt = conn.prepare(sql).unwrap();
                let rows = stmt.query_map([], |r| r.get::<_, Option<String>>(0)).unwrap();
                rows.map(|r| r.unwrap().unwrap_or_default()).collect()
            }
            Fixture::Postgres(url) => {
                let out = std::process::Command::new("psql")
                    .args([url.as_str(), "-XAtq", "-v", "ON_ERROR_STOP=1", "-c", sql])
                    .output()
                    .expect("psql");
                assert!(out.status.success(), "{sql}: {}", String::from_utf8_lossy(&out.stderr));
                let rows = String::from_utf8(out.stdout).unwrap();
                rows.lines().map(str::to_string).collect()
            }
        }
    }
}

/// Both slices of one store.
trait Stores: RegistryStore + authorizations::AuthorizationStore {}
impl<T: RegistryStore + authorizations::AuthorizationStore> Stores for T {}

fn sqlite() -> Fixture {
    Fixture::Sqlite(tempfile::tempdir().unwrap())
}

fn postgres() -> Fixture {
    Fixture::Postgres(TestPostgres::shared().fresh_database())
}

mod authorization_slice;

/// Runs each named test of this file against both stores.
macro_rules! for_both_stores {
    ($($name:ident),* $(,)?) => {
        mod on_sqlite {
            $(#[test] fn $name() { super::$name(&*super::sqlite().open()) })*
        }
        mod on_postgres {
            $(#[test] fn $name() { super::$name(&*super::postgres().open()) })*
        }
    };
}

for_both_stores!(
    versions_are_kept_with_their_bytes_and_never_overwritten,
    only_a_tools_next_version_is_accepted,
    the_same_tool_name_lives_in_two_tenants_but_not_twice_in_one,
    a_failed_change_leaves_no_audit_entry,
    audit_pages_newest_first_and_filters_by_tenant,
    a_call_id_is_claimed_once_until_it_expires,
    a_tenants_call_ledger_keeps_within_its_bound,
    oauth_credentials_are_used_once_and_revoked_by_family,
    secrets_config_settings_and_keys_round_trip,
    a_setting_is_replaced_only_from_the_value_its_writer_read,
    sessions_live_until_they_expire,
    designer_sessions_end_when_they_expire_are_signed_out_or_crowded_out,
    waiting_calls_are_capped_per_tenant,
    a_server_key_is_made_once,
    a_transaction_is_decided_once,
    a_tenants_transactions_keep_within_their_bounds,
    expiries_are_claimed_once_by_tool,
    usage_rows_are_kept_per_replica_read_by_window_and_swept,
    toolset_versions_are_numbered_in_turn_and_deleted_with_their_keys,
    refused_calls_are_kept_by_parameter_and_code_and_replaced_per_replica,
    a_toolsets_usage_is_kept_apart_by_toolset_and_version,
);

/// Version 1 of toolset `name` of the default tenant, with no tools.
fn empty_toolset(name: &str) -> StoredToolset {
    StoredToolset {
        tenant: "default".into(),
        name: name.into(),
        version: 1,
        description: String::new(),
        tools: Vec::new(),
        created_at: 100,
        deleted_at: None,
    }
}

/// A key scoped to a toolset is stored only while the toolset is live,
/// checked in the key's transaction (on both stores): a delete, here or on
/// another replica, cannot miss a key made at the same time.
#[test]
fn a_toolset_scoped_key_is_stored_only_while_its_toolset_is_live() {
    for fixture in [sqlite(), postgres()] {
        let store = fixture.open();
        let travel = empty_toolset("travel");
        store.insert_toolset(&travel, &audit("toolset.put")).unwrap();
        let key = |id: &str, toolset: &str| KeyRecord {
            id: id.into(),
            tenant: Some("default".into()),
            role: crate::tenancy::Role::Consumer,
            key_sha256: id.repeat(64 / id.len()),
            label: None,
            created_at: 7,
            revoked_at: None,
            toolset: Some(toolset.into()),
        };
        store.insert_key(&key("live", "travel"), &audit("key.create")).unwrap();
        assert!(store.delete_toolset("default", "travel", 200, &audit("toolset.delete")).unwrap());
        for (id, name) in [("late", "travel"), ("none", "nosuch")] {
            let refused = store.insert_key(&key(id, name), &audit("key.create"));
            assert!(matches!(refused, Err(StoreError::Conflict(_))), "{id}: {refused:?}");
        }
        let keys = store.keys().unwrap();
        assert_eq!(keys.iter().map(|k| (k.id.as_str(), k.revoked_at)).collect::<Vec<_>>(), [("live", Some(200))]);
    }
}

fn toolset_versions_are_numbered_in_turn_and_deleted_with_their_keys(store: &dyn RegistryStore) {
    let toolset = |version: u32, tools: &[(&str, Option<u32>)]| StoredToolset {
        tenant: "default".into(),
        name: "travel".into(),
        version,
        description: format!("version {version}"),
        tools: tools
            .iter()
            .map(|(name, version)| ToolsetEntry { name: (*name).into(), version: *version, ..Default::default() })
            .collect(),
        created_at: 100 + i64::from(version),
        deleted_at: None,
    };
    let mut first = toolset(1, &[("echo", Some(1)), ("weather", None)]);
    // The designer's words are stored with the version, read back whole.
    first.tools[0].wording = crate::signature::Wording {
        description: Some("Repeats what it is told, \"word\" for word.".into()),
        input_descriptions: [("text".to_string(), "What to repeat.\nOne line.".to_string())].into(),
        output_descriptions: [("text".to_string(), "What came back.".to_string())].into(),
        words_for: Some(1),
    };
    // Only the next number is taken: 2 before 1 is not.
    assert!(matches!(store.insert_toolset(&toolset(2, &[]), &audit("toolset.put")), Err(StoreError::Conflict(_))));
    store.insert_toolset(&first, &audit("toolset.put")).unwrap();
    assert!(matches!(store.insert_toolset(&first, &audit("toolset.put")), Err(StoreError::Conflict(_))));
    let second = toolset(2, &[("echo", None)]);
    store.insert_toolset(&second, &audit("toolset.put")).unwrap();
    assert_eq!(store.toolsets().unwrap(), [first.clone(), second.clone()]);

    let scoped = KeyRecord {
        id: "scoped".into(),
        tenant: Some("default".into()),
        role: crate::tenancy::Role::Consumer,
        key_sha256: "e".repeat(64),
        label: None,
        created_at: 7,
        revoked_at: None,
        toolset: Some("travel".into()),
    };
    store.insert_key(&scoped, &audit("key.create")).unwrap();
    assert_eq!(store.keys().unwrap(), std::slice::from_ref(&scoped));
    let grant = |sha: &str, tenant: &str, resource: &str| OAuthGrant {
        token_sha256: sha.into(),
        kind: "access".into(),
        tenant: tenant.into(),
        client_id: "c".into(),
        end_user: "alice".into(),
        scope: "tools:call".into(),
        resource: resource.into(),
        family: sha.into(),
        detail: "{}".into(),
        expires_at: 2_000,
        used_at: None,
        revoked_at: None,
    };
    store
        .insert_oauth_grants(&[
            grant("travel", "default", "https://x/t/default/toolsets/travel/mcp"),
            grant("other", "default", "https://x/t/default/toolsets/travel2/mcp"),
            grant("tenant", "default", "https://x/t/default/mcp"),
            grant("acme", "acme", "https://x/t/acme/toolsets/travel/mcp"),
        ])
        .unwrap();

    // Deleting marks every version and revokes the toolset's keys.
    assert!(store.delete_toolset("default", "travel", 200, &audit("toolset.delete")).unwrap());
    assert!(!store.delete_toolset("default", "travel", 201, &audit("toolset.delete")).unwrap());
    let stored = store.toolsets().unwrap();
    assert!(stored.iter().all(|t| t.deleted_at == Some(200)), "{stored:?}");
    assert_eq!(store.keys().unwrap(), [KeyRecord { revoked_at: Some(200), ..scoped }]);
    // And the OAuth grants for its MCP URL, only those.
    let revoked = |sha: &str| store.oauth_grant(sha).unwrap().unwrap().revoked_at;
    assert_eq!(revoked("travel"), Some(200), "a token for the deleted toolset's MCP URL");
    assert_eq!((revoked("other"), revoked("tenant"), revoked("acme")), (None, None, None));
    // A new toolset of the same name goes on from the old numbers: an old
    // pin never opens new content.
    assert!(matches!(store.insert_toolset(&toolset(1, &[]), &audit("toolset.put")), Err(StoreError::Conflict(_))));
    store.insert_toolset(&toolset(3, &[]), &audit("toolset.put")).unwrap();
    let actions: Vec<String> = store
        .audit(&AuditQuery { tenant: None, before: None, limit: 100 })
        .unwrap()
        .into_iter()
        .map(|e| e.action)
        .filter(|a| a.starts_with("toolset"))
        .collect();
    assert_eq!(actions, ["toolset.put", "toolset.delete", "toolset.delete", "toolset.put", "toolset.put"]);
}

fn usage_rows_are_kept_per_replica_read_by_window_and_swept(store: &dyn RegistryStore) {
    let row = |replica: &str, granularity: &str, bucket: i64, calls: u64| crate::store::UsageRow {
        tenant: "acme".into(),
        tool_id: "t1".into(),
        tool: "echo".into(),
        version: 2,
        door: "mcp".into(),
        outcome: "ok".into(),
        granularity: granularity.into(),
        bucket,
        replica: replica.into(),
        calls,
        total_ms: calls as f64 * 1.5,
        histogram: vec![calls, 0, 1],
        outbound: [("api.example.com".to_string(), [("2xx".to_string(), calls), ("denied".to_string(), 1)].into())]
            .into(),
        refused: Default::default(),
        toolset: None,
    };
    store.put_usage(&[row("a", "minute", 600, 3), row("b", "minute", 600, 4), row("a", "hour", 0, 3)]).unwrap();
    // A replica's later totals replace its row; the other replica's stays.
    store.put_usage(&[row("a", "minute", 600, 5)]).unwrap();
    let mut minutes = store.usage("acme", "minute", 0).unwrap();
    minutes.sort_by(|x, y| x.replica.cmp(&y.replica));
    assert_eq!(minutes, [row("a", "minute", 600, 5), row("b", "minute", 600, 4)]);
    assert!(store.usage("acme", "minute", 601).unwrap().is_empty(), "older than the window");
    assert!(store.usage("globex", "minute", 0).unwrap().is_empty(), "another tenant's");
    assert_eq!(store.usage("acme", "hour", 0).unwrap(), [row("a", "hour", 0, 3)]);
    assert_eq!(store.sweep_usage("minute", 601).unwrap(), 2);
    assert!(store.usage("acme", "minute", 0).unwrap().is_empty());
    assert_eq!(store.usage("acme", "hour", 0).unwrap().len(), 1, "another granularity's rows stay");
}

fn a_toolsets_usage_is_kept_apart_by_toolset_and_version(store: &dyn RegistryStore) {
    let row = |toolset: Option<(&str, u32)>, replica: &str, calls: u64| crate::store::UsageRow {
        tenant: "acme".into(),
        tool_id: "t1".into(),
        tool: "echo".into(),
        version: 1,
        door: "a2t".into(),
        outcome: "refused".into(),
        granularity: "minute".into(),
        bucket: 600,
        replica: replica.into(),
        calls,
        total_ms: 0.0,
        histogram: vec![0; 3],
        outbound: Default::default(),
        refused: [("text".to_string(), [("invalid_type".to_string(), calls)].into())].into(),
        toolset: toolset.map(|(name, version)| (name.to_string(), version)),
    };
    let (vendor, travel1, travel2, other) = (
        row(None, "a", 9),
        row(Some(("travel", 1)), "a", 2),
        row(Some(("travel", 2)), "a", 3),
        row(Some(("other", 1)), "a", 4),
    );
    store.put_usage(&[vendor.clone(), travel1.clone(), travel2.clone(), other.clone()]).unwrap();
    // A replica's later totals replace its row of the same toolset version.
    let travel1 = row(Some(("travel", 1)), "a", 5);
    store.put_usage(&[travel1.clone(), row(Some(("travel", 1)), "b", 1)]).unwrap();
    assert_eq!(store.usage("acme", "minute", 0).unwrap(), [vendor], "the vendor's rows hold no toolset's");
    let mut rows = store.toolset_usage("acme", "travel", "minute", 0).unwrap();
    rows.sort_by(|x, y| (&x.toolset, &x.replica).cmp(&(&y.toolset, &y.replica)));
    assert_eq!(rows, [travel1, row(Some(("travel", 1)), "b", 1), travel2]);
    assert_eq!(store.toolset_usage("acme", "other", "minute", 0).unwrap(), [other]);
    assert!(store.toolset_usage("globex", "travel", "minute", 0).unwrap().is_empty(), "another tenant's");
    assert!(store.toolset_usage("acme", "travel", "minute", 601).unwrap().is_empty(), "older than the window");
    assert_eq!(store.sweep_usage("minute", 601).unwrap(), 5, "both tables are swept");
    assert!(store.toolset_usage("acme", "travel", "minute", 0).unwrap().is_empty());
}

fn refused_calls_are_kept_by_parameter_and_code_and_replaced_per_replica(store: &dyn RegistryStore) {
    let row = |replica: &str, missing: u64| crate::store::UsageRow {
        tenant: "acme".into(),
        tool_id: "t1".into(),
        tool: "echo".into(),
        version: 1,
        door: "a2t".into(),
        outcome: "refused".into(),
        granularity: "hour".into(),
        bucket: 3600,
        replica: replica.into(),
        calls: missing + 1,
        total_ms: 0.0,
        histogram: vec![0; 3],
        outbound: Default::default(),
        refused: [
            ("text".to_string(), [("missing_parameter".to_string(), missing), ("invalid_type".to_string(), 1)].into()),
            ("(unknown)".to_string(), [("unknown_parameter".to_string(), 2)].into()),
        ]
        .into(),
        toolset: None,
    };
    store.put_usage(&[row("a", 1), row("b", 4)]).unwrap();
    // Rows replace: a replica's later totals are its totals, not added.
    store.put_usage(&[row("a", 2)]).unwrap();
    let mut rows = store.usage("acme", "hour", 0).unwrap();
    rows.sort_by(|x, y| x.replica.cmp(&y.replica));
    assert_eq!(rows, [row("a", 2), row("b", 4)]);
    assert_eq!(rows[0].refused["text"]["missing_parameter"], 2);
    assert_eq!(rows[1].refused["(unknown)"]["unknown_parameter"], 2);
}

fn versions_are_kept_with_their_bytes_and_never_overwritten(store: &dyn RegistryStore) {
    let id = Uuid::new_v4();
    store.insert_version(&version(id, 1), &component(1), &audit("tool.deploy")).unwrap();
    store.insert_version(&version(id, 2), &component(2), &audit("tool.deploy")).unwrap();
    let mut changed = version(id, 2);
    changed.sha256 = crate::digest::sha256_hex(b"other bytes");
    assert!(store.insert_version(&changed, b"other bytes", &audit("tool.deploy")).is_err());
    let wrong_bytes = version(id, 3);
    assert!(
        store.insert_version(&wrong_bytes, b"not its bytes", &audit("tool.deploy")).is_err(),
        "bytes that do not hash to the version's sha256 are refused"
    );
    let versions = store.versions().unwrap();
    assert_eq!(versions, [version(id, 1), version(id, 2)]);
    assert_eq!(store.blob(&version(id, 2).sha256).unwrap(), component(2));
    assert!(store.blob(&"0".repeat(64)).is_err());
    assert!(store.retire_version(id, 1, 5, &audit("tool.retire")).unwrap());
    assert!(!store.retire_version(id, 1, 6, &audit("tool.retire")).unwrap(), "retired once");
    assert_eq!(store.versions().unwrap()[0].retired_at, Some(5));
}

fn only_a_tools_next_version_is_accepted(store: &dyn RegistryStore) {
    let id = Uuid::new_v4();
    let conflict = |v: &StoredVersion| {
        matches!(store.insert_version(v, &component(v.version), &audit("tool.deploy")), Err(StoreError::Conflict(_)))
    };
    assert!(conflict(&version(id, 2)), "a first version must be 1");
    store.insert_version(&version(id, 1), &component(1), &audit("tool.deploy")).unwrap();
    assert!(conflict(&version(id, 1)), "version 1 is taken");
    assert!(conflict(&version(id, 3)), "no gap");
    assert!(conflict(&version(Uuid::new_v4(), 2)), "another tool id under the same name");
    store.insert_version(&version(id, 2), &component(2), &audit("tool.deploy")).unwrap();
}

fn the_same_tool_name_lives_in_two_tenants_but_not_twice_in_one(store: &dyn RegistryStore) {
    store.put_tenant(&acme(), &audit("tenant.create")).unwrap();
    store.insert_version(&version(Uuid::new_v4(), 1), &component(1), &audit("tool.deploy")).unwrap();
    let mut other = version(Uuid::new_v4(), 1);
    other.tenant = "acme".into();
    store.insert_version(&other, &component(1), &audit("tool.deploy")).unwrap();
    let clash = version(Uuid::new_v4(), 1);
    assert!(store.insert_version(&clash, &component(1), &audit("tool.deploy")).is_err());
    let mut unknown = version(Uuid::new_v4(), 1);
    unknown.tenant = "nobody".into();
    assert!(
        store.insert_version(&unknown, &component(1), &audit("tool.deploy")).is_err(),
        "a tool needs an existing tenant"
    );
    let tenants: Vec<String> = store.tenants().unwrap().into_iter().map(|t| t.name).collect();
    assert_eq!(tenants, ["acme", "default"]);
}

fn a_failed_change_leaves_no_audit_entry(store: &dyn RegistryStore) {
    let id = Uuid::new_v4();
    store.insert_version(&version(id, 1), &component(1), &audit("tool.deploy")).unwrap();
    assert!(store.insert_version(&version(id, 1), &component(1), &audit("tool.deploy")).is_err());
    let entries = store.audit(&AuditQuery { limit: 10, ..Default::default() }).unwrap();
    assert_eq!(entries.len(), 1, "the refused insert wrote no entry");
}

fn audit_pages_newest_first_and_filters_by_tenant(store: &dyn RegistryStore) {
    store.put_tenant(&acme(), &audit("tenant.create")).unwrap();
    for i in 0..5 {
        let tenant = if i % 2 == 0 { "acme" } else { "default" };
        let entry = AuditEntry::new(&Principal::server("test"), Some(tenant), "secret.put", format!("s{i}"));
        store.put_secret(tenant, &format!("s{i}"), "v", &entry, u64::MAX).unwrap();
    }
    let first = store.audit(&AuditQuery { tenant: Some("acme".into()), before: None, limit: 2 }).unwrap();
    assert_eq!(first.iter().map(|e| e.target.as_str()).collect::<Vec<_>>(), ["s4", "s2"]);
    let next = store.audit(&AuditQuery { tenant: Some("acme".into()), before: Some(first[1].seq), limit: 2 }).unwrap();
    assert_eq!(next.iter().map(|e| e.target.as_str()).collect::<Vec<_>>(), ["s0"]);
    assert_eq!(store.audit(&AuditQuery { limit: 100, ..Default::default() }).unwrap().len(), 6);
    // An entry with no change of its own (a refused attempt).
    let refused = AuditEntry::new(&Principal::server("test"), Some("acme"), "trust-policy.refused", "acme");
    store.record_audit(&refused).unwrap();
    let newest = store.audit(&AuditQuery { tenant: Some("acme".into()), before: None, limit: 1 }).unwrap();
    assert_eq!(newest[0].action, "trust-policy.refused");
}

fn a_call_id_is_claimed_once_until_it_expires(store: &dyn RegistryStore) {
    let key = CallKey { tenant: "default".into(), caller: "k1".into(), call_id: "c1".into() };
    assert_eq!(store.claim_call(&key, "h1", 100, 0).unwrap(), Claimed::Fresh);
    // Claimed by this very process: not running elsewhere.
    let pending = Claimed::Existing { request_sha256: "h1".into(), response: None, running_elsewhere: false };
    assert_eq!(store.claim_call(&key, "h2", 101, 0).unwrap(), pending);
    store.record_call(&key, "{\"ok\":1}", Quotas::default().ledger_bound()).unwrap();
    let done = Claimed::Existing {
        request_sha256: "h1".into(),
        response: Some("{\"ok\":1}".into()),
        running_elsewhere: false,
    };
    assert_eq!(store.claim_call(&key, "h1", 102, 0).unwrap(), done);
    // Another caller's call id of the same name is its own.
    let other = CallKey { caller: "k2".into(), ..key.clone() };
    assert_eq!(store.claim_call(&other, "h1", 102, 0).unwrap(), Claimed::Fresh);
    // Released (the tool never ran): claimable again.
    store.release_call(&other).unwrap();
    assert_eq!(store.claim_call(&other, "h1", 103, 0).unwrap(), Claimed::Fresh);
    // Past the retention window the record is gone.
    assert_eq!(store.claim_call(&key, "h9", 200, 150).unwrap(), Claimed::Fresh);
    // The retention sweep deletes every tenant's old records.
    let elsewhere = CallKey { tenant: "acme".into(), caller: "k".into(), call_id: "c".into() };
    assert_eq!(store.claim_call(&elsewhere, "h", 100, 0).unwrap(), Claimed::Fresh);
    // (default's old ones went with its own claim just now.)
    assert_eq!(store.sweep_calls(150).unwrap(), 1, "acme's, claimed at 100");
    assert!(matches!(store.claim_call(&elsewhere, "h", 300, 0).unwrap(), Claimed::Fresh));
}

/// Whether each of `keys` is still remembered (a claim of a forgotten one
/// is fresh: it is released again).
fn remembered(store: &dyn RegistryStore, keys: &[CallKey]) -> Vec<bool> {
    keys.iter()
        .map(|key| match store.claim_call(key, "h", 1_000, 0).unwrap() {
            Claimed::Fresh => {
                store.release_call(key).unwrap();
                false
            }
            Claimed::Existing { .. } => true,
        })
        .collect()
}

fn a_tenants_call_ledger_keeps_within_its_bound(store: &dyn RegistryStore) {
    let key = |tenant: &str, n: usize| CallKey { tenant: tenant.into(), caller: "k".into(), call_id: format!("c{n}") };
    let bound = LedgerBound { records: 128, bytes: 1 << 20 };
    // Another tenant's records are not this one's to forget.
    let neighbour: Vec<CallKey> = (0..10).map(|n| key("other", n)).collect();
    for k in &neighbour {
        assert_eq!(store.claim_call(k, "h", 10, 0).unwrap(), Claimed::Fresh);
        store.record_call(k, "x", bound).unwrap();
    }
    // Past 128 records, the oldest settled ones go; a running one stays.
    let running = key("acme", 9_999);
    assert_eq!(store.claim_call(&running, "h", 11, 0).unwrap(), Claimed::Fresh);
    let keys: Vec<CallKey> = (0..300).map(|n| key("acme", n)).collect();
    for (n, k) in keys.iter().enumerate() {
        assert_eq!(store.claim_call(k, "h", 20 + n as i64, 0).unwrap(), Claimed::Fresh);
        store.record_call(k, "{\"ok\":1}", bound).unwrap();
    }
    let kept = remembered(store, &keys);
    let count = kept.iter().filter(|k| **k).count();
    assert!((100..=128).contains(&count), "{count} records kept for a bound of 128");
    assert!(kept[300 - count..].iter().all(|k| *k), "the newest records are the ones kept: {kept:?}");
    assert!(remembered(store, std::slice::from_ref(&running))[0], "a running call keeps its claim");
    assert!(remembered(store, &neighbour).iter().all(|k| *k), "another tenant lost records");

    // Past the byte bound, likewise: 64 KiB responses under a 1 MiB bound.
    let big = "x".repeat(64 << 10);
    let keys: Vec<CallKey> = (0..40).map(|n| key("bytes", n)).collect();
    for (n, k) in keys.iter().enumerate() {
        assert_eq!(store.claim_call(k, "h", 20 + n as i64, 0).unwrap(), Claimed::Fresh);
        store.record_call(k, &big, bound).unwrap();
    }
    let kept = remembered(store, &keys);
    let count = kept.iter().filter(|k| **k).count();
    assert!((1..=16).contains(&count), "{count} responses of 64 KiB kept for a bound of 1 MiB");
    assert!(kept[40 - count..].iter().all(|k| *k), "the newest responses are the ones kept: {kept:?}");
    // The newest response is kept even when it alone is past the bound.
    let huge = key("bytes", 1_000);
    assert_eq!(store.claim_call(&huge, "h", 100, 0).unwrap(), Claimed::Fresh);
    store.record_call(&huge, &"y".repeat(2 << 20), bound).unwrap();
    assert!(remembered(store, &[huge])[0]);
    assert_eq!(remembered(store, &keys).iter().filter(|k| **k).count(), 0);
}

fn oauth_credentials_are_used_once_and_revoked_by_family(store: &dyn RegistryStore) {
    let grant = |sha: &str, kind: &str, family: &str| OAuthGrant {
        token_sha256: sha.into(),
        kind: kind.into(),
        tenant: "default".into(),
        client_id: "c".into(),
        end_user: "alice".into(),
        scope: "tools:read".into(),
        resource: "http://x/mcp".into(),
        family: family.into(),
        detail: "{}".into(),
        expires_at: 2_000,
        used_at: None,
        revoked_at: None,
    };
    store.insert_oauth_grants(&[grant("r1", "refresh", "f1"), grant("a1", "access", "f1")]).unwrap();
    store.insert_oauth_grants(&[grant("a2", "access", "f2")]).unwrap();
    // Used once: the second use sees the first.
    assert_eq!(store.use_oauth_grant("r1", 100).unwrap().unwrap().used_at, None);
    assert_eq!(store.use_oauth_grant("r1", 101).unwrap().unwrap().used_at, Some(100));
    assert_eq!(store.use_oauth_grant("nothing", 101).unwrap(), None);
    // A family is revoked together; another is not.
    store.revoke_oauth("r1", Some("f1"), 102).unwrap();
    assert_eq!(store.oauth_grant("a1").unwrap().unwrap().revoked_at, Some(102));
    assert_eq!(store.oauth_grant("a2").unwrap().unwrap().revoked_at, None);
    store.revoke_oauth("a2", None, 103).unwrap();
    assert_eq!(store.oauth_grant("a2").unwrap().unwrap().revoked_at, Some(103));
    // Expired ones are swept.
    assert_eq!(store.sweep_oauth_grants(2_001).unwrap(), 3);
    assert_eq!(store.oauth_grant("a1").unwrap(), None);
    // A grant's tokens past the newest few of each kind are pruned.
    let nth = |kind: &str, n: i64| OAuthGrant {
        token_sha256: format!("{kind}-{n}"),
        expires_at: 3_000 + n,
        ..grant("", kind, "f3")
    };
    let many: Vec<OAuthGrant> = (0..5).flat_map(|n| [nth("access", n), nth("refresh", n)]).collect();
    store.insert_oauth_grants(&many).unwrap();
    store.insert_oauth_grants(&[grant("code-f3", "code", "f3")]).unwrap();
    assert_eq!(store.prune_oauth_family("f3", 2, &["refresh-0".to_string()]).unwrap(), 5, "refresh-0 is spared");
    assert!(store.oauth_grant("refresh-0").unwrap().is_some());
    store.revoke_unused_refresh("f3", 150).unwrap();
    assert_eq!(store.oauth_grant("refresh-4").unwrap().unwrap().revoked_at, Some(150));
    assert_eq!(store.oauth_grant("access-4").unwrap().unwrap().revoked_at, None, "access tokens stay");
    assert_eq!(store.prune_oauth_family("f3", 2, &[]).unwrap(), 1);
    for (sha, kept) in [
        ("access-4", true),
        ("access-3", true),
        ("access-2", false),
        ("refresh-4", true),
        ("refresh-3", true),
        ("refresh-0", false),
        ("code-f3", true),
    ] {
        assert_eq!(store.oauth_grant(sha).unwrap().is_some(), kept, "{sha}");
    }
    assert_eq!(store.prune_oauth_family("f3", 2, &[]).unwrap(), 0);
    assert_eq!(store.sweep_oauth_grants(4_000).unwrap(), 5);
    // Registered clients, a bounded number per tenant: a full tenant makes
    // room by deleting its oldest client never used; a used one stays.
    assert!(store.register_oauth_client("default", "c1", "{}", 1, 2).unwrap());
    assert!(store.register_oauth_client("default", "c2", "{\"n\":2}", 2, 2).unwrap());
    store.touch_oauth_client("default", "c2", 3).unwrap();
    assert!(store.register_oauth_client("default", "c3", "{}", 4, 2).unwrap());
    assert_eq!(store.oauth_client("default", "c1").unwrap(), None, "the oldest unused client made room");
    store.touch_oauth_client("default", "c3", 5).unwrap();
    assert!(!store.register_oauth_client("default", "c4", "{}", 6, 2).unwrap(), "every client is in use");
    assert_eq!(store.oauth_client("default", "c4").unwrap(), None);
    assert!(store.register_oauth_client("acme", "c3", "{}", 1, 2).unwrap());
    assert_eq!(store.oauth_client("default", "c2").unwrap().as_deref(), Some("{\"n\":2}"));
    assert_eq!(store.oauth_client("acme", "c2").unwrap(), None);
    assert!(!store.has_end_users("default").unwrap());
    // One end user's credentials, or a whole tenant's, revoked at once.
    let of = |sha: &str, user: &str, tenant: &str| OAuthGrant {
        end_user: user.into(),
        tenant: tenant.into(),
        client_id: "c2".into(),
        ..grant(sha, "access", sha)
    };
    store
        .insert_oauth_grants(&[of("b1", "bob", "default"), of("c1", "carol", "default"), of("d1", "bob", "acme")])
        .unwrap();
    store.revoke_oauth_of("default", Some("bob"), 200).unwrap();
    assert_eq!(store.oauth_grant("b1").unwrap().unwrap().revoked_at, Some(200));
    assert_eq!(store.oauth_grant("c1").unwrap().unwrap().revoked_at, None);
    assert_eq!(store.oauth_grant("d1").unwrap().unwrap().revoked_at, None, "another tenant's bob");
    store.revoke_oauth_of("default", None, 201).unwrap();
    assert_eq!(store.oauth_grant("c1").unwrap().unwrap().revoked_at, Some(201));
    // Registered clients that hold no credential are swept: never used
    // ones once registered long enough, used ones once idle long enough.
    // default's c2 holds credentials; c3 (used at 5) and acme's c3 (never
    // used, registered at 1) hold none.
    assert_eq!(store.sweep_oauth_clients(0, 0).unwrap(), 0, "none is old enough");
    assert_eq!(store.sweep_oauth_clients(10, 4).unwrap(), 1, "acme's unused c3");
    assert!(store.oauth_client("default", "c3").unwrap().is_some(), "used at 5: not idle long enough");
    assert_eq!(store.sweep_oauth_clients(10, 10).unwrap(), 1, "default's c3, idle since 5");
    assert!(store.oauth_client("default", "c2").unwrap().is_some(), "it holds credentials");
}

/// The compare-and-set a trust policy's floor rests on: of writers that
/// read the same value, exactly one replaces it, and the others write
/// nothing, not even their audit entry.
fn a_setting_is_replaced_only_from_the_value_its_writer_read(store: &dyn RegistryStore) {
    let setting = |value: &str| ("default".to_string(), "trust-policy".to_string(), value.to_string());
    assert!(store.replace_setting(&setting("v1"), None, &audit("setting.cas")).unwrap(), "absent, as expected");
    assert!(!store.replace_setting(&setting("v1b"), None, &audit("setting.cas")).unwrap(), "no longer absent");
    assert!(!store.replace_setting(&setting("v2"), Some("v0"), &audit("setting.cas")).unwrap(), "not v0");
    assert!(store.replace_setting(&setting("v2"), Some("v1"), &audit("setting.cas")).unwrap());
    assert_eq!(store.settings().unwrap(), [setting("v2")]);
    // Eight writers read v2 at once; one wins.
    let won: Vec<bool> = std::thread::scope(|scope| {
        let writers: Vec<_> = (0..8)
            .map(|i| {
                scope.spawn(move || {
                    store.replace_setting(&setting(&format!("w{i}")), Some("v2"), &audit("setting.cas")).unwrap()
                })
            })
            .collect();
        writers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    assert_eq!(won.iter().filter(|w| **w).count(), 1, "{won:?}");
    let winner = won.iter().position(|w| *w).unwrap();
    assert_eq!(store.settings().unwrap(), [setting(&format!("w{winner}"))]);
    let entries = store.audit(&AuditQuery { limit: 100, ..Default::default() }).unwrap();
    assert_eq!(entries.iter().filter(|e| e.action == "setting.cas").count(), 3, "the three writes that happened");
}

fn secrets_config_settings_and_keys_round_trip(store: &dyn RegistryStore) {
    store.put_secret("default", "api-key", "one", &audit("secret.put"), u64::MAX).unwrap();
    store.put_secret("default", "api-key", "two", &audit("secret.put"), u64::MAX).unwrap();
    assert_eq!(store.secrets().unwrap(), [("default".into(), "api-key".into(), "two".into())]);
    assert!(store.delete_secret("default", "api-key", &audit("secret.delete")).unwrap());
    assert!(!store.delete_secret("default", "api-key", &audit("secret.delete")).unwrap());

    let value = ("default".to_string(), "echo".to_string(), "k".to_string(), "v".to_string());
    store.put_config(&value, &audit("config.put"), u64::MAX).unwrap();
    assert_eq!(store.config().unwrap(), [value]);
    assert!(store.delete_config("default", "echo", "k", &audit("config.delete")).unwrap());
    assert!(store.config().unwrap().is_empty());

    let setting = ("default".to_string(), "confirmation-server".to_string(), "{}".to_string());
    store.put_setting(&setting, &audit("setting.put")).unwrap();
    assert_eq!(store.settings().unwrap(), [setting]);
    assert!(store.delete_setting("default", "confirmation-server", &audit("setting.delete")).unwrap());

    let key = KeyRecord {
        id: "k1".into(),
        tenant: Some("default".into()),
        role: crate::tenancy::Role::Consumer,
        key_sha256: "f".repeat(64),
        label: Some("a label".into()),
        created_at: 7,
        revoked_at: None,
        toolset: None,
    };
    store.insert_key(&key, &audit("key.create")).unwrap();
    assert!(store.revoke_key("k1", 9, &audit("key.revoke")).unwrap());
    assert!(!store.revoke_key("k1", 10, &audit("key.revoke")).unwrap());
    assert_eq!(store.keys().unwrap(), [KeyRecord { revoked_at: Some(9), ..key }]);

    store.put_end_user("default", "ann", "hash", &audit("end-user.put"), u64::MAX).unwrap();
    assert_eq!(store.end_user("default", "ann").unwrap().as_deref(), Some("hash"));
    assert!(store.delete_end_user("default", "ann", &audit("end-user.delete")).unwrap());
    assert_eq!(store.end_user("default", "ann").unwrap(), None);
}

/// What a tenant can make the store keep is bounded (on both stores): past
/// its bound a new secret, config value or end user is refused with nothing
/// written (no row, no audit entry); one it has can always be set again;
/// another tenant's are not counted.
#[test]
fn secrets_config_values_and_end_users_are_bounded_per_tenant() {
    for fixture in [sqlite(), postgres()] {
        bounded_per_tenant(&*fixture.open());
    }
}

fn bounded_per_tenant(store: &dyn RegistryStore) {
    store.put_tenant(&acme(), &audit("tenant.create")).unwrap();
    let entries = || store.audit(&AuditQuery { limit: 1000, ..Default::default() }).unwrap().len();
    let at_acme = |action: &str| AuditEntry::new(&Principal::server("test"), Some("acme"), action, "t");
    let before = entries();

    assert!(store.put_secret("default", "a", "1", &audit("secret.put"), 2).unwrap());
    assert!(store.put_secret("default", "b", "1", &audit("secret.put"), 2).unwrap());
    assert!(!store.put_secret("default", "c", "1", &audit("secret.put"), 2).unwrap(), "a third id is refused");
    assert!(store.put_secret("default", "a", "2", &audit("secret.put"), 2).unwrap(), "one it has is set again");
    assert!(store.put_secret("acme", "c", "1", &at_acme("secret.put"), 2).unwrap(), "another tenant's are its own");
    let secrets: Vec<_> = store.secrets().unwrap().into_iter().map(|(t, id, v)| format!("{t}/{id}={v}")).collect();
    assert_eq!(secrets, ["acme/c=1", "default/a=2", "default/b=1"]);

    let config = |tenant: &str, tool: &str, key: &str, value: &str| {
        (tenant.to_string(), tool.to_string(), key.to_string(), value.to_string())
    };
    assert!(store.put_config(&config("default", "echo", "k1", "1"), &audit("config.put"), 2).unwrap());
    // Every tool's values count, deployed or not.
    assert!(store.put_config(&config("default", "other", "k1", "1"), &audit("config.put"), 2).unwrap());
    assert!(!store.put_config(&config("default", "echo", "k2", "1"), &audit("config.put"), 2).unwrap());
    assert!(store.put_config(&config("default", "echo", "k1", "2"), &audit("config.put"), 2).unwrap());
    assert!(store.put_config(&config("acme", "echo", "k2", "1"), &at_acme("config.put"), 2).unwrap());
    assert_eq!(
        store.config().unwrap(),
        [
            config("acme", "echo", "k2", "1"),
            config("default", "echo", "k1", "2"),
            config("default", "other", "k1", "1")
        ]
    );

    assert!(store.put_end_user("default", "ann", "h1", &audit("end_user.put"), 1).unwrap());
    assert!(!store.put_end_user("default", "bob", "h1", &audit("end_user.put"), 1).unwrap());
    assert!(store.put_end_user("default", "ann", "h2", &audit("end_user.put"), 1).unwrap());
    assert!(store.put_end_user("acme", "bob", "h1", &at_acme("end_user.put"), 1).unwrap());
    assert_eq!(store.end_user("default", "ann").unwrap().as_deref(), Some("h2"));
    assert_eq!(store.end_user("default", "bob").unwrap(), None, "nothing of the refused one is stored");

    // Eleven writes were stored, each with its audit entry; the three
    // refused left none.
    assert_eq!(entries(), before + 11);
}

fn sessions_live_until_they_expire(store: &dyn RegistryStore) {
    let session = StoredSession {
        token_sha256: "a".repeat(64),
        tenant: "default".into(),
        user: "ann".into(),
        form_token: "form".into(),
        expires_at: 100,
    };
    store.insert_session(&session, 50).unwrap();
    assert_eq!(store.session(&session.token_sha256, 99).unwrap(), Some(session.clone()));
    assert_eq!(store.session(&session.token_sha256, 100).unwrap(), None, "expired");
    assert_eq!(store.session(&"b".repeat(64), 50).unwrap(), None);
    // Opening a session drops the expired ones.
    let later = StoredSession { token_sha256: "c".repeat(64), expires_at: 500, ..session.clone() };
    store.insert_session(&later, 200).unwrap();
    assert_eq!(store.session(&session.token_sha256, 0).unwrap(), None, "deleted once expired");
}

fn designer_sessions_end_when_they_expire_are_signed_out_or_crowded_out(store: &dyn RegistryStore) {
    let session = |token: char, key: &str, created_at: i64| StoredDesignerSession {
        token_sha256: token.to_string().repeat(64),
        tenant: "default".into(),
        key_id: key.into(),
        key_sha256: "k".repeat(64),
        form_token: "form".into(),
        created_at,
        expires_at: created_at + 100,
    };
    let first = session('a', "key1", 10);
    store.insert_designer_session(&first, 10, 3).unwrap();
    assert_eq!(store.designer_session(&first.token_sha256, 109).unwrap(), Some(first.clone()));
    assert_eq!(store.designer_session(&first.token_sha256, 110).unwrap(), None, "expired");
    assert_eq!(store.designer_session(&"z".repeat(64), 50).unwrap(), None);
    // A CHEQ session's table is another: the same token opens nothing there.
    assert_eq!(store.session(&first.token_sha256, 50).unwrap(), None);

    // A key keeps its newest three; another key's are not counted.
    let (b, c, d) = (session('b', "key1", 20), session('c', "key1", 30), session('d', "key1", 30));
    let other = session('e', "key2", 5);
    for s in [&other, &b, &c, &d] {
        store.insert_designer_session(s, 20, 3).unwrap();
    }
    assert_eq!(store.designer_session(&first.token_sha256, 20).unwrap(), None, "the oldest made room");
    for s in [&b, &c, &d, &other] {
        assert_eq!(store.designer_session(&s.token_sha256, 20).unwrap().as_ref(), Some(s));
    }

    // Sessions opened in the same second: the one opened first goes first
    // (not the one whose token sorts last).
    let same_second: Vec<_> = ['m', 'n', 'o', 'p'].map(|token| session(token, "key4", 40)).into();
    for s in &same_second {
        store.insert_designer_session(s, 40, 3).unwrap();
    }
    assert_eq!(store.designer_session(&same_second[0].token_sha256, 40).unwrap(), None, "the first opened made room");
    for s in &same_second[1..] {
        assert_eq!(store.designer_session(&s.token_sha256, 40).unwrap().as_ref(), Some(s));
    }

    // Signing out ends one session; opening one drops the expired ones.
    store.delete_designer_session(&b.token_sha256).unwrap();
    assert_eq!(store.designer_session(&b.token_sha256, 20).unwrap(), None);
    store.insert_designer_session(&session('f', "key3", 200), 200, 3).unwrap();
    assert_eq!(store.designer_session(&c.token_sha256, 0).unwrap(), None, "deleted once expired");
}

fn waiting_calls_are_capped_per_tenant(store: &dyn RegistryStore) {
    let far = unix_now() + 3600;
    store.put_waiting_call("default", "f1", "tx1", far, 2).unwrap();
    store.put_waiting_call("default", "f2", "tx2", far, 2).unwrap();
    store.put_waiting_call("default", "f3", "tx3", far, 2).unwrap();
    store.put_waiting_call("acme", "f1", "tx4", far, 2).unwrap();
    let now = unix_now();
    assert_eq!(store.waiting_call("default", "f1", now).unwrap().as_deref(), Some("tx1"));
    assert_eq!(store.waiting_call("default", "f3", now).unwrap(), None, "past the cap, not recorded");
    assert_eq!(store.waiting_call("acme", "f1", now).unwrap().as_deref(), Some("tx4"), "per tenant");
    assert_eq!(store.waiting_call("default", "f1", far).unwrap(), None, "not kept past its time");
    store.delete_waiting_call("default", "f1").unwrap();
    assert_eq!(store.waiting_call("default", "f1", now).unwrap(), None);
}

fn a_server_key_is_made_once(store: &dyn RegistryStore) {
    let first = store.server_key("cheq-signing.key").unwrap();
    assert_eq!(store.server_key("cheq-signing.key").unwrap(), first);
    assert_ne!(store.server_key("mcp-request-state.key").unwrap(), first);
}

fn a_transaction_is_decided_once(store: &dyn RegistryStore) {
    let far = unix_now() + 3600;
    super::store_pending(store, &StoredConfirmation::pending_for_test("t1", far));
    let at = AuditEntry { at: unix_now(), ..audit("cheq.accept") };
    assert!(store.decide_confirmation("t1", "accepted", Some("{}"), &at).unwrap());
    assert!(!store.decide_confirmation("t1", "rejected", None, &at).unwrap(), "decided once");
    store.finish_confirmation("t1", 200, "{\"done\":true}").unwrap();
    let stored = store.confirmation("t1").unwrap().unwrap();
    assert_eq!((stored.state.as_str(), stored.result_status), ("done", Some(200)));
    super::store_pending(store, &StoredConfirmation::pending_for_test("t2", 10));
    assert!(!store.decide_confirmation("t2", "accepted", None, &at).unwrap(), "an expired one is not decided");
}

/// A waiting transaction `id` of `tenant` for `end_user`, expiring at
/// `expires_at`, whose inputs are `bytes` long.
fn waiting_for(id: &str, tenant: &str, end_user: &str, expires_at: i64, bytes: usize) -> StoredConfirmation {
    StoredConfirmation {
        tenant: tenant.into(),
        end_user: end_user.into(),
        inputs: "x".repeat(bytes),
        ..StoredConfirmation::pending_for_test(id, expires_at)
    }
}

/// Which of `ids` the store still keeps.
fn kept(store: &dyn RegistryStore, ids: &[&str]) -> Vec<bool> {
    ids.iter().map(|id| store.confirmation(id).unwrap().is_some()).collect()
}

fn a_tenants_transactions_keep_within_their_bounds(store: &dyn RegistryStore) {
    store.put_tenant(&acme(), &audit("tenant.create")).unwrap();
    let (big, mib) = (u64::MAX / 4, 1 << 20);
    let bound = ConfirmationBound {
        pending: 5,
        pending_bytes: mib,
        pending_per_end_user: 3,
        pending_bytes_per_end_user: mib,
        stored: 8,
        stored_bytes: mib,
    };
    let insert = |id: &str, tenant: &str, end_user: &str, expires_at: i64, now: i64, bound: ConfirmationBound| {
        store.insert_confirmation(&waiting_for(id, tenant, end_user, expires_at, 10), bound, now).unwrap()
    };
    // One end user's waiting transactions, then the tenant's: refused past
    // either, and nothing is stored.
    for n in 0..3 {
        assert_eq!(insert(&format!("ann{n}"), "default", "ann", 1_500 + n, 1_000, bound), Ok(()));
    }
    assert_eq!(insert("ann3", "default", "ann", 3_000, 1_000, bound), Err(ConfirmationLimit::PendingPerEndUser));
    let refusal = |end_user: &str, now: i64| store.pending_refusal("default", end_user, 10, bound, now).unwrap();
    assert_eq!(refusal("ann", 1_000), Some(ConfirmationLimit::PendingPerEndUser), "read before storing");
    assert_eq!(refusal("bob", 1_000), None);
    for n in 0..2 {
        assert_eq!(insert(&format!("bob{n}"), "default", "bob", 1_510 + n, 1_000, bound), Ok(()));
    }
    assert_eq!(insert("cat0", "default", "cat", 3_000, 1_000, bound), Err(ConfirmationLimit::Pending));
    assert_eq!(refusal("cat", 1_000), Some(ConfirmationLimit::Pending));
    assert_eq!(refusal("cat", 2_000), None, "once some expired, storing would make room: not refused before");
    assert_eq!(kept(store, &["ann3", "cat0"]), [false, false], "a refused one was stored");
    // Another tenant's bound is its own.
    assert_eq!(insert("acme0", "acme", "ann", 3_000, 1_000, bound), Ok(()));

    // Once their expiry passed, they wait no longer: room again, and they
    // are marked expired (kept for their retention).
    assert_eq!(insert("cat0", "default", "cat", 3_000, 2_000, bound), Ok(()));
    assert_eq!(store.confirmation("ann0").unwrap().unwrap().state, "expired");
    assert_eq!(insert("ann3", "default", "ann", 3_000, 2_000, bound), Ok(()));
    // Past the stored bound (8), the oldest settled ones are forgotten (by
    // expiry), never a waiting one.
    for id in ["dan0", "dan1", "dan2"] {
        assert_eq!(insert(id, "default", "dan", 3_000, 2_000, bound), Ok(()));
    }
    let expired = ["ann0", "ann1", "ann2", "bob0", "bob1"];
    assert_eq!(kept(store, &expired), [false, false, true, true, true], "the oldest are forgotten first");
    assert_eq!(kept(store, &["cat0", "ann3", "dan0", "dan1", "dan2"]), [true; 5], "a waiting one was forgotten");

    // Nobody's acceptance is forgotten before what nobody accepted.
    let at = AuditEntry { at: 2_000, ..audit("cheq.decide") };
    assert!(store.decide_confirmation("dan0", "accepted", Some("{}"), &at).unwrap());
    store.finish_confirmation("dan0", 200, "{}").unwrap();
    assert!(store.decide_confirmation("dan1", "rejected", Some("{}"), &at).unwrap());
    let loose = ConfirmationBound { pending: 100, pending_per_end_user: 100, ..bound };
    for n in 0..4 {
        assert_eq!(insert(&format!("eve{n}"), "default", "eve", 3_000, 2_000, loose), Ok(()));
    }
    assert_eq!(kept(store, &["dan0", "dan1"]), [true, false], "the rejected one goes first");
    assert_eq!(kept(store, &expired), [false; 5], "the expired ones went before it");
    assert_eq!(insert("eve4", "default", "eve", 3_000, 2_000, loose), Ok(()));
    assert_eq!(kept(store, &["dan0"]), [false], "then an accepted one");
    // Only waiting and running ones left: none can go, and the next one is
    // refused by the stored bound.
    assert!(store.decide_confirmation("dan2", "accepted", Some("{}"), &at).unwrap());
    assert_eq!(insert("eve5", "default", "eve", 3_000, 2_000, loose), Err(ConfirmationLimit::Stored));
    assert_eq!(kept(store, &["eve5", "dan2", "eve4"]), [false, true, true]);

    // Bytes, likewise: one end user's waiting bytes, the tenant's, and the
    // bytes kept.
    store.put_tenant(&TenantRecord { name: "bytes".into(), ..acme() }, &audit("tenant.create")).unwrap();
    let insert = |id: &str, end_user: &str, expires_at: i64, now: i64, bound: ConfirmationBound| {
        store.insert_confirmation(&waiting_for(id, "bytes", end_user, expires_at, 250 << 10), bound, now).unwrap()
    };
    let bytes = ConfirmationBound { pending: big, pending_per_end_user: big, stored: big, ..bound };
    let per_user = ConfirmationBound { pending_bytes_per_end_user: 300 << 10, ..bytes };
    assert_eq!(insert("b0", "fay", 4_000, 3_000, per_user), Ok(()));
    assert_eq!(insert("b1", "fay", 4_000, 3_000, per_user), Err(ConfirmationLimit::PendingBytesPerEndUser));
    for (id, user) in [("b2", "gus"), ("b3", "hal"), ("b4", "ivy")] {
        assert_eq!(insert(id, user, 4_000, 3_000, bytes), Ok(()), "four of 250 KiB fit in 1 MiB");
    }
    assert_eq!(insert("b5", "jo", 4_000, 3_000, bytes), Err(ConfirmationLimit::PendingBytes));
    // Expired, they make room for the waiting ones past the stored bytes;
    // waiting ones are never forgotten, whatever their bytes.
    let kept_bytes = ConfirmationBound { pending_bytes: big, ..bytes };
    for id in ["c0", "c1", "c2", "c3"] {
        assert_eq!(insert(id, id, 5_000, 4_000, kept_bytes), Ok(()));
    }
    assert_eq!(kept(store, &["b0", "b2", "b3", "b4"]), [false; 4], "the expired ones went to make room");
    assert_eq!(insert("c4", "c4", 5_000, 4_000, kept_bytes), Err(ConfirmationLimit::StoredBytes));
    assert_eq!(kept(store, &["c0", "c1", "c2", "c3", "c4"]), [true, true, true, true, false]);
}

/// A pending transaction of tool `tool_id` expiring at `expires_at`.
fn pending(id: &str, tool_id: Uuid, expires_at: i64) -> StoredConfirmation {
    StoredConfirmation { tool_id, ..StoredConfirmation::pending_for_test(id, expires_at) }
}

fn expiries_are_claimed_once_by_tool(store: &dyn RegistryStore) {
    let (echo, gone) = (Uuid::new_v4(), Uuid::new_v4());
    store.insert_version(&version(echo, 1), &component(1), &audit("tool.deploy")).unwrap();
    // Times ahead of the clock, so that one can still be decided.
    let t = unix_now() + 1000;
    super::store_pending(store, &pending("before-the-first-claim", echo, t));
    assert_eq!(store.claim_expired_confirmations(t).unwrap(), [], "the first claim only sets the mark");
    for (id, tool, expires_at) in [("e1", echo, t + 1), ("e2", echo, t + 5), ("e3", echo, t + 10), ("g1", gone, t + 2)]
    {
        super::store_pending(store, &pending(id, tool, expires_at));
    }
    super::store_pending(store, &pending("decided", echo, t + 3));
    let at = AuditEntry { at: unix_now(), ..audit("cheq.accept") };
    assert!(store.decide_confirmation("decided", "accepted", Some("{}"), &at).unwrap());

    let claimed = |until| {
        let mut claimed = store.claim_expired_confirmations(until).unwrap();
        claimed.sort_by(|a, b| a.tool.cmp(&b.tool));
        claimed.into_iter().map(|e| (e.tenant, e.tool, e.count)).collect::<Vec<_>>()
    };
    let default = || "default".to_string();
    // Up to t + 5, inclusive: e1 and e2 by the tool's name; g1 by its id
    // (no such tool); not the decided one.
    let mut expected = vec![(default(), "echo".to_string(), 2), (default(), gone.to_string(), 1)];
    expected.sort_by(|a, b| a.1.cmp(&b.1));
    assert_eq!(claimed(t + 5), expected);
    assert_eq!(claimed(t + 5), [], "each expiry is claimed once");
    assert_eq!(claimed(t + 4), [], "the mark does not move back");
    assert_eq!(claimed(t + 10), [(default(), "echo".to_string(), 1)]);
}

// What only a store shared by replicas does.

#[test]
fn replicas_claiming_expiries_at_once_count_each_once() {
    let (a, b) = two_replicas();
    let t = unix_now() + 1000;
    a.claim_expired_confirmations(t).unwrap();
    for n in 1..=40 {
        super::store_pending(&*a, &pending(&format!("tx{n}"), Uuid::nil(), t + n));
    }
    // Both sweep the same windows at the same time, as replicas do.
    let counted: u64 = std::thread::scope(|s| {
        let sweeps = [&a, &b].map(|store| {
            s.spawn(move || (1..=40).map(|n| store.claim_expired_confirmations(t + n).unwrap()).collect::<Vec<_>>())
        });
        sweeps.into_iter().flat_map(|sweep| sweep.join().unwrap()).flatten().map(|e| e.count).sum()
    });
    assert_eq!(counted, 40);
}

#[test]
fn replicas_storing_transactions_at_once_never_pass_a_bound_nor_deadlock() {
    let (a, b) = two_replicas();
    let bound = ConfirmationBound {
        pending: 30,
        pending_per_end_user: 1_000,
        stored: 40,
        ..Quotas::default().confirmation_bound()
    };
    // Both replicas store at once: the bound holds across them.
    let ids = |prefix: &str| (0..50).map(|n| format!("{prefix}{n}")).collect::<Vec<_>>();
    let stored: usize = std::thread::scope(|s| {
        let runs = [(&a, "a"), (&b, "b")].map(|(store, prefix)| {
            let ids = ids(prefix);
            s.spawn(move || {
                ids.iter()
                    .filter(|id| {
                        let c = waiting_for(id, "default", id, 1_500, 10);
                        store.insert_confirmation(&c, bound, 1_000).unwrap().is_ok()
                    })
                    .count()
            })
        });
        runs.into_iter().map(|run| run.join().unwrap()).sum()
    });
    assert_eq!(stored, 30, "two replicas stored past the bound together");

    // Storing at a bound marks the tenant's expired ones (and forgets its
    // settled ones) while another replica sweeps, decides and answers the
    // same rows: every writer takes the tenant's usage row first, so none
    // waits on a row whose writer waits for it (PostgreSQL would abort one
    // as a deadlock).
    let bound = ConfirmationBound { pending: 10, stored: 15, ..bound };
    for round in 0..40 {
        let t = 10_000 + 100 * round;
        let ids: Vec<String> = (0..10).map(|n| format!("{round}-{n}")).collect();
        for id in &ids {
            let c = waiting_for(id, "default", id, t, 10);
            a.insert_confirmation(&c, bound, t - 50).unwrap().unwrap_or_else(|l| panic!("{id}: {l:?}"));
        }
        let at = AuditEntry { at: t - 10, ..audit("cheq.decide") };
        std::thread::scope(|s| {
            s.spawn(|| {
                let c = waiting_for(&format!("{round}-new"), "default", "new", t + 2, 10);
                a.insert_confirmation(&c, bound, t + 1).unwrap_or_else(|e| panic!("round {round}: storing: {e}"))
            });
            s.spawn(|| b.sweep_confirmations(t + 1).unwrap_or_else(|e| panic!("round {round}: sweeping: {e}")));
            s.spawn(|| {
                for id in &ids[..3] {
                    b.decide_confirmation(id, "accepted", Some("{}"), &at)
                        .unwrap_or_else(|e| panic!("round {round}: deciding: {e}"));
                    b.finish_confirmation(id, 200, "{}").unwrap_or_else(|e| panic!("round {round}: answering: {e}"));
                }
            });
        });
    }
}

/// Two replicas' stores on one database.
fn two_replicas() -> (Box<dyn RegistryStore>, Box<dyn RegistryStore>) {
    let fixture = postgres();
    (fixture.open(), fixture.open())
}

#[test]
fn racing_replicas_number_a_tools_versions_consecutively() {
    let (a, b) = two_replicas();
    let id = Uuid::new_v4();
    a.insert_version(&version(id, 1), &component(1), &audit("tool.deploy")).unwrap();
    // Both replicas decided on version 2: one wins, the other must decide
    // again, and then gets 3.
    let results: Vec<Result<(), StoreError>> = std::thread::scope(|s| {
        let ours = s.spawn(|| a.insert_version(&version(id, 2), &component(2), &audit("tool.deploy")));
        let theirs = s.spawn(|| b.insert_version(&version(id, 2), &component(2), &audit("tool.deploy")));
        vec![ours.join().unwrap(), theirs.join().unwrap()]
    });
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 1, "{results:?}");
    assert!(results.iter().any(|r| matches!(r, Err(StoreError::Conflict(_)))), "{results:?}");
    b.insert_version(&version(id, 3), &component(3), &audit("tool.deploy")).unwrap();
    let numbers: Vec<u32> = a.versions().unwrap().iter().map(|v| v.version).collect();
    assert_eq!(numbers, [1, 2, 3]);
}

#[test]
fn deleting_a_toolset_waits_for_a_change_of_it_on_another_replica() {
    use sqlx::{Connection, Executor};
    let url = TestPostgres::shared().fresh_database();
    let store = PostgresStore::open(&url, cipher()).unwrap();
    let travel = empty_toolset("travel");
    store.insert_toolset(&travel, &audit("toolset.put")).unwrap();
    // Another replica in the middle of a change of the toolset: it holds
    // the lock `insert_toolset` takes.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut other = runtime.block_on(sqlx::PgConnection::connect(&url)).unwrap();
    runtime.block_on(other.execute("BEGIN")).unwrap();
    runtime
        .block_on(other.execute("SELECT pg_advisory_xact_lock(hashtextextended('toolset:default/travel', 0))"))
        .unwrap();
    std::thread::scope(|s| {
        let deleting = s.spawn(|| store.delete_toolset("default", "travel", 200, &audit("toolset.delete")));
        std::thread::sleep(Duration::from_millis(500));
        assert!(!deleting.is_finished(), "the delete did not wait for the toolset's lock");
        runtime.block_on(other.execute("COMMIT")).unwrap();
        assert!(deleting.join().unwrap().unwrap());
    });
}

/// Replicas racing for a tenant's last places take exactly as many as
/// the bound allows: the count and the insert are one under the tenant's
/// lock, in the write's transaction.
#[test]
fn replicas_racing_for_a_tenants_last_secrets_config_values_and_end_users_take_only_the_bound() {
    let (a, b) = two_replicas();
    let stored = std::thread::scope(|s| {
        let writers: Vec<_> = (0..12)
            .map(|i| {
                let store = if i % 2 == 0 { &a } else { &b };
                s.spawn(move || {
                    let config = ("default".to_string(), "echo".to_string(), format!("k{i}"), "v".to_string());
                    [
                        store.put_secret("default", &format!("s{i}"), "v", &audit("secret.put"), 3).unwrap(),
                        store.put_config(&config, &audit("config.put"), 3).unwrap(),
                        store.put_end_user("default", &format!("u{i}"), "h", &audit("end_user.put"), 3).unwrap(),
                    ]
                })
            })
            .collect();
        writers.into_iter().map(|w| w.join().unwrap()).collect::<Vec<_>>()
    });
    for kind in 0..3 {
        assert_eq!(stored.iter().filter(|s| s[kind]).count(), 3, "kind {kind}: {stored:?}");
    }
    assert_eq!(a.secrets().unwrap().len(), 3);
    assert_eq!(b.config().unwrap().len(), 3);
    let users = (0..12).filter(|i| a.end_user("default", &format!("u{i}")).unwrap().is_some()).count();
    assert_eq!(users, 3);
}

#[test]
fn the_change_log_names_what_changed_since_a_point() {
    let (a, b) = two_replicas();
    let start = b.changes_since(i64::MAX).unwrap().latest;
    assert_eq!(b.changes_since(start).unwrap().topics.len(), 0);
    a.put_secret("default", "s", "v", &audit("secret.put"), u64::MAX).unwrap();
    a.revoke_key("nobody", 1, &audit("key.revoke")).unwrap();
    let feed = b.changes_since(start).unwrap();
    assert_eq!(feed.topics.into_iter().collect::<Vec<_>>(), [Topic::Keys, Topic::Secrets]);
    assert!(feed.latest > start);
    assert!(b.changes_since(feed.latest).unwrap().topics.is_empty());
    a.insert_version(&version(Uuid::new_v4(), 1), &component(1), &audit("tool.deploy")).unwrap();
    assert_eq!(b.changes_since(feed.latest).unwrap().topics.into_iter().collect::<Vec<_>>(), [Topic::Versions]);
    // A change wakes the other replica's wait.
    let woken = std::thread::scope(|s| {
        let waiter = s.spawn(|| b.wait_for_change(Duration::from_secs(20)));
        std::thread::sleep(Duration::from_millis(200));
        a.put_tenant(&acme(), &audit("tenant.create")).unwrap();
        waiter.join().unwrap()
    });
    assert!(woken);
    assert!(b.shared() && a.live_replicas() >= 1);
}

#[test]
fn a_call_another_live_replica_claimed_is_running_elsewhere() {
    let (a, b) = two_replicas();
    let key = CallKey { tenant: "default".into(), caller: "k".into(), call_id: "c".into() };
    assert_eq!(a.claim_call(&key, "h", 100, 0).unwrap(), Claimed::Fresh);
    assert_eq!(
        b.claim_call(&key, "h", 100, 0).unwrap(),
        Claimed::Existing { request_sha256: "h".into(), response: None, running_elsewhere: true }
    );
    a.record_call(&key, "answer", Quotas::default().ledger_bound()).unwrap();
    assert_eq!(
        b.claim_call(&key, "h", 100, 0).unwrap(),
        Claimed::Existing { request_sha256: "h".into(), response: Some("answer".into()), running_elsewhere: false }
    );
}

#[test]
fn a_replica_settling_a_call_while_others_claim_it_never_deadlocks() {
    let (a, b) = two_replicas();
    let bound = Quotas::default().ledger_bound();
    // Each round: A runs a call; at once, A records its answer (or gives
    // the call id back) while B claims the same call id, as a retry racing
    // the first call on another replica does. Both take the same locks, so
    // in the same order, or PostgreSQL aborts one as a deadlock.
    for round in 0..60 {
        let key = CallKey { tenant: "default".into(), caller: "k".into(), call_id: format!("race-{round}") };
        assert_eq!(a.claim_call(&key, "h", 100, 0).unwrap(), Claimed::Fresh);
        let (settled, claimed) = std::thread::scope(|s| {
            let settle =
                s.spawn(|| if round % 2 == 0 { a.record_call(&key, "answer", bound) } else { a.release_call(&key) });
            let claim = s.spawn(|| b.claim_call(&key, "h", 100, 0));
            (settle.join().unwrap(), claim.join().unwrap())
        });
        settled.unwrap_or_else(|e| panic!("round {round}: A could not settle: {e}"));
        claimed.unwrap_or_else(|e| panic!("round {round}: B could not claim: {e}"));
    }
}

#[test]
fn every_replica_gets_the_same_server_key_and_the_audit_log_is_append_only() {
    let fixture = postgres();
    let (a, b) = (fixture.open(), fixture.open());
    assert_eq!(a.server_key("k").unwrap(), b.server_key("k").unwrap());
    a.put_secret("default", "s", "v", &audit("secret.put"), u64::MAX).unwrap();
    let Fixture::Postgres(url) = &fixture else { unreachable!() };
    let database = url.rsplit('/').next().unwrap();
    let psql = |sql: &str| {
        let out = std::process::Command::new("psql").args([url.as_str(), "-XAtc", sql]).output().expect("psql");
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    for sql in ["UPDATE audit SET actor = 'someone else'", "DELETE FROM audit", "TRUNCATE audit"] {
        let (ok, err) = psql(sql);
        assert!(!ok && err.contains("append-only"), "{sql} on {database}: {err}");
    }
    // A replica with another secrets key cannot open what the others sealed.
    let Err(e) = PostgresStore::open(url, SecretsCipher::new(&[7; 32])) else { panic!("opened with the wrong key") };
    assert!(matches!(e, StoreError::WrongSecretsKey), "{e}");
}

#[test]
fn a_bad_or_unreachable_database_url_is_refused_without_repeating_its_password() {
    for url in ["postgres://plinth:hunter2-secret@[::1", "mysql://plinth:hunter2-secret@127.0.0.1/db"] {
        let Err(e) = PostgresStore::open(url, cipher()) else { panic!("{url} opened") };
        assert!(!e.to_string().contains("hunter2"), "{e}");
    }
    // Nothing listens on port 1: refused in seconds, and the error names no
    // password.
    let started = std::time::Instant::now();
    let Err(e) = PostgresStore::open("postgres://plinth:hunter2-secret@127.0.0.1:1/db", cipher()) else {
        panic!("opened")
    };
    assert!(!e.to_string().contains("hunter2"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(30), "{:?}", started.elapsed());
}

#[test]
fn while_the_database_is_unreachable_calls_fail_at_once_and_recover_with_it() {
    let postgres = TestPostgres::start();
    let store = PostgresStore::open(&postgres.fresh_database(), cipher()).unwrap();
    store.put_secret("default", "s", "v", &audit("secret.put"), u64::MAX).unwrap();
    postgres.stop();
    // The first call finds out (within the pool's wait); the ones after it
    // fail at once rather than each waiting again.
    assert!(store.secrets().is_err());
    // (Without the breaker each of these would wait the pool's 3 s.)
    let started = std::time::Instant::now();
    for _ in 0..20 {
        assert!(store.ping().is_err());
    }
    assert!(started.elapsed() < Duration::from_secs(1), "{:?}", started.elapsed());
    postgres.start_again();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while store.secrets().is_err() {
        assert!(std::time::Instant::now() < deadline, "the store did not recover");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(store.secrets().unwrap(), [("default".into(), "s".into(), "v".into())]);
}
