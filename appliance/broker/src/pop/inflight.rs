//! POP messages in flight per queue of a group (upstream's PopInflightMessageCounter):
//! counted up by what pops hand out, down by acks and by the revive service re-delivering
//! what was not acked. With `enablePopMessageThreshold`, a queue whose count is above
//! `popInflightMessageThreshold` is skipped by pops until acks bring it down.
//!
//! The counts start at zero with the broker: acks of pops made before this start are not
//! counted down (they were never counted up).

use std::collections::HashMap;
use std::sync::Mutex;

use ringmq_sync::LockExt;

/// Queues of groups with messages in flight, at most; beyond, new queues go uncounted.
pub const MAX_COUNTED_QUEUES: usize = 1 << 20;

/// See the module doc.
#[derive(Debug)]
pub struct InflightCounter {
    started_ms: i64,
    counts: Mutex<HashMap<(String, String, i32), i64>>,
}

impl Default for InflightCounter {
    fn default() -> Self {
        Self::new(crate::persist::now_ms())
    }
}

impl InflightCounter {
    pub fn new(started_ms: i64) -> Self {
        Self {
            started_ms,
            counts: Mutex::new(HashMap::new()),
        }
    }

    fn key(topic: &str, group: &str, queue_id: i32) -> (String, String, i32) {
        (topic.to_string(), group.to_string(), queue_id)
    }

    /// `n` messages of the queue handed out.
    pub fn add(&self, topic: &str, group: &str, queue_id: i32, n: usize) {
        if n == 0 {
            return;
        }
        let mut counts = self.counts.lock_unpoisoned();
        let key = Self::key(topic, group, queue_id);
        if counts.len() >= MAX_COUNTED_QUEUES && !counts.contains_key(&key) {
            return;
        }
        *counts.entry(key).or_insert(0) += n as i64;
    }

    /// `n` messages handed out at `pop_time_ms` acked or re-delivered.
    pub fn remove(&self, topic: &str, group: &str, pop_time_ms: i64, queue_id: i32, n: usize) {
        if pop_time_ms < self.started_ms {
            return;
        }
        let mut counts = self.counts.lock_unpoisoned();
        let key = Self::key(topic, group, queue_id);
        if let Some(c) = counts.get_mut(&key) {
            *c -= n as i64;
            if *c <= 0 {
                counts.remove(&key);
            }
        }
    }

    /// Forgets the queue's count (an orderly pop starts its batch afresh).
    pub fn clear(&self, topic: &str, group: &str, queue_id: i32) {
        self.counts
            .lock_unpoisoned()
            .remove(&Self::key(topic, group, queue_id));
    }

    pub fn get(&self, topic: &str, group: &str, queue_id: i32) -> i64 {
        let counts = self.counts.lock_unpoisoned();
        counts
            .get(&Self::key(topic, group, queue_id))
            .copied()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_up_and_down_and_ignores_pops_before_the_start() {
        let c = InflightCounter::new(1_000);
        c.add("T", "G", 0, 5);
        c.add("T", "G", 1, 2);
        c.remove("T", "G", 1_500, 0, 3);
        assert_eq!(c.get("T", "G", 0), 2);
        c.remove("T", "G", 999, 0, 2);
        assert_eq!(c.get("T", "G", 0), 2, "a pop before the start");
        c.remove("T", "G", 1_500, 0, 9);
        assert_eq!(c.get("T", "G", 0), 0);
        c.clear("T", "G", 1);
        assert_eq!(c.get("T", "G", 1), 0);
    }
}
