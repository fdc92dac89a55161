//! ringmq's controller: RocketMQ 5.x's automatic master election for broker sets.
//!
//! The decisions, without I/O:
//! - [`replicas`]: the replica state machine: broker ids, SyncStateSets and master
//!   election with epochs; writes answer with [`event::Event`]s, and only applying an
//!   event changes the tables, so a consensus log of events keeps every controller alike.
//! - [`elect`]: the elect policy (in-sync replicas first; epoch, offset, priority).
//! - [`heartbeat`]: broker liveness from BROKER_HEARTBEATs, on a clock the caller passes.
//!
//! The running controller, on a control thread off the hot cores:
//! - [`config`]: `controller.conf` with upstream's keys.
//! - [`consensus`]: the Raft group (openraft) whose log carries the events.
//! - [`manager`]: the request path, the liveness scan and role-change notices.
//! - [`server`]: the process piece: listener, control thread, start and stop.
//! - [`wire`]: the small Remoting client the controller sends with.

pub mod config;
pub mod consensus;
pub mod elect;
pub mod event;
pub mod heartbeat;
pub mod manager;
pub mod replicas;
pub mod server;
pub mod wire;

pub use config::ControllerConfig;
pub use server::Controller;

#[cfg(test)]
mod replicas_tests;
