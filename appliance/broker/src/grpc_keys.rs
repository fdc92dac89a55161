//! The keys of the 5.x gRPC endpoint (`ringmq-grpc`, started beside the broker) and their
//! defaults, kept in the broker so GET_BROKER_CONFIG shows them and the endpoint reads the
//! same values.

/// Whether the broker serves gRPC.
pub const ENABLE: &str = "ringmq.grpc.enable";
pub const DEFAULT_ENABLE: bool = true;
/// Its port (upstream proxy's `grpcServerPort`); 0 picks a free one.
pub const PORT: &str = "ringmq.grpc.port";
pub const DEFAULT_PORT: u16 = 8081;
/// Upstream proxy's `enableTopicMessageTypeCheck`: a send must match its topic's
/// `message.type` (default true).
pub const TYPE_CHECK: &str = "enableTopicMessageTypeCheck";
