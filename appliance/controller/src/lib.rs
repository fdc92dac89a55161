//! ringmq's controller core: what RocketMQ 5.x's controller decides, without I/O.
//!
//! - [`replicas`]: the replica state machine: broker ids, SyncStateSets and master
//!   election with epochs; writes answer with [`event::Event`]s, and only applying an
//!   event changes the tables, so a consensus log of events keeps every controller alike.
//! - [`elect`]: the elect policy (in-sync replicas first; epoch, offset, priority).
//! - [`heartbeat`]: broker liveness from BROKER_HEARTBEATs, on a clock the caller passes.
//!
//! The consensus group, the RPC server and the broker side build on these.

pub mod elect;
pub mod event;
pub mod heartbeat;
pub mod replicas;

#[cfg(test)]
mod replicas_tests;
