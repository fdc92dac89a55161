//! Test helpers for processor unit tests: a fake client connection that records what the
//! broker pushes to it, an in-memory broker context, and `run` helpers that dispatch a request
//! and wait for deferred answers.

use std::net::SocketAddr;
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ringmq_remoting::RemotingCommand;

use crate::config::BrokerConfig;
use crate::context::{BrokerContext, BrokerResponse, ClientChannel, Deferred, Handled, RequestCtx};
use crate::store_api::{BrokerStore, MemStore};

pub struct FakeChannel {
    id: u64,
    sent: Mutex<Vec<RemotingCommand>>,
    closed: Mutex<bool>,
}

impl FakeChannel {
    pub fn new(id: u64) -> Arc<Self> {
        Arc::new(Self {
            id,
            sent: Mutex::new(Vec::new()),
            closed: Mutex::new(false),
        })
    }
    pub fn sent(&self) -> Vec<RemotingCommand> {
        self.sent.lock().unwrap().clone()
    }
}

impl ClientChannel for FakeChannel {
    fn id(&self) -> u64 {
        self.id
    }
    fn peer_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 40000 + (self.id % 1000) as u16))
    }
    fn is_alive(&self) -> bool {
        !*self.closed.lock().unwrap()
    }
    fn send_oneway(&self, command: RemotingCommand) -> bool {
        self.sent.lock().unwrap().push(command);
        true
    }
    fn close(&self) {
        *self.closed.lock().unwrap() = true;
    }
}

struct TestCtx {
    channel: Arc<dyn ClientChannel>,
    tx: Mutex<Option<mpsc::Sender<BrokerResponse>>>,
    queued_ms: u64,
}

impl RequestCtx for TestCtx {
    fn channel(&self) -> &Arc<dyn ClientChannel> {
        &self.channel
    }
    fn defer(&self) -> Deferred {
        let tx = self.tx.lock().unwrap().take().expect("defer called twice");
        Box::new(move |r| {
            let _ = tx.send(r);
        })
    }
    fn queued_ms(&self) -> u64 {
        self.queued_ms
    }
}

/// A context over a fresh [`MemStore`] with the hold service running.
pub fn test_context(config: BrokerConfig) -> (Arc<BrokerContext>, Arc<MemStore>) {
    let store = Arc::new(MemStore::new());
    let ctx = BrokerContext::for_tests(config, store.clone() as Arc<dyn BrokerStore>);
    let s = store.clone();
    ctx.hold
        .start(Box::new(move |t, q| s.max_offset_in_queue(t, q)));
    (ctx, store)
}

fn dispatch(
    ctx: &Arc<BrokerContext>,
    req: RemotingCommand,
    ch: Arc<dyn ClientChannel>,
    queued_ms: u64,
) -> (Handled, Receiver<BrokerResponse>) {
    let (tx, rx) = mpsc::channel();
    let rc = TestCtx {
        channel: ch,
        tx: Mutex::new(Some(tx)),
        queued_ms,
    };
    (ctx.dispatch(req, &rc), rx)
}

fn finish(handled: Handled, rx: Receiver<BrokerResponse>) -> BrokerResponse {
    match handled {
        Handled::Now(r) => r,
        Handled::Later => rx
            .recv_timeout(Duration::from_secs(5))
            .expect("deferred answer within 5 s"),
        Handled::Nothing => panic!("no answer for a two-way request"),
    }
}

pub fn run(ctx: &Arc<BrokerContext>, req: RemotingCommand) -> BrokerResponse {
    let (h, rx) = dispatch(ctx, req, FakeChannel::new(1), 0);
    finish(h, rx)
}

pub fn run_on(
    ctx: &Arc<BrokerContext>,
    req: RemotingCommand,
    ch: &Arc<FakeChannel>,
) -> BrokerResponse {
    let (h, rx) = dispatch(ctx, req, ch.clone(), 0);
    finish(h, rx)
}

pub fn run_with_queue_delay(
    ctx: &Arc<BrokerContext>,
    req: RemotingCommand,
    queued_ms: u64,
) -> BrokerResponse {
    let (h, rx) = dispatch(ctx, req, FakeChannel::new(1), queued_ms);
    finish(h, rx)
}

pub fn run_deferred(
    ctx: &Arc<BrokerContext>,
    req: RemotingCommand,
) -> (Handled, Receiver<BrokerResponse>) {
    dispatch(ctx, req, FakeChannel::new(1), 0)
}

/// Sends one message (V2 header) with `tag` (none when empty) and `KEYS=KEY-1`.
pub fn send_simple(
    ctx: &Arc<BrokerContext>,
    topic: &str,
    queue_id: i32,
    tag: &str,
    body: &[u8],
) -> BrokerResponse {
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
