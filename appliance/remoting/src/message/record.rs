//! The stored CommitLog record codec (being written by the store helper).
