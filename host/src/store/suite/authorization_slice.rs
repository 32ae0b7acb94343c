//! The shared suite of the end-user authorization slice
//! ([`AuthorizationStore`]): each test runs against SQLite and PostgreSQL;
//! what only replicas sharing a store do (racing takers and claimers, the
//! change log) is at the end, on PostgreSQL.

use super::{Fixture, Stores, audit, postgres, sqlite};
use crate::store::authorizations::{
    AuthorizationStore, LinkBounds, LinkInserted, LinkState, StoredGrant, StoredLink, StoredProvider,
};
use crate::store::{RegistryStore, StoreError, Topic};
use crate::tenancy::{AuditEntry, AuditQuery, Principal, Quotas, TenantRecord};

/// Runs each named test against both stores.
macro_rules! for_both_stores {
    ($($name:ident),* $(,)?) => {
        mod on_sqlite {
            $(#[test] fn $name() { super::$name(&super::sqlite()) })*
        }
        mod on_postgres {
            $(#[test] fn $name() { super::$name(&super::postgres()) })*
        }
    };
}

for_both_stores!(
    providers_are_replaced_and_deleted_with_their_grants_and_links,
    tokens_secrets_and_verifiers_are_sealed_at_rest,
    a_sealed_value_moved_to_another_row_or_field_does_not_open,
    links_are_bounded_per_person_and_tenant_and_a_pending_one_answered_again,
    expired_links_do_not_count_and_are_swept,
    a_link_is_taken_once_and_finished_once,
    grants_are_put_replaced_listed_and_deleted,
    a_refresh_replaces_only_the_grant_it_refreshed,
    a_refresh_is_claimed_by_one_holder_until_its_claim_ends,
    deleting_an_end_user_deletes_their_grants_and_links,
    every_write_of_a_provider_or_grant_is_audited_with_no_token,
);

fn provider(tenant: &str, id: &str, client_secret: Option<&str>) -> StoredProvider {
    StoredProvider {
        tenant: tenant.into(),
        id: id.into(),
        settings: format!(r#"{{"issuer":"https://{id}.example"}}"#),
        client_secret: client_secret.map(Into::into),
        updated_at: 100,
    }
}

fn grant(tenant: &str, end_user: &str, provider: &str, updated_at: i64) -> StoredGrant {
    StoredGrant {
        tenant: tenant.into(),
        end_user: end_user.into(),
        provider: provider.into(),
        access_token: format!("at-{tenant}-{end_user}-{provider}-{updated_at}"),
        refresh_token: Some(format!("rt-{tenant}-{end_user}-{provider}-{updated_at}")),
        scopes: "mail.read".into(),
        expires_at: Some(updated_at + 3600),
        created_at: updated_at,
        updated_at,
    }
}

/// The sha256 of the `state` of link `id` of `tenant`.
fn state_of(tenant: &str, id: &str) -> String {
    crate::digest::sha256_hex(format!("state-{tenant}-{id}").as_bytes())
}

fn link(tenant: &str, id: &str, end_user: &str, scopes: &str, expires_at: i64) -> StoredLink {
    StoredLink {
        id: id.into(),
        tenant: tenant.into(),
        end_user: end_user.into(),
        provider: "mail".into(),
        scopes: scopes.into(),
        state_sha256: state_of(tenant, id),
        verifier: format!("pkce-verifier-{tenant}-{id}"),
        asked_by: r#"{"tool":"inbox","version":1}"#.into(),
        created_at: 0,
        expires_at,
        state: LinkState::Pending,
        error: None,
    }
}

const NO_BOUND: LinkBounds = LinkBounds { per_end_user: u64::MAX, per_tenant: u64::MAX };

/// The store, with tenant `acme` beside `default` and the provider `mail`
/// in both.
fn with_mail(fixture: &Fixture) -> Box<dyn Stores> {
    let store = fixture.open_all();
    let acme =
        TenantRecord { name: "acme".into(), public_enumeration: false, quotas: Quotas::default(), created_at: 1 };
    store.put_tenant(&acme, &audit("tenant.create")).unwrap();
    for tenant in ["default", "acme"] {
        store.put_provider(&provider(tenant, "mail", Some("client-secret-mail")), &audit("provider.put")).unwrap();
    }
    store
}

fn stored(store: &dyn AuthorizationStore, link: &StoredLink, bounds: LinkBounds, now: i64) {
    assert_eq!(store.insert_link(link, bounds, now).unwrap(), LinkInserted::Stored, "{}", link.id);
}

/// The audit log's actions, oldest first.
fn actions(store: &dyn RegistryStore) -> Vec<String> {
    let mut entries = store.audit(&AuditQuery { tenant: None, before: None, limit: 1000 }).unwrap();
    entries.reverse();
    entries.into_iter().map(|e| e.action).collect()
}

fn providers_are_replaced_and_deleted_with_their_grants_and_links(fixture: &Fixture) {
    let store = with_mail(fixture);
    let public = provider("default", "calendar", None);
    store.put_provider(&public, &audit("provider.put")).unwrap();
    // Two tenants' providers of one id are two providers.
    let replaced = StoredProvider {
        settings: r#"{"issuer":"https://other.example"}"#.into(),
        ..provider("acme", "mail", Some("s2"))
    };
    store.put_provider(&replaced, &audit("provider.put")).unwrap();
    assert_eq!(
        store.providers().unwrap(),
        [replaced.clone(), public.clone(), provider("default", "mail", Some("client-secret-mail"))]
    );

    for tenant in ["default", "acme"] {
        store.put_grant(&grant(tenant, "alice", "mail", 100), &audit("grant.put")).unwrap();
        stored(&*store, &link(tenant, "l1", "alice", "mail.read", 1_000), NO_BOUND, 0);
    }
    store.put_grant(&grant("default", "alice", "calendar", 100), &audit("grant.put")).unwrap();
    assert!(store.delete_provider("default", "mail", &audit("provider.delete")).unwrap());
    assert!(!store.delete_provider("default", "mail", &audit("provider.delete")).unwrap());
    assert_eq!(store.providers().unwrap(), [replaced, public]);
    assert_eq!(store.grants_of("default", "alice").unwrap(), [grant("default", "alice", "calendar", 100)]);
    assert_eq!(store.link("default", "l1").unwrap(), None, "its links went with it");
    // The other tenant's provider of the same id keeps its own.
    assert!(store.grant("acme", "alice", "mail").unwrap().is_some());
    assert!(store.link("acme", "l1").unwrap().is_some());

    // Nothing is stored for a provider that is not there (deleted as the
    // person came back), nor is its audit entry.
    let before = actions(&*store).len();
    let refused = store.put_grant(&grant("default", "alice", "mail", 200), &audit("grant.put"));
    assert!(matches!(refused, Err(StoreError::Conflict(_))), "{refused:?}");
    let refused = store.insert_link(&link("default", "l2", "alice", "mail.read", 1_000), NO_BOUND, 0);
    assert!(matches!(refused, Err(StoreError::Conflict(_))), "{refused:?}");
    assert_eq!(actions(&*store).len(), before);
    assert_eq!(store.link("default", "l2").unwrap(), None);
}

/// Every value in the four sealed columns, and whether it is sealed.
fn sealed_columns(fixture: &Fixture) -> Vec<String> {
    [
        "SELECT client_secret FROM authorization_providers WHERE client_secret IS NOT NULL",
        "SELECT access_token FROM authorization_grants",
        "SELECT refresh_token FROM authorization_grants WHERE refresh_token IS NOT NULL",
        "SELECT verifier FROM authorization_links",
    ]
    .into_iter()
    .flat_map(|sql| fixture.raw(sql))
    .collect()
}

fn tokens_secrets_and_verifiers_are_sealed_at_rest(fixture: &Fixture) {
    let store = fixture.open_all();
    let plain = ["cs-7f3a9c2e5d1b", "at-4e8b2a9d6c1f", "rt-9d2c7e4a1b6f", "pkce-3b6e1d8a4c7f"];
    store.put_provider(&provider("default", "mail", Some(plain[0])), &audit("provider.put")).unwrap();
    let g = StoredGrant {
        access_token: plain[1].into(),
        refresh_token: Some(plain[2].into()),
        ..grant("default", "alice", "mail", 100)
    };
    store.put_grant(&g, &audit("grant.put")).unwrap();
    stored(
        &*store,
        &StoredLink { verifier: plain[3].into(), ..link("default", "l1", "alice", "mail.read", 1_000) },
        NO_BOUND,
        0,
    );
    // A refresh seals its new tokens too.
    let refreshed = StoredGrant { access_token: "at-5c1e9b3d7a2f".into(), updated_at: 200, ..g.clone() };
    assert!(store.replace_refreshed(&refreshed, 100).unwrap());
    let plain = [&plain[..], &["at-5c1e9b3d7a2f"]].concat();

    let columns = sealed_columns(fixture);
    assert_eq!(columns.len(), 4);
    for value in &columns {
        assert!(value.starts_with("xc1:"), "{value}");
        assert!(!plain.iter().any(|p| value.contains(p)), "{value}");
    }
    // Nowhere in the database: not in another column, not in the audit log.
    let everything = fixture.raw(
        "SELECT tenant || id || settings || coalesce(client_secret, '') FROM authorization_providers
         UNION ALL SELECT tenant || end_user || provider || access_token || coalesce(refresh_token, '') || scopes
             FROM authorization_grants
         UNION ALL SELECT id || state_sha256 || verifier || asked_by FROM authorization_links
         UNION ALL SELECT action || target || detail FROM audit",
    );
    for p in &plain {
        assert!(!everything.iter().any(|row| row.contains(p)), "{p} is stored in plaintext");
    }
    if let Fixture::Sqlite(dir) = fixture {
        for file in ["registry.sqlite3", "registry.sqlite3-wal"] {
            let bytes = std::fs::read(dir.path().join(file)).unwrap_or_default();
            for p in &plain {
                assert!(!bytes.windows(p.len()).any(|w| w == p.as_bytes()), "{p} in {file}");
            }
        }
    }
    // And the store opens them.
    assert_eq!(store.providers().unwrap()[0].client_secret.as_deref(), Some("cs-7f3a9c2e5d1b"));
    assert_eq!(store.grant("default", "alice", "mail").unwrap().unwrap().access_token, "at-5c1e9b3d7a2f");
    assert_eq!(store.link("default", "l1").unwrap().unwrap().verifier, "pkce-3b6e1d8a4c7f");
    // Debug output carries no token.
    let debug =
        format!("{:?} {:?}", store.grant("default", "alice", "mail").unwrap(), store.link("default", "l1").unwrap());
    assert!(!plain.iter().any(|p| debug.contains(p)), "{debug}");
}

fn a_sealed_value_moved_to_another_row_or_field_does_not_open(fixture: &Fixture) {
    let store = with_mail(fixture);
    store.put_provider(&provider("default", "calendar", Some("cs-calendar")), &audit("provider.put")).unwrap();
    for user in ["alice", "bob"] {
        store.put_grant(&grant("default", user, "mail", 100), &audit("grant.put")).unwrap();
    }
    store.put_grant(&grant("default", "alice", "calendar", 100), &audit("grant.put")).unwrap();
    store.put_grant(&grant("acme", "alice", "mail", 100), &audit("grant.put")).unwrap();
    stored(&*store, &link("default", "l1", "alice", "mail.read", 1_000), NO_BOUND, 0);
    stored(&*store, &link("default", "l2", "bob", "mail.read", 1_000), NO_BOUND, 0);
    let wrong = |r: Result<Option<StoredGrant>, StoreError>| matches!(r, Err(StoreError::WrongSecretsKey));

    // Alice's access token in Bob's row, in her grant at another provider,
    // in another tenant's grant, or in the place of her refresh token.
    let alice_access = "(SELECT access_token FROM authorization_grants
                         WHERE tenant = 'default' AND end_user = 'alice' AND provider = 'mail')";
    fixture.raw(&format!(
        "UPDATE authorization_grants SET access_token = {alice_access} WHERE tenant = 'default' AND end_user = 'bob'"
    ));
    assert!(wrong(store.grant("default", "bob", "mail")));
    fixture.raw(&format!("UPDATE authorization_grants SET access_token = {alice_access} WHERE provider = 'calendar'"));
    assert!(wrong(store.grant("default", "alice", "calendar")));
    fixture.raw(&format!("UPDATE authorization_grants SET access_token = {alice_access} WHERE tenant = 'acme'"));
    assert!(wrong(store.grant("acme", "alice", "mail")));
    fixture.raw(&format!(
        "UPDATE authorization_grants SET refresh_token = {alice_access}
         WHERE tenant = 'default' AND end_user = 'alice' AND provider = 'mail'"
    ));
    assert!(wrong(store.grant("default", "alice", "mail")));
    assert!(matches!(store.grants_of("default", "alice"), Err(StoreError::WrongSecretsKey)));

    // A provider's secret in another provider's row; a verifier in another
    // link's.
    fixture.raw(
        "UPDATE authorization_providers SET client_secret =
             (SELECT client_secret FROM authorization_providers WHERE tenant = 'default' AND id = 'mail')
         WHERE tenant = 'acme'",
    );
    assert!(matches!(store.providers(), Err(StoreError::WrongSecretsKey)));
    fixture.raw(
        "UPDATE authorization_links SET verifier = (SELECT verifier FROM authorization_links WHERE id = 'l1')
         WHERE id = 'l2'",
    );
    assert!(matches!(store.link("default", "l2"), Err(StoreError::WrongSecretsKey)));
    assert!(store.link("default", "l1").unwrap().is_some());

    // A token put where a tool's secret is: the tool cannot read it.
    store.put_secret("default", "api-key", "v", &audit("secret.put"), u64::MAX).unwrap();
    fixture.raw(&format!("UPDATE secrets SET value = {alice_access} WHERE tenant = 'default' AND id = 'api-key'"));
    assert!(matches!(store.secrets(), Err(StoreError::WrongSecretsKey)));
}

fn links_are_bounded_per_person_and_tenant_and_a_pending_one_answered_again(fixture: &Fixture) {
    let store = with_mail(fixture);
    let bounds = LinkBounds { per_end_user: 2, per_tenant: 3 };
    let first = link("default", "a1", "alice", "mail.read", 1_000);
    stored(&*store, &first, bounds, 100);
    // A retried call asking the same gets the same link, and stores none.
    let again = link("default", "a1-again", "alice", "mail.read", 1_100);
    assert_eq!(store.insert_link(&again, bounds, 200).unwrap(), LinkInserted::Existing(first.clone()));
    assert_eq!(store.link("default", "a1-again").unwrap(), None);
    // Other scopes are another link, within her bound.
    stored(&*store, &link("default", "a2", "alice", "mail.read mail.send", 1_000), bounds, 100);
    let third = link("default", "a3", "alice", "calendar", 1_000);
    assert_eq!(store.insert_link(&third, bounds, 100).unwrap(), LinkInserted::TooMany);
    // Her existing link is still answered at her bound.
    assert!(matches!(store.insert_link(&again, bounds, 200).unwrap(), LinkInserted::Existing(_)));
    stored(&*store, &link("default", "b1", "bob", "mail.read", 1_000), bounds, 100);
    // The tenant's bound: three open links.
    let carol = link("default", "c1", "carol", "mail.read", 1_000);
    assert_eq!(store.insert_link(&carol, bounds, 100).unwrap(), LinkInserted::TooMany);
    assert_eq!(store.link("default", "c1").unwrap(), None);
    // Another tenant's links are counted apart.
    stored(&*store, &link("acme", "c1", "carol", "mail.read", 1_000), bounds, 100);
    // A taken link is open until it is finished.
    assert!(store.take_link("default", &state_of("default", "b1"), 100).unwrap().is_some());
    assert_eq!(store.insert_link(&carol, bounds, 100).unwrap(), LinkInserted::TooMany);
    store.finish_link("default", "b1", LinkState::Connected, None).unwrap();
    stored(&*store, &carol, bounds, 100);
    // A taken link is not answered again: the person gets a new one.
    assert!(store.take_link("default", &state_of("default", "c1"), 100).unwrap().is_some());
    store.finish_link("default", "c1", LinkState::Failed, Some("access_denied")).unwrap();
    stored(&*store, &link("default", "c2", "carol", "mail.read", 1_000), bounds, 100);
}

fn expired_links_do_not_count_and_are_swept(fixture: &Fixture) {
    let store = with_mail(fixture);
    let bounds = LinkBounds { per_end_user: 1, per_tenant: 2 };
    stored(&*store, &link("default", "a1", "alice", "mail.read", 500), bounds, 100);
    stored(&*store, &link("default", "b1", "bob", "mail.read", 2_000), bounds, 100);
    assert_eq!(
        store.insert_link(&link("default", "c1", "carol", "x", 2_000), bounds, 100).unwrap(),
        LinkInserted::TooMany
    );
    // At 500 Alice's link has expired: it is neither counted nor answered.
    let renewed = link("default", "a2", "alice", "mail.read", 2_000);
    stored(&*store, &renewed, bounds, 500);
    assert_eq!(store.insert_link(&renewed, bounds, 600).unwrap(), LinkInserted::Existing(renewed.clone()));
    assert_eq!(store.take_link("default", &state_of("default", "a1"), 500).unwrap(), None, "expired");
    // Kept, expired, until swept.
    assert_eq!(store.link("default", "a1").unwrap().unwrap().state, LinkState::Pending);
    assert_eq!(store.sweep_links(500).unwrap(), 0, "not expired before 500");
    assert_eq!(store.sweep_links(501).unwrap(), 1);
    assert_eq!(store.link("default", "a1").unwrap(), None);
    assert_eq!(store.link("default", "a2").unwrap(), Some(renewed));
    assert_eq!(store.sweep_links(2_000).unwrap(), 0);
    assert_eq!(store.sweep_links(3_000).unwrap(), 2);
}

fn a_link_is_taken_once_and_finished_once(fixture: &Fixture) {
    let store = with_mail(fixture);
    let l = link("default", "l1", "alice", "mail.read", 1_000);
    stored(&*store, &l, NO_BOUND, 0);
    // Another tenant's callback with this state finds nothing.
    assert_eq!(store.take_link("acme", &l.state_sha256, 100).unwrap(), None);
    assert_eq!(store.take_link("default", &state_of("default", "nosuch"), 100).unwrap(), None);
    // A link not taken cannot be finished.
    store.finish_link("default", "l1", LinkState::Connected, None).unwrap();
    assert_eq!(store.link("default", "l1").unwrap().unwrap().state, LinkState::Pending);

    let taken = store.take_link("default", &l.state_sha256, 100).unwrap().unwrap();
    assert_eq!(taken, StoredLink { state: LinkState::Exchanging, ..l.clone() });
    assert_eq!(taken.verifier, "pkce-verifier-default-l1");
    assert_eq!(store.take_link("default", &l.state_sha256, 100).unwrap(), None, "a state works once");
    for wrong in [LinkState::Pending, LinkState::Exchanging] {
        let refused = store.finish_link("default", "l1", wrong, None);
        assert!(matches!(refused, Err(StoreError::Inconsistent(_))), "{refused:?}");
    }
    store.finish_link("default", "l1", LinkState::Failed, Some("the provider refused the code")).unwrap();
    let failed = store.link("default", "l1").unwrap().unwrap();
    assert_eq!((failed.state, failed.error.as_deref()), (LinkState::Failed, Some("the provider refused the code")));
    // Finished once: a later finish changes nothing.
    store.finish_link("default", "l1", LinkState::Connected, None).unwrap();
    assert_eq!(store.link("default", "l1").unwrap().unwrap().state, LinkState::Failed);
    assert_eq!(store.take_link("default", &l.state_sha256, 100).unwrap(), None);

    // Connected; an expired link is not taken.
    stored(&*store, &link("default", "l2", "alice", "mail.send", 1_000), NO_BOUND, 0);
    assert!(store.take_link("default", &state_of("default", "l2"), 999).unwrap().is_some());
    store.finish_link("default", "l2", LinkState::Connected, None).unwrap();
    assert_eq!(store.link("default", "l2").unwrap().unwrap().state, LinkState::Connected);
    stored(&*store, &link("default", "l3", "alice", "x", 1_000), NO_BOUND, 0);
    assert_eq!(store.take_link("default", &state_of("default", "l3"), 1_000).unwrap(), None);
}

fn grants_are_put_replaced_listed_and_deleted(fixture: &Fixture) {
    let store = with_mail(fixture);
    store.put_provider(&provider("default", "calendar", None), &audit("provider.put")).unwrap();
    let public = StoredGrant { refresh_token: None, expires_at: None, ..grant("default", "alice", "calendar", 100) };
    store.put_grant(&grant("default", "alice", "mail", 100), &audit("grant.put")).unwrap();
    store.put_grant(&public, &audit("grant.put")).unwrap();
    store.put_grant(&grant("default", "bob", "mail", 100), &audit("grant.put")).unwrap();
    store.put_grant(&grant("acme", "alice", "mail", 100), &audit("grant.put")).unwrap();
    assert_eq!(store.grant("default", "alice", "mail").unwrap(), Some(grant("default", "alice", "mail", 100)));
    assert_eq!(store.grant("default", "carol", "mail").unwrap(), None);
    assert_eq!(store.grants_of("default", "alice").unwrap(), [public.clone(), grant("default", "alice", "mail", 100)]);
    assert_eq!(store.grants_of("acme", "alice").unwrap(), [grant("acme", "alice", "mail", 100)]);
    assert!(store.grants_of("default", "carol").unwrap().is_empty());

    // Granted again (more scopes): replaced, its `updated_at` moved on
    // even within the second.
    let step_up = StoredGrant { scopes: "mail.read mail.send".into(), ..grant("default", "alice", "mail", 100) };
    store.put_grant(&step_up, &audit("grant.put")).unwrap();
    assert_eq!(store.grant("default", "alice", "mail").unwrap(), Some(StoredGrant { updated_at: 101, ..step_up }));
    let later = grant("default", "alice", "mail", 500);
    store.put_grant(&later, &audit("grant.put")).unwrap();
    assert_eq!(store.grant("default", "alice", "mail").unwrap(), Some(later));

    assert!(store.delete_grant("default", "alice", "mail", &audit("grant.delete")).unwrap());
    assert!(!store.delete_grant("default", "alice", "mail", &audit("grant.delete")).unwrap());
    assert_eq!(store.grants_of("default", "alice").unwrap(), [public]);
    assert!(store.grant("default", "bob", "mail").unwrap().is_some());
    assert!(store.grant("acme", "alice", "mail").unwrap().is_some());
}

fn a_refresh_replaces_only_the_grant_it_refreshed(fixture: &Fixture) {
    let store = with_mail(fixture);
    store.put_grant(&grant("default", "alice", "mail", 100), &audit("grant.put")).unwrap();
    // Refreshed within the second it was stored: still a new `updated_at`.
    let first = StoredGrant {
        access_token: "at-first".into(),
        refresh_token: Some("rt-first".into()),
        scopes: "mail.read mail.send".into(),
        expires_at: Some(4_000),
        ..grant("default", "alice", "mail", 100)
    };
    assert!(store.replace_refreshed(&first, 100).unwrap());
    assert_eq!(
        store.grant("default", "alice", "mail").unwrap(),
        Some(StoredGrant { updated_at: 101, ..first.clone() })
    );
    // Another refresh from the same grant lost: nothing written.
    let lost = StoredGrant { access_token: "at-lost".into(), updated_at: 102, ..first.clone() };
    assert!(!store.replace_refreshed(&lost, 100).unwrap());
    assert_eq!(store.grant("default", "alice", "mail").unwrap().unwrap().access_token, "at-first");
    // From the grant as it is now: replaced, at the time given.
    let second = StoredGrant { access_token: "at-second".into(), refresh_token: None, updated_at: 900, ..first };
    assert!(store.replace_refreshed(&second, 101).unwrap());
    assert_eq!(store.grant("default", "alice", "mail").unwrap(), Some(second.clone()));
    // Nor does a refresh write a grant deleted meanwhile, or another's.
    assert!(!store.replace_refreshed(&StoredGrant { end_user: "bob".into(), ..second.clone() }, 900).unwrap());
    assert_eq!(store.grant("default", "bob", "mail").unwrap(), None);
    store.delete_grant("default", "alice", "mail", &audit("grant.delete")).unwrap();
    assert!(!store.replace_refreshed(&second, 900).unwrap());
    assert_eq!(store.grant("default", "alice", "mail").unwrap(), None);
}

fn a_refresh_is_claimed_by_one_holder_until_its_claim_ends(fixture: &Fixture) {
    let store = with_mail(fixture);
    let claim = |until: i64, now: i64| store.claim_refresh("default", "alice", "mail", until, now).unwrap();
    assert!(!claim(130, 100), "there is no grant to refresh");
    store.put_grant(&grant("default", "alice", "mail", 100), &audit("grant.put")).unwrap();
    assert!(claim(130, 100));
    assert!(!claim(131, 101), "held");
    assert!(!claim(159, 129), "held until 130");
    // Another person's, or the same person's at another tenant, is apart.
    store.put_grant(&grant("acme", "alice", "mail", 100), &audit("grant.put")).unwrap();
    assert!(store.claim_refresh("acme", "alice", "mail", 130, 100).unwrap());
    // A write of the grant does not release it.
    store.put_grant(&grant("default", "alice", "mail", 110), &audit("grant.put")).unwrap();
    assert!(!claim(140, 110));
    // Its holder outlived it: taken over.
    assert!(claim(160, 130));
    // The first holder giving it back now gives nothing: it is another's.
    store.release_refresh("default", "alice", "mail", 130).unwrap();
    assert!(!claim(170, 140));
    store.release_refresh("default", "alice", "mail", 160).unwrap();
    assert!(claim(171, 141), "given back");
    store.release_refresh("default", "alice", "mail", 171).unwrap();
    // Deleted with its grant.
    assert!(claim(200, 150));
    store.delete_grant("default", "alice", "mail", &audit("grant.delete")).unwrap();
    store.put_grant(&grant("default", "alice", "mail", 150), &audit("grant.put")).unwrap();
    assert!(claim(201, 151));
}

fn deleting_an_end_user_deletes_their_grants_and_links(fixture: &Fixture) {
    let store = with_mail(fixture);
    for tenant in ["default", "acme"] {
        for user in ["alice", "bob"] {
            store.put_end_user(tenant, user, "hash", &audit("end-user.put"), u64::MAX).unwrap();
            store.put_grant(&grant(tenant, user, "mail", 100), &audit("grant.put")).unwrap();
            stored(&*store, &link(tenant, &format!("{user}-link"), user, "mail.read", 1_000), NO_BOUND, 0);
        }
    }
    assert!(store.delete_end_user("default", "alice", &audit("end-user.delete")).unwrap());
    assert!(store.grants_of("default", "alice").unwrap().is_empty());
    assert_eq!(store.link("default", "alice-link").unwrap(), None);
    // Only hers, only in her tenant.
    assert!(store.grant("default", "bob", "mail").unwrap().is_some());
    assert!(store.link("default", "bob-link").unwrap().is_some());
    assert!(store.grant("acme", "alice", "mail").unwrap().is_some());
    assert!(store.link("acme", "alice-link").unwrap().is_some());
    assert_eq!(actions(&*store).last().map(String::as_str), Some("end-user.delete"));
}

fn every_write_of_a_provider_or_grant_is_audited_with_no_token(fixture: &Fixture) {
    let store = fixture.open_all();
    let entry = |action: &str, target: &str| {
        AuditEntry::new(&Principal::server("admin"), Some("default"), action, target)
            .detail(serde_json::json!({ "scopes": "mail.read" }))
    };
    store.put_provider(&provider("default", "mail", Some("cs-secret")), &entry("provider.put", "mail")).unwrap();
    store.put_grant(&grant("default", "alice", "mail", 100), &entry("grant.put", "alice/mail")).unwrap();
    // Links and refreshes are not audited by the store (the core audits
    // what a person did and what failed).
    stored(&*store, &link("default", "l1", "alice", "mail.read", 1_000), NO_BOUND, 0);
    assert!(store.replace_refreshed(&grant("default", "alice", "mail", 200), 100).unwrap());
    assert!(store.claim_refresh("default", "alice", "mail", 300, 200).unwrap());
    assert!(store.delete_grant("default", "alice", "mail", &entry("grant.delete", "alice/mail")).unwrap());
    assert!(store.delete_provider("default", "mail", &entry("provider.delete", "mail")).unwrap());
    assert_eq!(actions(&*store), ["provider.put", "grant.put", "grant.delete", "provider.delete"]);
    let audit = fixture.raw("SELECT actor || ' ' || action || ' ' || target || ' ' || detail FROM audit");
    assert!(audit.iter().all(|e| e.starts_with("admin ")), "{audit:?}");
    for token in ["cs-secret", "at-default-alice-mail-", "rt-default-alice-mail-", "pkce-verifier"] {
        assert!(!audit.iter().any(|e| e.contains(token)), "{token} in {audit:?}");
    }
}

/// Two replicas' stores on one database, with the provider `mail`.
fn two_replicas() -> (Box<dyn Stores>, Box<dyn Stores>) {
    let fixture = postgres();
    (with_mail(&fixture), fixture.open_all())
}

#[test]
fn racing_callbacks_on_two_replicas_take_a_link_once() {
    let (a, b) = two_replicas();
    for round in 0..30 {
        let l = link("default", &format!("l{round}"), &format!("user{round}"), "mail.read", 1_000);
        stored(&*a, &l, NO_BOUND, 0);
        let taken: Vec<Option<StoredLink>> = std::thread::scope(|s| {
            let takers = [&a, &b].map(|store| s.spawn(|| store.take_link("default", &l.state_sha256, 100).unwrap()));
            takers.into_iter().map(|t| t.join().unwrap()).collect()
        });
        assert_eq!(taken.iter().flatten().count(), 1, "round {round}: {taken:?}");
    }
}

#[test]
fn racing_replicas_claim_a_refresh_once_and_take_over_an_outlived_claim() {
    let (a, b) = two_replicas();
    for round in 0..30 {
        let user = format!("user{round}");
        a.put_grant(&grant("default", &user, "mail", 100), &audit("grant.put")).unwrap();
        let claimed: Vec<bool> = std::thread::scope(|s| {
            let claims =
                [&a, &b].map(|store| s.spawn(|| store.claim_refresh("default", &user, "mail", 130, 100).unwrap()));
            claims.into_iter().map(|c| c.join().unwrap()).collect()
        });
        assert_eq!(claimed.iter().filter(|c| **c).count(), 1, "round {round}: {claimed:?}");
        // Whoever holds it outlived it: either replica takes it over, once.
        let taken_over: Vec<bool> = std::thread::scope(|s| {
            let claims =
                [&a, &b].map(|store| s.spawn(|| store.claim_refresh("default", &user, "mail", 160, 130).unwrap()));
            claims.into_iter().map(|c| c.join().unwrap()).collect()
        });
        assert_eq!(taken_over.iter().filter(|c| **c).count(), 1, "round {round}: {taken_over:?}");
    }
}

#[test]
fn replicas_storing_links_at_once_never_pass_a_bound() {
    let (a, b) = two_replicas();
    // Each round the bound has room for one more link, and both replicas
    // store one at the same moment: one is stored, the other refused.
    let race = |bounds: LinkBounds, links: [StoredLink; 2]| -> usize {
        let start = std::sync::Barrier::new(2);
        std::thread::scope(|s| {
            let runs = [&a, &b].into_iter().zip(links).map(|(store, link)| {
                let start = &start;
                s.spawn(move || {
                    start.wait();
                    store.insert_link(&link, bounds, 100).unwrap() == LinkInserted::Stored
                })
            });
            runs.collect::<Vec<_>>().into_iter().map(|run| run.join().unwrap()).filter(|stored| *stored).count()
        })
    };
    // One person (asking for other scopes on each replica).
    for round in 0..20 {
        let bounds = LinkBounds { per_end_user: round + 1, per_tenant: u64::MAX };
        let links = ["a", "b"].map(|r| link("default", &format!("{r}{round}"), "alice", &format!("{r}{round}"), 1_000));
        assert_eq!(race(bounds, links), 1, "round {round}: two replicas stored past the person's bound together");
    }
    // Many people: the tenant's bound (beside Alice's 20 links).
    for round in 0..20 {
        let bounds = LinkBounds { per_end_user: u64::MAX, per_tenant: 20 + round + 1 };
        let links =
            ["a", "b"].map(|r| link("default", &format!("m{r}{round}"), &format!("{r}{round}"), "mail.read", 1_000));
        assert_eq!(race(bounds, links), 1, "round {round}: two replicas stored past the tenant's bound together");
    }
}

#[test]
fn writes_of_providers_and_grants_name_their_topic_in_the_change_log() {
    let (a, b) = two_replicas();
    let changes = |after: i64| {
        let feed = b.changes_since(after).unwrap();
        (feed.latest, feed.topics.into_iter().collect::<Vec<_>>())
    };
    let mut seen = changes(i64::MAX).0;
    let mut expect = |what: &str, topics: &[Topic]| {
        let (latest, changed) = changes(seen);
        assert_eq!(changed, topics, "{what}");
        seen = latest;
    };
    a.put_provider(&provider("default", "calendar", None), &audit("provider.put")).unwrap();
    expect("a provider put", &[Topic::Authorizations]);
    a.put_grant(&grant("default", "alice", "mail", 100), &audit("grant.put")).unwrap();
    expect("a grant put", &[Topic::Authorizations]);
    // What replicas do not cache writes no row.
    stored(&*a, &link("default", "l1", "alice", "mail.read", 1_000), NO_BOUND, 0);
    a.take_link("default", &state_of("default", "l1"), 100).unwrap().unwrap();
    a.finish_link("default", "l1", LinkState::Connected, None).unwrap();
    assert!(a.claim_refresh("default", "alice", "mail", 130, 100).unwrap());
    a.release_refresh("default", "alice", "mail", 130).unwrap();
    assert!(!a.replace_refreshed(&grant("default", "alice", "mail", 200), 99).unwrap());
    expect("links, claims and a refresh that lost", &[]);
    assert!(a.replace_refreshed(&grant("default", "alice", "mail", 200), 100).unwrap());
    expect("a refresh", &[Topic::Authorizations]);
    assert!(a.delete_grant("default", "alice", "mail", &audit("grant.delete")).unwrap());
    expect("a grant deleted", &[Topic::Authorizations]);
    a.put_end_user("default", "bob", "hash", &audit("end-user.put"), u64::MAX).unwrap();
    expect("an end user with no grant", &[]);
    a.put_grant(&grant("default", "bob", "mail", 100), &audit("grant.put")).unwrap();
    expect("a grant put", &[Topic::Authorizations]);
    assert!(a.delete_end_user("default", "bob", &audit("end-user.delete")).unwrap());
    expect("an end user deleted with their grant", &[Topic::Authorizations]);
    assert!(a.delete_provider("default", "calendar", &audit("provider.delete")).unwrap());
    expect("a provider deleted", &[Topic::Authorizations]);
}

#[test]
fn a_provider_deleted_while_a_grant_is_stored_for_it_takes_the_grant() {
    let (a, b) = two_replicas();
    // Each round, one replica stores a grant as the other deletes its
    // provider: either the grant is stored first and deleted with it, or it
    // is refused; never a grant without its provider, never an error.
    for round in 0..20 {
        a.put_provider(&provider("default", "mail", None), &audit("provider.put")).unwrap();
        let user = format!("user{round}");
        let (put, deleted) = std::thread::scope(|s| {
            let put = s.spawn(|| a.put_grant(&grant("default", &user, "mail", 100), &audit("grant.put")));
            let deleted = s.spawn(|| b.delete_provider("default", "mail", &audit("provider.delete")));
            (put.join().unwrap(), deleted.join().unwrap())
        });
        assert!(deleted.unwrap_or_else(|e| panic!("round {round}: {e}")));
        assert!(matches!(put, Ok(()) | Err(StoreError::Conflict(_))), "round {round}: {put:?}");
        assert_eq!(a.grant("default", &user, "mail").unwrap(), None, "round {round}");
    }
}
