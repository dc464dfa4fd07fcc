//! The digest of an entry (SHA-256 over its key and payload) and the
//! one form it takes on the wire.

use sha2::{Digest as _, Sha256};

/// The length of a digest in its one accepted form: `sha256:` + 64 hex.
const DIGEST_LEN: usize = 7 + 64;

/// The digest of an entry: `sha256:` followed by the 64 lowercase hex
/// digits of SHA-256 over the key's UTF-8 bytes, one `0x00` byte, and the
/// payload bytes.
///
/// The zero byte keeps key and payload apart: `("ab", "c")` and
/// `("a", "bc")` have different digests. It can do so because no key
/// holds a NUL byte ([`crate::item::key_problem`]): the receiver refuses
/// an entry whose key does, since `("a\0b", "x")` and `("a", "b\0x")`
/// would share a digest.
///
/// ```
/// assert_eq!(
///     spool::push::wire::digest("", b""),
///     "sha256:6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"
/// );
/// ```
pub fn digest(key: &str, payload: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut h = Sha256::new();
    h.update(key.as_bytes());
    h.update([0u8]);
    h.update(payload);
    let mut out = String::with_capacity(DIGEST_LEN);
    out.push_str("sha256:");
    for b in h.finalize() {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0x0f)]));
    }
    out
}

/// True when `s` has the one form a digest may take on the wire.
pub fn is_well_formed_digest(s: &str) -> bool {
    s.len() == DIGEST_LEN
        && s.starts_with("sha256:")
        && s.bytes()
            .skip(7)
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::push::wire::tests::D;

    #[test]
    fn digest_test_vectors() {
        // sha256 of the single byte 0x00.
        assert_eq!(digest("", b""), D);
        // printf 'order-7\0hello' | sha256sum
        assert_eq!(
            digest("order-7", b"hello"),
            "sha256:2cdbf6d71067c493f43f4b5072c0d0353ac7392b6c7da9440c97207595bc6486"
        );
        // printf 'k\0\xff\x00' | sha256sum
        assert_eq!(
            digest("k", b"\xff\x00"),
            "sha256:e7b82bc6304a6c41afdc9960a1757422b672cb2b744e243b538b4684477bf0c9"
        );
        assert_ne!(digest("ab", b"c"), digest("a", b"bc"));
        assert!(is_well_formed_digest(&digest("x", b"y")));
        assert!(!is_well_formed_digest(&D.to_uppercase()));
        assert!(!is_well_formed_digest(&D[..70]));
    }
}
