//! `spool serve --console`: a browser view of the spool (SPEC §11).
//!
//! | request | answer |
//! |---|---|
//! | `GET /console/` | the counts, the depth and delivery rate of the last hour |
//! | `GET /console/items?state=…&q=…&key=…&group=…&error=…&class=…&older=…&after=…` | one window of a set, filtered ([`crate::ops::browse`]) |
//! | `GET /console/items/{id}` | one item ([`crate::ops::show`]) |
//! | `GET /console/shape?by=…&state=…` | the shape table ([`crate::ops::shape`]) |
//! | `GET /console/clients` | the push clients ([`crate::ops::clients`]) |
//! | `GET /console/live` | the counts and sparklines as JSON, for the page's script |
//! | `GET`/`POST /console/login`, `POST /console/logout` | the session (a signed cookie) |
//! | `POST /console/act` | an action: first the confirmation with the count, then the action ([`crate::ops::top::apply`]) |
//! | `GET /console/assets/…` | the stylesheet and the script, compiled into the binary |
//!
//! **Who may do what.** With a token file, reading needs a valid token:
//! a session cookie from the login form, or `Authorization: Bearer` (for
//! scripts; such a request may read, never act). Actions need a session
//! of a token with `role=admin`, a POST, the session's CSRF token in the
//! form, and an `Origin` that is this server's own. Without a token file
//! (loopback only, [`crate::serve::ServeOptions::check`]) the console is
//! read-only. Every action goes to the server's log with the token's
//! name.
//!
//! **Bounds.** A list reads at most [`SCAN`] entries and shows at most
//! [`ROWS`]; an action takes at most [`MAX_ACTION`] items, chosen by a
//! read of at most [`ACTION_SCAN`] entries; the counts and shapes are
//! cached. Every answer carries a `Content-Security-Policy`
//! that allows scripts, styles and connections from this server only.

mod data;
mod pages;
mod session;

pub(crate) use self::data::Console;

use self::data::{on_writer, read};
use self::pages::Ctx;
use crate::ops::browse::{self, Bounds, Filter, Tab};
use crate::ops::shape::{ShapeBy, ShapeState};
use crate::ops::top::{apply, Action, Plan};
use crate::serve::auth::Grant;
use crate::serve::http::{read_body, Answer, Limit, Seen, Shared};
use crate::serve::{ConsoleAction, ServeEvent};
use crate::time::Timestamp;
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap};
use hyper::{Method, Request};
use maud::Markup;
use std::sync::Arc;

/// Rows a list shows at most.
pub const ROWS: usize = 100;

/// Entries a list reads at most.
pub const SCAN: usize = 20_000;

/// Items one action takes at most.
pub const MAX_ACTION: usize = 1_000;

/// Entries read at most to choose the items of an action on a filter.
pub const ACTION_SCAN: usize = 100_000;

/// Push clients listed at most.
const CLIENTS: usize = 500;

/// The largest form body.
const MAX_FORM: u64 = 256 << 10;

const CSS: &str = include_str!("assets/console.css");
const JS: &str = include_str!("assets/console.js");
const ICON: &str = include_str!("assets/favicon.svg");

/// Every console answer's security headers.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// Who is asking.
struct Viewer {
    /// The token, when a token file is in use.
    grant: Option<Grant>,
    /// The session cookie's value, when the request came with one.
    cookie: Option<String>,
}

impl Console {
    /// Answer a request under `/console`.
    pub(crate) async fn handle(
        &self,
        shared: &Arc<Shared>,
        req: Request<Incoming>,
        method: &Method,
        path: &str,
        seen: &mut Seen,
    ) -> Answer {
        let mut a = self.route(shared, req, method, path, seen).await;
        a.headers.extend([
            ("content-security-policy", CSP.to_string()),
            ("x-content-type-options", "nosniff".to_string()),
            ("x-frame-options", "DENY".to_string()),
            // Not `no-referrer`: with it a browser sends `Origin: null`
            // on the console's own forms, which the Origin check refuses.
            ("referrer-policy", "same-origin".to_string()),
        ]);
        a
    }

    async fn route(
        &self,
        shared: &Arc<Shared>,
        req: Request<Incoming>,
        method: &Method,
        path: &str,
        seen: &mut Seen,
    ) -> Answer {
        let get = *method == Method::GET || *method == Method::HEAD;
        let post = *method == Method::POST;
        let allowed = match path {
            "/console/login" => get || post,
            "/console/logout" | "/console/act" => post,
            _ => get,
        };
        if !allowed {
            let mut a = Answer::error(405, format!("{path} does not answer {method}"));
            a.allow = Some(match path {
                "/console/login" => "GET, HEAD, POST",
                "/console/logout" | "/console/act" => "POST",
                _ => "GET, HEAD",
            });
            return a;
        }
        match path {
            "/console" => return redirect("/console/", None),
            "/console/assets/console.css" => return asset(CSS, "text/css; charset=utf-8"),
            "/console/assets/console.js" => return asset(JS, "text/javascript; charset=utf-8"),
            "/console/assets/favicon.svg" => return asset(ICON, "image/svg+xml"),
            "/console/login" => return self.login(shared, req, post, seen).await,
            _ => {}
        }
        let viewer = match self.viewer(shared, req.headers(), seen) {
            Some(v) => v,
            None if path == "/console/live" => {
                return Answer::error(401, "log in at /console/login");
            }
            None => {
                // Back to this page after the login.
                let back = format!("{path}?{}", req.uri().query().unwrap_or(""));
                let back = back.strip_suffix('?').unwrap_or(&back);
                let next = next_page(back).filter(|_| get);
                let mut a = html(401, pages::login(None, next));
                a.note = Some("no valid session".into());
                return a;
            }
        };
        let query = req.uri().query().unwrap_or("").to_string();
        let r = match path {
            "/console/logout" => self.logout(shared, req, &viewer, seen).await,
            "/console/act" => self.act(shared, req, &viewer, seen).await,
            "/console/live" => self.live(shared).await,
            _ => self.read_page(shared, &viewer, path, &query).await,
        };
        match r {
            Ok(a) => a,
            Err(e) if path == "/console/live" => e,
            Err(e) => {
                let message = e.note.clone().unwrap_or_default();
                let counts = self.counts(shared).await;
                let ctx = counts.as_ref().ok().map(|c| self.ctx(shared, &viewer, c));
                let page = pages::error(ctx.as_ref(), e.status, &message);
                error_page(e, page)
            }
        }
    }

    fn ctx<'a>(&self, shared: &'a Shared, v: &Viewer, counts: &'a data::Counts) -> Ctx<'a> {
        let tokens = shared.tokens.as_ref();
        // A session's CSRF token: what acting (an admin) and logging out
        // need.
        let token = match (tokens, v.grant, &v.cookie) {
            (Some(t), Some(g), Some(c)) => Some(session::csrf(t, g, c)),
            _ => None,
        };
        let admin = match (tokens, v.grant) {
            (Some(t), Some(g)) => t.is_admin(g),
            _ => false,
        };
        Ctx {
            name: match (tokens, v.grant) {
                (Some(t), Some(g)) => Some(t.name(g)),
                _ => None,
            },
            csrf: token.clone().filter(|_| admin),
            logout: token,
            counts,
        }
    }

    /// The viewer of a request, or `None` when it must log in.
    fn viewer(&self, shared: &Shared, headers: &HeaderMap, seen: &mut Seen) -> Option<Viewer> {
        let Some(tokens) = &shared.tokens else {
            return Some(Viewer {
                grant: None,
                cookie: None,
            });
        };
        let now = unix_now();
        let cookie = headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find_map(|h| session::cookie(h, session::COOKIE).map(str::to_string));
        if let Some(c) = cookie {
            if let Some(g) = session::verify(tokens, &c, now) {
                seen.token = Some(tokens.name(g).to_string());
                return Some(Viewer {
                    grant: Some(g),
                    cookie: Some(c),
                });
            }
        }
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| crate::serve::auth::bearer(v.as_bytes()))?;
        let g = tokens.authenticate(bearer)?;
        seen.token = Some(tokens.name(g).to_string());
        Some(Viewer {
            grant: Some(g),
            cookie: None,
        })
    }

    /// True when the request's `Origin` is this server's own.
    fn same_origin(&self, headers: &HeaderMap) -> bool {
        let (Some(origin), Some(host)) = (headers.get(header::ORIGIN), headers.get(header::HOST))
        else {
            return false;
        };
        let scheme = if self.tls { "https://" } else { "http://" };
        let origin = origin.as_bytes();
        origin.len() == scheme.len() + host.len()
            && origin.starts_with(scheme.as_bytes())
            && origin[scheme.len()..].eq_ignore_ascii_case(host.as_bytes())
    }

    /// `GET /console/login`: the form; `POST`: check the token, set the
    /// session cookie.
    async fn login(
        &self,
        shared: &Shared,
        req: Request<Incoming>,
        post: bool,
        seen: &mut Seen,
    ) -> Answer {
        let Some(tokens) = &shared.tokens else {
            // No token file: nothing to log in to.
            return redirect("/console/", None);
        };
        if !post {
            let query = req.uri().query().unwrap_or("");
            let next = form_urlencoded::parse(query.as_bytes())
                .find(|(k, _)| k == "next")
                .map(|(_, v)| v.into_owned());
            return html(200, pages::login(None, next.as_deref().and_then(next_page)));
        }
        if !self.same_origin(req.headers()) {
            let e = forbidden_origin();
            let page = pages::error(None, 403, e.note.as_deref().unwrap_or(""));
            return error_page(e, page);
        }
        let form = match read_form(shared, req, seen).await {
            Ok(f) => f,
            Err(a) => return a,
        };
        let presented = field(&form, "token").unwrap_or("");
        let next = field(&form, "next").and_then(next_page);
        let Some(g) = tokens.authenticate(presented.trim().as_bytes()) else {
            let mut a = html(
                401,
                pages::login(Some("That token is not in the token file."), next),
            );
            a.note = Some("invalid token on the login form".into());
            return a;
        };
        seen.token = Some(tokens.name(g).to_string());
        let value = session::issue(tokens, g, unix_now());
        let cookie = format!(
            "{}={value}; Path=/console/; HttpOnly; SameSite=Strict; Max-Age={}{}",
            session::COOKIE,
            session::LIFETIME.as_secs(),
            if self.tls { "; Secure" } else { "" }
        );
        redirect(next.unwrap_or("/console/"), Some(cookie))
    }

    /// `POST /console/logout`: clear the cookie (the session itself is
    /// signed, not stored: it ends with its cookie).
    async fn logout(
        &self,
        shared: &Shared,
        req: Request<Incoming>,
        v: &Viewer,
        seen: &mut Seen,
    ) -> Result<Answer, Answer> {
        self.form(shared, req, v, seen, false).await?;
        let cookie = format!(
            "{}=; Path=/console/; HttpOnly; SameSite=Strict; Max-Age=0{}",
            session::COOKIE,
            if self.tls { "; Secure" } else { "" }
        );
        Ok(redirect("/console/login", Some(cookie)))
    }

    /// The form of a POST of a session, once its `Origin`, its session,
    /// (`act`) the token's right to act, and its CSRF token hold.
    async fn form(
        &self,
        shared: &Shared,
        req: Request<Incoming>,
        v: &Viewer,
        seen: &mut Seen,
        act: bool,
    ) -> Result<Vec<(String, String)>, Answer> {
        self.check_post(shared, req.headers(), v, act)?;
        let form = read_form(shared, req, seen).await?;
        self.check_csrf(shared, v, &form)?;
        Ok(form)
    }

    /// A POST's `Origin` and session, and (`act`) the token's right to
    /// act.
    fn check_post(
        &self,
        shared: &Shared,
        headers: &HeaderMap,
        v: &Viewer,
        act: bool,
    ) -> Result<(), Answer> {
        if !self.same_origin(headers) {
            return Err(forbidden_origin());
        }
        let Some(tokens) = &shared.tokens else {
            return Err(Answer::error(
                403,
                "the console is read-only without a token file (--token-file, with a token \
                 marked role=admin)",
            ));
        };
        let (Some(g), Some(_)) = (v.grant, &v.cookie) else {
            return Err(Answer::error(
                403,
                "actions need a session: log in at /console/login",
            ));
        };
        if act && !tokens.is_admin(g) {
            return Err(Answer::error(
                403,
                format!(
                    "the token {} may read but not act (actions need role=admin in the token \
                     file)",
                    tokens.name(g)
                ),
            ));
        }
        Ok(())
    }

    fn check_csrf(
        &self,
        shared: &Shared,
        v: &Viewer,
        form: &[(String, String)],
    ) -> Result<(), Answer> {
        let (Some(tokens), Some(g), Some(c)) = (&shared.tokens, v.grant, &v.cookie) else {
            return Err(Answer::error(403, "no session"));
        };
        if !session::csrf_holds(tokens, g, c, field(form, "csrf").unwrap_or("")) {
            return Err(Answer::error(
                403,
                "the form's CSRF token does not belong to this session; reload the page",
            ));
        }
        Ok(())
    }

    /// `GET /console/live`: the counts and sparklines for the script.
    async fn live(&self, shared: &Shared) -> Result<Answer, Answer> {
        let c = self.counts(shared).await?;
        let (depth, rate) = pages::series(&c.samples);
        let counts: serde_json::Map<String, serde_json::Value> = pages::live_counts(&c.header)
            .into_iter()
            .map(|(k, _, v)| (k.to_string(), v.into()))
            .chain([("rate".to_string(), pages::last_rate(&c.samples).into())])
            .collect();
        let body = serde_json::json!({
            "counts": counts,
            "depth_points": pages::points(&depth),
            "rate_points": pages::points(&rate),
        });
        Ok(Answer::json(200, body.to_string().into_bytes()))
    }

    /// The pages that only read.
    async fn read_page(
        &self,
        shared: &Arc<Shared>,
        v: &Viewer,
        path: &str,
        query: &str,
    ) -> Result<Answer, Answer> {
        let q: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes())
            .into_owned()
            .collect();
        let counts = self.counts(shared).await?;
        let ctx = self.ctx(shared, v, &counts);
        let now = Timestamp::now();
        let page: Markup = match path {
            "/console/" => {
                let (pending, _) = self
                    .shape(shared, ShapeBy::Error, ShapeState::Pending, false)
                    .await?;
                let (dead, _) = self
                    .shape(shared, ShapeBy::Error, ShapeState::Dead, false)
                    .await?;
                pages::overview(&ctx, &pending, &dead)
            }
            "/console/items" => {
                let tab = tab_of(&q)?;
                let filter = filter_of(&q)?;
                let after = match field(&q, "after") {
                    None | Some("") => 0,
                    Some(a) => a
                        .parse::<u64>()
                        .map_err(|_| Answer::error(400, "after: not an id"))?,
                };
                let f = filter.clone();
                let bounds = Bounds {
                    rows: ROWS,
                    scan: SCAN,
                    preview_chars: 60,
                };
                let w = read(shared, move |s| {
                    browse::window(s.queue(), tab, &f, after, bounds, now)
                })
                .await?;
                pages::items(&ctx, tab, &filter, after, &w, SCAN)
            }
            "/console/shape" => {
                let by = match field(&q, "by").unwrap_or("error") {
                    "error" => ShapeBy::Error,
                    "group" => ShapeBy::Group,
                    "attempts" => ShapeBy::Attempts,
                    "key-prefix" => ShapeBy::KeyPrefix,
                    _ => {
                        return Err(Answer::error(
                            400,
                            "by: one of error, group, attempts, key-prefix",
                        ))
                    }
                };
                let state = match tab_of(&q)? {
                    Tab::Pending => ShapeState::Pending,
                    Tab::Held => ShapeState::Held,
                    Tab::Dead => ShapeState::Dead,
                    Tab::Delivered => ShapeState::Delivered,
                };
                let (s, age) = self.shape(shared, by, state, true).await?;
                pages::shape(&ctx, &s, age)
            }
            "/console/clients" => {
                let mut all = read(shared, |s| crate::ops::clients::clients(s.queue())).await?;
                let total = all.len();
                all.truncate(CLIENTS);
                pages::clients(&ctx, &all, total, now)
            }
            p => match p.strip_prefix("/console/items/").map(str::parse::<u64>) {
                Some(Ok(id)) => {
                    let shown = read(shared, move |s| crate::ops::show::show(s.queue(), id))
                        .await
                        .map_err(|mut a| {
                            // An id in no set.
                            if a.status == 400 {
                                a.status = 404;
                            }
                            a
                        })?;
                    pages::detail(&ctx, &shown, now)
                }
                Some(Err(_)) => {
                    return Err(Answer::error(400, "an item's page is /console/items/ID"))
                }
                None => return Err(Answer::error(404, format!("no such page: {}", short(p)))),
            },
        };
        Ok(html(200, page))
    }

    /// `POST /console/act`: with `confirm` equal to the number of items,
    /// the action; without, the confirmation naming the count.
    async fn act(
        &self,
        shared: &Shared,
        req: Request<Incoming>,
        v: &Viewer,
        seen: &mut Seen,
    ) -> Result<Answer, Answer> {
        let form = self.form(shared, req, v, seen, true).await?;
        let action = match field(&form, "action").unwrap_or("") {
            "hold" => Action::Hold,
            "release" => Action::Release,
            "requeue" => Action::Requeue,
            "purge" => Action::Purge,
            "done" => Action::Done,
            _ => {
                return Err(Answer::error(
                    400,
                    "action: one of hold, release, requeue, purge, done",
                ))
            }
        };
        let tab = tab_of(&form)?;
        if !action.applies_to(tab) {
            return Err(Answer::error(
                400,
                format!("cannot {} {} items", action.verb(), tab.name()),
            ));
        }
        let now = Timestamp::now();
        let (ids, more, back) = if field(&form, "scope") == Some("filter") {
            let filter = filter_of(&form)?;
            if filter.is_empty() {
                return Err(Answer::error(
                    400,
                    "an action on the matching items needs a filter",
                ));
            }
            let back = format!("/console/items?{}", pages::list_query(tab, &filter, None));
            let (ids, more) = read(shared, move |s| {
                browse::select(s.queue(), tab, &filter, MAX_ACTION, ACTION_SCAN, now)
            })
            .await?;
            (ids, more, back)
        } else {
            let mut ids = Vec::new();
            for (k, val) in &form {
                if k == "ids" {
                    ids.push(val.parse::<u64>().map_err(|_| {
                        Answer::error(400, format!("ids: {} is not an id", short(val)))
                    })?);
                }
            }
            if ids.len() > MAX_ACTION {
                return Err(Answer::error(
                    413,
                    format!(
                        "{} items in one action; at most {MAX_ACTION} are taken at once",
                        ids.len()
                    ),
                ));
            }
            let back = match ids.as_slice() {
                [one] => format!("/console/items/{one}"),
                _ => format!("/console/items?state={}", tab.name()),
            };
            (ids, false, back)
        };
        if ids.is_empty() {
            return Err(Answer::error(400, "no item to act on"));
        }
        let counts = self.counts(shared).await?;
        let ctx = self.ctx(shared, v, &counts);
        let confirmed = field(&form, "confirm").and_then(|c| c.parse::<usize>().ok());
        if confirmed != Some(ids.len()) {
            return Ok(html(
                200,
                pages::confirm(&ctx, action, tab, &ids, more, &back),
            ));
        }
        let plan = Plan { action, ids, tab };
        let requested = plan.ids.len();
        let done = on_writer(shared, move |s| apply(s.queue(), &plan)).await?;
        let token = ctx.name.unwrap_or("");
        shared.log.log(&ServeEvent::ConsoleAction(&ConsoleAction {
            token,
            action: action.verb(),
            requested,
            changed: &done.changed,
            gone: done.gone.len(),
        }));
        Ok(html(200, pages::applied(&ctx, tab, &done)))
    }
}

/// Take a sample of the counts every [`data::SAMPLE_EVERY`] until
/// `stop`, so that the hour fills while nobody looks.
pub(crate) async fn sample(
    shared: std::sync::Arc<Shared>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let Some(console) = &shared.console else {
        return;
    };
    loop {
        // A failed read was logged; the next tick tries again.
        let _ = console.counts(&shared).await;
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(data::SAMPLE_EVERY) => {}
        }
    }
}

/// The `state` field (default: pending).
fn tab_of(q: &[(String, String)]) -> Result<Tab, Answer> {
    match field(q, "state") {
        None | Some("") => Ok(Tab::Pending),
        Some(s) => Tab::parse(s)
            .ok_or_else(|| Answer::error(400, "state: one of pending, held, dead, delivered")),
    }
}

/// The filter fields `q`, `key`, `group`, `error`, `class`, `older`.
fn filter_of(q: &[(String, String)]) -> Result<Filter, Answer> {
    let text = |name: &str| field(q, name).unwrap_or("").trim().to_string();
    let older_than = match field(q, "older").map(str::trim) {
        None | Some("") => None,
        Some(d) => Some(
            crate::units::parse_duration(d)
                .map_err(|e| Answer::error(400, format!("older: {e}")))?,
        ),
    };
    Ok(Filter {
        text: text("q"),
        key: text("key"),
        group: text("group"),
        error: text("error"),
        class: text("class"),
        older_than,
    })
}

/// The first value of field `name`.
fn field<'a>(q: &'a [(String, String)], name: &str) -> Option<&'a str> {
    q.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// A form body (`application/x-www-form-urlencoded`), at most
/// [`MAX_FORM`] bytes.
async fn read_form(
    shared: &Shared,
    req: Request<Incoming>,
    seen: &mut Seen,
) -> Result<Vec<(String, String)>, Answer> {
    let limit = Limit {
        bytes: MAX_FORM.min(shared.max_body),
        what: "form",
        flag: "a console form",
    };
    let body = read_body(shared, req, &limit, seen).await?;
    Ok(form_urlencoded::parse(&body).into_owned().collect())
}

fn html(status: u16, page: Markup) -> Answer {
    let mut a = Answer::json(status, page.into_string().into_bytes());
    a.content_type = "text/html; charset=utf-8";
    a
}

/// The error answer `e` rendered as `page`: its status, its note for the
/// access log and its `Retry-After` kept.
fn error_page(e: Answer, page: Markup) -> Answer {
    let mut a = html(e.status, page);
    let retry = e.retries();
    a.note = e.note;
    if retry {
        a = a.retry();
    }
    a
}

fn asset(body: &'static str, content_type: &'static str) -> Answer {
    let mut a = Answer::json(200, body.as_bytes().to_vec());
    a.content_type = content_type;
    a
}

/// `to` when it is a console page a login may go back to: a path (and
/// query) under `/console/` of visible ASCII, at most 2 KiB, other than
/// the login, logout, action and live answers. Anything else (another
/// site, a header's line break) is refused, and the login goes to the
/// overview.
fn next_page(to: &str) -> Option<&str> {
    let ok = to.starts_with("/console/")
        && to.len() <= 2048
        && to.bytes().all(|b| b.is_ascii_graphic() && b != b'\\')
        && ![
            "/console/login",
            "/console/logout",
            "/console/act",
            "/console/live",
        ]
        .iter()
        .any(|p| to.starts_with(p));
    ok.then_some(to)
}

fn redirect(to: &str, cookie: Option<String>) -> Answer {
    let mut a = Answer::json(303, Vec::new());
    a.content_type = "text/plain; charset=utf-8";
    a.headers.push(("location", to.to_string()));
    if let Some(c) = cookie {
        a.headers.push(("set-cookie", c));
    }
    a
}

fn forbidden_origin() -> Answer {
    Answer::error(
        403,
        "the request's Origin is not this server (a form posted from another site?)",
    )
}

fn short(s: &str) -> String {
    s.chars().take(80).collect()
}

/// Now, in Unix seconds, for session expiry.
fn unix_now() -> u64 {
    u64::try_from(Timestamp::now().as_secs()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_login_goes_back_only_to_a_console_page() {
        for ok in [
            "/console/",
            "/console/items?state=dead&q=a%20b",
            "/console/items/7",
        ] {
            assert_eq!(next_page(ok), Some(ok));
        }
        let long = format!("/console/items?q={}", "a".repeat(2048));
        for bad in [
            "",
            "/",
            "/console",
            "//evil.example/console/",
            "https://evil.example/console/",
            "/consolex/",
            "/console/login",
            "/console/logout",
            "/console/act",
            "/console/live",
            "/console/items?q=a b",
            "/console/items\r\nSet-Cookie: x=1",
            "/console/\\evil.example",
            "/console/é",
            long.as_str(),
        ] {
            assert_eq!(next_page(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn an_error_page_keeps_the_status_the_note_and_retry_after() {
        let e = Answer::error(503, "busy").retry();
        let a = error_page(e, pages::error(None, 503, "busy"));
        assert_eq!(a.status, 503);
        assert!(a.retries());
        assert_eq!(a.note.as_deref(), Some("busy"));
        assert_eq!(a.content_type, "text/html; charset=utf-8");
        let a = error_page(Answer::error(400, "bad"), pages::error(None, 400, "bad"));
        assert!(!a.retries());
    }
}
