//! What every ringmq thread shares, below all other crates: the lock-poisoning policy
//! ([`LockExt`]), the wall clock in RocketMQ's unit ([`now_ms`]) and counters with one
//! writing thread ([`add_single_writer`]).
//!
//! Kept free of I/O and of dependencies so that the protocol, store, runtime, broker,
//! namesrv and client crates can all use one definition of each.

mod clock;
mod counter;
mod lock;

pub use clock::now_ms;
pub use counter::add_single_writer;
pub use lock::{LockExt, RwLockExt};
