//! ringmq's own Rust client for Apache RocketMQ's Remoting protocol, used by the admin CLI,
//! the benchmark and the integration tests.
//!
//! Layers:
//! - [`transport`]: pooled, pipelined connections on compio (the servers' runtime): requests
//!   matched by opaque, per-request timeouts, oneway, bounded in-flight window, reconnection,
//!   server-initiated requests.
//! - [`blocking`]: `block_on` for single-threaded callers and [`BlockingClient`], a client
//!   on a background runtime thread for everyone else.
//!
//! All async types are bound to the compio runtime thread that created them (`!Send`).

pub mod admin;
pub mod bench;
pub mod blocking;
pub mod consumer;
pub mod error;
pub mod message;
pub mod producer;
pub mod route;
pub mod transport;

pub use admin::{Admin, ConsumeStats, TopicSpec, TopicStats};
pub use bench::{run_bench, BenchArgs, BenchMode, BenchSummary, SendMode};
pub use blocking::{block_on, BlockingClient};
pub use consumer::{
    ConsumeFrom, ConsumeResult, MessageListener, PullConsumer, PullConsumerConfig, PullOptions,
    PullResult, PullStatus, PushConsumer, PushConsumerConfig,
};
pub use error::{ClientError, Result};
pub use message::{Message, MessageExt, MessageQueue, SendResult, SendStatus};
pub use producer::{Producer, ProducerConfig, QueueSelector};
pub use route::{RouteCache, TopicRoute};
pub use transport::{ClientConfig, RemotingClient, RequestHandler};
