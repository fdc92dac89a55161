//! Replication lag as the master sees it: how long after the append stage published a
//! CommitLog byte a slave reported holding it. The append stage records each publish
//! (end offset, time) in a bounded timeline while slaves are connected; the HA stage, on a
//! report that moves a slave's ack from `P` to `A`, looks up when the byte at `P` was
//! published and counts `now - then` into a fixed-bucket histogram: the age of the oldest
//! byte that report acknowledged, so a stalled slave shows up in full when it resumes.
//! Measured inside the broker, the figure needs no sampling or clock interpolation by a
//! benchmark; it is in runtime info (`ringmq.haAckLagMs`) and on `/metrics`.

use crate::types::{HA_ACK_LAG_BOUNDS_MS, HA_ACK_LAG_BUCKETS};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Publishes remembered (a power of two). At the append stage's smallest batches (one
/// record per wake-up at 100k msg/s) this covers about 40 ms; an ack older than the
/// window counts the age of the oldest entry, a lower bound that still lands in the
/// histogram's tail.
const TIMELINE_ENTRIES: usize = 4096;
/// Entries this close to being overwritten are not read (the single writer could
/// rewrite one during a lookup).
const OVERWRITE_MARGIN: u64 = 64;

/// Publish times of recent CommitLog ends, written by the append stage only.
pub(crate) struct PublishTimeline {
    origin: Instant,
    /// Entries written so far; entry `i` lives at `i % TIMELINE_ENTRIES`.
    head: AtomicU64,
    end_offsets: Box<[AtomicU64]>,
    at_us: Box<[AtomicU64]>,
}

impl PublishTimeline {
    pub fn new() -> Self {
        let slots = || (0..TIMELINE_ENTRIES).map(|_| AtomicU64::new(0)).collect();
        PublishTimeline {
            origin: Instant::now(),
            head: AtomicU64::new(0),
            end_offsets: slots(),
            at_us: slots(),
        }
    }

    /// Microseconds since the timeline was made (its clock).
    pub fn now_us(&self) -> u64 {
        self.origin.elapsed().as_micros() as u64
    }

    /// Append stage: the CommitLog end is `end_offset` from now on.
    pub fn record(&self, end_offset: u64) {
        let head = self.head.load(Ordering::Relaxed);
        if head > 0 {
            let last = ((head - 1) as usize) % TIMELINE_ENTRIES;
            if self.end_offsets[last].load(Ordering::Relaxed) >= end_offset {
                return;
            }
        }
        let slot = head as usize % TIMELINE_ENTRIES;
        self.end_offsets[slot].store(end_offset, Ordering::Relaxed);
        self.at_us[slot].store(self.now_us(), Ordering::Relaxed);
        self.head.store(head + 1, Ordering::Release);
    }

    /// When the byte at `offset` was published: the time of the first recorded end past
    /// it. `None` when no recorded end covers it yet (or nothing is recorded); the oldest
    /// entry's time when it is older than the window.
    pub fn published_at_us(&self, offset: u64) -> Option<u64> {
        let head = self.head.load(Ordering::Acquire);
        let oldest = head.saturating_sub(TIMELINE_ENTRIES as u64 - OVERWRITE_MARGIN);
        let end_at =
            |i: u64| self.end_offsets[i as usize % TIMELINE_ENTRIES].load(Ordering::Relaxed);
        if head == 0 || end_at(head - 1) <= offset {
            return None;
        }
        // Ends grow with the index: find the first index in [oldest, head) whose end > offset.
        let (mut lo, mut hi) = (oldest, head - 1);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if end_at(mid) > offset {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        Some(self.at_us[lo as usize % TIMELINE_ENTRIES].load(Ordering::Relaxed))
    }
}

/// Counts of acknowledgement ages per bucket of `HA_ACK_LAG_BOUNDS_MS`, kept by the HA
/// stage and read by metrics.
pub(crate) struct AckLagHistogram {
    counts: [AtomicU64; HA_ACK_LAG_BUCKETS],
    sum_us: AtomicU64,
}

impl AckLagHistogram {
    pub fn new() -> Self {
        AckLagHistogram {
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_us: AtomicU64::new(0),
        }
    }

    pub fn record(&self, lag_us: u64) {
        self.counts[bucket_of(lag_us)].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(lag_us, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> ([u64; HA_ACK_LAG_BUCKETS], u64) {
        (
            std::array::from_fn(|i| self.counts[i].load(Ordering::Relaxed)),
            self.sum_us.load(Ordering::Relaxed),
        )
    }
}

/// Bucket of one age: the first bound that holds it, or the one above them all.
pub fn bucket_of(lag_us: u64) -> usize {
    let ms = lag_us as f64 / 1000.0;
    HA_ACK_LAG_BOUNDS_MS
        .iter()
        .position(|b| ms <= *b)
        .unwrap_or(HA_ACK_LAG_BOUNDS_MS.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_byte_is_dated_by_the_first_publish_past_it() {
        let t = PublishTimeline::new();
        assert_eq!(t.published_at_us(0), None, "nothing published");
        t.record(100);
        t.record(100); // no progress: not an entry
        t.record(250);
        assert_eq!(t.head.load(Ordering::Relaxed), 2);
        let first = t.at_us[0].load(Ordering::Relaxed);
        let second = t.at_us[1].load(Ordering::Relaxed);
        assert_eq!(t.published_at_us(0), Some(first));
        assert_eq!(t.published_at_us(99), Some(first));
        assert_eq!(t.published_at_us(100), Some(second));
        assert_eq!(t.published_at_us(249), Some(second));
        assert_eq!(t.published_at_us(250), None, "not published yet");
    }

    #[test]
    fn a_byte_older_than_the_window_gets_the_oldest_readable_entry() {
        let t = PublishTimeline::new();
        for i in 1..=(3 * TIMELINE_ENTRIES as u64) {
            t.record(i * 10);
        }
        let head = t.head.load(Ordering::Relaxed);
        let oldest = head - (TIMELINE_ENTRIES as u64 - OVERWRITE_MARGIN);
        let want = t.at_us[oldest as usize % TIMELINE_ENTRIES].load(Ordering::Relaxed);
        assert_eq!(t.published_at_us(5), Some(want));
        // Inside the window: exact.
        let i = head - 10;
        let end = t.end_offsets[i as usize % TIMELINE_ENTRIES].load(Ordering::Relaxed);
        let at = t.at_us[i as usize % TIMELINE_ENTRIES].load(Ordering::Relaxed);
        assert_eq!(t.published_at_us(end - 1), Some(at));
    }

    #[test]
    fn ages_land_in_the_first_bucket_whose_bound_holds_them() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(250), 0);
        assert_eq!(bucket_of(251), 1);
        let h = AckLagHistogram::new();
        h.record(4_900);
        h.record(5_100);
        h.record(u64::MAX / 2);
        let (counts, sum) = h.snapshot();
        let five = HA_ACK_LAG_BOUNDS_MS.iter().position(|b| *b == 5.0).unwrap();
        assert_eq!(counts[five], 1);
        assert_eq!(counts[five + 1], 1);
        assert_eq!(counts[HA_ACK_LAG_BUCKETS - 1], 1);
        assert_eq!(sum, 4_900 + 5_100 + u64::MAX / 2);
    }
}
