//! fastjson-shaped JSON bodies (`headers.md` §0.2 and per-command sections).

pub mod cluster;
pub mod consumer;
pub mod heartbeat;
pub mod kv;
pub mod register;
pub mod route;
pub mod stats;
#[doc(hidden)]
pub mod testing;
pub mod topic;
