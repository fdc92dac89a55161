//! ringmq store (being written).
