//! What an HTTPS client trusts: [`TlsTrust`] (the system store plus
//! `--cacert`), the checks of the `--cacert` file, and [`TrustedRoots`],
//! the loaded roots with the one client configuration and the wording of
//! a failed connection for the operator.

use super::connector::ureq_connector;
use super::failure::TlsFailure;
use super::verify::client_config;
use crate::error::{Error, Result};
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::CertificateDer;
use rustls::{ClientConfig, RootCertStore};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What an HTTPS client trusts: the system's certificate store, plus the
/// certificates of `cacert` when given. See the [`tls`](super) module
/// documentation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsTrust {
    /// `--cacert FILE`: PEM certificates trusted in addition to the
    /// system store (and pinned when a server presents one of them).
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

    /// Load the system store and the `--cacert` file, and build the
    /// client configuration. Problems with the system store are not
    /// errors (they are kept for [`TrustedRoots::explain`]); problems with
    /// `--cacert` are.
    pub fn load(&self) -> Result<TrustedRoots> {
        let extra = self.read_cacert()?;
        let native = rustls_native_certs::load_native_certs();
        let system = native.certs.len();
        let problems = native.errors.iter().map(|e| e.to_string()).collect();
        let extra_count = extra.len();
        // A system bundle may hold certificates that cannot be trust
        // anchors: they are skipped.
        let mut store = RootCertStore::empty();
        store.add_parsable_certificates(native.certs.into_iter().chain(extra.iter().cloned()));
        Ok(TrustedRoots {
            config: client_config(store, extra),
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

/// The certificates an HTTPS client trusts and the rustls configuration
/// built from them, loaded by [`TlsTrust::load`]; cheap to clone.
#[derive(Clone)]
pub struct TrustedRoots {
    config: Arc<ClientConfig>,
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
    /// Roots as a system store of `system` certificates with `problems`
    /// would give, with no certificate to verify against: for tests of
    /// the wording.
    #[cfg(test)]
    pub(super) fn without_roots(system: usize, problems: Vec<String>) -> TrustedRoots {
        TrustedRoots {
            config: client_config(RootCertStore::empty(), Vec::new()),
            system,
            extra: 0,
            problems,
        }
    }

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

    /// The rustls client configuration every spool client uses: `ring`,
    /// TLS 1.2 and 1.3, these roots, and the pinned `--cacert`
    /// certificates (see the [`tls`](super) module documentation).
    pub fn rustls_client_config(&self) -> Arc<ClientConfig> {
        self.config.clone()
    }

    /// A ureq agent with `config` that connects through
    /// [`ureq_connector`] with these roots (and ureq's default resolver).
    pub fn ureq_agent(&self, config: ureq::config::Config) -> ureq::Agent {
        ureq::Agent::with_parts(
            config,
            ureq_connector(Some(self)),
            ureq::unversioned::resolver::DefaultResolver::default(),
        )
    }

    /// The failure as one line, when `e` came from TLS:
    /// `TLS handshake with <authority> failed: <cause>`, with the next step
    /// for an unknown issuer (and a note when the system store gave
    /// nothing) or a CA certificate presented as the server's own. `None`
    /// for errors that are not about TLS. `authority` is the server's
    /// `host:port`, without user info.
    pub fn explain(&self, authority: &str, e: &ureq::Error) -> Option<String> {
        let failure = TlsFailure::of_ureq(e)?;
        let mut text = match &failure {
            TlsFailure::Other(m) => format!("TLS error with {authority}: {m}"),
            f => format!("TLS handshake with {authority} failed: {f}"),
        };
        match failure {
            TlsFailure::UnknownIssuer => {
                text.push_str(" (add its CA, or the self-signed certificate itself, with --cacert or SSL_CERT_FILE");
                if self.system == 0 {
                    text.push_str("; no CA certificate was found in the system store");
                    if let Some(p) = self.problems.first() {
                        text.push_str(&format!(": {p}"));
                    }
                }
                text.push(')');
            }
            TlsFailure::CaAsOwn { .. } => {
                text.push_str(&format!(
                    " (trust that exact certificate by giving it to --cacert, or give the server \
                     a leaf certificate: {})",
                    leaf_command(authority)
                ));
            }
            _ => {}
        }
        Some(text)
    }
}

/// The `openssl` command that makes a self-signed leaf certificate
/// (`CA:FALSE`) for the host of `authority` (`host:port`).
fn leaf_command(authority: &str) -> String {
    let host = authority
        .rsplit_once(':')
        .map_or(authority, |(h, _)| h)
        .trim_start_matches('[')
        .trim_end_matches(']');
    let san = if host.parse::<std::net::IpAddr>().is_ok() {
        format!("IP:{host}")
    } else {
        format!("DNS:{host}")
    };
    format!(
        "openssl req -x509 -newkey rsa:2048 -nodes -keyout key.pem -out cert.pem -days 365 \
         -subj /CN={host} -addext subjectAltName={san} -addext basicConstraints=critical,CA:FALSE"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use crate::tls::test_certs::cert_error;
    use crate::tls::verify::CaPresentedAsOwn;
    use rustls::CertificateError;

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
        let _ = ureq_connector(Some(&roots));
        assert!(TlsTrust::with_cacert(dir.path().join("nope"))
            .load()
            .is_err());
    }

    #[test]
    fn explain_names_the_server_and_the_next_step() {
        let roots = |system| {
            TrustedRoots::without_roots(
                system,
                vec!["failed to read PEM from file: /x/bundle.pem".into()],
            )
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
            "TLS error with h:8443: the server refused the connection with the TLS alert \"protocol version\" (no TLS version in common)"
        );
        assert_eq!(
            roots(1).explain("h:1", &ureq::Error::ConnectionFailed),
            None
        );
    }

    #[test]
    fn a_ca_certificate_as_the_servers_own_says_how_to_make_a_leaf() {
        let roots = TrustedRoots::without_roots(1, Vec::new());
        let own = ureq::Error::Rustls(CaPresentedAsOwn { self_signed: true }.into());
        assert_eq!(
            roots.explain("localhost:8787", &own).unwrap(),
            "TLS handshake with localhost:8787 failed: certificate is self-signed (unknown \
             issuer) and is a CA certificate (CA:TRUE) presented as the server's own (trust \
             that exact certificate by giving it to --cacert, or give the server a leaf \
             certificate: openssl req -x509 -newkey rsa:2048 -nodes -keyout key.pem -out \
             cert.pem -days 365 -subj /CN=localhost -addext subjectAltName=DNS:localhost \
             -addext basicConstraints=critical,CA:FALSE)"
        );
        let text = roots.explain("[::1]:8787", &own).unwrap();
        assert!(
            text.contains("-subj /CN=::1 -addext subjectAltName=IP:::1 "),
            "{text}"
        );
        let text = roots.explain("10.0.0.7:443", &own).unwrap();
        assert!(text.contains("subjectAltName=IP:10.0.0.7 "), "{text}");
    }
}
