//! ureq's connector chain for spool's HTTP clients, with TLS through
//! the client configuration of [`TrustedRoots`].

use super::trust::TrustedRoots;
use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use std::fmt;
use std::io::{Read as _, Write as _};
use std::sync::Arc;
use ureq::unversioned::transport::{
    Buffers, ConnectProxyConnector, ConnectionDetails, Connector, Either, LazyBuffers, NextTimeout,
    TcpConnector, Transport, TransportAdapter,
};

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
