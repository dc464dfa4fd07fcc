//! [`TlsFailure`]: why a TLS connection failed, classified from the
//! errors of rustls, WebPKI and ureq and worded without their internal
//! names.

use super::verify::CaPresentedAsOwn;
use rustls::pki_types::UnixTime;
use rustls::{AlertDescription, CertificateError, InvalidMessage, OtherError};
use std::fmt;
use std::io;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Names of the server a certificate was for, quoted in a name mismatch.
const NAMES_SHOWN: usize = 4;

/// Why a TLS connection failed, as a person needs to know it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TlsFailure {
    /// The chain does not end at a trusted root: a private CA that is not
    /// trusted here, or a self-signed certificate.
    UnknownIssuer,
    /// The certificate is for other names than the server's.
    NameMismatch {
        /// The names the certificate holds (when known).
        presented: Vec<String>,
    },
    /// The certificate's validity ended.
    Expired {
        /// Its `notAfter` (when known).
        not_after: Option<SystemTime>,
    },
    /// The certificate's validity has not begun.
    NotValidYet {
        /// Its `notBefore` (when known).
        not_before: Option<SystemTime>,
    },
    /// The certificate was revoked.
    Revoked,
    /// The server presented a CA certificate (`CA:TRUE`, as `openssl req
    /// -x509` makes by default) as its own, and it is not one of the
    /// `--cacert` certificates (which would pin it).
    CaAsOwn {
        /// It is its own issuer (self-signed): not trusted either.
        self_signed: bool,
    },
    /// Another certificate problem.
    BadCertificate(String),
    /// Another TLS failure (no common protocol version or cipher, an
    /// alert from the server, a malformed message).
    Other(String),
}

fn system_time(t: UnixTime) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(t.as_secs())
}

fn bad(what: &str) -> TlsFailure {
    TlsFailure::BadCertificate(what.to_string())
}

impl TlsFailure {
    /// Classify a rustls error; every kind is worded, never shown by its
    /// internal name.
    pub fn of_rustls(e: &rustls::Error) -> TlsFailure {
        use rustls::Error as E;
        let c = match e {
            E::InvalidCertificate(c) => c,
            E::AlertReceived(alert) => return TlsFailure::Other(alert_words(*alert)),
            E::InvalidMessage(InvalidMessage::InvalidContentType) => {
                return TlsFailure::Other(
                    "the server did not answer in TLS (is it an http:// server?)".into(),
                )
            }
            E::InvalidMessage(m) => {
                return TlsFailure::Other(format!(
                    "the server sent a malformed TLS message ({})",
                    words(&format!("{m:?}"))
                ))
            }
            E::InappropriateMessage { .. } | E::InappropriateHandshakeMessage { .. } => {
                return TlsFailure::Other("the server sent an unexpected TLS message".into())
            }
            E::PeerIncompatible(p) => {
                return TlsFailure::Other(format!(
                    "the server has no TLS settings in common with spool ({})",
                    words(&format!("{p:?}"))
                ))
            }
            E::PeerMisbehaved(p) => {
                return TlsFailure::Other(format!(
                    "the server broke the TLS protocol ({})",
                    words(&format!("{p:?}"))
                ))
            }
            E::NoCertificatesPresented => {
                return TlsFailure::Other("the server presented no certificate".into())
            }
            E::DecryptError => {
                return TlsFailure::Other("cannot decrypt the server's TLS messages".into())
            }
            E::General(m) => return TlsFailure::Other(m.clone()),
            E::InvalidCertRevocationList(r) => {
                return TlsFailure::Other(format!(
                    "invalid certificate revocation list ({})",
                    words(&format!("{r:?}"))
                ))
            }
            E::InvalidEncryptedClientHello(x) => {
                return TlsFailure::Other(format!(
                    "encrypted client hello failed ({})",
                    words(&format!("{x:?}"))
                ))
            }
            E::InconsistentKeys(k) => {
                return TlsFailure::Other(format!(
                    "inconsistent TLS keys ({})",
                    words(&format!("{k:?}"))
                ))
            }
            E::Other(OtherError(inner)) => return TlsFailure::Other(words_of_error(&**inner)),
            // The others' texts are words already ("handshake not
            // complete", "failed to get current time", …).
            other => return TlsFailure::Other(other.to_string()),
        };
        use CertificateError as C;
        match c {
            C::UnknownIssuer => TlsFailure::UnknownIssuer,
            C::NotValidForName => TlsFailure::NameMismatch {
                presented: Vec::new(),
            },
            C::NotValidForNameContext { presented, .. } => TlsFailure::NameMismatch {
                presented: presented.iter().filter_map(|n| shown_name(n)).collect(),
            },
            C::Expired => TlsFailure::Expired { not_after: None },
            C::ExpiredContext { not_after, .. } => TlsFailure::Expired {
                not_after: Some(system_time(*not_after)),
            },
            C::NotValidYet => TlsFailure::NotValidYet { not_before: None },
            C::NotValidYetContext { not_before, .. } => TlsFailure::NotValidYet {
                not_before: Some(system_time(*not_before)),
            },
            C::Revoked => TlsFailure::Revoked,
            // The trusted certificate with the issuer's name has another
            // key: not the issuer after all.
            C::BadSignature | C::UnsupportedSignatureAlgorithmForPublicKeyContext { .. } => bad(
                "certificate's signature does not verify with the key of the trusted CA \
                 of its issuer's name (another CA, or a self-signed certificate, with the \
                 same name?)",
            ),
            C::BadEncoding => bad("certificate is malformed (not valid DER)"),
            C::UnhandledCriticalExtension => {
                bad("certificate has a critical extension that is not supported")
            }
            C::UnknownRevocationStatus => bad("certificate's revocation status is unknown"),
            C::ExpiredRevocationList | C::ExpiredRevocationListContext { .. } => {
                bad("the certificate revocation list has expired")
            }
            C::UnsupportedSignatureAlgorithmContext { .. } => {
                bad("certificate is signed with an algorithm that is not supported")
            }
            C::InvalidPurpose | C::InvalidPurposeContext { .. } => bad(
                "certificate is not for a TLS server (its extended key usage lacks server \
                 authentication)",
            ),
            C::InvalidOcspResponse => bad("the server's OCSP response is invalid"),
            C::ApplicationVerificationFailure => bad("certificate was refused"),
            C::Other(OtherError(inner)) => {
                if let Some(own) = inner.downcast_ref::<CaPresentedAsOwn>() {
                    TlsFailure::CaAsOwn {
                        self_signed: own.self_signed,
                    }
                } else if let Some(w) = inner.downcast_ref::<webpki::Error>() {
                    TlsFailure::of_webpki(w)
                } else {
                    TlsFailure::BadCertificate(format!(
                        "certificate refused: {}",
                        words_of_error(&**inner)
                    ))
                }
            }
            #[allow(deprecated)]
            C::UnsupportedSignatureAlgorithm => {
                bad("certificate is signed with an algorithm that is not supported")
            }
            other => TlsFailure::BadCertificate(format!(
                "certificate refused ({})",
                words(&format!("{other:?}"))
            )),
        }
    }

    /// Classify a WebPKI error (rustls passes on those it has no kind
    /// for inside an `OtherError`).
    fn of_webpki(e: &webpki::Error) -> TlsFailure {
        use webpki::Error as W;
        match e {
            W::CaUsedAsEndEntity => TlsFailure::CaAsOwn { self_signed: false },
            W::UnknownIssuer => TlsFailure::UnknownIssuer,
            W::CertRevoked => TlsFailure::Revoked,
            W::CertExpired { not_after, .. } => TlsFailure::Expired {
                not_after: Some(system_time(*not_after)),
            },
            W::CertNotValidYet { not_before, .. } => TlsFailure::NotValidYet {
                not_before: Some(system_time(*not_before)),
            },
            W::InvalidCertValidity => bad("certificate's validity period ends before it begins"),
            W::CertNotValidForName(_) => TlsFailure::NameMismatch {
                presented: Vec::new(),
            },
            W::BadDer | W::BadDerTime | W::TrailingData(_) => {
                bad("certificate is malformed (not valid DER)")
            }
            W::CertDistrusted => bad("certificate's key is explicitly distrusted"),
            W::EmptyEkuExtension => bad("certificate's extended key usage extension is empty"),
            W::EndEntityUsedAsCa => bad(
                "a certificate of the chain is used as a CA but is not a CA certificate (CA:FALSE)",
            ),
            W::ExtensionValueInvalid | W::MalformedExtensions => {
                bad("certificate has a malformed extension")
            }
            W::InvalidNetworkMaskConstraint | W::MalformedNameConstraint => {
                bad("a CA of the chain has a malformed name constraint")
            }
            W::NameConstraintViolation => {
                bad("certificate names a host its CA is not allowed to certify")
            }
            W::InvalidSerialNumber => bad("certificate's serial number is invalid"),
            W::MalformedDnsIdentifier => bad("a DNS name in the certificate is malformed"),
            W::MaximumNameConstraintComparisonsExceeded
            | W::MaximumPathBuildCallsExceeded
            | W::MaximumPathDepthExceeded
            | W::MaximumSignatureChecksExceeded => {
                bad("the certificate chain is too long or too complex to verify")
            }
            W::PathLenConstraintViolated => {
                bad("the certificate chain is longer than a CA of it allows")
            }
            W::InvalidSignatureForPublicKey => bad("certificate's signature does not verify"),
            W::SignatureAlgorithmMismatch => {
                bad("certificate's two signature algorithm fields disagree")
            }
            W::UnsupportedCertVersion => bad("certificate is not an X.509 version 3 certificate"),
            W::UnsupportedCriticalExtension => {
                bad("certificate has a critical extension that is not supported")
            }
            W::UnsupportedNameType => bad("the server's name is of a kind that is not supported"),
            W::RequiredEkuNotFoundContext(_) => bad(
                "certificate is not for a TLS server (its extended key usage lacks server \
                 authentication)",
            ),
            W::UnsupportedSignatureAlgorithmContext(_)
            | W::UnsupportedSignatureAlgorithmForPublicKeyContext(_) => {
                bad("certificate is signed with an algorithm that is not supported")
            }
            W::UnknownRevocationStatus => bad("certificate's revocation status is unknown"),
            other => TlsFailure::BadCertificate(format!(
                "certificate refused ({})",
                words(&format!("{other:?}"))
            )),
        }
    }

    /// The TLS failure behind a ureq error, if it is one: rustls reports
    /// handshake failures inside an I/O error, ureq some directly.
    pub fn of_ureq(e: &ureq::Error) -> Option<TlsFailure> {
        match e {
            ureq::Error::Rustls(r) => Some(TlsFailure::of_rustls(r)),
            ureq::Error::Tls(m) => Some(TlsFailure::Other((*m).to_string())),
            ureq::Error::Io(io) => find_rustls(io).map(TlsFailure::of_rustls),
            _ => None,
        }
    }
}

/// A TLS alert from the server, in words.
fn alert_words(alert: AlertDescription) -> String {
    let why = match alert {
        AlertDescription::HandshakeFailure => {
            " (no TLS version or cipher suite in common, or it wants a client certificate)"
        }
        AlertDescription::ProtocolVersion => " (no TLS version in common)",
        AlertDescription::CertificateRequired => {
            " (it wants a client certificate; spool sends none)"
        }
        AlertDescription::UnrecognisedName => " (it does not serve this host name)",
        _ => "",
    };
    format!(
        "the server refused the connection with the TLS alert \"{}\"{why}",
        words(&format!("{alert:?}"))
    )
}

/// A name as Rust's `Debug` shows it (`CaUsedAsEndEntity`,
/// `HandshakeFailure`, `Unknown(42)`: the leading identifier) in
/// lower-case words: `ca used as end entity`.
fn words(debug: &str) -> String {
    let mut out = String::new();
    let mut after_lower = false;
    for c in debug.chars().take_while(char::is_ascii_alphanumeric) {
        if c.is_ascii_uppercase() {
            if after_lower {
                out.push(' ');
            }
            out.push(c.to_ascii_lowercase());
            after_lower = false;
        } else {
            out.push(c);
            after_lower = true;
        }
    }
    out
}

/// An error of unknown type in words: its text when that is words
/// (more than a bare identifier), else the identifier split into words.
fn words_of_error(e: &(dyn std::error::Error + 'static)) -> String {
    let text = e.to_string();
    if let Some(w) = e.downcast_ref::<webpki::Error>() {
        return TlsFailure::of_webpki(w).to_string();
    }
    if text.contains(' ') {
        text
    } else {
        words(&text)
    }
}

/// A DNS name or IP address of a certificate, from the form webpki
/// reports it in (`DnsName("a.example")`, `IpAddress(127.0.0.1)`); other
/// kinds of names are left out.
fn shown_name(reported: &str) -> Option<String> {
    let inner = |prefix: &str| {
        reported
            .strip_prefix(prefix)
            .and_then(|r| r.strip_suffix(')'))
            .map(|v| v.trim_matches('"').to_string())
    };
    inner("DnsName(").or_else(|| inner("IpAddress("))
}

/// The rustls error inside `e`, looking through nested I/O errors (whose
/// `source()` skips the error they wrap).
fn find_rustls(e: &io::Error) -> Option<&rustls::Error> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = e.get_ref().map(|i| i as _);
    for _ in 0..8 {
        let cur = next?;
        if let Some(r) = cur.downcast_ref::<rustls::Error>() {
            return Some(r);
        }
        next = match cur.downcast_ref::<io::Error>() {
            Some(io) => io.get_ref().map(|i| i as _),
            None => cur.source(),
        };
    }
    None
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

impl fmt::Display for TlsFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsFailure::UnknownIssuer => f.write_str("certificate is signed by an unknown issuer"),
            TlsFailure::NameMismatch { presented } if presented.is_empty() => {
                f.write_str("certificate is not valid for this host name (name mismatch)")
            }
            TlsFailure::NameMismatch { presented } => {
                let mut names = presented
                    .iter()
                    .take(NAMES_SHOWN)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ");
                if presented.len() > NAMES_SHOWN {
                    names.push_str(&format!(", and {} more", presented.len() - NAMES_SHOWN));
                }
                write!(
                    f,
                    "certificate is not valid for this host name (name mismatch: it is for {names})"
                )
            }
            TlsFailure::Expired { not_after: None } => f.write_str("certificate has expired"),
            TlsFailure::Expired { not_after: Some(t) } => {
                write!(f, "certificate has expired (valid until {})", rfc3339(*t))
            }
            TlsFailure::NotValidYet { not_before: None } => {
                f.write_str("certificate is not valid yet")
            }
            TlsFailure::NotValidYet {
                not_before: Some(t),
            } => write!(
                f,
                "certificate is not valid yet (valid from {})",
                rfc3339(*t)
            ),
            TlsFailure::Revoked => f.write_str("certificate has been revoked"),
            TlsFailure::CaAsOwn { self_signed: true } => f.write_str(
                "certificate is self-signed (unknown issuer) and is a CA certificate (CA:TRUE) \
                 presented as the server's own",
            ),
            TlsFailure::CaAsOwn { self_signed: false } => {
                f.write_str("the server presented a CA certificate (CA:TRUE) as its own")
            }
            TlsFailure::BadCertificate(m) | TlsFailure::Other(m) => f.write_str(m),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::test_certs::cert_error;
    use crate::tls::TrustedRoots;
    use rustls::pki_types::ServerName;
    use std::sync::Arc;

    #[test]
    fn failures_are_classified_and_worded() {
        let t = |secs: u64| UnixTime::since_unix_epoch(Duration::from_secs(secs));
        let cases = [
            (
                cert_error(CertificateError::UnknownIssuer),
                "certificate is signed by an unknown issuer",
            ),
            (
                cert_error(CertificateError::NotValidForNameContext {
                    expected: ServerName::try_from("localhost").unwrap(),
                    presented: vec![
                        "DnsName(\"a.example\")".into(),
                        "IpAddress(10.0.0.1)".into(),
                        "DirectoryName".into(),
                    ],
                }),
                "certificate is not valid for this host name (name mismatch: it is for a.example, 10.0.0.1)",
            ),
            (
                cert_error(CertificateError::NotValidForName),
                "certificate is not valid for this host name (name mismatch)",
            ),
            (
                cert_error(CertificateError::ExpiredContext {
                    time: t(1_000_000_000),
                    not_after: t(978_307_200),
                }),
                "certificate has expired (valid until 2001-01-01T00:00:00Z)",
            ),
            (
                cert_error(CertificateError::Expired),
                "certificate has expired",
            ),
            (
                cert_error(CertificateError::NotValidYetContext {
                    time: t(0),
                    not_before: t(978_307_200),
                }),
                "certificate is not valid yet (valid from 2001-01-01T00:00:00Z)",
            ),
            (
                cert_error(CertificateError::Revoked),
                "certificate has been revoked",
            ),
            (
                cert_error(CertificateError::BadSignature),
                "certificate's signature does not verify",
            ),
            (
                rustls::Error::AlertReceived(rustls::AlertDescription::HandshakeFailure),
                "the server refused the connection with the TLS alert \"handshake failure\" (no TLS version or cipher suite in common",
            ),
        ];
        for (e, text) in cases {
            let f = TlsFailure::of_rustls(&e);
            assert!(f.to_string().starts_with(text), "{e:?}: {f}");
        }
        let many = TlsFailure::NameMismatch {
            presented: (1..=6).map(|n| format!("h{n}.example")).collect(),
        };
        assert!(
            many.to_string().ends_with("h4.example, and 2 more)"),
            "{many}"
        );
    }

    #[test]
    fn rustls_errors_are_found_inside_io_errors() {
        let inner = io::Error::new(
            io::ErrorKind::InvalidData,
            cert_error(CertificateError::UnknownIssuer),
        );
        let e = ureq::Error::Io(inner);
        assert_eq!(TlsFailure::of_ureq(&e), Some(TlsFailure::UnknownIssuer));
        let nested = io::Error::other(io::Error::new(
            io::ErrorKind::InvalidData,
            cert_error(CertificateError::Revoked),
        ));
        assert_eq!(
            TlsFailure::of_ureq(&ureq::Error::Io(nested)),
            Some(TlsFailure::Revoked)
        );
        let plain = ureq::Error::Io(io::Error::from(io::ErrorKind::ConnectionRefused));
        assert_eq!(TlsFailure::of_ureq(&plain), None);
        assert_eq!(TlsFailure::of_ureq(&ureq::Error::HostNotFound), None);
    }

    /// Text with a word like `CaUsedAsEndEntity` or `OtherError`: a
    /// lower-case letter followed by an upper-case one.
    fn has_debug_name(text: &str) -> bool {
        text.as_bytes()
            .windows(2)
            .any(|w| w[0].is_ascii_lowercase() && w[1].is_ascii_uppercase())
            || text.contains("Other(")
    }

    #[test]
    fn no_failure_is_shown_by_an_internal_name() {
        let webpki_errors = [
            webpki::Error::CaUsedAsEndEntity,
            webpki::Error::BadDer,
            webpki::Error::CertDistrusted,
            webpki::Error::EmptyEkuExtension,
            webpki::Error::EndEntityUsedAsCa,
            webpki::Error::ExtensionValueInvalid,
            webpki::Error::InvalidCrlNumber,
            webpki::Error::InvalidNetworkMaskConstraint,
            webpki::Error::InvalidSerialNumber,
            webpki::Error::MalformedDnsIdentifier,
            webpki::Error::MalformedExtensions,
            webpki::Error::MalformedNameConstraint,
            webpki::Error::MaximumPathDepthExceeded,
            webpki::Error::NameConstraintViolation,
            webpki::Error::PathLenConstraintViolated,
            webpki::Error::SignatureAlgorithmMismatch,
            webpki::Error::UnsupportedCertVersion,
            webpki::Error::UnsupportedCriticalExtension,
            webpki::Error::UnsupportedCrlVersion,
            webpki::Error::UnsupportedDeltaCrl,
            webpki::Error::UnsupportedNameType,
        ];
        let mut errors: Vec<rustls::Error> = webpki_errors
            .into_iter()
            .map(|w| cert_error(CertificateError::Other(OtherError(Arc::new(w)))))
            .collect();
        errors.extend([
            cert_error(CertificateError::BadEncoding),
            cert_error(CertificateError::UnhandledCriticalExtension),
            cert_error(CertificateError::InvalidPurpose),
            cert_error(CertificateError::ApplicationVerificationFailure),
            cert_error(CertificateError::UnknownRevocationStatus),
            cert_error(CertificateError::Other(OtherError(Arc::new(
                io::Error::other("SomethingElse"),
            )))),
            rustls::Error::AlertReceived(AlertDescription::UnknownCA),
            rustls::Error::AlertReceived(AlertDescription::Unknown(200)),
            rustls::Error::InvalidMessage(InvalidMessage::InvalidContentType),
            rustls::Error::InvalidMessage(InvalidMessage::HandshakePayloadTooLarge),
            rustls::Error::PeerIncompatible(rustls::PeerIncompatible::NoCipherSuitesInCommon),
            rustls::Error::PeerMisbehaved(rustls::PeerMisbehaved::IncorrectBinder),
            rustls::Error::InappropriateHandshakeMessage {
                expect_types: vec![rustls::HandshakeType::ServerHello],
                got_type: rustls::HandshakeType::Finished,
            },
            rustls::Error::NoCertificatesPresented,
            rustls::Error::Other(OtherError(Arc::new(webpki::Error::BadDerTime))),
        ]);
        let roots = TrustedRoots::without_roots(1, Vec::new());
        for e in errors {
            let f = TlsFailure::of_rustls(&e);
            let text = roots
                .explain("h:1", &ureq::Error::Rustls(e.clone()))
                .unwrap();
            assert!(!has_debug_name(&f.to_string()), "{e:?}: {f}");
            assert!(
                !text.contains("Other") && !text.contains("CaUsedAsEndEntity"),
                "{text}"
            );
        }
        assert_eq!(words("CaUsedAsEndEntity"), "ca used as end entity");
        assert_eq!(words("Unknown(200)"), "unknown");
        assert_eq!(
            TlsFailure::of_rustls(&cert_error(CertificateError::Other(OtherError(Arc::new(
                webpki::Error::CaUsedAsEndEntity
            ))))),
            TlsFailure::CaAsOwn { self_signed: false }
        );
    }
}
