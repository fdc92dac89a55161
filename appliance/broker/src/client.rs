//! Producer and consumer groups as the broker sees them through heartbeats.

pub mod consumer_manager;
pub mod producer_manager;
