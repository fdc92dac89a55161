//! Message filters for pull: tags and SQL92 (features.md §i).

pub mod sql92;
pub mod tag;
