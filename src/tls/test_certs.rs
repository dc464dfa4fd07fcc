//! Certificates and errors made for the unit tests of the TLS module.

use rustls::pki_types::CertificateDer;
use rustls::CertificateError;

pub(super) fn cert_error(c: CertificateError) -> rustls::Error {
    rustls::Error::InvalidCertificate(c)
}

/// Parameters for a certificate for `names`, with a subject no real
/// CA has.
pub(super) fn params(names: &[&str], cn: &str) -> rcgen::CertificateParams {
    let mut p =
        rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .unwrap();
    p.distinguished_name
        .push(rcgen::DnType::CommonName, format!("spool unit test {cn}"));
    p
}

/// A certificate and its key.
pub(super) struct Made {
    pub(super) der: CertificateDer<'static>,
    pub(super) pem: String,
    pub(super) key: rcgen::KeyPair,
}

impl Made {
    pub(super) fn new(cert: rcgen::Certificate, key: rcgen::KeyPair) -> Made {
        Made {
            der: cert.der().clone(),
            pem: cert.pem(),
            key,
        }
    }
}

/// What `openssl req -x509` makes: self-signed, CA:TRUE, for `names`.
pub(super) fn openssl_like(names: &[&str], from: i32, until: i32) -> Made {
    let mut p = params(names, "openssl-like");
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    p.not_before = rcgen::date_time_ymd(from, 1, 1);
    p.not_after = rcgen::date_time_ymd(until, 1, 1);
    let key = rcgen::KeyPair::generate().unwrap();
    Made::new(p.self_signed(&key).unwrap(), key)
}
