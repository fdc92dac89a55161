//! RocketMQ's plain ACL (upstream's ACL 1.0, `aclEnable=true`), sans I/O apart from the
//! files it owns:
//!
//! - [`config`]: one `plain_acl.yml` as data, read and written as upstream does;
//! - [`address`]: the white-address patterns;
//! - [`permission`]: permission words and bits, and the admin-only request codes;
//! - [`resource`]: which topics and groups a request touches, with which permission;
//! - [`signature`]: the HmacSHA1 request signature, checked by brokers and made by clients;
//! - [`validator`]: the compiled rules and the check, in upstream's order;
//! - [`store`]: the ACL files on disk, reloaded when they change and rewritten by the
//!   admin requests.

pub mod address;
pub mod config;
pub mod permission;
pub mod resource;
pub mod signature;
pub mod store;
pub mod validator;

pub use signature::{sign, Credentials};
pub use store::AclStore;
pub use validator::{AclRules, Denied};
