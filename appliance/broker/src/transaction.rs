//! Transactional messages (features.md §d, headers.md §7), after the send path has parked the
//! half message in `RMQ_SYS_TRANS_HALF_TOPIC` (processor/send.rs):
//!
//! - [`end_transaction`] answers END_TRANSACTION (37): COMMIT re-puts the half message to its
//!   real topic/queue as a COMMIT-type record, then marks the half message done; ROLLBACK only
//!   marks it done; UNKNOWN leaves it for the checker.
//! - "Done" is an op record in `RMQ_SYS_TRANS_OP_HALF_TOPIC` (same queue id as the half queue),
//!   tag `d`, body `"<halfQueueOffset>,"` ([`encode_op_record`]). Each decision writes its own op
//!   record right away: upstream batches them per queue for up to 3 s, which only saves records
//!   and makes the checker ask producers about transactions they already ended. The reader
//!   accepts upstream's batched bodies (`"17,18,21,"`), so a store written by a Java broker
//!   reads the same.
//! - [`TransactionalMessageCheckService`] walks the half queue from the progress of the system
//!   group `CID_RMQ_SYS_TRANS`, skips half messages that have an op record, and for the rest that
//!   are older than `transactionTimeOut` re-appends a copy (with `TRANSACTION_CHECK_TIMES` + 1)
//!   and asks a live producer of the message's `PGROUP` with CHECK_TRANSACTION_STATE (39); after
//!   `transactionCheckMax` checks the message is parked in `TRANS_CHECK_MAX_TIME_TOPIC` instead.
//!
//! Settings are RocketMQ's keys, read from the broker config at start (they are not modelled
//! `BrokerConfig` fields, so they arrive in `BrokerConfig::extra`): see [`TransactionConfig`].

use ringmq_sync::LockExt;

mod check;
mod end;
pub(crate) mod settings;
#[cfg(test)]
mod tests;

use std::sync::mpsc;
use std::time::Duration;

use bytes::BytesMut;
use ringmq_remoting::message::properties::{keys, MessageProperties};
use ringmq_remoting::message::record::{self, RecordFields, StoredRecord};
use ringmq_store::{PutMessageStatus, PutRequest, PutResult};

use crate::context::BrokerContext;
use crate::metadata::topic_config::TRANS_OP_HALF_TOPIC;

pub use check::{CheckOutcome, TransactionalMessageCheckService};
pub use end::end_transaction;
pub use settings::{
    TransactionConfig, DEFAULT_TRANSACTION_CHECK_INTERVAL_MS, DEFAULT_TRANSACTION_CHECK_MAX,
    DEFAULT_TRANSACTION_TIMEOUT_MS, MIN_TRANSACTION_CHECK_INTERVAL_MS,
};

/// The system consumer group whose offsets record the checker's progress on the half and op
/// queues (upstream `MixAll.CID_SYS_RMQ_TRANS`).
pub const TRANS_CHECK_GROUP: &str = "CID_RMQ_SYS_TRANS";
/// Tag of op records: the listed half offsets are done (committed or rolled back).
pub const OP_REMOVE_TAG: &str = "d";
/// Separator after each half offset in an op record's body.
pub const OP_OFFSET_SEPARATOR: char = ',';

/// How long the checker waits for a store answer before giving the round up.
const PUT_TIMEOUT_MS: u64 = 10_000;

/// The check immunity of a half message (`CHECK_IMMUNITY_TIME_IN_SECONDS`) as END_TRANSACTION
/// applies it: the property in ms, but never less than `transactionTimeOut` (unparsable → the
/// timeout).
pub fn end_immunity_ms(property: &str, timeout_ms: i64) -> i64 {
    property
        .trim()
        .parse::<i64>()
        .ok()
        .and_then(|s| s.checked_mul(1000))
        .unwrap_or(0)
        .max(timeout_ms)
}

/// The half offsets listed in an op record body (`"17,18,"`); junk entries are skipped.
pub fn parse_op_body(body: &[u8]) -> Vec<i64> {
    String::from_utf8_lossy(body)
        .split(OP_OFFSET_SEPARATOR)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .filter_map(|s| match s.parse::<i64>() {
            Ok(v) => Some(v),
            Err(_) => {
                tracing::warn!(entry = s, "op record entry is not a queue offset; ignored");
                None
            }
        })
        .collect()
}

/// The op record marking `half_queue_offset` of half queue `half_queue_id` done: topic
/// `RMQ_SYS_TRANS_OP_HALF_TOPIC`, same queue id, tag `d`, a fresh UNIQ_KEY, born and stored by
/// this broker.
pub fn encode_op_record(
    ctx: &BrokerContext,
    half_queue_id: i32,
    half_queue_offset: i64,
) -> Result<PutRequest, String> {
    let now = crate::persist::now_ms();
    let uniq = ctx.uniq_keys.lock_unpoisoned().next_id(now);
    let mut props = MessageProperties::new();
    let _ = props.insert(keys::TAGS, OP_REMOVE_TAG);
    let _ = props.insert(keys::WAIT, "false");
    if !uniq.is_empty() {
        let _ = props.insert(keys::UNIQ_KEY, &uniq);
    }
    let mut prop_bytes = Vec::with_capacity(64);
    props.encode_into(&mut prop_bytes);
    let body = format!("{half_queue_offset}{OP_OFFSET_SEPARATOR}");
    let fields = RecordFields {
        queue_id: half_queue_id,
        flag: 0,
        queue_offset: 0,
        physical_offset: 0,
        sys_flag: 0,
        born_timestamp_ms: now,
        born_host: ctx.store_host,
        store_timestamp_ms: 0,
        store_host: ctx.store_host,
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        body: body.as_bytes(),
        topic: TRANS_OP_HALF_TOPIC,
        properties: &prop_bytes,
    };
    let mut records = BytesMut::with_capacity(fields.encoded_size());
    record::encode_record(&fields, &mut records)
        .map_err(|e| format!("op record cannot be encoded: {e}"))?;
    Ok(PutRequest {
        topic: TRANS_OP_HALF_TOPIC.to_string(),
        queue_id: half_queue_id,
        sys_flag: 0,
        records,
        record_count: 1,
        wait_store_msg_ok: false,
    })
}

/// Where and as what a stored record is copied.
#[derive(Clone, Copy)]
pub(crate) struct CopyTarget<'a> {
    pub topic: &'a str,
    pub queue_id: i32,
    pub sys_flag: i32,
    pub prepared_transaction_offset: i64,
}

/// A copy of a stored record as `target` says, with `properties` (body, flag, born time and
/// host, reconsume times kept; stored by this broker), ready for the store.
pub(crate) fn copy_record(
    ctx: &BrokerContext,
    rec: &StoredRecord<'_>,
    target: &CopyTarget<'_>,
    properties: &MessageProperties,
) -> Result<PutRequest, String> {
    let CopyTarget {
        topic,
        queue_id,
        sys_flag,
        prepared_transaction_offset,
    } = *target;
    let mut prop_bytes = Vec::with_capacity(rec.properties.len() + 32);
    properties.encode_into(&mut prop_bytes);
    let fields = RecordFields {
        queue_id,
        flag: rec.flag,
        queue_offset: 0,
        physical_offset: 0,
        sys_flag,
        born_timestamp_ms: rec.born_timestamp_ms,
        born_host: rec.born_host,
        store_timestamp_ms: 0,
        store_host: ctx.store_host,
        reconsume_times: rec.reconsume_times,
        prepared_transaction_offset,
        body: rec.body,
        topic,
        properties: &prop_bytes,
    };
    let mut records = BytesMut::with_capacity(fields.encoded_size());
    record::encode_record(&fields, &mut records)
        .map_err(|e| format!("the record cannot be re-encoded for {topic}: {e}"))?;
    Ok(PutRequest {
        topic: topic.to_string(),
        queue_id,
        sys_flag,
        records,
        record_count: 1,
        wait_store_msg_ok: false,
    })
}

/// Whether the store kept the record (a flush or replication timeout still stored it).
pub(crate) fn is_stored(status: PutMessageStatus) -> bool {
    matches!(
        status,
        PutMessageStatus::PutOk
            | PutMessageStatus::FlushDiskTimeout
            | PutMessageStatus::FlushSlaveTimeout
            | PutMessageStatus::SlaveNotAvailable
    )
}

/// Why a put the checker waited for did not store its record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PutError {
    /// The store answered with a failure status.
    Refused(PutMessageStatus),
    /// No answer within [`PUT_TIMEOUT_MS`].
    NoAnswer,
}

impl PutError {
    /// Whether retrying the same record can never succeed (so the checker moves on instead of
    /// blocking the half queue behind it).
    pub(crate) fn is_permanent(self) -> bool {
        matches!(
            self,
            PutError::Refused(PutMessageStatus::MessageIllegal)
                | PutError::Refused(PutMessageStatus::PropertiesSizeExceeded)
        )
    }
}

impl std::fmt::Display for PutError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PutError::Refused(status) => write!(f, "the store refused the put: {}", status.name()),
            PutError::NoAnswer => write!(f, "the store did not answer within {PUT_TIMEOUT_MS} ms"),
        }
    }
}

/// Puts and waits for the store's answer (control threads only, never a network core).
pub(crate) fn put_and_wait(
    ctx: &BrokerContext,
    request: PutRequest,
) -> Result<PutResult, PutError> {
    let (tx, rx) = mpsc::sync_channel::<PutResult>(1);
    ctx.store.put(
        request,
        Box::new(move |r| {
            let _ = tx.send(r);
        }),
    );
    match rx.recv_timeout(Duration::from_millis(PUT_TIMEOUT_MS)) {
        Ok(r) if is_stored(r.status) => Ok(r),
        Ok(r) => Err(PutError::Refused(r.status)),
        Err(_) => Err(PutError::NoAnswer),
    }
}
