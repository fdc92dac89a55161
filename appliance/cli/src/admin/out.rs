//! Where admin commands write: the mqadmin text (default) or one JSON document per result
//! (`--json`), plus the error type that turns client failures into one line naming the
//! name server or broker that failed and why.

use std::fmt::Write as _;
use std::io::Write as _;

use ringmq_client::ClientError;
use ringmq_remoting::json::Value;
use ringmq_remoting::{RequestCode, ResponseCode};

/// Output sink of one command run.
pub struct Out {
    json: bool,
    /// `Some` in unit tests: everything written to stdout is kept here instead.
    captured: Option<String>,
}

impl Out {
    pub fn stdout(json: bool) -> Self {
        Self {
            json,
            captured: None,
        }
    }

    /// An `Out` that keeps its text for inspection (tests).
    #[cfg(test)]
    pub fn capture(json: bool) -> Self {
        Self {
            json,
            captured: Some(String::new()),
        }
    }

    #[cfg(test)]
    pub fn text(&self) -> &str {
        self.captured.as_deref().unwrap_or("")
    }

    fn write(&mut self, s: &str) {
        match &mut self.captured {
            Some(buf) => buf.push_str(s),
            None => {
                // A closed pipe (`mqadmin topicList | head`) is not an error worth a panic.
                let mut stdout = std::io::stdout().lock();
                let _ = stdout.write_all(s.as_bytes());
                let _ = stdout.flush();
            }
        }
    }

    /// A line of mqadmin text (suppressed under `--json`).
    pub fn line(&mut self, s: impl AsRef<str>) {
        if !self.json {
            let mut text = s.as_ref().to_string();
            text.push('\n');
            self.write(&text);
        }
    }

    /// Text without a trailing newline (suppressed under `--json`).
    pub fn raw(&mut self, s: impl AsRef<str>) {
        if !self.json {
            self.write(s.as_ref());
        }
    }

    /// The JSON document of a result (only under `--json`), one per line.
    pub fn json(&mut self, v: Value) {
        if self.json {
            let mut text = v.to_json();
            text.push('\n');
            self.write(&text);
        }
    }

    /// A non-fatal problem (one broker of many failed): one line on stderr, both modes.
    pub fn warn(&mut self, s: impl AsRef<str>) {
        match &mut self.captured {
            Some(buf) => {
                let _ = writeln!(buf, "WARN {}", s.as_ref());
            }
            None => eprintln!("mqadmin: {}", s.as_ref()),
        }
    }
}

/// Why a command failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminError {
    /// Bad flags or values: exit 2.
    Usage(String),
    /// A server refused, was unreachable, or answered nonsense: exit 1.
    Failed(String),
}

impl AdminError {
    pub fn failed(why: impl Into<String>) -> Self {
        Self::Failed(why.into())
    }

    pub fn message(&self) -> &str {
        match self {
            Self::Usage(m) | Self::Failed(m) => m,
        }
    }

    /// The broker's or name server's response code, when the failure is a refusal.
    pub fn is_code(e: &ClientError, code: ResponseCode) -> bool {
        e.response_code() == Some(code.code())
    }
}

impl From<String> for AdminError {
    fn from(s: String) -> Self {
        Self::Usage(s)
    }
}

pub type AResult<T> = Result<T, AdminError>;

/// Which kind of server a call went to, for error lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Namesrv,
    Broker,
    Controller,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Namesrv => "name server",
            Role::Broker => "broker",
            Role::Controller => "controller",
        }
    }
}

fn request_name(code: i32) -> String {
    RequestCode::from_code(code)
        .map(|c| c.name().to_string())
        .unwrap_or_else(|| format!("request {code}"))
}

/// One line for a client failure: `broker 127.0.0.1:10911 refused GET_TOPIC_STATS_INFO:
/// TOPIC_NOT_EXIST (17) ...`.
pub fn describe(role: Role, e: &ClientError) -> String {
    let who = |addr: &str| {
        if addr.is_empty() || addr == "namesrv" {
            role.name().to_string()
        } else {
            format!("{} {addr}", role.name())
        }
    };
    let one_line = |s: &str| s.replace(['\n', '\r'], " ");
    match e {
        ClientError::Connect { addr, reason } => {
            format!("{} is unreachable: {}", who(addr), one_line(reason))
        }
        ClientError::ConnectionClosed { addr, reason } => {
            format!("{} closed the connection: {}", who(addr), one_line(reason))
        }
        ClientError::Timeout {
            addr,
            request_code,
            timeout_ms,
        } => format!(
            "{} did not answer {} within {timeout_ms} ms",
            who(addr),
            request_name(*request_code)
        ),
        ClientError::Response {
            addr,
            request_code,
            code,
            remark,
        } => {
            let code_name = ResponseCode::from_code(*code)
                .map(|c| c.name())
                .unwrap_or("UNKNOWN");
            let mut s = format!(
                "{} refused {}: {code_name} ({code})",
                who(addr),
                request_name(*request_code)
            );
            if !remark.is_empty() {
                s.push_str(": ");
                s.push_str(&one_line(remark));
            }
            s
        }
        ClientError::Protocol {
            addr,
            request_code,
            reason,
        } => format!(
            "{} sent a malformed {} response: {}",
            who(addr),
            request_name(*request_code),
            one_line(reason)
        ),
        ClientError::Invalid(why) => one_line(why),
        ClientError::Shutdown => "the client stopped before the call finished".into(),
    }
}

/// Extension turning client results into admin results with the failing server named.
pub trait At<T> {
    fn at(self, role: Role) -> AResult<T>;
    /// A name-server call.
    fn ns(self) -> AResult<T>
    where
        Self: Sized,
    {
        self.at(Role::Namesrv)
    }
    /// A broker call.
    fn br(self) -> AResult<T>
    where
        Self: Sized,
    {
        self.at(Role::Broker)
    }
}

impl<T> At<T> for Result<T, ClientError> {
    fn at(self, role: Role) -> AResult<T> {
        self.map_err(|e| AdminError::Failed(describe(role, &e)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_server_and_the_reason_on_one_line() {
        let e = ClientError::Connect {
            addr: "127.0.0.1:1".into(),
            reason: "Connection refused (os error 111)".into(),
        };
        assert_eq!(
            describe(Role::Namesrv, &e),
            "name server 127.0.0.1:1 is unreachable: Connection refused (os error 111)"
        );
        let e = ClientError::Response {
            addr: "10.0.0.1:10911".into(),
            request_code: 202,
            code: 17,
            remark: "topic T\nnot exist".into(),
        };
        let s = describe(Role::Broker, &e);
        assert_eq!(s, "broker 10.0.0.1:10911 refused GET_TOPIC_STATS_INFO: TOPIC_NOT_EXIST (17): topic T not exist");
        let e = ClientError::Timeout {
            addr: "h:1".into(),
            request_code: 106,
            timeout_ms: 5000,
        };
        assert_eq!(
            describe(Role::Namesrv, &e),
            "name server h:1 did not answer GET_BROKER_CLUSTER_INFO within 5000 ms"
        );
    }

    #[test]
    fn json_mode_hides_text_and_text_mode_hides_json() {
        let mut o = Out::capture(false);
        o.line("a");
        o.json(Value::str("x"));
        assert_eq!(o.text(), "a\n");
        let mut o = Out::capture(true);
        o.line("a");
        o.raw("b");
        o.json(Value::str("x"));
        assert_eq!(o.text(), "\"x\"\n");
    }
}
