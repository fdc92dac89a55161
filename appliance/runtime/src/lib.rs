//! ringmq runtime (being written).
