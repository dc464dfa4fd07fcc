//! Tests of the scans: torn tails, damaged lines, files that are not
//! spools, the parallel and buffered scans against each other, and
//! unfinished batches.

use super::super::io::RealIo;
use super::*;

fn run(text: &[u8]) -> Result<(Scanned, usize)> {
    let mut n = 0;
    let s = scan(Path::new("t.ndjson"), text, 0, 0, false, |_| n += 1)?;
    Ok((s, n))
}

const PUT: &str = r#"{"op":"put","id":1,"payload":"a","idempotencyKey":"","attempts":0}"#;

#[test]
fn clean_file() {
    let text = format!("{PUT}\n{{\"op\":\"done\",\"id\":1}}\n");
    let (s, n) = run(text.as_bytes()).unwrap();
    assert_eq!(n, 2);
    assert_eq!(s.end, text.len() as u64);
    assert_eq!(s.lines, 2);
    assert!(s.torn.is_none());
    assert!(!s.needs_newline);
}

#[test]
fn torn_tail_is_reported_not_applied() {
    let text = format!("{PUT}\n{{\"op\":\"pu");
    let (s, n) = run(text.as_bytes()).unwrap();
    assert_eq!(n, 1);
    let t = s.torn.unwrap();
    assert_eq!(t.line, 2);
    assert_eq!(t.offset, PUT.len() as u64 + 1);
    assert_eq!(s.end, t.offset);
}

#[test]
fn malformed_middle_line_is_corruption() {
    let text = format!("{PUT}\nnot json\n{PUT}\n");
    let e = run(text.as_bytes()).unwrap_err();
    assert!(matches!(e, Error::Corrupt { line: Some(2), .. }), "{e}");
}

#[test]
fn blank_lines_and_crlf_are_tolerated() {
    let text = format!("\n{PUT}\r\n   \n");
    let (s, n) = run(text.as_bytes()).unwrap();
    assert_eq!(n, 1);
    assert!(s.torn.is_none());
}

#[test]
fn complete_last_line_without_newline_is_kept() {
    let (s, n) = run(PUT.as_bytes()).unwrap();
    assert_eq!(n, 1);
    assert!(s.needs_newline);
    assert!(s.torn.is_none());
}

/// What a scan saw, comparable across runs.
fn outline(text: &[u8], capacity: usize) -> String {
    let mut ids = Vec::new();
    let r = scan_with(
        Path::new("t.ndjson"),
        std::io::BufReader::with_capacity(capacity, text),
        0,
        0,
        false,
        parse_line,
        |l, at, len| ids.push((format!("{l:?}"), at, len)),
    );
    format!(
        "{:?} {ids:?}",
        r.map(|s| (s.end, s.lines, s.records, s.torn, s.needs_newline))
    )
}

/// The same, scanned in parallel blocks of `block` bytes from a file.
fn outline_parallel(text: &[u8], block: usize) -> String {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t.ndjson");
    std::fs::write(&p, text).unwrap();
    let f = std::fs::File::open(&p).unwrap();
    let mut ids = Vec::new();
    let r = scan_blocks_parallel(
        Path::new("t.ndjson"),
        &RealIo,
        &f,
        block,
        text.len() as u64,
        parse_line,
        |l, at, len| ids.push((format!("{l:?}"), at, len)),
    );
    format!(
        "{:?} {ids:?}",
        r.map(|s| (s.end, s.lines, s.records, s.torn, s.needs_newline))
    )
}

/// A text made of the fragments that `parts` picks: whole lines (LF and
/// CRLF), blank ones, an unterminated line, and (the last one) a
/// malformed line.
fn assemble(parts: &[u8]) -> Vec<u8> {
    let fragments = [
        format!("{PUT}\n"),
        "\n".to_string(),
        format!("{PUT}\r\n"),
        "  \t \n".to_string(),
        "{\"op\":\"done\",\"id\":1}\n".to_string(),
        "{\"op\":\"pu".to_string(),
        "not json\n".to_string(),
    ];
    parts
        .iter()
        .flat_map(|&p| fragments[usize::from(p)].bytes())
        .collect()
}

proptest::proptest! {
    #[test]
    fn lines_across_buffer_fills_scan_alike(
        parts in proptest::collection::vec(0u8..6, 0..12),
        capacity in 1usize..80,
    ) {
        let text = assemble(&parts);
        proptest::prop_assert_eq!(outline(&text, capacity), outline(&text, 1 << 16));
    }

    #[test]
    fn parallel_blocks_scan_alike(
        parts in proptest::collection::vec(0u8..7, 0..40),
        block in 1usize..200,
    ) {
        let text = assemble(&parts);
        proptest::prop_assert_eq!(outline_parallel(&text, block), outline(&text, 1 << 16));
    }
}

#[test]
fn a_complete_malformed_last_line_is_corruption_not_a_torn_write() {
    // A torn write never ends with a newline.
    for text in [
        format!("{PUT}\n{{\"op\"\n"),
        format!("{PUT}\n{{\"op\"\n\n  \n"),
        format!("{PUT}\nmy notes\n"),
    ] {
        let e = run(text.as_bytes()).unwrap_err();
        assert!(
            matches!(e, Error::Corrupt { line: Some(2), .. }),
            "{text:?}: {e}"
        );
    }
}

#[test]
fn nul_bytes_at_the_end_are_a_torn_write() {
    for tail in [
        "\0\0\0\0",
        "\0\0\n\0\0",
        "{\"op\":\"pu\0\0\0",
        "\0\0\n{\"op\":\"pu",
    ] {
        let text = format!("{PUT}\n{tail}");
        let (s, n) = run(text.as_bytes()).unwrap();
        assert_eq!(n, 1, "{tail:?}");
        let t = s.torn.unwrap();
        assert_eq!(t.offset, PUT.len() as u64 + 1, "{tail:?}");
        assert_eq!(t.len, tail.len() as u64, "{tail:?}");
    }
    // NUL bytes with a record after them are no torn write.
    let text = format!("{PUT}\n\0\0\n{PUT}\n");
    assert!(matches!(
        run(text.as_bytes()).unwrap_err(),
        Error::Corrupt { line: Some(2), .. }
    ));
}

#[test]
fn files_that_are_not_spools_are_refused() {
    for text in [
        &b"my important notes\n"[..],
        b"my important notes",
        b"[1, 2, 3]\n",
        b"\x7fELF\x02\x01\x01\x00\x00\x00",
        b"{\"debug\": true}",
        b"{\"debug\": true}\n",
        b"\n\n  {\"op\":\"zap\",\"id\":1}\n",
        b"{\"op\":\"put\"}\n{\"op\":\"done\",\"id\":1}\n",
    ] {
        let e = run(text).unwrap_err();
        assert!(
            matches!(e, Error::NotASpool { .. }),
            "{:?}: {e}",
            String::from_utf8_lossy(text)
        );
    }
}

#[test]
fn a_first_record_cut_short_is_a_torn_write() {
    for text in ["{", "{\"op", "{\"op\":\"put\",\"id\":1,\"pay", "\0\0\0"] {
        let (s, n) = run(text.as_bytes()).unwrap();
        assert_eq!(n, 0);
        assert_eq!(s.torn.unwrap().offset, 0, "{text:?}");
    }
}

#[test]
fn the_head_check_refuses_what_the_full_scan_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t");
    for (text, refused) in [
        (&b"notes\n"[..], true),
        (b"{\"debug\": true}", true),
        (b"\n{\"a\":1}\n", true),
        (b"", false),
        (b"\n\n", false),
        (b"{\"op\":\"pu", false),
        (b"\0\0", false),
        (PUT.as_bytes(), false),
    ] {
        std::fs::write(&p, text).unwrap();
        let f = std::fs::File::open(&p).unwrap();
        let r = check_head(&p, &RealIo, &f);
        assert_eq!(
            matches!(r, Err(Error::NotASpool { .. })),
            refused,
            "{:?}: {r:?}",
            String::from_utf8_lossy(text)
        );
    }
    // A huge first line is judged by its first byte.
    let mut big = vec![b'x'; HEAD_LINE_MAX + 10];
    std::fs::write(&p, &big).unwrap();
    let f = std::fs::File::open(&p).unwrap();
    assert!(matches!(
        check_head(&p, &RealIo, &f),
        Err(Error::NotASpool { .. })
    ));
    big[0] = b'{';
    std::fs::write(&p, &big).unwrap();
    let f = std::fs::File::open(&p).unwrap();
    assert!(check_head(&p, &RealIo, &f).is_ok());
}

/// Where `unfinished_batch` says a batch starts, for `text`.
fn unfinished(text: &[u8]) -> Result<Option<u64>> {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t.ndjson");
    std::fs::write(&p, text).unwrap();
    let f = std::fs::File::open(&p).unwrap();
    unfinished_batch(&p, &RealIo, &f, 0, text.len() as u64)
}

fn batch_at(start: usize, lines: usize) -> Vec<u8> {
    let mut raw = Vec::new();
    for _ in 0..lines {
        raw.extend_from_slice(PUT.as_bytes());
        raw.push(b'\n');
    }
    super::super::format::frame_batch(&raw, start as u64).into_owned()
}

#[test]
fn a_batch_cut_anywhere_is_unfinished_and_a_whole_one_is_not() {
    let head = format!("{PUT}\n");
    let mut text = head.clone().into_bytes();
    text.extend_from_slice(&batch_at(head.len(), 3));
    assert_eq!(unfinished(&text).unwrap(), None, "a whole batch");
    let last_line_start = text[..text.len() - 1]
        .iter()
        .rposition(|b| *b == b'\n')
        .unwrap()
        + 1;
    // Cut at every byte from the batch's first line to just before
    // the end of its last: the batch is unfinished, or (cut inside
    // its first line) a torn tail the forward scan finds.
    for cut in head.len()..text.len() - 1 {
        let got = unfinished(&text[..cut]).unwrap();
        let first_line_end =
            head.len() + text[head.len()..].iter().position(|b| *b == b'\n').unwrap();
        if cut < first_line_end {
            assert_eq!(got, None, "cut at {cut}");
        } else if cut < last_line_start + PUT.len() + 1 {
            assert_eq!(got, Some(head.len() as u64), "cut at {cut}");
        }
    }
    // With NUL bytes after the cut.
    let mut nul = text[..last_line_start].to_vec();
    nul.extend_from_slice(&[0; 40]);
    assert_eq!(unfinished(&nul).unwrap(), Some(head.len() as u64));
    // Scanning leaves the unfinished batch out and reports it.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t.ndjson");
    std::fs::write(&p, &text[..last_line_start]).unwrap();
    let f = std::fs::File::open(&p).unwrap();
    let mut n = 0;
    let len = text[..last_line_start].len() as u64;
    let s = scan_tail_with(&p, &RealIo, &f, 0, len, 0, false, parse_line, |_, _, _| {
        n += 1
    })
    .unwrap();
    assert_eq!(n, 1);
    assert_eq!(s.end, head.len() as u64);
    assert_eq!(s.torn.unwrap().offset, head.len() as u64);
}

#[test]
fn a_stray_tx_field_is_corruption_not_a_cut() {
    // The last line names a batch start where no line of it is.
    let head = format!("{PUT}\n{PUT}\n");
    let mut text = head.clone().into_bytes();
    text.extend_from_slice(&batch_at(5, 2)[..]);
    let cut = text.len() - PUT.len() - 1;
    assert!(matches!(
        unfinished(&text[..cut]),
        Err(Error::Corrupt { .. })
    ));
    // A start after the line itself.
    let line = br#"{"op":"done","id":1,"tx":999}"#;
    assert!(matches!(unfinished(line), Err(Error::Corrupt { .. })));
}
