//! Which servers spool's HTTPS clients trust, and why a TLS connection
//! failed, in one place.
//!
//! Every HTTPS client of spool — the `--url` replay target, the `--push`
//! sender, `watch`'s `https://` probes — takes a [`TlsTrust`], loads it
//! with [`TlsTrust::load`] and connects through [`ureq_connector`], so
//! that all of them verify servers with the one rustls configuration
//! built here ([`TrustedRoots::rustls_client_config`], which the
//! PostgreSQL backend uses too) and name failures the same way:
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
//! Verification is rustls' WebPKI verifier first (chain to a trusted
//! root, validity period, the server's DNS name or IP address); the
//! crypto provider is `ring`. When WebPKI refuses a server certificate
//! that is byte for byte one of the `--cacert` certificates, that
//! certificate is the server's **pinned** certificate and is accepted
//! after its validity period and the server's name are checked. This is
//! how curl treats the certificate `openssl req -x509` makes: OpenSSL 3
//! marks it `CA:TRUE`, which WebPKI refuses as a server's own
//! certificate. The handshake's signatures are verified either way, so
//! only the holder of the pinned certificate's key gets through.
//!
//! A failed handshake becomes one line that names the cause in words
//! ([`TlsFailure`]: unknown issuer or self-signed, name mismatch, expired,
//! not yet valid, a CA certificate presented as the server's own, or
//! another TLS error) and the server, e.g.
//! `TLS handshake with localhost:8443 failed: certificate is signed by an
//! unknown issuer (add its CA, …)`. No internal name of rustls or WebPKI
//! (`CaUsedAsEndEntity`, `OtherError(…)`) reaches the text. It holds the
//! host and port only, never user info or a path, so it is safe for logs
//! and `last_error`.
//!
//! ```no_run
//! use spool::tls::TlsTrust;
//!
//! let roots = TlsTrust::with_cacert("/etc/spool/cert.pem").load()?;
//! let agent = roots.ureq_agent(ureq::Agent::config_builder().build());
//! if let Err(e) = agent.get("https://receiver.internal:8787/healthz").call() {
//!     let why = roots
//!         .explain("receiver.internal:8787", &e)
//!         .unwrap_or_else(|| e.to_string());
//!     eprintln!("{why}");
//! }
//! # Ok::<(), spool::Error>(())
//! ```

use crate::error::{Error, Result};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    AlertDescription, CertificateError, ClientConfig, DigitallySignedStruct, InvalidMessage,
    OtherError, RootCertStore, SignatureScheme,
};
use std::fmt;
use std::io::{self, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use ureq::unversioned::transport::{
    Buffers, ConnectProxyConnector, ConnectionDetails, Connector, Either, LazyBuffers, NextTimeout,
    TcpConnector, Transport, TransportAdapter,
};

/// Names of the server a certificate was for, quoted in a name mismatch.
const NAMES_SHOWN: usize = 4;

/// What an HTTPS client trusts: the system's certificate store, plus the
/// certificates of `cacert` when given. See the module documentation.
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
    /// certificates (see the module documentation).
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

fn crypto_provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The one client configuration: WebPKI over `roots`, then the pinned
/// certificates.
fn client_config(roots: RootCertStore, pinned: Vec<CertificateDer<'static>>) -> Arc<ClientConfig> {
    let provider = crypto_provider();
    // Without any root (an empty system store, no --cacert) WebPKI
    // cannot be built: every certificate has an unknown issuer then.
    let webpki = (!roots.is_empty())
        .then(|| {
            WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .build()
                .ok()
        })
        .flatten();
    let verifier = Verifier {
        webpki,
        pinned,
        algorithms: provider.signature_verification_algorithms,
    };
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap_or_else(|e| unreachable!("ring supports the default versions: {e}"))
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    Arc::new(config)
}

/// WebPKI, then the pinned `--cacert` certificates.
#[derive(Debug)]
struct Verifier {
    webpki: Option<Arc<WebPkiServerVerifier>>,
    pinned: Vec<CertificateDer<'static>>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        let refused = match &self.webpki {
            Some(v) => {
                match v.verify_server_cert(
                    end_entity,
                    intermediates,
                    server_name,
                    ocsp_response,
                    now,
                ) {
                    Ok(ok) => return Ok(ok),
                    Err(e) => e,
                }
            }
            None => CertificateError::UnknownIssuer.into(),
        };
        if self
            .pinned
            .iter()
            .any(|p| p.as_ref() == end_entity.as_ref())
        {
            verify_pinned(end_entity, server_name, now)?;
            return Ok(ServerCertVerified::assertion());
        }
        if is_ca_used_as_end_entity(&refused) {
            let self_signed = CertFacts::parse(end_entity).is_some_and(|c| c.self_signed());
            return Err(CaPresentedAsOwn { self_signed }.into());
        }
        Err(refused)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// A pinned certificate still has to be valid now and name the server.
fn verify_pinned(
    cert: &CertificateDer<'_>,
    server_name: &ServerName<'_>,
    now: UnixTime,
) -> std::result::Result<(), rustls::Error> {
    let facts = CertFacts::parse(cert).ok_or(CertificateError::BadEncoding)?;
    let time = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
    if time < facts.not_before {
        return Err(CertificateError::NotValidYetContext {
            time: now,
            not_before: unix_time(facts.not_before),
        }
        .into());
    }
    if time > facts.not_after {
        return Err(CertificateError::ExpiredContext {
            time: now,
            not_after: unix_time(facts.not_after),
        }
        .into());
    }
    let parsed = rustls::server::ParsedCertificate::try_from(cert)?;
    rustls::client::verify_server_name(&parsed, server_name)
}

fn unix_time(secs: i64) -> UnixTime {
    UnixTime::since_unix_epoch(Duration::from_secs(u64::try_from(secs).unwrap_or(0)))
}

fn is_ca_used_as_end_entity(e: &rustls::Error) -> bool {
    matches!(
        e,
        rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(inner)))
            if matches!(inner.downcast_ref::<webpki::Error>(), Some(webpki::Error::CaUsedAsEndEntity))
    )
}

/// WebPKI refused a CA certificate (`CA:TRUE`) as the server's own, and
/// it is not pinned; `self_signed` when it is its own issuer.
#[derive(Debug)]
struct CaPresentedAsOwn {
    self_signed: bool,
}

impl fmt::Display for CaPresentedAsOwn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(
            &TlsFailure::CaAsOwn {
                self_signed: self.self_signed,
            },
            f,
        )
    }
}

impl std::error::Error for CaPresentedAsOwn {}

impl From<CaPresentedAsOwn> for rustls::Error {
    fn from(e: CaPresentedAsOwn) -> rustls::Error {
        CertificateError::Other(OtherError(Arc::new(e))).into()
    }
}

/// What the pinning needs of a certificate, read from its DER: the
/// validity period (seconds since the epoch) and whether it is its own
/// issuer. WebPKI has parsed the certificate already when this is asked;
/// anything malformed is `None`.
#[derive(Debug, PartialEq, Eq)]
struct CertFacts<'a> {
    issuer: &'a [u8],
    subject: &'a [u8],
    not_before: i64,
    not_after: i64,
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
    fn parse(cert: &'a [u8]) -> Option<CertFacts<'a>> {
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

    fn self_signed(&self) -> bool {
        self.issuer == self.subject
    }
}

/// A UTCTime (`YYMMDDHHMMSSZ`, tag 0x17) or GeneralizedTime
/// (`YYYYMMDDHHMMSSZ`, tag 0x18) as seconds since the epoch (RFC 5280
/// 4.1.2.5: UTC, seconds present, no fractions).
fn der_time(tag: u8, text: &[u8]) -> Option<i64> {
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

/// ureq's connector chain for spool's HTTP clients: a CONNECT proxy when
/// one is configured, TCP, and TLS with [`TrustedRoots`]' configuration
/// for `https://` (an `https://` request without `roots` fails). ureq's
/// own TLS connector cannot take a certificate verifier; this one is
/// ureq's rustls connector with spool's configuration.
pub fn ureq_connector(roots: Option<&TrustedRoots>) -> impl Connector {
    ().chain(ConnectProxyConnector::default())
        .chain(TcpConnector::default())
        .chain(TlsConnector {
            config: roots.map(TrustedRoots::rustls_client_config),
        })
}

/// Wraps the chained transport in TLS for `https://`.
struct TlsConnector {
    config: Option<Arc<ClientConfig>>,
}

impl fmt::Debug for TlsConnector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConnector").finish()
    }
}

impl<In: Transport> Connector<In> for TlsConnector {
    type Out = Either<In, TlsTransport>;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<In>,
    ) -> std::result::Result<Option<Self::Out>, ureq::Error> {
        let Some(transport) = chained else {
            return Ok(None);
        };
        if !details.needs_tls() || transport.is_tls() {
            return Ok(Some(Either::A(transport)));
        }
        let config = self.config.clone().ok_or(ureq::Error::Tls(
            "no TLS trust was loaded for this https:// URL",
        ))?;
        let host = details.uri.host().unwrap_or_default();
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let name = ServerName::try_from(host.to_string())
            .map_err(|_| ureq::Error::Tls("the host is not a valid TLS server name"))?;
        let mut conn = rustls::ClientConnection::new(config, name)?;
        let mut sock = TransportAdapter::new(transport.boxed(), details.current_time.clone());
        sock.set_timeout(details.timeout);
        conn.complete_io(&mut sock)?;
        Ok(Some(Either::B(TlsTransport {
            buffers: LazyBuffers::new(
                details.config.input_buffer_size(),
                details.config.output_buffer_size(),
            ),
            stream: rustls::StreamOwned::new(conn, sock),
        })))
    }
}

/// A TLS connection made by [`TlsConnector`].
struct TlsTransport {
    buffers: LazyBuffers,
    stream: rustls::StreamOwned<rustls::ClientConnection, TransportAdapter>,
}

impl fmt::Debug for TlsTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsTransport").finish()
    }
}

impl Transport for TlsTransport {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(
        &mut self,
        amount: usize,
        timeout: NextTimeout,
    ) -> std::result::Result<(), ureq::Error> {
        self.stream.get_mut().set_timeout(timeout);
        let output = &self.buffers.output()[..amount];
        self.stream.write_all(output)?;
        Ok(())
    }

    fn await_input(&mut self, timeout: NextTimeout) -> std::result::Result<bool, ureq::Error> {
        self.stream.get_mut().set_timeout(timeout);
        let input = self.buffers.input_append_buf();
        let amount = self.stream.read(input)?;
        self.buffers.input_appended(amount);
        Ok(amount > 0)
    }

    fn is_open(&mut self) -> bool {
        self.stream.get_mut().get_mut().is_open()
    }

    fn is_tls(&self) -> bool {
        true
    }
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
        let _ = ureq_connector(Some(&roots));
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

    #[test]
    fn explain_names_the_server_and_the_next_step() {
        let roots = |system| TrustedRoots {
            config: client_config(RootCertStore::empty(), Vec::new()),
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
            "TLS error with h:8443: the server refused the connection with the TLS alert \"protocol version\" (no TLS version in common)"
        );
        assert_eq!(
            roots(1).explain("h:1", &ureq::Error::ConnectionFailed),
            None
        );
    }

    // ------------------------------------------------ pinning and wording

    /// Parameters for a certificate for `names`, with a subject no real
    /// CA has.
    fn params(names: &[&str], cn: &str) -> rcgen::CertificateParams {
        let mut p =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        p.distinguished_name
            .push(rcgen::DnType::CommonName, format!("spool unit test {cn}"));
        p
    }

    /// A certificate and its key.
    struct Made {
        der: CertificateDer<'static>,
        pem: String,
        key: rcgen::KeyPair,
    }

    impl Made {
        fn new(cert: rcgen::Certificate, key: rcgen::KeyPair) -> Made {
            Made {
                der: cert.der().clone(),
                pem: cert.pem(),
                key,
            }
        }
    }

    /// What `openssl req -x509` makes: self-signed, CA:TRUE, for `names`.
    fn openssl_like(names: &[&str], from: i32, until: i32) -> Made {
        let mut p = params(names, "openssl-like");
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        p.not_before = rcgen::date_time_ymd(from, 1, 1);
        p.not_after = rcgen::date_time_ymd(until, 1, 1);
        let key = rcgen::KeyPair::generate().unwrap();
        Made::new(p.self_signed(&key).unwrap(), key)
    }

    /// The verifier [`TlsTrust::load`] builds, for `cacert` alone (no
    /// system store).
    fn verifier(cacert: &[&Made]) -> Verifier {
        let pinned: Vec<CertificateDer<'static>> = cacert.iter().map(|m| m.der.clone()).collect();
        let mut store = RootCertStore::empty();
        store.add_parsable_certificates(pinned.clone());
        let provider = crypto_provider();
        Verifier {
            webpki: (!store.is_empty()).then(|| {
                WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider.clone())
                    .build()
                    .unwrap()
            }),
            pinned,
            algorithms: provider.signature_verification_algorithms,
        }
    }

    fn at(year: i32) -> UnixTime {
        let secs = der_time(0x18, format!("{year:04}0601000000Z").as_bytes()).unwrap();
        UnixTime::since_unix_epoch(Duration::from_secs(secs as u64))
    }

    fn check(
        v: &Verifier,
        cert: &Made,
        name: &str,
        year: i32,
    ) -> std::result::Result<(), TlsFailure> {
        let name = ServerName::try_from(name.to_string()).unwrap();
        v.verify_server_cert(&cert.der, &[], &name, &[], at(year))
            .map(|_| ())
            .map_err(|e| TlsFailure::of_rustls(&e))
    }

    #[test]
    fn a_pinned_ca_certificate_is_accepted_for_its_names_while_valid() {
        let own = openssl_like(&["localhost", "127.0.0.1"], 2020, 2040);
        let v = verifier(&[&own]);
        assert_eq!(check(&v, &own, "localhost", 2030), Ok(()));
        assert_eq!(check(&v, &own, "127.0.0.1", 2030), Ok(()));
        assert_eq!(
            check(&v, &own, "elsewhere.example", 2030),
            Err(TlsFailure::NameMismatch {
                presented: vec!["localhost".into(), "127.0.0.1".into()]
            })
        );
        let valid_until = |y| {
            Some(
                UNIX_EPOCH
                    + Duration::from_secs(
                        der_time(0x18, format!("{y}0101000000Z").as_bytes()).unwrap() as u64,
                    ),
            )
        };
        assert_eq!(
            check(&v, &own, "localhost", 2041),
            Err(TlsFailure::Expired {
                not_after: valid_until(2040)
            })
        );
        assert_eq!(
            check(&v, &own, "localhost", 2019),
            Err(TlsFailure::NotValidYet {
                not_before: valid_until(2020)
            })
        );
    }

    #[test]
    fn an_unpinned_ca_certificate_is_named_with_the_way_out() {
        let own = openssl_like(&["localhost"], 2020, 2040);
        // Another certificate with the same names and subject: pinning is
        // by the exact certificate, not by its names.
        let twin = openssl_like(&["localhost"], 2020, 2040);
        let unrelated = openssl_like(&["unrelated.example"], 2020, 2040);
        for v in [verifier(&[&unrelated]), verifier(&[&twin])] {
            assert_eq!(
                check(&v, &own, "localhost", 2030),
                Err(TlsFailure::CaAsOwn { self_signed: true })
            );
        }
        // A CA certificate that a trusted CA issued, presented as the
        // server's own: not self-signed.
        let mut ca = params(&[], "CA");
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let mut sub = params(&["localhost"], "sub-CA");
        sub.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let sub_key = rcgen::KeyPair::generate().unwrap();
        let sub = Made::new(sub.signed_by(&sub_key, &issuer).unwrap(), sub_key);
        let ca = Made::new(ca_cert, rcgen::KeyPair::generate().unwrap());
        assert_eq!(
            check(&verifier(&[&ca]), &sub, "localhost", 2030),
            Err(TlsFailure::CaAsOwn { self_signed: false })
        );
        // A leaf certificate signed by the trusted CA passes WebPKI.
        let leaf_key = rcgen::KeyPair::generate().unwrap();
        let leaf = Made::new(
            params(&["localhost"], "leaf")
                .signed_by(&leaf_key, &issuer)
                .unwrap(),
            leaf_key,
        );
        assert_eq!(check(&verifier(&[&ca]), &leaf, "localhost", 2030), Ok(()));
        assert_eq!(
            check(&verifier(&[]), &leaf, "localhost", 2030),
            Err(TlsFailure::UnknownIssuer)
        );
    }

    /// Run a TLS handshake between a client with `roots`' configuration
    /// and a server presenting `cert`, in memory.
    fn handshake(
        roots: &TrustedRoots,
        cert: &Made,
        name: &str,
    ) -> std::result::Result<(), rustls::Error> {
        let server_config = rustls::ServerConfig::builder_with_provider(crypto_provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der.clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(cert.key.serialize_der().into()),
            )
            .unwrap();
        let mut server = rustls::ServerConnection::new(Arc::new(server_config)).unwrap();
        let mut client = rustls::ClientConnection::new(
            roots.rustls_client_config(),
            ServerName::try_from(name.to_string()).unwrap(),
        )
        .unwrap();
        for _ in 0..20 {
            let mut buf = Vec::new();
            client.write_tls(&mut buf).unwrap();
            server.read_tls(&mut buf.as_slice()).unwrap();
            if let Err(e) = server.process_new_packets() {
                // The server's alert tells the client why.
                let mut alert = Vec::new();
                let _ = server.write_tls(&mut alert);
                let _ = client.read_tls(&mut alert.as_slice());
                client.process_new_packets()?;
                return Err(e);
            }
            let mut buf = Vec::new();
            server.write_tls(&mut buf).unwrap();
            client.read_tls(&mut buf.as_slice()).unwrap();
            client.process_new_packets()?;
            if !client.is_handshaking() && !server.is_handshaking() {
                return Ok(());
            }
        }
        panic!("the handshake did not end");
    }

    #[test]
    fn the_client_configuration_pins_in_a_real_handshake() {
        let dir = tempfile::tempdir().unwrap();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let year = 1970 + (now / 31_556_952) as i32;
        let own = openssl_like(&["localhost"], year - 1, year + 1);
        let pem = dir.path().join("cert.pem");
        std::fs::write(&pem, &own.pem).unwrap();
        let pinned = TlsTrust::with_cacert(&pem).load().unwrap();
        assert_eq!(handshake(&pinned, &own, "localhost"), Ok(()));
        let failure = handshake(&pinned, &own, "other.example")
            .map_err(|e| TlsFailure::of_rustls(&e))
            .unwrap_err();
        assert!(
            matches!(failure, TlsFailure::NameMismatch { .. }),
            "{failure:?}"
        );
        // The same names and subject with another key: refused.
        let other = openssl_like(&["localhost"], year - 1, year + 1);
        assert_eq!(
            handshake(&pinned, &other, "localhost").map_err(|e| TlsFailure::of_rustls(&e)),
            Err(TlsFailure::CaAsOwn { self_signed: true })
        );
    }

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
    fn der_times_are_utc_seconds() {
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
        let roots = TrustedRoots {
            config: client_config(RootCertStore::empty(), Vec::new()),
            system: 1,
            extra: 0,
            problems: Vec::new(),
        };
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

    #[test]
    fn a_ca_certificate_as_the_servers_own_says_how_to_make_a_leaf() {
        let roots = TrustedRoots {
            config: client_config(RootCertStore::empty(), Vec::new()),
            system: 1,
            extra: 0,
            problems: Vec::new(),
        };
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
