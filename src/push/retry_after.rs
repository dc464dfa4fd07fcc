//! When a server asks to be retried: the HTTP `Retry-After` header, as
//! both an `--url` target and a push receiver send it.

use std::time::{Duration, SystemTime};

/// When a target asks to be retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryAfter {
    /// After this long.
    Delay(Duration),
    /// Not before this time.
    At(SystemTime),
}

/// Parse a `Retry-After` value: delay seconds or an HTTP date.
pub fn parse_retry_after(v: &str) -> Option<RetryAfter> {
    let v = v.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(RetryAfter::Delay(Duration::from_secs(secs)));
    }
    httpdate::parse_http_date(v).ok().map(RetryAfter::At)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_forms() {
        assert_eq!(
            parse_retry_after("120"),
            Some(RetryAfter::Delay(Duration::from_secs(120)))
        );
        assert!(matches!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(RetryAfter::At(_))
        ));
        assert_eq!(parse_retry_after("soon"), None);
    }
}
