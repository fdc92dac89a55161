//! The calling thread's network core, as a thread-local tag the runtime sets when a core
//! thread starts and clears when it stops. The tag names the core's index and its doorbell
//! (the [`Notifier`] its loop waits on); code that keeps per-core rings compares the
//! doorbell, not only the index, so a core of another server in the same process (a
//! name server beside a broker, two brokers in one test) is never mistaken for its own.

use std::cell::Cell;
use std::sync::Arc;

use crate::Notifier;

/// One network core: its index within its server and the identity of its doorbell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoreTag {
    pub index: usize,
    doorbell_addr: usize,
}

impl CoreTag {
    /// Whether this tag is the core whose loop waits on `doorbell`.
    pub fn rings(&self, doorbell: &Arc<Notifier>) -> bool {
        self.doorbell_addr == Arc::as_ptr(doorbell) as usize
    }
}

thread_local! {
    static CURRENT: Cell<Option<CoreTag>> = const { Cell::new(None) };
}

/// Marks the calling thread as network core `index` waking on `doorbell`. Its loop must
/// not sleep while `doorbell` is pending (see [`notify_core`]).
pub fn enter_core(index: usize, doorbell: &Arc<Notifier>) {
    let tag = CoreTag {
        index,
        doorbell_addr: Arc::as_ptr(doorbell) as usize,
    };
    CURRENT.with(|c| c.set(Some(tag)));
}

/// The calling thread is no longer a network core.
pub fn leave_core() {
    CURRENT.with(|c| c.set(None));
}

/// The calling thread's core, or `None` on any other thread (stage threads, timers, tests).
pub fn current_core() -> Option<CoreTag> {
    CURRENT.with(Cell::get)
}

/// Rings a network core's doorbell after queueing work for it. When the calling thread is
/// that core (it appended or dispatched inline, and answers its own requests), the
/// doorbell is only marked pending: a core loop does not sleep while its doorbell is
/// pending, so the eventfd write, and the io_uring completion it would cause, are saved.
pub fn notify_core(doorbell: &Arc<Notifier>) {
    match current_core() {
        Some(tag) if tag.rings(doorbell) => {
            doorbell.claim();
        }
        _ => doorbell.notify(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_belongs_to_its_thread_and_its_doorbell() {
        let mine = Arc::new(Notifier::new().unwrap());
        let other = Arc::new(Notifier::new().unwrap());
        assert_eq!(current_core(), None);
        enter_core(3, &mine);
        let tag = current_core().expect("entered");
        assert_eq!(tag.index, 3);
        assert!(tag.rings(&mine));
        assert!(!tag.rings(&other), "same index, another server's core");
        std::thread::spawn(|| assert_eq!(current_core(), None))
            .join()
            .unwrap();
        leave_core();
        assert_eq!(current_core(), None);
    }

    #[test]
    fn a_core_ringing_itself_marks_its_doorbell_without_a_write() {
        let mine = Arc::new(Notifier::new().unwrap());
        let other = Arc::new(Notifier::new().unwrap());
        enter_core(0, &mine);
        notify_core(&mine);
        notify_core(&other);
        leave_core();
        assert!(mine.is_pending(), "its loop must see work is waiting");
        assert_eq!(mine.writes(), 0, "no eventfd write to its own doorbell");
        assert!(!mine.wait_timeout(std::time::Duration::ZERO));
        assert!(other.is_pending());
        assert_eq!(other.writes(), 1, "another core is woken");
        assert!(other.wait_timeout(std::time::Duration::ZERO));
    }
}
