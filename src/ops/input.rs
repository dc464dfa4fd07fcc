//! Turning enqueue input into [`NewItem`]s.
//!
//! A payload comes from a command-line argument (its bytes, exactly), a
//! file or a reader (stdin), and is taken whole ([`Format::Single`]), one
//! item per line ([`Format::Lines`]) or one item per JSON object
//! ([`Format::Ndjson`]). All input is read and checked before anything is
//! enqueued, so a malformed line anywhere means nothing is stored; errors
//! name the line (1-based). A batch is read line by line into a spill
//! file ([`Batch`]), so memory stays bounded however large the input.
//!
//! NDJSON input objects have the fields `payload` (a string) or
//! `payload_base64` (standard base64, for bytes), exactly one of the two,
//! and an optional `key` (a string; null or `""` for none). Any other
//! field is an error, so a typo is never silently dropped.

use crate::error::{Error, Result};
use crate::item::NewItem;
use base64::Engine as _;
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::PathBuf;

/// The default bound on one payload: 16 MiB.
pub const DEFAULT_MAX_PAYLOAD: u64 = 16 << 20;

/// Where the input bytes come from.
pub enum Source<'a> {
    /// The bytes of a command-line argument.
    Bytes(Vec<u8>),
    /// A file, read whole.
    File(PathBuf),
    /// A reader such as stdin; `label` names it in errors ("stdin").
    Reader {
        /// The reader.
        reader: &'a mut dyn Read,
        /// What to call it in messages.
        label: String,
    },
}

impl Source<'_> {
    fn label(&self) -> String {
        match self {
            Source::Bytes(_) => "the payload argument".into(),
            Source::File(p) => p.display().to_string(),
            Source::Reader { label, .. } => label.clone(),
        }
    }
}

/// How the input bytes become items.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Format {
    /// The whole input is one payload (an empty payload is valid).
    #[default]
    Single,
    /// One payload per line, without its `\n` or `\r\n`; empty lines are
    /// skipped.
    Lines,
    /// One JSON object per line (see the module docs); blank lines are
    /// skipped.
    Ndjson,
}

/// Which idempotency key each item gets.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum KeyPolicy {
    /// No key (NDJSON objects may still carry their own).
    #[default]
    None,
    /// This key, for a single payload only.
    Fixed(String),
    /// The content hash of each payload, `sha256:<hex>` (NDJSON objects
    /// that carry a key keep theirs).
    FromPayload,
}

/// Options for [`read_items`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputOptions {
    /// Whole, lines or NDJSON.
    pub format: Format,
    /// Which key each item gets.
    pub key: KeyPolicy,
    /// The largest payload accepted, in bytes.
    pub max_payload: u64,
    /// The ordering group of every item (`--group`); an NDJSON line's own
    /// `group` wins.
    pub group: Option<String>,
    /// The coalesce key of every item (`--coalesce-key`); an NDJSON line's
    /// own `coalesce_key` wins.
    pub coalesce_key: Option<String>,
}

impl Default for InputOptions {
    fn default() -> Self {
        InputOptions {
            format: Format::Single,
            key: KeyPolicy::None,
            max_payload: DEFAULT_MAX_PAYLOAD,
            group: None,
            coalesce_key: None,
        }
    }
}

impl InputOptions {
    /// `item` with the options' group and coalesce key where it has none.
    /// An empty group or coalesce key is none, as an empty key is.
    fn with_policies(&self, mut item: NewItem) -> NewItem {
        if item.group.is_none() {
            item.group = self.group.clone();
        }
        if item.coalesce_key.is_none() {
            item.coalesce_key = self.coalesce_key.clone();
        }
        item.group = item.group.filter(|g| !g.is_empty());
        item.coalesce_key = item.coalesce_key.filter(|c| !c.is_empty());
        item
    }
}

/// The key `--key-from-payload` gives a payload: `sha256:` and the
/// lowercase hex SHA-256 of its bytes.
pub fn payload_key(payload: &[u8]) -> String {
    let digest = Sha256::digest(payload);
    let mut s = String::with_capacity(7 + 64);
    s.push_str("sha256:");
    for b in digest {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// Read `source` and turn it into items as `opts` says. Nothing is
/// returned unless every item is valid. The items are held in memory; a
/// batch of any size is better read with [`Batch::read`].
pub fn read_items(source: Source<'_>, opts: &InputOptions) -> Result<Vec<NewItem>> {
    check_policy(opts)?;
    if opts.format == Format::Single {
        let label = source.label();
        // A single payload is read with a bound, so a huge file or an
        // endless pipe is refused without being read whole.
        let bytes = read_source(source, Some(opts.max_payload))?;
        check_size(&bytes, opts.max_payload, || label.clone())?;
        let key = check_key(key_for(&opts.key, &bytes, None), || label.clone())?;
        return Ok(vec![opts.with_policies(NewItem::new(bytes, key))]);
    }
    let mut items = Vec::new();
    for_each_item(source, opts, &mut |item| {
        items.push(item);
        Ok(())
    })?;
    Ok(items)
}

fn check_policy(opts: &InputOptions) -> Result<()> {
    if matches!(opts.key, KeyPolicy::Fixed(_)) && opts.format != Format::Single {
        return Err(Error::Unsupported(
            "a fixed key applies to a single payload; a batch would collapse into one item \
             (use --key-from-payload, or a \"key\" field in --ndjson input)"
                .into(),
        ));
    }
    Ok(())
}

/// The longest input line a batch reads for a payload bound of `max`: a
/// `--lines` line is the payload itself; an NDJSON line may escape every
/// byte (`\u0000` is six) or carry it in base64.
fn line_limit(format: Format, max: u64) -> u64 {
    match format {
        Format::Ndjson => max.saturating_mul(6).saturating_add(64 << 10),
        _ => max.saturating_add(2),
    }
}

/// Read a batch (`--lines` or `--ndjson`) from `source` line by line,
/// handing each checked item to `f`. Memory holds one line at a time.
fn for_each_item(
    source: Source<'_>,
    opts: &InputOptions,
    f: &mut dyn FnMut(NewItem) -> Result<()>,
) -> Result<()> {
    let label = source.label();
    let limit = line_limit(opts.format, opts.max_payload);
    let mut each_line = |n: u64, line: &[u8], too_long: bool| -> Result<()> {
        let at = || format!("{label} line {n}");
        if too_long {
            return Err(Error::InvalidInput(format!(
                "{}: payload is larger than the limit of {} bytes",
                at(),
                opts.max_payload
            )));
        }
        match opts.format {
            Format::Lines => {
                if line.is_empty() {
                    return Ok(());
                }
                check_size(line, opts.max_payload, at)?;
                let key = key_for(&opts.key, line, None);
                f(opts.with_policies(NewItem::new(line, key)))
            }
            _ => {
                if line.iter().all(|b| b.is_ascii_whitespace()) {
                    return Ok(());
                }
                let item = parse_ndjson_line(line)
                    .map_err(|e| Error::InvalidInput(format!("{}: {e}", at())))?;
                check_size(&item.payload, opts.max_payload, at)?;
                let key = check_key(key_for(&opts.key, &item.payload, item.key), at)?;
                let mut new = NewItem::new(item.payload, key);
                new.group = item.group;
                new.coalesce_key = item.coalesce_key;
                f(opts.with_policies(new))
            }
        }
    };
    match source {
        Source::Bytes(bytes) => {
            let mut r: &[u8] = &bytes;
            read_lines(&mut r, limit, &mut each_line)
                .map_err(|e| e.into_error(std::path::Path::new(&label), "read payload from"))
        }
        Source::File(path) => {
            let f =
                std::fs::File::open(&path).map_err(|e| Error::io(&path, "open payload file", e))?;
            if f.metadata().map(|m| m.is_dir()).unwrap_or(false) {
                return Err(Error::InvalidInput(format!(
                    "payload file {} is a directory",
                    path.display()
                )));
            }
            let mut r = std::io::BufReader::with_capacity(1 << 16, f);
            read_lines(&mut r, limit, &mut each_line)
                .map_err(|e| e.into_error(&path, "read payload file"))
        }
        Source::Reader { reader, label } => {
            let mut r = std::io::BufReader::with_capacity(1 << 16, reader);
            read_lines(&mut r, limit, &mut each_line)
                .map_err(|e| e.into_error(std::path::Path::new(&label), "read payload from"))
        }
    }
}

/// What [`read_lines`] calls for each line: its number, its content and
/// whether it was cut at the limit.
type LineHandler<'a> = dyn FnMut(u64, &[u8], bool) -> Result<()> + 'a;

/// Why reading lines stopped: the reader failed, or the caller did.
enum LinesError {
    Read(std::io::Error),
    Item(Error),
}

impl LinesError {
    fn into_error(self, path: &std::path::Path, action: &'static str) -> Error {
        match self {
            LinesError::Read(e) => Error::io(path, action, e),
            LinesError::Item(e) => e,
        }
    }
}

/// Call `f(number, line, too_long)` for every line of `r` (1-based,
/// without `\n` or `\r\n`). A line longer than `limit` is not kept:
/// `f` gets what was read of it with `too_long` set, and the rest is
/// skipped, so one huge line never fills memory.
fn read_lines(
    r: &mut dyn std::io::BufRead,
    limit: u64,
    f: &mut LineHandler<'_>,
) -> std::result::Result<(), LinesError> {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let mut line = Vec::new();
    let mut n = 0u64;
    loop {
        line.clear();
        let mut too_long = false;
        let mut ended = false;
        loop {
            let buf = match r.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(LinesError::Read(e)),
            };
            if buf.is_empty() {
                ended = true;
                break;
            }
            let (take, newline) = match memchr::memchr(b'\n', buf) {
                Some(i) => (i + 1, true),
                None => (buf.len(), false),
            };
            if !too_long {
                let room = limit.saturating_sub(line.len());
                if take > room {
                    too_long = true;
                    line.extend_from_slice(&buf[..room.min(take)]);
                } else {
                    line.extend_from_slice(&buf[..take]);
                }
            }
            r.consume(take);
            if newline {
                break;
            }
        }
        if ended && line.is_empty() && !too_long {
            return Ok(());
        }
        n += 1;
        let mut content: &[u8] = &line;
        if let Some(c) = content.strip_suffix(b"\n") {
            content = c;
        }
        if let Some(c) = content.strip_suffix(b"\r") {
            content = c;
        }
        f(n, content, too_long).map_err(LinesError::Item)?;
        if ended {
            return Ok(());
        }
    }
}

/// A batch (`--lines` or `--ndjson`), read and checked in full before any
/// of it is enqueued, and kept in a spill file instead of in memory: any
/// size of input fits, a malformed line anywhere is found before the
/// spool is touched, and the batch can be handed to the queue more than
/// once (a wait for room on a full spool retries it).
///
/// The spill file is created in a directory the caller chooses (the
/// spool's own, so that it is on the same file system and never in a
/// RAM-backed `/tmp`), with mode 0600, and unlinked at once: it
/// disappears when the batch is dropped or the process dies.
#[derive(Debug)]
pub struct Batch {
    file: std::fs::File,
    count: u64,
    end: u64,
}

impl Batch {
    /// Read `source` as `opts` says (a batch format) into a spill file in
    /// `dir`.
    pub fn read(source: Source<'_>, opts: &InputOptions, dir: &std::path::Path) -> Result<Batch> {
        check_policy(opts)?;
        if opts.format == Format::Single {
            return Err(Error::Internal("a single payload is not a batch".into()));
        }
        let file = spill_file(dir)?;
        let mut w = std::io::BufWriter::with_capacity(1 << 16, &file);
        let mut count = 0u64;
        let mut end = 0u64;
        let spill_err = |e| Error::io(dir, "write the batch's spill file in", e);
        for_each_item(source, opts, &mut |item| {
            use std::io::Write;
            // A record: four little-endian u64 lengths (key, payload,
            // group + 1 and coalesce key + 1, 0 for none), then the bytes.
            let key = item.key.as_bytes();
            let group = item.group.as_deref().map(str::as_bytes);
            let ck = item.coalesce_key.as_deref().map(str::as_bytes);
            let opt_len = |v: Option<&[u8]>| v.map_or(0, |b| b.len() as u64 + 1);
            let header = [
                (key.len() as u64).to_le_bytes(),
                (item.payload.len() as u64).to_le_bytes(),
                opt_len(group).to_le_bytes(),
                opt_len(ck).to_le_bytes(),
            ];
            w.write_all(header.as_flattened())
                .and_then(|()| w.write_all(key))
                .and_then(|()| w.write_all(&item.payload))
                .and_then(|()| w.write_all(group.unwrap_or_default()))
                .and_then(|()| w.write_all(ck.unwrap_or_default()))
                .map_err(spill_err)?;
            count += 1;
            end += 32
                + key.len() as u64
                + item.payload.len() as u64
                + group.map_or(0, |g| g.len() as u64)
                + ck.map_or(0, |c| c.len() as u64);
            Ok(())
        })?;
        use std::io::Write;
        w.flush().map_err(spill_err)?;
        drop(w);
        Ok(Batch { file, count, end })
    }

    /// Items in the batch.
    pub fn len(&self) -> u64 {
        self.count
    }

    /// True when the input held no item.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The items, in input order, read back from the spill file (each
    /// call starts from the first).
    pub fn items(&self) -> BatchItems<'_> {
        BatchItems {
            reader: std::io::BufReader::with_capacity(
                1 << 16,
                SpillReader {
                    file: &self.file,
                    pos: 0,
                    end: self.end,
                },
            ),
            left: self.count,
        }
    }
}

/// A file in `dir` that only this process can reach: created 0600 under
/// a unique name and unlinked at once.
pub(crate) fn spill_file(dir: &std::path::Path) -> Result<std::fs::File> {
    for _ in 0..16 {
        let name = dir.join(format!(
            ".spool-batch-{}-{:016x}.tmp",
            std::process::id(),
            fastrand::u64(..)
        ));
        match crate::private_file::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&name)
        {
            Ok(f) => {
                std::fs::remove_file(&name)
                    .map_err(|e| Error::io(&name, "remove the batch's spill file", e))?;
                return Ok(f);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(Error::io(dir, "create the batch's spill file in", e)),
        }
    }
    Err(Error::Internal(format!(
        "no free name for a spill file in {}",
        dir.display()
    )))
}

/// Reads the spill file by offset (the file's own cursor is never moved,
/// so that every [`Batch::items`] starts afresh).
pub(crate) struct SpillReader<'f> {
    file: &'f std::fs::File,
    pos: u64,
    end: u64,
}

/// A reader of all of `file` (to its current end) by offset, from its
/// first byte, leaving the file's own cursor alone.
pub(crate) fn read_from_start(file: &std::fs::File) -> SpillReader<'_> {
    let end = file.metadata().map(|m| m.len()).unwrap_or(0);
    SpillReader { file, pos: 0, end }
}

impl Read for SpillReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::os::unix::fs::FileExt;
        let left = self.end.saturating_sub(self.pos);
        let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        if want == 0 {
            return Ok(0);
        }
        let n = self.file.read_at(&mut buf[..want], self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// The items of a [`Batch`].
pub struct BatchItems<'f> {
    reader: std::io::BufReader<SpillReader<'f>>,
    left: u64,
}

impl Iterator for BatchItems<'_> {
    type Item = Result<NewItem>;

    fn next(&mut self) -> Option<Result<NewItem>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let mut read = || -> std::io::Result<NewItem> {
            let mut header = [0u8; 32];
            self.reader.read_exact(&mut header)?;
            let bad = || std::io::Error::from(std::io::ErrorKind::InvalidData);
            let len = |i: usize| -> std::io::Result<usize> {
                let mut a = [0u8; 8];
                a.copy_from_slice(&header[i * 8..i * 8 + 8]);
                usize::try_from(u64::from_le_bytes(a)).map_err(|_| bad())
            };
            let mut bytes = |n: usize| -> std::io::Result<Vec<u8>> {
                let mut v = vec![0; n];
                self.reader.read_exact(&mut v)?;
                Ok(v)
            };
            let key = bytes(len(0)?)?;
            let payload = bytes(len(1)?)?;
            let mut text = |n: usize| -> std::io::Result<Option<String>> {
                match n {
                    0 => Ok(None),
                    n => String::from_utf8(bytes(n - 1)?)
                        .map(Some)
                        .map_err(|_| bad()),
                }
            };
            let group = text(len(2)?)?;
            let coalesce_key = text(len(3)?)?;
            let key = String::from_utf8(key).map_err(|_| bad())?;
            let mut item = NewItem::new(payload, key);
            item.group = group;
            item.coalesce_key = coalesce_key;
            Ok(item)
        };
        Some(read().map_err(|e| Error::io("the batch's spill file", "read", e)))
    }
}

fn read_source(source: Source<'_>, limit: Option<u64>) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    // Read one byte past the limit to know whether it was exceeded.
    let cap = limit.map(|l| l.saturating_add(1));
    match source {
        Source::Bytes(b) => return Ok(b),
        Source::File(path) => {
            let f =
                std::fs::File::open(&path).map_err(|e| Error::io(&path, "open payload file", e))?;
            let is_dir = f.metadata().map(|m| m.is_dir()).unwrap_or(false);
            if is_dir {
                return Err(Error::InvalidInput(format!(
                    "payload file {} is a directory",
                    path.display()
                )));
            }
            read_limited(f, cap, &mut buf).map_err(|e| Error::io(&path, "read payload file", e))?;
        }
        Source::Reader { reader, label } => {
            read_limited(reader, cap, &mut buf)
                .map_err(|e| Error::io(std::path::Path::new(&label), "read payload from", e))?;
        }
    }
    Ok(buf)
}

fn read_limited(r: impl Read, cap: Option<u64>, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    match cap {
        Some(c) => r.take(c).read_to_end(buf),
        None => {
            let mut r = r;
            r.read_to_end(buf)
        }
    }
}

fn check_size(payload: &[u8], max: u64, at: impl FnOnce() -> String) -> Result<()> {
    if payload.len() as u64 > max {
        return Err(Error::InvalidInput(format!(
            "{}: payload is larger than the limit of {max} bytes",
            at()
        )));
    }
    Ok(())
}

/// `key`, or an error naming where it came from when no key may be it
/// ([`crate::item::key_problem`]: a NUL byte).
fn check_key(key: String, at: impl FnOnce() -> String) -> Result<String> {
    match crate::item::key_problem(&key) {
        None => Ok(key),
        Some(problem) => Err(Error::InvalidInput(format!("{}: {problem}", at()))),
    }
}

fn key_for(policy: &KeyPolicy, payload: &[u8], own: Option<String>) -> String {
    match own {
        Some(k) if !k.is_empty() => k,
        _ => match policy {
            KeyPolicy::None => String::new(),
            KeyPolicy::Fixed(k) => k.clone(),
            KeyPolicy::FromPayload => payload_key(payload),
        },
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct NdjsonLine {
    #[serde(default)]
    payload: Option<String>,
    #[serde(default)]
    payload_base64: Option<String>,
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    group: Option<String>,
    #[serde(default)]
    coalesce_key: Option<String>,
}

struct ParsedLine {
    payload: Vec<u8>,
    key: Option<String>,
    group: Option<String>,
    coalesce_key: Option<String>,
}

fn parse_ndjson_line(line: &[u8]) -> std::result::Result<ParsedLine, String> {
    let obj: NdjsonLine = serde_json::from_slice(line)
        .map_err(|e| super::json::line_error(&e, r#"{"payload": "…", "key": "…"}"#))?;
    let payload = match (obj.payload, obj.payload_base64) {
        (Some(p), None) => p.into_bytes(),
        (None, Some(b)) => base64::engine::general_purpose::STANDARD
            .decode(b.as_bytes())
            .map_err(|e| format!("invalid payload_base64: {e}"))?,
        (Some(_), Some(_)) => {
            return Err("has both \"payload\" and \"payload_base64\"; give exactly one".into())
        }
        (None, None) => {
            return Err("has neither \"payload\" nor \"payload_base64\"".into());
        }
    };
    Ok(ParsedLine {
        payload,
        key: obj.key,
        group: obj.group,
        coalesce_key: obj.coalesce_key,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(bytes: &[u8], format: Format, key: KeyPolicy) -> Result<Vec<NewItem>> {
        let mut r = bytes;
        read_items(
            Source::Reader {
                reader: &mut r,
                label: "stdin".into(),
            },
            &InputOptions {
                format,
                key,
                max_payload: 10,
                ..InputOptions::default()
            },
        )
    }

    #[test]
    fn single_payload_is_exact() {
        let v = read(b"a\r\n\xff\0", Format::Single, KeyPolicy::None).unwrap();
        assert_eq!(v, vec![NewItem::new(b"a\r\n\xff\0".to_vec(), "")]);
        let v = read(b"", Format::Single, KeyPolicy::None).unwrap();
        assert_eq!(v, vec![NewItem::new(Vec::new(), "")]);
    }

    #[test]
    fn oversized_payload_is_refused() {
        let e = read(b"12345678901", Format::Single, KeyPolicy::None).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::Data);
        assert!(e.to_string().contains("limit of 10 bytes"), "{e}");
        let e = read(b"ok\n12345678901\n", Format::Lines, KeyPolicy::None).unwrap_err();
        assert!(e.to_string().starts_with("stdin line 2:"), "{e}");
    }

    #[test]
    fn lines_strip_endings_and_skip_empty() {
        let v = read(b"a\r\n\nb\n\r\nc", Format::Lines, KeyPolicy::None).unwrap();
        let p: Vec<_> = v.iter().map(|i| i.payload.clone()).collect();
        assert_eq!(p, vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
        assert!(read(b"", Format::Lines, KeyPolicy::None)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn ndjson_objects() {
        let v = read(
            b"{\"payload\":\"a\",\"key\":\"k\"}\n\n{\"payload_base64\":\"/w==\"}\n",
            Format::Ndjson,
            KeyPolicy::None,
        )
        .unwrap();
        assert_eq!(
            v,
            vec![
                NewItem::new(b"a".to_vec(), "k"),
                NewItem::new(vec![0xff], "")
            ]
        );
    }

    #[test]
    fn ndjson_errors_name_the_line() {
        for (input, want) in [
            (
                &b"{\"payload\":\"a\"}\n{\"payload\":\"b\",\"kee\":\"x\"}\n"[..],
                "stdin line 2: column",
            ),
            (b"{\"payload\":\"a\"}\nnot json\n", "stdin line 2:"),
            (b"{\"key\":\"a\"}\n", "stdin line 1: has neither"),
            (
                b"{\"payload\":\"a\",\"payload_base64\":\"YQ==\"}",
                "stdin line 1: has both",
            ),
            (
                b"{\"payload_base64\":\"%%\"}",
                "stdin line 1: invalid payload_base64",
            ),
            (b"[1]", "stdin line 1:"),
            (b"{\"payload\":\"a\"}\r\n\xff\n", "stdin line 2:"),
        ] {
            let e = read(input, Format::Ndjson, KeyPolicy::None).unwrap_err();
            assert_eq!(e.kind(), crate::ErrorKind::Data);
            assert!(
                e.to_string().starts_with(want),
                "{e} should start with {want}"
            );
        }
    }

    #[test]
    fn keys_from_payload() {
        assert_eq!(
            payload_key(b"abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let v = read(b"abc\n{}\n", Format::Lines, KeyPolicy::FromPayload).unwrap();
        assert_eq!(v[0].key, payload_key(b"abc"));
        let v = read(
            b"{\"payload\":\"abc\",\"key\":\"own\"}\n{\"payload\":\"abc\"}",
            Format::Ndjson,
            KeyPolicy::FromPayload,
        )
        .unwrap();
        assert_eq!(v[0].key, "own");
        assert_eq!(v[1].key, payload_key(b"abc"));
    }

    #[test]
    fn a_fixed_key_is_for_one_payload() {
        let e = read(b"a\nb\n", Format::Lines, KeyPolicy::Fixed("k".into())).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::Usage);
        let v = read(b"a", Format::Single, KeyPolicy::Fixed("k".into())).unwrap();
        assert_eq!(v[0].key, "k");
    }

    #[test]
    fn missing_file_is_not_found() {
        let e = read_items(
            Source::File("/nonexistent/payload".into()),
            &InputOptions::default(),
        )
        .unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::NotFound);
    }
}
