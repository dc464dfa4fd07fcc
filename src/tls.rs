//! Which servers spool's HTTPS clients trust, and why a TLS connection
//! failed, in one place.
//!
//! Every HTTPS client of spool — the `--url` replay target, `watch`'s
//! `https://` probes, and any later one — takes a [`TlsTrust`] and builds
//! its TLS configuration from [`TlsTrust::load`], so that all of them
//! trust the same certificates and name failures the same way:
//!
//! * **The system's certificate store**, as curl and OpenSSL find it:
//!   `SSL_CERT_FILE` and `SSL_CERT_DIR` when set (then nothing else),
//!   otherwise the platform's usual bundle and directory
//!   (`/etc/ssl/certs/ca-certificates.crt`, `/etc/ssl/certs`, … — see
//!   `rustls-native-certs`).
//! * **Plus `--cacert FILE`**: one or more PEM certificates (a private CA,
//!   or the certificate of a self-signed `spool serve`), trusted in
//!   addition to the system store. A file that is missing, unreadable,
//!   empty, not PEM, or holds a certificate that cannot be a trust anchor
//!   is an [`Error::Io`] naming the file (kind `NotFound`,
//!   `PermissionDenied` or `Data`), returned before any connection is made.
//!
//! There is no built-in fallback list: when the system store is empty (a
//! minimal container without `ca-certificates`) and no `--cacert` is
//! given, nothing is trusted, and the failure says so
//! ([`TrustedRoots::explain`]) instead of trusting a list the operator did
//! not choose.
//!
//! Verification is rustls' WebPKI verifier (chain to a trusted root,
//! validity period, the server's DNS name or IP address); the crypto
//! provider is `ring`.
//!
//! A failed handshake becomes one line that names the cause
//! ([`TlsFailure`]: unknown issuer or self-signed, name mismatch, expired,
//! not yet valid, or another TLS error) and the server, e.g.
//! `TLS handshake with localhost:8443 failed: certificate is signed by an
//! unknown issuer (add its CA with --cacert or SSL_CERT_FILE)`. The text
//! holds the host and port only, never user info or a path, so it is safe
//! for logs and `last_error`.
//!
//! ```no_run
//! use spool::tls::TlsTrust;
//!
//! let roots = TlsTrust::with_cacert("/etc/spool/ca.pem").load()?;
//! let agent: ureq::Agent = ureq::Agent::config_builder()
//!     .tls_config(roots.ureq_tls_config())
//!     .build()
//!     .into();
//! if let Err(e) = agent.get("https://receiver.internal:8787/healthz").call() {
//!     let why = roots
//!         .explain("receiver.internal:8787", &e)
//!         .unwrap_or_else(|| e.to_string());
//!     eprintln!("{why}");
//! }
//! # Ok::<(), spool::Error>(())
//! ```

use crate::error::{Error, Result};
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::{CertificateError, RootCertStore};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Names of the server a certificate was for, quoted in a name mismatch.
const NAMES_SHOWN: usize = 4;

/// What an HTTPS client trusts: the system's certificate store, plus the
/// certificates of `cacert` when given. See the module documentation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsTrust {
    /// `--cacert FILE`: PEM certificates trusted in addition to the
    /// system store.
    pub cacert: Option<PathBuf>,
}

impl TlsTrust {
    /// Trust the system store only.
    pub fn system() -> TlsTrust {
        TlsTrust::default()
    }

    /// Trust the system store and the PEM certificates in `path`.
    pub fn with_cacert(path: impl Into<PathBuf>) -> TlsTrust {
        TlsTrust {
            cacert: Some(path.into()),
        }
    }

    /// Read and check the `--cacert` file alone (no system store): the
    /// number of certificates in it, 0 without one. For clients that
    /// check their settings before they need TLS (an `http://` URL).
    pub fn check(&self) -> Result<usize> {
        Ok(self.read_cacert()?.len())
    }

    /// Load the system store and the `--cacert` file. Problems with the
    /// system store are not errors (they are kept for
    /// [`TrustedRoots::explain`]); problems with `--cacert` are.
    pub fn load(&self) -> Result<TrustedRoots> {
        let extra = self.read_cacert()?;
        let native = rustls_native_certs::load_native_certs();
        // A system bundle may hold certificates that cannot be trust
        // anchors: rustls skips those when it builds the store.
        let system = native.certs.len();
        let problems = native.errors.iter().map(|e| e.to_string()).collect();
        let extra_count = extra.len();
        let certs: Vec<ureq::tls::Certificate<'static>> = native
            .certs
            .iter()
            .chain(&extra)
            .map(|der| ureq::tls::Certificate::from_der(der).to_owned())
            .collect();
        Ok(TrustedRoots {
            certs: Arc::new(certs),
            system,
            extra: extra_count,
            problems,
        })
    }

    fn read_cacert(&self) -> Result<Vec<CertificateDer<'static>>> {
        match &self.cacert {
            None => Ok(Vec::new()),
            Some(path) => read_pem_certificates(path),
        }
    }
}

/// An error about the `--cacert` file that is bad data (exit 65).
fn bad_cacert(path: &Path, why: impl Into<String>) -> Error {
    Error::io(
        path,
        "read --cacert file",
        io::Error::new(io::ErrorKind::InvalidData, why.into()),
    )
}

/// The certificates of a PEM file, each checked to be usable as a trust
/// anchor.
fn read_pem_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    if path.is_dir() {
        return Err(bad_cacert(
            path,
            "it is a directory (give a PEM file; for a directory of certificates set SSL_CERT_DIR)",
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, "read --cacert file", e))?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(bad_cacert(
            path,
            "the file is empty (expected PEM certificates)",
        ));
    }
    let mut certs = Vec::new();
    for item in CertificateDer::pem_slice_iter(&bytes) {
        match item {
            Ok(c) => certs.push(c),
            Err(e) => return Err(bad_cacert(path, format!("invalid PEM: {}", pem_error(&e)))),
        }
    }
    if certs.is_empty() {
        let why = if bytes.windows(11).any(|w| w == b"-----BEGIN ") {
            "no certificate in it, only other PEM sections (expected -----BEGIN CERTIFICATE-----)"
        } else {
            "not a PEM file (expected -----BEGIN CERTIFICATE----- blocks)"
        };
        return Err(bad_cacert(path, why));
    }
    for (n, c) in certs.iter().enumerate() {
        if let Err(e) = RootCertStore::empty().add(c.clone()) {
            return Err(bad_cacert(
                path,
                format!(
                    "certificate {} of {} cannot be trusted as a CA: {e}",
                    n + 1,
                    certs.len()
                ),
            ));
        }
    }
    Ok(certs)
}

fn pem_error(e: &pem::Error) -> String {
    match e {
        pem::Error::MissingSectionEnd { .. } => "a section has no END line".into(),
        pem::Error::IllegalSectionStart { .. } => "a section has a malformed BEGIN line".into(),
        pem::Error::Base64Decode(_) => "a section is not valid base64".into(),
        other => other.to_string(),
    }
}

/// The certificates an HTTPS client trusts, loaded by
/// [`TlsTrust::load`]; cheap to clone.
#[derive(Clone)]
pub struct TrustedRoots {
    certs: Arc<Vec<ureq::tls::Certificate<'static>>>,
    system: usize,
    extra: usize,
    problems: Vec<String>,
}

impl fmt::Debug for TrustedRoots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TrustedRoots")
            .field("system", &self.system)
            .field("extra", &self.extra)
            .field("problems", &self.problems)
            .finish()
    }
}

impl TrustedRoots {
    /// Certificates taken from the system store.
    pub fn system_count(&self) -> usize {
        self.system
    }

    /// Certificates taken from `--cacert`.
    pub fn cacert_count(&self) -> usize {
        self.extra
    }

    /// Why the system store gave what it gave: files or directories that
    /// could not be read (empty when all went well).
    pub fn problems(&self) -> &[String] {
        &self.problems
    }

    /// The ureq TLS configuration: rustls with `ring`, these roots and
    /// nothing else. Agents built from clones of one `TrustedRoots` may
    /// share pooled connections.
    pub fn ureq_tls_config(&self) -> ureq::tls::TlsConfig {
        ureq::tls::TlsConfig::builder()
            .provider(ureq::tls::TlsProvider::Rustls)
            .root_certs(ureq::tls::RootCerts::Specific(self.certs.clone()))
            .unversioned_rustls_crypto_provider(crypto_provider())
            .build()
    }

    /// A rustls client configuration with these roots, for a client that
    /// does not go through ureq.
    pub fn rustls_client_config(&self) -> Arc<rustls::ClientConfig> {
        let mut store = RootCertStore::empty();
        store.add_parsable_certificates(
            self.certs
                .iter()
                .map(|c| CertificateDer::from(c.der().to_vec())),
        );
        let config = rustls::ClientConfig::builder_with_provider(crypto_provider())
            .with_safe_default_protocol_versions()
            .unwrap_or_else(|e| unreachable!("ring supports the default versions: {e}"))
            .with_root_certificates(store)
            .with_no_client_auth();
        Arc::new(config)
    }

    /// The failure as one line, when `e` came from TLS:
    /// `TLS handshake with <authority> failed: <cause>`, with the next step
    /// for an unknown issuer (and a note when the system store gave
    /// nothing). `None` for errors that are not about TLS. `authority` is
    /// the server's `host:port`, without user info.
    pub fn explain(&self, authority: &str, e: &ureq::Error) -> Option<String> {
        let failure = TlsFailure::of_ureq(e)?;
        let mut text = match &failure {
            TlsFailure::Other(m) => format!("TLS error with {authority}: {m}"),
            f => format!("TLS handshake with {authority} failed: {f}"),
        };
        if failure == TlsFailure::UnknownIssuer {
            text.push_str(" (add its CA, or the self-signed certificate itself, with --cacert or SSL_CERT_FILE");
            if self.system == 0 {
                text.push_str("; no CA certificate was found in the system store");
                if let Some(p) = self.problems.first() {
                    text.push_str(&format!(": {p}"));
                }
            }
            text.push(')');
        }
        Some(text)
    }
}

fn crypto_provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

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
    /// Another certificate problem.
    BadCertificate(String),
    /// Another TLS failure (no common protocol version or cipher, an
    /// alert from the server, a malformed message).
    Other(String),
}

fn system_time(t: UnixTime) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(t.as_secs())
}

impl TlsFailure {
    /// Classify a rustls error.
    pub fn of_rustls(e: &rustls::Error) -> TlsFailure {
        use CertificateError as C;
        let rustls::Error::InvalidCertificate(c) = e else {
            return TlsFailure::Other(e.to_string());
        };
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
            C::BadSignature | C::UnsupportedSignatureAlgorithmForPublicKeyContext { .. } => {
                TlsFailure::BadCertificate(
                    "certificate's signature does not verify with the key of the trusted CA \
                     of its issuer's name (another CA, or a self-signed certificate, with the \
                     same name?)"
                        .into(),
                )
            }
            other => TlsFailure::BadCertificate(
                rustls::Error::InvalidCertificate(other.clone()).to_string(),
            ),
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
            TlsFailure::BadCertificate(m) | TlsFailure::Other(m) => f.write_str(m),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use rustls::pki_types::ServerName;

    fn ca_pem() -> String {
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        p.distinguished_name
            .push(rcgen::DnType::CommonName, "spool unit test CA");
        let key = rcgen::KeyPair::generate().unwrap();
        p.self_signed(&key).unwrap().pem()
    }

    fn cacert(dir: &Path, name: &str, text: &str) -> TlsTrust {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        TlsTrust::with_cacert(path)
    }

    #[test]
    fn cacert_files_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        assert_eq!(TlsTrust::system().check().unwrap(), 0);
        let two = format!("# our CAs\n{}\n{}", ca_pem(), ca_pem());
        assert_eq!(cacert(d, "two.pem", &two).check().unwrap(), 2);

        let fails = |t: TlsTrust| {
            let e = t.check().unwrap_err();
            (e.kind(), e.to_string())
        };
        let (kind, msg) = fails(TlsTrust::with_cacert(d.join("missing.pem")));
        assert_eq!(kind, ErrorKind::NotFound);
        assert!(msg.starts_with("cannot read --cacert file "), "{msg}");
        for (name, text, why) in [
            ("empty.pem", "", "the file is empty"),
            ("blank.pem", " \n\n", "the file is empty"),
            ("der.pem", "\u{30}\u{82}binary", "not a PEM file"),
            (
                "key.pem",
                "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
                "no certificate in it",
            ),
            (
                "cut.pem",
                "-----BEGIN CERTIFICATE-----\nMIIB\n",
                "invalid PEM: a section has no END line",
            ),
            (
                "junk.pem",
                "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
                "certificate 1 of 1 cannot be trusted as a CA",
            ),
        ] {
            let (kind, msg) = fails(cacert(d, name, text));
            assert_eq!(kind, ErrorKind::Data, "{name}: {msg}");
            assert!(msg.contains(name) && msg.contains(why), "{name}: {msg}");
            assert_eq!(msg.lines().count(), 1, "{msg}");
        }
        let (kind, msg) = fails(TlsTrust::with_cacert(d));
        assert_eq!(kind, ErrorKind::Data);
        assert!(msg.contains("is a directory"), "{msg}");
    }

    #[test]
    fn load_adds_cacert_to_the_system_store() {
        let dir = tempfile::tempdir().unwrap();
        let t = cacert(dir.path(), "ca.pem", &ca_pem());
        let roots = t.load().unwrap();
        assert_eq!(roots.cacert_count(), 1);
        // Both ways of using it build.
        let _ = roots.ureq_tls_config();
        let _ = roots.rustls_client_config();
        assert!(TlsTrust::with_cacert(dir.path().join("nope"))
            .load()
            .is_err());
    }

    fn cert_error(c: CertificateError) -> rustls::Error {
        rustls::Error::InvalidCertificate(c)
    }

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
                "received fatal alert: HandshakeFailure",
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

    #[test]
    fn explain_names_the_server_and_the_next_step() {
        let roots = |system| TrustedRoots {
            certs: Arc::default(),
            system,
            extra: 0,
            problems: vec!["failed to read PEM from file: /x/bundle.pem".into()],
        };
        let unknown = ureq::Error::Rustls(cert_error(CertificateError::UnknownIssuer));
        assert_eq!(
            roots(140).explain("h.example:443", &unknown).unwrap(),
            "TLS handshake with h.example:443 failed: certificate is signed by an unknown issuer \
             (add its CA, or the self-signed certificate itself, with --cacert or SSL_CERT_FILE)"
        );
        assert_eq!(
            roots(0).explain("h.example:443", &unknown).unwrap(),
            "TLS handshake with h.example:443 failed: certificate is signed by an unknown issuer \
             (add its CA, or the self-signed certificate itself, with --cacert or SSL_CERT_FILE; \
             no CA certificate was found in the system store: failed to read PEM from file: /x/bundle.pem)"
        );
        let alert = ureq::Error::Rustls(rustls::Error::AlertReceived(
            rustls::AlertDescription::ProtocolVersion,
        ));
        assert_eq!(
            roots(1).explain("h:8443", &alert).unwrap(),
            "TLS error with h:8443: received fatal alert: ProtocolVersion"
        );
        assert_eq!(
            roots(1).explain("h:1", &ureq::Error::ConnectionFailed),
            None
        );
    }
}
