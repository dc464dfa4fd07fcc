//! The cause class of a `last_error`: what `spool shape --by error` groups
//! by, so that one outage is one row.
//!
//! Every failure spool records carries details that differ from item to
//! item — the host and port of a refused connection, the body a server
//! answered with, the tail of a command's stderr, the attempt count of a
//! budget that ran out. [`error_class`] keeps only the cause: `HTTP 503`,
//! `connection refused`, `timeout`, `TLS: unknown issuer`, `exit 1`,
//! `push rejected`, `evicted`, `never attempted`. The texts it knows are
//! the ones the replay targets, the push sender and receiver and the
//! overflow policy write (their format strings are quoted in the tests
//! below); any other text falls back to its first clause, trimmed, with
//! numbers and long hex runs replaced by `#` and cut to
//! [`MAX_CLASS_CHARS`], so that ids, ports and durations in a message do
//! not split one cause into many rows.

/// The longest class [`error_class`] returns, in characters (an ellipsis
/// marks a cut).
pub const MAX_CLASS_CHARS: usize = 60;

/// The class of an item with no `last_error` and no failed attempt.
pub const NEVER_ATTEMPTED: &str = "never attempted";

/// The class of an item with failed attempts but no `last_error`: its
/// attempt count was set by hand (`spool attempts`), or, on PostgreSQL,
/// a replayer claimed it (the claim counts the attempt) and stopped
/// without recording an outcome — its lease ran out.
pub const NO_ERROR_RECORDED: &str = "no error recorded";

/// The cause class of `last_error` for an item with `attempts` failed
/// attempts. See the module documentation.
pub fn error_class(last_error: Option<&str>, attempts: u32) -> String {
    let text = last_error.map(str::trim).unwrap_or("");
    if text.is_empty() {
        return if attempts == 0 {
            NEVER_ATTEMPTED.into()
        } else {
            NO_ERROR_RECORDED.into()
        };
    }
    classify(text, 0)
}

/// How deep an over-budget reason may quote another (each quotes the
/// previous last error once; a deeper nesting is only possible by hand).
const MAX_NESTING: usize = 4;

fn classify(text: &str, depth: usize) -> String {
    let text = strip_suffixes(text.trim());

    // `attempts (5) already reach --max-attempts 5; dead-lettered without
    // another attempt (last error: …)`: the cause is the quoted error.
    if text.starts_with("attempts (") && text.contains("already reach --max-attempts") {
        if let Some(inner) = text
            .find("(last error: ")
            .map(|i| &text[i + "(last error: ".len()..])
        {
            let inner = inner.strip_suffix(')').unwrap_or(inner);
            if depth < MAX_NESTING && !inner.trim().is_empty() {
                return classify(inner, depth + 1);
            }
        }
        return "max attempts reached".into();
    }

    // `--url`: `HTTP 503 Service Unavailable: body`, `HTTP 301 Moved
    // Permanently (redirect to …, not followed)`.
    if text.starts_with("HTTP protocol error") {
        return "HTTP protocol error".into();
    }
    if let Some(code) = text.strip_prefix("HTTP ").and_then(status) {
        return format!("HTTP {code}");
    }

    // `--push`, the sender: the receiver's answers and transport failures.
    if let Some(rest) = text.strip_prefix("push receiver answered HTTP ") {
        if let Some(code) = status(rest) {
            return format!("HTTP {code}");
        }
    }
    if let Some(rest) = text.strip_prefix("receiver answered HTTP ") {
        if let Some(code) = status(rest) {
            return format!("push: not a push response (HTTP {code})");
        }
    }
    if let Some(rest) = text.strip_prefix("push request failed: ") {
        if depth < MAX_NESTING {
            return classify(rest, depth + 1);
        }
    }
    if text.starts_with("the push receiver acknowledged nothing") {
        return "push: nothing acknowledged".into();
    }
    if text.starts_with("not pushed: ") {
        return "not pushed".into();
    }
    // `--push`, the receiver's reasons for a reject (stored verbatim), and
    // a lone item too large for it.
    if text.starts_with("too large for the push receiver") || is_receiver_reject(text) {
        return "push rejected".into();
    }

    // Transport failures (`--url` and `--push`), with the server named
    // at the end: `connection error: connection refused (127.0.0.1:9)`.
    if text.starts_with("request timed out") {
        return "timeout".into();
    }
    if let Some(kind) = text.strip_prefix("connection error: ") {
        let kind = strip_authority(kind);
        return match kind {
            "timed out" => "timeout".into(),
            "connection refused"
            | "connection reset"
            | "connection aborted"
            | "host unreachable"
            | "network unreachable"
            | "network down"
            | "address not available"
            | "broken pipe" => kind.into(),
            "unexpected end of file" => "connection closed".into(),
            other => format!("connection error: {}", fallback(other)),
        };
    }
    if text.starts_with("host not found") {
        return "host not found".into();
    }
    if text.starts_with("connection failed") {
        return "connection failed".into();
    }

    // TLS: `TLS handshake with HOST:PORT failed: <cause> (hint)`, `TLS
    // error with HOST:PORT: <message>`, `TLS error: <message>`.
    if let Some(rest) = text.strip_prefix("TLS handshake with ") {
        let cause = rest.split_once(" failed: ").map_or(rest, |(_, c)| c);
        return tls_class(cause);
    }
    if let Some(rest) = text.strip_prefix("TLS error with ") {
        let cause = rest.split_once(": ").map_or(rest, |(_, c)| c);
        return tls_class(cause);
    }
    if let Some(rest) = text.strip_prefix("TLS error: ") {
        return tls_class(rest);
    }

    // `--exec`: `command exited with 3: <stderr tail>`, `command rejected
    // the item (exit 65)…`, signals, the timeout.
    if let Some(rest) = text.strip_prefix("command exited with ") {
        if let Some(code) = number(rest) {
            return format!("exit {code}");
        }
    }
    if let Some(rest) = text.strip_prefix("command rejected the item (exit ") {
        if let Some(code) = number(rest) {
            return format!("exit {code} (rejected)");
        }
    }
    if let Some(rest) = text.strip_prefix("command killed by signal ") {
        if let Some(sig) = number(rest) {
            return format!("signal {sig}");
        }
    }
    if text.starts_with("command timed out") {
        return "timeout".into();
    }
    if text.starts_with("command ended abnormally") {
        return "ended abnormally".into();
    }
    if text.starts_with("cannot run ") {
        return "cannot run the command".into();
    }

    // The drop-oldest overflow policy: `evicted: spool full (max-depth N)`.
    if text.starts_with("evicted") {
        return "evicted".into();
    }

    fallback(text)
}

/// The text without what replay appends to a cause: ` (gave up after N
/// attempts)` and `; the dead-letter sink failed: …`.
fn strip_suffixes(text: &str) -> &str {
    let mut t = text;
    if let Some(i) = t.find("; the dead-letter sink failed: ") {
        t = &t[..i];
    }
    if let Some(i) = t.rfind(" (gave up after ") {
        if t.ends_with(" attempts)") || t.ends_with(" attempt)") {
            t = &t[..i];
        }
    }
    t.trim()
}

/// A receiver's reason for refusing one pushed entry, as
/// `src/push/receiver` words them.
fn is_receiver_reject(text: &str) -> bool {
    (text.starts_with("payload of ") || text.starts_with("key of "))
        && text.contains("over the receiver's limit")
        || text.starts_with("digest ") && text.contains("does not match the key and payload")
        || text.starts_with("invalid payload_base64")
        || text.starts_with("the Idempotency-Key header is refused")
        || text.starts_with("the idempotency key contains a NUL byte")
}

/// The class of a TLS failure's cause, as `src/tls/failure.rs` words it.
fn tls_class(cause: &str) -> String {
    let c = cause.trim();
    let class = if c.starts_with("certificate is signed by an unknown issuer") {
        "unknown issuer"
    } else if c.starts_with("certificate is self-signed") {
        "self-signed CA certificate"
    } else if c.starts_with("the server presented a CA certificate") {
        "CA certificate as the server's"
    } else if c.starts_with("certificate is not valid for this host name") {
        "name mismatch"
    } else if c.starts_with("certificate has expired") {
        "certificate expired"
    } else if c.starts_with("certificate is not valid yet") {
        "certificate not valid yet"
    } else if c.starts_with("certificate has been revoked") {
        "certificate revoked"
    } else if c.starts_with("the server refused the connection with the TLS alert") {
        let alert = c.split('"').nth(1).unwrap_or("");
        return format!("TLS: alert {}", fallback(alert));
    } else {
        return format!("TLS: {}", fallback(c));
    };
    format!("TLS: {class}")
}

/// A three-digit status at the start of `s`.
fn status(s: &str) -> Option<&str> {
    number(s).filter(|n| n.len() == 3)
}

/// The decimal number at the start of `s`.
fn number(s: &str) -> Option<&str> {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    (end > 0).then(|| &s[..end])
}

/// `kind` without the ` (HOST:PORT)` the transport appends.
fn strip_authority(kind: &str) -> &str {
    match kind.rfind(" (") {
        Some(i) if kind.ends_with(')') => kind[..i].trim(),
        _ => kind.trim(),
    }
}

/// The first clause of an unknown text (up to `: `, `; `, ` (`, ` | ` or
/// a line break), whitespace collapsed, control characters dropped,
/// numbers and hex runs of 8 or more characters replaced by `#`, cut to
/// [`MAX_CLASS_CHARS`].
fn fallback(text: &str) -> String {
    let mut end = text.len();
    for sep in [": ", "; ", " (", " | ", "\n", "\r", " - "] {
        if let Some(i) = text.find(sep) {
            if i > 0 {
                end = end.min(i);
            }
        }
    }
    let clause = &text[..end];
    let mut words: Vec<String> = Vec::new();
    for word in clause.split_whitespace() {
        words.push(normalise_word(word));
    }
    let mut out = words.join(" ");
    if out.is_empty() {
        return "(empty error)".into();
    }
    if out.chars().count() > MAX_CLASS_CHARS {
        out = out.chars().take(MAX_CLASS_CHARS - 1).collect::<String>();
        out.push('…');
    }
    out
}

/// A word with its digit runs as `#` (and a whole hex-looking token —
/// a uuid, a digest — as one `#`); control characters dropped.
fn normalise_word(word: &str) -> String {
    let core = word.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    if core.len() >= 8
        && core.chars().any(|c| c.is_ascii_digit())
        && core.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
    {
        return word.replacen(core, "#", 1);
    }
    let mut out = String::with_capacity(word.len());
    let mut in_digits = false;
    for c in word.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                out.push('#');
            }
            in_digits = true;
        } else {
            in_digits = false;
            if !c.is_control() {
                out.push(c);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The texts spool writes into `last_error`, from the format strings
    /// of the targets, the push sender and receiver and the overflow
    /// policy (and the expectations of their tests), with their classes.
    #[test]
    fn real_texts_fall_into_their_classes() {
        let cases: &[(&str, &str)] = &[
            // --url (src/replay/http.rs)
            ("HTTP 503 Service Unavailable", "HTTP 503"),
            ("HTTP 503 Service Unavailable: busy", "HTTP 503"),
            ("HTTP 503: upstream 10.0.0.7:8080 down", "HTTP 503"),
            ("HTTP 429 Too Many Requests: slow down", "HTTP 429"),
            ("HTTP 429: slow down", "HTTP 429"),
            ("HTTP 500 Internal Server Error: trace id 8f3a", "HTTP 500"),
            ("HTTP 400 Bad Request: missing field", "HTTP 400"),
            (
                "HTTP 301 Moved Permanently (redirect to https://b.example/x, not followed)",
                "HTTP 301",
            ),
            ("HTTP 599", "HTTP 599"),
            ("HTTP protocol error: x", "HTTP protocol error"),
            (
                "connection error: connection refused (127.0.0.1:9)",
                "connection refused",
            ),
            (
                "connection error: connection refused (127.0.0.1:40117)",
                "connection refused",
            ),
            (
                "connection error: connection reset (h.example:443)",
                "connection reset",
            ),
            ("connection error: timed out (h.example:443)", "timeout"),
            (
                "connection error: unexpected end of file (h.example:80)",
                "connection closed",
            ),
            ("request timed out (global) (h.example:443)", "timeout"),
            ("request timed out (global)", "timeout"),
            ("host not found (nowhere.invalid:80)", "host not found"),
            ("connection failed (10.1.2.3:80)", "connection failed"),
            // TLS (src/tls/trust.rs, src/tls/failure.rs)
            (
                "TLS handshake with h.example:443 failed: certificate is signed by an unknown \
                 issuer (add its CA, or the self-signed certificate itself, with --cacert or \
                 SSL_CERT_FILE)",
                "TLS: unknown issuer",
            ),
            (
                "TLS handshake with 127.0.0.1:8443 failed: certificate is signed by an unknown \
                 issuer (add its CA, or the self-signed certificate itself, with --cacert or \
                 SSL_CERT_FILE; no CA certificate was found in the system store: failed to \
                 read PEM from file: /x/bundle.pem)",
                "TLS: unknown issuer",
            ),
            (
                "TLS handshake with h.example:443 failed: certificate is not valid for this host \
                 name (name mismatch: it is for a.example, b.example)",
                "TLS: name mismatch",
            ),
            (
                "TLS handshake with h.example:443 failed: certificate has expired (valid until \
                 2024-01-01T00:00:00Z)",
                "TLS: certificate expired",
            ),
            (
                "TLS handshake with h.example:443 failed: certificate is not valid yet (valid \
                 from 2030-01-01T00:00:00Z)",
                "TLS: certificate not valid yet",
            ),
            (
                "TLS handshake with h.example:443 failed: certificate has been revoked",
                "TLS: certificate revoked",
            ),
            (
                "TLS handshake with h.example:443 failed: certificate is self-signed (unknown \
                 issuer) and is a CA certificate (CA:TRUE) presented as the server's own (trust \
                 that exact certificate by giving it to --cacert, or give the server a leaf \
                 certificate: openssl req …)",
                "TLS: self-signed CA certificate",
            ),
            (
                "TLS error with h.example:443: the server refused the connection with the TLS \
                 alert \"handshake failure\" (no TLS version or cipher suite in common, or it \
                 wants a client certificate)",
                "TLS: alert handshake failure",
            ),
            (
                "TLS error: certificate is signed by an unknown issuer",
                "TLS: unknown issuer",
            ),
            // --exec (src/replay/exec.rs, src/child.rs)
            ("command exited with 1", "exit 1"),
            ("command exited with 1: line 4 | line 5", "exit 1"),
            ("command exited with 3: oops", "exit 3"),
            (
                "command rejected the item (exit 65): bad",
                "exit 65 (rejected)",
            ),
            ("command killed by signal 9", "signal 9"),
            (
                "command timed out after 30s; its process group was killed",
                "timeout",
            ),
            (
                "command timed out after 1m30s; its process group was killed: last words",
                "timeout",
            ),
            ("command ended abnormally", "ended abnormally"),
            (
                "cannot run ./deliver.sh: No such file or directory (os error 2)",
                "cannot run the command",
            ),
            // Budgets (src/replay/mod.rs, src/replay/outcome.rs)
            (
                "HTTP 503 Service Unavailable: busy (gave up after 5 attempts)",
                "HTTP 503",
            ),
            ("command exited with 1 (gave up after 3 attempts)", "exit 1"),
            (
                "attempts (5) already reach --max-attempts 5; dead-lettered without another \
                 attempt (last error: HTTP 503)",
                "HTTP 503",
            ),
            (
                "attempts (2) already reach --max-attempts 2; dead-lettered without another \
                 attempt (last error: connection error: connection refused (127.0.0.1:9))",
                "connection refused",
            ),
            (
                "attempts (2) already reach --max-attempts 2; dead-lettered without another \
                 attempt",
                "max attempts reached",
            ),
            (
                "HTTP 422 Unprocessable Entity; the dead-letter sink failed: `sink` exited with 1",
                "HTTP 422",
            ),
            // --push, the sender (src/push/sender.rs, src/replay/push/)
            ("push receiver answered HTTP 503: overloaded", "HTTP 503"),
            ("push receiver answered HTTP 429: slow down", "HTTP 429"),
            (
                "push request failed: connection error: connection refused (127.0.0.1:7001)",
                "connection refused",
            ),
            (
                "push request failed: connection error: ConnectionReset",
                "connection error: ConnectionReset",
            ),
            ("push request failed: HTTP 503", "HTTP 503"),
            (
                "receiver answered HTTP 200 with a body that is not a push response (expected \
                 value at line 1 column 1): <html>",
                "push: not a push response (HTTP 200)",
            ),
            (
                "the push receiver acknowledged nothing of sequence numbers 4..=9 (its last_seq \
                 is at or below 3)",
                "push: nothing acknowledged",
            ),
            (
                "too large for the push receiver (HTTP 413): body of 20000000 bytes",
                "push rejected",
            ),
            (
                "not pushed: the idempotency key contains a NUL byte, which no key may contain",
                "not pushed",
            ),
            // --push, the receiver's reasons (src/push/receiver/)
            (
                "payload of 11 bytes is over the receiver's limit of 10 bytes",
                "push rejected",
            ),
            (
                "key of 300 bytes is over the receiver's limit of 256 bytes",
                "push rejected",
            ),
            (
                "digest sha256:00ff does not match the key and payload (computed sha256:abcd)",
                "push rejected",
            ),
            (
                "invalid payload_base64: Invalid byte 37, offset 0.",
                "push rejected",
            ),
            (
                "the Idempotency-Key header is refused: the idempotency key contains a NUL byte",
                "push rejected",
            ),
            // drop-oldest (src/item.rs)
            ("evicted: spool full (max-depth 1000)", "evicted"),
            ("evicted: spool full (max-depth 7)", "evicted"),
        ];
        for (text, class) in cases {
            assert_eq!(error_class(Some(text), 1), *class, "{text}");
        }
    }

    #[test]
    fn no_error_is_never_attempted_or_unrecorded() {
        assert_eq!(error_class(None, 0), "never attempted");
        assert_eq!(error_class(Some(""), 0), "never attempted");
        assert_eq!(error_class(Some("  "), 0), "never attempted");
        assert_eq!(error_class(None, 3), "no error recorded");
    }

    #[test]
    fn unknown_texts_keep_their_first_clause_with_numbers_folded() {
        let cases: &[(&str, &str)] = &[
            ("boom", "boom"),
            ("  rejected  ", "rejected"),
            ("worker 17 crashed: out of memory", "worker # crashed"),
            ("worker 18 crashed: disk full", "worker # crashed"),
            ("queue busy; retry in 250ms", "queue busy"),
            ("lease 3f0c8a52-5a4e-4c77 expired", "lease # expired"),
            (
                "object 3f0c8a52-5a4e-4c77-9a3e-1f6f1d2b9c10 missing",
                "object # missing",
            ),
            ("port 8080 (tcp) closed", "port #"),
            ("line one\nline two", "line one"),
            ("tab\there", "tab here"),
            ("bell\u{7}ring", "bellring"),
            (": leading colon", ": leading colon"),
        ];
        for (text, class) in cases {
            assert_eq!(error_class(Some(text), 1), *class, "{text:?}");
        }
        // Same cause, different numbers: one class.
        assert_eq!(
            error_class(Some("timeout after 31s talking to 10.0.0.5:80"), 2),
            error_class(Some("timeout after 30s talking to 10.0.0.6:80"), 4),
        );
    }

    #[test]
    fn classes_are_bounded() {
        let long = "word ".repeat(100);
        let c = error_class(Some(&long), 1);
        assert_eq!(c.chars().count(), MAX_CLASS_CHARS);
        assert!(c.ends_with('…'));
        let tls = format!("TLS error: {long}");
        assert!(error_class(Some(&tls), 1).chars().count() <= MAX_CLASS_CHARS + 5);
    }

    #[test]
    fn nested_budget_reasons_end() {
        let mut text = "HTTP 502 Bad Gateway".to_string();
        for n in 0..10 {
            text = format!(
                "attempts ({n}) already reach --max-attempts {n}; dead-lettered without \
                 another attempt (last error: {text})"
            );
        }
        assert_eq!(error_class(Some(&text), 1), "max attempts reached");
    }
}
