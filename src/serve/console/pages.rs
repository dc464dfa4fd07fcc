//! The console's pages: server-rendered HTML ([`maud`] escapes every
//! value it interpolates; payloads, keys and errors are escaped once
//! more by [`crate::ops::preview`] so that control characters show as
//! `\n`, `\u001b`…). No inline script or style: one stylesheet and one
//! script, both served from the binary.

use super::data::Counts;
use crate::item::ClientSummary;
use crate::ops::browse::{Filter, Tab, Window};
use crate::ops::list::RetryState;
use crate::ops::preview;
use crate::ops::shape::{Shape, ShapeBy, ShapeState};
use crate::ops::show::Shown;
use crate::ops::top::{Action, Applied, Header, Sample};
use crate::time::Timestamp;
use crate::units::format_duration;
use maud::{html, Markup, DOCTYPE};
use std::time::Duration;

/// Who is looking, as the pages need it.
pub(crate) struct Ctx<'a> {
    /// The token's name (`None`: no token file, read-only).
    pub(crate) name: Option<&'a str>,
    /// The session's CSRF token, when the viewer may act.
    pub(crate) csrf: Option<String>,
    /// The session's CSRF token, when there is a session (logging out
    /// needs it).
    pub(crate) logout: Option<String>,
    pub(crate) counts: &'a Counts,
}

impl Ctx<'_> {
    fn may_act(&self) -> bool {
        self.csrf.is_some()
    }
}

/// The counts the header bar shows, by the `data-live` name the script
/// updates them by.
pub(crate) fn live_counts(h: &Header) -> Vec<(&'static str, &'static str, String)> {
    let mut v = vec![
        ("depth", "depth", h.depth.to_string()),
        ("pending", "pending", h.count(Tab::Pending).to_string()),
        ("held", "held", h.held.to_string()),
        ("dead", "dead", h.dead_letters.to_string()),
        ("delivered", "retained", h.retained.to_string()),
        ("in_flight", "in flight", h.in_flight.to_string()),
    ];
    if let Some(l) = h.leased {
        v.push(("leased", "leased", l.to_string()));
    }
    v.push((
        "oldest",
        "oldest",
        h.oldest_age.map_or("-".into(), format_duration),
    ));
    v.push(("watermark", "push watermark", h.push_watermark.to_string()));
    v
}

/// The points of a sparkline of `values` in a 300×40 box.
pub(crate) fn points(values: &[f64]) -> String {
    if let [one] = values {
        // One sample: a level line.
        return points(&[*one, *one]);
    }
    let max = values.iter().copied().fold(0.0f64, f64::max).max(1.0);
    let n = values.len().max(2) - 1;
    values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            format!(
                "{:.1},{:.1}",
                i as f64 * 300.0 / n as f64,
                40.0 - v / max * 38.0
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The depth and rate series of `samples`.
pub(crate) fn series(samples: &[Sample]) -> (Vec<f64>, Vec<f64>) {
    (
        samples.iter().map(|s| s.depth as f64).collect(),
        samples.iter().filter_map(|s| s.rate).collect(),
    )
}

/// The rate of the last sample, for people.
pub(crate) fn last_rate(samples: &[Sample]) -> String {
    samples
        .iter()
        .rev()
        .find_map(|s| s.rate)
        .map_or("-".into(), |r| format!("{r:.1}/s"))
}

fn page(ctx: Option<&Ctx>, title: &str, active: &str, content: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · spool" }
                link rel="icon" href="/console/assets/favicon.svg";
                link rel="stylesheet" href="/console/assets/console.css";
                script src="/console/assets/console.js" defer {}
            }
            body {
                header.top {
                    a.brand href="/console/" { "spool" }
                    @if let Some(ctx) = ctx {
                        nav {
                            a.on[active == "overview"] href="/console/" { "Overview" }
                            @for tab in Tab::ALL {
                                a.on[active == tab.name()] href={ "/console/items?state=" (tab.name()) } {
                                    (title_case(tab.name()))
                                    " " span.count data-live=(live_name(tab)) { (ctx.counts.header.count(tab)) }
                                }
                            }
                            a.on[active == "shape"] href="/console/shape" { "Shape" }
                            a.on[active == "clients"] href="/console/clients" { "Clients" }
                        }
                        div.who {
                            @match ctx.name {
                                Some(n) => { span { (n) } @if !ctx.may_act() { " " span.badge { "read-only" } } }
                                None => { span.badge { "read-only (no token file)" } }
                            }
                            @if let Some(token) = &ctx.logout {
                                form.inline method="post" action="/console/logout" {
                                    input type="hidden" name="csrf" value=(token);
                                    button type="submit" { "Log out" }
                                }
                            }
                        }
                    }
                }
                @if let Some(ctx) = ctx {
                    section.counts {
                        @for (key, label, value) in live_counts(&ctx.counts.header) {
                            div.stat { span.label { (label) } " " span.value data-live=(key) { (value) } }
                        }
                        div.stat { span.label { "rate" } " " span.value data-live="rate" { (last_rate(&ctx.counts.samples)) } }
                    }
                }
                main { (content) }
            }
        }
    }
}

fn live_name(tab: Tab) -> &'static str {
    match tab {
        Tab::Pending => "pending",
        Tab::Held => "held",
        Tab::Dead => "dead",
        Tab::Delivered => "delivered",
    }
}

fn title_case(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

/// The login form; `next`, the page to go back to after it.
pub(crate) fn login(error: Option<&str>, next: Option<&str>) -> Markup {
    page(
        None,
        "Log in",
        "",
        html! {
            h1 { "Log in" }
            p { "Paste a token from the server's token file. The browser keeps a session cookie; the token itself is not stored." }
            @if let Some(e) = error { p.error { (e) } }
            form.login method="post" action="/console/login" {
                label for="token" { "Token" }
                input #token type="password" name="token" autocomplete="off" required autofocus;
                @if let Some(n) = next { input type="hidden" name="next" value=(n); }
                button type="submit" { "Log in" }
            }
        },
    )
}

/// A page that says what went wrong.
pub(crate) fn error(ctx: Option<&Ctx>, status: u16, message: &str) -> Markup {
    page(
        ctx,
        "Error",
        "",
        html! {
            h1 { "Error " (status) }
            p.error { (message) }
            p { a href="/console/" { "Back to the overview" } }
        },
    )
}

/// The overview: counts, the hour's sparklines, where to look next.
pub(crate) fn overview(ctx: &Ctx, pending: &Shape, dead: &Shape) -> Markup {
    let (depth, rate) = series(&ctx.counts.samples);
    let h = &ctx.counts.header;
    page(
        Some(ctx),
        "Overview",
        "overview",
        html! {
            h1 { "Overview" }
            p.where { (h.backend) " spool " code { (h.location) } }
            div.sparks {
                figure {
                    figcaption { "Depth, last hour" }
                    svg viewBox="0 0 300 40" preserveAspectRatio="none" role="img" aria-label="depth over the last hour" {
                        polyline #depth-spark points=(points(&depth)) {}
                    }
                }
                figure {
                    figcaption { "Delivered per second, last hour" }
                    svg viewBox="0 0 300 40" preserveAspectRatio="none" role="img" aria-label="delivery rate over the last hour" {
                        polyline #rate-spark points=(points(&rate)) {}
                    }
                }
            }
            p.note { "One sample every 10 seconds, kept in memory since this server started; the counts above update every second." }
            p.note { "The tables below are recomputed in the background at most every 5 seconds." }
            h2 { "Pending items by error" }
            (shape_table(pending))
            h2 { "Dead letters by error" }
            (shape_table(dead))
            ul.links {
                li { a href="/console/shape?by=error&state=pending" { "Why are items pending? (shape by error)" } }
                li { a href="/console/shape?by=error&state=dead" { "Why did items die? (dead letters by error)" } }
                li { a href="/console/items?state=dead" { "Dead letters" } }
                li { a href="/console/clients" { "Push clients" } }
            }
        },
    )
}

/// The query string of a list with `filter` (and `after`), for links.
pub(crate) fn list_query(tab: Tab, filter: &Filter, after: Option<u64>) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    q.append_pair("state", tab.name());
    for (k, v) in filter_fields(filter) {
        if !v.is_empty() {
            q.append_pair(k, &v);
        }
    }
    if let Some(a) = after {
        q.append_pair("after", &a.to_string());
    }
    q.finish()
}

/// The filter as form fields.
pub(crate) fn filter_fields(f: &Filter) -> [(&'static str, String); 6] {
    [
        ("q", f.text.clone()),
        ("key", f.key.clone()),
        ("group", f.group.clone()),
        ("error", f.error.clone()),
        ("class", f.class.clone()),
        (
            "older",
            f.older_than.map(format_duration).unwrap_or_default(),
        ),
    ]
}

fn hidden_filter(f: &Filter) -> Markup {
    html! {
        @for (k, v) in filter_fields(f) {
            @if !v.is_empty() { input type="hidden" name=(k) value=(v); }
        }
    }
}

/// An age in whole seconds (enqueue times have second precision).
fn age(d: Duration) -> String {
    match d.as_secs() {
        0 => "0s".into(),
        s => format_duration(Duration::from_secs(s)),
    }
}

fn retry_text(r: &RetryState) -> String {
    match r {
        RetryState::Due => "due".into(),
        RetryState::Held => "held".into(),
        RetryState::Behind(id) => format!("behind #{id}"),
        RetryState::At(_, d) => format!("retry in {}", format_duration(*d)),
        RetryState::Leased(_, d) => format!("leased, {} left", format_duration(*d)),
        RetryState::Delivered(d) => format!("delivered {} ago", format_duration(*d)),
        RetryState::Dead(d) => format!("died {} ago", format_duration(*d)),
    }
}

/// The actions that apply to the items of `tab`.
pub(crate) fn actions_for(tab: Tab) -> Vec<Action> {
    [
        Action::Hold,
        Action::Release,
        Action::Requeue,
        Action::Purge,
        Action::Done,
    ]
    .into_iter()
    .filter(|a| a.applies_to(tab))
    .collect()
}

/// The name of an action in forms.
pub(crate) fn action_name(a: Action) -> &'static str {
    match a {
        Action::Hold => "hold",
        Action::Release => "release",
        Action::Requeue => "requeue",
        Action::Purge => "purge",
        Action::Done => "done",
    }
}

/// A list of one set, with its filter form, rows and paging.
pub(crate) fn items(
    ctx: &Ctx,
    tab: Tab,
    filter: &Filter,
    after: u64,
    w: &Window,
    scan: usize,
) -> Markup {
    let field = |name: &str, label: &str, value: &str, hint: &str| {
        html! {
            label {
                span { (label) }
                input type="text" name=(name) value=(value) placeholder=(hint);
            }
        }
    };
    let older = filter.older_than.map(format_duration).unwrap_or_default();
    page(
        Some(ctx),
        &title_case(tab.name()),
        tab.name(),
        html! {
            h1 { (title_case(tab.name())) " items" }
            form.filter method="get" action="/console/items" {
                input type="hidden" name="state" value=(tab.name());
                (field("q", "Any text", &filter.text, "id, key, group, error, payload"))
                (field("key", "Key contains", &filter.key, "order-"))
                (field("group", "Group is", &filter.group, ""))
                (field("error", "Error contains", &filter.error, "503"))
                (field("class", "Error class is", &filter.class, "HTTP 503"))
                (field("older", "Older than", &older, "10m"))
                button type="submit" { "Filter" }
                " "
                a href={ "/console/items?state=" (tab.name()) } { "Clear" }
            }
            @if ctx.may_act() && !filter.is_empty() && !w.rows.is_empty() {
                div.bulk {
                    "The matching items: "
                    @for a in actions_for(tab) {
                        form.inline method="post" action="/console/act" {
                            input type="hidden" name="csrf" value=(ctx.csrf.as_deref().unwrap_or(""));
                            input type="hidden" name="action" value=(action_name(a));
                            input type="hidden" name="state" value=(tab.name());
                            input type="hidden" name="scope" value="filter";
                            (hidden_filter(filter))
                            button type="submit" class={ "act " (action_name(a)) } { (title_case(a.verb())) " all…" }
                        }
                    }
                    span.note { " (at most 1,000 per action; you confirm the count first)" }
                }
            }
            @if w.rows.is_empty() {
                p.empty {
                    @if after > 0 || w.next.is_some() { "No matching item in this window." } @else { "No matching item." }
                }
            } @else {
                table.items {
                    thead { tr {
                        th { "id" } th { "key" } th { "group" } th { "attempts" } th { "age" }
                        th { "state" } th { "size" }
                        th { @if tab == Tab::Delivered { "evidence" } @else { "last error" } }
                        th { "payload" }
                    } }
                    tbody {
                        @for e in &w.rows {
                            tr {
                                td { a href={ "/console/items/" (e.row.id) } { (e.row.id) } }
                                td.key { (e.row.key) }
                                td { (e.group.as_deref().unwrap_or("")) }
                                td.num { (e.row.attempts) }
                                td { (e.row.age.map(age).unwrap_or_else(|| "-".into())) }
                                td { (retry_text(&e.row.retry)) }
                                td.num { (e.row.size) }
                                td.error { (e.row.last_error.as_deref().unwrap_or("")) }
                                td.preview { (e.row.preview) }
                            }
                        }
                    }
                }
            }
            p.paging {
                @if after > 0 { a href={ "/console/items?" (list_query(tab, filter, None)) } { "⇤ First" } " " }
                @if let Some(next) = w.next {
                    a.next href={ "/console/items?" (list_query(tab, filter, Some(next))) } { "Next →" }
                    @if w.rows.is_empty() || w.scanned as usize >= scan {
                        span.note { " (read " (w.scanned) " entries; the next window goes on from #" (next) ")" }
                    }
                }
            }
        },
    )
}

/// One item, whichever set it is in.
pub(crate) fn detail(ctx: &Ctx, shown: &Shown, now: Timestamp) -> Markup {
    let item = shown.item();
    let (tab, state) = match shown {
        Shown::Pending(i) if i.held => (Tab::Held, "held".to_string()),
        Shown::Pending(_) => (Tab::Pending, "pending".to_string()),
        Shown::Dead(d) => (
            Tab::Dead,
            format!(
                "dead letter since {} ({} ago)",
                d.dead_at.to_rfc3339(),
                format_duration(now.since(d.dead_at))
            ),
        ),
        Shown::Delivered(d) => (
            Tab::Delivered,
            format!(
                "delivered at {} ({}), retained",
                d.delivery.at.to_rfc3339(),
                d.delivery.evidence.describe()
            ),
        ),
    };
    let when = |t: Option<Timestamp>| {
        t.map_or("-".to_string(), |t| {
            if t > now {
                format!("{} (in {})", t.to_rfc3339(), format_duration(t.since(now)))
            } else {
                format!("{} ({} ago)", t.to_rfc3339(), format_duration(now.since(t)))
            }
        })
    };
    let shown_bytes = item.payload.len().min(PREVIEW_BYTES);
    page(
        Some(ctx),
        &format!("Item {}", item.id),
        tab.name(),
        html! {
            h1 { "Item " (item.id) }
            dl.detail {
                dt { "state" } dd { (state) }
                dt { "key" } dd.key { (preview::escape(item.key.as_bytes())) }
                dt { "group" } dd { (item.group.as_deref().map(|g| preview::escape(g.as_bytes())).unwrap_or_default()) }
                dt { "coalesce key" } dd { (item.coalesce_key.as_deref().map(|g| preview::escape(g.as_bytes())).unwrap_or_default()) }
                dt { "attempts" } dd { (item.attempts) }
                dt { "enqueued" } dd { (when(item.enqueued_at)) }
                dt { "next retry" } dd { (when(item.next_retry_at)) }
                dt { "last error" } dd.error { (item.last_error.as_deref().map(|e| preview::escape(e.as_bytes())).unwrap_or_default()) }
                dt { "push sequence" } dd { (item.push_seq.map(|s| s.to_string()).unwrap_or_else(|| "-".into())) }
                dt { "size" } dd { (item.payload.len()) " bytes" }
            }
            h2 { "Payload" @if shown_bytes < item.payload.len() { " (first " (shown_bytes) " bytes)" } }
            pre.payload { (preview::escape(&item.payload[..shown_bytes])) }
            @if ctx.may_act() {
                div.bulk {
                    @for a in actions_for(tab) {
                        form.inline method="post" action="/console/act" {
                            input type="hidden" name="csrf" value=(ctx.csrf.as_deref().unwrap_or(""));
                            input type="hidden" name="action" value=(action_name(a));
                            input type="hidden" name="state" value=(tab.name());
                            input type="hidden" name="ids" value=(item.id);
                            button type="submit" class={ "act " (action_name(a)) } { (title_case(a.verb())) "…" }
                        }
                    }
                }
            }
            p { a href={ "/console/items?state=" (tab.name()) } { "Back to the " (tab.name()) " items" } }
        },
    )
}

/// Bytes of a payload the detail page shows.
pub(crate) const PREVIEW_BYTES: usize = 4096;

/// The confirmation of an action: the count, the ids, and a button.
pub(crate) fn confirm(
    ctx: &Ctx,
    action: Action,
    tab: Tab,
    ids: &[u64],
    more: bool,
    back: &str,
) -> Markup {
    let n = ids.len();
    let what = if tab == Tab::Dead {
        if n == 1 {
            "dead letter"
        } else {
            "dead letters"
        }
    } else if n == 1 {
        "item"
    } else {
        "items"
    };
    page(
        Some(ctx),
        "Confirm",
        tab.name(),
        html! {
            h1 { "Confirm" }
            p.question { (title_case(action.verb())) " " span #confirm-count { (n) } " " (what) "?" }
            @if more { p.note { "More items match than one action takes (1,000), or than were read; these are the first ones." } }
            p.ids { "ids: " @for (i, id) in ids.iter().take(50).enumerate() { @if i > 0 { ", " } (id) } @if n > 50 { ", …" } }
            form.inline method="post" action="/console/act" {
                input type="hidden" name="csrf" value=(ctx.csrf.as_deref().unwrap_or(""));
                input type="hidden" name="action" value=(action_name(action));
                input type="hidden" name="state" value=(tab.name());
                input type="hidden" name="confirm" value=(n);
                @for id in ids { input type="hidden" name="ids" value=(id); }
                button #confirm type="submit" class={ "act " (action_name(action)) } { (title_case(action.verb())) " " (n) " " (what) }
            }
            " "
            a href=(back) { "Cancel" }
        },
    )
}

/// What an action did.
pub(crate) fn applied(ctx: &Ctx, tab: Tab, a: &Applied) -> Markup {
    page(
        Some(ctx),
        "Done",
        tab.name(),
        html! {
            h1 { "Done" }
            p.result { (a.message()) }
            p { a href={ "/console/items?state=" (tab.name()) } { "Back to the " (tab.name()) " items" } }
        },
    )
}

/// The shape table, with its `by` and `state` choices.
pub(crate) fn shape(ctx: &Ctx, s: &Shape, age: Duration) -> Markup {
    let bys = [
        ShapeBy::Error,
        ShapeBy::Group,
        ShapeBy::Attempts,
        ShapeBy::KeyPrefix,
    ];
    let states = [
        ShapeState::Pending,
        ShapeState::Held,
        ShapeState::Dead,
        ShapeState::Delivered,
    ];
    page(
        Some(ctx),
        "Shape",
        "shape",
        html! {
            h1 { "Shape of the " (s.state.name()) " items by " (s.by.name()) }
            form.filter method="get" action="/console/shape" {
                label { span { "By" } select name="by" {
                    @for b in bys { option value=(b.name()) selected[b == s.by] { (b.name()) } }
                } }
                label { span { "State" } select name="state" {
                    @for st in states { option value=(st.name()) selected[st == s.state] { (st.name()) } }
                } }
                button type="submit" { "Show" }
            }
            p.note { "Counts by age since enqueue; computed " (format_duration(age)) " ago (at most every 5 s)." }
            (shape_table(s))
        },
    )
}

/// A shape as a table; each error class links to its items.
fn shape_table(s: &Shape) -> Markup {
    let labels = s.bucket_labels();
    let tab = Tab::parse(s.state.name()).unwrap_or(Tab::Pending);
    html! {
    table.shape {
        thead { tr { th { (s.by.name()) } th { "T" } @for l in &labels { th { (l) } } } }
        tbody {
            @for row in &s.rows {
                tr {
                    td.value {
                        @if s.by == ShapeBy::Error && row.value != crate::ops::shape::TOTAL && row.value != crate::ops::shape::OTHER {
                            a href={ "/console/items?" (list_query(tab, &Filter { class: row.value.clone(), ..Filter::default() }, None)) } { (row.value) }
                        } @else { (row.value) }
                    }
                    td.num { (row.total) }
                    @for c in &row.counts { td.num { @if *c > 0 { (c) } } }
                }
            }
        }
    }
    }
}

/// The push clients.
pub(crate) fn clients(
    ctx: &Ctx,
    clients: &[ClientSummary],
    total: usize,
    now: Timestamp,
) -> Markup {
    page(
        Some(ctx),
        "Clients",
        "clients",
        html! {
            h1 { "Push clients" }
            @if clients.is_empty() {
                p.empty { "No client has pushed into this spool." }
            } @else {
                @if total > clients.len() { p.note { "The first " (clients.len()) " of " (total) " clients." } }
                table.clients {
                    thead { tr { th { "client" } th { "last seq" } th { "unacknowledged rejects" } th { "last push" } th { "served by" } } }
                    tbody {
                        @for c in clients {
                            tr {
                                td.key { (c.client_id) }
                                td.num { (c.last_seq) }
                                td.num { (c.rejected.len()) }
                                td { (c.updated_at.map(|t| format!("{} ago", format_duration(now.since(t)))).unwrap_or_else(|| "-".into())) }
                                td { (c.served_by.as_deref().unwrap_or("-")) }
                            }
                        }
                    }
                }
            }
        },
    )
}
