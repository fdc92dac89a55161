//! A small Remoting client on the controller's tokio runtime: the Raft traffic between
//! controllers and the role-change notices to brokers. One request at a time per
//! connection (each caller owns its connection), every wait bounded by a time-out, every
//! frame bounded by the codec's limit.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::BytesMut;
use ringmq_remoting::frame::FrameDecoder;
use ringmq_remoting::RemotingCommand;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest frame a controller accepts from a peer (a Raft snapshot chunk or a batch of
/// entries is far smaller).
pub const MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;

pub struct Conn {
    peer: SocketAddr,
    stream: TcpStream,
    read_buf: BytesMut,
    decoder: FrameDecoder,
    next_opaque: i32,
}

fn timed_out(peer: SocketAddr, what: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("{what} {peer}: timed out"),
    )
}

impl Conn {
    pub async fn connect(peer: SocketAddr, timeout: Duration) -> std::io::Result<Conn> {
        let stream = tokio::time::timeout(timeout, TcpStream::connect(peer))
            .await
            .map_err(|_| timed_out(peer, "connect to"))??;
        stream.set_nodelay(true)?;
        Ok(Conn {
            peer,
            stream,
            read_buf: BytesMut::with_capacity(64 * 1024),
            decoder: FrameDecoder::new(MAX_FRAME_BYTES),
            next_opaque: 1,
        })
    }

    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// Sends `request` and waits for the response with its opaque. A connection that
    /// fails or times out must be dropped by the caller (a late answer would be misread).
    pub async fn call(
        &mut self,
        mut request: RemotingCommand,
        timeout: Duration,
    ) -> std::io::Result<RemotingCommand> {
        let opaque = self.next_opaque;
        self.next_opaque = self.next_opaque.wrapping_add(1).max(1);
        request.opaque = opaque;
        let peer = self.peer;
        tokio::time::timeout(timeout, self.exchange(request, opaque))
            .await
            .map_err(|_| timed_out(peer, "request to"))?
    }

    async fn exchange(
        &mut self,
        request: RemotingCommand,
        opaque: i32,
    ) -> std::io::Result<RemotingCommand> {
        let mut out = BytesMut::new();
        request.encode(&mut out);
        self.stream.write_all(&out).await?;
        loop {
            match self.decoder.decode(&mut self.read_buf) {
                Ok(Some(cmd)) if cmd.is_response() && cmd.opaque == opaque => return Ok(cmd),
                // A stray frame (an old answer, a request from the peer): not ours.
                Ok(Some(_)) => continue,
                Ok(None) => {}
                Err(e) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("bad frame from {}: {e}", self.peer),
                    ))
                }
            }
            if self.stream.read_buf(&mut self.read_buf).await? == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("{} closed the connection", self.peer),
                ));
            }
        }
    }
}

/// One request on a fresh connection.
pub async fn call_once(
    peer: SocketAddr,
    request: RemotingCommand,
    timeout: Duration,
) -> std::io::Result<RemotingCommand> {
    let mut conn = Conn::connect(peer, timeout).await?;
    conn.call(request, timeout).await
}
