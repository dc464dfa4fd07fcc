//! The model behind `spool top` (`spool::ops::top`) on every backend:
//! the header's counts, the tabs' rows, the filter, the window bounds,
//! the selection, the actions and their counts, the read-only refusal,
//! and the delivery rate on an injected clock. Refreshes read through a
//! second, read-only handle, as the command does; actions go through the
//! writable one.

mod common;

use common::{pg_url, Backend, Harness};
use spool::ops::top::{apply, read_shapes, Action, Refusal, Scope, Tab, Top, TopOptions};
use spool::{Error, OpenMode, OpenOptions, Spool};
use std::sync::Arc;
use std::time::Duration;

/// Run `case` once per backend (PostgreSQL only with a test database).
fn each_backend(case: impl Fn(&Harness, &Spool)) {
    for backend in [
        Backend::Memory,
        Backend::File,
        Backend::Sqlite,
        Backend::Postgres,
    ] {
        if backend == Backend::Postgres && pg_url("top_lib").is_none() {
            continue;
        }
        let h = Harness::new(backend, None);
        let reader = match backend {
            Backend::Memory => None,
            _ => {
                let mut opts = OpenOptions::new(OpenMode::ReadOnly);
                opts.clock = Arc::new(h.clock.clone());
                Some(Spool::open(&h.path, &opts).expect("open read-only"))
            }
        };
        case(&h, reader.as_ref().unwrap_or_else(|| h.spool()));
    }
}

fn ids(top: &Top) -> Vec<u64> {
    top.rows().iter().map(|r| r.row.id).collect()
}

/// Five items: 1..=5 with keys `order-N`, payloads `{"n":N}`; 2 held,
/// 4 dead-lettered with "HTTP 503".
fn five(h: &Harness) {
    let q = h.q();
    for n in 1..=5 {
        q.enqueue(format!("{{\"n\":{n}}}").as_bytes(), &format!("order-{n}"))
            .unwrap();
    }
    q.set_held(&[2], true).unwrap();
    q.dead_letter(4, "HTTP 503 Service Unavailable").unwrap();
}

#[test]
fn header_and_tabs_show_each_set() {
    each_backend(|h, reader| {
        five(h);
        h.clock.advance(Duration::from_secs(90));
        let mut top = Top::new(TopOptions::default());
        top.refresh(reader, h.now()).unwrap();
        let hd = top.header();
        assert_eq!(
            (hd.depth, hd.held, hd.dead_letters, hd.in_flight),
            (4, 1, 1, 0),
            "{:?}",
            h.backend
        );
        assert_eq!(hd.oldest_age, Some(Duration::from_secs(90)));
        assert_eq!(hd.leased.is_some(), h.backend == Backend::Postgres);
        assert_eq!(hd.count(Tab::Pending), 3);
        assert_eq!(ids(&top), vec![1, 3, 5]);
        top.set_tab(Tab::Held);
        top.refresh(reader, h.now()).unwrap();
        assert_eq!(ids(&top), vec![2]);
        top.set_tab(Tab::Dead);
        top.refresh(reader, h.now()).unwrap();
        assert_eq!(ids(&top), vec![4]);
        let shape = top.shape().expect("computed at the first refresh");
        assert_eq!(shape.rows[0].total, 3, "pending, not held");
        let dead = top.dead_reasons().unwrap();
        assert_eq!(dead.rows[1].value, "HTTP 503");
        top.set_tab(Tab::Delivered);
        top.refresh(reader, h.now()).unwrap();
        assert!(top.rows().is_empty());
    });
}

#[test]
fn the_filter_matches_id_key_error_and_payload_ignoring_case() {
    each_backend(|h, reader| {
        five(h);
        let mut top = Top::new(TopOptions::default());
        let mut shown = |tab, filter: &str| {
            top.set_tab(tab);
            top.set_filter(filter);
            top.refresh(reader, h.now()).unwrap();
            ids(&top)
        };
        assert_eq!(shown(Tab::Pending, "ORDER-3"), vec![3]);
        assert_eq!(shown(Tab::Pending, "\"n\":5"), vec![5]);
        assert_eq!(shown(Tab::Pending, "order"), vec![1, 3, 5]);
        assert_eq!(shown(Tab::Pending, "nothing like it"), Vec::<u64>::new());
        assert_eq!(shown(Tab::Dead, "service unavailable"), vec![4]);
        assert_eq!(shown(Tab::Held, "order-2"), vec![2]);
        assert_eq!(shown(Tab::Pending, ""), vec![1, 3, 5]);
    });
}

#[test]
fn actions_name_their_counts_and_change_the_spool() {
    each_backend(|h, reader| {
        five(h);
        let mut top = Top::new(TopOptions::default());
        top.refresh(reader, h.now()).unwrap();
        // The selected row: the first.
        let plan = top.plan(Action::Hold, Scope::Selected).unwrap();
        assert_eq!(plan.ids, vec![1]);
        assert_eq!(plan.question(), "hold item 1? (y/n)");
        // The filtered set needs a filter.
        assert_eq!(
            top.plan(Action::Hold, Scope::Filtered),
            Err(Refusal::NoFilter)
        );
        top.set_filter("order-");
        top.refresh(reader, h.now()).unwrap();
        let plan = top.plan(Action::Hold, Scope::Filtered).unwrap();
        assert_eq!(plan.ids, vec![1, 3, 5]);
        assert_eq!(plan.question(), "hold 3 items? (y/n)");
        let done = apply(h.q(), &plan).unwrap();
        assert_eq!(done.changed, vec![1, 3, 5]);
        assert_eq!(done.message(), "held 3 items");
        top.refresh(reader, h.now()).unwrap();
        assert_eq!(top.header().held, 4);
        assert!(top.rows().is_empty());
        // Release two of them from the held tab.
        top.set_tab(Tab::Held);
        top.set_filter("order-3");
        top.refresh(reader, h.now()).unwrap();
        let plan = top.plan(Action::Release, Scope::Filtered).unwrap();
        assert_eq!(apply(h.q(), &plan).unwrap().changed, vec![3]);
        // Requeue the dead letter.
        top.set_tab(Tab::Dead);
        top.set_filter("");
        top.refresh(reader, h.now()).unwrap();
        assert_eq!(
            top.plan(Action::Hold, Scope::Selected),
            Err(Refusal::WrongTab {
                action: Action::Hold,
                tab: Tab::Dead
            })
        );
        let plan = top.plan(Action::Requeue, Scope::Selected).unwrap();
        assert_eq!(apply(h.q(), &plan).unwrap().changed, vec![4]);
        // Mark done the pending ones.
        top.set_tab(Tab::Pending);
        top.refresh(reader, h.now()).unwrap();
        assert_eq!(ids(&top), vec![3, 4]);
        top.set_filter("order");
        top.refresh(reader, h.now()).unwrap();
        let plan = top.plan(Action::Done, Scope::Filtered).unwrap();
        let done = apply(h.q(), &plan).unwrap();
        assert_eq!(done.message(), "marked done 2 items");
        top.refresh(reader, h.now()).unwrap();
        let hd = top.header();
        assert_eq!((hd.depth, hd.held, hd.dead_letters), (3, 3, 0));
        // An item another process took first is reported, not an error.
        let gone = apply(h.q(), &plan).unwrap();
        assert_eq!((gone.changed.len(), gone.gone.len()), (0, 2));
        assert_eq!(gone.message(), "marked done 0 items (2 were gone)");
    });
}

#[test]
fn read_only_refuses_every_action_and_changes_nothing() {
    each_backend(|h, reader| {
        five(h);
        let mut top = Top::new(TopOptions {
            read_only: true,
            ..TopOptions::default()
        });
        top.set_filter("order");
        for tab in Tab::ALL {
            top.set_tab(tab);
            top.refresh(reader, h.now()).unwrap();
            for action in [Action::Hold, Action::Release, Action::Requeue, Action::Done] {
                for scope in [Scope::Selected, Scope::Filtered] {
                    assert_eq!(top.plan(action, scope), Err(Refusal::ReadOnly));
                }
            }
        }
        assert_eq!(
            Refusal::ReadOnly.to_string(),
            "read-only: actions are disabled (--read-only)"
        );
        let s = h.q().stats(h.now()).unwrap();
        assert_eq!((s.depth, s.held, s.dead_letters), (4, 1, 1));
    });
}

#[test]
fn a_refresh_reads_a_bounded_window() {
    each_backend(|h, reader| {
        for n in 1..=10 {
            h.q().enqueue(format!("p{n}").as_bytes(), "").unwrap();
        }
        let mut top = Top::new(TopOptions {
            rows: 3,
            scan: 6,
            ..TopOptions::default()
        });
        top.refresh(reader, h.now()).unwrap();
        assert_eq!(ids(&top), vec![1, 2, 3]);
        assert!(top.more());
        assert!(top.next_window());
        top.refresh(reader, h.now()).unwrap();
        assert_eq!(ids(&top), vec![4, 5, 6]);
        assert!(top.paged());
        // A filter that matches only item 10: not within 6 entries.
        top.set_filter("p10");
        top.refresh(reader, h.now()).unwrap();
        assert!(top.rows().is_empty());
        assert!(top.more());
        assert_eq!(top.scanned(), 6);
        // The filtered set is what the window holds.
        top.set_filter("p");
        top.refresh(reader, h.now()).unwrap();
        assert_eq!(
            top.plan(Action::Done, Scope::Filtered).unwrap().ids,
            vec![1, 2, 3]
        );
        top.first_window();
        assert!(!top.paged());
    });
}

#[test]
fn the_selection_follows_its_item_across_refreshes() {
    each_backend(|h, reader| {
        for n in 1..=4 {
            h.q().enqueue(format!("p{n}").as_bytes(), "").unwrap();
        }
        let mut top = Top::new(TopOptions::default());
        top.refresh(reader, h.now()).unwrap();
        top.move_selection(2);
        assert_eq!(top.selected_row().unwrap().row.id, 3);
        h.q().mark_done(&[1]).unwrap();
        top.refresh(reader, h.now()).unwrap();
        assert_eq!(top.selected_row().unwrap().row.id, 3);
        assert_eq!(top.selected(), 1);
        top.move_selection(isize::MAX);
        assert_eq!(top.selected_row().unwrap().row.id, 4);
        h.q().mark_done(&[3, 4]).unwrap();
        top.refresh(reader, h.now()).unwrap();
        assert_eq!(
            top.selected_row().unwrap().row.id,
            2,
            "clamped to the last row"
        );
    });
}

#[test]
fn the_rate_is_what_left_pending_alive_per_second() {
    each_backend(|h, reader| {
        for n in 1..=6 {
            h.q().enqueue(format!("p{n}").as_bytes(), "").unwrap();
        }
        let mut top = Top::new(TopOptions {
            samples: 2,
            ..TopOptions::default()
        });
        top.refresh(reader, h.now()).unwrap();
        assert_eq!(top.samples().back().unwrap().rate, None);
        // In 2 s: 3 delivered, 1 dead-lettered, 1 enqueued.
        h.q().mark_done(&[1, 2, 3]).unwrap();
        h.q().dead_letter(4, "exit 1").unwrap();
        h.q().enqueue(b"p7", "").unwrap();
        h.clock.advance(Duration::from_secs(2));
        top.refresh(reader, h.now()).unwrap();
        let last = *top.samples().back().unwrap();
        assert_eq!(last.depth, 3);
        assert_eq!(last.rate, Some(1.5));
        // A requeue is no delivery.
        h.q().requeue(&[4]).unwrap();
        h.clock.advance(Duration::from_secs(1));
        top.refresh(reader, h.now()).unwrap();
        assert_eq!(top.samples().back().unwrap().rate, Some(0.0));
        assert_eq!(top.samples().len(), 2, "at most `samples` kept");
    });
}

#[test]
fn mark_done_refuses_an_item_in_flight_as_spool_done_does() {
    each_backend(|h, reader| {
        if h.backend == Backend::Postgres {
            return;
        }
        h.q().enqueue(b"a", "").unwrap();
        h.q().push_assign(&[1]).unwrap();
        let mut top = Top::new(TopOptions::default());
        top.refresh(reader, h.now()).unwrap();
        assert_eq!(top.header().in_flight, 1);
        assert_eq!(top.rows()[0].row.push_seq, Some(1));
        let plan = top.plan(Action::Done, Scope::Selected).unwrap();
        assert!(matches!(apply(h.q(), &plan), Err(Error::InvalidInput(_))));
        assert_eq!(h.q().size().unwrap(), 1);
    });
}

#[test]
fn leases_show_on_postgresql_rows_only() {
    each_backend(|h, reader| {
        for n in 1..=3 {
            h.q().enqueue(format!("p{n}").as_bytes(), "").unwrap();
        }
        if let Some(leasing) = h.q().leasing() {
            let claimed = leasing.claim(1, Duration::from_secs(600), false).unwrap();
            assert_eq!(claimed.len(), 1);
        }
        let mut top = Top::new(TopOptions::default());
        top.refresh(reader, h.now()).unwrap();
        let leased: Vec<u64> = top
            .rows()
            .iter()
            .filter(|r| matches!(r.row.retry, spool::ops::list::RetryState::Leased(..)))
            .map(|r| r.row.id)
            .collect();
        if h.backend == Backend::Postgres {
            assert_eq!(leased, vec![1]);
            assert_eq!(top.header().leased, Some(1));
        } else {
            assert!(leased.is_empty());
        }
    });
}

#[test]
fn shapes_can_be_computed_elsewhere_and_handed_over() {
    each_backend(|h, reader| {
        five(h);
        let opts = TopOptions {
            inline_shapes: false,
            ..TopOptions::default()
        };
        let mut top = Top::new(opts.clone());
        top.refresh(reader, h.now()).unwrap();
        assert!(top.shape().is_none(), "not computed inside the refresh");
        assert!(top.shapes_due());
        top.shapes_started();
        assert!(!top.shapes_due(), "not asked for twice");
        let shapes = read_shapes(reader.queue(), &opts, h.now()).unwrap();
        top.set_shapes(shapes);
        assert_eq!(top.shape().unwrap().rows[0].total, 3);
        assert_eq!(top.dead_reasons().unwrap().rows[0].total, 1);
        assert!(!top.shapes_due());
    });
}
