//! Message formats (`message-format.md`): property string, batch body, the stored
//! CommitLog record, message ids, tagsCode, compression.

pub mod batch;
pub mod compress;
pub mod id;
pub mod properties;
pub mod record;
pub mod sysflag;
pub mod tags;
