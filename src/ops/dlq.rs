//! `dlq`: the dead-letter set — inspect, export, requeue, purge.
//!
//! Dead letters are items that exhausted their retry budget or that a
//! target rejected for good. They keep their payload, key, attempts, last
//! error and the time they died. [`list`] streams them page by page;
//! [`export`] writes them as NDJSON, a JSON array or CSV (see
//! [`ExportFormat`]) to a writer or to a file replaced atomically;
//! [`requeue`] moves them back to pending (attempts reset, keys kept) and
//! [`purge`] deletes them, each in one atomic queue call.
//!
//! CSV has the header `id,key,attempts,enqueued_at,dead_at,last_error,
//! payload_encoding,payload`, RFC 4180 quoting and CRLF line ends;
//! `payload_encoding` is `utf8` when the payload is valid UTF-8 (written
//! as is, quoted when needed) and `base64` otherwise (standard alphabet,
//! padded). Times are RFC 3339 UTC; an unknown time or a missing last
//! error is an empty field.

use super::ids::IdsReport;
use super::json::ItemJson;
use super::output::{sink_error, write_to, Destination};
use crate::error::{Error, Result};
use crate::item::{DeadLetter, ItemId};
use crate::queue::{Queue, PAGE_SIZE};
use base64::Engine as _;

/// An iterator over dead letters that reads one page at a time. After an
/// error it yields nothing more.
pub struct DeadStream<'a> {
    queue: &'a dyn Queue,
    after: ItemId,
    buf: std::vec::IntoIter<DeadLetter>,
    remaining: Option<usize>,
    finished: bool,
}

impl Iterator for DeadStream<'_> {
    type Item = Result<DeadLetter>;

    fn next(&mut self) -> Option<Result<DeadLetter>> {
        if self.remaining == Some(0) {
            return None;
        }
        loop {
            if let Some(dl) = self.buf.next() {
                if let Some(r) = self.remaining.as_mut() {
                    *r -= 1;
                }
                return Some(Ok(dl));
            }
            if self.finished {
                return None;
            }
            let want = self.remaining.map_or(PAGE_SIZE, |r| r.min(PAGE_SIZE));
            match self.queue.dead_page(self.after, want) {
                Ok(page) => {
                    if page.len() < want {
                        self.finished = true;
                    }
                    match page.last() {
                        Some(last) if last.item.id > self.after => self.after = last.item.id,
                        Some(_) => {
                            self.finished = true;
                            return Some(Err(Error::Internal(
                                "dead_page did not advance past the previous page".into(),
                            )));
                        }
                        None => return None,
                    }
                    self.buf = page.into_iter();
                }
                Err(e) => {
                    self.finished = true;
                    return Some(Err(e));
                }
            }
        }
    }
}

/// Options for [`list`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ListOptions {
    /// At most this many dead letters.
    pub limit: Option<usize>,
}

/// The dead letters in id order, lazily, page by page.
pub fn list<'a>(queue: &'a dyn Queue, opts: &ListOptions) -> DeadStream<'a> {
    DeadStream {
        queue,
        after: 0,
        buf: Vec::new().into_iter(),
        remaining: opts.limit,
        finished: false,
    }
}

/// One dead letter; an id that is not one is [`Error::InvalidInput`].
pub fn show(queue: &dyn Queue, id: ItemId) -> Result<DeadLetter> {
    if let Some(dl) = queue.dead_get(id)? {
        return Ok(dl);
    }
    let hint = if queue.get(id)?.is_some() {
        " (it is pending: `spool show` shows it)"
    } else {
        ""
    };
    Err(Error::InvalidInput(format!(
        "no dead letter with id {id}{hint}"
    )))
}

/// How [`export`] writes dead letters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ExportFormat {
    /// One item JSON object (with `dead_at`) per line.
    #[default]
    Ndjson,
    /// One JSON array of those objects.
    Json,
    /// CSV with a header row (see the module docs).
    Csv,
}

/// The CSV header row.
pub const CSV_HEADER: [&str; 8] = [
    "id",
    "key",
    "attempts",
    "enqueued_at",
    "dead_at",
    "last_error",
    "payload_encoding",
    "payload",
];

/// Options for [`export`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ExportOptions {
    /// The format.
    pub format: ExportFormat,
}

/// What [`export`] wrote.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ExportReport {
    /// Dead letters written.
    pub exported: u64,
    /// Where they went.
    pub destination: String,
}

/// Write every dead letter to `dest` in `opts.format`. A file destination
/// is replaced atomically, and only when every dead letter was written.
pub fn export(
    queue: &dyn Queue,
    opts: &ExportOptions,
    dest: Destination<'_>,
) -> Result<ExportReport> {
    let destination = dest.label();
    let exported = write_to(dest, |w| match opts.format {
        ExportFormat::Ndjson => {
            let mut n = 0;
            for dl in list(queue, &ListOptions::default()) {
                let dl = dl?;
                writeln!(w, "{}", ItemJson::dead_letter(&dl).to_line()).map_err(sink_error)?;
                n += 1;
            }
            Ok(n)
        }
        ExportFormat::Json => {
            let mut n = 0u64;
            w.write_all(b"[").map_err(sink_error)?;
            for dl in list(queue, &ListOptions::default()) {
                let dl = dl?;
                let sep: &[u8] = if n == 0 { b"\n" } else { b",\n" };
                w.write_all(sep).map_err(sink_error)?;
                w.write_all(ItemJson::dead_letter(&dl).to_line().as_bytes())
                    .map_err(sink_error)?;
                n += 1;
            }
            w.write_all(b"\n]\n").map_err(sink_error)?;
            Ok(n)
        }
        ExportFormat::Csv => {
            let mut csv = csv::WriterBuilder::new()
                .terminator(csv::Terminator::CRLF)
                .from_writer(w);
            let csv_err = |e: csv::Error| match e.into_kind() {
                csv::ErrorKind::Io(e) => sink_error(e),
                other => Error::Internal(format!("CSV: {other:?}")),
            };
            csv.write_record(CSV_HEADER).map_err(csv_err)?;
            let mut n = 0;
            for dl in list(queue, &ListOptions::default()) {
                let dl = dl?;
                csv.write_record(csv_row(&dl)).map_err(csv_err)?;
                n += 1;
            }
            csv.flush().map_err(sink_error)?;
            Ok(n)
        }
    })?;
    Ok(ExportReport {
        exported,
        destination,
    })
}

/// The CSV fields of one dead letter, as bytes (a UTF-8 payload is
/// written exactly).
pub fn csv_row(dl: &DeadLetter) -> [Vec<u8>; 8] {
    let it = &dl.item;
    let (encoding, payload) = match std::str::from_utf8(&it.payload) {
        Ok(_) => ("utf8", it.payload.clone()),
        Err(_) => (
            "base64",
            base64::engine::general_purpose::STANDARD
                .encode(&it.payload)
                .into_bytes(),
        ),
    };
    [
        it.id.to_string().into_bytes(),
        it.key.clone().into_bytes(),
        it.attempts.to_string().into_bytes(),
        it.enqueued_at
            .map(|t| t.to_rfc3339())
            .unwrap_or_default()
            .into_bytes(),
        dl.dead_at.to_rfc3339().into_bytes(),
        it.last_error.clone().unwrap_or_default().into_bytes(),
        encoding.as_bytes().to_vec(),
        payload,
    ]
}

/// Which dead letters [`requeue`] and [`purge`] act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selection {
    /// These ids (distinct; see [`super::ids::resolve`]).
    Ids(Vec<ItemId>),
    /// Every dead letter there is when the call starts.
    All,
}

fn selected(queue: &dyn Queue, sel: &Selection) -> Result<(Vec<ItemId>, bool)> {
    match sel {
        Selection::Ids(ids) => Ok((ids.clone(), false)),
        Selection::All => {
            let mut ids = Vec::new();
            for dl in list(queue, &ListOptions::default()) {
                ids.push(dl?.item.id);
            }
            Ok((ids, true))
        }
    }
}

/// With `All`, an id that left the set between listing and acting was
/// taken by someone else; it is not the caller's mistake.
fn finish(ids: &[ItemId], flags: &[bool], all: bool) -> Result<IdsReport> {
    let mut r = IdsReport::from_flags(ids, flags)?;
    if all {
        r.unknown.clear();
    }
    Ok(r)
}

/// Move the selected dead letters back to pending in one atomic
/// [`Queue::requeue`] call: attempts reset, next retry and hold cleared,
/// keys and ids kept. Fails, changing nothing, with
/// [`Error::QueueFull`] when they do not fit under the depth bound, or
/// [`Error::InvalidInput`] when a pending item already carries a
/// requeued key. Ids that are not dead letters are reported as unknown.
pub fn requeue(queue: &dyn Queue, sel: &Selection) -> Result<IdsReport> {
    let (ids, all) = selected(queue, sel)?;
    if ids.is_empty() {
        return Ok(IdsReport::default());
    }
    let flags = queue.requeue(&ids)?;
    finish(&ids, &flags, all)
}

/// Delete the selected dead letters for good, in one atomic
/// [`Queue::purge`] call. Ids that are not dead letters are reported as
/// unknown.
pub fn purge(queue: &dyn Queue, sel: &Selection) -> Result<IdsReport> {
    let (ids, all) = selected(queue, sel)?;
    if ids.is_empty() {
        return Ok(IdsReport::default());
    }
    let flags = queue.purge(&ids)?;
    finish(&ids, &flags, all)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{OpenOptions, Spool};

    fn spool_with_dead(n: u64) -> Spool {
        let s = Spool::memory(&OpenOptions::default());
        for i in 0..n {
            let id = s.enqueue(format!("p{i}").as_bytes(), "").unwrap().id;
            s.dead_letter(id, "boom").unwrap();
        }
        s
    }

    #[test]
    fn list_pages_through_everything() {
        let s = spool_with_dead(PAGE_SIZE as u64 + 3);
        assert_eq!(list(&*s, &ListOptions::default()).count(), PAGE_SIZE + 3);
        assert_eq!(list(&*s, &ListOptions { limit: Some(2) }).count(), 2);
    }

    #[test]
    fn export_formats() {
        let s = spool_with_dead(2);
        let mut out = Vec::new();
        let r = export(
            &*s,
            &ExportOptions {
                format: ExportFormat::Json,
            },
            Destination::Writer {
                writer: &mut out,
                label: "buf",
            },
        )
        .unwrap();
        assert_eq!(r.exported, 2);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v.as_array().unwrap().len(), 2);
        assert_eq!(v[1]["last_error"], "boom");
        let mut out = Vec::new();
        export(
            &*s,
            &ExportOptions {
                format: ExportFormat::Csv,
            },
            Destination::Writer {
                writer: &mut out,
                label: "buf",
            },
        )
        .unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with(
            "id,key,attempts,enqueued_at,dead_at,last_error,payload_encoding,payload\r\n1,,0,"
        ));
    }

    #[test]
    fn requeue_all_and_purge_unknown() {
        let s = spool_with_dead(3);
        let r = purge(&*s, &Selection::Ids(vec![1, 7])).unwrap();
        assert_eq!((r.changed, r.unknown), (vec![1], vec![7]));
        let r = requeue(&*s, &Selection::All).unwrap();
        assert_eq!(r.changed, vec![2, 3]);
        assert_eq!(s.size().unwrap(), 2);
        assert_eq!(s.dead_count().unwrap(), 0);
        assert_eq!(requeue(&*s, &Selection::All).unwrap(), IdsReport::default());
        assert!(show(&*s, 2).is_err());
    }
}
