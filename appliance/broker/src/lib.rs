//! The ringmq broker: RocketMQ's produce/consume path on top of the runtime (network cores)
//! and the store (append, flush, reput stages).

pub mod acl;
pub mod broker;
pub mod client;
pub mod clock;
pub mod config;
pub mod config_check;
mod config_keys;
pub mod context;
pub mod disk_store;
pub mod filter;
pub mod grpc_keys;
pub mod live_config;
pub mod long_polling;
pub mod metadata;
pub mod metrics;
pub mod persist;
pub mod pop;
pub mod processor;
pub mod random;
pub mod recall;
pub mod register;
pub mod replicas;
pub mod retry;
pub mod role;
pub mod schedule;
pub mod slave_sync;
#[cfg(test)]
mod test_support;
pub mod timer;
pub mod timer_put;
pub mod transaction;

pub use broker::{Broker, BrokerError};
pub use config::BrokerConfig;
