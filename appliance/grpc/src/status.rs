//! v2 `Status` values: success, refusals the endpoint decides itself, and the mapping of a
//! broker's Remoting response code to the v2 code a 5.x SDK acts on (upstream proxy's
//! `ResponseBuilder`, widened so each refusal the broker can give keeps its meaning:
//! upstream maps every code it does not list to INTERNAL_SERVER_ERROR).

use ringmq_remoting::ResponseCode;

use crate::bridge::BridgeError;
use crate::pb::{Code, Status};

pub(crate) fn ok() -> Status {
    Status {
        code: Code::Ok as i32,
        message: "OK".into(),
    }
}

pub(crate) fn status(code: Code, message: impl Into<String>) -> Status {
    Status {
        code: code as i32,
        message: message.into(),
    }
}

pub(crate) fn is_ok(s: &Status) -> bool {
    s.code == Code::Ok as i32
}

/// The status of a response with per-entry statuses: their common one, MULTIPLE_RESULTS
/// when they differ, INTERNAL_SERVER_ERROR (`empty`) when there are none.
pub(crate) fn overall<'a>(
    mut entries: impl Iterator<Item = Option<&'a Status>>,
    empty: &str,
) -> Status {
    let Some(first) = entries.next().flatten().cloned() else {
        return status(Code::InternalServerError, empty);
    };
    if entries.all(|s| s.map(|s| s.code) == Some(first.code)) {
        first
    } else {
        status(Code::MultipleResults, "the entries have different results")
    }
}

/// The v2 code for a broker answer with Remoting `code`.
pub(crate) fn code_of(code: i32) -> Code {
    use ResponseCode as R;
    let Some(code) = ResponseCode::from_code(code) else {
        return Code::InternalServerError;
    };
    match code {
        R::Success => Code::Ok,
        R::SystemBusy | R::FlowControl | R::PollingFull => Code::TooManyRequests,
        R::RequestCodeNotSupported => Code::NotImplemented,
        R::SubscriptionGroupNotExist => Code::ConsumerGroupNotFound,
        R::TopicNotExist => Code::TopicNotFound,
        R::NoPermission => Code::Forbidden,
        R::MessageIllegal | R::InvalidParameter => Code::BadRequest,
        R::SubscriptionParseFailed => Code::IllegalFilterExpression,
        R::FlushDiskTimeout => Code::MasterPersistenceTimeout,
        R::FlushSlaveTimeout => Code::SlavePersistenceTimeout,
        R::SlaveNotAvailable => Code::HaNotAvailable,
        R::ServiceNotAvailable => Code::Forbidden,
        R::VersionNotSupported => Code::VersionUnsupported,
        R::NoMessage | R::PullNotFound | R::PollingTimeout | R::QueryNotFound => {
            Code::MessageNotFound
        }
        _ => Code::InternalServerError,
    }
}

/// The v2 status of a broker answer.
pub(crate) fn from_remoting(code: i32, remark: Option<&str>) -> Status {
    let v2 = code_of(code);
    if v2 == Code::Ok {
        return ok();
    }
    let message = match remark {
        Some(r) if !r.is_empty() => r.to_string(),
        _ => format!("the broker answered code {code}"),
    };
    status(v2, message)
}

/// The status of a call the bridge could not complete.
pub(crate) fn from_bridge(e: BridgeError) -> Status {
    match e {
        BridgeError::Busy(why) => status(Code::TooManyRequests, why),
        BridgeError::Stopped => status(Code::InternalServerError, "the broker is shutting down"),
        BridgeError::Read(why) => status(Code::InternalServerError, why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broker_codes_keep_their_meaning() {
        assert_eq!(code_of(0), Code::Ok);
        assert_eq!(code_of(2), Code::TooManyRequests);
        assert_eq!(code_of(3), Code::NotImplemented);
        assert_eq!(code_of(17), Code::TopicNotFound);
        assert_eq!(code_of(26), Code::ConsumerGroupNotFound);
        assert_eq!(code_of(10), Code::MasterPersistenceTimeout);
        assert_eq!(code_of(12), Code::SlavePersistenceTimeout);
        assert_eq!(code_of(11), Code::HaNotAvailable);
        assert_eq!(code_of(1), Code::InternalServerError);
        assert_eq!(code_of(123_456), Code::InternalServerError);
        let s = from_remoting(16, Some("no permission to write"));
        assert_eq!(
            (s.code, s.message.as_str()),
            (Code::Forbidden as i32, "no permission to write")
        );
        assert_eq!(from_remoting(0, None), ok());
    }

    #[test]
    fn per_entry_statuses_aggregate_to_one_or_multiple_results() {
        let busy = status(Code::TooManyRequests, "busy");
        assert_eq!(
            overall([Some(&ok()), Some(&ok())].into_iter(), "none"),
            ok()
        );
        assert_eq!(overall([Some(&busy)].into_iter(), "none"), busy);
        let mixed = overall([Some(&ok()), Some(&busy)].into_iter(), "none");
        assert_eq!(mixed.code, Code::MultipleResults as i32);
        let empty = overall(std::iter::empty(), "none");
        assert_eq!(
            (empty.code, empty.message.as_str()),
            (Code::InternalServerError as i32, "none")
        );
    }
}
