//! Harnesses for teamster cluster tests: in-process clusters, process clusters on loopback,
//! docker-compose clusters, fault injection and invariant checkers.
