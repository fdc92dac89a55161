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

/// Marks the calling thread as network core `index` waking on `doorbell`.
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
}
