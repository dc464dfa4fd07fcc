//! The few facts the pinning needs of a certificate (its validity
//! period, whether it is its own issuer), read from its DER without a
//! full X.509 parser.

/// What the pinning needs of a certificate, read from its DER: the
/// validity period (seconds since the epoch) and whether it is its own
/// issuer. WebPKI has parsed the certificate already when this is asked;
/// anything malformed is `None`.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct CertFacts<'a> {
    issuer: &'a [u8],
    subject: &'a [u8],
    pub(super) not_before: i64,
    pub(super) not_after: i64,
}

/// One DER element: its tag, its contents and what follows it.
fn der(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// The DER element with `tag`, or `None`.
fn der_expect(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (t, contents, rest) = der(input)?;
    (t == tag).then_some((contents, rest))
}

const SEQUENCE: u8 = 0x30;

impl<'a> CertFacts<'a> {
    pub(super) fn parse(cert: &'a [u8]) -> Option<CertFacts<'a>> {
        // Certificate ::= SEQUENCE { tbsCertificate, signatureAlgorithm, signature }
        let (certificate, _) = der_expect(cert, SEQUENCE)?;
        let (tbs, _) = der_expect(certificate, SEQUENCE)?;
        // TBSCertificate ::= SEQUENCE { [0] version OPTIONAL, serialNumber,
        //   signature, issuer, validity, subject, ... }
        let mut rest = tbs;
        if let Some((0xa0, _, after)) = der(rest) {
            rest = after;
        }
        let (_serial, rest) = der_expect(rest, 0x02)?;
        let (_algorithm, rest) = der_expect(rest, SEQUENCE)?;
        let (issuer, rest) = der_expect(rest, SEQUENCE)?;
        let (validity, rest) = der_expect(rest, SEQUENCE)?;
        let (subject, _) = der_expect(rest, SEQUENCE)?;
        let (t1, not_before, after) = der(validity)?;
        let (t2, not_after, _) = der(after)?;
        Some(CertFacts {
            issuer,
            subject,
            not_before: der_time(t1, not_before)?,
            not_after: der_time(t2, not_after)?,
        })
    }

    pub(super) fn self_signed(&self) -> bool {
        self.issuer == self.subject
    }
}

/// A UTCTime (`YYMMDDHHMMSSZ`, tag 0x17) or GeneralizedTime
/// (`YYYYMMDDHHMMSSZ`, tag 0x18) as seconds since the epoch (RFC 5280
/// 4.1.2.5: UTC, seconds present, no fractions).
pub(super) fn der_time(tag: u8, text: &[u8]) -> Option<i64> {
    let digits = text.strip_suffix(b"Z")?;
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let num = |s: &[u8]| s.iter().fold(0i64, |acc, d| acc * 10 + i64::from(d - b'0'));
    let (year, rest) = match (tag, digits.len()) {
        (0x17, 12) => {
            let yy = num(&digits[..2]);
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, &digits[2..])
        }
        (0x18, 14) => (num(&digits[..4]), &digits[4..]),
        _ => return None,
    };
    let [month, day, hour, minute, second] = [0, 2, 4, 6, 8].map(|i| num(&rest[i..i + 2]));
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    // Days from 1970-01-01 to the date (Howard Hinnant's days_from_civil).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hour * 3600 + minute * 60 + second)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::test_certs::openssl_like;

    #[test]
    fn certificate_facts_are_read_from_der_and_junk_is_none() {
        let own = openssl_like(&["localhost"], 2000, 2001);
        let facts = CertFacts::parse(&own.der).unwrap();
        assert_eq!(facts.not_before, 946_684_800);
        assert_eq!(facts.not_after, 978_307_200);
        assert!(facts.self_signed());
        // rcgen writes GeneralizedTime from 2050 on.
        let late = openssl_like(&["localhost"], 2049, 2051);
        let facts = CertFacts::parse(&late.der).unwrap();
        assert_eq!(facts.not_after, 2_556_144_000);
        // Cut anywhere, or junk: no panic, no facts.
        for n in 0..own.der.len() {
            assert_eq!(CertFacts::parse(&own.der[..n]), None, "cut at {n}");
        }
        assert_eq!(CertFacts::parse(b"\x30\x84\xff\xff\xff\xff"), None);
        assert_eq!(CertFacts::parse(b"\x30\x80"), None);
    }

    #[test]
    pub(super) fn der_times_are_utc_seconds() {
        assert_eq!(der_time(0x17, b"700101000000Z"), Some(0));
        assert_eq!(der_time(0x17, b"000101000000Z"), Some(946_684_800));
        assert_eq!(der_time(0x17, b"491231235959Z"), Some(2_524_607_999));
        assert_eq!(der_time(0x17, b"500101000000Z"), Some(-631_152_000));
        assert_eq!(der_time(0x18, b"20500101000000Z"), Some(2_524_608_000));
        assert_eq!(der_time(0x18, b"20240229120000Z"), Some(1_709_208_000));
        assert_eq!(der_time(0x18, b"99991231235959Z"), Some(253_402_300_799));
        for (tag, bad) in [
            (0x17, &b"700101000000"[..]),
            (0x17, b"7001010000Z"),
            (0x17, b"701301000000Z"),
            (0x17, b"700100000000Z"),
            (0x17, b"700101240000Z"),
            (0x17, b"70010100000aZ"),
            (0x18, b"700101000000Z"),
            (0x17, b"20500101000000Z"),
            (0x04, b"700101000000Z"),
        ] {
            assert_eq!(der_time(tag, bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }
}
