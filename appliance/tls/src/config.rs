//! rustls configurations built from [`TlsSettings`], with upstream's trust rules:
//!
//! - server: the certificate and key from `tls.server.certPath` / `keyPath` (PEM), or a
//!   self-signed pair made at start in test mode; client certificates asked for per
//!   `tls.server.need.client.auth` and, when given, checked against
//!   `tls.server.trustCertPath` only if `tls.server.authClient` (otherwise any is taken);
//! - client: the server's chain checked against `tls.client.trustCertPath` only if
//!   `tls.client.authServer` (otherwise any server is taken), never the name in it, as
//!   upstream's clients; a client certificate when `tls.client.certPath` names one.
//!
//! Encrypted private keys (`keyPassword`) are not read: they are refused at start with a
//! message saying so, rather than failing on the first handshake.

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};

use crate::settings::{ClientAuth, TlsMode, TlsSettings};

/// What a server port does with TLS.
#[derive(Clone)]
pub struct TlsServer {
    pub mode: TlsMode,
    pub config: Arc<rustls::ServerConfig>,
}

impl std::fmt::Debug for TlsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsServer")
            .field("mode", &self.mode)
            .finish()
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The server side, or `None` when `tls.server.mode` is disabled. Fails with what to fix
/// when a file is missing or unreadable.
pub fn server_config(settings: &TlsSettings) -> Result<Option<TlsServer>, String> {
    if settings.server_mode == TlsMode::Disabled {
        return Ok(None);
    }
    let (chain, key) = if settings.test_mode {
        self_signed()?
    } else {
        let cert_path = settings.server_cert_path.as_deref().ok_or(
            "tls.server.certPath is not set (needed when tls.test.mode.enable=false and \
             tls.server.mode is not disabled)",
        )?;
        let key_path = settings
            .server_key_path
            .as_deref()
            .ok_or("tls.server.keyPath is not set (needed with tls.server.certPath)")?;
        if settings.server_key_password.is_some() {
            return Err(unsupported_password("tls.server.keyPassword"));
        }
        (load_certs(cert_path)?, load_key(key_path)?)
    };
    let verifier = client_verifier(settings)?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS protocol versions: {e}"))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(|e| format!("the server certificate and key do not go together: {e}"))?;
    // No session resumption is offered: nothing to send after the handshake.
    config.send_tls13_tickets = 0;
    Ok(Some(TlsServer {
        mode: settings.server_mode,
        config: Arc::new(config),
    }))
}

/// The client side for the process's outgoing connections.
pub fn client_config(settings: &TlsSettings) -> Result<Arc<rustls::ClientConfig>, String> {
    let verifier: Arc<dyn ServerCertVerifier> = match &settings.client_trust_cert_path {
        Some(path) if settings.client_auth_server && !settings.test_mode => {
            let roots = Arc::new(load_roots(path)?);
            let inner =
                rustls::client::WebPkiServerVerifier::builder_with_provider(roots, provider())
                    .build()
                    .map_err(|e| format!("{}: {e}", path.display()))?;
            Arc::new(ChainOnly { inner })
        }
        _ => Arc::new(AnyServer(Signatures(provider()))),
    };
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS protocol versions: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let config = match (&settings.client_cert_path, &settings.client_key_path) {
        (Some(cert), Some(key)) if !settings.test_mode => {
            if settings.client_key_password.is_some() {
                return Err(unsupported_password("tls.client.keyPassword"));
            }
            builder
                .with_client_auth_cert(load_certs(cert)?, load_key(key)?)
                .map_err(|e| format!("the client certificate and key do not go together: {e}"))?
        }
        _ => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// A tool's client TLS (mqadmin, bench): on with `--tls` or with `tls.enable=true` in the
/// `tls.config.file` (`--tls-config`, default upstream's `/etc/rocketmq/tls.properties`),
/// whose `tls.client.*` keys say what to trust and show. `None`: plain connections.
pub fn tool_client_config(
    enable: bool,
    config_file: Option<&Path>,
) -> Result<Option<Arc<rustls::ClientConfig>>, String> {
    let settings = TlsSettings::resolve(|key| match key {
        "tls.enable" if enable => Some("true".to_string()),
        "tls.config.file" => config_file.map(|p| p.display().to_string()),
        _ => None,
    })?;
    if !settings.client_enable {
        return Ok(None);
    }
    client_config(&settings).map(Some)
}

fn unsupported_password(key: &str) -> String {
    format!(
        "{key} is set, but ringmq reads only unencrypted PEM keys: decrypt the key \
         (openssl pkcs8 -in key.pem -out plain.pem) and unset {key}"
    )
}

fn client_verifier(settings: &TlsSettings) -> Result<Arc<dyn ClientCertVerifier>, String> {
    let mandatory = match settings.server_need_client_auth {
        ClientAuth::None => return Ok(rustls::server::WebPkiClientVerifier::no_client_auth()),
        ClientAuth::Optional => false,
        ClientAuth::Require => true,
    };
    match &settings.server_trust_cert_path {
        Some(path) if settings.server_auth_client && !settings.test_mode => {
            let roots = Arc::new(load_roots(path)?);
            let builder = WebPkiClientVerifier::builder_with_provider(roots, provider());
            let builder = if mandatory {
                builder
            } else {
                builder.allow_unauthenticated()
            };
            builder
                .build()
                .map_err(|e| format!("{}: {e}", path.display()))
        }
        _ => Ok(Arc::new(AnyClient {
            signatures: Signatures(provider()),
            mandatory,
        })),
    }
}

/// Every certificate of a PEM file, in order (leaf first for a chain).
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("cannot read certificates from {}: {e}", path.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{} holds no PEM certificate", path.display()));
    }
    Ok(certs)
}

/// The first private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| {
        format!(
            "cannot read an unencrypted PEM private key from {}: {e}",
            path.display()
        )
    })
}

fn load_roots(path: &Path) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for cert in load_certs(path)? {
        roots
            .add(cert)
            .map_err(|e| format!("{}: not a usable CA certificate: {e}", path.display()))?;
    }
    Ok(roots)
}

/// Test mode's certificate: self-signed, made at start, never written anywhere.
fn self_signed() -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), String> {
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_string()])
        .map_err(|e| format!("cannot make the test-mode certificate: {e}"))?;
    let key = PrivateKeyDer::Pkcs8(made.key_pair.serialize_der().into());
    Ok((vec![made.cert.der().clone()], key))
}

/// The handshake-signature checks every verifier here makes with the provider's
/// algorithms: even where any certificate is taken, the peer must hold the key of the one
/// it shows.
#[derive(Debug)]
struct Signatures(Arc<CryptoProvider>);

impl Signatures {
    fn tls12(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn tls13(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Upstream's client without `tls.client.authServer`: any server certificate is taken.
#[derive(Debug)]
struct AnyServer(Signatures);

impl ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.tls12(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.tls13(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.schemes()
    }
}

/// Upstream's client with `tls.client.authServer`: the chain must lead to a trusted CA,
/// but the name in the certificate is not compared with the address dialled.
#[derive(Debug)]
struct ChainOnly {
    inner: Arc<rustls::client::WebPkiServerVerifier>,
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Err(rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName))
            | Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Upstream's server without `tls.server.authClient`: a client certificate is asked for
/// (and with `require`, must be shown) but any is taken.
#[derive(Debug)]
struct AnyClient {
    signatures: Signatures,
    mandatory: bool,
}

impl ClientCertVerifier for AnyClient {
    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.signatures.tls12(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.signatures.tls13(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.signatures.schemes()
    }
}
