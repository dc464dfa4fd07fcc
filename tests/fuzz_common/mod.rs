//! The fuzz targets: what each parser of outside input must do for any
//! bytes. Shared by the seeded harness (`tests/fuzz_parsers.rs`) and the
//! coverage-guided targets (`fuzz/fuzz_targets/*.rs`), so that both check
//! the same properties. A target panics when a property fails (a panic
//! inside the parser is a failure too).
//!
//! Every target checks that the parser returns (an error is fine) and,
//! where `spool` writes what it reads, that a parse that succeeds round-
//! trips: what the writer makes of the value parses back to the same
//! value. Time and memory bounds are the harness's.

#![allow(dead_code)]

use spool::fuzzing::{self, Line};
use spool::item::{Evidence, Item};
use std::io::Write as _;

/// A target: a name (its corpus directory) and its check.
pub type Target = (&'static str, fn(&[u8]));

/// Every target, by name.
pub const TARGETS: &[Target] = &[
    ("ndjson_line", ndjson_line),
    ("ndjson_scan", ndjson_scan),
    ("spool_files", spool_files),
    ("export_record", export_record),
    ("enqueue_ndjson", enqueue_ndjson),
    ("push_request", push_request),
    ("push_gzip", push_gzip),
    ("serve_headers", serve_headers),
    ("token_file", token_file),
    ("units", units),
];

/// The target named `name`.
pub fn target(name: &str) -> fn(&[u8]) {
    TARGETS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, f)| *f)
        .unwrap_or_else(|| panic!("no fuzz target {name}"))
}

/// A line as a value: a `put` line's `deliveredAt` and `evidence` are
/// kept only as the delivery they record (as the readers of the main file
/// use them), in the written form of the evidence.
fn canonical(line: Line) -> Line {
    match line {
        Line::Put {
            item,
            dead_at,
            delivered_at,
            evidence,
        } => {
            let decoded = evidence.as_deref().and_then(Evidence::decode);
            let (delivered_at, evidence) = match (delivered_at, decoded) {
                (Some(at), Some(e)) => (Some(at), Some(e.encode())),
                _ => (None, None),
            };
            Line::Put {
                item,
                dead_at,
                delivered_at,
                evidence,
            }
        }
        other => other,
    }
}

fn without_payload(line: Line) -> Line {
    match line {
        Line::Put {
            item,
            dead_at,
            delivered_at,
            evidence,
        } => Line::Put {
            item: Item {
                payload: Vec::new(),
                ..item
            },
            dead_at,
            delivered_at,
            evidence,
        },
        other => other,
    }
}

/// One line of an NDJSON spool file: every reader (full, without the
/// payload, compaction's check, the `.delivered` file's) accepts and
/// refuses the same lines with the same values, and a line that parses
/// is written back as one line that parses to the same value.
pub fn ndjson_line(data: &[u8]) {
    let full = fuzzing::ndjson_line(data);
    let line = full.clone().map(|(l, _)| l);
    // Compaction's check: the same verdict, the same reason.
    let head = fuzzing::ndjson_check_line(data);
    match (&line, &head) {
        (Ok(l), Ok(h)) => {
            let (put, id, push, client) = match l {
                Line::Put { item, .. } => (true, item.id, false, false),
                Line::Done { id, .. } => (false, *id, false, false),
                Line::Push(_) => (false, 0, true, false),
                Line::Client(_) => (false, 0, false, true),
                Line::Evicted(_) => (false, 0, false, false),
            };
            assert_eq!(
                (h.put, h.id, h.push, h.client),
                (put, id, push, client),
                "check_line disagrees with parse_line"
            );
        }
        (Err(a), Err(b)) => assert_eq!(a, b, "check_line words the error differently"),
        _ => panic!("parse_line {line:?} but check_line {head:?}"),
    }
    // The index's reader: the same line without its payload.
    assert_eq!(
        fuzzing::ndjson_line_without_payload(data),
        line.clone().map(without_payload),
        "the index's reader disagrees"
    );
    // The delivered file's reader accepts a subset, with the same value.
    let delivered = fuzzing::ndjson_delivered_line(data);
    if let Ok(d) = &delivered {
        assert_eq!(Ok(d), line.as_ref(), "the delivered reader disagrees");
    }
    assert_eq!(
        fuzzing::ndjson_delivered_line_without_payload(data),
        delivered.map(without_payload),
        "the delivered index reader disagrees"
    );
    let Ok(line) = line else { return };
    let written = fuzzing::ndjson_write_line(&line);
    assert_eq!(
        written.iter().filter(|b| **b == b'\n').count(),
        1,
        "a written line is one line: {:?}",
        String::from_utf8_lossy(&written)
    );
    assert_eq!(written.last(), Some(&b'\n'));
    let text = &written[..written.len() - 1];
    let (again, tx) = fuzzing::ndjson_line(text).unwrap_or_else(|e| {
        panic!(
            "the written line {:?} does not parse: {e}",
            String::from_utf8_lossy(text)
        )
    });
    assert_eq!(tx, None, "a written line carries no batch frame");
    assert_eq!(
        canonical(again.clone()),
        canonical(line),
        "the written line {:?} reads back as another value",
        String::from_utf8_lossy(text)
    );
    assert_eq!(
        fuzzing::ndjson_write_line(&again),
        written,
        "writing is not stable"
    );
}

/// A whole NDJSON spool file, scanned: the outcome does not depend on
/// how the reader's buffer cuts the lines; every record is its line as
/// [`ndjson_line`] reads it; a torn tail runs to the end of the input.
/// The file as opening a spool scans it (unfinished batch left out),
/// in one pass and on several threads, gives the same, and a prefix of
/// the records of the plain scan.
pub fn ndjson_scan(data: &[u8]) {
    let outline = |r: spool::Result<(Vec<fuzzing::ScannedLine>, fuzzing::Scanned)>| match r {
        Ok((lines, s)) => Ok((lines, format!("{s:?}"))),
        Err(e) => Err(e.to_string()),
    };
    let whole = outline(fuzzing::ndjson_scan(data));
    for capacity in [1, 7, 64] {
        let r = std::io::BufReader::with_capacity(capacity, data);
        assert_eq!(
            outline(fuzzing::ndjson_scan(r)),
            whole,
            "a buffer of {capacity} bytes scans otherwise"
        );
    }
    let Ok((lines, scanned)) = fuzzing::ndjson_scan(data) else {
        return;
    };
    assert_eq!(scanned.records, lines.len() as u64);
    assert!(scanned.end <= data.len() as u64);
    if let Some(t) = &scanned.torn {
        assert_eq!(
            t.offset + t.len,
            data.len() as u64,
            "a torn tail ends the file"
        );
        assert_eq!(t.offset, scanned.end);
    }
    for (line, off, len) in &lines {
        let bytes = &data[*off as usize..*off as usize + len];
        assert_eq!(
            fuzzing::ndjson_line(bytes).map(|(l, _)| l).as_ref(),
            Ok(line),
            "a record is not its line"
        );
    }
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("fuzz.ndjson");
    std::fs::write(&path, data).expect("write the file");
    let file = std::fs::File::open(&path).expect("open the file");
    // Reading is linear: the scan asks for at most a few times the file's
    // bytes (plus a block and a search chunk), however its lines fall.
    let bound = 4 * data.len() as u64 + (512 << 10);
    let io = CountingIo::default();
    let one = outline(fuzzing::ndjson_scan_file(&path, &io, &file, false));
    let asked = io.asked();
    assert!(
        asked <= bound,
        "the scan read {asked} bytes of a {}-byte file",
        data.len()
    );
    let io = CountingIo::default();
    let parallel = outline(fuzzing::ndjson_scan_file(&path, &io, &file, true));
    let asked = io.asked();
    assert!(
        asked <= bound,
        "the parallel scan read {asked} bytes of a {}-byte file",
        data.len()
    );
    assert_eq!(one, parallel, "the parallel scan differs");
    if let Ok((file_lines, _)) = one {
        assert!(
            file_lines.len() <= lines.len() && file_lines[..] == lines[..file_lines.len()],
            "the file's records are not a prefix of the plain scan's"
        );
    }
}

/// Real file I/O that counts the bytes read asked for.
#[derive(Debug, Default)]
pub struct CountingIo(std::sync::atomic::AtomicU64);

impl CountingIo {
    /// Bytes asked for so far.
    pub fn asked(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl spool::backend::file::io::FileIo for CountingIo {
    fn read_at(&self, file: &std::fs::File, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        self.0
            .fetch_add(buf.len() as u64, std::sync::atomic::Ordering::Relaxed);
        std::os::unix::fs::FileExt::read_at(file, buf, offset)
    }
}

/// The files of an NDJSON spool, in [`encode_files`]' form.
pub const SPOOL_FILES: &[&str] = &[
    "spool.ndjson",
    "spool.ndjson.dead",
    "spool.ndjson.delivered",
    "spool.ndjson.meta",
    "spool.ndjson.idx",
    "spool.ndjson.idx-dirty",
];

/// Files as one input: per file, its index in [`SPOOL_FILES`] (one byte),
/// its length (four bytes, little-endian) and its bytes.
pub fn encode_files(files: &[(usize, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (which, bytes) in files {
        out.push(*which as u8);
        out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        out.extend_from_slice(bytes);
    }
    out
}

/// [`encode_files`] read back, leniently: a length past the end takes
/// what is there; an index out of range wraps; a later file of the same
/// name replaces an earlier one.
pub fn decode_files(mut data: &[u8]) -> Vec<(usize, Vec<u8>)> {
    let mut files: Vec<(usize, Vec<u8>)> = Vec::new();
    while let Some((&which, rest)) = data.split_first() {
        let mut len = [0u8; 4];
        let n = rest.len().min(4);
        len[..n].copy_from_slice(&rest[..n]);
        let rest = &rest[n..];
        let len = (u32::from_le_bytes(len) as usize).min(rest.len());
        let which = usize::from(which) % SPOOL_FILES.len();
        files.retain(|(w, _)| *w != which);
        files.push((which, rest[..len].to_vec()));
        data = &rest[len..];
    }
    files
}

/// Everything a command reads of a spool, as text (for comparing).
fn read_all(spool: &spool::Spool) -> Result<String, String> {
    let q = spool.queue();
    let now = spool::Timestamp::from_millis(1_764_583_200_000);
    let mut out = String::new();
    let mut read = || -> spool::Result<()> {
        let mut after = 0;
        loop {
            let page = q.page(after, 64)?;
            let Some(last) = page.last() else { break };
            after = last.id;
            out.push_str(&format!("{page:?}\n"));
        }
        out.push_str(&format!("{:?}\n", q.dead_page(0, 1000)?));
        out.push_str(&format!("{:?}\n", q.delivered_page(0, 1000)?));
        out.push_str(&format!(
            "{:?} {:?} {:?} {:?}\n",
            q.high_water()?,
            q.push_state()?,
            q.max_depth()?,
            q.retain()?
        ));
        out.push_str(&format!("{:?}\n", q.stats(now)?));
        out.push_str(&format!("{:?}\n", q.push_clients()?));
        Ok(())
    };
    read().map(|()| out).map_err(|e| e.to_string())
}

/// The files of an NDJSON spool (spool file, dead letters, delivered
/// records, metadata, the index and its write mark): opening it read-only
/// and read-write, reading everything and verifying it never panics nor
/// hangs; what a read-only and a read-write opener read is the same.
pub fn spool_files(data: &[u8]) {
    use spool::{OpenMode, OpenOptions, Spool};
    let dir = tempfile::tempdir().expect("a temporary directory");
    let files = decode_files(data);
    for (which, bytes) in &files {
        std::fs::write(dir.path().join(SPOOL_FILES[*which]), bytes).expect("write a file");
    }
    let path = dir.path().join(SPOOL_FILES[0]);
    let opts = |mode| OpenOptions {
        backend: Some(spool::BackendKind::File),
        busy_timeout: std::time::Duration::ZERO,
        ..OpenOptions::new(mode)
    };
    let read_only = Spool::open(&path, &opts(OpenMode::ReadOnly)).map_err(|e| e.to_string());
    let seen_read_only = read_only.as_ref().map_err(Clone::clone).and_then(read_all);
    drop(read_only);
    let _ = spool::ops::verify::verify(&path, &Default::default(), &mut |_| {});
    let writer = Spool::open(&path, &opts(OpenMode::ReadWrite)).map_err(|e| e.to_string());
    let seen_writer = writer.as_ref().map_err(Clone::clone).and_then(read_all);
    if let (Ok(a), Ok(b)) = (&seen_read_only, &seen_writer) {
        assert_eq!(a, b, "a reader and a writer read different spools");
    }
    drop(writer);
    // Repair, then a plain open again.
    let repair = spool::ops::verify::VerifyOptions { repair: true };
    let _ = spool::ops::verify::verify(&path, &repair, &mut |_| {});
    if let Ok(s) = Spool::open(&path, &opts(OpenMode::ReadWrite)) {
        let _ = read_all(&s);
    }
}

/// One record of an export (and a whole export: header and records): a
/// record that parses is written by `export` as a line that parses to the
/// same record; an export that reads is written back the same.
pub fn export_record(data: &[u8]) {
    use spool::ops::import::{parse_record, read_records};
    use spool::ops::json::ItemJson;
    if let Ok(rec) = parse_record(data) {
        let line = ItemJson::record(&rec).to_line();
        assert_eq!(
            parse_record(line.as_bytes()).as_ref(),
            Ok(&rec),
            "the exported record {line:?} reads back otherwise"
        );
    }
    if let Ok(h) = spool::SpoolHeader::parse_line(data) {
        let line = h.to_line();
        assert_eq!(
            spool::SpoolHeader::parse_line(line.as_bytes()).as_ref(),
            Ok(&h),
            "the header {line:?} reads back otherwise"
        );
    }
    let mut reader = data;
    if let Ok(records) = read_records(&mut reader, "fuzz") {
        let mut out = Vec::new();
        for rec in &records {
            writeln!(out, "{}", ItemJson::record(rec).to_line()).expect("write to a Vec");
        }
        let mut again = &out[..];
        assert_eq!(
            read_records(&mut again, "fuzz").ok().as_ref(),
            Some(&records),
            "an export written back reads otherwise"
        );
    }
}

/// `enqueue --ndjson` (and `--lines`) input: a batch that reads is
/// written back as NDJSON that reads as the same items.
pub fn enqueue_ndjson(data: &[u8]) {
    use spool::ops::input::{read_items, Format, InputOptions, Source};
    let read = |bytes: &[u8], format| {
        let mut r = bytes;
        read_items(
            Source::Reader {
                reader: &mut r,
                label: "stdin".into(),
            },
            &InputOptions {
                format,
                max_payload: 1 << 20,
                ..InputOptions::default()
            },
        )
    };
    if let Ok(items) = read(data, Format::Lines) {
        assert!(items.len() <= data.len());
        for it in &items {
            assert!(!it.payload.is_empty() && !it.payload.contains(&b'\n'));
        }
    }
    let Ok(items) = read(data, Format::Ndjson) else {
        return;
    };
    let mut out = Vec::new();
    for it in &items {
        let mut obj = serde_json::Map::new();
        match std::str::from_utf8(&it.payload) {
            Ok(text) => obj.insert("payload".into(), text.into()),
            Err(_) => {
                use base64::Engine as _;
                let b64 = base64::engine::general_purpose::STANDARD.encode(&it.payload);
                obj.insert("payload_base64".into(), b64.into())
            }
        };
        obj.insert("key".into(), it.key.clone().into());
        if let Some(g) = &it.group {
            obj.insert("group".into(), g.clone().into());
        }
        if let Some(c) = &it.coalesce_key {
            obj.insert("coalesce_key".into(), c.clone().into());
        }
        serde_json::to_writer(&mut out, &obj).expect("write to a Vec");
        out.push(b'\n');
    }
    assert_eq!(
        read(&out, Format::Ndjson).ok().as_ref(),
        Some(&items),
        "the items written back as NDJSON read otherwise"
    );
}

/// A push request body (and the answers a sender reads): a body that
/// parses is a valid request, and writes back as one that parses to the
/// same request; an error is one short line.
pub fn push_request(data: &[u8]) {
    use spool::push::wire;
    match wire::parse_request(data) {
        Ok(r) => {
            wire::validate_client_id(&r.client_id).expect("a valid client id");
            for w in r.entries.windows(2) {
                assert_eq!(w[0].seq() + 1, w[1].seq(), "entries are contiguous");
            }
            assert!(r.entries.first().is_none_or(|e| e.seq() >= 1));
            assert_eq!(
                wire::parse_request(&r.encode()),
                Ok(r),
                "the request written back reads otherwise"
            );
        }
        Err(e) => {
            assert!(!e.message().contains('\n'), "a 400's message is one line");
            assert!(e.message().len() <= 1024, "a 400's message is short");
        }
    }
    if let Ok(r) = wire::parse_response(data) {
        assert_eq!(wire::parse_response(&r.to_json()), Ok(r));
    }
    if let Ok(r) = wire::parse_error_body(data) {
        assert_eq!(wire::parse_error_body(&r.to_json()), Ok(r));
    }
}

/// The limit [`push_gzip`] inflates to.
pub const GUNZIP_LIMIT: u64 = 256 << 10;

/// A gzip request body, inflated as `spool serve` inflates it: never
/// past the limit (whatever the ratio), and what inflates is exactly
/// what deflating it again and inflating gives; it then goes to the push
/// parser.
pub fn push_gzip(data: &[u8]) {
    use fuzzing::GunzipError;
    let budget = 4 * GUNZIP_LIMIT as usize;
    match fuzzing::gunzip(data, GUNZIP_LIMIT, budget) {
        Ok(body) => {
            assert!(body.len() as u64 <= GUNZIP_LIMIT, "inflated past the limit");
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            gz.write_all(&body).expect("deflate");
            let again = gz.finish().expect("deflate");
            assert_eq!(
                fuzzing::gunzip(&again, GUNZIP_LIMIT, budget).as_ref(),
                Ok(&body)
            );
            push_request(&body);
        }
        Err(GunzipError::TooLarge) | Err(GunzipError::Invalid(_)) => {}
        Err(GunzipError::OverBudget) => panic!("a body within the limit went over the budget"),
    }
}

/// The headers and path of `spool serve`'s requests: input split at
/// newlines (which no header value holds) into an `Idempotency-Key`, a
/// `Content-Encoding`, an `Authorization` value and a `/v1/clients/` path.
pub fn serve_headers(data: &[u8]) {
    const MAX_KEY: usize = 64;
    let mut parts = data.split(|b| *b == b'\n');
    let key = parts.next();
    let encoding = parts.next();
    let authorization = parts.next().unwrap_or_default();
    let path = String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
    match fuzzing::idempotency_key(key, MAX_KEY) {
        Ok(k) => {
            assert!(k.len() <= MAX_KEY);
            if !k.is_empty() {
                assert_eq!(Some(k.as_bytes()), key, "the key is the header's bytes");
            }
        }
        Err((status, message)) => {
            assert_eq!(status, 400);
            assert!(!message.is_empty());
        }
    }
    match fuzzing::content_encoding(encoding) {
        Ok(_) => {}
        Err((status, _)) => assert_eq!(status, 415),
    }
    if let Some(token) = spool::serve::auth::bearer(authorization) {
        assert!(!token.is_empty());
        assert_eq!(token, token.trim_ascii(), "a token has no blanks around it");
        let again = [&b"Bearer "[..], token].concat();
        assert_eq!(spool::serve::auth::bearer(&again), Some(token));
    }
    let full = format!("/v1/clients/{path}");
    match fuzzing::client_of_path(&full) {
        Ok(id) => {
            spool::push::wire::validate_client_id(&id).expect("a valid client id");
            assert_eq!(
                fuzzing::client_of_path(&format!("/v1/clients/{id}")),
                Ok(id.clone())
            );
        }
        Err((status, _)) => assert_eq!(status, 400),
    }
}

/// A token file: one that parses has a token per token line, each of
/// which authenticates as its own line (with its name and client globs),
/// and an error never shows a token.
pub fn token_file(data: &[u8]) {
    use spool::serve::auth::{glob_match, Tokens};
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Tokens::parse(text, std::path::Path::new("tokens")) {
        Ok(tokens) => {
            let lines: Vec<Vec<&str>> = text
                .lines()
                .map(|l| l.split_whitespace().collect::<Vec<_>>())
                .filter(|w| w.first().is_some_and(|t| !t.starts_with('#')))
                .collect();
            assert_eq!(tokens.len(), lines.len());
            for words in &lines {
                let grant = tokens
                    .authenticate(words[0].as_bytes())
                    .expect("every token authenticates");
                let name = words[1..].iter().find_map(|w| w.strip_prefix("name="));
                if let Some(name) = name {
                    assert_eq!(tokens.name(grant), name);
                }
                let globs: Vec<&&str> = words[1..]
                    .iter()
                    .filter(|w| !w.starts_with("name="))
                    .collect();
                for client in ["edge-1", "a", "0a6e1c2d-1111"] {
                    let want = globs.is_empty()
                        || globs
                            .iter()
                            .any(|g| glob_match(g.as_bytes(), client.as_bytes()));
                    assert_eq!(tokens.may_act_as(grant, client), want);
                }
            }
        }
        Err(e) => {
            let message = e.to_string();
            for word in text.split_whitespace().filter(|w| w.len() >= 16) {
                assert!(
                    !message.contains(word),
                    "the error {message:?} shows a token"
                );
            }
        }
    }
}

/// Durations, sizes, whole numbers, status and exit-code lists,
/// retention windows, `Retry-After`, RFC 3339 times and delivery
/// evidence: what parses reads back the same from its written form.
pub fn units(data: &[u8]) {
    use spool::units::{parse_duration, parse_size, parse_whole};
    let s = String::from_utf8_lossy(data);
    let s = s.as_ref();
    if let Ok(d) = parse_duration(s) {
        let written = humantime::format_duration(d).to_string();
        assert_eq!(parse_duration(&written), Ok(d), "{written:?}");
    }
    if let Ok(n) = parse_size(s) {
        assert_eq!(parse_size(&n.to_string()), Ok(n));
    }
    if let Ok(n) = parse_whole(s, 1, Some(1 << 40), 5) {
        assert!((1..=1 << 40).contains(&n));
        assert_eq!(parse_whole(&n.to_string(), 1, Some(1 << 40), 5), Ok(n));
    }
    if let Ok(v) = spool::replay::http::parse_statuses(s) {
        let written: Vec<String> = v.iter().map(u16::to_string).collect();
        assert_eq!(
            spool::replay::http::parse_statuses(&written.join(",")),
            Ok(v)
        );
    }
    if let Ok(v) = spool::replay::exec::parse_exit_codes(s) {
        let written: Vec<String> = v.iter().map(i32::to_string).collect();
        assert_eq!(
            spool::replay::exec::parse_exit_codes(&written.join(",")),
            Ok(v)
        );
    }
    if let Ok(Some(w)) = spool::item::parse_retain(s) {
        assert!(w.as_millis() >= 1000);
        let written = humantime::format_duration(w).to_string();
        assert_eq!(
            spool::item::parse_retain(&written),
            Ok(Some(w)),
            "{written:?}"
        );
    }
    let _ = spool::replay::http::parse_retry_after(s);
    if let Some(t) = spool::Timestamp::parse_rfc3339(s) {
        let written = t.to_rfc3339();
        assert_eq!(
            spool::Timestamp::parse_rfc3339(&written),
            Some(t),
            "{s:?} read as {t:?}, written as {written:?}"
        );
    }
    if let Some(e) = Evidence::decode(s) {
        assert_eq!(Evidence::decode(&e.encode()), Some(e));
        assert_eq!(Evidence::from_json(&e.to_json()), Some(e));
    }
}
