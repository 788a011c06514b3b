//! The fast CPU engine (being written).
