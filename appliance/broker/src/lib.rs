//! ringmq broker (being written).
