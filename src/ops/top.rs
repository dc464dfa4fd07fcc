//! `top`: the model behind the live terminal view of a spool (SPEC §11).
//!
//! [`Top`] is everything `spool top` shows and does, without a terminal:
//! what one refresh reads ([`Top::refresh`]), the header's counts, the
//! depth and delivery-rate samples of the session, the shape by error
//! class and the top dead-letter reasons ([`super::shape`]), the rows of
//! the four tabs (pending, held, dead, delivered), the text filter, the
//! selection, and the actions on the selected item or on the filtered set
//! with their counts ([`Top::plan`], [`apply`]). The command-line tool
//! only draws it and turns keys into calls.
//!
//! # Cost and locks
//!
//! A refresh reads the spool through whatever handle it is given; the
//! tool gives it a read-only one, as `stats` and `list` use, so it never
//! takes a lock that blocks `enqueue` or `replay`. It reads the counts
//! ([`crate::Queue::stats`], the push state, and on PostgreSQL the number
//! of running leases and the leases of the rows shown) and at most
//! [`TopOptions::scan`] entries of one tab, page by page from a cursor,
//! keeping at most [`TopOptions::rows`] rows: never the whole spool. The shape aggregates (one query each on
//! SQLite and PostgreSQL, a walk on NDJSON) are the exception; they are
//! recomputed at most every [`TopOptions::shape_every`], and never more
//! often than ten times their own cost, so that a slow one cannot take
//! over the refreshes; the tool computes them on a thread of their own
//! ([`read_shapes`]), so that the screen never waits for them.
//!
//! # The delivery rate
//!
//! The spool keeps no count of deliveries, so the rate is derived from
//! two consecutive refreshes: the items that left the pending set other
//! than as dead letters, `Δ high-water − Δ depth − Δ dead letters`
//! (ids issued in between, minus the growth of the pending set, minus
//! the growth of the dead-letter set), divided by the time between them,
//! never below 0. It counts deliveries, `done`, and items replaced by
//! coalescing; a requeue moves items from dead to pending and cancels
//! out; a purge of dead letters in the same interval counts as
//! deliveries.
//!
//! # Actions
//!
//! Hold and mark done act on pending items, release on held ones, requeue
//! on dead letters; each is the library call of its subcommand
//! ([`super::hold::hold`], [`super::release::release`],
//! [`super::dlq::requeue`], [`super::done::done`]), made by [`apply`] on
//! a handle the caller opens for writing only for that call. The filtered
//! set is the rows the filter matched in the current window: at most
//! [`TopOptions::rows`] items, and only while a filter is set — an action
//! never reaches items the operator has not seen counted.

use super::browse::{window, Bounds, Filter};
use super::shape::{shape, Shape, ShapeBy, ShapeOptions, ShapeState};
use crate::backend::Spool;
use crate::error::Result;
use crate::item::ItemId;
use crate::queue::{BackendKind, Queue};
use crate::time::Timestamp;
use std::collections::VecDeque;
use std::fmt;
use std::time::{Duration, Instant};

pub use super::browse::{Entry as TopRow, Tab};

/// What an operator can do from `top`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Hold pending items (`spool hold`).
    Hold,
    /// Release held items (`spool release`).
    Release,
    /// Move dead letters back to pending (`spool dlq requeue`).
    Requeue,
    /// Remove pending items, held or not (`spool done`).
    Done,
    /// Remove dead letters (`spool dlq purge`; the console, not `top`).
    Purge,
}

impl Action {
    /// The verb, as a question names it: "hold 3 items?".
    pub fn verb(self) -> &'static str {
        match self {
            Action::Hold => "hold",
            Action::Release => "release",
            Action::Requeue => "requeue",
            Action::Done => "mark done",
            Action::Purge => "purge",
        }
    }

    /// The participle, as a report names it: "held 3 items".
    pub fn past(self) -> &'static str {
        match self {
            Action::Hold => "held",
            Action::Release => "released",
            Action::Requeue => "requeued",
            Action::Done => "marked done",
            Action::Purge => "purged",
        }
    }

    /// Whether the action applies to the items of `tab`.
    pub fn applies_to(self, tab: Tab) -> bool {
        matches!(
            (self, tab),
            (Action::Hold, Tab::Pending)
                | (Action::Release, Tab::Held)
                | (Action::Requeue, Tab::Dead)
                | (Action::Done, Tab::Pending | Tab::Held)
                | (Action::Purge, Tab::Dead)
        )
    }

    /// The tab an action applies to first: where a refused action sends
    /// the operator.
    fn home(self) -> &'static str {
        match self {
            Action::Hold => "the pending tab",
            Action::Release => "the held tab",
            Action::Requeue => "the dead tab",
            Action::Done => "the pending or held tab",
            Action::Purge => "the dead tab",
        }
    }
}

/// Which items an action takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The selected row.
    Selected,
    /// Every row the filter matched in the current window.
    Filtered,
}

/// Why [`Top::plan`] refused an action; nothing was changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// `top` runs with `--read-only`.
    ReadOnly,
    /// The action does not apply to the current tab's items.
    WrongTab {
        /// The action.
        action: Action,
        /// The current tab.
        tab: Tab,
    },
    /// An action on the filtered set without a filter.
    NoFilter,
    /// No row to act on.
    Nothing,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::ReadOnly => write!(f, "read-only: actions are disabled (--read-only)"),
            Refusal::WrongTab { action, tab } => write!(
                f,
                "cannot {} {} items; use {}",
                action.verb(),
                tab.name(),
                action.home()
            ),
            Refusal::NoFilter => write!(
                f,
                "no filter: press / and type a filter to act on the matching items"
            ),
            Refusal::Nothing => write!(f, "no item to act on"),
        }
    }
}

/// An action made ready for confirmation: the ids it will take.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The action.
    pub action: Action,
    /// The items, in the order shown.
    pub ids: Vec<ItemId>,
    /// The tab they were taken from.
    pub tab: Tab,
}

impl Plan {
    /// The confirmation question, naming the count: `hold 3 items? (y/n)`.
    pub fn question(&self) -> String {
        let n = self.ids.len();
        match self.ids.as_slice() {
            [id] => format!("{} item {id}? (y/n)", self.action.verb()),
            _ => format!(
                "{} {n} {}? (y/n)",
                self.action.verb(),
                if self.tab == Tab::Dead {
                    "dead letters"
                } else {
                    "items"
                }
            ),
        }
    }
}

/// What [`apply`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    /// The action.
    pub action: Action,
    /// The items it changed.
    pub changed: Vec<ItemId>,
    /// Items that were no longer where the plan found them (another
    /// process moved them first); nothing happened to them.
    pub gone: Vec<ItemId>,
}

impl Applied {
    /// One line for the status bar: `held 3 items (1 was gone)`.
    pub fn message(&self) -> String {
        let n = self.changed.len();
        let mut s = format!(
            "{} {n} {}",
            self.action.past(),
            if n == 1 { "item" } else { "items" }
        );
        if !self.gone.is_empty() {
            let g = self.gone.len();
            s.push_str(&format!(
                " ({g} {} gone)",
                if g == 1 { "was" } else { "were" }
            ));
        }
        s
    }
}

/// Carry out `plan` on `queue` through the library call of its
/// subcommand. The caller opens `queue` for writing for this call only.
/// Mark done refuses items in flight to a push receiver as `spool done`
/// does without `--force`, changing nothing.
pub fn apply(queue: &dyn Queue, plan: &Plan) -> Result<Applied> {
    let ids = plan.ids.clone();
    let report = match plan.action {
        Action::Hold => super::hold::hold(queue, &super::hold::HoldOptions { ids })?,
        Action::Release => super::release::release(queue, &super::release::ReleaseOptions { ids })?,
        Action::Requeue => super::dlq::requeue(queue, &super::dlq::Selection::Ids(ids))?,
        Action::Done => {
            super::done::done(queue, &super::done::DoneOptions { ids, force: false })?.ids
        }
        Action::Purge => super::dlq::purge(queue, &super::dlq::Selection::Ids(ids))?,
    };
    Ok(Applied {
        action: plan.action,
        changed: report.changed,
        gone: report.unknown,
    })
}

/// Options for [`Top`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopOptions {
    /// Rows kept of the current tab (the window), and so the most items
    /// an action on the filtered set can take.
    pub rows: usize,
    /// Entries of the current tab read at most per refresh, matching the
    /// filter or not.
    pub scan: usize,
    /// Characters of a payload preview.
    pub preview_chars: usize,
    /// Samples of depth and rate kept for the sparklines.
    pub samples: usize,
    /// Error classes shown in the shape.
    pub shape_top: usize,
    /// Dead-letter reasons shown.
    pub dead_top: usize,
    /// The shortest time between two computations of the shapes.
    pub shape_every: Duration,
    /// Refuse every action.
    pub read_only: bool,
    /// Compute the shapes inside [`Top::refresh`] when they are due
    /// (`false`: the caller computes them with [`read_shapes`] and hands
    /// them over with [`Top::set_shapes`]).
    pub inline_shapes: bool,
}

impl Default for TopOptions {
    fn default() -> TopOptions {
        TopOptions {
            rows: 500,
            scan: 20_000,
            preview_chars: 60,
            samples: 600,
            shape_top: 8,
            dead_top: 5,
            shape_every: Duration::from_secs(5),
            read_only: false,
            inline_shapes: true,
        }
    }
}

/// The header line of `top`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Header {
    /// Where the spool is (path, URL without password, or `memory`).
    pub location: String,
    /// The backend's name (`sqlite`, `file`, `memory`, `postgres`).
    pub backend: &'static str,
    /// Pending items, held included.
    pub depth: u64,
    /// Held items.
    pub held: u64,
    /// Dead letters.
    pub dead_letters: u64,
    /// Retained delivered items.
    pub retained: u64,
    /// Items in flight to a push receiver (numbered, not acknowledged).
    pub in_flight: u64,
    /// PostgreSQL: items leased by a running replayer (`None` on the
    /// other backends, whose replay takes the whole spool).
    pub leased: Option<u64>,
    /// The oldest pending item's age, when known.
    pub oldest_age: Option<Duration>,
    /// The push receiver's acknowledged watermark.
    pub push_watermark: u64,
    /// The highest push sequence number assigned.
    pub push_assigned: u64,
    /// The highest id ever issued.
    pub high_water: u64,
}

impl Header {
    /// The number of entries of a tab.
    pub fn count(&self, tab: Tab) -> u64 {
        match tab {
            Tab::Pending => self.depth.saturating_sub(self.held),
            Tab::Held => self.held,
            Tab::Dead => self.dead_letters,
            Tab::Delivered => self.retained,
        }
    }
}

/// One point of the session's sparklines.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// When it was taken.
    pub at: Timestamp,
    /// The depth then.
    pub depth: u64,
    /// Items delivered per second since the previous sample (see the
    /// module docs); `None` for the first sample.
    pub rate: Option<f64>,
}

/// What the last refresh cost, piece by piece.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Costs {
    /// The counts (header).
    pub counts: Duration,
    /// The rows of the current tab.
    pub rows: Duration,
    /// The shapes, when this refresh computed them.
    pub shape: Option<Duration>,
}

/// The state of `top`: what the screen shows, between refreshes.
#[derive(Debug)]
pub struct Top {
    opts: TopOptions,
    tab: Tab,
    filter: String,
    window_after: ItemId,
    header: Header,
    samples: VecDeque<Sample>,
    last: Option<(Timestamp, Header)>,
    shape: Option<Shape>,
    dead_reasons: Option<Shape>,
    shape_at: Option<Instant>,
    shape_cost: Duration,
    rows: Vec<TopRow>,
    scanned: u64,
    more: bool,
    selected: usize,
    selected_id: Option<ItemId>,
    costs: Costs,
}

impl Top {
    /// A model with nothing read yet.
    pub fn new(opts: TopOptions) -> Top {
        Top {
            opts,
            tab: Tab::Pending,
            filter: String::new(),
            window_after: 0,
            header: Header::default(),
            samples: VecDeque::new(),
            last: None,
            shape: None,
            dead_reasons: None,
            shape_at: None,
            shape_cost: Duration::ZERO,
            rows: Vec::new(),
            scanned: 0,
            more: false,
            selected: 0,
            selected_id: None,
            costs: Costs::default(),
        }
    }

    /// The options.
    pub fn options(&self) -> &TopOptions {
        &self.opts
    }

    /// Read the spool at `now`: the counts, one sample, the current tab's
    /// window of rows, and the shapes when they are due (see the module
    /// docs). The selection stays on the same item when it is still
    /// listed.
    pub fn refresh(&mut self, spool: &Spool, now: Timestamp) -> Result<()> {
        let t0 = Instant::now();
        let header = read_header(spool, now)?;
        self.sample(now, &header);
        self.header = header;
        let t1 = Instant::now();
        self.read_rows(spool, now)?;
        let t2 = Instant::now();
        self.costs = Costs {
            counts: t1 - t0,
            rows: t2 - t1,
            shape: None,
        };
        if self.opts.inline_shapes && self.shapes_due() {
            self.refresh_shapes(spool, now)?;
        }
        Ok(())
    }

    /// Whether the shapes should be computed again: never yet, or
    /// [`TopOptions::shape_every`] (and ten times their last cost) ago.
    pub fn shapes_due(&self) -> bool {
        match self.shape_at {
            None => true,
            Some(at) => at.elapsed() >= self.opts.shape_every.max(self.shape_cost * 10),
        }
    }

    /// Compute the shape by error class of the pending items and the
    /// top dead-letter reasons now, whenever they were last computed.
    pub fn refresh_shapes(&mut self, spool: &Spool, now: Timestamp) -> Result<()> {
        let shapes = read_shapes(spool.queue(), &self.opts, now)?;
        self.set_shapes(shapes);
        Ok(())
    }

    /// Take shapes [`read_shapes`] computed elsewhere (the tool computes
    /// them on a thread of their own, so that a slow walk never holds up
    /// the screen).
    pub fn set_shapes(&mut self, shapes: Shapes) {
        self.shape = Some(shapes.pending);
        self.dead_reasons = Some(shapes.dead);
        self.shape_cost = shapes.cost;
        self.shape_at = Some(Instant::now());
        self.costs.shape = Some(shapes.cost);
    }

    /// Note that shapes are being computed elsewhere now: they are not
    /// due again until [`TopOptions::shape_every`] after this.
    pub fn shapes_started(&mut self) {
        self.shape_at = Some(Instant::now());
    }

    fn sample(&mut self, now: Timestamp, h: &Header) {
        let rate = self.last.as_ref().and_then(|(at, prev)| {
            let secs = now.since(*at).as_secs_f64();
            (secs > 0.0).then(|| delivered_between(prev, h) as f64 / secs)
        });
        self.samples.push_back(Sample {
            at: now,
            depth: h.depth,
            rate,
        });
        while self.samples.len() > self.opts.samples.max(1) {
            self.samples.pop_front();
        }
        self.last = Some((now, h.clone()));
    }

    fn read_rows(&mut self, spool: &Spool, now: Timestamp) -> Result<()> {
        let filter = Filter {
            text: self.filter.clone(),
            ..Filter::default()
        };
        let bounds = Bounds {
            rows: self.opts.rows,
            scan: self.opts.scan,
            preview_chars: self.opts.preview_chars,
        };
        let w = window(
            spool.queue(),
            self.tab,
            &filter,
            self.window_after,
            bounds,
            now,
        )?;
        self.rows = w.rows;
        self.scanned = w.scanned;
        self.more = w.next.is_some();
        self.reselect();
        Ok(())
    }

    fn reselect(&mut self) {
        if let Some(id) = self.selected_id {
            if let Some(i) = self.rows.iter().position(|r| r.row.id == id) {
                self.selected = i;
            }
        }
        self.selected = self.selected.min(self.rows.len().saturating_sub(1));
        self.selected_id = self.rows.get(self.selected).map(|r| r.row.id);
    }

    /// The header of the last refresh.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The samples of the session, oldest first.
    pub fn samples(&self) -> &VecDeque<Sample> {
        &self.samples
    }

    /// The shape by error class of the pending items, once computed.
    pub fn shape(&self) -> Option<&Shape> {
        self.shape.as_ref()
    }

    /// The shape by error class of the dead letters, once computed.
    pub fn dead_reasons(&self) -> Option<&Shape> {
        self.dead_reasons.as_ref()
    }

    /// What the last refresh cost.
    pub fn costs(&self) -> Costs {
        self.costs
    }

    /// The current tab.
    pub fn tab(&self) -> Tab {
        self.tab
    }

    /// Show `tab` from its first entry (the rows change at the next
    /// refresh).
    pub fn set_tab(&mut self, tab: Tab) {
        if tab != self.tab {
            self.tab = tab;
            self.window_after = 0;
            self.rows.clear();
            self.selected = 0;
            self.selected_id = None;
        }
    }

    /// The filter text ("" for none).
    pub fn filter(&self) -> &str {
        &self.filter
    }

    /// Keep only the entries whose id, key, group, last error or payload
    /// preview contains `text`, ignoring case; "" shows every entry.
    /// The window starts again from the tab's first entry.
    pub fn set_filter(&mut self, text: &str) {
        if text != self.filter {
            self.filter = text.to_string();
            self.window_after = 0;
            self.selected = 0;
            self.selected_id = None;
        }
    }

    /// The rows of the current window.
    pub fn rows(&self) -> &[TopRow] {
        &self.rows
    }

    /// Whether entries of the tab come after the window (more matching
    /// ones, or ones not read because of [`TopOptions::scan`]).
    pub fn more(&self) -> bool {
        self.more
    }

    /// Entries read by the last refresh.
    pub fn scanned(&self) -> u64 {
        self.scanned
    }

    /// Whether the window starts after the tab's first entry.
    pub fn paged(&self) -> bool {
        self.window_after != 0
    }

    /// Move the window past its last row (when there is more); the rows
    /// change at the next refresh.
    pub fn next_window(&mut self) -> bool {
        match self.rows.last() {
            Some(last) if self.more => {
                self.window_after = last.row.id;
                self.selected = 0;
                self.selected_id = None;
                true
            }
            _ => false,
        }
    }

    /// Move the window back to the tab's first entry.
    pub fn first_window(&mut self) {
        self.window_after = 0;
        self.selected = 0;
        self.selected_id = None;
    }

    /// The index of the selected row.
    pub fn selected(&self) -> usize {
        self.selected
    }

    /// The selected row.
    pub fn selected_row(&self) -> Option<&TopRow> {
        self.rows.get(self.selected)
    }

    /// Move the selection by `delta` rows, staying inside the window.
    pub fn move_selection(&mut self, delta: isize) {
        let last = self.rows.len().saturating_sub(1) as isize;
        let i = (self.selected as isize)
            .saturating_add(delta)
            .clamp(0, last.max(0));
        self.selected = i as usize;
        self.selected_id = self.rows.get(self.selected).map(|r| r.row.id);
    }

    /// The ids `action` would take for `scope`, or why it is refused.
    pub fn plan(&self, action: Action, scope: Scope) -> std::result::Result<Plan, Refusal> {
        if self.opts.read_only {
            return Err(Refusal::ReadOnly);
        }
        if !action.applies_to(self.tab) {
            return Err(Refusal::WrongTab {
                action,
                tab: self.tab,
            });
        }
        let ids: Vec<ItemId> = match scope {
            Scope::Selected => self.selected_row().map(|r| r.row.id).into_iter().collect(),
            Scope::Filtered if self.filter.is_empty() => return Err(Refusal::NoFilter),
            Scope::Filtered => self.rows.iter().map(|r| r.row.id).collect(),
        };
        if ids.is_empty() {
            return Err(Refusal::Nothing);
        }
        Ok(Plan {
            action,
            ids,
            tab: self.tab,
        })
    }
}

/// The two shapes `top` shows, and what computing them cost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shapes {
    /// The pending items by error class.
    pub pending: Shape,
    /// The dead letters by error class.
    pub dead: Shape,
    /// The time both took.
    pub cost: Duration,
}

/// The shapes of `top` at `now`: the pending items and the dead letters
/// by error class ([`super::shape`]), at most [`TopOptions::shape_top`]
/// and [`TopOptions::dead_top`] rows. Reads only.
pub fn read_shapes(queue: &dyn Queue, opts: &TopOptions, now: Timestamp) -> Result<Shapes> {
    let t = Instant::now();
    // Recomputed every few seconds for as long as top runs: never keep
    // enqueue or replay waiting for it.
    let by_error = |state, top| ShapeOptions {
        by: ShapeBy::Error,
        state,
        top,
        yield_to_writers: true,
        ..ShapeOptions::default()
    };
    let pending = shape(queue, &by_error(ShapeState::Pending, opts.shape_top), now)?;
    let dead = shape(queue, &by_error(ShapeState::Dead, opts.dead_top), now)?;
    Ok(Shapes {
        pending,
        dead,
        cost: t.elapsed(),
    })
}

/// Items that left the pending set between `a` and `b` other than as
/// dead letters (see the module docs).
pub(crate) fn delivered_between(a: &Header, b: &Header) -> u64 {
    let issued = b.high_water.saturating_sub(a.high_water) as i128;
    let grew = b.depth as i128 - a.depth as i128;
    let died = b.dead_letters as i128 - a.dead_letters as i128;
    u64::try_from((issued - grew - died).max(0)).unwrap_or(u64::MAX)
}

/// The counts of the header at `now`: [`crate::Queue::stats`], the push
/// state, and on PostgreSQL the running leases.
pub fn read_header(spool: &Spool, now: Timestamp) -> Result<Header> {
    let queue = spool.queue();
    let s = queue.stats(now)?;
    let push = queue.push_state()?;
    let skips = push.skips.iter().filter(|n| **n > push.acked).count() as u64;
    let leased = match spool {
        Spool::Postgres(q) => Some(q.extra_stats()?.0),
        _ => None,
    };
    Ok(Header {
        location: match spool.kind() {
            BackendKind::Memory => "memory".into(),
            _ => spool.location().to_string_lossy().into_owned(),
        },
        backend: spool.kind().name(),
        depth: s.depth,
        held: s.held,
        dead_letters: s.dead_letters,
        retained: s.delivered_retained,
        in_flight: push
            .last_assigned
            .saturating_sub(push.acked)
            .saturating_sub(skips),
        leased,
        oldest_age: s.oldest_enqueued_at.map(|t| now.since(t)),
        push_watermark: push.acked,
        push_assigned: push.last_assigned,
        high_water: s.high_water,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_counts_what_left_pending_alive() {
        let h = |high_water, depth, dead_letters| Header {
            high_water,
            depth,
            dead_letters,
            ..Header::default()
        };
        // 10 enqueued, depth +4, 2 died: 4 delivered.
        assert_eq!(delivered_between(&h(0, 0, 0), &h(10, 4, 2)), 4);
        // A requeue of 3 (dead -3, depth +3) is no delivery.
        assert_eq!(delivered_between(&h(10, 4, 5), &h(10, 7, 2)), 0);
        // Never below 0.
        assert_eq!(delivered_between(&h(10, 4, 0), &h(10, 4, 3)), 0);
    }

    #[test]
    fn tabs_cycle_and_actions_apply_to_their_tabs() {
        assert_eq!(Tab::Delivered.next(), Tab::Pending);
        assert_eq!(Tab::Pending.previous(), Tab::Delivered);
        assert!(Action::Done.applies_to(Tab::Held));
        assert!(!Action::Hold.applies_to(Tab::Dead));
        assert!(!Action::Requeue.applies_to(Tab::Delivered));
    }
}
