//! Bearer tokens for `spool serve`: which requests may do what.
//!
//! A token file holds one token per line, optionally followed by the
//! client ids (globs) that the token may push as:
//!
//! ```text
//! # edge boxes of site A may push only as themselves
//! 3f7c0d…e1  0a6e1c2d-*  7b9d4e10-1111-4c4c-9a9a-0123456789ab
//! # the webhook producer (POST /v1/items) and the operator: any client
//! 9b1a22…0c  name=billing
//! ```
//!
//! * Blank lines and lines whose first non-blank character is `#` are
//!   ignored. A token is the first word of its line (any run of
//!   non-blank characters); the other words are globs over client ids,
//!   where `*` matches any run of characters and `?` one character. A
//!   line without globs lets the token act as every client.
//! * A word `name=NAME` (1 to 64 of `A-Z a-z 0-9 . _ -`) names the
//!   token; without it the name is the first 8 hex digits of the token's
//!   SHA-256. The name is the scope of the keys the token posts to
//!   `POST /v1/items` (`<name>:<key>`, see
//!   [`crate::push::receiver::scoped_key`]): tokens that share a name
//!   share a key space (a rotated token keeps its producer's keys).
//! * `POST /v1/push` needs a token that may act as the body's
//!   `client_id` (403 otherwise, before anything is applied);
//!   `GET /v1/clients/{id}` the same for `id`; `POST /v1/items` any valid
//!   token. `GET /healthz` and `GET /metrics` need none.
//!
//! Tokens are kept only as SHA-256 digests. A presented token is hashed
//! and compared with every stored digest in constant time
//! ([`subtle`]), without stopping at a match, so neither the time taken
//! nor the token's length tells a caller how close a guess was. No error,
//! message or log line ever contains a token; errors about the file name
//! the line number only.

use crate::error::{Error, Result};
use sha2::{Digest as _, Sha256};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use subtle::{ConditionallySelectable, ConstantTimeEq};

/// The name of the systemd credential `spool serve` reads its tokens
/// from when `--token-file` is not given: `LoadCredential=spool-serve-tokens:/etc/spool/tokens`
/// makes it `$CREDENTIALS_DIRECTORY/spool-serve-tokens`.
pub const CREDENTIAL_NAME: &str = "spool-serve-tokens";

/// The token file systemd passed as a credential, if there is one:
/// `credentials_directory` is the value of `$CREDENTIALS_DIRECTORY`.
pub fn credential_token_file(credentials_directory: Option<&Path>) -> Option<PathBuf> {
    let file = credentials_directory?.join(CREDENTIAL_NAME);
    file.is_file().then_some(file)
}

/// The tokens a server accepts, with what each may do.
#[derive(Clone)]
pub struct Tokens {
    entries: Vec<TokenEntry>,
}

#[derive(Clone)]
struct TokenEntry {
    digest: [u8; 32],
    /// Globs over client ids; empty: every client.
    clients: Vec<String>,
    /// The token's name (`name=`, or the first 8 hex digits of its
    /// SHA-256).
    name: String,
}

/// The longest token name.
const MAX_NAME_LEN: usize = 64;

/// A token that was presented and found: what the request may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant(usize);

impl fmt::Debug for Tokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the digests, let alone the tokens.
        write!(f, "Tokens({} tokens)", self.entries.len())
    }
}

impl Tokens {
    /// Parse a token file's text (see the module docs). `what` names the
    /// file in errors.
    pub fn parse(text: &str, what: &Path) -> Result<Tokens> {
        let mut entries = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut words = line.split_whitespace();
            let Some(token) = words.next() else { continue };
            let mut clients = Vec::new();
            let mut name = None;
            for glob in words {
                if let Some(value) = glob.strip_prefix("name=") {
                    let valid = !value.is_empty()
                        && value.len() <= MAX_NAME_LEN
                        && value
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
                    if !valid || name.is_some() {
                        return Err(bad_file(
                            what,
                            format!(
                                "line {}: a token has at most one name=NAME, of 1 to \
                                 {MAX_NAME_LEN} characters of A-Z a-z 0-9 . _ -",
                                n + 1
                            ),
                        ));
                    }
                    name = Some(value.to_string());
                    continue;
                }
                if !glob.bytes().all(|b| {
                    b.is_ascii_alphanumeric()
                        || matches!(b, b'.' | b'_' | b':' | b'-' | b'*' | b'?')
                }) {
                    return Err(bad_file(
                        what,
                        format!(
                            "line {}: a client glob may hold only A-Z a-z 0-9 . _ : - * ?",
                            n + 1
                        ),
                    ));
                }
                clients.push(glob.to_string());
            }
            let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
            let name =
                name.unwrap_or_else(|| digest[..4].iter().map(|b| format!("{b:02x}")).collect());
            entries.push(TokenEntry {
                digest,
                clients,
                name,
            });
        }
        if entries.is_empty() {
            return Err(bad_file(
                what,
                "it holds no token (one token per line, optionally followed by client globs)",
            ));
        }
        Ok(Tokens { entries })
    }

    /// Read and parse the token file at `path`.
    pub fn load(path: &Path) -> Result<Tokens> {
        if path.is_dir() {
            return Err(bad_file(path, "it is a directory"));
        }
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, "read the token file", e))?;
        let text = String::from_utf8(bytes).map_err(|_| bad_file(path, "it is not UTF-8 text"))?;
        Tokens::parse(&text, path)
    }

    /// How many tokens there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there are none (never, for parsed tokens).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Find the presented token, in constant time over all tokens.
    pub fn authenticate(&self, presented: &[u8]) -> Option<Grant> {
        let digest: [u8; 32] = Sha256::digest(presented).into();
        // 0: not found; i + 1: entry i. Every entry is compared.
        let mut found = 0u64;
        for (i, e) in self.entries.iter().enumerate() {
            let hit = e.digest.ct_eq(&digest);
            found = u64::conditional_select(&found, &(i as u64 + 1), hit);
        }
        (found != 0).then(|| Grant(found as usize - 1))
    }

    /// The name of the token behind `grant` (see the module docs).
    pub fn name(&self, grant: Grant) -> &str {
        self.entries.get(grant.0).map_or("", |e| e.name.as_str())
    }

    /// True when the token behind `grant` may act as `client`.
    pub fn may_act_as(&self, grant: Grant, client: &str) -> bool {
        match self.entries.get(grant.0) {
            None => false,
            Some(e) => {
                e.clients.is_empty()
                    || e.clients
                        .iter()
                        .any(|g| glob_match(g.as_bytes(), client.as_bytes()))
            }
        }
    }
}

/// The token in an `Authorization` header value: `Bearer TOKEN` (the
/// scheme in any case). `None` for anything else.
pub fn bearer(header: &[u8]) -> Option<&[u8]> {
    let header = header.trim_ascii();
    let (scheme, rest) = header.split_at(header.iter().position(|&b| b == b' ')?);
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return None;
    }
    let token = rest.trim_ascii();
    (!token.is_empty()).then_some(token)
}

/// Match `s` against a glob of `*` (any run) and `?` (one byte).
/// Iterative, with one backtrack point: linear in practice, never
/// exponential.
pub fn glob_match(pat: &[u8], s: &[u8]) -> bool {
    let (mut p, mut i) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while i < s.len() {
        if p < pat.len() && (pat[p] == b'?' || pat[p] == s[i]) {
            p += 1;
            i += 1;
        } else if p < pat.len() && pat[p] == b'*' {
            star = Some((p, i));
            p += 1;
        } else if let Some((sp, si)) = star {
            p = sp + 1;
            i = si + 1;
            star = Some((sp, si + 1));
        } else {
            return false;
        }
    }
    pat[p..].iter().all(|&b| b == b'*')
}

fn bad_file(path: &Path, why: impl Into<String>) -> Error {
    Error::io(
        path,
        "read the token file",
        io::Error::new(io::ErrorKind::InvalidData, why.into()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Tokens> {
        Tokens::parse(text, Path::new("tokens"))
    }

    #[test]
    fn tokens_with_and_without_globs() {
        let t = parse(
            "# comment\n\n  alpha-token-0123456789  edge-* site.?\r\nbeta-token-0123456789\n",
        )
        .unwrap();
        assert_eq!(t.len(), 2);
        let a = t.authenticate(b"alpha-token-0123456789").unwrap();
        let b = t.authenticate(b"beta-token-0123456789").unwrap();
        assert!(t.may_act_as(a, "edge-1"));
        assert!(t.may_act_as(a, "site.x"));
        assert!(!t.may_act_as(a, "site.xy"));
        assert!(!t.may_act_as(a, "other"));
        assert!(t.may_act_as(b, "anything"));
        assert_eq!(t.authenticate(b"alpha-token-012345678"), None);
        assert_eq!(t.authenticate(b""), None);
        assert_eq!(t.authenticate(b"# comment"), None);
    }

    #[test]
    fn names_are_given_or_derived_from_the_token() {
        let t =
            parse("alpha-token-0123456789 edge-* name=billing\nbeta-token-0123456789\n").unwrap();
        let a = t.authenticate(b"alpha-token-0123456789").unwrap();
        let b = t.authenticate(b"beta-token-0123456789").unwrap();
        assert_eq!(t.name(a), "billing");
        assert!(t.may_act_as(a, "edge-1"), "name= is not a glob");
        assert!(!t.may_act_as(a, "name=billing"));
        // The first 8 hex digits of the token's SHA-256.
        let want: String = Sha256::digest(b"beta-token-0123456789")[..4]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(t.name(b), want);
        assert_eq!(t.name(b).len(), 8);
        for bad in [
            "secret-token name=",
            "secret-token name=a:b",
            "secret-token name=a name=b",
            &format!("secret-token name={}", "n".repeat(65)),
        ] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(
                e.contains("line 1: a token has at most one name=NAME"),
                "{e}"
            );
            assert!(!e.contains("secret"), "{e}");
        }
    }

    #[test]
    fn bad_files_name_the_line_never_the_token() {
        for (text, want) in [
            ("", "holds no token"),
            ("# only\n\n", "holds no token"),
            ("secret-token edge/1\n", "line 1"),
        ] {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
            assert!(!e.contains("secret"), "{e}");
        }
        assert!(format!("{:?}", parse("secret-token").unwrap()).contains("1 tokens"));
    }

    #[test]
    fn bearer_headers() {
        assert_eq!(bearer(b"Bearer abc"), Some(&b"abc"[..]));
        assert_eq!(bearer(b"bearer   abc  "), Some(&b"abc"[..]));
        assert_eq!(bearer(b"Basic abc"), None);
        assert_eq!(bearer(b"Bearer"), None);
        assert_eq!(bearer(b"Bearer "), None);
        assert_eq!(bearer(b""), None);
    }

    #[test]
    fn globs() {
        for (p, s, want) in [
            ("*", "", true),
            ("*", "abc", true),
            ("a*c", "abc", true),
            ("a*c", "abcd", false),
            ("a?c", "abc", true),
            ("a?c", "ac", false),
            ("*b*", "abc", true),
            ("a**", "a", true),
            ("abc", "abc", true),
            ("abc", "abd", false),
            ("*-1", "edge-2-1", true),
        ] {
            assert_eq!(glob_match(p.as_bytes(), s.as_bytes()), want, "{p} {s}");
        }
        // Pathological patterns stay fast.
        let s = "a".repeat(10_000);
        assert!(!glob_match(b"*a*a*a*a*a*b", s.as_bytes()));
    }
}
