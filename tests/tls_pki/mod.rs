//! Certificates for TLS tests, made with rcgen: a test CA and server
//! certificates it signs (for chosen names and validity periods), and
//! self-signed ones. A [`ServerCert`] gives the rustls configuration for
//! `http_sink::Sink::start_tls` and its PEM for `--cacert`.

#![allow(dead_code)]

use rcgen::{
    date_time_ymd, BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::path::Path;
use std::sync::Arc;

/// A certificate and its key, for a server.
pub struct ServerCert {
    pub der: CertificateDer<'static>,
    pub pem: String,
    key: Vec<u8>,
}

impl ServerCert {
    /// A rustls server configuration presenting this certificate.
    pub fn server_config(&self) -> Arc<rustls::ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_no_client_auth()
            .with_single_cert(
                vec![self.der.clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key.clone())),
            )
            .expect("certificate and key match");
        Arc::new(config)
    }

    /// Write the certificate as PEM to `path`.
    pub fn write_pem(&self, path: &Path) {
        std::fs::write(path, &self.pem).expect("write PEM");
    }

    /// The private key as PKCS#8 PEM (for `spool serve --tls-key`).
    pub fn key_pem(&self) -> String {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD.encode(&self.key);
        let mut pem = String::from("-----BEGIN PRIVATE KEY-----\n");
        for chunk in b64.as_bytes().chunks(64) {
            pem.push_str(std::str::from_utf8(chunk).expect("base64 is ASCII"));
            pem.push('\n');
        }
        pem.push_str("-----END PRIVATE KEY-----\n");
        pem
    }
}

/// Parameters for `names`; the subject is `CN=spool test <what>`, a name
/// no real CA has (webpki finds an issuer by name: a self-signed `CN=localhost`
/// would meet any `CN=localhost` CA of the machine's store).
fn params(names: &[&str], what: &str) -> CertificateParams {
    let mut p = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
        .expect("certificate names");
    p.distinguished_name
        .push(DnType::CommonName, format!("spool test {what}"));
    p
}

/// A test certificate authority.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pub pem: String,
}

impl Ca {
    /// A new CA (`CN=spool test <name>`) with a fresh key.
    pub fn new(name: &str) -> Ca {
        let mut p = params(&[], name);
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().expect("key");
        let cert = p.self_signed(&key).expect("CA certificate");
        Ca {
            pem: cert.pem(),
            issuer: Issuer::new(p, key),
        }
    }

    /// A server certificate for `names` (DNS names or IP addresses)
    /// signed by this CA, valid for a long time around now.
    pub fn server(&self, names: &[&str]) -> ServerCert {
        self.sign(params(names, "server"))
    }

    /// A server certificate for `names` valid from `from` to `until`
    /// (years, 1 January).
    pub fn server_valid(&self, names: &[&str], from: i32, until: i32) -> ServerCert {
        let mut p = params(names, "server");
        p.not_before = date_time_ymd(from, 1, 1);
        p.not_after = date_time_ymd(until, 1, 1);
        self.sign(p)
    }

    fn sign(&self, p: CertificateParams) -> ServerCert {
        let key = KeyPair::generate().expect("key");
        let cert = p.signed_by(&key, &self.issuer).expect("sign");
        ServerCert {
            der: cert.der().clone(),
            pem: cert.pem(),
            key: key.serialize_der(),
        }
    }

    /// Write the CA certificate as PEM to `path`.
    pub fn write_pem(&self, path: &Path) {
        std::fs::write(path, &self.pem).expect("write PEM");
    }
}

/// A self-signed server certificate for `names` (as a `spool serve`
/// started with a certificate of its own would present).
pub fn self_signed(names: &[&str]) -> ServerCert {
    let key = KeyPair::generate().expect("key");
    let cert = params(names, "self-signed server")
        .self_signed(&key)
        .expect("self-signed certificate");
    ServerCert {
        der: cert.der().clone(),
        pem: cert.pem(),
        key: key.serialize_der(),
    }
}

/// Certificates made by the `openssl` binary, the way users make them
/// (`openssl req -x509 …` marks its certificate `CA:TRUE`). The tests
/// that use these need `openssl` (the Debian package of that name, part
/// of every CI image; `.ci/run` installs it when it is missing): without
/// it they fail, saying so, rather than pass untested.
pub mod openssl {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use std::path::{Path, PathBuf};
    use std::process::Command;
    use std::sync::Arc;

    /// A certificate and its key, as PEM files.
    pub struct Files {
        pub cert: PathBuf,
        pub key: PathBuf,
    }

    impl Files {
        /// The certificate file as an argument.
        pub fn cert_arg(&self) -> &str {
            self.cert.to_str().expect("UTF-8 path")
        }

        /// The key file as an argument.
        pub fn key_arg(&self) -> &str {
            self.key.to_str().expect("UTF-8 path")
        }

        /// A rustls server configuration presenting the certificate.
        pub fn server_config(&self) -> Arc<rustls::ServerConfig> {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&self.cert)
                .expect("read the certificate")
                .map(|c| c.expect("PEM certificate"))
                .collect();
            let key = PrivateKeyDer::from_pem_file(&self.key).expect("read the key");
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .expect("protocol versions")
                .with_no_client_auth()
                .with_single_cert(certs, key)
                .expect("certificate and key match");
            Arc::new(config)
        }
    }

    /// Run `args` (an openssl command line, program first) in `dir`.
    pub fn run(dir: &Path, args: &[&str]) {
        let out = Command::new(args[0])
            .args(&args[1..])
            .current_dir(dir)
            .output()
            .unwrap_or_else(|e| {
                panic!("cannot run {} (install the openssl package): {e}", args[0])
            });
        assert!(
            out.status.success(),
            "{args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `openssl req -x509 -newkey rsa:2048 -nodes -keyout <name>.key
    /// -out <name>.pem -days 30 -subj /CN=<cn> -addext subjectAltName=<san>`
    /// in `dir`: the usual self-signed certificate, `CA:TRUE`.
    pub fn self_signed(dir: &Path, name: &str, cn: &str, san: &str) -> Files {
        let files = Files {
            cert: dir.join(format!("{name}.pem")),
            key: dir.join(format!("{name}.key")),
        };
        run(
            dir,
            &[
                "openssl",
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                files.key_arg(),
                "-out",
                files.cert_arg(),
                "-days",
                "30",
                "-subj",
                &format!("/CN={cn}"),
                "-addext",
                &format!("subjectAltName={san}"),
            ],
        );
        files
    }

    /// A self-signed `CA:TRUE` certificate valid in 2000 only, made as
    /// OpenSSL 3.0 makes a back-dated one (its `req` has no start date):
    /// a request signed by its own key with `openssl ca -selfsign
    /// -startdate 20000101000000Z -enddate 20010101000000Z`.
    pub fn expired(dir: &Path, name: &str, cn: &str, san: &str) -> Files {
        let work = dir.join(format!("{name}-ca"));
        std::fs::create_dir(&work).expect("mkdir");
        std::fs::write(work.join("index.txt"), "").expect("index");
        std::fs::write(
            work.join("ca.cnf"),
            "[ca]\ndefault_ca = d\n[d]\ndatabase = index.txt\nnew_certs_dir = .\n\
             serial = serial\nrand_serial = yes\ndefault_md = sha256\npolicy = p\n\
             copy_extensions = copy\nx509_extensions = e\n[p]\ncommonName = supplied\n\
             [e]\nbasicConstraints = critical,CA:TRUE\n",
        )
        .expect("ca.cnf");
        let files = Files {
            cert: dir.join(format!("{name}.pem")),
            key: dir.join(format!("{name}.key")),
        };
        run(
            &work,
            &[
                "openssl",
                "req",
                "-new",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                files.key_arg(),
                "-out",
                "request.csr",
                "-subj",
                &format!("/CN={cn}"),
                "-addext",
                &format!("subjectAltName={san}"),
            ],
        );
        run(
            &work,
            &[
                "openssl",
                "ca",
                "-config",
                "ca.cnf",
                "-selfsign",
                "-keyfile",
                files.key_arg(),
                "-in",
                "request.csr",
                "-out",
                files.cert_arg(),
                "-startdate",
                "20000101000000Z",
                "-enddate",
                "20010101000000Z",
                "-batch",
                "-notext",
            ],
        );
        files
    }
}
