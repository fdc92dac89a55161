//! ringmq client (being written).
