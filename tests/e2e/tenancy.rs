//! Tenants, keys, quotas and the audit log, end to end: competing vendors on
//! one server, and no path from one tenant's key to another's tools, secrets
//! or data.

use crate::catalog::Designer;
use crate::support::{Server, TOKEN, fixture, invocation, outputs, plinth_bin, plugins_dir};
use plinth::api::{Access, Scope};
use reqwest::Method;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Who may call what, written down independently of the router: every
/// endpoint the router serves must appear here with the same decision, so a
/// new route without a decision fails [`every_route_answers_every_caller_as_decided`].
fn decisions() -> BTreeMap<(&'static str, &'static str), (Access, Scope)> {
    use Access::*;
    use Scope::{Server, Tenant};
    BTreeMap::from([
        (("GET", "/health"), (Open, Server)),
        (("GET", "/ready"), (Open, Server)),
        (("GET", "/.well-known/jwks.json"), (Open, Server)),
        (("GET", "/metrics"), (Operate, Server)),
        (("GET", "/openapi.json"), (Open, Server)),
        (("GET", "/tools"), (Enumerate, Tenant)),
        (("GET", "/tools/{tool_ref}"), (Enumerate, Tenant)),
        (("POST", "/tools/{tool_ref}"), (Invoke, Tenant)),
        (("GET", "/tools/{tool_id}/versions"), (Enumerate, Tenant)),
        (("GET", "/tools/{tool_id}/versions/{version_ref}"), (Enumerate, Tenant)),
        (("POST", "/tools/{tool_id}/versions/{version_ref}"), (Invoke, Tenant)),
        (("POST", "/admin/tools"), (Publish, Tenant)),
        (("DELETE", "/admin/tools/{tool_id}/versions/{version}"), (Publish, Tenant)),
        (("GET", "/admin/logs"), (Publish, Tenant)),
        (("GET", "/admin/usage"), (Publish, Tenant)),
        (("GET", "/admin/console-settings"), (Publish, Tenant)),
        (("PUT", "/admin/console-settings"), (Publish, Tenant)),
        (("GET", "/admin/trust-policy"), (Publish, Tenant)),
        (("PUT", "/admin/trust-policy"), (Publish, Tenant)),
        (("GET", "/admin/trust-policy/refused"), (Publish, Tenant)),
        (("GET", "/admin/registries"), (Publish, Tenant)),
        (("PUT", "/admin/registries/{registry}"), (Publish, Tenant)),
        (("DELETE", "/admin/registries/{registry}"), (Publish, Tenant)),
        (("GET", "/admin/secrets"), (Publish, Tenant)),
        (("PUT", "/admin/secrets/{id}"), (Publish, Tenant)),
        (("DELETE", "/admin/secrets/{id}"), (Publish, Tenant)),
        (("GET", "/admin/config"), (Publish, Tenant)),
        (("PUT", "/admin/config/{tool}/{key}"), (Publish, Tenant)),
        (("DELETE", "/admin/config/{tool}/{key}"), (Publish, Tenant)),
        (("GET", "/admin/tenant"), (Publish, Tenant)),
        (("GET", "/admin/tenants"), (Operate, Server)),
        (("POST", "/admin/tenants"), (Operate, Server)),
        (("GET", "/admin/tenants/{name}"), (Operate, Server)),
        (("PATCH", "/admin/tenants/{name}"), (Operate, Server)),
        (("GET", "/admin/keys"), (Operate, Server)),
        (("POST", "/admin/keys"), (Operate, Server)),
        (("GET", "/admin/toolsets"), (Publish, Tenant)),
        (("GET", "/admin/toolsets/{name}"), (Publish, Tenant)),
        (("PUT", "/admin/toolsets/{name}"), (Publish, Tenant)),
        (("DELETE", "/admin/toolsets/{name}"), (Publish, Tenant)),
        (("DELETE", "/admin/keys/{id}"), (Operate, Server)),
        (("GET", "/admin/audit"), (Audit, Server)),
        (("GET", "/otc/health"), (Open, Tenant)),
        (("GET", "/otc/tools"), (Enumerate, Tenant)),
        (("POST", "/otc/tools/call"), (Invoke, Tenant)),
        (("POST", "/otc/call"), (Invoke, Tenant)),
        // CHEQ: the resource URI is a capability, an accept carries signatures.
        (("GET", "/cheq/transactions/{id}"), (Open, Tenant)),
        (("GET", "/cheq/transactions/{id}/cheq"), (Open, Tenant)),
        (("POST", "/cheq/transactions/{id}"), (Open, Tenant)),
        (("GET", "/cheq/results/{id}"), (Invoke, Tenant)),
        (("GET", "/cheq/confirm"), (Open, Tenant)),
        (("POST", "/cheq/confirm"), (Open, Tenant)),
        (("POST", "/cheq/login"), (Open, Tenant)),
        (("POST", "/cheq/decide"), (Open, Tenant)),
        (("GET", "/admin/cheq/{id}"), (Audit, Server)),
        (("PUT", "/admin/end-users/{name}"), (Publish, Tenant)),
        (("DELETE", "/admin/end-users/{name}"), (Publish, Tenant)),
        // End-user authorization: a publisher's providers and its people's
        // accounts; the person's pages (each checks the person's own
        // session: open to the access layer); the agent's status, a
        // consumer's as the CHEQ result URIs are.
        (("GET", "/admin/authorization-providers"), (Publish, Tenant)),
        (("PUT", "/admin/authorization-providers/{id}"), (Publish, Tenant)),
        (("DELETE", "/admin/authorization-providers/{id}"), (Publish, Tenant)),
        (("GET", "/admin/end-users/{name}/connections"), (Publish, Tenant)),
        (("DELETE", "/admin/end-users/{name}/connections/{provider}"), (Publish, Tenant)),
        (("GET", "/connections"), (Open, Tenant)),
        (("GET", "/connections/callback"), (Open, Tenant)),
        (("GET", "/connections/{link}"), (Open, Tenant)),
        (("POST", "/connections/{link}"), (Open, Tenant)),
        (("GET", "/connections/{link}/status"), (Invoke, Tenant)),
        (("POST", "/connections/{provider}/revoke"), (Open, Tenant)),
        (("GET", "/admin/confirmation-server"), (Publish, Tenant)),
        (("PUT", "/admin/confirmation-server"), (Publish, Tenant)),
        (("DELETE", "/admin/confirmation-server"), (Publish, Tenant)),
        (("GET", "/admin/tools/{tool_id}/confirmation"), (Publish, Tenant)),
        (("PUT", "/admin/tools/{tool_id}/confirmation"), (Publish, Tenant)),
        (("DELETE", "/admin/tools/{tool_id}/confirmation"), (Publish, Tenant)),
        // MCP: one endpoint, access decided per JSON-RPC method.
        (("GET", "/mcp"), (Enumerate, Tenant)),
        (("DELETE", "/mcp"), (Enumerate, Tenant)),
        (("POST", "/mcp initialize"), (Enumerate, Tenant)),
        (("POST", "/mcp server/discover"), (Enumerate, Tenant)),
        (("POST", "/mcp tools/list"), (Enumerate, Tenant)),
        (("POST", "/mcp tools/call"), (Invoke, Tenant)),
        (("POST", "/mcp subscriptions/listen"), (Enumerate, Tenant)),
        // The pages' stylesheet, and the designer's catalog: signing in is
        // open, every page needs a catalog session of the tenant.
        (("GET", "/assets/plinth.css"), (Open, Server)),
        (("GET", "/catalog/sign-in"), (Open, Tenant)),
        (("POST", "/catalog/sign-in"), (Open, Tenant)),
        (("POST", "/catalog/sign-out"), (Catalog, Tenant)),
        (("GET", "/catalog"), (Catalog, Tenant)),
        (("GET", "/catalog/tools/{tool_id}"), (Catalog, Tenant)),
        (("GET", "/catalog/tools/{tool_id}/diff"), (Catalog, Tenant)),
        (("GET", "/catalog/tools/{tool_id}/try"), (Catalog, Tenant)),
        (("POST", "/catalog/tools/{tool_id}/try"), (Catalog, Tenant)),
        (("GET", "/catalog/toolsets"), (Catalog, Tenant)),
        (("POST", "/catalog/toolsets"), (CatalogPublish, Tenant)),
        (("GET", "/catalog/toolsets/{name}"), (Catalog, Tenant)),
        (("GET", "/catalog/toolsets/{name}/diff"), (Catalog, Tenant)),
        (("GET", "/catalog/confirmations/{id}"), (Catalog, Tenant)),
        (("GET", "/catalog/providers"), (CatalogPublish, Tenant)),
        // OAuth: the metadata and the authorization server are open (its
        // sign-in is the end user's password); an operator turns it off.
        (("GET", "/.well-known/oauth-protected-resource"), (Open, Tenant)),
        (("GET", "/.well-known/oauth-protected-resource/mcp"), (Open, Server)),
        (("GET", "/.well-known/oauth-protected-resource/t/{tenant}/mcp"), (Open, Server)),
        (("GET", "/.well-known/oauth-protected-resource/t/{tenant}/toolsets/{name}/mcp"), (Open, Server)),
        (("GET", "/.well-known/oauth-authorization-server"), (Open, Tenant)),
        (("GET", "/.well-known/oauth-authorization-server/t/{tenant}"), (Open, Server)),
        (("GET", "/oauth/authorize"), (Open, Tenant)),
        (("POST", "/oauth/authorize"), (Open, Tenant)),
        (("POST", "/oauth/token"), (Open, Tenant)),
        (("POST", "/oauth/register"), (Open, Tenant)),
        (("POST", "/oauth/revoke"), (Open, Tenant)),
        (("PUT", "/admin/tenants/{tenant}/oauth"), (Operate, Server)),
    ])
}

/// A caller in the matrix.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Who {
    NoKey,
    InvalidKey,
    RevokedKey,
    Consumer(&'static str),
    Publisher(&'static str),
    Operator,
}

/// What the access layer should do.
#[derive(Debug, PartialEq)]
enum Expect {
    Allowed,
    Unauthorized,
    Forbidden,
    NotFound,
}

/// The rules of docs/tenancy.md, applied to one combination. `root` is the
/// tenant of the platform root (`default` for `/`).
fn expected(access: Access, scope: Scope, via_tenant_root: bool, root: &str, who: Who) -> Expect {
    if scope == Scope::Server && via_tenant_root {
        return Expect::NotFound;
    }
    if access == Access::Open {
        return Expect::Allowed;
    }
    let exists = ["default", "acme", "public"].contains(&root);
    // A catalog page reads a catalog session, never a bearer key: the
    // caller's key opened one at its own tenant's root (an operator's at
    // each existing root), and it opens that root's catalog only. A session
    // presented anywhere else, a revoked key's or a made-up one is none.
    if access.is_catalog() {
        let opened_here = match who {
            Who::Consumer(t) | Who::Publisher(t) => t == root,
            Who::Operator => exists,
            Who::NoKey | Who::InvalidKey | Who::RevokedKey => false,
        };
        // A page that changes the tenant: a publisher's session (or an
        // operator's), not a consumer's.
        let consumer = matches!(who, Who::Consumer(_));
        return match (opened_here, access == Access::CatalogPublish && consumer) {
            (false, _) => Expect::Unauthorized,
            (true, true) => Expect::Forbidden,
            (true, false) => Expect::Allowed,
        };
    }
    let public = root == "public";
    let (role, tenant) = match who {
        Who::NoKey if access == Access::Enumerate && public && scope == Scope::Tenant => return Expect::Allowed,
        Who::NoKey | Who::InvalidKey | Who::RevokedKey => return Expect::Unauthorized,
        Who::Consumer(t) => (1, Some(t)),
        Who::Publisher(t) => (2, Some(t)),
        Who::Operator => (3, None),
    };
    if scope == Scope::Tenant && (!exists || tenant.is_some_and(|t| t != root)) {
        return Expect::NotFound;
    }
    let least = match access {
        Access::Enumerate | Access::Invoke => 1,
        Access::Publish | Access::Audit => 2,
        Access::Operate => 3,
        Access::Open => 0,
        Access::Catalog => 1,
        Access::CatalogPublish => 2,
    };
    if role < least { Expect::Forbidden } else { Expect::Allowed }
}

/// A concrete request for a routed path: parameters filled with values that
/// name nothing (so an allowed call changes nothing that matters) and bodies
/// the handler will refuse or accept harmlessly.
fn concrete(method: &str, path: &str) -> (String, Option<Vec<u8>>) {
    let none = "00000000-0000-4000-8000-000000000000";
    let filled = path
        .replace("{tool_ref}", &if method == "POST" { format!("{none}:invoke") } else { none.to_string() })
        .replace("{tool_id}", none)
        .replace("{version_ref}", if method == "POST" { "1:invoke" } else { "1" })
        .replace("{version}", "1")
        .replace("{id}", "matrix-probe")
        .replace("{tool}", "probe")
        .replace("{key}", "probe-key")
        .replace("{name}", "no-such-tenant")
        .replace("{tenant}", "no-such-tenant")
        .replace("{registry}", "registry.example")
        .replace("{link}", "matrix-probe")
        .replace("{provider}", "probe");
    // `/mcp tools/call`: a JSON-RPC request of that method to /mcp.
    if let Some(rpc) = path.strip_prefix("/mcp ") {
        let body = json!({ "jsonrpc": "2.0", "id": 1, "method": rpc, "params": { "name": "probe", "arguments": {} } });
        return ("/mcp".to_string(), Some(body.to_string().into_bytes()));
    }
    let body = match (method, path) {
        ("PUT", _) => Some(b"value".to_vec()),
        ("POST", "/admin/tools") => Some(b"not a component".to_vec()),
        ("POST", _) | ("PATCH", _) => Some(b"{}".to_vec()),
        _ => None,
    };
    (filled, body)
}

#[tokio::test(flavor = "multi_thread")]
async fn every_route_answers_every_caller_as_decided() {
    // The router's own list, against the decisions above.
    let routed: BTreeMap<(String, String), (Access, Scope)> = plinth::api::endpoints()
        .into_iter()
        .map(|e| {
            let path = match e.rpc_method {
                Some(rpc) => format!("{} {rpc}", e.path),
                None => e.path.to_string(),
            };
            ((e.method.to_string(), path), (e.access, e.scope))
        })
        .collect();
    let decided: BTreeMap<(String, String), (Access, Scope)> =
        decisions().into_iter().map(|((m, p), d)| ((m.to_string(), p.to_string()), d)).collect();
    assert_eq!(routed, decided, "every route needs a decision in this test, and every decision a route");

    // The walk signs in (and fails to) many times from one address: the
    // throttle would lock it out halfway (its tests are in catalog.rs and
    // hardening_net.rs).
    let server = Server::start(&["--login-address-lockout-after", "1000000", "--login-lockout-after", "1000000"]);
    server.create_tenant("acme", json!({})).await;
    server.create_tenant("public", json!({})).await;
    let public = json!({ "publicEnumeration": true });
    assert_eq!(server.call_as(Some(TOKEN), Method::PATCH, "/admin/tenants/public", Some(&public)).await.0, 200);
    let mut keys: BTreeMap<String, String> = BTreeMap::new();
    for (tenant, role) in
        [("acme", "consumer"), ("acme", "publisher"), ("default", "consumer"), ("default", "publisher")]
    {
        keys.insert(format!("{role}:{tenant}"), server.create_key(Some(tenant), role).await.1);
    }
    let (revoked_id, revoked) = server.create_key(Some("acme"), "publisher").await;
    // The revoked key's catalog session was opened while it was live.
    let revoked_session = Designer::sign_in(&format!("{}/t/acme", server.base), &revoked).await;
    assert_eq!(server.call_as(Some(TOKEN), Method::DELETE, &format!("/admin/keys/{revoked_id}"), None).await.0, 200);
    // Each key's catalog session where it opens one: its tenant's root (an
    // operator's at every root that exists).
    let root_url = |root: &str| {
        if root == "default" { server.base.clone() } else { format!("{}/t/{root}", server.base) }
    };
    let key_of = |who: Who| match who {
        Who::Consumer(t) => keys[&format!("consumer:{t}")].clone(),
        Who::Publisher(t) => keys[&format!("publisher:{t}")].clone(),
        _ => TOKEN.to_string(),
    };
    let mut sessions: BTreeMap<(String, String), Designer> = BTreeMap::new();
    for (who, roots) in [
        (Who::Consumer("acme"), &["acme"][..]),
        (Who::Publisher("acme"), &["acme"][..]),
        (Who::Consumer("default"), &["default"][..]),
        (Who::Publisher("default"), &["default"][..]),
        (Who::Operator, &["default", "acme", "public"][..]),
    ] {
        for root in roots {
            let session = Designer::sign_in(&root_url(root), &key_of(who)).await;
            sessions.insert((format!("{who:?}"), root.to_string()), session);
        }
    }

    let callers = [
        Who::NoKey,
        Who::InvalidKey,
        Who::RevokedKey,
        Who::Consumer("acme"),
        Who::Publisher("acme"),
        Who::Consumer("default"),
        Who::Publisher("default"),
        Who::Operator,
    ];
    let mut checked = 0;
    let mut wrong = Vec::new();
    for ((method, path), (access, scope)) in decisions() {
        for (prefix, root) in [("", "default"), ("/t/acme", "acme"), ("/t/public", "public"), ("/t/ghost", "ghost")] {
            for who in callers {
                let key = match who {
                    Who::NoKey => None,
                    Who::InvalidKey => Some("plk_0123456789abcdef_not-a-real-key".to_string()),
                    Who::RevokedKey => Some(revoked.clone()),
                    Who::Consumer(t) => Some(keys[&format!("consumer:{t}")].clone()),
                    Who::Publisher(t) => Some(keys[&format!("publisher:{t}")].clone()),
                    Who::Operator => Some(TOKEN.to_string()),
                };
                let (filled, body) = concrete(method, path);
                let url = format!("{prefix}{filled}");
                // A catalog page gets the caller's session, opened at this
                // root or (when it opens none here) at its own tenant's.
                let session = match who {
                    Who::NoKey | Who::InvalidKey => None,
                    Who::RevokedKey => Some(&revoked_session),
                    Who::Operator => sessions
                        .get(&(format!("{who:?}"), root.to_string()))
                        .or_else(|| sessions.get(&(format!("{who:?}"), "default".to_string()))),
                    Who::Consumer(t) | Who::Publisher(t) => sessions.get(&(format!("{who:?}"), t.to_string())),
                };
                let mut request = if access.is_catalog() {
                    let cookie = match (who, session) {
                        (Who::InvalidKey, _) => "plinth_catalog_session=made-up".to_string(),
                        (_, Some(session)) => session.cookie.clone(),
                        (_, None) => String::new(),
                    };
                    let request = server.request_as(None, method.parse().unwrap(), &url).header("cookie", cookie);
                    // Its form, with the session's token.
                    match (method, session) {
                        ("POST", Some(session)) => request.form(&[("form_token", session.form_token.as_str())]),
                        _ => request,
                    }
                } else {
                    server.request_as(key.as_deref(), method.parse().unwrap(), &url)
                };
                if let Some(body) = body.filter(|_| !access.is_catalog()) {
                    let content_type = if path == "/admin/tools" { "application/wasm" } else { "application/json" };
                    request = request.header("content-type", content_type).body(body);
                }
                if path.starts_with("/mcp") {
                    request = request.header("accept", "application/json, text/event-stream");
                }
                let response = request.send().await.unwrap();
                let status = response.status().as_u16();
                // The access layer answers JSON; an HTML page (the CHEQ
                // confirmation pages' own "log in first") is the handler's.
                let page = response
                    .headers()
                    .get("content-type")
                    .is_some_and(|v| v.to_str().unwrap_or("").starts_with("text/html"));
                let body: Value = response.json().await.unwrap_or(Value::Null);
                // A2T errors nest `{"error": {"message"}}`; OTC's are flat.
                let message = body["error"]["message"].as_str().or(body["message"].as_str()).unwrap_or("");
                // A 404 from the access layer names the tenant or the
                // endpoint; a handler's 404 names what it looked for.
                let refused_404 =
                    status == 404 && (message.contains("this key may use") || message.starts_with("no such endpoint"));
                let got = match status {
                    // The catalog's refusals are pages (the sign-in form, a
                    // forged form's notice); their status is the decision.
                    401 if access.is_catalog() => Expect::Unauthorized,
                    403 if access.is_catalog() => Expect::Forbidden,
                    _ if page => Expect::Allowed,
                    401 => Expect::Unauthorized,
                    403 => Expect::Forbidden,
                    _ if refused_404 => Expect::NotFound,
                    _ => Expect::Allowed,
                };
                let want = expected(access, scope, !prefix.is_empty(), root, who);
                if got != want {
                    wrong.push(format!("{method} {url} as {who:?}: expected {want:?}, got {status} {body}"));
                }
                checked += 1;
                // Signing out ended that session: open another in its place.
                if path == "/catalog/sign-out" && got == Expect::Allowed {
                    let at = match who {
                        Who::Consumer(t) | Who::Publisher(t) => t,
                        _ if sessions.contains_key(&(format!("{who:?}"), root.to_string())) => root,
                        _ => "default",
                    };
                    let fresh = Designer::sign_in(&root_url(at), &key_of(who)).await;
                    sessions.insert((format!("{who:?}"), at.to_string()), fresh);
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{} of {checked} combinations wrong:\n{}", wrong.len(), wrong.join("\n"));
    assert_eq!(checked, decisions().len() * 4 * callers.len());
}

/// Two tenants with a publisher and a consumer key each.
struct TwoVendors {
    server: Server,
    acme_publisher: String,
    acme_consumer: String,
    globex_publisher: String,
    globex_consumer: String,
}

async fn two_vendors() -> TwoVendors {
    let server = Server::start_with(tempfile::tempdir().unwrap(), &[], Some(TOKEN)).0;
    server.create_tenant("acme", json!({})).await;
    server.create_tenant("globex", json!({})).await;
    TwoVendors {
        acme_publisher: server.create_key(Some("acme"), "publisher").await.1,
        acme_consumer: server.create_key(Some("acme"), "consumer").await.1,
        globex_publisher: server.create_key(Some("globex"), "publisher").await.1,
        globex_consumer: server.create_key(Some("globex"), "consumer").await.1,
        server,
    }
}

fn echo() -> Vec<u8> {
    std::fs::read(plugins_dir().join("echo.wasm")).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn competing_vendors_each_see_and_call_only_their_own_tools() {
    let v = two_vendors().await;
    let s = &v.server;
    let (status, acme_echo) = s.deploy_as(&v.acme_publisher, "acme", echo()).await;
    assert_eq!(status, 201, "{acme_echo}");
    let (status, globex_echo) = s.deploy_as(&v.globex_publisher, "globex", fixture("echo_v2.wasm")).await;
    assert_eq!(status, 201, "the same name in another tenant is another tool: {globex_echo}");
    let (acme_id, globex_id) = (acme_echo["toolId"].as_str().unwrap(), globex_echo["toolId"].as_str().unwrap());
    assert_ne!(acme_id, globex_id, "toolIds are unique on the server");
    assert_eq!(globex_echo["version"], 1, "version numbers are per tool");

    // Each sees only its own.
    let (status, list) = s.call_as(Some(&v.acme_consumer), Method::GET, "/t/acme/tools", None).await;
    assert_eq!(status, 200);
    let ids: Vec<&str> = list["items"].as_array().unwrap().iter().map(|t| t["toolId"].as_str().unwrap()).collect();
    assert_eq!(ids, [acme_id]);
    let (_, list) = s.call_as(Some(&v.globex_consumer), Method::GET, "/t/globex/tools", None).await;
    assert_eq!(list["items"][0]["toolId"], globex_id);
    assert_eq!(list["items"].as_array().unwrap().len(), 1);

    // Another tenant's toolId is 404 through one's own root, exactly like a
    // toolId that does not exist; another tenant's root is 404 too.
    let call = invocation("echo", &[("text", json!("hi"))]);
    for path in [
        format!("/t/acme/tools/{globex_id}"),
        format!("/t/acme/tools/{globex_id}/versions"),
        format!("/t/acme/tools/{globex_id}/versions/1"),
        format!("/t/globex/tools/{globex_id}"),
        "/t/globex/tools".to_string(),
        format!("/tools/{acme_id}"),
    ] {
        let (status, body) = s.call_as(Some(&v.acme_consumer), Method::GET, &path, None).await;
        assert_eq!(status, 404, "{path}: {body}");
    }
    let (status, unknown) = s
        .call_as(Some(&v.acme_consumer), Method::GET, "/t/acme/tools/00000000-0000-4000-8000-000000000000", None)
        .await;
    assert_eq!(status, 404);
    let (_, cross) = s.call_as(Some(&v.acme_consumer), Method::GET, &format!("/t/acme/tools/{globex_id}"), None).await;
    assert_eq!(
        cross["error"]["message"].as_str().unwrap().replace(globex_id, "ID"),
        unknown["error"]["message"].as_str().unwrap().replace("00000000-0000-4000-8000-000000000000", "ID"),
        "no difference between another tenant's tool and none"
    );
    let (status, _) = s
        .call_as(Some(&v.acme_consumer), Method::POST, &format!("/t/acme/tools/{globex_id}:invoke"), Some(&call))
        .await;
    assert_eq!(status, 404);
    let (status, body) =
        s.call_as(Some(&v.acme_consumer), Method::POST, &format!("/t/acme/tools/{acme_id}:invoke"), Some(&call)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(outputs(&body)["text"], "hi");

    // Consumers cannot deploy; publishers cannot deploy into another tenant.
    let (status, body) = s.deploy_as(&v.acme_consumer, "acme", echo()).await;
    assert_eq!((status, body["error"]["code"].as_str()), (403, Some("forbidden")));
    let (status, _) = s.deploy_as(&v.acme_publisher, "globex", echo()).await;
    assert_eq!(status, 404);
    let (status, _) = s
        .call_as(Some(&v.acme_publisher), Method::DELETE, &format!("/t/acme/admin/tools/{globex_id}/versions/1"), None)
        .await;
    assert_eq!(status, 404, "retiring another tenant's tool through one's own root");
    let (_, still) =
        s.call_as(Some(&v.globex_consumer), Method::GET, &format!("/t/globex/tools/{globex_id}"), None).await;
    assert!(still.get("retired").is_none(), "{still}");

    // Nor reach server-wide endpoints.
    for (method, path) in [(Method::GET, "/admin/tenants"), (Method::GET, "/admin/keys"), (Method::POST, "/admin/keys")]
    {
        let body = json!({ "tenant": "acme", "role": "publisher" });
        let (status, _) = s.call_as(Some(&v.acme_publisher), method.clone(), path, Some(&body)).await;
        assert_eq!(status, 403, "{method} {path}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn secrets_and_config_belong_to_one_tenant() {
    let v = two_vendors().await;
    let s = &v.server;
    for (key, tenant) in [(&v.acme_publisher, "acme"), (&v.globex_publisher, "globex")] {
        let (status, body) = s.deploy_as(key, tenant, fixture("use_secret.wasm")).await;
        assert_eq!(status, 201, "{body}");
    }
    const ACME_KEY: &str = "acme-secret-2b9d41";
    let put = s
        .request_as(Some(&v.acme_publisher), Method::PUT, "/t/acme/admin/secrets/api-key")
        .body(ACME_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 204);
    let config = s
        .request_as(Some(&v.acme_publisher), Method::PUT, "/t/acme/admin/config/use_secret/region")
        .body("eu-west")
        .send()
        .await
        .unwrap();
    assert_eq!(config.status(), 204);

    let report = |key: String, tenant: &'static str| async move {
        let (_, list) = s.call_as(Some(&key), Method::GET, &format!("/t/{tenant}/tools"), None).await;
        let id = list["items"][0]["toolId"].as_str().unwrap().to_string();
        let call = invocation("use_secret", &[("log_lines", json!(0)), ("fail", json!(false))]);
        let (status, body) =
            s.call_as(Some(&key), Method::POST, &format!("/t/{tenant}/tools/{id}:invoke"), Some(&call)).await;
        assert_eq!(status, 200, "{body}");
        outputs(&body)["report"].as_str().unwrap().to_string()
    };
    assert_eq!(report(v.acme_consumer.clone(), "acme").await, "api-key=[redacted]; undeclared-key=none");
    assert_eq!(
        report(v.globex_consumer.clone(), "globex").await,
        "api-key=none; undeclared-key=none",
        "a secret of the same id in another tenant is not this tenant's"
    );

    // Listings show one's own only.
    let (_, acme_secrets) = s.call_as(Some(&v.acme_publisher), Method::GET, "/t/acme/admin/secrets", None).await;
    assert_eq!(acme_secrets, json!({ "items": [{ "id": "api-key" }] }));
    let (_, globex_secrets) = s.call_as(Some(&v.globex_publisher), Method::GET, "/t/globex/admin/secrets", None).await;
    assert_eq!(globex_secrets, json!({ "items": [] }));
    let (_, acme_config) = s.call_as(Some(&v.acme_publisher), Method::GET, "/t/acme/admin/config", None).await;
    assert_eq!(acme_config, json!({ "tools": { "use_secret": { "region": "eu-west" } } }));
    let (_, globex_config) = s.call_as(Some(&v.globex_publisher), Method::GET, "/t/globex/admin/config", None).await;
    assert_eq!(globex_config, json!({ "tools": {} }));
    // Deleting another tenant's secret through one's own root finds nothing.
    let (status, _) =
        s.call_as(Some(&v.globex_publisher), Method::DELETE, "/t/globex/admin/secrets/api-key", None).await;
    assert_eq!(status, 404);
    assert!(!v.server.logs().contains(ACME_KEY), "a secret value reached the log");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_revoked_key_stops_working_at_once() {
    let server = Server::start(&[]);
    let (id, key) = server.create_key(Some("default"), "consumer").await;
    let echo_id = server.tool_id("echo").await;
    let call = invocation("echo", &[("text", json!("hi"))]);
    let path = format!("/tools/{echo_id}:invoke");
    assert_eq!(server.call_as(Some(&key), Method::POST, &path, Some(&call)).await.0, 200);

    let (status, revoked) = server.call_as(Some(TOKEN), Method::DELETE, &format!("/admin/keys/{id}"), None).await;
    assert_eq!(status, 200);
    assert!(revoked["revokedAt"].is_i64(), "{revoked}");
    let response = server.request_as(Some(&key), Method::POST, &path).json(&call).send().await.unwrap();
    assert_eq!(response.status(), 401, "the very next request is refused");
    assert_eq!(response.headers()["www-authenticate"], "Bearer error=\"invalid_token\"");
    assert_eq!(server.call_as(Some(&key), Method::GET, "/tools", None).await.0, 401);

    // Still revoked after a restart; the key list never shows a key.
    let server = Server::start_in(server.stop(), &[]);
    assert_eq!(server.call_as(Some(&key), Method::GET, "/tools", None).await.0, 401);
    let (_, keys) = server.call_as(Some(TOKEN), Method::GET, "/admin/keys", None).await;
    let listed = keys["items"].as_array().unwrap().iter().find(|k| k["id"] == id.as_str()).unwrap();
    assert!(listed["revokedAt"].is_i64());
    assert!(listed.get("key").is_none() && !keys.to_string().contains(&key), "{keys}");
    assert_eq!(server.call_as(Some(TOKEN), Method::DELETE, "/admin/keys/nosuchkey", None).await.0, 404);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_first_start_creates_an_operator_key_once() {
    let data = tempfile::tempdir().unwrap();
    let (server, printed) = Server::start_with(data, &[], None);
    let file = server.data.path().join("operator.key");
    let key = std::fs::read_to_string(&file).unwrap().trim().to_string();
    assert!(key.starts_with("plk_"), "{key}");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
    assert!(printed.iter().any(|l| l.contains(&key)), "printed once: {printed:?}");
    assert!(!server.logs().contains(&key), "the key is printed, never logged");
    let (status, _) = server.call_as(Some(&key), Method::GET, "/admin/tenants", None).await;
    assert_eq!(status, 200);
    assert_eq!(server.call_as(Some(TOKEN), Method::GET, "/admin/tenants", None).await.0, 401, "no env key here");

    // A restart keeps the key and prints nothing new.
    let (server, printed) = Server::start_with(server.stop(), &[], None);
    assert!(printed.is_empty(), "{printed:?}");
    assert_eq!(std::fs::read_to_string(server.data.path().join("operator.key")).unwrap().trim(), key);
    assert_eq!(server.call_as(Some(&key), Method::GET, "/admin/tenants", None).await.0, 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn public_enumeration_opens_browsing_but_never_invocation() {
    let server = Server::start(&[]);
    assert_eq!(server.call_as(None, Method::GET, "/tools", None).await.0, 401);
    let public = json!({ "publicEnumeration": true });
    assert_eq!(server.call_as(Some(TOKEN), Method::PATCH, "/admin/tenants/default", Some(&public)).await.0, 200);
    let (status, list) = server.call_as(None, Method::GET, "/tools", None).await;
    assert_eq!(status, 200);
    let id = list["items"].as_array().unwrap().iter().find(|t| t["name"] == "echo").unwrap()["toolId"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(server.call_as(None, Method::GET, &format!("/tools/{id}/versions/1"), None).await.0, 200);
    let call = invocation("echo", &[("text", json!("hi"))]);
    assert_eq!(server.call_as(None, Method::POST, &format!("/tools/{id}:invoke"), Some(&call)).await.0, 401);
    assert_eq!(server.call_as(None, Method::GET, "/admin/secrets", None).await.0, 401);
    // A bad key is refused even where none is needed.
    assert_eq!(server.call_as(Some("plk_0123456789abcdef_wrong"), Method::GET, "/tools", None).await.0, 401);
}

#[tokio::test(flavor = "multi_thread")]
async fn quotas_refuse_the_tenant_over_them_and_no_one_else() {
    let v = two_vendors().await;
    let s = &v.server;
    let quotas = json!({ "quotas": {
        "maxTools": 1, "invocationsPerSecond": 1, "invocationBurst": 2, "maxConcurrentInvocations": 2,
        "maxComponentBytes": 4_000_000
    }});
    let (status, tenant) = s.call_as(Some(TOKEN), Method::PATCH, "/admin/tenants/acme", Some(&quotas)).await;
    assert_eq!(status, 200, "{tenant}");
    assert_eq!(tenant["quotas"]["maxTools"], 1);
    let (status, body) =
        s.call_as(Some(TOKEN), Method::PATCH, "/admin/tenants/acme", Some(&json!({"quotas": {"maxTools": 0}}))).await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("invalid_request")), "{body}");

    // Tools and component size.
    let (status, deployed) = s.deploy_as(&v.acme_publisher, "acme", echo()).await;
    assert_eq!(status, 201, "{deployed}");
    let (status, body) = s.deploy_as(&v.acme_publisher, "acme", fixture("slow_sleep.wasm")).await;
    assert_eq!((status, body["error"]["code"].as_str()), (409, Some("quota_exceeded")), "{body}");
    // Retiring frees no room: the retired tool is still stored (else
    // deploy, retire, deploy another would store tools without end)...
    let retire = format!("/t/acme/admin/tools/{}/versions/1", deployed["toolId"].as_str().unwrap());
    assert_eq!(s.call_as(Some(&v.acme_publisher), Method::DELETE, &retire, None).await.0, 200);
    let (status, body) = s.deploy_as(&v.acme_publisher, "acme", fixture("slow_sleep.wasm")).await;
    assert_eq!((status, body["error"]["code"].as_str()), (409, Some("quota_exceeded")), "{body}");
    // ...and a new version of the retired tool needs none.
    let (status, body) = s.deploy_as(&v.acme_publisher, "acme", fixture("echo_v2.wasm")).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(s.deploy_as(&v.globex_publisher, "globex", fixture("slow_sleep.wasm")).await.0, 201);
    assert_eq!(s.deploy_as(&v.globex_publisher, "globex", echo()).await.0, 201, "globex has the default quotas");
    let mut big = echo();
    big.resize(4_000_001, 0);
    let (status, body) = s.deploy_as(&v.acme_publisher, "acme", big).await;
    assert_eq!((status, body["error"]["code"].as_str()), (413, Some("quota_exceeded")), "{body}");

    // Invocation rate: a burst of 2, then 503 with Retry-After (temporary:
    // an A2T executor retries a 5xx).
    let (_, list) = s.call_as(Some(&v.acme_consumer), Method::GET, "/t/acme/tools", None).await;
    let acme_echo = format!("/t/acme/tools/{}:invoke", list["items"][0]["toolId"].as_str().unwrap());
    let call = invocation("echo", &[("text", json!("hi"))]);
    let mut statuses = Vec::new();
    let mut retry_after = None;
    for _ in 0..4 {
        let response = s.request_as(Some(&v.acme_consumer), Method::POST, &acme_echo).json(&call).send().await.unwrap();
        statuses.push(response.status().as_u16());
        if response.status() == 503 {
            retry_after = response.headers().get("retry-after").map(|h| h.to_str().unwrap().to_string());
            let body: Value = response.json().await.unwrap();
            assert_eq!(body["error"]["code"], "rate_limited");
        }
    }
    assert_eq!(&statuses[..2], [200, 200], "{statuses:?}");
    assert!(statuses[2..].contains(&503), "{statuses:?}");
    assert_eq!(retry_after.as_deref(), Some("1"));
    let (_, list) = s.call_as(Some(&v.globex_consumer), Method::GET, "/t/globex/tools", None).await;
    let globex_echo = list["items"].as_array().unwrap().iter().find(|t| t["name"] == "echo").unwrap()["toolId"].clone();
    for _ in 0..10 {
        let path = format!("/t/globex/tools/{}:invoke", globex_echo.as_str().unwrap());
        assert_eq!(s.call_as(Some(&v.globex_consumer), Method::POST, &path, Some(&call)).await.0, 200);
    }

    // Concurrency: globex limited to 2 slow calls at once; the third is 503
    // while acme is unaffected by globex's load.
    let two = json!({ "quotas": { "maxConcurrentInvocations": 2 } });
    assert_eq!(s.call_as(Some(TOKEN), Method::PATCH, "/admin/tenants/globex", Some(&two)).await.0, 200);
    let slow = list["items"].as_array().unwrap().iter().find(|t| t["name"] == "slow_sleep").unwrap()["toolId"]
        .as_str()
        .unwrap()
        .to_string();
    let slow_path = format!("/t/globex/tools/{slow}:invoke");
    let sleep = invocation("slow_sleep", &[("millis", json!(1000))]);
    let running: Vec<_> = (0..2)
        .map(|_| tokio::spawn(s.request_as(Some(&v.globex_consumer), Method::POST, &slow_path).json(&sleep).send()))
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let third = s.request_as(Some(&v.globex_consumer), Method::POST, &slow_path).json(&sleep).send().await.unwrap();
    assert_eq!(third.status(), 503);
    assert_eq!(third.headers()["retry-after"], "1");
    let body: Value = third.json().await.unwrap();
    assert!(body["error"]["message"].as_str().unwrap().contains("tenant `globex`"), "{body}");
    tokio::time::sleep(Duration::from_millis(1100)).await; // acme's bucket refills
    assert_eq!(s.call_as(Some(&v.acme_consumer), Method::POST, &acme_echo, Some(&call)).await.0, 200);
    for response in running {
        assert_eq!(response.await.unwrap().unwrap().status(), 200);
    }
}

/// The median time of 30 calls, each of which must succeed.
async fn median_latency(server: &Server, key: &str, path: &str, call: &Value) -> Duration {
    let mut times = Vec::new();
    for _ in 0..30 {
        let started = Instant::now();
        let (status, body) = server.call_as(Some(key), Method::POST, path, Some(call)).await;
        assert_eq!(status, 200, "the quiet tenant's call failed: {body}");
        times.push(started.elapsed());
    }
    times.sort();
    times[times.len() / 2]
}

/// The stated bound: while a noisy tenant floods slow tools, a quiet
/// tenant's calls all succeed and their median latency stays within five
/// times its idle median plus 50 ms. The server has 12 instance slots and
/// lets one tool run 16 calls at once, so without the noisy tenant's
/// concurrency quota (8) the flood takes every slot and the quiet tenant's
/// calls fail with 503 (checked by hand when this test was written).
#[tokio::test(flavor = "multi_thread")]
async fn a_noisy_tenant_does_not_slow_a_quiet_one() {
    let server = std::sync::Arc::new(Server::start(&["--max-instances", "12"]));
    server
        .create_tenant(
            "noisy",
            json!({ "maxConcurrentInvocations": 8, "invocationsPerSecond": 100000, "invocationBurst": 100000 }),
        )
        .await;
    server.create_tenant("quiet", json!({})).await;
    let noisy_key = server.create_key(Some("noisy"), "consumer").await.1;
    let quiet_key = server.create_key(Some("quiet"), "consumer").await.1;
    let (status, slow) = server.deploy_as(TOKEN, "noisy", fixture("slow_sleep.wasm")).await;
    assert_eq!(status, 201, "{slow}");
    let (status, echo_tool) = server.deploy_as(TOKEN, "quiet", echo()).await;
    assert_eq!(status, 201, "{echo_tool}");
    let quiet_path = format!("/t/quiet/tools/{}:invoke", echo_tool["toolId"].as_str().unwrap());
    let call = invocation("echo", &[("text", json!("hi"))]);

    let idle = median_latency(&server, &quiet_key, &quiet_path, &call).await;

    // 40 callers flood the noisy tenant's one-second tool.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let slow_path = format!("/t/noisy/tools/{}:invoke", slow["toolId"].as_str().unwrap());
    let flood: Vec<_> = (0..40)
        .map(|_| {
            let (server, done, key, path) = (server.clone(), done.clone(), noisy_key.clone(), slow_path.clone());
            tokio::spawn(async move {
                let mut statuses = BTreeMap::new();
                while !done.load(std::sync::atomic::Ordering::SeqCst) {
                    let sleep = invocation("slow_sleep", &[("millis", json!(1000))]);
                    let (status, _) = server.call_as(Some(&key), Method::POST, &path, Some(&sleep)).await;
                    *statuses.entry(status).or_insert(0) += 1;
                    if status != 200 {
                        // A client that is refused retries soon (but not in a
                        // spin, which would measure the HTTP stack instead).
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
                statuses
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let loaded = median_latency(&server, &quiet_key, &quiet_path, &call).await;
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut noisy: BTreeMap<u16, u32> = BTreeMap::new();
    for caller in flood {
        for (status, n) in caller.await.unwrap() {
            *noisy.entry(status).or_insert(0) += n;
        }
    }
    assert!(noisy.get(&503).copied().unwrap_or(0) > 0, "the noisy tenant hit its own limit: {noisy:?}");
    assert!(noisy.get(&200).copied().unwrap_or(0) > 0, "{noisy:?}");
    let bound = idle * 5 + Duration::from_millis(50);
    assert!(loaded <= bound, "quiet median {loaded:?} under the flood, idle {idle:?}, bound {bound:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_audit_log_records_who_did_what_and_each_publisher_sees_its_own() {
    let v = two_vendors().await;
    let s = &v.server;
    let (_, acme_echo) = s.deploy_as(&v.acme_publisher, "acme", echo()).await;
    s.deploy_as(&v.globex_publisher, "globex", echo()).await;
    let id = acme_echo["toolId"].as_str().unwrap();
    s.request_as(Some(&v.acme_publisher), Method::PUT, "/t/acme/admin/secrets/api-key")
        .body("hunter2-secret-value")
        .send()
        .await
        .unwrap();
    let (status, _) =
        s.call_as(Some(&v.acme_publisher), Method::DELETE, &format!("/t/acme/admin/tools/{id}/versions/1"), None).await;
    assert_eq!(status, 200);

    let (status, log) = s.call_as(Some(&v.acme_publisher), Method::GET, "/admin/audit", None).await;
    assert_eq!(status, 200, "{log}");
    let entries = log["items"].as_array().unwrap();
    assert!(entries.iter().all(|e| e["tenant"] == "acme"), "a publisher sees its tenant's entries only: {log}");
    let actions: Vec<&str> = entries.iter().map(|e| e["action"].as_str().unwrap()).collect();
    assert_eq!(
        actions,
        ["tool.retire", "secret.put", "tool.deploy", "key.create", "key.create", "tenant.create"],
        "newest first"
    );
    let publisher_id = v.acme_publisher.split('_').nth(1).unwrap();
    assert_eq!(entries[0]["actor"], publisher_id, "who: the key id");
    assert_eq!(entries[2]["sha256"], acme_echo["sha256"], "the content hash");
    assert_eq!(entries[1]["target"], "api-key");
    let text = log.to_string();
    assert!(!text.contains("hunter2") && !text.contains(&v.acme_publisher), "no secret value or key in the log");
    let (status, _) = s.call_as(Some(&v.acme_publisher), Method::GET, "/admin/audit?tenant=globex", None).await;
    assert_eq!(status, 404);
    assert_eq!(s.call_as(Some(&v.acme_consumer), Method::GET, "/admin/audit", None).await.0, 403);

    // The operator sees everything, pages through it, filters by tenant.
    let mut seen = Vec::new();
    let mut cursor = String::new();
    loop {
        let (status, page) =
            s.call_as(Some(TOKEN), Method::GET, &format!("/admin/audit?pageLimit=3{cursor}"), None).await;
        assert_eq!(status, 200);
        seen.extend(page["items"].as_array().unwrap().iter().map(|e| e["seq"].as_i64().unwrap()));
        match page["paging"]["next"].as_str() {
            Some(next) => cursor = format!("&pageCursor={next}"),
            None => break,
        }
    }
    assert!(seen.windows(2).all(|w| w[0] > w[1]), "newest first, no repeats: {seen:?}");
    assert_eq!(seen.len(), 10, "2 tenants, 4 keys, 2 deploys, 1 secret, 1 retirement: {seen:?}");
    let (_, globex) = s.call_as(Some(TOKEN), Method::GET, "/admin/audit?tenant=globex", None).await;
    assert!(globex["items"].as_array().unwrap().iter().all(|e| e["tenant"] == "globex"));
}

#[test]
fn the_tenant_and_key_commands_drive_a_server() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = Server::start(&[]);
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(plinth_bin())
            .args(args)
            .args(["--server", &server.base])
            .env("PLINTH_KEY", TOKEN)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, err) = cli(&["tenant", "create", "acme", "--quota", "maxTools=5"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("acme") && out.contains("\"maxTools\":5"), "{out}");
    let (code, out, _) = cli(&["tenant", "list"]);
    assert_eq!(code, 0);
    assert!(out.lines().any(|l| l.starts_with("acme")) && out.lines().any(|l| l.starts_with("default")), "{out}");
    let (code, key, err) = cli(&["key", "create", "--tenant", "acme", "--role", "publisher", "--label", "ci"]);
    assert_eq!(code, 0, "{err}");
    let key = key.trim().to_string();
    assert!(key.starts_with("plk_") && err.contains("cannot be shown again"), "{key} {err}");

    // The new key deploys into its tenant with the same CLI.
    let echo = plugins_dir().join("echo.wasm");
    let out = std::process::Command::new(plinth_bin())
        .args(["deploy", echo.to_str().unwrap(), "--tenant", "acme", "--server", &server.base, "--key", &key])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let id = key.split('_').nth(1).unwrap();
    let (code, out, _) = cli(&["key", "list", "--tenant", "acme"]);
    assert_eq!(code, 0);
    assert!(out.lines().any(|l| l.starts_with(id) && l.contains("live") && l.contains("ci")), "{out}");
    let (code, _, err) = cli(&["key", "revoke", id]);
    assert_eq!(code, 0, "{err}");
    let (status, _) = rt.block_on(server.call_as(Some(&key), Method::GET, "/t/acme/tools", None));
    assert_eq!(status, 401);
    let (code, out, _) = cli(&["audit", "--tenant", "acme"]);
    assert_eq!(code, 0);
    assert!(out.contains("key.revoke") && out.contains("tool.deploy"), "{out}");
    let (code, _, err) = cli(&["key", "create", "--role", "consumer"]);
    assert_eq!(code, 2);
    assert!(err.contains("needs a `tenant`"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tenants_deadline_ceiling_bounds_its_tools_only() {
    let server = Server::start(&[]);
    server.create_tenant("tight", json!({ "maxDeadlineMs": 300 })).await;
    let (status, tight) = server.deploy_as(TOKEN, "tight", fixture("slow_sleep.wasm")).await;
    assert_eq!(status, 201, "{tight}");
    let (status, roomy) = server.deploy_as(TOKEN, "default", fixture("slow_sleep.wasm")).await;
    assert_eq!(status, 201, "{roomy}");
    let sleep = invocation("slow_sleep", &[("millis", json!(800))]);
    let path = |tenant: &str, tool: &Value| format!("/t/{tenant}/tools/{}:invoke", tool["toolId"].as_str().unwrap());

    // The tool asks for 1.5 s; its tenant allows 300 ms.
    let (status, body) = server.call_as(Some(TOKEN), Method::POST, &path("tight", &tight), Some(&sleep)).await;
    assert_eq!((status, body["error"]["code"].as_str()), (504, Some("tool_timeout")), "{body}");
    let (status, body) = server.call_as(Some(TOKEN), Method::POST, &path("default", &roomy), Some(&sleep)).await;
    assert_eq!(status, 200, "the same tool in a tenant with the default ceiling: {body}");
}
