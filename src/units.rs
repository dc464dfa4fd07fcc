//! Durations, sizes and counts as people write them on a command line.
//!
//! Durations: `500ms`, `5s`, `2m`, `1h`, `1h30m`, `1d`; a bare number is
//! seconds (`30`, `0.5`). Sizes: `512`, `64KiB`, `16MiB`, `1GiB`, and the
//! decimal `kB`/`MB`/`GB`; a bare number is bytes. Counts (`--limit`,
//! `--max-depth`, item ids): whole numbers, `0`, `20`, `1000`.

use std::time::Duration;

/// How a duration is written, for error messages.
pub const DURATION_FORMS: &str =
    "a number and a unit (ms, s, m, h, d), e.g. 500ms, 5s, 2m, 1h, 1h30m, 7d; a bare number is seconds";

/// How a size is written, for error messages.
pub const SIZE_FORMS: &str =
    "a number of bytes, or a number and a unit (KiB, MiB, GiB, kB, MB, GB), e.g. 512, 64KiB, 16MiB";

fn bad_duration(s: &str, why: &str) -> String {
    format!("invalid duration {s:?}: {why}; write {DURATION_FORMS}")
}

/// Parse a duration (see the module docs). An error says what is wrong
/// and how a duration is written, with examples.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err(format!("empty duration; write {DURATION_FORMS}"));
    }
    if t.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        let secs: f64 = t.parse().map_err(|_| bad_duration(s, "not a number"))?;
        return Duration::try_from_secs_f64(secs).map_err(|_| bad_duration(s, "too large"));
    }
    humantime::parse_duration(t).map_err(|e| {
        use humantime::DurationError as E;
        let why = match e {
            E::NumberExpected(0) => "it does not start with a number".to_string(),
            E::NumberExpected(at) => match t.get(at..) {
                Some(rest) => format!("expected a number before {rest:?}"),
                None => "expected a number".to_string(),
            },
            E::InvalidCharacter(at) => match t.get(at..).and_then(|r| r.chars().next()) {
                Some(c) => format!("unexpected character {c:?}"),
                None => "unexpected character".to_string(),
            },
            E::UnknownUnit { unit, .. } if unit.is_empty() => "a number without a unit".to_string(),
            E::UnknownUnit { unit, .. } => format!("unknown unit {unit:?}"),
            E::NumberOverflow => "too large".to_string(),
            E::Empty => "empty".to_string(),
        };
        bad_duration(s, &why)
    })
}

fn bad_size(s: &str, why: &str) -> String {
    format!("invalid size {s:?}: {why}; write {SIZE_FORMS}")
}

/// Parse a size in bytes (see the module docs). An error says what is
/// wrong and how a size is written, with examples.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err(format!("empty size; write {SIZE_FORMS}"));
    }
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        return Err(bad_size(s, "it does not start with a number"));
    }
    let n: u64 = num.parse().map_err(|_| bad_size(s, "too large"))?;
    let mult: u64 = match unit.trim() {
        "" | "B" | "b" => 1,
        "KiB" | "K" | "k" => 1 << 10,
        "MiB" | "M" => 1 << 20,
        "GiB" | "G" => 1 << 30,
        "kB" | "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        other if other.starts_with('.') => {
            return Err(bad_size(
                s,
                "a whole number is needed (1536KiB, not 1.5MiB)",
            ))
        }
        other => return Err(bad_size(s, &format!("unknown unit {other:?}"))),
    };
    n.checked_mul(mult).ok_or_else(|| bad_size(s, "too large"))
}

/// How a whole number from `min` up to `max` (`None`: no bound of its
/// own) is written, for error messages: `a whole number such as 20`,
/// `a whole number of 1 or more, such as 1000`, `a whole number from 1 to
/// 256, such as 8`.
pub fn whole_forms(min: u64, max: Option<u64>, example: u64) -> String {
    match (min, max) {
        (0, None) => format!("a whole number such as {example}"),
        (min, None) => format!("a whole number of {min} or more, such as {example}"),
        (0, Some(max)) => format!("a whole number up to {max}, such as {example}"),
        (min, Some(max)) => format!("a whole number from {min} to {max}, such as {example}"),
    }
}

/// Parse a whole number from `min` up to `max` (`None`: any that fits in
/// a `u64`). An error says what was expected, with `example`
/// ([`whole_forms`]), and why when the number itself is out of range:
/// `too small; expected a whole number of 1 or more, such as 1000`.
pub fn parse_whole(s: &str, min: u64, max: Option<u64>, example: u64) -> Result<u64, String> {
    let expected = || format!("expected {}", whole_forms(min, max, example));
    let t = s.trim();
    match t.parse::<u64>() {
        Ok(n) if n < min => Err(format!("too small; {}", expected())),
        Ok(n) if max.is_some_and(|m| n > m) => Err(format!("too large; {}", expected())),
        Ok(n) => Ok(n),
        Err(_) if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) => {
            Err(format!("too large; {}", expected()))
        }
        Err(_) => Err(expected()),
    }
}

/// Render a duration compactly for people: `850ms`, `12s`, `3m20s`,
/// `2h5m`, `3d4h`.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let s = d.as_secs();
    let (days, hours, mins, secs) = (s / 86_400, (s / 3600) % 24, (s / 60) % 60, s % 60);
    if days > 0 {
        format!("{days}d{hours}h")
    } else if hours > 0 {
        format!("{hours}h{mins}m")
    } else if mins > 0 {
        format!("{mins}m{secs}s")
    } else {
        format!("{secs}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("30").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("0.5").unwrap(), Duration::from_millis(500));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("-3").is_err());
        assert!(parse_duration("1e999").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512").unwrap(), 512);
        assert_eq!(parse_size("64KiB").unwrap(), 65_536);
        assert_eq!(parse_size("16MiB").unwrap(), 16 << 20);
        assert_eq!(parse_size("2kB").unwrap(), 2000);
        assert!(parse_size("MiB").is_err());
        assert!(parse_size("12XB").is_err());
        assert!(parse_size("99999999999999999999").is_err());
        assert!(parse_size("99999999999GiB").is_err());
    }

    #[test]
    fn errors_say_what_was_expected_with_examples() {
        for (input, why) in [
            ("forever", "it does not start with a number"),
            ("7x", "unknown unit \"x\""),
            ("5 parsecs", "unknown unit \"parsecs\""),
            ("-3", "it does not start with a number"),
            ("1h-", "unexpected character '-'"),
            ("", "empty duration"),
            ("99999999999999999999999999h", "too large"),
        ] {
            let e = parse_duration(input).unwrap_err();
            assert!(e.contains(why), "{input:?}: {e}");
            assert!(
                e.contains("e.g. 500ms, 5s, 2m, 1h, 1h30m, 7d"),
                "{input:?}: {e}"
            );
            assert!(
                !e.contains(" at 0") && !e.contains("months"),
                "{input:?}: {e}"
            );
        }
        for (input, why) in [
            ("MiB", "it does not start with a number"),
            ("12XB", "unknown unit \"XB\""),
            ("1.5MiB", "a whole number is needed"),
            ("", "empty size"),
            ("99999999999999999999", "too large"),
        ] {
            let e = parse_size(input).unwrap_err();
            assert!(e.contains(why), "{input:?}: {e}");
            assert!(e.contains("e.g. 512, 64KiB, 16MiB"), "{input:?}: {e}");
        }
    }

    #[test]
    fn whole_numbers() {
        assert_eq!(parse_whole("20", 0, None, 20), Ok(20));
        assert_eq!(parse_whole(" 7 ", 1, Some(7), 5), Ok(7));
        for (input, min, max, want) in [
            ("x", 0, None, "expected a whole number such as 1000"),
            ("-3", 0, None, "expected a whole number such as 1000"),
            (
                "0.5",
                1,
                None,
                "expected a whole number of 1 or more, such as 1000",
            ),
            ("", 0, None, "expected a whole number such as 1000"),
            (
                "0",
                1,
                None,
                "too small; expected a whole number of 1 or more, such as 1000",
            ),
            (
                "999",
                1,
                Some(256),
                "too large; expected a whole number from 1 to 256, such as 1000",
            ),
            (
                "99999999999999999999",
                0,
                None,
                "too large; expected a whole number such as 1000",
            ),
            (
                "1e3",
                0,
                Some(9),
                "expected a whole number up to 9, such as 1000",
            ),
        ] {
            assert_eq!(
                parse_whole(input, min, max, 1000),
                Err(want.to_string()),
                "{input:?}"
            );
        }
    }

    #[test]
    fn formatting() {
        assert_eq!(format_duration(Duration::from_millis(850)), "850ms");
        assert_eq!(format_duration(Duration::from_secs(200)), "3m20s");
        assert_eq!(format_duration(Duration::from_secs(7500)), "2h5m");
        assert_eq!(
            format_duration(Duration::from_secs(3 * 86_400 + 4 * 3600)),
            "3d4h"
        );
    }

    proptest! {
        #[test]
        fn parsers_never_panic(s in ".{0,40}") {
            let _ = parse_duration(&s);
            let _ = parse_size(&s);
            let _ = parse_whole(&s, 1, Some(9), 5);
        }

        #[test]
        fn bare_seconds_round_trip(n in 0u64..10_000_000) {
            prop_assert_eq!(parse_duration(&n.to_string()).unwrap(), Duration::from_secs(n));
        }

        #[test]
        fn sizes_round_trip(n in 0u64..1_000_000, unit in prop::sample::select(vec![("", 1u64), ("KiB", 1024), ("MiB", 1 << 20)])) {
            prop_assert_eq!(parse_size(&format!("{n}{}", unit.0)).unwrap(), n * unit.1);
        }
    }
}
