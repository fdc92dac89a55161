//! How work crosses threads in ringmq's pipeline, below both the runtime (network cores)
//! and the store (append, flush and reput stages), so that neither depends on the other:
//!
//! - [`ring`]: bounded lock-free rings; a full ring is reported, never grown;
//! - [`Notifier`]: the eventfd doorbell several rings share, with coalesced wake-ups;
//! - [`core_tag`]: which network core the calling thread is, so the store can route a
//!   put to that core's ring (and its completion back) without threading a core index
//!   through every API between the request handler and the store.

pub mod core_tag;
pub mod notify;
pub mod ring;

pub use core_tag::{current_core, enter_core, leave_core, notify_core, CoreTag};
pub use notify::Notifier;
pub use ring::{ring, ring_with_notifier, Full, RingReceiver, RingSender};
