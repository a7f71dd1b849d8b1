//! Shared helpers for the cluster tier: a harness that runs real `writ node` processes and an
//! admin API client. Bounded polling and the test log come from the fast tier's crate.

pub mod desk;
pub mod idp;
pub mod mcp;
pub mod otlp;
pub mod pki;
pub mod procs;
pub mod sim;
pub mod tools;
pub mod upstream;

pub use writ_tests_fast::{dashboard_queries, eventually, init_test_log};
