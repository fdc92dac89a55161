//! (being written by the message helper)
