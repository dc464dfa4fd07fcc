//! The certificate verifier of every spool client: rustls' WebPKI
//! verifier first, then the pinned `--cacert` certificates, and the
//! error for a CA certificate presented as a server's own.

use super::der::CertFacts;
use super::failure::TlsFailure;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, OtherError, RootCertStore,
    SignatureScheme,
};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

fn crypto_provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The one client configuration: WebPKI over `roots`, then the pinned
/// certificates.
pub(super) fn client_config(
    roots: RootCertStore,
    pinned: Vec<CertificateDer<'static>>,
) -> Arc<ClientConfig> {
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
pub(super) struct CaPresentedAsOwn {
    pub(super) self_signed: bool,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::der::der_time;
    use crate::tls::test_certs::{openssl_like, params, Made};
    use crate::tls::{TlsTrust, TrustedRoots};
    use std::time::{SystemTime, UNIX_EPOCH};

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
}
