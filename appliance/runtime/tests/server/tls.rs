//! TLS on a server port (`ServerTuning::tls`), driven by a blocking rustls client: the
//! enforcing and permissive modes, large and file-range bodies through the record layer,
//! certificate checks both ways, and clients that are not TLS at all.

use super::*;
use std::path::PathBuf;

use rcgen::{BasicConstraints, CertificateParams, CertifiedKey, DnType, IsCa, KeyPair};
use ringmq_tls::{ClientAuth, TlsMode, TlsSettings};
use rustls::pki_types::ServerName;

/// A CA, a server certificate and a client certificate it signed, and a certificate of
/// another CA: PEM files in a directory removed on drop.
struct Pki {
    dir: PathBuf,
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn ca(name: &str) -> CertifiedKey {
    let key_pair = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    let cert = params.self_signed(&key_pair).unwrap();
    CertifiedKey { cert, key_pair }
}

fn leaf(names: &[&str], by: &CertifiedKey) -> CertifiedKey {
    let key_pair = KeyPair::generate().unwrap();
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let params = CertificateParams::new(names).unwrap();
    let cert = params.signed_by(&key_pair, &by.cert, &by.key_pair).unwrap();
    CertifiedKey { cert, key_pair }
}

impl Pki {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("ringmq-tls-it-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |file: &str, text: String| std::fs::write(dir.join(file), text).unwrap();
        let ca = ca("ringmq test CA");
        let other = ca_other();
        // The server's certificate names a host, not the address dialled: upstream's
        // clients check the chain only, and so must ours.
        let server = leaf(&["broker.example"], &ca);
        let client = leaf(&["client.example"], &ca);
        let stranger = leaf(&["client.example"], &other);
        write("ca.pem", ca.cert.pem());
        write("other-ca.pem", other.cert.pem());
        write("server.pem", server.cert.pem());
        write("server.key", server.key_pair.serialize_pem());
        write("client.pem", client.cert.pem());
        write("client.key", client.key_pair.serialize_pem());
        write("stranger.pem", stranger.cert.pem());
        write("stranger.key", stranger.key_pair.serialize_pem());
        Self { dir }
    }

    fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }

    /// Server settings from the files (test mode off).
    fn server(&self, mode: TlsMode) -> TlsSettings {
        TlsSettings {
            server_mode: mode,
            test_mode: false,
            server_cert_path: Some(self.path("server.pem")),
            server_key_path: Some(self.path("server.key")),
            config_file: self.path("no-such-tls.properties"),
            ..TlsSettings::default()
        }
    }

    /// Client settings trusting `ca_file`, showing `identity` (cert, key) if given.
    fn client(&self, ca_file: &str, identity: Option<(&str, &str)>) -> TlsSettings {
        TlsSettings {
            test_mode: false,
            client_enable: true,
            client_auth_server: true,
            client_trust_cert_path: Some(self.path(ca_file)),
            client_cert_path: identity.map(|(c, _)| self.path(c)),
            client_key_path: identity.map(|(_, k)| self.path(k)),
            config_file: self.path("no-such-tls.properties"),
            ..TlsSettings::default()
        }
    }
}

fn ca_other() -> CertifiedKey {
    ca("some other CA")
}

fn tls_tuning(settings: &TlsSettings) -> ServerTuning {
    ServerTuning {
        tls: ringmq_tls::server_config(settings).expect("server TLS config"),
        ..ServerTuning::default()
    }
}

/// A blocking TLS Remoting client.
struct TlsClient {
    tls: rustls::StreamOwned<rustls::ClientConnection, TcpStream>,
    buf: BytesMut,
    decoder: FrameDecoder,
}

impl TlsClient {
    /// Connects and finishes the handshake (its failure is the error).
    fn connect(addr: SocketAddr, settings: &TlsSettings) -> io::Result<Self> {
        let config = ringmq_tls::client_config(settings).map_err(io::Error::other)?;
        let tcp = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
        tcp.set_read_timeout(Some(Duration::from_secs(10)))?;
        tcp.set_write_timeout(Some(Duration::from_secs(10)))?;
        let name = ServerName::IpAddress(addr.ip().into());
        let conn = rustls::ClientConnection::new(config, name).map_err(io::Error::other)?;
        let mut tls = rustls::StreamOwned::new(conn, tcp);
        while tls.conn.is_handshaking() {
            tls.conn.complete_io(&mut tls.sock)?;
        }
        Ok(Self {
            tls,
            buf: BytesMut::new(),
            decoder: FrameDecoder::default(),
        })
    }

    fn send_all(&mut self, commands: &[RemotingCommand]) -> io::Result<()> {
        let mut out = BytesMut::new();
        for cmd in commands {
            cmd.encode(&mut out);
        }
        self.tls.write_all(&out)?;
        self.tls.flush()
    }

    fn recv(&mut self) -> io::Result<RemotingCommand> {
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            if let Some(cmd) = self
                .decoder
                .decode(&mut self.buf)
                .map_err(|e| io::Error::other(e.to_string()))?
            {
                return Ok(cmd);
            }
            match self.tls.read(&mut chunk)? {
                0 => return Err(io::ErrorKind::UnexpectedEof.into()),
                n => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    fn call(&mut self, cmd: &RemotingCommand) -> io::Result<RemotingCommand> {
        self.send_all(std::slice::from_ref(cmd))?;
        let r = self.recv()?;
        assert_eq!(r.opaque, cmd.opaque, "response for the wrong request");
        Ok(r)
    }
}

fn echo(opaque: i32, code: i32, body: Vec<u8>) -> RemotingCommand {
    let mut cmd = request(code, opaque, SerializeType::Json);
    cmd.body = Bytes::from(body);
    cmd
}

/// Echo of bodies spanning many TLS records, then 64 pipelined deferred echoes answered
/// out of order by the handler and written back in batches.
fn exercise(client: &mut TlsClient) {
    let big: Vec<u8> = (0..1_000_003u32).map(|i| (i * 7 + i / 251) as u8).collect();
    let r = client
        .call(&echo(1, ECHO_NOW, big.clone()))
        .expect("big echo");
    assert!(r.body == big, "a 1 MB body came back changed");
    let batch: Vec<_> = (0..64)
        .map(|i| echo(100 + i, ECHO_LATER, format!("later-{i}").into_bytes()))
        .collect();
    client.send_all(&batch).expect("send batch");
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..batch.len() {
        let r = client.recv().expect("deferred echo");
        assert_eq!(r.body, Bytes::from(format!("later-{}", r.opaque - 100)));
        seen.insert(r.opaque);
    }
    assert_eq!(seen.len(), batch.len(), "every request answered once");
}

fn tls_counts(server: &Server) -> (u64, u64) {
    server.stats().iter().fold((0, 0), |(h, r), s| {
        (h + s.tls_handshakes, r + s.tls_refused)
    })
}

#[test]
fn enforcing_port_serves_tls_and_closes_plain_clients() {
    init_tracing();
    let pki = Pki::new("enforcing");
    let server = Server::start_with(
        config("tls-enforcing"),
        tls_tuning(&pki.server(TlsMode::Enforcing)),
        TestHandler::new(300),
    )
    .expect("start");
    let addr = server.local_addr();
    for _ in 0..3 {
        let mut client = TlsClient::connect(addr, &pki.client("ca.pem", None)).expect("handshake");
        exercise(&mut client);
    }
    // A plain client's frame is not a TLS record: closed without an answer.
    let mut plain = Client::connect(addr);
    plain.send(&request(ECHO_NOW, 7, SerializeType::Json));
    assert!(plain.closed_by_server(Duration::from_secs(5)));
    let (handshakes, refused) = tls_counts(&server);
    assert_eq!(handshakes, 3);
    assert_eq!(refused, 1);
    server.shutdown();
}

#[test]
fn permissive_port_tells_tls_from_plain_clients_by_their_first_byte() {
    init_tracing();
    // Upstream's defaults: permissive, test mode (a self-signed certificate made at start),
    // clients that take any server certificate.
    let defaults = TlsSettings {
        config_file: PathBuf::from("/nonexistent/tls.properties"),
        ..TlsSettings::default()
    };
    let server = Server::start_with(
        config("tls-permissive"),
        tls_tuning(&defaults),
        TestHandler::new(300),
    )
    .expect("start");
    let addr = server.local_addr();
    let mut tls = TlsClient::connect(addr, &defaults).expect("handshake");
    let mut plain = Client::connect(addr);
    for round in 0..3 {
        exercise(&mut tls);
        let r = plain.call(&echo(round, ECHO_NOW, b"plain".to_vec()));
        assert_eq!(r.body, Bytes::from_static(b"plain"));
    }
    assert_eq!(tls_counts(&server), (1, 0));
    server.shutdown();
}

#[test]
fn file_range_bodies_arrive_intact_over_tls() {
    use file_bodies::*;
    init_tracing();
    let pki = Pki::new("files");
    let (path, data, file) = temp_file("tls-mixed", 4 * 1024 * 1024);
    let handler = Arc::new(FileHandler {
        data: data.clone(),
        file: Mutex::new(Some(file.clone())),
        handled: AtomicUsize::new(0),
    });
    let server = Server::start_with(
        config("tls-files"),
        tls_tuning(&pki.server(TlsMode::Enforcing)),
        handler,
    )
    .expect("start");
    let mut expected = b"head|".to_vec();
    for (_, bytes) in mixed_body(&file, &data) {
        expected.extend_from_slice(&bytes);
    }
    let mut client =
        TlsClient::connect(server.local_addr(), &pki.client("ca.pem", None)).expect("handshake");
    let batch: Vec<_> = (0..9)
        .map(|i| {
            request(
                if i % 3 == 0 { MIXED } else { SMALL },
                i,
                SerializeType::Json,
            )
        })
        .collect();
    client.send_all(&batch).expect("send");
    for i in 0..batch.len() as i32 {
        let r = client.recv().expect("recv");
        assert_eq!(r.opaque, i, "responses in request order");
        if i % 3 == 0 {
            assert!(r.body == expected, "mixed body {i} differs over TLS");
        } else {
            assert_eq!(r.body, Bytes::from(format!("small-{i}")));
        }
    }
    server.shutdown();
    drop(path);
}

/// A client that completes (or seems to complete) its handshake and still cannot get an
/// answer: TLS 1.3 reports a refused client certificate only after the client's Finished.
fn refused(addr: SocketAddr, settings: &TlsSettings) -> bool {
    match TlsClient::connect(addr, settings) {
        Err(_) => true,
        Ok(mut client) => client.call(&echo(1, ECHO_NOW, b"x".to_vec())).is_err(),
    }
}

#[test]
fn client_certificates_are_required_and_checked_against_the_trusted_ca() {
    init_tracing();
    let pki = Pki::new("client-auth");
    let settings = TlsSettings {
        server_need_client_auth: ClientAuth::Require,
        server_auth_client: true,
        server_trust_cert_path: Some(pki.path("ca.pem")),
        ..pki.server(TlsMode::Enforcing)
    };
    let server = Server::start_with(
        config("tls-client-auth"),
        tls_tuning(&settings),
        TestHandler::new(300),
    )
    .expect("start");
    let addr = server.local_addr();
    let mut good = TlsClient::connect(
        addr,
        &pki.client("ca.pem", Some(("client.pem", "client.key"))),
    )
    .expect("a client with a certificate of the trusted CA");
    exercise(&mut good);
    assert!(refused(addr, &pki.client("ca.pem", None)), "no certificate");
    assert!(
        refused(
            addr,
            &pki.client("ca.pem", Some(("stranger.pem", "stranger.key")))
        ),
        "a certificate of another CA"
    );
    server.shutdown();

    // `optional`: a client without a certificate is served; one with a bad one is not.
    let optional = TlsSettings {
        server_need_client_auth: ClientAuth::Optional,
        ..settings
    };
    let server = Server::start_with(
        config("tls-client-auth-optional"),
        tls_tuning(&optional),
        TestHandler::new(300),
    )
    .expect("start");
    let addr = server.local_addr();
    let mut anonymous = TlsClient::connect(addr, &pki.client("ca.pem", None)).expect("handshake");
    exercise(&mut anonymous);
    assert!(refused(
        addr,
        &pki.client("ca.pem", Some(("stranger.pem", "stranger.key")))
    ));
    server.shutdown();
}

#[test]
fn a_client_that_trusts_another_ca_refuses_the_server() {
    init_tracing();
    let pki = Pki::new("wrong-ca");
    let server = Server::start_with(
        config("tls-wrong-ca"),
        tls_tuning(&pki.server(TlsMode::Permissive)),
        TestHandler::new(300),
    )
    .expect("start");
    let err = TlsClient::connect(server.local_addr(), &pki.client("other-ca.pem", None))
        .err()
        .expect("the server's chain does not lead to the trusted CA");
    assert!(err.to_string().contains("certificate"), "{err}");
    // The server saw a failed handshake, and serves the next client.
    let deadline = Instant::now() + Duration::from_secs(5);
    while tls_counts(&server).1 == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(tls_counts(&server).1, 1);
    let mut ok = TlsClient::connect(server.local_addr(), &pki.client("ca.pem", None)).expect("ok");
    exercise(&mut ok);
    server.shutdown();
}

#[test]
fn garbage_after_a_handshake_byte_and_missing_files_are_reported() {
    init_tracing();
    let pki = Pki::new("garbage");
    let server = Server::start_with(
        config("tls-garbage"),
        tls_tuning(&pki.server(TlsMode::Permissive)),
        TestHandler::new(300),
    )
    .expect("start");
    let mut bogus = Client::connect(server.local_addr());
    bogus
        .stream
        .write_all(&[0x16, 0x03, 0x01, 0x00, 0x05, 1, 2, 3, 4, 5])
        .unwrap();
    assert!(bogus.closed_by_server(Duration::from_secs(5)));
    assert_eq!(tls_counts(&server).1, 1);
    server.shutdown();

    let missing = TlsSettings {
        server_cert_path: Some(pki.path("absent.pem")),
        ..pki.server(TlsMode::Enforcing)
    };
    let err = ringmq_tls::server_config(&missing).unwrap_err();
    assert!(err.contains("absent.pem"), "{err}");
    let no_cert = TlsSettings {
        server_cert_path: None,
        ..pki.server(TlsMode::Enforcing)
    };
    let err = ringmq_tls::server_config(&no_cert).unwrap_err();
    assert!(err.contains("tls.server.certPath"), "{err}");
    let encrypted = TlsSettings {
        server_key_password: Some("secret".into()),
        ..pki.server(TlsMode::Enforcing)
    };
    let err = ringmq_tls::server_config(&encrypted).unwrap_err();
    assert!(err.contains("tls.server.keyPassword"), "{err}");
    assert!(ringmq_tls::server_config(&pki.server(TlsMode::Disabled))
        .unwrap()
        .is_none());
}
