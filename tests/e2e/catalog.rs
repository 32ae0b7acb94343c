//! The designer's catalog over plain HTTP: signing in with a key of the
//! tenant, sessions (stored by hash, ended by sign-out, by the key's
//! revocation, scoped to one tenant's root), CSRF, the sign-in throttle,
//! escaping of vendor text, the try form's errors at their fields, and
//! calls that go through the same core path as A2T's (quotas apply).
//! `catalog_browser.rs` drives the same pages in Chromium.

use crate::support::{Server, TOKEN, fixture, hidden, plugins_dir};
use reqwest::Method;
use serde_json::json;

/// A designer's browser, reduced to what the tests need: its session
/// cookie and the session's form token, for one platform root.
pub struct Designer {
    client: reqwest::Client,
    /// `http://127.0.0.1:PORT` or `…/t/{tenant}`.
    pub root: String,
    /// `plinth_catalog_session=…`.
    pub cookie: String,
    /// The session's form token, read from a page.
    pub form_token: String,
}

/// A client that shows redirects instead of following them.
fn client() -> reqwest::Client {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap()
}

/// What a browser holds of the sign-in page at `root`: its token's cookie
/// (`plinth_catalog_sign_in=…`) and the same token, from its form.
pub async fn sign_in_form(root: &str) -> (String, String) {
    let response = client().get(format!("{root}/catalog/sign-in")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let cookie = response.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string();
    let html = response.text().await.unwrap();
    let token = hidden(&html, "sign_in_token");
    assert_eq!(cookie, format!("plinth_catalog_sign_in={token}"));
    (cookie, token)
}

/// A sign-in at `root` from its page (with the page's token and cookie):
/// `fields` and `headers` besides.
pub async fn post_sign_in(root: &str, fields: &[(&str, &str)], headers: &[(&str, &str)]) -> reqwest::Response {
    let (cookie, token) = sign_in_form(root).await;
    let mut form = vec![("sign_in_token", token.as_str())];
    form.extend_from_slice(fields);
    let mut request = client().post(format!("{root}/catalog/sign-in")).header("cookie", cookie).form(&form);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap()
}

impl Designer {
    /// Signs in at `root` with `key`; panics unless the catalog opens.
    pub async fn sign_in(root: &str, key: &str) -> Designer {
        let client = client();
        let response = post_sign_in(root, &[("key", key)], &[]).await;
        assert_eq!(response.status(), 303, "{}", response.text().await.unwrap());
        let cookie = response.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string();
        let mut designer = Designer { client, root: root.to_string(), cookie, form_token: String::new() };
        let (status, html) = designer.get("/catalog").await;
        assert_eq!(status, 200, "{html}");
        designer.form_token = hidden(&html, "form_token");
        designer
    }

    /// `GET {root}{path}` with the session → (status, HTML).
    pub async fn get(&self, path: &str) -> (u16, String) {
        let response =
            self.client.get(format!("{}{path}", self.root)).header("cookie", &self.cookie).send().await.unwrap();
        (response.status().as_u16(), response.text().await.unwrap())
    }

    /// `POST {root}{path}` of a form with the session and its token →
    /// (status, HTML).
    pub async fn post(&self, path: &str, form: &[(&str, &str)]) -> (u16, String) {
        let mut fields = vec![("form_token", self.form_token.as_str())];
        fields.extend_from_slice(form);
        self.post_raw(path, &fields, &[]).await
    }

    /// A form post with exactly these fields and extra headers.
    pub async fn post_raw(&self, path: &str, form: &[(&str, &str)], headers: &[(&str, &str)]) -> (u16, String) {
        let response = self.send(path, form, headers).await;
        (response.status().as_u16(), response.text().await.unwrap())
    }

    /// A form post with exactly these fields and extra headers → the response.
    pub async fn send(&self, path: &str, form: &[(&str, &str)], headers: &[(&str, &str)]) -> reqwest::Response {
        let mut request = self.client.post(format!("{}{path}", self.root)).header("cookie", &self.cookie).form(form);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.send().await.unwrap()
    }

    /// The call id of a new try form of the tool at `tool` (its path).
    pub async fn call_id(&self, tool: &str) -> String {
        let (status, html) = self.get(&format!("{tool}/try")).await;
        assert_eq!(status, 200, "{html}");
        hidden(&html, "call_id")
    }

    /// Sends a new try form of the tool at `tool` with `fields` →
    /// (status, HTML).
    pub async fn try_call(&self, tool: &str, fields: &[(&str, &str)]) -> (u16, String) {
        let call_id = self.call_id(tool).await;
        let mut form = vec![("call_id", call_id.as_str())];
        form.extend_from_slice(fields);
        self.post(&format!("{tool}/try"), &form).await
    }
}

/// A server with the example tools, the second version of echo, the tool
/// whose descriptions are markup, and `transfer_funds` (private inputs);
/// `extra` are more flags.
pub fn catalog_server(extra: &[&str]) -> (Server, tempfile::TempDir) {
    let plugins = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(plugins_dir()).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, plugins.path().join(path.file_name().unwrap())).unwrap();
    }
    // `--plugins` deploys in file name order: echo.wasm, then echo_v2.wasm.
    for name in ["echo_v2.wasm", "markup_docs.wasm", "transfer_funds.wasm"] {
        std::fs::write(plugins.path().join(name), fixture(name)).unwrap();
    }
    let mut args = vec!["--plugins", plugins.path().to_str().unwrap()];
    args.extend_from_slice(extra);
    (Server::start_in(tempfile::tempdir().unwrap(), &args), plugins)
}

/// The catalog's link to the tool called `name` (from a search).
pub async fn tool_path(designer: &Designer, name: &str) -> String {
    let (status, html) = designer.get(&format!("/catalog?q={name}")).await;
    assert_eq!(status, 200, "{html}");
    let marker = format!("data-tool=\"{name}\"");
    let card = html.split(&marker).nth(1).unwrap_or_else(|| panic!("no {name} in the catalog:\n{html}"));
    let href = card.split("href=\"").nth(1).unwrap().split('"').next().unwrap();
    // Links are relative to the server; the designer's root may be a tenant's.
    let prefix = designer.root.split_once("://").map_or("", |(_, rest)| rest.find('/').map_or("", |at| &rest[at..]));
    href.strip_prefix(prefix).unwrap_or(href).to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_designer_signs_in_with_a_key_of_the_tenant_and_only_for_that_tenant() {
    let server = Server::start(&[]);
    server.create_tenant("acme", json!({})).await;
    let (_, consumer) = server.create_key(Some("default"), "consumer").await;
    let (_, acme) = server.create_key(Some("acme"), "consumer").await;

    // No session: the sign-in page, as a 401, that returns here.
    let response = client().get(format!("{}/catalog/tools/x?q=1", server.base)).send().await.unwrap();
    assert_eq!(response.status(), 401);
    assert_eq!(response.headers()["plinth-error-code"], "unauthorized");
    let html = response.text().await.unwrap();
    assert!(html.contains("id=\"key\"") && html.contains("name=\"next\" value=\"/catalog/tools/x?q=1\""), "{html}");
    // A bearer key is not a session: the pages read the cookie only.
    let response = client().get(format!("{}/catalog", server.base)).bearer_auth(&consumer).send().await.unwrap();
    assert_eq!(response.status(), 401);

    // Another tenant's key, an unknown one, a made-up one: the same refusal.
    for key in [acme.as_str(), "plk_0123456789abcdef_not-a-real-key", "", "test"] {
        let response = post_sign_in(&server.base, &[("key", key)], &[]).await;
        assert_eq!(response.status(), 401, "{key}");
        let cookies: Vec<_> = response.headers().get_all("set-cookie").iter().map(|c| c.to_str().unwrap()).collect();
        assert!(cookies.iter().all(|c| c.starts_with("plinth_catalog_sign_in=")), "no session: {cookies:?}");
        assert!(response.text().await.unwrap().contains("does not open this tenant"), "{key}");
    }

    // The tenant's consumer key: a session cookie scoped to this catalog,
    // and back to where the designer was going (never off the catalog, and
    // never a key in a URL).
    for (next, lands) in [
        ("/catalog/tools/x?q=1", "/catalog/tools/x?q=1"),
        ("//evil.example/catalog", "/catalog"),
        ("https://evil.example/catalog", "/catalog"),
        ("/catalog/../admin/keys", "/catalog"),
        ("/t/acme/catalog", "/catalog"),
    ] {
        let response = post_sign_in(&server.base, &[("key", consumer.as_str()), ("next", next)], &[]).await;
        assert_eq!(response.status(), 303);
        assert_eq!(response.headers()["location"], lands, "{next}");
        let cookie = response.headers()["set-cookie"].to_str().unwrap().to_string();
        for attribute in ["HttpOnly", "SameSite=Strict", "Path=/catalog", "Max-Age=28800"] {
            assert!(cookie.contains(attribute), "{cookie}");
        }
        assert!(!cookie.contains(&consumer));
    }

    // A session opens its own tenant's catalog only.
    let default = Designer::sign_in(&server.base, &consumer).await;
    let acme_root = format!("{}/t/acme", server.base);
    let at_acme = Designer::sign_in(&acme_root, &acme).await;
    let response = post_sign_in(&acme_root, &[("key", &acme)], &[]).await;
    assert!(response.headers()["set-cookie"].to_str().unwrap().contains("Path=/t/acme/catalog"));
    let (status, html) = at_acme.get("/catalog").await;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("Tools of acme") && html.contains("This tenant has no tools yet"), "{html}");
    let swapped = Designer { root: server.base.clone(), ..at_acme };
    assert_eq!(swapped.get("/catalog").await.0, 401, "acme's session is not default's");
    let swapped = Designer { root: acme_root.clone(), ..default };
    assert_eq!(swapped.get("/catalog").await.0, 401, "default's session is not acme's");
    // The operator key opens any tenant's catalog, one root at a time.
    Designer::sign_in(&acme_root, TOKEN).await;
    // A tenant that does not exist looks like a wrong key.
    let response = post_sign_in(&format!("{}/t/ghost", server.base), &[("key", TOKEN)], &[]).await;
    assert_eq!(response.status(), 401);
}

#[tokio::test(flavor = "multi_thread")]
async fn revoking_the_key_ends_its_sessions_at_once_and_signing_out_ends_one() {
    let server = Server::start(&[]);
    let (id, key) = server.create_key(Some("default"), "consumer").await;
    let first = Designer::sign_in(&server.base, &key).await;
    let second = Designer::sign_in(&server.base, &key).await;

    // Signing out needs the form token; with it the session ends, and the
    // browser is told to forget the cookie.
    let (status, html) = first.post_raw("/catalog/sign-out", &[], &[]).await;
    assert_eq!(status, 403, "{html}");
    assert_eq!(first.get("/catalog").await.0, 200, "still signed in");
    let response = client()
        .post(format!("{}/catalog/sign-out", server.base))
        .header("cookie", &first.cookie)
        .form(&[("form_token", first.form_token.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 303);
    assert_eq!(response.headers()["location"], "/catalog/sign-in");
    assert!(response.headers()["set-cookie"].to_str().unwrap().contains("Max-Age=0"));
    assert_eq!(first.get("/catalog").await.0, 401);
    assert_eq!(second.get("/catalog").await.0, 200, "the other session lives on");

    // Revoked, the key's every session ends with the next request.
    let (status, body) = server.call_as(Some(TOKEN), Method::DELETE, &format!("/admin/keys/{id}"), None).await;
    assert_eq!(status, 200, "{body}");
    let (status, html) = second.get("/catalog").await;
    assert_eq!(status, 401, "{html}");
    assert!(html.contains("id=\"key\""), "the sign-in page: {html}");
    let response = post_sign_in(&server.base, &[("key", key.as_str())], &[]).await;
    assert_eq!(response.status(), 401, "a revoked key signs in no more");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_keeps_at_most_sixteen_sessions() {
    let server = Server::start(&[]);
    let (_, key) = server.create_key(Some("default"), "consumer").await;
    let mut sessions = Vec::new();
    for _ in 0..17 {
        sessions.push(Designer::sign_in(&server.base, &key).await);
    }
    assert_eq!(server.stored_count("SELECT count(*) FROM designer_sessions"), 16);
    assert_eq!(sessions[0].get("/catalog").await.0, 401, "the oldest ended");
    for session in &sessions[1..] {
        assert_eq!(session.get("/catalog").await.0, 200);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sessions_are_stored_by_hash_and_outlive_a_restart() {
    let server = Server::start(&[]);
    let (_, key) = server.create_key(Some("default"), "consumer").await;
    let designer = Designer::sign_in(&server.base, &key).await;
    let token = designer.cookie.split_once('=').unwrap().1.to_string();
    assert_eq!(server.stored_count("SELECT count(*) FROM designer_sessions"), 1);
    let hash = plinth::digest::sha256_hex(token.as_bytes());
    assert_eq!(
        server.stored_count(&format!("SELECT count(*) FROM designer_sessions WHERE token_sha256 = '{hash}'")),
        1
    );
    // Neither the cookie nor the key is anywhere in the database.
    let data = server.data.path().to_path_buf();
    let database: Vec<u8> = ["registry.sqlite3", "registry.sqlite3-wal"]
        .iter()
        .flat_map(|f| std::fs::read(data.join(f)).unwrap_or_default())
        .collect();
    let contains = |needle: &str| database.windows(needle.len()).any(|w| w == needle.as_bytes());
    assert!(!contains(&token) && !contains(&key));

    let data = server.stop();
    let plugins = plugins_dir();
    let server = Server::start_in(data, &["--plugins", plugins.to_str().unwrap()]);
    let designer = Designer { root: server.base.clone(), ..designer };
    let (status, html) = designer.get("/catalog").await;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("book_flight"), "{html}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_form_without_the_sessions_token_or_from_another_site_does_nothing() {
    let server = Server::start(&[]);
    let (_, key) = server.create_key(Some("default"), "consumer").await;
    let designer = Designer::sign_in(&server.base, &key).await;
    let echo = tool_path(&designer, "echo").await;
    let call_id = designer.call_id(&echo).await;
    let call = [("version", "1"), ("input.text", "hello"), ("call_id", call_id.as_str())];

    let (status, html) = designer.post_raw(&format!("{echo}/try"), &call, &[]).await;
    assert_eq!(status, 403, "{html}");
    assert!(html.contains("form token"), "{html}");
    let mut wrong = vec![("form_token", "not-the-token")];
    wrong.extend_from_slice(&call);
    assert_eq!(designer.post_raw(&format!("{echo}/try"), &wrong, &[]).await.0, 403);
    let mut right = vec![("form_token", designer.form_token.as_str())];
    right.extend_from_slice(&call);
    // Another site or origin, as the browser says: by Fetch Metadata (a
    // user-made navigation, `none`, is never this page's form either), or
    // by `Origin` from a browser that sends none.
    for header in [
        ("sec-fetch-site", "cross-site"),
        ("sec-fetch-site", "same-site"),
        ("sec-fetch-site", "none"),
        ("origin", "https://evil.example"),
        ("origin", "http://127.0.0.1:1"),
    ] {
        let (status, html) = designer.post_raw(&format!("{echo}/try"), &right, &[header]).await;
        assert_eq!(status, 403, "{header:?}: {html}");
    }
    assert!(!server.logs().contains("a call was tried from the catalog"), "nothing ran:\n{}", server.logs());

    // The page's own form does.
    let (status, html) = designer.post_raw(&format!("{echo}/try"), &right, &[("sec-fetch-site", "same-origin")]).await;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("id=\"outputs\"") && html.contains("&#34;hello&#34;"), "{html}");
    assert!(server.logs().contains("a call was tried from the catalog"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sign_in_not_posted_from_the_sign_in_page_is_refused() {
    let server = Server::start(&[]);
    let (_, key) = server.create_key(Some("default"), "consumer").await;
    let url = format!("{}/catalog/sign-in", server.base);

    // The page sets its token's cookie, for the sign-in path only.
    let response = client().get(&url).send().await.unwrap();
    let cookie = response.headers()["set-cookie"].to_str().unwrap().to_string();
    for attribute in ["plinth_catalog_sign_in=", "HttpOnly", "SameSite=Strict", "Path=/catalog/sign-in"] {
        assert!(cookie.contains(attribute), "{cookie}");
    }
    let (cookie, token) = sign_in_form(&server.base).await;

    // What a page of another site can post: the key (its own, say), but
    // neither the cookie (SameSite) nor its token. Refused, whatever the
    // browser says or does not say of where it came from.
    let refused = |response: reqwest::Response| async move {
        assert_eq!(response.status(), 403);
        assert_eq!(response.headers()["plinth-error-code"], "forbidden");
        let cookies: Vec<_> = response.headers().get_all("set-cookie").iter().collect();
        assert!(!cookies.iter().any(|c| c.to_str().unwrap().starts_with("plinth_catalog_session=")), "no session");
        let html = response.text().await.unwrap();
        assert!(html.contains("did not come from this page") && html.contains("id=\"key\""), "{html}");
    };
    refused(client().post(&url).form(&[("key", key.as_str())]).send().await.unwrap()).await;
    let forged = [("key", key.as_str()), ("sign_in_token", token.as_str())];
    refused(client().post(&url).form(&forged).send().await.unwrap()).await;
    let wrong = [("key", key.as_str()), ("sign_in_token", "0123456789abcdef0123456789abcdef")];
    refused(client().post(&url).header("cookie", &cookie).form(&wrong).send().await.unwrap()).await;
    // With the page's token and cookie, still refused when the browser says
    // it came from elsewhere: Fetch Metadata, or else a foreign Origin.
    for header in [
        ("sec-fetch-site", "cross-site"),
        ("sec-fetch-site", "same-site"),
        ("sec-fetch-site", "none"),
        ("origin", "https://evil.example"),
        ("origin", "http://localhost:1"),
    ] {
        refused(post_sign_in(&server.base, &[("key", &key)], &[header]).await).await;
    }
    assert!(server.logs().contains("a catalog sign-in not from its form was refused"));

    // The page's own form, as browsers post it: with Fetch Metadata, with
    // this server's Origin and no Fetch Metadata, or with `Origin: null`
    // (the page's `no-referrer` policy makes a browser send that).
    let own = server.base.clone();
    for header in [("sec-fetch-site", "same-origin"), ("origin", own.as_str()), ("origin", "null")] {
        let response = post_sign_in(&server.base, &[("key", &key)], &[header]).await;
        assert_eq!(response.status(), 303, "{header:?}");
        assert!(response.headers()["set-cookie"].to_str().unwrap().starts_with("plinth_catalog_session="));
    }
    // A browser that keeps the cookie gets the same token on the next page,
    // so two sign-in forms open at once both work.
    let response = client().get(&url).header("cookie", &cookie).send().await.unwrap();
    assert!(response.headers()["set-cookie"].to_str().unwrap().starts_with(&cookie));
    assert!(response.text().await.unwrap().contains(&format!("value=\"{token}\"")));
}

#[tokio::test(flavor = "multi_thread")]
async fn failed_sign_ins_are_throttled_like_confirmation_page_logins() {
    let server = Server::start(&["--login-address-lockout-after", "3", "--login-lockout-secs", "600"]);
    let (_, key) = server.create_key(Some("default"), "consumer").await;
    let sign_in = |key: String| {
        let root = server.base.clone();
        async move { post_sign_in(&root, &[("key", &key)], &[]).await }
    };
    for attempt in 0..3 {
        let response = sign_in(format!("plk_0123456789abcdef_guess-{attempt}")).await;
        assert_eq!(response.status(), 401);
    }
    // This address is locked out now, the right key included.
    let response = sign_in(key.clone()).await;
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["plinth-error-code"], "login_locked");
    assert!(response.headers().contains_key("retry-after"));
    assert!(response.text().await.unwrap().contains("Too many failed sign-ins"));
}

#[tokio::test(flavor = "multi_thread")]
async fn vendor_text_is_escaped_on_every_page() {
    let (server, _plugins) = catalog_server(&[]);
    let (_, key) = server.create_key(Some("default"), "consumer").await;
    let designer = Designer::sign_in(&server.base, &key).await;
    let tool = tool_path(&designer, "markup_docs").await;
    for path in [
        "/catalog".to_string(),
        "/catalog?tag=%3Cb%3Emarkup%3C%2Fb%3E".to_string(),
        tool.clone(),
        format!("{tool}/try"),
        format!("{tool}/diff"),
    ] {
        let (status, html) = designer.get(&path).await;
        assert_eq!(status, 200, "{path}: {html}");
        for raw in ["<script>document", "<img src=x", "<b>markup", "<em>note"] {
            assert!(!html.contains(raw), "{path} has {raw} as markup:\n{html}");
        }
        assert!(!html.contains("<script") && !html.contains("<img") && !html.contains("style="), "{path}");
    }
    let (_, html) = designer.get(&tool).await;
    for escaped in [
        "&#60;script&#62;document.title = &#34;pwned by the description&#34;&#60;/script&#62;",
        "&#60;img src=x onerror=&#34;document.title = &#39;pwned by a parameter image&#39;&#34;&#62;",
        "&#60;script&#62;document.title = &#34;pwned by an enum value&#34;&#60;/script&#62;",
        "&#60;b&#62;markup&#60;/b&#62;",
    ] {
        assert!(html.contains(escaped), "{escaped} is not on the page:\n{html}");
    }
    // What a call returns is text too.
    let (status, html) =
        designer.try_call(&tool, &[("version", "1"), ("input.note", "<script>alert(1)</script>")]).await;
    assert_eq!(status, 200, "{html}");
    assert!(
        html.contains("&#34;&#60;script&#62;alert(1)&#60;/script&#62;&#34;") && !html.contains("<script>"),
        "{html}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_try_form_names_each_bad_field_where_it_is() {
    let (server, _plugins) = catalog_server(&[]);
    let (_, key) = server.create_key(Some("default"), "consumer").await;
    let designer = Designer::sign_in(&server.base, &key).await;
    let book = tool_path(&designer, "book_flight").await;
    let (status, html) = designer.get(&format!("{book}/try")).await;
    assert_eq!(status, 200, "{html}");
    for field in
        ["input-flight_number", "input-date", "input-passengers", "input-cabin_class", "input-quoted_price_usd"]
    {
        assert!(html.contains(&format!("id=\"{field}\"")), "{field}: {html}");
    }
    assert!(html.contains("<label for=\"input-passengers\">"), "every field has its label: {html}");

    let (status, html) = designer
        .try_call(
            &book,
            &[
                ("version", "1"),
                ("input.flight_number", "UA123"),
                ("input.date", "2026-12-24 at noon"),
                ("input.passengers", "12"),
                ("input.cabin_class", ""),
            ],
        )
        .await;
    assert_eq!(status, 422, "{html}");
    let error_at = |field: &str| {
        html.split(&format!("id=\"error-{field}\">"))
            .nth(1)
            .map(|rest| rest.split("</p>").next().unwrap().to_string())
            .unwrap_or_else(|| panic!("no error at {field}:\n{html}"))
    };
    assert!(error_at("passengers").contains("from 1 to 9; got 12"));
    assert!(error_at("date").contains("at most 10 characters"));
    assert!(error_at("cabin_class").contains("is required"));
    assert!(!html.contains("id=\"error-flight_number\""), "a good field has no error");
    assert!(html.contains("aria-invalid=\"true\""));
    assert!(html.contains("value=\"UA123\""), "what was entered stays: {html}");
    assert!(!server.logs().contains("a call was tried from the catalog"), "nothing ran");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_from_the_catalog_counts_against_the_tenants_quota() {
    let server = Server::start(&[]);
    server.create_tenant("acme", json!({ "invocationsPerSecond": 1, "invocationBurst": 1 })).await;
    let (_, publisher) = server.create_key(Some("acme"), "publisher").await;
    let echo = std::fs::read(plugins_dir().join("echo.wasm")).unwrap();
    assert_eq!(server.deploy_as(&publisher, "acme", echo).await.0, 201);
    let designer = Designer::sign_in(&format!("{}/t/acme", server.base), &publisher).await;
    let echo = tool_path(&designer, "echo").await;
    let (status, html) = designer.try_call(&echo, &[("version", "1"), ("input.text", "one")]).await;
    assert_eq!(status, 200, "{html}");
    let call_id = designer.call_id(&echo).await;
    let form =
        [("form_token", designer.form_token.as_str()), ("version", "1"), ("input.text", "two"), ("call_id", &call_id)];
    let response = designer.send(&format!("{echo}/try"), &form, &[]).await;
    assert_eq!(response.status(), 503);
    assert_eq!(response.headers()["plinth-error-code"], "rate_limited");
    assert!(response.headers().contains_key("retry-after"));
    let html = response.text().await.unwrap();
    assert!(html.contains("id=\"error-code\">rate_limited"), "{html}");
    // Refused before it ran, the call gave its id back: the same form sent
    // again is a call (whichever way the quota answers it), not a replay.
    let response = designer.send(&format!("{echo}/try"), &form, &[]).await;
    assert!(!response.headers().contains_key("idempotent-replayed"), "{:?}", response.headers());
    assert!(!response.text().await.unwrap().contains("id=\"resent\""));
}

/// The value of the sample `name{labels}` in `/metrics`, if there is one.
async fn metric(server: &Server, name: &str, labels: &str) -> Option<f64> {
    let response = server.request(Method::GET, "/metrics").send().await.unwrap();
    assert_eq!(response.status(), 200);
    crate::observability::sample(&response.text().await.unwrap(), name, labels)
}

/// `book_flight`'s calls from the catalog (and A2T) that ran, by `/metrics`.
pub async fn bookings(server: &Server) -> f64 {
    let labels = r#"tenant="default",tool="book_flight",version="1",door="a2t",outcome="ok""#;
    metric(server, "plinth_invocations_total", labels).await.unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_form_sent_again_is_answered_from_its_record_and_books_once() {
    let (server, _plugins) = catalog_server(&[]);
    let (_, key) = server.create_key(Some("default"), "consumer").await;
    let designer = Designer::sign_in(&server.base, &key).await;
    let book = tool_path(&designer, "book_flight").await;
    let call_id = designer.call_id(&book).await;
    let booking = |passengers: &'static str, call_id: String| {
        vec![
            ("form_token", designer.form_token.clone()),
            ("version", "1".to_string()),
            ("input.flight_number", "UA123".to_string()),
            ("input.date", "2026-12-24".to_string()),
            ("input.passengers", passengers.to_string()),
            ("input.cabin_class", "ECONOMY".to_string()),
            ("call_id", call_id),
        ]
    };
    let send = |form: Vec<(&'static str, String)>| {
        let path = format!("{book}/try");
        let designer = &designer;
        async move {
            let fields: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let response = designer.send(&path, &fields, &[]).await;
            let replayed = response.headers().get("idempotent-replayed").is_some();
            (response.status().as_u16(), replayed, response.text().await.unwrap())
        }
    };
    let code_of = |html: &str| {
        let row = html.split("data-output=\"confirmation_code\"").nth(1).unwrap_or_else(|| panic!("{html}"));
        row.split("<pre class=\"value\">").nth(1).unwrap().split("</pre>").next().unwrap().to_string()
    };

    // The form books once.
    let (status, replayed, first) = send(booking("2", call_id.clone())).await;
    assert_eq!((status, replayed), (200, false), "{first}");
    assert!(!first.contains("id=\"resent\""), "{first}");
    assert_eq!(bookings(&server).await, 1.0);
    // The page it answers with is a new form: a new call.
    let next_call_id = hidden(&first, "call_id");
    assert_ne!(next_call_id, call_id);

    // The same form again (a reload, back and send again): the first
    // call's answer, said to be that, and no second booking.
    for _ in 0..2 {
        let (status, replayed, again) = send(booking("2", call_id.clone())).await;
        assert_eq!((status, replayed), (200, true), "{again}");
        assert!(again.contains("id=\"resent\"") && again.contains("The tool did not run again"), "{again}");
        assert_eq!(code_of(&again), code_of(&first), "the same booking");
        assert_ne!(hidden(&again, "call_id"), call_id, "its form is a new call");
    }
    assert_eq!(bookings(&server).await, 1.0, "booked once");
    let recorded =
        format!("SELECT count(*) FROM idempotent_calls WHERE call_id = 'catalog:{call_id}' AND response IS NOT NULL");
    assert_eq!(server.stored_count(&recorded), 1, "the ledger keeps the answer");

    // The same call id with other values is not that call, nor a new one.
    let (status, _, html) = send(booking("3", call_id.clone())).await;
    assert_eq!(status, 409, "{html}");
    assert!(html.contains("already sent with other values") && !html.contains("id=\"answer\""), "{html}");
    // Without a call id, nothing runs.
    let mut no_id = booking("2", String::new());
    no_id.pop();
    let (status, _, html) = send(no_id).await;
    assert_eq!(status, 400, "{html}");
    assert_eq!(bookings(&server).await, 1.0);

    // The next form is the next booking.
    let (status, replayed, second) = send(booking("2", next_call_id)).await;
    assert_eq!((status, replayed), (200, false), "{second}");
    assert_eq!(bookings(&server).await, 2.0);

    // A call that waits for its end user, sent again, waits once: one
    // transaction, the same pack.
    server.add_end_user("", "alice").await;
    let transfer = tool_path(&designer, "transfer_funds").await;
    let call_id = designer.call_id(&transfer).await;
    let form = [
        ("form_token", designer.form_token.as_str()),
        ("input.amount_usd", "250"),
        ("end_user", "alice"),
        ("call_id", call_id.as_str()),
    ];
    let (status, first) = designer.post_raw(&format!("{transfer}/try"), &form, &[]).await;
    assert_eq!(status, 202, "{first}");
    let (status, again) = designer.post_raw(&format!("{transfer}/try"), &form, &[]).await;
    assert_eq!(status, 202, "{again}");
    assert!(again.contains("id=\"resent\""), "{again}");
    let pack = |html: &str| html.split("id=\"pack\">").nth(1).unwrap().split("</pre>").next().unwrap().to_string();
    assert_eq!(pack(&again), pack(&first));
    assert_eq!(server.stored_confirmations(), 1, "one transaction");
}

#[tokio::test(flavor = "multi_thread")]
async fn pages_share_one_stylesheet_under_a_strict_policy() {
    let (server, _plugins) = catalog_server(&[]);
    let (_, key) = server.create_key(Some("default"), "consumer").await;
    let designer = Designer::sign_in(&server.base, &key).await;
    let response =
        client().get(format!("{}/catalog", server.base)).header("cookie", &designer.cookie).send().await.unwrap();
    let policy = response.headers()["content-security-policy"].to_str().unwrap().to_string();
    assert!(policy.contains("default-src 'none'") && policy.contains("style-src 'self'"), "{policy}");
    assert!(!policy.contains("unsafe-inline") && !policy.contains("script-src"), "{policy}");
    assert_eq!(response.headers()["x-frame-options"], "DENY");
    let html = response.text().await.unwrap();
    let href = html.split("rel=\"stylesheet\" href=\"").nth(1).unwrap().split('"').next().unwrap().to_string();
    assert!(href.starts_with("/assets/plinth.css?v="), "{href}");

    // A tool's page says what clients are told of it: the publisher's
    // claims (plugins/echo/plinth.toml, version 1), with the sandbox's fact
    // that echo reaches no host.
    let echo = server.tool_id("echo").await;
    let (status, html) = designer.get(&format!("/catalog/tools/{echo}?version=1")).await;
    assert_eq!(status, 200, "{html}");
    let told = html.split("id=\"annotations\"").nth(1).unwrap().split("</dl>").next().unwrap();
    assert_eq!(
        told,
        "><dt>Title</dt><dd>Echo</dd><dt>Read-only</dt><dd>yes</dd><dt>Idempotent</dt><dd>yes</dd>\
         <dt>Reaches the outside world</dt><dd>no</dd>\n"
    );

    // The confirmation pages link the same one.
    let confirm = client().get(format!("{}/cheq/confirm", server.base)).send().await.unwrap();
    assert_eq!(confirm.status(), 400);
    assert_eq!(confirm.headers()["content-security-policy"].to_str().unwrap(), policy);
    assert!(confirm.text().await.unwrap().contains(&format!("href=\"{href}\"")));

    let css = client().get(format!("{}{href}", server.base)).send().await.unwrap();
    assert_eq!(css.status(), 200);
    assert_eq!(css.headers()["content-type"], "text/css; charset=utf-8");
    assert!(css.text().await.unwrap().contains(".hidden-char"));
    // Only under the server's root.
    assert_eq!(
        client().get(format!("{}/t/default/assets/plinth.css", server.base)).send().await.unwrap().status(),
        404
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_waiting_calls_page_shows_its_state_then_its_answer_in_its_doors_shape() {
    let (server, _plugins) = crate::cheq::confirming_server(&[]).await;
    let echo = server.tool_id("echo").await;
    let path = format!("/admin/tools/{echo}/confirmation");
    let (status, _) = server.call_as(Some(TOKEN), Method::PUT, &path, Some(&json!({ "required": true }))).await;
    assert_eq!(status, 204);
    // An agent's call through OTC, for alice.
    let call = json!({ "tool_id": "Default.Echo", "input": { "text": "kept" }, "context": { "user_id": "alice" } });
    let (status, pack) = server.post("/otc/tools/call", &call).await;
    assert_eq!(status, 200, "{pack}");
    let id = pack["resource uri"].as_str().unwrap().rsplit('/').next().unwrap().to_string();

    let (_, key) = server.create_key(Some("default"), "consumer").await;
    let designer = Designer::sign_in(&server.base, &key).await;
    let (status, html) = designer.get(&format!("/catalog/confirmations/{id}")).await;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("It waits for its end user&#39;s confirmation") && html.contains("alice"), "{html}");

    let session = crate::cheq::PageSession::log_in(&pack, "alice").await;
    let (status, html) = session.decide(&pack, "accept").await;
    assert_eq!(status, 200, "{html}");
    let (status, html) = designer.get(&format!("/catalog/confirmations/{id}")).await;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("It ended with status <strong>200</strong>"), "{html}");
    let kept = html.split("id=\"kept\">").nth(1).unwrap().split("</pre>").next().unwrap();
    assert!(kept.contains("&#34;success&#34;: true") && kept.contains("&#34;kept&#34;"), "the OTC answer: {kept}");

    // A made-up id is no call.
    assert_eq!(designer.get("/catalog/confirmations/no-such-call").await.0, 404);
}

/// The designer's toolset pages (issue 56): a publisher's session changes a
/// toolset with forms; a consumer's reads it, gets no forms and is refused
/// a change (403); a form without the session's token is refused; another
/// tenant's session finds no such toolset; a change the core refuses (a
/// tool the tenant lacks) says why and changes nothing.
#[tokio::test(flavor = "multi_thread")]
async fn toolsets_are_changed_in_the_catalog_by_a_publisher_only() {
    let (server, _plugins) = catalog_server(&[]);
    server.create_tenant("acme", json!({})).await;
    let (_, publisher) = server.create_key(Some("default"), "publisher").await;
    let (_, consumer) = server.create_key(Some("default"), "consumer").await;
    let (_, acme) = server.create_key(Some("acme"), "publisher").await;
    let designer = Designer::sign_in(&server.base, &publisher).await;
    let create = [("action", "create"), ("toolset", "travel"), ("description", "Trips.")];
    let (status, _) = designer.post("/catalog/toolsets", &create).await;
    assert_eq!(status, 303);
    let (status, _) =
        designer.post("/catalog/toolsets", &[("action", "add"), ("toolset", "travel"), ("tool", "echo")]).await;
    assert_eq!(status, 303);
    let (status, html) =
        designer.post("/catalog/toolsets", &[("action", "add"), ("toolset", "travel"), ("tool", "no_such")]).await;
    assert_eq!(status, 404, "{html}");
    assert!(html.contains("the tenant has no tool") && html.contains("no_such"), "{html}");
    let (status, html) = designer.get("/catalog/toolsets/travel").await;
    assert_eq!(status, 200);
    assert!(html.contains("Version 2, the newest") && html.contains("data-action=\"remove\""), "{html}");
    let (status, toolset) = server.get("/admin/toolsets/travel").await;
    assert_eq!((status, toolset["version"].as_u64()), (200, Some(2)), "{toolset}");

    // Without the session's form token: refused, nothing changed.
    let (status, _) = designer
        .post_raw("/catalog/toolsets", &[("action", "remove"), ("toolset", "travel"), ("tool", "echo")], &[])
        .await;
    assert_eq!(status, 403);
    let reader = Designer::sign_in(&server.base, &consumer).await;
    let (status, html) = reader.get("/catalog/toolsets/travel").await;
    assert_eq!(status, 200);
    assert!(!html.contains("data-action="), "a consumer gets no forms");
    assert!(html.contains("What the model is sent"), "but the preview");
    let (status, html) =
        reader.post("/catalog/toolsets", &[("action", "remove"), ("toolset", "travel"), ("tool", "echo")]).await;
    assert_eq!(status, 403, "{html}");
    let (_, toolset) = server.get("/admin/toolsets/travel").await;
    assert_eq!(toolset["version"], 2, "unchanged: {toolset}");
    let elsewhere = Designer::sign_in(&format!("{}/t/acme", server.base), &acme).await;
    let (status, _) = elsewhere.get("/catalog/toolsets/travel").await;
    assert_eq!(status, 404, "another tenant's toolset is not there");
}

/// The toolset page's token counts (o200k of the MCP listing), if shown.
fn shown_count(html: &str) -> Option<String> {
    Some(html.split("data-o200k=\"").nth(1)?.split('"').next()?.to_string())
}

/// A toolset page's token counts are made once per listing (kept until
/// what a door lists changes: a deploy of a tool it follows) and one at a
/// time per tenant: a view that would count while another of the
/// tenant's counts says so at once, and a later one takes the counts made.
#[tokio::test(flavor = "multi_thread")]
async fn a_toolsets_token_counts_are_made_once_per_listing_and_one_at_a_time_per_tenant() {
    let server = Server::start(&[]);
    let (_, consumer) = server.create_key(Some("default"), "consumer").await;
    let travel =
        json!({ "description": "", "tools": [{ "name": "echo", "version": 1 }, { "name": "lookup_weather_by_city" }] });
    assert_eq!(server.call_as(Some(TOKEN), Method::PUT, "/admin/toolsets/travel", Some(&travel)).await.0, 201);
    let other = json!({ "description": "", "tools": [{ "name": "book_flight" }] });
    assert_eq!(server.call_as(Some(TOKEN), Method::PUT, "/admin/toolsets/other", Some(&other)).await.0, 201);
    let designer = Designer::sign_in(&server.base, &consumer).await;
    let counts = |outcome: &'static str| {
        let server = &server;
        async move {
            let labels = format!(r#"tenant="default",outcome="{outcome}""#);
            metric(server, "plinth_catalog_token_counts_total", &labels).await.unwrap_or(0.0)
        }
    };

    let (status, first) = designer.get("/catalog/toolsets/travel").await;
    assert_eq!(status, 200, "{first}");
    let counted = shown_count(&first).unwrap_or_else(|| panic!("no counts: {first}"));
    assert_eq!(counts("counted").await, 1.0);
    // Viewed again: the same counts, not made again.
    let (_, again) = designer.get("/catalog/toolsets/travel").await;
    assert_eq!(shown_count(&again).as_deref(), Some(counted.as_str()));
    assert_eq!((counts("counted").await, counts("cached").await), (1.0, 1.0));
    // A new version of the tool it follows changes what MCP lists: counted
    // again, once.
    let weather = std::fs::read(plugins_dir().join("lookup_weather_by_city.wasm")).unwrap();
    let (status, body) = server.deploy(crate::support::relabeled(&weather, "v2"), "").await;
    assert_eq!(status, 201, "{body}");
    for _ in 0..2 {
        let (_, html) = designer.get("/catalog/toolsets/travel").await;
        assert!(shown_count(&html).is_some(), "{html}");
    }
    assert_eq!((counts("counted").await, counts("cached").await), (2.0, 2.0));

    // Six views at once of a toolset never counted: one counts; one that
    // comes while it does is told so, at once, and counts nothing; those
    // after take its counts.
    let path = "/catalog/toolsets/other";
    let views = tokio::join!(
        designer.get(path),
        designer.get(path),
        designer.get(path),
        designer.get(path),
        designer.get(path),
        designer.get(path)
    );
    let views = [views.0, views.1, views.2, views.3, views.4, views.5];
    let mut busy = 0.0;
    for (status, html) in &views {
        assert_eq!(*status, 200, "{html}");
        match shown_count(html) {
            Some(_) => {}
            None => {
                assert!(html.contains("data-counting"), "neither counts nor a word why: {html}");
                busy += 1.0;
            }
        }
    }
    assert_eq!(counts("counted").await, 3.0, "one count for the new listing");
    assert_eq!(counts("busy").await, busy);
    assert_eq!(counts("cached").await, 2.0 + 5.0 - busy);
    let (_, later) = designer.get(path).await;
    assert!(shown_count(&later).is_some(), "the counts made are kept: {later}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_publisher_sees_the_tenants_providers_never_their_secrets() {
    let server = Server::start(&[]);
    server.create_tenant("acme", json!({})).await;
    let publisher = server.create_key(Some("acme"), "publisher").await.1;
    let consumer = server.create_key(Some("acme"), "consumer").await.1;
    for (id, settings) in [
        (
            "inbox",
            json!({"displayName": "Inbox <b>", "issuer": "https://login.inbox.example", "clientId": "plinth-acme", "clientSecret": "never-shown-secret"}),
        ),
        (
            "calendar",
            json!({"authorizationEndpoint": "https://cal.example/auth", "tokenEndpoint": "https://cal.example/token", "clientId": "plinth-cal"}),
        ),
    ] {
        let path = format!("/t/acme/admin/authorization-providers/{id}");
        assert_eq!(server.call_as(Some(&publisher), Method::PUT, &path, Some(&settings)).await.0, 200);
    }
    let root = format!("{}/t/acme", server.base);

    // A publisher's session: linked from the catalog, every provider shown,
    // the redirect URI to register, never a secret.
    let designer = Designer::sign_in(&root, &publisher).await;
    let (status, html) = designer.get("/catalog").await;
    assert_eq!(status, 200);
    assert!(html.contains("id=\"providers-link\" href=\"/t/acme/catalog/providers\""), "{html}");
    let (status, html) = designer.get("/catalog/providers").await;
    assert_eq!(status, 200, "{html}");
    for shown in [
        "<tr data-provider=\"inbox\"><td><strong>Inbox &#60;b&#62;</strong>",
        "Issuer <code>https://login.inbox.example</code>",
        "<code>plinth-acme</code>",
        "data-secret=\"set\"",
        "<tr data-provider=\"calendar\">",
        "Authorization endpoint <code>https://cal.example/auth</code>",
        "Token endpoint <code>https://cal.example/token</code>",
        "data-secret=\"none\"",
    ] {
        assert!(html.contains(shown), "{shown}:\n{html}");
    }
    assert!(html.contains(&format!("<code id=\"callback\">{root}/connections/callback</code>")), "{html}");
    assert!(!html.contains("never-shown-secret"), "{html}");

    // A consumer's session: no link, and the page is refused.
    let designer = Designer::sign_in(&root, &consumer).await;
    let (_, html) = designer.get("/catalog").await;
    assert!(!html.contains("providers-link"), "{html}");
    let (status, _) = designer.get("/catalog/providers").await;
    assert_eq!(status, 403);
}
