//! Bearer tokens for `spool serve`: which requests may do what.
//!
//! A token file holds one token per line, optionally followed by the
//! token's name and the client ids (globs) that the token may push as:
//!
//! ```text
//! # edge boxes of site A may push only as themselves
//! 3f7c0d…e1  name=site-a  0a6e1c2d-*  7b9d4e10-1111-4c4c-9a9a-0123456789ab
//! # the webhook producer (POST /v1/items): any client
//! 9b1a22…0c  name=webhooks
//! # the on-call operator: may also act in the console
//! 51c0e7…9d  name=oncall  role=admin
//! ```
//!
//! * Blank lines and lines whose first non-blank character is `#` are
//!   ignored. A token is the first word of its line (any run of
//!   non-blank characters, at least [`MIN_TOKEN_LEN`] of them); the other
//!   words are `name=NAME` (at most one), `role=admin` (at most one) and
//!   globs over client ids, where `*` matches any run of characters and
//!   `?` one character. A line without globs lets the token act as every
//!   client.
//! * Every valid token may read the console (`spool serve --console`);
//!   only a token with `role=admin` may act there (hold, release,
//!   requeue, purge, mark done). Files without `role=` keep working:
//!   their tokens push and read.
//! * The name stands for the token wherever one must be shown or kept:
//!   the access log, key scopes. Without `name=` it is the first 8 hex
//!   digits of the token's SHA-256, which names the token without
//!   revealing it. Two tokens may share a name (an old and a new token
//!   while a client is switched over).
//! * `POST /v1/push` needs a token that may act as the body's
//!   `client_id` (403 otherwise, before anything is applied);
//!   `GET /v1/clients/{id}` the same for `id`; `POST /v1/items` and
//!   `GET /metrics` any valid token. `GET /healthz` needs none.
//! * Refused with [`Error::Config`] (exit 78), because they would make the
//!   server less safe than the file's author believes: a token shorter
//!   than [`MIN_TOKEN_LEN`] characters (guessable), and the same token on
//!   two lines (only one line's globs could apply). A token file readable
//!   by group or others is a warning ([`Tokens::warnings`]).
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

/// The shortest token accepted: 16 characters. `openssl rand -hex 32`
/// makes 64.
pub const MIN_TOKEN_LEN: usize = 16;

/// The longest `name=` accepted.
pub const MAX_NAME_LEN: usize = 64;

/// The token file systemd passed as a credential: `credentials_directory`
/// is the value of `$CREDENTIALS_DIRECTORY`. `Ok(None)` when it is not
/// set. When it is set, the service was started with credentials, and a
/// tokens file that is missing, a dangling link, a directory or
/// unreadable is [`Error::Config`]: serving without the tokens the unit
/// meant to pass would serve without authentication.
pub fn credential_token_file(credentials_directory: Option<&Path>) -> Result<Option<PathBuf>> {
    let Some(dir) = credentials_directory else {
        return Ok(None);
    };
    let file = dir.join(CREDENTIAL_NAME);
    let why = match std::fs::metadata(&file) {
        Ok(m) if m.is_file() => match std::fs::File::open(&file) {
            Ok(_) => return Ok(Some(file)),
            Err(e) => format!("it cannot be read ({e})"),
        },
        Ok(m) if m.is_dir() => "it is a directory".to_string(),
        Ok(_) => "it is not a regular file".to_string(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if std::fs::symlink_metadata(&file).is_ok() {
                "it is a symbolic link to nothing".to_string()
            } else {
                "it does not exist".to_string()
            }
        }
        Err(e) => format!("it cannot be read ({e})"),
    };
    Err(Error::Config {
        detail: format!(
            "$CREDENTIALS_DIRECTORY is set ({}) but its token file {}: {why}; refusing to \
             serve without the tokens the service was meant to get",
            dir.display(),
            file.display()
        ),
        hint: format!(
            "check the unit's LoadCredential={CREDENTIAL_NAME}:FILE (FILE must exist and be a \
             token file), or give --token-file FILE; unset CREDENTIALS_DIRECTORY to serve \
             without tokens"
        ),
    })
}

/// The tokens a server accepts, with what each may do.
#[derive(Clone)]
pub struct Tokens {
    entries: Vec<TokenEntry>,
    warnings: Vec<String>,
}

#[derive(Clone)]
struct TokenEntry {
    digest: [u8; 32],
    /// What logs and key scopes call the token.
    name: String,
    /// Globs over client ids; empty: every client.
    clients: Vec<String>,
    /// `role=admin`: may act in the console.
    admin: bool,
    /// What a console session cookie names the token by: the first 16
    /// hex digits of the SHA-256 of its digest (unique per token, and
    /// telling nothing about it).
    handle: String,
}

/// A token that was presented and found: what the request may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant(usize);

impl fmt::Debug for Tokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the digests, let alone the tokens.
        write!(f, "Tokens({} tokens)", self.entries.len())
    }
}

/// The name of a token without `name=`: the first 8 hex digits of its
/// SHA-256.
fn default_name(digest: &[u8; 32]) -> String {
    digest[..4].iter().map(|b| format!("{b:02x}")).collect()
}

impl Tokens {
    /// Parse a token file's text (see the module docs). `what` names the
    /// file in errors.
    pub fn parse(text: &str, what: &Path) -> Result<Tokens> {
        let mut entries: Vec<TokenEntry> = Vec::new();
        // The line each entry came from, for the duplicate message.
        let mut lines: Vec<usize> = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let n = n + 1;
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut words = line.split_whitespace();
            let Some(token) = words.next() else { continue };
            let chars = token.chars().count();
            if chars < MIN_TOKEN_LEN {
                return Err(Error::Config {
                    detail: format!(
                        "the token file {}, line {n}: the token is {chars} character(s) long; a \
                         token must have at least {MIN_TOKEN_LEN}, or it can be guessed",
                        what.display()
                    ),
                    hint: "generate tokens with `openssl rand -hex 32`".into(),
                });
            }
            let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
            let mut name = None;
            let mut admin = None;
            let mut clients = Vec::new();
            for word in words {
                if let Some(v) = word.strip_prefix("role=") {
                    if admin.is_some() {
                        return Err(bad_file(
                            what,
                            format!("line {n}: more than one role= on one line"),
                        ));
                    }
                    if v != "admin" {
                        return Err(bad_file(
                            what,
                            format!(
                                "line {n}: the only role is role=admin (a token without it \
                                 pushes and reads the console)"
                            ),
                        ));
                    }
                    admin = Some(true);
                    continue;
                }
                if let Some(v) = word.strip_prefix("name=") {
                    if name.is_some() {
                        return Err(bad_file(
                            what,
                            format!("line {n}: more than one name= on one line"),
                        ));
                    }
                    if v.is_empty()
                        || v.len() > MAX_NAME_LEN
                        || !v
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
                    {
                        return Err(bad_file(
                            what,
                            format!(
                                "line {n}: a name= holds 1 to {MAX_NAME_LEN} of A-Z a-z 0-9 . _ -"
                            ),
                        ));
                    }
                    name = Some(v.to_string());
                    continue;
                }
                if !word.bytes().all(|b| {
                    b.is_ascii_alphanumeric()
                        || matches!(b, b'.' | b'_' | b':' | b'-' | b'*' | b'?')
                }) {
                    return Err(bad_file(
                        what,
                        format!(
                            "line {n}: a client glob may hold only A-Z a-z 0-9 . _ : - * ? \
                             (and name=NAME names the token)"
                        ),
                    ));
                }
                clients.push(word.to_string());
            }
            if let Some(i) = entries.iter().position(|e| e.digest == digest) {
                return Err(Error::Config {
                    detail: format!(
                        "the token file {}: line {n} repeats the token of line {}; a token is \
                         listed once, or only one line's client globs would apply",
                        what.display(),
                        lines[i]
                    ),
                    hint: "put the token on one line, followed by every client glob it may push \
                           as"
                    .into(),
                });
            }
            let handle: [u8; 32] = Sha256::digest(digest).into();
            entries.push(TokenEntry {
                name: name.unwrap_or_else(|| default_name(&digest)),
                digest,
                clients,
                admin: admin.unwrap_or(false),
                handle: handle[..8].iter().map(|b| format!("{b:02x}")).collect(),
            });
            lines.push(n);
        }
        if entries.is_empty() {
            return Err(bad_file(
                what,
                "it holds no token (one token per line, optionally followed by client globs)",
            ));
        }
        Ok(Tokens {
            entries,
            warnings: Vec::new(),
        })
    }

    /// Read and parse the token file at `path`; a file that group or
    /// others may read gives a warning ([`Tokens::warnings`]).
    pub fn load(path: &Path) -> Result<Tokens> {
        if path.is_dir() {
            return Err(bad_file(path, "it is a directory"));
        }
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, "read the token file", e))?;
        let text = String::from_utf8(bytes).map_err(|_| bad_file(path, "it is not UTF-8 text"))?;
        let mut tokens = Tokens::parse(&text, path)?;
        tokens.warnings.extend(loose_permissions(
            path,
            "token file",
            "whoever can read it can use its tokens",
        ));
        Ok(tokens)
    }

    /// What is allowed but unwise about where the tokens came from (a
    /// token file readable by group or others), one line each, for the
    /// operator.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
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

    /// The name of the token behind `grant` (its `name=`, or the first 8
    /// hex digits of its SHA-256).
    pub fn name(&self, grant: Grant) -> &str {
        self.entries.get(grant.0).map_or("", |e| e.name.as_str())
    }

    /// True when the token behind `grant` has `role=admin`: it may act
    /// in the console.
    pub fn is_admin(&self, grant: Grant) -> bool {
        self.entries.get(grant.0).is_some_and(|e| e.admin)
    }

    /// The handle a console session names the token behind `grant` by.
    pub(crate) fn handle(&self, grant: Grant) -> &str {
        self.entries.get(grant.0).map_or("", |e| e.handle.as_str())
    }

    /// The token whose handle is `handle`.
    pub(crate) fn by_handle(&self, handle: &str) -> Option<Grant> {
        self.entries
            .iter()
            .position(|e| e.handle == handle)
            .map(Grant)
    }

    /// The secret that signs the console sessions of the token behind
    /// `grant`: its digest, known only to whoever holds the token file.
    /// Every server reading the same file signs alike (no sticky
    /// sessions); a token taken out of the file ends its sessions.
    pub(crate) fn session_key(&self, grant: Grant) -> &[u8] {
        self.entries.get(grant.0).map_or(&[][..], |e| &e.digest[..])
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

/// A warning when the secret file at `path` (`what`: "token file", "TLS
/// key"; `risk`: what a reader could do) may be read by group or others;
/// `None` when it may not, or when its mode cannot be read (reading it
/// will say why).
pub fn loose_permissions(path: &Path, what: &str, risk: &str) -> Option<String> {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(path).ok()?.permissions().mode();
    (mode & 0o044 != 0).then(|| {
        format!(
            "the {what} {} is readable by {} (mode {:04o}): {risk}; chmod 600 it",
            path.display(),
            match (mode & 0o040 != 0, mode & 0o004 != 0) {
                (true, true) => "group and others",
                (true, false) => "its group",
                _ => "others",
            },
            mode & 0o7777
        )
    })
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

    use crate::error::ErrorKind;

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
    fn admin_roles_and_session_handles() {
        let t = parse("alpha-token-0123456789 role=admin edge-*\nbeta-token-0123456789 name=ro\n")
            .unwrap();
        let a = t.authenticate(b"alpha-token-0123456789").unwrap();
        let b = t.authenticate(b"beta-token-0123456789").unwrap();
        assert!(t.is_admin(a) && !t.is_admin(b));
        assert!(t.may_act_as(a, "edge-1") && !t.may_act_as(a, "role=admin"));
        assert_eq!(t.handle(a).len(), 16);
        assert_ne!(t.handle(a), t.handle(b));
        assert_eq!(t.by_handle(t.handle(b)), Some(b));
        assert_eq!(t.by_handle("0000000000000000"), None);
        assert_ne!(t.session_key(a), t.session_key(b));
        for bad in [
            "alpha-token-0123456789 role=root",
            "alpha-token-0123456789 role=admin role=admin",
        ] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(e.contains("line 1: ") && e.contains("role="), "{e}");
        }
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
            "secret-token-0123456 name=",
            "secret-token-0123456 name=a:b",
            "secret-token-0123456 name=a name=b",
            &format!("secret-token-0123456 name={}", "n".repeat(65)),
        ] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(e.contains("line 1: ") && e.contains("name="), "{e}");
            assert!(!e.contains("secret"), "{e}");
        }
    }

    #[test]
    fn bad_files_name_the_line_never_the_token() {
        for (text, want, kind) in [
            ("", "holds no token", ErrorKind::Data),
            ("# only\n\n", "holds no token", ErrorKind::Data),
            ("secret-token-0123456 edge/1\n", "line 1", ErrorKind::Data),
            (
                "secret-token-0123456 name=a name=b\n",
                "line 1: more than one name=",
                ErrorKind::Data,
            ),
            (
                "secret-token-0123456 name=a:b\n",
                "line 1: a name=",
                ErrorKind::Data,
            ),
            (
                "secret-token-0123456 name=\n",
                "line 1: a name=",
                ErrorKind::Data,
            ),
            (
                "# one\nsecret\n",
                "line 2: the token is 6 character(s) long; a token must have at least 16",
                ErrorKind::Config,
            ),
            (
                "secret-token-0123456 edge-*\n\nsecret-token-0123456 site-*\n",
                "line 3 repeats the token of line 1",
                ErrorKind::Config,
            ),
        ] {
            let e = parse(text).unwrap_err();
            assert_eq!(e.kind(), kind, "{e}");
            let e = e.to_string();
            assert!(e.contains(want), "{e}");
            assert!(!e.contains("secret"), "{e}");
        }
        assert!(format!("{:?}", parse("secret-token-0123456").unwrap()).contains("1 tokens"));
        // Exactly the minimum length is enough.
        parse(&"x".repeat(MIN_TOKEN_LEN)).unwrap();
    }

    #[test]
    fn names_given_or_from_the_digest() {
        let t = parse(
            "alpha-token-0123456789 name=edge.site-a_1 edge-*\nbeta-token-0123456789\n\
             gamma-token-0123456789 name=edge.site-a_1\n",
        )
        .unwrap();
        let a = t.authenticate(b"alpha-token-0123456789").unwrap();
        let b = t.authenticate(b"beta-token-0123456789").unwrap();
        let c = t.authenticate(b"gamma-token-0123456789").unwrap();
        assert_eq!(t.name(a), "edge.site-a_1");
        assert_eq!(t.name(c), "edge.site-a_1", "two tokens may share a name");
        let digest = Sha256::digest(b"beta-token-0123456789");
        let want: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(t.name(b), want);
        assert_eq!(t.name(b).len(), 8);
        // name= is not a glob: the token still acts as edge-* only.
        assert!(t.may_act_as(a, "edge-1"));
        assert!(!t.may_act_as(a, "name=edge.site-a_1"));
        assert!(t.may_act_as(c, "anything"));
    }

    #[test]
    fn credentials_directory_without_a_readable_token_file_is_refused() {
        use std::os::unix::fs::symlink;
        assert!(credential_token_file(None).unwrap().is_none());
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(CREDENTIAL_NAME);
        let refused = |want: &str| {
            let e = credential_token_file(Some(dir.path())).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Config, "{e}");
            assert!(e.to_string().contains(want), "{e}");
        };
        refused("it does not exist");
        symlink(dir.path().join("nowhere"), &file).unwrap();
        refused("a symbolic link to nothing");
        std::fs::remove_file(&file).unwrap();
        std::fs::create_dir(&file).unwrap();
        refused("it is a directory");
        std::fs::remove_dir(&file).unwrap();
        std::fs::write(&file, "alpha-token-0123456789\n").unwrap();
        assert_eq!(
            credential_token_file(Some(dir.path())).unwrap().as_deref(),
            Some(file.as_path())
        );
    }

    #[test]
    fn loose_modes_are_named() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("tokens");
        std::fs::write(&f, "alpha-token-0123456789\n").unwrap();
        for (mode, want) in [
            (0o600, None),
            (0o400, None),
            (0o640, Some("readable by its group (mode 0640)")),
            (0o604, Some("readable by others (mode 0604)")),
            (0o644, Some("readable by group and others (mode 0644)")),
        ] {
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
            let w = Tokens::load(&f).unwrap().warnings().first().cloned();
            match want {
                None => assert_eq!(w, None),
                Some(want) => {
                    let w = w.unwrap();
                    assert!(w.contains(want) && w.contains("chmod 600"), "{w}");
                }
            }
        }
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
