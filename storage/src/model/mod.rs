//! The domain model in Nomad's vocabulary.
