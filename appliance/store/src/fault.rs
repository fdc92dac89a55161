//! Fault injection for tests (`test-util` builds only): topics whose puts make the append
//! stage panic, inside its per-put code (the stage must survive it and answer the put) or
//! outside it (the stage ends: the store must refuse puts rather than hang them), and
//! topics whose next record panics once while it is dispatched (dispatch must retry it).

use ringmq_sync::RwLockExt;
use std::sync::RwLock;

/// Topics a fault is injected for. Tests use topic names of their own, so tests running
/// side by side in one process do not see each other's faults.
struct FaultTopics(RwLock<Vec<String>>);

impl FaultTopics {
    const fn new() -> Self {
        Self(RwLock::new(Vec::new()))
    }

    fn add(&self, topic: &str) {
        self.0.write_unpoisoned().push(topic.to_string());
    }

    fn contains(&self, topic: &str) -> bool {
        self.0.read_unpoisoned().iter().any(|t| t == topic)
    }

    /// Removes one entry for `topic`; whether there was one.
    fn take(&self, topic: &str) -> bool {
        if !self.contains(topic) {
            return false;
        }
        let mut topics = self.0.write_unpoisoned();
        match topics.iter().position(|t| t == topic) {
            Some(at) => {
                topics.swap_remove(at);
                true
            }
            None => false,
        }
    }
}

/// Topics whose puts panic in the append stage.
static PANIC_TOPICS: FaultTopics = FaultTopics::new();

/// From now on, every put to `topic` panics inside the append stage.
pub fn inject_append_panic(topic: &str) {
    PANIC_TOPICS.add(topic);
}

pub(crate) fn panic_if_injected(topic: &str) {
    if PANIC_TOPICS.contains(topic) {
        panic!("fault injected for topic {topic}");
    }
}

/// Topics whose puts make the append stage thread itself panic (outside the per-put fence).
static STAGE_PANIC_TOPICS: FaultTopics = FaultTopics::new();

/// From now on, a put to `topic` ends the append stage by a panic.
pub fn inject_stage_panic(topic: &str) {
    STAGE_PANIC_TOPICS.add(topic);
}

pub(crate) fn stage_panic_if_injected(topic: &str) {
    if STAGE_PANIC_TOPICS.contains(topic) {
        panic!("stage fault injected for topic {topic}");
    }
}

/// Topics whose next dispatched record panics (once per injection).
static DISPATCH_PANIC_TOPICS: FaultTopics = FaultTopics::new();

/// The next record of `topic` to be dispatched panics in the dispatcher, once.
pub fn inject_dispatch_panic_once(topic: &str) {
    DISPATCH_PANIC_TOPICS.add(topic);
}

pub(crate) fn dispatch_panic_if_injected(topic: &str) {
    if DISPATCH_PANIC_TOPICS.take(topic) {
        panic!("dispatch fault injected for topic {topic}");
    }
}

/// Whether an injected dispatch panic for `topic` has not fired yet.
pub fn dispatch_panic_pending(topic: &str) -> bool {
    DISPATCH_PANIC_TOPICS.contains(topic)
}
