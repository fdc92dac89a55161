//! Test helpers for processor unit tests: a client connection with no socket that records
//! what the broker pushes to it and the answers it gets (the runtime's detached connection),
//! an in-memory broker context, and `run` helpers that dispatch a request and wait for
//! deferred answers.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ringmq_remoting::RemotingCommand;
use ringmq_runtime::server::test_util::{DetachedConnection, Posted};
use ringmq_runtime::{Connection, Reply, RequestContext, Response};
use ringmq_store::{MemStore, StoreApi};

use crate::config::BrokerConfig;
use crate::context::BrokerContext;
use ringmq_sync::LockExt;

/// A client connection: what the broker sent on it oneway, and the deferred answers it got.
pub struct FakeChannel {
    detached: DetachedConnection,
    sent: Mutex<Vec<RemotingCommand>>,
    answers: Mutex<VecDeque<Option<Response>>>,
}

/// How long a test waits for a deferred answer by default.
const ANSWER_WAIT: Duration = Duration::from_secs(5);

impl FakeChannel {
    /// Connection `id` from 127.0.0.1, port 40000 + `id % 1000`.
    pub fn new(id: u64) -> Arc<Self> {
        let peer = SocketAddr::from(([127, 0, 0, 1], 40000 + (id % 1000) as u16));
        Arc::new(Self {
            detached: DetachedConnection::new(id, peer).expect("a detached test connection"),
            sent: Mutex::new(Vec::new()),
            answers: Mutex::new(VecDeque::new()),
        })
    }

    /// The connection handle the broker's client tables keep.
    pub fn connection(&self) -> Connection {
        self.detached.connection().clone()
    }

    /// The context a processor gets for `request` on this connection.
    pub fn request_context(&self, request: &RemotingCommand) -> RequestContext {
        self.detached.request_context(request)
    }

    /// Every oneway request the broker sent on this connection so far.
    pub fn sent(&self) -> Vec<RemotingCommand> {
        self.collect();
        self.sent.lock_unpoisoned().clone()
    }

    /// The oldest deferred answer not yet taken; an error when there is none yet, or when
    /// the responder was dropped unanswered.
    pub fn try_recv(&self) -> Result<Response, String> {
        answered(self.take_answer())
    }

    /// [`FakeChannel::try_recv`], waiting up to `timeout` for an answer.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<Response, String> {
        let deadline = Instant::now() + timeout;
        loop {
            let answer = self.take_answer();
            if answer.is_some() || Instant::now() >= deadline {
                return answered(answer);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn take_answer(&self) -> Option<Option<Response>> {
        self.collect();
        self.answers.lock_unpoisoned().pop_front()
    }

    fn collect(&self) {
        for posted in self.detached.take_posted() {
            match posted {
                Posted::Answer(r) => self.answers.lock_unpoisoned().push_back(r),
                Posted::Oneway(command) => self.sent.lock_unpoisoned().push(command),
                Posted::Close => {}
            }
        }
    }
}

fn answered(answer: Option<Option<Response>>) -> Result<Response, String> {
    match answer {
        Some(Some(r)) => Ok(r),
        Some(None) => Err("the responder was dropped unanswered".into()),
        None => Err("no answer yet".into()),
    }
}

/// A context over a fresh [`MemStore`]. No network core runs: held pulls wait in the
/// hold service's detached table, driven by [`await_answer`] (or `ctx.on_core_wake(0)`).
pub fn test_context(config: BrokerConfig) -> (Arc<BrokerContext>, Arc<MemStore>) {
    let store = Arc::new(MemStore::new());
    let ctx = BrokerContext::for_tests(config, store.clone() as Arc<dyn StoreApi>);
    (ctx, store)
}

fn dispatch(
    ctx: &Arc<BrokerContext>,
    req: RemotingCommand,
    ch: &FakeChannel,
    queued_ms: u64,
) -> Reply {
    let rc = ch.request_context(&req);
    crate::processor::dispatch_after_queue(ctx, req, &rc, queued_ms)
}

/// The answer to a request a processor returned `reply` for on `ch`: at once, or deferred
/// (waited for up to 5 s).
pub fn finish(reply: Reply, ch: &FakeChannel) -> Response {
    match reply {
        Reply::Now(r) => r,
        Reply::Later => ch
            .recv_timeout(ANSWER_WAIT)
            .expect("deferred answer within 5 s"),
        Reply::Nothing => panic!("no answer for a two-way request"),
    }
}

/// [`finish`], doing the per-core work a network core's loop would (held pulls) while it
/// waits for a deferred answer.
pub fn finish_on(ctx: &BrokerContext, reply: Reply, ch: &FakeChannel) -> Response {
    match reply {
        Reply::Later => await_answer(ctx, ch, ANSWER_WAIT).expect("deferred answer within 5 s"),
        other => finish(other, ch),
    }
}

/// The next deferred answer on `ch`, calling `ctx.on_core_wake(0)` while waiting up to
/// `timeout`.
pub fn await_answer(
    ctx: &BrokerContext,
    ch: &FakeChannel,
    timeout: Duration,
) -> Result<Response, String> {
    let deadline = Instant::now() + timeout;
    loop {
        ctx.on_core_wake(0);
        let answer = ch.take_answer();
        if answer.is_some() || Instant::now() >= deadline {
            return answered(answer);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

pub fn run(ctx: &Arc<BrokerContext>, req: RemotingCommand) -> Response {
    run_on(ctx, req, &FakeChannel::new(1))
}

pub fn run_on(ctx: &Arc<BrokerContext>, req: RemotingCommand, ch: &Arc<FakeChannel>) -> Response {
    finish_on(ctx, dispatch(ctx, req, ch, 0), ch)
}

pub fn run_with_queue_delay(
    ctx: &Arc<BrokerContext>,
    req: RemotingCommand,
    queued_ms: u64,
) -> Response {
    let ch = FakeChannel::new(1);
    finish_on(ctx, dispatch(ctx, req, &ch, queued_ms), &ch)
}

/// Dispatches on a fresh connection; its deferred answer, if any, arrives on that connection.
pub fn run_deferred(ctx: &Arc<BrokerContext>, req: RemotingCommand) -> (Reply, Arc<FakeChannel>) {
    let ch = FakeChannel::new(1);
    (dispatch(ctx, req, &ch, 0), ch)
}

/// Sends one message (V2 header) with `tag` (none when empty) and `KEYS=KEY-1`.
pub fn send_simple(
    ctx: &Arc<BrokerContext>,
    topic: &str,
    queue_id: i32,
    tag: &str,
    body: &[u8],
) -> Response {
    let mut props = String::from("KEYS\u{1}KEY-1\u{2}WAIT\u{1}true\u{2}");
    if !tag.is_empty() {
        props.push_str(&format!("TAGS\u{1}{tag}\u{2}"));
    }
    let mut r = RemotingCommand::request(310, 1);
    for (k, v) in [
        ("a", "PG"),
        ("b", topic),
        ("c", "TBW102"),
        ("d", "4"),
        ("e", &queue_id.to_string()),
        ("f", "0"),
        ("g", "1700000000000"),
        ("h", "0"),
        ("i", &props),
    ] {
        r.ext_fields.insert(k, v);
    }
    let resp = run(ctx, r.with_body(body.to_vec()));
    assert_eq!(
        resp.command.code, 0,
        "send failed: {:?}",
        resp.command.remark
    );
    resp
}

/// Registers a CLUSTERING push consumer of `group` on `topic` with `sub`.
pub fn heartbeat_consumer(
    ctx: &Arc<BrokerContext>,
    group: &str,
    topic: &str,
    sub: &str,
    sub_version: i64,
) {
    let body = serde_json::json!({
        "clientID": "client-1",
        "consumerDataSet": [{
            "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
            "subscriptionDataSet": [{"topic": topic, "subString": sub, "expressionType": "TAG", "subVersion": sub_version}]
        }]
    });
    let resp = run(
        ctx,
        RemotingCommand::request(34, 1).with_body(body.to_string()),
    );
    assert_eq!(resp.command.code, 0);
}
