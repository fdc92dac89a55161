//! Bounded cross-core rings: how a network core hands work to a store stage (append,
//! flush, reput, HA) and how a stage hands results back, without locks.
//!
//! A ring is a fixed-capacity lock-free queue (crossbeam `ArrayQueue`, usable as SPSC or
//! MPSC) paired with a [`Notifier`]. Several rings may share one notifier, so a stage that
//! reads one ring per network core sleeps on a single eventfd. A full ring is reported to
//! the producer (`Err(Full)`), never grown: the producer answers `SYSTEM_BUSY` or waits.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_queue::ArrayQueue;

use crate::notify::Notifier;

/// Creates a ring of `capacity` slots with its own notifier.
pub fn ring<T>(capacity: usize) -> io::Result<(RingSender<T>, RingReceiver<T>)> {
    Ok(ring_with_notifier(capacity, Arc::new(Notifier::new()?)))
}

/// Creates a ring of `capacity` slots that wakes `notifier` (shared with other rings).
///
/// # Panics
/// If `capacity` is zero (a configuration bug, caught at start-up).
pub fn ring_with_notifier<T>(
    capacity: usize,
    notifier: Arc<Notifier>,
) -> (RingSender<T>, RingReceiver<T>) {
    assert!(capacity > 0, "a ring needs at least one slot");
    let shared = Arc::new(Shared {
        queue: ArrayQueue::new(capacity),
        notifier,
    });
    (
        RingSender {
            shared: shared.clone(),
        },
        RingReceiver { shared },
    )
}

#[derive(Debug)]
struct Shared<T> {
    queue: ArrayQueue<T>,
    notifier: Arc<Notifier>,
}

/// The producing end. Clone it for MPSC use.
#[derive(Debug)]
pub struct RingSender<T> {
    shared: Arc<Shared<T>>,
}

impl<T> Clone for RingSender<T> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

/// The ring was full; the value is handed back.
#[derive(Debug, PartialEq, Eq)]
pub struct Full<T>(pub T);

impl<T> RingSender<T> {
    /// Pushes and wakes the consumer (coalesced: see [`Notifier`]).
    pub fn try_send(&self, value: T) -> Result<(), Full<T>> {
        self.shared.queue.push(value).map_err(Full)?;
        self.shared.notifier.notify();
        Ok(())
    }

    /// Pushes without waking; call [`RingSender::flush`] after a batch.
    pub fn try_push(&self, value: T) -> Result<(), Full<T>> {
        self.shared.queue.push(value).map_err(Full)
    }

    /// Wakes the consumer for everything pushed so far.
    pub fn flush(&self) {
        self.shared.notifier.notify();
    }

    pub fn len(&self) -> usize {
        self.shared.queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.shared.queue.is_empty()
    }

    pub fn capacity(&self) -> usize {
        self.shared.queue.capacity()
    }
}

/// The consuming end (one consumer).
#[derive(Debug)]
pub struct RingReceiver<T> {
    shared: Arc<Shared<T>>,
}

impl<T> RingReceiver<T> {
    /// Pops one item. Call [`Notifier::begin_drain`] (or use [`RingReceiver::drain`])
    /// before a draining pass so no wake-up is lost.
    pub fn try_recv(&self) -> Option<T> {
        self.shared.queue.pop()
    }

    /// Clears the notifier flag, then pops up to `max` items into `out`; returns how many.
    pub fn drain(&self, out: &mut Vec<T>, max: usize) -> usize {
        self.shared.notifier.begin_drain();
        let mut n = 0;
        while n < max {
            match self.shared.queue.pop() {
                Some(v) => {
                    out.push(v);
                    n += 1;
                }
                None => break,
            }
        }
        n
    }

    /// Blocks until a producer notifies, the ring is already non-empty, or `timeout`.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        if !self.shared.queue.is_empty() {
            return true;
        }
        self.shared.notifier.wait_timeout(timeout)
    }

    pub fn notifier(&self) -> &Arc<Notifier> {
        &self.shared.notifier
    }

    pub fn len(&self) -> usize {
        self.shared.queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.shared.queue.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_ring_hands_the_value_back() {
        let (tx, rx) = ring::<u32>(2).unwrap();
        tx.try_send(1).unwrap();
        tx.try_send(2).unwrap();
        assert_eq!(tx.try_send(3), Err(Full(3)));
        let mut out = Vec::new();
        assert_eq!(rx.drain(&mut out, 8), 2);
        assert_eq!(out, vec![1, 2]);
    }

    #[test]
    fn mpsc_threads_deliver_everything_exactly_once() {
        const PER_PRODUCER: u64 = 20_000;
        let (tx, rx) = ring::<u64>(64).unwrap();
        let producers: Vec<_> = (0..3u64)
            .map(|p| {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    for i in 0..PER_PRODUCER {
                        let mut v = p * PER_PRODUCER + i;
                        // Bounded retry: the consumer drains continuously, so a full ring
                        // clears quickly; give up loudly instead of spinning forever.
                        let mut attempts = 0u32;
                        while let Err(Full(back)) = tx.try_send(v) {
                            v = back;
                            attempts += 1;
                            assert!(attempts < 50_000_000, "consumer stopped draining");
                            std::hint::spin_loop();
                        }
                    }
                })
            })
            .collect();
        let mut seen = vec![false; (3 * PER_PRODUCER) as usize];
        let mut got = 0u64;
        let mut batch = Vec::with_capacity(64);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while got < 3 * PER_PRODUCER {
            assert!(
                std::time::Instant::now() < deadline,
                "ring lost items: {got} delivered"
            );
            batch.clear();
            if rx.drain(&mut batch, 64) == 0 {
                rx.wait_timeout(Duration::from_millis(50));
            }
            for &v in &batch {
                assert!(!seen[v as usize], "{v} delivered twice");
                seen[v as usize] = true;
                got += 1;
            }
        }
        for p in producers {
            p.join().unwrap();
        }
    }
}
