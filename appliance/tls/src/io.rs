//! The TLS handshake on a compio socket, before a connection's reader and writer tasks
//! start: both sides finish it here, so the tasks only ever move application data (and
//! the rare post-handshake record, which `TlsLink::feed` reports through `wants_write`).

use std::io;
use std::time::Duration;

use bytes::BytesMut;
use compio::io::{AsyncReadExt, AsyncWriteExt};
use compio::net::TcpStream;
use compio::BufResult;

use crate::link::TlsLink;

/// Bytes read per handshake read: a certificate flight fits a few of them.
const HANDSHAKE_READ_BYTES: usize = 16 * 1024;
/// Handshake flights larger than this are not a RocketMQ peer's: the connection is closed
/// instead of buffering without bound.
const MAX_HANDSHAKE_BUFFER_BYTES: usize = 1024 * 1024;

/// Runs the handshake to its end within `timeout`. `cipher` holds bytes already read
/// from the socket (the first bytes a permissive port peeked). Returns the link and the
/// application bytes that arrived with the handshake's last flight.
pub async fn handshake(
    stream: &mut TcpStream,
    link: TlsLink,
    cipher: BytesMut,
    timeout: Duration,
) -> io::Result<(TlsLink, BytesMut)> {
    match compio::time::timeout(timeout, drive(stream, link, cipher)).await {
        Ok(result) => result,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "TLS handshake not finished within {} ms",
                timeout.as_millis()
            ),
        )),
    }
}

async fn drive(
    stream: &mut TcpStream,
    mut link: TlsLink,
    mut cipher: BytesMut,
) -> io::Result<(TlsLink, BytesMut)> {
    let mut plain = BytesMut::new();
    let mut out = Vec::new();
    loop {
        if !cipher.is_empty() {
            if let Err(e) = link.feed(&mut cipher, &mut plain) {
                // Tell the peer why (the alert rustls queued), then give up.
                out.clear();
                link.take_outgoing(&mut out);
                if !out.is_empty() {
                    let _ = stream.write_all(std::mem::take(&mut out)).await;
                }
                return Err(e.into());
            }
        }
        if link.wants_write() {
            out.clear();
            link.take_outgoing(&mut out);
            let BufResult(result, back) = stream.write_all(std::mem::take(&mut out)).await;
            result?;
            out = back;
        }
        if !link.is_handshaking() {
            return Ok((link, plain));
        }
        if cipher.len() > MAX_HANDSHAKE_BUFFER_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "TLS handshake flight larger than 1 MiB",
            ));
        }
        cipher.reserve(HANDSHAKE_READ_BYTES);
        let BufResult(result, back) = stream.append(cipher).await;
        cipher = back;
        if result? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the peer closed the connection during the TLS handshake",
            ));
        }
    }
}
