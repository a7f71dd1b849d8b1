//! Writ's admin API service (`/v1`) and the operations desk (`/console`); the `writ admin` CLI
//! is the `writ-admin-cli` crate beside this one, a client of the API.
//!
//! Architecture invariant: this crate talks to the ledger only through
//! `writ_client::Ledger`; it never touches Raft or RocksDB.
#![recursion_limit = "256"]

mod audit;
mod catalogs;
mod console;
mod credentials;
pub mod enroll;
pub mod error;
mod health;
mod oauth;
mod openapi;
mod operations;
mod operators;
mod refusals;
pub mod service;
pub mod signing;
mod tokens;
pub mod upstreams;
mod work;

pub use service::{router, AdminConfig, BackupChunks, BackupSource};
