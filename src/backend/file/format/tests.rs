//! Tests of the line format: parsing, writing, round trips, the fast
//! paths against the full parse.

use super::write::{write_put_line, write_put_line_serde};
use super::*;
use proptest::prelude::*;

fn item(payload: &[u8]) -> Item {
    Item {
        id: 3,
        payload: payload.to_vec(),
        key: "k\"\\\u{1}".into(),
        attempts: 2,
        enqueued_at: Some(Timestamp::from_secs(1_700_000_000)),
        next_retry_at: Some(Timestamp::from_millis(1_700_000_000_123)),
        last_error: Some("boom\nline two".into()),
        held: true,
        push_seq: None,
        group: None,
        coalesce_key: None,
    }
}

#[test]
fn reference_lines_parse() {
    let l = parse_line(
        br#"{"op":"put","id":1,"payload":"a\u0001\"b\\","idempotencyKey":"","attempts":4}"#,
    )
    .unwrap();
    match l {
        Line::Put { item, dead_at, .. } => {
            assert_eq!(item.payload, b"a\x01\"b\\");
            assert_eq!(item.attempts, 4);
            assert_eq!(item.enqueued_at, None);
            assert_eq!(dead_at, None);
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(
        parse_line(br#"{"op":"done","id":9}"#).unwrap(),
        Line::Done {
            id: 9,
            delivery: None
        }
    );
}

#[test]
fn a_done_line_can_tell_a_delivery() {
    let d = Delivery {
        at: Timestamp::from_millis(1_764_583_200_123),
        evidence: Evidence::Http(204),
    };
    let mut out = Vec::new();
    write_done_delivered(&mut out, 7, &d);
    assert_eq!(
        out,
        br#"{"op":"done","id":7,"deliveredAt":1764583200123,"evidence":"http:204"}
"#
    );
    let line = &out[..out.len() - 1];
    let want = Line::Done {
        id: 7,
        delivery: Some(d),
    };
    // The hand-written reader and serde agree, framed or not.
    assert_eq!(parse_line(line).unwrap(), want);
    assert_eq!(
        parse_line_serde(line, std::str::from_utf8(line).ok())
            .unwrap()
            .0,
        want
    );
    assert_eq!(parse_line_without_payload(line).unwrap(), want);
    let two = [out.clone(), b"{\"op\":\"done\",\"id\":8}\n".to_vec()].concat();
    let framed = frame_batch(&two, 0);
    let first = framed.split(|&b| b == b'\n').next().unwrap();
    assert_eq!(parse_line_tx(first).unwrap(), (want, Some(0)));
    assert!(!check_line(line).unwrap().put);
    // Half a delivery, an unknown evidence, or one on a state line
    // is malformed, for every reader.
    for bad in [
        &br#"{"op":"done","id":7,"deliveredAt":1}"#[..],
        br#"{"op":"done","id":7,"evidence":"done"}"#,
        br#"{"op":"done","id":7,"deliveredAt":1,"evidence":"http:x"}"#,
        br#"{"op":"done","id":0,"deliveredAt":1,"evidence":"done"}"#,
    ] {
        let text = String::from_utf8_lossy(bad);
        assert!(parse_line(bad).is_err(), "{text}");
        assert!(check_line(bad).is_err(), "{text}");
    }
}

#[test]
fn malformed_lines_are_errors() {
    for bad in [
        &b"{\"op\":\"put\",\"id\":1"[..],
        b"{\"op\":\"put\",\"id\":1}",
        b"{\"op\":\"zap\",\"id\":1}",
        b"{\"op\":\"put\",\"id\":-1,\"payload\":\"\"}",
        b"[1,2]",
        b"{\"op\":\"put\",\"id\":1,\"payload\":{\"base64\":\"***\"}}",
        b"\xff\xfe",
    ] {
        assert!(
            parse_line(bad).is_err(),
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn binary_payloads_are_marked() {
    let mut out = Vec::new();
    write_put(&mut out, &item(b"\xff\x00ok"), None);
    let text = String::from_utf8(out.clone()).unwrap();
    assert!(text.contains(r#""payload":{"base64":"#), "{text}");
    assert!(text.ends_with('\n'));
    assert_eq!(text.matches('\n').count(), 1);
}

#[test]
fn lines_spool_writes_take_the_plain_path() {
    let mut it = item(b"{\"event\":1}");
    it.key = "order-7".into();
    it.last_error = Some("HTTP 503".into());
    for dead in [None, Some(Timestamp::from_millis(5))] {
        let mut out = Vec::new();
        write_put(&mut out, &it, dead);
        let text = std::str::from_utf8(&out[..out.len() - 1]).unwrap();
        let plain = Plain::read(text, true).expect("the plain path reads it");
        assert_eq!(
            plain.into_line(),
            Line::Put {
                item: it.clone(),
                dead_at: dead,
                delivered_at: None,
                evidence: None,
            }
        );
    }
    assert!(Plain::read(r#"{"op":"done","id":42}"#, true).is_some());
    // \u escapes, other field orders and spacing go through serde.
    for other in [
        r#"{"op":"put","id":1,"payload":"a\u0001b","idempotencyKey":"","attempts":0}"#,
        r#"{"id":1,"op":"done"}"#,
        r#"{"op":"done","id":1} "#,
        r#"{"op":"done","id":01}"#,
    ] {
        assert!(Plain::read(other, true).is_none(), "{other}");
    }
}

#[test]
fn batches_are_framed_on_every_line_but_the_last() {
    let mut lines = Vec::new();
    write_put(&mut lines, &item(b"a"), None);
    write_done(&mut lines, 7);
    write_put(&mut lines, &item(b"\xff"), None);
    let framed = frame_batch(&lines, 1234);
    let text: Vec<&[u8]> = framed.split(|b| *b == b'\n').collect();
    assert_eq!(text.len(), 4, "three lines and the empty rest");
    assert_eq!(parse_line_tx(text[0]).unwrap().1, Some(1234));
    assert_eq!(
        parse_line_tx(text[1]).unwrap(),
        (
            Line::Done {
                id: 7,
                delivery: None
            },
            Some(1234)
        )
    );
    assert_eq!(parse_line_tx(text[2]).unwrap().1, None);
    // The framed lines still read as the same records.
    assert_eq!(
        parse_line(text[0]).unwrap(),
        parse_line(lines.split(|b| *b == b'\n').next().unwrap()).unwrap()
    );
    // One line needs no frame.
    let mut one = Vec::new();
    write_done(&mut one, 1);
    assert_eq!(&*frame_batch(&one, 9), &one[..]);
}

#[test]
fn strip_tx_keeps_every_other_field() {
    let line = br#"{"op":"done","id":4,"tx":77}"#;
    assert_eq!(strip_tx(line).unwrap(), br#"{"op":"done","id":4}"#);
    let line = br#"{"op":"put","tx":77,"id":4,"payload":"p","extra":[1]}"#;
    let stripped = strip_tx(line).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&stripped).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"op":"put","id":4,"payload":"p","extra":[1]})
    );
    assert_eq!(strip_tx(br#"{"op":"done","id":4}"#), None);
}

#[test]
fn group_and_coalesce_key_ride_last_and_only_when_set() {
    let mut it = item(b"p");
    it.held = false;
    it.last_error = None;
    // No \u escape: the line stays on the plain path.
    it.key = "k".into();
    let mut plain = Vec::new();
    write_put(&mut plain, &it, None);
    let text = std::str::from_utf8(&plain).unwrap();
    assert!(
        !text.contains("group") && !text.contains("coalesceKey"),
        "{text}"
    );
    it.group = Some("g \"1\"".into());
    it.coalesce_key = Some("c/1".into());
    let mut out = Vec::new();
    write_put(&mut out, &it, None);
    let text = std::str::from_utf8(&out[..out.len() - 1]).unwrap();
    // The reference's fields come first and are unchanged.
    assert!(
        text.starts_with(std::str::from_utf8(&plain[..plain.len() - 2]).unwrap()),
        "{text}"
    );
    assert!(
        text.ends_with(r#","group":"g \"1\"","coalesceKey":"c/1"}"#),
        "{text}"
    );
    let plain_read = Plain::read(text, true).expect("the plain path reads it");
    assert_eq!(
        plain_read.into_line(),
        Line::Put {
            item: it.clone(),
            dead_at: None,
            delivered_at: None,
            evidence: None,
        }
    );
    // Another field order goes through serde, with the same result.
    let v: serde_json::Value = serde_json::from_str(text).unwrap();
    let mut m = v.as_object().unwrap().clone();
    let g = m.remove("group").unwrap();
    let mut reordered = serde_json::Map::new();
    reordered.insert("group".into(), g);
    reordered.extend(m);
    let line = serde_json::to_vec(&reordered).unwrap();
    assert!(Plain::read(std::str::from_utf8(&line).unwrap(), true).is_none());
    assert_eq!(
        parse_line(&line).unwrap(),
        Line::Put {
            item: it,
            dead_at: None,
            delivered_at: None,
            evidence: None,
        }
    );
}

#[test]
fn eviction_count_lines() {
    let mut out = Vec::new();
    write_evicted(&mut out, 12);
    assert_eq!(out, b"{\"op\":\"done\",\"id\":0,\"evicted\":12}\n");
    assert_eq!(
        parse_line(&out[..out.len() - 1]).unwrap(),
        Line::Evicted(12)
    );
    assert!(parse_line(br#"{"op":"done","id":3,"evicted":1}"#).is_err());
    assert!(
        parse_line(br#"{"op":"done","id":0,"evicted":1,"push":{"assigned":1,"acked":0}}"#).is_err()
    );
    assert_eq!(
        check_line(&out[..out.len() - 1]).unwrap(),
        Head {
            put: false,
            id: 0,
            push: false,
            client: false,
            retained: false
        }
    );
}

#[test]
fn delivered_lines_carry_the_time_and_the_evidence_last() {
    let mut it = item(b"p");
    it.key = "k".into();
    it.last_error = None;
    it.coalesce_key = Some("c".into());
    let d = DeliveredItem {
        item: it.clone(),
        delivery: Delivery {
            at: Timestamp::from_millis(1_764_583_200_123),
            evidence: Evidence::Http(201),
        },
    };
    let mut out = Vec::new();
    write_delivered(&mut out, &d);
    let text = std::str::from_utf8(&out[..out.len() - 1]).unwrap();
    assert!(
        text.ends_with(r#","coalesceKey":"c","deliveredAt":1764583200123,"evidence":"http:201"}"#),
        "{text}"
    );
    let want = Line::Put {
        item: it.clone(),
        dead_at: None,
        delivered_at: Some(d.delivery.at),
        evidence: Some("http:201".into()),
    };
    let plain = Plain::read(text, true).expect("the plain path reads it");
    assert_eq!(plain.into_line(), want);
    assert_eq!(parse_delivered(text.as_bytes()).unwrap(), want);
    assert_eq!(want.delivery().unwrap(), Some(d.delivery));
    for e in [
        Evidence::Exit(0),
        Evidence::Push(41),
        Evidence::Done,
        Evidence::Sink,
    ] {
        let mut out = Vec::new();
        write_delivered(
            &mut out,
            &DeliveredItem {
                item: it.clone(),
                delivery: Delivery {
                    at: Timestamp::from_millis(5),
                    evidence: e,
                },
            },
        );
        let line = parse_delivered(&out[..out.len() - 1]).unwrap();
        assert_eq!(line.delivery().unwrap().unwrap().evidence, e);
    }
    // A line without a delivery is no delivered record; done lines are.
    let mut plain_put = Vec::new();
    write_put(&mut plain_put, &it, None);
    assert!(parse_delivered(&plain_put[..plain_put.len() - 1]).is_err());
    assert!(parse_delivered(br#"{"op":"done","id":3}"#).is_ok());
    for bad in [
        r#"{"op":"put","id":1,"payload":"p","idempotencyKey":"","attempts":0,"deliveredAt":5}"#,
        r#"{"op":"put","id":1,"payload":"p","idempotencyKey":"","attempts":0,"evidence":"done"}"#,
        r#"{"op":"put","id":1,"payload":"p","idempotencyKey":"","attempts":0,"deliveredAt":5,"evidence":"carrier pigeon"}"#,
        r#"{"op":"put","id":1,"payload":"p","idempotencyKey":"","attempts":0,"deliveredAt":5,"evidence":"http:x"}"#,
    ] {
        assert!(parse_delivered(bad.as_bytes()).is_err(), "{bad}");
        // The main file's reader ignores the fields, as older versions do.
        assert!(parse_line(bad.as_bytes()).is_ok(), "{bad}");
    }
}

#[test]
fn done_lines_are_reference_shaped() {
    let mut out = Vec::new();
    write_done(&mut out, 42);
    assert_eq!(out, b"{\"op\":\"done\",\"id\":42}\n");
}

/// Lines near the format: every field, with values of the right and of
/// the wrong type, sometimes cut short or with a byte changed.
fn line_like() -> impl Strategy<Value = String> {
    let value = prop_oneof![
        Just("null".to_string()),
        Just("true".to_string()),
        Just("\"\"".to_string()),
        Just("\"a\\u0001\\\"b\"".to_string()),
        Just("\"\\ud800\"".to_string()),
        Just("{\"base64\":\"aGk=\"}".to_string()),
        Just("{\"base64\":\"***\"}".to_string()),
        Just("{\"base64\":null}".to_string()),
        Just("{\"other\":1}".to_string()),
        Just("[1]".to_string()),
        Just("{\"assigned\":3,\"acked\":1,\"skips\":[2]}".to_string()),
        Just("{\"assigned\":3}".to_string()),
        Just("{\"id\":\"c\",\"last\":2,\"applied\":[[1,\"d\"]],\"skipped\":[2]}".to_string()),
        Just("{\"id\":\"c\",\"bogus\":1}".to_string()),
        Just("\"http:200\"".to_string()),
        Just("\"push:41\"".to_string()),
        (-5i64..5_000_000_000).prop_map(|n| n.to_string()),
        Just("1.5".to_string()),
    ];
    let name = prop_oneof![
        Just("op"),
        Just("id"),
        Just("payload"),
        Just("idempotencyKey"),
        Just("attempts"),
        Just("enqueuedAt"),
        Just("nextRetryAt"),
        Just("lastError"),
        Just("held"),
        Just("deadAt"),
        Just("tx"),
        Just("pushSeq"),
        Just("push"),
        Just("client"),
        Just("evicted"),
        Just("group"),
        Just("coalesceKey"),
        Just("deliveredAt"),
        Just("evidence"),
        Just("extra"),
    ];
    let op = prop_oneof![
        Just("\"put\""),
        Just("\"done\""),
        Just("\"zap\""),
        Just("7")
    ];
    (
        op,
        0u64..100,
        proptest::collection::vec((name, value), 0..6),
        any::<bool>(),
        any::<u16>(),
        any::<u8>(),
        any::<bool>(),
    )
        .prop_map(|(op, id, fields, payload, cut, byte, mutate)| {
            let mut s = format!("{{\"op\":{op},\"id\":{id}");
            if payload {
                s.push_str(",\"payload\":\"p\"");
            }
            for (n, v) in fields {
                s.push_str(&format!(",\"{n}\":{v}"));
            }
            s.push('}');
            if mutate && !s.is_empty() {
                let at = cut as usize % s.len();
                if byte.is_ascii() && s.is_char_boundary(at) && s.is_char_boundary(at + 1) {
                    s.replace_range(at..at + 1, &(byte as char).to_string());
                } else {
                    s.truncate(if s.is_char_boundary(at) { at } else { 0 });
                }
            }
            s
        })
}

proptest! {
    #[test]
    fn put_round_trips(payload in proptest::collection::vec(any::<u8>(), 0..200),
                       key in ".{0,12}", attempts in any::<u32>(), held in any::<bool>(),
                       dead in proptest::option::of(0i64..4_000_000_000_000),
                       group in proptest::option::of(".{0,12}"),
                       coalesce_key in proptest::option::of(".{0,12}")) {
        let mut it = item(&payload);
        it.key = key;
        it.attempts = attempts;
        it.held = held;
        it.group = group;
        it.coalesce_key = coalesce_key;
        let mut out = Vec::new();
        write_put(&mut out, &it, dead.map(Timestamp::from_millis));
        prop_assert_eq!(out.iter().filter(|b| **b == b'\n').count(), 1);
        let parsed = parse_line(&out[..out.len() - 1]).unwrap();
        prop_assert_eq!(parsed, Line::Put { item: it, dead_at: dead.map(Timestamp::from_millis), delivered_at: None, evidence: None });
    }

    #[test]
    fn a_raw_control_byte_anywhere_in_a_string_is_refused(
        len in 0usize..100,
        at in any::<u16>(),
        byte in 0u8..0x20,
        in_key in any::<bool>(),
    ) {
        // Long strings are checked in blocks: a control byte in a block,
        // in the remainder, or at a block's edge is refused all the same,
        // as serde_json refuses it.
        let mut s = vec![b'x'; len];
        if len > 0 {
            s[at as usize % len] = byte;
        }
        let s = String::from_utf8(s).unwrap();
        let (payload, key) = if in_key { ("p".to_string(), s.clone()) } else { (s.clone(), "k".to_string()) };
        let line = format!(r#"{{"op":"put","id":1,"payload":"{payload}","idempotencyKey":"{key}","attempts":0,"enqueuedAt":1}}"#);
        let serde_ok = serde_json::from_str::<serde_json::Value>(&line).is_ok();
        prop_assert_eq!(serde_ok, len == 0);
        prop_assert_eq!(parse_line(line.as_bytes()).is_ok(), serde_ok);
        prop_assert_eq!(check_line(line.as_bytes()).is_ok(), serde_ok);
    }

    #[test]
    fn check_line_agrees_with_parse_line(line in line_like(), bad_byte in proptest::option::of(any::<u16>())) {
        // Sometimes a byte that is not UTF-8, inside a string or not.
        let mut line = line.into_bytes();
        if let Some(at) = bad_byte {
            let at = at as usize % (line.len() + 1);
            line.insert(at, 0xff);
        }
        let full = parse_line(&line);
        let checked = check_line(&line);
        match (&full, &checked) {
            (Ok(Line::Put { item, .. }), Ok(h)) => prop_assert_eq!(*h, Head { put: true, id: item.id, push: false, client: false, retained: false }),
            (Ok(Line::Done { id, delivery }), Ok(h)) => prop_assert_eq!(*h, Head { put: false, id: *id, push: false, client: false, retained: delivery.is_some() }),
            (Ok(Line::Push(_)), Ok(h)) => prop_assert_eq!(*h, Head { put: false, id: 0, push: true, client: false, retained: false }),
            (Ok(Line::Client(_)), Ok(h)) => prop_assert_eq!(*h, Head { put: false, id: 0, push: false, client: true, retained: false }),
            (Ok(Line::Evicted(_)), Ok(h)) => prop_assert_eq!(*h, Head { put: false, id: 0, push: false, client: false, retained: false }),
            (Err(a), Err(b)) => prop_assert_eq!(a, b),
            _ => prop_assert!(false, "{:?}: parse {:?}, check {:?}", line, full, checked),
        }
    }

    #[test]
    fn plain_lines_read_as_serde_reads_them(
        payload in proptest::collection::vec(any::<u8>(), 0..40),
        key in ".{0,6}", attempts in any::<u32>(), held in any::<bool>(),
        times in proptest::option::of((0i64..4_000_000_000_000, 0i64..4_000_000_000_000)),
        error in proptest::option::of(".{0,8}"),
        dead in proptest::option::of(0i64..4_000_000_000_000),
        done in any::<bool>(),
        push_seq in proptest::option::of(1u64..1_000_000),
        group in proptest::option::of(".{0,6}"),
        coalesce_key in proptest::option::of(".{0,6}"),
        tx in proptest::option::of(0u64..1_000_000),
        delivery in proptest::option::of((0i64..4_000_000_000_000, 0u16..600)),
        edits in proptest::collection::vec((any::<u16>(), prop_oneof![
            Just(b'0'), Just(b'1'), Just(b'9'), Just(b'-'), Just(b'.'), Just(b'e'), Just(b'"'),
            Just(b'\\'), Just(b' '), Just(b'}'), Just(b','), Just(b':'), Just(0x01), Just(b'x'),
        ]), 0..3),
    ) {
        let mut it = item(&payload);
        it.key = key;
        it.attempts = attempts;
        it.held = held;
        it.enqueued_at = times.map(|t| Timestamp::from_secs(t.0));
        it.next_retry_at = times.map(|t| Timestamp::from_millis(t.1));
        it.last_error = error;
        it.push_seq = push_seq;
        it.group = group;
        it.coalesce_key = coalesce_key;
        let mut line = Vec::new();
        if done {
            write_done(&mut line, it.id);
        } else if let Some((at, status)) = delivery {
            write_delivered(&mut line, &DeliveredItem {
                item: it.clone(),
                delivery: Delivery { at: Timestamp::from_millis(at), evidence: Evidence::Http(status) },
            });
        } else {
            write_put(&mut line, &it, dead.map(Timestamp::from_millis));
        }
        if let Some(tx) = tx {
            // A line inside a framed batch.
            line.extend_from_slice(b"{\"op\":\"done\",\"id\":1}\n");
            line = frame_batch(&line, tx).into_owned();
            line.truncate(line.len() - br#"{"op":"done","id":1}"#.len() - 1);
        }
        line.pop();
        // Change, insert or drop a byte here and there.
        for (at, b) in edits {
            let at = at as usize % (line.len() + 1);
            match at % 3 {
                0 if at < line.len() => line[at] = b,
                1 if at < line.len() => { line.remove(at); }
                _ => line.insert(at, b),
            }
        }
        prop_assert_eq!(parse_line_tx(&line), parse_line_serde(&line, std::str::from_utf8(&line).ok()), "{}", String::from_utf8_lossy(&line));
        let head = parse_line(&line).map(|l| match l {
            Line::Put { item, .. } => Head { put: true, id: item.id, push: false, client: false, retained: false },
            Line::Done { id, delivery } => Head { put: false, id, push: false, client: false, retained: delivery.is_some() },
            Line::Push(_) => Head { put: false, id: 0, push: true, client: false, retained: false },
            Line::Client(_) => Head { put: false, id: 0, push: false, client: true, retained: false },
            Line::Evicted(_) => Head { put: false, id: 0, push: false, client: false, retained: false },
        });
        prop_assert_eq!(check_line(&line), head);
        let without = parse_line(&line).map(|mut l| {
            if let Line::Put { item, .. } = &mut l {
                item.payload = Vec::new();
            }
            l
        });
        prop_assert_eq!(parse_line_without_payload(&line), without);
    }

    #[test]
    fn the_hand_written_put_line_is_serdes(
        payload in proptest::collection::vec(any::<u8>(), 0..40),
        text in "(.|[\\x00-\\x1f\"\\\\\\x7f])*",
        key in "(.|[\\x00-\\x1f\"\\\\])*", attempts in any::<u32>(), held in any::<bool>(),
        times in proptest::option::of((any::<i64>(), any::<i64>())),
        error in proptest::option::of("(.|[\\x00-\\x1f\"\\\\])*"),
        dead in proptest::option::of(any::<i64>()),
        id in any::<u64>(),
        push_seq in proptest::option::of(any::<u64>()),
        group in proptest::option::of(".{0,6}"),
        coalesce_key in proptest::option::of("(.|[\\x00-\\x1f\"])*"),
        delivery in proptest::option::of((any::<i64>(), 0u16..600)),
    ) {
        for payload in [payload, text.into_bytes()] {
            let mut it = item(&payload);
            it.id = id;
            it.key = key.clone();
            it.attempts = attempts;
            it.held = held;
            it.enqueued_at = times.map(|t| Timestamp::from_secs(t.0));
            it.next_retry_at = times.map(|t| Timestamp::from_millis(t.1));
            it.last_error = error.clone();
            it.push_seq = push_seq;
            it.group = group.clone();
            it.coalesce_key = coalesce_key.clone();
            let d = delivery.map(|(at, status)| Delivery { at: Timestamp::from_millis(at), evidence: Evidence::Http(status) });
            let dead = dead.map(Timestamp::from_millis);
            let (mut hand, mut serde) = (b"x".to_vec(), b"x".to_vec());
            write_put_line(&mut hand, &it, dead, d.as_ref());
            write_put_line_serde(&mut serde, &it, dead, d.as_ref());
            prop_assert_eq!(String::from_utf8_lossy(&hand), String::from_utf8_lossy(&serde));
            prop_assert_eq!(hand, serde);
        }
    }

    #[test]
    fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
        let _ = parse_line(&bytes);
    }
}
