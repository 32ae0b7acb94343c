//! A real headless Chromium, driven over WebDriver, for tests of the pages
//! the server serves. Chromium and ChromeDriver are Debian's (`make browser`
//! installs them); a missing browser fails the test, it never skips it.
//!
//! Every [`Browser`] has its own chromedriver on its own port and its own
//! profile directory, so browser tests run in parallel like the others.

use crate::support::Server;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// A headless Chromium session. Its chromedriver is killed on drop; call
/// [`Browser::close`] to also end the session (and so Chromium) cleanly.
pub struct Browser {
    client: fantoccini::Client,
    driver: Child,
    /// The profile (`--user-data-dir`), HOME and chromedriver's log, removed
    /// on drop (after Chromium is killed).
    _dir: tempfile::TempDir,
}

/// Starts chromedriver and opens a session in a fresh headless Chromium.
pub async fn start() -> Browser {
    for binary in [CHROMIUM, CHROMEDRIVER] {
        assert!(
            Path::new(binary).exists(),
            "{binary} is missing: run `make browser` (Debian's chromium and chromium-driver)"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("chromedriver.log");
    let read_log = || std::fs::read_to_string(&log).unwrap_or_default();
    // The free port may be taken by someone else before chromedriver binds
    // it; chromedriver then exits, and another port is tried.
    let mut attempts = 0;
    let (mut driver, port) = loop {
        attempts += 1;
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let output = std::fs::File::create(&log).unwrap();
        // Its own process group, which Chromium inherits: Drop kills both
        // (Chromium outlives a killed chromedriver otherwise). HOME is the
        // temp dir so that nothing, crash reports included, lands in ours.
        let mut driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .env("HOME", dir.path())
            .process_group(0)
            .stdout(output.try_clone().unwrap())
            .stderr(output)
            .spawn()
            .unwrap_or_else(|e| panic!("{CHROMEDRIVER} does not start ({e}): run `make browser`"));
        if answers(&mut driver, port).await {
            break (driver, port);
        }
        kill_group(&mut driver);
        assert!(attempts < 3, "chromedriver did not answer on 127.0.0.1:{port}; its log:\n{}", read_log());
    };
    let profile = format!("--user-data-dir={}", dir.path().join("profile").display());
    let options = serde_json::json!({
        "binary": CHROMIUM,
        "args": [
            "--headless=new",
            // Root in a container has no user namespaces for the sandbox.
            "--no-sandbox",
            "--disable-gpu",
            // /dev/shm is small in containers; Chromium crashes when it runs out.
            "--disable-dev-shm-usage",
            "--disable-quic",
            "--no-first-run",
            // No calls home: the tests talk to 127.0.0.1 only.
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            profile,
        ],
    });
    let capabilities = serde_json::Map::from_iter([("goog:chromeOptions".to_string(), options)]);
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    let connected = fantoccini::ClientBuilder::new(connector)
        .capabilities(capabilities)
        .connect(&format!("http://127.0.0.1:{port}"))
        .await;
    let client = match connected {
        Ok(client) => client,
        Err(e) => {
            kill_group(&mut driver);
            panic!("{CHROMIUM} did not start ({e}); chromedriver's log:\n{}", read_log())
        }
    };
    Browser { client, driver, _dir: dir }
}

/// Whether chromedriver answers `/status` within 20 s (false when it exited).
async fn answers(driver: &mut Child, port: u16) -> bool {
    let status = format!("http://127.0.0.1:{port}/status");
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if driver.try_wait().unwrap().is_some() {
            return false;
        }
        if let Ok(response) = reqwest::get(&status).await
            && response.status().is_success()
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

impl Browser {
    /// The WebDriver client, for anything the helpers below do not cover.
    pub fn client(&self) -> &fantoccini::Client {
        &self.client
    }

    /// Navigates to `url` and waits for the page to load.
    pub async fn goto(&self, url: &str) {
        if let Err(e) = self.client.goto(url).await {
            panic!("cannot open {url}: {e}");
        }
    }

    /// Types `text` into the element `css` selects.
    pub async fn fill(&self, css: &str, text: &str) {
        let element = self.find(css).await;
        if let Err(e) = element.send_keys(text).await {
            panic!("cannot type into {css}: {e}; {}", self.context().await);
        }
    }

    /// Clicks the element `css` selects.
    pub async fn click(&self, css: &str) {
        let element = self.find(css).await;
        if let Err(e) = element.click().await {
            panic!("cannot click {css}: {e}; {}", self.context().await);
        }
    }

    /// Chooses `value` in the `<select>` `css` selects.
    pub async fn select(&self, css: &str, value: &str) {
        let element = self.find(css).await;
        if let Err(e) = element.select_by_value(value).await {
            panic!("cannot choose {value} in {css}: {e}; {}", self.context().await);
        }
    }

    /// Empties the field `css` selects.
    pub async fn clear(&self, css: &str) {
        let element = self.find(css).await;
        if let Err(e) = element.clear().await {
            panic!("cannot empty {css}: {e}; {}", self.context().await);
        }
    }

    /// How many elements `css` selects.
    pub async fn count(&self, css: &str) -> usize {
        let found = self.client.find_all(fantoccini::Locator::Css(css)).await;
        found.unwrap_or_else(|e| panic!("cannot look for {css}: {e}")).len()
    }

    /// The visible text of the element `css` selects.
    pub async fn text_of(&self, css: &str) -> String {
        let element = self.find(css).await;
        element.text().await.unwrap_or_else(|e| panic!("cannot read {css}: {e}"))
    }

    /// The value of attribute `name` of the element `css` selects.
    pub async fn attribute(&self, css: &str, name: &str) -> Option<String> {
        let element = self.find(css).await;
        element.attr(name).await.unwrap_or_else(|e| panic!("cannot read {css}'s {name}: {e}"))
    }

    /// Evaluates `script` in the page (WebDriver's own channel: the page's
    /// policy, which allows no script of its own, does not apply) and
    /// returns its value.
    pub async fn evaluate(&self, script: &str) -> serde_json::Value {
        self.client.execute(script, Vec::new()).await.unwrap_or_else(|e| panic!("cannot run {script}: {e}"))
    }

    /// Makes the viewport `width` CSS pixels wide and as tall as the page
    /// (at least `min_height`), so that a screenshot shows all of it.
    pub async fn fit(&self, width: u32, min_height: u32) {
        self.resize(width, min_height).await;
        let height = self.evaluate("return document.documentElement.scrollHeight").await.as_u64().unwrap_or(0);
        self.resize(width, (height as u32).max(min_height)).await;
    }

    /// Sets the viewport (not the window) to `width` × `height`.
    async fn resize(&self, width: u32, height: u32) {
        self.client.set_window_size(width, height).await.unwrap_or_else(|e| panic!("cannot resize the window: {e}"));
        // The window's frame, if any, takes from the viewport: add it back.
        let inner = self.evaluate("return [window.innerWidth, window.innerHeight]").await;
        let (w, h) = (inner[0].as_u64().unwrap_or(0) as u32, inner[1].as_u64().unwrap_or(0) as u32);
        if (w, h) != (width, height) {
            let (dw, dh) = (width.saturating_sub(w), height.saturating_sub(h));
            self.client.set_window_size(width + dw, height + dh).await.unwrap_or_else(|e| panic!("cannot resize: {e}"));
        }
    }

    /// Saves a screenshot of the viewport as `path` (PNG).
    pub async fn screenshot(&self, path: &Path) {
        let png = self.client.screenshot().await.unwrap_or_else(|e| panic!("cannot take a screenshot: {e}"));
        assert!(png.starts_with(b"\x89PNG"), "the screenshot is not a PNG");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(path, png).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    }

    /// The page's visible text.
    pub async fn text(&self) -> String {
        let body = self.find("body").await;
        body.text().await.unwrap_or_else(|e| panic!("cannot read the page's text: {e}"))
    }

    /// The page's source.
    pub async fn html(&self) -> String {
        self.client.source().await.unwrap_or_else(|e| panic!("cannot read the page's source: {e}"))
    }

    /// The current page's URL.
    pub async fn current_url(&self) -> String {
        self.client.current_url().await.unwrap_or_else(|e| panic!("cannot read the page's URL: {e}")).to_string()
    }

    /// Waits until the page's visible text contains `needle`, and returns it.
    pub async fn wait_for_text(&self, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            // The body may be missing for a moment while a page loads.
            if let Ok(body) = self.client.find(fantoccini::Locator::Css("body")).await
                && let Ok(text) = body.text().await
                && text.contains(needle)
            {
                return text;
            }
            if Instant::now() > deadline {
                panic!("no {needle:?} on the page within {timeout:?}; {}", self.context().await);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Ends the session (Chromium quits) and stops chromedriver.
    pub async fn close(self) {
        let _ = self.client.clone().close().await;
    }

    async fn find(&self, css: &str) -> fantoccini::elements::Element {
        match self.client.find(fantoccini::Locator::Css(css)).await {
            Ok(element) => element,
            Err(e) => panic!("nothing matches {css} ({e}); {}", self.context().await),
        }
    }

    /// Where the browser is and what it shows, for failure messages.
    async fn context(&self) -> String {
        let url = self.client.current_url().await.map(|u| u.to_string()).unwrap_or_else(|e| format!("? ({e})"));
        let text = match self.client.find(fantoccini::Locator::Css("body")).await {
            Ok(body) => body.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        let snippet: String = text.chars().take(500).collect();
        let more = if snippet.len() < text.len() { " …" } else { "" };
        format!("at {url}, the page reads:\n{snippet}{more}")
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        kill_group(&mut self.driver);
    }
}

/// Kills chromedriver and everything in its process group (Chromium).
fn kill_group(driver: &mut Child) {
    // SAFETY: kill(2) touches no memory; -pid is the group chromedriver leads.
    unsafe { libc::kill(-(driver.id() as libc::pid_t), libc::SIGKILL) };
    let _ = driver.wait();
}

#[tokio::test]
async fn a_headless_chromium_renders_a_page_the_server_serves() {
    let server = Server::start(&[]);
    let (status, jwks) = server.get("/.well-known/jwks.json").await;
    assert_eq!(status, 200, "{jwks}");
    let kid = jwks["keys"][0]["kid"].as_str().unwrap_or_else(|| panic!("no kid in {jwks}"));

    let browser = start().await;
    let url = format!("{}/.well-known/jwks.json", server.base);
    browser.goto(&url).await;
    assert_eq!(browser.current_url().await, url);
    let text = browser.wait_for_text(kid, Duration::from_secs(10)).await;
    assert!(text.contains("\"keys\""), "{text}");
    assert!(browser.html().await.contains(kid));
    browser.close().await;
}

/// The helpers on a page of our own (a `data:` URL): typing, clicking and
/// waiting for what a script writes a moment later.
#[tokio::test]
async fn the_helpers_type_click_and_wait_for_a_script() {
    let page = r#"<title>form</title><input id="name"><button id="go">Go</button><p id="out"></p>
        <script>
          document.getElementById("go").onclick = () => setTimeout(() => {
            document.getElementById("out").textContent = "Hello, " + document.getElementById("name").value;
          }, 300);
        </script>"#;
    let encoded: String = page
        .bytes()
        .map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") })
        .collect();
    let browser = start().await;
    browser.goto(&format!("data:text/html,{encoded}")).await;
    assert_eq!(browser.client().title().await.unwrap(), "form");
    browser.fill("#name", "Ada").await;
    browser.click("#go").await;
    assert!(!browser.text().await.contains("Hello"), "the script waits before it writes");
    browser.wait_for_text("Hello, Ada", Duration::from_secs(10)).await;
    browser.close().await;
}
