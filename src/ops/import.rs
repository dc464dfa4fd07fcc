//! `import`: add the records of an export (see [`super::export`]) to a
//! spool of any backend, all or nothing.
//!
//! An export's first line may be a spool header
//! ([`crate::queue::SpoolHeader`]: the exporting spool's uuid
//! and push state). [`import_input_with`] hands it to
//! [`Queue::import_with_identity`] in the same commit as the records; a
//! header on any other line is a malformed record. Exports without a
//! header (older versions, `drain`, `dlq export`) import as before.
//!
//! A record without a key keeps its stable identity: with a header, it
//! gets the key `<source-uuid>:<source-id>` ([`with_stable_key`]) — the
//! `Idempotency-Key` that `replay` sent for it from the exporting spool —
//! whatever its state, so a receiver that already took it deduplicates,
//! and importing the same export twice is a dedup hit for every record
//! the second time. Without a header there is no source
//! uuid: key-less records stay key-less (and are sent under the target's
//! `<uuid>:<id>`). An in-flight record (one with a `push_seq`) imported
//! under the exporting spool's own identity keeps its empty key: its
//! push number identifies it at the receiver, with the key it was sent
//! with.
//!
//! [`read_records`] parses and checks the whole input before anything is
//! changed: one malformed record anywhere is an error naming its line
//! ([`crate::Error::InvalidInput`], exit 65), and nothing is imported.
//! [`import`] then stores every record in one atomic [`Queue::import`]
//! call, which keeps keys, attempts, errors, retry times and state, keeps
//! an id only where the target never issued it (above its high-water
//! mark) and renumbers the others, and turns into a dedup hit a pending
//! or held record whose key a pending item of the target already
//! carries, a dead record whose key a dead letter of the target carries,
//! and a delivered record whose key a retained delivered item carries
//! (only what the target held before the import counts for the last
//! two, so that an export's several dead letters of one key all come
//! in). Keys are compared only when non-empty: a key-less record of an
//! export without a header is stored again by a second import.
//!
//! Accepted records: the item JSON object (`id`, exactly one of
//! `payload`/`payload_base64`, `key`, `attempts`, `enqueued_at`,
//! `next_retry_at`, `last_error`, `held`, `dead_at`) and `state`. Only
//! `id` and the payload are required. Without `state`, a record with
//! `dead_at` is dead, one with `"held": true` is held, any other pending —
//! so the output of `drain`, `list --json` and `dlq export --format
//! ndjson` imports too. Unknown fields, a `state` that contradicts
//! `held` or `dead_at`, and a key holding a NUL byte
//! ([`crate::item::key_problem`]; an export of a spool that older
//! versions let store one) are errors. Blank lines are skipped.

use crate::error::{Error, Result};
use crate::item::{Delivery, Evidence, Imported, Item, ItemId, Record, RecordState};
use crate::queue::Queue;
use crate::queue::{IdentityOutcome, SpoolHeader};
use crate::time::Timestamp;
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use std::io::BufRead;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RecordIn {
    id: u64,
    #[serde(default)]
    payload: Option<String>,
    #[serde(default)]
    payload_base64: Option<String>,
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    attempts: Option<u32>,
    #[serde(default)]
    enqueued_at: Option<String>,
    #[serde(default)]
    next_retry_at: Option<String>,
    #[serde(default)]
    last_error: Option<String>,
    #[serde(default)]
    held: Option<bool>,
    #[serde(default)]
    dead_at: Option<String>,
    #[serde(default)]
    state: Option<RecordState>,
    #[serde(default)]
    group: Option<String>,
    #[serde(default)]
    coalesce_key: Option<String>,
    #[serde(default)]
    delivered_at: Option<String>,
    #[serde(default)]
    evidence: Option<serde_json::Value>,
    /// The exporting spool's push number. Kept only by an import that
    /// keeps the exporting spool's identity
    /// ([`Queue::import_with_identity`]); any other import drops it (the
    /// item is sent again under the importing spool's numbers).
    #[serde(default)]
    push_seq: Option<u64>,
}

fn time(field: &str, v: Option<String>) -> std::result::Result<Option<Timestamp>, String> {
    match v {
        None => Ok(None),
        Some(s) => Timestamp::parse_rfc3339(&s)
            .map(Some)
            .ok_or_else(|| format!("{field} {s:?} is not an RFC 3339 time")),
    }
}

/// Parse one record (a line without its line ending).
pub fn parse_record(line: &[u8]) -> std::result::Result<Record, String> {
    let r: RecordIn = serde_json::from_slice(line).map_err(|e| {
        super::json::line_error(&e, r#"{"id": 1, "payload": "…", "state": "pending"}"#)
    })?;
    if r.id == 0 {
        return Err("id must be a positive integer".into());
    }
    if r.push_seq == Some(0) {
        return Err("push_seq must be a positive integer (or null)".into());
    }
    let key = r.key.unwrap_or_default();
    if let Some(problem) = crate::item::key_problem(&key) {
        return Err(problem.into());
    }
    let payload = match (r.payload, r.payload_base64) {
        (Some(p), None) => p.into_bytes(),
        (None, Some(b)) => base64::engine::general_purpose::STANDARD
            .decode(b.as_bytes())
            .map_err(|e| format!("payload_base64 is not valid base64: {e}"))?,
        (Some(_), Some(_)) => {
            return Err("both payload and payload_base64; give exactly one".into())
        }
        (None, None) => return Err("no payload (payload or payload_base64)".into()),
    };
    let dead_at = time("dead_at", r.dead_at)?;
    let delivered_at = time("delivered_at", r.delivered_at)?;
    let held = r.held.unwrap_or(false);
    let state = match r.state {
        Some(s) => s,
        None if dead_at.is_some() => RecordState::Dead,
        None if delivered_at.is_some() => RecordState::Delivered,
        None if held => RecordState::Held,
        None => RecordState::Pending,
    };
    if state != RecordState::Delivered && (delivered_at.is_some() || r.evidence.is_some()) {
        return Err(format!(
            "state {:?} with delivered_at or evidence; only delivered records have them",
            state_name(state)
        ));
    }
    let mut delivery = None;
    match state {
        RecordState::Delivered => {
            let at = delivered_at.ok_or("a delivered record needs delivered_at")?;
            let evidence = match &r.evidence {
                None => Evidence::Done,
                Some(v) => Evidence::from_json(v).ok_or_else(|| {
                    format!(
                        "evidence {v} is not one of {{\"http_status\":N}}, {{\"exit_status\":N}}, \
                         {{\"push_last_seq\":N}}, {{\"marked_done\":true}}, {{\"dead_letter_sink\":true}}"
                    )
                })?,
            };
            if held || dead_at.is_some() {
                return Err("a delivered record cannot be held or dead".into());
            }
            if r.push_seq.is_some() {
                return Err("a delivered record has no push_seq".into());
            }
            delivery = Some(Delivery { at, evidence });
        }
        RecordState::Dead => {
            if dead_at.is_none() {
                return Err("a dead record needs dead_at".into());
            }
            if held {
                return Err("a dead record cannot be held".into());
            }
        }
        RecordState::Held | RecordState::Pending => {
            if dead_at.is_some() {
                return Err(format!(
                    "state {:?} with dead_at; only dead records have a time of death",
                    state_name(state)
                ));
            }
            if r.held.is_some() && held != (state == RecordState::Held) {
                return Err(format!(
                    "state {:?} contradicts \"held\": {held}",
                    state_name(state)
                ));
            }
        }
    }
    Ok(Record {
        item: Item {
            id: r.id,
            payload,
            key,
            attempts: r.attempts.unwrap_or(0),
            enqueued_at: time("enqueued_at", r.enqueued_at)?,
            next_retry_at: time("next_retry_at", r.next_retry_at)?,
            last_error: r.last_error,
            held: state == RecordState::Held,
            push_seq: r.push_seq,
            group: r.group,
            coalesce_key: r.coalesce_key,
        },
        state,
        dead_at,
        delivery,
    })
}

fn state_name(s: RecordState) -> &'static str {
    match s {
        RecordState::Pending => "pending",
        RecordState::Held => "held",
        RecordState::Dead => "dead",
        RecordState::Delivered => "delivered",
    }
}

/// Read and check every record of `reader`; `label` names it in errors
/// (`"stdin"`, a file name). Nothing is returned unless all of it parses.
/// A spool header on the first line is checked and left out.
pub fn read_records(reader: &mut dyn BufRead, label: &str) -> Result<Vec<Record>> {
    let mut out = Vec::new();
    for_each_record(reader, label, &mut |line| {
        if let InputLine::Record(rec) = line {
            out.push(rec);
        }
        Ok(())
    })?;
    Ok(out)
}

/// One line of an export: a record, or the spool header of line 1.
enum InputLine {
    Record(Record),
    Header(SpoolHeader),
}

/// Parse the lines of `reader` one at a time, handing each to `f`.
fn for_each_record(
    reader: &mut dyn BufRead,
    label: &str,
    f: &mut dyn FnMut(InputLine) -> Result<()>,
) -> Result<()> {
    let mut buf = Vec::new();
    let mut n = 0u64;
    loop {
        buf.clear();
        let got = reader
            .read_until(b'\n', &mut buf)
            .map_err(|e| Error::io(std::path::Path::new(label), "read", e))?;
        if got == 0 {
            return Ok(());
        }
        n += 1;
        if let Some(line) = record_of_line(&buf, label, n) {
            f(line?)?;
        }
    }
}

/// The record (or, on line 1, the spool header) on line `n` of `label`
/// (`raw` with its line ending), or `None` for a blank line.
fn record_of_line(raw: &[u8], label: &str, n: u64) -> Option<Result<InputLine>> {
    let mut line = raw;
    if let Some(l) = line.strip_suffix(b"\n") {
        line = l;
    }
    if let Some(l) = line.strip_suffix(b"\r") {
        line = l;
    }
    if line.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    let parsed = match parse_record(line) {
        Ok(rec) => Ok(InputLine::Record(rec)),
        // Only a line that is not a record is looked at as a header.
        Err(_) if SpoolHeader::is_header(line) => {
            if n == 1 {
                SpoolHeader::parse_line(line).map(InputLine::Header)
            } else {
                Err("a spool header ({\"spool\": …}) is allowed only as the first line".into())
            }
        }
        Err(reason) => Err(reason),
    };
    Some(parsed.map_err(|reason| {
        Error::InvalidInput(format!("{label} line {n}: {reason}; nothing was imported"))
    }))
}

/// An export, checked in full and ready to be imported in one streamed
/// commit: a file is read twice (checked, then imported), stdin is copied
/// to a spill file (0600, unlinked at once) while it is checked. Memory
/// holds one record at a time whatever the size of the export.
#[derive(Debug)]
pub struct ImportInput {
    file: std::fs::File,
    label: String,
    records: u64,
    header: Option<SpoolHeader>,
}

/// Count the records of a checked export and keep its header.
fn count_lines(reader: &mut dyn BufRead, label: &str) -> Result<(u64, Option<SpoolHeader>)> {
    let mut records = 0u64;
    let mut header = None;
    for_each_record(reader, label, &mut |line| {
        match line {
            InputLine::Record(_) => records += 1,
            InputLine::Header(h) => header = Some(h),
        }
        Ok(())
    })?;
    Ok((records, header))
}

impl ImportInput {
    /// The export in the file at `path`, checked.
    pub fn file(path: &std::path::Path) -> Result<ImportInput> {
        let file = std::fs::File::open(path).map_err(|e| Error::io(path, "read", e))?;
        let label = path.display().to_string();
        let mut r = std::io::BufReader::with_capacity(1 << 16, &file);
        let (records, header) = count_lines(&mut r, &label)?;
        Ok(ImportInput {
            file,
            label,
            records,
            header,
        })
    }

    /// The export read from `reader` (stdin), checked and kept in a spill
    /// file in `dir`.
    pub fn spill(
        reader: &mut dyn std::io::Read,
        label: &str,
        dir: &std::path::Path,
    ) -> Result<ImportInput> {
        let mut file = super::input::spill_file(dir)?;
        std::io::copy(reader, &mut file)
            .map_err(|e| Error::io(std::path::Path::new(label), "read", e))?;
        let mut r =
            std::io::BufReader::with_capacity(1 << 16, super::input::read_from_start(&file));
        let (records, header) = count_lines(&mut r, label)?;
        Ok(ImportInput {
            file,
            label: label.to_string(),
            records,
            header,
        })
    }

    /// Records in the export.
    pub fn len(&self) -> u64 {
        self.records
    }

    /// True when the export holds no record.
    pub fn is_empty(&self) -> bool {
        self.records == 0
    }

    /// Check that the export can give its identity (`import
    /// --identity`): it has a spool header. [`Error::InvalidInput`]
    /// otherwise.
    pub fn check_identity(&self) -> Result<()> {
        if self.header.is_none() {
            return Err(Error::InvalidInput(format!(
                "{}: no spool header on the first line, so there is no identity to adopt \
                 (an export of an older spool, or not a whole-spool export); nothing was imported",
                self.label
            )));
        }
        Ok(())
    }

    /// The export's spool header (its first line), if it has one.
    pub fn header(&self) -> Option<&SpoolHeader> {
        self.header.as_ref()
    }

    /// The records, in order, read again from the start.
    pub fn records(&self) -> impl Iterator<Item = Result<Record>> + '_ {
        let mut r =
            std::io::BufReader::with_capacity(1 << 16, super::input::read_from_start(&self.file));
        let label = self.label.clone();
        let mut buf = Vec::new();
        let mut n = 0u64;
        std::iter::from_fn(move || loop {
            buf.clear();
            match r.read_until(b'\n', &mut buf) {
                Err(e) => return Some(Err(Error::io(std::path::Path::new(&label), "read", e))),
                Ok(0) => return None,
                Ok(_) => {}
            }
            n += 1;
            match record_of_line(&buf, &label, n) {
                None | Some(Ok(InputLine::Header(_))) => {}
                Some(Ok(InputLine::Record(rec))) => return Some(Ok(rec)),
                Some(Err(e)) => return Some(Err(e)),
            }
        })
    }
}

/// Read and check every record of the file at `path` (see
/// [`read_records`]). A missing file is a not-found error.
pub fn read_file(path: &std::path::Path) -> Result<Vec<Record>> {
    let f = std::fs::File::open(path).map_err(|e| Error::io(path, "read", e))?;
    read_records(
        &mut std::io::BufReader::with_capacity(1 << 16, f),
        &path.display().to_string(),
    )
}

/// A record that was renumbered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Renumbered {
    /// Its id in the input.
    pub from: ItemId,
    /// Its id in the spool.
    pub to: ItemId,
}

/// A record that was a dedup hit: nothing was stored for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DedupHit {
    /// Its id in the input.
    pub from: ItemId,
    /// The item that already carries the key: a pending item for a
    /// pending or held record, a dead letter for a dead one, a retained
    /// delivered item for a delivered one.
    pub existing: ItemId,
    /// The key.
    pub key: String,
    /// The record's state, and so the set `existing` is in.
    pub state: RecordState,
}

/// What [`import`] did.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize)]
pub struct ImportReport {
    /// Records read.
    pub records: u64,
    /// Records stored.
    pub imported: u64,
    /// Stored records that kept their id.
    pub kept_ids: u64,
    /// Stored records that got a new id.
    pub renumbered: Vec<Renumbered>,
    /// Records not stored because the spool already had their key (see
    /// [`DedupHit::existing`]).
    pub deduplicated: Vec<DedupHit>,
    /// Stored pending (not held) records.
    pub pending: u64,
    /// Stored held records.
    pub held: u64,
    /// Stored dead records.
    pub dead: u64,
    /// Stored retained delivered records (SPEC §9).
    pub delivered: u64,
    /// What became of the export's spool header: `adopted`, `kept` (same
    /// uuid), `ignored` (another uuid); `None` without a header.
    pub identity: Option<IdentityOutcome>,
}

/// Store `records` in one atomic commit.
pub fn import(queue: &dyn Queue, records: &[Record]) -> Result<ImportReport> {
    import_records(
        queue,
        records.len() as u64,
        None,
        &mut records.iter().cloned().map(Ok),
    )
}

/// Store the records of a checked export in one atomic, streamed commit
/// ([`Queue::import_stream`]); a spool header is used as
/// [`import_input_with`] without `adopt` uses it.
pub fn import_input(queue: &dyn Queue, input: &ImportInput) -> Result<ImportReport> {
    import_input_with(queue, input, false)
}

/// Store the records of a checked export, and what its spool header says
/// ([`Queue::import_with_identity`]), in one atomic, streamed commit.
/// With `adopt` (`import --identity`) the spool takes the exporting
/// spool's uuid and push state: the export must have a header
/// ([`Error::InvalidInput`] otherwise) and the spool must be fresh
/// ([`Error::IdentityRefused`] otherwise); either way nothing changes.
pub fn import_input_with(
    queue: &dyn Queue,
    input: &ImportInput,
    adopt: bool,
) -> Result<ImportReport> {
    if adopt {
        input.check_identity()?;
    }
    let source = input.header.as_ref().map(|h| h.uuid.as_str());
    // Whether the spool is (or becomes) the exporting spool as a push
    // client, so that records may keep their push numbers.
    let same_client = match source {
        Some(uuid) => adopt || queue.uuid().ok().as_deref() == Some(uuid),
        None => false,
    };
    import_records(
        queue,
        input.len(),
        input.header.as_ref().map(|h| (h, adopt)),
        &mut input
            .records()
            .map(|r| r.map(|r| with_stable_key(r, source, same_client))),
    )
}

/// `rec` with the stable key it was sent under by the exporting spool
/// `source` (`<source-uuid>:<source-id>`, what `replay` sends for an item
/// without a key) when it has no key of its own, so that a move keeps
/// its identity at a receiver and importing the same export twice
/// deduplicates. Without a source uuid (an export without a header) the
/// record is left key-less: no key can be derived. With `same_client`
/// (the import keeps the exporting spool's push identity) a record that
/// carries a push number is left as it is too: the number is its
/// identity at the push receiver, which knows it with its key as it was,
/// and a new key would be new content under the same number.
pub fn with_stable_key(mut rec: Record, source: Option<&str>, same_client: bool) -> Record {
    if let Some(uuid) = source {
        if rec.item.key.is_empty() && !(same_client && rec.item.push_seq.is_some()) {
            rec.item.key = format!("{uuid}:{}", rec.item.id);
        }
    }
    rec
}

fn import_records(
    queue: &dyn Queue,
    count: u64,
    header: Option<(&SpoolHeader, bool)>,
    records: &mut dyn Iterator<Item = Result<Record>>,
) -> Result<ImportReport> {
    let mut r = ImportReport {
        records: count,
        ..ImportReport::default()
    };
    if count == 0 && header.is_none() {
        return Ok(r);
    }
    let mut heard = 0u64;
    let mut each = |rec: &Record, res: Imported| {
        heard += 1;
        if res.deduplicated {
            r.deduplicated.push(DedupHit {
                from: rec.item.id,
                existing: res.id,
                key: rec.item.key.clone(),
                state: rec.state,
            });
            return;
        }
        r.imported += 1;
        if res.kept_id {
            r.kept_ids += 1;
        } else {
            r.renumbered.push(Renumbered {
                from: rec.item.id,
                to: res.id,
            });
        }
        match rec.state {
            RecordState::Pending => r.pending += 1,
            RecordState::Held => r.held += 1,
            RecordState::Dead => r.dead += 1,
            RecordState::Delivered => r.delivered += 1,
        }
    };
    let identity = match header {
        Some((h, adopt)) => Some(queue.import_with_identity(h, adopt, records, &mut each)?),
        None => {
            queue.import_stream(records, &mut each)?;
            None
        }
    };
    r.identity = identity;
    if heard != count {
        return Err(Error::Internal(format!(
            "import_stream reported {heard} results for {count} records"
        )));
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{OpenOptions, Spool};

    #[test]
    fn records_parse_and_check() {
        let r = parse_record(br#"{"id":3,"payload_base64":"/wA=","state":"held"}"#).unwrap();
        assert_eq!(r.item.payload, b"\xff\x00");
        assert!(r.item.held);
        let r = parse_record(br#"{"id":4,"payload":"x","dead_at":"2025-01-01T00:00:00.000Z"}"#)
            .unwrap();
        assert_eq!(r.state, RecordState::Dead);
        for bad in [
            &br#"{"id":1}"#[..],
            br#"{"id":1,"payload":"a","payload_base64":"YQ=="}"#,
            br#"{"id":1,"payload":"a","extra":1}"#,
            br#"{"id":1,"payload":"a","state":"dead"}"#,
            br#"{"id":1,"payload":"a","state":"pending","held":true}"#,
            br#"{"id":1,"payload":"a","enqueued_at":"yesterday"}"#,
            br#"{"id":0,"payload":"a"}"#,
            br#"{"id":1,"payload":"a""#,
        ] {
            assert!(
                parse_record(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn a_bad_line_names_itself_and_nothing_is_returned() {
        let mut input: &[u8] = b"{\"id\":1,\"payload\":\"a\"}\n\n{\"id\":2}\n";
        let e = read_records(&mut input, "in.ndjson").unwrap_err();
        assert!(e.to_string().starts_with("in.ndjson line 3: "), "{e}");
        assert_eq!(e.kind(), crate::ErrorKind::Data);
    }

    #[test]
    fn key_less_records_get_the_source_s_stable_key() {
        let rec = |line: &[u8]| parse_record(line).unwrap();
        let plain = rec(br#"{"id":4,"payload":"a"}"#);
        let keyed = rec(br#"{"id":5,"payload":"b","key":"k"}"#);
        let in_flight = rec(br#"{"id":6,"payload":"c","push_seq":2}"#);
        let u = Some("3f0c8a52-5a4e-4c77-9a3e-1f6f1d2b9c10");
        let key = |r: &Record, src, same| with_stable_key(r.clone(), src, same).item.key;
        assert_eq!(
            key(&plain, u, false),
            "3f0c8a52-5a4e-4c77-9a3e-1f6f1d2b9c10:4"
        );
        assert_eq!(key(&keyed, u, false), "k");
        assert_eq!(key(&plain, None, false), "");
        assert_eq!(key(&in_flight, u, true), "");
        assert_eq!(
            key(&in_flight, u, false),
            "3f0c8a52-5a4e-4c77-9a3e-1f6f1d2b9c10:6"
        );
    }

    #[test]
    fn ids_kept_renumbered_and_dedup() {
        let s = Spool::memory(&OpenOptions::default());
        s.enqueue(b"old", "k").unwrap();
        s.enqueue(b"old2", "").unwrap();
        let mut input: &[u8] = b"{\"id\":1,\"payload\":\"a\"}\n{\"id\":5,\"payload\":\"b\",\"key\":\"k\"}\n{\"id\":9,\"payload\":\"c\"}\n";
        let recs = read_records(&mut input, "x").unwrap();
        let r = import(&*s, &recs).unwrap();
        assert_eq!((r.records, r.imported, r.kept_ids), (3, 2, 1));
        assert_eq!(r.renumbered, vec![Renumbered { from: 1, to: 3 }]);
        assert_eq!(r.deduplicated[0].existing, 1);
    }
}
