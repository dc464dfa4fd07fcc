//! The server side of TLS: a rustls configuration from PEM files.
//!
//! `--tls-cert` holds the certificate chain (the server's certificate
//! first, then intermediates), `--tls-key` the private key (PKCS#8,
//! PKCS#1 or SEC1). The crypto provider is `ring`, as for the clients in
//! [`crate::tls`]; TLS 1.2 and 1.3; ALPN offers `http/1.1`. A file that is
//! missing, unreadable or not what it should be is an [`Error::Io`]
//! naming it (kinds `NotFound`, `PermissionDenied`, `Data`), returned
//! before the server binds its port. The key's bytes never appear in an
//! error.

use crate::error::{Error, Result};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The PEM files of a TLS server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, server certificate first.
    pub cert: PathBuf,
    /// The private key.
    pub key: PathBuf,
}

fn bad(path: &Path, action: &'static str, why: impl Into<String>) -> Error {
    Error::io(
        path,
        action,
        io::Error::new(io::ErrorKind::InvalidData, why.into()),
    )
}

fn read(path: &Path, action: &'static str) -> Result<Vec<u8>> {
    if path.is_dir() {
        return Err(bad(path, action, "it is a directory"));
    }
    std::fs::read(path).map_err(|e| Error::io(path, action, e))
}

/// Load the files into a server configuration.
pub fn server_config(files: &TlsFiles) -> Result<Arc<rustls::ServerConfig>> {
    const CERT: &str = "read the TLS certificate";
    const KEY: &str = "read the TLS key";
    let bytes = read(&files.cert, CERT)?;
    let mut certs = Vec::new();
    for c in CertificateDer::pem_slice_iter(&bytes) {
        match c {
            Ok(c) => certs.push(c),
            Err(e) => return Err(bad(&files.cert, CERT, format!("invalid PEM: {e}"))),
        }
    }
    if certs.is_empty() {
        return Err(bad(
            &files.cert,
            CERT,
            "no certificate in it (expected -----BEGIN CERTIFICATE----- blocks)",
        ));
    }
    let key_bytes = read(&files.key, KEY)?;
    let key = PrivateKeyDer::from_pem_slice(&key_bytes).map_err(|_| {
        bad(
            &files.key,
            KEY,
            "no private key in it (expected a PEM PRIVATE KEY block: PKCS#8, PKCS#1 or SEC1)",
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Internal(format!("TLS protocol versions: {e}")))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| {
            bad(
                &files.key,
                KEY,
                format!(
                    "the key does not fit the certificate in {}: {e}",
                    files.cert.display()
                ),
            )
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
