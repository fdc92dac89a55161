//! Test doubles for request-handling code (feature `test-util`): a connection with no
//! socket on a network core with no thread ([`DetachedConnection`]), request contexts on it
//! for calling handler-side functions directly, and what that code posted to the
//! connection ([`Posted`]): deferred answers, oneway requests and closes.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use ringmq_remoting::RemotingCommand;

use super::core_loop::{CoreLocal, CoreMsg, CoreShared};
use super::{ConnShared, Connection, Reply, RequestContext, RequestHandler, Response};

/// A live connection alone on its own detached core: `Clone + Send + Sync`, like a
/// [`Connection`], which it hands out for tables that keep connections.
#[derive(Clone, Debug)]
pub struct DetachedConnection {
    conn: Connection,
}

/// Something the code under test posted to a [`DetachedConnection`].
#[derive(Debug)]
pub enum Posted {
    /// A [`super::Responder`]'s answer; `None` when it was dropped unanswered (a running
    /// core answers SYSTEM_ERROR then).
    Answer(Option<Response>),
    /// [`Connection::send_oneway`].
    Oneway(RemotingCommand),
    /// [`Connection::close`].
    Close,
}

/// The handler of a detached core: nothing is ever read, so it is never called.
struct NoRequests;

impl RequestHandler for NoRequests {
    fn handle(&self, _request: RemotingCommand, _ctx: &RequestContext) -> Reply {
        Reply::Nothing
    }
}

impl DetachedConnection {
    /// Connection `id` from `peer`; fails only if the core's eventfd cannot be created.
    pub fn new(id: u64, peer: SocketAddr) -> io::Result<Self> {
        let core = CoreShared::detached(0)?;
        let inner = Arc::new(ConnShared {
            id,
            peer,
            local: SocketAddr::from(([127, 0, 0, 1], 0)),
            alive: AtomicBool::new(true),
            core,
        });
        Ok(Self {
            conn: Connection { inner },
        })
    }

    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    /// The context a handler gets for `request` on this connection; its responder posts
    /// the answer here.
    pub fn request_context(&self, request: &RemotingCommand) -> RequestContext {
        let core = CoreLocal::detached(self.conn.inner.core.clone(), Arc::new(NoRequests));
        RequestContext::detached(core, self.conn.clone(), request)
    }

    /// Everything posted to this connection since the last call, oldest first.
    pub fn take_posted(&self) -> Vec<Posted> {
        let mut posted = Vec::new();
        while let Some(msg) = self.conn.inner.core.take_posted() {
            match msg {
                CoreMsg::Respond { response, .. } => posted.push(Posted::Answer(response)),
                CoreMsg::Send { command, .. } => posted.push(Posted::Oneway(command)),
                CoreMsg::Close { .. } => posted.push(Posted::Close),
                // Never posted to a connection's core by handler-side code.
                CoreMsg::Adopt(_) | CoreMsg::Run(_) | CoreMsg::Shutdown => {}
            }
        }
        posted
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringmq_remoting::ResponseCode;

    #[test]
    fn responder_oneway_and_close_are_posted_in_order() {
        let peer = SocketAddr::from(([127, 0, 0, 1], 40001));
        let det = DetachedConnection::new(7, peer).unwrap();
        assert_eq!(det.connection().id(), 7);
        assert_eq!(det.connection().peer_addr(), peer);
        let request = RemotingCommand::request(10, 42);
        let rc = det.request_context(&request);
        assert_eq!(rc.opaque(), 42);
        let responder = rc.responder();
        assert!(det
            .connection()
            .send_oneway(RemotingCommand::request(40, 1)));
        responder.respond(request.response_to(ResponseCode::Success.code(), None));
        // A second responder for the same request posts nothing; an unanswered first one
        // posts `None`.
        drop(rc.responder());
        drop(det.request_context(&request).responder());
        det.connection().close();
        assert!(!det.connection().is_alive());
        let posted = det.take_posted();
        assert!(matches!(&posted[0], Posted::Oneway(c) if c.code == 40 && c.is_oneway()));
        assert!(matches!(&posted[1], Posted::Answer(Some(r)) if r.command.code == 0));
        assert!(matches!(&posted[2], Posted::Answer(None)));
        assert!(matches!(&posted[3], Posted::Close));
        assert_eq!(posted.len(), 4);
    }
}
