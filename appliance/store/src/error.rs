//! `StoreError`: failures to open, recover or maintain the store, each carrying the path
//! (and offset where one applies) an operator needs to act on it.

use std::io;
use std::path::PathBuf;

/// A store-level failure. Put and get outcomes are statuses, not errors.
#[derive(Debug)]
pub enum StoreError {
    /// An I/O call failed on a file.
    Io {
        op: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    /// A CommitLog segment whose length is not the configured size (not the last one).
    BadSegmentSize {
        path: PathBuf,
        expected_bytes: u64,
        actual_bytes: u64,
    },
    /// A file name that should be a 20-digit offset is not.
    BadFileName { path: PathBuf },
    /// Another process holds the store's `lock` file.
    Locked { path: PathBuf },
    /// A configuration value the store cannot work with.
    Config(String),
    /// Structural damage that recovery cannot repair by truncation.
    Corrupt {
        path: PathBuf,
        offset: u64,
        reason: String,
    },
}

impl StoreError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        StoreError::Io {
            op,
            path: path.into(),
            source,
        }
    }
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Io { op, path, source } => write!(f, "{op} {}: {source}", path.display()),
            StoreError::BadSegmentSize { path, expected_bytes, actual_bytes } => write!(
                f,
                "{} is {actual_bytes} bytes but mappedFileSize is {expected_bytes}; fix the config or move the file away",
                path.display()
            ),
            StoreError::BadFileName { path } => {
                write!(f, "{} is not named by a 20-digit offset", path.display())
            }
            StoreError::Locked { path } => write!(
                f,
                "{} is locked by another process: is a broker already running on this store?",
                path.display()
            ),
            StoreError::Config(msg) => write!(f, "store config: {msg}"),
            StoreError::Corrupt { path, offset, reason } => {
                write!(f, "{} at offset {offset}: {reason}", path.display())
            }
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StoreError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
