//! Safe, one-line renderings of payloads and keys for people.
//!
//! A payload can hold anything: newlines, terminal escape sequences,
//! bidirectional-override characters, bytes that are not UTF-8. What
//! [`escape`] returns holds none of that: it is printable, one line, and
//! unambiguous (`\` itself is escaped), so a table or a log line shows
//! exactly what is stored without letting the payload drive the terminal.
//!
//! There is one escape style, JSON's (what `jq` prints): `\n`, `\r`,
//! `\t`, `\\` and `\u` with four hex digits. A byte that is not UTF-8
//! has no JSON escape of its own; it is shown as `\udcXX` (XX the byte),
//! the lone surrogate that Python's `surrogateescape` maps such a byte to.
//! Valid text can never hold a lone surrogate, so the form stays
//! unambiguous.

/// Escape `bytes` for display on one line.
///
/// Valid UTF-8 text stays as it is, except: `\` → `\\`; `\n`, `\r`, `\t`
/// → those escapes; other control characters (NUL included) and Unicode
/// format characters that change how text is laid out (bidi overrides,
/// zero-width characters) → `\u` and their code point as four hex
/// digits, e.g. `\u001b` for ESC or `\u200b` for a zero-width space;
/// bytes that are not UTF-8 → `\udc` and the byte, e.g. `\udcff`.
pub fn escape(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    push_escaped(&mut out, bytes, usize::MAX);
    out
}

/// [`escape`] cut to at most `max_chars` characters; a cut preview ends in
/// `…`.
pub fn preview(bytes: &[u8], max_chars: usize) -> String {
    let mut out = String::new();
    if push_escaped(&mut out, bytes, max_chars.saturating_sub(1)) {
        // Cut: everything did not fit.
        out.push('…');
    }
    out
}

/// Append the escaped form of `bytes` to `out`, stopping before the
/// output would exceed `budget` characters unless all of it fits in
/// `budget + 1` characters. Returns true when the output was cut.
fn push_escaped(out: &mut String, bytes: &[u8], budget: usize) -> bool {
    let mut pieces: Vec<String> = Vec::new();
    let mut used = 0usize;
    let mut cut = false;
    'outer: for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            let piece = escape_char(c);
            let n = piece.chars().count();
            if used + n > budget {
                cut = true;
                break 'outer;
            }
            used += n;
            pieces.push(piece);
        }
        for &b in chunk.invalid() {
            let piece = escape_byte(b);
            if used + piece.len() > budget {
                cut = true;
                break 'outer;
            }
            used += piece.len();
            pieces.push(piece);
        }
    }
    if cut && budget != usize::MAX {
        // Would the whole thing have fitted in budget + 1 (the room the
        // ellipsis would take)? Then show it whole instead.
        let full = escape_all(bytes);
        if full.chars().count() <= budget + 1 {
            out.push_str(&full);
            return false;
        }
    }
    for p in pieces {
        out.push_str(&p);
    }
    cut
}

fn escape_all(bytes: &[u8]) -> String {
    let mut s = String::new();
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            s.push_str(&escape_char(c));
        }
        for &b in chunk.invalid() {
            s.push_str(&escape_byte(b));
        }
    }
    s
}

fn escape_char(c: char) -> String {
    match c {
        '\\' => "\\\\".into(),
        '\n' => "\\n".into(),
        '\r' => "\\r".into(),
        '\t' => "\\t".into(),
        c if c.is_control() || is_format_char(c) => format!("\\u{:04x}", c as u32),
        c => c.to_string(),
    }
}

/// A byte that is not UTF-8, as the lone surrogate `surrogateescape`
/// gives it.
fn escape_byte(b: u8) -> String {
    format!("\\udc{b:02x}")
}

/// Unicode format characters that can reorder or hide text on a terminal.
fn is_format_char(c: char) -> bool {
    matches!(c,
        '\u{00ad}'
        | '\u{061c}'
        | '\u{180e}'
        | '\u{200b}'..='\u{200f}'
        | '\u{2028}'..='\u{202e}'
        | '\u{2060}'..='\u{206f}'
        | '\u{feff}'
        | '\u{fff9}'..='\u{fffb}'
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_controls_and_bad_bytes() {
        assert_eq!(escape(b"a\nb\tc\\d"), "a\\nb\\tc\\\\d");
        assert_eq!(escape(b"\x1b[31mred"), "\\u001b[31mred");
        assert_eq!(escape(b"\x01\x00\x7f"), "\\u0001\\u0000\\u007f");
        assert_eq!(escape(b"ok\xff\xfe"), "ok\\udcff\\udcfe");
        assert_eq!(escape("x\u{202e}y".as_bytes()), "x\\u202ey");
        assert_eq!(escape("héllo".as_bytes()), "héllo");
        assert_eq!(escape(b""), "");
    }

    #[test]
    fn previews_are_cut_with_an_ellipsis() {
        assert_eq!(preview(b"hello world", 5), "hell…");
        assert_eq!(preview(b"hello", 5), "hello");
        assert_eq!(preview(b"\n\n\n\n", 5), "\\n\\n…");
        assert_eq!(preview(b"abc", 0), "…");
        assert!(preview(&[0xff; 100], 20).chars().count() <= 20);
    }
}
