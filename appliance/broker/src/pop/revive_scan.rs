//! One scan of one revive queue, sans-IO (features.md §f.6 steps 2–4): the checkpoints
//! (`ck`) and acks (`ack`, `bAck`) read from the queue are joined on their merge key, and
//! the plan says which messages to re-deliver and how far the revive offset may move.
//!
//! A checkpoint is due only when the scan has seen the queue up to more than
//! [`ACK_WAIT_MS`] past its revive time: its acks are written to arrive at the revive time
//! (timer messages), so earlier the absence of an ack proves nothing. The revive offset
//! moves to the last due checkpoint's own offset, never past a checkpoint not yet due,
//! so the next scan starts right after it and sees every ack of the ones left.

use std::collections::HashMap;

use ringmq_remoting::pop::{AckMsg, PopCheckPoint, ACK_TAG, BATCH_ACK_TAG, CK_TAG};

/// How far past a checkpoint's revive time the scan must have read before the checkpoint
/// is due (upstream's `ackTimeInterval` + one second).
pub const ACK_WAIT_MS: i64 = 2_000;

/// One message of a revive queue, as the scan needs it.
#[derive(Debug, Clone, Copy)]
pub struct ReviveMessage<'a> {
    pub tags: &'a str,
    pub body: &'a [u8],
    pub queue_offset: i64,
    /// The message's `TIMER_DELIVER_MS` (when the timer released it), 0 when absent.
    pub deliver_ms: i64,
}

/// A due checkpoint and the queue offsets of its messages nobody acked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueCheckpoint {
    pub ck: PopCheckPoint,
    pub unacked_offsets: Vec<i64>,
}

/// What a scan decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevivePlan {
    /// In revive-offset order.
    pub due: Vec<DueCheckpoint>,
    /// The revive offset to commit once every due checkpoint is re-delivered.
    pub new_offset: i64,
}

#[derive(Debug)]
pub struct ReviveScan {
    old_offset: i64,
    cks: HashMap<String, PopCheckPoint>,
    /// Acks read before their checkpoint (a checkpoint re-put later than its acks), kept
    /// to apply when it arrives within this scan.
    early_acks: HashMap<String, Vec<i64>>,
    end_time_ms: i64,
    /// Bodies that did not parse: logged by the caller, skipped.
    pub bad_bodies: u64,
}

impl ReviveScan {
    /// A scan starting after `old_offset`, the committed revive offset.
    pub fn new(old_offset: i64) -> Self {
        Self {
            old_offset,
            cks: HashMap::new(),
            early_acks: HashMap::new(),
            end_time_ms: 0,
            bad_bodies: 0,
        }
    }

    /// How far in time the scan has read (the latest `TIMER_DELIVER_MS` seen).
    pub fn end_time_ms(&self) -> i64 {
        self.end_time_ms
    }

    /// Moves the scan's time forward when the queue is known to hold nothing more up to
    /// `now_ms` (no message for a while and the timer not lagging).
    pub fn reached(&mut self, now_ms: i64) {
        self.end_time_ms = self.end_time_ms.max(now_ms);
    }

    pub fn checkpoints(&self) -> usize {
        self.cks.len()
    }

    /// The checkpoints read, in revive-queue order (the order [`Self::plan`] takes them).
    pub fn pending(&self) -> Vec<&PopCheckPoint> {
        let mut sorted: Vec<&PopCheckPoint> = self.cks.values().collect();
        sorted.sort_by_key(|ck| ck.revive_offset);
        sorted
    }

    /// Takes one message; unknown tags are ignored.
    pub fn add(&mut self, msg: ReviveMessage<'_>) {
        self.end_time_ms = self.end_time_ms.max(msg.deliver_ms);
        match msg.tags {
            CK_TAG => match PopCheckPoint::decode(msg.body) {
                Ok(mut ck) => {
                    ck.revive_offset = msg.queue_offset;
                    let key = ck.merge_key();
                    for offset in self.early_acks.remove(&key).unwrap_or_default() {
                        ck.ack(offset);
                    }
                    // A checkpoint read twice (a re-put) keeps the bits already set.
                    if let Some(seen) = self.cks.get(&key) {
                        ck.bit_map |= seen.bit_map;
                    }
                    self.cks.insert(key, ck);
                }
                Err(_) => self.bad_bodies += 1,
            },
            ACK_TAG | BATCH_ACK_TAG => match AckMsg::decode(msg.body) {
                Ok(ack) => {
                    let key = ack.merge_key();
                    match self.cks.get_mut(&key) {
                        Some(ck) => {
                            for offset in ack.acked_offsets() {
                                ck.ack(offset);
                            }
                        }
                        None => self
                            .early_acks
                            .entry(key)
                            .or_default()
                            .extend(ack.acked_offsets()),
                    }
                }
                Err(_) => self.bad_bodies += 1,
            },
            _ => {}
        }
    }

    /// The due checkpoints, oldest revive offset first, up to the first one not yet due.
    pub fn plan(&self) -> RevivePlan {
        let mut due = Vec::new();
        let mut new_offset = self.old_offset;
        for ck in self.pending() {
            if self.end_time_ms - ck.revive_time_ms() <= ACK_WAIT_MS {
                break;
            }
            let unacked_offsets = (0..usize::from(ck.num))
                .filter(|i| !ck.is_acked(*i))
                .map(|i| ck.ack_offset_by_index(i))
                .collect();
            new_offset = ck.revive_offset;
            due.push(DueCheckpoint {
                ck: ck.clone(),
                unacked_offsets,
            });
        }
        RevivePlan { due, new_offset }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ck(start: i64, pop_time: i64, num: u8) -> PopCheckPoint {
        PopCheckPoint {
            start_offset: start,
            pop_time_ms: pop_time,
            invisible_time_ms: 10_000,
            num,
            queue_id: 0,
            topic: "T".into(),
            group: "G".into(),
            queue_offset_diff: (0..i32::from(num)).collect(),
            broker_name: Some("b".into()),
            ..Default::default()
        }
    }

    fn ack_of(ck: &PopCheckPoint, offset: i64) -> AckMsg {
        AckMsg {
            ack_offset: offset,
            start_offset: ck.start_offset,
            group: ck.group.clone(),
            topic: ck.topic.clone(),
            queue_id: ck.queue_id,
            pop_time_ms: ck.pop_time_ms,
            broker_name: ck.broker_name.clone(),
            ack_offsets: Vec::new(),
        }
    }

    fn add_ck(scan: &mut ReviveScan, c: &PopCheckPoint, at: i64) {
        let body = c.encode();
        scan.add(ReviveMessage {
            tags: CK_TAG,
            body: body.as_bytes(),
            queue_offset: at,
            deliver_ms: c.revive_time_ms() - 1_000,
        });
    }

    fn add_ack(scan: &mut ReviveScan, a: &AckMsg, at: i64, deliver_ms: i64) {
        let body = a.encode();
        scan.add(ReviveMessage {
            tags: if a.ack_offsets.is_empty() {
                ACK_TAG
            } else {
                BATCH_ACK_TAG
            },
            body: body.as_bytes(),
            queue_offset: at,
            deliver_ms,
        });
    }

    #[test]
    fn acked_messages_are_not_revived_and_the_offset_stops_before_what_is_not_due() {
        let first = ck(100, 1_000, 3);
        let second = ck(200, 50_000, 1);
        let mut scan = ReviveScan::new(4);
        add_ck(&mut scan, &first, 5);
        add_ack(&mut scan, &ack_of(&first, 101), 6, first.revive_time_ms());
        add_ck(&mut scan, &second, 7);
        scan.reached(first.revive_time_ms() + ACK_WAIT_MS + 1);
        let plan = scan.plan();
        assert_eq!(plan.due.len(), 1);
        assert_eq!(plan.due[0].unacked_offsets, vec![100, 102]);
        assert_eq!(plan.new_offset, 5, "stops at the last due checkpoint");
        // Not yet past the ack wait: nothing is due, the offset stays.
        let mut early = ReviveScan::new(4);
        add_ck(&mut early, &first, 5);
        early.reached(first.revive_time_ms() + ACK_WAIT_MS);
        assert_eq!(
            early.plan(),
            RevivePlan {
                due: vec![],
                new_offset: 4
            }
        );
    }

    #[test]
    fn batch_acks_acks_before_their_checkpoint_and_garbage() {
        let c = ck(10, 1_000, 4);
        let mut scan = ReviveScan::new(-1);
        add_ack(&mut scan, &ack_of(&c, 13), 0, 0);
        add_ck(&mut scan, &c, 1);
        let batch = AckMsg {
            ack_offsets: vec![10, 11],
            ..ack_of(&c, 10)
        };
        add_ack(&mut scan, &batch, 2, c.revive_time_ms());
        scan.add(ReviveMessage {
            tags: CK_TAG,
            body: b"{oops",
            queue_offset: 3,
            deliver_ms: 0,
        });
        scan.add(ReviveMessage {
            tags: "other",
            body: b"",
            queue_offset: 4,
            deliver_ms: 0,
        });
        scan.reached(c.revive_time_ms() + 5_000);
        let plan = scan.plan();
        assert_eq!(plan.due[0].unacked_offsets, vec![12]);
        assert_eq!(scan.bad_bodies, 1);
        assert_eq!(plan.new_offset, 1);
    }

    proptest! {
        /// Every message of every due checkpoint is either acked or revived, never both;
        /// the offset never passes a checkpoint that is not due.
        #[test]
        fn every_message_is_acked_or_revived(
            cks in proptest::collection::vec((1u8..=8, 0i64..20_000, proptest::collection::vec(any::<bool>(), 8)), 1..12),
            scan_until in 0i64..40_000,
        ) {
            let mut scan = ReviveScan::new(-1);
            let mut at = 0i64;
            let mut expected = Vec::new();
            for (i, (num, pop_time, acked)) in cks.iter().enumerate() {
                let c = ck(i as i64 * 100, *pop_time, *num);
                add_ck(&mut scan, &c, at);
                let ck_offset = at;
                at += 1;
                let mut unacked = Vec::new();
                for (j, is_acked) in acked.iter().enumerate().take(usize::from(*num)) {
                    if *is_acked {
                        add_ack(&mut scan, &ack_of(&c, c.ack_offset_by_index(j)), at, c.revive_time_ms());
                        at += 1;
                    } else {
                        unacked.push(c.ack_offset_by_index(j));
                    }
                }
                expected.push((ck_offset, c.revive_time_ms(), unacked));
            }
            scan.reached(scan_until);
            let plan = scan.plan();
            let end = scan.end_time_ms();
            let mut due_expected: Vec<_> = expected.clone();
            due_expected.sort_by_key(|e| e.0);
            let mut last = -1;
            for (i, (offset, revive_time, unacked)) in due_expected.iter().enumerate() {
                if end - revive_time <= ACK_WAIT_MS {
                    prop_assert_eq!(plan.due.len(), i);
                    break;
                }
                prop_assert_eq!(&plan.due[i].unacked_offsets, unacked);
                last = *offset;
            }
            prop_assert_eq!(plan.new_offset, last);
        }
    }
}
