//! In-process callers of a [`RequestHandler`]: a core with no thread, no listener and no
//! socket, owned by one thread of another front end (the gRPC endpoint), which calls the
//! handler with Remoting requests on connections it opens here and takes what the handler
//! code posts back: deferred answers, server-initiated oneway requests, closes.
//!
//! Handler code cannot tell these connections from socket ones: deferred answers take a
//! slot in the connection's table as on a network core, so an answer posted from a stage
//! thread, a dropped responder or a long poll woken later is mapped back to the request's
//! opaque here, the way a core completes it. The owner waits on [`LocalCore::doorbell`],
//! calls its `begin_drain`, then drains [`LocalCore::next_event`] (the doorbell's protocol:
//! without `begin_drain` later posts ring no more); nothing here blocks.
//!
//! Connection ids carry [`LOCAL_CORE_INDEX`] in their top 16 bits, so tables keyed by
//! connection id never confuse them with a network core's.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use ringmq_remoting::RemotingCommand;
use ringmq_ring::Notifier;

use super::conn::{ConnLocal, CoreLocal};
use super::{ConnShared, Connection, CoreMsg, CoreShared, Reply, RequestContext};
use super::{RequestHandler, Response};

/// The core index of every local core: far above any real core count (at most 1024), and
/// below 2^16 so it fits the top bits of a connection id.
pub const LOCAL_CORE_INDEX: usize = 0xFFF0;

/// What handler code posted to a local core's connection.
#[derive(Debug)]
pub enum LocalEvent {
    /// The deferred answer to the request with `opaque` on connection `conn_id`. A dropped
    /// responder yields SYSTEM_ERROR, as a network core sends.
    Answer {
        conn_id: u64,
        opaque: i32,
        response: Response,
    },
    /// A server-initiated oneway request (e.g. CHECK_TRANSACTION_STATE).
    Oneway {
        conn_id: u64,
        command: RemotingCommand,
    },
    /// Handler code closed the connection.
    Close { conn_id: u64 },
}

/// A core with no thread. `!Send`: it lives on its owner's thread.
pub struct LocalCore {
    shared: Arc<CoreShared>,
    local: Rc<CoreLocal>,
    conns: HashMap<u64, Rc<ConnLocal>>,
    next_seq: u64,
    local_addr: SocketAddr,
}

impl LocalCore {
    /// A core whose connections report `local_addr` as their local end (the front end's
    /// listening address) and call `handler`. Fails only if its eventfd cannot be made.
    pub fn new(handler: Arc<dyn RequestHandler>, local_addr: SocketAddr) -> io::Result<Self> {
        let shared = CoreShared::detached(LOCAL_CORE_INDEX)?;
        let local = CoreLocal::detached(shared.clone(), handler);
        Ok(Self {
            shared,
            local,
            conns: HashMap::new(),
            next_seq: 0,
            local_addr,
        })
    }

    /// Rung whenever something is posted here; the owner waits on it.
    pub fn doorbell(&self) -> &Arc<Notifier> {
        &self.shared.notifier
    }

    /// Opens a connection for a client at `peer`.
    pub fn open(&mut self, peer: SocketAddr) -> Connection {
        let seq = self.next_seq;
        self.next_seq += 1;
        let id = ((LOCAL_CORE_INDEX as u64) << 48) | (seq & ((1 << 48) - 1));
        let handle = Connection {
            inner: Arc::new(ConnShared {
                id,
                peer,
                local: self.local_addr,
                alive: AtomicBool::new(true),
                core: self.shared.clone(),
            }),
        };
        let conn = Rc::new(ConnLocal::off_core(handle.clone(), &self.local));
        self.conns.insert(id, conn);
        handle
    }

    /// Forgets connection `conn_id` and tells the handler it closed. Answers still due on
    /// it are dropped when they arrive.
    pub fn close(&mut self, conn_id: u64) {
        if let Some(conn) = self.conns.remove(&conn_id) {
            conn.handle.close();
            let live = conn.deferred.borrow().live();
            self.local.in_flight_sub(live);
            self.local.handler.on_close(&conn.handle);
        }
    }

    /// Connections open here.
    pub fn len(&self) -> usize {
        self.conns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.conns.is_empty()
    }

    /// Calls the handler with `request` on connection `conn_id`; `None` when that
    /// connection is not open here.
    pub fn call(&self, conn_id: u64, request: RemotingCommand) -> Option<Reply> {
        let conn = self.conns.get(&conn_id)?.clone();
        let rc = RequestContext::off_core(self.local.clone(), conn, &request);
        Some(self.local.handler.handle(request, &rc))
    }

    /// The oldest event posted here and not yet taken. Answers to requests of closed
    /// connections and stale answers are skipped.
    pub fn next_event(&self) -> Option<LocalEvent> {
        loop {
            let msg = self.shared.take_posted()?;
            let event = match msg {
                CoreMsg::Respond {
                    conn_id,
                    slot,
                    generation,
                    response,
                } => self.answer(conn_id, slot, generation, response),
                CoreMsg::Send { conn_id, command } => Some(LocalEvent::Oneway { conn_id, command }),
                CoreMsg::Close { conn_id } => Some(LocalEvent::Close { conn_id }),
                // Posted only to cores with a loop (connection hand-off, tasks, shutdown).
                CoreMsg::Adopt(_) | CoreMsg::Run(_) | CoreMsg::Shutdown => None,
            };
            if event.is_some() {
                return event;
            }
        }
    }

    fn answer(
        &self,
        conn_id: u64,
        slot: u32,
        generation: u32,
        response: Option<Response>,
    ) -> Option<LocalEvent> {
        let conn = self.conns.get(&conn_id)?;
        let pending = conn.deferred.borrow_mut().remove(slot, generation)?;
        self.local.in_flight_sub(1);
        if pending.oneway {
            return None;
        }
        let response = pending.answer_or_error(conn_id, response);
        Some(LocalEvent::Answer {
            conn_id,
            opaque: pending.opaque,
            response,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringmq_remoting::ResponseCode;
    use std::time::Duration;

    /// Answers code 1 now, code 2 later from another thread, drops the responder of code 3
    /// and sends a oneway request back for code 4.
    struct Echo;

    impl RequestHandler for Echo {
        fn handle(&self, request: RemotingCommand, ctx: &RequestContext) -> Reply {
            match request.code {
                1 => request
                    .response_to(ResponseCode::Success.code(), None)
                    .into(),
                2 => {
                    let responder = ctx.responder();
                    std::thread::spawn(move || {
                        responder.respond(request.response_to(ResponseCode::Success.code(), None))
                    });
                    Reply::Later
                }
                3 => {
                    drop(ctx.responder());
                    Reply::Later
                }
                _ => {
                    ctx.connection()
                        .send_oneway(RemotingCommand::request(39, 0));
                    Reply::Nothing
                }
            }
        }
    }

    fn wait_event(core: &LocalCore) -> LocalEvent {
        for _ in 0..100 {
            core.doorbell().begin_drain();
            if let Some(e) = core.next_event() {
                return e;
            }
            core.doorbell().wait_timeout(Duration::from_millis(50));
        }
        panic!("no event within 5 s");
    }

    #[test]
    fn answers_now_later_dropped_and_oneway_reach_the_owner() {
        let addr = SocketAddr::from(([127, 0, 0, 1], 8081));
        let mut core = LocalCore::new(Arc::new(Echo), addr).unwrap();
        let conn = core.open(SocketAddr::from(([127, 0, 0, 1], 50000)));
        assert_eq!(conn.core_index(), LOCAL_CORE_INDEX);
        assert_eq!(conn.local_addr(), addr);
        let id = conn.id();

        let now = core.call(id, RemotingCommand::request(1, 11)).unwrap();
        assert!(matches!(now, Reply::Now(r) if r.command.opaque == 11));

        assert!(matches!(
            core.call(id, RemotingCommand::request(2, 12)),
            Some(Reply::Later)
        ));
        match wait_event(&core) {
            LocalEvent::Answer {
                conn_id,
                opaque,
                response,
            } => {
                assert_eq!((conn_id, opaque), (id, 12));
                assert_eq!(response.command.code, ResponseCode::Success.code());
            }
            other => panic!("expected an answer, got {other:?}"),
        }

        core.call(id, RemotingCommand::request(3, 13)).unwrap();
        match wait_event(&core) {
            LocalEvent::Answer {
                opaque, response, ..
            } => {
                assert_eq!(opaque, 13);
                assert_eq!(response.command.code, ResponseCode::SystemError.code());
            }
            other => panic!("expected SYSTEM_ERROR, got {other:?}"),
        }

        core.call(id, RemotingCommand::request(4, 14)).unwrap();
        match wait_event(&core) {
            LocalEvent::Oneway { conn_id, command } => {
                assert_eq!((conn_id, command.code), (id, 39));
            }
            other => panic!("expected a oneway request, got {other:?}"),
        }
        assert!(core.next_event().is_none());
    }

    #[test]
    fn answers_for_a_closed_connection_are_dropped() {
        let addr = SocketAddr::from(([127, 0, 0, 1], 8081));
        let mut core = LocalCore::new(Arc::new(Echo), addr).unwrap();
        let id = core.open(addr).id();
        assert!(matches!(
            core.call(id, RemotingCommand::request(2, 1)),
            Some(Reply::Later)
        ));
        core.close(id);
        assert!(core.call(id, RemotingCommand::request(1, 2)).is_none());
        std::thread::sleep(Duration::from_millis(100));
        // Only the close the connection posted to itself remains.
        while let Some(event) = core.next_event() {
            assert!(matches!(event, LocalEvent::Close { .. }), "{event:?}");
        }
        assert!(core.is_empty());
    }
}
