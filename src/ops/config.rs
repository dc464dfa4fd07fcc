//! `config`: the settings a spool remembers, in one place.
//!
//! Every setting is one entry of a table: its name as the command line
//! writes it, what it means, how to read it from a [`Queue`], and — when
//! it can be set — how to parse and store a new value. `spool config`
//! lists the table, `spool config KEY` reads one entry, `spool config KEY
//! VALUE` sets it; `init` and `enqueue` options that set the same things
//! go through the same queue methods. A new setting (`on-full`, `retain`)
//! is one more entry.
//!
//! The spool's uuid is a setting that is read but never set to a chosen
//! value: [`regenerate_uuid`] gives a copied spool an identity of its own.

use crate::backend::Spool;
use crate::error::{Error, Result};
use crate::queue::{Queue, PAGE_SIZE};
use crate::replay::ReplayLock;
use std::fmt;
use std::time::Duration;

/// A setting's value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// A count, or none (no bound).
    Count(Option<u64>),
    /// Text.
    Text(String),
    /// Not assigned yet: the spool's uuid before the first write (see
    /// [`assigned_uuid`]).
    Unassigned,
}

impl Value {
    /// The value in JSON: a number or `null`, or a string.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Value::Count(Some(n)) => serde_json::json!(n),
            Value::Count(None) => serde_json::Value::Null,
            Value::Text(t) => serde_json::json!(t),
            Value::Unassigned => serde_json::Value::Null,
        }
    }
}

impl fmt::Display for Value {
    /// As the command line writes it: `10000`, `none`, the text; an
    /// unassigned value says so and when it comes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Count(Some(n)) => write!(f, "{n}"),
            Value::Count(None) => f.write_str("none"),
            Value::Text(t) => f.write_str(t),
            Value::Unassigned => {
                f.write_str("not assigned yet (the first write to the spool assigns one)")
            }
        }
    }
}

/// One setting and its current value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Setting {
    /// The key, as `spool config KEY` writes it.
    pub key: &'static str,
    /// The current value.
    pub value: Value,
    /// What it means, one line.
    pub about: &'static str,
    /// Whether `spool config KEY VALUE` can set it.
    pub settable: bool,
}

impl Setting {
    /// The key as JSON reports name it: snake_case (`max_depth`,
    /// `on_full`), as every JSON report of `spool` does, while the command
    /// line keeps its kebab-case key (`max-depth`).
    pub fn json_key(&self) -> String {
        self.key.replace('-', "_")
    }
}

/// `settings` as one JSON object, `{"max_depth": N|null, "on_full":
/// "…", …}`: each [`Setting::json_key`] with its value.
pub fn to_json(settings: &[Setting]) -> serde_json::Value {
    serde_json::Value::Object(
        settings
            .iter()
            .map(|s| (s.json_key(), s.value.to_json()))
            .collect(),
    )
}

/// Reads a setting.
type Getter = fn(&dyn Queue) -> Result<Value>;
/// Parses a value as the command line writes it and stores it.
type Setter = fn(&dyn Queue, &str) -> Result<()>;

/// A row of the settings table.
struct Key {
    name: &'static str,
    about: &'static str,
    get: Getter,
    /// Parse `value` and store it; `None` for a setting that cannot be
    /// set, with the reason in `read_only`.
    set: Option<Setter>,
    read_only: &'static str,
}

const KEYS: &[Key] = &[
    Key {
        name: "max-depth",
        about: "the most pending items the spool accepts (none: no bound)",
        get: get_max_depth,
        set: Some(set_max_depth),
        read_only: "",
    },
    Key {
        name: "on-full",
        about: "what an enqueue does at max-depth: reject (exit 75) or drop-oldest \
                (evict the oldest pending item that is not held nor in flight to the dead letters)",
        get: get_on_full,
        set: Some(set_on_full),
        read_only: "",
    },
    Key {
        name: "retain",
        about: "how long delivered items are kept (read-only, their keys still dedup): \
                off, or a window such as 7d, 12h",
        get: get_retain,
        set: Some(set_retain),
        read_only: "",
    },
    Key {
        name: "uuid",
        about:
            "the spool's identity: the prefix of its stable idempotency keys, its push client id",
        get: get_uuid,
        set: None,
        read_only: "the uuid is not set to a chosen value; `spool config uuid --regenerate` \
                    gives the spool a new one",
    },
];

fn get_max_depth(q: &dyn Queue) -> Result<Value> {
    Ok(Value::Count(q.max_depth()?))
}

fn set_max_depth(q: &dyn Queue, value: &str) -> Result<()> {
    let v = value.trim();
    let bound = if v.eq_ignore_ascii_case("none") {
        None
    } else {
        Some(crate::units::parse_whole(v, 0, None, 1000).map_err(|why| {
            Error::Unsupported(format!("invalid max-depth {value:?}: {why}, or none"))
        })?)
    };
    q.set_max_depth(bound)
}

fn get_on_full(q: &dyn Queue) -> Result<Value> {
    Ok(Value::Text(q.on_full()?.name().to_string()))
}

fn set_on_full(q: &dyn Queue, value: &str) -> Result<()> {
    let policy = crate::item::OnFull::parse(value.trim()).ok_or_else(|| {
        Error::Unsupported(format!(
            "invalid on-full {value:?}: give reject or drop-oldest"
        ))
    })?;
    q.set_on_full(policy)
}

fn get_retain(q: &dyn Queue) -> Result<Value> {
    Ok(Value::Text(retain_name(q.retain()?)))
}

/// The retention window as `spool config` shows it: `off`, `7d`, `12h`.
/// Exact to the second, so that the shown value parses back to the
/// stored one.
pub fn retain_name(window: Option<Duration>) -> String {
    let Some(w) = window else {
        return "off".into();
    };
    let s = w.as_secs();
    let parts = [
        (s / 86_400, "d"),
        ((s / 3600) % 24, "h"),
        ((s / 60) % 60, "m"),
        (s % 60, "s"),
    ];
    let text: String = parts
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, u)| format!("{n}{u}"))
        .collect();
    if text.is_empty() {
        "0s".into()
    } else {
        text
    }
}

fn set_retain(q: &dyn Queue, value: &str) -> Result<()> {
    let window = crate::item::parse_retain(value).map_err(Error::Unsupported)?;
    q.set_retain(window)
}

fn get_uuid(q: &dyn Queue) -> Result<Value> {
    Ok(assigned_uuid(q)?.map_or(Value::Unassigned, Value::Text))
}

/// The spool's uuid, or `None` while it has none: a spool that `spool`
/// never wrote to (an empty file, a reference database), opened
/// read-only. The first write assigns one; reading never does.
pub fn assigned_uuid(queue: &dyn Queue) -> Result<Option<String>> {
    match queue.uuid() {
        Ok(u) => Ok(Some(u)),
        // What a backend answers for a spool without a uuid (a read-only
        // handle can assign none).
        Err(Error::Unsupported(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The keys, in the order `spool config` lists them.
pub fn keys() -> impl Iterator<Item = &'static str> {
    KEYS.iter().map(|k| k.name)
}

fn key(name: &str) -> Result<&'static Key> {
    KEYS.iter().find(|k| k.name == name).ok_or_else(|| {
        Error::Unsupported(format!(
            "unknown setting {name:?} (the settings are {})",
            keys().collect::<Vec<_>>().join(", ")
        ))
    })
}

fn setting(queue: &dyn Queue, k: &'static Key) -> Result<Setting> {
    Ok(Setting {
        key: k.name,
        value: (k.get)(queue)?,
        about: k.about,
        settable: k.set.is_some(),
    })
}

/// Every setting with its value.
pub fn list(queue: &dyn Queue) -> Result<Vec<Setting>> {
    KEYS.iter().map(|k| setting(queue, k)).collect()
}

/// One setting. An unknown key is [`Error::Unsupported`] (a usage
/// error) naming the known ones.
pub fn get(queue: &dyn Queue, name: &str) -> Result<Setting> {
    setting(queue, key(name)?)
}

/// Set `name` to `value` (as the command line writes it) durably, and
/// read it back. An unknown key, a value that does not parse, or a key
/// that cannot be set is [`Error::Unsupported`], and nothing changes.
pub fn set(queue: &dyn Queue, name: &str, value: &str) -> Result<Setting> {
    let k = key(name)?;
    let Some(store) = k.set else {
        return Err(Error::Unsupported(format!(
            "{} cannot be set: {}",
            k.name, k.read_only
        )));
    };
    store(queue, value)?;
    setting(queue, k)
}

/// What [`regenerate_uuid`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Regenerated {
    /// The uuid before.
    pub old: String,
    /// The new uuid.
    pub new: String,
    /// Items that were in flight to a push receiver and now carry numbers
    /// 1, 2, … of the new client.
    pub renumbered: u64,
}

/// Give a spool a new uuid, for a spool copied from another one (a cloned
/// disk image, a restored backup) that must not push as the same client
/// ([`Queue::regenerate_uuid`]): its in-flight items are renumbered from
/// 1 and its watermark starts again at 0. Holds the replay lock (waiting
/// up to `wait`), so no push of the spool is running meanwhile. Items
/// without a key get new stable idempotency keys (`<uuid>:<id>`) too.
pub fn regenerate_uuid(spool: &Spool, wait: Duration) -> Result<Regenerated> {
    let _lock = match spool.path() {
        Some(p) => Some(ReplayLock::acquire(p, wait)?),
        None => None,
    };
    // PostgreSQL: the advisory lock a push replay holds.
    let leasing = spool.leasing();
    if let Some(l) = leasing {
        l.lock_exclusive(wait)?;
    }
    let result = regenerate_locked(spool);
    if let Some(l) = leasing {
        let _ = l.unlock_exclusive();
    }
    result
}

fn regenerate_locked(spool: &Spool) -> Result<Regenerated> {
    let old = spool.uuid()?;
    let mut renumbered = 0u64;
    let mut after = 0;
    loop {
        let page = spool.push_in_flight(after, PAGE_SIZE)?;
        renumbered += page.len() as u64;
        match page.last() {
            Some(last) if page.len() == PAGE_SIZE => after = last.push_seq.unwrap_or(u64::MAX),
            _ => break,
        }
    }
    let new = spool.regenerate_uuid()?;
    Ok(Regenerated {
        old,
        new,
        renumbered,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::OpenOptions;

    #[test]
    fn list_get_set() {
        let s = Spool::memory(&OpenOptions::default());
        let all = list(&*s).unwrap();
        let names: Vec<&str> = all.iter().map(|s| s.key).collect();
        assert_eq!(names, ["max-depth", "on-full", "retain", "uuid"]);
        assert_eq!(all[0].value, Value::Count(None));
        assert_eq!(all[0].value.to_string(), "none");
        assert_eq!(
            get(&*s, "uuid").unwrap().value,
            Value::Text(s.uuid().unwrap())
        );
        let v = set(&*s, "max-depth", "10").unwrap();
        assert_eq!(v.value, Value::Count(Some(10)));
        assert_eq!(s.max_depth().unwrap(), Some(10));
        assert_eq!(
            set(&*s, "max-depth", "NONE").unwrap().value,
            Value::Count(None)
        );
        for (k, v) in [("max-depth", "ten"), ("uuid", "x"), ("colour", "1")] {
            let e = set(&*s, k, v).unwrap_err();
            assert_eq!(e.kind(), crate::ErrorKind::Usage, "{k}: {e}");
        }
        assert!(get(&*s, "colour")
            .unwrap_err()
            .to_string()
            .contains("max-depth, on-full, retain, uuid"));
        assert_eq!(s.max_depth().unwrap(), None, "failed sets change nothing");
        assert_eq!(get(&*s, "retain").unwrap().value.to_string(), "off");
        assert_eq!(
            set(&*s, "retain", "90m").unwrap().value.to_string(),
            "1h30m"
        );
        assert_eq!(s.retain().unwrap(), Some(Duration::from_secs(5400)));
        assert_eq!(
            set(&*s, "retain", "500ms").unwrap_err().kind(),
            crate::ErrorKind::Usage
        );
        assert_eq!(set(&*s, "retain", "0").unwrap().value.to_string(), "off");
    }

    #[test]
    fn regenerating_counts_the_renumbered_items() {
        let s = Spool::memory(&OpenOptions::default());
        let a = s.enqueue(b"a", "").unwrap().id;
        let b = s.enqueue(b"b", "").unwrap().id;
        s.enqueue(b"c", "").unwrap();
        s.push_assign(&[a, b]).unwrap();
        s.push_ack(1, &[]).unwrap();
        let r = regenerate_uuid(&s, Duration::ZERO).unwrap();
        assert_ne!(r.old, r.new);
        assert_eq!(r.renumbered, 1);
        assert_eq!(s.uuid().unwrap(), r.new);
        assert_eq!(s.get(b).unwrap().unwrap().push_seq, Some(1));
    }
}
