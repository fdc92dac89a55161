//! Counters with one writer: the thread that owns a counter adds with a plain load and
//! store instead of a locked read-modify-write, and any thread may read it.

use std::sync::atomic::{AtomicU64, Ordering};

/// Adds `n` to `counter` (wrapping). Only the counter's one writing thread may call this: a
/// load and a store cannot lose an increment when no other thread writes the counter,
/// and they cost no locked instruction on the hot path.
pub fn add_single_writer(counter: &AtomicU64, n: u64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(n),
        Ordering::Relaxed,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_and_wraps() {
        let c = AtomicU64::new(u64::MAX - 1);
        add_single_writer(&c, 1);
        assert_eq!(c.load(Ordering::Relaxed), u64::MAX);
        add_single_writer(&c, 2);
        assert_eq!(c.load(Ordering::Relaxed), 1);
    }
}
