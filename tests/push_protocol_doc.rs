//! docs/push-protocol.md cannot drift from the code: every example body
//! in it parses with the library's own wire format (requests strictly,
//! with correct digests), and the schema block is valid JSON.

use spool::push::wire::{self, Entry, Payload};

fn doc() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/push-protocol.md"
    ))
    .unwrap()
}

/// The fenced blocks of the document: (info string, text).
fn blocks(doc: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut current: Option<(String, String)> = None;
    for line in doc.lines() {
        match (&mut current, line.strip_prefix("```")) {
            (None, Some(info)) => current = Some((info.trim().to_string(), String::new())),
            (Some(_), Some(_)) => out.push(current.take().unwrap()),
            (Some((_, text)), None) => {
                text.push_str(line);
                text.push('\n');
            }
            (None, None) => {}
        }
    }
    assert!(current.is_none(), "an unclosed code block");
    out
}

#[test]
fn every_example_body_is_what_the_code_speaks() {
    let blocks = blocks(&doc());
    let count = |kind: &str| blocks.iter().filter(|(i, _)| i == kind).count();
    assert!(count("json request") >= 4, "{blocks:?}");
    assert!(count("json response") >= 5);
    assert!(count("json error") >= 3);
    for (info, text) in &blocks {
        match info.as_str() {
            "json request" => {
                let req =
                    wire::parse_request(text.as_bytes()).unwrap_or_else(|e| panic!("{e}\n{text}"));
                for e in &req.entries {
                    if let Entry::Item(item) = e {
                        let Payload::Bytes(payload) = &item.payload else {
                            panic!("undecodable payload in {text}")
                        };
                        assert_eq!(
                            item.digest,
                            wire::digest(&item.key, payload),
                            "digest of seq {} in\n{text}",
                            item.seq
                        );
                    }
                }
            }
            "json response" => {
                wire::parse_response(text.as_bytes()).unwrap_or_else(|e| panic!("{e}\n{text}"));
            }
            "json error" => {
                wire::parse_error_body(text.as_bytes()).unwrap_or_else(|e| panic!("{e}\n{text}"));
            }
            "json" => {
                serde_json::from_str::<serde_json::Value>(text)
                    .unwrap_or_else(|e| panic!("{e}\n{text}"));
            }
            _ => {}
        }
    }
}

#[test]
fn the_digest_table_matches_the_code() {
    let doc = doc();
    for (key, payload) in [
        ("", &b""[..]),
        ("order-7", br#"{"order":7}"#),
        ("", &[0u8, 1][..]),
    ] {
        let d = wire::digest(key, payload);
        assert!(doc.contains(&d), "{d} missing from the digest table");
    }
    for p in ["hello", "world", "mine"] {
        assert!(doc.contains(&wire::digest("", p.as_bytes())), "{p}");
    }
}
