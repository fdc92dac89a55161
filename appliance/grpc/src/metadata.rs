//! What every RPC carries in its gRPC metadata: the client id (`x-mq-client-id`, required,
//! as upstream), the peer address, and the time the caller will wait (`grpc-timeout`).

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use crate::pb::{Code, Status};
use crate::status::status;

pub(crate) const CLIENT_ID: &str = "x-mq-client-id";
pub(crate) const LANGUAGE: &str = "x-mq-language";
/// Longest client id accepted: a hostname, a pid, a counter and a timestamp fit well within.
pub(crate) const MAX_CLIENT_ID_BYTES: usize = 256;

/// Who is calling.
#[derive(Debug, Clone)]
pub(crate) struct Caller {
    pub client_id: Arc<str>,
    pub peer: SocketAddr,
    /// The Remoting language name (`PYTHON`, `NODE_JS`, …) for the broker's client tables.
    pub language: String,
    /// How long the caller waits for this call, from `grpc-timeout`.
    pub deadline: Option<Duration>,
}

impl Caller {
    pub(crate) fn of<T>(request: &tonic::Request<T>) -> Result<Caller, Status> {
        let md = request.metadata();
        let text = |k: &str| md.get(k).and_then(|v| v.to_str().ok()).map(str::trim);
        let client_id = match text(CLIENT_ID) {
            Some(id) if !id.is_empty() && id.len() <= MAX_CLIENT_ID_BYTES => id,
            Some(id) if !id.is_empty() => {
                return Err(status(
                    Code::ClientIdRequired,
                    format!("client id is longer than {MAX_CLIENT_ID_BYTES} bytes"),
                ))
            }
            _ => return Err(status(Code::ClientIdRequired, "client id cannot be empty")),
        };
        let language = match text(LANGUAGE).unwrap_or("") {
            // Node.js sends "HTTP"; upstream's LanguageCode has both names.
            "" => "OTHER".to_string(),
            l => l.to_ascii_uppercase(),
        };
        Ok(Caller {
            client_id: Arc::from(client_id),
            peer: request
                .remote_addr()
                .unwrap_or(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))),
            language,
            deadline: text("grpc-timeout").and_then(parse_grpc_timeout),
        })
    }
}

/// `grpc-timeout`: at most 8 digits and a unit (H, M, S, m, u, n).
pub(crate) fn parse_grpc_timeout(v: &str) -> Option<Duration> {
    if v.len() < 2 || v.len() > 9 {
        return None;
    }
    let (digits, unit) = v.split_at(v.len() - 1);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_parse_in_every_unit_and_bad_ones_do_not() {
        assert_eq!(parse_grpc_timeout("23S"), Some(Duration::from_secs(23)));
        assert_eq!(parse_grpc_timeout("2M"), Some(Duration::from_secs(120)));
        assert_eq!(parse_grpc_timeout("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_grpc_timeout("500m"), Some(Duration::from_millis(500)));
        assert_eq!(parse_grpc_timeout("7u"), Some(Duration::from_micros(7)));
        assert_eq!(parse_grpc_timeout("9n"), Some(Duration::from_nanos(9)));
        assert_eq!(parse_grpc_timeout("S"), None);
        assert_eq!(parse_grpc_timeout("12x"), None);
        assert_eq!(parse_grpc_timeout("123456789S"), None);
        assert_eq!(parse_grpc_timeout("-1S"), None);
    }
}
