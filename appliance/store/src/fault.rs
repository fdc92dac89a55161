//! Fault injection for tests (`test-util` builds only): topics whose puts make the append
//! stage panic, inside its per-put code (the stage must survive it and answer the put) or
//! outside it (the stage ends: the store must refuse puts rather than hang them), and
//! topics whose next record panics once while it is dispatched (dispatch must retry it).

use ringmq_sync::RwLockExt;
use std::sync::RwLock;

/// Topics whose puts panic in the append stage. Tests use topic names of their own, so
/// tests running side by side in one process do not see each other's faults.
static PANIC_TOPICS: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// From now on, every put to `topic` panics inside the append stage.
pub fn inject_append_panic(topic: &str) {
    PANIC_TOPICS.write_unpoisoned().push(topic.to_string());
}

pub(crate) fn panic_if_injected(topic: &str) {
    if PANIC_TOPICS.read_unpoisoned().iter().any(|t| t == topic) {
        panic!("fault injected for topic {topic}");
    }
}

/// Topics whose puts make the append stage thread itself panic (outside the per-put fence).
static STAGE_PANIC_TOPICS: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// From now on, a put to `topic` ends the append stage by a panic.
pub fn inject_stage_panic(topic: &str) {
    STAGE_PANIC_TOPICS
        .write_unpoisoned()
        .push(topic.to_string());
}

pub(crate) fn stage_panic_if_injected(topic: &str) {
    if STAGE_PANIC_TOPICS
        .read_unpoisoned()
        .iter()
        .any(|t| t == topic)
    {
        panic!("stage fault injected for topic {topic}");
    }
}

/// Topics whose next dispatched record panics (once per injection).
static DISPATCH_PANIC_TOPICS: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// The next record of `topic` to be dispatched panics in the dispatcher, once.
pub fn inject_dispatch_panic_once(topic: &str) {
    DISPATCH_PANIC_TOPICS
        .write_unpoisoned()
        .push(topic.to_string());
}

pub(crate) fn dispatch_panic_if_injected(topic: &str) {
    if !dispatch_panic_pending(topic) {
        return;
    }
    let mut topics = DISPATCH_PANIC_TOPICS.write_unpoisoned();
    if let Some(at) = topics.iter().position(|t| t == topic) {
        topics.swap_remove(at);
        drop(topics);
        panic!("dispatch fault injected for topic {topic}");
    }
}

/// Whether an injected dispatch panic for `topic` has not fired yet.
pub fn dispatch_panic_pending(topic: &str) -> bool {
    DISPATCH_PANIC_TOPICS
        .read_unpoisoned()
        .iter()
        .any(|t| t == topic)
}
