//! The controllers' consensus group: an openraft group whose log holds batches of the
//! state machine's events (upstream's replicated events, in their 2-byte type + JSON
//! form), persisted under `controllerStorePath`, and whose Raft traffic travels as
//! Remoting requests on each controller's own address (as DLedger does), so one port per
//! controller serves brokers, mqadmin and the other controllers.
//!
//! - [`log_store`]: the Raft log, vote and commit index on disk.
//! - [`state_machine`]: applies event batches to the shared [`crate::replicas::ReplicasInfo`]
//!   and keeps snapshots of it.
//! - [`network`]: Raft RPCs to the other controllers over [`crate::wire`].

pub mod log_store;
pub mod network;
pub mod state_machine;

use std::io::Cursor;

use serde::{Deserialize, Serialize};

/// One log entry's payload: the encoded events of one validated write, applied together.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventBatch {
    pub events: Vec<Vec<u8>>,
}

openraft::declare_raft_types!(
    /// The controller group's Raft types: event batches in, nothing back (the writer
    /// answers from its own validation once the batch is applied).
    pub TypeConfig:
        D = EventBatch,
        R = (),
);

pub type NodeId = u64;
pub type Raft = openraft::Raft<TypeConfig>;
pub type LogId = openraft::LogId<NodeId>;
pub type Entry = openraft::Entry<TypeConfig>;
pub type StorageError = openraft::StorageError<NodeId>;

/// Ringmq's request codes for Raft traffic between controllers (not RocketMQ codes; in
/// the range DLedger keeps for its own traffic, above every RocketMQ code).
pub const RAFT_APPEND_ENTRIES: i32 = 59_001;
pub const RAFT_VOTE: i32 = 59_002;
pub const RAFT_INSTALL_SNAPSHOT: i32 = 59_003;

/// A storage error that names what failed, for openraft to report and stop on.
pub(crate) fn io_error(
    subject: openraft::ErrorSubject<NodeId>,
    verb: openraft::ErrorVerb,
    e: impl std::fmt::Display,
) -> StorageError {
    openraft::StorageIOError::new(subject, verb, openraft::AnyError::error(e.to_string())).into()
}

/// Keeps `Cursor` in use by the type declaration above (openraft's default snapshot data).
pub type SnapshotData = Cursor<Vec<u8>>;
