//! ringmq's name server: a drop-in for Apache RocketMQ's `mqnamesrv` (`features.md` §h).
//!
//! Brokers register their topics here (REGISTER_BROKER every 30 s); clients ask for topic
//! routes (GET_ROUTEINFO_BY_TOPIC); mqadmin reads clusters, topic lists and the KV store.
//! Same port (9876), same `namesrv.conf` keys, same wire answers.
//!
//! - [`config`]: `NamesrvConfig` from Java properties (`-c`), printed for `-p`.
//! - [`route`]: `RouteInfoManager`, the route tables and broker expiry (sans-IO).
//! - [`kvconfig`]: the namespace/key/value store persisted to `kvConfigPath`.
//! - [`processor`]: `NamesrvProcessor`, one answer per request code (sans-IO).
//! - [`server`]: [`Namesrv`], the processor on the runtime's Remoting server plus the
//!   expiry-scan and persist threads.

pub mod config;
pub mod kvconfig;
pub mod processor;
pub mod route;
pub mod server;

pub use config::NamesrvConfig;
pub use processor::{NamesrvProcessor, Peer};
pub use route::RouteInfoManager;
pub use server::Namesrv;
