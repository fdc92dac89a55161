//! `Notifier`: an eventfd that wakes one consumer (a blocking stage thread or a compio
//! network core) when producers on other threads have queued work for it.
//!
//! Producers call [`Notifier::notify`] after pushing into a ring. A `pending` flag makes
//! every notification after the first one free until the consumer has looked at its
//! queues again, so a burst of N completions costs one `write(2)` and one wake-up, not N:
//! that is how completions travel back to a network core "in batches".
//!
//! Protocol (both sides must follow it or a wake-up can be lost):
//! - producer: push the item, then `notify()`;
//! - consumer: `begin_drain()` (clears the flag), then drain every queue it guards, then
//!   wait (`wait_timeout` on a thread; a network core arms an io_uring read on the fd).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// An eventfd plus a "a write is already on its way" flag.
#[derive(Debug)]
pub struct Notifier {
    fd: OwnedFd,
    /// True from the first `notify()` after a `begin_drain()` until the next
    /// `begin_drain()`: later producers skip the syscall.
    pending: AtomicBool,
    /// How many `write(2)`s producers actually issued (the rest were coalesced).
    writes: AtomicU64,
}

impl Notifier {
    /// Creates the eventfd (non-blocking, close-on-exec).
    pub fn new() -> io::Result<Self> {
        // SAFETY: eventfd has no pointer arguments; the result is checked before use.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("eventfd() for a Notifier failed: {e}"),
            ));
        }
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Self {
            fd,
            pending: AtomicBool::new(false),
            writes: AtomicU64::new(0),
        })
    }

    /// Wakes the consumer unless a wake-up is already pending. Call after pushing.
    pub fn notify(&self) {
        // SeqCst pairs with `begin_drain`: either the consumer's drain sees our item, or we
        // see `pending == false` and write.
        if self.claim() {
            self.wake();
        }
    }

    /// Marks a wake-up pending without writing the eventfd. True when none was pending:
    /// the caller then owes the consumer a wake-up, and pays it either with [`wake`]
    /// or by draining the queues itself as the consumer would (`begin_drain`, then drain).
    /// False: the consumer is awake or being woken, and will look at its queues again.
    ///
    /// [`wake`]: Self::wake
    pub fn claim(&self) -> bool {
        // SeqCst pairs with `begin_drain`, as in `notify`.
        !self.pending.swap(true, Ordering::SeqCst)
    }

    /// Writes the eventfd, pending or not: pays the wake-up a successful [`claim`] owes.
    ///
    /// [`claim`]: Self::claim
    pub fn wake(&self) {
        self.writes.fetch_add(1, Ordering::Relaxed);
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our own eventfd. A failure can only
        // be EAGAIN (counter saturated), which still leaves the fd readable.
        unsafe {
            libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8);
        }
    }

    /// Consumer: call before draining the queues this notifier guards.
    pub fn begin_drain(&self) {
        self.pending.store(false, Ordering::SeqCst);
    }

    /// Whether a producer has notified since the last `begin_drain`.
    pub fn is_pending(&self) -> bool {
        self.pending.load(Ordering::SeqCst)
    }

    /// How many eventfd writes producers have issued so far (coalesced notifications are
    /// not counted). A metric: writes / items shows how well completions batch.
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }

    /// Blocks the calling thread until notified or `timeout` passes; returns whether it
    /// was notified. Consumes the eventfd counter.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let timeout_ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd for the duration of the call.
        let n = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
        if n <= 0 {
            return false;
        }
        self.consume();
        true
    }

    /// Resets the eventfd counter without blocking.
    pub fn consume(&self) {
        let mut value: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64; EAGAIN (counter already zero) is fine.
        unsafe {
            libc::read(self.fd.as_raw_fd(), (&mut value as *mut u64).cast(), 8);
        }
    }
}

impl AsFd for Notifier {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for Notifier {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn notify_wakes_a_blocked_thread_and_coalesces() {
        let n = Arc::new(Notifier::new().unwrap());
        assert!(
            !n.wait_timeout(Duration::from_millis(1)),
            "nothing was notified yet"
        );
        n.begin_drain();
        n.notify();
        n.notify();
        n.notify();
        assert_eq!(
            n.writes(),
            1,
            "three notifies before a drain must cost one write"
        );
        assert!(n.wait_timeout(Duration::from_millis(100)));
        n.begin_drain();
        let producer = {
            let n = n.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                n.notify();
            })
        };
        let start = Instant::now();
        assert!(
            n.wait_timeout(Duration::from_secs(5)),
            "cross-thread notify was lost"
        );
        assert!(start.elapsed() < Duration::from_secs(2));
        producer.join().unwrap();
    }

    #[test]
    fn a_claim_is_owed_once_and_silences_notify_until_the_next_drain() {
        let n = Notifier::new().unwrap();
        assert!(n.claim(), "nothing pending: the claimer owes the wake-up");
        assert!(!n.claim(), "a second claimer owes nothing");
        n.notify();
        assert_eq!(n.writes(), 0, "a producer after a claim writes nothing");
        assert!(!n.wait_timeout(Duration::ZERO));
        n.wake();
        assert_eq!(n.writes(), 1);
        assert!(
            n.wait_timeout(Duration::ZERO),
            "wake writes even while pending"
        );
        n.begin_drain();
        assert!(n.claim());
    }
}
