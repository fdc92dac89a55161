//! ringmq namesrv (being written).
