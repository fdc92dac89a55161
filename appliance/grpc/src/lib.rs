//! RocketMQ 5.x's gRPC protocol (`apache.rocketmq.v2.MessagingService`, from
//! apache/rocketmq-apis) served beside the broker, so the official 5.x SDKs work unchanged.
//!
//! Upstream serves this through its proxy; in "local" mode the proxy lives in the broker
//! process and calls the broker's processors directly. ringmq does the same: every RPC
//! becomes the Remoting request upstream's proxy builds (SEND_MESSAGE_V2, POP_MESSAGE,
//! ACK_MESSAGE, …) and goes to the broker's own request handler through [`bridge`], a
//! thread with a socketless core on which each gRPC client has one connection. Nothing
//! here touches the network cores: tonic runs on its own thread (`grpc`), the bridge on
//! another (`grpc-bridge`).
//!
//! Layout: `server` (settings, listener, threads), `bridge` (calls into the broker),
//! `service` (the RPCs, one module per family below it), `convert` (v2 messages ↔ stored
//! records), `status` (Remoting response codes → v2 status codes).

pub mod bridge;
mod convert;
mod metadata;
pub mod server;
mod service;
mod status;

/// The generated apache.rocketmq.v2 messages, client and server.
#[allow(clippy::all)]
pub mod pb {
    tonic::include_proto!("apache.rocketmq.v2");
}

pub use server::{GrpcServer, GrpcSettings};
