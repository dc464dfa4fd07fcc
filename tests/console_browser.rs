//! The console in a real browser: Debian's headless Chromium, driven
//! through `chromedriver` (WebDriver) with fantoccini, against the real
//! `spool serve --console`.
//!
//! One browser session walks what an operator does: log in with a
//! token, read the counts (and see them change without a reload), filter
//! the dead letters by error text, requeue one with the confirmation,
//! check through the CLI that the spool changed; an item holding
//! `<script>` and `"><img onerror=…>` renders as text and runs nothing
//! (no dialog, no console error); a form posted from another origin is
//! refused; a read-only token sees no action. The main screens are saved
//! as screenshots (into `docs/` with `SPOOL_UPDATE_SCREENSHOTS=1`).
//!
//! Needs `chromium` and `chromium-driver` (`.ci/run` installs them):
//! without `chromedriver` the test says SKIPPED, unless
//! `SPOOL_REQUIRE_BROWSER=1` (CI), where it fails.

mod cli_common;
mod serve_common;

use cli_common::*;
use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};
use serve_common::*;
use spool::OpenMode;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const ADMIN: &str = "admin-token-0123456789abc";
const READER: &str = "read-token-0123456789abcd";
const EVIL: &str = "<script>alert(1)</script>\"><img src=x onerror=alert(2)>";

fn chromedriver() -> Option<PathBuf> {
    let p = PathBuf::from(
        std::env::var("CHROMEDRIVER").unwrap_or_else(|_| "/usr/bin/chromedriver".into()),
    );
    if p.exists() {
        return Some(p);
    }
    if std::env::var("SPOOL_REQUIRE_BROWSER").is_ok_and(|v| v == "1") {
        panic!("SPOOL_REQUIRE_BROWSER=1 but {} is missing", p.display());
    }
    eprintln!(
        "SKIPPED: the console's browser test needs {} (apt-get install chromium chromium-driver)",
        p.display()
    );
    None
}

/// `chromedriver` on a free port, and the session to end when dropped
/// (killing the driver alone would leave Chromium running).
struct Driver {
    child: Child,
    port: u16,
    session: Option<String>,
}

impl Driver {
    fn start(bin: &Path) -> Driver {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(bin)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        let mut d = Driver {
            child,
            port,
            session: None,
        };
        let start = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = d.child.try_wait() {
                panic!("chromedriver exited: {status}");
            }
            assert!(start.elapsed() < DEADLINE, "chromedriver did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        d
    }

    async fn connect(&mut self, profile: &Path) -> Client {
        let chromium =
            std::env::var("CHROMIUM_BIN").unwrap_or_else(|_| "/usr/lib/chromium/chromium".into());
        let Value::Object(caps) = json!({
            "browserName": "chrome",
            // Keep a dialog open so that the test sees it.
            "unhandledPromptBehavior": "ignore",
            "goog:loggingPrefs": { "browser": "ALL" },
            "goog:chromeOptions": {
                "binary": chromium,
                "args": [
                    "--headless=new",
                    // Root (CI) cannot use the sandbox.
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    "--window-size=1200,800",
                    format!("--user-data-dir={}", profile.display()),
                ]
            }
        }) else {
            unreachable!()
        };
        let c = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{}", self.port))
            .await
            .expect("a WebDriver session");
        self.session = c.session_id().await.unwrap();
        c
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        if let Some(sid) = self.session.take() {
            if let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) {
                let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                let _ = write!(
                    s,
                    "DELETE /session/{sid} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n"
                );
                // chromedriver answers once Chromium has quit, and keeps
                // the socket open: one read.
                let _ = s.read(&mut [0u8; 4096]);
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// chromedriver's browser log (`POST /session/{id}/se/log`), which
/// fantoccini does not wrap; reading it empties it.
#[derive(Debug)]
struct GetLog;

impl WebDriverCompatibleCommand for GetLog {
    fn endpoint(
        &self,
        base: &url::Url,
        session_id: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base.join(&format!("session/{}/se/log", session_id.unwrap_or("")))
    }
    fn method_and_body(&self, _url: &url::Url) -> (http::Method, Option<String>) {
        (
            http::Method::POST,
            Some(json!({"type": "browser"}).to_string()),
        )
    }
}

/// Fail when the page opened a dialog or logged an error (a script
/// that ran, a CSP violation, a failed load).
async fn assert_clean(c: &Client, what: &str) {
    match c.get_alert_text().await {
        Err(e) if e.is_no_such_alert() => {}
        other => panic!("{what}: a dialog is open: {other:?}"),
    }
    let log = c.issue_cmd(GetLog).await.expect("the browser log");
    let severe: Vec<&Value> = log
        .as_array()
        .expect("an array")
        .iter()
        .filter(|e| e["level"] == "SEVERE")
        .collect();
    assert!(
        severe.is_empty(),
        "{what}: errors in the browser: {severe:?}"
    );
}

async fn text(c: &Client, css: &str) -> String {
    c.wait()
        .at_most(DEADLINE)
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .text()
        .await
        .unwrap()
}

/// Wait until the element at `css` shows `want` (a click's navigation
/// may still be under way).
async fn expect_text(c: &Client, css: &str, want: &str) {
    let start = Instant::now();
    loop {
        let got = match c.find(Locator::Css(css)).await {
            Ok(e) => e.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        if got == want {
            return;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "{css} shows {got:?}, not {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn click(c: &Client, css: &str) {
    c.find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .click()
        .await
        .unwrap();
}

/// Fill the login form with `token` and send it.
async fn log_in(c: &Client, token: &str) {
    c.find(Locator::Id("token"))
        .await
        .unwrap()
        .send_keys(token)
        .await
        .unwrap();
    click(c, "form.login button").await;
}

async fn screenshot(c: &Client, name: &str) {
    let png = c.screenshot().await.expect("a screenshot");
    assert!(png.starts_with(b"\x89PNG"));
    let dir = if std::env::var("SPOOL_UPDATE_SCREENSHOTS").is_ok_and(|v| v == "1") {
        PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/docs"))
    } else {
        PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
    };
    std::fs::write(dir.join(format!("console-{name}.png")), png).unwrap();
}

/// A page on another origin (another port of 127.0.0.1: the same site,
/// so the session cookie goes along) whose script posts an action to the
/// console at once: a cross-site request forgery.
fn forger(console: &str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let page = format!(
        "<!doctype html><html><head><link rel=\"icon\" href=\"data:,\"></head><body>\
         <form id=\"f\" method=\"post\" action=\"{console}/console/act\">\
         <input name=\"action\" value=\"purge\"><input name=\"state\" value=\"dead\">\
         <input name=\"ids\" value=\"2\"><input name=\"confirm\" value=\"1\"></form>\
         <script>document.getElementById('f').submit()</script></body></html>"
    );
    std::thread::spawn(move || {
        for s in listener.incoming().flatten() {
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut line = String::new();
            while r.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let mut s = s;
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                page.len()
            );
        }
    });
    format!("http://{addr}")
}

fn dead_ids(env: &Env) -> Vec<u64> {
    let a = env.run(&["list", "--state", "dead", "--json"]).success();
    ndjson(&a.get_output().stdout)
        .iter()
        .map(|v| v["id"].as_u64().unwrap())
        .collect()
}

#[tokio::test(flavor = "current_thread")]
async fn an_operator_logs_in_filters_dead_letters_and_requeues_one() {
    let Some(bin) = chromedriver() else { return };
    let env = Env::new("spool.db");
    {
        let spool = env.lib(OpenMode::Create);
        for i in 1..=6 {
            spool
                .enqueue(
                    format!("{{\"order\": {i}}}").as_bytes(),
                    &format!("order-{i}"),
                )
                .unwrap();
        }
        for id in 1..=3 {
            spool
                .dead_letter(id, "HTTP 503 Service Unavailable")
                .unwrap();
        }
        spool.dead_letter(4, "connection refused").unwrap();
        spool
            .enqueue(EVIL.as_bytes(), "\"><img src=x onerror=alert(3)>")
            .unwrap();
    }
    let tokens = write_file(
        env.dir.path(),
        "tokens",
        &format!("{ADMIN} name=alice role=admin\n{READER} name=bob\n"),
    );
    let s = Serve::start(
        &env,
        &["--console", "--token-file", tokens.to_str().unwrap(), "-v"],
    );
    let profile = tempfile::tempdir().unwrap();
    let mut driver = Driver::start(&bin);
    let c = driver.connect(profile.path()).await;

    // Log in: the login form first, then the overview with the counts.
    c.goto(&s.url("/console/")).await.unwrap();
    assert_eq!(c.title().await.unwrap(), "Log in · spool");
    // The page came with its 401, which the browser logs.
    let _ = c.issue_cmd(GetLog).await;
    log_in(&c, ADMIN).await;
    expect_text(&c, "main h1", "Overview").await;
    expect_text(&c, ".counts [data-live=dead]", "4").await;
    expect_text(&c, ".counts [data-live=pending]", "3").await;
    // The cookie is out of the page's reach.
    let cookie = c.execute("return document.cookie", vec![]).await.unwrap();
    assert_eq!(cookie, json!(""), "the session cookie is HttpOnly");
    // The counts follow the spool without a reload.
    env.run(&["enqueue", "--key", "late", "arrived later"])
        .success();
    let start = Instant::now();
    while text(&c, ".counts [data-live=pending]").await != "4" {
        // Nothing reloads the page: the script updates the count.
        assert!(start.elapsed() < DEADLINE, "the counts never updated");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_clean(&c, "the overview").await;
    screenshot(&c, "overview").await;

    // The dead letters, filtered by error text.
    click(&c, "nav a[href='/console/items?state=dead']").await;
    c.form(Locator::Css("form.filter"))
        .await
        .unwrap()
        .set_by_name("error", "503")
        .await
        .unwrap()
        .submit()
        .await
        .unwrap();
    let start = Instant::now();
    while !c
        .current_url()
        .await
        .unwrap()
        .as_str()
        .contains("error=503")
    {
        assert!(start.elapsed() < DEADLINE, "the filter was not applied");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    expect_text(&c, "main h1", "Dead items").await;
    let rows = c
        .find_all(Locator::Css("table.items tbody tr"))
        .await
        .unwrap();
    assert_eq!(rows.len(), 3, "three dead letters failed with 503");
    assert_clean(&c, "the dead letters").await;
    screenshot(&c, "dead").await;

    // Requeue the first, through its page and the confirmation.
    click(&c, "table.items tbody tr a").await;
    expect_text(&c, "main h1", "Item 1").await;
    click(&c, "button.act.requeue").await;
    expect_text(&c, "p.question", "Requeue 1 dead letter?").await;
    assert_eq!(
        dead_ids(&env),
        [1, 2, 3, 4],
        "a confirmation changes nothing"
    );
    assert_clean(&c, "the confirmation").await;
    screenshot(&c, "confirm").await;
    click(&c, "#confirm").await;
    expect_text(&c, "p.result", "requeued 1 item").await;
    assert_eq!(dead_ids(&env), [2, 3, 4], "the CLI sees the requeue");

    // Untrusted bytes render as text and run nothing.
    c.goto(&s.url("/console/items/7")).await.unwrap();
    assert_eq!(text(&c, "pre.payload").await, EVIL);
    expect_text(&c, "dd.key", "\"><img src=x onerror=alert(3)>").await;
    assert!(c
        .find_all(Locator::Css("main img"))
        .await
        .unwrap()
        .is_empty());
    c.goto(&s.url("/console/items?state=pending"))
        .await
        .unwrap();
    assert!(c
        .find_all(Locator::Css("main img, main script"))
        .await
        .unwrap()
        .is_empty());
    assert_clean(&c, "an item holding markup").await;

    // A form posted from another origin carries the session cookie (the
    // same site) but not the origin: refused, nothing purged.
    c.goto(&forger(&s.base)).await.unwrap();
    expect_text(&c, "main h1", "Error 403").await;
    assert_eq!(dead_ids(&env), [2, 3, 4]);
    // The refused navigation may be in the log; the pages after are
    // checked afresh.
    let _ = c.issue_cmd(GetLog).await;

    // Log out; a read-only token sees no action.
    c.goto(&s.url("/console/")).await.unwrap();
    click(&c, ".who form button").await;
    expect_text(&c, "main h1", "Log in").await;
    log_in(&c, READER).await;
    expect_text(&c, "main h1", "Overview").await;
    for page in ["/console/items?state=dead&error=503", "/console/items/2"] {
        c.goto(&s.url(page)).await.unwrap();
        text(&c, "main h1").await;
        let acts = c
            .find_all(Locator::Css("form[action='/console/act']"))
            .await
            .unwrap();
        assert!(acts.is_empty(), "{page}: a read-only token sees no action");
    }
    assert_clean(&c, "the read-only pages").await;

    c.close().await.unwrap();
    driver.session = None;
    drop(driver);
    let log = s.stop().stderr;
    assert!(
        log.contains("console: token alice requeue 1 of 1 item(s): ids 1"),
        "{log}"
    );
}
