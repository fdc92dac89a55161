//! The clock the broker's timed services (delay levels, timer messages) read, behind a
//! trait so tests drive time by hand.

/// Wall clock as the service reads it (injected in tests).
pub trait Clock: Send + Sync {
    fn now_ms(&self) -> i64;
}

/// The system clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        crate::persist::now_ms()
    }
}
