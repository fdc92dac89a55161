//! TLS on RocketMQ's Remoting ports.
//!
//! - [`settings`]: upstream's `tls.*` keys (`tls.server.mode`, certificate paths, client
//!   authentication, `tls.config.file`) and where they come from;
//! - [`config`]: rustls server and client configurations with upstream's trust rules;
//! - [`link`]: one connection's TLS state as a sans-IO pump (ciphertext in, plaintext out
//!   and back), shared by the server's and the client's connection tasks;
//! - [`io`]: the handshake on a compio socket, done before those tasks start.

pub mod config;
pub mod io;
pub mod link;
pub mod settings;

pub use config::{client_config, server_config, tool_client_config, TlsServer};
pub use link::{looks_like_tls, Fed, TlsError, TlsLink};
pub use settings::{ClientAuth, TlsMode, TlsSettings};
