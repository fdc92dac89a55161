//! The client's error type: every failure names the address, the request code and, for
//! broker/namesrv refusals, the response code and remark, so a log line is actionable.

use std::fmt;

use ringmq_remoting::ResponseCode;

/// Why a client call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientError {
    /// TCP connect to `addr` failed or timed out.
    Connect { addr: String, reason: String },
    /// The connection to `addr` closed (or failed) while the request was outstanding or
    /// before it could be written; the request may or may not have been processed.
    ConnectionClosed { addr: String, reason: String },
    /// No response within the deadline.
    Timeout {
        addr: String,
        request_code: i32,
        timeout_ms: u64,
    },
    /// The peer answered with a non-success code where the call needs success.
    Response {
        addr: String,
        request_code: i32,
        code: i32,
        remark: String,
    },
    /// The peer's answer could not be understood (missing header field, bad body).
    Protocol {
        addr: String,
        request_code: i32,
        reason: String,
    },
    /// The call cannot be made as asked (no route, no namesrv configured, bad argument).
    Invalid(String),
    /// The client (or its runtime thread) has been shut down.
    Shutdown,
}

impl ClientError {
    /// The response code when the peer refused the request.
    pub fn response_code(&self) -> Option<i32> {
        match self {
            Self::Response { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Whether a producer should try the send again on another broker: transport failures,
    /// timeouts and the response codes Java's producer retries on (`remoting.md` §10).
    pub fn is_retryable_send(&self) -> bool {
        match self {
            Self::Connect { .. } | Self::ConnectionClosed { .. } | Self::Timeout { .. } => true,
            Self::Response { code, .. } => is_retryable_send_code(*code),
            _ => false,
        }
    }

    /// A short label for per-code failure tallies (bench reports).
    pub fn kind_label(&self) -> String {
        match self {
            Self::Connect { .. } => "connect".into(),
            Self::ConnectionClosed { .. } => "closed".into(),
            Self::Timeout { .. } => "timeout".into(),
            Self::Response { code, .. } => match ResponseCode::from_code(*code) {
                Some(c) => format!("{}({code})", c.name()),
                None => format!("code({code})"),
            },
            Self::Protocol { .. } => "protocol".into(),
            Self::Invalid(_) => "invalid".into(),
            Self::Shutdown => "shutdown".into(),
        }
    }
}

/// Java producer's `retryResponseCodes`: 17, 14, 1, 2, 16, 204, 205, 1500.
pub fn is_retryable_send_code(code: i32) -> bool {
    matches!(code, 17 | 14 | 1 | 2 | 16 | 204 | 205 | 1500)
}

fn code_name(code: i32) -> &'static str {
    ResponseCode::from_code(code)
        .map(|c| c.name())
        .unwrap_or("UNKNOWN")
}

fn request_name(code: i32) -> &'static str {
    ringmq_remoting::RequestCode::from_code(code)
        .map(|c| c.name())
        .unwrap_or("UNKNOWN")
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Connect { addr, reason } => write!(f, "cannot connect to {addr}: {reason}"),
            Self::ConnectionClosed { addr, reason } => {
                write!(f, "connection to {addr} closed: {reason}")
            }
            Self::Timeout {
                addr,
                request_code,
                timeout_ms,
            } => write!(
                f,
                "{} ({request_code}) to {addr} got no response within {timeout_ms} ms",
                request_name(*request_code)
            ),
            Self::Response {
                addr,
                request_code,
                code,
                remark,
            } => write!(
                f,
                "{} ({request_code}) to {addr} refused with {} ({code}): {remark}",
                request_name(*request_code),
                code_name(*code)
            ),
            Self::Protocol {
                addr,
                request_code,
                reason,
            } => write!(
                f,
                "{} ({request_code}) to {addr}: malformed response: {reason}",
                request_name(*request_code)
            ),
            Self::Invalid(why) => write!(f, "{why}"),
            Self::Shutdown => write!(f, "the client has been shut down"),
        }
    }
}

impl std::error::Error for ClientError {}

pub type Result<T, E = ClientError> = std::result::Result<T, E>;
