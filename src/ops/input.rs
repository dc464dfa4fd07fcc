//! Turning enqueue input into [`NewItem`]s.
//!
//! A payload comes from a command-line argument (its bytes, exactly), a
//! file or a reader (stdin), and is taken whole ([`Format::Single`]), one
//! item per line ([`Format::Lines`]) or one item per JSON object
//! ([`Format::Ndjson`]). All input is read and checked before anything is
//! enqueued, so a malformed line anywhere means nothing is stored; errors
//! name the line (1-based).
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
}

impl Default for InputOptions {
    fn default() -> Self {
        InputOptions {
            format: Format::Single,
            key: KeyPolicy::None,
            max_payload: DEFAULT_MAX_PAYLOAD,
        }
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
/// returned unless every item is valid.
pub fn read_items(source: Source<'_>, opts: &InputOptions) -> Result<Vec<NewItem>> {
    if matches!(opts.key, KeyPolicy::Fixed(_)) && opts.format != Format::Single {
        return Err(Error::Unsupported(
            "a fixed key applies to a single payload; a batch would collapse into one item \
             (use --key-from-payload, or a \"key\" field in --ndjson input)"
                .into(),
        ));
    }
    let label = source.label();
    // A single payload is read with a bound, so a huge file or an endless
    // pipe is refused without being read whole.
    let limit = match opts.format {
        Format::Single => Some(opts.max_payload),
        Format::Lines | Format::Ndjson => None,
    };
    let bytes = read_source(source, limit)?;
    match opts.format {
        Format::Single => {
            check_size(&bytes, opts.max_payload, || label.clone())?;
            let key = key_for(&opts.key, &bytes, None);
            Ok(vec![NewItem::new(bytes, key)])
        }
        Format::Lines => {
            let mut items = Vec::new();
            for (n, line) in lines(&bytes) {
                if line.is_empty() {
                    continue;
                }
                check_size(line, opts.max_payload, || format!("{label} line {n}"))?;
                let key = key_for(&opts.key, line, None);
                items.push(NewItem::new(line, key));
            }
            Ok(items)
        }
        Format::Ndjson => {
            let mut items = Vec::new();
            for (n, line) in lines(&bytes) {
                if line.iter().all(|b| b.is_ascii_whitespace()) {
                    continue;
                }
                let at = || format!("{label} line {n}");
                let item = parse_ndjson_line(line)
                    .map_err(|e| Error::InvalidInput(format!("{}: {e}", at())))?;
                check_size(&item.payload, opts.max_payload, at)?;
                let key = key_for(&opts.key, &item.payload, item.key);
                items.push(NewItem::new(item.payload, key));
            }
            Ok(items)
        }
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

/// Lines of `bytes` with 1-based numbers, each without `\n` or `\r\n`.
fn lines(bytes: &[u8]) -> impl Iterator<Item = (u64, &[u8])> {
    let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let empty = bytes.is_empty();
    body.split(|&b| b == b'\n')
        .filter(move |_| !empty)
        .enumerate()
        .map(|(i, l)| (i as u64 + 1, l.strip_suffix(b"\r").unwrap_or(l)))
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
}

struct ParsedLine {
    payload: Vec<u8>,
    key: Option<String>,
}

fn parse_ndjson_line(line: &[u8]) -> std::result::Result<ParsedLine, String> {
    let obj: NdjsonLine = serde_json::from_slice(line).map_err(|e| {
        let msg = e.to_string();
        // serde_json appends " at line 1 column N"; the line is ours.
        let msg = match msg.rsplit_once(" at line ") {
            Some((m, _)) => m.to_string(),
            None => msg,
        };
        if e.column() > 0 {
            format!("column {}: {msg}", e.column())
        } else {
            msg
        }
    })?;
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
