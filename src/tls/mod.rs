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
//!   is an [`Error::Io`](crate::Error::Io) naming the file (kind `NotFound`,
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

mod connector;
mod der;
mod failure;
#[cfg(test)]
mod test_certs;
mod trust;
mod verify;

pub use self::connector::ureq_connector;
pub use self::failure::TlsFailure;
pub use self::trust::{TlsTrust, TrustedRoots};
