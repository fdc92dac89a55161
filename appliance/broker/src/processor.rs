//! Request processors, one module per family of request codes.

pub mod admin;
pub mod client_manage;
pub mod offset;
pub mod pull;
pub mod query;
pub mod send;
