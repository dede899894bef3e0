//! The openraft log storage on sled.
