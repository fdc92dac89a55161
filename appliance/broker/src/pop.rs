//! POP consumption (features.md §f) in checkpoint mode:
//!
//! - [`processor`]: POP_MESSAGE; [`ack`]: ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME;
//!   [`notification`]: NOTIFICATION;
//! - [`order`] and [`orderly`]: orderly (FIFO) POP's per-queue batches, and its acks and
//!   invisible-time changes;
//! - [`peek`]: PEEK_MESSAGE and POLLING_INFO; [`batch_ack`]: BATCH_ACK_MESSAGE;
//! - [`buffer`]: the line in which pops' consumer offsets commit, and checkpoints held in
//!   memory for their acks (`enablePopBufferMerge`);
//! - [`filter`]: a pop's TAG or SQL92 expression;
//! - [`inflight`]: messages in flight per queue (`enablePopMessageThreshold`);
//! - [`polling`]: pops that found nothing waiting for a message (long polling);
//! - [`revive_log`]: checkpoints and acks written to the revive topic as timer messages,
//!   and the retry copies of messages nobody acked;
//! - [`revive_scan`]: one scan of a revive queue, sans-IO: which messages are due again;
//! - [`revive`]: the thread that runs the scans and writes the retries.

pub mod ack;
pub mod batch_ack;
pub mod buffer;
pub mod filter;
pub mod inflight;
pub mod notification;
pub mod order;
pub mod orderly;
pub mod peek;
pub mod polling;
pub mod processor;
pub mod revive;
pub mod revive_log;
pub mod revive_scan;

pub use processor::PopState;
