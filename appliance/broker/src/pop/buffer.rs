//! The POP checkpoint buffer (upstream's PopBufferMergeService, features.md §f.5): where
//! the consumer offsets of checkpoint pops are committed in order, and, with
//! `enablePopBufferMerge=true`, where checkpoints wait in memory for their acks before
//! any of them is written.
//!
//! - Every checkpoint pop of a queue takes a place in the queue's line ([`PopBuffer::add`])
//!   before its checkpoint is stored; the queue's consumer offset moves to a place's next
//!   offset only when that place and every place before it are done. So a crash never
//!   leaves the offset past messages whose checkpoint was not stored.
//! - Held checkpoints take their acks in memory. One whose messages are all acked is done
//!   without a single revive record; the others are written, with their acks, when they
//!   stayed `popCkStayBufferTime` or come within `popCkStayBufferTimeOut` of their revive
//!   time ([`PopBuffer::take_due`], run by the revive thread).
//!
//! A shutdown writes every held checkpoint first (`revive.rs`); after a crash they are
//! lost, but their messages were never committed past, so they are popped again (at least
//! once, as upstream).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;

use ringmq_remoting::pop::PopCheckPoint;
use ringmq_sync::LockExt;

use crate::context::BrokerContext;

/// Moves a queue's consumer offset to what its line allows (never backwards).
pub fn commit(ctx: &BrokerContext, line: Option<Commit>) {
    let Some(Commit { queue, offset }) = line else {
        return;
    };
    let (group, topic, queue_id) = (&queue.group, &queue.topic, queue.queue_id);
    let committed = ctx.offsets.query_offset(group, topic, queue_id);
    if committed.is_none_or(|c| c < offset) {
        ctx.offsets.commit_offset(group, topic, queue_id, offset);
    }
}

/// A held checkpoint is written at least this long before its revive time, on top of
/// `popCkStayBufferTimeOut`, so the write lands before the revive scan looks for it.
pub const WRITE_AHEAD_MS: i64 = 1_500;

/// The queue a place belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueRef {
    pub group: String,
    pub topic: String,
    pub queue_id: i32,
}

/// "Commit this consumer offset" (only if it moves the offset forward).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    pub queue: QueueRef,
    pub offset: i64,
}

/// A checkpoint held in memory, and where it goes when written.
#[derive(Debug, Clone)]
pub struct Held {
    pub ck: PopCheckPoint,
    pub revive_qid: i32,
    lock_key: String,
    place: u64,
    due_ms: i64,
    /// Taken by [`PopBuffer::take_due`]: acks go to the revive log from then on.
    writing: bool,
}

/// What [`PopBuffer::ack`] did with an ack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AckTaken {
    /// Its checkpoint is not held (written, being written, or never held): write the ack.
    NotHeld,
    /// Recorded in the held checkpoint.
    Held,
    /// Recorded, and that was the last one: the checkpoint is gone, never written.
    AllAcked(Option<Commit>),
}

/// The bounds and times of holding (`popCk*` settings).
#[derive(Debug, Clone, Copy)]
pub struct HoldSettings {
    pub enabled: bool,
    pub stay_ms: i64,
    pub stay_timeout_ms: i64,
    pub max_held: usize,
    pub max_line: usize,
}

struct Place {
    id: u64,
    next_offset: i64,
    done: bool,
}

struct Line {
    queue: QueueRef,
    places: VecDeque<Place>,
}

#[derive(Default)]
struct Inner {
    held: HashMap<String, Held>,
    /// Held checkpoints by when they must be written: (due, place) → merge key.
    due: BTreeMap<(i64, u64), String>,
    lines: HashMap<String, Line>,
    next_id: u64,
}

/// See the module doc.
#[derive(Default)]
pub struct PopBuffer {
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for PopBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.inner.lock_unpoisoned();
        f.debug_struct("PopBuffer")
            .field("held", &inner.held.len())
            .field("lines", &inner.lines.len())
            .finish()
    }
}

impl Inner {
    /// Marks `id` done (or drops it) and commits what the head of the line allows.
    fn finish(&mut self, lock_key: &str, id: u64, keep: bool) -> Option<Commit> {
        let line = self.lines.get_mut(lock_key)?;
        let pos = line.places.iter().position(|p| p.id == id)?;
        if keep {
            line.places[pos].done = true;
        } else {
            line.places.remove(pos);
        }
        let mut offset = None;
        while line.places.front().is_some_and(|p| p.done) {
            offset = line.places.pop_front().map(|p| p.next_offset);
        }
        let commit = offset.map(|offset| Commit {
            queue: line.queue.clone(),
            offset,
        });
        if line.places.is_empty() {
            self.lines.remove(lock_key);
        }
        commit
    }
}

impl PopBuffer {
    /// Takes a place in the line of `lock_key` for a pop that read up to `next_offset`;
    /// with `hold`, its checkpoint stays in memory (when `settings` allow: else the caller
    /// stores it). The place id, and whether the checkpoint is held.
    pub fn add(
        &self,
        lock_key: &str,
        queue: &QueueRef,
        next_offset: i64,
        hold: Option<(PopCheckPoint, i32)>,
        settings: &HoldSettings,
        now_ms: i64,
    ) -> (u64, bool) {
        let mut inner = self.inner.lock_unpoisoned();
        inner.next_id += 1;
        let id = inner.next_id;
        let line_len = inner.lines.get(lock_key).map_or(0, |l| l.places.len());
        let held = hold.filter(|(ck, _)| {
            settings.enabled
                && ck.revive_time_ms().saturating_sub(now_ms)
                    > settings.stay_timeout_ms.saturating_add(WRITE_AHEAD_MS)
                && inner.held.len() < settings.max_held
                && line_len < settings.max_line
        });
        let line = inner
            .lines
            .entry(lock_key.to_string())
            .or_insert_with(|| Line {
                queue: queue.clone(),
                places: VecDeque::new(),
            });
        line.places.push_back(Place {
            id,
            next_offset,
            done: false,
        });
        let Some((ck, revive_qid)) = held else {
            return (id, false);
        };
        let ahead_ms = settings.stay_timeout_ms.saturating_add(WRITE_AHEAD_MS);
        let due_ms = now_ms
            .saturating_add(settings.stay_ms)
            .min(ck.revive_time_ms().saturating_sub(ahead_ms));
        let key = ck.merge_key();
        inner.due.insert((due_ms, id), key.clone());
        let held = Held {
            ck,
            revive_qid,
            lock_key: lock_key.to_string(),
            place: id,
            due_ms,
            writing: false,
        };
        inner.held.insert(key, held);
        (id, true)
    }

    /// A place whose checkpoint was stored (or that needed none): done.
    pub fn done(&self, lock_key: &str, id: u64) -> Option<Commit> {
        self.inner.lock_unpoisoned().finish(lock_key, id, true)
    }

    /// A place whose checkpoint could not be stored: leaves the line without committing.
    pub fn drop_place(&self, lock_key: &str, id: u64) -> Option<Commit> {
        self.inner.lock_unpoisoned().finish(lock_key, id, false)
    }

    /// Records acks of `offsets` in the held checkpoint `merge_key`, if it is held.
    pub fn ack(&self, merge_key: &str, offsets: &[i64]) -> AckTaken {
        let mut inner = self.inner.lock_unpoisoned();
        let Some(held) = inner.held.get_mut(merge_key).filter(|h| !h.writing) else {
            return AckTaken::NotHeld;
        };
        for &o in offsets {
            held.ck.ack(o);
        }
        if !held.ck.all_acked() {
            return AckTaken::Held;
        }
        let held = inner.held.remove(merge_key).expect("found above");
        inner.due.remove(&(held.due_ms, held.place));
        AckTaken::AllAcked(inner.finish(&held.lock_key, held.place, true))
    }

    /// The held checkpoints due to be written by `now_ms` (at most `max`), marked as being
    /// written.
    pub fn take_due(&self, now_ms: i64, max: usize) -> Vec<Held> {
        let mut inner = self.inner.lock_unpoisoned();
        let mut out = Vec::new();
        while out.len() < max {
            let Some((&(due_ms, id), _)) = inner.due.first_key_value() else {
                break;
            };
            if due_ms > now_ms {
                break;
            }
            let key = inner.due.remove(&(due_ms, id)).expect("first entry");
            if let Some(held) = inner.held.get_mut(&key) {
                held.writing = true;
                out.push(held.clone());
            }
        }
        out
    }

    /// A held checkpoint (and its acks) was written (`stored`) or not: done, or held
    /// again and retried at the next look.
    pub fn written(&self, held: &Held, stored: bool, now_ms: i64) -> Option<Commit> {
        let mut inner = self.inner.lock_unpoisoned();
        let key = held.ck.merge_key();
        if stored {
            inner.held.remove(&key);
            return inner.finish(&held.lock_key, held.place, true);
        }
        if let Some(h) = inner.held.get_mut(&key) {
            h.writing = false;
            h.due_ms = now_ms;
            inner.due.insert((now_ms, held.place), key);
        }
        None
    }

    /// Checkpoints held now.
    pub fn held_count(&self) -> usize {
        self.inner.lock_unpoisoned().held.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue() -> QueueRef {
        QueueRef {
            group: "G".into(),
            topic: "T".into(),
            queue_id: 0,
        }
    }

    fn ck(start: i64, n: usize, pop_time_ms: i64) -> PopCheckPoint {
        PopCheckPoint {
            start_offset: start,
            pop_time_ms,
            invisible_time_ms: 60_000,
            num: n as u8,
            queue_id: 0,
            topic: "T".into(),
            group: "G".into(),
            queue_offset_diff: (0..n as i32).collect(),
            broker_name: Some("b".into()),
            ..Default::default()
        }
    }

    const ON: HoldSettings = HoldSettings {
        enabled: true,
        stay_ms: 10_000,
        stay_timeout_ms: 3_000,
        max_held: 2,
        max_line: 100,
    };

    #[test]
    fn offsets_commit_in_line_order_only() {
        let b = PopBuffer::default();
        let off = HoldSettings {
            enabled: false,
            ..ON
        };
        let (a, _) = b.add("k", &queue(), 10, Some((ck(0, 10, 0), 1)), &off, 0);
        let (c, _) = b.add("k", &queue(), 20, Some((ck(10, 10, 0), 1)), &off, 0);
        let (d, _) = b.add("k", &queue(), 25, None, &off, 0);
        assert_eq!(b.done("k", c), None, "the first is not stored yet");
        assert_eq!(b.drop_place("k", d), None);
        let commit = b.done("k", a).expect("both done");
        assert_eq!(commit.offset, 20);
        assert_eq!(b.done("k", a), None, "gone");
    }

    #[test]
    fn a_fully_acked_checkpoint_is_never_written() {
        let b = PopBuffer::default();
        let c = ck(0, 3, 1_000);
        let (_, held) = b.add("k", &queue(), 3, Some((c.clone(), 2)), &ON, 1_000);
        assert!(held);
        let key = c.merge_key();
        assert_eq!(b.ack(&key, &[0, 2]), AckTaken::Held);
        assert!(b.take_due(1_000 + 9_999, 10).is_empty());
        let AckTaken::AllAcked(Some(commit)) = b.ack(&key, &[1]) else {
            panic!("all acked");
        };
        assert_eq!(commit.offset, 3);
        assert_eq!(b.held_count(), 0);
        assert!(b.take_due(i64::MAX, 10).is_empty());
        assert_eq!(b.ack(&key, &[1]), AckTaken::NotHeld);
    }

    #[test]
    fn held_checkpoints_are_written_when_due_and_bounded() {
        let b = PopBuffer::default();
        let (first, second) = (ck(0, 2, 0), ck(2, 2, 0));
        assert!(b.add("k", &queue(), 2, Some((first.clone(), 0)), &ON, 0).1);
        // Revive time 60 s: due at the stay time (10 s), not at 60 - 3 - 1.5 s.
        assert!(b.add("k", &queue(), 4, Some((second, 0)), &ON, 0).1);
        assert!(
            !b.add("k", &queue(), 6, Some((ck(4, 2, 0), 0)), &ON, 0).1,
            "max_held"
        );
        let soon = ck(6, 1, 0);
        let short = PopCheckPoint {
            invisible_time_ms: 4_000,
            ..soon
        };
        assert!(
            !b.add("j", &queue(), 7, Some((short, 0)), &ON, 0).1,
            "too close"
        );
        assert_eq!(b.ack(&first.merge_key(), &[1]), AckTaken::Held);
        let due = b.take_due(10_000, 10);
        assert_eq!(due.len(), 2);
        assert!(due[0].ck.is_acked(1), "the write carries the acks");
        assert_eq!(
            b.ack(&first.merge_key(), &[0]),
            AckTaken::NotHeld,
            "being written"
        );
        assert_eq!(b.written(&due[1], false, 10_000), None, "retried");
        assert_eq!(b.take_due(10_000, 10).len(), 1);
        let commit = b.written(&due[0], true, 10_000).map(|c| c.offset);
        assert_eq!(commit, Some(2), "the head of the line is done");
    }
}
