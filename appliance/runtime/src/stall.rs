//! `StallMeter`: counts loop iterations of a core or stage thread that stayed busy longer
//! than a threshold (500 µs by default), so a handler or stage that hogs its core shows up
//! as a number instead of as tail latency nobody can explain.
//!
//! The meter is shared (`Arc`) between the loop that records and whoever reads metrics; it
//! is only atomics, written by one thread.

use ringmq_sync::add_single_writer;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A loop iteration busy for longer than this is a stall (DESIGN.md: "A stalled core loop
/// (>500 µs busy) is counted").
pub const DEFAULT_STALL_THRESHOLD: Duration = Duration::from_micros(500);

/// Per-loop counters: iterations, stalls, the longest iteration and total busy time.
#[derive(Debug)]
pub struct StallMeter {
    threshold_ns: u64,
    iterations: AtomicU64,
    stalls: AtomicU64,
    max_busy_ns: AtomicU64,
    busy_ns: AtomicU64,
}

impl Default for StallMeter {
    fn default() -> Self {
        Self::new(DEFAULT_STALL_THRESHOLD)
    }
}

/// A snapshot of a [`StallMeter`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StallStats {
    pub iterations: u64,
    /// Iterations busy longer than the threshold.
    pub stalls: u64,
    /// The longest single iteration seen, in nanoseconds.
    pub max_busy_ns: u64,
    /// Sum of busy time over all iterations, in nanoseconds.
    pub busy_ns: u64,
}

impl StallMeter {
    pub fn new(threshold: Duration) -> Self {
        Self {
            threshold_ns: threshold.as_nanos().min(u64::MAX as u128) as u64,
            iterations: AtomicU64::new(0),
            stalls: AtomicU64::new(0),
            max_busy_ns: AtomicU64::new(0),
            busy_ns: AtomicU64::new(0),
        }
    }

    /// Records one loop iteration that was busy (not waiting) for `busy`.
    /// Only the owning loop calls this, so plain load/store pairs are enough.
    pub fn record(&self, busy: Duration) {
        let ns = busy.as_nanos().min(u64::MAX as u128) as u64;
        add_single_writer(&self.iterations, 1);
        add_single_writer(&self.busy_ns, ns);
        if ns > self.threshold_ns {
            add_single_writer(&self.stalls, 1);
        }
        if ns > self.max_busy_ns.load(Ordering::Relaxed) {
            self.max_busy_ns.store(ns, Ordering::Relaxed);
        }
    }

    /// Iterations busy longer than the threshold so far: the stall-counter metric.
    pub fn stalls(&self) -> u64 {
        self.stalls.load(Ordering::Relaxed)
    }

    pub fn stats(&self) -> StallStats {
        StallStats {
            iterations: self.iterations.load(Ordering::Relaxed),
            stalls: self.stalls.load(Ordering::Relaxed),
            max_busy_ns: self.max_busy_ns.load(Ordering::Relaxed),
            busy_ns: self.busy_ns.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_only_iterations_over_the_threshold() {
        let m = StallMeter::new(Duration::from_micros(500));
        m.record(Duration::from_micros(10));
        m.record(Duration::from_micros(499));
        assert_eq!(m.stalls(), 0);
        m.record(Duration::from_micros(501));
        m.record(Duration::from_millis(3));
        let s = m.stats();
        assert_eq!(s.iterations, 4);
        assert_eq!(s.stalls, 2);
        assert_eq!(s.max_busy_ns, 3_000_000);
        assert_eq!(s.busy_ns, 10_000 + 499_000 + 501_000 + 3_000_000);
    }
}
