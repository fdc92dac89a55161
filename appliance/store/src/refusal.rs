//! Rate-limited reporting of refused puts.
//!
//! A refusal (disk full, page cache busy, a full append queue, ...) usually hits every put
//! for a while: at 100k msg/s one log line per refused put is 100k lines a second, which
//! buries the one line that says why and costs more than the refusal itself. [`RefusalLog`]
//! logs the first refusal of each reason at once, then at most one summary line per reason
//! and interval with the number refused since the previous line; the housekeeping tick
//! calls [`RefusalLog::flush`] so the last summary goes out even when refusals stop.
//! Totals per reason are kept for metrics.
//!
//! This is ringmq's one refusal limiter: the broker keeps one per send-path call site (a
//! `static`, hence the `const` constructor) and calls [`RefusalLog::note`] to log the line
//! itself with the request's context.

use ringmq_sync::LockExt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Default least time between two log lines for one reason.
pub const DEFAULT_REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// One line to log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusalReport {
    pub reason: &'static str,
    /// Refusals this line accounts for (1 for the first one).
    pub count: u64,
    /// True for the first refusal of a reason since it last went quiet.
    pub first: bool,
    /// Time the counted refusals span (zero for the first).
    pub over: Duration,
}

impl RefusalReport {
    /// Refusals of this reason that got no line of their own since the previous one
    /// (this line's refusal excluded).
    pub fn suppressed(&self) -> u64 {
        self.count.saturating_sub(1)
    }
}

#[derive(Debug)]
struct Slot {
    reason: &'static str,
    /// Refusals not reported yet.
    pending: u64,
    total: u64,
    /// When the last line for this reason went out.
    last_report: Option<Instant>,
}

/// Counts refusals per reason and decides which of them get a log line.
#[derive(Debug)]
pub struct RefusalLog {
    what: &'static str,
    interval: Duration,
    slots: Mutex<Vec<Slot>>,
}

impl RefusalLog {
    /// A log whose lines say `what` was refused (e.g. "put"), at most one per reason and
    /// `interval`.
    pub const fn new(what: &'static str, interval: Duration) -> Self {
        RefusalLog {
            what,
            interval,
            slots: Mutex::new(Vec::new()),
        }
    }

    /// Counts one refusal for `reason` and logs it when it is the first of a quiet period
    /// or the reason's interval has passed.
    pub fn refused(&self, reason: &'static str) {
        if let Some(r) = self.note_at(reason, Instant::now()) {
            self.emit(&r);
        }
    }

    /// Counts one refusal for `reason` and returns the line the caller should log, if any
    /// (for callers that log with context of their own).
    pub fn note(&self, reason: &'static str) -> Option<RefusalReport> {
        self.note_at(reason, Instant::now())
    }

    /// Logs the pending counts of reasons whose interval has passed (periodic tick).
    pub fn flush(&self) {
        for r in self.flush_at(Instant::now()) {
            self.emit(&r);
        }
    }

    /// Total refusals per reason since the store opened, in first-seen order.
    pub fn totals(&self) -> Vec<(&'static str, u64)> {
        self.lock().iter().map(|s| (s.reason, s.total)).collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Slot>> {
        self.slots.lock_unpoisoned()
    }

    /// `refused` with an explicit clock; returns the line to log, if any.
    pub(crate) fn note_at(&self, reason: &'static str, now: Instant) -> Option<RefusalReport> {
        let mut slots = self.lock();
        let i = match slots.iter().position(|s| s.reason == reason) {
            Some(i) => i,
            None => {
                slots.push(Slot {
                    reason,
                    pending: 0,
                    total: 0,
                    last_report: None,
                });
                slots.len() - 1
            }
        };
        let s = &mut slots[i];
        s.total += 1;
        s.pending += 1;
        let quiet = s
            .last_report
            .is_none_or(|t| now.duration_since(t) >= self.interval);
        if !quiet {
            return None;
        }
        // After a quiet interval the pending count is just this refusal: a new episode.
        let report = RefusalReport {
            reason,
            count: s.pending,
            first: s.pending == 1,
            over: s
                .last_report
                .map(|t| now.duration_since(t))
                .unwrap_or_default(),
        };
        s.pending = 0;
        s.last_report = Some(now);
        Some(report)
    }

    /// `flush` with an explicit clock; returns the lines to log.
    pub(crate) fn flush_at(&self, now: Instant) -> Vec<RefusalReport> {
        let mut out = Vec::new();
        for s in self.lock().iter_mut() {
            let Some(last) = s.last_report else { continue };
            if s.pending > 0 && now.duration_since(last) >= self.interval {
                out.push(RefusalReport {
                    reason: s.reason,
                    count: s.pending,
                    first: false,
                    over: now.duration_since(last),
                });
                s.pending = 0;
                s.last_report = Some(now);
            }
        }
        out
    }

    fn emit(&self, r: &RefusalReport) {
        if r.first {
            tracing::warn!(
                what = self.what,
                reason = r.reason,
                "{} refused; further refusals for this reason are counted and reported every {} s",
                self.what,
                self.interval.as_secs()
            );
        } else {
            tracing::warn!(
                what = self.what,
                reason = r.reason,
                refused = r.count,
                over_ms = r.over.as_millis() as u64,
                "{}s refused since the last report",
                self.what
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_refusal_logs_then_one_summary_per_interval() {
        let log = RefusalLog::new("put", Duration::from_secs(10));
        let t0 = Instant::now();
        let mut lines = Vec::new();
        // 100k refusals over 25 s for one reason, plus a second reason once.
        for i in 0..100_000u64 {
            let now = t0 + Duration::from_micros(i * 250);
            lines.extend(log.note_at("DISK_FULL", now));
            lines.extend(log.flush_at(now));
        }
        lines.extend(log.note_at("PAGE_CACHE_BUSY", t0));
        assert!(
            lines.len() <= 5,
            "rate-limited to a handful of lines, got {}",
            lines.len()
        );
        assert!(lines[0].first && lines[0].count == 1);
        let disk: u64 = lines
            .iter()
            .filter(|r| r.reason == "DISK_FULL")
            .map(|r| r.count)
            .sum();
        // Everything not yet reported goes out with the next flush after the interval.
        let tail: u64 = log
            .flush_at(t0 + Duration::from_secs(60))
            .iter()
            .map(|r| r.count)
            .sum();
        assert_eq!(disk + tail, 100_000, "every refusal is accounted for");
        assert!(lines
            .iter()
            .any(|r| r.reason == "PAGE_CACHE_BUSY" && r.first));
        assert_eq!(
            log.totals(),
            vec![("DISK_FULL", 100_000), ("PAGE_CACHE_BUSY", 1)]
        );
    }

    #[test]
    fn without_flush_the_next_line_after_the_interval_carries_the_suppressed_count() {
        let log = RefusalLog::new("send", Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(log.note_at("A", t0).map(|r| r.suppressed()), Some(0));
        for i in 1..=500u64 {
            assert!(log.note_at("A", t0 + Duration::from_millis(i)).is_none());
        }
        let r = log.note_at("A", t0 + Duration::from_secs(10)).unwrap();
        assert_eq!(r.suppressed(), 500);
        assert!(!r.first);
        assert!(log
            .note_at("A", t0 + Duration::from_millis(10_001))
            .is_none());
    }

    #[test]
    fn reasons_are_limited_independently_and_a_static_works() {
        static LOG: RefusalLog = RefusalLog::new("send", DEFAULT_REFUSAL_LOG_INTERVAL);
        let t0 = Instant::now();
        assert!(LOG.note_at("X", t0).is_some());
        assert!(LOG.note_at("Y", t0).is_some(), "a new reason logs at once");
        assert!(LOG.note_at("X", t0).is_none());
    }

    #[test]
    fn a_new_episode_after_a_quiet_interval_logs_at_once() {
        let log = RefusalLog::new("put", Duration::from_secs(10));
        let t0 = Instant::now();
        assert!(log.note_at("X", t0).is_some_and(|r| r.first));
        assert!(log.note_at("X", t0 + Duration::from_secs(1)).is_none());
        let f = log.flush_at(t0 + Duration::from_secs(11));
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].count, 1);
        // Quiet since the flush: the next refusal is reported immediately.
        let r = log.note_at("X", t0 + Duration::from_secs(30)).unwrap();
        assert!(r.first);
        assert!(log.flush_at(t0 + Duration::from_secs(60)).is_empty());
    }
}
