//! ringmq's own Rust client for Apache RocketMQ's Remoting protocol, used by the admin CLI,
//! the `ringmq bench` load generator (in the cli crate) and the integration tests.
//!
//! Layers:
//! - [`transport`]: pooled, pipelined connections on compio (the servers' runtime): requests
//!   matched by opaque, per-request timeouts, oneway, bounded in-flight window, reconnection,
//!   server-initiated requests.
//! - [`route`]: name-server routes (lenient TopicRouteData), publish/subscribe queue lists,
//!   per-topic cache with TTL refresh.
//! - [`producer`]: sync/async/oneway/batch sends (`SEND_MESSAGE_V2` / `SEND_BATCH_MESSAGE`),
//!   queue selectors, `UNIQ_KEY` ids, retry on another broker.
//! - [`consumer`]: explicit pull API (long polling, offsets, send-back) and a push consumer
//!   (heartbeat, average-allocation rebalance, offset commits, retry send-back).
//! - [`admin`]: typed `mqadmin`-style calls to name servers and brokers.
//! - [`blocking`]: `block_on` for single-threaded callers and [`Blocking`] /
//!   [`BlockingClient`], client state on a background runtime thread for everyone else.
//!
//! All async types are bound to the compio runtime thread that created them (`!Send`).

pub mod admin;
pub mod blocking;
pub mod consumer;
pub mod error;
pub mod message;
pub mod pop;
pub mod producer;
pub mod route;
pub mod transport;

pub use admin::{Admin, ConsumeStats, TopicSpec, TopicStats};
pub use blocking::{block_on, Blocking, BlockingClient};
pub use consumer::{
    ConsumeFrom, ConsumeResult, MessageListener, PullConsumer, PullConsumerConfig, PullOptions,
    PullResult, PullStatus, PushConsumer, PushConsumerConfig,
};
pub use error::{ClientError, Result};
pub use message::{Message, MessageExt, MessageQueue, SendResult, SendStatus};
pub use pop::{PopConsumer, PopConsumerConfig, PopResult, PopStatus, PoppedMessage};
pub use producer::{Producer, ProducerConfig, QueueSelector};
pub use route::{RouteCache, TopicRoute};
pub use transport::{ClientConfig, RemotingClient, RequestHandler};
