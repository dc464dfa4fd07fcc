//! Id lists for `done`, `hold` and `release`.
//!
//! Ids come as arguments, and `-` stands for "read ids from stdin, one per
//! line" (as `postsuper -d -`). A line that is not an id is an error that
//! names the line, and since every id is read before anything is changed,
//! nothing is changed. Blank lines and surrounding whitespace are ignored.
//! Repeated ids are processed once.

use crate::error::{Error, Result};
use crate::item::ItemId;
use std::collections::HashSet;
use std::io::BufRead;
use std::str::FromStr;

/// One id argument: an id, or `-` for ids from stdin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdArg {
    /// This id.
    Id(ItemId),
    /// Read ids from stdin.
    Stdin,
}

impl FromStr for IdArg {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<IdArg, String> {
        if s == "-" {
            return Ok(IdArg::Stdin);
        }
        parse_id(s)
            .ok_or_else(|| {
                format!(
                    "{s:?} is not an item id (a positive integer), nor - to read ids from stdin"
                )
            })
            .map(IdArg::Id)
    }
}

fn parse_id(s: &str) -> Option<ItemId> {
    let t = s.trim();
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    t.parse().ok()
}

/// Read ids, one per line, from `reader`; `label` names it in errors.
pub fn read_ids(reader: &mut dyn BufRead, label: &str) -> Result<Vec<ItemId>> {
    let mut ids = Vec::new();
    let mut line = Vec::new();
    let mut n = 0u64;
    loop {
        line.clear();
        let got = reader
            .read_until(b'\n', &mut line)
            .map_err(|e| Error::io(std::path::Path::new(label), "read ids from", e))?;
        if got == 0 {
            break;
        }
        n += 1;
        let text = std::str::from_utf8(&line).ok().map(str::trim);
        match text {
            Some("") => continue,
            Some(t) => match parse_id(t) {
                Some(id) => ids.push(id),
                None => {
                    return Err(Error::InvalidInput(format!(
                        "{label} line {n}: {} is not an item id",
                        super::preview::preview(t.as_bytes(), 40)
                    )))
                }
            },
            None => {
                return Err(Error::InvalidInput(format!(
                    "{label} line {n}: not an item id (not UTF-8 text)"
                )))
            }
        }
    }
    Ok(ids)
}

/// Expand `args` (reading stdin for `-`, at most once) into a list of
/// distinct ids, in the order given.
pub fn resolve(args: &[IdArg], stdin: &mut dyn BufRead) -> Result<Vec<ItemId>> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut read_stdin = false;
    for a in args {
        let ids = match a {
            IdArg::Id(id) => vec![*id],
            IdArg::Stdin if read_stdin => continue,
            IdArg::Stdin => {
                read_stdin = true;
                read_ids(stdin, "stdin")?
            }
        };
        for id in ids {
            if seen.insert(id) {
                out.push(id);
            }
        }
    }
    Ok(out)
}

/// What an operation on a list of ids did.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct IdsReport {
    /// The ids that were pending and were changed.
    pub changed: Vec<ItemId>,
    /// The ids that named no pending item (nothing happened to them).
    pub unknown: Vec<ItemId>,
}

impl IdsReport {
    /// Split `ids` by the per-id answers of a queue call.
    pub(crate) fn from_flags(ids: &[ItemId], flags: &[bool]) -> Result<IdsReport> {
        super::check_len("the queue", flags, ids.len())?;
        let mut r = IdsReport::default();
        for (id, ok) in ids.iter().zip(flags) {
            if *ok {
                r.changed.push(*id);
            } else {
                r.unknown.push(*id);
            }
        }
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_and_stdin() {
        let args: Vec<IdArg> = ["3", "-", "1", "-"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        let mut stdin: &[u8] = b"1\n 7 \r\n\n2\n";
        assert_eq!(resolve(&args, &mut stdin).unwrap(), vec![3, 1, 7, 2]);
    }

    #[test]
    fn bad_arguments_and_lines() {
        for bad in ["", "x", "-1", "1.5", "+3", "99999999999999999999999"] {
            assert!(bad.parse::<IdArg>().is_err(), "{bad:?}");
        }
        let mut stdin: &[u8] = b"1\nabc\n";
        let e = read_ids(&mut stdin, "stdin").unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::Data);
        assert_eq!(e.to_string(), "stdin line 2: abc is not an item id");
        let mut stdin: &[u8] = b"\xff\n";
        assert!(read_ids(&mut stdin, "stdin").is_err());
    }
}
