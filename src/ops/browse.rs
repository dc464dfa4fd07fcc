//! `browse`: one window of a set of the spool — pending, held, dead or
//! delivered — filtered, and read with a bound.
//!
//! What `spool top` lists and what the console's lists show (SPEC §11).
//! A window reads the set page by page from a cursor and stops at
//! [`Bounds::rows`] matching rows or [`Bounds::scan`] entries read,
//! whichever comes first: a window costs the same on a spool of a
//! million items as on one of a thousand, and a filter that matches
//! nothing reports how far it looked ([`Window::next`] continues from
//! there). [`select`] takes the ids of the matching entries for an
//! action on a filtered set, with the same bound.
//!
//! The filters ([`Filter`]) compare text as it is shown — escaped by
//! [`super::preview`] — ignoring case, so that what an operator reads on
//! the screen is what they can type.

use super::list::{Listed, Rows};
use super::preview;
use super::shape::error_class;
use crate::error::Result;
use crate::item::ItemId;
use crate::queue::{Queue, PAGE_SIZE};
use crate::time::Timestamp;
use std::time::Duration;

/// One of the sets of a spool, as `top` and the console list them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tab {
    /// Pending items that are not held.
    Pending,
    /// Held items.
    Held,
    /// Dead letters.
    Dead,
    /// Retained delivered items.
    Delivered,
}

impl Tab {
    /// The tabs in the order they are shown.
    pub const ALL: [Tab; 4] = [Tab::Pending, Tab::Held, Tab::Dead, Tab::Delivered];

    /// The tab's title.
    pub fn name(self) -> &'static str {
        match self {
            Tab::Pending => "pending",
            Tab::Held => "held",
            Tab::Dead => "dead",
            Tab::Delivered => "delivered",
        }
    }

    /// The tab named `name` ([`Tab::name`]).
    pub fn parse(name: &str) -> Option<Tab> {
        Tab::ALL.into_iter().find(|t| t.name() == name)
    }

    /// The tab after this one (wrapping).
    pub fn next(self) -> Tab {
        let i = Tab::ALL.iter().position(|t| *t == self).unwrap_or(0);
        Tab::ALL[(i + 1) % Tab::ALL.len()]
    }

    /// The tab before this one (wrapping).
    pub fn previous(self) -> Tab {
        let i = Tab::ALL.iter().position(|t| *t == self).unwrap_or(0);
        Tab::ALL[(i + Tab::ALL.len() - 1) % Tab::ALL.len()]
    }
}

/// Which entries a window keeps. Every part that is set must match; the
/// default keeps everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    /// Any of the id, key, group, last error (a delivered item's
    /// evidence too) or the first 200 characters of the payload contains
    /// it (`top`'s `/`).
    pub text: String,
    /// The key contains it.
    pub key: String,
    /// The ordering group is exactly this (as shown).
    pub group: String,
    /// The last error (a delivered item's evidence) contains it.
    pub error: String,
    /// The last error's cause class is exactly this
    /// ([`error_class`], a row of `spool shape --by error`).
    pub class: String,
    /// Enqueued at least this long ago.
    pub older_than: Option<Duration>,
}

impl Filter {
    /// True when the filter keeps every entry.
    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
            && self.key.is_empty()
            && self.group.is_empty()
            && self.error.is_empty()
            && self.class.is_empty()
            && self.older_than.is_none()
    }

    /// Whether `entry` passes at `now`.
    pub fn matches(&self, entry: &Listed, now: Timestamp) -> bool {
        self.lowered().passes(entry, now)
    }

    /// The filter with its contains-needles lowercased once, for a scan
    /// ([`Filter::passes`]).
    fn lowered(&self) -> Filter {
        Filter {
            text: self.text.to_lowercase(),
            key: self.key.to_lowercase(),
            error: self.error.to_lowercase(),
            ..self.clone()
        }
    }

    /// [`Filter::matches`] for a filter made by [`Filter::lowered`].
    fn passes(&self, entry: &Listed, now: Timestamp) -> bool {
        let item = entry.item();
        let has = |bytes: &[u8], needle: &str| shown_contains(bytes, usize::MAX, needle);
        if !self.key.is_empty() && !has(item.key.as_bytes(), &self.key) {
            return false;
        }
        if !self.group.is_empty()
            && item
                .group
                .as_deref()
                .is_none_or(|g| preview::escape(g.as_bytes()) != self.group)
        {
            return false;
        }
        if !self.error.is_empty() {
            let found = match entry {
                Listed::Delivered(d) => has(d.delivery.evidence.describe().as_bytes(), &self.error),
                _ => item
                    .last_error
                    .as_deref()
                    .is_some_and(|e| has(e.as_bytes(), &self.error)),
            };
            if !found {
                return false;
            }
        }
        if !self.class.is_empty()
            && error_class(item.last_error.as_deref(), item.attempts) != self.class
        {
            return false;
        }
        if let Some(age) = self.older_than {
            match item.enqueued_at {
                Some(t) if now.since(t) >= age => {}
                _ => return false,
            }
        }
        self.text.is_empty() || matches_text(&self.text, entry)
    }
}

/// How much one window reads and keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// Matching rows kept at most.
    pub rows: usize,
    /// Entries of the set read at most, matching or not.
    pub scan: usize,
    /// Characters of a payload preview.
    pub preview_chars: usize,
}

/// One row of a window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// What a table shows ([`super::list::Row`]: escaped key, preview,
    /// last error).
    pub row: super::list::Row,
    /// The ordering group, escaped.
    pub group: Option<String>,
}

/// What [`window`] read.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Window {
    /// The matching rows, in id order.
    pub rows: Vec<Entry>,
    /// Entries read.
    pub scanned: u64,
    /// Where the next window starts (pass it as `after`) when entries of
    /// the set come after this one — more matching rows, or entries not
    /// read because of [`Bounds::scan`]; `None` at the end of the set.
    pub next: Option<ItemId>,
}

/// The entries of `tab` after id `after` that pass `filter` at `now`:
/// at most `bounds.rows` of them, reading at most `bounds.scan` entries.
pub fn window(
    queue: &dyn Queue,
    tab: Tab,
    filter: &Filter,
    after: ItemId,
    bounds: Bounds,
    now: Timestamp,
) -> Result<Window> {
    let filter = filter.lowered();
    let want = bounds.rows.max(1);
    let mut rows: Vec<Entry> = Vec::new();
    let mut full = false;
    let mut maker = Rows::new(queue, now, bounds.preview_chars);
    let end = scan(queue, tab, after, bounds.scan, |entry| {
        if !filter.passes(entry, now) {
            return Ok(Visit::Go);
        }
        if rows.len() == want {
            full = true;
            return Ok(Visit::Stop);
        }
        rows.push(Entry {
            row: maker.row(entry)?,
            group: entry
                .item()
                .group
                .as_deref()
                .map(|g| preview::escape(g.as_bytes())),
        });
        Ok(Visit::Go)
    })?;
    let next = if full {
        rows.last().map(|r| r.row.id)
    } else {
        end.cut
    };
    Ok(Window {
        rows,
        scanned: end.read,
        next,
    })
}

/// The ids of at most `max` entries of `tab` that pass `filter` at
/// `now`, reading at most `scan_max` entries; and whether entries
/// (matching, or not read) come after them.
pub fn select(
    queue: &dyn Queue,
    tab: Tab,
    filter: &Filter,
    max: usize,
    scan_max: usize,
    now: Timestamp,
) -> Result<(Vec<ItemId>, bool)> {
    let filter = filter.lowered();
    let mut ids = Vec::new();
    let mut full = false;
    let end = scan(queue, tab, 0, scan_max, |entry| {
        if filter.passes(entry, now) {
            if ids.len() == max {
                full = true;
                return Ok(Visit::Stop);
            }
            ids.push(entry.item().id);
        }
        Ok(Visit::Go)
    })?;
    Ok((ids, full || end.cut.is_some()))
}

enum Visit {
    Go,
    Stop,
}

/// Where [`scan`] ended.
struct ScanEnd {
    /// Entries read.
    read: u64,
    /// The last entry read, when the scan stopped at its bound and the
    /// set may go on after it.
    cut: Option<ItemId>,
}

/// Call `visit` with each entry of `tab` after `after`, in id order, up
/// to `max` entries read (held items count on the pending tab, and
/// pending ones on the held tab, though they are not visited).
fn scan(
    queue: &dyn Queue,
    tab: Tab,
    mut after: ItemId,
    max: usize,
    mut visit: impl FnMut(&Listed) -> Result<Visit>,
) -> Result<ScanEnd> {
    let max = max.max(1) as u64;
    let mut read = 0u64;
    loop {
        let (entries, full) = read_page(queue, tab, after)?;
        for entry in &entries {
            after = entry.item().id;
            read += 1;
            let keep = match (tab, entry) {
                (Tab::Pending, Listed::Pending(i)) => !i.held,
                (Tab::Held, Listed::Pending(i)) => i.held,
                _ => true,
            };
            if keep {
                if let Visit::Stop = visit(entry)? {
                    return Ok(ScanEnd { read, cut: None });
                }
            }
            if read == max {
                return Ok(ScanEnd {
                    read,
                    cut: Some(after),
                });
            }
        }
        if !full {
            return Ok(ScanEnd { read, cut: None });
        }
    }
}

/// One page of the set behind `tab` after `after`, and whether it was
/// full (there may be more).
fn read_page(queue: &dyn Queue, tab: Tab, after: ItemId) -> Result<(Vec<Listed>, bool)> {
    let entries: Vec<Listed> = match tab {
        Tab::Pending | Tab::Held => queue
            .page(after, PAGE_SIZE)?
            .into_iter()
            .map(Listed::Pending)
            .collect(),
        Tab::Dead => queue
            .dead_page(after, PAGE_SIZE)?
            .into_iter()
            .map(Listed::Dead)
            .collect(),
        Tab::Delivered => queue
            .delivered_page(after, PAGE_SIZE)?
            .into_iter()
            .map(Listed::Delivered)
            .collect(),
    };
    let full = entries.len() == PAGE_SIZE;
    Ok((entries, full))
}

/// Whether `entry` matches the lowercased `needle`: its id, key, group,
/// last error (a delivered item's evidence too) or the first 200
/// characters of its payload, escaped as shown, contain it.
fn matches_text(needle: &str, entry: &Listed) -> bool {
    let item = entry.item();
    let has = |bytes: &[u8], limit: usize| shown_contains(bytes, limit, needle);
    item.id.to_string().contains(needle)
        || has(item.key.as_bytes(), usize::MAX)
        || item
            .group
            .as_deref()
            .is_some_and(|g| has(g.as_bytes(), usize::MAX))
        || item
            .last_error
            .as_deref()
            .is_some_and(|e| has(e.as_bytes(), usize::MAX))
        || matches!(entry, Listed::Delivered(d)
            if has(d.delivery.evidence.describe().as_bytes(), usize::MAX))
        || has(&item.payload, 200)
}

/// Whether the first `limit` characters of `bytes`, escaped as
/// [`preview`] shows them, contain the lowercased `needle`, ignoring
/// case. Printable ASCII without a backslash is its own escaped form: it
/// is searched in place, without building the escaped text (a filtered
/// window reads up to [`Bounds::scan`] entries).
fn shown_contains(bytes: &[u8], limit: usize, needle: &str) -> bool {
    let head = &bytes[..bytes.len().min(limit)];
    let plain = head.iter().all(|b| (0x20..0x7f).contains(b) && *b != b'\\');
    if plain {
        let n = needle.as_bytes();
        return n.is_empty() || head.windows(n.len()).any(|w| w.eq_ignore_ascii_case(n));
    }
    let shown = if limit == usize::MAX {
        preview::escape(bytes)
    } else {
        preview::preview(bytes, limit)
    };
    shown.to_lowercase().contains(needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{OpenOptions, Spool};

    #[test]
    fn the_filter_sees_text_as_shown() {
        assert!(shown_contains(b"Order-42", 200, "order-4"));
        assert!(!shown_contains(b"Order-42", 3, "order"));
        // Escaped forms: a newline shows as \n, a backslash doubled.
        assert!(shown_contains(b"a\nb", 200, "a\\nb"));
        assert!(shown_contains(b"line1\nline2", 200, "1\\nl"));
        assert!(shown_contains("Grüße".as_bytes(), 200, "grü"));
        assert!(!shown_contains(b"plain", 200, "ü"));
    }

    fn spool(n: u64) -> Spool {
        let s = Spool::memory(&OpenOptions::default());
        for i in 1..=n {
            s.enqueue(format!("payload {i}").as_bytes(), &format!("order-{i}"))
                .unwrap();
        }
        s
    }

    fn bounds(rows: usize, scan: usize) -> Bounds {
        Bounds {
            rows,
            scan,
            preview_chars: 20,
        }
    }

    fn ids(w: &Window) -> Vec<ItemId> {
        w.rows.iter().map(|r| r.row.id).collect()
    }

    #[test]
    fn a_window_stops_at_its_rows_and_goes_on_from_the_last() {
        let s = spool(10);
        let now = Timestamp::now();
        let all = Filter::default();
        let w = window(&*s, Tab::Pending, &all, 0, bounds(4, 100), now).unwrap();
        assert_eq!(ids(&w), [1, 2, 3, 4]);
        assert_eq!(w.next, Some(4));
        let w = window(&*s, Tab::Pending, &all, 8, bounds(4, 100), now).unwrap();
        assert_eq!(ids(&w), [9, 10]);
        assert_eq!(w.next, None);
    }

    #[test]
    fn a_filter_that_matches_little_stops_at_the_scan_bound() {
        let s = spool(30);
        let now = Timestamp::now();
        let f = Filter {
            key: "ORDER-2".into(),
            ..Filter::default()
        };
        // order-2 and order-20..29; only 10 entries are read.
        let w = window(&*s, Tab::Pending, &f, 0, bounds(100, 10), now).unwrap();
        assert_eq!(ids(&w), [2]);
        assert_eq!((w.scanned, w.next), (10, Some(10)));
        let w = window(&*s, Tab::Pending, &f, 10, bounds(100, 100), now).unwrap();
        assert_eq!(ids(&w), (20..=29).collect::<Vec<_>>());
        assert_eq!(w.next, None);
    }

    #[test]
    fn filters_on_error_class_group_and_age() {
        let s = Spool::memory(&OpenOptions::default());
        let a = s.enqueue(b"a", "a").unwrap().id;
        let b = s.enqueue(b"b", "b").unwrap().id;
        s.dead_letter(a, "HTTP 503 Service Unavailable").unwrap();
        s.dead_letter(b, "connection refused").unwrap();
        let now = Timestamp::now();
        let by = |f: Filter| ids(&window(&*s, Tab::Dead, &f, 0, bounds(10, 10), now).unwrap());
        assert_eq!(
            by(Filter {
                error: "503".into(),
                ..Filter::default()
            }),
            [a]
        );
        assert_eq!(
            by(Filter {
                class: "HTTP 503".into(),
                ..Filter::default()
            }),
            [a]
        );
        assert_eq!(
            by(Filter {
                group: "g".into(),
                ..Filter::default()
            }),
            Vec::<ItemId>::new()
        );
        assert_eq!(
            by(Filter {
                older_than: Some(Duration::from_secs(3600)),
                ..Filter::default()
            }),
            Vec::<ItemId>::new()
        );
        assert_eq!(
            by(Filter {
                older_than: Some(Duration::ZERO),
                ..Filter::default()
            }),
            [a, b]
        );
        assert!(Filter::default().is_empty());
    }

    #[test]
    fn select_takes_at_most_max_and_says_when_more_match() {
        let s = spool(20);
        let now = Timestamp::now();
        let f = Filter {
            text: "payload 1".into(),
            ..Filter::default()
        };
        // payload 1, 10..19: eleven match.
        let (got, more) = select(&*s, Tab::Pending, &f, 5, 1000, now).unwrap();
        assert_eq!((got, more), (vec![1, 10, 11, 12, 13], true));
        let (got, more) = select(&*s, Tab::Pending, &f, 50, 1000, now).unwrap();
        assert_eq!((got.len(), more), (11, false));
        // Held items are on the held tab only.
        s.set_held(&[1], true).unwrap();
        let (got, _) = select(&*s, Tab::Held, &Filter::default(), 50, 1000, now).unwrap();
        assert_eq!(got, [1]);
    }
}
