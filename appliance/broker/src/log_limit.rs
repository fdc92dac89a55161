//! Rate limits for log lines about refused requests: the first refusal of a class is
//! logged at once, later ones at most once per interval with the count suppressed in
//! between. Under back-pressure a broker refuses tens of thousands of sends per second;
//! one line each would turn the log into the bottleneck.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// How often a refusal class may log.
pub const REFUSAL_LOG_INTERVAL_MS: i64 = 10_000;

/// Classes per call site: refusal codes are hashed into this many independent limiters.
const CLASSES: usize = 16;

/// One limiter per class (a response or store status code) for one call site; a `static`.
pub struct RefusalLog {
    last_logged_ms: [AtomicI64; CLASSES],
    suppressed: [AtomicU64; CLASSES],
}

impl RefusalLog {
    #[allow(clippy::declare_interior_mutable_const)] // only used to build the arrays below
    const NEVER: AtomicI64 = AtomicI64::new(i64::MIN);
    #[allow(clippy::declare_interior_mutable_const)]
    const NONE: AtomicU64 = AtomicU64::new(0);

    pub const fn new() -> Self {
        Self {
            last_logged_ms: [Self::NEVER; CLASSES],
            suppressed: [Self::NONE; CLASSES],
        }
    }

    /// Whether a refusal of class `code` should be logged now; `Some(n)` carries how many
    /// of its class were suppressed since the last line.
    pub fn admit(&self, code: i32) -> Option<u64> {
        self.admit_at(code, now_ms())
    }

    fn admit_at(&self, code: i32, now_ms: i64) -> Option<u64> {
        let class = code.unsigned_abs() as usize % CLASSES;
        let last = &self.last_logged_ms[class];
        let previous = last.load(Ordering::Relaxed);
        let due =
            previous == i64::MIN || now_ms.saturating_sub(previous) >= REFUSAL_LOG_INTERVAL_MS;
        if due
            && last
                .compare_exchange(previous, now_ms, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            return Some(self.suppressed[class].swap(0, Ordering::Relaxed));
        }
        self.suppressed[class].fetch_add(1, Ordering::Relaxed);
        None
    }
}

impl Default for RefusalLog {
    fn default() -> Self {
        Self::new()
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_refusal_logs_then_one_line_per_interval_with_the_suppressed_count() {
        let log = RefusalLog::new();
        assert_eq!(log.admit_at(2, 1_000), Some(0));
        for i in 0..500 {
            assert_eq!(log.admit_at(2, 1_001 + i), None);
        }
        assert_eq!(log.admit_at(2, 1_000 + REFUSAL_LOG_INTERVAL_MS), Some(500));
        assert_eq!(log.admit_at(2, 1_001 + REFUSAL_LOG_INTERVAL_MS), None);
    }

    #[test]
    fn classes_are_limited_independently() {
        let log = RefusalLog::new();
        assert_eq!(log.admit_at(14, 0), Some(0));
        assert_eq!(log.admit_at(2, 1), Some(0), "a new class logs at once");
        assert_eq!(log.admit_at(14, 2), None);
    }
}
