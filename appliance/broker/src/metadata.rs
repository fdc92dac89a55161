//! Broker metadata kept in `<storePathRootDir>/config/*.json` (store.md §13).

pub mod consumer_offset;
pub mod delay_offset;
pub mod subscription_group;
pub mod topic_config;
