//! What every ringmq thread shares, below all other crates: the lock-poisoning policy
//! ([`LockExt`]) and the wall clock in RocketMQ's unit ([`now_ms`]).
//!
//! Kept free of I/O and of dependencies so that the protocol, store, runtime, broker,
//! namesrv and client crates can all use one definition of each.

mod clock;
mod lock;

pub use clock::now_ms;
pub use lock::{LockExt, RwLockExt};
