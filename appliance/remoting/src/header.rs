//! Typed custom headers: each request's `extFields` as a Rust struct (`headers.md`).
//! OWNER: remoting-core helper.

use crate::command::ExtFields;

/// Why a custom header could not be read: names the field, so the error remark tells a
/// client developer exactly what to fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderError {
    /// A required field (`@CFNotNull` upstream) is absent.
    Missing { field: &'static str },
    /// A field is present but its text is not a valid value of its type.
    Malformed { field: &'static str, value: String, expected: &'static str },
}

impl std::fmt::Display for HeaderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Missing { field } => write!(f, "the custom header field {field} is null"),
            Self::Malformed { field, value, expected } => {
                write!(f, "the custom header field {field}={value:?} is not a valid {expected}")
            }
        }
    }
}

impl std::error::Error for HeaderError {}

/// A custom header: decoded from and encoded into `extFields`.
pub trait CommandHeader: Sized {
    fn decode(fields: &ExtFields) -> Result<Self, HeaderError>;
    fn encode(&self, fields: &mut ExtFields);
}
