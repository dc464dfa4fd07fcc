//! The `Queue` contract as tests, written once and run against every
//! backend: memory, NDJSON file and SQLite, and the two durable ones again
//! in a "reopen" flavour that closes and reopens the spool between the
//! steps of every case (so every step must have reached the disk).
//!
//! Each case follows a sentence of the docs of `spool::Queue` or of the
//! reference `IOfflineQueue` section; the comment above it names which.

mod common;

use common::{Backend, Harness, T0};
use spool::{
    AttemptUpdate, DeadLetter, Delivery, DepthLimit, EnqueueOptions, Enqueued, Error, ErrorKind,
    Evidence, Imported, Item, ItemId, NewItem, OnFull, PushAck, PushState, QueueStats, Record,
    RecordState, Spool, Timestamp, PAGE_SIZE, PRUNE_BATCH,
};
use std::collections::BTreeMap;
use std::time::Duration;

/// One flavour of the suite.
#[derive(Clone, Copy, Debug)]
struct Setup {
    backend: Backend,
    /// Reopen the spool at every `h.step()`.
    reopen: bool,
}

impl Setup {
    fn open(self, max_depth: Option<u64>) -> Harness {
        Harness::new(self.backend, max_depth).reopening(self.reopen)
    }
}

macro_rules! conformance {
    (all: [$($case:ident),* $(,)?], durable: [$($dcase:ident),* $(,)?] $(,)?) => {
        conformance!(@flavour memory, Backend::Memory, false, []; $($case),*);
        conformance!(@flavour file, Backend::File, false, []; $($case,)* $($dcase),*);
        conformance!(@flavour file_reopen, Backend::File, true, []; $($case,)* $($dcase),*);
        conformance!(@flavour sqlite, Backend::Sqlite, false, []; $($case,)* $($dcase),*);
        conformance!(@flavour sqlite_reopen, Backend::Sqlite, true, []; $($case,)* $($dcase),*);
        conformance!(@pg postgres, Backend::Postgres, false; $($case,)* $($dcase),*);
        conformance!(@pg postgres_reopen, Backend::Postgres, true; $($case,)* $($dcase),*);
    };
    (@pg $flavour:ident, $backend:expr, $reopen:expr; $($case:ident),* $(,)?) => {
        mod $flavour {
            use super::*;
            $(
                #[test]
                fn $case() {
                    if common::pg_url(concat!(stringify!($flavour), "::", stringify!($case))).is_none() {
                        return;
                    }
                    super::$case(Setup { backend: $backend, reopen: $reopen });
                }
            )*
        }
    };
    (@flavour $flavour:ident, $backend:expr, $reopen:expr, $attrs:tt; $($case:ident),* $(,)?) => {
        mod $flavour {
            use super::*;
            $( conformance!(@case $case, $backend, $reopen, $attrs); )*
        }
    };
    (@case $case:ident, $backend:expr, $reopen:expr, [$(#[$attr:meta])*]) => {
        #[test]
        $(#[$attr])*
        fn $case() {
            super::$case(Setup { backend: $backend, reopen: $reopen });
        }
    };
}

/// The ledger-policy cases (SPEC §9: ordering groups, coalescing,
/// drop-oldest), on every backend and flavour.
macro_rules! policies {
    (flavours: [$($flavour:ident = $backend:expr, $reopen:expr);* $(;)?], cases: $cases:tt $(,)?) => {
        $( policies!(@flavour $flavour, $backend, $reopen, $cases); )*
    };
    (@flavour $flavour:ident, $backend:expr, $reopen:expr, [$($case:ident),* $(,)?]) => {
        mod $flavour {
            use super::*;
            $(
                #[test]
                fn $case() {
                    if matches!($backend, Backend::Postgres)
                        && common::pg_url(concat!(stringify!($flavour), "::", stringify!($case))).is_none()
                    {
                        return;
                    }
                    super::$case(Setup { backend: $backend, reopen: $reopen });
                }
            )*
        }
    };
}

policies!(
    flavours: [
        policies_memory = Backend::Memory, false;
        policies_sqlite = Backend::Sqlite, false;
        policies_sqlite_reopen = Backend::Sqlite, true;
        policies_file = Backend::File, false;
        policies_file_reopen = Backend::File, true;
        policies_postgres = Backend::Postgres, false;
        policies_postgres_reopen = Backend::Postgres, true;
    ],
    cases: [
        groups_and_coalesce_keys_are_kept,
        coalescing_replaces_never_attempted_items_only,
        coalescing_within_a_batch_and_against_dedup,
        coalescing_leaves_in_flight_items,
        drop_oldest_evicts_the_oldest_item_not_held_nor_in_flight,
        drop_oldest_with_nothing_to_evict_is_full,
        drop_oldest_in_a_batch,
        on_full_is_remembered,
        retain_is_remembered,
        retention_keeps_delivered_items_with_their_evidence,
        a_retained_record_keeps_every_field_of_its_item,
        retained_keys_dedup_within_the_window_only,
        without_retention_delivered_items_are_deleted,
        retention_off_prunes_what_was_kept,
        pruning_goes_in_bounded_batches,
        records_delivered_out_of_order_expire_on_time,
        a_record_delivered_below_a_pruned_one_expires_too,
        push_acks_are_retained_with_the_watermark,
        a_push_ack_prunes_expired_records,
        a_refusing_push_ack_prunes_expired_records,
        dead_letters_are_not_delivered,
        delivered_records_import_and_dedup,
        importing_twice_adds_nothing_twice,
        the_due_rule_leaves_out_held_waiting_and_group_waiting_items,
        groups_and_coalesce_keys_travel_through_a_receiver,
    ],
);

conformance!(
    all: [
        ids_grow_monotonically,
        ids_are_not_reused_after_done,
        ids_are_not_reused_after_dead_letter_and_purge,
        drain_is_non_destructive_and_in_enqueue_order,
        drain_spans_pages,
        enqueue_times_follow_the_clock,
        mark_done_removes_and_ignores_unknown_ids,
        repeated_ids_in_one_call_act_once,
        set_attempts_persists,
        record_attempt_persists,
        size_counts_pending_and_held,
        depth_bound_rejects_the_newest,
        depth_bound_is_remembered,
        depth_bound_below_current_depth_evicts_nothing,
        depth_override_applies_to_one_call,
        dedup_first_write_wins,
        empty_key_never_dedups,
        mark_done_releases_the_key,
        dead_letter_releases_the_key,
        dedup_survives_reopen,
        dedup_hit_succeeds_on_a_full_spool,
        keys_are_stored_verbatim,
        batch_is_atomic,
        batch_repeated_key_dedups_to_the_first,
        large_batch_keeps_every_item_in_order,
        held_items_stay_pending,
        page_after_and_limit,
        get_finds_only_pending_items,
        dead_letter_moves_the_item,
        dead_page_and_count,
        requeue_restores_under_the_same_id,
        requeue_key_conflict_changes_nothing,
        requeue_over_the_bound_changes_nothing,
        purge_deletes_dead_letters_only,
        import_keeps_ids_above_high_water,
        import_dedups_pending_keys,
        import_with_a_malformed_record_changes_nothing,
        keys_with_a_nul_byte_are_refused,
        stats_numbers,
        due_count_leaves_out_held_and_waiting_items,
        next_retry_after_is_the_earliest_waiting_item_not_held,
        uuid_is_stable_and_well_formed,
        payload_bytes_round_trip,
        large_payload_round_trips,
        push_numbers_follow_send_order_from_one,
        push_ack_is_cumulative_clamped_and_never_goes_back,
        a_long_acked_range_keeps_the_counts,
        push_rejects_are_dead_lettered_with_the_reason,
        in_flight_items_cannot_be_held,
        in_flight_items_removed_otherwise_leave_skips,
        requeued_dead_letters_are_new_entries,
        regenerated_uuid_renumbers_what_is_in_flight,
        import_drops_push_numbers,
        received_entries_are_enqueued_once_with_their_keys,
        a_long_request_dedups_keys_within_itself,
        a_request_of_large_payloads_is_stored_whole,
        received_rejects_are_reported_until_acknowledged,
        a_failed_receive_changes_nothing,
        push_clients_are_counted_and_read_from_a_second_handle,
        a_full_receiving_spool_stops_the_batch,
        a_reused_number_with_other_content_is_refused_after_reopen,
        one_receive_commits_many_requests,
        received_keys_are_scoped_per_sender,
        a_received_coalescing_entry_needs_room_under_the_bound,
        received_skips_store_nothing,
        a_streamed_batch_is_enqueue_batch_without_the_memory,
        a_streamed_batch_that_fails_stores_nothing,
        a_streamed_import_that_fails_stores_nothing,
        adopt_identity_takes_the_uuid_and_push_state,
        adopt_identity_is_refused_unless_fresh,
        an_adopting_import_keeps_numbers_above_the_watermark,
        a_same_uuid_import_merges_the_push_state,
        another_uuid_import_ignores_the_header,
        shape_counts_pending_items_by_error_class_and_age,
        shape_counts_each_state,
        shape_counts_by_group_attempts_and_key_prefix,
    ],
    // Cases about paths and files, which the memory backend has not.
    durable: [
        open_options_bound_applies_only_when_creating,
        read_only_open_changes_nothing,
    ],
);

// ---------------------------------------------------------------- helpers

fn enq(h: &Harness, payload: &[u8], key: &str) -> Enqueued {
    h.q().enqueue(payload, key).unwrap_or_else(|e| {
        panic!(
            "enqueue {:?} key {key:?}: {e}",
            String::from_utf8_lossy(payload)
        )
    })
}

/// Enqueue a fresh item and return its id.
fn add(h: &Harness, payload: &str, key: &str) -> ItemId {
    let e = enq(h, payload.as_bytes(), key);
    assert!(
        !e.deduplicated,
        "{payload:?} with key {key:?} was a dedup hit"
    );
    e.id
}

fn drain(h: &Harness) -> Vec<Item> {
    h.q().drain().expect("drain")
}

fn ids(items: &[Item]) -> Vec<ItemId> {
    items.iter().map(|i| i.id).collect()
}

fn payloads(items: &[Item]) -> Vec<Vec<u8>> {
    items.iter().map(|i| i.payload.clone()).collect()
}

fn dead(h: &Harness) -> Vec<DeadLetter> {
    h.q().dead_page(0, 100_000).expect("dead_page")
}

fn get(h: &Harness, id: ItemId) -> Item {
    h.q()
        .get(id)
        .expect("get")
        .unwrap_or_else(|| panic!("item {id} is not pending"))
}

fn batch(h: &Harness, items: &[(&str, &str)], limit: DepthLimit) -> spool::Result<Vec<Enqueued>> {
    let items: Vec<NewItem> = items.iter().map(|(p, k)| NewItem::new(*p, *k)).collect();
    h.q()
        .enqueue_batch(&items, &EnqueueOptions { depth_limit: limit })
}

fn assert_full<T: std::fmt::Debug>(r: spool::Result<T>, max_depth: u64, depth: u64) {
    match r {
        Err(Error::QueueFull {
            max_depth: m,
            depth: d,
        }) => {
            assert_eq!(
                (m, d),
                (max_depth, depth),
                "QueueFull carries (max_depth, depth)"
            );
            let e = Error::QueueFull {
                max_depth: m,
                depth: d,
            };
            assert_eq!(e.kind(), ErrorKind::Temporary);
        }
        other => {
            panic!("expected QueueFull {{ max_depth: {max_depth}, depth: {depth} }}, got {other:?}")
        }
    }
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn fresh(id: ItemId, payload: &str, key: &str, at: Timestamp) -> Item {
    Item::new(id, payload.as_bytes().to_vec(), key.to_string(), at)
}

// ---------------------------------------------------------------- ids

/// `high_water`: 0 for a new spool; ids of new items are always greater;
/// `ItemId`: ids grow monotonically.
fn ids_grow_monotonically(s: Setup) {
    let mut h = s.open(None);
    assert_eq!(h.q().kind(), s.backend.kind());
    assert_eq!(
        h.q().high_water().unwrap(),
        0,
        "a new spool has issued no id"
    );
    let mut last = 0;
    for i in 0..6 {
        let key = if i % 2 == 0 {
            String::new()
        } else {
            format!("k{i}")
        };
        let id = add(&h, &format!("p{i}"), &key);
        assert!(id > last, "id {id} after {last}");
        last = id;
        assert_eq!(h.q().high_water().unwrap(), id);
        h.step();
    }
    let b = batch(&h, &[("x", ""), ("y", ""), ("z", "")], DepthLimit::Stored).unwrap();
    assert!(
        b[0].id > last && b[0].id < b[1].id && b[1].id < b[2].id,
        "{b:?}"
    );
    h.step();
    assert_eq!(h.q().high_water().unwrap(), b[2].id);
}

/// Ids are never reused, not even after the item is done, and not after
/// two restarts (the reference's regression: enqueue 1 and 2, done 2,
/// restart, restart, and the next enqueue reissued 2).
fn ids_are_not_reused_after_done(s: Setup) {
    let mut h = s.open(None);
    let a = add(&h, "a", "");
    let b = add(&h, "b", "kb");
    assert_eq!(h.q().mark_done(&[b]).unwrap(), vec![true]);
    h.step();
    h.reopen();
    h.reopen();
    assert_eq!(h.q().high_water().unwrap(), b);
    let c = add(&h, "c", "kb");
    assert!(c > b, "id {c} reissued (b was {b})");
    assert_eq!(h.q().mark_done(&[a, c]).unwrap(), vec![true, true]);
    h.reopen();
    h.reopen();
    assert_eq!(h.q().size().unwrap(), 0);
    assert_eq!(h.q().high_water().unwrap(), c);
    let d = add(&h, "d", "");
    assert!(d > c, "id {d} reissued (c was {c})");
}

/// Ids are never reused after dead-lettering, nor after purging the dead
/// letter.
fn ids_are_not_reused_after_dead_letter_and_purge(s: Setup) {
    let mut h = s.open(None);
    let a = add(&h, "a", "");
    let b = add(&h, "b", "");
    assert!(h.q().dead_letter(b, "gone").unwrap());
    h.step();
    h.reopen();
    let c = add(&h, "c", "");
    assert!(c > b);
    assert!(h.q().dead_letter(c, "gone").unwrap());
    assert_eq!(h.q().purge(&[b, c]).unwrap(), vec![true, true]);
    assert_eq!(h.q().mark_done(&[a]).unwrap(), vec![true]);
    h.reopen();
    h.reopen();
    assert_eq!(h.q().high_water().unwrap(), c);
    let d = add(&h, "d", "");
    assert!(d > c, "id {d} reissued after purge (c was {c})");
}

// ---------------------------------------------------------------- drain

/// `drain`: every pending item in enqueue order, without removing any;
/// safe to call several times. A fresh item has no attempts, no retry
/// time, no error, is not held, and carries its payload and key.
fn drain_is_non_destructive_and_in_enqueue_order(s: Setup) {
    let mut h = s.open(None);
    assert!(drain(&h).is_empty());
    let mut want = Vec::new();
    for (i, key) in ["", "k1", "", "k2", ""].iter().enumerate() {
        let payload = format!("payload {i}");
        let id = add(&h, &payload, key);
        want.push(fresh(id, &payload, key, h.now()));
        h.clock.advance(secs(7));
        h.step();
    }
    let first = drain(&h);
    assert_eq!(first, want);
    h.step();
    assert_eq!(drain(&h), want, "a second drain sees the same items");
    assert_eq!(h.q().size().unwrap(), 5, "drain removed nothing");
}

/// `drain` returns everything even when it spans several pages, and
/// `page` with a huge limit returns everything.
fn drain_spans_pages(s: Setup) {
    let mut h = s.open(None);
    let n = 2 * PAGE_SIZE + 3;
    let items: Vec<NewItem> = (0..n)
        .map(|i| {
            NewItem::new(
                format!("{i}"),
                if i % 3 == 0 {
                    format!("k{i}")
                } else {
                    String::new()
                },
            )
        })
        .collect();
    let res = h
        .q()
        .enqueue_batch(&items, &EnqueueOptions::default())
        .unwrap();
    assert_eq!(res.len(), n);
    h.step();
    let all = drain(&h);
    assert_eq!(all.len(), n);
    assert_eq!(ids(&all), res.iter().map(|e| e.id).collect::<Vec<_>>());
    for (i, it) in all.iter().enumerate() {
        assert_eq!(it.payload, format!("{i}").into_bytes());
    }
    assert_eq!(h.q().page(0, usize::MAX).unwrap(), all);
    assert_eq!(h.q().size().unwrap(), n as u64);
}

/// `enqueued_at`: when the item was enqueued, at second precision.
fn enqueue_times_follow_the_clock(s: Setup) {
    let mut h = s.open(None);
    let a = add(&h, "a", "");
    h.clock.advance(Duration::from_millis(61_750));
    let b = add(&h, "b", "");
    h.step();
    assert_eq!(get(&h, a).enqueued_at, Some(T0));
    assert_eq!(
        get(&h, b).enqueued_at,
        Some(Timestamp::from_secs(T0.as_secs() + 61)),
        "second precision, rounded down"
    );
}

// ---------------------------------------------------------------- mark_done

/// `mark_done`: removes pending items in one commit, per id whether it
/// was pending; unknown ids are a no-op (reference: "No-op if not
/// found"). A dead letter is not pending.
fn mark_done_removes_and_ignores_unknown_ids(s: Setup) {
    let mut h = s.open(None);
    assert_eq!(h.q().mark_done(&[1]).unwrap(), vec![false], "empty spool");
    assert_eq!(h.q().mark_done(&[]).unwrap(), Vec::<bool>::new());
    let a = add(&h, "a", "");
    let b = add(&h, "b", "");
    let c = add(&h, "c", "");
    let d = add(&h, "d", "");
    let x = add(&h, "x", "");
    assert!(h.q().dead_letter(x, "dead").unwrap());
    h.step();
    assert_eq!(
        h.q().mark_done(&[999, d, b, x]).unwrap(),
        vec![false, true, true, false]
    );
    h.step();
    assert_eq!(ids(&drain(&h)), vec![a, c]);
    assert_eq!(h.q().mark_done(&[b]).unwrap(), vec![false], "already done");
    assert_eq!(h.q().size().unwrap(), 2);
    assert_eq!(h.q().dead_count().unwrap(), 1, "the dead letter stays");
    assert_eq!(h.q().high_water().unwrap(), x, "mark_done issues no id");
}

/// An id named twice in one call acts once: one removal, one requeue
/// (counted once against the bound), one purge. What such a call returns
/// for the repeat is left open by the contract and not checked here.
fn repeated_ids_in_one_call_act_once(s: Setup) {
    let mut h = s.open(Some(3));
    let a = add(&h, "a", "ka");
    let b = add(&h, "b", "");
    let c = add(&h, "c", "");
    assert_eq!(h.q().mark_done(&[b, b]).unwrap().first(), Some(&true));
    h.step();
    assert_eq!(ids(&drain(&h)), vec![a, c]);
    assert_eq!(h.q().set_held(&[c, c], true).unwrap().first(), Some(&true));
    h.q().dead_letter(a, "x").unwrap();
    add(&h, "d", "");
    h.step();
    // Depth 2 under a bound of 3: one requeue fits, two would not.
    assert_eq!(h.q().requeue(&[a, a, a]).unwrap().first(), Some(&true));
    h.step();
    assert_eq!(h.q().size().unwrap(), 3);
    assert_eq!(drain(&h).iter().filter(|i| i.id == a).count(), 1);
    assert_eq!(h.q().dead_count().unwrap(), 0);
    assert!(enq(&h, b"dup", "ka").deduplicated);
    h.q().dead_letter(a, "x").unwrap();
    h.q().dead_letter(c, "x").unwrap();
    assert_eq!(h.q().purge(&[c, c]).unwrap().first(), Some(&true));
    h.step();
    assert_eq!(h.q().dead_count().unwrap(), 1);
    assert!(h.q().dead_get(a).unwrap().is_some());
}

// ---------------------------------------------------------------- attempts

/// `set_attempts`: sets the durable attempt count; returns whether the
/// item exists; changes nothing else.
fn set_attempts_persists(s: Setup) {
    let mut h = s.open(None);
    let a = add(&h, "a", "ka");
    let b = add(&h, "b", "");
    let before = get(&h, a);
    assert!(h.q().set_attempts(a, 3).unwrap());
    h.step();
    assert_eq!(
        get(&h, a),
        Item {
            attempts: 3,
            ..before.clone()
        }
    );
    assert_eq!(get(&h, b).attempts, 0, "other items keep theirs");
    assert!(h.q().set_attempts(a, u32::MAX).unwrap());
    h.step();
    assert_eq!(get(&h, a).attempts, u32::MAX);
    assert!(h.q().set_attempts(a, 0).unwrap());
    h.step();
    assert_eq!(drain(&h)[0], before);
    assert!(!h.q().set_attempts(999, 1).unwrap(), "unknown id");
    assert_eq!(h.q().high_water().unwrap(), b);
}

/// `record_attempt`: attempts, next retry time and last error in one
/// commit; returns whether the item exists.
fn record_attempt_persists(s: Setup) {
    let mut h = s.open(None);
    let a = add(&h, "a", "ka");
    let b = add(&h, "b", "");
    assert_eq!(h.q().set_held(&[b], true).unwrap(), vec![true]);
    let retry = Timestamp::from_millis(T0.as_millis() + 90_500);
    let err = "HTTP 503: \"busy\"\nretry \\later\u{2028}\t\u{1} ☃";
    let upd = AttemptUpdate {
        attempts: 2,
        next_retry_at: Some(retry),
        last_error: Some(err.to_string()),
    };
    let before = get(&h, a);
    assert!(h.q().record_attempt(a, &upd).unwrap());
    h.step();
    let want = Item {
        attempts: 2,
        next_retry_at: Some(retry),
        last_error: Some(err.to_string()),
        ..before.clone()
    };
    assert_eq!(get(&h, a), want);
    // A held item stays held.
    assert!(h.q().record_attempt(b, &upd).unwrap());
    h.step();
    assert!(get(&h, b).held);
    assert_eq!(get(&h, b).next_retry_at, Some(retry));
    // An update without retry time or error clears them.
    let clear = AttemptUpdate {
        attempts: 3,
        next_retry_at: None,
        last_error: None,
    };
    assert!(h.q().record_attempt(a, &clear).unwrap());
    h.step();
    assert_eq!(
        get(&h, a),
        Item {
            attempts: 3,
            ..before
        }
    );
    assert!(!h.q().record_attempt(999, &upd).unwrap(), "unknown id");
    assert_eq!(h.q().size().unwrap(), 2);
}

// ---------------------------------------------------------------- size

/// `size`: pending items, held ones included.
fn size_counts_pending_and_held(s: Setup) {
    let mut h = s.open(None);
    assert_eq!(h.q().size().unwrap(), 0);
    let a = add(&h, "a", "");
    let b = add(&h, "b", "k");
    let c = add(&h, "c", "");
    enq(&h, b"dup", "k");
    h.step();
    assert_eq!(h.q().size().unwrap(), 3, "a dedup hit adds nothing");
    h.q().set_held(&[a], true).unwrap();
    h.step();
    assert_eq!(h.q().size().unwrap(), 3, "held items count");
    h.q().mark_done(&[b]).unwrap();
    h.step();
    assert_eq!(h.q().size().unwrap(), 2);
    h.q().dead_letter(c, "x").unwrap();
    h.step();
    assert_eq!(h.q().size().unwrap(), 1, "dead letters do not count");
    h.q().requeue(&[c]).unwrap();
    h.step();
    assert_eq!(h.q().size().unwrap(), 2);
    assert_eq!(h.q().size().unwrap(), drain(&h).len() as u64);
}

// ---------------------------------------------------------------- depth bound

/// Reject-newest: an enqueue that would pass the bound fails with
/// `QueueFull { max_depth, depth }` and stores nothing; nothing is
/// evicted.
fn depth_bound_rejects_the_newest(s: Setup) {
    let mut h = s.open(Some(2));
    assert_eq!(h.q().max_depth().unwrap(), Some(2));
    let a = add(&h, "a", "");
    h.step();
    let b = add(&h, "b", "kb");
    h.step();
    assert_full(h.q().enqueue(b"c", ""), 2, 2);
    assert_full(h.q().enqueue(b"c", "kc"), 2, 2);
    h.step();
    assert_eq!(
        ids(&drain(&h)),
        vec![a, b],
        "nothing evicted, nothing stored"
    );
    assert_eq!(
        h.q().high_water().unwrap(),
        b,
        "a rejected enqueue issues no id"
    );
    // The rejected key was not stored: it is not a dedup candidate.
    h.q().mark_done(&[a]).unwrap();
    h.step();
    let c = enq(&h, b"c2", "kc");
    assert!(!c.deduplicated && c.id > b);
    assert_full(h.q().enqueue(b"d", ""), 2, 2);
    // Held items count against the bound.
    h.q().set_held(&[b, c.id], true).unwrap();
    assert_full(h.q().enqueue(b"d", ""), 2, 2);
}

/// The depth bound is remembered by the spool for every later call.
fn depth_bound_is_remembered(s: Setup) {
    let mut h = s.open(Some(1));
    add(&h, "a", "");
    h.reopen();
    assert_eq!(h.q().max_depth().unwrap(), Some(1));
    assert_full(h.q().enqueue(b"b", ""), 1, 1);
    h.q().set_max_depth(Some(3)).unwrap();
    h.reopen();
    assert_eq!(h.q().max_depth().unwrap(), Some(3));
    add(&h, "b", "");
    add(&h, "c", "");
    assert_full(h.q().enqueue(b"d", ""), 3, 3);
    h.q().set_max_depth(None).unwrap();
    h.reopen();
    assert_eq!(h.q().max_depth().unwrap(), None);
    for i in 0..5 {
        add(&h, &format!("more {i}"), "");
    }
    h.step();
    assert_eq!(h.q().size().unwrap(), 8);
    assert_eq!(h.q().stats(T0).unwrap().max_depth, None);
}

/// `OpenOptions::max_depth` is "the depth bound a newly created spool
/// remembers": opening an existing spool with another bound (or none)
/// leaves the remembered one alone.
fn open_options_bound_applies_only_when_creating(s: Setup) {
    let mut h = s.open(Some(2));
    add(&h, "a", "");
    add(&h, "b", "");
    for bound in [Some(10), None] {
        let mut opts = h.reopen_options();
        opts.max_depth = bound;
        let other = Spool::open(&h.path, &opts).expect("open with another bound");
        assert_eq!(other.max_depth().unwrap(), Some(2), "opened with {bound:?}");
        assert_full(other.enqueue(b"c", ""), 2, 2);
    }
    h.reopen();
    assert_eq!(h.q().max_depth().unwrap(), Some(2));
    assert_full(h.q().enqueue(b"c", ""), 2, 2);
}

/// A bound set below the current depth evicts nothing, and a rejection
/// reports the actual depth.
fn depth_bound_below_current_depth_evicts_nothing(s: Setup) {
    let mut h = s.open(None);
    let all: Vec<ItemId> = (0..4).map(|i| add(&h, &format!("{i}"), "")).collect();
    h.q().set_max_depth(Some(2)).unwrap();
    h.step();
    assert_eq!(ids(&drain(&h)), all);
    assert_full(h.q().enqueue(b"x", ""), 2, 4);
    h.q().set_max_depth(Some(0)).unwrap();
    h.q().mark_done(&all).unwrap();
    h.step();
    assert_full(h.q().enqueue(b"x", ""), 0, 0);
    assert_eq!(h.q().size().unwrap(), 0);
}

/// `DepthLimit::Override` applies its bound to one call only.
fn depth_override_applies_to_one_call(s: Setup) {
    let mut h = s.open(Some(1));
    add(&h, "a", "");
    let r = batch(&h, &[("b", ""), ("c", "")], DepthLimit::Override(Some(3))).unwrap();
    assert_eq!(r.len(), 2);
    h.step();
    assert_eq!(h.q().size().unwrap(), 3);
    assert_full(batch(&h, &[("d", "")], DepthLimit::Override(Some(3))), 3, 3);
    batch(&h, &[("d", ""), ("e", "")], DepthLimit::Override(None)).unwrap();
    h.step();
    assert_eq!(
        h.q().max_depth().unwrap(),
        Some(1),
        "the stored bound is unchanged"
    );
    assert_full(h.q().enqueue(b"f", ""), 1, 5);
    assert_full(batch(&h, &[("f", "")], DepthLimit::Stored), 1, 5);
    // An override can be stricter than the stored bound.
    h.q().set_max_depth(Some(100)).unwrap();
    assert_full(batch(&h, &[("g", "")], DepthLimit::Override(Some(5))), 5, 5);
    assert_eq!(h.q().size().unwrap(), 5);
}

// ---------------------------------------------------------------- dedup

/// A dedup hit stores nothing, keeps the first payload and returns the
/// existing id with `deduplicated: true`.
fn dedup_first_write_wins(s: Setup) {
    let mut h = s.open(None);
    let first = enq(&h, b"first", "op-1");
    assert!(!first.deduplicated);
    h.step();
    let again = enq(&h, b"corrected", "op-1");
    assert_eq!(
        again,
        Enqueued {
            id: first.id,
            deduplicated: true,
            ..Default::default()
        }
    );
    h.step();
    let all = drain(&h);
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].payload, b"first");
    assert_eq!(
        h.q().high_water().unwrap(),
        first.id,
        "a dedup hit issues no id"
    );
    // The hit does not touch the stored item.
    h.q().set_attempts(first.id, 4).unwrap();
    enq(&h, b"third", "op-1");
    h.step();
    assert_eq!(get(&h, first.id).attempts, 4);
    // Another key is another item.
    let other = enq(&h, b"first", "op-2");
    assert!(!other.deduplicated && other.id > first.id);
}

/// An empty key is never a dedup token.
fn empty_key_never_dedups(s: Setup) {
    let mut h = s.open(Some(10));
    let a = enq(&h, b"same", "");
    h.step();
    let b = enq(&h, b"same", "");
    assert!(!a.deduplicated && !b.deduplicated);
    assert_ne!(a.id, b.id);
    let r = batch(&h, &[("same", ""), ("same", "")], DepthLimit::Stored).unwrap();
    assert!(r.iter().all(|e| !e.deduplicated));
    h.step();
    assert_eq!(h.q().size().unwrap(), 4);
}

/// `mark_done` releases the key.
fn mark_done_releases_the_key(s: Setup) {
    let mut h = s.open(None);
    let a = enq(&h, b"one", "k");
    h.q().mark_done(&[a.id]).unwrap();
    h.step();
    let b = enq(&h, b"two", "k");
    assert!(!b.deduplicated, "the key was released");
    assert!(b.id > a.id);
    h.step();
    assert_eq!(payloads(&drain(&h)), vec![b"two".to_vec()]);
    assert!(
        enq(&h, b"three", "k").deduplicated,
        "the new item holds the key"
    );
}

/// Dead-lettering releases the key.
fn dead_letter_releases_the_key(s: Setup) {
    let mut h = s.open(None);
    let a = enq(&h, b"one", "k");
    assert!(h.q().dead_letter(a.id, "bad").unwrap());
    h.step();
    let b = enq(&h, b"two", "k");
    assert!(!b.deduplicated, "a dead letter is no dedup candidate");
    assert!(b.id > a.id);
    h.step();
    assert_eq!(h.q().dead_get(a.id).unwrap().unwrap().item.key, "k");
    assert!(enq(&h, b"three", "k").deduplicated);
}

/// A durable queue still recognises the key after a reopen.
fn dedup_survives_reopen(s: Setup) {
    let mut h = s.open(None);
    let a = enq(&h, b"one", "k");
    h.reopen();
    assert_eq!(
        enq(&h, b"two", "k"),
        Enqueued {
            id: a.id,
            deduplicated: true,
            ..Default::default()
        }
    );
    h.reopen();
    assert_eq!(payloads(&drain(&h)), vec![b"one".to_vec()]);
}

/// A dedup hit succeeds even on a full spool, since it stores nothing.
fn dedup_hit_succeeds_on_a_full_spool(s: Setup) {
    let mut h = s.open(Some(1));
    let a = enq(&h, b"one", "k");
    h.step();
    assert_eq!(
        enq(&h, b"two", "k"),
        Enqueued {
            id: a.id,
            deduplicated: true,
            ..Default::default()
        }
    );
    let r = batch(&h, &[("x", "k"), ("y", "k")], DepthLimit::Stored).unwrap();
    assert!(r.iter().all(|e| e.deduplicated && e.id == a.id), "{r:?}");
    assert_full(h.q().enqueue(b"three", ""), 1, 1);
    assert_full(
        batch(&h, &[("x", "k"), ("y", "")], DepthLimit::Stored),
        1,
        1,
    );
    h.step();
    assert_eq!(h.q().size().unwrap(), 1);
}

/// The queue stores the key verbatim and never interprets it: keys that
/// differ in any byte are different keys. (A NUL byte is the one byte no
/// key may hold: `keys_with_a_nul_byte_are_refused`.)
fn keys_are_stored_verbatim(s: Setup) {
    let mut h = s.open(None);
    let long = "k".repeat(10_000);
    let keys = [
        "k",
        "K",
        "k ",
        " k",
        "\"quoted\"",
        "back\\slash",
        "line\nbreak",
        "tab\tcr\r",
        "ctl\u{1}\u{1f}\u{7f}",
        "sep\u{2028}\u{2029}",
        "ünïcødé ☃ 🦀",
        "{\"op\":\"done\",\"id\":1}",
        long.as_str(),
    ];
    let mut want = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        let e = enq(&h, format!("p{i}").as_bytes(), k);
        assert!(!e.deduplicated, "key {k:?} collided with another");
        want.push((e.id, k.to_string()));
    }
    h.step();
    h.reopen();
    let got: Vec<(ItemId, String)> = drain(&h).into_iter().map(|i| (i.id, i.key)).collect();
    assert_eq!(got, want);
    for (id, k) in &want {
        assert_eq!(
            enq(&h, b"again", k),
            Enqueued {
                id: *id,
                deduplicated: true,
                ..Default::default()
            },
            "key {k:?}"
        );
    }
}

// ---------------------------------------------------------------- batch

/// A batch is one atomic commit: one that does not fit under the bound
/// stores nothing; an empty batch does nothing.
fn batch_is_atomic(s: Setup) {
    let mut h = s.open(Some(3));
    assert_eq!(batch(&h, &[], DepthLimit::Stored).unwrap(), vec![]);
    let a = add(&h, "a", "ka");
    let b = add(&h, "b", "");
    h.step();
    assert_full(
        batch(&h, &[("c", "kc"), ("d", "")], DepthLimit::Stored),
        3,
        2,
    );
    h.step();
    assert_eq!(
        ids(&drain(&h)),
        vec![a, b],
        "the failed batch stored nothing"
    );
    assert_eq!(h.q().high_water().unwrap(), b);
    assert!(
        !enq(&h, b"c", "kc").deduplicated,
        "its keys were not stored"
    );
    h.q().mark_done(&[a]).unwrap();
    // One free slot: one new item and one dedup hit fit.
    let r = batch(&h, &[("e", "kc"), ("f", "")], DepthLimit::Stored).unwrap();
    assert!(r[0].deduplicated && !r[1].deduplicated, "{r:?}");
    h.step();
    assert_eq!(h.q().size().unwrap(), 3);
    assert_eq!(
        payloads(&drain(&h)),
        vec![b"b".to_vec(), b"c".to_vec(), b"f".to_vec()]
    );
}

/// A key repeated within a batch dedups against the batch's first item
/// with that key; results come in input order.
fn batch_repeated_key_dedups_to_the_first(s: Setup) {
    let mut h = s.open(None);
    let pre = add(&h, "pre", "kp");
    let r = batch(
        &h,
        &[
            ("a", "k"),
            ("b", ""),
            ("c", "k"),
            ("d", "k2"),
            ("e", "kp"),
            ("f", "k2"),
            ("g", ""),
        ],
        DepthLimit::Stored,
    )
    .unwrap();
    assert_eq!(r.len(), 7);
    let (ia, ib, id, ig) = (r[0].id, r[1].id, r[3].id, r[6].id);
    assert!(pre < ia && ia < ib && ib < id && id < ig, "{r:?}");
    let want = vec![
        Enqueued {
            id: ia,
            deduplicated: false,
            ..Default::default()
        },
        Enqueued {
            id: ib,
            deduplicated: false,
            ..Default::default()
        },
        Enqueued {
            id: ia,
            deduplicated: true,
            ..Default::default()
        },
        Enqueued {
            id,
            deduplicated: false,
            ..Default::default()
        },
        Enqueued {
            id: pre,
            deduplicated: true,
            ..Default::default()
        },
        Enqueued {
            id,
            deduplicated: true,
            ..Default::default()
        },
        Enqueued {
            id: ig,
            deduplicated: false,
            ..Default::default()
        },
    ];
    assert_eq!(r, want);
    h.step();
    let all = drain(&h);
    assert_eq!(ids(&all), vec![pre, ia, ib, id, ig]);
    assert_eq!(
        payloads(&all),
        ["pre", "a", "b", "d", "g"].map(|p| p.as_bytes().to_vec())
    );
}

// ---------------------------------------------------------------- hold

/// A held item is kept, listed and counted (`held: true`) in size, drain
/// and page, and keeps its key for dedup; `set_held` returns per id
/// whether it was pending.
fn held_items_stay_pending(s: Setup) {
    let mut h = s.open(None);
    let a = add(&h, "a", "ka");
    let b = add(&h, "b", "");
    let x = add(&h, "x", "");
    h.q().dead_letter(x, "dead").unwrap();
    assert_eq!(
        h.q().set_held(&[a, 999, x], true).unwrap(),
        vec![true, false, false]
    );
    h.step();
    assert!(get(&h, a).held);
    assert!(!get(&h, b).held);
    assert_eq!(h.q().size().unwrap(), 2);
    let all = drain(&h);
    assert_eq!(ids(&all), vec![a, b]);
    assert!(all[0].held && !all[1].held);
    assert_eq!(h.q().page(0, 1).unwrap()[0], all[0]);
    assert_eq!(
        enq(&h, b"dup", "ka"),
        Enqueued {
            id: a,
            deduplicated: true,
            ..Default::default()
        },
        "a held item keeps its key"
    );
    assert_eq!(h.q().stats(T0).unwrap().held, 1);
    assert!(!h.q().dead_get(x).unwrap().unwrap().item.held);
    // Holding twice is fine; releasing restores the item as it was.
    assert_eq!(h.q().set_held(&[a], true).unwrap(), vec![true]);
    h.step();
    assert_eq!(h.q().set_held(&[a, b], false).unwrap(), vec![true, true]);
    h.step();
    assert_eq!(get(&h, a), fresh(a, "a", "ka", T0));
    assert_eq!(h.q().stats(T0).unwrap().held, 0);
}

// ---------------------------------------------------------------- page, get

/// `page(after, limit)`: up to `limit` pending items with `id > after`,
/// in id order.
fn page_after_and_limit(s: Setup) {
    let mut h = s.open(None);
    let i: Vec<ItemId> = (0..6).map(|n| add(&h, &format!("{n}"), "")).collect();
    h.q().mark_done(&[i[2]]).unwrap();
    h.q().dead_letter(i[4], "dead").unwrap();
    h.step();
    let page = |after, limit| ids(&h.q().page(after, limit).unwrap());
    assert_eq!(page(0, 2), vec![i[0], i[1]]);
    assert_eq!(page(i[1], 2), vec![i[3], i[5]], "skips done and dead items");
    assert_eq!(page(i[2], 1), vec![i[3]], "`after` need not be pending");
    assert_eq!(page(i[3], 10), vec![i[5]]);
    assert_eq!(page(i[5], 10), Vec::<ItemId>::new());
    assert_eq!(page(0, 0), Vec::<ItemId>::new());
    assert_eq!(page(ItemId::MAX, 10), Vec::<ItemId>::new());
    assert_eq!(page(0, usize::MAX), vec![i[0], i[1], i[3], i[5]]);
    assert_eq!(h.q().page(0, 10).unwrap(), drain(&h));
}

/// `get`: one pending item; `None` for unknown, done and dead ids.
fn get_finds_only_pending_items(s: Setup) {
    let mut h = s.open(None);
    let a = add(&h, "a", "ka");
    let b = add(&h, "b", "");
    let c = add(&h, "c", "");
    h.q().mark_done(&[b]).unwrap();
    h.q().dead_letter(c, "dead").unwrap();
    h.step();
    assert_eq!(h.q().get(a).unwrap(), Some(fresh(a, "a", "ka", T0)));
    assert_eq!(h.q().get(b).unwrap(), None, "done");
    assert_eq!(h.q().get(c).unwrap(), None, "dead");
    assert_eq!(h.q().get(999).unwrap(), None, "unknown");
    assert_eq!(h.q().get(0).unwrap(), None);
}

// ---------------------------------------------------------------- dead letters

/// `dead_letter`: moves a pending item to the dead-letter set with
/// `last_error` and the current time as its time of death, keeping the
/// item as it was (attempts included); returns whether it was pending.
fn dead_letter_moves_the_item(s: Setup) {
    let mut h = s.open(None);
    let a = add(&h, "payload", "ka");
    let retry = Timestamp::from_millis(T0.as_millis() + 30_250);
    h.q()
        .record_attempt(
            a,
            &AttemptUpdate {
                attempts: 4,
                next_retry_at: Some(retry),
                last_error: Some("503".into()),
            },
        )
        .unwrap();
    h.clock.advance(Duration::from_millis(45_500));
    h.step();
    assert!(h.q().dead_letter(a, "gave up: \"503\"\n").unwrap());
    let died = h.now();
    h.step();
    assert_eq!(h.q().size().unwrap(), 0);
    assert_eq!(h.q().get(a).unwrap(), None);
    assert_eq!(h.q().dead_count().unwrap(), 1);
    let want = DeadLetter {
        item: Item {
            attempts: 4,
            next_retry_at: Some(retry),
            last_error: Some("gave up: \"503\"\n".into()),
            ..fresh(a, "payload", "ka", T0)
        },
        dead_at: died,
    };
    assert_eq!(h.q().dead_get(a).unwrap(), Some(want.clone()));
    assert_eq!(dead(&h), vec![want]);
    assert!(!h.q().dead_letter(a, "again").unwrap(), "no longer pending");
    assert!(!h.q().dead_letter(999, "x").unwrap(), "unknown");
    assert_eq!(h.q().dead_get(999).unwrap(), None);
    assert_eq!(h.q().dead_count().unwrap(), 1);
    assert_eq!(h.q().high_water().unwrap(), a);
}

/// `dead_page(after, limit)` in id order (not order of death);
/// `dead_count`.
fn dead_page_and_count(s: Setup) {
    let mut h = s.open(None);
    assert_eq!(h.q().dead_count().unwrap(), 0);
    assert!(dead(&h).is_empty());
    let i: Vec<ItemId> = (0..5).map(|n| add(&h, &format!("{n}"), "")).collect();
    for &id in i.iter().rev() {
        if id != i[2] {
            assert!(h.q().dead_letter(id, &format!("e{id}")).unwrap());
            h.clock.advance(secs(1));
            h.step();
        }
    }
    assert_eq!(h.q().dead_count().unwrap(), 4);
    let page = |after, limit| -> Vec<ItemId> {
        h.q()
            .dead_page(after, limit)
            .unwrap()
            .into_iter()
            .map(|d| d.item.id)
            .collect()
    };
    assert_eq!(page(0, 100), vec![i[0], i[1], i[3], i[4]]);
    assert_eq!(page(0, 2), vec![i[0], i[1]]);
    assert_eq!(page(i[1], 1), vec![i[3]]);
    assert_eq!(page(i[2], 5), vec![i[3], i[4]]);
    assert_eq!(page(i[4], 5), Vec::<ItemId>::new());
    assert_eq!(page(0, 0), Vec::<ItemId>::new());
    assert_eq!(page(0, usize::MAX).len(), 4);
    let all = dead(&h);
    assert_eq!(
        all[0].item.last_error.as_deref(),
        Some(format!("e{}", i[0]).as_str())
    );
    assert!(
        all[0].dead_at > all[3].dead_at,
        "dead_at is each item's own time"
    );
    assert_eq!(ids(&drain(&h)), vec![i[2]]);
}

/// `requeue`: dead letters back to pending under their own ids, attempts
/// reset, next retry and hold cleared, keys kept; per id whether it was a
/// dead letter.
fn requeue_restores_under_the_same_id(s: Setup) {
    let mut h = s.open(None);
    let a = add(&h, "a", "ka");
    let b = add(&h, "b", "");
    let c = add(&h, "c", "");
    h.q()
        .record_attempt(
            a,
            &AttemptUpdate {
                attempts: 5,
                next_retry_at: Some(T0.saturating_add(secs(600))),
                last_error: Some("boom".into()),
            },
        )
        .unwrap();
    h.q().set_held(&[a], true).unwrap();
    h.clock.advance(secs(10));
    h.q().dead_letter(a, "exhausted").unwrap();
    h.q().dead_letter(b, "rejected").unwrap();
    h.step();
    assert_eq!(
        h.q().requeue(&[a, 999, c]).unwrap(),
        vec![true, false, false],
        "only dead letters are requeued"
    );
    h.step();
    assert_eq!(h.q().dead_count().unwrap(), 1);
    assert_eq!(h.q().dead_get(a).unwrap(), None);
    let item = get(&h, a);
    assert_eq!(item.id, a);
    assert_eq!(item.payload, b"a");
    assert_eq!(item.key, "ka");
    assert_eq!(item.attempts, 0);
    assert_eq!(item.next_retry_at, None);
    assert!(!item.held);
    assert_eq!(item.enqueued_at, Some(T0));
    assert_eq!(ids(&drain(&h)), vec![a, c], "enqueue (id) order");
    assert_eq!(
        enq(&h, b"dup", "ka"),
        Enqueued {
            id: a,
            deduplicated: true,
            ..Default::default()
        },
        "the requeued item carries its key again"
    );
    assert_eq!(h.q().requeue(&[a]).unwrap(), vec![false], "already pending");
    assert_eq!(h.q().requeue(&[]).unwrap(), Vec::<bool>::new());
    assert_eq!(h.q().requeue(&[b]).unwrap(), vec![true]);
    h.step();
    assert_eq!(ids(&drain(&h)), vec![a, b, c]);
    assert_eq!(h.q().high_water().unwrap(), c);
}

/// `requeue` fails, changing nothing, when a pending item already
/// carries a requeued item's key (two requeued items with one key would
/// do the same).
fn requeue_key_conflict_changes_nothing(s: Setup) {
    let mut h = s.open(None);
    let a = add(&h, "a", "k");
    let ok = add(&h, "ok", "");
    h.q().dead_letter(a, "x").unwrap();
    h.q().dead_letter(ok, "x").unwrap();
    let b = add(&h, "b", "k");
    h.step();
    let dead_before = dead(&h);
    assert!(
        h.q().requeue(&[ok, a]).is_err(),
        "pending {b} carries key k"
    );
    h.step();
    assert_eq!(dead(&h), dead_before, "nothing requeued, not even {ok}");
    assert_eq!(ids(&drain(&h)), vec![b]);
    // Two dead letters with one key cannot both be pending.
    h.q().mark_done(&[b]).unwrap();
    let c = add(&h, "c", "k");
    h.q().dead_letter(c, "x").unwrap();
    h.step();
    let dead_before = dead(&h);
    assert!(h.q().requeue(&[a, c]).is_err());
    h.step();
    assert_eq!(dead(&h), dead_before);
    assert_eq!(h.q().size().unwrap(), 0);
    // Without the conflict it works.
    assert_eq!(h.q().requeue(&[a, ok]).unwrap(), vec![true, true]);
    h.step();
    assert_eq!(ids(&drain(&h)), vec![a, ok]);
}

/// `requeue` fails, changing nothing, when the result would exceed the
/// stored depth bound.
fn requeue_over_the_bound_changes_nothing(s: Setup) {
    let mut h = s.open(Some(2));
    let a = add(&h, "a", "");
    let b = add(&h, "b", "");
    h.q().dead_letter(a, "x").unwrap();
    h.q().dead_letter(b, "x").unwrap();
    let c = add(&h, "c", "");
    h.step();
    assert_full(h.q().requeue(&[a, b]), 2, 1);
    h.step();
    assert_eq!(h.q().dead_count().unwrap(), 2);
    assert_eq!(ids(&drain(&h)), vec![c]);
    assert_eq!(h.q().requeue(&[b]).unwrap(), vec![true]);
    h.step();
    assert_full(h.q().requeue(&[a]), 2, 2);
    assert_eq!(ids(&drain(&h)), vec![b, c]);
}

/// `purge`: deletes dead letters for good; per id whether it was one.
fn purge_deletes_dead_letters_only(s: Setup) {
    let mut h = s.open(None);
    let a = add(&h, "a", "");
    let b = add(&h, "b", "kb");
    let c = add(&h, "c", "");
    h.q().dead_letter(a, "x").unwrap();
    h.q().dead_letter(b, "x").unwrap();
    h.step();
    assert_eq!(
        h.q().purge(&[a, 999, c]).unwrap(),
        vec![true, false, false],
        "a pending item is not purged"
    );
    h.step();
    assert_eq!(h.q().dead_count().unwrap(), 1);
    assert_eq!(h.q().dead_get(a).unwrap(), None);
    assert!(h.q().dead_get(b).unwrap().is_some());
    assert_eq!(ids(&drain(&h)), vec![c]);
    assert_eq!(h.q().purge(&[a]).unwrap(), vec![false], "already purged");
    assert_eq!(h.q().requeue(&[a]).unwrap(), vec![false]);
    assert_eq!(h.q().purge(&[]).unwrap(), Vec::<bool>::new());
}

// ---------------------------------------------------------------- import

fn record(id: ItemId, payload: &str, key: &str, state: RecordState) -> Record {
    let at = Timestamp::from_secs(1_600_000_000 + id as i64);
    let mut item = fresh(id, payload, key, at);
    item.attempts = id as u32 % 4;
    item.held = state == RecordState::Held;
    if id.is_multiple_of(2) {
        item.next_retry_at = Some(Timestamp::from_millis(at.as_millis() + 1_234));
        item.last_error = Some(format!("err {id}"));
    }
    Record {
        item,
        state,
        dead_at: (state == RecordState::Dead)
            .then(|| Timestamp::from_millis(at.as_millis() + 5_678)),
        delivery: None,
    }
}

/// `import`: a record keeps its id when it is above the high-water mark
/// and above every id kept earlier in the batch, else gets a new one;
/// keys, attempts, times and state are kept; the depth bound is not
/// enforced.
fn import_keeps_ids_above_high_water(s: Setup) {
    let mut h = s.open(Some(3));
    let a = add(&h, "a", "");
    let b = add(&h, "b", "");
    let c = add(&h, "c", "");
    assert_eq!(c, 3);
    h.q().mark_done(&[b]).unwrap();
    h.step();
    let recs = vec![
        record(10, "ten", "k10", RecordState::Pending),
        record(11, "eleven", "", RecordState::Held),
        record(12, "twelve", "k12", RecordState::Dead),
        record(2, "two", "", RecordState::Pending),
        record(11, "eleven again", "", RecordState::Pending),
        record(20, "twenty", "", RecordState::Dead),
        record(15, "fifteen", "k15", RecordState::Held),
    ];
    let r = h.q().import(&recs).unwrap();
    let imp = |id, kept_id| Imported {
        id,
        kept_id,
        deduplicated: false,
    };
    assert_eq!(
        r,
        vec![
            imp(10, true),
            imp(11, true),
            imp(12, true),
            imp(13, false),
            imp(14, false),
            imp(20, true),
            imp(21, false),
        ]
    );
    h.step();
    assert_eq!(h.q().high_water().unwrap(), 21);
    let renumbered = |rec: &Record, id| Item {
        id,
        ..rec.item.clone()
    };
    let want_pending = vec![
        get(&h, a),
        get(&h, c),
        recs[0].item.clone(),
        recs[1].item.clone(),
        renumbered(&recs[3], 13),
        renumbered(&recs[4], 14),
        renumbered(&recs[6], 21),
    ];
    assert_eq!(drain(&h), want_pending);
    assert!(get(&h, 11).held && get(&h, 21).held && !get(&h, 10).held);
    let want_dead = vec![
        DeadLetter {
            item: recs[2].item.clone(),
            dead_at: recs[2].dead_at.unwrap(),
        },
        DeadLetter {
            item: recs[5].item.clone(),
            dead_at: recs[5].dead_at.unwrap(),
        },
    ];
    assert_eq!(dead(&h), want_dead);
    assert_eq!(h.q().size().unwrap(), 7, "the bound of 3 is not enforced");
    assert_eq!(h.q().stats(T0).unwrap().held, 2);
    // New ids continue above everything imported.
    h.q().mark_done(&[10, 11, 13, 14, 21]).unwrap();
    assert!(add(&h, "next", "") > 21);
    // A dead import's key is no dedup candidate.
    h.q().set_max_depth(None).unwrap();
    let x = enq(&h, b"x", "k12");
    assert!(!x.deduplicated && x.id > 21);
}

/// `import`: a pending or held record whose key a pending item already
/// carries (or an earlier record of the batch) is a dedup hit and stores
/// nothing; a dead record does not dedup against pending keys (only
/// against dead letters: `importing_twice_adds_nothing_twice`).
fn import_dedups_pending_keys(s: Setup) {
    let mut h = s.open(None);
    let a = add(&h, "a", "ka");
    let held = add(&h, "h", "kh");
    h.q().set_held(&[held], true).unwrap();
    let x = add(&h, "x", "kx");
    h.q().dead_letter(x, "dead").unwrap();
    h.step();
    let recs = vec![
        record(100, "other a", "ka", RecordState::Pending),
        record(101, "other h", "kh", RecordState::Held),
        record(102, "dead a", "ka", RecordState::Dead),
        record(103, "new x", "kx", RecordState::Pending),
        record(104, "first n", "kn", RecordState::Held),
        record(105, "second n", "kn", RecordState::Pending),
        record(106, "no key", "", RecordState::Pending),
        record(107, "no key", "", RecordState::Pending),
    ];
    let r = h.q().import(&recs).unwrap();
    let hit = |id| Imported {
        id,
        kept_id: false,
        deduplicated: true,
    };
    let kept = |id| Imported {
        id,
        kept_id: true,
        deduplicated: false,
    };
    assert_eq!(
        r,
        vec![
            hit(a),
            hit(held),
            kept(102),
            kept(103),
            kept(104),
            hit(104),
            kept(106),
            kept(107),
        ]
    );
    h.step();
    assert_eq!(ids(&drain(&h)), vec![a, held, 103, 104, 106, 107]);
    assert_eq!(get(&h, a).payload, b"a", "first write wins");
    assert_eq!(h.q().dead_count().unwrap(), 2);
    assert_eq!(h.q().high_water().unwrap(), 107);
    assert_eq!(enq(&h, b"y", "kn").id, 104, "a held import carries its key");
    assert_eq!(enq(&h, b"y", "kx").id, 103);
}

/// `import` is all-or-nothing: a dead record without a time of death is
/// malformed and nothing of the batch is stored.
fn import_with_a_malformed_record_changes_nothing(s: Setup) {
    let mut h = s.open(None);
    let a = add(&h, "a", "");
    let mut bad = record(51, "dead", "", RecordState::Dead);
    bad.dead_at = None;
    let recs = vec![record(50, "fine", "k50", RecordState::Pending), bad];
    assert!(h.q().import(&recs).is_err());
    h.step();
    assert_eq!(ids(&drain(&h)), vec![a]);
    assert_eq!(h.q().dead_count().unwrap(), 0);
    assert_eq!(h.q().high_water().unwrap(), a);
    assert!(!enq(&h, b"b", "k50").deduplicated);
}

// ---------------------------------------------------------------- stats

/// `stats(now)`: depth, held, dead letters, waiting (next retry after
/// `now`), oldest item, attempt histogram, bound, high-water mark.
fn stats_numbers(s: Setup) {
    let mut h = s.open(Some(10));
    assert_eq!(
        h.q().stats(T0).unwrap(),
        QueueStats {
            max_depth: Some(10),
            ..QueueStats::default()
        },
        "an empty spool"
    );
    let a = add(&h, "a", "");
    h.clock.advance(secs(5));
    let now = h.now();
    let b = add(&h, "b", "");
    let upd = |attempts, at: Timestamp| AttemptUpdate {
        attempts,
        next_retry_at: Some(at),
        last_error: Some("x".into()),
    };
    h.q()
        .record_attempt(b, &upd(2, now.saturating_add(secs(60))))
        .unwrap();
    let c = add(&h, "c", "");
    h.q().set_attempts(c, 2).unwrap();
    h.q().set_held(&[c], true).unwrap();
    let d = add(&h, "d", "");
    h.q().record_attempt(d, &upd(1, now)).unwrap();
    let e = add(&h, "e", "");
    h.q().dead_letter(e, "dead").unwrap();
    let f = add(&h, "f", "");
    h.q().mark_done(&[f]).unwrap();
    h.step();
    let want = QueueStats {
        depth: 4,
        held: 1,
        dead_letters: 1,
        waiting: 1,
        oldest_enqueued_at: Some(T0),
        oldest_id: Some(a),
        attempts_histogram: BTreeMap::from([(0, 1), (1, 1), (2, 2)]),
        max_depth: Some(10),
        high_water: f,
        ..QueueStats::default()
    };
    assert_eq!(h.q().stats(now).unwrap(), want);
    assert_eq!(
        h.q().stats(now.saturating_add(secs(61))).unwrap().waiting,
        0,
        "waiting depends on `now`, not on the clock"
    );
    assert_eq!(h.q().stats(T0).unwrap().waiting, 2);
    h.q().mark_done(&[a]).unwrap();
    h.step();
    let s2 = h.q().stats(now).unwrap();
    assert_eq!(s2.oldest_id, Some(b));
    assert_eq!(s2.oldest_enqueued_at, Some(now));
    assert_eq!(s2.depth, 3);
    assert_eq!(s2.attempts_histogram, BTreeMap::from([(1, 1), (2, 2)]));
}

/// `due_count(now, ignore_backoff, at_most)`: the pending items a replay
/// would attempt — neither held nor (unless `ignore_backoff`) waiting for
/// a retry time after `now` — counted up to `at_most`. An item both held
/// and waiting is left out once.
fn due_count_leaves_out_held_and_waiting_items(s: Setup) {
    let mut h = s.open(None);
    let now = h.now();
    assert_eq!(
        h.q().due_count(now, false, None).unwrap(),
        0,
        "an empty spool"
    );
    let ids: Vec<ItemId> = (0..6).map(|i| add(&h, &format!("p{i}"), "")).collect();
    // ids[0] and ids[5] stay plain pending items.
    let (waiting, held, held_waiting, retried) = (ids[1], ids[2], ids[3], ids[4]);
    let upd = |at: Timestamp| AttemptUpdate {
        attempts: 1,
        next_retry_at: Some(at),
        last_error: Some("x".into()),
    };
    let later = now.saturating_add(secs(60));
    h.q().record_attempt(waiting, &upd(later)).unwrap();
    h.q().record_attempt(held_waiting, &upd(later)).unwrap();
    h.q().record_attempt(retried, &upd(now)).unwrap();
    h.q().set_held(&[held, held_waiting], true).unwrap();
    h.step();
    let due = |h: &Harness, now, ignore_backoff, at_most| {
        h.q().due_count(now, ignore_backoff, at_most).unwrap()
    };
    // The two plain items and the retried one are due.
    assert_eq!(due(&h, now, false, None), 3);
    assert_eq!(due(&h, now, true, None), 4);
    assert_eq!(due(&h, later, false, None), 4);
    for (at_most, want) in [(0, 0), (2, 2), (3, 3), (4, 3), (u64::MAX, 3)] {
        assert_eq!(
            due(&h, now, false, Some(at_most)),
            want,
            "at most {at_most}"
        );
    }
    h.q().set_held(&[held_waiting], false).unwrap();
    h.q().set_held(&[waiting], true).unwrap();
    h.step();
    assert_eq!(due(&h, now, false, None), 3);
    assert_eq!(due(&h, now, true, None), 4);
    // More held items than waiting ones (SQLite then counts the overlap
    // through the other index): only the retried item is due.
    h.q().set_held(&[ids[0], ids[5]], true).unwrap();
    h.step();
    assert_eq!(due(&h, now, false, None), 1);
    assert_eq!(due(&h, now, true, None), 2);
    h.q()
        .set_held(&[ids[0], ids[5], held, waiting], false)
        .unwrap();
    h.step();
    assert_eq!(due(&h, now, false, None), 4);
    assert_eq!(due(&h, now, true, None), 6);
}

// ---------------------------------------------------------------- uuid

/// `uuid`: RFC 4122, lowercase hyphenated, created with the spool and
/// kept by it.
fn uuid_is_stable_and_well_formed(s: Setup) {
    let mut h = s.open(None);
    let u = h.q().uuid().unwrap();
    assert_eq!(u.len(), 36, "{u:?}");
    for (i, ch) in u.chars().enumerate() {
        if [8, 13, 18, 23].contains(&i) {
            assert_eq!(ch, '-', "{u:?}");
        } else {
            assert!(matches!(ch, '0'..='9' | 'a'..='f'), "{u:?}");
        }
    }
    assert!(
        matches!(u.as_bytes()[14], b'1'..=b'8'),
        "version digit of {u:?}"
    );
    assert!(
        matches!(u.as_bytes()[19], b'8' | b'9' | b'a' | b'b'),
        "variant of {u:?}"
    );
    add(&h, "a", "");
    h.step();
    h.reopen();
    assert_eq!(h.q().uuid().unwrap(), u, "kept across reopen");
    let other = s.open(None);
    assert_ne!(other.q().uuid().unwrap(), u, "every spool has its own");
}

// ---------------------------------------------------------------- payloads

fn odd_payloads() -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = vec![
        b"".to_vec(),
        b"\0".to_vec(),
        (0..=255u8).collect(),
        (0..=255u8).rev().collect(),
        vec![0xff, 0xfe, 0xfd],
        vec![b'a', 0xc3],
        vec![0xed, 0xa0, 0x80],
        b"\"quoted\" and \\\"escaped\\\"".to_vec(),
        b"back\\slash\\".to_vec(),
        b"\\u0000 \\n not escapes".to_vec(),
        (1..0x20u8).chain([0x7f]).collect(),
        b"line\nbreak\r\nand\rcr".to_vec(),
        "sep\u{2028}\u{2029}".as_bytes().to_vec(),
        "ünïcødé ☃ 🦀".as_bytes().to_vec(),
        b"{\"op\":\"done\",\"id\":1}".to_vec(),
        b"x\n{\"op\":\"done\",\"id\":1}\n".to_vec(),
        b" leading and trailing spaces ".to_vec(),
        b"\n".to_vec(),
        b"payload_base64".to_vec(),
        b"base64:AAAA".to_vec(),
    ];
    v.push("\u{feff}bom".as_bytes().to_vec());
    v
}

/// Payloads are arbitrary bytes and round-trip exactly, as single
/// enqueues, in a batch, through the dead-letter set and back.
/// A batch of hundreds of items, with dedup hits and binary payloads
/// scattered through it, stores every fresh item under consecutive ids,
/// in input order, with its own payload and key, fresh state, and the
/// batch's enqueue time; the dedup hits point at the right items.
fn large_batch_keeps_every_item_in_order(s: Setup) {
    let mut h = s.open(None);
    let pre = add(&h, "pre", "k-pre");
    h.clock.advance(Duration::from_millis(90_500));
    let when = Timestamp::from_secs(h.now().as_secs());
    let mut input = Vec::new();
    for i in 0..300u32 {
        let (payload, key) = match i % 7 {
            0 => (format!("{i}").into_bytes(), format!("k{i}")),
            3 => (vec![0xff, 0x00, i as u8, b'\n'], String::new()),
            5 => (b"repeat".to_vec(), "k-pre".to_string()),
            6 => (format!("again {i}").into_bytes(), format!("k{}", i - 6)),
            _ => (format!("{{\"n\":{i}}}").into_bytes(), String::new()),
        };
        input.push(NewItem::new(payload, key));
    }
    let r = h
        .q()
        .enqueue_batch(&input, &EnqueueOptions::default())
        .unwrap();
    assert_eq!(r.len(), input.len());
    let mut next = pre;
    let mut fresh = Vec::new();
    for (i, (e, it)) in r.iter().zip(&input).enumerate() {
        match i % 7 {
            5 => assert_eq!((e.id, e.deduplicated), (pre, true), "item {i}"),
            6 => assert_eq!((e.id, e.deduplicated), (r[i - 6].id, true), "item {i}"),
            _ => {
                next += 1;
                assert_eq!((e.id, e.deduplicated), (next, false), "item {i}");
                fresh.push(it);
            }
        }
    }
    h.step();
    h.reopen();
    let all = drain(&h);
    assert_eq!(all.len(), fresh.len() + 1);
    for (it, want) in all[1..].iter().zip(&fresh) {
        assert_eq!(it.payload, want.payload, "item {}", it.id);
        assert_eq!(it.key, want.key, "item {}", it.id);
        assert_eq!(it.attempts, 0, "item {}", it.id);
        assert_eq!(it.next_retry_at, None, "item {}", it.id);
        assert_eq!(it.last_error, None, "item {}", it.id);
        assert!(!it.held, "item {}", it.id);
        assert_eq!(it.enqueued_at, Some(when), "item {}", it.id);
    }
    assert_eq!(h.q().size().unwrap(), all.len() as u64);
}

fn payload_bytes_round_trip(s: Setup) {
    let mut h = s.open(None);
    let all = odd_payloads();
    let mut single = Vec::new();
    for (i, p) in all.iter().enumerate() {
        let e = enq(&h, p, &format!("k{i}"));
        assert!(!e.deduplicated);
        single.push(e.id);
    }
    h.step();
    let items: Vec<NewItem> = all.iter().map(|p| NewItem::new(p.clone(), "")).collect();
    let res = h
        .q()
        .enqueue_batch(&items, &EnqueueOptions::default())
        .unwrap();
    h.step();
    h.reopen();
    let drained = drain(&h);
    assert_eq!(drained.len(), 2 * all.len());
    for (i, it) in drained.iter().enumerate() {
        let want = &all[i % all.len()];
        assert_eq!(&it.payload, want, "payload {i} changed");
    }
    for (i, id) in single.iter().chain(res.iter().map(|e| &e.id)).enumerate() {
        assert_eq!(&get(&h, *id).payload, &all[i % all.len()]);
    }
    // Through the dead-letter set and back.
    for id in &single {
        assert!(h.q().dead_letter(*id, "x").unwrap());
    }
    h.step();
    for (id, want) in single.iter().zip(&all) {
        assert_eq!(&h.q().dead_get(*id).unwrap().unwrap().item.payload, want);
    }
    let n = single.len();
    assert_eq!(h.q().requeue(&single).unwrap(), vec![true; n]);
    h.step();
    for (id, want) in single.iter().zip(&all) {
        assert_eq!(&get(&h, *id).payload, want);
    }
}

/// A 1 MiB payload of every byte value round-trips.
fn large_payload_round_trips(s: Setup) {
    let mut h = s.open(None);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let big: Vec<u8> = (0..1 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect();
    let a = enq(&h, &big, "big").id;
    let b = add(&h, "after", "");
    h.step();
    h.reopen();
    assert_eq!(get(&h, a).payload, big);
    assert_eq!(get(&h, b).payload, b"after");
    let mut text = "é".repeat(1 << 19).into_bytes();
    text.push(b'\n');
    let c = enq(&h, &text, "").id;
    h.reopen();
    assert_eq!(get(&h, c).payload, text);
}

// ---------------------------------------------------------------- read-only

/// Every file in the spool's directory and its bytes, except SQLite's
/// shared-memory index (`-shm`), which readers may write by design.
fn snapshot(h: &Harness) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(h.dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !p.to_string_lossy().ends_with("-shm"))
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p.file_name().unwrap().to_string_lossy().into_owned(), bytes)
        })
        .collect();
    files.sort();
    files
}

/// `OpenMode::ReadOnly`: the spool must exist, and nothing on disk
/// changes: every read answers as through a writable handle, and every
/// mutation fails and changes nothing.
fn read_only_open_changes_nothing(s: Setup) {
    let mut h = s.open(Some(5));
    let a = add(&h, "a", "ka");
    let b = add(&h, "b", "");
    let c = add(&h, "c", "kc");
    h.q().set_held(&[b], true).unwrap();
    h.q()
        .record_attempt(
            a,
            &AttemptUpdate {
                attempts: 1,
                next_retry_at: Some(T0.saturating_add(secs(30))),
                last_error: Some("e".into()),
            },
        )
        .unwrap();
    h.q().dead_letter(c, "dead").unwrap();
    h.step();

    let mut opts = h.reopen_options();
    opts.mode = spool::OpenMode::ReadOnly;
    let missing = h.missing();
    match Spool::open(&missing, &opts) {
        Err(e) => assert_eq!(e.kind(), ErrorKind::NotFound, "{e}"),
        Ok(_) => panic!("a read-only open created {}", missing.display()),
    }
    assert!(!missing.exists(), "a read-only open created the spool");

    let before = snapshot(&h);
    let ro = Spool::open(&h.path, &opts).expect("open read-only");
    let (w, r) = (h.q(), ro.queue());
    assert_eq!(r.drain().unwrap(), w.drain().unwrap());
    assert_eq!(r.page(a, 1).unwrap(), w.page(a, 1).unwrap());
    assert_eq!(r.get(a).unwrap(), w.get(a).unwrap());
    assert_eq!(r.size().unwrap(), 2);
    assert_eq!(r.max_depth().unwrap(), Some(5));
    assert_eq!(r.uuid().unwrap(), w.uuid().unwrap());
    assert_eq!(r.high_water().unwrap(), c);
    assert_eq!(r.dead_page(0, 10).unwrap(), w.dead_page(0, 10).unwrap());
    assert_eq!(r.dead_get(c).unwrap(), w.dead_get(c).unwrap());
    assert_eq!(r.dead_count().unwrap(), 1);
    assert_eq!(r.stats(T0).unwrap(), w.stats(T0).unwrap());

    let upd = AttemptUpdate::default();
    let one = [NewItem::new("x", "")];
    let rec = record(100, "r", "", RecordState::Pending);
    let attempts: Vec<(&str, bool)> = vec![
        ("enqueue", r.enqueue(b"x", "").is_err()),
        (
            "enqueue_batch",
            r.enqueue_batch(&one, &EnqueueOptions::default()).is_err(),
        ),
        ("mark_done", r.mark_done(&[a]).is_err()),
        ("set_attempts", r.set_attempts(a, 9).is_err()),
        ("record_attempt", r.record_attempt(a, &upd).is_err()),
        ("set_held", r.set_held(&[a], true).is_err()),
        ("set_max_depth", r.set_max_depth(None).is_err()),
        ("dead_letter", r.dead_letter(a, "x").is_err()),
        ("requeue", r.requeue(&[c]).is_err()),
        ("purge", r.purge(&[c]).is_err()),
        ("import", r.import(std::slice::from_ref(&rec)).is_err()),
    ];
    let accepted: Vec<&str> = attempts
        .iter()
        .filter(|(_, failed)| !failed)
        .map(|(name, _)| *name)
        .collect();
    assert!(
        accepted.is_empty(),
        "a read-only spool accepted {accepted:?}"
    );
    drop(ro);
    assert!(snapshot(&h) == before, "the spool's files changed");
    h.step();
    assert_eq!(ids(&drain(&h)), vec![a, b]);
    assert_eq!(h.q().dead_count().unwrap(), 1);
}

// ------------------------------------------------------------------ push

fn push_state(h: &Harness) -> PushState {
    h.q().push_state().expect("push state")
}

fn in_flight(h: &Harness) -> Vec<(ItemId, u64)> {
    h.q()
        .push_in_flight(0, 100)
        .expect("in flight")
        .iter()
        .map(|i| (i.id, i.push_seq.expect("an in-flight item has a number")))
        .collect()
}

/// Numbers start at 1 and follow the order items are first sent, not the
/// order they were enqueued; held and already numbered items get none; a
/// number is never given twice.
fn push_numbers_follow_send_order_from_one(s: Setup) {
    let mut h = s.open(None);
    assert_eq!(push_state(&h), PushState::default());
    let a = add(&h, "a", "");
    let b = add(&h, "b", "");
    let c = add(&h, "c", "kc");
    h.q().set_held(&[b], true).unwrap();
    h.step();
    assert_eq!(
        h.q().push_assign(&[c, b, a, c, 999]).unwrap(),
        vec![(c, 1), (a, 2)]
    );
    h.step();
    assert_eq!(in_flight(&h), vec![(c, 1), (a, 2)]);
    assert_eq!(get(&h, c).push_seq, Some(1));
    assert_eq!(get(&h, b).push_seq, None);
    assert_eq!(
        push_state(&h),
        PushState {
            last_assigned: 2,
            acked: 0,
            skips: vec![]
        }
    );
    assert!(
        h.q().push_assign(&[a, c]).unwrap().is_empty(),
        "already in flight"
    );
    h.q().set_held(&[b], false).unwrap();
    assert_eq!(h.q().push_assign(&[b]).unwrap(), vec![(b, 3)]);
    h.step();
    assert_eq!(
        h.q().push_in_flight(1, 1).unwrap()[0].id,
        a,
        "after and limit"
    );
    assert_eq!(push_state(&h).last_assigned, 3);
    // In flight is still pending: counted, listed, deduplicating.
    assert_eq!(h.q().size().unwrap(), 3);
    assert!(enq(&h, b"again", "kc").deduplicated);
    // In id order too: a held item, an unknown id and one in flight are
    // passed over, the others numbered in order.
    let d = add(&h, "d", "");
    let e = add(&h, "e", "");
    let f = add(&h, "f", "");
    h.q().set_held(&[e], true).unwrap();
    h.step();
    assert_eq!(
        h.q().push_assign(&[a, d, e, f, 999]).unwrap(),
        vec![(d, 4), (f, 5)]
    );
    h.step();
    assert_eq!(push_state(&h).last_assigned, 5);
    assert_eq!(get(&h, e).push_seq, None);
    // Consecutive ids: one gone from the middle of a run, one in flight
    // at the start of the next, then a whole run.
    let run: Vec<ItemId> = (0..7).map(|n| add(&h, &format!("r{n}"), "")).collect();
    assert!(run.windows(2).all(|w| w[1] == w[0] + 1));
    assert!(h.q().dead_letter(run[1], "gone").unwrap());
    assert_eq!(h.q().push_assign(&[run[3]]).unwrap(), vec![(run[3], 6)]);
    h.step();
    assert_eq!(
        h.q().push_assign(&run).unwrap(),
        vec![
            (run[0], 7),
            (run[2], 8),
            (run[4], 9),
            (run[5], 10),
            (run[6], 11)
        ]
    );
    h.step();
    assert_eq!(get(&h, run[5]).push_seq, Some(10));
    let more: Vec<ItemId> = (0..3).map(|n| add(&h, &format!("m{n}"), "")).collect();
    assert_eq!(
        h.q().push_assign(&more).unwrap(),
        vec![(more[0], 12), (more[1], 13), (more[2], 14)]
    );
    h.step();
    assert_eq!(in_flight(&h).last(), Some(&(more[2], 14)));
    assert_eq!(push_state(&h).last_assigned, 14);
}

/// An ack of a long range (deleted in one statement on SQLite, counted
/// there once) leaves `size` and the attempt histogram exact, and later
/// removals are counted as before.
fn a_long_acked_range_keeps_the_counts(s: Setup) {
    let mut h = s.open(None);
    let ids: Vec<ItemId> = (0..150).map(|i| add(&h, &format!("l{i}"), "")).collect();
    let now = h.now();
    for (n, &id) in ids.iter().enumerate().take(120).filter(|(n, _)| n % 3 != 0) {
        let upd = AttemptUpdate {
            attempts: 1 + (n % 2) as u32,
            next_retry_at: None,
            last_error: Some("x".into()),
        };
        h.q().record_attempt(id, &upd).unwrap();
    }
    h.q().set_attempts(ids[140], 5).unwrap();
    h.q().push_assign(&ids[..130]).unwrap();
    h.step();
    let ack = h.q().push_ack(100, &[]).unwrap();
    assert_eq!(ack.delivered, ids[..100].to_vec());
    h.step();
    let stats = h.q().stats(now).unwrap();
    assert_eq!(h.q().size().unwrap(), 50);
    assert_eq!(stats.depth, 50);
    // Of ids[100..120], those with n % 3 != 0 have 1 or 2 attempts.
    let want = |n: usize| match n {
        140 => 5,
        n if n < 120 && n % 3 != 0 => 1 + (n % 2) as u32,
        _ => 0,
    };
    let mut hist = BTreeMap::new();
    for n in 100..150 {
        *hist.entry(want(n)).or_insert(0u64) += 1;
    }
    assert_eq!(stats.attempts_histogram, hist);
    // The rest, one by one and as a range, still counted.
    h.q().mark_done(&[ids[140]]).unwrap();
    h.step();
    assert_eq!(h.q().size().unwrap(), 49);
    h.q().push_ack(130, &[]).unwrap();
    h.step();
    let stats = h.q().stats(now).unwrap();
    assert_eq!((stats.depth, h.q().size().unwrap()), (19, 19));
    hist.clear();
    for n in (130..150).filter(|&n| n != 140) {
        *hist.entry(want(n)).or_insert(0u64) += 1;
    }
    assert_eq!(stats.attempts_histogram, hist);
}

/// An ack covers every number up to it, is clamped to the highest number
/// given, and never moves the watermark back.
fn push_ack_is_cumulative_clamped_and_never_goes_back(s: Setup) {
    let mut h = s.open(None);
    let ids: Vec<ItemId> = (0..4).map(|i| add(&h, &format!("p{i}"), "")).collect();
    h.q().push_assign(&ids[..3]).unwrap();
    h.step();
    let ack = h.q().push_ack(2, &[]).unwrap();
    assert_eq!(
        ack,
        PushAck {
            acked: 2,
            delivered: vec![ids[0], ids[1]],
            rejected: vec![]
        }
    );
    h.step();
    assert_eq!(ids_of(&drain(&h)), vec![ids[2], ids[3]]);
    assert_eq!(push_state(&h).acked, 2);
    // At or below the watermark: nothing.
    assert_eq!(h.q().push_ack(1, &[]).unwrap().acked, 2);
    assert_eq!(h.q().size().unwrap(), 2);
    // Beyond what was given: clamped, the unnumbered item stays.
    let ack = h.q().push_ack(99, &[]).unwrap();
    assert_eq!((ack.acked, ack.delivered), (3, vec![ids[2]]));
    h.step();
    assert_eq!(ids_of(&drain(&h)), vec![ids[3]]);
    assert_eq!(
        push_state(&h),
        PushState {
            last_assigned: 3,
            acked: 3,
            skips: vec![]
        }
    );
    assert_eq!(h.q().push_assign(&[ids[3]]).unwrap(), vec![(ids[3], 4)]);
}

fn ids_of(items: &[Item]) -> Vec<ItemId> {
    ids(items)
}

/// A number the receiver refused: the item is dead-lettered with the
/// receiver's reason, in the same commit as the rest of the ack.
fn push_rejects_are_dead_lettered_with_the_reason(s: Setup) {
    let mut h = s.open(None);
    let a = add(&h, "a", "ka");
    let b = add(&h, "b", "kb");
    h.q().push_assign(&[a, b]).unwrap();
    h.clock.advance(Duration::from_secs(5));
    let ack = h
        .q()
        .push_ack(
            2,
            &[(1, "payload too large".into()), (7, "not sent".into())],
        )
        .unwrap();
    assert_eq!((ack.delivered, ack.rejected), (vec![b], vec![a]));
    let died = h.now();
    h.step();
    assert_eq!(h.q().size().unwrap(), 0);
    let dl = h.q().dead_get(a).unwrap().expect("a dead letter");
    assert_eq!(dl.item.last_error.as_deref(), Some("payload too large"));
    assert_eq!(dl.dead_at, died);
    assert_eq!(dl.item.key, "ka");
    assert!(
        !enq(&h, b"a again", "ka").deduplicated,
        "the key was released"
    );
}

/// Holding an in-flight item is refused and changes nothing; releasing
/// is allowed.
fn in_flight_items_cannot_be_held(s: Setup) {
    let mut h = s.open(None);
    let a = add(&h, "a", "");
    let b = add(&h, "b", "");
    h.q().push_assign(&[a]).unwrap();
    h.step();
    let e = h.q().set_held(&[b, a], true).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Data, "{e}");
    assert!(e.to_string().contains("in flight"), "{e}");
    h.step();
    assert!(!get(&h, b).held, "all or nothing");
    assert_eq!(h.q().set_held(&[a], false).unwrap(), vec![true]);
    assert_eq!(h.q().set_held(&[b], true).unwrap(), vec![true]);
}

/// An in-flight item that leaves other than by an ack (an operator's
/// `done`, a dead-lettering) leaves its number behind as a skip, until an
/// ack covers it.
fn in_flight_items_removed_otherwise_leave_skips(s: Setup) {
    let mut h = s.open(None);
    let ids: Vec<ItemId> = (0..4).map(|i| add(&h, &format!("p{i}"), "")).collect();
    h.q().push_assign(&ids).unwrap();
    h.step();
    assert_eq!(
        h.q().mark_done(&[ids[1], ids[3]]).unwrap(),
        vec![true, true]
    );
    h.step();
    assert!(h.q().dead_letter(ids[2], "operator").unwrap());
    h.step();
    assert_eq!(
        push_state(&h),
        PushState {
            last_assigned: 4,
            acked: 0,
            skips: vec![2, 3, 4]
        }
    );
    assert_eq!(in_flight(&h), vec![(ids[0], 1)]);
    let ack = h.q().push_ack(3, &[]).unwrap();
    assert_eq!(ack.delivered, vec![ids[0]]);
    h.step();
    assert_eq!(push_state(&h).skips, vec![4]);
    h.q().push_ack(4, &[]).unwrap();
    h.step();
    assert_eq!(
        push_state(&h),
        PushState {
            last_assigned: 4,
            acked: 4,
            skips: vec![]
        }
    );
    // An item that was never in flight leaves no skip.
    let e = add(&h, "e", "");
    h.q().mark_done(&[e]).unwrap();
    assert!(push_state(&h).skips.is_empty());
}

/// A refused item that an operator requeues comes back without its old
/// number: it is a new entry with a new one.
fn requeued_dead_letters_are_new_entries(s: Setup) {
    let mut h = s.open(None);
    let a = add(&h, "a", "");
    h.q().push_assign(&[a]).unwrap();
    h.q().push_ack(1, &[(1, "refused".into())]).unwrap();
    h.step();
    assert_eq!(h.q().requeue(&[a]).unwrap(), vec![true]);
    h.step();
    assert_eq!(get(&h, a).push_seq, None);
    assert_eq!(h.q().push_assign(&[a]).unwrap(), vec![(a, 2)]);
}

/// A new uuid is a new client: what is in flight is numbered again from
/// 1 in its order, the watermark and the skips start over.
fn regenerated_uuid_renumbers_what_is_in_flight(s: Setup) {
    let mut h = s.open(None);
    let ids: Vec<ItemId> = (0..5).map(|i| add(&h, &format!("p{i}"), "")).collect();
    // Numbered in another order than the ids.
    h.q()
        .push_assign(&[ids[4], ids[0], ids[3], ids[1]])
        .unwrap();
    h.q().push_ack(1, &[]).unwrap();
    h.q().mark_done(&[ids[3]]).unwrap();
    h.step();
    let old = h.q().uuid().unwrap();
    let new = h.q().regenerate_uuid().unwrap();
    assert_ne!(old, new);
    assert!(uuid::Uuid::parse_str(&new).is_ok());
    h.step();
    assert_eq!(h.q().uuid().unwrap(), new);
    assert_eq!(in_flight(&h), vec![(ids[0], 1), (ids[1], 2)]);
    assert_eq!(
        push_state(&h),
        PushState {
            last_assigned: 2,
            acked: 0,
            skips: vec![]
        }
    );
    assert_eq!(h.q().push_assign(&[ids[2]]).unwrap(), vec![(ids[2], 3)]);
}

/// Numbers belong to the exporting spool's stream: an import stores the
/// item as not in flight.
fn import_drops_push_numbers(s: Setup) {
    let mut h = s.open(None);
    let mut item = fresh(50, "moved", "", T0);
    item.push_seq = Some(7);
    h.q()
        .import(&[Record {
            item,
            state: RecordState::Pending,
            dead_at: None,
            delivery: None,
        }])
        .unwrap();
    h.step();
    assert_eq!(get(&h, 50).push_seq, None);
    assert!(in_flight(&h).is_empty());
}

// -------------------------------------------------------------- receiving

use spool::push::wire::{self, OutEntry};
use spool::push::{apply_item, apply_push, ItemOutcome, PushOutcome, ReceiveLimits};

/// A push request from `client`, with `acked`, of items `(seq, key,
/// payload)` and skip entries (an empty payload marks a skip).
fn request(client: &str, acked: u64, entries: &[(u64, &str, &str)]) -> wire::PushRequest {
    let out: Vec<OutEntry<'_>> = entries
        .iter()
        .map(|&(seq, key, payload)| {
            if payload.is_empty() {
                OutEntry::Skip { seq }
            } else {
                OutEntry::Item {
                    seq,
                    id: 100 + seq,
                    key,
                    payload: payload.as_bytes(),
                    enqueued_at: Some(T0),
                    group: None,
                    coalesce_key: None,
                }
            }
        })
        .collect();
    wire::parse_request(&wire::encode_request(client, acked, &out)).expect("a valid request")
}

/// Apply one request in one receive transaction.
fn receive(h: &Harness, req: &wire::PushRequest, limits: &ReceiveLimits) -> PushOutcome {
    let mut out = None;
    h.q()
        .receive(&mut |txn| {
            out = Some(apply_push(txn, req, limits)?);
            Ok(())
        })
        .expect("receive");
    out.expect("an outcome")
}

fn accepted(o: PushOutcome) -> wire::PushResponse {
    match o {
        PushOutcome::Accepted(a) => a.response,
        other => panic!("not accepted: {other:?}"),
    }
}

fn client(h: &Harness, id: &str) -> Option<spool::ClientSummary> {
    h.q()
        .push_clients()
        .unwrap()
        .into_iter()
        .find(|c| c.client_id == id)
}

/// Entries are enqueued once, in order, with their keys scoped by the
/// client (`<client_id>:<key>`; a key a pending item carries is a dedup
/// hit that counts as applied); a resent request is all duplicates;
/// `last_seq` is per client and remembered.
fn received_entries_are_enqueued_once_with_their_keys(s: Setup) {
    let mut h = s.open(None);
    let local = add(&h, "local", "shared");
    add(&h, "pushed before", "edge-a:mine");
    let limits = ReceiveLimits::default();
    let req = request(
        "edge-a",
        0,
        &[
            (1, "k1", "one"),
            (2, "shared", "two"),
            (3, "", ""),
            (4, "", "four"),
            (5, "mine", "five"),
        ],
    );
    let r = accepted(receive(&h, &req, &limits));
    assert_eq!((r.last_seq, r.applied, r.duplicates), (5, 4, 0));
    h.step();
    let items = drain(&h);
    assert_eq!(
        payloads(&items),
        ["local", "pushed before", "one", "two", "four"]
            .map(|p| p.as_bytes().to_vec())
            .to_vec()
    );
    assert_eq!(items[0].id, local);
    let keys: Vec<&str> = items.iter().map(|i| i.key.as_str()).collect();
    assert_eq!(
        keys,
        ["shared", "edge-a:mine", "edge-a:k1", "edge-a:shared", ""],
        "a pushed key never dedups a key it was not sent with"
    );
    assert_eq!(
        items[2].enqueued_at,
        Some(T0),
        "enqueued now, by the receiver's clock"
    );
    let r = accepted(receive(&h, &req, &limits));
    assert_eq!((r.last_seq, r.applied, r.duplicates), (5, 0, 5));
    h.step();
    assert_eq!(h.q().size().unwrap(), 5);
    let c = client(&h, "edge-a").expect("the client is known");
    assert_eq!((c.last_seq, c.rejected.len()), (5, 0));
    assert_eq!(c.updated_at, Some(h.now()));
    assert!(client(&h, "edge-b").is_none());
}

/// A request longer than what a backend holds back before writing: a
/// key repeated within it is a dedup hit however far apart the two
/// entries are, and the same request resent with more entries is
/// duplicates for what was applied (each checked against its recorded
/// digest) and new entries for the rest.
fn a_long_request_dedups_keys_within_itself(s: Setup) {
    let mut h = s.open(None);
    let limits = ReceiveLimits::default();
    let entry = |i: u64| {
        let key = if i.is_multiple_of(3) {
            format!("k{}", i % 40)
        } else {
            String::new()
        };
        (i, key, format!("p{i}"))
    };
    let all: Vec<(u64, String, String)> = (1..=700).map(entry).collect();
    let as_req = |n: usize| {
        let e: Vec<(u64, &str, &str)> = all[..n]
            .iter()
            .map(|(i, k, p)| (*i, k.as_str(), p.as_str()))
            .collect();
        request("edge", 0, &e)
    };
    let mut seen = std::collections::HashSet::new();
    let want: Vec<Vec<u8>> = all
        .iter()
        .filter(|(_, k, _)| k.is_empty() || seen.insert(k.clone()))
        .map(|(_, _, p)| p.as_bytes().to_vec())
        .collect();
    let stored_by = |n: usize| {
        let mut seen = std::collections::HashSet::new();
        all[..n]
            .iter()
            .filter(|(_, k, _)| k.is_empty() || seen.insert(k.clone()))
            .count()
    };
    let r = accepted(receive(&h, &as_req(600), &limits));
    assert_eq!((r.last_seq, r.applied, r.duplicates), (600, 600, 0));
    h.step();
    assert_eq!(h.q().size().unwrap(), stored_by(600) as u64);
    let r = accepted(receive(&h, &as_req(700), &limits));
    assert_eq!((r.last_seq, r.applied, r.duplicates), (700, 100, 600));
    h.step();
    assert_eq!(payloads(&drain(&h)), want);
    assert_eq!(client(&h, "edge").unwrap().last_seq, 700);
}

/// Payloads that add up to more than a backend holds back before writing
/// are stored whole, in order, and a key repeated after them still finds
/// its first entry.
fn a_request_of_large_payloads_is_stored_whole(s: Setup) {
    let mut h = s.open(None);
    let limits = ReceiveLimits::default();
    let big: Vec<String> = (0..6u8)
        .map(|i| char::from(b'a' + i).to_string().repeat(1 << 20))
        .collect();
    let entries: Vec<(u64, &str, &str)> = (0..6)
        .map(|i| {
            let key = if i == 0 || i == 5 { "same" } else { "" };
            (i as u64 + 1, key, big[i].as_str())
        })
        .collect();
    let r = accepted(receive(&h, &request("edge", 0, &entries), &limits));
    assert_eq!((r.last_seq, r.applied, r.duplicates), (6, 6, 0));
    h.step();
    let want: Vec<Vec<u8>> = big[..5].iter().map(|p| p.as_bytes().to_vec()).collect();
    assert_eq!(payloads(&drain(&h)), want);
}

/// A push request from `client` of items `(seq, payload, group,
/// coalesce key)`.
fn grouped_request(
    client: &str,
    acked: u64,
    entries: &[(u64, &str, Option<&str>, Option<&str>)],
) -> wire::PushRequest {
    let out: Vec<OutEntry<'_>> = entries
        .iter()
        .map(|&(seq, payload, group, coalesce_key)| OutEntry::Item {
            seq,
            id: seq,
            key: "",
            payload: payload.as_bytes(),
            enqueued_at: None,
            group,
            coalesce_key,
        })
        .collect();
    wire::parse_request(&wire::encode_request(client, acked, &out)).expect("a valid request")
}

/// SPEC §7 "Groups and coalescing travel": a pushed entry's group and
/// coalesce key are stored as `enqueue --group/--coalesce-key` stores
/// them, qualified by the sender like keys (one edge's group never holds
/// up another's; one edge's coalesce key never replaces another's
/// items); `/v1/items` does the same with its `Spool-Group` and
/// `Spool-Coalesce-Key` headers; a replacement makes room in a full
/// spool.
fn groups_and_coalesce_keys_travel_through_a_receiver(s: Setup) {
    let mut h = s.open(None);
    let limits = ReceiveLimits::default();
    let push = |h: &Harness, req: wire::PushRequest| accepted(receive(h, &req, &limits));
    let r = push(
        &h,
        grouped_request(
            "edge-a",
            0,
            &[
                (1, "a1", Some("orders"), Some("status")),
                (2, "a2", Some("orders"), None),
            ],
        ),
    );
    assert_eq!(r.applied, 2);
    push(
        &h,
        grouped_request("edge-b", 0, &[(1, "b1", None, Some("status"))]),
    );
    // In a later request: replaces a1, not b1.
    push(
        &h,
        grouped_request("edge-a", 2, &[(3, "a3", None, Some("status"))]),
    );
    let mut outcomes = Vec::new();
    h.q()
        .receive(&mut |txn| {
            outcomes.clear();
            for payload in ["i1", "i2"] {
                let mut item = NewItem::new(payload.as_bytes(), "");
                item.group = Some("web".into());
                item.coalesce_key = Some("cfg".into());
                outcomes.push(apply_item(txn, &item, Some("tok"), &limits)?);
            }
            Ok(())
        })
        .unwrap();
    let replaced: Vec<Vec<ItemId>> = outcomes
        .iter()
        .map(|o| match o {
            ItemOutcome::Enqueued(e) => e.replaced.clone(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(replaced, [vec![], vec![5]]);
    h.step();
    let got: Vec<(String, Option<String>, Option<String>)> = drain(&h)
        .into_iter()
        .map(|i| {
            (
                String::from_utf8(i.payload).unwrap(),
                i.group,
                i.coalesce_key,
            )
        })
        .collect();
    let some = |v: &str| Some(v.to_string());
    assert_eq!(
        got,
        [
            ("a2".into(), some("edge-a:orders"), None),
            ("b1".into(), None, some("edge-b:status")),
            ("a3".into(), None, some("edge-a:status")),
            ("i2".into(), some("tok:web"), some("tok:cfg")),
        ]
    );

    // Full: an entry that replaces an item still fits; one that does not
    // is refused for room.
    let mut h = s.open(Some(1));
    push(
        &h,
        grouped_request("edge-a", 0, &[(1, "old", None, Some("status"))]),
    );
    let r = push(
        &h,
        grouped_request("edge-a", 1, &[(2, "new", None, Some("status"))]),
    );
    assert_eq!((r.applied, r.last_seq), (1, 2));
    let full = receive(
        &h,
        &grouped_request("edge-a", 2, &[(3, "more", None, None)]),
        &limits,
    );
    assert!(
        matches!(full, PushOutcome::Full { last_seq: 2 }),
        "{full:?}"
    );
    h.step();
    let payloads: Vec<Vec<u8>> = drain(&h).into_iter().map(|i| i.payload).collect();
    assert_eq!(payloads, [b"new".to_vec()]);
}

/// SPEC §7 "Keys are scoped per sender": a key from push client A never
/// deduplicates an item from client B (nor a `/v1/items` key of one token
/// another token's item), unless the receiver shares one key space.
fn received_keys_are_scoped_per_sender(s: Setup) {
    let mut h = s.open(None);
    let limits = ReceiveLimits::default();
    let r = accepted(receive(
        &h,
        &request("edge-evil", 0, &[(1, "order-42", "FORGED")]),
        &limits,
    ));
    assert_eq!(r.applied, 1);
    let r = accepted(receive(
        &h,
        &request("billing", 0, &[(1, "order-42", "REAL")]),
        &limits,
    ));
    assert_eq!((r.applied, r.duplicates), (1, 0));
    let mut outcomes = Vec::new();
    h.q()
        .receive(&mut |txn| {
            outcomes.clear();
            for (payload, sender) in [
                ("FORGED", Some("evil")),
                ("REAL", Some("billing")),
                ("AGAIN", Some("billing")),
                ("LOCAL", None),
            ] {
                outcomes.push(apply_item(
                    txn,
                    &NewItem::new(payload.as_bytes(), "invoice-7"),
                    sender,
                    &limits,
                )?);
            }
            Ok(())
        })
        .unwrap();
    let dedup: Vec<bool> = outcomes
        .iter()
        .map(|o| match o {
            ItemOutcome::Enqueued(e) => e.deduplicated,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(dedup, [false, false, true, false]);
    h.step();
    let items = drain(&h);
    let got: Vec<(&str, &[u8])> = items
        .iter()
        .map(|i| (i.key.as_str(), i.payload.as_slice()))
        .collect();
    assert_eq!(
        got,
        [
            ("edge-evil:order-42", &b"FORGED"[..]),
            ("billing:order-42", b"REAL"),
            ("evil:invoice-7", b"FORGED"),
            ("billing:invoice-7", b"REAL"),
            ("invoice-7", b"LOCAL"),
        ]
    );
    // One key space on request (serve --shared-keys).
    let shared = ReceiveLimits {
        shared_keys: true,
        ..ReceiveLimits::default()
    };
    accepted(receive(&h, &request("x", 0, &[(1, "k", "X")]), &shared));
    let r = accepted(receive(&h, &request("y", 0, &[(1, "k", "Y")]), &shared));
    assert_eq!(r.applied, 1);
    h.step();
    let items = drain(&h);
    assert_eq!(items.len(), 6, "Y was a dedup hit on X's key");
    assert_eq!(
        (items[5].key.as_str(), &items[5].payload[..]),
        ("k", &b"X"[..])
    );
}

/// SPEC §7: "A skip entry stores nothing but the advanced last_seq". Three
/// pushes of many skips leave no per-number record in the backend's
/// storage, while the number still counts as processed.
/// A received entry fits as an enqueue does: what its coalesce key
/// replaces goes first, then it must fit under the bound — also in a
/// spool over its bound (a bound lowered since): 503, nothing changed.
/// (Found by the simulator: the SQLite receiver let an entry in whenever
/// it replaced something.)
fn a_received_coalescing_entry_needs_room_under_the_bound(s: Setup) {
    let mut h = s.open(None);
    let limits = ReceiveLimits::default();
    let status = Some("status");
    let first = [
        (1, "a1", None, status),
        (2, "a2", None, None),
        (3, "a3", None, None),
    ];
    accepted(receive(&h, &grouped_request("edge-a", 0, &first), &limits));
    h.q().set_max_depth(Some(2)).unwrap();
    h.step();
    let again = grouped_request("edge-a", 3, &[(4, "a4", None, status)]);
    assert_eq!(
        receive(&h, &again, &limits),
        PushOutcome::Full { last_seq: 3 },
        "three items less the one replaced is still the bound"
    );
    assert_eq!(payloads(&drain(&h)), [b"a1", b"a2", b"a3"]);
    h.q().set_max_depth(Some(3)).unwrap();
    h.step();
    assert_eq!(accepted(receive(&h, &again, &limits)).last_seq, 4);
    assert_eq!(payloads(&drain(&h)), [b"a2", b"a3", b"a4"]);
}

fn received_skips_store_nothing(s: Setup) {
    let mut h = s.open(Some(10));
    let limits = ReceiveLimits::default();
    let mut next = 1u64;
    for round in 0..3u64 {
        let skips: Vec<(u64, &str, &str)> = (next..next + 3000).map(|seq| (seq, "", "")).collect();
        next += 3000;
        let r = accepted(receive(&h, &request("edge", round * 3000, &skips), &limits));
        assert_eq!((r.last_seq, r.applied), (next - 1, 0));
        h.step();
    }
    assert_eq!(client(&h, "edge").unwrap().last_seq, 9000);
    assert_eq!(receiver_records(&h, "edge"), 0, "skips left records behind");
    // An item and a refusal are recorded (digests, the reject); a skipped
    // number sent again is a duplicate.
    let tight = ReceiveLimits {
        max_payload: 4,
        ..ReceiveLimits::default()
    };
    let r = accepted(receive(
        &h,
        &request(
            "edge",
            9000,
            &[
                (9000, "", "late"),
                (9001, "", "one"),
                (9002, "", "too large"),
            ],
        ),
        &tight,
    ));
    assert_eq!((r.last_seq, r.applied, r.duplicates), (9002, 1, 1));
    h.step();
    assert_eq!(h.q().size().unwrap(), 1);
    assert_eq!(receiver_records(&h, "edge"), 2);
}

/// How many per-number records the backend's storage holds for `client`
/// as a push receiver, read from the storage itself.
fn receiver_records(h: &Harness, client: &str) -> u64 {
    match h.spool() {
        Spool::Memory(q) => q
            .push_ledger()
            .client(client)
            .map_or(0, |c| c.entries.len() as u64),
        Spool::Sqlite(_) => {
            let db = rusqlite::Connection::open(&h.path).unwrap();
            db.query_row(
                "SELECT count(*) FROM spool_push_entries WHERE client_id = ?1",
                [client],
                |r| r.get(0),
            )
            .unwrap()
        }
        Spool::File(_) => {
            // Numbers in the client lines of the main file.
            let text = std::fs::read_to_string(&h.path).unwrap();
            text.lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .filter(|v| v["client"]["id"] == client)
                .map(|v| {
                    ["applied", "rejected", "skipped"]
                        .iter()
                        .map(|f| v["client"][f].as_array().map_or(0, |a| a.len() as u64))
                        .sum::<u64>()
                })
                .sum()
        }
        Spool::Postgres(_) => {
            let url = h.path.to_str().unwrap();
            let (base, spool) = url.rsplit_once("spool=").unwrap();
            let base = base.trim_end_matches(['?', '&']);
            let out = std::process::Command::new("psql")
                .args([
                    base,
                    "-XAtqc",
                    &format!(
                        "SELECT count(*) FROM spool.push_entries \
                         WHERE spool = '{spool}' AND client_id = '{client}'"
                    ),
                ])
                .output()
                .expect("run psql");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
        }
    }
}

/// SPEC §7: "keys containing a NUL byte are refused everywhere". Every
/// way into a spool refuses such a key and stores nothing; a push entry
/// that carries one is recorded as rejected with the reason.
fn keys_with_a_nul_byte_are_refused(s: Setup) {
    let mut h = s.open(None);
    let a = add(&h, "before", "k");
    let bad = "a\0b";
    let invalid = |r: Result<(), Error>, what: &str| {
        let e = r.expect_err(what);
        assert_eq!(e.kind(), ErrorKind::Data, "{what}: {e}");
        assert!(e.to_string().contains("NUL byte"), "{what}: {e}");
    };
    invalid(h.q().enqueue(b"x", bad).map(drop), "enqueue");
    invalid(
        h.q()
            .enqueue_batch(
                &[NewItem::new("ok", "fine"), NewItem::new("x", bad)],
                &EnqueueOptions::default(),
            )
            .map(drop),
        "enqueue_batch",
    );
    invalid(
        h.q()
            .enqueue_stream(
                &mut [NewItem::new("ok", "fine"), NewItem::new("x", bad)]
                    .into_iter()
                    .map(Ok),
                &EnqueueOptions::default(),
            )
            .map(drop),
        "enqueue_stream",
    );
    invalid(
        h.q()
            .import(&[
                record(50, "ok", "fine", RecordState::Pending),
                record(51, "x", bad, RecordState::Dead),
            ])
            .map(drop),
        "import",
    );
    h.step();
    assert_eq!(ids(&drain(&h)), vec![a]);
    assert_eq!(h.q().dead_count().unwrap(), 0);
    assert_eq!(h.q().high_water().unwrap(), a);
    assert!(
        !enq(&h, b"y", "fine").deduplicated,
        "nothing of the batches stayed"
    );
    // Pushed: a rejected entry, with its reason, nothing stored.
    let r = accepted(receive(
        &h,
        &request("edge", 0, &[(1, bad, "x"), (2, "a", "b\0x")]),
        &ReceiveLimits::default(),
    ));
    assert_eq!((r.last_seq, r.applied), (2, 1));
    assert_eq!(r.rejected.len(), 1);
    assert_eq!(r.rejected[0].seq, 1);
    assert!(r.rejected[0].error.contains("NUL byte"), "{:?}", r.rejected);
    h.step();
    let keys: Vec<String> = drain(&h).into_iter().map(|i| i.key).collect();
    assert_eq!(keys, ["k", "fine", "edge:a"]);
}

/// A refused entry advances `last_seq`, is remembered with its reason and
/// reported in every answer until the client acknowledges it.
fn received_rejects_are_reported_until_acknowledged(s: Setup) {
    let mut h = s.open(None);
    let limits = ReceiveLimits {
        max_payload: 4,
        ..ReceiveLimits::default()
    };
    let req = request(
        "edge",
        0,
        &[(1, "", "ok"), (2, "", "far too large"), (3, "", "ok3")],
    );
    let r = accepted(receive(&h, &req, &limits));
    assert_eq!(r.last_seq, 3);
    assert_eq!(r.rejected.len(), 1);
    assert_eq!(r.rejected[0].seq, 2);
    assert!(
        r.rejected[0].error.contains("max-payload") || r.rejected[0].error.contains("payload"),
        "{:?}",
        r.rejected
    );
    h.step();
    assert_eq!(client(&h, "edge").unwrap().rejected, r.rejected);
    // The answer was lost: the next push (acked 0) hears of it again.
    let r2 = accepted(receive(&h, &request("edge", 0, &[(4, "", "ok4")]), &limits));
    assert_eq!(r2.rejected, r.rejected);
    h.step();
    // Acknowledged: forgotten.
    let r3 = accepted(receive(&h, &request("edge", 4, &[]), &limits));
    assert!(r3.rejected.is_empty());
    h.step();
    assert!(client(&h, "edge").unwrap().rejected.is_empty());
    assert_eq!(h.q().size().unwrap(), 3);
}

/// A group whose transaction fails leaves no trace: no item, no
/// `last_seq`, no reject.
fn a_failed_receive_changes_nothing(s: Setup) {
    let mut h = s.open(None);
    let limits = ReceiveLimits {
        max_payload: 4,
        ..ReceiveLimits::default()
    };
    let req = request("edge", 0, &[(1, "k", "one"), (2, "", "far too large")]);
    let e = h
        .q()
        .receive(&mut |txn| {
            apply_push(txn, &req, &limits)?;
            Err(Error::Internal("the answer could not be sent".into()))
        })
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Internal);
    h.step();
    assert_eq!(h.q().size().unwrap(), 0);
    assert!(h.q().push_clients().unwrap().is_empty());
    let r = accepted(receive(&h, &req, &limits));
    assert_eq!((r.last_seq, r.applied, r.duplicates), (2, 1, 0));
}

/// `push_client_count` is the number of clients `push_clients` lists
/// (what `spool serve`'s `/metrics` shows), and a second, read-only
/// handle (`Spool::reader`, where `/metrics` reads) sees what the first
/// committed — but cannot write.
fn push_clients_are_counted_and_read_from_a_second_handle(s: Setup) {
    let mut h = s.open(None);
    assert_eq!(h.q().push_client_count().unwrap(), 0);
    let limits = ReceiveLimits {
        max_payload: 4,
        ..ReceiveLimits::default()
    };
    for (client, entries) in [
        ("edge-a", &[(1, "", "one")][..]),
        ("edge-b", &[(1, "", "far too large"), (2, "", "")][..]),
        ("edge-c", &[(1, "", "")][..]),
    ] {
        accepted(receive(&h, &request(client, 0, entries), &limits));
    }
    // Again, and a client with nothing but an ack: no new clients twice.
    accepted(receive(
        &h,
        &request("edge-a", 1, &[(2, "", "two")]),
        &limits,
    ));
    h.step();
    assert_eq!(h.q().push_clients().unwrap().len(), 3);
    assert_eq!(h.q().push_client_count().unwrap(), 3);
    let Some(reader) = h.spool().reader().unwrap() else {
        assert_eq!(s.backend, Backend::Memory, "only a memory spool has none");
        return;
    };
    assert_eq!(reader.push_client_count().unwrap(), 3);
    accepted(receive(
        &h,
        &request("edge-d", 0, &[(1, "", "four")]),
        &limits,
    ));
    assert_eq!(reader.push_client_count().unwrap(), 4, "sees later commits");
    assert_eq!(reader.size().unwrap(), h.q().size().unwrap());
    assert!(reader.enqueue(b"x", "").is_err(), "the reader is read-only");
    assert_eq!(h.q().size().unwrap(), 3);
}

/// A full receiving spool stops the batch before the entry that does not
/// fit: a 503 when nothing could be processed, else a partial `last_seq`;
/// a dedup hit still goes through.
fn a_full_receiving_spool_stops_the_batch(s: Setup) {
    let mut h = s.open(Some(2));
    // As if pushed by "edge" earlier: its key in edge's scope.
    add(&h, "local", "edge:k-local");
    let limits = ReceiveLimits::default();
    let r = accepted(receive(
        &h,
        &request(
            "edge",
            0,
            &[(1, "", "one"), (2, "", "two"), (3, "", "three")],
        ),
        &limits,
    ));
    assert_eq!((r.last_seq, r.applied), (1, 1));
    h.step();
    assert!(matches!(
        receive(&h, &request("edge", 0, &[(2, "", "two")]), &limits),
        PushOutcome::Full { last_seq: 1 }
    ));
    let r = accepted(receive(
        &h,
        &request("edge", 0, &[(2, "k-local", "dup")]),
        &limits,
    ));
    assert_eq!((r.last_seq, r.applied), (2, 1), "a dedup hit needs no room");
    h.step();
    assert_eq!(h.q().size().unwrap(), 2);
}

/// The digest of every applied number is kept, durably: the same number
/// with other content — a copied spool — is a conflict, nothing applied.
fn a_reused_number_with_other_content_is_refused_after_reopen(s: Setup) {
    let mut h = s.open(None);
    let limits = ReceiveLimits::default();
    accepted(receive(
        &h,
        &request("edge", 0, &[(1, "", "one"), (2, "", "two")]),
        &limits,
    ));
    h.step();
    let o = receive(
        &h,
        &request("edge", 0, &[(2, "", "other"), (3, "", "three")]),
        &limits,
    );
    match o {
        PushOutcome::Conflict { last_seq, error } => {
            assert_eq!(last_seq, 2);
            assert!(error.contains("sequence 2 reused"), "{error}");
        }
        other => panic!("{other:?}"),
    }
    h.step();
    assert_eq!(h.q().size().unwrap(), 2, "nothing of the batch applied");
    assert!(matches!(
        receive(&h, &request("edge", 0, &[(5, "", "gap")]), &limits),
        PushOutcome::Conflict { last_seq: 2, .. }
    ));
}

/// Group commit: many requests, of several clients, in one transaction.
fn one_receive_commits_many_requests(s: Setup) {
    let mut h = s.open(None);
    let limits = ReceiveLimits::default();
    let reqs = [
        request("a", 0, &[(1, "", "a1")]),
        request("b", 0, &[(1, "", "b1"), (2, "", "b2")]),
        request("a", 0, &[(1, "", "a1"), (2, "", "a2")]),
    ];
    let mut outcomes = Vec::new();
    h.q()
        .receive(&mut |txn| {
            for r in &reqs {
                outcomes.push(apply_push(txn, r, &limits)?);
            }
            Ok(())
        })
        .unwrap();
    let last: Vec<u64> = outcomes.into_iter().map(|o| accepted(o).last_seq).collect();
    assert_eq!(last, vec![1, 2, 2]);
    h.step();
    assert_eq!(
        payloads(&drain(&h)),
        ["a1", "b1", "b2", "a2"]
            .map(|p| p.as_bytes().to_vec())
            .to_vec()
    );
    assert_eq!(client(&h, "a").unwrap().last_seq, 2);
    assert_eq!(client(&h, "b").unwrap().last_seq, 2);
}

// -------------------------------------------------------------- streaming

/// `enqueue_stream` does what `enqueue_batch` does with the same items —
/// ids, dedup against pending items and within the batch (across every
/// internal chunk), results in order — in one commit.
fn a_streamed_batch_is_enqueue_batch_without_the_memory(s: Setup) {
    let mut h = s.open(None);
    add(&h, "pending", "k7");
    let items: Vec<NewItem> = (0..300)
        .map(|i| {
            let key = match i % 7 {
                0 => format!("k{}", i % 50),
                3 => "k7".to_string(),
                _ => String::new(),
            };
            NewItem::new(format!("item {i}"), key)
        })
        .collect();
    let model = Spool::memory(&Default::default());
    model.enqueue(b"pending", "k7").unwrap();
    let want: Vec<Enqueued> = model.enqueue_batch(&items, &Default::default()).unwrap();
    let got = h
        .q()
        .enqueue_stream(&mut items.iter().cloned().map(Ok), &Default::default())
        .unwrap();
    assert_eq!(got.iter().collect::<Vec<_>>(), want);
    assert_eq!(got.len(), 300);
    assert_eq!(
        got.stored(),
        want.iter().filter(|e| !e.deduplicated).count() as u64
    );
    h.step();
    assert_eq!(payloads(&drain(&h)), payloads(&model.drain().unwrap()));
    assert_eq!(ids(&drain(&h)), ids(&model.drain().unwrap()));
}

/// A bad item in the middle of the stream (a malformed input line), or a
/// batch the depth bound cannot take, stops it: nothing is stored.
fn a_streamed_batch_that_fails_stores_nothing(s: Setup) {
    let mut h = s.open(Some(250));
    add(&h, "before", "kb");
    let e = h
        .q()
        .enqueue_stream(
            &mut (0..200).map(|i| {
                if i == 150 {
                    Err(Error::InvalidInput("stdin line 151: not JSON".into()))
                } else {
                    Ok(NewItem::new(format!("x{i}"), format!("k{i}")))
                }
            }),
            &Default::default(),
        )
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Data);
    h.step();
    assert_eq!(h.q().size().unwrap(), 1);
    assert_eq!(h.q().high_water().unwrap(), 1, "no id was used up");
    let e = h
        .q()
        .enqueue_stream(
            &mut (0..300).map(|i| Ok(NewItem::new(format!("y{i}"), ""))),
            &Default::default(),
        )
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::QueueFull {
                max_depth: 250,
                depth: 1
            }
        ),
        "{e}"
    );
    h.step();
    assert_eq!(h.q().size().unwrap(), 1);
    // The keys of the failed batches were never taken.
    assert!(!enq(&h, b"again", "k3").deduplicated);
    let ok = h
        .q()
        .enqueue_stream(
            &mut (0..249).map(|i| Ok(NewItem::new(format!("z{i}"), ""))),
            &Default::default(),
        )
        .unwrap_err();
    assert!(matches!(ok, Error::QueueFull { .. }), "2 + 249 > 250");
    assert_eq!(
        h.q()
            .enqueue_stream(
                &mut (0..248).map(|i| Ok(NewItem::new(format!("z{i}"), ""))),
                &Default::default(),
            )
            .unwrap()
            .stored(),
        248
    );
}

/// The same for `import_stream`.
fn a_streamed_import_that_fails_stores_nothing(s: Setup) {
    let mut h = s.open(None);
    let records: Vec<Record> = (1..=100u64)
        .map(|id| Record {
            item: fresh(id, &format!("r{id}"), &format!("k{id}"), T0),
            state: if id % 10 == 0 {
                RecordState::Dead
            } else {
                RecordState::Pending
            },
            dead_at: (id % 10 == 0).then_some(T0),
            delivery: None,
        })
        .collect();
    let mut heard = 0;
    let e =
        h.q()
            .import_stream(
                &mut records.iter().cloned().map(Ok).chain(std::iter::once(Err(
                    Error::InvalidInput("line 101: bad".into()),
                ))),
                &mut |_, _| heard += 1,
            )
            .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Data);
    assert!(heard <= 100);
    h.step();
    assert_eq!(h.q().size().unwrap(), 0);
    assert_eq!(h.q().dead_count().unwrap(), 0);
    let mut kept = 0;
    h.q()
        .import_stream(&mut records.iter().cloned().map(Ok), &mut |r, i| {
            assert_eq!(i.id, r.item.id);
            kept += u64::from(i.kept_id);
        })
        .unwrap();
    h.step();
    assert_eq!(
        (kept, h.q().size().unwrap(), h.q().dead_count().unwrap()),
        (100, 90, 10)
    );
}

/// `next_retry_after(now)`: the earliest retry time after `now` among
/// pending items that are not held; `None` when nothing waits.
fn next_retry_after_is_the_earliest_waiting_item_not_held(s: Setup) {
    let mut h = s.open(None);
    let now = h.now();
    assert_eq!(h.q().next_retry_after(now).unwrap(), None, "an empty spool");
    let ids: Vec<ItemId> = (0..4).map(|i| add(&h, &format!("p{i}"), "")).collect();
    let upd = |at: Timestamp| AttemptUpdate {
        attempts: 1,
        next_retry_at: Some(at),
        last_error: Some("x".into()),
    };
    let (t1, t2, t3) = (
        now.saturating_add(secs(10)),
        now.saturating_add(secs(20)),
        now.saturating_add(secs(30)),
    );
    assert_eq!(h.q().next_retry_after(now).unwrap(), None, "nothing waits");
    h.q().record_attempt(ids[0], &upd(t2)).unwrap();
    h.q().record_attempt(ids[1], &upd(t1)).unwrap();
    h.q().record_attempt(ids[2], &upd(t3)).unwrap();
    h.q().record_attempt(ids[3], &upd(now)).unwrap();
    h.step();
    assert_eq!(h.q().next_retry_after(now).unwrap(), Some(t1));
    assert_eq!(
        h.q().next_retry_after(t1).unwrap(),
        Some(t2),
        "after, not at"
    );
    h.q().set_held(&[ids[1]], true).unwrap();
    h.step();
    assert_eq!(
        h.q().next_retry_after(now).unwrap(),
        Some(t2),
        "held items never become due"
    );
    h.q().mark_done(&[ids[0]]).unwrap();
    h.step();
    assert_eq!(h.q().next_retry_after(now).unwrap(), Some(t3));
    assert_eq!(h.q().next_retry_after(t3).unwrap(), None);
}

// ------------------------------------------------------------ §9 policies

fn new_item(payload: &str, key: &str, group: Option<&str>, ck: Option<&str>) -> NewItem {
    let mut n = NewItem::new(payload.as_bytes(), key);
    n.group = group.map(str::to_string);
    n.coalesce_key = ck.map(str::to_string);
    n
}

fn enq_one(h: &Harness, n: NewItem) -> Enqueued {
    h.q()
        .enqueue_batch(&[n], &EnqueueOptions::default())
        .unwrap()
        .pop()
        .unwrap()
}

fn pending_ids(h: &Harness) -> Vec<ItemId> {
    h.q().drain().unwrap().iter().map(|i| i.id).collect()
}

/// `Item::group` and `Item::coalesce_key` are stored as given and come
/// back from `get`, `page`, `drain`, the dead-letter set and a requeue.
fn groups_and_coalesce_keys_are_kept(s: Setup) {
    let mut h = s.open(None);
    let a = enq_one(&h, new_item("a", "", Some("g1"), None)).id;
    let b = enq_one(&h, new_item("b", "kb", None, Some("c1"))).id;
    let c = enq_one(&h, new_item("c", "", Some("g ü/2"), Some("c2"))).id;
    let d = add(&h, "d", "");
    h.step();
    let got = |id| h.q().get(id).unwrap().unwrap();
    assert_eq!(got(a).group.as_deref(), Some("g1"));
    assert_eq!(got(a).coalesce_key, None);
    assert_eq!(got(b).group, None);
    assert_eq!(got(b).coalesce_key.as_deref(), Some("c1"));
    assert_eq!(got(c).group.as_deref(), Some("g ü/2"));
    assert_eq!(got(c).coalesce_key.as_deref(), Some("c2"));
    assert_eq!((got(d).group, got(d).coalesce_key), (None, None));
    let page = h.q().page(0, 10).unwrap();
    assert_eq!(page[2].group.as_deref(), Some("g ü/2"));
    assert!(h.q().dead_letter(c, "boom").unwrap());
    h.step();
    let dl = h.q().dead_get(c).unwrap().unwrap();
    assert_eq!(dl.item.group.as_deref(), Some("g ü/2"));
    assert_eq!(dl.item.coalesce_key.as_deref(), Some("c2"));
    assert_eq!(h.q().requeue(&[c]).unwrap(), vec![true]);
    h.step();
    assert_eq!(
        h.q().get(c).unwrap().unwrap().group.as_deref(),
        Some("g ü/2")
    );
}

/// A new item with coalesce key K replaces every pending item with K that
/// was never attempted and is not in flight (held or not), releasing its
/// key; attempted items and other keys stay; the new item gets a new id.
fn coalescing_replaces_never_attempted_items_only(s: Setup) {
    let mut h = s.open(None);
    let a = enq_one(&h, new_item("a", "", None, Some("k"))).id;
    h.q().set_attempts(a, 1).unwrap();
    let c = enq_one(&h, new_item("c", "kc", None, Some("k")));
    assert!(c.replaced.is_empty(), "a was attempted");
    let c = c.id;
    h.q().set_held(&[c], true).unwrap();
    let d = enq_one(&h, new_item("d", "", None, Some("other"))).id;
    let e = add(&h, "e", "");
    h.step();
    let r = enq_one(&h, new_item("new", "", None, Some("k")));
    assert!(!r.deduplicated);
    assert_eq!(r.replaced, vec![c]);
    assert!(r.evicted.is_empty());
    assert!(r.id > e);
    h.step();
    assert_eq!(pending_ids(&h), vec![a, d, e, r.id]);
    assert_eq!(h.q().size().unwrap(), 4);
    assert_eq!(
        h.q().dead_count().unwrap(),
        0,
        "replaced items are gone, not dead"
    );
    assert!(
        !h.q().get(r.id).unwrap().unwrap().held,
        "the new item is not held"
    );
    // c's key was released with it.
    assert!(!enq(&h, b"again", "kc").deduplicated);
}

/// Within a batch a later item replaces an earlier one with the same
/// coalesce key; a dedup hit (checked first) replaces nothing.
fn coalescing_within_a_batch_and_against_dedup(s: Setup) {
    let mut h = s.open(None);
    let keep = enq_one(&h, new_item("keep", "dup", None, Some("k")));
    let r = h
        .q()
        .enqueue_batch(
            &[
                new_item("x", "dup", None, Some("k")),
                new_item("y", "", None, Some("z")),
                new_item("w", "", None, Some("z")),
            ],
            &EnqueueOptions::default(),
        )
        .unwrap();
    assert!(r[0].deduplicated && r[0].replaced.is_empty());
    assert_eq!(r[0].id, keep.id);
    assert!(r[1].replaced.is_empty());
    assert_eq!(r[2].replaced, vec![r[1].id]);
    h.step();
    assert_eq!(pending_ids(&h), vec![keep.id, r[2].id]);
}

/// An item in flight (it has a push sequence number) is never replaced.
fn coalescing_leaves_in_flight_items(s: Setup) {
    let mut h = s.open(None);
    let a = enq_one(&h, new_item("a", "", None, Some("k"))).id;
    assert_eq!(h.q().push_assign(&[a]).unwrap().len(), 1);
    h.step();
    let b = enq_one(&h, new_item("b", "", None, Some("k")));
    assert!(b.replaced.is_empty(), "a is in flight");
    let c = enq_one(&h, new_item("c", "", None, Some("k")));
    assert_eq!(c.replaced, vec![b.id]);
    h.step();
    assert_eq!(pending_ids(&h), vec![a, c.id]);
}

/// drop-oldest: each item over the bound moves the oldest pending item
/// that is not held and not in flight to the dead letters with
/// "evicted: spool full (max-depth N)"; the count survives reopening.
fn drop_oldest_evicts_the_oldest_item_not_held_nor_in_flight(s: Setup) {
    let mut h = s.open(Some(3));
    h.q().set_on_full(OnFull::DropOldest).unwrap();
    let a = add(&h, "a", "");
    let b = add(&h, "b", "kb");
    let c = add(&h, "c", "");
    h.q().set_held(&[a], true).unwrap();
    h.step();
    let d = enq_one(&h, new_item("d", "", None, None));
    assert_eq!(d.evicted, vec![b]);
    h.step();
    assert_eq!(pending_ids(&h), vec![a, c, d.id]);
    let dl = h.q().dead_get(b).unwrap().unwrap();
    assert_eq!(
        dl.item.last_error.as_deref(),
        Some("evicted: spool full (max-depth 3)")
    );
    assert_eq!(dl.item.payload, b"b");
    // Its key is free again.
    assert_eq!(h.q().push_assign(&[c]).unwrap().len(), 1);
    h.step();
    let e = enq_one(&h, new_item("e", "kb", None, None));
    assert!(!e.deduplicated);
    assert_eq!(e.evicted, vec![d.id], "a is held, c in flight");
    h.step();
    assert_eq!(pending_ids(&h), vec![a, c, e.id]);
    let st = h.q().stats(h.now()).unwrap();
    assert_eq!(st.evicted_total, 2);
    assert_eq!(st.on_full, OnFull::DropOldest);
    assert_eq!(st.dead_letters, 2);
    // A dedup hit on a full spool evicts nothing.
    let again = enq(&h, b"again", "kb");
    assert!(again.deduplicated && again.evicted.is_empty());
    assert_eq!(h.q().stats(h.now()).unwrap().evicted_total, 2);
}

/// drop-oldest with nothing evictable fails as reject does and changes
/// nothing.
fn drop_oldest_with_nothing_to_evict_is_full(s: Setup) {
    let mut h = s.open(Some(2));
    h.q().set_on_full(OnFull::DropOldest).unwrap();
    let a = add(&h, "a", "");
    let b = add(&h, "b", "");
    h.q().set_held(&[a], true).unwrap();
    assert_eq!(h.q().push_assign(&[b]).unwrap().len(), 1);
    h.step();
    let err = h
        .q()
        .enqueue_batch(&[NewItem::new(&b"c"[..], "")], &EnqueueOptions::default())
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Temporary, "{err}");
    h.step();
    assert_eq!(pending_ids(&h), vec![a, b]);
    assert_eq!(h.q().dead_count().unwrap(), 0);
    assert_eq!(h.q().stats(h.now()).unwrap().evicted_total, 0);
}

/// A batch larger than the room evicts as it goes, its own earlier items
/// included once nothing older can go; the bound holds afterwards.
fn drop_oldest_in_a_batch(s: Setup) {
    let mut h = s.open(Some(3));
    h.q().set_on_full(OnFull::DropOldest).unwrap();
    let a = add(&h, "a", "");
    h.step();
    let batch: Vec<NewItem> = (0..5).map(|i| NewItem::new(format!("n{i}"), "")).collect();
    let r = h
        .q()
        .enqueue_batch(&batch, &EnqueueOptions::default())
        .unwrap();
    let ids: Vec<ItemId> = r.iter().map(|e| e.id).collect();
    let evicted: Vec<ItemId> = r.iter().flat_map(|e| e.evicted.clone()).collect();
    assert_eq!(evicted, vec![a, ids[0], ids[1]]);
    h.step();
    assert_eq!(pending_ids(&h), ids[2..].to_vec());
    assert_eq!(h.q().size().unwrap(), 3);
    assert_eq!(h.q().dead_count().unwrap(), 3);
}

/// The overflow policy is a stored setting.
fn on_full_is_remembered(s: Setup) {
    let mut h = s.open(None);
    assert_eq!(h.q().on_full().unwrap(), OnFull::Reject);
    h.q().set_on_full(OnFull::DropOldest).unwrap();
    h.step();
    assert_eq!(h.q().on_full().unwrap(), OnFull::DropOldest);
    h.q().set_on_full(OnFull::Reject).unwrap();
    h.step();
    assert_eq!(h.q().on_full().unwrap(), OnFull::Reject);
}

// ------------------------------------------------------- retention (§9)

const HOUR: Duration = Duration::from_secs(3600);

fn delivered_ids(h: &Harness) -> Vec<ItemId> {
    h.q()
        .delivered_page(0, 100_000)
        .unwrap()
        .iter()
        .map(|d| d.item.id)
        .collect()
}

/// The retention window is a stored setting; off is the default.
fn retain_is_remembered(s: Setup) {
    let mut h = s.open(None);
    assert_eq!(h.q().retain().unwrap(), None);
    h.q().set_retain(Some(7 * 24 * HOUR)).unwrap();
    h.step();
    assert_eq!(h.q().retain().unwrap(), Some(7 * 24 * HOUR));
    assert_eq!(h.q().stats(T0).unwrap().retain, Some(7 * 24 * HOUR));
    h.q().set_retain(None).unwrap();
    h.step();
    assert_eq!(h.q().retain().unwrap(), None);
}

/// `deliver` with a window set: the items leave the pending set and are
/// kept read-only with the time and the evidence; stats count them.
fn retention_keeps_delivered_items_with_their_evidence(s: Setup) {
    let mut h = s.open(Some(2));
    h.q().set_retain(Some(HOUR)).unwrap();
    let a = add(&h, "a", "ka");
    let b = add(&h, "b", "");
    h.clock.advance(Duration::from_secs(5));
    let flags = h
        .q()
        .deliver(&[
            (a, Evidence::Http(201)),
            (b, Evidence::Exit(0)),
            (99, Evidence::Done),
        ])
        .unwrap();
    assert_eq!(flags, vec![true, true, false]);
    h.step();
    // Retained items do not count against the depth bound.
    let c = add(&h, "c", "");
    add(&h, "d", "");
    assert_eq!(pending_ids(&h).len(), 2);
    assert_eq!(h.q().get(a).unwrap(), None);
    let da = h.q().delivered_get(a).unwrap().expect("a is retained");
    assert_eq!(da.item.payload, b"a");
    assert_eq!(da.item.key, "ka");
    assert_eq!(da.delivery.evidence, Evidence::Http(201));
    assert_eq!(
        da.delivery.at.as_secs(),
        T0.as_secs() + 5,
        "delivered_at is the commit's time"
    );
    let db = h.q().delivered_get(b).unwrap().expect("b is retained");
    assert_eq!(db.delivery.evidence, Evidence::Exit(0));
    assert_eq!(h.q().delivered_get(c).unwrap(), None);
    assert_eq!(delivered_ids(&h), vec![a, b]);
    assert_eq!(h.q().delivered_page(a, 10).unwrap().len(), 1);
    let st = h.q().stats(spool::time::Clock::now(&h.clock)).unwrap();
    assert_eq!((st.depth, st.delivered_retained), (2, 2));
    // mark_done is a delivery with "marked done" evidence.
    h.q().mark_done(&[c]).unwrap();
    h.step();
    assert_eq!(
        h.q().delivered_get(c).unwrap().unwrap().delivery.evidence,
        Evidence::Done
    );
    // Ids stay unique: new items go above every retained one.
    assert!(add(&h, "e", "") > c);
}

/// The retained record of a delivered item is the item as it was
/// pending — payload bytes (not UTF-8 here), key, attempts, last error,
/// enqueue time, group, coalesce key — minus what only a pending item has
/// (held, retry time, push number).
fn a_retained_record_keeps_every_field_of_its_item(s: Setup) {
    let mut h = s.open(None);
    h.q().set_retain(Some(HOUR)).unwrap();
    let mut n = new_item("", "key-1", Some("g/1"), Some("ck-1"));
    n.payload = vec![0xff, 0x00, b'x', 0xfe];
    let a = enq_one(&h, n).id;
    let upd = AttemptUpdate {
        attempts: 3,
        next_retry_at: Some(T0.saturating_add(Duration::from_secs(60))),
        last_error: Some("http 503".into()),
    };
    assert!(h.q().record_attempt(a, &upd).unwrap());
    h.step();
    let pending = h.q().get(a).unwrap().unwrap();
    assert_eq!(pending.attempts, 3);
    assert_eq!(
        h.q().deliver(&[(a, Evidence::Http(200))]).unwrap(),
        vec![true]
    );
    h.step();
    let kept = h.q().delivered_get(a).unwrap().expect("a is retained");
    let want = Item {
        held: false,
        next_retry_at: None,
        push_seq: None,
        ..pending
    };
    assert_eq!(kept.item, want);
    assert_eq!(kept.item.payload, vec![0xff, 0x00, b'x', 0xfe]);
    assert_eq!(kept.delivery.evidence, Evidence::Http(200));
}

/// A retained item's key dedups until its window ends (SPEC §9), then a
/// new item is stored and the expired record is pruned.
fn retained_keys_dedup_within_the_window_only(s: Setup) {
    let mut h = s.open(None);
    h.q().set_retain(Some(HOUR)).unwrap();
    let a = add(&h, "first", "order-42");
    h.q().deliver(&[(a, Evidence::Http(200))]).unwrap();
    h.step();
    h.clock.advance(HOUR - Duration::from_secs(1));
    let again = h.q().enqueue(b"second", "order-42").unwrap();
    assert_eq!(again, Enqueued::delivered(a));
    assert_eq!(h.q().size().unwrap(), 0, "a dedup hit stores nothing");
    // In a batch, too, and a pending key still wins over a retained one.
    let r = h
        .q()
        .enqueue_batch(
            &[NewItem::new("x", "order-42"), NewItem::new("y", "other")],
            &EnqueueOptions::default(),
        )
        .unwrap();
    assert_eq!(r[0], Enqueued::delivered(a));
    assert!(!r[1].deduplicated);
    h.step();
    assert_eq!(
        h.q().enqueue(b"z", "other").unwrap(),
        Enqueued::dedup(r[1].id)
    );
    // The window ends: the key is free, the record goes.
    h.clock.advance(Duration::from_secs(1));
    let fresh_one = h.q().enqueue(b"third", "order-42").unwrap();
    assert!(!fresh_one.deduplicated);
    assert!(fresh_one.id > a);
    h.step();
    assert_eq!(
        h.q().delivered_get(a).unwrap(),
        None,
        "pruned by the enqueue"
    );
    assert_eq!(
        h.q()
            .stats(spool::time::Clock::now(&h.clock))
            .unwrap()
            .delivered_retained,
        0
    );
}

/// Without a window (the default) delivered items are deleted, as ever.
fn without_retention_delivered_items_are_deleted(s: Setup) {
    let mut h = s.open(None);
    let a = add(&h, "a", "k");
    h.q().deliver(&[(a, Evidence::Http(200))]).unwrap();
    h.step();
    assert_eq!(h.q().delivered_get(a).unwrap(), None);
    assert!(delivered_ids(&h).is_empty());
    assert_eq!(h.q().stats(T0).unwrap().delivered_retained, 0);
    assert!(!h.q().enqueue(b"b", "k").unwrap().deduplicated);
}

/// Turning retention off stops deduplicating at once, and the records
/// kept are pruned as expired.
fn retention_off_prunes_what_was_kept(s: Setup) {
    let mut h = s.open(None);
    h.q().set_retain(Some(HOUR)).unwrap();
    let a = add(&h, "a", "k");
    h.q().deliver(&[(a, Evidence::Exit(0))]).unwrap();
    h.q().set_retain(None).unwrap();
    h.step();
    let b = h.q().enqueue(b"b", "k").unwrap();
    assert!(!b.deduplicated);
    h.step();
    assert_eq!(h.q().delivered_get(a).unwrap(), None);
}

/// Expired records go in bounded batches: `prune_delivered(n)` deletes
/// at most n, a mutating call at most PRUNE_BATCH; nothing pending is
/// ever touched.
fn pruning_goes_in_bounded_batches(s: Setup) {
    let mut h = s.open(None);
    h.q().set_retain(Some(HOUR)).unwrap();
    let n = PRUNE_BATCH + 150;
    let items: Vec<NewItem> = (0..n).map(|i| NewItem::new(format!("p{i}"), "")).collect();
    let ids: Vec<ItemId> = h
        .q()
        .enqueue_batch(&items, &EnqueueOptions::default())
        .unwrap()
        .iter()
        .map(|e| e.id)
        .collect();
    let keep = add(&h, "stays pending", "");
    let done: Vec<(ItemId, Evidence)> = ids.iter().map(|i| (*i, Evidence::Http(200))).collect();
    h.q().deliver(&done).unwrap();
    h.step();
    assert_eq!(
        h.q().prune_delivered(1000).unwrap(),
        0,
        "nothing expired yet"
    );
    h.clock.advance(2 * HOUR);
    assert_eq!(h.q().prune_delivered(100).unwrap(), 100);
    h.step();
    assert_eq!(delivered_ids(&h).len(), n - 100);
    add(&h, "a mutation prunes a batch", "");
    h.step();
    assert_eq!(delivered_ids(&h).len(), n - 100 - PRUNE_BATCH);
    assert_eq!(h.q().prune_delivered(1000).unwrap(), 50);
    assert!(delivered_ids(&h).is_empty());
    assert!(h.q().get(keep).unwrap().is_some());
    assert_eq!(h.q().size().unwrap(), 2);
}

/// Records go when their own window ends, whatever the order of their
/// deliveries: in id order, out of it (a retried item delivered after
/// later ones), and across a clock stepped back; pruned in batches of
/// one, every expired record goes before any record inside its window.
fn records_delivered_out_of_order_expire_on_time(s: Setup) {
    let mut h = s.open(None);
    h.q().set_retain(Some(HOUR)).unwrap();
    let ids: Vec<ItemId> = (0..6).map(|i| add(&h, &format!("o{i}"), "")).collect();
    let minute = Duration::from_secs(60);
    let deliver = |h: &Harness, id: ItemId| {
        assert_eq!(
            h.q().deliver(&[(id, Evidence::Http(200))]).unwrap(),
            vec![true]
        );
    };
    // Delivered at T0+1m, +2m, +3m: ids[1], ids[2], then ids[0] (late).
    for id in [ids[1], ids[2], ids[0]] {
        h.clock.advance(minute);
        deliver(&h, id);
    }
    h.step();
    // ids[4] at +10m; then the clock steps back to +5m for ids[5] and
    // ids[3] (the latter also out of id order).
    h.clock.set(T0.saturating_add(10 * minute));
    deliver(&h, ids[4]);
    h.clock.set(T0.saturating_add(5 * minute));
    deliver(&h, ids[5]);
    h.clock.advance(minute);
    deliver(&h, ids[3]);
    h.step();
    let at = |m: u32| T0.saturating_add(HOUR + minute * m);
    let mut expect: Vec<ItemId> = ids.clone();
    // (minute the window ends, id), in the order they expire.
    for (m, id) in [
        (1, ids[1]),
        (2, ids[2]),
        (3, ids[0]),
        (5, ids[5]),
        (6, ids[3]),
        (10, ids[4]),
    ] {
        h.clock.set(at(m).saturating_add(Duration::from_secs(1)));
        expect.retain(|x| *x != id);
        // One at a time: the one record expired now goes, never another.
        assert_eq!(h.q().prune_delivered(1).unwrap(), 1, "at +{m}m");
        assert_eq!(h.q().prune_delivered(10).unwrap(), 0, "at +{m}m");
        h.step();
        assert_eq!(delivered_ids(&h), expect, "at +{m}m");
    }
}

/// A record delivered after a record with a higher id was pruned (the
/// only one kept, so nothing says it came late) still goes when its
/// window ends. (Found by the simulator: SQLite kept it for good.)
fn a_record_delivered_below_a_pruned_one_expires_too(s: Setup) {
    let mut h = s.open(None);
    h.q().set_retain(Some(HOUR)).unwrap();
    let a = add(&h, "a", "");
    let b = add(&h, "b", "");
    let minute = Duration::from_secs(60);
    assert_eq!(h.q().deliver(&[(b, Evidence::Exit(0))]).unwrap(), [true]);
    h.clock.advance(HOUR + minute);
    assert_eq!(h.q().prune_delivered(10).unwrap(), 1);
    h.step();
    assert_eq!(h.q().deliver(&[(a, Evidence::Exit(0))]).unwrap(), [true]);
    h.step();
    assert_eq!(delivered_ids(&h), [a]);
    h.clock.advance(HOUR + minute);
    assert_eq!(h.q().prune_delivered(10).unwrap(), 1, "expired");
    h.step();
    assert_eq!(delivered_ids(&h), Vec::<ItemId>::new());
}

/// A push ack delivers with the receiver's watermark as evidence.
fn push_acks_are_retained_with_the_watermark(s: Setup) {
    let mut h = s.open(None);
    h.q().set_retain(Some(HOUR)).unwrap();
    let ids: Vec<ItemId> = ["a", "b", "c"].iter().map(|p| add(&h, p, "")).collect();
    h.q().push_assign(&ids).unwrap();
    h.step();
    let ack = h.q().push_ack(2, &[]).unwrap();
    assert_eq!(ack.delivered, ids[..2].to_vec());
    h.step();
    for id in &ids[..2] {
        let d = h.q().delivered_get(*id).unwrap().expect("retained");
        assert_eq!(d.delivery.evidence, Evidence::Push(2));
        assert_eq!(d.item.push_seq, None, "a retained item is not in flight");
    }
    assert_eq!(h.q().push_in_flight(0, 10).unwrap().len(), 1);
}

/// A spool with a delivered record whose window has ended and an item
/// `b` in flight as number 1.
fn expired_record_and_one_in_flight(s: Setup) -> (Harness, ItemId) {
    let mut h = s.open(None);
    h.q().set_retain(Some(HOUR)).unwrap();
    let a = add(&h, "a", "");
    let b = add(&h, "b", "");
    assert_eq!(h.q().deliver(&[(a, Evidence::Exit(0))]).unwrap(), [true]);
    h.q().push_assign(&[b]).unwrap();
    h.step();
    h.clock.advance(HOUR + Duration::from_secs(60));
    (h, b)
}

/// A push ack prunes expired records in its commit, as every delivery
/// does. (Found by the simulator: the memory backend kept them.)
fn a_push_ack_prunes_expired_records(s: Setup) {
    let (mut h, b) = expired_record_and_one_in_flight(s);
    assert_eq!(h.q().push_ack(1, &[]).unwrap().delivered, [b]);
    h.step();
    assert_eq!(delivered_ids(&h), [b], "the expired record is pruned");
}

/// A push ack that delivers nothing (its one entry refused) prunes
/// expired records too. (Found by the simulator: PostgreSQL pruned only
/// along with a delivery.)
fn a_refusing_push_ack_prunes_expired_records(s: Setup) {
    let (mut h, b) = expired_record_and_one_in_flight(s);
    let ack = h.q().push_ack(1, &[(1, "HTTP 400".into())]).unwrap();
    assert!(ack.delivered.is_empty());
    assert_eq!(ack.rejected, [b]);
    h.step();
    assert!(delivered_ids(&h).is_empty(), "the expired record is pruned");
    let dead: Vec<ItemId> = dead(&h).iter().map(|d| d.item.id).collect();
    assert_eq!(dead, [b]);
}

/// Dead letters are not delivered items: they are never retained.
fn dead_letters_are_not_delivered(s: Setup) {
    let mut h = s.open(None);
    h.q().set_retain(Some(HOUR)).unwrap();
    let a = add(&h, "a", "k");
    h.q().dead_letter(a, "HTTP 400").unwrap();
    h.step();
    assert_eq!(h.q().delivered_get(a).unwrap(), None);
    assert!(h.q().dead_get(a).unwrap().is_some());
    assert!(!h.q().enqueue(b"again", "k").unwrap().deduplicated);
}

/// Delivered records import as retained items (an export of a spool with
/// retention moves them along), keeping time and evidence; their keys
/// dedup within the window.
fn delivered_records_import_and_dedup(s: Setup) {
    let mut h = s.open(None);
    h.q().set_retain(Some(HOUR)).unwrap();
    let mut item = fresh(7, "old", "k7", T0);
    item.attempts = 2;
    let rec = Record {
        item,
        state: RecordState::Delivered,
        dead_at: None,
        delivery: Some(Delivery {
            at: T0,
            evidence: Evidence::Push(41),
        }),
    };
    let r = h.q().import(&[rec]).unwrap();
    assert_eq!(r[0].id, 7);
    assert!(r[0].kept_id);
    h.step();
    assert_eq!(h.q().size().unwrap(), 0);
    let d = h
        .q()
        .delivered_get(7)
        .unwrap()
        .expect("imported as delivered");
    assert_eq!((d.item.attempts, d.item.key.as_str()), (2, "k7"));
    assert_eq!(
        d.delivery,
        Delivery {
            at: T0,
            evidence: Evidence::Push(41)
        }
    );
    assert_eq!(h.q().high_water().unwrap(), 7);
    assert_eq!(h.q().enqueue(b"dup", "k7").unwrap(), Enqueued::delivered(7));
}

/// `import` of the same records twice adds nothing the second time
/// (SPEC §3): pending and held records are dedup hits on the pending
/// items that carry their keys, dead records on the dead letter that
/// carries theirs (the lowest id), delivered records on the retained
/// record that carries theirs. The first import keeps every record, also
/// two dead letters or two delivered records with one key (each a death
/// or delivery of its own); a dead record whose key a dead letter the
/// spool had before carries is a hit already. Keys are compared only
/// when non-empty: a record without one is stored again.
fn importing_twice_adds_nothing_twice(s: Setup) {
    let mut h = s.open(None);
    h.q().set_retain(Some(HOUR)).unwrap();
    let own = add(&h, "own", "kd0");
    h.q().dead_letter(own, "HTTP 400").unwrap();
    let delivered = |id: ItemId, key: &str| Record {
        item: fresh(id, &format!("r{id}"), key, T0),
        state: RecordState::Delivered,
        dead_at: None,
        delivery: Some(Delivery {
            at: T0,
            evidence: Evidence::Http(200),
        }),
    };
    let recs = vec![
        record(10, "p", "kp", RecordState::Pending),
        record(11, "h", "kh", RecordState::Held),
        record(12, "d1", "kd", RecordState::Dead),
        record(13, "d2", "kd", RecordState::Dead),
        delivered(14, "kv"),
        delivered(15, "kv"),
        record(16, "d0", "kd0", RecordState::Dead),
        record(17, "no key", "", RecordState::Dead),
    ];
    let kept = |id| Imported {
        id,
        kept_id: true,
        deduplicated: false,
    };
    let hit = |id| Imported {
        id,
        kept_id: false,
        deduplicated: true,
    };
    let first = h.q().import(&recs).unwrap();
    assert_eq!(
        first,
        vec![
            kept(10),
            kept(11),
            kept(12),
            kept(13),
            kept(14),
            kept(15),
            hit(own),
            kept(17),
        ]
    );
    h.step();
    let dead_ids = |h: &Harness| -> Vec<ItemId> { dead(h).iter().map(|d| d.item.id).collect() };
    assert_eq!(ids(&drain(&h)), vec![10, 11]);
    assert_eq!(dead_ids(&h), vec![own, 12, 13, 17]);
    assert_eq!(delivered_ids(&h), vec![14, 15]);

    let second = h.q().import(&recs).unwrap();
    assert_eq!(
        second,
        vec![
            hit(10),
            hit(11),
            hit(12),
            hit(12),
            hit(14),
            hit(14),
            hit(own),
            Imported {
                id: 18,
                kept_id: false,
                deduplicated: false,
            },
        ]
    );
    h.step();
    assert_eq!(ids(&drain(&h)), vec![10, 11]);
    assert_eq!(dead_ids(&h), vec![own, 12, 13, 17, 18]);
    assert_eq!(delivered_ids(&h), vec![14, 15]);
    assert_eq!(h.q().high_water().unwrap(), 18);
    let stats = h.q().stats(T0).unwrap();
    assert_eq!((stats.dead_letters, stats.delivered_retained), (5, 2));
}

// ------------------------------------------------------- push identity

const OTHER_UUID: &str = "3f0c8a52-5a4e-4c77-9a3e-1f6f1d2b9c10";

fn push_at(last_assigned: u64, acked: u64, skips: &[u64]) -> PushState {
    PushState {
        last_assigned,
        acked,
        skips: skips.to_vec(),
    }
}

fn numbered(id: ItemId, seq: Option<u64>, state: RecordState) -> Record {
    let mut item = fresh(id, &format!("r{id}"), "", T0);
    item.push_seq = seq;
    item.held = state == RecordState::Held;
    Record {
        item,
        state,
        dead_at: (state == RecordState::Dead).then_some(T0),
        delivery: None,
    }
}

/// `adopt_identity`: a fresh spool takes the uuid and the push state, and
/// its next number follows the adopted counter.
fn adopt_identity_takes_the_uuid_and_push_state(s: Setup) {
    let mut h = s.open(None);
    let state = push_at(41, 39, &[40]);
    h.q().adopt_identity(OTHER_UUID, &state).unwrap();
    h.step();
    assert_eq!(h.q().uuid().unwrap(), OTHER_UUID);
    assert_eq!(push_state(&h), state);
    let id = add(&h, "next", "");
    assert_eq!(h.q().push_assign(&[id]).unwrap(), vec![(id, 42)]);
    h.step();
    assert_eq!(h.q().uuid().unwrap(), OTHER_UUID, "kept after a push");
    assert_eq!(push_state(&h).last_assigned, 42);
}

/// `adopt_identity` on a spool that holds items (pending or dead) or has
/// pushed is refused (`IdentityRefused`, exit 73) and changes nothing —
/// an import that comes with it neither.
fn adopt_identity_is_refused_unless_fresh(s: Setup) {
    let check = |h: &Harness, before: &(String, PushState, u64, u64)| {
        let e = h
            .q()
            .adopt_identity(OTHER_UUID, &push_at(5, 5, &[]))
            .unwrap_err();
        assert!(matches!(e, Error::IdentityRefused(_)), "{e:?}");
        assert_eq!(e.kind(), ErrorKind::CannotCreate);
        let header = spool::SpoolHeader {
            uuid: OTHER_UUID.into(),
            push: push_at(5, 5, &[]),
        };
        let recs = [numbered(900, None, RecordState::Pending)];
        let e = h
            .q()
            .import_with_identity(
                &header,
                true,
                &mut recs.iter().cloned().map(Ok),
                &mut |_, _| {},
            )
            .unwrap_err();
        assert!(matches!(e, Error::IdentityRefused(_)), "{e:?}");
        let now = (
            h.q().uuid().unwrap(),
            push_state(h),
            h.q().size().unwrap(),
            h.q().dead_count().unwrap(),
        );
        assert_eq!(&now, before);
    };
    let snapshot = |h: &Harness| {
        (
            h.q().uuid().unwrap(),
            push_state(h),
            h.q().size().unwrap(),
            h.q().dead_count().unwrap(),
        )
    };
    // Pending items.
    let mut h = s.open(None);
    add(&h, "a", "");
    h.step();
    let before = snapshot(&h);
    check(&h, &before);
    h.step();
    check(&h, &before);
    // A dead letter only.
    let mut h = s.open(None);
    let id = add(&h, "a", "");
    h.q().dead_letter(id, "x").unwrap();
    h.step();
    let before = snapshot(&h);
    check(&h, &before);
    // Pushed everything: empty, but with a push history.
    let mut h = s.open(None);
    let id = add(&h, "a", "");
    h.q().push_assign(&[id]).unwrap();
    h.q().push_ack(1, &[]).unwrap();
    h.step();
    assert_eq!(h.q().size().unwrap(), 0);
    let before = snapshot(&h);
    assert_eq!(before.1, push_at(1, 1, &[]));
    check(&h, &before);
}

/// An import that adopts the header keeps the numbers of pending records
/// above the watermark (and at most the counter); held and dead records,
/// and numbers at or below the watermark, come in unsent. All in one
/// commit with the push state.
fn an_adopting_import_keeps_numbers_above_the_watermark(s: Setup) {
    let mut h = s.open(None);
    let header = spool::SpoolHeader {
        uuid: OTHER_UUID.into(),
        push: push_at(10, 6, &[8]),
    };
    let recs = [
        numbered(1, Some(5), RecordState::Pending),
        numbered(2, Some(9), RecordState::Pending),
        numbered(3, None, RecordState::Held),
        numbered(4, Some(7), RecordState::Pending),
        numbered(5, Some(11), RecordState::Pending),
        numbered(6, Some(10), RecordState::Dead),
        numbered(7, Some(7), RecordState::Pending),
    ];
    let mut heard = 0;
    let outcome = h
        .q()
        .import_with_identity(
            &header,
            true,
            &mut recs.iter().cloned().map(Ok),
            &mut |_, _| heard += 1,
        )
        .unwrap();
    assert_eq!(outcome, spool::IdentityOutcome::Adopted);
    assert_eq!(heard, recs.len());
    h.step();
    assert_eq!(h.q().uuid().unwrap(), OTHER_UUID);
    assert_eq!(push_state(&h), push_at(10, 6, &[8]));
    assert_eq!(in_flight(&h), vec![(4, 7), (2, 9)]);
    for id in [1, 3, 5, 7] {
        assert_eq!(get(&h, id).push_seq, None, "item {id}");
    }
    assert_eq!(h.q().dead_count().unwrap(), 1);
    assert_eq!(h.q().push_assign(&[1]).unwrap(), vec![(1, 11)]);
}

/// Without `adopt`, a header of the spool's own uuid merges the push
/// states (the larger counter, the larger watermark); a record keeps its
/// number unless an item of the spool has it or the watermark covers it;
/// the spool's own items that the watermark now covers lose theirs.
fn a_same_uuid_import_merges_the_push_state(s: Setup) {
    let mut h = s.open(None);
    let ids: Vec<ItemId> = (0..3).map(|i| add(&h, &format!("p{i}"), "")).collect();
    h.q().push_assign(&ids).unwrap();
    h.q().push_ack(1, &[]).unwrap();
    h.step();
    let uuid = h.q().uuid().unwrap();
    let header = spool::SpoolHeader {
        uuid: uuid.clone(),
        push: push_at(6, 2, &[]),
    };
    let recs = [
        numbered(100, Some(2), RecordState::Pending),
        numbered(101, Some(3), RecordState::Pending),
        numbered(102, Some(4), RecordState::Pending),
        numbered(103, Some(4), RecordState::Pending),
    ];
    let outcome = h
        .q()
        .import_with_identity(
            &header,
            false,
            &mut recs.iter().cloned().map(Ok),
            &mut |_, _| {},
        )
        .unwrap();
    assert_eq!(outcome, spool::IdentityOutcome::Kept);
    h.step();
    assert_eq!(h.q().uuid().unwrap(), uuid);
    assert_eq!(push_state(&h), push_at(6, 2, &[]));
    // ids[1] had 2, now covered by the watermark: unsent again. ids[2]
    // keeps 3; record 101 wanted 3 too and comes in unsent; 103 repeats 4.
    assert_eq!(in_flight(&h), vec![(ids[2], 3), (102, 4)]);
    for id in [ids[1], 100, 101, 103] {
        assert_eq!(get(&h, id).push_seq, None, "item {id}");
    }
    assert_eq!(h.q().size().unwrap(), 6);
    assert_eq!(h.q().push_assign(&[100]).unwrap(), vec![(100, 7)]);
}

/// Without `adopt`, a header of another uuid changes nothing of the push
/// state and the records come in unsent, as without a header.
fn another_uuid_import_ignores_the_header(s: Setup) {
    let mut h = s.open(None);
    let id = add(&h, "mine", "");
    h.q().push_assign(&[id]).unwrap();
    h.step();
    let (uuid, before) = (h.q().uuid().unwrap(), push_state(&h));
    let header = spool::SpoolHeader {
        uuid: OTHER_UUID.into(),
        push: push_at(50, 40, &[]),
    };
    let recs = [numbered(100, Some(45), RecordState::Pending)];
    let outcome = h
        .q()
        .import_with_identity(
            &header,
            false,
            &mut recs.iter().cloned().map(Ok),
            &mut |_, _| {},
        )
        .unwrap();
    assert_eq!(outcome, spool::IdentityOutcome::Ignored);
    h.step();
    assert_eq!(h.q().uuid().unwrap(), uuid);
    assert_eq!(push_state(&h), before);
    assert_eq!(get(&h, 100).push_seq, None);
    assert_eq!(in_flight(&h), vec![(id, 1)]);
}

/// `due_page`, `due_count` and `group_head` (SPEC §3, §9): the items a
/// replay would attempt now are the pending ones that are not held, not
/// waiting for a retry time (unless backoff is ignored), and the first
/// pending item of their ordering group — a held or waiting head holds its
/// group back, a dead letter does not; all three agree, page by page.
fn the_due_rule_leaves_out_held_waiting_and_group_waiting_items(s: Setup) {
    let mut h = s.open(None);
    let now = h.now();
    let later = now.saturating_add(secs(60));
    let add = |h: &Harness, p: &str, g: Option<&str>| enq_one(h, new_item(p, "", g, None)).id;
    let dead_head = add(&h, "x1", Some("dead"));
    let held_head = add(&h, "h1", Some("held"));
    let behind_held = add(&h, "h2", Some("held"));
    let waiting_head = add(&h, "w1", Some("waiting"));
    let behind_waiting = add(&h, "w2", Some("waiting"));
    let head = add(&h, "d1", Some("due"));
    let behind_head = add(&h, "d2", Some("due"));
    let plain = add(&h, "p", None);
    let after_dead = add(&h, "x2", Some("dead"));
    let held = add(&h, "ph", None);
    let waiting = add(&h, "pw", None);
    h.q().set_held(&[held_head, held], true).unwrap();
    for id in [waiting_head, waiting] {
        h.q()
            .record_attempt(
                id,
                &AttemptUpdate {
                    attempts: 1,
                    next_retry_at: Some(later),
                    last_error: Some("busy".into()),
                },
            )
            .unwrap();
    }
    assert!(h.q().dead_letter(dead_head, "gone").unwrap());
    h.step();
    let ids = |v: Vec<Item>| v.iter().map(|i| i.id).collect::<Vec<ItemId>>();
    let page = |h: &Harness, at, ignore, after, limit| {
        ids(h.q().due_page(at, ignore, after, limit).unwrap())
    };
    let count = |h: &Harness, at, ignore, at_most| h.q().due_count(at, ignore, at_most).unwrap();
    let head_of = |h: &Harness, g: &str| h.q().group_head(g).unwrap();
    assert_eq!(head_of(&h, "held"), Some(held_head));
    assert_eq!(head_of(&h, "waiting"), Some(waiting_head));
    assert_eq!(head_of(&h, "due"), Some(head));
    assert_eq!(
        head_of(&h, "dead"),
        Some(after_dead),
        "dead letters do not lead"
    );
    assert_eq!(head_of(&h, "none"), None);
    let due = vec![head, plain, after_dead];
    assert_eq!(page(&h, now, false, 0, 100), due);
    assert_eq!(count(&h, now, false, None), 3);
    assert_eq!(page(&h, now, false, 0, 2), due[..2]);
    assert_eq!(page(&h, now, false, plain, 2), [after_dead]);
    assert_eq!(page(&h, now, false, after_dead, 2), Vec::<ItemId>::new());
    assert_eq!(count(&h, now, false, Some(2)), 2);
    // Without backoff (and once the retry time has come), the waiting
    // items are due; what waits behind a head still waits.
    let due = vec![waiting_head, head, plain, after_dead, waiting];
    assert_eq!(page(&h, now, true, 0, 100), due);
    assert_eq!(count(&h, now, true, None), 5);
    assert_eq!(page(&h, later, false, 0, 100), due);
    assert_eq!(count(&h, later, false, None), 5);
    // A head that leaves hands its group on; a released head leads again.
    h.q().mark_done(&[head]).unwrap();
    h.q().set_held(&[held_head], false).unwrap();
    h.step();
    let due = vec![held_head, behind_head, plain, after_dead];
    assert_eq!(page(&h, now, false, 0, 100), due);
    assert_eq!(count(&h, now, false, None), 4);
    assert!(!page(&h, now, true, 0, 100).contains(&behind_held));
    assert!(!page(&h, now, true, 0, 100).contains(&behind_waiting));
}

// ---------------------------------------------------------------- shape (SPEC §11)

/// A spool with known ages and errors for `spool shape`, the clock at
/// `T0 + 300s` at the end. With edges 60s, 120s, 240s the buckets are
/// [0,60) [60,120) [120,240) [240,…):
///
/// | item | key      | group | age | bucket | state   | last error                  |
/// |------|----------|-------|-----|--------|---------|-----------------------------|
/// | a1   | tenant/1 |       | 300 | 3      | pending | HTTP 503 … busy             |
/// | a2   | tenant/2 |       | 240 | 3      | pending | HTTP 503 … x                |
/// | a3   | order:3  | eu    | 239 | 2      | pending | connection refused (…:9)    |
/// | a4   | order:4  | eu    | 120 | 2      | pending | connection refused (…:10)   |
/// | a5   |          |       | 60  | 1      | pending | HTTP 503                    |
/// | a6   | h        |       | 59  | 0      | held    | —                           |
/// | a7   | plain    |       | 0   | 0      | pending | —                           |
/// | d1   | d1       |       | 290 | 3      | dead    | evicted: spool full (…)     |
/// | d2   | d2       |       | 100 | 1      | dead    | command exited with 1: boom |
/// | r1   | r1       |       | 10  | 0      | deliv.  | —                           |
fn shape_spool(h: &mut Harness) {
    use spool::AttemptUpdate;
    let at = |h: &Harness, s: u64| h.clock.set(T0.saturating_add(secs(s)));
    let fail = |h: &Harness, id: ItemId, e: &str| {
        let u = AttemptUpdate {
            attempts: 1,
            next_retry_at: None,
            last_error: Some(e.into()),
        };
        assert!(h.q().record_attempt(id, &u).unwrap());
    };
    h.q().set_retain(Some(secs(86_400))).unwrap();
    let a1 = add(h, "a1", "tenant/1");
    at(h, 10);
    let d1 = add(h, "d1", "d1");
    at(h, 60);
    let a2 = add(h, "a2", "tenant/2");
    at(h, 61);
    let mut eu = NewItem::new(&b"a3"[..], "order:3");
    eu.group = Some("eu".into());
    let a3 = h
        .q()
        .enqueue_batch(&[eu], &EnqueueOptions::default())
        .unwrap()[0]
        .id;
    at(h, 180);
    let mut eu = NewItem::new(&b"a4"[..], "order:4");
    eu.group = Some("eu".into());
    let a4 = h
        .q()
        .enqueue_batch(&[eu], &EnqueueOptions::default())
        .unwrap()[0]
        .id;
    at(h, 200);
    let d2 = add(h, "d2", "d2");
    at(h, 240);
    let a5 = add(h, "a5", "");
    at(h, 241);
    let a6 = add(h, "a6", "h");
    at(h, 290);
    let r1 = add(h, "r1", "r1");
    at(h, 300);
    add(h, "a7", "plain");
    h.step();
    fail(h, a1, "HTTP 503 Service Unavailable: busy");
    fail(h, a2, "HTTP 503 Service Unavailable: x");
    fail(h, a3, "connection error: connection refused (127.0.0.1:9)");
    fail(h, a4, "connection error: connection refused (127.0.0.1:10)");
    fail(h, a5, "HTTP 503");
    h.q().set_held(&[a6], true).unwrap();
    assert!(h.q().dead_letter(d1, &OnFull::eviction_error(3)).unwrap());
    fail(h, d2, "command exited with 1: boom");
    assert!(h
        .q()
        .dead_letter(d2, "command exited with 1: boom")
        .unwrap());
    assert_eq!(h.q().mark_done(&[r1]).unwrap(), [true]);
    h.step();
}

fn shape_of(
    h: &Harness,
    by: spool::ops::shape::ShapeBy,
    state: spool::ops::shape::ShapeState,
    top: usize,
) -> Vec<(String, u64, Vec<u64>)> {
    use spool::ops::shape::{scan_cells, shape, ShapeOptions, ShapeQuery};
    let opts = ShapeOptions {
        by,
        state,
        first: secs(60),
        buckets: 4,
        top,
        yield_to_writers: false,
    };
    // The backend's aggregate and the generic walk count the same cells
    // (`attempted` only by error: the other dimensions do not read it).
    let q = ShapeQuery {
        by,
        state,
        now: h.now(),
        edges_ms: vec![60_000, 120_000, 240_000],
        yield_to_writers: false,
    };
    let merged = |cells: Vec<spool::ops::shape::ShapeCell>| {
        let mut m = BTreeMap::new();
        for c in cells {
            let attempted = by == spool::ops::shape::ShapeBy::Error && c.attempted;
            *m.entry((c.value, attempted, c.bucket)).or_insert(0u64) += c.count;
        }
        m
    };
    assert_eq!(
        merged(h.q().shape_cells(&q).unwrap()),
        merged(scan_cells(h.q(), &q).unwrap()),
        "{by:?} {state:?}"
    );
    let s = shape(h.q(), &opts, h.now()).unwrap();
    assert_eq!(s.by, by);
    assert_eq!(s.state, state);
    s.rows
        .into_iter()
        .map(|r| (r.value, r.total, r.counts))
        .collect()
}

fn rows(r: &[(&str, u64, [u64; 4])]) -> Vec<(String, u64, Vec<u64>)> {
    r.iter()
        .map(|(v, t, c)| (v.to_string(), *t, c.to_vec()))
        .collect()
}

/// `spool shape --by error`: one row per cause class, busiest first (ties
/// by value) under TOTAL; buckets hold ages below their edge and not
/// below the previous one; `--top` folds the rest into `(other)`.
fn shape_counts_pending_items_by_error_class_and_age(s: Setup) {
    use spool::ops::shape::{ShapeBy, ShapeState};
    let mut h = s.open(None);
    shape_spool(&mut h);
    assert_eq!(
        shape_of(&h, ShapeBy::Error, ShapeState::Pending, 20),
        rows(&[
            ("TOTAL", 6, [1, 1, 2, 2]),
            ("HTTP 503", 3, [0, 1, 0, 2]),
            ("connection refused", 2, [0, 0, 2, 0]),
            ("never attempted", 1, [1, 0, 0, 0]),
        ])
    );
    assert_eq!(
        shape_of(&h, ShapeBy::Error, ShapeState::Pending, 1),
        rows(&[
            ("TOTAL", 6, [1, 1, 2, 2]),
            ("HTTP 503", 3, [0, 1, 0, 2]),
            ("(other)", 3, [1, 0, 2, 0]),
        ])
    );
    // Exactly `top` values: no (other) row.
    assert_eq!(
        shape_of(&h, ShapeBy::Error, ShapeState::Pending, 3).len(),
        4
    );
}

/// `spool shape --state held|dead|delivered`: each set on its own, aged
/// since enqueue.
fn shape_counts_each_state(s: Setup) {
    use spool::ops::shape::{ShapeBy, ShapeState};
    let mut h = s.open(None);
    shape_spool(&mut h);
    assert_eq!(
        shape_of(&h, ShapeBy::Error, ShapeState::Held, 20),
        rows(&[
            ("TOTAL", 1, [1, 0, 0, 0]),
            ("never attempted", 1, [1, 0, 0, 0]),
        ])
    );
    assert_eq!(
        shape_of(&h, ShapeBy::Error, ShapeState::Dead, 20),
        rows(&[
            ("TOTAL", 2, [0, 1, 0, 1]),
            ("evicted", 1, [0, 0, 0, 1]),
            ("exit 1", 1, [0, 1, 0, 0]),
        ])
    );
    assert_eq!(
        shape_of(&h, ShapeBy::Error, ShapeState::Delivered, 20),
        rows(&[
            ("TOTAL", 1, [1, 0, 0, 0]),
            ("no failed attempt", 1, [1, 0, 0, 0]),
        ])
    );
}

/// `spool shape --by group|attempts|key-prefix`.
fn shape_counts_by_group_attempts_and_key_prefix(s: Setup) {
    use spool::ops::shape::{ShapeBy, ShapeState};
    let mut h = s.open(None);
    shape_spool(&mut h);
    assert_eq!(
        shape_of(&h, ShapeBy::Group, ShapeState::Pending, 20),
        rows(&[
            ("TOTAL", 6, [1, 1, 2, 2]),
            ("(no group)", 4, [1, 1, 0, 2]),
            ("eu", 2, [0, 0, 2, 0]),
        ])
    );
    assert_eq!(
        shape_of(&h, ShapeBy::Attempts, ShapeState::Pending, 20),
        rows(&[
            ("TOTAL", 6, [1, 1, 2, 2]),
            ("1", 5, [0, 1, 2, 2]),
            ("0", 1, [1, 0, 0, 0]),
        ])
    );
    assert_eq!(
        shape_of(&h, ShapeBy::KeyPrefix, ShapeState::Pending, 20),
        rows(&[
            ("TOTAL", 6, [1, 1, 2, 2]),
            ("order", 2, [0, 0, 2, 0]),
            ("tenant", 2, [0, 0, 0, 2]),
            ("(no key)", 1, [0, 1, 0, 0]),
            ("plain", 1, [1, 0, 0, 0]),
        ])
    );
    // An empty set: the TOTAL row alone, all zero.
    let e = Harness::new(s.backend, None);
    assert_eq!(
        shape_of(&e, ShapeBy::Error, ShapeState::Dead, 20),
        rows(&[("TOTAL", 0, [0, 0, 0, 0])])
    );
}
