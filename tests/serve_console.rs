//! `spool serve --console` over HTTP, without a browser: every page on
//! every backend, logging in, the session cookie, the CSRF and `Origin`
//! checks, the admin role, the confirmation and the bulk limit, escaping
//! and the security headers. The browser tests are in
//! `tests/console_browser.rs`.

mod cli_common;
mod serve_common;
mod tls_pki;

use cli_common::*;
use serve_common::*;
use spool::OpenMode;

const ADMIN: &str = "admin-token-0123456789abc";
const READER: &str = "read-token-0123456789abcd";

/// A client that shows redirects instead of following them (the login's
/// cookie comes with a 303).
fn client() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_global(Some(DEADLINE))
        .build()
        .into()
}

/// A token file with an admin (`alice`) and a read-only token (`bob`).
fn tokens(env: &Env) -> String {
    let f = write_file(
        env.dir.path(),
        "tokens",
        &format!("{ADMIN} name=alice role=admin\n{READER} name=bob\n"),
    );
    f.to_string_lossy().into_owned()
}

/// Log in with `token`: the session cookie (`spool_session=…`).
fn login(s: &Serve, token: &str) -> String {
    let r = post(
        &client(),
        &s.url("/console/login"),
        &[
            ("Origin", s.base.as_str()),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ],
        format!("token={token}").as_bytes(),
    );
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!(r.header("location"), Some("/console/"));
    let set = r
        .header("set-cookie")
        .expect("a session cookie")
        .to_string();
    set.split(';').next().unwrap().to_string()
}

fn page(s: &Serve, cookie: &str, path: &str) -> Reply {
    get(&client(), &s.url(path), &[("Cookie", cookie)])
}

/// The value of the first hidden `csrf` field of a page.
fn csrf_of(body: &str) -> String {
    let at = body.find("name=\"csrf\" value=\"").expect("a CSRF field") + 19;
    body[at..].split('"').next().unwrap().to_string()
}

fn act(s: &Serve, cookie: &str, origin: Option<&str>, form: &str) -> Reply {
    let mut headers = vec![
        ("Cookie", cookie),
        ("Content-Type", "application/x-www-form-urlencoded"),
    ];
    if let Some(o) = origin {
        headers.push(("Origin", o));
    }
    post(&client(), &s.url("/console/act"), &headers, form.as_bytes())
}

/// `n` items with keys `order-1…`, the first `dead` of them dead letters
/// with an HTTP 503 error.
fn prepare(env: &Env, n: u64, dead: u64) {
    let spool = env.lib(OpenMode::Create);
    for i in 1..=n {
        spool
            .enqueue(format!("payload {i}").as_bytes(), &format!("order-{i}"))
            .unwrap();
    }
    for id in 1..=dead {
        spool
            .dead_letter(id, "HTTP 503 Service Unavailable")
            .unwrap();
    }
}

/// Every entry of every set, as `list --json` shows them.
fn states(env: &Env) -> Vec<String> {
    ["pending", "held", "dead", "delivered"]
        .iter()
        .map(|st| stdout(&env.run(&["list", "--state", st, "--json"]).success()))
        .collect()
}

fn count(env: &Env, state: &str) -> usize {
    let a = env.run(&["list", "--state", state, "--json"]).success();
    ndjson(&a.get_output().stdout).len()
}

#[test]
fn every_page_answers_on_an_empty_and_a_full_spool_on_every_backend() {
    each_backend_and_postgres("the console's pages", |env| {
        env.run(&["init"]).success();
        let s = Serve::start(env, &["--console"]);
        let a = client();
        // Empty: every page, read-only without a token file.
        for path in [
            "/console/",
            "/console/items",
            "/console/items?state=held",
            "/console/items?state=dead",
            "/console/items?state=delivered",
            "/console/shape",
            "/console/shape?by=key-prefix&state=dead",
            "/console/clients",
        ] {
            let r = get(&a, &s.url(path), &[]);
            assert_eq!(r.status, 200, "{path}: {}", r.body);
            assert!(r.body.starts_with("<!DOCTYPE html>"), "{path}");
            assert!(r.body.contains("read-only (no token file)"), "{path}");
            assert!(!r.body.contains("/console/act"), "{path}: no action");
        }
        assert_eq!(get(&a, &s.url("/console/items/1"), &[]).status, 404);
        assert_eq!(get(&a, &s.url("/console/nothing"), &[]).status, 404);
        assert_eq!(get(&a, &s.url("/console/items?state=x"), &[]).status, 400);
        assert_eq!(get(&a, &s.url("/console/items?older=x"), &[]).status, 400);
        let live = get(&a, &s.url("/console/live"), &[]).json();
        assert_eq!(live["counts"]["depth"], "0");
        // Read-only: an action is refused, and changes nothing.
        let r = act(
            &s,
            "",
            Some(&s.base),
            "action=hold&state=pending&ids=1&confirm=1",
        );
        assert_eq!(r.status, 403, "{}", r.body);
        assert!(
            r.body.contains("read-only without a token file"),
            "{}",
            r.body
        );

        // Full: the counts, the lists, a detail page, the shape (on a
        // new server: a shape is kept for 5 seconds).
        s.stop();
        prepare(env, 30, 4);
        let s = Serve::start(env, &["--console"]);
        let r = get(&a, &s.url("/console/"), &[]);
        eventually_contains(&s, "", "/console/live", "\"dead\":\"4\"");
        assert_eq!(r.status, 200);
        let r = get(&a, &s.url("/console/items?state=dead&error=503"), &[]);
        for id in 1..=4 {
            assert!(
                r.body.contains(&format!("href=\"/console/items/{id}\"")),
                "{}",
                r.body
            );
        }
        let r = get(&a, &s.url("/console/items?state=pending&key=order-2"), &[]);
        // order-2, order-20…29 (order-2x pending, 2 is dead).
        assert_eq!(r.body.matches("<tr><td>").count(), 10, "{}", r.body);
        let r = get(&a, &s.url("/console/items/7"), &[]);
        assert!(r.body.contains("payload 7") && r.body.contains("order-7"));
        let r = get(&a, &s.url("/console/shape?state=dead"), &[]);
        assert!(r.body.contains("HTTP 503"), "{}", r.body);
        // The class links to the list filtered by it.
        assert!(r.body.contains("class=HTTP+503"), "{}", r.body);
        let r = get(&a, &s.url("/console/items?state=dead&class=HTTP+503"), &[]);
        assert_eq!(r.body.matches("<tr><td>").count(), 4);
        s.stop();
    });
}

/// Poll `path` until its body contains `needle` (the counts are cached
/// for a second).
fn eventually_contains(s: &Serve, cookie: &str, path: &str, needle: &str) {
    let start = std::time::Instant::now();
    loop {
        let r = page(s, cookie, path);
        if r.body.contains(needle) {
            return;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "{path} never showed {needle}: {}",
            r.body
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn reading_needs_a_token_and_a_session_is_a_signed_cookie() {
    let env = Env::new("spool.db");
    prepare(&env, 3, 0);
    let t = tokens(&env);
    let s = Serve::start(&env, &["--console", "--token-file", &t]);
    // No token: 401 with the login form, on every page.
    for path in ["/console/", "/console/items?state=dead", "/console/items/1"] {
        let r = get(&client(), &s.url(path), &[]);
        assert_eq!(r.status, 401, "{path}");
        assert!(r.body.contains("action=\"/console/login\""), "{path}");
        assert!(!r.body.contains("payload 1"), "{path}");
    }
    assert_eq!(get(&client(), &s.url("/console/live"), &[]).status, 401);
    // The assets need no session (the login page uses them).
    let css = get(&client(), &s.url("/console/assets/console.css"), &[]);
    assert_eq!(
        (css.status, css.header("content-type")),
        (200, Some("text/css; charset=utf-8"))
    );
    // A wrong token: 401 again; a login posted from another origin: 403.
    let form = [
        ("Origin", s.base.as_str()),
        ("Content-Type", "application/x-www-form-urlencoded"),
    ];
    let r = post(
        &client(),
        &s.url("/console/login"),
        &form,
        b"token=wrong-token-0123456789",
    );
    assert_eq!(r.status, 401);
    assert!(r.body.contains("not in the token file"));
    let r = post(
        &client(),
        &s.url("/console/login"),
        &[("Origin", "http://evil.example")],
        format!("token={READER}").as_bytes(),
    );
    assert_eq!(r.status, 403);
    // The cookie's attributes.
    let r = post(
        &client(),
        &s.url("/console/login"),
        &form,
        format!("token={READER}").as_bytes(),
    );
    let set = r.header("set-cookie").unwrap();
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/console/", "Max-Age="] {
        assert!(set.contains(attr), "{set}");
    }
    assert!(!set.contains("Secure"), "plain HTTP: {set}");
    assert!(
        !set.contains(READER),
        "the token is never in the cookie: {set}"
    );
    // The login goes back to the page that asked for it: a console page,
    // never another site, nor an answer that is not a page.
    let r = get(&client(), &s.url("/console/items?state=dead&q=a"), &[]);
    assert!(
        r.body
            .contains("name=\"next\" value=\"/console/items?state=dead&amp;q=a\""),
        "{}",
        r.body
    );
    let r = get(
        &client(),
        &s.url("/console/login?next=%2Fconsole%2Fshape"),
        &[],
    );
    assert!(r.body.contains("name=\"next\" value=\"/console/shape\""));
    for (next, to) in [
        (
            "%2Fconsole%2Fitems%3Fstate%3Ddead%26q%3Da",
            "/console/items?state=dead&q=a",
        ),
        ("https%3A%2F%2Fevil.example%2F", "/console/"),
        ("%2F%2Fevil.example%2Fconsole%2F", "/console/"),
        ("%2Fconsole%2Flive", "/console/"),
        ("%2Fconsole%2Fitems%0D%0ASet-Cookie%3A%20x%3D1", "/console/"),
    ] {
        let r = post(
            &client(),
            &s.url("/console/login"),
            &form,
            format!("token={READER}&next={next}").as_bytes(),
        );
        assert_eq!((r.status, r.header("location")), (303, Some(to)), "{next}");
    }
    // A wrong token keeps where to go back to.
    let r = post(
        &client(),
        &s.url("/console/login"),
        &form,
        b"token=wrong-token-0123456789&next=%2Fconsole%2Fclients",
    );
    assert_eq!(r.status, 401);
    assert!(r.body.contains("name=\"next\" value=\"/console/clients\""));
    let cookie = login(&s, READER);
    let r = page(&s, &cookie, "/console/");
    assert_eq!(r.status, 200);
    assert!(r.body.contains("bob") && r.body.contains("read-only"));
    // Security headers, on every answer.
    let csp = r.header("content-security-policy").unwrap();
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    assert!(csp.contains("default-src 'none'") && csp.contains("frame-ancestors 'none'"));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    // No inline script: every script element loads from the server.
    for tag in r.body.match_indices("<script").map(|(i, _)| &r.body[i..]) {
        assert!(tag.starts_with("<script src=\"/console/assets/"), "{tag}");
    }
    // A forged or expired-looking cookie is no session.
    let forged = cookie.replace('.', "x.");
    assert_eq!(page(&s, &forged, "/console/").status, 401);
    // A bearer token reads too (scripts), and never acts.
    let r = get(
        &client(),
        &s.url("/console/items"),
        &[("Authorization", &format!("Bearer {ADMIN}"))],
    );
    assert_eq!(r.status, 200);
    assert!(!r.body.contains("/console/act"));
    // Another server reading the same token file accepts the session:
    // no sticky sessions.
    let other = Serve::start(&env, &["--console", "--token-file", &t]);
    assert_eq!(page(&other, &cookie, "/console/").status, 200);
    // Logging out clears the cookie.
    let r = post(
        &client(),
        &s.url("/console/logout"),
        &[("Cookie", cookie.as_str()), ("Origin", s.base.as_str())],
        format!("csrf={}", csrf_of(&page(&s, &cookie, "/console/").body)).as_bytes(),
    );
    assert_eq!(r.status, 303);
    assert!(r.header("set-cookie").unwrap().contains("Max-Age=0"));
    other.stop();
    let stopped = s.stop();
    assert!(!stopped.stderr.contains(READER) && !stopped.stderr.contains(ADMIN));
}

#[test]
fn actions_need_an_admin_session_csrf_origin_and_a_confirmed_count() {
    let env = Env::new("spool.db");
    prepare(&env, 10, 6);
    let t = tokens(&env);
    let s = Serve::start(&env, &["--console", "--token-file", &t, "-v"]);
    let before = states(&env);

    // A read-only token's session sees no action, and its forged POST is
    // refused even with its own CSRF token.
    let bob = login(&s, READER);
    let r = page(&s, &bob, "/console/items?state=dead&error=503");
    assert!(!r.body.contains("/console/act"), "{}", r.body);
    let r = page(&s, &bob, "/console/items/1");
    assert!(!r.body.contains("/console/act"));
    let bob_csrf = csrf_of(&r.body);
    let r = act(
        &s,
        &bob,
        Some(&s.base),
        &format!("csrf={bob_csrf}&action=requeue&state=dead&ids=1&confirm=1"),
    );
    assert_eq!(r.status, 403);
    assert!(r.body.contains("role=admin"), "{}", r.body);

    let alice = login(&s, ADMIN);
    let list = page(&s, &alice, "/console/items?state=dead&error=503");
    assert!(list.body.contains("Requeue all"), "{}", list.body);
    let csrf = csrf_of(&list.body);
    // Forged: no CSRF token, a wrong one, another origin, no origin.
    for (origin, form) in [
        (
            Some(s.base.as_str()),
            "action=requeue&state=dead&ids=1&confirm=1".to_string(),
        ),
        (
            Some(s.base.as_str()),
            "csrf=00&action=requeue&state=dead&ids=1&confirm=1".to_string(),
        ),
        (
            Some("http://evil.example"),
            format!("csrf={csrf}&action=requeue&state=dead&ids=1&confirm=1"),
        ),
        (
            None,
            format!("csrf={csrf}&action=requeue&state=dead&ids=1&confirm=1"),
        ),
    ] {
        let r = act(&s, &alice, origin, &form);
        assert_eq!(r.status, 403, "{origin:?} {form}: {}", r.body);
    }
    // Bad requests: an action that does not apply, no item, too many.
    let r = act(
        &s,
        &alice,
        Some(&s.base),
        &format!("csrf={csrf}&action=hold&state=dead&ids=1"),
    );
    assert_eq!(r.status, 400);
    let r = act(
        &s,
        &alice,
        Some(&s.base),
        &format!("csrf={csrf}&action=requeue&state=dead"),
    );
    assert_eq!(r.status, 400);
    let many: String = (1..=1001).map(|i| format!("&ids={i}")).collect();
    let r = act(
        &s,
        &alice,
        Some(&s.base),
        &format!("csrf={csrf}&action=requeue&state=dead{many}"),
    );
    assert_eq!(r.status, 413, "{}", r.body);
    assert_eq!(states(&env), before, "nothing changed");

    // The filtered set: first the confirmation with the count.
    let r = act(
        &s,
        &alice,
        Some(&s.base),
        &format!("csrf={csrf}&action=requeue&state=dead&scope=filter&error=503"),
    );
    assert_eq!(r.status, 200);
    assert!(
        r.body
            .contains("Requeue <span id=\"confirm-count\">6</span> dead letters?"),
        "{}",
        r.body
    );
    assert_eq!(states(&env), before, "a confirmation changes nothing");
    // A count that is not the number of items asks again.
    let r = act(
        &s,
        &alice,
        Some(&s.base),
        &format!("csrf={csrf}&action=requeue&state=dead&ids=1&ids=2&confirm=1"),
    );
    assert!(r.body.contains("confirm-count\">2<"), "{}", r.body);
    assert_eq!(states(&env), before);
    // Confirmed: done, through the library, and logged with the name.
    let r = act(
        &s,
        &alice,
        Some(&s.base),
        &format!("csrf={csrf}&action=requeue&state=dead&ids=1&ids=2&confirm=2"),
    );
    assert_eq!(r.status, 200);
    assert!(r.body.contains("requeued 2 items"), "{}", r.body);
    assert_eq!(count(&env, "dead"), 4);
    let r = act(
        &s,
        &alice,
        Some(&s.base),
        &format!("csrf={csrf}&action=purge&state=dead&ids=3&ids=99&confirm=2"),
    );
    assert!(r.body.contains("purged 1 item (1 was gone)"), "{}", r.body);
    let r = act(
        &s,
        &alice,
        Some(&s.base),
        &format!("csrf={csrf}&action=hold&state=pending&ids=7&confirm=1"),
    );
    assert!(r.body.contains("held 1 item"), "{}", r.body);
    assert_eq!(count(&env, "held"), 1);
    let r = act(
        &s,
        &alice,
        Some(&s.base),
        &format!("csrf={csrf}&action=release&state=held&ids=7&confirm=1"),
    );
    assert!(r.body.contains("released 1 item"), "{}", r.body);
    let r = act(
        &s,
        &alice,
        Some(&s.base),
        &format!("csrf={csrf}&action=done&state=pending&ids=8&confirm=1"),
    );
    assert!(r.body.contains("marked done 1 item"), "{}", r.body);
    assert_eq!(count(&env, "pending"), 5);
    let log = s.stop().stderr;
    assert!(
        log.contains("console: token alice requeue 2 of 2 item(s): ids 1,2"),
        "{log}"
    );
    assert!(
        log.contains("console: token alice purge 1 of 2 item(s) (1 gone)"),
        "{log}"
    );
}

#[test]
fn an_action_on_a_filter_takes_at_most_a_thousand_items() {
    let env = Env::new("spool.db");
    prepare(&env, 1_200, 1_200);
    let t = tokens(&env);
    let s = Serve::start(&env, &["--console", "--token-file", &t]);
    let alice = login(&s, ADMIN);
    let csrf = csrf_of(&page(&s, &alice, "/console/").body);
    let r = act(
        &s,
        &alice,
        Some(&s.base),
        &format!("csrf={csrf}&action=purge&state=dead&scope=filter&key=order-"),
    );
    assert!(
        r.body.contains("confirm-count\">1000<"),
        "{}",
        &r.body[..2000.min(r.body.len())]
    );
    assert!(r.body.contains("More items match"));
    // An empty filter is refused: a bulk action never takes everything
    // unseen.
    let r = act(
        &s,
        &alice,
        Some(&s.base),
        &format!("csrf={csrf}&action=purge&state=dead&scope=filter"),
    );
    assert_eq!(r.status, 400);
    s.stop();
}

#[test]
fn payloads_keys_and_errors_are_escaped() {
    let env = Env::new("spool.ndjson");
    let spool = env.lib(OpenMode::Create);
    let evil = "<script>alert(1)</script>\"><img src=x onerror=alert(2)>";
    let id = spool
        .enqueue(evil.as_bytes(), "\"><img onerror=alert(3)>")
        .unwrap()
        .id;
    spool.dead_letter(id, "<b>bold</b> \u{1b}[31m").unwrap();
    drop(spool);
    let s = Serve::start(&env, &["--console"]);
    for path in [
        "/console/items?state=dead",
        &format!("/console/items/{id}"),
        "/console/shape?state=dead",
    ] {
        let r = get(&client(), &s.url(path), &[]);
        assert_eq!(r.status, 200, "{path}");
        for raw in ["<script>alert", "<img", "<b>bold", "\u{1b}"] {
            assert!(!r.body.contains(raw), "{path} holds {raw:?} raw");
        }
    }
    let r = get(&client(), &s.url(&format!("/console/items/{id}")), &[]);
    assert!(
        r.body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{}",
        r.body
    );
    assert!(
        r.body.contains("\\u001b[31m"),
        "control characters are shown escaped"
    );
    s.stop();
}

#[test]
fn a_list_reads_a_bounded_window_of_a_large_spool() {
    let env = Env::new("spool.db");
    prepare(&env, 25_000, 0);
    let s = Serve::start(&env, &["--console"]);
    // A filter that matches nothing reads at most 20,000 entries and
    // offers to go on from there.
    let r = get(
        &client(),
        &s.url("/console/items?key=nothing-like-this"),
        &[],
    );
    assert_eq!(r.status, 200);
    assert!(r.body.contains("read 20000 entries"), "{}", r.body);
    assert!(r.body.contains("after=20000"), "{}", r.body);
    let r = get(
        &client(),
        &s.url("/console/items?key=nothing-like-this&after=20000"),
        &[],
    );
    assert!(r.body.contains("No matching item"), "{}", r.body);
    assert!(!r.body.contains("Next"), "the end of the set");
    // The first page holds 100 rows and a link to the next.
    let r = get(&client(), &s.url("/console/items"), &[]);
    assert_eq!(r.body.matches("<tr><td>").count(), 100);
    assert!(
        r.body.contains("after=100\""),
        "{}",
        &r.body[r.body.len() - 600..]
    );
    s.stop();
}

#[test]
fn the_console_without_tokens_is_refused_off_loopback() {
    let env = Env::new("spool.db");
    env.run(&[
        "serve",
        "--console",
        "--listen",
        "0.0.0.0:0",
        "--insecure-no-auth",
    ])
    .code(64)
    .stderr(predicates::str::contains("console"));
    assert!(!env.path.exists(), "nothing created");
    let bad = write_file(env.dir.path(), "bad", &format!("{ADMIN} role=root\n"));
    let a = env
        .run(&["serve", "--console", "--token-file", bad.to_str().unwrap()])
        .failure();
    assert!(stderr(&a).contains("role=admin"), "{}", stderr(&a));
}

#[test]
fn over_tls_the_session_cookie_is_secure() {
    let env = Env::new("spool.db");
    let ca = tls_pki::Ca::new("console ca");
    let cert = ca.server(&["localhost", "127.0.0.1"]);
    let cert_file = write_file(env.dir.path(), "cert.pem", &cert.pem);
    let key_file = write_file(env.dir.path(), "key.pem", &cert.key_pem());
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let ca_file = write_file(env.dir.path(), "ca.pem", &ca.pem);
    let t = tokens(&env);
    let s = Serve::start(
        &env,
        &[
            "--console",
            "--token-file",
            &t,
            "--tls-cert",
            cert_file.to_str().unwrap(),
            "--tls-key",
            key_file.to_str().unwrap(),
        ],
    );
    let a = spool::tls::TlsTrust::with_cacert(&ca_file)
        .load()
        .unwrap()
        .ureq_agent(
            ureq::Agent::config_builder()
                .http_status_as_error(false)
                .max_redirects(0)
                .build(),
        );
    // The origin of a TLS server is https://.
    let http_origin = s.base.replace("https://", "http://");
    let form = |origin: &str| {
        post(
            &a,
            &s.url("/console/login"),
            &[("Origin", origin)],
            format!("token={ADMIN}").as_bytes(),
        )
    };
    assert_eq!(form(&http_origin).status, 403);
    let r = form(&s.base);
    assert_eq!(r.status, 303, "{}", r.body);
    let set = r.header("set-cookie").unwrap();
    assert!(
        set.contains("; Secure") && set.contains("HttpOnly"),
        "{set}"
    );
    s.stop();
}

#[test]
fn several_servers_over_one_postgresql_spool_share_sessions() {
    let Some(env) = pg_env("the console over several PostgreSQL receivers") else {
        return;
    };
    prepare(&env, 5, 3);
    let t = tokens(&env);
    let one = Serve::start(&env, &["--console", "--token-file", &t, "-v"]);
    let two = Serve::start(&env, &["--console", "--token-file", &t, "-v"]);
    // Logged in on one, acting on the other: no sticky sessions.
    let alice = login(&one, ADMIN);
    let r = page(&two, &alice, "/console/items?state=dead");
    assert_eq!(r.status, 200);
    assert!(
        r.body.contains("leased"),
        "PostgreSQL shows leases: {}",
        r.body
    );
    let csrf = csrf_of(&r.body);
    let r = act(
        &two,
        &alice,
        Some(&two.base),
        &format!("csrf={csrf}&action=requeue&state=dead&ids=2&confirm=1"),
    );
    assert!(r.body.contains("requeued 1 item"), "{}", r.body);
    // The other server sees it.
    eventually_contains(&one, &alice, "/console/live", "\"dead\":\"2\"");
    one.stop();
    assert!(two
        .stop()
        .stderr
        .contains("console: token alice requeue 1 of 1 item(s): ids 2"));
}
