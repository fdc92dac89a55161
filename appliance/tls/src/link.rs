//! [`TlsLink`]: one connection's TLS state as a sans-IO pump. Ciphertext read from the
//! socket goes in and plaintext comes out into the frame buffer; plaintext to send goes in
//! and ciphertext comes out into a write buffer. The connection's reader and writer tasks
//! (on one core) share it; neither holds it across an await.

use std::io::{self, Read as _, Write as _};
use std::net::IpAddr;
use std::sync::Arc;

use bytes::{Buf as _, BytesMut};
use rustls::pki_types::ServerName;

/// Largest plaintext handed to rustls in one call: a bound on what one call encrypts
/// (rustls splits it into records of at most 16 KiB).
const SEAL_CHUNK_BYTES: usize = 256 * 1024;

/// What feeding ciphertext produced, besides plaintext.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fed {
    /// The peer sent close_notify: no more plaintext will come.
    pub peer_closed: bool,
    /// TLS bytes are waiting to go out (a handshake flight, an alert, a key update).
    pub wants_write: bool,
}

/// A TLS error with what it means for the connection.
#[derive(Debug)]
pub struct TlsError(pub String);

impl std::fmt::Display for TlsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TlsError {}

impl From<TlsError> for io::Error {
    fn from(e: TlsError) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, e.0)
    }
}

pub struct TlsLink {
    conn: rustls::Connection,
}

impl TlsLink {
    pub fn server(config: Arc<rustls::ServerConfig>) -> Result<Self, TlsError> {
        let conn = rustls::ServerConnection::new(config)
            .map_err(|e| TlsError(format!("TLS setup failed: {e}")))?;
        Ok(Self::new(conn.into()))
    }

    /// A client towards `peer`; the name sent is the address (no host names are dialled
    /// by RocketMQ clients once a route is known).
    pub fn client(config: Arc<rustls::ClientConfig>, peer: IpAddr) -> Result<Self, TlsError> {
        let conn = rustls::ClientConnection::new(config, ServerName::IpAddress(peer.into()))
            .map_err(|e| TlsError(format!("TLS setup failed: {e}")))?;
        Ok(Self::new(conn.into()))
    }

    fn new(mut conn: rustls::Connection) -> Self {
        // Output is bounded by the connection's own output bound before it gets here, and
        // `seal` drains after every chunk, so rustls never needs to refuse plaintext.
        conn.set_buffer_limit(None);
        Self { conn }
    }

    pub fn is_handshaking(&self) -> bool {
        self.conn.is_handshaking()
    }

    pub fn wants_write(&self) -> bool {
        self.conn.wants_write()
    }

    /// Consumes all of `cipher`, appending the plaintext it carried to `plain`.
    pub fn feed(&mut self, cipher: &mut BytesMut, plain: &mut BytesMut) -> Result<Fed, TlsError> {
        let mut peer_closed = false;
        while !cipher.is_empty() {
            let mut slice = &cipher[..];
            let taken = self
                .conn
                .read_tls(&mut slice)
                .map_err(|e| TlsError(format!("TLS read failed: {e}")))?;
            cipher.advance(taken);
            let state = self.conn.process_new_packets().map_err(|e| {
                // The alert telling the peer why is queued; it is lost with the connection
                // unless sent, which the caller may try with `take_outgoing`.
                TlsError(format!("TLS error: {e}"))
            })?;
            peer_closed |= state.peer_has_closed();
            self.drain_plaintext(plain, state.plaintext_bytes_to_read())?;
            if taken == 0 {
                break;
            }
        }
        Ok(Fed {
            peer_closed,
            wants_write: self.conn.wants_write(),
        })
    }

    fn drain_plaintext(&mut self, plain: &mut BytesMut, bytes: usize) -> Result<(), TlsError> {
        if bytes == 0 {
            return Ok(());
        }
        let start = plain.len();
        plain.resize(start + bytes, 0);
        let mut filled = 0;
        while filled < bytes {
            match self.conn.reader().read(&mut plain[start + filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    plain.truncate(start + filled);
                    return Err(TlsError(format!("TLS plaintext read failed: {e}")));
                }
            }
        }
        plain.truncate(start + filled);
        Ok(())
    }

    /// Encrypts `plain`, appending the records to `out`.
    pub fn seal(&mut self, plain: &[u8], out: &mut Vec<u8>) -> Result<(), TlsError> {
        for chunk in plain.chunks(SEAL_CHUNK_BYTES) {
            self.conn
                .writer()
                .write_all(chunk)
                .map_err(|e| TlsError(format!("TLS write failed: {e}")))?;
            self.take_outgoing(out);
        }
        Ok(())
    }

    /// Appends every TLS byte waiting to go out to `out`.
    pub fn take_outgoing(&mut self, out: &mut Vec<u8>) {
        while self.conn.wants_write() {
            // Writing into a Vec cannot fail.
            if self.conn.write_tls(out).unwrap_or(0) == 0 {
                break;
            }
        }
    }

    /// Queues close_notify (sent by the next `take_outgoing`).
    pub fn close(&mut self) {
        self.conn.send_close_notify();
    }
}

/// A first byte of 0x16 is a TLS handshake record: how a permissive port tells a TLS
/// client from a plain one (a Remoting frame starts with its length's high byte, which is
/// 0x16 only for frames of 352 MiB and more, far above any frame bound).
pub fn looks_like_tls(first_byte: u8) -> bool {
    first_byte == 0x16
}
