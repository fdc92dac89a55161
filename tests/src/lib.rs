//! Shared helpers for ringmq's integration tests.
