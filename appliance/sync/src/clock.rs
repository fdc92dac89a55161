//! The wall clock as RocketMQ stores it: milliseconds since the Unix epoch, as `i64`
//! (born and store timestamps, offsets' commit times, expiry scans).

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch. A clock set before 1970 reads as 0 rather than
/// failing: every caller compares or stores the value, none can act on the error.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn now_ms_is_after_2020_and_monotone_enough() {
        let a = now_ms();
        let b = now_ms();
        assert!(a > 1_577_836_800_000, "{a} is before 2020");
        assert!(b >= a);
    }
}
