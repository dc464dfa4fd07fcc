//! Console sessions: a signed cookie, and the CSRF token that goes with
//! it.
//!
//! A browser presents a token once, on the login form; the answer sets
//! the cookie `spool_session=HANDLE.EXPIRES.MAC`, where `HANDLE` names
//! the token without revealing it ([`Tokens::handle`]), `EXPIRES` is a
//! Unix time and `MAC` an HMAC-SHA-256 over both, keyed with the token's
//! digest ([`Tokens::session_key`]). Nothing is stored on the server, so
//! any `spool serve` reading the same token file accepts the cookie (no
//! sticky sessions behind a load balancer), and taking a token out of
//! the file ends its sessions at the next restart. The CSRF token of a
//! session is an HMAC of the cookie under the same key: a page from
//! another site can neither read it nor compute it.

use crate::serve::auth::{Grant, Tokens};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::time::Duration;
use subtle::ConstantTimeEq;

/// The cookie's name.
pub(crate) const COOKIE: &str = "spool_session";

/// How long a session lasts.
pub(crate) const LIFETIME: Duration = Duration::from_secs(12 * 3600);

fn mac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
    for p in parts {
        m.update(p);
        m.update(b"\n");
    }
    m.finalize().into_bytes().into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A new session's cookie value for `grant`, valid until `now + LIFETIME`
/// (`now` in Unix seconds).
pub(crate) fn issue(tokens: &Tokens, grant: Grant, now: u64) -> String {
    let handle = tokens.handle(grant);
    let expires = now.saturating_add(LIFETIME.as_secs()).to_string();
    let sig = mac(
        tokens.session_key(grant),
        &[b"session", handle.as_bytes(), expires.as_bytes()],
    );
    format!("{handle}.{expires}.{}", hex(&sig))
}

/// The token a cookie value stands for, when its signature holds and it
/// has not expired at `now`.
pub(crate) fn verify(tokens: &Tokens, value: &str, now: u64) -> Option<Grant> {
    let mut parts = value.split('.');
    let (handle, expires, sig) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || expires.parse::<u64>().ok()? <= now {
        return None;
    }
    let grant = tokens.by_handle(handle)?;
    let want = hex(&mac(
        tokens.session_key(grant),
        &[b"session", handle.as_bytes(), expires.as_bytes()],
    ));
    bool::from(want.as_bytes().ct_eq(sig.as_bytes())).then_some(grant)
}

/// The CSRF token of the session whose cookie value is `value`.
pub(crate) fn csrf(tokens: &Tokens, grant: Grant, value: &str) -> String {
    hex(&mac(tokens.session_key(grant), &[b"csrf", value.as_bytes()])[..16])
}

/// True when `presented` is the CSRF token of the session `value`.
pub(crate) fn csrf_holds(tokens: &Tokens, grant: Grant, value: &str, presented: &str) -> bool {
    bool::from(
        csrf(tokens, grant, value)
            .as_bytes()
            .ct_eq(presented.as_bytes()),
    )
}

/// The value of cookie `name` in a `Cookie` header.
pub(crate) fn cookie<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    header.split(';').find_map(|pair| {
        let (k, v) = pair.trim().split_once('=')?;
        (k == name).then_some(v)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn tokens() -> Tokens {
        Tokens::parse(
            "alpha-token-0123456789 role=admin\nbeta-token-0123456789\n",
            Path::new("t"),
        )
        .unwrap()
    }

    #[test]
    fn a_session_names_its_token_until_it_expires() {
        let t = tokens();
        let a = t.authenticate(b"alpha-token-0123456789").unwrap();
        let b = t.authenticate(b"beta-token-0123456789").unwrap();
        let v = issue(&t, a, 1000);
        assert_eq!(verify(&t, &v, 1000), Some(a));
        assert_eq!(verify(&t, &v, 1000 + LIFETIME.as_secs()), None);
        // Another server reading the same file accepts it.
        assert_eq!(verify(&tokens(), &v, 1001), Some(a));
        // Forged: another token's handle, a later expiry, a changed MAC.
        let (_, rest) = v.split_once('.').unwrap();
        assert_eq!(verify(&t, &format!("{}.{rest}", t.handle(b)), 1000), None);
        let later = v.replacen(&(1000 + LIFETIME.as_secs()).to_string(), "99999999999", 1);
        assert_eq!(verify(&t, &later, 1000), None);
        assert_eq!(verify(&t, &format!("{v}0"), 1000), None);
        for junk in ["", ".", "..", "a.b.c", "x.1.y.z"] {
            assert_eq!(verify(&t, junk, 0), None, "{junk}");
        }
        // A token taken out of the file ends its sessions.
        let only_b = Tokens::parse("beta-token-0123456789\n", Path::new("t")).unwrap();
        assert_eq!(verify(&only_b, &v, 1000), None);
    }

    #[test]
    fn csrf_tokens_belong_to_one_session() {
        let t = tokens();
        let a = t.authenticate(b"alpha-token-0123456789").unwrap();
        let (v1, v2) = (issue(&t, a, 1000), issue(&t, a, 2000));
        let c = csrf(&t, a, &v1);
        assert!(csrf_holds(&t, a, &v1, &c));
        assert!(!csrf_holds(&t, a, &v2, &c));
        assert!(!csrf_holds(&t, a, &v1, ""));
    }

    #[test]
    fn cookies_are_found_by_name() {
        assert_eq!(
            cookie("a=1; spool_session=x.y.z; b=2", COOKIE),
            Some("x.y.z")
        );
        assert_eq!(cookie("spool_sessionx=1", COOKIE), None);
    }
}
