//! (being written by the namesrv helper)
